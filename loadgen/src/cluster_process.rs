//! A local cluster loadgen starts itself for the replication figures: one
//! etcd and N brokers on loopback ports, in a temporary folder, each broker
//! with a metrics listener. Brokers can be killed with SIGKILL, restarted,
//! and restarted on an empty data directory; everything is stopped (and the
//! folder removed) when the cluster is dropped.

use crate::broker_process::{broker_binary, spawn_ready};
use anyhow::{bail, Context};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free loopback port (bound, then released).
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// One broker of the cluster.
pub struct ClusterBroker {
    /// Its id.
    pub id: u32,
    child: Option<Child>,
    /// Its data directory.
    pub data_dir: PathBuf,
    config: PathBuf,
    log: PathBuf,
    /// Shard 0's address.
    pub address: String,
    /// Its Prometheus endpoint.
    pub metrics: String,
    /// Its Kafka listener (one shard: one port).
    pub kafka: String,
    etcd: String,
}

impl ClusterBroker {
    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let (mut child, line) = spawn_ready(
            Command::new(broker_binary())
                .arg("--data-dir")
                .arg(&self.data_dir)
                .args(["--listen", &self.address, "--shards", "1"])
                .args(["--etcd", &self.etcd, "--cluster", "loadgen"])
                .args(["--broker-id", &self.id.to_string()])
                // Two cores, three brokers: spread them.
                .args(["--first-cpu", &(self.id - 1).to_string()])
                .args(["--metrics-listen", &self.metrics])
                .args(["--kafka-listen", &self.kafka])
                .arg("--config")
                .arg(&self.config)
                .stderr(Stdio::from(log)),
        )?;
        if !line.contains("shards") {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            bail!(
                "broker {} did not start: {}",
                self.id,
                log.lines().last().unwrap_or("no output")
            );
        }
        self.child = Some(child);
        Ok(())
    }

    /// Its process id (0 when it is not running).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// SIGKILL, and reaped.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same data directory.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill9();
        self.spawn()
    }

    /// Its CPU time so far (user + system), from /proc.
    pub fn cpu(&self) -> Duration {
        process_cpu(self.pid())
    }

    /// A counter or gauge from its metrics endpoint (0 when absent).
    pub fn metric(&mut self, name: &str) -> anyhow::Result<f64> {
        match metric(&self.metrics, name) {
            Ok(value) => Ok(value),
            Err(error) => {
                let state = self.describe();
                let context = format!("scraping {} ({state})", self.metrics);
                Err(error.context(context))
            }
        }
    }

    /// Whether it runs, and its log's last line: for error messages.
    fn describe(&mut self) -> String {
        let state = match self.child.as_mut().map(Child::try_wait) {
            None => "not started".to_string(),
            Some(Ok(None)) => "running".to_string(),
            Some(Ok(Some(status))) => format!("exited: {status}"),
            Some(Err(error)) => format!("unknown: {error}"),
        };
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        format!(
            "broker {} {state}; its log ends: {}",
            self.id,
            log.lines().last().unwrap_or("nothing")
        )
    }
}

