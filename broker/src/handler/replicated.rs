//! What the handlers add for a replicated partition: only its leader takes
//! produces and consumers' fetches (NOT_LEADER names the leader); a
//! request's leader epoch is checked (FENCED_LEADER_EPOCH when older,
//! UNKNOWN_LEADER_EPOCH when newer than this copy knows); acks=all is
//! refused with NOT_ENOUGH_REPLICAS before appending when the ISR is too
//! small, and answered once the high watermark covers the set; and a
//! follower's fetch is answered from the leader's written bytes, with its
//! epochs and segment, or told where its log diverged.

use super::give_way::GiveWay;
use super::{Dispatched, Failure, Payload, Response};
use crate::limits::{FETCH_BYTES_MAX, FETCH_WAIT_MS_MAX};
use crate::replica::leader::FollowerRead;
use crate::replica::SharedReplica;
use crate::shard::Shard;
use crate::storage::partition_log::{self, Read};
use crate::storage::SharedLog;
use protocol::codec::{FetchedReplica, PartitionOffsets};
use protocol::frame::Api;
use protocol::types::{BrokerId, PartitionId};
use protocol::{wire, ErrorCode};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// NOT_LEADER, naming the leader this copy knows.
pub fn not_leader(topic: &str, partition: PartitionId, leader: BrokerId) -> Failure {
    Failure {
        owner_broker_id: Some(leader),
        ..Failure::new(
            ErrorCode::NotLeader,
            format!(
                "{topic}-{partition} is led by broker {leader}, not this one: refresh metadata"
            ),
        )
    }
}

/// Checks that this copy leads in the epoch the request names (-1: any).
pub fn check_leader(replica: &SharedReplica, requested_epoch: i32) -> Result<(), Failure> {
    let r = replica.borrow();
    let epoch = r.epoch() as i64;
    let requested = i64::from(requested_epoch);
    if requested >= 0 && requested > epoch {
        return Err(Failure::new(
            ErrorCode::UnknownLeaderEpoch,
            format!(
                "{}: leader epoch {requested} is newer than this broker knows ({epoch}); retry",
                r.label
            ),
        ));
    }
    if requested >= 0 && requested < epoch {
        return Err(Failure {
            owner_broker_id: Some(r.leader()),
            ..Failure::new(
                ErrorCode::FencedLeaderEpoch,
                format!(
                    "{}: leader epoch {requested} is fenced: the partition is in epoch {epoch}, led by broker {}; refresh metadata",
                    r.label,
                    r.leader()
                ),
            )
        });
    }
    if !r.leads() {
        return Err(not_leader(&r.topic, r.partition, r.leader()));
    }
    Ok(())
}

/// Refuses writes while this broker's etcd lease may have expired: another
/// broker may have been elected meanwhile (its epoch fences this one at
/// the followers, but a write here must not even be acknowledged on this
/// copy alone).
pub fn check_lease(shard: &Shard, replica: &SharedReplica) -> Result<(), Failure> {
    if shard.lease.as_ref().is_none_or(|lease| lease.live()) {
        return Ok(());
    }
    let r = replica.borrow();
    Err(Failure::new(
        ErrorCode::NotLeader,
        format!(
            "{}: this broker's etcd lease may have expired, so it takes no writes until the lease is renewed (another broker may lead now): refresh metadata",
            r.label
        ),
    ))
}

/// Refuses writes while the leader hands its partition over (a preferred
/// election, a move off this broker): they go to the new leader, which has
/// everything this one took, once it leads — within a few seconds.
pub fn check_transfer(replica: &SharedReplica) -> Result<(), Failure> {
    let r = replica.borrow();
    match r.transfer {
        None => Ok(()),
        Some(t) => Err(Failure {
            owner_broker_id: Some(t.to),
            ..Failure::new(
                ErrorCode::NotLeader,
                format!(
                    "{}: leadership is being handed over to broker {}; nothing was appended: refresh metadata and retry",
                    r.label, t.to
                ),
            )
        }),
    }
}

