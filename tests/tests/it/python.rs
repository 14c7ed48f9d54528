//! Issue 10, items 1–2: the Python client's tests (`protocol/python/tests`)
//! against the real broker binary. This test builds a virtualenv under
//! `target/tools/python-venv`, installs the package from `protocol/python`
//! and pytest into it (from PyPI), starts a standalone broker with two
//! shards and two cluster members (on a real etcd, for the group consumer
//! and a replicated topic) and runs pytest. A machine without `python3 -m venv` fails here, loudly.

use harness::{binary, Broker, BrokerOptions};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or_else(|| panic!("tests/ has a parent"))
        .to_path_buf()
}

fn run(command: &mut Command, what: &str) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {command:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{text}",
        output.status
    );
    text
}

#[test]
fn the_python_client_passes_its_tests_against_the_broker() {
    let root = repo_root();
    let venv = root.join("target/tools/python-venv");
    let python = venv.join("bin/python");
    if !python.exists() {
        run(
            Command::new("python3").arg("-m").arg("venv").arg(&venv),
            "creating the virtualenv (Debian: apt-get install python3-venv)",
        );
    }
    run(
        Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "pytest==8.3.4",
        ]),
        "installing pytest",
    );
    // Reinstalled every run, so the tests see the package as it is now.
    run(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--force-reinstall",
            ])
            .arg(root.join("protocol/python")),
        "installing the ringlog package",
    );
    let broker = Broker::start(BrokerOptions::default());
    // The group consumer's tests need a cluster: a real etcd and a member.
    let etcd = harness::etcd::Etcd::start();
    let member = Broker::start(BrokerOptions::clustered(&etcd, "python", 1));
    // A second one, for the replicated topic's tests (test_replication.py).
    let _second = Broker::start(BrokerOptions::clustered(&etcd, "python", 2));
    let output = run(
        Command::new(&python)
            .args(["-m", "pytest", "-q", "-s", "-p", "no:cacheprovider"])
            .arg(root.join("protocol/python/tests"))
            .current_dir(std::env::temp_dir())
            .env("RINGLOG_BROKERS", broker.address())
            .env("RINGLOG_CLUSTER_BROKERS", member.address())
            .env("RINGLOG_CLI", binary("ringlog")),
        "the Python client's tests",
    );
    eprintln!("{output}");
    assert!(output.contains(" passed"), "{output}");
}
