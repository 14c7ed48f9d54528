//! What a connection's bytes mean: a protocol *front end*.
//!
//! `connection.rs` is transport only — the socket (plain or TLS), the read
//! buffer and its deadlines, framing by the size the front end reads off
//! each frame's prefix, the queue of answers in request order, writes,
//! sendfile, and backpressure by count and bytes. Everything a protocol
//! decides — whether a new connection may be served at all, its opening
//! (a handshake, a login), what a frame asks for, quotas, how an answer is
//! framed on the wire — is the front end's, so a second protocol (Kafka's)
//! is a second implementation of [`Front`], not a fork of the connection.
//! ringlog's own protocol is `handler::native::Native`.

use crate::handler::give_way::GiveWay;
use crate::reply::{Dispatched, Response};
use crate::shard::Shard;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::rc::Rc;

/// What a frame asked for.
pub enum Served {
    /// Queue the answer (in request order).
    Answer {
        /// The request's id, echoed in the answer's framing.
        request_id: u32,
        /// The request's api, as the front end numbers it.
        api: u16,
        /// The answer, now, later or never.
        dispatched: Dispatched,
    },
    /// Send this answer, if any, and close the connection (a failed login,
    /// a frame that cannot be parsed).
    Close(Option<(u32, Response)>),
}

/// How a frame is served: at once (the common case), or once something
/// it waits for is over (a quota's turn, a login's place, the shard's
/// unwritten bytes). The connection reads nothing more meanwhile.
pub enum Step<'a> {
    /// Served now.
    Now(Served),
    /// Served when this resolves.
    Wait(Pin<Box<dyn Future<Output = Served> + 'a>>),
}

/// A protocol front end: one per connection, shared by its reader and its
/// writer (methods take `&self`; state is in cells).
pub trait Front: Sized + 'static {
    /// Bytes a frame's size can be read from.
    const PREFIX_BYTES: usize;

    /// A frame's prefix as [`Self::frame_bytes`] read it, handed back to
    /// [`Self::serve`] with the whole frame (read once per frame).
    type Head: Copy;

    /// A new connection from `address`, before TLS: the front end that
    /// serves it, or why it is refused.
    fn admit(shard: &Rc<Shard>, address: Option<IpAddr>) -> Result<Self, crate::auth::Refused>;

    /// The bytes that tell a refused connection why before it is closed
    /// (none when the protocol has no way to say it before a request).
    fn refusal(message: &str) -> Vec<u8>;

    /// The principal of the client's verified TLS certificate, or why it
    /// names none; `None` without a certificate.
    fn certificate(
        &self,
        certificate: Option<Result<String, crate::auth::certificate::NoPrincipal>>,
    );

    /// True once the connection is open (past its handshake and login):
    /// its read buffer grows, its frames may be large, and the idle
    /// deadline replaces the handshake's.
    fn open(&self) -> bool;

    /// The largest frame the connection may send now.
    fn frame_max(&self) -> usize;

    /// The size of the frame at the front of `prefix` ([`Self::PREFIX_BYTES`]
    /// long) and its parsed prefix, or the answer that ends the connection
    /// (the stream cannot be resynchronised).
    fn frame_bytes(
        &self,
        prefix: &[u8],
        frame_max: usize,
    ) -> Result<(usize, Self::Head), (u32, Response)>;

    /// Serves one whole frame, at once or after a wait. (Not an `async fn`:
    /// a future per request cost ringlog's protocol a tenth more broker
    /// CPU per single-message produce, 0.53 against 0.49 µs.)
    fn serve<'a>(
        &'a self,
        frame: &'a [u8],
        head: Self::Head,
        give_way: &'a Rc<GiveWay>,
    ) -> Step<'a>;

    /// Writes an answer's framing before its header bytes.
    fn write_prefix(&self, out: &mut Vec<u8>, request_id: u32, response: &Response);

    /// A last look at an answer before it goes out (a fetch charged to its
    /// principal's quota).
    fn outgoing(&self, response: Response) -> Response;

    /// What a request whose answer was dropped is told: `None` for an api
    /// that needs no answer (a produce without acknowledgement).
    fn dropped(&self, api: u16) -> Option<Response>;

    /// True for an api whose answer may wait (a fetch's long-poll) and can
    /// be asked to give way to the answers behind it.
    fn long_polls(&self, api: u16) -> bool;

    /// Why the connection must end now (its user was removed), if it must.
    fn ended(&self) -> Option<String>;

    /// Resolves once the connection must end; never, if it cannot.
    fn until_ended(&self) -> impl Future<Output = ()>;

    /// The connection is closing: what the front end counted for it is
    /// given back.
    fn closed(&self);
}
