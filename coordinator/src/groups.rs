//! Consumer groups in etcd: the paper's consumer, ownership and offset
//! registries (keys in [`crate::keys`]).
//!
//! A member's session is an etcd lease: its member key and every ownership
//! key it holds are bound to it, so a member that stops heartbeating loses
//! its membership and its partitions at once when the lease expires, and a
//! member that leaves revokes it. Safety rests on three transactions:
//!
//! - **claim**: succeeds only if the claimer's session is live, no member
//!   key changed since the revision of the view the claim was computed from
//!   (so a member that has not seen a join cannot take the joiner's share),
//!   and none of the partitions has an owner. It never steals.
//! - **commit**: succeeds only if the committer owns every partition it
//!   commits, so a member whose session expired can never overwrite the
//!   offsets of the partition's next owner.
//! - **reset**: succeeds only if the group has no member at all.
//!
//! A member that has not seen a departure claims less than its fair share
//! until its next view; nothing is owned twice at any time.

use crate::keys::{Key, Keys};
use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use protocol::codec::groups::{GroupMemberInfo, GroupPartitionInfo, Joined, OffsetCommit};
use protocol::types::PartitionId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// A member as its key stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRecord {
    /// The member's id.
    pub member_id: String,
    /// Its subscribed topics, sorted.
    pub topics: Vec<String>,
    /// Its session timeout.
    pub session_timeout_ms: u32,
}

/// Why a group operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GroupError {
    /// The session expired, was revoked, or never was.
    #[error("member {member_id} has no live session in group {group:?}: join again")]
    UnknownMember {
        /// The group.
        group: String,
        /// The member.
        member_id: String,
    },
    /// A claim lost against a newer view or an existing owner.
    #[error("claim of {topic} {partitions:?} in group {group:?} refused: {reason}")]
    ClaimConflict {
        /// The group.
        group: String,
        /// The topic.
        topic: String,
        /// The partitions asked for.
        partitions: Vec<PartitionId>,
        /// What stood in the way.
        reason: String,
    },
    /// A commit for a partition the member does not own.
    #[error("member {member_id} does not own {topic}-{partition} in group {group:?}; nothing was committed")]
    NotPartitionOwner {
        /// The group.
        group: String,
        /// The member.
        member_id: String,
        /// The topic.
        topic: String,
        /// The partition.
        partition: PartitionId,
    },
    /// A reset while members are live.
    #[error(
        "group {group:?} has {members} live member(s); stop them before resetting its offsets"
    )]
    GroupNotEmpty {
        /// The group.
        group: String,
        /// How many.
        members: usize,
    },
    /// The etcd prefix does not hold this broker's cluster (its id differs
    /// or is missing): nothing is written there.
    #[error("the registry does not hold this broker's cluster (id {expected}); group changes are refused until it does")]
    ForeignCluster {
        /// The broker's cluster id.
        expected: String,
    },
    /// A request no member could have made from what it was answered: a
    /// claim's revision ahead of the registry's.
    #[error("{reason}")]
    InvalidRequest {
        /// What is wrong with it.
        reason: String,
    },
    /// etcd did not answer in time.
    #[error("etcd is unavailable: {reason}")]
    Unavailable {
        /// The client's words.
        reason: String,
    },
}

fn unavailable(error: impl std::fmt::Display) -> GroupError {
    GroupError::Unavailable {
        reason: error.to_string(),
    }
}

