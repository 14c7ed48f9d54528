//! What a request waits for before it is served, beside the handlers: its
//! principal's quota (produce and fetch bytes and requests per second,
//! charged before it is served, on whichever connection it comes:
//! `auth/quota.rs`), and the answer's `throttle_ms` that says so. The
//! shard's unwritten-bytes budget is awaited in `native.rs` before a
//! produce is dispatched.

use super::client::Client;
use super::{Dispatched, Response};
use protocol::frame::{Api, FramePrefix};
use std::time::{Duration, Instant};

/// How long a request must wait for its principal's turn: its charge
/// (one request, and a Produce's bytes) reserved now, after what the
/// principal owes for earlier requests and fetches on any connection; and
/// at least until this connection's own fetch debt is paid.
pub fn quota_wait(client: &Client, prefix: FramePrefix, payload_bytes: usize) -> Duration {
    let produced = if prefix.api == Api::Produce as u16 {
        payload_bytes as u64
    } else {
        0
    };
    quota_wait_bytes(client, produced)
}

/// [`quota_wait`] for a request of any protocol that carries `produced`
/// bytes to append (0: not a produce).
pub fn quota_wait_bytes(client: &Client, produced: u64) -> Duration {
    let muted = client.muted_until.take().map_or(Duration::ZERO, |until| {
        until.saturating_duration_since(Instant::now())
    });
    let reserved = match &*client.quota.borrow() {
        Some(slot) => slot.usage().reserve(produced),
        None => Duration::ZERO,
    };
    reserved.max(muted)
}

/// A Produce's (or fetch's) answer says how long its request was held for
/// its principal's quota.
pub fn report_throttle(held: Duration, dispatched: Dispatched) -> Dispatched {
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
pub fn charge_fetch(client: &Client, response: Response) -> Response {
    let fetched = response.api == Api::Fetch as u16 || response.api == Api::MultiFetch as u16;
    if !fetched || response.payload.is_empty() {
        return response;
    }
    let delay = match &*client.quota.borrow() {
        Some(slot) => slot.usage().charge_fetch(response.payload.len() as u64),
        None => return response,
    };
    if delay.is_zero() {
        return response;
    }
    mute(client, delay);
    throttled(response, delay.as_millis().min(u128::from(u32::MAX)) as u32)
}

/// The client's next request is read `delay` from now at the earliest.
pub fn mute(client: &Client, delay: Duration) {
    let until = Instant::now() + delay;
    let later = client.muted_until.get().map_or(until, |at| at.max(until));
    client.muted_until.set(Some(later));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::Payload;
    use protocol::ErrorCode;

    fn produced() -> Response {
        let mut fbb = protocol::flatbuffers::FlatBufferBuilder::new();
        let header = protocol::codec::produce_response(&mut fbb, 100, 300, 2).to_vec();
        Response {
            api: Api::Produce as u16,
            error: 0,
            header,
            payload: Payload::None,
        }
    }

    #[test]
    fn an_answer_says_how_long_its_request_was_held_and_an_error_is_left_alone() {
        let answer = throttled(produced(), 250);
        let read =
            protocol::codec::verify::<protocol::wire::ProduceResponse>(&answer.header).unwrap();
        assert_eq!(read.throttle_ms(), 250);
        assert_eq!((read.base_offset(), read.end_offset()), (100, 300));
        let refused = super::super::error_response(
            Api::Produce as u16,
            ErrorCode::NotLeader,
            "elsewhere",
            None,
        );
        let header = refused.header.clone();
        assert_eq!(throttled(refused, 250).header, header);
        // Held for nothing: the answer is as it was.
        let Dispatched::Ready(same) =
            report_throttle(Duration::ZERO, Dispatched::Ready(produced()))
        else {
            panic!("not ready")
        };
        assert_eq!(same.header, produced().header);
    }
}
