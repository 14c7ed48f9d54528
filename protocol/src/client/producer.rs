//! The producer: batches messages per partition and pipelines produce
//! requests to the shard that owns each partition.
//!
//! A batch is sent when it reaches `batch_messages` or `batch_bytes`, when
//! `linger` has passed since its first message (a background thread checks
//! every half linger, so a lone message still leaves on time), or on
//! [`Producer::flush`]. Requests are pipelined: the producer never waits
//! for a response before sending the next request, up to `inflight_max`
//! unacknowledged requests per connection. A reader thread per connection
//! counts acknowledgements and keeps the first error. With `AckMode::None`
//! (the paper's mode) the broker only answers failures.
//!
//! In a cluster, a partition whose broker is down (not in Metadata's broker
//! list when the producer was made) is unavailable, as in the paper, which
//! has no replication: the random and round-robin partitioners skip it, and
//! a message for it (by key or by number) fails at once with
//! [`ClientError::PartitionUnavailable`].

use super::{Client, ClientError, Connection, ResponseFrame};
use crate::codec::{self, verify, AckMode};
use crate::frame::{self, Api, API_VERSION};
use crate::message::{encode_message, encoded_len, MESSAGE_BYTES_MAX};
use crate::types::fnv1a;
use crate::wire;
use crate::ErrorCode;
use std::io::{BufWriter, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How messages are spread over partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partitioner {
    /// Keyed messages by key hash ([`partition_for_key`]); unkeyed ones at
    /// random (the paper). The default.
    KeyHashOrRandom,
    /// Every message to the next partition in turn.
    RoundRobin,
}

/// The partition a keyed message goes to in a topic of `partitions`:
/// `fnv1a64(key) % partitions`, as PROTOCOL.md specifies, so every client
/// (Rust, Python, the CLI) keeps one key's messages in one partition.
///
/// ```
/// assert_eq!(protocol::client::partition_for_key(b"key-7", 5), 4);
/// ```
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    (fnv1a(key) % u64::from(partitions.max(1))) as u32
}

/// Producer settings. `ProducerConfig::default()` gives the values below.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// What each produce request waits for, and so what `flush` waits for.
    /// Default [`AckMode::Written`] (in the broker's page cache).
    pub acks: AckMode,
    /// Send a partition's batch once it holds this many messages. Default 1000.
    pub batch_messages: usize,
    /// ...or this many bytes. Default 256 KiB.
    pub batch_bytes: usize,
    /// ...or this long after its first message (checked by a background
    /// thread, so a lone message still goes out). Default 5 ms.
    pub linger: Duration,
    /// Partition choice for `send`. Default [`Partitioner::KeyHashOrRandom`].
    pub partitioner: Partitioner,
    /// Unacknowledged requests allowed per connection (acks other than
    /// None); past it `send` waits. Default 1024.
    pub inflight_max: u64,
    /// Connect to each partition's owning shard (true) or send everything
    /// through the bootstrap address and let the broker forward (false).
    /// Default true.
    pub shard_aware: bool,
    /// How long [`Producer::flush`] waits for acknowledgements before it
    /// fails with [`ClientError::Timeout`] (the messages' fate is then
    /// unknown). Default 30 s.
    pub flush_timeout: Duration,
    /// Record each acknowledged request's latency, measured from the
    /// intended send time of its first message (see [`Producer::send_to_at`]);
    /// read them with [`Producer::take_latencies`]. Ignored with
    /// `AckMode::None`. Default false.
    pub track_latency: bool,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            acks: AckMode::Written,
            batch_messages: 1000,
            batch_bytes: 256 * 1024,
            linger: Duration::from_millis(5),
            partitioner: Partitioner::KeyHashOrRandom,
            inflight_max: 1024,
            shard_aware: true,
            flush_timeout: Duration::from_secs(30),
            track_latency: false,
        }
    }
}

#[derive(Default)]
struct LaneCounts {
    sent_requests: u64,
    answered_requests: u64,
    acked_messages: u64,
    first_error: Option<(ErrorCode, String)>,
    closed: bool,
    /// With latency tracking: (intended send time, messages) per request in flight.
    in_flight: std::collections::VecDeque<(Instant, u32)>,
    /// With latency tracking: (latency, messages) per answered request.
    latencies: Vec<(Duration, u32)>,
}

