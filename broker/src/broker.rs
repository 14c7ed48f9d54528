//! Start-up and shutdown: pinned executors, the ready line, signals.
//!
//! Start: validate the configuration, lock the data directory, start the
//! control thread (which opens the topic registry and hands back the
//! registered topics), bind one listener per shard, start one pinned glommio
//! executor per shard (each recovers and opens the partitions it owns), and
//! print one ready line on stdout once every shard serves. Stop (SIGTERM or
//! SIGINT): the control thread finishes its current change and stops, every
//! shard stops accepting, flushes every partition, writes an exact recovery
//! point and exits; then the process exits 0.

use crate::config::Config;
use crate::control;
use crate::control::membership::Meta;
use crate::handler;
use crate::mailbox::{ControlMsg, ShardMsg};
use crate::metrics::{self, Published};
use crate::notify::Notify;
use crate::shard::{self, Shard};
use crate::storage::io::{DiskStorage, DriverSettings};
use anyhow::{bail, Context};
use coordinator::registry::{
    BrokerRecord, Etcd, EtcdOptions, Identity, ShardEndpoint, Standalone, TopicRecord,
};
use glommio::{LocalExecutorBuilder, Placement};
use protocol::types::ShardId;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// Runs the broker until SIGTERM/SIGINT.
#[expect(
    clippy::too_many_lines,
    reason = "the process's start in order (limits, identity, threads, signals); split, the order would be hidden"
)]
pub fn run(mut config: Config) -> anyhow::Result<()> {
    // Signals are blocked before any thread starts (the metrics endpoint's
    // among them), so only sigwait sees them: a thread that did not block
    // them would take a SIGTERM's default action, killing the process
    // without its graceful stop.
    let signals = blocked_signals()?;
    config.validate()?;
    // Bad certificate files stop the start with one line, before anything binds.
    crate::net::tls::init(&config)?;
    crate::auth::init(&config)?;
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating data dir {}", config.data_dir.display()))?;
    let _lock = lock_data_dir(&config)?;
    check_io_uring()?;
    check_memlock(&config)?;

    let listeners = bind_listeners(&config, config.listen, "--listen")?;
    let addresses: Vec<SocketAddr> = listeners
        .iter()
        .map(|l| l.local_addr())
        .collect::<Result<_, _>>()?;
    let kafka_listeners = match config.kafka_listen {
        Some(base) => bind_listeners(&config, base, "--kafka-listen")?,
        None => Vec::new(),
    };
    let kafka_addresses: Vec<SocketAddr> = kafka_listeners
        .iter()
        .map(|l| l.local_addr())
        .collect::<Result<_, _>>()?;
    let kafka_ports: Vec<u16> = kafka_addresses.iter().map(SocketAddr::port).collect();
    let incarnation = coordinator::registry::random_id();
    config.incarnation = incarnation.clone();
    // Before anything creates a partition directory: which replicated
    // copies are new (the control thread and the shards judge alike).
    config.copies_at_start = Arc::new(
        crate::storage::new_copy::CopiesAtStart::scan(&config.data_dir)
            .with_context(|| format!("listing {}", config.data_dir.display()))?,
    );
    let (senders, inboxes): (Vec<_>, Vec<_>) = (0..config.shards)
        .map(|_| flume::bounded::<ShardMsg>(crate::limits::FORWARD_QUEUE_MAX))
        .unzip();
    // A cluster member registers its directory's id (to recognise its own
    // earlier registration in etcd, and the ISR names the directory each
    // member holds its copy in). A standalone broker is a cluster of its
    // own: the id is the cluster id it answers Metadata with.
    let dir_id = data_dir_id(&config)?;
    let data_dir_id = if config.clustered() {
        dir_id.clone()
    } else {
        String::new()
    };
    let me = BrokerRecord {
        broker_id: config.broker_id,
        shards: addresses
            .iter()
            .enumerate()
            .map(|(i, addr)| ShardEndpoint {
                shard_id: i as u16,
                host: config
                    .advertise_host
                    .clone()
                    .unwrap_or_else(|| addr.ip().to_string()),
                port: addr.port(),
                kafka_port: kafka_ports.get(i).copied(),
            })
            .collect(),
        version: crate::VERSION.to_string(),
        incarnation: incarnation.clone(),
        rack: config.rack.clone(),
        data_dir_id: data_dir_id.clone(),
    };
    // Which cluster the data directory belongs to, if it joined one.
    let meta = if config.clustered() {
        let meta = Meta::read(&config.data_dir)?;
        if let Some(meta) = &meta {
            meta.check_broker_id(&config.data_dir, config.broker_id)?;
            if meta.cluster != config.cluster {
                tracing::warn!(
                    data_dir_cluster = %meta.cluster,
                    cluster = %config.cluster,
                    "this data directory joined cluster {:?}, and --cluster is {:?}: unless that prefix holds its cluster id, nothing there is applied",
                    meta.cluster,
                    config.cluster
                );
            }
        }
        meta
    } else {
        None
    };
    config.fresh_data_dir = config.clustered() && meta.is_none();
    let me_alone = me.clone();
    let (control, loaded) = if config.clustered() {
        let options = EtcdOptions {
            endpoints: config.etcd.clone(),
            cluster: config.cluster.clone(),
            lease_ttl_s: i64::from(config.etcd_lease_ttl_s),
            request_timeout: Duration::from_millis(config.etcd_timeout_ms),
            cluster_id: meta.as_ref().map(|m| m.cluster_id.clone()),
            join_new_cluster: config.join_new_cluster,
            access: config.etcd_access(),
        };
        let endpoints = config.etcd.join(",");
        let access = config.etcd_access();
        control::start(&config, senders.clone(), move || Etcd::connect(options, me)).map_err(
            |error| {
                // The likely cause, whichever request of the start failed.
                let hint = access.hint_for(&format!("{error:#}"));
                error.context(format!(
                    "joining cluster {:?} through etcd {endpoints}{hint}",
                    config.cluster
                ))
            },
        )?
    } else {
        let data_dir = config.data_dir.clone();
        control::start(&config, senders.clone(), move || async move {
            Standalone::open(&data_dir, me)
        })
        .with_context(|| format!("in {}", config.data_dir.display()))?
    };
    config.cluster_id = match &loaded.identity {
        Some(Identity::Joined { cluster_id, .. }) => cluster_id.clone(),
        Some(Identity::Foreign(_)) => String::new(),
        None => dir_id,
    };
    let foreign = match &loaded.identity {
        Some(Identity::Joined {
            cluster_id,
            adopted,
            replaced,
        }) => {
            if *adopted {
                Meta {
                    cluster: config.cluster.clone(),
                    cluster_id: cluster_id.clone(),
                    broker_id: config.broker_id,
                }
                .write(&config.data_dir)?;
                match replaced {
                    Some(old) => tracing::warn!(
                        %cluster_id,
                        left = %old,
                        "--join-new-cluster: this data directory now belongs to the cluster etcd holds"
                    ),
                    None => {
                        tracing::info!(%cluster_id, cluster = %config.cluster, "joined the cluster")
                    }
                }
            } else if config.join_new_cluster {
                tracing::info!(%cluster_id, "--join-new-cluster: this data directory already belongs to the cluster etcd holds");
            }
            false
        }
        Some(Identity::Foreign(foreign)) => {
            tracing::error!(
                "{}",
                coordinator::registry::RegistryError::ClusterMismatch(foreign.clone())
            );
            true
        }
        None => false,
    };
    let topics = loaded.topics;
    // Before any partition opens: finish deletes a crash interrupted, and
    // move aside directories of topics deleted meanwhile, so that a topic
    // re-created under an old name never serves the old messages. Not
    // against a registry that is not this broker's cluster: what it lacks
    // says nothing about this broker's data.
    let me = config.broker_id;
    let swept = if foreign {
        Default::default()
    } else {
        crate::storage::sweep::sweep(&config.data_dir, |name, partition| {
            topics
                .iter()
                .any(|t| t.name == name && t.has_replica(partition, me))
        })
        .with_context(|| format!("sweeping {}", config.data_dir.display()))?
    };
    // A fresh data directory holds none of the partitions the registry
    // placed on this broker id: one-copy ones are marked lost instead of
    // being served empty from offset 0.
    if config.fresh_data_dir && !foreign {
        let lost = crate::storage::lost::mark_vanished(&config.data_dir, &topics, me)
            .with_context(|| format!("marking lost partitions in {}", config.data_dir.display()))?;
        if !lost.is_empty() {
            tracing::error!(
                partitions = %lost.join(","),
                "this broker started on an empty data directory, but the registry places the only copy of {} partition(s) on broker {me}: their data was lost (the directory was wiped or replaced). They are not served (DATA_LOST), so that no offset is reused, until an operator restores their directories, or accepts the loss by removing <data-dir>/<topic>-<partition>/{}, and restarts the broker",
                lost.len(),
                crate::storage::lost::MARKER
            );
        }
    }
    if swept.tombstones_removed > 0 || !swept.orphans_moved.is_empty() {
        tracing::info!(
            deletes_finished = swept.tombstones_removed,
            moved_aside = swept.orphans_moved.len(),
            "swept the data dir"
        );
    }
    // With a foreign registry, Metadata lists this broker alone: who else
    // is live is not known.
    let brokers = if loaded.brokers.is_empty() {
        vec![me_alone]
    } else {
        loaded.brokers
    };
    fit_connections_to_nofile(&mut config)?;
    let published: Published = Arc::new(Mutex::new(vec![Default::default(); config.shards]));
    let metrics_address = match config.metrics_listen {
        Some(addr) => {
            let listener = TcpListener::bind(addr)
                .with_context(|| format!("binding the metrics endpoint {addr}"))?;
            let bound = listener.local_addr()?;
            metrics::serve(listener, published.clone(), config.data_dir.clone());
            Some(bound)
        }
        None => None,
    };

    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), ShardStartError>>();
    let alive = Arc::new(AtomicUsize::new(config.shards));
    let mut handles = Vec::new();
    let mut kafka_fds = kafka_listeners.into_iter().map(|l| l.into_raw_fd());
    for (id, (listener, inbox)) in listeners.into_iter().zip(inboxes).enumerate() {
        let placement = if config.shards <= cpus {
            // Several brokers on one machine (deploy/cluster.sh) give each a
            // different first CPU, or they would all pin shard 0 to CPU 0.
            Placement::Fixed((config.first_cpu + id) % cpus)
        } else {
            Placement::Unbound
        };
        let context = ShardContext {
            id: id as u16,
            config: config.clone(),
            addresses: addresses.clone(),
            peers: senders.clone(),
            control: control.requests.clone(),
            brokers: brokers.clone(),
            incarnation: incarnation.clone(),
            data_dir_id: data_dir_id.clone(),
            lease: loaded.lease.clone(),
            orphaned_at_start: if id == 0 {
                swept.orphans_moved.len() as u64
            } else {
                0
            },
            inbox,
            listener_fd: listener.into_raw_fd(),
            kafka_listener_fd: kafka_fds.next(),
            topics: topics.clone(),
            ready: ready_tx.clone(),
            published: published.clone(),
        };
        let alive = alive.clone();
        let handle = LocalExecutorBuilder::new(placement)
            .name(&format!("shard-{id}"))
            .io_memory(config.io_memory_bytes)
            .spawn(move || async move {
                shard_main(context).await;
                alive.fetch_sub(1, Ordering::SeqCst);
            })
            .map_err(|e| anyhow::anyhow!("starting shard {id}: {e} (io_uring unavailable? check seccomp and kernel.io_uring_disabled; RLIMIT_MEMLOCK must cover --io-memory per shard)"))?;
        handles.push(handle);
    }
    drop(ready_tx);
    for _ in 0..config.shards {
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                control.stop();
                stop_shards(&senders);
                bail!("a shard failed to start: {error}");
            }
            Err(_) => {
                control.stop();
                bail!("a shard exited during start-up");
            }
        }
    }
    let ports: Vec<String> = addresses.iter().map(|a| a.to_string()).collect();
    let metrics_text = metrics_address.map_or(String::new(), |a| format!(" metrics {a}"));
    let kafka_text = if kafka_addresses.is_empty() {
        String::new()
    } else {
        let kafka: Vec<String> = kafka_addresses.iter().map(|a| a.to_string()).collect();
        format!(" kafka {}", kafka.join(","))
    };
    println!(
        "ringlog broker {} ready: shards {}{}{} data-dir {}",
        config.broker_id,
        ports.join(","),
        kafka_text,
        metrics_text,
        config.data_dir.display()
    );
    tracing::info!(shards = config.shards, listen = %ports.join(","), "broker ready");

    // Wait for a signal, or for a shard to die on its own.
    loop {
        if let Some(signal) = wait_signal(&signals, Duration::from_millis(200)) {
            tracing::info!(signal, "stopping: flushing every partition");
            break;
        }
        if alive.load(Ordering::SeqCst) < config.shards {
            control.stop();
            stop_shards(&senders);
            bail!("a shard stopped unexpectedly; see the log above");
        }
    }
    // The control thread first: it finishes the change it is making (with
    // every shard still there to apply it), then shards stop.
    control.stop();
    stop_shards(&senders);
    for handle in handles {
        if let Err(error) = handle.join() {
            tracing::error!(%error, "shard ended with an error");
        }
    }
    tracing::info!("stopped cleanly");
    Ok(())
}

