//! ListOffsets (v1–5): the log start (-2), the high watermark (-1), or the
//! exact record for a time — the first whose time is that or later, with
//! its time (`partition_log::record_for_time`); none that late is offset
//! and time -1, as Kafka answers.

use super::errors::{code, kafka_code};
use super::versions::key;
use super::wire::{Malformed, Reader, Writer};
use crate::auth::authorize::may;
use crate::handler::Failure;
use crate::reply::Dispatched;
use crate::shard::{Owner, Shard};
use crate::storage::partition_log;
use protocol::acl::{Operation, ResourceType};
use std::rc::Rc;

/// Kafka's "latest" and "earliest".
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;

/// One partition's answer: error, time, offset, leader epoch.
type Found = (i16, i64, i64, i32);

/// Handles a ListOffsets request.
pub fn handle(
    shard: &Rc<Shard>,
    version: i16,
    r: &mut Reader<'_>,
    principal: &str,
) -> Result<Dispatched, Malformed> {
    r.i32("replica_id")?;
    if version >= 2 {
        r.i8("isolation_level")?;
    }
    let topic_count = r.array(6, "topics")?.unwrap_or(0);
    let mut topics = Vec::with_capacity(topic_count);
    for _ in 0..topic_count {
        let name = r.string("topic")?.to_string();
        let count = r.array(12, "partitions")?.unwrap_or(0);
        let mut partitions = Vec::with_capacity(count);
        for _ in 0..count {
            let partition = r.i32("partition_index")?;
            let leader_epoch = if version >= 4 {
                r.i32("current_leader_epoch")?
            } else {
                -1
            };
            let timestamp = r.i64("timestamp")?;
            partitions.push((partition, leader_epoch, timestamp));
        }
        topics.push((name, partitions));
    }
    let shard = shard.clone();
    let principal = principal.to_string();
    Ok(Dispatched::Later(Box::pin(async move {
        let mut w = Writer::default();
        if version >= 2 {
            w.i32(0); // throttle_time_ms
        }
        w.array(topics.len());
        for (name, partitions) in &topics {
            w.string(name);
            w.array(partitions.len());
            for &(partition, leader_epoch, timestamp) in partitions {
                let (error, time, offset, epoch) =
                    find(&shard, &principal, name, partition, leader_epoch, timestamp).await;
                w.i32(partition);
                w.i16(error);
                w.i64(time);
                w.i64(offset);
                if version >= 4 {
                    w.i32(epoch);
                }
            }
        }
        Some(super::wire::answer(
            key::LIST_OFFSETS,
            w.out,
            crate::reply::Payload::None,
        ))
    })))
}

/// The partition's log on this shard, if `principal` may describe the
/// topic and this shard leads it; otherwise Kafka's error for why not.
pub(super) fn described_log(
    shard: &Shard,
    principal: &str,
    topic: &str,
    partition: i32,
) -> Result<(u32, crate::storage::partition_log::SharedLog), i16> {
    if !may(
        shard,
        principal,
        ResourceType::Topic,
        topic,
        Operation::Describe,
    ) {
        return Err(code::TOPIC_AUTHORIZATION_FAILED);
    }
    let Ok(partition) = u32::try_from(partition) else {
        return Err(code::UNKNOWN_TOPIC_OR_PARTITION);
    };
    match crate::handler::locate(shard, topic, partition) {
        Ok(Owner::Here(log)) => Ok((partition, log)),
        Ok(Owner::Shard(_) | Owner::Broker(_)) => Err(code::NOT_LEADER_OR_FOLLOWER),
        Err(failure) => Err(kafka_code(failure.code)),
    }
}

async fn find(
    shard: &Shard,
    principal: &str,
    topic: &str,
    partition: i32,
    leader_epoch: i32,
    timestamp: i64,
) -> Found {
    let refused = |error: i16| (error, -1, -1, -1);
    let (partition, log) = match described_log(shard, principal, topic, partition) {
        Ok(found) => found,
        Err(error) => return refused(error),
    };
    let mut epoch = -1;
    if let Some(replica) = shard.replica(topic, partition) {
        if let Err(failure) = crate::handler::replicated::check_leader(&replica, leader_epoch) {
            return refused(kafka_code(failure.code));
        }
        epoch = replica.borrow().epoch() as i32;
    }
    let (start, visible) = {
        let l = log.borrow();
        (l.start_offset() as i64, l.visible_offset() as i64)
    };
    match timestamp {
        LATEST => (code::NONE, -1, visible, epoch),
        EARLIEST => (code::NONE, -1, start, epoch),
        time if time < 0 => refused(code::INVALID_REQUEST),
        time => match partition_log::record_for_time(&log, time as u64).await {
            Ok((offset, Some(at))) => (code::NONE, at, offset as i64, epoch),
            // No record that late: Kafka's "none".
            Ok((offset, None)) if offset as i64 >= log.borrow().visible_offset() as i64 => {
                (code::NONE, -1, -1, epoch)
            }
            // A batch whose records could not be read: its start, no
            // earlier than the time asked for.
            Ok((offset, None)) => (code::NONE, time, offset as i64, epoch),
            Err(error) => refused(kafka_code(Failure::from(error).code)),
        },
    }
}
