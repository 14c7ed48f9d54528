//! Issue 23: a registry that forgot must never delete a broker's data.
//!
//! A new, empty etcd behind the same address, an etcd restored from an
//! older backup, a wrong `--cluster`, a topic deleted and re-created under
//! a kill -9 in the middle of the delete, and a lease lost to a restored
//! etcd — each with real brokers on a real etcd, and the data directory
//! compared byte for byte where the data must stay.

use super::util::{metric, producer, read_all, scrape};
use harness::etcd::Etcd;
use harness::{check_numbered_payload, eventually, numbered_payload, Broker, BrokerOptions};
use protocol::client::{AckMode, Client, TopicSettings};
use protocol::ErrorCode;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

/// Every segment file of every partition directory in `data_dir`, by
/// `<partition-dir>/<file>`, with its bytes.
fn segments(data_dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut all = BTreeMap::new();
    for dir in std::fs::read_dir(data_dir).unwrap().flatten() {
        let name = dir.file_name().to_string_lossy().into_owned();
        if !dir.file_type().unwrap().is_dir() || name.starts_with('.') {
            continue;
        }
        for file in std::fs::read_dir(dir.path()).unwrap().flatten() {
            let file_name = file.file_name().to_string_lossy().into_owned();
            if file_name.ends_with(".log") {
                all.insert(
                    format!("{name}/{file_name}"),
                    std::fs::read(file.path()).unwrap(),
                );
            }
        }
    }
    all
}

fn total_bytes(segments: &BTreeMap<String, Vec<u8>>) -> usize {
    segments.values().map(Vec::len).sum()
}

/// Produces `count` numbered messages round robin over `partitions`,
/// acks=flushed.
fn produce(client: &Client, topic: &str, partitions: u32, first: u64, count: u64, size: usize) {
    let mut producer = producer(client, topic, AckMode::Flushed, 500);
    for i in first..first + count {
        producer
            .send_to(
                (i % u64::from(partitions)) as u32,
                None,
                &numbered_payload(i, size),
            )
            .unwrap();
    }
    producer.flush().unwrap();
    assert_eq!(producer.acked_messages(), count);
}

/// Every message of `topic`, checked to be exactly `0..count` in order
/// per partition.
fn check_all(client: &Client, topic: &str, partitions: u32, count: u64, size: usize) {
    let mut seen = 0;
    for p in 0..partitions {
        let mut expected = u64::from(p);
        for message in read_all(client, topic, p, 0) {
            assert_eq!(check_numbered_payload(&message.value, size), expected);
            expected += u64::from(partitions);
            seen += 1;
        }
    }
    assert_eq!(seen, count, "every acknowledged message of {topic}");
}

fn wait_for_log(broker: &Broker, what: &str) {
    eventually(&format!("the broker's log says {what:?}"), WAIT, || {
        if broker.log().contains(what) {
            Ok(())
        } else {
            Err("not yet".to_string())
        }
    });
}

fn code_of<T: std::fmt::Debug>(result: Result<T, protocol::client::ClientError>) -> ErrorCode {
    match result {
        Err(error) => error
            .code()
            .unwrap_or_else(|| panic!("not a broker error: {error}")),
        Ok(value) => panic!("expected an error, got {value:?}"),
    }
}

