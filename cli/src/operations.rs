//! `ringlog partitions elect-leaders | elect | reassign` and `ringlog
//! brokers decommission`: the operator's commands for replicated
//! partitions. Each asks the brokers (ElectLeaders, ReassignPartition),
//! then — unless `--no-wait` — follows Metadata until the change is done,
//! printing what moved; a timeout is an error that says what is left.

use anyhow::{bail, Context};
use protocol::client::Client;
use protocol::codec::operations::{ElectLeaders, Elected};
use protocol::codec::{Metadata, PartitionPlacement};
use protocol::ErrorCode;
use std::time::{Duration, Instant};

/// How often a waiting command reads Metadata.
const POLL: Duration = Duration::from_millis(250);

/// Broker ids as the CLI prints them: `1,2,3`.
pub fn ids(ids: &[u32]) -> String {
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// Parses `1,2,3`.
pub fn parse_ids(text: &str) -> Result<Vec<u32>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u32>()
                .map_err(|_| format!("{s:?} is not a broker id"))
        })
        .collect()
}

fn placement<'m>(
    metadata: &'m Metadata,
    topic: &str,
    partition: u32,
) -> anyhow::Result<&'m PartitionPlacement> {
    let Some(t) = metadata.topics.iter().find(|t| t.name == topic) else {
        bail!("no topic {topic:?}");
    };
    t.partitions
        .iter()
        .find(|p| p.partition == partition)
        .with_context(|| {
            format!(
                "topic {topic:?} has {} partitions, not {partition}",
                t.partitions.len()
            )
        })
}

fn live(metadata: &Metadata) -> Vec<u32> {
    metadata.brokers.iter().map(|b| b.broker_id).collect()
}

fn address_of(metadata: &Metadata, broker: u32) -> Option<String> {
    let b = metadata.brokers.iter().find(|b| b.broker_id == broker)?;
    let shard = b.shards.first()?;
    Some(format!("{}:{}", shard.host, shard.port))
}

/// Reads Metadata until `done` holds for it, or fails after `timeout`
/// with what `left` says of the last one.
fn wait_for(
    client: &Client,
    topics: &[&str],
    timeout: Duration,
    mut done: impl FnMut(&Metadata) -> bool,
    left: impl Fn(&Metadata) -> String,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let metadata = client.metadata(topics)?;
        if done(&metadata) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "not done after {} s: {} (it goes on in the cluster; `ringlog partitions` shows it)",
                timeout.as_secs(),
                left(&metadata)
            );
        }
        std::thread::sleep(POLL);
    }
}

/// `ringlog partitions elect-leaders [TOPIC...]`: every partition whose
/// preferred replica is in sync but does not lead gets it back.
#[expect(
    clippy::too_many_lines,
    reason = "the preferred elections asked, then waited for, partition by partition; one operator command"
)]
pub fn elect_leaders(
    client: &Client,
    topics: &[String],
    wait: Option<Duration>,
) -> anyhow::Result<()> {
    let metadata = client.metadata(&topics.iter().map(String::as_str).collect::<Vec<_>>())?;
    let mut asked: Vec<(String, u32, u32)> = Vec::new();
    let mut refused = 0;
    for topic in &metadata.topics {
        if topic.partitions.iter().all(|p| p.replicas.is_empty()) {
            continue;
        }
        let partitions: Vec<u32> = topic
            .partitions
            .iter()
            .filter(|p| {
                p.replicas
                    .first()
                    .is_some_and(|first| *first != p.broker_id)
            })
            .map(|p| p.partition)
            .collect();
        if partitions.is_empty() {
            continue;
        }
        let request = ElectLeaders {
            topic: topic.name.clone(),
            partitions,
            unclean: false,
            dry_run: false,
        };
        for e in client.elect_leaders(&request, None)? {
            let preferred = topic
                .partitions
                .iter()
                .find(|p| p.partition == e.partition)
                .and_then(|p| p.replicas.first().copied())
                .unwrap_or(0);
            if e.error == ErrorCode::None {
                println!("{}-{}: {}", topic.name, e.partition, e.message);
                asked.push((topic.name.clone(), e.partition, preferred));
            } else {
                refused += 1;
                eprintln!("{}-{}: not elected: {}", topic.name, e.partition, e.message);
            }
        }
    }
    if asked.is_empty() && refused == 0 {
        println!("every partition is led by its preferred replica");
        return Ok(());
    }
    if let Some(timeout) = wait {
        let names: Vec<&str> = asked.iter().map(|(t, _, _)| t.as_str()).collect();
        let pending = |m: &Metadata| -> Vec<String> {
            asked
                .iter()
                .filter(|(t, p, preferred)| {
                    placement(m, t, *p).map_or(true, |pl| pl.broker_id != *preferred)
                })
                .map(|(t, p, _)| format!("{t}-{p}"))
                .collect()
        };
        wait_for(
            client,
            &names,
            timeout,
            |m| pending(m).is_empty(),
            |m| format!("still led elsewhere: {}", pending(m).join(" ")),
        )?;
        println!(
            "{} partition(s) led by their preferred replica again",
            asked.len()
        );
    }
    if refused > 0 {
        bail!("{refused} partition(s) could not be elected (see above)");
    }
    Ok(())
}

