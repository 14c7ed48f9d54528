//! The messages that cross threads: what a connection's shard asks of
//! another shard ([`ShardMsg`]), what a shard asks of the control thread
//! ([`ControlMsg`], with the consumer group requests), and what goes back
//! to a connection on another shard ([`SendableResponse`]).
//!
//! They live here, apart from their senders and receivers, so that the
//! planes import them and not each other: `handler/`, `control/` and
//! `shard/` all depend on this file, and it depends on none of them (it
//! names only the registries' records and the wire's types). Redpanda keeps
//! its cross-shard messages in their own headers for the same reason.

use coordinator::groups::GroupError;
use coordinator::registry::{BrokerRecord, RegistryError, TopicRecord};
use coordinator::replicas::{PartitionUpdate, UpdateOutcome, Versioned};
use protocol::codec::groups::{GroupDescription, GroupView, Joined, OffsetCommit};
use protocol::codec::operations::{ElectLeaders, Elected, PartitionsCreated, Reassigned};
use protocol::codec::TopicSettings;
use protocol::types::{BrokerId, PartitionId};
use protocol::ErrorCode;
use std::os::fd::OwnedFd;

/// A response that can cross to another shard (no `Rc`): a forwarded
/// request's answer, its file range as a duplicated descriptor so the
/// requesting shard still sends it with sendfile.
#[derive(Debug)]
pub struct SendableResponse {
    /// The request's api.
    pub api: u16,
    /// `ErrorCode` as a number (0 = success).
    pub error: u16,
    /// Flatbuffer header bytes.
    pub header: Vec<u8>,
    /// A file range to send after the header: descriptor, position, length.
    pub fd: Option<(OwnedFd, u64, u32)>,
}

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
        /// A replicated topic's partition states, learned before it is
        /// opened so that its copies take their roles the moment they are
        /// visible (no request sees a copy without one).
        states: Vec<(PartitionId, Versioned)>,
        /// Done (or why not).
        done: flume::Sender<Result<(), crate::topic_error::TopicError>>,
    },
    /// A topic was removed from the registry: drop your partitions and their files.
    TopicDeleted {
        /// The topic.
        name: String,
        /// The deleted record's id: a topic of that name with another id is
        /// another topic, and stays (empty: whichever it is).
        id: String,
        /// Done, or which directories could not be moved aside.
        done: flume::Sender<Result<(), crate::storage::sweep::DeleteError>>,
    },
    /// A topic the registry no longer lists, with no delete seen: forget it
    /// and move its partition directories aside (never delete them).
    TopicOrphaned {
        /// The topic.
        name: String,
        /// Done: how many directories were moved aside.
        done: flume::Sender<usize>,
    },
    /// A topic's record changed (a reassignment began or ended): open the
    /// copies newly assigned to you, delete those no longer, and take the
    /// new replica sets (a topic with one copy becomes replicated).
    TopicChanged {
        /// The record now.
        topic: TopicRecord,
        /// Done (or why not).
        done: flume::Sender<Result<(), crate::topic_error::TopicError>>,
    },
    /// Where your copies of a topic's partitions end, and the high
    /// watermark each last learned (an unclean election's report).
    ReplicaPositions {
        /// The topic's id.
        topic_id: String,
        /// The partitions asked about.
        partitions: Vec<PartitionId>,
        /// Those held here: partition, log end, high watermark.
        reply: flume::Sender<Vec<(PartitionId, u64, u64)>>,
    },
    /// The live brokers changed; here they are, sorted by id.
    Brokers(Vec<BrokerRecord>),
    /// New users and rules were published: end the sessions they no
    /// longer admit (`auth/sessions.rs`).
    SecurityChanged,
    /// Replicated partitions' states, newer than the shard may know.
    PartitionStates {
        /// Their topic's id.
        topic_id: String,
        /// By partition.
        states: Vec<(PartitionId, Versioned)>,
    },
    /// Graceful stop: stop accepting, flush everything, exit.
    Stop,
}

