//! Broker configuration: TOML file, overridden by flags, validated once.

use crate::storage::LogSettings;
use protocol::batch::TimestampType;
use protocol::stored::MessageFormat;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Defaults for topics that do not override them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TopicDefaults {
    /// Time retention (default 7 days, as in the paper).
    pub retention_ms: u64,
    /// Size retention per partition; 0 = none.
    pub retention_bytes: u64,
    /// Segment size (default 1 GiB).
    pub segment_bytes: u64,
    /// Flush after this many messages.
    pub flush_messages: u64,
    /// Flush this long after the oldest unflushed append.
    pub flush_interval_ms: u64,
}

impl Default for TopicDefaults {
    fn default() -> Self {
        TopicDefaults {
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: 0,
            segment_bytes: 1 << 30,
            flush_messages: 50_000,
            flush_interval_ms: 10,
        }
    }
}

/// How clients prove who they are (`authentication`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Authentication {
    /// No login needed: a connection without one acts as `User:ANONYMOUS`;
    /// a login offered is checked all the same (clients can start logging
    /// in before a broker requires it).
    #[default]
    None,
    /// A SCRAM-SHA-256 login in the Handshake.
    Scram,
    /// A TLS client certificate (`tls_client_ca`), its subject's common
    /// name the user: `User:CN`.
    Tls,
    /// A SCRAM login, or else a TLS client certificate.
    ScramOrTls,
}

impl Authentication {
    /// Its name in the configuration.
    pub fn word(self) -> &'static str {
        match self {
            Authentication::None => "none",
            Authentication::Scram => "scram",
            Authentication::Tls => "tls",
            Authentication::ScramOrTls => "scram_or_tls",
        }
    }
}

