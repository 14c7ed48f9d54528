//! loadgen: the paper's benchmarks and custom workloads against ringlog,
//! with the reporting benchmark users expect (kafka-perf-test lines,
//! hdrhistogram percentiles, JSON, SVG charts).
//!
//! - [`paper`]: the paper's experiments beside RabbitMQ and ActiveMQ, and
//!   today's NATS JetStream and Redis Streams ([`peers`]).
//! - [`workload`]: ringlog producers and consumers; [`e2e`]: end-to-end checks;
//!   [`group`]: a consumer group's members reading together; [`failover`]:
//!   how soon a group consumes a member's partitions again after it goes;
//!   [`group_load`]: the coordinator's load from one large group.
//! - [`stats`], [`report`], [`chart`]: counting and presenting.
//! - [`broker_process`]: a standalone broker started on demand;
//!   [`cluster_process`]: etcd and brokers, for [`replication`]'s figures.
#![deny(missing_docs)]
#![allow(
    clippy::too_many_lines,
    reason = "a benchmark is one experiment read top to bottom: its phases, measurements and figures in order"
)]

pub mod broker_process;
pub mod chart;
pub mod cluster_process;
pub mod e2e;
pub mod failover;
pub mod formats;
pub mod group;
pub mod group_load;
pub mod isolation;
pub mod kafka_perf;
pub mod log_lines;
pub mod loopback;
pub mod mirror;
pub mod paper;
pub mod peer_replication;
pub mod peers;
pub mod replication;
pub mod report;
pub mod security;
pub mod stats;
pub mod sustained;
pub mod sweep;
pub mod workload;

use protocol::client::{Client, ClientConfig, ClientError, Login, TlsConfig};

static LOGIN: std::sync::RwLock<Option<Login>> = std::sync::RwLock::new(None);

/// Sets the login of every loadgen connection from now on (`loadgen --user
/// NAME --password-file FILE`, or `RINGLOG_USER` and
/// `RINGLOG_PASSWORD_FILE`, at start; `loadgen security` its own user).
pub fn set_login(login: Option<Login>) {
    *LOGIN.write().unwrap_or_else(|p| p.into_inner()) = login;
}

/// The client settings of every loadgen connection: the defaults, with TLS
/// when `RINGLOG_TLS_CA` names a CA file (and `RINGLOG_TLS_CERT` /
/// `RINGLOG_TLS_KEY` a client certificate) — the same variables as the
/// `ringlog` CLI's `--tls-*` flags — and the login of [`set_login`].
pub fn client_config() -> Result<ClientConfig, ClientError> {
    let var = |name| std::env::var_os(name).map(std::path::PathBuf::from);
    let tls = match var("RINGLOG_TLS_CA") {
        None => None,
        Some(ca) => {
            let mut tls = TlsConfig::new(&ca)?;
            if let (Some(cert), Some(key)) = (var("RINGLOG_TLS_CERT"), var("RINGLOG_TLS_KEY")) {
                tls = tls.with_client_certificate(&cert, &key)?;
            }
            Some(tls)
        }
    };
    Ok(ClientConfig {
        tls,
        login: LOGIN.read().unwrap_or_else(|p| p.into_inner()).clone(),
        ..ClientConfig::default()
    })
}

/// A client of `brokers` with [`client_config`].
pub fn connect(brokers: &str) -> Result<Client, ClientError> {
    Client::with_config(brokers, client_config()?)
}
