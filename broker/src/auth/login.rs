//! A connection's login: from the Handshake to the principal it acts as.
//!
//! | `authentication` | Handshake without a login | Handshake with SCRAM-SHA-256 |
//! |---|---|---|
//! | `none` (default) | the certificate's principal, else `User:ANONYMOUS` | checked; its user |
//! | `scram` | AUTHENTICATION_REQUIRED (the connection may try again) | checked; its user |
//! | `tls` | the certificate's principal | AUTHENTICATION_FAILED: certificates only |
//! | `scram_or_tls` | the certificate's principal, else AUTHENTICATION_REQUIRED | checked; its user |
//!
//! A SCRAM login takes two round trips: the Handshake carries the client's
//! first message and its answer the broker's; Authenticate carries the
//! client's proof and its answer the broker's signature. Until then the
//! connection serves nothing else, and all of it must happen within
//! `handshake_timeout_ms`. Every failure — wrong password, unknown user
//! (indistinguishable: [`protocol::scram`]), a mechanism not offered, a
//! malformed message, an address past its failed logins ([`mod@super::limiter`])
//! — is answered AUTHENTICATION_FAILED after `login_failure_delay_ms`, and
//! the connection is closed.

use crate::config::{Authentication, Config};
use protocol::scram::{self, ScramError, ServerFirst};
use protocol::ErrorCode;
use std::net::IpAddr;
use std::sync::OnceLock;
use std::time::Instant;

/// What the Handshake's login part led to.
#[derive(Debug)]
pub enum Step {
    /// The connection is open, acting as this principal.
    Open(String),
    /// A SCRAM login is under way: answer with these bytes, then take
    /// Authenticate.
    Continue(Box<ServerFirst>, Vec<u8>),
}

/// A login refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// AUTHENTICATION_REQUIRED or AUTHENTICATION_FAILED.
    pub code: ErrorCode,
    /// For the client (never which of user and password was wrong).
    pub message: String,
    /// A failed login: answered after the delay, then the connection is
    /// closed, and the address's failures count it. Otherwise the client
    /// may send another Handshake.
    pub failed: bool,
    /// The user the client named, for the broker's log.
    pub user: Option<String>,
    /// The failure is counted against the address already (a checked
    /// proof); otherwise the caller counts it.
    pub counted: bool,
}

impl Refusal {
    fn failed(message: impl Into<String>, user: Option<&str>) -> Refusal {
        Refusal {
            code: ErrorCode::AuthenticationFailed,
            message: message.into(),
            failed: true,
            user: user.map(str::to_string),
            counted: false,
        }
    }
}

/// This process's secret for made-up salts of users that do not exist,
/// where the registry keeps none (it does in etcd and in a standalone
/// data directory: `coordinator::security`).
fn secret() -> &'static [u8; 32] {
    static SECRET: OnceLock<[u8; 32]> = OnceLock::new();
    SECRET.get_or_init(|| {
        let mut bytes = [0u8; 32];
        scram::fill_random(&mut bytes);
        bytes
    })
}

/// The login part of a Handshake: `mechanism` and `first` as the client
/// sent them (absent or empty: none), `certificate` the principal of the
/// client's verified TLS certificate (or why it has none), `address` the
/// client's.
pub fn begin(
    config: &Config,
    users: &super::Snapshot,
    certificate: Option<&Result<String, crate::auth::certificate::NoPrincipal>>,
    mechanism: Option<&str>,
    first: Option<&[u8]>,
    address: Option<IpAddr>,
    limiter: &super::limiter::Limiter,
) -> Result<Step, Refusal> {
    let mode = config.authentication;
    let Some(mechanism) = mechanism.filter(|m| !m.is_empty()) else {
        return match (mode, certificate) {
            (Authentication::Scram, _) | (Authentication::ScramOrTls, None) => Err(Refusal {
                code: ErrorCode::AuthenticationRequired,
                message: format!(
                    "this broker needs a login: a Handshake with sasl_mechanism {}{} (the CLI: --user NAME --password-file FILE)",
                    scram::MECHANISM,
                    if mode == Authentication::ScramOrTls { ", or a TLS client certificate" } else { "" }
                ),
                failed: false,
                user: None,
                counted: false,
            }),
            (_, Some(Ok(principal))) => Ok(Step::Open(principal.clone())),
            (Authentication::None, _) => Ok(Step::Open(protocol::acl::ANONYMOUS.to_string())),
            (_, Some(Err(why))) => Err(Refusal::failed(why.to_string(), None)),
            (Authentication::Tls, None) => Err(Refusal::failed(
                "this broker authenticates by TLS client certificate, and the connection presented none",
                None,
            )),
        };
    };
    if mode == Authentication::Tls {
        return Err(Refusal::failed(
            "this broker authenticates by TLS client certificate, not by a SASL login",
            None,
        ));
    }
    if mechanism != scram::MECHANISM {
        return Err(Refusal::failed(
            format!(
                "mechanism {:?} is not offered: this broker takes {}",
                mechanism.chars().take(64).collect::<String>(),
                scram::MECHANISM
            ),
            None,
        ));
    }
    if let Some(address) = address {
        if let Some(wait) = limiter.blocked(&address, Instant::now()) {
            return Err(Refusal::failed(
                format!(
                    "too many failed logins from {address}: its logins are refused for {} s more",
                    wait.as_secs().max(1)
                ),
                None,
            ));
        }
    }
    let first = first.unwrap_or_default();
    // The cluster's secret, so that every broker and every run answers an
    // unknown name alike; this process's own only where none is kept.
    let secret: &[u8] = if users.login_secret.is_empty() {
        secret()
    } else {
        &users.login_secret
    };
    match scram::server_first_among(
        first,
        |user| users.users.get(user).cloned(),
        secret,
        &users.iterations,
    ) {
        Ok((exchange, answer)) => Ok(Step::Continue(Box::new(exchange), answer)),
        Err(error) => Err(Refusal::failed(format!("login failed: {error}"), None)),
    }
}