/// `ringlog partitions elect TOPIC --partition P [--unclean] [--broker B]`:
/// a leader for an offline partition.
#[expect(
    clippy::too_many_lines,
    reason = "an unclean election's checks, its cost in words, the request and the wait, in the order an operator reads them"
)]
pub fn elect_offline(
    client: &Client,
    topic: &str,
    partition: u32,
    unclean: bool,
    broker: Option<u32>,
) -> anyhow::Result<()> {
    let metadata = client.metadata(&[topic])?;
    let p = placement(&metadata, topic, partition)?;
    let live = live(&metadata);
    if p.replicas.is_empty() {
        bail!("{topic} has one copy per partition: nothing to elect (its broker serves it when it is back)");
    }
    // With --unclean the brokers decide: a live leader or ISR member back
    // on a new disk holds nothing and does not count, which Metadata does
    // not show (each candidate's dry run below says why it cannot lead).
    if live.contains(&p.broker_id) && !unclean {
        println!(
            "{topic}-{partition} is led by broker {} (epoch {}): nothing to elect",
            p.broker_id, p.leader_epoch
        );
        return Ok(());
    }
    if let Some(member) = p.isr.iter().find(|b| live.contains(b)) {
        if !unclean {
            println!("{topic}-{partition}: broker {member} is in sync and live: it takes over by itself, losing nothing");
            return Ok(());
        }
    }
    let candidates: Vec<u32> = match broker {
        Some(b) => vec![b],
        None => p
            .replicas
            .iter()
            .copied()
            .filter(|b| live.contains(b))
            .collect(),
    };
    if !unclean {
        bail!(
            "{topic}-{partition} is offline: no in-sync replica is live (ISR {}, live replicas {}); it stays offline until one returns. `--unclean` elects a replica that is not in sync, losing what only the in-sync ones held",
            ids(&p.isr),
            if candidates.is_empty() { "none".to_string() } else { ids(&candidates) }
        );
    }
    if candidates.is_empty() {
        bail!(
            "{topic}-{partition}: none of its replicas ({}) is live: there is nothing to elect",
            ids(&p.replicas)
        );
    }
    // Each candidate's copy, then the one that has the most.
    let mut best: Option<(u32, Elected)> = None;
    for b in &candidates {
        let Some(address) = address_of(&metadata, *b) else {
            eprintln!("{topic}-{partition}: broker {b} is not live");
            continue;
        };
        let request = ElectLeaders {
            topic: topic.to_string(),
            partitions: vec![partition],
            unclean: true,
            dry_run: true,
        };
        let answer = client.elect_leaders(&request, Some(&address))?;
        let Some(e) = answer.into_iter().next() else {
            continue;
        };
        if e.error != ErrorCode::None {
            eprintln!("{topic}-{partition}: broker {b}: {}", e.message);
            continue;
        }
        println!(
            "{topic}-{partition}: broker {b}'s copy ends at {}, the high watermark it last saw is {}",
            e.end_offset, e.high_watermark
        );
        if best
            .as_ref()
            .is_none_or(|(_, bst)| e.end_offset > bst.end_offset)
        {
            best = Some((*b, e));
        }
    }
    let Some((chosen, _)) = best else {
        bail!("{topic}-{partition}: no live replica can take it over");
    };
    let address = address_of(&metadata, chosen).context("the chosen broker left")?;
    let request = ElectLeaders {
        topic: topic.to_string(),
        partitions: vec![partition],
        unclean: true,
        dry_run: false,
    };
    let answer = client.elect_leaders(&request, Some(&address))?;
    let Some(e) = answer.into_iter().next() else {
        bail!("{topic}-{partition}: broker {chosen} did not answer for the partition");
    };
    if e.error != ErrorCode::None {
        bail!("{topic}-{partition}: {}", e.message);
    }
    eprintln!(
        "ringlog: warning: {topic}-{partition}: unclean election: at least {} bytes acknowledged with acks=all are lost (the high watermark broker {chosen} last saw, {}, minus where its copy ends, {}), and whatever the in-sync replicas {} held past it; their copies are cut back to the new leader's when they return",
        e.high_watermark.saturating_sub(e.end_offset),
        e.high_watermark,
        e.end_offset,
        ids(&p.isr)
    );
    println!(
        "{topic}-{partition}: broker {} leads in epoch {}",
        e.leader, e.leader_epoch
    );
    Ok(())
}

