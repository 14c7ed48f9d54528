//! Bad input gets a clear error and harms nothing: no panic, no stuck
//! shard, other connections unaffected, stored data intact.

use super::util::{create, handshake, producer, raw, read_all, socket};
use harness::{numbered_payload, Broker, BrokerOptions};
use protocol::client::{read_response, AckMode, ClientError, Connection, ResponseFrame};
use protocol::codec;
use protocol::frame::{self, Api, API_VERSION};
use protocol::message::encode_message;
use protocol::ErrorCode;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn broker_code(result: Result<impl std::fmt::Debug, ClientError>) -> ErrorCode {
    match result {
        Err(ClientError::Broker { code, .. }) => code,
        other => panic!("expected a broker error, got {other:?}"),
    }
}

fn expect_error_then_close(stream: &mut TcpStream, code: ErrorCode) {
    let mut response = ResponseFrame::default();
    match read_response(stream, &mut response) {
        Err(ClientError::Broker {
            code: got, message, ..
        }) => {
            assert_eq!(got, code, "{message}");
            assert!(!message.is_empty());
        }
        other => panic!("expected {code}, got {other:?}"),
    }
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    assert!(
        rest.is_empty(),
        "the broker closes the connection after an unrecoverable frame"
    );
}

fn assert_alive(broker: &mut Broker) {
    assert!(broker.is_running(), "the broker must survive bad input");
    for shard in &broker.shards {
        let client = protocol::client::Client::connect(shard).unwrap();
        client.metadata(&[]).unwrap();
    }
}

