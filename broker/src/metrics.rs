//! Per-shard counters and latency histograms, served as Prometheus text.
//!
//! A shard updates plain `Cell`s and its own hdrhistograms (no atomics, no
//! locks on the data path). Once a second it publishes a snapshot into a
//! mutex-protected slot; the metrics endpoint (a std thread) renders the
//! latest snapshots. So the endpoint is at most a second stale, and the data
//! path never waits on it.

use hdrhistogram::Histogram;
use std::cell::{Cell, RefCell};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

macro_rules! counters {
    ($($name:ident : $help:literal),* $(,)?) => {
        /// A shard's counters (cheap `Cell`s; the shard is single-threaded).
        #[derive(Debug, Default)]
        pub struct Counters { $(#[doc = $help] pub $name: Cell<u64>,)* }

        /// A copy of the counters that can cross threads.
        #[derive(Debug, Default, Clone)]
        pub struct CounterValues { $(#[doc = $help] pub $name: u64,)* }

        impl Counters {
            fn values(&self) -> CounterValues { CounterValues { $($name: self.$name.get(),)* } }
        }

        impl CounterValues {
            fn render(&self, out: &mut String, shard: usize, header: bool) {
                $(
                    if header {
                        let _ = writeln!(out, "# HELP ringlog_{} {}", stringify!($name), $help);
                        let _ = writeln!(out, "# TYPE ringlog_{} counter", stringify!($name));
                    }
                    let _ = writeln!(out, "ringlog_{}{{shard=\"{}\"}} {}", stringify!($name), shard, self.$name);
                )*
            }
        }
    };
}

counters! {
    connections_accepted_total: "TCP connections accepted",
    connections_timed_out_total: "Connections closed past their handshake, frame or idle deadline",
    connections_refused_total: "Connections refused at max_connections",
    tls_handshake_failures_total: "TLS handshakes that failed or passed the handshake deadline",
    requests_total: "Requests handled (local and forwarded-in)",
    requests_forwarded_total: "Requests this shard sent to the owning shard",
    request_errors_total: "Requests answered with an error code",
    produce_messages_total: "Messages appended",
    produce_bytes_total: "Message bytes appended",
    produce_duplicates_total: "Idempotent producers' retried batches answered with the offsets they were stored at, not stored again",
    fetch_requests_total: "Fetch requests answered",
    multi_fetch_requests_total: "MultiFetch requests answered",
    multi_fetch_partitions_total: "Partitions named in the MultiFetch requests answered",
    fetch_bytes_total: "Log bytes sent to consumers",
    fetch_zero_copy_bytes_total: "Log bytes sent with sendfile (never in userspace)",
    replica_fetch_bytes_total: "Log bytes answered to followers' fetches (sent like consumers', with sendfile)",
    replica_bytes_appended_total: "Bytes this broker's follower copies appended from their leaders",
    isr_shrinks_total: "ISR changes this broker's leaders made that removed a replica",
    isr_expands_total: "ISR changes this broker's leaders made that added a replica back",
    leader_elections_total: "Elections this broker won (it became a partition's leader)",
    fetch_copied_bytes_total: "Log bytes copied through userspace: while waiting for a full socket, and every byte sent over TLS",
    fetch_cold_bytes_total: "Log bytes not in the page cache when fetched: read into it off the shard's thread, then sent with sendfile",
    segments_deleted_total: "Segments removed by retention",
    segments_damaged_total: "Closed segments recovery found damaged and kept (consumers skip the damaged messages; see the broker log)",
    recovery_bytes_cut_total: "Bytes recovery cut off torn tails at start",
    partitions_orphaned_total: "Partition directories moved aside (not deleted): no registered topic gives them to this broker (at start), a registry snapshot no longer lists their topic, or they belong to an earlier topic of the same name",
    disk_writes_total: "io_uring writes of segment bytes",
    disk_syncs_total: "Segment files and directories the shard's flushes made durable",
    disk_sync_batches_total: "Batches the shard's disk driver settled those flushes in",
    disk_syncfs_total: "Flush batches made durable with one syncfs of the data directory's file system",
    segment_files_evicted_total: "Idle segment files closed early to keep the shard within its open-file limit",
    group_joins_total: "JoinGroup requests answered (a member joined)",
    group_heartbeats_total: "Heartbeat requests answered",
    group_claims_total: "ClaimPartitions requests that claimed",
    group_claim_conflicts_total: "ClaimPartitions requests that lost (CLAIM_CONFLICT): a member's view was stale, or a partition still had its owner (each is a rebalance retried)",
    group_commits_total: "CommitOffsets requests that committed",
    group_leaves_total: "LeaveGroup requests answered",
    group_members_lost_total: "Group requests answered UNKNOWN_MEMBER (a member whose session had lapsed)",
    logins_total: "Connections opened with a principal (anonymous ones included)",
    logins_anonymous_total: "Connections opened as User:ANONYMOUS (no login, no client certificate): while turning security on, the clients still to be given a login",
    login_failures_total: "Logins refused with AUTHENTICATION_FAILED (wrong password or user, bad exchange, blocked address); each closed the connection after login_failure_delay_ms",
    authorization_denied_total: "Requests refused with AUTHORIZATION_FAILED",
    sessions_ended_total: "Logged-in connections closed because their user was removed or given a password that ends sessions",
}

/// Flushes of a shard's partitions. Shared with each partition's log (the
/// storage layer runs the fdatasyncs and knows nothing of shards).
#[derive(Debug)]
pub struct FlushStats {
    /// Flushes completed (one fdatasync round over a partition's written files).
    pub flushes: Cell<u64>,
    /// How long each flush's fdatasyncs took, µs.
    pub latency_us: RefCell<Histogram<u64>>,
}

impl Default for FlushStats {
    fn default() -> Self {
        FlushStats {
            flushes: Cell::new(0),
            latency_us: RefCell::new(histogram()),
        }
    }
}

/// A shard's metrics. Not `Send`; owned by one shard.
#[derive(Debug)]
pub struct ShardMetrics {
    /// The counters.
    pub counters: Counters,
    /// Flush count and fdatasync latency of the shard's partitions.
    pub flush: Rc<FlushStats>,
    /// Produce latency with acks (request read to response ready), µs.
    pub produce_latency_us: RefCell<Histogram<u64>>,
    /// Fetch latency (request read to response ready, excluding long-poll waits), µs.
    pub fetch_latency_us: RefCell<Histogram<u64>>,
    /// Segment files open now, and the most the shard keeps (0 = no limit).
    pub segment_files: Cell<(u64, u64)>,
    /// The shard's replicated partitions.
    pub replication: Cell<Replication>,
    /// Partitions refused because their only copy vanished.
    pub data_lost: Cell<u64>,
    /// Connections open on the shard that have not logged in yet.
    pub connections_unauthenticated: Cell<u64>,
    /// Connections logged in with SCRAM (sessions a user's removal ends).
    pub sessions_open: Cell<u64>,
}

fn histogram() -> Histogram<u64> {
    // 1 µs .. 100 s at 3 significant digits.
    Histogram::new_with_bounds(1, 100_000_000, 3)
        .unwrap_or_else(|_| Histogram::new(3).unwrap_or_else(|_| unreachable!()))
}

impl Default for ShardMetrics {
    fn default() -> Self {
        ShardMetrics {
            counters: Counters::default(),
            flush: Rc::new(FlushStats::default()),
            produce_latency_us: RefCell::new(histogram()),
            fetch_latency_us: RefCell::new(histogram()),
            segment_files: Cell::new((0, 0)),
            connections_unauthenticated: Cell::new(0),
            sessions_open: Cell::new(0),
            replication: Cell::new(Replication::default()),
            data_lost: Cell::new(0),
        }
    }
}

/// Adds 1 (or `n`) to a counter.
pub fn bump(counter: &Cell<u64>, n: u64) {
    counter.set(counter.get().wrapping_add(n));
}

/// Records a latency in microseconds.
pub fn record_us(histogram: &RefCell<Histogram<u64>>, us: u64) {
    histogram.borrow_mut().saturating_record(us.max(1));
}

/// Percentiles of one histogram, for export.
#[derive(Debug, Clone, Default)]
pub struct Percentiles {
    count: u64,
    p50: u64,
    p99: u64,
    p999: u64,
    max: u64,
}

impl Percentiles {
    fn of(h: &Histogram<u64>) -> Self {
        Percentiles {
            count: h.len(),
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

/// A shard's metrics at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    counters: CounterValues,
    flushes: u64,
    produce: Percentiles,
    fetch: Percentiles,
    flush: Percentiles,
    segment_files: (u64, u64),
    replication: Replication,
    data_lost: u64,
    connections_unauthenticated: u64,
    sessions_open: u64,
}

/// A shard's replicated partitions at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replication {
    /// Partitions this shard leads.
    pub leaders: u64,
    /// Of those, the ones with fewer replicas in sync than they have.
    pub under_replicated: u64,
    /// Copies here whose partition has no live leader.
    pub offline: u64,
    /// Bytes this shard's followers lack of its leaders' logs, summed.
    pub follower_lag_bytes: u64,
}

impl ShardMetrics {
    /// Takes the disk driver's counts into the counters (the driver lives in
    /// the storage layer and knows nothing of metrics).
    pub fn absorb_driver(&self, stats: &crate::storage::driver::DriverStats) {
        let c = &self.counters;
        c.disk_writes_total.set(stats.writes.get());
        c.disk_syncs_total.set(stats.syncs.get());
        c.disk_sync_batches_total.set(stats.sync_batches.get());
        c.disk_syncfs_total.set(stats.syncfs_batches.get());
        c.segment_files_evicted_total.set(stats.files_evicted.get());
    }

    /// Takes the driver's open segment files and their limit.
    pub fn absorb_files(&self, open: usize, max: usize) {
        self.segment_files.set((open as u64, max as u64));
    }

    /// Takes the state of the shard's replicated partitions.
    pub fn absorb_replication(&self, replication: Replication) {
        self.replication.set(replication);
    }

    /// Copies the current values.
    pub fn snapshot(&self) -> Snapshot {
        let counters = self.counters.values();
        Snapshot {
            counters,
            flushes: self.flush.flushes.get(),
            produce: Percentiles::of(&self.produce_latency_us.borrow()),
            fetch: Percentiles::of(&self.fetch_latency_us.borrow()),
            flush: Percentiles::of(&self.flush.latency_us.borrow()),
            segment_files: self.segment_files.get(),
            replication: self.replication.get(),
            data_lost: self.data_lost.get(),
            connections_unauthenticated: self.connections_unauthenticated.get(),
            sessions_open: self.sessions_open.get(),
        }
    }
}

/// The latest snapshot of every shard.
pub type Published = Arc<Mutex<Vec<Snapshot>>>;

/// Renders the Prometheus text exposition of every shard's snapshot.
#[expect(
    clippy::too_many_lines,
    reason = "the Prometheus text: one line per metric, a list"
)]
pub fn render(published: &Published) -> String {
    let snapshots = match published.lock() {
        Ok(guard) => guard.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    };
    let mut out = String::new();
    for (shard, snapshot) in snapshots.iter().enumerate() {
        snapshot.counters.render(&mut out, shard, shard == 0);
    }
    let _ = writeln!(
        out,
        "# HELP ringlog_flushes_total Flushes completed (fdatasync of a partition's written files)"
    );
    let _ = writeln!(out, "# TYPE ringlog_flushes_total counter");
    for (shard, snapshot) in snapshots.iter().enumerate() {
        let _ = writeln!(
            out,
            "ringlog_flushes_total{{shard=\"{shard}\"}} {}",
            snapshot.flushes
        );
    }
    type Gauge = fn(&Snapshot) -> u64;
    let gauges: [(&str, &str, Gauge); 9] = [
        (
            "connections_unauthenticated",
            "Connections open on the shard that have not logged in yet (each holds a small read buffer; bounded per address by max_unauthenticated_connections_per_address)",
            |s| s.connections_unauthenticated,
        ),
        (
            "sessions_open",
            "Connections logged in with SCRAM: removing their user closes them",
            |s| s.sessions_open,
        ),
        (
            "partitions_leader",
            "Replicated partitions the shard leads",
            |s| s.replication.leaders,
        ),
        (
            "partitions_under_replicated",
            "Partitions the shard leads with fewer replicas in sync than they have",
            |s| s.replication.under_replicated,
        ),
        (
            "partitions_offline",
            "Partitions the shard holds a copy of whose leader is not live",
            |s| s.replication.offline,
        ),
        (
            "partitions_data_lost",
            "Partitions the shard refuses to serve because their only copy vanished from the data directory (DATA_LOST)",
            |s| s.data_lost,
        ),
        (
            "follower_lag_bytes",
            "Bytes the followers of the shard's leaders lack, summed",
            |s| s.replication.follower_lag_bytes,
        ),
        (
            "segment_files_open",
            "Segment files the shard holds open",
            |s| s.segment_files.0,
        ),
        (
            "segment_files_max",
            "Segment files the shard keeps open at most (0: no limit); past it idle ones are closed first",
            |s| s.segment_files.1,
        ),
    ];
    for (name, help, pick) in gauges {
        let _ = writeln!(out, "# HELP ringlog_{name} {help}");
        let _ = writeln!(out, "# TYPE ringlog_{name} gauge");
        for (shard, snapshot) in snapshots.iter().enumerate() {
            let _ = writeln!(
                out,
                "ringlog_{name}{{shard=\"{shard}\"}} {}",
                pick(snapshot)
            );
        }
    }
    type Pick = fn(&Snapshot) -> &Percentiles;
    let summaries: [(&str, &str, Pick); 3] = [
        (
            "produce_latency_seconds",
            "Produce latency with acks, request read to response ready (from hdrhistogram)",
            |s| &s.produce,
        ),
        (
            "fetch_latency_seconds",
            "Fetch latency, request read to response ready (from hdrhistogram)",
            |s| &s.fetch,
        ),
        (
            "flush_latency_seconds",
            "Time a flush spends in fdatasync (from hdrhistogram)",
            |s| &s.flush,
        ),
    ];
    for (name, help, pick) in summaries {
        let _ = writeln!(out, "# HELP ringlog_{name} {help}");
        let _ = writeln!(out, "# TYPE ringlog_{name} summary");
        for (shard, snapshot) in snapshots.iter().enumerate() {
            let p = pick(snapshot);
            for (q, v) in [
                ("0.5", p.p50),
                ("0.99", p.p99),
                ("0.999", p.p999),
                ("1", p.max),
            ] {
                let _ = writeln!(
                    out,
                    "ringlog_{name}{{shard=\"{shard}\",quantile=\"{q}\"}} {:.6}",
                    v as f64 / 1e6
                );
            }
            let _ = writeln!(out, "ringlog_{name}_count{{shard=\"{shard}\"}} {}", p.count);
        }
    }
    out
}

/// Reads a request up to its blank line (at most 8 KiB, within the read
/// timeout). Answering after a partial read and closing would leave the
/// rest of the request unread, and closing a socket with unread bytes
/// sends a reset: a scraper that wrote its request in pieces lost the
/// response it was being sent.
fn read_request_head(stream: &mut std::net::TcpStream) {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while head.len() < 8 << 10 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The broker-wide gauges of what lies in `.orphaned/` (read from the
/// data directory at each scrape, on the metrics thread).
fn render_orphaned(out: &mut String, data_dir: &std::path::Path) {
    let orphans = crate::storage::orphans::list(data_dir).unwrap_or_default();
    let bytes: u64 = orphans.iter().map(|o| o.bytes).sum();
    for (name, help, value) in [
        (
            "orphaned_partitions",
            "Partition directories kept in the data directory's .orphaned/ (moved aside, never deleted on their own: `ringlog brokers describe` says why, `ringlog brokers purge-orphaned` deletes them)",
            orphans.len() as u64,
        ),
        (
            "orphaned_bytes",
            "Bytes of the partition directories kept in .orphaned/",
            bytes,
        ),
    ] {
        let _ = writeln!(out, "# HELP ringlog_{name} {help}");
        let _ = writeln!(out, "# TYPE ringlog_{name} gauge");
        let _ = writeln!(out, "ringlog_{name} {value}");
    }
}

/// Serves `GET /metrics` (any path, in fact) on a plain std thread.
pub fn serve(listener: TcpListener, published: Published, data_dir: std::path::PathBuf) {
    std::thread::Builder::new()
        .name("ringlog-metrics".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                read_request_head(&mut stream);
                let mut body = render(&published);
                render_orphaned(&mut body, &data_dir);
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                    body.len(),
                    body
                );
            }
        })
        .map(|_| ())
        .unwrap_or_else(|error| tracing::error!(%error, "starting the metrics thread"));
}
