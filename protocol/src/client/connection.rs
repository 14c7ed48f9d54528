//! One TCP connection to a broker shard: handshake, framed requests,
//! pipelining (send many, then receive in order), typed errors.

use super::tls::Stream;
use super::{ClientConfig, ClientError};
use crate::codec::{self, verify};
use crate::frame::{self, Api, FramePrefix, API_VERSION, FRAME_BYTES_MAX, FRAME_PREFIX_BYTES};
use crate::{wire, ErrorCode};
use flatbuffers::FlatBufferBuilder;
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A response frame as received.
#[derive(Debug, Default)]
pub struct ResponseFrame {
    /// The api it answers.
    pub api: u16,
    /// The request id it answers.
    pub request_id: u32,
    /// The flatbuffer header.
    pub header: Vec<u8>,
    /// Raw bytes after the header (a fetch's log chunk).
    pub payload: Vec<u8>,
    /// How long the connection's principal stays over a quota, from this
    /// answer on (0 from a broker that does not say: PROTOCOL.md §1,
    /// "throttled frames").
    pub throttle_ms: u32,
}

/// What the broker said in the handshake.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerHello {
    /// The broker's id.
    pub broker_id: u32,
    /// The shard this connection landed on.
    pub shard_id: u16,
    /// Shards in the broker.
    pub shard_count: u16,
    /// The broker's build ("VERSION (GIT_REVISION)"); empty from a broker
    /// that predates the field.
    pub broker_version: String,
    /// Who this connection acts as ("User:alice", "User:ANONYMOUS");
    /// empty from a broker that predates logins.
    pub principal: String,
}

/// A connection to one broker shard. Not thread-safe; one owner at a time.
///
/// Requests are written to a buffer; [`Connection::flush`] sends them.
/// Responses arrive in request order and are read with [`Connection::recv`].
pub struct Connection {
    reader: BufReader<Stream>,
    writer: BufWriter<Stream>,
    next_request_id: u32,
    /// A reusable builder for request headers.
    pub fbb: FlatBufferBuilder<'static>,
    hello: BrokerHello,
    address: String,
    request_timeout: Duration,
    /// The read timeout in force (request_timeout plus a long-poll's wait).
    waiting: Duration,
    /// The broker puts a throttle time in every answer's frame.
    throttled_frames: bool,
    /// The last answer's throttle time runs out then: the next request
    /// waits for it.
    quiet_until: Option<Instant>,
    /// Throttle times reported on this connection, in milliseconds, added
    /// up here and, when set, into its client's total.
    throttled_ms: u64,
    throttle_sink: Option<Arc<AtomicU64>>,
}

impl Connection {
    /// Connects and performs the version handshake, with the default
    /// [`ClientConfig`] timeouts.
    pub fn connect(address: &str) -> Result<Connection, ClientError> {
        Connection::connect_with(address, &ClientConfig::default())
    }

