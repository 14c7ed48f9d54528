//! `ringlog`: the operator's and developer's command line (topics, produce,
//! consume, offsets, consumer groups, brokers). Every failure is one line on
//! stderr and exit code 1; usage errors exit 2 (clap's convention).

use anyhow::{anyhow, bail, Context};
use clap::{Args, Parser, Subcommand, ValueEnum};
use protocol::batch::Compression;
use protocol::client::{
    AckMode, Client, ClientConfig, Consumer, Extras, GroupConfig, GroupConsumer, OffsetCommit,
    OffsetSpec, Producer, ProducerConfig, StartFrom, TopicSettings,
};
use std::io::{BufRead, Write};
use std::time::Duration;

mod mirror;
mod operations;
mod orphans;
mod quotas;
mod security;
mod verify;

#[derive(Parser, Debug)]
#[command(
    name = "ringlog",
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("RINGLOG_GIT_REVISION"), ")"),
    about = "Operate ringlog brokers: topics, produce, consume, offsets, consumer groups"
)]
struct Cli {
    /// Broker addresses, comma-separated.
    #[arg(
        long,
        env = "RINGLOG_BROKERS",
        default_value = "127.0.0.1:9092",
        global = true
    )]
    brokers: String,
    /// Connect with TLS, trusting the CA certificates in this PEM file.
    #[arg(long, env = "RINGLOG_TLS_CA", value_name = "FILE", global = true)]
    tls_ca: Option<std::path::PathBuf>,
    /// With --tls-ca: present this client certificate chain (PEM).
    #[arg(long, env = "RINGLOG_TLS_CERT", value_name = "FILE", global = true)]
    tls_cert: Option<std::path::PathBuf>,
    /// With --tls-cert: its private key (PEM).
    #[arg(long, env = "RINGLOG_TLS_KEY", value_name = "FILE", global = true)]
    tls_key: Option<std::path::PathBuf>,
    /// With --tls-ca: the name to expect in the broker's certificate
    /// [default: the host of each address].
    #[arg(long, value_name = "NAME", global = true)]
    tls_server_name: Option<String>,
    /// Log in as this user (SCRAM-SHA-256), with --password-file.
    #[arg(long, env = "RINGLOG_USER", value_name = "NAME", global = true)]
    user: Option<String>,
    /// With --user: the file whose first line is the password (never the
    /// password itself on the command line).
    #[arg(
        long,
        env = "RINGLOG_PASSWORD_FILE",
        value_name = "FILE",
        global = true
    )]
    password_file: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// The login of this run, read once from --user and --password-file.
static LOGIN: std::sync::OnceLock<Option<protocol::client::Login>> = std::sync::OnceLock::new();

fn login(cli: &Cli) -> anyhow::Result<Option<protocol::client::Login>> {
    login_from(
        cli.user.as_deref(),
        cli.password_file.as_deref(),
        "--user",
        "--password-file",
    )
}

/// A login from a user flag and a password-file flag (named `user_flag`
/// and `file_flag` in errors): both or neither.
fn login_from(
    user: Option<&str>,
    file: Option<&std::path::Path>,
    user_flag: &str,
    file_flag: &str,
) -> anyhow::Result<Option<protocol::client::Login>> {
    match (user, file) {
        (None, None) => Ok(None),
        (Some(user), Some(file)) => {
            protocol::scram::check_user(user).context(user_flag.to_string())?;
            Ok(Some(protocol::client::Login {
                user: user.to_string(),
                password: security::read_password(file)?,
            }))
        }
        (Some(_), None) => bail!(
            "{user_flag} needs {file_flag} FILE: a password is never taken from the command line"
        ),
        (None, Some(_)) => bail!("{file_flag} needs {user_flag} NAME"),
    }
}

/// The TLS settings of this run, read once from the flags: every command
/// connects through `connect`, which takes them from here.
static TLS: std::sync::OnceLock<Option<protocol::client::TlsConfig>> = std::sync::OnceLock::new();

/// The error and its causes on one line, each cause once: client errors
/// already name their cause, which the chain would repeat.
fn describe(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
    }
    line
}

fn tls_config(cli: &Cli) -> anyhow::Result<Option<protocol::client::TlsConfig>> {
    tls_from(
        &TlsFlags {
            ca: cli.tls_ca.as_deref(),
            cert: cli.tls_cert.as_deref(),
            key: cli.tls_key.as_deref(),
            server_name: cli.tls_server_name.as_deref(),
        },
        "--tls",
    )
}

/// One side's TLS flags, as given.
pub struct TlsFlags<'a> {
    pub ca: Option<&'a std::path::Path>,
    pub cert: Option<&'a std::path::Path>,
    pub key: Option<&'a std::path::Path>,
    pub server_name: Option<&'a str>,
}

/// TLS settings from one side's flags (`prefix`-ca, -cert, -key,
/// -server-name in errors); `None` without a CA.
fn tls_from(
    flags: &TlsFlags<'_>,
    prefix: &str,
) -> anyhow::Result<Option<protocol::client::TlsConfig>> {
    let Some(ca) = flags.ca else {
        if flags.cert.is_some() || flags.key.is_some() || flags.server_name.is_some() {
            bail!("{prefix}-cert, {prefix}-key and {prefix}-server-name need {prefix}-ca (the CA that signed the broker's certificate)");
        }
        return Ok(None);
    };
    let mut tls = protocol::client::TlsConfig::new(ca).with_context(|| format!("{prefix}-ca"))?;
    match (flags.cert, flags.key) {
        (Some(cert), Some(key)) => {
            tls = tls
                .with_client_certificate(cert, key)
                .with_context(|| format!("{prefix}-cert/{prefix}-key"))?;
        }
        (None, None) => {}
        _ => bail!("{prefix}-cert and {prefix}-key go together"),
    }
    if let Some(name) = flags.server_name {
        tls = tls
            .with_server_name(name)
            .with_context(|| format!("{prefix}-server-name"))?;
    }
    Ok(Some(tls))
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create, list, describe or delete topics.
    #[command(subcommand)]
    Topic(TopicCommand),
    /// Send one message per stdin line.
    Produce(ProduceArgs),
    /// Print one payload per line.
    Consume(ConsumeArgs),
    /// Look up an offset of a partition.
    Offsets(OffsetsArgs),
    /// List, describe or reset consumer groups (cluster only).
    #[command(subcommand)]
    Groups(GroupsCommand),
    /// The live brokers and their shard addresses; decommission one.
    Brokers {
        #[command(subcommand)]
        command: Option<BrokersCommand>,
    },
    /// Partitions' leaders, replicas and in-sync replicas; elections and
    /// moves.
    #[command(args_conflicts_with_subcommands = true)]
    Partitions {
        #[command(subcommand)]
        command: Option<PartitionsCommand>,
        #[command(flatten)]
        args: PartitionsArgs,
    },
    /// Users who may log in (SCRAM-SHA-256): add, remove, list.
    #[command(subcommand)]
    Users(security::UsersCommand),
    /// Access control rules: who may do what to which topic, group or the
    /// cluster.
    #[command(subcommand)]
    Acl(security::AclCommand),
    /// Principals' quotas at run time: set, delete, list.
    #[command(subcommand)]
    Quotas(quotas::QuotasCommand),
    /// Prove a topic's copies hold the same bytes (its replicas, or with
    /// --against another cluster's copy), without moving them: prints,
    /// per partition, the range compared and the first offset where two
    /// copies differ.
    Verify(verify::VerifyArgs),
    /// Copy topics from another cluster at the same offsets (runs until
    /// stopped); promote a mirrored topic.
    #[command(args_conflicts_with_subcommands = true)]
    Mirror {
        #[command(subcommand)]
        command: Option<mirror::MirrorCommand>,
        #[command(flatten)]
        args: mirror::MirrorArgs,
    },
}

