//! The control plane: one thread that owns the topic registry.
//!
//! Shards never touch the registry. A CreateTopic or DeleteTopic handler
//! sends the control thread a [`ControlMsg`] and awaits its answer; the
//! control thread changes the registry (an fsync'd file standalone, etcd in
//! a cluster), then tells every shard over its inbox to open or drop its
//! partitions, waits for all of them, and answers. Admin operations are
//! serialised here, one at a time, so two creates of one name can never
//! both succeed and a delete never overtakes the create it follows.
//!
//! In a cluster the registry also reports what other brokers changed (a
//! topic created or deleted elsewhere, brokers joining and leaving): the
//! control thread keeps the set of topics the shards have open and the live
//! brokers, applies each change to every shard, and reconciles the whole
//! set after etcd was unreachable ([`RegistryEvent::Resync`]).
//!
//! The thread runs a current-thread tokio runtime: the registry's futures
//! need not be `Send`, and the etcd client (tokio/tonic) lives here when
//! the broker runs in a cluster. A shard only ever awaits a flume channel,
//! so a slow or unreachable etcd delays admin answers, never produce or
//! fetch.

pub mod groups;
mod leadership;
pub mod membership;
mod more_partitions;
mod promote;
mod reassign;
mod served;
mod topic_config;

use crate::config::Config;
use crate::mailbox::{ControlError, ControlMsg, GroupAnswer, GroupRequest, ShardMsg};
use coordinator::placement;
use coordinator::registry::{
    BrokerRecord, Foreign, Identity, Registry, RegistryError, RegistryEvent, ServedWait,
    TopicRecord,
};
use coordinator::replicas::{UpdateOutcome, Versioned};
use groups::{GroupPlane, Wake};
use protocol::codec::TopicSettings;
use protocol::ErrorCode;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::mpsc;

