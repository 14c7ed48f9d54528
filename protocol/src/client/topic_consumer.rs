//! The consumer of a whole topic: every partition, one connection and one
//! fetcher thread per shard, the fetches of that shard's partitions
//! pipelined on it.
//!
//! Each fetcher keeps one fetch in flight per partition and sends a
//! partition's next fetch as soon as the previous answer is parsed, before
//! handing its messages over, so the broker reads the next chunk while the
//! application works on this one. Chunks wait in a bounded queue
//! (`buffered_chunks`): a slow application slows the fetchers down instead
//! of filling memory. Long-polls: while any partition of a shard has data
//! to read, that shard's fetches do not wait; once all are caught up they
//! wait up to `max_wait` for new messages. Responses come in request
//! order, but a partition's new message does not wait for the long-polls
//! before it: the broker ends those at once, empty (PROTOCOL.md §1), and
//! the fetcher sends them again.
//!
//! **A broker's death is a partial outage.** A fetcher whose connection
//! broke, timed out, or was answered NOT_OWNER, or whose partitions' broker
//! is not in Metadata (down), reconnects with fresh Metadata and back-off
//! for as long as it takes, while the other shards' fetchers go on;
//! [`TopicConsumer::outages`] says which partitions wait, since when and
//! why. A partition whose broker is down when the consumer starts gets its
//! start offset once the broker answers. An error that does not pass (a
//! deleted topic, a damaged message) stops that shard's fetcher and is
//! returned by the next [`TopicConsumer::poll`], after the messages
//! received before it.

use super::consumer::check_fetch_response;
use super::walk::{walk_chunk, ChunkPlace};
use super::{lock, Client, ClientError, Connection, OutOfRange, ResponseFrame, Truncation};
use crate::codec::{self, FetchArgs, OffsetSpec, ReplicaFetch};
use crate::frame::Api;
use crate::ErrorCode;
use std::collections::{BTreeMap, VecDeque};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A message of a topic, tagged with its partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMessage {
    /// The partition it was read from.
    pub partition: u32,
    /// Its offset in that partition.
    pub offset: u64,
    /// Its key, if keyed.
    pub key: Option<Vec<u8>>,
    /// Its payload.
    pub value: Vec<u8>,
    /// Format 2: its time (ms since the Unix epoch).
    pub timestamp: Option<i64>,
    /// Format 2: its headers.
    pub headers: crate::batch::records::OwnedHeaders,
}

/// Where each partition starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// The first retained message of every partition.
    Earliest,
    /// The flushed end of every partition: only messages produced from now.
    Latest,
    /// Given offsets (saved [`TopicConsumer::positions`], for example);
    /// partitions missing from the map start at the earliest offset.
    At(BTreeMap<u32, u64>),
}

/// How a [`TopicConsumer`] fetches. `TopicConsumerConfig::default()` gives
/// the values below.
#[derive(Debug, Clone)]
pub struct TopicConsumerConfig {
    /// Bytes asked for per fetch. Default 256 KiB.
    pub max_bytes: u32,
    /// How long a shard's fetches wait when all its partitions are caught
    /// up. Default 100 ms.
    pub max_wait: Duration,
    /// What a partition whose position left the retained log does.
    /// Default [`OutOfRange::Fail`].
    pub out_of_range: OutOfRange,
    /// Fetched chunks waiting for the application, over all shards (each
    /// at most `max_bytes`). Default 8.
    pub buffered_chunks: usize,
}

impl Default for TopicConsumerConfig {
    fn default() -> Self {
        TopicConsumerConfig {
            max_bytes: 256 * 1024,
            max_wait: Duration::from_millis(100),
            out_of_range: OutOfRange::Fail,
            buffered_chunks: 8,
        }
    }
}

enum Event {
    /// Messages of one partition, and where it continues.
    Chunk {
        partition: u32,
        messages: Vec<TopicMessage>,
        next_offset: u64,
        /// The log was cut under the partition's position (KIP-320).
        cut: Option<Truncation>,
    },
    /// A fetcher stopped.
    Failed(ClientError),
    Wake,
}