fn stop_shards(senders: &[flume::Sender<ShardMsg>]) {
    for sender in senders {
        let _ = sender.send(ShardMsg::Stop);
    }
}

struct ShardContext {
    id: u16,
    config: Config,
    addresses: Vec<SocketAddr>,
    peers: Vec<flume::Sender<ShardMsg>>,
    control: flume::Sender<ControlMsg>,
    brokers: Vec<BrokerRecord>,
    /// Partition directories the start-up sweep moved aside (shard 0
    /// counts them).
    orphaned_at_start: u64,
    /// This run's incarnation.
    incarnation: String,
    /// The data directory's id.
    data_dir_id: String,
    /// This broker's lease (clustered).
    lease: Option<Arc<coordinator::registry::LeaseClock>>,
    inbox: flume::Receiver<ShardMsg>,
    listener_fd: i32,
    /// Its Kafka listener's, if the broker speaks Kafka's protocol.
    kafka_listener_fd: Option<i32>,
    topics: Vec<TopicRecord>,
    ready: mpsc::Sender<Result<(), ShardStartError>>,
    published: Published,
}

/// Why a shard could not start serving.
#[derive(Debug, thiserror::Error)]
enum ShardStartError {
    /// Its disk driver (io_uring, the syncfs descriptor) did not start.
    #[error("starting shard {shard}'s disk driver: {source}")]
    Driver {
        /// The shard.
        shard: ShardId,
        /// What failed.
        source: std::io::Error,
    },
    /// One of its topics did not open.
    #[error("shard {shard}: {source}")]
    Topic {
        /// The shard.
        shard: ShardId,
        /// What failed.
        source: crate::topic_error::TopicError,
    },
}

