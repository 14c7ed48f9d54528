//! The follower's side: a shard fetches the partitions it follows from
//! their leaders and appends the bytes verbatim.
//!
//! One *link* per (leader broker, leader shard) carries every partition
//! this shard follows there: one connection, one MultiFetch in flight
//! naming all of them (Kafka's replica fetcher), so the leader answers as
//! soon as any has new bytes and sends every chunk with sendfile. Each
//! partition's part of the answer is applied in its own task — the
//! chunk's whole, CRC-checked messages appended at the chunk's offset,
//! rolling where the leader's segment starts, a new epoch's start recorded,
//! the flush awaited (acks=all counts flushed copies) — and the next
//! request, sent once all are applied, carries how far each copy is
//! flushed. A diverging part truncates the log to the end the leader gives
//! for the follower's last epoch, bounded by the follower's own end for
//! that epoch (Vanlightly's follower rule). A part from before a change of
//! leader or epoch is dropped; a failed one leaves its partition out of
//! the requests for a moment.

use super::{Role, SharedReplica};
use crate::shard::Shard;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use protocol::codec;
use protocol::codec::multi_fetch::{self, FetchPart, MultiFetch};
use protocol::frame::{self, Api, FramePrefix, FRAME_PREFIX_BYTES};
use protocol::types::BrokerId;
use protocol::ErrorCode;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

pub use super::LinkKey;

/// How long a follower's fetch waits at a caught-up leader (Kafka's
/// `replica.fetch.wait.max.ms`).
const FETCH_WAIT_MS: u32 = 500;

/// Bytes over all partitions of one answer (Kafka's
/// `replica.fetch.response.max.bytes`): what a link holds in memory.
const ANSWER_BYTES_MAX: u32 = 10 << 20;

/// How long a partition whose part failed stays out of the requests. The
/// common failure is a new topic's first fetch arriving before the topic
/// reached the leader's shard (UNKNOWN_TOPIC, for milliseconds), and every
/// acks=all produce of that partition waits it out: short, and the link
/// asks for the others meanwhile (at 100 ms, a new topic's first acks=all
/// answers took 60-90 ms).
const PART_BACKOFF: Duration = Duration::from_millis(20);

/// How long a link waits for an answer before it reconnects: the leader
/// answers within its wait, unless it is paused or cut off.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(15);

/// Why a link's connection ended; the link connects again with back-off.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The leader's broker is not in the registry.
    #[error("broker {0} is not live")]
    NotLive(BrokerId),
    /// Reaching the leader failed: connecting, TLS, writing or reading
    /// (`context` says which, with the leader's address), or it took too
    /// long (`TimedOut`).
    #[error("{context}: {source}")]
    Network {
        /// What was being done.
        context: String,
        /// What failed.
        source: std::io::Error,
    },
    /// The leader's advertised host cannot be checked against a TLS
    /// certificate.
    #[error("{host}: not a name a TLS certificate can carry ({source})")]
    HostName {
        /// The host.
        host: String,
        /// Why.
        source: futures_rustls::rustls::pki_types::InvalidDnsNameError,
    },
    /// The leader answered with an error code: the handshake, the
    /// broker's login or a fetch refused.
    #[error("the {what} was refused ({code}): {message}")]
    Refused {
        /// What was refused.
        what: String,
        /// The leader's code.
        code: String,
        /// Its words.
        message: String,
    },
    /// The broker's own login failed on this side (its password, the
    /// leader's proof).
    #[error("logging in as {user}: {reason}")]
    Login {
        /// The broker's user.
        user: String,
        /// Why.
        reason: String,
    },
    /// The leader's answer does not make sense.
    #[error("the leader's answer: {0}")]
    Answer(String),
    /// The shard is stopping.
    #[error("stopped")]
    Stopped,
}

/// A refusal's code and words from an error answer.
fn refusal(what: &str, prefix: &FramePrefix, header: &[u8]) -> LinkError {
    let message = codec::verify::<protocol::wire::ErrorResponse>(header)
        .ok()
        .and_then(|e| e.message().map(str::to_string))
        .unwrap_or_default();
    LinkError::Refused {
        what: what.to_string(),
        code: ErrorCode::from_u16(prefix.version_or_error)
            .map_or_else(|n| n.to_string(), |c| c.name().to_string()),
        message,
    }
}

