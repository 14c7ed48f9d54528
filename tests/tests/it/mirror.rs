//! Issue 21, the broker's side of mirroring: a mirror's target topic takes
//! a source partition's bytes verbatim at the source's offsets (a mirror
//! append), refuses ordinary produces, and ends up with the source's
//! segment files byte for byte.

use super::util::producer;
use harness::{Broker, BrokerOptions};
use protocol::client::{AckMode, Client, Connection, OffsetSpec, TopicSettings};
use protocol::codec::multi_fetch::{
    decode_multi_fetch_response, multi_fetch_request, FetchPart, MultiFetch,
};
use protocol::codec::{self, MirrorAppend};
use protocol::frame::Api;
use protocol::message::MessageSetIter;
use protocol::ErrorCode;
use std::collections::BTreeMap;
use std::path::Path;

fn small_segments() -> BrokerOptions {
    BrokerOptions {
        config_toml: "segment_bytes_min = 1024\n".into(),
        ..BrokerOptions::default()
    }
}

fn settings() -> TopicSettings {
    TopicSettings {
        segment_bytes: 64 * 1024,
        ..TopicSettings::default()
    }
}

/// One MultiFetch of `partition` at `offset`: the chunk cut to whole
/// messages, and the base of the source segment it lies in.
fn fetch(conn: &mut Connection, topic: &str, partition: u32, offset: u64) -> (Vec<u8>, u64, u32) {
    let parts = [FetchPart::consumer(topic, partition, offset, 256 * 1024)];
    let request = MultiFetch {
        max_bytes: 256 * 1024,
        max_wait_ms: 0,
        replica_id: -1,
        incarnation: String::new(),
    };
    let header = multi_fetch_request(&mut conn.fbb, &parts, &request).to_vec();
    let frame = conn.call(Api::MultiFetch, &header, &[]).unwrap();
    let mut answer = decode_multi_fetch_response(&frame.header, frame.payload.len()).unwrap();
    let (part, range) = answer.remove(0);
    assert_eq!(part.error, ErrorCode::None, "{}", part.message);
    let chunk = &frame.payload[range];
    let mut iter = MessageSetIter::new(chunk, offset);
    let mut count = 0;
    for message in iter.by_ref() {
        message.unwrap();
        count += 1;
    }
    (chunk[..iter.position()].to_vec(), part.segment_base, count)
}

/// A mirror append of `bytes` at `at`.
fn mirror_append(
    conn: &mut Connection,
    topic: &str,
    partition: u32,
    at: MirrorAppend,
    bytes: &[u8],
) -> Result<u64, protocol::client::ClientError> {
    let header =
        codec::mirror_append_request(&mut conn.fbb, topic, partition, AckMode::Flushed, at, "")
            .to_vec();
    let frame = conn.call(Api::Produce, &header, bytes)?;
    Ok(
        codec::verify::<protocol::wire::ProduceResponse>(&frame.header)
            .unwrap()
            .end_offset(),
    )
}

/// A connection to the shard of `broker` that owns `partition` of `topic`
/// (MultiFetch is not forwarded between shards).
fn shard_conn(broker: &Broker, topic: &str, partition: u32) -> Connection {
    let metadata = broker.client().metadata(&[topic]).unwrap();
    let shard = metadata.topics[0].partitions[partition as usize].shard_id;
    Connection::connect(&broker.shards[usize::from(shard)]).unwrap()
}

/// Copies `partition` of `topic` from `source` into `into` of `target`
/// from `from` to the source's end; returns the appends made.
fn copy(
    (source, topic): (&Broker, &str),
    (target, into): (&Broker, &str),
    partition: u32,
    from: u64,
) -> usize {
    let mut read = shard_conn(source, topic, partition);
    let mut write = Connection::connect(&target.address()).unwrap();
    let (mut offset, mut appends) = (from, 0);
    loop {
        let (bytes, segment_base, count) = fetch(&mut read, topic, partition, offset);
        if count == 0 {
            return appends;
        }
        let at = MirrorAppend {
            offset,
            segment_base,
        };
        offset = mirror_append(&mut write, into, partition, at, &bytes).unwrap();
        appends += 1;
    }
}

/// The segment files of a partition directory, by name.
fn segments(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            (name, std::fs::read(&p).unwrap())
        })
        .collect()
}

