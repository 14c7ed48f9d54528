//! End to end: producers and consumers at once, every message checked.
//!
//! Each payload starts with a 20-byte stamp — the partition's sequence
//! number (u64), the partition (u32) and the intended send time in
//! nanoseconds since the epoch (u64), all little-endian — then filler. The
//! consumers read from the offsets the partitions had before the run and,
//! per partition, count messages never seen (lost), seen twice (duplicated)
//! and seen after a later one (out of order); latency is receive time minus
//! intended send time. `inject_loss` / `inject_duplicate` make the producer
//! skip or repeat one sequence number of partition 0, to prove the checker
//! catches both.

use crate::stats::Stats;
use crate::workload::{ensure_topic, pace};
use anyhow::Context;
use protocol::client::{
    AckMode, Client, Consumer, OffsetSpec, Partitioner, Producer, ProducerConfig,
};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Bytes of the stamp at the start of every e2e payload.
pub const STAMP_BYTES: usize = 20;

/// An e2e run's settings.
#[derive(Debug, Clone)]
pub struct E2eSpec {
    /// Broker addresses.
    pub brokers: String,
    /// Topic (created when missing).
    pub topic: String,
    /// Partitions of a created topic.
    pub partitions: u32,
    /// Messages to send.
    pub messages: u64,
    /// Payload size (at least the 20-byte stamp).
    pub size: usize,
    /// Messages per produce request.
    pub batch: usize,
    /// Acknowledgement mode.
    pub acks: AckMode,
    /// Fixed rate in messages per second.
    pub rate: Option<f64>,
    /// Skip this sequence number of partition 0 (counted as sent).
    pub inject_loss: Option<u64>,
    /// Send this sequence number of partition 0 twice.
    pub inject_duplicate: Option<u64>,
    /// How long consumers wait for missing messages after the producer ends.
    pub grace: Duration,
}

/// One partition's delivery check.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct PartitionCheck {
    /// The partition.
    pub partition: u32,
    /// Sequence numbers the producer counted as sent.
    pub sent: u64,
    /// Distinct sequence numbers received.
    pub received: u64,
    /// Sent but never received.
    pub lost: u64,
    /// Received more than once (extra copies).
    pub duplicated: u64,
    /// Received after a higher sequence number of the same partition.
    pub out_of_order: u64,
}

#[derive(Default)]
struct Tracker {
    seen: Vec<bool>,
    distinct: u64,
    duplicated: u64,
    out_of_order: u64,
    highest: Option<u64>,
}