/// What the consumer and its wakers share with the fetchers.
struct Control {
    stop: AtomicBool,
    /// Each fetcher's current socket, to unblock it on close.
    sockets: Mutex<Vec<Option<TcpStream>>>,
    /// Each fetcher's outage: its partitions, since when, attempts, the
    /// last error; `None` while it fetches.
    outages: Mutex<Vec<Option<FetcherOutage>>>,
}

#[derive(Debug, Clone)]
struct FetcherOutage {
    partitions: Vec<u32>,
    since: Instant,
    attempts: u32,
    error: ClientError,
}

/// Partitions of a [`TopicConsumer`] that cannot be read now: their broker
/// is down, unreachable or moving; their fetcher retries with back-off.
#[derive(Debug, Clone)]
pub struct TopicOutage {
    /// The partitions (those of one shard).
    pub partitions: Vec<u32>,
    /// How long they have been unavailable.
    pub since: Duration,
    /// Attempts so far.
    pub attempts: u32,
    /// The last failure.
    pub error: ClientError,
}

impl Control {
    fn close(&self) {
        self.stop.store(true, Ordering::SeqCst);
        for socket in lock(&self.sockets).iter().flatten() {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Sleeps `wait`, returning early (false) if the consumer closes.
    fn pause(&self, wait: Duration) -> bool {
        let until = Instant::now() + wait;
        while !self.stopped() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            std::thread::sleep(left.min(Duration::from_millis(20)));
        }
        false
    }
}

/// Wakes or closes a [`TopicConsumer`] from another thread.
#[derive(Clone)]
pub struct Waker {
    sender: SyncSender<Event>,
    control: Arc<Control>,
}

impl Waker {
    /// Makes a `poll` that is waiting (or the next one) return at once,
    /// possibly with no messages.
    pub fn wake(&self) {
        let _ = self.sender.try_send(Event::Wake);
    }

    /// Stops the fetchers and wakes the consumer; its polls then return
    /// what was already fetched, then nothing.
    pub fn close(&self) {
        self.control.close();
        self.wake();
    }
}

/// Reads every partition of a topic. See the module documentation.
///
/// ```no_run
/// use protocol::client::{Client, Start, TopicConsumer, TopicConsumerConfig};
/// use std::time::Duration;
/// # fn main() -> Result<(), protocol::client::ClientError> {
/// let client = Client::connect("127.0.0.1:9092")?;
/// let mut consumer = TopicConsumer::new(&client, "clicks", Start::Earliest, TopicConsumerConfig::default())?;
/// let waker = consumer.waker(); // waker.close() from another thread ends the loop
/// while !consumer.is_closed() {
///     for m in consumer.poll(Duration::from_secs(1))? {
///         println!("{}@{} {:?}", m.partition, m.offset, m.value);
///     }
///     let _checkpoint = consumer.positions(); // save it to resume later
/// }
/// # Ok(()) }
/// ```
pub struct TopicConsumer {
    events: Receiver<Event>,
    sender: SyncSender<Event>,
    control: Arc<Control>,
    fetchers: Vec<JoinHandle<()>>,
    positions: BTreeMap<u32, u64>,
    /// An error that arrived after messages; returned by the next poll.
    held_error: Option<ClientError>,
    /// Cuts of the log found under the positions, not yet taken.
    truncations: Vec<Truncation>,
}

/// Truncations a topic consumer keeps until they are taken.
const TRUNCATIONS_KEPT: usize = 256;

impl TopicConsumer {
    /// Starts fetching every partition of `topic` from `start`.
    pub fn new(
        client: &Client,
        topic: &str,
        start: Start,
        config: TopicConsumerConfig,
    ) -> Result<TopicConsumer, ClientError> {
        TopicConsumer::start(client, topic, None, start, config)
    }

    /// Starts fetching the given partitions of `topic` from `start` (a
    /// share of a topic read by several consumers, each its own set).
    pub fn for_partitions(
        client: &Client,
        topic: &str,
        partitions: &[u32],
        start: Start,
        config: TopicConsumerConfig,
    ) -> Result<TopicConsumer, ClientError> {
        TopicConsumer::start(client, topic, Some(partitions), start, config)
    }