#[test]
fn r21_a_mirrored_partition_is_the_sources_segment_files_byte_for_byte_and_refuses_produces() {
    let source = Broker::start(small_segments());
    let target = Broker::start(small_segments());
    let src = source.client();
    src.create_topic("clicks", 2, &settings()).unwrap();
    let mut p = producer(&src, "clicks", AckMode::Flushed, 100);
    for n in 0..20_000u64 {
        p.send(
            None,
            format!("click {n:08} {}", "x".repeat(n as usize % 50)).as_bytes(),
        )
        .unwrap();
    }
    p.flush().unwrap();
    let dst = target.client();
    let created = dst
        .create_mirror_topic("clicks", 2, &settings(), "dc1/clicks")
        .unwrap();
    assert_eq!(created.mirror_source, "dc1/clicks");
    let described = dst.metadata(&["clicks"]).unwrap();
    assert_eq!(described.topics[0].mirror_source, "dc1/clicks");

    // Nobody but the mirror writes it.
    let mut ordinary = producer(&dst, "clicks", AckMode::Flushed, 1);
    let refused = ordinary
        .send(None, b"not mine")
        .and_then(|_| ordinary.flush());
    let error = refused.unwrap_err();
    assert!(error.to_string().contains("MIRRORED_PARTITION"), "{error}");
    assert!(error.to_string().contains("dc1/clicks"), "{error}");

    let mut appends = 0;
    for partition in 0..2 {
        appends += copy((&source, "clicks"), (&target, "clicks"), partition, 0);
    }
    for partition in 0..2 {
        let name = format!("clicks-{partition}");
        let (from, to) = (
            segments(&source.data_dir().join(&name)),
            segments(&target.data_dir().join(&name)),
        );
        assert!(from.len() > 2, "several segments: {:?}", from.keys());
        assert_eq!(
            from.keys().collect::<Vec<_>>(),
            to.keys().collect::<Vec<_>>()
        );
        assert!(from == to, "{name}: the copy's segment files differ");
        let ends = |client: &Client| {
            client
                .list_offsets("clicks", partition, OffsetSpec::Latest, 0)
                .unwrap()
                .0
        };
        assert_eq!(ends(&src), ends(&dst));
    }

    // An append anywhere but the copy's end is refused with that end, and
    // a mirror append to an ordinary topic is a bad request.
    let mut write = Connection::connect(&target.address()).unwrap();
    let end = dst
        .list_offsets("clicks", 0, OffsetSpec::Latest, 0)
        .unwrap()
        .0;
    let mut read = shard_conn(&source, "clicks", 0);
    let (bytes, base, _) = fetch(&mut read, "clicks", 0, 0);
    let behind = mirror_append(
        &mut write,
        "clicks",
        0,
        MirrorAppend {
            offset: 0,
            segment_base: base,
        },
        &bytes,
    )
    .unwrap_err();
    assert_eq!(behind.code(), Some(ErrorCode::OffsetOutOfRange), "{behind}");
    assert!(
        behind.to_string().contains(&format!("ends at {end}")),
        "{behind}"
    );
    dst.create_topic("plain", 1, &settings()).unwrap();
    let plain = mirror_append(
        &mut write,
        "plain",
        0,
        MirrorAppend {
            offset: 0,
            segment_base: 0,
        },
        &bytes,
    )
    .unwrap_err();
    assert_eq!(plain.code(), Some(ErrorCode::InvalidRequest), "{plain}");

    // A copy made after the source's retention removed its first segment
    // starts at the source's earliest offset: the log's first segment is
    // based there, and the files are the source's from there on.
    let from = segments(&source.data_dir().join("clicks-1"));
    let second: u64 = from.keys().nth(1).unwrap()[..20].parse().unwrap();
    dst.create_mirror_topic("late", 2, &settings(), "dc1/clicks")
        .unwrap();
    // The source's partition 1, copied into "late" from its second segment.
    let late_appends = copy((&source, "clicks"), (&target, "late"), 1, second);
    let late = segments(&target.data_dir().join("late-1"));
    let expected: BTreeMap<String, Vec<u8>> = from.into_iter().skip(1).collect();
    assert!(
        late == expected,
        "the late copy's files are the source's from its second segment"
    );
    let earliest = dst
        .list_offsets("late", 1, OffsetSpec::Earliest, 0)
        .unwrap()
        .0;
    assert_eq!(earliest, second);
    // Promote: the failover step. The topic takes ordinary produces at
    // the offsets the mirror left, and no mirror appends.
    let end = dst
        .list_offsets("clicks", 0, OffsetSpec::Latest, 0)
        .unwrap()
        .0;
    assert_eq!(dst.promote_mirror("clicks", &[]).unwrap(), "dc1/clicks");
    let again = dst.promote_mirror("clicks", &[]).unwrap_err();
    assert_eq!(again.code(), Some(ErrorCode::InvalidRequest), "{again}");
    assert_eq!(
        dst.metadata(&["clicks"]).unwrap().topics[0].mirror_source,
        ""
    );
    let mut writable = producer(&dst, "clicks", AckMode::Flushed, 1);
    let receipt = writable
        .send_to(0, None, b"written in the new datacenter")
        .unwrap();
    writable.flush().unwrap();
    let (bytes, base, _) = fetch(&mut shard_conn(&source, "clicks", 0), "clicks", 0, 0);
    let late = mirror_append(
        &mut write,
        "clicks",
        0,
        MirrorAppend {
            offset: end,
            segment_base: base,
        },
        &bytes,
    )
    .unwrap_err();
    assert_eq!(late.code(), Some(ErrorCode::InvalidRequest), "{late}");
    let new_end = dst
        .list_offsets("clicks", 0, OffsetSpec::Latest, 0)
        .unwrap()
        .0;
    assert!(new_end > end, "the produce went on at {end}: {receipt:?}");
    eprintln!("promoted clicks: partition 0 stopped mirroring at {end}, took a produce there, now ends at {new_end}");
    eprintln!(
        "mirrored clicks: 2 partitions, {appends} appends, segment files identical to the source's; \
         an ordinary produce refused ({error}); a late copy starts at {second} ({late_appends} appends)"
    );
}

