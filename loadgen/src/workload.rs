//! ringlog workloads: producers, consumers, and end-to-end runs.
//!
//! Throughput is counted the way the paper counts it: a producer run ends
//! when the broker has appended every message (with `acks = none` the run
//! polls the partitions' end offsets, so bytes still in socket buffers are
//! not counted as done); a consumer run ends when every message was received
//! and CRC-checked. With `rate`, each message has an *intended* send time on
//! a fixed schedule and latencies are measured from it, so a stall cannot
//! hide behind the sends it delayed (coordinated omission).

use crate::stats::Stats;
use anyhow::{bail, Context};
use protocol::batch::Compression;
use protocol::client::{
    AckMode, Client, ClientConfig, Connection, Consumer, OffsetSpec, OutOfRange, Partitioner,
    PrefetchConsumer, Producer, ProducerConfig, Start, TopicConsumer, TopicConsumerConfig,
    TopicSettings,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a run goes.
#[derive(Debug, Clone, Copy)]
pub enum Length {
    /// This many messages in all.
    Messages(u64),
    /// This long in all (warm-up included).
    Duration(Duration),
}

impl Length {
    /// What producer `index` of `producers` sends: an even split of a
    /// message count (the first ones take the remainder), or no bound for a
    /// timed run.
    pub fn share(self, index: usize, producers: usize) -> u64 {
        let (index, producers) = (index as u64, producers.max(1) as u64);
        match self {
            Length::Messages(n) => n / producers + u64::from(index < n % producers),
            Length::Duration(_) => u64::MAX,
        }
    }
}

/// A produce run's settings.
#[derive(Debug, Clone)]
pub struct ProduceSpec {
    /// Broker addresses.
    pub brokers: String,
    /// Topic (created with `partitions` when missing).
    pub topic: String,
    /// Partitions of a created topic.
    pub partitions: u32,
    /// Messages or duration.
    pub length: Length,
    /// Payload bytes per message.
    pub size: usize,
    /// Messages per produce request.
    pub batch: usize,
    /// Acknowledgement mode.
    pub acks: AckMode,
    /// Fixed total rate in messages per second (None = as fast as possible).
    pub rate: Option<f64>,
    /// Producer threads, each with its own connections.
    pub producers: usize,
    /// Send to owning shards directly (true) or via the bootstrap port.
    pub shard_aware: bool,
    /// What the message is.
    pub payload: Payload,
    /// A created topic's message format (0: the broker's default).
    pub message_format: u32,
    /// How format-2 batches are compressed.
    pub compression: Compression,
    /// Format 2 with acks: number the batches (the client's default).
    pub idempotence: bool,
}

impl ProduceSpec {
    /// One unpaced producer thread of the paper's letters to one
    /// partition, straight to its shard, in the topic's own format,
    /// uncompressed and (on format 2 with acks) idempotent: what most runs
    /// change only a field or two of.
    pub fn new(
        brokers: &str,
        topic: &str,
        length: Length,
        size: usize,
        batch: usize,
        acks: AckMode,
    ) -> ProduceSpec {
        ProduceSpec {
            brokers: brokers.to_string(),
            topic: topic.to_string(),
            partitions: 1,
            length,
            size,
            batch,
            acks,
            rate: None,
            producers: 1,
            shard_aware: true,
            payload: Payload::Letters,
            message_format: 0,
            compression: Compression::None,
            idempotence: true,
        }
    }
}

/// What each produced message holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// The same `size` bytes of letters every time (the paper's).
    Letters,
    /// JSON log lines of about `size` bytes from a fixed generator
    /// ([`crate::log_lines`]): what compression is measured on.
    LogLines,
}

