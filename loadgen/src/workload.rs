//! Producer and consumer workloads against a ringlog broker.
//!
//! Throughput is counted the way the paper counts it: a producer run ends
//! when the broker has appended every message (for `acks = none`, the
//! producer polls the partitions' end offsets, so time spent in socket
//! buffers is not hidden); a consumer run ends when every message was
//! received and CRC-checked.

use anyhow::{bail, Context};
use protocol::client::{
    AckMode, Client, Consumer, OffsetSpec, Partitioner, Producer, ProducerConfig, TopicSettings,
};
use protocol::message::MESSAGE_HEADER_BYTES;
use std::time::{Duration, Instant};

/// A produce run's settings.
#[derive(Debug, Clone)]
pub struct ProduceSpec {
    /// Topic (created when missing).
    pub topic: String,
    /// Partitions of a created topic.
    pub partitions: u32,
    /// Messages to send.
    pub messages: u64,
    /// Payload bytes per message.
    pub size: usize,
    /// Messages per produce request.
    pub batch: usize,
    /// Acknowledgement mode.
    pub acks: AckMode,
    /// Send to owning shards directly (true) or via the bootstrap port.
    pub shard_aware: bool,
}

/// What a run measured.
#[derive(Debug, Clone, Copy)]
pub struct RunResult {
    /// Messages moved.
    pub messages: u64,
    /// Payload bytes moved.
    pub payload_bytes: u64,
    /// Wall time until the broker had every message (appended; acknowledged
    /// for acks other than none; received for a consumer).
    pub elapsed: Duration,
    /// Producer runs: wall time until every message was also flushed
    /// (fsynced and visible to consumers).
    pub flushed_elapsed: Option<Duration>,
}

impl RunResult {
    /// Messages per second.
    pub fn msgs_per_sec(&self) -> f64 {
        self.messages as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Payload megabytes (10^6) per second.
    pub fn mb_per_sec(&self) -> f64 {
        self.payload_bytes as f64 / 1e6 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Creates the topic if it does not exist; returns its partition count.
pub fn ensure_topic(client: &Client, topic: &str, partitions: u32) -> anyhow::Result<u32> {
    let metadata = client.metadata(&[])?;
    if let Some(t) = metadata.topics.iter().find(|t| t.name == topic) {
        return Ok(t.partitions.len() as u32);
    }
    let created = client.create_topic(topic, partitions, &TopicSettings::default())?;
    Ok(created.partitions.len() as u32)
}

/// Sums of the (end, flushed) offsets of every partition.
fn total_offsets(client: &Client, topic: &str, partitions: u32) -> anyhow::Result<(u64, u64)> {
    let (mut end, mut flushed) = (0, 0);
    for p in 0..partitions {
        let offsets = client.list_offsets(topic, p, OffsetSpec::Latest, 0)?.1;
        end += offsets.end_offset;
        flushed += offsets.flushed_offset;
    }
    Ok((end, flushed))
}

/// Polls the partitions until the chosen sum of offsets reaches `expected`.
fn wait_for_offsets(
    client: &Client,
    topic: &str,
    partitions: u32,
    expected: u64,
    flushed: bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (end, flushed_end) = total_offsets(client, topic, partitions)?;
        let reached = if flushed { flushed_end } else { end };
        if reached >= expected {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the broker reached offset sum {reached} of {expected} within 120 s of the last send");
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Sends `spec.messages` messages of `spec.size` bytes, round-robin over the
/// partitions, `spec.batch` per request, pipelined.
pub fn produce(client: &Client, spec: &ProduceSpec) -> anyhow::Result<RunResult> {
    let partitions = ensure_topic(client, &spec.topic, spec.partitions)?;
    let (before, _) = total_offsets(client, &spec.topic, partitions)?;
    let mut producer = Producer::new(
        client,
        &spec.topic,
        ProducerConfig {
            acks: spec.acks,
            batch_messages: spec.batch.max(1),
            batch_bytes: usize::MAX,
            linger: Duration::from_secs(3600),
            partitioner: Partitioner::RoundRobin,
            inflight_max: 4096,
            shard_aware: spec.shard_aware,
        },
    )?;
    let payload: Vec<u8> = (0..spec.size).map(|i| b'a' + (i % 26) as u8).collect();
    let started = Instant::now();
    for i in 0..spec.messages {
        // Whole batches go to one partition, then the next (round-robin by batch).
        let partition = ((i / spec.batch.max(1) as u64) % u64::from(partitions)) as u32;
        producer.send_to(partition, None, &payload)?;
    }
    producer.flush()?;
    let expected = before + spec.messages * (spec.size + MESSAGE_HEADER_BYTES) as u64;
    if spec.acks == AckMode::None {
        // Fire-and-forget: the run ends when the broker has every byte.
        wait_for_offsets(client, &spec.topic, partitions, expected, false)?;
    }
    let elapsed = started.elapsed();
    wait_for_offsets(client, &spec.topic, partitions, expected, true)?;
    Ok(RunResult {
        messages: spec.messages,
        payload_bytes: spec.messages * spec.size as u64,
        elapsed,
        flushed_elapsed: Some(started.elapsed()),
    })
}

/// A consume run's settings.
#[derive(Debug, Clone)]
pub struct ConsumeSpec {
    /// Topic.
    pub topic: String,
    /// Messages to read (from the earliest offset of every partition).
    pub messages: u64,
    /// Bytes per fetch.
    pub fetch_bytes: u32,
}

/// Reads `spec.messages` messages from the start of every partition, one
/// consumer per partition polled in turn, checking every CRC.
pub fn consume(client: &Client, spec: &ConsumeSpec) -> anyhow::Result<RunResult> {
    let metadata = client.metadata(&[&spec.topic])?;
    let topic = metadata.topics.first().context("topic missing")?;
    let mut consumers = Vec::new();
    for p in 0..topic.partitions.len() as u32 {
        let (start, _) = client.list_offsets(&spec.topic, p, OffsetSpec::Earliest, 0)?;
        let mut consumer = Consumer::new(client, &spec.topic, p, start)?;
        consumer.set_max_bytes(spec.fetch_bytes);
        consumer.set_max_wait_ms(100);
        consumers.push(consumer);
    }
    let started = Instant::now();
    let mut messages = 0u64;
    let mut payload_bytes = 0u64;
    let mut last_progress = Instant::now();
    while messages < spec.messages {
        let mut progressed = false;
        for consumer in &mut consumers {
            let n = consumer.poll_with(|m| {
                payload_bytes += m.value.len() as u64;
            })?;
            messages += n as u64;
            progressed |= n > 0;
        }
        if progressed {
            last_progress = Instant::now();
        } else if last_progress.elapsed() > Duration::from_secs(10) {
            bail!(
                "read {messages} of {} messages; nothing new for 10 s",
                spec.messages
            );
        }
    }
    Ok(RunResult {
        messages,
        payload_bytes,
        elapsed: started.elapsed(),
        flushed_elapsed: None,
    })
}
