//! Every bound the broker enforces, in one place.

/// Largest request frame the broker reads (a produce of many messages
/// fits); the protocol's limit, and the most `max_request_bytes` may be.
pub const REQUEST_FRAME_BYTES_MAX: usize = 16 * 1024 * 1024;
/// The least `max_request_bytes` may be: every header fits, and a message
/// of some size.
pub const REQUEST_FRAME_BYTES_MIN: usize = 64 * 1024;
/// Default largest stored message (length field + 4).
pub const MESSAGE_BYTES_MAX_DEFAULT: usize = 1024 * 1024;
/// Largest fetch chunk a client may ask for.
pub const FETCH_BYTES_MAX: u32 = 16 * 1024 * 1024;
/// Longest fetch long-poll.
pub const FETCH_WAIT_MS_MAX: u32 = 60_000;
/// Read buffer of a connection; frames larger than this grow it up to the frame limit.
pub const READ_BUFFER_BYTES: usize = 256 * 1024;
/// Read buffer of a connection that has not logged in: a Handshake or an
/// Authenticate is a few hundred bytes (a larger one grows it, up to
/// `HANDSHAKE_FRAME_BYTES_MAX`). It becomes `READ_BUFFER_BYTES` at login,
/// so a stranger's connection costs 4 KiB of buffer, not 256.
pub const LOGIN_READ_BUFFER_BYTES: usize = 4 * 1024;
/// The largest frame a connection may declare before its Handshake (a
/// Handshake is a few dozen bytes): a stranger cannot make the broker
/// reserve a request-sized buffer with 16 bytes.
pub const HANDSHAKE_FRAME_BYTES_MAX: usize = 64 * 1024;
/// Forwarded requests queued for one shard before senders wait.
pub const FORWARD_QUEUE_MAX: usize = 4096;
/// A segment file nobody wrote or read for this long is closed (reopened
/// on demand): descriptors follow the segments in use, not the data dir.
pub const SEGMENT_FILE_IDLE_MS: u64 = 10_000;
/// How often each shard looks for idle segment files.
pub const SEGMENT_FILE_CHECK_MS: u64 = 5_000;
/// Segment files one partition keeps open at most (a consumer scanning
/// old segments opens one after another; the least recently used unheld
/// one is closed past this).
pub const SEGMENT_FILES_PER_LOG_MAX: usize = 4;
/// How long start-up retries a listening address that is in use (a broker
/// killed a moment ago may hold it while its io_uring is torn down).
pub const BIND_RETRY_MS: u64 = 10_000;
/// Admin requests (create/delete topic) queued for the control thread
/// before the shards that send them wait.
pub const CONTROL_QUEUE_MAX: usize = 1024;
/// Heartbeats parked on the control thread waiting for a group change;
/// past this, heartbeats are answered at once.
pub const GROUP_WAITERS_MAX: usize = 10_000;
/// The longest a topic change waits for every live broker to serve it
/// before it is answered NOT_YET_SERVED (the lease TTL plus an etcd
/// timeout when that is shorter): well inside a client's 30 s request
/// timeout.
pub const SERVED_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(15);
/// Group members' sessions one broker keeps (their liveness is in its
/// memory); past this, a join or take-over through it is refused with
/// OVERLOADED and the client goes to another broker.
pub const GROUP_SESSIONS_MAX: usize = 100_000;
/// Shortest and longest session timeout a group member may choose.
pub const GROUP_SESSION_TIMEOUT_MS_MIN: u32 = 2_000;
/// Longest session timeout a group member may choose.
pub const GROUP_SESSION_TIMEOUT_MS_MAX: u32 = 300_000;
/// Longest heartbeat long-poll.
pub const GROUP_HEARTBEAT_WAIT_MS_MAX: u32 = 60_000;
/// Most topics one member may subscribe to, and most partitions or
/// offsets in one claim, release or commit.
pub const GROUP_ITEMS_MAX: usize = 10_000;
/// Appended but unwritten bytes of one partition above which a producer's
/// connection stops being read until the disk catches up.
pub const PENDING_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// Most partitions one topic may have.
pub const PARTITIONS_MAX: u32 = 10_000;
/// The least `segment_bytes_min` may be set to (tests use small segments).
pub const SEGMENT_BYTES_FLOOR: u64 = 1024;
/// Largest segment size.
pub const SEGMENT_BYTES_MAX: u64 = 64 * 1024 * 1024 * 1024;
/// Bytes copied through userspace when the socket is full (see net/sendfile.rs).
pub const SENDFILE_FALLBACK_BYTES: usize = 4096;
/// Locked memory glommio registers per shard for io_uring buffers; the
/// machine's RLIMIT_MEMLOCK (8 MiB here) must cover every shard.
pub const IO_MEMORY_BYTES_DEFAULT: usize = 1024 * 1024;

const _: () = assert!(SEGMENT_BYTES_FLOOR <= SEGMENT_BYTES_MAX);
const _: () = assert!(MESSAGE_BYTES_MAX_DEFAULT + 64 <= REQUEST_FRAME_BYTES_MAX);
const _: () = assert!(REQUEST_FRAME_BYTES_MAX <= protocol::frame::FRAME_BYTES_MAX);
const _: () = assert!(READ_BUFFER_BYTES <= REQUEST_FRAME_BYTES_MAX);

/// Kafka node ids per broker on the Kafka listener: shard `s` of broker `b`
/// is node `b × 1024 + s` (shards are at most 256).
pub const KAFKA_NODES_PER_BROKER: i32 = 1024;

/// The longest an empty Kafka group's first join may wait for others.
pub const KAFKA_GROUP_INITIAL_DELAY_MS_MAX: u64 = 300_000;

/// Kafka groups one shard coordinates at most: past it, a new group's
/// requests are answered COORDINATOR_NOT_AVAILABLE.
pub const KAFKA_GROUPS_PER_SHARD_MAX: usize = 10_000;

/// Members of one Kafka group at most (Kafka's `group.max.size` is
/// unbounded by default; a bound here keeps a shard's memory bounded).
pub const KAFKA_GROUP_MEMBERS_MAX: usize = 1_000;

/// A member's session timeout, in Kafka's broker defaults' range
/// (`group.min.session.timeout.ms`, `group.max.session.timeout.ms`).
pub const KAFKA_SESSION_TIMEOUT_MS: std::ops::RangeInclusive<i32> = 6_000..=1_800_000;

/// The bytes of a committed offset's metadata string
/// (Kafka's `offset.metadata.max.bytes`).
pub const KAFKA_OFFSET_METADATA_BYTES_MAX: usize = 4096;

/// Partitions in one OffsetCommit or OffsetFetch at most.
pub const KAFKA_OFFSETS_PER_REQUEST_MAX: usize = 10_000;

/// The bytes of one member's protocol metadata and of one assignment.
pub const KAFKA_GROUP_BYTES_MAX: usize = 1 << 20;

/// The bytes one shard's Kafka groups hold for their clients at most
/// (members' metadata and assignments, pending ids): past it, a join is
/// answered GROUP_MAX_SIZE_REACHED. A consumer's subscription is tens of
/// bytes a topic, so this is room for many thousands of members.
pub const KAFKA_GROUPS_BYTES_MAX: usize = 64 << 20;
