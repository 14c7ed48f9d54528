//! One client connection: read → frame → serve → respond in order.
//!
//! Transport only: the socket (plain or TLS), the read buffer and its
//! deadlines, frames cut by the size the protocol's front end reads off
//! their prefix (`front.rs`), answers written in request order with
//! sendfile, and backpressure. What the frames mean — the opening, logins,
//! quotas, requests — is the front end's (`handler::native::Native` for
//! ringlog's protocol), so a second protocol plugs in here unchanged.
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
use super::front::{Front, Served, Step};
use super::sendfile::{self, Sent};
use crate::handler::give_way::GiveWay;
use crate::limits::{LOGIN_READ_BUFFER_BYTES, READ_BUFFER_BYTES};
use crate::notify::Notify;
use crate::reply::{Dispatched, Later, Part, Payload, Response};
use crate::shard::Shard;
use futures_lite::{AsyncRead, AsyncWrite};
use glommio::net::TcpStream;
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

struct Conn<F> {
    stream: RefCell<Transport>,
    /// What the bytes mean.
    front: F,
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

/// Serves one connection with the front end `F` until the peer closes it
/// or it breaks.
pub async fn serve<F: Front>(shard: Rc<Shard>, stream: TcpStream) {
    let fd = stream.as_raw_fd();
    if let Err(error) = sendfile::set_nonblocking(fd) {
        tracing::warn!(%error, "cannot make the socket non-blocking; closing it");
        return;
    }
    let _ = stream.set_nodelay(true);
    let address = stream.peer_addr().ok().map(|a| a.ip());
    let front = match F::admit(&shard, address) {
        Ok(front) => front,
        Err(refusal) => return refuse_at_accept::<F>(&shard, stream, &refusal.to_string()).await,
    };
    let Some(stream) = accept_tls(&shard, stream).await else {
        front.closed();
        return;
    };
    front.certificate(match &stream {
        Transport::Tls(tls) => tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|der| crate::auth::principal_rules::principal(der)),
        Transport::Plain(_) => None,
    });
    let conn = Rc::new(Conn {
        front,
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
    let writer = glommio::spawn_local(write_loop(shard.clone(), conn.clone()));
    if let Err(error) = read_loop(&shard, &conn).await {
        tracing::debug!(%error, "connection read ended");
    }
    conn.front.closed();
    push(&shard, &conn, Queued::Close);
    writer.await;
}

/// Answers a connection over `max_connections` with the front end's
/// refusal, and closes it.
pub async fn refuse<F: Front>(stream: TcpStream) {
    refuse_saying::<F>(
        stream,
        "the broker serves max_connections connections already; retry later or raise max_connections",
    )
    .await
}

/// A connection refused before it is served (a bound of its address):
/// counted, logged once a second, told why (not over TLS), closed.
async fn refuse_at_accept<F: Front>(shard: &Shard, stream: TcpStream, message: &str) {
    crate::metrics::bump(&shard.metrics.counters.connections_refused_total, 1);
    if let Some(left_out) = shard.accept_problems.allow() {
        tracing::warn!(left_out, "refused a connection: {message}");
    }
    refuse_saying::<F>(stream, message).await;
}

async fn refuse_saying<F: Front>(stream: TcpStream, message: &str) {
    // Under TLS a plain frame would be unreadable, and answering through a
    // TLS handshake would hold a descriptor per refused connection for up to
    // the handshake deadline — past max_connections, the very thing the
    // limit is for. So a TLS broker closes at once (the client sees the
    // connection closed during its handshake).
    if super::tls::acceptor().is_some() {
        return;
    }
    let out = F::refusal(message);
    let mut stream = stream;
    if !out.is_empty() {
        let _ = futures_lite::AsyncWriteExt::write_all(&mut stream, &out).await;
    }
    let _ = futures_lite::AsyncWriteExt::close(&mut stream).await;
}

fn push<F>(shard: &Shard, conn: &Conn<F>, item: Queued) {
    if conn.closed.get() {
        return; // The writer is gone; nothing will take it.
    }
    shard
        .responses_pending
        .set(shard.responses_pending.get() + 1);
    conn.queue.borrow_mut().push_back(item);
    conn.queued.notify_all();
}

async fn read_some<F>(conn: &Conn<F>, buf: &mut [u8]) -> io::Result<usize> {
    poll_fn(|cx| conn.stream.borrow_mut().poll_read(cx, buf)).await
}

async fn write_all<F>(conn: &Conn<F>, mut buf: &[u8]) -> io::Result<()> {
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

#[expect(
    clippy::too_many_lines,
    reason = "the read loop: framing, backpressure and the deadlines share the buffer's state"
)]
async fn read_loop<F: Front>(shard: &Rc<Shard>, conn: &Conn<F>) -> io::Result<()> {
    let mut buf = vec![0u8; LOGIN_READ_BUFFER_BYTES];
    let mut filled = 0usize;
    let config = &shard.config;
    let connected_at = Instant::now();
    let mut frame_started_at = connected_at;
    // The last whole frame needed a grown buffer: the next likely does too
    // (a mirror's or a batching producer's appends, one at a time).
    let mut large_frame = false;
    loop {
        let handshaken = conn.front.open();
        if handshaken && buf.len() < READ_BUFFER_BYTES {
            // Open: a buffer for requests (pipelined produces).
            buf.resize(READ_BUFFER_BYTES, 0);
        }
        let mut start = 0usize;
        while filled - start >= F::PREFIX_BYTES {
            let frame_max = conn.front.frame_max();
            let (frame_bytes, head) = match conn
                .front
                .frame_bytes(&buf[start..start + F::PREFIX_BYTES], frame_max)
            {
                Ok(sized) => sized,
                Err((request_id, response)) => {
                    push(shard, conn, Queued::Ready(request_id, response));
                    return Ok(());
                }
            };
            if filled - start < frame_bytes {
                break;
            }
            large_frame = frame_bytes > READ_BUFFER_BYTES;
            let frame_end = start + frame_bytes;
            if let Some(why) = conn.front.ended() {
                tracing::debug!(shard = shard.id, "closing a connection: {why}");
                return Ok(());
            }
            let served = match conn
                .front
                .serve(&buf[start..frame_end], head, &conn.give_way)
            {
                Step::Now(served) => served,
                Step::Wait(served) => served.await,
            };
            start = frame_end;
            let (request_id, api, dispatched) = match served {
                Served::Answer {
                    request_id,
                    api,
                    dispatched,
                } => (request_id, api, dispatched),
                Served::Close(answer) => {
                    if let Some((request_id, response)) = answer {
                        push(shard, conn, Queued::Ready(request_id, response));
                    }
                    return Ok(());
                }
            };
            match dispatched {
                Dispatched::Silent => {}
                Dispatched::Ready(response) => {
                    let bytes = response.header.len() as u64;
                    conn.inflight_bytes.set(conn.inflight_bytes.get() + bytes);
                    push(shard, conn, Queued::Ready(request_id, response))
                }
                Dispatched::Later(later) => {
                    let bytes = frame_bytes as u64;
                    conn.inflight_bytes.set(conn.inflight_bytes.get() + bytes);
                    push(shard, conn, Queued::Later(request_id, api, later, bytes))
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
        if filled == buf.len() && filled >= F::PREFIX_BYTES {
            let frame_max = conn.front.frame_max();
            if let Ok((frame_bytes, _)) = conn.front.frame_bytes(&buf[..F::PREFIX_BYTES], frame_max)
            {
                buf.resize(grown(buf.len(), frame_bytes), 0);
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
        let handshaken = conn.front.open();
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
                    conn.front.until_ended(),
                )
                .await;
                None
            },
        )
        .await;
        // Its user was removed: nothing more is read (what it asked before
        // is still answered), and the connection closes.
        if let Some(why) = conn.front.ended() {
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

async fn write_loop<F: Front>(shard: Rc<Shard>, conn: Rc<Conn<F>>) {
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

#[expect(
    clippy::too_many_lines,
    reason = "the write loop: batching, long-polls and sendfile share the output buffer"
)]
async fn write_responses<F: Front>(shard: &Shard, conn: &Conn<F>) -> io::Result<()> {
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
                        if conn.front.long_polls(api) {
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
        let response = conn.front.outgoing(response);
        conn.front.write_prefix(&mut out, request_id, &response);
        out.extend_from_slice(&response.header);
        match &response.payload {
            Payload::None => {}
            Payload::File(slice) => send_slice(shard, conn, &mut out, slice).await?,
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
            Payload::Parts(parts) => {
                for part in parts {
                    match part {
                        Part::Bytes(bytes) => out.extend_from_slice(bytes),
                        Part::File(slice) => send_slice(shard, conn, &mut out, slice).await?,
                    }
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

/// Writes what `out` holds, then a segment range with sendfile.
async fn send_slice<F: Front>(
    shard: &Shard,
    conn: &Conn<F>,
    out: &mut Vec<u8>,
    slice: &crate::storage::FetchSlice,
) -> io::Result<()> {
    write_all(conn, out).await?;
    out.clear();
    send_range(
        shard,
        conn,
        slice.file.as_raw_fd(),
        slice.position,
        slice.len as usize,
    )
    .await
}

/// The answer of a `Later` request, once it has one: `None` for a produce
/// that needs none, an error for anything else that dropped its answer.
fn resolved<F: Front>(
    conn: &Conn<F>,
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
        None => conn.front.dropped(api).map(|answer| (request_id, answer)),
    }
}

/// Awaits a fetch at the head of the queue, asking it to give way once an
/// answer behind it is ready: that answer would otherwise wait for the
/// fetch's whole `max_wait_ms`.
async fn wait_giving_way<F: Front>(
    conn: &Conn<F>,
    request_id: u32,
    mut fetch: Later,
) -> Option<Response> {
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
async fn answer_behind<F: Front>(conn: &Conn<F>) {
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
                Queued::Done(_, api, None, _) => conn.front.dropped(*api).is_some(),
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
async fn send_range<F>(
    shard: &Shard,
    conn: &Conn<F>,
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

#[cfg(test)]
mod tests {
    use super::grown;

    #[test]
    fn a_read_buffer_doubles_toward_the_frame_and_never_past_it_or_below_itself() {
        assert_eq!(grown(4096, 100_000), 8192);
        assert_eq!(grown(65_536, 100_000), 100_000);
        // A frame that fits already: no change (never smaller).
        assert_eq!(grown(65_536, 1_000), 65_536);
        assert_eq!(grown(usize::MAX, usize::MAX), usize::MAX);
    }
}
