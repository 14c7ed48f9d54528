//! `loadgen paper`: the 2011 paper's producer and consumer experiments, run
//! on this machine against ringlog and the paper's competitors, printed
//! beside the paper's published figures.
//!
//! For each system: (a) one producer sending N messages of 200 bytes one at
//! a time, (b) the same in batches of 50, (c) one consumer reading all N.
//! RabbitMQ and ActiveMQ have no batch API like the paper's; for (b) they
//! run their faster publishing mode instead, labelled as such (publisher
//! confirms in windows of 50; transactions of 50). Today's peers, NATS
//! JetStream and Redis Streams, run in the modes their drivers describe
//! (`peers/nats.rs`, `peers/redis_streams.rs`), labelled too, and so does
//! today's Apache Kafka (`peers/kafka.rs`, through Kafka's own client).

use crate::broker_process::LocalBroker;
use crate::chart::{self, Series};
use crate::peers::kafka::Batching;
use crate::peers::{self, activemq, kafka, nats, rabbitmq, redis_streams};
use crate::report::{write_json, Environment};
use crate::stats::{measure, Stats, Summary};
use crate::workload::{self, ConsumeSpec, Length, ProduceSpec};
use anyhow::Context;
use protocol::client::AckMode;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The paper's Kafka figures (msg/s): producer at batch 1 and 50, consumer.
pub const PAPER_KAFKA: [(Experiment, f64); 3] = [
    (Experiment::ProduceBatch1, 50_000.0),
    (Experiment::ProduceBatch50, 400_000.0),
    (Experiment::Consume, 22_000.0),
];

/// A Kafka client loadgen drives Kafka with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KafkaClient {
    /// Kafka's own Java client (loadgen's driver).
    Java,
    /// librdkafka (only in a loadgen built with the `librdkafka` feature).
    Librdkafka,
}

impl KafkaClient {
    /// Parses `java` or `librdkafka`.
    pub fn parse(name: &str) -> anyhow::Result<KafkaClient> {
        match name {
            "java" => Ok(KafkaClient::Java),
            "librdkafka" if cfg!(feature = "librdkafka") => Ok(KafkaClient::Librdkafka),
            "librdkafka" => anyhow::bail!(
                "this loadgen was built without librdkafka: cargo build --release -p ringlog-loadgen --features librdkafka"
            ),
            other => anyhow::bail!("unknown Kafka client {other:?}: java or librdkafka"),
        }
    }
}

/// The paper's per-message storage overhead in bytes: Kafka, ActiveMQ.
pub const PAPER_OVERHEAD_BYTES: [(&str, f64); 2] = [("Kafka", 9.0), ("ActiveMQ", 144.0)];

/// A system under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum System {
    /// This project.
    Ringlog,
    /// RabbitMQ over AMQP 0-9-1.
    Rabbitmq,
    /// ActiveMQ over STOMP.
    Activemq,
    /// NATS JetStream (today's peer).
    Nats,
    /// Redis Streams (today's peer).
    Redis,
    /// Apache Kafka 4.4 (today's Kafka).
    Kafka,
}

impl System {
    /// Parses `ringlog`, `rabbitmq`, `activemq`, `nats`, `redis` or `kafka`.
    pub fn parse(name: &str) -> anyhow::Result<System> {
        match name.trim().to_ascii_lowercase().as_str() {
            "ringlog" => Ok(System::Ringlog),
            "rabbitmq" => Ok(System::Rabbitmq),
            "activemq" => Ok(System::Activemq),
            "nats" => Ok(System::Nats),
            "redis" => Ok(System::Redis),
            "kafka" => Ok(System::Kafka),
            other => anyhow::bail!(
                "unknown system {other:?}: expected ringlog, rabbitmq, activemq, nats, redis or kafka"
            ),
        }
    }

    /// The name as its project spells it.
    pub fn title(self) -> &'static str {
        match self {
            System::Ringlog => "ringlog",
            System::Rabbitmq => "RabbitMQ",
            System::Activemq => "ActiveMQ",
            System::Nats => "NATS JetStream",
            System::Redis => "Redis Streams",
            System::Kafka => "Apache Kafka",
        }
    }

    /// The lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            System::Ringlog => "ringlog",
            System::Rabbitmq => "rabbitmq",
            System::Activemq => "activemq",
            System::Nats => "nats",
            System::Redis => "redis",
            System::Kafka => "kafka",
        }
    }
}

/// One of the paper's experiments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Experiment {
    /// One producer, one message per send.
    ProduceBatch1,
    /// One producer, 50 messages per send (or the peer's faster mode).
    ProduceBatch50,
    /// One consumer reading everything.
    Consume,
    /// One producer with the system's own default settings (Kafka only:
    /// "Kafka's best mode", as a user who changes nothing runs it).
    ProduceDefaults,
}

