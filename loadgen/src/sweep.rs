//! Latency under load, as the OpenMessaging Benchmark presents it: for each
//! ack mode, the maximum end-to-end rate is measured first, then fixed-rate
//! e2e runs at given fractions of it (or at given rates) report publish and
//! end-to-end latency percentiles against the throughput achieved.
//!
//! Every run is an [`e2e`](crate::e2e::run) run (its loss / duplicate / order
//! checks included); latency is measured from each message's intended send
//! time, so a stall counts against every message it delayed.
//!
//! A tail measured once is one sample of a noisy figure: on a shared VM,
//! identical 10 s runs at one rate gave publish p99 from 0.9 to 25 ms within
//! minutes (`loadgen/results/2026-12-02-vm/rounds`). `rounds` runs every
//! rate that many times, interleaved (every rate once, then again), so slow
//! minutes of the machine fall on different rates, and reports each rate's
//! median figures beside the runs; the chart draws the medians.

use crate::chart::{self, Series};
use crate::e2e::{self, E2eSpec};
use crate::stats::{measure, LatencySummary};
use crate::workload::Length;
use protocol::client::AckMode;
use serde::Serialize;
use std::time::Duration;

/// A rate of a sweep: a fraction of the measured maximum, or messages/s.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Rate {
    /// This share of the maximum (0.5 = 50%).
    Fraction(f64),
    /// This many messages per second.
    Absolute(f64),
}

impl Rate {
    /// `50%` or `20000`.
    pub fn parse(text: &str) -> anyhow::Result<Rate> {
        let text = text.trim();
        let rate = match text.strip_suffix('%') {
            Some(percent) => Rate::Fraction(percent.trim().parse::<f64>()? / 100.0),
            None => Rate::Absolute(text.parse::<f64>()?),
        };
        match rate {
            Rate::Fraction(f) if f > 0.0 && f <= 1.0 => Ok(rate),
            Rate::Absolute(r) if r > 0.0 => Ok(rate),
            _ => anyhow::bail!("rate {text:?}: a percentage in (0%, 100%] or messages/s above 0"),
        }
    }

    fn label(&self) -> String {
        match self {
            Rate::Fraction(f) => format!("{:.0}%", f * 100.0),
            Rate::Absolute(r) => format!("{r:.0}"),
        }
    }
}

/// A sweep's settings.
#[derive(Debug, Clone)]
pub struct SweepSpec {
    /// Broker addresses.
    pub brokers: String,
    /// Topic prefix; each ack mode gets `<topic>-<mode>`.
    pub topic: String,
    /// Partitions of the topics.
    pub partitions: u32,
    /// Payload bytes.
    pub size: usize,
    /// Messages per produce request.
    pub batch: usize,
    /// Producer threads.
    pub producers: usize,
    /// Consumer threads.
    pub consumers: usize,
    /// Ack modes swept, in order.
    pub acks: Vec<AckMode>,
    /// Rates, in order.
    pub rates: Vec<Rate>,
    /// Length of each run, warm-up included.
    pub duration: Duration,
    /// Start of each run not counted.
    pub warmup: Duration,
    /// Runs of every rate (at least 1), interleaved.
    pub rounds: usize,
}

/// One fixed-rate run.
#[derive(Debug, Clone, Serialize)]
pub struct SweepPoint {
    /// "written" or "flushed" (or "none").
    pub acks: String,
    /// The rate asked for, as given ("50%" or a number).
    pub rate: String,
    /// Which of the rounds (1-based); 0 in a median.
    pub round: usize,
    /// Messages/s asked for.
    pub target_msgs_per_sec: f64,
    /// Messages/s received end to end.
    pub achieved_msgs_per_sec: f64,
    /// Send (intended time) to acknowledgement.
    pub publish: Option<LatencySummary>,
    /// Send (intended time) to a consumer's receipt.
    pub e2e: Option<LatencySummary>,
    /// Messages never received, received twice, out of order.
    pub lost: u64,
    /// Extra copies received.
    pub duplicated: u64,
    /// Received after a later one of the same partition.
    pub out_of_order: u64,
}

