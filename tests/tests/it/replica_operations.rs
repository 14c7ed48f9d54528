//! Issue 20, items 4 and 6: the operator's commands for replicated
//! partitions, on real brokers and a real etcd, through the `ringlog` CLI —
//! preferred elections that lose no write, moves (also off the leader, also
//! raising the replication factor, also of a topic with one copy),
//! decommissioning a broker, and an unclean election refused, then forced.

use super::replication::{
    all_producer, cluster, files, ids, metadata, options, replicated, wait_identical, WAIT,
};
use super::util::read_all;
use harness::etcd::Etcd;
use harness::{check_numbered_payload, eventually, numbered_payload, Broker};
use protocol::client::{AckMode, Client, Producer, ProducerConfig, Receipt, TopicSettings};
use protocol::ErrorCode;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const SIZE: usize = 48;

/// Runs the `ringlog` CLI against `address`: exit status, stdout, stderr.
pub(super) fn ringlog(address: &str, args: &[&str]) -> (i32, String, String) {
    let output = std::process::Command::new(harness::binary("ringlog"))
        .arg("--brokers")
        .arg(address)
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A producer thread: unique ids to `topic`'s partitions round robin, with
/// delivery reports, until `stop`; returns the acknowledged ids.
fn produce_until(
    address: String,
    topic: &'static str,
    partitions: u32,
    acks: AckMode,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<BTreeSet<u64>> {
    std::thread::spawn(move || {
        let client = Client::connect(&address).unwrap();
        let mut producer = Producer::new(
            &client,
            topic,
            ProducerConfig {
                acks,
                batch_messages: 20,
                linger: Duration::from_millis(5),
                delivery_reports: true,
                ..ProducerConfig::default()
            },
        )
        .unwrap();
        let mut sent: HashMap<Receipt, u64> = HashMap::new();
        let mut acked = BTreeSet::new();
        let mut collect = |producer: &mut Producer, sent: &mut HashMap<Receipt, u64>| {
            for delivery in producer.take_deliveries() {
                let ids = (0..u64::from(delivery.messages)).filter_map(|n| {
                    sent.remove(&Receipt {
                        partition: delivery.partition,
                        sequence: delivery.first_sequence + n,
                    })
                });
                let ids: Vec<u64> = ids.collect();
                if delivery.stored().is_some() {
                    acked.extend(ids);
                }
            }
        };
        let mut id = 0u64;
        while !stop.load(Ordering::Relaxed) {
            if let Ok(receipt) = producer.send_to(
                (id % u64::from(partitions)) as u32,
                None,
                &numbered_payload(id, SIZE),
            ) {
                sent.insert(receipt, id);
                id += 1;
            }
            if id.is_multiple_of(20) {
                collect(&mut producer, &mut sent);
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = producer.close(Duration::from_secs(30));
        collect(&mut producer, &mut sent);
        acked
    })
}

/// Waits until every acknowledged id is readable (below the high
/// watermark, which moves once every in-sync copy has flushed).
fn wait_stored(client: &Client, topic: &str, partitions: u32, acked: &BTreeSet<u64>) {
    eventually("every acknowledged message readable", WAIT, || {
        let log = stored(client, topic, partitions);
        let lost: Vec<_> = acked.difference(&log).take(10).collect();
        if lost.is_empty() {
            Ok(())
        } else {
            Err(format!("acknowledged and not in the log: {lost:?}"))
        }
    });
}

/// Every id in `topic`'s partitions.
fn stored(client: &Client, topic: &str, partitions: u32) -> BTreeSet<u64> {
    (0..partitions)
        .flat_map(|p| read_all(client, topic, p, 0))
        .map(|m| check_numbered_payload(&m.value, SIZE))
        .collect()
}

fn broker_by_id(brokers: &[Broker], id: u32) -> &Broker {
    brokers
        .iter()
        .find(|b| b.options().broker_id == id)
        .unwrap()
}

pub(super) fn wait_full_isr(client: &Client, topic: &str) {
    eventually("every replica in sync", WAIT, || {
        let m = client.metadata(&[topic]).map_err(|e| e.to_string())?;
        let t = &m.topics[0];
        if t.partitions.iter().all(|p| p.isr.len() == p.replicas.len()) {
            Ok(())
        } else {
            Err(format!("{:?}", t.partitions))
        }
    });
}

#[test]
fn r20_4_elect_leaders_gives_partitions_back_to_their_preferred_replica_and_loses_no_write() {
    let etcd = Etcd::start();
    let mut brokers = cluster(&etcd, "preferred", 3);
    let client = brokers[0].client();
    client.create_topic("pref", 3, &replicated(3, 2)).unwrap();
    wait_full_isr(&client, "pref");
    // Broker 1 restarts: the partitions it led move to others and stay
    // there once it is back in sync.
    brokers[0].kill9();
    brokers[0].restart();
    let client = brokers[1].client();
    eventually("broker 1 back in sync, leading nothing", WAIT, || {
        let m = client.metadata(&["pref"]).map_err(|e| e.to_string())?;
        let ps = &m.topics[0].partitions;
        if ps.iter().all(|p| p.broker_id != 1 && p.isr.len() == 3) {
            Ok(())
        } else {
            Err(format!("{ps:?}"))
        }
    });
    let before = metadata(&client, "pref").topics[0].partitions.clone();
    let displaced = before
        .iter()
        .filter(|p| p.replicas[0] != p.broker_id)
        .count();
    assert!(displaced >= 1, "{before:?}");
    // acks=written: a handover waits until the new leader has everything,
    // so not even a write acknowledged by the leader alone is lost.
    let stop = Arc::new(AtomicBool::new(false));
    let producer = produce_until(
        brokers[1].address(),
        "pref",
        3,
        AckMode::Written,
        stop.clone(),
    );
    std::thread::sleep(Duration::from_secs(1));
    let (code, out, err) = ringlog(&brokers[1].address(), &["partitions", "elect-leaders"]);
    eprintln!("ringlog partitions elect-leaders ->\n{out}{err}");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("hands over to broker"), "{out}");
    assert!(
        out.contains(&format!(
            "{displaced} partition(s) led by their preferred replica again"
        )),
        "{out}"
    );
    let after = metadata(&client, "pref").topics[0].partitions.clone();
    for p in &after {
        assert_eq!(p.broker_id, p.replicas[0], "{after:?}");
        assert_eq!(ids(&p.isr), vec![1, 2, 3], "{after:?}");
    }
    for (b, a) in before.iter().zip(&after) {
        if b.replicas[0] != b.broker_id {
            assert!(a.leader_epoch > b.leader_epoch, "{b:?} -> {a:?}");
        }
    }
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let acked = producer.join().unwrap();
    assert!(acked.len() > 100, "{}", acked.len());
    wait_stored(&client, "pref", 3, &acked);
    eprintln!(
        "{} messages acknowledged (acks=written) across the handovers, all in the log",
        acked.len()
    );
    for p in 0..3 {
        let all: Vec<&Broker> = brokers.iter().collect();
        wait_identical(&all, "pref", p);
    }
    // Nothing left to do is said so, exit 0.
    let (code, out, _) = ringlog(&brokers[1].address(), &["partitions", "elect-leaders"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("every partition is led by its preferred replica"),
        "{out}"
    );
}

#[test]
fn r20_4_reassign_moves_a_partition_off_its_leader_then_raises_its_replication_factor() {
    let etcd = Etcd::start();
    let brokers = cluster(&etcd, "moves", 3);
    let client = brokers[0].client();
    client.create_topic("moved", 1, &replicated(2, 1)).unwrap();
    wait_full_isr(&client, "moved");
    let start = metadata(&client, "moved").topics[0].partitions[0].clone();
    let (a, b) = (start.replicas[0], start.replicas[1]);
    assert_eq!(start.broker_id, a);
    let c = (1..=3).find(|x| !start.replicas.contains(x)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let producer = produce_until(brokers[0].address(), "moved", 1, AckMode::All, stop.clone());
    std::thread::sleep(Duration::from_millis(500));
    // Off the leader: [a, b] to [b, c]. c catches up, b takes over, a's
    // copy goes.
    let target = format!("{b},{c}");
    let (code, out, err) = ringlog(
        &brokers[0].address(),
        &[
            "partitions",
            "reassign",
            "moved",
            "--partition",
            "0",
            "--replicas",
            &target,
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("moving to {b},{c}")), "{out}");
    assert!(out.contains("1 partition(s) moved"), "{out}");
    let moved = metadata(&client, "moved").topics[0].partitions[0].clone();
    assert_eq!(moved.replicas, vec![b, c], "{moved:?}");
    assert!(moved.moving_to.is_empty(), "{moved:?}");
    assert_eq!(ids(&moved.isr), ids(&[b, c]), "{moved:?}");
    assert_eq!(
        moved.broker_id, b,
        "the leader handed over to the target's first"
    );
    assert!(moved.leader_epoch > start.leader_epoch);
    eventually("the old copy deleted", WAIT, || {
        let dir = broker_by_id(&brokers, a).data_dir().join("moved-0");
        if dir.exists() {
            Err(format!("{} still there", dir.display()))
        } else {
            Ok(())
        }
    });
    // Raised to three copies: a gets a new, empty copy that catches up.
    let target = format!("{b},{c},{a}");
    let (code, out, err) = ringlog(
        &brokers[0].address(),
        &[
            "partitions",
            "reassign",
            "moved",
            "--partition",
            "0",
            "--replicas",
            &target,
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let raised = metadata(&client, "moved").topics[0].partitions[0].clone();
    assert_eq!(raised.replicas, vec![b, c, a]);
    assert_eq!(ids(&raised.isr), vec![1, 2, 3]);
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let acked = producer.join().unwrap();
    assert!(acked.len() > 100, "{}", acked.len());
    wait_stored(&client, "moved", 1, &acked);
    let all: Vec<&Broker> = brokers.iter().collect();
    wait_identical(&all, "moved", 0);
    assert!(!files(&brokers[0], "moved", 0).is_empty());
    // The same replicas again: nothing to do.
    let (code, out, _) = ringlog(
        &brokers[0].address(),
        &[
            "partitions",
            "reassign",
            "moved",
            "--partition",
            "0",
            "--replicas",
            &target,
        ],
    );
    assert_eq!(code, 0);
    assert!(out.contains("its replicas are"), "{out}");

    // Refusals, each with its code and a message that says why.
    let refused = |replicas: &[u32], partition: u32| {
        client
            .reassign_partition("moved", partition, replicas)
            .unwrap_err()
    };
    let e = refused(&[1, 9], 0);
    assert_eq!(e.code(), Some(ErrorCode::InvalidReplicas), "{e}");
    assert!(e.to_string().contains("broker 9 is not live"), "{e}");
    let e = refused(&[1, 1], 0);
    assert_eq!(e.code(), Some(ErrorCode::InvalidReplicas), "{e}");
    let e = refused(&[], 0);
    assert_eq!(e.code(), Some(ErrorCode::InvalidReplicas), "{e}");
    let e = refused(&[1], 4);
    assert_eq!(e.code(), Some(ErrorCode::UnknownPartition), "{e}");
    let e = client.reassign_partition("nope", 0, &[1]).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::UnknownTopic), "{e}");
    client.create_topic("strict", 1, &replicated(3, 2)).unwrap();
    let e = client.reassign_partition("strict", 0, &[1]).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::InvalidReplicas), "{e}");
    assert!(e.to_string().contains("min_insync_replicas 2"), "{e}");
}

#[test]
fn r20_4_decommission_moves_every_copy_off_a_broker_and_it_can_be_stopped() {
    let etcd = Etcd::start();
    let mut brokers = cluster(&etcd, "decom", 3);
    let client = brokers[0].client();
    client.create_topic("two", 3, &replicated(2, 1)).unwrap();
    client
        .create_topic("one", 3, &TopicSettings::default())
        .unwrap();
    wait_full_isr(&client, "two");
    let mut producer = all_producer(&client, "two");
    for i in 0..3_000u64 {
        producer
            .send_to((i % 3) as u32, None, &numbered_payload(i, SIZE))
            .unwrap();
    }
    producer.flush().unwrap();
    let mut single = Producer::new(
        &client,
        "one",
        ProducerConfig {
            acks: AckMode::Flushed,
            ..ProducerConfig::default()
        },
    )
    .unwrap();
    for i in 0..3_000u64 {
        single
            .send_to((i % 3) as u32, None, &numbered_payload(i, SIZE))
            .unwrap();
    }
    single.flush().unwrap();
    drop((producer, single));
    let (code, out, err) = ringlog(
        &brokers[1].address(),
        &["brokers", "decommission", "1", "--timeout-s", "120"],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("broker 1 holds no copy now"), "{out}");
    let m = brokers[1].client().metadata(&["two", "one"]).unwrap();
    for topic in &m.topics {
        for p in &topic.partitions {
            assert!(
                !p.replicas.contains(&1) && p.broker_id != 1 && !p.isr.contains(&1),
                "{}: {p:?}",
                topic.name
            );
            assert!(!p.replicas.is_empty(), "replicated now: {p:?}");
        }
    }
    eventually("broker 1's copies deleted", WAIT, || {
        let left: Vec<String> = std::fs::read_dir(brokers[0].data_dir())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("two-") || n.starts_with("one-"))
            .collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    });
    // Gone, and nothing is missing.
    brokers[0].stop();
    let client = brokers[1].client();
    assert_eq!(stored(&client, "two", 3).len(), 3_000);
    assert_eq!(stored(&client, "one", 3).len(), 3_000);
    let (code, out, _) = ringlog(&brokers[1].address(), &["brokers", "decommission", "2"]);
    assert_ne!(code, 0, "{out}");
}

#[test]
fn r20_6_an_unclean_election_is_refused_then_forced_and_the_old_leader_follows_it() {
    let etcd = Etcd::start();
    let mut brokers = cluster(&etcd, "unclean", 2);
    let client = brokers[0].client();
    client.create_topic("risky", 1, &replicated(2, 1)).unwrap();
    wait_full_isr(&client, "risky");
    let leader = metadata(&client, "risky").topics[0].partitions[0].broker_id;
    let (l, f) = if leader == 1 { (0, 1) } else { (1, 0) };
    let follower_id = brokers[f].options().broker_id;
    let mut producer = all_producer(&brokers[l].client(), "risky");
    for i in 0..100u64 {
        producer
            .send_to(0, None, &numbered_payload(i, SIZE))
            .unwrap();
    }
    producer.flush().unwrap();
    wait_identical(&[&brokers[0], &brokers[1]], "risky", 0);
    // The follower dies; the leader goes on alone (min_insync 1) ...
    brokers[f].kill9();
    let via_leader = brokers[l].client();
    eventually("the ISR shrunk to the leader", WAIT, || {
        let isr = metadata(&via_leader, "risky").topics[0].partitions[0]
            .isr
            .clone();
        if isr == [leader] {
            Ok(())
        } else {
            Err(format!("{isr:?}"))
        }
    });
    for i in 100..200u64 {
        producer
            .send_to(0, None, &numbered_payload(i, SIZE))
            .unwrap();
    }
    producer.flush().unwrap();
    drop(producer);
    // ... then dies too, and the follower comes back: offline.
    brokers[l].kill9();
    brokers[f].restart();
    let via_follower = brokers[f].client();
    eventually("the partition offline", WAIT, || {
        let m = via_follower
            .metadata(&["risky"])
            .map_err(|e| e.to_string())?;
        let p = &m.topics[0].partitions[0];
        if m.brokers.len() == 1 && m.brokers[0].broker_id == follower_id && p.broker_id == leader {
            Ok(())
        } else {
            Err(format!("{m:?}"))
        }
    });
    let address = brokers[f].address();
    let (code, out, err) = ringlog(&address, &["partitions", "--offline"]);
    assert_eq!(code, 0);
    assert!(
        out.lines()
            .any(|l| l.starts_with("risky\t0\t") && l.ends_with("offline")),
        "{out}{err}"
    );
    let (code, out, err) = ringlog(
        &address,
        &["partitions", "elect", "risky", "--partition", "0"],
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("no in-sync replica is live"), "{err}");
    assert!(err.contains("--unclean"), "{err}");
    let (code, out, err) = ringlog(
        &address,
        &[
            "partitions",
            "elect",
            "risky",
            "--partition",
            "0",
            "--unclean",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains("warning") && err.contains("unclean election"),
        "{err}"
    );
    assert!(
        out.contains(&format!("broker {follower_id} leads in epoch")),
        "{out}"
    );
    let p = metadata(&via_follower, "risky").topics[0].partitions[0].clone();
    assert_eq!(
        (p.broker_id, p.isr.clone()),
        (follower_id, vec![follower_id])
    );
    // It takes writes; the old leader returns, is cut back to the new
    // leader's log, and follows it.
    let mut producer = all_producer(&via_follower, "risky");
    for i in 1_000..1_010u64 {
        producer
            .send_to(0, None, &numbered_payload(i, SIZE))
            .unwrap();
    }
    producer.flush().unwrap();
    brokers[l].restart();
    wait_full_isr(&via_follower, "risky");
    wait_identical(&[&brokers[0], &brokers[1]], "risky", 0);
    let log: Vec<u64> = read_all(&via_follower, "risky", 0, 0)
        .iter()
        .map(|m| check_numbered_payload(&m.value, SIZE))
        .collect();
    let expected: Vec<u64> = (0..100).chain(1_000..1_010).collect();
    assert_eq!(log, expected, "the 100 only the old leader held are lost");
    // An election on a partition that has its leader is no election.
    let (code, out, _) = ringlog(
        &address,
        &["partitions", "elect", "risky", "--partition", "0"],
    );
    assert_eq!(code, 0);
    assert!(out.contains("nothing to elect"), "{out}");
}

#[test]
fn r20_1_copies_spread_over_racks_and_decommission_keeps_them_apart() {
    // A rack name that is not one is refused at start, clearly.
    let dir = harness::TempDir::new("bad-rack");
    let output = std::process::Command::new(harness::binary("broker"))
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0", "--rack", "rack one"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("rack must be"), "{stderr}");

    // Brokers 1 and 2 in rack a, 3 and 4 in rack b.
    let etcd = Etcd::start();
    let brokers: Vec<Broker> = (1..=4u32)
        .map(|id| {
            let mut o = options(&etcd, "racks", id);
            o.args = vec!["--rack".into(), if id <= 2 { "a" } else { "b" }.into()];
            Broker::start(o)
        })
        .collect();
    let client = brokers[0].client();
    eventually("four brokers live", WAIT, || {
        let n = client
            .metadata(&[])
            .map_err(|e| e.to_string())?
            .brokers
            .len();
        if n == 4 {
            Ok(())
        } else {
            Err(format!("{n}"))
        }
    });
    let (code, out, err) = ringlog(&brokers[0].address(), &["brokers"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("broker\tshard\taddress\track\n"), "{out}");
    for (id, rack) in [(1, "a"), (2, "a"), (3, "b"), (4, "b")] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("{id}\t")) && l.ends_with(&format!("\t{rack}"))),
            "broker {id} in rack {rack}: {out}"
        );
    }
    let rack = |b: u32| if b <= 2 { 'a' } else { 'b' };
    client.create_topic("spread", 8, &replicated(2, 1)).unwrap();
    let m = metadata(&client, "spread");
    let mut leaders = [0usize; 5];
    for p in &m.topics[0].partitions {
        let racks: BTreeSet<char> = p.replicas.iter().map(|b| rack(*b)).collect();
        assert_eq!(racks.len(), 2, "one copy in each rack: {p:?}");
        leaders[p.broker_id as usize] += 1;
    }
    assert_eq!(&leaders[1..], &[2, 2, 2, 2], "leaders spread evenly");
    wait_full_isr(&client, "spread");
    // Broker 3's copies go to broker 4, the other broker of rack b, though
    // brokers 1 and 2 hold as many copies and have lower ids.
    let (code, out, err) = ringlog(
        &brokers[0].address(),
        &["brokers", "decommission", "3", "--timeout-s", "120"],
    );
    assert_eq!(code, 0, "{out}{err}");
    let m = metadata(&client, "spread");
    for p in &m.topics[0].partitions {
        assert!(!p.replicas.contains(&3), "{p:?}");
        let racks: BTreeSet<char> = p.replicas.iter().map(|b| rack(*b)).collect();
        assert_eq!(racks.len(), 2, "still one copy in each rack: {p:?}");
    }
}
