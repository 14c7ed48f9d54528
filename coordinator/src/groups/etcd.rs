//! The group registries in etcd: a member's session is an etcd lease, and
//! each of the module's checks ([`super`]) is one etcd transaction.

use super::{offset_value, parse_offset_value, sanitize, GroupError, GroupStore, MemberRecord};
use crate::keys::{Key, Keys};
use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use protocol::codec::groups::{GroupMemberInfo, GroupPartitionInfo, Joined, OffsetCommit};
use protocol::types::PartitionId;
use std::collections::BTreeMap;
use std::time::Duration;

/// Deletes per transaction when a topic's offsets go (etcd's default
/// `--max-txn-ops` is 128).
const DELETES_PER_TXN: usize = 100;

fn unavailable(error: impl std::fmt::Display) -> GroupError {
    GroupError::Unavailable {
        reason: error.to_string(),
    }
}

/// The group registries of one cluster. Owned by a broker's control thread.
pub struct EtcdGroups {
    client: Client,
    keys: Keys,
    timeout: Duration,
    /// The broker's cluster: writes that nothing else fences (a join, a
    /// reset) compare it, so none lands in another cluster's registry.
    cluster_id: String,
    /// The newest etcd revision an answer has shown: a claim's revision
    /// above it is checked against etcd before it is believed.
    seen_revision: u64,
}

impl EtcdGroups {
    /// Group operations over `client`, under `keys`, for the cluster
    /// `cluster_id`.
    pub fn new(client: Client, keys: Keys, timeout: Duration, cluster_id: String) -> EtcdGroups {
        EtcdGroups {
            client,
            keys,
            timeout,
            cluster_id,
            seen_revision: 0,
        }
    }
    fn ours(&self) -> Compare {
        Compare::value(
            self.keys.cluster_id(),
            CompareOp::Equal,
            self.cluster_id.as_str(),
        )
    }
    fn foreign(&self) -> GroupError {
        GroupError::ForeignCluster {
            expected: self.cluster_id.clone(),
        }
    }

    async fn deadline<T>(
        &self,
        request: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, GroupError> {
        match tokio::time::timeout(self.timeout, request).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(unavailable(error)),
            Err(_) => Err(unavailable(format!("no answer within {:?}", self.timeout))),
        }
    }

    /// True when the member key is missing or bound to another lease.
    async fn session_lost(
        &mut self,
        group: &str,
        member_id: &str,
        lease: i64,
    ) -> Result<bool, GroupError> {
        let mut client = self.client.clone();
        let response = self
            .deadline(client.get(self.keys.group_member(group, member_id), None))
            .await?;
        Ok(response.kvs().first().is_none_or(|kv| kv.lease() != lease))
    }

    /// Refuses a claim's revision that no view has carried: one ahead of
    /// etcd's would pass the "no member changed since" compare for ever,
    /// fencing nothing (issue 24, item 10). A revision this broker has not
    /// seen yet (a view another broker served a moment ago) costs one read.
    async fn check_revision(&mut self, revision: u64) -> Result<(), GroupError> {
        if revision <= self.seen_revision {
            return Ok(());
        }
        let mut client = self.client.clone();
        let response = self
            .deadline(client.get(
                self.keys.cluster_id(),
                Some(GetOptions::new().with_count_only()),
            ))
            .await?;
        let now = response.header().map_or(0, |h| h.revision()).max(0) as u64;
        self.seen_revision = self.seen_revision.max(now);
        if revision <= now {
            return Ok(());
        }
        Err(GroupError::InvalidRequest {
            reason: format!(
                "claim revision {revision} is ahead of the registry's ({now}): a claim carries \
                 the revision of the view it was computed from"
            ),
        })
    }
    fn offset_puts(&self, group: &str, offsets: &[OffsetCommit]) -> Vec<TxnOp> {
        offsets
            .iter()
            .map(|o| {
                TxnOp::put(
                    self.keys.group_offset(group, &o.topic, o.partition),
                    offset_value(o.offset, o.leader_epoch),
                    None,
                )
            })
            .collect()
    }

    /// The owner of every owned partition of the group.
    async fn owners(
        &mut self,
        group: &str,
    ) -> Result<BTreeMap<(String, PartitionId), String>, GroupError> {
        let mut client = self.client.clone();
        let response = self
            .deadline(client.get(
                self.keys.group_owners(group),
                Some(GetOptions::new().with_prefix()),
            ))
            .await?;
        let mut owners = BTreeMap::new();
        for kv in response.kvs() {
            let (Ok(key), Ok(owner)) = (kv.key_str(), kv.value_str()) else {
                continue;
            };
            if let Some(Key::GroupOwner(_, topic, partition)) = self.keys.parse(key) {
                owners.insert((topic.to_string(), partition), owner.to_string());
            }
        }
        Ok(owners)
    }
}