impl LaneCounts {
    fn answered(&mut self) {
        self.answered_requests += 1;
        if let Some((intended, count)) = self.in_flight.pop_front() {
            self.latencies.push((intended.elapsed(), count));
        }
    }
}

struct LaneState {
    counts: Mutex<LaneCounts>,
    changed: Condvar,
    /// The shard this lane sends to (for errors).
    address: String,
}

impl LaneState {
    fn lock(&self) -> std::sync::MutexGuard<'_, LaneCounts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One connection to one shard.
struct Lane {
    writer: BufWriter<TcpStream>,
    socket: TcpStream,
    fbb: flatbuffers::FlatBufferBuilder<'static>,
    state: Arc<LaneState>,
    reader: Option<JoinHandle<()>>,
    next_request_id: u32,
    unflushed: bool,
}

struct Batch {
    bytes: Vec<u8>,
    count: u32,
    started: Option<Instant>,
    /// Intended send time of the first message (latency tracking).
    intended: Option<Instant>,
}

struct Inner {
    lanes: Vec<Lane>,
    /// The lane of each partition; `None` when its broker is down.
    lane_of_partition: Vec<Option<usize>>,
    batches: Vec<Batch>,
    sent_messages: u64,
    linger_error: Option<ClientError>,
}

struct Shared {
    inner: Mutex<Inner>,
    stop: Mutex<bool>,
    stopped: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Sends messages to one topic. Use it from one thread at a time (a
/// background thread only sends batches whose linger expired).
pub struct Producer {
    topic: String,
    config: ProducerConfig,
    shared: Arc<Shared>,
    linger_thread: Option<JoinHandle<()>>,
    partitions: u32,
    /// For each partition, the broker that stores it if that broker is down.
    down: Vec<Option<u32>>,
    next_partition: u32,
    rng: u64,
}

impl Producer {
    /// A producer for `topic`, connected to the shards that own its partitions.
    pub fn new(
        client: &Client,
        topic: &str,
        config: ProducerConfig,
    ) -> Result<Producer, ClientError> {
        let metadata = client.metadata(&[topic])?;
        let topic_meta = metadata
            .topics
            .iter()
            .find(|t| t.name == topic)
            .ok_or_else(|| ClientError::Usage(format!("unknown topic {topic:?}")))?;
        let partitions = topic_meta.partitions.len() as u32;
        let mut addresses: Vec<String> = Vec::new();
        let mut lane_of_partition = Vec::new();
        let mut down = Vec::new();
        let clustered = metadata.brokers.len() > 1
            || topic_meta
                .partitions
                .iter()
                .any(|p| !metadata.brokers.iter().any(|b| b.broker_id == p.broker_id));
        for placement in &topic_meta.partitions {
            let p = placement.partition;
            let address = if !clustered {
                // One broker: any of its shards forwards to the owner.
                Some(if config.shard_aware {
                    client.owner_address(&metadata, topic, p)
                } else {
                    client.bootstrap().first().cloned().unwrap_or_default()
                })
            } else {
                let broker = metadata
                    .brokers
                    .iter()
                    .find(|b| b.broker_id == placement.broker_id);
                let shard = if config.shard_aware {
                    metadata.owner_address(topic, p)
                } else {
                    broker.and_then(|b| b.shards.first())
                };
                shard.map(|s| format!("{}:{}", s.host, s.port))
            };
            let Some(address) = address else {
                lane_of_partition.push(None);
                down.push(Some(placement.broker_id));
                continue;
            };
            let index = match addresses.iter().position(|a| *a == address) {
                Some(i) => i,
                None => {
                    addresses.push(address);
                    addresses.len() - 1
                }
            };
            lane_of_partition.push(Some(index));
            down.push(None);
        }
        let lanes = addresses
            .iter()
            .map(|a| open_lane(a))
            .collect::<Result<Vec<_>, _>>()?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9, |d| d.as_nanos() as u64)
            | 1;
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                lanes,
                lane_of_partition,
                batches: (0..partitions)
                    .map(|_| Batch {
                        bytes: Vec::new(),
                        count: 0,
                        started: None,
                        intended: None,
                    })
                    .collect(),
                sent_messages: 0,
                linger_error: None,
            }),
            stop: Mutex::new(false),
            stopped: Condvar::new(),
        });
        let linger_thread = spawn_linger(shared.clone(), topic.to_string(), config.clone())?;
        Ok(Producer {
            topic: topic.to_string(),
            config,
            shared,
            linger_thread: Some(linger_thread),
            partitions,
            down,
            next_partition: 0,
            rng: seed,
        })
    }

    /// The partitions whose broker was down when the producer was made.
    pub fn unavailable_partitions(&self) -> Vec<u32> {
        (0..self.partitions)
            .filter(|&p| self.down[p as usize].is_some())
            .collect()
    }

    /// Number of partitions of the topic.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// The partition a message with this key goes to (random or round-robin
    /// without a key, skipping partitions whose broker is down; by key hash
    /// with a key, whether its broker is up or not).
    pub fn partition_for(&mut self, key: Option<&[u8]>) -> u32 {
        let n = self.partitions;
        let first = match (key, self.config.partitioner) {
            (Some(key), Partitioner::KeyHashOrRandom) => return partition_for_key(key, n),
            (None, Partitioner::KeyHashOrRandom) => {
                self.rng ^= self.rng << 13;
                self.rng ^= self.rng >> 7;
                self.rng ^= self.rng << 17;
                (self.rng % u64::from(n)) as u32
            }
            (_, Partitioner::RoundRobin) => {
                let p = self.next_partition % n;
                self.next_partition = self.next_partition.wrapping_add(1);
                p
            }
        };
        // The first live partition from the choice on; the choice itself if
        // none is live (sending to it then names the broker that is down).
        (0..n)
            .map(|i| (first + i) % n)
            .find(|&p| self.down[p as usize].is_none())
            .unwrap_or(first)
    }

    /// Queues one message for the partitioner's choice of partition.
    pub fn send(&mut self, key: Option<&[u8]>, value: &[u8]) -> Result<u32, ClientError> {
        let partition = self.partition_for(key);
        self.send_to(partition, key, value)?;
        Ok(partition)
    }

    /// Queues one message for a given partition.
    pub fn send_to(
        &mut self,
        partition: u32,
        key: Option<&[u8]>,
        value: &[u8],
    ) -> Result<(), ClientError> {
        let intended = if self.config.track_latency {
            Some(Instant::now())
        } else {
            None
        };
        self.send_to_inner(partition, key, value, intended)
    }

    /// Queues one message that was *meant* to be sent at `intended`. A
    /// fixed-rate benchmark passes its schedule here, so a stall shows up in
    /// the latencies instead of silently delaying later sends (coordinated
    /// omission).
    pub fn send_to_at(
        &mut self,
        partition: u32,
        key: Option<&[u8]>,
        value: &[u8],
        intended: Instant,
    ) -> Result<(), ClientError> {
        self.send_to_inner(partition, key, value, Some(intended))
    }

    /// Latencies of the requests acknowledged since the last call:
    /// (latency, messages in the request). Empty unless `track_latency`.
    pub fn take_latencies(&self) -> Vec<(Duration, u32)> {
        let inner = self.shared.lock();
        let mut out = Vec::new();
        for lane in &inner.lanes {
            out.append(&mut lane.state.lock().latencies);
        }
        out
    }

    fn send_to_inner(
        &mut self,
        partition: u32,
        key: Option<&[u8]>,
        value: &[u8],
        intended: Option<Instant>,
    ) -> Result<(), ClientError> {
        let index = partition as usize;
        if partition >= self.partitions {
            return Err(ClientError::Usage(format!(
                "topic {:?} has partitions 0..{}, not {partition}",
                self.topic, self.partitions
            )));
        }
        if let Some(broker_id) = self.down[index] {
            return Err(ClientError::PartitionUnavailable {
                topic: self.topic.clone(),
                partition,
                broker_id,
            });
        }
        if key.is_some_and(|k| k.len() > crate::message::KEY_BYTES_MAX)
            || encoded_len(key, value) > MESSAGE_BYTES_MAX
        {
            return Err(ClientError::Usage(format!(
                "message of {} bytes is too large",
                encoded_len(key, value)
            )));
        }
        let mut inner = self.shared.lock();
        if let Some(error) = inner.linger_error.take() {
            return Err(error);
        }
        let batch = &mut inner.batches[index];
        if batch.started.is_none() {
            batch.started = Some(Instant::now());
            batch.intended = intended;
        }
        encode_message(&mut batch.bytes, key, value);
        batch.count += 1;
        if batch.count as usize >= self.config.batch_messages
            || batch.bytes.len() >= self.config.batch_bytes
        {
            send_batch(&mut inner, &self.topic, &self.config, index)?;
        }
        Ok(())
    }

    /// Sends every partial batch and, unless acks are `None`, waits until
    /// every message sent so far is acknowledged. Returns the first error
    /// any request got.
    pub fn flush(&mut self) -> Result<(), ClientError> {
        let states: Vec<Arc<LaneState>> = {
            let mut inner = self.shared.lock();
            if let Some(error) = inner.linger_error.take() {
                return Err(error);
            }
            for index in 0..inner.batches.len() {
                send_batch(&mut inner, &self.topic, &self.config, index)?;
            }
            for lane in &mut inner.lanes {
                lane.writer.flush()?;
            }
            inner.lanes.iter().map(|l| l.state.clone()).collect()
        };
        for state in states {
            let mut counts = state.lock();
            if self.config.acks != AckMode::None {
                let deadline = Instant::now() + self.config.flush_timeout;
                while counts.answered_requests < counts.sent_requests && !counts.closed {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(ClientError::Timeout {
                            address: state.address.clone(),
                            during: "the acknowledgements of a flush",
                            waited: self.config.flush_timeout,
                        });
                    }
                    counts = state
                        .changed
                        .wait_timeout(counts, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                if counts.answered_requests < counts.sent_requests && counts.first_error.is_none() {
                    return Err(ClientError::Disconnected {
                        address: state.address.clone(),
                        unanswered: counts.sent_requests - counts.answered_requests,
                    });
                }
            }
            if let Some((code, message)) = &counts.first_error {
                return Err(broker(*code, message));
            }
        }
        Ok(())
    }

    /// Messages handed to the network so far.
    pub fn sent_messages(&self) -> u64 {
        self.shared.lock().sent_messages
    }

    /// Messages the broker acknowledged so far (0 with `AckMode::None`).
    pub fn acked_messages(&self) -> u64 {
        self.shared
            .lock()
            .lanes
            .iter()
            .map(|l| l.state.lock().acked_messages)
            .sum()
    }
}

