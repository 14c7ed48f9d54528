//! Fetch (v4–11): each partition's records from the first batch whose last
//! offset reaches the one asked for — at a batch start at once, inside a
//! batch through the segment's sparse index — sent with sendfile between
//! the answer's fields (`Payload::Parts`): not a byte of a record is copied.
//! The high watermark and last stable offset are what consumers may see
//! (the flushed end, and on a replicated partition the high watermark).
//! Sessionless (KIP-227's session id 0): every request names its
//! partitions. A caught-up consumer's request waits up to its
//! `max_wait_ms` (at most the broker's long-poll bound) for any of them.

use super::errors::{code, kafka_code};
use super::versions::key;
use super::wire::{Malformed, Reader, Writer};
use crate::auth::authorize::may;
use crate::handler::give_way::GiveWay;
use crate::handler::Failure;
use crate::limits::{FETCH_BYTES_MAX, FETCH_WAIT_MS_MAX};
use crate::reply::{Dispatched, Part, Payload};
use crate::shard::{Owner, Shard};
use crate::storage::partition_log::{self, Read};
use crate::storage::{FetchSlice, SharedLog, StorageError};
use protocol::acl::{Operation, ResourceType};
use protocol::stored::MessageFormat;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

/// One partition asked for.
struct Wanted {
    partition: i32,
    leader_epoch: i32,
    offset: i64,
    max_bytes: i32,
}

/// One partition's answer.
struct Got {
    error: i16,
    high_watermark: i64,
    log_start: i64,
    slice: Option<FetchSlice>,
}

impl Got {
    fn refused(error: i16) -> Got {
        Got {
            error,
            high_watermark: -1,
            log_start: -1,
            slice: None,
        }
    }

    fn bytes(&self) -> u32 {
        self.slice.as_ref().map_or(0, |s| s.len)
    }
}

/// Handles a Fetch request.
pub fn handle(
    shard: &Rc<Shard>,
    give_way: &Rc<GiveWay>,
    request_id: u32,
    version: i16,
    r: &mut Reader<'_>,
    principal: &str,
) -> Result<Dispatched, Malformed> {
    let _replica_id = r.i32("replica_id")?;
    let max_wait_ms = r.i32("max_wait_ms")?;
    let _min_bytes = r.i32("min_bytes")?;
    let max_bytes = r.i32("max_bytes")?;
    let _isolation_level = r.i8("isolation_level")?;
    if version >= 7 {
        r.i32("session_id")?;
        r.i32("session_epoch")?;
    }
    let topic_count = r.array(6, "topics")?.unwrap_or(0);
    let mut topics: Vec<(String, Vec<Wanted>)> = Vec::with_capacity(topic_count);
    for _ in 0..topic_count {
        let name = r.string("topic")?;
        let count = r.array(16, "partitions")?.unwrap_or(0);
        let mut partitions = Vec::with_capacity(count);
        for _ in 0..count {
            let partition = r.i32("partition")?;
            let leader_epoch = if version >= 9 {
                r.i32("current_leader_epoch")?
            } else {
                -1
            };
            let offset = r.i64("fetch_offset")?;
            if version >= 5 {
                r.i64("log_start_offset")?;
            }
            let max_bytes = r.i32("partition_max_bytes")?;
            partitions.push(Wanted {
                partition,
                leader_epoch,
                offset,
                max_bytes,
            });
        }
        topics.push((name.to_string(), partitions));
    }
    // The rest (forgotten topics, the rack) only matters to fetch sessions
    // and follower fetching, which this listener does not offer.
    let wait = Duration::from_millis(max_wait_ms.clamp(0, FETCH_WAIT_MS_MAX as i32) as u64);
    let max_bytes = max_bytes.clamp(0, FETCH_BYTES_MAX as i32) as u32;
    let shard = shard.clone();
    let give_way = give_way.clone();
    let principal = principal.to_string();
    Ok(Dispatched::Later(Box::pin(async move {
        let mut got = read_all(&shard, &principal, &topics, max_bytes).await;
        let empty = got
            .iter()
            .flatten()
            .all(|g| g.error == code::NONE && g.bytes() == 0);
        if empty && !wait.is_zero() {
            wait_for_any(&shard, &topics, wait, &give_way, request_id).await;
            got = read_all(&shard, &principal, &topics, max_bytes).await;
        }
        crate::metrics::bump(&shard.metrics.counters.fetch_requests_total, 1);
        Some(answer(version, &topics, got))
    })))
}

