//! The etcd registry: brokers and topics of one cluster, under its prefix
//! (the key table is in [`crate::keys`]).
//!
//! - **Cluster identity.** The prefix's `cluster-id` key names the cluster;
//!   the first broker creates it (create-if-absent), every broker keeps the
//!   id it joined in its data directory and passes it in
//!   [`EtcdOptions::cluster_id`]. A prefix that holds another id, or none
//!   (a new, empty etcd behind the same address; a restore from before the
//!   cluster existed; a wrong `--cluster`), is [`Identity::Foreign`]:
//!   nothing is read from it, registered in it or changed in it, and the
//!   watch reports [`RegistryEvent::ForeignCluster`] so the broker keeps its
//!   data. Every write (registration, topic create and delete, group
//!   transactions) compares the id in the same transaction, so even a
//!   replacement that the watch has not noticed yet is never written to.
//! - **Broker registry.** [`Etcd::connect`] registers this broker under
//!   `brokers/<id>` with a lease of `lease_ttl_s` seconds, kept alive by a
//!   background task; the key vanishes at most one TTL after the broker dies.
//!   The registration is create-if-absent, so two live brokers never share
//!   an id. A key left by this broker's own previous run (same data
//!   directory, recognised by its `data_dir_id`) is taken over at once, so a
//!   restart after kill -9 does not wait for the old lease to expire; one
//!   left by another data directory (a second broker given the same id, or
//!   this one's run before its directory was replaced) is waited on for a
//!   TTL and refused only if it outlives it. A lease
//!   lost any way — expired during an outage, unknown to a new etcd, or
//!   unanswered for a whole TTL — is replaced by a new registration as soon
//!   as etcd answers and holds this broker's cluster.
//! - **Topic registry.** Topic records are persistent keys, created with a
//!   transaction that succeeds only if the key has never been created
//!   (`create_revision == 0`), deleted with one that succeeds only if the
//!   record is still the one read.
//! - **Watch.** A background task watches the whole prefix from the revision
//!   of the snapshot the broker started from, so no change is missed between
//!   the two, and turns changes into [`RegistryEvent`]s. When the watch
//!   breaks (etcd down, history compacted), it takes a new snapshot once etcd
//!   answers and reports it whole as [`RegistryEvent::Resync`] — a snapshot
//!   is not a list of deletes: a topic missing from it was not seen deleted.
//!
//! Every request has a deadline (`request_timeout`); a request that misses
//! it is [`RegistryError::Unavailable`]. The background tasks never give up:
//! they retry with a capped back-off and log a change of state once.

use super::{
    BrokerRecord, Foreign, Identity, LeaseClock, Registry, RegistryError, RegistryEvent,
    TopicRecord,
};
use crate::keys::{Key, Keys};
use crate::replicas::{PartitionState, PartitionUpdate, UpdateOutcome, Versioned};
use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, EventType, GetOptions, PutOptions, Txn, TxnOp,
    TxnOpResponse, WatchOptions,
};
use protocol::types::BrokerId;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How to reach etcd and how this broker's registration behaves.
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// etcd endpoints, `http://host:port`.
    pub endpoints: Vec<String>,
    /// The cluster's name: every key lives under `/ringlog/<cluster>/`.
    pub cluster: String,
    /// The broker lease's TTL: how long after a crash the broker still
    /// counts as live.
    pub lease_ttl_s: i64,
    /// Deadline of every etcd request.
    pub request_timeout: Duration,
    /// The cluster id this broker's data directory belongs to; `None` for
    /// a data directory that never joined a cluster.
    pub cluster_id: Option<String>,
    /// Join the prefix's cluster (creating an id if it holds none) even if
    /// the data directory belongs to another: `broker --join-new-cluster`,
    /// after a deliberate rebuild of etcd.
    pub join_new_cluster: bool,
    /// TLS and login for a secured etcd.
    pub access: super::EtcdAccess,
}