impl Tracker {
    fn observe(&mut self, seq: u64) {
        let index = seq as usize;
        if index >= self.seen.len() {
            self.seen
                .resize((index + 1).max(self.seen.len() * 2), false);
        }
        if self.seen[index] {
            self.duplicated += 1;
            return;
        }
        self.seen[index] = true;
        self.distinct += 1;
        match self.highest {
            Some(h) if seq < h => self.out_of_order += 1,
            _ => self.highest = Some(seq),
        }
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Runs one e2e test; latencies go to `stats`, delivery checks are returned.
pub fn run(spec: &E2eSpec, stats: &Arc<Stats>) -> anyhow::Result<Vec<PartitionCheck>> {
    let size = spec.size.max(STAMP_BYTES);
    let client = Client::connect(&spec.brokers)
        .with_context(|| format!("no broker reachable at {}", spec.brokers))?;
    let partitions = ensure_topic(&client, &spec.topic, spec.partitions)?;
    let mut consumers = Vec::new();
    for p in 0..partitions {
        // Start where this run's messages will begin: the end offset, which
        // may lie above the flushed (visible) offset.
        let (_, offsets) = client.list_offsets(&spec.topic, p, OffsetSpec::Latest, 0)?;
        let mut consumer = Consumer::new(&client, &spec.topic, p, offsets.end_offset)?;
        consumer.set_max_wait_ms(50);
        consumers.push(consumer);
    }
    let trackers: Arc<Mutex<Vec<Tracker>>> = Arc::new(Mutex::new(
        (0..partitions).map(|_| Tracker::default()).collect(),
    ));
    let producing = Arc::new(AtomicBool::new(true));
    stats.reset();

    let consumer_thread = {
        let trackers = trackers.clone();
        let producing = producing.clone();
        let stats = stats.clone();
        let grace = spec.grace;
        let expected = spec.messages;
        std::thread::spawn(move || -> anyhow::Result<()> {
            let mut quiet_since: Option<Instant> = None;
            loop {
                let mut got = 0u64;
                for consumer in &mut consumers {
                    let mut stamps = Vec::new();
                    consumer.poll_with(|m| {
                        if m.value.len() >= STAMP_BYTES {
                            let seq =
                                u64::from_le_bytes(m.value[0..8].try_into().unwrap_or_default());
                            let partition =
                                u32::from_le_bytes(m.value[8..12].try_into().unwrap_or_default());
                            let sent_ns =
                                u64::from_le_bytes(m.value[12..20].try_into().unwrap_or_default());
                            stamps.push((seq, partition, sent_ns, m.value.len()));
                        }
                    })?;
                    let now = now_ns();
                    let mut trackers = trackers.lock().unwrap_or_else(|p| p.into_inner());
                    for (seq, partition, sent_ns, len) in stamps {
                        if let Some(tracker) = trackers.get_mut(partition as usize) {
                            tracker.observe(seq);
                        }
                        stats.add(1, len as u64);
                        stats.record_latency(Duration::from_nanos(now.saturating_sub(sent_ns)), 1);
                        got += 1;
                    }
                }
                let distinct: u64 = trackers
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .iter()
                    .map(|t| t.distinct)
                    .sum();
                if !producing.load(Ordering::SeqCst) {
                    if distinct >= expected && got == 0 {
                        return Ok(());
                    }
                    if got == 0 {
                        let since = *quiet_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= grace {
                            return Ok(());
                        }
                    } else {
                        quiet_since = None;
                    }
                }
            }
        })
    };

    let mut sent = vec![0u64; partitions as usize];
    let produce_result = (|| -> anyhow::Result<()> {
        let mut producer = Producer::new(
            &client,
            &spec.topic,
            ProducerConfig {
                acks: spec.acks,
                batch_messages: spec.batch.max(1),
                linger: Duration::from_millis(2),
                partitioner: Partitioner::RoundRobin,
                ..ProducerConfig::default()
            },
        )?;
        let started = Instant::now();
        let wall_start = now_ns();
        let mut payload = vec![b'x'; size];
        for i in 0..spec.messages {
            let partition = (i % u64::from(partitions)) as u32;
            let seq = sent[partition as usize];
            sent[partition as usize] += 1;
            let intended = match spec.rate {
                Some(rate) => started + Duration::from_secs_f64(i as f64 / rate),
                None => Instant::now(),
            };
            pace(intended);
            let sent_ns = wall_start + (intended - started).as_nanos() as u64;
            payload[0..8].copy_from_slice(&seq.to_le_bytes());
            payload[8..12].copy_from_slice(&partition.to_le_bytes());
            payload[12..20].copy_from_slice(&sent_ns.to_le_bytes());
            if partition == 0 && spec.inject_loss == Some(seq) {
                continue;
            }
            producer.send_to(partition, None, &payload)?;
            if partition == 0 && spec.inject_duplicate == Some(seq) {
                producer.send_to(partition, None, &payload)?;
            }
        }
        producer.flush()?;
        Ok(())
    })();
    producing.store(false, Ordering::SeqCst);
    let consume_result = consumer_thread
        .join()
        .map_err(|_| anyhow::anyhow!("the consumer thread panicked"))?;
    stats.freeze();
    produce_result?;
    consume_result?;
    let trackers = trackers.lock().unwrap_or_else(|p| p.into_inner());
    Ok(trackers
        .iter()
        .enumerate()
        .map(|(p, t)| PartitionCheck {
            partition: p as u32,
            sent: sent[p],
            received: t.distinct,
            lost: sent[p].saturating_sub(t.distinct),
            duplicated: t.duplicated,
            out_of_order: t.out_of_order,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tracker_tells_duplicates_and_reordering_apart() {
        let mut t = Tracker::default();
        for seq in [0, 1, 3, 2, 3, 5] {
            t.observe(seq);
        }
        assert_eq!(t.distinct, 5);
        assert_eq!(t.duplicated, 1);
        assert_eq!(t.out_of_order, 1);
    }
}