/// A sweep's result.
#[derive(Debug, Clone, Serialize)]
pub struct SweepResult {
    /// (acks, maximum end-to-end messages/s) measured before each mode's rates.
    pub maximum: Vec<(String, f64)>,
    /// Every fixed-rate run.
    pub points: Vec<SweepPoint>,
    /// With more than one round: per ack mode and rate, the median of each
    /// figure over the rounds (each percentile's own median; the counts of
    /// lost, duplicated and out-of-order messages are sums).
    pub medians: Vec<SweepPoint>,
}

fn acks_name(acks: AckMode) -> String {
    format!("{acks:?}").to_lowercase()
}

/// One fixed-rate (or unpaced) run's figures, whichever system ran it.
struct RunFigures {
    achieved: f64,
    publish: Option<LatencySummary>,
    e2e: Option<LatencySummary>,
    lost: u64,
    duplicated: u64,
    out_of_order: u64,
}

/// The sweep's plan, run by `run` (ack mode, rate; None: unpaced, for the
/// maximum): per ack mode the maximum when a rate is a fraction of it,
/// then every rate, `spec.rounds` times interleaved, a line printed per run.
fn sweep_with(
    spec: &SweepSpec,
    system: &str,
    mut run: impl FnMut(AckMode, Option<f64>) -> anyhow::Result<RunFigures>,
) -> anyhow::Result<SweepResult> {
    let mut result = SweepResult {
        maximum: Vec::new(),
        points: Vec::new(),
        medians: Vec::new(),
    };
    for &acks in &spec.acks {
        let name = acks_name(acks);
        let needs_maximum = spec.rates.iter().any(|r| matches!(r, Rate::Fraction(_)));
        let maximum = if needs_maximum {
            let achieved = run(acks, None)?.achieved;
            eprintln!(
                "sweep: {system}acks {name}: maximum {} msg/s end to end",
                chart::format_number(achieved)
            );
            result.maximum.push((name.clone(), achieved));
            achieved
        } else {
            0.0
        };
        for round in 1..=spec.rounds.max(1) {
            for rate in &spec.rates {
                let target = match rate {
                    Rate::Fraction(f) => maximum * f,
                    Rate::Absolute(r) => *r,
                };
                let figures = run(acks, Some(target.max(1.0)))?;
                let point = SweepPoint {
                    acks: name.clone(),
                    rate: rate.label(),
                    round,
                    target_msgs_per_sec: target,
                    achieved_msgs_per_sec: figures.achieved,
                    publish: figures.publish,
                    e2e: figures.e2e,
                    lost: figures.lost,
                    duplicated: figures.duplicated,
                    out_of_order: figures.out_of_order,
                };
                eprintln!("sweep: {system}{}", row(&point));
                result.points.push(point);
            }
        }
    }
    if spec.rounds > 1 {
        result.medians = medians(&result.points);
    }
    Ok(result)
}

/// Runs the sweep against ringlog (`spec.brokers`), with loadgen's own
/// e2e runs, printing a line per run.
pub fn run(spec: &SweepSpec) -> anyhow::Result<SweepResult> {
    sweep_with(spec, "", |acks, rate| {
        let run = E2eSpec {
            brokers: spec.brokers.clone(),
            consume_from: None,
            topic: format!("{}-{}", spec.topic, acks_name(acks)),
            partitions: spec.partitions,
            length: Length::Duration(spec.duration),
            size: spec.size,
            batch: spec.batch,
            acks,
            rate,
            producers: spec.producers,
            consumers: spec.consumers,
            inject_loss: None,
            inject_duplicate: None,
            grace: Duration::from_secs(5),
            warmup: spec.warmup,
        };
        let (outcome, summary) = measure(
            "sweep",
            "received",
            None,
            spec.warmup.as_secs_f64(),
            |stats| e2e::run(&run, stats),
        )?;
        let total = |f: fn(&e2e::PartitionCheck) -> u64| outcome.checks.iter().map(f).sum();
        Ok(RunFigures {
            achieved: summary.msgs_per_sec,
            publish: outcome.publish,
            e2e: summary.latency,
            lost: total(|c| c.lost),
            duplicated: total(|c| c.duplicated),
            out_of_order: total(|c| c.out_of_order),
        })
    })
}

