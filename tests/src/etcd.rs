//! A real etcd for cluster tests: Debian's `etcd-server`, on two free
//! loopback ports, with its own temporary data directory.
//!
//! A machine without etcd fails the test with the command that installs it;
//! a cluster test never skips.

use crate::TempDir;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running (or stopped, restartable) single-member etcd.
pub struct Etcd {
    child: Option<Child>,
    dir: TempDir,
    client_port: u16,
    peer_port: u16,
    starts: u32,
    /// Run in this network namespace, on this address.
    place: Option<(String, String)>,
    /// Serve clients over TLS with these files, asking for their client
    /// certificates; health is then read from a plain metrics port.
    tls: Option<(crate::tls::TlsFiles, u16)>,
}

/// The etcd binary: `$RINGLOG_ETCD`, else `etcd` on PATH, else Debian's.
fn binary() -> PathBuf {
    if let Ok(path) = std::env::var("RINGLOG_ETCD") {
        return PathBuf::from(path);
    }
    let on_path = std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("etcd"))
                .find(|p| p.is_file())
        })
        .unwrap_or_default();
    let path = on_path.unwrap_or_else(|| PathBuf::from("/usr/bin/etcd"));
    assert!(
        path.is_file(),
        "etcd is not installed ({} is missing): the cluster tests need a real etcd; install it with `bash deploy/test-deps.sh` (Debian's etcd-server), or set RINGLOG_ETCD",
        path.display()
    );
    path
}

/// A port that was free a moment ago.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("finding a free port: {e}"))
}

impl Etcd {
    /// Starts etcd and waits until it serves. A port that was free when
    /// picked may be taken by the time etcd binds it (other tests bind
    /// ephemeral ports all the time): then it tries again with new ones.
    pub fn start() -> Etcd {
        for attempt in 1.. {
            let mut etcd = Etcd {
                child: None,
                dir: TempDir::new("etcd"),
                client_port: free_port(),
                peer_port: free_port(),
                starts: 0,
                place: None,
                tls: None,
            };
            match etcd.try_launch() {
                Ok(()) => return etcd,
                Err(log) if attempt < 5 && log.contains("address already in use") => continue,
                Err(log) => panic!("etcd did not start; its log:\n{log}"),
            }
        }
        unreachable!("the loop returns or panics")
    }

    /// etcd in network namespace `ns` on `address` (the caller's thread
    /// must reach it: it checks etcd's health over the network).
    pub fn start_in(ns: &str, address: &str) -> Etcd {
        let mut etcd = Etcd {
            child: None,
            dir: TempDir::new("etcd"),
            client_port: 2379,
            peer_port: 2380,
            starts: 0,
            place: Some((ns.to_string(), address.to_string())),
            tls: None,
        };
        etcd.launch();
        etcd
    }

    /// etcd serving its clients over TLS only (the `https://` endpoint)
    /// with `files`' broker certificate, and asking every client for a
    /// certificate signed by `files`' CA (`--client-cert-auth`).
    pub fn start_tls(files: &crate::tls::TlsFiles) -> Etcd {
        let mut etcd = Etcd {
            child: None,
            dir: TempDir::new("etcd-tls"),
            client_port: free_port(),
            peer_port: free_port(),
            starts: 0,
            place: None,
            tls: Some((files.clone(), free_port())),
        };
        etcd.launch();
        etcd
    }

    fn host(&self) -> &str {
        self.place.as_ref().map_or("127.0.0.1", |(_, a)| a.as_str())
    }

