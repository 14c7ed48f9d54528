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

use crate::stats::Stats;
use anyhow::{bail, Context};
use async_nats::jetstream::{self, consumer, stream};
use futures_lite::StreamExt;
use std::time::Duration;

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
    let client = tokio::time::timeout(Duration::from_secs(5), async_nats::connect(address))
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
    runtime()?.block_on(async {
        let js = context(address).await?;
        let (name, subject) = names(queue);
        let _ = js.delete_stream(&name).await;
        js.create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![subject.clone()],
            storage: stream::StorageType::File,
            ..stream::Config::default()
        })
        .await
        .with_context(|| format!("creating JetStream stream {name}"))?;
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
