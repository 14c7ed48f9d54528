//! Failed logins per client address, and per user: past
//! `login_failures_per_minute_max` in a minute (per address) or
//! `login_failures_per_user_per_minute_max` (per user, from any address),
//! logins are refused without being checked until the minute is over, so a
//! password cannot be guessed faster than that from one address, however
//! many connections it opens — nor, at one user, from many addresses.
//!
//! A proof is checked only after a *reservation*: the check counts as a
//! failure from the moment it starts until it is known to be right
//! (`begin_check` … `end_check`). Counting failures only when they were
//! known let a client open 400 exchanges first and send every proof after:
//! all 400 passed the look at the Handshake, 399 wrong passwords were
//! checked in 1.8 s (issue 48). With reservations, however the proofs are
//! timed, at most the limit's worth are checked in a minute.
//!
//! The per-user limit is a trade: someone who knows a user's name can keep
//! that user's logins refused, a minute at a time, by failing as that user
//! from anywhere (Kafka has no such limit; Redpanda neither). Its default
//! (100) is high enough that a user's own mistakes do not trip it and low
//! enough that a guesser spread over 10,000 addresses checks 100 passwords a
//! minute per broker, not 200,000. Set it to 0 to turn it off.
//!
//! A table is shared by the shards (a guessing client spreads its
//! connections over all of them) and bounded by
//! `login_failure_addresses_max` keys: when full, expired entries and then
//! others make room. Its memory is the configuration's, not the
//! clients'. A lock per check or failure is cheap next to a check's
//! PBKDF2-free HMACs and the failure's delay.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long failures count against an address.
pub const WINDOW: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy)]
struct Entry {
    since: Instant,
    failures: u32,
    /// Proofs being checked now: each counts as a failure until it is
    /// known not to be one.
    checking: u32,
}

/// A table. The broker has one per address and one per user.
#[derive(Debug)]
pub struct Limiter<K = IpAddr> {
    entries: Mutex<HashMap<K, Entry>>,
    per_minute_max: u32,
    keys_max: usize,
}

