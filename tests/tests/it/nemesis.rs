//! Issue 20, item 5: a Jepsen-style fault harness. etcd, three brokers and
//! the clients each in their own network namespace, linked pairwise
//! (`harness::netns`); a workload of acks=all producers sending unique ids
//! and a consumer reading all the while; a nemesis that, every few seconds,
//! kills a leader (SIGKILL), pauses one past its lease (SIGSTOP), cuts a
//! leader from its followers, cuts a leader from etcd, isolates one broker
//! from everyone, removes a follower's data directory before its
//! restart, loses the leader's disk (kill -9, its data directory removed,
//! back at once, within its lease), or cuts the power of every broker at
//! once with the leader's disk replaced and the wiped one started first
//! (issue 47) — then heals; and now and then an operator rotates a
//! partition's replica list and holds a preferred election, so leadership
//! is also handed over on purpose amid the faults. At the end the history
//! is checked:
//!
//! - **lost**: every acknowledged message is in the final log;
//! - **acked-offset mismatch**: each acknowledged batch is where its answer
//!   said (its first message at the answered base offset);
//! - **read beyond the high watermark / inconsistent offsets**: every
//!   message a consumer read is in the final log at the offset it was read
//!   at, with the same id;
//! - **non-monotonic reads**: a consumer's offsets per partition only rise;
//! - **divergence**: the three copies of every partition are byte-identical
//!   file by file once healed;
//! - **two leaders in one epoch**: the copies' epoch files agree on the
//!   start of every epoch they share.
//!
//! `RINGLOG_NEMESIS_SECONDS` (default 300, CI's) sets how long faults are
//! injected; `RINGLOG_NEMESIS_SEED` replays a schedule. The checker itself
//! is tested on made-up histories with one anomaly each
//! (`the_checker_names_each_anomaly`), so a clean run means something.

use super::util::read_all;
use harness::etcd::Etcd;
use harness::netns::Net;
use harness::{check_numbered_payload, eventually, numbered_payload, Broker, BrokerOptions};
use protocol::client::{
    AckMode, Client, ClientConfig, Outcome, Producer, ProducerConfig, Receipt, Start,
    TopicConsumer, TopicConsumerConfig, TopicSettings,
};
use protocol::codec::operations::ElectLeaders;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TOPIC: &str = "jepsen";
const PARTITIONS: u32 = 3;
const SIZE: usize = 32;
const BROKERS: [&str; 3] = ["b1", "b2", "b3"];

/// What the workload saw.
#[derive(Default)]
struct History {
    /// Acknowledged ids: partition, the batch's base offset, the ids of the
    /// batch in order.
    acked: Vec<(u32, u64, Vec<u64>)>,
    /// Ids whose batch was reported `Failed`: none may be stored.
    failed: Vec<u64>,
    /// Ids whose batch was reported `Unknown`, or got no report at all.
    unknown: u64,
    /// Ids sent.
    sent: u64,
    /// What the consumer read: partition → (offset, id), in read order.
    read: BTreeMap<u32, Vec<(u64, u64)>>,
}

/// A small deterministic generator for the schedule (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    KillLeader,
    PauseLeader,
    LeaderFromFollowers,
    LeaderFromEtcd,
    IsolateOne,
    WipeFollower,
    /// The leader's disk lost: kill -9, its data directory removed, and
    /// started again at once, within its lease.
    LeaderDiskLost,
    /// A power loss: every broker killed at once, the leader's data
    /// directory removed, every lease expired, then the wiped broker
    /// started first and the others a moment later.
    PowerLossLeaderWiped,
    /// Not a fault, an operator: the partition's replica list rotated by
    /// one (a move that changes its preferred leader), then a preferred
    /// election of the topic — handovers amid the faults.
    Rotate,
}

const FAULTS: [Fault; 9] = [
    Fault::KillLeader,
    Fault::PauseLeader,
    Fault::LeaderFromFollowers,
    Fault::LeaderFromEtcd,
    Fault::IsolateOne,
    Fault::WipeFollower,
    Fault::LeaderDiskLost,
    Fault::PowerLossLeaderWiped,
    Fault::Rotate,
];

