//! The producer: batches messages per partition and pipelines produce
//! requests to the shard that owns each partition.
//!
//! A batch is sent when it reaches `batch_messages` or `batch_bytes`, when
//! `linger` has passed since its first message (checked on every `send`), or
//! on [`Producer::flush`]. Requests are pipelined: the producer never waits
//! for a response before sending the next request, up to `inflight_max`
//! unacknowledged requests per connection. A reader thread per connection
//! counts acknowledgements and keeps the first error. With `AckMode::None`
//! (the paper's mode) the broker only answers failures.

use super::{Client, ClientError, Connection, ResponseFrame};
use crate::codec::{self, verify, AckMode};
use crate::frame::{self, Api, API_VERSION};
use crate::message::{encode_message, encoded_len, MESSAGE_BYTES_MAX};
use crate::wire;
use std::io::{BufWriter, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How messages are spread over partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partitioner {
    /// Keyed messages by key hash; unkeyed ones at random (the paper).
    KeyHashOrRandom,
    /// Every message to the next partition in turn.
    RoundRobin,
}

/// Producer settings.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// What acknowledgement `flush` waits for.
    pub acks: AckMode,
    /// Send a batch at this many messages.
    pub batch_messages: usize,
    /// ...or at this many bytes.
    pub batch_bytes: usize,
    /// ...or this long after its first message.
    pub linger: Duration,
    /// Partition choice.
    pub partitioner: Partitioner,
    /// Unacknowledged requests allowed per connection (acks other than None).
    pub inflight_max: u64,
    /// Connect to each partition's owning shard (true) or send everything
    /// through the bootstrap address and let the broker forward (false).
    pub shard_aware: bool,
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
        }
    }
}

#[derive(Default)]
struct LaneCounts {
    sent_requests: u64,
    answered_requests: u64,
    acked_messages: u64,
    first_error: Option<String>,
    closed: bool,
}

struct LaneState {
    counts: Mutex<LaneCounts>,
    changed: Condvar,
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
}

struct Batch {
    bytes: Vec<u8>,
    count: u32,
    started: Option<Instant>,
}

