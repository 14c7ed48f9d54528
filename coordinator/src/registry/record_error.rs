//! Why a topic record is not one a broker may act on, or a change to it is
//! refused. Records read from disk or etcd are checked as if they came
//! from the wire ([`super::TopicRecord::check`]); each rule it breaks is a
//! variant here.

use protocol::types::{BrokerId, PartitionId, TopicNameError};

/// A rule a topic record breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The name would not pass as a request's (`../x` escapes the data
    /// directory).
    #[error("topic record {name:?}: {source}")]
    Name {
        /// The name as stored.
        name: String,
        /// The naming rule it breaks.
        source: TopicNameError,
    },
    /// No partitions.
    #[error("topic {name:?} has no partitions")]
    NoPartitions {
        /// The topic.
        name: String,
    },
    /// A message format this build does not know.
    #[error(
        "topic {name:?} stores message format {format}, which this broker does not know (1 or 2)"
    )]
    MessageFormat {
        /// The topic.
        name: String,
        /// Its format.
        format: u32,
    },
    /// A timestamp type this build does not know.
    #[error("topic {name:?} has timestamp type {timestamp_type}, which this broker does not know (1 CreateTime or 2 LogAppendTime)")]
    TimestampType {
        /// The topic.
        name: String,
        /// Its timestamp type.
        timestamp_type: u32,
    },
    /// Not one owner per partition.
    #[error("topic {name:?} has {partitions} partitions but {owners} partition owners")]
    Owners {
        /// The topic.
        name: String,
        /// Its partition count.
        partitions: u32,
        /// How many owners it lists.
        owners: usize,
    },
    /// A replicated topic without one replica set per partition.
    #[error("topic {name:?} has {partitions} partitions but {sets} replica sets")]
    ReplicaSets {
        /// The topic.
        name: String,
        /// Its partition count.
        partitions: u32,
        /// How many replica sets it lists.
        sets: usize,
    },
    /// A replica set that is empty, names a broker twice, or is not led by
    /// the partition's owner.
    #[error("topic {name:?} partition {partition}: replicas {set:?} are not distinct brokers led by {owner:?}")]
    Replicas {
        /// The topic.
        name: String,
        /// The partition.
        partition: PartitionId,
        /// Its replica set.
        set: Vec<BrokerId>,
        /// Its owner, if listed.
        owner: Option<BrokerId>,
    },
    /// A partition moving to brokers its replica set does not hold.
    #[error("topic {name:?} partition {partition}: moving to {target:?}, which its replicas {set:?} do not hold")]
    Moving {
        /// The topic.
        name: String,
        /// The partition.
        partition: PartitionId,
        /// Where it moves.
        target: Vec<BrokerId>,
        /// Its replica set, if listed.
        set: Option<Vec<BrokerId>>,
    },
    /// `min_insync_replicas` outside 1 ..= the largest replica set.
    #[error("topic {name:?}: min_insync_replicas {value} is not 1..={largest}")]
    MinInsync {
        /// The topic.
        name: String,
        /// The stored value.
        value: u32,
        /// The largest replica set.
        largest: u32,
    },
    /// Partitions moving on a topic with one copy per partition.
    #[error("topic {name:?} has one copy per partition but partitions moving")]
    MovingUnreplicated {
        /// The topic.
        name: String,
    },
}

/// Why a partition cannot move to the replicas asked for
/// ([`super::TopicRecord::start_reassignment`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoveError {
    /// The topic has no such partition.
    #[error("topic {name:?} has {partitions} partitions, not {partition}")]
    NoPartition {
        /// The topic.
        name: String,
        /// Its partition count.
        partitions: u32,
        /// The partition asked for.
        partition: PartitionId,
    },
    /// Empty, or a broker named twice.
    #[error("replicas {0:?} are not one or more distinct brokers")]
    NotDistinct(Vec<BrokerId>),
    /// Fewer replicas than acks=all needs.
    #[error("{replicas} replicas are fewer than the topic's min_insync_replicas {min_insync}: acks=all produces would be refused")]
    BelowMinInsync {
        /// How many replicas were asked for.
        replicas: usize,
        /// The topic's `min_insync_replicas`.
        min_insync: u32,
    },
}
