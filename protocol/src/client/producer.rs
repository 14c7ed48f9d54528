//! The producer: batches messages per partition, pipelines produce requests
//! to the shard that owns each partition, reports each batch's outcome, and
//! resends what a broken connection or a passing refusal left unconfirmed.
//!
//! A batch is sent when it reaches `batch_messages` or `batch_bytes`, when
//! `linger` has passed since its first message (a background thread checks
//! every half linger, so a lone message still leaves on time), or on
//! [`Producer::flush`]. Requests are pipelined: the producer never waits
//! for a response before sending the next request, up to `inflight_max`
//! unacknowledged requests per connection and `buffer_bytes_max` bytes
//! kept for resending. A reader thread per connection matches each
//! response to its batch (responses come in request order).
//!
//! **Delivery.** With acks `Written`, `Flushed` or `All` every batch ends
//! in one [`Delivery`], whose [`Outcome`] is one of three:
//! - `Stored`, with its offsets;
//! - `Failed`: not stored. Every attempt was refused before anything was
//!   appended (UNKNOWN_TOPIC, NOT_LEADER, NOT_ENOUGH_REPLICAS, ...), or
//!   the batch never left the producer;
//! - `Unknown`: perhaps stored. An attempt's answer never came (the
//!   connection broke or timed out after it was written), or the broker
//!   answered that it had appended the batch before failing
//!   (NOT_ENOUGH_REPLICAS_AFTER_APPEND, STORAGE_FAILED, INTERNAL). Only
//!   reading the partition tells.
//!
//! A batch whose connection broke, or that was refused with a code that
//! passes (NOT_OWNER, NOT_LEADER, OVERLOADED, SHUTTING_DOWN,
//! STORAGE_UNAVAILABLE, ...), is sent again after reconnecting with fresh
//! metadata, with backoff, until its
//! [`delivery_timeout`](ProducerConfig::delivery_timeout) has passed since
//! its first message was queued (as rdkafka's `message.timeout.ms`), or
//! [`retries`](ProducerConfig::retries) resends. A partition's batches
//! are resent in their original order, and new batches for it wait behind
//! them.
//!
//! **Idempotence** (format-2 topics, acks other than `None`, on by
//! default: [`ProducerConfig::idempotence`]): the producer takes an id
//! from the broker (InitProducerId) and numbers each partition's batches
//! (`numbering.rs`), with at most five of them on the wire per partition
//! (the open batch grows meanwhile). A resent batch the broker stored
//! already is answered with its original offsets, not stored again, and a
//! batch after a refused one is refused (OUT_OF_ORDER_SEQUENCE) and resent
//! after it: every message is stored **once, in the order of `send`** —
//! across broken connections and leader changes. Without it (format 1, or
//! idempotence off) delivery is **at least once**: a batch whose
//! connection broke after the broker stored it, but before the answer
//! arrived, is stored twice, and a later batch may be stored before an
//! earlier one refused with OVERLOADED or STORAGE_UNAVAILABLE and resent
//! after it. With `AckMode::None` (the paper's mode) the broker only
//! answers failures and nothing is resent.
//!
//! **After an error** the producer stays usable: a failure affects only
//! its batch, is reported in that batch's delivery report and by the next
//! [`Producer::flush`] (as [`ClientError::Undelivered`]), and later
//! messages are sent as usual.
//!
//! **Metadata** is looked at again every
//! [`metadata_max_age`](ProducerConfig::metadata_max_age) (as Kafka's
//! `metadata.max.age.ms`), so partitions added to the topic
//! (`ringlog topic alter`) are used, and leaders that moved are followed,
//! without waiting for an error.
//!
//! In a cluster, a partition whose broker is down — not in Metadata's
//! broker list, or not answering a connect — is unavailable, as in the
//! paper, which has no replication: the random and round-robin partitioners
//! skip it from its first failed connect, and a new message for it (by key
//! or by number) fails at once with [`ClientError::PartitionUnavailable`]
//! naming the broker. Batches already sent to it keep their retries. While
//! a partition is down the producer looks at Metadata again every second
//! or so (backing off to 10 s) and uses the partition again as soon as its
//! broker answers.

use super::numbering::{Numbering, IN_FLIGHT_MAX};
use super::{lock, Client, ClientError, ResponseFrame};
use crate::batch::{self, write::BatchWriter, Compression};
use crate::codec::{self, verify, AckMode, Metadata};
use crate::frame::{self, Api, API_VERSION};
use crate::message::{encode_message, encoded_len, MESSAGE_BYTES_MAX};
use crate::stored::MessageFormat;
use crate::types::fnv1a;
use crate::wire;
use crate::ErrorCode;
use std::collections::VecDeque;
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

/// Producer settings. `ProducerConfig::default()` gives the values below;
/// timeouts and retries come from the client's
/// [`ClientConfig`](super::ClientConfig).
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
    /// Bytes of sent but unacknowledged batches kept for resending, plus
    /// batches waiting to be resent (acks other than None); past it `send`
    /// waits (at most the client's `flush_timeout`). Default 32 MiB.
    pub buffer_bytes_max: usize,
    /// How long a written request may wait in its connection's buffer to
    /// share one write (one syscall) with the next requests, unless the
    /// connection is idle (then it goes at once). Longer means fewer
    /// syscalls for many small requests and more latency. Default 100 µs.
    pub flush_delay: Duration,
    /// Connect to each partition's owning shard (true) or send everything
    /// through the bootstrap address and let the broker forward (false).
    /// Default true.
    pub shard_aware: bool,
    /// Keep a [`Delivery`] for every batch, stored or failed, to be taken
    /// with [`Producer::take_deliveries`]. Failures are reported by `flush`
    /// either way. Default false.
    pub delivery_reports: bool,
    /// Record each acknowledged request's latency, measured from the
    /// intended send time of its first message (see [`Producer::send_to_at`]);
    /// read them with [`Producer::take_latencies`]. Ignored with
    /// `AckMode::None`. Default false.
    pub track_latency: bool,
    /// How long after its first message was queued a batch may still be
    /// resent: past it, the batch ends `Failed` or `Unknown` with
    /// [`ClientError::DeliveryTimeout`] instead of another attempt. A batch
    /// in flight at that moment still gets its answer (or the client's
    /// `request_timeout`). The bound on how long an outage a producer
    /// rides out. Default 120 s (Kafka's `delivery.timeout.ms`).
    pub delivery_timeout: Duration,
    /// How often the producer reads the topic's Metadata again although
    /// nothing failed: partitions added to the topic are used from then
    /// on. Default 30 s.
    pub metadata_max_age: Duration,
    /// The most times a batch is sent again (after a broken connection, a
    /// refusal that passes, or a failed reconnect while it waits). Default
    /// `u32::MAX`: the delivery timeout is the bound. 0 sends every batch
    /// once. (The client's [`ClientConfig::retries`](super::ClientConfig::retries)
    /// bounds its other requests, not a producer's batches.)
    pub retries: u32,
    /// Format-2 topics: how each batch's records are compressed (a batch
    /// that would not shrink goes uncompressed). Format 1 has none: other
    /// than `None` there is an error. Default `None`.
    pub compression: Compression,
    /// Format-2 topics with acks other than `None`: number every batch
    /// (a producer id from the broker, an epoch and sequences per
    /// partition), so a batch resent after a lost answer is never stored
    /// twice and a partition's batches are stored in the order sent;
    /// at most 5 batches per partition are on the wire. Ignored on format
    /// 1 and with acks `None`. Default true.
    pub idempotence: bool,
}

/// What a format-2 message carries beside its key and value.
#[derive(Debug, Clone, Copy, Default)]
pub struct Extras<'a> {
    /// Its time in ms since the Unix epoch (`None`: when it is sent). A
    /// LogAppendTime topic keeps the broker's instead.
    pub timestamp_ms: Option<i64>,
    /// Its headers, in order: a UTF-8 key and a value (`None`: no value).
    pub headers: &'a [(&'a str, Option<&'a [u8]>)],
}

impl Extras<'_> {
    fn is_empty(&self) -> bool {
        self.timestamp_ms.is_none() && self.headers.is_empty()
    }

    /// A record's bytes at most: the fields and their varints (5 bytes
    /// each at most, 10 for the time).
    fn record_len(&self, key: Option<&[u8]>, value: &[u8]) -> usize {
        let headers: usize = self
            .headers
            .iter()
            .map(|(k, v)| 10 + k.len() + v.map_or(0, <[u8]>::len))
            .sum();
        5 + 1 + 10 + 5 + 5 + key.map_or(0, <[u8]>::len) + 5 + value.len() + 5 + headers
    }
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
            buffer_bytes_max: 32 * 1024 * 1024,
            flush_delay: Duration::from_micros(100),
            shard_aware: true,
            delivery_reports: false,
            track_latency: false,
            delivery_timeout: Duration::from_secs(120),
            metadata_max_age: Duration::from_secs(30),
            retries: u32::MAX,
            compression: Compression::None,
            idempotence: true,
        }
    }
}

