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
use crate::workload::{ensure_topic, existing_partitions, pace, paces_whole_batches, Length};
use anyhow::Context;
use protocol::client::{
    AckMode, OffsetSpec, Partitioner, Producer, ProducerConfig, Start, TopicConsumer,
    TopicConsumerConfig,
};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The producers' linger: partial batches leave after this.
const LINGER: Duration = Duration::from_millis(2);

/// Bytes of the stamp at the start of every e2e payload.
pub const STAMP_BYTES: usize = 20;

/// An e2e run's settings.
#[derive(Debug, Clone)]
pub struct E2eSpec {
    /// Broker addresses.
    pub brokers: String,
    /// Where the consumers read instead, when set: another cluster that
    /// holds a copy of the topic (a mirror's target), so the latency is
    /// from a produce in one cluster to its visibility in the other.
    pub consume_from: Option<String>,
    /// Topic (created when missing).
    pub topic: String,
    /// Partitions of a created topic.
    pub partitions: u32,
    /// How many messages, or for how long.
    pub length: Length,
    /// Payload size (at least the 20-byte stamp).
    pub size: usize,
    /// Messages per produce request.
    pub batch: usize,
    /// Acknowledgement mode.
    pub acks: AckMode,
    /// Fixed total rate in messages per second.
    pub rate: Option<f64>,
    /// Producer threads; partition p is written by producer p mod
    /// producers only, so each partition's order can be checked.
    pub producers: usize,
    /// Consumer threads; partition p is read by consumer p mod consumers.
    pub consumers: usize,
    /// Skip this sequence number of partition 0 (counted as sent).
    pub inject_loss: Option<u64>,
    /// Send this sequence number of partition 0 twice.
    pub inject_duplicate: Option<u64>,
    /// How long consumers wait for missing messages after the producers end.
    pub grace: Duration,
    /// Publish latencies (send to acknowledgement) in the first `warmup`
    /// of the run are not counted.
    pub warmup: Duration,
}

