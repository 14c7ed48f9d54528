//! A shard: one glommio executor pinned to one core, owning a disjoint set of
//! partitions for their whole life.
//!
//! Everything here is `!Send` (`Rc`, `RefCell`, `Cell`): nothing on the
//! produce or fetch path takes a lock or touches another shard's memory.
//! Shards talk only through their inboxes ([`crate::mailbox::ShardMsg`]).

pub mod placement;
mod topic_change;

use crate::topic_error::TopicError;

use crate::config::Config;
use crate::mailbox::{ControlMsg, ShardMsg};
use crate::metrics::ShardMetrics;
use crate::replica::epochs::Epochs;
use crate::replica::{Replica, SharedReplica};
use crate::storage::io::DiskStorage;
use crate::storage::partition_log::{self, now_ms, PartitionLog, SharedLog};
use crate::storage::{partition_dir_name, LogSettings};
use coordinator::registry::{BrokerRecord, TopicRecord};
use coordinator::replicas::Versioned;
use protocol::codec::{PartitionPlacement, TopicMetadata, TopicSettings};
use protocol::types::{BrokerId, PartitionId, ShardId};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

/// Partitions of a new topic a shard opens at once (their directories'
/// fdatasyncs overlap).
const PARTITIONS_OPENED_AT_ONCE: usize = 64;

/// A topic as one shard sees it: every shard knows every topic, and holds
/// logs only for the partitions it owns.
#[derive(Debug)]
pub struct Topic {
    /// The topic's name.
    pub name: String,
    /// Its id, unique per creation (empty for a record from before ids).
    pub id: String,
    /// Number of partitions.
    pub partitions: u32,
    /// The broker that stores each partition, indexed by partition.
    pub brokers: Vec<BrokerId>,
    /// The effective settings.
    pub settings: LogSettings,
    /// What the topic's record sets itself (0: the broker's default).
    pub overrides: TopicSettings,
    /// Logs of the partitions this shard owns (on a replicated topic: the
    /// partitions this broker holds a copy of).
    pub logs: HashMap<PartitionId, SharedLog>,
    /// The brokers of each partition's copies, the preferred leader first
    /// (empty: one copy, on `brokers[p]`).
    pub replica_sets: Vec<Vec<BrokerId>>,
    /// Each partition's replication state (replicated topics only).
    pub states: Vec<Versioned>,
    /// This shard's copies of replicated partitions.
    pub replicas: HashMap<PartitionId, SharedReplica>,
    /// Fewest in-sync replicas acks=all accepts.
    pub min_insync: u32,
    /// Copies count written bytes, not flushed ones.
    pub write_caching: bool,
    /// A mirror's target topic: where it is mirrored from.
    pub mirror_source: Option<String>,
    /// A promoted copy: what it was mirrored from, and where each
    /// partition's copy then ended (Metadata reports them for a failback).
    pub promoted: (Option<String>, Vec<u64>),
    /// Partitions moving, and the replica set each moves to.
    pub reassigning: BTreeMap<PartitionId, Vec<BrokerId>>,
}

impl Topic {
    /// True when its partitions have more than one copy.
    pub fn is_replicated(&self) -> bool {
        !self.replica_sets.is_empty()
    }

    /// The broker that takes `partition`'s requests: its leader, or its
    /// one broker.
    pub fn leader_of(&self, partition: PartitionId) -> Option<BrokerId> {
        match self.states.get(partition as usize) {
            Some(state) => Some(state.state.leader),
            None => self.brokers.get(partition as usize).copied(),
        }
    }
}

/// Where a partition lives, seen from one shard: three different answers,
/// each with its own path (serve, forward over an inbox, or tell the client
/// which broker to ask), never confused.
pub enum Owner {
    /// This shard owns it: here is its log.
    Here(SharedLog),
    /// Another shard of this broker owns it.
    Shard(ShardId),
    /// Another broker stores it.
    Broker(BrokerId),
}

