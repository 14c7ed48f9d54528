//! `loadgen replication --systems ...,kafka,nats`: the replication figures
//! of [`crate::replication`] for today's peers, each on a three-node
//! cluster `deploy/peers.sh` starts on loopback:
//!
//! - **Apache Kafka 4.4** (`start kafka-cluster`: three KRaft nodes, each
//!   broker and controller), topics of three copies with
//!   `min.insync.replicas=2`, produced with acks=all through Kafka's own
//!   Java client (loadgen's driver, [`crate::peers::kafka`]);
//! - **NATS JetStream 2.9** (`start nats-cluster`: three servers), streams
//!   of three copies on file storage: a publish is acknowledged once a
//!   majority of the copies stored it, as acks=all with a minimum of two.
//!
//! For each: unpaced produce throughput, publish latency at a fixed rate,
//! consume throughput, and the time from the stream or partition leader's
//! SIGKILL to an acknowledged publish again — each with the CPU of every
//! server process and of the client. Neither peer fsyncs per message
//! (Kafka leaves flushing to the OS, JetStream flushes every two minutes);
//! ringlog's acks=all waits for each copy's flush, its `write_caching`
//! variant for each copy's write — both are in ringlog's table beside these.
//! A killed node comes back on its own data with the `start.sh` peers.sh
//! wrote for it.

use crate::cluster_process::process_cpu;
use crate::peers::{kafka, nats};
use crate::replication::{
    failover_figure, first_answer_after, Answered, ConsumeFigure, CpuSplit, FailoverFigure,
    ProduceFigure, ReplicationOutcome,
};
use crate::stats::{LatencySummary, Stats};
use anyhow::{bail, Context};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Kafka's three nodes, as `deploy/peers.sh start kafka-cluster` starts them.
pub const KAFKA_CLUSTER: &str = "127.0.0.1:29192,127.0.0.1:29292,127.0.0.1:29392";

/// NATS's three servers, as `deploy/peers.sh start nats-cluster` starts them.
pub const NATS_CLUSTER: &str = "nats://127.0.0.1:4322,nats://127.0.0.1:4332,nats://127.0.0.1:4342";

/// Seconds at the start of a Kafka latency run not counted: the driver's
/// JVM compiles its hot paths then (ringlog's runs count every message, so
/// this only favours Kafka).
const KAFKA_WARMUP_S: f64 = 5.0;

/// A peer cluster measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Peer {
    /// Apache Kafka 4.4, three KRaft nodes.
    Kafka,
    /// NATS JetStream, three servers.
    Nats,
}

impl Peer {
    fn cluster_dir(self) -> &'static str {
        match self {
            Peer::Kafka => "kafka-cluster",
            Peer::Nats => "nats-cluster",
        }
    }

    fn pid_file(self) -> &'static str {
        match self {
            Peer::Kafka => "kafka.pid",
            Peer::Nats => "nats.pid",
        }
    }
}

/// What to run: the sizes of `loadgen replication`.
#[derive(Debug, Clone)]
pub struct PeerSpec {
    /// Messages per throughput run.
    pub messages: u64,
    /// Payload bytes.
    pub size: usize,
    /// Kafka: records per request; NATS: publishes unacknowledged at once.
    pub batch: usize,
    /// Partitions of Kafka's topics (NATS: one stream).
    pub partitions: u32,
    /// Messages per second of the latency runs.
    pub latency_rate: f64,
    /// Seconds each latency run counts.
    pub latency_seconds: f64,
    /// Leader kills to time.
    pub failovers: u32,
    /// Where `deploy/peers.sh` keeps the clusters' data and pid files.
    pub peers_dir: PathBuf,
}

/// One peer's figures.
#[derive(Debug, Clone, Serialize)]
pub struct PeerFigures {
    /// Which peer.
    pub system: Peer,
    /// Its settings and client, in words.
    pub settings: String,
    /// Unpaced produce, three copies, acknowledged by a majority.
    pub throughput: ProduceFigure,
    /// The same at the fixed rate.
    pub latency: ProduceFigure,
    /// Consuming what the throughput run wrote.
    pub consume: ConsumeFigure,
    /// Leader kills (its `lease_ttl_s` is 0: the peers' own timeouts rule).
    pub failover: FailoverFigure,
}

/// A node of a peer cluster: its pid file and its start script.
struct Node {
    dir: PathBuf,
    pid_file: &'static str,
}

