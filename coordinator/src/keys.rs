//! Every etcd key ringlog uses, built here and nowhere else.
//!
//! One prefix per cluster, `/ringlog/<cluster>/` (`cluster` in the broker's
//! config, default `ringlog`), so several clusters can share one etcd. The
//! layout mirrors the paper's ZooKeeper registries:
//!
//! | key (after the prefix)     | value (JSON)                                  | written by                        | lease |
//! |----------------------------|-----------------------------------------------|-----------------------------------|-------|
//! | `brokers/<id:010>`         | [`BrokerRecord`]: id, shard hosts and ports, build | that broker, at start (create-if-absent) | the broker's own lease: gone ≤ TTL after it dies |
//! | `topics/<name>`            | [`TopicRecord`]: partitions, overrides, broker of each partition | the broker that served CreateTopic (create-if-absent txn); deleted by DeleteTopic | none: persistent |
//!
//! Ids are zero-padded to ten digits so that etcd's byte order is numeric
//! order. Topic names are restricted to `[A-Za-z0-9._-]`, so they never
//! contain the `/` that separates key segments.
//!
//! [`BrokerRecord`]: crate::registry::BrokerRecord
//! [`TopicRecord`]: crate::registry::TopicRecord

use protocol::types::BrokerId;

/// The keys of one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// The keys of cluster `cluster` (a name without `/`).
    pub fn new(cluster: &str) -> Keys {
        Keys {
            prefix: format!("/ringlog/{cluster}/"),
        }
    }

    /// Everything of this cluster.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The prefix of the broker registry.
    pub fn brokers(&self) -> String {
        format!("{}brokers/", self.prefix)
    }

    /// One broker's registration.
    pub fn broker(&self, id: BrokerId) -> String {
        format!("{}brokers/{id:010}", self.prefix)
    }

    /// The prefix of the topic registry.
    pub fn topics(&self) -> String {
        format!("{}topics/", self.prefix)
    }

    /// One topic.
    pub fn topic(&self, name: &str) -> String {
        format!("{}topics/{name}", self.prefix)
    }

    /// What a key of this cluster names, if it is one of the registries.
    pub fn parse<'k>(&self, key: &'k str) -> Option<Key<'k>> {
        let rest = key.strip_prefix(self.prefix.as_str())?;
        if let Some(id) = rest.strip_prefix("brokers/") {
            return id.parse().ok().map(Key::Broker);
        }
        if let Some(name) = rest.strip_prefix("topics/") {
            return (!name.is_empty() && !name.contains('/')).then_some(Key::Topic(name));
        }
        None
    }
}

/// A parsed key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key<'k> {
    /// `brokers/<id>`.
    Broker(BrokerId),
    /// `topics/<name>`.
    Topic(&'k str),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_sort_numerically() {
        let keys = Keys::new("prod");
        assert_eq!(keys.broker(7), "/ringlog/prod/brokers/0000000007");
        assert_eq!(keys.topic("clicks"), "/ringlog/prod/topics/clicks");
        assert_eq!(keys.parse(&keys.broker(42)), Some(Key::Broker(42)));
        assert_eq!(keys.parse(&keys.topic("a.b-c")), Some(Key::Topic("a.b-c")));
        assert_eq!(keys.parse("/ringlog/other/topics/x"), None);
        assert_eq!(keys.parse("/ringlog/prod/topics/"), None);
        assert_eq!(keys.parse("/ringlog/prod/brokers/x"), None);
        assert!(keys.broker(9) < keys.broker(10));
        assert!(keys.topic("x").starts_with(&keys.topics()));
        assert!(keys.broker(1).starts_with(&keys.brokers()));
    }
}