    #[expect(
        clippy::too_many_lines,
        reason = "a topic consumer's start: metadata, offsets and the fetch threads, in order"
    )]
    fn start(
        client: &Client,
        topic: &str,
        only: Option<&[u32]>,
        start: Start,
        config: TopicConsumerConfig,
    ) -> Result<TopicConsumer, ClientError> {
        let metadata = client.metadata(&[topic])?;
        let topic_meta = metadata
            .topics
            .iter()
            .find(|t| t.name == topic)
            .ok_or_else(|| ClientError::Usage(format!("unknown topic {topic:?}")))?;
        if let Some(&missing) = only
            .unwrap_or_default()
            .iter()
            .find(|p| **p as usize >= topic_meta.partitions.len())
        {
            return Err(ClientError::Usage(format!(
                "topic {topic:?} has partitions 0..{}, not {missing}",
                topic_meta.partitions.len()
            )));
        }
        let mut by_address: BTreeMap<String, Vec<Cursor>> = BTreeMap::new();
        let mut positions = BTreeMap::new();
        for placement in &topic_meta.partitions {
            let partition = placement.partition;
            if only.is_some_and(|only| !only.contains(&partition)) {
                continue;
            }
            // A partition whose broker is down now gets a fetcher of its
            // own (per broker), which finds the shard and the start offset
            // once the broker answers.
            let address = match metadata.owner_address(topic, partition) {
                Some(shard) => format!("{}:{}", shard.host, shard.port),
                None => format!("broker {} (down)", placement.broker_id),
            };
            let given = match &start {
                Start::At(offsets) => offsets.get(&partition).copied(),
                _ => None,
            };
            let mut cursor = Cursor {
                partition,
                offset: given.unwrap_or(0),
                verified: given.is_none_or(|o| o == 0),
                caught_up: false,
                in_flight: false,
                epoch: -1,
                start: match (&start, given) {
                    (_, Some(_)) => None,
                    (Start::Latest, None) => Some(OffsetSpec::Latest),
                    (_, None) => Some(OffsetSpec::Earliest),
                },
            };
            if metadata.owner_address(topic, partition).is_some() {
                match cursor.resolve_start(client, topic) {
                    Ok(()) => {}
                    Err(error) if error.is_retriable() => {}
                    Err(error) => return Err(error),
                }
            }
            if cursor.start.is_none() {
                positions.insert(partition, cursor.offset);
            }
            by_address.entry(address).or_default().push(cursor);
        }
        let (sender, events) = std::sync::mpsc::sync_channel(config.buffered_chunks.max(1));
        let control = Arc::new(Control {
            stop: AtomicBool::new(false),
            sockets: Mutex::new((0..by_address.len()).map(|_| None).collect()),
            outages: Mutex::new((0..by_address.len()).map(|_| None).collect()),
        });
        let mut consumer = TopicConsumer {
            events,
            sender: sender.clone(),
            control: control.clone(),
            fetchers: Vec::new(),
            positions,
            held_error: None,
            truncations: Vec::new(),
        };
        for (slot, (address, cursors)) in by_address.into_iter().enumerate() {
            let fetcher = Fetcher {
                client: client.clone(),
                topic: topic.to_string(),
                topic_id: topic_meta.id.clone(),
                address,
                cursors,
                config: config.clone(),
                sender: sender.clone(),
                control: control.clone(),
                slot,
            };
            let handle = std::thread::Builder::new()
                .name("ringlog-topic-fetcher".into())
                .spawn(move || fetcher.run())?;
            consumer.fetchers.push(handle);
        }
        Ok(consumer)
    }

    /// A handle to wake or close this consumer from another thread.
    pub fn waker(&self) -> Waker {
        Waker {
            sender: self.sender.clone(),
            control: self.control.clone(),
        }
    }

    /// Waits up to `timeout` for messages and returns those fetched so far
    /// (of one or more partitions, each partition's in offset order).
    /// Empty after the timeout, after [`Waker::wake`], and once closed.
    pub fn poll(&mut self, timeout: Duration) -> Result<Vec<TopicMessage>, ClientError> {
        if let Some(error) = self.held_error.take() {
            return Err(error);
        }
        let mut out = Vec::new();
        // Closed: hand out what was fetched, without waiting for more.
        let timeout = if self.control.stopped() {
            Duration::ZERO
        } else {
            timeout
        };
        let first = match self.events.recv_timeout(timeout) {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => return Ok(out),
        };
        let mut next = Some(first);
        // Everything already fetched, up to a bound so one poll stays short.
        while let Some(event) = next.take() {
            match event {
                Event::Chunk {
                    partition,
                    mut messages,
                    next_offset,
                    cut,
                } => {
                    if let Some(cut) = cut.filter(|_| self.truncations.len() < TRUNCATIONS_KEPT) {
                        self.truncations.push(cut);
                    }
                    self.positions.insert(partition, next_offset);
                    out.append(&mut messages);
                }
                Event::Failed(error) => {
                    if out.is_empty() {
                        return Err(error);
                    }
                    self.held_error = Some(error);
                    break;
                }
                Event::Wake => break,
            }
            if out.len() >= 100_000 {
                break;
            }
            next = self.events.try_recv().ok();
        }
        Ok(out)
    }

    /// Takes the cuts of the log found under the partitions' positions
    /// since the last call: messages `poll` returned that an unclean
    /// election removed (see [`Consumer::take_truncations`](super::Consumer::take_truncations));
    /// each partition goes on from the cut by itself.
    pub fn take_truncations(&mut self) -> Vec<Truncation> {
        std::mem::take(&mut self.truncations)
    }

    /// The offset of the next message of each partition, after everything
    /// `poll` returned: save it to resume with [`Start::At`].
    pub fn positions(&self) -> BTreeMap<u32, u64> {
        self.positions.clone()
    }

    /// The partitions that cannot be read now (their broker is down or
    /// unreachable), retried with back-off while the others are read.
    /// Empty when every partition is being fetched.
    pub fn outages(&self) -> Vec<TopicOutage> {
        lock(&self.control.outages)
            .iter()
            .flatten()
            .map(|o| TopicOutage {
                partitions: o.partitions.clone(),
                since: o.since.elapsed(),
                attempts: o.attempts,
                error: o.error.clone(),
            })
            .collect()
    }

    /// True once [`Waker::close`] or [`TopicConsumer::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.control.stopped()
    }

    /// Stops the fetchers and waits for them; messages not yet returned by
    /// `poll` are dropped (their partitions' positions do not include them).
    pub fn close(&mut self) {
        self.control.close();
        // Fetchers blocked on a full queue move on once it drains.
        while let Some(handle) = self.fetchers.pop() {
            while !handle.is_finished() {
                while self.events.try_recv().is_ok() {}
                std::thread::sleep(Duration::from_millis(1));
            }
            let _ = handle.join();
        }
    }
}

