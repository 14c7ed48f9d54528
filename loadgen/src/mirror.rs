//! `loadgen mirror`: the figures of issue 21, on two standalone brokers
//! this starts itself (a source and a target "datacenter" on one machine).
//!
//! 1. The source's own consume rate: one consumer reads a preloaded topic.
//! 2. The mirror's rate: `ringlog mirror --exit-at-end` copies the same
//!    topic into the target. Two clocks: the copy's own, from its first
//!    read to its last append (the mirror prints it; the consumer's clock
//!    likewise starts once it is connected), and the whole run's, from the
//!    process's start to its exit. CPU of the mirror and both brokers per
//!    message.
//! 3. End-to-end latency from a produce in the source to its visibility in
//!    the target, through a running mirror, at fractions of the mirror's
//!    rate (the paper's pipeline took about 10 s on average).

use crate::broker_process::{ringlog_binary, LocalBroker};
use crate::cluster_process::process_cpu;
use crate::e2e::{self, E2eSpec};
use crate::stats::{LatencySummary, Stats};
use crate::workload::{self, ConsumeSpec, Length, ProduceSpec};
use anyhow::Context;
use protocol::client::AckMode;
use serde::Serialize;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone)]
pub struct MirrorSpec {
    /// Messages preloaded for the rate runs.
    pub messages: u64,
    /// Payload bytes.
    pub size: usize,
    /// Partitions.
    pub partitions: u32,
    /// Seconds of each latency run.
    pub latency_seconds: f64,
    /// Fractions of the mirror's rate the latency runs produce at.
    pub loads: Vec<f64>,
    /// Times each rate run is repeated (interleaved); the medians count.
    pub rounds: usize,
}

/// A rate run's figures.
#[derive(Debug, Clone, Serialize)]
pub struct RateFigure {
    /// What ran.
    pub label: String,
    /// Messages per second.
    pub msgs_per_sec: f64,
    /// Payload MB per second.
    pub mb_per_sec: f64,
    /// CPU seconds: source broker, target broker, the reader (loadgen or
    /// the mirror process).
    pub cpu_s: [f64; 3],
    /// All three's CPU per message, µs.
    pub cpu_us_per_msg: f64,
    /// Every round's msg/s (the figure above is their median's run).
    pub rounds_msgs_per_sec: Vec<f64>,
}

/// A latency run's figures.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyFigure {
    /// The fraction of the mirror's rate.
    pub load: f64,
    /// Messages per second produced.
    pub rate: f64,
    /// Messages that reached the target's consumer.
    pub received: u64,
    /// Lost, duplicated or out of order at the target.
    pub anomalies: u64,
    /// Produce in the source to visibility in the target.
    pub latency: Option<LatencySummary>,
}

/// Everything `loadgen mirror` measured.
#[derive(Debug, Clone, Serialize)]
pub struct MirrorOutcome {
    /// The settings.
    pub messages: u64,
    /// Payload bytes.
    pub size: usize,
    /// Partitions.
    pub partitions: u32,
    /// The source's consume rate, the mirror's copy rate, and the
    /// mirror's rate over its whole run.
    pub rates: Vec<RateFigure>,
    /// The mirror's rate over the source's consume rate.
    pub mirror_share: f64,
    /// One per load.
    pub latency: Vec<LatencyFigure>,
}

fn mirror_command(source: &LocalBroker, target: &LocalBroker, topics: &str) -> Command {
    let mut command = Command::new(ringlog_binary());
    command
        .args([
            "--brokers",
            &target.brokers,
            "mirror",
            "--from",
            &source.brokers,
        ])
        .args(["--topics", topics, "--name", "loadgen"])
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    command
}

/// Waits for `child` and returns its CPU time (user + system), from
/// wait4(2)'s resource usage: a finished process has no /proc entry left.
fn wait_with_cpu(child: std::process::Child) -> anyhow::Result<(i32, Duration)> {
    let pid = child.id() as libc::pid_t;
    std::mem::forget(child); // reaped here, not by Child's drop
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, writing into the locals above.
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    anyhow::ensure!(reaped == pid, "wait4: {}", std::io::Error::last_os_error());
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    Ok((code, time(usage.ru_utime) + time(usage.ru_stime)))
}

fn cpu_of(source: &LocalBroker, target: &LocalBroker) -> (Duration, Duration, Duration) {
    (
        process_cpu(source.pid()),
        process_cpu(target.pid()),
        process_cpu(std::process::id()),
    )
}

