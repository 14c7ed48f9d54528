//! `ringlog mirror --from SRC --to DST --topics REGEX` and `ringlog mirror
//! promote T`: the paper's multi-datacenter copy, with offsets kept.
//!
//! The mirror keeps no state of its own: each partition resumes where the
//! target's copy ends (a new copy at the source's earliest offset), reads
//! the source's committed bytes there, and appends them verbatim at the
//! same offset (a mirror append, which the target accepts only at its end).
//! So a kill -9 at any moment loses nothing and copies nothing twice: the
//! next run starts from what the target stored. A broker restart on either
//! side is a pause: the partition is retried after a back-off, its source
//! leader looked up afresh. Matching topics are created in the target with
//! the source's partition count and settings (and more partitions when the
//! source grows), each recording its source (`source.rs`), and looked for
//! again every few seconds; a copy that records another source is never
//! written into.
//!
//! The files: this one holds the arguments, the supervisor (topics, the
//! share, the end) and the scan; `worker.rs` the copying, `share.rs` how
//! mirrors of one name split the partitions (no claim fences them, and
//! none is needed: a mirror append lands only at the copy's end, with the
//! source's bytes for that offset, so two mirrors copying one partition
//! during a handover store it once), `groups.rs` the copied group
//! offsets, `metrics.rs` what it reports.

mod failback;
mod groups;
mod metrics;
mod share;
mod source;
mod worker;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use groups::GroupSync;
use metrics::{render, serve_metrics};
use protocol::client::{Client, ClientError, OffsetSpec};
use protocol::codec::{TopicMetadata, TopicSettings};
use protocol::stored::MessageFormat;
use protocol::ErrorCode;
use share::Share;
use source::{Recorded, Source};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use worker::work;

pub use metrics::status;

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

/// A partition whose source has not answered a read for this long shows
/// lag seconds growing (it is not progressing, whatever it last saw), and
/// its source end is asked for on its own.
const SILENT: Duration = Duration::from_secs(2);

/// The most silent partitions whose source end is asked for in one
/// second.
const SILENT_ASKED_MAX: usize = 20;

/// How often a mirror whose `--topics` matches nothing says so.
const NOTHING_MATCHES_EVERY: Duration = Duration::from_secs(60);

/// How often the source groups' committed offsets are copied.
const GROUPS_EVERY: Duration = Duration::from_secs(1);

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
    /// Prefix of the copies' names: source topic T is copied into PREFIX +
    /// T (e.g. `dc1.`, to mirror several datacenters' topics of the same
    /// names into one cluster). Group offsets copied with --groups go to
    /// the prefixed topics, under the groups' own names.
    #[arg(long, default_value = "")]
    prefix: String,
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
    /// Stop once every partition has been copied up to the source's end as
    /// it was when the mirror first read it (and, with --groups, the
    /// offsets copied once more); exit 0 only when every matching topic
    /// was copied (a refused or stopped one is an error).
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
    /// Log in to the source as this user (SCRAM-SHA-256), with
    /// --from-password-file. Any --from-* flag gives the source its own
    /// security settings (only the --from-* ones); without them it is
    /// reached as the target is (--user, --tls-ca, ...).
    #[arg(long, value_name = "NAME")]
    from_user: Option<String>,
    /// With --from-user: the file whose first line is the password.
    #[arg(long, value_name = "FILE")]
    from_password_file: Option<std::path::PathBuf>,
    /// Reach the source with TLS, trusting the CA certificates in this PEM
    /// file.
    #[arg(long, value_name = "FILE")]
    from_tls_ca: Option<std::path::PathBuf>,
    /// With --from-tls-ca: present this client certificate chain (PEM).
    #[arg(long, value_name = "FILE")]
    from_tls_cert: Option<std::path::PathBuf>,
    /// With --from-tls-cert: its private key (PEM).
    #[arg(long, value_name = "FILE")]
    from_tls_key: Option<std::path::PathBuf>,
    /// With --from-tls-ca: the name to expect in the source brokers'
    /// certificates [default: the host of each address].
    #[arg(long, value_name = "NAME")]
    from_tls_server_name: Option<String>,
    /// Fail back: the target is the datacenter that failed over to the
    /// source. A source topic promoted from a copy of the target's topic
    /// (`mirror promote` there) is copied back into that topic: its writes
    /// made after the copy's end, never mirrored, are saved into
    /// --failback-dir and cut, its groups past the cut reset to it, and the
    /// source's log copied from there, so the two end byte for byte the
    /// same.
    #[arg(long)]
    failback: bool,
    /// With --failback: where the target's writes after each fork are
    /// saved (created if missing).
    #[arg(long, value_name = "DIR", default_value = "ringlog-failback")]
    failback_dir: std::path::PathBuf,
    /// Give up on a broker that took a request and has not answered it
    /// within this many ms (beyond a read's long-poll wait): a paused or
    /// cut-off broker, whose connection no error ends. The partition is
    /// then read from, or written to, whoever leads it now.
    #[arg(long, value_name = "MS", default_value_t = 5_000)]
    request_timeout_ms: u64,
}

