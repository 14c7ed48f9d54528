//! ringlog's error codes as Kafka's (the numbers of Kafka's `Errors`
//! class), chosen so that a Kafka client does what it should: retry where
//! ringlog would (a leader moved, a disk is briefly unavailable), give up
//! with the right exception where it would not.

use protocol::ErrorCode;

/// Kafka's error codes that the listener answers with.
#[allow(missing_docs)]
pub mod code {
    pub const UNKNOWN_SERVER_ERROR: i16 = -1;
    pub const NONE: i16 = 0;
    pub const OFFSET_OUT_OF_RANGE: i16 = 1;
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    pub const LEADER_NOT_AVAILABLE: i16 = 5;
    pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    pub const REQUEST_TIMED_OUT: i16 = 7;
    pub const MESSAGE_TOO_LARGE: i16 = 10;
    pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
    pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    pub const NOT_COORDINATOR: i16 = 16;
    pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
    pub const INVALID_PARTITIONS: i16 = 37;
    pub const NOT_ENOUGH_REPLICAS: i16 = 19;
    pub const NOT_ENOUGH_REPLICAS_AFTER_APPEND: i16 = 20;
    pub const INVALID_REQUIRED_ACKS: i16 = 21;
    pub const ILLEGAL_GENERATION: i16 = 22;
    pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
    pub const INVALID_GROUP_ID: i16 = 24;
    pub const UNKNOWN_MEMBER_ID: i16 = 25;
    pub const INVALID_SESSION_TIMEOUT: i16 = 26;
    pub const REBALANCE_IN_PROGRESS: i16 = 27;
    pub const GROUP_AUTHORIZATION_FAILED: i16 = 30;
    pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
    pub const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
    pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
    pub const ILLEGAL_SASL_STATE: i16 = 34;
    pub const UNSUPPORTED_VERSION: i16 = 35;
    pub const TOPIC_ALREADY_EXISTS: i16 = 36;
    pub const INVALID_REPLICATION_FACTOR: i16 = 38;
    pub const INVALID_CONFIG: i16 = 40;
    pub const INVALID_REQUEST: i16 = 42;
    pub const UNSUPPORTED_FOR_MESSAGE_FORMAT: i16 = 43;
    pub const POLICY_VIOLATION: i16 = 44;
    pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
    pub const INVALID_PRODUCER_EPOCH: i16 = 47;
    pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
    pub const KAFKA_STORAGE_ERROR: i16 = 56;
    pub const SASL_AUTHENTICATION_FAILED: i16 = 58;
    pub const NON_EMPTY_GROUP: i16 = 68;
    pub const FENCED_LEADER_EPOCH: i16 = 74;
    pub const UNKNOWN_LEADER_EPOCH: i16 = 75;
    pub const INVALID_RECORD: i16 = 87;
    pub const MEMBER_ID_REQUIRED: i16 = 79;
    pub const GROUP_MAX_SIZE_REACHED: i16 = 81;
    pub const UNKNOWN_TOPIC_ID: i16 = 100;
}

/// The Kafka error a ringlog error is answered with.
pub fn kafka_code(error: ErrorCode) -> i16 {
    use code::*;
    match error {
        ErrorCode::None => NONE,
        ErrorCode::UnknownApi | ErrorCode::UnsupportedVersion => UNSUPPORTED_VERSION,
        ErrorCode::InvalidRequest | ErrorCode::ClusterRequired | ErrorCode::ClaimConflict => {
            INVALID_REQUEST
        }
        ErrorCode::FrameTooLarge | ErrorCode::MessageTooLarge => MESSAGE_TOO_LARGE,
        ErrorCode::HandshakeRequired
        | ErrorCode::AuthenticationRequired
        | ErrorCode::AuthenticationFailed => SASL_AUTHENTICATION_FAILED,
        ErrorCode::InvalidTopicName => INVALID_TOPIC_EXCEPTION,
        ErrorCode::UnknownTopic | ErrorCode::UnknownPartition => UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode::TopicAlreadyExists => TOPIC_ALREADY_EXISTS,
        ErrorCode::InvalidConfig => INVALID_CONFIG,
        ErrorCode::OffsetOutOfRange => OFFSET_OUT_OF_RANGE,
        // A batch a producer should not have written: not retriable (Kafka's
        // CORRUPT_MESSAGE would make a Java producer retry it until its
        // delivery timeout).
        ErrorCode::CorruptMessage => INVALID_RECORD,
        // A disk that failed or is briefly refusing writes: the partition is
        // offline on this broker (Java retries it after a metadata refresh).
        ErrorCode::StorageFailed | ErrorCode::StorageUnavailable | ErrorCode::DataLost => {
            KAFKA_STORAGE_ERROR
        }
        // Elsewhere now, or soon: look again.
        ErrorCode::ShuttingDown
        | ErrorCode::NotOwner
        | ErrorCode::NotPartitionOwner
        | ErrorCode::NotLeader => NOT_LEADER_OR_FOLLOWER,
        ErrorCode::NotYetServed | ErrorCode::ElectionNotPossible => LEADER_NOT_AVAILABLE,
        ErrorCode::Overloaded => REQUEST_TIMED_OUT,
        ErrorCode::Internal | ErrorCode::ClusterIdMismatch => UNKNOWN_SERVER_ERROR,
        ErrorCode::CoordinatorUnavailable => NOT_COORDINATOR,
        ErrorCode::UnknownMember => UNKNOWN_MEMBER_ID,
        ErrorCode::GroupNotEmpty => NON_EMPTY_GROUP,
        ErrorCode::UnknownTopicId => UNKNOWN_TOPIC_ID,
        ErrorCode::FencedLeaderEpoch => FENCED_LEADER_EPOCH,
        ErrorCode::UnknownLeaderEpoch => UNKNOWN_LEADER_EPOCH,
        ErrorCode::NotEnoughReplicas => NOT_ENOUGH_REPLICAS,
        ErrorCode::NotEnoughReplicasAfterAppend => NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode::InvalidReplicas => INVALID_REPLICATION_FACTOR,
        // Writes to a mirror's copy come from its mirror only.
        ErrorCode::MirroredPartition => POLICY_VIOLATION,
        ErrorCode::AuthorizationFailed => TOPIC_AUTHORIZATION_FAILED,
        ErrorCode::OutOfOrderSequence => OUT_OF_ORDER_SEQUENCE_NUMBER,
        ErrorCode::InvalidProducerEpoch => INVALID_PRODUCER_EPOCH,
        // A code newer than this table.
        _ => UNKNOWN_SERVER_ERROR,
    }
}
