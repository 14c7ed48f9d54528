//! The ringlog broker: the 2011 Kafka paper's broker on io_uring shards.
//!
//! ```text
//!                 ┌──────────── broker process ────────────┐
//!   clients ──►   │ shard 0 (core 0)      shard 1 (core 1) │   main thread:
//!   port P        │  listener :P           listener :P+1   │   signals, start/stop
//!   port P+1      │  connections           connections     │   metrics thread:
//!                 │  partition logs        partition logs  │   Prometheus text
//!                 │  flusher, retention    flusher, ...    │
//!                 │        ◄── inboxes (flume) ──►         │
//!                 └────────────────────────────────────────┘
//! ```
//!
//! - **Data plane:** one glommio `LocalExecutor` per shard, pinned to a core.
//!   A partition belongs to exactly one shard for its whole life
//!   ([`shard::placement`]); its log ([`storage`]) lives in that shard's
//!   memory, and nothing on the produce/fetch path locks or crosses threads.
//! - **Routing:** Metadata names each partition's shard port, so shard-aware
//!   clients go straight to the owner. A request that lands elsewhere is
//!   forwarded to the owner over its inbox ([`handler::forward`]); a forwarded
//!   fetch still ends in sendfile on the connection's shard.
//! - **Storage:** the paper's append-only log of segment files; offsets are
//!   byte positions; flushed data only is visible ([`storage`]).
//! - **Fetch:** zero-copy with sendfile on a non-blocking socket ([`net::sendfile`]).
//! - **Control plane:** one control thread (a current-thread tokio runtime)
//!   owns the topic registry ([`control`]); shards ask it over a channel and
//!   it tells them, over their inboxes, to open or drop partitions. A shard
//!   never waits on the registry. Standalone, the registry is
//!   `<data-dir>/topics.toml`.
//!
//! | room | what |
//! |---|---|
//! | [`storage`] | the log: segments (a sparse batch index for format 2), writer and flush rounds, recovery, retention, leader epochs, the disk driver, the in-memory disk |
//! | [`reply`] | what a request is answered with (the low room of the request path) |
//! | [`replica`] | replication: pure rules, the copy over the storage seam, the leader's and follower's sides and tasks |
//! | [`auth`] | logins, their limits, access control, quotas, sessions |
//! | [`shard`] | one executor's partitions, copies and timers |
//! | [`handler`] | one file per request, and ringlog's protocol as a front end (`native`, `opening`, `admission`) |
//! | [`kafka`] | Kafka's wire protocol as a second front end on the same shards |
//! | [`net`] | transport only: listeners, connections, TLS, sendfile; [`net::front`] is what a protocol provides |
//! | [`control`] | the control thread and the registry |
//! | [`broker`], [`config`], [`metrics`], [`mailbox`], [`limits`], [`topic_error`] | start and stop, configuration, metrics, messages between threads, bounds, why a shard could not take a topic |
#![warn(missing_docs)]

/// This build: the crate version and the git revision it was built from
/// (`-dirty` when the sources differed), as `--version` prints it and the
/// handshake reports it.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("RINGLOG_GIT_REVISION"),
    ")"
);

pub mod auth;
pub mod broker;
pub mod config;
pub mod control;
pub mod durable_file;
pub mod faults;
pub mod handler;
pub mod kafka;
pub mod limits;
pub mod log_limit;
pub mod mailbox;
pub mod metrics;
pub mod net;
pub mod notify;
pub mod replica;
pub mod reply;
pub mod shard;
pub mod storage;
pub mod topic_error;
pub mod window;
