//! Message format 2 with real brokers (issue 43): a topic created to store
//! Kafka's record batches v2 takes a producer's batches, stamps each with
//! its byte position and leader epoch, refuses what is not a valid batch
//! (storing nothing of it), serves the stamped batches back, keeps them
//! across a kill -9, and its three copies are byte-identical.

use super::replication::{cluster, metadata, replicated, wait_identical, WAIT};
use harness::etcd::Etcd;
use harness::{eventually, Broker, BrokerOptions};
use protocol::batch::write::{BatchWriter, Producer};
use protocol::batch::{BatchHeader, HEADER_BYTES};
use protocol::client::{AckMode, Client, Connection, OffsetSpec, TopicSettings};
use protocol::codec::{self, FetchArgs};
use protocol::frame::Api;
use protocol::message::encode_message;
use protocol::stored::{unit, MessageFormat, Unit};
use protocol::ErrorCode;
use std::path::Path;
use std::time::Duration;

fn format_two(settings: TopicSettings) -> TopicSettings {
    TopicSettings {
        message_format: 2,
        ..settings
    }
}

/// A producer's batch of `count` records, the n-th valued `{first + n}`.
fn batch(first: u64, count: u64) -> Vec<u8> {
    let mut writer = BatchWriter::new();
    for n in first..first + count {
        let header_value = n.to_string();
        writer.push(
            1_700_000_000_000 + n as i64,
            Some(format!("k{n}").as_bytes()),
            Some(format!("value {n}").as_bytes()),
            &[("n", Some(header_value.as_bytes()))],
        );
    }
    writer.finish(Producer::NONE)
}

fn produce(
    conn: &mut Connection,
    topic: &str,
    bytes: &[u8],
) -> Result<(), protocol::client::ClientError> {
    let header = codec::produce_request(&mut conn.fbb, topic, 0, AckMode::Flushed).to_vec();
    conn.call(Api::Produce, &header, bytes).map(|_| ())
}

/// A fetch at `offset`: the offset the answer starts at, and its bytes.
fn fetch_at(address: &str, topic: &str, offset: u64, max_bytes: u32) -> (u64, Vec<u8>) {
    let mut conn = Connection::connect(address).unwrap();
    let header = codec::fetch_request(
        &mut conn.fbb,
        topic,
        0,
        FetchArgs {
            offset,
            max_bytes,
            max_wait_ms: 0,
        },
    )
    .to_vec();
    let answer = conn.call(Api::Fetch, &header, &[]).unwrap();
    let decoded = codec::verify::<protocol::wire::FetchResponse>(&answer.header).unwrap();
    (decoded.offset(), answer.payload)
}

fn end_offset(client: &Client, topic: &str) -> u64 {
    client
        .list_offsets(topic, 0, OffsetSpec::Latest, 0)
        .unwrap()
        .1
        .end_offset
}

/// A stored batch: its position, header and records' values.
type Fetched = (u64, BatchHeader, Vec<String>);

/// Every batch of the partition from 0, fetched raw: each checked as
/// stored bytes at its position, with its records' values.
fn fetch_batches(address: &str, topic: &str, end: u64) -> (Vec<u8>, Vec<Fetched>) {
    let mut conn = Connection::connect(address).unwrap();
    let mut bytes = Vec::new();
    while (bytes.len() as u64) < end {
        let header = codec::fetch_request(
            &mut conn.fbb,
            topic,
            0,
            FetchArgs {
                offset: bytes.len() as u64,
                max_bytes: 1 << 20,
                // A mirror's copy is flushed a moment after it is written.
                max_wait_ms: 5_000,
            },
        )
        .to_vec();
        let answer = conn.call(Api::Fetch, &header, &[]).unwrap();
        assert!(
            !answer.payload.is_empty(),
            "nothing fetched at {}",
            bytes.len()
        );
        bytes.extend_from_slice(&answer.payload);
    }
    let mut batches = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let Unit::Whole { len, .. } = unit(MessageFormat::Two, &bytes[at..], at as u64) else {
            panic!(
                "not a whole stored batch at {at}: {:?}",
                unit(MessageFormat::Two, &bytes[at..], at as u64)
            );
        };
        let mut scratch = Vec::new();
        let (header, records) =
            protocol::batch::read::decode(&bytes[at..at + len], 1 << 24, &mut scratch).unwrap();
        let values = protocol::batch::read::records(&header, records)
            .map(|r| String::from_utf8(r.unwrap().record.value.unwrap().to_vec()).unwrap())
            .collect();
        batches.push((at as u64, header, values));
        at += len;
    }
    (bytes, batches)
}

