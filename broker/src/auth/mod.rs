//! Who a connection is, and what it may do (issue 22).
//!
//! - [`login`]: the Handshake's login (SCRAM-SHA-256, or the TLS client
//!   certificate's subject) that gives a connection its principal, with a
//!   delay before every failure's answer and a per-address bound on failed
//!   logins ([`mod@limiter`]).
//! - [`quota`]: produce, fetch and request rates per principal, enforced
//!   by delaying the connection's next read; connections per principal and
//!   per client address.
//! - [`authorize`]: the check every request makes, when `authorization` is
//!   on, against the access control rules: which operation on which
//!   resource each api needs (PROTOCOL.md §7 has the same table).
//! - This file: the users and rules every shard checks against. The
//!   control thread reads them from the registry (a file standalone, etcd
//!   in a cluster) at start, after each change it makes, and whenever the
//!   registry's watch reports one, and [`publish`]es them; each shard keeps
//!   the last one it saw ([`Cache`]) and looks at one atomic counter per
//!   request to know whether a newer one was published. A revoked rule
//!   applies from the next request of every connection, on every broker,
//!   as soon as its watch has reported it.
//!
//! Security off — `authentication = "none"` and `authorization = false`,
//! the defaults — keeps the broker as it was: every connection acts as
//! `User:ANONYMOUS` and no request is checked.

pub mod authorize;
pub mod certificate;
pub mod limiter;
pub mod login;
pub mod pending;
pub mod principal_rules;
pub mod quota;
mod refused;
pub mod sessions;

pub use refused::Refused;

use coordinator::security::SecurityRecords;
use protocol::acl::Acls;
use protocol::scram::Credential;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// The users and rules as the control thread last published them.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Each user's credential.
    pub users: HashMap<String, Credential>,
    /// The rules, with the configuration's super users.
    pub acls: Acls,
    /// The cluster's secret for an unknown user's made-up login (empty:
    /// this process's own).
    pub login_secret: Vec<u8>,
    /// The real users' iteration counts, one per user: an unknown user's
    /// made-up count is one of them.
    pub iterations: Vec<u32>,
}

static LIMITER: std::sync::OnceLock<limiter::Limiter> = std::sync::OnceLock::new();
static USER_LIMITER: std::sync::OnceLock<limiter::Limiter<String>> = std::sync::OnceLock::new();

static BROKER_LOGIN: std::sync::OnceLock<Option<(String, Vec<u8>)>> = std::sync::OnceLock::new();

/// Sets the broker's failed-login table up from its configuration and
/// reads `broker_password_file` (once, at start).
pub fn init(config: &crate::config::Config) -> anyhow::Result<()> {
    let _ = LIMITER.set(limiter::Limiter::new(
        config.login_failures_per_minute_max,
        config.login_failure_addresses_max,
    ));
    pending::init(
        config.max_unauthenticated_connections_per_address,
        config.login_exchanges_per_address_max,
    );
    let _ = USER_LIMITER.set(limiter::Limiter::new(
        config.login_failures_per_user_per_minute_max,
        config.login_failure_addresses_max,
    ));
    let login = match (&config.broker_user, &config.broker_password_file) {
        (Some(user), Some(file)) => Some((
            user.clone(),
            coordinator::security::read_password_file(file)?,
        )),
        _ => None,
    };
    let _ = BROKER_LOGIN.set(login);
    principal_rules::init(principal_rules::MappingRules::parse(
        &config.tls_principal_mapping_rules,
    )?);
    quota::init(
        config.quota_default,
        config.quotas.clone(),
        config.max_connections_per_address,
    );
    if config.authentication == crate::config::Authentication::None && !config.authorization {
        tracing::info!("security is off: no login is needed and every connection may do everything (authentication = \"none\", authorization = false)");
    } else if config.authentication == crate::config::Authentication::None {
        tracing::warn!("authorization is on but authentication = \"none\": connections without a login act as User:ANONYMOUS, and rules for User:* apply to anyone who connects");
    }
    Ok(())
}

/// The user and password this broker logs in with to other brokers.
pub fn broker_login() -> Option<(&'static str, &'static [u8])> {
    BROKER_LOGIN
        .get()
        .and_then(|l| l.as_ref())
        .map(|(user, password)| (user.as_str(), password.as_slice()))
}

/// The broker's failed-login table, per client address.
pub fn limiter() -> &'static limiter::Limiter {
    LIMITER.get_or_init(|| limiter::Limiter::new(20, 10_000))
}

/// The broker's failed-login table, per user.
pub fn user_limiter() -> &'static limiter::Limiter<String> {
    USER_LIMITER.get_or_init(|| limiter::Limiter::new(100, 10_000))
}

static CURRENT: RwLock<Option<Arc<Snapshot>>> = RwLock::new(None);
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Makes `records` (with `super_users`) what every shard checks against
/// from its next request on.
pub fn publish(records: SecurityRecords, super_users: &[String]) {
    quota::quotas().set_registry(
        records
            .quotas
            .iter()
            .map(|(principal, quota)| (principal.clone(), quota::Quota::from(*quota)))
            .collect(),
    );
    let mut iterations: Vec<u32> = records.users.values().map(|c| c.iterations).collect();
    iterations.sort_unstable();
    let snapshot = Arc::new(Snapshot {
        iterations,
        login_secret: records.login_secret,
        users: records.users.into_iter().collect(),
        acls: Acls::new(records.acls, super_users),
    });
    let mut current = CURRENT.write().unwrap_or_else(|p| p.into_inner());
    *current = Some(snapshot);
    GENERATION.fetch_add(1, Ordering::Release);
}

fn current() -> Arc<Snapshot> {
    CURRENT
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .unwrap_or_default()
}

/// A shard's copy of the published snapshot. Not `Send`; owned by one
/// shard. A request costs one atomic load; a new snapshot, one read lock.
#[derive(Debug)]
pub struct Cache {
    seen: Cell<u64>,
    snapshot: RefCell<Arc<Snapshot>>,
}

impl Default for Cache {
    fn default() -> Self {
        Cache {
            seen: Cell::new(GENERATION.load(Ordering::Acquire)),
            snapshot: RefCell::new(current()),
        }
    }
}

impl Cache {
    /// Runs `f` on the newest snapshot.
    pub fn with<T>(&self, f: impl FnOnce(&Snapshot) -> T) -> T {
        let generation = GENERATION.load(Ordering::Acquire);
        if generation != self.seen.get() {
            *self.snapshot.borrow_mut() = current();
            self.seen.set(generation);
        }
        f(&self.snapshot.borrow())
    }
}