#[expect(
    clippy::too_many_lines,
    reason = "a shard's start in order: storage, partitions, listener, timers and tasks; each step depends on the one before"
)]
async fn shard_main(context: ShardContext) {
    // Opened before the shard writes anything, so its syncfs sees every
    // write-back error of the shard's files (storage/driver.rs).
    let storage = match DiskStorage::new(&DriverSettings {
        syncfs_dir: Some(context.config.data_dir.clone()),
        syncfs_min_files: context.config.syncfs_min_files,
        write_slots: crate::storage::driver::WRITE_SLOTS,
        segment_files_max: context.config.segment_files_per_shard,
        name: format!("shard-{}", context.id),
    }) {
        Ok(storage) => storage,
        Err(error) => {
            let _ = context.ready.send(Err(ShardStartError::Driver {
                shard: context.id,
                source: error,
            }));
            return;
        }
    };
    let unwritten_share = context.config.unwritten_bytes_max / context.config.shards.max(1) as u64;
    let shard = Rc::new(Shard {
        id: context.id,
        config: Rc::new(context.config),
        addresses: context.addresses,
        peers: context.peers,
        topics: RefCell::new(BTreeMap::new()),
        metrics: Default::default(),
        stopping: Cell::new(false),
        responses_pending: Cell::new(0),
        responses_written: Notify::new(),
        control: context.control,
        brokers: RefCell::new(context.brokers),
        failed_silent_produces: crate::log_limit::LogLimit::new(Duration::from_secs(1)),
        connections: Cell::new(0),
        accept_problems: crate::log_limit::LogLimit::new(Duration::from_secs(1)),
        security: crate::auth::Cache::default(),
        sessions: Rc::default(),
        denials_log: crate::log_limit::LogLimit::new(Duration::from_secs(1)),
        login_failures_log: crate::log_limit::LogLimit::new(Duration::from_secs(1)),
        kafka_groups: crate::kafka::group::table::Groups::default(),
        metadata_version: Cell::new(0),
        metadata_all: RefCell::new(None),
        timer_work: RefCell::new(Vec::new()),
        storage,
        unwritten: Rc::new(crate::storage::budget::UnwrittenBudget::new(
            unwritten_share,
        )),
        fbb: RefCell::new(protocol::flatbuffers::FlatBufferBuilder::with_capacity(
            1024,
        )),
        incarnation: context.incarnation,
        data_dir_id: context.data_dir_id,
        starting: Cell::new(true),
        lease: context.lease,
        links: RefCell::new(std::collections::HashSet::new()),
        follows_changed: crate::notify::Notify::new(),
    });
    shard
        .storage
        .driver()
        .set_evictor(shard::evictor(Rc::downgrade(&shard)));
    crate::metrics::bump(
        &shard.metrics.counters.partitions_orphaned_total,
        context.orphaned_at_start,
    );
    // SAFETY: the descriptor came from a std listener whose ownership was
    // released with into_raw_fd; this is its only owner now.
    let listener = unsafe { glommio::net::TcpListener::from_raw_fd(context.listener_fd) };
    for topic in &context.topics {
        if let Err(source) = shard.open_topic(topic).await {
            let _ = context.ready.send(Err(ShardStartError::Topic {
                shard: shard.id,
                source,
            }));
            return;
        }
    }
    shard.starting.set(false);
    let stop = Notify::new();
    glommio::spawn_local(shard::run_flusher(shard.clone())).detach();
    glommio::spawn_local(shard::run_file_closer(shard.clone())).detach();
    glommio::spawn_local(shard::run_retention(shard.clone())).detach();
    glommio::spawn_local(crate::replica::tasks::run_leaders(shard.clone())).detach();
    glommio::spawn_local(publish_metrics(shard.clone(), context.published.clone())).detach();
    glommio::spawn_local(inbox_loop(shard.clone(), context.inbox, stop.clone())).detach();
    if let Some(fd) = context.kafka_listener_fd {
        // SAFETY: as the listener's above: released with into_raw_fd, owned
        // here alone.
        let kafka = unsafe { glommio::net::TcpListener::from_raw_fd(fd) };
        glommio::spawn_local(crate::net::listener::accept_loop::<
            crate::kafka::front::Kafka,
        >(shard.clone(), kafka, stop.clone()))
        .detach();
    }
    let _ = context.ready.send(Ok(()));
    crate::net::listener::accept_loop::<crate::handler::native::Native>(
        shard.clone(),
        listener,
        stop,
    )
    .await;
    shard::flush_all(&shard).await;
    shard::drain_responses(&shard, Duration::from_secs(2)).await;
    publish_once(&shard, &context.published);
}

