//! Typed error codes carried in every response frame.
//!
//! The numbers are part of the wire format: they are never renumbered, and a
//! retired code is never reused (PROTOCOL.md lists them).

use std::fmt;

/// A response's error code. `None` (0) means success.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
#[non_exhaustive]
pub enum ErrorCode {
    /// Success.
    None = 0,
    /// The frame's api key is not one this broker knows.
    UnknownApi = 1,
    /// The protocol or api version is not supported.
    UnsupportedVersion = 2,
    /// The frame or its flatbuffer header failed to decode or verify.
    InvalidRequest = 3,
    /// The frame is larger than the broker accepts.
    FrameTooLarge = 4,
    /// A request other than Handshake arrived before the handshake.
    HandshakeRequired = 5,
    /// The topic name breaks the naming rules.
    InvalidTopicName = 6,
    /// No such topic.
    UnknownTopic = 7,
    /// The topic exists but has no such partition.
    UnknownPartition = 8,
    /// CreateTopic for a name that is taken.
    TopicAlreadyExists = 9,
    /// A topic configuration value is out of its allowed range.
    InvalidConfig = 10,
    /// A fetch or seek outside [start_offset, end_offset].
    OffsetOutOfRange = 11,
    /// A produced message failed its length or CRC check.
    CorruptMessage = 12,
    /// A produced message is larger than the broker's limit.
    MessageTooLarge = 13,
    /// The partition's storage failed (an I/O or fsync error); it takes no more writes.
    StorageFailed = 14,
    /// The broker is stopping.
    ShuttingDown = 15,
    /// Too many requests in flight on this connection or shard.
    Overloaded = 16,
    /// A bug in the broker; the message says what.
    Internal = 17,
    /// The partition is stored by another broker (named in the
    /// ErrorResponse's `owner_broker_id`): refresh metadata and ask it.
    NotOwner = 18,
    /// The broker could not reach its coordination service (etcd) in time;
    /// produce and fetch go on, topic and group changes wait. Retry.
    CoordinatorUnavailable = 19,
    /// The request needs a cluster (a broker started with `--etcd`), and
    /// this broker runs standalone: consumer groups, for one.
    ClusterRequired = 20,
    /// The member's session expired (or it never joined): join again.
    UnknownMember = 21,
    /// A claim lost: the group changed since the view it was computed from,
    /// or a partition still has an owner. Release everything, back off, retry.
    ClaimConflict = 22,
    /// An offset commit for a partition the member does not own.
    NotPartitionOwner = 23,
    /// Offsets of a group cannot be reset while it has live members.
    GroupNotEmpty = 24,
    /// The partition refuses writes for a moment after a transient storage
    /// failure (disk full, out of file descriptors or memory). Nothing of
    /// this request was stored; retry after a back-off.
    StorageUnavailable = 25,
    /// The broker's data directory belongs to another cluster than the
    /// registry (etcd) it reaches now holds — a new or wiped etcd, a restore,
    /// a wrong `--cluster`. It serves produce and fetch of the partitions it
    /// has, and refuses topic and group changes until an operator decides
    /// (the message says how). Not retriable by waiting alone.
    ClusterIdMismatch = 26,
    /// A Produce or Fetch named the topic by an id it no longer has: the
    /// topic was deleted and created again under the same name. Offsets
    /// and batches of the old topic do not apply; nothing was read or
    /// written.
    UnknownTopicId = 27,
    /// This broker holds a copy of the partition but is not its leader:
    /// refresh Metadata (the leader is in `owner_broker_id` when known).
    NotLeader = 28,
    /// The request's leader epoch is older than the partition's: a new
    /// leader was elected since. Refresh Metadata and send it there.
    FencedLeaderEpoch = 29,
    /// An acks=all produce while fewer replicas than the topic's
    /// `min_insync_replicas` are in sync; nothing was appended. Retriable.
    NotEnoughReplicas = 30,
    /// The request's leader epoch is newer than this broker knows: it has
    /// not heard of the election yet. Retry.
    UnknownLeaderEpoch = 31,
    /// An election that cannot be held: the preferred replica is not live
    /// or not in sync, or (unclean) the partition still has a live leader
    /// or in-sync replica, or this broker holds no copy.
    ElectionNotPossible = 32,
    /// A reassignment's replica set is not a set of distinct live brokers,
    /// or is smaller than the topic's `min_insync_replicas`.
    InvalidReplicas = 33,
    /// An acks=all produce was appended on the leader, but the leadership
    /// moved (or the leader's storage failed) before every in-sync replica
    /// had it: the messages may or may not be kept. Retriable; a resend
    /// may store them twice (at least once).
    NotEnoughReplicasAfterAppend = 34,
    /// The partition's only copy is missing from the broker that stores
    /// it: its data directory was wiped or replaced since the partition
    /// was created. Nothing is served or written (so no offset is ever
    /// reused) until an operator restores the data or accepts the loss.
    /// Not retriable.
    DataLost = 35,
    /// The partition is a mirror's copy of another cluster's (the message
    /// names the source): only the mirror writes it, at the source's
    /// offsets, until the topic is promoted. Not retriable.
    MirroredPartition = 36,
    /// The broker needs a login before this request: a Handshake without
    /// one (the message names the mechanisms it takes), or a request sent
    /// while a login is under way. Not retriable as it is.
    AuthenticationRequired = 37,
    /// The login failed: wrong user name or password (which one is not
    /// said), a mechanism the broker does not take, a malformed exchange,
    /// or too many failed logins from the client's address. The broker
    /// closes the connection after a short delay.
    AuthenticationFailed = 38,
    /// The connection's principal may not do this: the message names the
    /// operation and the resource. Not retriable as it is.
    AuthorizationFailed = 39,
    /// An idempotent producer's batch does not follow its last one on the
    /// partition (the message names the sequence expected): an earlier
    /// batch was not stored. Nothing was stored; send the missing batches
    /// first, or start a new epoch at sequence 0.
    OutOfOrderSequence = 40,
    /// An idempotent producer's batch carries an epoch older than one the
    /// partition has stored for its producer id: it is fenced. Nothing was
    /// stored. Not retriable as it is.
    InvalidProducerEpoch = 41,
    /// A topic change (CreateTopic, CreatePartitions, a reassignment, a
    /// settings change) is stored in the cluster, but live brokers had not
    /// applied it when the broker stopped waiting (the message names
    /// them). The change stands; retry what needs it.
    NotYetServed = 42,
}