/// Starts the links this shard needs and has not: one per leader shard of
/// the partitions it follows. A link ends by itself once it carries none.
pub fn reconcile(shard: &Rc<Shard>) {
    shard.follows_changed.notify_all();
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

/// The host and port of a live broker's shard.
fn address_of(shard: &Shard, key: LinkKey) -> Option<(String, u16)> {
    let brokers = shard.brokers.borrow();
    let broker = brokers.iter().find(|b| b.broker_id == key.0)?;
    let endpoint = broker.shards.iter().find(|s| s.shard_id == key.1)?;
    Some((endpoint.host.clone(), endpoint.port))
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
async fn serve_link(shard: &Rc<Shard>, key: LinkKey) -> Result<(), LinkError> {
    let (host, port) = address_of(shard, key).ok_or(LinkError::NotLive(key.0))?;
    let address = format!("{host}:{port}");
    let network = |context: String| move |source| LinkError::Network { context, source };
    let connect = glommio::net::TcpStream::connect(address.as_str());
    let stream = within_connect_timeout(async { connect.await.map_err(std::io::Error::from) })
        .await
        .map_err(network(format!("connecting to {address}")))?;
    let _ = stream.set_nodelay(true);
    let Some(connector) = crate::net::tls::connector() else {
        return follow(shard, key, stream).await;
    };
    // The leader's certificate must name the host it advertises.
    let name = futures_rustls::rustls::pki_types::ServerName::try_from(host.clone()).map_err(
        |source| LinkError::HostName {
            host: host.clone(),
            source,
        },
    )?;
    let handshake = connector.connect(name, stream);
    let stream = within_connect_timeout(handshake)
        .await
        .map_err(network(format!("TLS with {address}")))?;
    follow(shard, key, stream).await
}

/// The Handshake, with the SCRAM login of `broker_user` when the broker
/// has one (its leaders need it: `authentication = "scram"`).
async fn log_in<S>(
    fbb: &mut protocol::flatbuffers::FlatBufferBuilder<'static>,
    stream: &mut S,
) -> Result<(), LinkError>
where
    S: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin,
{
    let refused = |prefix: &FramePrefix, header: &[u8], what: &str| refusal(what, prefix, header);
    let Some((user, password)) = crate::auth::broker_login() else {
        let hello = codec::handshake_request(fbb, "ringlog-follower").to_vec();
        let (prefix, header, _) = exchange(stream, &frame_of(Api::Handshake, 0, &hello)).await?;
        if prefix.version_or_error != 0 {
            return Err(refused(&prefix, &header, "handshake"));
        }
        return Ok(());
    };
    let login = |reason: String| LinkError::Login {
        user: user.to_string(),
        reason,
    };
    let (client, first) = protocol::scram::client_first(user).map_err(|e| login(e.to_string()))?;
    let hello = codec::security::handshake_login_request(
        fbb,
        "ringlog-follower",
        protocol::scram::MECHANISM,
        &first,
    )
    .to_vec();
    let (prefix, header, _) = exchange(stream, &frame_of(Api::Handshake, 0, &hello)).await?;
    if prefix.version_or_error != 0 {
        return Err(refused(&prefix, &header, "handshake"));
    }
    let answer = codec::verify::<protocol::wire::HandshakeResponse>(&header)
        .map_err(|e| LinkError::Answer(format!("its handshake: {e}")))?;
    let server_first = answer.sasl_bytes().map(|b| b.bytes()).unwrap_or_default();
    let (client, last) = client
        .finish(password, server_first)
        .map_err(|e| login(e.to_string()))?;
    let proof = codec::security::authenticate_request(fbb, &last).to_vec();
    let (prefix, header, _) = exchange(stream, &frame_of(Api::Authenticate, 1, &proof)).await?;
    if prefix.version_or_error != 0 {
        return Err(refused(&prefix, &header, &format!("login of {user}")));
    }
    let answer = codec::verify::<protocol::wire::AuthenticateResponse>(&header)
        .map_err(|e| LinkError::Answer(format!("its login answer: {e}")))?;
    client
        .verify(answer.sasl_bytes().map(|b| b.bytes()).unwrap_or_default())
        .map_err(|e| login(e.to_string()))
}

/// `step` (a connect, a TLS handshake) within 5 s.
async fn within_connect_timeout<T>(
    step: impl std::future::Future<Output = std::io::Result<T>>,
) -> std::io::Result<T> {
    futures_lite::future::or(step, async {
        glommio::timer::sleep(CONNECT_TIMEOUT).await;
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {CONNECT_TIMEOUT:?}"),
        ))
    })
    .await
}

