//! SASL on the Kafka listener: SaslHandshake (v1) names SCRAM-SHA-256, and
//! two SaslAuthenticate requests (v0–1) carry the exchange ringlog's own
//! Handshake and Authenticate carry (RFC 5802, `auth::login`): the client's
//! first message, the broker's; the client's proof, the broker's
//! signature. The same users, the same limits — a place among its
//! address's logins under way, failures counted per address and per user,
//! `login_failure_delay_ms` before a refusal, which closes the connection —
//! and the same principal (`User:NAME`), whose rights and quotas then apply.
//!
//! Without a login, a connection is in at its first other request where
//! the broker lets it be (`authentication = none`: anonymous; `tls`, or
//! `scram_or_tls` with a certificate: the certificate's principal), and
//! closed where it does not.

use super::errors::code;
use super::versions::key;
use super::wire::{answer, Malformed, Reader, Writer};
use crate::auth::login::{self, Refusal};
use crate::handler::client::Client;
use crate::handler::opening;
use crate::net::front::Served;
use crate::reply::{Dispatched, Payload};
use protocol::scram::{ServerFirst, MECHANISM};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Where a connection's login stands.
pub enum Login {
    /// Nothing asked yet.
    Start,
    /// SaslHandshake chose SCRAM-SHA-256: the next SaslAuthenticate carries
    /// the client's first message.
    Chosen,
    /// The broker's first message went out: the next SaslAuthenticate
    /// carries the proof (counted among its address's logins under way).
    Exchange(Box<ServerFirst>, Option<crate::auth::pending::Slot>),
    /// In, acting as this principal.
    Open(Rc<str>),
}

/// The SaslHandshake answer: SCRAM-SHA-256 is the one mechanism, where the
/// broker takes logins at all.
pub fn handshake(
    client: &Client,
    state: &mut Login,
    r: &mut Reader<'_>,
) -> Result<Vec<u8>, Malformed> {
    let mechanism = r.string("mechanism")?;
    let offered = client.shard.config.authentication != crate::config::Authentication::Tls;
    let error = match state {
        Login::Start if offered && mechanism == MECHANISM => {
            *state = Login::Chosen;
            code::NONE
        }
        Login::Start => code::UNSUPPORTED_SASL_MECHANISM,
        _ => code::ILLEGAL_SASL_STATE,
    };
    let mut w = Writer::default();
    w.i16(error);
    w.array(usize::from(offered));
    if offered {
        w.string(MECHANISM);
    }
    Ok(w.out)
}

/// A SaslAuthenticate answer's body.
fn authenticate_answer(version: i16, error: i16, message: Option<&str>, bytes: &[u8]) -> Vec<u8> {
    let mut w = Writer::default();
    w.i16(error);
    w.nullable_string(message);
    w.i32(bytes.len() as i32);
    w.out.extend_from_slice(bytes);
    if version >= 1 {
        w.i64(0); // session_lifetime_ms: no re-authentication
    }
    w.out
}

/// A refused login: counted and logged, answered after the delay, and the
/// connection closes.
async fn refused(client: &Client, correlation_id: i32, version: i16, refusal: Refusal) -> Served {
    opening::count_login_failure(&client.shard, client, &refusal);
    let delay = Duration::from_millis(client.shard.config.login_failure_delay_ms);
    glommio::timer::sleep(delay).await;
    let body = authenticate_answer(
        version,
        code::SASL_AUTHENTICATION_FAILED,
        Some(&refusal.message),
        &[],
    );
    Served::Close(Some((
        correlation_id as u32,
        answer(key::SASL_AUTHENTICATE, body, Payload::None),
    )))
}

/// One SaslAuthenticate: the exchange's next step.
pub async fn authenticate(
    client: &Client,
    state: &std::cell::RefCell<Login>,
    connected_at: Instant,
    correlation_id: i32,
    version: i16,
    bytes: Vec<u8>,
) -> Served {
    let current = std::mem::replace(&mut *state.borrow_mut(), Login::Start);
    let step = match current {
        Login::Chosen => first(client, state, connected_at, version, &bytes).await,
        Login::Exchange(exchange, _under_way) => proof(client, state, *exchange, version, &bytes),
        other => {
            *state.borrow_mut() = other;
            let body = authenticate_answer(
                version,
                code::ILLEGAL_SASL_STATE,
                Some("SaslAuthenticate before a SaslHandshake that chose SCRAM-SHA-256, or after the login"),
                &[],
            );
            return Served::Close(Some((
                correlation_id as u32,
                answer(key::SASL_AUTHENTICATE, body, Payload::None),
            )));
        }
    };
    match step {
        Ok(body) => Served::Answer {
            request_id: correlation_id as u32,
            api: key::SASL_AUTHENTICATE as u16,
            dispatched: Dispatched::Ready(answer(key::SASL_AUTHENTICATE, body, Payload::None)),
        },
        Err(refusal) => refused(client, correlation_id, version, refusal).await,
    }
}

