//! Failed logins per client address: past `login_failures_per_minute_max`
//! in a minute, an address's logins are refused without being checked
//! until its minute is over, so a password cannot be guessed faster than
//! that from one address, however many connections it opens.
//!
//! The table is shared by the shards (a guessing client spreads its
//! connections over all of them) and bounded by
//! `login_failure_addresses_max`: when full, expired entries and then
//! others make room. Its memory is the configuration's, not the
//! clients'. A lock per failed login or login of a blocked address is
//! cheap next to the failure's delay; a successful login from an address
//! with no failures takes it once, to look.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long failures count against an address.
pub const WINDOW: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy)]
struct Entry {
    since: Instant,
    failures: u32,
}

/// The table. One per broker process.
#[derive(Debug)]
pub struct Limiter {
    entries: Mutex<HashMap<IpAddr, Entry>>,
    per_minute_max: u32,
    addresses_max: usize,
}

impl Limiter {
    /// A table of at most `addresses_max` addresses, each allowed
    /// `per_minute_max` failures a minute.
    pub fn new(per_minute_max: u32, addresses_max: usize) -> Limiter {
        Limiter {
            entries: Mutex::new(HashMap::new()),
            per_minute_max: per_minute_max.max(1),
            addresses_max: addresses_max.max(1),
        }
    }

    /// `Some(wait)` while `address` may not log in: how long until it may.
    pub fn blocked(&self, address: IpAddr, now: Instant) -> Option<Duration> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let entry = entries.get(&address)?;
        let until = entry.since + WINDOW;
        (entry.failures >= self.per_minute_max && until > now).then(|| until - now)
    }

    /// Counts one failed login of `address`.
    pub fn failed(&self, address: IpAddr, now: Instant) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = entries.get_mut(&address) {
            if now.duration_since(entry.since) >= WINDOW {
                *entry = Entry {
                    since: now,
                    failures: 0,
                };
            }
            entry.failures = entry.failures.saturating_add(1);
            return;
        }
        if entries.len() >= self.addresses_max {
            // Full: drop the expired entries, and if that frees less than
            // an eighth, any others down to seven eighths, so the next
            // sweep is an eighth of the table's inserts away (each insert
            // costs O(1) on average, whatever the clients do). Dropping a
            // live entry forgets some failures of an address; a client
            // needs the table's size in addresses of its own to make that
            // happen to its own.
            entries.retain(|_, e| now.duration_since(e.since) < WINDOW);
            let keep = self.addresses_max - self.addresses_max.div_ceil(8);
            let excess = entries.len().saturating_sub(keep);
            let victims: Vec<IpAddr> = entries.keys().take(excess).copied().collect();
            for victim in victims {
                entries.remove(&victim);
            }
        }
        entries.insert(
            address,
            Entry {
                since: now,
                failures: 1,
            },
        );
    }

    /// Addresses remembered now.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// True when no address is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_blocked_past_its_failures_until_its_minute_ends() {
        let limiter = Limiter::new(3, 100);
        let now = Instant::now();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        for _ in 0..3 {
            assert_eq!(limiter.blocked(a, now), None);
            limiter.failed(a, now);
        }
        let wait = limiter.blocked(a, now + Duration::from_secs(10)).unwrap();
        assert_eq!(wait, Duration::from_secs(50));
        assert_eq!(limiter.blocked(b, now), None);
        assert_eq!(limiter.blocked(a, now + WINDOW), None);
        // A new minute starts over.
        limiter.failed(a, now + WINDOW);
        assert_eq!(limiter.blocked(a, now + WINDOW), None);
    }

    #[test]
    fn the_table_never_holds_more_addresses_than_its_bound() {
        let limiter = Limiter::new(1, 64);
        let now = Instant::now();
        for i in 0..10_000u32 {
            let address = IpAddr::from(i.to_be_bytes());
            limiter.failed(address, now + Duration::from_millis(u64::from(i)));
        }
        assert!(
            limiter.len() <= 64 && limiter.len() > 48,
            "{}",
            limiter.len()
        );
        // The last one is kept, and blocked.
        let last = IpAddr::from(9_999u32.to_be_bytes());
        assert!(limiter
            .blocked(last, now + Duration::from_secs(10))
            .is_some());
    }
}
