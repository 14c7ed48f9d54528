//! `ringlog verify`: proves copies of a topic's partitions equal without
//! moving their bytes. Each copy's broker answers the CRC-32 of each chunk
//! of its bytes (the Digest api); where two copies' digests differ, the
//! chunk is asked for again in chunks 4,096 times smaller, down to single
//! bytes, so the answer names the first offset where they differ.
//!
//! Compared: the replicas of each partition in one cluster (its leader's
//! copy against each follower's), or with `--against`, this cluster's
//! leader copy against another cluster's (a mirror and its source), from
//! the latest log start to what every leader compared lets consumers read
//! and every copy holds flushed (a follower learns the high watermark a
//! fetch late: its flushed bytes below its leader's are the comparison's).

use clap::Args;
use protocol::client::Client;
use protocol::codec::digest::{DigestArgs, Digests};
use protocol::codec::Metadata;
use protocol::types::{BrokerId, PartitionId};

/// `ringlog verify`'s arguments.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The topic.
    topic: String,
    /// Only this partition.
    #[arg(long)]
    partition: Option<PartitionId>,
    /// Compare with the same topic in another cluster (its brokers'
    /// addresses) instead of this cluster's replicas with each other.
    #[arg(long, value_name = "BROKERS")]
    against: Option<String>,
    /// The topic's name in the --against cluster, when it is another (a
    /// mirror's copy made under `--prefix`).
    #[arg(long = "as", value_name = "TOPIC", requires = "against")]
    as_topic: Option<String>,
    /// Bytes per digest in the first pass.
    #[arg(long, default_value_t = 1024 * 1024)]
    chunk_bytes: u32,
}

/// One copy: who holds it, a connection to its broker, and whether it
/// is its cluster's leader copy.
struct Copy {
    name: String,
    client: Client,
    leads: bool,
    /// The topic's name where this copy is.
    topic: String,
}

/// Runs `ringlog verify`: a line per partition; fails when any differ.
pub fn verify(
    brokers: &str,
    args: &VerifyArgs,
    connect: impl Fn(&str) -> anyhow::Result<Client>,
) -> anyhow::Result<()> {
    if args.chunk_bytes == 0 {
        anyhow::bail!("--chunk-bytes must be 1 or more");
    }
    let client = connect(brokers)?;
    let here = client.metadata(&[&args.topic])?;
    let theirs = args.as_topic.as_deref().unwrap_or(&args.topic);
    let there = match &args.against {
        Some(other) => Some((other.as_str(), connect(other)?.metadata(&[theirs])?, theirs)),
        None => None,
    };
    let topic = here
        .topics
        .iter()
        .find(|t| t.name == args.topic)
        .ok_or_else(|| anyhow::anyhow!("no topic {:?}", args.topic))?;
    if let Some(p) = args.partition {
        if !topic.partitions.iter().any(|q| q.partition == p) {
            anyhow::bail!(
                "topic {:?} has partitions 0..{}, not {p}",
                args.topic,
                topic.partitions.len()
            );
        }
    }
    let mut differ = 0;
    let mut compared = 0;
    for placement in &topic.partitions {
        let p = placement.partition;
        if args.partition.is_some_and(|only| only != p) {
            continue;
        }
        let Some(copies) = copies_of(&here, there.as_ref(), &args.topic, placement, &connect)?
        else {
            continue;
        };
        compared += 1;
        if !compare(&args.topic, p, &copies, args.chunk_bytes)? {
            differ += 1;
        }
    }
    if differ > 0 {
        anyhow::bail!(
            "{differ} of {compared} partitions of {:?} differ",
            args.topic
        );
    }
    Ok(())
}

/// The copies of one partition to compare: this cluster's leader's and
/// the other cluster's (`--against`), or its replicas here, the leader's
/// first. `None` (said on stdout) when there is one copy.
fn copies_of(
    here: &Metadata,
    there: Option<&(&str, Metadata, &str)>,
    topic: &str,
    placement: &protocol::codec::PartitionPlacement,
    connect: &impl Fn(&str) -> anyhow::Result<Client>,
) -> anyhow::Result<Option<Vec<Copy>>> {
    let p = placement.partition;
    if let Some((other, metadata, their_topic)) = there {
        let theirs = metadata
            .topics
            .iter()
            .find(|t| t.name == *their_topic)
            .and_then(|t| t.partitions.iter().find(|q| q.partition == p))
            .ok_or_else(|| anyhow::anyhow!("{other} has no partition {p} of {their_topic:?}"))?;
        return Ok(Some(vec![
            copy(
                here,
                placement.broker_id,
                "this cluster's broker",
                topic,
                connect,
            )?,
            copy(
                metadata,
                theirs.broker_id,
                &format!("{other}'s broker"),
                their_topic,
                connect,
            )?,
        ]));
    }
    let mut ids = vec![placement.broker_id];
    ids.extend(
        placement
            .replicas
            .iter()
            .filter(|id| **id != placement.broker_id),
    );
    if ids.len() < 2 {
        println!(
            "{topic}-{p}: one copy (broker {}): nothing to compare it with",
            placement.broker_id
        );
        return Ok(None);
    }
    let mut copies = ids
        .iter()
        .map(|id| copy(here, *id, "broker", topic, connect))
        .collect::<anyhow::Result<Vec<Copy>>>()?;
    for follower in copies.iter_mut().skip(1) {
        follower.leads = false;
    }
    Ok(Some(copies))
}