/// Which message a `send` queued: the `sequence`-th message (from 0) sent
/// to `partition` by this producer. A [`Delivery`] names the same numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Receipt {
    /// The partition it went to.
    pub partition: u32,
    /// Its number among the messages this producer sent to that partition.
    pub sequence: u64,
}

/// Where a batch was stored: its messages occupy `base_offset..end_offset`
/// of the partition (byte offsets, as the log is addressed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// The offset of the batch's first message.
    pub base_offset: u64,
    /// The offset after its last message.
    pub end_offset: u64,
}

/// What became of a batch.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Stored, at these offsets.
    Stored(Stored),
    /// Not stored: every attempt was refused before anything was appended,
    /// or the batch was never sent. Sending its messages again cannot
    /// duplicate them.
    Failed(ClientError),
    /// Perhaps stored: an attempt was written and its answer never came,
    /// or the broker appended it and then failed. Only reading the
    /// partition tells; sending it again may store it twice.
    Unknown(ClientError),
}

/// The outcome of one batch: messages `first_sequence ..
/// first_sequence + messages` of `partition` (see [`Receipt`]).
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The partition.
    pub partition: u32,
    /// The [`Receipt::sequence`] of the batch's first message.
    pub first_sequence: u64,
    /// Messages in the batch.
    pub messages: u32,
    /// Attempts to deliver the batch: each send, and each failed
    /// reconnect while it waited to be resent. More than 1 means it was
    /// retried; a batch sent more than once may be stored more than once.
    pub attempts: u32,
    /// Stored, failed, or unknown, and why.
    pub outcome: Outcome,
}

impl Delivery {
    /// Where the batch was stored, if it was.
    pub fn stored(&self) -> Option<Stored> {
        match &self.outcome {
            Outcome::Stored(stored) => Some(*stored),
            _ => None,
        }
    }

    /// Why the batch was not (or perhaps not) stored.
    pub fn error(&self) -> Option<&ClientError> {
        match &self.outcome {
            Outcome::Stored(_) => None,
            Outcome::Failed(error) | Outcome::Unknown(error) => Some(error),
        }
    }

    /// True when the batch may have been stored although not confirmed.
    pub fn is_unknown(&self) -> bool {
        matches!(self.outcome, Outcome::Unknown(_))
    }

    /// True when `receipt`'s message was in this batch.
    pub fn covers(&self, receipt: &Receipt) -> bool {
        receipt.partition == self.partition
            && (self.first_sequence..self.first_sequence + u64::from(self.messages))
                .contains(&receipt.sequence)
    }
}

/// A batch sent (or to be sent again) and not yet answered.
struct Pending {
    partition: u32,
    first_sequence: u64,
    count: u32,
    /// Shared with the write in progress, so the reader may answer it
    /// before the writer has let go.
    bytes: Arc<Vec<u8>>,
    /// Times written to a connection.
    sends: u32,
    /// Intended send time of the first message (latency tracking).
    intended: Option<Instant>,
    request_id: u32,
    /// When it was last written.
    sent_at: Instant,
    /// Past it, no further attempt: its first message's queueing plus the
    /// delivery timeout.
    deadline: Instant,
    /// An attempt was written and never answered, or was answered that it
    /// was appended before failing: it may be stored.
    in_doubt: bool,
    /// What the last attempt met (the reason given at the deadline).
    last_error: Option<ClientError>,
}

impl Pending {
    /// Its bytes to change (numbered again), copied only if a write in
    /// progress still shares them.
    fn bytes_mut(&mut self) -> &mut Vec<u8> {
        Arc::make_mut(&mut self.bytes)
    }
}

enum Answer {
    Stored(Stored),
    Refused(ErrorCode, String),
}

/// Bumped by every reader on every response: what a waiting `send` or
/// `flush` waits for.
#[derive(Default)]
struct Events {
    generation: Mutex<u64>,
    changed: Condvar,
    /// Threads in `wait`: a bump without waiters skips the wake-up
    /// syscall (one per response otherwise).
    waiters: std::sync::atomic::AtomicUsize,
}

impl Events {
    fn generation(&self) -> u64 {
        *lock(&self.generation)
    }

    fn bump(&self) {
        *lock(&self.generation) += 1;
        // A waiter registers under the lock before it checks the
        // generation, so a bump after that check sees it here.
        if self.waiters.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            self.changed.notify_all();
        }
    }

    /// Waits until a response arrived after `seen`, or `timeout`.
    fn wait(&self, seen: u64, timeout: Duration) {
        use std::sync::atomic::Ordering::SeqCst;
        let guard = lock(&self.generation);
        self.waiters.fetch_add(1, SeqCst);
        let _ = self
            .changed
            .wait_timeout_while(guard, timeout, |g| *g == seen);
        self.waiters.fetch_sub(1, SeqCst);
    }
}

#[derive(Default)]
struct LaneCounts {
    /// Sent batches awaiting their answer, in request order (acks other
    /// than None).
    in_flight: VecDeque<Pending>,
    in_flight_bytes: usize,
    /// Answered batches the producer has not looked at yet: every failure,
    /// and successes when delivery reports are on.
    answers: Vec<(Pending, Answer)>,
    /// Failures answered for acks None (no batch is kept to name).
    refusals: Vec<(ErrorCode, String)>,
    /// Produce requests written (for the disconnect report with acks None).
    written: u64,
    closed: bool,
    acked_messages: u64,
    /// The brokers' quota delays reported in answers (`throttle_ms`).
    throttled_ms: u64,
    /// The last answer's throttle time runs out then: the lane sends
    /// nothing before (a broker reporting it in every frame only).
    quiet_until: Option<Instant>,
    /// With latency tracking: (latency, messages) per answered request.
    latencies: Vec<(Duration, u32)>,
    /// Batch buffers handed back by the reader for reuse.
    spare: Vec<Vec<u8>>,
}

struct LaneState {
    counts: Mutex<LaneCounts>,
    events: Arc<Events>,
}

/// One connection to one shard.
struct Lane {
    address: String,
    writer: BufWriter<super::Stream>,
    socket: TcpStream,
    fbb: flatbuffers::FlatBufferBuilder<'static>,
    state: Arc<LaneState>,
    reader: Option<JoinHandle<()>>,
    next_request_id: u32,
    unflushed: bool,
    /// When buffered requests were last pushed to the socket.
    last_flush: Instant,
    /// A write failed: nothing more goes out on it.
    broken: bool,
    /// It was closed because a request waited past the request timeout.
    timed_out: bool,
}

impl Lane {
    fn dead(&self) -> bool {
        self.broken || lock(&self.state.counts).closed
    }

