//! `ringlog mirror --from SRC --to DST --topics REGEX` and `ringlog mirror
//! promote T`: the paper's multi-datacenter copy, with offsets kept.
//!
//! The mirror keeps no state of its own: each partition resumes where the
//! target's copy ends (a new copy at the source's earliest offset), reads
//! the source's committed bytes there, and appends them verbatim at the
//! same offset (a mirror append, which the target accepts only at its end).
//! So a kill -9 at any moment loses nothing and copies nothing twice: the
//! next run starts from what the target stored. A broker restart on either
//! side is a pause: the partition is retried after a back-off. Matching
//! topics are created in the target with the source's partition count and
//! settings (and more partitions when the source grows), and looked for
//! again every few seconds.
//!
//! Several mirror processes of one `--name` share the partitions through a
//! consumer group of the target cluster (`mirror.NAME`): each copies its
//! range-assignment share of the group's view, and one that dies hands its
//! share to the others when its session ends. No claim fences them, and
//! none is needed: a mirror append lands only at the copy's end, with the
//! source's bytes for that offset, so two mirrors copying one partition
//! during a handover store it once (the later append is refused, and its
//! mirror resumes at the new end). A standalone target has no groups: one
//! mirror then copies everything.
//!
//! With `--groups`, the committed offsets of the matching source groups
//! are copied to the target's groups of the same name every second: valid
//! there as they are, since the offsets are the same, but never past what
//! the copy holds yet (a commit ahead of the copy is copied as the copy's
//! end, a message boundary: at least once). A target group with live
//! members is left alone: its members commit for themselves.

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use protocol::client::{
    Client, ClientError, GroupView, Joined, MirrorChunk, MirrorRead, OffsetCommit, OffsetSpec,
};
use protocol::codec::{AckMode, TopicMetadata, TopicSettings};
use protocol::stored::{framed_units, unit_len, MessageFormat};
use protocol::ErrorCode;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often the source's topics are listed again.
const SCAN_EVERY: Duration = Duration::from_secs(5);

/// Bytes a read asks for when the next message is larger than
/// [`READ_BYTES`] (a broker's `message_bytes_max` is at most this).
const READ_BYTES_MAX: u32 = 64 << 20;

/// Bytes read per partition per request (and so the size of its
/// appends; less when the target takes smaller requests).
const READ_BYTES: u32 = 1 << 20;

/// The least a mirror's appends are cut to for a target that takes only
/// small requests (a broker's `max_request_bytes` is at least 64 KiB).
const APPEND_BYTES_MIN: u32 = 16 << 10;

/// How long a caught-up worker's read waits at the source for news
/// before it asks again.
const LONG_POLL: Duration = Duration::from_millis(500);

/// How long a worker with nothing to read, or a caught-up one reading
/// several source shards, pauses before it reads again.
const IDLE: Duration = Duration::from_millis(20);

/// How often the supervisor looks at the share, the workers' deal and the
/// metrics.
const TICK: Duration = Duration::from_millis(50);

/// How long a partition whose broker did not answer waits.
const PAUSE: Duration = Duration::from_millis(500);

/// How often the source groups' committed offsets are copied.
const GROUPS_EVERY: Duration = Duration::from_secs(1);

/// The session of a mirror in its group, and how often it heartbeats.
const SESSION_MS: u32 = 6_000;
const BEAT_EVERY: Duration = Duration::from_secs(1);

/// The mirrors of one name: who copies which partitions.
struct Share {
    group: String,
    member: String,
    topics: Vec<String>,
    joined: Option<Joined>,
    view: Option<GroupView>,
    beat_at: Option<Instant>,
    /// The target has no groups (standalone): this mirror copies all.
    alone: bool,
}

impl Share {
    fn new(name: &str) -> Share {
        Share {
            group: format!("mirror.{}", group_safe(name)),
            member: format!("mirror-{}", std::process::id()),
            topics: Vec::new(),
            joined: None,
            view: None,
            beat_at: None,
            alone: false,
        }
    }

    /// Joins (again, when the mirrored topics changed) and heartbeats as
    /// due; a coordinator that does not answer leaves the last view.
    fn beat(&mut self, target: &Client, topics: Vec<String>) {
        if self.alone || self.beat_at.is_some_and(|at| at.elapsed() < BEAT_EVERY) {
            return;
        }
        self.beat_at = Some(Instant::now());
        if topics != self.topics {
            if let Some(joined) = self.joined.take() {
                let _ = target.leave_group(&self.group, &joined);
            }
            self.topics = topics;
            self.view = None;
        }
        if self.topics.is_empty() {
            return;
        }
        if self.joined.is_none() {
            let names: Vec<&str> = self.topics.iter().map(String::as_str).collect();
            match target.join_group(&self.group, &self.member, &names, SESSION_MS) {
                Ok(joined) => self.joined = Some(joined),
                Err(e) if e.code() == Some(ErrorCode::ClusterRequired) => {
                    self.alone = true;
                    return;
                }
                Err(e) => {
                    eprintln!(
                        "warning: joining {}: {e}; copying the last share meanwhile",
                        self.group
                    );
                    return;
                }
            }
        }
        let Some(joined) = &self.joined else { return };
        match target.heartbeat(&self.group, joined, 0, 0) {
            Ok(view) => self.view = Some(view),
            Err(e) if e.code() == Some(ErrorCode::UnknownMember) => {
                self.joined = None; // the session lapsed: join again
                self.view = None;
            }
            Err(e) => eprintln!("warning: heartbeat of {}: {e}", self.group),
        }
    }