impl Node {
    fn pid(&self) -> anyhow::Result<u32> {
        let path = self.dir.join(self.pid_file);
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "reading {} (is the cluster started by deploy/peers.sh?)",
                path.display()
            )
        })?;
        text.trim()
            .parse()
            .with_context(|| format!("{} holds {text:?}", path.display()))
    }

    fn cpu(&self) -> Duration {
        self.pid().map(process_cpu).unwrap_or_default()
    }

    fn kill9(&self) -> anyhow::Result<()> {
        let pid = self.pid()?;
        // SAFETY: kill has no memory preconditions; the pid is the node
        // peers.sh started (its pid file).
        if unsafe { libc::kill(pid as i32, libc::SIGKILL) } != 0 {
            bail!("SIGKILL to pid {pid}: {}", std::io::Error::last_os_error());
        }
        // Reap-free wait: the node is not our child; wait until it is gone.
        for _ in 0..500 {
            if !Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                    s.rsplit_once(')')
                        .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
                })
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        bail!("pid {pid} still runs 5 s after SIGKILL")
    }

    fn restart(&self) -> anyhow::Result<()> {
        let script = self.dir.join("start.sh");
        let status = std::process::Command::new("bash")
            .arg(&script)
            .stdout(std::process::Stdio::null())
            .status()
            .with_context(|| format!("running {}", script.display()))?;
        if !status.success() {
            bail!("{} failed ({status})", script.display());
        }
        Ok(())
    }
}

fn nodes(spec: &PeerSpec, peer: Peer) -> anyhow::Result<Vec<Node>> {
    let nodes: Vec<Node> = (1..=3)
        .map(|n| Node {
            dir: spec
                .peers_dir
                .join(peer.cluster_dir())
                .join(format!("node-{n}")),
            pid_file: peer.pid_file(),
        })
        .collect();
    for node in &nodes {
        node.pid().with_context(|| {
            format!(
                "start it with `RINGLOG_PEERS_DIR={} deploy/peers.sh start {}`",
                spec.peers_dir.display(),
                peer.cluster_dir()
            )
        })?;
    }
    Ok(nodes)
}

/// Runs `run`, returning its value (with the client's CPU seconds, if it
/// reports them) and every node's CPU over it; the client's is added to
/// this process's own.
fn with_cpu<T>(
    nodes: &[Node],
    run: impl FnOnce() -> anyhow::Result<(T, f64)>,
) -> anyhow::Result<(T, CpuSplit)> {
    let me = std::process::id();
    let before: Vec<Duration> = nodes.iter().map(Node::cpu).collect();
    let own = process_cpu(me);
    let (value, client_s) = run()?;
    let brokers_s = nodes
        .iter()
        .zip(before)
        .map(|(n, was)| n.cpu().saturating_sub(was).as_secs_f64())
        .collect();
    let loadgen_s = process_cpu(me).saturating_sub(own).as_secs_f64() + client_s;
    Ok((
        value,
        CpuSplit {
            brokers_s,
            loadgen_s,
        },
    ))
}

fn total(cpu: &CpuSplit) -> f64 {
    cpu.brokers_s.iter().sum::<f64>() + cpu.loadgen_s
}

fn figure(label: &str, stats: &Stats, cpu: CpuSplit, messages: u64) -> ProduceFigure {
    let summary = stats.summary();
    ProduceFigure {
        label: label.to_string(),
        replication_factor: 3,
        acks: "all".into(),
        msgs_per_sec: summary.msgs_per_sec,
        mb_per_sec: summary.mb_per_sec,
        latency: summary.latency,
        cpu_us_per_msg: total(&cpu) * 1e6 / messages.max(1) as f64,
        cpu,
    }
}

/// A paced run's figure (its label printed with the rate achieved and
/// the publish percentiles).
fn paced_figure(
    label: &str,
    acks: &str,
    size: usize,
    achieved: f64,
    publish: Option<LatencySummary>,
    cpu: CpuSplit,
    sent: u64,
) -> ProduceFigure {
    println!(
        "{label}: {achieved:.0} msg/s, publish {}",
        publish.as_ref().map_or("-".into(), |l| format!(
            "p50 {:.2} ms p99 {:.2} ms p99.9 {:.2} ms",
            l.p50_ms, l.p99_ms, l.p999_ms
        ))
    );
    ProduceFigure {
        label: label.split(" (paced").next().unwrap_or(label).to_string(),
        replication_factor: 3,
        acks: acks.into(),
        msgs_per_sec: achieved,
        mb_per_sec: achieved * size as f64 / 1e6,
        latency: publish,
        cpu_us_per_msg: total(&cpu) * 1e6 / sent.max(1) as f64,
        cpu,
    }
}

