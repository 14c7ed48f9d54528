//! Brokers in a cluster on a real etcd: a topic spread over brokers,
//! metadata routing, NOT_OWNER and recovery from it, a broker's crash and
//! restart, and an etcd outage that produce and fetch ride through.

use super::util::{producer, read_all};
use harness::etcd::Etcd;
use harness::{check_numbered_payload, eventually, numbered_payload, Broker, BrokerOptions};
use protocol::client::{AckMode, ClientError, Connection, Consumer, Metadata, TopicSettings};
use protocol::codec::{self, FetchArgs};
use protocol::frame::Api;
use protocol::ErrorCode;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

fn cluster(etcd: &Etcd, name: &str, size: u32) -> Vec<Broker> {
    let brokers: Vec<Broker> = (1..=size)
        .map(|id| Broker::start(BrokerOptions::clustered(etcd, name, id)))
        .collect();
    for broker in &brokers {
        wait_for_brokers(broker, &(1..=size).collect::<Vec<_>>());
    }
    brokers
}

/// Waits until `broker`'s Metadata lists exactly the brokers `ids`.
fn wait_for_brokers(broker: &Broker, ids: &[u32]) -> Metadata {
    let client = broker.client();
    eventually("the live brokers in Metadata", WAIT, || {
        let metadata = client.metadata(&[]).map_err(|e| e.to_string())?;
        let live: Vec<u32> = metadata.brokers.iter().map(|b| b.broker_id).collect();
        if live == ids {
            Ok(metadata)
        } else {
            Err(format!("{live:?}"))
        }
    })
}

/// Waits until `broker` knows `topic`, and returns its metadata.
fn wait_for_topic(broker: &Broker, topic: &str) -> Metadata {
    let client = broker.client();
    eventually("the topic in Metadata", WAIT, || {
        client.metadata(&[topic]).map_err(|e| e.to_string())
    })
}

fn placement(metadata: &Metadata) -> Vec<(u32, u32, u16)> {
    metadata.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition, p.broker_id, p.shard_id))
        .collect()
}