/// Reads every partition asked for, `max_bytes` over all (the first
/// partition with data gets its own maximum whatever is left, and at least
/// its first batch whole: Kafka's KIP-74, so a client whose maximum is
/// below a batch's size still moves on).
async fn read_all(
    shard: &Rc<Shard>,
    principal: &str,
    topics: &[(String, Vec<Wanted>)],
    max_bytes: u32,
) -> Vec<Vec<Got>> {
    let mut left = max_bytes;
    let mut first = true;
    let mut all = Vec::with_capacity(topics.len());
    for (topic, partitions) in topics {
        let mut got = Vec::with_capacity(partitions.len());
        for wanted in partitions {
            // A partition's own maximum, never past the broker's bound
            // (a client's `i32::MAX` is a 1 GiB segment otherwise).
            let own = wanted.max_bytes.clamp(0, FETCH_BYTES_MAX as i32) as u32;
            let budget = if first { own } else { own.min(left) };
            let read = read_one(shard, principal, topic, wanted, budget, first).await;
            left = left.saturating_sub(read.bytes());
            first &= read.bytes() == 0;
            got.push(read);
        }
        all.push(got);
    }
    all
}

/// The log of a partition this shard leads, or the error to answer.
fn local_log(
    shard: &Shard,
    principal: &str,
    topic: &str,
    wanted: &Wanted,
) -> Result<(SharedLog, u32), i16> {
    if !may(
        shard,
        principal,
        ResourceType::Topic,
        topic,
        Operation::Read,
    ) {
        return Err(code::TOPIC_AUTHORIZATION_FAILED);
    }
    let partition =
        u32::try_from(wanted.partition).map_err(|_| code::UNKNOWN_TOPIC_OR_PARTITION)?;
    let log = match crate::handler::locate(shard, topic, partition) {
        Ok(Owner::Here(log)) => log,
        Ok(Owner::Shard(_) | Owner::Broker(_)) => return Err(code::NOT_LEADER_OR_FOLLOWER),
        Err(failure) => return Err(kafka_code(failure.code)),
    };
    if log.borrow().settings().format != MessageFormat::Two {
        return Err(code::UNSUPPORTED_FOR_MESSAGE_FORMAT);
    }
    if let Some(replica) = shard.replica(topic, partition) {
        crate::handler::replicated::check_leader(&replica, wanted.leader_epoch)
            .map_err(|f| kafka_code(f.code))?;
    }
    Ok((log, partition))
}

/// One partition's read of at most `bytes_max` — or, with `whole_first`,
/// of its first batch whole when that batch is larger.
async fn read_one(
    shard: &Shard,
    principal: &str,
    topic: &str,
    wanted: &Wanted,
    bytes_max: u32,
    whole_first: bool,
) -> Got {
    let log = match local_log(shard, principal, topic, wanted) {
        Ok((log, _)) => log,
        Err(error) => return Got::refused(error),
    };
    let Ok(offset) = u64::try_from(wanted.offset) else {
        return Got::refused(code::OFFSET_OUT_OF_RANGE);
    };
    let tried = log.borrow().try_read(offset, bytes_max);
    let read = match tried {
        Ok(Read::Slice(slice)) => Ok(Some(slice)),
        Ok(Read::NotYet) => Ok(None),
        Ok(Read::Closed { .. } | Read::Locate) => {
            partition_log::read(&log, offset, bytes_max).await
        }
        Err(error) => Err(error),
    };
    let read = match read {
        Ok(Some(slice)) if whole_first && slice.len == bytes_max => {
            whole_first_batch(&log, slice).await
        }
        other => other,
    };
    let l = log.borrow();
    match read {
        Ok(slice) => Got {
            error: code::NONE,
            high_watermark: l.visible_offset() as i64,
            log_start: l.start_offset() as i64,
            slice: slice.filter(|s| s.len > 0),
        },
        Err(error) => Got {
            high_watermark: l.visible_offset() as i64,
            log_start: l.start_offset() as i64,
            ..Got::refused(kafka_code(Failure::from(error).code))
        },
    }
}