    /// Whether this mirror knows its share: it runs alone, or it has a
    /// view of its group.
    fn decided(&self) -> bool {
        self.alone || (self.joined.is_some() && self.view.is_some())
    }

    /// Whether this mirror copies `partition` of `topic` now.
    fn mine(&self, topic: &str, partition: u32) -> bool {
        if self.alone {
            return true;
        }
        let (Some(view), Some(joined)) = (&self.view, &self.joined) else {
            return false;
        };
        view.assignment(&joined.member_id)
            .iter()
            .any(|(t, ps)| t == topic && ps.contains(&partition))
    }

    fn leave(&mut self, target: &Client) {
        if let Some(joined) = self.joined.take() {
            let _ = target.leave_group(&self.group, &joined);
        }
    }
}

/// A mirror name as a group name: the topic naming rule's characters.
fn group_safe(name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(200)
        .collect();
    if safe.is_empty() {
        "mirror".into()
    } else {
        safe
    }
}

/// `ringlog mirror` without a subcommand: copy.
#[derive(Args, Debug)]
pub struct MirrorArgs {
    /// The source cluster's brokers.
    #[arg(long)]
    from: Option<String>,
    /// The target cluster's brokers (default: --brokers).
    #[arg(long)]
    to: Option<String>,
    /// Which source topics to mirror: a regular expression matched against
    /// the whole name.
    #[arg(long, default_value = ".*")]
    topics: String,
    /// What the target topics say they mirror (`NAME/topic`; default: the
    /// --from address).
    #[arg(long)]
    name: Option<String>,
    /// Replication factor of the topics created in the target (default:
    /// the target's default).
    #[arg(long)]
    replication_factor: Option<u32>,
    /// Retention of the topics created in the target, in ms (default: the
    /// source topic's).
    #[arg(long)]
    retention_ms: Option<u64>,
    /// Copy the committed offsets of the source groups whose names match
    /// this regular expression (both clusters on etcd).
    #[arg(long)]
    groups: Option<String>,
    /// Stop once every partition has been copied up to the source's end
    /// (and, with --groups, the offsets copied once more).
    #[arg(long)]
    exit_at_end: bool,
    /// Workers copying at once, each over connections of its own: the
    /// partitions are dealt to them by the source shard that serves them,
    /// and a worker reads all its partitions of a shard in one request.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Serve Prometheus metrics (per partition lag in bytes and seconds,
    /// bytes and messages copied, errors) at this address, e.g.
    /// 127.0.0.1:9700; `ringlog mirror status --metrics ADDR` reads them.
    #[arg(long)]
    metrics: Option<String>,
}

impl MirrorArgs {
    /// The target cluster, when --to names it.
    pub fn target(&self) -> Option<&str> {
        self.to.as_deref()
    }
}

/// `ringlog mirror promote`.
#[derive(Subcommand, Debug)]
pub enum MirrorCommand {
    /// End mirroring of a topic in the target (the failover step): it takes
    /// ordinary produces from now on, at the offsets the mirror left.
    Promote {
        /// The topic.
        topic: String,
    },
    /// A running mirror's partitions: lag in bytes and seconds, what it
    /// copied, errors (read from its --metrics address).
    Status {
        /// The mirror's --metrics address.
        #[arg(long)]
        metrics: String,
    },
}

/// One partition's copy.
struct Copy {
    /// Where the next read starts; `None` until looked up in the target.
    position: Option<u64>,
    /// Not before this (a broker did not answer).
    retry_at: Instant,
    /// Caught up with the source at the last read.
    at_end: bool,
    /// Where the source's visible log ended at the last read.
    source_end: u64,
    /// Since when the copy has been behind the source (`None`: caught up).
    behind_since: Option<Instant>,
    /// Copied by this run.
    bytes: u64,
    messages: u64,
    /// Failed reads and appends (each retried).
    errors: u64,
    /// This mirror's to copy now (its share of the mirrors of its name).
    mine: bool,
    /// The source shard that serves it (`None`: looked up again).
    owner: Option<String>,
    /// The worker that copies it.
    worker: usize,
    /// Bytes its next read asks for after a message larger than a read
    /// (`None`: [`READ_BYTES`], or less for a target of small requests).
    read_grown: Option<u32>,
    /// What the source topic stores (how chunks are cut to whole units).
    format: MessageFormat,
}

