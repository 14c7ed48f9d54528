//! The follower's side: a shard fetches the partitions it follows from
//! their leaders and appends the bytes verbatim.
//!
//! One *link* per (leader broker, leader shard) carries every partition
//! this shard follows there: one connection, one fetch in flight per
//! partition, pipelined — the ordinary Fetch request with the replica
//! fields, so the leader sends the bytes with sendfile. An answer is handled
//! in its own task: it appends the chunk's whole, CRC-checked messages at
//! the chunk's offset, rolling where the leader's segment starts, records a
//! new epoch's start, waits for the flush (acks=all counts flushed copies),
//! and only then is the partition's next fetch sent — carrying how far this
//! copy is flushed. A diverging answer truncates the log to the end the
//! leader gives for the follower's last epoch, bounded by the follower's own
//! end for that epoch (Vanlightly's follower rule), and fetching goes on.
//! An answer from before a change of leader or epoch is dropped.

use super::{Role, SharedReplica};
use crate::shard::Shard;
use crate::storage::partition_log;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use protocol::codec::{self, verify, FetchArgs, ReplicaFetch};
use protocol::frame::{self, Api, FramePrefix, FRAME_PREFIX_BYTES};
use protocol::message::MessageSetIter;
use protocol::types::{BrokerId, ShardId};
use protocol::{wire, ErrorCode};
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::time::Duration;

/// A link's name: the leader broker and its shard.
pub type LinkKey = (BrokerId, ShardId);

/// How long a follower's fetch waits at a caught-up leader (Kafka's
/// `replica.fetch.wait.max.ms`).
const FETCH_WAIT_MS: u32 = 500;

/// A link's shared state between its writer and reader.
#[derive(Default)]
struct Link {
    /// Fetches sent and not answered, in order: topic, partition, and the
    /// replica's generation when it was sent.
    in_flight: VecDeque<(String, u32, u64)>,
    /// Partitions whose fetch or answer is under way.
    busy: BTreeMap<(String, u32), ()>,
    /// Signalled when a partition may fetch again (and `bumps` moves).
    ready: crate::notify::Notify,
    bumps: u64,
    /// The connection broke: both halves stop.
    broken: bool,
}

/// Starts the links this shard needs and has not: one per leader shard of
/// the partitions it follows. A link ends by itself once it carries none.
pub fn reconcile(shard: &Rc<Shard>) {
    let mut wanted: Vec<LinkKey> = Vec::new();
    for replica in shard.all_replicas() {
        let r = replica.borrow();
        if let Role::Follower { leader, .. } = r.role() {
            let Some(count) = shard.shard_count_of(leader) else {
                continue; // its leader is not live: nothing to fetch from
            };
            let key = (
                leader,
                crate::shard::placement::owner_shard(&r.topic, r.partition, count),
            );
            if !wanted.contains(&key) {
                wanted.push(key);
            }
        }
    }
    for key in wanted {
        if shard.links.borrow_mut().insert(key) {
            glommio::spawn_local(run(shard.clone(), key)).detach();
        }
    }
}

/// The partitions this shard follows on the leader shard `key`.
fn followed(shard: &Shard, key: LinkKey) -> Vec<SharedReplica> {
    shard
        .all_replicas()
        .into_iter()
        .filter(|replica| {
            let r = replica.borrow();
            match r.role() {
                Role::Follower { leader, .. } if leader == key.0 => {
                    shard.shard_count_of(leader).is_some_and(|count| {
                        crate::shard::placement::owner_shard(&r.topic, r.partition, count) == key.1
                    })
                }
                _ => false,
            }
        })
        .collect()
}

