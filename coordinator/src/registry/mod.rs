//! The topic registry: one seam, several stores.
//!
//! A broker's control thread owns exactly one [`Registry`] and is the only
//! code that reads or changes it; shards send the control thread a message
//! and await its answer, so no shard ever blocks on a file's fsync or on a
//! coordination service. The implementations:
//!
//! | store          | where topics live                    | used by                         |
//! |----------------|--------------------------------------|---------------------------------|
//! | [`Standalone`] | `<data-dir>/topics.toml`             | a broker without `--etcd`       |
//! | [`Memory`]     | the process's memory                 | tests of code above the seam    |
//! | [`Etcd`]       | etcd, under the cluster's prefix ([`crate::keys`]) | a broker with `--etcd`  |
//!
//! A single-broker store has no one else to hear from: its
//! [`Registry::next_event`] never resolves. The etcd store reports the
//! changes other brokers make (topics created and deleted, brokers joining
//! and leaving) as [`RegistryEvent`]s from its watch.
//!
//! Every implementation passes the same test ([`conformance`]), so code
//! above the seam cannot tell them apart except by durability and by who
//! else can see the topics.

pub mod access;
mod endpoints;
pub mod error;
mod etcd;
mod memory;
mod record_error;
mod standalone;

pub use access::EtcdAccess;
pub use error::RegistryError;
pub use etcd::{Etcd, EtcdOptions};
pub use memory::Memory;
pub use record_error::{MoveError, RecordError};
pub use standalone::{Standalone, TOPICS_FILE};

use crate::replicas::{PartitionUpdate, UpdateOutcome, Versioned};
use protocol::codec::TopicSettings;
use protocol::types::{BrokerId, PartitionId, ShardId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

/// A wait for every live broker to apply a topic's record
/// ([`Registry::served_waiter`]): `Send`, so it runs as a task of its own.
pub type ServedWait = std::pin::Pin<Box<dyn Future<Output = Result<(), RegistryError>> + Send>>;

/// A topic as the registry stores it: its name, partition count, the
/// settings it overrides (0 = the broker's default) and the broker that
/// stores each partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicRecord {
    /// Topic name.
    pub name: String,
    /// Number of partitions.
    pub partitions: u32,
    /// Time retention override; 0 = broker default.
    #[serde(default)]
    pub retention_ms: u64,
    /// Size retention override; 0 = broker default.
    #[serde(default)]
    pub retention_bytes: u64,
    /// Segment size override; 0 = broker default.
    #[serde(default)]
    pub segment_bytes: u64,
    /// Flush-after-messages override; 0 = broker default.
    #[serde(default)]
    pub flush_messages: u64,
    /// Flush interval override; 0 = broker default.
    #[serde(default)]
    pub flush_interval_ms: u64,
    /// The broker of each partition, indexed by partition.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub brokers: Vec<BrokerId>,
    /// Unique per creation: a topic deleted and created again under the
    /// same name (and, being placed deterministically, on the same brokers)
    /// is a different record, so a broker that missed the delete still
    /// drops the old partitions instead of serving them as the new topic's.
    /// Empty in registries written before it existed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// Copies of each partition (0 or 1: one, on `brokers[p]`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub replication_factor: u32,
    /// Fewest in-sync replicas an acks=all produce accepts.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub min_insync_replicas: u32,
    /// Replicated: the copies count what they have written, not flushed
    /// (acks=all and the high watermark).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub write_caching: bool,
    /// A mirror's target topic: where it is mirrored from. Its partitions
    /// take only mirror appends until it is promoted (`None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror_source: Option<String>,
    /// A promoted copy: the `mirror_source` it had, recorded by the
    /// promotion with where each partition's copy then ended
    /// (`promoted_ends`): where this topic's history forked from its old
    /// source's, which a failback cuts the old source back to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promoted_from: Option<String>,
    /// Where each partition's copy ended when it was promoted (by
    /// partition; empty: not recorded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub promoted_ends: Vec<u64>,
    /// The brokers of each partition's copies, the preferred leader first
    /// (`brokers[p] == replicas[p][0]`); empty for one copy. Chosen at
    /// creation; who leads now and who is in sync is the partition's state
    /// ([`crate::replicas::PartitionState`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<Vec<BrokerId>>,
    /// Partitions being moved (`ringlog partitions reassign`): the replica
    /// set each is moving to. While a partition moves, `replicas[p]` holds
    /// its old copies and its new ones; once every new one is in sync its
    /// leader makes `replicas[p]` the target and removes the entry
    /// ([`TopicRecord::complete_reassignment`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reassigning: BTreeMap<PartitionId, Vec<BrokerId>>,
    /// The data directory (`data_dir_id`) of each live broker when
    /// partitions were created, one entry per creation or growth: from
    /// the entry's first partition on. A partition without a state key
    /// is in its initial state, whose ISR names these directories
    /// ([`TopicRecord::initial_state`]): a broker that lost its disk
    /// before the partition's first change is not taken for the member
    /// that holds its bytes. Empty in records written before it existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disks: Vec<DisksAtCreation>,
    /// What its logs store: 1 the paper's messages, 2 Kafka's record
    /// batches v2 (design record 0015). Resolved at creation and fixed for
    /// the topic's life (0 in records written before format 2: format 1).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub message_format: u32,
    /// Format 2's timestamps: 1 CreateTime, 2 LogAppendTime (0:
    /// CreateTime).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timestamp_type: u32,
}

