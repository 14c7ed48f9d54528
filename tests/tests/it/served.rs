//! Issue 46, item 4: CreateTopic, CreatePartitions and a reassignment are
//! answered once every live broker serves the change, so a produce sent
//! straight to the owning shard right after the answer never meets
//! NOT_OWNER, and every broker's Metadata lists the change; a broker that
//! cannot apply it makes the answer NOT_YET_SERVED, naming it, within the
//! lease's TTL plus one etcd timeout.

use super::util::{produce_raw, raw, raw_metadata, wait_for_brokers};
use harness::etcd::Etcd;
use harness::{eventually, Broker, BrokerOptions};
use protocol::client::{AckMode, ClientError, TopicSettings};
use protocol::ErrorCode;
use std::collections::BTreeMap;
use std::net::TcpStream;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

fn one_message(i: usize) -> Vec<u8> {
    let mut set = Vec::new();
    protocol::message::encode_message(&mut set, None, format!("m{i}").as_bytes());
    set
}

/// Raw, handshaken sockets to every shard of every broker, by (broker id,
/// shard id).
fn sockets(brokers: &[(u32, &Broker)]) -> BTreeMap<(u32, u16), TcpStream> {
    let mut all = BTreeMap::new();
    for (id, broker) in brokers {
        for (shard, address) in broker.shards.iter().enumerate() {
            all.insert((*id, shard as u16), raw(address));
        }
    }
    all
}

/// Three brokers; `faults` for each (by position).
fn cluster(etcd: &Etcd, name: &str, faults: [Option<&str>; 3]) -> Vec<Broker> {
    let brokers: Vec<Broker> = (1..=3)
        .zip(faults)
        .map(|(id, faults)| {
            let mut options = BrokerOptions::clustered(etcd, name, id);
            options.faults = faults.map(str::to_string);
            Broker::start(options)
        })
        .collect();
    wait_for_brokers(&brokers[0].client(), 3);
    brokers
}