/// `ringlog partitions reassign TOPIC --partition P --replicas 1,2,3`.
pub fn reassign(
    client: &Client,
    topic: &str,
    partition: u32,
    replicas: &[u32],
    wait: Option<Duration>,
) -> anyhow::Result<()> {
    let answer = client.reassign_partition(topic, partition, replicas)?;
    if answer.moving_to.is_empty() {
        println!(
            "{topic}-{partition}: its replicas are {} already",
            ids(&answer.replicas)
        );
        return Ok(());
    }
    println!(
        "{topic}-{partition}: moving to {} (copies now {}); the new ones catch up, then the old ones leave",
        ids(&answer.moving_to),
        ids(&answer.replicas)
    );
    if let Some(timeout) = wait {
        wait_moves(
            client,
            &[(topic.to_string(), partition, replicas.to_vec())],
            timeout,
        )?;
    }
    Ok(())
}

/// True when a partition's move to `target` is done: the record names the
/// target, and the copies that left are out of the ISR too.
fn moved(pl: &PartitionPlacement, target: &[u32]) -> bool {
    pl.moving_to.is_empty() && pl.replicas == target && pl.isr.iter().all(|b| target.contains(b))
}

/// Follows moves until each partition's replicas are its target, printing
/// each ISR change and each move done.
fn wait_moves(
    client: &Client,
    moves: &[(String, u32, Vec<u32>)],
    timeout: Duration,
) -> anyhow::Result<()> {
    let names: Vec<&str> = moves.iter().map(|(t, _, _)| t.as_str()).collect();
    let mut seen: Vec<Option<(Vec<u32>, u32)>> = vec![None; moves.len()];
    let started = Instant::now();
    wait_for(
        client,
        &names,
        timeout,
        |m| {
            let mut all = true;
            for (i, (t, p, target)) in moves.iter().enumerate() {
                let Ok(pl) = placement(m, t, *p) else {
                    continue;
                };
                let now = (pl.isr.clone(), pl.broker_id);
                if seen[i].as_ref() != Some(&now) {
                    let done = moved(pl, target);
                    println!(
                        "{:>6.1} s  {t}-{p}: leader {}, in sync {}{}",
                        started.elapsed().as_secs_f64(),
                        pl.broker_id,
                        ids(&pl.isr),
                        if done { " — moved" } else { "" }
                    );
                    seen[i] = Some(now);
                }
                if !moved(pl, target) {
                    all = false;
                }
            }
            all
        },
        |m| {
            moves
                .iter()
                .filter_map(|(t, p, target)| {
                    let pl = placement(m, t, *p).ok()?;
                    (!(pl.moving_to.is_empty() && pl.replicas == *target))
                        .then(|| format!("{t}-{p} has {} in sync of {}", ids(&pl.isr), ids(target)))
                })
                .collect::<Vec<_>>()
                .join("; ")
        },
    )?;
    println!("{} partition(s) moved", moves.len());
    Ok(())
}