#[derive(Subcommand, Debug)]
enum BrokersCommand {
    /// The live brokers and their shard addresses (the default).
    List,
    /// Move every copy a broker holds to the other live brokers, and wait
    /// until they are in sync there; then the broker can be stopped.
    Decommission {
        /// The broker.
        broker: u32,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// A broker's addresses, and what it keeps in its data directory's
    /// .orphaned/ (partition directories moved aside instead of deleted),
    /// with why and when.
    Describe {
        /// The broker.
        broker: u32,
    },
    /// Delete what a broker moved aside into .orphaned/ at least AGE ago
    /// (a broker never deletes it on its own).
    PurgeOrphaned {
        /// The broker.
        broker: u32,
        /// An age: 7d, 12h, 30m, 0s.
        #[arg(long, value_name = "AGE")]
        older_than: String,
    },
}

#[derive(Args, Debug)]
struct WaitArgs {
    /// Answer once the change has begun; do not wait for it.
    #[arg(long)]
    no_wait: bool,
    /// Give up waiting after this many seconds (the change goes on).
    #[arg(long, default_value_t = 600)]
    timeout_s: u64,
}

impl WaitArgs {
    fn wait(&self) -> Option<Duration> {
        (!self.no_wait).then(|| Duration::from_secs(self.timeout_s))
    }
}

#[derive(Subcommand, Debug)]
enum PartitionsCommand {
    /// Give each partition back to its preferred replica (the first in its
    /// replica list) where that one is in sync: the leader hands over once
    /// it has caught up, so nothing acknowledged is lost.
    ElectLeaders {
        /// Only these topics (default: every topic).
        topics: Vec<String>,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// A leader for an offline partition (its leader and every in-sync
    /// replica gone). Refused unless --unclean: that elects a replica that
    /// is not in sync, and what only the lost ones held is lost.
    Elect {
        /// The topic.
        topic: String,
        /// The partition.
        #[arg(long)]
        partition: u32,
        /// Elect a replica that is not in sync (data loss; the warning
        /// says how much at least).
        #[arg(long)]
        unclean: bool,
        /// Elect this broker [default: the live replica whose copy ends
        /// last].
        #[arg(long)]
        broker: Option<u32>,
    },
    /// Move a partition's copies to these brokers (the preferred leader
    /// first): new copies catch up and join the in-sync replicas, then the
    /// old ones leave and delete their data. Also raises or lowers the
    /// replication factor.
    Reassign {
        /// The topic.
        topic: String,
        /// The partition.
        #[arg(long)]
        partition: u32,
        /// The brokers, comma-separated, e.g. 1,2,3.
        #[arg(long, value_parser = operations::parse_ids)]
        replicas: std::vec::Vec<u32>,
        #[command(flatten)]
        wait: WaitArgs,
    },
}

#[derive(Args, Debug)]
struct PartitionsArgs {
    /// Only these topics (default: every topic).
    topics: Vec<String>,
    /// Only partitions with fewer replicas in sync than they have.
    #[arg(long)]
    under_replicated: bool,
    /// Only partitions whose leader is not live.
    #[arg(long)]
    offline: bool,
}

#[derive(Subcommand, Debug)]
enum GroupsCommand {
    /// Every group with a live member or a committed offset.
    List,
    /// Members, owned partitions, committed offsets, log end and lag.
    Describe {
        /// Group name.
        group: String,
    },
    /// Set a group's committed offsets (refused while it has live members).
    ResetOffsets {
        /// Group name.
        group: String,
        /// The topic whose partitions to reset.
        #[arg(long)]
        topic: String,
        /// earliest, latest, an OFFSET, or @UNIX_MS.
        #[arg(long)]
        to: String,
        /// Only this partition (default: all).
        #[arg(long)]
        partition: Option<u32>,
    },
}

#[derive(Subcommand, Debug)]
enum TopicCommand {
    /// Create a topic.
    Create {
        /// Topic name: 1-249 of [A-Za-z0-9._-].
        name: String,
        /// Number of partitions.
        #[arg(long, default_value_t = 1)]
        partitions: u32,
        /// Delete closed segments older than this (0 = broker default).
        #[arg(long, default_value_t = 0)]
        retention_ms: u64,
        /// Keep each partition under this many bytes (0 = broker default).
        #[arg(long, default_value_t = 0)]
        retention_bytes: u64,
        /// Segment size (0 = broker default).
        #[arg(long, default_value_t = 0)]
        segment_bytes: u64,
        /// Flush after this many messages (0 = broker default).
        #[arg(long, default_value_t = 0)]
        flush_messages: u64,
        /// Flush this long after the oldest unflushed message (0 = broker default).
        #[arg(long, default_value_t = 0)]
        flush_interval_ms: u64,
        /// Copies of each partition, on as many brokers (0 = broker default,
        /// `default_replication_factor`).
        #[arg(long, default_value_t = 0)]
        replication_factor: u32,
        /// Fewest in-sync replicas acks=all accepts (0 = broker default).
        #[arg(long, default_value_t = 0)]
        min_insync_replicas: u32,
        /// Replicated: acks=all is answered, and consumers see messages,
        /// once every in-sync replica has written them, without waiting for
        /// their flushes (Kafka's acks=all). Survives process crashes, not
        /// a power loss of every replica at once.
        #[arg(long)]
        write_caching: bool,
        /// What the topic stores, fixed for its life: 1, the paper's
        /// messages (9 bytes each beyond the payload); 2, Kafka's record
        /// batches v2 at byte offsets, with each message's time and
        /// headers, compression, and exact offsets by time (0 = the
        /// broker's default, 1).
        #[arg(long, default_value_t = 0)]
        message_format: u32,
        /// Format 2: whose time each message carries, CreateTime (the
        /// producer's, the default) or LogAppendTime (the broker's, when it
        /// appends the batch).
        #[arg(long, value_parser = parse_timestamp_type)]
        timestamp_type: Option<u32>,
    },
    /// List topics.
    List,
    /// Show a topic's partitions, owners, offsets and settings.
    Describe {
        /// Topic name.
        name: String,
    },
    /// Delete a topic and all its data.
    Delete {
        /// Topic name.
        name: String,
    },
    /// Raise a topic's partition count (never lowers it; the new
    /// partitions start empty, keyed messages of a key may go to another
    /// partition from then on, producers and groups take them up by
    /// themselves), or change its settings while it runs (every broker
    /// applies them within a second or two; retention at its next sweep).
    #[command(group(clap::ArgGroup::new("change").required(true).multiple(true).args(["partitions", "config", "delete_config"])))]
    Alter {
        /// Topic name.
        name: String,
        /// The new partition count.
        #[arg(long)]
        partitions: Option<u32>,
        /// Settings to override, NAME=VALUE separated by commas:
        /// retention.ms, retention.bytes (-1: no limit), segment.bytes,
        /// flush.messages, flush.ms, min.insync.replicas.
        #[arg(long, value_delimiter = ',')]
        config: Vec<String>,
        /// Settings to return to the broker's default, by name, separated
        /// by commas.
        #[arg(long, value_delimiter = ',')]
        delete_config: Vec<String>,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Acks {
    /// Fire and forget (the paper's mode).
    None,
    /// Written to the broker's page cache.
    Written,
    /// Flushed to disk by the leader (on a replicated topic, consumers see
    /// it once every in-sync replica has it).
    Flushed,
    /// Flushed by every in-sync replica, then visible to consumers (as
    /// flushed on one copy).
    All,
}

#[derive(Args, Debug)]
struct ProduceArgs {
    /// Topic.
    topic: String,
    /// Send every message to this partition (default: by key hash, or random).
    #[arg(long)]
    partition: Option<u32>,
    /// Split each line at the first occurrence of this character into key and value.
    #[arg(long, value_name = "C")]
    key_separator: Option<char>,
    /// Acknowledgement to wait for before exiting 0.
    #[arg(long, value_enum, default_value = "flushed")]
    acks: Acks,
    /// How long a batch is resent through broker restarts and leader
    /// changes before it counts as undelivered (from its first message).
    #[arg(long, value_name = "MS", default_value_t = 120_000)]
    delivery_timeout_ms: u64,
    /// Compress each batch (topics of message format 2): none, gzip,
    /// snappy, lz4 or zstd. A batch that would not shrink goes as it is.
    #[arg(long, value_enum, default_value = "none")]
    compression: Codec,
    /// A header on every message, KEY=VALUE (KEY alone: no value); may be
    /// given again (topics of message format 2).
    #[arg(long = "header", value_name = "KEY=VALUE")]
    headers: Vec<String>,
}

/// `produce --compression`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum Codec {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl From<Codec> for Compression {
    fn from(codec: Codec) -> Compression {
        match codec {
            Codec::None => Compression::None,
            Codec::Gzip => Compression::Gzip,
            Codec::Snappy => Compression::Snappy,
            Codec::Lz4 => Compression::Lz4,
            Codec::Zstd => Compression::Zstd,
        }
    }
}

/// `produce --header KEY=VALUE` (KEY alone: a header without value).
fn headers(given: &[String]) -> Vec<(&str, Option<&[u8]>)> {
    given
        .iter()
        .map(|h| match h.split_once('=') {
            Some((k, v)) => (k, Some(v.as_bytes())),
            None => (h.as_str(), None),
        })
        .collect()
}

#[derive(Args, Debug)]
struct ConsumeArgs {
    /// Topic.
    topic: String,
    /// Only this partition (default: all).
    #[arg(long)]
    partition: Option<u32>,
    /// earliest, latest, an OFFSET (with --partition), or @UNIX_MS: from the
    /// first message of that time or later (message format 2), or from the
    /// first segment appended to at or after it (format 1: segment
    /// granularity, as in the paper, so somewhat older messages may come
    /// first).
    #[arg(long, default_value = "earliest")]
    from: String,
    /// Stop after this many messages.
    #[arg(long)]
    count: Option<u64>,
    /// Stop once every partition is read to its flushed end.
    #[arg(long)]
    exit_at_end: bool,
    /// Prefix each line with PARTITION:OFFSET and a tab.
    #[arg(long)]
    print_offsets: bool,
    /// Then each message's time (ms since the Unix epoch; `-` for the
    /// paper's messages, which carry none) and a tab.
    #[arg(long)]
    print_timestamps: bool,
    /// Then each message's headers, KEY=VALUE joined by commas (a header
    /// without value prints its key alone), and a tab.
    #[arg(long)]
    print_headers: bool,
    /// Print each message's key before its payload, separated by this
    /// character (as `produce --key-separator` reads them); unkeyed
    /// messages print an empty key.
    #[arg(long, value_name = "C")]
    print_keys: Option<char>,
    /// Bytes per fetch.
    #[arg(long, default_value_t = 256 * 1024)]
    max_bytes: u32,
    /// On a damaged message (a CRC error from a damaged disk), skip to the
    /// next valid message and say how many bytes were skipped, instead of
    /// stopping.
    #[arg(long)]
    skip_damaged: bool,
    /// Consume as a member of this consumer group (cluster only): the
    /// group's partitions are divided among its members, and what was
    /// printed is committed every --commit-interval-ms and on exit. --from
    /// (earliest or latest) then applies only to partitions without a
    /// committed offset.
    #[arg(long)]
    group: Option<String>,
    /// With --group: a member that stops heartbeating (it died) leaves the
    /// group this long after its last heartbeat.
    #[arg(long, default_value_t = 10_000)]
    session_timeout_ms: u64,
    /// With --group: how often the printed positions are committed (a
    /// killed member's successor prints at most this much again).
    #[arg(long, default_value_t = 1_000)]
    commit_interval_ms: u64,
}

#[derive(Args, Debug)]
struct OffsetsArgs {
    /// Topic.
    topic: String,
    /// Partition.
    #[arg(long, default_value_t = 0)]
    partition: u32,
    /// earliest, latest, or UNIX_MS.
    #[arg(long, default_value = "latest")]
    before: String,
}

fn main() {
    // `ringlog topic list | head -1`: a closed pipe ends the program
    // quietly, as it does `cat`, instead of a panic with a backtrace.
    // SAFETY: restoring the default disposition of a signal at start, before
    // any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    if let Err(error) = run(cli) {
        eprintln!("ringlog: error: {}", describe(&error));
        std::process::exit(1);
    }
}

fn connect(brokers: &str) -> anyhow::Result<Client> {
    connect_as(brokers, tls(), own_login())
}

/// The TLS settings of the global flags.
fn tls() -> Option<protocol::client::TlsConfig> {
    TLS.get().cloned().flatten()
}

/// The login of the global flags.
fn own_login() -> Option<protocol::client::Login> {
    LOGIN.get().cloned().flatten()
}

/// [`connect`] with these TLS settings and login (a mirror's source side
/// may have its own).
fn connect_as(
    brokers: &str,
    tls: Option<protocol::client::TlsConfig>,
    login: Option<protocol::client::Login>,
) -> anyhow::Result<Client> {
    connect_timed(brokers, tls, login, None)
}

/// [`connect_as`] with a request timeout of its own (a broker that takes
/// a request and does not answer within it — a paused process — is given
/// up on; the default is the client's, 30 s).
fn connect_timed(
    brokers: &str,
    tls: Option<protocol::client::TlsConfig>,
    login: Option<protocol::client::Login>,
    request_timeout: Option<Duration>,
) -> anyhow::Result<Client> {
    let defaults = ClientConfig::default();
    let config = ClientConfig {
        tls,
        login,
        request_timeout: request_timeout.unwrap_or(defaults.request_timeout),
        ..defaults
    };
    match Client::with_config(brokers, config) {
        Ok(client) => Ok(client),
        // A broker answered: it refused the login, which says why.
        Err(error) if error.is_login_failure() => Err(error.into()),
        Err(error) => Err(anyhow::Error::new(error).context(format!(
            "no broker reachable at {brokers} (set --brokers or RINGLOG_BROKERS; start one with `broker --data-dir DIR`)"
        ))),
    }
}

#[expect(clippy::too_many_lines, reason = "one match over every CLI command")]
fn run(cli: Cli) -> anyhow::Result<()> {
    let _ = TLS.set(tls_config(&cli)?);
    // `users add NAME --password-file F` without --user: no login, and the
    // file holds the new user's password (the bootstrap of the first user).
    let adding_without_login = cli.user.is_none()
        && matches!(
            cli.command,
            Command::Users(security::UsersCommand::Add { .. })
        );
    let _ = LOGIN.set(if adding_without_login {
        None
    } else {
        login(&cli)?
    });
    match cli.command {
        Command::Users(command) => security::users(
            &cli.brokers,
            command,
            cli.password_file
                .as_deref()
                .filter(|_| adding_without_login),
        ),
        Command::Acl(command) => security::acl(&cli.brokers, command),
        Command::Quotas(command) => quotas::quotas(&connect(&cli.brokers)?, command),
        Command::Verify(args) => verify::verify(&cli.brokers, &args, connect),
        Command::Topic(command) => topic(&cli.brokers, command),
        Command::Produce(args) => produce(&cli.brokers, args),
        Command::Consume(args) => consume(&cli.brokers, args),
        Command::Offsets(args) => offsets(&cli.brokers, args),
        Command::Groups(command) => groups(&cli.brokers, command),
        Command::Brokers { command } => match command {
            None | Some(BrokersCommand::List) => brokers(&cli.brokers),
            Some(BrokersCommand::Decommission { broker, wait }) => {
                operations::decommission(&connect(&cli.brokers)?, broker, wait.wait())
            }
            Some(BrokersCommand::Describe { broker }) => {
                orphans::describe(&connect(&cli.brokers)?, broker)
            }
            Some(BrokersCommand::PurgeOrphaned { broker, older_than }) => {
                orphans::purge(&connect(&cli.brokers)?, broker, &older_than)
            }
        },
        Command::Mirror { command, args } => match command {
            Some(mirror::MirrorCommand::Promote { topic }) => {
                mirror::promote(&connect(&cli.brokers)?, &topic)
            }
            Some(mirror::MirrorCommand::Status { metrics }) => mirror::status(&metrics),
            None => {
                let target = args.target().unwrap_or(&cli.brokers).to_string();
                mirror::run(args, &target)
            }
        },
        Command::Partitions { command, args } => match command {
            None => partitions(&cli.brokers, args),
            Some(PartitionsCommand::ElectLeaders { topics, wait }) => {
                operations::elect_leaders(&connect(&cli.brokers)?, &topics, wait.wait())
            }
            Some(PartitionsCommand::Elect {
                topic,
                partition,
                unclean,
                broker,
            }) => operations::elect_offline(
                &connect(&cli.brokers)?,
                &topic,
                partition,
                unclean,
                broker,
            ),
            Some(PartitionsCommand::Reassign {
                topic,
                partition,
                replicas,
                wait,
            }) => operations::reassign(
                &connect(&cli.brokers)?,
                &topic,
                partition,
                &replicas,
                wait.wait(),
            ),
        },
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "one match over the topic subcommands"
)]
fn topic(brokers: &str, command: TopicCommand) -> anyhow::Result<()> {
    let client = connect(brokers)?;
    match command {
        TopicCommand::Create {
            name,
            partitions,
            retention_ms,
            retention_bytes,
            segment_bytes,
            flush_messages,
            flush_interval_ms,
            replication_factor,
            min_insync_replicas,
            write_caching,
            message_format,
            timestamp_type,
        } => {
            let settings = TopicSettings {
                retention_ms,
                retention_bytes,
                segment_bytes,
                flush_messages,
                flush_interval_ms,
                replication_factor,
                min_insync_replicas,
                write_caching,
                message_format,
                timestamp_type: timestamp_type.unwrap_or(0),
            };
            let topic = client.create_topic(&name, partitions, &settings)?;
            println!(
                "created topic {} with {}",
                topic.name,
                plural(topic.partitions.len(), "partition")
            );
        }
        TopicCommand::List => {
            for topic in client.metadata(&[])?.topics {
                println!(
                    "{}\t{}",
                    topic.name,
                    plural(topic.partitions.len(), "partition")
                );
            }
        }
        TopicCommand::Describe { name } => {
            let metadata = client.metadata(&[&name])?;
            let topic = metadata
                .topics
                .first()
                .ok_or_else(|| anyhow!("unknown topic {name:?}"))?;
            let s = topic.settings;
            println!(
                "topic {} id {} partitions {} retention_ms {} retention_bytes {} segment_bytes {} flush_messages {} flush_interval_ms {}",
                topic.name,
                if topic.id.is_empty() { "-" } else { topic.id.as_str() },
                topic.partitions.len(),
                s.retention_ms,
                s.retention_bytes,
                s.segment_bytes,
                s.flush_messages,
                s.flush_interval_ms
            );
            if s.replication_factor > 1 {
                println!(
                    "replication_factor {} min_insync_replicas {} write_caching {}",
                    s.replication_factor, s.min_insync_replicas, s.write_caching
                );
            }
            print_settings(topic);
            if s.message_format == 2 {
                let timestamps = protocol::batch::TimestampType::from_number(s.timestamp_type)
                    .unwrap_or_default();
                println!(
                    "message_format 2 (Kafka's record batches v2 at byte offsets) timestamp_type {}",
                    timestamps.name()
                );
            }
            if !topic.mirror_source.is_empty() {
                println!(
                    "mirror of {}: only its mirror writes it, until `ringlog mirror promote {}`",
                    topic.mirror_source, topic.name
                );
            }
            if !topic.promoted_from.is_empty() {
                let ends: Vec<String> = topic.promoted_ends.iter().map(u64::to_string).collect();
                println!(
                    "promoted from a mirror of {}; the copy ended at {} (by partition): where a failback cuts the old source",
                    topic.promoted_from,
                    if ends.is_empty() { "(not recorded)".to_string() } else { ends.join(",") }
                );
            }
            println!("partition\tleader\treplicas\tisr\tepoch\tshard\taddress\tstart_offset\tflushed_offset\tend_offset");
            let ids = |ids: &[u32], fallback: u32| {
                if ids.is_empty() {
                    fallback.to_string()
                } else {
                    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
                }
            };
            // Every partition, whether its broker answers or not: a broker
            // that is down makes its rows offline, not the command fail.
            let mut offline = std::collections::BTreeMap::<u32, Vec<u32>>::new();
            // Partitions whose only copy vanished: refused, and said why.
            let mut lost = Vec::new();
            for p in &topic.partitions {
                let address = client
                    .partition_address(&metadata, &name, p.partition)
                    .unwrap_or_else(|_| "-".to_string());
                let replication = format!(
                    "{}\t{}\t{}\t{}",
                    p.broker_id,
                    ids(&p.replicas, p.broker_id),
                    ids(&p.isr, p.broker_id),
                    if p.leader_epoch < 0 {
                        "-".to_string()
                    } else {
                        p.leader_epoch.to_string()
                    }
                );
                match client.list_offsets(&name, p.partition, OffsetSpec::Earliest, 0) {
                    Ok((_, offsets)) => println!(
                        "{}\t{replication}\t{}\t{address}\t{}\t{}\t{}",
                        p.partition,
                        p.shard_id,
                        offsets.start_offset,
                        offsets.flushed_offset,
                        offsets.end_offset
                    ),
                    Err(error) if error.is_retriable() => {
                        offline.entry(p.broker_id).or_default().push(p.partition);
                        println!(
                            "{}\t{replication}\t{}\t{address}\toffline\toffline\toffline",
                            p.partition, p.shard_id
                        );
                    }
                    Err(error) if error.code() == Some(protocol::ErrorCode::DataLost) => {
                        lost.push(error.to_string());
                        println!(
                            "{}	{replication}	{}	{address}	data-lost	data-lost	data-lost",
                            p.partition, p.shard_id
                        );
                    }
                    Err(error) => return Err(error.into()),
                }
            }
            for why in &lost {
                eprintln!("ringlog: warning: {why}");
            }
            for (broker, partitions) in &offline {
                eprintln!(
                    "ringlog: warning: broker {broker} does not answer: {} offline ({})",
                    plural(partitions.len(), "partition"),
                    partitions
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                );
            }
        }
        TopicCommand::Delete { name } => {
            client.delete_topic(&name)?;
            println!("deleted topic {name}");
        }
        TopicCommand::Alter {
            name,
            partitions,
            config,
            delete_config,
        } => {
            if !config.is_empty() || !delete_config.is_empty() {
                alter_config(&client, &name, &config, &delete_config)?;
            }
            let Some(partitions) = partitions else {
                return Ok(());
            };
            let created = client.create_partitions(&name, partitions)?;
            if created.brokers.is_empty() {
                println!("topic {name} has {partitions} partitions already");
            } else {
                let first = partitions - created.brokers.len() as u32;
                println!(
                    "topic {name} has {partitions} partitions now: {} added ({first}..{partitions}, on brokers {})",
                    created.brokers.len(),
                    created
                        .brokers
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                );
            }
        }
    }
    Ok(())
}

/// `topic alter --config/--delete-config`: the change, then the settings
/// as they are now.
fn alter_config(
    client: &Client,
    name: &str,
    config: &[String],
    delete: &[String],
) -> anyhow::Result<()> {
    let mut set = Vec::with_capacity(config.len());
    for entry in config {
        let Some((key, value)) = entry.split_once('=') else {
            bail!("--config {entry:?}: expected NAME=VALUE, e.g. retention.ms=86400000");
        };
        set.push((key.trim(), value.trim()));
    }
    let delete: Vec<&str> = delete.iter().map(|d| d.trim()).collect();
    let topic = client.alter_topic_config(name, &set, &delete)?;
    println!(
        "topic {name}: {} changed; every live broker applies it now",
        plural(set.len() + delete.len(), "setting")
    );
    print_settings(&topic);
    Ok(())
}

/// The settings that change at run time, each with its value and where it
/// comes from: the topic's own override, or the broker's default.
fn print_settings(topic: &protocol::codec::TopicMetadata) {
    use protocol::codec::topic_config::Alterable;
    for setting in Alterable::ALL {
        let value = setting.get(&topic.settings);
        if setting == Alterable::MinInsyncReplicas && topic.settings.replication_factor <= 1 {
            continue;
        }
        let shown = match setting {
            Alterable::RetentionMs | Alterable::RetentionBytes if value >= i64::MAX as u64 => {
                "-1 (no limit)".to_string()
            }
            Alterable::RetentionBytes if value == 0 => "0 (no limit)".to_string(),
            _ => value.to_string(),
        };
        let source = if setting.get(&topic.overrides) == 0 {
            "default"
        } else {
            "topic"
        };
        println!("  {:<20} {shown:<20} ({source})", setting.name());
    }
}

fn produce(brokers: &str, args: ProduceArgs) -> anyhow::Result<()> {
    let client = connect(brokers)?;
    let delivery_timeout = Duration::from_millis(args.delivery_timeout_ms);
    let acks = match args.acks {
        Acks::None => AckMode::None,
        Acks::Written => AckMode::Written,
        Acks::Flushed => AckMode::Flushed,
        Acks::All => AckMode::All,
    };
    let headers = headers(&args.headers);
    let mut producer = Producer::new(
        &client,
        &args.topic,
        ProducerConfig {
            acks,
            linger: Duration::from_millis(50),
            delivery_timeout,
            compression: args.compression.into(),
            ..ProducerConfig::default()
        },
    )?;
    let extras = Extras {
        timestamp_ms: None,
        headers: &headers,
    };
    if let Some(p) = args.partition {
        if p >= producer.partitions() {
            bail!(
                "topic {:?} has partitions 0..{}, not {p}",
                args.topic,
                producer.partitions()
            );
        }
    }
    let count = send_lines(&mut producer, &args, extras)?;
    // Every batch has an outcome by its delivery timeout (plus a request
    // timeout for one in flight then): wait that long, not a flush's 30 s.
    producer.close(delivery_timeout + client.config().request_timeout)?;
    let acked = match acks {
        AckMode::None => "sent (no acknowledgement requested)".to_string(),
        _ => format!("acknowledged ({:?})", args.acks).to_lowercase(),
    };
    let throttled = producer.throttled();
    let throttled = if throttled.is_zero() {
        String::new()
    } else {
        format!(
            "; it waited {:.1} s in all for its principal's quota, as the brokers' answers asked",
            throttled.as_secs_f64()
        )
    };
    eprintln!(
        "{} {acked} to topic {}{throttled}",
        plural(count as usize, "message"),
        args.topic
    );
    Ok(())
}

/// Sends each line of stdin as a message (split into key and value at
/// `--key-separator`); how many.
fn send_lines(
    producer: &mut Producer,
    args: &ProduceArgs,
    extras: Extras<'_>,
) -> anyhow::Result<u64> {
    let stdin = std::io::stdin();
    let mut line = Vec::new();
    let mut reader = stdin.lock();
    let mut count = 0u64;
    loop {
        line.clear();
        if reader
            .read_until(b'\n', &mut line)
            .context("reading stdin")?
            == 0
        {
            return Ok(count);
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        let (key, value) = split_key(&line, args.key_separator);
        match args.partition {
            Some(p) => producer.send_to_with(p, key, value, extras)?,
            None => producer.send_with(key, value, extras)?,
        };
        count += 1;
    }
}

/// "1 message", "2 messages".
fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

fn split_key(line: &[u8], separator: Option<char>) -> (Option<&[u8]>, &[u8]) {
    let Some(separator) = separator else {
        return (None, line);
    };
    let mut buf = [0u8; 4];
    let sep = separator.encode_utf8(&mut buf).as_bytes();
    match line.windows(sep.len()).position(|w| w == sep) {
        Some(at) => (Some(&line[..at]), &line[at + sep.len()..]),
        None => (None, line),
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "a consumer's loop over partitions with its start, limits and summary; one command's flow"
)]
fn consume(brokers: &str, args: ConsumeArgs) -> anyhow::Result<()> {
    if let Some(group) = &args.group {
        return consume_group(brokers, group, &args);
    }
    let client = connect(brokers)?;
    let metadata = client.metadata(&[&args.topic])?;
    let topic = metadata
        .topics
        .first()
        .ok_or_else(|| anyhow!("unknown topic {:?}", args.topic))?;
    let partitions: Vec<u32> = match args.partition {
        Some(p) if p as usize >= topic.partitions.len() => {
            bail!(
                "topic {:?} has partitions 0..{}, not {p}",
                args.topic,
                topic.partitions.len()
            )
        }
        Some(p) => vec![p],
        None => (0..topic.partitions.len() as u32).collect(),
    };
    if partitions.len() > 1 && args.from.parse::<u64>().is_ok() {
        bail!(
            "--from {}: an offset is a byte position in one partition; name it with --partition (topic {:?} has {})",
            args.from,
            args.topic,
            plural(partitions.len(), "partition")
        );
    }
    let wait_ms = if partitions.len() == 1 { 500 } else { 50 };
    let mut readers: Vec<Reader> = partitions
        .iter()
        .map(|&partition| Reader {
            partition,
            consumer: None,
            position: None,
            epoch: -1,
            retry_at: std::time::Instant::now(),
            attempts: 0,
            error: String::new(),
        })
        .collect();
    // The first attempt at each partition says at once what is wrong with
    // the arguments (a bad --from, an unknown partition); a broker that is
    // down only delays its partitions.
    for reader in &mut readers {
        match reader.open(&client, &args, wait_ms) {
            Err(error) if !passes(&error) => return Err(error),
            _ => {}
        }
    }
    let mut outages = OutageLog::default();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut printed = 0u64;
    let limit = args.count.unwrap_or(u64::MAX);
    while printed < limit {
        let mut all_at_end = true;
        let mut down = Vec::new();
        for reader in &mut readers {
            let p = &reader.partition.clone();
            if reader.consumer.is_none() {
                all_at_end = false;
                if std::time::Instant::now() < reader.retry_at {
                    down.push((format!("{}-{p}", args.topic), reader.last_error()));
                    continue;
                }
                if let Err(error) = reader.open(&client, &args, wait_ms) {
                    if !passes(&error) {
                        return Err(error);
                    }
                    down.push((format!("{}-{p}", args.topic), format!("{error:#}")));
                    continue;
                }
            }
            let Some(consumer) = reader.consumer.as_mut() else {
                continue;
            };
            let mut write_error = None;
            let polled = consumer.poll_with(|m| {
                if printed >= limit || write_error.is_some() {
                    return;
                }
                let line = Line {
                    partition: *p,
                    offset: m.offset,
                    key: m.key,
                    value: m.value,
                    timestamp: m.timestamp,
                    headers: m.headers.to_vec(),
                };
                let result = write_message(&mut out, &args, &line);
                if let Err(e) = result {
                    write_error = Some(e);
                }
                printed += 1;
            });
            for cut in consumer.take_truncations() {
                warn_truncated(&cut, None);
            }
            match polled {
                Ok(_) => {}
                Err(protocol::client::ClientError::InvalidOffset {
                    partition, offset, ..
                }) if !args.skip_damaged => {
                    bail!("{partition}: --from {offset} is not the start of a message: offsets are byte positions; take one from `ringlog offsets` or `ringlog consume --print-offsets`");
                }
                Err(
                    protocol::client::ClientError::Corrupt { partition, source }
                    | protocol::client::ClientError::InvalidOffset {
                        partition, source, ..
                    },
                ) => {
                    let at = consumer.position();
                    if !args.skip_damaged {
                        bail!("{partition}: the bytes at offset {at} are not a valid message ({source}): the data is damaged; --skip-damaged moves past it");
                    }
                    let skipped = consumer.skip_damaged()?;
                    eprintln!(
                        "ringlog: {partition}: skipped {skipped} damaged bytes at offset {at} ({source})"
                    );
                }
                Err(error) if error.is_retriable() => {
                    // Its broker went away: this partition waits, the
                    // others go on.
                    down.push((format!("{}-{p}", args.topic), error.to_string()));
                    reader.failed(&client, error.to_string());
                    all_at_end = false;
                    continue;
                }
                Err(error) => return Err(error.into()),
            }
            if let Some(e) = write_error {
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    return Ok(());
                }
                return Err(e).context("writing stdout");
            }
            all_at_end &= consumer.at_end();
            if printed >= limit {
                break;
            }
        }
        outages.report(down.into_iter());
        if readers.iter().all(|r| r.consumer.is_none()) {
            // Nothing readable: wait for the next retry instead of spinning.
            std::thread::sleep(Duration::from_millis(u64::from(wait_ms)));
        }
        out.flush().context("writing stdout")?;
        if args.exit_at_end && all_at_end {
            break;
        }
    }
    out.flush().context("writing stdout")?;
    report_throttled(&client);
    Ok(())
}

/// Says on stderr how long the brokers asked this client to wait for its
/// principal's quota, if at all (the client waited before each next
/// request: PROTOCOL.md §1, throttled frames).
fn report_throttled(client: &Client) {
    let throttled = client.throttled();
    if !throttled.is_zero() {
        eprintln!(
            "ringlog: waited {:.1} s in all for this principal's quota, as the brokers' answers asked",
            throttled.as_secs_f64()
        );
    }
}

/// Whether an error is a broker being away (retried) rather than a failure.
fn passes(error: &anyhow::Error) -> bool {
    error
        .downcast_ref::<protocol::client::ClientError>()
        .is_some_and(|e| e.is_retriable())
}

/// One partition of a plain `consume`: its consumer while its broker
/// answers; else where it continues, and when to try again.
struct Reader {
    partition: u32,
    consumer: Option<Consumer>,
    /// Where it continues (`None`: where `--from` says).
    position: Option<u64>,
    /// The leader epoch of the message before `position` (-1: unknown).
    epoch: i32,
    retry_at: std::time::Instant,
    attempts: u32,
    /// Why it last failed.
    error: String,
}

impl Reader {
    /// One attempt at opening the partition's consumer.
    fn open(&mut self, client: &Client, args: &ConsumeArgs, wait_ms: u32) -> anyhow::Result<()> {
        let opened = (|| -> anyhow::Result<Consumer> {
            let offset = match self.position {
                Some(offset) => offset,
                None => start_offset(client, &args.topic, self.partition, &args.from)?,
            };
            let mut consumer = Consumer::new(client, &args.topic, self.partition, offset)?;
            if self.position.is_some() {
                consumer.seek_committed(offset, self.epoch);
            }
            consumer.set_max_bytes(args.max_bytes);
            consumer.set_max_wait_ms(wait_ms);
            consumer.set_retries(1);
            Ok(consumer)
        })();
        match opened {
            Ok(consumer) => {
                self.consumer = Some(consumer);
                self.attempts = 0;
                Ok(())
            }
            Err(error) => {
                self.failed(client, format!("{error:#}"));
                Err(error)
            }
        }
    }

