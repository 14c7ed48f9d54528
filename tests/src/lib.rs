//! Test harness: runs the real `broker` binary on loopback with its own
//! temporary data directory, and gives tests a client for it; runs a real
//! `etcd` (Debian's `etcd-server`) on free loopback ports for cluster tests
//! ([`etcd::Etcd`]).
//!
//! The binary is found next to the test executable's `deps/` directory
//! (`target/<profile>/broker`), so run `cargo build --bins` before the
//! tests; a missing binary fails loudly rather than skipping.
#![allow(
    clippy::too_many_lines,
    reason = "a test harness step or a test is one scenario read top to bottom"
)]

pub mod crash;
pub mod etcd;
pub mod netns;
pub mod python;
pub mod tls;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// A directory removed when dropped.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// A fresh, empty directory under the system temp dir.
    pub fn new(label: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let path =
            std::env::temp_dir().join(format!("ringlog-it-{}-{label}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        TempDir { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The partition directories a broker moved aside in `data_dir`
/// (`.orphaned/<stamp>/<topic>-<partition>`), in no particular order.
pub fn orphaned_dirs(data_dir: &Path) -> Vec<PathBuf> {
    let Ok(stamps) = std::fs::read_dir(data_dir.join(".orphaned")) else {
        return Vec::new();
    };
    stamps
        .flatten()
        .flat_map(|stamp| {
            std::fs::read_dir(stamp.path())
                .into_iter()
                .flatten()
                .flatten()
                // The partition directories; beside each, its `why` file.
                .filter(|e| e.path().is_dir())
                .map(|e| e.path())
        })
        .collect()
}

/// Path of a workspace binary built next to the test executable.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    // target/<profile>/deps/it-<hash> -> target/<profile>/<name>; a binary
    // of this crate (the crash harness) is in target/<profile>/ itself.
    let parent = exe
        .parent()
        .unwrap_or_else(|| panic!("unexpected executable path {}", exe.display()));
    let dir = if parent.ends_with("deps") {
        parent.parent().unwrap_or(parent)
    } else {
        parent
    };
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --bins` before the integration tests",
        path.display()
    );
    path
}

/// Options for starting a broker.
#[derive(Debug, Clone)]
pub struct BrokerOptions {
    /// Number of shards.
    pub shards: usize,
    /// Extra TOML configuration (written to a file and passed with --config).
    pub config_toml: String,
    /// Also serve metrics on an ephemeral port.
    pub metrics: bool,
    /// Join the cluster of this etcd (`--etcd`); `None` = standalone.
    pub etcd: Option<String>,
    /// The cluster's name (`--cluster`), when `etcd` is set.
    pub cluster: String,
    /// `--broker-id`.
    pub broker_id: u32,
    /// `--listen` (default `127.0.0.1:0`: new ephemeral ports at every start).
    pub listen: Option<String>,
    /// Faults to inject (`RINGLOG_TEST_FAULTS`, see `broker/src/faults.rs`).
    pub faults: Option<String>,
    /// Put the data directory on a tmpfs of this many bytes (a small disk
    /// that fills up). Needs root, as CI runs; without it the test fails.
    pub tmpfs_bytes: Option<u64>,
    /// Start the broker with this RLIMIT_NOFILE (soft and hard).
    pub nofile: Option<u64>,
    /// More command-line arguments (e.g. `--join-new-cluster`).
    pub args: Vec<String>,
    /// Run in this network namespace (`ip netns exec`).
    pub netns: Option<String>,
}

impl Default for BrokerOptions {
    fn default() -> Self {
        BrokerOptions {
            shards: 2,
            config_toml: String::new(),
            metrics: false,
            etcd: None,
            cluster: "ringlog".into(),
            broker_id: 0,
            listen: None,
            faults: None,
            tmpfs_bytes: None,
            nofile: None,
            args: Vec::new(),
            netns: None,
        }
    }
}

impl BrokerOptions {
    /// Broker `broker_id` of cluster `cluster` on `etcd`, with a short etcd
    /// lease (2 s) so that tests see a dead broker leave quickly.
    pub fn clustered(etcd: &etcd::Etcd, cluster: &str, broker_id: u32) -> BrokerOptions {
        BrokerOptions {
            etcd: Some(etcd.endpoint()),
            cluster: cluster.to_string(),
            broker_id,
            config_toml: "etcd_lease_ttl_s = 2\netcd_timeout_ms = 2000\n".into(),
            ..BrokerOptions::default()
        }
    }
}

/// A running broker process.
pub struct Broker {
    child: Option<Child>,
    data: TempDir,
    options: BrokerOptions,
    /// Shard addresses, shard 0 first.
    pub shards: Vec<String>,
    /// The metrics endpoint, when enabled.
    pub metrics: Option<String>,
    /// The Kafka listener's shard addresses (`--kafka-listen`), shard 0
    /// first; empty without one.
    pub kafka: Vec<String>,
    starts: u32,
}

impl Broker {
    /// Starts a broker with a new data directory and waits until it is ready.
    pub fn start(options: BrokerOptions) -> Broker {
        let data = TempDir::new("broker");
        let mut broker = Broker {
            child: None,
            data,
            options,
            shards: Vec::new(),
            metrics: None,
            kafka: Vec::new(),
            starts: 0,
        };
        if let Some(bytes) = broker.options.tmpfs_bytes {
            mount_tmpfs(&broker.data_dir(), bytes);
        }
        broker.launch();
        broker
    }

    /// The data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.data.path().join("data")
    }

    /// Shard 0's address (the bootstrap address).
    pub fn address(&self) -> String {
        self.shards[0].clone()
    }

    /// Everything the broker wrote to stderr across all its runs.
    pub fn log(&self) -> String {
        let mut all = String::new();
        for i in 0..self.starts {
            let path = self.data.path().join(format!("stderr-{i}.log"));
            all.push_str(&std::fs::read_to_string(path).unwrap_or_default());
        }
        all
    }

    fn launch(&mut self) {
        let config_path = self.data.path().join("broker.toml");
        std::fs::write(&config_path, &self.options.config_toml)
            .unwrap_or_else(|e| panic!("writing config: {e}"));
        let stderr_path = self.data.path().join(format!("stderr-{}.log", self.starts));
        let stderr = std::fs::File::create(&stderr_path)
            .unwrap_or_else(|e| panic!("creating {}: {e}", stderr_path.display()));
        let mut command = match &self.options.netns {
            Some(ns) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", ns]).arg(binary("broker"));
                command
            }
            None => Command::new(binary("broker")),
        };
        command
            .arg("--data-dir")
            .arg(self.data_dir())
            .arg("--listen")
            .arg(self.options.listen.as_deref().unwrap_or("127.0.0.1:0"))
            .arg("--shards")
            .arg(self.options.shards.to_string())
            .arg("--config")
            .arg(&config_path)
            .env("RINGLOG_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr));
        if let Some(limit) = self.options.nofile {
            set_nofile_in_child(&mut command, limit);
        }
        if let Some(faults) = &self.options.faults {
            command.env("RINGLOG_TEST_FAULTS", faults);
        }
        if self.options.metrics {
            command.arg("--metrics-listen").arg("127.0.0.1:0");
        }
        command
            .arg("--broker-id")
            .arg(self.options.broker_id.to_string());
        if let Some(etcd) = &self.options.etcd {
            command
                .arg("--etcd")
                .arg(etcd)
                .arg("--cluster")
                .arg(&self.options.cluster);
        }
        command.args(&self.options.args);
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("spawning broker: {e}"));
        self.starts += 1;
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let _ = tx.send(line);
            // Keep draining so the broker never blocks on a full pipe.
            let mut sink = Vec::new();
            let _ = reader.read_to_end(&mut sink);
        });
        let line = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) if line.contains("ready") => line,
            other => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "broker did not become ready ({other:?}); stderr:\n{}",
                    self.log()
                );
            }
        };
        // "ringlog broker 0 ready: shards A,B metrics M data-dir D"
        let words: Vec<&str> = line.split_whitespace().collect();
        let after = |key: &str| {
            words
                .iter()
                .position(|w| *w == key)
                .and_then(|i| words.get(i + 1))
                .map(|s| s.to_string())
        };
        self.shards = after("shards")
            .unwrap_or_else(|| panic!("no shard list in {line:?}"))
            .split(',')
            .map(String::from)
            .collect();
        self.metrics = after("metrics");
        self.kafka = after("kafka")
            .map_or_else(Vec::new, |list| list.split(',').map(String::from).collect());
        self.child = Some(child);
    }

    /// Sends SIGTERM and waits for a clean exit; panics on a non-zero status.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(&child, libc::SIGTERM);
            let status = wait_with_timeout(&mut child, Duration::from_secs(60));
            assert!(
                status.success(),
                "broker exited with {status} after SIGTERM; stderr:\n{}",
                self.log()
            );
        }
    }

    /// Stops the process with SIGSTOP (a long pause) or lets it go on
    /// with SIGCONT.
    pub fn pause(&mut self, paused: bool) {
        if let Some(child) = &self.child {
            signal(child, if paused { libc::SIGSTOP } else { libc::SIGCONT });
        }
    }

    /// Kills the broker with SIGKILL (a crash).
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The options in force.
    pub fn options(&self) -> &BrokerOptions {
        &self.options
    }

    /// Changes the options the next [`Broker::restart`] uses (the data
    /// directory stays).
    pub fn set_options(&mut self, options: BrokerOptions) {
        assert_eq!(
            options.tmpfs_bytes, self.options.tmpfs_bytes,
            "the data directory's filesystem cannot change"
        );
        self.options = options;
    }

    /// Starts the broker again on the same data directory (new ports).
    pub fn restart(&mut self) {
        assert!(
            self.child.is_none(),
            "stop or kill the broker before restarting it"
        );
        self.launch();
    }

    /// A connected client.
    pub fn client(&self) -> protocol::client::Client {
        protocol::client::Client::connect(&self.address())
            .unwrap_or_else(|e| panic!("connecting: {e}"))
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// True while the process is running.
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill9();
        if self.options.tmpfs_bytes.is_some() {
            let _ = Command::new("umount")
                .arg(self.data_dir())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Makes `command`'s child start with RLIMIT_NOFILE = `limit` (soft and hard).
pub fn set_nofile_in_child(command: &mut Command, limit: u64) {
    // SAFETY: setrlimit in the child between fork and exec, on a struct we own.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(command, move || {
            let rlimit = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &rlimit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Mounts a tmpfs of `bytes` at `dir` (created first).
fn mount_tmpfs(dir: &Path, bytes: u64) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    let output = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("running mount: {e}"));
    assert!(
        output.status.success(),
        "mounting a {bytes}-byte tmpfs at {} failed (this test makes a small disk and needs root, as CI runs it): {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr).trim()
    );
}

/// A port `p` such that `p` and the next `count - 1` ports were free a
/// moment ago (a broker's shards listen on consecutive ports).
pub fn free_ports(count: u16) -> u16 {
    for _ in 0..100 {
        let Ok(first) = std::net::TcpListener::bind("127.0.0.1:0") else {
            continue;
        };
        let Ok(port) = first.local_addr().map(|a| a.port()) else {
            continue;
        };
        if port.checked_add(count).is_none() {
            continue;
        }
        let rest: Vec<_> = (1..count)
            .map(|i| std::net::TcpListener::bind(("127.0.0.1", port + i)))
            .collect();
        if rest.iter().all(Result::is_ok) {
            return port;
        }
    }
    panic!("no {count} consecutive free ports on 127.0.0.1");
}

/// Waits until `check` holds, polling every 20 ms; panics with `what` and
/// the last value after `timeout`. Tests wait on conditions, never on time.
pub fn eventually<T: std::fmt::Debug>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match check() {
            Ok(value) => return value,
            Err(last) if std::time::Instant::now() > deadline => {
                panic!("{what}: not within {timeout:?}; last: {last}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn signal(child: &Child, signal: i32) {
    // SAFETY: kill(2) on the pid of a child we started and have not reaped.
    unsafe {
        libc::kill(child.id() as i32, signal);
    }
}

fn wait_with_timeout(child: &mut Child, timeout: Duration) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("broker did not exit within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A payload that says which message it is: `index` as 8 bytes LE followed
/// by filler derived from it, `size` bytes in all (at least 8).
pub fn numbered_payload(index: u64, size: usize) -> Vec<u8> {
    let mut payload = index.to_le_bytes().to_vec();
    payload
        .extend((8..size.max(8)).map(|i| (index as usize).wrapping_mul(31).wrapping_add(i) as u8));
    payload
}

/// Reads the index back from a numbered payload and checks the filler.
pub fn check_numbered_payload(payload: &[u8], size: usize) -> u64 {
    assert_eq!(payload.len(), size.max(8), "payload length");
    let index = u64::from_le_bytes(payload[..8].try_into().unwrap_or_else(|_| unreachable!()));
    assert_eq!(
        payload,
        numbered_payload(index, size).as_slice(),
        "payload bytes of message {index}"
    );
    index
}
