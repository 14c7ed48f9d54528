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

use crate::stats::{LatencySummary, Stats};
use anyhow::{bail, Context};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// The default address `deploy/peers.sh` starts Kafka on (ringlog keeps
/// 9092).
pub const DEFAULT_ADDRESS: &str = "127.0.0.1:29092";

/// Kafka's version, as `deploy/kafka/pom.xml` pins it.
pub const VERSION: &str = "4.4.0";

/// Where `deploy/peers.sh install kafka` puts Kafka's jars and the driver:
/// `RINGLOG_KAFKA_HOME` if set (as peers.sh reads it), else under the
/// peers directory.
pub fn home(peers_dir: &Path) -> PathBuf {
    match std::env::var_os("RINGLOG_KAFKA_HOME") {
        Some(home) if !home.is_empty() => PathBuf::from(home),
        _ => peers_dir.join(format!("kafka-{VERSION}")),
    }
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

/// How the producer batches: `Records(1)` batching off, `Records(n)`
/// room for n records a request, `Defaults` Kafka's own producer settings
/// untouched (acks=all, idempotence, 16 KiB batches, 5 ms linger).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Batching {
    /// This many records a request.
    Records(usize),
    /// Kafka's defaults ("Kafka's best mode").
    Defaults,
}

/// What the driver reported besides its counts.
#[derive(Debug, Clone, Default)]
pub struct DriverOutcome {
    /// The driver JVM's CPU seconds from `ready` to the end.
    pub cpu_s: f64,
    /// `paced`: from each message's intended send time to its ack.
    pub publish: Option<LatencySummary>,
    /// `paced`: from each message's intended send time to its receipt.
    pub e2e: Option<LatencySummary>,
    /// `paced`: messages sent after the warm-up and never received.
    pub lost: u64,
    /// `paced`: messages received more than once.
    pub duplicated: u64,
    /// `paced`: messages/s received after the warm-up.
    pub achieved: f64,
}

/// Makes `topic` (if missing) with `partitions` of `replicas` copies and
/// the topic configs `configs` (`min.insync.replicas=2`, ...).
pub fn create(
    home: &Path,
    address: &str,
    topic: &str,
    partitions: u32,
    replicas: u32,
    configs: &[&str],
) -> anyhow::Result<()> {
    let mut command = driver(home);
    command
        .args(["create", address, topic])
        .arg(partitions.to_string())
        .arg(replicas.to_string())
        .args(configs);
    let output = command
        .stderr(Stdio::inherit())
        .output()
        .context("starting java for the Kafka driver (is Java 17 installed?)")?;
    if !output.status.success() {
        bail!("creating Kafka topic {topic} failed; the driver's errors are above");
    }
    Ok(())
}

/// Produces `messages` of `size` bytes into `topic` (made with one
/// partition and one copy if missing), spread over its partitions,
/// counting each as the driver reports it acknowledged (acks=0: sent).
#[allow(clippy::too_many_arguments)]
pub fn produce(
    home: &Path,
    address: &str,
    topic: &str,
    messages: u64,
    size: usize,
    batching: Batching,
    acks: &str,
    stats: &Stats,
) -> anyhow::Result<DriverOutcome> {
    let mut command = driver(home);
    let batch = match batching {
        Batching::Records(n) => n.to_string(),
        Batching::Defaults => "defaults".to_string(),
    };
    command.args([
        "produce",
        address,
        topic,
        &messages.to_string(),
        &size.to_string(),
        &batch,
        acks,
    ]);
    run(command, messages, size, stats)
}

/// Reads `messages` from the start of every partition of `topic`.
pub fn consume(
    home: &Path,
    address: &str,
    topic: &str,
    messages: u64,
    size: usize,
    stats: &Stats,
) -> anyhow::Result<DriverOutcome> {
    let mut command = driver(home);
    command.args(["consume", address, topic, &messages.to_string()]);
    run(command, messages, size, stats)
}