#[test]
fn r46_4_a_topic_created_then_produced_at_once_never_meets_not_owner() {
    let etcd = Etcd::start();
    // Every broker applies what it learns from etcd 100 ms late (a
    // control thread busy elsewhere): an answer given before the others
    // applied the topic would send the produces below to brokers that do
    // not serve it yet.
    let slow = Some("topic_apply_delay_ms=100");
    let brokers = cluster(&etcd, "served", [slow; 3]);
    let ids: Vec<(u32, &Broker)> = (1..=3).zip(brokers.iter()).collect();
    let mut shards = sockets(&ids);
    let clients: Vec<_> = brokers.iter().map(Broker::client).collect();
    let started = Instant::now();
    let mut produced = 0;
    for i in 0..100 {
        let name = format!("served-{i}");
        // Half replicated (the leader is the preferred replica), half one
        // copy each; created through each broker in turn.
        let settings = TopicSettings {
            replication_factor: if i % 2 == 0 { 3 } else { 1 },
            ..TopicSettings::default()
        };
        let created = clients[i % 3].create_topic(&name, 3, &settings).unwrap();
        assert_eq!(created.partitions.len(), 3);
        for p in &created.partitions {
            let stream = shards.get_mut(&(p.broker_id, p.shard_id)).unwrap();
            let answer = produce_raw(
                stream,
                &name,
                p.partition,
                AckMode::Written,
                &one_message(i),
            );
            assert!(
                answer.is_ok(),
                "create {i}: a produce to {name}-{} on broker {} shard {} right after the answer: {answer:?}",
                p.partition,
                p.broker_id,
                p.shard_id
            );
            produced += 1;
        }
        // Every broker's Metadata lists it, each partition led where the
        // answer said.
        for id in 1..=3 {
            let stream = shards.get_mut(&(id, 0)).unwrap();
            let metadata = raw_metadata(stream, &name).unwrap();
            let topic = metadata.topics.iter().find(|t| t.name == name);
            assert!(
                topic.is_some(),
                "create {i}: broker {id}'s Metadata lacks {name}: {metadata:?}"
            );
            let leaders: Vec<u32> = topic
                .unwrap()
                .partitions
                .iter()
                .map(|p| p.broker_id)
                .collect();
            let expected: Vec<u32> = created.partitions.iter().map(|p| p.broker_id).collect();
            assert_eq!(leaders, expected, "create {i}: broker {id}'s leaders");
        }
    }
    println!(
        "100 creates (3 partitions, R=3 and R=1 alternating), each followed at once by a produce to every partition's leader shard: {produced} produced, 0 refused, in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // More partitions: produced to at once, wherever they were placed.
    for i in 0..10 {
        let name = format!("served-{i}");
        let grown = clients[(i + 1) % 3].create_partitions(&name, 6).unwrap();
        assert_eq!(grown.brokers.len(), 3, "{grown:?}");
        let metadata = raw_metadata(shards.get_mut(&(1, 0)).unwrap(), &name).unwrap();
        let topic = &metadata.topics[0];
        assert_eq!(topic.partitions.len(), 6);
        for p in &topic.partitions[3..] {
            let stream = shards.get_mut(&(p.broker_id, p.shard_id)).unwrap();
            let answer = produce_raw(
                stream,
                &name,
                p.partition,
                AckMode::Written,
                &one_message(i),
            );
            assert!(answer.is_ok(), "grown {name}-{}: {answer:?}", p.partition);
        }
        for id in 2..=3 {
            let metadata = raw_metadata(shards.get_mut(&(id, 0)).unwrap(), &name).unwrap();
            assert_eq!(metadata.topics[0].partitions.len(), 6, "broker {id}");
        }
    }

    // A reassignment: every broker shows the move as soon as it is answered.
    let created = clients[0]
        .create_topic("moved", 1, &TopicSettings::default())
        .unwrap();
    let from = created.partitions[0].broker_id;
    let to: Vec<u32> = (1..=3).filter(|b| *b != from).collect();
    let moving = clients[1].reassign_partition("moved", 0, &to).unwrap();
    assert_eq!(moving.moving_to, to);
    for id in 1..=3 {
        let metadata = raw_metadata(shards.get_mut(&(id, 0)).unwrap(), "moved").unwrap();
        assert_eq!(
            metadata.topics[0].partitions[0].moving_to, to,
            "broker {id} serves the move"
        );
    }
}

#[test]
fn r46_4_a_broker_that_cannot_apply_a_topic_is_named_in_the_answer_and_a_paused_one_is_waited_out()
{
    let etcd = Etcd::start();
    let mut brokers = cluster(&etcd, "unserved", [None, None, Some("open_topic_errno=5")]);
    let client = brokers[0].client();
    // Broker 3 is live but opens no topic: the create is stored, and its
    // answer, after the lease's TTL (2 s) and one etcd timeout (2 s), names
    // it.
    let started = Instant::now();
    let refused = match client.create_topic("late", 2, &TopicSettings::default()) {
        Err(refused) => refused,
        Ok(created) => panic!(
            "answered {created:?}\nbroker 1:\n{}\nbroker 3:\n{}",
            brokers[0].log(),
            brokers[2].log()
        ),
    };
    let waited = started.elapsed();
    let ClientError::Broker { code, message, .. } = &refused else {
        panic!("{refused:?}")
    };
    assert_eq!(*code, ErrorCode::NotYetServed, "{message}");
    assert!(message.contains("broker 3 had not applied it"), "{message}");
    println!(
        "answer after {:.1} s: {code}: {message}",
        waited.as_secs_f64()
    );
    // The change stands: the other brokers serve it.
    let listed = client.metadata(&["late"]).unwrap();
    assert_eq!(listed.topics[0].partitions.len(), 2);

    // A paused broker holds the answer until its lease expires (it is no
    // longer live), not for ever; resumed, it applies the topic.
    brokers[2].stop();
    let mut third = Broker::start(BrokerOptions::clustered(&etcd, "unserved", 4));
    eventually("broker 4 live", WAIT, || {
        let seen = client
            .metadata(&[])
            .map_err(|e| e.to_string())?
            .brokers
            .len();
        (seen == 3).then_some(()).ok_or(format!("{seen} brokers"))
    });
    third.pause(true);
    let started = Instant::now();
    let created = client.create_topic("paused", 2, &TopicSettings::default());
    let waited = started.elapsed();
    third.pause(false);
    assert!(created.is_ok(), "{created:?}");
    println!(
        "a create with broker 4 paused: answered after {:.1} s (its lease lasts 2 s)",
        waited.as_secs_f64()
    );
    let address = third.address();
    eventually(
        "broker 4 serves the topic created while it was paused",
        WAIT,
        || {
            let mut stream = raw(&address);
            let metadata = raw_metadata(&mut stream, "paused").map_err(|e| e.to_string())?;
            (metadata.topics.len() == 1)
                .then_some(())
                .ok_or("not yet".to_string())
        },
    );
}