    /// Closes the socket and waits for the reader to stop.
    fn shut(&mut self) {
        let _ = self.socket.shutdown(Shutdown::Both);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

struct Batch {
    bytes: Vec<u8>,
    /// Format 2: the records so far (`bytes` is the finished batch).
    records: BatchWriter,
    count: u32,
    first_sequence: u64,
    started: Option<Instant>,
    /// Intended send time of the first message (latency tracking).
    intended: Option<Instant>,
}

impl Batch {
    /// Bytes queued so far.
    fn len(&self, format: MessageFormat) -> usize {
        match format {
            MessageFormat::One => self.bytes.len(),
            MessageFormat::Two if self.count == 0 => 0,
            MessageFormat::Two => self.records.size(),
        }
    }

    fn empty() -> Batch {
        Batch {
            bytes: Vec::new(),
            records: BatchWriter::new(),
            count: 0,
            first_sequence: 0,
            started: None,
            intended: None,
        }
    }
}

/// What a producer was made with; shared with the linger thread.
struct Setup {
    topic: String,
    config: ProducerConfig,
    client: Client,
    /// What the topic stores (fixed for its life).
    format: MessageFormat,
}

/// Messages given up on since the last flush.
struct Failures {
    messages: u64,
    batches: u64,
    /// Of `messages`, those that may have been stored.
    unknown: u64,
    first: ClientError,
}

struct Inner {
    lanes: Vec<Lane>,
    /// The lane of each partition; `None` when its broker is down.
    lane_of_partition: Vec<Option<usize>>,
    /// For each partition, the broker that stores it if that broker is down.
    down: Vec<Option<u32>>,
    batches: Vec<Batch>,
    next_sequence: Vec<u64>,
    /// Batches waiting to be sent again (or behind one that is), in
    /// (partition, sequence) order.
    retry: Vec<Pending>,
    retry_bytes: usize,
    retry_at: Instant,
    reconnect: bool,
    reconnect_failures: u32,
    /// When the routes were last applied.
    routed_at: Instant,
    /// How long after that a producer with a partition down looks again.
    recheck: Duration,
    /// The topic has copies on several brokers: a partition whose leader
    /// is down gets a new one within about the lease TTL, so its batches
    /// wait (with their retries) instead of failing fast.
    replicated: bool,

    sent_messages: u64,
    /// Bytes of the batches sent (each once, however often resent).
    sent_bytes: u64,
    deliveries: Vec<Delivery>,
    failures: Option<Failures>,
    spare: Vec<Vec<u8>>,
    /// The size of the last batch sent: what a new buffer is made for.
    last_batch_bytes: usize,
    closed: bool,
    /// An idempotent producer's numbers.
    numbering: Option<Numbering>,
}

/// The most an idempotent producer's batch grows past `batch_messages`
/// while its partition has five batches on the wire: below the broker's
/// default `message_bytes_max` (1 MiB), which a format-2 batch must not
/// exceed.
const GROWN_BATCH_BYTES_MAX: usize = 1000 * 1024;

/// Spare batch buffers kept by the producer and by each connection's
/// reader (answered batches' buffers, reused by new batches).
const SPARE_BUFFERS: usize = 16;

struct Shared {
    setup: Setup,
    inner: Mutex<Inner>,
    events: Arc<Events>,
    stop: Mutex<bool>,
    stopped: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        lock(&self.inner)
    }
}

/// Sends messages to one topic. Use it from one thread at a time (a
/// background thread only sends batches whose linger expired and retries).
///
/// Dropping a producer sends what is queued without waiting for answers;
/// [`Producer::close`] waits for them (with a deadline) and reports.
pub struct Producer {
    shared: Arc<Shared>,
    linger_thread: Option<JoinHandle<()>>,
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
        let format = metadata
            .topics
            .iter()
            .find(|t| t.name == topic)
            .and_then(|t| MessageFormat::from_number(t.settings.message_format))
            .unwrap_or_default();
        if format == MessageFormat::One && config.compression != Compression::None {
            return Err(ClientError::Usage(format!(
                "topic {topic:?} stores the paper's messages (format 1), which are not compressed: {:?} needs a topic created with message format 2",
                config.compression
            )));
        }
        let setup = Setup {
            topic: topic.to_string(),
            config,
            client: client.clone(),
            format,
        };
        let routes = routes(&setup, &metadata)?;
        let partitions = routes.len() as u32;
        let numbering = numbering(client, &setup, partitions as usize)?;
        let events = Arc::new(Events::default());
        let mut inner = Inner {
            lanes: Vec::new(),
            lane_of_partition: vec![None; partitions as usize],
            down: vec![None; partitions as usize],
            batches: (0..partitions).map(|_| Batch::empty()).collect(),
            next_sequence: vec![0; partitions as usize],
            retry: Vec::new(),
            retry_bytes: 0,
            retry_at: Instant::now(),
            reconnect: false,
            reconnect_failures: 0,
            routed_at: Instant::now(),
            recheck: DOWN_RECHECK_MIN,
            replicated: metadata
                .topics
                .iter()
                .find(|t| t.name == topic)
                .is_some_and(|t| t.partitions.iter().any(|p| p.replicas.len() > 1)),

            sent_messages: 0,
            sent_bytes: 0,
            deliveries: Vec::new(),
            failures: None,
            spare: Vec::new(),
            last_batch_bytes: 0,
            closed: false,
            numbering,
        };
        inner.apply_routes(&setup, &events, routes)?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9, |d| d.as_nanos() as u64)
            | 1;
        let shared = Arc::new(Shared {
            setup,
            inner: Mutex::new(inner),
            events,
            stop: Mutex::new(false),
            stopped: Condvar::new(),
        });
        let linger_thread = spawn_linger(shared.clone())?;
        Ok(Producer {
            shared,
            linger_thread: Some(linger_thread),
            next_partition: 0,
            rng: seed,
        })
    }

    /// An idempotent producer's id and epoch (`None`: its batches are not
    /// numbered — format 1, acks `None`, or idempotence off).
    pub fn producer_id(&self) -> Option<crate::codec::producer_id::ProducerId> {
        self.shared
            .lock()
            .numbering
            .as_ref()
            .map(Numbering::producer)
    }

    /// The partitions whose broker was down at the last metadata refresh.
    pub fn unavailable_partitions(&self) -> Vec<u32> {
        let inner = self.shared.lock();
        (0..inner.down.len() as u32)
            .filter(|&p| inner.down[p as usize].is_some())
            .collect()
    }

    /// Number of partitions of the topic, as of the last Metadata.
    pub fn partitions(&self) -> u32 {
        self.shared.lock().batches.len() as u32
    }

    /// The partition a message with this key goes to (random or round-robin
    /// without a key, skipping partitions whose broker is down; by key hash
    /// with a key, whether its broker is up or not).
    pub fn partition_for(&mut self, key: Option<&[u8]>) -> u32 {
        let inner = self.shared.lock();
        let n = inner.batches.len() as u32;
        let first = match (key, self.shared.setup.config.partitioner) {
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
            .find(|&p| inner.down[p as usize].is_none())
            .unwrap_or(first)
    }

    /// Queues one message for the partitioner's choice of partition.
    pub fn send(&mut self, key: Option<&[u8]>, value: &[u8]) -> Result<Receipt, ClientError> {
        let partition = self.partition_for(key);
        self.send_to(partition, key, value)
    }

    /// Queues one message with a time and headers (format-2 topics; a
    /// format-1 topic refuses them), partitioned as [`Self::send`].
    pub fn send_with(
        &mut self,
        key: Option<&[u8]>,
        value: &[u8],
        extras: Extras<'_>,
    ) -> Result<Receipt, ClientError> {
        let partition = self.partition_for(key);
        self.send_to_with(partition, key, value, extras)
    }

    /// [`Self::send_with`] to a given partition.
    pub fn send_to_with(
        &mut self,
        partition: u32,
        key: Option<&[u8]>,
        value: &[u8],
        extras: Extras<'_>,
    ) -> Result<Receipt, ClientError> {
        self.send_to_inner(partition, key, value, None, extras)
    }

    /// What the topic stores: format 1 (the paper's messages) or 2
    /// (record batches with times, headers and compression).
    pub fn message_format(&self) -> MessageFormat {
        self.shared.setup.format
    }

    /// Queues one message for a given partition. Waits (at most the
    /// client's `flush_timeout`) while the producer's buffer is full; an
    /// error means the message was not queued.
    pub fn send_to(
        &mut self,
        partition: u32,
        key: Option<&[u8]>,
        value: &[u8],
    ) -> Result<Receipt, ClientError> {
        // With latency tracking, a batch's first message is timed when the
        // batch starts (one clock read a batch, not one a message).
        self.send_to_inner(partition, key, value, None, Extras::default())
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
    ) -> Result<Receipt, ClientError> {
        self.send_to_inner(partition, key, value, Some(intended), Extras::default())
    }

    /// Latencies of the requests acknowledged since the last call:
    /// (latency, messages in the request). Empty unless `track_latency`.
    pub fn take_latencies(&self) -> Vec<(Duration, u32)> {
        let inner = self.shared.lock();
        let mut out = Vec::new();
        for lane in &inner.lanes {
            out.append(&mut lock(&lane.state.counts).latencies);
        }
        out
    }

    /// The delivery reports of the batches answered since the last call,
    /// stored or failed (only failures unless `delivery_reports` is on).
    pub fn take_deliveries(&self) -> Vec<Delivery> {
        let mut inner = self.shared.lock();
        inner.collect(&self.shared.setup);
        std::mem::take(&mut inner.deliveries)
    }

    #[expect(
        clippy::too_many_lines,
        reason = "a send's checks, routing and batching in the order the producer's contract states them"
    )]
    fn send_to_inner(
        &mut self,
        partition: u32,
        key: Option<&[u8]>,
        value: &[u8],
        intended: Option<Instant>,
        extras: Extras<'_>,
    ) -> Result<Receipt, ClientError> {
        let index = partition as usize;
        let setup = &self.shared.setup;
        let format = setup.format;
        let size = match format {
            MessageFormat::One => {
                if !extras.is_empty() {
                    return Err(ClientError::Usage(format!(
                        "topic {:?} stores the paper's messages (format 1), which carry no time or headers",
                        setup.topic
                    )));
                }
                encoded_len(key, value)
            }
            MessageFormat::Two => extras.record_len(key, value),
        };
        let too_large = match format {
            MessageFormat::One => {
                key.is_some_and(|k| k.len() > crate::message::KEY_BYTES_MAX)
                    || size > MESSAGE_BYTES_MAX
            }
            MessageFormat::Two => size + batch::HEADER_BYTES > batch::BATCH_BYTES_MAX,
        };
        if too_large {
            return Err(ClientError::Usage(format!(
                "message of {size} bytes is too large"
            )));
        }
        let config = &setup.config;
        let mut inner = self.shared.lock();
        if index >= inner.batches.len() {
            return Err(ClientError::Usage(format!(
                "topic {:?} has partitions 0..{}, not {partition}",
                setup.topic,
                inner.batches.len()
            )));
        }
        if inner.closed {
            return Err(ClientError::Usage("the producer is closed".into()));
        }
        if let Some(broker_id) = inner.down[index] {
            return Err(ClientError::PartitionUnavailable {
                topic: setup.topic.clone(),
                partition,
                broker_id,
            });
        }
        let batch = &inner.batches[index];
        let fills = batch.count as usize + 1 >= config.batch_messages
            || batch.len(format) + size >= config.batch_bytes;
        // An idempotent producer's partition with its five batches on the
        // wire: the open batch takes more messages instead of waiting (to
        // the grown limit), as Kafka's producer fills batch.size while
        // max.in.flight is reached. Five batches of 50 messages a round
        // trip were a fifth of the throughput without the numbers.
        // A grown batch looks for room once per `batch_messages` more
        // messages, not per message: the look locks every connection's
        // counts and was a fifth of the producer's CPU.
        let look = (batch.count as usize) < config.batch_messages
            || (batch.count as usize + 1).is_multiple_of(config.batch_messages.max(1));
        let grows = fills
            && inner.numbering.is_some()
            && batch.len(format) + size < config.batch_bytes.min(GROWN_BATCH_BYTES_MAX)
            && !(look && inner.has_room(setup, index));
        if fills && !grows {
            // Room first, so an error leaves the message unqueued.
            let deadline = Instant::now() + setup.client.config().flush_timeout;
            loop {
                let seen = self.shared.events.generation();
                if inner.has_room(setup, index) {
                    break;
                }
                // Answers and retries are the linger thread's work; look
                // at them here only when there is no room.
                inner.service(setup, &self.shared.events);
                if inner.has_room(setup, index) {
                    break;
                }
                // Requests waiting in a connection's buffer for company
                // will get none while this waits: send them (with five
                // batches a partition on the wire, the fifth would wait
                // for the linger thread's tick, up to 100 ms).
                inner.flush_writers();
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(ClientError::Timeout {
                        address: inner.address_of(index),
                        during: "room in the producer's buffer (acknowledgements)",
                        waited: setup.client.config().flush_timeout,
                    });
                }
                let wake = inner.next_wake(left);
                drop(inner);
                self.shared.events.wait(seen, wake);
                inner = self.shared.lock();
            }
        }
        let sequence = inner.next_sequence[index];
        inner.next_sequence[index] += 1;
        if inner.batches[index].started.is_none() {
            // A partition between batches holds no buffer: with 1,000
            // partitions a buffer each was 10 MB per producer touched in
            // turn (issue 9, item 2); buffers answered requests gave back
            // are used again instead.
            if inner.batches[index].bytes.capacity() == 0 {
                inner.batches[index].bytes = inner.take_spare(index);
            }
            let now = Instant::now();
            let batch = &mut inner.batches[index];
            batch.started = Some(now);
            batch.intended = intended.or(config.track_latency.then_some(now));
            batch.first_sequence = sequence;
        }
        let batch = &mut inner.batches[index];
        match format {
            MessageFormat::One => encode_message(&mut batch.bytes, key, value),
            MessageFormat::Two => {
                let time = extras.timestamp_ms.unwrap_or_else(now_ms);
                batch.records.push(time, key, Some(value), extras.headers);
            }
        }
        batch.count += 1;
        let full = batch.count as usize >= config.batch_messages
            || batch.len(format) >= config.batch_bytes;
        if full && !grows {
            inner.send_batch(setup, index);
        }
        Ok(Receipt {
            partition,
            sequence,
        })
    }

    /// Sends every partial batch and, unless acks are `None`, waits until
    /// every message sent so far is stored or finally failed (retries
    /// included), at most the client's `flush_timeout`. Fails with
    /// [`ClientError::Undelivered`] if any message since the previous flush
    /// was given up on (each batch's outcome is in its delivery report), or
    /// with [`ClientError::Timeout`] if time ran out (the messages stay
    /// queued and the producer keeps trying).
    pub fn flush(&mut self) -> Result<(), ClientError> {
        let timeout = self.shared.setup.client.config().flush_timeout;
        self.flush_within(timeout)
    }

    fn flush_within(&mut self, timeout: Duration) -> Result<(), ClientError> {
        let setup = &self.shared.setup;
        let deadline = Instant::now() + timeout;
        let mut inner = self.shared.lock();
        loop {
            let seen = self.shared.events.generation();
            for index in 0..inner.batches.len() {
                if inner.batches[index].count > 0 && inner.has_room(setup, index) {
                    inner.send_batch(setup, index);
                }
            }
            inner.flush_writers();
            inner.service(setup, &self.shared.events);
            if inner.idle(setup) {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ClientError::Timeout {
                    address: inner.busy_address(),
                    during: "the acknowledgements of a flush",
                    waited: timeout,
                });
            }
            let wake = inner.next_wake(left);
            drop(inner);
            self.shared.events.wait(seen, wake);
            inner = self.shared.lock();
        }
        match inner.failures.take() {
            None => Ok(()),
            Some(failures) => Err(ClientError::Undelivered {
                messages: failures.messages,
                batches: failures.batches,
                unknown: failures.unknown,
                first: Box::new(failures.first),
            }),
        }
    }

    /// Flushes within `timeout`, then closes the connections. Returns what
    /// the flush returned; delivery reports stay available through
    /// [`Producer::take_deliveries`]. Later sends fail.
    pub fn close(&mut self, timeout: Duration) -> Result<(), ClientError> {
        let result = self.flush_within(timeout);
        self.shut_down();
        result
    }

    fn shut_down(&mut self) {
        *lock(&self.shared.stop) = true;
        self.shared.stopped.notify_all();
        if let Some(thread) = self.linger_thread.take() {
            let _ = thread.join();
        }
        let setup = &self.shared.setup;
        let mut inner = self.shared.lock();
        if inner.closed {
            return;
        }
        inner.closed = true;
        // Best effort: queued batches still go out, unanswered.
        for index in 0..inner.batches.len() {
            inner.send_batch(setup, index);
        }
        inner.flush_writers();
        for lane in &mut inner.lanes {
            lane.shut();
        }
        inner.collect(setup);
        // What is still waiting to be resent will not be: say so in its
        // delivery report.
        for pending in std::mem::take(&mut inner.retry) {
            let error = ClientError::Usage("the producer was closed before delivering it".into());
            inner.fail(pending, error);
        }
        inner.retry_bytes = 0;
    }

    /// Messages handed to the network so far (each batch counted once,
    /// however often it was resent).
    pub fn sent_messages(&self) -> u64 {
        self.shared.lock().sent_messages
    }

    /// Bytes of the batches sent so far, as stored (format 2: compressed):
    /// what the partitions' offsets grow by once every batch is stored
    /// once.
    pub fn sent_bytes(&self) -> u64 {
        self.shared.lock().sent_bytes
    }

    /// Messages the broker acknowledged so far (0 with `AckMode::None`;
    /// a resent batch counts each time it is acknowledged).
    pub fn acked_messages(&self) -> u64 {
        self.shared
            .lock()
            .lanes
            .iter()
            .map(|l| lock(&l.state.counts).acked_messages)
            .sum()
    }

    /// How long the brokers held this producer's connections back for its
    /// principal's quota, as their answers reported (`throttle_ms`; over
    /// the connections open now). Zero where no quota applies.
    pub fn throttled(&self) -> Duration {
        Duration::from_millis(
            self.shared
                .lock()
                .lanes
                .iter()
                .map(|l| lock(&l.state.counts).throttled_ms)
                .sum(),
        )
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// An idempotent producer's numbers (format 2, acks other than `None`,
/// idempotence on): a producer id from the broker (InitProducerId).
fn numbering(
    client: &Client,
    setup: &Setup,
    partitions: usize,
) -> Result<Option<Numbering>, ClientError> {
    let numbered = setup.format == MessageFormat::Two
        && setup.config.acks != AckMode::None
        && setup.config.idempotence;
    if !numbered {
        return Ok(None);
    }
    let producer = client.init_producer_id(&setup.topic)?;
    Ok(Some(Numbering::new(producer, partitions)))
}

/// Where each partition's requests go: `Ok((address, broker))`, or
/// `Err(broker)` when the broker that stores it is down.
fn routes(setup: &Setup, metadata: &Metadata) -> Result<Vec<Route>, ClientError> {
    let topic = &setup.topic;
    let topic_meta = metadata
        .topics
        .iter()
        .find(|t| t.name == *topic)
        .ok_or_else(|| ClientError::Usage(format!("unknown topic {topic:?}")))?;
    let clustered = metadata.brokers.len() > 1
        || topic_meta
            .partitions
            .iter()
            .any(|p| !metadata.brokers.iter().any(|b| b.broker_id == p.broker_id));
    let shard_aware = setup.config.shard_aware;
    Ok(topic_meta
        .partitions
        .iter()
        .map(|placement| {
            let p = placement.partition;
            if !clustered {
                // One broker: any of its shards forwards to the owner.
                let address = if shard_aware {
                    setup.client.owner_address(metadata, topic, p)
                } else {
                    setup.client.bootstrap()[0].clone()
                };
                return Ok((address, placement.broker_id));
            }
            let broker = metadata
                .brokers
                .iter()
                .find(|b| b.broker_id == placement.broker_id);
            let shard = if shard_aware {
                metadata.owner_address(topic, p)
            } else {
                broker.and_then(|b| b.shards.first())
            };
            shard
                .map(|s| (format!("{}:{}", s.host, s.port), placement.broker_id))
                .ok_or(placement.broker_id)
        })
        .collect())
}

/// A partition's route: its shard's address and broker, or the broker that
/// is down.
type Route = Result<(String, u32), u32>;

/// How soon a producer with unavailable partitions looks at Metadata again,
/// at first and at most (doubling in between while nothing changes).
const DOWN_RECHECK_MIN: Duration = Duration::from_secs(1);
const DOWN_RECHECK_MAX: Duration = Duration::from_secs(10);

impl Inner {
    /// Points every partition at its lane, reusing live lanes to the same
    /// address and opening the others; lanes no longer needed are closed
    /// and their unanswered batches queued to be resent. A partition whose
    /// address cannot be connected to is down (its broker is named), like
    /// one whose broker Metadata does not list. Changes nothing, and fails,
    /// only when no address at all could be connected to.
    #[expect(
        clippy::too_many_lines,
        reason = "new routes applied to every partition: connections, down brokers and the batches to resend"
    )]
    fn apply_routes(
        &mut self,
        setup: &Setup,
        events: &Arc<Events>,
        mut routes: Vec<Route>,
    ) -> Result<(), ClientError> {
        let mut addresses: Vec<String> = Vec::new();
        for (address, _) in routes.iter().flatten() {
            if !addresses.contains(address) {
                addresses.push(address.clone());
            }
        }
        // Decide and open first. A reused lane that dies meanwhile is
        // replaced by the next reconnect.
        let mut plan: Vec<Result<usize, Lane>> = Vec::with_capacity(addresses.len());
        let mut reachable = Vec::with_capacity(addresses.len());
        let mut first_error = None;
        for address in &addresses {
            let live = self
                .lanes
                .iter()
                .position(|l| l.address == *address && !l.dead());
            match live {
                Some(i) => plan.push(Ok(i)),
                None => match open_lane(setup, events, address) {
                    Ok(lane) => plan.push(Err(lane)),
                    Err(error) => {
                        first_error.get_or_insert(error);
                        continue;
                    }
                },
            }
            reachable.push(address.clone());
        }
        if reachable.is_empty() {
            if let Some(error) = first_error {
                return Err(error);
            }
        }
        for route in &mut routes {
            if let Ok((address, broker_id)) = route {
                if !reachable.contains(address) {
                    *route = Err(*broker_id);
                }
            }
        }
        let mut old: Vec<Option<Lane>> = std::mem::take(&mut self.lanes)
            .into_iter()
            .map(Some)
            .collect();
        let mut lanes = Vec::with_capacity(reachable.len());
        for step in plan {
            match step {
                Ok(i) => lanes.extend(old[i].take()),
                Err(lane) => lanes.push(lane),
            }
        }
        for mut lane in old.into_iter().flatten() {
            // Its reader has stopped: answers are harvested, and what was
            // unanswered is queued to be resent.
            lane.shut();
            lane.broken = true;
            self.harvest(setup, &lane);
        }
        self.lanes = lanes;
        // Partitions added to the topic (`ringlog topic alter`): used from
        // now on. A count that went down (the topic was re-created) is not
        // followed: its batches are refused by the broker.
        while self.batches.len() < routes.len() {
            self.lane_of_partition.push(None);
            self.down.push(None);
            self.next_sequence.push(0);
            self.batches.push(Batch::empty());
        }
        if let Some(numbering) = &mut self.numbering {
            numbering.grow(self.batches.len());
        }
        for (partition, route) in routes.into_iter().enumerate() {
            if partition >= self.lane_of_partition.len() {
                break;
            }
            match route {
                Ok((address, _)) => {
                    self.lane_of_partition[partition] =
                        reachable.iter().position(|a| *a == address);
                    self.down[partition] = None;
                }
                Err(broker_id) => {
                    self.lane_of_partition[partition] = None;
                    self.down[partition] = Some(broker_id);
                }
            }
        }
        self.routed_at = Instant::now();
        Ok(())
    }

    /// True when it is time to look at Metadata again: some partition is
    /// down, or the last look is `metadata_max_age` old.
    fn recheck_due(&mut self, setup: &Setup) -> bool {
        if self.routed_at.elapsed() >= setup.config.metadata_max_age {
            return true;
        }
        if self.down.iter().all(Option::is_none) {
            self.recheck = DOWN_RECHECK_MIN;
            return false;
        }
        if self.routed_at.elapsed() < self.recheck {
            return false;
        }
        self.recheck = (self.recheck * 2).min(DOWN_RECHECK_MAX);
        true
    }

    /// Whether a waiting batch of partition `p` stays queued in this pass
    /// of the resend queue: an idempotent producer's partition keeps at
    /// most five batches on the wire (the oldest still to be stored among
    /// them), none while it waits to start afresh, and once one of its
    /// batches stays (`holding`), the later ones stay too — an answer may
    /// free room meanwhile (the reader threads answer concurrently), and
    /// they would pass it.
    fn waits_in_pass(&self, p: usize, holding: &mut [bool]) -> bool {
        let Some(numbering) = &self.numbering else {
            return false;
        };
        let wait = holding.get(p).copied().unwrap_or(false)
            || numbering.restarting(p).is_some()
            || self.on_wire(p) >= IN_FLIGHT_MAX;
        if wait {
            if let Some(h) = holding.get_mut(p) {
                *h = true;
            }
        }
        wait
    }

    /// True when a batch for `index` may be sent now.
    fn has_room(&self, setup: &Setup, index: usize) -> bool {
        if setup.config.acks == AckMode::None {
            return true;
        }
        if self.numbering.is_some() && self.unresolved(index) >= IN_FLIGHT_MAX {
            return false;
        }
        let Some(lane) = self.lane_of_partition[index].map(|l| &self.lanes[l]) else {
            // Down or being reconnected: the batch waits in the retry queue.
            return self.retry_bytes < setup.config.buffer_bytes_max;
        };
        if lock(&lane.state.counts).in_flight.len() as u64 >= setup.config.inflight_max {
            return false;
        }
        let held: usize = self
            .lanes
            .iter()
            .map(|l| lock(&l.state.counts).in_flight_bytes)
            .sum();
        self.retry_bytes + held < setup.config.buffer_bytes_max
    }

    /// Turns one partition's batch into a request.
    fn send_batch(&mut self, setup: &Setup, index: usize) {
        let batch = &mut self.batches[index];
        if batch.count == 0 {
            return;
        }
        if setup.format == MessageFormat::Two {
            let numbers = match &mut self.numbering {
                Some(numbering) => numbering.next(index, batch.count),
                None => batch::write::Producer::NONE,
            };
            // The batch is the records' own buffer; the next batch's
            // records go into the spare one taken when this batch began.
            let next = std::mem::take(&mut batch.bytes);
            batch.bytes = batch.records.take(numbers, setup.config.compression, next);
        }
        let size = batch.bytes.len();
        let now = Instant::now();
        let pending = Pending {
            partition: index as u32,
            first_sequence: batch.first_sequence,
            count: batch.count,
            bytes: Arc::new(std::mem::take(&mut batch.bytes)),
            sends: 0,
            intended: batch.intended.take(),
            request_id: 0,
            sent_at: now,
            deadline: batch.started.unwrap_or(now) + setup.config.delivery_timeout,
            in_doubt: false,
            last_error: None,
        };
        batch.count = 0;
        batch.started = None;
        self.sent_messages += u64::from(pending.count);
        self.sent_bytes += pending.bytes.len() as u64;
        let behind_retry = self.retry.iter().any(|p| p.partition == pending.partition);
        // An idempotent producer's sixth batch (a flush sends every
        // partial batch) waits for room on the wire like a resent one.
        let held = self.numbering.is_some() && self.unresolved(index) >= IN_FLIGHT_MAX;
        let recycled = if behind_retry || held || self.reconnect && self.lane_dead(index) {
            // Keep the partition's order: behind the batches being resent.
            self.retry_bytes += pending.bytes.len();
            self.retry.push(pending);
            None
        } else {
            self.write(setup, pending)
        };
        // The partition's next batch takes a buffer an answered one left
        // behind (`take_spare`), so a steady producer does not allocate.
        self.last_batch_bytes = size;
        if let Some(buffer) = recycled {
            self.keep_spare(buffer);
        }
    }

    fn keep_spare(&mut self, mut buffer: Vec<u8>) {
        if self.spare.len() < SPARE_BUFFERS && buffer.capacity() > 0 {
            buffer.clear();
            self.spare.push(buffer);
        }
    }

    /// A buffer for a new batch of `index`: a spare one, else one the
    /// partition's connection got back from an answered request, else new.
    fn take_spare(&mut self, index: usize) -> Vec<u8> {
        if let Some(buffer) = self.spare.pop() {
            return buffer;
        }
        let from_lane = self
            .lane_of_partition
            .get(index)
            .copied()
            .flatten()
            .and_then(|lane| lock(&self.lanes[lane].state.counts).spare.pop());
        from_lane.unwrap_or_else(|| Vec::with_capacity(self.last_batch_bytes))
    }

    fn lane_dead(&self, index: usize) -> bool {
        self.lane_of_partition[index].is_none_or(|l| self.lanes[l].dead())
    }

    /// Writes a batch to its partition's connection (or queues it to be
    /// resent when that connection is gone); returns a spare buffer from
    /// the connection's answered batches, if there is one.
    #[expect(
        clippy::too_many_lines,
        reason = "a batch's write, its lane's backpressure and its resend queue, side by side"
    )]
    fn write(&mut self, setup: &Setup, mut pending: Pending) -> Option<Vec<u8>> {
        let index = pending.partition as usize;
        let Some(lane_index) = self.lane_of_partition[index] else {
            match self.down[index] {
                Some(broker_id) => {
                    let error = ClientError::PartitionUnavailable {
                        topic: setup.topic.clone(),
                        partition: pending.partition,
                        broker_id,
                    };
                    if pending.sends == 0 && !self.replicated {
                        // New: fail fast, the broker is named (one copy:
                        // nobody else will take it).
                        self.fail(pending, error);
                    } else {
                        // Sent before its broker went away: it keeps its
                        // retries, and goes once the broker is back.
                        self.reconnect = true;
                        pending.sends += 1;
                        self.requeue(setup, pending, || error);
                    }
                }
                None => self.requeue(setup, pending, || {
                    ClientError::Usage("no route to the partition".into())
                }),
            }
            return None;
        };
        let lane = &mut self.lanes[lane_index];
        if lane.dead() {
            self.reconnect = true;
            self.retry_bytes += pending.bytes.len();
            self.retry.push(pending);
            self.retry.sort_by_key(|p| (p.partition, p.first_sequence));
            return None;
        }
        let quiet = lock(&lane.state.counts).quiet_until.take();
        if let Some(until) = quiet {
            // Over its quota: the broker would hold the request until then.
            std::thread::sleep(until.saturating_duration_since(Instant::now()));
        }
        let acks = setup.config.acks;
        let header = codec::produce_request(&mut lane.fbb, &setup.topic, pending.partition, acks);
        let mut prefix = Vec::with_capacity(frame::FRAME_PREFIX_BYTES);
        frame::write_prefix(
            &mut prefix,
            Api::Produce as u16,
            API_VERSION,
            lane.next_request_id,
            header.len(),
            pending.bytes.len(),
        );
        pending.request_id = lane.next_request_id;
        pending.sends += 1;
        pending.sent_at = Instant::now();
        lane.next_request_id = lane.next_request_id.wrapping_add(1);
        let bytes = pending.bytes.clone();
        let (spare, idle) = {
            let mut counts = lock(&lane.state.counts);
            counts.written += 1;
            if acks == AckMode::None {
                // Nothing will answer it: only the write below holds it.
                drop(pending);
            } else {
                counts.in_flight_bytes += pending.bytes.len();
                counts.in_flight.push_back(pending);
            }
            (counts.spare.pop(), counts.in_flight.len() <= 1)
        };
        let written = lane
            .writer
            .write_all(&prefix)
            .and_then(|()| lane.writer.write_all(header))
            .and_then(|()| lane.writer.write_all(&bytes));
        lane.unflushed = true;
        // Requests wait in the buffer to share a write with the next ones,
        // but not when the connection is idle (nothing to share with) and
        // not longer than `flush_delay` (the linger thread's tick pushes
        // what is left when no further request comes).
        let due = (idle && acks != AckMode::None)
            || lane.last_flush.elapsed() >= setup.config.flush_delay;
        let written = written.and_then(|()| {
            if due {
                lane.unflushed = false;
                lane.last_flush = Instant::now();
                lane.writer.flush()?;
            }
            Ok(())
        });
        if written.is_err() {
            // The reader sees the same broken socket; what was in flight is
            // collected and resent after a reconnect.
            lane.broken = true;
            self.reconnect = true;
        }
        // With acks None nothing is answered: the written buffer itself is
        // free again once the write let go of it.
        let mut recycled = spare.or_else(|| Arc::try_unwrap(bytes).ok());
        if let Some(buffer) = recycled.as_mut() {
            buffer.clear();
        }
        recycled
    }

    /// Pushes buffered requests out.
    fn flush_writers(&mut self) {
        for lane in &mut self.lanes {
            if !std::mem::take(&mut lane.unflushed) {
                continue;
            }
            lane.last_flush = Instant::now();
            if lane.writer.flush().is_err() {
                lane.broken = true;
                self.reconnect = true;
            }
        }
    }

    /// A batch given up on: `Unknown` if an attempt may have stored it,
    /// else `Failed`.
    fn fail(&mut self, pending: Pending, error: ClientError) {
        let failures = self.failures.get_or_insert_with(|| Failures {
            messages: 0,
            batches: 0,
            unknown: 0,
            first: error.clone(),
        });
        failures.messages += u64::from(pending.count);
        failures.batches += 1;
        if pending.in_doubt {
            failures.unknown += u64::from(pending.count);
        }
        self.deliveries.push(Delivery {
            partition: pending.partition,
            first_sequence: pending.first_sequence,
            messages: pending.count,
            attempts: pending.sends,
            outcome: if pending.in_doubt {
                Outcome::Unknown(error)
            } else {
                Outcome::Failed(error)
            },
        });
    }

    /// Fails `pending` if its delivery timeout has passed; else hands it
    /// back.
    fn unexpired(&mut self, setup: &Setup, pending: Pending, now: Instant) -> Option<Pending> {
        if now < pending.deadline {
            return Some(pending);
        }
        let last = pending.last_error.clone().unwrap_or_else(|| {
            ClientError::Usage("it waited behind earlier batches of its partition".into())
        });
        self.fail(pending, delivery_timeout(setup, last));
        None
    }

    /// A batch to send again, if it has retries and time left; else failed
    /// with `why` (or its delivery timeout, naming `why`).
    fn requeue(&mut self, setup: &Setup, mut pending: Pending, why: impl FnOnce() -> ClientError) {
        let error = why();
        if Instant::now() >= pending.deadline {
            self.fail(pending, delivery_timeout(setup, error));
            return;
        }
        if pending.sends > setup.config.retries {
            self.fail(pending, error);
            return;
        }
        pending.last_error = Some(error);
        let config = setup.client.config();
        let wait = config.backoff(pending.sends.saturating_sub(1));
        self.retry_at = self.retry_at.max(Instant::now() + wait);
        self.retry_bytes += pending.bytes.len();
        self.retry.push(pending);
        self.retry.sort_by_key(|p| (p.partition, p.first_sequence));
    }

    /// Takes a lane's answers and buffers, and turns them into deliveries,
    /// retries and failures.
    #[expect(
        clippy::too_many_lines,
        reason = "every answer of a lane turned into deliveries, retries or failures; one match over the outcomes"
    )]
    fn harvest(&mut self, setup: &Setup, lane: &Lane) {
        let (answers, refusals, spare, closed, orphans, written) = {
            let mut counts = lock(&lane.state.counts);
            let closed = counts.closed || lane.broken;
            let (orphans, written) = if closed {
                counts.in_flight_bytes = 0;
                let written = std::mem::take(&mut counts.written);
                (counts.in_flight.drain(..).collect(), written)
            } else {
                (Vec::new(), 0)
            };
            (
                std::mem::take(&mut counts.answers),
                std::mem::take(&mut counts.refusals),
                std::mem::take(&mut counts.spare),
                closed,
                orphans,
                written,
            )
        };
        for buffer in spare {
            self.keep_spare(buffer);
        }
        for (mut pending, answer) in answers {
            match answer {
                Answer::Stored(stored) => self.deliveries.push(Delivery {
                    partition: pending.partition,
                    first_sequence: pending.first_sequence,
                    messages: pending.count,
                    attempts: pending.sends,
                    outcome: Outcome::Stored(stored),
                }),
                Answer::Refused(code, message) => {
                    pending.in_doubt |= appended_before_failing(code);
                    let out_of_order = code == ErrorCode::OutOfOrderSequence;
                    let error = ClientError::Broker {
                        code,
                        message,
                        range: None,
                        owner_broker_id: None,
                    };
                    if let (true, Some(numbering)) = (out_of_order, &mut self.numbering) {
                        // A gap before it: once the partition's batches
                        // are off the wire, an earlier one still to be
                        // stored goes first; if there is none, the
                        // partition starts afresh (`restart_partitions`).
                        numbering.restart_later(pending.partition as usize, pending.first_sequence);
                        let why = || error.clone();
                        self.requeue(setup, pending, why);
                    } else if error.is_retriable() {
                        if error.moved() {
                            self.reconnect = true;
                        }
                        let why = || error.clone();
                        self.requeue(setup, pending, why);
                    } else {
                        pending.bytes = Arc::new(Vec::new());
                        self.fail(pending, error);
                    }
                }
            }
        }
        for (code, message) in refusals {
            // Acks None: the batch is not kept, so it cannot be named.
            let error = ClientError::Broker {
                code,
                message,
                range: None,
                owner_broker_id: None,
            };
            let failures = self.failures.get_or_insert(Failures {
                messages: 0,
                batches: 0,
                unknown: 0,
                first: error,
            });
            failures.batches += 1;
        }
        if closed {
            self.reconnect = true;
            let unanswered = orphans.len() as u64;
            if setup.config.acks == AckMode::None {
                // Nothing is kept with acks None: what was written on the
                // connection has an unknown fate.
                if written > 0 {
                    self.failures.get_or_insert_with(|| Failures {
                        messages: 0,
                        batches: written,
                        unknown: 0,
                        first: ClientError::Disconnected {
                            address: lane.address.clone(),
                            unanswered: written,
                        },
                    });
                }
            }
            let why = || {
                if lane.timed_out {
                    ClientError::Timeout {
                        address: lane.address.clone(),
                        during: "a produce acknowledgement",
                        waited: setup.client.config().request_timeout,
                    }
                } else {
                    ClientError::Disconnected {
                        address: lane.address.clone(),
                        unanswered,
                    }
                }
            };
            for mut pending in orphans {
                // Written, never answered: the broker may have stored it.
                pending.in_doubt = true;
                self.requeue(setup, pending, why);
            }
        }
    }

    /// Harvests every lane. A connection whose oldest request has waited
    /// longer than the request timeout (a stopped or stuck broker) is
    /// closed, and its unanswered batches are resent after a reconnect.
    fn collect(&mut self, setup: &Setup) {
        let timeout = setup.client.config().request_timeout;
        for lane in &mut self.lanes {
            let stuck = lock(&lane.state.counts)
                .in_flight
                .front()
                .is_some_and(|p| p.sent_at.elapsed() > timeout);
            if stuck && !lane.broken {
                lane.broken = true;
                lane.timed_out = true;
                let _ = lane.socket.shutdown(Shutdown::Both);
            }
        }
        let lanes = std::mem::take(&mut self.lanes);
        for lane in &lanes {
            self.harvest(setup, lane);
        }
        self.lanes = lanes;
    }

    /// Harvests answers, reconnects when a connection is gone, and resends
    /// what waits to be resent once its backoff has passed.
    fn service(&mut self, setup: &Setup, events: &Arc<Events>) {
        self.collect(setup);
        if self.recheck_due(setup) {
            self.reconnect = true;
        }
        if !self.reconnect && self.retry.is_empty() {
            return;
        }
        if Instant::now() < self.retry_at {
            return;
        }
        if self.reconnect {
            let refreshed = setup
                .client
                .metadata(&[&setup.topic])
                .and_then(|metadata| routes(setup, &metadata))
                .and_then(|routes| self.apply_routes(setup, events, routes));
            match refreshed {
                Ok(()) => {
                    self.reconnect = false;
                    self.reconnect_failures = 0;
                }
                Err(error) => {
                    self.reconnect_failures += 1;
                    let config = setup.client.config();
                    self.retry_at = Instant::now() + config.backoff(self.reconnect_failures - 1);
                    // Each failed reconnect counts as an attempt of every
                    // waiting batch; an error that will not pass (the topic
                    // is gone) ends them all now.
                    let waiting = std::mem::take(&mut self.retry);
                    self.retry_bytes = 0;
                    let now = Instant::now();
                    for mut pending in waiting {
                        pending.sends += 1;
                        if now >= pending.deadline {
                            self.fail(pending, delivery_timeout(setup, error.clone()));
                        } else if !error.is_retriable() || pending.sends > setup.config.retries {
                            self.fail(pending, error.clone());
                        } else {
                            pending.last_error = Some(error.clone());
                            self.retry_bytes += pending.bytes.len();
                            self.retry.push(pending);
                        }
                    }
                    return;
                }
            }
        }
        let mut waiting = std::mem::take(&mut self.retry);
        self.retry_bytes = 0;
        self.restart_partitions(&mut waiting);
        let now = Instant::now();
        let mut held = Vec::new();
        // Partitions with a batch held in this pass (`waits_in_pass`).
        let mut holding = vec![false; self.batches.len()];
        for pending in waiting {
            let Some(pending) = self.unexpired(setup, pending, now) else {
                continue;
            };
            let p = pending.partition as usize;
            if self.waits_in_pass(p, &mut holding) {
                held.push(pending);
                continue;
            }
            if let Some(buffer) = self.write(setup, pending) {
                self.keep_spare(buffer);
            }
        }
        for pending in held {
            self.retry_bytes += pending.bytes.len();
            self.retry.push(pending);
        }
        self.flush_writers();
    }

    /// An idempotent producer's partitions waiting to start afresh whose
    /// batches are all off the wire (so all in `waiting`, in order). If the
    /// batch that met the gap is the oldest, the broker lacks batches that
    /// were given up on (or lost in an unclean failover): a new epoch, and
    /// the batches numbered again from sequence 0 — never one that may be
    /// stored, since every earlier batch is settled. If an earlier batch
    /// is still to be stored, it goes first instead. If the epochs are
    /// used up the batches fail.
    fn restart_partitions(&mut self, waiting: &mut Vec<Pending>) {
        let Some(numbering) = &self.numbering else {
            return;
        };
        let ready: Vec<(usize, u64)> = (0..self.batches.len())
            .filter_map(|p| numbering.restarting(p).map(|gap| (p, gap)))
            .filter(|&(p, _)| self.on_wire(p) == 0)
            .collect();
        for (p, gap) in ready {
            let Some(numbering) = &mut self.numbering else {
                return;
            };
            let oldest = waiting
                .iter()
                .filter(|w| w.partition as usize == p)
                .map(|w| w.first_sequence)
                .min();
            if oldest != Some(gap) {
                numbering.cancel_restart(p);
                continue;
            }
            let batches = waiting
                .iter_mut()
                .filter(|w| w.partition as usize == p)
                .map(|w| {
                    let count = w.count;
                    (w.bytes_mut(), count)
                });
            if numbering.restart(p, batches) {
                continue;
            }
            let (failed, kept): (Vec<Pending>, Vec<Pending>) = std::mem::take(waiting)
                .into_iter()
                .partition(|w| w.partition as usize == p);
            *waiting = kept;
            for pending in failed {
                self.fail(
                    pending,
                    ClientError::Usage(format!(
                        "partition {p}: the producer's epochs are used up; make a new producer"
                    )),
                );
            }
        }
    }

    /// Batches of `partition` written and not yet answered, on every
    /// connection.
    fn on_wire(&self, partition: usize) -> usize {
        let p = partition as u32;
        self.lanes
            .iter()
            .map(|lane| {
                let counts = lock(&lane.state.counts);
                counts.in_flight.iter().filter(|w| w.partition == p).count()
                    + counts
                        .answers
                        .iter()
                        .filter(|(w, _)| w.partition == p)
                        .count()
            })
            .sum()
    }

    /// Batches of `partition` sent and not yet stored or given up on: on
    /// the wire or waiting to be resent.
    fn unresolved(&self, partition: usize) -> usize {
        let p = partition as u32;
        self.on_wire(partition) + self.retry.iter().filter(|w| w.partition == p).count()
    }

    /// True when nothing is queued, waiting or unanswered.
    fn idle(&self, setup: &Setup) -> bool {
        self.batches.iter().all(|b| b.count == 0)
            && self.retry.is_empty()
            && (setup.config.acks == AckMode::None
                || self.lanes.iter().all(|l| {
                    let counts = lock(&l.state.counts);
                    counts.in_flight.is_empty() && counts.answers.is_empty()
                }))
    }

    /// How long to wait for a response before looking again: at most
    /// `left`, and no later than the next retry.
    fn next_wake(&self, left: Duration) -> Duration {
        let mut wake = left.min(Duration::from_millis(50));
        if !self.retry.is_empty() || self.reconnect {
            wake = wake.min(self.retry_at.saturating_duration_since(Instant::now()));
        }
        wake.max(Duration::from_millis(1))
    }

    fn address_of(&self, index: usize) -> String {
        self.lane_of_partition[index]
            .map(|l| self.lanes[l].address.clone())
            .unwrap_or_default()
    }

    /// A connection with unanswered requests (for a timeout's message).
    fn busy_address(&self) -> String {
        self.lanes
            .iter()
            .find(|l| !lock(&l.state.counts).in_flight.is_empty())
            .or(self.lanes.first())
            .map(|l| l.address.clone())
            .unwrap_or_default()
    }
}

