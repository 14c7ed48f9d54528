//! `loadgen`: the paper's benchmarks side by side with its competitors, and
//! custom producer / consumer / end-to-end workloads against ringlog.
#![allow(
    clippy::too_many_lines,
    reason = "a benchmark is one experiment read top to bottom: its phases, measurements and figures in order"
)]

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use loadgen::chart::{self, Series};
use loadgen::e2e::{self, E2eSpec};
use loadgen::failover::{failover, FailoverSpec};
use loadgen::group::{consume_group, GroupSpec};
use loadgen::paper::{self, PaperSpec, System};
use loadgen::peer_replication::Peer;
use loadgen::peers::{activemq, kafka, nats, rabbitmq, redis_streams};
use loadgen::report::{write_json, Environment};
use loadgen::stats::{measure, Summary};
use loadgen::sweep::{self, SweepSpec};
use loadgen::workload::{self, ConsumeSpec, Length, ProduceSpec};
use protocol::client::AckMode;
use protocol::client::StartFrom;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "loadgen",
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("RINGLOG_GIT_REVISION"), ")"),
    about = "Benchmark ringlog: the paper's experiments and custom workloads"
)]
struct Cli {
    /// ringlog broker addresses, comma-separated. `paper` starts its own
    /// standalone broker when this is absent; the other commands default to
    /// 127.0.0.1:9092.
    #[arg(long, env = "RINGLOG_BROKERS", global = true)]
    brokers: Option<String>,
    /// Log in as this user (SCRAM-SHA-256) to brokers that need it, with
    /// --password-file.
    #[arg(long, env = "RINGLOG_USER", value_name = "NAME", global = true)]
    user: Option<String>,
    /// With --user: the file whose first line is the password.
    #[arg(
        long,
        env = "RINGLOG_PASSWORD_FILE",
        value_name = "FILE",
        global = true
    )]
    password_file: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum Acks {
    None,
    Written,
    Flushed,
    /// Flushed by every in-sync replica (a replicated topic).
    All,
}

