//! `broker`: flags + TOML → Config → run. Exit codes: 0 after a clean stop,
//! 1 on any error (one line on stderr saying what and why).

use anyhow::Context;
use broker::config::Config;
use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;

/// The ringlog broker: the Kafka paper's partitioned log on io_uring shards.
#[derive(Parser, Debug)]
#[command(name = "broker", version = broker::VERSION, about)]
struct Args {
    /// Where segments and the topic registry live.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Shard 0's address; shard i listens on PORT+i (port 0: ephemeral ports).
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<SocketAddr>,
    /// Also speak Kafka's protocol: shard i on PORT+i, each shard its own
    /// Kafka node [default: off].
    #[arg(long, value_name = "HOST:PORT")]
    kafka_listen: Option<SocketAddr>,
    /// How long an empty Kafka group's first join waits for others
    /// [default: 3000, as Kafka's group.initial.rebalance.delay.ms].
    #[arg(long, value_name = "MS")]
    kafka_group_initial_delay_ms: Option<u64>,
    /// Host that Metadata advertises to clients [default: the --listen IP].
    #[arg(long, value_name = "HOST")]
    advertise_host: Option<String>,
    /// Number of shards, one pinned core each [default: available cores].
    #[arg(long, value_name = "N")]
    shards: Option<usize>,
    /// etcd endpoints: run as a member of a cluster [default: standalone].
    #[arg(long, value_name = "URL[,URL]")]
    etcd: Option<String>,
    /// The cluster's name (its etcd key prefix) [default: ringlog].
    #[arg(long, value_name = "NAME")]
    cluster: Option<String>,
    /// This broker's id.
    #[arg(long, value_name = "ID")]
    broker_id: Option<u32>,
    /// The rack or zone this broker stands in: replicated topics created
    /// afterwards put their copies in as many racks as possible.
    #[arg(long, value_name = "NAME")]
    rack: Option<String>,
    /// Join the cluster that etcd holds now (creating its id if it holds
    /// none), although this data directory belongs to another, and register
    /// the topics found on disk there again, with their data. For after a
    /// deliberate rebuild of etcd; give it for one start only.
    #[arg(long)]
    join_new_cluster: bool,
    /// Pin shard i to CPU (FIRST_CPU + i) mod cpus [default: 0]; give each
    /// broker on one machine its own.
    #[arg(long, value_name = "CPU")]
    first_cpu: Option<usize>,
    /// Serve Prometheus metrics on this address.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_listen: Option<SocketAddr>,
    /// Locked memory per shard for io_uring buffers, in bytes.
    #[arg(long, value_name = "BYTES")]
    io_memory: Option<usize>,
    /// TLS: the broker's certificate chain (PEM); with --tls-key, every
    /// listener speaks TLS only.
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// TLS: the certificate's private key (PEM).
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// TLS: require client certificates signed by these CAs (PEM).
    #[arg(long, value_name = "FILE")]
    tls_client_ca: Option<PathBuf>,
    /// TLS between brokers: the CA that signed the other brokers'
    /// certificates (PEM; default: --tls-client-ca).
    #[arg(long, value_name = "FILE")]
    tls_peer_ca: Option<PathBuf>,
    /// TOML configuration file; flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RINGLOG_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    if let Err(error) = run(args) {
        eprintln!("broker: error: {error:#}");
        std::process::exit(1);
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "the flags applied to the configuration one by one, then the start: a list"
)]
fn run(args: Args) -> anyhow::Result<()> {
    let faults = broker::faults::Faults::init_from_env()?;
    if faults != broker::faults::Faults::default() {
        tracing::warn!(
            ?faults,
            "test faults injected ({})",
            broker::faults::FAULTS_ENV
        );
    }
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading config {}", path.display()))?;
            toml::from_str::<Config>(&text)
                .with_context(|| format!("parsing config {}", path.display()))?
        }
        None => Config::default(),
    };
    if let Some(v) = args.data_dir {
        config.data_dir = v;
    }
    if let Some(v) = args.listen {
        config.listen = v;
    }
    if let Some(v) = args.kafka_listen {
        config.kafka_listen = Some(v);
    }
    if let Some(v) = args.kafka_group_initial_delay_ms {
        config.kafka_group_initial_delay_ms = v;
    }
    if let Some(v) = args.advertise_host {
        config.advertise_host = Some(v);
    }
    if let Some(v) = args.shards {
        config.shards = v;
    }
    if let Some(v) = args.broker_id {
        config.broker_id = v;
    }
    if let Some(v) = args.rack {
        config.rack = Some(v);
    }
    if let Some(v) = args.first_cpu {
        config.first_cpu = v;
    }
    if let Some(v) = args.metrics_listen {
        config.metrics_listen = Some(v);
    }
    if let Some(v) = args.io_memory {
        config.io_memory_bytes = v;
    }
    if let Some(etcd) = args.etcd {
        config.etcd = etcd
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(String::from)
            .collect();
        if config.etcd.is_empty() {
            anyhow::bail!("--etcd {etcd:?} names no endpoint");
        }
    }
    if let Some(v) = args.cluster {
        config.cluster = v;
    }
    config.join_new_cluster = args.join_new_cluster;
    if let Some(v) = args.tls_cert {
        config.tls_cert = Some(v);
    }
    if let Some(v) = args.tls_key {
        config.tls_key = Some(v);
    }
    if let Some(v) = args.tls_client_ca {
        config.tls_client_ca = Some(v);
    }
    if let Some(v) = args.tls_peer_ca {
        config.tls_peer_ca = Some(v);
    }
    broker::broker::run(config)
}