impl Experiment {
    /// Display name.
    pub fn title(self) -> &'static str {
        match self {
            Experiment::ProduceBatch1 => "produce, batch 1",
            Experiment::ProduceBatch50 => "produce, batch 50",
            Experiment::Consume => "consume",
            Experiment::ProduceDefaults => "produce, defaults",
        }
    }
}

/// What `loadgen paper` runs.
#[derive(Debug, Clone)]
pub struct PaperSpec {
    /// Messages per experiment.
    pub messages: u64,
    /// Payload bytes.
    pub size: usize,
    /// Systems, in order.
    pub systems: Vec<System>,
    /// A running ringlog broker; `None` starts a standalone one.
    pub brokers: Option<String>,
    /// Shards of a broker loadgen starts.
    pub shards: usize,
    /// Where the table, JSON and charts go.
    pub out: PathBuf,
    /// Write the JSON here instead of `out/paper.json`.
    pub json: Option<PathBuf>,
    /// Write the charts here instead of `out`.
    pub plot: Option<PathBuf>,
    /// RabbitMQ's AMQP URL.
    pub rabbitmq_url: String,
    /// ActiveMQ's STOMP address.
    pub activemq_address: String,
    /// NATS's address.
    pub nats_address: String,
    /// Redis's URL.
    pub redis_url: String,
    /// Kafka's bootstrap address.
    pub kafka_address: String,
    /// The client the paper's experiments drive Kafka with.
    pub kafka_client: KafkaClient,
    /// `deploy/peers.sh`'s data directory (for on-disk bytes).
    pub peers_dir: PathBuf,
    /// Consumer fetch size for ringlog (the paper: ~200 KB).
    pub fetch_bytes: u32,
}

/// One row of the table.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    /// The system.
    pub system: System,
    /// The experiment.
    pub experiment: Experiment,
    /// How it was run (publishing mode, ack mode, fetch size).
    pub mode: String,
    /// "ok" or "not run".
    pub status: String,
    /// Why it did not run, or a remark.
    pub note: String,
    /// The measurement, when it ran.
    pub result: Option<Summary>,
    /// The paper's Kafka figure for this experiment (msg/s).
    pub paper_kafka_msgs_per_sec: f64,
}

/// On-disk cost per message.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DiskRow {
    /// The system.
    pub system: System,
    /// Bytes on disk per message (payload included), after the batch-1 run.
    pub bytes_per_message: Option<f64>,
    /// Bytes beyond the payload.
    pub overhead_bytes: Option<f64>,
    /// How it was measured.
    pub method: String,
}

/// A ratio between ringlog and a peer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ratio {
    /// What is compared.
    pub comparison: String,
    /// ringlog msg/s divided by the peer's.
    pub ratio: Option<f64>,
    /// The paper's claim for this comparison.
    pub paper_claim: String,
    /// Whether this run meets the claim (None when not run).
    pub holds: Option<bool>,
}

/// Everything `loadgen paper` measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PaperReport {
    /// Machine and build.
    pub environment: Environment,
    /// Messages per experiment.
    pub messages: u64,
    /// Payload bytes.
    pub size: usize,
    /// The ringlog broker measured ("started by loadgen: N shards" or an address).
    pub ringlog_broker: String,
    /// The ringlog broker's shards and the paper topics' effective settings.
    pub ringlog_config: Option<serde_json::Value>,
    /// The rows.
    pub rows: Vec<Row>,
    /// On-disk bytes per message.
    pub disk: Vec<DiskRow>,
    /// Ratios against the paper's claims.
    pub ratios: Vec<Ratio>,
}

fn paper_figure(experiment: Experiment) -> f64 {
    PAPER_KAFKA
        .iter()
        .find(|(e, _)| *e == experiment)
        .map_or(0.0, |(_, v)| *v)
}

fn run_one(
    label: &str,
    expected: u64,
    f: impl FnOnce(&Arc<Stats>) -> anyhow::Result<()>,
) -> anyhow::Result<Summary> {
    measure(label, "processed", Some(expected), 0.0, f).map(|((), summary)| summary)
}

fn row(
    system: System,
    experiment: Experiment,
    mode: &str,
    outcome: anyhow::Result<Summary>,
) -> Row {
    let (status, note, result) = match outcome {
        Ok(summary) => ("ok".to_string(), String::new(), Some(summary)),
        Err(error) => ("not run".to_string(), format!("{error:#}"), None),
    };
    Row {
        system,
        experiment,
        mode: mode.to_string(),
        status,
        note,
        result,
        paper_kafka_msgs_per_sec: paper_figure(experiment),
    }
}