/// Creates the topic if it does not exist (in `message_format`, 0 for
/// the broker's default); returns its partition count.
pub fn ensure_topic(
    client: &Client,
    topic: &str,
    partitions: u32,
    message_format: u32,
) -> anyhow::Result<u32> {
    if let Some(existing) = existing_partitions(client, topic)? {
        return Ok(existing);
    }
    let settings = TopicSettings {
        message_format,
        ..TopicSettings::default()
    };
    match client.create_topic(topic, partitions, &settings) {
        Ok(created) => Ok(created.partitions.len() as u32),
        // The broker that answered Metadata had not applied a topic another
        // broker created a moment ago (each follows the registry's watch):
        // it exists; wait until this client sees it.
        Err(error) if error.code() == Some(protocol::ErrorCode::TopicAlreadyExists) => {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if let Some(existing) = existing_partitions(client, topic)? {
                    return Ok(existing);
                }
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "{error}, but Metadata does not list it"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Err(error) => Err(error.into()),
    }
}

/// The partition count of `topic`, if it exists.
pub fn existing_partitions(client: &Client, topic: &str) -> anyhow::Result<Option<u32>> {
    let metadata = client.metadata(&[])?;
    Ok(metadata
        .topics
        .iter()
        .find(|t| t.name == topic)
        .map(|t| t.partitions.len() as u32))
}

/// Sums of the (end, flushed) offsets of every partition.
pub fn total_offsets(client: &Client, topic: &str, partitions: u32) -> anyhow::Result<(u64, u64)> {
    let (mut end, mut flushed) = (0, 0);
    for p in 0..partitions {
        let offsets = client.list_offsets(topic, p, OffsetSpec::Latest, 0)?.1;
        end += offsets.end_offset;
        flushed += offsets.flushed_offset;
    }
    Ok((end, flushed))
}

/// Polls until the sum of end (or flushed) offsets reaches `expected`.
pub fn wait_for_offsets(
    client: &Client,
    topic: &str,
    partitions: u32,
    expected: u64,
    flushed: bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let (end, flushed_end) = total_offsets(client, topic, partitions)?;
        let reached = if flushed { flushed_end } else { end };
        if reached >= expected {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the broker reached offset sum {reached} of {expected} within 300 s of the last send");
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// Waits until `at` by sleeping, or not at all when `at` is closer than a
/// sleep's wake-up takes.
///
/// It used to sleep to within 300 µs and spin the rest on `sched_yield`.
/// A producer at 10,000 msg/s paces every 100 µs, so it never slept: on
/// this two-core machine two such producers took both cores from the
/// broker and the consumers they measure, and `loadgen e2e --partitions 2
/// --producers 2 --consumers 1 --rate 20000` read its messages with e2e p50
/// 4.6–5.5 s, max 11 s. Sleeping for every wait instead costs a wake-up
/// (tens of µs here) even for a wait of 2 µs, so a producer pacing a batch
/// every 13 µs (738k msg/s) fell seconds behind. So: a wait longer than
/// `SLEEP_MIN` is slept (timer slack 1 µs instead of 50 µs), a shorter one
/// is skipped and the message leaves up to `SLEEP_MIN` early. Latency still
/// counts from the intended time, so a late wake-up is measured; an early
/// send shortens a latency by at most `SLEEP_MIN`, as handing a batch's
/// messages over with its last one already does
/// (`loadgen/results/2026-12-02-vm/give-way/README.md`).
pub fn pace(at: Instant) {
    /// Below this a sleep would end later than the wait it was asked for.
    const SLEEP_MIN: Duration = Duration::from_micros(50);
    thread_local! {
        static PRECISE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    let left = at.saturating_duration_since(Instant::now());
    if left <= SLEEP_MIN {
        return;
    }
    PRECISE.with(|precise| {
        if !precise.replace(true) {
            // SAFETY: PR_SET_TIMERSLACK takes a plain integer and only
            // changes this thread's timer slack.
            unsafe {
                libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
            }
        }
    });
    std::thread::sleep(left);
}

/// Whether a paced producer may wait only for the intended time of each
/// batch's last message, and hand the batch's other messages over with it.
///
/// A batch leaves the producer when its last message is sent, unless its
/// linger ends first (or its bytes fill it). When every batch of a
/// partition fills within a quarter of the linger, pacing the other
/// messages one by one changes nothing on the wire, and costs a paced
/// wait per message — at 600,000 msg/s that is a spinning core on a
/// two-core machine, taken from the broker being measured (issue 9, item
/// 4). Every message keeps its own intended time, so latency is still
/// counted from when it was due.
pub fn paces_whole_batches(
    batch: usize,
    size: usize,
    partitions: usize,
    rate: f64,
    linger: Duration,
    batch_bytes: usize,
) -> bool {
    let span = (batch * partitions.max(1)) as f64 / rate;
    span < linger.as_secs_f64() / 4.0 && batch.saturating_mul(size) <= batch_bytes / 2
}

/// What a produce run did besides counting: the payload bytes the broker
/// stored, and when every message was also flushed.
#[derive(Debug, Clone, Copy)]
pub struct ProduceOutcome {
    /// Messages sent.
    pub messages: u64,
    /// Offset bytes the run added (payload + framing), from the broker.
    pub stored_bytes: u64,
    /// Time from the start until every message was flushed.
    pub flushed_after: Duration,
}

/// Runs producers as `spec` says, counting into `stats`.
pub fn produce(spec: &ProduceSpec, stats: &Arc<Stats>) -> anyhow::Result<ProduceOutcome> {
    let client = crate::connect(&spec.brokers)
        .with_context(|| format!("no broker reachable at {}", spec.brokers))?;
    let partitions = ensure_topic(&client, &spec.topic, spec.partitions, spec.message_format)?;
    let (before, _) = total_offsets(&client, &spec.topic, partitions)?;
    let producers = spec.producers.max(1);
    let sent = Arc::new(AtomicU64::new(0));
    let sent_bytes = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    stats.reset();
    let mut threads = Vec::new();
    for index in 0..producers {
        let spec = spec.clone();
        let stats = stats.clone();
        let sent = sent.clone();
        let sent_bytes = sent_bytes.clone();
        let stop = stop.clone();
        threads.push(std::thread::spawn(move || -> anyhow::Result<()> {
            let bytes = produce_thread(&spec, index, partitions, started, &stats, &sent, &stop)?;
            sent_bytes.fetch_add(bytes, Ordering::SeqCst);
            Ok(())
        }));
    }
    if let Length::Duration(d) = spec.length {
        while started.elapsed() < d && !threads.iter().all(|t| t.is_finished()) {
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::SeqCst);
    }
    for thread in threads {
        thread
            .join()
            .map_err(|_| anyhow::anyhow!("a producer thread panicked"))??;
    }
    let messages = sent.load(Ordering::SeqCst);
    // What the producers sent, as stored: format 1's messages, format 2's
    // batches (compressed or not).
    let expected = before + sent_bytes.load(Ordering::SeqCst);
    if spec.acks == AckMode::None {
        // Fire-and-forget: the run ends when the broker has every byte.
        wait_for_offsets(&client, &spec.topic, partitions, expected, false)?;
    }
    stats.freeze();
    wait_for_offsets(&client, &spec.topic, partitions, expected, true)?;
    Ok(ProduceOutcome {
        messages,
        stored_bytes: expected - before,
        flushed_after: started.elapsed(),
    })
}

/// A paced producer's linger: a partial batch leaves after this.
const PACED_LINGER: Duration = Duration::from_millis(5);

/// Unacknowledged bytes the producers of one run may hold, together.
const IN_FLIGHT_BYTES: usize = 128 << 20;

/// ...and each producer at least (room for a few large batches).
const IN_FLIGHT_BYTES_MIN: usize = 4 << 20;

/// Log lines a producer cycles through (distinct enough that a codec
/// sees a day's variety, few enough to generate at once).
const LOG_LINES: usize = 8192;

fn produce_thread(
    spec: &ProduceSpec,
    index: usize,
    partitions: u32,
    started: Instant,
    stats: &Stats,
    sent: &AtomicU64,
    stop: &AtomicBool,
) -> anyhow::Result<u64> {
    let my_messages = spec.length.share(index, spec.producers);
    let rate = spec.rate.map(|r| r / spec.producers.max(1) as f64);
    // A benchmark's final flush may wait on a long backlog.
    let client = Client::with_config(
        &spec.brokers,
        ClientConfig {
            flush_timeout: Duration::from_secs(600),
            ..crate::client_config()?
        },
    )?;
    let mut producer = Producer::new(
        &client,
        &spec.topic,
        ProducerConfig {
            acks: spec.acks,
            batch_messages: spec.batch.max(1),
            batch_bytes: usize::MAX,
            // Unpaced runs fill whole batches; paced ones must not sit on a
            // partial batch for long.
            linger: if rate.is_some() {
                PACED_LINGER
            } else {
                Duration::from_secs(3600)
            },
            partitioner: Partitioner::RoundRobin,
            inflight_max: 4096,
            // The run's producers share IN_FLIGHT_BYTES of unacknowledged
            // batches: enough to keep the broker busy, not so much that
            // 32 producers queue 200 MB at the broker and fault it all in
            // on both sides (issue 9, item 2: 430 ms average latency at
            // 512 MiB each, for no more throughput).
            buffer_bytes_max: (IN_FLIGHT_BYTES / spec.producers.max(1)).max(IN_FLIGHT_BYTES_MIN),
            // Unpaced runs measure throughput: requests share writes until
            // the buffer fills (as batches share requests); paced runs
            // measure latency.
            flush_delay: if rate.is_some() {
                Duration::from_micros(100)
            } else {
                Duration::from_secs(3600)
            },
            shard_aware: spec.shard_aware,
            delivery_reports: false,
            track_latency: spec.acks != AckMode::None,
            compression: spec.compression,
            idempotence: spec.idempotence,
            ..ProducerConfig::default()
        },
    )?;
    let payloads: Vec<Vec<u8>> = match spec.payload {
        Payload::Letters => vec![(0..spec.size).map(|i| b'a' + (i % 26) as u8).collect()],
        Payload::LogLines => crate::log_lines::lines(LOG_LINES, spec.size, index as u64),
    };
    let batch = spec.batch.max(1) as u64;
    // Consecutive messages share a partition's batch (see `partition` below).
    let whole_batches = rate.is_some_and(|rate| {
        paces_whole_batches(batch as usize, spec.size, 1, rate, PACED_LINGER, usize::MAX)
    });
    let mut counted = 0u64;
    let mut i = 0u64;
    while i < my_messages {
        if i.is_multiple_of(1024) && stop.load(Ordering::Relaxed) {
            break;
        }
        let partition = (((i / batch) + index as u64) % u64::from(partitions)) as u32;
        match rate {
            Some(rate) => {
                let intended = started + Duration::from_secs_f64(i as f64 / rate);
                if !whole_batches || (i + 1).is_multiple_of(batch) {
                    pace(intended);
                }
                let payload = &payloads[i as usize % payloads.len()];
                producer.send_to_at(partition, None, payload, intended)?;
            }
            None => {
                let payload = &payloads[i as usize % payloads.len()];
                producer.send_to(partition, None, payload)?;
            }
        }
        i += 1;
        if i.is_multiple_of(batch) || rate.is_some() {
            let n = i - counted;
            if n >= 256 || rate.is_some() {
                stats.add(n, n * spec.size as u64);
                sent.fetch_add(n, Ordering::Relaxed);
                counted = i;
                for (latency, count) in producer.take_latencies() {
                    stats.record_latency(latency, u64::from(count));
                }
            }
        }
    }
    producer.flush()?;
    let n = i - counted;
    stats.add(n, n * spec.size as u64);
    sent.fetch_add(n, Ordering::Relaxed);
    for (latency, count) in producer.take_latencies() {
        stats.record_latency(latency, u64::from(count));
    }
    Ok(producer.sent_bytes())
}

/// A consume run's settings.
#[derive(Debug, Clone)]
pub struct ConsumeSpec {
    /// Broker addresses.
    pub brokers: String,
    /// Topic.
    pub topic: String,
    /// Messages or duration.
    pub length: Length,
    /// Bytes per fetch.
    pub fetch_bytes: u32,
    /// Consumer threads; partition p goes to consumer p mod consumers.
    pub consumers: usize,
    /// Chunks a consumer of one partition fetches ahead on a thread of its
    /// own ([`PrefetchConsumer`]); 0: one fetch at a time, in turn with the
    /// application (the paper's consumer).
    pub prefetch: usize,
}

/// A consumer of one partition from offset 0, connected to its owner: moved
/// to the first retained offset if retention removed 0 (no ListOffsets round
/// trip), fetching `spec.fetch_bytes` at a time.
fn partition_consumer(
    client: &Client,
    metadata: &protocol::codec::Metadata,
    spec: &ConsumeSpec,
    partition: u32,
) -> anyhow::Result<Consumer> {
    let address = client.owner_address(metadata, &spec.topic, partition);
    let mut consumer = Consumer::with_connection(
        Connection::connect_with(&address, &crate::client_config()?)?,
        &spec.topic,
        partition,
        0,
    );
    consumer.set_out_of_range(OutOfRange::Earliest);
    consumer.set_max_bytes(spec.fetch_bytes);
    Ok(consumer)
}

/// Counts what `poll` (messages, payload bytes) reads until the run's length
/// is reached; fails after 10 s without a message.
fn count_until_done(
    spec: &ConsumeSpec,
    started: Instant,
    received: &AtomicU64,
    stats: &Stats,
    mut poll: impl FnMut() -> anyhow::Result<(u64, u64)>,
) -> anyhow::Result<()> {
    let mut last_progress = Instant::now();
    loop {
        let done = match spec.length {
            Length::Messages(n) => received.load(Ordering::Relaxed) >= n,
            Length::Duration(d) => started.elapsed() >= d,
        };
        if done {
            return Ok(());
        }
        let (n, bytes) = poll()?;
        if n > 0 {
            stats.add(n, bytes);
            received.fetch_add(n, Ordering::Relaxed);
            last_progress = Instant::now();
        } else if last_progress.elapsed() > Duration::from_secs(10) {
            bail!(
                "read {} messages in all; nothing new for 10 s",
                received.load(Ordering::Relaxed)
            );
        }
    }
}

/// Reads from the start of every partition, checking every CRC.
pub fn consume(spec: &ConsumeSpec, stats: &Arc<Stats>) -> anyhow::Result<()> {
    let client = crate::connect(&spec.brokers)
        .with_context(|| format!("no broker reachable at {}", spec.brokers))?;
    let metadata = client.metadata(&[&spec.topic])?;
    let topic = metadata.topics.first().context("topic missing")?;
    let partitions = topic.partitions.len() as u32;
    let consumers = spec.consumers.clamp(1, partitions as usize);
    let received = Arc::new(AtomicU64::new(0));
    // Every consumer connects to its partitions' shards first; the clock
    // starts when all are ready (setup is not consumption).
    let ready = Arc::new(std::sync::Barrier::new(consumers + 1));
    let go = Arc::new(std::sync::Barrier::new(consumers + 1));
    let started = Arc::new(std::sync::Mutex::new(Instant::now()));
    let mut threads = Vec::new();
    for index in 0..consumers {
        let spec = spec.clone();
        let stats = stats.clone();
        let received = received.clone();
        let (ready, go) = (ready.clone(), go.clone());
        let started = started.clone();
        let metadata = metadata.clone();
        threads.push(std::thread::spawn(move || -> anyhow::Result<()> {
            let assigned: Vec<u32> = (0..partitions)
                .filter(|p| *p as usize % consumers == index)
                .collect();
            if assigned.len() > 1 {
                // Several partitions: one topic consumer, whose fetches are
                // pipelined on one connection per shard, instead of a round
                // trip per partition in turn.
                let setup = (|| -> anyhow::Result<TopicConsumer> {
                    let client = crate::connect(&spec.brokers)?;
                    let start = Start::At(assigned.iter().map(|&p| (p, 0)).collect());
                    let config = TopicConsumerConfig {
                        max_bytes: spec.fetch_bytes,
                        out_of_range: OutOfRange::Earliest,
                        ..TopicConsumerConfig::default()
                    };
                    Ok(TopicConsumer::for_partitions(
                        &client,
                        &spec.topic,
                        &assigned,
                        start,
                        config,
                    )?)
                })();
                ready.wait();
                go.wait();
                let mut reader = setup?;
                let started = *started.lock().unwrap_or_else(|p| p.into_inner());
                return count_until_done(&spec, started, &received, &stats, || {
                    let batch = reader.poll(Duration::from_millis(100))?;
                    let bytes = batch.iter().map(|m| m.value.len() as u64).sum();
                    Ok((batch.len() as u64, bytes))
                });
            }
            if spec.prefetch > 0 && assigned.len() == 1 {
                let partition = assigned[0];
                let setup = crate::connect(&spec.brokers)
                    .map_err(anyhow::Error::from)
                    .and_then(|client| partition_consumer(&client, &metadata, &spec, partition));
                ready.wait();
                go.wait();
                // Fetching ahead starts with the clock, not during setup.
                let mut consumer = setup?;
                consumer.set_max_wait_ms(100);
                let mut reader = PrefetchConsumer::new(consumer, spec.prefetch);
                let started = *started.lock().unwrap_or_else(|p| p.into_inner());
                return count_until_done(&spec, started, &received, &stats, || {
                    let mut bytes = 0u64;
                    let n = reader.poll_with(Duration::from_millis(200), |m| {
                        bytes += m.value.len() as u64
                    })?;
                    Ok((n as u64, bytes))
                });
            }
            let setup = (|| -> anyhow::Result<Vec<Consumer>> {
                let client = crate::connect(&spec.brokers)?;
                let mut mine = Vec::new();
                for &p in &assigned {
                    let mut consumer = partition_consumer(&client, &metadata, &spec, p)?;
                    consumer.set_max_wait_ms(0);
                    mine.push(consumer);
                }
                Ok(mine)
            })();
            ready.wait();
            go.wait();
            let mut mine = setup?;
            let started = *started.lock().unwrap_or_else(|p| p.into_inner());
            let mut last_progress = Instant::now();
            let mut round = 0usize;
            loop {
                let done = match spec.length {
                    Length::Messages(n) => received.load(Ordering::Relaxed) >= n,
                    Length::Duration(d) => started.elapsed() >= d,
                };
                if done {
                    return Ok(());
                }
                let mut progressed = false;
                for consumer in &mut mine {
                    let mut bytes = 0u64;
                    let n = consumer.poll_with(|m| bytes += m.value.len() as u64)? as u64;
                    if n > 0 {
                        stats.add(n, bytes);
                        received.fetch_add(n, Ordering::Relaxed);
                        progressed = true;
                    }
                }
                if progressed {
                    last_progress = Instant::now();
                } else if last_progress.elapsed() > Duration::from_secs(10) {
                    bail!(
                        "read {} messages in all; nothing new for 10 s",
                        received.load(Ordering::Relaxed)
                    );
                } else if let Some(consumer) = {
                    let next = round % mine.len().max(1);
                    mine.get_mut(next)
                } {
                    // Caught up everywhere: wait on one partition (a
                    // long-poll) instead of spinning over all of them.
                    consumer.set_max_wait_ms(100);
                    let mut bytes = 0u64;
                    let n = consumer.poll_with(|m| bytes += m.value.len() as u64)? as u64;
                    consumer.set_max_wait_ms(0);
                    stats.add(n, bytes);
                    received.fetch_add(n, Ordering::Relaxed);
                }
                round += 1;
            }
        }));
    }
    ready.wait();
    *started.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    stats.reset();
    go.wait();
    for thread in threads {
        thread
            .join()
            .map_err(|_| anyhow::anyhow!("a consumer thread panicked"))??;
    }
    stats.freeze();
    Ok(())
}

/// The broker's side of a run, for reports: brokers with their shard
/// addresses, and the topic's effective settings.
pub fn broker_config(brokers: &str, topic: &str) -> anyhow::Result<serde_json::Value> {
    let client = crate::connect(brokers)?;
    let metadata = client.metadata(&[topic])?;
    let brokers: Vec<serde_json::Value> = metadata
        .brokers
        .iter()
        .map(|b| {
            serde_json::json!({
                "broker_id": b.broker_id,
                "shards": b.shards.len(),
                "addresses": b.shards.iter().map(|s| format!("{}:{}", s.host, s.port)).collect::<Vec<_>>(),
            })
        })
        .collect();
    let topic = metadata.topics.first().map(|t| {
        let s = t.settings;
        serde_json::json!({
            "name": t.name,
            "partitions": t.partitions.len(),
            "retention_ms": s.retention_ms,
            "retention_bytes": s.retention_bytes,
            "segment_bytes": s.segment_bytes,
            "flush_messages": s.flush_messages,
            "flush_interval_ms": s.flush_interval_ms,
        })
    });
    Ok(serde_json::json!({
        "brokers": brokers,
        "broker_version": client.hello().broker_version,
        "topic": topic,
    }))
}