#[test]
fn a_format_two_topic_stamps_batches_at_their_positions_refuses_bad_ones_and_keeps_them_across_a_kill_9(
) {
    let mut broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    let created = client
        .create_topic("b", 1, &format_two(TopicSettings::default()))
        .unwrap();
    assert_eq!(created.settings.message_format, 2);
    let plain = client
        .create_topic("m", 1, &TopicSettings::default())
        .unwrap();
    assert_eq!(plain.settings.message_format, 1, "the default is format 1");

    let mut conn = Connection::connect(&broker.address()).unwrap();
    let sent = [batch(0, 3), batch(3, 1), batch(4, 50)];
    for b in &sent {
        produce(&mut conn, "b", b).unwrap();
    }
    let total: u64 = sent.iter().map(|b| b.len() as u64).sum();
    assert_eq!(
        end_offset(&client, "b"),
        total,
        "offsets are byte positions"
    );

    // Refused, each with its reason, and nothing of it stored.
    let mut message_set = Vec::new();
    encode_message(&mut message_set, None, b"a format-1 message");
    let mut bad_crc = batch(100, 2);
    *bad_crc.last_mut().unwrap() ^= 1;
    let mut stored_again = fetch_batches(&broker.address(), "b", total).0;
    stored_again.truncate(sent[0].len());
    let mut two_then_cut = batch(200, 2);
    two_then_cut.extend_from_slice(&batch(202, 2)[..70]);
    for (what, bytes, words) in [
        ("format-1 messages", message_set, "batch"),
        ("a flipped byte", bad_crc, "CRC-32C"),
        ("a stored batch sent back", stored_again, "lastOffsetDelta"),
        (
            "a whole batch and a cut one",
            two_then_cut,
            "bytes where a batch needs",
        ),
    ] {
        let error = produce(&mut conn, "b", &bytes).unwrap_err();
        assert_eq!(
            error.code(),
            Some(ErrorCode::CorruptMessage),
            "{what}: {error}"
        );
        assert!(error.to_string().contains(words), "{what}: {error}");
        assert_eq!(end_offset(&client, "b"), total, "{what}: nothing stored");
    }
    // Batches to a format-1 topic are refused the same way.
    let error = produce(&mut conn, "m", &batch(0, 1)).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::CorruptMessage), "{error}");

    let (bytes, batches) = fetch_batches(&broker.address(), "b", total);
    let positions: Vec<u64> = batches.iter().map(|(at, _, _)| *at).collect();
    assert_eq!(
        positions,
        vec![
            0,
            sent[0].len() as u64,
            (sent[0].len() + sent[1].len()) as u64
        ]
    );
    for ((at, header, values), produced) in batches.iter().zip(&sent) {
        assert_eq!(header.base_offset, *at as i64, "baseOffset is the position");
        assert_eq!(header.last_offset(), *at as i64 + produced.len() as i64 - 1);
        assert_eq!(header.leader_epoch, 0, "one copy: epoch 0");
        assert_eq!(
            &bytes[*at as usize + HEADER_BYTES..*at as usize + produced.len()],
            &produced[HEADER_BYTES..],
            "records verbatim"
        );
        let _ = values;
    }
    let values: Vec<String> = batches.iter().flat_map(|(_, _, v)| v.clone()).collect();
    assert_eq!(
        values,
        (0..54).map(|n| format!("value {n}")).collect::<Vec<_>>()
    );

    // A fetch at any offset inside a batch is served from that batch's
    // start (a commit after part of a batch, a seek).
    let inner = |address: &str| {
        for (at, header, _) in &batches {
            for offset in [*at + 1, *at + 30, header.last_offset() as u64] {
                let (from, payload) = fetch_at(address, "b", offset, 1 << 20);
                assert_eq!(from, *at, "a fetch at {offset}");
                assert_eq!(payload, bytes[*at as usize..], "a fetch at {offset}");
            }
        }
    };
    inner(&broker.address());

    broker.kill9();
    broker.restart();
    let client = broker.client();
    assert_eq!(
        end_offset(&client, "b"),
        total,
        "recovery keeps every batch"
    );
    // After a restart the index is found again by hopping the headers.
    inner(&broker.address());
    assert_eq!(
        fetch_batches(&broker.address(), "b", total).0,
        bytes,
        "the same bytes"
    );
    let mut conn = Connection::connect(&broker.address()).unwrap();
    produce(&mut conn, "b", &batch(54, 2)).unwrap();
    let (_, after) = fetch_batches(&broker.address(), "b", total + batch(54, 2).len() as u64);
    assert_eq!(
        after.last().unwrap().0,
        total,
        "the next batch goes at the end"
    );
}

