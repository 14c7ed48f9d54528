//! MultiFetch: chunks of many partitions of this shard in one answer, as
//! Kafka's Fetch. A follower's link carries every partition it follows on
//! one leader shard in one request (PROTOCOL.md, "MultiFetch"); a consumer
//! of many partitions may do the same, and an idle partition's long-poll
//! then never delays another's messages: the answer comes once any of them
//! has something to say.
//!
//! Each partition is resolved when the request arrives — its errors, and a
//! follower's progress, which the leader's ISR and high watermark count —
//! then the answer waits, if none has news, on all their watermarks at
//! once, and reads them in request order within the request's byte budget.
//! The chunks follow the header in that order, each sent with sendfile.

use super::give_way::GiveWay;
use super::replicated::{check_leader, follower_offsets, not_leader};
use super::{check_topic_id, invalid_header, locate, Dispatched, Failure, Payload, Response};
use crate::limits::{FETCH_BYTES_MAX, FETCH_WAIT_MS_MAX};
use crate::replica::rules::FollowerRead;
use crate::replica::SharedReplica;
use crate::shard::{Owner, Shard};
use crate::storage::partition_log;
use crate::storage::{FetchSlice, SharedLog};
use protocol::codec::multi_fetch::{self, FetchedPart, PARTITIONS_MAX};
use protocol::codec::verify;
use protocol::frame::Api;
use protocol::types::{BrokerId, PartitionId};
use protocol::{wire, ErrorCode};
use std::collections::BTreeSet;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// One requested partition, resolved.
pub struct Part {
    topic: String,
    partition: PartitionId,
    offset: u64,
    bytes_max: u32,
    what: What,
}

enum What {
    /// Answered with this error, without waiting.
    Failed(Failure),
    /// A consumer's: bytes below the visible offset; on a replicated
    /// partition, of one epoch, or where the consumer's last epoch ends.
    Consumer {
        log: SharedLog,
        replica: Option<SharedReplica>,
        /// The consumer's last epoch ends here below its offset: the
        /// epoch and where (KIP-320).
        diverging: Option<(i32, u64)>,
    },
    /// A follower's: the leader's written bytes, or where it diverged.
    Follower {
        replica: SharedReplica,
        /// The epoch the decision was made in: a change ends the answer.
        epoch: u32,
        read: FollowerRead,
    },
}

/// Who fetches: a consumer, or a follower's broker and incarnation.
#[derive(Clone, Copy)]
pub struct Fetcher<'a> {
    /// The follower's broker (`None`: a consumer).
    pub follower: Option<BrokerId>,
    /// Its incarnation.
    pub incarnation: &'a str,
}

/// What a partition of the request asks, as its header says.
pub struct Wanted<'a> {
    /// The topic.
    pub topic: &'a str,
    /// Its id (`None` or empty: unchecked).
    pub topic_id: Option<&'a str>,
    /// The partition.
    pub partition: PartitionId,
    /// Where to read.
    pub offset: u64,
    /// At most this many bytes.
    pub bytes_max: u32,
    /// The leader epoch the fetcher knows (-1: unchecked).
    pub leader_epoch: i32,
    /// The epoch of the last message the fetcher has (a follower) or
    /// consumed (a consumer); -1: none.
    pub last_fetched_epoch: i32,
    /// A follower's flushed offset.
    pub flushed: u64,
}

/// Handles a MultiFetch request.
pub fn handle(
    shard: &Rc<Shard>,
    give_way: &Rc<GiveWay>,
    request_id: u32,
    header: &[u8],
) -> Result<Dispatched, Failure> {
    let request = verify::<wire::MultiFetchRequest>(header)
        .map_err(|e| invalid_header(Api::MultiFetch, e))?;
    let wanted = request.partitions().unwrap_or_default();
    if wanted.is_empty() || wanted.len() > PARTITIONS_MAX {
        return Err(Failure::new(
            ErrorCode::InvalidRequest,
            format!(
                "a MultiFetch names 1 to {PARTITIONS_MAX} partitions, this one {}",
                wanted.len()
            ),
        ));
    }
    let fetcher = Fetcher {
        follower: (request.replica_id() >= 0).then_some(request.replica_id() as BrokerId),
        incarnation: request.replica_incarnation().unwrap_or_default(),
    };
    let now = Instant::now();
    let mut seen = BTreeSet::new();
    for p in wanted.iter() {
        if !seen.insert((p.topic().unwrap_or_default(), p.partition())) {
            return Err(Failure::new(
                ErrorCode::InvalidRequest,
                format!(
                    "a MultiFetch names {}-{} twice",
                    p.topic().unwrap_or_default(),
                    p.partition()
                ),
            ));
        }
    }
    let parts: Vec<Part> = wanted
        .iter()
        .map(|p| {
            let want = Wanted {
                topic: p.topic().unwrap_or_default(),
                topic_id: p.topic_id(),
                partition: p.partition(),
                offset: p.offset(),
                bytes_max: p.max_bytes().min(FETCH_BYTES_MAX),
                leader_epoch: p.leader_epoch(),
                last_fetched_epoch: p.last_fetched_epoch(),
                flushed: p.replica_flushed_offset(),
            };
            resolve(shard, &want, fetcher, now)
        })
        .collect();
    let bytes_max = request.max_bytes().min(FETCH_BYTES_MAX);
    let wait = Duration::from_millis(u64::from(request.max_wait_ms().min(FETCH_WAIT_MS_MAX)));
    let shard = shard.clone();
    let give_way = give_way.clone();
    Ok(Dispatched::Later(Box::pin(async move {
        wait_for_news(&parts, wait, &give_way, request_id).await;
        let (fetched, slices) = read_all(&shard, &parts, bytes_max).await;
        let header = super::with_builder(&shard, |fbb| {
            multi_fetch::multi_fetch_response(fbb, &fetched).to_vec()
        });
        crate::metrics::bump(&shard.metrics.counters.multi_fetch_requests_total, 1);
        crate::metrics::bump(
            &shard.metrics.counters.multi_fetch_partitions_total,
            parts.len() as u64,
        );
        Some(Response {
            api: Api::MultiFetch as u16,
            error: 0,
            header,
            payload: Payload::Files(slices),
        })
    })))
}