    /// Connects within `config.connect_timeout` (TCP connect, then the
    /// handshake's answer) and sets `config.request_timeout` for requests.
    #[expect(
        clippy::too_many_lines,
        reason = "a connection's opening in protocol order: TCP, TLS, the Handshake and the SCRAM login"
    )]
    pub fn connect_with(address: &str, config: &ClientConfig) -> Result<Connection, ClientError> {
        let handshake_timeout = config.connect_timeout.max(Duration::from_millis(1));
        let addrs: Vec<_> = address
            .to_socket_addrs()
            .map_err(|e| ClientError::Connect {
                address: address.to_string(),
                source: e,
            })?
            .collect();
        let mut last_error = None;
        let mut stream = None;
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, handshake_timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last_error = Some(e),
            }
        }
        let stream = stream.ok_or_else(|| ClientError::Connect {
            address: address.to_string(),
            source: last_error.unwrap_or_else(|| std::io::Error::other("no addresses")),
        })?;
        stream.set_nodelay(true)?;
        // A broker that accepts but never answers (stopped, overloaded, not
        // a ringlog broker) must not hold the caller forever: the handshake
        // has a deadline, and a bootstrap list moves on to the next address.
        stream.set_read_timeout(Some(handshake_timeout))?;
        // With TLS, its handshake first, under the same deadline.
        let stream = Stream::open(stream, config.tls.as_ref(), address).map_err(|e| {
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) {
                ClientError::Timeout {
                    address: address.to_string(),
                    during: "the TLS handshake",
                    waited: handshake_timeout,
                }
            } else {
                ClientError::Connect {
                    address: address.to_string(),
                    source: e,
                }
            }
        })?;
        let reader = BufReader::with_capacity(256 * 1024, stream.try_clone()?);
        let writer = BufWriter::with_capacity(256 * 1024, stream);
        let mut conn = Connection {
            reader,
            writer,
            next_request_id: 0,
            fbb: FlatBufferBuilder::with_capacity(1024),
            hello: BrokerHello::default(),
            address: address.to_string(),
            request_timeout: config.request_timeout.max(Duration::from_millis(1)),
            waiting: handshake_timeout,
            throttled_frames: false,
            quiet_until: None,
            throttled_ms: 0,
            throttle_sink: None,
        };
        let name = format!("ringlog-rust/{}", env!("CARGO_PKG_VERSION"));
        let login =
            match &config.login {
                Some(login) => Some(crate::scram::client_first(&login.user).map_err(|e| {
                    ClientError::Login {
                        address: address.to_string(),
                        reason: e.to_string(),
                    }
                })?),
                None => None,
            };
        // Every answer after the handshake's should say how long the
        // principal is over its quota, so the client waits instead of
        // sending requests the broker would hold (issue 46, item 3).
        let first = login
            .as_ref()
            .map(|(_, first)| (crate::scram::MECHANISM, first.as_slice()));
        let header = codec::handshake(&mut conn.fbb, &name, first, true).to_vec();
        let response = match conn.call(Api::Handshake, &header, &[]) {
            Ok(response) => response,
            Err(ClientError::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(ClientError::Timeout {
                    address: address.to_string(),
                    during: "the handshake",
                    waited: handshake_timeout,
                });
            }
            Err(ClientError::Io(e))
                if e.kind() == std::io::ErrorKind::UnexpectedEof && config.tls.is_none() =>
            {
                // What a TLS-only broker does with a plain handshake frame.
                return Err(ClientError::Connect {
                    address: address.to_string(),
                    source: std::io::Error::new(
                        e.kind(),
                        "the broker closed the connection without answering the handshake (does it require TLS? give the client a TLS config: --tls-ca in the CLI)",
                    ),
                });
            }
            Err(other) => return Err(other),
        };
        let hello = verify::<wire::HandshakeResponse>(&response.header)
            .map_err(|e| ClientError::protocol(format!("handshake response: {e}")))?;
        conn.hello = BrokerHello {
            broker_id: hello.broker_id(),
            shard_id: hello.shard_id(),
            shard_count: hello.shard_count(),
            broker_version: hello.broker_version().unwrap_or_default().to_string(),
            principal: hello.principal().unwrap_or_default().to_string(),
        };
        conn.throttled_frames = hello.throttle_in_frames();
        if let (Some((exchange, _)), Some(login)) = (login, &config.login) {
            let server_first = hello
                .sasl_bytes()
                .map(|b| b.bytes().to_vec())
                .unwrap_or_default();
            let after_proof = conn.authenticate(exchange, login, &server_first)?;
            // A broker older than the withheld hello said it all before.
            if !after_proof.broker_version.is_empty() {
                conn.hello = after_proof;
            } else {
                conn.hello.principal = after_proof.principal;
            }
        }
        conn.expect_wait(Duration::ZERO)?;
        Ok(conn)
    }

    /// The rest of a SCRAM login begun in the Handshake: the proof, and
    /// the check of the broker's signature. Returns the principal and who
    /// the broker is (told only after the proof).
    fn authenticate(
        &mut self,
        exchange: crate::scram::ClientFirst,
        login: &super::Login,
        server_first: &[u8],
    ) -> Result<BrokerHello, ClientError> {
        let failed = |reason: String| ClientError::Login {
            address: self.address.clone(),
            reason,
        };
        let (exchange, proof) = exchange
            .finish(&login.password, server_first)
            .map_err(|e| failed(e.to_string()))?;
        let header = codec::security::authenticate_request(&mut self.fbb, &proof).to_vec();
        let response = self.call(Api::Authenticate, &header, &[])?;
        let answer = verify::<wire::AuthenticateResponse>(&response.header)
            .map_err(|e| ClientError::protocol(format!("authenticate response: {e}")))?;
        exchange
            .verify(answer.sasl_bytes().map(|b| b.bytes()).unwrap_or_default())
            .map_err(|e| ClientError::Login {
                address: self.address.clone(),
                reason: e.to_string(),
            })?;
        Ok(BrokerHello {
            broker_id: answer.broker_id(),
            shard_id: answer.shard_id(),
            shard_count: answer.shard_count(),
            broker_version: answer.broker_version().unwrap_or_default().to_string(),
            principal: answer.principal().unwrap_or_default().to_string(),
        })
    }

    /// Another handle on the socket, to shut it down from another thread
    /// (which makes a blocked read on this connection return).
    pub fn socket(&self) -> Result<TcpStream, ClientError> {
        Ok(self.writer.get_ref().socket().try_clone()?)
    }

    /// The address this connection was opened to.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// What the broker said in the handshake.
    pub fn hello(&self) -> &BrokerHello {
        &self.hello
    }

    /// Queues a request; returns its id. Nothing is sent until [`Connection::flush`]
    /// (or until the write buffer fills).
    pub fn send(&mut self, api: Api, header: &[u8], payload: &[u8]) -> Result<u32, ClientError> {
        if let Some(until) = self.quiet_until.take() {
            // Over a quota: the broker would hold this request until then
            // anyway; waiting here keeps it out of the broker's queues.
            self.writer.flush()?;
            std::thread::sleep(until.saturating_duration_since(Instant::now()));
        }
        let request_id = self.next_request_id;
        self.next_request_id = self.next_request_id.wrapping_add(1);
        let mut prefix = Vec::with_capacity(FRAME_PREFIX_BYTES);
        frame::write_prefix(
            &mut prefix,
            api as u16,
            API_VERSION,
            request_id,
            header.len(),
            payload.len(),
        );
        self.writer.write_all(&prefix)?;
        self.writer.write_all(header)?;
        self.writer.write_all(payload)?;
        Ok(request_id)
    }

    /// Sends everything queued.
    pub fn flush(&mut self) -> Result<(), ClientError> {
        self.writer.flush()?;
        Ok(())
    }

    /// How long a response may take beyond the wait a request asks for
    /// (default [`ClientConfig::request_timeout`]). A broker that accepts but never
    /// answers (stopped, overloaded) then fails the read with
    /// [`ClientError::Timeout`]; the connection must be dropped after it.
    pub fn set_request_timeout(&mut self, timeout: Duration) -> Result<(), ClientError> {
        self.request_timeout = timeout.max(Duration::from_millis(1));
        self.expect_wait(Duration::ZERO)
    }

    /// Allows the next responses `wait` more than the request timeout (a
    /// long-poll asks the broker to hold its answer that long).
    pub fn expect_wait(&mut self, wait: Duration) -> Result<(), ClientError> {
        let waiting = self.request_timeout + wait;
        if waiting != self.waiting {
            self.writer
                .get_ref()
                .socket()
                .set_read_timeout(Some(waiting))?;
            self.waiting = waiting;
        }
        Ok(())
    }

    /// Reads the next response into `into` (reusing its buffers). A response
    /// with a non-zero error code becomes `ClientError::Broker`; no response
    /// within the timeout, `ClientError::Timeout`.
    pub fn recv_into(&mut self, into: &mut ResponseFrame) -> Result<(), ClientError> {
        into.throttle_ms = 0;
        let read = read_response_with(&mut self.reader, into, self.throttled_frames);
        if into.throttle_ms > 0 {
            let throttle = Duration::from_millis(u64::from(into.throttle_ms));
            self.quiet_until = Some(Instant::now() + throttle);
            self.throttled_ms += u64::from(into.throttle_ms);
            if let Some(sink) = &self.throttle_sink {
                sink.fetch_add(u64::from(into.throttle_ms), Ordering::Relaxed);
            }
        }
        match read {
            Err(ClientError::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Err(ClientError::Timeout {
                    address: self.address.clone(),
                    during: "the request",
                    waited: self.waiting,
                })
            }
            other => other,
        }
    }

    /// Reads the next response.
    pub fn recv(&mut self) -> Result<ResponseFrame, ClientError> {
        let mut frame = ResponseFrame::default();
        self.recv_into(&mut frame)?;
        Ok(frame)
    }

    /// Sends one request and waits for its response.
    pub fn call(
        &mut self,
        api: Api,
        header: &[u8],
        payload: &[u8],
    ) -> Result<ResponseFrame, ClientError> {
        let id = self.send(api, header, payload)?;
        self.flush()?;
        let response = self.recv()?;
        if response.request_id != id {
            return Err(ClientError::protocol(format!(
                "response id {} does not match request id {id}",
                response.request_id
            )));
        }
        Ok(response)
    }

    /// Whether the broker puts a throttle time in every answer's frame
    /// (read them with [`read_response_with`]).
    pub fn throttled_frames(&self) -> bool {
        self.throttled_frames
    }

    /// The throttle times the broker reported on this connection, added
    /// up: how long it asked this client to wait (and it did).
    pub fn throttled(&self) -> Duration {
        Duration::from_millis(self.throttled_ms)
    }

    /// Adds this connection's throttle times into `sink` too (a client's
    /// total over its connections).
    pub fn add_throttle_to(&mut self, sink: Arc<AtomicU64>) {
        self.throttle_sink = Some(sink);
    }

    /// A second handle on the socket for a reader thread, plus the writer.
    /// The read timeout is lifted: a reader thread waits as long as its
    /// owner has requests outstanding, and decides itself how long is too
    /// long. Read its answers with [`read_response_with`] and
    /// [`Connection::throttled_frames`] (taken before the split): the
    /// broker may put throttle times in them.
    pub fn split(self) -> (BufReader<Stream>, BufWriter<Stream>) {
        let _ = self.writer.get_ref().socket().set_read_timeout(None);
        (self.reader, self.writer)
    }
}