/// The data directories of the live brokers when partitions from
/// `first_partition` on were created (a list, not a map keyed by broker
/// id: the applied-topics file is TOML, whose keys are strings).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DisksAtCreation {
    /// The first partition these directories hold copies of.
    pub first_partition: PartitionId,
    /// `(broker, data_dir_id)` of each live broker then.
    pub brokers: Vec<(BrokerId, String)>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl TopicRecord {
    /// A record for a new topic with these overrides, stored by `brokers`.
    pub fn new(name: &str, overrides: TopicSettings, brokers: Vec<BrokerId>) -> TopicRecord {
        TopicRecord {
            name: name.to_string(),
            partitions: brokers.len() as u32,
            retention_ms: overrides.retention_ms,
            retention_bytes: overrides.retention_bytes,
            segment_bytes: overrides.segment_bytes,
            flush_messages: overrides.flush_messages,
            flush_interval_ms: overrides.flush_interval_ms,
            brokers,
            id: String::new(),
            replication_factor: 0,
            min_insync_replicas: 0,
            write_caching: false,
            mirror_source: None,
            promoted_from: None,
            promoted_ends: Vec::new(),
            replicas: Vec::new(),
            reassigning: BTreeMap::new(),
            disks: Vec::new(),
            message_format: overrides.message_format,
            timestamp_type: overrides.timestamp_type,
        }
    }

    /// Records the data directories of `brokers` (the live ones) for the
    /// partitions from `first` on (those being created).
    pub fn record_disks(&mut self, first: PartitionId, brokers: &[BrokerRecord]) {
        let disks: Vec<(BrokerId, String)> = brokers
            .iter()
            .filter(|b| !b.data_dir_id.is_empty())
            .map(|b| (b.broker_id, b.data_dir_id.clone()))
            .collect();
        if self.is_replicated() && !disks.is_empty() {
            self.disks.retain(|d| d.first_partition < first);
            self.disks.push(DisksAtCreation {
                first_partition: first,
                brokers: disks,
            });
        }
    }

    /// The data directories `partition`'s initial ISR holds its copies in
    /// (empty when not recorded).
    pub fn disks_of(&self, partition: PartitionId) -> BTreeMap<BrokerId, String> {
        self.disks
            .iter()
            .rev()
            .find(|d| d.first_partition <= partition)
            .map(|d| d.brokers.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// `partition`'s state before its first change (no state key): its
    /// preferred replica leads in epoch 0, every replica in sync, in the
    /// directory it had when the partition was created.
    pub fn initial_state(&self, partition: PartitionId) -> crate::replicas::PartitionState {
        crate::replicas::PartitionState::initial(
            &self.replicas_of(partition),
            &self.disks_of(partition),
        )
    }

    /// A record for a new replicated topic: `replicas[p]` holds partition
    /// `p`'s copies, the preferred leader first.
    pub fn replicated(
        name: &str,
        overrides: TopicSettings,
        replicas: Vec<Vec<BrokerId>>,
        min_insync_replicas: u32,
    ) -> TopicRecord {
        let brokers = replicas
            .iter()
            .map(|r| r.first().copied().unwrap_or(0))
            .collect();
        let factor = replicas.first().map_or(1, |r| r.len() as u32);
        let mut record = TopicRecord::new(name, overrides, brokers);
        if factor > 1 {
            record.replication_factor = factor;
            record.min_insync_replicas = min_insync_replicas.clamp(1, factor);
            record.write_caching = overrides.write_caching;
            record.replicas = replicas;
        }
        record
    }

    /// True when its partitions are replicated: they have leaders,
    /// epochs and an ISR. A topic created with one copy is not (it keeps
    /// the paper's one-broker path) until a reassignment moves or copies
    /// one of its partitions ([`TopicRecord::start_reassignment`]).
    pub fn is_replicated(&self) -> bool {
        !self.replicas.is_empty()
    }

    /// The replica set `partition` is moving to, if it is moving.
    pub fn moving_to(&self, partition: PartitionId) -> Option<&[BrokerId]> {
        self.reassigning.get(&partition).map(Vec::as_slice)
    }

    /// The record with `partition` moving to `target` (distinct brokers,
    /// the preferred leader first): its replicas become the old ones and
    /// the new ones, and a topic with one copy becomes replicated (each
    /// partition's one broker its only replica, in sync, leading in epoch
    /// 0). A target equal to the current replicas ends a move in progress.
    /// `None` (no change) when the partition is already there.
    pub fn start_reassignment(
        &self,
        partition: PartitionId,
        target: &[BrokerId],
    ) -> Result<Option<TopicRecord>, MoveError> {
        if partition >= self.partitions {
            return Err(MoveError::NoPartition {
                name: self.name.clone(),
                partitions: self.partitions,
                partition,
            });
        }
        let mut distinct = target.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        if target.is_empty() || distinct.len() != target.len() {
            return Err(MoveError::NotDistinct(target.to_vec()));
        }
        let mut next = self.clone();
        if !next.is_replicated() {
            next.replicas = next.brokers.iter().map(|b| vec![*b]).collect();
            next.replication_factor = 1;
            next.min_insync_replicas = 1;
        }
        if (target.len() as u32) < next.min_insync_replicas {
            return Err(MoveError::BelowMinInsync {
                replicas: target.len(),
                min_insync: next.min_insync_replicas,
            });
        }
        // Every copy it has now stays until the move completes (a move in
        // progress may be redirected: the copies its target added go then).
        let now = next.replicas_of(partition);
        if next.moving_to(partition).is_none() && now == target {
            return Ok(if next == *self { None } else { Some(next) });
        }
        let mut set = now;
        for b in target {
            if !set.contains(b) {
                set.push(*b);
            }
        }
        next.replicas[partition as usize] = set;
        // Even a target that adds copies at the end of the list, or only
        // drops or reorders them, is a move: new copies join the ISR before
        // the record names them as the replicas, and a leader left out
        // hands over first.
        next.reassigning.insert(partition, target.to_vec());
        Ok(Some(next))
    }

    /// The record with `partition`'s move finished: its replicas are the
    /// target (whose first is the preferred leader), and the topic's
    /// replication factor is its largest replica set. `None` when it is
    /// not moving.
    pub fn complete_reassignment(&self, partition: PartitionId) -> Option<TopicRecord> {
        let target = self.moving_to(partition)?.to_vec();
        let mut next = self.clone();
        next.reassigning.remove(&partition);
        next.brokers[partition as usize] = target[0];
        next.replicas[partition as usize] = target;
        next.replication_factor = next
            .replicas
            .iter()
            .map(|r| r.len() as u32)
            .max()
            .unwrap_or(1);
        Some(next)
    }

    /// The brokers of a partition's copies, the preferred leader first.
    pub fn replicas_of(&self, partition: PartitionId) -> Vec<BrokerId> {
        match self.replicas.get(partition as usize) {
            Some(replicas) => replicas.clone(),
            None => self.broker_of(partition).into_iter().collect(),
        }
    }

    /// True when `broker` holds a copy of `partition`.
    pub fn has_replica(&self, partition: PartitionId, broker: BrokerId) -> bool {
        match self.replicas.get(partition as usize) {
            Some(replicas) => replicas.contains(&broker),
            None => self.broker_of(partition) == Some(broker),
        }
    }

    /// The settings this topic overrides (0 = the broker's default).
    pub fn overrides(&self) -> TopicSettings {
        TopicSettings {
            retention_ms: self.retention_ms,
            retention_bytes: self.retention_bytes,
            segment_bytes: self.segment_bytes,
            flush_messages: self.flush_messages,
            flush_interval_ms: self.flush_interval_ms,
            replication_factor: self.replication_factor,
            min_insync_replicas: self.min_insync_replicas,
            write_caching: self.write_caching,
            message_format: self.message_format,
            timestamp_type: self.timestamp_type,
        }
    }

    /// The broker that stores `partition`, if the partition exists.
    pub fn broker_of(&self, partition: PartitionId) -> Option<BrokerId> {
        self.brokers.get(partition as usize).copied()
    }

    /// Checks the record as if it came from the wire: a valid name (a
    /// record read from disk or etcd is no more trusted than a request: a
    /// name like `../x` would escape the data directory), at least one
    /// partition, one broker per partition.
    pub fn check(&self) -> Result<(), RecordError> {
        let name = || self.name.clone();
        protocol::types::validate_topic_name(&self.name).map_err(|source| RecordError::Name {
            name: name(),
            source,
        })?;
        if self.partitions == 0 {
            return Err(RecordError::NoPartitions { name: name() });
        }
        if self.timestamp_type > 2 {
            return Err(RecordError::TimestampType {
                name: name(),
                timestamp_type: self.timestamp_type,
            });
        }
        if self.message_format > 2 {
            return Err(RecordError::MessageFormat {
                name: name(),
                format: self.message_format,
            });
        }
        if self.brokers.len() != self.partitions as usize {
            return Err(RecordError::Owners {
                name: name(),
                partitions: self.partitions,
                owners: self.brokers.len(),
            });
        }
        if self.is_replicated() {
            self.check_replicas()
        } else if !self.reassigning.is_empty() {
            Err(RecordError::MovingUnreplicated { name: name() })
        } else {
            Ok(())
        }
    }

    /// A replicated topic's part of [`Self::check`]: one set of distinct
    /// brokers per partition led by its owner, moves within them, and a
    /// min-ISR the sets can meet.
    fn check_replicas(&self) -> Result<(), RecordError> {
        let name = || self.name.clone();
        if self.replicas.len() != self.partitions as usize {
            return Err(RecordError::ReplicaSets {
                name: name(),
                partitions: self.partitions,
                sets: self.replicas.len(),
            });
        }
        let distinct_brokers = |set: &[BrokerId]| {
            let mut distinct = set.to_vec();
            distinct.sort_unstable();
            distinct.dedup();
            !set.is_empty() && distinct.len() == set.len()
        };
        for (p, set) in self.replicas.iter().enumerate() {
            if !distinct_brokers(set) || set.first() != self.brokers.get(p) {
                return Err(RecordError::Replicas {
                    name: name(),
                    partition: p as PartitionId,
                    set: set.clone(),
                    owner: self.brokers.get(p).copied(),
                });
            }
        }
        for (p, target) in &self.reassigning {
            let moving = self.replicas.get(*p as usize);
            if !distinct_brokers(target)
                || !moving.is_some_and(|set| target.iter().all(|b| set.contains(b)))
            {
                return Err(RecordError::Moving {
                    name: name(),
                    partition: *p,
                    target: target.clone(),
                    set: moving.cloned(),
                });
            }
        }
        let largest = self.replicas.iter().map(Vec::len).max().unwrap_or(0) as u32;
        if self.min_insync_replicas == 0 || self.min_insync_replicas > largest {
            return Err(RecordError::MinInsync {
                name: name(),
                value: self.min_insync_replicas,
                largest,
            });
        }
        Ok(())
    }
}

/// A live broker as the broker registry holds it: its id, and how clients
/// reach each of its shards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRecord {
    /// The broker's id.
    pub broker_id: BrokerId,
    /// Every shard's address, shard 0 first.
    pub shards: Vec<ShardEndpoint>,
    /// The broker's build (`broker --version`).
    #[serde(default)]
    pub version: String,
    /// A random id of the broker's data directory, so that a restarted
    /// broker recognises the registration its killed predecessor left.
    #[serde(default)]
    pub data_dir_id: String,
    /// A random id of this run of the broker: a follower's fetches carry
    /// it, so its leader sees a restart (KIP-903).
    #[serde(default)]
    pub incarnation: String,
    /// Its rack (`broker --rack`), for spreading copies over racks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
}

/// One shard's address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardEndpoint {
    /// The shard.
    pub shard_id: ShardId,
    /// Host clients connect to.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// Its Kafka listener's port, if the broker speaks Kafka's protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka_port: Option<u16>,
}

