//! Issue 44, item 5: the same client script against ringlog's Kafka
//! listener and against Apache Kafka 4.4 (`deploy/peers.sh start
//! kafka-oracle`, one KRaft node on 127.0.0.1:29492). The script
//! (`tests/kafka/differential.py`, kafka-python) prints everything but
//! offset values — records, keys, headers, timestamps, order, a lookup by
//! time, a group's commit, the errors of the same bad requests — and the
//! two outputs must be the same, line for line.

use harness::{Broker, BrokerOptions, TempDir};
use std::path::Path;
use std::process::Command;

const KAFKA_HOME: &str = "/tmp/ringlog-peers/kafka-4.4.0";

/// Kafka's node for this test; stopped on drop.
struct Oracle {
    dir: TempDir,
}

impl Oracle {
    fn script(dir: &Path, action: &str) -> std::process::Output {
        Command::new("bash")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/peers.sh"))
            .args([action, "kafka-oracle"])
            .env("RINGLOG_PEERS_DIR", dir)
            .env("RINGLOG_KAFKA_HOME", KAFKA_HOME)
            .output()
            .unwrap()
    }

    fn start() -> Oracle {
        assert!(
            Path::new(KAFKA_HOME)
                .join("libs/kafka_2.13-4.4.0.jar")
                .exists(),
            "Kafka 4.4 is not installed in {KAFKA_HOME}: run `bash deploy/test-deps.sh`"
        );
        let dir = TempDir::new("kafka-oracle");
        let output = Oracle::script(dir.path(), "start");
        assert!(
            output.status.success(),
            "deploy/peers.sh start kafka-oracle: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Oracle { dir }
    }
}

impl Drop for Oracle {
    fn drop(&mut self) {
        let _ = Oracle::script(self.dir.path(), "stop");
    }
}

fn run_script(bootstrap: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("kafka/differential.py");
    let output = harness::python::command_with("kafka-python", &["kafka-python==3.0.12"])
        .arg(script)
        .arg(bootstrap)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout).into_owned();
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "against {bootstrap}:\n{out}{err}");
    out
}

#[test]
fn kafka_python_sees_the_same_on_ringlog_and_on_kafka() {
    let oracle = Oracle::start();
    let broker = Broker::start(BrokerOptions {
        args: vec!["--kafka-listen".into(), "127.0.0.1:0".into()],
        ..BrokerOptions::default()
    });
    let kafka = run_script("127.0.0.1:29492");
    let ringlog = run_script(&broker.kafka[0]);
    drop(oracle);
    println!("{ringlog}");
    assert!(kafka.lines().count() >= 45, "{kafka}");
    for (k, r) in kafka.lines().zip(ringlog.lines()) {
        assert_eq!(
            k, r,
            "Kafka said {k:?}, ringlog {r:?}\n--- Kafka\n{kafka}\n--- ringlog\n{ringlog}"
        );
    }
    assert_eq!(
        kafka.lines().count(),
        ringlog.lines().count(),
        "{kafka}\n{ringlog}"
    );
}