/// A refusal of a login's step that is not a wrong proof (an address over
/// its logins under way, a principal over its connections).
fn overloaded(message: String, user: Option<String>) -> Refusal {
    Refusal {
        code: protocol::ErrorCode::Overloaded,
        message,
        failed: true,
        user,
        counted: true,
    }
}

/// The client's first message: the broker's answer, or the refusal.
async fn first(
    client: &Client,
    state: &std::cell::RefCell<Login>,
    connected_at: Instant,
    version: i16,
    bytes: &[u8],
) -> Result<Vec<u8>, Refusal> {
    let shard = &client.shard;
    // A place among the address's logins under way, waited for as long
    // as the opening may take: many at once are slowed.
    let under_way = match client.address {
        Some(address) => {
            let until = connected_at + Duration::from_millis(shard.config.handshake_timeout_ms);
            Some(
                opening::exchange_slot(address, until)
                    .await
                    .map_err(|refusal| overloaded(refusal.to_string(), None))?,
            )
        }
        None => None,
    };
    let certificate = client.certificate.borrow().clone();
    let begun = shard.security.with(|snapshot| {
        login::begin(
            &shard.config,
            snapshot,
            certificate.as_ref(),
            Some(MECHANISM),
            Some(bytes),
            client.address,
            crate::auth::limiter(),
        )
    })?;
    match begun {
        login::Step::Continue(exchange, server_first) => {
            *state.borrow_mut() = Login::Exchange(exchange, under_way);
            Ok(authenticate_answer(
                version,
                code::NONE,
                None,
                &server_first,
            ))
        }
        login::Step::Open(_) => Err(Refusal {
            code: protocol::ErrorCode::AuthenticationFailed,
            message: "a SCRAM login without a first message".into(),
            failed: true,
            user: None,
            counted: false,
        }),
    }
}

/// The client's proof: the broker's signature once the connection is in
/// as the user, or the refusal.
fn proof(
    client: &Client,
    state: &std::cell::RefCell<Login>,
    exchange: ServerFirst,
    version: i16,
    bytes: &[u8],
) -> Result<Vec<u8>, Refusal> {
    let shard = &client.shard;
    let proved = login::finish(exchange, bytes, client.address)?;
    opening::admit_principal(shard, client, &proved.principal)
        .map_err(|refusal| overloaded(refusal.to_string(), Some(proved.user.clone())))?;
    *client.session.borrow_mut() = Some(shard.security.with(|snapshot| {
        shard
            .sessions
            .open(&proved.user, proved.stored_key, snapshot)
    }));
    *state.borrow_mut() = Login::Open(proved.principal.into());
    Ok(authenticate_answer(
        version,
        code::NONE,
        None,
        &proved.server_final,
    ))
}

/// A request other than the login's, before any login: the principal the
/// broker lets the connection act as without one (admitted against its
/// quota), or why it may not.
pub fn without_login(client: &Client) -> Result<Rc<str>, Refusal> {
    let shard = &client.shard;
    let certificate = client.certificate.borrow().clone();
    let step = shard.security.with(|snapshot| {
        login::begin(
            &shard.config,
            snapshot,
            certificate.as_ref(),
            None,
            None,
            client.address,
            crate::auth::limiter(),
        )
    });
    match step {
        Ok(login::Step::Open(principal)) => {
            opening::admit_principal(shard, client, &principal).map_err(|e| Refusal {
                code: protocol::ErrorCode::Overloaded,
                message: e.to_string(),
                failed: false,
                user: None,
                counted: false,
            })?;
            Ok(principal.into())
        }
        Ok(login::Step::Continue(..)) => Err(Refusal {
            code: protocol::ErrorCode::AuthenticationRequired,
            message: "a login without a mechanism".into(),
            failed: false,
            user: None,
            counted: false,
        }),
        Err(refusal) => Err(refusal),
    }
}
