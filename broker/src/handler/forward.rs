//! Requests for a partition that another shard of this broker owns.
//!
//! A request travels to the owner as a copy of its frame
//! ([`ShardMsg::Request`]); the owner runs the same handler and sends the
//! response back. A fetch's file range crosses as a duplicated file
//! descriptor, so the requesting shard still sends it with sendfile: the
//! forwarded path costs one copy of the *request* and a `dup`, not a copy
//! of the data (Redpanda's `invoke_on`: one call hops cores). Shard-aware
//! clients rarely need it; `ringlog_requests_forwarded_total` counts it.

use super::{dispatch, error_response, Dispatched, Failure, Payload, Request, Response};
use crate::handler::give_way::GiveWay;
use crate::mailbox::{SendableResponse, ShardMsg};
use crate::shard::Shard;
use protocol::frame::API_VERSION;
use protocol::ErrorCode;
use std::future::Future;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::Pin;
use std::rc::Rc;

impl Response {
    /// Converts for the trip back to the requesting shard. A file range
    /// becomes a duplicated descriptor so the requester can still sendfile.
    pub fn into_sendable(self) -> SendableResponse {
        let fd = match self.payload {
            Payload::None => None,
            Payload::Fd { fd, position, len } => Some((fd, position, len)),
            Payload::Files(_) | Payload::Parts(_) => {
                // Only a MultiFetch and a Kafka Fetch answer with several
                // ranges, and they are never forwarded (each partition to
                // its owning shard).
                return error_response(
                    self.api,
                    ErrorCode::Internal,
                    "a multi-range answer cannot cross shards",
                    None,
                )
                .into_sendable();
            }
            Payload::File(slice) => {
                // Close-on-exec like every descriptor the broker opens: a
                // process it starts (none today) must not inherit segment
                // files. SAFETY: F_DUPFD_CLOEXEC on a descriptor the Rc
                // keeps open; a negative result is checked before it is
                // owned.
                let raw = unsafe { libc::fcntl(slice.file.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
                if raw < 0 {
                    // Out of descriptors (EMFILE, ENFILE) is the broker
                    // being overloaded, not a bug: the client may retry.
                    let error = std::io::Error::last_os_error();
                    return error_response(
                        self.api,
                        ErrorCode::Overloaded,
                        &format!("the broker is out of file descriptors for a forwarded fetch ({error}); retry"),
                        None,
                    )
                    .into_sendable();
                }
                // SAFETY: `raw` is a fresh descriptor that nothing else owns.
                Some((
                    unsafe { OwnedFd::from_raw_fd(raw) },
                    slice.position,
                    slice.len,
                ))
            }
        };
        SendableResponse {
            api: self.api,
            error: self.error,
            header: self.header,
            fd,
        }
    }
}

impl SendableResponse {
    /// Back to a response on the requesting shard.
    pub fn into_response(self) -> Response {
        Response {
            api: self.api,
            error: self.error,
            header: self.header,
            payload: match self.fd {
                Some((fd, position, len)) => Payload::Fd { fd, position, len },
                None => Payload::None,
            },
        }
    }
}

/// The owner's inbox and a copy of the request for it (counted as forwarded).
fn forwarded_request(
    shard: &Shard,
    owner: u16,
    api: u16,
    request_id: u32,
    header: &[u8],
    payload: &[u8],
    reply: flume::Sender<SendableResponse>,
) -> Result<(flume::Sender<ShardMsg>, ShardMsg), Failure> {
    let Some(peer) = shard.peers.get(owner as usize) else {
        return Err(Failure::new(
            ErrorCode::Internal,
            format!("no shard {owner}"),
        ));
    };
    crate::metrics::bump(&shard.metrics.counters.requests_forwarded_total, 1);
    let msg = ShardMsg::Request {
        api,
        version: API_VERSION,
        request_id,
        header: header.to_vec(),
        payload: payload.to_vec(),
        reply,
    };
    Ok((peer.clone(), msg))
}

/// Sends a request to the shard that owns its partition; the response (if
/// any) comes back through a one-shot channel.
pub fn forward(
    shard: &Shard,
    owner: u16,
    api: u16,
    request_id: u32,
    header: &[u8],
    payload: &[u8],
) -> Result<Dispatched, Failure> {
    let (reply, response) = flume::bounded(1);
    let (peer, msg) = forwarded_request(shard, owner, api, request_id, header, payload, reply)?;
    // Sent now, not when the connection's writer reaches this response:
    // behind a long-poll, a forwarded produce would otherwise sit in memory
    // and be appended long after the client left (issue 8, item 6). Only
    // the response waits its turn. A full inbox is waited for in order.
    let unsent = match peer.try_send(msg) {
        Ok(()) => None,
        Err(flume::TrySendError::Full(msg)) => Some(msg),
        Err(flume::TrySendError::Disconnected(_)) => {
            return Err(Failure::new(
                ErrorCode::ShuttingDown,
                "the owning shard has stopped",
            ))
        }
    };
    Ok(Dispatched::Later(Box::pin(async move {
        if let Some(msg) = unsent {
            if peer.send_async(msg).await.is_err() {
                return Some(error_response(
                    api,
                    ErrorCode::ShuttingDown,
                    "the owning shard has stopped",
                    None,
                ));
            }
        }
        response
            .recv_async()
            .await
            .ok()
            .map(SendableResponse::into_response)
    })))
}

/// Runs a forwarded request on its owning shard and sends the response
/// back. Returns the backpressure wait, if the request asked for one; the
/// inbox loop awaits it before taking the next request.
pub fn serve_forwarded(
    shard: &Rc<Shard>,
    msg: ShardMsg,
) -> Option<Pin<Box<dyn Future<Output = ()>>>> {
    let ShardMsg::Request {
        api,
        version,
        request_id,
        header,
        payload,
        reply,
    } = msg
    else {
        return None;
    };
    let request = Request {
        api,
        version,
        request_id,
        header: &header,
        payload: &payload,
        principal: None,
    };
    // Nothing on this shard writes the answer in order with others: a
    // forwarded fetch waits out its time (see give_way.rs).
    let give_way = Rc::new(GiveWay::default());
    match dispatch(shard, &give_way, request) {
        Dispatched::Silent => {}
        Dispatched::Throttle(until) => return Some(until),
        Dispatched::Ready(response) => {
            if reply.is_disconnected() {
                // A fire-and-forget produce failed here; nobody waits for it.
                let allowed = shard.failed_silent_produces.allow();
                if let (Some(left_out), Ok(error)) = (
                    allowed,
                    protocol::codec::verify::<protocol::wire::ErrorResponse>(&response.header),
                ) {
                    tracing::warn!(
                        request_id,
                        message = error.message().unwrap_or_default(),
                        left_out,
                        "forwarded acks=none request failed (at most one line a second; left_out counts the others)"
                    );
                }
                return None;
            }
            let _ = reply.try_send(response.into_sendable());
        }
        Dispatched::Later(later) => {
            glommio::spawn_local(async move {
                if let Some(response) = later.await {
                    let _ = reply.send_async(response.into_sendable()).await;
                }
            })
            .detach();
        }
    }
    None
}