/// The running control thread.
pub struct Control {
    /// Where shards send their requests (each shard holds a clone).
    pub requests: flume::Sender<ControlMsg>,
    stop: flume::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Control {
    /// Ends the control thread once its current operation is done (or
    /// abandoned, if it waits on a shard that has stopped) and joins it.
    pub fn stop(self) {
        let _ = self.stop.send(());
        drop(self.requests);
        if self.thread.join().is_err() {
            tracing::error!("the control thread panicked");
        }
    }
}

/// What the registry held when the broker started.
pub struct Loaded {
    /// Every registered topic — or, when the registry is not this broker's
    /// cluster, the topics as this broker last applied them.
    pub topics: Vec<TopicRecord>,
    /// The live brokers (this one among them; empty when the registry is
    /// not this broker's cluster).
    pub brokers: Vec<BrokerRecord>,
    /// Which cluster the registry holds (`None` standalone).
    pub identity: Option<Identity>,
    /// This broker's lease (clustered).
    pub lease: Option<std::sync::Arc<coordinator::registry::LeaseClock>>,
}

/// Producer ids taken from the registry at once: one etcd transaction (or
/// one durable file write) per this many idempotent producers.
const PRODUCER_ID_BLOCK: u32 = 1000;

/// How often a broker whose registry is not its cluster says so again.
const FOREIGN_REMINDER: std::time::Duration = std::time::Duration::from_secs(60);

/// Starts the control thread with the registry `open` builds on it, and
/// returns the registered topics and live brokers once it has loaded them.
#[expect(
    clippy::too_many_lines,
    reason = "the control thread's start: the registry, the watch, the lease, then its loop; the order is the point"
)]
pub fn start<R, F, Fut>(
    config: &Config,
    shards: Vec<flume::Sender<ShardMsg>>,
    open: F,
) -> anyhow::Result<(Control, Loaded)>
where
    R: Registry + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<R, RegistryError>>,
{
    let (requests, inbox) = flume::bounded::<ControlMsg>(crate::limits::CONTROL_QUEUE_MAX);
    let (stop, stopped) = flume::bounded::<()>(1);
    let (loaded_tx, loaded_rx) = mpsc::channel::<Result<Loaded, RegistryError>>();
    let me = config.broker_id;
    // A clustered broker keeps the topics it applied in its data directory.
    let data_dir = config.clustered().then(|| config.data_dir.clone());
    let join_new_cluster = config.join_new_cluster;
    let members_cache = std::time::Duration::from_millis(config.group_members_cache_ms);
    // At most SERVED_WAIT_MAX: a long lease (a dead broker counts as live
    // for its TTL) must not hold an answer past the clients' request
    // timeout (30 s by default), which made them give up on a change that
    // stands.
    let served_timeout = (std::time::Duration::from_secs(u64::from(config.etcd_lease_ttl_s))
        + std::time::Duration::from_millis(config.etcd_timeout_ms))
    .min(crate::limits::SERVED_WAIT_MAX);
    let group_deadline = std::time::Duration::from_millis(config.etcd_timeout_ms);
    let fresh = config.fresh_data_dir;
    let copies_at_start = config.copies_at_start.clone();
    let incarnation = config.incarnation.clone();
    let super_users = config.super_users.clone();
    let super_users_at_load = super_users.clone();
    let replication = ReplicationDefaults {
        default_factor: config.default_replication_factor.max(1),
        default_min_insync: config.default_min_insync_replicas.max(1),
    };
    let thread = std::thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(error) => {
                    let _ = loaded_tx.send(Err(RegistryError::Unavailable {
                        reason: format!("starting the control thread's runtime: {error}"),
                    }));
                    return;
                }
            };
            runtime.block_on(async move {
                let loaded = async {
                    let mut registry = open().await?;
                    let identity = registry.identity();
                    if let Some(Identity::Foreign(_)) = &identity {
                        // Nothing from this registry applies: serve what
                        // this broker last applied, as it was.
                        let topics = applied_topics(data_dir.as_deref());
                        let lease = registry.lease_clock();
                        return Ok((
                            registry,
                            Loaded {
                                topics,
                                brokers: Vec::new(),
                                identity,
                                lease,
                            },
                        ));
                    }
                    if join_new_cluster {
                        restore_topics(&mut registry, data_dir.as_deref()).await?;
                    }
                    let topics = registry.topics().await?;
                    let brokers = registry.brokers().await?;
                    // Users and rules before any connection is served: a
                    // broker that could not read them would refuse every
                    // login and request (it fails closed), so it does not
                    // start instead.
                    crate::auth::publish(registry.security().await?, &super_users_at_load);
                    let lease = registry.lease_clock();
                    Ok::<_, RegistryError>((
                        registry,
                        Loaded {
                            topics,
                            brokers,
                            identity,
                            lease,
                        },
                    ))
                };
                let (registry, loaded) = match loaded.await {
                    Ok(loaded) => loaded,
                    Err(error) => {
                        let _ = loaded_tx.send(Err(error));
                        return;
                    }
                };
                let foreign = match &loaded.identity {
                    Some(Identity::Foreign(foreign)) => Some(foreign.clone()),
                    _ => None,
                };
                let known = loaded
                    .topics
                    .iter()
                    .map(|t| (t.name.clone(), t.clone()))
                    .collect();
                let brokers = loaded.brokers.clone();
                let _ = loaded_tx.send(Ok(loaded));
                let groups = GroupPlane::new(registry.groups(), members_cache, group_deadline);
                let mut plane = ControlPlane {
                    registry,
                    shards,
                    me,
                    known,
                    brokers,
                    groups,
                    last_refresh: None,
                    data_dir,
                    foreign,
                    reminded_at: std::time::Instant::now(),
                    states: BTreeMap::new(),
                    replication,
                    deadline: group_deadline,
                    served_timeout,
                    super_users,
                    fresh,
                    restart_pending: Default::default(),
                    producer_ids: 0..0,
                    copies_at_start,
                    topics_at_start: Default::default(),
                    incarnation,
                };
                plane.topics_at_start = plane.known.values().map(|t| t.id.clone()).collect();
                plane.remember_topics();
                // The shards opened the topics from `Loaded`; now their
                // copies learn who leads, and this run takes its place.
                let replicated: Vec<TopicRecord> = plane
                    .known
                    .values()
                    .filter(|t| t.is_replicated())
                    .cloned()
                    .collect();
                for record in &replicated {
                    plane.learn_topic_states(record).await;
                }
                plane.plan_restart();
                plane.restart_replicas().await;
                plane.elect_where_leaderless().await;
                plane.serve(inbox, stopped).await;
            });
        })?;
    let loaded = match loaded_rx.recv() {
        Ok(Ok(loaded)) => loaded,
        Ok(Err(error)) => {
            let _ = thread.join();
            return Err(anyhow::Error::new(error).context("opening the topic registry"));
        }
        Err(_) => {
            let _ = thread.join();
            anyhow::bail!("the control thread ended while opening the topic registry");
        }
    };
    Ok((
        Control {
            requests,
            stop,
            thread,
        },
        loaded,
    ))
}

struct ControlPlane<R: Registry> {
    registry: R,
    shards: Vec<flume::Sender<ShardMsg>>,
    me: protocol::types::BrokerId,
    /// The topics every shard has open, as last applied.
    known: BTreeMap<String, TopicRecord>,
    /// The live brokers, as last reported.
    brokers: Vec<BrokerRecord>,
    /// Consumer groups and their parked heartbeats.
    groups: GroupPlane<R::Groups>,
    /// How long a topic's registration may take in all (`etcd_timeout_ms`),
    /// however many registry operations it needs.
    deadline: std::time::Duration,
    /// How long a change waits for every live broker to apply it
    /// (`served.rs`): the lease's TTL (a dead broker has left the live
    /// set by then) and one etcd timeout.
    served_timeout: std::time::Duration,
    /// When the last on-demand registry read started.
    last_refresh: Option<std::time::Instant>,
    /// Where the applied topics are kept (clustered brokers only).
    data_dir: Option<std::path::PathBuf>,
    /// Set while the registry is not this broker's cluster: nothing is
    /// applied from it, and topic and group requests are refused.
    foreign: Option<Foreign>,
    /// When the operator was last told about `foreign`.
    reminded_at: std::time::Instant,
    /// Replicated partitions' states as last learned, by (topic id,
    /// partition); one missing is in its initial state.
    states: BTreeMap<(String, u32), Versioned>,
    /// The replication defaults.
    replication: ReplicationDefaults,
    /// The configuration's super users, published with the rules.
    super_users: Vec<String>,
    /// This run started on a new data directory (wiped or replaced):
    /// its copies of topics that existed before hold nothing.
    fresh: bool,
    /// Partitions whose restart change (`restart_replicas`) is not
    /// written yet: tried again at every change of the live brokers.
    restart_pending: std::collections::BTreeSet<(String, u32)>,
    /// The block of producer ids this broker hands out (InitProducerId),
    /// taken from the registry [`PRODUCER_ID_BLOCK`] at a time; ids left
    /// when the broker stops are never used by anyone.
    producer_ids: std::ops::Range<i64>,
    /// The partition directories as this run found them, and the ids of
    /// the topics the registry held then: which of this broker's copies
    /// are new (`storage::new_copy`).
    copies_at_start: std::sync::Arc<crate::storage::new_copy::CopiesAtStart>,
    topics_at_start: std::collections::HashSet<String>,
    /// This run's incarnation: a state whose ISR records it for this
    /// broker was written by a leader that added this run's copy.
    incarnation: String,
}