fn mirror_process(source: &Broker, target: &Broker, extra: &[&str]) -> std::process::Child {
    std::process::Command::new(harness::binary("ringlog"))
        .args([
            "--brokers",
            &target.address(),
            "mirror",
            "--from",
            &source.address(),
        ])
        .args(["--topics", "ord.*", "--name", "dc1"])
        .args(extra)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// Issue 21, items 1–3 with real processes: `ringlog mirror` copies the
/// matching topics while a producer writes the source, is SIGKILLed and
/// started again 20 times, picks up a partition added to the source
/// meanwhile, and leaves copies whose segment files are the source's —
/// so no message is missing, doubled or moved. Then `ringlog mirror
/// promote` makes the copy writable.
#[test]
fn r21_the_mirror_killed_20_times_under_load_leaves_byte_identical_copies() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let source = Broker::start(small_segments());
    let target = Broker::start(small_segments());
    let src = source.client();
    src.create_topic("orders", 3, &settings()).unwrap();
    src.create_topic("other", 1, &settings()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (client, stop) = (source.client(), stop.clone());
        std::thread::spawn(move || {
            let mut p = producer(&client, "orders", AckMode::Flushed, 50);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                p.send(None, format!("order {n:010}").as_bytes()).unwrap();
                n += 1;
                if n.is_multiple_of(500) {
                    p.flush().unwrap();
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            }
            p.flush().unwrap();
            n
        })
    };
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    let mut mirror = mirror_process(&source, &target, &[]);
    for round in 0..20 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        std::thread::sleep(std::time::Duration::from_millis(150 + (seed >> 33) % 350));
        mirror.kill().unwrap(); // SIGKILL
        mirror.wait().unwrap();
        if round == 10 {
            src.create_partitions("orders", 4).unwrap();
        }
        mirror = mirror_process(&source, &target, &[]);
    }
    mirror.kill().unwrap();
    mirror.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    let produced = writer.join().unwrap();
    // Once more, to the end.
    let status = mirror_process(&source, &target, &["--exit-at-end"])
        .wait()
        .unwrap();
    assert!(status.success(), "{status}");
    let dst = target.client();
    let metadata = dst.metadata(&[]).unwrap();
    let names: Vec<&str> = metadata.topics.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, vec!["orders"], "only the matching topic");
    assert_eq!(
        metadata.topics[0].partitions.len(),
        4,
        "the added partition too"
    );
    let mut total = 0u64;
    for partition in 0..4 {
        let name = format!("orders-{partition}");
        let (from, to) = (
            segments(&source.data_dir().join(&name)),
            segments(&target.data_dir().join(&name)),
        );
        assert_eq!(
            from.keys().collect::<Vec<_>>(),
            to.keys().collect::<Vec<_>>(),
            "{name}"
        );
        assert!(from == to, "{name}: the copy's segment files differ");
        let mut read = shard_conn(&target, "orders", partition);
        let mut offset = 0;
        loop {
            let (bytes, _, count) = fetch(&mut read, "orders", partition, offset);
            if count == 0 {
                break;
            }
            offset += bytes.len() as u64;
            total += u64::from(count);
        }
    }
    assert_eq!(
        total, produced,
        "every produced message is in the copies once"
    );
    // `ringlog verify` says the same without reading the files.
    let output = std::process::Command::new(harness::binary("ringlog"))
        .args([
            "--brokers",
            &target.address(),
            "verify",
            "orders",
            "--against",
            &source.address(),
        ])
        .output()
        .unwrap();
    let verified = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && verified.matches(" match over 0..").count() == 4,
        "{verified}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The failover: promote, then write.
    let output = std::process::Command::new(harness::binary("ringlog"))
        .args([
            "--brokers",
            &target.address(),
            "mirror",
            "promote",
            "orders",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("was a mirror of dc1/orders"), "{stdout}");
    let mut writable = producer(&dst, "orders", AckMode::Flushed, 1);
    writable.send_to(3, None, b"after the failover").unwrap();
    writable.flush().unwrap();
    eprintln!(
        "mirror SIGKILLed 20 times under load: {produced} messages produced, {total} in the copies, 4 partitions (one added while mirroring) with segment files identical to the source's; promote printed:\n{stdout}"
    );
}