/// One link: connects, fetches, and reconnects with back-off, until it has
/// no partition to carry or the shard stops.
async fn run(shard: Rc<Shard>, key: LinkKey) {
    let mut backoff = Duration::from_millis(50);
    let quiet = crate::log_limit::LogLimit::new(Duration::from_secs(10));
    if let Some(delay) = crate::faults::Faults::get().follower_start_delay {
        glommio::timer::sleep(delay).await;
    }
    loop {
        if shard.stopping.get() || followed(&shard, key).is_empty() {
            break;
        }
        match serve_link(&shard, key).await {
            Ok(()) => backoff = Duration::from_millis(50),
            Err(error) => {
                if let Some(left_out) = quiet.allow() {
                    tracing::warn!(leader = key.0, leader_shard = key.1, %error, left_out, "replica fetching from the leader failed; retrying");
                }
                glommio::timer::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
    shard.links.borrow_mut().remove(&key);
    // A partition may have moved to it meanwhile.
    reconcile(&shard);
}

/// The address of a live broker's shard.
fn address_of(shard: &Shard, key: LinkKey) -> Option<String> {
    let brokers = shard.brokers.borrow();
    let broker = brokers.iter().find(|b| b.broker_id == key.0)?;
    let endpoint = broker.shards.iter().find(|s| s.shard_id == key.1)?;
    Some(format!("{}:{}", endpoint.host, endpoint.port))
}

/// Reads one whole frame.
async fn read_frame(
    stream: &mut (impl futures_lite::AsyncRead + Unpin),
) -> std::io::Result<(FramePrefix, Vec<u8>, Vec<u8>)> {
    let mut prefix = [0u8; FRAME_PREFIX_BYTES];
    stream.read_exact(&mut prefix).await?;
    let prefix = FramePrefix::parse(&prefix, frame::FRAME_BYTES_MAX)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut header = vec![0u8; prefix.header_len];
    stream.read_exact(&mut header).await?;
    let mut payload = vec![0u8; prefix.payload_len()];
    stream.read_exact(&mut payload).await?;
    Ok((prefix, header, payload))
}

fn frame_of(api: Api, request_id: u32, header: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_PREFIX_BYTES + header.len());
    frame::write_frame(
        &mut out,
        api as u16,
        frame::API_VERSION,
        request_id,
        header,
        &[],
    );
    out
}

/// One connection's life: handshake, then fetches until it breaks or
/// carries nothing.
async fn serve_link(shard: &Rc<Shard>, key: LinkKey) -> Result<(), String> {
    let address = address_of(shard, key).ok_or_else(|| format!("broker {} is not live", key.0))?;
    let connect = glommio::net::TcpStream::connect(address.as_str());
    let stream =
        futures_lite::future::or(async { connect.await.map_err(|e| e.to_string()) }, async {
            glommio::timer::sleep(Duration::from_secs(5)).await;
            Err("connect timed out".to_string())
        })
        .await
        .map_err(|e| format!("connecting to {address}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (mut reader, mut writer) = futures_lite::io::split(stream);
    let mut fbb = protocol::flatbuffers::FlatBufferBuilder::with_capacity(256);
    let hello = codec::handshake_request(&mut fbb, "ringlog-follower").to_vec();
    writer
        .write_all(&frame_of(Api::Handshake, 0, &hello))
        .await
        .map_err(|e| e.to_string())?;
    writer.flush().await.map_err(|e| e.to_string())?;
    let (prefix, _, _) = read_frame(&mut reader).await.map_err(|e| e.to_string())?;
    if prefix.version_or_error != 0 {
        return Err(format!(
            "the handshake was refused (error {})",
            prefix.version_or_error
        ));
    }
    let link = Rc::new(RefCell::new(Link::default()));
    let reading = read_answers(shard.clone(), key, link.clone(), reader);
    let writing = write_fetches(shard.clone(), key, link.clone(), writer);
    futures_lite::future::or(reading, writing).await
}

/// Sends a fetch for every followed partition that is not busy, whenever
/// one becomes ready.
async fn write_fetches(
    shard: Rc<Shard>,
    key: LinkKey,
    link: Rc<RefCell<Link>>,
    mut writer: futures_lite::io::WriteHalf<glommio::net::TcpStream>,
) -> Result<(), String> {
    let mut fbb = protocol::flatbuffers::FlatBufferBuilder::with_capacity(512);
    let mut request_id = 1u32;
    let fetch_bytes = (shard.config.message_bytes_max as u32 + 4096).max(1 << 20);
    loop {
        if link.borrow().broken || shard.stopping.get() {
            return Err("stopped".into());
        }
        let replicas = followed(&shard, key);
        if replicas.is_empty() {
            return Ok(());
        }
        let mut out = Vec::new();
        for replica in &replicas {
            let r = replica.borrow();
            let id = (r.topic.clone(), r.partition);
            if link.borrow().busy.contains_key(&id) {
                continue;
            }
            let l = r.log.borrow();
            let request = ReplicaFetch {
                leader_epoch: r.epoch() as i32,
                replica_id: r.me as i32,
                incarnation: shard.incarnation.clone(),
                last_fetched_epoch: r.epochs.last_epoch(),
                flushed_offset: l.flushed_offset(),
            };
            let header = codec::replica_fetch_request(
                &mut fbb,
                &r.topic,
                &r.topic_id,
                r.partition,
                FetchArgs {
                    offset: l.end_offset(),
                    max_bytes: fetch_bytes,
                    max_wait_ms: FETCH_WAIT_MS,
                },
                &request,
            );
            frame::write_frame(
                &mut out,
                Api::Fetch as u16,
                frame::API_VERSION,
                request_id,
                header,
                &[],
            );
            request_id = request_id.wrapping_add(1);
            let mut link = link.borrow_mut();
            link.busy.insert(id, ());
            link.in_flight
                .push_back((r.topic.clone(), r.partition, r.generation));
        }
        if !out.is_empty() {
            writer.write_all(&out).await.map_err(|e| e.to_string())?;
            writer.flush().await.map_err(|e| e.to_string())?;
        }
        // Until a partition is ready again, or the set may have changed.
        let (ready, seen) = {
            let l = link.borrow();
            (l.ready.clone(), l.bumps)
        };
        futures_lite::future::or(
            ready.wait_until(|| {
                let l = link.borrow();
                l.bumps != seen || l.broken
            }),
            glommio::timer::sleep(Duration::from_millis(200)),
        )
        .await;
    }
}

/// Reads answers in order and hands each to its partition's task.
async fn read_answers(
    shard: Rc<Shard>,
    key: LinkKey,
    link: Rc<RefCell<Link>>,
    mut reader: futures_lite::io::ReadHalf<glommio::net::TcpStream>,
) -> Result<(), String> {
    loop {
        let read = read_frame(&mut reader).await;
        let (prefix, header, payload) = match read {
            Ok(frame) => frame,
            Err(error) => {
                let mut l = link.borrow_mut();
                l.broken = true;
                l.bumps += 1;
                l.ready.notify_all();
                return Err(error.to_string());
            }
        };
        let Some((topic, partition, generation)) = link.borrow_mut().in_flight.pop_front() else {
            return Err("an answer to no fetch".into());
        };
        let replica = followed(&shard, key).into_iter().find(|r| {
            let r = r.borrow();
            r.topic == topic && r.partition == partition && r.generation == generation
        });
        let Some(replica) = replica else {
            // The partition moved on (a new leader or epoch): its next
            // fetch starts over; nothing of this answer applies.
            let mut l = link.borrow_mut();
            l.busy.remove(&(topic, partition));
            l.bumps += 1;
            l.ready.notify_all();
            continue;
        };
        let link = link.clone();
        let shard_for_task = shard.clone();
        let topic = topic.clone();
        glommio::spawn_local(async move {
            if let Err(error) = apply(
                &shard_for_task,
                &replica,
                prefix.version_or_error,
                &header,
                &payload,
            )
            .await
            {
                let label = replica.borrow().label.clone();
                tracing::warn!(partition = %label, %error, "applying the leader's answer");
                glommio::timer::sleep(Duration::from_millis(100)).await;
            }
            let mut l = link.borrow_mut();
            l.busy.remove(&(topic, partition));
            l.bumps += 1;
            l.ready.notify_all();
        })
        .detach();
    }
}

/// Applies one answer of the leader to a followed partition.
async fn apply(
    shard: &Rc<Shard>,
    replica: &SharedReplica,
    error: u16,
    header: &[u8],
    payload: &[u8],
) -> Result<(), String> {
    if error != 0 {
        let code = ErrorCode::from_u16(error).unwrap_or(ErrorCode::Internal);
        let message = verify::<wire::ErrorResponse>(header)
            .ok()
            .and_then(|e| e.message().map(str::to_string))
            .unwrap_or_default();
        if code == ErrorCode::OffsetOutOfRange {
            // The leader's log starts past this empty copy's end
            // (retention): begin there.
            if let Ok(e) = verify::<wire::ErrorResponse>(header) {
                let start = e.start_offset();
                let log = replica.borrow().log.clone();
                let empty = {
                    let l = log.borrow();
                    l.end_offset() == l.start_offset() && l.end_offset() < start
                };
                if empty {
                    return log
                        .borrow_mut()
                        .rebase_empty(start)
                        .map_err(|e| e.to_string());
                }
            }
        }
        // NOT_LEADER, FENCED or UNKNOWN_LEADER_EPOCH: the registry's news
        // (a state change) is on its way; wait for it.
        glommio::timer::sleep(Duration::from_millis(100)).await;
        return Err(format!("{code}: {message}"));
    }
    let answer = verify::<wire::FetchResponse>(header).map_err(|e| e.to_string())?;
    let log = replica.borrow().log.clone();
    let offset = answer.offset();
    if answer.diverging_epoch() >= 0 {
        let epoch = answer.diverging_epoch();
        let leader_end = answer.diverging_end_offset();
        let own_end = {
            let r = replica.borrow();
            let end = r.log.borrow().end_offset();
            r.epochs.end_for(epoch, end).1
        };
        let target = leader_end.min(own_end);
        partition_log::truncate(&log, target)
            .await
            .map_err(|e| e.to_string())?;
        let (storage, dir) = {
            let l = log.borrow();
            (l.storage().clone(), l.dir().to_path_buf())
        };
        let mut r = replica.borrow_mut();
        if r.epochs.truncate(target) {
            r.epochs.store(&storage, &dir).map_err(|e| e.to_string())?;
        }
        return Ok(());
    }
    let hw = answer.flushed_offset();
    let chunk_epoch = answer.chunk_epoch();
    let segment_base = answer.segment_base();
    // Whole, valid messages only: a chunk may end in the middle of one.
    let mut iter = MessageSetIter::new(payload, offset);
    let mut count = 0u32;
    for message in iter.by_ref() {
        message.map_err(|e| format!("a damaged message from the leader: {e}"))?;
        count += 1;
    }
    let whole = iter.position();
    if whole > 0 {
        if log.borrow().end_offset() != offset {
            return Err(format!(
                "an answer for offset {offset}, but the copy ends at {}",
                log.borrow().end_offset()
            ));
        }
        if chunk_epoch >= 0 {
            let (storage, dir) = {
                let l = log.borrow();
                (l.storage().clone(), l.dir().to_path_buf())
            };
            let mut r = replica.borrow_mut();
            if r.epochs.assign(chunk_epoch as u32, offset) {
                r.epochs.store(&storage, &dir).map_err(|e| e.to_string())?;
            }
        }
        let appended =
            partition_log::append_replica(&log, offset, &payload[..whole], count, segment_base)
                .map_err(|e| e.to_string())?;
        shard.needs_timer(&log);
        crate::metrics::bump(
            &shard.metrics.counters.replica_bytes_appended_total,
            whole as u64,
        );
        // acks=all counts flushed copies: the next fetch reports this flush.
        partition_log::stored(&log, appended, protocol::codec::AckMode::Flushed)
            .await
            .map_err(|e| format!("{e:?}"))?;
    }
    log.borrow_mut().set_high_watermark(hw);
    Ok(())
}
