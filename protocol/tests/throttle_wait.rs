//! The client's side of throttled frames (PROTOCOL.md §1; issue 46, item
//! 3), against a scripted broker on a local socket: the client asks for
//! them, reads the throttle time of every answer (errors too), waits it
//! out before its next request on the connection and adds it up; and a
//! broker that does not grant them is read as before.
#![allow(clippy::unwrap_used)] // a test: a failed step is the failure

use protocol::client::{ClientError, Connection};
use protocol::codec::{self, BrokerHello, ErrorDetails, HandshakeLogin, Metadata};
use protocol::frame::{self, Api, FramePrefix, FRAME_BYTES_MAX, FRAME_PREFIX_BYTES};
use protocol::{wire, ErrorCode};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Reads one request: its api, id and header.
fn read_request(stream: &mut TcpStream) -> (u16, u32, Vec<u8>) {
    let mut prefix = [0u8; FRAME_PREFIX_BYTES];
    stream.read_exact(&mut prefix).unwrap();
    let prefix = FramePrefix::parse(&prefix, FRAME_BYTES_MAX).unwrap();
    let mut rest = vec![0u8; prefix.frame_bytes - FRAME_PREFIX_BYTES];
    stream.read_exact(&mut rest).unwrap();
    rest.truncate(prefix.header_len);
    (prefix.api, prefix.request_id, rest)
}

/// A broker that answers a Handshake (granting throttled frames when
/// `grant` and asked), then `answers` Metadata requests, each with its
/// (error code, throttle time); returns when each request arrived.
fn scripted_broker(
    grant: bool,
    answers: Vec<(u16, u32)>,
) -> (String, std::thread::JoinHandle<Vec<Instant>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let thread = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut fbb = flatbuffers::FlatBufferBuilder::new();
        let (api, id, header) = read_request(&mut stream);
        assert_eq!(api, Api::Handshake as u16);
        let asked = flatbuffers::root::<wire::HandshakeRequest>(&header)
            .unwrap()
            .throttle_in_frames();
        assert!(asked, "the client asks for throttled frames");
        let hello = BrokerHello {
            broker_id: 1,
            shard_id: 0,
            shard_count: 1,
            broker_version: "scripted",
        };
        let login = HandshakeLogin {
            next: None,
            principal: "User:ANONYMOUS",
        };
        let answer = codec::handshake_response(&mut fbb, Some(&hello), login, grant).to_vec();
        let mut out = Vec::new();
        frame::write_frame(&mut out, Api::Handshake as u16, 0, id, &answer, &[]);
        stream.write_all(&out).unwrap();
        let mut arrivals = Vec::new();
        for (error, throttle_ms) in answers {
            let (api, id, _) = read_request(&mut stream);
            arrivals.push(Instant::now());
            assert_eq!(api, Api::Metadata as u16);
            let header = if error == 0 {
                codec::metadata_response(&mut fbb, &Metadata::default()).to_vec()
            } else {
                let code = ErrorCode::from_u16(error).unwrap();
                codec::error_response(&mut fbb, code, "refused", ErrorDetails::default()).to_vec()
            };
            out.clear();
            if grant {
                frame::write_throttled_prefix(
                    &mut out,
                    api,
                    error,
                    id,
                    header.len(),
                    0,
                    throttle_ms,
                );
            } else {
                frame::write_prefix(&mut out, api, error, id, header.len(), 0);
            }
            out.extend_from_slice(&header);
            stream.write_all(&out).unwrap();
        }
        arrivals
    });
    (address, thread)
}

fn metadata(conn: &mut Connection) -> Result<(), ClientError> {
    let header = codec::metadata_request(&mut conn.fbb, &[]).to_vec();
    conn.call(Api::Metadata, &header, &[]).map(|_| ())
}

#[test]
fn the_next_request_waits_out_the_last_answers_throttle_time_and_it_is_added_up() {
    // 300 ms on an answer, 200 ms on an error answer, then none.
    let refused = ErrorCode::AuthorizationFailed as u16;
    let (address, broker) = scripted_broker(true, vec![(0, 300), (refused, 200), (0, 0), (0, 0)]);
    let mut conn = Connection::connect(&address).unwrap();
    assert!(conn.throttled_frames());
    let answered = Instant::now();
    metadata(&mut conn).unwrap();
    let error = metadata(&mut conn).unwrap_err();
    assert_eq!(
        error.code(),
        Some(ErrorCode::AuthorizationFailed),
        "{error}"
    );
    metadata(&mut conn).unwrap();
    metadata(&mut conn).unwrap();
    let arrivals = broker.join().unwrap();
    // Each request came no sooner than the last answer's throttle time
    // allowed (a lower bound: sleeping never ends early).
    assert!(arrivals[1] - arrivals[0] >= Duration::from_millis(300));
    assert!(arrivals[2] - arrivals[1] >= Duration::from_millis(200));
    assert!(arrivals[0] >= answered);
    assert_eq!(conn.throttled(), Duration::from_millis(500));
}

#[test]
fn a_broker_that_does_not_grant_throttled_frames_is_read_as_before() {
    let (address, broker) = scripted_broker(false, vec![(0, 0), (0, 0)]);
    let mut conn = Connection::connect(&address).unwrap();
    assert!(!conn.throttled_frames());
    metadata(&mut conn).unwrap();
    metadata(&mut conn).unwrap();
    broker.join().unwrap();
    assert_eq!(conn.throttled(), Duration::ZERO);
}