/// The group registries of one cluster. Owned by a broker's control thread.
pub struct Groups {
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

impl Groups {
    /// Group operations over `client`, under `keys`, for the cluster
    /// `cluster_id`.
    pub fn new(client: Client, keys: Keys, timeout: Duration, cluster_id: String) -> Groups {
        Groups {
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

    /// Joins `group`: a new session lease of `session_timeout_ms` (rounded
    /// up to whole seconds, as etcd leases are) and a member key under it.
    /// The answer carries the session that applies — the lease's granted
    /// TTL in milliseconds (2,500 asked is 3,000; etcd may also raise a TTL
    /// below its minimum) — so a member paces its heartbeats on the real
    /// session (issue 24, item 6).
    pub async fn join(
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

    /// Keeps a member's session alive once; `UnknownMember` when it has
    /// expired or the member key is gone.
    pub async fn heartbeat(
        &mut self,
        group: &str,
        member_id: &str,
        session_id: u64,
    ) -> Result<(), GroupError> {
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
            Ok(ttl) if ttl > 0 && member_is_live => Ok(()),
            Err(error) if member_is_live => Err(error),
            _ => Err(unknown()),
        }
    }

    /// The group's members, sorted by id, and the etcd revision they were
    /// read at.
    pub async fn members(
        &mut self,
        group: &str,
    ) -> Result<(Vec<GroupMemberInfo>, u64), GroupError> {
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
    pub async fn claim(
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

    /// Releases the partitions of `topic` that the member owns; others are
    /// left alone.
    pub async fn release(
        &mut self,
        group: &str,
        member_id: &str,
        topic: &str,
        partitions: &[PartitionId],
    ) -> Result<(), GroupError> {
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
        if ops.is_empty() {
            return Ok(());
        }
        let mut client = self.client.clone();
        self.deadline(client.txn(Txn::new().and_then(ops))).await?;
        Ok(())
    }

    /// Commits offsets of partitions the member owns, all or none.
    pub async fn commit(
        &mut self,
        group: &str,
        member_id: &str,
        offsets: &[OffsetCommit],
    ) -> Result<u32, GroupError> {
        let compares: Vec<Compare> = offsets
            .iter()
            .map(|o| {
                Compare::value(
                    self.keys.group_owner(group, &o.topic, o.partition),
                    CompareOp::Equal,
                    member_id,
                )
            })
            .collect();
        let puts = self.offset_puts(group, offsets);
        let mut client = self.client.clone();
        let txn = Txn::new().when(compares).and_then(puts);
        if self.deadline(client.txn(txn)).await?.succeeded() {
            return Ok(offsets.len() as u32);
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

    /// Sets offsets of a group that has no live member.
    pub async fn reset(
        &mut self,
        group: &str,
        offsets: &[OffsetCommit],
    ) -> Result<u32, GroupError> {
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

    /// Ends a member's session: its member key and partitions go at once.
    pub async fn leave(
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

    /// Every partition of the group with an owner or a committed offset.
    pub async fn partitions(&mut self, group: &str) -> Result<Vec<GroupPartitionInfo>, GroupError> {
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
    pub async fn list(&mut self) -> Result<Vec<String>, GroupError> {
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
}

/// A member name reduced to `[A-Za-z0-9._-]`, at most 64 bytes, so that it
/// fits in a key segment; `member` when nothing is left.
fn sanitize(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "._-".contains(*c))
        .take(64)
        .collect();
    if cleaned.is_empty() {
        "member".into()
    } else {
        cleaned
    }
}

/// A committed offset's value in etcd: the offset, decimal, and the leader
/// epoch it was read under when known (`"418 3"`; `"418"` otherwise, which
/// is also what brokers before epochs wrote).
fn offset_value(offset: u64, leader_epoch: i32) -> String {
    if leader_epoch >= 0 {
        format!("{offset} {leader_epoch}")
    } else {
        offset.to_string()
    }
}

/// Reads [`offset_value`]'s text; `None` for anything else.
fn parse_offset_value(value: &str) -> Option<(u64, i32)> {
    match value.split_once(' ') {
        None => Some((value.parse().ok()?, -1)),
        Some((offset, epoch)) => {
            let epoch: i32 = epoch.parse().ok()?;
            Some((offset.parse().ok()?, epoch.max(-1)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_offsets_keep_their_epoch_and_read_the_old_form() {
        assert_eq!(offset_value(418, 3), "418 3");
        assert_eq!(offset_value(418, -1), "418");
        assert_eq!(parse_offset_value("418 3"), Some((418, 3)));
        assert_eq!(parse_offset_value("418"), Some((418, -1)));
        assert_eq!(parse_offset_value("418 x"), None);
        assert_eq!(parse_offset_value(""), None);
        assert_eq!(parse_offset_value("-5"), None);
    }

    #[test]
    fn member_names_fit_in_a_key_segment() {
        assert_eq!(sanitize("host-1.example"), "host-1.example");
        assert_eq!(sanitize("a/b c"), "abc");
        assert_eq!(sanitize("///"), "member");
        assert_eq!(sanitize(&"x".repeat(100)).len(), 64);
    }
}