/// Kafka's producer settings and topic configs for a ringlog ack mode:
/// `none` is acks=0; `written` is acks=1 (the leader's page cache, as
/// ringlog's written); `flushed` is acks=1 on a topic with
/// `flush.messages=1`, so the leader fsyncs every append before it answers
/// (as ringlog's flushed; Kafka's default never fsyncs by itself).
fn kafka_acks(acks: AckMode) -> (&'static str, &'static [&'static str]) {
    match acks {
        AckMode::None => ("0", &[]),
        AckMode::Flushed => ("1", &["flush.messages=1"]),
        _ => ("1", &[]),
    }
}

/// The same sweep against Apache Kafka (`spec.brokers` its bootstrap
/// servers), driven by Kafka's own Java client through loadgen's driver
/// ([`crate::peers::kafka::paced`]): one JVM produces at the rate and
/// consumes every partition, each message carrying its intended send time.
/// One topic of one copy per ack mode (`<topic>-kafka-<mode>`), reused by
/// its runs (each reads only what it produced). The maximum is a run with
/// the producer unpaced. Producer and consumer are in one process, as
/// loadgen's own e2e runs are; the latency percentiles are the driver's
/// exact ones over every counted message. Order is not checked (0).
pub fn run_kafka(spec: &SweepSpec, home: &std::path::Path) -> anyhow::Result<SweepResult> {
    use crate::peers::kafka;
    if let Some(why) = kafka::missing_driver(home) {
        anyhow::bail!(why);
    }
    let topic = |acks| format!("{}-kafka-{}", spec.topic, acks_name(acks));
    for &acks in &spec.acks {
        kafka::create(
            home,
            &spec.brokers,
            &topic(acks),
            spec.partitions,
            1,
            kafka_acks(acks).1,
        )?;
    }
    sweep_with(spec, "Kafka ", |acks, rate| {
        let outcome = kafka::paced(
            home,
            &spec.brokers,
            &topic(acks),
            rate.unwrap_or(0.0),
            spec.duration.as_secs_f64(),
            spec.warmup.as_secs_f64(),
            spec.size,
            kafka_acks(acks).0,
        )?;
        Ok(RunFigures {
            achieved: outcome.achieved,
            publish: outcome.publish,
            e2e: outcome.e2e,
            lost: outcome.lost,
            duplicated: outcome.duplicated,
            out_of_order: 0,
        })
    })
}

/// The median of each figure over the runs of one ack mode and rate, in
/// the order the runs first came.
fn medians(points: &[SweepPoint]) -> Vec<SweepPoint> {
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for p in points {
        if !keys.contains(&(p.acks.as_str(), p.rate.as_str())) {
            keys.push((p.acks.as_str(), p.rate.as_str()));
        }
    }
    keys.into_iter()
        .map(|(acks, rate)| {
            let runs: Vec<&SweepPoint> = points
                .iter()
                .filter(|p| p.acks == acks && p.rate == rate)
                .collect();
            let of = |f: &dyn Fn(&SweepPoint) -> f64| median(runs.iter().map(|p| f(p)).collect());
            let latency = |pick: fn(&SweepPoint) -> &Option<LatencySummary>| {
                let all: Vec<&LatencySummary> =
                    runs.iter().filter_map(|p| pick(p).as_ref()).collect();
                if all.is_empty() {
                    return None;
                }
                let m = |f: fn(&LatencySummary) -> f64| median(all.iter().map(|l| f(l)).collect());
                Some(LatencySummary {
                    count: all.iter().map(|l| l.count).sum(),
                    avg_ms: m(|l| l.avg_ms),
                    max_ms: m(|l| l.max_ms),
                    p50_ms: m(|l| l.p50_ms),
                    p95_ms: m(|l| l.p95_ms),
                    p99_ms: m(|l| l.p99_ms),
                    p999_ms: m(|l| l.p999_ms),
                    curve: Vec::new(),
                })
            };
            SweepPoint {
                acks: acks.to_string(),
                rate: rate.to_string(),
                round: 0,
                target_msgs_per_sec: of(&|p| p.target_msgs_per_sec),
                achieved_msgs_per_sec: of(&|p| p.achieved_msgs_per_sec),
                publish: latency(|p| &p.publish),
                e2e: latency(|p| &p.e2e),
                lost: runs.iter().map(|p| p.lost).sum(),
                duplicated: runs.iter().map(|p| p.duplicated).sum(),
                out_of_order: runs.iter().map(|p| p.out_of_order).sum(),
            }
        })
        .collect()
}

/// The middle value (the mean of the middle two for an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn percentiles(latency: &Option<LatencySummary>) -> String {
    match latency {
        Some(l) => format!(
            "{:>7.3} {:>7.3} {:>7.3} {:>7.3}",
            l.p50_ms, l.p99_ms, l.p999_ms, l.max_ms
        ),
        None => format!("{:>31}", "-"),
    }
}

