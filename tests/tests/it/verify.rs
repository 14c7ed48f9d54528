//! `ringlog verify` with real brokers (issue 45, item 7): the three copies
//! of a replicated topic match; one byte flipped in a follower's segment
//! file is found at its offset; a copy in another cluster is compared with
//! `--against`, and a message that differs there is found inside it.

use super::replica_operations::ringlog;
use super::replication::{cluster, metadata, replicated, wait_identical, SIZE};
use harness::{numbered_payload, Broker, BrokerOptions};
use protocol::client::{AckMode, Client, Producer, ProducerConfig, TopicSettings};
use std::time::Duration;

const MESSAGES: u64 = 20_000;

fn produce(client: &Client, topic: &str, acks: AckMode, value: impl Fn(u64) -> Vec<u8>) {
    let mut producer = Producer::new(
        client,
        topic,
        ProducerConfig {
            acks,
            batch_messages: 100,
            ..ProducerConfig::default()
        },
    )
    .unwrap();
    for n in 0..MESSAGES {
        producer.send_to(0, None, &value(n)).unwrap();
    }
    producer.close(Duration::from_secs(60)).unwrap();
}

#[test]
fn verify_finds_copies_equal_and_the_one_byte_a_disk_flipped() {
    let etcd = harness::etcd::Etcd::start();
    let mut brokers = cluster(&etcd, "verify", 3);
    let client = brokers[0].client();
    client
        .create_topic("v", 1, &replicated(3, 2))
        .unwrap_or_else(|e| panic!("{e}"));
    produce(&client, "v", AckMode::All, |n| numbered_payload(n, SIZE));
    let refs: Vec<&Broker> = brokers.iter().collect();
    wait_identical(&refs, "v", 0);
    let (code, out, err) = ringlog(&brokers[0].address(), &["verify", "v"]);
    assert_eq!(code, 0, "{out}{err}");
    let end = client
        .list_offsets("v", 0, protocol::client::OffsetSpec::Latest, 0)
        .unwrap()
        .1
        .end_offset;
    assert!(
        out.contains(&format!("match over 0..{end} ({end} bytes)")),
        "{out}"
    );
    eprintln!("{out}");

    // A follower's disk flips a byte in the middle of what it holds.
    let placement = metadata(&client, "v").topics[0].partitions[0].clone();
    let follower = placement
        .replicas
        .iter()
        .copied()
        .find(|id| *id != placement.broker_id)
        .unwrap();
    let index = brokers
        .iter()
        .position(|b| b.options().broker_id == follower)
        .unwrap();
    brokers[index].stop();
    let dir = brokers[index].data_dir().join("v-0");
    let segment = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "log"))
        .unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    let flipped = end / 2 + 3;
    bytes[flipped as usize] ^= 0x40;
    std::fs::write(&segment, bytes).unwrap();
    brokers[index].restart();
    // Recovery reads only the tail past the recovery point: the flip stays.
    let mut found = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while found.is_none() {
        let (code, out, err) = ringlog(&brokers[0].address(), &["verify", "v"]);
        if out.contains("differs") {
            found = Some((code, out, err));
        } else {
            assert!(std::time::Instant::now() < deadline, "{out}{err}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let Some((code, out, err)) = found else {
        unreachable!("the loop ends with it")
    };
    eprintln!("{out}{err}");
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains(&format!(
            "v-0: broker {follower} differs from broker {} at offset {flipped} (compared 0..{end})",
            placement.broker_id
        )),
        "{out}"
    );
    assert!(err.contains("1 of 1 partitions of \"v\" differ"), "{err}");
}

#[test]
fn verify_against_another_cluster_finds_the_message_that_differs() {
    // Format 1 stores a message as its bytes alone: the same messages make
    // the same log on two brokers, whatever the batches.
    let a = Broker::start(BrokerOptions::default());
    let b = Broker::start(BrokerOptions::default());
    for broker in [&a, &b] {
        broker
            .client()
            .create_topic("m", 1, &TopicSettings::default())
            .unwrap();
    }
    produce(&a.client(), "m", AckMode::Flushed, |n| {
        numbered_payload(n, SIZE)
    });
    produce(&b.client(), "m", AckMode::Flushed, |n| {
        numbered_payload(n, SIZE)
    });
    let (code, out, err) = ringlog(&a.address(), &["verify", "m", "--against", &b.address()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("this cluster's broker 0, "), "{out}");
    assert!(out.contains(" match over 0.."), "{out}");

    // Another pair whose message 12,345 differs in one byte of its value.
    for broker in [&a, &b] {
        broker
            .client()
            .create_topic("n", 1, &TopicSettings::default())
            .unwrap();
    }
    produce(&a.client(), "n", AckMode::Flushed, |n| {
        numbered_payload(n, SIZE)
    });
    produce(&b.client(), "n", AckMode::Flushed, |n| {
        let mut value = numbered_payload(n, SIZE);
        if n == 12_345 {
            value[20] ^= 1;
        }
        value
    });
    let (code, out, err) = ringlog(&a.address(), &["verify", "n", "--against", &b.address()]);
    eprintln!("{out}{err}");
    assert_eq!(code, 1, "{out}{err}");
    let end = a
        .client()
        .list_offsets("n", 0, protocol::client::OffsetSpec::Latest, 0)
        .unwrap()
        .1
        .end_offset;
    let message_bytes = end / MESSAGES;
    let at: u64 = out
        .split("at offset ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no offset in {out}"));
    assert_eq!(
        at / message_bytes,
        12_345,
        "offset {at} lies in message 12345 ({message_bytes} bytes each)"
    );
}