/// The rack a broker of `metadata` stands in, if it has one.
fn rack_of(metadata: &protocol::codec::Metadata, broker: u32) -> Option<&str> {
    metadata
        .brokers
        .iter()
        .find(|b| b.broker_id == broker)
        .and_then(|b| b.rack.as_deref())
}

/// `ringlog brokers decommission N`: every copy on broker N moves to a live
/// broker that does not hold one of that partition yet — one in a rack
/// the partition's other copies are not in, if there is one, else any;
/// of those, the one holding the fewest copies — in N's place in the
/// replica list.
#[expect(
    clippy::too_many_lines,
    reason = "a decommission's plan, the moves and the wait for them, one operator command"
)]
pub fn decommission(client: &Client, broker: u32, wait: Option<Duration>) -> anyhow::Result<()> {
    let metadata = client.metadata(&[])?;
    let live = live(&metadata);
    let spares: Vec<u32> = live.iter().copied().filter(|b| *b != broker).collect();
    if spares.is_empty() {
        bail!("broker {broker} is the only live broker: its copies have nowhere to go");
    }
    // Copies per broker, counting every move planned here.
    let mut load: std::collections::BTreeMap<u32, usize> = spares.iter().map(|b| (*b, 0)).collect();
    for topic in &metadata.topics {
        for p in &topic.partitions {
            let set = if p.replicas.is_empty() {
                vec![p.broker_id]
            } else {
                p.replicas.clone()
            };
            for b in set {
                if let Some(n) = load.get_mut(&b) {
                    *n += 1;
                }
            }
        }
    }
    let mut moves: Vec<(String, u32, Vec<u32>)> = Vec::new();
    let mut impossible = Vec::new();
    for topic in &metadata.topics {
        for p in &topic.partitions {
            let set = if p.replicas.is_empty() {
                vec![p.broker_id]
            } else {
                p.replicas.clone()
            };
            let Some(at) = set.iter().position(|b| *b == broker) else {
                continue;
            };
            let taken: Vec<Option<&str>> = set
                .iter()
                .filter(|b| **b != broker)
                .map(|b| rack_of(&metadata, *b))
                .collect();
            let Some(to) = load
                .iter()
                .filter(|(b, _)| !set.contains(b))
                .min_by_key(|(b, n)| {
                    // A broker without a rack is a rack of its own.
                    let rack = rack_of(&metadata, **b);
                    let shares_rack = rack.is_some() && taken.contains(&rack);
                    (shares_rack, **n, **b)
                })
                .map(|(b, _)| *b)
            else {
                impossible.push(format!(
                    "{}-{} (its {} copies are on every live broker)",
                    topic.name,
                    p.partition,
                    set.len()
                ));
                continue;
            };
            *load.entry(to).or_default() += 1;
            let mut target = set.clone();
            target[at] = to;
            if set.len() == 1 && !live.contains(&broker) {
                eprintln!(
                    "ringlog: warning: {}-{}: its only copy is on broker {broker}, which is not live: it moves once broker {broker} is back",
                    topic.name, p.partition
                );
            }
            moves.push((topic.name.clone(), p.partition, target));
        }
    }
    if !impossible.is_empty() {
        bail!(
            "broker {broker} cannot be decommissioned: no live broker can take a copy of {}; start another broker, or lower their replication factor with `ringlog partitions reassign`",
            impossible.join(", ")
        );
    }
    if moves.is_empty() {
        println!("broker {broker} holds no copy of any partition");
        return Ok(());
    }
    for (topic, partition, target) in &moves {
        let answer = client.reassign_partition(topic, *partition, target)?;
        println!(
            "{topic}-{partition}: moving to {} (copies now {})",
            ids(&answer.moving_to),
            ids(&answer.replicas)
        );
    }
    if let Some(timeout) = wait {
        wait_moves(client, &moves, timeout)?;
        println!("broker {broker} holds no copy now: it can be stopped");
    }
    Ok(())
}