/// Events queued from the watch task before it waits for the control thread.
const EVENTS_QUEUED_MAX: usize = 1024;
/// Longest pause between two attempts of a background task.
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(2);
/// How often a failure that goes on is logged again.
const QUIET_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// The registry in etcd. Owned by the broker's control thread; must be
/// created inside a tokio runtime (it spawns its background tasks there).
pub struct Etcd {
    client: Client,
    keys: Keys,
    /// This broker's id.
    me: BrokerId,
    options: EtcdOptions,
    /// The cluster this broker belongs to (its data directory's, or the
    /// one it adopted at connect).
    cluster_id: String,
    /// Which cluster the prefix holds, as the watch last saw.
    identity: tokio::sync::watch::Receiver<Identity>,
    /// Until when the lease is known to be live.
    lease_clock: Arc<LeaseClock>,
    events: mpsc::Receiver<RegistryEvent>,
    lease: tokio::sync::watch::Receiver<i64>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Reads and compare-and-sets of the producer id counter before giving up.
const PRODUCER_ID_TRIES: u32 = 16;

fn unavailable(error: impl std::fmt::Display) -> RegistryError {
    RegistryError::Unavailable {
        reason: error.to_string(),
    }
}

/// Runs an etcd request with the deadline.
async fn deadline<T>(
    timeout: Duration,
    request: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, RegistryError> {
    match tokio::time::timeout(timeout, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(unavailable(error)),
        Err(_) => Err(unavailable(format!("no answer within {timeout:?}"))),
    }
}

fn parse_record<T: serde::de::DeserializeOwned>(key: &[u8], value: &[u8]) -> Option<T> {
    match serde_json::from_slice(value) {
        Ok(record) => Some(record),
        Err(error) => {
            tracing::error!(key = %String::from_utf8_lossy(key), %error, "skipping an unreadable registry record");
            None
        }
    }
}

/// A topic record, checked like a request (a bad one is skipped, loudly).
fn parse_topic(key: &[u8], value: &[u8]) -> Option<TopicRecord> {
    let record: TopicRecord = parse_record(key, value)?;
    match record.check() {
        Ok(()) => Some(record),
        Err(reason) => {
            tracing::error!(key = %String::from_utf8_lossy(key), %reason, "skipping an invalid topic record");
            None
        }
    }
}

/// Every topic and live broker, the replicated partitions' states, the
/// cluster id, and the revision they were read at.
struct Snapshot {
    topics: Vec<TopicRecord>,
    brokers: Vec<BrokerRecord>,
    partitions: Vec<(String, u32, Versioned)>,
    cluster_id: Option<String>,
    revision: i64,
}

/// Updates per transaction: each is a nested transaction of a compare, a
/// put and a get, within etcd's default `--max-txn-ops` of 128.
const UPDATES_PER_TXN: usize = 40;

/// A partition state record, skipped loudly when unreadable.
fn parse_partition(key: &[u8], kv: &etcd_client::KeyValue) -> Option<Versioned> {
    let state: PartitionState = parse_record(key, kv.value())?;
    Some(Versioned {
        state,
        revision: kv.mod_revision(),
    })
}

async fn snapshot(
    client: &mut Client,
    keys: &Keys,
    timeout: Duration,
) -> Result<Snapshot, RegistryError> {
    let response = deadline(
        timeout,
        client.get(keys.prefix(), Some(GetOptions::new().with_prefix())),
    )
    .await?;
    let revision = response.header().map_or(0, |h| h.revision());
    let mut topics = Vec::new();
    let mut brokers = Vec::new();
    let mut partitions = Vec::new();
    let mut cluster_id = None;
    for kv in response.kvs() {
        let Ok(key) = std::str::from_utf8(kv.key()) else {
            continue;
        };
        match keys.parse(key) {
            Some(Key::ClusterId) => {
                cluster_id = Some(String::from_utf8_lossy(kv.value()).into_owned())
            }
            Some(Key::Partition(topic_id, p)) => {
                if let Some(state) = parse_partition(kv.key(), kv) {
                    partitions.push((topic_id.to_string(), p, state));
                }
            }
            Some(Key::Topic(_)) => topics.extend(parse_topic(kv.key(), kv.value())),
            Some(Key::Broker(_)) => {
                brokers.extend(parse_record::<BrokerRecord>(kv.key(), kv.value()))
            }
            _ => {}
        }
    }
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    brokers.sort_by_key(|b| b.broker_id);
    Ok(Snapshot {
        topics,
        brokers,
        partitions,
        cluster_id,
        revision,
    })
}

impl Etcd {
    /// Connects, settles which cluster the prefix holds, and — when it is
    /// this broker's — registers `me` in the broker registry; then starts
    /// the lease keep-alive and the watch. Fails when etcd does not answer
    /// within the request timeout, or when another live broker has `me`'s
    /// id. A prefix holding another cluster (or none, with a data directory
    /// that already belongs to one) is not an error: the registry comes up
    /// [`Identity::Foreign`], applies nothing and registers nothing, and
    /// its watch reports a `Resync` if the right cluster appears there.
    pub async fn connect(options: EtcdOptions, me: BrokerRecord) -> Result<Etcd, RegistryError> {
        let keys = Keys::new(&options.cluster);
        let broker_id = me.broker_id;
        let timeout = options.request_timeout;
        let connect_options = options.access.connect_options(timeout)?;
        // Only endpoints that answer: a dead member's would fail requests
        // (see `endpoints.rs`).
        let in_use = super::endpoints::live(&options.endpoints).await;
        let mut client = deadline(
            timeout,
            Client::connect(in_use.clone(), Some(connect_options)),
        )
        .await
        .map_err(|e| {
            unavailable(format!(
                "connecting to {}: {e}",
                options.endpoints.join(",")
            ))
        })?;
        let (identity, cluster_id) = resolve_identity(&mut client, &keys, &options).await?;
        let mut start = None;
        let mut lease = 0;
        let lease_clock = Arc::new(LeaseClock::default());
        let ttl = Duration::from_secs(options.lease_ttl_s.max(1) as u64);
        if matches!(identity, Identity::Joined { .. }) {
            let sent = std::time::Instant::now();
            lease = register(&mut client, &keys, &options, &cluster_id, &me).await?;
            lease_clock.renewed(sent, ttl);
            let first = snapshot(&mut client, &keys, timeout).await?;
            start = Some((first.brokers, first.revision));
        }
        let (identity_tx, identity_rx) = tokio::sync::watch::channel(identity);
        let (lease_tx, lease_rx) = tokio::sync::watch::channel(lease);
        let (events_tx, events) = mpsc::channel(EVENTS_QUEUED_MAX);
        let keeper = tokio::spawn(keep_alive(
            client.clone(),
            keys.clone(),
            options.clone(),
            cluster_id.clone(),
            me,
            (lease_tx, lease_clock.clone()),
            identity_rx.clone(),
        ));
        let watcher = tokio::spawn(watch(
            Watcher {
                client: client.clone(),
                keys: keys.clone(),
                timeout,
                cluster_id: cluster_id.clone(),
                identity: identity_tx,
                events: events_tx,
            },
            start,
        ));
        let prober = tokio::spawn(super::endpoints::keep_live(
            client.clone(),
            options.endpoints.clone(),
            in_use,
        ));
        Ok(Etcd {
            client,
            keys,
            me: broker_id,
            options,
            cluster_id,
            identity: identity_rx,
            lease_clock,
            events,
            lease: lease_rx,
            tasks: vec![keeper, watcher, prober],
        })
    }

    /// The Kafka groups of this cluster, if the prefix holds it.
    fn kafka_groups(
        &mut self,
    ) -> Result<crate::kafka_groups::etcd::EtcdKafkaGroups<'_>, RegistryError> {
        self.check_identity()?;
        let lease = self.lease();
        Ok(crate::kafka_groups::etcd::EtcdKafkaGroups {
            client: &mut self.client,
            keys: &self.keys,
            lease,
            timeout: self.options.request_timeout,
        })
    }

    /// The lease this broker's registration is bound to right now (0: none).
    fn lease(&self) -> i64 {
        *self.lease.borrow()
    }

    /// `Ok` while the registry holds this broker's cluster.
    fn check_identity(&self) -> Result<(), RegistryError> {
        match &*self.identity.borrow() {
            Identity::Joined { .. } => Ok(()),
            Identity::Foreign(foreign) => Err(RegistryError::ClusterMismatch(foreign.clone())),
        }
    }

    fn foreign(&self, found: Option<String>) -> RegistryError {
        RegistryError::ClusterMismatch(Foreign {
            expected: self.cluster_id.clone(),
            found,
        })
    }

    /// The compare every change's transaction makes: the prefix still
    /// holds this broker's cluster id.
    fn ours(&self) -> Compare {
        Compare::value(
            self.keys.cluster_id(),
            CompareOp::Equal,
            self.cluster_id.as_str(),
        )
    }

    /// After a transaction that compared [`Self::ours`] and, failing, read
    /// the cluster id: `Err` when the prefix holds another cluster now,
    /// `Ok` when the other compare failed.
    fn still_ours(&self, response: &etcd_client::TxnResponse) -> Result<(), RegistryError> {
        let found = got(response).first().and_then(value_of);
        if found.as_deref() != Some(self.cluster_id.as_str()) {
            return Err(self.foreign(found));
        }
        Ok(())
    }
}

/// The cluster id the prefix holds, if any.
async fn read_cluster_id(
    client: &mut Client,
    keys: &Keys,
    timeout: Duration,
) -> Result<Option<String>, RegistryError> {
    let response = deadline(timeout, client.get(keys.cluster_id(), None)).await?;
    Ok(response
        .kvs()
        .first()
        .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()))
}