impl Acks {
    fn mode(self) -> AckMode {
        match self {
            Acks::None => AckMode::None,
            Acks::Written => AckMode::Written,
            Acks::Flushed => AckMode::Flushed,
            Acks::All => AckMode::All,
        }
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Reproduce the paper's producer and consumer experiments, side by side
    /// with RabbitMQ and ActiveMQ (start them with deploy/peers.sh).
    Paper(PaperArgs),
    /// Producers sending fixed-size messages.
    Produce(ProduceArgs),
    /// Consumers reading a topic from the start.
    Consume(ConsumeArgs),
    /// Producers and consumers at once: latency, loss, duplicates, order.
    E2e(E2eArgs),
    /// Latency under load: the maximum end-to-end rate, then fixed-rate e2e
    /// runs at fractions of it; publish and e2e latency percentiles against
    /// throughput, per ack mode (the OpenMessaging Benchmark's view).
    Sweep(SweepArgs),
    /// A consumer group's takeover time after a member's SIGKILL and after
    /// a clean leave (cluster only; runs `ringlog consume --group` members).
    Failover(FailoverArgs),
    /// Replication's figures on a local cluster this starts itself (etcd
    /// and three brokers; --brokers is not used): R=1 acks=written against
    /// R=3 acks=written and acks=all (throughput, then publish latency at a
    /// fixed rate), consuming a three-copy topic, the time from a leader's
    /// SIGKILL to acks=all answered again, and an empty follower catching
    /// up — each with the CPU of every process.
    Replication(ReplicationArgs),
    /// Mirroring between two clusters (two standalone brokers this starts
    /// itself): the mirror's rate against the source's own consume rate,
    /// and produce-to-target latency through a running mirror.
    Mirror(MirrorArgs),
    /// The coordinator's load from one large consumer group, on local
    /// clusters this starts itself (--brokers is not used): every member on
    /// the first broker without the member cache, then with it, then
    /// members spread over three brokers; heartbeats/s, latency and CPU
    /// per heartbeat.
    GroupLoad(GroupLoadArgs),
    /// What access control costs: produce and consume through a broker
    /// with security off and one with SCRAM logins and authorization on
    /// (two standalone brokers this starts itself; --brokers is not used).
    Security(SecurityArgs),
    /// Message format 2 against format 1 (the paper's three experiments on
    /// a topic of each, alternating) and format 2's codecs on JSON log
    /// lines (bytes stored, ratio, msg/s and CPU per message of each side),
    /// on a standalone broker this starts itself (--brokers is not used).
    Formats(FormatsArgs),
    /// The same Kafka clients against ringlog's Kafka listener and Apache
    /// Kafka 4.4 in one run: Kafka's ProducerPerformance and
    /// ConsumerPerformance, and kcat (librdkafka), on one copy (a
    /// standalone broker this starts beside `deploy/peers.sh start kafka`)
    /// and three (a cluster this starts beside `start kafka-cluster`):
    /// msg/s, MB/s, latency percentiles, CPU per message of each broker,
    /// ringlog's sendfile share.
    KafkaPerf(KafkaPerfArgs),
    /// Produce past the page cache: the disk's own rates with dd (O_DIRECT
    /// and buffered), a standalone ringlog broker and Kafka 4.4 (`deploy/
    /// peers.sh start kafka`) each as fast as one producer goes for
    /// --seconds, the warm-up not counted; ratios, CPU per message and a
    /// chart of the rate over time.
    Sustained(SustainedArgs),
    /// The ceiling for one consumer on this host: sendfile of a cached file
    /// through a loopback TCP connection to a reader (no broker, no
    /// parsing), best of several rounds.
    Loopback {
        /// Bytes per round.
        #[arg(long, default_value_t = 2 << 30)]
        bytes: u64,
        /// Rounds (the best is reported).
        #[arg(long, default_value_t = 3)]
        rounds: u32,
    },
    /// Redraw the charts of an earlier `paper` run from its paper.json.
    Replot {
        /// The paper.json to read.
        json: PathBuf,
        /// Where the charts go (default: beside the JSON).
        #[arg(long)]
        plot: Option<PathBuf>,
    },
}

#[derive(Args, Debug)]
struct PaperArgs {
    /// Messages per experiment (the paper: 10 million).
    #[arg(long, alias = "num-records", default_value_t = 10_000_000)]
    messages: u64,
    /// Payload bytes (the paper: 200).
    #[arg(long, alias = "record-size", default_value_t = 200)]
    size: usize,
    /// Systems to run, comma-separated.
    #[arg(long, default_value = "ringlog,rabbitmq,activemq,nats,redis,kafka")]
    systems: String,
    /// Where the table, JSON and charts go.
    #[arg(long, default_value = "loadgen-paper")]
    out: PathBuf,
    /// Write the JSON report here (default: OUT/paper.json).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write the SVG charts here (default: OUT).
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// Shards of the broker loadgen starts (without --brokers).
    #[arg(long, default_value_t = std::thread::available_parallelism().map_or(1, |n| n.get()))]
    shards: usize,
    /// RabbitMQ's AMQP URL.
    #[arg(long, env = "RINGLOG_RABBITMQ_URL", default_value = rabbitmq::DEFAULT_URL)]
    rabbitmq_url: String,
    /// ActiveMQ's STOMP address.
    #[arg(long, env = "RINGLOG_ACTIVEMQ_ADDRESS", default_value = activemq::DEFAULT_ADDRESS)]
    activemq_address: String,
    /// NATS's address (JetStream enabled).
    #[arg(long, env = "RINGLOG_NATS_ADDRESS", default_value = nats::DEFAULT_ADDRESS)]
    nats_address: String,
    /// Redis's URL.
    #[arg(long, env = "RINGLOG_REDIS_URL", default_value = redis_streams::DEFAULT_URL)]
    redis_url: String,
    /// Kafka's bootstrap address (its jars and loadgen's driver are under
    /// --peers-dir: `deploy/peers.sh install kafka`).
    #[arg(long, env = "RINGLOG_KAFKA_ADDRESS", default_value = kafka::DEFAULT_ADDRESS)]
    kafka_address: String,
    /// The client driving Kafka: java (Kafka's own), or librdkafka (in a
    /// loadgen built with `--features librdkafka`). Kafka's own producer
    /// defaults always run on the Java client.
    #[arg(long, default_value = "java")]
    kafka_client: String,
    /// deploy/peers.sh's data directory, to measure the peers' bytes on disk.
    #[arg(long, env = "RINGLOG_PEERS_DIR", default_value = "/tmp/ringlog-peers")]
    peers_dir: PathBuf,
    /// ringlog consumer fetch size (the paper: ~200 KB).
    #[arg(long, default_value_t = 200 * 1024)]
    fetch_bytes: u32,
}

#[derive(Args, Debug, Serialize)]
struct Common {
    /// Topic.
    #[arg(long, default_value = "loadgen")]
    topic: String,
    /// Messages in all (includes warm-up).
    #[arg(long, alias = "num-records")]
    messages: Option<u64>,
    /// Run this many seconds (warm-up included) instead of a message count.
    #[arg(long, conflicts_with = "messages")]
    duration: Option<f64>,
    /// Seconds at the start that are not counted.
    #[arg(long, default_value_t = 0.0)]
    warmup: f64,
    /// Write every figure and the environment as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write SVG charts (throughput over time, latency percentiles) here.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
}

impl Common {
    fn length(&self) -> Length {
        match (self.messages, self.duration) {
            (_, Some(secs)) => Length::Duration(Duration::from_secs_f64(secs)),
            (Some(n), None) => Length::Messages(n),
            (None, None) => Length::Messages(1_000_000),
        }
    }
}

#[derive(Args, Debug, Serialize)]
struct ProduceArgs {
    #[command(flatten)]
    #[serde(flatten)]
    common: Common,
    /// Partitions of a topic created by this run.
    #[arg(long, default_value_t = 1)]
    partitions: u32,
    /// Payload bytes per message.
    #[arg(long, alias = "record-size", default_value_t = 200)]
    size: usize,
    /// Messages per produce request.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Producer threads.
    #[arg(long, default_value_t = 1)]
    producers: usize,
    /// Fixed total rate in messages/s; latency is measured from each
    /// message's intended send time. -1 or absent: as fast as possible.
    #[arg(long, alias = "throughput", allow_negative_numbers = true)]
    rate: Option<f64>,
    /// Acknowledgement to wait for (latency is measured with written/flushed).
    #[arg(long, value_enum, default_value = "none")]
    acks: Acks,
    /// Send through the bootstrap port and let the broker forward.
    #[arg(long)]
    no_shard_aware: bool,
    /// A topic this run creates stores this message format (1: the
    /// paper's messages, 2: Kafka's record batches; 0: the broker's
    /// default).
    #[arg(long, default_value_t = 0)]
    message_format: u32,
    /// Format 2 with acks: do not number the batches (the producer is
    /// idempotent by default there).
    #[arg(long)]
    no_idempotence: bool,
}

#[derive(Args, Debug, Serialize)]
struct ConsumeArgs {
    #[command(flatten)]
    #[serde(flatten)]
    common: Common,
    /// Bytes per fetch.
    #[arg(long, default_value_t = 200 * 1024)]
    fetch_bytes: u32,
    /// Chunks a consumer of a single partition fetches ahead on a thread of
    /// its own while it checks and counts the last one (0: one fetch at a
    /// time, the paper's consumer). Memory: this many chunks of
    /// --fetch-bytes, plus two. Off by default: with the broker on the same
    /// two cores it is slower (loadgen/results/2026-12-01-vm/prefetch).
    #[arg(long, default_value_t = 0)]
    prefetch: usize,
    /// Consumer threads (partition p goes to consumer p mod N; with
    /// --group, N members of the group divide the partitions themselves).
    #[arg(long, default_value_t = 1)]
    consumers: usize,
    /// Consume as members of this consumer group (cluster only): every
    /// message is counted once across the group, duplicates and gaps are
    /// reported, and the group's lag at the end.
    #[arg(long)]
    group: Option<String>,
    /// With --group: where partitions without a committed offset start.
    #[arg(long, value_parser = ["earliest", "latest"], default_value = "earliest")]
    from: String,
}

#[derive(Args, Debug)]
struct ReplicationArgs {
    /// Messages per throughput run.
    #[arg(long, default_value_t = 1_000_000)]
    messages: u64,
    /// Payload bytes.
    #[arg(long, default_value_t = 200)]
    size: usize,
    /// Messages per produce request.
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Partitions of each produce topic.
    #[arg(long, default_value_t = 3)]
    partitions: u32,
    /// Messages per second of the latency runs.
    #[arg(long, default_value_t = 20_000.0)]
    latency_rate: f64,
    /// Messages per produce request of ringlog's latency runs (default:
    /// --batch; a partial batch leaves after 5 ms, so at 20,000 msg/s over
    /// 3 partitions batches of 100 wait out the 5 ms; 1 sends each message
    /// when it is due, as the peers' latency runs do).
    #[arg(long)]
    latency_batch: Option<usize>,
    /// Seconds each latency run lasts.
    #[arg(long, default_value_t = 20.0)]
    latency_seconds: f64,
    /// The brokers' etcd lease TTL (the failover figure depends on it).
    #[arg(long, default_value_t = 3)]
    lease_ttl_s: u64,
    /// Leader kills to time.
    #[arg(long, default_value_t = 5)]
    failovers: u32,
    /// Bytes an empty follower fetches again.
    #[arg(long, default_value_t = 1_000_000_000)]
    catch_up_bytes: u64,
    /// Systems measured, in order: ringlog (a cluster this starts), kafka
    /// and nats (three-node clusters started first with `deploy/peers.sh
    /// start kafka-cluster` / `nats-cluster`).
    #[arg(long, value_delimiter = ',', default_value = "ringlog", value_parser = ["ringlog", "kafka", "nats"])]
    systems: Vec<String>,
    /// Where deploy/peers.sh keeps the peers' data and pid files.
    #[arg(long, env = "RINGLOG_PEERS_DIR", default_value = "/tmp/ringlog-peers")]
    peers_dir: PathBuf,
    /// ringlog's topics in this message format (1 the paper's messages,
    /// 2 Kafka's record batches; 0: the brokers' default).
    #[arg(long, default_value_t = 0)]
    message_format: u32,
    /// Format 2: do not number the batches (the producer is idempotent by
    /// default there).
    #[arg(long)]
    no_idempotence: bool,
    /// Where the table, JSON and charts go.
    #[arg(long, default_value = "loadgen-replication")]
    out: PathBuf,
}

#[derive(Args, Debug)]
struct FormatsArgs {
    /// Messages per experiment.
    #[arg(long, default_value_t = 2_000_000)]
    messages: u64,
    /// Payload bytes (the paper's 200; the log lines' size too).
    #[arg(long, default_value_t = 200)]
    size: usize,
    /// Alternating rounds of format 1 and 2 (medians reported).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Messages per codec run.
    #[arg(long, default_value_t = 1_000_000)]
    codec_messages: u64,
    /// Messages per batch in the codec runs (Kafka's 16 KiB batch holds
    /// about 80 such lines).
    #[arg(long, default_value_t = 100)]
    codec_batch: usize,
    /// Bytes per fetch.
    #[arg(long, default_value_t = 256 * 1024)]
    fetch_bytes: u32,
    /// Shards of the broker.
    #[arg(long, default_value_t = 1)]
    shards: usize,
    /// Partitions of the acks-written topics (format 1 against format 2,
    /// numbered and not), spread over the shards.
    #[arg(long, default_value_t = 1)]
    written_partitions: u32,
    /// Where the table and JSON go.
    #[arg(long, default_value = "loadgen-formats")]
    out: PathBuf,
}

#[derive(Args, Debug)]
struct KafkaPerfArgs {
    /// Records per run.
    #[arg(long, default_value_t = 1_000_000)]
    messages: u64,
    /// Bytes per record (the paper's 200).
    #[arg(long, default_value_t = 200)]
    size: usize,
    /// Partitions of each topic.
    #[arg(long, default_value_t = 2)]
    partitions: u32,
    /// Copies measured, in order.
    #[arg(long, value_delimiter = ',', default_value = "1,3", value_parser = clap::value_parser!(u32).range(1..=3))]
    replicas: Vec<u32>,
    /// Rounds of everything, the systems' order alternating; the table
    /// shows each figure's median (of two, the lower), the JSON every round.
    #[arg(long, default_value_t = 2)]
    rounds: u32,
    /// Where deploy/peers.sh keeps Kafka's jars and nodes.
    #[arg(long, env = "RINGLOG_PEERS_DIR", default_value = "/tmp/ringlog-peers")]
    peers_dir: PathBuf,
    /// Kafka's single node (`deploy/peers.sh start kafka`).
    #[arg(long, default_value = loadgen::peers::kafka::DEFAULT_ADDRESS)]
    kafka_address: String,
    /// Kafka's three nodes (`deploy/peers.sh start kafka-cluster`).
    #[arg(long, default_value = loadgen::kafka_perf::DEFAULT_KAFKA_CLUSTER)]
    kafka_cluster: String,
    /// Where the table, the JSON and each tool's output go.
    #[arg(long, default_value = "loadgen-kafka-perf")]
    out: PathBuf,
}

#[derive(Args, Debug)]
struct SustainedArgs {
    /// Seconds each producer runs, the warm-up included.
    #[arg(long, default_value_t = 60.0)]
    seconds: f64,
    /// Seconds at the start that are not counted.
    #[arg(long, default_value_t = 15.0)]
    warmup: f64,
    /// Payload bytes per message.
    #[arg(long, default_value_t = 200)]
    size: usize,
    /// Messages per ringlog produce request.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// The ringlog broker's shards.
    #[arg(long, default_value_t = 2)]
    shards: usize,
    /// Bytes the partition keeps on each side (older segments are
    /// deleted, so a long run does not fill the disk).
    #[arg(long, default_value_t = 8_000_000_000)]
    retention_bytes: u64,
    /// Bytes each dd writes.
    #[arg(long, default_value_t = 4 << 30)]
    dd_bytes: u64,
    /// ringlog alone, without Kafka.
    #[arg(long)]
    no_kafka: bool,
    /// Skip the quiet topic beside a hot one.
    #[arg(long)]
    no_isolation: bool,
    /// The quiet topic's messages/s.
    #[arg(long, default_value_t = 20_000.0)]
    quiet_rate: f64,
    /// Seconds of each quiet run (5 of them not counted).
    #[arg(long, default_value_t = 20.0)]
    quiet_seconds: f64,
    /// Where deploy/peers.sh keeps Kafka's jars and node.
    #[arg(long, env = "RINGLOG_PEERS_DIR", default_value = "/tmp/ringlog-peers")]
    peers_dir: PathBuf,
    /// Kafka's single node (`deploy/peers.sh start kafka`).
    #[arg(long, default_value = loadgen::peers::kafka::DEFAULT_ADDRESS)]
    kafka_address: String,
    /// Where the table, the JSON and the chart go.
    #[arg(long, default_value = "loadgen-sustained")]
    out: PathBuf,
}

#[derive(Args, Debug)]
struct SecurityArgs {
    /// Messages per round.
    #[arg(long, default_value_t = 2_000_000)]
    messages: u64,
    /// Payload bytes.
    #[arg(long, default_value_t = 100)]
    size: usize,
    /// Messages per produce request (fewer: more requests, so more checks).
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Partitions.
    #[arg(long, default_value_t = 4)]
    partitions: u32,
    /// Rounds per broker, interleaved (medians reported).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Access control rules on the secured broker.
    #[arg(long, default_value_t = 1000)]
    rules: usize,
    /// Where the table and JSON go.
    #[arg(long, default_value = "loadgen-security")]
    out: PathBuf,
}

#[derive(Args, Debug)]
struct MirrorArgs {
    /// Messages preloaded into the source for the rate runs.
    #[arg(long, default_value_t = 4_000_000)]
    messages: u64,
    /// Payload bytes.
    #[arg(long, default_value_t = 100)]
    size: usize,
    /// Partitions.
    #[arg(long, default_value_t = 4)]
    partitions: u32,
    /// Seconds of each latency run.
    #[arg(long, default_value_t = 20.0)]
    latency_seconds: f64,
    /// Fractions of the mirror's rate the latency runs produce at.
    #[arg(long, value_delimiter = ',', default_value = "0.1,0.5")]
    loads: Vec<f64>,
    /// Times each rate run is repeated, interleaved (medians reported).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Where the table and JSON go.
    #[arg(long, default_value = "loadgen-mirror")]
    out: PathBuf,
}

#[derive(Args, Debug)]
struct GroupLoadArgs {
    /// Members of the group (a thread and a connection each).
    #[arg(long, default_value_t = 1000)]
    members: usize,
    /// Milliseconds between two heartbeats of a member (the client's
    /// default heartbeat interval is 1 s).
    #[arg(long, default_value_t = 1000)]
    interval_ms: u64,
    /// Seconds of heartbeats measured per configuration.
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// Each member's session timeout.
    #[arg(long, default_value_t = 30_000)]
    session_timeout_ms: u32,
    /// Which configurations to run, comma-separated: before (one broker,
    /// no member cache), cache (one broker), spread (members over the
    /// brokers: today's defaults). One broker holds at most its
    /// max_connections (10,000) members.
    #[arg(long, default_value = "before,cache,spread", value_delimiter = ',')]
    configs: Vec<String>,
    /// Members sharing one connection and thread, heartbeating in turn (a
    /// connection is two open files here: 10,000 members one each need a
    /// limit above 20,000).
    #[arg(long, default_value_t = 1)]
    members_per_connection: usize,
    /// Where the table and JSON go.
    #[arg(long, default_value = "loadgen-group-load")]
    out: PathBuf,
}

#[derive(Args, Debug)]
struct FailoverArgs {
    /// Topic (created if missing).
    #[arg(long, default_value = "failover")]
    topic: String,
    /// Partitions of a topic created by this run.
    #[arg(long, default_value_t = 6)]
    partitions: u32,
    /// Group members (separate processes).
    #[arg(long, default_value_t = 3)]
    members: usize,
    /// Each member's session timeout.
    #[arg(long, default_value_t = 3000)]
    session_timeout_ms: u64,
    /// Messages per second produced while the members consume.
    #[arg(long, default_value_t = 5000)]
    rate: u64,
}

#[derive(Args, Debug, Serialize)]
struct E2eArgs {
    #[command(flatten)]
    #[serde(flatten)]
    common: Common,
    /// Partitions of a topic created by this run.
    #[arg(long, default_value_t = 1)]
    partitions: u32,
    /// Payload bytes (at least 20: sequence, partition, send time).
    #[arg(long, alias = "record-size", default_value_t = 200)]
    size: usize,
    /// Messages per produce request.
    #[arg(long, default_value_t = 10)]
    batch: usize,
    /// Fixed rate in messages/s (-1 or absent: as fast as possible).
    #[arg(long, alias = "throughput", allow_negative_numbers = true)]
    rate: Option<f64>,
    /// Acknowledgement mode of the producers.
    #[arg(long, value_enum, default_value = "written")]
    acks: Acks,
    /// Producer threads; partition p is written by producer p mod N only, so
    /// each partition's order can be checked (needs N <= partitions).
    #[arg(long, default_value_t = 1)]
    producers: usize,
    /// Consumer threads; partition p is read by consumer p mod N.
    #[arg(long, default_value_t = 1)]
    consumers: usize,
    /// Seconds the consumers wait for missing messages at the end.
    #[arg(long, default_value_t = 5.0)]
    grace: f64,
    /// Fault injection for testing the checker: skip this sequence number of partition 0.
    #[arg(long, hide = true)]
    inject_loss: Option<u64>,
    /// Fault injection for testing the checker: send this sequence number of partition 0 twice.
    #[arg(long, hide = true)]
    inject_duplicate: Option<u64>,
}

#[derive(Args, Debug, Serialize)]
struct SweepArgs {
    /// Topic prefix (each ack mode gets its own topic, created if missing).
    #[arg(long, default_value = "sweep")]
    topic: String,
    /// Rates: percentages of the measured maximum, or messages/s.
    #[arg(long, value_delimiter = ',', default_value = "10%,50%,90%")]
    rates: Vec<String>,
    /// Ack modes to sweep.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "written,flushed"
    )]
    acks: Vec<Acks>,
    /// Seconds per run (warm-up included).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds at the start of each run that are not counted.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Runs of every rate, interleaved (all rates once, then again); with
    /// more than one, the table adds each rate's medians and the chart
    /// draws them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// Partitions of the topics.
    #[arg(long, default_value_t = 1)]
    partitions: u32,
    /// Payload bytes (at least 20).
    #[arg(long, default_value_t = 200)]
    size: usize,
    /// Messages per produce request.
    #[arg(long, default_value_t = 10)]
    batch: usize,
    /// Producer threads (at most the partitions).
    #[arg(long, default_value_t = 1)]
    producers: usize,
    /// Consumer threads.
    #[arg(long, default_value_t = 1)]
    consumers: usize,
    /// Write every figure and the environment as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write the latency-against-throughput chart (SVG) here.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// The system swept: ringlog, or kafka (--brokers then names Kafka's
    /// bootstrap servers, e.g. 127.0.0.1:29092 from `deploy/peers.sh start
    /// kafka`; driven by Kafka's Java client).
    #[arg(long, default_value = "ringlog", value_parser = ["ringlog", "kafka"])]
    system: String,
    /// Where deploy/peers.sh installed Kafka (for --system kafka).
    #[arg(long, env = "RINGLOG_PEERS_DIR", default_value = "/tmp/ringlog-peers")]
    #[serde(skip)]
    peers_dir: PathBuf,
}

