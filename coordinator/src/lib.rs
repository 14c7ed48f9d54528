//! The paper's coordination, with etcd in ZooKeeper's place.
//!
//! - [`registry`]: the one seam between a broker and its topic registry.
//!   The broker's control thread owns a [`registry::Registry`] and is the
//!   only code that reads or changes it; shards ask the control thread.
//!   Implementations: [`registry::Standalone`] (`topics.toml` in the data
//!   directory, the embedded default) and [`registry::Memory`] (tests).
//! - [`kafka_groups`]: Kafka's classic consumer groups: each group's
//!   coordinating shard, its state after a rebalance, its offsets.
//! - [`placement`]: which broker stores each partition of a new topic, a
//!   pure function every broker computes alike.
//! - [`rebalance`]: the paper's range assignment every consumer of a group
//!   computes identically.
//! - [`replicas`]: a replicated partition's leader, epoch and in-sync
//!   replicas, changed only by compare-and-set.
#![deny(missing_docs)]

pub mod groups;
pub mod kafka_groups;
pub mod keys;
pub mod password_file;
pub mod placement;
pub mod registry;
pub mod replicas;
pub mod security;

/// The paper's range rebalance (it lives in `protocol`, since every client
/// runs it).
pub use protocol::rebalance;
