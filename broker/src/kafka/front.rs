//! Kafka's protocol as a connection's front end (`net::front`): frames are
//! an `int32` size and a request header (api key, version, correlation id,
//! client id); an answer is a size, the correlation id, and the API's body
//! in the version asked for. Kafka has no opening without SASL: a
//! connection is open from its first byte, as its principal —
//! `User:ANONYMOUS`, or its TLS certificate's when the broker
//! authenticates by certificate — with the same connection bounds, quotas
//! and rights as on ringlog's own port.
//!
//! A request Kafka's protocol cannot answer — a version this listener
//! does not speak (ApiVersions told the client which it does), an unknown
//! API, a body that does not parse — closes the connection, as Kafka's own
//! broker does: there is no answer in a layout the client would read. Each
//! is logged (once a second) with what it was.

use super::group::Caller;
use super::sasl::{self, Login};
use super::versions::{self, key};
use super::wire::{ready, Malformed, Reader};
use crate::auth::quota::quotas;
use crate::handler::client::Client;
use crate::handler::give_way::GiveWay;
use crate::net::front::{Front, Served, Step};
use crate::reply::{Dispatched, Payload, Response};
use crate::shard::Shard;
use std::cell::{Cell, RefCell};
use std::net::IpAddr;
use std::rc::Rc;
use std::time::Instant;

/// A request's size prefix and the fixed start of its header.
pub const PREFIX_BYTES: usize = 12;

/// The api number of an answer that is not sent: the connection closes
/// without a word (a frame too large to read).
const UNSENT: u16 = u16::MAX;

/// A frame's prefix: its size and the start of its request header.
#[derive(Debug, Clone, Copy)]
pub struct Head {
    /// The whole frame, size prefix included.
    pub frame_bytes: usize,
    /// Kafka's api key.
    pub api: i16,
    /// The version the body is in.
    pub version: i16,
    /// Echoed in the answer.
    pub correlation_id: i32,
}

/// A frame that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum BadFrame {
    /// Its size leaves no room for a request header.
    #[error("a request of {0} bytes is shorter than its header")]
    Short(i32),
    /// Larger than a connection may send.
    #[error("a request of {bytes} bytes (api {api} v{version}) exceeds max_request_bytes ({max})")]
    TooLarge {
        /// The frame's bytes.
        bytes: usize,
        /// Its api key.
        api: i16,
        /// Its version.
        version: i16,
        /// The bound.
        max: usize,
    },
}

impl Head {
    /// Reads a prefix ([`PREFIX_BYTES`]) of a frame of at most `frame_max`
    /// bytes.
    pub fn parse(prefix: &[u8], frame_max: usize) -> Result<Head, BadFrame> {
        let size = i32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
        let head = Head {
            frame_bytes: 4 + size.max(0) as usize,
            api: i16::from_be_bytes([prefix[4], prefix[5]]),
            version: i16::from_be_bytes([prefix[6], prefix[7]]),
            correlation_id: i32::from_be_bytes([prefix[8], prefix[9], prefix[10], prefix[11]]),
        };
        if size < 0 || (size as usize) < PREFIX_BYTES - 4 {
            return Err(BadFrame::Short(size));
        }
        if head.frame_bytes > frame_max {
            return Err(BadFrame::TooLarge {
                bytes: head.frame_bytes,
                api: head.api,
                version: head.version,
                max: frame_max,
            });
        }
        Ok(head)
    }
}

/// One connection speaking Kafka's protocol.
pub struct Kafka {
    client: Client,
    /// Where its login stands (`sasl.rs`).
    login: RefCell<Login>,
    connected_at: Instant,
}

impl Kafka {
    /// Logs why a connection is closed (once a second per shard).
    fn closing(&self, why: &str) {
        let shard = &self.client.shard;
        crate::metrics::bump(&shard.metrics.counters.request_errors_total, 1);
        if let Some(left_out) = shard.denials_log.allow() {
            tracing::warn!(
                shard = shard.id,
                client = ?self.client.address,
                left_out,
                "kafka: closing a connection: {why} (one line a second)"
            );
        }
    }