/// A fixed-rate run of `seconds` (the first `warmup` not counted): a
/// producer at `rate` messages/s (0: as fast as it goes) with `acks`, and
/// a consumer of every partition, in one JVM; publish and end-to-end
/// latency from each message's intended send time.
#[allow(clippy::too_many_arguments)]
pub fn paced(
    home: &Path,
    address: &str,
    topic: &str,
    rate: f64,
    seconds: f64,
    warmup: f64,
    size: usize,
    acks: &str,
) -> anyhow::Result<DriverOutcome> {
    let mut command = driver(home);
    command.args([
        "paced",
        address,
        topic,
        &rate.to_string(),
        &seconds.to_string(),
        &warmup.to_string(),
        &size.max(16).to_string(),
        acks,
    ]);
    run_counting(command, None, size, &Stats::new())
}

/// The node id of the leader of `topic`'s `partition`, and how many
/// copies are in sync.
pub fn leader(
    home: &Path,
    address: &str,
    topic: &str,
    partition: u32,
) -> anyhow::Result<(u32, usize)> {
    let mut command = driver(home);
    command.args(["leader", address, topic, &partition.to_string()]);
    let output = command
        .stderr(Stdio::null())
        .output()
        .context("starting java for the Kafka driver")?;
    let text = String::from_utf8_lossy(&output.stdout);
    let words: Vec<&str> = text.split_whitespace().collect();
    match words.as_slice() {
        ["leader", id, "isr", n] => Ok((id.parse()?, n.parse()?)),
        _ => bail!("the Kafka driver did not name {topic}'s leader: {text:?}"),
    }
}

/// A synchronous acks=all producer sending a record every 2 ms until
/// dropped, keeping (sent, answered) of every answered send.
pub struct FailoverProducer {
    child: Child,
    /// Every answered send, on this process's clock.
    pub answered: Arc<crate::replication::Answered>,
}

impl FailoverProducer {
    /// Starts the driver's `failover` mode on `topic` and waits for its
    /// `ready`.
    pub fn start(home: &Path, address: &str, topic: &str) -> anyhow::Result<FailoverProducer> {
        let mut command = driver(home);
        command.args(["failover", address, topic]);
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting java for the Kafka driver")?;
        let stdout = child.stdout.take().context("the driver's output")?;
        let answered: Arc<crate::replication::Answered> = Arc::default();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let sink = answered.clone();
        std::thread::spawn(move || {
            // The driver's wall-clock microseconds, as instants here.
            let micros = |w: &str| {
                let at = SystemTime::UNIX_EPOCH + Duration::from_micros(w.parse::<u64>().ok()?);
                let ago = SystemTime::now().duration_since(at).unwrap_or_default();
                Instant::now().checked_sub(ago)
            };
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let words: Vec<&str> = line.split_whitespace().collect();
                match words.as_slice() {
                    ["ready", ..] => {
                        let _ = ready_tx.send(());
                    }
                    ["ok", sent, at] => {
                        if let (Some(sent), Some(at)) = (micros(sent), micros(at)) {
                            sink.lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .push((sent, at));
                        }
                    }
                    _ => {}
                }
            }
        });
        let mut producer = FailoverProducer { child, answered };
        if ready_rx.recv_timeout(Duration::from_secs(60)).is_err() {
            let _ = producer.child.kill();
            bail!("the Kafka failover producer did not start within 60 s");
        }
        Ok(producer)
    }
}

