//! Message format 2 against format 1, and format 2's codecs (issue 43,
//! item 8), on a standalone broker this starts itself, in one run:
//!
//! - the paper's three experiments (one producer sending 1 and 50 messages
//!   per request, acks none; one consumer with 256 KiB fetches) on a
//!   format-1 and a format-2 topic, alternating (each first every other
//!   round; each topic deleted once measured), `rounds` times: msg/s,
//!   the broker's and the client's CPU per message, bytes stored per
//!   message;
//! - on JSON log lines ([`crate::log_lines`]), per codec: the bytes stored
//!   per message and the compression ratio, produce and consume msg/s, and
//!   the CPU per message of the producer, the broker and the consumer;
//! - the idempotent producer's cost: format 2 with acks written, 50 and
//!   1,000 messages a batch, numbered and not, alternating: msg/s, CPU per
//!   message, latency.

use crate::broker_process::LocalBroker;
use crate::cluster_process::process_cpu;
use crate::stats::measure;
use crate::workload::{self, ConsumeSpec, Length, Payload, ProduceSpec};
use protocol::batch::Compression;
use protocol::client::AckMode;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

/// What to run.
#[derive(Debug, Clone)]
pub struct FormatsSpec {
    /// Messages per experiment.
    pub messages: u64,
    /// Payload bytes (the paper: 200).
    pub size: usize,
    /// Alternating rounds of format 1 and 2.
    pub rounds: usize,
    /// Messages per codec run.
    pub codec_messages: u64,
    /// Messages per batch in the codec runs.
    pub codec_batch: usize,
    /// Bytes per fetch.
    pub fetch_bytes: u32,
    /// Shards of the broker.
    pub shards: usize,
    /// Partitions of the acks-written topics (spread over the shards).
    pub written_partitions: u32,
    /// Where the table and JSON go.
    pub out: PathBuf,
}

/// One experiment on one format.
#[derive(Debug, Clone, Serialize)]
pub struct FormatRow {
    /// 1 or 2.
    pub format: u32,
    /// produce-batch-1, produce-batch-50 or consume.
    pub experiment: String,
    /// Which round.
    pub round: usize,
    /// Messages per second.
    pub msgs_per_sec: f64,
    /// The broker's CPU (user + system) per message, µs.
    pub broker_cpu_us: f64,
    /// loadgen's own CPU (the client) per message, µs.
    pub client_cpu_us: f64,
    /// Bytes the partition grew by per message (produce only).
    pub bytes_per_message: Option<f64>,
}

/// One codec on log lines.
#[derive(Debug, Clone, Serialize)]
pub struct CodecRow {
    /// none, gzip, snappy, lz4, zstd.
    pub codec: String,
    /// Payload bytes per message (the lines' average).
    pub payload_bytes: f64,
    /// Bytes stored per message.
    pub stored_bytes: f64,
    /// Payload bytes / stored bytes.
    pub ratio: f64,
    /// Produce messages per second.
    pub produce_msgs_per_sec: f64,
    /// The producer's CPU per message, µs.
    pub producer_cpu_us: f64,
    /// The broker's CPU per produced message, µs.
    pub broker_produce_cpu_us: f64,
    /// Consume messages per second.
    pub consume_msgs_per_sec: f64,
    /// The consumer's CPU per message, µs.
    pub consumer_cpu_us: f64,
    /// The broker's CPU per consumed message, µs.
    pub broker_consume_cpu_us: f64,
}

/// One acks=written produce on format 2, idempotent or not.
#[derive(Debug, Clone, Serialize)]
pub struct IdempotenceRow {
    /// 1 or 2.
    pub format: u32,
    /// Messages per batch the producer was asked for.
    pub batch: usize,
    /// Numbered batches (the client's default on format 2) or not.
    pub idempotence: bool,
    /// Which round.
    pub round: usize,
    /// Messages per second.
    pub msgs_per_sec: f64,
    /// The broker's CPU per message, µs.
    pub broker_cpu_us: f64,
    /// loadgen's own CPU per message, µs.
    pub client_cpu_us: f64,
    /// Acknowledgement latency, median, ms.
    pub p50_ms: f64,
    /// Acknowledgement latency, 99.9th percentile, ms.
    pub p999_ms: f64,
}