/// One shard's state. Not `Send`; owned by its executor thread.
pub struct Shard {
    /// This shard's id.
    pub id: ShardId,
    /// The broker's configuration.
    pub config: Rc<Config>,
    /// Each shard's listening address, by shard id.
    pub addresses: Vec<SocketAddr>,
    /// Every shard's inbox, by shard id (including this one's).
    pub peers: Vec<flume::Sender<ShardMsg>>,
    /// Topics by name.
    pub topics: RefCell<BTreeMap<String, Rc<RefCell<Topic>>>>,
    /// Counters and histograms.
    pub metrics: ShardMetrics,
    /// Set once a graceful stop begins.
    pub stopping: Cell<bool>,
    /// Responses queued on this shard's connections and not yet written;
    /// a graceful stop waits (briefly) for them.
    pub responses_pending: Cell<usize>,
    /// Signalled when `responses_pending` drops.
    pub responses_written: crate::notify::Notify,
    /// The control thread, which owns the topic registry.
    pub control: flume::Sender<ControlMsg>,
    /// The live brokers (this one among them), sorted by id, as the
    /// control thread last reported them.
    pub brokers: RefCell<Vec<BrokerRecord>>,
    /// Bumped whenever the topics this shard knows or the live brokers
    /// change: the cached Metadata of every topic is for one version.
    pub metadata_version: Cell<u64>,
    /// The encoded Metadata header of every topic, and its version.
    pub metadata_all: RefCell<Option<(u64, Vec<u8>)>>,
    /// Connections this shard serves now.
    pub connections: Cell<usize>,
    /// One log line per second for refused connections and failed accepts.
    pub accept_problems: crate::log_limit::LogLimit,
    /// One log line per second for failed fire-and-forget produces.
    pub failed_silent_produces: crate::log_limit::LogLimit,
    /// The users and access rules as this shard last saw them published.
    pub security: crate::auth::Cache,
    /// The connections logged in with SCRAM, ended when their user is
    /// removed (`auth/sessions.rs`).
    pub sessions: Rc<crate::auth::sessions::Sessions>,
    /// The Kafka groups this shard coordinates (`kafka/group/`).
    pub kafka_groups: crate::kafka::group::table::Groups,
    /// One log line per second for denied requests.
    pub denials_log: crate::log_limit::LogLimit,
    /// One log line per second for failed logins.
    pub login_failures_log: crate::log_limit::LogLimit,
    /// The shard's disk: every partition's flushes are batched by its one
    /// driver (appends go straight to io_uring).
    pub storage: DiskStorage,
    /// Unwritten bytes of this shard's partitions, against its share of
    /// `unwritten_bytes_max`.
    pub unwritten: Rc<crate::storage::budget::UnwrittenBudget>,
    /// Logs with unwritten, unflushed or un-checkpointed bytes: the flush
    /// timer visits only these, so its cost per tick follows the partitions
    /// being written, not the partitions that exist (issue 9, item 2).
    pub timer_work: RefCell<Vec<SharedLog>>,
    /// A reusable flatbuffers builder for response headers.
    pub fbb: RefCell<protocol::flatbuffers::FlatBufferBuilder<'static>>,
    /// This process's incarnation (its registration's): a follower's
    /// fetches carry it, so a leader sees a restart (KIP-903).
    pub incarnation: String,
    /// This broker's data directory id (made with the directory): the
    /// ISR records it for each member.
    pub data_dir_id: String,
    /// True while the shard opens the topics the registry held at start:
    /// a replicated partition's directory that is not there then (a new
    /// data directory, or one partition's removed) is a new copy, holding
    /// nothing of the partition's history.
    pub starting: Cell<bool>,
    /// This broker's etcd lease (clustered): a leader that may have lost
    /// it takes no writes.
    pub lease: Option<std::sync::Arc<coordinator::registry::LeaseClock>>,
    /// The follower links running, by (leader broker, leader shard).
    pub links: RefCell<std::collections::HashSet<crate::replica::LinkKey>>,
    /// Notified when the partitions this shard follows may have changed:
    /// a link waiting on its leader with an older set starts again.
    pub follows_changed: crate::notify::Notify,
}