/// What a shard asks of the control thread.
pub enum ControlMsg {
    /// Register a topic and open its partitions on every shard.
    CreateTopic {
        /// The name (already validated by the handler).
        name: String,
        /// Partition count (already validated).
        partitions: u32,
        /// Overrides (already validated against the broker's limits).
        overrides: TopicSettings,
        /// A mirror's target topic: where it is mirrored from.
        mirror_source: Option<String>,
        /// The record as registered, or why not.
        reply: flume::Sender<Result<TopicRecord, ControlError>>,
    },
    /// Raise a topic's partition count (`ringlog topic alter --partitions`).
    CreatePartitions {
        /// The topic (name validated by the handler).
        name: String,
        /// The new count (validated against the broker's limit).
        partitions: u32,
        /// The count now and the new partitions' brokers, or why not.
        reply: flume::Sender<Result<PartitionsCreated, ControlError>>,
    },
    /// Change a topic's settings (`ringlog topic alter --config`).
    AlterTopicConfig {
        /// The topic (name validated by the handler).
        name: String,
        /// Each setting and its new value (0: back to the default),
        /// checked against the broker's ranges by the handler.
        changes: Vec<(protocol::codec::topic_config::Alterable, u64)>,
        /// The record now, or why not.
        reply: flume::Sender<Result<TopicRecord, ControlError>>,
    },
    /// An idempotent producer's id (InitProducerId): the next of the
    /// control thread's block, a new block taken from the registry when
    /// it is used up.
    ProducerId {
        /// The id, or why none.
        reply: flume::Sender<Result<i64, ControlError>>,
    },
    /// A Kafka group's coordinator, state or offsets
    /// ([`coordinator::kafka_groups`]).
    KafkaGroup {
        /// What to do.
        op: coordinator::kafka_groups::KafkaGroupOp,
        /// The answer, or why none.
        reply: flume::Sender<
            Result<
                coordinator::kafka_groups::KafkaGroupAnswer,
                coordinator::registry::RegistryError,
            >,
        >,
    },
    /// End mirroring of a mirror's target topic (`ringlog mirror promote`).
    PromoteMirror {
        /// The topic (name validated by the handler).
        name: String,
        /// Where each partition's copy ends, as the client read them
        /// (recorded for a failback; empty: not recorded).
        ends: Vec<u64>,
        /// What it was mirrored from, or why not.
        reply: flume::Sender<Result<String, ControlError>>,
    },
    /// Make an ordinary topic a mirror's copy (failback's first step).
    MakeMirror {
        /// The topic (name validated by the handler).
        name: String,
        /// What it is to record (validated by the handler).
        source: String,
        /// The id it must have.
        topic_id: String,
        /// What it records, or why not.
        reply: flume::Sender<Result<String, ControlError>>,
    },
    /// Change the users or the access control rules (AlterUsers,
    /// CreateAcls, DeleteAcls; already validated by the handler). The
    /// control thread publishes the new set to every shard before it
    /// answers.
    Security {
        /// The change.
        change: coordinator::security::SecurityChange,
        /// What it did, or why not.
        reply: flume::Sender<Result<coordinator::security::Changed, ControlError>>,
    },
    /// Unregister a topic and drop its partitions on every shard.
    DeleteTopic {
        /// The name.
        name: String,
        /// Done, or why not.
        reply: flume::Sender<Result<(), ControlError>>,
    },
    /// Read the topic registry now and apply what changed (a request named
    /// a topic this broker has not heard of from the watch yet).
    Refresh {
        /// When the request was made: a registry read that started later
        /// answers it too, so a burst of such requests costs one read.
        asked_at: std::time::Instant,
        /// Done (applied, or the registry could not be read).
        reply: flume::Sender<()>,
    },
    /// A leader's ISR change (a compare-and-set on the partition's state).
    UpdatePartition {
        /// The topic's id.
        topic_id: String,
        /// The change.
        update: PartitionUpdate,
        /// Written, or someone else's change came first.
        reply: flume::Sender<Result<UpdateOutcome, ControlError>>,
    },
    /// Preferred or unclean leader elections (`ringlog partitions
    /// elect-leaders`, `elect --unclean`).
    ElectLeaders {
        /// What to elect (checked by the handler).
        request: ElectLeaders,
        /// Each partition's outcome, or why none.
        reply: flume::Sender<Result<Vec<Elected>, ControlError>>,
    },
    /// Start moving a partition's copies (`ringlog partitions reassign`).
    Reassign {
        /// The topic.
        topic: String,
        /// The partition.
        partition: PartitionId,
        /// The target replicas, the preferred leader first.
        replicas: Vec<BrokerId>,
        /// The move as begun, or why not.
        reply: flume::Sender<Result<Reassigned, ControlError>>,
    },
    /// A leader found every replica of its partition's target in sync:
    /// finish the move (the record's replicas become the target).
    CompleteReassignment {
        /// The topic.
        topic: String,
        /// Its id (a topic created again since is not finished).
        topic_id: String,
        /// The partition.
        partition: PartitionId,
        /// The target the leader saw.
        target: Vec<BrokerId>,
    },
    /// A consumer group request.
    Group {
        /// The request, checked by the handler.
        request: GroupRequest,
        /// The answer.
        reply: GroupReply,
    },
}

