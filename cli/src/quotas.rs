//! `ringlog quotas set|delete|list`: principals' quotas changed while the
//! cluster runs, stored in its registry and applied by every broker to the
//! principal's connections, open ones included.

use clap::Subcommand;
use protocol::client::Client;
use protocol::codec::quotas::{QuotaEntry, DEFAULT_PRINCIPAL};

/// The quotas subcommands.
#[derive(Subcommand, Debug)]
pub enum QuotasCommand {
    /// Set a principal's quota (the rates not named keep what the
    /// principal had set; 0: no bound). Summed over all of the principal's
    /// connections on every shard of a broker.
    Set {
        /// `User:NAME`, or `default` for every principal without its own.
        principal: String,
        /// Message-set bytes produced per second.
        #[arg(long)]
        produce_bytes_per_second: Option<u64>,
        /// Log bytes fetched per second.
        #[arg(long)]
        fetch_bytes_per_second: Option<u64>,
        /// Requests of any api per second.
        #[arg(long)]
        requests_per_second: Option<u64>,
        /// Connections open at once, per broker.
        #[arg(long)]
        connections: Option<u32>,
    },
    /// Remove principals' quotas set at run time (a broker's configured
    /// ones apply again).
    Delete {
        /// `User:NAME` or `default`, one or more.
        #[arg(required = true)]
        principals: Vec<String>,
    },
    /// The quotas set at run time, and the answering broker's configured
    /// ones.
    List,
}

/// Runs one quotas subcommand.
pub fn quotas(client: &Client, command: QuotasCommand) -> anyhow::Result<()> {
    match command {
        QuotasCommand::Set {
            principal,
            produce_bytes_per_second,
            fetch_bytes_per_second,
            requests_per_second,
            connections,
        } => {
            if produce_bytes_per_second.is_none()
                && fetch_bytes_per_second.is_none()
                && requests_per_second.is_none()
                && connections.is_none()
            {
                anyhow::bail!("name at least one of --produce-bytes-per-second, --fetch-bytes-per-second, --requests-per-second, --connections");
            }
            let now = client.describe_quotas()?;
            let mut entry = now
                .quotas
                .into_iter()
                .find(|e| e.principal == principal)
                .unwrap_or(QuotaEntry {
                    principal: principal.clone(),
                    ..QuotaEntry::default()
                });
            if let Some(rate) = produce_bytes_per_second {
                entry.produce_bytes_per_second = rate;
            }
            if let Some(rate) = fetch_bytes_per_second {
                entry.fetch_bytes_per_second = rate;
            }
            if let Some(rate) = requests_per_second {
                entry.requests_per_second = rate;
            }
            if let Some(count) = connections {
                entry.connections = count;
            }
            client.alter_quotas(std::slice::from_ref(&entry), &[])?;
            println!("quota set; every broker applies it within about a second");
            print_table("set at run time", &[entry]);
        }
        QuotasCommand::Delete { principals } => {
            let names: Vec<&str> = principals.iter().map(String::as_str).collect();
            let (_, deleted) = client.alter_quotas(&[], &names)?;
            println!(
                "{deleted} of {} quotas deleted (a broker's configured quota applies where it has one)",
                names.len()
            );
        }
        QuotasCommand::List => {
            let described = client.describe_quotas()?;
            print_table("set at run time (the cluster's)", &described.quotas);
            print_table(
                "configured (this broker's; a quota set at run time takes precedence)",
                &described.configured,
            );
        }
    }
    Ok(())
}

fn print_table(title: &str, entries: &[QuotaEntry]) {
    println!("{title}: {}", entries.len());
    if entries.is_empty() {
        return;
    }
    println!("principal\tproduce_bytes_per_second\tfetch_bytes_per_second\trequests_per_second\tconnections");
    let shown = |n: u64| {
        if n == 0 {
            "-".to_string()
        } else {
            n.to_string()
        }
    };
    for e in entries {
        let principal = if e.principal == DEFAULT_PRINCIPAL {
            "default (without its own)"
        } else {
            e.principal.as_str()
        };
        println!(
            "{principal}\t{}\t{}\t{}\t{}",
            shown(e.produce_bytes_per_second),
            shown(e.fetch_bytes_per_second),
            shown(e.requests_per_second),
            shown(u64::from(e.connections))
        );
    }
}
