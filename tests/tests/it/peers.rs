//! loadgen's drivers for the paper's competitors and today's peers, against
//! the real RabbitMQ, ActiveMQ, NATS (JetStream) and Redis (Streams): the
//! Debian packages `deploy/test-deps.sh` puts in place
//! (`.ci/run` does). The test starts them with `deploy/peers.sh` in a data
//! directory of its own, leaves alone any that already listen, and stops
//! only what it started. A missing package fails the test, never skips it.

use harness::{binary, TempDir};
use serde_json::Value;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;

const RABBITMQ_PORT: u16 = 5672;
const ACTIVEMQ_STOMP_PORT: u16 = 61613;
const NATS_PORT: u16 = 4222;
const REDIS_PORT: u16 = 6379;

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
    /// Which of RabbitMQ, ActiveMQ, NATS and Redis this test started.
    started: [bool; 4],
}

impl Peers {
    fn start() -> Peers {
        assert!(
            Path::new("/usr/lib/rabbitmq/bin/rabbitmq-server").exists()
                && Path::new("/usr/share/activemq/bin/activemq.jar").exists()
                && Path::new("/usr/sbin/nats-server").exists()
                && Path::new("/usr/bin/redis-server").exists(),
            "RabbitMQ, ActiveMQ, NATS and Redis are not all installed: run `bash deploy/test-deps.sh` (as root; the README's test command does)"
        );
        let started = [RABBITMQ_PORT, ACTIVEMQ_STOMP_PORT, NATS_PORT, REDIS_PORT]
            .map(|port| !listening(port));
        let peers = Peers {
            dir: TempDir::new("peers"),
            started,
        };
        let output = peers.script("start");
        assert!(
            output.status.success(),
            "deploy/peers.sh start failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        peers
    }

    fn script(&self, action: &str) -> std::process::Output {
        Command::new("bash")
            .arg(peers_script())
            .arg(action)
            .env("RINGLOG_PEERS_DIR", self.dir.path())
            .output()
            .unwrap_or_else(|e| panic!("running deploy/peers.sh {action}: {e}"))
    }
}

impl Drop for Peers {
    fn drop(&mut self) {
        let _ = self.script("stop");
    }
}

#[test]
fn paper_drives_rabbitmq_activemq_nats_and_redis_with_exact_counts() {
    let peers = Peers::start();
    let out = TempDir::new("paper-peers");
    let messages = 3000;
    let output = Command::new(binary("loadgen"))
        .args(["paper", "--messages", &messages.to_string()])
        .args(["--systems", "rabbitmq,activemq,nats,redis", "--out"])
        .arg(out.path())
        .env("RINGLOG_PEERS_DIR", peers.dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "loadgen paper failed:\n{stdout}\n{stderr}"
    );

    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("paper.json")).unwrap())
            .unwrap();
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 12, "{stdout}");
    for row in rows {
        assert_eq!(row["status"], "ok", "{row:#}\n{stderr}");
        // Every experiment moved exactly the messages asked for: the
        // producers count acknowledged sends (the final receipt or confirm),
        // the consumers count what they received.
        assert_eq!(row["result"]["messages"], messages, "{row:#}");
        assert_eq!(row["result"]["bytes"], messages * 200, "{row:#}");
    }
    for (i, system) in ["rabbitmq", "activemq", "nats", "redis"]
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
}