/// A change someone else made to the registries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryEvent {
    /// A topic was created (or its record rewritten).
    TopicPut {
        /// The record now.
        record: TopicRecord,
        /// The revision it was written at.
        revision: i64,
    },
    /// A topic's record was deleted (an observed delete, the only thing
    /// that may remove a topic's data).
    TopicDeleted {
        /// The topic's name.
        name: String,
        /// The id of the record that was deleted; empty when etcd no
        /// longer had it to tell.
        id: String,
    },
    /// The set of live brokers changed; here it is, sorted by id.
    Brokers(Vec<BrokerRecord>),
    /// A member joined or left this group.
    GroupMembers(String),
    /// A replicated partition's state changed (an election, an ISR change).
    PartitionState {
        /// Its topic's id.
        topic_id: String,
        /// The partition.
        partition: u32,
        /// The state now.
        state: Versioned,
    },
    /// The watch was lost (etcd unreachable) and is back: the whole state,
    /// for the receiver to reconcile with what it knew. A topic missing
    /// from it was not seen deleted: the snapshot may come from an etcd
    /// restored from an old backup. Only sent while the registry is this
    /// broker's cluster; it also ends a [`RegistryEvent::ForeignCluster`].
    Resync {
        /// Every topic.
        topics: Vec<TopicRecord>,
        /// Every live broker.
        brokers: Vec<BrokerRecord>,
        /// Every replicated partition's state that has a key, by topic id
        /// and partition (one without a key is in its initial state).
        partitions: Vec<(String, u32, Versioned)>,
        /// The revision the whole state was read at.
        revision: i64,
    },
    /// The registry no longer holds this broker's cluster (a new, empty
    /// etcd behind the same address, another cluster's data, the id key
    /// deleted): nothing it says applies until a `Resync` follows.
    ForeignCluster(Foreign),
    /// Users or access rules changed: read them again
    /// ([`Registry::security`]).
    SecurityChanged,
}