    /// The client URL, as `broker --etcd` takes it.
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}:{}", self.host(), self.client_port)
    }

    /// Pauses etcd (SIGSTOP) or lets it go on (SIGCONT).
    pub fn pause(&mut self, paused: bool) {
        if let Some(child) = &self.child {
            // SAFETY: kill(2) on a child we started and have not reaped.
            unsafe {
                libc::kill(
                    child.id() as i32,
                    if paused { libc::SIGSTOP } else { libc::SIGCONT },
                );
            }
        }
    }

    /// What etcd wrote to stderr, across all its runs.
    pub fn log(&self) -> String {
        (0..self.starts)
            .map(|i| {
                std::fs::read_to_string(self.dir.path().join(format!("etcd-{i}.log")))
                    .unwrap_or_default()
            })
            .collect()
    }

    fn launch(&mut self) {
        if let Err(log) = self.try_launch() {
            panic!("etcd did not start; its log:\n{log}");
        }
    }

    fn try_launch(&mut self) -> Result<(), String> {
        let log_path = self.dir.path().join(format!("etcd-{}.log", self.starts));
        let log = std::fs::File::create(&log_path)
            .unwrap_or_else(|e| panic!("creating {}: {e}", log_path.display()));
        let client = self.endpoint();
        let peer = format!("http://{}:{}", self.host(), self.peer_port);
        let mut command = match &self.place {
            Some((ns, _)) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", ns]).arg(binary());
                command
            }
            None => Command::new(binary()),
        };
        if let Some((files, metrics_port)) = &self.tls {
            command
                .arg("--cert-file")
                .arg(&files.server_cert)
                .arg("--key-file")
                .arg(&files.server_key)
                .arg("--trusted-ca-file")
                .arg(&files.ca)
                .arg("--client-cert-auth")
                .arg("--listen-metrics-urls")
                .arg(format!("http://127.0.0.1:{metrics_port}"));
        }
        let child = command
            .arg("--name")
            .arg("it")
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .arg("--listen-client-urls")
            .arg(&client)
            .arg("--advertise-client-urls")
            .arg(&client)
            .arg("--listen-peer-urls")
            .arg(&peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer)
            .arg("--initial-cluster")
            .arg(format!("it={peer}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("starting etcd: {e}"));
        self.child = Some(child);
        self.starts += 1;
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.healthy() {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                return Err(format!("(exited with {status})\n{}", self.log()));
            }
            assert!(
                Instant::now() < deadline,
                "etcd did not become healthy within 30 s; its log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// True when etcd answers its health endpoint with `"health":"true"`.
    fn healthy(&self) -> bool {
        let port = self.tls.as_ref().map_or(self.client_port, |(_, m)| *m);
        let Ok(mut stream) = TcpStream::connect((self.host(), port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let request = "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
        if stream.write_all(request.as_bytes()).is_err() {
            return false;
        }
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer.contains("\"health\":\"true\"")
    }

    /// Kills etcd (SIGKILL): an outage. Its data stays for [`Etcd::restart`].
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts etcd again on the same ports and data.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "kill etcd before restarting it");
        self.launch();
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Replaces etcd with a new, empty one on the same ports: what a
    /// replaced etcd host or a wrong endpoint looks like to the brokers.
    pub fn wipe(&mut self) {
        self.kill();
        std::fs::remove_dir_all(self.data())
            .unwrap_or_else(|e| panic!("removing etcd's data: {e}"));
        self.launch();
    }

    /// A cold backup: etcd is stopped, its data directory copied, and
    /// etcd started again. Returns the copy, for [`Etcd::restore`].
    pub fn backup(&mut self) -> PathBuf {
        self.kill();
        let copy = self.dir.path().join(format!("backup-{}", self.starts));
        copy_dir(&self.data(), &copy);
        self.launch();
        copy
    }

    /// Restores a backup: etcd is stopped, its data replaced by the copy
    /// (everything written since is forgotten), and started again.
    pub fn restore(&mut self, backup: &std::path::Path) {
        self.kill();
        std::fs::remove_dir_all(self.data())
            .unwrap_or_else(|e| panic!("removing etcd's data: {e}"));
        copy_dir(backup, &self.data());
        self.launch();
    }
}

/// `cp -a from to`.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap_or_else(|e| panic!("running cp: {e}"));
    assert!(
        status.success(),
        "cp -a {} {} failed",
        from.display(),
        to.display()
    );
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A real etcd cluster of several members on loopback, for the faults a
/// single member cannot show (one member dead while the others serve).
pub struct EtcdCluster {
    dir: TempDir,
    members: Vec<Member>,
}

struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
    starts: u32,
}

impl Member {
    fn client(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn peer(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }

    fn healthy(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.client_port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let request = "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
        if stream.write_all(request.as_bytes()).is_err() {
            return false;
        }
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer.contains("\"health\":\"true\"")
    }
}

impl EtcdCluster {
    /// Starts `size` members and waits until every one serves. As for
    /// [`Etcd::start`], a member whose port was taken between picking and
    /// binding exits at once: then the whole cluster starts again on new
    /// ports (a member's peers are in its `--initial-cluster`, so one
    /// member cannot move alone).
    pub fn start(size: usize) -> EtcdCluster {
        for attempt in 1.. {
            let dir = TempDir::new("etcd-cluster");
            // Every port held until all are picked, so no two members get
            // the same one.
            let held: Vec<TcpListener> = (0..2 * size)
                .map(|_| {
                    TcpListener::bind("127.0.0.1:0")
                        .unwrap_or_else(|e| panic!("finding a free port: {e}"))
                })
                .collect();
            let port = |i: usize| {
                held[i]
                    .local_addr()
                    .unwrap_or_else(|e| panic!("a bound port: {e}"))
                    .port()
            };
            let members: Vec<Member> = (0..size)
                .map(|i| Member {
                    name: format!("m{i}"),
                    client_port: port(2 * i),
                    peer_port: port(2 * i + 1),
                    child: None,
                    starts: 0,
                })
                .collect();
            drop(held);
            let mut cluster = EtcdCluster { dir, members };
            for i in 0..size {
                cluster.launch(i, "new");
            }
            match cluster.try_wait_healthy((0..size).collect()) {
                Ok(()) => return cluster,
                Err(log) if attempt < 5 && log.contains("address already in use") => continue,
                Err(log) => panic!("the etcd cluster did not start:\n{log}"),
            }
        }
        unreachable!("the loop returns or panics")
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer()))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn launch(&mut self, i: usize, state: &str) {
        let initial = self.initial_cluster();
        let data = self.dir.path().join(&self.members[i].name);
        let member = &mut self.members[i];
        let log_path = self
            .dir
            .path()
            .join(format!("{}-{}.log", member.name, member.starts));
        let log = std::fs::File::create(&log_path)
            .unwrap_or_else(|e| panic!("creating {}: {e}", log_path.display()));
        let child = Command::new(binary())
            .arg("--name")
            .arg(&member.name)
            .arg("--data-dir")
            .arg(data)
            .arg("--listen-client-urls")
            .arg(member.client())
            .arg("--advertise-client-urls")
            .arg(member.client())
            .arg("--listen-peer-urls")
            .arg(member.peer())
            .arg("--initial-advertise-peer-urls")
            .arg(member.peer())
            .arg("--initial-cluster")
            .arg(initial)
            .arg("--initial-cluster-state")
            .arg(state)
            .arg("--initial-cluster-token")
            .arg("ringlog-test")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("starting etcd member: {e}"));
        member.child = Some(child);
        member.starts += 1;
    }

    fn wait_healthy(&mut self, members: Vec<usize>) {
        if let Err(log) = self.try_wait_healthy(members) {
            panic!("the etcd cluster did not become healthy:\n{log}");
        }
    }

    /// Waits up to 60 s until every one of `members` serves; a member that
    /// exits on the way ends the wait. The error is every member's log.
    fn try_wait_healthy(&mut self, members: Vec<usize>) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !members.iter().all(|&i| self.members[i].healthy()) {
            for &i in &members {
                let member = &mut self.members[i];
                if let Some(Ok(Some(status))) = member.child.as_mut().map(Child::try_wait) {
                    member.child = None;
                    let name = member.name.clone();
                    return Err(format!("{name} exited with {status}\n{}", self.logs()));
                }
            }
            if Instant::now() >= deadline {
                return Err(format!("not healthy within 60 s\n{}", self.logs()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// The tail of what each member wrote to stderr in its latest run.
    fn logs(&self) -> String {
        self.members
            .iter()
            .filter(|m| m.starts > 0)
            .map(|m| {
                let path = self
                    .dir
                    .path()
                    .join(format!("{}-{}.log", m.name, m.starts - 1));
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(20).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {} ({}):\n{}", m.name, path.display(), tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Every member's client URL, comma-separated, as `broker --etcd`
    /// takes a cluster.
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(Member::client)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Kills member `i` (SIGKILL); the others keep quorum.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `i` again on its data, and waits until it serves.
    pub fn restart(&mut self, i: usize) {
        assert!(self.members[i].child.is_none(), "kill the member first");
        self.launch(i, "existing");
        self.wait_healthy(vec![i]);
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
