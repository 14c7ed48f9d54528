//! `loadgen replication`: what three copies cost and how they behave, on a
//! local cluster loadgen starts itself (etcd and three brokers,
//! [`crate::cluster_process`]):
//!
//! 1. produce throughput, unpaced, for one copy with acks=written, three
//!    copies with acks=written and three with acks=all;
//! 2. publish latency (p50, p99, p99.9) of the same three at a fixed rate;
//! 3. consume throughput from the three-copy topic (its leaders);
//! 4. failover: the time from a leader's SIGKILL to an acks=all produce
//!    succeeding again, with the broker lease TTL given;
//! 5. catch-up: an empty follower (its data directory removed) fetching a
//!    partition of `catch_up_bytes` again, the leader's CPU per GB sent, and
//!    the leader's `fetch_zero_copy_bytes_total` against the bytes the
//!    follower appended — the follower traffic goes out with sendfile.
//!
//! Every figure comes with the CPU seconds of each broker and of loadgen,
//! so a reader sees the split: on a machine with fewer cores than processes
//! (three brokers and the load generator on two cores, here) throughput is
//! CPU-bound and the split says where the CPU went.

use crate::cluster_process::{process_cpu, ClusterBroker, LocalCluster};
use crate::stats::{LatencySummary, Stats};
use crate::workload::{self, ConsumeSpec, Length, ProduceSpec};
use anyhow::{bail, Context};
use protocol::client::{AckMode, Client, Producer, ProducerConfig, TopicSettings};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A run's settings.
#[derive(Debug, Clone)]
pub struct ReplicationSpec {
    /// Messages per throughput run.
    pub messages: u64,
    /// Payload bytes.
    pub size: usize,
    /// Messages per produce request.
    pub batch: usize,
    /// Messages per produce request of the latency runs (a partial batch
    /// leaves after 5 ms; 1 sends each message as it is due, pipelined).
    pub latency_batch: usize,
    /// Partitions of each produce topic (spread over the three brokers).
    pub partitions: u32,
    /// Messages per second of the latency runs.
    pub latency_rate: f64,
    /// Seconds each latency run lasts.
    pub latency_seconds: f64,
    /// The brokers' `etcd_lease_ttl_s`.
    pub lease_ttl_s: u64,
    /// Leader kills to time.
    pub failovers: u32,
    /// Bytes an empty follower fetches again.
    pub catch_up_bytes: u64,
    /// The message format of every topic the run creates (0: the
    /// brokers' default).
    pub message_format: u32,
    /// Format 2: number the batches (the producer's default there).
    pub idempotence: bool,
}

/// CPU seconds of each process over one run.
#[derive(Debug, Clone, Serialize)]
pub struct CpuSplit {
    /// Broker 1, 2, 3.
    pub brokers_s: Vec<f64>,
    /// The load generator.
    pub loadgen_s: f64,
}

impl CpuSplit {
    fn total(&self) -> f64 {
        self.brokers_s.iter().sum::<f64>() + self.loadgen_s
    }
}

/// One produce configuration's figures.
#[derive(Debug, Clone, Serialize)]
pub struct ProduceFigure {
    /// `R=3 acks=all`, …
    pub label: String,
    /// Copies per partition.
    pub replication_factor: u32,
    /// The ack mode.
    pub acks: String,
    /// Messages per second.
    pub msgs_per_sec: f64,
    /// Payload MB per second.
    pub mb_per_sec: f64,
    /// Publish latency (from each message's send to its acknowledgement).
    pub latency: Option<LatencySummary>,
    /// Where the CPU went.
    pub cpu: CpuSplit,
    /// All processes' CPU per message, in microseconds.
    pub cpu_us_per_msg: f64,
}

/// Consuming the three-copy topic.
#[derive(Debug, Clone, Serialize)]
pub struct ConsumeFigure {
    /// Messages per second.
    pub msgs_per_sec: f64,
    /// Payload MB per second.
    pub mb_per_sec: f64,
    /// Where the CPU went.
    pub cpu: CpuSplit,
    /// All processes' CPU per message, in microseconds.
    pub cpu_us_per_msg: f64,
}