impl Copy {
    fn new(format: MessageFormat) -> Copy {
        Copy {
            format,
            position: None,
            retry_at: Instant::now(),
            at_end: false,
            source_end: 0,
            behind_since: None,
            bytes: 0,
            messages: 0,
            errors: 0,
            mine: false,
            owner: None,
            worker: 0,
            read_grown: None,
        }
    }
}

/// The metrics text of every partition's copy (Prometheus exposition).
fn render(copies: &BTreeMap<(String, u32), Copy>, groups_copied: u64) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let series = [
        (
            "ringlog_mirror_lag_bytes",
            "gauge",
            "Bytes the copy is behind the source's visible end.",
        ),
        (
            "ringlog_mirror_lag_seconds",
            "gauge",
            "How long the copy has been behind the source (0: caught up).",
        ),
        (
            "ringlog_mirror_copied_bytes_total",
            "counter",
            "Bytes appended to the copy by this run.",
        ),
        (
            "ringlog_mirror_copied_messages_total",
            "counter",
            "Messages appended to the copy by this run.",
        ),
        (
            "ringlog_mirror_errors_total",
            "counter",
            "Failed reads and appends (each retried).",
        ),
    ];
    for (i, (name, kind, help)) in series.iter().enumerate() {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for ((topic, partition), c) in copies {
            let position = c.position.unwrap_or(0);
            let value = match i {
                0 => c.source_end.saturating_sub(position) as f64,
                1 => c.behind_since.map_or(0.0, |t| t.elapsed().as_secs_f64()),
                2 => c.bytes as f64,
                3 => c.messages as f64,
                _ => c.errors as f64,
            };
            let _ = writeln!(
                out,
                "{name}{{topic=\"{topic}\",partition=\"{partition}\"}} {value}"
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP ringlog_mirror_group_offsets_copied_total Committed offsets copied to the target's groups.\n# TYPE ringlog_mirror_group_offsets_copied_total counter\nringlog_mirror_group_offsets_copied_total {groups_copied}"
    );
    out
}

/// Serves the latest metrics text at `address`, one answer per connection.
fn serve_metrics(address: &str) -> anyhow::Result<std::sync::Arc<std::sync::Mutex<String>>> {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind(address)
        .with_context(|| format!("--metrics {address}: cannot listen there"))?;
    let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let shared = text.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
            // The request, up to its blank line (a scraper may send it in
            // pieces; answering before it is all read resets the socket).
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let body = shared.lock().map(|t| t.clone()).unwrap_or_default();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    Ok(text)
}

/// Prints a running mirror's metrics as a table.
pub fn status(metrics: &str) -> anyhow::Result<()> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(metrics).with_context(|| {
        format!("no mirror answers at {metrics} (start it with --metrics {metrics})")
    })?;
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {metrics}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    let mut rows: BTreeMap<(String, u32), [f64; 5]> = BTreeMap::new();
    let names = [
        "ringlog_mirror_lag_bytes",
        "ringlog_mirror_lag_seconds",
        "ringlog_mirror_copied_bytes_total",
        "ringlog_mirror_copied_messages_total",
        "ringlog_mirror_errors_total",
    ];
    for line in text.lines().filter(|l| l.starts_with("ringlog_mirror_")) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Some((name, labels)) = series.split_once('{') else {
            continue;
        };
        let Some(column) = names.iter().position(|n| *n == name) else {
            continue;
        };
        let label = |key: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{key}=\"")))
                .map(|v| v.trim_end_matches(['"', '}']).to_string())
        };
        let (Some(topic), Some(partition)) = (label("topic"), label("partition")) else {
            continue;
        };
        let partition: u32 = partition.parse().unwrap_or(0);
        rows.entry((topic, partition)).or_default()[column] = value.parse().unwrap_or(0.0);
    }
    println!("topic\tpartition\tlag_bytes\tlag_seconds\tcopied_bytes\tcopied_messages\terrors");
    for ((topic, partition), v) in rows {
        println!(
            "{topic}\t{partition}\t{}\t{:.1}\t{}\t{}\t{}",
            v[0] as u64, v[1], v[2] as u64, v[3] as u64, v[4] as u64
        );
    }
    Ok(())
}

/// Promotes `topic` in the target and says where each partition stopped.
pub fn promote(target: &Client, topic: &str) -> anyhow::Result<()> {
    let source = target
        .promote_mirror(topic)
        .with_context(|| format!("promoting {topic}"))?;
    let metadata = target.metadata(&[topic])?;
    let partitions = metadata.topics.first().map_or(0, |t| t.partitions.len());
    println!("promoted {topic} (was a mirror of {source}): it takes produces from now on");
    println!("partition\tend_offset");
    for partition in 0..partitions as u32 {
        let (end, _) = target.list_offsets(topic, partition, OffsetSpec::Latest, 0)?;
        println!("{partition}\t{end}");
    }
    Ok(())
}

