//! Produce and consume round trips: volume, byte-exactness, forwarding,
//! rewind, offsets.

use super::util::{create, producer, read_all};
use harness::{check_numbered_payload, numbered_payload, Broker, BrokerOptions};
use protocol::client::{AckMode, Client, Connection, Consumer, OffsetSpec};
use protocol::codec;
use protocol::frame::Api;
use protocol::message::MESSAGE_HEADER_BYTES;

#[test]
fn a_million_messages_over_four_partitions_on_two_shards_come_back_byte_exact() {
    let broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    create(&client, "volume", 4);
    let metadata = client.metadata(&["volume"]).unwrap();
    let shards: std::collections::BTreeSet<u16> = metadata.topics[0]
        .partitions
        .iter()
        .map(|p| p.shard_id)
        .collect();
    assert_eq!(shards.len(), 2, "4 partitions must spread over both shards");

    const TOTAL: u64 = 1_000_000;
    const SIZE: usize = 100;
    let mut producer = producer(&client, "volume", AckMode::Flushed, 500);
    for i in 0..TOTAL {
        producer
            .send_to((i % 4) as u32, None, &numbered_payload(i, SIZE))
            .unwrap();
    }
    producer.flush().unwrap();
    assert_eq!(producer.acked_messages(), TOTAL);

    let mut seen = vec![false; TOTAL as usize];
    let mut count = 0u64;
    for partition in 0..4u32 {
        let mut consumer = Consumer::new(&client, "volume", partition, 0).unwrap();
        consumer.set_max_wait_ms(0);
        let mut expected_offset = 0u64;
        let mut expected_index = u64::from(partition);
        loop {
            let n = consumer
                .poll_with(|m| {
                    assert_eq!(m.offset, expected_offset, "offsets are byte positions");
                    expected_offset += (MESSAGE_HEADER_BYTES + SIZE) as u64;
                    let index = check_numbered_payload(m.value, SIZE);
                    assert_eq!(index, expected_index, "order within partition {partition}");
                    expected_index += 4;
                    seen[index as usize] = true;
                    count += 1;
                })
                .unwrap();
            if n == 0 && consumer.at_end() {
                break;
            }
        }
    }
    assert_eq!(count, TOTAL);
    assert!(seen.iter().all(|&s| s), "every message came back");
    // On disk: 9 bytes of framing per message and nothing else.
    let mut disk = 0;
    for p in 0..4 {
        for entry in std::fs::read_dir(broker.data_dir().join(format!("volume-{p}"))).unwrap() {
            let entry = entry.unwrap();
            if entry.file_name().to_string_lossy().ends_with(".log") {
                disk += entry.metadata().unwrap().len();
            }
        }
    }
    assert_eq!(disk, TOTAL * (SIZE + MESSAGE_HEADER_BYTES) as u64);
}

#[test]
fn requests_sent_to_the_wrong_shard_are_forwarded() {
    let broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    create(&client, "fwd", 4);
    let metadata = client.metadata(&["fwd"]).unwrap();
    // Produce everything through shard 0's port, not shard-aware.
    let mut producer = protocol::client::Producer::new(
        &client,
        "fwd",
        protocol::client::ProducerConfig {
            acks: AckMode::Flushed,
            shard_aware: false,
            batch_messages: 10,
            ..Default::default()
        },
    )
    .unwrap();
    for i in 0..400u64 {
        producer
            .send_to((i % 4) as u32, None, &numbered_payload(i, 32))
            .unwrap();
    }
    producer.flush().unwrap();
    for p in metadata.topics[0].partitions.iter() {
        // Fetch through shard 0 even where shard 1 owns the partition.
        let conn = Connection::connect(&broker.shards[0]).unwrap();
        let mut consumer = Consumer::with_connection(conn, "fwd", p.partition, 0);
        consumer.set_max_wait_ms(0);
        let got = consumer.poll().unwrap();
        assert_eq!(
            got.len(),
            100,
            "partition {} (shard {})",
            p.partition,
            p.shard_id
        );
        for (k, m) in got.iter().enumerate() {
            assert_eq!(
                check_numbered_payload(&m.value, 32),
                u64::from(p.partition) + 4 * k as u64
            );
        }
    }
}

