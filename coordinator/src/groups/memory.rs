//! The group registries in memory, for tests of the code above the seam.
//!
//! It keeps etcd's rules where the module's checks rest on them: one
//! revision counter bumped by every change, member records compared by
//! their modification revision (a departed member's record is gone, so it
//! compares as nothing, as in etcd). Sessions are timed by the broker
//! above it, as with etcd; [`MemoryGroups::expire_session`] ends one at
//! once, as a lost broker lease would.

use super::{sanitize, GroupError, GroupStore, MemberRecord};
use protocol::codec::groups::{GroupMemberInfo, GroupPartitionInfo, Joined, OffsetCommit};
use protocol::types::PartitionId;
use std::collections::{BTreeMap, BTreeSet};

struct Member {
    record: MemberRecord,
    session: u64,
    mod_revision: u64,
}

type PartitionKey = (String, String, PartitionId);

/// Groups in memory; gone with the process.
#[derive(Default)]
pub struct MemoryGroups {
    revision: u64,
    /// By (group, member id).
    members: BTreeMap<(String, String), Member>,
    /// By (group, topic, partition): the owner's member id and session.
    owners: BTreeMap<PartitionKey, (String, u64)>,
    /// By (group, topic, partition): offset and leader epoch.
    offsets: BTreeMap<PartitionKey, (u64, i32)>,
    /// When set, every operation fails as etcd's unavailability does.
    pub unavailable: bool,
    /// When set, every operation waits for ever, as on an etcd that stopped
    /// answering (a paused process).
    pub stalled: bool,
}

impl MemoryGroups {
    /// An empty store.
    pub fn new() -> MemoryGroups {
        MemoryGroups {
            revision: 1,
            ..MemoryGroups::default()
        }
    }

    /// Ends `session` now, as a lost lease: its member and partitions go.
    pub fn expire_session(&mut self, session: u64) {
        self.drop_session(session);
    }

    fn drop_session(&mut self, session: u64) {
        let before = self.members.len() + self.owners.len();
        self.members.retain(|_, m| m.session != session);
        self.owners.retain(|_, (_, s)| *s != session);
        if self.members.len() + self.owners.len() != before {
            self.revision += 1;
        }
    }

    /// Fails if the store is marked unavailable, or never answers if it is
    /// marked stalled.
    async fn tick(&mut self) -> Result<(), GroupError> {
        if self.stalled {
            std::future::pending::<()>().await;
        }
        if self.unavailable {
            return Err(GroupError::Unavailable {
                reason: "the memory store is marked unavailable".into(),
            });
        }
        Ok(())
    }

    fn live(&self, group: &str, member_id: &str, session: u64) -> bool {
        self.members
            .get(&(group.to_string(), member_id.to_string()))
            .is_some_and(|m| m.session == session)
    }

    fn key(group: &str, topic: &str, partition: PartitionId) -> PartitionKey {
        (group.to_string(), topic.to_string(), partition)
    }
}

impl GroupStore for MemoryGroups {
    async fn join(
        &mut self,
        group: &str,
        member_name: &str,
        mut topics: Vec<String>,
        session_timeout_ms: u32,
    ) -> Result<Joined, GroupError> {
        self.tick().await?;
        // The session is the record's creation, as in etcd.
        self.revision += 1;
        let session = self.revision;
        let member_id = format!("{}-{session:016x}", sanitize(member_name));
        topics.sort();
        topics.dedup();
        self.members.insert(
            (group.to_string(), member_id.clone()),
            Member {
                record: MemberRecord {
                    member_id: member_id.clone(),
                    topics,
                    session_timeout_ms,
                },
                session,
                mod_revision: self.revision,
            },
        );
        Ok(Joined {
            member_id,
            session_id: session,
            session_timeout_ms,
        })
    }

    async fn adopt(
        &mut self,
        group: &str,
        member_id: &str,
        session_id: u64,
    ) -> Result<u32, GroupError> {
        self.tick().await?;
        match self
            .members
            .get(&(group.to_string(), member_id.to_string()))
        {
            Some(m) if m.session == session_id => Ok(m.record.session_timeout_ms),
            _ => Err(GroupError::unknown_member(group, member_id)),
        }
    }