/// A counter or gauge from a broker's metrics endpoint at `address`,
/// summed over its labels (every shard); 0 when absent.
pub fn metric(address: &str, name: &str) -> anyhow::Result<f64> {
    let mut stream = std::net::TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    // One write: `write!` on a bare socket sends each piece of the
    // format apart.
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    Ok(text
        .lines()
        .filter(|l| {
            l.split([' ', '{'])
                .next()
                .is_some_and(|metric| metric == name)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// CPU time (user + system) of a process, from /proc/PID/stat; zero when
/// it cannot be read.
pub fn process_cpu(pid: u32) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    // The fields after the command name (which may hold spaces).
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 (1-based), 12 and 13 here.
    let ticks: u64 = fields
        .get(11..13)
        .map_or(0, |f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum());
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_secs_f64(ticks as f64 / per_second as f64)
}

/// Starts etcd on two free ports of 127.0.0.1 and waits until it listens;
/// returns it and its client URL. A port taken between its choice and
/// etcd's bind (another process on the machine) makes etcd exit at once:
/// it is started again on other ports, up to three times, and any other
/// early exit is reported with etcd's last words.
fn start_etcd(dir: &std::path::Path) -> anyhow::Result<(Child, String)> {
    let log = dir.join("etcd.log");
    let mut attempt = 0;
    loop {
        attempt += 1;
        let (client, peer) = (free_port()?, free_port()?);
        let etcd_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let _ = std::fs::remove_dir_all(dir.join("etcd"));
        let mut etcd = Command::new("etcd")
            .arg("--data-dir")
            .arg(dir.join("etcd"))
            .args(["--listen-client-urls", &etcd_url])
            .args(["--advertise-client-urls", &etcd_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("default={peer_url}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log)?))
            .spawn()
            .context("starting etcd (install it with deploy/test-deps.sh)")?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", client)).is_ok() {
                return Ok((etcd, etcd_url));
            }
            if let Ok(Some(status)) = etcd.try_wait() {
                let said = std::fs::read_to_string(&log).unwrap_or_default();
                let last: Vec<&str> = said.lines().rev().take(3).collect();
                if said.contains("address already in use") && attempt < 3 {
                    break;
                }
                bail!(
                    "etcd exited ({status}) before listening on {etcd_url}: {}",
                    last.join(" | ")
                );
            }
            if Instant::now() > deadline {
                let _ = etcd.kill();
                let _ = etcd.wait();
                bail!(
                    "etcd did not listen on {etcd_url} within 30 s (its log: {})",
                    log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// etcd and the brokers.
pub struct LocalCluster {
    dir: PathBuf,
    etcd: Child,
    /// The etcd endpoint.
    pub etcd_url: String,
    /// The brokers, by id order (id = index + 1).
    pub brokers: Vec<ClusterBroker>,
}

impl LocalCluster {
    /// Starts etcd and `size` brokers whose configuration file holds
    /// `config_toml`, and waits until every broker is live.
    pub fn start(size: u32, config_toml: &str) -> anyhow::Result<LocalCluster> {
        let dir =
            std::env::temp_dir().join(format!("ringlog-loadgen-cluster-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let (etcd, etcd_url) = start_etcd(&dir)?;
        let config = dir.join("broker.toml");
        std::fs::write(&config, config_toml)?;
        let mut cluster = LocalCluster {
            dir: dir.clone(),
            etcd,
            etcd_url: etcd_url.clone(),
            brokers: Vec::new(),
        };
        for id in 1..=size {
            let mut broker = ClusterBroker {
                id,
                child: None,
                data_dir: dir.join(format!("broker-{id}")),
                config: config.clone(),
                log: dir.join(format!("broker-{id}.log")),
                address: format!("127.0.0.1:{}", free_port()?),
                metrics: format!("127.0.0.1:{}", free_port()?),
                kafka: format!("127.0.0.1:{}", free_port()?),
                etcd: etcd_url.clone(),
            };
            broker.spawn()?;
            cluster.brokers.push(broker);
        }
        cluster.wait_live(size as usize)?;
        Ok(cluster)
    }

    /// etcd's process id (for its CPU time).
    pub fn etcd_pid(&self) -> u32 {
        self.etcd.id()
    }

    /// Every broker's address, comma-separated.
    pub fn addresses(&self) -> String {
        self.brokers
            .iter()
            .map(|b| b.address.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Waits until Metadata lists `n` live brokers.
    pub fn wait_live(&self, n: usize) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let live = crate::connect(&self.addresses())
                .and_then(|c| c.metadata(&[]))
                .map_or(0, |m| m.brokers.len());
            if live == n {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{live} brokers live, not {n}, after 60 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The broker with this id.
    pub fn broker(&mut self, id: u32) -> &mut ClusterBroker {
        &mut self.brokers[(id - 1) as usize]
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for broker in &mut self.brokers {
            if let Some(child) = &broker.child {
                // SAFETY: kill(2) on our own child's pid.
                unsafe {
                    libc::kill(child.id() as i32, libc::SIGTERM);
                }
            }
            if let Some(mut child) = broker.child.take() {
                let _ = child.wait();
            }
        }
        let _ = self.etcd.kill();
        let _ = self.etcd.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