fn clustered(etcd: &harness::etcd::Etcd, cluster: &str, id: u32) -> Broker {
    let mut options = BrokerOptions::clustered(etcd, cluster, id);
    options.config_toml.push_str("segment_bytes_min = 1024\n");
    Broker::start(options)
}

/// Issue 21, items 4 and 6: a replicated source topic (R=3, min ISR 2) is
/// mirrored into a one-broker cluster (R=1); with `--groups`, a source
/// group's committed offsets reach the target group, and a group consumer
/// in the target continues exactly where the group was in the source.
#[test]
fn r21_a_replicated_topic_and_its_group_offsets_move_to_another_cluster() {
    use protocol::client::{GroupConfig, GroupConsumer, StartFrom};
    let (etcd_a, etcd_b) = (harness::etcd::Etcd::start(), harness::etcd::Etcd::start());
    let sources: Vec<Broker> = (1..=3).map(|id| clustered(&etcd_a, "dc1", id)).collect();
    let target = clustered(&etcd_b, "dc2", 1);
    let src = sources[0].client();
    let replicated = TopicSettings {
        replication_factor: 3,
        min_insync_replicas: 2,
        ..settings()
    };
    src.create_topic("events", 2, &replicated).unwrap();
    let mut p = producer(&src, "events", AckMode::All, 100);
    let mut send = |range: std::ops::Range<u64>| {
        for n in range {
            p.send_to((n % 2) as u32, None, format!("event {n:06}").as_bytes())
                .unwrap();
        }
        p.flush().unwrap();
    };
    send(0..1_000);
    // The source group reads those 1,000 and commits; 2,000 more follow.
    let config = || GroupConfig {
        session_timeout: std::time::Duration::from_secs(3),
        start_from: StartFrom::Earliest,
        auto_commit_interval: None,
        ..GroupConfig::default()
    };
    let mut member = GroupConsumer::subscribe_with(&src, "billing", &["events"], config()).unwrap();
    let mut read = Vec::new();
    while read.len() < 1_000 {
        read.extend(member.poll().unwrap());
    }
    member.close().unwrap();
    assert_eq!(read.len(), 1_000);
    send(1_000..3_000);
    let committed: BTreeMap<u32, u64> = src
        .describe_group("billing")
        .unwrap()
        .partitions
        .iter()
        .filter_map(|p| Some((p.partition, p.offset?)))
        .collect();
    assert_eq!(committed.len(), 2, "{committed:?}");

    let status = std::process::Command::new(harness::binary("ringlog"))
        .args(["--brokers", &target.address(), "mirror"])
        .args(["--from", &sources[1].address(), "--topics", "events"])
        .args(["--groups", "bill.*", "--name", "dc1", "--exit-at-end"])
        .status()
        .unwrap();
    assert!(status.success(), "{status}");
    let dst = target.client();
    let topic = &dst.metadata(&["events"]).unwrap().topics[0];
    assert_eq!(
        topic.settings.replication_factor, 1,
        "the target's own factor"
    );
    assert!(
        topic.mirror_source.starts_with("dc1/events (cluster "),
        "{}",
        topic.mirror_source
    );
    for partition in 0..2 {
        let name = format!("events-{partition}");
        let copy = segments(&target.data_dir().join(&name));
        for source in &sources {
            assert!(
                segments(&source.data_dir().join(&name)) == copy,
                "{name}: the copy differs from a source replica's files"
            );
        }
    }
    let copied: BTreeMap<u32, u64> = dst
        .describe_group("billing")
        .unwrap()
        .partitions
        .iter()
        .filter_map(|p| Some((p.partition, p.offset?)))
        .collect();
    assert_eq!(copied, committed, "the group's offsets, as they are");
    // The failover: promote, and the group goes on in the target.
    dst.promote_mirror("events", &[]).unwrap();
    let mut member = GroupConsumer::subscribe_with(&dst, "billing", &["events"], config()).unwrap();
    let mut rest = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while rest.len() < 2_000 && std::time::Instant::now() < deadline {
        rest.extend(member.poll().unwrap());
    }
    member.close().unwrap();
    let mut seen: Vec<String> = read
        .iter()
        .chain(&rest)
        .map(|m| String::from_utf8_lossy(&m.value).to_string())
        .collect();
    let total = seen.len();
    seen.sort();
    seen.dedup();
    assert_eq!(
        (rest.len(), seen.len(), total),
        (2_000, 3_000, 3_000),
        "no message twice, none missing"
    );
    for m in &rest[..2] {
        assert!(committed.get(&m.partition).is_some_and(|&c| m.offset >= c));
    }
    eprintln!(
        "R=3 topic mirrored into an R=1 cluster, copies identical to every source replica; group billing committed {committed:?} in dc1, {copied:?} in dc2; after promote it read the other {} messages there, none twice",
        rest.len()
    );
}

