//! Redis Streams (the `redis` crate, synchronous connection), set up as a
//! durable log: `deploy/peers.sh` runs Redis with the append-only file
//! fsynced every second, no RDB snapshots.
//!
//! Publishing: one `XADD` per message (Redis has no multi-entry XADD),
//! pipelined — `window` commands are written before their replies are read.
//! The paper's batch-1 experiment runs with a window of 1,000 (asynchronous
//! sends), its batch-50 experiment with windows of 50 (a round trip per 50
//! messages). A message counts once its reply (the entry id) is read. The
//! consumer reads with `XREAD COUNT 1000` from the last id it saw.

use crate::stats::Stats;
use anyhow::{bail, Context};
use redis::Value;
use std::time::Duration;

/// The default address `deploy/peers.sh` starts Redis on.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379/";

/// Entries per `XREAD`.
const READ_COUNT: usize = 1000;

fn connection(url: &str) -> anyhow::Result<redis::Connection> {
    redis::Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
        .with_context(|| {
            format!("Redis is not reachable at {url}; start it with `deploy/peers.sh start redis`")
        })
}

/// True when a Redis server answers PING at `url`.
pub fn reachable(url: &str) -> bool {
    connection(url)
        .and_then(|mut c| {
            redis::cmd("PING")
                .query::<String>(&mut c)
                .map_err(anyhow::Error::from)
        })
        .is_ok()
}

/// Appends `messages` entries of one `size`-byte field to a fresh stream
/// `queue`, `window` commands per pipeline.
pub fn produce(
    url: &str,
    queue: &str,
    messages: u64,
    size: usize,
    window: usize,
    stats: &Stats,
) -> anyhow::Result<()> {
    let mut con = connection(url)?;
    redis::cmd("DEL").arg(queue).query::<()>(&mut con)?;
    let mut payloads = super::Payloads::new(size);
    stats.reset();
    let mut sent = 0u64;
    while sent < messages {
        let n = (window.max(1) as u64).min(messages - sent);
        let mut pipe = redis::pipe();
        for _ in 0..n {
            pipe.cmd("XADD")
                .arg(queue)
                .arg("*")
                .arg("v")
                .arg(payloads.next_payload());
        }
        let ids: Vec<String> = pipe
            .query(&mut con)
            .with_context(|| format!("XADD to {queue}"))?;
        if ids.len() as u64 != n {
            bail!("Redis answered {} of {n} XADDs", ids.len());
        }
        sent += n;
        stats.add(n, n * size as u64);
    }
    stats.freeze();
    Ok(())
}

/// Reads `messages` entries of stream `queue` from its start.
pub fn consume(url: &str, queue: &str, messages: u64, stats: &Stats) -> anyhow::Result<()> {
    let mut con = connection(url)?;
    stats.reset();
    let mut last = String::from("0-0");
    let mut received = 0u64;
    while received < messages {
        let reply: Value = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(READ_COUNT)
            .arg("BLOCK")
            .arg(60_000)
            .arg("STREAMS")
            .arg(queue)
            .arg(&last)
            .query(&mut con)
            .with_context(|| format!("XREAD from {queue}"))?;
        let entries = stream_entries(reply)?;
        if entries.is_empty() {
            bail!("Redis stream {queue} held {received} of {messages} entries after 60 s");
        }
        for (id, bytes) in entries {
            received += 1;
            stats.add(1, bytes);
            last = id;
        }
    }
    stats.freeze();
    Ok(())
}

/// Deletes streams (best effort), so a finished run leaves Redis empty.
pub fn delete_queues(url: &str, queues: &[&str]) {
    if let Ok(mut con) = connection(url) {
        for queue in queues {
            let _ = redis::cmd("DEL").arg(*queue).query::<()>(&mut con);
        }
    }
}

fn items(value: Value) -> anyhow::Result<Vec<Value>> {
    match value {
        Value::Array(items) | Value::Set(items) => Ok(items),
        Value::Map(pairs) => Ok(pairs.into_iter().flat_map(|(k, v)| [k, v]).collect()),
        other => bail!("unexpected XREAD reply part: {other:?}"),
    }
}

fn text(value: Value) -> anyhow::Result<String> {
    match value {
        Value::BulkString(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        Value::SimpleString(s) => Ok(s),
        other => bail!("unexpected XREAD id: {other:?}"),
    }
}

/// The (id, field-value bytes) of every entry in an XREAD reply of one
/// stream: `[[key, [[id, [field, value, …]], …]]]` (empty on a timeout).
fn stream_entries(reply: Value) -> anyhow::Result<Vec<(String, u64)>> {
    if reply == Value::Nil {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    let streams = items(reply)?;
    // RESP2: [[key, entries]]; RESP3: {key: entries} flattened to [key, entries].
    let mut parts: Vec<Value> = Vec::new();
    for stream in streams {
        match stream {
            Value::Array(_) | Value::Map(_) => parts.extend(items(stream)?),
            other => parts.push(other),
        }
    }
    for part in parts {
        let Value::Array(entries) = part else {
            continue;
        };
        for entry in entries {
            let mut fields = items(entry)?.into_iter();
            let id = text(fields.next().context("an entry without an id")?)?;
            let bytes = match fields.next() {
                Some(values) => items(values)?
                    .into_iter()
                    .skip(1)
                    .step_by(2)
                    .map(|v| match v {
                        Value::BulkString(b) => b.len() as u64,
                        _ => 0,
                    })
                    .sum(),
                None => 0,
            };
            out.push((id, bytes));
        }
    }
    Ok(out)
}