#[test]
fn invalid_topic_names_are_refused_and_create_nothing() {
    let mut broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    let long = "x".repeat(250);
    for name in [
        "",
        ".",
        "..",
        "a/b",
        "../escape",
        "a\\b",
        long.as_str(),
        "sp ace",
        "é",
        "nul\0",
    ] {
        let code = broker_code(client.create_topic(name, 1, &Default::default()));
        assert_eq!(code, ErrorCode::InvalidTopicName, "name {name:?}");
    }
    let entries: Vec<String> = std::fs::read_dir(broker.data_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        // The broker's own files: no topic made them.
        .filter(|n| {
            n != ".lock" && n != coordinator::security::LOGIN_SECRET_FILE && n != "data-dir-id"
        })
        .collect();
    assert!(entries.is_empty(), "nothing created: {entries:?}");
    assert!(std::fs::metadata(broker.data_dir().parent().unwrap().join("escape-0")).is_err());
    assert_eq!(
        broker_code(client.create_topic("ok", 0, &Default::default())),
        ErrorCode::InvalidConfig
    );
    assert_alive(&mut broker);
}

#[test]
fn unknown_topics_partitions_and_out_of_range_offsets_are_errors() {
    let mut broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    create(&client, "known", 2);
    assert_eq!(
        broker_code(client.list_offsets("nope", 0, protocol::client::OffsetSpec::Latest, 0)),
        ErrorCode::UnknownTopic
    );
    assert_eq!(
        broker_code(client.list_offsets("known", 2, protocol::client::OffsetSpec::Latest, 0)),
        ErrorCode::UnknownPartition
    );
    assert_eq!(
        broker_code(client.metadata(&["nope"])),
        ErrorCode::UnknownTopic
    );
    assert_eq!(
        broker_code(client.delete_topic("nope")),
        ErrorCode::UnknownTopic
    );
    assert_eq!(
        broker_code(client.create_topic("known", 1, &Default::default())),
        ErrorCode::TopicAlreadyExists
    );
    let mut p = producer(&client, "known", AckMode::Flushed, 1);
    p.send_to(0, None, b"hello").unwrap();
    p.flush().unwrap();
    let mut consumer = protocol::client::Consumer::new(&client, "known", 0, 5000).unwrap();
    match consumer.poll() {
        Err(ClientError::Broker {
            code,
            range,
            message,
            ..
        }) => {
            assert_eq!(code, ErrorCode::OffsetOutOfRange);
            assert_eq!(range, Some((0, 14)), "{message}");
            assert!(message.contains("0..=14"), "{message}");
        }
        other => panic!("expected OFFSET_OUT_OF_RANGE, got {other:?}"),
    }
    assert_alive(&mut broker);
}

#[test]
fn oversized_frames_and_garbage_get_an_error_and_a_close() {
    let mut broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    create(&client, "intact", 1);
    let mut p = producer(&client, "intact", AckMode::Flushed, 1);
    for i in 0..10 {
        p.send_to(0, None, &numbered_payload(i, 30)).unwrap();
    }
    p.flush().unwrap();
    for shard in broker.shards.clone() {
        // A length prefix far over the limit.
        let mut stream = raw(&shard);
        let mut prefix = Vec::new();
        frame::write_prefix(
            &mut prefix,
            Api::Produce as u16,
            API_VERSION,
            7,
            0,
            512 * 1024 * 1024,
        );
        stream.write_all(&prefix).unwrap();
        expect_error_then_close(&mut stream, ErrorCode::FrameTooLarge);
        // Garbage before any handshake: 0xff.. reads as a huge length.
        let mut stream = TcpStream::connect(&shard).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        stream.write_all(&[0xff; 64]).unwrap();
        expect_error_then_close(&mut stream, ErrorCode::FrameTooLarge);
        // A length too short for the fixed fields.
        let mut stream = raw(&shard);
        stream
            .write_all(&[3, 0, 0, 0, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9])
            .unwrap();
        expect_error_then_close(&mut stream, ErrorCode::InvalidRequest);
    }
    assert_alive(&mut broker);
    assert_eq!(
        read_all(&broker.client(), "intact", 0, 0).len(),
        10,
        "stored data intact"
    );
}

#[test]
fn bad_headers_unknown_apis_and_bad_crcs_are_answered_and_the_connection_goes_on() {
    let mut broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    create(&client, "crc", 1);
    let mut conn = Connection::connect(&broker.address()).unwrap();
    // A header that fails flatbuffers verification.
    let error = conn
        .call(
            Api::Produce,
            &[0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4],
            b"whatever",
        )
        .unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::InvalidRequest), "{error}");
    // An api that does not exist.
    let mut raw_conn = raw(&broker.address());
    let mut out = Vec::new();
    frame::write_frame(&mut out, 999, API_VERSION, 5, &[], &[]);
    raw_conn.write_all(&out).unwrap();
    let mut response = ResponseFrame::default();
    let error = read_response(&mut raw_conn, &mut response).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::UnknownApi), "{error}");
    assert_eq!(response.request_id, 5);
    // A produce whose message fails its CRC.
    let mut set = Vec::new();
    encode_message(&mut set, None, b"good message");
    encode_message(&mut set, None, b"bad message");
    let last = set.len() - 1;
    set[last] ^= 0x01;
    let header = codec::produce_request(&mut conn.fbb, "crc", 0, AckMode::Flushed).to_vec();
    let error = conn.call(Api::Produce, &header, &set).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::CorruptMessage), "{error}");
    // Nothing of the rejected set was stored, and the connection still works.
    let (_, offsets) = client
        .list_offsets("crc", 0, protocol::client::OffsetSpec::Latest, 0)
        .unwrap();
    assert_eq!(offsets.end_offset, 0);
    let mut good = Vec::new();
    encode_message(&mut good, None, b"good message");
    let header = codec::produce_request(&mut conn.fbb, "crc", 0, AckMode::Flushed).to_vec();
    conn.call(Api::Produce, &header, &good).unwrap();
    assert_eq!(read_all(&client, "crc", 0, 0).len(), 1);
    assert_alive(&mut broker);
}

#[test]
fn the_first_request_must_be_a_handshake() {
    let broker = Broker::start(BrokerOptions::default());
    let mut stream = TcpStream::connect(broker.address()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut fbb = protocol::flatbuffers::FlatBufferBuilder::new();
    let header = codec::metadata_request(&mut fbb, &[]).to_vec();
    let mut out = Vec::new();
    frame::write_frame(&mut out, Api::Metadata as u16, API_VERSION, 1, &header, &[]);
    stream.write_all(&out).unwrap();
    let mut response = ResponseFrame::default();
    let error = read_response(&mut stream, &mut response).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::HandshakeRequired), "{error}");
}

