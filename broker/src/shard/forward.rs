//! Messages between shards.
//!
//! A request for a partition owned by another shard travels to the owner as
//! a copy of its frame; the owner runs the same handler and sends the
//! response back. A fetch's file range crosses as a duplicated file
//! descriptor, so the requesting shard still sends it with sendfile: the
//! forwarded path costs one copy of the *request* and a `dup`, not a copy of
//! the data. The control thread sends topic changes (created/deleted) to
//! every shard the same way.

use crate::handler::SendableResponse;
use coordinator::registry::{BrokerRecord, TopicRecord};

/// What one shard asks of another.
pub enum ShardMsg {
    /// A request frame for a partition the receiver owns.
    Request {
        /// The frame's fields.
        api: u16,
        /// Api version.
        version: u16,
        /// The client's request id.
        request_id: u32,
        /// The flatbuffer header.
        header: Vec<u8>,
        /// The payload (a produce's message set).
        payload: Vec<u8>,
        /// Where the response goes; dropped unanswered when there is none.
        reply: flume::Sender<SendableResponse>,
    },
    /// A topic was added to the registry: open the partitions you own.
    TopicCreated {
        /// The topic.
        topic: TopicRecord,
        /// Done (or why not).
        done: flume::Sender<Result<(), String>>,
    },
    /// A topic was removed from the registry: drop your partitions and their files.
    TopicDeleted {
        /// The topic.
        name: String,
        /// The deleted record's id: a topic of that name with another id is
        /// another topic, and stays (empty: whichever it is).
        id: String,
        /// Done, or which directories could not be moved aside.
        done: flume::Sender<Result<(), String>>,
    },
    /// A topic the registry no longer lists, with no delete seen: forget it
    /// and move its partition directories aside (never delete them).
    TopicOrphaned {
        /// The topic.
        name: String,
        /// Done: how many directories were moved aside.
        done: flume::Sender<usize>,
    },
    /// The live brokers changed; here they are, sorted by id.
    Brokers(Vec<BrokerRecord>),
    /// Graceful stop: stop accepting, flush everything, exit.
    Stop,
}