/// The error of a batch whose delivery timeout passed.
fn delivery_timeout(setup: &Setup, last: ClientError) -> ClientError {
    ClientError::DeliveryTimeout {
        timeout: setup.config.delivery_timeout,
        last: Box::new(last),
    }
}

/// True for the refusals a broker gives after it appended the batch: its
/// fate is unknown (the set may be kept by the log or a new leader).
/// Every other refusal is given before anything is appended.
fn appended_before_failing(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::NotEnoughReplicasAfterAppend | ErrorCode::StorageFailed | ErrorCode::Internal
    )
}

/// The linger thread: every half linger (1 ms to 100 ms), sends batches
/// whose first message waited `linger`, pushes buffered requests out, and
/// retries what waits to be resent.
fn spawn_linger(shared: Arc<Shared>) -> Result<JoinHandle<()>, ClientError> {
    let linger = shared.setup.config.linger;
    let tick = (linger / 2).clamp(Duration::from_millis(1), Duration::from_millis(100));
    let handle = std::thread::Builder::new()
        .name("ringlog-producer-linger".into())
        .spawn(move || loop {
            {
                let stop = lock(&shared.stop);
                let (stop, _) = shared
                    .stopped
                    .wait_timeout(stop, tick)
                    .unwrap_or_else(|p| p.into_inner());
                if *stop {
                    return;
                }
            }
            let setup = &shared.setup;
            let mut inner = shared.lock();
            for index in 0..inner.batches.len() {
                let expired = inner.batches[index]
                    .started
                    .is_some_and(|t| t.elapsed() >= linger);
                if expired && inner.has_room(setup, index) {
                    inner.send_batch(setup, index);
                }
            }
            inner.flush_writers();
            inner.service(setup, &shared.events);
        })?;
    Ok(handle)
}

