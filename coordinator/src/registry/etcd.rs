//! The etcd registry: brokers and topics of one cluster, under its prefix
//! (the key table is in [`crate::keys`]).
//!
//! - **Broker registry.** [`Etcd::connect`] registers this broker under
//!   `brokers/<id>` with a lease of `lease_ttl_s` seconds, kept alive by a
//!   background task; the key vanishes at most one TTL after the broker dies.
//!   The registration is create-if-absent, so two live brokers never share
//!   an id. A key left by this broker's own previous run (same data
//!   directory, recognised by its `data_dir_id`) is taken over at once, so a
//!   restart after kill -9 does not wait for the old lease to expire. If the
//!   lease is lost (etcd unreachable for longer than the TTL), the task
//!   registers again as soon as etcd answers.
//! - **Topic registry.** Topic records are persistent keys, created with a
//!   transaction that succeeds only if the key has never been created
//!   (`create_revision == 0`), deleted with one that succeeds only if the
//!   record is still the one read.
//! - **Watch.** A background task watches the whole prefix from the revision
//!   of the snapshot the broker started from, so no change is missed between
//!   the two, and turns changes into [`RegistryEvent`]s. When the watch
//!   breaks (etcd down, history compacted), it takes a new snapshot once etcd
//!   answers and reports it whole as [`RegistryEvent::Resync`].
//!
//! Every request has a deadline (`request_timeout`); a request that misses
//! it is [`RegistryError::Unavailable`]. The background tasks never give up:
//! they retry with a capped back-off and log (at most once per back-off).

use super::{BrokerRecord, Registry, RegistryError, RegistryEvent, TopicRecord};
use crate::keys::{Key, Keys};
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, PutOptions, Txn, TxnOp,
    WatchOptions,
};
use std::collections::BTreeMap;
use std::future::Future;
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
}

/// Events queued from the watch task before it waits for the control thread.
const EVENTS_QUEUED_MAX: usize = 1024;
/// Longest pause between two attempts of a background task.
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// The registry in etcd. Owned by the broker's control thread; must be
/// created inside a tokio runtime (it spawns its background tasks there).
pub struct Etcd {
    client: Client,
    keys: Keys,
    options: EtcdOptions,
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

/// Every topic and live broker, and the revision they were read at.
struct Snapshot {
    topics: Vec<TopicRecord>,
    brokers: Vec<BrokerRecord>,
    revision: i64,
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
    for kv in response.kvs() {
        let Ok(key) = std::str::from_utf8(kv.key()) else {
            continue;
        };
        match keys.parse(key) {
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
        revision,
    })
}

impl Etcd {
    /// Connects, registers `me` in the broker registry, and starts the
    /// lease keep-alive and the watch. Fails when etcd does not answer
    /// within the request timeout, or when another live broker has `me`'s id.
    pub async fn connect(options: EtcdOptions, me: BrokerRecord) -> Result<Etcd, RegistryError> {
        let keys = Keys::new(&options.cluster);
        let timeout = options.request_timeout;
        let connect_options = ConnectOptions::new().with_connect_timeout(timeout);
        let mut client = deadline(
            timeout,
            Client::connect(options.endpoints.clone(), Some(connect_options)),
        )
        .await
        .map_err(|e| {
            unavailable(format!(
                "connecting to {}: {e}",
                options.endpoints.join(",")
            ))
        })?;
        let lease = register(&mut client, &keys, &options, &me).await?;
        let first = snapshot(&mut client, &keys, timeout).await?;
        let (lease_tx, lease_rx) = tokio::sync::watch::channel(lease);
        let (events_tx, events) = mpsc::channel(EVENTS_QUEUED_MAX);
        let keeper = tokio::spawn(keep_alive(
            client.clone(),
            keys.clone(),
            options.clone(),
            me,
            lease_tx,
        ));
        let watcher = tokio::spawn(watch(
            client.clone(),
            keys.clone(),
            timeout,
            first.brokers,
            first.revision,
            events_tx,
        ));
        Ok(Etcd {
            client,
            keys,
            options,
            events,
            lease: lease_rx,
            tasks: vec![keeper, watcher],
        })
    }