/// The first trial, before and after: one broker, a topic of 2
/// partitions, 50,000 messages acknowledged with acks=flushed, then a new
/// empty etcd behind the same URL. The data stays byte for byte and is
/// served; topic and group changes are refused with the way out in the
/// message; a restart against the empty etcd changes nothing; and one
/// start with `--join-new-cluster` brings the topic back into the new
/// etcd with its data and offsets.
#[test]
fn r23_an_etcd_wiped_under_a_running_broker_keeps_every_byte_and_join_new_cluster_brings_the_topics_back(
) {
    const COUNT: u64 = 50_000;
    const SIZE: usize = 16;
    let mut etcd = Etcd::start();
    let mut broker = Broker::start(BrokerOptions::clustered(&etcd, "wiped", 1));
    let client = broker.client();
    let created = client
        .create_topic("keep", 2, &TopicSettings::default())
        .unwrap();
    assert_eq!(created.id.len(), 32, "a topic id: {:?}", created.id);
    produce(&client, "keep", 2, 0, COUNT, SIZE);
    let before = segments(&broker.data_dir());
    assert_eq!(before.len(), 2, "{:?}", before.keys());
    eprintln!(
        "before the wipe: {} segment files, {} bytes",
        before.len(),
        total_bytes(&before)
    );

    etcd.wipe();
    wait_for_log(&broker, "no longer holds this broker's cluster");
    // Nothing was deleted or moved: every byte is where it was.
    assert_eq!(segments(&broker.data_dir()), before);
    assert!(harness::orphaned_dirs(&broker.data_dir()).is_empty());
    check_all(&client, "keep", 2, COUNT, SIZE);
    // Produce goes on; topic and group changes are refused, saying why
    // and what to do.
    produce(&client, "keep", 2, COUNT, 2, SIZE);
    let error = client
        .create_topic("other", 1, &TopicSettings::default())
        .unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::ClusterIdMismatch), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("--join-new-cluster") && message.contains("no cluster id"),
        "{message}"
    );
    assert_eq!(
        code_of(client.delete_topic("keep")),
        ErrorCode::ClusterIdMismatch
    );
    assert_eq!(
        code_of(client.join_group("g", "m", &["keep"], 6_000)),
        ErrorCode::ClusterIdMismatch
    );
    // The CLI shows the same line.
    let cli = std::process::Command::new(harness::binary("ringlog"))
        .args(["--brokers", &broker.address(), "topic", "create", "x"])
        .output()
        .unwrap();
    assert!(!cli.status.success());
    let stderr = String::from_utf8_lossy(&cli.stderr);
    assert!(stderr.contains("CLUSTER_ID_MISMATCH"), "{stderr}");
    drop(client);

    // A restart against the empty etcd: the broker starts, serves its
    // data, moves nothing aside, and still refuses changes.
    broker.kill9();
    broker.restart();
    assert!(harness::orphaned_dirs(&broker.data_dir()).is_empty());
    let client = broker.client();
    check_all(&client, "keep", 2, COUNT + 2, SIZE);
    assert_eq!(
        code_of(client.create_topic("other", 1, &TopicSettings::default())),
        ErrorCode::ClusterIdMismatch
    );
    let after_restart = segments(&broker.data_dir());
    drop(client);

    // The operator decides the new etcd is the cluster now.
    let mut options = broker.options().clone();
    options.args = vec!["--join-new-cluster".into()];
    broker.set_options(options.clone());
    broker.stop();
    broker.restart();
    assert!(
        broker
            .log()
            .contains("registered the topics this broker holds"),
        "{}",
        broker.log()
    );
    assert_eq!(segments(&broker.data_dir()), after_restart);
    let client = broker.client();
    let metadata = client.metadata(&["keep"]).unwrap();
    assert_eq!(metadata.topics[0].id, created.id, "the same topic, by id");
    assert_eq!(
        metadata
            .brokers
            .iter()
            .map(|b| b.broker_id)
            .collect::<Vec<_>>(),
        vec![1]
    );
    check_all(&client, "keep", 2, COUNT + 2, SIZE);
    client
        .create_topic("other", 1, &TopicSettings::default())
        .unwrap();
    drop(client);
    // And without the flag from then on, it is simply a member.
    options.args.clear();
    broker.set_options(options);
    broker.stop();
    broker.restart();
    let client = broker.client();
    assert_eq!(client.metadata(&[]).unwrap().topics.len(), 2);
    check_all(&client, "keep", 2, COUNT + 2, SIZE);
}