#[test]
fn a_consumer_can_rewind_and_read_again() {
    let broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    create(&client, "rewind", 1);
    let mut producer = producer(&client, "rewind", AckMode::Flushed, 7);
    for i in 0..100 {
        producer
            .send_to(
                0,
                Some(format!("k{i}").as_bytes()),
                &numbered_payload(i, 20),
            )
            .unwrap();
    }
    producer.flush().unwrap();
    let first = read_all(&client, "rewind", 0, 0);
    assert_eq!(first.len(), 100);
    assert_eq!(first[5].key.as_deref(), Some(&b"k5"[..]));
    // Rewind to the 50th message's offset: the same messages again.
    let again = read_all(&client, "rewind", 0, first[50].offset);
    assert_eq!(again, first[50..].to_vec());
    // Small fetches end mid-message; the consumer resumes correctly.
    let mut consumer = Consumer::new(&client, "rewind", 0, 0).unwrap();
    consumer.set_max_bytes(50);
    consumer.set_max_wait_ms(0);
    let mut small = Vec::new();
    while small.len() < 100 {
        small.extend(consumer.poll().unwrap());
    }
    assert_eq!(small, first);
    // A fetch size below one message is a clear error, not a loop.
    consumer.seek(0);
    consumer.set_max_bytes(10);
    let error = consumer.poll().unwrap_err();
    assert!(
        matches!(
            error,
            protocol::client::ClientError::MessageTooLarge { offset: 0, .. }
        ),
        "{error}"
    );
}

#[test]
fn list_offsets_reports_earliest_latest_and_before_a_time() {
    let broker = Broker::start(BrokerOptions::default());
    let client: Client = broker.client();
    create(&client, "offsets", 1);
    let before_any = now_ms();
    let mut producer = producer(&client, "offsets", AckMode::Flushed, 1);
    producer.send_to(0, None, b"x").unwrap();
    producer.flush().unwrap();
    let (earliest, _) = client
        .list_offsets("offsets", 0, OffsetSpec::Earliest, 0)
        .unwrap();
    let (latest, offsets) = client
        .list_offsets("offsets", 0, OffsetSpec::Latest, 0)
        .unwrap();
    assert_eq!(earliest, 0);
    assert_eq!(latest, 10);
    assert_eq!(offsets.flushed_offset, 10);
    let (since, _) = client
        .list_offsets("offsets", 0, OffsetSpec::BeforeTime, before_any)
        .unwrap();
    assert_eq!(
        since, 0,
        "the segment appended to after the time starts at 0"
    );
    let (future, _) = client
        .list_offsets("offsets", 0, OffsetSpec::BeforeTime, now_ms() + 3_600_000)
        .unwrap();
    assert_eq!(future, 10, "nothing appended after a future time: the end");
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
fn a_lone_message_leaves_after_linger_without_a_flush() {
    let broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    create(&client, "linger", 1);
    let mut producer = protocol::client::Producer::new(
        &client,
        "linger",
        protocol::client::ProducerConfig {
            acks: AckMode::Written,
            batch_messages: 1000,
            linger: std::time::Duration::from_millis(20),
            ..Default::default()
        },
    )
    .unwrap();
    producer.send_to(0, None, b"alone").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, offsets) = client
            .list_offsets("linger", 0, OffsetSpec::Latest, 0)
            .unwrap();
        if offsets.end_offset == 14 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the batch never left");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(producer.sent_messages(), 1);
}