/// Settles which cluster this broker belongs to from what its data
/// directory says (`options.cluster_id`) and what the prefix holds:
///
/// | data directory | prefix      | result |
/// |----------------|-------------|--------|
/// | none           | none        | create an id (create-if-absent: of brokers starting together, one id wins) and join it |
/// | none           | an id       | join it |
/// | an id          | the same id | joined |
/// | an id          | another, or none | [`Identity::Foreign`], unless `join_new_cluster`: then join the prefix's id (created if none) |
async fn resolve_identity(
    client: &mut Client,
    keys: &Keys,
    options: &EtcdOptions,
) -> Result<(Identity, String), RegistryError> {
    let timeout = options.request_timeout;
    let found = read_cluster_id(client, keys, timeout).await?;
    let mine = options.cluster_id.clone();
    if let (Some(mine), Some(found)) = (&mine, &found) {
        if mine == found {
            let joined = Identity::Joined {
                cluster_id: mine.clone(),
                adopted: false,
                replaced: None,
            };
            return Ok((joined, mine.clone()));
        }
    }
    if let Some(expected) = mine.clone().filter(|_| !options.join_new_cluster) {
        return Ok((
            Identity::Foreign(Foreign {
                expected: expected.clone(),
                found,
            }),
            expected,
        ));
    }
    let id = match found {
        Some(found) => found,
        None => {
            let key = keys.cluster_id();
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key.clone(), super::random_id(), None)])
                .or_else([TxnOp::get(key.clone(), None)]);
            deadline(timeout, client.txn(txn)).await?;
            // Whoever won the race, the id is what the key holds now.
            read_cluster_id(client, keys, timeout)
                .await?
                .ok_or_else(|| unavailable("the cluster id vanished as it was created"))?
        }
    };
    let replaced = mine.filter(|m| *m != id);
    let joined = Identity::Joined {
        cluster_id: id.clone(),
        adopted: replaced.is_some() || options.cluster_id.is_none(),
        replaced,
    };
    Ok((joined, id))
}

/// The `get` answers of a failed transaction's else branch, in order.
fn got(response: &etcd_client::TxnResponse) -> Vec<Option<etcd_client::KeyValue>> {
    response
        .op_responses()
        .into_iter()
        .filter_map(|op| match op {
            etcd_client::TxnOpResponse::Get(get) => Some(get.kvs().first().cloned()),
            _ => None,
        })
        .collect()
}

fn value_of(kv: &Option<etcd_client::KeyValue>) -> Option<String> {
    kv.as_ref()
        .map(|kv| String::from_utf8_lossy(kv.value()).into_owned())
}

