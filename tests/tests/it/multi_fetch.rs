//! MultiFetch (api 17): many partitions of one shard in one request. Each
//! test reads with a 20 s timeout against 60 s waits, so an answer that
//! waited when it had something to say fails the test instead of arriving
//! late.

use super::util::{create, producer};
use harness::{Broker, BrokerOptions};
use protocol::client::{AckMode, Connection, ResponseFrame};
use protocol::codec::multi_fetch::{
    decode_multi_fetch_response, multi_fetch_request, FetchPart, FetchedPart, MultiFetch,
    PARTITIONS_MAX,
};
use protocol::frame::Api;
use protocol::message::MessageSetIter;
use protocol::ErrorCode;
use std::time::Duration;

const LONG_POLL_MS: u32 = 60_000;
const READ_TIMEOUT: Duration = Duration::from_secs(20);

fn consumer_request(max_bytes: u32, max_wait_ms: u32) -> MultiFetch {
    MultiFetch {
        max_bytes,
        max_wait_ms,
        replica_id: -1,
        incarnation: String::new(),
    }
}

fn send(conn: &mut Connection, parts: &[FetchPart], request: &MultiFetch) -> u32 {
    let header = multi_fetch_request(&mut conn.fbb, parts, request).to_vec();
    let id = conn.send(Api::MultiFetch, &header, &[]).unwrap();
    conn.flush().unwrap();
    id
}

/// Each part of the answer to `request_id`, with its chunk.
fn answer(conn: &mut Connection, request_id: u32, what: &str) -> Vec<(FetchedPart, Vec<u8>)> {
    let frame: ResponseFrame = conn
        .recv()
        .unwrap_or_else(|e| panic!("{what}: {e} (an answer that waited?)"));
    assert_eq!(frame.request_id, request_id, "{what}: answers in order");
    decode_multi_fetch_response(&frame.header, frame.payload.len())
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .into_iter()
        .map(|(part, range)| (part, frame.payload[range].to_vec()))
        .collect()
}

fn values(chunk: &[u8], offset: u64) -> Vec<Vec<u8>> {
    MessageSetIter::new(chunk, offset)
        .map(|m| m.unwrap().value.to_vec())
        .collect()
}

fn one_shard(topic: &str, partitions: u32) -> Broker {
    let broker = Broker::start(BrokerOptions {
        shards: 1,
        ..BrokerOptions::default()
    });
    create(&broker.client(), topic, partitions);
    broker
}

fn connect(broker: &Broker) -> Connection {
    let mut conn = Connection::connect(&broker.address()).unwrap();
    conn.set_request_timeout(READ_TIMEOUT).unwrap();
    conn
}

#[test]
fn a_multi_fetch_answers_every_partition_in_request_order_with_its_chunk() {
    let broker = one_shard("m", 3);
    let client = broker.client();
    let mut p = producer(&client, "m", AckMode::Flushed, 1);
    p.send_to(0, None, b"zero-a").unwrap();
    p.send_to(0, None, b"zero-b").unwrap();
    p.send_to(2, None, b"two").unwrap();
    p.flush().unwrap();

    let mut conn = connect(&broker);
    let parts = [
        FetchPart::consumer("m", 2, 0, 1 << 20),
        FetchPart::consumer("m", 1, 0, 1 << 20),
        FetchPart::consumer("m", 0, 0, 1 << 20),
    ];
    let id = send(&mut conn, &parts, &consumer_request(1 << 20, LONG_POLL_MS));
    let got = answer(&mut conn, id, "three partitions, two with messages");
    let order: Vec<u32> = got.iter().map(|(p, _)| p.partition).collect();
    assert_eq!(
        order,
        vec![2, 1, 0],
        "one part per partition, in request order"
    );
    for (part, _) in &got {
        assert_eq!(part.error, ErrorCode::None, "{part:?}");
    }
    assert_eq!(values(&got[0].1, 0), vec![b"two".to_vec()]);
    assert!(got[1].1.is_empty(), "the empty partition has no chunk");
    assert_eq!(
        values(&got[2].1, 0),
        vec![b"zero-a".to_vec(), b"zero-b".to_vec()]
    );
    assert_eq!(
        got[2].0.offsets.flushed_offset,
        got[2].1.len() as u64,
        "each part carries its partition's offsets"
    );
}