/// The rows and disk row of a system that could not be reached.
fn not_run(system: System, reason: &str) -> (Vec<Row>, DiskRow) {
    let rows = [
        Experiment::ProduceBatch1,
        Experiment::ProduceBatch50,
        Experiment::Consume,
    ]
    .into_iter()
    .map(|e| Row {
        system,
        experiment: e,
        mode: String::new(),
        status: "not run".into(),
        note: reason.to_string(),
        result: None,
        paper_kafka_msgs_per_sec: paper_figure(e),
    })
    .collect();
    let disk = DiskRow {
        system,
        bytes_per_message: None,
        overhead_bytes: None,
        method: "not run".into(),
    };
    (rows, disk)
}

fn json_path(spec: &PaperSpec) -> PathBuf {
    spec.json
        .clone()
        .unwrap_or_else(|| spec.out.join("paper.json"))
}

fn plot_dir(spec: &PaperSpec) -> PathBuf {
    spec.plot.clone().unwrap_or_else(|| spec.out.clone())
}

fn build_report(
    spec: &PaperSpec,
    rows: Vec<Row>,
    disk: Vec<DiskRow>,
    ringlog_broker: String,
    ringlog_config: Option<serde_json::Value>,
) -> PaperReport {
    PaperReport {
        environment: Environment::detect(),
        messages: spec.messages,
        size: spec.size,
        ringlog_broker,
        ringlog_config,
        ratios: ratios(&rows),
        rows,
        disk,
    }
}

fn write_outputs(spec: &PaperSpec, report: &PaperReport, table: &str) -> anyhow::Result<()> {
    std::fs::write(spec.out.join("paper.txt"), table)?;
    write_json(&json_path(spec), report)?;
    let plot = plot_dir(spec);
    std::fs::create_dir_all(&plot).with_context(|| format!("creating {}", plot.display()))?;
    write_charts(report, &plot)
}

/// Why a peer cannot be measured, with the command that starts it; `None`
/// when it answers.
fn unreachable_peer(spec: &PaperSpec, system: System) -> Option<String> {
    let (up, at) = match system {
        System::Ringlog => return None,
        System::Rabbitmq => (
            rabbitmq::reachable(&spec.rabbitmq_url),
            spec.rabbitmq_url.clone(),
        ),
        System::Activemq => (
            activemq::reachable(&spec.activemq_address),
            format!("{} (STOMP)", spec.activemq_address),
        ),
        System::Nats => (
            nats::reachable(&spec.nats_address),
            spec.nats_address.clone(),
        ),
        System::Redis => (
            redis_streams::reachable(&spec.redis_url),
            spec.redis_url.clone(),
        ),
        System::Kafka => {
            if let Some(missing) = kafka::missing_driver(&kafka::home(&spec.peers_dir)) {
                return Some(missing);
            }
            (
                kafka::reachable(&spec.kafka_address),
                spec.kafka_address.clone(),
            )
        }
    };
    let install = match system {
        System::Kafka => "deploy/peers.sh install kafka",
        _ => "deploy/peers.sh install",
    };
    (!up).then(|| {
        format!(
            "{} is not reachable at {at}; start it with `deploy/peers.sh start {}` (install with `{install}`)",
            system.title(),
            system.name()
        )
    })
}

/// Runs the experiments, prints the table and writes `paper.json`,
/// `paper.txt` and the charts into `spec.out`.
pub fn run(spec: &PaperSpec) -> anyhow::Result<PaperReport> {
    std::fs::create_dir_all(&spec.out)
        .with_context(|| format!("creating {}", spec.out.display()))?;
    let mut rows = Vec::new();
    let mut disk = Vec::new();
    let mut ringlog_broker = String::new();
    let mut ringlog_config = None;
    let suffix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for &system in &spec.systems {
        eprintln!("== {} ==", system.name());
        match system {
            System::Ringlog => {
                let local;
                let brokers = match &spec.brokers {
                    Some(b) => {
                        // Say whether it is one broker or a cluster.
                        let live = crate::connect(b)
                            .and_then(|c| c.metadata(&[]))
                            .map(|m| m.brokers.len());
                        ringlog_broker = match live {
                            Ok(n) if n > 1 => format!("{b} (a cluster of {n} live brokers)"),
                            _ => b.clone(),
                        };
                        b.clone()
                    }
                    None => {
                        local = LocalBroker::start(spec.shards)?;
                        ringlog_broker =
                            format!("standalone, started by loadgen: {} shards", spec.shards);
                        local.brokers.clone()
                    }
                };
                let (r, d) = run_ringlog(spec, &brokers, suffix);
                ringlog_config =
                    workload::broker_config(&brokers, &format!("paper-b1-{suffix}")).ok();
                rows.extend(r);
                disk.push(d);
            }
            peer => {
                let (r, d) = match unreachable_peer(spec, peer) {
                    Some(reason) => {
                        eprintln!("{reason}");
                        not_run(peer, &reason)
                    }
                    None => match peer {
                        System::Rabbitmq => run_rabbitmq(spec, suffix),
                        System::Activemq => run_activemq(spec, suffix),
                        System::Nats => run_nats(spec, suffix),
                        System::Kafka => run_kafka(spec, suffix),
                        _ => run_redis(spec, suffix),
                    },
                };
                rows.extend(r);
                disk.push(d);
            }
        }
        // Keep what is measured so far: a long run cut short still leaves
        // its finished systems on disk.
        let partial = build_report(
            spec,
            rows.clone(),
            disk.clone(),
            ringlog_broker.clone(),
            ringlog_config.clone(),
        );
        write_outputs(spec, &partial, &table(&partial))?;
    }
    let report = build_report(spec, rows, disk, ringlog_broker, ringlog_config);
    let table = table(&report);
    print!("{table}");
    write_outputs(spec, &report, &table)?;
    eprintln!(
        "wrote {}, {} and charts paper.svg, throughput-*.svg in {}",
        spec.out.join("paper.txt").display(),
        json_path(spec).display(),
        plot_dir(spec).display()
    );
    Ok(report)
}

