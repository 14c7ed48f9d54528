//! `loadgen`: producer and consumer benchmarks against a ringlog broker.

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use loadgen::workload::{self, ConsumeSpec, ProduceSpec, RunResult};
use protocol::client::{AckMode, Client};

#[derive(Parser, Debug)]
#[command(name = "loadgen", version, about = "Benchmark a ringlog broker")]
struct Cli {
    /// Broker addresses, comma-separated.
    #[arg(
        long,
        env = "RINGLOG_BROKERS",
        default_value = "127.0.0.1:9092",
        global = true
    )]
    brokers: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Acks {
    None,
    Written,
    Flushed,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// One producer sending fixed-size messages.
    Produce {
        #[arg(long, default_value = "loadgen")]
        topic: String,
        #[arg(long, default_value_t = 1)]
        partitions: u32,
        #[arg(long, alias = "num-records", default_value_t = 1_000_000)]
        messages: u64,
        #[arg(long, alias = "record-size", default_value_t = 200)]
        size: usize,
        #[arg(long, default_value_t = 1)]
        batch: usize,
        #[arg(long, value_enum, default_value = "none")]
        acks: Acks,
        /// Send through the bootstrap port and let the broker forward.
        #[arg(long)]
        no_shard_aware: bool,
    },
    /// One consumer reading a topic from the start.
    Consume {
        #[arg(long, default_value = "loadgen")]
        topic: String,
        #[arg(long, alias = "num-records", default_value_t = 1_000_000)]
        messages: u64,
        #[arg(long, default_value_t = 200 * 1024)]
        fetch_bytes: u32,
    },
}

fn report(what: &str, r: &RunResult) {
    println!(
        "{what}: {} records in {:.3} s, {:.0} records/sec ({:.2} MB/sec)",
        r.messages,
        r.elapsed.as_secs_f64(),
        r.msgs_per_sec(),
        r.mb_per_sec()
    );
    if let Some(flushed) = r.flushed_elapsed {
        println!(
            "{what}: all flushed after {:.3} s, {:.0} records/sec end to disk",
            flushed.as_secs_f64(),
            r.messages as f64 / flushed.as_secs_f64().max(1e-9)
        );
    }
}

fn main() {
    if let Err(error) = run(Cli::parse()) {
        eprintln!("loadgen: error: {error:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let client = Client::connect(&cli.brokers)
        .with_context(|| format!("no broker reachable at {}", cli.brokers))?;
    match cli.command {
        Command::Produce {
            topic,
            partitions,
            messages,
            size,
            batch,
            acks,
            no_shard_aware,
        } => {
            let spec = ProduceSpec {
                topic,
                partitions,
                messages,
                size,
                batch,
                acks: match acks {
                    Acks::None => AckMode::None,
                    Acks::Written => AckMode::Written,
                    Acks::Flushed => AckMode::Flushed,
                },
                shard_aware: !no_shard_aware,
            };
            let result = workload::produce(&client, &spec)?;
            report(
                &format!("produce batch={} acks={:?}", spec.batch, acks),
                &result,
            );
        }
        Command::Consume {
            topic,
            messages,
            fetch_bytes,
        } => {
            let result = workload::consume(
                &client,
                &ConsumeSpec {
                    topic,
                    messages,
                    fetch_bytes,
                },
            )?;
            report(&format!("consume fetch_bytes={fetch_bytes}"), &result);
        }
    }
    Ok(())
}
