//! Fetch: describe up to `max_bytes` of flushed log at an offset and let the
//! connection send them with sendfile. Waits up to `max_wait_ms` when the
//! consumer is caught up (a long-poll, so tailing consumers do not spin),
//! less when its connection has a later answer ready (see `give_way.rs`).

use super::forward::forward;
use super::give_way::GiveWay;
use super::multi_fetch::{serve_single, Fetcher, Wanted};
use super::{invalid_header, Dispatched, Failure, Payload, Response};
use crate::limits::{FETCH_BYTES_MAX, FETCH_WAIT_MS_MAX};
use crate::shard::{Owner, Shard};
use crate::storage::partition_log::{self, Read};
use crate::storage::SharedLog;
use protocol::codec::verify;
use protocol::frame::Api;
use protocol::types::BrokerId;
use protocol::wire;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Handles a Fetch request.
#[expect(
    clippy::too_many_lines,
    reason = "one fetch's checks in the order the protocol states them, then the long-poll"
)]
pub fn handle(
    shard: &Rc<Shard>,
    give_way: &Rc<GiveWay>,
    request_id: u32,
    header: &[u8],
) -> Result<Dispatched, Failure> {
    let request =
        verify::<wire::FetchRequest>(header).map_err(|e| invalid_header(Api::Fetch, e))?;
    let topic_name = request.topic().unwrap_or_default();
    let partition = request.partition();
    super::check_topic_id(shard, topic_name, request.topic_id())?;
    let log = match super::locate(shard, topic_name, partition)? {
        Owner::Here(log) => log,
        Owner::Shard(owner) => {
            return forward(shard, owner, Api::Fetch as u16, request_id, header, &[]);
        }
        Owner::Broker(broker) => return Err(Failure::not_owner(topic_name, partition, broker)),
    };
    // A replicated partition's fetch, a follower's or a consumer's, is
    // checked against the leader epochs and cut at an epoch's end.
    if shard.replica(topic_name, partition).is_some() {
        let want = Wanted {
            topic: topic_name,
            topic_id: request.topic_id(),
            partition,
            offset: request.offset(),
            bytes_max: request.max_bytes().min(FETCH_BYTES_MAX),
            leader_epoch: request.leader_epoch(),
            last_fetched_epoch: request.last_fetched_epoch(),
            flushed: request.replica_flushed_offset(),
        };
        let fetcher = Fetcher {
            follower: (request.replica_id() >= 0).then_some(request.replica_id() as BrokerId),
            incarnation: request.replica_incarnation().unwrap_or_default(),
        };
        let wait_ms = request.max_wait_ms();
        return Ok(serve_single(
            shard, give_way, request_id, want, fetcher, wait_ms,
        ));
    }
    let offset = request.offset();
    let bytes_max = request.max_bytes().min(FETCH_BYTES_MAX);
    let wait_ms = request.max_wait_ms().min(FETCH_WAIT_MS_MAX);
    let started = Instant::now();
    let found = log.borrow().try_read(offset, bytes_max)?;
    let shard = shard.clone();
    let slice = match found {
        Read::Slice(slice) => Some(slice),
        Read::NotYet => None,
        // A segment nobody read for a while: open its file first. Or a
        // format-2 offset that may lie inside a batch: find the batch.
        Read::Closed { .. } | Read::Locate => {
            return Ok(Dispatched::Later(Box::pin(async move {
                Some(match partition_log::read(&log, offset, bytes_max).await {
                    Ok(slice) => respond(&shard, &log, offset, slice, started),
                    Err(error) => Failure::from(error).response(Api::Fetch as u16),
                })
            })));
        }
    };
    if slice.is_some() || wait_ms == 0 {
        return Ok(Dispatched::Ready(respond(
            &shard, &log, offset, slice, started,
        )));
    }
    let give_way = give_way.clone();
    Ok(Dispatched::Later(Box::pin(async move {
        // Held for the wait: a consumer at the end gets new messages after
        // one flush, not after the topic's flush interval.
        let waiting = partition_log::fetch_waits(&log);
        let watermarks = log.borrow().watermarks();
        let caught_up = watermarks.wait_until(|| {
            let l = log.borrow();
            l.visible_offset() > offset || l.poisoned().is_some()
        });
        let timed_out = glommio::timer::sleep(Duration::from_millis(u64::from(wait_ms)));
        futures_lite::future::or(
            caught_up,
            futures_lite::future::or(timed_out, give_way.asked(request_id)),
        )
        .await;
        drop(waiting);
        let started = Instant::now();
        if log.borrow().deleted() {
            return Some(
                Failure::new(
                    protocol::ErrorCode::UnknownTopic,
                    format!(
                        "{}: the topic was deleted while this fetch waited",
                        log.borrow().label()
                    ),
                )
                .response(Api::Fetch as u16),
            );
        }
        let read = partition_log::read(&log, offset, bytes_max).await;
        Some(match read {
            Ok(slice) => respond(&shard, &log, offset, slice, started),
            Err(error) => Failure::from(error).response(Api::Fetch as u16),
        })
    })))
}

fn respond(
    shard: &Shard,
    log: &SharedLog,
    offset: u64,
    slice: Option<crate::storage::FetchSlice>,
    started: Instant,
) -> Response {
    let offsets = log.borrow().offsets();
    let format = log.borrow().settings().format.number();
    let len = slice.as_ref().map_or(0, |s| s.len);
    // Format 2: the batch that holds the offset asked for starts there.
    let offset = slice.as_ref().map_or(offset, |s| s.offset);
    let header = super::with_builder(shard, |fbb| {
        protocol::codec::fetch_response(fbb, offset, len, offsets, format).to_vec()
    });
    crate::metrics::bump(&shard.metrics.counters.fetch_requests_total, 1);
    crate::metrics::record_us(
        &shard.metrics.fetch_latency_us,
        started.elapsed().as_micros() as u64,
    );
    Response {
        api: Api::Fetch as u16,
        error: 0,
        header,
        payload: slice.map_or(Payload::None, Payload::File),
    }
}
