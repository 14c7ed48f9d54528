//! loadgen's drivers for the paper's competitors and today's peers, against
//! the real RabbitMQ, ActiveMQ, NATS (JetStream), Redis (Streams) and
//! Apache Kafka 4.4: the Debian packages and Kafka's jars
//! `deploy/test-deps.sh` puts in place (`.ci/run` does). The tests start
//! them with `deploy/peers.sh` in a data directory of their own, leave alone
//! any that already listen, and stop only what they started. A missing
//! package fails a test, never skips it. No figure is asserted, only that
//! every run moved exactly what it was asked to.

use harness::{binary, TempDir};
use serde_json::Value;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;

const RABBITMQ_PORT: u16 = 5672;
const ACTIVEMQ_STOMP_PORT: u16 = 61613;
const NATS_PORT: u16 = 4222;
const REDIS_PORT: u16 = 6379;
const KAFKA_PORT: u16 = 29092;

/// Where `deploy/test-deps.sh` installs Kafka's jars and loadgen's driver.
const KAFKA_HOME: &str = "/tmp/ringlog-peers/kafka-4.4.0";

fn peers_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/peers.sh")
}

fn listening(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// The peers for one test; `deploy/peers.sh stop` on drop stops what this
/// test started (it acts only on the peers whose data is in `dir`).
struct Peers {
    dir: TempDir,
    /// Which of RabbitMQ, ActiveMQ, NATS, Redis and Kafka this test started.
    started: [bool; 5],
    /// What `deploy/peers.sh start` was asked for (all, or a cluster).
    what: &'static str,
}

fn assert_installed() {
    assert!(
        Path::new("/usr/lib/rabbitmq/bin/rabbitmq-server").exists()
            && Path::new("/usr/share/activemq/bin/activemq.jar").exists()
            && Path::new("/usr/sbin/nats-server").exists()
            && Path::new("/usr/bin/redis-server").exists()
            && Path::new(KAFKA_HOME)
                .join("libs/kafka_2.13-4.4.0.jar")
                .exists(),
        "RabbitMQ, ActiveMQ, NATS, Redis and Kafka are not all installed: run `bash deploy/test-deps.sh` (as root; the README's test command does)"
    );
}

impl Peers {
    /// `deploy/peers.sh start WHAT` in a directory of this test's own.
    fn start(what: &'static str) -> Peers {
        assert_installed();
        let started = [
            RABBITMQ_PORT,
            ACTIVEMQ_STOMP_PORT,
            NATS_PORT,
            REDIS_PORT,
            KAFKA_PORT,
        ]
        .map(|port| !listening(port));
        let peers = Peers {
            dir: TempDir::new("peers"),
            started,
            what,
        };
        let output = peers.script("start", what);
        assert!(
            output.status.success(),
            "deploy/peers.sh start {what} failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        peers
    }

    fn script(&self, action: &str, what: &str) -> std::process::Output {
        Command::new("bash")
            .arg(peers_script())
            .args([action, what])
            .env("RINGLOG_PEERS_DIR", self.dir.path())
            .env("RINGLOG_KAFKA_HOME", KAFKA_HOME)
            .output()
            .unwrap_or_else(|e| panic!("running deploy/peers.sh {action} {what}: {e}"))
    }

    fn loadgen(&self) -> Command {
        let mut command = Command::new(binary("loadgen"));
        command
            .env("RINGLOG_PEERS_DIR", self.dir.path())
            .env("RINGLOG_KAFKA_HOME", KAFKA_HOME);
        command
    }
}

/// Runs `command`, which must succeed; its standard output and error.
fn succeeds(command: &mut Command) -> (String, String) {
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "{command:?} failed:\n{stdout}\n{stderr}"
    );
    (stdout, stderr)
}

impl Drop for Peers {
    fn drop(&mut self) {
        let _ = self.script("stop", self.what);
    }
}

#[test]
fn paper_drives_rabbitmq_activemq_nats_redis_and_kafka_with_exact_counts() {
    let peers = Peers::start("all");
    let out = TempDir::new("paper-peers");
    let messages = 3000;
    let (stdout, stderr) = succeeds(
        peers
            .loadgen()
            .args(["paper", "--messages", &messages.to_string()])
            .args(["--systems", "rabbitmq,activemq,nats,redis,kafka", "--out"])
            .arg(out.path()),
    );

    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("paper.json")).unwrap())
            .unwrap();
    let rows = report["rows"].as_array().unwrap();
    // Three experiments each, and Kafka's own producer defaults.
    assert_eq!(rows.len(), 16, "{stdout}");
    for row in rows {
        assert_eq!(row["status"], "ok", "{row:#}\n{stderr}");
        // Every experiment moved exactly the messages asked for: the
        // producers count acknowledged sends (the final receipt or confirm),
        // the consumers count what they received.
        assert_eq!(row["result"]["messages"], messages, "{row:#}");
        assert_eq!(row["result"]["bytes"], messages * 200, "{row:#}");
    }
    for (i, system) in ["rabbitmq", "activemq", "nats", "redis", "kafka"]
        .into_iter()
        .enumerate()
    {
        let started = peers.started[i];
        let disk = &report["disk"][i];
        assert_eq!(disk["system"], system);
        // Bytes on disk come from the data directory peers.sh made; a peer
        // that was already running keeps its data elsewhere.
        if started {
            let per_message = disk["bytes_per_message"].as_f64().unwrap_or(0.0);
            assert!(
                per_message > 200.0,
                "{system} stores its 200-byte messages in {per_message} bytes each? {disk:#}"
            );
        }
    }
    assert!(
        stdout.contains("publisher confirms, window of 50"),
        "{stdout}"
    );
    assert!(stdout.contains("transactions of 50 sends"), "{stdout}");
    assert!(stdout.contains("at most 50 unacknowledged"), "{stdout}");
    assert!(stdout.contains("XADD pipelines of 50"), "{stdout}");
    assert!(stdout.contains("batch.size=0"), "{stdout}");
    assert!(
        stdout.contains("Kafka's default producer settings"),
        "{stdout}"
    );

    // `loadgen sustained`, short: dd before and after, ringlog with its
    // producer and with Kafka's, Kafka 4.4, and the quiet topic beside a
    // hot one on both.
    let sustained = TempDir::new("sustained");
    let (stdout, _) = succeeds(
        peers
            .loadgen()
            .args(["sustained", "--seconds", "8", "--warmup", "3"])
            .args(["--dd-bytes", "67108864", "--quiet-seconds", "6"])
            .args(["--retention-bytes", "1000000000", "--out"])
            .arg(sustained.path()),
    );
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(sustained.path().join("sustained.json")).unwrap(),
    )
    .unwrap();
    for rates in ["dd_direct", "dd_buffered"] {
        let rates = report[rates].as_array().unwrap();
        assert_eq!(rates.len(), 2, "{report:#}");
        assert!(
            rates.iter().all(|r| r.as_f64().unwrap() > 0.0),
            "{report:#}"
        );
    }
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4, "{stdout}");
    for run in runs {
        assert!(run["sustained"].as_f64().unwrap() > 0.0, "{run:#}");
        assert!(!run["series"].as_array().unwrap().is_empty(), "{run:#}");
    }
    let isolation = report["isolation"].as_array().unwrap();
    assert_eq!(isolation.len(), 2, "{stdout}");
    for run in isolation {
        for figure in ["alone", "beside"] {
            assert!(run[figure][1].as_f64().unwrap() > 0.0, "{run:#}");
        }
    }
    assert!(isolation[0]["after_flushed"][1].as_f64().unwrap() > 0.0);
    // The consumer a second behind the producer read what it wrote.
    assert!(
        runs[1]["tail"]["consumed"].as_f64().unwrap() > 0.0,
        "{report:#}"
    );
    assert!(stdout.contains("ringlog ÷ Kafka sustained"), "{stdout}");
    assert!(sustained.path().join("sustained.svg").exists());
}

