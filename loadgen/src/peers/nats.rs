//! NATS JetStream (async-nats), set up as people run it for a durable log:
//! one stream per run on file storage, one subject.
//!
//! Publishing mode: JetStream's asynchronous publishing with a sliding
//! window — at most `n` messages unacknowledged; each new publish first
//! awaits the oldest acknowledgement once `n` are outstanding (so the pipe
//! never drains between windows). The paper's batch-1 experiment runs with
//! a window of 1,000, its batch-50 experiment with a window of 50 (NATS has
//! no batch API). Every message counts once
//! its acknowledgement — stored on disk by the server — has arrived. The
//! consumer is a pull consumer fetching batches of 1,000, without per-message
//! acknowledgements (the closest to an auto-ack consumer).

use crate::stats::{LatencySummary, Stats};
use anyhow::{bail, Context};
use async_nats::jetstream::{self, consumer, stream};
use futures_lite::StreamExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The default address `deploy/peers.sh` starts NATS on.
pub const DEFAULT_ADDRESS: &str = "127.0.0.1:4222";

/// Messages per pull request of the consumer.
const PULL_BATCH: usize = 1000;

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting a tokio runtime for the NATS client")
}

async fn context(address: &str) -> anyhow::Result<jetstream::Context> {
    // One server, or several comma-separated (a cluster).
    let servers: Vec<&str> = address.split(',').map(str::trim).collect();
    let client = tokio::time::timeout(Duration::from_secs(5), async_nats::connect(servers))
        .await
        .map_err(anyhow::Error::from)
        .and_then(|r| r.map_err(anyhow::Error::from))
        .with_context(|| {
            format!(
                "NATS is not reachable at {address}; start it with `deploy/peers.sh start nats`"
            )
        })?;
    Ok(jetstream::new(client))
}

/// True when a NATS server answers at `address`. (JetStream's account
/// query is not used: the client decodes NATS 2.9's answer as an error; a
/// server without JetStream fails the first experiment with the reason.)
pub fn reachable(address: &str) -> bool {
    runtime()
        .map(|rt| rt.block_on(async { context(address).await.is_ok() }))
        .unwrap_or(false)
}

/// The stream and its only subject for a queue name.
fn names(queue: &str) -> (String, String) {
    (queue.to_string(), format!("{queue}.messages"))
}

/// Makes a fresh stream for `queue` on file storage with `replicas`
/// copies, returning its subject.
async fn fresh_stream(
    js: &jetstream::Context,
    queue: &str,
    replicas: usize,
) -> anyhow::Result<String> {
    let (name, subject) = names(queue);
    let _ = js.delete_stream(&name).await;
    js.create_stream(stream::Config {
        name: name.clone(),
        subjects: vec![subject.clone()],
        storage: stream::StorageType::File,
        num_replicas: replicas.max(1),
        ..stream::Config::default()
    })
    .await
    .with_context(|| format!("creating JetStream stream {name}"))?;
    Ok(subject)
}

/// Publishes `messages` of `size` bytes into a fresh stream named `queue`,
/// with at most `window` unacknowledged.
pub fn produce(
    address: &str,
    queue: &str,
    messages: u64,
    size: usize,
    window: usize,
    stats: &Stats,
) -> anyhow::Result<()> {
    produce_replicated(address, queue, messages, size, window, 1, stats)
}

/// As [`produce`], into a stream of `replicas` copies: JetStream
/// acknowledges a publish once a majority of them stored it. `addresses`
/// may name several servers, comma-separated.
pub fn produce_replicated(
    addresses: &str,
    queue: &str,
    messages: u64,
    size: usize,
    window: usize,
    replicas: usize,
    stats: &Stats,
) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let js = context(addresses).await?;
        let subject = fresh_stream(&js, queue, replicas).await?;
        let mut payloads = super::Payloads::new(size);
        stats.reset();
        let window = window.max(1);
        let mut pending: std::collections::VecDeque<jetstream::context::PublishAckFuture> =
            std::collections::VecDeque::with_capacity(window);
        for _ in 0..messages {
            if pending.len() >= window {
                if let Some(oldest) = pending.pop_front() {
                    oldest.await.context("JetStream publish acknowledgement")?;
                    stats.add(1, size as u64);
                }
            }
            let ack = js
                .publish(
                    subject.clone(),
                    bytes::Bytes::copy_from_slice(payloads.next_payload()),
                )
                .await
                .context("publishing to JetStream")?;
            pending.push_back(ack);
        }
        for ack in pending.drain(..) {
            ack.await.context("JetStream publish acknowledgement")?;
            stats.add(1, size as u64);
        }
        stats.freeze();
        Ok(())
    })
}

/// Reads `messages` from the start of stream `queue` with a pull consumer.
pub fn consume(address: &str, queue: &str, messages: u64, stats: &Stats) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let js = context(address).await?;
        let (name, _) = names(queue);
        let stream = js
            .get_stream(&name)
            .await
            .with_context(|| format!("JetStream stream {name}"))?;
        let consumer: consumer::PullConsumer = stream
            .create_consumer(consumer::pull::Config {
                ack_policy: consumer::AckPolicy::None,
                deliver_policy: consumer::DeliverPolicy::All,
                ..consumer::pull::Config::default()
            })
            .await
            .context("creating a JetStream pull consumer")?;
        let mut incoming = consumer
            .stream()
            .max_messages_per_batch(PULL_BATCH)
            .messages()
            .await
            .context("pulling from JetStream")?;
        stats.reset();
        let mut received = 0u64;
        while received < messages {
            let message = tokio::time::timeout(Duration::from_secs(60), incoming.next())
                .await
                .context("JetStream sent nothing for 60 s")?;
            let Some(message) = message else {
                bail!("JetStream ended the pull after {received} of {messages} messages");
            };
            let message = message.context("JetStream message")?;
            received += 1;
            stats.add(1, message.payload.len() as u64);
        }
        stats.freeze();
        Ok(())
    })
}

