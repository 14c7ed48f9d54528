//! A blocking, std-only Rust client for ringlog (no async runtime, no glommio).
//!
//! - [`Client`]: bootstrap connection, metadata and admin requests.
//! - [`Producer`]: batching by count / bytes / linger, random or key-hash
//!   partitioning, pipelined requests, ack modes.
//! - [`Consumer`]: one partition from an offset; verifies CRCs, resumes after
//!   chunks that end mid-message, seeks and rewinds.
//! - [`TopicConsumer`]: every partition of a topic, one connection per
//!   shard with pipelined fetches, positions for checkpointing
//!   ([`OffsetStore`] keeps them in a file), a [`Waker`] for other threads.
//! - [`GroupConsumer`]: a member of a consumer group (cluster only): the
//!   paper's rebalance, offset commits, at-least-once delivery.
//!
//! A complete program: `protocol/examples/quickstart.rs`
//! (`cargo run -p ringlog-protocol --example quickstart -- 127.0.0.1:9092`).
//!
//! ```no_run
//! use protocol::client::{AckMode, Client, Consumer, Producer, ProducerConfig};
//! # fn main() -> Result<(), protocol::client::ClientError> {
//! let client = Client::connect("127.0.0.1:9092")?;
//! client.create_topic("clicks", 4, &Default::default())?;
//! let mut producer = Producer::new(&client, "clicks", ProducerConfig { acks: AckMode::Flushed, ..Default::default() })?;
//! producer.send(Some(b"user-1"), b"page=/home")?;
//! producer.flush()?; // waits for the flushed acknowledgement
//! let partition = producer.partition_for(Some(b"user-1"));
//! let mut consumer = Consumer::new(&client, "clicks", partition, 0)?;
//! for message in consumer.poll()? {
//!     println!("{} {:?}", message.offset, message.value);
//! }
//! # Ok(()) }
//! ```

mod clock;
mod committer;
mod config;
mod connection;
mod consumer;
mod group;
mod heartbeat;
mod mirror;
mod numbering;
mod offset_store;
mod prefetch;
mod producer;
mod tls;
mod topic_consumer;
mod walk;

pub use crate::codec::groups::{
    GroupDescription, GroupMemberInfo, GroupPartitionInfo, GroupTopicInfo, GroupView, Joined,
    OffsetCommit,
};
pub use crate::codec::{
    AckMode, Metadata, OffsetSpec, PartitionOffsets, TopicMetadata, TopicSettings,
};
pub use config::{ClientConfig, Login};
pub use connection::{read_response, read_response_with, BrokerHello, Connection, ResponseFrame};
pub use consumer::{Consumer, OutOfRange, OwnedMessage, Truncation};
pub use group::{GroupConfig, GroupConsumer, GroupMessage, OffsetReset, Outage, StartFrom};
pub use mirror::{MirrorChunk, MirrorRead};
pub use offset_store::OffsetStore;
pub use prefetch::PrefetchConsumer;
pub use producer::{
    partition_for_key, Delivery, Extras, Outcome, Partitioner, Producer, ProducerConfig, Receipt,
    Stored,
};
pub use tls::{Stream, TlsConfig};
pub use topic_consumer::{
    Start, TopicConsumer, TopicConsumerConfig, TopicMessage, TopicOutage, Waker,
};

use crate::codec::{self, verify};
use crate::frame::Api;
use crate::{wire, ErrorCode};
use std::sync::Mutex;

/// Anything the client can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Could not reach a broker.
    #[error("cannot connect to {address}: {source}")]
    Connect {
        /// The address tried.
        address: String,
        /// Why.
        source: std::io::Error,
    },
    /// A read or write on a connection failed.
    #[error("connection error: {0}")]
    Io(#[from] std::io::Error),
    /// No bootstrap address answered; each one's failure, in order.
    #[error("no broker answered: {}", .tried.iter().map(|(a, e)| format!("{a}: {e}")).collect::<Vec<_>>().join("; "))]
    NoBroker {
        /// (address, why) for every address tried.
        tried: Vec<(String, String)>,
    },
    /// A broker connection broke while requests were unanswered: their
    /// outcome is unknown (the broker may or may not have stored them).
    #[error("the connection to {address} broke with {unanswered} request(s) unanswered; whether they were stored is unknown")]
    Disconnected {
        /// The broker's address.
        address: String,
        /// Requests sent and not answered.
        unanswered: u64,
    },
    /// The broker answered with an error code.
    #[error("{code}: {message}")]
    Broker {
        /// The code.
        code: ErrorCode,
        /// The broker's explanation.
        message: String,
        /// The valid offset range, for OFFSET_OUT_OF_RANGE.
        range: Option<(u64, u64)>,
        /// The broker that stores the partition, for NOT_OWNER.
        owner_broker_id: Option<u32>,
    },
    /// The broker sent something this client cannot understand.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// This client's side of a login failed: the broker's SCRAM messages
    /// did not check out (it does not know the user's credential: another
    /// cluster, or someone in between), or the user name is not valid. A
    /// broker's refusal is a [`ClientError::Broker`] with
    /// AUTHENTICATION_FAILED instead.
    #[error("login to {address} failed: {reason}")]
    Login {
        /// The broker's address.
        address: String,
        /// What did not check out.
        reason: String,
    },
    /// A fetched message failed its checks.
    #[error("corrupt message in {partition}: {source}")]
    Corrupt {
        /// `topic-partition`.
        partition: String,
        /// What was wrong.
        source: crate::stored::StoredError,
    },
    /// A consumer's position is not the start of a message: the offset
    /// given to it (or to `seek`) points inside one. Offsets are byte
    /// positions; valid ones come from ListOffsets, a delivered message's
    /// offset, or the consumer's `position`.
    #[error("offset {offset} of {partition} is not the start of a message ({source}); use an offset from ListOffsets (`ringlog offsets`), a delivered message or a consumer's position")]
    InvalidOffset {
        /// `topic-partition`.
        partition: String,
        /// The offset.
        offset: u64,
        /// What the bytes there failed.
        source: crate::stored::StoredError,
    },
    /// One message is larger than the consumer's fetch size.
    #[error("the message at offset {offset} is {size} bytes, larger than the fetch size of {max_bytes} bytes; raise the consumer's max_bytes")]
    MessageTooLarge {
        /// Its offset.
        offset: u64,
        /// Its stored size.
        size: usize,
        /// The fetch size.
        max_bytes: u32,
    },
    /// Bad arguments from the caller.
    #[error("{0}")]
    Usage(String),
    /// A broker did not answer in time.
    #[error("{address} did not answer {during} within {waited:?}")]
    Timeout {
        /// The broker's address.
        address: String,
        /// What was waited for.
        during: &'static str,
        /// How long.
        waited: std::time::Duration,
    },
    /// Messages a producer gave up on: each was refused with an error that
    /// does not pass, or its delivery timeout or retries ran out (per-batch
    /// detail in the producer's delivery reports). `unknown` of them may
    /// have been stored all the same: an answer was lost, or the broker
    /// appended them before it failed. The producer stays usable.
    #[error("{messages} message(s) in {batches} batch(es) were not delivered{}; the first failure: {first}", in_doubt(*.unknown))]
    Undelivered {
        /// Messages not delivered.
        messages: u64,
        /// Produce requests (batches) they were in.
        batches: u64,
        /// Of `messages`, those whose fate is unknown
        /// ([`Outcome::Unknown`]).
        unknown: u64,
        /// The first batch's failure.
        first: Box<ClientError>,
    },
    /// A batch the producer gave up on when its
    /// [`delivery_timeout`](ProducerConfig::delivery_timeout)
    /// passed, counted from when its first message was queued; `last` is
    /// what its last attempt met.
    #[error("not delivered within the delivery timeout of {timeout:?}; the last attempt: {last}")]
    DeliveryTimeout {
        /// The producer's delivery timeout.
        timeout: std::time::Duration,
        /// The last attempt's error.
        last: Box<ClientError>,
    },
    /// The topic was deleted and created again under the same name (its id
    /// changed): positions, placement and batches of the old topic do not
    /// apply to the new one. Not retriable: make a new consumer or producer.
    #[error("topic {topic:?} was deleted and created again (id {old_id} is now {new_id}): offsets of the old topic mean nothing in the new one; start a new consumer")]
    TopicRecreated {
        /// The topic.
        topic: String,
        /// The id this client started with.
        old_id: String,
        /// The id Metadata names now.
        new_id: String,
    },
    /// The partition's broker is not live (Metadata does not list it, or it
    /// does not answer); without another copy the partition is unavailable
    /// until that broker is back. Retriable.
    #[error("{topic}-{partition} is stored by broker {broker_id}, which is down: the partition is unavailable until that broker is back")]
    PartitionUnavailable {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The broker that stores it.
        broker_id: u32,
    },
}