impl MirrorArgs {
    /// The target cluster, when --to names it.
    pub fn target(&self) -> Option<&str> {
        self.to.as_deref()
    }

    /// How the source is connected to: with its own --from-* security
    /// settings when any is given, else as the target.
    fn source_connector(&self) -> anyhow::Result<impl Fn(&str) -> anyhow::Result<Client>> {
        let own = self.from_user.is_some()
            || self.from_password_file.is_some()
            || self.from_tls_ca.is_some()
            || self.from_tls_cert.is_some()
            || self.from_tls_key.is_some()
            || self.from_tls_server_name.is_some();
        let settings = if own {
            let tls = super::tls_from(
                &super::TlsFlags {
                    ca: self.from_tls_ca.as_deref(),
                    cert: self.from_tls_cert.as_deref(),
                    key: self.from_tls_key.as_deref(),
                    server_name: self.from_tls_server_name.as_deref(),
                },
                "--from-tls",
            )?;
            let login = super::login_from(
                self.from_user.as_deref(),
                self.from_password_file.as_deref(),
                "--from-user",
                "--from-password-file",
            )?;
            Some((tls, login))
        } else {
            None
        };
        let timeout = Some(self.request_timeout());
        Ok(move |brokers: &str| match &settings {
            Some((tls, login)) => {
                super::connect_timed(brokers, tls.clone(), login.clone(), timeout)
            }
            None => super::connect_timed(brokers, super::tls(), super::own_login(), timeout),
        })
    }

    /// The target's clients: the global security settings, the mirror's
    /// request timeout.
    fn connect_target(&self, brokers: &str) -> anyhow::Result<Client> {
        super::connect_timed(
            brokers,
            super::tls(),
            super::own_login(),
            Some(self.request_timeout()),
        )
    }

    fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms.max(100))
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

/// What the scan found for one source partition: how to copy it.
#[derive(Clone)]
struct Plan {
    /// What the source topic stores (how chunks are cut to whole units).
    format: MessageFormat,
    /// The copy's topic in the target (the source's name, prefixed).
    target: String,
    /// What the copy records as its source, sent with every append.
    source: String,
    /// The source topic's id, sent with every read: the same name created
    /// again answers UNKNOWN_TOPIC_ID instead of another log's bytes.
    topic_id: String,
}

/// One partition's copy.
struct Copy {
    /// Where it is copied to and from.
    plan: Plan,
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
    /// The source's visible end at this run's first answer: what
    /// `--exit-at-end` copies up to at least.
    end_at_start: Option<u64>,
    /// When the source last answered a read of it.
    answered_at: Option<Instant>,
    /// The last failure, until an append is taken.
    last_error: Option<String>,
    /// Stopped for good (this run copies nothing more of it): why.
    stopped: Option<String>,
    /// Its source shard is looked up afresh, not from the cache (a read
    /// there failed: the leader may have moved).
    fresh: bool,
    /// The source epoch of the last chunk this run appended (-1: not
    /// known, after a resume): the next read asks the source to check that
    /// its log still holds that epoch up to the copy's end.
    last_epoch: i32,
    /// Where the copy ends is looked up (and checked against the source)
    /// before the next read: an append failed at the target.
    recheck: bool,
}

