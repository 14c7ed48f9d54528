//! `loadgen sustained`: produce past the page cache (issue 51, item 1).
//!
//! The paper's producer figures are bursts that fit in memory; a
//! deployment writes for hours. One run measures, on the same disk and in
//! the same hour (a cloud disk's rate moves by 2× between hours):
//!
//! 1. the disk's own rates with `dd` in the directory the brokers write
//!    to: 1 MiB blocks with `oflag=direct` (O_DIRECT: what the device
//!    takes) and buffered with `conv=fdatasync` (through the page cache);
//! 2. ringlog: a standalone broker loadgen starts, one partition, as fast
//!    as one producer goes (`--batch` messages a request, acks none) for
//!    `--seconds`; the topic keeps `--retention-bytes`, so the run deletes
//!    segments as Kafka's retention would and the disk never fills;
//! 3. Kafka's own `ProducerPerformance` (acks=0, 1 MiB batches, a 5 ms
//!    linger) for the same time, against that broker's Kafka listener and
//!    against Kafka 4.4 (`deploy/peers.sh start kafka`): the same client on
//!    both sides, since on two cores the client is half the machine;
//! 4. `dd` again, so a disk that changed during the run shows.
//!
//! ringlog runs twice: alone, then with a consumer that starts a second
//! after the producer and reads the partition as it grows (sendfile from
//! what was just written), to show whether it keeps up.
//!
//! The first `--warmup` seconds are not counted (the page cache takes the
//! start at memory speed). Printed: each rate, sustained ÷ O_DIRECT and
//! ringlog ÷ Kafka, CPU per message of each broker process; written: a
//! table, the JSON and a chart of the rate over time.

use crate::broker_process::LocalBroker;
use crate::chart::{self, Series};
use crate::cluster_process::process_cpu;
use crate::isolation::{self, Isolation, QuietSpec};
use crate::kafka_perf::tools::KafkaTools;
use crate::stats::{measure, Stats};
use crate::workload::{self, ConsumeSpec, Length, ProduceSpec};
use anyhow::{bail, Context};
use protocol::client::{AckMode, TopicSettings};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// What `loadgen sustained` runs.
#[derive(Debug, Clone)]
pub struct SustainedSpec {
    /// Seconds each producer runs, the warm-up included.
    pub seconds: f64,
    /// Seconds at the start not counted.
    pub warmup: f64,
    /// Payload bytes per message.
    pub size: usize,
    /// Messages per ringlog produce request.
    pub batch: usize,
    /// The ringlog broker's shards.
    pub shards: usize,
    /// Bytes each partition keeps (segments past it are deleted).
    pub retention_bytes: u64,
    /// Bytes each `dd` writes.
    pub dd_bytes: u64,
    /// Kafka's jars (`deploy/peers.sh install kafka`) and its address;
    /// `None`: ringlog alone.
    pub kafka: Option<(PathBuf, String, PathBuf)>,
    /// Where the table, JSON and chart go.
    pub out: PathBuf,
    /// The quiet topic beside a hot one; `None`: not measured.
    pub isolation: Option<QuietSpec>,
}

/// One system's run.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// "ringlog" or "kafka 4.4".
    pub system: String,
    /// Messages/s after the warm-up.
    pub sustained: f64,
    /// Messages/s during the warm-up (the burst).
    pub burst: f64,
    /// The broker process's CPU per message over the whole run, µs.
    pub broker_cpu_us: f64,
    /// (seconds, messages/s) over the run.
    pub series: Vec<(f64, f64)>,
    /// A consumer that started a second after the producer, if one ran.
    pub tail: Option<Tail>,
}

/// A consumer reading the partition while it is produced (issue 51,
/// item 3: a consumer tailing 1 s behind keeps up).
#[derive(Debug, Clone, Serialize)]
pub struct Tail {
    /// Messages/s it read after the warm-up.
    pub consumed: f64,
    /// How far behind the producer's last message it was when it stopped
    /// (as long after the producer ended as it started after it), in
    /// seconds of the producer's sustained rate.
    pub behind_s: f64,
}

/// The whole measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// `dd oflag=direct` bytes/s, before and after the runs.
    pub dd_direct: Vec<f64>,
    /// `dd conv=fdatasync` bytes/s, before and after.
    pub dd_buffered: Vec<f64>,
    /// Stored bytes per message (payload and framing, ringlog's).
    pub payload_bytes: usize,
    /// Each system's run.
    pub runs: Vec<Run>,
    /// The quiet topic's latency on each system.
    pub isolation: Vec<Isolation>,
}