/// The note an [`ClientError::Undelivered`] adds for messages that may
/// have been stored.
fn in_doubt(unknown: u64) -> String {
    match unknown {
        0 => String::new(),
        1 => " (1 of them may have been stored: its fate is unknown)".into(),
        n => format!(" ({n} of them may have been stored: their fate is unknown)"),
    }
}

/// A copy of an error, for reporting one failure in several places (a
/// batch's delivery report and the producer's flush). An `io::Error` is
/// copied as its kind and message.
impl Clone for ClientError {
    #[expect(clippy::too_many_lines, reason = "one arm per error variant: a list")]
    fn clone(&self) -> Self {
        let io = |e: &std::io::Error| std::io::Error::new(e.kind(), e.to_string());
        match self {
            ClientError::Connect { address, source } => ClientError::Connect {
                address: address.clone(),
                source: io(source),
            },
            ClientError::Io(e) => ClientError::Io(io(e)),
            ClientError::Login { address, reason } => ClientError::Login {
                address: address.clone(),
                reason: reason.clone(),
            },
            ClientError::NoBroker { tried } => ClientError::NoBroker {
                tried: tried.clone(),
            },
            ClientError::Disconnected {
                address,
                unanswered,
            } => ClientError::Disconnected {
                address: address.clone(),
                unanswered: *unanswered,
            },
            ClientError::Broker {
                code,
                message,
                range,
                owner_broker_id,
            } => ClientError::Broker {
                code: *code,
                message: message.clone(),
                range: *range,
                owner_broker_id: *owner_broker_id,
            },
            ClientError::Protocol(m) => ClientError::Protocol(m.clone()),
            ClientError::Corrupt { partition, source } => ClientError::Corrupt {
                partition: partition.clone(),
                source: source.clone(),
            },
            ClientError::InvalidOffset {
                partition,
                offset,
                source,
            } => ClientError::InvalidOffset {
                partition: partition.clone(),
                offset: *offset,
                source: source.clone(),
            },
            ClientError::MessageTooLarge {
                offset,
                size,
                max_bytes,
            } => ClientError::MessageTooLarge {
                offset: *offset,
                size: *size,
                max_bytes: *max_bytes,
            },
            ClientError::Usage(m) => ClientError::Usage(m.clone()),
            ClientError::Timeout {
                address,
                during,
                waited,
            } => ClientError::Timeout {
                address: address.clone(),
                during,
                waited: *waited,
            },
            ClientError::Undelivered {
                messages,
                batches,
                unknown,
                first,
            } => ClientError::Undelivered {
                messages: *messages,
                batches: *batches,
                unknown: *unknown,
                first: first.clone(),
            },
            ClientError::DeliveryTimeout { timeout, last } => ClientError::DeliveryTimeout {
                timeout: *timeout,
                last: last.clone(),
            },
            ClientError::PartitionUnavailable {
                topic,
                partition,
                broker_id,
            } => ClientError::PartitionUnavailable {
                topic: topic.clone(),
                partition: *partition,
                broker_id: *broker_id,
            },
            ClientError::TopicRecreated {
                topic,
                old_id,
                new_id,
            } => ClientError::TopicRecreated {
                topic: topic.clone(),
                old_id: old_id.clone(),
                new_id: new_id.clone(),
            },
        }
    }
}

impl ClientError {
    fn protocol(message: impl Into<String>) -> Self {
        ClientError::Protocol(message.into())
    }

