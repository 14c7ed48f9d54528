//! CreatePartitions (v0–1): raises a topic's partition count, as
//! `ringlog topic alter --partitions` does (Alter on the topic). Where the
//! new partitions go is ringlog's placement: an explicit assignment is
//! refused.

use super::errors::{code, kafka_code};
use super::versions::key;
use super::wire::{answer, Malformed, Reader, Writer};
use crate::auth::authorize::may;
use crate::handler::topics::ask_control;
use crate::mailbox::ControlMsg;
use crate::reply::{Dispatched, Payload};
use crate::shard::Shard;
use protocol::acl::{Operation, ResourceType};
use std::rc::Rc;

/// Kafka's INVALID_REPLICA_ASSIGNMENT.
const INVALID_REPLICA_ASSIGNMENT: i16 = 39;

/// One topic's wish: its name, the count, whether it names brokers.
type Wish = (String, i32, bool);

fn read(r: &mut Reader<'_>) -> Result<(Vec<Wish>, bool), Malformed> {
    let count = r.array(10, "topics")?.unwrap_or(0);
    let mut topics = Vec::with_capacity(count);
    for _ in 0..count {
        let name = r.string("name")?.to_string();
        let partitions = r.i32("count")?;
        let assigned = match r.array(4, "assignments")? {
            None => false,
            Some(n) => {
                for _ in 0..n {
                    for _ in 0..r.array(4, "broker_ids")?.unwrap_or(0) {
                        r.i32("broker_id")?;
                    }
                }
                true
            }
        };
        topics.push((name, partitions, assigned));
    }
    r.i32("timeout_ms")?;
    let validate_only = r.bool("validate_only")?;
    Ok((topics, validate_only))
}

/// One topic's outcome.
async fn raise(
    shard: &Shard,
    principal: &str,
    wish: &Wish,
    validate_only: bool,
) -> Result<(), (i16, String)> {
    let (name, count, assigned) = wish;
    if !may(
        shard,
        principal,
        ResourceType::Topic,
        name,
        Operation::Alter,
    ) {
        return Err((
            code::TOPIC_AUTHORIZATION_FAILED,
            format!("{principal} may not alter topic {name:?}"),
        ));
    }
    if *assigned {
        return Err((
            INVALID_REPLICA_ASSIGNMENT,
            "ringlog places new partitions itself: send no assignment".into(),
        ));
    }
    let current = shard
        .topics
        .borrow()
        .get(name)
        .map(|t| t.borrow().partitions);
    let Some(current) = current else {
        return Err((
            code::UNKNOWN_TOPIC_OR_PARTITION,
            format!("no topic {name:?}"),
        ));
    };
    if *count <= current as i32 || *count as u32 > crate::limits::PARTITIONS_MAX {
        return Err((
            code::INVALID_PARTITIONS,
            format!("topic {name:?} has {current} partitions: the new count must be above it and at most {}", crate::limits::PARTITIONS_MAX),
        ));
    }
    if validate_only {
        return Ok(());
    }
    let (reply, answered) = flume::bounded(1);
    let msg = ControlMsg::CreatePartitions {
        name: name.clone(),
        partitions: *count as u32,
        reply,
    };
    ask_control(shard, msg, answered)
        .await
        .map(|_| ())
        .map_err(|e| (kafka_code(e.code), e.message))
}

/// Handles a CreatePartitions request.
pub fn handle(
    shard: &Rc<Shard>,
    _version: i16,
    r: &mut Reader<'_>,
    principal: &str,
) -> Result<Dispatched, Malformed> {
    let (topics, validate_only) = read(r)?;
    let shard = shard.clone();
    let principal = principal.to_string();
    Ok(Dispatched::Later(Box::pin(async move {
        let mut w = Writer::default();
        w.i32(0); // throttle_time_ms
        w.array(topics.len());
        for wish in &topics {
            w.string(&wish.0);
            match raise(&shard, &principal, wish, validate_only).await {
                Ok(()) => {
                    w.i16(code::NONE);
                    w.nullable_string(None);
                }
                Err((error, message)) => {
                    w.i16(error);
                    w.nullable_string(Some(&message));
                }
            }
        }
        Some(answer(key::CREATE_PARTITIONS, w.out, Payload::None))
    })))
}
