//! Issue 47: a copy that lost its disk never leads or defines history.
//!
//! The outside test's power loss: three brokers on etcd, a topic with three
//! copies and min ISR 2, acks=all messages; all three brokers killed with
//! kill -9 at once, the leader's data directory replaced by an empty one,
//! and the three started again, the wiped one first. Before the fix the
//! wiped broker led in the old epoch on its empty log, shrank the ISR to
//! itself, and the others truncated every acknowledged message away. Now
//! the ISR names the data directory each member holds its copy in: the
//! wiped broker leaves the ISR and hands the leadership to a member that
//! holds the bytes; it never leads; the partition is offline until that
//! member returns, then serves every acknowledged message; the wiped copy
//! catches up and is added back by the real leader.

use super::replication::{all_producer, files, metadata, replicated, wait_identical};
use super::util::read_all;
use harness::etcd::Etcd;
use harness::{check_numbered_payload, eventually, numbered_payload, Broker};
use protocol::client::{Client, TopicSettings};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);
const SIZE: usize = 18;

fn connect(brokers: &[Broker]) -> Client {
    let addresses: Vec<String> = brokers.iter().map(Broker::address).collect();
    Client::connect(&addresses.join(",")).unwrap()
}

/// Every message of `topic-0`, checked to be exactly `0..count` in order.
/// Waited for: after a restart the leader shows what is committed once it
/// has heard from every in-sync copy in its epoch, which a busy machine
/// can delay past the moment the ISR is whole (a message lost is never
/// shown, and the wait ends in the count that says so).
fn check_every_message(client: &Client, topic: &str, count: u64) {
    let mut messages = Vec::new();
    let deadline = std::time::Instant::now() + WAIT;
    while (messages.len() as u64) < count && std::time::Instant::now() < deadline {
        messages = read_all(client, topic, 0, 0);
        if (messages.len() as u64) < count {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    assert_eq!(messages.len() as u64, count, "every acknowledged message");
    for (i, m) in messages.iter().enumerate() {
        assert_eq!(check_numbered_payload(&m.value, SIZE), i as u64);
    }
}

#[test]
fn r47_1_a_wiped_leader_started_first_after_a_power_loss_neither_leads_nor_costs_an_acked_message()
{
    power_loss_with_the_leaders_copy_lost(Lost::DataDirectory);
}

/// The same with only the partition's directory gone from the leader's
/// data directory (its data directory id unchanged): the copy knows it is
/// new because its directory was not there when the run started.
#[test]
fn r47_1_a_leader_whose_partition_directory_vanished_hands_over_after_a_power_loss() {
    power_loss_with_the_leaders_copy_lost(Lost::PartitionDirectory);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lost {
    DataDirectory,
    PartitionDirectory,
}

fn power_loss_with_the_leaders_copy_lost(lost: Lost) {
    let etcd = Etcd::start();
    let mut brokers: Vec<Broker> = super::replication::cluster(&etcd, "powerloss", 3);
    let client = connect(&brokers);
    client
        .create_topic(
            "wf",
            1,
            &TopicSettings {
                segment_bytes: 1 << 20,
                ..replicated(3, 2)
            },
        )
        .unwrap();
    const COUNT: u64 = 20_000;
    let mut producer = all_producer(&client, "wf");
    for i in 0..COUNT {
        producer
            .send_to(0, None, &numbered_payload(i, SIZE))
            .unwrap();
    }
    producer.flush().unwrap();
    assert_eq!(producer.acked_messages(), COUNT);
    drop(producer);
    let leader = metadata(&client, "wf").topics[0].partitions[0].broker_id;
    let wiped = brokers
        .iter()
        .position(|b| b.options().broker_id == leader)
        .unwrap();
    drop(client);

    // The power loss: every broker at once, and the leader's copy lost.
    for broker in &mut brokers {
        broker.kill9();
    }
    match lost {
        Lost::DataDirectory => std::fs::remove_dir_all(brokers[wiped].data_dir()).unwrap(),
        Lost::PartitionDirectory => {
            std::fs::remove_dir_all(brokers[wiped].data_dir().join("wf-0")).unwrap()
        }
    }
    // Every lease expires (TTL 2 s) before anything comes back, as after a
    // real outage: nobody else is live when the wiped broker starts.
    std::thread::sleep(Duration::from_secs(4));
    let earlier_runs = brokers[wiped].log().len();
    brokers[wiped].restart();
    let alone = brokers[wiped].client();
    eventually("the wiped broker hands the leadership on", WAIT, || {
        let m = metadata(&alone, "wf");
        let p = &m.topics[0].partitions[0];
        if p.broker_id != leader && !p.isr.contains(&leader) {
            Ok(())
        } else {
            Err(format!("leader {} isr {:?}", p.broker_id, p.isr))
        }
    });
    // Long enough for a leader's ISR check (100 ms) and a lag limit (4 s)
    // to have shrunk the ISR to itself, as the broken run did.
    std::thread::sleep(Duration::from_secs(5));
    let log = brokers[wiped].log()[earlier_runs..].to_string();
    for line in log
        .lines()
        .filter(|l| l.contains("wf-0") || l.contains("copy is new"))
    {
        eprintln!("wiped broker {leader}: {line}");
    }
    assert!(
        !log.contains("leading partition=wf-0"),
        "the wiped broker led on its empty disk:\n{log}"
    );
    let said = match lost {
        Lost::DataDirectory => "its copy is new (a new data directory, or the partition's directory was missing): it leaves the ISR",
        Lost::PartitionDirectory => {
            "no directory for this broker's copy of a partition that existed before this run"
        }
    };
    assert!(log.contains(said), "{log}");
    let offline = metadata(&alone, "wf").topics[0].partitions[0].clone();
    eprintln!(
        "while only the wiped broker runs: leader {} (epoch {}), ISR {:?}",
        offline.broker_id, offline.leader_epoch, offline.isr
    );
    drop(alone);

    // The others return; the partition serves every acknowledged message.
    for (i, broker) in brokers.iter_mut().enumerate() {
        if i != wiped {
            broker.restart();
        }
    }
    let client = connect(&brokers);
    eventually("every copy in sync again", WAIT, || {
        let p = metadata(&client, "wf").topics[0].partitions[0].clone();
        if p.isr.len() == 3 {
            Ok(())
        } else {
            Err(format!("leader {} isr {:?}", p.broker_id, p.isr))
        }
    });
    check_every_message(&client, "wf", COUNT);
    let refs: Vec<&Broker> = brokers.iter().collect();
    wait_identical(&refs, "wf", 0);
    let now = metadata(&client, "wf").topics[0].partitions[0].clone();
    for (i, broker) in brokers.iter().enumerate() {
        assert!(
            !broker.log().contains("truncated the replica to where"),
            "broker {} truncated:\n{}",
            i + 1,
            broker.log()
        );
    }
    eprintln!(
        "power loss, the leader's copy lost ({lost:?}), the wiped broker {leader} started first: {COUNT} acknowledged, {COUNT} read back; leader now {} in epoch {}, ISR {:?}; the wiped copy holds {} bytes, identical to the others",
        now.broker_id,
        now.leader_epoch,
        now.isr,
        files(&brokers[wiped], "wf", 0)
            .values()
            .map(Vec::len)
            .sum::<usize>()
    );
}

/// The ISR's only member loses its disk: nothing holds the committed
/// bytes, so the partition stays offline — the wiped broker does not lead
/// on its empty copy — until an operator accepts the loss with an unclean
/// election, which says how much is lost.
#[test]
fn r47_1_the_last_in_sync_copy_on_a_new_disk_stays_offline_until_an_unclean_election() {
    let etcd = Etcd::start();
    let mut brokers: Vec<Broker> = super::replication::cluster(&etcd, "lastcopy", 2);
    let client = connect(&brokers);
    client.create_topic("solo", 1, &replicated(2, 1)).unwrap();
    let leader = metadata(&client, "solo").topics[0].partitions[0].broker_id;
    let wiped = brokers
        .iter()
        .position(|b| b.options().broker_id == leader)
        .unwrap();
    let other = 1 - wiped;
    let mut producer = all_producer(&client, "solo");
    for i in 0..500 {
        producer
            .send_to(0, None, &numbered_payload(i, SIZE))
            .unwrap();
    }
    producer.flush().unwrap();
    drop(producer);
    // The follower goes away and leaves the ISR; the leader alone takes
    // acks=all messages (min ISR 1).
    brokers[other].kill9();
    eventually("the ISR shrinks to the leader", WAIT, || {
        let isr = metadata(&client, "solo").topics[0].partitions[0]
            .isr
            .clone();
        if isr == vec![leader] {
            Ok(())
        } else {
            Err(format!("{isr:?}"))
        }
    });
    let mut producer = all_producer(&client, "solo");
    for i in 500..1_500 {
        producer
            .send_to(0, None, &numbered_payload(i, SIZE))
            .unwrap();
    }
    producer.flush().unwrap();
    drop(producer);
    drop(client);
    brokers[wiped].kill9();
    std::fs::remove_dir_all(brokers[wiped].data_dir()).unwrap();
    std::thread::sleep(Duration::from_secs(4));
    let earlier_runs = brokers[wiped].log().len();
    brokers[wiped].restart();
    brokers[other].restart();
    let client = connect(&brokers);
    std::thread::sleep(Duration::from_secs(3));
    let log = brokers[wiped].log()[earlier_runs..].to_string();
    let p = metadata(&client, "solo").topics[0].partitions[0].clone();
    assert_eq!(
        (p.broker_id, p.isr.clone()),
        (leader, vec![leader]),
        "{p:?}"
    );
    assert!(!log.contains("leading partition=solo-0"), "{log}");
    assert!(
        log.contains("it was the only in-sync replica: the partition stays offline"),
        "{log}"
    );
    let refused = client
        .list_offsets("solo", 0, protocol::client::OffsetSpec::Latest, 0)
        .unwrap_err()
        .to_string();
    eprintln!("a client of the offline partition: {refused}");
    assert!(refused.contains("solo-0 is offline"), "{refused}");
    // The other broker's copy is out of sync (it missed the last 1,000):
    // the operator elects it, unclean; the CLI picks the copy that ends
    // last.
    let other_id = brokers[other].options().broker_id;
    let cli = std::process::Command::new(harness::binary("ringlog"))
        .args([
            "--brokers",
            &brokers[other].address(),
            "partitions",
            "elect",
            "solo",
            "--partition",
            "0",
            "--unclean",
        ])
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&cli.stdout),
        String::from_utf8_lossy(&cli.stderr)
    );
    eprintln!("ringlog partitions elect solo --unclean: {said}");
    assert!(cli.status.success(), "{said}");
    eventually("the unclean leader serves", WAIT, || {
        let p = metadata(&client, "solo").topics[0].partitions[0].clone();
        if p.broker_id == other_id {
            Ok(())
        } else {
            Err(format!("{p:?}"))
        }
    });
    // What the other copy held is served: the first 500.
    let read = read_all(&client, "solo", 0, 0);
    assert_eq!(read.len(), 500);
}