/// Grants a lease and puts `me` under it, create-if-absent, in a
/// transaction that also requires the prefix to hold `cluster_id` (so a
/// broker never registers in a cluster that is not its own, even one that
/// replaced its own a moment ago). A key left by this data directory's
/// previous run is replaced; one left by another data directory is
/// waited on for its lease's TTL (a replaced directory's crashed run), and
/// is [`RegistryError::DuplicateBroker`] if it outlives that.
#[expect(
    clippy::too_many_lines,
    reason = "a broker's registration as one etcd transaction with its retries and the stale-lease wait"
)]
async fn register(
    client: &mut Client,
    keys: &Keys,
    options: &EtcdOptions,
    cluster_id: &str,
    me: &BrokerRecord,
) -> Result<i64, RegistryError> {
    let timeout = options.request_timeout;
    let key = keys.broker(me.broker_id);
    let ours = Compare::value(keys.cluster_id(), CompareOp::Equal, cluster_id);
    let value = serde_json::to_vec(me).map_err(unavailable)?;
    let mut lease = deadline(timeout, client.lease_grant(options.lease_ttl_s, None))
        .await?
        .id();
    let result = async {
        for _ in 0..3 {
            let put = TxnOp::put(
                key.clone(),
                value.clone(),
                Some(PutOptions::new().with_lease(lease)),
            );
            let txn = Txn::new()
                .when([
                    ours.clone(),
                    Compare::create_revision(key.clone(), CompareOp::Equal, 0),
                ])
                .and_then([put])
                .or_else([
                    TxnOp::get(keys.cluster_id(), None),
                    TxnOp::get(key.clone(), None),
                ]);
            let response = deadline(timeout, client.txn(txn)).await?;
            if response.succeeded() {
                return Ok(lease);
            }
            let answers = got(&response);
            let found = answers.first().and_then(value_of);
            if found.as_deref() != Some(cluster_id) {
                return Err(RegistryError::ClusterMismatch(Foreign {
                    expected: cluster_id.to_string(),
                    found,
                }));
            }
            let Some(Some(existing)) = answers.get(1).cloned() else {
                continue; // it expired in between: try again
            };
            let holder: Option<BrokerRecord> = serde_json::from_slice(existing.value()).ok();
            let ours_before = holder
                .as_ref()
                .is_some_and(|h| !h.data_dir_id.is_empty() && h.data_dir_id == me.data_dir_id);
            if !ours_before {
                // Another data directory's registration: a second broker
                // given this id by mistake, or this broker's own previous
                // run on a directory since replaced (wiped, a new disk),
                // killed moments ago. Only time tells them apart: a crashed
                // run's lease expires within its TTL, a live broker's does
                // not.
                let wait = Duration::from_secs(options.lease_ttl_s.max(1) as u64 + 2);
                tracing::warn!(
                    broker_id = me.broker_id,
                    holder = %String::from_utf8_lossy(existing.value()),
                    "broker id {} is registered from another data directory: waiting up to {} s for that registration to expire, as a crashed run's would, before deciding it is another live broker",
                    me.broker_id,
                    wait.as_secs()
                );
                if outlived(client, key.as_bytes(), wait, timeout).await? {
                    return Err(RegistryError::DuplicateBroker {
                        broker_id: me.broker_id,
                        holder: String::from_utf8_lossy(existing.value()).into_owned(),
                        waited_s: wait.as_secs(),
                    });
                }
                tracing::info!(
                    broker_id = me.broker_id,
                    "the registration left by a run with another data directory expired: registering"
                );
                // Ours may have expired too while we waited: a fresh one.
                let _ = deadline(timeout, client.lease_revoke(lease)).await;
                lease = deadline(timeout, client.lease_grant(options.lease_ttl_s, None))
                    .await?
                    .id();
                continue;
            }
            // Our own previous run (killed before its lease expired), or
            // this run's own registration under a lease etcd still knows
            // while we believed it lost: the data directory's lock proves
            // no other process holds it. Take the key over.
            tracing::info!(
                broker_id = me.broker_id,
                "replacing the registration of this broker's previous run"
            );
            let replace = Txn::new()
                .when([
                    ours.clone(),
                    Compare::mod_revision(key.clone(), CompareOp::Equal, existing.mod_revision()),
                ])
                .and_then([TxnOp::put(
                    key.clone(),
                    value.clone(),
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            if deadline(timeout, client.txn(replace)).await?.succeeded() {
                if existing.lease() != 0 && existing.lease() != lease {
                    let _ = deadline(timeout, client.lease_revoke(existing.lease())).await;
                }
                return Ok(lease);
            }
        }
        Err(unavailable(format!(
            "registering broker {} kept conflicting",
            me.broker_id
        )))
    }
    .await;
    if result.is_err() {
        let _ = deadline(timeout, client.lease_revoke(lease)).await;
    }
    result
}

/// True when `key` is still there after `wait` (its lease kept alive by a
/// live process); false as soon as it is gone.
async fn outlived(
    client: &mut Client,
    key: &[u8],
    wait: Duration,
    timeout: Duration,
) -> Result<bool, RegistryError> {
    let until = tokio::time::Instant::now() + wait;
    loop {
        let present = !deadline(timeout, client.get(key.to_vec(), None))
            .await?
            .kvs()
            .is_empty();
        if !present {
            return Ok(false);
        }
        if tokio::time::Instant::now() >= until {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Where the keep-alive stands, so that it logs a change once instead of
/// every retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaseState {
    /// Registered, keep-alives answered.
    Alive,
    /// Keep-alives fail (etcd unreachable); the lease may still be live.
    Retrying,
    /// The lease is gone (expired, or unknown to the etcd that answers):
    /// registering again.
    Lost,
    /// The registry is not this broker's cluster: nothing is registered.
    Foreign,
}

/// Why one keep-alive round ended.
enum Ended {
    /// etcd says the lease is gone: it expired, or this etcd never had it.
    Lost,
    /// The registry stopped being this broker's cluster.
    Foreign,
    /// etcd did not answer.
    Failed(RegistryError),
}

/// Whether an etcd error says the lease does not exist (etcd-client turns a
/// keep-alive answer with TTL 0 into this error; a new etcd behind the same
/// address answers every old lease so).
fn is_lease_not_found(error: &RegistryError) -> bool {
    matches!(error, RegistryError::Unavailable { reason } if reason.contains("lease not found"))
}

/// Keeps the broker's lease alive, and registers again whenever the lease
/// is lost — expired during an outage, unknown to a new etcd behind the
/// same address, or silent for longer than its TTL — as soon as etcd
/// answers and holds this broker's cluster. Logs each change of state once.
#[expect(
    clippy::too_many_lines,
    reason = "the lease's keep-alive loop with its reconnects; its state is local to it"
)]
async fn keep_alive(
    mut client: Client,
    keys: Keys,
    options: EtcdOptions,
    cluster_id: String,
    me: BrokerRecord,
    (lease, clock): (tokio::sync::watch::Sender<i64>, Arc<LeaseClock>),
    mut identity: tokio::sync::watch::Receiver<Identity>,
) {
    let ttl = Duration::from_secs(options.lease_ttl_s.max(1) as u64);
    let period = ttl / 3;
    let mut backoff = Backoff::default();
    let mut state = if *lease.borrow() == 0 {
        LeaseState::Foreign
    } else {
        LeaseState::Alive
    };
    let mut last_answer = tokio::time::Instant::now();
    let mut last_register_log: Option<std::time::Instant> = None;
    let mut since = std::time::Instant::now();
    let broker_id = me.broker_id;
    let mut change = |state: &mut LeaseState, to: LeaseState, detail: &str| {
        if *state == to {
            return;
        }
        let after = since.elapsed();
        match to {
            LeaseState::Alive => tracing::info!(broker_id, after = ?after, "registered in etcd again"),
            LeaseState::Retrying => tracing::warn!(broker_id, error = detail, "etcd does not answer the broker's keep-alives; retrying (the lease lasts {ttl:?} after the last answer)"),
            LeaseState::Lost => tracing::warn!(broker_id, reason = detail, "the broker's etcd lease is gone; registering again"),
            LeaseState::Foreign => tracing::warn!(broker_id, "the registry is not this broker's cluster; not registering there"),
        }
        *state = to;
        since = std::time::Instant::now();
    };
    loop {
        // Only a registry of our own cluster gets a registration.
        while !matches!(&*identity.borrow_and_update(), Identity::Joined { .. }) {
            change(&mut state, LeaseState::Foreign, "");
            if identity.changed().await.is_err() {
                return;
            }
        }
        if state != LeaseState::Alive && state != LeaseState::Retrying {
            clock.lost();
            let sent = std::time::Instant::now();
            match register(&mut client, &keys, &options, &cluster_id, &me).await {
                Ok(new) => {
                    clock.renewed(sent, ttl);
                    let _ = lease.send(new);
                    last_register_log = None;
                    last_answer = tokio::time::Instant::now();
                    backoff.reset();
                    change(&mut state, LeaseState::Alive, "");
                }
                Err(error) => {
                    // A mismatch is the watcher's to notice and report;
                    // anything else is etcd being away. Wait either way,
                    // and say so once a minute, not at every attempt.
                    if last_register_log.is_none_or(|at| at.elapsed() >= QUIET_LOG_INTERVAL) {
                        last_register_log = Some(std::time::Instant::now());
                        tracing::warn!(%error, "registering the broker in etcd; retrying");
                    }
                    futures_lite::future::or(backoff.wait(), async {
                        let _ = identity.changed().await;
                    })
                    .await;
                    continue;
                }
            }
        }
        let id = *lease.borrow();
        let round = async {
            let (mut keeper, mut stream) =
                match deadline(options.request_timeout, client.lease_keep_alive(id)).await {
                    Ok(pair) => pair,
                    Err(error) if is_lease_not_found(&error) => return Ended::Lost,
                    Err(error) => return Ended::Failed(error),
                };
            loop {
                let sent = std::time::Instant::now();
                if let Err(error) = keeper.keep_alive().await {
                    return Ended::Failed(unavailable(error));
                }
                match deadline(options.request_timeout, stream.message()).await {
                    Ok(Some(response)) if response.ttl() > 0 => {
                        clock.renewed(sent, Duration::from_secs(response.ttl() as u64));
                    }
                    Ok(Some(_)) => return Ended::Lost,
                    Ok(None) => return Ended::Failed(unavailable("the keep-alive stream ended")),
                    Err(error) => return Ended::Failed(error),
                }
                last_answer = tokio::time::Instant::now();
                backoff.reset();
                if state == LeaseState::Retrying {
                    tracing::info!(broker_id, "etcd answers the broker's keep-alives again");
                    state = LeaseState::Alive;
                }
                tokio::time::sleep(period).await;
            }
        };
        let watching = async {
            loop {
                if identity.changed().await.is_err() {
                    return Ended::Foreign;
                }
                if !matches!(&*identity.borrow(), Identity::Joined { .. }) {
                    return Ended::Foreign;
                }
            }
        };
        match futures_lite::future::or(round, watching).await {
            Ended::Lost => {
                clock.lost();
                change(&mut state, LeaseState::Lost, "etcd does not know the lease")
            }
            Ended::Foreign => {
                clock.lost();
                // Registered in what is no longer our cluster: leave it.
                let _ = deadline(options.request_timeout, client.lease_revoke(id)).await;
                change(&mut state, LeaseState::Foreign, "");
            }
            Ended::Failed(error) => {
                change(&mut state, LeaseState::Retrying, &error.to_string());
                if last_answer.elapsed() >= ttl {
                    // Silent for a whole TTL: the lease has expired by now
                    // (or etcd was replaced); a new one is needed.
                    change(
                        &mut state,
                        LeaseState::Lost,
                        "no keep-alive answered for a whole TTL",
                    );
                }
                backoff.wait().await;
            }
        }
    }
}

/// What the watch task needs.
struct Watcher {
    client: Client,
    keys: Keys,
    timeout: Duration,
    /// The cluster this broker belongs to.
    cluster_id: String,
    /// Which cluster the prefix holds, as the watch last saw; the watch is
    /// its only writer.
    identity: tokio::sync::watch::Sender<Identity>,
    events: mpsc::Sender<RegistryEvent>,
}

/// Why a watch stream ended.
enum WatchEnd {
    /// Broken or cancelled: take a new snapshot.
    Lost,
    /// The prefix's cluster id changed or was deleted under the watch.
    Foreign(Option<String>),
    /// The control thread is gone.
    Closed,
}

impl Watcher {
    fn joined(&self) -> Identity {
        Identity::Joined {
            cluster_id: self.cluster_id.clone(),
            adopted: false,
            replaced: None,
        }
    }

    /// Records and reports that the prefix holds another cluster (once per
    /// change of what was found). `false` when the receiver is gone.
    async fn report_foreign(&self, found: Option<String>) -> bool {
        let foreign = Foreign {
            expected: self.cluster_id.clone(),
            found,
        };
        let new = Identity::Foreign(foreign.clone());
        if *self.identity.borrow() == new {
            return true;
        }
        tracing::error!(
            expected = %foreign.expected,
            found = %foreign.found_words(),
            "the etcd prefix no longer holds this broker's cluster: applying nothing from it until it does"
        );
        self.identity.send_replace(new);
        self.events
            .send(RegistryEvent::ForeignCluster(foreign))
            .await
            .is_ok()
    }

    /// Watches the prefix from `revision + 1` until the stream ends.
    #[expect(
        clippy::too_many_lines,
        reason = "the registry's watch loop: one match over the keys it follows"
    )]
    async fn follow(
        &mut self,
        brokers: &mut BTreeMap<u32, BrokerRecord>,
        revision: i64,
        backoff: &mut Backoff,
    ) -> WatchEnd {
        let mut next_revision = revision + 1;
        let options = WatchOptions::new()
            .with_prefix()
            .with_prev_key()
            .with_start_revision(next_revision);
        let mut stream = match deadline(
            self.timeout,
            self.client.watch(self.keys.prefix(), Some(options)),
        )
        .await
        {
            Ok(stream) => stream,
            Err(error) => {
                backoff.note(|| tracing::warn!(%error, "starting the etcd watch"));
                return WatchEnd::Lost;
            }
        };
        loop {
            let response = match stream.message().await {
                Ok(Some(response)) => response,
                Ok(None) => return WatchEnd::Lost,
                Err(error) => {
                    backoff.note(|| tracing::warn!(%error, "etcd watch broken"));
                    return WatchEnd::Lost;
                }
            };
            if response.canceled() {
                tracing::warn!(reason = response.cancel_reason(), "etcd watch cancelled");
                return WatchEnd::Lost;
            }
            backoff.reset();
            // The identity first: a wipe deletes the id and the topics in
            // one revision, and none of those deletes may be applied.
            for event in response.events() {
                let Some(kv) = event.kv() else { continue };
                if self.keys.parse(&String::from_utf8_lossy(kv.key())) != Some(Key::ClusterId) {
                    continue;
                }
                let found = match event.event_type() {
                    EventType::Put => Some(String::from_utf8_lossy(kv.value()).into_owned()),
                    EventType::Delete => None,
                };
                if found.as_deref() != Some(self.cluster_id.as_str()) {
                    return WatchEnd::Foreign(found);
                }
            }
            let mut brokers_changed = false;
            let mut security_changed = false;
            for event in response.events() {
                let Some(kv) = event.kv() else { continue };
                next_revision = next_revision.max(kv.mod_revision() + 1);
                let Ok(key) = std::str::from_utf8(kv.key()) else {
                    continue;
                };
                let change = match (self.keys.parse(key), event.event_type()) {
                    (Some(Key::Topic(_)), EventType::Put) => {
                        parse_topic(kv.key(), kv.value()).map(|record| RegistryEvent::TopicPut {
                            record,
                            revision: kv.mod_revision(),
                        })
                    }
                    (Some(Key::Topic(name)), EventType::Delete) => {
                        let id = event
                            .prev_kv()
                            .and_then(|prev| {
                                serde_json::from_slice::<TopicRecord>(prev.value()).ok()
                            })
                            .map(|record| record.id)
                            .unwrap_or_default();
                        Some(RegistryEvent::TopicDeleted {
                            name: name.to_string(),
                            id,
                        })
                    }
                    (Some(Key::Broker(id)), EventType::Put) => {
                        if let Some(record) = parse_record::<BrokerRecord>(kv.key(), kv.value()) {
                            brokers.insert(id, record);
                            brokers_changed = true;
                        }
                        None
                    }
                    (Some(Key::Broker(id)), EventType::Delete) => {
                        brokers_changed |= brokers.remove(&id).is_some();
                        None
                    }
                    (Some(Key::GroupMember(group, _)), _) => {
                        Some(RegistryEvent::GroupMembers(group.to_string()))
                    }
                    (Some(Key::Partition(topic_id, partition)), EventType::Put) => {
                        parse_partition(kv.key(), kv).map(|state| RegistryEvent::PartitionState {
                            topic_id: topic_id.to_string(),
                            partition,
                            state,
                        })
                    }
                    (Some(Key::User(_) | Key::Acl(_) | Key::Quota(_)), _) => {
                        security_changed = true;
                        None
                    }
                    _ => None,
                };
                if let Some(change) = change {
                    if self.events.send(change).await.is_err() {
                        return WatchEnd::Closed;
                    }
                }
            }
            if security_changed
                && self
                    .events
                    .send(RegistryEvent::SecurityChanged)
                    .await
                    .is_err()
            {
                return WatchEnd::Closed;
            }
            if brokers_changed {
                let list = brokers.values().cloned().collect();
                if self
                    .events
                    .send(RegistryEvent::Brokers(list))
                    .await
                    .is_err()
                {
                    return WatchEnd::Closed;
                }
            }
        }
    }
}

/// Watches the cluster prefix and reports changes; after a lost watch,
/// takes a new snapshot and reports it whole — if the prefix still holds
/// this broker's cluster. While it holds another (or none), only the
/// cluster id is polled, and a `Resync` follows once it is ours again.
#[expect(
    clippy::too_many_lines,
    reason = "the watch's whole life: follow, lose, check whose cluster, resync; one loop read top to bottom"
)]
async fn watch(mut watcher: Watcher, start: Option<(Vec<BrokerRecord>, i64)>) {
    let mut backoff = Backoff::default();
    let mut brokers: BTreeMap<u32, BrokerRecord> = BTreeMap::new();
    let mut from = None;
    if let Some((list, revision)) = start {
        brokers = list.into_iter().map(|b| (b.broker_id, b)).collect();
        from = Some(revision);
    }
    loop {
        if let Some(revision) = from.take() {
            match watcher.follow(&mut brokers, revision, &mut backoff).await {
                WatchEnd::Closed => return,
                WatchEnd::Lost => {}
                WatchEnd::Foreign(found) => {
                    if !watcher.report_foreign(found).await {
                        return;
                    }
                }
            }
        }
        // The watch is gone: once etcd answers, check whose cluster it
        // holds; if ours, take a new snapshot, report it whole, and watch
        // on from its revision.
        loop {
            backoff.wait().await;
            let found =
                match read_cluster_id(&mut watcher.client, &watcher.keys, watcher.timeout).await {
                    Ok(found) => found,
                    Err(error) => {
                        backoff.note(|| tracing::warn!(%error, "etcd unreachable"));
                        continue;
                    }
                };
            if found.as_deref() != Some(watcher.cluster_id.as_str()) {
                if !watcher.report_foreign(found).await {
                    return;
                }
                continue;
            }
            match snapshot(&mut watcher.client, &watcher.keys, watcher.timeout).await {
                Ok(now) if now.cluster_id.as_deref() == Some(watcher.cluster_id.as_str()) => {
                    let was_foreign =
                        !matches!(&*watcher.identity.borrow(), Identity::Joined { .. });
                    if was_foreign {
                        tracing::info!(cluster_id = %watcher.cluster_id, "the etcd prefix holds this broker's cluster again");
                    }
                    watcher.identity.send_replace(watcher.joined());
                    brokers = now
                        .brokers
                        .iter()
                        .map(|b| (b.broker_id, b.clone()))
                        .collect();
                    let resync = RegistryEvent::Resync {
                        topics: now.topics,
                        brokers: now.brokers,
                        partitions: now.partitions,
                        revision: now.revision,
                    };
                    if watcher.events.send(resync).await.is_err() {
                        return;
                    }
                    from = Some(now.revision);
                    break;
                }
                Ok(now) => {
                    if !watcher.report_foreign(now.cluster_id).await {
                        return;
                    }
                }
                Err(error) => backoff.note(|| tracing::warn!(%error, "etcd unreachable")),
            }
        }
    }
}

