//! Issue 20, KIP-320 on real brokers and a real etcd: a consumer's position
//! carries the leader epoch of the message before it (committed with the
//! offset, for groups), so a consumer whose log an unclean election cut
//! learns what it had read that is gone, and goes on from the cut instead
//! of failing with OFFSET_OUT_OF_RANGE or, worse, reading other messages at
//! offsets it believes it has passed.

use super::replica_operations::{ringlog, wait_full_isr};
use super::replication::{
    all_producer, cluster_of, metadata, options, replicated, wait_identical, WAIT,
};
use harness::etcd::Etcd;
use harness::{eventually, BrokerOptions};
use protocol::client::{
    Client, ClientError, Consumer, GroupConfig, GroupConsumer, Start, StartFrom, TopicConsumer,
    TopicConsumerConfig, Truncation,
};
use protocol::ErrorCode;
use std::time::Duration;

fn payload(i: u64) -> Vec<u8> {
    format!("m{i:05}").into_bytes()
}

fn produce(client: &Client, range: std::ops::Range<u64>) {
    let mut producer = all_producer(client, "cut");
    for i in range {
        producer.send_to(0, None, &payload(i)).unwrap();
    }
    producer.flush().unwrap();
}

fn group_config() -> GroupConfig {
    GroupConfig {
        start_from: StartFrom::Earliest,
        auto_commit_interval: None,
        session_timeout: Duration::from_secs(6),
        ..GroupConfig::default()
    }
}

/// Polls a group member until it has `count` messages (as text).
fn group_read(member: &mut GroupConsumer, count: usize) -> Vec<(u64, String)> {
    let mut got = Vec::new();
    eventually("the group member read its messages", WAIT, || {
        for m in member.poll().map_err(|e| e.to_string())? {
            got.push((m.offset, String::from_utf8(m.value).unwrap()));
        }
        if got.len() >= count {
            Ok(())
        } else {
            Err(format!("{} of {count}", got.len()))
        }
    });
    got
}

/// Polls a topic consumer until it has `count` messages (as text).
fn topic_read(consumer: &mut TopicConsumer, count: usize) -> Vec<(u64, String)> {
    let mut got = Vec::new();
    eventually("the topic consumer read its messages", WAIT, || {
        for m in consumer
            .poll(Duration::from_millis(200))
            .map_err(|e| e.to_string())?
        {
            got.push((m.offset, String::from_utf8(m.value).unwrap()));
        }
        if got.len() >= count {
            Ok(())
        } else {
            Err(format!(
                "{} of {count}; {:?}",
                got.len(),
                consumer.outages()
            ))
        }
    });
    got
}