fn client_config() -> ClientConfig {
    ClientConfig {
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(10),
        ..ClientConfig::default()
    }
}

fn connect(addresses: &str) -> Option<Client> {
    Client::with_config(addresses, client_config()).ok()
}

/// The producer: acks=all batches of unique ids, round robin over the
/// partitions, at about 300 messages a second, until `stop`.
fn produce(addresses: String, stop: Arc<AtomicBool>, history: Arc<Mutex<History>>) {
    let mut next = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let Some(client) = connect(&addresses) else {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        let producer = Producer::new(
            &client,
            TOPIC,
            ProducerConfig {
                acks: AckMode::All,
                batch_messages: 10,
                linger: Duration::from_millis(5),
                delivery_reports: true,
                ..ProducerConfig::default()
            },
        );
        let Ok(mut producer) = producer else {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        let mut sent: HashMap<Receipt, u64> = HashMap::new();
        let started = Instant::now();
        let mut here = 0u64;
        while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(60) {
            let id = next;
            let partition = (id % u64::from(PARTITIONS)) as u32;
            match producer.send_to(partition, None, &numbered_payload(id, SIZE)) {
                Ok(receipt) => {
                    sent.insert(receipt, id);
                    next += 1;
                    here += 1;
                    history.lock().unwrap().sent += 1;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
            if here.is_multiple_of(10) {
                collect(&mut producer, &mut sent, &history);
                std::thread::sleep(Duration::from_millis(30));
            }
        }
        let _ = producer.close(Duration::from_secs(30));
        collect(&mut producer, &mut sent, &history);
        history.lock().unwrap().unknown += sent.len() as u64;
    }
}

fn collect(
    producer: &mut Producer,
    sent: &mut HashMap<Receipt, u64>,
    history: &Arc<Mutex<History>>,
) {
    for delivery in producer.take_deliveries() {
        let ids: Vec<u64> = (0..u64::from(delivery.messages))
            .filter_map(|n| {
                sent.remove(&Receipt {
                    partition: delivery.partition,
                    sequence: delivery.first_sequence + n,
                })
            })
            .collect();
        let mut h = history.lock().unwrap();
        match delivery.outcome {
            Outcome::Stored(stored) => h.acked.push((delivery.partition, stored.base_offset, ids)),
            Outcome::Failed(_) => h.failed.extend(ids),
            Outcome::Unknown(_) => h.unknown += ids.len() as u64,
        }
    }
}

/// The consumer: every partition from the start, recording what it reads.
fn consume(addresses: String, stop: Arc<AtomicBool>, history: Arc<Mutex<History>>) {
    let mut positions: BTreeMap<u32, u64> = BTreeMap::new();
    while !stop.load(Ordering::Relaxed) {
        let Some(client) = connect(&addresses) else {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        let start = if positions.is_empty() {
            Start::Earliest
        } else {
            Start::At(positions.clone())
        };
        let Ok(mut consumer) =
            TopicConsumer::new(&client, TOPIC, start, TopicConsumerConfig::default())
        else {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        while !stop.load(Ordering::Relaxed) {
            match consumer.poll(Duration::from_millis(200)) {
                Ok(messages) => {
                    let mut h = history.lock().unwrap();
                    for m in messages {
                        let id = check_numbered_payload(&m.value, SIZE);
                        h.read.entry(m.partition).or_default().push((m.offset, id));
                    }
                    drop(h);
                    positions = consumer.positions();
                }
                Err(_) => break,
            }
        }
    }
}

fn leader_of(client: &Client, partition: u32) -> Option<u32> {
    let m = client.metadata(&[TOPIC]).ok()?;
    Some(
        m.topics
            .first()?
            .partitions
            .get(partition as usize)?
            .broker_id,
    )
}

/// A partition whose only in-sync copy is on `broker`, if any. Its disk is
/// then the only one known to hold every committed byte of that partition
/// (its followers hold what was committed when they left, but ringlog
/// elects only in-sync copies: Kafka's eligible leader replicas, KIP-966,
/// are not built), so losing it leaves the partition offline until an
/// operator's unclean election — a second failure, outside what the
/// checker may demand be survived. `None` when the registry cannot say.
fn sole_in_sync_copy(client: &Client, broker: u32) -> Option<Option<u32>> {
    let m = client.metadata(&[TOPIC]).ok()?;
    Some(
        m.topics
            .first()?
            .partitions
            .iter()
            .find(|p| p.isr == [broker])
            .map(|p| p.partition),
    )
}

fn node(id: u32) -> &'static str {
    BROKERS[(id - 1) as usize]
}

/// The leader-epoch entries of a copy's partition directory.
fn epochs(broker: &Broker, partition: u32) -> Vec<(u32, u64)> {
    let path = broker
        .data_dir()
        .join(format!("{TOPIC}-{partition}"))
        .join("leader-epochs");
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.starts_with("crc"))
        .filter_map(|l| {
            let (e, s) = l.split_once(' ')?;
            Some((e.parse().ok()?, s.parse().ok()?))
        })
        .collect()
}

fn files(broker: &Broker, partition: u32) -> BTreeMap<String, Vec<u8>> {
    let dir = broker.data_dir().join(format!("{TOPIC}-{partition}"));
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".log") {
            files.insert(name, std::fs::read(entry.path()).unwrap());
        }
    }
    files
}

impl History {
    fn acked_ids(&self) -> usize {
        self.acked.iter().map(|(_, _, ids)| ids.len()).sum()
    }

    fn reads(&self) -> usize {
        self.read.values().map(Vec::len).sum()
    }
}

/// The history against the final log (partition → offset → id): lost
/// acknowledged ids, acknowledged batches not at their answered offset,
/// reads the final log does not hold at that offset (read beyond the high
/// watermark, then truncated), and offsets that went backwards.
fn check_history(h: &History, final_log: &BTreeMap<u32, BTreeMap<u64, u64>>) -> Vec<String> {
    let mut anomalies = Vec::new();
    let empty = BTreeMap::new();
    let stored: BTreeSet<u64> = final_log
        .values()
        .flat_map(|l| l.values().copied())
        .collect();
    for (partition, base, ids) in &h.acked {
        let log = final_log.get(partition).unwrap_or(&empty);
        for id in ids {
            if !stored.contains(id) {
                anomalies.push(format!(
                    "lost: acknowledged id {id} (partition {partition}) is not in the final log"
                ));
            }
        }
        if let Some(first) = ids.first() {
            if log.get(base) != Some(first) {
                anomalies.push(format!(
                    "acked-offset mismatch: partition {partition} offset {base} holds {:?}, the batch's first id is {first}",
                    log.get(base)
                ));
            }
        }
    }
    for (partition, read) in &h.read {
        let log = final_log.get(partition).unwrap_or(&empty);
        let mut last = None;
        for &(offset, id) in read {
            if log.get(&offset) != Some(&id) {
                anomalies.push(format!(
                    "read beyond the high watermark or inconsistent: partition {partition} offset {offset} was read as {id}, the final log has {:?}",
                    log.get(&offset)
                ));
            }
            if last.is_some_and(|l| offset <= l) {
                anomalies.push(format!(
                    "non-monotonic read: partition {partition} offset {offset} after {last:?}"
                ));
            }
            last = Some(offset);
        }
    }
    anomalies
}

/// The copies' epoch files (epoch, start offset) must agree on the start of
/// every epoch they share: two starts for one epoch mean two leaders
/// wrote in it.
fn check_epochs(partition: u32, copies: &[Vec<(u32, u64)>]) -> Vec<String> {
    let mut anomalies = Vec::new();
    let mut starts: BTreeMap<u32, u64> = BTreeMap::new();
    for copy in copies {
        for &(epoch, start) in copy {
            if let Some(other) = starts.insert(epoch, start) {
                if other != start {
                    anomalies.push(format!(
                        "two leaders in one epoch: partition {partition} epoch {epoch} starts at {other} and at {start}"
                    ));
                }
            }
        }
    }
    anomalies
}

#[test]
fn the_checker_names_each_anomaly() {
    // Partition 0's final log: offsets 0, 40, 80 hold ids 1, 2, 3.
    let final_log = BTreeMap::from([(0, BTreeMap::from([(0, 1), (40, 2), (80, 3)]))]);
    let clean = History {
        acked: vec![(0, 0, vec![1, 2]), (0, 80, vec![3])],
        read: BTreeMap::from([(0, vec![(0, 1), (40, 2), (80, 3)])]),
        ..History::default()
    };
    assert_eq!(check_history(&clean, &final_log), Vec::<String>::new());
    let cases: [(History, &str); 4] = [
        (
            History {
                acked: vec![(0, 120, vec![4])],
                ..History::default()
            },
            "lost: acknowledged id 4",
        ),
        (
            History {
                acked: vec![(0, 40, vec![3])],
                ..History::default()
            },
            "acked-offset mismatch: partition 0 offset 40",
        ),
        (
            History {
                read: BTreeMap::from([(0, vec![(120, 4)])]),
                ..History::default()
            },
            "read beyond the high watermark",
        ),
        (
            History {
                read: BTreeMap::from([(0, vec![(40, 2), (0, 1)])]),
                ..History::default()
            },
            "non-monotonic read: partition 0 offset 0",
        ),
    ];
    for (history, expected) in cases {
        let found = check_history(&history, &final_log);
        assert!(
            found.iter().any(|a| a.starts_with(expected)),
            "expected {expected:?}, found {found:?}"
        );
    }
    assert_eq!(
        check_epochs(0, &[vec![(1, 0), (2, 40)], vec![(1, 0)]]),
        Vec::<String>::new()
    );
    let two = check_epochs(0, &[vec![(1, 0), (2, 40)], vec![(1, 0), (2, 80)]]);
    assert!(
        two.iter()
            .any(|a| a.starts_with("two leaders in one epoch: partition 0 epoch 2")),
        "{two:?}"
    );
}

#[test]
fn r20_5_jepsen_style_faults_lose_nothing_acknowledged_and_keep_the_copies_identical() {
    let seconds: u64 = std::env::var("RINGLOG_NEMESIS_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let seed: u64 = std::env::var("RINGLOG_NEMESIS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    eprintln!("nemesis: {seconds} s of faults, seed {seed} (RINGLOG_NEMESIS_SEED replays it)");
    let mut nodes = vec!["etcd"];
    nodes.extend(BROKERS);
    nodes.push("cli");
    let net = Net::new(&nodes).unwrap_or_else(|e| panic!("cannot build the test network: {e}"));
    // Everything from here on talks from the clients' namespace.
    net.enter("cli").unwrap_or_else(|e| panic!("{e}"));
    let etcd = Etcd::start_in(&net.ns("etcd"), &net.address("etcd"));
    let mut brokers: Vec<Broker> = (1..=3u32)
        .map(|id| {
            let name = node(id);
            Broker::start(BrokerOptions {
                shards: 1,
                listen: Some(format!("{}:9092", net.address(name))),
                netns: Some(net.ns(name)),
                config_toml:
                    "etcd_lease_ttl_s = 2\netcd_timeout_ms = 1500\nreplica_lag_time_max_ms = 4000\n"
                        .into(),
                ..BrokerOptions::clustered(&etcd, "jepsen", id)
            })
        })
        .collect();
    let addresses: String = BROKERS
        .iter()
        .map(|b| format!("{}:9092", net.address(b)))
        .collect::<Vec<_>>()
        .join(",");
    let client = connect(&addresses).unwrap();
    eventually("three live brokers", Duration::from_secs(60), || {
        let n = client
            .metadata(&[])
            .map_err(|e| e.to_string())?
            .brokers
            .len();
        if n == 3 {
            Ok(())
        } else {
            Err(format!("{n}"))
        }
    });
    client
        .create_topic(
            TOPIC,
            PARTITIONS,
            &TopicSettings {
                replication_factor: 3,
                min_insync_replicas: 2,
                segment_bytes: 1 << 20,
                ..TopicSettings::default()
            },
        )
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let history = Arc::new(Mutex::new(History::default()));
    let workers: Vec<_> = [produce as fn(_, _, _), consume]
        .into_iter()
        .map(|work| {
            let (addresses, stop, history) = (addresses.clone(), stop.clone(), history.clone());
            std::thread::spawn(move || work(addresses, stop, history))
        })
        .collect();

    let mut rng = Rng(seed);
    let mut injected: BTreeMap<Fault, u32> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2_000 + rng.below(2_000)));
        let fault = FAULTS[rng.below(FAULTS.len() as u64) as usize];
        let partition = rng.below(u64::from(PARTITIONS)) as u32;
        let Some(leader) = connect(&addresses).and_then(|c| leader_of(&c, partition)) else {
            continue;
        };
        let index = (leader - 1) as usize;
        let hold = Duration::from_millis(3_000 + rng.below(4_000));
        // A disk is lost only where another in-sync copy holds what it held.
        let wiped = match fault {
            Fault::LeaderDiskLost | Fault::PowerLossLeaderWiped => Some(leader),
            Fault::WipeFollower => Some(1 + ((leader - 1 + 1 + rng.below(2) as u32) % 3)),
            _ => None,
        };
        if let Some(victim) = wiped {
            let sole = connect(&addresses).and_then(|c| sole_in_sync_copy(&c, victim));
            if sole != Some(None) {
                eprintln!("        {fault:?} on broker {victim} skipped: it holds the only in-sync copy of partition {sole:?} (or the registry did not answer)");
                continue;
            }
        }
        *injected.entry(fault).or_default() += 1;
        eprintln!(
            "{:>5.1} s: {fault:?} (partition {partition}'s leader is broker {leader}) for {:.1} s",
            seconds as f64
                - deadline
                    .saturating_duration_since(Instant::now())
                    .as_secs_f64(),
            hold.as_secs_f64()
        );
        match fault {
            Fault::KillLeader => {
                brokers[index].kill9();
                std::thread::sleep(hold);
                brokers[index].restart();
            }
            Fault::PauseLeader => {
                brokers[index].pause(true);
                std::thread::sleep(hold);
                brokers[index].pause(false);
            }
            Fault::LeaderFromFollowers => {
                for other in BROKERS.iter().filter(|b| **b != node(leader)) {
                    net.set_link(node(leader), other, false);
                }
                std::thread::sleep(hold);
                net.heal();
            }
            Fault::LeaderFromEtcd => {
                net.set_link(node(leader), "etcd", false);
                std::thread::sleep(hold);
                net.heal();
            }
            Fault::IsolateOne => {
                let victim = node(1 + rng.below(3) as u32);
                for other in &nodes {
                    if *other != victim {
                        net.set_link(victim, other, false);
                    }
                }
                std::thread::sleep(hold);
                net.heal();
            }
            Fault::WipeFollower => {
                let follower = wiped.unwrap_or(leader);
                let i = (follower - 1) as usize;
                brokers[i].kill9();
                std::fs::remove_dir_all(brokers[i].data_dir()).unwrap();
                // Its old registration must expire first: the new disk's
                // broker is not the old one's to take over.
                std::thread::sleep(hold.max(Duration::from_secs(3)));
                brokers[i].restart();
            }
            Fault::LeaderDiskLost => {
                brokers[index].kill9();
                std::fs::remove_dir_all(brokers[index].data_dir()).unwrap();
                brokers[index].restart();
                std::thread::sleep(hold);
            }
            Fault::PowerLossLeaderWiped => {
                for broker in &mut brokers {
                    broker.pause(false);
                    broker.kill9();
                }
                std::fs::remove_dir_all(brokers[index].data_dir()).unwrap();
                // Every lease (2 s) expires, as after a real outage.
                std::thread::sleep(Duration::from_secs(3));
                brokers[index].restart();
                std::thread::sleep(hold / 2);
                for (i, broker) in brokers.iter_mut().enumerate() {
                    if i != index {
                        broker.restart();
                    }
                }
                std::thread::sleep(hold / 2);
            }
            Fault::Rotate => {
                if let Some(c) = connect(&addresses) {
                    if let Ok(m) = c.metadata(&[TOPIC]) {
                        let mut replicas =
                            m.topics[0].partitions[partition as usize].replicas.clone();
                        replicas.rotate_left(1);
                        let moved = c.reassign_partition(TOPIC, partition, &replicas);
                        std::thread::sleep(hold / 2);
                        let elect = ElectLeaders {
                            topic: TOPIC.into(),
                            ..ElectLeaders::default()
                        };
                        let elected = c.elect_leaders(&elect, None);
                        eprintln!(
                            "        reassign to {replicas:?}: {:?}; elect-leaders: {:?}",
                            moved.map(|r| r.moving_to),
                            elected.map(|e| e
                                .iter()
                                .map(|p| (p.partition, p.leader, p.error))
                                .collect::<Vec<_>>())
                        );
                    }
                }
                std::thread::sleep(hold / 2);
            }
        }
    }
    net.heal();
    for broker in &mut brokers {
        broker.pause(false);
        if !broker.is_running() {
            broker.restart();
        }
    }
    // Let the workload see the healed cluster, then stop it.
    std::thread::sleep(Duration::from_secs(5));
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.join().unwrap();
    }
    let client = connect(&addresses).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let m = client
            .metadata(&[TOPIC])
            .map(|m| m.topics[0].partitions.clone());
        if m.as_ref()
            .is_ok_and(|ps| ps.iter().all(|p| p.isr.len() == 3))
        {
            break;
        }
        if Instant::now() > deadline {
            // What each broker said of the partitions still out of sync:
            // its warnings and errors, the last 40.
            let stuck: Vec<String> = m
                .as_ref()
                .map(|ps| {
                    ps.iter()
                        .filter(|p| p.isr.len() < 3)
                        .map(|p| format!("{TOPIC}-{}", p.partition))
                        .collect()
                })
                .unwrap_or_default();
            for (i, broker) in brokers.iter().enumerate() {
                let log = broker.log();
                let lines: Vec<&str> = log
                    .lines()
                    .filter(|l| l.contains("WARN") || l.contains("ERROR"))
                    .filter(|l| stuck.iter().any(|s| l.contains(s.as_str())))
                    .collect();
                eprintln!("broker {}, about {stuck:?}:", i + 1);
                for line in &lines[lines.len().saturating_sub(40)..] {
                    eprintln!("  {line}");
                }
            }
            panic!("every copy in sync after the faults: not within 120 s; last: {m:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }

    // The checker.
    let h = history.lock().unwrap();
    let mut anomalies: Vec<String> = Vec::new();
    let mut final_log: BTreeMap<u32, BTreeMap<u64, u64>> = BTreeMap::new();
    let mut stored: BTreeSet<u64> = BTreeSet::new();
    for p in 0..PARTITIONS {
        let log: BTreeMap<u64, u64> = read_all(&client, TOPIC, p, 0)
            .into_iter()
            .map(|m| (m.offset, check_numbered_payload(&m.value, SIZE)))
            .collect();
        stored.extend(log.values());
        final_log.insert(p, log);
    }
    let (acked_ids, reads) = (h.acked_ids(), h.reads());
    anomalies.extend(check_history(&h, &final_log));
    // A batch reported failed was refused before it was appended, every
    // time it was sent: finding it is a lie in the delivery report.
    anomalies.extend(
        h.failed
            .iter()
            .filter(|id| stored.contains(id))
            .map(|id| format!("false failure: id {id} was reported failed but is stored")),
    );
    for p in 0..PARTITIONS {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let copies: Vec<_> = brokers.iter().map(|b| files(b, p)).collect();
            if copies.windows(2).all(|w| w[0] == w[1]) {
                break;
            }
            if Instant::now() > deadline {
                anomalies.push(format!("divergence: the copies of partition {p} differ"));
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let copies: Vec<_> = brokers.iter().map(|b| epochs(b, p)).collect();
        anomalies.extend(check_epochs(p, &copies));
    }
    let epochs_now: Vec<i32> = client.metadata(&[TOPIC]).unwrap().topics[0]
        .partitions
        .iter()
        .map(|p| p.leader_epoch)
        .collect();
    eprintln!(
        "nemesis: faults {injected:?}; {} sent, {acked_ids} acknowledged (acks=all), {} failed, {} unknown, {reads} read, {} in the final logs; leader epochs now {epochs_now:?}; anomalies: {}",
        h.sent,
        h.failed.len(),
        h.unknown,
        stored.len(),
        anomalies.len()
    );
    assert!(
        anomalies.is_empty(),
        "{} anomalies (seed {seed}), the first:\n{}",
        anomalies.len(),
        anomalies
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(acked_ids > 0, "the workload acknowledged nothing");
}
