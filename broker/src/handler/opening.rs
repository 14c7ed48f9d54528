//! A connection's opening in ringlog's protocol: the Handshake, with the
//! SCRAM-SHA-256 login it may carry and the Authenticate that finishes it
//! (PROTOCOL.md §2). Until it is open a connection may send nothing else;
//! a failed login is answered after `login_failure_delay_ms` and closes
//! the connection. The policy (who may log in, limits, certificates) is
//! `auth/`'s; this is the exchange.

use super::client::Client;
use super::{Payload, Response};
use crate::shard::Shard;
use protocol::codec::verify;
use protocol::frame::{self, Api, FramePrefix};
use protocol::{wire, ErrorCode};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Where a connection stands in its opening.
pub enum Access {
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
#[expect(
    clippy::too_many_lines,
    reason = "the Handshake and the Authenticate of one login exchange, in protocol order"
)]
pub fn login_frame(
    shard: &Shard,
    client: &Client,
    access: &mut Access,
    prefix: FramePrefix,
    header: &[u8],
    under_way: Option<Result<crate::auth::pending::Slot, crate::auth::Refused>>,
) -> Result<Response, Response> {
    let api = prefix.api;
    let refused = |code, message: &str| super::error_response(api, code, message, None);
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
                let message = super::invalid_header(Api::Authenticate, e).message;
                let refusal = crate::auth::login::Refusal {
                    code: ErrorCode::AuthenticationFailed,
                    message,
                    failed: true,
                    user: None,
                    counted: false,
                };
                return Err(login_failed(shard, client, api, &refusal));
            }
        };
        let client_final = request.sasl_bytes().map(|b| b.bytes()).unwrap_or_default();
        return match crate::auth::login::finish(*exchange, client_final, client.address) {
            Ok(proved) => {
                let header = super::with_builder(shard, |fbb| {
                    protocol::codec::security::authenticate_response(
                        fbb,
                        &proved.server_final,
                        &proved.principal,
                        &hello(shard),
                    )
                    .to_vec()
                });
                opened(shard, client, access, proved.principal, api)?;
                *client.session.borrow_mut() = Some(shard.security.with(|snapshot| {
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
            Err(refusal) => Err(login_failed(shard, client, api, &refusal)),
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
                &super::invalid_header(Api::Handshake, e).message,
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
    let certificate = client.certificate.borrow();
    let step = shard.security.with(|snapshot| {
        crate::auth::login::begin(
            &shard.config,
            snapshot,
            certificate.as_ref(),
            request.sasl_mechanism(),
            request.sasl_bytes().map(|b| b.bytes()),
            client.address,
            crate::auth::limiter(),
        )
    });
    drop(certificate);
    let (next, principal) = match step {
        Ok(crate::auth::login::Step::Open(principal)) => (None, Some(principal)),
        Ok(crate::auth::login::Step::Continue(exchange, answer)) => {
            let under_way = match under_way {
                Some(Err(refusal)) => {
                    return Ok(refused(ErrorCode::Overloaded, &refusal.to_string()))
                }
                Some(Ok(slot)) => Some(slot),
                None => None,
            };
            *access = Access::Login(exchange, under_way);
            (Some(answer), None)
        }
        Err(refusal) if refusal.failed => return Err(login_failed(shard, client, api, &refusal)),
        Err(refusal) => return Ok(refused(refusal.code, &refusal.message)),
    };
    // Who this broker is (its id and build) is told only to a client that
    // is in: after the proof when a login continues.
    let told = next.is_none().then(|| hello(shard));
    // Granted as asked: every answer after this one carries the throttle
    // time in its frame (PROTOCOL.md §1).
    client.throttle_in_frames.set(request.throttle_in_frames());
    let header = super::with_builder(shard, |fbb| {
        protocol::codec::handshake_response(
            fbb,
            told.as_ref(),
            protocol::codec::HandshakeLogin {
                next: next.as_deref(),
                principal: principal.as_deref().unwrap_or_default(),
            },
            request.throttle_in_frames(),
        )
        .to_vec()
    });
    if let Some(principal) = principal {
        opened(shard, client, access, principal, api)?;
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
/// then why not.
pub async fn exchange_slot(
    address: std::net::IpAddr,
    until: Instant,
) -> Result<crate::auth::pending::Slot, crate::auth::Refused> {
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
    client: &Client,
    access: &mut Access,
    principal: String,
    api: u16,
) -> Result<(), Response> {
    admit_principal(shard, client, &principal).map_err(|refusal| {
        super::error_response(api, ErrorCode::Overloaded, &refusal.to_string(), None)
    })?;
    *access = Access::Open(principal.into());
    Ok(())
}

/// A client of any protocol is in as `principal`: counted against its
/// quota's connections (`Err` past them), no longer as a connection not
/// logged in, and in the login metrics.
pub fn admit_principal(
    shard: &Shard,
    client: &Client,
    principal: &str,
) -> Result<(), crate::auth::Refused> {
    let exempt = shard.security.with(|s| s.acls.is_super_user(principal));
    if !exempt {
        *client.quota.borrow_mut() = crate::auth::quota::quotas().admit_principal(principal)?;
    }
    client.pending.borrow_mut().take();
    count_unauthenticated(shard, client, false);
    crate::metrics::bump(&shard.metrics.counters.logins_total, 1);
    if principal == protocol::acl::ANONYMOUS {
        crate::metrics::bump(&shard.metrics.counters.logins_anonymous_total, 1);
    }
    Ok(())
}

/// A failed login: counted against the client's address and in the
/// metrics, logged (rate-limited), and answered AUTHENTICATION_FAILED.
fn login_failed(
    shard: &Shard,
    client: &Client,
    api: u16,
    refusal: &crate::auth::login::Refusal,
) -> Response {
    count_login_failure(shard, client, refusal);
    super::error_response(api, ErrorCode::AuthenticationFailed, &refusal.message, None)
}

/// A failed login of any protocol: counted against the client's address
/// (unless the check counted it) and in the metrics, and logged
/// (rate-limited).
pub fn count_login_failure(shard: &Shard, client: &Client, refusal: &crate::auth::login::Refusal) {
    let (message, user) = (refusal.message.as_str(), refusal.user.as_deref());
    crate::metrics::bump(&shard.metrics.counters.login_failures_total, 1);
    if let Some(address) = client.address.filter(|_| !refusal.counted) {
        crate::auth::limiter().failed(&address, Instant::now());
    }
    if let Some(suppressed) = shard.login_failures_log.allow() {
        tracing::warn!(
            address = ?client.address,
            user = user.unwrap_or(""),
            suppressed,
            "login failed: {message}"
        );
    }
}

/// Counts the connection in (or out of) the shard's gauge of connections
/// not logged in.
pub fn count_unauthenticated(shard: &Shard, client: &Client, counted: bool) {
    if client.unauthenticated.replace(counted) != counted {
        let gauge = &shard.metrics.connections_unauthenticated;
        gauge.set(if counted {
            gauge.get() + 1
        } else {
            gauge.get().saturating_sub(1)
        });
    }
}