impl GroupStore for EtcdGroups {
    /// Joins `group`: a new session lease of `session_timeout_ms` (rounded
    /// up to whole seconds, as etcd leases are) and a member key under it.
    /// The answer carries the session that applies — the lease's granted
    /// TTL in milliseconds (2,500 asked is 3,000; etcd may also raise a TTL
    /// below its minimum) — so a member paces its heartbeats on the real
    /// session (issue 24, item 6).
    async fn join(
        &mut self,
        group: &str,
        member_name: &str,
        mut topics: Vec<String>,
        session_timeout_ms: u32,
    ) -> Result<Joined, GroupError> {
        let ttl_s = i64::from(session_timeout_ms.div_ceil(1000).max(1));
        let mut client = self.client.clone();
        let granted = self.deadline(client.lease_grant(ttl_s, None)).await?;
        let lease = granted.id();
        let session_timeout_ms =
            u32::try_from(granted.ttl().max(1).saturating_mul(1000)).unwrap_or(u32::MAX);
        let member_id = format!("{}-{lease:016x}", sanitize(member_name));
        topics.sort();
        topics.dedup();
        let record = MemberRecord {
            member_id: member_id.clone(),
            topics,
            session_timeout_ms,
        };
        let value = serde_json::to_vec(&record).map_err(unavailable)?;
        let key = self.keys.group_member(group, &member_id);
        let txn = Txn::new().when([self.ours()]).and_then([TxnOp::put(
            key,
            value,
            Some(PutOptions::new().with_lease(lease)),
        )]);
        let joined = match self.deadline(client.txn(txn)).await {
            Ok(response) if response.succeeded() => Ok(()),
            Ok(_) => Err(self.foreign()),
            Err(error) => Err(error),
        };
        if let Err(error) = joined {
            let _ = client.lease_revoke(lease).await;
            return Err(error);
        }
        Ok(Joined {
            member_id,
            session_id: lease as u64,
            session_timeout_ms,
        })
    }

    async fn heartbeat(
        &mut self,
        group: &str,
        member_id: &str,
        session_id: u64,
    ) -> Result<u32, GroupError> {
        let unknown = || GroupError::UnknownMember {
            group: group.to_string(),
            member_id: member_id.to_string(),
        };
        let lease = i64::try_from(session_id).map_err(|_| unknown())?;
        let mut client = self.client.clone();
        let kept = async {
            let (mut keeper, mut stream) = self.deadline(client.lease_keep_alive(lease)).await?;
            keeper.keep_alive().await.map_err(unavailable)?;
            Ok::<_, GroupError>(
                self.deadline(stream.message())
                    .await?
                    .map_or(0, |r| r.ttl()),
            )
        }
        .await;
        // etcd answers a keep-alive for an expired lease with TTL 0 or an
        // error ("lease not found"); either way the member key says whether
        // the session is this member's and alive.
        let member_is_live = !self.session_lost(group, member_id, lease).await?;
        match kept {
            Ok(ttl) if ttl > 0 && member_is_live => {
                Ok(u32::try_from(ttl.saturating_mul(1000)).unwrap_or(u32::MAX))
            }
            Err(error) if member_is_live => Err(error),
            _ => Err(unknown()),
        }
    }

    /// The group's members, sorted by id, and the etcd revision they were
    /// read at.
    async fn members(&mut self, group: &str) -> Result<(Vec<GroupMemberInfo>, u64), GroupError> {
        let mut client = self.client.clone();
        let response = self
            .deadline(client.get(
                self.keys.group_members(group),
                Some(GetOptions::new().with_prefix()),
            ))
            .await?;
        let revision = response.header().map_or(0, |h| h.revision()).max(0) as u64;
        self.seen_revision = self.seen_revision.max(revision);
        let mut members: Vec<GroupMemberInfo> = response
            .kvs()
            .iter()
            .filter_map(|kv| serde_json::from_slice::<MemberRecord>(kv.value()).ok())
            .map(|m| GroupMemberInfo {
                member_id: m.member_id,
                topics: m.topics,
            })
            .collect();
        members.sort_by(|a, b| a.member_id.cmp(&b.member_id));
        Ok((members, revision))
    }