impl<K: Eq + Hash + Clone> Limiter<K> {
    /// A table of at most `keys_max` keys, each allowed `per_minute_max`
    /// failures a minute (0: no limit).
    pub fn new(per_minute_max: u32, keys_max: usize) -> Limiter<K> {
        Limiter {
            entries: Mutex::new(HashMap::new()),
            per_minute_max,
            keys_max: keys_max.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait(&self, entry: &Entry, now: Instant) -> Option<Duration> {
        let until = entry.since + WINDOW;
        let fresh = until > now;
        let spent = if fresh { entry.failures } else { 0 } + entry.checking;
        (self.per_minute_max > 0 && spent >= self.per_minute_max).then(|| {
            until
                .saturating_duration_since(now)
                .max(Duration::from_secs(1))
        })
    }

    /// `Some(wait)` while `key` may not log in: how long until it may.
    pub fn blocked(&self, key: &K, now: Instant) -> Option<Duration> {
        let entries = self.lock();
        self.wait(entries.get(key)?, now)
    }

    /// Reserves one check of a proof for `key`: `Err(wait)` when its
    /// failures and the checks under way reach the limit. Every `Ok` must
    /// be followed by one [`Limiter::end_check`].
    pub fn begin_check(&self, key: &K, now: Instant) -> Result<(), Duration> {
        if self.per_minute_max == 0 {
            return Ok(());
        }
        let mut entries = self.lock();
        if let Some(entry) = entries.get_mut(key) {
            if let Some(wait) = self.wait(entry, now) {
                return Err(wait);
            }
            if now.duration_since(entry.since) >= WINDOW {
                entry.since = now;
                entry.failures = 0;
            }
            entry.checking += 1;
            return Ok(());
        }
        self.make_room(&mut entries, now);
        entries.insert(
            key.clone(),
            Entry {
                since: now,
                failures: 0,
                checking: 1,
            },
        );
        Ok(())
    }

    /// Ends a check begun with [`Limiter::begin_check`]: a failure counts.
    pub fn end_check(&self, key: &K, failed: bool, now: Instant) {
        if self.per_minute_max == 0 {
            return;
        }
        let mut entries = self.lock();
        if let Some(entry) = entries.get_mut(key) {
            entry.checking = entry.checking.saturating_sub(1);
            if failed {
                if now.duration_since(entry.since) >= WINDOW {
                    entry.since = now;
                    entry.failures = 0;
                }
                entry.failures = entry.failures.saturating_add(1);
            }
        }
    }

    /// Counts one failed login of `key` that was not a check (a malformed
    /// exchange, a login refused unchecked).
    pub fn failed(&self, key: &K, now: Instant) {
        if self.per_minute_max == 0 {
            return;
        }
        let mut entries = self.lock();
        if let Some(entry) = entries.get_mut(key) {
            if now.duration_since(entry.since) >= WINDOW {
                entry.since = now;
                entry.failures = 0;
            }
            entry.failures = entry.failures.saturating_add(1);
            return;
        }
        self.make_room(&mut entries, now);
        entries.insert(
            key.clone(),
            Entry {
                since: now,
                failures: 1,
                checking: 0,
            },
        );
    }

    /// Full: drop the expired entries, and if that frees less than an
    /// eighth, any others (not ones with checks under way) down to seven
    /// eighths, so the next sweep is an eighth of the table's inserts away
    /// (each insert costs O(1) on average, whatever the clients do).
    /// Dropping a live entry forgets some failures of a key; a client needs
    /// the table's size in keys of its own to make that happen to its own.
    fn make_room(&self, entries: &mut HashMap<K, Entry>, now: Instant) {
        if entries.len() < self.keys_max {
            return;
        }
        entries.retain(|_, e| e.checking > 0 || now.duration_since(e.since) < WINDOW);
        let keep = self.keys_max - self.keys_max.div_ceil(8);
        let excess = entries.len().saturating_sub(keep);
        let victims: Vec<K> = entries
            .iter()
            .filter(|(_, e)| e.checking == 0)
            .take(excess)
            .map(|(k, _)| k.clone())
            .collect();
        for victim in victims {
            entries.remove(&victim);
        }
    }

    /// Keys remembered now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_blocked_past_its_failures_until_its_minute_ends() {
        let limiter: Limiter = Limiter::new(3, 100);
        let now = Instant::now();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        for _ in 0..3 {
            assert_eq!(limiter.blocked(&a, now), None);
            limiter.failed(&a, now);
        }
        let wait = limiter.blocked(&a, now + Duration::from_secs(10)).unwrap();
        assert_eq!(wait, Duration::from_secs(50));
        assert_eq!(limiter.blocked(&b, now), None);
        assert_eq!(limiter.blocked(&a, now + WINDOW), None);
        // A new minute starts over.
        limiter.failed(&a, now + WINDOW);
        assert_eq!(limiter.blocked(&a, now + WINDOW), None);
    }

    #[test]
    fn the_table_never_holds_more_addresses_than_its_bound() {
        let limiter: Limiter = Limiter::new(1, 64);
        let now = Instant::now();
        for i in 0..10_000u32 {
            let address = IpAddr::from(i.to_be_bytes());
            limiter.failed(&address, now + Duration::from_millis(u64::from(i)));
        }
        assert!(
            limiter.len() <= 64 && limiter.len() > 48,
            "{}",
            limiter.len()
        );
        // The last one is kept, and blocked.
        let last = IpAddr::from(9_999u32.to_be_bytes());
        assert!(limiter
            .blocked(&last, now + Duration::from_secs(10))
            .is_some());
    }

    #[test]
    fn proofs_checked_at_once_count_before_they_are_known() {
        // 400 exchanges open, then every proof: only the limit's worth
        // are checked.
        let limiter: Limiter = Limiter::new(20, 100);
        let now = Instant::now();
        let a: IpAddr = "10.0.0.3".parse().unwrap();
        let checked = (0..400)
            .filter(|_| limiter.begin_check(&a, now).is_ok())
            .count();
        assert_eq!(checked, 20);
        for _ in 0..checked {
            limiter.end_check(&a, true, now);
        }
        assert!(limiter
            .begin_check(&a, now + Duration::from_secs(59))
            .is_err());
        // A right proof gives its reservation back.
        let b: IpAddr = "10.0.0.4".parse().unwrap();
        for _ in 0..100 {
            limiter.begin_check(&b, now).unwrap();
            limiter.end_check(&b, false, now);
        }
        assert_eq!(limiter.blocked(&b, now), None);
        // Per user, keyed by name; 0 turns a table off.
        let users: Limiter<String> = Limiter::new(2, 100);
        for _ in 0..2 {
            users.begin_check(&"alice".to_string(), now).unwrap();
            users.end_check(&"alice".to_string(), true, now);
        }
        assert!(users.begin_check(&"alice".to_string(), now).is_err());
        assert!(users.begin_check(&"bob".to_string(), now).is_ok());
        let off: Limiter<String> = Limiter::new(0, 100);
        for _ in 0..1000 {
            off.begin_check(&"alice".to_string(), now).unwrap();
            off.end_check(&"alice".to_string(), true, now);
        }
        assert!(off.is_empty());
    }
}