fn run_ringlog(spec: &PaperSpec, brokers: &str, suffix: u64) -> (Vec<Row>, DiskRow) {
    let mut rows = Vec::new();
    let mut disk = DiskRow {
        system: System::Ringlog,
        bytes_per_message: None,
        overhead_bytes: None,
        method: "segment bytes appended (offsets are byte positions) / messages".into(),
    };
    let topic = |batch: usize| format!("paper-b{batch}-{suffix}");
    for (experiment, batch) in [
        (Experiment::ProduceBatch1, 1usize),
        (Experiment::ProduceBatch50, 50),
    ] {
        let produce = ProduceSpec::new(
            brokers,
            &topic(batch),
            Length::Messages(spec.messages),
            spec.size,
            batch,
            AckMode::None,
        );
        let mut stored = None;
        let outcome = run_one(
            &format!("ringlog {}", experiment.title()),
            spec.messages,
            |stats| {
                let outcome = workload::produce(&produce, stats)?;
                stored = Some(outcome.stored_bytes);
                Ok(())
            },
        );
        if experiment == Experiment::ProduceBatch1 {
            if let Some(bytes) = stored {
                let per = bytes as f64 / spec.messages.max(1) as f64;
                disk.bytes_per_message = Some(per);
                disk.overhead_bytes = Some(per - spec.size as f64);
            }
        }
        let mode = format!("acks none, {batch} per request, pipelined");
        rows.push(row(System::Ringlog, experiment, &mode, outcome));
    }
    let consume = ConsumeSpec {
        brokers: brokers.to_string(),
        topic: topic(50),
        length: Length::Messages(spec.messages),
        fetch_bytes: spec.fetch_bytes,
        consumers: 1,
        // The paper's consumer: one fetch at a time.
        prefetch: 0,
    };
    let outcome = run_one("ringlog consume", spec.messages, |stats| {
        workload::consume(&consume, stats)
    });
    let mode = format!("{} KiB fetches, CRC checked", spec.fetch_bytes / 1024);
    rows.push(row(System::Ringlog, Experiment::Consume, &mode, outcome));
    (rows, disk)
}

/// Waits for a peer's asynchronous flush, then reads its data directory size.
fn settled_bytes(dir: &std::path::Path) -> u64 {
    let mut last = peers::allocated_bytes(dir);
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(500));
        let now = peers::allocated_bytes(dir);
        if now == last {
            return now;
        }
        last = now;
    }
    last
}

fn peer_disk(
    system: System,
    dir: &std::path::Path,
    before: u64,
    after: u64,
    messages: u64,
    size: usize,
) -> DiskRow {
    let exists = dir.exists();
    let per = (exists && after > before).then(|| (after - before) as f64 / messages.max(1) as f64);
    DiskRow {
        system,
        bytes_per_message: per,
        overhead_bytes: per.map(|p| p - size as f64),
        method: if exists {
            format!(
                "growth of {} (allocated blocks) over the batch-1 run / messages",
                dir.display()
            )
        } else {
            format!("{} not found (started elsewhere?)", dir.display())
        },
    }
}

/// Deletes a peer's queues after its experiments.
type Cleanup<'a> = Box<dyn Fn(&[&str]) + 'a>;

/// One experiment against a peer's queue, counting into the stats.
type QueueRun<'a> = Box<dyn Fn(&str, &Stats) -> anyhow::Result<()> + 'a>;

