//! Kafka's consumer groups (the classic protocol) as the registry keeps
//! them: which shard coordinates each group, the group as its last
//! completed rebalance left it, and its committed offsets.
//!
//! A Kafka group has one coordinator, a shard that holds the JoinGroup
//! barrier in memory (`broker/src/kafka/group/`). The registry only
//! records *who* it is and what must outlive it:
//!
//! - **coordinator**: the first shard asked becomes it, if no other is
//!   (create-if-absent). In etcd the key is bound to its broker's lease,
//!   so it is gone one TTL after that broker dies, and the next
//!   FindCoordinator elects another. A standalone broker coordinates all.
//! - **state**: generation, protocol, leader, members and assignments,
//!   written when a rebalance completes (SyncGroup) or a member leaves, so
//!   a new coordinator resumes the same generation: members keep
//!   heartbeating and committing without a rebalance.
//! - **offsets**: per partition, Kafka's committed offset (a byte
//!   position), the leader epoch and the client's metadata string.
//!
//! In etcd, writing the state and committing are transactions that compare
//! the coordinator key with the writer: a shard that lost the group (its
//! broker's lease expired while it lived on) can never write over its
//! successor's. Kafka groups are apart from ringlog's own groups
//! (`groups/` keys): a Kafka commit is a record's offset + 1, usually not a
//! message boundary of the native format.

pub mod etcd;
pub mod file;

use protocol::types::BrokerId;
use serde::{Deserialize, Serialize};

/// A shard as a group's coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// Its broker.
    pub broker: BrokerId,
    /// The shard within it.
    pub shard: u32,
}

/// One partition's committed offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaOffset {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// The offset committed (the next record to read: a byte position).
    pub offset: i64,
    /// The leader epoch of the record before it, or −1.
    pub leader_epoch: i32,
    /// The client's string (Kafka's `committed_metadata`).
    pub metadata: String,
}

/// A member as a completed rebalance left it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedMember {
    /// The member id the coordinator gave it.
    pub member_id: String,
    /// Its static membership id (KIP-345), if any.
    pub instance_id: Option<String>,
    /// Its client id.
    pub client_id: String,
    /// The address it connected from.
    pub client_host: String,
    /// Its session timeout.
    pub session_timeout_ms: i32,
    /// Its rebalance timeout.
    pub rebalance_timeout_ms: i32,
    /// Its subscription for the chosen protocol (opaque to the broker).
    #[serde(with = "hex_bytes")]
    pub metadata: Vec<u8>,
    /// What the leader assigned it (opaque to the broker).
    #[serde(with = "hex_bytes")]
    pub assignment: Vec<u8>,
}

/// A group as its last completed rebalance left it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedGroup {
    /// The generation.
    pub generation: i32,
    /// The protocol type (`consumer`).
    pub protocol_type: String,
    /// The chosen protocol (`range`, `cooperative-sticky`, …).
    pub protocol: String,
    /// The leader's member id.
    pub leader: String,
    /// The members.
    pub members: Vec<SavedMember>,
}

/// What the control thread asks the registry on a shard's behalf.
#[derive(Debug, Clone)]
pub enum KafkaGroupOp {
    /// The group's coordinator; `candidate` becomes it if there is none.
    Coordinator {
        /// The group.
        group: String,
        /// The shard that asks.
        candidate: Holder,
    },
    /// The group's saved state (a new coordinator's first look).
    Load {
        /// The group.
        group: String,
    },
    /// Replaces the saved state (`None`: the group is empty), if `me` is
    /// still the coordinator.
    Save {
        /// The group.
        group: String,
        /// The coordinator writing.
        me: Holder,
        /// The state.
        state: Option<SavedGroup>,
    },
    /// Stores committed offsets, if `me` is still the coordinator.
    Commit {
        /// The group.
        group: String,
        /// The coordinator writing.
        me: Holder,
        /// The offsets.
        offsets: Vec<KafkaOffset>,
    },
    /// Every committed offset of the group.
    Offsets {
        /// The group.
        group: String,
    },
    /// The groups with a saved state or committed offsets.
    List,
}

/// The answer to a [`KafkaGroupOp`].
#[derive(Debug, Clone)]
pub enum KafkaGroupAnswer {
    /// The coordinator.
    Coordinator(Holder),
    /// The saved state.
    State(Option<SavedGroup>),
    /// Written.
    Done,
    /// Committed offsets, by topic and partition.
    Offsets(Vec<KafkaOffset>),
    /// Group names, sorted.
    Groups(Vec<String>),
}

/// Offsets per commit transaction (etcd's default `--max-txn-ops` is 128,
/// one of which is the coordinator comparison).
pub const OFFSETS_PER_TXN: usize = 100;

/// Bytes and hex text, for opaque client bytes in JSON records.
mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::fmt::Write;

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        let mut text = String::with_capacity(bytes.len() * 2);
        for b in bytes {
            let _ = write!(text, "{b:02x}");
        }
        s.serialize_str(&text)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        if text.len() % 2 != 0 {
            return Err(serde::de::Error::custom("odd number of hex digits"));
        }
        (0..text.len())
            .step_by(2)
            .map(|i| {
                u8::from_str_radix(text.get(i..i + 2).unwrap_or("x"), 16)
                    .map_err(serde::de::Error::custom)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_group_reads_back_as_written() {
        let group = SavedGroup {
            generation: 7,
            protocol_type: "consumer".into(),
            protocol: "range".into(),
            leader: "a-1".into(),
            members: vec![SavedMember {
                member_id: "a-1".into(),
                instance_id: None,
                client_id: "a".into(),
                client_host: "/127.0.0.1".into(),
                session_timeout_ms: 45_000,
                rebalance_timeout_ms: 300_000,
                metadata: vec![0, 1, 0xfe, 0xff],
                assignment: vec![],
            }],
        };
        let text = serde_json::to_string(&group).unwrap();
        assert!(text.contains("\"0001feff\""), "{text}");
        assert_eq!(serde_json::from_str::<SavedGroup>(&text).unwrap(), group);
        let odd = text.replace("0001feff", "0001fef");
        assert!(serde_json::from_str::<SavedGroup>(&odd).is_err());
    }
}