/// Which cluster a registry belongs to, as a broker sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// The registry holds the cluster this broker belongs to.
    Joined {
        /// The cluster's id.
        cluster_id: String,
        /// The id was not this broker's before this start: a fresh data
        /// directory joined (or created) the cluster, or
        /// `--join-new-cluster` adopted a new one. The broker stores it.
        adopted: bool,
        /// `--join-new-cluster` replaced this id (the data directory's).
        replaced: Option<String>,
    },
    /// The registry holds another cluster, or none.
    Foreign(Foreign),
}

/// A registry whose cluster id is not this broker's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Foreign {
    /// The id this broker's data directory belongs to.
    pub expected: String,
    /// The id the registry holds; `None` when it holds none (an empty or
    /// wiped etcd, or a prefix no broker ever used).
    pub found: Option<String>,
}

impl Foreign {
    /// What was found, in words.
    pub fn found_words(&self) -> String {
        match &self.found {
            Some(id) => format!("the cluster id {id}"),
            None => "no cluster id (an empty, wiped or replaced etcd, or a --cluster name no broker used)".to_string(),
        }
    }
}

/// Until when this broker's lease is known to be live, by the local
/// monotonic clock: the time taken *before* the keep-alive that etcd last
/// answered was sent, plus the TTL, less a margin. A leader whose lease may
/// have expired takes no writes (it may have been replaced: leases are
/// liveness, epochs are safety, and this is the liveness half).
#[derive(Debug)]
pub struct LeaseClock {
    base: std::time::Instant,
    /// Milliseconds after `base`; 0: never live.
    until_ms: std::sync::atomic::AtomicU64,
}

