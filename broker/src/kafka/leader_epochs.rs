//! OffsetForLeaderEpoch (v2–3): where a leader epoch ends on the leader —
//! the largest epoch at or below the one asked for, and the start of the
//! next (or the log end), from the partition's `leader-epochs` file. A
//! consumer that finds its position past that end knows the log was cut
//! under it (KIP-320). A partition with one copy has one epoch, 0.

use super::errors::{code, kafka_code};
use super::versions::key;
use super::wire::{answer, Malformed, Reader, Writer};
use crate::reply::{Dispatched, Payload};
use crate::shard::Shard;

/// One partition's answer: error, epoch, end offset.
fn end_of(
    shard: &Shard,
    principal: &str,
    topic: &str,
    partition: i32,
    current: i32,
    asked: i32,
) -> (i16, i32, i64) {
    let refused = |error: i16| (error, -1, -1);
    let (partition, log) =
        match super::list_offsets::described_log(shard, principal, topic, partition) {
            Ok(found) => found,
            Err(error) => return refused(error),
        };
    let log_end = log.borrow().end_offset();
    let Some(replica) = shard.replica(topic, partition) else {
        return if asked >= 0 {
            (code::NONE, 0, log_end as i64)
        } else {
            (code::NONE, -1, -1)
        };
    };
    if let Err(failure) = crate::handler::replicated::check_leader(&replica, current) {
        return refused(kafka_code(failure.code));
    }
    let (epoch, end) = replica.borrow().epochs.end_for(asked, log_end);
    (code::NONE, epoch, if epoch < 0 { -1 } else { end as i64 })
}

/// Handles an OffsetForLeaderEpoch request.
pub fn handle(
    shard: &Shard,
    version: i16,
    r: &mut Reader<'_>,
    principal: &str,
) -> Result<Dispatched, Malformed> {
    if version >= 3 {
        r.i32("replica_id")?;
    }
    let mut w = Writer::default();
    w.i32(0); // throttle_time_ms
    let topics = r.array(6, "topics")?.unwrap_or(0);
    w.array(topics);
    for _ in 0..topics {
        let topic = r.string("topic")?;
        w.string(topic);
        let partitions = r.array(12, "partitions")?.unwrap_or(0);
        w.array(partitions);
        for _ in 0..partitions {
            let partition = r.i32("partition")?;
            let current = r.i32("current_leader_epoch")?;
            let asked = r.i32("leader_epoch")?;
            let (error, epoch, end) = end_of(shard, principal, topic, partition, current, asked);
            w.i16(error);
            w.i32(partition);
            w.i32(epoch);
            w.i64(end);
        }
    }
    Ok(Dispatched::Ready(answer(
        key::OFFSET_FOR_LEADER_EPOCH,
        w.out,
        Payload::None,
    )))
}
