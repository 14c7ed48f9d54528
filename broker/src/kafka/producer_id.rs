//! InitProducerId (v0–1): an idempotent producer's id from the same blocks
//! as ringlog's own producers' (etcd, or a standalone broker's data
//! directory), epoch 0. The Java client and kafka-python are idempotent by
//! default and cannot produce without it. Transactions are not offered: a
//! transactional id is refused.

use super::errors::{code, kafka_code};
use super::versions::key;
use super::wire::{Malformed, Reader, Writer};
use crate::auth::authorize::may;
use crate::reply::Dispatched;
use crate::shard::Shard;
use protocol::acl::{Operation, ResourceType};
use std::rc::Rc;

/// Handles an InitProducerId request.
pub fn handle(
    shard: &Rc<Shard>,
    _version: i16,
    r: &mut Reader<'_>,
    principal: &str,
) -> Result<Dispatched, Malformed> {
    let transactional_id = r.nullable_string("transactional_id")?;
    r.i32("transaction_timeout_ms")?;
    let answer = |error: i16, id: i64| {
        let mut w = Writer::default();
        w.i32(0); // throttle_time_ms
        w.i16(error);
        w.i64(id);
        w.i16(if id < 0 { -1 } else { 0 });
        super::wire::answer(key::INIT_PRODUCER_ID, w.out, crate::reply::Payload::None)
    };
    if transactional_id.is_some() {
        return Ok(Dispatched::Ready(answer(
            code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            -1,
        )));
    }
    // Kafka's rule for an idempotent producer: it may write somewhere.
    let writes_somewhere = !shard.config.authorization
        || shard
            .topics
            .borrow()
            .keys()
            .any(|t| may(shard, principal, ResourceType::Topic, t, Operation::Write));
    if !writes_somewhere {
        return Ok(Dispatched::Ready(answer(
            code::CLUSTER_AUTHORIZATION_FAILED,
            -1,
        )));
    }
    let (reply, answered) = flume::bounded(1);
    let msg = crate::mailbox::ControlMsg::ProducerId { reply };
    let shard = shard.clone();
    Ok(Dispatched::Later(Box::pin(async move {
        Some(
            match crate::handler::topics::ask_control(&shard, msg, answered).await {
                Ok(id) => answer(code::NONE, id),
                Err(error) => answer(kafka_code(error.code), -1),
            },
        )
    })))
}