    /// Claims `partitions` of `topic` for the member (see the module doc).
    async fn claim(
        &mut self,
        group: &str,
        member_id: &str,
        session_id: u64,
        revision: u64,
        topic: &str,
        partitions: &[PartitionId],
    ) -> Result<(), GroupError> {
        self.check_revision(revision).await?;
        let lease = i64::try_from(session_id).unwrap_or(-1);
        let revision = i64::try_from(revision).unwrap_or(i64::MAX - 1);
        let mut compares = vec![
            Compare::lease(
                self.keys.group_member(group, member_id),
                CompareOp::Equal,
                lease,
            ),
            Compare::mod_revision(
                self.keys.group_members(group),
                CompareOp::Less,
                revision + 1,
            )
            .with_prefix(),
        ];
        let mut puts = Vec::new();
        for &partition in partitions {
            let key = self.keys.group_owner(group, topic, partition);
            compares.push(Compare::create_revision(key.clone(), CompareOp::Equal, 0));
            puts.push(TxnOp::put(
                key,
                member_id,
                Some(PutOptions::new().with_lease(lease)),
            ));
        }
        let txn = Txn::new().when(compares).and_then(puts);
        let mut client = self.client.clone();
        if self.deadline(client.txn(txn)).await?.succeeded() {
            return Ok(());
        }
        // Say why: a dead session, a newer view, or an owner in the way.
        if self.session_lost(group, member_id, lease).await? {
            return Err(GroupError::UnknownMember {
                group: group.to_string(),
                member_id: member_id.to_string(),
            });
        }
        let owners = self.owners(group).await?;
        let taken: Vec<String> = partitions
            .iter()
            .filter_map(|p| {
                owners
                    .get(&(topic.to_string(), *p))
                    .map(|owner| format!("{topic}-{p} is owned by {owner}"))
            })
            .collect();
        let reason = if taken.is_empty() {
            format!(
                "the group's members changed after revision {revision}: heartbeat for the new view"
            )
        } else {
            taken.join(", ")
        };
        Err(GroupError::ClaimConflict {
            group: group.to_string(),
            topic: topic.to_string(),
            partitions: partitions.to_vec(),
            reason,
        })
    }

    async fn release(
        &mut self,
        group: &str,
        member_id: &str,
        session_id: u64,
        topic: &str,
        partitions: &[PartitionId],
    ) -> Result<(), GroupError> {
        let lease = i64::try_from(session_id).unwrap_or(-1);
        let ops: Vec<TxnOp> = partitions
            .iter()
            .map(|&p| {
                let key = self.keys.group_owner(group, topic, p);
                TxnOp::txn(
                    Txn::new()
                        .when([Compare::value(key.clone(), CompareOp::Equal, member_id)])
                        .and_then([TxnOp::delete(key, None)]),
                )
            })
            .collect();
        let txn = Txn::new()
            .when([Compare::lease(
                self.keys.group_member(group, member_id),
                CompareOp::Equal,
                lease,
            )])
            .and_then(ops);
        let mut client = self.client.clone();
        if self.deadline(client.txn(txn)).await?.succeeded() {
            Ok(())
        } else {
            Err(GroupError::unknown_member(group, member_id))
        }
    }

    async fn commit(
        &mut self,
        group: &str,
        member_id: &str,
        session_id: u64,
        offsets: &[OffsetCommit],
    ) -> Result<u32, GroupError> {
        let lease = i64::try_from(session_id).unwrap_or(-1);
        let mut compares = vec![Compare::lease(
            self.keys.group_member(group, member_id),
            CompareOp::Equal,
            lease,
        )];
        compares.extend(offsets.iter().map(|o| {
            Compare::value(
                self.keys.group_owner(group, &o.topic, o.partition),
                CompareOp::Equal,
                member_id,
            )
        }));
        let puts = self.offset_puts(group, offsets);
        let mut client = self.client.clone();
        let txn = Txn::new().when(compares).and_then(puts);
        if self.deadline(client.txn(txn)).await?.succeeded() {
            return Ok(offsets.len() as u32);
        }
        if self.session_lost(group, member_id, lease).await? {
            return Err(GroupError::unknown_member(group, member_id));
        }
        let owners = self.owners(group).await?;
        let first = offsets
            .iter()
            .find(|o| {
                owners
                    .get(&(o.topic.clone(), o.partition))
                    .map(String::as_str)
                    != Some(member_id)
            })
            .or(offsets.first());
        Err(GroupError::NotPartitionOwner {
            group: group.to_string(),
            member_id: member_id.to_string(),
            topic: first.map(|o| o.topic.clone()).unwrap_or_default(),
            partition: first.map_or(0, |o| o.partition),
        })
    }

