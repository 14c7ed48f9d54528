//! Quotas (issue 22, item 3): how fast a principal may produce, fetch and
//! send requests to this broker, and how many connections it and one
//! client address may hold.
//!
//! Rates are enforced by delay, never by dropping data, as Kafka does
//! since KIP-219 — but per principal, not per connection: a request is
//! charged to its principal's buckets *before* it is served, and waits for
//! its turn (until what the principal's earlier requests, produces and
//! fetches cost is paid) on whichever connection it came; meanwhile that
//! connection reads nothing more, so the client's next requests wait in
//! its socket. A fetch's bytes are charged as its answer goes out, and the
//! principal's next request, on any connection, waits for them. So a
//! client gains nothing by opening a connection per request or many at
//! once (issue 48). The wait is reported in Produce, Fetch and MultiFetch
//! answers (`throttle_ms`), so a client can tell a quota from a slow
//! broker.
//!
//! A bucket is a virtual clock (GCRA): `paid_until` is the time by which
//! everything charged so far is paid for at the quota's rate. A charge of
//! `n` units waits until the previous charges are paid (`paid_until - now`
//! if positive), then moves the clock on by `n / rate`. Over any stretch
//! of time a principal gets its rate, plus at most one request. One bucket
//! per principal and kind, shared by its connections on every shard
//! (atomics, no lock); quotas are per broker, as Kafka's are.
//!
//! Quotas also change at run time (`ringlog quotas set|delete|list`,
//! AlterQuotas and DescribeQuotas): stored in the cluster's registry with
//! the users and rules, published to every broker with them
//! ([`Quotas::set_registry`]), and taking precedence over the broker's
//! configured ones: a principal's own from the registry, else its own from
//! the configuration, else the registry's default, else the configuration's.
//! A change reaches the principal's connections already open: every
//! principal's connections share one [`Usage`], whose rates are atomics
//! the change rewrites.
//!
//! Configuration (per broker, in its TOML):
//!
//! ```toml
//! max_connections_per_address = 100       # 0: no bound
//! [quota_default]                         # a principal without its own
//! produce_bytes_per_second = 10485760
//! [quotas."User:batch"]                   # replaces the default for it
//! produce_bytes_per_second = 52428800
//! fetch_bytes_per_second = 0              # 0: no bound
//! requests_per_second = 1000
//! connections = 50
//! ```

use super::Refused;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

/// One principal's quota (0 = no bound).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Quota {
    /// Message-set bytes produced per second.
    pub produce_bytes_per_second: u64,
    /// Log bytes fetched per second (followers' fetches are not counted).
    pub fetch_bytes_per_second: u64,
    /// Requests of any api per second.
    pub requests_per_second: u64,
    /// Connections open at once.
    pub connections: u32,
}

impl From<coordinator::security::QuotaRecord> for Quota {
    fn from(record: coordinator::security::QuotaRecord) -> Quota {
        Quota {
            produce_bytes_per_second: record.produce_bytes_per_second,
            fetch_bytes_per_second: record.fetch_bytes_per_second,
            requests_per_second: record.requests_per_second,
            connections: record.connections,
        }
    }
}

impl Quota {
    /// True when it bounds nothing.
    pub fn is_unbounded(&self) -> bool {
        *self == Quota::default()
    }
}

/// A rate as a virtual clock ([module doc](self)).
#[derive(Debug)]
struct Bucket {
    /// Units per second; 0: unbounded. Changed at run time.
    rate: AtomicU64,
    /// Nanoseconds since [`epoch`] by which all charges are paid.
    paid_until: AtomicU64,
}

impl Bucket {
    fn new(rate: u64) -> Bucket {
        Bucket {
            rate: AtomicU64::new(rate),
            paid_until: AtomicU64::new(0),
        }
    }

    /// A new rate for the charges from now on. Debt run up under an old
    /// rate is forgiven when the bucket becomes unbounded, kept otherwise.
    fn set_rate(&self, rate: u64) {
        if self.rate.swap(rate, Ordering::AcqRel) != rate && rate == 0 {
            self.paid_until.store(0, Ordering::Release);
        }
    }

    /// What is charged and not paid at `now`: the wait before anything
    /// more of the bucket's.
    fn debt(&self, now: u64) -> Duration {
        if self.rate.load(Ordering::Relaxed) == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.paid_until.load(Ordering::Acquire).saturating_sub(now))
    }

    /// Charges `units` at `now` (ns since the epoch); the wait before the
    /// charge's turn.
    fn charge(&self, units: u64, now: u64) -> Duration {
        let rate = self.rate.load(Ordering::Relaxed);
        if rate == 0 || units == 0 {
            return Duration::ZERO;
        }
        let cost = (u128::from(units) * 1_000_000_000 / u128::from(rate))
            .min(u128::from(u64::MAX / 4)) as u64;
        let mut paid = self.paid_until.load(Ordering::Relaxed);
        loop {
            let next = paid.max(now).saturating_add(cost);
            match self.paid_until.compare_exchange_weak(
                paid,
                next,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Duration::from_nanos(paid.saturating_sub(now)),
                Err(current) => paid = current,
            }
        }
    }
}

