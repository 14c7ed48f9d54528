//! One client connection: read → verify → dispatch → respond in order.
//!
//! Two tasks share the socket. The *reader* parses every whole frame in its
//! buffer and dispatches it at once — so a produce is appended in the order
//! it arrived and pipelined requests never wait for earlier responses — then
//! queues what the handler returned. The *writer* takes the queue in order,
//! awaits responses that are not ready yet (acknowledgements, long-polls,
//! forwarded requests), batches small responses into one write and sends
//! fetch payloads with sendfile. While it waits on a fetch long-poll it
//! keeps polling the answers behind it, and asks the fetch to give way as
//! soon as one is ready (see `handler/give_way.rs`). At most
//! `max_inflight_requests` responses and `connection_inflight_bytes_max`
//! bytes (request frames still awaiting answers, response headers not yet
//! written) wait; past either the reader stops reading and TCP pushes back.
//!
//! Bad input: an oversized or malformed frame prefix is answered with an
//! error and the connection is closed (the stream cannot be resynchronised);
//! a bad flatbuffer header, unknown api or bad message set is answered with
//! an error and the connection goes on.
//!
//! Bounds (issue 8, items 1 and 2): before its Handshake a connection may
//! declare frames of at most `HANDSHAKE_FRAME_BYTES_MAX`, into a 4 KiB
//! read buffer (`LOGIN_READ_BUFFER_BYTES`, 256 KiB once logged in); the buffer
//! grows only as bytes arrive (at most doubling when full), so a declared
//! size costs nothing until it is sent; and three deadlines close a
//! connection that holds resources without using them: the Handshake must
//! come within `handshake_timeout_ms`, a frame that has begun must be whole
//! within `frame_timeout_ms`, and a connection with nothing to read and no
//! response pending is closed after `idle_timeout_ms`.

use super::cold;
use super::sendfile::{self, Sent};
use crate::handler::give_way::GiveWay;
use crate::handler::{self, Dispatched, Later, Payload, Request, Response};
use crate::limits::{HANDSHAKE_FRAME_BYTES_MAX, LOGIN_READ_BUFFER_BYTES, READ_BUFFER_BYTES};
use crate::notify::Notify;
use crate::shard::Shard;
use futures_lite::{AsyncRead, AsyncWrite};
use glommio::net::TcpStream;
use protocol::codec::verify;
use protocol::frame::{self, Api, FrameError, FramePrefix, FRAME_PREFIX_BYTES};
use protocol::{wire, ErrorCode};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::time::{Duration, Instant};

enum Queued {
    /// Request id and the response; its header bytes count in
    /// `Conn::inflight_bytes` until the writer has taken them.
    Ready(u32, Response),
    /// Request id, api, the response to come, and the request frame's size
    /// (counted in `Conn::inflight_bytes` until it resolves).
    Later(u32, u16, Later, u64),
    /// A `Later` that resolved while it waited behind another answer.
    Done(u32, u16, Option<Response>, u64),
    Close,
}

/// A connection's byte stream: the socket, or the socket through TLS.
enum Transport {
    Plain(TcpStream),
    Tls(Box<futures_rustls::server::TlsStream<TcpStream>>),
}

