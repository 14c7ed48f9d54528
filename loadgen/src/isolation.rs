//! A quiet topic beside a hot one (issue 51, items 4 and 5), part of
//! `loadgen sustained`.
//!
//! A topic paced at `rate` messages/s (`batch` a request, acks written —
//! Kafka: acks=1) is timed alone, then while a second topic on the same
//! broker takes everything one producer can send (on ringlog one partition
//! a shard, so the quiet partition shares its shard with a hot one); on
//! ringlog then with acks flushed and acks written again right after the hot
//! run ends (a flush must not wait for the hot topic's leftovers). Latency
//! runs from each message's intended send time to its acknowledgement.

use crate::kafka_perf::tools::KafkaTools;
use crate::peers::kafka;
use crate::stats::{measure, Stats};
use crate::workload::{self, Length, ProduceSpec};
use anyhow::Context;
use protocol::client::{AckMode, TopicSettings};
use serde::Serialize;
use std::path::Path;
use std::time::Duration;

/// What the quiet producer does.
#[derive(Debug, Clone)]
pub struct QuietSpec {
    /// Messages per second.
    pub rate: f64,
    /// Seconds each timed run lasts, the warm-up included.
    pub seconds: f64,
    /// Seconds not counted at the start of each.
    pub warmup: f64,
    /// Payload bytes.
    pub size: usize,
    /// Messages per ringlog request.
    pub batch: usize,
    /// Bytes the hot topic keeps.
    pub retention_bytes: u64,
}

/// How long the hot producer runs before the quiet one starts, and after.
const LEAD: Duration = Duration::from_secs(5);

/// The quiet topic's latency, each a p50 and p99.9 in ms.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Isolation {
    /// "ringlog" or "kafka 4.4".
    pub system: String,
    /// Acks written (Kafka: 1), alone: (p50, p99.9).
    pub alone: (f64, f64),
    /// The same beside the hot topic.
    pub beside: (f64, f64),
    /// ringlog: acks flushed right after the hot run.
    pub after_flushed: Option<(f64, f64)>,
    /// ringlog: acks written after that.
    pub after_written: Option<(f64, f64)>,
}

fn quiet_ringlog(brokers: &str, spec: &QuietSpec, acks: AckMode) -> anyhow::Result<(f64, f64)> {
    let produce = ProduceSpec {
        rate: Some(spec.rate),
        ..ProduceSpec::new(
            brokers,
            "quiet",
            Length::Duration(Duration::from_secs_f64(spec.seconds)),
            spec.size,
            spec.batch,
            acks,
        )
    };
    let (_, summary) = measure("quiet", "sent", None, spec.warmup, |stats| {
        workload::produce(&produce, stats)
    })?;
    let latency = summary
        .latency
        .context("the quiet producer timed nothing")?;
    Ok((latency.p50_ms, latency.p999_ms))
}

/// The experiment on a running ringlog broker of `shards` shards.
pub fn ringlog(brokers: &str, shards: u32, spec: &QuietSpec) -> anyhow::Result<Isolation> {
    let client = crate::connect(brokers)?;
    client.create_topic("quiet", 1, &TopicSettings::default())?;
    let hot_settings = TopicSettings {
        retention_bytes: spec.retention_bytes,
        segment_bytes: 1 << 30,
        ..TopicSettings::default()
    };
    client.create_topic("hot", shards, &hot_settings)?;
    let alone = quiet_ringlog(brokers, spec, AckMode::Written)?;
    let hot = ProduceSpec {
        partitions: shards,
        ..ProduceSpec::new(
            brokers,
            "hot",
            Length::Duration(LEAD * 2 + Duration::from_secs_f64(spec.seconds)),
            spec.size,
            1000,
            AckMode::None,
        )
    };
    let hot = std::thread::spawn(move || workload::produce(&hot, &Stats::new()));
    std::thread::sleep(LEAD);
    let beside = quiet_ringlog(brokers, spec, AckMode::Written);
    let hot = hot
        .join()
        .map_err(|_| anyhow::anyhow!("the hot producer panicked"))?;
    let beside = beside?;
    hot?;
    let after_flushed = quiet_ringlog(brokers, spec, AckMode::Flushed)?;
    let after_written = quiet_ringlog(brokers, spec, AckMode::Written)?;
    Ok(Isolation {
        system: "ringlog".into(),
        alone,
        beside,
        after_flushed: Some(after_flushed),
        after_written: Some(after_written),
    })
}