#[expect(
    clippy::too_many_lines,
    reason = "a lane's opening: connection, login and its reader thread, in order"
)]
fn open_lane(setup: &Setup, events: &Arc<Events>, address: &str) -> Result<Lane, ClientError> {
    let conn = setup.client.open(address)?;
    let throttled_frames = conn.throttled_frames();
    let (mut reader, writer) = conn.split();
    let socket = writer.get_ref().socket().try_clone()?;
    let state = Arc::new(LaneState {
        counts: Mutex::new(LaneCounts::default()),
        events: events.clone(),
    });
    let thread_state = state.clone();
    let reports = setup.config.delivery_reports;
    let handle = std::thread::Builder::new()
        .name("ringlog-producer-acks".into())
        .spawn(move || {
            let mut frame = ResponseFrame::default();
            loop {
                let result = super::read_response_with(&mut reader, &mut frame, throttled_frames);
                let mut counts = lock(&thread_state.counts);
                if frame.throttle_ms > 0 {
                    // Every answer's, errors too: the lane waits it out.
                    counts.throttled_ms += u64::from(frame.throttle_ms);
                    counts.quiet_until =
                        Some(Instant::now() + Duration::from_millis(u64::from(frame.throttle_ms)));
                }
                let answer = match result {
                    Ok(()) => match verify::<wire::ProduceResponse>(&frame.header) {
                        Ok(ack) => {
                            counts.acked_messages += u64::from(ack.message_count());
                            if !throttled_frames {
                                counts.throttled_ms += u64::from(ack.throttle_ms());
                            }
                            Answer::Stored(Stored {
                                base_offset: ack.base_offset(),
                                end_offset: ack.end_offset(),
                            })
                        }
                        Err(_) => {
                            counts.closed = true;
                            break;
                        }
                    },
                    Err(ClientError::Broker { code, message, .. }) => {
                        Answer::Refused(code, message)
                    }
                    Err(_) => {
                        counts.closed = true;
                        break;
                    }
                };
                match counts.in_flight.pop_front() {
                    Some(mut pending) if pending.request_id == frame.request_id => {
                        counts.in_flight_bytes -= pending.bytes.len();
                        if let Some(intended) = pending.intended {
                            counts.latencies.push((intended.elapsed(), pending.count));
                        }
                        let keep = matches!(answer, Answer::Refused(..));
                        if !keep {
                            // Stored: the bytes are not needed again.
                            let bytes = std::mem::take(&mut pending.bytes);
                            if let Ok(mut buffer) = Arc::try_unwrap(bytes) {
                                if counts.spare.len() < SPARE_BUFFERS {
                                    buffer.clear();
                                    counts.spare.push(buffer);
                                }
                            }
                        }
                        if keep || reports {
                            counts.answers.push((pending, answer));
                        }
                    }
                    Some(pending) => {
                        // Out of step with the broker: stop trusting this
                        // connection; everything unanswered is resent.
                        counts.in_flight.push_front(pending);
                        counts.closed = true;
                        break;
                    }
                    None => {
                        if let Answer::Refused(code, message) = answer {
                            counts.refusals.push((code, message));
                        }
                    }
                }
                drop(counts);
                thread_state.events.bump();
            }
            thread_state.events.bump();
        })?;
    Ok(Lane {
        address: address.to_string(),
        writer,
        socket,
        fbb: flatbuffers::FlatBufferBuilder::with_capacity(256),
        state,
        reader: Some(handle),
        next_request_id: 1,
        unflushed: false,
        last_flush: Instant::now(),
        broken: false,
        timed_out: false,
    })
}

/// Milliseconds since the Unix epoch: a format-2 message's time when the
/// application gives none (the coarse clock: `clock.rs`).
fn now_ms() -> i64 {
    super::clock::wall_ms()
}
