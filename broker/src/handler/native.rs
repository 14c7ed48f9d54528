//! ringlog's own protocol as a connection's front end (`net::front`): its
//! frames (PROTOCOL.md §1: a 16-byte prefix, a flatbuffers header, a
//! payload), its opening (`opening.rs`), each request waiting for its
//! principal's quota and a produce for the shard's unwritten-bytes budget
//! (`admission.rs`), then [`super::dispatch`]. The connection
//! (`net/connection.rs`) carries the bytes; this decides what they mean.

use super::client::Client;
use super::give_way::GiveWay;
use super::opening::{self, Access};
use super::{admission, Dispatched, Request, Response};
use crate::net::front::{Front, Served, Step};
use crate::shard::Shard;
use protocol::frame::{self, Api, FrameError, FramePrefix, FRAME_PREFIX_BYTES};
use protocol::ErrorCode;
use std::cell::{Cell, RefCell};
use std::net::IpAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// The size of the frame whose prefix is `prefix`, or the answer to a
/// prefix that cannot be one (too large for `frame_max`, inconsistent
/// lengths), echoing the request id and api it names.
fn frame_size(prefix: &[u8], frame_max: usize) -> Result<(usize, FramePrefix), (u32, Response)> {
    let mut bytes = [0u8; FRAME_PREFIX_BYTES];
    bytes.copy_from_slice(&prefix[..FRAME_PREFIX_BYTES]);
    match FramePrefix::parse(&bytes, frame_max) {
        Ok(prefix) => Ok((prefix.frame_bytes, prefix)),
        Err(error) => {
            let request_id = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
            let api = u16::from_le_bytes([bytes[4], bytes[5]]);
            let code = match error {
                FrameError::TooLarge { .. } => ErrorCode::FrameTooLarge,
                _ => ErrorCode::InvalidRequest,
            };
            let message = format!("{error}; closing the connection");
            Err((request_id, super::error_response(api, code, &message, None)))
        }
    }
}

/// The request a frame is, for the handlers.
fn request<'a>(
    prefix: FramePrefix,
    header: &'a [u8],
    payload: &'a [u8],
    principal: &'a str,
) -> Request<'a> {
    Request {
        api: prefix.api,
        version: prefix.version_or_error,
        request_id: prefix.request_id,
        header,
        payload,
        principal: Some(principal),
    }
}

/// A frame's answer, in its place among the connection's.
fn answer(prefix: FramePrefix, dispatched: Dispatched) -> Served {
    Served::Answer {
        request_id: prefix.request_id,
        api: prefix.api,
        dispatched,
    }
}

/// One connection speaking ringlog's protocol.
pub struct Native {
    /// What the broker knows of the client.
    client: Client,
    /// Where the opening stands.
    access: RefCell<Access>,
    connected_at: Instant,
}

impl Native {
    /// A frame before the connection is open: the Handshake or a login's
    /// Authenticate (`opening.rs`).
    async fn opening(&self, prefix: FramePrefix, header: &[u8]) -> Served {
        let shard = &self.client.shard;
        // A login's place among its address's logins under way, waited
        // for (as long as the handshake may take): a client starting many
        // connections at once is slowed, not refused.
        let handshake = matches!(*self.access.borrow(), Access::Handshake);
        let under_way = match self.client.address {
            Some(address) if prefix.api == Api::Handshake as u16 && handshake => {
                let until =
                    self.connected_at + Duration::from_millis(shard.config.handshake_timeout_ms);
                Some(opening::exchange_slot(address, until).await)
            }
            _ => None,
        };
        let opened = {
            let mut access = self.access.borrow_mut();
            opening::login_frame(shard, &self.client, &mut access, prefix, header, under_way)
        };
        match opened {
            Ok(response) => Served::Answer {
                request_id: prefix.request_id,
                api: prefix.api,
                dispatched: Dispatched::Ready(response),
            },
            Err(response) => {
                // A failed login: answered after the delay, then the
                // connection closes.
                let delay = Duration::from_millis(shard.config.login_failure_delay_ms);
                glommio::timer::sleep(delay).await;
                Served::Close(Some((prefix.request_id, response)))
            }
        }
    }
}

impl Front for Native {
    const PREFIX_BYTES: usize = FRAME_PREFIX_BYTES;
    type Head = FramePrefix;

    fn admit(shard: &Rc<Shard>, address: Option<IpAddr>) -> Result<Native, crate::auth::Refused> {
        let address_slot = match address.map(|a| crate::auth::quota::quotas().admit_address(a)) {
            Some(Err(refusal)) => return Err(refusal),
            Some(Ok(slot)) => slot,
            None => None,
        };
        // Counted as not logged in yet until it is (auth/pending.rs).
        let pending = match address.map(|a| crate::auth::pending::pending().admit_connection(a)) {
            Some(Err(refusal)) => return Err(refusal),
            Some(Ok(slot)) => Some(slot),
            None => None,
        };
        let client = Client {
            shard: shard.clone(),
            address,
            address_slot,
            certificate: RefCell::new(None),
            quota: RefCell::new(None),
            muted_until: Cell::new(None),
            throttle_in_frames: Cell::new(false),
            pending: RefCell::new(pending),
            unauthenticated: Cell::new(false),
            session: RefCell::new(None),
        };
        opening::count_unauthenticated(shard, &client, true);
        Ok(Native {
            client,
            access: RefCell::new(Access::Handshake),
            connected_at: Instant::now(),
        })
    }