/// The monotonic clock's zero for the buckets.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    epoch().elapsed().as_nanos() as u64
}

/// One principal's buckets and open connections.
#[derive(Debug)]
pub struct Usage {
    produce: Bucket,
    fetch: Bucket,
    requests: Bucket,
    /// The `connections` quota (0: no bound).
    connections_max: AtomicU32,
    connections: AtomicU32,
}

impl Usage {
    fn new(quota: Quota) -> Usage {
        Usage {
            produce: Bucket::new(quota.produce_bytes_per_second),
            fetch: Bucket::new(quota.fetch_bytes_per_second),
            requests: Bucket::new(quota.requests_per_second),
            connections_max: AtomicU32::new(quota.connections),
            connections: AtomicU32::new(0),
        }
    }

    /// The principal's quota changed (at run time): its connections follow
    /// from their next request on. Connections already open past a
    /// lowered `connections` stay; new ones wait for room.
    fn set(&self, quota: Quota) {
        self.produce.set_rate(quota.produce_bytes_per_second);
        self.fetch.set_rate(quota.fetch_bytes_per_second);
        self.requests.set_rate(quota.requests_per_second);
        self.connections_max
            .store(quota.connections, Ordering::Release);
    }

    /// Reserves one request (and a produce's `produce_bytes`) before it
    /// is served: how long it must wait for its turn — until what the
    /// principal's earlier requests and produces cost is paid, and what its
    /// fetches cost — on whichever connection it comes. A principal's debt
    /// is its own, not a connection's: a client that opened a new
    /// connection for every request, or sixteen at once over every shard,
    /// got each connection's first request served at once (issue 48:
    /// 72.7 MiB/s against a 1 MiB/s quota).
    pub fn reserve(&self, produce_bytes: u64) -> Duration {
        if self.unbounded() {
            return Duration::ZERO;
        }
        let now = now_ns();
        self.requests
            .charge(1, now)
            .max(self.produce.charge(produce_bytes, now))
            .max(self.fetch.debt(now))
    }

    /// How long from now the principal is in debt on any bucket: the wait
    /// a request sent now would have (before its own charge).
    pub fn debt(&self) -> Duration {
        let now = now_ns();
        self.requests
            .debt(now)
            .max(self.produce.debt(now))
            .max(self.fetch.debt(now))
    }

    /// Charges fetched bytes; the delay before the connection reads again.
    pub fn charge_fetch(&self, bytes: u64) -> Duration {
        self.fetch.charge(bytes, now_ns())
    }

    /// True when nothing is bounded (nothing to charge).
    pub fn unbounded(&self) -> bool {
        self.produce.rate.load(Ordering::Relaxed) == 0
            && self.fetch.rate.load(Ordering::Relaxed) == 0
            && self.requests.rate.load(Ordering::Relaxed) == 0
    }
}

/// A connection counted against its principal's `connections` quota;
/// uncounted when dropped.
#[derive(Debug)]
pub struct PrincipalSlot(Arc<Usage>);

impl PrincipalSlot {
    /// The principal's usage.
    pub fn usage(&self) -> &Arc<Usage> {
        &self.0
    }
}

impl Drop for PrincipalSlot {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection counted against its address's bound; uncounted when
/// dropped.
#[derive(Debug)]
pub struct AddressSlot(&'static Quotas, IpAddr);

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut counts = self.0.addresses.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = counts.get_mut(&self.1) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&self.1);
            }
        }
    }
}

/// The broker's quotas and what each principal and address uses.
#[derive(Debug, Default)]
pub struct Quotas {
    default: Quota,
    by_principal: BTreeMap<String, Quota>,
    /// Quotas set at run time, by principal (`default`: the default),
    /// as last published from the registry.
    registry: RwLock<BTreeMap<String, Quota>>,
    max_per_address: u32,
    usage: Mutex<HashMap<String, Arc<Usage>>>,
    addresses: Mutex<HashMap<IpAddr, u32>>,
}

static QUOTAS: OnceLock<Quotas> = OnceLock::new();

/// Sets the quotas up from the configuration (once, at start): the
/// default, each principal's own, connections per address.
pub fn init(default: Quota, by_principal: BTreeMap<String, Quota>, max_per_address: u32) {
    let _ = QUOTAS.set(Quotas {
        default,
        by_principal,
        max_per_address,
        ..Quotas::default()
    });
}

/// The broker's quotas.
pub fn quotas() -> &'static Quotas {
    QUOTAS.get_or_init(Quotas::default)
}

impl Quotas {
    /// Counts a new connection from `address`; `Err` with the refusal's
    /// words when the address holds its bound already.
    pub fn admit_address(&'static self, address: IpAddr) -> Result<Option<AddressSlot>, Refused> {
        if self.max_per_address == 0 {
            return Ok(None);
        }
        let mut counts = self.addresses.lock().unwrap_or_else(|p| p.into_inner());
        let count = counts.entry(address).or_insert(0);
        if *count >= self.max_per_address {
            return Err(Refused::Address {
                address,
                count: *count,
            });
        }
        *count += 1;
        Ok(Some(AddressSlot(self, address)))
    }

