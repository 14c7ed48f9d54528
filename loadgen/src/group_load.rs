//! `loadgen group-load`: the coordinator's load from one large consumer
//! group (issue 27, item 7), on local clusters this starts itself.
//!
//! N members join one group and then heartbeat every interval, as the
//! client's heartbeat thread does, each on a connection of its own; they
//! own no partitions (a member's heartbeats cost the coordinator the same
//! whether or not it owns any, and claims are rare once a group is
//! stable). Heartbeats are sent with `max_wait_ms = 0`, so an answer's
//! time is the coordinator's own, not a long-poll's wait.
//!
//! Each configuration runs on a fresh cluster of three brokers:
//! - **before**: every member's requests go to the first broker (as every
//!   client's did), and each heartbeat reads the group's members from etcd
//!   (`group_members_cache_ms = 0`);
//! - **cache**: the same broker, with the member list served from memory;
//! - **spread**: members spread over the brokers
//!   ([`Client::group_home`](protocol::client::Client::group_home)), with
//!   the cache — today's defaults.
//!
//! It reports the joins' rate, heartbeats answered per second against
//! those due, their latency, the bytes of one answer (the whole view:
//! every member), each broker's and etcd's CPU per heartbeat, and the
//! brokers' `ringlog_group_heartbeats_total` counters, which show where
//! heartbeats went.

use crate::cluster_process::{process_cpu, LocalCluster};
use crate::stats::{LatencySummary, Stats};
use anyhow::Context;
use protocol::codec::groups::{heartbeat_response, GroupView};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// A group-load run's settings.
#[derive(Debug, Clone)]
pub struct GroupLoadSpec {
    /// Members of the group.
    pub members: usize,
    /// Between two heartbeats of a member.
    pub interval: Duration,
    /// How long the heartbeats are measured, after every member joined.
    pub seconds: f64,
    /// Each member's session timeout.
    pub session_timeout_ms: u32,
    /// Which configurations run: `before`, `cache`, `spread`.
    pub configs: Vec<String>,
    /// Members that share one connection (and thread), heartbeating in
    /// turn; 1: each its own, as clients do.
    pub members_per_connection: usize,
}

/// One configuration's figures.
#[derive(Debug, Clone, Serialize)]
pub struct GroupLoadFigure {
    /// `before`, `cache`, `spread`.
    pub label: String,
    /// Members that joined.
    pub members: usize,
    /// Seconds until every member had joined.
    pub join_s: f64,
    /// Seconds then until every member had read the whole view once.
    pub view_s: f64,
    /// Members per connection.
    pub members_per_connection: usize,
    /// Heartbeats due per second (members / interval).
    pub due_per_sec: f64,
    /// Heartbeats answered per second.
    pub heartbeats_per_sec: f64,
    /// Heartbeats that failed (any error).
    pub errors: u64,
    /// Heartbeat latency.
    pub latency: Option<LatencySummary>,
    /// Bytes of one heartbeat's answer (its view lists every member).
    pub answer_bytes: usize,
    /// CPU seconds of brokers 1, 2, 3 while heartbeats were measured.
    pub brokers_cpu_s: Vec<f64>,
    /// CPU seconds of etcd meanwhile.
    pub etcd_cpu_s: f64,
    /// Brokers' and etcd's CPU µs per heartbeat answered.
    pub cpu_us_per_heartbeat: f64,
    /// `ringlog_group_heartbeats_total` of brokers 1, 2, 3 at the end.
    pub heartbeats_by_broker: Vec<f64>,
}

const GROUP: &str = "load";
const TOPIC: &str = "load";

/// Runs the configurations `spec.configs` names.
pub fn run(spec: &GroupLoadSpec) -> anyhow::Result<Vec<GroupLoadFigure>> {
    for config in &spec.configs {
        if !["before", "cache", "spread"].contains(&config.as_str()) {
            anyhow::bail!("--configs: {config:?} is none of before, cache, spread");
        }
    }
    // A member's connection is two descriptors here (its reader is a
    // clone of the socket): say so before the 10,000th member fails.
    let needed = spec.members.div_ceil(spec.members_per_connection.max(1)) as u64 * 2 + 256;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 && limit.rlim_cur < needed {
        anyhow::bail!(
            "{} members need about {needed} open files here, and the limit is {}: raise it (`ulimit -n {needed}`), or put more members on a connection (--members-per-connection)",
            spec.members,
            limit.rlim_cur
        );
    }
    [
        ("before", 0, false),
        ("cache", 1000, false),
        ("spread", 1000, true),
    ]
    .into_iter()
    .filter(|(label, _, _)| spec.configs.iter().any(|c| c == label))
    .map(|(label, cache_ms, spread)| {
        let config = format!("group_members_cache_ms = {cache_ms}\n");
        let mut cluster = LocalCluster::start(3, &config)?;
        let figure = measure(&mut cluster, spec, label, spread)
            .with_context(|| format!("the {label} run"))?;
        println!("{}", line(&figure));
        Ok(figure)
    })
    .collect()
}