/// Copies the matching topics until stopped (or, with --exit-at-end, until
/// every partition is at the source's end).
pub fn run(args: MirrorArgs, target_brokers: &str) -> anyhow::Result<()> {
    let target = super::connect(target_brokers)?;
    let Some(from) = args.from.clone() else {
        bail!("ringlog mirror needs --from SOURCE_BROKERS (and --to TARGET_BROKERS, or --brokers)");
    };
    let pattern = regex::Regex::new(&format!("^(?:{})$", args.topics))
        .with_context(|| format!("--topics {:?} is not a regular expression", args.topics))?;
    let groups = match &args.groups {
        Some(groups) => Some(
            regex::Regex::new(&format!("^(?:{groups})$"))
                .with_context(|| format!("--groups {groups:?} is not a regular expression"))?,
        ),
        None => None,
    };
    let label = args.name.clone().unwrap_or_else(|| from.clone());
    let source = super::connect(&from)?;
    // Workers: a source and a target client each (their own connections).
    let mut workers = Vec::new();
    for _ in 0..args.workers.max(1) {
        workers.push((super::connect(&from)?, super::connect(target_brokers)?));
    }
    let metrics = match &args.metrics {
        Some(address) => Some(serve_metrics(address)?),
        None => None,
    };
    let copies = std::sync::Arc::new(Copies::default());
    let count = workers.len();
    // Detached: a worker waiting in a long-polling read does not hold up
    // the mirror's exit.
    for (index, (source, target)) in workers.into_iter().enumerate() {
        let copies = copies.clone();
        std::thread::Builder::new()
            .name(format!("mirror-worker-{index}"))
            .spawn(move || work(index, &source, &target, &copies))
            .context("starting a mirror worker")?;
    }
    let supervisor = Supervisor {
        args: &args,
        source: &source,
        target: &target,
        pattern: &pattern,
        groups: groups.as_ref(),
        label: &label,
        metrics: metrics.as_ref(),
        workers: count,
    };
    let result = supervisor.run(&copies);
    copies.stop.store(true, Ordering::Relaxed);
    result
}

/// The partitions' copies, shared by the supervisor (which adds them,
/// decides which are this mirror's and which worker copies each, and
/// reports) and the workers (which copy them).
struct Copies {
    map: Mutex<BTreeMap<(String, u32), Copy>>,
    /// Set when the mirror ends: the workers return.
    stop: AtomicBool,
    /// A worker's failure, which ends the mirror.
    failure: Mutex<Option<anyhow::Error>>,
    /// The largest append the target took or is thought to take: lowered
    /// when it refuses one as too large (its `max_request_bytes`).
    append_max: AtomicU32,
    /// When the first read went out and the last append was taken: the
    /// copy's own span, without the process's start, the topics' creation
    /// and the end's detection (what `--exit-at-end` reports).
    span: Mutex<(Option<Instant>, Option<Instant>)>,
}

impl Default for Copies {
    fn default() -> Copies {
        Copies {
            map: Mutex::default(),
            stop: AtomicBool::new(false),
            failure: Mutex::new(None),
            append_max: AtomicU32::new(READ_BYTES_MAX),
            span: Mutex::new((None, None)),
        }
    }
}

impl Copies {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, u32), Copy>> {
        self.map
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Changes one partition's copy, if it is still there.
    fn update(&self, key: &(String, u32), change: impl FnOnce(&mut Copy)) {
        if let Some(copy) = self.lock().get_mut(key) {
            change(copy);
        }
    }

    /// Notes a read going out (the first one starts the copy's span) or
    /// an append taken (the last one ends it).
    fn mark(&self, appended: bool) {
        let now = Instant::now();
        let mut span = self.span.lock().unwrap_or_else(|p| p.into_inner());
        if appended {
            span.1 = Some(now);
        } else {
            span.0.get_or_insert(now);
        }
    }

    /// What this run copied, as `--exit-at-end` prints it at the end.
    fn summary(&self) -> String {
        let (messages, bytes) = self
            .lock()
            .values()
            .fold((0u64, 0u64), |(m, b), c| (m + c.messages, b + c.bytes));
        let span = *self.span.lock().unwrap_or_else(|p| p.into_inner());
        match span {
            (Some(first), Some(last)) if last > first => {
                let seconds = (last - first).as_secs_f64();
                format!(
                    "copied {messages} messages ({bytes} bytes) in {seconds:.3} s from the first read to the last append: {:.0} msg/s, {:.1} MB/s",
                    messages as f64 / seconds,
                    bytes as f64 / 1e6 / seconds
                )
            }
            _ => format!("copied {messages} messages ({bytes} bytes)"),
        }
    }

    /// A read or append that failed in a way the mirror rides out: the
    /// partition waits a moment and is looked up again.
    fn retry_later(&self, key: &(String, u32), error: &ClientError) {
        eprintln!("warning: {}-{}: {error}; retrying", key.0, key.1);
        self.update(key, |copy| {
            copy.retry_at = Instant::now() + PAUSE;
            copy.at_end = false;
            copy.errors += 1;
            copy.owner = None;
        });
    }
}