/// Resolves one partition when the request arrives: its error, or whose
/// log to read. A follower's fetch records its progress here.
pub fn resolve(shard: &Shard, want: &Wanted<'_>, fetcher: Fetcher<'_>, now: Instant) -> Part {
    let what = match locate_part(shard, want) {
        Err(failure) => What::Failed(failure),
        Ok(log) => match shard.replica(want.topic, want.partition) {
            Some(replica) => match check_leader(&replica, want.leader_epoch) {
                Err(failure) => What::Failed(failure),
                Ok(()) => match fetcher.follower {
                    None => consumer(log, Some(replica), want),
                    Some(follower) => {
                        let read = replica.borrow_mut().follower_fetch(
                            follower,
                            fetcher.incarnation,
                            want.offset,
                            want.flushed,
                            want.last_fetched_epoch,
                            now,
                        );
                        let epoch = replica.borrow().epoch();
                        What::Follower {
                            replica,
                            epoch,
                            read,
                        }
                    }
                },
            },
            None => consumer(log, None, want),
        },
    };
    Part {
        topic: want.topic.to_string(),
        partition: want.partition,
        offset: want.offset,
        bytes_max: want.bytes_max,
        what,
    }
}

/// A consumer's part. On a replicated partition, the consumer's last epoch
/// is checked as a follower's is, with Kafka's consumer rule (KIP-320): if
/// that epoch ends here below the consumer's offset, an unclean election
/// cut the log under it, and the answer says where. (An epoch this copy
/// never had but whose predecessor reaches past the offset passes, as in
/// Kafka: the leader alone cannot tell where the two histories part.)
fn consumer(log: SharedLog, replica: Option<SharedReplica>, want: &Wanted<'_>) -> What {
    let mut diverging = None;
    if let Some(replica) = replica.as_ref().filter(|_| want.last_fetched_epoch >= 0) {
        let r = replica.borrow();
        if i64::from(want.last_fetched_epoch) > i64::from(r.epoch()) {
            return What::Failed(Failure::new(
                ErrorCode::UnknownLeaderEpoch,
                format!(
                    "{}: the consumer read in leader epoch {}, newer than this broker's {}; refresh metadata",
                    r.label,
                    want.last_fetched_epoch,
                    r.epoch()
                ),
            ));
        }
        let log_end = log.borrow().end_offset();
        let (epoch, end) = r.epochs.end_for(want.last_fetched_epoch, log_end);
        if end < want.offset {
            // Epoch -1 (every epoch here is newer) goes out as 0: on the
            // wire, -1 means no divergence.
            diverging = Some((epoch.max(0), end));
        }
    }
    What::Consumer {
        log,
        replica,
        diverging,
    }
}

/// The partition's log on this shard, or why not.
fn locate_part(shard: &Shard, want: &Wanted<'_>) -> Result<SharedLog, Failure> {
    check_topic_id(shard, want.topic, want.topic_id)?;
    match locate(shard, want.topic, want.partition)? {
        Owner::Here(log) => Ok(log),
        Owner::Shard(owner) => Err(Failure {
            owner_broker_id: Some(shard.config.broker_id),
            ..Failure::new(
                ErrorCode::NotOwner,
                format!(
                    "{}-{} is owned by shard {owner} of this broker, and a MultiFetch is not forwarded between shards: send it to that shard's port (Metadata)",
                    want.topic, want.partition
                ),
            )
        }),
        Owner::Broker(broker) => Err(Failure::not_owner(want.topic, want.partition, broker)),
    }
}