    /// Sets offsets of a group that has no live member.
    async fn reset(&mut self, group: &str, offsets: &[OffsetCommit]) -> Result<u32, GroupError> {
        let (members, revision) = self.members(group).await?;
        let not_empty = |members| GroupError::GroupNotEmpty {
            group: group.to_string(),
            members,
        };
        if !members.is_empty() {
            return Err(not_empty(members.len()));
        }
        let revision = i64::try_from(revision).unwrap_or(i64::MAX - 1);
        let txn = Txn::new()
            .when([
                self.ours(),
                Compare::mod_revision(
                    self.keys.group_members(group),
                    CompareOp::Less,
                    revision + 1,
                )
                .with_prefix(),
            ])
            .and_then(self.offset_puts(group, offsets))
            .or_else([TxnOp::get(self.keys.cluster_id(), None)]);
        let mut client = self.client.clone();
        let response = self.deadline(client.txn(txn)).await?;
        if response.succeeded() {
            return Ok(offsets.len() as u32);
        }
        let ours = response.op_responses().into_iter().any(|op| match op {
            etcd_client::TxnOpResponse::Get(get) => get
                .kvs()
                .first()
                .is_some_and(|kv| kv.value() == self.cluster_id.as_bytes()),
            _ => false,
        });
        if ours {
            Err(not_empty(1))
        } else {
            Err(self.foreign())
        }
    }

    /// Ends a member's session: its member key and partitions go at once.
    async fn leave(
        &mut self,
        group: &str,
        member_id: &str,
        session_id: u64,
    ) -> Result<(), GroupError> {
        let lease = i64::try_from(session_id).unwrap_or(-1);
        if self.session_lost(group, member_id, lease).await? {
            return Err(GroupError::UnknownMember {
                group: group.to_string(),
                member_id: member_id.to_string(),
            });
        }
        let mut client = self.client.clone();
        self.deadline(client.lease_revoke(lease)).await?;
        Ok(())
    }

    /// Every partition of the group with an owner or a committed offset.
    async fn partitions(&mut self, group: &str) -> Result<Vec<GroupPartitionInfo>, GroupError> {
        let owners = self.owners(group).await?;
        let mut client = self.client.clone();
        let response = self
            .deadline(client.get(
                self.keys.group_offsets(group),
                Some(GetOptions::new().with_prefix()),
            ))
            .await?;
        let mut partitions: BTreeMap<(String, PartitionId), GroupPartitionInfo> = BTreeMap::new();
        for kv in response.kvs() {
            let (Ok(key), Ok(value)) = (kv.key_str(), kv.value_str()) else {
                continue;
            };
            if let (Some(Key::GroupOffset(_, topic, partition)), Some((offset, leader_epoch))) =
                (self.keys.parse(key), parse_offset_value(value))
            {
                partitions.insert(
                    (topic.to_string(), partition),
                    GroupPartitionInfo {
                        topic: topic.to_string(),
                        partition,
                        owner: String::new(),
                        offset: Some(offset),
                        leader_epoch,
                    },
                );
            }
        }
        for ((topic, partition), owner) in owners {
            partitions
                .entry((topic.clone(), partition))
                .or_insert_with(|| GroupPartitionInfo {
                    topic,
                    partition,
                    owner: String::new(),
                    offset: None,
                    leader_epoch: -1,
                })
                .owner = owner;
        }
        Ok(partitions.into_values().collect())
    }

    /// Every group with a member, an owner or a committed offset.
    async fn list(&mut self) -> Result<Vec<String>, GroupError> {
        let mut client = self.client.clone();
        let response = self
            .deadline(client.get(
                self.keys.groups(),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            ))
            .await?;
        let mut groups: Vec<String> = response
            .kvs()
            .iter()
            .filter_map(|kv| kv.key_str().ok())
            .filter_map(|key| match self.keys.parse(key) {
                Some(
                    Key::GroupMember(g, _) | Key::GroupOwner(g, _, _) | Key::GroupOffset(g, _, _),
                ) => Some(g.to_string()),
                _ => None,
            })
            .collect();
        groups.sort();
        groups.dedup();
        Ok(groups)
    }

    async fn forget_topic(&mut self, topic: &str) -> Result<u32, GroupError> {
        let mut client = self.client.clone();
        let response = self
            .deadline(client.get(
                self.keys.groups(),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            ))
            .await?;
        let keys: Vec<String> = response
            .kvs()
            .iter()
            .filter_map(|kv| kv.key_str().ok())
            .filter(
                |key| matches!(self.keys.parse(key), Some(Key::GroupOffset(_, t, _)) if t == topic),
            )
            .map(str::to_string)
            .collect();
        // Within etcd's limit on operations per transaction; each batch
        // deletes what it names, and a later delete of a key already gone
        // is no harm.
        for batch in keys.chunks(DELETES_PER_TXN) {
            let ops: Vec<TxnOp> = batch
                .iter()
                .map(|k| TxnOp::delete(k.as_str(), None))
                .collect();
            self.deadline(client.txn(Txn::new().and_then(ops))).await?;
        }
        Ok(keys.len() as u32)
    }
}