/// Issue 8, item 13: a Handshake with api_version 1 was accepted although
/// PROTOCOL.md says every api answers other versions UNSUPPORTED_VERSION.
#[test]
fn r8_13_a_handshake_with_another_api_version_is_unsupported() {
    let broker = Broker::start(BrokerOptions::default());
    let mut stream = socket(&broker.address());
    let error = handshake(&mut stream, API_VERSION + 1, 1).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::UnsupportedVersion), "{error}");
    // The connection stays open and a correct handshake then succeeds.
    let response = handshake(&mut stream, API_VERSION, 2).unwrap();
    assert_eq!(response.request_id, 2);
}

/// Issue 8, item 13: a config value of 2^63 or more answered STORAGE_FAILED
/// (the registry file cannot hold it) instead of INVALID_CONFIG, and must
/// leave no trace.
#[test]
fn r8_13_a_config_value_past_i64_is_invalid_config() {
    let broker = Broker::start(BrokerOptions::default());
    let client = broker.client();
    for settings in [
        protocol::client::TopicSettings {
            retention_ms: 1 << 63,
            ..Default::default()
        },
        protocol::client::TopicSettings {
            retention_bytes: u64::MAX,
            ..Default::default()
        },
        protocol::client::TopicSettings {
            flush_messages: 1 << 63,
            ..Default::default()
        },
    ] {
        let error = client.create_topic("big", 1, &settings).unwrap_err();
        assert_eq!(error.code(), Some(ErrorCode::InvalidConfig), "{error}");
    }
    client.create_topic("big", 1, &Default::default()).unwrap();
}

/// Issue 10, item 0: a broker that accepts but never answers blocked
/// `Client::connect` forever, and a hung first bootstrap address was never
/// skipped. The handshake has a deadline, and the next address is tried.
#[test]
fn a_silent_bootstrap_address_times_out_and_the_next_one_is_used() {
    let broker = Broker::start(BrokerOptions::default());
    // Accepts (the kernel's backlog does) but never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_address = silent.local_addr().unwrap().to_string();
    match protocol::client::Client::connect(&silent_address) {
        Err(ClientError::Timeout { address, .. }) => assert_eq!(address, silent_address),
        Err(other) => panic!("expected a timeout, got {other}"),
        Ok(_) => panic!("connected to a silent address"),
    }
    let client =
        protocol::client::Client::connect(&format!("{silent_address},{}", broker.address()))
            .unwrap();
    client.metadata(&[]).unwrap();
    drop(silent);
}

/// Group requests are bounded: a member subscribing to more than 10,000
/// topics, or a claim of more than 10,000 partitions, is refused before any
/// of it reaches the control thread (here a standalone broker, which would
/// otherwise answer CLUSTER_REQUIRED).
#[test]
fn group_requests_past_their_item_limits_are_refused() {
    // In a cluster: a standalone broker answers CLUSTER_REQUIRED before it
    // looks at a group request (issue 24, item 16).
    let etcd = harness::etcd::Etcd::start();
    let broker = Broker::start(BrokerOptions::clustered(&etcd, "limits", 1));
    let client = broker.client();
    let names: Vec<String> = (0..10_001).map(|i| format!("t{i}")).collect();
    let topics: Vec<&str> = names.iter().map(String::as_str).collect();
    let error = client.join_group("g", "x", &topics, 5_000).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::InvalidRequest), "{error}");
    assert!(error.to_string().contains("10001 topics"), "{error}");
    let joined = protocol::client::Joined {
        member_id: "x-1".into(),
        session_id: 1,
        session_timeout_ms: 5_000,
    };
    let partitions: Vec<u32> = (0..10_001).collect();
    let error = client
        .claim_partitions("g", &joined, 1, "t", &partitions)
        .unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::InvalidRequest), "{error}");
    // Within the limits, the request is served.
    let joined = client.join_group("g", "x", &["t"], 5_000).unwrap();
    client.leave_group("g", &joined).unwrap();
}

