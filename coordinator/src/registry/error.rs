//! Why a registry operation failed: the registry's one error type, below
//! the registry and the security store alike.

use super::Foreign;
use protocol::types::BrokerId;
use std::path::PathBuf;

/// Why a registry operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// CreateTopic for a name that is taken.
    #[error("topic {name:?} already exists")]
    TopicExists {
        /// The name.
        name: String,
    },
    /// DeleteTopic (or a lookup) for a name that is not registered.
    #[error("unknown topic {name:?}")]
    UnknownTopic {
        /// The name.
        name: String,
    },
    /// Reading or writing the registry's file failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The stored registry cannot be read back.
    #[error("the topic registry {path} is unreadable: {reason}")]
    Corrupt {
        /// Where it is stored.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A file that holds credentials (SCRAM keys) is readable by other
    /// users than its owner.
    #[error("{path} holds credentials (SCRAM stored and server keys) and other users may read it (mode {mode:04o}): make it its owner's alone with `chmod 600 {path}`")]
    Exposed {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// The coordination service (etcd) did not answer.
    #[error("etcd is unavailable: {reason}")]
    Unavailable {
        /// What failed, in the client's words.
        reason: String,
    },
    /// A Kafka group's coordinator changed: the writer is no longer it.
    #[error("this shard no longer coordinates Kafka group {group:?}: find its coordinator again")]
    NotCoordinator {
        /// The group.
        group: String,
    },
    /// The registry is not this broker's cluster: see [`Foreign`].
    #[error("this broker's data directory belongs to cluster id {}, but the registry holds {}: it applies nothing from there (its partitions still serve produce and fetch). If etcd was rebuilt on purpose, restart the broker with --join-new-cluster (it registers the topics it holds again, with their data); otherwise point --etcd and --cluster at this cluster's etcd", .0.expected, .0.found_words())]
    ClusterMismatch(Foreign),
    /// A change is stored, but live brokers had not applied it when the
    /// wait for them ended ([`super::Registry::served_waiter`]).
    #[error("the change is stored in the cluster, but broker{} {} had not applied it after {waited_s} s (each applies it once it reaches etcd again, or leaves the live brokers when its lease expires); retry what needs it", if brokers.len() == 1 { "" } else { "s" }, brokers.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    NotServed {
        /// The live brokers that had not applied it.
        brokers: Vec<BrokerId>,
        /// How long the wait lasted.
        waited_s: u64,
    },
    /// Another live broker is registered under this broker's id: its
    /// registration, from another data directory, outlived a crashed
    /// process's lease.
    #[error("broker id {broker_id} is registered by another live broker: its registration ({holder}), from another data directory, is still kept alive {waited_s} s later, longer than a crashed run's lease lasts; give each broker its own --broker-id")]
    DuplicateBroker {
        /// The id.
        broker_id: BrokerId,
        /// The other broker's registration, as stored.
        holder: String,
        /// How long this broker waited for it to expire.
        waited_s: u64,
    },
}