    /// The principal the connection acts as: its login's, or, before any,
    /// the one the broker lets it act as without one (then it is in).
    fn principal(&self) -> Result<Rc<str>, crate::auth::login::Refusal> {
        let mut login = self.login.borrow_mut();
        match &*login {
            Login::Open(principal) => Ok(principal.clone()),
            Login::Start => {
                let principal = sasl::without_login(&self.client)?;
                *login = Login::Open(principal.clone());
                Ok(principal)
            }
            Login::Chosen | Login::Exchange(..) => Err(crate::auth::login::Refusal {
                code: protocol::ErrorCode::AuthenticationRequired,
                message: "a request before the SASL login it began is finished".into(),
                failed: false,
                user: None,
                counted: false,
            }),
        }
    }

    /// True when a connection needs a SASL login before anything else.
    fn needs_login(&self) -> bool {
        use crate::config::Authentication;
        match self.client.shard.config.authentication {
            Authentication::Scram => true,
            Authentication::ScramOrTls => {
                !matches!(&*self.client.certificate.borrow(), Some(Ok(_)))
            }
            Authentication::None | Authentication::Tls => false,
        }
    }

    /// A login's request (SaslHandshake, SaslAuthenticate) served, or
    /// `None` for any other.
    fn login_step<'a>(&'a self, head: Head, body: &[u8]) -> Option<Step<'a>> {
        let reply = |dispatched| {
            Step::Now(Served::Answer {
                request_id: head.correlation_id as u32,
                api: head.api as u16,
                dispatched,
            })
        };
        Some(match head.api {
            key::SASL_HANDSHAKE => {
                let mut r = Reader::new(body);
                let mut login = self.login.borrow_mut();
                match sasl::handshake(&self.client, &mut login, &mut r) {
                    Ok(answer) => reply(ready(key::SASL_HANDSHAKE, answer)),
                    Err(error) => {
                        drop(login);
                        self.closing(&error.to_string());
                        Step::Now(Served::Close(None))
                    }
                }
            }
            key::SASL_AUTHENTICATE => {
                let bytes = match Reader::new(body).nullable_bytes("auth_bytes") {
                    Ok(bytes) => bytes.unwrap_or_default().to_vec(),
                    Err(error) => {
                        self.closing(&error.to_string());
                        return Some(Step::Now(Served::Close(None)));
                    }
                };
                Step::Wait(Box::pin(sasl::authenticate(
                    &self.client,
                    &self.login,
                    self.connected_at,
                    head.correlation_id,
                    head.version,
                    bytes,
                )))
            }
            _ => return None,
        })
    }

    /// A request served: its answer in its place, or — a body that does not
    /// parse — the connection closed.
    fn served(&self, head: Head, body: &[u8], caller: &Caller, give_way: &Rc<GiveWay>) -> Served {
        match self.dispatch(head, body, caller, give_way) {
            Ok(dispatched) => Served::Answer {
                request_id: head.correlation_id as u32,
                api: head.api as u16,
                dispatched,
            },
            Err(error) => {
                self.closing(&format!("api {} v{}: {error}", head.api, head.version));
                Served::Close(None)
            }
        }
    }

    /// Dispatches a request whose version is served.
    fn dispatch(
        &self,
        head: Head,
        body: &[u8],
        caller: &Caller,
        give_way: &Rc<GiveWay>,
    ) -> Result<Dispatched, Malformed> {
        use super::group::{coordinator, listing, membership, offsets};
        let shard = &self.client.shard;
        let v = head.version;
        let mut r = if versions::flexible(head.api, v) {
            Reader::flexible(body)
        } else {
            Reader::new(body)
        };
        let principal: &str = &caller.principal;
        match head.api {
            key::FIND_COORDINATOR => coordinator::handle(shard, v, &mut r, principal),
            key::JOIN_GROUP => membership::handle_join(shard, v, &mut r, caller),
            key::SYNC_GROUP => membership::handle_sync(shard, v, &mut r, caller),
            key::HEARTBEAT => membership::handle_heartbeat(shard, v, &mut r, caller),
            key::LEAVE_GROUP => membership::handle_leave(shard, v, &mut r, caller),
            key::OFFSET_COMMIT => offsets::handle_commit(shard, v, &mut r, caller),
            key::OFFSET_FETCH => offsets::handle_fetch(shard, v, &mut r, caller),
            key::LIST_GROUPS => Ok(listing::handle_list(shard, v, caller)),
            key::DESCRIBE_GROUPS => listing::handle_describe(shard, v, &mut r, caller),
            key::PRODUCE => super::produce::handle(shard, v, &mut r, principal),
            key::FETCH => super::fetch::handle(
                shard,
                give_way,
                head.correlation_id as u32,
                v,
                &mut r,
                principal,
            ),
            key::LIST_OFFSETS => super::list_offsets::handle(shard, v, &mut r, principal),
            key::METADATA => super::metadata::handle(shard, v, &mut r, principal),
            key::INIT_PRODUCER_ID => super::producer_id::handle(shard, v, &mut r, principal),
            key::CREATE_TOPICS => super::topics::handle_create(shard, v, &mut r, principal),
            key::DELETE_TOPICS => super::topics::handle_delete(shard, v, &mut r, principal),
            key::CREATE_PARTITIONS => super::partitions::handle(shard, v, &mut r, principal),
            key::DESCRIBE_CONFIGS => super::configs::handle(shard, v, &mut r, principal),
            key::OFFSET_FOR_LEADER_EPOCH => {
                super::leader_epochs::handle(shard, v, &mut r, principal)
            }
            _ => unreachable!("versions::supported lists only these"),
        }
    }

    /// The request header's client id (and, in a flexible version, its
    /// tagged fields), then the body; `None` (the connection closing) for
    /// a header that is not one.
    fn request_header<'f>(&self, frame: &'f [u8], head: &Head) -> Option<(&'f str, &'f [u8])> {
        let mut r = Reader::new(&frame[PREFIX_BYTES..]);
        let read = r.nullable_string("client_id").and_then(|id| {
            // Header v2 (flexible versions): tagged fields after the id.
            if versions::flexible(head.api, head.version) {
                r.tagged_fields("request header tagged fields")?;
            }
            Ok(id.unwrap_or_default())
        });
        match read {
            Ok(client_id) => Some((client_id, &frame[frame.len() - r.remaining()..])),
            Err(error) => {
                self.closing(&error.to_string());
                None
            }
        }
    }
}

