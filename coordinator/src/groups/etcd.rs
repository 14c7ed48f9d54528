//! The group registries in etcd: a member's session is its member key
//! (the session id is the key's create revision), bound with the
//! partitions it owns to the lease of the broker that keeps the session
//! alive; each of the module's checks ([`super`]) is one etcd transaction.
//!
//! One lease per broker, not per member (issue 46, item 5): a member's
//! lease renewed at each heartbeat made every heartbeat two etcd requests,
//! and one large group topped out near 951 heartbeats a second. The broker
//! keeps each member's liveness in memory and writes only changes: a join,
//! a leave, an expiry, a member taken over from another broker.

use super::{offset_value, parse_offset_value, sanitize, GroupError, GroupStore, MemberRecord};
use crate::keys::{Key, Keys};
use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use protocol::codec::groups::{GroupMemberInfo, GroupPartitionInfo, Joined, OffsetCommit};
use protocol::types::PartitionId;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
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
    /// The broker's group lease (0: none yet, or lost), its TTL, and the
    /// task that keeps it alive.
    lease: Arc<AtomicI64>,
    lease_ttl_s: i64,
    keeper: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for EtcdGroups {
    fn drop(&mut self) {
        // Not revoked: the members it holds live on for one TTL, long
        // enough for their heartbeats to reach another broker, which takes
        // them over.
        if let Some(keeper) = self.keeper.take() {
            keeper.abort();
        }
    }
}

/// Member ids made by this process so far (with the time, what makes
/// each id new).
static JOINS: AtomicU64 = AtomicU64::new(0);

/// Keeps `id` alive every third of its TTL until etcd says it is gone;
/// then clears `current`, so the next join grants a new one.
async fn keep_lease(
    client: Client,
    id: i64,
    ttl_s: i64,
    current: Arc<AtomicI64>,
    timeout: Duration,
) {
    let period = Duration::from_millis((ttl_s.max(1) as u64 * 1000 / 3).max(100));
    loop {
        let mut client = client.clone();
        let kept = tokio::time::timeout(timeout, async {
            let (mut keeper, mut stream) = client.lease_keep_alive(id).await?;
            keeper.keep_alive().await?;
            stream.message().await
        })
        .await;
        let lost = match kept {
            Ok(Ok(Some(answer))) => answer.ttl() <= 0,
            Ok(Ok(None)) => false,
            Ok(Err(error)) => error.to_string().contains("lease not found"),
            Err(_) => false,
        };
        if lost {
            tracing::warn!(
                lease = id,
                "the broker's group lease expired: its members must join again"
            );
            let _ = current.compare_exchange(id, 0, Ordering::AcqRel, Ordering::Acquire);
            return;
        }
        tokio::time::sleep(period).await;
    }
}

impl EtcdGroups {
    /// Group operations over `client`, under `keys`, for the cluster
    /// `cluster_id`.
    /// Its members' sessions are bound to a lease of `lease_ttl_s`,
    /// granted at the first join or take-over and kept alive from then on.
    pub fn new(
        client: Client,
        keys: Keys,
        timeout: Duration,
        cluster_id: String,
        lease_ttl_s: i64,
    ) -> EtcdGroups {
        EtcdGroups {
            client,
            keys,
            timeout,
            cluster_id,
            seen_revision: 0,
            lease: Arc::new(AtomicI64::new(0)),
            lease_ttl_s: lease_ttl_s.max(1),
            keeper: None,
        }
    }

    /// The broker's group lease: granted (and kept alive from then on) when
    /// there is none.
    async fn lease(&mut self) -> Result<i64, GroupError> {
        let current = self.lease.load(Ordering::Acquire);
        if current != 0 {
            return Ok(current);
        }
        let mut client = self.client.clone();
        let id = self
            .deadline(client.lease_grant(self.lease_ttl_s, None))
            .await?
            .id();
        self.lease.store(id, Ordering::Release);
        if let Some(old) = self.keeper.take() {
            old.abort();
        }
        self.keeper = Some(tokio::spawn(keep_lease(
            self.client.clone(),
            id,
            self.lease_ttl_s,
            self.lease.clone(),
            self.timeout,
        )));
        Ok(id)
    }

    /// The member's key as etcd holds it, if it is the session's.
    async fn member_kv(
        &mut self,
        group: &str,
        member_id: &str,
        session_id: u64,
    ) -> Result<Option<etcd_client::KeyValue>, GroupError> {
        let mut client = self.client.clone();
        let response = self
            .deadline(client.get(self.keys.group_member(group, member_id), None))
            .await?;
        Ok(response
            .kvs()
            .first()
            .filter(|kv| kv.create_revision() as u64 == session_id)
            .cloned())
    }

