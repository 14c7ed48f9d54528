//! The prefetching consumer against a real broker: every message once, in
//! order, at its byte offset, whatever the fetch size (including fetches
//! smaller than one message), while the producer keeps appending; seeking
//! back; handing the plain consumer back at the right position.

use super::util::{create, producer};
use harness::{check_numbered_payload, numbered_payload, Broker, BrokerOptions};
use protocol::client::{AckMode, Consumer, PrefetchConsumer};
use protocol::message::MESSAGE_HEADER_BYTES;
use std::time::{Duration, Instant};

/// Payload sizes that make chunk ends fall everywhere inside messages.
fn size_of(index: u64) -> usize {
    8 + (index as usize * 7919) % 1500
}

/// Polls until `count` messages arrived, checking each against the log.
fn read_checked(
    reader: &mut PrefetchConsumer,
    next_index: &mut u64,
    next_offset: &mut u64,
    count: u64,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let until = *next_index + count;
    while *next_index < until {
        assert!(
            Instant::now() < deadline,
            "stuck at message {next_index} (offset {next_offset})"
        );
        reader
            .poll_with(Duration::from_millis(200), |m| {
                assert_eq!(m.offset, *next_offset, "offsets are byte positions");
                let size = size_of(*next_index);
                assert_eq!(check_numbered_payload(m.value, size), *next_index, "order");
                *next_offset += (MESSAGE_HEADER_BYTES + size) as u64;
                *next_index += 1;
            })
            .unwrap_or_else(|e| panic!("poll at message {next_index}: {e}"));
    }
}

#[test]
fn a_prefetching_consumer_reads_every_message_once_at_any_fetch_size_while_the_log_grows() {
    let broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    create(&client, "ahead", 1);
    const FIRST: u64 = 20_000;
    const MORE: u64 = 3_000;
    let mut producer = producer(&client, "ahead", AckMode::Flushed, 100);
    for i in 0..FIRST {
        producer
            .send_to(0, None, &numbered_payload(i, size_of(i)))
            .unwrap();
    }
    producer.flush().unwrap();

    // Fetch sizes: larger than many messages, about one message, smaller
    // than most (those are assembled from several chunks); queue depths 1-8.
    for (max_bytes, depth) in [(1 << 20, 4), (4096, 8), (700, 2), (100, 1)] {
        let mut consumer = Consumer::new(&client, "ahead", 0, 0).unwrap();
        consumer.set_max_bytes(max_bytes);
        consumer.set_max_wait_ms(100);
        let mut reader = PrefetchConsumer::new(consumer, depth);
        let (mut index, mut offset) = (0u64, 0u64);
        let count = if max_bytes < 1000 { 2_000 } else { FIRST };
        read_checked(&mut reader, &mut index, &mut offset, count);
        assert_eq!(reader.position(), offset, "max_bytes {max_bytes}");
        if max_bytes == 1 << 20 {
            // Caught up: polls wait and deliver nothing...
            assert!(reader.at_end());
            let n = reader
                .poll_with(Duration::from_millis(300), |_| {})
                .unwrap();
            assert_eq!(n, 0, "nothing was produced");
            // ...until the producer appends again (the fetcher long-polls).
            for i in FIRST..FIRST + MORE {
                producer
                    .send_to(0, None, &numbered_payload(i, size_of(i)))
                    .unwrap();
            }
            producer.flush().unwrap();
            read_checked(&mut reader, &mut index, &mut offset, MORE);
            // Back to an earlier message: the same messages again.
            let (back_index, back_offset) = (7_777u64, {
                (0..7_777u64)
                    .map(|i| (MESSAGE_HEADER_BYTES + size_of(i)) as u64)
                    .sum::<u64>()
            });
            reader.seek(back_offset).unwrap();
            let (mut index, mut offset) = (back_index, back_offset);
            read_checked(&mut reader, &mut index, &mut offset, 1_000);
            // The plain consumer continues where the application stopped,
            // not where the fetcher got to.
            let mut plain = reader.into_inner().unwrap();
            assert_eq!(plain.position(), offset);
            plain.set_max_wait_ms(0);
            let first = plain.poll().unwrap();
            assert_eq!(first[0].offset, offset);
            assert_eq!(
                check_numbered_payload(&first[0].value, size_of(index)),
                index
            );
        }
    }
}

#[test]
fn a_prefetching_consumer_at_an_offset_inside_a_message_reports_it() {
    let broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    create(&client, "inside", 1);
    let mut producer = producer(&client, "inside", AckMode::Flushed, 10);
    for i in 0..10 {
        producer
            .send_to(0, None, &numbered_payload(i, 100))
            .unwrap();
    }
    producer.flush().unwrap();
    let consumer = Consumer::new(&client, "inside", 0, 3).unwrap();
    let mut reader = PrefetchConsumer::new(consumer, 2);
    let deadline = Instant::now() + Duration::from_secs(20);
    let error = loop {
        assert!(Instant::now() < deadline, "no error within 20 s");
        match reader.poll_with(Duration::from_millis(200), |m| {
            panic!("delivered a message at {} from a bad offset", m.offset)
        }) {
            Ok(_) => continue,
            Err(error) => break error,
        }
    };
    assert!(
        matches!(
            error,
            protocol::client::ClientError::InvalidOffset { offset: 3, .. }
        ),
        "{error}"
    );
    // The error repeats (the fetcher restarts at the position) until the
    // application moves.
    let again = loop {
        match reader.poll_with(Duration::from_millis(200), |_| {}) {
            Ok(_) => assert!(Instant::now() < deadline, "no error within 20 s"),
            Err(error) => break error,
        }
    };
    assert!(
        matches!(
            again,
            protocol::client::ClientError::InvalidOffset { offset: 3, .. }
        ),
        "{again}"
    );
    reader.seek(0).unwrap();
    let mut got = 0;
    while got < 10 {
        got += reader
            .poll_with(Duration::from_millis(200), |_| {})
            .unwrap();
        assert!(Instant::now() < deadline, "only {got} of 10 within 20 s");
    }
}