impl ErrorCode {
    /// Every code, in numeric order.
    pub const ALL: [ErrorCode; 43] = [
        ErrorCode::None,
        ErrorCode::UnknownApi,
        ErrorCode::UnsupportedVersion,
        ErrorCode::InvalidRequest,
        ErrorCode::FrameTooLarge,
        ErrorCode::HandshakeRequired,
        ErrorCode::InvalidTopicName,
        ErrorCode::UnknownTopic,
        ErrorCode::UnknownPartition,
        ErrorCode::TopicAlreadyExists,
        ErrorCode::InvalidConfig,
        ErrorCode::OffsetOutOfRange,
        ErrorCode::CorruptMessage,
        ErrorCode::MessageTooLarge,
        ErrorCode::StorageFailed,
        ErrorCode::ShuttingDown,
        ErrorCode::Overloaded,
        ErrorCode::Internal,
        ErrorCode::NotOwner,
        ErrorCode::CoordinatorUnavailable,
        ErrorCode::ClusterRequired,
        ErrorCode::UnknownMember,
        ErrorCode::ClaimConflict,
        ErrorCode::NotPartitionOwner,
        ErrorCode::GroupNotEmpty,
        ErrorCode::StorageUnavailable,
        ErrorCode::ClusterIdMismatch,
        ErrorCode::UnknownTopicId,
        ErrorCode::NotLeader,
        ErrorCode::FencedLeaderEpoch,
        ErrorCode::NotEnoughReplicas,
        ErrorCode::UnknownLeaderEpoch,
        ErrorCode::ElectionNotPossible,
        ErrorCode::InvalidReplicas,
        ErrorCode::NotEnoughReplicasAfterAppend,
        ErrorCode::DataLost,
        ErrorCode::MirroredPartition,
        ErrorCode::AuthenticationRequired,
        ErrorCode::AuthenticationFailed,
        ErrorCode::AuthorizationFailed,
        ErrorCode::OutOfOrderSequence,
        ErrorCode::InvalidProducerEpoch,
        ErrorCode::NotYetServed,
    ];

    /// The code for a wire number; unknown numbers map to `None` in the `Err`.
    pub fn from_u16(value: u16) -> Result<ErrorCode, u16> {
        ErrorCode::ALL
            .iter()
            .copied()
            .find(|code| *code as u16 == value)
            .ok_or(value)
    }