    /// The session's compare: the member key, created at `session_id`.
    fn session_is(&self, group: &str, member_id: &str, session_id: u64) -> Compare {
        Compare::create_revision(
            self.keys.group_member(group, member_id),
            CompareOp::Equal,
            i64::try_from(session_id).unwrap_or(-1),
        )
    }

    /// The owner keys of the member's partitions, with their revisions.
    async fn owned_by(
        &mut self,
        group: &str,
        member_id: &str,
    ) -> Result<Vec<(String, i64)>, GroupError> {
        let mut client = self.client.clone();
        let response = self
            .deadline(client.get(
                self.keys.group_owners(group),
                Some(GetOptions::new().with_prefix()),
            ))
            .await?;
        Ok(response
            .kvs()
            .iter()
            .filter(|kv| kv.value() == member_id.as_bytes())
            .filter_map(|kv| Some((kv.key_str().ok()?.to_string(), kv.mod_revision())))
            .collect())
    }

    /// Deletes the member's key and the partitions it owns, in one
    /// transaction that holds only if `compares` do; whether it did.
    async fn remove_member(
        &mut self,
        group: &str,
        member_id: &str,
        mut compares: Vec<Compare>,
    ) -> Result<bool, GroupError> {
        let owned = self.owned_by(group, member_id).await?;
        let mut ops = vec![TxnOp::delete(
            self.keys.group_member(group, member_id),
            None,
        )];
        for (key, revision) in owned {
            compares.push(Compare::mod_revision(
                key.clone(),
                CompareOp::Equal,
                revision,
            ));
            ops.push(TxnOp::delete(key, None));
        }
        let mut client = self.client.clone();
        let txn = Txn::new().when(compares).and_then(ops);
        Ok(self.deadline(client.txn(txn)).await?.succeeded())
    }