impl Drop for FailoverProducer {
    fn drop(&mut self) {
        // Closing its standard input ends it; a kill if it does not.
        drop(self.child.stdin.take());
        for _ in 0..100 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Deletes the topics (their data goes with them).
pub fn delete_topics(home: &Path, address: &str, topics: &[&str]) {
    let mut command = driver(home);
    command.arg("delete").arg(address).args(topics);
    let _ = command.stdout(Stdio::null()).status();
}

/// Runs the driver and counts what it reports: `ready` starts the clock,
/// `count N` adds what is new, `done N` ends it, which must be `expected`.
fn run(
    command: Command,
    expected: u64,
    size: usize,
    stats: &Stats,
) -> anyhow::Result<DriverOutcome> {
    run_counting(command, Some(expected), size, stats)
}

/// A `publish`/`e2e` line's figures: count, avg, p50, p95, p99, p99.9,
/// max, in microseconds.
fn latency_line(numbers: &[&str]) -> anyhow::Result<Option<LatencySummary>> {
    let values: Vec<f64> = numbers
        .iter()
        .map(|n| n.parse::<f64>())
        .collect::<Result<_, _>>()?;
    let ms = |i: usize| values.get(i).copied().unwrap_or(0.0) / 1e3;
    Ok(match values.first() {
        Some(&count) if count > 0.0 && values.len() == 7 => Some(LatencySummary {
            count: count as u64,
            avg_ms: ms(1),
            p50_ms: ms(2),
            p95_ms: ms(3),
            p99_ms: ms(4),
            p999_ms: ms(5),
            max_ms: ms(6),
            curve: Vec::new(),
        }),
        _ => None,
    })
}

fn run_counting(
    mut command: Command,
    expected: Option<u64>,
    size: usize,
    stats: &Stats,
) -> anyhow::Result<DriverOutcome> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting java for the Kafka driver (is Java 17 installed?)")?;
    let stdout = child.stdout.take().context("the driver's output")?;
    let mut counted = 0u64;
    let mut done = None;
    let mut outcome = DriverOutcome::default();
    let mut cpu_at_ready = 0.0;
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading the Kafka driver's output")?;
        let (word, number) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        let numbers: Vec<&str> = number.split_whitespace().collect();
        let first = || -> anyhow::Result<f64> {
            numbers
                .first()
                .context("a number")?
                .parse::<f64>()
                .with_context(|| format!("the Kafka driver said {line:?}"))
        };
        match word {
            "ready" => {
                stats.reset();
                cpu_at_ready = first().unwrap_or(0.0) / 1e9;
            }
            "cpu" => outcome.cpu_s = (first()? / 1e9 - cpu_at_ready).max(0.0),
            "publish" => outcome.publish = latency_line(&numbers)?,
            "e2e" => outcome.e2e = latency_line(&numbers)?,
            "lost" => outcome.lost = first()? as u64,
            "duplicated" => outcome.duplicated = first()? as u64,
            "achieved" => outcome.achieved = first()?,
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
    match (done, expected) {
        (Some(n), Some(expected)) if n != expected => {
            bail!("the Kafka driver counted {n} of {expected} messages")
        }
        (Some(_), _) => Ok(outcome),
        (None, _) => bail!("the Kafka driver ended without saying it was done"),
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
            script("echo ready 1000000000; echo count 4; echo count 4; echo cpu 3500000000; echo done 10"),
            10,
            200,
            &stats,
        )
        .map(|outcome| assert_eq!(outcome.cpu_s, 2.5, "CPU from ready to the end"))
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

    #[test]
    fn paced_runs_report_latency_in_microseconds_and_what_was_lost() {
        let outcome = run_counting(
            script(
                "echo ready 0; echo publish 100 1500 1000 2000 3000 4000 5000; \
                 echo e2e 0; echo lost 3; echo duplicated 1; echo achieved 19990; \
                 echo cpu 2000000000; echo done 97",
            ),
            None,
            200,
            &Stats::new(),
        )
        .unwrap();
        let publish = outcome.publish.expect("publish percentiles");
        assert_eq!(
            (publish.count, publish.p50_ms, publish.p999_ms),
            (100, 1.0, 4.0)
        );
        assert!(outcome.e2e.is_none(), "no samples, no percentiles");
        assert_eq!((outcome.lost, outcome.duplicated), (3, 1));
        assert_eq!((outcome.achieved, outcome.cpu_s), (19990.0, 2.0));
        let garbled = run_counting(
            script("echo ready 0; echo lost many; echo done 1"),
            None,
            1,
            &Stats::new(),
        );
        assert!(garbled.unwrap_err().to_string().contains("lost many"));
    }
}
