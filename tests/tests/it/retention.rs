//! Retention removes whole closed segments, never the active one.

use super::util::{producer, read_all, segment_count};
use harness::{numbered_payload, Broker, BrokerOptions};
use protocol::client::{AckMode, OffsetSpec, TopicSettings};
use std::time::{Duration, Instant};

#[test]
fn retention_deletes_old_segments_and_moves_the_start_offset() {
    let broker = Broker::start(BrokerOptions {
        config_toml: "retention_check_ms = 50\nsegment_bytes_min = 1024\n".into(),
        ..BrokerOptions::default()
    });
    let client = broker.client();
    let settings = TopicSettings {
        segment_bytes: 1024,
        retention_ms: 300,
        ..TopicSettings::default()
    };
    client.create_topic("short", 1, &settings).unwrap();
    // Size-based retention on a second topic: keep under ~4 KiB.
    let by_size = TopicSettings {
        segment_bytes: 1024,
        retention_bytes: 4096,
        ..TopicSettings::default()
    };
    client.create_topic("small", 1, &by_size).unwrap();
    for topic in ["short", "small"] {
        let mut producer = producer(&client, topic, AckMode::Flushed, 1);
        for i in 0..200u64 {
            producer.send_to(0, None, &numbered_payload(i, 91)).unwrap(); // 100 bytes stored
        }
        producer.flush().unwrap();
    }
    assert!(segment_count(&broker, "short-0") >= 10);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let short = segment_count(&broker, "short-0");
        let small_bytes: u64 = std::fs::read_dir(broker.data_dir().join("small-0"))
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
            // Retention may unlink a segment between the listing and the
            // stat: a segment gone by then holds no bytes.
            .map(|e| e.metadata().map_or(0, |m| m.len()))
            .sum();
        if short == 1 && small_bytes <= 4096 + 1024 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "retention did not run: {short} segments, {small_bytes} bytes"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // What retention removed is unlinked too, off the shard's thread
    // (`reclaim.rs`): no renamed segment stays behind.
    harness::eventually(
        "the removed segments unlinked",
        Duration::from_secs(20),
        || {
            let left: Vec<String> = ["short-0", "small-0"]
                .iter()
                .flat_map(|dir| std::fs::read_dir(broker.data_dir().join(dir)).unwrap())
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|name| name.ends_with(".deleted"))
                .collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("{left:?}"))
            }
        },
    );
    // The active segment stays; the start offset moved to its base.
    let (start, offsets) = client
        .list_offsets("short", 0, OffsetSpec::Earliest, 0)
        .unwrap();
    assert!(
        start > 0 && start < offsets.end_offset,
        "start {start}, end {}",
        offsets.end_offset
    );
    let remaining = read_all(&client, "short", 0, start);
    assert!(!remaining.is_empty());
    assert_eq!(remaining.last().unwrap().offset + 100, offsets.end_offset);
    // Reading below the start offset is an error that names the valid range.
    let mut consumer = protocol::client::Consumer::new(&client, "short", 0, 0).unwrap();
    match consumer.poll() {
        Err(protocol::client::ClientError::Broker { code, range, .. }) => {
            assert_eq!(code, protocol::ErrorCode::OffsetOutOfRange);
            assert_eq!(range, Some((start, offsets.end_offset)));
        }
        other => panic!("expected OFFSET_OUT_OF_RANGE, got {other:?}"),
    }
    // Or, by the consumer's policy, continue from the earliest retained
    // offset (issue 10, item 0).
    consumer.seek(0);
    consumer.set_out_of_range(protocol::client::OutOfRange::Earliest);
    consumer.set_max_wait_ms(0);
    let batch = consumer.poll().unwrap();
    assert_eq!(batch.first().map(|m| m.offset), Some(start));
    // A consumer can also start where ListOffsets says.
    let mut latest = protocol::client::Consumer::new_at(
        &client,
        "short",
        0,
        protocol::client::OffsetSpec::Latest,
        0,
    )
    .unwrap();
    assert_eq!(latest.position(), offsets.flushed_offset);
    latest.set_max_wait_ms(0);
    assert!(latest.poll().unwrap().is_empty());
}