/// How long a connect, or a TLS handshake, to a leader may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The link over a connected stream (plain or TLS).
#[expect(
    clippy::too_many_lines,
    reason = "one link's request loop: build, send, wait, apply; the connection's state is local to it"
)]
async fn follow<S>(shard: &Rc<Shard>, key: LinkKey, mut stream: S) -> Result<(), LinkError>
where
    S: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin,
{
    let mut fbb = protocol::flatbuffers::FlatBufferBuilder::with_capacity(256);
    log_in(&mut fbb, &mut stream).await?;
    let part_bytes = (shard.config.message_bytes_max as u32 + 4096).max(1 << 20);
    let mut backoff: BTreeMap<(String, u32), Instant> = BTreeMap::new();
    let quiet = crate::log_limit::LogLimit::new(Duration::from_secs(10));
    let mut rotation = 0usize;
    let mut request_id = 1u32;
    loop {
        if shard.stopping.get() {
            return Err(LinkError::Stopped);
        }
        let mut replicas = followed(shard, key);
        if replicas.is_empty() {
            return Ok(());
        }
        // What this request was built from: a partition that joins the link
        // while it waits at the leader (up to FETCH_WAIT_MS) starts a new
        // connection at once instead of waiting for the answer — else a
        // new topic's acks=all produces wait that long for their first
        // follower fetch.
        let known = replicas.clone();
        let now = Instant::now();
        backoff.retain(|_, until| *until > now);
        replicas.retain(|replica| {
            let r = replica.borrow();
            !backoff.contains_key(&(r.topic.clone(), r.partition))
        });
        if replicas.is_empty() {
            glommio::timer::sleep(PART_BACKOFF).await;
            continue;
        }
        // Served in request order within the answer's bytes: each
        // partition leads in turn.
        let turn = rotation % replicas.len();
        replicas.rotate_left(turn);
        rotation = rotation.wrapping_add(1);
        let (parts, sent) = requests_of(&replicas, part_bytes);
        // A partition left out for a moment is asked for again when its
        // moment ends, not after the others' wait at a caught-up leader: a
        // new topic's first fetch often reaches the leader's shard before
        // the topic does (UNKNOWN_TOPIC), and its acks=all produces then
        // waited the whole FETCH_WAIT_MS (0.5 s, one partition in three).
        let wait_ms = backoff.values().min().map_or(FETCH_WAIT_MS, |until| {
            let left = until.saturating_duration_since(now).as_millis();
            u32::try_from(left)
                .unwrap_or(u32::MAX)
                .clamp(1, FETCH_WAIT_MS)
        });
        let request = MultiFetch {
            max_bytes: ANSWER_BYTES_MAX,
            max_wait_ms: wait_ms,
            replica_id: shard.config.broker_id as i32,
            incarnation: shard.incarnation.clone(),
        };
        let header = multi_fetch::multi_fetch_request(&mut fbb, &parts, &request);
        let frame = frame_of(Api::MultiFetch, request_id, header);
        request_id = request_id.wrapping_add(1);
        let joined = shard.follows_changed.wait_until(|| {
            followed(shard, key)
                .iter()
                .any(|r| !known.iter().any(|k| Rc::ptr_eq(k, r)))
        });
        let answered =
            futures_lite::future::or(async { Some(exchange(&mut stream, &frame).await) }, async {
                joined.await;
                None
            })
            .await;
        let Some(answered) = answered else {
            // Dropping the connection drops the request in flight: nothing
            // of it was applied.
            return Ok(());
        };
        let (prefix, header, payload) = answered?;
        if prefix.version_or_error != 0 {
            return Err(refusal("fetch", &prefix, &header));
        }
        let answers = multi_fetch::decode_multi_fetch_response(&header, payload.len())
            .map_err(|e| LinkError::Answer(e.to_string()))?;
        if answers.len() != sent.len() {
            return Err(LinkError::Answer(format!(
                "{} partitions of {}",
                answers.len(),
                sent.len()
            )));
        }
        let payload = Rc::new(payload);
        let mut tasks = Vec::new();
        for ((answer, range), (replica, generation)) in answers.into_iter().zip(sent) {
            {
                let r = replica.borrow();
                if r.topic != answer.topic || r.partition != answer.partition {
                    return Err(LinkError::Answer(format!(
                        "{}-{} in the place of {}",
                        answer.topic, answer.partition, r.label
                    )));
                }
                if r.generation != generation || !matches!(r.role(), Role::Follower { .. }) {
                    // The partition moved on (a new leader or epoch): its
                    // next fetch starts over; nothing of this part applies.
                    continue;
                }
            }
            let shard = shard.clone();
            let payload = payload.clone();
            tasks.push(glommio::spawn_local(async move {
                let applied =
                    super::apply::apply(&replica, &answer, &payload[range], &ShardApplied(&shard))
                        .await;
                (replica, applied)
            }));
        }
        for task in tasks {
            let (replica, applied) = task.await;
            if let Err(error) = applied {
                let r = replica.borrow();
                if let Some(left_out) = quiet.allow() {
                    tracing::warn!(partition = %r.label, %error, left_out, "applying the leader's answer; the partition fetches again shortly");
                }
                backoff.insert(
                    (r.topic.clone(), r.partition),
                    Instant::now() + PART_BACKOFF,
                );
            }
        }
    }
}