fn row(point: &SweepPoint) -> String {
    format!(
        "{:<8} {:>6} {:>6} {:>11} {:>11}  {}  {}  {}/{}/{}",
        point.acks,
        point.rate,
        match point.round {
            0 => "median".to_string(),
            round => round.to_string(),
        },
        chart::format_number(point.target_msgs_per_sec),
        chart::format_number(point.achieved_msgs_per_sec),
        percentiles(&point.publish),
        percentiles(&point.e2e),
        point.lost,
        point.duplicated,
        point.out_of_order
    )
}

/// The result as a table: one row per run, latencies in milliseconds.
pub fn table(result: &SweepResult) -> String {
    let mut out = String::new();
    for (acks, max) in &result.maximum {
        out.push_str(&format!(
            "maximum end-to-end rate, acks {acks}: {} msg/s\n",
            chart::format_number(*max)
        ));
    }
    out.push_str(&format!(
        "{:<8} {:>6} {:>6} {:>11} {:>11}  {:^31}  {:^31}  {}\n",
        "acks",
        "rate",
        "round",
        "target/s",
        "achieved/s",
        "publish p50 p99 p99.9 max (ms)",
        "e2e p50 p99 p99.9 max (ms)",
        "lost/dup/ooo"
    ));
    for point in &result.points {
        out.push_str(&row(point));
        out.push('\n');
    }
    if !result.medians.is_empty() {
        let rounds = result.points.iter().map(|p| p.round).max().unwrap_or(0);
        out.push_str(&format!("median of {rounds} rounds:\n"));
        for point in &result.medians {
            out.push_str(&row(point));
            out.push('\n');
        }
    }
    out
}

