//! `loadgen consume --group G --consumers N`: N members of a consumer group
//! (one thread and one [`GroupConsumer`] each) reading a topic together.
//!
//! Each partition is read by one member at a time; the run counts every
//! message once by its (partition, offset): a message at or past the
//! partition's highest offset seen so far is new, one below it a duplicate
//! (a partition handed over from an uncommitted position), and a jump past
//! the next expected offset is a gap (a loss). At the end every member
//! commits and leaves, and the group's lag (log end offset minus committed
//! offset, in bytes: offsets are byte positions) is read back.

use crate::stats::Stats;
use crate::workload::Length;
use anyhow::{bail, Context};
use protocol::client::{GroupConfig, GroupConsumer, OffsetSpec, StartFrom};
use protocol::message::encoded_len;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A group consume run's settings.
#[derive(Debug, Clone)]
pub struct GroupSpec {
    /// Broker addresses.
    pub brokers: String,
    /// Topic.
    pub topic: String,
    /// The group.
    pub group: String,
    /// Members (threads).
    pub consumers: usize,
    /// Messages or duration.
    pub length: Length,
    /// Where partitions without a committed offset start.
    pub start_from: StartFrom,
}

/// What a group run saw.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct GroupOutcome {
    /// Messages counted once each.
    pub distinct: u64,
    /// Messages seen again (from a handover).
    pub duplicates: u64,
    /// Bytes skipped within a partition (losses): must be 0.
    pub gap_bytes: u64,
    /// Rebalances summed over the members.
    pub rebalances: u64,
    /// Log end minus committed offset, summed over partitions, at the end.
    pub lag_bytes: u64,
    /// Partitions without a committed offset at the end.
    pub uncommitted_partitions: u32,
}

/// Per partition: the offset after the highest message seen.
struct Seen {
    next: Vec<Option<u64>>,
    outcome: GroupOutcome,
}

/// Runs the group; returns what it saw.
pub fn consume_group(spec: &GroupSpec, stats: &Arc<Stats>) -> anyhow::Result<GroupOutcome> {
    let client = crate::connect(&spec.brokers)
        .with_context(|| format!("no broker reachable at {}", spec.brokers))?;
    let metadata = client.metadata(&[&spec.topic])?;
    let partitions = metadata
        .topics
        .first()
        .context("topic missing")?
        .partitions
        .len();
    let seen = Arc::new(Mutex::new(Seen {
        next: vec![None; partitions],
        outcome: GroupOutcome::default(),
    }));
    let distinct = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    stats.reset();
    let threads: Vec<_> = (0..spec.consumers.max(1))
        .map(|index| {
            let spec = spec.clone();
            let stats = stats.clone();
            let seen = seen.clone();
            let distinct = distinct.clone();
            std::thread::spawn(move || -> anyhow::Result<u64> {
                let config = GroupConfig {
                    start_from: spec.start_from,
                    member_name: format!("loadgen-{index}"),
                    max_wait: Duration::from_millis(100),
                    ..GroupConfig::default()
                };
                let client = crate::connect(&spec.brokers)?;
                let mut member =
                    GroupConsumer::subscribe_with(&client, &spec.group, &[&spec.topic], config)?;
                let mut last_progress = Instant::now();
                loop {
                    let done = match spec.length {
                        Length::Messages(n) => distinct.load(Ordering::Relaxed) >= n,
                        Length::Duration(d) => started.elapsed() >= d,
                    };
                    if done {
                        break;
                    }
                    let messages = member.poll()?;
                    if messages.is_empty() {
                        if last_progress.elapsed() > Duration::from_secs(30) {
                            bail!(
                                "member {index}: nothing new for 30 s ({} distinct messages in all)",
                                distinct.load(Ordering::Relaxed)
                            );
                        }
                        continue;
                    }
                    last_progress = Instant::now();
                    let bytes: u64 = messages.iter().map(|m| m.value.len() as u64).sum();
                    stats.add(messages.len() as u64, bytes);
                    let mut guard = seen.lock().unwrap_or_else(|p| p.into_inner());
                    let seen = &mut *guard;
                    let mut new = 0;
                    for m in &messages {
                        let stored = encoded_len(m.key.as_deref(), &m.value) as u64;
                        let Some(next) = seen.next.get_mut(m.partition as usize) else {
                            continue;
                        };
                        match *next {
                            Some(expected) if m.offset < expected => {
                                seen.outcome.duplicates += 1;
                                continue;
                            }
                            Some(expected) if m.offset > expected => {
                                seen.outcome.gap_bytes += m.offset - expected;
                            }
                            _ => {}
                        }
                        *next = Some(m.offset + stored);
                        new += 1;
                    }
                    seen.outcome.distinct += new;
                    distinct.fetch_add(new, Ordering::Relaxed);
                }
                let rebalances = member.rebalances();
                member.close()?;
                Ok(rebalances)
            })
        })
        .collect();
    let mut rebalances = 0;
    for thread in threads {
        rebalances += thread
            .join()
            .map_err(|_| anyhow::anyhow!("a group member panicked"))??;
    }
    stats.freeze();
    let mut outcome = seen
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .outcome
        .clone();
    outcome.rebalances = rebalances;
    let description = client.describe_group(&spec.group)?;
    for p in 0..partitions as u32 {
        let (end, _) = client.list_offsets(&spec.topic, p, OffsetSpec::Latest, 0)?;
        match description
            .partitions
            .iter()
            .find(|d| d.topic == spec.topic && d.partition == p)
            .and_then(|d| d.offset)
        {
            Some(committed) => outcome.lag_bytes += end.saturating_sub(committed),
            None => outcome.uncommitted_partitions += 1,
        }
    }
    Ok(outcome)
}