impl Shard {
    /// The number of shards in this broker.
    pub fn shard_count(&self) -> usize {
        self.peers.len()
    }

    /// The shard of this broker that owns a partition stored here.
    pub fn owner_of(&self, topic: &str, partition: PartitionId) -> ShardId {
        placement::owner_shard(topic, partition, self.shard_count())
    }

    /// Where a partition lives: here, on another shard, or on another
    /// broker. An unknown topic or partition is an error for the client.
    pub fn locate(&self, topic_name: &str, partition: PartitionId) -> Result<Owner, LocateError> {
        let Some(topic) = self.topic(topic_name) else {
            return Err(LocateError::UnknownTopic);
        };
        let topic = topic.borrow();
        let Some(broker) = topic.leader_of(partition) else {
            return Err(LocateError::UnknownPartition {
                partitions: topic.partitions,
            });
        };
        if topic.is_replicated() {
            let holds = topic
                .replica_sets
                .get(partition as usize)
                .is_some_and(|set| set.contains(&self.config.broker_id));
            return Ok(match topic.logs.get(&partition) {
                Some(log) => Owner::Here(log.clone()),
                None if holds => Owner::Shard(self.owner_of(topic_name, partition)),
                None => Owner::Broker(broker),
            });
        }
        if broker != self.config.broker_id {
            return Ok(Owner::Broker(broker));
        }
        Ok(match topic.logs.get(&partition) {
            Some(log) => Owner::Here(log.clone()),
            None => Owner::Shard(self.owner_of(topic_name, partition)),
        })
    }

    /// The topic, if it exists.
    pub fn topic(&self, name: &str) -> Option<Rc<RefCell<Topic>>> {
        self.topics.borrow().get(name).cloned()
    }

    /// This shard's copy of a replicated partition, if it holds one.
    pub fn replica(&self, topic: &str, partition: PartitionId) -> Option<SharedReplica> {
        self.topic(topic)?
            .borrow()
            .replicas
            .get(&partition)
            .cloned()
    }

    /// Every copy of a replicated partition this shard holds.
    pub fn all_replicas(&self) -> Vec<SharedReplica> {
        self.topics
            .borrow()
            .values()
            .flat_map(|t| t.borrow().replicas.values().cloned().collect::<Vec<_>>())
            .collect()
    }

    /// Takes newer replication states of a topic's partitions: each copy
    /// here learns its role and Metadata changes. True when something
    /// changed: then the follower links must follow the leaders
    /// ([`crate::replica::tasks::learn`] does both).
    pub fn learn_states(&self, topic_id: &str, states: &[(PartitionId, Versioned)]) -> bool {
        let Some(topic) = self
            .topics
            .borrow()
            .values()
            .find(|t| t.borrow().id == topic_id)
            .cloned()
        else {
            return false;
        };
        let mut changed = false;
        {
            let mut t = topic.borrow_mut();
            for (partition, state) in states {
                let Some(slot) = t.states.get_mut(*partition as usize) else {
                    continue;
                };
                let newer = state.revision > slot.revision
                    || (state.revision == slot.revision && state.state != slot.state);
                if newer {
                    *slot = state.clone();
                    changed = true;
                }
                if let Some(replica) = t.replicas.get(partition) {
                    if !newer && replica.borrow().known {
                        continue;
                    }
                    changed = true;
                    let was_leader = replica.borrow().leads();
                    replica.borrow_mut().learn(state.clone());
                    if !was_leader && replica.borrow().leads() {
                        crate::metrics::bump(&self.metrics.counters.leader_elections_total, 1);
                    }
                }
            }
        }
        if changed {
            self.metadata_changed();
        }
        changed
    }

    /// Invalidates the cached Metadata (topics or brokers changed).
    pub fn metadata_changed(&self) {
        self.metadata_version.set(self.metadata_version.get() + 1);
    }