/// The parts of a request for `replicas`, and what each was sent as.
fn requests_of(
    replicas: &[SharedReplica],
    part_bytes: u32,
) -> (Vec<FetchPart>, Vec<(SharedReplica, u64)>) {
    let mut parts = Vec::with_capacity(replicas.len());
    let mut sent = Vec::with_capacity(replicas.len());
    for replica in replicas.iter().take(multi_fetch::PARTITIONS_MAX) {
        let r = replica.borrow();
        let l = r.log.borrow();
        parts.push(FetchPart {
            topic: r.topic.clone(),
            topic_id: r.topic_id.clone(),
            partition: r.partition,
            offset: l.end_offset(),
            max_bytes: part_bytes,
            leader_epoch: r.epoch() as i32,
            last_fetched_epoch: r.epochs.last_epoch(),
            flushed_offset: l.flushed_offset(),
        });
        sent.push((replica.clone(), r.generation));
    }
    (parts, sent)
}

/// Sends one request and reads its answer, within [`ANSWER_TIMEOUT`].
async fn exchange(
    stream: &mut (impl futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin),
    frame: &[u8],
) -> Result<(FramePrefix, Vec<u8>, Vec<u8>), LinkError> {
    let network = |source| LinkError::Network {
        context: "exchanging with the leader".to_string(),
        source,
    };
    let round = async {
        stream.write_all(frame).await?;
        stream.flush().await?;
        read_frame(stream).await
    };
    futures_lite::future::or(async { round.await.map_err(network) }, async {
        glommio::timer::sleep(ANSWER_TIMEOUT).await;
        Err(network(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {ANSWER_TIMEOUT:?}"),
        )))
    })
    .await
}

/// A follower's appends go on the shard's flush timer and its metrics.
struct ShardApplied<'a>(&'a Shard);

impl super::apply::Applied<crate::storage::io::DiskStorage> for ShardApplied<'_> {
    fn touched(&self, log: &crate::storage::SharedLog, bytes: u64) {
        self.0.needs_timer(log);
        if bytes > 0 {
            crate::metrics::bump(&self.0.metrics.counters.replica_bytes_appended_total, bytes);
        }
    }
}