/// Issue 10, item 3: payload bytes after a non-Produce header were ignored;
/// now they are refused with INVALID_REQUEST, and the connection goes on.
#[test]
fn a_payload_on_a_request_that_takes_none_is_refused() {
    let broker = Broker::start(BrokerOptions::default());
    let mut stream = raw(&broker.address());
    let mut fbb = protocol::flatbuffers::FlatBufferBuilder::new();
    let header = codec::metadata_request(&mut fbb, &[]).to_vec();
    let mut out = Vec::new();
    frame::write_frame(
        &mut out,
        Api::Metadata as u16,
        API_VERSION,
        5,
        &header,
        b"stray",
    );
    frame::write_frame(&mut out, Api::Metadata as u16, API_VERSION, 6, &header, &[]);
    stream.write_all(&out).unwrap();
    let mut response = ResponseFrame::default();
    let error = read_response(&mut stream, &mut response).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::InvalidRequest), "{error}");
    assert!(error.to_string().contains("carries no payload"), "{error}");
    read_response(&mut stream, &mut response).unwrap();
    assert_eq!(response.request_id, 6, "the connection goes on");
}

/// Issue 10, item 0: every failed bootstrap address is named, and a
/// refused connection is retriable.
#[test]
fn every_failed_bootstrap_address_is_named() {
    let closed: Vec<String> = (0..2)
        .map(|_| {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().to_string()
        })
        .collect();
    let error = match protocol::client::Client::connect(&closed.join(",")) {
        Err(error) => error,
        Ok(_) => panic!("connected to a closed port"),
    };
    let text = error.to_string();
    assert!(text.starts_with("no broker answered: "), "{text}");
    for address in &closed {
        assert!(
            text.contains(&format!("cannot connect to {address}: ")),
            "{text}"
        );
    }
    assert!(error.is_retriable());
}

/// Issue 10, item 0: a broker that stops answering (here SIGSTOPped) made
/// metadata, poll and flush wait forever. Each now fails with a typed
/// timeout after the request timeout (plus the poll's own wait) or the
/// producer's flush timeout.
#[test]
fn a_stopped_broker_times_out_requests_instead_of_hanging() {
    let broker = Broker::start(BrokerOptions::default());
    // One config for every timeout; no retries, so each failure shows.
    let client = protocol::client::Client::with_config(
        &broker.address(),
        protocol::client::ClientConfig {
            connect_timeout: Duration::from_millis(500),
            request_timeout: Duration::from_millis(500),
            flush_timeout: Duration::from_millis(300),
            retries: 0,
            ..Default::default()
        },
    )
    .unwrap();
    create(&client, "frozen", 1);
    let mut consumer = protocol::client::Consumer::new(&client, "frozen", 0, 0).unwrap();
    consumer.set_max_wait_ms(100);
    let mut producer =
        protocol::client::Producer::new(&client, "frozen", Default::default()).unwrap();
    let pid = broker.pid().unwrap() as i32;
    // SAFETY: signalling the broker process this test started.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    // The stop is asynchronous: wait until every thread of it has stopped.
    harness::eventually("the broker stopped", Duration::from_secs(30), || {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|e| e.to_string())?;
        let running = tasks
            .flatten()
            .filter(|t| {
                std::fs::read_to_string(t.path().join("stat"))
                    .map(|stat| {
                        !stat
                            .rsplit(')')
                            .next()
                            .unwrap_or("")
                            .trim_start()
                            .starts_with('T')
                    })
                    .unwrap_or(false)
            })
            .count();
        (running == 0)
            .then_some(())
            .ok_or(format!("{running} threads still running"))
    });
    let metadata = client.metadata(&[]);
    let poll = consumer.poll();
    producer.send_to(0, None, b"into the void").unwrap();
    let flush = producer.flush();
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    for result in [metadata.map(|_| ()), poll.map(|_| ()), flush] {
        let error = result.unwrap_err();
        assert!(matches!(error, ClientError::Timeout { .. }), "{error:?}");
        assert!(error.is_retriable());
        assert!(error.to_string().contains("did not answer"), "{error}");
    }
}