/// The main thread's part: the topics to copy, the share of them that is
/// this mirror's, which worker copies each, metrics and group offsets.
struct Supervisor<'a> {
    args: &'a MirrorArgs,
    source: &'a Client,
    target: &'a Client,
    pattern: &'a regex::Regex,
    groups: Option<&'a regex::Regex>,
    label: &'a str,
    metrics: Option<&'a std::sync::Arc<Mutex<String>>>,
    workers: usize,
}

impl Supervisor<'_> {
    fn run(&self, copies: &Copies) -> anyhow::Result<()> {
        let mut scanned: Option<Instant> = None;
        let mut synced = GroupSync::default();
        let mut rendered: Option<Instant> = None;
        let mut share = Share::new(self.label);
        loop {
            if let Some(error) = copies.failure.lock().ok().and_then(|mut f| f.take()) {
                return Err(error);
            }
            if let Some(text) = self.metrics {
                if rendered.is_none_or(|at| at.elapsed() >= Duration::from_millis(500)) {
                    let body = render(&copies.lock(), synced.copied_total);
                    if let Ok(mut t) = text.lock() {
                        *t = body;
                    }
                    rendered = Some(Instant::now());
                }
            }
            if let Some(pattern) = self.groups {
                if synced.at.is_none_or(|at| at.elapsed() >= GROUPS_EVERY) {
                    synced.run(self.source, self.target, pattern, &positions(copies))?;
                }
            }
            if scanned.is_none_or(|at| at.elapsed() >= SCAN_EVERY) {
                match scan(
                    self.args,
                    self.source,
                    self.target,
                    self.pattern,
                    self.label,
                ) {
                    Ok(partitions) => {
                        let mut map = copies.lock();
                        for (key, format) in partitions {
                            map.entry(key).or_insert_with(|| Copy::new(format));
                        }
                        scanned = Some(Instant::now());
                    }
                    Err(error) if scanned.is_some() => {
                        eprintln!("warning: listing the topics again: {error:#}");
                        scanned = Some(Instant::now());
                    }
                    Err(error) => return Err(error),
                }
            }
            let mut topics: Vec<String> = copies.lock().keys().map(|(t, _)| t.clone()).collect();
            topics.dedup();
            share.beat(self.target, topics);
            self.deal(copies, &share);
            if self.args.exit_at_end && share.decided() {
                let map = copies.lock();
                let done = !map.is_empty() && map.values().all(|c| c.at_end);
                drop(map);
                if done {
                    if let Some(pattern) = self.groups {
                        synced.run(self.source, self.target, pattern, &positions(copies))?;
                    }
                    share.leave(self.target);
                    println!("{}", copies.summary());
                    return Ok(());
                }
            }
            std::thread::sleep(TICK);
        }
    }

    /// Marks this mirror's partitions and deals them to the workers by the
    /// source shard that serves them: with at least as many workers as
    /// shards, each worker reads one shard only (in one long-polling
    /// MultiFetch for all its partitions there), and a shard's partitions
    /// are spread over the workers it has; with fewer, a worker reads
    /// several shards.
    fn deal(&self, copies: &Copies, share: &Share) {
        let unplaced: Vec<(String, u32)> = copies
            .lock()
            .iter()
            .filter(|(key, c)| c.owner.is_none() && share.mine(&key.0, key.1))
            .map(|(key, _)| key.clone())
            .collect();
        for key in unplaced {
            // Not placed now (the broker is away): tried again next tick.
            if let Ok(address) = self.source.shard_address(&key.0, key.1) {
                copies.update(&key, |c| c.owner = Some(address));
            }
        }
        let mut map = copies.lock();
        let mut by_shard: BTreeMap<String, Vec<&mut Copy>> = BTreeMap::new();
        for (key, copy) in map.iter_mut() {
            copy.mine = share.mine(&key.0, key.1);
            if !copy.mine {
                // Another mirror's now: looked up again if it comes back.
                copy.position = None;
                copy.at_end = true;
                continue;
            }
            if let Some(owner) = copy.owner.clone() {
                by_shard.entry(owner).or_default().push(copy);
            }
        }
        let shards = by_shard.len().max(1);
        for (s, (_, shard)) in by_shard.into_iter().enumerate() {
            // This shard's workers: s, s + shards, s + 2 * shards, ...
            let own = self.workers.saturating_sub(s).div_ceil(shards);
            for (j, copy) in shard.into_iter().enumerate() {
                copy.worker = (s + (j % own.max(1)) * shards) % self.workers;
            }
        }
    }
}

/// Where each copy stands, for the group offsets' bound.
fn positions(copies: &Copies) -> BTreeMap<(String, u32), u64> {
    copies
        .lock()
        .iter()
        .filter_map(|(key, c)| Some((key.clone(), c.position?)))
        .collect()
}

/// A worker: copies the partitions dealt to it until the mirror ends. A
/// failure the mirror cannot ride out ends the mirror.
fn work(index: usize, source: &Client, target: &Client, copies: &Copies) {
    let mut quiet = false;
    let mut turn = 0usize;
    while !copies.stop.load(Ordering::Relaxed) {
        match round(index, source, target, copies, quiet, turn) {
            Ok(moved) => quiet = !moved,
            Err(error) => {
                if let Ok(mut failure) = copies.failure.lock() {
                    failure.get_or_insert(error);
                }
                copies.stop.store(true, Ordering::Relaxed);
                return;
            }
        }
        turn = turn.wrapping_add(1);
    }
}

