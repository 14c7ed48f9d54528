//! A blocking, std-only Rust client for ringlog (no async runtime, no glommio).
//!
//! - [`Client`]: bootstrap connection, metadata and admin requests.
//! - [`Producer`]: batching by count / bytes / linger, random or key-hash
//!   partitioning, pipelined requests, ack modes.
//! - [`Consumer`]: one partition from an offset; verifies CRCs, resumes after
//!   chunks that end mid-message, seeks and rewinds.
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

mod connection;
mod consumer;
mod group;
mod producer;

pub use crate::codec::groups::{
    GroupDescription, GroupMemberInfo, GroupPartitionInfo, GroupTopicInfo, GroupView, Joined,
    OffsetCommit,
};
pub use crate::codec::{
    AckMode, Metadata, OffsetSpec, PartitionOffsets, TopicMetadata, TopicSettings,
};
pub use connection::{read_response, BrokerHello, Connection, ResponseFrame, REQUEST_TIMEOUT};
pub use consumer::{Consumer, OutOfRange, OwnedMessage};
pub use group::{GroupConfig, GroupConsumer, GroupMessage, StartFrom};
pub use producer::{partition_for_key, Partitioner, Producer, ProducerConfig};

use crate::codec::{self, verify};
use crate::frame::Api;
use crate::{wire, ErrorCode};
use std::cell::RefCell;

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
    /// A fetched message failed its checks.
    #[error("corrupt message in {partition}: {source}")]
    Corrupt {
        /// `topic-partition`.
        partition: String,
        /// What was wrong.
        source: crate::message::MessageError,
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
    /// The partition's broker is not live; without replication (as in the
    /// paper) the partition is unavailable until that broker is back.
    #[error("{topic}-{partition} is stored by broker {broker_id}, which is down: the partition is unavailable until that broker is back (there is no replication yet)")]
    PartitionUnavailable {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The broker that stores it.
        broker_id: u32,
    },
}

impl ClientError {
    fn protocol(message: impl Into<String>) -> Self {
        ClientError::Protocol(message.into())
    }

    /// The broker's error code, when this is a broker error.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Broker { code, .. } => Some(*code),
            _ => None,
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
            ClientError::Broker { code, .. } => matches!(
                code,
                ErrorCode::Overloaded
                    | ErrorCode::ShuttingDown
                    | ErrorCode::NotOwner
                    | ErrorCode::CoordinatorUnavailable
                    | ErrorCode::StorageUnavailable
            ),
            _ => false,
        }
    }
}

/// A connection for metadata and admin requests, opened to the first
/// reachable bootstrap address, and connections to the shards that own
/// partitions, opened on demand for partition requests (ListOffsets).
///
/// `Send` but not `Sync`: it keeps its connections in `RefCell`s and uses
/// them one request at a time. Give each thread its own `Client` (one TCP
/// connection each); producers and consumers built from it open their own
/// connections and may move to other threads.
pub struct Client {
    conn: RefCell<Connection>,
    bootstrap: Vec<String>,
    owners: RefCell<std::collections::HashMap<String, Connection>>,
}

impl Client {
    /// Connects to the first reachable address of a comma-separated list.
    pub fn connect(brokers: &str) -> Result<Client, ClientError> {
        let bootstrap: Vec<String> = brokers
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        if bootstrap.is_empty() {
            return Err(ClientError::Usage("no broker address given".into()));
        }
        let mut tried = Vec::new();
        for address in &bootstrap {
            match Connection::connect(address) {
                Ok(conn) => {
                    return Ok(Client {
                        conn: RefCell::new(conn),
                        bootstrap,
                        owners: RefCell::new(std::collections::HashMap::new()),
                    })
                }
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

    /// How long a request may wait for its response (default 30 s, beyond
    /// a heartbeat's long-poll); past it the request fails with
    /// [`ClientError::Timeout`].
    pub fn set_request_timeout(&self, timeout: std::time::Duration) -> Result<(), ClientError> {
        self.conn.borrow_mut().set_request_timeout(timeout)?;
        for conn in self.owners.borrow_mut().values_mut() {
            conn.set_request_timeout(timeout)?;
        }
        Ok(())
    }

    /// The bootstrap addresses.
    pub fn bootstrap(&self) -> &[String] {
        &self.bootstrap
    }

    /// What the bootstrap broker said in the handshake (its id, shards and
    /// build).
    pub fn hello(&self) -> BrokerHello {
        self.conn.borrow().hello().clone()
    }

    /// Every topic (empty `topics`) or the named ones.
    pub fn metadata(&self, topics: &[&str]) -> Result<Metadata, ClientError> {
        let mut conn = self.conn.borrow_mut();
        let header = codec::metadata_request(&mut conn.fbb, topics).to_vec();
        let response = conn.call(Api::Metadata, &header, &[])?;
        let decoded = verify::<wire::MetadataResponse>(&response.header)
            .map_err(|e| ClientError::protocol(format!("metadata: {e}")))?;
        Ok(codec::decode_metadata(decoded))
    }

    /// Creates a topic.
    pub fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        settings: &TopicSettings,
    ) -> Result<TopicMetadata, ClientError> {
        let mut conn = self.conn.borrow_mut();
        let header =
            codec::create_topic_request(&mut conn.fbb, name, partitions, settings).to_vec();
        let response = conn.call(Api::CreateTopic, &header, &[])?;
        let decoded = verify::<wire::CreateTopicResponse>(&response.header)
            .map_err(|e| ClientError::protocol(format!("create topic: {e}")))?;
        let topic = decoded
            .topic()
            .ok_or_else(|| ClientError::protocol("create topic: no topic in response"))?;
        Ok(codec::decode_topic(topic))
    }

    /// Deletes a topic and its data.
    pub fn delete_topic(&self, name: &str) -> Result<(), ClientError> {
        let mut conn = self.conn.borrow_mut();
        let header = codec::delete_topic_request(&mut conn.fbb, name).to_vec();
        conn.call(Api::DeleteTopic, &header, &[])?;
        Ok(())
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
        let metadata = self.metadata(&[topic])?;
        let address = self.owner_address(&metadata, topic, partition);
        let mut owners = self.owners.borrow_mut();
        if !owners.contains_key(&address) {
            let conn = Connection::connect(&address)?;
            owners.insert(address.clone(), conn);
        }
        let Some(conn) = owners.get_mut(&address) else {
            return Err(ClientError::protocol("owner connection vanished"));
        };
        let header =
            codec::list_offsets_request(&mut conn.fbb, topic, partition, spec, timestamp_ms)
                .to_vec();
        let response = match conn.call(Api::ListOffsets, &header, &[]) {
            Ok(response) => response,
            Err(error) => {
                // A broken connection is not kept for the next call.
                if !matches!(error, ClientError::Broker { .. }) {
                    owners.remove(&address);
                }
                return Err(error);
            }
        };
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

    /// The address of the shard that owns a partition (shard-aware routing);
    /// falls back to the bootstrap address when metadata does not say.
    pub fn owner_address(&self, metadata: &Metadata, topic: &str, partition: u32) -> String {
        match metadata.owner_address(topic, partition) {
            Some(shard) => format!("{}:{}", shard.host, shard.port),
            None => self.conn.borrow().address().to_string(),
        }
    }
}

// What the docs above promise: a Client moves between threads.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Client>();
    send::<Producer>();
    send::<Consumer>();
};