/// Deleting a topic: its record, its partitions' states, and what the
/// brokers applied of it.
fn delete_topic_ops(keys: &Keys, key: &str, record: &TopicRecord) -> Vec<TxnOp> {
    let mut ops = vec![TxnOp::delete(key, None)];
    if !record.id.is_empty() {
        ops.push(TxnOp::delete(
            keys.partitions_of(&record.id),
            Some(DeleteOptions::new().with_prefix()),
        ));
        ops.push(TxnOp::delete(
            keys.served_of(&record.id),
            Some(DeleteOptions::new().with_prefix()),
        ));
    }
    ops
}

/// The live brokers that have not applied `topic_id`'s record as of
/// `revision`, read in one transaction (the live brokers and what each
/// applied, at one revision).
async fn not_served(
    client: &mut Client,
    keys: &Keys,
    topic_id: &str,
    revision: i64,
    timeout: Duration,
) -> Result<Vec<BrokerId>, RegistryError> {
    let txn = Txn::new().and_then([
        TxnOp::get(keys.brokers(), Some(GetOptions::new().with_prefix())),
        TxnOp::get(
            keys.served_of(topic_id),
            Some(GetOptions::new().with_prefix()),
        ),
    ]);
    let response = deadline(timeout, client.txn(txn)).await?;
    let mut live = Vec::new();
    let mut served = BTreeMap::new();
    for op in response.op_responses() {
        let TxnOpResponse::Get(get) = op else {
            continue;
        };
        for kv in get.kvs() {
            let Ok(key) = std::str::from_utf8(kv.key()) else {
                continue;
            };
            match keys.parse(key) {
                Some(Key::Broker(id)) => live.push(id),
                Some(Key::Served(_, id)) => {
                    let at = std::str::from_utf8(kv.value())
                        .ok()
                        .and_then(|v| v.parse::<i64>().ok())
                        .unwrap_or(0);
                    served.insert(id, at);
                }
                _ => {}
            }
        }
    }
    live.retain(|id| served.get(id).is_none_or(|at| *at < revision));
    Ok(live)
}