#[test]
fn a_topic_spreads_over_three_brokers_and_clients_follow_metadata_to_each_owner() {
    let etcd = Etcd::start();
    let brokers = cluster(&etcd, "spread", 3);
    let via_2 = brokers[1].client();
    let created = via_2
        .create_topic("orders", 6, &TopicSettings::default())
        .unwrap();
    let mut per_broker = BTreeMap::new();
    for p in &created.partitions {
        *per_broker.entry(p.broker_id).or_insert(0) += 1;
    }
    assert_eq!(per_broker, BTreeMap::from([(1, 2), (2, 2), (3, 2)]));
    // Every broker learns the topic from etcd and describes it alike.
    let expected = placement(&wait_for_topic(&brokers[1], "orders"));
    for broker in &brokers {
        assert_eq!(placement(&wait_for_topic(broker, "orders")), expected);
    }

    const TOTAL: u64 = 6_000;
    const SIZE: usize = 64;
    let via_3 = brokers[2].client();
    let mut producer = producer(&via_3, "orders", AckMode::Flushed, 100);
    for i in 0..TOTAL {
        producer
            .send_to((i % 6) as u32, None, &numbered_payload(i, SIZE))
            .unwrap();
    }
    producer.flush().unwrap();
    assert_eq!(producer.acked_messages(), TOTAL);

    let via_1 = brokers[0].client();
    let mut count = 0;
    for partition in 0..6u32 {
        let mut expected_index = u64::from(partition);
        for message in read_all(&via_1, "orders", partition, 0) {
            assert_eq!(check_numbered_payload(&message.value, SIZE), expected_index);
            expected_index += 6;
            count += 1;
        }
    }
    assert_eq!(count, TOTAL);

    // A fetch sent to a broker that does not store the partition gets
    // NOT_OWNER naming the owner; a consumer pointed there recovers.
    let (partition, owner) = expected
        .iter()
        .find(|(_, broker, _)| *broker == 1)
        .map(|(p, b, _)| (*p, *b))
        .unwrap();
    let mut wrong = Connection::connect(&brokers[1].address()).unwrap();
    let header = codec::fetch_request(
        &mut wrong.fbb,
        "orders",
        partition,
        FetchArgs {
            offset: 0,
            max_bytes: 4096,
            max_wait_ms: 0,
        },
    )
    .to_vec();
    match wrong.call(Api::Fetch, &header, &[]) {
        Err(ClientError::Broker {
            code,
            owner_broker_id,
            message,
            ..
        }) => {
            assert_eq!(code, ErrorCode::NotOwner, "{message}");
            assert_eq!(owner_broker_id, Some(owner), "{message}");
        }
        other => panic!("expected NOT_OWNER, got {other:?}"),
    }
    let mut consumer = Consumer::with_connection(wrong, "orders", partition, 0);
    consumer.set_max_wait_ms(0);
    let first = consumer.poll().unwrap();
    assert!(!first.is_empty(), "the consumer found the owner");
    assert_eq!(
        check_numbered_payload(&first[0].value, SIZE),
        u64::from(partition)
    );

    // A delete through one broker removes the topic everywhere.
    via_1.delete_topic("orders").unwrap();
    for broker in &brokers {
        let client = broker.client();
        eventually("the topic gone", WAIT, || {
            match client.metadata(&["orders"]) {
                Err(e) if e.code() == Some(ErrorCode::UnknownTopic) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        });
    }
}

#[test]
fn a_broker_killed_and_restarted_registers_again_and_serves_its_data() {
    let etcd = Etcd::start();
    let mut brokers = cluster(&etcd, "restart", 3);
    let client = brokers[0].client();
    client
        .create_topic("kept", 3, &TopicSettings::default())
        .unwrap();
    wait_for_topic(&brokers[2], "kept");
    let mut before = producer(&client, "kept", AckMode::Flushed, 10);
    for i in 0..300u64 {
        before
            .send_to((i % 3) as u32, None, &numbered_payload(i, 32))
            .unwrap();
    }
    before.flush().unwrap();
    drop(before);

    brokers[1].kill9();
    // Its lease (2 s) runs out and it leaves the broker registry.
    wait_for_brokers(&brokers[0], &[1, 3]);
    let down = client.metadata(&["kept"]).unwrap();
    let on_2 = down.topics[0]
        .partitions
        .iter()
        .find(|p| p.broker_id == 2)
        .map(|p| p.partition)
        .unwrap();
    assert!(
        down.owner_address("kept", on_2).is_none(),
        "no address for a partition whose broker is down"
    );
    // Producers: the random partitioner skips the partition whose broker is
    // down; a message for it fails at once and names the broker.
    let mut during = producer(&client, "kept", AckMode::Flushed, 10);
    assert_eq!(during.unavailable_partitions(), vec![on_2]);
    for i in 0..60u64 {
        let receipt = during.send(None, &numbered_payload(1_000 + i, 32)).unwrap();
        assert_ne!(receipt.partition, on_2);
    }
    during.flush().unwrap();
    assert_eq!(during.acked_messages(), 60);
    match during.send_to(on_2, None, b"x") {
        Err(ClientError::PartitionUnavailable {
            partition,
            broker_id,
            ..
        }) => assert_eq!((partition, broker_id), (on_2, 2)),
        other => panic!("expected PartitionUnavailable, got {other:?}"),
    }
    let key = (0..1_000u32)
        .map(|k| k.to_string())
        .find(|k| during.partition_for(Some(k.as_bytes())) == on_2)
        .unwrap();
    let error = during.send(Some(key.as_bytes()), b"x").unwrap_err();
    assert!(
        error.to_string().contains("broker 2, which is down"),
        "{error}"
    );
    drop(during);

    // Restarted (on new ports), it registers again at once and serves.
    let started = Instant::now();
    brokers[1].restart();
    let up = wait_for_brokers(&brokers[0], &[1, 2, 3]);
    let back = started.elapsed();
    let address = up
        .owner_address("kept", on_2)
        .map(|s| format!("{}:{}", s.host, s.port))
        .unwrap();
    assert!(
        brokers[1].shards.contains(&address),
        "{address} is one of the restarted broker's new ports {:?}",
        brokers[1].shards
    );
    let messages = read_all(&client, "kept", on_2, 0);
    assert_eq!(messages.len(), 100, "back after {back:?}");

    // Killed and restarted before its lease expires, it takes over the
    // registration its previous run left instead of waiting for it.
    brokers[1].kill9();
    brokers[1].restart();
    assert!(
        brokers[1]
            .log()
            .contains("replacing the registration of this broker's previous run"),
        "restart log:\n{}",
        brokers[1].log()
    );
    wait_for_brokers(&brokers[2], &[1, 2, 3]);
    assert_eq!(read_all(&client, "kept", on_2, 0).len(), 100);
}

#[test]
fn produce_and_fetch_go_on_while_etcd_is_down_and_topic_changes_resume_after() {
    let mut etcd = Etcd::start();
    let brokers = cluster(&etcd, "outage", 2);
    let client = brokers[0].client();
    client
        .create_topic("steady", 2, &TopicSettings::default())
        .unwrap();
    wait_for_topic(&brokers[1], "steady");
    let mut producer = producer(&client, "steady", AckMode::Flushed, 50);
    let mut sent = 0u64;
    let mut produce_for = |duration: Duration| {
        let started = Instant::now();
        let before = sent;
        while started.elapsed() < duration {
            for _ in 0..500 {
                producer
                    .send_to((sent % 2) as u32, None, &numbered_payload(sent, 100))
                    .unwrap();
                sent += 1;
            }
            producer.flush().unwrap();
        }
        assert_eq!(producer.acked_messages(), sent);
        (sent - before) as f64 / started.elapsed().as_secs_f64()
    };
    let with_etcd = produce_for(Duration::from_secs(3));
    etcd.kill();
    let without_etcd = produce_for(Duration::from_secs(10));
    let fetched: usize = (0..2)
        .map(|p| read_all(&client, "steady", p, 0).len())
        .sum();
    assert_eq!(
        fetched as u64, sent,
        "every acknowledged message is fetchable"
    );
    eprintln!(
        "produce, acks flushed, batch 50: {with_etcd:.0} msg/s with etcd up, {without_etcd:.0} msg/s during the 10 s outage; all {fetched} messages fetched"
    );
    // Topic changes need etcd: a clear, retryable error.
    let error = client
        .create_topic("blocked", 1, &TopicSettings::default())
        .unwrap_err();
    assert_eq!(
        error.code(),
        Some(ErrorCode::CoordinatorUnavailable),
        "{error}"
    );

    etcd.restart();
    eventually("a topic change after etcd returns", WAIT, || {
        client
            .create_topic("after", 2, &TopicSettings::default())
            .map_err(|e| e.to_string())
    });
    wait_for_topic(&brokers[1], "after");
    wait_for_brokers(&brokers[1], &[1, 2]);
}

/// Issue 27, item 4: a broker SIGKILLed and restarted at once on a replaced
/// (wiped) data directory was refused, blaming a duplicate `--broker-id`:
/// its previous run's registration, from the old directory, was still
/// under a live lease. It now waits that lease out (one TTL) and starts.
#[test]
fn a_broker_restarted_at_once_on_a_replaced_data_dir_waits_out_its_old_registration() {
    let etcd = Etcd::start();
    let mut broker = Broker::start(BrokerOptions::clustered(&etcd, "replaced", 1));
    broker.kill9();
    std::fs::remove_dir_all(broker.data_dir()).unwrap();
    let started = std::time::Instant::now();
    broker.restart();
    let took = started.elapsed();
    let log = broker.log();
    assert!(
        log.contains("is registered from another data directory: waiting up to 4 s"),
        "{log}"
    );
    assert!(
        log.contains("another data directory expired: registering"),
        "{log}"
    );
    assert!(!log.contains("registered by another live broker"), "{log}");
    wait_for_brokers(&broker, &[1]);
    eprintln!("restarted on an empty data directory: ready {took:.1?} after the kill");
}

#[test]
fn a_duplicate_broker_id_and_an_unreachable_etcd_are_refused_with_one_clear_line() {
    let etcd = Etcd::start();
    let _first = Broker::start(BrokerOptions::clustered(&etcd, "dup", 1));
    let broker = harness::binary("broker");
    let dir = harness::TempDir::new("dup");
    // A short lease, so the wait for the other registration to expire
    // (one TTL and 2 s) is short.
    let config = dir.path().join("broker.toml");
    std::fs::write(&config, "etcd_lease_ttl_s = 2\n").unwrap();
    let output = std::process::Command::new(&broker)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--shards",
            "1",
            "--broker-id",
            "1",
        ])
        .arg("--config")
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--etcd", &etcd.endpoint(), "--cluster", "dup"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("broker id 1 is registered by another live broker")
            && stderr.contains("still kept alive 4 s later"),
        "{stderr}"
    );

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let output = std::process::Command::new(&broker)
        .args(["--listen", "127.0.0.1:0", "--shards", "1"])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--etcd", &nowhere])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("etcd is unavailable") && stderr.contains(&nowhere),
        "{stderr}"
    );
}