/// Runs everything `spec` asks for.
pub fn run(spec: &SustainedSpec) -> anyhow::Result<Outcome> {
    std::fs::create_dir_all(&spec.out)
        .with_context(|| format!("creating {}", spec.out.display()))?;
    if let Some((home, address, _)) = &spec.kafka {
        if !crate::peers::kafka::reachable(address) {
            bail!(
                "Kafka is not reachable at {address}: start it with `deploy/peers.sh start kafka`, or pass --no-kafka"
            );
        }
        KafkaTools::new(home, &spec.out)?;
    }
    let toml = "retention_check_ms = 1000\nkafka_listen = \"127.0.0.1:0\"\n";
    let broker = LocalBroker::start_with(spec.shards, "sustained", toml, |_| Ok(()))?;
    let mut outcome = Outcome {
        dd_direct: Vec::new(),
        dd_buffered: Vec::new(),
        payload_bytes: spec.size,
        runs: Vec::new(),
        isolation: Vec::new(),
    };
    disk_rates(spec, &broker.data_dir, &mut outcome)?;
    outcome.runs.push(ringlog(spec, &broker, false)?);
    outcome.runs.push(ringlog(spec, &broker, true)?);
    if let Some(quiet) = &spec.isolation {
        let shards = spec.shards as u32;
        outcome
            .isolation
            .push(isolation::ringlog(&broker.brokers, shards, quiet)?);
    }
    if let Some((home, address, peers_dir)) = &spec.kafka {
        let tools = KafkaTools::new(home, &spec.out)?;
        let listener = broker
            .kafka
            .clone()
            .context("the broker opened no Kafka listener")?;
        outcome.runs.push(kafka_client(
            spec,
            &tools,
            "ringlog, Kafka's producer",
            &listener,
            broker.pid(),
        )?);
        drop(broker);
        outcome.runs.push(kafka_client(
            spec,
            &tools,
            "kafka 4.4, Kafka's producer",
            address,
            kafka_pid(peers_dir)?,
        )?);
        if let Some(quiet) = &spec.isolation {
            outcome
                .isolation
                .push(isolation::kafka(home, &spec.out, address, quiet)?);
        }
    }
    let dd_dir = std::env::temp_dir().join(format!("ringlog-sustained-dd-{}", std::process::id()));
    std::fs::create_dir_all(&dd_dir)?;
    let after = disk_rates(spec, &dd_dir, &mut outcome);
    let _ = std::fs::remove_dir_all(&dd_dir);
    after?;
    Ok(outcome)
}

/// Appends one O_DIRECT and one buffered `dd` rate measured in `dir`.
fn disk_rates(spec: &SustainedSpec, dir: &Path, outcome: &mut Outcome) -> anyhow::Result<()> {
    outcome
        .dd_direct
        .push(dd(dir, spec.dd_bytes, "oflag=direct")?);
    outcome
        .dd_buffered
        .push(dd(dir, spec.dd_bytes, "conv=fdatasync")?);
    Ok(())
}

/// `dd if=/dev/zero bs=1M` of `bytes` into a file of `dir` with `flag`;
/// bytes per second, from dd's own count and time.
fn dd(dir: &Path, bytes: u64, flag: &str) -> anyhow::Result<f64> {
    let file = dir.join("dd.bin");
    let output = Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", file.display()))
        .arg("bs=1M")
        .arg(format!("count={}", (bytes >> 20).max(1)))
        .arg(flag)
        .output()
        .context("running dd")?;
    let _ = std::fs::remove_file(&file);
    let text = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        bail!("dd {flag} failed: {}", text.trim());
    }
    dd_rate(&text).with_context(|| format!("no rate in dd's report: {text:?}"))
}

/// Bytes per second from dd's last line (`N bytes (…) copied, S s, R MB/s`).
fn dd_rate(report: &str) -> Option<f64> {
    let line = report.lines().rev().find(|l| l.contains(" bytes "))?;
    let bytes: f64 = line.split_whitespace().next()?.parse().ok()?;
    let seconds: f64 = line
        .split(", ")
        .find(|part| part.ends_with(" s"))?
        .trim_end_matches(" s")
        .trim()
        .parse()
        .ok()?;
    (seconds > 0.0).then(|| bytes / seconds)
}