/// A capped exponential back-off that also rate-limits the warning logged
/// for each failure (one per back-off step, not one per attempt).
#[derive(Default)]
struct Backoff {
    step: u32,
    logged_at_step: Option<u32>,
}

impl Backoff {
    fn delay(&self) -> Duration {
        let ms = 50u64 << self.step.min(6);
        Duration::from_millis(ms).min(RETRY_BACKOFF_MAX)
    }

    async fn wait(&mut self) {
        tokio::time::sleep(self.delay()).await;
        self.step = self.step.saturating_add(1);
    }

    /// Logs a failure once per back-off step while the steps grow, then
    /// once every ten capped steps (about 20 s), not once per attempt.
    fn note(&mut self, log: impl FnOnce()) {
        let due = self.step <= 6 || self.step.is_multiple_of(10);
        if due && self.logged_at_step != Some(self.step) {
            self.logged_at_step = Some(self.step);
            log();
        }
    }

    fn reset(&mut self) {
        self.step = 0;
        self.logged_at_step = None;
    }
}

impl Registry for Etcd {
    type Groups = crate::groups::EtcdGroups;

    async fn kafka_group(
        &mut self,
        op: crate::kafka_groups::KafkaGroupOp,
    ) -> Result<crate::kafka_groups::KafkaGroupAnswer, RegistryError> {
        self.kafka_groups()?.serve(op).await
    }