#[test]
fn the_etcd_registry_behaves_like_the_standalone_and_memory_ones() {
    use coordinator::registry::{conformance, EtcdOptions};
    let etcd = Etcd::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let options = EtcdOptions {
            endpoints: vec![etcd.endpoint()],
            cluster: "conformance".into(),
            lease_ttl_s: 2,
            request_timeout: Duration::from_secs(5),
            cluster_id: None,
            join_new_cluster: false,
            access: Default::default(),
        };
        let mut registry = coordinator::registry::Etcd::connect(options, conformance::broker(7))
            .await
            .unwrap();
        conformance::check(&mut registry, 7).await;
        conformance::check_replace(&mut registry, 7).await;
        // The group registries: the same test the memory store passes.
        let mut groups = coordinator::registry::Registry::groups(&registry).unwrap();
        coordinator::groups::conformance::check(&mut groups).await;
    });
}

/// Issue 8, item 5, in a cluster: a topic deleted and created again while
/// one of its brokers was down must not come back on that broker's return.
#[test]
fn r8_5_a_topic_deleted_and_re_created_while_a_broker_was_down_serves_only_new_messages() {
    let etcd = Etcd::start();
    let mut brokers = cluster(&etcd, "recreate", 2);
    let client = brokers[0].client();
    client
        .create_topic("phoenix", 4, &TopicSettings::default())
        .unwrap();
    wait_for_topic(&brokers[1], "phoenix");
    let mut old = producer(&client, "phoenix", AckMode::Flushed, 1);
    for p in 0..4u32 {
        old.send_to(p, None, b"old").unwrap();
    }
    old.flush().unwrap();
    drop(old);
    brokers[1].kill9();
    wait_for_brokers(&brokers[0], &[1]);
    client.delete_topic("phoenix").unwrap();
    client
        .create_topic("phoenix", 4, &TopicSettings::default())
        .unwrap();
    brokers[1].restart();
    wait_for_brokers(&brokers[0], &[1, 2]);
    assert!(
        brokers[1].log().contains("moved aside"),
        "{}",
        brokers[1].log()
    );
    for p in 0..4u32 {
        assert_eq!(read_all(&client, "phoenix", p, 0).len(), 0, "partition {p}");
    }
}