async fn inbox_loop(shard: Rc<Shard>, inbox: flume::Receiver<ShardMsg>, stop: Notify) {
    while let Ok(msg) = inbox.recv_async().await {
        match msg {
            ShardMsg::Request { api, .. } => {
                // A disk that is behind stops the inbox until it catches up:
                // forwarded producers are pushed back too.
                if api == protocol::frame::Api::Produce as u16 {
                    shard.unwritten.wait_for_room().await;
                }
                if let Some(until) = handler::forward::serve_forwarded(&shard, msg) {
                    until.await;
                }
            }
            ShardMsg::TopicCreated {
                topic,
                states,
                done,
            } => {
                let result = shard.open_topic(&topic).await;
                // No await in between: a request never finds the topic's
                // copies without their roles.
                if result.is_ok() && !states.is_empty() {
                    crate::replica::tasks::learn(&shard, &topic.id, &states);
                }
                let _ = done.send_async(result).await;
            }
            ShardMsg::TopicDeleted { name, id, done } => {
                let result = shard.drop_topic(&name, &id);
                let _ = done.send_async(result).await;
            }
            ShardMsg::TopicChanged { topic, done } => {
                let result = shard.change_topic(&topic).await;
                let _ = done.send_async(result).await;
            }
            ShardMsg::ReplicaPositions {
                topic_id,
                partitions,
                reply,
            } => {
                let _ = reply
                    .send_async(shard.replica_positions(&topic_id, &partitions))
                    .await;
            }
            ShardMsg::TopicOrphaned { name, done } => {
                let moved = shard.orphan_topic(&name);
                let _ = done.send_async(moved).await;
            }
            ShardMsg::Brokers(brokers) => {
                *shard.brokers.borrow_mut() = brokers;
                shard.metadata_changed();
                crate::replica::follower::reconcile(&shard);
            }
            ShardMsg::SecurityChanged => {
                let ended = shard.security.with(|s| shard.sessions.review(s));
                metrics::bump(&shard.metrics.counters.sessions_ended_total, ended);
            }
            ShardMsg::PartitionStates { topic_id, states } => {
                crate::replica::tasks::learn(&shard, &topic_id, &states);
            }
            ShardMsg::Stop => {
                shard.stopping.set(true);
                stop.notify_all();
                return;
            }
        }
    }
}