fn measure(
    cluster: &mut LocalCluster,
    spec: &GroupLoadSpec,
    label: &str,
    spread: bool,
) -> anyhow::Result<GroupLoadFigure> {
    let addresses = cluster.addresses();
    let first = cluster.brokers[0].address.clone();
    let admin = crate::connect(&addresses)?;
    admin.create_topic(TOPIC, 3, &Default::default())?;
    admin.metadata(&[TOPIC])?;

    let stats = Stats::new();
    let errors = Arc::new(AtomicU64::new(0));
    let answer_bytes = Arc::new(AtomicU64::new(0));
    let per = spec.members_per_connection.max(1);
    let connections = spec.members.div_ceil(per);
    let joined = Arc::new(Barrier::new(connections + 1));
    let viewed = Arc::new(Barrier::new(connections + 1));
    let done = Arc::new(Barrier::new(connections + 1));
    let measured = Arc::new(Barrier::new(connections + 1));
    let stop_at = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let started = Instant::now();
    let mut threads = Vec::with_capacity(connections);
    for c in 0..connections {
        let home = if spread {
            admin.group_home(&[TOPIC])?
        } else {
            crate::connect(&first)?
        };
        let (stats, errors, answer_bytes) = (stats.clone(), errors.clone(), answer_bytes.clone());
        let (joined, measured, stop_at) = (joined.clone(), measured.clone(), stop_at.clone());
        let (viewed, done) = (viewed.clone(), done.clone());
        let (interval, session) = (spec.interval, spec.session_timeout_ms);
        let mine: Vec<usize> = (c * per..((c + 1) * per).min(spec.members)).collect();
        let total = spec.members;
        let thread = std::thread::Builder::new()
            .name(format!("members-{c}"))
            .stack_size(256 * 1024)
            .spawn(move || -> anyhow::Result<()> {
                let sessions: Result<Vec<_>, _> = mine
                    .iter()
                    .map(|_| home.join_group(GROUP, "load", &[TOPIC], session))
                    .collect();
                joined.wait();
                // Once every member is in: each reads the whole view, as a
                // member does after a change (not measured: what is
                // measured is the heartbeats of a stable group).
                let mut generations = Vec::new();
                if let Ok(sessions) = &sessions {
                    for joined in sessions {
                        let view = home.heartbeat(GROUP, joined, 0, 0);
                        if let Ok(view) = &view {
                            answer_bytes.fetch_max(encoded(view) as u64, Ordering::Relaxed);
                        }
                        generations.push(view.map_or(0, |v| v.generation));
                    }
                }
                viewed.wait();
                measured.wait();
                let beats = (|| -> anyhow::Result<Vec<protocol::codec::groups::Joined>> {
                    let sessions = sessions?;
                    let Some(stop_at) = *stop_at.lock().unwrap_or_else(|p| p.into_inner()) else {
                        return Ok(sessions);
                    };
                    // Spread the first heartbeats over one interval, as
                    // members that joined at different times would be; each
                    // member of this connection then every interval.
                    let now = Instant::now();
                    let mut members: Vec<(Instant, u64)> = mine
                        .iter()
                        .zip(generations)
                        .map(|(&i, generation)| {
                            (now + interval.mul_f64(i as f64 / total as f64), generation)
                        })
                        .collect();
                    while let Some((next, _)) =
                        members.iter().enumerate().min_by_key(|(_, (due, _))| *due)
                    {
                        let (due, generation) = members[next];
                        if due >= stop_at {
                            break;
                        }
                        std::thread::sleep(due.saturating_duration_since(Instant::now()));
                        let sent = Instant::now();
                        // As the client's heartbeat thread: an unchanged view
                        // is answered brief (its generation only).
                        match home.heartbeat_brief(GROUP, &sessions[next], generation, 0) {
                            Ok(view) => {
                                stats.record_latency(sent.elapsed(), 1);
                                stats.add(1, 0);
                                if generation != view.generation {
                                    // The largest: members leave one by one at the end.
                                    answer_bytes
                                        .fetch_max(encoded(&view) as u64, Ordering::Relaxed);
                                }
                                members[next].1 = view.generation;
                            }
                            Err(_) => {
                                errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        // A member that fell behind does not send the beats it
                        // missed (nor does the client's heartbeat thread).
                        members[next].0 = (due + interval).max(Instant::now());
                    }
                    Ok(sessions)
                })();
                // Measured until here; the leaves after are not.
                done.wait();
                for session in beats.as_deref().unwrap_or_default() {
                    let _ = home.leave_group(GROUP, session);
                }
                beats.map(|_| ())
            })?;
        threads.push(thread);
    }
    joined.wait();
    let join_s = started.elapsed().as_secs_f64();
    viewed.wait();
    let view_s = started.elapsed().as_secs_f64() - join_s;
    let etcd = cluster.etcd_pid();
    let brokers_before: Vec<Duration> = cluster.brokers.iter().map(|b| b.cpu()).collect();
    let etcd_before = process_cpu(etcd);
    *stop_at.lock().unwrap_or_else(|p| p.into_inner()) =
        Some(Instant::now() + Duration::from_secs_f64(spec.seconds));
    stats.reset();
    measured.wait();
    done.wait();
    stats.freeze();
    let brokers_cpu_s: Vec<f64> = cluster
        .brokers
        .iter()
        .zip(brokers_before)
        .map(|(b, was)| b.cpu().saturating_sub(was).as_secs_f64())
        .collect();
    let etcd_cpu_s = process_cpu(etcd).saturating_sub(etcd_before).as_secs_f64();
    let heartbeats_by_broker = cluster
        .brokers
        .iter_mut()
        .map(|b| b.metric("ringlog_group_heartbeats_total"))
        .collect::<anyhow::Result<Vec<f64>>>()?;
    let mut failed = None;
    for thread in threads {
        match thread.join() {
            Ok(Ok(())) => {}
            Ok(Err(error)) => failed = Some(error),
            Err(_) => failed = Some(anyhow::anyhow!("a member thread panicked")),
        }
    }
    if let Some(error) = failed {
        return Err(error.context("a member could not join"));
    }
    let summary = stats.summary();
    let cpu_s = brokers_cpu_s.iter().sum::<f64>() + etcd_cpu_s;
    Ok(GroupLoadFigure {
        label: label.to_string(),
        members: spec.members,
        join_s,
        view_s,
        members_per_connection: per,
        due_per_sec: spec.members as f64 / spec.interval.as_secs_f64(),
        heartbeats_per_sec: summary.msgs_per_sec,
        errors: errors.load(Ordering::Relaxed),
        latency: summary.latency,
        answer_bytes: answer_bytes.load(Ordering::Relaxed) as usize,
        brokers_cpu_s,
        etcd_cpu_s,
        cpu_us_per_heartbeat: cpu_s * 1e6 / summary.messages.max(1) as f64,
        heartbeats_by_broker,
    })
}

/// The bytes of a heartbeat answer carrying `view`.
fn encoded(view: &GroupView) -> usize {
    let mut fbb = protocol::flatbuffers::FlatBufferBuilder::new();
    heartbeat_response(&mut fbb, view).len()
}

/// One configuration in a line.
pub fn line(f: &GroupLoadFigure) -> String {
    let (p50, p99, max) = f
        .latency
        .as_ref()
        .map_or((0.0, 0.0, 0.0), |l| (l.p50_ms, l.p99_ms, l.max_ms));
    format!(
        "{}: {} members ({} a connection) joined in {:.1} s and read the view in {:.1} s; {:.0} of {:.0} heartbeats/s answered, {} failed; \
         p50 {p50:.2} ms p99 {p99:.2} ms max {max:.1} ms; answer {} bytes; \
         CPU s brokers {:?} etcd {:.1} = {:.0} µs/heartbeat; heartbeats by broker {:?}",
        f.label,
        f.members,
        f.members_per_connection,
        f.join_s,
        f.view_s,
        f.heartbeats_per_sec,
        f.due_per_sec,
        f.errors,
        f.answer_bytes,
        f.brokers_cpu_s
            .iter()
            .map(|s| (s * 10.0).round() / 10.0)
            .collect::<Vec<_>>(),
        f.etcd_cpu_s,
        f.cpu_us_per_heartbeat,
        f.heartbeats_by_broker,
    )
}

/// The figures as a Markdown table.
pub fn table(figures: &[GroupLoadFigure]) -> String {
    let mut out = String::from(
        "| run | members (a connection) | join s | view s | heartbeats/s (due) | failed | p50 ms | p99 ms | max ms | answer bytes | CPU s brokers 1+2+3 / etcd | CPU µs/heartbeat | heartbeats by broker |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for f in figures {
        let (p50, p99, max) = f
            .latency
            .as_ref()
            .map_or((0.0, 0.0, 0.0), |l| (l.p50_ms, l.p99_ms, l.max_ms));
        out.push_str(&format!(
            "| {} | {} ({}) | {:.1} | {:.1} | {:.0} ({:.0}) | {} | {p50:.2} | {p99:.2} | {max:.1} | {} | {} / {:.1} | {:.0} | {} |\n",
            f.label,
            f.members,
            f.members_per_connection,
            f.join_s,
            f.view_s,
            f.heartbeats_per_sec,
            f.due_per_sec,
            f.errors,
            f.answer_bytes,
            f.brokers_cpu_s
                .iter()
                .map(|s| format!("{s:.1}"))
                .collect::<Vec<_>>()
                .join(" + "),
            f.etcd_cpu_s,
            f.cpu_us_per_heartbeat,
            f.heartbeats_by_broker
                .iter()
                .map(|n| format!("{n:.0}"))
                .collect::<Vec<_>>()
                .join(" / "),
        ));
    }
    out
}