impl Default for LeaseClock {
    fn default() -> Self {
        LeaseClock {
            base: std::time::Instant::now(),
            until_ms: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

impl LeaseClock {
    /// The lease is live until `sent + ttl − margin` (`sent`: when the
    /// request etcd answered was sent).
    pub fn renewed(&self, sent: std::time::Instant, ttl: std::time::Duration) {
        let margin = (ttl / 5).min(std::time::Duration::from_millis(500));
        let until = sent.saturating_duration_since(self.base) + ttl.saturating_sub(margin);
        self.until_ms.fetch_max(
            until.as_millis() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The lease is gone (revoked, lost, or the registry is foreign).
    pub fn lost(&self) {
        self.until_ms.store(0, std::sync::atomic::Ordering::Relaxed);
    }

    /// True while the lease is known to be live.
    pub fn live(&self) -> bool {
        let now = self.base.elapsed().as_millis() as u64;
        now < self.until_ms.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// 128 random bits, in hex: a cluster's or a topic's id.
pub fn random_id() -> String {
    let mut bytes = [0u8; 16];
    let random = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    if random.is_err() {
        // No /dev/urandom (a strange chroot): time, pid and a counter,
        // hashed, are unique enough for ids made a few at a time.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let seed = format!("{now:?}-{}-{n}", std::process::id());
        let first = protocol::types::fnv1a(seed.as_bytes()).to_le_bytes();
        bytes[..8].copy_from_slice(&first);
        bytes[8..].copy_from_slice(&protocol::types::fnv1a(&first).to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where a cluster's producer ids begin: 24 random bits above 39 bits of
/// count (5.5 · 10^11 ids), so the ids of two clusters — whose batches a
/// mirror may copy into one log — almost never meet.
pub fn first_producer_id() -> i64 {
    let random = random_id();
    let top = u32::from_str_radix(&random[..6], 16).unwrap_or(1);
    i64::from(top) << 39
}

/// A block of `count` producer ids from `next`, or the error when the ids
/// are used up (at `i64::MAX`).
pub fn producer_id_block(next: i64, count: u32) -> Result<std::ops::Range<i64>, RegistryError> {
    match next.checked_add(i64::from(count)) {
        Some(end) if next >= 0 => Ok(next..end),
        _ => Err(RegistryError::Unavailable {
            reason: format!("producer ids are used up (the next would be {next})"),
        }),
    }
}

/// A new topic's id (unique per creation: a name deleted and created
/// again gets another).
pub fn new_topic_id() -> String {
    random_id()
}

impl RegistryError {
    pub(crate) fn io(
        op: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> RegistryError {
        RegistryError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// A store of topic records. Owned by one control thread: methods take
/// `&mut self` and their futures need not be `Send` (the control thread runs
/// a current-thread runtime), which is why this is a plain trait with
/// `impl Future` returns rather than a boxed, `Send` one.
pub trait Registry {
    /// The consumer group registries this store comes with (see
    /// [`Registry::groups`]).
    type Groups: crate::groups::GroupStore;

    /// Every registered topic, in name order.
    fn topics(&mut self) -> impl Future<Output = Result<Vec<TopicRecord>, RegistryError>>;

    /// The live brokers, sorted by id: where a new topic's partitions may
    /// be placed, and what Metadata lists.
    fn brokers(&mut self) -> impl Future<Output = Result<Vec<BrokerRecord>, RegistryError>>;

    /// Registers a new topic; fails with [`RegistryError::TopicExists`] when
    /// the name is taken. Durable when the future resolves `Ok`, with the
    /// revision the record was written at (what
    /// [`Registry::served_waiter`] waits for).
    fn create_topic(
        &mut self,
        topic: TopicRecord,
    ) -> impl Future<Output = Result<i64, RegistryError>>;

    /// Removes a topic and returns its record; fails with
    /// [`RegistryError::UnknownTopic`] when there is none. Durable when the
    /// future resolves `Ok`.
    fn delete_topic(
        &mut self,
        name: &str,
    ) -> impl Future<Output = Result<TopicRecord, RegistryError>>;

    /// One topic's record and its revision (the next
    /// [`Registry::replace_topic`] compares it); `None` when there is none.
    fn topic(
        &mut self,
        name: &str,
    ) -> impl Future<Output = Result<Option<(TopicRecord, i64)>, RegistryError>> {
        let _ = name;
        async {
            Err(RegistryError::Unavailable {
                reason: "a single-broker registry does not move partitions".into(),
            })
        }
    }

    /// Rewrites a topic's record (a reassignment) if it is still at
    /// `expected`, its revision when read, and says the revision it was
    /// written at; `None` when it changed since (or is gone): read it again.
    fn replace_topic(
        &mut self,
        record: TopicRecord,
        expected: i64,
    ) -> impl Future<Output = Result<Option<i64>, RegistryError>> {
        let _ = (record, expected);
        async {
            Err(RegistryError::Unavailable {
                reason: "a single-broker registry does not move partitions".into(),
            })
        }
    }

    /// Records that this broker's shards serve `topics` (name and id) as
    /// of their records at `revision` (a [`RegistryEvent::TopicPut`]'s or
    /// a [`RegistryEvent::Resync`]'s), for the broker that changed them to
    /// see ([`Registry::served_waiter`]); a topic whose record changed
    /// since (deleted, created again) is left alone. A single-broker store
    /// has no one to tell.
    fn mark_served(
        &mut self,
        topics: &[(String, String)],
        revision: i64,
    ) -> impl Future<Output = Result<(), RegistryError>> {
        let _ = (topics, revision);
        async { Ok(()) }
    }

    /// A wait, free of the registry (it runs beside the control thread's
    /// loop), until every live broker has applied `topic_id`'s record as of
    /// `revision` or later ([`Registry::mark_served`]), ending with
    /// [`RegistryError::NotServed`] after `timeout`. `None` for a
    /// single-broker store: its one broker applied the change before it
    /// asked.
    fn served_waiter(
        &self,
        topic_id: &str,
        revision: i64,
        timeout: Duration,
    ) -> Option<ServedWait> {
        let _ = (topic_id, revision, timeout);
        None
    }

    /// The next change made elsewhere. Cancel-safe: dropping the future
    /// loses no event. Never resolves for a single-broker store.
    fn next_event(&mut self) -> impl Future<Output = RegistryEvent>;

    /// The states of `topic_id`'s replicated partitions that have a key
    /// (one without is in its initial state). A single-broker store has no
    /// replicated topics.
    fn partition_states(
        &mut self,
        topic_id: &str,
    ) -> impl Future<Output = Result<BTreeMap<u32, Versioned>, RegistryError>> {
        let _ = topic_id;
        async { Ok(BTreeMap::new()) }
    }

    /// Applies each update whose partition is still at its expected
    /// revision; each succeeds or fails on its own (batched within etcd's
    /// limit on operations per transaction).
    fn update_partitions(
        &mut self,
        topic_id: &str,
        updates: Vec<PartitionUpdate>,
    ) -> impl Future<Output = Result<Vec<UpdateOutcome>, RegistryError>> {
        let _ = (topic_id, updates);
        async {
            Err(RegistryError::Unavailable {
                reason: "a single-broker registry keeps no replicated partitions".into(),
            })
        }
    }

    /// The users and access control rules.
    fn security(
        &mut self,
    ) -> impl Future<Output = Result<crate::security::SecurityRecords, RegistryError>>;

    /// Changes the users or the access control rules.
    fn change_security(
        &mut self,
        change: crate::security::SecurityChange,
    ) -> impl Future<Output = Result<crate::security::Changed, RegistryError>>;

    /// Takes `count` producer ids no one has had, and no one will: the
    /// next block of the store's counter, durable when the future
    /// resolves `Ok`.
    fn producer_ids(
        &mut self,
        count: u32,
    ) -> impl Future<Output = Result<std::ops::Range<i64>, RegistryError>>;

    /// Serves a Kafka group operation ([`crate::kafka_groups`]).
    fn kafka_group(
        &mut self,
        op: crate::kafka_groups::KafkaGroupOp,
    ) -> impl Future<Output = Result<crate::kafka_groups::KafkaGroupAnswer, RegistryError>> {
        let _ = op;
        async {
            Err(RegistryError::Unavailable {
                reason: "this registry keeps no Kafka groups".into(),
            })
        }
    }

    /// Removes a deleted topic's committed offsets from every Kafka group.
    fn forget_kafka_offsets(
        &mut self,
        topic: &str,
    ) -> impl Future<Output = Result<(), RegistryError>> {
        let _ = topic;
        async { Ok(()) }
    }

    /// Which cluster the registry holds, for a store shared by a cluster
    /// (etcd); `None` for a single-broker store.
    fn identity(&self) -> Option<Identity> {
        None
    }

    /// This broker's lease, for a store that has one (etcd).
    fn lease_clock(&self) -> Option<std::sync::Arc<LeaseClock>> {
        None
    }

    /// The consumer group registries, where the store has them (etcd);
    /// `None` for a single-broker store.
    fn groups(&self) -> Option<Self::Groups> {
        None
    }

    /// A graceful stop: leave the cluster at once (an etcd registration is
    /// revoked rather than left to expire).
    fn close(&mut self) -> impl Future<Output = ()> {
        async {}
    }
}

#[allow(clippy::unwrap_used)] // a test: a failed step is the failure
pub mod conformance {
    //! The behaviour every [`Registry`] must have, as a test that any
    //! implementation runs (the etcd one from the integration tests, against
    //! a real etcd).
    use super::*;

    fn record(name: &str, brokers: Vec<BrokerId>) -> TopicRecord {
        let overrides = TopicSettings {
            retention_ms: 60_000,
            flush_interval_ms: 5,
            ..TopicSettings::default()
        };
        TopicRecord::new(name, overrides, brokers)
    }

    /// A broker record for tests.
    pub fn broker(id: BrokerId) -> BrokerRecord {
        BrokerRecord {
            broker_id: id,
            shards: vec![ShardEndpoint {
                shard_id: 0,
                host: "127.0.0.1".into(),
                port: 9092,
                kafka_port: None,
            }],
            version: "test".into(),
            data_dir_id: format!("test-{id}"),
            incarnation: format!("run-{id}"),
            rack: None,
        }
    }

    /// Creates, lists, refuses duplicates, deletes, refuses unknown names.
    /// Expects a registry with no topics, in which `me` is live.
    pub async fn check(registry: &mut impl Registry, me: BrokerId) {
        {
            let brokers = registry.brokers().await.unwrap();
            assert!(brokers.iter().any(|b| b.broker_id == me), "{brokers:?}");
            assert_eq!(registry.topics().await.unwrap(), vec![]);
            let b = record("b", vec![me; 3]);
            let a = record("a", vec![me]);
            registry.create_topic(b.clone()).await.unwrap();
            registry.create_topic(a.clone()).await.unwrap();
            let error = registry.create_topic(record("a", vec![me; 2])).await;
            assert!(
                matches!(error, Err(RegistryError::TopicExists { ref name }) if name == "a"),
                "{error:?}"
            );
            assert_eq!(registry.topics().await.unwrap(), vec![a.clone(), b.clone()]);
            assert_eq!(registry.delete_topic("a").await.unwrap(), a);
            let error = registry.delete_topic("a").await;
            assert!(
                matches!(error, Err(RegistryError::UnknownTopic { ref name }) if name == "a"),
                "{error:?}"
            );
            assert_eq!(registry.topics().await.unwrap(), vec![b]);
        }
        check_security(registry).await;
        check_producer_ids(registry).await;
    }

    /// Blocks of producer ids never overlap and never go back.
    pub async fn check_producer_ids(registry: &mut impl Registry) {
        let first = registry.producer_ids(1000).await.unwrap();
        assert_eq!(first.end - first.start, 1000);
        assert!(first.start >= 0);
        let second = registry.producer_ids(1).await.unwrap();
        assert!(second.start >= first.end, "{first:?} then {second:?}");
        assert_eq!(second.end - second.start, 1);
    }

    /// Users and access rules: stored, replaced, removed, counted.
    #[expect(
        clippy::too_many_lines,
        reason = "the conformance test every registry passes for security records: one scenario"
    )]
    pub async fn check_security(registry: &mut impl Registry) {
        use crate::security::{Changed, SecurityChange};
        use protocol::acl::AclRule;
        use protocol::scram::{Credential, ITERATIONS_MIN};
        let empty = registry.security().await.unwrap();
        assert!(empty.users.is_empty() && empty.acls.is_empty(), "{empty:?}");
        // A login secret, made once and the same at every read.
        assert_eq!(empty.login_secret.len(), 32);
        assert_eq!(
            registry.security().await.unwrap().login_secret,
            empty.login_secret
        );
        let alice = Credential::new(b"one", ITERATIONS_MIN);
        let again = Credential::new(b"two", ITERATIONS_MIN);
        let users =
            |upserts: Vec<(&str, &Credential)>, deletions: Vec<&str>| SecurityChange::Users {
                upserts: upserts
                    .into_iter()
                    .map(|(n, c)| (n.to_string(), c.clone()))
                    .collect(),
                deletions: deletions.into_iter().map(str::to_string).collect(),
            };
        let changed = registry
            .change_security(users(vec![("alice", &alice), ("bob", &alice)], vec![]))
            .await
            .unwrap();
        assert_eq!(
            changed,
            Changed {
                added: 2,
                removed: 0
            }
        );
        let changed = registry
            .change_security(users(vec![("alice", &again)], vec!["bob", "carol"]))
            .await
            .unwrap();
        assert_eq!(
            changed,
            Changed {
                added: 1,
                removed: 1
            }
        );
        let read = AclRule::parse("allow User:alice read topic:clicks").unwrap();
        let deny = AclRule::parse("deny User:* write topic-prefix:audit.").unwrap();
        let changed = registry
            .change_security(SecurityChange::AddAcls(vec![
                read.clone(),
                deny.clone(),
                read.clone(),
            ]))
            .await
            .unwrap();
        assert_eq!(changed.added, 2);
        let stored = registry.security().await.unwrap();
        assert_eq!(stored.users.len(), 1);
        assert_eq!(stored.users.get("alice"), Some(&again));
        assert_eq!(stored.acls, vec![read.clone(), deny.clone()]);
        let changed = registry
            .change_security(SecurityChange::RemoveAcls(vec![read.clone(), read]))
            .await
            .unwrap();
        assert_eq!(changed.removed, 1);
        assert_eq!(registry.security().await.unwrap().acls, vec![deny.clone()]);
        // A request's worth of rules: more than one etcd transaction holds.
        let many: Vec<AclRule> = (0..300)
            .map(|i| AclRule::parse(&format!("allow User:u{i} read topic:t{i}")).unwrap())
            .collect();
        let changed = registry
            .change_security(SecurityChange::AddAcls(many.clone()))
            .await
            .unwrap();
        assert_eq!(changed.added, 300);
        assert_eq!(registry.security().await.unwrap().acls.len(), 301);
        let changed = registry
            .change_security(SecurityChange::RemoveAcls(many))
            .await
            .unwrap();
        assert_eq!(changed.removed, 300);
        assert_eq!(registry.security().await.unwrap().acls, vec![deny]);
    }

    /// Reads a record with its revision and rewrites it only at that
    /// revision. For the stores that move partitions (not the
    /// single-broker one). Expects a registry without a topic `moving`.
    pub async fn check_replace(registry: &mut impl Registry, me: BrokerId) {
        assert_eq!(registry.topic("moving").await.unwrap(), None);
        let first = record("moving", vec![me; 2]);
        let created = registry.create_topic(first.clone()).await.unwrap();
        let (read, revision) = registry.topic("moving").await.unwrap().unwrap();
        assert_eq!(read, first);
        assert_eq!(revision, created, "create says the revision it wrote");
        let moved = first.start_reassignment(1, &[me + 1]).unwrap().unwrap();
        let written = registry
            .replace_topic(moved.clone(), revision)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            registry
                .replace_topic(first.clone(), revision)
                .await
                .unwrap(),
            None,
            "a stale revision is refused"
        );
        let (now, newer) = registry.topic("moving").await.unwrap().unwrap();
        assert_eq!(now, moved);
        assert!(newer > revision);
        assert_eq!(newer, written, "replace says the revision it wrote");
        registry.delete_topic("moving").await.unwrap();
        assert_eq!(
            registry.replace_topic(moved, newer).await.unwrap(),
            None,
            "gone"
        );
    }
}