/// One run of the source's own consumer over the preloaded topic.
fn consume_round(
    spec: &MirrorSpec,
    source: &LocalBroker,
    target: &LocalBroker,
    topic: &str,
) -> anyhow::Result<RateFigure> {
    let stats = Stats::new();
    let before = cpu_of(source, target);
    workload::consume(
        &ConsumeSpec {
            brokers: source.brokers.clone(),
            topic: topic.to_string(),
            length: Length::Messages(spec.messages),
            fetch_bytes: 1 << 20,
            consumers: 1,
            prefetch: 0,
        },
        &stats,
    )?;
    let after = cpu_of(source, target);
    let summary = stats.summary();
    let cpu_s = [
        after.0.saturating_sub(before.0).as_secs_f64(),
        after.1.saturating_sub(before.1).as_secs_f64(),
        after.2.saturating_sub(before.2).as_secs_f64(),
    ];
    println!("source consume: {}", summary.line("read"));
    Ok(RateFigure {
        label: "source consumer (1 thread, 1 MiB fetches)".into(),
        msgs_per_sec: summary.msgs_per_sec,
        mb_per_sec: summary.mb_per_sec,
        cpu_us_per_msg: cpu_s.iter().sum::<f64>() * 1e6 / spec.messages.max(1) as f64,
        cpu_s,
        rounds_msgs_per_sec: Vec::new(),
    })
}

/// One `ringlog mirror --exit-at-end` of the preloaded topic into an empty
/// target: the copy's rate from its first read to its last append (as the
/// consumer's clock starts once it is connected), then the whole run's,
/// from the process's start to its exit (topic creation and the end's
/// detection included).
fn mirror_round(
    spec: &MirrorSpec,
    source: &LocalBroker,
    target: &LocalBroker,
    topic: &str,
) -> anyhow::Result<(RateFigure, RateFigure)> {
    let before = cpu_of(source, target);
    let started = Instant::now();
    let mut child = mirror_command(source, target, topic)
        .arg("--exit-at-end")
        .stdout(Stdio::piped())
        .spawn()
        .context("starting ringlog mirror")?;
    let mut said = String::new();
    if let Some(mut out) = child.stdout.take() {
        std::io::Read::read_to_string(&mut out, &mut said)
            .context("reading the mirror's output")?;
    }
    let (code, mirror_cpu) = wait_with_cpu(child)?;
    anyhow::ensure!(code == 0, "ringlog mirror exited with {code}");
    let elapsed = started.elapsed().as_secs_f64();
    let after = cpu_of(source, target);
    let copying = copy_seconds(&said)
        .with_context(|| format!("the mirror did not say how long its copy took: {said:?}"))?;
    let bytes = spec.messages as f64 * spec.size as f64;
    let cpu_s = [
        after.0.saturating_sub(before.0).as_secs_f64(),
        after.1.saturating_sub(before.1).as_secs_f64(),
        mirror_cpu.as_secs_f64(),
    ];
    println!(
        "mirror: {} messages copied in {copying:.3} s ({:.0} msg/s), {elapsed:.3} s from its start to its exit ({:.0} msg/s)",
        spec.messages,
        spec.messages as f64 / copying,
        spec.messages as f64 / elapsed,
    );
    let figure = |label: &str, seconds: f64| RateFigure {
        label: label.into(),
        msgs_per_sec: spec.messages as f64 / seconds,
        mb_per_sec: bytes / 1e6 / seconds,
        cpu_us_per_msg: cpu_s.iter().sum::<f64>() * 1e6 / spec.messages.max(1) as f64,
        cpu_s,
        rounds_msgs_per_sec: Vec::new(),
    };
    Ok((
        figure(
            "ringlog mirror, the copy (first read to last append, acks=written)",
            copying,
        ),
        figure(
            "ringlog mirror, the whole run (process start to exit)",
            elapsed,
        ),
    ))
}

/// The seconds in the mirror's closing line, "copied N messages (B bytes)
/// in S s from the first read to the last append: ...".
fn copy_seconds(said: &str) -> Option<f64> {
    let line = said.lines().rev().find(|l| l.starts_with("copied "))?;
    let (before, _) = line.split_once(" s from the first read")?;
    let seconds: f64 = before.rsplit(' ').next()?.parse().ok()?;
    (seconds > 0.0).then_some(seconds)
}