/// The JSON of a sweep.
#[derive(Serialize)]
struct SweepReport<'a> {
    workload: &'a str,
    brokers: &'a str,
    config: &'a SweepArgs,
    result: &'a sweep::SweepResult,
    environment: Environment,
}

/// The JSON of a custom workload.
#[derive(Serialize)]
struct WorkloadReport<'a, C: Serialize> {
    workload: &'a str,
    brokers: &'a str,
    config: &'a C,
    summary: &'a Summary,
    #[serde(skip_serializing_if = "Option::is_none")]
    produce: Option<ProduceExtra>,
    #[serde(skip_serializing_if = "Option::is_none")]
    e2e: Option<E2eExtra>,
    /// The broker's shards and the topic's effective settings.
    broker_config: serde_json::Value,
    environment: Environment,
}

#[derive(Serialize)]
struct ProduceExtra {
    stored_bytes: u64,
    stored_bytes_per_message: f64,
    all_flushed_after_s: f64,
}

#[derive(Serialize)]
struct E2eExtra {
    sent: u64,
    received: u64,
    lost: u64,
    duplicated: u64,
    out_of_order: u64,
    partitions: Vec<e2e::PartitionCheck>,
}

fn main() {
    // `loadgen … | head -1` ends quietly, as `ringlog` does, instead of
    // panicking on the closed pipe.
    // SAFETY: restoring the default disposition of a signal at start, before
    // any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    let login = match (&cli.user, &cli.password_file) {
        (None, None) => Ok(None),
        (Some(user), Some(file)) => coordinator::security::read_password_file(file)
            .map(|password| {
                Some(protocol::client::Login {
                    user: user.clone(),
                    password,
                })
            })
            .map_err(anyhow::Error::from),
        _ => Err(anyhow::anyhow!(
            "--user and --password-file go together (or RINGLOG_USER and RINGLOG_PASSWORD_FILE)"
        )),
    };
    let result = login.and_then(|login| {
        loadgen::set_login(login);
        run(cli)
    });
    if let Err(error) = result {
        eprintln!("loadgen: error: {error:#}");
        if std::env::var_os("RUST_LIB_BACKTRACE").is_some() {
            eprintln!("{error:?}");
        }
        std::process::exit(1);
    }
}