/// True when the partition has something to say now: bytes at its offset,
/// an error, or (a follower's) a diverged log or a change of leadership.
fn has_news(part: &Part) -> bool {
    match &part.what {
        What::Failed(_) => true,
        What::Consumer {
            diverging: Some(_), ..
        } => true,
        What::Consumer { log, .. } => {
            let l = log.borrow();
            l.visible_offset() > part.offset
                || part.offset < l.start_offset()
                || part.offset > l.end_offset()
                || l.poisoned().is_some()
                || l.deleted()
        }
        What::Follower {
            replica,
            epoch,
            read,
        } => {
            if matches!(read, FollowerRead::Diverging { .. }) {
                return true;
            }
            let r = replica.borrow();
            let l = r.log.borrow();
            l.written_offset() > part.offset
                || l.poisoned().is_some()
                || r.epoch() != *epoch
                || !r.leads()
        }
    }
}

/// Returns at once when a partition has news or `wait` is zero, or when
/// the request names several partitions and another such request of the
/// connection waits already; otherwise once one has news, `wait` has
/// passed, or the connection asks the fetch to give way to an answer behind
/// it.
async fn wait_for_news(parts: &[Part], wait: Duration, give_way: &GiveWay, request_id: u32) {
    if wait.is_zero() || parts.iter().any(has_news) {
        return;
    }
    let _only_one = if parts.len() > 1 {
        match give_way.multi_fetch_wait() {
            Some(right) => Some(right),
            None => return, // another MultiFetch of the connection waits
        }
    } else {
        None
    };
    let logs: Vec<SharedLog> = parts
        .iter()
        .filter_map(|part| match &part.what {
            What::Failed(_) => None,
            What::Consumer { log, .. } => Some(log.clone()),
            What::Follower { replica, .. } => Some(replica.borrow().log.clone()),
        })
        .collect();
    // Held for the wait: consumers' partitions flush their appended bytes
    // soon (`waiting_fetch_flush_us`), not on the topic's flush policy.
    let _waiting: Vec<_> = parts
        .iter()
        .filter_map(|part| match &part.what {
            What::Consumer { log, .. } => Some(partition_log::fetch_waits(log)),
            _ => None,
        })
        .collect();
    let watermarks: Vec<_> = logs.iter().map(|log| log.borrow().watermarks()).collect();
    let news = poll_fn(|cx| {
        if parts.iter().any(has_news) {
            return Poll::Ready(());
        }
        for notify in &watermarks {
            notify.register(cx.waker());
        }
        Poll::Pending
    });
    futures_lite::future::or(
        news,
        futures_lite::future::or(glommio::timer::sleep(wait), give_way.asked(request_id)),
    )
    .await;
}

/// Reads every partition in request order, each within what is left of
/// `bytes_max`.
pub async fn read_all(
    shard: &Shard,
    parts: &[Part],
    bytes_max: u32,
) -> (Vec<FetchedPart>, Vec<FetchSlice>) {
    let mut left = bytes_max;
    let mut fetched = Vec::with_capacity(parts.len());
    let mut slices = Vec::new();
    for part in parts {
        let (answer, slice) = match read_part(shard, part, part.bytes_max.min(left)).await {
            Ok(read) => read,
            Err(failure) => (failed(part, failure), None),
        };
        if let Some(slice) = slice.filter(|s| s.len > 0) {
            left -= slice.len;
            slices.push(slice);
        }
        fetched.push(answer);
    }
    (fetched, slices)
}

fn failed(part: &Part, failure: Failure) -> FetchedPart {
    let mut answer = FetchedPart::empty(&part.topic, part.partition, part.offset);
    answer.error = failure.code;
    answer.message = failure.message;
    answer.owner = failure.owner_broker_id;
    if let Some((start, end)) = failure.range {
        answer.offsets.start_offset = start;
        answer.offsets.end_offset = end;
    }
    answer
}

