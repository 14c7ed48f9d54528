//! `loadgen failover`: how long a consumer group takes to consume a member's
//! partitions again after the member dies (SIGKILL: its session must time
//! out) and after it leaves cleanly (SIGTERM: `ringlog consume --group`
//! commits and leaves at once).
//!
//! The members are real `ringlog consume --group` processes (the binary
//! beside loadgen's) while a producer sends a steady stream to every
//! partition. "Consumed again" is the moment every partition of the member
//! that went has a new owner whose committed offset passed the one at the
//! moment it went: the new owner has read and committed new messages there.

use crate::workload::ensure_topic;
use anyhow::{bail, Context};
use protocol::client::{AckMode, GroupDescription, Producer, ProducerConfig};
use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A failover run's settings.
#[derive(Debug, Clone)]
pub struct FailoverSpec {
    /// Broker addresses.
    pub brokers: String,
    /// Topic (created with `partitions` if missing).
    pub topic: String,
    /// Its partitions.
    pub partitions: u32,
    /// Group members (processes).
    pub members: usize,
    /// Each member's session timeout.
    pub session_timeout_ms: u64,
    /// Messages per second the producer sends while the members run.
    pub rate: u64,
}

/// What a failover run measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FailoverOutcome {
    /// From the SIGKILL of a member to its partitions consumed again.
    pub after_sigkill: Duration,
    /// Partitions the killed member owned.
    pub killed_partitions: usize,
    /// From the SIGTERM (a clean leave) of a member to its partitions
    /// consumed again.
    pub after_leave: Duration,
    /// Partitions the leaving member owned.
    pub left_partitions: usize,
}