/// `loadgen replication` against Kafka's three KRaft nodes and NATS's
/// three JetStream servers (a leader SIGKILLed once each, brought back by
/// the node's start.sh), and `loadgen sweep` against Kafka: short runs
/// that must move every message and come back after the kill.
#[test]
fn replication_and_sweep_drive_three_node_kafka_and_nats_clusters() {
    let kafka = Peers::start("kafka-cluster");
    let nats = Peers::start("nats-cluster");
    // Both clusters' pid files in one directory, as loadgen reads them.
    let dir = TempDir::new("clusters");
    for (peers, name) in [(&kafka, "kafka-cluster"), (&nats, "nats-cluster")] {
        std::os::unix::fs::symlink(peers.dir.path().join(name), dir.path().join(name)).unwrap();
    }
    let out = TempDir::new("replication-peers");
    let (stdout, _) = succeeds(
        kafka
            .loadgen()
            .env("RINGLOG_PEERS_DIR", dir.path())
            .args([
                "replication",
                "--systems",
                "kafka,nats",
                "--messages",
                "3000",
            ])
            .args(["--latency-rate", "200", "--latency-seconds", "2"])
            .args(["--failovers", "1", "--out"])
            .arg(out.path()),
    );
    let figures: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("peers.json")).unwrap())
            .unwrap();
    let figures = figures.as_array().unwrap();
    assert_eq!(figures.len(), 2, "{stdout}");
    for (figure, system) in figures.iter().zip(["kafka", "nats"]) {
        assert_eq!(figure["system"], system);
        assert!(
            figure["throughput"]["msgs_per_sec"].as_f64().unwrap() > 0.0,
            "{figure:#}"
        );
        assert!(
            figure["latency"]["latency"]["count"].as_u64().unwrap() > 0,
            "{figure:#}"
        );
        // Every node's CPU is counted.
        assert_eq!(
            figure["throughput"]["cpu"]["brokers_s"]
                .as_array()
                .unwrap()
                .len(),
            3
        );
        assert_eq!(
            figure["failover"]["gaps_ms"].as_array().unwrap().len(),
            1,
            "{figure:#}"
        );
    }
    assert!(stdout.contains("Kafka failover 1: node"), "{stdout}");
    assert!(stdout.contains("NATS failover 1: server"), "{stdout}");

    let json = out.path().join("sweep.json");
    succeeds(
        kafka
            .loadgen()
            .args(["--brokers", "127.0.0.1:29192", "sweep", "--system", "kafka"])
            .args(["--acks", "written,flushed", "--rates", "300"])
            .args(["--duration", "3", "--warmup", "1", "--json"])
            .arg(&json),
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let points = report["result"]["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{report:#}");
    for point in points {
        assert_eq!(point["lost"], 0, "{point:#}");
        assert_eq!(point["duplicated"], 0, "{point:#}");
        assert!(point["e2e"]["count"].as_u64().unwrap() > 0, "{point:#}");
    }

    // Kafka's own perf tools and kcat, the same against ringlog's Kafka
    // listener (a cluster loadgen starts) and against these three nodes.
    let perf = TempDir::new("kafka-perf");
    let (stdout, _) = succeeds(
        kafka
            .loadgen()
            .env("RINGLOG_PEERS_DIR", dir.path())
            .args(["kafka-perf", "--replicas", "3", "--rounds", "1"])
            .args(["--messages", "3000", "--out"])
            .arg(perf.path()),
    );
    let rows: Value = serde_json::from_str(
        &std::fs::read_to_string(perf.path().join("kafka-perf.json")).unwrap(),
    )
    .unwrap();
    let rows = rows.as_array().unwrap();
    // Three setups (ringlog flushed, ringlog write.caching, Kafka), four
    // clients each, every one counted.
    assert_eq!(rows.len(), 12, "{stdout}");
    for row in rows {
        assert!(row["msgs_per_s"].as_f64().unwrap() > 0.0, "{row:#}");
        assert!(row["broker_cpu_us"].as_f64().unwrap() >= 0.0, "{row:#}");
        // ringlog's consumers are served with sendfile, every byte.
        if row["client"] == "ConsumerPerformance" && row["system"] != "kafka 4.4" {
            assert_eq!(row["zero_copy"].as_f64(), Some(1.0), "{row:#}");
        }
    }
    assert!(
        stdout.contains("| 3 | all | ProducerPerformance | ringlog write.caching |"),
        "{stdout}"
    );
    drop(nats);
}