/// An etcd restored from a backup older than a topic: the topic the
/// snapshot lacks is moved aside with its data (counted in
/// `ringlog_partitions_orphaned_total`), never deleted; the older topic
/// goes on.
#[test]
fn r23_an_etcd_restored_from_before_a_topic_existed_moves_that_topic_aside_and_keeps_the_rest() {
    let mut etcd = Etcd::start();
    let broker = Broker::start(BrokerOptions {
        metrics: true,
        ..BrokerOptions::clustered(&etcd, "restored", 1)
    });
    let client = broker.client();
    client
        .create_topic("early", 1, &TopicSettings::default())
        .unwrap();
    produce(&client, "early", 1, 0, 100, 32);
    let backup = etcd.backup();
    eventually("the broker sees etcd again", WAIT, || {
        client
            .create_topic("late", 2, &TopicSettings::default())
            .map_err(|e| e.to_string())
    });
    produce(&client, "late", 2, 0, 200, 32);
    let late_before: BTreeMap<String, Vec<u8>> = segments(&broker.data_dir())
        .into_iter()
        .filter(|(k, _)| k.starts_with("late-"))
        .collect();
    assert_eq!(late_before.len(), 2);

    etcd.restore(&backup);
    wait_for_log(&broker, "no delete of it was seen");
    eventually("late is gone from Metadata", WAIT, || {
        match client.metadata(&["late"]) {
            Err(e) if e.code() == Some(ErrorCode::UnknownTopic) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    // Moved aside, byte for byte, under their own names.
    let aside = harness::orphaned_dirs(&broker.data_dir());
    assert_eq!(aside.len(), 2, "{aside:?}\n{}", broker.log());
    for dir in &aside {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let file = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .find(|f| f.file_name().to_string_lossy().ends_with(".log"))
            .unwrap();
        let key = format!("{name}/{}", file.file_name().to_string_lossy());
        assert_eq!(
            Some(&std::fs::read(file.path()).unwrap()),
            late_before.get(&key)
        );
    }
    let address = broker.metrics.clone().unwrap();
    eventually(
        "ringlog_partitions_orphaned_total counts both",
        WAIT,
        || {
            let n = metric(&scrape(&address), "ringlog_partitions_orphaned_total");
            if n == 2 {
                Ok(())
            } else {
                Err(format!("{n}"))
            }
        },
    );
    // The topic the backup has is served as before.
    assert_eq!(read_all(&client, "early", 0, 0).len(), 100);
}

/// Item 2: a topic deleted and created again, with a kill -9 of its broker
/// between the registry's delete and the removal of the directories. The
/// new topic has a new id and the same placement; the old directories are
/// recognised by their `topic-id` and moved aside, so the new topic starts
/// empty and never serves an old message.
#[test]
fn r23_a_topic_deleted_and_re_created_around_a_kill_9_mid_delete_never_serves_the_old_data() {
    let etcd = Etcd::start();
    // A long lease: broker 1 still counts as live when the topic is
    // created again, so it gets the same partitions as before.
    let options = |id| BrokerOptions {
        config_toml: "etcd_lease_ttl_s = 30\netcd_timeout_ms = 2000\n".into(),
        faults: (id == 1).then(|| "delete_delay_ms=60000".to_string()),
        ..BrokerOptions::clustered(&etcd, "phoenix", id)
    };
    let mut one = Broker::start(options(1));
    let two = Broker::start(options(2));
    let via_two = two.client();
    eventually("both brokers live", WAIT, || {
        let live = via_two
            .metadata(&[])
            .map_err(|e| e.to_string())?
            .brokers
            .len();
        if live == 2 {
            Ok(())
        } else {
            Err(format!("{live}"))
        }
    });
    let old = via_two
        .create_topic("phoenix", 4, &TopicSettings::default())
        .unwrap();
    let on_one: Vec<u32> = old
        .partitions
        .iter()
        .filter(|p| p.broker_id == 1)
        .map(|p| p.partition)
        .collect();
    assert_eq!(on_one.len(), 2);
    produce(&via_two, "phoenix", 4, 0, 400, 32);

    // The delete goes to broker 1, which forgets the topic in etcd and
    // then waits (the fault) before removing its directories: killed there.
    let address = one.address();
    let deleting = std::thread::spawn(move || {
        let _ = Client::connect(&address).and_then(|c| c.delete_topic("phoenix"));
    });
    eventually("the registry forgot the topic", WAIT, || {
        match via_two.metadata(&["phoenix"]) {
            Err(e) if e.code() == Some(ErrorCode::UnknownTopic) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    one.kill9();
    let _ = deleting.join();
    // Broker 1 is dead but live for its 30 s lease: the create is stored
    // and answered NOT_YET_SERVED (naming broker 1) once the served wait's
    // 15 s are up — not past the client's 30 s request timeout, which made
    // this test fail once in CI.
    let new = match via_two.create_topic("phoenix", 4, &TopicSettings::default()) {
        Ok(new) => new,
        Err(e) if e.code() == Some(ErrorCode::NotYetServed) => {
            assert!(e.to_string().contains("broker 1"), "{e}");
            via_two.metadata(&["phoenix"]).unwrap().topics[0].clone()
        }
        Err(e) => panic!("creating phoenix again: {e}"),
    };
    assert_ne!(new.id, old.id);
    assert_eq!(
        new.partitions
            .iter()
            .map(|p| p.broker_id)
            .collect::<Vec<_>>(),
        old.partitions
            .iter()
            .map(|p| p.broker_id)
            .collect::<Vec<_>>(),
        "the same placement"
    );

    one.restart();
    eventually("broker 1 serves the new topic", WAIT, || {
        let client = Client::connect(&one.address()).map_err(|e| e.to_string())?;
        client
            .list_offsets(
                "phoenix",
                on_one[0],
                protocol::client::OffsetSpec::Latest,
                0,
            )
            .map_err(|e| e.to_string())
    });
    assert!(
        one.log().contains("it belongs to an earlier topic"),
        "{}",
        one.log()
    );
    for p in 0..4u32 {
        assert_eq!(
            read_all(&via_two, "phoenix", p, 0).len(),
            0,
            "partition {p} of the new topic is empty"
        );
    }
    // The old data is kept aside, not served and not destroyed.
    let aside = harness::orphaned_dirs(&one.data_dir());
    assert_eq!(aside.len(), 2, "{aside:?}");
}

/// A broker started with the wrong `--cluster` finds a prefix without its
/// cluster's id: it serves its data, moves nothing aside, refuses changes;
/// back on the right name, it is a member as before.
#[test]
fn r23_a_wrong_cluster_name_moves_nothing_aside_and_the_right_one_finds_everything() {
    let etcd = Etcd::start();
    let mut broker = Broker::start(BrokerOptions::clustered(&etcd, "right", 1));
    let client = broker.client();
    client
        .create_topic("t", 2, &TopicSettings::default())
        .unwrap();
    produce(&client, "t", 2, 0, 1_000, 32);
    drop(client);
    broker.stop();
    let before = segments(&broker.data_dir());

    broker.set_options(BrokerOptions::clustered(&etcd, "wrong", 1));
    broker.restart();
    assert!(
        broker
            .log()
            .contains("this data directory joined cluster \"right\""),
        "{}",
        broker.log()
    );
    assert!(harness::orphaned_dirs(&broker.data_dir()).is_empty());
    assert_eq!(segments(&broker.data_dir()), before);
    let client = broker.client();
    check_all(&client, "t", 2, 1_000, 32);
    assert_eq!(
        code_of(client.create_topic("u", 1, &TopicSettings::default())),
        ErrorCode::ClusterIdMismatch
    );
    drop(client);
    broker.stop();

    broker.set_options(BrokerOptions::clustered(&etcd, "right", 1));
    broker.restart();
    let client = broker.client();
    check_all(&client, "t", 2, 1_000, 32);
    client
        .create_topic("u", 1, &TopicSettings::default())
        .unwrap();
    // A data directory used with another broker id is refused outright.
    drop(client);
    broker.stop();
    let output = std::process::Command::new(harness::binary("broker"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--shards",
            "1",
            "--broker-id",
            "9",
        ])
        .arg("--data-dir")
        .arg(broker.data_dir())
        .args(["--etcd", &etcd.endpoint(), "--cluster", "right"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("belongs to broker 1") && stderr.contains("not to --broker-id 9"),
        "{stderr}"
    );
}

/// Item 4: a lease lost to an etcd restored from a backup (the backup knows
/// an older lease, not the one being kept alive): the broker registers
/// again within one TTL and another broker lists it; the keep-alive logs
/// the change once.
#[test]
fn r23_a_lease_lost_to_a_restored_etcd_is_replaced_within_one_ttl() {
    let mut etcd = Etcd::start();
    let mut one = Broker::start(BrokerOptions::clustered(&etcd, "leases", 1));
    let two = Broker::start(BrokerOptions::clustered(&etcd, "leases", 2));
    let via_two = two.client();
    eventually("both brokers live", WAIT, || {
        let n = via_two
            .metadata(&[])
            .map_err(|e| e.to_string())?
            .brokers
            .len();
        if n == 2 {
            Ok(())
        } else {
            Err(format!("{n}"))
        }
    });
    via_two
        .create_topic("leased", 2, &TopicSettings::default())
        .unwrap();
    let backup = etcd.backup();
    // A new lease for broker 1, and a group member's session, which the
    // backup does not have.
    one.kill9();
    one.restart();
    let config = protocol::client::GroupConfig {
        session_timeout: Duration::from_secs(3),
        ..Default::default()
    };
    let mut joined = None;
    eventually("a member joins", WAIT, || {
        let member = protocol::client::GroupConsumer::subscribe(
            &two.address(),
            "g",
            &["leased"],
            config.clone(),
        )
        .map_err(|e| e.to_string())?;
        joined = Some(member);
        Ok(())
    });
    let mut member = joined.unwrap();
    let first_id = member.member_id().to_string();
    etcd.restore(&backup);
    wait_for_log(&one, "the broker's etcd lease is gone; registering again");
    wait_for_log(&one, "registered in etcd again");
    // Well past the restored (unkept) lease's TTL, both are still listed.
    std::thread::sleep(Duration::from_secs(5));
    eventually("both brokers listed", WAIT, || {
        let live: Vec<u32> = via_two
            .metadata(&[])
            .map_err(|e| e.to_string())?
            .brokers
            .iter()
            .map(|b| b.broker_id)
            .collect();
        if live == [1, 2] {
            Ok(())
        } else {
            Err(format!("{live:?}"))
        }
    });
    // The member's session is unknown to the restored etcd: it joins again
    // (a new member id) and owns the topic once more.
    let rejoined = eventually("the group member joined again", WAIT, || {
        member.poll().map_err(|e| e.to_string())?;
        let description = via_two.describe_group("g").map_err(|e| e.to_string())?;
        let ids: Vec<String> = description
            .view
            .members
            .iter()
            .map(|m| m.member_id.clone())
            .collect();
        let me = member.member_id().to_string();
        if ids == [me.clone()] && me != first_id && member.assignment().len() == 2 {
            Ok(me)
        } else {
            Err(format!("{ids:?}, {:?}", member.outages()))
        }
    });
    eprintln!("member {first_id} joined again as {rejoined}");
    let lost = one.log().matches("the broker's etcd lease is gone").count();
    assert_eq!(lost, 1, "one line per change:\n{}", one.log());
}

/// Item 2, for clients: consumers made before a topic was deleted and
/// created again are refused UNKNOWN_TOPIC_ID by the new one (their fetches
/// carry the id from Metadata) instead of reading it at the old topic's
/// offsets. A producer, which writes by name as Kafka's does, goes on into
/// the new topic.
#[test]
fn r23_2_clients_of_a_topic_deleted_and_created_again_are_refused_not_mixed_up() {
    use protocol::client::{Consumer, Start, TopicConsumer};
    let broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    let old = client
        .create_topic("t", 1, &TopicSettings::default())
        .unwrap();
    produce(&client, "t", 1, 0, 100, 32);
    let mut consumer = Consumer::new(&client, "t", 0, 0).unwrap();
    consumer.set_max_wait_ms(0);
    assert_eq!(consumer.poll().unwrap().len(), 100);
    let mut topic_consumer =
        TopicConsumer::new(&client, "t", Start::Latest, Default::default()).unwrap();

    client.delete_topic("t").unwrap();
    let new = client
        .create_topic("t", 1, &TopicSettings::default())
        .unwrap();
    assert_ne!(new.id, old.id);
    produce(&client, "t", 1, 0, 300, 32);

    // Refused by the broker (UNKNOWN_TOPIC_ID), or by the client itself
    // once fresh Metadata showed the new id: either way, named.
    let recreated = |error: &protocol::client::ClientError| {
        error.code() == Some(ErrorCode::UnknownTopicId)
            || error.to_string().contains("was deleted and created again")
    };
    consumer.seek(0);
    let error = consumer.poll().unwrap_err();
    assert!(recreated(&error), "{error}");
    let error = eventually("the topic consumer refused", WAIT, || match topic_consumer
        .poll(Duration::from_millis(200))
    {
        Err(error) => Ok(error),
        Ok(messages) => Err(format!("{} messages", messages.len())),
    });
    // Its long-poll may have seen the topic gone before it came back.
    assert!(
        recreated(&error) || error.code() == Some(ErrorCode::UnknownTopic),
        "{error}"
    );
    // The new topic has exactly what was produced to it.
    check_all(&client, "t", 1, 300, 32);
}

/// Issue 27, item 3: a broker whose data directory was wiped served its
/// one-copy partitions empty from offset 0, with no warning — offsets were
/// reused and a group's lag read 0. Now a broker that starts on an empty
/// data directory marks every one-copy partition the registry places on it
/// as lost: one error line at start, DATA_LOST for produce, fetch and
/// list-offsets (also through the shard that forwards), a gauge, a
/// `data-lost` row in `topic describe` — across restarts, until the
/// operator restores the partition's directory (served with its data) or
/// removes the marker (served again, empty, from 0).
#[test]
fn r27_3_a_wiped_data_dir_is_not_served_from_offset_0_until_an_operator_decides() {
    const SIZE: usize = 24;
    const COUNT: u64 = 4_000;
    let etcd = Etcd::start();
    let mut brokers: Vec<Broker> = (1..=2)
        .map(|id| {
            Broker::start(BrokerOptions {
                metrics: true,
                ..BrokerOptions::clustered(&etcd, "wipe", id)
            })
        })
        .collect();
    let client = brokers[0].client();
    client
        .create_topic("kept", 4, &TopicSettings::default())
        .unwrap();
    produce(&client, "kept", 4, 0, COUNT, SIZE);
    let metadata = client.metadata(&["kept"]).unwrap();
    let on_2: Vec<u32> = metadata.topics[0]
        .partitions
        .iter()
        .filter(|p| p.broker_id == 2)
        .map(|p| p.partition)
        .collect();
    assert_eq!(on_2.len(), 2, "{:?}", metadata.topics[0].partitions);
    let (restored, accepted) = (on_2[0], on_2[1]);
    let end_before = client
        .list_offsets("kept", restored, protocol::client::OffsetSpec::Latest, 0)
        .unwrap()
        .1
        .end_offset;
    // The operator's backup of one partition, taken before the disk dies.
    let backup = harness::TempDir::new("backup");
    let data_2 = brokers[1].data_dir();
    let restored_dir = format!("kept-{restored}");
    copy_dir(
        &data_2.join(&restored_dir),
        &backup.path().join(&restored_dir),
    );

    brokers[1].kill9();
    std::fs::remove_dir_all(&data_2).unwrap();
    brokers[1].restart();
    let log = brokers[1].log();
    assert!(
        log.contains("this broker started on an empty data directory")
            && log.contains("2 partition(s)"),
        "{log}"
    );
    // The client's connections to the restarted broker's old ports break
    // first: it reconnects through fresh Metadata.
    let refused = |partition: u32| {
        eventually("DATA_LOST from list-offsets", WAIT, || {
            match client.list_offsets("kept", partition, protocol::client::OffsetSpec::Latest, 0) {
                Err(error) if error.code() == Some(ErrorCode::DataLost) => Ok(error.to_string()),
                other => Err(format!("{other:?}")),
            }
        })
    };
    let check_refused = |broker: &Broker| {
        for &p in &on_2 {
            let why = refused(p);
            assert!(why.contains("data-lost"), "{why}");
            // Fetch and produce too, through either of its broker's shards
            // (the one that does not own it forwards).
            let mut consumer = protocol::client::Consumer::new(&client, "kept", p, 0).unwrap();
            assert_eq!(code_of(consumer.poll()), ErrorCode::DataLost);
            for shard in &broker.shards {
                let mut stream = super::util::raw(shard);
                let produced = super::util::produce_raw(
                    &mut stream,
                    "kept",
                    p,
                    AckMode::Written,
                    &one_message(COUNT, SIZE),
                );
                assert_eq!(code_of(produced), ErrorCode::DataLost);
            }
        }
    };
    check_refused(&brokers[1]);
    let metrics = brokers[1].metrics.clone().unwrap();
    eventually("the gauge", WAIT, || {
        let lost = metric(&scrape(&metrics), "ringlog_partitions_data_lost");
        (lost == 2).then_some(()).ok_or(format!("{lost}"))
    });
    // The CLI shows the rows and says why, and still exits 0.
    let describe = std::process::Command::new(harness::binary("ringlog"))
        .args([
            "--brokers",
            &brokers[0].address(),
            "topic",
            "describe",
            "kept",
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&describe.stdout),
        String::from_utf8_lossy(&describe.stderr),
    );
    assert!(describe.status.success(), "{stderr}");
    assert_eq!(
        stdout.matches("data-lost\tdata-lost").count(),
        2,
        "{stdout}"
    );
    assert!(stderr.contains("its only copy was lost"), "{stderr}");
    // The other broker's partitions are untouched.
    for p in (0..4).filter(|p| !on_2.contains(p)) {
        assert_eq!(read_all(&client, "kept", p, 0).len() as u64, COUNT / 4);
    }
    // A group member reads the other partitions and reports the lost ones
    // as outages instead of failing.
    let mut member = protocol::client::GroupConsumer::subscribe(
        &brokers[0].address(),
        "readers",
        &["kept"],
        protocol::client::GroupConfig::default(),
    )
    .unwrap();
    let mut read = 0u64;
    eventually(
        "the live partitions read, the lost ones outages",
        WAIT,
        || {
            read += member.poll().map_err(|e| e.to_string())?.len() as u64;
            let lost: Vec<u32> = member
                .outages()
                .iter()
                .filter(|o| o.error.code() == Some(ErrorCode::DataLost))
                .filter_map(|o| o.partition)
                .collect();
            if read == COUNT / 2 && lost.len() == 2 {
                Ok(())
            } else {
                Err(format!("{read} read, outages {:?}", member.outages()))
            }
        },
    );
    member.close().unwrap();

    // A restart is not a decision: still refused (meta.toml exists now,
    // the markers remember).
    brokers[1].stop();
    brokers[1].restart();
    check_refused(&brokers[1]);

    // The operator decides: one partition restored from the backup, the
    // other's loss accepted.
    brokers[1].stop();
    std::fs::remove_dir_all(data_2.join(&restored_dir)).unwrap();
    copy_dir(
        &backup.path().join(&restored_dir),
        &data_2.join(&restored_dir),
    );
    let marker = data_2.join(format!("kept-{accepted}")).join("data-lost");
    assert!(marker.exists());
    std::fs::remove_file(&marker).unwrap();
    brokers[1].restart();
    let served = read_all(&client, "kept", restored, 0);
    assert_eq!(served.len() as u64, COUNT / 4, "the restored partition");
    let (_, offsets) = client
        .list_offsets("kept", restored, protocol::client::OffsetSpec::Latest, 0)
        .unwrap();
    assert_eq!(offsets.end_offset, end_before, "restored where it was");
    let (_, offsets) = client
        .list_offsets("kept", accepted, protocol::client::OffsetSpec::Latest, 0)
        .unwrap();
    assert_eq!(offsets.end_offset, 0, "accepted: empty, from 0");
    produce(&client, "kept", 4, COUNT, 4, SIZE);
    eprintln!(
        "wiped broker 2: partitions {on_2:?} refused with DATA_LOST through 2 restarts; \
         kept-{restored} restored from a copy ({} messages, end offset {end_before}), \
         kept-{accepted} accepted empty",
        served.len()
    );
}

fn one_message(index: u64, size: usize) -> Vec<u8> {
    let mut set = Vec::new();
    protocol::message::encode_message(&mut set, None, &numbered_payload(index, size));
    set
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// Issue 24, bug 2: after an etcd outage longer than the brokers' lease, no
/// broker registered again (Metadata listed none a minute later, and
/// CreateTopic failed "not among the live brokers []"). etcd is SIGSTOPped
/// for 15 s and then for 40 s, far past the 2 s lease: each time
/// `ringlog brokers` lists every broker again and a topic can be created.
#[test]
fn r24_2_after_etcd_paused_for_15_s_and_40_s_every_broker_registers_again() {
    let mut etcd = Etcd::start();
    let brokers: Vec<Broker> = (1..=2)
        .map(|id| Broker::start(BrokerOptions::clustered(&etcd, "paused", id)))
        .collect();
    let listed = |broker: &Broker| -> Result<String, String> {
        let output = std::process::Command::new(harness::binary("ringlog"))
            .args(["--brokers", &broker.address(), "brokers"])
            .output()
            .map_err(|e| e.to_string())?;
        let stdout = String::from_utf8_lossy(&output.stdout).to_string();
        let ids: Vec<&str> = stdout
            .lines()
            .filter_map(|line| line.split_whitespace().next())
            .collect();
        if output.status.success() && ids.contains(&"1") && ids.contains(&"2") {
            Ok(stdout)
        } else {
            Err(format!(
                "{stdout}{}",
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    };
    eventually("both brokers listed", WAIT, || listed(&brokers[0]));
    for (round, pause) in [15u64, 40].into_iter().enumerate() {
        etcd.pause(true);
        let paused = Instant::now();
        if round == 0 {
            // Item 17: while etcd does not answer, a control request is
            // answered COORDINATOR_UNAVAILABLE at one deadline
            // (`etcd_timeout_ms`, 2 s here), however many etcd operations
            // it needs — never INTERNAL, never after several timeouts.
            let once = Client::with_config(
                &brokers[0].address(),
                protocol::client::ClientConfig {
                    retries: 0,
                    request_timeout: Duration::from_secs(20),
                    ..Default::default()
                },
            )
            .unwrap();
            let started = Instant::now();
            let create = once.create_topic("during-pause", 2, &TopicSettings::default());
            let create_took = started.elapsed();
            let started = Instant::now();
            let join = once.join_group("g", "m", &["t"], 3_000);
            let join_took = started.elapsed();
            assert_eq!(code_of(create), ErrorCode::CoordinatorUnavailable);
            assert_eq!(code_of(join), ErrorCode::CoordinatorUnavailable);
            eprintln!(
                "etcd paused: CreateTopic answered COORDINATOR_UNAVAILABLE after {:.1} s, JoinGroup after {:.1} s (etcd_timeout_ms 2000)",
                create_took.as_secs_f64(),
                join_took.as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_secs(pause).saturating_sub(paused.elapsed()));
        etcd.pause(false);
        let resumed = Instant::now();
        for broker in &brokers {
            eventually("every broker listed again", WAIT, || listed(broker));
        }
        let after = resumed.elapsed();
        let topic = format!("after-pause-{round}");
        eventually("a topic can be created", WAIT, || {
            brokers[1]
                .client()
                .create_topic(&topic, 2, &TopicSettings::default())
                .map_err(|e| e.to_string())
        });
        eprintln!(
            "etcd paused {pause} s: both brokers listed by `ringlog brokers` {:.1} s after it resumed (lease TTL 2 s); CreateTopic {topic} served",
            after.as_secs_f64()
        );
    }
}