    /// The lease this broker's registration is bound to right now.
    fn lease(&self) -> i64 {
        *self.lease.borrow()
    }
}

/// Grants a lease and puts `me` under it, create-if-absent. A key left by
/// this data directory's previous run is replaced; one held by another live
/// broker is [`RegistryError::DuplicateBroker`].
async fn register(
    client: &mut Client,
    keys: &Keys,
    options: &EtcdOptions,
    me: &BrokerRecord,
) -> Result<i64, RegistryError> {
    let timeout = options.request_timeout;
    let key = keys.broker(me.broker_id);
    let value = serde_json::to_vec(me).map_err(unavailable)?;
    let lease = deadline(timeout, client.lease_grant(options.lease_ttl_s, None))
        .await?
        .id();
    for _ in 0..3 {
        let put = TxnOp::put(
            key.clone(),
            value.clone(),
            Some(PutOptions::new().with_lease(lease)),
        );
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([put])
            .or_else([TxnOp::get(key.clone(), None)]);
        let response = deadline(timeout, client.txn(txn)).await?;
        if response.succeeded() {
            return Ok(lease);
        }
        let Some(existing) = response.op_responses().into_iter().find_map(|op| match op {
            etcd_client::TxnOpResponse::Get(get) => get.kvs().first().cloned(),
            _ => None,
        }) else {
            continue; // it expired in between: try again
        };
        let holder: Option<BrokerRecord> = serde_json::from_slice(existing.value()).ok();
        let ours = holder
            .as_ref()
            .is_some_and(|h| !h.data_dir_id.is_empty() && h.data_dir_id == me.data_dir_id);
        if !ours {
            let _ = client.lease_revoke(lease).await;
            return Err(RegistryError::DuplicateBroker {
                broker_id: me.broker_id,
                holder: String::from_utf8_lossy(existing.value()).into_owned(),
            });
        }
        // Our own previous run (killed before its lease expired): the data
        // directory's lock proves that run is gone. Take the key over.
        tracing::info!(
            broker_id = me.broker_id,
            "replacing the registration of this broker's previous run"
        );
        let replace = Txn::new()
            .when([Compare::mod_revision(
                key.clone(),
                CompareOp::Equal,
                existing.mod_revision(),
            )])
            .and_then([TxnOp::put(
                key.clone(),
                value.clone(),
                Some(PutOptions::new().with_lease(lease)),
            )]);
        if deadline(timeout, client.txn(replace)).await?.succeeded() {
            if existing.lease() != 0 {
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

/// Keeps the broker's lease alive; registers again when it was lost.
async fn keep_alive(
    mut client: Client,
    keys: Keys,
    options: EtcdOptions,
    me: BrokerRecord,
    lease: tokio::sync::watch::Sender<i64>,
) {
    let period = Duration::from_millis((options.lease_ttl_s.max(1) as u64 * 1000) / 3);
    let mut backoff = Backoff::default();
    loop {
        let id = *lease.borrow();
        let alive = async {
            let (mut keeper, mut stream) =
                deadline(options.request_timeout, client.lease_keep_alive(id)).await?;
            loop {
                keeper.keep_alive().await.map_err(unavailable)?;
                match deadline(options.request_timeout, stream.message()).await? {
                    Some(response) if response.ttl() > 0 => {}
                    Some(_) => return Ok::<bool, RegistryError>(false), // expired
                    None => return Err(unavailable("the keep-alive stream ended")),
                }
                backoff.reset();
                tokio::time::sleep(period).await;
            }
        };
        match alive.await {
            Ok(_expired) => {
                tracing::warn!(
                    broker_id = me.broker_id,
                    "the broker's etcd lease expired; registering again"
                );
                match register(&mut client, &keys, &options, &me).await {
                    Ok(new) => {
                        let _ = lease.send(new);
                        tracing::info!(broker_id = me.broker_id, "registered again in etcd");
                    }
                    Err(error) => {
                        tracing::warn!(%error, "registering again in etcd");
                        backoff.wait().await;
                    }
                }
            }
            Err(error) => {
                backoff.note(|| tracing::warn!(%error, "keeping the broker's etcd lease alive"));
                backoff.wait().await;
            }
        }
    }
}

/// Watches the cluster prefix and reports changes; resynchronises after a
/// lost watch.
async fn watch(
    mut client: Client,
    keys: Keys,
    timeout: Duration,
    brokers: Vec<BrokerRecord>,
    revision: i64,
    events: mpsc::Sender<RegistryEvent>,
) {
    let mut brokers: BTreeMap<u32, BrokerRecord> =
        brokers.into_iter().map(|b| (b.broker_id, b)).collect();
    let mut next_revision = revision + 1;
    let mut backoff = Backoff::default();
    loop {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(next_revision);
        match deadline(timeout, client.watch(keys.prefix(), Some(options))).await {
            Ok(mut stream) => loop {
                let response = match stream.message().await {
                    Ok(Some(response)) => response,
                    Ok(None) => break,
                    Err(error) => {
                        backoff.note(|| tracing::warn!(%error, "etcd watch broken"));
                        break;
                    }
                };
                if response.canceled() {
                    tracing::warn!(reason = response.cancel_reason(), "etcd watch cancelled");
                    break;
                }
                backoff.reset();
                let mut brokers_changed = false;
                for event in response.events() {
                    let Some(kv) = event.kv() else { continue };
                    next_revision = next_revision.max(kv.mod_revision() + 1);
                    let Ok(key) = std::str::from_utf8(kv.key()) else {
                        continue;
                    };
                    let change = match (keys.parse(key), event.event_type()) {
                        (Some(Key::Topic(_)), EventType::Put) => {
                            parse_topic(kv.key(), kv.value()).map(RegistryEvent::TopicPut)
                        }
                        (Some(Key::Topic(name)), EventType::Delete) => {
                            Some(RegistryEvent::TopicDeleted(name.to_string()))
                        }
                        (Some(Key::Broker(id)), EventType::Put) => {
                            if let Some(record) = parse_record::<BrokerRecord>(kv.key(), kv.value())
                            {
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
                        _ => None,
                    };
                    if let Some(change) = change {
                        if events.send(change).await.is_err() {
                            return;
                        }
                    }
                }
                if brokers_changed {
                    let list = brokers.values().cloned().collect();
                    if events.send(RegistryEvent::Brokers(list)).await.is_err() {
                        return;
                    }
                }
            },
            Err(error) => backoff.note(|| tracing::warn!(%error, "starting the etcd watch")),
        }
        // The watch is gone: take a new snapshot once etcd answers, report
        // it whole, and watch on from its revision.
        loop {
            backoff.wait().await;
            match snapshot(&mut client, &keys, timeout).await {
                Ok(now) => {
                    brokers = now
                        .brokers
                        .iter()
                        .map(|b| (b.broker_id, b.clone()))
                        .collect();
                    next_revision = now.revision + 1;
                    let resync = RegistryEvent::Resync {
                        topics: now.topics,
                        brokers: now.brokers,
                    };
                    if events.send(resync).await.is_err() {
                        return;
                    }
                    break;
                }
                Err(error) => backoff.note(|| tracing::warn!(%error, "etcd unreachable")),
            }
        }
    }
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
    async fn topics(&mut self) -> Result<Vec<TopicRecord>, RegistryError> {
        Ok(
            snapshot(&mut self.client, &self.keys, self.options.request_timeout)
                .await?
                .topics,
        )
    }

    async fn brokers(&mut self) -> Result<Vec<BrokerRecord>, RegistryError> {
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

    async fn create_topic(&mut self, topic: TopicRecord) -> Result<(), RegistryError> {
        let key = self.keys.topic(&topic.name);
        let value = serde_json::to_vec(&topic).map_err(unavailable)?;
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, value, None)]);
        let response = deadline(self.options.request_timeout, self.client.txn(txn)).await?;
        if !response.succeeded() {
            return Err(RegistryError::TopicExists { name: topic.name });
        }
        Ok(())
    }

    async fn delete_topic(&mut self, name: &str) -> Result<TopicRecord, RegistryError> {
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
                .when([Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    kv.mod_revision(),
                )])
                .and_then([TxnOp::delete(key.clone(), None)]);
            if deadline(timeout, self.client.txn(txn)).await?.succeeded() {
                return Ok(record);
            }
            // Rewritten (or deleted) in between: read it again.
        }
    }

    fn groups(&self) -> Option<crate::groups::Groups> {
        Some(crate::groups::Groups::new(
            self.client.clone(),
            self.keys.clone(),
            self.options.request_timeout,
        ))
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