/// The broker's configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where partitions and the topic registry live.
    pub data_dir: PathBuf,
    /// Shard 0's address; shard `i` listens on port + i (or an ephemeral port
    /// each when the port is 0).
    pub listen: SocketAddr,
    /// Shard 0's address for Kafka's protocol (`kafka/`); shard `i` on
    /// port + i, each shard its own Kafka node (`broker_id × 1024 +
    /// shard`). None: no Kafka listener.
    pub kafka_listen: Option<SocketAddr>,
    /// How long an empty Kafka group's first JoinGroup waits for other
    /// members before the first generation is formed (Kafka's
    /// `group.initial.rebalance.delay.ms`): fewer rebalances when a
    /// group's members start together.
    pub kafka_group_initial_delay_ms: u64,
    /// The host Metadata tells clients to connect to (default: the listen
    /// address's IP; set it when listening on 0.0.0.0).
    pub advertise_host: Option<String>,
    /// Number of shards (one pinned executor each).
    pub shards: usize,
    /// Shard `i` is pinned to CPU `(first_cpu + i) % cpus`: set it apart
    /// for each broker when several run on one machine.
    pub first_cpu: usize,
    /// This broker's id.
    pub broker_id: u32,
    /// The rack (or zone) it stands in: a replicated topic's copies are
    /// spread over racks where possible, so a lost rack takes at most one.
    pub rack: Option<String>,
    /// Prometheus endpoint address, if any.
    pub metrics_listen: Option<SocketAddr>,
    /// Largest stored message accepted.
    pub message_bytes_max: usize,
    /// Locked memory per shard for glommio's io_uring buffers.
    pub io_memory_bytes: usize,
    /// How often retention runs.
    pub retention_check_ms: u64,
    /// Connections the broker serves at once (divided evenly among its
    /// shards); past it a new connection gets an OVERLOADED error frame and
    /// is closed, so file descriptors stay for storage.
    pub max_connections: usize,
    /// File descriptors kept free of connections for segment files, the
    /// control plane and the shards' own needs: at start, `max_connections`
    /// is lowered until it fits under RLIMIT_NOFILE with this to spare.
    pub fd_reserve: u64,
    /// Segment files each shard keeps open, at most (0 = no limit). Not a
    /// setting: worked out at start from RLIMIT_NOFILE, what connections may
    /// take and `fd_reserve` (the descriptors connections cannot take, less
    /// the control plane's).
    #[serde(skip)]
    pub segment_files_per_shard: usize,
    /// The largest request frame a connection may send (a larger one is
    /// answered FRAME_TOO_LARGE and the connection closed).
    pub max_request_bytes: usize,
    /// Requests one connection may have awaiting responses; past it the
    /// connection stops reading.
    pub max_inflight_requests: usize,
    /// Appended but not yet written bytes the broker holds in memory, over
    /// all partitions (each shard gets an equal share); past it, produces of
    /// every ack mode wait until the disk catches up.
    pub unwritten_bytes_max: u64,
    /// Request bytes one connection may have dispatched and not yet
    /// answered (a forwarded produce holds its copy until the owning shard
    /// takes it); past it the connection stops reading.
    pub connection_inflight_bytes_max: u64,
    /// A shard's flush of at least this many files (partitions' segments and
    /// directories) at once is one `syncfs` of the data directory's file
    /// system instead of an fdatasync each (`storage/driver.rs`); 0 = never.
    /// Set it to 0 when the data directory shares its file system with
    /// other heavy writers: syncfs writes back their dirty pages too.
    pub syncfs_min_files: usize,
    /// The smallest `segment_bytes` a topic may ask for. Small segments mean
    /// many files (and, read at once, many descriptors); 1 MiB by default.
    pub segment_bytes_min: u64,
    /// A new connection must complete its Handshake within this, or it is
    /// closed.
    pub handshake_timeout_ms: u64,
    /// A connection with nothing to read and no response pending is closed
    /// after this long.
    pub idle_timeout_ms: u64,
    /// Once a frame has begun to arrive, the rest must arrive within this
    /// (a client that trickles bytes holds a buffer; slowloris).
    pub frame_timeout_ms: u64,
    /// TLS: the broker's certificate chain (PEM). With `tls_key`, every
    /// listener speaks TLS only.
    pub tls_cert: Option<PathBuf>,
    /// TLS: the private key of `tls_cert` (PEM: PKCS#8, PKCS#1 or SEC1).
    pub tls_key: Option<PathBuf>,
    /// TLS: CA certificates (PEM) a client's certificate must be signed by;
    /// set, a client without one is refused in the handshake.
    pub tls_client_ca: Option<PathBuf>,
    /// TLS between brokers: CA certificates (PEM) that signed the other
    /// brokers' certificates. A follower speaks TLS to its leaders when
    /// this broker has TLS listeners (the cluster's brokers are configured
    /// alike), verifies the leader's certificate with these (default:
    /// `tls_client_ca`), and presents `tls_cert` as its own.
    pub tls_peer_ca: Option<PathBuf>,
    /// How a TLS client certificate names its user (`auth/principal_rules.rs`):
    /// rules tried in order, `RULE:` on the subject DN, `SAN:DNS|EMAIL|URI:`
    /// on alternative names, `DEFAULT` the common name. Empty: the common
    /// name.
    pub tls_principal_mapping_rules: Vec<String>,
    /// How clients log in: `none` (the default), `scram`, `tls` or
    /// `scram_or_tls`.
    pub authentication: Authentication,
    /// Check every request against the access control rules (off: every
    /// connection may do everything, today's behaviour).
    pub authorization: bool,
    /// Principals allowed everything, whatever the rules say
    /// (`["User:admin"]`).
    pub super_users: Vec<String>,
    /// A failed login is answered this long after it failed, then the
    /// connection is closed: guessing passwords costs time, and a failure
    /// takes as long as any other (no timing oracle).
    pub login_failure_delay_ms: u64,
    /// Failed logins one client address may make per minute; past it, its
    /// logins are refused without being checked until the minute is over.
    pub login_failures_per_minute_max: u32,
    /// Failed logins of one user (from any address) in a minute before
    /// its logins are refused unchecked for the rest of the minute (0: no
    /// limit). A trade: see `auth/limiter.rs`.
    pub login_failures_per_user_per_minute_max: u32,
    /// Connections one client address may hold that have not logged in
    /// (0: no bound); past it a new one is refused (`auth/pending.rs`).
    pub max_unauthenticated_connections_per_address: u32,
    /// SCRAM logins one client address may have under way at once (0: no
    /// bound); past it a Handshake's login waits for a place, and is
    /// answered OVERLOADED if none frees within the handshake deadline.
    pub login_exchanges_per_address_max: u32,
    /// Client addresses whose failed logins are remembered at once (the
    /// table's memory is bounded by this, not by the clients).
    pub login_failure_addresses_max: usize,
    /// The user this broker logs in as to other brokers (a follower to its
    /// leaders) when they need a SCRAM login; with `broker_password_file`.
    pub broker_user: Option<String>,
    /// The file holding `broker_user`'s password (its first line).
    pub broker_password_file: Option<PathBuf>,
    /// The quota of a principal without its own (`[quota_default]`; every
    /// field 0 = no bound, the default). See `auth/quota.rs`.
    pub quota_default: crate::auth::quota::Quota,
    /// Principals' own quotas (`[quotas."User:alice"]`), each replacing
    /// the default for its principal. Super users are never throttled.
    pub quotas: std::collections::BTreeMap<String, crate::auth::quota::Quota>,
    /// Connections one client address may hold at once (0: no bound but
    /// `max_connections`).
    pub max_connections_per_address: u32,
    /// While a consumer's fetch waits at a partition's flushed end, the
    /// partition's appends are flushed within `waiting_fetch_flush_us`, so
    /// tailing consumers see messages after a few milliseconds instead of
    /// after `flush_interval_ms`; partitions nobody waits on keep the
    /// topics' flush policy. `false` keeps the policy alone.
    pub flush_for_waiting_fetches: bool,
    /// The longest an append waits for its flush while a fetch waits for
    /// it (0 = at once). A partition's tailing consumers cost it at most one
    /// flush round per this interval, however fast producers append.
    pub waiting_fetch_flush_us: u64,
    /// Idempotent producers each format-2 partition remembers (their last
    /// five batches' numbers, about 200 bytes each); past it the least
    /// recently appending are forgotten and may start again at any
    /// sequence. The bound on what producers can make a partition hold.
    pub producers_per_partition_max: usize,
    /// Topic defaults.
    pub topic_defaults: TopicDefaults,
    /// etcd endpoints (`http://host:port`); empty = standalone.
    pub etcd: Vec<String>,
    /// The cluster's name: its keys live under `/ringlog/<cluster>/` in etcd.
    pub cluster: String,
    /// A secured etcd: the CA certificates (PEM) that signed its server
    /// certificate (the endpoints are then `https://`).
    pub etcd_ca: Option<PathBuf>,
    /// A secured etcd that asks for client certificates: this broker's
    /// certificate chain (PEM), with `etcd_key`.
    pub etcd_cert: Option<PathBuf>,
    /// The private key of `etcd_cert` (PEM).
    pub etcd_key: Option<PathBuf>,
    /// An etcd with authentication enabled: the etcd user the brokers log
    /// in as, with `etcd_password_file`.
    pub etcd_user: Option<String>,
    /// The file whose first line is `etcd_user`'s password.
    pub etcd_password_file: Option<PathBuf>,
    /// TTL of the broker's etcd lease: a broker that dies leaves the broker
    /// registry this long after its last keep-alive.
    pub etcd_lease_ttl_s: u32,
    /// Deadline of every etcd request.
    pub etcd_timeout_ms: u64,
    /// How long a group's member list read from etcd serves heartbeats
    /// (the watch forgets it sooner when a member joins or leaves); 0 reads
    /// etcd for every heartbeat.
    pub group_members_cache_ms: u64,
    /// Copies of each partition of a topic that does not say (1: the
    /// paper's one copy).
    pub default_replication_factor: u32,
    /// Fewest in-sync replicas an acks=all produce accepts, for a topic that
    /// does not say (at most its replication factor).
    pub default_min_insync_replicas: u32,
    /// A follower not caught up with its leader for this long leaves the
    /// ISR (its broker leaving the registry takes it out at once).
    pub replica_lag_time_max_ms: u64,
    /// Not a setting: the data directory had never joined a cluster before
    /// this start (a new disk), so its replicas hold nothing and leave the
    /// ISRs they were in.
    #[serde(skip)]
    pub fresh_data_dir: bool,
    /// Not a setting: the partition directories as this run found them,
    /// before anything created one (which replicated copies are new:
    /// `storage::new_copy`).
    #[serde(skip)]
    pub copies_at_start: std::sync::Arc<crate::storage::new_copy::CopiesAtStart>,
    /// Not a setting: this run's incarnation (its registration's).
    #[serde(skip)]
    pub incarnation: String,
    /// Not a setting: the id of the cluster this broker serves (etcd's, or
    /// for a standalone broker its data directory's), which Metadata
    /// answers with so a mirror tells two clusters apart. Empty while
    /// unknown (a data directory of another cluster).
    #[serde(skip)]
    pub cluster_id: String,
    /// Adopt the cluster id etcd holds (creating one if it holds none)
    /// even though the data directory belongs to another cluster, and
    /// register the topics found on disk there again. Not a setting: the
    /// one-shot flag `--join-new-cluster`, for after a deliberate rebuild
    /// of etcd; a file that kept it would defeat the check every start.
    #[serde(skip)]
    pub join_new_cluster: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from("ringlog-data"),
            listen: SocketAddr::from(([127, 0, 0, 1], 9092)),
            kafka_listen: None,
            kafka_group_initial_delay_ms: 3000,
            advertise_host: None,
            shards: std::thread::available_parallelism().map_or(1, |n| n.get()),
            first_cpu: 0,
            broker_id: 0,
            rack: None,
            metrics_listen: None,
            message_bytes_max: crate::limits::MESSAGE_BYTES_MAX_DEFAULT,
            io_memory_bytes: crate::limits::IO_MEMORY_BYTES_DEFAULT,
            retention_check_ms: 30_000,
            max_connections: 10_000,
            fd_reserve: 1024,
            segment_files_per_shard: 0,
            max_request_bytes: crate::limits::REQUEST_FRAME_BYTES_MAX,
            max_inflight_requests: 4096,
            unwritten_bytes_max: 1 << 30,
            connection_inflight_bytes_max: 64 << 20,
            syncfs_min_files: 4,
            segment_bytes_min: 1 << 20,
            handshake_timeout_ms: 10_000,
            idle_timeout_ms: 600_000,
            frame_timeout_ms: 30_000,
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            tls_principal_mapping_rules: Vec::new(),
            tls_peer_ca: None,
            authentication: Authentication::None,
            authorization: false,
            super_users: Vec::new(),
            login_failure_delay_ms: 500,
            login_failures_per_minute_max: 20,
            login_failures_per_user_per_minute_max: 100,
            max_unauthenticated_connections_per_address: 256,
            login_exchanges_per_address_max: 8,
            login_failure_addresses_max: 10_000,
            broker_user: None,
            broker_password_file: None,
            quota_default: Default::default(),
            quotas: Default::default(),
            max_connections_per_address: 0,
            flush_for_waiting_fetches: true,
            waiting_fetch_flush_us: 2_000,
            producers_per_partition_max: 1_000,
            topic_defaults: TopicDefaults::default(),
            etcd: Vec::new(),
            cluster: "ringlog".into(),
            etcd_ca: None,
            etcd_cert: None,
            etcd_key: None,
            etcd_user: None,
            etcd_password_file: None,
            etcd_lease_ttl_s: 10,
            etcd_timeout_ms: 5_000,
            group_members_cache_ms: 1_000,
            join_new_cluster: false,
            default_replication_factor: 1,
            default_min_insync_replicas: 1,
            replica_lag_time_max_ms: 20_000,
            fresh_data_dir: false,
            copies_at_start: Default::default(),
            incarnation: String::new(),
            cluster_id: String::new(),
        }
    }
}