/// A peer as `loadgen paper` drives it: where its data lives, how each
/// experiment is run (given a queue name), and how each is labelled.
struct PeerRun<'a> {
    system: System,
    data_dir: PathBuf,
    produce_paper: QueueRun<'a>,
    produce_fast: QueueRun<'a>,
    consume: QueueRun<'a>,
    cleanup: Cleanup<'a>,
    modes: [&'static str; 3],
}

/// Batch 1 into one queue (its disk growth is the bytes per message), the
/// consumer drains it, then the faster mode fills another queue; finally
/// the peer's queues are deleted where its protocol allows.
fn run_peer(spec: &PaperSpec, suffix: u64, peer: PeerRun<'_>) -> (Vec<Row>, DiskRow) {
    let name = peer.system.name();
    let queue1 = format!("paper-b1-{suffix}");
    let queue50 = format!("paper-b50-{suffix}");
    let before = settled_bytes(&peer.data_dir);
    let outcome = run_one(
        &format!("{name} produce, batch 1"),
        spec.messages,
        |stats| (peer.produce_paper)(&queue1, stats),
    );
    let after = settled_bytes(&peer.data_dir);
    let disk = peer_disk(
        peer.system,
        &peer.data_dir,
        before,
        after,
        spec.messages,
        spec.size,
    );
    let produce_row = row(
        peer.system,
        Experiment::ProduceBatch1,
        peer.modes[0],
        outcome,
    );
    // The consumer drains what batch 1 stored before the next producer
    // runs, so no peer carries two full backlogs at once.
    let outcome = run_one(&format!("{name} consume"), spec.messages, |stats| {
        (peer.consume)(&queue1, stats)
    });
    let consume_row = row(peer.system, Experiment::Consume, peer.modes[2], outcome);
    let outcome = run_one(
        &format!("{name} produce, batch 50"),
        spec.messages,
        |stats| (peer.produce_fast)(&queue50, stats),
    );
    let fast_row = row(
        peer.system,
        Experiment::ProduceBatch50,
        peer.modes[1],
        outcome,
    );
    (peer.cleanup)(&[&queue1, &queue50]);
    (vec![produce_row, fast_row, consume_row], disk)
}

fn run_rabbitmq(spec: &PaperSpec, suffix: u64) -> (Vec<Row>, DiskRow) {
    let url = spec.rabbitmq_url.as_str();
    let (n, size) = (spec.messages, spec.size);
    let peer = PeerRun {
        system: System::Rabbitmq,
        data_dir: spec.peers_dir.join("rabbitmq").join("mnesia"),
        produce_paper: Box::new(move |q, stats| {
            rabbitmq::produce(url, q, n, size, rabbitmq::Publish::Async, stats)
        }),
        produce_fast: Box::new(move |q, stats| {
            rabbitmq::produce(url, q, n, size, rabbitmq::Publish::Confirms(50), stats)
        }),
        consume: Box::new(move |q, stats| rabbitmq::consume(url, q, n, stats)),
        cleanup: Box::new(move |queues| rabbitmq::delete_queues(url, queues)),
        modes: [
            "async publish, persistent, durable queue (the paper's mode)",
            "publisher confirms, window of 50 (no batch API)",
            "auto-ack consumer",
        ],
    };
    run_peer(spec, suffix, peer)
}

fn run_activemq(spec: &PaperSpec, suffix: u64) -> (Vec<Row>, DiskRow) {
    let address = spec.activemq_address.as_str();
    let (n, size) = (spec.messages, spec.size);
    let peer = PeerRun {
        system: System::Activemq,
        data_dir: spec.peers_dir.join("activemq").join("data").join("kahadb"),
        produce_paper: Box::new(move |q, stats| {
            activemq::produce(address, q, n, size, activemq::Publish::Async, stats)
        }),
        produce_fast: Box::new(move |q, stats| {
            activemq::produce(
                address,
                q,
                n,
                size,
                activemq::Publish::Transacted(50),
                stats,
            )
        }),
        consume: Box::new(move |q, stats| activemq::consume(address, q, n, stats)),
        // STOMP cannot delete a queue; deploy/peers.sh stop removes the data.
        cleanup: Box::new(|_| {}),
        modes: [
            "async send, persistent, async journal (the paper's mode)",
            "transactions of 50 sends (no batch API)",
            "auto-ack subscriber, prefetch 1000",
        ],
    };
    run_peer(spec, suffix, peer)
}

