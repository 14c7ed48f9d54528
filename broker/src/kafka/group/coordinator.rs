//! FindCoordinator (v0–2): the node of the shard that coordinates a group,
//! elected now if no shard does ([`super::coordinated`] explains how).
//! Transactions are not offered: a transaction coordinator is never
//! found.

use super::super::errors::code;
use super::super::node_id;
use super::super::versions::key;
use super::super::wire::{answer, Malformed, Reader, Writer};
use crate::auth::authorize::may_describe;
use crate::reply::{Dispatched, Payload};
use crate::shard::Shard;
use coordinator::kafka_groups::{Holder, KafkaGroupAnswer, KafkaGroupOp};
use protocol::acl::ResourceType;
use std::rc::Rc;

/// Kafka's `key_type` of a group.
const GROUP: i8 = 0;

fn body(
    version: i16,
    error: i16,
    message: Option<&str>,
    node: Option<(i32, &str, i32)>,
) -> Vec<u8> {
    let mut w = Writer::default();
    if version >= 1 {
        w.i32(0); // throttle_time_ms
    }
    w.i16(error);
    if version >= 1 {
        w.nullable_string(message);
    }
    let (id, host, port) = node.unwrap_or((-1, "", -1));
    w.i32(id);
    w.string(host);
    w.i32(port);
    w.out
}

/// The node id, host and port of a shard's Kafka listener, if its broker
/// is live and has one.
fn endpoint(shard: &Shard, holder: Holder) -> Option<(i32, String, i32)> {
    let brokers = shard.brokers.borrow();
    let broker = brokers.iter().find(|b| b.broker_id == holder.broker)?;
    let endpoint = broker
        .shards
        .iter()
        .find(|s| u32::from(s.shard_id) == holder.shard)?;
    let port = endpoint.kafka_port?;
    Some((
        node_id(holder.broker, endpoint.shard_id),
        endpoint.host.clone(),
        i32::from(port),
    ))
}

/// Handles a FindCoordinator request.
pub fn handle(
    shard: &Rc<Shard>,
    version: i16,
    r: &mut Reader<'_>,
    principal: &str,
) -> Result<Dispatched, Malformed> {
    let group = r.string("key")?.to_string();
    let key_type = if version >= 1 {
        r.i8("key_type")?
    } else {
        GROUP
    };
    let now = |error: i16, message: &str| {
        Ok(Dispatched::Ready(answer(
            key::FIND_COORDINATOR,
            body(version, error, Some(message), None),
            Payload::None,
        )))
    };
    if key_type != GROUP {
        return now(
            code::COORDINATOR_NOT_AVAILABLE,
            "transactions are not offered by this broker",
        );
    }
    if !super::valid_name(&group) {
        return now(
            code::INVALID_GROUP_ID,
            "group ids here follow the topic naming rule: [A-Za-z0-9._-], at most 249 bytes",
        );
    }
    if !may_describe(shard, principal, ResourceType::Group, &group) {
        return now(
            code::GROUP_AUTHORIZATION_FAILED,
            "not authorized for the group",
        );
    }
    let shard = shard.clone();
    Ok(Dispatched::Later(Box::pin(async move {
        let op = KafkaGroupOp::Coordinator {
            candidate: super::candidate(&shard, &group),
            group,
        };
        let found = match super::ask(&shard, op).await {
            Ok(KafkaGroupAnswer::Coordinator(holder)) => endpoint(&shard, holder).ok_or((
                code::COORDINATOR_NOT_AVAILABLE,
                "its broker is not live yet",
            )),
            Ok(_) => Err((code::COORDINATOR_NOT_AVAILABLE, "no coordinator")),
            Err(_) => Err((
                code::COORDINATOR_NOT_AVAILABLE,
                "the registry did not answer",
            )),
        };
        let body = match found {
            Ok((id, host, port)) => body(version, code::NONE, None, Some((id, &host, port))),
            Err((error, message)) => body(version, error, Some(message), None),
        };
        Some(answer(key::FIND_COORDINATOR, body, Payload::None))
    })))
}