/// Issue 21, item 5: a running mirror's lag, throughput and errors, as
/// Prometheus metrics and `ringlog mirror status`; a message larger than
/// the mirror's reads is copied too.
#[test]
fn r21_a_running_mirror_reports_its_lag_and_what_it_copied() {
    let large = || BrokerOptions {
        config_toml: "segment_bytes_min = 1024\nmessage_bytes_max = 4194304\n".into(),
        ..BrokerOptions::default()
    };
    let source = Broker::start(large());
    let target = Broker::start(large());
    let src = source.client();
    src.create_topic("orders", 2, &settings()).unwrap();
    let mut p = producer(&src, "orders", AckMode::Flushed, 100);
    for n in 0..5_000u64 {
        p.send_to((n % 2) as u32, None, format!("order {n:06}").as_bytes())
            .unwrap();
    }
    // One message larger than the mirror's reads (1 MiB): read again with
    // room for it, not taken for the log's end.
    p.send_to(0, None, &vec![b'x'; 2 * 1024 * 1024]).unwrap();
    p.flush().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let metrics = format!("127.0.0.1:{port}");
    let mut mirror = mirror_process(&source, &target, &["--metrics", &metrics]);
    let status = || {
        let output = std::process::Command::new(harness::binary("ringlog"))
            .args(["mirror", "status", "--metrics", &metrics])
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout).to_string()
    };
    // Caught up: both partitions at lag 0, every message counted.
    let table = harness::eventually(
        "the mirror caught up",
        std::time::Duration::from_secs(30),
        || {
            let table = status();
            let rows: Vec<Vec<&str>> = table
                .lines()
                .skip(1)
                .map(|l| l.split('\t').collect())
                .collect();
            let copied: u64 = rows
                .iter()
                .filter_map(|r| r.get(5)?.parse::<u64>().ok())
                .sum();
            if rows.len() == 2 && rows.iter().all(|r| r[2] == "0") && copied == 5_001 {
                Ok(table)
            } else {
                Err(table)
            }
        },
    );
    mirror.kill().unwrap();
    mirror.wait().unwrap();
    assert!(
        table.starts_with("topic\tpartition\tlag_bytes\tlag_seconds"),
        "{table}"
    );
    eprintln!("ringlog mirror status:\n{table}");
}