/// The shard's replicated partitions, counted for the metrics.
fn replication_of(shard: &Shard) -> metrics::Replication {
    let mut counts = metrics::Replication::default();
    let live = |broker: protocol::types::BrokerId| {
        broker == shard.config.broker_id
            || shard.brokers.borrow().iter().any(|b| b.broker_id == broker)
    };
    for replica in shard.all_replicas() {
        let r = replica.borrow();
        if r.leads() {
            counts.leaders += 1;
            if r.state.state.isr.len() < r.replicas.len() {
                counts.under_replicated += 1;
            }
            let end = r.log.borrow().end_offset();
            counts.follower_lag_bytes += r
                .replicas
                .iter()
                .filter(|b| **b != r.me)
                .map(|b| {
                    r.followers
                        .get(b)
                        .map_or(end, |p| end.saturating_sub(p.end))
                })
                .sum::<u64>();
        } else if !live(r.leader()) {
            counts.offline += 1;
        }
    }
    counts
}

fn publish_once(shard: &Shard, published: &Published) {
    let driver = shard.storage.driver();
    shard.metrics.absorb_driver(driver.stats());
    shard
        .metrics
        .absorb_files(driver.files_open(), driver.files_max());
    shard.metrics.absorb_replication(replication_of(shard));
    shard.metrics.data_lost.set(shard.lost_partitions());
    shard.metrics.sessions_open.set(shard.sessions.len() as u64);
    let snapshot = shard.metrics.snapshot();
    let mut slots = match published.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    if let Some(slot) = slots.get_mut(shard.id as usize) {
        *slot = snapshot;
    }
}