fn rate(rate: Option<f64>) -> Option<f64> {
    rate.filter(|r| *r > 0.0)
}

fn plot(dir: &Option<PathBuf>, title: &str, summary: &Summary) -> anyhow::Result<()> {
    let Some(dir) = dir else { return Ok(()) };
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let throughput = chart::lines(
        &format!("{title}: throughput over time"),
        "seconds",
        "messages per second",
        &[Series {
            name: title.to_string(),
            points: summary.series.clone(),
        }],
        false,
    );
    std::fs::write(dir.join("throughput.svg"), throughput)?;
    if let Some(latency) = &summary.latency {
        let svg = chart::percentiles(
            &format!("{title}: latency by percentile"),
            &[Series {
                name: title.to_string(),
                points: latency.curve.clone(),
            }],
        );
        std::fs::write(dir.join("latency.svg"), svg)?;
    }
    eprintln!("charts written to {}", dir.display());
    Ok(())
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let brokers = cli
        .brokers
        .clone()
        .unwrap_or_else(|| "127.0.0.1:9092".to_string());
    match cli.command {
        Command::Paper(args) => {
            let systems = args
                .systems
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(System::parse)
                .collect::<anyhow::Result<Vec<_>>>()?;
            let spec = PaperSpec {
                messages: args.messages,
                size: args.size,
                systems,
                brokers: cli.brokers,
                shards: args.shards,
                out: args.out,
                json: args.json,
                plot: args.plot,
                rabbitmq_url: args.rabbitmq_url,
                activemq_address: args.activemq_address,
                nats_address: args.nats_address,
                redis_url: args.redis_url,
                kafka_address: args.kafka_address,
                kafka_client: loadgen::paper::KafkaClient::parse(&args.kafka_client)?,
                peers_dir: args.peers_dir,
                fetch_bytes: args.fetch_bytes,
            };
            paper::run(&spec)?;
        }
        Command::Loopback { bytes, rounds } => {
            let mut best = 0f64;
            for _ in 0..rounds.max(1) {
                let rate = loadgen::loopback::sendfile_bandwidth(bytes)?;
                eprintln!("loopback sendfile: {:.1} MB/s", rate / 1e6);
                best = best.max(rate);
            }
            println!(
                "loopback sendfile bandwidth: {:.1} MB/s (best of {rounds} × {} bytes)",
                best / 1e6,
                bytes
            );
        }
        Command::Replot { json, plot } => {
            let dir = plot.unwrap_or_else(|| json.parent().map(PathBuf::from).unwrap_or_default());
            paper::replot(&json, &dir)?;
            eprintln!("charts written to {}", dir.display());
        }
        Command::Produce(args) => {
            let spec = ProduceSpec {
                partitions: args.partitions,
                rate: rate(args.rate),
                producers: args.producers,
                shard_aware: !args.no_shard_aware,
                message_format: args.message_format,
                idempotence: !args.no_idempotence,
                ..ProduceSpec::new(
                    &brokers,
                    &args.common.topic,
                    args.common.length(),
                    args.size,
                    args.batch,
                    args.acks.mode(),
                )
            };
            let (outcome, summary) = measure(
                "produce",
                "sent",
                args.common.messages,
                args.common.warmup,
                |stats| workload::produce(&spec, stats),
            )?;
            println!("{}", summary.line("sent"));
            println!(
                "all {} messages flushed after {:.3} s; {:.1} bytes stored per message",
                outcome.messages,
                outcome.flushed_after.as_secs_f64(),
                outcome.stored_bytes as f64 / outcome.messages.max(1) as f64
            );
            if let Some(path) = &args.common.json {
                write_json(
                    path,
                    &WorkloadReport {
                        workload: "produce",
                        brokers: &brokers,
                        config: &args,
                        summary: &summary,
                        produce: Some(ProduceExtra {
                            stored_bytes: outcome.stored_bytes,
                            stored_bytes_per_message: outcome.stored_bytes as f64
                                / outcome.messages.max(1) as f64,
                            all_flushed_after_s: outcome.flushed_after.as_secs_f64(),
                        }),
                        e2e: None,
                        broker_config: workload::broker_config(&brokers, &args.common.topic)?,
                        environment: Environment::detect(),
                    },
                )?;
            }
            plot(&args.common.plot, "produce", &summary)?;
        }
        Command::Mirror(args) => {
            let spec = loadgen::mirror::MirrorSpec {
                messages: args.messages,
                size: args.size,
                partitions: args.partitions,
                latency_seconds: args.latency_seconds,
                loads: args.loads.clone(),
                rounds: args.rounds,
            };
            let outcome = loadgen::mirror::run(&spec)?;
            std::fs::create_dir_all(&args.out)?;
            let table = loadgen::mirror::table(&outcome);
            println!("{table}");
            std::fs::write(args.out.join("mirror.md"), &table)?;
            write_json(&args.out.join("mirror.json"), &outcome)?;
        }
        Command::Formats(args) => {
            let spec = loadgen::formats::FormatsSpec {
                messages: args.messages,
                size: args.size,
                rounds: args.rounds.max(1),
                codec_messages: args.codec_messages,
                codec_batch: args.codec_batch.max(1),
                fetch_bytes: args.fetch_bytes,
                shards: args.shards.max(1),
                written_partitions: args.written_partitions.max(1),
                out: args.out,
            };
            loadgen::formats::run(&spec)?;
        }
        Command::KafkaPerf(args) => {
            let spec = loadgen::kafka_perf::KafkaPerfSpec {
                messages: args.messages.max(1),
                size: args.size.max(1),
                partitions: args.partitions.max(1),
                replicas: args.replicas,
                rounds: args.rounds.max(1),
                peers_dir: args.peers_dir,
                kafka: args.kafka_address,
                kafka_cluster: args.kafka_cluster,
                out: args.out,
            };
            let rows = loadgen::kafka_perf::run(&spec)?;
            let table = loadgen::kafka_perf::table(&loadgen::kafka_perf::medians(&rows));
            println!("{table}");
            std::fs::write(spec.out.join("kafka-perf.md"), &table)?;
            write_json(&spec.out.join("kafka-perf.json"), &rows)?;
        }
        Command::Sustained(args) => {
            anyhow::ensure!(
                args.warmup < args.seconds,
                "--warmup {} leaves nothing of a {} s run to measure",
                args.warmup,
                args.seconds
            );
            let spec = loadgen::sustained::SustainedSpec {
                seconds: args.seconds,
                warmup: args.warmup,
                size: args.size.max(1),
                batch: args.batch.max(1),
                shards: args.shards.max(1),
                retention_bytes: args.retention_bytes,
                dd_bytes: args.dd_bytes.max(1 << 20),
                kafka: (!args.no_kafka).then(|| {
                    (
                        loadgen::peers::kafka::home(&args.peers_dir),
                        args.kafka_address.clone(),
                        args.peers_dir.clone(),
                    )
                }),
                out: args.out,
                isolation: (!args.no_isolation).then(|| loadgen::isolation::QuietSpec {
                    rate: args.quiet_rate,
                    seconds: args.quiet_seconds.max(6.0),
                    warmup: 5.0,
                    size: args.size.max(1),
                    batch: 100,
                    retention_bytes: args.retention_bytes,
                }),
            };
            let outcome = loadgen::sustained::run(&spec)?;
            let table = loadgen::sustained::table(&spec, &outcome);
            println!("{table}");
            std::fs::write(spec.out.join("sustained.md"), &table)?;
            std::fs::write(
                spec.out.join("sustained.svg"),
                loadgen::sustained::chart(&outcome),
            )?;
            write_json(&spec.out.join("sustained.json"), &outcome)?;
        }
        Command::Security(args) => {
            let spec = loadgen::security::SecuritySpec {
                messages: args.messages,
                size: args.size,
                batch: args.batch,
                partitions: args.partitions,
                rounds: args.rounds,
                rules: args.rules,
            };
            let outcome = loadgen::security::run(&spec)?;
            std::fs::create_dir_all(&args.out)?;
            let table = loadgen::security::table(&outcome);
            println!("{table}");
            std::fs::write(args.out.join("security.md"), &table)?;
            write_json(&args.out.join("security.json"), &outcome)?;
        }
        Command::Replication(args) => {
            let spec = loadgen::replication::ReplicationSpec {
                messages: args.messages,
                size: args.size,
                batch: args.batch,
                latency_batch: args.latency_batch.unwrap_or(args.batch).max(1),
                partitions: args.partitions,
                latency_rate: args.latency_rate,
                latency_seconds: args.latency_seconds,
                lease_ttl_s: args.lease_ttl_s,
                failovers: args.failovers,
                catch_up_bytes: args.catch_up_bytes,
                message_format: args.message_format,
                idempotence: !args.no_idempotence,
            };
            std::fs::create_dir_all(&args.out)?;
            let peers: Vec<Peer> = args
                .systems
                .iter()
                .filter_map(|s| match s.as_str() {
                    "kafka" => Some(Peer::Kafka),
                    "nats" => Some(Peer::Nats),
                    _ => None,
                })
                .collect();
            let ringlog = if args.systems.iter().any(|s| s == "ringlog") {
                Some(loadgen::replication::run(&spec)?)
            } else {
                None
            };
            if !peers.is_empty() {
                let peer_spec = loadgen::peer_replication::PeerSpec {
                    messages: args.messages,
                    size: args.size,
                    batch: args.batch,
                    partitions: args.partitions,
                    latency_rate: args.latency_rate,
                    latency_seconds: args.latency_seconds,
                    failovers: args.failovers,
                    peers_dir: args.peers_dir.clone(),
                };
                let figures = loadgen::peer_replication::run(&peer_spec, &peers)?;
                let table =
                    loadgen::peer_replication::table(ringlog.as_ref(), &figures, args.latency_rate);
                println!("{table}");
                std::fs::write(args.out.join("versus.md"), &table)?;
                write_json(&args.out.join("peers.json"), &figures)?;
            }
            let Some(outcome) = ringlog else {
                eprintln!("table and JSON written to {}", args.out.display());
                return Ok(());
            };
            let table = loadgen::replication::table(&outcome);
            println!("{table}");
            std::fs::write(args.out.join("replication.md"), &table)?;
            write_json(&args.out.join("replication.json"), &outcome)?;
            let names: Vec<String> = outcome.throughput.iter().map(|f| f.label.clone()).collect();
            let svg = chart::grouped_bars(
                "produce on three brokers (two cores): one copy against three",
                "messages per second",
                &names,
                &[(
                    "unpaced".to_string(),
                    outcome
                        .throughput
                        .iter()
                        .map(|f| Some(f.msgs_per_sec))
                        .collect(),
                )],
                false,
            );
            std::fs::write(args.out.join("throughput.svg"), svg)?;
            let latency = |pick: fn(&loadgen::stats::LatencySummary) -> f64| {
                outcome
                    .latency
                    .iter()
                    .map(|f| f.latency.as_ref().map(pick))
                    .collect::<Vec<_>>()
            };
            let svg = chart::grouped_bars(
                &format!(
                    "publish latency at {} msg/s: one copy against three",
                    args.latency_rate
                ),
                "milliseconds",
                &names,
                &[
                    ("p50".to_string(), latency(|l| l.p50_ms)),
                    ("p99".to_string(), latency(|l| l.p99_ms)),
                    ("p99.9".to_string(), latency(|l| l.p999_ms)),
                ],
                true,
            );
            std::fs::write(args.out.join("latency.svg"), svg)?;
            eprintln!("table, JSON and charts written to {}", args.out.display());
        }
        Command::GroupLoad(args) => {
            let spec = loadgen::group_load::GroupLoadSpec {
                members: args.members,
                interval: Duration::from_millis(args.interval_ms.max(1)),
                seconds: args.seconds,
                session_timeout_ms: args.session_timeout_ms,
                configs: args.configs.clone(),
                members_per_connection: args.members_per_connection,
            };
            let figures = loadgen::group_load::run(&spec)?;
            std::fs::create_dir_all(&args.out)?;
            let table = loadgen::group_load::table(&figures);
            println!("{table}");
            std::fs::write(args.out.join("group-load.md"), &table)?;
            write_json(&args.out.join("group-load.json"), &figures)?;
        }
        Command::Failover(args) => {
            let spec = FailoverSpec {
                brokers: brokers.clone(),
                topic: args.topic.clone(),
                partitions: args.partitions,
                members: args.members,
                session_timeout_ms: args.session_timeout_ms,
                rate: args.rate,
            };
            let outcome = failover(&spec)?;
            println!(
                "SIGKILL of a member ({} partitions): consumed again after {:.2} s (session timeout {} ms)",
                outcome.killed_partitions,
                outcome.after_sigkill.as_secs_f64(),
                args.session_timeout_ms
            );
            println!(
                "clean leave of a member ({} partitions): consumed again after {:.2} s",
                outcome.left_partitions,
                outcome.after_leave.as_secs_f64()
            );
        }
        Command::Consume(args) if args.group.is_some() => {
            let spec = GroupSpec {
                brokers: brokers.clone(),
                topic: args.common.topic.clone(),
                group: args.group.clone().unwrap_or_default(),
                consumers: args.consumers,
                length: args.common.length(),
                start_from: if args.from == "latest" {
                    StartFrom::Latest
                } else {
                    StartFrom::Earliest
                },
            };
            let (outcome, summary) = measure(
                "consume",
                "received",
                args.common.messages,
                args.common.warmup,
                |stats| consume_group(&spec, stats),
            )?;
            println!("{}", summary.line("received"));
            println!(
                "group {}: {} members, {} messages once, {} duplicates, {} bytes skipped, {} rebalances; lag at the end {} bytes ({} partitions without a committed offset)",
                spec.group,
                spec.consumers,
                outcome.distinct,
                outcome.duplicates,
                outcome.gap_bytes,
                outcome.rebalances,
                outcome.lag_bytes,
                outcome.uncommitted_partitions
            );
            if outcome.gap_bytes > 0 {
                anyhow::bail!(
                    "{} bytes of the log were skipped: messages lost",
                    outcome.gap_bytes
                );
            }
            plot(&args.common.plot, "consume", &summary)?;
        }
        Command::Consume(args) => {
            let spec = ConsumeSpec {
                brokers: brokers.clone(),
                topic: args.common.topic.clone(),
                length: args.common.length(),
                fetch_bytes: args.fetch_bytes,
                consumers: args.consumers,
                prefetch: args.prefetch,
            };
            let ((), summary) = measure(
                "consume",
                "received",
                args.common.messages,
                args.common.warmup,
                |stats| workload::consume(&spec, stats),
            )?;
            println!("{}", summary.line("received"));
            if let Some(path) = &args.common.json {
                write_json(
                    path,
                    &WorkloadReport {
                        workload: "consume",
                        brokers: &brokers,
                        config: &args,
                        summary: &summary,
                        produce: None,
                        e2e: None,
                        broker_config: workload::broker_config(&brokers, &args.common.topic)?,
                        environment: Environment::detect(),
                    },
                )?;
            }
            plot(&args.common.plot, "consume", &summary)?;
        }
        Command::Sweep(args) => {
            anyhow::ensure!(
                args.warmup < args.duration,
                "--warmup {} leaves nothing of a {} s run to measure",
                args.warmup,
                args.duration
            );
            let spec = SweepSpec {
                brokers: brokers.clone(),
                topic: args.topic.clone(),
                partitions: args.partitions,
                size: args.size,
                batch: args.batch,
                producers: args.producers,
                consumers: args.consumers,
                acks: args.acks.iter().map(|a| a.mode()).collect(),
                rates: args
                    .rates
                    .iter()
                    .map(|r| sweep::Rate::parse(r))
                    .collect::<anyhow::Result<_>>()?,
                duration: Duration::from_secs_f64(args.duration),
                warmup: Duration::from_secs_f64(args.warmup),
                rounds: args.rounds as usize,
            };
            let result = if args.system == "kafka" {
                sweep::run_kafka(&spec, &loadgen::peers::kafka::home(&args.peers_dir))?
            } else {
                sweep::run(&spec)?
            };
            print!("{}", sweep::table(&result));
            if let Some(path) = &args.json {
                write_json(
                    path,
                    &SweepReport {
                        workload: "sweep",
                        brokers: &brokers,
                        config: &args,
                        result: &result,
                        environment: Environment::detect(),
                    },
                )?;
            }
            if let Some(dir) = &args.plot {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
                std::fs::write(dir.join("sweep.svg"), sweep::chart(&result))?;
                eprintln!("chart written to {}", dir.join("sweep.svg").display());
            }
        }
        Command::E2e(args) => {
            let spec = E2eSpec {
                brokers: brokers.clone(),
                consume_from: None,
                topic: args.common.topic.clone(),
                partitions: args.partitions,
                length: args.common.length(),
                size: args.size,
                batch: args.batch,
                acks: args.acks.mode(),
                rate: rate(args.rate),
                producers: args.producers,
                consumers: args.consumers,
                inject_loss: args.inject_loss,
                inject_duplicate: args.inject_duplicate,
                grace: Duration::from_secs_f64(args.grace),
                warmup: Duration::from_secs_f64(args.common.warmup),
            };
            let (outcome, summary) = measure(
                "e2e",
                "received",
                args.common.messages,
                args.common.warmup,
                |stats| e2e::run(&spec, stats),
            )?;
            println!("{}", summary.line("received"));
            if let Some(publish) = &outcome.publish {
                println!(
                    "publish latency (send to acknowledgement): {:.2} ms 50th, {:.2} ms 99th, {:.2} ms 99.9th, {:.2} ms max",
                    publish.p50_ms, publish.p99_ms, publish.p999_ms, publish.max_ms
                );
            }
            let checks = outcome.checks;
            let total = |f: fn(&e2e::PartitionCheck) -> u64| checks.iter().map(f).sum::<u64>();
            let extra = E2eExtra {
                sent: total(|c| c.sent),
                received: total(|c| c.received),
                lost: total(|c| c.lost),
                duplicated: total(|c| c.duplicated),
                out_of_order: total(|c| c.out_of_order),
                partitions: checks.clone(),
            };
            println!(
                "e2e: {} sent, {} received, {} lost, {} duplicated, {} out of order",
                extra.sent, extra.received, extra.lost, extra.duplicated, extra.out_of_order
            );
            for c in &checks {
                if c.lost + c.duplicated + c.out_of_order > 0 {
                    println!(
                        "  partition {}: {} lost, {} duplicated, {} out of order",
                        c.partition, c.lost, c.duplicated, c.out_of_order
                    );
                }
            }
            if let Some(path) = &args.common.json {
                write_json(
                    path,
                    &WorkloadReport {
                        workload: "e2e",
                        brokers: &brokers,
                        config: &args,
                        summary: &summary,
                        produce: None,
                        e2e: Some(extra),
                        broker_config: workload::broker_config(&brokers, &args.common.topic)?,
                        environment: Environment::detect(),
                    },
                )?;
            }
            plot(&args.common.plot, "e2e", &summary)?;
        }
    }
    Ok(())
}