/// A target whose brokers take only small requests (`max_request_bytes`
/// 64 KiB, below the mirror's 1 MiB reads) gets appends cut to fit, and
/// the copy is still the source's byte for byte.
#[test]
fn r21_a_target_that_takes_only_small_requests_gets_appends_cut_to_fit() {
    let source = Broker::start(small_segments());
    let target = Broker::start(BrokerOptions {
        config_toml:
            "segment_bytes_min = 1024\nmax_request_bytes = 65536\nmessage_bytes_max = 50000\n"
                .into(),
        ..BrokerOptions::default()
    });
    let src = source.client();
    src.create_topic("orders", 1, &settings()).unwrap();
    let mut p = producer(&src, "orders", AckMode::Flushed, 20);
    for n in 0..600u64 {
        let size = 10 + (n * 7919) % 40_000;
        p.send(None, &vec![b'a' + (n % 26) as u8; size as usize])
            .unwrap();
    }
    p.flush().unwrap();
    let output = std::process::Command::new(harness::binary("ringlog"))
        .args(["--brokers", &target.address(), "mirror"])
        .args(["--from", &source.address(), "--topics", "orders"])
        .arg("--exit-at-end")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("the target refused a") && stderr.contains("appending at most"),
        "{stderr}"
    );
    assert!(
        segments(&source.data_dir().join("orders-0"))
            == segments(&target.data_dir().join("orders-0")),
        "the copy's segment files differ from the source's"
    );
    let (_, offsets) = target
        .client()
        .list_offsets("orders", 0, OffsetSpec::Latest, 0)
        .unwrap();
    eprintln!(
        "600 messages of up to 40 KB into a target of 64 KiB requests: copy ends at {}, segment files identical; the mirror said: {}",
        offsets.end_offset,
        stderr.lines().find(|l| l.contains("appending at most")).unwrap_or_default()
    );
}

/// Issue 21, item 3: two mirrors of one name share the partitions through
/// a group of the target cluster; when one is SIGKILLed, the other takes
/// its share once the session ends, and the copies stay the source's.
#[test]
fn r21_two_mirrors_of_one_name_share_the_partitions_and_one_takes_over() {
    let etcd = harness::etcd::Etcd::start();
    let source = Broker::start(small_segments());
    let target = clustered(&etcd, "dc2", 1);
    let src = source.client();
    src.create_topic("orders", 4, &settings()).unwrap();
    let produce = |from: u64, to: u64| {
        let mut p = producer(&src, "orders", AckMode::Flushed, 100);
        for n in from..to {
            p.send_to((n % 4) as u32, None, format!("order {n:06}").as_bytes())
                .unwrap();
        }
        p.flush().unwrap();
    };
    produce(0, 8);
    let free_port = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let (ma, mb) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let mut a = mirror_process(&source, &target, &["--metrics", &ma]);
    let mut b = mirror_process(&source, &target, &["--metrics", &mb]);
    harness::eventually(
        "both mirrors in their group",
        std::time::Duration::from_secs(30),
        || {
            let members = target
                .client()
                .describe_group("mirror.dc1")
                .map_err(|e| e.to_string())?
                .view
                .members
                .len();
            if members == 2 {
                Ok(())
            } else {
                Err(format!("{members} members"))
            }
        },
    );
    // Both hold a share before the load comes.
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    produce(8, 8_000);
    let copied = |metrics: &str| -> Option<u64> {
        let output = std::process::Command::new(harness::binary("ringlog"))
            .args(["mirror", "status", "--metrics", metrics])
            .output()
            .ok()?;
        let table = String::from_utf8_lossy(&output.stdout).to_string();
        Some(
            table
                .lines()
                .skip(1)
                .filter_map(|l| l.split('\t').nth(5)?.parse::<u64>().ok())
                .sum(),
        )
    };
    let ends_equal = || {
        let dst = target.client();
        (0..4).all(|p| {
            let end = |c: &Client| {
                c.list_offsets("orders", p, OffsetSpec::Latest, 0)
                    .map(|o| o.0)
                    .ok()
            };
            end(&src).is_some() && end(&src) == end(&dst)
        })
    };
    let (by_a, by_b) = harness::eventually(
        "both mirrors copied, and all of it",
        std::time::Duration::from_secs(30),
        || match (copied(&ma), copied(&mb)) {
            (Some(x), Some(y)) if x > 0 && y > 0 && x + y == 8_000 && ends_equal() => Ok((x, y)),
            other => Err(format!("{other:?}")),
        },
    );
    a.kill().unwrap(); // SIGKILL: its session ends when etcd's lease does
    a.wait().unwrap();
    produce(8_000, 16_000);
    harness::eventually(
        "the survivor copied everything",
        std::time::Duration::from_secs(60),
        || {
            if ends_equal() {
                Ok(())
            } else {
                Err(format!("{:?}", copied(&mb)))
            }
        },
    );
    b.kill().unwrap();
    b.wait().unwrap();
    for partition in 0..4 {
        let name = format!("orders-{partition}");
        assert!(
            segments(&source.data_dir().join(&name)) == segments(&target.data_dir().join(&name)),
            "{name}: the copy differs"
        );
    }
    eprintln!("two mirrors of one name: {by_a} and {by_b} of 8000 messages each; after one's SIGKILL the other copied the next 8000; copies identical");
}