/// Reads one response frame from `reader`.
pub fn read_response(reader: &mut impl Read, into: &mut ResponseFrame) -> Result<(), ClientError> {
    read_response_with(reader, into, false)
}

/// Reads one response frame from `reader`; `throttled`: a connection whose
/// answers carry a throttle time after the prefix (set in `into`, error
/// answers too).
pub fn read_response_with(
    reader: &mut impl Read,
    into: &mut ResponseFrame,
    throttled: bool,
) -> Result<(), ClientError> {
    let mut prefix_bytes = [0u8; FRAME_PREFIX_BYTES];
    reader.read_exact(&mut prefix_bytes)?;
    let prefix = FramePrefix::parse(&prefix_bytes, FRAME_BYTES_MAX)
        .map_err(|e| ClientError::protocol(e.to_string()))?;
    into.api = prefix.api;
    into.request_id = prefix.request_id;
    let payload_len = if throttled {
        let len = prefix.throttled_payload_len().ok_or_else(|| {
            ClientError::protocol("a throttled answer too short for its throttle time")
        })?;
        let mut throttle = [0u8; frame::THROTTLE_BYTES];
        reader.read_exact(&mut throttle)?;
        into.throttle_ms = u32::from_le_bytes(throttle);
        len
    } else {
        into.throttle_ms = 0;
        prefix.payload_len()
    };
    into.header.resize(prefix.header_len, 0);
    reader.read_exact(&mut into.header)?;
    into.payload.resize(payload_len, 0);
    reader.read_exact(&mut into.payload)?;
    if prefix.version_or_error != 0 {
        return Err(broker_error(prefix.version_or_error, &into.header));
    }
    Ok(())
}

/// Decodes an error response header.
fn broker_error(code: u16, header: &[u8]) -> ClientError {
    let code = ErrorCode::from_u16(code).unwrap_or(ErrorCode::Internal);
    match verify::<wire::ErrorResponse>(header) {
        Ok(error) => ClientError::Broker {
            code,
            message: error.message().unwrap_or_default().to_string(),
            range: (code == ErrorCode::OffsetOutOfRange)
                .then(|| (error.start_offset(), error.end_offset())),
            owner_broker_id: matches!(
                code,
                ErrorCode::NotOwner
                    | ErrorCode::NotLeader
                    | ErrorCode::FencedLeaderEpoch
                    | ErrorCode::NotEnoughReplicasAfterAppend
            )
            .then(|| error.owner_broker_id()),
        },
        Err(e) => ClientError::Broker {
            code,
            message: format!("(undecodable error header: {e})"),
            range: None,
            owner_broker_id: None,
        },
    }
}
