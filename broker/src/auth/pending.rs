//! Connections not logged in yet, per client address (issue 48): how many
//! one address may hold (`max_unauthenticated_connections_per_address`,
//! 256 by default: clients behind one NAT address share it) and how many
//! of them may have a SCRAM exchange under way at once
//! (`login_exchanges_per_address_max`, 8).
//!
//! A connection that has not logged in costs its read buffer (4 KiB until
//! it logs in) and, over TLS, a session, and serves nothing (the shards
//! count them: `ringlog_connections_unauthenticated`): a client that opens thousands
//! without logging in holds the broker's memory without a principal to
//! charge it to. And a login under way holds a made-up or real credential
//! and a nonce until its proof arrives; the review opened 400 of them from
//! one address before sending any proof. The failed-login limits
//! ([`mod@super::limiter`]) bound the passwords checked; these bound what
//! waiting costs. Past the first bound a connection is refused with
//! OVERLOADED; past the second a login waits for a place (a client that
//! starts many connections at once is slowed, not refused) and is answered
//! OVERLOADED only if none frees within the handshake deadline — never a
//! failed login.
//!
//! Slots are counted in one table shared by the shards, entries removed
//! when their count reaches zero: its size is the number of addresses with
//! connections not yet logged in, each bounded.

use super::Refused;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, OnceLock};

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    connections: u32,
    exchanges: u32,
}

/// The table and its bounds (0: none).
#[derive(Debug, Default)]
pub struct Pending {
    counts: Mutex<HashMap<IpAddr, Counts>>,
    connections_max: u32,
    exchanges_max: u32,
}

static PENDING: OnceLock<Pending> = OnceLock::new();

/// Sets the bounds from the configuration (once, at start).
pub fn init(connections_max: u32, exchanges_max: u32) {
    let _ = PENDING.set(Pending {
        counts: Mutex::new(HashMap::new()),
        connections_max,
        exchanges_max,
    });
}

/// The broker's table.
pub fn pending() -> &'static Pending {
    PENDING.get_or_init(|| Pending {
        counts: Mutex::new(HashMap::new()),
        connections_max: 256,
        exchanges_max: 8,
    })
}

/// What a slot counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Connection,
    Exchange,
}

/// A connection not logged in yet, or a login under way, of one address;
/// uncounted when dropped.
#[derive(Debug)]
pub struct Slot {
    table: &'static Pending,
    address: IpAddr,
    kind: Kind,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.table.lock();
        if let Some(c) = counts.get_mut(&self.address) {
            match self.kind {
                Kind::Connection => c.connections = c.connections.saturating_sub(1),
                Kind::Exchange => c.exchanges = c.exchanges.saturating_sub(1),
            }
            if c.connections == 0 && c.exchanges == 0 {
                counts.remove(&self.address);
            }
        }
    }
}

impl Pending {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Counts>> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn admit(&'static self, address: IpAddr, kind: Kind) -> Result<Slot, Refused> {
        let max = match kind {
            Kind::Connection => self.connections_max,
            Kind::Exchange => self.exchanges_max,
        };
        let mut counts = self.lock();
        let c = counts.entry(address).or_default();
        let count = match kind {
            Kind::Connection => &mut c.connections,
            Kind::Exchange => &mut c.exchanges,
        };
        if max > 0 && *count >= max {
            let count = *count;
            return Err(match kind {
                Kind::Connection => Refused::Unauthenticated { address, count },
                Kind::Exchange => Refused::Exchanges { address, count },
            });
        }
        *count += 1;
        Ok(Slot {
            table: self,
            address,
            kind,
        })
    }

    /// Counts a new connection of `address` until it logs in (the slot is
    /// dropped then) or closes.
    pub fn admit_connection(&'static self, address: IpAddr) -> Result<Slot, Refused> {
        self.admit(address, Kind::Connection)
    }

    /// Counts a SCRAM exchange of `address` until its proof is answered.
    pub fn begin_exchange(&'static self, address: IpAddr) -> Result<Slot, Refused> {
        self.admit(address, Kind::Exchange)
    }

    /// Connections not logged in yet, over every address (a gauge).
    pub fn connections(&self) -> u64 {
        self.lock().values().map(|c| u64::from(c.connections)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_holds_at_most_its_bounds_and_a_dropped_slot_frees_its_place() {
        let table: &'static Pending = Box::leak(Box::new(Pending {
            counts: Mutex::new(HashMap::new()),
            connections_max: 3,
            exchanges_max: 2,
        }));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let held: Vec<Slot> = (0..3).map(|_| table.admit_connection(a).unwrap()).collect();
        let refused = table.admit_connection(a).unwrap_err();
        assert_eq!(
            refused,
            Refused::Unauthenticated {
                address: a,
                count: 3
            }
        );
        assert!(
            refused
                .to_string()
                .contains("3 connections that have not logged in"),
            "{refused}"
        );
        assert!(
            table.admit_connection(b).is_ok(),
            "another address is not held back"
        );
        let first = table.begin_exchange(a).unwrap();
        let _second = table.begin_exchange(a).unwrap();
        let refused = table.begin_exchange(a).unwrap_err();
        assert_eq!(
            refused,
            Refused::Exchanges {
                address: a,
                count: 2
            }
        );
        assert!(
            refused.to_string().contains("2 logins under way"),
            "{refused}"
        );
        drop(first);
        assert!(table.begin_exchange(a).is_ok());
        assert_eq!(table.connections(), 3);
        drop(held);
        assert_eq!(table.connections(), 0);
    }
}