/// Issue 45, item 1, the broker's side with raw requests: a mirror append
/// naming another source than the copy records is MIRRORED_PARTITION and
/// stores nothing, while the recorded source's (or none, from a mirror
/// older than source records) is taken; a CreateTopic's source record is
/// bounded (1,024 bytes, printable) and a refused one creates nothing.
#[test]
fn r45_a_copy_takes_an_append_only_from_the_source_it_records() {
    let source = Broker::start(small_segments());
    let target = Broker::start(small_segments());
    let src = source.client();
    src.create_topic("clicks", 1, &settings()).unwrap();
    let mut p = producer(&src, "clicks", AckMode::Flushed, 10);
    for n in 0..100u64 {
        p.send_to(0, None, format!("click {n}").as_bytes()).unwrap();
    }
    p.flush().unwrap();
    let dst = target.client();
    let record = "dc1/clicks (cluster 0a0a, topic id 0b0b)";
    dst.create_mirror_topic("clicks", 1, &settings(), record)
        .unwrap();
    let (bytes, base, _) = fetch(&mut shard_conn(&source, "clicks", 0), "clicks", 0, 0);
    let append = |conn: &mut Connection, claimed: &str| {
        let at = MirrorAppend {
            offset: 0,
            segment_base: base,
        };
        let header =
            codec::mirror_append_request(&mut conn.fbb, "clicks", 0, AckMode::Flushed, at, claimed)
                .to_vec();
        conn.call(Api::Produce, &header, &bytes).map(|_| ())
    };
    let mut write = shard_conn(&target, "clicks", 0);
    let other = append(&mut write, "dc2/clicks (cluster 0c0c, topic id 0d0d)").unwrap_err();
    assert_eq!(other.code(), Some(ErrorCode::MirroredPartition), "{other}");
    assert!(
        other.to_string().contains(record) && other.to_string().contains("dc2/clicks"),
        "{other}"
    );
    let end = |c: &Client| {
        c.list_offsets("clicks", 0, OffsetSpec::Latest, 0)
            .unwrap()
            .1
            .end_offset
    };
    assert_eq!(end(&dst), 0, "nothing stored");
    append(&mut write, record).unwrap();
    assert_eq!(end(&dst), end(&src));

    let long = "x".repeat(1_025);
    for bad in [long.as_str(), "dc1/clicks\n(cluster 0a0a)"] {
        let refused = dst
            .create_mirror_topic("other", 1, &settings(), bad)
            .unwrap_err();
        assert_eq!(refused.code(), Some(ErrorCode::InvalidConfig), "{refused}");
    }
    let err = dst.metadata(&["other"]).unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::UnknownTopic), "{err}");
    dst.create_mirror_topic("other", 1, &settings(), &"y".repeat(1_024))
        .unwrap();
    eprintln!("an append from another source: {other}");
}