struct Member {
    child: Child,
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ringlog_binary() -> anyhow::Result<std::path::PathBuf> {
    let exe = std::env::current_exe()?;
    let path = exe
        .parent()
        .context("loadgen has no directory")?
        .join("ringlog");
    if !path.exists() {
        bail!(
            "{} is missing: build it with `cargo build --release --bins`",
            path.display()
        );
    }
    Ok(path)
}

/// Partitions owned by each member id, and each partition's committed offset.
fn owners(description: &GroupDescription) -> (BTreeMap<String, Vec<u32>>, BTreeMap<u32, u64>) {
    let mut by_member: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    let mut committed = BTreeMap::new();
    for p in &description.partitions {
        if !p.owner.is_empty() {
            by_member
                .entry(p.owner.clone())
                .or_default()
                .push(p.partition);
        }
        if let Some(offset) = p.offset {
            committed.insert(p.partition, offset);
        }
    }
    (by_member, committed)
}

/// Runs the measurement.
pub fn failover(spec: &FailoverSpec) -> anyhow::Result<FailoverOutcome> {
    if spec.members < 2 {
        bail!("failover needs at least 2 members (one goes, the others take over)");
    }
    let client = crate::connect(&spec.brokers)
        .with_context(|| format!("no broker reachable at {}", spec.brokers))?;
    let partitions = ensure_topic(&client, &spec.topic, spec.partitions, 0)?;
    let group = format!(
        "failover-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    );
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (spec, stop) = (spec.clone(), stop.clone());
        std::thread::spawn(move || -> anyhow::Result<()> {
            let client = crate::connect(&spec.brokers)?;
            let mut producer = Producer::new(
                &client,
                &spec.topic,
                ProducerConfig {
                    acks: AckMode::Written,
                    linger: Duration::from_millis(5),
                    ..ProducerConfig::default()
                },
            )?;
            let period = Duration::from_secs_f64(100.0 / spec.rate.max(100) as f64);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..100 {
                    producer.send_to((n % u64::from(partitions)) as u32, None, &n.to_le_bytes())?;
                    n += 1;
                }
                std::thread::sleep(period);
            }
            producer.flush()?;
            Ok(())
        })
    };
    let binary = ringlog_binary()?;
    let spawn_member = || -> anyhow::Result<(u32, Member)> {
        let child = Command::new(&binary)
            .args(["--brokers", &spec.brokers, "consume", &spec.topic])
            .args([
                "--group",
                &group,
                "--from",
                "latest",
                "--session-timeout-ms",
            ])
            .arg(spec.session_timeout_ms.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        Ok((child.id(), Member { child }))
    };
    let mut members: BTreeMap<u32, Member> = BTreeMap::new();
    for _ in 0..spec.members {
        let (pid, member) = spawn_member()?;
        members.insert(pid, member);
    }
    // The member id starts with `<host>-<pid>-` (ringlog's member name).
    let member_of = |pid: u32, id: &str| id.split('-').rev().nth(1) == Some(&pid.to_string());
    let wait = |what: &str, check: &mut dyn FnMut(&GroupDescription) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let description = client.describe_group(&group)?;
            if check(&description) {
                return Ok::<_, anyhow::Error>(Instant::now());
            }
            if Instant::now() > deadline {
                bail!("{what}: not within 120 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let settled = |d: &GroupDescription, members: usize| {
        let (by_member, committed) = owners(d);
        d.view.members.len() == members
            && by_member.len() == members.min(partitions as usize)
            && by_member.values().map(Vec::len).sum::<usize>() == partitions as usize
            && committed.len() == partitions as usize
    };
    wait("every member owns partitions and has committed", &mut |d| {
        settled(d, spec.members)
    })?;

    let measure = |members: &mut BTreeMap<u32, Member>,
                   signal: i32,
                   label: &str|
     -> anyhow::Result<(Duration, usize)> {
        let description = client.describe_group(&group)?;
        let (by_member, committed) = owners(&description);
        let (&pid, _) = members
            .iter()
            .find(|(pid, _)| by_member.keys().any(|id| member_of(**pid, id)))
            .context("no member process owns a partition")?;
        let theirs: Vec<u32> = by_member
            .iter()
            .filter(|(id, _)| member_of(pid, id))
            .flat_map(|(_, ps)| ps.clone())
            .collect();
        let before: BTreeMap<u32, u64> = theirs
            .iter()
            .map(|p| (*p, committed.get(p).copied().unwrap_or(0)))
            .collect();
        // SAFETY: kill(2) on a child process this run started.
        unsafe { libc::kill(pid as i32, signal) };
        let went = Instant::now();
        let back = wait(label, &mut |d| {
            let (by_member, committed) = owners(d);
            theirs.iter().all(|p| {
                let new_owner = by_member
                    .iter()
                    .any(|(id, ps)| !member_of(pid, id) && ps.contains(p));
                new_owner && committed.get(p).copied().unwrap_or(0) > before[p]
            })
        })?;
        if let Some(mut member) = members.remove(&pid) {
            let _ = member.child.wait();
        }
        Ok((back - went, theirs.len()))
    };
    let (after_sigkill, killed_partitions) = measure(
        &mut members,
        libc::SIGKILL,
        "the killed member's partitions consumed again",
    )?;
    // A replacement joins, so that someone is left to take over the next.
    let (pid, member) = spawn_member()?;
    members.insert(pid, member);
    wait("the group settles with a new member", &mut |d| {
        settled(d, spec.members)
    })?;
    let (after_leave, left_partitions) = measure(
        &mut members,
        libc::SIGTERM,
        "the leaving member's partitions consumed again",
    )?;
    stop.store(true, Ordering::Relaxed);
    for (pid, _) in members.iter() {
        // SAFETY: kill(2) on a child process this run started.
        unsafe { libc::kill(*pid as i32, libc::SIGTERM) };
    }
    for (_, mut member) in std::mem::take(&mut members) {
        let _ = member.child.wait();
    }
    producer
        .join()
        .map_err(|_| anyhow::anyhow!("the producer panicked"))??;
    Ok(FailoverOutcome {
        after_sigkill,
        killed_partitions,
        after_leave,
        left_partitions,
    })
}