    async fn forget_kafka_offsets(&mut self, topic: &str) -> Result<(), RegistryError> {
        self.kafka_groups()?.forget_topic(topic).await
    }

    async fn producer_ids(&mut self, count: u32) -> Result<std::ops::Range<i64>, RegistryError> {
        self.check_identity()?;
        let key = self.keys.producer_ids();
        // Brokers taking blocks at once: the loser of each race reads the
        // counter again.
        for _ in 0..PRODUCER_ID_TRIES {
            let response = deadline(
                self.options.request_timeout,
                self.client.get(key.clone(), None),
            )
            .await?;
            let (next, unchanged) = match response.kvs().first() {
                Some(kv) => {
                    let text = String::from_utf8_lossy(kv.value());
                    let next = text
                        .trim()
                        .parse::<i64>()
                        .map_err(|e| RegistryError::Corrupt {
                            path: key.clone(),
                            reason: format!("not a producer id: {e}"),
                        })?;
                    (
                        next,
                        Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision()),
                    )
                }
                None => (
                    super::first_producer_id(),
                    Compare::create_revision(key.clone(), CompareOp::Equal, 0),
                ),
            };
            let block = super::producer_id_block(next, count)?;
            let txn = Txn::new()
                .when([self.ours(), unchanged])
                .and_then([TxnOp::put(key.clone(), block.end.to_string(), None)])
                .or_else([TxnOp::get(self.keys.cluster_id(), None)]);
            let response = deadline(self.options.request_timeout, self.client.txn(txn)).await?;
            if response.succeeded() {
                return Ok(block);
            }
            self.still_ours(&response)?;
        }
        Err(unavailable(format!(
            "producer ids: {PRODUCER_ID_TRIES} allocations in a row lost a race to other brokers'"
        )))
    }

    async fn topics(&mut self) -> Result<Vec<TopicRecord>, RegistryError> {
        self.check_identity()?;
        let now = snapshot(&mut self.client, &self.keys, self.options.request_timeout).await?;
        if now.cluster_id.as_deref() != Some(self.cluster_id.as_str()) {
            // The watch will say so too; a read never hands out another
            // cluster's topics meanwhile.
            return Err(self.foreign(now.cluster_id));
        }
        Ok(now.topics)
    }

    async fn brokers(&mut self) -> Result<Vec<BrokerRecord>, RegistryError> {
        self.check_identity()?;
        let response = deadline(
            self.options.request_timeout,
            self.client
                .get(self.keys.brokers(), Some(GetOptions::new().with_prefix())),
        )
        .await?;
        let mut brokers: Vec<BrokerRecord> = response
            .kvs()
            .iter()
            .filter_map(|kv| parse_record(kv.key(), kv.value()))
            .collect();
        brokers.sort_by_key(|b| b.broker_id);
        Ok(brokers)
    }

    async fn create_topic(&mut self, topic: TopicRecord) -> Result<i64, RegistryError> {
        self.check_identity()?;
        let key = self.keys.topic(&topic.name);
        let value = serde_json::to_vec(&topic).map_err(unavailable)?;
        let txn = Txn::new()
            .when([
                self.ours(),
                Compare::create_revision(key.clone(), CompareOp::Equal, 0),
            ])
            .and_then([TxnOp::put(key, value, None)])
            .or_else([TxnOp::get(self.keys.cluster_id(), None)]);
        let response = deadline(self.options.request_timeout, self.client.txn(txn)).await?;
        if !response.succeeded() {
            self.still_ours(&response)?;
            return Err(RegistryError::TopicExists { name: topic.name });
        }
        Ok(response.header().map_or(0, |h| h.revision()))
    }

    async fn delete_topic(&mut self, name: &str) -> Result<TopicRecord, RegistryError> {
        self.check_identity()?;
        let key = self.keys.topic(name);
        let timeout = self.options.request_timeout;
        loop {
            let response = deadline(timeout, self.client.get(key.clone(), None)).await?;
            let Some(kv) = response.kvs().first() else {
                return Err(RegistryError::UnknownTopic {
                    name: name.to_string(),
                });
            };
            let record: TopicRecord =
                serde_json::from_slice(kv.value()).map_err(|e| RegistryError::Corrupt {
                    path: key.clone(),
                    reason: e.to_string(),
                })?;
            let txn = Txn::new()
                .when([
                    self.ours(),
                    Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision()),
                ])
                .and_then(delete_topic_ops(&self.keys, &key, &record))
                .or_else([TxnOp::get(self.keys.cluster_id(), None)]);
            let response = deadline(timeout, self.client.txn(txn)).await?;
            if response.succeeded() {
                return Ok(record);
            }
            self.still_ours(&response)?;
            // Rewritten (or deleted) in between: read it again.
        }
    }

    async fn topic(&mut self, name: &str) -> Result<Option<(TopicRecord, i64)>, RegistryError> {
        self.check_identity()?;
        let key = self.keys.topic(name);
        let response = deadline(
            self.options.request_timeout,
            self.client.get(key.clone(), None),
        )
        .await?;
        let Some(kv) = response.kvs().first() else {
            return Ok(None);
        };
        let record: TopicRecord =
            serde_json::from_slice(kv.value()).map_err(|e| RegistryError::Corrupt {
                path: key,
                reason: e.to_string(),
            })?;
        Ok(Some((record, kv.mod_revision())))
    }

    async fn replace_topic(
        &mut self,
        record: TopicRecord,
        expected: i64,
    ) -> Result<Option<i64>, RegistryError> {
        self.check_identity()?;
        let key = self.keys.topic(&record.name);
        let value = serde_json::to_vec(&record).map_err(unavailable)?;
        let txn = Txn::new()
            .when([
                self.ours(),
                Compare::mod_revision(key.clone(), CompareOp::Equal, expected),
            ])
            .and_then([TxnOp::put(key, value, None)])
            .or_else([TxnOp::get(self.keys.cluster_id(), None)]);
        let response = deadline(self.options.request_timeout, self.client.txn(txn)).await?;
        if response.succeeded() {
            return Ok(Some(response.header().map_or(0, |h| h.revision())));
        }
        self.still_ours(&response)?;
        Ok(None)
    }

    async fn mark_served(
        &mut self,
        topics: &[(String, String)],
        revision: i64,
    ) -> Result<(), RegistryError> {
        self.check_identity()?;
        let me = self.me;
        for batch in topics.chunks(UPDATES_PER_TXN) {
            // Each only while the topic's record is still the one applied
            // (it exists, unchanged since `revision`): a deleted topic's
            // key would otherwise be left behind for good.
            let ops: Vec<TxnOp> = batch
                .iter()
                .filter(|(_, id)| !id.is_empty())
                .map(|(name, id)| {
                    let topic = self.keys.topic(name);
                    TxnOp::txn(
                        Txn::new()
                            .when([
                                Compare::create_revision(topic.clone(), CompareOp::NotEqual, 0),
                                Compare::mod_revision(topic, CompareOp::Less, revision + 1),
                            ])
                            .and_then([TxnOp::put(
                                self.keys.served(id, me),
                                revision.to_string(),
                                None,
                            )]),
                    )
                })
                .collect();
            if ops.is_empty() {
                continue;
            }
            let txn = Txn::new()
                .when([self.ours()])
                .and_then(ops)
                .or_else([TxnOp::get(self.keys.cluster_id(), None)]);
            let response = deadline(self.options.request_timeout, self.client.txn(txn)).await?;
            if !response.succeeded() {
                self.still_ours(&response)?;
            }
        }
        Ok(())
    }

    fn served_waiter(
        &self,
        topic_id: &str,
        revision: i64,
        timeout: Duration,
    ) -> Option<super::ServedWait> {
        let mut client = self.client.clone();
        let keys = self.keys.clone();
        let topic_id = topic_id.to_string();
        let request_timeout = self.options.request_timeout;
        Some(Box::pin(async move {
            let started = std::time::Instant::now();
            let mut pause = Duration::from_millis(2);
            loop {
                let behind =
                    not_served(&mut client, &keys, &topic_id, revision, request_timeout).await;
                let waited = started.elapsed();
                match behind {
                    Ok(brokers) if brokers.is_empty() => return Ok(()),
                    Ok(brokers) if waited >= timeout => {
                        return Err(RegistryError::NotServed {
                            brokers,
                            waited_s: waited.as_secs(),
                        })
                    }
                    Err(error) if waited >= timeout => return Err(error),
                    Ok(_) | Err(_) => {}
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(50));
            }
        }))
    }

    async fn partition_states(
        &mut self,
        topic_id: &str,
    ) -> Result<BTreeMap<u32, Versioned>, RegistryError> {
        self.check_identity()?;
        let response = deadline(
            self.options.request_timeout,
            self.client.get(
                self.keys.partitions_of(topic_id),
                Some(GetOptions::new().with_prefix()),
            ),
        )
        .await?;
        let mut states = BTreeMap::new();
        for kv in response.kvs() {
            let Ok(key) = std::str::from_utf8(kv.key()) else {
                continue;
            };
            if let Some(Key::Partition(_, p)) = self.keys.parse(key) {
                if let Some(state) = parse_partition(kv.key(), kv) {
                    states.insert(p, state);
                }
            }
        }
        Ok(states)
    }

    async fn update_partitions(
        &mut self,
        topic_id: &str,
        updates: Vec<PartitionUpdate>,
    ) -> Result<Vec<UpdateOutcome>, RegistryError> {
        self.check_identity()?;
        let mut outcomes = Vec::with_capacity(updates.len());
        for batch in updates.chunks(UPDATES_PER_TXN) {
            let mut ops = Vec::with_capacity(batch.len());
            for update in batch {
                let key = self.keys.partition(topic_id, update.partition);
                let value = serde_json::to_vec(&update.state).map_err(unavailable)?;
                ops.push(TxnOp::txn(
                    Txn::new()
                        .when([Compare::mod_revision(
                            key.clone(),
                            CompareOp::Equal,
                            update.expected,
                        )])
                        .and_then([TxnOp::put(key.clone(), value, None)])
                        .or_else([TxnOp::get(key, None)]),
                ));
            }
            // Each update stands or falls on its own; all of them only in
            // this cluster.
            let txn = Txn::new()
                .when([Compare::value(
                    self.keys.cluster_id(),
                    CompareOp::Equal,
                    self.cluster_id.as_str(),
                )])
                .and_then(ops)
                .or_else([TxnOp::get(self.keys.cluster_id(), None)]);
            let response = deadline(self.options.request_timeout, self.client.txn(txn)).await?;
            if !response.succeeded() {
                let found = got(&response).first().and_then(value_of);
                return Err(self.foreign(found));
            }
            let revision = response.header().map_or(0, |h| h.revision());
            for op in response.op_responses() {
                let TxnOpResponse::Txn(inner) = op else {
                    continue;
                };
                if inner.succeeded() {
                    outcomes.push(UpdateOutcome::Done(revision));
                    continue;
                }
                let current = inner.op_responses().into_iter().find_map(|op| match op {
                    TxnOpResponse::Get(get) => Some(
                        get.kvs()
                            .first()
                            .and_then(|kv| parse_partition(kv.key(), kv)),
                    ),
                    _ => None,
                });
                outcomes.push(UpdateOutcome::Conflict(current.flatten()));
            }
        }
        Ok(outcomes)
    }

    fn identity(&self) -> Option<Identity> {
        Some(self.identity.borrow().clone())
    }

    fn lease_clock(&self) -> Option<Arc<LeaseClock>> {
        Some(self.lease_clock.clone())
    }

    fn groups(&self) -> Option<Self::Groups> {
        Some(crate::groups::EtcdGroups::new(
            self.client.clone(),
            self.keys.clone(),
            self.options.request_timeout,
            self.cluster_id.clone(),
            self.options.lease_ttl_s,
        ))
    }

    async fn security(&mut self) -> Result<crate::security::SecurityRecords, RegistryError> {
        let timeout = self.options.request_timeout;
        tokio::time::timeout(
            timeout,
            crate::security::read_etcd(&mut self.client, &self.keys),
        )
        .await
        .map_err(|_| unavailable(format!("no answer within {timeout:?}")))?
    }

    async fn change_security(
        &mut self,
        change: crate::security::SecurityChange,
    ) -> Result<crate::security::Changed, RegistryError> {
        let timeout = self.options.request_timeout;
        tokio::time::timeout(
            timeout,
            crate::security::change_etcd(&mut self.client, &self.keys, &change),
        )
        .await
        .map_err(|_| unavailable(format!("no answer within {timeout:?}")))?
    }

    async fn next_event(&mut self) -> RegistryEvent {
        match self.events.recv().await {
            Some(event) => event,
            None => std::future::pending().await,
        }
    }

    async fn close(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        let lease = self.lease();
        if lease == 0 {
            return;
        }
        // The broker key goes at once, instead of one TTL later.
        if let Err(error) = deadline(
            self.options.request_timeout,
            self.client.lease_revoke(lease),
        )
        .await
        {
            tracing::warn!(%error, "revoking the broker's lease at stop");
        }
    }
}