    async fn held(&mut self) -> Result<Vec<super::HeldSession>, GroupError> {
        self.tick().await?;
        Ok(self
            .members
            .iter()
            .map(|((group, _), m)| super::HeldSession {
                group: group.clone(),
                member_id: m.record.member_id.clone(),
                session_id: m.session,
                session_timeout_ms: m.record.session_timeout_ms,
            })
            .collect())
    }

    async fn expire(
        &mut self,
        group: &str,
        member_id: &str,
        session_id: u64,
    ) -> Result<bool, GroupError> {
        self.tick().await?;
        if !self.live(group, member_id, session_id) {
            return Ok(false);
        }
        self.drop_session(session_id);
        Ok(true)
    }

    async fn members(&mut self, group: &str) -> Result<(Vec<GroupMemberInfo>, u64), GroupError> {
        self.tick().await?;
        let members = self
            .members
            .iter()
            .filter(|((g, _), _)| g == group)
            .map(|(_, m)| GroupMemberInfo {
                member_id: m.record.member_id.clone(),
                topics: m.record.topics.clone(),
            })
            .collect();
        Ok((members, self.revision))
    }

    async fn claim(
        &mut self,
        group: &str,
        member_id: &str,
        session_id: u64,
        revision: u64,
        topic: &str,
        partitions: &[PartitionId],
    ) -> Result<(), GroupError> {
        self.tick().await?;
        if revision > self.revision {
            return Err(GroupError::InvalidRequest {
                reason: format!(
                    "claim revision {revision} is ahead of the registry's ({}): a claim carries \
                     the revision of the view it was computed from",
                    self.revision
                ),
            });
        }
        if !self.live(group, member_id, session_id) {
            return Err(GroupError::unknown_member(group, member_id));
        }
        let conflict = |reason: String| GroupError::ClaimConflict {
            group: group.to_string(),
            topic: topic.to_string(),
            partitions: partitions.to_vec(),
            reason,
        };
        let changed = self
            .members
            .iter()
            .any(|((g, _), m)| g == group && m.mod_revision > revision);
        if changed {
            return Err(conflict(format!(
                "the group's members changed after revision {revision}: heartbeat for the new view"
            )));
        }
        let taken: Vec<String> = partitions
            .iter()
            .filter_map(|&p| {
                self.owners
                    .get(&Self::key(group, topic, p))
                    .map(|(owner, _)| format!("{topic}-{p} is owned by {owner}"))
            })
            .collect();
        if !taken.is_empty() {
            return Err(conflict(taken.join(", ")));
        }
        self.revision += 1;
        for &p in partitions {
            self.owners.insert(
                Self::key(group, topic, p),
                (member_id.to_string(), session_id),
            );
        }
        Ok(())
    }

    async fn release(
        &mut self,
        group: &str,
        member_id: &str,
        session_id: u64,
        topic: &str,
        partitions: &[PartitionId],
    ) -> Result<(), GroupError> {
        self.tick().await?;
        if !self.live(group, member_id, session_id) {
            return Err(GroupError::unknown_member(group, member_id));
        }
        for &p in partitions {
            let key = Self::key(group, topic, p);
            if self.owners.get(&key).is_some_and(|(o, _)| o == member_id) {
                self.owners.remove(&key);
                self.revision += 1;
            }
        }
        Ok(())
    }

    async fn commit(
        &mut self,
        group: &str,
        member_id: &str,
        session_id: u64,
        offsets: &[OffsetCommit],
    ) -> Result<u32, GroupError> {
        self.tick().await?;
        if !self.live(group, member_id, session_id) {
            return Err(GroupError::unknown_member(group, member_id));
        }
        let not_owned = offsets.iter().find(|o| {
            self.owners
                .get(&Self::key(group, &o.topic, o.partition))
                .is_none_or(|(owner, _)| owner != member_id)
        });
        if let Some(o) = not_owned {
            return Err(GroupError::NotPartitionOwner {
                group: group.to_string(),
                member_id: member_id.to_string(),
                topic: o.topic.clone(),
                partition: o.partition,
            });
        }
        self.revision += 1;
        for o in offsets {
            self.offsets.insert(
                Self::key(group, &o.topic, o.partition),
                (o.offset, o.leader_epoch),
            );
        }
        Ok(offsets.len() as u32)
    }