impl Drop for TopicConsumer {
    fn drop(&mut self) {
        self.close();
    }
}

struct Cursor {
    partition: u32,
    offset: u64,
    /// `offset` is known to be a message boundary.
    verified: bool,
    caught_up: bool,
    in_flight: bool,
    /// Where to start, while the start offset is not known yet (the
    /// partition's broker was down when the consumer started).
    start: Option<OffsetSpec>,
    /// The leader epoch of the message before `offset` (-1: unknown).
    epoch: i32,
}

impl Cursor {
    /// Asks the partition's broker for the start offset, if still unknown.
    fn resolve_start(&mut self, client: &Client, topic: &str) -> Result<(), ClientError> {
        let Some(spec) = self.start else {
            return Ok(());
        };
        let (offset, _) = client.list_offsets(topic, self.partition, spec, 0)?;
        self.offset = offset;
        self.verified = true;
        self.start = None;
        Ok(())
    }
}

/// One shard's partitions over one connection.
struct Fetcher {
    client: Client,
    topic: String,
    /// The topic's id when the consumer started.
    topic_id: String,
    address: String,
    cursors: Vec<Cursor>,
    config: TopicConsumerConfig,
    sender: SyncSender<Event>,
    control: Arc<Control>,
    slot: usize,
}

/// Why a fetch round ended.
enum Broke {
    /// The connection is gone (or out of date): reconnect and go on.
    Connection(ClientError),
    /// Stop this fetcher.
    Stop,
}