/// A login whose proof was right.
#[derive(Debug)]
pub struct Proved {
    /// Who the connection acts as ("User:alice").
    pub principal: String,
    /// The broker's final message (its signature).
    pub server_final: Vec<u8>,
    /// The user.
    pub user: String,
    /// The stored key of the credential proved: which of the user's
    /// passwords the session logged in with ([`super::sessions`]).
    pub stored_key: [u8; 32],
}

/// The Authenticate request of a SCRAM login: what was proved, or the
/// refusal. The proof is checked only after the client's address and the
/// user it names have a check reserved ([`mod@super::limiter`]): past
/// either's failures, or with as many proofs under way as the limit, it is
/// refused unchecked. The refusal's
/// failure is counted here (`Refusal::counted`).
pub fn finish(
    exchange: ServerFirst,
    client_final: &[u8],
    address: Option<IpAddr>,
) -> Result<Proved, Refusal> {
    let user = exchange.user().to_string();
    let stored_key = exchange.stored_key();
    let now = Instant::now();
    let addresses = super::limiter();
    let users = super::user_limiter();
    if let Some(address) = address {
        if let Err(wait) = addresses.begin_check(&address, now) {
            return Err(Refusal::failed(
                format!(
                    "too many failed logins from {address}: its logins are refused for {} s more",
                    wait.as_secs().max(1)
                ),
                Some(&user),
            ));
        }
    }
    if let Err(wait) = users.begin_check(&user, now) {
        if let Some(address) = address {
            addresses.end_check(&address, true, now);
        }
        let mut refusal = Refusal::failed(
            format!(
                "too many failed logins for user {user:?}: its logins are refused for {} s more",
                wait.as_secs().max(1)
            ),
            Some(&user),
        );
        refusal.counted = true;
        return Err(refusal);
    }
    let checked = exchange.finish(client_final);
    let failed = checked.is_err();
    if let Some(address) = address {
        addresses.end_check(&address, failed, now);
    }
    users.end_check(&user, failed, now);
    let mut refusal = match checked {
        Ok((user, server_final)) => {
            return Ok(Proved {
                principal: format!("User:{user}"),
                server_final,
                user,
                stored_key,
            })
        }
        Err(ScramError::WrongPassword) => Refusal::failed(
            format!("login failed for user {user:?}: wrong user name or password"),
            Some(&user),
        ),
        Err(error) => Refusal::failed(format!("login failed: {error}"), Some(&user)),
    };
    refusal.counted = true;
    Err(refusal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use coordinator::security::SecurityRecords;
    use protocol::scram::{client_first, Credential, ITERATIONS_MIN};

    fn snapshot() -> super::super::Snapshot {
        let mut records = SecurityRecords::default();
        records
            .users
            .insert("alice".into(), Credential::new(b"pw", ITERATIONS_MIN));
        // The per-user test's own user: failures are counted per user in
        // the process's limiter, which the other tests' alice shares.
        records
            .users
            .insert("carol".into(), Credential::new(b"pw", ITERATIONS_MIN));
        super::super::Snapshot {
            users: records.users.into_iter().collect(),
            ..Default::default()
        }
    }

    fn config(authentication: Authentication) -> Config {
        Config {
            authentication,
            ..Config::default()
        }
    }

    #[test]
    fn each_mode_answers_a_handshake_without_a_login_as_its_table_says() {
        let users = snapshot();
        let limiter = super::super::limiter::Limiter::new(3, 10);
        let cert = Ok("User:carol".to_string());
        let open = |mode, cert: Option<&Result<String, crate::auth::certificate::NoPrincipal>>| {
            match begin(&config(mode), &users, cert, None, None, None, &limiter) {
                Ok(Step::Open(p)) => Ok(p),
                Ok(Step::Continue(..)) => Err(ErrorCode::Internal),
                Err(r) => Err(r.code),
            }
        };
        assert_eq!(open(Authentication::None, None).unwrap(), "User:ANONYMOUS");
        assert_eq!(
            open(Authentication::None, Some(&cert)).unwrap(),
            "User:carol"
        );
        assert_eq!(
            open(Authentication::Scram, Some(&cert)),
            Err(ErrorCode::AuthenticationRequired)
        );
        assert_eq!(
            open(Authentication::Tls, Some(&cert)).unwrap(),
            "User:carol"
        );
        assert_eq!(
            open(Authentication::ScramOrTls, Some(&cert)).unwrap(),
            "User:carol"
        );
        assert_eq!(
            open(Authentication::ScramOrTls, None),
            Err(ErrorCode::AuthenticationRequired)
        );
        let no_cn = Err(crate::auth::certificate::NoPrincipal::NoCommonName);
        assert_eq!(
            open(Authentication::Tls, Some(&no_cn)),
            Err(ErrorCode::AuthenticationFailed)
        );
    }

    #[test]
    fn a_scram_login_opens_as_its_user_and_failures_are_blocked_per_address() {
        let users = snapshot();
        let limiter = super::super::limiter::Limiter::new(2, 10);
        let address: IpAddr = "127.0.0.9".parse().unwrap();
        let attempt = |password: &[u8]| -> Result<String, Refusal> {
            let (client, first) = client_first("alice").unwrap();
            let step = begin(
                &config(Authentication::Scram),
                &users,
                None,
                Some(scram::MECHANISM),
                Some(&first),
                Some(address),
                &limiter,
            )?;
            let Step::Continue(exchange, answer) = step else {
                panic!("no exchange")
            };
            let (_, last) = client.finish(password, &answer).unwrap();
            Ok(finish(*exchange, &last, None)?.principal)
        };
        assert_eq!(attempt(b"pw").unwrap(), "User:alice");
        for _ in 0..2 {
            let refusal = attempt(b"guess").unwrap_err();
            assert!(refusal.failed && refusal.message.contains("wrong user name or password"));
            limiter.failed(&address, Instant::now());
        }
        let blocked = attempt(b"pw").unwrap_err();
        assert!(
            blocked.message.contains("too many failed logins"),
            "{blocked:?}"
        );
        let other = begin(
            &config(Authentication::Scram),
            &users,
            None,
            Some("PLAIN"),
            Some(b"x"),
            None,
            &limiter,
        )
        .unwrap_err();
        assert!(other.message.contains("is not offered"), "{other:?}");
    }

    #[test]
    fn a_user_guessed_at_from_many_addresses_is_refused_past_its_own_limit() {
        let users = snapshot();
        let guess = |address: IpAddr| -> Refusal {
            let (client, first) = client_first("carol").unwrap();
            let Ok(Step::Continue(exchange, answer)) = begin(
                &config(Authentication::Scram),
                &users,
                None,
                Some(scram::MECHANISM),
                Some(&first),
                Some(address),
                super::super::limiter(),
            ) else {
                panic!("no exchange")
            };
            let (_, last) = client.finish(b"guess", &answer).unwrap();
            finish(*exchange, &last, Some(address)).unwrap_err()
        };
        // 100 addresses (the default per-user limit), one guess each: each
        // is checked; the 101st address's is refused unchecked.
        for i in 0..100u32 {
            let refusal = guess(IpAddr::from((0x0a00_0000 + i).to_be_bytes()));
            assert!(
                refusal.message.contains("wrong user name or password"),
                "{refusal:?}"
            );
        }
        let refusal = guess("10.1.0.1".parse().unwrap());
        assert!(
            refusal
                .message
                .contains("too many failed logins for user \"carol\""),
            "{refusal:?}"
        );
    }
}