/// Sends messages to one topic. Not thread-safe; use one per thread.
pub struct Producer {
    topic: String,
    config: ProducerConfig,
    lanes: Vec<Lane>,
    lane_of_partition: Vec<usize>,
    batches: Vec<Batch>,
    next_partition: u32,
    rng: u64,
    sent_messages: u64,
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
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
        for p in 0..partitions {
            let address = if config.shard_aware {
                client.owner_address(&metadata, topic, p)
            } else {
                client.bootstrap().first().cloned().unwrap_or_default()
            };
            let index = match addresses.iter().position(|a| *a == address) {
                Some(i) => i,
                None => {
                    addresses.push(address);
                    addresses.len() - 1
                }
            };
            lane_of_partition.push(index);
        }
        let lanes = addresses
            .iter()
            .map(|a| open_lane(a))
            .collect::<Result<Vec<_>, _>>()?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9, |d| d.as_nanos() as u64)
            | 1;
        Ok(Producer {
            topic: topic.to_string(),
            batches: (0..partitions)
                .map(|_| Batch {
                    bytes: Vec::new(),
                    count: 0,
                    started: None,
                })
                .collect(),
            config,
            lanes,
            lane_of_partition,
            next_partition: 0,
            rng: seed,
            sent_messages: 0,
        })
    }

    /// Number of partitions of the topic.
    pub fn partitions(&self) -> u32 {
        self.batches.len() as u32
    }

    /// The partition a message with this key goes to (random or round-robin
    /// without a key).
    pub fn partition_for(&mut self, key: Option<&[u8]>) -> u32 {
        let n = self.partitions();
        match (key, self.config.partitioner) {
            (Some(key), Partitioner::KeyHashOrRandom) => (fnv1a(key) % u64::from(n)) as u32,
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
        }
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
        let index = partition as usize;
        if index >= self.batches.len() {
            return Err(ClientError::Usage(format!(
                "topic {:?} has partitions 0..{}, not {partition}",
                self.topic,
                self.batches.len()
            )));
        }
        if key.is_some_and(|k| k.len() > crate::message::KEY_BYTES_MAX)
            || encoded_len(key, value) > MESSAGE_BYTES_MAX
        {
            return Err(ClientError::Usage(format!(
                "message of {} bytes is too large",
                encoded_len(key, value)
            )));
        }
        let batch = &mut self.batches[index];
        if batch.started.is_none() {
            batch.started = Some(Instant::now());
        }
        encode_message(&mut batch.bytes, key, value);
        batch.count += 1;
        let full = batch.count as usize >= self.config.batch_messages
            || batch.bytes.len() >= self.config.batch_bytes;
        let lingered = batch
            .started
            .is_some_and(|t| t.elapsed() >= self.config.linger);
        if full || lingered {
            self.send_batch(index)?;
        }
        Ok(())
    }

    fn send_batch(&mut self, index: usize) -> Result<(), ClientError> {
        let count = self.batches[index].count;
        if count == 0 {
            return Ok(());
        }
        let lane_index = self.lane_of_partition[index];
        let lane = &mut self.lanes[lane_index];
        if self.config.acks != AckMode::None {
            let mut counts = lane.state.lock();
            while counts.sent_requests - counts.answered_requests >= self.config.inflight_max
                && !counts.closed
            {
                counts = lane
                    .state
                    .changed
                    .wait(counts)
                    .unwrap_or_else(|p| p.into_inner());
            }
        }
        if let Some(error) = lane.state.lock().first_error.clone() {
            return Err(ClientError::Protocol(error));
        }
        let header =
            codec::produce_request(&mut lane.fbb, &self.topic, index as u32, self.config.acks);
        let batch = &mut self.batches[index];
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
        lane.state.lock().sent_requests += 1;
        lane.writer.write_all(&prefix)?;
        lane.writer.write_all(header)?;
        lane.writer.write_all(&batch.bytes)?;
        batch.bytes.clear();
        batch.count = 0;
        batch.started = None;
        self.sent_messages += u64::from(count);
        Ok(())
    }

    /// Sends every partial batch and, unless acks are `None`, waits until
    /// every message sent so far is acknowledged. Returns the first error
    /// any request got.
    pub fn flush(&mut self) -> Result<(), ClientError> {
        for index in 0..self.batches.len() {
            self.send_batch(index)?;
        }
        for lane in &mut self.lanes {
            lane.writer.flush()?;
        }
        for lane in &self.lanes {
            let mut counts = lane.state.lock();
            if self.config.acks != AckMode::None {
                while counts.answered_requests < counts.sent_requests && !counts.closed {
                    counts = lane
                        .state
                        .changed
                        .wait(counts)
                        .unwrap_or_else(|p| p.into_inner());
                }
                if counts.answered_requests < counts.sent_requests && counts.first_error.is_none() {
                    return Err(ClientError::Protocol(
                        "the broker closed the connection before acknowledging".into(),
                    ));
                }
            }
            if let Some(error) = &counts.first_error {
                return Err(ClientError::Protocol(error.clone()));
            }
        }
        Ok(())
    }

    /// Messages handed to the network so far.
    pub fn sent_messages(&self) -> u64 {
        self.sent_messages
    }

    /// Messages the broker acknowledged so far (0 with `AckMode::None`).
    pub fn acked_messages(&self) -> u64 {
        self.lanes
            .iter()
            .map(|l| l.state.lock().acked_messages)
            .sum()
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        for lane in &mut self.lanes {
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
                        counts.answered_requests += 1;
                        if let Ok(ack) = verify::<wire::ProduceResponse>(&frame.header) {
                            counts.acked_messages += u64::from(ack.message_count());
                        }
                    }
                    Err(ClientError::Broker { code, message, .. }) => {
                        counts.answered_requests += 1;
                        counts
                            .first_error
                            .get_or_insert(format!("{code}: {message}"));
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
    })
}