async fn publish_metrics(shard: Rc<Shard>, published: Published) {
    while !shard.stopping.get() {
        publish_once(&shard, &published);
        glommio::timer::sleep(Duration::from_secs(1)).await;
    }
}

fn bind_listeners(
    config: &Config,
    base: SocketAddr,
    flag: &str,
) -> anyhow::Result<Vec<TcpListener>> {
    (0..config.shards)
        .map(|i| {
            let mut addr = base;
            if base.port() != 0 {
                let port = u32::from(base.port()) + i as u32;
                if port > u32::from(u16::MAX) {
                    bail!("shard {i} would listen on port {port}, above 65535");
                }
                addr.set_port(port as u16);
            }
            bind_retrying(addr).with_context(|| {
                format!("binding shard {i} to {addr} (shard i listens on {flag} port + i)")
            })
        })
        .collect()
}

/// Binds, riding out a crashed predecessor: a process's io_uring is torn
/// down asynchronously after it dies and can hold its listening sockets for
/// a moment (DESIGN.md), so an immediate restart after kill -9 would fail
/// with EADDRINUSE although nothing listens any more. Retries that error for
/// up to `BIND_RETRY_MS`, saying so once; any other error fails at once.
fn bind_retrying(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let deadline = std::time::Instant::now() + Duration::from_millis(crate::limits::BIND_RETRY_MS);
    let mut said = false;
    loop {
        match TcpListener::bind(addr) {
            Err(error)
                if error.kind() == std::io::ErrorKind::AddrInUse
                    && std::time::Instant::now() < deadline =>
            {
                if !said {
                    tracing::warn!(
                        %addr,
                        "address in use (a broker killed a moment ago may still hold it); retrying for up to {} ms",
                        crate::limits::BIND_RETRY_MS
                    );
                    said = true;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

/// A random id of the data directory, made once and kept in
/// `<data-dir>/data-dir-id`: the etcd registration carries it, so a broker
/// restarted after a crash recognises the registration it left behind.
fn data_dir_id(config: &Config) -> anyhow::Result<String> {
    let path = config.data_dir.join("data-dir-id");
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let seed = format!(
        "{:?}-{}-{}",
        now,
        std::process::id(),
        config.data_dir.display()
    );
    let id = format!("{:016x}", protocol::types::fnv1a(seed.as_bytes()));
    crate::durable_file::replace(&path, id.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(id)
}

/// Holds an exclusive `flock` on the data directory itself, so two brokers
/// never share one. The lock is on the directory's own descriptor, not on a
/// file inside it: a lock file can be deleted under a running broker, and a
/// second broker would then lock a new file and write beside the first
/// (issue 8, item 10). A directory cannot be unlinked while it holds data.
fn lock_data_dir(config: &Config) -> anyhow::Result<std::fs::File> {
    let dir = std::fs::File::open(&config.data_dir)
        .with_context(|| format!("opening data dir {}", config.data_dir.display()))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        bail!(
            "data dir {} is in use by another broker (it holds the directory's lock)",
            config.data_dir.display()
        );
    }
    Ok(dir)
}

/// glommio panics deep inside an executor when io_uring is missing; probe
/// it first so the operator gets the likely cause in one line.
fn check_io_uring() -> anyhow::Result<()> {
    // io_uring_params is 120 bytes; all zero asks for defaults.
    let mut params = [0u8; 120];
    // SAFETY: io_uring_setup reads and writes `params`, which is large enough.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 4u32, params.as_mut_ptr()) };
    if fd < 0 {
        let error = std::io::Error::last_os_error();
        bail!(
            "io_uring unavailable ({error}): likely seccomp (a container's default profile) or the sysctl kernel.io_uring_disabled; ringlog needs io_uring (Linux 5.8 or later)"
        );
    }
    // SAFETY: closing the ring we just created.
    unsafe { libc::close(fd as i32) };
    Ok(())
}

/// Raises the open-files soft limit to the hard one, then lowers
/// `max_connections` until connections cannot take the descriptors that
/// segment files and the control plane need (`fd_reserve`): a flood of idle
/// clients is refused politely instead of making segment opens fail (issue
/// 8, item 3). Segment files are opened on demand and closed when idle, so
/// the data dir's size does not enter into it.
fn fit_connections_to_nofile(config: &mut Config) -> anyhow::Result<()> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Ok(());
    }
    if limit.rlim_cur != libc::RLIM_INFINITY && limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads the struct we pass; raising the soft
        // limit up to the hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            tracing::info!(
                from = limit.rlim_cur,
                to = limit.rlim_max,
                "raised the open-files limit to its hard limit"
            );
            limit.rlim_cur = limit.rlim_max;
        }
    }
    if limit.rlim_cur == libc::RLIM_INFINITY {
        return Ok(());
    }
    let in_use = std::fs::read_dir("/proc/self/fd").map_or(64, |d| d.count() as u64);
    // Each shard's io_uring rings, eventfds, listener and timers.
    let shards = 64 * config.shards as u64;
    let spare = in_use + shards + config.fd_reserve;
    let budget = limit.rlim_cur.saturating_sub(spare);
    if budget < config.shards as u64 {
        bail!(
            "RLIMIT_NOFILE is {} (hard {}): after {in_use} descriptors in use, {shards} for the shards and fd_reserve {} for segment files and the control plane, none are left for connections; raise it (ulimit -n, or LimitNOFILE= in systemd) or lower fd_reserve",
            limit.rlim_cur,
            limit.rlim_max,
            config.fd_reserve
        );
    }
    if config.max_connections as u64 > budget {
        tracing::warn!(
            max_connections = config.max_connections,
            lowered_to = budget,
            rlimit_nofile = limit.rlim_cur,
            fd_reserve = config.fd_reserve,
            "max_connections lowered to fit the open-files limit"
        );
        config.max_connections = budget as usize;
    }
    // Segment files get what connections cannot take, less the control
    // plane's share (the registry, etcd, recovery-point writes, metrics): so
    // a client writing to more partitions than that makes the shards close
    // idle files, never run out of descriptors.
    let files = limit
        .rlim_cur
        .saturating_sub(in_use + shards + config.max_connections as u64 + CONTROL_FDS);
    config.segment_files_per_shard = (files / config.shards as u64).max(1) as usize;
    tracing::info!(
        per_shard = config.segment_files_per_shard,
        rlimit_nofile = limit.rlim_cur,
        "segment files kept open, at most"
    );
    Ok(())
}

