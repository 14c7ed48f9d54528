//! `loadgen kafka-perf`: the same outside clients against ringlog's Kafka
//! listener and against Apache Kafka 4.4, in one run — Kafka's own
//! `ProducerPerformance` and `ConsumerPerformance` (the classes behind
//! `kafka-producer-perf-test.sh` / `kafka-consumer-perf-test.sh`) and
//! librdkafka through kcat, so neither broker is measured with a client of
//! its own making.
//!
//! - **R=1**: a standalone ringlog broker of two shards this starts itself
//!   beside one Kafka node (`deploy/peers.sh start kafka`), acks=all and
//!   acks=1. On one copy, ringlog's acks=all answers once the write is
//!   flushed to disk (its promise for an acknowledged message); Kafka's
//!   answers from the page cache, as ringlog's acks=1 does.
//! - **R=3**: three ringlog brokers on etcd this starts itself beside
//!   Kafka's three nodes (`deploy/peers.sh start kafka-cluster`),
//!   `min.insync.replicas=2`, acks=all: ringlog's default topic (each copy
//!   flushed before it counts) and a `write.caching=true` topic (each copy
//!   written), Kafka (each copy written; Kafka never flushes on its own).
//!
//! Every topic is created with Kafka's topic tool. For each run: the
//! client's figures as it reports them, the CPU of every broker process
//! (etcd counted on ringlog's side, as Kafka's controller runs inside its
//! nodes) and of the client, per message; for ringlog's consumers, the
//! share of the fetched bytes sent with sendfile.

pub mod tools;

use crate::broker_process::{ringlog_binary, LocalBroker};
use crate::cluster_process::{metric, process_cpu, LocalCluster};
use crate::peer_replication::KAFKA_CLUSTER;
use crate::peers::kafka;
use anyhow::{bail, Context};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tools::{ClientRun, KafkaTools};

/// What to run.
#[derive(Debug, Clone)]
pub struct KafkaPerfSpec {
    /// Records per run.
    pub messages: u64,
    /// Bytes per record.
    pub size: usize,
    /// Partitions of each topic.
    pub partitions: u32,
    /// Copies measured: 1, 3 or both.
    pub replicas: Vec<u32>,
    /// Rounds of everything; the order of the systems alternates.
    pub rounds: u32,
    /// Where `deploy/peers.sh` keeps Kafka's jars and nodes.
    pub peers_dir: PathBuf,
    /// Kafka's single node.
    pub kafka: String,
    /// Kafka's three nodes.
    pub kafka_cluster: String,
    /// Where the table, the JSON and each tool's output go.
    pub out: PathBuf,
}

/// The first of Kafka's three nodes, as `peers.sh` starts them.
pub const DEFAULT_KAFKA_CLUSTER: &str = KAFKA_CLUSTER;

/// One run of one client against one broker setup.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The round (from 1).
    pub round: u32,
    /// `ringlog`, `ringlog write.caching` or `kafka 4.4`.
    pub system: String,
    /// Copies of the topic.
    pub replicas: u32,
    /// The producer's acks.
    pub acks: String,
    /// `ProducerPerformance`, `ConsumerPerformance`, `kcat -P`, `kcat -C`.
    pub client: String,
    /// Records per second (the consumer tool's: while fetching).
    pub msgs_per_s: f64,
    /// Megabytes (2^20) of records per second.
    pub mb_per_s: f64,
    /// The producer tool's latency, ms: p50, p99, p99.9, max.
    pub latency_ms: Option<[f64; 4]>,
    /// CPU of the broker processes, microseconds per record.
    pub broker_cpu_us: f64,
    /// CPU of the client process, microseconds per record.
    pub client_cpu_us: f64,
    /// ringlog consumers: the share of fetched bytes sent with sendfile.
    pub zero_copy: Option<f64>,
    /// What else the client said (the consumer tool's group join time).
    pub note: String,
}

/// A broker setup measured: where clients connect, which processes are
/// its brokers, its metrics endpoints (ringlog), how its topics are made.
struct Target {
    system: &'static str,
    bootstrap: String,
    pids: Vec<u32>,
    metrics: Vec<String>,
    create: Create,
}

/// How a setup's topics are created.
#[derive(Clone)]
enum Create {
    /// With Kafka's topic tool, these `--config`s.
    KafkaTool(Vec<String>),
    /// With `ringlog topic create` at these native addresses, these flags
    /// beyond the partitions and copies: a setting Kafka's tool will not
    /// pass (it refuses config names Kafka does not know, write.caching
    /// among them).
    RinglogCli(String, Vec<String>),
}