/// Runs the three measurements.
pub fn run(spec: &MirrorSpec) -> anyhow::Result<MirrorOutcome> {
    let source = LocalBroker::start_named(1, "source")?;
    let target = LocalBroker::start_named(1, "target")?;
    let topic = "mirror-load";
    let produce = ProduceSpec {
        partitions: spec.partitions,
        ..ProduceSpec::new(
            &source.brokers,
            topic,
            Length::Messages(spec.messages),
            spec.size,
            1000,
            AckMode::Flushed,
        )
    };
    workload::produce(&produce, &Stats::new()).context("preloading the source")?;
    let mut rates = Vec::new();

    let mut consumes: Vec<RateFigure> = Vec::new();
    let mut mirrors: Vec<RateFigure> = Vec::new();
    let mut whole_runs: Vec<RateFigure> = Vec::new();
    let admin = crate::connect(&target.brokers)?;
    for round in 0..spec.rounds.max(1) {
        consumes.push(consume_round(spec, &source, &target, topic)?);
        if round > 0 {
            // A fresh copy each round: the mirror creates it again.
            admin.delete_topic(topic)?;
        }
        let (copy, whole) = mirror_round(spec, &source, &target, topic)?;
        mirrors.push(copy);
        whole_runs.push(whole);
    }
    let median = |runs: &mut Vec<RateFigure>| -> RateFigure {
        let all: Vec<f64> = runs.iter().map(|r| r.msgs_per_sec).collect();
        runs.sort_by(|a, b| a.msgs_per_sec.total_cmp(&b.msgs_per_sec));
        let mut figure = runs[runs.len() / 2].clone();
        figure.rounds_msgs_per_sec = all;
        figure
    };
    rates.push(median(&mut consumes));
    rates.push(median(&mut mirrors));
    rates.push(median(&mut whole_runs));
    let mirror_rate = rates[1].msgs_per_sec;
    let client = crate::connect(&target.brokers)?;
    let source_client = crate::connect(&source.brokers)?;
    // The copy's appends are acknowledged once written; they are visible
    // once the target's flush policy has flushed them.
    for p in 0..spec.partitions {
        let end = |c: &protocol::client::Client| {
            c.list_offsets(topic, p, protocol::client::OffsetSpec::Latest, 0)
                .map(|o| o.0)
        };
        let want = end(&source_client)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while end(&client)? != want {
            anyhow::ensure!(
                Instant::now() < deadline,
                "partition {p}: the copy does not end where the source does ({want})"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let mirror_share = mirror_rate / rates[0].msgs_per_sec.max(1e-9);

    // 3. Latency through a running mirror.
    let mut latency = Vec::new();
    for &load in &spec.loads {
        let name = format!("mirror-e2e-{}", (load * 100.0).round() as u32);
        workload::ensure_topic(&source_client, &name, spec.partitions, 0)?;
        let mut running = mirror_command(&source, &target, &name)
            .stderr(Stdio::null())
            .spawn()
            .context("starting ringlog mirror")?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while workload::existing_partitions(&client, &name)?.is_none() {
            anyhow::ensure!(
                Instant::now() < deadline,
                "the mirror did not create {name}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let rate = (mirror_rate * load).max(1.0);
        let stats = Stats::new();
        let outcome = e2e::run(
            &E2eSpec {
                brokers: source.brokers.clone(),
                consume_from: Some(target.brokers.clone()),
                topic: name.clone(),
                partitions: spec.partitions,
                length: Length::Duration(Duration::from_secs_f64(spec.latency_seconds)),
                size: spec.size.max(e2e::STAMP_BYTES),
                batch: 100,
                acks: AckMode::Written,
                rate: Some(rate),
                producers: 1,
                consumers: 1,
                inject_loss: None,
                inject_duplicate: None,
                grace: Duration::from_secs(10),
                warmup: Duration::from_secs(1),
            },
            &stats,
        );
        let _ = running.kill();
        let _ = running.wait();
        let outcome = outcome?;
        let summary = stats.summary();
        let received = outcome.checks.iter().map(|p| p.received).sum();
        let anomalies = outcome
            .checks
            .iter()
            .map(|p| p.lost + p.duplicated + p.out_of_order)
            .sum();
        println!(
            "latency at {:.0}% ({rate:.0} msg/s): {}",
            load * 100.0,
            summary.line("e2e")
        );
        latency.push(LatencyFigure {
            load,
            rate,
            received,
            anomalies,
            latency: summary.latency,
        });
    }
    Ok(MirrorOutcome {
        messages: spec.messages,
        size: spec.size,
        partitions: spec.partitions,
        rates,
        mirror_share,
        latency,
    })
}

/// The figures as a Markdown table.
pub fn table(outcome: &MirrorOutcome) -> String {
    let mut out = String::new();
    out.push_str("| run | msg/s (median) | every round | MB/s | CPU s source / target / reader | CPU µs/msg |\n|---|---|---|---|---|---|\n");
    for r in &outcome.rates {
        let rounds: Vec<String> = r
            .rounds_msgs_per_sec
            .iter()
            .map(|v| format!("{v:.0}"))
            .collect();
        out.push_str(&format!(
            "| {} | {:.0} | {} | {:.1} | {:.2} / {:.2} / {:.2} | {:.2} |\n",
            r.label,
            r.msgs_per_sec,
            rounds.join(", "),
            r.mb_per_sec,
            r.cpu_s[0],
            r.cpu_s[1],
            r.cpu_s[2],
            r.cpu_us_per_msg
        ));
    }
    out.push_str(&format!(
        "\nThe mirror copies at {:.0}% of the source's own consume rate (both clocks start once connected); over its whole run, process start and topic creation included, at {:.0}%.\n\n",
        outcome.mirror_share * 100.0,
        outcome.rates[2].msgs_per_sec * 100.0 / outcome.rates[0].msgs_per_sec.max(1e-9)
    ));
    out.push_str("| load | msg/s | received | lost+dup+reordered | p50 ms | p99 ms | p99.9 ms | max ms |\n|---|---|---|---|---|---|---|---|\n");
    for l in &outcome.latency {
        let (p50, p99, p999, max) = l.latency.as_ref().map_or((0.0, 0.0, 0.0, 0.0), |s| {
            (s.p50_ms, s.p99_ms, s.p999_ms, s.max_ms)
        });
        out.push_str(&format!(
            "| {:.0}% | {:.0} | {} | {} | {p50:.2} | {p99:.2} | {p999:.2} | {max:.2} |\n",
            l.load * 100.0,
            l.rate,
            l.received,
            l.anomalies
        ));
    }
    out
}
