//! Issue 27, item 8: `ringlog topic alter T --partitions N` raises a
//! topic's partition count, as Kafka's `kafka-topics --alter`: a running
//! producer starts writing to the new partitions, a group rebalances onto
//! them, a replicated topic's new partitions are replicated, the count
//! survives restarts, and it never goes down.

use super::util::read_all;
use harness::etcd::Etcd;
use harness::{binary, eventually, Broker, BrokerOptions};
use protocol::client::{
    AckMode, Client, GroupConfig, GroupConsumer, OffsetSpec, Producer, ProducerConfig,
    TopicSettings,
};
use protocol::ErrorCode;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

fn ringlog(broker: &Broker, args: &[&str]) -> std::process::Output {
    std::process::Command::new(binary("ringlog"))
        .args(["--brokers", &broker.address()])
        .args(args)
        .output()
        .unwrap()
}

fn end_offset(client: &Client, topic: &str, partition: u32) -> u64 {
    client
        .list_offsets(topic, partition, OffsetSpec::Latest, 0)
        .map(|(_, o)| o.end_offset)
        .unwrap_or(0)
}

#[test]
fn r27_8_more_partitions_are_used_by_a_running_producer_and_a_group_and_never_fewer() {
    let etcd = Etcd::start();
    let mut brokers: Vec<Broker> = (1..=2)
        .map(|id| Broker::start(BrokerOptions::clustered(&etcd, "grow", id)))
        .collect();
    let client = brokers[0].client();
    client
        .create_topic("grow", 2, &TopicSettings::default())
        .unwrap();
    // A producer that runs throughout, round robin, unkeyed.
    let stop = Arc::new(AtomicBool::new(false));
    let producing = {
        let (address, stop) = (brokers[0].address(), stop.clone());
        std::thread::spawn(move || {
            let client = Client::connect(&address).unwrap();
            let mut producer = Producer::new(
                &client,
                "grow",
                ProducerConfig {
                    acks: AckMode::Flushed,
                    batch_messages: 20,
                    metadata_max_age: Duration::from_secs(1),
                    partitioner: protocol::client::Partitioner::RoundRobin,
                    ..ProducerConfig::default()
                },
            )
            .unwrap();
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                producer.send(None, sent.to_string().as_bytes()).unwrap();
                sent += 1;
                if sent.is_multiple_of(100) {
                    producer.flush().unwrap();
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            producer.flush().unwrap();
            (sent, producer.partitions())
        })
    };
    // Two members of a group.
    let members: Vec<_> = (0..2)
        .map(|_| {
            let (address, stop) = (brokers[0].address(), stop.clone());
            std::thread::spawn(move || {
                let mut member = GroupConsumer::subscribe(
                    &address,
                    "growers",
                    &["grow"],
                    GroupConfig::default(),
                )
                .unwrap();
                let mut read = BTreeSet::new();
                while !stop.load(Ordering::Relaxed) {
                    for m in member.poll().unwrap() {
                        read.insert(m.partition);
                    }
                }
                let owned = member.assignment();
                member.close().unwrap();
                (read, owned)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));

    let altered = ringlog(
        &brokers[0],
        &["topic", "alter", "grow", "--partitions", "4"],
    );
    let stdout = String::from_utf8_lossy(&altered.stdout);
    assert!(altered.status.success(), "{altered:?}");
    assert!(
        stdout.contains("topic grow has 4 partitions now: 2 added (2..4, on brokers"),
        "{stdout}"
    );
    eventually("the producer writes to the new partitions", WAIT, || {
        let ends: Vec<u64> = (0..4).map(|p| end_offset(&client, "grow", p)).collect();
        if ends[2] > 0 && ends[3] > 0 {
            Ok(())
        } else {
            Err(format!("{ends:?}"))
        }
    });
    // Lowering is refused, with the reason, and changes nothing.
    let lowered = ringlog(
        &brokers[0],
        &["topic", "alter", "grow", "--partitions", "3"],
    );
    let stderr = String::from_utf8_lossy(&lowered.stderr);
    assert!(!lowered.status.success());
    assert!(
        stderr.contains("INVALID_CONFIG") && stderr.contains("only goes up"),
        "{stderr}"
    );
    let error = client.create_partitions("grow", 1).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::InvalidConfig), "{error}");
    assert_eq!(
        client.metadata(&["grow"]).unwrap().topics[0]
            .partitions
            .len(),
        4
    );
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    let (sent, producer_partitions) = producing.join().unwrap();
    assert_eq!(producer_partitions, 4);
    let mut read = BTreeSet::new();
    let mut owned = Vec::new();
    for member in members {
        let (r, o) = member.join().unwrap();
        read.extend(r);
        owned.extend(o);
    }
    owned.sort();
    assert_eq!(read, (0..4).collect::<BTreeSet<u32>>(), "partitions read");
    assert_eq!(
        owned,
        (0..4).map(|p| ("grow".to_string(), p)).collect::<Vec<_>>(),
        "the group owned every partition, once"
    );
    let stored: usize = (0..4).map(|p| read_all(&client, "grow", p, 0).len()).sum();
    assert_eq!(stored as u64, sent, "every message stored once");

    // A replicated topic: the new partitions get copies too.
    client
        .create_topic(
            "copies",
            1,
            &TopicSettings {
                replication_factor: 2,
                ..TopicSettings::default()
            },
        )
        .unwrap();
    let created = client.create_partitions("copies", 3).unwrap();
    assert_eq!(created.brokers.len(), 2, "{created:?}");
    eventually("the new partitions in sync on both brokers", WAIT, || {
        let m = client.metadata(&["copies"]).map_err(|e| e.to_string())?;
        let parts = &m.topics[0].partitions;
        if parts.len() == 3
            && parts
                .iter()
                .all(|p| p.replicas.len() == 2 && p.isr.len() == 2)
        {
            Ok(())
        } else {
            Err(format!("{parts:?}"))
        }
    });
    let mut producer = Producer::new(
        &client,
        "copies",
        ProducerConfig {
            acks: AckMode::All,
            ..ProducerConfig::default()
        },
    )
    .unwrap();
    for p in 0..3 {
        producer.send_to(p, None, b"replicated").unwrap();
    }
    producer.flush().unwrap();

    // Both topics keep their counts through a restart of every broker.
    for broker in &mut brokers {
        broker.stop();
        broker.restart();
    }
    let client = brokers[1].client();
    eventually("the counts after restarts", WAIT, || {
        let m = client
            .metadata(&["grow", "copies"])
            .map_err(|e| e.to_string())?;
        let counts: Vec<(String, usize)> = m
            .topics
            .iter()
            .map(|t| (t.name.clone(), t.partitions.len()))
            .collect();
        if counts.contains(&("grow".into(), 4)) && counts.contains(&("copies".into(), 3)) {
            Ok(())
        } else {
            Err(format!("{counts:?}"))
        }
    });
    eprintln!(
        "grow: 2 -> 4 partitions under a running producer ({sent} messages, all stored once) \
         and a group of 2 (read {read:?}); copies: 1 -> 3 with 2 copies each; lowering refused"
    );
}