/// Messages/s after and during the warm-up from a (seconds, rate) series
/// whose points each cover the time since the one before.
fn split_rates(series: &[(f64, f64)], warmup: f64) -> (f64, f64) {
    let (mut after, mut after_s, mut before, mut before_s) = (0.0, 0.0, 0.0, 0.0);
    let mut last = 0.0;
    for &(t, rate) in series {
        let dt = t - last;
        last = t;
        if t > warmup {
            after += rate * dt;
            after_s += dt;
        } else {
            before += rate * dt;
            before_s += dt;
        }
    }
    let per_s = |n: f64, s: f64| if s > 0.0 { n / s } else { 0.0 };
    (per_s(after, after_s), per_s(before, before_s))
}

/// How long after the producer the tailing consumer starts.
const TAIL_DELAY: Duration = Duration::from_secs(1);

fn ringlog(spec: &SustainedSpec, broker: &LocalBroker, tail: bool) -> anyhow::Result<Run> {
    let topic = if tail { "tailed" } else { "sustained" };
    let client = crate::connect(&broker.brokers)?;
    let settings = TopicSettings {
        retention_bytes: spec.retention_bytes,
        segment_bytes: 1 << 30,
        ..TopicSettings::default()
    };
    client.create_topic(topic, 1, &settings)?;
    let produce = ProduceSpec::new(
        &broker.brokers,
        topic,
        Length::Duration(Duration::from_secs_f64(spec.seconds)),
        spec.size,
        spec.batch,
        AckMode::None,
    );
    let consume = ConsumeSpec {
        brokers: broker.brokers.clone(),
        topic: topic.into(),
        length: Length::Duration(Duration::from_secs_f64(spec.seconds)),
        fetch_bytes: 1 << 20,
        consumers: 1,
        prefetch: 0,
    };
    let consumed = Stats::new();
    let consumer = tail.then(|| {
        let consumed = consumed.clone();
        std::thread::spawn(move || {
            std::thread::sleep(TAIL_DELAY);
            workload::consume(&consume, &consumed)
        })
    });
    let cpu = process_cpu(broker.pid());
    let (outcome, summary) = measure("ringlog", "sent", None, 0.0, |stats| {
        workload::produce(&produce, stats)
    })?;
    let cpu = process_cpu(broker.pid()).saturating_sub(cpu);
    let (sustained, burst) = split_rates(&summary.series, spec.warmup);
    let tail = match consumer {
        Some(consumer) => {
            consumer
                .join()
                .map_err(|_| anyhow::anyhow!("the tailing consumer panicked"))??;
            let read = consumed.summary();
            let behind = outcome.messages.saturating_sub(read.messages) as f64;
            Some(Tail {
                consumed: split_rates(&read.series, spec.warmup).0,
                behind_s: behind / sustained.max(1.0),
            })
        }
        None => None,
    };
    Ok(Run {
        system: if tail.is_some() {
            "ringlog, its producer, a consumer 1 s behind".into()
        } else {
            "ringlog, its producer".into()
        },
        sustained,
        burst,
        broker_cpu_us: cpu.as_secs_f64() * 1e6 / outcome.messages.max(1) as f64,
        series: summary.series,
        tail,
    })
}

/// Kafka's own producer (`ProducerPerformance`: acks=0, 1 MiB batches, a
/// 5 ms linger) against `bootstrap`, whose broker process is `pid`.
fn kafka_client(
    spec: &SustainedSpec,
    tools: &KafkaTools,
    system: &str,
    bootstrap: &str,
    pid: u32,
) -> anyhow::Result<Run> {
    let topic = format!("sustained-{}", std::process::id());
    tools.create_topic(
        bootstrap,
        &topic,
        1,
        1,
        &[
            format!("retention.bytes={}", spec.retention_bytes),
            format!("segment.bytes={}", 1u64 << 30),
        ],
    )?;
    let cpu = process_cpu(pid);
    let series = tools.produce_for(
        &topic,
        spec.seconds,
        spec.size,
        &crate::kafka_perf::tools::fastest_producer(bootstrap),
    );
    let cpu = process_cpu(pid).saturating_sub(cpu);
    let _ = tools.delete_topic(bootstrap, &topic);
    let series = series?;
    let (sustained, burst) = split_rates(&series, spec.warmup);
    let messages: f64 = series.iter().map(|&(_, rate)| rate * 5.0).sum();
    Ok(Run {
        system: system.into(),
        sustained,
        burst,
        broker_cpu_us: cpu.as_secs_f64() * 1e6 / messages.max(1.0),
        series,
        tail: None,
    })
}