#[test]
fn a_deleted_topic_is_gone_and_its_name_can_be_reused() {
    let broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    create(&client, "reused", 2);
    let mut first = producer(&client, "reused", AckMode::Flushed, 10);
    for i in 0..100u64 {
        first
            .send_to((i % 2) as u32, None, &numbered_payload(i, 50))
            .unwrap();
    }
    first.flush().unwrap();
    drop(first);
    client.delete_topic("reused").unwrap();
    assert!(client.metadata(&[]).unwrap().topics.is_empty());
    assert!(
        !broker.data_dir().join("reused-0").exists(),
        "partition directories removed"
    );
    create(&client, "reused", 2);
    let mut second = producer(&client, "reused", AckMode::Flushed, 10);
    second.send_to(0, None, b"fresh").unwrap();
    second.flush().unwrap();
    let messages = read_all(&client, "reused", 0, 0);
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].value, b"fresh");
    assert!(read_all(&client, "reused", 1, 0).is_empty());
}

#[test]
fn fire_and_forget_produces_through_the_wrong_shard_arrive_and_bad_ones_are_refused() {
    let broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    create(&client, "fwd-none", 4);
    let mut producer = protocol::client::Producer::new(
        &client,
        "fwd-none",
        protocol::client::ProducerConfig {
            acks: AckMode::None,
            shard_aware: false,
            batch_messages: 25,
            ..Default::default()
        },
    )
    .unwrap();
    for i in 0..4000u64 {
        producer
            .send_to((i % 4) as u32, None, &numbered_payload(i, 40))
            .unwrap();
    }
    producer.flush().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut total = 0;
    while total < 4000 {
        assert!(
            std::time::Instant::now() < deadline,
            "only {total} of 4000 arrived"
        );
        total = (0..4)
            .map(|p| read_all(&client, "fwd-none", p, 0).len())
            .sum::<usize>();
    }
    assert_eq!(total, 4000);
    // A partition owned by the other shard, through shard 0, with a bad CRC
    // and acks=none: refused at once by the shard the client talks to.
    let metadata = client.metadata(&["fwd-none"]).unwrap();
    let foreign = metadata.topics[0]
        .partitions
        .iter()
        .find(|p| p.shard_id != 0)
        .unwrap()
        .partition;
    let mut conn = Connection::connect(&broker.shards[0]).unwrap();
    let mut set = Vec::new();
    protocol::message::encode_message(&mut set, None, b"flipped");
    let last = set.len() - 1;
    set[last] ^= 1;
    let header =
        protocol::codec::produce_request(&mut conn.fbb, "fwd-none", foreign, AckMode::None)
            .to_vec();
    let error = conn
        .call(protocol::frame::Api::Produce, &header, &set)
        .unwrap_err();
    assert_eq!(
        error.code(),
        Some(protocol::ErrorCode::CorruptMessage),
        "{error}"
    );
}

/// Issue 8, item 6: a produce forwarded to the owning shard was sent only
/// when the connection's writer reached it, so behind a long-poll it sat in
/// memory and was appended long after. Now it is sent when dispatched; only
/// its response waits its turn.
#[test]
fn r8_6_a_forwarded_produce_is_appended_at_once_even_behind_a_long_poll() {
    let broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    create(&client, "behind", 2);
    let metadata = client.metadata(&["behind"]).unwrap();
    let on = |shard: u16| {
        metadata.topics[0]
            .partitions
            .iter()
            .find(|p| p.shard_id == shard)
            .unwrap()
            .partition
    };
    let (here, there) = (on(0), on(1));
    let mut conn = Connection::connect(&broker.shards[0]).unwrap();
    // A long-poll on shard 0's own, empty partition: 60 s.
    let header = codec::fetch_request(
        &mut conn.fbb,
        "behind",
        here,
        codec::FetchArgs {
            offset: 0,
            max_bytes: 1024,
            max_wait_ms: 60_000,
        },
    )
    .to_vec();
    conn.send(Api::Fetch, &header, &[]).unwrap();
    // Then produces for shard 1's partition, through shard 0.
    let mut set = Vec::new();
    protocol::message::encode_message(&mut set, None, b"forwarded");
    for _ in 0..10 {
        let header =
            codec::produce_request(&mut conn.fbb, "behind", there, AckMode::Written).to_vec();
        conn.send(Api::Produce, &header, &set).unwrap();
    }
    conn.flush().unwrap();
    // Appended at once: the produces do not wait for their turn in the
    // connection's answers (and the long-poll gives way once they are
    // acknowledged).
    harness::eventually(
        "the forwarded produces appended",
        std::time::Duration::from_secs(30),
        || {
            let (_, offsets) = client
                .list_offsets("behind", there, OffsetSpec::Latest, 0)
                .map_err(|e| e.to_string())?;
            (offsets.end_offset == 10 * 18)
                .then_some(())
                .ok_or(format!("end offset {}", offsets.end_offset))
        },
    );
}