/// A consume run's figure (printed under `label`).
fn consume_figure(label: &str, stats: &Stats, cpu: CpuSplit) -> ConsumeFigure {
    let summary = stats.summary();
    println!("{label}: {}", summary.line("read"));
    ConsumeFigure {
        msgs_per_sec: summary.msgs_per_sec,
        mb_per_sec: summary.mb_per_sec,
        cpu_us_per_msg: total(&cpu) * 1e6 / summary.messages.max(1) as f64,
        cpu,
    }
}

/// Measures every peer in `peers`, in order.
pub fn run(spec: &PeerSpec, peers: &[Peer]) -> anyhow::Result<Vec<PeerFigures>> {
    peers
        .iter()
        .map(|&peer| match peer {
            Peer::Kafka => run_kafka(spec),
            Peer::Nats => run_nats(spec),
        })
        .collect()
}

fn run_kafka(spec: &PeerSpec) -> anyhow::Result<PeerFigures> {
    let nodes = nodes(spec, Peer::Kafka)?;
    let home = kafka::home(&spec.peers_dir);
    if let Some(why) = kafka::missing_driver(&home) {
        bail!(why);
    }
    let bootstrap = KAFKA_CLUSTER;
    let suffix = std::process::id();
    let r3 = |topic: &str, partitions: u32| {
        kafka::create(
            &home,
            bootstrap,
            topic,
            partitions,
            3,
            &["min.insync.replicas=2"],
        )
    };
    let label = "Kafka R=3 acks=all";

    let topic = format!("tp-r3-all-{suffix}");
    r3(&topic, spec.partitions)?;
    let stats = Stats::new();
    let (_, cpu) = with_cpu(&nodes, || {
        let outcome = kafka::produce(
            &home,
            bootstrap,
            &topic,
            spec.messages,
            spec.size,
            kafka::Batching::Records(spec.batch),
            "all",
            &stats,
        )?;
        Ok(((), outcome.cpu_s))
    })?;
    println!("{label}: {}", stats.summary().line("sent"));
    let throughput = figure(label, &stats, cpu, spec.messages);

    let paced_topic = format!("lat-r3-all-{suffix}");
    r3(&paced_topic, spec.partitions)?;
    let (outcome, cpu) = with_cpu(&nodes, || {
        let outcome = kafka::paced(
            &home,
            bootstrap,
            &paced_topic,
            spec.latency_rate,
            spec.latency_seconds + KAFKA_WARMUP_S,
            KAFKA_WARMUP_S,
            spec.size,
            "all",
        )?;
        let cpu = outcome.cpu_s;
        Ok((outcome, cpu))
    })?;
    let counted = (spec.latency_rate * spec.latency_seconds) as u64;
    // CPU per message over every message sent, the warm-up's included.
    let sent = (spec.latency_rate * (spec.latency_seconds + KAFKA_WARMUP_S)) as u64;
    let latency = paced_figure(
        &format!("{label} (paced, {counted} counted after {KAFKA_WARMUP_S} s)"),
        "all",
        spec.size,
        outcome.achieved,
        outcome.publish,
        cpu,
        sent,
    );

    let stats = Stats::new();
    let (_, cpu) = with_cpu(&nodes, || {
        let outcome = kafka::consume(&home, bootstrap, &topic, spec.messages, spec.size, &stats)?;
        Ok(((), outcome.cpu_s))
    })?;
    let consume = consume_figure("Kafka R=3 consume", &stats, cpu);

    let failover_topic = format!("failover-{suffix}");
    r3(&failover_topic, 1)?;
    let producer = kafka::FailoverProducer::start(&home, bootstrap, &failover_topic)?;
    let mut gaps = Vec::new();
    for round in 0..spec.failovers {
        std::thread::sleep(Duration::from_secs(2));
        let (leader, _) = kafka::leader(&home, bootstrap, &failover_topic, 0)?;
        let node = nodes
            .get((leader as usize).wrapping_sub(1))
            .with_context(|| format!("Kafka names node {leader} as the leader"))?;
        node.kill9()?;
        let killed = Instant::now();
        let gap = first_answer_after(&producer.answered, killed, Duration::from_secs(120))
            .with_context(|| format!("Kafka failover round {}", round + 1))?;
        println!(
            "Kafka failover {}: node {leader} SIGKILLed, acks=all answered again after {:.0} ms",
            round + 1,
            gap.as_secs_f64() * 1e3
        );
        gaps.push(gap.as_secs_f64() * 1e3);
        node.restart()?;
        eventually(Duration::from_secs(180), "3 copies in sync again", || {
            Ok(kafka::leader(&home, bootstrap, &failover_topic, 0)?.1 == 3)
        })?;
    }
    drop(producer);
    kafka::delete_topics(&home, bootstrap, &[&topic, &paced_topic, &failover_topic]);
    Ok(PeerFigures {
        system: Peer::Kafka,
        settings: format!(
            "Apache Kafka {} on three KRaft nodes (broker+controller each, 1 GiB heap), {} partitions of 3 copies, min.insync.replicas=2, no fsync of its own (log.flush defaults); Java client: acks=all, {} records a request and 5 ms linger unpaced, linger 0 paced (first {KAFKA_WARMUP_S} s not counted); failover: Kafka's default broker.session.timeout.ms (9 s) and producer retries",
            kafka::VERSION,
            spec.partitions,
            spec.batch
        ),
        throughput,
        latency,
        consume,
        failover: failover_figure(0, gaps),
    })
}