    /// The shard count of a live broker (`None` if it is not live).
    pub fn shard_count_of(&self, broker: BrokerId) -> Option<usize> {
        if broker == self.config.broker_id {
            return Some(self.shard_count());
        }
        self.brokers
            .borrow()
            .iter()
            .find(|b| b.broker_id == broker)
            .map(|b| b.shards.len())
            .filter(|&n| n > 0)
    }

    /// The metadata of a topic, as Metadata and CreateTopic report it. A
    /// partition whose broker is not live gets shard 0; clients see that
    /// its broker is missing from the broker list.
    pub fn topic_metadata(&self, topic: &Topic) -> TopicMetadata {
        TopicMetadata {
            name: topic.name.clone(),
            partitions: (0..topic.partitions)
                .map(|p| {
                    let broker_id = topic.leader_of(p).unwrap_or(0);
                    let state = topic.states.get(p as usize);
                    PartitionPlacement {
                        partition: p,
                        broker_id,
                        shard_id: self
                            .shard_count_of(broker_id)
                            .map_or(0, |count| placement::owner_shard(&topic.name, p, count)),
                        leader_epoch: state.map_or(-1, |s| s.state.leader_epoch as i32),
                        replicas: topic
                            .replica_sets
                            .get(p as usize)
                            .cloned()
                            .unwrap_or_default(),
                        isr: state.map(|s| s.state.isr.clone()).unwrap_or_default(),
                        moving_to: topic.reassigning.get(&p).cloned().unwrap_or_default(),
                    }
                })
                .collect(),
            settings: TopicSettings {
                retention_ms: topic.settings.retention_ms,
                retention_bytes: topic.settings.retention_bytes,
                segment_bytes: topic.settings.segment_bytes,
                flush_messages: topic.settings.flush_messages,
                flush_interval_ms: topic.settings.flush_interval_ms,
                replication_factor: topic.replica_sets.first().map_or(1, |s| s.len() as u32),
                min_insync_replicas: topic.min_insync,
                write_caching: topic.write_caching,
                message_format: topic.settings.format.number(),
                timestamp_type: topic.settings.timestamps as u32,
            },
            overrides: topic.overrides,
            id: topic.id.clone(),
            mirror_source: topic.mirror_source.clone().unwrap_or_default(),
            promoted_from: topic.promoted.0.clone().unwrap_or_default(),
            promoted_ends: topic.promoted.1.clone(),
        }
    }

    /// Opens the partitions of `stored` that this shard owns and registers
    /// the topic. Used at start-up and when a topic is created.
    pub async fn open_topic(&self, stored: &TopicRecord) -> Result<(), TopicError> {
        stored.check()?;
        if let Some(errno) = crate::faults::Faults::get().open_topic_errno {
            return Err(TopicError::Open {
                label: stored.name.clone(),
                source: crate::storage::StorageError::Io {
                    op: "opening (an injected fault)",
                    path: self.config.data_dir.join(&stored.name),
                    source: std::io::Error::from_raw_os_error(errno),
                },
            });
        }
        let settings = self.config.stored_topic_settings(&stored.overrides())?;
        let mut logs = HashMap::new();
        let mut replicas = HashMap::new();
        let mine: Vec<PartitionId> = (0..stored.partitions)
            .filter(|&p| {
                stored.has_replica(p, self.config.broker_id)
                    && self.owner_of(&stored.name, p) == self.id
            })
            .collect();
        // Opened PARTITIONS_OPENED_AT_ONCE at a time: each claims its
        // directory with an fdatasync, and 8,000 of them one after another
        // took 10-30 s on a busy machine.
        let opened = crate::window::in_order(
            mine.iter()
                .map(|&p| self.open_partition(stored, p, settings)),
            PARTITIONS_OPENED_AT_ONCE,
        )
        .await;
        debug_assert_eq!(opened.len(), mine.len());
        for (partition, opened) in mine.into_iter().zip(opened) {
            let (log, replica) = opened?;
            if let Some(replica) = replica {
                replicas.insert(partition, replica);
            }
            logs.insert(partition, log);
        }
        let states = if stored.is_replicated() {
            (0..stored.partitions)
                .map(|p| Versioned {
                    state: stored.initial_state(p),
                    revision: 0,
                })
                .collect()
        } else {
            Vec::new()
        };
        let topic = Topic {
            name: stored.name.clone(),
            id: stored.id.clone(),
            partitions: stored.partitions,
            brokers: stored.brokers.clone(),
            settings,
            overrides: stored.overrides(),
            logs,
            replica_sets: stored.replicas.clone(),
            states,
            replicas,
            min_insync: stored.min_insync_replicas.max(1),
            write_caching: stored.write_caching,
            mirror_source: stored.mirror_source.clone(),
            promoted: (stored.promoted_from.clone(), stored.promoted_ends.clone()),
            reassigning: stored.reassigning.clone(),
        };
        self.topics
            .borrow_mut()
            .insert(stored.name.clone(), Rc::new(RefCell::new(topic)));
        self.metadata_changed();
        Ok(())
    }