/// A partition due for a read: its key, position, grown read, source shard
/// and format.
type Due = (
    (String, u32),
    Option<u64>,
    Option<u32>,
    String,
    MessageFormat,
);

/// The partitions worker `index` reads now.
fn due(copies: &Copies, index: usize, now: Instant) -> Vec<Due> {
    copies
        .lock()
        .iter()
        .filter(|(_, c)| c.mine && c.worker == index && c.retry_at <= now)
        .filter_map(|(key, c)| {
            Some((
                key.clone(),
                c.position,
                c.read_grown,
                c.owner.clone()?,
                c.format,
            ))
        })
        .collect()
}

/// One read of each source shard a worker copies from, and the appends of
/// what it answered; true when there is more to do at once. After a quiet
/// round, a worker of one shard waits in the read for news (the source
/// answers as soon as any of its partitions has some); one of several
/// shards polls them after a pause.
fn round(
    index: usize,
    source: &Client,
    target: &Client,
    copies: &Copies,
    quiet: bool,
    turn: usize,
) -> anyhow::Result<bool> {
    let now = Instant::now();
    let due = due(copies, index, now);
    let mut by_shard: BTreeMap<String, Vec<MirrorRead>> = BTreeMap::new();
    let append_max = copies.append_max.load(Ordering::Relaxed);
    for (key, position, grown, owner, format) in due {
        let max_bytes = grown.unwrap_or(READ_BYTES.min(append_max));
        let offset = match position {
            Some(position) => position,
            None => match resume(source, target, &key.0, key.1) {
                Ok(position) => position,
                Err(error) if passes(&error) => {
                    copies.retry_later(&key, &error);
                    continue;
                }
                Err(error) => {
                    return Err(error).with_context(|| format!("mirroring {}-{}", key.0, key.1))
                }
            },
        };
        by_shard.entry(owner).or_default().push(MirrorRead {
            topic: key.0,
            partition: key.1,
            offset,
            max_bytes,
            format,
        });
    }
    if by_shard.is_empty() {
        std::thread::sleep(IDLE);
        return Ok(false);
    }
    let wait = if quiet && by_shard.len() == 1 {
        LONG_POLL
    } else {
        Duration::ZERO
    };
    let mut more = false;
    let several = by_shard.len() > 1;
    for (address, mut reads) in by_shard {
        // Past the read's byte budget a shard answers nothing: each
        // partition comes first in turn.
        let len = reads.len();
        reads.rotate_left(turn % len);
        copies.mark(false);
        let answers = match source.mirror_read_many(&address, &reads, wait) {
            Ok(answers) => answers,
            Err(error) if passes(&error) => {
                for read in &reads {
                    copies.retry_later(&(read.topic.clone(), read.partition), &error);
                }
                continue;
            }
            Err(error) => return Err(error).with_context(|| format!("reading from {address}")),
        };
        for (read, answer) in reads.iter().zip(answers) {
            more |= settle(target, read, answer, copies)
                .with_context(|| format!("mirroring {}-{}", read.topic, read.partition))?;
        }
    }
    if several && !more {
        std::thread::sleep(IDLE);
    }
    Ok(more)
}