impl Transport {
    fn poll_read(
        &mut self,
        cx: &mut std::task::Context<'_>,
        buf: &mut [u8],
    ) -> std::task::Poll<io::Result<usize>> {
        match self {
            Transport::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Transport::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }

    fn poll_write(
        &mut self,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        match self {
            Transport::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Transport::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_flush(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<()>> {
        match self {
            Transport::Plain(s) => Pin::new(s).poll_flush(cx),
            Transport::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_close(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<()>> {
        match self {
            Transport::Plain(s) => Pin::new(s).poll_close(cx),
            Transport::Tls(s) => Pin::new(&mut **s).poll_close(cx),
        }
    }
}

/// The TLS handshake, within the connection's handshake deadline.
async fn accept_tls(shard: &Shard, stream: TcpStream) -> Option<Transport> {
    let Some(acceptor) = super::tls::acceptor() else {
        return Some(Transport::Plain(stream));
    };
    let deadline = Duration::from_millis(shard.config.handshake_timeout_ms);
    let accepted = futures_lite::future::or(async { Some(acceptor.accept(stream).await) }, async {
        glommio::timer::sleep(deadline).await;
        None
    })
    .await;
    match accepted {
        Some(Ok(tls)) => Some(Transport::Tls(Box::new(tls))),
        Some(Err(error)) => {
            crate::metrics::bump(&shard.metrics.counters.tls_handshake_failures_total, 1);
            tracing::debug!(%error, "TLS handshake failed");
            None
        }
        None => {
            crate::metrics::bump(&shard.metrics.counters.tls_handshake_failures_total, 1);
            tracing::debug!("TLS handshake timed out");
            None
        }
    }
}

struct Conn {
    stream: RefCell<Transport>,
    /// The client's address (failed logins are counted per address).
    address: Option<std::net::IpAddr>,
    /// The principal of the client's verified TLS certificate, or why it
    /// has none; `None` without a certificate.
    certificate: Option<Result<String, String>>,
    /// Once open: the principal's quota usage, when a quota applies to it
    /// (its connection is counted there while it lives).
    quota: RefCell<Option<crate::auth::quota::PrincipalSlot>>,
    /// A quota's delay: nothing more is read from the client until then.
    muted_until: Cell<Option<Instant>>,
    /// Counted as not logged in yet, until it is.
    pending: RefCell<Option<crate::auth::pending::Slot>>,
    /// Counted in the shard's gauge of connections not logged in, until it
    /// logs in or closes.
    unauthenticated: Cell<bool>,
    /// Logged in with SCRAM: ended when its user is removed.
    session: RefCell<Option<crate::auth::sessions::Session>>,
    /// Encrypted: fetches are read and written through the session, not
    /// sent with sendfile.
    tls: bool,
    fd: RawFd,
    queue: RefCell<VecDeque<Queued>>,
    queued: Notify,
    drained: Notify,
    closed: Cell<bool>,
    /// Bytes this connection holds for its client: request frames of
    /// dispatched requests whose answers are still to come, and response
    /// headers not yet written (a Metadata of thousands of partitions is
    /// large, and cheap to ask for).
    inflight_bytes: Cell<u64>,
    give_way: Rc<GiveWay>,
}

/// Serves one connection until the peer closes it or it breaks.
pub async fn serve(shard: Rc<Shard>, stream: TcpStream) {
    let fd = stream.as_raw_fd();
    if let Err(error) = sendfile::set_nonblocking(fd) {
        tracing::warn!(%error, "cannot make the socket non-blocking; closing it");
        return;
    }
    let _ = stream.set_nodelay(true);
    let address = stream.peer_addr().ok().map(|a| a.ip());
    // Counted against its address's bound while it lives.
    let _address_slot = match address.map(|a| crate::auth::quota::quotas().admit_address(a)) {
        Some(Err(message)) => return refuse_at_accept(&shard, stream, &message).await,
        Some(Ok(slot)) => slot,
        None => None,
    };
    // Counted as not logged in yet until it is (auth/pending.rs).
    let pending = match address.map(|a| crate::auth::pending::pending().admit_connection(a)) {
        Some(Err(message)) => return refuse_at_accept(&shard, stream, &message).await,
        Some(Ok(slot)) => Some(slot),
        None => None,
    };
    let Some(stream) = accept_tls(&shard, stream).await else {
        return;
    };
    let certificate = match &stream {
        Transport::Tls(tls) => tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|der| crate::auth::certificate::principal(der)),
        Transport::Plain(_) => None,
    };
    let conn = Rc::new(Conn {
        address,
        certificate,
        quota: RefCell::new(None),
        pending: RefCell::new(pending),
        unauthenticated: Cell::new(false),
        session: RefCell::new(None),
        muted_until: Cell::new(None),
        tls: matches!(stream, Transport::Tls(_)),
        stream: RefCell::new(stream),
        fd,
        queue: RefCell::new(VecDeque::new()),
        queued: Notify::new(),
        drained: Notify::new(),
        closed: Cell::new(false),
        inflight_bytes: Cell::new(0),
        give_way: Rc::new(GiveWay::default()),
    });
    count_unauthenticated(&shard, &conn, true);
    let writer = glommio::spawn_local(write_loop(shard.clone(), conn.clone()));
    if let Err(error) = read_loop(&shard, &conn).await {
        tracing::debug!(%error, "connection read ended");
    }
    count_unauthenticated(&shard, &conn, false);
    push(&shard, &conn, Queued::Close);
    writer.await;
}

/// Counts the connection in (or out of) the shard's gauge of connections
/// not logged in.
fn count_unauthenticated(shard: &Shard, conn: &Conn, counted: bool) {
    if conn.unauthenticated.replace(counted) != counted {
        let gauge = &shard.metrics.connections_unauthenticated;
        gauge.set(if counted {
            gauge.get() + 1
        } else {
            gauge.get().saturating_sub(1)
        });
    }
}

impl Conn {
    /// Why its session was ended (its user removed), if it was.
    fn ended(&self) -> Option<String> {
        self.session.borrow().as_ref().and_then(|s| s.end().why())
    }

    /// Resolves once its session is ended; never without a session.
    async fn session_ended(&self) {
        let end = self.session.borrow().as_ref().map(|s| s.end().clone());
        match end {
            Some(end) => end.ended().await,
            None => std::future::pending().await,
        }
    }
}

/// Answers a connection over `max_connections` with one OVERLOADED error
/// frame (request id 0, api Handshake, as a reply to the Handshake it would
/// send) and closes it.
pub async fn refuse(stream: TcpStream) {
    refuse_saying(
        stream,
        "the broker serves max_connections connections already; retry later or raise max_connections",
    )
    .await
}

/// Answers a connection with one OVERLOADED error frame saying `message`,
/// and closes it.
/// A connection refused before it is served (a bound of its address):
/// counted, logged once a second, told why (not over TLS), closed.
async fn refuse_at_accept(shard: &Shard, stream: TcpStream, message: &str) {
    crate::metrics::bump(&shard.metrics.counters.connections_refused_total, 1);
    if let Some(left_out) = shard.accept_problems.allow() {
        tracing::warn!(left_out, "refused a connection: {message}");
    }
    if super::tls::acceptor().is_none() {
        refuse_saying(stream, message).await;
    }
}

async fn refuse_saying(stream: TcpStream, message: &str) {
    let response =
        handler::error_response(Api::Handshake as u16, ErrorCode::Overloaded, message, None);
    let mut out = Vec::new();
    frame::write_frame(
        &mut out,
        response.api,
        response.error,
        0,
        &response.header,
        &[],
    );
    // Under TLS a plain frame would be unreadable, and answering through a
    // TLS handshake would hold a descriptor per refused connection for up to
    // the handshake deadline — past max_connections, the very thing the
    // limit is for. So a TLS broker closes at once (the client sees the
    // connection closed during its handshake).
    if super::tls::acceptor().is_some() {
        return;
    }
    let mut stream = stream;
    let _ = futures_lite::AsyncWriteExt::write_all(&mut stream, &out).await;
    let _ = futures_lite::AsyncWriteExt::close(&mut stream).await;
}

fn push(shard: &Shard, conn: &Conn, item: Queued) {
    if conn.closed.get() {
        return; // The writer is gone; nothing will take it.
    }
    shard
        .responses_pending
        .set(shard.responses_pending.get() + 1);
    conn.queue.borrow_mut().push_back(item);
    conn.queued.notify_all();
}

async fn read_some(conn: &Conn, buf: &mut [u8]) -> io::Result<usize> {
    poll_fn(|cx| conn.stream.borrow_mut().poll_read(cx, buf)).await
}

async fn write_all(conn: &Conn, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        let n = poll_fn(|cx| conn.stream.borrow_mut().poll_write(cx, buf)).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n..];
    }
    if conn.tls {
        // The session buffers records: push them to the socket now.
        poll_fn(|cx| conn.stream.borrow_mut().poll_flush(cx)).await?;
    }
    Ok(())
}

/// How long a connection keeps a read buffer grown for large frames when
/// no bytes come (a mirror's or batching producer's next append is
/// usually much closer).
const LARGE_BUFFER_KEEP: Duration = Duration::from_secs(1);

/// Why a connection's read ended on a deadline.
#[derive(Debug, Clone, Copy)]
enum Deadline {
    Handshake,
    Frame,
    Idle,
    /// A grown read buffer is kept this long for the next large frame,
    /// then given back (the connection stays open).
    KeepBuffer,
}

/// The read buffer's next size when it is full and the frame at its front
/// needs `frame_bytes`: doubling, never past the frame.
fn grown(len: usize, frame_bytes: usize) -> usize {
    len.saturating_mul(2).min(frame_bytes).max(len)
}

async fn read_loop(shard: &Rc<Shard>, conn: &Conn) -> io::Result<()> {
    let mut buf = vec![0u8; LOGIN_READ_BUFFER_BYTES];
    let mut filled = 0usize;
    let mut access = Access::Handshake;
    let config = &shard.config;
    let connected_at = Instant::now();
    let mut frame_started_at = connected_at;
    // The last whole frame needed a grown buffer: the next likely does too
    // (a mirror's or a batching producer's appends, one at a time).
    let mut large_frame = false;
    loop {
        let handshaken = matches!(access, Access::Open(_));
        if handshaken && buf.len() < READ_BUFFER_BYTES {
            // Logged in: a buffer for requests (pipelined produces).
            buf.resize(READ_BUFFER_BYTES, 0);
        }
        let frame_max = if handshaken {
            config.max_request_bytes
        } else {
            HANDSHAKE_FRAME_BYTES_MAX
        };
        let mut start = 0usize;
        while filled - start >= FRAME_PREFIX_BYTES {
            let mut prefix_bytes = [0u8; FRAME_PREFIX_BYTES];
            prefix_bytes.copy_from_slice(&buf[start..start + FRAME_PREFIX_BYTES]);
            let prefix = match FramePrefix::parse(&prefix_bytes, frame_max) {
                Ok(prefix) => prefix,
                Err(error) => {
                    let request_id = u32::from_le_bytes([
                        prefix_bytes[8],
                        prefix_bytes[9],
                        prefix_bytes[10],
                        prefix_bytes[11],
                    ]);
                    let api = u16::from_le_bytes([prefix_bytes[4], prefix_bytes[5]]);
                    let code = match error {
                        FrameError::TooLarge { .. } => ErrorCode::FrameTooLarge,
                        _ => ErrorCode::InvalidRequest,
                    };
                    crate::metrics::bump(&shard.metrics.counters.request_errors_total, 1);
                    let message = format!("{error}; closing the connection");
                    push(
                        shard,
                        conn,
                        Queued::Ready(
                            request_id,
                            handler::error_response(api, code, &message, None),
                        ),
                    );
                    return Ok(());
                }
            };
            if filled - start < prefix.frame_bytes {
                break;
            }
            large_frame = prefix.frame_bytes > READ_BUFFER_BYTES;
            let header_start = start + FRAME_PREFIX_BYTES;
            let payload_start = header_start + prefix.header_len;
            let frame_end = start + prefix.frame_bytes;
            let header = &buf[header_start..payload_start];
            let payload = &buf[payload_start..frame_end];
            if let Some(why) = conn.ended() {
                tracing::debug!(shard = shard.id, "closing a connection: {why}");
                return Ok(());
            }
            let dispatched = if let Access::Open(principal) = &access {
                // A quota: the request waits its principal's turn, and the
                // client's next requests wait in its socket meanwhile.
                let held = quota_wait(conn, prefix, payload.len());
                if !held.is_zero() {
                    glommio::timer::sleep(held).await;
                }
                // Producers wait while the shard's unwritten bytes are over
                // its share of unwritten_bytes_max (issue 8, item 14): this
                // connection stops reading until the disk catches up.
                if prefix.api == Api::Produce as u16 && shard.unwritten.over() {
                    shard.unwritten.wait_for_room().await;
                }
                let request = Request {
                    api: prefix.api,
                    version: prefix.version_or_error,
                    request_id: prefix.request_id,
                    header,
                    payload,
                    principal: Some(principal),
                };
                let dispatched = handler::dispatch(shard, &conn.give_way, request);
                report_throttle(held, dispatched)
            } else {
                // A login's place among its address's logins under way,
                // waited for (as long as the handshake may take): a client
                // starting many connections at once is slowed, not refused.
                let under_way = match conn.address {
                    Some(address)
                        if prefix.api == Api::Handshake as u16
                            && matches!(access, Access::Handshake) =>
                    {
                        let until =
                            connected_at + Duration::from_millis(config.handshake_timeout_ms);
                        Some(exchange_slot(address, until).await)
                    }
                    _ => None,
                };
                match login_frame(shard, conn, &mut access, prefix, header, under_way) {
                    Ok(response) => Dispatched::Ready(response),
                    Err(response) => {
                        // A failed login: answered after the delay, then
                        // the connection closes.
                        let delay = Duration::from_millis(config.login_failure_delay_ms);
                        glommio::timer::sleep(delay).await;
                        push(shard, conn, Queued::Ready(prefix.request_id, response));
                        return Ok(());
                    }
                }
            };
            start = frame_end;
            match dispatched {
                Dispatched::Silent => {}
                Dispatched::Ready(response) => {
                    let bytes = response.header.len() as u64;
                    conn.inflight_bytes.set(conn.inflight_bytes.get() + bytes);
                    push(shard, conn, Queued::Ready(prefix.request_id, response))
                }
                Dispatched::Later(later) => {
                    let bytes = prefix.frame_bytes as u64;
                    conn.inflight_bytes.set(conn.inflight_bytes.get() + bytes);
                    push(
                        shard,
                        conn,
                        Queued::Later(prefix.request_id, prefix.api, later, bytes),
                    )
                }
                Dispatched::Throttle(until) => until.await,
            }
            let requests_max = config.max_inflight_requests;
            if conn.queue.borrow().len() >= requests_max {
                conn.drained
                    .wait_until(|| {
                        conn.closed.get() || conn.queue.borrow().len() < requests_max.div_ceil(2)
                    })
                    .await;
            }
            // Requests waiting for their answers hold memory (a forwarded
            // produce its payload): bound the bytes, not only the count
            // (issue 8, item 6).
            let bytes_max = config.connection_inflight_bytes_max;
            if conn.inflight_bytes.get() >= bytes_max {
                conn.drained
                    .wait_until(|| conn.closed.get() || conn.inflight_bytes.get() < bytes_max / 2)
                    .await;
            }
            if conn.closed.get() {
                return Ok(());
            }
            // A buffer full of cheap-to-send, costly-to-answer requests
            // (Metadata of thousands of partitions) must not hold the
            // reactor: let other connections run between frames (issue 8,
            // item 7).
            glommio::yield_if_needed().await;
        }
        // Keep the unparsed tail at the front. A large frame's buffer grows
        // as its bytes arrive, not when its size is declared.
        buf.copy_within(start..filled, 0);
        filled -= start;
        if filled == buf.len() && filled >= FRAME_PREFIX_BYTES {
            let mut prefix_bytes = [0u8; FRAME_PREFIX_BYTES];
            prefix_bytes.copy_from_slice(&buf[..FRAME_PREFIX_BYTES]);
            if let Ok(prefix) = FramePrefix::parse(&prefix_bytes, frame_max) {
                buf.resize(grown(buf.len(), prefix.frame_bytes), 0);
            }
        } else if buf.len() > READ_BUFFER_BYTES && filled == 0 && !large_frame {
            // Large frames have passed; give the memory back. It is kept
            // while they keep coming: growing it again for every frame
            // (a copy, zeroing and page faults per doubling) cost a
            // mirror's 1 MiB appends 2.3x the broker CPU of 128 KiB ones.
            // An idle connection gives it back after LARGE_BUFFER_KEEP;
            // none holds more than max_request_bytes.
            buf.truncate(READ_BUFFER_BYTES);
            buf.shrink_to_fit();
        }
        if start > 0 && filled > 0 {
            // The rest of the buffer is the start of the next frame.
            frame_started_at = Instant::now();
        }
        let (deadline, why) = if !handshaken {
            (
                connected_at + Duration::from_millis(config.handshake_timeout_ms),
                Deadline::Handshake,
            )
        } else if filled > 0 {
            (
                frame_started_at + Duration::from_millis(config.frame_timeout_ms),
                Deadline::Frame,
            )
        } else {
            (
                Instant::now() + Duration::from_millis(config.idle_timeout_ms),
                Deadline::Idle,
            )
        };
        let keep_until = Instant::now() + LARGE_BUFFER_KEEP;
        let (deadline, why) =
            if buf.len() > READ_BUFFER_BYTES && filled == 0 && keep_until < deadline {
                (keep_until, Deadline::KeepBuffer)
            } else {
                (deadline, why)
            };
        let read = futures_lite::future::or(
            async { Some(read_some(conn, &mut buf[filled..]).await) },
            async {
                futures_lite::future::or(
                    glommio::timer::sleep(deadline.saturating_duration_since(Instant::now())),
                    conn.session_ended(),
                )
                .await;
                None
            },
        )
        .await;
        // Its user was removed: nothing more is read (what it asked before
        // is still answered), and the connection closes.
        if let Some(why) = conn.ended() {
            tracing::debug!(shard = shard.id, "closing a connection: {why}");
            return Ok(());
        }
        let n = match read {
            Some(read) => read?,
            // Idle, but a response is still on its way (a long-poll, an
            // acknowledgement): not idle after all.
            None if matches!(why, Deadline::Idle) && !conn.queue.borrow().is_empty() => continue,
            // No large frame came for a while: the buffer shrinks.
            None if matches!(why, Deadline::KeepBuffer) => {
                large_frame = false;
                continue;
            }
            None => {
                tracing::debug!(deadline = ?why, shard = shard.id, "closing a connection past its deadline");
                crate::metrics::bump(&shard.metrics.counters.connections_timed_out_total, 1);
                return Ok(());
            }
        };
        if n == 0 {
            return Ok(());
        }
        if filled == 0 {
            // The first bytes of a frame: its deadline starts now.
            frame_started_at = Instant::now();
        }
        filled += n;
    }
}

/// Where a connection stands in its opening.
enum Access {
    /// Waiting for the Handshake.
    Handshake,
    /// A SCRAM login under way: waiting for its Authenticate (counted
    /// against its address's logins under way).
    Login(
        Box<protocol::scram::ServerFirst>,
        Option<crate::auth::pending::Slot>,
    ),
    /// Open, acting as this principal.
    Open(Rc<str>),
}

/// A frame before the connection is open: the Handshake (with its login),
/// or a login's Authenticate. `Err` is a failed login's answer: the caller
/// sends it after the delay and closes the connection.
fn login_frame(
    shard: &Shard,
    conn: &Conn,
    access: &mut Access,
    prefix: FramePrefix,
    header: &[u8],
    under_way: Option<Result<crate::auth::pending::Slot, String>>,
) -> Result<Response, Response> {
    let api = prefix.api;
    let refused = |code, message: &str| handler::error_response(api, code, message, None);
    if matches!(access, Access::Login(..)) {
        if api != Api::Authenticate as u16 {
            return Ok(refused(
                ErrorCode::AuthenticationRequired,
                "a login is under way: finish it with Authenticate before any other request",
            ));
        }
        let Access::Login(exchange, _under_way) = std::mem::replace(access, Access::Handshake)
        else {
            return Ok(refused(ErrorCode::Internal, "no login under way"));
        };
        let request = match verify::<wire::AuthenticateRequest>(header) {
            Ok(request) => request,
            Err(e) => {
                let message = handler::invalid_header(Api::Authenticate, e).message;
                let refusal = crate::auth::login::Refusal {
                    code: ErrorCode::AuthenticationFailed,
                    message,
                    failed: true,
                    user: None,
                    counted: false,
                };
                return Err(login_failed(shard, conn, api, &refusal));
            }
        };
        let client_final = request.sasl_bytes().map(|b| b.bytes()).unwrap_or_default();
        return match crate::auth::login::finish(*exchange, client_final, conn.address) {
            Ok(proved) => {
                let header = handler::with_builder(shard, |fbb| {
                    protocol::codec::security::authenticate_response(
                        fbb,
                        &proved.server_final,
                        &proved.principal,
                        &hello(shard),
                    )
                    .to_vec()
                });
                opened(shard, conn, access, proved.principal, api)?;
                *conn.session.borrow_mut() = Some(shard.security.with(|snapshot| {
                    shard
                        .sessions
                        .open(&proved.user, proved.stored_key, snapshot)
                }));
                Ok(Response {
                    api,
                    error: 0,
                    header,
                    payload: Payload::None,
                })
            }
            Err(refusal) => Err(login_failed(shard, conn, api, &refusal)),
        };
    }
    if api != Api::Handshake as u16 {
        return Ok(refused(
            ErrorCode::HandshakeRequired,
            "the first request on a connection must be a Handshake",
        ));
    }
    // PROTOCOL.md §1: every api answers a layout version other than 0
    // with UNSUPPORTED_VERSION, the handshake too (issue 8, item 13).
    if prefix.version_or_error != frame::API_VERSION {
        return Ok(refused(
            ErrorCode::UnsupportedVersion,
            &format!(
                "Handshake api version {} is not supported (this broker speaks {})",
                prefix.version_or_error,
                frame::API_VERSION
            ),
        ));
    }
    let request = match verify::<wire::HandshakeRequest>(header) {
        Ok(request) => request,
        Err(e) => {
            return Ok(refused(
                ErrorCode::InvalidRequest,
                &handler::invalid_header(Api::Handshake, e).message,
            ))
        }
    };
    if request.protocol_version() != frame::PROTOCOL_VERSION {
        return Ok(refused(
            ErrorCode::UnsupportedVersion,
            &format!(
                "client speaks protocol version {}, this broker speaks {}",
                request.protocol_version(),
                frame::PROTOCOL_VERSION
            ),
        ));
    }
    tracing::debug!(
        client = request.client_name().unwrap_or_default(),
        shard = shard.id,
        "handshake"
    );
    let step = shard.security.with(|snapshot| {
        crate::auth::login::begin(
            &shard.config,
            snapshot,
            conn.certificate.as_ref(),
            request.sasl_mechanism(),
            request.sasl_bytes().map(|b| b.bytes()),
            conn.address,
            crate::auth::limiter(),
        )
    });
    let (next, principal) = match step {
        Ok(crate::auth::login::Step::Open(principal)) => (None, Some(principal)),
        Ok(crate::auth::login::Step::Continue(exchange, answer)) => {
            let under_way = match under_way {
                Some(Err(message)) => return Ok(refused(ErrorCode::Overloaded, &message)),
                Some(Ok(slot)) => Some(slot),
                None => None,
            };
            *access = Access::Login(exchange, under_way);
            (Some(answer), None)
        }
        Err(refusal) if refusal.failed => return Err(login_failed(shard, conn, api, &refusal)),
        Err(refusal) => return Ok(refused(refusal.code, &refusal.message)),
    };
    // Who this broker is (its id and build) is told only to a client that
    // is in: after the proof when a login continues.
    let told = next.is_none().then(|| hello(shard));
    let header = handler::with_builder(shard, |fbb| {
        protocol::codec::handshake_response(
            fbb,
            told.as_ref(),
            protocol::codec::HandshakeLogin {
                next: next.as_deref(),
                principal: principal.as_deref().unwrap_or_default(),
            },
        )
        .to_vec()
    });
    if let Some(principal) = principal {
        opened(shard, conn, access, principal, api)?;
    }
    Ok(Response {
        api,
        error: 0,
        header,
        payload: Payload::None,
    })
}

/// Who this broker is, for a client that is in.
fn hello(shard: &Shard) -> protocol::codec::BrokerHello<'static> {
    protocol::codec::BrokerHello {
        broker_id: shard.config.broker_id,
        shard_id: shard.id,
        shard_count: shard.shard_count() as u16,
        broker_version: crate::VERSION,
    }
}

/// A place among `address`'s logins under way, waited for until `until`;
/// then the refusal's words.
async fn exchange_slot(
    address: std::net::IpAddr,
    until: Instant,
) -> Result<crate::auth::pending::Slot, String> {
    loop {
        match crate::auth::pending::pending().begin_exchange(address) {
            Ok(slot) => return Ok(slot),
            Err(message) if Instant::now() >= until => return Err(message),
            Err(_) => glommio::timer::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// The connection opens as `principal`, counted against its quota's
/// connections; `Err` (OVERLOADED) past them.
fn opened(
    shard: &Shard,
    conn: &Conn,
    access: &mut Access,
    principal: String,
    api: u16,
) -> Result<(), Response> {
    let exempt = shard.security.with(|s| s.acls.is_super_user(&principal));
    if !exempt {
        match crate::auth::quota::quotas().admit_principal(&principal) {
            Ok(slot) => *conn.quota.borrow_mut() = slot,
            Err(message) => {
                return Err(handler::error_response(
                    api,
                    ErrorCode::Overloaded,
                    &message,
                    None,
                ))
            }
        }
    }
    conn.pending.borrow_mut().take();
    count_unauthenticated(shard, conn, false);
    crate::metrics::bump(&shard.metrics.counters.logins_total, 1);
    if principal == protocol::acl::ANONYMOUS {
        crate::metrics::bump(&shard.metrics.counters.logins_anonymous_total, 1);
    }
    *access = Access::Open(principal.into());
    Ok(())
}

/// How long a request must wait for its principal's turn: its charge
/// (one request, and a Produce's bytes) reserved now, after what the
/// principal owes for earlier requests and fetches on any connection; and
/// at least until this connection's own fetch debt is paid.
fn quota_wait(conn: &Conn, prefix: FramePrefix, payload_bytes: usize) -> Duration {
    let muted = conn.muted_until.take().map_or(Duration::ZERO, |until| {
        until.saturating_duration_since(Instant::now())
    });
    let reserved = match &*conn.quota.borrow() {
        Some(slot) => {
            let produced = if prefix.api == Api::Produce as u16 {
                payload_bytes as u64
            } else {
                0
            };
            slot.usage().reserve(produced)
        }
        None => Duration::ZERO,
    };
    reserved.max(muted)
}

/// A Produce's (or fetch's) answer says how long its request was held for
/// its principal's quota.
fn report_throttle(held: Duration, dispatched: Dispatched) -> Dispatched {
    if held.is_zero() {
        return dispatched;
    }
    let throttle_ms = held.as_millis().min(u128::from(u32::MAX)) as u32;
    match dispatched {
        Dispatched::Ready(response) => Dispatched::Ready(throttled(response, throttle_ms)),
        Dispatched::Later(later) => Dispatched::Later(Box::pin(async move {
            later.await.map(|response| throttled(response, throttle_ms))
        })),
        other => other,
    }
}

/// Charges a fetch answer's log bytes to its principal's fetch quota as it
/// goes out; in debt, the answer says for how long the connection's next
/// request waits, and it does.
fn charge_fetch(conn: &Conn, response: Response) -> Response {
    let fetched = response.api == Api::Fetch as u16 || response.api == Api::MultiFetch as u16;
    if !fetched || response.payload.is_empty() {
        return response;
    }
    let delay = match &*conn.quota.borrow() {
        Some(slot) => slot.usage().charge_fetch(response.payload.len() as u64),
        None => return response,
    };
    if delay.is_zero() {
        return response;
    }
    mute(conn, delay);
    throttled(response, delay.as_millis().min(u128::from(u32::MAX)) as u32)
}

/// The client's next request is read `delay` from now at the earliest.
fn mute(conn: &Conn, delay: Duration) {
    let until = Instant::now() + delay;
    let later = conn.muted_until.get().map_or(until, |at| at.max(until));
    conn.muted_until.set(Some(later));
}

/// A successful Produce, Fetch or MultiFetch answer with its throttle time.
fn throttled(mut response: Response, throttle_ms: u32) -> Response {
    if response.error != 0 {
        return response;
    }
    let Some(api) = Api::from_u16(response.api) else {
        return response;
    };
    if let Some(header) = protocol::codec::with_throttle(api, &response.header, throttle_ms) {
        response.header = header;
    }
    response
}

/// A failed login: counted against the client's address and in the
/// metrics, logged (rate-limited), and answered AUTHENTICATION_FAILED.
fn login_failed(
    shard: &Shard,
    conn: &Conn,
    api: u16,
    refusal: &crate::auth::login::Refusal,
) -> Response {
    let (message, user) = (refusal.message.as_str(), refusal.user.as_deref());
    crate::metrics::bump(&shard.metrics.counters.login_failures_total, 1);
    if let Some(address) = conn.address.filter(|_| !refusal.counted) {
        crate::auth::limiter().failed(&address, Instant::now());
    }
    if let Some(suppressed) = shard.login_failures_log.allow() {
        tracing::warn!(
            address = ?conn.address,
            user = user.unwrap_or(""),
            suppressed,
            "login failed: {message}"
        );
    }
    handler::error_response(api, ErrorCode::AuthenticationFailed, message, None)
}

async fn write_loop(shard: Rc<Shard>, conn: Rc<Conn>) {
    if let Err(error) = write_responses(&shard, &conn).await {
        tracing::debug!(%error, "connection write ended");
    }
    conn.closed.set(true);
    conn.drained.notify_all();
    // Responses that will never be written no longer hold up a graceful stop.
    let abandoned = conn.queue.borrow_mut().drain(..).count();
    shard
        .responses_pending
        .set(shard.responses_pending.get().saturating_sub(abandoned));
    shard.responses_written.notify_all();
    let _ = poll_fn(|cx| conn.stream.borrow_mut().poll_close(cx)).await;
}

async fn write_responses(shard: &Shard, conn: &Conn) -> io::Result<()> {
    let mut out: Vec<u8> = Vec::with_capacity(64 * 1024);
    loop {
        let next = conn.queue.borrow_mut().pop_front();
        if next.is_some() {
            // Counted as written once taken: a response still being awaited
            // or written when the connection breaks is dropped with it.
            shard
                .responses_pending
                .set(shard.responses_pending.get().saturating_sub(1));
            shard.responses_written.notify_all();
        }
        let Some(item) = next else {
            if !out.is_empty() {
                write_all(conn, &out).await?;
                out.clear();
            }
            conn.queued
                .wait_until(|| !conn.queue.borrow().is_empty())
                .await;
            continue;
        };
        conn.drained.notify_all();
        let (request_id, response) = match item {
            Queued::Close => {
                write_all(conn, &out).await?;
                return Ok(());
            }
            Queued::Ready(request_id, response) => {
                conn.inflight_bytes.set(
                    conn.inflight_bytes
                        .get()
                        .saturating_sub(response.header.len() as u64),
                );
                conn.drained.notify_all();
                (request_id, response)
            }
            Queued::Later(request_id, api, mut later, bytes) => {
                // An answer that is already there joins the responses before
                // it in one write: produces written by one batch of the disk
                // driver are acknowledged with one send, not a send (and a
                // wake-up of the client's reader) each.
                let response = match futures_lite::future::poll_once(&mut later).await {
                    Some(response) => response,
                    None => {
                        if !out.is_empty() {
                            write_all(conn, &out).await?;
                            out.clear();
                        }
                        if api == Api::Fetch as u16 || api == Api::MultiFetch as u16 {
                            wait_giving_way(conn, request_id, later).await
                        } else {
                            later.await
                        }
                    }
                };
                match resolved(conn, request_id, api, response, bytes) {
                    Some(answer) => answer,
                    None => continue,
                }
            }
            Queued::Done(request_id, api, response, bytes) => {
                match resolved(conn, request_id, api, response, bytes) {
                    Some(answer) => answer,
                    None => continue,
                }
            }
        };
        let response = charge_fetch(conn, response);
        frame::write_prefix(
            &mut out,
            response.api,
            response.error,
            request_id,
            response.header.len(),
            response.payload.len(),
        );
        out.extend_from_slice(&response.header);
        match &response.payload {
            Payload::None => {}
            Payload::File(slice) => {
                write_all(conn, &out).await?;
                out.clear();
                send_range(
                    shard,
                    conn,
                    slice.file.as_raw_fd(),
                    slice.position,
                    slice.len as usize,
                )
                .await?;
            }
            Payload::Files(slices) => {
                write_all(conn, &out).await?;
                out.clear();
                for slice in slices {
                    send_range(
                        shard,
                        conn,
                        slice.file.as_raw_fd(),
                        slice.position,
                        slice.len as usize,
                    )
                    .await?;
                }
            }
            Payload::Fd { fd, position, len } => {
                write_all(conn, &out).await?;
                out.clear();
                send_range(shard, conn, fd.as_raw_fd(), *position, *len as usize).await?;
            }
        }
        if out.len() >= 64 * 1024 {
            write_all(conn, &out).await?;
            out.clear();
        }
    }
}

/// The answer of a `Later` request, once it has one: `None` for a produce
/// that needs none, an error for anything else that dropped its answer.
fn resolved(
    conn: &Conn,
    request_id: u32,
    api: u16,
    response: Option<Response>,
    bytes: u64,
) -> Option<(u32, Response)> {
    conn.inflight_bytes
        .set(conn.inflight_bytes.get().saturating_sub(bytes));
    conn.drained.notify_all();
    match response {
        Some(response) => Some((request_id, response)),
        None if api == Api::Produce as u16 => None,
        None => Some((
            request_id,
            handler::error_response(api, ErrorCode::Internal, "the request was dropped", None),
        )),
    }
}

/// Awaits a fetch at the head of the queue, asking it to give way once an
/// answer behind it is ready: that answer would otherwise wait for the
/// fetch's whole `max_wait_ms`.
async fn wait_giving_way(conn: &Conn, request_id: u32, mut fetch: Later) -> Option<Response> {
    let first = futures_lite::future::or(async { Some((&mut fetch).await) }, async {
        answer_behind(conn).await;
        None
    })
    .await;
    let response = match first {
        Some(response) => response,
        None => {
            conn.give_way.ask(request_id);
            fetch.await
        }
    };
    conn.give_way.clear();
    response
}

/// Resolves once an answer queued behind the head is ready. Polls the
/// `Later` ones where they stand (they only wait on their own partition,
/// acknowledgement or shard, never on this queue) and marks those that
/// resolve `Done`, so they are not polled again. A produce that resolves to
/// no answer at all is no reason to cut the fetch short.
async fn answer_behind(conn: &Conn) {
    poll_fn(|cx| {
        let mut ready = false;
        for item in conn.queue.borrow_mut().iter_mut() {
            if let Queued::Later(request_id, api, later, bytes) = item {
                if let std::task::Poll::Ready(response) = later.as_mut().poll(cx) {
                    *item = Queued::Done(*request_id, *api, response, *bytes);
                }
            }
            ready |= match item {
                Queued::Later(..) => false,
                Queued::Done(_, api, None, _) => *api != Api::Produce as u16,
                Queued::Ready(..) | Queued::Done(..) | Queued::Close => true,
            };
            if ready {
                break;
            }
        }
        if ready {
            return std::task::Poll::Ready(());
        }
        conn.queued.register(cx.waker());
        std::task::Poll::Pending
    })
    .await
}

/// Sends `len` bytes of `file` from `position`: pieces in the page cache
/// with sendfile (see `sendfile.rs`), pieces that are not read off the
/// shard's thread (see `cold.rs`). Bytes are counted as they go, so a
/// stalled transfer shows in the metrics.
async fn send_range(
    shard: &Shard,
    conn: &Conn,
    file: RawFd,
    mut position: u64,
    mut len: usize,
) -> io::Result<()> {
    let short = || {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "segment shorter than its recorded size",
        )
    };
    while len > 0 {
        let piece = len.min(cold::PIECE_BYTES);
        if cold::resident(file, position, piece) {
            cold::read_ahead_if_needed(file, position + piece as u64);
        } else {
            // Into the page cache off the shard's thread; then sendfile.
            let loaded = cold::load(file, position, piece).await?;
            if loaded == 0 {
                return Err(short());
            }
            crate::metrics::bump(
                &shard.metrics.counters.fetch_cold_bytes_total,
                loaded as u64,
            );
        }
        if conn.tls {
            // Encrypted: read the (now resident) bytes and write them
            // through the session. One copy, no sendfile.
            let bytes = sendfile::pread(file, position, piece)?;
            if bytes.is_empty() {
                return Err(short());
            }
            sendfile::count(&shard.metrics, 0, bytes.len());
            write_all(conn, &bytes).await?;
            position += bytes.len() as u64;
            len -= bytes.len();
            continue;
        }
        match sendfile::sendfile_once(conn.fd, file, position, piece)? {
            Sent::Bytes(0) => return Err(short()),
            Sent::Bytes(n) => {
                position += n as u64;
                len -= n;
                sendfile::count(&shard.metrics, n, 0);
            }
            Sent::WouldBlock => {
                let piece = sendfile::read_fallback_piece(file, position, piece)?;
                if piece.is_empty() {
                    return Err(short());
                }
                sendfile::count(&shard.metrics, 0, piece.len());
                write_all(conn, &piece).await?;
                position += piece.len() as u64;
                len -= piece.len();
            }
        }
    }
    Ok(())
}