fn run_nats(spec: &PaperSpec, suffix: u64) -> (Vec<Row>, DiskRow) {
    let address = spec.nats_address.as_str();
    let (n, size) = (spec.messages, spec.size);
    let peer = PeerRun {
        system: System::Nats,
        data_dir: spec.peers_dir.join("nats").join("jetstream"),
        produce_paper: Box::new(move |q, stats| nats::produce(address, q, n, size, 1000, stats)),
        produce_fast: Box::new(move |q, stats| nats::produce(address, q, n, size, 50, stats)),
        consume: Box::new(move |q, stats| nats::consume(address, q, n, stats)),
        cleanup: Box::new(move |queues| nats::delete_queues(address, queues)),
        modes: [
            "async publish, file storage, at most 1,000 unacknowledged",
            "at most 50 unacknowledged (no batch API)",
            "pull consumer, batches of 1,000, no acks",
        ],
    };
    run_peer(spec, suffix, peer)
}

fn run_redis(spec: &PaperSpec, suffix: u64) -> (Vec<Row>, DiskRow) {
    let url = spec.redis_url.as_str();
    let (n, size) = (spec.messages, spec.size);
    let peer = PeerRun {
        system: System::Redis,
        data_dir: spec.peers_dir.join("redis"),
        produce_paper: Box::new(move |q, stats| {
            redis_streams::produce(url, q, n, size, 1000, stats)
        }),
        produce_fast: Box::new(move |q, stats| redis_streams::produce(url, q, n, size, 50, stats)),
        consume: Box::new(move |q, stats| redis_streams::consume(url, q, n, stats)),
        cleanup: Box::new(move |queues| redis_streams::delete_queues(url, queues)),
        modes: [
            "XADD pipelined, 1,000 replies outstanding, AOF everysec",
            "XADD pipelines of 50 (no multi-entry XADD)",
            "XREAD COUNT 1000",
        ],
    };
    run_peer(spec, suffix, peer)
}

fn run_kafka(spec: &PaperSpec, suffix: u64) -> (Vec<Row>, DiskRow) {
    let address = spec.kafka_address.as_str();
    let home = kafka::home(&spec.peers_dir);
    let (n, size) = (spec.messages, spec.size);
    let (h1, h2, h3, h4) = (home.clone(), home.clone(), home.clone(), home);
    let peer = match spec.kafka_client {
        KafkaClient::Java => PeerRun {
            system: System::Kafka,
            data_dir: spec.peers_dir.join("kafka").join("node-1").join("data"),
            produce_paper: Box::new(move |q, stats| {
                kafka::produce(&h1, address, q, n, size, Batching::Records(1), "0", stats).map(drop)
            }),
            produce_fast: Box::new(move |q, stats| {
                kafka::produce(&h2, address, q, n, size, Batching::Records(50), "0", stats)
                    .map(drop)
            }),
            consume: Box::new(move |q, stats| {
                kafka::consume(&h3, address, q, n, size, stats).map(drop)
            }),
            cleanup: Box::new(move |topics| kafka::delete_topics(&h4, address, topics)),
            modes: [
                "Java client, acks=0, batch.size=0 (a request per record), pipelined",
                "Java client, acks=0, 50 records a request (linger 5 ms)",
                "Java client, one consumer, 10,000 records a poll",
            ],
        },
        KafkaClient::Librdkafka => librdkafka_run(spec, h1, h4),
    };
    let (mut rows, disk) = run_peer(spec, suffix, peer);
    // Kafka's best mode: its producer as shipped (acks=all, idempotent,
    // 16 KiB batches, 5 ms linger), one more topic.
    let topic = format!("paper-defaults-{suffix}");
    let home = kafka::home(&spec.peers_dir);
    let outcome = run_one("kafka produce, its defaults", n, |stats| {
        kafka::produce(
            &home,
            address,
            &topic,
            n,
            size,
            Batching::Defaults,
            "all",
            stats,
        )
        .map(drop)
    });
    rows.push(row(
        System::Kafka,
        Experiment::ProduceDefaults,
        "Java client, Kafka's default producer settings (acks=all, idempotent, batch.size 16 KiB, linger 5 ms)",
        outcome,
    ));
    kafka::delete_topics(&home, address, &[&topic]);
    (rows, disk)
}

#[cfg(feature = "librdkafka")]
fn librdkafka_run<'a>(spec: &'a PaperSpec, home: PathBuf, cleanup: PathBuf) -> PeerRun<'a> {
    use crate::peers::kafka_librdkafka as rd;
    let address = spec.kafka_address.as_str();
    let (n, size) = (spec.messages, spec.size);
    let h2 = home.clone();
    PeerRun {
        system: System::Kafka,
        data_dir: spec.peers_dir.join("kafka").join("node-1").join("data"),
        produce_paper: Box::new(move |q, stats| rd::produce(&home, address, q, n, size, 1, stats)),
        produce_fast: Box::new(move |q, stats| rd::produce(&h2, address, q, n, size, 50, stats)),
        consume: Box::new(move |q, stats| rd::consume(address, q, n, stats)),
        cleanup: Box::new(move |topics| kafka::delete_topics(&cleanup, address, topics)),
        modes: [
            "librdkafka, acks=0, batch.num.messages=1, no linger, pipelined",
            "librdkafka, acks=0, 50 records a request (linger 5 ms)",
            "librdkafka, one consumer",
        ],
    }
}

