//! Issue 10, item 4: the CLI cases a new user hit, as they print now.

use super::util::create;
use harness::{binary, Broker, BrokerOptions};
use std::io::Write;
use std::process::{Command, Output, Stdio};

/// Runs `ringlog ARGS` against `broker` with `input` on stdin.
fn ringlog(broker: &Broker, args: &[&str], input: &str) -> Output {
    let mut child = Command::new(binary("ringlog"))
        .env("RINGLOG_BROKERS", broker.address())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("ringlog: {e}"));
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes()).unwrap();
    }
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_cli_says_what_is_wrong_in_one_line_and_prints_keys() {
    let broker = Broker::start(BrokerOptions::default());
    create(&broker.client(), "cli", 2);

    // Keyed lines in, the same lines out (--print-keys with the separator),
    // and counts in the singular when there is one.
    let out = ringlog(
        &broker,
        &[
            "produce",
            "cli",
            "--key-separator",
            ":",
            "--partition",
            "0",
            "--acks",
            "flushed",
        ],
        "u1:hello\nu2:world\n",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr).trim(),
        "2 messages acknowledged (flushed) to topic cli"
    );
    let out = ringlog(&broker, &["produce", "cli", "--partition", "1"], "one\n");
    assert!(
        text(&out.stderr).starts_with("1 message acknowledged"),
        "{}",
        text(&out.stderr)
    );
    let out = ringlog(
        &broker,
        &[
            "consume",
            "cli",
            "--partition",
            "0",
            "--print-keys",
            ":",
            "--exit-at-end",
        ],
        "",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "u1:hello\nu2:world\n");

    // An offset inside a message: one line, exit 1, says it is not a
    // message start and where valid offsets come from.
    let out = ringlog(
        &broker,
        &["consume", "cli", "--partition", "0", "--from", "7"],
        "",
    );
    assert_eq!(out.status.code(), Some(1));
    let error = text(&out.stderr);
    assert_eq!(error.lines().count(), 1, "{error}");
    assert!(
        error.contains("--from 7 is not the start of a message"),
        "{error}"
    );
    assert!(error.contains("ringlog offsets"), "{error}");
    assert!(!error.contains("corrupt"), "{error}");

    // An offset without --partition on a topic of two: one line naming both.
    let out = ringlog(&broker, &["consume", "cli", "--from", "7"], "");
    assert_eq!(out.status.code(), Some(1));
    let error = text(&out.stderr);
    assert_eq!(error.lines().count(), 1, "{error}");
    assert!(error.contains("name it with --partition"), "{error}");
    assert!(error.contains("2 partitions"), "{error}");

    // Usage errors are clap's (exit 2), as the README says.
    for args in [
        vec!["consume"],
        vec!["produce", "cli", "--acks", "most"],
        vec!["topci", "list"],
    ] {
        let out = ringlog(&broker, &args, "");
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).starts_with("error: "),
            "{}",
            text(&out.stderr)
        );
    }

    // Time offsets have segment granularity, and --help says so.
    let help = ringlog(&broker, &["consume", "--help"], "");
    assert!(text(&help.stdout).contains("segment granularity"));

    // A reader that stops early (`| head -1`) ends the CLI quietly.
    let mut child = Command::new(binary("ringlog"))
        .env("RINGLOG_BROKERS", broker.address())
        .args(["consume", "cli", "--partition", "0", "--exit-at-end"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        !text(&out.stderr).contains("panicked"),
        "{}",
        text(&out.stderr)
    );
    let mut child = Command::new(binary("ringlog"))
        .env("RINGLOG_BROKERS", broker.address())
        .args(["topic", "describe", "cli"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        !text(&out.stderr).contains("panicked"),
        "{}",
        text(&out.stderr)
    );
}