    /// The partition failed with an error that passes: retry after a
    /// back-off, from where it was.
    fn failed(&mut self, client: &Client, error: String) {
        self.error = error;
        if let Some(consumer) = self.consumer.take() {
            self.position = Some(consumer.position());
            self.epoch = consumer.position_epoch();
        }
        self.retry_at = std::time::Instant::now() + client.config().backoff(self.attempts);
        self.attempts = self.attempts.saturating_add(1);
    }

    fn last_error(&self) -> String {
        self.error.clone()
    }
}

/// Says on stderr that messages already printed are gone from the log (an
/// unclean election cut it under the consumer's position).
fn warn_truncated(cut: &protocol::client::Truncation, group: Option<&str>) {
    let whose = group.map_or_else(|| "this consumer".to_string(), |g| format!("group {g}"));
    eprintln!(
        "ringlog: warning: {}-{}: the log was cut at offset {} below {whose}'s position {} (an unclean leader election): the {} bytes of messages read from there are gone from the partition; continuing at offset {}, where other messages follow",
        cut.topic,
        cut.partition,
        cut.from,
        cut.to,
        cut.to - cut.from,
        cut.from
    );
}

/// A consumed message, as printed.
struct Line<'a> {
    partition: u32,
    offset: u64,
    key: Option<&'a [u8]>,
    value: &'a [u8],
    timestamp: Option<i64>,
    headers: Vec<(&'a str, Option<&'a [u8]>)>,
}

/// One consumed message as a line:
/// `[PARTITION:OFFSET\t][TIME\t][HEADERS\t][KEY<C>]PAYLOAD\n`.
fn write_message(out: &mut impl Write, args: &ConsumeArgs, line: &Line<'_>) -> std::io::Result<()> {
    if args.print_offsets {
        write!(out, "{}:{}\t", line.partition, line.offset)?;
    }
    if args.print_timestamps {
        match line.timestamp {
            Some(time) => write!(out, "{time}\t")?,
            None => out.write_all(b"-\t")?,
        }
    }
    if args.print_headers {
        for (i, (key, value)) in line.headers.iter().enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            out.write_all(key.as_bytes())?;
            if let Some(value) = value {
                out.write_all(b"=")?;
                out.write_all(value)?;
            }
        }
        out.write_all(b"\t")?;
    }
    if let Some(separator) = args.print_keys {
        out.write_all(line.key.unwrap_or_default())?;
        write!(out, "{separator}")?;
    }
    out.write_all(line.value)?;
    out.write_all(b"\n")
}