/// The longest a topic may leave appended messages unflushed, in ms.
const FLUSH_INTERVAL_MS_MAX: u64 = 3_600_000;

/// The message format of a topic created without one (design record
/// 0015 says why).
pub const DEFAULT_MESSAGE_FORMAT: MessageFormat = MessageFormat::One;

/// A topic setting out of range, from a request or the registry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// Larger than the registries store (TOML and JSON integers stop at
    /// 2^63 - 1).
    #[error("{name} must be below 2^63, got {value}")]
    TooLarge {
        /// The setting.
        name: &'static str,
        /// Its value.
        value: u64,
    },
    /// A segment size outside the broker's limits.
    #[error("segment_bytes must be {min}..={max} (the broker's segment_bytes_min), got {value}")]
    SegmentBytes {
        /// The broker's `segment_bytes_min`.
        min: u64,
        /// The largest segment a log holds.
        max: u64,
        /// The value.
        value: u64,
    },
    /// A flush interval of 0 or above an hour.
    #[error("flush_interval_ms must be 1..={FLUSH_INTERVAL_MS_MAX}, got {0}")]
    FlushInterval(u64),
    /// A flush every 0 messages.
    #[error("flush_messages must be at least 1")]
    FlushMessages,
    /// A message format other than 1 or 2.
    #[error(
        "message_format must be 1 (the paper's messages) or 2 (Kafka's record batches v2), got {0}"
    )]
    MessageFormat(u32),
    /// A timestamp type other than 1 or 2.
    #[error("timestamp_type must be 1 (CreateTime, the producer's) or 2 (LogAppendTime, the broker's), got {0}")]
    TimestampType(u32),
    /// LogAppendTime asked of a topic whose messages carry no time.
    #[error(
        "LogAppendTime needs message format 2: the paper's messages (format 1) carry no timestamps"
    )]
    TimestampsNeedFormatTwo,
}