/// Refuses acks=all before anything is appended while fewer replicas than
/// the topic's `min_insync_replicas` are in sync.
pub fn check_insync(replica: &SharedReplica) -> Result<(), Failure> {
    let r = replica.borrow();
    let isr = r.state.state.isr.len() as u32;
    if isr < r.min_insync {
        return Err(Failure::new(
            ErrorCode::NotEnoughReplicas,
            format!(
                "{}: {isr} replica(s) in sync ({:?}), the topic needs {} for acks=all; nothing was appended",
                r.label, r.state.state.isr, r.min_insync
            ),
        ));
    }
    Ok(())
}

/// Waits until the high watermark covers `end` (every ISR member flushed
/// it), or says why it never will here.
pub async fn await_replicated(replica: &SharedReplica, end: u64) -> Result<(), Failure> {
    let (log, epoch) = {
        let mut r = replica.borrow_mut();
        // The leader's own flush just completed: it may move the mark.
        r.update_high_watermark();
        (r.log.clone(), r.epoch())
    };
    let watermarks = log.borrow().watermarks();
    watermarks
        .wait_until(|| {
            let r = replica.borrow();
            let l = log.borrow();
            l.high_watermark().is_some_and(|hw| hw >= end)
                || l.poisoned().is_some()
                || !r.leads()
                || r.epoch() != epoch
        })
        .await;
    let r = replica.borrow();
    let l = log.borrow();
    if l.high_watermark().is_some_and(|hw| hw >= end) {
        return Ok(());
    }
    if let Some(reason) = l.poisoned() {
        return Err(Failure::new(ErrorCode::StorageFailed, reason.to_string()));
    }
    Err(Failure {
        owner_broker_id: Some(r.leader()),
        ..Failure::new(
            ErrorCode::NotLeader,
            format!(
                "{}: leadership moved (to broker {}, epoch {}) before the messages were replicated; they may or may not be kept: retry",
                r.label,
                r.leader(),
                r.epoch()
            ),
        )
    })
}

/// A follower's fetch request, as its header says.
pub struct FollowerFetch<'a> {
    /// The follower's broker.
    pub follower: BrokerId,
    /// Its incarnation.
    pub incarnation: &'a str,
    /// Where its copy ends.
    pub offset: u64,
    /// How far its copy is flushed.
    pub flushed: u64,
    /// The epoch of its last message.
    pub last_fetched_epoch: i32,
    /// At most this many bytes.
    pub bytes_max: u32,
    /// Wait up to this long when there is nothing new.
    pub wait_ms: u32,
}