/// Leader kills.
#[derive(Debug, Clone, Serialize)]
pub struct FailoverFigure {
    /// The brokers' lease TTL.
    pub lease_ttl_s: u64,
    /// From each SIGKILL to the first acks=all produce answered after it.
    pub gaps_ms: Vec<f64>,
    /// Their median.
    pub median_ms: f64,
    /// Their maximum.
    pub max_ms: f64,
}

/// An empty follower catching up.
#[derive(Debug, Clone, Serialize)]
pub struct CatchUpFigure {
    /// Bytes the follower appended.
    pub bytes: f64,
    /// From its restart to its return to the ISR.
    pub seconds: f64,
    /// Bytes per second, in MB.
    pub mb_per_sec: f64,
    /// The leader's CPU over the catch-up.
    pub leader_cpu_s: f64,
    /// ... per GB (10^9 bytes) sent.
    pub leader_cpu_s_per_gb: f64,
    /// The follower's CPU over the catch-up.
    pub follower_cpu_s: f64,
    /// Bytes the leader answered to replica fetches meanwhile.
    pub replica_fetch_bytes: f64,
    /// ... of the bytes it sent, those sent with sendfile,
    pub leader_zero_copy_bytes: f64,
    /// ... those of them read into the page cache first (sendfile too),
    pub leader_cold_bytes: f64,
    /// ... and those copied through userspace.
    pub leader_copied_bytes: f64,
}

/// Everything one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct ReplicationOutcome {
    /// Unpaced produce runs.
    pub throughput: Vec<ProduceFigure>,
    /// Paced produce runs (latency).
    pub latency: Vec<ProduceFigure>,
    /// Consuming the three-copy topic.
    pub consume: ConsumeFigure,
    /// Leader kills.
    pub failover: FailoverFigure,
    /// The empty follower.
    pub catch_up: CatchUpFigure,
}

