//! Apache Kafka driven by librdkafka (the `rdkafka` crate, which builds
//! librdkafka 2.12 from its bundled source), the C client most non-Java
//! Kafka clients wrap: the paper's experiments through a second real client
//! beside Kafka's own Java one ([`super::kafka`]). Built only with
//! loadgen's `librdkafka` feature (`cargo build --release -p
//! ringlog-loadgen --features librdkafka`), so the default build needs no
//! C toolchain for it; `loadgen paper --kafka-client librdkafka` selects it.
//!
//! Producing, as the Java driver: acks=0, no compression, no idempotence;
//! batch 1 is `batch.num.messages=1` with no linger (a record a request,
//! pipelined up to the connection's in-flight limit), batch n room for n
//! records and a 5 ms linger. Each record counts once librdkafka reports
//! it delivered (for acks=0: written to the socket). Consuming: one
//! consumer assigned partition 0 from its start. The topic is made by the
//! Java driver's `create` (one partition, one copy), as for the Java runs.

use crate::stats::Stats;
use anyhow::{bail, Context};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Counts delivered and failed records.
#[derive(Default)]
struct Counting {
    delivered: AtomicU64,
    failed: AtomicU64,
}

impl ClientContext for Counting {}

impl ProducerContext for Counting {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => self.delivered.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.failed.fetch_add(1, Ordering::Relaxed),
        };
    }
}

/// librdkafka's version, as linked.
pub fn version() -> String {
    rdkafka::util::get_rdkafka_version().1
}

/// Produces `messages` of `size` bytes into `topic` (made with one
/// partition and one copy if missing), `batch` records a request.
pub fn produce(
    home: &Path,
    address: &str,
    topic: &str,
    messages: u64,
    size: usize,
    batch: usize,
    stats: &Stats,
) -> anyhow::Result<()> {
    super::kafka::create(home, address, topic, 1, 1, &[])?;
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", address)
        .set("acks", "0")
        .set("enable.idempotence", "false")
        .set("compression.codec", "none")
        .set("queue.buffering.max.messages", "1000000")
        .set("queue.buffering.max.kbytes", "1048576");
    if batch <= 1 {
        config.set("batch.num.messages", "1").set("linger.ms", "0");
    } else {
        config
            .set("batch.num.messages", batch.to_string())
            .set("linger.ms", "5");
    }
    let producer: BaseProducer<Counting> = config
        .create_with_context(Counting::default())
        .context("creating a librdkafka producer")?;
    // Metadata before the clock starts, as the Java driver's warm-up.
    producer
        .client()
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .with_context(|| format!("Kafka at {address}: metadata of {topic}"))?;
    let mut payloads = super::Payloads::new(size);
    stats.reset();
    let context = producer.context();
    let mut counted = 0u64;
    let mut count = |stats: &Stats| {
        let delivered = context.delivered.load(Ordering::Relaxed);
        if delivered > counted {
            stats.add(delivered - counted, (delivered - counted) * size as u64);
            counted = delivered;
        }
    };
    for i in 0..messages {
        let mut record = BaseRecord::<(), [u8], ()>::to(topic)
            .partition(0)
            .payload(payloads.next_payload());
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(1));
                }
                Err((e, _)) => bail!("librdkafka refused record {i}: {e}"),
            }
        }
        if i % 1024 == 0 {
            producer.poll(Duration::ZERO);
            count(stats);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while context.delivered.load(Ordering::Relaxed) + context.failed.load(Ordering::Relaxed)
        < messages
    {
        if Instant::now() > deadline {
            bail!("librdkafka: not every record delivered within 120 s");
        }
        producer.poll(Duration::from_millis(10));
        count(stats);
    }
    count(stats);
    stats.freeze();
    let failed = context.failed.load(Ordering::Relaxed);
    if failed > 0 {
        bail!("librdkafka: {failed} of {messages} records failed");
    }
    Ok(())
}

/// Reads `messages` from the start of `topic`'s partition 0.
pub fn consume(address: &str, topic: &str, messages: u64, stats: &Stats) -> anyhow::Result<()> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", address)
        .set("group.id", "loadgen-librdkafka")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()
        .context("creating a librdkafka consumer")?;
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(topic, 0, Offset::Beginning)?;
    consumer.assign(&assignment)?;
    stats.reset();
    let mut received = 0u64;
    let mut quiet = Instant::now();
    while received < messages {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(message)) => {
                received += 1;
                stats.add(1, message.payload_len() as u64);
                quiet = Instant::now();
            }
            Some(Err(e)) => bail!("librdkafka consumer: {e}"),
            None if quiet.elapsed() > Duration::from_secs(30) => {
                bail!("librdkafka consumer: nothing for 30 s at {received} of {messages}")
            }
            None => {}
        }
    }
    stats.freeze();
    Ok(())
}