/// Appends one partition's answer to its copy; true when there is more
/// to copy at once.
#[expect(
    clippy::too_many_lines,
    reason = "one partition's answer applied in order: errors, the copy's end, the append, the metrics"
)]
fn settle(
    target: &Client,
    read: &MirrorRead,
    answer: Result<MirrorChunk, ClientError>,
    copies: &Copies,
) -> Result<bool, ClientError> {
    let key = (read.topic.clone(), read.partition);
    let position = read.offset;
    let chunk = match answer {
        Ok(chunk) => chunk,
        Err(error) if error.code() == Some(ErrorCode::OffsetOutOfRange) => {
            // Below the source's start: its retention outran the mirror, a
            // gap the mirror cannot fill. Past its end: the source's log
            // was cut under the copy (an unclean election) or is another
            // log. Either way say so and stop, never skip or fork silently.
            let why = match error.offset_range() {
                Some((start, _)) if position < start => format!(
                    "the source no longer holds offset {position} (it starts at {start}): its retention outran the mirror"
                ),
                Some((_, end)) => format!(
                    "the source's log ends at {end}, below the copy's {position}: it was cut under the copy (an unclean election?) or is another log"
                ),
                None => error.to_string(),
            };
            return Err(ClientError::Protocol(format!(
                "{why}; the copy keeps what it has"
            )));
        }
        Err(error) if passes(&error) => {
            copies.retry_later(&key, &error);
            return Ok(false);
        }
        Err(error) => return Err(error),
    };
    let source_end = chunk.offsets.flushed_offset.max(position);
    if chunk.cut {
        // A message larger than a read is read again with room for it (up
        // to the largest a broker takes), never taken for the end of the
        // log.
        copies.update(&key, |c| {
            c.read_grown = Some(read.max_bytes.saturating_mul(8).min(READ_BYTES_MAX));
            c.position = c.mine.then_some(position);
        });
        return Ok(true);
    }
    if chunk.messages == 0 {
        copies.update(&key, |c| {
            c.source_end = source_end;
            c.at_end = true;
            c.behind_since = None;
            c.position = c.mine.then_some(position);
        });
        return Ok(false);
    }
    let chunk = fitted(
        chunk,
        copies.append_max.load(Ordering::Relaxed),
        read.format,
    );
    // acks=written: the mirror keeps no state, so bytes a target broker
    // loses to a power cut before flushing are copied again from where its
    // log ends after the restart (the next append there is refused with
    // that end); waiting for each chunk's fdatasync would only slow it.
    match target.mirror_append(&read.topic, read.partition, &chunk, AckMode::Written) {
        Ok(end) => {
            copies.mark(true);
            copies.update(&key, |c| {
                c.position = c.mine.then_some(end);
                c.source_end = source_end;
                c.at_end = false;
                c.read_grown = None;
                c.bytes += chunk.bytes.len() as u64;
                c.messages += u64::from(chunk.messages);
                if end >= source_end {
                    c.behind_since = None;
                } else {
                    c.behind_since.get_or_insert_with(Instant::now);
                }
            });
            Ok(true)
        }
        Err(error) if error.code() == Some(ErrorCode::OffsetOutOfRange) => {
            // The copy ends elsewhere (another mirror of the same name
            // copied it meanwhile, or the target lost unflushed bytes):
            // resume where it ends, which the refusal names.
            let end = error.offset_range().map(|(_, end)| end);
            copies.update(&key, |c| c.position = end.filter(|_| c.mine));
            Ok(true)
        }
        Err(error) if error.code() == Some(ErrorCode::FrameTooLarge) && chunk.messages > 1 => {
            // The target's max_request_bytes is below this append: smaller
            // appends from now on (the refused one is copied again).
            let smaller = (chunk.bytes.len() as u32 / 2).max(APPEND_BYTES_MIN);
            let before = copies.append_max.fetch_min(smaller, Ordering::Relaxed);
            if smaller < before {
                eprintln!(
                    "the target refused a {} byte append as too large: appending at most {smaller} bytes at a time",
                    chunk.bytes.len()
                );
            }
            Ok(true)
        }
        Err(error) if error.code() == Some(ErrorCode::FrameTooLarge) => {
            Err(ClientError::Protocol(format!(
                "the message at offset {position} ({} bytes) is larger than the target takes in one request (its max_request_bytes); raise it there: {error}",
                chunk.bytes.len()
            )))
        }
        Err(error) if passes(&error) => {
            copies.retry_later(&key, &error);
            Ok(false)
        }
        Err(error) => Err(error),
    }
}

/// The source groups' offsets as last copied.
#[derive(Default)]
struct GroupSync {
    at: Option<Instant>,
    copied: BTreeMap<(String, String, u32), u64>,
    copied_total: u64,
    /// Target groups found with live members (said once each).
    busy: std::collections::BTreeSet<String>,
}