/// The broker's replication defaults, for topics that do not say.
#[derive(Debug, Clone, Copy)]
struct ReplicationDefaults {
    default_factor: u32,
    default_min_insync: u32,
}

/// The topics this broker last applied (empty when none were kept).
fn applied_topics(data_dir: Option<&std::path::Path>) -> Vec<TopicRecord> {
    let Some(dir) = data_dir else {
        return Vec::new();
    };
    match membership::read_applied_topics(dir) {
        Ok(topics) => topics,
        Err(error) => {
            tracing::error!(error = %format!("{error:#}"), "reading the topics this broker last applied; serving none");
            Vec::new()
        }
    }
}

/// `--join-new-cluster`: registers the topics this broker last applied in
/// the registry it joined, each under its own id, so that their data is
/// kept instead of being moved aside as unregistered. A name the registry
/// already has under another id stays as the registry has it (this
/// broker's directories of the old one are then moved aside, not deleted).
async fn restore_topics<R: Registry>(
    registry: &mut R,
    data_dir: Option<&std::path::Path>,
) -> Result<(), RegistryError> {
    let topics = applied_topics(data_dir);
    let mut restored = 0;
    for record in topics {
        match registry.create_topic(record.clone()).await {
            Ok(_) => restored += 1,
            Err(RegistryError::TopicExists { .. }) => {
                let current = registry.topics().await?;
                if let Some(other) = current
                    .iter()
                    .find(|t| t.name == record.name && t.id != record.id)
                {
                    tracing::warn!(
                        topic = %record.name,
                        kept_id = %other.id,
                        local_id = %record.id,
                        "--join-new-cluster: the new registry has another topic of this name; this broker's partitions of the old one are moved aside"
                    );
                }
            }
            Err(error) => return Err(error),
        }
    }
    tracing::warn!(
        restored,
        "--join-new-cluster: registered the topics this broker holds in the cluster it joined; start it without the flag from now on"
    );
    Ok(())
}

/// Waits `topic_apply_delay_ms` (a fault tests inject) before a topic
/// record learned from etcd is applied.
async fn applied_late() {
    if let Some(delay) = crate::faults::Faults::get().topic_apply_delay {
        tokio::time::sleep(delay).await;
    }
}

/// What the control loop does next.
enum Next {
    Request(ControlMsg),
    Event(RegistryEvent),
    /// A parked heartbeat's wait ran out.
    Timer,
    /// Time to say again that the registry is not this broker's cluster.
    Remind,
    Stop,
}

impl<R: Registry> ControlPlane<R> {
    /// Reads the users and rules again and publishes them to every shard;
    /// when the registry does not answer, the last ones stay.
    async fn publish_security(&mut self) {
        match self.registry.security().await {
            Ok(records) => {
                crate::auth::publish(records, &self.super_users);
                for shard in &self.shards {
                    let _ = shard.send_async(ShardMsg::SecurityChanged).await;
                }
            }
            Err(error) => {
                tracing::warn!(%error, "reading users and access rules; the last ones read stay in force")
            }
        }
    }