/// Measures CPU of the cluster's brokers and of this process around `run`.
fn with_cpu<T>(
    cluster: &LocalCluster,
    run: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<(T, CpuSplit)> {
    let me = std::process::id();
    let before: Vec<Duration> = cluster.brokers.iter().map(|b| b.cpu()).collect();
    let own = process_cpu(me);
    let value = run()?;
    let brokers_s = cluster
        .brokers
        .iter()
        .zip(before)
        .map(|(b, was)| b.cpu().saturating_sub(was).as_secs_f64())
        .collect();
    let loadgen_s = process_cpu(me).saturating_sub(own).as_secs_f64();
    Ok((
        value,
        CpuSplit {
            brokers_s,
            loadgen_s,
        },
    ))
}

/// A produce topic's settings: the run's partitions and format.
fn layout(spec: &ReplicationSpec, factor: u32, write_caching: bool) -> Layout {
    Layout {
        partitions: spec.partitions,
        factor,
        segment_bytes: 0,
        write_caching,
        message_format: spec.message_format,
    }
}

/// A topic's settings for [`create`].
#[derive(Debug, Clone, Copy)]
struct Layout {
    partitions: u32,
    factor: u32,
    segment_bytes: u64,
    write_caching: bool,
    message_format: u32,
}

fn create(client: &Client, topic: &str, layout: Layout) -> anyhow::Result<()> {
    let Layout {
        partitions,
        factor,
        segment_bytes,
        write_caching,
        message_format,
    } = layout;
    client
        .create_topic(
            topic,
            partitions,
            &TopicSettings {
                replication_factor: factor,
                min_insync_replicas: if factor >= 3 { 2 } else { 1 },
                segment_bytes,
                write_caching,
                message_format,
                ..TopicSettings::default()
            },
        )
        .with_context(|| format!("creating {topic}"))?;
    wait_isr(client, topic, factor as usize, Duration::from_secs(60))
}

/// Waits until every partition of `topic` has `n` copies in sync.
fn wait_isr(client: &Client, topic: &str, n: usize, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let m = client.metadata(&[topic])?;
        if m.topics[0]
            .partitions
            .iter()
            .all(|p| p.isr.len().max(1) >= n)
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{topic}: not {n} copies in sync after {} s",
                timeout.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn acks_name(acks: AckMode) -> &'static str {
    match acks {
        AckMode::None => "none",
        AckMode::Written => "written",
        AckMode::Flushed => "flushed",
        _ => "all",
    }
}

/// The produce configurations: copies, acks, write caching (acks=all
/// counting written copies instead of flushed ones).
const CONFIGS: [(u32, AckMode, bool); 4] = [
    (1, AckMode::Written, false),
    (3, AckMode::Written, false),
    (3, AckMode::All, false),
    (3, AckMode::All, true),
];

/// A configuration's label part and topic suffix.
fn config_name(acks: AckMode, write_caching: bool) -> (String, String) {
    if write_caching {
        (
            format!("acks={} write_caching", acks_name(acks)),
            format!("{}-cached", acks_name(acks)),
        )
    } else {
        (
            format!("acks={}", acks_name(acks)),
            acks_name(acks).to_string(),
        )
    }
}

/// Runs every measurement.
pub fn run(spec: &ReplicationSpec) -> anyhow::Result<ReplicationOutcome> {
    let config = format!(
        "etcd_lease_ttl_s = {}\nreplica_lag_time_max_ms = {}\n",
        spec.lease_ttl_s,
        (spec.lease_ttl_s * 2_000).max(10_000)
    );
    let mut cluster = LocalCluster::start(3, &config)?;
    let addresses = cluster.addresses();
    let client = crate::connect(&addresses)?;
    let produce_run = |cluster: &LocalCluster,
                       topic: &str,
                       acks: AckMode,
                       length: Length,
                       rate: Option<f64>,
                       factor: u32,
                       write_caching: bool|
     -> anyhow::Result<ProduceFigure> {
        let stats = Stats::new();
        let batch = if rate.is_some() {
            spec.latency_batch
        } else {
            spec.batch
        };
        let produce = ProduceSpec {
            partitions: spec.partitions,
            rate,
            message_format: spec.message_format,
            idempotence: spec.idempotence,
            ..ProduceSpec::new(&addresses, topic, length, spec.size, batch, acks)
        };
        let (outcome, cpu) = with_cpu(cluster, || workload::produce(&produce, &stats))?;
        let summary = stats.summary();
        let label = format!("R={factor} {}", config_name(acks, write_caching).0);
        println!(
            "{label}{}: {}",
            if rate.is_some() { " (paced)" } else { "" },
            summary.line("sent")
        );
        Ok(ProduceFigure {
            label,
            replication_factor: factor,
            acks: acks_name(acks).to_string(),
            msgs_per_sec: summary.msgs_per_sec,
            mb_per_sec: summary.mb_per_sec,
            latency: summary.latency,
            cpu_us_per_msg: cpu.total() * 1e6 / outcome.messages.max(1) as f64,
            cpu,
        })
    };
    let mut throughput = Vec::new();
    let mut latency = Vec::new();
    for (factor, acks, caching) in CONFIGS {
        let suffix = config_name(acks, caching).1;
        let topic = format!("tp-r{factor}-{suffix}");
        create(&client, &topic, layout(spec, factor, caching))?;
        throughput.push(produce_run(
            &cluster,
            &topic,
            acks,
            Length::Messages(spec.messages),
            None,
            factor,
            caching,
        )?);
        let paced = format!("lat-r{factor}-{suffix}");
        create(&client, &paced, layout(spec, factor, caching))?;
        let n = (spec.latency_rate * spec.latency_seconds) as u64;
        latency.push(produce_run(
            &cluster,
            &paced,
            acks,
            Length::Messages(n),
            Some(spec.latency_rate),
            factor,
            caching,
        )?);
    }
    // Consuming what the acks=all run wrote, from its three leaders.
    let consume_stats = Stats::new();
    let consume_spec = ConsumeSpec {
        brokers: addresses.clone(),
        topic: "tp-r3-all".into(),
        length: Length::Messages(spec.messages),
        fetch_bytes: 1 << 20,
        consumers: spec.partitions as usize,
        prefetch: 0,
    };
    let ((), cpu) = with_cpu(&cluster, || {
        workload::consume(&consume_spec, &consume_stats)
    })?;
    let summary = consume_stats.summary();
    println!("R=3 consume: {}", summary.line("read"));
    let consume = ConsumeFigure {
        msgs_per_sec: summary.msgs_per_sec,
        mb_per_sec: summary.mb_per_sec,
        cpu_us_per_msg: cpu.total() * 1e6 / summary.messages.max(1) as f64,
        cpu,
    };
    let failover = failovers(&mut cluster, &client, spec)?;
    let catch_up = catch_up(&mut cluster, &client, spec)?;
    Ok(ReplicationOutcome {
        throughput,
        latency,
        consume,
        failover,
        catch_up,
    })
}

/// Kills the leader of a three-copy partition under a synchronous acks=all
/// producer, `spec.failovers` times, timing each gap.
fn failovers(
    cluster: &mut LocalCluster,
    client: &Client,
    spec: &ReplicationSpec,
) -> anyhow::Result<FailoverFigure> {
    create(
        client,
        "failover",
        Layout {
            partitions: 1,
            ..layout(spec, 3, false)
        },
    )?;
    // (sent, answered) of every produce that succeeded.
    let answered: Arc<Answered> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (addresses, answered, stop) = (cluster.addresses(), answered.clone(), stop.clone());
        std::thread::spawn(move || -> anyhow::Result<()> {
            let client = crate::connect(&addresses)?;
            let mut producer = Producer::new(
                &client,
                "failover",
                ProducerConfig {
                    acks: AckMode::All,
                    batch_messages: 1,
                    linger: Duration::ZERO,
                    ..ProducerConfig::default()
                },
            )?;
            while !stop.load(Ordering::Relaxed) {
                // A send or flush that fails while the leader is dead is
                // the gap being measured; the producer re-reads Metadata
                // on its next attempt.
                let started = Instant::now();
                let sent = producer
                    .send_to(0, None, b"failover")
                    .and_then(|_| producer.flush());
                if sent.is_ok() {
                    let mut a = answered.lock().unwrap_or_else(|p| p.into_inner());
                    a.push((started, Instant::now()));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Ok(())
        })
    };
    let mut gaps = Vec::new();
    for round in 0..spec.failovers {
        std::thread::sleep(Duration::from_secs(2));
        let leader = client.metadata(&["failover"])?.topics[0].partitions[0].broker_id;
        cluster.broker(leader).kill9();
        // After the reaping: a produce sent from now on cannot be answered
        // by the dead leader (one answered before it died may still be
        // read afterwards, and must not count).
        let killed = Instant::now();
        let gap = first_answer_after(&answered, killed, Duration::from_secs(60))
            .with_context(|| format!("round {}", round + 1))?;
        println!(
            "failover {}: broker {leader} SIGKILLed, acks=all answered again after {:.0} ms",
            round + 1,
            gap.as_secs_f64() * 1e3
        );
        gaps.push(gap.as_secs_f64() * 1e3);
        cluster.broker(leader).restart()?;
        cluster.wait_live(3)?;
        wait_isr(client, "failover", 3, Duration::from_secs(120))?;
    }
    stop.store(true, Ordering::Relaxed);
    producer
        .join()
        .map_err(|_| anyhow::anyhow!("the failover producer panicked"))?
        .context("the failover producer")?;
    Ok(failover_figure(spec.lease_ttl_s, gaps))
}

/// Every answered send of a failover producer: (sent, answered).
pub type Answered = Mutex<Vec<(Instant, Instant)>>;

/// The time from `killed` to the first answer to a send made after it (a
/// send answered before the kill may be read afterwards, and must not
/// count), waiting at most `limit`.
pub fn first_answer_after(
    answered: &Answered,
    killed: Instant,
    limit: Duration,
) -> anyhow::Result<Duration> {
    let deadline = killed + limit;
    loop {
        let first = answered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(sent, _)| *sent > killed)
            .map(|(_, at)| *at);
        if let Some(at) = first {
            return Ok(at.duration_since(killed));
        }
        if Instant::now() > deadline {
            bail!(
                "nothing answered within {} s of the leader's SIGKILL",
                limit.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The gaps (ms) of the leader kills, with their median and maximum.
pub fn failover_figure(lease_ttl_s: u64, gaps: Vec<f64>) -> FailoverFigure {
    let mut sorted = gaps.clone();
    sorted.sort_by(f64::total_cmp);
    FailoverFigure {
        lease_ttl_s,
        median_ms: sorted.get(sorted.len() / 2).copied().unwrap_or(0.0),
        max_ms: sorted.last().copied().unwrap_or(0.0),
        gaps_ms: gaps,
    }
}

/// Fills a three-copy partition with `spec.catch_up_bytes`, then has a
/// follower start over on an empty data directory.
fn catch_up(
    cluster: &mut LocalCluster,
    client: &Client,
    spec: &ReplicationSpec,
) -> anyhow::Result<CatchUpFigure> {
    // The earlier runs' topics go first: the emptied follower would fetch
    // them again too, and the figure is for one partition's bytes.
    for topic in client.metadata(&[])?.topics {
        client
            .delete_topic(&topic.name)
            .with_context(|| format!("deleting {}", topic.name))?;
    }
    create(
        client,
        "catchup",
        Layout {
            partitions: 1,
            segment_bytes: 256 << 20,
            ..layout(spec, 3, false)
        },
    )?;
    let size = 1_000usize;
    let stats = Stats::new();
    let fill = ProduceSpec::new(
        &cluster.addresses(),
        "catchup",
        Length::Messages(spec.catch_up_bytes / size as u64),
        size,
        200,
        AckMode::Written,
    );
    workload::produce(&fill, &stats).context("filling the catch-up partition")?;
    wait_isr(client, "catchup", 3, Duration::from_secs(300))?;
    let p = client.metadata(&["catchup"])?.topics[0].partitions[0].clone();
    let leader = p.broker_id;
    let follower = p
        .replicas
        .iter()
        .copied()
        .find(|b| *b != leader)
        .context("no follower")?;
    cluster.broker(follower).kill9();
    std::fs::remove_dir_all(&cluster.broker(follower).data_dir)?;
    // Its old registration must expire first (an empty data directory is
    // a new broker to the registry), and the leader must have taken it out
    // of the ISR, or the wait below would end at once.
    std::thread::sleep(Duration::from_secs(spec.lease_ttl_s + 1));
    let deadline = Instant::now() + Duration::from_secs(120);
    while client.metadata(&["catchup"])?.topics[0].partitions[0]
        .isr
        .contains(&follower)
    {
        if Instant::now() > deadline {
            bail!("broker {follower} was still in the ISR 120 s after its SIGKILL");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let sent_before = leader_sent(cluster.broker(leader))?;
    let leader_cpu = cluster.broker(leader).cpu();
    let started = Instant::now();
    cluster
        .broker(follower)
        .restart()
        .context("restarting the emptied follower")?;
    let follower_cpu_start = cluster.broker(follower).cpu();
    let deadline = started + Duration::from_secs(600);
    loop {
        let m = client.metadata(&["catchup"])?;
        if m.topics[0].partitions[0].isr.contains(&follower) {
            break;
        }
        if Instant::now() > deadline {
            bail!("the empty follower did not rejoin the ISR within 600 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let seconds = started.elapsed().as_secs_f64();
    let leader_cpu_s = cluster
        .broker(leader)
        .cpu()
        .saturating_sub(leader_cpu)
        .as_secs_f64();
    let follower_cpu_s = cluster
        .broker(follower)
        .cpu()
        .saturating_sub(follower_cpu_start)
        .as_secs_f64();
    // Brokers publish their counters once a second.
    std::thread::sleep(Duration::from_millis(1_200));
    let bytes = cluster
        .broker(follower)
        .metric("ringlog_replica_bytes_appended_total")?;
    let sent_after = leader_sent(cluster.broker(leader))?;
    let [replica_fetch_bytes, leader_zero_copy_bytes, leader_copied_bytes, leader_cold_bytes] =
        std::array::from_fn(|i| sent_after[i] - sent_before[i]);
    println!(
        "catch-up: broker {follower} fetched {:.0} MB again from broker {leader} in {seconds:.1} s ({:.0} MB/s); leader CPU {leader_cpu_s:.2} s ({:.2} s per GB); the leader answered {:.0} MB to replica fetches: {:.0} MB with sendfile ({:.0} MB of it read from disk first), {:.0} MB copied",
        bytes / 1e6,
        bytes / 1e6 / seconds,
        leader_cpu_s / (bytes / 1e9).max(1e-9),
        replica_fetch_bytes / 1e6,
        leader_zero_copy_bytes / 1e6,
        leader_cold_bytes / 1e6,
        leader_copied_bytes / 1e6,
    );
    Ok(CatchUpFigure {
        bytes,
        seconds,
        mb_per_sec: bytes / 1e6 / seconds,
        leader_cpu_s,
        leader_cpu_s_per_gb: leader_cpu_s / (bytes / 1e9).max(1e-9),
        follower_cpu_s,
        replica_fetch_bytes,
        leader_zero_copy_bytes,
        leader_cold_bytes,
        leader_copied_bytes,
    })
}

/// A leader's byte counters: answered to replica fetches, sent with
/// sendfile, of those read into the page cache first, copied through
/// userspace.
fn leader_sent(broker: &mut ClusterBroker) -> anyhow::Result<[f64; 4]> {
    Ok([
        broker.metric("ringlog_replica_fetch_bytes_total")?,
        broker.metric("ringlog_fetch_zero_copy_bytes_total")?,
        broker.metric("ringlog_fetch_copied_bytes_total")?,
        broker.metric("ringlog_fetch_cold_bytes_total")?,
    ])
}

/// The outcome as a Markdown table, with the CPU split.
pub fn table(outcome: &ReplicationOutcome) -> String {
    let mut out = String::new();
    let cpu = |c: &CpuSplit| {
        format!(
            "{} / {:.1}",
            c.brokers_s
                .iter()
                .map(|s| format!("{s:.1}"))
                .collect::<Vec<_>>()
                .join(" + "),
            c.loadgen_s
        )
    };
    out.push_str("| run | msg/s | MB/s | p50 ms | p99 ms | p99.9 ms | CPU s: brokers 1+2+3 / loadgen | CPU µs/msg |\n|---|---|---|---|---|---|---|---|\n");
    for (kind, figures) in [
        ("unpaced", &outcome.throughput),
        ("paced", &outcome.latency),
    ] {
        for f in figures.iter() {
            let (p50, p99, p999) = f
                .latency
                .as_ref()
                .map_or((0.0, 0.0, 0.0), |l| (l.p50_ms, l.p99_ms, l.p999_ms));
            out.push_str(&format!(
                "| {} ({kind}) | {:.0} | {:.1} | {p50:.2} | {p99:.2} | {p999:.2} | {} | {:.1} |\n",
                f.label,
                f.msgs_per_sec,
                f.mb_per_sec,
                cpu(&f.cpu),
                f.cpu_us_per_msg
            ));
        }
    }
    let c = &outcome.consume;
    out.push_str(&format!(
        "| R=3 consume | {:.0} | {:.1} | | | | {} | {:.1} |\n",
        c.msgs_per_sec,
        c.mb_per_sec,
        cpu(&c.cpu),
        c.cpu_us_per_msg
    ));
    let f = &outcome.failover;
    out.push_str(&format!(
        "\nFailover (lease TTL {} s): SIGKILL of the leader to acks=all answered again: {} ms (median {:.0}, max {:.0}).\n",
        f.lease_ttl_s,
        f.gaps_ms.iter().map(|g| format!("{g:.0}")).collect::<Vec<_>>().join(", "),
        f.median_ms,
        f.max_ms
    ));
    let k = &outcome.catch_up;
    out.push_str(&format!(
        "\nCatch-up: an empty follower fetched {:.0} MB in {:.1} s ({:.0} MB/s); leader CPU {:.2} s ({:.2} s per GB), follower CPU {:.2} s. The leader answered {:.0} MB to replica fetches meanwhile: {:.0} MB with sendfile ({:.0} MB of it read into the page cache first), {:.0} MB copied through userspace.\n",
        k.bytes / 1e6,
        k.seconds,
        k.mb_per_sec,
        k.leader_cpu_s,
        k.leader_cpu_s_per_gb,
        k.follower_cpu_s,
        k.replica_fetch_bytes / 1e6,
        k.leader_zero_copy_bytes / 1e6,
        k.leader_cold_bytes / 1e6,
        k.leader_copied_bytes / 1e6,
    ));
    out
}