#[test]
fn three_copies_of_a_format_two_topic_are_byte_identical_and_carry_their_leaders_epoch() {
    let etcd = Etcd::start();
    let mut brokers = cluster(&etcd, "f2", 3);
    let client = brokers[0].client();
    client
        .create_topic("b", 1, &format_two(replicated(3, 2)))
        .unwrap();
    let leader_of = |client: &Client| {
        let m = metadata(client, "b");
        let p = &m.topics[0].partitions[0];
        (
            p.broker_id,
            p.leader_epoch,
            client.owner_address(&m, "b", 0),
        )
    };
    let (leader, epoch, address) = leader_of(&client);
    let mut conn = Connection::connect(&address).unwrap();
    for n in 0..20 {
        let header = codec::produce_request(&mut conn.fbb, "b", 0, AckMode::All).to_vec();
        conn.call(Api::Produce, &header, &batch(n * 5, 5)).unwrap();
    }
    let all: Vec<&Broker> = brokers.iter().collect();
    wait_identical(&all, "b", 0);
    let end = end_offset(&client, "b");
    let (_, batches) = fetch_batches(&address, "b", end);
    assert_eq!(batches.len(), 20);
    assert!(
        batches.iter().all(|(_, h, _)| h.leader_epoch == epoch),
        "{epoch}"
    );

    // The leader killed: the new one stamps its own epoch; every copy
    // keeps the old batches as they were.
    let victim = brokers
        .iter()
        .position(|b| b.options().broker_id == leader)
        .unwrap();
    brokers[victim].kill9();
    let survivor = (victim + 1) % 3;
    let client = brokers[survivor].client();
    let (_, new_epoch, address) = eventually("a new leader", WAIT, || {
        let (l, e, a) = leader_of(&client);
        if l != leader && e > epoch {
            Ok((l, e, a))
        } else {
            Err(format!("leader {l} epoch {e}"))
        }
    });
    let mut conn = Connection::connect(&address).unwrap();
    eventually("an acks=all produce after the failover", WAIT, || {
        let header = codec::produce_request(&mut conn.fbb, "b", 0, AckMode::All).to_vec();
        conn.call(Api::Produce, &header, &batch(100, 3))
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    brokers[victim].restart();
    let all: Vec<&Broker> = brokers.iter().collect();
    wait_identical(&all, "b", 0);
    let end = end_offset(&client, "b");
    let (_, batches) = fetch_batches(&address, "b", end);
    let last = batches.last().unwrap();
    assert_eq!(last.1.leader_epoch, new_epoch, "the new leader's epoch");
    assert!(batches[..20]
        .iter()
        .all(|(_, h, _)| h.leader_epoch == epoch));
}

#[test]
fn a_mirror_copies_a_format_two_topic_at_its_offsets_with_the_targets_epoch() {
    let source = Broker::start(BrokerOptions::default());
    let target = Broker::start(BrokerOptions::default());
    let src = source.client();
    src.create_topic("b2", 1, &format_two(TopicSettings::default()))
        .unwrap();
    let mut conn = Connection::connect(&source.address()).unwrap();
    for n in 0..40 {
        produce(&mut conn, "b2", &batch(n * 10, 10)).unwrap();
    }
    let end = end_offset(&src, "b2");
    let output = std::process::Command::new(harness::binary("ringlog"))
        .args(["--brokers", &target.address(), "mirror"])
        .args([
            "--from",
            &source.address(),
            "--topics",
            "b2",
            "--exit-at-end",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let copy = target.client();
    let copied = copy.metadata(&["b2"]).unwrap();
    assert_eq!(
        copied.topics[0].settings.message_format, 2,
        "the copy is format 2 too"
    );
    assert_eq!(
        end_offset(&copy, "b2"),
        end,
        "the copy ends where the source does"
    );
    let (ours, batches) = fetch_batches(&target.address(), "b2", end);
    let (theirs, _) = fetch_batches(&source.address(), "b2", end);
    assert_eq!(batches.len(), 40, "every batch, at the source's offsets");
    // Identical but for each batch's leader epoch (outside the CRC), which
    // is the target's own: both are 0 here, so the bytes are the same.
    assert_eq!(ours, theirs);
    let values: Vec<String> = batches.iter().flat_map(|(_, _, v)| v.clone()).collect();
    assert_eq!(values.len(), 400);
}

/// Offsets by time on real brokers: 100 batches of 20 records in all five
/// codecs (one batch with a producer's clock far behind), each lookup the
/// exact first record of that time or later — through the client and
/// `ringlog offsets --before` — and the same after a kill -9 (the time
/// index found again from the files). LogAppendTime stamps the broker's
/// time; asked of a format-1 topic it is refused by name.
#[test]
fn offsets_by_time_are_exact_records_in_every_codec_and_log_append_time_is_the_brokers() {
    use protocol::batch::Compression;
    let mut broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    client
        .create_topic("t", 1, &format_two(TopicSettings::default()))
        .unwrap();
    let codecs = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];
    let t0 = 1_700_000_000_000i64;
    let mut conn = Connection::connect(&broker.address()).unwrap();
    // Every record's offset and time, in log order.
    let mut records: Vec<(u64, i64)> = Vec::new();
    let mut position = 0u64;
    for b in 0..100i64 {
        let mut writer = BatchWriter::new();
        let times: Vec<i64> = (0..20)
            .map(|r| {
                if b == 50 {
                    t0 - 86_400_000
                } else {
                    t0 + 1_000 * b + 7 * r
                }
            })
            .collect();
        for (r, &time) in times.iter().enumerate() {
            let value = format!("{{\"batch\":{b},\"record\":{r},\"path\":\"/api/v1/items\"}}");
            writer.push(time, None, Some(value.as_bytes()), &[]);
        }
        let bytes = writer
            .finish_compressed(Producer::NONE, codecs[b as usize % codecs.len()])
            .unwrap();
        produce(&mut conn, "t", &bytes).unwrap();
        records.extend(
            times
                .iter()
                .enumerate()
                .map(|(r, &t)| (position + r as u64, t)),
        );
        position += bytes.len() as u64;
    }
    let end = end_offset(&client, "t");
    assert_eq!(end, position);
    let expected = |time: i64| {
        records
            .iter()
            .find(|&&(_, t)| t >= time)
            .map_or(end, |&(offset, _)| offset)
    };
    let times: Vec<i64> = [
        t0 - 86_400_000,
        t0,
        t0 + 1,
        t0 + 50_000,
        t0 + 99_133,
        t0 + 99_134,
    ]
    .into_iter()
    .chain((0..100).map(|b| t0 + 1_000 * b + 30))
    .collect();
    let check = |address: &str, round: &str| {
        let client = Client::connect(address).unwrap();
        for &time in &times {
            let (found, _) = client
                .list_offsets("t", 0, OffsetSpec::BeforeTime, time as u64)
                .unwrap();
            assert_eq!(found, expected(time), "{round}: time {time}");
        }
        for time in [t0 + 3, t0 + 64_070] {
            let (code, out, err) = super::replica_operations::ringlog(
                address,
                &["offsets", "t", "--before", &time.to_string()],
            );
            assert_eq!(code, 0, "{err}");
            assert_eq!(
                out.trim(),
                expected(time).to_string(),
                "{round}: the CLI at {time}"
            );
        }
    };
    check(&broker.address(), "appended");
    broker.kill9();
    broker.restart();
    check(&broker.address(), "after a kill -9");

    // LogAppendTime: the broker's clock, whatever the producer wrote.
    let client = broker.client();
    let settings = TopicSettings {
        timestamp_type: 2,
        ..format_two(TopicSettings::default())
    };
    let created = client.create_topic("a", 1, &settings).unwrap();
    assert_eq!(created.settings.timestamp_type, 2);
    let wall = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    let mut conn = Connection::connect(&broker.address()).unwrap();
    let before = wall();
    produce(&mut conn, "a", &batch(0, 5)).unwrap();
    let after = wall();
    let end = end_offset(&client, "a");
    let (_, batches) = fetch_batches(&broker.address(), "a", end);
    let header = batches[0].1;
    assert_ne!(header.attributes & protocol::batch::ATTR_LOG_APPEND_TIME, 0);
    assert!(
        (before..=after).contains(&header.max_timestamp),
        "stamped {} outside {before}..={after}",
        header.max_timestamp
    );
    let found = |time: i64| {
        client
            .list_offsets("a", 0, OffsetSpec::BeforeTime, time as u64)
            .unwrap()
            .0
    };
    // The producer wrote 2023's times; the records are now's.
    assert_eq!(found(t0 + 10), 0);
    assert_eq!(found(header.max_timestamp), 0);
    assert_eq!(found(header.max_timestamp + 1), end);
    let (code, out, _) =
        super::replica_operations::ringlog(&broker.address(), &["topic", "describe", "a"]);
    assert_eq!(code, 0);
    assert!(out.contains("timestamp_type LogAppendTime"), "{out}");

    // Format 1 carries no time: LogAppendTime is refused, by name.
    let refused = client
        .create_topic(
            "m",
            1,
            &TopicSettings {
                timestamp_type: 2,
                message_format: 1,
                ..TopicSettings::default()
            },
        )
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("LogAppendTime needs message format 2"),
        "{refused}"
    );
}

/// What a format-2 message carried when it was read back.
type Read2 = (
    u64,
    Option<Vec<u8>>,
    Vec<u8>,
    Option<i64>,
    Vec<(String, Option<Vec<u8>>)>,
);

/// The Rust client on a format-2 topic, in every codec: the producer's
/// messages (keys, values, times, headers) come back exactly from the
/// plain, the prefetching (cut chunks) and the topic consumers, each batch
/// stored with the codec asked for; a consumer placed inside a compressed
/// batch starts at that record; the CLI produces and prints the same.
#[test]
fn the_rust_client_and_the_cli_produce_and_consume_format_two_in_every_codec() {
    use protocol::batch::Compression;
    use protocol::client::{
        Consumer, Extras, PrefetchConsumer, Producer, ProducerConfig, Start, TopicConsumer,
        TopicConsumerConfig,
    };
    let broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    let t0 = 1_700_000_000_000i64;
    for codec in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let topic = format!("c-{codec:?}").to_lowercase();
        client
            .create_topic(&topic, 1, &format_two(TopicSettings::default()))
            .unwrap();
        let mut producer = Producer::new(
            &client,
            &topic,
            ProducerConfig {
                acks: AckMode::Flushed,
                batch_messages: 200,
                compression: codec,
                ..ProducerConfig::default()
            },
        )
        .unwrap();
        let mut sent = Vec::new();
        for n in 0..1_000u64 {
            let key = format!("k{n}").into_bytes();
            let value =
                format!("{{\"n\":{n},\"level\":\"info\",\"msg\":\"request served\"}}").into_bytes();
            let number = n.to_string();
            let headers = [("n", Some(number.as_bytes())), ("empty", None)];
            let extras = Extras {
                timestamp_ms: Some(t0 + n as i64),
                headers: &headers,
            };
            producer
                .send_to_with(0, Some(&key), &value, extras)
                .unwrap();
            let headers = vec![
                ("n".to_string(), Some(number.into_bytes())),
                ("empty".to_string(), None),
            ];
            sent.push((Some(key), value, Some(t0 + n as i64), headers));
        }
        producer.flush().unwrap();
        let end = end_offset(&client, &topic);

        // Stored with the codec asked for.
        let (_, batches) = fetch_batches(&broker.address(), &topic, end);
        // 200 a batch, or more: the idempotent producer's batch grows
        // while its earlier ones are out.
        let counts: Vec<i32> = batches.iter().map(|(_, h, _)| h.record_count).collect();
        assert!(batches.len() <= 5, "{codec:?}: {counts:?}");
        assert_eq!(counts.iter().sum::<i32>(), 1_000, "{codec:?}: {counts:?}");
        for (_, header, _) in &batches {
            assert_eq!(header.compression(), Some(codec), "{codec:?}");
        }

        let strip = |read: &[Read2]| -> Vec<_> {
            read.iter()
                .map(|(_, k, v, t, h)| (k.clone(), v.clone(), *t, h.clone()))
                .collect()
        };
        // A plain consumer.
        let mut consumer = Consumer::new(&client, &topic, 0, 0).unwrap();
        let mut read: Vec<Read2> = Vec::new();
        while consumer.position() < end {
            for m in consumer.poll().unwrap() {
                read.push((m.offset, m.key, m.value, m.timestamp, m.headers));
            }
        }
        assert_eq!(strip(&read), sent, "{codec:?}: the plain consumer");
        let offsets: Vec<u64> = read.iter().map(|r| r.0).collect();
        assert!(offsets.windows(2).all(|w| w[0] < w[1]));

        // Placed inside a batch: from that record on.
        let inside = offsets[333];
        let mut consumer = Consumer::new(&client, &topic, 0, inside).unwrap();
        let first = consumer.poll().unwrap();
        assert_eq!(first[0].offset, inside, "{codec:?}");
        assert_eq!(first[0].value, sent[333].1, "{codec:?}");
        // Skipping damage reads the paper's messages: refused here, in words.
        let mut consumer = Consumer::new(&client, &topic, 0, inside).unwrap();
        let refused = consumer.skip_damaged().unwrap_err();
        assert!(
            refused.to_string().contains("message format 2"),
            "{refused}"
        );
        assert_eq!(consumer.position(), inside);

        // The prefetching consumer, with chunks too small for a batch.
        let mut small = Consumer::new(&client, &topic, 0, 0).unwrap();
        small.set_max_bytes(1_000);
        let mut prefetch = PrefetchConsumer::new(small, 2);
        let mut fetched = Vec::new();
        while fetched.len() < sent.len() {
            prefetch
                .poll_with(Duration::from_secs(5), |m| {
                    fetched.push((m.offset, m.value.to_vec()))
                })
                .unwrap();
        }
        assert_eq!(
            fetched,
            read.iter().map(|r| (r.0, r.2.clone())).collect::<Vec<_>>(),
            "{codec:?}: the prefetching consumer"
        );

        // The topic consumer.
        let mut topic_consumer = TopicConsumer::new(
            &client,
            &topic,
            Start::Earliest,
            TopicConsumerConfig::default(),
        )
        .unwrap();
        let mut all: Vec<Read2> = Vec::new();
        while all.len() < sent.len() {
            for m in topic_consumer.poll(Duration::from_secs(5)).unwrap() {
                all.push((m.offset, m.key, m.value, m.timestamp, m.headers));
            }
        }
        assert_eq!(strip(&all), sent, "{codec:?}: the topic consumer");
    }

    // The CLI: produce with a codec and headers, print them back.
    let run = |args: &[&str], input: &str| {
        let mut child = std::process::Command::new(harness::binary("ringlog"))
            .arg("--brokers")
            .arg(broker.address())
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    run(&["topic", "create", "cli", "--message-format", "2"], "");
    let lines: String = (0..300)
        .map(|n| format!("k{n}:line {n} of the log\n"))
        .collect();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    run(
        &[
            "produce",
            "cli",
            "--key-separator",
            ":",
            "--compression",
            "zstd",
            "--header",
            "source=test",
            "--header",
            "flag",
        ],
        &lines,
    );
    let printed = run(
        &[
            "consume",
            "cli",
            "--exit-at-end",
            "--print-timestamps",
            "--print-headers",
            "--print-keys",
            ":",
        ],
        "",
    );
    let printed: Vec<&str> = printed.lines().collect();
    assert_eq!(printed.len(), 300);
    for (n, line) in printed.iter().enumerate() {
        let fields: Vec<&str> = line.split('\t').collect();
        let time: i64 = fields[0].parse().unwrap();
        // The producer stamps with the coarse clock (a tick, ~4 ms,
        // behind the precise one `before` was read from).
        assert!(time >= before - 20, "{line}");
        assert_eq!(fields[1], "source=test,flag", "{line}");
        assert_eq!(fields[2], format!("k{n}:line {n} of the log"));
    }
    let end = end_offset(&client, "cli");
    let (_, batches) = fetch_batches(&broker.address(), "cli", end);
    assert!(
        batches
            .iter()
            .any(|(_, h, _)| h.compression() == Some(Compression::Zstd)),
        "the CLI's batches are zstd"
    );
}

/// Where `deploy/test-deps.sh` installs Kafka's jars.
const KAFKA_LIBS: &str = "/tmp/ringlog-peers/kafka-4.4.0/libs";

/// Kafka 4.4's own record classes (`MemoryRecords`, `ensureValid`) read
/// the bytes a ringlog broker stored — batches of every codec written by
/// the Rust client, under CreateTime and LogAppendTime — with the offsets,
/// times, keys, values and headers ringlog's consumer reads.
#[test]
fn kafkas_own_classes_read_what_ringlog_stored_in_every_codec() {
    use protocol::batch::Compression;
    use protocol::client::{Consumer, Extras, Producer, ProducerConfig};
    assert!(
        std::path::Path::new(KAFKA_LIBS)
            .join("kafka-clients-4.4.0.jar")
            .exists(),
        "Kafka 4.4's jars are not in {KAFKA_LIBS}: run `bash deploy/test-deps.sh` (the README's test command does)"
    );
    let broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    let dir = harness::TempDir::new("kafka-reads");
    for (topic, timestamp_type) in [("create", 1), ("append", 2)] {
        let settings = TopicSettings {
            timestamp_type,
            ..format_two(TopicSettings::default())
        };
        client.create_topic(topic, 1, &settings).unwrap();
        for (c, codec) in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ]
        .into_iter()
        .enumerate()
        {
            let mut producer = Producer::new(
                &client,
                topic,
                ProducerConfig {
                    acks: AckMode::Flushed,
                    batch_messages: 100,
                    compression: codec,
                    ..ProducerConfig::default()
                },
            )
            .unwrap();
            for n in 0..100 {
                let value = format!("{{\"codec\":{c},\"n\":{n},\"msg\":\"served in 3 ms\"}}");
                let headers = [("codec", Some(format!("{codec:?}").into_bytes()))];
                let headers: Vec<(&str, Option<&[u8]>)> =
                    headers.iter().map(|(k, v)| (*k, v.as_deref())).collect();
                let extras = Extras {
                    timestamp_ms: Some(1_700_000_000_000 + n),
                    headers: &headers,
                };
                let key = format!("k{c}-{n}");
                producer
                    .send_to_with(0, Some(key.as_bytes()), value.as_bytes(), extras)
                    .unwrap();
            }
            producer.flush().unwrap();
        }
        let end = end_offset(&client, topic);
        let (bytes, _) = fetch_batches(&broker.address(), topic, end);
        let file = dir.path().join(format!("{topic}.bin"));
        std::fs::write(&file, &bytes).unwrap();
        let java = std::process::Command::new("java")
            .arg("-cp")
            .arg(format!("{KAFKA_LIBS}/*"))
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("kafka/ReadBatches.java"))
            .arg(&file)
            .output()
            .expect("java (installed by deploy/test-deps.sh)");
        assert!(
            java.status.success(),
            "Kafka's classes refused ringlog's bytes: {}",
            String::from_utf8_lossy(&java.stderr)
        );
        let printed = String::from_utf8(java.stdout).unwrap();
        let batches: Vec<&str> = printed
            .lines()
            .filter(|l| l.starts_with("batch "))
            .collect();
        let codecs: Vec<&str> = batches
            .iter()
            .map(|l| l.split(' ').nth(3).unwrap())
            .collect();
        assert_eq!(codecs, ["none", "gzip", "snappy", "lz4", "zstd"], "{topic}");
        let kind = if timestamp_type == 2 {
            "LogAppendTime"
        } else {
            "CreateTime"
        };
        assert!(
            batches.iter().all(|l| l.ends_with(kind)),
            "{topic}: {batches:?}"
        );

        // The records as Kafka reads them, and as ringlog's consumer does.
        let kafka: Vec<String> = printed
            .lines()
            .filter(|l| !l.starts_with("batch "))
            .map(str::to_string)
            .collect();
        let mut consumer = Consumer::new(&client, topic, 0, 0).unwrap();
        let mut ours = Vec::new();
        while consumer.position() < end {
            for m in consumer.poll().unwrap() {
                let headers: String = m
                    .headers
                    .iter()
                    .map(|(k, v)| {
                        format!("{k}={};", String::from_utf8_lossy(v.as_deref().unwrap()))
                    })
                    .collect();
                ours.push(format!(
                    "{} {} {} {} {headers}",
                    m.offset,
                    m.timestamp.unwrap(),
                    String::from_utf8_lossy(m.key.as_deref().unwrap()),
                    String::from_utf8_lossy(&m.value)
                ));
            }
        }
        assert_eq!(kafka.len(), 500, "{topic}");
        assert_eq!(kafka, ours, "{topic}: Kafka's reading and ringlog's");
        if timestamp_type == 1 {
            assert!(kafka[7].starts_with(&format!(
                "{} 1700000000007 k0-7 ",
                kafka[7].split(' ').next().unwrap()
            )));
        }
    }
}