/// A paced publish run's figures.
#[derive(Debug, Clone)]
pub struct PacedOutcome {
    /// From each message's intended send time to its acknowledgement,
    /// after the warm-up.
    pub publish: Option<LatencySummary>,
    /// Messages/s acknowledged after the warm-up.
    pub achieved: f64,
    /// Messages published.
    pub messages: u64,
}

/// Publishes `size`-byte messages at `rate` per second for `seconds` into
/// a fresh stream of `replicas` copies, pipelined (an acknowledgement is
/// awaited by a task of its own), timing each from its intended send
/// time; the first `warmup` seconds are not counted.
pub fn paced(
    addresses: &str,
    queue: &str,
    rate: f64,
    seconds: f64,
    warmup: f64,
    size: usize,
    replicas: usize,
) -> anyhow::Result<PacedOutcome> {
    runtime()?.block_on(async {
        let js = context(addresses).await?;
        let subject = fresh_stream(&js, queue, replicas).await?;
        let stats = Stats::new();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(
            Instant,
            jetstream::context::PublishAckFuture,
        )>();
        let started = Instant::now() + Duration::from_millis(100);
        let counted = started + Duration::from_secs_f64(warmup);
        let acker = {
            let stats = stats.clone();
            async move {
                let (mut acked, mut last) = (0u64, counted);
                while let Some((intended, ack)) = rx.recv().await {
                    ack.await.context("JetStream publish acknowledgement")?;
                    let now = Instant::now();
                    if intended >= counted {
                        stats.record_latency(now - intended, 1);
                        acked += 1;
                        last = now;
                    }
                }
                anyhow::Ok((acked, last))
            }
        };
        let publisher = async {
            let payload = bytes::Bytes::from(vec![b'x'; size]);
            let mut i = 0u64;
            loop {
                let intended = started + Duration::from_secs_f64(i as f64 / rate);
                if intended >= started + Duration::from_secs_f64(seconds) {
                    break;
                }
                // Sleeps the thread (no spinning, 1 ns timer slack), then
                // lets the acknowledgement task run.
                crate::workload::pace(intended);
                let ack = js
                    .publish(subject.clone(), payload.clone())
                    .await
                    .context("publishing to JetStream")?;
                if tx.send((intended, ack)).is_err() {
                    break;
                }
                i += 1;
                tokio::task::yield_now().await;
            }
            drop(tx);
            anyhow::Ok(i)
        };
        let (published, acked) = futures_lite::future::zip(publisher, acker).await;
        let (messages, (acked, last)) = (published?, acked?);
        let window = last.saturating_duration_since(counted).as_secs_f64();
        Ok(PacedOutcome {
            publish: stats.summary().latency,
            achieved: acked as f64 / window.max(1e-3),
            messages,
        })
    })
}

/// The server name (`n1`, ...) leading `queue`'s stream, and how many of
/// its copies are current.
pub fn stream_leader(addresses: &str, queue: &str) -> anyhow::Result<(String, usize)> {
    runtime()?.block_on(async {
        let js = context(addresses).await?;
        let stream = js.get_stream(names(queue).0).await?;
        let info = stream.get_info().await?;
        let cluster = info
            .cluster
            .context("the stream has no cluster information")?;
        let current = cluster
            .replicas
            .iter()
            .filter(|p| p.current && !p.offline)
            .count();
        let leader = cluster.leader.context("the stream has no leader")?;
        // The leader is not among its replicas.
        Ok((leader, current + 1))
    })
}

/// A synchronous publisher (one message, then its acknowledgement, every
/// 2 ms) into `queue`'s stream until `stop`, keeping (sent, answered) of
/// every acknowledged publish.
pub fn failover_publisher(
    addresses: String,
    queue: String,
    stop: Arc<AtomicBool>,
    answered: Arc<Mutex<Vec<(Instant, Instant)>>>,
) -> std::thread::JoinHandle<anyhow::Result<()>> {
    std::thread::spawn(move || {
        runtime()?.block_on(async {
            let js = context(&addresses).await?;
            let (_, subject) = names(&queue);
            while !stop.load(Ordering::Relaxed) {
                let sent = Instant::now();
                let attempt = async {
                    js.publish(subject.clone(), bytes::Bytes::from_static(b"failover"))
                        .await?
                        .await?;
                    anyhow::Ok(())
                };
                if let Ok(Ok(())) = tokio::time::timeout(Duration::from_secs(2), attempt).await {
                    let at = Instant::now();
                    answered
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((sent, at));
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Ok(())
        })
    })
}

/// Makes a fresh stream of `replicas` copies for `queue`.
pub fn create_stream(addresses: &str, queue: &str, replicas: usize) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let js = context(addresses).await?;
        fresh_stream(&js, queue, replicas).await.map(drop)
    })
}

/// Deletes streams (best effort), so a finished run leaves NATS idle.
pub fn delete_queues(address: &str, queues: &[&str]) {
    let Ok(rt) = runtime() else { return };
    rt.block_on(async {
        if let Ok(js) = context(address).await {
            for queue in queues {
                let _ = js.delete_stream(names(queue).0).await;
            }
        }
    });
}
