//! A connection answers in request order, so a fetch long-poll at the head
//! of its queue used to hold back every answer behind it for its whole
//! `max_wait_ms`: a message on another partition, a produce's
//! acknowledgement. The waiting fetch now gives way (broker
//! `handler/give_way.rs`). Each test waits 60 s in its long-polls and reads
//! with a 20 s timeout, so a held-back answer fails the test instead of
//! merely arriving late.

use super::util::{create, producer};
use harness::{Broker, BrokerOptions};
use protocol::client::{
    AckMode, Connection, ResponseFrame, Start, TopicConsumer, TopicConsumerConfig,
};
use protocol::codec::{self, verify, FetchArgs};
use protocol::frame::Api;
use protocol::wire;
use std::time::Duration;

const LONG_POLL_MS: u32 = 60_000;
const READ_TIMEOUT: Duration = Duration::from_secs(20);

/// Sends a 60 s long-poll for `partition` at `offset`; returns its request id.
fn long_poll(conn: &mut Connection, topic: &str, partition: u32, offset: u64) -> u32 {
    let header = codec::fetch_request(
        &mut conn.fbb,
        topic,
        partition,
        FetchArgs {
            offset,
            max_bytes: 1 << 20,
            max_wait_ms: LONG_POLL_MS,
        },
    )
    .to_vec();
    conn.send(Api::Fetch, &header, &[]).unwrap()
}

/// The next response, which must answer `request_id`, or the test fails
/// naming what it waited for.
fn answer(conn: &mut Connection, request_id: u32, what: &str) -> ResponseFrame {
    let frame = conn
        .recv()
        .unwrap_or_else(|e| panic!("{what}: {e} (held back behind a long-poll?)"));
    assert_eq!(
        frame.request_id, request_id,
        "{what}: answers come in order"
    );
    frame
}

/// (offset, length) of a fetch answer.
fn chunk(frame: &ResponseFrame) -> (u64, u32) {
    let response = verify::<wire::FetchResponse>(&frame.header).unwrap();
    assert_eq!(response.length() as usize, frame.payload.len());
    (response.offset(), response.length())
}

fn one_shard_topic(name: &str, partitions: u32) -> Broker {
    let broker = Broker::start(BrokerOptions {
        shards: 1,
        ..BrokerOptions::default()
    });
    create(&broker.client(), name, partitions);
    broker
}

#[test]
fn a_message_on_one_partition_is_not_held_behind_another_partitions_long_poll() {
    let broker = one_shard_topic("tail", 2);
    let mut conn = Connection::connect(&broker.address()).unwrap();
    conn.set_request_timeout(READ_TIMEOUT).unwrap();
    let idle = long_poll(&mut conn, "tail", 0, 0);
    let busy = long_poll(&mut conn, "tail", 1, 0);
    conn.flush().unwrap();

    let client = broker.client();
    let mut p = producer(&client, "tail", AckMode::Flushed, 1);
    p.send_to(1, None, b"on partition 1").unwrap();
    p.flush().unwrap();

    // The idle partition's fetch ends early, empty, at the offset it asked
    // for; the message follows at once.
    assert_eq!(
        chunk(&answer(&mut conn, idle, "the idle partition")),
        (0, 0)
    );
    let frame = answer(&mut conn, busy, "partition 1's message");
    let (offset, length) = chunk(&frame);
    assert_eq!(offset, 0);
    assert!(length > 0, "partition 1's fetch carries its message");
    assert!(
        frame.payload.windows(14).any(|w| w == b"on partition 1"),
        "the chunk holds the produced value"
    );

    // A fetch that gave way is an ordinary fetch when asked again: it
    // waits, and answers with its partition's first message.
    let again = long_poll(&mut conn, "tail", 0, 0);
    conn.flush().unwrap();
    p.send_to(0, None, b"on partition 0").unwrap();
    p.flush().unwrap();
    let frame = answer(&mut conn, again, "partition 0's message");
    assert!(
        chunk(&frame).1 > 0,
        "partition 0's fetch carries its message"
    );
}

#[test]
fn a_produce_acknowledgement_is_not_held_behind_a_long_poll_on_its_connection() {
    let broker = one_shard_topic("mixed", 2);
    let mut conn = Connection::connect(&broker.address()).unwrap();
    conn.set_request_timeout(READ_TIMEOUT).unwrap();
    let waiting = long_poll(&mut conn, "mixed", 0, 0);
    let mut set = Vec::new();
    protocol::message::encode_message(&mut set, None, b"acknowledged");
    let header = codec::produce_request(&mut conn.fbb, "mixed", 1, AckMode::Flushed).to_vec();
    let produce = conn.send(Api::Produce, &header, &set).unwrap();
    conn.flush().unwrap();

    assert_eq!(chunk(&answer(&mut conn, waiting, "the long-poll")), (0, 0));
    let ack = answer(&mut conn, produce, "the produce's acknowledgement");
    let response = verify::<wire::ProduceResponse>(&ack.header).unwrap();
    assert_eq!(response.base_offset(), 0, "the produce was appended at 0");
}

#[test]
fn a_topic_consumer_with_a_long_max_wait_gets_each_partitions_messages_as_they_come() {
    let broker = one_shard_topic("spread", 8);
    let client = broker.client();
    let mut consumer = TopicConsumer::new(
        &client,
        "spread",
        Start::Earliest,
        TopicConsumerConfig {
            max_wait: Duration::from_millis(u64::from(LONG_POLL_MS)),
            ..TopicConsumerConfig::default()
        },
    )
    .unwrap();
    let mut p = producer(&client, "spread", AckMode::Flushed, 1);
    // One message at a time, each on another partition, each read before
    // the next is sent: every one finds seven idle long-polls on its
    // connection.
    for round in 0..24u32 {
        let partition = (round * 3) % 8;
        let value = format!("message {round}");
        p.send_to(partition, None, value.as_bytes()).unwrap();
        p.flush().unwrap();
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + READ_TIMEOUT;
        while got.is_empty() && std::time::Instant::now() < deadline {
            got = consumer.poll(Duration::from_millis(500)).unwrap();
        }
        assert_eq!(got.len(), 1, "round {round}: one message within 20 s");
        assert_eq!(got[0].partition, partition, "round {round}");
        assert_eq!(got[0].value, value.as_bytes(), "round {round}");
    }
    consumer.close();
}