/// A configuration value out of range.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(pub String);

impl Config {
    /// Why this broker cannot have a Kafka listener, if it cannot.
    fn check_kafka_listener(&self) -> Result<(), ConfigError> {
        let nodes = i64::from(crate::limits::KAFKA_NODES_PER_BROKER);
        if i64::from(self.broker_id) * nodes + nodes - 1 > i64::from(i32::MAX) {
            return Err(ConfigError(format!(
                "kafka_listen: broker id {} is too large for Kafka node ids (broker id × 1024 + shard must fit in 31 bits: at most 2097150)",
                self.broker_id
            )));
        }
        if self.kafka_group_initial_delay_ms > crate::limits::KAFKA_GROUP_INITIAL_DELAY_MS_MAX {
            return Err(ConfigError(format!(
                "kafka_group_initial_delay_ms must be at most {} (5 minutes), got {}",
                crate::limits::KAFKA_GROUP_INITIAL_DELAY_MS_MAX,
                self.kafka_group_initial_delay_ms
            )));
        }
        Ok(())
    }

    /// Checks every value once, so the rest of the broker can trust them.
    #[expect(
        clippy::too_many_lines,
        reason = "one check per setting, each with its own error; a list, not logic"
    )]
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.kafka_listen.is_some() {
            self.check_kafka_listener()?;
        }
        if self.shards == 0 || self.shards > 256 {
            return Err(ConfigError(format!(
                "shards must be 1..=256, got {}",
                self.shards
            )));
        }
        use crate::limits::{REQUEST_FRAME_BYTES_MAX, REQUEST_FRAME_BYTES_MIN};
        if !(REQUEST_FRAME_BYTES_MIN..=REQUEST_FRAME_BYTES_MAX).contains(&self.max_request_bytes) {
            return Err(ConfigError(format!(
                "max_request_bytes must be {REQUEST_FRAME_BYTES_MIN}..={REQUEST_FRAME_BYTES_MAX}, got {}",
                self.max_request_bytes
            )));
        }
        if self.message_bytes_max < 16 || self.message_bytes_max > self.max_request_bytes - 1024 {
            return Err(ConfigError(format!(
                "message_bytes_max must be 16..={} (max_request_bytes less 1 KiB for the headers), got {}",
                self.max_request_bytes - 1024,
                self.message_bytes_max
            )));
        }
        if !(1..=65_536).contains(&self.max_inflight_requests) {
            return Err(ConfigError(format!(
                "max_inflight_requests must be 1..=65536, got {}",
                self.max_inflight_requests
            )));
        }
        if let Some(rack) = &self.rack {
            if rack.is_empty()
                || rack.len() > 64
                || !rack
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
            {
                return Err(ConfigError(format!(
                    "rack must be 1..=64 letters, digits, '.', '_' and '-', got {rack:?}"
                )));
            }
        }
        if self.cluster.is_empty()
            || !self
                .cluster
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            return Err(ConfigError(format!(
                "cluster must be a non-empty name of letters, digits, '.', '_' and '-', got {:?}",
                self.cluster
            )));
        }
        use crate::limits::{SEGMENT_BYTES_FLOOR, SEGMENT_BYTES_MAX};
        if !(SEGMENT_BYTES_FLOOR..=SEGMENT_BYTES_MAX).contains(&self.segment_bytes_min) {
            return Err(ConfigError(format!(
                "segment_bytes_min must be {SEGMENT_BYTES_FLOOR}..={SEGMENT_BYTES_MAX}, got {}",
                self.segment_bytes_min
            )));
        }
        let frame = self.max_request_bytes as u64;
        let shards = self.shards.max(1) as u64;
        if !(frame * shards..=1 << 50).contains(&self.unwritten_bytes_max) {
            return Err(ConfigError(format!(
                "unwritten_bytes_max must be at least one largest request ({frame} bytes) per shard ({}) and at most 2^50, got {}",
                frame * shards,
                self.unwritten_bytes_max
            )));
        }
        if !(frame..=1 << 40).contains(&self.connection_inflight_bytes_max) {
            return Err(ConfigError(format!(
                "connection_inflight_bytes_max must be {frame}..=2^40 (at least one largest request), got {}",
                self.connection_inflight_bytes_max
            )));
        }
        if self.waiting_fetch_flush_us > 60_000_000 {
            return Err(ConfigError(format!(
                "waiting_fetch_flush_us must be 0..=60000000 (a minute), got {}",
                self.waiting_fetch_flush_us
            )));
        }
        if !(1..=1_000_000).contains(&self.producers_per_partition_max) {
            return Err(ConfigError(format!(
                "producers_per_partition_max must be 1..=1000000, got {}",
                self.producers_per_partition_max
            )));
        }
        if !(64..=1 << 30).contains(&self.fd_reserve) {
            return Err(ConfigError(format!(
                "fd_reserve must be 64..=1073741824, got {}",
                self.fd_reserve
            )));
        }
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), None) | (None, Some(_)) => {
                return Err(ConfigError(
                    "tls_cert and tls_key go together: set both for TLS, or neither".into(),
                ))
            }
            (None, None) if self.tls_client_ca.is_some() => {
                return Err(ConfigError(
                    "tls_client_ca needs tls_cert and tls_key (client certificates are checked in a TLS handshake)".into(),
                ))
            }
            _ => {}
        }
        if self.tls_peer_ca.is_some() && self.tls_cert.is_none() {
            return Err(ConfigError(
                "tls_peer_ca needs tls_cert and tls_key (brokers speak TLS to each other only when their listeners do)".into(),
            ));
        }
        if self.clustered()
            && self.tls_cert.is_some()
            && self.tls_peer_ca.is_none()
            && self.tls_client_ca.is_none()
        {
            return Err(ConfigError(
                "a cluster broker with TLS listeners follows its leaders over TLS: set tls_peer_ca to the CA that signed the brokers' certificates (or tls_client_ca, which it defaults to)".into(),
            ));
        }
        self.validate_security()?;
        if self.max_connections < self.shards {
            return Err(ConfigError(format!(
                "max_connections must be at least one per shard ({}), got {}",
                self.shards, self.max_connections
            )));
        }
        for (name, value) in [
            ("handshake_timeout_ms", self.handshake_timeout_ms),
            ("idle_timeout_ms", self.idle_timeout_ms),
            ("frame_timeout_ms", self.frame_timeout_ms),
        ] {
            if !(100..=86_400_000).contains(&value) {
                return Err(ConfigError(format!(
                    "{name} must be 100..=86400000, got {value}"
                )));
            }
        }
        if !(2..=3600).contains(&self.etcd_lease_ttl_s) {
            return Err(ConfigError(format!(
                "etcd_lease_ttl_s must be 2..=3600, got {}",
                self.etcd_lease_ttl_s
            )));
        }
        if self.group_members_cache_ms > 60_000 {
            return Err(ConfigError(format!(
                "group_members_cache_ms must be 0..=60000, got {}",
                self.group_members_cache_ms
            )));
        }
        if !(100..=600_000).contains(&self.etcd_timeout_ms) {
            return Err(ConfigError(format!(
                "etcd_timeout_ms must be 100..=600000, got {}",
                self.etcd_timeout_ms
            )));
        }
        self.topic_settings(&protocol::codec::TopicSettings::default())
            .map(|_| ())
            .map_err(|e| ConfigError(e.to_string()))
    }

    /// How to reach and log in to etcd.
    pub fn etcd_access(&self) -> coordinator::registry::EtcdAccess {
        coordinator::registry::EtcdAccess {
            ca: self.etcd_ca.clone(),
            cert: self.etcd_cert.clone(),
            key: self.etcd_key.clone(),
            user: self.etcd_user.clone(),
            password_file: self.etcd_password_file.clone(),
        }
    }

    fn validate_security(&self) -> Result<(), ConfigError> {
        self.etcd_access()
            .check(&self.etcd)
            .map_err(|e| ConfigError(e.to_string()))?;
        let needs_certificates = matches!(
            self.authentication,
            Authentication::Tls | Authentication::ScramOrTls
        );
        if needs_certificates && self.tls_client_ca.is_none() {
            return Err(ConfigError(format!(
                "authentication = {:?} takes the principal from a TLS client certificate: set tls_cert, tls_key and tls_client_ca",
                self.authentication.word()
            )));
        }
        crate::auth::principal_rules::MappingRules::parse(&self.tls_principal_mapping_rules)
            .map_err(|e| ConfigError(e.to_string()))?;
        for user in &self.super_users {
            protocol::acl::check_principal(user)
                .map_err(|e| ConfigError(format!("super_users: {e}")))?;
        }
        for principal in self.quotas.keys() {
            protocol::acl::check_principal(principal)
                .map_err(|e| ConfigError(format!("quotas: {e}")))?;
        }
        if self.login_failure_delay_ms > 10_000 {
            return Err(ConfigError(format!(
                "login_failure_delay_ms must be 0..=10000, got {}",
                self.login_failure_delay_ms
            )));
        }
        if self.login_failures_per_minute_max == 0 {
            return Err(ConfigError(
                "login_failures_per_minute_max must be at least 1".into(),
            ));
        }
        if !(1..=10_000_000).contains(&self.login_failure_addresses_max) {
            return Err(ConfigError(format!(
                "login_failure_addresses_max must be 1..=10000000, got {}",
                self.login_failure_addresses_max
            )));
        }
        match (&self.broker_user, &self.broker_password_file) {
            (Some(user), Some(_)) => protocol::scram::check_user(user)
                .map_err(|e| ConfigError(format!("broker_user: {e}")))?,
            (None, None) => {}
            _ => {
                return Err(ConfigError(
                    "broker_user and broker_password_file go together: set both, or neither".into(),
                ))
            }
        }
        if self.clustered()
            && self.authentication == Authentication::Scram
            && self.broker_user.is_none()
        {
            return Err(ConfigError(
                "authentication = \"scram\" in a cluster: set broker_user and broker_password_file, the login this broker's followers use with their leaders".into(),
            ));
        }
        // Without a login a follower is User:ANONYMOUS, and a follower's
        // fetch needs alter on the cluster: replication would stop.
        if self.clustered()
            && self.authorization
            && self.authentication == Authentication::None
            && self.broker_user.is_none()
        {
            return Err(ConfigError(
                "authorization in a cluster: followers fetch as their broker's user, and without one they are User:ANONYMOUS, which may not replicate; set broker_user and broker_password_file (a super user)".into(),
            ));
        }
        Ok(())
    }

    /// Connections one shard serves at once.
    pub fn max_connections_per_shard(&self) -> usize {
        self.max_connections.div_ceil(self.shards.max(1))
    }

    /// True when the broker is a member of an etcd cluster.
    pub fn clustered(&self) -> bool {
        !self.etcd.is_empty()
    }

    /// The settings of a topic read from the registry: as
    /// [`Self::topic_settings`], except that a segment size below today's
    /// `segment_bytes_min` (a topic created under an older, lower limit) is
    /// raised to it rather than keeping the topic from opening.
    pub fn stored_topic_settings(
        &self,
        overrides: &protocol::codec::TopicSettings,
    ) -> Result<LogSettings, SettingsError> {
        let mut overrides = *overrides;
        if overrides.segment_bytes != 0 && overrides.segment_bytes < self.segment_bytes_min {
            overrides.segment_bytes = self.segment_bytes_min;
        }
        self.topic_settings(&overrides)
    }

    /// A topic's effective settings: its overrides, else the broker defaults.
    pub fn topic_settings(
        &self,
        overrides: &protocol::codec::TopicSettings,
    ) -> Result<LogSettings, SettingsError> {
        // The registries store values as TOML or JSON integers, which stop at
        // 2^63 - 1; anything larger is a client's mistake, not a disk failure.
        for (name, value) in [
            ("retention_ms", overrides.retention_ms),
            ("retention_bytes", overrides.retention_bytes),
            ("segment_bytes", overrides.segment_bytes),
            ("flush_messages", overrides.flush_messages),
            ("flush_interval_ms", overrides.flush_interval_ms),
        ] {
            if value > i64::MAX as u64 {
                return Err(SettingsError::TooLarge { name, value });
            }
        }
        let pick = |v: u64, d: u64| if v == 0 { d } else { v };
        let d = &self.topic_defaults;
        let format = match overrides.message_format {
            0 => DEFAULT_MESSAGE_FORMAT,
            n => MessageFormat::from_number(n).ok_or(SettingsError::MessageFormat(n))?,
        };
        let timestamps = match overrides.timestamp_type {
            0 => TimestampType::Create,
            n => TimestampType::from_number(n).ok_or(SettingsError::TimestampType(n))?,
        };
        if timestamps == TimestampType::LogAppend && format == MessageFormat::One {
            return Err(SettingsError::TimestampsNeedFormatTwo);
        }
        let settings = LogSettings {
            segment_bytes: pick(overrides.segment_bytes, d.segment_bytes),
            flush_messages: pick(overrides.flush_messages, d.flush_messages),
            flush_interval_ms: pick(overrides.flush_interval_ms, d.flush_interval_ms),
            retention_ms: pick(overrides.retention_ms, d.retention_ms),
            retention_bytes: pick(overrides.retention_bytes, d.retention_bytes),
            format,
            timestamps,
            producers_max: self.producers_per_partition_max,
            waiting_fetch_flush: self.flush_for_waiting_fetches.then_some(
                std::time::Duration::from_micros(self.waiting_fetch_flush_us),
            ),
        };
        let min = self.segment_bytes_min;
        let max = crate::limits::SEGMENT_BYTES_MAX;
        if !(min..=max).contains(&settings.segment_bytes) {
            return Err(SettingsError::SegmentBytes {
                min,
                max,
                value: settings.segment_bytes,
            });
        }
        if settings.flush_interval_ms == 0 || settings.flush_interval_ms > FLUSH_INTERVAL_MS_MAX {
            return Err(SettingsError::FlushInterval(settings.flush_interval_ms));
        }
        if settings.flush_messages == 0 {
            return Err(SettingsError::FlushMessages);
        }
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::codec::TopicSettings;

    #[test]
    fn segment_bytes_below_the_minimum_is_refused_on_the_wire_but_raised_from_the_registry() {
        let config = Config::default();
        let small = TopicSettings {
            segment_bytes: 4096,
            ..TopicSettings::default()
        };
        let refused = config.topic_settings(&small).unwrap_err();
        assert_eq!(
            refused,
            SettingsError::SegmentBytes {
                min: 1 << 20,
                max: crate::limits::SEGMENT_BYTES_MAX,
                value: 4096
            }
        );
        assert!(
            refused
                .to_string()
                .contains("segment_bytes must be 1048576.."),
            "{refused}"
        );
        // A topic created when the limit was lower still opens.
        let stored = config.stored_topic_settings(&small).unwrap();
        assert_eq!(stored.segment_bytes, 1 << 20);
        // The broker's own minimum has a floor.
        let too_low = Config {
            segment_bytes_min: 512,
            ..Config::default()
        };
        assert!(too_low
            .validate()
            .unwrap_err()
            .to_string()
            .contains("segment_bytes_min must be 1024.."));
    }

    #[test]
    fn security_settings_that_cannot_work_are_refused_with_what_to_set() {
        let cluster = |edit: fn(&mut Config)| {
            let mut config = Config {
                etcd: vec!["http://127.0.0.1:2379".into()],
                ..Config::default()
            };
            edit(&mut config);
            config.validate().map_err(|e| e.to_string())
        };
        let refused = cluster(|c| c.authorization = true).unwrap_err();
        assert!(refused.contains("set broker_user"), "{refused}");
        let refused = cluster(|c| c.authentication = Authentication::Scram).unwrap_err();
        assert!(refused.contains("broker_password_file"), "{refused}");
        let refused = cluster(|c| c.authentication = Authentication::Tls).unwrap_err();
        assert!(refused.contains("tls_client_ca"), "{refused}");
        let refused = cluster(|c| c.super_users = vec!["admin".into()]).unwrap_err();
        assert!(refused.contains("User:NAME"), "{refused}");
        let refused = cluster(|c| c.etcd_cert = Some("c.pem".into())).unwrap_err();
        assert!(refused.contains("etcd_key"), "{refused}");
        let refused = cluster(|c| c.etcd_ca = Some("ca.pem".into())).unwrap_err();
        assert!(refused.contains("https://"), "{refused}");
        let fine = cluster(|c| {
            c.authorization = true;
            c.super_users = vec!["User:admin".into()];
            c.broker_user = Some("admin".into());
            c.broker_password_file = Some("admin.pw".into());
        });
        assert!(fine.is_ok(), "{fine:?}");
    }

    #[test]
    fn the_waiting_fetch_flush_reaches_the_logs_and_is_bounded() {
        let config = Config::default();
        let settings = config.topic_settings(&TopicSettings::default()).unwrap();
        assert_eq!(
            settings.waiting_fetch_flush,
            Some(std::time::Duration::from_millis(2))
        );
        let off = Config {
            flush_for_waiting_fetches: false,
            ..Config::default()
        };
        let settings = off.topic_settings(&TopicSettings::default()).unwrap();
        assert_eq!(settings.waiting_fetch_flush, None);
        let hour = Config {
            waiting_fetch_flush_us: 3_600_000_000,
            ..Config::default()
        };
        let refused = hour.validate().unwrap_err().to_string();
        assert!(
            refused.contains("waiting_fetch_flush_us must be 0..=60000000"),
            "{refused}"
        );
    }
}