    /// Opens one partition of `stored` in its directory (claimed for the
    /// topic's id; one of an earlier topic of the name is moved aside
    /// first), recovering its tail; on a replicated topic with its copy's
    /// replica, which takes no role until the registry's state arrives.
    #[expect(
        clippy::too_many_lines,
        reason = "a partition's opening in order: claim, recover, cut, mark, replica"
    )]
    pub async fn open_partition(
        &self,
        stored: &TopicRecord,
        partition: PartitionId,
        settings: LogSettings,
    ) -> Result<(SharedLog, Option<SharedReplica>), TopicError> {
        let label = partition_dir_name(&stored.name, partition);
        let dir = self.config.data_dir.join(&label);
        // A directory of another topic of this name (deleted while this
        // broker was down, or during a crash) is never opened as this one.
        let claim = crate::storage::topic_id::claim(&self.storage, &dir, &stored.id)
            .await
            .map_err(|source| TopicError::Open {
                label: label.clone(),
                source,
            })?;
        if let crate::storage::topic_id::Claim::Other(old) = claim {
            crate::storage::sweep::move_aside(
                &dir,
                &format!(
                    "it belongs to an earlier topic {:?} (id {old}), not to the one with id {}",
                    stored.name, stored.id
                ),
            )
            .map_err(|source| TopicError::MoveAside {
                label: label.clone(),
                source,
            })?;
            crate::metrics::bump(&self.metrics.counters.partitions_orphaned_total, 1);
            crate::storage::topic_id::claim(&self.storage, &dir, &stored.id)
                .await
                .map_err(|source| TopicError::Open {
                    label: label.clone(),
                    source,
                })?;
        }
        let (mut log, recovered) = PartitionLog::open(self.storage.clone(), &dir, &label, settings)
            .await
            .map_err(|source| TopicError::Open {
                label: label.clone(),
                source,
            })?;
        log.set_flush_stats(self.metrics.flush.clone());
        log.set_budget(self.unwritten.clone());
        if crate::storage::lost::is_marked(&dir) {
            log.mark_lost();
        }
        let counters = &self.metrics.counters;
        crate::metrics::bump(&counters.segments_damaged_total, recovered.damaged_segments);
        crate::metrics::bump(&counters.recovery_bytes_cut_total, recovered.bytes_cut);
        if recovered.bytes_cut > 0
            || recovered.bytes_scanned > 0
            || recovered.bytes_synced > 0
            || recovered.damaged_segments > 0
        {
            tracing::info!(
                partition = %label,
                bytes_scanned = recovered.bytes_scanned,
                bytes_cut = recovered.bytes_cut,
                bytes_synced = recovered.bytes_synced,
                damaged_segments = recovered.damaged_segments,
                end_offset = log.end_offset(),
                "recovered partition"
            );
        }
        if stored.is_replicated() {
            // Nothing is visible until the leader says what is committed.
            log.set_high_watermark(0);
        }
        let log = Rc::new(RefCell::new(log));
        if stored.is_replicated() {
            let cut = partition_log::cut_uncommitted_damage(&log, recovered.first_damaged)
                .await
                .map_err(|source| TopicError::Open {
                    label: label.clone(),
                    source,
                })?;
            if cut > 0 {
                tracing::warn!(partition = %label, bytes_cut = cut, end_offset = log.borrow().end_offset(), "recovery: a damaged message above the committed high watermark; the copy is cut there and fetches the rest from its leader");
                crate::metrics::bump(&self.metrics.counters.recovery_bytes_cut_total, cut);
            }
        }
        // A recovered tail above the recovery point gets its new
        // recovery point from the timer.
        if log.borrow().has_timer_work() {
            self.needs_timer(&log);
        }
        let replica = stored
            .is_replicated()
            .then(|| self.new_replica(stored, partition, &log));
        if let Some(replica) = &replica {
            // A topic that existed before this run, whose directory was
            // not there (or is marked): whatever the registry says of this
            // broker's copy, this one holds nothing (issue 47).
            let new_copy =
                self.starting.get() && self.config.copies_at_start.is_new(stored, partition);
            if new_copy {
                crate::storage::new_copy::mark(&dir).map_err(|source| TopicError::MarkNewCopy {
                    label: label.clone(),
                    source,
                })?;
                tracing::warn!(partition = %label, "no directory for this broker's copy of a partition that existed before this run (a new data directory, or its partition directory removed), or a new copy an earlier run did not finish: the copy starts outside the ISR and catches up from the leader");
            }
            replica.borrow_mut().new_copy = new_copy;
        }
        Ok((log, replica))
    }

    /// The replica of a copy of `stored`'s `partition` kept in `log`.
    pub fn new_replica(
        &self,
        stored: &TopicRecord,
        partition: PartitionId,
        log: &SharedLog,
    ) -> SharedReplica {
        let dir = log.borrow().dir().to_path_buf();
        let epochs = Epochs::load(&self.storage, &dir);
        let mut replica = Replica::new(
            &stored.name,
            &stored.id,
            partition,
            stored.initial_state(partition),
            stored.replicas_of(partition),
            stored.min_insync_replicas,
            self.config.broker_id,
            log.clone(),
            epochs,
        );
        replica.moving_to = stored.moving_to(partition).map(<[BrokerId]>::to_vec);
        replica.disk = self.data_dir_id.clone();
        replica.run = self.incarnation.clone();
        log.borrow_mut().set_write_caching(stored.write_caching);
        Rc::new(RefCell::new(replica))
    }

    /// Forgets a topic and deletes this shard's partition directories,
    /// crash-safely (see [`crate::storage::sweep`]) — if the topic this
    /// shard has under that name is the one with id `id` (empty: whichever
    /// it is). Fails when a directory could not be moved aside; the next
    /// start moves it aside then.
    pub fn drop_topic(
        &self,
        name: &str,
        id: &str,
    ) -> Result<(), crate::storage::sweep::DeleteError> {
        let Some(logs) = self.forget_topic(name, id) else {
            return Ok(());
        };
        crate::storage::sweep::delete_partition_dirs(&logs)
    }

    /// Forgets a topic that the registry no longer lists although no delete
    /// was seen (a snapshot from an etcd restored from an older backup):
    /// its partition directories are moved aside, never deleted. Returns
    /// how many were.
    pub fn orphan_topic(&self, name: &str) -> usize {
        let Some(dirs) = self.forget_topic(name, "") else {
            return 0;
        };
        let mut moved = 0;
        for dir in dirs {
            match crate::storage::sweep::move_aside(
                &dir,
                "the registry's snapshot no longer lists its topic, and no delete of it was seen (an etcd restored from an older backup?)",
            ) {
                Ok(_) => moved += 1,
                Err(error) => {
                    tracing::error!(dir = %dir.display(), %error, "moving a partition directory aside; it is moved aside at the next start")
                }
            }
        }
        crate::metrics::bump(
            &self.metrics.counters.partitions_orphaned_total,
            moved as u64,
        );
        moved
    }

    /// Removes the topic (if it is the one with id `id`, or any with an
    /// empty `id`) and closes its logs; returns their directories.
    fn forget_topic(&self, name: &str, id: &str) -> Option<Vec<std::path::PathBuf>> {
        let matches = self
            .topic(name)
            .is_some_and(|t| id.is_empty() || t.borrow().id.is_empty() || t.borrow().id == id);
        if !matches {
            return None;
        }
        let topic = self.topics.borrow_mut().remove(name)?;
        self.metadata_changed();
        let topic = topic.borrow();
        let mut dirs = Vec::new();
        for log in topic.logs.values() {
            log.borrow_mut().close_for_delete();
            dirs.push(log.borrow().dir().to_path_buf());
        }
        Some(dirs)
    }

    /// Puts a log that was just appended to on the flush timer's list.
    pub fn needs_timer(&self, log: &SharedLog) {
        if log.borrow_mut().list() {
            self.timer_work.borrow_mut().push(log.clone());
        }
    }

    /// Partitions here whose data vanished (for the metrics).
    pub fn lost_partitions(&self) -> u64 {
        self.topics
            .borrow()
            .values()
            .map(|t| {
                t.borrow()
                    .logs
                    .values()
                    .filter(|l| l.borrow().lost())
                    .count() as u64
            })
            .sum()
    }

    /// Every log this shard owns.
    pub fn all_logs(&self) -> Vec<SharedLog> {
        self.topics
            .borrow()
            .values()
            .flat_map(|t| t.borrow().logs.values().cloned().collect::<Vec<_>>())
            .collect()
    }
}