    /// The broker's error code, when this is a broker error (or messages
    /// were undelivered because of one).
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Broker { code, .. } => Some(*code),
            ClientError::Undelivered { first, .. } => first.code(),
            ClientError::DeliveryTimeout { last, .. } => last.code(),
            _ => None,
        }
    }

    /// For OFFSET_OUT_OF_RANGE: the valid offsets, `start..=end`.
    pub fn offset_range(&self) -> Option<(u64, u64)> {
        match self {
            ClientError::Broker { range, .. } => *range,
            _ => None,
        }
    }

    /// True when the broker says the partition is served elsewhere now
    /// (NOT_OWNER, NOT_LEADER, FENCED_LEADER_EPOCH,
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND): refresh Metadata and go there.
    pub fn moved(&self) -> bool {
        matches!(
            self.code(),
            Some(
                ErrorCode::NotOwner
                    | ErrorCode::NotLeader
                    | ErrorCode::FencedLeaderEpoch
                    | ErrorCode::NotEnoughReplicasAfterAppend
            )
        )
    }

    /// True when the connection the error happened on is no longer
    /// usable (broken, timed out, out of step), as opposed to an answer
    /// from the broker on a healthy connection.
    pub fn is_connection_error(&self) -> bool {
        matches!(
            self,
            ClientError::Connect { .. }
                | ClientError::Io(_)
                | ClientError::NoBroker { .. }
                | ClientError::Disconnected { .. }
                | ClientError::Timeout { .. }
                | ClientError::Protocol(_)
        )
    }

    /// True for a login the broker refused or that did not check out
    /// (AUTHENTICATION_REQUIRED, AUTHENTICATION_FAILED, [`ClientError::Login`]):
    /// not worth trying on another broker or again as it is.
    pub fn is_login_failure(&self) -> bool {
        match self {
            ClientError::Login { .. } => true,
            ClientError::Broker { code, .. } => matches!(
                code,
                ErrorCode::AuthenticationRequired | ErrorCode::AuthenticationFailed
            ),
            _ => false,
        }
    }

    /// True when the same request may succeed if sent again later: a
    /// broken or refused connection, a timeout, or a broker error that says
    /// "not now" (OVERLOADED, SHUTTING_DOWN, NOT_OWNER after a metadata
    /// refresh, COORDINATOR_UNAVAILABLE, STORAGE_UNAVAILABLE). A retry of a
    /// produce whose outcome was unknown may store it twice (at least once).
    pub fn is_retriable(&self) -> bool {
        match self {
            ClientError::Connect { .. }
            | ClientError::Io(_)
            | ClientError::NoBroker { .. }
            | ClientError::Disconnected { .. }
            | ClientError::Timeout { .. }
            | ClientError::PartitionUnavailable { .. } => true,
            ClientError::Undelivered { first, .. } => first.is_retriable(),
            ClientError::DeliveryTimeout { last, .. } => last.is_retriable(),
            ClientError::Broker { code, .. } => matches!(
                code,
                ErrorCode::Overloaded
                    | ErrorCode::ShuttingDown
                    | ErrorCode::NotOwner
                    | ErrorCode::NotLeader
                    | ErrorCode::FencedLeaderEpoch
                    | ErrorCode::UnknownLeaderEpoch
                    | ErrorCode::NotEnoughReplicas
                    | ErrorCode::NotEnoughReplicasAfterAppend
                    | ErrorCode::CoordinatorUnavailable
                    | ErrorCode::StorageUnavailable
            ),
            _ => false,
        }
    }
}

/// A handle on the cluster for metadata, admin and group requests, and the
/// [`ClientConfig`] its producers and consumers share.
///
/// `Clone`, `Send` and `Sync`: clones share one bootstrap connection (used
/// one request at a time, behind a mutex) and the connections to partition
/// owners that ListOffsets needs. Producers and consumers made from it open
/// their own connections, keep a clone to refresh metadata when they
/// reconnect, and may move to other threads.
///
/// When the bootstrap connection breaks or a request on it times out, the
/// next request reconnects, trying the bootstrap addresses in order;
/// requests that are safe to repeat (metadata, list offsets, describe,
/// heartbeat, commit) are sent once more on the new connection.
#[derive(Clone)]
pub struct Client {
    shared: std::sync::Arc<ClientShared>,
}

struct ClientShared {
    config: ClientConfig,
    bootstrap: Vec<String>,
    conn: Mutex<Option<Connection>>,
    hello: Mutex<BrokerHello>,
    owners: Mutex<std::collections::HashMap<String, Connection>>,
    /// Per topic, the owning shard's address of each partition (by index),
    /// from the last Metadata asked for it: `list_offsets` over a topic of
    /// 10,000 partitions asked for that topic's whole Metadata once per
    /// partition (24 s for one pass in loadgen). Forgotten when the topic is
    /// created or deleted through this client, and refreshed when a broker
    /// answers NOT_OWNER or UNKNOWN_TOPIC, or the connection fails.
    placements: Mutex<std::collections::HashMap<String, Vec<Option<String>>>>,
    /// Shard 0 of every broker the last Metadata listed.
    known_brokers: Mutex<Vec<String>>,
    /// The address whose connection last broke or timed out: tried last on
    /// the next reconnect. A stopped broker still accepts TCP connections
    /// (the kernel does), so trying it first costs a whole handshake
    /// timeout — for a heartbeat, most of its session.
    failed: Mutex<Option<String>>,
    /// Throttle times the brokers reported on this client's connections,
    /// in milliseconds.
    throttled_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// Locks a mutex, also after a panic elsewhere (the data stays usable:
/// every critical section leaves it consistent).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Client {
    /// Connects to the first reachable address of a comma-separated list,
    /// with the default [`ClientConfig`].
    pub fn connect(brokers: &str) -> Result<Client, ClientError> {
        Client::with_config(brokers, ClientConfig::default())
    }

    /// Connects to the first address of a comma-separated list that
    /// answers within `config.connect_timeout`; the error names every
    /// address tried and why each failed.
    pub fn with_config(brokers: &str, config: ClientConfig) -> Result<Client, ClientError> {
        let bootstrap: Vec<String> = brokers
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        if bootstrap.is_empty() {
            return Err(ClientError::Usage("no broker address given".into()));
        }
        let throttled_ms = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut conn = connect_any(&bootstrap, &config)?;
        conn.add_throttle_to(throttled_ms.clone());
        Ok(Client {
            shared: std::sync::Arc::new(ClientShared {
                hello: Mutex::new(conn.hello().clone()),
                conn: Mutex::new(Some(conn)),
                config,
                bootstrap,
                owners: Mutex::new(std::collections::HashMap::new()),
                placements: Mutex::new(std::collections::HashMap::new()),
                known_brokers: Mutex::new(Vec::new()),
                failed: Mutex::new(None),
                throttled_ms,
            }),
        })
    }