impl Front for Kafka {
    const PREFIX_BYTES: usize = PREFIX_BYTES;
    type Head = Head;

    fn admit(shard: &Rc<Shard>, address: Option<IpAddr>) -> Result<Kafka, crate::auth::Refused> {
        let address_slot = match address.map(|a| quotas().admit_address(a)) {
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
        crate::handler::opening::count_unauthenticated(shard, &client, true);
        Ok(Kafka {
            client,
            login: RefCell::new(Login::Start),
            connected_at: Instant::now(),
        })
    }

    /// Kafka has no answer before a request: the connection just closes.
    fn refusal(_message: &str) -> Vec<u8> {
        Vec::new()
    }

    fn certificate(
        &self,
        certificate: Option<Result<String, crate::auth::certificate::NoPrincipal>>,
    ) {
        *self.client.certificate.borrow_mut() = certificate;
    }

    /// Open once logged in, or from the start where no login is needed
    /// (the first request then settles who it is).
    fn open(&self) -> bool {
        matches!(*self.login.borrow(), Login::Open(_)) || !self.needs_login()
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
    ) -> Result<(usize, Head), (u32, Response)> {
        match Head::parse(prefix, frame_max) {
            Ok(head) => Ok((head.frame_bytes, head)),
            Err(why) => {
                self.closing(&why.to_string());
                let unsent = Response {
                    api: UNSENT,
                    error: 0,
                    header: Vec::new(),
                    payload: Payload::None,
                };
                Err((0, unsent))
            }
        }
    }

    fn serve<'a>(&'a self, frame: &'a [u8], head: Head, give_way: &'a Rc<GiveWay>) -> Step<'a> {
        let request_id = head.correlation_id as u32;
        let api = head.api as u16;
        let reply = |dispatched| {
            Step::Now(Served::Answer {
                request_id,
                api,
                dispatched,
            })
        };
        if head.api == key::API_VERSIONS {
            // Any version: an unknown one is answered with the list.
            return reply(ready(key::API_VERSIONS, versions::answer(head.version)));
        }
        if !versions::supported(head.api, head.version) {
            self.closing(&format!(
                "api {} v{} is not served (ApiVersions lists what is)",
                head.api, head.version
            ));
            return Step::Now(Served::Close(None));
        }
        let Some((client_id, body)) = self.request_header(frame, &head) else {
            return Step::Now(Served::Close(None));
        };
        if let Some(step) = self.login_step(head, body) {
            return step;
        }
        let principal = match self.principal() {
            Ok(principal) => principal,
            Err(why) => {
                self.closing(&why.message);
                return Step::Now(Served::Close(None));
            }
        };
        let caller = Caller {
            principal,
            client_id: client_id.to_string(),
            host: self
                .client
                .address
                .map_or_else(String::new, |a| format!("/{a}")),
        };
        let shard = &self.client.shard;
        let produced = if head.api == key::PRODUCE {
            body.len() as u64
        } else {
            0
        };
        let held = crate::handler::admission::quota_wait_bytes(&self.client, produced);
        let budget = head.api == key::PRODUCE && shard.unwritten.over();
        if held.is_zero() && !budget {
            return Step::Now(self.served(head, body, &caller, give_way));
        }
        Step::Wait(Box::pin(async move {
            if !held.is_zero() {
                glommio::timer::sleep(held).await;
            }
            if budget {
                shard.unwritten.wait_for_room().await;
            }
            self.served(head, body, &caller, give_way)
        }))
    }

    fn write_prefix(&self, out: &mut Vec<u8>, request_id: u32, response: &Response) {
        if response.api == UNSENT {
            return;
        }
        // Every answer header here is v0: the correlation id alone (no
        // flexible version is served, and ApiVersions' is always v0).
        let size = 4 + response.header.len() + response.payload.len();
        out.extend_from_slice(&(size as i32).to_be_bytes());
        out.extend_from_slice(&request_id.to_be_bytes());
    }

    fn outgoing(&self, response: Response) -> Response {
        // A fetch's records charged to its principal's fetch quota: in
        // debt, the connection's next request waits.
        if response.api == key::FETCH as u16 && !response.payload.is_empty() {
            if let Some(slot) = &*self.client.quota.borrow() {
                let delay = slot.usage().charge_fetch(response.payload.len() as u64);
                if !delay.is_zero() {
                    crate::handler::admission::mute(&self.client, delay);
                }
            }
        }
        response
    }

    fn dropped(&self, _api: u16) -> Option<Response> {
        // Only an acks=0 produce has no answer; every other request's
        // future answers (an error at worst).
        None
    }

    fn long_polls(&self, api: u16) -> bool {
        api == key::FETCH as u16
    }

    fn ended(&self) -> Option<String> {
        self.client.ended()
    }

    async fn until_ended(&self) {
        self.client.until_ended().await;
    }

    fn closed(&self) {
        crate::handler::opening::count_unauthenticated(&self.client.shard, &self.client, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(size: i32, api: i16, version: i16, correlation: i32) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&size.to_be_bytes());
        out.extend_from_slice(&api.to_be_bytes());
        out.extend_from_slice(&version.to_be_bytes());
        out.extend_from_slice(&correlation.to_be_bytes());
        out
    }

    #[test]
    fn a_request_is_sized_from_its_prefix_and_a_short_or_huge_one_is_refused() {
        let head = Head::parse(&prefix(40, key::METADATA, 8, 7), 1 << 20).unwrap();
        assert_eq!(
            (
                head.frame_bytes,
                head.api,
                head.version,
                head.correlation_id
            ),
            (44, key::METADATA, 8, 7)
        );
        assert!(Head::parse(&prefix(1 << 21, key::PRODUCE, 8, 1), 1 << 20)
            .unwrap_err()
            .to_string()
            .contains("exceeds max_request_bytes"));
        assert!(Head::parse(&prefix(4, key::PRODUCE, 8, 1), 1 << 20).is_err());
        assert!(Head::parse(&prefix(-5, key::PRODUCE, 8, 1), 1 << 20).is_err());
    }
}
