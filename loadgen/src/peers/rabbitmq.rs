//! RabbitMQ over AMQP 0-9-1 (lapin), set up as in the paper: a durable
//! queue, persistent messages (delivery mode 2), automatic acknowledgement
//! for the consumer.
//!
//! Publishing modes: `Async` sends one message at a time without waiting
//! (the paper's mode; the run ends when the queue holds every message), and
//! `Confirms(window)` uses publisher confirms, waiting for each window of
//! messages to be confirmed — RabbitMQ's faster *safe* publishing mode.

use crate::stats::Stats;
use anyhow::{bail, Context};
use futures_lite::StreamExt;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use std::time::{Duration, Instant};

/// The default address `deploy/peers.sh` starts RabbitMQ on.
pub const DEFAULT_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// How messages are published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publish {
    /// One at a time, no confirms (the paper's mode).
    Async,
    /// Publisher confirms, waiting for every `window` messages.
    Confirms(usize),
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting a tokio runtime for the AMQP client")
}

async fn channel(url: &str) -> anyhow::Result<(Connection, Channel)> {
    let conn = Connection::connect(url, ConnectionProperties::default())
        .await
        .with_context(|| format!("RabbitMQ is not reachable at {url}; start it with `deploy/peers.sh start rabbitmq`"))?;
    let channel = conn.create_channel().await?;
    Ok((conn, channel))
}

/// True when a RabbitMQ broker answers at `url`.
pub fn reachable(url: &str) -> bool {
    runtime()
        .map(|rt| {
            rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(5), channel(url))
                    .await
                    .is_ok_and(|r| r.is_ok())
            })
        })
        .unwrap_or(false)
}

/// Declares `queue` fresh (deleting what was there), durable.
async fn fresh_queue(channel: &Channel, queue: &str) -> anyhow::Result<()> {
    let _ = channel
        .queue_delete(queue.into(), QueueDeleteOptions::default())
        .await;
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    Ok(())
}

async fn queue_depth(channel: &Channel, queue: &str) -> anyhow::Result<u64> {
    let declared = channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                durable: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    Ok(u64::from(declared.message_count()))
}

/// Publishes `messages` persistent messages of `size` bytes to a fresh `queue`.
pub fn produce(
    url: &str,
    queue: &str,
    messages: u64,
    size: usize,
    mode: Publish,
    stats: &Stats,
) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let (conn, channel) = channel(url).await?;
        fresh_queue(&channel, queue).await?;
        if let Publish::Confirms(_) = mode {
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await?;
        }
        let payload = vec![b'r'; size];
        let properties = BasicProperties::default().with_delivery_mode(2);
        stats.reset();
        let mut pending = Vec::new();
        for i in 0..messages {
            let confirm = channel
                .basic_publish(
                    "".into(),
                    queue.into(),
                    BasicPublishOptions::default(),
                    &payload,
                    properties.clone(),
                )
                .await?;
            if let Publish::Confirms(window) = mode {
                pending.push(confirm);
                if pending.len() >= window.max(1) {
                    for confirm in pending.drain(..) {
                        confirm.await?;
                    }
                }
            }
            if i % 64 == 63 {
                stats.add(64, 64 * size as u64);
            }
        }
        for confirm in pending.drain(..) {
            confirm.await?;
        }
        let rest = messages % 64;
        stats.add(rest, rest * size as u64);
        // Without confirms the run ends when the queue holds every message.
        let deadline = Instant::now() + Duration::from_secs(600);
        while queue_depth(&channel, queue).await? < messages {
            if Instant::now() > deadline {
                bail!("RabbitMQ queue {queue} did not reach {messages} messages within 600 s");
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        stats.freeze();
        let _ = conn.close(200, "done".into()).await;
        Ok(())
    })
}

/// Deletes queues (best effort), so a finished run leaves RabbitMQ idle.
pub fn delete_queues(url: &str, queues: &[&str]) {
    let Ok(rt) = runtime() else { return };
    rt.block_on(async {
        if let Ok((conn, channel)) = channel(url).await {
            for queue in queues {
                let _ = channel
                    .queue_delete((*queue).into(), QueueDeleteOptions::default())
                    .await;
            }
            let _ = conn.close(200, "done".into()).await;
        }
    });
}

/// Consumes `messages` from `queue` with automatic acknowledgement.
pub fn consume(url: &str, queue: &str, messages: u64, stats: &Stats) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let (conn, channel) = channel(url).await?;
        stats.reset();
        let mut consumer = channel
            .basic_consume(
                queue.into(),
                "loadgen".into(),
                BasicConsumeOptions {
                    no_ack: true,
                    ..BasicConsumeOptions::default()
                },
                FieldTable::default(),
            )
            .await?;
        let mut received = 0u64;
        while received < messages {
            let delivery = tokio::time::timeout(Duration::from_secs(30), consumer.next())
                .await
                .with_context(|| format!("RabbitMQ delivered {received} of {messages} messages, then nothing for 30 s"))?;
            let Some(delivery) = delivery else {
                bail!("RabbitMQ closed the consumer after {received} messages");
            };
            let delivery = delivery?;
            received += 1;
            stats.add(1, delivery.data.len() as u64);
        }
        stats.freeze();
        let _ = conn.close(200, "done".into()).await;
        Ok(())
    })
}