impl Copy {
    fn new(plan: Plan) -> Copy {
        Copy {
            plan,
            end_at_start: None,
            answered_at: None,
            last_error: None,
            stopped: None,
            fresh: false,
            last_epoch: -1,
            recheck: false,
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

/// Promotes `topic` in the target and says where each partition stopped:
/// the ends read just before (the mirror stopped), recorded with the
/// promotion as where its history forks from the source's (a failback
/// cuts the source back to them).
pub fn promote(target: &Client, topic: &str) -> anyhow::Result<()> {
    let metadata = target
        .metadata(&[topic])
        .with_context(|| format!("reading {topic}"))?;
    let partitions = metadata.topics.first().map_or(0, |t| t.partitions.len());
    // What each copy holds committed: bytes past it may be lost to a
    // change of leader here, and this cluster's history would fork below
    // the end. Given a moment to cover the end (the mirror is stopped);
    // where it does not, a failback saves a little more than it must.
    let mut ends = Vec::with_capacity(partitions);
    for partition in 0..partitions as u32 {
        let waited = Instant::now();
        loop {
            let (_, offsets) = target
                .list_offsets(topic, partition, OffsetSpec::Latest, 0)
                .with_context(|| format!("reading where {topic}-{partition} ends"))?;
            if offsets.flushed_offset >= offsets.end_offset
                || waited.elapsed() >= Duration::from_secs(10)
            {
                ends.push(offsets.flushed_offset);
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let source = target
        .promote_mirror(topic, &ends)
        .with_context(|| format!("promoting {topic}"))?;
    println!("promoted {topic} (was a mirror of {source}): it takes produces from now on");
    println!("partition\tend_offset");
    for (partition, end) in ends.iter().enumerate() {
        println!("{partition}\t{end}");
    }
    Ok(())
}

/// Copies the matching topics until stopped (or, with --exit-at-end, until
/// every partition is at the source's end).
pub fn run(args: MirrorArgs, target_brokers: &str) -> anyhow::Result<()> {
    let target = args.connect_target(target_brokers)?;
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
    let connect_source = args.source_connector()?;
    let label = args.name.clone().unwrap_or_else(|| from.clone());
    if label.contains(" (cluster ") || label.chars().any(char::is_control) {
        bail!("--name {label:?}: a mirror's name holds no control characters nor \" (cluster \"");
    }
    let source = connect_source(&from).context("the source (--from)")?;
    // Two clusters, told apart by their ids: a mirror from a cluster into
    // itself would append every topic's log to itself.
    let cluster_id = |client: &Client, side: &str| -> anyhow::Result<String> {
        let id = client
            .metadata(&[])
            .with_context(|| format!("reading the {side} cluster's metadata"))?
            .cluster_id;
        if id.is_empty() {
            bail!("the {side} cluster's brokers do not say their cluster id (older than this ringlog): upgrade them before mirroring");
        }
        Ok(id)
    };
    let source_cluster = cluster_id(&source, "source")?;
    let target_cluster = cluster_id(&target, "target")?;
    if source_cluster == target_cluster {
        bail!("--from {from} and the target {target_brokers} are the same cluster (id {source_cluster}): a mirror copies one cluster into another");
    }
    // Workers: a source and a target client each (their own connections).
    let mut workers = Vec::new();
    for _ in 0..args.workers.max(1) {
        workers.push((connect_source(&from)?, args.connect_target(target_brokers)?));
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
        cluster_id: &source_cluster,
        target_cluster: &target_cluster,
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
        self.retry(key, error, false);
    }

    /// [`Copies::retry_later`] after the target failed an append: where
    /// the copy ends is looked up again too (deleted and made again in
    /// the target, say), and checked against the source.
    fn retry_later_at_target(&self, key: &(String, u32), error: &ClientError) {
        self.retry(key, error, true);
    }

    fn retry(&self, key: &(String, u32), error: &ClientError, copy_unknown: bool) {
        eprintln!("warning: {}-{}: {error}; retrying", key.0, key.1);
        self.update(key, |copy| {
            copy.retry_at = Instant::now() + PAUSE;
            copy.at_end = false;
            copy.errors += 1;
            copy.owner = None;
            // Its leader may have moved: the supervisor's cached placement
            // is not trusted for it again.
            copy.fresh = true;
            if copy_unknown {
                copy.recheck = true;
            }
            copy.last_error = Some(error.to_string());
        });
    }

    /// Stops one partition's copy for good (this run copies nothing more
    /// of it), saying why; the others go on.
    fn stop_one(&self, key: &(String, u32), why: String) {
        eprintln!("error: {}-{}: {why}; this partition stops", key.0, key.1);
        self.update(key, |copy| {
            copy.stopped = Some(why);
            copy.errors += 1;
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
    /// The source cluster's id.
    cluster_id: &'a str,
    /// The target cluster's id (a failback's copies were promoted from it).
    target_cluster: &'a str,
    metrics: Option<&'a std::sync::Arc<Mutex<String>>>,
    workers: usize,
}

impl Supervisor<'_> {
    #[expect(
        clippy::too_many_lines,
        reason = "the supervisor's tick in order: failures, metrics, groups, the scan and what it refused, the share, the end"
    )]
    fn run(&self, copies: &Copies) -> anyhow::Result<()> {
        let mut scanned: Option<Instant> = None;
        let mut synced = GroupSync::default();
        let mut rendered: Option<Instant> = None;
        let mut share = Share::new(self.label);
        // Matching source topics the mirror does not copy, and why (said
        // once each, kept in the metrics).
        let mut refused: BTreeMap<String, String> = BTreeMap::new();
        let mut nothing_said: Option<Instant> = None;
        // How many source topics the last scan matched.
        let mut matched = 0;
        let mut ends_asked: Option<Instant> = None;
        // Topics failed back by this run (each is prepared once).
        let mut failed_back = std::collections::BTreeSet::new();
        loop {
            if let Some(error) = copies.failure.lock().ok().and_then(|mut f| f.take()) {
                return Err(error);
            }
            if let Some(text) = self.metrics {
                if rendered.is_none_or(|at| at.elapsed() >= Duration::from_millis(500)) {
                    let body = render(&copies.lock(), synced.copied_total, &refused, matched);
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
                let sides = Sides {
                    source: self.source,
                    target: self.target,
                    source_cluster: self.cluster_id,
                    target_cluster: self.target_cluster,
                };
                match scan(
                    self.args,
                    &sides,
                    self.pattern,
                    self.label,
                    &mut failed_back,
                ) {
                    Ok(found) => {
                        scanned = Some(Instant::now());
                        matched = found.matched;
                        self.apply_scan(copies, found, &mut refused, &mut nothing_said)?;
                    }
                    Err(error) if scanned.is_some() => {
                        eprintln!("warning: listing the topics again: {error:#}");
                        scanned = Some(Instant::now());
                    }
                    Err(error) => return Err(error),
                }
            }
            if ends_asked.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
                ends_asked = Some(Instant::now());
                self.ask_silent_ends(copies);
            }
            let mut topics: Vec<String> = copies
                .lock()
                .values()
                .map(|c| c.plan.target.clone())
                .collect();
            topics.sort();
            topics.dedup();
            share.beat(self.target, topics);
            self.deal(copies, &share);
            let stopped: Vec<String> = copies
                .lock()
                .iter()
                .filter_map(|((t, p), c)| Some(format!("{t}-{p}: {}", c.stopped.as_ref()?)))
                .collect();
            let copying = copies.lock().values().any(|c| c.stopped.is_none());
            if scanned.is_some() && !copying && !(refused.is_empty() && stopped.is_empty()) {
                share.leave(self.target);
                bail!("nothing left to copy:\n  {}", not_copied(&refused, stopped));
            }
            if self.args.exit_at_end && share.decided() {
                let map = copies.lock();
                let done = !map.is_empty()
                    && map.values().all(|c| {
                        !c.mine
                            || c.stopped.is_some()
                            || (c.at_end
                                && c.end_at_start
                                    .is_some_and(|end| c.position.is_some_and(|p| p >= end)))
                    });
                drop(map);
                if done {
                    if let Some(pattern) = self.groups {
                        synced.run(self.source, self.target, pattern, &positions(copies))?;
                    }
                    share.leave(self.target);
                    println!("{}", copies.summary());
                    if !refused.is_empty() || !stopped.is_empty() {
                        bail!(
                            "not every matching topic was copied:\n  {}",
                            not_copied(&refused, stopped)
                        );
                    }
                    return Ok(());
                }
            }
            std::thread::sleep(TICK);
        }
    }

    /// Takes in what a scan found: new partitions to copy, topics refused
    /// (their copies dropped from this run, said once), topics gone from
    /// the source. A `--topics` that matches nothing is an error with
    /// `--exit-at-end`, and a warning once a minute without.
    fn apply_scan(
        &self,
        copies: &Copies,
        found: Scanned,
        refused: &mut BTreeMap<String, String>,
        nothing_said: &mut Option<Instant>,
    ) -> anyhow::Result<()> {
        if found.matched == 0 {
            if self.args.exit_at_end {
                bail!(
                    "--topics {:?} matches none of the source's {} topics: nothing to copy (a topic the source login may not read or describe is not listed)",
                    self.args.topics,
                    found.listed
                );
            }
            if nothing_said.is_none_or(|at| at.elapsed() >= NOTHING_MATCHES_EVERY) {
                eprintln!(
                    "warning: --topics {:?} matches none of the source's {} topics; looking again every {} s",
                    self.args.topics,
                    found.listed,
                    SCAN_EVERY.as_secs()
                );
                *nothing_said = Some(Instant::now());
            }
        }
        let mut map = copies.lock();
        for (topic, why) in &found.refused {
            if refused.get(topic) != Some(why) {
                eprintln!("error: not mirroring {topic}: {why}");
            }
        }
        *refused = found.refused;
        // Copies of refused topics, or of topics the source no longer
        // has, stop here: each keeps what it holds.
        let listed: std::collections::BTreeSet<&str> =
            found.partitions.iter().map(|(k, _)| k.0.as_str()).collect();
        map.retain(|(topic, partition), c| {
            let keep = listed.contains(topic.as_str()) || c.stopped.is_some();
            if !keep && !refused.contains_key(topic) {
                eprintln!(
                    "{topic}-{partition}: the source topic is gone; its copy keeps what it has"
                );
            }
            keep && !refused.contains_key(topic)
        });
        for (key, plan) in found.partitions {
            map.entry(key).or_insert_with(|| Copy::new(plan));
        }
        Ok(())
    }

    /// Asks the source for the end of each of this mirror's partitions it
    /// has not heard from for a while (a dead leader, a stalled read), so
    /// that their lag is counted against where the source is now, not
    /// where it was when the copy last heard of it.
    fn ask_silent_ends(&self, copies: &Copies) {
        let silent: Vec<(String, u32)> = copies
            .lock()
            .iter()
            .filter(|(_, c)| {
                c.mine
                    && c.stopped.is_none()
                    && c.answered_at.is_none_or(|at| at.elapsed() >= SILENT)
            })
            .map(|(key, _)| key.clone())
            .take(SILENT_ASKED_MAX)
            .collect();
        for key in silent {
            // The first that does not answer ends the round: a source
            // broker away must not hold up the supervisor's heartbeats.
            let Ok((end, _)) = self
                .source
                .list_offsets(&key.0, key.1, OffsetSpec::Latest, 0)
            else {
                break;
            };
            copies.update(&key, |c| {
                c.source_end = c.source_end.max(end);
                if c.position.is_some_and(|p| p < end) {
                    c.behind_since.get_or_insert_with(Instant::now);
                }
            });
        }
    }

    /// Marks this mirror's partitions and deals them to the workers by the
    /// source shard that serves them: with at least as many workers as
    /// shards, each worker reads one shard only (in one long-polling
    /// MultiFetch for all its partitions there), and a shard's partitions
    /// are spread over the workers it has; with fewer, a worker reads
    /// several shards.
    fn deal(&self, copies: &Copies, share: &Share) {
        let unplaced: Vec<((String, u32), bool)> = copies
            .lock()
            .iter()
            .filter(|(key, c)| c.owner.is_none() && share.mine(&c.plan.target, key.1))
            .map(|(key, c)| (key.clone(), c.fresh))
            .collect();
        for (key, fresh) in unplaced {
            // Not placed now (the broker is away): tried again next tick.
            if let Ok(address) = self.source.shard_address(&key.0, key.1, fresh) {
                copies.update(&key, |c| {
                    c.owner = Some(address);
                    c.fresh = false;
                });
            }
        }
        let mut map = copies.lock();
        let mut by_shard: BTreeMap<String, Vec<&mut Copy>> = BTreeMap::new();
        for (key, copy) in map.iter_mut() {
            if copy.stopped.is_some() {
                continue;
            }
            copy.mine = share.mine(&copy.plan.target, key.1);
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

/// The refused topics and the stopped partitions, a line each, with why.
fn not_copied(refused: &BTreeMap<String, String>, stopped: Vec<String>) -> String {
    refused
        .iter()
        .map(|(t, why)| format!("{t}: {why}"))
        .chain(stopped)
        .collect::<Vec<_>>()
        .join("\n  ")
}

/// Where each copy stands, by source partition, with the copy's topic:
/// the group offsets' bound and where they are committed.
fn positions(copies: &Copies) -> BTreeMap<(String, u32), (u64, String)> {
    copies
        .lock()
        .iter()
        .filter_map(|(key, c)| Some((key.clone(), (c.position?, c.plan.target.clone()))))
        .collect()
}

/// A failure the mirror rides out: a broker away or busy.
fn passes(error: &ClientError) -> bool {
    error.is_retriable() || error.is_connection_error()
}

/// What one look at the source found.
struct Scanned {
    /// Every partition to copy, with how.
    partitions: Vec<((String, u32), Plan)>,
    /// Matching topics not copied, and why.
    refused: BTreeMap<String, String>,
    /// How many source topics `--topics` matched, of how many listed.
    matched: usize,
    listed: usize,
}

/// The two clusters a scan looks at.
struct Sides<'a> {
    source: &'a Client,
    target: &'a Client,
    source_cluster: &'a str,
    target_cluster: &'a str,
}

/// Creates the target topics the source has and the target lacks (and the
/// partitions a source topic gained), each recording its source; refuses
/// a matching topic whose name in the target is taken by anything but
/// this source's copy; with --failback, prepares each topic the source
/// promoted from a copy of the target's (`failback.rs`) once
/// (`failed_back`); returns every partition to copy.
#[expect(
    clippy::too_many_lines,
    reason = "one source topic at a time: its name in the target, what is there, a failback, the plan"
)]
fn scan(
    args: &MirrorArgs,
    sides: &Sides<'_>,
    pattern: &regex::Regex,
    label: &str,
    failed_back: &mut std::collections::BTreeSet<String>,
) -> anyhow::Result<Scanned> {
    let (source, target, cluster_id) = (sides.source, sides.target, sides.source_cluster);
    let listed = source
        .metadata(&[])
        .context("listing the source's topics")?;
    let mut found = Scanned {
        partitions: Vec::new(),
        refused: BTreeMap::new(),
        matched: 0,
        listed: listed.topics.len(),
    };
    for topic in listed.topics.iter().filter(|t| pattern.is_match(&t.name)) {
        found.matched += 1;
        let count = topic.partitions.len() as u32;
        // A failback copies a promoted copy back into the topic it came
        // from, whatever --prefix says.
        let was = args
            .failback
            .then(|| failback::promoted_from(topic, sides.target_cluster))
            .flatten();
        let name = match &was {
            Some(was) => was.topic.clone(),
            None => format!("{}{}", args.prefix, topic.name),
        };
        let ours = Source {
            mirror: label.to_string(),
            topic: topic.name.clone(),
            cluster_id: cluster_id.to_string(),
            topic_id: topic.id.clone(),
        };
        let existing = target.metadata(&[name.as_str()]);
        let existing = match existing {
            Ok(m) => m.topics.into_iter().find(|t| t.name == name),
            Err(e) if e.code() == Some(ErrorCode::UnknownTopic) => None,
            Err(e) => return Err(e).with_context(|| format!("reading {name} in the target")),
        };
        let mut recorded = ours.to_string();
        match existing {
            None => {
                let created =
                    target.create_mirror_topic(&name, count, &settings(args, topic), &recorded);
                match created {
                    Ok(_) => println!(
                        "created {name} in the target ({count} partitions, the copy of {ours})"
                    ),
                    // Another mirror of the name created it a moment ago:
                    // the next scan looks at what it records.
                    Err(e) if e.code() == Some(ErrorCode::TopicAlreadyExists) => continue,
                    Err(e) => {
                        return Err(e).with_context(|| format!("creating {name} in the target"))
                    }
                }
            }
            Some(t) => {
                let recorded_there = Recorded::parse(&t.mirror_source);
                // Prepared once per run: an ordinary topic (the old
                // source, written to while it was cut off), or one this
                // failback made a copy already (a run killed midway).
                let ordinary = matches!(recorded_there, Recorded::Ordinary);
                let fail_back = was.as_ref().filter(|_| {
                    (ordinary && !failed_back.contains(&name))
                        || recorded_there == Recorded::Source(ours.clone())
                });
                let failing_back = fail_back.is_some();
                if let Some(was) = fail_back {
                    if !failed_back.contains(&name) {
                        let prepared = failback::prepare(
                            source,
                            target,
                            topic,
                            &name,
                            &t,
                            was,
                            &ours,
                            &args.failback_dir,
                        )?;
                        if let Err(why) = prepared {
                            found.refused.insert(topic.name.clone(), why);
                            continue;
                        }
                        failed_back.insert(name.clone());
                    }
                } else if let Some(why) = ours.refuses(&name, &recorded_there) {
                    found.refused.insert(topic.name.clone(), why);
                    continue;
                }
                // A copy from before the ids: its appends name what it
                // records, which is all the broker compares. (A failback's
                // records this mirror's source now.)
                if !failing_back {
                    recorded = t.mirror_source.clone();
                }
                if !failing_back {
                    follow_settings(args, target, topic, &t);
                }
                if (t.partitions.len() as u32) < count {
                    target
                        .create_partitions(&name, count)
                        .with_context(|| format!("adding partitions to {name} in the target"))?;
                    println!(
                        "{name}: {} -> {count} partitions in the target",
                        t.partitions.len()
                    );
                }
            }
        }
        let plan = Plan {
            format: MessageFormat::from_number(topic.settings.message_format).unwrap_or_default(),
            target: name,
            source: recorded,
            topic_id: topic.id.clone(),
        };
        found
            .partitions
            .extend((0..count).map(|p| ((topic.name.clone(), p), plan.clone())));
    }
    Ok(found)
}

/// Changes a copy's settings that differ from its source's (a source
/// topic altered at run time), but for those the mirror's own options
/// override: the copy keeps the source's retention, segment and flush
/// policy as they change, as it got them at creation.
fn follow_settings(
    args: &MirrorArgs,
    target: &Client,
    source: &TopicMetadata,
    copy: &TopicMetadata,
) {
    use protocol::codec::topic_config::Alterable;
    let wanted = settings(args, source);
    let changes: Vec<(&str, String)> = Alterable::ALL
        .into_iter()
        .filter(|s| *s != Alterable::MinInsyncReplicas)
        .filter(|s| s.get(&wanted) != 0 && s.get(&wanted) != s.get(&copy.settings))
        .map(|s| (s.name(), s.get(&wanted).to_string()))
        .collect();
    if changes.is_empty() {
        return;
    }
    let set: Vec<(&str, &str)> = changes.iter().map(|(n, v)| (*n, v.as_str())).collect();
    let said: Vec<String> = changes.iter().map(|(n, v)| format!("{n}={v}")).collect();
    match target.alter_topic_config(&copy.name, &set, &[]) {
        Ok(_) => println!(
            "{}: settings follow the source's: {}",
            copy.name,
            said.join(",")
        ),
        Err(error) => eprintln!(
            "ringlog: warning: {}: the source's settings {} could not be applied to the copy: {error}",
            copy.name,
            said.join(",")
        ),
    }
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