fn quiet_kafka(
    home: &Path,
    address: &str,
    topic: &str,
    spec: &QuietSpec,
) -> anyhow::Result<(f64, f64)> {
    let outcome = kafka::paced(
        home,
        address,
        topic,
        spec.rate,
        spec.seconds,
        spec.warmup,
        spec.size,
        "1",
    )?;
    let publish = outcome
        .publish
        .context("Kafka's paced driver timed nothing")?;
    Ok((publish.p50_ms, publish.p999_ms))
}

/// The experiment on Kafka at `address`: its own producer for the hot
/// topic, loadgen's Kafka driver (Kafka's Java client) for the quiet one.
pub fn kafka(
    home: &Path,
    out: &Path,
    address: &str,
    spec: &QuietSpec,
) -> anyhow::Result<Isolation> {
    if let Some(missing) = kafka::missing_driver(home) {
        anyhow::bail!("{missing}");
    }
    let tools = KafkaTools::new(home, out)?;
    let quiet = format!("quiet-{}", std::process::id());
    let hot = format!("hot-{}", std::process::id());
    tools.create_topic(address, &quiet, 1, 1, &[])?;
    tools.create_topic(
        address,
        &hot,
        1,
        1,
        &[
            format!("retention.bytes={}", spec.retention_bytes),
            format!("segment.bytes={}", 1u64 << 30),
        ],
    )?;
    let result = (|| {
        let alone = quiet_kafka(home, address, &quiet, spec)?;
        let (home_, out_, address_, hot_) = (
            home.to_path_buf(),
            out.to_path_buf(),
            address.to_string(),
            hot.clone(),
        );
        let seconds = (LEAD * 2).as_secs_f64() + spec.seconds + 5.0;
        let size = spec.size;
        let flood = std::thread::spawn(move || {
            KafkaTools::new(&home_, &out_)?.produce_for(
                &hot_,
                seconds,
                size,
                &crate::kafka_perf::tools::fastest_producer(&address_),
            )
        });
        std::thread::sleep(LEAD + Duration::from_secs(3));
        let beside = quiet_kafka(home, address, &quiet, spec);
        flood
            .join()
            .map_err(|_| anyhow::anyhow!("the hot producer panicked"))??;
        Ok(Isolation {
            system: "kafka 4.4".into(),
            alone,
            beside: beside?,
            ..Isolation::default()
        })
    })();
    let _ = tools.delete_topic(address, &quiet);
    let _ = tools.delete_topic(address, &hot);
    result
}

/// The experiment's table.
pub fn table(spec: &QuietSpec, runs: &[Isolation]) -> String {
    let pair = |(p50, p999): (f64, f64)| format!("{p50:.2} · {p999:.2}");
    let mut out = format!(
        "A topic paced at {} msg/s ({} a request on ringlog, acks written / acks=1), {} s a run, {} s not counted; p50 · p99.9 ms\n\n\
         | system | alone | beside a full-rate topic | p99.9 beside ÷ alone | acks flushed after it | acks written after it |\n|---|---|---|---|---|---|\n",
        spec.rate, spec.batch, spec.seconds, spec.warmup
    );
    for run in runs {
        let after = |v: Option<(f64, f64)>| v.map_or("–".into(), pair);
        out.push_str(&format!(
            "| {} | {} | {} | {:.1}× | {} | {} |\n",
            run.system,
            pair(run.alone),
            pair(run.beside),
            run.beside.1 / run.alone.1.max(1e-3),
            after(run.after_flushed),
            after(run.after_written),
        ));
    }
    out
}