    /// The timeouts and retries in force.
    pub fn config(&self) -> &ClientConfig {
        &self.shared.config
    }

    /// The bootstrap addresses.
    pub fn bootstrap(&self) -> &[String] {
        &self.shared.bootstrap
    }

    /// What the bootstrap broker said in the handshake (its id, shards and
    /// build), as of the last (re)connect.
    pub fn hello(&self) -> BrokerHello {
        lock(&self.shared.hello).clone()
    }

    /// Opens a connection to `address` with this client's timeouts.
    pub fn open(&self, address: &str) -> Result<Connection, ClientError> {
        let mut conn = Connection::connect_with(address, &self.shared.config)?;
        conn.add_throttle_to(self.shared.throttled_ms.clone());
        Ok(conn)
    }

    /// How long the brokers asked this client's connections to wait, over
    /// a quota, added up (each request waited its turn: PROTOCOL.md §1,
    /// "throttled frames").
    pub fn throttled(&self) -> std::time::Duration {
        std::time::Duration::from_millis(
            self.shared
                .throttled_ms
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// Sends one request on the bootstrap connection and returns the
    /// response. A broken connection is replaced on the next request; with
    /// `repeatable`, a request that failed because the connection broke or
    /// timed out is sent once more on a new one.
    pub(crate) fn request(
        &self,
        api: Api,
        build: impl Fn(&mut flatbuffers::FlatBufferBuilder<'static>) -> Vec<u8>,
        wait: std::time::Duration,
        repeatable: bool,
    ) -> Result<ResponseFrame, ClientError> {
        let mut slot = lock(&self.shared.conn);
        let mut first_error = None;
        for _ in 0..2 {
            if slot.is_none() {
                let mut conn = match connect_any(&self.reconnect_addresses(), &self.shared.config) {
                    Ok(conn) => conn,
                    // The request's own failure is the news; say why the
                    // reconnect failed too.
                    Err(error) => return Err(first_error.unwrap_or(error)),
                };
                *lock(&self.shared.hello) = conn.hello().clone();
                conn.add_throttle_to(self.shared.throttled_ms.clone());
                *slot = Some(conn);
            }
            let Some(conn) = slot.as_mut() else {
                continue;
            };
            let header = build(&mut conn.fbb);
            let result = conn
                .expect_wait(wait)
                .and_then(|()| conn.call(api, &header, &[]));
            let result = result.and_then(|frame| {
                conn.expect_wait(std::time::Duration::ZERO)?;
                Ok(frame)
            });
            match result {
                Err(error) if error.is_connection_error() => {
                    *lock(&self.shared.failed) = Some(conn.address().to_string());
                    *slot = None;
                    if !repeatable || first_error.is_some() {
                        return Err(error);
                    }
                    first_error = Some(error);
                }
                other => return other,
            }
        }
        Err(first_error.unwrap_or_else(|| ClientError::protocol("no connection")))
    }

    /// Every topic (empty `topics`) or the named ones.
    pub fn metadata(&self, topics: &[&str]) -> Result<Metadata, ClientError> {
        let response = self.request(
            Api::Metadata,
            |fbb| codec::metadata_request(fbb, topics).to_vec(),
            std::time::Duration::ZERO,
            true,
        )?;
        let decoded = verify::<wire::MetadataResponse>(&response.header)
            .map_err(|e| ClientError::protocol(format!("metadata: {e}")))?;
        let metadata = codec::decode_metadata(decoded);
        let known: Vec<String> = metadata
            .brokers
            .iter()
            .filter_map(|b| b.shards.first())
            .map(|s| format!("{}:{}", s.host, s.port))
            .collect();
        if !known.is_empty() {
            *lock(&self.shared.known_brokers) = known;
        }
        Ok(metadata)
    }

    /// Creates a topic.
    pub fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        settings: &TopicSettings,
    ) -> Result<TopicMetadata, ClientError> {
        self.create_mirror_topic(name, partitions, settings, "")
    }

    /// Creates a mirror's target topic, mirrored from `source` (empty: an
    /// ordinary topic): its partitions take only mirror appends, and refuse
    /// ordinary produces with MIRRORED_PARTITION naming `source`.
    pub fn create_mirror_topic(
        &self,
        name: &str,
        partitions: u32,
        settings: &TopicSettings,
        source: &str,
    ) -> Result<TopicMetadata, ClientError> {
        lock(&self.shared.placements).remove(name);
        let response = self.request(
            Api::CreateTopic,
            |fbb| {
                codec::create_mirror_topic_request(fbb, name, partitions, settings, source).to_vec()
            },
            std::time::Duration::ZERO,
            false,
        )?;
        let decoded = verify::<wire::CreateTopicResponse>(&response.header)
            .map_err(|e| ClientError::protocol(format!("create topic: {e}")))?;
        let topic = decoded
            .topic()
            .ok_or_else(|| ClientError::protocol("create topic: no topic in response"))?;
        let created = codec::decode_topic(topic);
        self.wait_until_served(&created.name, created.partitions.len());
        Ok(created)
    }

    /// Waits, up to the request timeout, until the broker of every
    /// partition serves topic `name` with its `partitions` (a new topic, or
    /// new partitions): the others learn them from etcd's watch a moment
    /// after the broker that made them answered, and a produce sent there
    /// in between would be refused (UNKNOWN_TOPIC, UNKNOWN_PARTITION), or
    /// stored behind a later batch if refused with a code that passes. A
    /// broker that does not answer is not waited for: it learns them when
    /// it is back.
    fn wait_until_served(&self, name: &str, partitions: usize) {
        let Ok(metadata) = self.metadata(&[name]) else {
            return;
        };
        let addresses: std::collections::BTreeSet<String> = (0..partitions as u32)
            .filter_map(|p| self.partition_address(&metadata, name, p).ok())
            .collect();
        let deadline = std::time::Instant::now() + self.shared.config.request_timeout;
        for address in addresses {
            let Ok(mut conn) = self.open(&address) else {
                continue;
            };
            while std::time::Instant::now() < deadline {
                let header = codec::metadata_request(&mut conn.fbb, &[name]).to_vec();
                let served = match conn.call(Api::Metadata, &header, &[]) {
                    Ok(response) => verify::<wire::MetadataResponse>(&response.header)
                        .map(codec::decode_metadata)
                        .is_ok_and(|m| {
                            m.topics
                                .iter()
                                .any(|t| t.name == name && t.partitions.len() >= partitions)
                        }),
                    Err(error) if error.code() == Some(ErrorCode::UnknownTopic) => false,
                    Err(_) => break,
                };
                if served {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }

    /// Deletes a topic and its data.
    pub fn delete_topic(&self, name: &str) -> Result<(), ClientError> {
        lock(&self.shared.placements).remove(name);
        self.request(
            Api::DeleteTopic,
            |fbb| codec::delete_topic_request(fbb, name).to_vec(),
            std::time::Duration::ZERO,
            false,
        )?;
        Ok(())
    }

    /// Leader elections of a topic's replicated partitions
    /// ([`ElectLeaders`](codec::operations::ElectLeaders)): each
    /// partition's outcome. Sent to `at` (a broker's address) when given —
    /// an unclean election elects the broker that receives it — else on the
    /// bootstrap connection.
    pub fn elect_leaders(
        &self,
        request: &codec::operations::ElectLeaders,
        at: Option<&str>,
    ) -> Result<Vec<codec::operations::Elected>, ClientError> {
        let response = match at {
            Some(address) => {
                let mut conn = self.open(address)?;
                let header =
                    codec::operations::elect_leaders_request(&mut conn.fbb, request).to_vec();
                conn.call(Api::ElectLeaders, &header, &[])?
            }
            None => self.request(
                Api::ElectLeaders,
                |fbb| codec::operations::elect_leaders_request(fbb, request).to_vec(),
                std::time::Duration::ZERO,
                true,
            )?,
        };
        codec::operations::decode_elect_leaders(&response.header)
            .map_err(|e| ClientError::protocol(format!("elect leaders: {e}")))
    }

    /// Starts moving a partition's copies to `replicas` (the preferred
    /// leader first); Metadata's `moving_to` shows the move until it is
    /// done.
    pub fn reassign_partition(
        &self,
        topic: &str,
        partition: u32,
        replicas: &[crate::types::BrokerId],
    ) -> Result<codec::operations::Reassigned, ClientError> {
        lock(&self.shared.placements).remove(topic);
        let response = self.request(
            Api::ReassignPartition,
            |fbb| codec::operations::reassign_request(fbb, topic, partition, replicas).to_vec(),
            std::time::Duration::ZERO,
            true,
        )?;
        codec::operations::decode_reassign(&response.header)
            .map_err(|e| ClientError::protocol(format!("reassign partition: {e}")))
    }

    /// Raises `topic`'s partition count to `partitions` (never lowers it:
    /// INVALID_CONFIG). The new partitions start empty; keyed messages of
    /// a key may go to another partition from then on. Producers and group
    /// members take the new partitions up by themselves.
    pub fn create_partitions(
        &self,
        topic: &str,
        partitions: u32,
    ) -> Result<codec::operations::PartitionsCreated, ClientError> {
        lock(&self.shared.placements).remove(topic);
        // Sent again once if the connection broke: it names the total, so
        // a second one after the first was applied changes nothing.
        let response = self.request(
            Api::CreatePartitions,
            |fbb| codec::operations::create_partitions_request(fbb, topic, partitions).to_vec(),
            std::time::Duration::ZERO,
            true,
        )?;
        let created = codec::operations::decode_partitions_created(&response.header)
            .map_err(|e| ClientError::protocol(format!("create partitions: {e}")))?;
        self.wait_until_served(topic, partitions as usize);
        Ok(created)
    }

    /// Sets each principal's whole quota in `set` (`User:NAME`, or
    /// `default`) and removes those in `delete`, in the cluster's
    /// registry; every broker applies them within about a second. Returns
    /// (set, deleted).
    pub fn alter_quotas(
        &self,
        set: &[codec::quotas::QuotaEntry],
        delete: &[&str],
    ) -> Result<(u32, u32), ClientError> {
        let response = self.request(
            Api::AlterQuotas,
            |fbb| codec::quotas::alter_quotas_request(fbb, set, delete).to_vec(),
            std::time::Duration::ZERO,
            true,
        )?;
        let decoded = verify::<wire::AlterQuotasResponse>(&response.header)
            .map_err(|e| ClientError::protocol(format!("alter quotas: {e}")))?;
        Ok((decoded.set(), decoded.deleted()))
    }

    /// The quotas set at run time, and the answering broker's configured
    /// ones.
    pub fn describe_quotas(&self) -> Result<codec::quotas::Described, ClientError> {
        let response = self.request(
            Api::DescribeQuotas,
            |fbb| codec::quotas::describe_quotas_request(fbb).to_vec(),
            std::time::Duration::ZERO,
            true,
        )?;
        let decoded = verify::<wire::DescribeQuotasResponse>(&response.header)
            .map_err(|e| ClientError::protocol(format!("describe quotas: {e}")))?;
        Ok(codec::quotas::decode_described(decoded))
    }

    /// Changes `topic`'s settings while it runs: `set` overrides the
    /// broker's default of each named setting (Kafka's names:
    /// `retention.ms`, `retention.bytes`, `segment.bytes`,
    /// `flush.messages`, `flush.ms`, `min.insync.replicas`), `delete`
    /// returns each named one to the default. All or nothing; answered
    /// once every live broker applies it, with the topic as it is now.
    pub fn alter_topic_config(
        &self,
        topic: &str,
        set: &[(&str, &str)],
        delete: &[&str],
    ) -> Result<TopicMetadata, ClientError> {
        // Sent again once if the connection broke: it names the values, so
        // a second one after the first was applied changes nothing.
        let response = self.request(
            Api::AlterTopicConfig,
            |fbb| codec::topic_config::alter_topic_config_request(fbb, topic, set, delete).to_vec(),
            std::time::Duration::ZERO,
            true,
        )?;
        let decoded = verify::<wire::AlterTopicConfigResponse>(&response.header)
            .map_err(|e| ClientError::protocol(format!("alter topic config: {e}")))?;
        codec::topic_config::decode_alter_topic_config_response(decoded)
            .ok_or_else(|| ClientError::protocol("alter topic config: no topic in the answer"))
    }

    /// Ends mirroring of a mirror's target topic: it takes ordinary
    /// produces from now on, keeping every byte and offset it has. Returns
    /// what it was mirrored from.
    /// `ends`: where each partition's copy ends (read with the mirror
    /// stopped), recorded with the promotion as where a failback cuts.
    pub fn promote_mirror(&self, topic: &str, ends: &[u64]) -> Result<String, ClientError> {
        lock(&self.shared.placements).remove(topic);
        let response = self.request(
            Api::PromoteMirror,
            |fbb| codec::operations::promote_mirror_request(fbb, topic, ends).to_vec(),
            std::time::Duration::ZERO,
            true,
        )?;
        let decoded = verify::<wire::PromoteMirrorResponse>(&response.header)
            .map_err(|e| ClientError::protocol(format!("promote mirror: {e}")))?;
        Ok(decoded.mirror_source().unwrap_or_default().to_string())
    }

    /// Digests of the bytes of this broker's copy of `topic`-`partition`
    /// (the broker this client is connected to: its leader's or a
    /// follower's copy alike), for `ringlog verify`.
    pub fn digest(
        &self,
        topic: &str,
        partition: u32,
        args: &codec::digest::DigestArgs,
    ) -> Result<codec::digest::Digests, ClientError> {
        let response = self.request(
            Api::Digest,
            |fbb| codec::digest::digest_request(fbb, topic, partition, args).to_vec(),
            std::time::Duration::ZERO,
            true,
        )?;
        codec::digest::decode_digests(&response.header)
            .map_err(|e| ClientError::protocol(format!("digest: {e}")))
    }

    /// A new idempotent producer's id and epoch (InitProducerId), for a
    /// producer that writes `topic` (the right it needs: write on it).
    pub fn init_producer_id(
        &self,
        topic: &str,
    ) -> Result<codec::producer_id::ProducerId, ClientError> {
        let response = self.request(
            Api::InitProducerId,
            |fbb| codec::producer_id::init_producer_id_request(fbb, topic).to_vec(),
            std::time::Duration::ZERO,
            true,
        )?;
        codec::producer_id::decode_init_producer_id(&response.header)
            .map_err(|e| ClientError::protocol(format!("init producer id: {e}")))
    }

    /// Adds access control rules (those present already stay); returns
    /// how many were new. Needs alter on the cluster.
    pub fn create_acls(&self, rules: &[crate::acl::AclRule]) -> Result<u32, ClientError> {
        let response = self.request(
            Api::CreateAcls,
            |fbb| codec::security::create_acls_request(fbb, rules).to_vec(),
            std::time::Duration::ZERO,
            true,
        )?;
        verify::<wire::CreateAclsResponse>(&response.header)
            .map(|r| r.created())
            .map_err(|e| ClientError::protocol(format!("create acls: {e}")))
    }

    /// Removes access control rules where they exist; returns how many
    /// did. Needs alter on the cluster.
    pub fn delete_acls(&self, rules: &[crate::acl::AclRule]) -> Result<u32, ClientError> {
        let response = self.request(
            Api::DeleteAcls,
            |fbb| codec::security::delete_acls_request(fbb, rules).to_vec(),
            std::time::Duration::ZERO,
            true,
        )?;
        verify::<wire::DeleteAclsResponse>(&response.header)
            .map(|r| r.deleted())
            .map_err(|e| ClientError::protocol(format!("delete acls: {e}")))
    }

    /// The access control rules that match `filter`. Needs describe on the
    /// cluster.
    pub fn describe_acls(
        &self,
        filter: &codec::security::AclFilter,
    ) -> Result<Vec<crate::acl::AclRule>, ClientError> {
        let response = self.request(
            Api::DescribeAcls,
            |fbb| codec::security::describe_acls_request(fbb, filter).to_vec(),
            std::time::Duration::ZERO,
            true,
        )?;
        codec::security::decode_describe_acls(&response.header)
            .map_err(|e| ClientError::protocol(format!("describe acls: {e}")))
    }

    /// Adds or replaces users (each with a credential made here from its
    /// password: [`crate::scram::Credential::new`]) and removes others.
    /// Returns (upserted, removed). Needs alter on the cluster.
    pub fn alter_users(
        &self,
        upserts: &[(String, crate::scram::Credential)],
        deletions: &[String],
    ) -> Result<(u32, u32), ClientError> {
        let upserts: Vec<(String, String)> = upserts
            .iter()
            .map(|(name, credential)| (name.clone(), credential.to_text()))
            .collect();
        let response = self.request(
            Api::AlterUsers,
            |fbb| codec::security::alter_users_request(fbb, &upserts, deletions).to_vec(),
            std::time::Duration::ZERO,
            true,
        )?;
        verify::<wire::AlterUsersResponse>(&response.header)
            .map(|r| (r.upserted(), r.deleted()))
            .map_err(|e| ClientError::protocol(format!("alter users: {e}")))
    }

    /// The users who may log in, sorted. Needs describe on the cluster.
    pub fn list_users(&self) -> Result<Vec<String>, ClientError> {
        let response = self.request(
            Api::ListUsers,
            |fbb| codec::security::list_users_request(fbb).to_vec(),
            std::time::Duration::ZERO,
            true,
        )?;
        let decoded = verify::<wire::ListUsersResponse>(&response.header)
            .map_err(|e| ClientError::protocol(format!("list users: {e}")))?;
        Ok(decoded
            .users()
            .map(|u| u.iter().map(str::to_string).collect())
            .unwrap_or_default())
    }

    /// An offset of a partition (earliest, latest, or before a time), with
    /// the partition's current offsets. Asks the shard that owns the
    /// partition, on whichever broker stores it.
    pub fn list_offsets(
        &self,
        topic: &str,
        partition: u32,
        spec: OffsetSpec,
        timestamp_ms: u64,
    ) -> Result<(u64, PartitionOffsets), ClientError> {
        let mut fresh = false;
        let mut attempt = 0;
        loop {
            match self.list_offsets_once(topic, partition, spec, timestamp_ms, fresh) {
                Err(error)
                    if !fresh && error.code() == Some(ErrorCode::UnknownTopic)
                        || matches!(
                            error.code(),
                            Some(
                                ErrorCode::NotOwner
                                    | ErrorCode::NotLeader
                                    | ErrorCode::FencedLeaderEpoch
                            )
                        ) && attempt < self.shared.config.retries =>
                {
                    // The placement this client remembered is stale (the
                    // topic moved or was re-created, or its leadership is
                    // changing and the answering broker's Metadata has not
                    // caught up yet): again, from fresh Metadata. Right
                    // after a topic's creation or a failover the first
                    // fresh answer can still name the old leader, so a
                    // leadership error backs off as a producer does; an
                    // unknown topic is tried fresh once, then reported.
                    if fresh {
                        std::thread::sleep(self.shared.config.backoff(attempt));
                        attempt += 1;
                    }
                    fresh = true;
                }
                // A remembered connection that broke (its broker restarted
                // since, on other ports): once more, from fresh Metadata
                // and a new connection. The request reads only, so asking
                // again is safe.
                Err(error) if !fresh && error.is_connection_error() => fresh = true,
                other => return other,
            }
        }
    }

    /// The owning shard's address of a partition, from the remembered
    /// placement unless `fresh` or unknown.
    fn placement(&self, topic: &str, partition: u32, fresh: bool) -> Result<String, ClientError> {
        if !fresh {
            let placements = lock(&self.shared.placements);
            let known = placements
                .get(topic)
                .and_then(|owners| owners.get(partition as usize)?.clone());
            if let Some(address) = known {
                return Ok(address);
            }
        }
        let metadata = self.metadata(&[topic])?;
        let address = self.partition_address(&metadata, topic, partition)?;
        if let Some(described) = metadata.topics.iter().find(|t| t.name == topic) {
            let count = described
                .partitions
                .iter()
                .map(|p| p.partition as usize + 1)
                .max()
                .unwrap_or(0);
            let mut owners = vec![None; count];
            for p in &described.partitions {
                owners[p.partition as usize] = metadata
                    .owner_address(topic, p.partition)
                    .map(|shard| format!("{}:{}", shard.host, shard.port));
            }
            lock(&self.shared.placements).insert(topic.to_string(), owners);
        }
        Ok(address)
    }

    fn list_offsets_once(
        &self,
        topic: &str,
        partition: u32,
        spec: OffsetSpec,
        timestamp_ms: u64,
        fresh: bool,
    ) -> Result<(u64, PartitionOffsets), ClientError> {
        let response = self.call_owner(topic, partition, fresh, Api::ListOffsets, |fbb| {
            codec::list_offsets_request(fbb, topic, partition, spec, timestamp_ms).to_vec()
        })?;
        let decoded = verify::<wire::ListOffsetsResponse>(&response.header)
            .map_err(|e| ClientError::protocol(format!("list offsets: {e}")))?;
        Ok((
            decoded.offset(),
            PartitionOffsets {
                start_offset: decoded.start_offset(),
                flushed_offset: decoded.flushed_offset(),
                end_offset: decoded.end_offset(),
            },
        ))
    }

    /// One request to the shard that owns `topic`-`partition` (from the
    /// remembered placement unless `fresh`), over a connection kept for
    /// the next.
    fn call_owner(
        &self,
        topic: &str,
        partition: u32,
        fresh: bool,
        api: Api,
        header: impl FnOnce(&mut flatbuffers::FlatBufferBuilder<'static>) -> Vec<u8>,
    ) -> Result<connection::ResponseFrame, ClientError> {
        let address = self.placement(topic, partition, fresh)?;
        let mut owners = lock(&self.shared.owners);
        if !owners.contains_key(&address) {
            let conn = self.open(&address)?;
            owners.insert(address.clone(), conn);
        }
        let Some(conn) = owners.get_mut(&address) else {
            return Err(ClientError::protocol("owner connection vanished"));
        };
        let header = header(&mut conn.fbb);
        match conn.call(api, &header, &[]) {
            Ok(response) => Ok(response),
            Err(error) => {
                // A broken connection is not kept for the next call, nor
                // the placement that led to it.
                if error.is_connection_error() {
                    owners.remove(&address);
                    lock(&self.shared.placements).remove(topic);
                }
                Err(error)
            }
        }
    }

    /// Cuts a mirror's copy of `cut.partition` at `cut.offset` on its
    /// leader (failback: where the source's history forked from this
    /// copy's). Retried on a moved or changing leadership; not after a
    /// broken connection (the cut may have been made: the caller looks at
    /// the log's end).
    pub fn truncate_mirror(
        &self,
        cut: &codec::failback::Cut,
    ) -> Result<codec::failback::CutDone, ClientError> {
        let mut attempt = 0;
        let mut fresh = false;
        loop {
            let answer = self.call_owner(
                &cut.topic,
                cut.partition,
                fresh,
                Api::TruncateMirror,
                |fbb| codec::failback::truncate_mirror_request(fbb, cut).to_vec(),
            );
            match answer {
                Ok(response) => {
                    return codec::failback::decode_cut_done(&response.header)
                        .map_err(|e| ClientError::protocol(format!("truncate mirror: {e}")))
                }
                Err(error)
                    if matches!(
                        error.code(),
                        Some(
                            ErrorCode::NotOwner
                                | ErrorCode::NotLeader
                                | ErrorCode::FencedLeaderEpoch
                                | ErrorCode::CoordinatorUnavailable
                        )
                    ) && attempt < self.shared.config.retries =>
                {
                    std::thread::sleep(self.shared.config.backoff(attempt));
                    attempt += 1;
                    fresh = true;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// What broker `broker` keeps in its `.orphaned/` (partition
    /// directories moved aside, never deleted on their own), asked of that
    /// broker; with `purge_older_than_ms`, those moved aside at least that
    /// long ago are deleted first. A broker Metadata does not list is a
    /// usage error naming the live ones.
    pub fn orphaned(
        &self,
        broker: crate::types::BrokerId,
        purge_older_than_ms: Option<u64>,
    ) -> Result<codec::orphans::Orphaned, ClientError> {
        let metadata = self.metadata(&[])?;
        let Some(shard) = metadata
            .brokers
            .iter()
            .find(|b| b.broker_id == broker)
            .and_then(|b| b.shards.first())
        else {
            let live: Vec<String> = metadata
                .brokers
                .iter()
                .map(|b| b.broker_id.to_string())
                .collect();
            return Err(ClientError::Usage(format!(
                "broker {broker} is not live (live: {})",
                live.join(", ")
            )));
        };
        let mut conn = self.open(&format!("{}:{}", shard.host, shard.port))?;
        let header = codec::orphans::orphaned_request(
            &mut conn.fbb,
            purge_older_than_ms.is_some(),
            purge_older_than_ms.unwrap_or(0),
        )
        .to_vec();
        let response = conn.call(Api::Orphaned, &header, &[])?;
        codec::orphans::decode_orphaned(&response.header)
            .map_err(|e| ClientError::protocol(format!("orphaned: {e}")))
    }

    /// Makes the ordinary topic `topic` (whose id must be `topic_id`) a
    /// mirror's copy recording `mirror_source` (failback's first step): it
    /// refuses ordinary produces from then on. Returns what it records.
    pub fn make_mirror(
        &self,
        topic: &str,
        mirror_source: &str,
        topic_id: &str,
    ) -> Result<String, ClientError> {
        lock(&self.shared.placements).remove(topic);
        let response = self.request(
            Api::MakeMirror,
            |fbb| {
                codec::failback::make_mirror_request(fbb, topic, mirror_source, topic_id).to_vec()
            },
            std::time::Duration::ZERO,
            true,
        )?;
        let decoded = verify::<wire::MakeMirrorResponse>(&response.header)
            .map_err(|e| ClientError::protocol(format!("make mirror: {e}")))?;
        Ok(decoded.mirror_source().unwrap_or_default().to_string())
    }

    /// The address of the shard that owns a partition (shard-aware routing);
    /// falls back to the first bootstrap address when metadata does not say.
    pub fn owner_address(&self, metadata: &Metadata, topic: &str, partition: u32) -> String {
        match metadata.owner_address(topic, partition) {
            Some(shard) => format!("{}:{}", shard.host, shard.port),
            None => self.shared.bootstrap[0].clone(),
        }
    }

    /// The address of the shard that owns a partition, or why there is
    /// none: [`ClientError::PartitionUnavailable`] when Metadata does not
    /// list the broker that stores it (it is down; retriable), a usage
    /// error for a topic or partition Metadata does not have.
    pub fn partition_address(
        &self,
        metadata: &Metadata,
        topic: &str,
        partition: u32,
    ) -> Result<String, ClientError> {
        if let Some(shard) = metadata.owner_address(topic, partition) {
            return Ok(format!("{}:{}", shard.host, shard.port));
        }
        let placement = metadata
            .topics
            .iter()
            .find(|t| t.name == topic)
            .and_then(|t| t.partitions.iter().find(|p| p.partition == partition));
        match placement {
            Some(placement) => Err(ClientError::PartitionUnavailable {
                topic: topic.to_string(),
                partition,
                broker_id: placement.broker_id,
            }),
            // A broker that answered without the topic (UNKNOWN_TOPIC comes
            // as an error first); nothing better to try than the bootstrap.
            None => Ok(self.shared.bootstrap[0].clone()),
        }
    }

    /// A client for one group member's requests (join, heartbeats,
    /// claims, commits), connected to a broker of the member's own.
    ///
    /// Any broker serves any group (the group's state is in etcd), but all
    /// of them used to go to the first bootstrap broker, whose one control
    /// thread served every heartbeat of the cluster (issue 27, item 7).
    /// Each member now picks one of the live brokers at random — not by
    /// the group's name, so that one large group spreads too — and falls
    /// back to the others, then the bootstrap list, as any client does.
    /// With one live broker known, it is this client itself.
    pub fn group_home(&self, topics: &[&str]) -> Result<Client, ClientError> {
        if lock(&self.shared.known_brokers).is_empty() {
            // Only to learn the live brokers; a missing topic is the
            // member's business, reported where it subscribes.
            let _ = self.metadata(topics);
        }
        let mut brokers = lock(&self.shared.known_brokers).clone();
        brokers.sort();
        brokers.dedup();
        if brokers.len() <= 1 {
            return Ok(self.clone());
        }
        use std::hash::BuildHasher;
        let pick = std::collections::hash_map::RandomState::new().hash_one(std::process::id())
            as usize
            % brokers.len();
        brokers.rotate_left(pick);
        for address in &self.shared.bootstrap {
            if !brokers.contains(address) {
                brokers.push(address.clone());
            }
        }
        Client::with_config(&brokers.join(","), self.shared.config.clone())
    }

    /// Addresses to reconnect to: the bootstrap list, then shard 0 of each
    /// broker the last Metadata listed, so that a client whose bootstrap
    /// broker died goes on through the others.
    fn reconnect_addresses(&self) -> Vec<String> {
        let mut addresses = self.shared.bootstrap.clone();
        for known in lock(&self.shared.known_brokers).iter() {
            if !addresses.contains(known) {
                addresses.push(known.clone());
            }
        }
        if let Some(failed) = lock(&self.shared.failed).as_ref() {
            if let Some(at) = addresses.iter().position(|a| a == failed) {
                let failed = addresses.remove(at);
                addresses.push(failed);
            }
        }
        addresses
    }
}

/// The id Metadata gives `topic` (empty if it gives none: an older broker).
pub(crate) fn topic_id(metadata: &Metadata, topic: &str) -> String {
    metadata
        .topics
        .iter()
        .find(|t| t.name == topic)
        .map(|t| t.id.clone())
        .unwrap_or_default()
}

/// `Ok` unless `metadata` names `topic` under an id other than `known`
/// (an empty id on either side checks nothing).
pub(crate) fn check_topic_id(
    metadata: &Metadata,
    topic: &str,
    known: &str,
) -> Result<(), ClientError> {
    let now = topic_id(metadata, topic);
    if known.is_empty() || now.is_empty() || now == known {
        return Ok(());
    }
    Err(ClientError::TopicRecreated {
        topic: topic.to_string(),
        old_id: known.to_string(),
        new_id: now,
    })
}

/// A connection to the first of `bootstrap` that answers.
fn connect_any(bootstrap: &[String], config: &ClientConfig) -> Result<Connection, ClientError> {
    let mut tried = Vec::new();
    for address in bootstrap {
        match Connection::connect_with(address, config) {
            Ok(conn) => return Ok(conn),
            // A login refused by one broker is refused by all of them:
            // trying each would only count more failures against us.
            Err(e) if e.is_login_failure() => return Err(e),
            Err(e) => tried.push((address.clone(), e)),
        }
    }
    // One address: its own error, as precise as it was.
    if tried.len() == 1 {
        if let Some((_, error)) = tried.pop() {
            return Err(error);
        }
    }
    Err(ClientError::NoBroker {
        tried: tried.into_iter().map(|(a, e)| (a, e.to_string())).collect(),
    })
}

// What the docs above promise: a Client moves between threads.
const _: fn() = || {
    fn send<T: Send>() {}
    fn shared<T: Send + Sync + Clone>() {}
    shared::<Client>();
    send::<Producer>();
    send::<Consumer>();
    send::<TopicConsumer>();
    shared::<Waker>();
};
