//! loadgen's drivers for the paper's competitors, against the real RabbitMQ
//! and ActiveMQ: the Debian packages `deploy/test-deps.sh` puts in place
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
    /// Which of (RabbitMQ, ActiveMQ) this test started.
    started: (bool, bool),
}

impl Peers {
    fn start() -> Peers {
        assert!(
            Path::new("/usr/lib/rabbitmq/bin/rabbitmq-server").exists()
                && Path::new("/usr/share/activemq/bin/activemq.jar").exists(),
            "RabbitMQ and ActiveMQ are not installed: run `bash deploy/test-deps.sh` (as root; the README's test command does)"
        );
        let started = (!listening(RABBITMQ_PORT), !listening(ACTIVEMQ_STOMP_PORT));
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
fn paper_drives_the_real_rabbitmq_and_activemq_with_exact_counts() {
    let peers = Peers::start();
    let out = TempDir::new("paper-peers");
    let messages = 3000;
    let output = Command::new(binary("loadgen"))
        .args(["paper", "--messages", &messages.to_string()])
        .args(["--systems", "rabbitmq,activemq", "--out"])
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
    assert_eq!(rows.len(), 6, "{stdout}");
    for row in rows {
        assert_eq!(row["status"], "ok", "{row:#}\n{stderr}");
        // Every experiment moved exactly the messages asked for: the
        // producers count acknowledged sends (the final receipt or confirm),
        // the consumers count what they received.
        assert_eq!(row["result"]["messages"], messages, "{row:#}");
        assert_eq!(row["result"]["bytes"], messages * 200, "{row:#}");
    }
    for (i, system, started) in [
        (0, "rabbitmq", peers.started.0),
        (1, "activemq", peers.started.1),
    ] {
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
}