/// Why [`Shard::locate`] found no owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocateError {
    /// No such topic.
    UnknownTopic,
    /// The topic has only `partitions` partitions.
    UnknownPartition {
        /// How many it has.
        partitions: u32,
    },
}

/// The flush timer: writes pending bytes and flushes partitions whose policy
/// is due, and records recovery points about once a second. It visits only
/// the logs on the shard's work list ([`Shard::timer_work`]).
pub async fn run_flusher(shard: Rc<Shard>) {
    let tick =
        Duration::from_millis((shard.config.topic_defaults.flush_interval_ms / 2).clamp(1, 100));
    let mut last_checkpoint = Instant::now();
    while !shard.stopping.get() {
        glommio::timer::sleep(tick).await;
        let now = Instant::now();
        let checkpoint = now.duration_since(last_checkpoint) >= Duration::from_secs(1);
        let logs = std::mem::take(&mut *shard.timer_work.borrow_mut());
        let mut keep = Vec::with_capacity(logs.len());
        for log in logs {
            if partition_log::tick(&log, now, checkpoint) {
                keep.push(log);
            } else {
                log.borrow_mut().unlist();
            }
        }
        // Appends during this tick listed new logs; keep them too.
        shard.timer_work.borrow_mut().append(&mut keep);
        if checkpoint {
            last_checkpoint = now;
        }
    }
}