#[cfg(not(feature = "librdkafka"))]
fn librdkafka_run<'a>(_: &'a PaperSpec, _: PathBuf, _: PathBuf) -> PeerRun<'a> {
    unreachable!("KafkaClient::parse refuses librdkafka without the feature")
}

fn rate(rows: &[Row], system: System, experiment: Experiment) -> Option<f64> {
    rows.iter()
        .find(|r| r.system == system && r.experiment == experiment)
        .and_then(|r| r.result.as_ref())
        .map(|s| s.msgs_per_sec)
}

fn best_produce(rows: &[Row], system: System) -> Option<f64> {
    [
        Experiment::ProduceBatch1,
        Experiment::ProduceBatch50,
        Experiment::ProduceDefaults,
    ]
    .into_iter()
    .filter_map(|e| rate(rows, system, e))
    .reduce(f64::max)
}

fn ratios(rows: &[Row]) -> Vec<Ratio> {
    let ringlog_b1 = rate(rows, System::Ringlog, Experiment::ProduceBatch1);
    let ringlog_b50 = rate(rows, System::Ringlog, Experiment::ProduceBatch50);
    let ringlog_consume = rate(rows, System::Ringlog, Experiment::Consume);
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let mut out = Vec::new();
    let today = "not in the paper (today's peer)";
    for (peer, produce_claim, produce_min) in [
        (
            System::Rabbitmq,
            "Kafka ≥ 2× RabbitMQ producing (RabbitMQ at best half of Kafka)",
            Some(2.0),
        ),
        (
            System::Activemq,
            "Kafka ≫ ActiveMQ producing (orders of magnitude)",
            Some(10.0),
        ),
        (System::Nats, today, None),
        (System::Redis, today, None),
        (System::Kafka, "not in the paper (today's Kafka)", None),
    ] {
        if !rows.iter().any(|r| r.system == peer) {
            continue;
        }
        let consume_claim = match produce_min {
            Some(_) => "Kafka > 4× both consuming",
            None => produce_claim,
        };
        let holds = |r: Option<f64>, min: Option<f64>| match (r, min) {
            (Some(r), Some(min)) => Some(r >= min),
            _ => None,
        };
        let name = peer.title();
        let r = ratio(ringlog_b1, rate(rows, peer, Experiment::ProduceBatch1));
        out.push(Ratio {
            comparison: format!("produce, batch 1: ringlog / {name}"),
            ratio: r,
            paper_claim: produce_claim.to_string(),
            holds: holds(r, produce_min),
        });
        let r = ratio(ringlog_b50, best_produce(rows, peer));
        out.push(Ratio {
            comparison: format!("produce, batch 50: ringlog / {name}'s best producing mode"),
            ratio: r,
            paper_claim: produce_claim.to_string(),
            holds: holds(r, produce_min),
        });
        let r = ratio(ringlog_consume, rate(rows, peer, Experiment::Consume));
        out.push(Ratio {
            comparison: format!("consume: ringlog / {name}"),
            ratio: r,
            paper_claim: consume_claim.into(),
            holds: holds(r, produce_min.map(|_| 4.0)),
        });
    }
    out
}

fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The text table: system × experiment, the paper's figure, ratios, disk.
pub fn table(report: &PaperReport) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "loadgen paper: {} messages of {} bytes per experiment; {} cores, kernel {}, ringlog {}",
        report.messages,
        report.size,
        report.environment.cores,
        report.environment.kernel,
        report.environment.git_revision
    );
    let _ = writeln!(t, "ringlog broker: {}", report.ringlog_broker);
    let _ = writeln!(t);
    let _ = writeln!(
        t,
        "{:<9} {:<18} {:>12} {:>9} {:>10}  mode",
        "system", "experiment", "msg/s", "MB/s", "paper*"
    );
    let mut explained: Vec<(System, &str)> = Vec::new();
    for r in &report.rows {
        let (msgs, mb) = match &r.result {
            Some(s) => (thousands(s.msgs_per_sec), format!("{:.1}", s.mb_per_sec)),
            None => ("not run".to_string(), "-".to_string()),
        };
        let remark = if r.result.is_some() {
            r.mode.as_str()
        } else if explained.contains(&(r.system, r.note.as_str())) {
            "(as above)"
        } else {
            explained.push((r.system, r.note.as_str()));
            r.note.as_str()
        };
        let _ = writeln!(
            t,
            "{:<9} {:<18} {:>12} {:>9} {:>10}  {}",
            r.system.name(),
            r.experiment.title(),
            msgs,
            mb,
            if r.paper_kafka_msgs_per_sec > 0.0 {
                thousands(r.paper_kafka_msgs_per_sec)
            } else {
                "-".to_string()
            },
            remark
        );
    }
    let _ = writeln!(
        t,
        "* the paper's Kafka figure for the experiment (2011: 2 machines, 8 cores, 1 Gb network)"
    );
    let _ = writeln!(t);
    let _ = writeln!(t, "ratios (ringlog / peer) against the paper's claims:");
    for r in &report.ratios {
        let value = r
            .ratio
            .map_or("not run".to_string(), |v| format!("{v:.1}×"));
        let verdict = match r.holds {
            Some(true) => "holds",
            Some(false) => "does NOT hold",
            None => "-",
        };
        let _ = writeln!(
            t,
            "  {:<58} {:>9}  {verdict}  ({})",
            r.comparison, value, r.paper_claim
        );
    }
    let _ = writeln!(t);
    let _ = writeln!(
        t,
        "on-disk bytes per message ({}-byte payload):",
        report.size
    );
    for d in &report.disk {
        match (d.bytes_per_message, d.overhead_bytes) {
            (Some(per), Some(over)) => {
                let _ = writeln!(
                    t,
                    "  {:<9} {per:>8.1} bytes ({over:+.1} beyond the payload)  [{}]",
                    d.system.name(),
                    d.method
                );
            }
            _ => {
                let _ = writeln!(t, "  {:<9} {:>8}", d.system.name(), "not run");
            }
        }
    }
    let _ = writeln!(
        t,
        "  paper: {} bytes of overhead per message for Kafka, {} for ActiveMQ",
        PAPER_OVERHEAD_BYTES[0].1, PAPER_OVERHEAD_BYTES[1].1
    );
    t
}

/// Rewrites the charts of an earlier run from its `paper.json`.
pub fn replot(json: &std::path::Path, out: &std::path::Path) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(json).with_context(|| format!("reading {}", json.display()))?;
    let report: PaperReport =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", json.display()))?;
    std::fs::create_dir_all(out)?;
    write_charts(&report, out)
}

/// The paper-comparison bar chart and one throughput-over-time chart per experiment.
pub fn write_charts(report: &PaperReport, out: &std::path::Path) -> anyhow::Result<()> {
    let experiments = [
        Experiment::ProduceBatch1,
        Experiment::ProduceBatch50,
        Experiment::Consume,
    ];
    let systems: Vec<System> = {
        let mut s: Vec<System> = report.rows.iter().map(|r| r.system).collect();
        s.dedup();
        s
    };
    let mut bar_names: Vec<String> = systems.iter().map(|s| s.name().to_string()).collect();
    bar_names.push("Kafka, paper (2011)".into());
    let groups: Vec<(String, Vec<Option<f64>>)> = experiments
        .iter()
        .map(|&e| {
            let mut values: Vec<Option<f64>> =
                systems.iter().map(|&s| rate(&report.rows, s, e)).collect();
            values.push(Some(paper_figure(e)));
            (e.title().to_string(), values)
        })
        .collect();
    let svg = chart::grouped_bars(
        &format!(
            "The paper's experiments on this machine ({} × {} B)",
            report.messages, report.size
        ),
        "messages per second (log scale)",
        &bar_names,
        &groups,
        true,
    );
    std::fs::write(out.join("paper.svg"), svg)?;
    for e in experiments {
        let series: Vec<Series> = report
            .rows
            .iter()
            .filter(|r| r.experiment == e)
            .filter_map(|r| {
                r.result.as_ref().map(|s| Series {
                    name: format!("{} ({})", r.system.name(), short(&r.mode)),
                    points: s.series.clone(),
                })
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        let name = match e {
            Experiment::ProduceBatch1 => "throughput-produce-batch1.svg",
            Experiment::ProduceBatch50 => "throughput-produce-batch50.svg",
            Experiment::Consume => "throughput-consume.svg",
            Experiment::ProduceDefaults => "throughput-produce-defaults.svg",
        };
        let svg = chart::lines(
            &format!("Throughput over time: {}", e.title()),
            "seconds",
            "messages per second (log scale)",
            &series,
            true,
        );
        std::fs::write(out.join(name), svg)?;
    }
    Ok(())
}

fn short(mode: &str) -> String {
    // The legend keeps the mode's first clause: "publisher confirms",
    // "transactions of 50 sends", "200 KiB fetches".
    mode.split([',', '('])
        .next()
        .unwrap_or(mode)
        .trim()
        .to_string()
}