/// `--timestamp-type`: Kafka's names, in any case.
fn parse_timestamp_type(name: &str) -> Result<u32, String> {
    match name.to_ascii_lowercase().as_str() {
        "createtime" | "create-time" | "create" => Ok(1),
        "logappendtime" | "log-append-time" | "log-append" => Ok(2),
        _ => Err(format!(
            "{name:?} is not CreateTime (the producer's time) or LogAppendTime (the broker's)"
        )),
    }
}

fn start_offset(client: &Client, topic: &str, partition: u32, from: &str) -> anyhow::Result<u64> {
    let (spec, timestamp) = match from {
        "earliest" => (OffsetSpec::Earliest, 0),
        "latest" => (OffsetSpec::Latest, 0),
        _ if from.starts_with('@') => {
            let ms = from[1..]
                .parse::<u64>()
                .map_err(|_| anyhow!("--from {from}: expected @UNIX_MS, e.g. @1700000000000"))?;
            (OffsetSpec::BeforeTime, ms)
        }
        _ => {
            let offset = from.parse::<u64>().map_err(|_| {
                anyhow!("--from {from}: expected earliest, latest, an offset or @UNIX_MS")
            })?;
            return Ok(offset);
        }
    };
    Ok(client.list_offsets(topic, partition, spec, timestamp)?.0)
}