/// A format-2 batch torn by a crash (its first half on disk, a recovery
/// point below it) is cut at its start on restart — the batches before it
/// kept, byte for byte, and the next produce lands where the torn one
/// began; a zstd batch so torn as well.
#[test]
fn a_torn_format_two_batch_is_cut_at_its_start_on_restart() {
    use protocol::batch::write::BatchWriter;
    use protocol::batch::Compression;
    let mut broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    client
        .create_topic("torn", 1, &format_two(TopicSettings::default()))
        .unwrap();
    let mut conn = Connection::connect(&broker.address()).unwrap();
    for first in [0, 10, 20] {
        produce(&mut conn, "torn", &batch(first, 10)).unwrap();
    }
    let end = end_offset(&client, "torn");
    let (kept, _) = fetch_batches(&broker.address(), "torn", end);
    drop(conn);
    drop(client);
    broker.kill9();
    let dir = broker.data_dir().join("torn-0");
    let segment = dir.join("00000000000000000000.log");
    for codec in [Compression::None, Compression::Zstd] {
        let mut writer = BatchWriter::new();
        for n in 0..200i64 {
            writer.push(n, None, Some(b"a value that compresses well enough"), &[]);
        }
        let mut torn = writer.finish_compressed(Producer::NONE, codec).unwrap();
        protocol::batch::produce::stamp(
            &mut torn,
            protocol::batch::produce::Stamp {
                position: end,
                leader_epoch: 0,
                log_append_time: None,
            },
        );
        let half = torn.len() / 2;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&segment)
            .unwrap();
        std::io::Write::write_all(&mut file, &torn[..half]).unwrap();
        drop(file);
        std::fs::write(dir.join("recovery-point"), "0").unwrap();
        broker.restart();
        let client = broker.client();
        assert_eq!(
            end_offset(&client, "torn"),
            end,
            "{codec:?}: cut at the torn batch's start"
        );
        assert_eq!(std::fs::metadata(&segment).unwrap().len(), end);
        let (bytes, batches) = fetch_batches(&broker.address(), "torn", end);
        assert_eq!(
            bytes, kept,
            "{codec:?}: the batches before it, byte for byte"
        );
        assert_eq!(batches.len(), 3);
        let log = broker.log();
        assert!(
            log.contains("truncating torn or corrupt tail"),
            "{codec:?}: {log}"
        );
        broker.kill9();
    }
    broker.restart();
    let client = broker.client();
    let mut conn = Connection::connect(&broker.address()).unwrap();
    produce(&mut conn, "torn", &batch(30, 5)).unwrap();
    let (_, batches) = fetch_batches(&broker.address(), "torn", end_offset(&client, "torn"));
    assert_eq!(
        batches.last().unwrap().0,
        end,
        "the next batch goes where the torn one began"
    );
}