/// How the shard's disk driver closes idle segment files when the shard is at
/// its open-file limit: the least recently used of all its partitions'
/// closable files (flushed, held by no write, flush or fetch), up to `n`.
/// Logs and topics busy at the moment (borrowed by the caller of the open)
/// are passed over.
pub fn evictor(shard: Weak<Shard>) -> crate::storage::driver::Evictor {
    Box::new(move |n| {
        let Some(shard) = shard.upgrade() else {
            return 0;
        };
        let Ok(topics) = shard.topics.try_borrow() else {
            return 0;
        };
        let mut logs = Vec::new();
        for topic in topics.values() {
            if let Ok(topic) = topic.try_borrow() {
                logs.extend(topic.logs.values().cloned());
            }
        }
        drop(topics);
        let mut candidates: Vec<(Instant, usize, u64)> = Vec::new();
        for (index, log) in logs.iter().enumerate() {
            if let Ok(log) = log.try_borrow() {
                let files = log.closable_files();
                candidates.extend(files.into_iter().map(|(used, base)| (used, index, base)));
            }
        }
        if candidates.len() > n {
            candidates.select_nth_unstable(n);
            candidates.truncate(n);
        }
        candidates
            .into_iter()
            .filter(|&(_, index, base)| {
                logs[index]
                    .try_borrow_mut()
                    .is_ok_and(|mut log| log.close_file(base))
            })
            .count()
    })
}