fn offsets(brokers: &str, args: OffsetsArgs) -> anyhow::Result<()> {
    let client = connect(brokers)?;
    let (spec, timestamp) = match args.before.as_str() {
        "earliest" => (OffsetSpec::Earliest, 0),
        "latest" => (OffsetSpec::Latest, 0),
        ms => (
            OffsetSpec::BeforeTime,
            ms.parse::<u64>()
                .map_err(|_| anyhow!("--before {ms}: expected earliest, latest or UNIX_MS"))?,
        ),
    };
    let (offset, _) = client.list_offsets(&args.topic, args.partition, spec, timestamp)?;
    println!("{offset}");
    Ok(())
}

/// `consume --group`: a member of the group, printing its share.
#[expect(
    clippy::too_many_lines,
    reason = "a group consumer's loop with its commits, outages and summary; one command's flow"
)]
fn consume_group(brokers: &str, group: &str, args: &ConsumeArgs) -> anyhow::Result<()> {
    let start_from = match args.from.as_str() {
        "earliest" => StartFrom::Earliest,
        "latest" => StartFrom::Latest,
        other => bail!("--from {other} with --group: a group starts each partition at its committed offset, else at earliest or latest (use `ringlog groups reset-offsets` to move it)"),
    };
    if args.partition.is_some() || args.exit_at_end {
        bail!("--partition and --exit-at-end do not apply with --group: the group decides which partitions this member reads; use --count to stop");
    }
    let client = connect(brokers)?;
    // A group may subscribe before its topic exists, and then waits for
    // it; a typo would look like a hang, so say so once.
    let mut waiting_for_topic = match client.metadata(&[&args.topic]) {
        Err(e) if e.code() == Some(protocol::ErrorCode::UnknownTopic) => {
            eprintln!(
                "ringlog: topic {} does not exist (yet): waiting for it to be created (Ctrl-C to stop; `ringlog topic list` shows the topics there are)",
                args.topic
            );
            true
        }
        _ => false,
    };
    let config = GroupConfig {
        start_from,
        member_name: member_name(),
        // A commit an interval, not a batch: 20 members committing every
        // batch were 308 etcd writes a second (issue 27, item 7). Each
        // poll commits what the polls before it returned, all printed.
        auto_commit_interval: Some(Duration::from_millis(args.commit_interval_ms.max(1))),
        session_timeout: Duration::from_millis(args.session_timeout_ms),
        ..GroupConfig::default()
    };
    // Through the client: its TLS and login for every group connection.
    let mut consumer = GroupConsumer::subscribe_with(&client, group, &[&args.topic], config)
        .with_context(|| format!("joining group {group}"))?;
    // Ctrl-C or SIGTERM: commit what was printed and leave the group at
    // once, so the other members take over without waiting for the session
    // timeout.
    let stop = stop_on_signals();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut printed = 0u64;
    let limit = args.count.unwrap_or(u64::MAX);
    let mut outages = OutageLog::default();
    while printed < limit && !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let messages = consumer.poll()?;
        for cut in consumer.take_truncations() {
            warn_truncated(&cut, Some(group));
        }
        if waiting_for_topic && !consumer.assignment().is_empty() {
            eprintln!("ringlog: topic {} exists now: consuming", args.topic);
            waiting_for_topic = false;
        }
        let owned: std::collections::BTreeSet<String> = consumer
            .assignment()
            .into_iter()
            .map(|(t, p)| format!("{t}-{p}"))
            .collect();
        outages.gone_elsewhere = owned;
        // A topic that does not exist yet was said once, above.
        let outages_now = consumer
            .outages()
            .into_iter()
            .filter(|o| o.partition.is_some() || o.topic.is_empty());
        outages.report(outages_now.map(|o| {
            let what = match o.partition {
                Some(p) => format!("{}-{p}", o.topic),
                None => format!("group {group}'s coordinator"),
            };
            (what, o.error.to_string())
        }));
        let mut delivered = false;
        let mut rewound = std::collections::BTreeSet::new();
        for m in messages {
            if printed >= limit {
                // Not printed: the next owner (or this group's next run)
                // must read it, so the committed position goes back to it.
                if rewound.insert((m.topic.clone(), m.partition)) {
                    consumer.seek(&m.topic, m.partition, m.offset);
                }
                continue;
            }
            let line = Line {
                partition: m.partition,
                offset: m.offset,
                key: m.key.as_deref(),
                value: &m.value,
                timestamp: m.timestamp,
                headers: m
                    .headers
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_deref()))
                    .collect(),
            };
            let result = write_message(&mut out, args, &line);
            match result {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
                Err(e) => return Err(e).context("writing stdout"),
            }
            printed += 1;
            delivered = true;
        }
        if delivered {
            // Printed before committed (by the next polls): at least once,
            // never at most once.
            out.flush().context("writing stdout")?;
        }
    }
    out.flush().context("writing stdout")?;
    consumer.close()?;
    report_throttled(&client);
    Ok(())
}