    /// A stable SCREAMING_SNAKE name, as PROTOCOL.md spells it.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::None => "NONE",
            ErrorCode::UnknownApi => "UNKNOWN_API",
            ErrorCode::UnsupportedVersion => "UNSUPPORTED_VERSION",
            ErrorCode::InvalidRequest => "INVALID_REQUEST",
            ErrorCode::FrameTooLarge => "FRAME_TOO_LARGE",
            ErrorCode::HandshakeRequired => "HANDSHAKE_REQUIRED",
            ErrorCode::InvalidTopicName => "INVALID_TOPIC_NAME",
            ErrorCode::UnknownTopic => "UNKNOWN_TOPIC",
            ErrorCode::UnknownPartition => "UNKNOWN_PARTITION",
            ErrorCode::TopicAlreadyExists => "TOPIC_ALREADY_EXISTS",
            ErrorCode::InvalidConfig => "INVALID_CONFIG",
            ErrorCode::OffsetOutOfRange => "OFFSET_OUT_OF_RANGE",
            ErrorCode::CorruptMessage => "CORRUPT_MESSAGE",
            ErrorCode::MessageTooLarge => "MESSAGE_TOO_LARGE",
            ErrorCode::StorageFailed => "STORAGE_FAILED",
            ErrorCode::ShuttingDown => "SHUTTING_DOWN",
            ErrorCode::Overloaded => "OVERLOADED",
            ErrorCode::Internal => "INTERNAL",
            ErrorCode::NotOwner => "NOT_OWNER",
            ErrorCode::CoordinatorUnavailable => "COORDINATOR_UNAVAILABLE",
            ErrorCode::ClusterRequired => "CLUSTER_REQUIRED",
            ErrorCode::UnknownMember => "UNKNOWN_MEMBER",
            ErrorCode::ClaimConflict => "CLAIM_CONFLICT",
            ErrorCode::NotPartitionOwner => "NOT_PARTITION_OWNER",
            ErrorCode::GroupNotEmpty => "GROUP_NOT_EMPTY",
            ErrorCode::StorageUnavailable => "STORAGE_UNAVAILABLE",
            ErrorCode::ClusterIdMismatch => "CLUSTER_ID_MISMATCH",
            ErrorCode::UnknownTopicId => "UNKNOWN_TOPIC_ID",
            ErrorCode::NotLeader => "NOT_LEADER",
            ErrorCode::FencedLeaderEpoch => "FENCED_LEADER_EPOCH",
            ErrorCode::NotEnoughReplicas => "NOT_ENOUGH_REPLICAS",
            ErrorCode::UnknownLeaderEpoch => "UNKNOWN_LEADER_EPOCH",
            ErrorCode::ElectionNotPossible => "ELECTION_NOT_POSSIBLE",
            ErrorCode::InvalidReplicas => "INVALID_REPLICAS",
            ErrorCode::NotEnoughReplicasAfterAppend => "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
            ErrorCode::DataLost => "DATA_LOST",
            ErrorCode::MirroredPartition => "MIRRORED_PARTITION",
            ErrorCode::AuthenticationRequired => "AUTHENTICATION_REQUIRED",
            ErrorCode::AuthenticationFailed => "AUTHENTICATION_FAILED",
            ErrorCode::AuthorizationFailed => "AUTHORIZATION_FAILED",
            ErrorCode::OutOfOrderSequence => "OUT_OF_ORDER_SEQUENCE",
            ErrorCode::InvalidProducerEpoch => "INVALID_PRODUCER_EPOCH",
            ErrorCode::NotYetServed => "NOT_YET_SERVED",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_dense() {
        for (i, code) in ErrorCode::ALL.iter().enumerate() {
            assert_eq!(*code as u16, i as u16);
            assert_eq!(ErrorCode::from_u16(i as u16), Ok(*code));
        }
        assert_eq!(ErrorCode::from_u16(999), Err(999));
    }

    /// PROTOCOL.md's table and the Python client list every code with its
    /// number, so a client written from either knows the new ones.
    #[test]
    fn every_code_is_in_the_spec_and_the_python_client() {
        let spec = include_str!("../PROTOCOL.md");
        let python = include_str!("../python/ringlog/errors.py");
        for code in ErrorCode::ALL {
            let n = code as u16;
            let row = format!("| {n:<4} | {}", code.name());
            assert!(spec.contains(&row), "PROTOCOL.md lacks {row:?}");
            let member = format!("    {} = {n}\n", code.name());
            assert!(python.contains(&member), "errors.py lacks {member:?}");
        }
    }
}