impl Target {
    fn cpu(&self) -> Duration {
        self.pids.iter().map(|pid| process_cpu(*pid)).sum()
    }

    fn counter(&self, name: &str) -> anyhow::Result<f64> {
        self.metrics.iter().map(|m| metric(m, name)).sum()
    }

    fn create_topic(
        &self,
        tools: &KafkaTools,
        topic: &str,
        partitions: u32,
        replicas: u32,
    ) -> anyhow::Result<()> {
        match &self.create {
            Create::KafkaTool(configs) => {
                tools.create_topic(&self.bootstrap, topic, partitions, replicas, configs)
            }
            Create::RinglogCli(brokers, flags) => {
                let output = std::process::Command::new(ringlog_binary())
                    .args(["--brokers", brokers, "topic", "create", topic])
                    .args(["--partitions", &partitions.to_string()])
                    .args(["--replication-factor", &replicas.to_string()])
                    .args(flags)
                    .output()
                    .context("running ringlog topic create")?;
                if !output.status.success() {
                    bail!(
                        "ringlog topic create {topic}: {}",
                        String::from_utf8_lossy(&output.stderr).trim()
                    );
                }
                Ok(())
            }
        }
    }
}

/// Runs every setup of `spec` and returns the rows, ringlog's before
/// Kafka's in each.
pub fn run(spec: &KafkaPerfSpec) -> anyhow::Result<Vec<Row>> {
    if let Some(other) = spec.replicas.iter().find(|r| **r != 1 && **r != 3) {
        bail!("copies {other}: 1 or 3");
    }
    std::fs::create_dir_all(spec.out.join("raw"))
        .with_context(|| format!("creating {}", spec.out.display()))?;
    let tools = KafkaTools::new(&kafka::home(&spec.peers_dir), &spec.out)?;
    // Fail before anything starts if a Kafka this needs is down.
    for &replicas in &spec.replicas {
        kafka_target(spec, replicas)?;
    }
    let lines = spec.out.join("kcat-lines");
    tools::write_lines(&lines, spec.messages, spec.size)?;
    let mut rows = Vec::new();
    for round in 1..=spec.rounds {
        for &replicas in &spec.replicas {
            let measured = match replicas {
                1 => one_copy(spec, &tools, &lines, round),
                _ => three_copies(spec, &tools, &lines, round),
            };
            match measured {
                Ok(more) => rows.extend(more),
                Err(error) => {
                    let _ = std::fs::remove_file(&lines);
                    return Err(error);
                }
            }
        }
    }
    let _ = std::fs::remove_file(&lines);
    Ok(rows)
}

/// Each setup's median row over the rounds (by msg/s; of two, the
/// lower), in the order first seen.
pub fn medians(rows: &[Row]) -> Vec<Row> {
    let key = |r: &Row| {
        (
            r.system.clone(),
            r.replicas,
            r.acks.clone(),
            r.client.clone(),
        )
    };
    let mut keys = Vec::new();
    for row in rows {
        if !keys.contains(&key(row)) {
            keys.push(key(row));
        }
    }
    keys.iter()
        .filter_map(|k| {
            let mut same: Vec<&Row> = rows.iter().filter(|r| key(r) == *k).collect();
            same.sort_by(|a, b| a.msgs_per_s.total_cmp(&b.msgs_per_s));
            same.get((same.len().max(1) - 1) / 2).map(|r| (*r).clone())
        })
        .collect()
}

/// Kafka second in odd rounds, first in even ones.
fn in_round_order(mut targets: Vec<&Target>, round: u32) -> Vec<&Target> {
    if round.is_multiple_of(2) {
        targets.reverse();
    }
    targets
}

/// ringlog's broker configuration for these runs: Kafka listeners and
/// metrics on free ports, and no wait for more members before a new
/// group's first assignment (the peers' `group.initial.rebalance.delay.ms`
/// is 0 too).
const RINGLOG_TOML: &str = "kafka_group_initial_delay_ms = 0\n";