/// Issue 10, item 4: a consumer started inside the last message waited
/// forever for bytes that can never complete it (flushed data ends on a
/// message boundary). It now says the offset is not a message boundary,
/// and skip_damaged moves on.
#[test]
fn an_offset_inside_the_last_message_is_an_error_not_a_hang() {
    let broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    create(&client, "inside", 1);
    let mut p = producer(&client, "inside", AckMode::Flushed, 1);
    p.send_to(0, None, b"x").unwrap();
    p.flush().unwrap();
    let mut consumer = Consumer::new(&client, "inside", 0, 7).unwrap();
    consumer.set_max_wait_ms(100);
    // Offset 7 was never a message start: an invalid offset, not damage.
    match consumer.poll() {
        Err(protocol::client::ClientError::InvalidOffset { offset, .. }) => assert_eq!(offset, 7),
        other => panic!("expected an invalid-offset error, got {other:?}"),
    }
    p.send_to(0, None, b"y").unwrap();
    p.flush().unwrap();
    assert_eq!(consumer.skip_damaged().unwrap(), 3);
    let next = consumer.poll().unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].value, b"y");
}

/// A tailing consumer (a fetch waiting at the flushed end) gets `acks =
/// written` messages after one flush, though the topic's policy flushes
/// only after an hour: what was appended before it began to wait, and what
/// is appended while it waits. With `flush_for_waiting_fetches = false` the
/// policy alone decides, and the same wait ends empty.
#[test]
fn a_consumer_at_the_end_sees_messages_after_one_flush() {
    let hour = codec::TopicSettings {
        flush_interval_ms: 3_600_000,
        flush_messages: 1_000_000,
        ..Default::default()
    };
    for flush_for_waiting_fetches in [true, false] {
        let broker = Broker::start(BrokerOptions {
            config_toml: format!("flush_for_waiting_fetches = {flush_for_waiting_fetches}\n"),
            ..BrokerOptions::default()
        });
        let client = broker.client();
        client.create_topic("tail", 1, &hour).unwrap();
        let mut producer = producer(&client, "tail", AckMode::Written, 1);
        producer.send_to(0, None, &numbered_payload(0, 50)).unwrap();
        producer.flush().unwrap();
        let mut consumer = Consumer::new(&client, "tail", 0, 0).unwrap();
        // Long enough that only the feature can end the wait with a message
        // (the broker caps a wait; this is well under the cap).
        consumer.set_max_wait_ms(if flush_for_waiting_fetches {
            10_000
        } else {
            1_000
        });
        let tail = std::thread::spawn(move || {
            let mut values = Vec::new();
            for _ in 0..2 {
                consumer
                    .poll_with(|m| values.push(m.value.to_vec()))
                    .unwrap();
            }
            values
        });
        // The second message arrives while the consumer's next fetch waits
        // (or, if it is not waiting yet, before; either way it must flush).
        std::thread::sleep(std::time::Duration::from_millis(300));
        producer.send_to(0, None, &numbered_payload(1, 50)).unwrap();
        producer.flush().unwrap();
        let values = tail.join().unwrap();
        if flush_for_waiting_fetches {
            assert_eq!(
                values.len(),
                2,
                "both messages reached the waiting consumer"
            );
            for (i, value) in values.iter().enumerate() {
                assert_eq!(check_numbered_payload(value, 50), i as u64);
            }
        } else {
            assert!(
                values.is_empty(),
                "without it, an hour's policy keeps both unflushed"
            );
        }
    }
}