#[test]
fn r20_kip320_a_log_cut_under_a_consumers_position_is_reported_and_reading_goes_on_from_the_cut() {
    let etcd = Etcd::start();
    // On fixed ports: the topic consumer's client knows both addresses
    // from the start, and a restarted broker keeps its own.
    let mut brokers = cluster_of(
        (1..=2)
            .map(|id| BrokerOptions {
                listen: Some(format!("127.0.0.1:{}", harness::free_ports(1))),
                ..options(&etcd, "kip320", id)
            })
            .collect(),
    );
    let client = brokers[0].client();
    client.create_topic("cut", 1, &replicated(2, 1)).unwrap();
    wait_full_isr(&client, "cut");
    let leader = metadata(&client, "cut").topics[0].partitions[0].broker_id;
    let (l, f) = if leader == 1 { (0, 1) } else { (1, 0) };
    let via_leader = brokers[l].client();
    produce(&via_leader, 0..100);
    wait_identical(&[&brokers[0], &brokers[1]], "cut", 0);
    // The follower dies; 100 more reach only the leader (min_insync 1).
    brokers[f].kill9();
    eventually("the ISR shrunk to the leader", WAIT, || {
        let isr = metadata(&via_leader, "cut").topics[0].partitions[0]
            .isr
            .clone();
        (isr == [leader]).then_some(()).ok_or(format!("{isr:?}"))
    });
    produce(&via_leader, 100..200);

    // Four readers take all 200 from the leader: a plain consumer, a group
    // member of the library, one of the CLI and the Python client's
    // consumer; the groups commit.
    let mut plain = Consumer::new(&via_leader, "cut", 0, 0).unwrap();
    let mut offsets = Vec::new();
    while offsets.len() < 200 {
        for m in plain.poll().unwrap() {
            offsets.push(m.offset);
        }
    }
    let cut_at = offsets[100];
    let (position, epoch) = (plain.position(), plain.position_epoch());
    assert!(
        epoch >= 0,
        "a replicated partition's chunks name their epoch"
    );
    let leader_address = brokers[l].address();
    let read_by_python = python(&[&leader_address, "read", "0", "-1", "200"]);
    assert_eq!(
        read_by_python.lines().last(),
        Some(format!("position {position} epoch {epoch}").as_str()),
        "the Python consumer ends where the Rust one does, with the epoch: {read_by_python}"
    );
    // A topic consumer stays open across the election, tailing.
    let both = Client::connect(&format!("{leader_address},{}", brokers[f].address())).unwrap();
    let mut tail = TopicConsumer::new(
        &both,
        "cut",
        Start::Earliest,
        TopicConsumerConfig::default(),
    )
    .unwrap();
    assert_eq!(topic_read(&mut tail, 200).len(), 200);
    let mut member =
        GroupConsumer::subscribe(&leader_address, "lib", &["cut"], group_config()).unwrap();
    assert_eq!(group_read(&mut member, 200).len(), 200);
    member.close().unwrap();
    let (code, out, err) = ringlog(
        &leader_address,
        &["consume", "cut", "--group", "cli", "--count", "200"],
    );
    assert_eq!((code, out.lines().count()), (0, 200), "{err}");
    for group in ["lib", "cli"] {
        let committed = via_leader.describe_group(group).unwrap().partitions[0].clone();
        assert_eq!(
            (committed.offset, committed.leader_epoch),
            (Some(position), epoch),
            "group {group} commits the epoch with the offset"
        );
    }

    // The leader dies, the follower returns and is elected uncleanly: the
    // 100 only the old leader held are gone, and 10 others take their
    // offsets.
    brokers[l].kill9();
    brokers[f].restart();
    let via_follower = brokers[f].client();
    let follower_address = brokers[f].address();
    eventually("the old leader's lease gone", WAIT, || {
        let m = via_follower.metadata(&[]).map_err(|e| e.to_string())?;
        (m.brokers.len() == 1).then_some(()).ok_or(format!("{m:?}"))
    });
    let (code, out, err) = ringlog(
        &follower_address,
        &[
            "partitions",
            "elect",
            "cut",
            "--partition",
            "0",
            "--unclean",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    produce(&via_follower, 1_000..1_010);
    let expected: Vec<String> = (1_000..1_010)
        .map(|i| String::from_utf8(payload(i)).unwrap())
        .collect();
    let lost = Truncation {
        topic: "cut".into(),
        partition: 0,
        from: cut_at,
        to: position,
    };

    // Without the epoch, the position is only past the end: the consumer
    // cannot tell a cut log from a wrong offset.
    let mut blind = Consumer::new(&via_follower, "cut", 0, position).unwrap();
    let error = blind.poll().unwrap_err();
    assert!(
        matches!(
            error,
            ClientError::Broker {
                code: ErrorCode::OffsetOutOfRange,
                ..
            }
        ),
        "{error}"
    );

    // With it, the leader says where the epoch ends: the consumer records
    // what it lost and reads the new messages from the cut.
    let mut resumed = Consumer::new(&via_follower, "cut", 0, position).unwrap();
    resumed.seek_committed(position, epoch);
    let mut got = Vec::new();
    while got.len() < 10 {
        got.extend(resumed.poll().unwrap());
    }
    assert_eq!(resumed.take_truncations(), vec![lost.clone()]);
    assert_eq!(got[0].offset, cut_at, "it goes on from the cut");
    let values: Vec<String> = got
        .iter()
        .map(|m| String::from_utf8(m.value.clone()).unwrap())
        .collect();
    assert_eq!(values, expected);
    assert!(resumed.take_truncations().is_empty(), "reported once");

    // The Python consumer, resuming where it stopped with the epoch it
    // had: the same truncation, the same new messages from the cut (issue
    // 46, item 8, against a real unclean election).
    let resumed_by_python = python(&[
        &follower_address,
        "read",
        &position.to_string(),
        &epoch.to_string(),
        "10",
    ]);
    let mut lines = resumed_by_python.lines();
    assert_eq!(
        lines.next(),
        Some(format!("truncation cut 0 {cut_at} {position}").as_str()),
        "{resumed_by_python}"
    );
    let values: Vec<&str> = lines.by_ref().take(10).collect();
    assert_eq!(values, expected, "{resumed_by_python}");

    // The topic consumer that tailed through it too.
    let read = topic_read(&mut tail, 10);
    assert_eq!(tail.take_truncations(), vec![lost.clone()]);
    assert_eq!(read[0].0, cut_at);
    let values: Vec<String> = read.into_iter().map(|(_, v)| v).collect();
    assert_eq!(values, expected);
    tail.close();

    // A group member resuming from the committed offset does the same.
    let mut member =
        GroupConsumer::subscribe(&follower_address, "lib", &["cut"], group_config()).unwrap();
    let read = group_read(&mut member, 10);
    assert_eq!(member.take_truncations(), vec![lost]);
    assert_eq!(read[0].0, cut_at);
    let values: Vec<String> = read.into_iter().map(|(_, v)| v).collect();
    assert_eq!(values, expected);
    member.close().unwrap();
    let committed = via_follower.describe_group("lib").unwrap().partitions[0].clone();
    assert_eq!(
        committed.offset,
        Some(resumed.position()),
        "the new position is committed"
    );
    assert!(committed.leader_epoch > epoch, "{committed:?}");

    // And the CLI says so on stderr.
    let (code, out, err) = ringlog(
        &follower_address,
        &["consume", "cut", "--group", "cli", "--count", "10"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().collect::<Vec<_>>(), expected, "{err}");
    assert!(
        err.contains("warning")
            && err.contains(&format!(
                "cut at offset {cut_at} below group cli's position {position}"
            )),
        "{err}"
    );
}

/// Reads `count` messages of `cut`-0 with the Python client's consumer from
/// `offset` (with the leader epoch `epoch` of the message before it, -1:
/// none) through `address`: prints each truncation it reports, each value,
/// then where it stopped and its epoch.
const PYTHON_READER: &str = r#"
import sys
import ringlog

address, _, offset, epoch, count = sys.argv[1:6]
consumer = ringlog.Consumer(ringlog.Client(address), "cut", 0, int(offset))
consumer.seek(int(offset), int(epoch))
values = []
while len(values) < int(count):
    for m in consumer.poll():
        values.append(m.value.decode())
    for t in consumer.take_truncations():
        print(f"truncation {t.topic} {t.partition} {t.start} {t.end}")
for v in values[: int(count)]:
    print(v)
print(f"position {consumer.position} epoch {consumer.epoch}")
"#;

/// Runs [`PYTHON_READER`] with `args`; its output.
fn python(args: &[&str]) -> String {
    let dir = harness::TempDir::new("truncation-python");
    let script = dir.path().join("reader.py");
    std::fs::write(&script, PYTHON_READER).unwrap();
    let output = harness::python::command("truncation")
        .arg(&script)
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "the Python reader {args:?}: {text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    text
}