    fn ours(&self) -> Compare {
        Compare::value(
            self.keys.cluster_id(),
            CompareOp::Equal,
            self.cluster_id.as_str(),
        )
    }
    /// Whether a failed transaction's `or_else` read of the cluster id
    /// found this broker's cluster (something else failed its compares).
    fn answered_ours(&self, response: &etcd_client::TxnResponse) -> bool {
        response.op_responses().into_iter().any(|op| match op {
            etcd_client::TxnOpResponse::Get(get) => get
                .kvs()
                .first()
                .is_some_and(|kv| kv.value() == self.cluster_id.as_bytes()),
            _ => false,
        })
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

    /// True when the member key is missing or of another session.
    async fn session_lost(
        &mut self,
        group: &str,
        member_id: &str,
        session_id: u64,
    ) -> Result<bool, GroupError> {
        Ok(self
            .member_kv(group, member_id, session_id)
            .await?
            .is_none())
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
    /// Joins `group`: a member key under this broker's lease, created in
    /// one transaction (only where no such key is, in this cluster); its
    /// create revision is the session id. The session is as long as asked
    /// (the broker bounds it): the broker, not etcd, times it.
    async fn join(
        &mut self,
        group: &str,
        member_name: &str,
        mut topics: Vec<String>,
        session_timeout_ms: u32,
    ) -> Result<Joined, GroupError> {
        let lease = self.lease().await?;
        topics.sort();
        topics.dedup();
        let mut client = self.client.clone();
        for _ in 0..3 {
            // Ids sort in the order members joined (microseconds, then a
            // count), so a newcomer takes the last range and the members
            // before it keep theirs; the create compare makes each new.
            let n = JOINS.fetch_add(1, Ordering::Relaxed) & 0xfff;
            let micros = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64);
            let unique = (micros << 12) | n;
            let member_id = format!("{}-{unique:016x}", sanitize(member_name));
            let record = MemberRecord {
                member_id: member_id.clone(),
                topics: topics.clone(),
                session_timeout_ms,
            };
            let value = serde_json::to_vec(&record).map_err(unavailable)?;
            let key = self.keys.group_member(group, &member_id);
            let txn = Txn::new()
                .when([
                    self.ours(),
                    Compare::create_revision(key.clone(), CompareOp::Equal, 0),
                ])
                .and_then([TxnOp::put(
                    key,
                    value,
                    Some(PutOptions::new().with_lease(lease)),
                )])
                .or_else([TxnOp::get(self.keys.cluster_id(), None)]);
            let response = self.deadline(client.txn(txn)).await?;
            if !response.succeeded() {
                if self.answered_ours(&response) {
                    continue; // the id was taken: another one
                }
                return Err(self.foreign());
            }
            let revision = response.header().map_or(0, |h| h.revision()).max(0) as u64;
            self.seen_revision = self.seen_revision.max(revision);
            return Ok(Joined {
                member_id,
                session_id: revision,
                session_timeout_ms,
            });
        }
        Err(unavailable("three member ids in a row were taken"))
    }

    /// Takes a live member's session over: its key and the partitions it
    /// owns are bound to this broker's lease from now on (one transaction,
    /// only if none of them changed since read; tried again if one did).
    async fn adopt(
        &mut self,
        group: &str,
        member_id: &str,
        session_id: u64,
    ) -> Result<u32, GroupError> {
        for _ in 0..3 {
            let Some(kv) = self.member_kv(group, member_id, session_id).await? else {
                return Err(GroupError::unknown_member(group, member_id));
            };
            let record: MemberRecord = serde_json::from_slice(kv.value())
                .map_err(|e| unavailable(format!("member record: {e}")))?;
            let lease = self.lease().await?;
            if kv.lease() == lease {
                return Ok(record.session_timeout_ms);
            }
            let owned = self.owned_by(group, member_id).await?;
            let key = self.keys.group_member(group, member_id);
            let mut compares = vec![Compare::mod_revision(
                key.clone(),
                CompareOp::Equal,
                kv.mod_revision(),
            )];
            let mut puts = vec![TxnOp::put(
                key,
                kv.value().to_vec(),
                Some(PutOptions::new().with_lease(lease)),
            )];
            for (owner, revision) in owned {
                compares.push(Compare::mod_revision(
                    owner.clone(),
                    CompareOp::Equal,
                    revision,
                ));
                puts.push(TxnOp::put(
                    owner,
                    member_id,
                    Some(PutOptions::new().with_lease(lease)),
                ));
            }
            let mut client = self.client.clone();
            let txn = Txn::new().when(compares).and_then(puts);
            if self.deadline(client.txn(txn)).await?.succeeded() {
                return Ok(record.session_timeout_ms);
            }
        }
        Err(unavailable(format!(
            "member {member_id} of group {group:?} kept changing while it was taken over"
        )))
    }

    /// The member keys under this broker's lease.
    async fn held(&mut self) -> Result<Vec<super::HeldSession>, GroupError> {
        let lease = self.lease.load(Ordering::Acquire);
        if lease == 0 {
            return Ok(Vec::new());
        }
        let mut client = self.client.clone();
        let response = self
            .deadline(client.get(self.keys.groups(), Some(GetOptions::new().with_prefix())))
            .await?;
        Ok(response
            .kvs()
            .iter()
            .filter(|kv| kv.lease() == lease)
            .filter_map(|kv| {
                let Some(Key::GroupMember(group, _)) = self.keys.parse(kv.key_str().ok()?) else {
                    return None;
                };
                let record: MemberRecord = serde_json::from_slice(kv.value()).ok()?;
                Some(super::HeldSession {
                    group: group.to_string(),
                    member_id: record.member_id,
                    session_id: kv.create_revision().max(0) as u64,
                    session_timeout_ms: record.session_timeout_ms,
                })
            })
            .collect())
    }

    /// Ends a session this broker keeps: its key and partitions go, unless
    /// another broker took it over (its key is under another lease).
    async fn expire(
        &mut self,
        group: &str,
        member_id: &str,
        session_id: u64,
    ) -> Result<bool, GroupError> {
        let lease = self.lease.load(Ordering::Acquire);
        let Some(kv) = self.member_kv(group, member_id, session_id).await? else {
            return Ok(false);
        };
        if lease == 0 || kv.lease() != lease {
            return Ok(false);
        }
        let key = self.keys.group_member(group, member_id);
        let compares = vec![
            self.session_is(group, member_id, session_id),
            Compare::lease(key, CompareOp::Equal, lease),
        ];
        self.remove_member(group, member_id, compares).await
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
        // The partitions go under the member's own lease (its broker's),
        // so that they go with it.
        let Some(member) = self.member_kv(group, member_id, session_id).await? else {
            return Err(GroupError::unknown_member(group, member_id));
        };
        let lease = member.lease();
        let revision = i64::try_from(revision).unwrap_or(i64::MAX - 1);
        let mut compares = vec![
            self.session_is(group, member_id, session_id),
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
        if self.session_lost(group, member_id, session_id).await? {
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
            .when([self.session_is(group, member_id, session_id)])
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
        let mut compares = vec![self.session_is(group, member_id, session_id)];
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
        if self.session_lost(group, member_id, session_id).await? {
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
        if self.answered_ours(&response) {
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
        let compares = vec![self.session_is(group, member_id, session_id)];
        if self.remove_member(group, member_id, compares).await? {
            Ok(())
        } else {
            Err(GroupError::unknown_member(group, member_id))
        }
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