/// Says on stderr, once, when a partition (or a group's coordinator) becomes
/// unavailable and when it is back, instead of failing the whole command:
/// a broker's death is a partial outage.
#[derive(Default)]
struct OutageLog {
    /// What is unavailable now, and since when.
    current: std::collections::BTreeMap<String, std::time::Instant>,
    /// For a group member: the partitions it owns now (one that left the
    /// outage by going to another member is not "available again").
    gone_elsewhere: std::collections::BTreeSet<String>,
}

impl OutageLog {
    fn report(&mut self, now: impl Iterator<Item = (String, String)>) {
        let now: std::collections::BTreeMap<String, String> = now.collect();
        for (what, error) in &now {
            if !self.current.contains_key(what) {
                eprintln!("ringlog: {what} is unavailable ({error}); retrying with back-off, the other partitions go on");
                self.current.insert(what.clone(), std::time::Instant::now());
            }
        }
        let back: Vec<String> = self
            .current
            .keys()
            .filter(|what| !now.contains_key(*what))
            .cloned()
            .collect();
        for what in back {
            if let Some(since) = self.current.remove(&what) {
                let partition = what.contains('-') && !what.starts_with("group ");
                if partition
                    && !self.gone_elsewhere.is_empty()
                    && !self.gone_elsewhere.contains(&what)
                {
                    eprintln!("ringlog: {what} went to another member of the group");
                } else {
                    eprintln!(
                        "ringlog: {what} is available again after {:.1} s",
                        since.elapsed().as_secs_f64()
                    );
                }
            }
        }
    }
}

