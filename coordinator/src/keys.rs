//! Every etcd key ringlog uses, built here and nowhere else.
//!
//! One prefix per cluster, `/ringlog/<cluster>/` (`cluster` in the broker's
//! config, default `ringlog`), so several clusters can share one etcd. The
//! layout mirrors the paper's ZooKeeper registries:
//!
//! | key (after the prefix)     | value (JSON)                                  | written by                        | lease |
//! |----------------------------|-----------------------------------------------|-----------------------------------|-------|
//! | `cluster-id`               | the cluster's id, 32 hex digits (not JSON)    | the first broker of the cluster (create-if-absent); never changed | none: persistent. Every broker keeps the id it joined in its data directory (`meta.toml`) and applies nothing from a prefix whose id differs or is missing; its registrations and topic changes are transactions that compare it |
//! | `brokers/<id:010>`         | [`BrokerRecord`]: id, shard hosts and ports, build | that broker, at start (create-if-absent) | the broker's own lease: gone ≤ TTL after it dies |
//! | `topics/<name>`            | [`TopicRecord`]: its id, partitions, overrides (retention, segments, flush policy; replicated: `replication_factor`, `min_insync_replicas`, `write_caching`), the broker of each partition, each partition's replicas (the preferred leader first) and the moves under way (`reassigning`) | the broker that served CreateTopic (create-if-absent txn); deleted by DeleteTopic | none: persistent |
//! | `partitions/<topic-id>/<partition:010>` | [`PartitionState`]: leader, leader epoch, ISR (with the members' incarnations) and a preferred leader's handover under way (`transfer_to`) of a replicated partition | its leader (ISR shrink and expand) and the ISR member that wins an election: transactions comparing the key's `mod_revision` (0: absent, the initial state); deleted with the topic | none: persistent |
//! | `groups/<group>/members/<member>` | [`MemberRecord`]: member id, subscribed topics, session timeout | the broker that served JoinGroup; rewritten (same value) by a broker that takes the session over; deleted by LeaveGroup or by the keeping broker's expiry | the lease of the broker that keeps the session (one per broker, kept alive by it); the session id is the key's create revision |
//! | `groups/<group>/owners/<topic>/<partition:010>` | the owning member's id | the broker that served ClaimPartitions: a txn that succeeds only if no member joined since the claimer's view, the claimer's session is live, and no owner exists | the owner's record's lease (its broker's): deleted with the record when the session ends, rebound with it when another broker takes it over |
//! | `groups/<group>/offsets/<topic>/<partition:010>` | the committed offset, decimal, then a space and the leader epoch of the message before it when the committer knew it (`418 3`; KIP-320) | CommitOffsets: a txn that succeeds only if the committer owns the partition (or, for a reset, the group has no member) | none: persistent |
//! | `kafka-groups/<group>/coordinator` | [`Holder`]: the broker and shard that coordinates the Kafka group | the broker that served the first FindCoordinator of the group (create-if-absent) | that broker's registration lease: gone ≤ TTL after it dies, then the next FindCoordinator elects another |
//! | `kafka-groups/<group>/state` | [`SavedGroup`]: generation, protocol, leader, members and their assignments | the coordinator, when a rebalance completes or the group empties: a txn comparing the coordinator key with itself | none: persistent |
//! | `kafka-groups/<group>/offsets/<topic>/<partition:010>` | [`KafkaOffset`]: offset, leader epoch, the client's metadata | OffsetCommit through the coordinator: a txn comparing the coordinator key with itself | none: persistent; deleted with the topic |
//! | `security/users/<name>`    | the user's SCRAM-SHA-256 credential, `SCRAM-SHA-256:ITERATIONS:SALT:STORED_KEY:SERVER_KEY` (not JSON; never a password) | AlterUsers through any broker, or `ringlog users add --etcd` before any broker runs | none: persistent |
//! | `security/quotas/<principal>` | [`QuotaRecord`]: produce and fetch bytes/s, requests/s and connections of one principal (`User:alice`), or `default` for a principal without its own, set at run time | `ringlog quotas set` / `delete` through any broker (AlterQuotas) | none: persistent |
//! | `security/login-secret`    | 32 random bytes in hex, made by the first broker that finds none (a create-if-absent transaction): the salts and iteration counts answered for users that do not exist derive from it, alike on every broker and across restarts | the first broker to read the security records | none: persistent |
//! | `producer-ids`            | the next producer id not handed out, decimal (not JSON); the first is random in its top 24 bits, so two clusters' ids (a mirror copies another cluster's batches verbatim) meet with odds of 1 in 16 million | any broker, taking a block for its InitProducerId answers: a transaction comparing the key's `mod_revision` (`create_revision` 0 for the first) | none: persistent; never decreases |
//! | `served/<topic-id>/<broker:010>` | the etcd revision of the topic's record that broker last applied (decimal, not JSON): its shards serve the topic as of that record | that broker, after applying a topic record it read from etcd; the broker that made the change waits until every live broker's is at least its revision before it answers CreateTopic, CreatePartitions, a reassignment or a settings change | none: persistent, deleted with the topic (a dead broker's is ignored: only live brokers are waited for) |
//! | `security/acls/<rule>`     | the access control rule, in its text form, which is also its key (`allow User:alice read topic:clicks`) | CreateAcls / DeleteAcls through any broker | none: persistent |
//!
//! Ids are zero-padded to ten digits so that etcd's byte order is numeric
//! order. Topic names are restricted to `[A-Za-z0-9._-]`, so they never
//! contain the `/` that separates key segments.
//!
//! [`BrokerRecord`]: crate::registry::BrokerRecord
//! [`TopicRecord`]: crate::registry::TopicRecord
//! [`MemberRecord`]: crate::groups::MemberRecord
//! [`PartitionState`]: crate::replicas::PartitionState
//! [`QuotaRecord`]: crate::security::QuotaRecord
//! [`Holder`]: crate::kafka_groups::Holder
//! [`SavedGroup`]: crate::kafka_groups::SavedGroup
//! [`KafkaOffset`]: crate::kafka_groups::KafkaOffset

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

    /// The cluster's identity: the id its first broker created.
    pub fn cluster_id(&self) -> String {
        format!("{}cluster-id", self.prefix)
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

    /// The prefix of every replicated partition's state.
    pub fn partitions(&self) -> String {
        format!("{}partitions/", self.prefix)
    }

    /// The prefix of one topic's partition states.
    pub fn partitions_of(&self, topic_id: &str) -> String {
        format!("{}partitions/{topic_id}/", self.prefix)
    }

    /// One partition's state.
    pub fn partition(&self, topic_id: &str, partition: u32) -> String {
        format!("{}partitions/{topic_id}/{partition:010}", self.prefix)
    }

    /// The prefix of the brokers' applied revisions of one topic.
    pub fn served_of(&self, topic_id: &str) -> String {
        format!("{}served/{topic_id}/", self.prefix)
    }

    /// The revision of a topic's record one broker last applied.
    pub fn served(&self, topic_id: &str, broker: BrokerId) -> String {
        format!("{}served/{topic_id}/{broker:010}", self.prefix)
    }

    /// The prefix of every group.
    pub fn groups(&self) -> String {
        format!("{}groups/", self.prefix)
    }

    /// The members of a group.
    pub fn group_members(&self, group: &str) -> String {
        format!("{}groups/{group}/members/", self.prefix)
    }

    /// One member.
    pub fn group_member(&self, group: &str, member: &str) -> String {
        format!("{}groups/{group}/members/{member}", self.prefix)
    }

    /// The partition owners of a group.
    pub fn group_owners(&self, group: &str) -> String {
        format!("{}groups/{group}/owners/", self.prefix)
    }

    /// The owner of one partition.
    pub fn group_owner(&self, group: &str, topic: &str, partition: u32) -> String {
        format!(
            "{}groups/{group}/owners/{topic}/{partition:010}",
            self.prefix
        )
    }

    /// The committed offsets of a group.
    pub fn group_offsets(&self, group: &str) -> String {
        format!("{}groups/{group}/offsets/", self.prefix)
    }

    /// The committed offset of one partition.
    pub fn group_offset(&self, group: &str, topic: &str, partition: u32) -> String {
        format!(
            "{}groups/{group}/offsets/{topic}/{partition:010}",
            self.prefix
        )
    }

    /// The prefix of every Kafka group (`kafka_groups`).
    pub fn kafka_groups(&self) -> String {
        format!("{}kafka-groups/", self.prefix)
    }

    /// The shard that coordinates a Kafka group.
    pub fn kafka_group_coordinator(&self, group: &str) -> String {
        format!("{}kafka-groups/{group}/coordinator", self.prefix)
    }

    /// A Kafka group as its last completed rebalance left it.
    pub fn kafka_group_state(&self, group: &str) -> String {
        format!("{}kafka-groups/{group}/state", self.prefix)
    }

    /// The committed offsets of a Kafka group.
    pub fn kafka_group_offsets(&self, group: &str) -> String {
        format!("{}kafka-groups/{group}/offsets/", self.prefix)
    }

    /// A Kafka group's committed offsets of one topic.
    pub fn kafka_group_topic_offsets(&self, group: &str, topic: &str) -> String {
        format!("{}kafka-groups/{group}/offsets/{topic}/", self.prefix)
    }

    /// A Kafka group's committed offset of one partition.
    pub fn kafka_group_offset(&self, group: &str, topic: &str, partition: u32) -> String {
        format!(
            "{}kafka-groups/{group}/offsets/{topic}/{partition:010}",
            self.prefix
        )
    }

    /// The prefix of users' credentials and access rules.
    pub fn security(&self) -> String {
        format!("{}security/", self.prefix)
    }

    /// The prefix of users' credentials.
    pub fn users(&self) -> String {
        format!("{}security/users/", self.prefix)
    }

    /// One user's credential.
    pub fn user(&self, name: &str) -> String {
        format!("{}security/users/{name}", self.prefix)
    }

    /// One principal's quota set at run time (`default`: the default's).
    pub fn quota(&self, principal: &str) -> String {
        format!("{}security/quotas/{principal}", self.prefix)
    }

    /// The cluster's secret for made-up logins of unknown users.
    pub fn login_secret(&self) -> String {
        format!("{}security/login-secret", self.prefix)
    }

    /// The next producer id not handed out.
    pub fn producer_ids(&self) -> String {
        format!("{}producer-ids", self.prefix)
    }

    /// The prefix of the access control rules.
    pub fn acls(&self) -> String {
        format!("{}security/acls/", self.prefix)
    }

    /// One access control rule, named by its text form.
    pub fn acl(&self, rule: &str) -> String {
        format!("{}security/acls/{rule}", self.prefix)
    }

    /// What a key of this cluster names, if it is one of the registries.
    pub fn parse<'k>(&self, key: &'k str) -> Option<Key<'k>> {
        let rest = key.strip_prefix(self.prefix.as_str())?;
        if rest == "cluster-id" {
            return Some(Key::ClusterId);
        }
        if let Some(id) = rest.strip_prefix("brokers/") {
            return id.parse().ok().map(Key::Broker);
        }
        if let Some(partition) = rest.strip_prefix("partitions/") {
            let (topic_id, p) = partition.split_once('/')?;
            if topic_id.is_empty() || p.contains('/') {
                return None;
            }
            return p.parse().ok().map(|p| Key::Partition(topic_id, p));
        }
        if let Some(served) = rest.strip_prefix("served/") {
            let (topic_id, broker) = served.split_once('/')?;
            if topic_id.is_empty() || broker.contains('/') {
                return None;
            }
            return broker.parse().ok().map(|b| Key::Served(topic_id, b));
        }
        if let Some(name) = rest.strip_prefix("topics/") {
            return (!name.is_empty() && !name.contains('/')).then_some(Key::Topic(name));
        }
        if let Some(name) = rest.strip_prefix("security/users/") {
            return (!name.is_empty()).then_some(Key::User(name));
        }
        if let Some(principal) = rest.strip_prefix("security/quotas/") {
            return (!principal.is_empty()).then_some(Key::Quota(principal));
        }
        if rest == "security/login-secret" {
            return Some(Key::LoginSecret);
        }
        if let Some(rule) = rest.strip_prefix("security/acls/") {
            return (!rule.is_empty()).then_some(Key::Acl(rule));
        }
        if let Some(group_rest) = rest.strip_prefix("groups/") {
            let mut parts = group_rest.split('/');
            let group = parts.next().filter(|g| !g.is_empty())?;
            let kind = parts.next()?;
            let first = parts.next().filter(|s| !s.is_empty())?;
            return match (kind, parts.next(), parts.next()) {
                ("members", None, _) => Some(Key::GroupMember(group, first)),
                ("owners", Some(partition), None) => partition
                    .parse()
                    .ok()
                    .map(|p| Key::GroupOwner(group, first, p)),
                ("offsets", Some(partition), None) => partition
                    .parse()
                    .ok()
                    .map(|p| Key::GroupOffset(group, first, p)),
                _ => None,
            };
        }
        None
    }
}