#[test]
fn caught_up_partitions_wait_together_and_the_first_news_ends_the_wait() {
    let broker = one_shard("tail", 4);
    let mut conn = connect(&broker);
    let parts: Vec<FetchPart> = (0..4)
        .map(|p| FetchPart::consumer("tail", p, 0, 1 << 20))
        .collect();
    let id = send(&mut conn, &parts, &consumer_request(1 << 20, LONG_POLL_MS));

    // The answer waits: nothing is there. A message on partition 3 ends it
    // for all four, long before their 60 s.
    std::thread::sleep(Duration::from_millis(300));
    let client = broker.client();
    let mut p = producer(&client, "tail", AckMode::Written, 1);
    p.send_to(3, None, b"news").unwrap();
    p.flush().unwrap();
    let got = answer(&mut conn, id, "four long-polls and one message");
    let with_bytes: Vec<u32> = got
        .iter()
        .filter(|(_, chunk)| !chunk.is_empty())
        .map(|(p, _)| p.partition)
        .collect();
    assert_eq!(with_bytes, vec![3]);
    assert_eq!(values(&got[3].1, 0), vec![b"news".to_vec()]);
}

#[test]
fn the_answers_bytes_are_spent_in_request_order_within_max_bytes() {
    let broker = one_shard("budget", 2);
    let client = broker.client();
    let mut p = producer(&client, "budget", AckMode::Flushed, 1);
    for i in 0..20u32 {
        p.send_to(i % 2, None, &[b'x'; 1000]).unwrap();
    }
    p.flush().unwrap();

    let mut conn = connect(&broker);
    let parts = [
        FetchPart::consumer("budget", 1, 0, 1 << 20),
        FetchPart::consumer("budget", 0, 0, 1 << 20),
    ];
    let id = send(&mut conn, &parts, &consumer_request(12_000, 0));
    let got = answer(&mut conn, id, "a 12,000-byte budget over two partitions");
    let first = got[0].1.len();
    let second = got[1].1.len();
    assert!(
        first > 9_000,
        "the first partition's ten messages: {first} bytes"
    );
    assert_eq!(
        first + second,
        12_000,
        "the rest goes to the next partition"
    );
    assert_eq!(values(&got[0].1, 0).len(), 10);

    // Each part's own max_bytes bounds it too.
    let parts = [
        FetchPart::consumer("budget", 1, 0, 100),
        FetchPart::consumer("budget", 0, 0, 100),
    ];
    let id = send(&mut conn, &parts, &consumer_request(1 << 20, 0));
    let got = answer(&mut conn, id, "100 bytes each");
    assert_eq!((got[0].1.len(), got[1].1.len()), (100, 100));
}

#[test]
fn each_partition_gets_its_own_error_and_errors_do_not_wait() {
    let broker = Broker::start(BrokerOptions {
        shards: 2,
        ..BrokerOptions::default()
    });
    let client = broker.client();
    create(&client, "e", 12);
    let metadata = client.metadata(&["e"]).unwrap();
    let here = broker.address();
    let port: u16 = here.rsplit(':').next().unwrap().parse().unwrap();
    let (mine, other): (Vec<u32>, Vec<u32>) =
        (0..12).partition(|&p| metadata.owner_address("e", p).unwrap().port == port);
    assert!(
        mine.len() >= 3 && !other.is_empty(),
        "twelve partitions over two shards: {mine:?} / {other:?}"
    );
    let mut p = producer(&client, "e", AckMode::Flushed, 1);
    for &partition in &mine[..3] {
        p.send_to(partition, None, b"kept").unwrap();
    }
    p.flush().unwrap();
    let mut stored = Vec::new();
    protocol::message::encode_message(&mut stored, None, b"kept");
    let end = stored.len() as u64;

    let mut conn = connect(&broker);
    let mut wrong_id = FetchPart::consumer("e", mine[1], 0, 1 << 20);
    wrong_id.topic_id = "not-its-id".into();
    let parts = [
        FetchPart::consumer("nosuch", 0, 0, 1 << 20),
        FetchPart::consumer("e", 99, 0, 1 << 20),
        FetchPart::consumer("e", mine[0], 1 << 40, 1 << 20),
        FetchPart::consumer("e", other[0], 0, 1 << 20),
        wrong_id,
        // Caught up: only the errors beside it end the wait.
        FetchPart::consumer("e", mine[2], end, 1 << 20),
    ];
    let id = send(&mut conn, &parts, &consumer_request(1 << 20, LONG_POLL_MS));
    let got = answer(&mut conn, id, "five errors and a caught-up partition");
    let codes: Vec<ErrorCode> = got.iter().map(|(p, _)| p.error).collect();
    assert_eq!(
        codes,
        vec![
            ErrorCode::UnknownTopic,
            ErrorCode::UnknownPartition,
            ErrorCode::OffsetOutOfRange,
            ErrorCode::NotOwner,
            ErrorCode::UnknownTopicId,
            ErrorCode::None,
        ]
    );
    let out_of_range = &got[2].0;
    assert_eq!(
        (
            out_of_range.offsets.start_offset,
            out_of_range.offsets.end_offset
        ),
        (0, end),
        "OFFSET_OUT_OF_RANGE carries the valid range: {out_of_range:?}"
    );
    assert!(
        got[3].0.message.contains("not forwarded"),
        "{:?}",
        got[3].0.message
    );
    assert!(got.iter().all(|(_, chunk)| chunk.is_empty()));
}

