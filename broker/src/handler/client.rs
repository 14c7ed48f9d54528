//! What the broker knows of one client connection, whatever its protocol:
//! where it comes from, its certificate, its principal's quota slot and
//! delay, its place among the logins under way, its login session. The
//! opening (`opening.rs`) and admission (`admission.rs`) read and fill it;
//! a front end (`native.rs`) owns it.

use crate::shard::Shard;
use std::cell::{Cell, RefCell};
use std::net::IpAddr;
use std::rc::Rc;
use std::time::Instant;

/// One client connection as the handlers see it.
pub struct Client {
    /// Its shard.
    pub shard: Rc<Shard>,
    /// The client's address (failed logins are counted per address).
    pub address: Option<IpAddr>,
    /// Counted against its address's bound while it lives.
    pub address_slot: Option<crate::auth::quota::AddressSlot>,
    /// The principal of the client's verified TLS certificate, or why it
    /// has none; `None` without a certificate.
    pub certificate: RefCell<Option<Result<String, crate::auth::certificate::NoPrincipal>>>,
    /// Once open: the principal's quota usage, when a quota applies to it
    /// (its connection is counted there while it lives).
    pub quota: RefCell<Option<crate::auth::quota::PrincipalSlot>>,
    /// A quota's delay: nothing more is read from the client until then.
    pub muted_until: Cell<Option<Instant>>,
    /// The native protocol: the client asked, in its Handshake, for the
    /// throttle time in every later answer's frame.
    pub throttle_in_frames: Cell<bool>,
    /// Counted as not logged in yet, until it is.
    pub pending: RefCell<Option<crate::auth::pending::Slot>>,
    /// Counted in the shard's gauge of connections not logged in, until it
    /// logs in or closes.
    pub unauthenticated: Cell<bool>,
    /// Logged in with SCRAM: ended when its user is removed.
    pub session: RefCell<Option<crate::auth::sessions::Session>>,
}

impl Client {
    /// How long from now its principal is over a quota: what a request
    /// sent now would wait before it is served (this connection's fetch
    /// delay included). 0 without a quota.
    pub fn throttle_ms(&self) -> u32 {
        let now = Instant::now();
        let muted = self
            .muted_until
            .get()
            .map_or(std::time::Duration::ZERO, |until| {
                until.saturating_duration_since(now)
            });
        let owed = self
            .quota
            .borrow()
            .as_ref()
            .map_or(std::time::Duration::ZERO, |slot| slot.usage().debt());
        owed.max(muted).as_millis().min(u128::from(u32::MAX)) as u32
    }

    /// Why the connection must end now (its login's user was removed), if
    /// it must.
    pub fn ended(&self) -> Option<String> {
        self.session.borrow().as_ref().and_then(|s| s.end().why())
    }

    /// Resolves once the connection must end; never without a login
    /// session.
    pub async fn until_ended(&self) {
        let end = self.session.borrow().as_ref().map(|s| s.end().clone());
        match end {
            Some(end) => end.ended().await,
            None => std::future::pending().await,
        }
    }
}
