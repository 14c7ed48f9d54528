//! A standalone ringlog broker that loadgen starts itself when no
//! `--brokers` was given: a free loopback port, a temporary data directory,
//! stopped with SIGTERM (and the directory removed) when dropped.

use anyhow::{bail, Context};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A broker process loadgen owns.
pub struct LocalBroker {
    child: Child,
    dir: PathBuf,
    /// Shard addresses, comma-separated (shard 0 first).
    pub brokers: String,
    /// The data directory.
    pub data_dir: PathBuf,
    /// Shard 0's Kafka listener, when its configuration opened one.
    pub kafka: Option<String>,
    /// Its metrics endpoint, when its configuration opened one.
    pub metrics: Option<String>,
}

/// The word after `key` in the broker's ready line
/// (`… ready: shards A,B kafka C,D metrics E data-dir F`), its first
/// comma-separated address.
fn ready_field(line: &str, key: &str) -> Option<String> {
    let list = line.split_whitespace().skip_while(|w| *w != key).nth(1)?;
    list.split(',').next().map(String::from)
}

/// The `broker` binary: next to this executable, else on PATH.
pub fn broker_binary() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("broker")))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("broker"))
}

/// The `ringlog` command-line tool: next to this executable, else on PATH.
pub fn ringlog_binary() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("ringlog")))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("ringlog"))
}

/// Starts the broker `command` was set up for (its arguments given, stderr
/// already sent somewhere) with stdout piped, and returns the child and
/// the first line it printed (`ringlog broker … ready: shards …`), or an
/// empty line if none came within 60 s. The rest of its stdout is read
/// and dropped, so the broker never blocks on a full pipe.
pub fn spawn_ready(command: &mut Command) -> anyhow::Result<(Child, String)> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| {
            format!(
                "starting {} (build it with `cargo build --release --bins`)",
                command.get_program().to_string_lossy()
            )
        })?;
    let stdout = child.stdout.take().context("broker stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let _ = reader.read_line(&mut line);
        let _ = tx.send(line);
        let mut rest = String::new();
        while reader.read_line(&mut rest).map(|n| n > 0).unwrap_or(false) {
            rest.clear();
        }
    });
    let line = rx.recv_timeout(Duration::from_secs(60)).unwrap_or_default();
    Ok((child, line))
}

impl LocalBroker {
    /// Starts a broker with `shards` shards and waits until it is ready.
    pub fn start(shards: usize) -> anyhow::Result<LocalBroker> {
        LocalBroker::start_named(shards, "broker")
    }

    /// [`LocalBroker::start`] for one of several brokers of this process:
    /// `label` names its temporary directory.
    pub fn start_named(shards: usize, label: &str) -> anyhow::Result<LocalBroker> {
        LocalBroker::start_with(shards, label, "", |_| Ok(()))
    }

    /// [`LocalBroker::start_named`] with `config_toml` as its configuration
    /// file, after `prepare` has written what it wants into the (new, empty)
    /// data directory.
    pub fn start_with(
        shards: usize,
        label: &str,
        config_toml: &str,
        prepare: impl FnOnce(&std::path::Path) -> anyhow::Result<()>,
    ) -> anyhow::Result<LocalBroker> {
        let dir =
            std::env::temp_dir().join(format!("ringlog-loadgen-{}-{label}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let data_dir = dir.join("data");
        std::fs::create_dir_all(&data_dir)?;
        prepare(&data_dir)?;
        let config = dir.join("broker.toml");
        std::fs::write(&config, config_toml)?;
        let log = std::fs::File::create(dir.join("broker.log"))?;
        let (mut child, line) = spawn_ready(
            Command::new(broker_binary())
                .arg("--data-dir")
                .arg(&data_dir)
                .args(["--listen", "127.0.0.1:0", "--shards", &shards.to_string()])
                .arg("--config")
                .arg(&config)
                .stderr(Stdio::from(log)),
        )?;
        let Some(brokers) = line
            .split_whitespace()
            .skip_while(|w| *w != "shards")
            .nth(1)
            .map(String::from)
        else {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(dir.join("broker.log")).unwrap_or_default();
            bail!(
                "the broker did not start: {}",
                log.lines().last().unwrap_or("no output")
            );
        };
        Ok(LocalBroker {
            child,
            dir,
            brokers,
            data_dir,
            kafka: ready_field(&line, "kafka"),
            metrics: ready_field(&line, "metrics"),
        })
    }
}

impl LocalBroker {
    /// The broker's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for LocalBroker {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