#[test]
fn malformed_multi_fetches_are_refused_whole_and_the_connection_goes_on() {
    let broker = one_shard("bad", 2);
    let mut conn = connect(&broker);
    let refused = |conn: &mut Connection, parts: &[FetchPart], what: &str, says: &str| {
        let header =
            multi_fetch_request(&mut conn.fbb, parts, &consumer_request(1 << 20, 0)).to_vec();
        let error = conn
            .call(Api::MultiFetch, &header, &[])
            .map(|_| ())
            .expect_err(what);
        assert_eq!(
            error.code(),
            Some(ErrorCode::InvalidRequest),
            "{what}: {error}"
        );
        assert!(error.to_string().contains(says), "{what}: {error}");
    };
    refused(&mut conn, &[], "no partitions", "1 to 1000 partitions");
    let twice = [
        FetchPart::consumer("bad", 1, 0, 10),
        FetchPart::consumer("bad", 1, 5, 10),
    ];
    refused(&mut conn, &twice, "a partition twice", "bad-1 twice");
    let many: Vec<FetchPart> = (0..PARTITIONS_MAX as u32 + 1)
        .map(|p| FetchPart::consumer("bad", p, 0, 10))
        .collect();
    refused(&mut conn, &many, "1001 partitions", "this one 1001");
    let garbage = conn.call(Api::MultiFetch, &[7u8; 40], &[]).map(|_| ());
    let error = garbage.expect_err("a header that is no flatbuffer");
    assert_eq!(error.code(), Some(ErrorCode::InvalidRequest), "{error}");
    let payload = conn.call(Api::MultiFetch, &[], b"bytes").map(|_| ());
    assert_eq!(
        payload.expect_err("a payload").code(),
        Some(ErrorCode::InvalidRequest)
    );

    // The connection still serves: the longest legal request, every
    // partition a different one (999 unknown).
    let mut legal: Vec<FetchPart> = (0..PARTITIONS_MAX as u32)
        .map(|p| FetchPart::consumer("bad", p, 0, 10))
        .collect();
    legal.swap(0, 1);
    let id = send(&mut conn, &legal, &consumer_request(1 << 20, 0));
    let got = answer(&mut conn, id, "1000 partitions");
    assert_eq!(got.len(), PARTITIONS_MAX);
    assert_eq!(
        (got[0].0.error, got[1].0.error),
        (ErrorCode::None, ErrorCode::None)
    );
    assert!(got[2..]
        .iter()
        .all(|(p, _)| p.error == ErrorCode::UnknownPartition));
}

#[test]
fn a_connection_has_one_waiting_multi_fetch_and_a_second_answers_at_once() {
    let broker = one_shard("two", 2);
    let mut conn = connect(&broker);
    let parts: Vec<FetchPart> = (0..2)
        .map(|p| FetchPart::consumer("two", p, 0, 1 << 20))
        .collect();
    let first = send(&mut conn, &parts, &consumer_request(1 << 20, LONG_POLL_MS));
    let second = send(&mut conn, &parts, &consumer_request(1 << 20, LONG_POLL_MS));
    // The second does not wait, so the first gives way to it: both come
    // back empty within the read timeout, not after 60 s.
    for id in [first, second] {
        let got = answer(
            &mut conn,
            id,
            "two pipelined MultiFetches of caught-up partitions",
        );
        assert!(got
            .iter()
            .all(|(p, chunk)| p.error == ErrorCode::None && chunk.is_empty()));
    }
}