impl Fetcher {
    fn run(mut self) {
        let mut attempt = 0;
        while !self.control.stopped() {
            let error = match self.connect() {
                Ok(mut conn) => match self.fetch_loop(&mut conn, &mut attempt) {
                    Broke::Stop => return,
                    Broke::Connection(error) => error,
                },
                Err(error) => error,
            };
            if !error.is_retriable() {
                let _ = self.sender.send(Event::Failed(error));
                return;
            }
            // A broker that is down or moving: an outage of these
            // partitions, ridden out with back-off while the other shards'
            // fetchers go on.
            self.note_outage(attempt, error);
            if !self.control.pause(self.client.config().backoff(attempt)) {
                return;
            }
            attempt = attempt.saturating_add(1);
        }
    }

    fn note_outage(&self, attempt: u32, error: ClientError) {
        let mut outages = lock(&self.control.outages);
        let Some(slot) = outages.get_mut(self.slot) else {
            return;
        };
        match slot {
            Some(outage) => {
                outage.attempts = attempt + 1;
                outage.error = error;
            }
            None => {
                *slot = Some(FetcherOutage {
                    partitions: self.cursors.iter().map(|c| c.partition).collect(),
                    since: Instant::now(),
                    attempts: attempt + 1,
                    error,
                })
            }
        }
    }

    /// A connection to the shard that owns this fetcher's partitions now,
    /// with their start offsets known; an unavailable partition (its
    /// broker not in Metadata) is an error that passes.
    fn connect(&mut self) -> Result<Connection, ClientError> {
        let metadata = self.client.metadata(&[&self.topic])?;
        super::check_topic_id(&metadata, &self.topic, &self.topic_id)?;
        self.address =
            self.client
                .partition_address(&metadata, &self.topic, self.cursors[0].partition)?;
        let conn = self.client.open(&self.address)?;
        for cursor in &mut self.cursors {
            if cursor.start.is_none() {
                continue;
            }
            cursor.resolve_start(&self.client, &self.topic)?;
            // The consumer's positions learn where the partition starts.
            let event = Event::Chunk {
                partition: cursor.partition,
                messages: Vec::new(),
                next_offset: cursor.offset,
                cut: None,
            };
            if self.sender.send(event).is_err() {
                return Err(ClientError::Usage("the consumer is closed".into()));
            }
        }
        lock(&self.control.sockets)[self.slot] = Some(conn.socket()?);
        Ok(conn)
    }