/// A topic created through one broker can be used through another at once:
/// a broker that has not heard of it from the watch yet reads the registry
/// before answering UNKNOWN_TOPIC.
#[test]
fn a_topic_is_usable_through_every_broker_as_soon_as_its_create_returns() {
    let etcd = Etcd::start();
    let brokers = cluster(&etcd, "fresh", 2);
    let via_1 = brokers[0].client();
    // Connections to broker 2's shards, open before the topics exist, so a
    // produce reaches broker 2 microseconds after the create returns.
    let mut to_2: Vec<Connection> = brokers[1]
        .shards
        .iter()
        .map(|a| Connection::connect(a).unwrap())
        .collect();
    let mut set = Vec::new();
    protocol::message::encode_message(&mut set, None, b"first");
    for round in 0..20u64 {
        let name = format!("fresh-{round}");
        let created = via_1
            .create_topic(&name, 4, &TopicSettings::default())
            .unwrap();
        for placement in created.partitions.iter().filter(|p| p.broker_id == 2) {
            let conn = &mut to_2[placement.shard_id as usize];
            let header =
                codec::produce_request(&mut conn.fbb, &name, placement.partition, AckMode::Flushed)
                    .to_vec();
            conn.call(Api::Produce, &header, &set)
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
        }
        brokers[1].client().metadata(&[&name]).unwrap();
    }
}