/// A parsed key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key<'k> {
    /// `cluster-id`.
    ClusterId,
    /// `brokers/<id>`.
    Broker(BrokerId),
    /// `topics/<name>`.
    Topic(&'k str),
    /// `partitions/<topic-id>/<partition>`.
    Partition(&'k str, u32),
    /// `served/<topic-id>/<broker>`.
    Served(&'k str, BrokerId),
    /// `groups/<group>/members/<member>`.
    GroupMember(&'k str, &'k str),
    /// `groups/<group>/owners/<topic>/<partition>`.
    GroupOwner(&'k str, &'k str, u32),
    /// `groups/<group>/offsets/<topic>/<partition>`.
    GroupOffset(&'k str, &'k str, u32),
    /// `security/users/<name>`.
    User(&'k str),
    /// `security/acls/<rule>`.
    Acl(&'k str),
    /// `security/login-secret`.
    LoginSecret,
    /// `security/quotas/<principal>`.
    Quota(&'k str),
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
        assert_eq!(keys.cluster_id(), "/ringlog/prod/cluster-id");
        assert_eq!(keys.parse(&keys.cluster_id()), Some(Key::ClusterId));
        assert_eq!(keys.parse("/ringlog/other/cluster-id"), None);
        assert_eq!(keys.parse(&keys.user("alice")), Some(Key::User("alice")));
        let rule = "allow User:alice read topic:clicks";
        assert_eq!(keys.parse(&keys.acl(rule)), Some(Key::Acl(rule)));
        assert_eq!(keys.parse(&keys.login_secret()), Some(Key::LoginSecret));
        let quota = keys.quota("User:alice");
        assert_eq!(keys.parse(&quota), Some(Key::Quota("User:alice")));
        assert!(quota.starts_with(&keys.security()));
        let state = keys.partition("00ab", 7);
        assert_eq!(state, "/ringlog/prod/partitions/00ab/0000000007");
        assert_eq!(keys.parse(&state), Some(Key::Partition("00ab", 7)));
        assert!(state.starts_with(&keys.partitions_of("00ab")));
        assert_eq!(keys.parse("/ringlog/prod/partitions/00ab"), None);
        let served = keys.served("00ab", 3);
        assert_eq!(served, "/ringlog/prod/served/00ab/0000000003");
        assert_eq!(keys.parse(&served), Some(Key::Served("00ab", 3)));
        assert!(served.starts_with(&keys.served_of("00ab")));
        assert_eq!(keys.parse("/ringlog/prod/served/00ab"), None);
        assert_eq!(keys.parse(&keys.topic("a.b-c")), Some(Key::Topic("a.b-c")));
        assert_eq!(keys.parse("/ringlog/other/topics/x"), None);
        assert_eq!(keys.parse("/ringlog/prod/topics/"), None);
        assert_eq!(keys.parse("/ringlog/prod/brokers/x"), None);
        assert!(keys.broker(9) < keys.broker(10));
        assert!(keys.topic("x").starts_with(&keys.topics()));
        assert!(keys.broker(1).starts_with(&keys.brokers()));
        let member = keys.group_member("g", "host-00ff");
        assert_eq!(
            keys.parse(&member),
            Some(Key::GroupMember("g", "host-00ff"))
        );
        assert!(member.starts_with(&keys.group_members("g")));
        let owner = keys.group_owner("g", "t.x", 12);
        assert_eq!(owner, "/ringlog/prod/groups/g/owners/t.x/0000000012");
        assert_eq!(keys.parse(&owner), Some(Key::GroupOwner("g", "t.x", 12)));
        let offset = keys.group_offset("g", "t", 3);
        assert_eq!(keys.parse(&offset), Some(Key::GroupOffset("g", "t", 3)));
        assert!(offset.starts_with(&keys.group_offsets("g")));
        assert!(offset.starts_with(&keys.groups()));
        assert_eq!(keys.parse("/ringlog/prod/groups/g/owners/t"), None);
        assert_eq!(keys.parse("/ringlog/prod/groups/g/other/x"), None);
    }
}
