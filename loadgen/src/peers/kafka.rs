//! Apache Kafka 4.4 (KRaft, one combined broker and controller, started by
//! `deploy/peers.sh start kafka`), driven through Kafka's own Java client
//! by the project's small driver, `deploy/kafka/PaperDriver.java`, which
//! `deploy/peers.sh install kafka` compiles beside Kafka's jars. loadgen
//! runs it as a process and counts what it reports every 100 ms; the clock
//! starts at its `ready` (the JVM up, the topic made, the connection open),
//! so the JVM's start is not charged to Kafka.
//!
//! Each experiment writes one topic of one partition and one copy, as the
//! paper's did. Producing: acks=0 (ringlog's acks none: nothing answered),
//! batch 1 with batching off (`batch.size=0`: a request per record,
//! pipelined), batch 50 with room for 50 records a request and a 5 ms
//! linger. Kafka keeps its flush defaults (no fsync of its own; the OS
//! writes the page cache back), as ringlog with acks none does not wait for
//! a flush either. Consuming: one consumer assigned the partition, from
//! its start, 10,000 records a poll.

use crate::stats::Stats;
use anyhow::{bail, Context};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The default address `deploy/peers.sh` starts Kafka on (ringlog keeps
/// 9092).
pub const DEFAULT_ADDRESS: &str = "127.0.0.1:29092";

/// Kafka's version, as `deploy/kafka/pom.xml` pins it.
pub const VERSION: &str = "4.4.0";

/// Where `deploy/peers.sh install kafka` puts Kafka's jars and the driver,
/// under the peers directory.
pub fn home(peers_dir: &Path) -> PathBuf {
    peers_dir.join(format!("kafka-{VERSION}"))
}

/// True when something accepts connections at `address`.
pub fn reachable(address: &str) -> bool {
    address
        .parse()
        .ok()
        .is_some_and(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_secs(2)).is_ok())
}

/// Why the driver cannot run from `home`, if it cannot.
pub fn missing_driver(home: &Path) -> Option<String> {
    (!home.join("driver").join("PaperDriver.class").exists()).then(|| {
        format!(
            "the Kafka driver is not in {} (install it with `deploy/peers.sh install kafka`)",
            home.display()
        )
    })
}

fn driver(home: &Path) -> Command {
    let mut command = Command::new("java");
    command
        .arg("-Xms1G")
        .arg("-Xmx1G")
        .arg("-cp")
        .arg(format!(
            "{}:{}",
            home.join("libs").join("*").display(),
            home.join("driver").display()
        ))
        .arg("PaperDriver");
    command
}

/// Produces `messages` of `size` bytes into a new topic `topic`, `batch`
/// records a request (1: batching off), counting each as the driver
/// reports it sent (acks=0: nothing is answered).
pub fn produce(
    home: &Path,
    address: &str,
    topic: &str,
    messages: u64,
    size: usize,
    batch: usize,
    stats: &Stats,
) -> anyhow::Result<()> {
    let mut command = driver(home);
    command.args([
        "produce",
        address,
        topic,
        &messages.to_string(),
        &size.to_string(),
        &batch.to_string(),
        "0",
    ]);
    run(command, messages, size, stats)
}

/// Reads `messages` from the start of `topic`'s only partition.
pub fn consume(
    home: &Path,
    address: &str,
    topic: &str,
    messages: u64,
    size: usize,
    stats: &Stats,
) -> anyhow::Result<()> {
    let mut command = driver(home);
    command.args(["consume", address, topic, &messages.to_string()]);
    run(command, messages, size, stats)
}

/// Deletes the topics (their data goes with them).
pub fn delete_topics(home: &Path, address: &str, topics: &[&str]) {
    let mut command = driver(home);
    command.arg("delete").arg(address).args(topics);
    let _ = command.stdout(Stdio::null()).status();
}

/// Runs the driver and counts what it reports: `ready` starts the clock,
/// `count N` adds what is new, `done N` ends it.
fn run(mut command: Command, expected: u64, size: usize, stats: &Stats) -> anyhow::Result<()> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting java for the Kafka driver (is Java 17 installed?)")?;
    let stdout = child.stdout.take().context("the driver's output")?;
    let mut counted = 0u64;
    let mut done = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading the Kafka driver's output")?;
        let (word, number) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        match word {
            "ready" => stats.reset(),
            "count" | "done" => {
                let n: u64 = number
                    .trim()
                    .parse()
                    .with_context(|| format!("the Kafka driver said {line:?}"))?;
                if n > counted {
                    stats.add(n - counted, (n - counted) * size as u64);
                    counted = n;
                }
                if word == "done" {
                    stats.freeze();
                    done = Some(n);
                }
            }
            _ => {}
        }
    }
    let status = child.wait().context("waiting for the Kafka driver")?;
    if !status.success() {
        bail!("the Kafka driver failed ({status}); its errors are above");
    }
    match done {
        Some(n) if n == expected => Ok(()),
        Some(n) => bail!("the Kafka driver counted {n} of {expected} messages"),
        None => bail!("the Kafka driver ended without saying it was done"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(text: &str) -> Command {
        let mut command = Command::new("sh");
        command.args(["-c", text]);
        command
    }

    #[test]
    fn the_drivers_reports_are_counted_from_ready_to_done() {
        let stats = Stats::new();
        stats.add(7, 7);
        run(
            script("echo ready; echo count 4; echo count 4; echo done 10"),
            10,
            200,
            &stats,
        )
        .unwrap();
        assert_eq!(stats.summary().messages, 10, "counted from ready on");
        assert_eq!(stats.summary().bytes, 2_000);

        let short = run(script("echo ready; echo done 9"), 10, 200, &Stats::new());
        assert!(short.unwrap_err().to_string().contains("9 of 10"));
        let failed = run(script("echo ready; exit 1"), 10, 200, &Stats::new());
        assert!(failed.unwrap_err().to_string().contains("failed"));
        let silent = run(script("echo ready"), 10, 200, &Stats::new());
        assert!(silent.unwrap_err().to_string().contains("without saying"));
    }
}