static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// A flag set by SIGINT and SIGTERM (instead of dying at once).
fn stop_on_signals() -> &'static std::sync::atomic::AtomicBool {
    let handler = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
    &STOP
}

/// `<hostname>-<pid>`, so `groups describe` says whose each member is.
fn member_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    format!("{host}-{}", std::process::id())
}

#[expect(
    clippy::too_many_lines,
    reason = "one match over the groups subcommands"
)]
fn groups(brokers: &str, command: GroupsCommand) -> anyhow::Result<()> {
    let client = connect(brokers)?;
    match command {
        GroupsCommand::List => {
            for group in client.list_groups()? {
                println!("{group}");
            }
        }
        GroupsCommand::Describe { group } => {
            let description = client.describe_group(&group)?;
            let view = &description.view;
            let topics: Vec<&str> = view.topics.iter().map(|t| t.name.as_str()).collect();
            println!(
                "group {group} members {} topics {}",
                view.members.len(),
                if topics.is_empty() {
                    "-".to_string()
                } else {
                    topics.join(",")
                }
            );
            for member in &view.members {
                println!("member\t{}\t{}", member.member_id, member.topics.join(","));
            }
            // Every partition of the subscribed topics, and any other topic
            // with a committed offset.
            let mut rows: Vec<(String, u32)> = description
                .partitions
                .iter()
                .map(|p| (p.topic.clone(), p.partition))
                .collect();
            for topic in &view.topics {
                rows.extend((0..topic.partitions).map(|p| (topic.name.clone(), p)));
            }
            rows.sort();
            rows.dedup();
            // Offsets are byte positions, so the lag is in bytes.
            println!("topic\tpartition\towner\tcommitted_offset\tlog_end_offset\tlag_bytes");
            let mut offline = Vec::new();
            for (topic, partition) in rows {
                let info = description
                    .partitions
                    .iter()
                    .find(|p| p.topic == topic && p.partition == partition);
                let owner = info
                    .map(|p| p.owner.as_str())
                    .filter(|o| !o.is_empty())
                    .unwrap_or("-");
                let committed = info.and_then(|p| p.offset);
                let end = client
                    .list_offsets(&topic, partition, OffsetSpec::Latest, 0)
                    .map(|(offset, _)| offset);
                let (end_text, lag) = match (&end, committed) {
                    (Ok(end), Some(c)) => (end.to_string(), end.saturating_sub(c).to_string()),
                    (Ok(end), None) => (end.to_string(), "-".to_string()),
                    (Err(e), _) if e.is_retriable() => {
                        offline.push(format!("{topic}-{partition}"));
                        ("offline".to_string(), "-".to_string())
                    }
                    (Err(e), _) => (format!("unavailable ({e})"), "-".to_string()),
                };
                println!(
                    "{topic}\t{partition}\t{owner}\t{}\t{end_text}\t{lag}",
                    committed.map_or("-".to_string(), |c| c.to_string())
                );
            }
            if !offline.is_empty() {
                eprintln!(
                    "ringlog: warning: {} offline (their broker does not answer): {}",
                    plural(offline.len(), "partition"),
                    offline.join(",")
                );
            }
        }
        GroupsCommand::ResetOffsets {
            group,
            topic,
            to,
            partition,
        } => {
            let metadata = client.metadata(&[&topic])?;
            let count = metadata
                .topics
                .first()
                .map_or(0, |t| t.partitions.len() as u32);
            let partitions: Vec<u32> = match partition {
                Some(p) if p >= count => {
                    bail!("topic {topic:?} has partitions 0..{count}, not {p}")
                }
                Some(p) => vec![p],
                None => (0..count).collect(),
            };
            let mut offsets = Vec::new();
            for p in partitions {
                offsets.push(OffsetCommit {
                    topic: topic.clone(),
                    partition: p,
                    offset: start_offset(&client, &topic, p, &to)?,
                    // A reset names no epoch: nothing was read there.
                    leader_epoch: -1,
                });
            }
            let reset = client.reset_offsets(&group, &offsets)?;
            for o in &offsets {
                println!("{}\t{}\t{}", o.topic, o.partition, o.offset);
            }
            eprintln!("reset {reset} offsets of group {group}");
        }
    }
    Ok(())
}