/// The pid `deploy/peers.sh` wrote for its single Kafka node.
fn kafka_pid(peers_dir: &Path) -> anyhow::Result<u32> {
    let pid_file = peers_dir.join("kafka").join("node-1").join("kafka.pid");
    std::fs::read_to_string(&pid_file)
        .with_context(|| format!("reading {}", pid_file.display()))?
        .trim()
        .parse()
        .with_context(|| format!("{} holds no pid", pid_file.display()))
}

/// The run as a Markdown table, with the ratios the issue asks for.
pub fn table(spec: &SustainedSpec, outcome: &Outcome) -> String {
    let mb = |bytes_per_s: f64| bytes_per_s / 1e6;
    let list = |rates: &[f64]| {
        rates
            .iter()
            .map(|r| format!("{:.0}", mb(*r)))
            .collect::<Vec<_>>()
            .join(" · ")
    };
    let direct = outcome
        .dd_direct
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min);
    // Payload bytes only: each format adds its own framing on disk.
    let payload = spec.size as f64;
    let mut out = format!(
        "{} s a run, first {} s not counted; {} B messages, one partition, acks none\n\n\
         disk: dd O_DIRECT {} MB/s, dd buffered + fdatasync {} MB/s (before · after)\n\n\
         | system, client | sustained msg/s | payload MB/s | burst msg/s | payload ÷ dd O_DIRECT (the lower) | broker CPU µs/msg |\n|---|---|---|---|---|---|\n",
        spec.seconds,
        spec.warmup,
        spec.size,
        list(&outcome.dd_direct),
        list(&outcome.dd_buffered),
    );
    for run in &outcome.runs {
        out.push_str(&format!(
            "| {} | {} | {:.0} | {} | {:.2} | {:.3} |\n",
            run.system,
            chart::format_number(run.sustained.round()),
            mb(run.sustained * payload),
            chart::format_number(run.burst.round()),
            run.sustained * payload / direct,
            run.broker_cpu_us,
        ));
    }
    if let Some(quiet) = &spec.isolation {
        out.push('\n');
        out.push_str(&isolation::table(quiet, &outcome.isolation));
    }
    for run in &outcome.runs {
        if let Some(tail) = &run.tail {
            out.push_str(&format!(
                "\nThe consumer 1 s behind read {} msg/s after the warm-up and ended {:.2} s of production behind.\n",
                chart::format_number(tail.consumed.round()),
                tail.behind_s
            ));
        }
    }
    if let [native, _, same_client, kafka] = outcome.runs.as_slice() {
        out.push_str(&format!(
            "\nringlog ÷ Kafka sustained: {:.2}× (ringlog's producer), {:.2}× (Kafka's producer on both)\n",
            native.sustained / kafka.sustained.max(1.0),
            same_client.sustained / kafka.sustained.max(1.0)
        ));
    }
    out
}

/// The chart of every run's rate over time.
pub fn chart(outcome: &Outcome) -> String {
    let series: Vec<Series> = outcome
        .runs
        .iter()
        .map(|run| Series {
            name: run.system.clone(),
            points: run.series.clone(),
        })
        .collect();
    chart::lines(
        "Produce past the page cache (one partition, acks none)",
        "seconds",
        "messages/s",
        &series,
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dds_report_gives_bytes_per_second() {
        let report = "4000+0 records in\n4000+0 records out\n\
                      4194304000 bytes (4.2 GB, 3.9 GiB) copied, 3.68919 s, 1.1 GB/s\n";
        let rate = dd_rate(report).unwrap();
        assert!((rate - 4194304000.0 / 3.68919).abs() < 1.0, "{rate}");
        assert_eq!(dd_rate("dd: error writing"), None);
    }

    #[test]
    fn the_warm_up_is_split_off_by_time_covered() {
        // 2 s at 10/s, then 1 s at 4/s, then 2 s at 1/s.
        let series = [(1.0, 10.0), (2.0, 10.0), (3.0, 4.0), (5.0, 1.0)];
        let (after, before) = split_rates(&series, 2.0);
        assert_eq!(before, 10.0);
        assert!((after - 6.0 / 3.0).abs() < 1e-9, "{after}");
    }
}