/// Closes segment files nobody used for [`crate::limits::SEGMENT_FILE_IDLE_MS`],
/// so idle partitions and old segments hold no descriptor.
pub async fn run_file_closer(shard: Rc<Shard>) {
    let period = Duration::from_millis(crate::limits::SEGMENT_FILE_CHECK_MS);
    let idle = Duration::from_millis(crate::limits::SEGMENT_FILE_IDLE_MS);
    while !shard.stopping.get() {
        glommio::timer::sleep(period).await;
        let now = Instant::now();
        for log in shard.all_logs() {
            log.borrow_mut().close_idle_files(now, idle);
        }
        if shard.id == 0 {
            // glibc keeps what threads freed in their arenas: after a burst
            // (thousands of partitions' pending buffers) RSS stayed at
            // 370 MB with nothing pending. Give it back to the OS; one call
            // covers every arena, so shard 0 does it for the process.
            // SAFETY: malloc_trim only releases free heap memory.
            unsafe {
                libc::malloc_trim(0);
            }
        }
    }
}

/// Retention: every `retention_check_ms`, drop expired closed segments.
pub async fn run_retention(shard: Rc<Shard>) {
    let period = Duration::from_millis(shard.config.retention_check_ms.max(10));
    while !shard.stopping.get() {
        glommio::timer::sleep(period).await;
        let now = now_ms();
        for log in shard.all_logs() {
            let removed = log.borrow_mut().enforce_retention(now);
            for retired in removed {
                crate::metrics::bump(&shard.metrics.counters.segments_deleted_total, 1);
                glommio::spawn_local(reclaim_when_released(retired)).detach();
            }
        }
    }
}

/// How long a fetch still sending from a segment that retention removed may
/// keep it (Kafka waits `file.delete.delay.ms`, 60 s, too); past it the
/// file is cut and the fetch's connection ends on a short read.
const RETIRED_FILE_GRACE: Duration = Duration::from_secs(60);

/// Hands a removed segment to the reclaim thread once nothing else of the
/// shard holds its file (a fetch sending from it), or after the grace: its
/// blocks are never freed on the shard's thread (`reclaim.rs`).
async fn reclaim_when_released(
    retired: crate::storage::partition_log::Retired<crate::storage::io::DiskFile>,
) {
    if let Some(file) = retired.file {
        let deadline = Instant::now() + RETIRED_FILE_GRACE;
        while Rc::strong_count(&file) > 1 && Instant::now() < deadline {
            glommio::timer::sleep(Duration::from_millis(100)).await;
        }
    }
    crate::storage::reclaim::remove(retired.path);
}

/// Graceful stop, last step: give connections up to `limit` to write the
/// responses already queued (acknowledgements of the final flush among them).
pub async fn drain_responses(shard: &Shard, limit: Duration) {
    let drained = shard
        .responses_written
        .wait_until(|| shard.responses_pending.get() == 0);
    futures_lite::future::or(drained, glommio::timer::sleep(limit)).await;
}

/// Graceful stop of one shard: flush every partition and write exact
/// recovery points so the next start scans nothing.
pub async fn flush_all(shard: &Shard) {
    for log in shard.all_logs() {
        if let Err(error) = partition_log::sync_all(&log).await {
            tracing::error!(partition = %log.borrow().label(), %error, "final flush failed");
            continue;
        }
        let result = log.borrow_mut().checkpoint(true);
        if let Err(error) = result {
            tracing::warn!(%error, "writing final recovery point");
        }
    }
}