fn run_nats(spec: &PeerSpec) -> anyhow::Result<PeerFigures> {
    let nodes = nodes(spec, Peer::Nats)?;
    let servers = NATS_CLUSTER;
    let suffix = std::process::id();
    let label = "NATS R=3 (JetStream)";
    let window = 1000;

    let queue = format!("tp-r3-{suffix}");
    let stats = Stats::new();
    let ((), cpu) = with_cpu(&nodes, || {
        nats::produce_replicated(servers, &queue, spec.messages, spec.size, window, 3, &stats)?;
        Ok(((), 0.0))
    })?;
    println!("{label}: {}", stats.summary().line("sent"));
    let throughput = figure(label, &stats, cpu, spec.messages);

    let paced_queue = format!("lat-r3-{suffix}");
    let (outcome, cpu) = with_cpu(&nodes, || {
        let outcome = nats::paced(
            servers,
            &paced_queue,
            spec.latency_rate,
            spec.latency_seconds,
            0.0,
            spec.size,
            3,
        )?;
        Ok((outcome, 0.0))
    })?;
    let latency = paced_figure(
        &format!("{label} (paced)"),
        "majority",
        spec.size,
        outcome.achieved,
        outcome.publish,
        cpu,
        outcome.messages,
    );

    let stats = Stats::new();
    let ((), cpu) = with_cpu(&nodes, || {
        nats::consume(servers, &queue, spec.messages, &stats)?;
        Ok(((), 0.0))
    })?;
    let consume = consume_figure("NATS R=3 consume", &stats, cpu);

    let failover_queue = format!("failover-{suffix}");
    nats::create_stream(servers, &failover_queue, 3)?;
    let stop = Arc::new(AtomicBool::new(false));
    let answered: Arc<Answered> = Arc::default();
    let publisher = nats::failover_publisher(
        servers.to_string(),
        failover_queue.clone(),
        stop.clone(),
        answered.clone(),
    );
    let mut gaps = Vec::new();
    let result = (|| -> anyhow::Result<()> {
        for round in 0..spec.failovers {
            std::thread::sleep(Duration::from_secs(2));
            let (leader, _) = nats::stream_leader(servers, &failover_queue)?;
            let index: usize = leader
                .strip_prefix('n')
                .and_then(|n| n.parse().ok())
                .with_context(|| format!("NATS names {leader:?} as the stream's leader"))?;
            let node = nodes
                .get(index.wrapping_sub(1))
                .context("no such NATS server")?;
            node.kill9()?;
            let killed = Instant::now();
            let gap = first_answer_after(&answered, killed, Duration::from_secs(120))
                .with_context(|| format!("NATS failover round {}", round + 1))?;
            println!(
                "NATS failover {}: server {leader} SIGKILLed, a publish acknowledged again after {:.0} ms",
                round + 1,
                gap.as_secs_f64() * 1e3
            );
            gaps.push(gap.as_secs_f64() * 1e3);
            node.restart()?;
            eventually(Duration::from_secs(180), "3 copies current again", || {
                Ok(nats::stream_leader(servers, &failover_queue)?.1 == 3)
            })?;
        }
        Ok(())
    })();
    stop.store(true, Ordering::Relaxed);
    let joined = publisher
        .join()
        .map_err(|_| anyhow::anyhow!("the NATS failover publisher panicked"))?;
    result?;
    joined.context("the NATS failover publisher")?;
    nats::delete_queues(servers, &[&queue, &paced_queue, &failover_queue]);
    Ok(PeerFigures {
        system: Peer::Nats,
        settings: format!(
            "NATS JetStream (Debian nats-server) on three servers, one stream of 3 copies on file storage (acknowledged by a majority; files flushed every 2 min); async-nats: at most {window} publishes unacknowledged unpaced, pipelined paced; failover: JetStream's own Raft election"
        ),
        throughput,
        latency,
        consume,
        failover: failover_figure(0, gaps),
    })
}