/// Why the control thread refused or failed an operation, as a wire code
/// and words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlError {
    /// The code the client gets.
    pub code: ErrorCode,
    /// What happened.
    pub message: String,
}

impl ControlError {
    /// An error with this code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ControlError {
        ControlError {
            code,
            message: message.into(),
        }
    }
}

impl From<RegistryError> for ControlError {
    fn from(error: RegistryError) -> ControlError {
        let code = match &error {
            RegistryError::TopicExists { .. } => ErrorCode::TopicAlreadyExists,
            RegistryError::UnknownTopic { .. } => ErrorCode::UnknownTopic,
            RegistryError::Unavailable { .. } => ErrorCode::CoordinatorUnavailable,
            RegistryError::ClusterMismatch(_) => ErrorCode::ClusterIdMismatch,
            RegistryError::NotServed { .. } => ErrorCode::NotYetServed,
            _ => ErrorCode::StorageFailed,
        };
        ControlError::new(code, error.to_string())
    }
}

/// A consumer group request, checked by the handler.
#[derive(Debug)]
pub enum GroupRequest {
    /// JoinGroup.
    Join {
        /// The group.
        group: String,
        /// The member id's prefix.
        member_name: String,
        /// Subscribed topics.
        topics: Vec<String>,
        /// Clamped to the broker's limits.
        session_timeout_ms: u32,
    },
    /// Heartbeat (a long-poll).
    Heartbeat {
        /// The group.
        group: String,
        /// The member.
        member_id: String,
        /// Its session.
        session_id: u64,
        /// The generation the member knows.
        generation: u64,
        /// How long to wait for a different one.
        max_wait_ms: u32,
        /// An unchanged view may be answered with its generation only.
        brief_ok: bool,
    },
    /// ClaimPartitions.
    Claim {
        /// The group.
        group: String,
        /// The member.
        member_id: String,
        /// Its session.
        session_id: u64,
        /// The view's revision.
        revision: u64,
        /// The topic.
        topic: String,
        /// The partitions.
        partitions: Vec<PartitionId>,
    },
    /// ReleasePartitions.
    Release {
        /// The group.
        group: String,
        /// The member.
        member_id: String,
        /// Its session.
        session_id: u64,
        /// The topic.
        topic: String,
        /// The partitions.
        partitions: Vec<PartitionId>,
    },
    /// CommitOffsets (an empty member id: reset an empty group).
    Commit {
        /// The group.
        group: String,
        /// The member, or empty.
        member_id: String,
        /// Its session (0 with an empty member id).
        session_id: u64,
        /// The offsets.
        offsets: Vec<OffsetCommit>,
    },
    /// LeaveGroup.
    Leave {
        /// The group.
        group: String,
        /// The member.
        member_id: String,
        /// Its session.
        session_id: u64,
    },
    /// DescribeGroup.
    Describe {
        /// The group.
        group: String,
    },
    /// ListGroups.
    List,
}

/// A consumer group answer.
#[derive(Debug)]
pub enum GroupAnswer {
    /// JoinGroup.
    Joined(Joined),
    /// Heartbeat.
    View(GroupView),
    /// ClaimPartitions, ReleasePartitions, LeaveGroup.
    Done,
    /// CommitOffsets: how many.
    Committed(u32),
    /// DescribeGroup.
    Described(GroupDescription),
    /// ListGroups.
    Groups(Vec<String>),
}

/// Where an answer goes.
pub type GroupReply = flume::Sender<Result<GroupAnswer, ControlError>>;

impl From<GroupError> for ControlError {
    fn from(error: GroupError) -> ControlError {
        let code = match &error {
            GroupError::UnknownMember { .. } => ErrorCode::UnknownMember,
            GroupError::ClaimConflict { .. } => ErrorCode::ClaimConflict,
            GroupError::NotPartitionOwner { .. } => ErrorCode::NotPartitionOwner,
            GroupError::GroupNotEmpty { .. } => ErrorCode::GroupNotEmpty,
            GroupError::ForeignCluster { .. } => ErrorCode::ClusterIdMismatch,
            GroupError::InvalidRequest { .. } => ErrorCode::InvalidRequest,
            _ => ErrorCode::CoordinatorUnavailable,
        };
        ControlError::new(code, error.to_string())
    }
}