/// `ringlog partitions`: every partition's leader, replicas and ISR, from
/// Metadata; `--under-replicated` and `--offline` filter.
fn partitions(brokers: &str, args: PartitionsArgs) -> anyhow::Result<()> {
    let client = connect(brokers)?;
    let topics: Vec<&str> = args.topics.iter().map(String::as_str).collect();
    let metadata = client.metadata(&topics)?;
    let live: Vec<u32> = metadata.brokers.iter().map(|b| b.broker_id).collect();
    let ids = |ids: &[u32], fallback: u32| {
        if ids.is_empty() {
            fallback.to_string()
        } else {
            ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
        }
    };
    println!("topic\tpartition\tleader\treplicas\tisr\tepoch\tstatus");
    for topic in &metadata.topics {
        for p in &topic.partitions {
            let offline = !live.contains(&p.broker_id);
            let copies = p.replicas.len().max(1);
            let under = p.isr.len().max(1) < copies;
            if (args.offline && !offline) || (args.under_replicated && !under) {
                continue;
            }
            let moving = if p.moving_to.is_empty() {
                String::new()
            } else {
                format!(", moving to {}", operations::ids(&p.moving_to))
            };
            let status = if offline {
                "offline"
            } else if under {
                "under-replicated"
            } else {
                "ok"
            };
            let status = format!("{status}{moving}");
            println!(
                "{}\t{}\t{}\t{}\t{}\t{}\t{status}",
                topic.name,
                p.partition,
                p.broker_id,
                ids(&p.replicas, p.broker_id),
                ids(&p.isr, p.broker_id),
                if p.leader_epoch < 0 {
                    "-".to_string()
                } else {
                    p.leader_epoch.to_string()
                },
            );
        }
    }
    Ok(())
}

fn brokers(brokers: &str) -> anyhow::Result<()> {
    let client = connect(brokers)?;
    let metadata = client.metadata(&[])?;
    println!("broker\tshard\taddress\track");
    for broker in &metadata.brokers {
        for shard in &broker.shards {
            println!(
                "{}\t{}\t{}:{}\t{}",
                broker.broker_id,
                shard.shard_id,
                shard.host,
                shard.port,
                broker.rack.as_deref().unwrap_or("-")
            );
        }
    }
    Ok(())
}