/// Everything measured.
#[derive(Debug, Clone, Serialize)]
pub struct FormatsReport {
    /// The paper's experiments, per format and round.
    pub formats: Vec<FormatRow>,
    /// The codecs on log lines.
    pub codecs: Vec<CodecRow>,
    /// The idempotent producer against the plain one.
    pub idempotence: Vec<IdempotenceRow>,
    /// Partitions of the acks-written topics.
    pub written_partitions: u32,
    /// Messages per experiment, per codec run, and the batch of the codec runs.
    pub messages: u64,
    /// Per codec run.
    pub codec_messages: u64,
    /// Messages per batch in the codec runs.
    pub codec_batch: usize,
}

/// CPU of the broker and of this process around `work`, per message.
fn cpu_per_message<T>(
    broker: u32,
    messages: u64,
    work: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<(T, f64, f64)> {
    let (b0, c0) = (process_cpu(broker), process_cpu(std::process::id()));
    let value = work()?;
    let (b1, c1) = (process_cpu(broker), process_cpu(std::process::id()));
    let per = |d: Duration| d.as_secs_f64() * 1e6 / messages.max(1) as f64;
    Ok((value, per(b1 - b0), per(c1 - c0)))
}

fn produce_spec(
    brokers: &str,
    topic: &str,
    messages: u64,
    size: usize,
    batch: usize,
) -> ProduceSpec {
    ProduceSpec::new(
        brokers,
        topic,
        Length::Messages(messages),
        size,
        batch,
        AckMode::None,
    )
}

fn consume_spec(brokers: &str, topic: &str, messages: u64, fetch_bytes: u32) -> ConsumeSpec {
    ConsumeSpec {
        brokers: brokers.to_string(),
        topic: topic.to_string(),
        length: Length::Messages(messages),
        fetch_bytes,
        consumers: 1,
        prefetch: 0,
    }
}

/// Runs it all; writes `formats.json` and `formats.txt` under `spec.out`.
pub fn run(spec: &FormatsSpec) -> anyhow::Result<FormatsReport> {
    let broker = LocalBroker::start_named(spec.shards, "formats")?;
    let pid = broker.pid();
    let brokers = broker.brokers.clone();
    let client = crate::connect(&brokers)?;
    let mut formats = Vec::new();
    for round in 1..=spec.rounds {
        // Each format goes first every other round, and every topic is
        // deleted once measured: its pages leave the page cache with it,
        // so neither format runs against the other's dirty pages.
        let order = if round % 2 == 1 { [1u32, 2] } else { [2, 1] };
        for format in order {
            let topic = |batch: usize| format!("formats-f{format}-b{batch}-r{round}");
            for batch in [1usize, 50] {
                let produce = ProduceSpec {
                    message_format: format,
                    ..produce_spec(&brokers, &topic(batch), spec.messages, spec.size, batch)
                };
                let label = format!("format {format} produce batch {batch} (round {round})");
                let ((outcome, summary), broker_cpu, client_cpu) =
                    cpu_per_message(pid, spec.messages, || {
                        measure(&label, "sent", Some(spec.messages), 0.0, |stats| {
                            workload::produce(&produce, stats)
                        })
                    })?;
                if batch == 1 {
                    client.delete_topic(&topic(batch))?;
                }
                formats.push(FormatRow {
                    format,
                    experiment: format!("produce-batch-{batch}"),
                    round,
                    msgs_per_sec: summary.msgs_per_sec,
                    broker_cpu_us: broker_cpu,
                    client_cpu_us: client_cpu,
                    bytes_per_message: Some(
                        outcome.stored_bytes as f64 / outcome.messages.max(1) as f64,
                    ),
                });
            }
            let consume = consume_spec(&brokers, &topic(50), spec.messages, spec.fetch_bytes);
            let label = format!("format {format} consume (round {round})");
            let (((), summary), broker_cpu, client_cpu) =
                cpu_per_message(pid, spec.messages, || {
                    measure(&label, "received", Some(spec.messages), 0.0, |stats| {
                        workload::consume(&consume, stats)
                    })
                })?;
            formats.push(FormatRow {
                format,
                experiment: "consume".into(),
                round,
                msgs_per_sec: summary.msgs_per_sec,
                broker_cpu_us: broker_cpu,
                client_cpu_us: client_cpu,
                bytes_per_message: None,
            });
            client.delete_topic(&topic(50))?;
        }
    }
    let lines = crate::log_lines::lines(8192, spec.size, 0);
    let payload_bytes = lines.iter().map(Vec::len).sum::<usize>() as f64 / lines.len() as f64;
    let mut codecs = Vec::new();
    for (name, codec) in [
        ("none", Compression::None),
        ("gzip", Compression::Gzip),
        ("snappy", Compression::Snappy),
        ("lz4", Compression::Lz4),
        ("zstd", Compression::Zstd),
    ] {
        let topic = format!("formats-codec-{name}");
        let produce = ProduceSpec {
            message_format: 2,
            payload: Payload::LogLines,
            compression: codec,
            ..produce_spec(
                &brokers,
                &topic,
                spec.codec_messages,
                spec.size,
                spec.codec_batch,
            )
        };
        let label = format!("{name}: produce log lines");
        let ((outcome, produced), broker_produce, producer_cpu) =
            cpu_per_message(pid, spec.codec_messages, || {
                measure(&label, "sent", Some(spec.codec_messages), 0.0, |stats| {
                    workload::produce(&produce, stats)
                })
            })?;
        let consume = consume_spec(&brokers, &topic, spec.codec_messages, spec.fetch_bytes);
        let label = format!("{name}: consume");
        let (((), consumed), broker_consume, consumer_cpu) =
            cpu_per_message(pid, spec.codec_messages, || {
                measure(
                    &label,
                    "received",
                    Some(spec.codec_messages),
                    0.0,
                    |stats| workload::consume(&consume, stats),
                )
            })?;
        let stored = outcome.stored_bytes as f64 / outcome.messages.max(1) as f64;
        codecs.push(CodecRow {
            codec: name.into(),
            payload_bytes,
            stored_bytes: stored,
            ratio: payload_bytes / stored,
            produce_msgs_per_sec: produced.msgs_per_sec,
            producer_cpu_us: producer_cpu,
            broker_produce_cpu_us: broker_produce,
            consume_msgs_per_sec: consumed.msgs_per_sec,
            consumer_cpu_us: consumer_cpu,
            broker_consume_cpu_us: broker_consume,
        });
        client.delete_topic(&topic)?;
    }
    let idempotence = idempotence_rows(spec, pid, &brokers, &client)?;
    drop(broker);
    let report = FormatsReport {
        formats,
        codecs,
        idempotence,
        written_partitions: spec.written_partitions,
        messages: spec.messages,
        codec_messages: spec.codec_messages,
        codec_batch: spec.codec_batch,
    };
    std::fs::create_dir_all(&spec.out)?;
    std::fs::write(
        spec.out.join("formats.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    let text = table(&report);
    std::fs::write(spec.out.join("formats.txt"), &text)?;
    print!("{text}");
    Ok(report)
}

/// Acks written: format 1, format 2 with plain batches and format 2 with
/// numbered ones (its producer's default), at 50 and 1,000 messages a
/// batch, in a rotated order each round.
fn idempotence_rows(
    spec: &FormatsSpec,
    pid: u32,
    brokers: &str,
    client: &protocol::client::Client,
) -> anyhow::Result<Vec<IdempotenceRow>> {
    const PRODUCERS: [(u32, bool); 3] = [(1, false), (2, false), (2, true)];
    let mut rows = Vec::new();
    for round in 1..=spec.rounds {
        for batch in [50usize, 1000] {
            for turn in 0..PRODUCERS.len() {
                let (format, idempotence) = PRODUCERS[(turn + round) % PRODUCERS.len()];
                let topic = format!("formats-written-f{format}-{idempotence}-b{batch}-r{round}");
                let produce = ProduceSpec {
                    message_format: format,
                    idempotence,
                    partitions: spec.written_partitions,
                    ..ProduceSpec::new(
                        brokers,
                        &topic,
                        Length::Messages(spec.messages),
                        spec.size,
                        batch,
                        AckMode::Written,
                    )
                };
                let label = format!(
                    "format {format} acks written batch {batch}, idempotence {idempotence} (round {round})"
                );
                let ((_, summary), broker_cpu, client_cpu) =
                    cpu_per_message(pid, spec.messages, || {
                        measure(&label, "sent", Some(spec.messages), 0.0, |stats| {
                            workload::produce(&produce, stats)
                        })
                    })?;
                let latency = summary.latency.as_ref();
                rows.push(IdempotenceRow {
                    format,
                    batch,
                    idempotence,
                    round,
                    msgs_per_sec: summary.msgs_per_sec,
                    broker_cpu_us: broker_cpu,
                    client_cpu_us: client_cpu,
                    p50_ms: latency.map_or(f64::NAN, |l| l.p50_ms),
                    p999_ms: latency.map_or(f64::NAN, |l| l.p999_ms),
                });
                client.delete_topic(&topic)?;
            }
        }
    }
    Ok(rows)
}

/// The median of `f` over `rows` (NaN for none).
fn median<R>(rows: &[&R], f: &dyn Fn(&R) -> f64) -> f64 {
    let mut v: Vec<f64> = rows.iter().map(|r| f(r)).collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The median of each experiment's rounds per format, then the codecs.
pub fn table(report: &FormatsReport) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "The paper's experiments, {} messages of 200 bytes, median of the rounds\n",
        report.messages
    ));
    out.push_str(
        "experiment         format  msg/s        broker µs/msg  client µs/msg  bytes/msg\n",
    );
    for experiment in ["produce-batch-1", "produce-batch-50", "consume"] {
        for format in [1, 2] {
            let rows: Vec<&FormatRow> = report
                .formats
                .iter()
                .filter(|r| r.format == format && r.experiment == experiment)
                .collect();
            let median = |f: &dyn Fn(&FormatRow) -> f64| median(&rows, f);
            let bytes = rows
                .first()
                .and_then(|r| r.bytes_per_message)
                .map_or("-".to_string(), |b| format!("{b:.1}"));
            out.push_str(&format!(
                "{experiment:<18} {format:<7} {:<12.0} {:<14.3} {:<14.3} {bytes}\n",
                median(&|r| r.msgs_per_sec),
                median(&|r| r.broker_cpu_us),
                median(&|r| r.client_cpu_us),
            ));
        }
    }
    out.push_str(&format!(
        "\nFormat 2 codecs on JSON log lines, {} messages, {} a batch\n",
        report.codec_messages, report.codec_batch
    ));
    out.push_str("codec   payload  stored  ratio  produce msg/s  producer µs  broker µs  consume msg/s  consumer µs  broker µs\n");
    for c in &report.codecs {
        out.push_str(&format!(
            "{:<7} {:<8.1} {:<7.1} {:<6.2} {:<14.0} {:<12.3} {:<10.3} {:<14.0} {:<12.3} {:.3}\n",
            c.codec,
            c.payload_bytes,
            c.stored_bytes,
            c.ratio,
            c.produce_msgs_per_sec,
            c.producer_cpu_us,
            c.broker_produce_cpu_us,
            c.consume_msgs_per_sec,
            c.consumer_cpu_us,
            c.broker_consume_cpu_us,
        ));
    }
    out.push_str(&format!(
        "\nAcks written, {} partitions: format 1, format 2, format 2 numbered (idempotent), {} messages, median of the rounds\n",
        report.written_partitions, report.messages
    ));
    out.push_str(
        "batch  format  idempotence  msg/s        broker µs/msg  client µs/msg  p50 ms  p99.9 ms\n",
    );
    for batch in [50usize, 1000] {
        for (format, idempotence) in [(1u32, false), (2, false), (2, true)] {
            let rows: Vec<&IdempotenceRow> = report
                .idempotence
                .iter()
                .filter(|r| r.batch == batch && r.format == format && r.idempotence == idempotence)
                .collect();
            let median = |f: &dyn Fn(&IdempotenceRow) -> f64| median(&rows, f);
            out.push_str(&format!(
                "{batch:<6} {format:<7} {:<12} {:<12.0} {:<14.3} {:<14.3} {:<7.2} {:.2}\n",
                if idempotence { "on" } else { "off" },
                median(&|r| r.msgs_per_sec),
                median(&|r| r.broker_cpu_us),
                median(&|r| r.client_cpu_us),
                median(&|r| r.p50_ms),
                median(&|r| r.p999_ms),
            ));
        }
    }
    out
}