    /// Sends a fetch for every partition without one in flight.
    fn send_fetches(
        &mut self,
        conn: &mut Connection,
        order: &mut VecDeque<usize>,
    ) -> Result<(), ClientError> {
        let all_caught_up = self.cursors.iter().all(|c| c.caught_up);
        let wait_ms = if all_caught_up {
            self.config.max_wait.as_millis().min(u128::from(u32::MAX)) as u32
        } else {
            0
        };
        for (i, cursor) in self.cursors.iter_mut().enumerate() {
            if cursor.in_flight {
                continue;
            }
            let header = codec::replica_fetch_request(
                &mut conn.fbb,
                &self.topic,
                &self.topic_id,
                cursor.partition,
                FetchArgs {
                    offset: cursor.offset,
                    max_bytes: self.config.max_bytes,
                    max_wait_ms: wait_ms,
                },
                &ReplicaFetch {
                    last_fetched_epoch: cursor.epoch,
                    ..ReplicaFetch::consumer()
                },
            )
            .to_vec();
            conn.send(Api::Fetch, &header, &[])?;
            cursor.in_flight = true;
            order.push_back(i);
        }
        conn.flush()
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one partition's fetch loop with its outages, resets and back-off; its state is local"
    )]
    fn fetch_loop(&mut self, conn: &mut Connection, attempt: &mut u32) -> Broke {
        for cursor in &mut self.cursors {
            cursor.in_flight = false;
        }
        let mut order = VecDeque::new();
        let mut frame = ResponseFrame::default();
        if let Err(error) = conn.expect_wait(self.config.max_wait) {
            return Broke::Connection(error);
        }
        loop {
            if self.control.stopped() {
                return Broke::Stop;
            }
            if let Err(error) = self.send_fetches(conn, &mut order) {
                return Broke::Connection(error);
            }
            let received = conn.recv_into(&mut frame);
            let Some(index) = order.pop_front() else {
                return Broke::Connection(ClientError::Protocol("a response to no fetch".into()));
            };
            self.cursors[index].in_flight = false;
            let policy = self.config.out_of_range;
            match received {
                Ok(()) => {}
                Err(ClientError::Broker {
                    code: ErrorCode::OffsetOutOfRange,
                    range: Some((start, end)),
                    ..
                }) if policy != OutOfRange::Fail => {
                    let cursor = &mut self.cursors[index];
                    cursor.offset = if policy == OutOfRange::Earliest {
                        start
                    } else {
                        end
                    };
                    cursor.verified = true;
                    cursor.epoch = -1;
                    let event = Event::Chunk {
                        partition: cursor.partition,
                        messages: Vec::new(),
                        next_offset: cursor.offset,
                        cut: None,
                    };
                    if self.sender.send(event).is_err() {
                        return Broke::Stop;
                    }
                    continue;
                }
                Err(error) if error.is_connection_error() => {
                    return Broke::Connection(error);
                }
                Err(error) if error.moved() => {
                    return Broke::Connection(error);
                }
                Err(error) => {
                    let _ = self.sender.send(Event::Failed(error));
                    return Broke::Stop;
                }
            }
            if *attempt > 0 || lock(&self.control.outages)[self.slot].is_some() {
                *attempt = 0;
                lock(&self.control.outages)[self.slot] = None;
            }
            let event = match self.parse(index, &frame) {
                Ok(event) => event,
                Err(error) => {
                    let _ = self.sender.send(Event::Failed(error));
                    return Broke::Stop;
                }
            };
            // The partition's next fetch goes out before the hand-over —
            // but the messages parsed are handed over even when sending it
            // fails: the cursor is already past them, and dropping them
            // with the broken connection would skip that fetch's messages
            // for good (a loss path behind issue 25, item 1).
            let sent = self.send_fetches(conn, &mut order);
            if let Some(event) = event {
                if self.sender.send(event).is_err() {
                    return Broke::Stop;
                }
            }
            if let Err(error) = sent {
                return Broke::Connection(error);
            }
        }
    }

    /// The messages of one fetch response, and the cursor moved past them.
    fn parse(&mut self, index: usize, frame: &ResponseFrame) -> Result<Option<Event>, ClientError> {
        let cursor = &mut self.cursors[index];
        let answer = check_fetch_response(frame, cursor.offset)?;
        if let Some((cut, epoch)) = answer.cut_under(&self.topic, cursor.partition, cursor.offset) {
            // An unclean election cut the log under the position: go on
            // from the cut, a message boundary, and say what is gone.
            cursor.offset = cut.from;
            cursor.epoch = epoch;
            cursor.verified = true;
            cursor.caught_up = false;
            return Ok(Some(Event::Chunk {
                partition: cursor.partition,
                messages: Vec::new(),
                next_offset: cut.from,
                cut: Some(cut),
            }));
        }
        let flushed_offset = answer.flushed_offset;
        let place = ChunkPlace {
            topic: &self.topic,
            partition: cursor.partition,
            offset: answer.offset,
            from: cursor.offset,
            format: answer.format,
            verified: cursor.verified,
            flushed_offset,
            max_bytes: self.config.max_bytes,
        };
        let partition = cursor.partition;
        let mut messages = Vec::new();
        let walked = walk_chunk(&place, &frame.payload, &mut |m| {
            messages.push(TopicMessage {
                partition,
                offset: m.offset,
                key: m.key.map(<[u8]>::to_vec),
                value: m.value.to_vec(),
                timestamp: m.timestamp,
                headers: m.headers.to_owned_vec(),
            })
        })
        .map_err(|(error, _)| error)?;
        cursor.verified |= walked.delivered > 0;
        if walked.next_offset != cursor.offset {
            cursor.epoch = answer.chunk_epoch;
        }
        cursor.offset = walked.next_offset;
        cursor.caught_up = cursor.offset >= flushed_offset;
        Ok((!messages.is_empty()).then_some(Event::Chunk {
            partition,
            messages,
            next_offset: walked.next_offset,
            cut: None,
        }))
    }
}