/// What an e2e run found besides the consumers' latencies.
#[derive(Debug, Clone)]
pub struct E2eOutcome {
    /// Per partition: sent, received, lost, duplicated, out of order.
    pub checks: Vec<PartitionCheck>,
    /// Publish latency: from each message's intended send time to its
    /// acknowledgement (acks written or flushed; `None` with acks none).
    pub publish: Option<crate::stats::LatencySummary>,
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

/// What producers and consumers share.
struct Shared {
    trackers: Mutex<Vec<Tracker>>,
    /// Cleared when every producer has finished.
    producing: AtomicBool,
    /// Messages the producers counted as sent; final once `producing` is false.
    sent: AtomicU64,
    /// Set by the run's clock when a `--duration` is over.
    stop: AtomicBool,
}

/// Runs one e2e test; end-to-end latencies go to `stats`; delivery checks
/// and publish latencies are returned.
pub fn run(spec: &E2eSpec, stats: &Arc<Stats>) -> anyhow::Result<E2eOutcome> {
    let client = crate::connect(&spec.brokers)
        .with_context(|| format!("no broker reachable at {}", spec.brokers))?;
    // Checked before creating anything: a refused run leaves no topic behind.
    let producers = spec.producers.max(1);
    let partitions = existing_partitions(&client, &spec.topic)?.unwrap_or(spec.partitions.max(1));
    anyhow::ensure!(
        producers <= partitions as usize,
        "e2e gives every partition one producer so its order can be checked: \
         {producers} producers need at least {producers} partitions (the topic has {partitions})"
    );
    let partitions = ensure_topic(&client, &spec.topic, spec.partitions, 0)?;
    let consumers = spec.consumers.clamp(1, partitions as usize);
    let client = match &spec.consume_from {
        Some(brokers) => {
            crate::connect(brokers).with_context(|| format!("no broker reachable at {brokers}"))?
        }
        None => client,
    };
    // Consumers start where this run's messages will begin: the end offset,
    // which may lie above the flushed (visible) offset. Each reads its
    // partitions through one TopicConsumer, which keeps a fetch in flight on
    // every one of them: polling them in turn would make a message wait for
    // the long-polls of the partitions before it.
    let mut starts: Vec<BTreeMap<u32, u64>> = (0..consumers).map(|_| BTreeMap::new()).collect();
    for p in 0..partitions {
        let (_, offsets) = client.list_offsets(&spec.topic, p, OffsetSpec::Latest, 0)?;
        starts[p as usize % consumers].insert(p, offsets.end_offset);
    }
    let mut groups = Vec::with_capacity(consumers);
    for start in starts {
        let owned: Vec<u32> = start.keys().copied().collect();
        groups.push(TopicConsumer::for_partitions(
            &client,
            &spec.topic,
            &owned,
            Start::At(start),
            TopicConsumerConfig::default(),
        )?);
    }
    let shared = Arc::new(Shared {
        trackers: Mutex::new((0..partitions).map(|_| Tracker::default()).collect()),
        producing: AtomicBool::new(true),
        sent: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    stats.reset();

    let consumer_threads: Vec<_> = groups
        .into_iter()
        .map(|group| {
            let shared = shared.clone();
            let stats = stats.clone();
            let grace = spec.grace;
            std::thread::spawn(move || consume(group, &shared, &stats, grace))
        })
        .collect();

    let started = Instant::now();
    let wall_start = now_ns();
    let publish = Stats::new();
    let producer_threads: Vec<_> = (0..producers)
        .map(|index| {
            let spec = spec.clone();
            let shared = shared.clone();
            let publish = publish.clone();
            std::thread::spawn(move || {
                let clock = Clock {
                    started,
                    wall_start,
                };
                produce(&spec, index, partitions, clock, &shared, &publish)
            })
        })
        .collect();
    if let Length::Duration(d) = spec.length {
        while started.elapsed() < d && !producer_threads.iter().all(|t| t.is_finished()) {
            std::thread::sleep(Duration::from_millis(20));
        }
        shared.stop.store(true, Ordering::SeqCst);
    }
    let mut sent = vec![0u64; partitions as usize];
    let mut produce_result = Ok(());
    for thread in producer_threads {
        match thread.join() {
            Ok(Ok(counts)) => {
                for (p, n) in counts {
                    sent[p as usize] += n;
                }
            }
            Ok(Err(error)) => produce_result = Err(error),
            Err(_) => produce_result = Err(anyhow::anyhow!("a producer thread panicked")),
        }
    }
    shared
        .sent
        .store(sent.iter().sum::<u64>(), Ordering::SeqCst);
    shared.producing.store(false, Ordering::SeqCst);
    let mut consume_result = Ok(());
    for thread in consumer_threads {
        match thread.join() {
            Ok(Ok(())) => {}
            Ok(Err(error)) => consume_result = Err(error),
            Err(_) => consume_result = Err(anyhow::anyhow!("a consumer thread panicked")),
        }
    }
    stats.freeze();
    produce_result?;
    consume_result?;
    let trackers = shared.trackers.lock().unwrap_or_else(|p| p.into_inner());
    let checks = trackers
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
        .collect();
    Ok(E2eOutcome {
        checks,
        publish: publish.summary().latency,
    })
}

/// When the run started, on both clocks.
#[derive(Clone, Copy)]
struct Clock {
    started: Instant,
    wall_start: u64,
}

/// One producer: the partitions `p` with `p % producers == index`, in turn,
/// each message stamped with its partition's next sequence number and its
/// intended send time. Returns (partition, messages sent) pairs.
fn produce(
    spec: &E2eSpec,
    index: usize,
    partitions: u32,
    clock: Clock,
    shared: &Shared,
    publish: &Stats,
) -> anyhow::Result<Vec<(u32, u64)>> {
    let Clock {
        started,
        wall_start,
    } = clock;
    let producers = spec.producers.max(1);
    let mine: Vec<u32> = (0..partitions)
        .filter(|p| *p as usize % producers == index)
        .collect();
    let count = spec.length.share(index, producers);
    let rate = spec.rate.map(|r| r / producers as f64);
    let client = crate::connect(&spec.brokers)?;
    let mut producer = Producer::new(
        &client,
        &spec.topic,
        ProducerConfig {
            acks: spec.acks,
            batch_messages: spec.batch.max(1),
            linger: LINGER,
            partitioner: Partitioner::RoundRobin,
            track_latency: spec.acks != AckMode::None,
            ..ProducerConfig::default()
        },
    )?;
    let record = |producer: &Producer| {
        let counted = started.elapsed() >= spec.warmup;
        for (latency, count) in producer.take_latencies() {
            if counted {
                publish.record_latency(latency, u64::from(count));
            }
        }
    };
    let mut sequences = vec![0u64; mine.len()];
    let batch = spec.batch.max(1) as u64;
    // Round robin over `mine`: a partition's batch fills every
    // `batch * mine.len()` messages.
    let whole_batches = rate.is_some_and(|rate| {
        paces_whole_batches(
            spec.batch.max(1),
            spec.size,
            mine.len(),
            rate,
            LINGER,
            ProducerConfig::default().batch_bytes,
        )
    });
    let mut payload = vec![b'x'; spec.size.max(STAMP_BYTES)];
    let mut i = 0u64;
    while i < count && !shared.stop.load(Ordering::Relaxed) {
        let slot = (i % mine.len() as u64) as usize;
        let partition = mine[slot];
        let seq = sequences[slot];
        sequences[slot] += 1;
        let intended = match rate {
            Some(rate) => started + Duration::from_secs_f64(i as f64 / rate),
            None => Instant::now(),
        };
        i += 1;
        if !whole_batches || (seq + 1).is_multiple_of(batch) {
            pace(intended);
        }
        let sent_ns = wall_start + (intended - started).as_nanos() as u64;
        payload[0..8].copy_from_slice(&seq.to_le_bytes());
        payload[8..12].copy_from_slice(&partition.to_le_bytes());
        payload[12..20].copy_from_slice(&sent_ns.to_le_bytes());
        if partition == 0 && spec.inject_loss == Some(seq) {
            continue;
        }
        producer.send_to_at(partition, None, &payload, intended)?;
        if partition == 0 && spec.inject_duplicate == Some(seq) {
            producer.send_to_at(partition, None, &payload, intended)?;
        }
        if i.is_multiple_of(1024) {
            record(&producer);
        }
    }
    producer.flush()?;
    record(&producer);
    Ok(mine.into_iter().zip(sequences).collect())
}

/// One consumer: polls its partitions until every sent message is seen
/// after the producers end, or nothing new arrives for `grace`.
fn consume(
    mut consumer: TopicConsumer,
    shared: &Shared,
    stats: &Stats,
    grace: Duration,
) -> anyhow::Result<()> {
    let mut quiet_since: Option<Instant> = None;
    loop {
        let mut got = 0u64;
        let messages = consumer.poll(Duration::from_millis(50))?;
        let now = now_ns();
        {
            let mut trackers = shared.trackers.lock().unwrap_or_else(|p| p.into_inner());
            for m in messages.iter().filter(|m| m.value.len() >= STAMP_BYTES) {
                let seq = u64::from_le_bytes(m.value[0..8].try_into().unwrap_or_default());
                let partition = u32::from_le_bytes(m.value[8..12].try_into().unwrap_or_default());
                let sent_ns = u64::from_le_bytes(m.value[12..20].try_into().unwrap_or_default());
                if let Some(tracker) = trackers.get_mut(partition as usize) {
                    tracker.observe(seq);
                }
                stats.add(1, m.value.len() as u64);
                stats.record_latency(Duration::from_nanos(now.saturating_sub(sent_ns)), 1);
                got += 1;
            }
        }
        if shared.producing.load(Ordering::SeqCst) {
            quiet_since = None;
            continue;
        }
        let distinct: u64 = shared
            .trackers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|t| t.distinct)
            .sum();
        if got > 0 {
            quiet_since = None;
        } else if distinct >= shared.sent.load(Ordering::SeqCst)
            || quiet_since.get_or_insert_with(Instant::now).elapsed() >= grace
        {
            return Ok(());
        }
    }
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
