//! Issue 46, item 1: a topic's settings change while it runs (`ringlog
//! topic alter T --config …`, `--delete-config …`): checked with a clear
//! error per bad name or value, stored in the cluster, applied by every
//! broker before the answer (no restart, no lost or reordered message),
//! retention at the next sweep, shown by `topic describe` with where each
//! value comes from; a standalone broker keeps them across a restart.

use super::util::{raw, raw_metadata, read_all, segment_count, wait_for_brokers};
use harness::etcd::Etcd;
use harness::{
    binary, check_numbered_payload, eventually, numbered_payload, Broker, BrokerOptions,
};
use protocol::client::{AckMode, Client, OffsetSpec, Producer, ProducerConfig, TopicSettings};
use protocol::codec::Metadata;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);
const SIZE: usize = 1000;

fn ringlog(address: &str, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(binary("ringlog"))
        .args(["--brokers", address])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One broker's Metadata of `topic`, asked once on a raw socket.
fn metadata_of(address: &str, topic: &str) -> Metadata {
    raw_metadata(&mut raw(address), topic).unwrap()
}

#[test]
fn r46_1_settings_change_on_every_broker_while_a_producer_runs_and_retention_follows() {
    let etcd = Etcd::start();
    let brokers: Vec<Broker> = (1..=3)
        .map(|id| {
            let mut options = BrokerOptions::clustered(&etcd, "settings", id);
            options.config_toml.push_str("retention_check_ms = 300\n");
            Broker::start(options)
        })
        .collect();
    let client = brokers[0].client();
    wait_for_brokers(&client, 3);
    client
        .create_topic(
            "settings",
            1,
            &TopicSettings {
                replication_factor: 3,
                ..TopicSettings::default()
            },
        )
        .unwrap();

    // A producer, acks=all, numbered messages, throughout.
    let stop = Arc::new(AtomicBool::new(false));
    let producing = {
        let (address, stop) = (brokers[1].address(), stop.clone());
        std::thread::spawn(move || {
            let client = Client::connect(&address).unwrap();
            let mut producer = Producer::new(
                &client,
                "settings",
                ProducerConfig {
                    acks: AckMode::All,
                    batch_messages: 50,
                    ..ProducerConfig::default()
                },
            )
            .unwrap();
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) || sent < 8_000 {
                producer.send(None, &numbered_payload(sent, SIZE)).unwrap();
                sent += 1;
                if sent.is_multiple_of(500) {
                    producer.flush().unwrap();
                }
            }
            producer.flush().unwrap();
            sent
        })
    };

    // Bad names and values: refused, named, nothing changed.
    let address = brokers[2].address();
    for (args, said) in [
        (
            vec!["retention.mss=5"],
            "unknown topic setting \"retention.mss\"",
        ),
        (
            vec!["segment.bytes=100"],
            "segment.bytes must be 1048576..=",
        ),
        (vec!["flush.ms=0"], "--delete-config flush.ms"),
        (
            vec!["min.insync.replicas=4"],
            "more than \"settings\"'s replication factor 3",
        ),
        (
            vec!["message.format=2"],
            "message.format cannot change at run time",
        ),
        (
            vec!["retention.ms=soon"],
            "retention.ms=\"soon\": not a whole number",
        ),
        (
            vec!["flush.messages=5", "flush.messages=6"],
            "flush.messages is named more than once",
        ),
    ] {
        let (code, out, err) = ringlog(
            &address,
            &["topic", "alter", "settings", "--config", &args.join(",")],
        );
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        assert!(err.contains(said), "{args:?}: {err}");
    }
    let before = metadata_of(&brokers[0].address(), "settings").topics[0].overrides;
    assert_eq!(before.segment_bytes, 0, "nothing stored: {before:?}");

    // Smaller segments, a flush policy and min.insync.replicas, through
    // broker 3; answered once all three apply it.
    let started = Instant::now();
    let (code, out, err) = ringlog(
        &address,
        &[
            "topic",
            "alter",
            "settings",
            "--config",
            "segment.bytes=1048576,flush.messages=100,flush.ms=50,min.insync.replicas=3",
        ],
    );
    let took = started.elapsed();
    assert_eq!(code, 0, "{out}{err}");
    println!(
        "alter answered in {:.0} ms:\n{out}",
        took.as_secs_f64() * 1000.0
    );
    assert!(
        out.contains("segment.bytes        1048576              (topic)"),
        "{out}"
    );
    assert!(
        out.contains("retention.ms         604800000            (default)"),
        "{out}"
    );
    for broker in &brokers {
        let topic = metadata_of(&broker.address(), "settings").topics.remove(0);
        assert_eq!(topic.settings.segment_bytes, 1 << 20, "{topic:?}");
        assert_eq!(topic.settings.flush_messages, 100);
        assert_eq!(topic.settings.flush_interval_ms, 50);
        assert_eq!(topic.settings.min_insync_replicas, 3);
        assert_eq!(topic.overrides.segment_bytes, 1 << 20);
    }
    // Every copy rolls at the new size.
    eventually("every copy rolled 1 MiB segments", WAIT, || {
        let counts: Vec<usize> = brokers
            .iter()
            .map(|b| segment_count(b, "settings-0"))
            .collect();
        counts
            .iter()
            .all(|c| *c >= 4)
            .then_some(())
            .ok_or(format!("{counts:?}"))
    });
    stop.store(true, Ordering::Relaxed);
    let sent = producing.join().unwrap();

    // Not one message lost or out of order.
    let messages = read_all(&client, "settings", 0, 0);
    assert_eq!(messages.len() as u64, sent);
    for (i, message) in messages.iter().enumerate() {
        assert_eq!(check_numbered_payload(&message.value, SIZE), i as u64);
    }
    println!("{sent} messages produced (acks=all) across the change, all read back in order");

    // Retention by size, set at run time: the next sweep on every broker
    // cuts each copy to about 2 MiB of closed segments.
    let segments: Vec<usize> = brokers
        .iter()
        .map(|b| segment_count(b, "settings-0"))
        .collect();
    let started = Instant::now();
    let (code, out, err) = ringlog(
        &brokers[0].address(),
        &[
            "topic",
            "alter",
            "settings",
            "--config",
            "retention.bytes=2097152",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    eventually("every copy swept", WAIT, || {
        let counts: Vec<usize> = brokers
            .iter()
            .map(|b| segment_count(b, "settings-0"))
            .collect();
        counts
            .iter()
            .all(|c| *c <= 3)
            .then_some(())
            .ok_or(format!("{counts:?}"))
    });
    println!(
        "retention.bytes=2097152: segments per copy {segments:?} -> {:?} within {:.1} s (sweep every 0.3 s)",
        brokers.iter().map(|b| segment_count(b, "settings-0")).collect::<Vec<_>>(),
        started.elapsed().as_secs_f64()
    );
    let (_, offsets) = client
        .list_offsets("settings", 0, OffsetSpec::Earliest, 0)
        .unwrap();
    assert!(offsets.start_offset > 0, "{offsets:?}");
    // What survives is the newest messages, still in order.
    let kept = read_all(&client, "settings", 0, offsets.start_offset);
    let first = check_numbered_payload(&kept[0].value, SIZE);
    for (i, message) in kept.iter().enumerate() {
        assert_eq!(
            check_numbered_payload(&message.value, SIZE),
            first + i as u64
        );
    }
    assert_eq!(first + kept.len() as u64, sent);

    // Back to the defaults: describe says so.
    let (code, out, err) = ringlog(
        &brokers[1].address(),
        &[
            "topic",
            "alter",
            "settings",
            "--delete-config",
            "retention.bytes,segment.bytes,flush.messages,flush.ms",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = ringlog(&brokers[2].address(), &["topic", "describe", "settings"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("segment.bytes        1073741824           (default)"),
        "{out}"
    );
    assert!(
        out.contains("retention.bytes      0 (no limit)         (default)"),
        "{out}"
    );
    assert!(
        out.contains("min.insync.replicas  3                    (topic)"),
        "{out}"
    );
}

#[test]
fn r46_1_a_standalone_broker_keeps_changed_settings_across_a_restart() {
    let mut broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    client
        .create_topic("kept", 2, &TopicSettings::default())
        .unwrap();
    let topic = client
        .alter_topic_config(
            "kept",
            &[("retention.ms", "3600000"), ("retention.bytes", "-1")],
            &[],
        )
        .unwrap();
    assert_eq!(topic.settings.retention_ms, 3_600_000);
    assert_eq!(topic.overrides.retention_bytes, i64::MAX as u64);
    // Unknown topic: said so.
    let error = client
        .alter_topic_config("absent", &[("retention.ms", "1")], &[])
        .unwrap_err();
    assert!(error.to_string().contains("no topic \"absent\""), "{error}");
    broker.stop();
    broker.restart();
    let (code, out, err) = ringlog(&broker.address(), &["topic", "describe", "kept"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("retention.ms         3600000              (topic)"),
        "{out}"
    );
    assert!(
        out.contains("retention.bytes      -1 (no limit)        (topic)"),
        "{out}"
    );
    assert!(
        out.contains("flush.ms             10                   (default)"),
        "{out}"
    );
}

#[test]
fn r46_1_a_mirror_gives_its_copy_the_source_topics_changed_settings() {
    let source = Broker::start(BrokerOptions::default());
    let target = Broker::start(BrokerOptions::default());
    source
        .client()
        .create_topic("ord.settings", 1, &TopicSettings::default())
        .unwrap();
    let mut mirror = std::process::Command::new(binary("ringlog"))
        .args([
            "--brokers",
            &target.address(),
            "mirror",
            "--from",
            &source.address(),
        ])
        .args(["--topics", "ord.*", "--name", "dc1"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let copy = target.client();
    eventually("the copy exists", WAIT, || {
        copy.metadata(&["ord.settings"])
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    source
        .client()
        .alter_topic_config(
            "ord.settings",
            &[("retention.ms", "3600000"), ("segment.bytes", "2097152")],
            &[],
        )
        .unwrap();
    let started = Instant::now();
    eventually("the copy follows the source's settings", WAIT, || {
        let topic = copy
            .metadata(&["ord.settings"])
            .map_err(|e| e.to_string())?
            .topics
            .remove(0);
        (topic.settings.retention_ms == 3_600_000 && topic.settings.segment_bytes == 2 << 20)
            .then_some(())
            .ok_or(format!("{:?}", topic.settings))
    });
    println!(
        "the copy took the source's changed settings {:.1} s after the change (the mirror scans every 5 s)",
        started.elapsed().as_secs_f64()
    );
    let _ = mirror.kill();
    let _ = mirror.wait();
}