    async fn serve(&mut self, inbox: flume::Receiver<ControlMsg>, stopped: flume::Receiver<()>) {
        loop {
            // Every arm is cancel-safe: the ones that lose the race lose
            // nothing (flume and the registry's event queue keep their items).
            let deadline = self.groups.next_deadline();
            let remind_at = self
                .foreign
                .as_ref()
                .map(|_| self.reminded_at + FOREIGN_REMINDER);
            let next = futures_lite::future::or(
                futures_lite::future::or(
                    async {
                        match inbox.recv_async().await {
                            Ok(msg) => Next::Request(msg),
                            Err(_) => Next::Stop,
                        }
                    },
                    async { Next::Event(self.registry.next_event().await) },
                ),
                futures_lite::future::or(
                    futures_lite::future::or(
                        async {
                            match deadline {
                                Some(at) => tokio::time::sleep_until(at.into()).await,
                                None => std::future::pending().await,
                            }
                            Next::Timer
                        },
                        async {
                            match remind_at {
                                Some(at) => tokio::time::sleep_until(at.into()).await,
                                None => std::future::pending().await,
                            }
                            Next::Remind
                        },
                    ),
                    async {
                        let _ = stopped.recv_async().await;
                        Next::Stop
                    },
                ),
            )
            .await;
            let operation: std::pin::Pin<Box<dyn Future<Output = ()> + '_>> = match next {
                Next::Stop => break,
                Next::Request(msg) => Box::pin(self.handle(msg)),
                Next::Event(event) => Box::pin(self.apply(event)),
                Next::Timer => {
                    Box::pin(self.groups.wake(Wake::Expired, &self.known, &self.brokers))
                }
                Next::Remind => {
                    self.remind();
                    continue;
                }
            };
            // An operation waits on shards; a stop while it waits abandons
            // it (its reply channel drops, and the shard answers
            // SHUTTING_DOWN) instead of hanging on a shard that has exited.
            let abandoned = futures_lite::future::or(
                async {
                    operation.await;
                    false
                },
                async {
                    let _ = stopped.recv_async().await;
                    true
                },
            )
            .await;
            if abandoned {
                break;
            }
        }
        self.registry.close().await;
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one match over every message the control thread takes"
    )]
    async fn handle(&mut self, msg: ControlMsg) {
        if let Some(foreign) = &self.foreign {
            let refused = || {
                ControlError::new(
                    ErrorCode::ClusterIdMismatch,
                    RegistryError::ClusterMismatch(foreign.clone()).to_string(),
                )
            };
            match msg {
                ControlMsg::CreateTopic { reply, .. } => {
                    let _ = reply.send_async(Err(refused())).await;
                }
                ControlMsg::DeleteTopic { reply, .. } => {
                    let _ = reply.send_async(Err(refused())).await;
                }
                ControlMsg::CreatePartitions { reply, .. } => {
                    let _ = reply.send_async(Err(refused())).await;
                }
                ControlMsg::AlterTopicConfig { reply, .. } => {
                    let _ = reply.send_async(Err(refused())).await;
                }
                ControlMsg::PromoteMirror { reply, .. } | ControlMsg::MakeMirror { reply, .. } => {
                    let _ = reply.send_async(Err(refused())).await;
                }
                ControlMsg::ProducerId { reply } => {
                    let _ = reply.send_async(Err(refused())).await;
                }
                ControlMsg::KafkaGroup { reply, .. } => {
                    let _ = reply
                        .send_async(Err(RegistryError::Unavailable {
                            reason: refused().message,
                        }))
                        .await;
                }
                ControlMsg::Security { reply, .. } => {
                    let _ = reply.send_async(Err(refused())).await;
                }
                // Nothing is read from a foreign registry.
                ControlMsg::Refresh { reply, .. } => {
                    let _ = reply.send_async(()).await;
                }
                ControlMsg::Group { reply, .. } => {
                    let _ = reply.send_async(Err(refused())).await;
                }
                ControlMsg::UpdatePartition { reply, .. } => {
                    let _ = reply.send_async(Err(refused())).await;
                }
                ControlMsg::ElectLeaders { reply, .. } => {
                    let _ = reply.send_async(Err(refused())).await;
                }
                ControlMsg::Reassign { reply, .. } => {
                    let _ = reply.send_async(Err(refused())).await;
                }
                ControlMsg::CompleteReassignment { .. } => {}
            }
            return;
        }
        match msg {
            ControlMsg::CreateTopic {
                name,
                partitions,
                overrides,
                mirror_source,
                reply,
            } => {
                let result = self
                    .create_topic(&name, partitions, overrides, mirror_source)
                    .await;
                served::answer_when_served(result, reply).await;
            }
            ControlMsg::DeleteTopic { name, reply } => {
                let result = self.delete_topic(&name).await;
                let _ = reply.send_async(result).await;
            }
            ControlMsg::Refresh { asked_at, reply } => {
                if self.last_refresh.is_some_and(|at| at >= asked_at) {
                    let _ = reply.send_async(()).await;
                    return;
                }
                self.last_refresh = Some(std::time::Instant::now());
                match self.registry.topics().await {
                    Ok(topics) => {
                        applied_late().await;
                        for record in topics {
                            self.apply_topic(record).await;
                        }
                    }
                    Err(error) => tracing::warn!(%error, "refreshing the topic registry"),
                }
                let _ = reply.send_async(()).await;
            }
            ControlMsg::UpdatePartition {
                topic_id,
                update,
                reply,
            } => {
                let result = self
                    .registry
                    .update_partitions(&topic_id, vec![update.clone()])
                    .await;
                let answer = match result {
                    Ok(mut outcomes) => {
                        let outcome = outcomes.pop().unwrap_or(UpdateOutcome::Conflict(None));
                        match &outcome {
                            UpdateOutcome::Done(revision) => {
                                let state = Versioned {
                                    state: update.state.clone(),
                                    revision: *revision,
                                };
                                self.states
                                    .insert((topic_id.clone(), update.partition), state.clone());
                                // The other shards (Metadata) learn it too.
                                self.tell_states(&topic_id, vec![(update.partition, state)])
                                    .await;
                            }
                            UpdateOutcome::Conflict(Some(current)) => {
                                self.learn_state(&topic_id, update.partition, current.clone())
                                    .await;
                            }
                            UpdateOutcome::Conflict(None) => {}
                        }
                        Ok(outcome)
                    }
                    Err(error) => Err(ControlError::from(error)),
                };
                let _ = reply.send_async(answer).await;
            }
            ControlMsg::Group { request, reply } => match request {
                GroupRequest::Describe { .. } | GroupRequest::List => {
                    let answer = self.groups_with_kafka(request).await;
                    let _ = reply.send_async(answer).await;
                }
                request => {
                    self.groups
                        .handle(request, reply, &self.known, &self.brokers)
                        .await;
                }
            },
            ControlMsg::ElectLeaders { request, reply } => {
                let result = self.elect_leaders(request).await;
                let _ = reply.send_async(result).await;
            }
            ControlMsg::Reassign {
                topic,
                partition,
                replicas,
                reply,
            } => {
                let result = self.reassign(&topic, partition, replicas).await;
                served::answer_when_served(result, reply).await;
            }
            ControlMsg::CreatePartitions {
                name,
                partitions,
                reply,
            } => {
                let result = self.create_partitions(&name, partitions).await;
                served::answer_when_served(result, reply).await;
            }
            ControlMsg::AlterTopicConfig {
                name,
                changes,
                reply,
            } => {
                let result = self.alter_topic_config(&name, &changes).await;
                served::answer_when_served(result, reply).await;
            }
            ControlMsg::PromoteMirror { name, ends, reply } => {
                let result = self.promote_mirror(&name, ends).await;
                let _ = reply.send_async(result).await;
            }
            ControlMsg::MakeMirror {
                name,
                source,
                topic_id,
                reply,
            } => {
                let result = self.make_mirror(&name, &source, &topic_id).await;
                let _ = reply.send_async(result).await;
            }
            ControlMsg::ProducerId { reply } => {
                let result = self.producer_id().await;
                let _ = reply.send_async(result).await;
            }
            ControlMsg::KafkaGroup { op, reply } => {
                let result = self.registry.kafka_group(op).await;
                let _ = reply.send_async(result).await;
            }
            ControlMsg::Security { change, reply } => {
                let result = self.registry.change_security(change).await;
                if result.is_ok() {
                    self.publish_security().await;
                }
                let _ = reply.send_async(result.map_err(ControlError::from)).await;
            }
            ControlMsg::CompleteReassignment {
                topic,
                topic_id,
                partition,
                target,
            } => {
                self.complete_reassignment(&topic, &topic_id, partition, &target)
                    .await;
            }
        }
    }

    /// The next producer id of this broker's block, taking a new block
    /// when it is used up.
    async fn producer_id(&mut self) -> Result<i64, ControlError> {
        if self.producer_ids.is_empty() {
            self.producer_ids = self.registry.producer_ids(PRODUCER_ID_BLOCK).await?;
        }
        let id = self.producer_ids.start;
        self.producer_ids.start += 1;
        Ok(id)
    }

    async fn create_topic(
        &mut self,
        name: &str,
        partitions: u32,
        overrides: TopicSettings,
        mirror_source: Option<String>,
    ) -> Result<(TopicRecord, Option<ServedWait>), ControlError> {
        // One deadline for the registry's part, as for group requests (issue
        // 24, item 17): it used to add up to three etcd timeouts, then
        // answer INTERNAL.
        let deadline = self.deadline;
        let registered = tokio::time::timeout(
            deadline,
            self.register_topic(name, partitions, overrides, mirror_source),
        )
        .await;
        let (record, revision) = match registered {
            Ok(registered) => registered?,
            Err(_) => {
                return Err(ControlError::new(
                    ErrorCode::CoordinatorUnavailable,
                    format!("the registry did not answer within {deadline:?}; the topic may or may not have been created: describe it before creating it again"),
                ))
            }
        };
        let result = self.open_everywhere(&record).await;
        let copies = record.replicas.first().map_or(1, Vec::len);
        tracing::info!(topic = %name, partitions, replication_factor = copies, "created topic");
        result?;
        let wait = self.wait_served(&record, revision).await;
        Ok((record, wait))
    }

    /// Places a new topic's partitions and registers it.
    async fn register_topic(
        &mut self,
        name: &str,
        partitions: u32,
        overrides: TopicSettings,
        mirror_source: Option<String>,
    ) -> Result<(TopicRecord, i64), ControlError> {
        let live = self.registry.brokers().await?;
        let brokers: Vec<_> = live.iter().map(|b| b.broker_id).collect();
        let placeable: Vec<placement::Placeable> = live
            .iter()
            .map(|b| placement::Placeable {
                id: b.broker_id,
                rack: b.rack.clone(),
            })
            .collect();
        if !brokers.contains(&self.me) {
            return Err(ControlError::new(
                ErrorCode::Internal,
                format!(
                    "broker {} is not among the live brokers {brokers:?}",
                    self.me
                ),
            ));
        }
        let factor = match overrides.replication_factor {
            0 => self.replication.default_factor,
            n => n,
        };
        let mut record = if factor > 1 {
            if self.data_dir.is_none() {
                return Err(ControlError::new(
                    ErrorCode::InvalidConfig,
                    "replication needs a cluster: start the brokers with --etcd",
                ));
            }
            let Some(replicas) = placement::assign(name, partitions, factor, &placeable) else {
                return Err(ControlError::new(
                    ErrorCode::InvalidConfig,
                    format!(
                        "replication factor {factor} needs {factor} live brokers; {} are live ({brokers:?})",
                        brokers.len()
                    ),
                ));
            };
            let min_insync = match overrides.min_insync_replicas {
                0 => self.replication.default_min_insync.min(factor),
                n if n > factor => {
                    return Err(ControlError::new(
                        ErrorCode::InvalidConfig,
                        format!(
                            "min_insync_replicas {n} is more than the replication factor {factor}"
                        ),
                    ))
                }
                n => n,
            };
            let mut record = TopicRecord::replicated(name, overrides, replicas, min_insync);
            record.record_disks(0, &live);
            record
        } else {
            let owners = placement::spread(name, partitions, &brokers);
            TopicRecord::new(name, overrides, owners)
        };
        record.id = coordinator::registry::new_topic_id();
        record.mirror_source = mirror_source;
        // Fixed now: a later change of the broker's default must not
        // change how an existing topic's bytes are read.
        record.message_format = match overrides.message_format {
            0 => crate::config::DEFAULT_MESSAGE_FORMAT.number(),
            n => n,
        };
        // A topic of this name deleted earlier may have left committed
        // offsets (its delete's clean-up lost to a crash or an etcd
        // outage): a new topic starts empty, so no group has a position in
        // it (issue 24, item 13). Not while the name is a live topic here.
        if !self.known.contains_key(name) {
            self.forget_offsets(name).await?;
        }
        let revision = self.registry.create_topic(record.clone()).await?;
        Ok((record, revision))
    }

    /// DescribeGroup and ListGroups over ringlog's groups and Kafka's
    /// (`kafka/group/`): a name that is no native group with members or
    /// offsets is looked up among the Kafka groups. A standalone broker
    /// has Kafka groups only.
    async fn groups_with_kafka(
        &mut self,
        request: GroupRequest,
    ) -> Result<GroupAnswer, ControlError> {
        use coordinator::kafka_groups::{KafkaGroupAnswer, KafkaGroupOp};
        let (reply, answer) = flume::bounded(1);
        let describing = match &request {
            GroupRequest::Describe { group } => Some(group.clone()),
            _ => None,
        };
        self.groups
            .handle(request, reply, &self.known, &self.brokers)
            .await;
        let native = answer.recv_async().await.unwrap_or_else(|_| {
            Err(ControlError::new(
                ErrorCode::Internal,
                "no answer from the group plane",
            ))
        });
        let native_missing = matches!(&native, Err(e) if e.code == ErrorCode::ClusterRequired);
        let Some(group) = describing else {
            let mut names = match native {
                Ok(GroupAnswer::Groups(names)) => names,
                Err(_) if native_missing => Vec::new(),
                other => return other,
            };
            if let Ok(KafkaGroupAnswer::Groups(kafka)) =
                self.registry.kafka_group(KafkaGroupOp::List).await
            {
                names.extend(kafka);
            }
            names.sort();
            names.dedup();
            return Ok(GroupAnswer::Groups(names));
        };
        if let Ok(GroupAnswer::Described(d)) = &native {
            if !d.view.members.is_empty() || !d.partitions.is_empty() {
                return native;
            }
        }
        let saved = match self
            .registry
            .kafka_group(KafkaGroupOp::Load {
                group: group.clone(),
            })
            .await
        {
            Ok(KafkaGroupAnswer::State(saved)) => saved,
            _ => None,
        };
        let offsets = match self
            .registry
            .kafka_group(KafkaGroupOp::Offsets { group })
            .await
        {
            Ok(KafkaGroupAnswer::Offsets(offsets)) => offsets,
            _ => Vec::new(),
        };
        match crate::kafka::group::described::describe(saved, offsets, &self.known) {
            Some(description) => Ok(GroupAnswer::Described(description)),
            None if native_missing => Ok(GroupAnswer::Described(Default::default())),
            None => native,
        }
    }

    /// Removes the committed offsets of a topic name, native groups' and
    /// Kafka groups'.
    async fn forget_offsets(&mut self, name: &str) -> Result<(), ControlError> {
        self.groups.forget_topic(name).await?;
        self.registry.forget_kafka_offsets(name).await?;
        Ok(())
    }

    async fn delete_topic(&mut self, name: &str) -> Result<(), ControlError> {
        let deleted = self.registry.delete_topic(name).await?;
        if let Some(delay) = crate::faults::Faults::get().delete_delay {
            tokio::time::sleep(delay).await;
        }
        let dropped = self.drop_everywhere(name, &deleted.id).await;
        match self.groups.forget_topic(name).await {
            Ok(0) => {}
            Ok(offsets) => {
                tracing::info!(topic = %name, offsets, "removed the groups' committed offsets of the deleted topic")
            }
            Err(error) => {
                tracing::warn!(topic = %name, error = %error.message, "the groups' committed offsets of the deleted topic stay until the name is created again")
            }
        }
        if let Err(error) = self.registry.forget_kafka_offsets(name).await {
            tracing::warn!(topic = %name, %error, "the Kafka groups' committed offsets of the deleted topic stay until the name is created again");
        }
        tracing::info!(topic = %name, id = %deleted.id, "deleted topic");
        dropped.map_err(|failures| {
            ControlError::new(
                ErrorCode::StorageFailed,
                format!("topic {name:?} is deleted from the registry, but {failures}; those directories are moved aside at the next start, and the name can be reused at once"),
            )
        })
    }

    /// Has every shard open the partitions of `record` it owns.
    async fn open_everywhere(&mut self, record: &TopicRecord) -> Result<(), ControlError> {
        self.known.insert(record.name.clone(), record.clone());
        self.remember_topics();
        let states = if record.is_replicated() {
            self.read_topic_states(record).await
        } else {
            Vec::new()
        };
        let mut failures = Vec::new();
        for shard in &self.shards {
            let (done, result) = flume::bounded(1);
            let msg = ShardMsg::TopicCreated {
                topic: record.clone(),
                states: states.clone(),
                done,
            };
            if shard.send_async(msg).await.is_err() {
                failures.push("a shard has stopped".to_string());
                continue;
            }
            match result.recv_async().await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => failures.push(error.to_string()),
                Err(_) => failures.push("a shard has stopped".to_string()),
            }
        }
        if failures.is_empty() {
            return Ok(());
        }
        tracing::error!(topic = %record.name, failures = %failures.join("; "), "opening a topic");
        Err(ControlError::new(
            ErrorCode::StorageFailed,
            failures.join("; "),
        ))
    }

    /// Has every shard drop the topic (the one with id `id`; empty:
    /// whichever) and its partitions' files; says which directories could
    /// not be moved aside.
    async fn drop_everywhere(
        &mut self,
        name: &str,
        id: &str,
    ) -> Result<(), crate::storage::sweep::DeleteError> {
        if self
            .known
            .get(name)
            .is_some_and(|known| id.is_empty() || known.id.is_empty() || known.id == id)
        {
            self.known.remove(name);
            self.remember_topics();
        }
        let mut failures = crate::storage::sweep::DeleteError::default();
        for shard in &self.shards {
            let (done, finished) = flume::bounded(1);
            let msg = ShardMsg::TopicDeleted {
                name: name.to_string(),
                id: id.to_string(),
                done,
            };
            if shard.send_async(msg).await.is_ok() {
                if let Ok(Err(failure)) = finished.recv_async().await {
                    failures.extend(failure);
                }
            }
        }
        if failures.0.is_empty() {
            return Ok(());
        }
        tracing::error!(topic = %name, %failures, "deleting a topic's partitions");
        Err(failures)
    }

    /// Has every shard forget a topic the registry no longer lists without
    /// a delete having been seen, moving its directories aside.
    async fn orphan_everywhere(&mut self, name: &str) {
        self.known.remove(name);
        self.remember_topics();
        let mut moved = 0;
        for shard in &self.shards {
            let (done, finished) = flume::bounded(1);
            let msg = ShardMsg::TopicOrphaned {
                name: name.to_string(),
                done,
            };
            if shard.send_async(msg).await.is_ok() {
                moved += finished.recv_async().await.unwrap_or(0);
            }
        }
        tracing::warn!(
            topic = %name,
            partitions_moved_aside = moved,
            "the registry no longer lists this topic and no delete of it was seen (etcd restored from an older backup?): its partitions here are moved aside into .orphaned/, not deleted"
        );
    }

    /// Keeps the topics as applied in the data directory (clustered only),
    /// for a start against a registry that is not this broker's cluster.
    fn remember_topics(&self) {
        let Some(dir) = &self.data_dir else { return };
        if let Err(error) = membership::write_applied_topics(dir, self.known.values()) {
            tracing::warn!(%error, file = membership::APPLIED_TOPICS_FILE, "recording the applied topics");
        }
    }

    /// Says (again) that the registry is not this broker's cluster.
    fn remind(&mut self) {
        self.reminded_at = std::time::Instant::now();
        if let Some(foreign) = &self.foreign {
            tracing::error!(
                "{}; {} topics are served as last applied",
                RegistryError::ClusterMismatch(foreign.clone()),
                self.known.len()
            );
        }
    }

    /// Tells every shard the live brokers (for Metadata and routing).
    async fn publish_brokers(&mut self, brokers: Vec<BrokerRecord>) {
        self.brokers = brokers.clone();
        tracing::info!(
            brokers = ?brokers.iter().map(|b| b.broker_id).collect::<Vec<_>>(),
            "live brokers changed"
        );
        for shard in &self.shards {
            let _ = shard.send_async(ShardMsg::Brokers(brokers.clone())).await;
        }
    }

    /// Applies a change another broker made (or the whole state, after a
    /// lost watch) to this broker's shards.
    async fn apply(&mut self, event: RegistryEvent) {
        let wake = match &event {
            RegistryEvent::GroupMembers(group) => Some(group.clone()),
            _ => None,
        };
        if let RegistryEvent::Resync { .. } = &event {
            // The watch was away: any group's members may have changed.
            self.groups.forget(None);
        }
        self.apply_registry(event).await;
        let wake = wake.as_deref().map_or(Wake::All, Wake::Group);
        self.groups.wake(wake, &self.known, &self.brokers).await;
    }

    async fn apply_registry(&mut self, event: RegistryEvent) {
        if let RegistryEvent::ForeignCluster(foreign) = event {
            self.foreign = Some(foreign);
            self.remind();
            return;
        }
        if let RegistryEvent::Resync { .. } = &event {
            if self.foreign.take().is_some() {
                tracing::warn!("the registry holds this broker's cluster again: applying it");
            }
        }
        if self.foreign.is_some() {
            // Changes watched in a registry that is not ours are not ours.
            return;
        }
        match event {
            RegistryEvent::ForeignCluster(_) | RegistryEvent::GroupMembers(_) => {}
            RegistryEvent::SecurityChanged => self.publish_security().await,
            RegistryEvent::PartitionState {
                topic_id,
                partition,
                state,
            } => self.learn_state(&topic_id, partition, state).await,
            RegistryEvent::TopicPut { record, revision } => {
                if self.known.get(&record.name) != Some(&record) {
                    applied_late().await;
                }
                let topic = (record.name.clone(), record.id.clone());
                if self.apply_topic(record).await {
                    self.mark_served(&[topic], revision).await;
                }
            }
            RegistryEvent::TopicDeleted { name, id } => {
                if self.known.contains_key(&name) {
                    tracing::info!(topic = %name, %id, "topic deleted in the cluster");
                    let _ = self.drop_everywhere(&name, &id).await;
                }
            }
            RegistryEvent::Brokers(brokers) => {
                self.publish_brokers(brokers).await;
                self.restart_replicas().await;
                self.elect_where_leaderless().await;
            }
            RegistryEvent::Resync {
                topics,
                brokers,
                partitions,
                revision,
            } => self.resync(topics, brokers, partitions, revision).await,
        }
    }

    /// Reconciles with the whole state after a lost watch
    /// ([`RegistryEvent::Resync`]).
    async fn resync(
        &mut self,
        topics: Vec<TopicRecord>,
        brokers: Vec<BrokerRecord>,
        partitions: Vec<(String, u32, Versioned)>,
        revision: i64,
    ) {
        for (topic_id, partition, state) in partitions {
            self.learn_state(&topic_id, partition, state).await;
        }
        // Users or rules may have changed while the watch was lost.
        self.publish_security().await;
        // A snapshot is not a list of deletes: a topic it lacks may
        // have been deleted, or the snapshot may be an older backup.
        // Its data is moved aside, never removed. And the snapshot
        // may be older than a topic this thread created meanwhile
        // (it was read before the create, queued, and only now
        // handled): so only a topic that a read made now lacks too
        // is moved aside, and with no such read, none is.
        let topics = match self.registry.topics().await {
            Ok(now) => {
                let gone: Vec<String> = self
                    .known
                    .keys()
                    .filter(|name| !now.iter().any(|t| &t.name == *name))
                    .cloned()
                    .collect();
                for name in gone {
                    self.orphan_everywhere(&name).await;
                }
                now
            }
            Err(error) => {
                tracing::warn!(%error, "reading the topic registry after a resync; topics it lacks are checked at the next one");
                topics
            }
        };
        // Marked at the snapshot's revision: a record read since is as new
        // or newer, so the mark claims no more than was applied.
        let mut served = Vec::new();
        for record in topics {
            let topic = (record.name.clone(), record.id.clone());
            if self.apply_topic(record).await {
                served.push(topic);
            }
        }
        self.mark_served(&served, revision).await;
        self.publish_brokers(brokers).await;
        self.restart_replicas().await;
        self.elect_where_leaderless().await;
    }

    /// Applies a topic's record to every shard; false when a shard could
    /// not (logged).
    async fn apply_topic(&mut self, record: TopicRecord) -> bool {
        if self.known.get(&record.name) == Some(&record) {
            return true;
        }
        match self.known.get(&record.name) {
            // Another topic of the same name (deleted and created again
            // while the watch was away): the old one's partitions go first.
            // A record with the same id that changed is the same topic.
            Some(known) if known.id.is_empty() || known.id != record.id => {
                let old = known.id.clone();
                let _ = self.drop_everywhere(&record.name, &old).await;
            }
            // The same topic, its record rewritten: a reassignment began
            // or ended.
            Some(_) => return self.change_everywhere(&record).await,
            None => {}
        }
        tracing::info!(topic = %record.name, id = %record.id, partitions = record.partitions, "topic created in the cluster");
        self.open_everywhere(&record).await.is_ok()
    }
}