    /// The quota that applies to `principal`: its own from the registry,
    /// its own from the configuration, the registry's default, the
    /// configuration's default — the first there is.
    pub fn effective(&self, principal: &str) -> Quota {
        let registry = self.registry.read().unwrap_or_else(|p| p.into_inner());
        registry
            .get(principal)
            .or_else(|| self.by_principal.get(principal))
            .or_else(|| registry.get(coordinator::security::DEFAULT_QUOTA))
            .copied()
            .unwrap_or(self.default)
    }

    /// The configuration's quotas (the default under `default`), for
    /// DescribeQuotas.
    pub fn configured(&self) -> BTreeMap<String, Quota> {
        let mut all = self.by_principal.clone();
        if !self.default.is_unbounded() {
            all.insert(
                coordinator::security::DEFAULT_QUOTA.to_string(),
                self.default,
            );
        }
        all
    }

    /// The quotas set at run time, as last published.
    pub fn registry(&self) -> BTreeMap<String, Quota> {
        self.registry
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Takes the quotas set at run time (published with the users and
    /// rules) and applies them to every principal's connections at once.
    pub fn set_registry(&self, quotas: BTreeMap<String, Quota>) {
        *self.registry.write().unwrap_or_else(|p| p.into_inner()) = quotas;
        let usage = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        for (principal, usage) in usage.iter() {
            usage.set(self.effective(principal));
        }
    }

    /// Counts a connection opened as `principal`; `Err` with the refusal's
    /// words past its `connections` quota. Every principal's connections
    /// share one [`Usage`], bounded or not, so that a quota set later
    /// reaches them.
    pub fn admit_principal(&self, principal: &str) -> Result<Option<PrincipalSlot>, Refused> {
        let usage = {
            let mut usage = self.usage.lock().unwrap_or_else(|p| p.into_inner());
            match usage.get(principal) {
                Some(found) => found.clone(),
                None => {
                    let made = Arc::new(Usage::new(self.effective(principal)));
                    usage.insert(principal.to_string(), made.clone());
                    made
                }
            }
        };
        let before = usage.connections.fetch_add(1, Ordering::AcqRel);
        let limit = usage.connections_max.load(Ordering::Acquire);
        let slot = PrincipalSlot(usage);
        if limit != 0 && before >= limit {
            return Err(Refused::Principal {
                principal: principal.to_string(),
                count: before,
            });
        }
        Ok(Some(slot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_gives_its_rate_plus_one_request() {
        let bucket = Bucket::new(1000); // units per second
        let second = 1_000_000_000u64;
        // The first charge is free; the next waits for the first to be paid.
        assert_eq!(bucket.charge(500, 0), Duration::ZERO);
        assert_eq!(bucket.charge(500, 0), Duration::from_millis(500));
        assert_eq!(bucket.charge(100, 0), Duration::from_secs(1));
        // Later, once paid up, free again.
        assert_eq!(bucket.charge(100, 2 * second), Duration::ZERO);
        // A client that waits as told gets the rate: 10 s of charges of
        // 100 every time it may, 1,000 a second, plus one.
        let bucket = Bucket::new(1000);
        let (mut now, mut sent) = (0u64, 0u64);
        while now < 10 * second {
            now += bucket.charge(100, now).as_nanos() as u64;
            sent += 100;
        }
        assert!((10_000..=10_100).contains(&sent), "{sent}");
        assert_eq!(Bucket::new(0).charge(u64::MAX, 0), Duration::ZERO);
    }

    #[test]
    fn connections_are_bounded_per_principal_and_per_address() {
        let limited = Quota {
            connections: 2,
            ..Quota::default()
        };
        let quotas: &'static Quotas = Box::leak(Box::new(Quotas {
            by_principal: [("User:a".to_string(), limited)].into_iter().collect(),
            max_per_address: 1,
            ..Quotas::default()
        }));
        let unbounded = quotas.admit_principal("User:b").unwrap().unwrap();
        assert!(unbounded.usage().unbounded());
        let one = quotas.admit_principal("User:a").unwrap();
        let two = quotas.admit_principal("User:a").unwrap();
        let refused = quotas.admit_principal("User:a").unwrap_err();
        assert_eq!(
            refused,
            Refused::Principal {
                principal: "User:a".into(),
                count: 2
            }
        );
        assert!(
            refused.to_string().contains("holds 2 connections already"),
            "{refused}"
        );
        drop(one);
        assert!(quotas.admit_principal("User:a").is_ok());
        drop(two);
        let address: IpAddr = "10.1.1.1".parse().unwrap();
        let slot = quotas.admit_address(address).unwrap();
        assert!(slot.is_some());
        let refused = quotas.admit_address(address).unwrap_err();
        assert_eq!(refused, Refused::Address { address, count: 1 });
        assert!(
            refused.to_string().contains("max_connections_per_address"),
            "{refused}"
        );
        drop(slot);
        assert!(quotas.admit_address(address).unwrap().is_some());
    }
}