#[expect(
    clippy::too_many_lines,
    reason = "one partition's part for a consumer and for a follower, side by side so that they stay alike"
)]
async fn read_part(
    shard: &Shard,
    part: &Part,
    bytes_max: u32,
) -> Result<(FetchedPart, Option<FetchSlice>), Failure> {
    let mut answer = FetchedPart::empty(&part.topic, part.partition, part.offset);
    match &part.what {
        What::Failed(failure) => Err(failure.clone()),
        What::Consumer {
            log,
            replica,
            diverging,
        } => {
            if log.borrow().deleted() {
                return Err(Failure::new(
                    ErrorCode::UnknownTopic,
                    format!("{}: the topic was deleted", log.borrow().label()),
                ));
            }
            let mut limit = None;
            if let Some(replica) = replica {
                let r = replica.borrow();
                answer.leader_epoch = r.epoch() as i32;
                if let Some(diverging) = *diverging {
                    answer.diverging = Some(diverging);
                    answer.offsets = log.borrow().offsets();
                    return Ok((answer, None));
                }
                // One epoch per chunk, so the consumer knows the epoch of
                // every message it reads (and commits it with the offset).
                answer.chunk_epoch = r.epochs.epoch_at(part.offset);
                limit = r
                    .epochs
                    .next_start_after(part.offset)
                    .map(|next| next.min(log.borrow().visible_offset()));
            }
            let slice = partition_log::read_below(log, part.offset, bytes_max, limit).await?;
            answer.offsets = log.borrow().offsets();
            answer.message_format = log.borrow().settings().format.number();
            answer.length = slice.as_ref().map_or(0, |s| s.len);
            // Format 2: the batch that holds the offset asked for starts
            // at the chunk's offset.
            answer.offset = slice.as_ref().map_or(part.offset, |s| s.offset);
            // Where the chunk's segment starts, for consumers too: a mirror
            // rolls its copy there (issue 21).
            answer.segment_base = slice
                .as_ref()
                .map_or(part.offset, |s| s.offset - s.position);
            Ok((answer, slice))
        }
        What::Follower {
            replica,
            epoch,
            read,
        } => {
            if replica.borrow().epoch() != *epoch || !replica.borrow().leads() {
                let r = replica.borrow();
                return Err(not_leader(&r.topic, r.partition, r.leader()));
            }
            let log = replica.borrow().log.clone();
            answer.leader_epoch = *epoch as i32;
            answer.message_format = log.borrow().settings().format.number();
            answer.offsets = follower_offsets(&log);
            let chunk_epoch = match *read {
                FollowerRead::Diverging { epoch, end } => {
                    answer.diverging = Some((epoch, end));
                    return Ok((answer, None));
                }
                FollowerRead::Read { chunk_epoch, .. } => chunk_epoch,
            };
            let slice =
                crate::replica::leader::read_for_follower(replica, part.offset, bytes_max).await?;
            answer.chunk_epoch = chunk_epoch;
            answer.segment_base = slice
                .as_ref()
                .map_or(part.offset, |s| part.offset - s.position);
            answer.length = slice.as_ref().map_or(0, |s| s.len);
            crate::metrics::bump(
                &shard.metrics.counters.replica_fetch_bytes_total,
                u64::from(answer.length),
            );
            Ok((answer, slice))
        }
    }
}

/// A single Fetch of a replicated partition (a follower's or a consumer's),
/// answered as a MultiFetch of its one partition would be.
pub fn serve_single(
    shard: &Rc<Shard>,
    give_way: &Rc<GiveWay>,
    request_id: u32,
    want: Wanted<'_>,
    fetcher: Fetcher<'_>,
    wait_ms: u32,
) -> Dispatched {
    let part = resolve(shard, &want, fetcher, Instant::now());
    let fetcher_is_consumer = fetcher.follower.is_none();
    let shard = shard.clone();
    let give_way = give_way.clone();
    let wait = Duration::from_millis(u64::from(wait_ms.min(FETCH_WAIT_MS_MAX)));
    Dispatched::Later(Box::pin(async move {
        let parts = [part];
        wait_for_news(&parts, wait, &give_way, request_id).await;
        let started = Instant::now();
        let bytes_max = parts[0].bytes_max;
        let (mut fetched, mut slices) = read_all(&shard, &parts, bytes_max).await;
        let answer = fetched.remove(0);
        if answer.error != ErrorCode::None {
            let failure = Failure {
                code: answer.error,
                message: answer.message,
                range: (answer.error == ErrorCode::OffsetOutOfRange)
                    .then_some((answer.offsets.start_offset, answer.offsets.end_offset)),
                owner_broker_id: answer.owner,
            };
            return Some(failure.response(Api::Fetch as u16));
        }
        let fields = protocol::codec::FetchedReplica {
            leader_epoch: answer.leader_epoch,
            chunk_epoch: answer.chunk_epoch,
            segment_base: answer.segment_base,
            diverging: answer.diverging,
            message_format: answer.message_format,
        };
        let header = super::with_builder(&shard, |fbb| {
            protocol::codec::replica_fetch_response(
                fbb,
                answer.offset,
                answer.length,
                answer.offsets,
                &fields,
            )
            .to_vec()
        });
        crate::metrics::bump(&shard.metrics.counters.fetch_requests_total, 1);
        if fetcher_is_consumer {
            crate::metrics::record_us(
                &shard.metrics.fetch_latency_us,
                started.elapsed().as_micros() as u64,
            );
        }
        Some(Response {
            api: Api::Fetch as u16,
            error: 0,
            header,
            payload: slices.pop().map_or(Payload::None, Payload::File),
        })
    }))
}