impl<'a> FollowerFetch<'a> {
    /// From a Fetch header with `replica_id` set.
    pub fn of(request: &wire::FetchRequest<'a>) -> FollowerFetch<'a> {
        FollowerFetch {
            follower: request.replica_id().max(0) as BrokerId,
            incarnation: request.replica_incarnation().unwrap_or_default(),
            offset: request.offset(),
            flushed: request.replica_flushed_offset(),
            last_fetched_epoch: request.last_fetched_epoch(),
            bytes_max: request.max_bytes().min(FETCH_BYTES_MAX),
            wait_ms: request.max_wait_ms().min(FETCH_WAIT_MS_MAX),
        }
    }
}

fn offsets(log: &SharedLog) -> PartitionOffsets {
    let l = log.borrow();
    PartitionOffsets {
        start_offset: l.start_offset(),
        // Followers are told the high watermark.
        flushed_offset: l.high_watermark().unwrap_or(0).min(l.flushed_offset()),
        end_offset: l.end_offset(),
    }
}

fn respond(
    shard: &Shard,
    replica: &SharedReplica,
    offset: u64,
    slice: Option<crate::storage::FetchSlice>,
    fields: FetchedReplica,
) -> Response {
    let log = replica.borrow().log.clone();
    let len = slice.as_ref().map_or(0, |s| s.len);
    let segment_base = slice.as_ref().map_or(offset, |s| offset - s.position);
    let fields = FetchedReplica {
        segment_base,
        ..fields
    };
    let header = super::with_builder(shard, |fbb| {
        protocol::codec::replica_fetch_response(fbb, offset, len, offsets(&log), &fields).to_vec()
    });
    crate::metrics::bump(
        &shard.metrics.counters.replica_fetch_bytes_total,
        u64::from(len),
    );
    Response {
        api: Api::Fetch as u16,
        error: 0,
        header,
        payload: slice.map_or(Payload::None, Payload::File),
    }
}

/// Answers a follower's fetch: the leader's bytes from its offset (written,
/// not yet committed ones too), waiting up to its `wait_ms` when there are
/// none; or where its log diverged.
pub fn serve_follower(
    shard: &Rc<Shard>,
    give_way: &Rc<GiveWay>,
    request_id: u32,
    replica: &SharedReplica,
    fetch: FollowerFetch<'_>,
) -> Result<Dispatched, Failure> {
    let decision = replica.borrow_mut().follower_fetch(
        fetch.follower,
        fetch.incarnation,
        fetch.offset,
        fetch.flushed,
        fetch.last_fetched_epoch,
        Instant::now(),
    );
    let leader_epoch = replica.borrow().epoch() as i32;
    let (limit, chunk_epoch) = match decision {
        FollowerRead::Diverging { epoch, end } => {
            let fields = FetchedReplica {
                leader_epoch,
                chunk_epoch: -1,
                segment_base: 0,
                diverging: Some((epoch, end)),
            };
            return Ok(Dispatched::Ready(respond(
                shard,
                replica,
                fetch.offset,
                None,
                fields,
            )));
        }
        FollowerRead::Read { limit, chunk_epoch } => (limit, chunk_epoch),
    };
    let fields = FetchedReplica {
        leader_epoch,
        chunk_epoch,
        segment_base: 0,
        diverging: None,
    };
    let log = replica.borrow().log.clone();
    let offset = fetch.offset;
    let bytes_max = fetch.bytes_max;
    let found = log.borrow().try_read_below(offset, bytes_max, limit)?;
    match found {
        Read::Slice(slice) => Ok(Dispatched::Ready(respond(
            shard,
            replica,
            offset,
            Some(slice),
            fields,
        ))),
        Read::NotYet if fetch.wait_ms == 0 => Ok(Dispatched::Ready(respond(
            shard, replica, offset, None, fields,
        ))),
        Read::NotYet | Read::Closed { .. } => {
            let shard = shard.clone();
            let replica = replica.clone();
            let give_way = give_way.clone();
            let wait_ms = fetch.wait_ms;
            let epoch = replica.borrow().epoch();
            Ok(Dispatched::Later(Box::pin(async move {
                if matches!(found, Read::NotYet) {
                    let watermarks = log.borrow().watermarks();
                    let written = watermarks.wait_until(|| {
                        let l = log.borrow();
                        let r = replica.borrow();
                        l.written_offset() > offset || l.poisoned().is_some() || r.epoch() != epoch
                    });
                    let timed_out =
                        glommio::timer::sleep(Duration::from_millis(u64::from(wait_ms)));
                    futures_lite::future::or(
                        written,
                        futures_lite::future::or(timed_out, give_way.asked(request_id)),
                    )
                    .await;
                }
                if replica.borrow().epoch() != epoch || !replica.borrow().leads() {
                    let (topic, partition, leader) = {
                        let r = replica.borrow();
                        (r.topic.clone(), r.partition, r.leader())
                    };
                    return Some(not_leader(&topic, partition, leader).response(Api::Fetch as u16));
                }
                // What arrived while it waited, within this epoch's bytes.
                let limit = {
                    let r = replica.borrow();
                    let written = log.borrow().written_offset();
                    r.epochs
                        .next_start_after(offset)
                        .map_or(written, |next| next.min(written))
                };
                Some(
                    match partition_log::read_below(&log, offset, bytes_max, Some(limit)).await {
                        Ok(slice) => respond(&shard, &replica, offset, slice, fields),
                        Err(error) => Failure::from(error).response(Api::Fetch as u16),
                    },
                )
            })))
        }
    }
}