/// A broker's error answer as the caller sees it.
fn broker(code: ErrorCode, message: &str) -> ClientError {
    ClientError::Broker {
        code,
        message: message.to_string(),
        range: None,
        owner_broker_id: None,
    }
}

/// Writes one partition's batch as a produce request (waiting while the
/// lane has `inflight_max` unacknowledged requests).
fn send_batch(
    inner: &mut Inner,
    topic: &str,
    config: &ProducerConfig,
    index: usize,
) -> Result<(), ClientError> {
    let count = inner.batches[index].count;
    if count == 0 {
        return Ok(());
    }
    let Some(lane_index) = inner.lane_of_partition[index] else {
        return Err(ClientError::Usage(format!(
            "{topic}-{index} has no connection: its broker is down"
        )));
    };
    let lane = &mut inner.lanes[lane_index];
    if config.acks != AckMode::None {
        let mut counts = lane.state.lock();
        while counts.sent_requests - counts.answered_requests >= config.inflight_max
            && !counts.closed
        {
            counts = lane
                .state
                .changed
                .wait(counts)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
    if let Some((code, message)) = lane.state.lock().first_error.clone() {
        return Err(broker(code, &message));
    }
    let header = codec::produce_request(&mut lane.fbb, topic, index as u32, config.acks);
    let batch = &mut inner.batches[index];
    let mut prefix = Vec::with_capacity(frame::FRAME_PREFIX_BYTES);
    frame::write_prefix(
        &mut prefix,
        Api::Produce as u16,
        API_VERSION,
        lane.next_request_id,
        header.len(),
        batch.bytes.len(),
    );
    lane.next_request_id = lane.next_request_id.wrapping_add(1);
    {
        let mut counts = lane.state.lock();
        counts.sent_requests += 1;
        if config.track_latency && config.acks != AckMode::None {
            counts
                .in_flight
                .push_back((batch.intended.unwrap_or_else(Instant::now), count));
        }
    }
    lane.writer.write_all(&prefix)?;
    lane.writer.write_all(header)?;
    lane.writer.write_all(&batch.bytes)?;
    lane.unflushed = true;
    batch.bytes.clear();
    batch.count = 0;
    batch.started = None;
    batch.intended = None;
    inner.sent_messages += u64::from(count);
    Ok(())
}

/// The linger thread: every half linger (1 ms to 100 ms), sends batches
/// whose first message waited `linger`, and pushes buffered requests out.
fn spawn_linger(
    shared: Arc<Shared>,
    topic: String,
    config: ProducerConfig,
) -> Result<JoinHandle<()>, ClientError> {
    let tick = (config.linger / 2).clamp(Duration::from_millis(1), Duration::from_millis(100));
    let handle = std::thread::Builder::new()
        .name("ringlog-producer-linger".into())
        .spawn(move || loop {
            {
                let stop = shared.stop.lock().unwrap_or_else(|p| p.into_inner());
                let (stop, _) = shared
                    .stopped
                    .wait_timeout(stop, tick)
                    .unwrap_or_else(|p| p.into_inner());
                if *stop {
                    return;
                }
            }
            let mut inner = shared.lock();
            let expired: Vec<usize> = inner
                .batches
                .iter()
                .enumerate()
                .filter(|(_, b)| b.started.is_some_and(|t| t.elapsed() >= config.linger))
                .map(|(i, _)| i)
                .collect();
            for index in expired {
                if let Err(error) = send_batch(&mut inner, &topic, &config, index) {
                    inner.linger_error.get_or_insert(error);
                }
            }
            let mut flush_error = None;
            for lane in &mut inner.lanes {
                if std::mem::take(&mut lane.unflushed) {
                    if let Err(error) = lane.writer.flush() {
                        flush_error = Some(error);
                    }
                }
            }
            if let Some(error) = flush_error {
                inner.linger_error.get_or_insert(ClientError::Io(error));
            }
        })?;
    Ok(handle)
}

impl Drop for Producer {
    fn drop(&mut self) {
        *self.shared.stop.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.shared.stopped.notify_all();
        if let Some(thread) = self.linger_thread.take() {
            let _ = thread.join();
        }
        // Best effort, like a close: queued batches still go out (without
        // waiting for acknowledgements; call `flush` for that).
        let mut inner = self.shared.lock();
        for index in 0..inner.batches.len() {
            let _ = send_batch(&mut inner, &self.topic, &self.config, index);
        }
        for lane in &mut inner.lanes {
            let _ = lane.writer.flush();
            let _ = lane.socket.shutdown(Shutdown::Both);
            if let Some(reader) = lane.reader.take() {
                let _ = reader.join();
            }
        }
    }
}

fn open_lane(address: &str) -> Result<Lane, ClientError> {
    let conn = Connection::connect(address)?;
    let (mut reader, writer) = conn.split();
    let socket = writer.get_ref().try_clone()?;
    let state = Arc::new(LaneState {
        counts: Mutex::new(LaneCounts::default()),
        changed: Condvar::new(),
        address: address.to_string(),
    });
    let thread_state = state.clone();
    let handle = std::thread::Builder::new()
        .name("ringlog-producer-acks".into())
        .spawn(move || {
            let mut frame = ResponseFrame::default();
            loop {
                let result = super::read_response(&mut reader, &mut frame);
                let mut counts = thread_state.lock();
                match result {
                    Ok(()) => {
                        counts.answered();
                        if let Ok(ack) = verify::<wire::ProduceResponse>(&frame.header) {
                            counts.acked_messages += u64::from(ack.message_count());
                        }
                    }
                    Err(ClientError::Broker { code, message, .. }) => {
                        counts.answered();
                        counts.first_error.get_or_insert((code, message));
                    }
                    Err(_) => {
                        counts.closed = true;
                        thread_state.changed.notify_all();
                        return;
                    }
                }
                thread_state.changed.notify_all();
            }
        })?;
    Ok(Lane {
        writer,
        socket,
        fbb: flatbuffers::FlatBufferBuilder::with_capacity(256),
        state,
        reader: Some(handle),
        next_request_id: 1,
        unflushed: false,
    })
}