/// `slice`, filled by the client's maximum, or its first batch whole when
/// that batch is larger (at most [`FETCH_BYTES_MAX`]: no batch a producer
/// may write is).
async fn whole_first_batch(
    log: &SharedLog,
    slice: FetchSlice,
) -> Result<Option<FetchSlice>, StorageError> {
    let size = partition_log::batch_size_at(log, slice.offset).await?;
    match size {
        Some(size) if size > slice.len && size <= FETCH_BYTES_MAX => {
            partition_log::read(log, slice.offset, size).await
        }
        _ => Ok(Some(slice)),
    }
}

/// Waits until any partition asked for has records past its offset, `wait`
/// is over, or an answer behind this one on the connection is ready.
async fn wait_for_any(
    shard: &Shard,
    topics: &[(String, Vec<Wanted>)],
    wait: Duration,
    give_way: &GiveWay,
    request_id: u32,
) {
    let mut held = Vec::new();
    let mut waits: Vec<Pin<Box<dyn Future<Output = ()>>>> = Vec::new();
    for (topic, partitions) in topics {
        for wanted in partitions {
            let Ok(partition) = u32::try_from(wanted.partition) else {
                continue;
            };
            let Ok(Owner::Here(log)) = shard.locate(topic, partition) else {
                continue;
            };
            let offset = u64::try_from(wanted.offset).unwrap_or(0);
            // Held for the wait: the log flushes for a waiting consumer
            // now, not after the topic's flush interval.
            held.push(partition_log::fetch_waits(&log));
            let watermarks = log.borrow().watermarks();
            waits.push(Box::pin(async move {
                watermarks
                    .wait_until(|| {
                        let l = log.borrow();
                        l.visible_offset() > offset || l.poisoned().is_some() || l.deleted()
                    })
                    .await;
            }));
        }
    }
    let any = poll_fn(|cx| {
        for w in &mut waits {
            if w.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
        }
        Poll::Pending
    });
    futures_lite::future::or(
        any,
        futures_lite::future::or(glommio::timer::sleep(wait), give_way.asked(request_id)),
    )
    .await;
    drop(held);
}

/// The answer: each partition's fields, its records' size, then its
/// records from the segment file.
fn answer(
    version: i16,
    topics: &[(String, Vec<Wanted>)],
    got: Vec<Vec<Got>>,
) -> crate::reply::Response {
    let mut parts = Vec::new();
    let mut w = Writer::default();
    w.i32(0); // throttle_time_ms
    if version >= 7 {
        w.i16(code::NONE);
        w.i32(0); // session_id: no session
    }
    w.array(topics.len());
    for ((topic, partitions), got) in topics.iter().zip(got) {
        w.string(topic);
        w.array(partitions.len());
        for (wanted, got) in partitions.iter().zip(got) {
            w.i32(wanted.partition);
            w.i16(got.error);
            w.i64(got.high_watermark);
            w.i64(got.high_watermark); // last_stable_offset: no transactions
            if version >= 5 {
                w.i64(got.log_start);
            }
            w.array(0); // aborted_transactions
            if version >= 11 {
                w.i32(-1); // preferred_read_replica
            }
            w.i32(got.bytes() as i32);
            if let Some(slice) = got.slice {
                parts.push(Part::Bytes(std::mem::take(&mut w.out)));
                parts.push(Part::File(slice));
            }
        }
    }
    if !w.out.is_empty() {
        parts.push(Part::Bytes(w.out));
    }
    super::wire::answer(key::FETCH, Vec::new(), Payload::Parts(parts))
}