fn one_copy(
    spec: &KafkaPerfSpec,
    tools: &KafkaTools,
    lines: &Path,
    round: u32,
) -> anyhow::Result<Vec<Row>> {
    let toml =
        format!("{RINGLOG_TOML}kafka_listen = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"\n");
    let broker = LocalBroker::start_with(2, "kafka-perf", &toml, |_| Ok(()))?;
    let ringlog = Target {
        system: "ringlog",
        bootstrap: broker
            .kafka
            .clone()
            .context("the broker opened no Kafka listener")?,
        pids: vec![broker.pid()],
        metrics: broker.metrics.iter().cloned().collect(),
        create: Create::KafkaTool(Vec::new()),
    };
    let kafka = kafka_target(spec, 1)?;
    let mut rows = Vec::new();
    for acks in ["all", "1"] {
        for target in in_round_order(vec![&ringlog, &kafka], round) {
            rows.extend(measure(spec, tools, target, (1, acks, round), lines)?);
        }
    }
    Ok(rows)
}

fn three_copies(
    spec: &KafkaPerfSpec,
    tools: &KafkaTools,
    lines: &Path,
    round: u32,
) -> anyhow::Result<Vec<Row>> {
    let cluster = LocalCluster::start(3, RINGLOG_TOML)?;
    let mut pids: Vec<u32> = cluster.brokers.iter().map(|b| b.pid()).collect();
    pids.push(cluster.etcd_pid());
    let bootstrap: Vec<String> = cluster.brokers.iter().map(|b| b.kafka.clone()).collect();
    let flushed = Target {
        system: "ringlog",
        bootstrap: bootstrap.join(","),
        pids,
        metrics: cluster.brokers.iter().map(|b| b.metrics.clone()).collect(),
        create: Create::KafkaTool(vec!["min.insync.replicas=2".into()]),
    };
    let written = Target {
        system: "ringlog write.caching",
        create: Create::RinglogCli(
            cluster.addresses(),
            [
                "--min-insync-replicas",
                "2",
                "--write-caching",
                "--message-format",
                "2",
            ]
            .map(String::from)
            .to_vec(),
        ),
        bootstrap: flushed.bootstrap.clone(),
        pids: flushed.pids.clone(),
        metrics: flushed.metrics.clone(),
    };
    let kafka = kafka_target(spec, 3)?;
    let mut rows = Vec::new();
    for target in in_round_order(vec![&flushed, &written, &kafka], round) {
        rows.extend(measure(spec, tools, target, (3, "all", round), lines)?);
    }
    Ok(rows)
}

/// Kafka's node(s) for `replicas` copies, as `deploy/peers.sh` started them.
fn kafka_target(spec: &KafkaPerfSpec, replicas: u32) -> anyhow::Result<Target> {
    let (bootstrap, dir, nodes, start) = if replicas == 1 {
        (spec.kafka.clone(), "kafka", 1, "kafka")
    } else {
        (
            spec.kafka_cluster.clone(),
            "kafka-cluster",
            3,
            "kafka-cluster",
        )
    };
    let first = bootstrap.split(',').next().unwrap_or_default();
    let hint = format!(
        "start it with `RINGLOG_PEERS_DIR={} deploy/peers.sh start {start}`",
        spec.peers_dir.display()
    );
    if !kafka::reachable(first) {
        bail!("Kafka is not reachable at {first}: {hint}");
    }
    let pids = (1..=nodes)
        .map(|n| {
            let path = spec
                .peers_dir
                .join(dir)
                .join(format!("node-{n}"))
                .join("kafka.pid");
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {} ({hint})", path.display()))?;
            text.trim()
                .parse::<u32>()
                .with_context(|| format!("{} holds {text:?}", path.display()))
        })
        .collect::<anyhow::Result<Vec<u32>>>()?;
    let mut configs = Vec::new();
    if replicas > 1 {
        configs.push("min.insync.replicas=2".into());
    }
    Ok(Target {
        system: "kafka 4.4",
        bootstrap,
        pids,
        metrics: Vec::new(),
        create: Create::KafkaTool(configs),
    })
}

/// The four runs on one setup with (copies, acks, round): Kafka's producer
/// tool then its consumer tool on one topic, kcat producing then consuming
/// another.
fn measure(
    spec: &KafkaPerfSpec,
    tools: &KafkaTools,
    target: &Target,
    (replicas, acks, round): (u32, &str, u32),
    lines: &Path,
) -> anyhow::Result<Vec<Row>> {
    let short = target.system.replace([' ', '.'], "-");
    let label = format!("r{replicas}-acks{acks}-{short}-round{round}");
    let topic = format!("perf-{label}-{}", std::process::id());
    let messages = spec.messages;
    let mb = (messages as f64 * spec.size as f64) / f64::from(1 << 20);
    let row = |client: &str, rate: f64, broker: Duration, run: &ClientRun| Row {
        round,
        system: target.system.to_string(),
        replicas,
        acks: acks.to_string(),
        client: client.to_string(),
        msgs_per_s: rate,
        mb_per_s: rate * spec.size as f64 / f64::from(1 << 20),
        latency_ms: None,
        broker_cpu_us: broker.as_secs_f64() * 1e6 / messages as f64,
        client_cpu_us: run.cpu.as_secs_f64() * 1e6 / messages as f64,
        zero_copy: None,
        note: String::new(),
    };
    let save = |name: &str, run: &ClientRun| {
        std::fs::write(
            spec.out.join("raw").join(format!("{label}-{name}.txt")),
            &run.stdout,
        )
    };
    eprintln!("kafka-perf: {label}");
    let mut rows = Vec::new();

    target.create_topic(tools, &topic, spec.partitions, replicas)?;
    let props = [
        format!("bootstrap.servers={}", target.bootstrap),
        format!("acks={acks}"),
    ];
    let before = target.cpu();
    let (report, run) = tools.produce(&topic, messages, spec.size, &props)?;
    save("producer", &run)?;
    let mut produced = row(
        "ProducerPerformance",
        report.records_per_s,
        target.cpu() - before,
        &run,
    );
    produced.mb_per_s = report.mb_per_s;
    produced.latency_ms = Some([report.p50_ms, report.p99_ms, report.p999_ms, report.max_ms]);
    rows.push(produced);

    let sent_before = target.counter("ringlog_fetch_bytes_total")?;
    let zero_before = target.counter("ringlog_fetch_zero_copy_bytes_total")?;
    let before = target.cpu();
    let (report, run) =
        tools.consume(&target.bootstrap, &topic, &format!("{topic}-g"), messages)?;
    save("consumer", &run)?;
    let mut consumed = row(
        "ConsumerPerformance",
        report.fetch_records_per_s,
        target.cpu() - before,
        &run,
    );
    consumed.mb_per_s = report.fetch_mb_per_s;
    let sent = target.counter("ringlog_fetch_bytes_total")? - sent_before;
    let zero = target.counter("ringlog_fetch_zero_copy_bytes_total")? - zero_before;
    consumed.zero_copy = (!target.metrics.is_empty()).then(|| zero / sent.max(1.0));
    consumed.note = format!(
        "join {:.0} ms; {:.0} msg/s with it",
        report.rebalance_ms, report.records_per_s
    );
    rows.push(consumed);

    let topic = format!("{topic}-kcat");
    target.create_topic(tools, &topic, spec.partitions, replicas)?;
    let before = target.cpu();
    let run = tools::kcat_produce(&target.bootstrap, &topic, acks, lines)?;
    let rate = messages as f64 / run.wall.as_secs_f64();
    rows.push(row("kcat -P", rate, target.cpu() - before, &run));
    let before = target.cpu();
    let run = tools::kcat_consume(&target.bootstrap, &topic, messages)?;
    let rate = messages as f64 / run.wall.as_secs_f64();
    rows.push(row("kcat -C", rate, target.cpu() - before, &run));
    eprintln!(
        "kafka-perf: {label}: {:.0} MB each way, {}",
        mb,
        rows.iter()
            .map(|r| format!("{} {:.0} msg/s", r.client, r.msgs_per_s))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(rows)
}

/// The rows as a Markdown table, each ringlog row with its ratio to
/// Kafka's row of the same copies, acks and client.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| copies | acks | client | system | msg/s | MB/s | × Kafka | p50 · p99 · p99.9 · max ms | broker CPU µs/msg | client CPU µs/msg | sendfile | note |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let kafka = rows.iter().find(|k| {
            k.system.starts_with("kafka")
                && k.replicas == r.replicas
                && k.acks == r.acks
                && k.client == r.client
        });
        let ratio = match kafka {
            Some(k) if !r.system.starts_with("kafka") && k.msgs_per_s > 0.0 => {
                format!("{:.2}×", r.msgs_per_s / k.msgs_per_s)
            }
            _ => String::new(),
        };
        let latency = r.latency_ms.map_or(String::new(), |[p50, p99, p999, max]| {
            format!("{p50:.0} · {p99:.0} · {p999:.0} · {max:.0}")
        });
        let zero_copy = r
            .zero_copy
            .map_or(String::new(), |z| format!("{:.1}%", z * 100.0));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.0} | {:.1} | {} | {} | {:.2} | {:.2} | {} | {} |",
            r.replicas,
            r.acks,
            r.client,
            r.system,
            r.msgs_per_s,
            r.mb_per_s,
            ratio,
            latency,
            r.broker_cpu_us,
            r.client_cpu_us,
            zero_copy,
            r.note
        );
    }
    out
}