impl GroupSync {
    /// Copies what the matching source groups committed since the last
    /// pass, bounded by what each copy holds.
    fn run(
        &mut self,
        source: &Client,
        target: &Client,
        pattern: &regex::Regex,
        positions: &BTreeMap<(String, u32), u64>,
    ) -> anyhow::Result<()> {
        self.at = Some(Instant::now());
        let groups = match source.list_groups() {
            Ok(groups) => groups,
            Err(e) if e.code() == Some(ErrorCode::ClusterRequired) => {
                bail!("--groups needs the source cluster on etcd: {e}")
            }
            Err(e) if passes(&e) => {
                eprintln!("warning: listing the source's groups: {e}; retrying");
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        for group in groups.iter().filter(|g| pattern.is_match(g)) {
            let described = match source.describe_group(group) {
                Ok(d) => d,
                Err(e) if passes(&e) => continue,
                Err(e) => return Err(e.into()),
            };
            let offsets: Vec<OffsetCommit> = described
                .partitions
                .iter()
                .filter_map(|p| {
                    let copied = positions.get(&(p.topic.clone(), p.partition))?;
                    let offset = p.offset?.min(*copied);
                    let key = (group.clone(), p.topic.clone(), p.partition);
                    (self.copied.get(&key) != Some(&offset)).then(|| OffsetCommit {
                        topic: p.topic.clone(),
                        partition: p.partition,
                        offset,
                        leader_epoch: -1,
                    })
                })
                .collect();
            if offsets.is_empty() {
                continue;
            }
            match target.reset_offsets(group, &offsets) {
                Ok(_) => {
                    self.busy.remove(group);
                    self.copied_total += offsets.len() as u64;
                    for o in offsets {
                        self.copied
                            .insert((group.clone(), o.topic, o.partition), o.offset);
                    }
                }
                Err(e) if e.code() == Some(ErrorCode::GroupNotEmpty) => {
                    if self.busy.insert(group.clone()) {
                        eprintln!("group {group} has live members in the target: its offsets are its own there; not copied while they are");
                    }
                }
                Err(e) if e.code() == Some(ErrorCode::ClusterRequired) => {
                    bail!("--groups needs the target cluster on etcd: {e}")
                }
                Err(e) if passes(&e) => {
                    eprintln!("warning: copying group {group}'s offsets: {e}; retrying")
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// A failure the mirror rides out: a broker away or busy.
fn passes(error: &ClientError) -> bool {
    error.is_retriable() || error.is_connection_error()
}

/// Creates the target topics the source has and the target lacks (and the
/// partitions a source topic gained); returns every partition to copy.
fn scan(
    args: &MirrorArgs,
    source: &Client,
    target: &Client,
    pattern: &regex::Regex,
    label: &str,
) -> anyhow::Result<Vec<((String, u32), MessageFormat)>> {
    let listed = source
        .metadata(&[])
        .context("listing the source's topics")?;
    let mut partitions = Vec::new();
    for topic in listed.topics.iter().filter(|t| pattern.is_match(&t.name)) {
        let count = topic.partitions.len() as u32;
        let existing = target.metadata(&[topic.name.as_str()]);
        let existing = match existing {
            Ok(m) => m.topics.into_iter().find(|t| t.name == topic.name),
            Err(e) if e.code() == Some(ErrorCode::UnknownTopic) => None,
            Err(e) => return Err(e).context("reading the target's topics"),
        };
        match existing {
            None => {
                let source_label = format!("{label}/{}", topic.name);
                let created = target.create_mirror_topic(
                    &topic.name,
                    count,
                    &settings(args, topic),
                    &source_label,
                );
                match created {
                    Ok(_) => println!(
                        "created {} in the target ({count} partitions, a mirror of {source_label})",
                        topic.name
                    ),
                    // Another mirror of the name created it a moment ago:
                    // the next scan looks at it.
                    Err(e) if e.code() == Some(ErrorCode::TopicAlreadyExists) => continue,
                    Err(e) => {
                        return Err(e)
                            .with_context(|| format!("creating {} in the target", topic.name))
                    }
                }
            }
            Some(t) if t.mirror_source.is_empty() => {
                // Promoted, or an ordinary topic of the same name: its
                // writers own it now.
                continue;
            }
            Some(t) if (t.partitions.len() as u32) < count => {
                target.create_partitions(&topic.name, count)?;
                println!(
                    "{}: {} -> {count} partitions in the target",
                    topic.name,
                    t.partitions.len()
                );
            }
            Some(_) => {}
        }
        let format = MessageFormat::from_number(topic.settings.message_format).unwrap_or_default();
        partitions.extend((0..count).map(|p| ((topic.name.clone(), p), format)));
    }
    Ok(partitions)
}

/// A target topic's settings: the source's, but the target's own
/// replication factor, and the retention override.
fn settings(args: &MirrorArgs, source: &TopicMetadata) -> TopicSettings {
    TopicSettings {
        retention_ms: args.retention_ms.unwrap_or(source.settings.retention_ms),
        replication_factor: args.replication_factor.unwrap_or(0),
        min_insync_replicas: 0,
        write_caching: false,
        ..source.settings
    }
}

/// Where a partition's copy resumes: the target's end, or for an empty
/// copy the source's earliest offset (its retention may have dropped the
/// start).
fn resume(
    source: &Client,
    target: &Client,
    topic: &str,
    partition: u32,
) -> Result<u64, ClientError> {
    // Where the copy's log ends (written, perhaps not flushed yet): the
    // next append must land exactly there.
    let (_, offsets) = target.list_offsets(topic, partition, OffsetSpec::Latest, 0)?;
    let end = offsets.end_offset;
    if offsets.start_offset < end {
        return Ok(end);
    }
    let (earliest, _) = source.list_offsets(topic, partition, OffsetSpec::Earliest, 0)?;
    Ok(end.max(earliest))
}

/// `chunk` cut to the whole messages within `max` bytes (at least its
/// first message): what a target that takes only small requests gets in
/// one append; the rest is read again.
fn fitted(mut chunk: MirrorChunk, max: u32, format: MessageFormat) -> MirrorChunk {
    let max = max as usize;
    if chunk.bytes.len() <= max {
        return chunk;
    }
    let (mut len, mut messages) = framed_units(format, &chunk.bytes[..max]).unwrap_or((0, 0));
    if messages == 0 {
        // The first unit alone is larger: it goes whole (the chunk holds
        // it, cut to whole units when read).
        len = unit_len(format, &chunk.bytes).unwrap_or(chunk.bytes.len());
        messages = 1;
    }
    chunk.bytes = chunk.bytes.slice(..len);
    chunk.messages = messages;
    chunk
}
