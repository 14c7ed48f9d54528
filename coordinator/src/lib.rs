//! The paper's coordination, with etcd in ZooKeeper's place.
//!
//! So far this crate holds the pure part: the range rebalance every consumer
//! of a group computes identically ([`rebalance`]). The etcd registries
//! (brokers, consumers, ownership, offsets: lease-bound keys, claims in
//! transactions, watches that trigger the rebalance) come with the consumer
//! group work; until then the broker runs standalone.
#![deny(missing_docs)]

pub mod rebalance;