/// A connection to one of `broker`'s shards (it forwards to the copy's).
fn copy(
    metadata: &Metadata,
    broker: BrokerId,
    what: &str,
    topic: &str,
    connect: &impl Fn(&str) -> anyhow::Result<Client>,
) -> anyhow::Result<Copy> {
    let shard = metadata
        .brokers
        .iter()
        .find(|b| b.broker_id == broker)
        .and_then(|b| b.shards.first())
        .ok_or_else(|| anyhow::anyhow!("{what} {broker} is not live"))?;
    Ok(Copy {
        name: format!("{what} {broker}"),
        client: connect(&format!("{}:{}", shard.host, shard.port))?,
        leads: true,
        topic: topic.to_string(),
    })
}

/// Compares the copies of one partition and prints what it found; false
/// when they differ.
fn compare(topic: &str, p: PartitionId, copies: &[Copy], chunk: u32) -> anyhow::Result<bool> {
    // Each copy's range first: what every copy holds, below what the
    // leaders let consumers read.
    let mut from = 0u64;
    let mut to = u64::MAX;
    for c in copies {
        let d = digest(topic, p, c, 0, 0, chunk)?;
        from = from.max(d.start_offset);
        to = to.min(d.flushed_offset);
        if c.leads {
            to = to.min(d.visible_offset);
        }
    }
    to = to.max(from);
    let names: Vec<&str> = copies.iter().map(|c| c.name.as_str()).collect();
    let mut at = from;
    while at < to {
        let answers = copies
            .iter()
            .map(|c| digest(topic, p, c, at, to, chunk))
            .collect::<anyhow::Result<Vec<Digests>>>()?;
        let end = answers.iter().map(|a| a.to).min().unwrap_or(at);
        if end <= at {
            anyhow::bail!("{topic}-{p}: no digests past {at}");
        }
        for (c, answer) in copies.iter().zip(&answers).skip(1) {
            if let Some(offset) = first_difference(topic, p, &copies[0], c, &answers[0], answer)? {
                println!(
                    "{topic}-{p}: {} differs from {} at offset {offset} (compared {from}..{to})",
                    c.name, copies[0].name
                );
                return Ok(false);
            }
        }
        at = end;
    }
    println!(
        "{topic}-{p}: {} match over {from}..{to} ({} bytes)",
        names.join(", "),
        to - from
    );
    Ok(true)
}

/// Where two copies' digests of one range first differ, narrowed to the
/// byte; `None` when they are the same.
fn first_difference(
    topic: &str,
    p: PartitionId,
    a: &Copy,
    b: &Copy,
    da: &Digests,
    db: &Digests,
) -> anyhow::Result<Option<u64>> {
    let (mut da, mut db) = (da.clone(), db.clone());
    loop {
        let Some(i) = da.digests.iter().zip(&db.digests).position(|(x, y)| x != y) else {
            return Ok(None);
        };
        let chunk = u64::from(da.chunk_bytes);
        let start = da.from + i as u64 * chunk;
        if da.chunk_bytes == 1 {
            return Ok(Some(start));
        }
        let end = (start + chunk).min(da.to);
        let finer = (da.chunk_bytes / 4096).max(1);
        da = digest(topic, p, a, start, end, finer)?;
        db = digest(topic, p, b, start, end, finer)?;
    }
}

fn digest(
    topic: &str,
    p: PartitionId,
    copy: &Copy,
    from: u64,
    to: u64,
    chunk_bytes: u32,
) -> anyhow::Result<Digests> {
    copy.client
        .digest(
            &copy.topic,
            p,
            &DigestArgs {
                from,
                to,
                chunk_bytes,
            },
        )
        .map_err(|e| anyhow::anyhow!("{topic}-{p} on {}: {e}", copy.name))
}