    /// One OVERLOADED error frame (request id 0, api Handshake, as a reply
    /// to the Handshake the client would send).
    fn refusal(message: &str) -> Vec<u8> {
        let response =
            super::error_response(Api::Handshake as u16, ErrorCode::Overloaded, message, None);
        let mut out = Vec::new();
        frame::write_frame(
            &mut out,
            response.api,
            response.error,
            0,
            &response.header,
            &[],
        );
        out
    }

    fn certificate(
        &self,
        certificate: Option<Result<String, crate::auth::certificate::NoPrincipal>>,
    ) {
        *self.client.certificate.borrow_mut() = certificate;
    }

    fn open(&self) -> bool {
        matches!(*self.access.borrow(), Access::Open(_))
    }

    fn frame_max(&self) -> usize {
        if self.open() {
            self.client.shard.config.max_request_bytes
        } else {
            crate::limits::HANDSHAKE_FRAME_BYTES_MAX
        }
    }

    fn frame_bytes(
        &self,
        prefix: &[u8],
        frame_max: usize,
    ) -> Result<(usize, FramePrefix), (u32, Response)> {
        frame_size(prefix, frame_max).inspect_err(|_| {
            crate::metrics::bump(&self.client.shard.metrics.counters.request_errors_total, 1);
        })
    }

    fn serve<'a>(
        &'a self,
        frame: &'a [u8],
        prefix: FramePrefix,
        give_way: &'a Rc<GiveWay>,
    ) -> Step<'a> {
        let shard = &self.client.shard;
        let header_start = FRAME_PREFIX_BYTES;
        let payload_start = header_start + prefix.header_len;
        let header = &frame[header_start..payload_start];
        let payload = &frame[payload_start..prefix.frame_bytes];
        let access = self.access.borrow();
        let Access::Open(principal) = &*access else {
            drop(access);
            return Step::Wait(Box::pin(self.opening(prefix, header)));
        };
        // A quota: the request waits its principal's turn, and the
        // client's next requests wait in its socket meanwhile.
        let held = admission::quota_wait(&self.client, prefix, payload.len());
        // Producers wait while the shard's unwritten bytes are over its
        // share of unwritten_bytes_max (issue 8, item 14): this connection
        // stops reading until the disk catches up.
        let budget = prefix.api == Api::Produce as u16 && shard.unwritten.over();
        if held.is_zero() && !budget {
            // The common case: served now, without a future or a copy of
            // the principal per request.
            let request = request(prefix, header, payload, principal);
            return Step::Now(answer(prefix, super::dispatch(shard, give_way, request)));
        }
        let principal = principal.clone();
        drop(access);
        Step::Wait(Box::pin(async move {
            if !held.is_zero() {
                glommio::timer::sleep(held).await;
            }
            if budget {
                shard.unwritten.wait_for_room().await;
            }
            let request = request(prefix, header, payload, &principal);
            let dispatched = super::dispatch(shard, give_way, request);
            answer(prefix, admission::report_throttle(held, dispatched))
        }))
    }

    fn write_prefix(&self, out: &mut Vec<u8>, request_id: u32, response: &Response) {
        // PROTOCOL.md §1, throttled frames: every answer after the
        // Handshake's, when the client asked for them.
        if self.client.throttle_in_frames.get() && response.api != Api::Handshake as u16 {
            frame::write_throttled_prefix(
                out,
                response.api,
                response.error,
                request_id,
                response.header.len(),
                response.payload.len(),
                self.client.throttle_ms(),
            );
            return;
        }
        frame::write_prefix(
            out,
            response.api,
            response.error,
            request_id,
            response.header.len(),
            response.payload.len(),
        );
    }

    fn outgoing(&self, response: Response) -> Response {
        admission::charge_fetch(&self.client, response)
    }

    fn dropped(&self, api: u16) -> Option<Response> {
        (api != Api::Produce as u16).then(|| {
            super::error_response(api, ErrorCode::Internal, "the request was dropped", None)
        })
    }

    fn long_polls(&self, api: u16) -> bool {
        api == Api::Fetch as u16 || api == Api::MultiFetch as u16
    }

    fn ended(&self) -> Option<String> {
        self.client.ended()
    }

    async fn until_ended(&self) {
        self.client.until_ended().await;
    }

    fn closed(&self) {
        opening::count_unauthenticated(&self.client.shard, &self.client, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(api: Api, request_id: u32, header: usize, payload: usize) -> Vec<u8> {
        let mut out = Vec::new();
        frame::write_prefix(&mut out, api as u16, 0, request_id, header, payload);
        out
    }

    #[test]
    fn a_frame_is_sized_from_its_prefix_and_a_bad_one_is_answered_with_its_request_id() {
        let good = prefix(Api::Produce, 7, 40, 1000);
        assert_eq!(
            frame_size(&good, 1 << 20).unwrap().0,
            FRAME_PREFIX_BYTES + 40 + 1000
        );
        // Larger than the connection may send: FRAME_TOO_LARGE, the
        // request's own id and api in the answer.
        let (request_id, answer) = frame_size(&good, 512).unwrap_err();
        assert_eq!(request_id, 7);
        assert_eq!(answer.api, Api::Produce as u16);
        assert_eq!(answer.error, ErrorCode::FrameTooLarge as u16);
        // A header longer than the frame it is in: INVALID_REQUEST.
        let mut bad = prefix(Api::Fetch, 9, 10, 0);
        bad[12..16].copy_from_slice(&100u32.to_le_bytes());
        let (request_id, answer) = frame_size(&bad, 1 << 20).unwrap_err();
        assert_eq!(request_id, 9);
        assert_eq!(answer.error, ErrorCode::InvalidRequest as u16);
    }
}