/// Latency against throughput: p50 and p99 of publish and end-to-end
/// latency per ack mode (log scale).
pub fn chart(result: &SweepResult) -> String {
    // With rounds, a line through every run would zigzag between the
    // rounds of one rate: the medians are drawn.
    let drawn = if result.medians.is_empty() {
        &result.points
    } else {
        &result.medians
    };
    let mut series = Vec::new();
    let mut modes: Vec<&str> = drawn.iter().map(|p| p.acks.as_str()).collect();
    modes.dedup();
    for mode in modes {
        let points: Vec<&SweepPoint> = drawn.iter().filter(|p| p.acks == mode).collect();
        let line = |name: &str, pick: &dyn Fn(&SweepPoint) -> Option<f64>| Series {
            name: format!("{mode} {name}"),
            points: points
                .iter()
                .filter_map(|p| Some((p.achieved_msgs_per_sec, pick(p)?)))
                .collect(),
        };
        series.push(line("publish p99", &|p| Some(p.publish.as_ref()?.p99_ms)));
        series.push(line("e2e p99", &|p| Some(p.e2e.as_ref()?.p99_ms)));
        series.push(line("e2e p50", &|p| Some(p.e2e.as_ref()?.p50_ms)));
    }
    series.retain(|s| !s.points.is_empty());
    let title = match result.points.iter().map(|p| p.round).max() {
        Some(rounds) if !result.medians.is_empty() => {
            format!("latency against throughput (median of {rounds} fixed-rate e2e runs per rate)")
        }
        _ => "latency against throughput (fixed-rate e2e runs)".to_string(),
    };
    chart::lines(
        &title,
        "messages per second (achieved)",
        "latency, ms",
        &series,
        true,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(rate: &str, round: usize, achieved: f64, p99: f64, lost: u64) -> SweepPoint {
        let latency = LatencySummary {
            count: 10,
            avg_ms: p99 / 4.0,
            max_ms: p99 * 2.0,
            p50_ms: p99 / 5.0,
            p95_ms: p99 / 2.0,
            p99_ms: p99,
            p999_ms: p99 * 1.5,
            curve: vec![(50.0, p99 / 5.0)],
        };
        SweepPoint {
            acks: "written".into(),
            rate: rate.into(),
            round,
            target_msgs_per_sec: 1000.0,
            achieved_msgs_per_sec: achieved,
            publish: Some(latency.clone()),
            e2e: Some(latency),
            lost,
            duplicated: 0,
            out_of_order: 0,
        }
    }

    #[test]
    fn medians_take_each_figure_over_the_rounds_of_a_rate() {
        // Rounds interleave the rates; one run of 50% hit a slow minute.
        let points = vec![
            point("10%", 1, 100.0, 0.6, 0),
            point("50%", 1, 500.0, 25.0, 0),
            point("10%", 2, 102.0, 0.8, 1),
            point("50%", 2, 498.0, 0.9, 0),
            point("10%", 3, 101.0, 0.7, 0),
            point("50%", 3, 499.0, 1.2, 2),
        ];
        let m = medians(&points);
        assert_eq!(
            m.iter().map(|p| p.rate.as_str()).collect::<Vec<_>>(),
            ["10%", "50%"]
        );
        let fifty = &m[1];
        assert_eq!(fifty.round, 0);
        assert_eq!(fifty.achieved_msgs_per_sec, 499.0);
        let publish = fifty.publish.as_ref().unwrap();
        assert_eq!(publish.p99_ms, 1.2, "the slow round is not the median");
        assert_eq!(publish.max_ms, 2.4);
        assert_eq!(publish.count, 30);
        assert_eq!(m[0].lost + fifty.lost, 3, "losses are summed, never hidden");
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        let result = SweepResult {
            maximum: vec![],
            points,
            medians: m,
        };
        let table = table(&result);
        assert!(table.contains("median of 3 rounds:"), "{table}");
        assert!(chart(&result).contains("median of 3"));
    }

    #[test]
    fn kafka_gets_the_nearest_ack_mode_and_flushes_only_for_flushed() {
        assert_eq!(kafka_acks(AckMode::None), ("0", &[][..]));
        assert_eq!(kafka_acks(AckMode::Written), ("1", &[][..]));
        assert_eq!(
            kafka_acks(AckMode::Flushed),
            ("1", &["flush.messages=1"][..])
        );
    }

    #[test]
    fn rates_parse_as_percentages_or_numbers_and_bad_ones_are_refused() {
        assert_eq!(Rate::parse("50%").unwrap(), Rate::Fraction(0.5));
        assert_eq!(Rate::parse(" 20000 ").unwrap(), Rate::Absolute(20000.0));
        for bad in ["0%", "150%", "-3", "fast", ""] {
            assert!(Rate::parse(bad).is_err(), "{bad}");
        }
    }
}