    async fn reset(&mut self, group: &str, offsets: &[OffsetCommit]) -> Result<u32, GroupError> {
        self.tick().await?;
        let members = self.members.keys().filter(|(g, _)| g == group).count();
        if members > 0 {
            return Err(GroupError::GroupNotEmpty {
                group: group.to_string(),
                members,
            });
        }
        self.revision += 1;
        for o in offsets {
            self.offsets.insert(
                Self::key(group, &o.topic, o.partition),
                (o.offset, o.leader_epoch),
            );
        }
        Ok(offsets.len() as u32)
    }

    async fn leave(
        &mut self,
        group: &str,
        member_id: &str,
        session_id: u64,
    ) -> Result<(), GroupError> {
        self.tick().await?;
        if !self.live(group, member_id, session_id) {
            return Err(GroupError::unknown_member(group, member_id));
        }
        self.drop_session(session_id);
        Ok(())
    }

    async fn partitions(&mut self, group: &str) -> Result<Vec<GroupPartitionInfo>, GroupError> {
        self.tick().await?;
        let keys: BTreeSet<&PartitionKey> = self
            .owners
            .keys()
            .chain(self.offsets.keys())
            .filter(|(g, _, _)| g == group)
            .collect();
        Ok(keys
            .into_iter()
            .map(|key| {
                let offset = self.offsets.get(key);
                GroupPartitionInfo {
                    topic: key.1.clone(),
                    partition: key.2,
                    owner: self
                        .owners
                        .get(key)
                        .map(|(o, _)| o.clone())
                        .unwrap_or_default(),
                    offset: offset.map(|(o, _)| *o),
                    leader_epoch: offset.map_or(-1, |(_, e)| *e),
                }
            })
            .collect())
    }

    async fn list(&mut self) -> Result<Vec<String>, GroupError> {
        self.tick().await?;
        let groups: BTreeSet<&String> = self
            .members
            .keys()
            .map(|(g, _)| g)
            .chain(self.owners.keys().map(|(g, _, _)| g))
            .chain(self.offsets.keys().map(|(g, _, _)| g))
            .collect();
        Ok(groups.into_iter().cloned().collect())
    }

    async fn forget_topic(&mut self, topic: &str) -> Result<u32, GroupError> {
        self.tick().await?;
        let before = self.offsets.len();
        self.offsets.retain(|(_, t, _), _| t != topic);
        let removed = before - self.offsets.len();
        if removed > 0 {
            self.revision += 1;
        }
        Ok(removed as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        futures_lite::future::block_on(future)
    }

    #[test]
    fn the_memory_store_behaves_as_the_etcd_one() {
        block_on(super::super::conformance::check(&mut MemoryGroups::new()));
    }

    #[test]
    fn a_lost_session_loses_its_membership_and_its_partitions() {
        block_on(async {
            let mut store = MemoryGroups::new();
            let a = store.join("g", "a", vec!["t".into()], 1_000).await.unwrap();
            let (_, revision) = store.members("g").await.unwrap();
            store
                .claim("g", &a.member_id, a.session_id, revision, "t", &[0])
                .await
                .unwrap();
            store.expire_session(a.session_id);
            let (members, _) = store.members("g").await.unwrap();
            assert!(members.is_empty());
            assert_eq!(store.partitions("g").await.unwrap(), vec![]);
            let beat = store.adopt("g", &a.member_id, a.session_id).await;
            assert!(
                matches!(beat, Err(GroupError::UnknownMember { .. })),
                "{beat:?}"
            );
        });
    }
}