/// Retries `check` (errors count as not yet) once a second until it holds.
fn eventually(
    limit: Duration,
    what: &str,
    check: impl Fn() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if check().unwrap_or(false) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    bail!("not {what} after {} s", limit.as_secs())
}

/// The side-by-side table: ringlog's configurations (when measured in the
/// same run) and each peer's, with ratios against ringlog R=3 acks=all.
pub fn table(ringlog: Option<&ReplicationOutcome>, peers: &[PeerFigures], rate: f64) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "| system | produce msg/s | CPU µs/msg | publish p50 / p99 / p99.9 ms at {rate:.0} msg/s | consume msg/s | leader SIGKILL → acked again (median / max ms) |"
    );
    let _ = writeln!(t, "|---|---:|---:|---:|---:|---:|");
    let ms = |f: &ProduceFigure| {
        f.latency.as_ref().map_or("-".to_string(), |l| {
            format!("{:.2} / {:.2} / {:.2}", l.p50_ms, l.p99_ms, l.p999_ms)
        })
    };
    if let Some(r) = ringlog {
        for (i, f) in r.throughput.iter().enumerate() {
            let paced = r.latency.get(i);
            let consume =
                (f.label == "R=3 acks=all").then(|| format!("{:.0}", r.consume.msgs_per_sec));
            let failover = (f.label == "R=3 acks=all").then(|| {
                format!(
                    "{:.0} / {:.0} (lease TTL {} s)",
                    r.failover.median_ms, r.failover.max_ms, r.failover.lease_ttl_s
                )
            });
            let _ = writeln!(
                t,
                "| ringlog {} | {:.0} | {:.2} | {} | {} | {} |",
                f.label,
                f.msgs_per_sec,
                f.cpu_us_per_msg,
                paced.map_or("-".into(), ms),
                consume.unwrap_or("-".into()),
                failover.unwrap_or("-".into())
            );
        }
    }
    for p in peers {
        let _ = writeln!(
            t,
            "| {} | {:.0} | {:.2} | {} | {:.0} | {:.0} / {:.0} |",
            p.throughput.label,
            p.throughput.msgs_per_sec,
            p.throughput.cpu_us_per_msg,
            ms(&p.latency),
            p.consume.msgs_per_sec,
            p.failover.median_ms,
            p.failover.max_ms
        );
    }
    if let Some(all) = ringlog.and_then(|r| r.throughput.iter().find(|f| f.label == "R=3 acks=all"))
    {
        let _ = writeln!(t);
        for p in peers {
            let _ = writeln!(
                t,
                "ringlog R=3 acks=all / {}: produce {:.1}×, CPU per message {:.1}× less, consume {:.1}×",
                p.throughput.label,
                all.msgs_per_sec / p.throughput.msgs_per_sec.max(1e-9),
                p.throughput.cpu_us_per_msg / all.cpu_us_per_msg.max(1e-9),
                ringlog.map_or(0.0, |r| r.consume.msgs_per_sec) / p.consume.msgs_per_sec.max(1e-9),
            );
        }
    }
    for p in peers {
        let _ = writeln!(t, "\n{}: {}", p.throughput.label, p.settings);
    }
    t
}