/// Descriptors of `fd_reserve` that segment files leave to the control plane.
const CONTROL_FDS: u64 = 64;

/// glommio registers `io_memory` of locked memory per shard; fail early with
/// the numbers instead of an obscure error from inside an executor.
fn check_memlock(config: &Config) -> anyhow::Result<()> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) } != 0 {
        return Ok(());
    }
    let needed = (config.io_memory_bytes as u64 + 256 * 1024) * config.shards as u64;
    if limit.rlim_cur != libc::RLIM_INFINITY && limit.rlim_cur < needed {
        bail!(
            "RLIMIT_MEMLOCK is {} KiB, but {} shards with io_memory_bytes {} need about {} KiB of locked memory: raise it (ulimit -l, or LimitMEMLOCK= in systemd) or lower --shards / --io-memory",
            limit.rlim_cur / 1024,
            config.shards,
            config.io_memory_bytes,
            needed / 1024
        );
    }
    Ok(())
}

fn blocked_signals() -> anyhow::Result<libc::sigset_t> {
    // SAFETY: sigset manipulation on a zeroed, owned set; pthread_sigmask
    // affects only this thread, and threads started later inherit it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            bail!("blocking SIGTERM/SIGINT failed");
        }
        Ok(set)
    }
}

fn wait_signal(set: &libc::sigset_t, timeout: Duration) -> Option<i32> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `set` and `ts` are valid for the call; no siginfo is requested.
    let signal = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
    (signal > 0).then_some(signal)
}
