//! Issue 10, items 1–2: the Python client's tests (`protocol/python/tests`)
//! against the real broker binary. This test builds a virtualenv under
//! `target/tools/python-venv`, installs the package from `protocol/python`
//! and pytest into it (from PyPI), starts a standalone broker with two
//! shards, two cluster members (on a real etcd, for the group consumer
//! and a replicated topic) and a secured standalone broker (TLS, logins,
//! access control: issue 22, item 5), and runs pytest. A machine without `python3 -m venv` fails here, loudly.

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
            .arg(format!(
                "{}[codecs]",
                root.join("protocol/python").display()
            )),
        "installing the ringlog package with its codecs",
    );
    let broker = Broker::start(BrokerOptions::default());
    // The group consumer's tests need a cluster: a real etcd and a member.
    let etcd = harness::etcd::Etcd::start();
    let member = Broker::start(BrokerOptions::clustered(&etcd, "python", 1));
    // A second one, for the replicated topic's tests (test_replication.py).
    let _second = Broker::start(BrokerOptions::clustered(&etcd, "python", 2));
    // A secured one for test_security.py: TLS only, SCRAM or a client
    // certificate, access control on. Its first user goes in with the CLI
    // while it is stopped; alice and the rules through the broker.
    let scratch = harness::TempDir::new("python-secure");
    let files = harness::tls::make_certificates(&scratch.path().join("certs"));
    let mut secured = Broker::start(BrokerOptions {
        config_toml: format!(
            "{}authentication = \"scram_or_tls\"\nauthorization = true\nsuper_users = [\"User:admin\"]\nlogin_failure_delay_ms = 100\n",
            files.broker_toml(true)
        ),
        ..BrokerOptions::default()
    });
    secured.stop();
    let admin_password = scratch.path().join("admin.pw");
    std::fs::write(&admin_password, "admin-secret\n").unwrap();
    run(
        Command::new(binary("ringlog"))
            .args(["users", "add", "admin", "--password-file"])
            .arg(&admin_password)
            .arg("--data-dir")
            .arg(secured.data_dir()),
        "adding the secured broker's first user",
    );
    secured.restart();
    let admin = protocol::client::Client::with_config(
        &secured.address(),
        protocol::client::ClientConfig {
            tls: Some(protocol::client::TlsConfig::new(&files.ca).unwrap()),
            login: Some(protocol::client::Login {
                user: "admin".into(),
                password: b"admin-secret".to_vec(),
            }),
            ..protocol::client::ClientConfig::default()
        },
    )
    .unwrap_or_else(|e| panic!("admin logging in to the secured broker: {e}"));
    admin
        .alter_users(
            &[(
                "alice".into(),
                protocol::scram::Credential::new(b"alice-secret", 4096),
            )],
            &[],
        )
        .unwrap();
    let rules: Vec<protocol::acl::AclRule> = [
        "allow User:alice read topic-prefix:py-",
        "allow User:client read topic-prefix:py-",
    ]
    .iter()
    .map(|r| protocol::acl::AclRule::parse(r).unwrap())
    .collect();
    admin.create_acls(&rules).unwrap();
    let output = run(
        Command::new(&python)
            .args(["-m", "pytest", "-q", "-s", "-p", "no:cacheprovider"])
            .arg(root.join("protocol/python/tests"))
            .current_dir(std::env::temp_dir())
            .env("RINGLOG_BROKERS", broker.address())
            .env("RINGLOG_CLUSTER_BROKERS", member.address())
            .env("RINGLOG_CLI", binary("ringlog"))
            .env("RINGLOG_SECURE_BROKERS", secured.address())
            .env("RINGLOG_SECURE_CA", &files.ca)
            .env("RINGLOG_SECURE_CERT", &files.client_cert)
            .env("RINGLOG_SECURE_KEY", &files.client_key),
        "the Python client's tests",
    );
    eprintln!("{output}");
    assert!(output.contains(" passed"), "{output}");
}
