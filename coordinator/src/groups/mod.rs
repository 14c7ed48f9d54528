//! Consumer groups: the paper's consumer, ownership and offset registries,
//! behind one seam ([`GroupStore`]) as the topic registry is behind
//! [`crate::registry::Registry`].
//!
//! A member's session is its member record: created at the join (the
//! session id names that creation), removed when the member leaves or
//! when the broker that keeps the session finds it has not heartbeated for
//! its session timeout ([`GroupStore::expire`]). Brokers keep their
//! members' liveness in memory and write only changes (issue 46, item 5);
//! the record and every ownership the member holds are bound to that
//! broker's lease, so a broker's death takes its members with it one lease
//! TTL later — unless their heartbeats reach another broker first, which
//! takes them over ([`GroupStore::adopt`]). Safety rests on four checks,
//! each made atomically by the store:
//!
//! - **claim**: succeeds only if the claimer's session is live, no member
//!   record changed since the revision of the view the claim was computed
//!   from (so a member that has not seen a join cannot take the joiner's
//!   share), and none of the partitions has an owner. It never steals.
//! - **commit**: succeeds only if the committer's session is live and it
//!   owns every partition it commits, so a member whose session expired
//!   can never overwrite the offsets of the partition's next owner.
//! - **release**: only the session that owns a partition gives it up.
//! - **reset**: succeeds only if the group has no member at all.
//!
//! A member that has not seen a departure claims less than its fair share
//! until its next view; nothing is owned twice at any time.
//!
//! Implementations: [`EtcdGroups`] (a cluster's, keys in [`crate::keys`])
//! and [`MemoryGroups`] (tests of the control thread's group handling).
//! [`conformance`] is the behaviour both must have.

mod etcd;
mod memory;

pub use etcd::EtcdGroups;
pub use memory::MemoryGroups;

use protocol::codec::groups::{GroupMemberInfo, GroupPartitionInfo, Joined, OffsetCommit};
use protocol::types::PartitionId;
use serde::{Deserialize, Serialize};
use std::future::Future;

/// A member as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRecord {
    /// The member's id.
    pub member_id: String,
    /// Its subscribed topics, sorted.
    pub topics: Vec<String>,
    /// Its session timeout.
    pub session_timeout_ms: u32,
}

/// A session bound to this broker's lease, as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldSession {
    /// The group.
    pub group: String,
    /// The member.
    pub member_id: String,
    /// Its session.
    pub session_id: u64,
    /// Its session timeout.
    pub session_timeout_ms: u32,
}

/// Why a group operation failed.
#[derive(Debug, Clone, thiserror::Error)]
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
    /// claim's revision ahead of the registry's, a topic it does not
    /// subscribe to.
    #[error("{reason}")]
    InvalidRequest {
        /// What is wrong with it.
        reason: String,
    },
    /// The store did not answer in time.
    #[error("etcd is unavailable: {reason}")]
    Unavailable {
        /// The client's words.
        reason: String,
    },
}

impl GroupError {
    /// The session is gone, or never was.
    pub fn unknown_member(group: &str, member_id: &str) -> GroupError {
        GroupError::UnknownMember {
            group: group.to_string(),
            member_id: member_id.to_string(),
        }
    }
}

/// The consumer group registries of one cluster. Owned by one control
/// thread: methods take `&mut self` and their futures need not be `Send`
/// (see [`crate::registry::Registry`]).
pub trait GroupStore {
    /// Joins `group`: a new session of `session_timeout_ms` (a store may
    /// round it up; the answer carries the session that applies) and a
    /// member record under it. `topics` are kept sorted and deduplicated.
    fn join(
        &mut self,
        group: &str,
        member_name: &str,
        topics: Vec<String>,
        session_timeout_ms: u32,
    ) -> impl Future<Output = Result<Joined, GroupError>>;

    /// Takes a live member's session over: this broker keeps it alive from
    /// now on (another broker held it, or this one before a restart);
    /// returns the session's length in milliseconds. `UnknownMember` when
    /// the member record is gone or of another session.
    fn adopt(
        &mut self,
        group: &str,
        member_id: &str,
        session_id: u64,
    ) -> impl Future<Output = Result<u32, GroupError>>;

    /// The sessions bound to this broker's lease: what the broker must
    /// time, including any whose join or take-over it gave up waiting for
    /// after etcd had made it (those would otherwise outlive their member).
    fn held(&mut self) -> impl Future<Output = Result<Vec<HeldSession>, GroupError>>;

    /// Ends a session this broker keeps whose heartbeats stopped: its
    /// record and partitions go. Nothing changes if the session is gone
    /// already or another broker took it over; `Ok(true)` when it ended.
    fn expire(
        &mut self,
        group: &str,
        member_id: &str,
        session_id: u64,
    ) -> impl Future<Output = Result<bool, GroupError>>;

    /// The group's members, sorted by id, and a revision they were read
    /// at: a claim made at it passes only while no member joined since.
    fn members(
        &mut self,
        group: &str,
    ) -> impl Future<Output = Result<(Vec<GroupMemberInfo>, u64), GroupError>>;

    /// Claims `partitions` of `topic` for the member (see the module doc).
    /// A revision ahead of the store's is refused with `InvalidRequest`.
    fn claim(
        &mut self,
        group: &str,
        member_id: &str,
        session_id: u64,
        revision: u64,
        topic: &str,
        partitions: &[PartitionId],
    ) -> impl Future<Output = Result<(), GroupError>>;

    /// Releases the partitions of `topic` that the member's session owns;
    /// others are left alone. `UnknownMember` when the session is gone.
    fn release(
        &mut self,
        group: &str,
        member_id: &str,
        session_id: u64,
        topic: &str,
        partitions: &[PartitionId],
    ) -> impl Future<Output = Result<(), GroupError>>;

    /// Commits offsets of partitions the member's session owns, all or
    /// none; returns how many.
    fn commit(
        &mut self,
        group: &str,
        member_id: &str,
        session_id: u64,
        offsets: &[OffsetCommit],
    ) -> impl Future<Output = Result<u32, GroupError>>;

    /// Sets offsets of a group that has no live member.
    fn reset(
        &mut self,
        group: &str,
        offsets: &[OffsetCommit],
    ) -> impl Future<Output = Result<u32, GroupError>>;

    /// Ends a member's session: its record and partitions go at once.
    fn leave(
        &mut self,
        group: &str,
        member_id: &str,
        session_id: u64,
    ) -> impl Future<Output = Result<(), GroupError>>;

    /// Every partition of the group with an owner or a committed offset,
    /// in (topic, partition) order.
    fn partitions(
        &mut self,
        group: &str,
    ) -> impl Future<Output = Result<Vec<GroupPartitionInfo>, GroupError>>;

    /// Every group with a member, an owner or a committed offset, sorted.
    fn list(&mut self) -> impl Future<Output = Result<Vec<String>, GroupError>>;

    /// Removes every group's committed offsets of `topic` (deleted, or
    /// about to be created again: a new topic starts empty, and an old
    /// position in it would point anywhere); returns how many. Owners are
    /// left to their sessions.
    fn forget_topic(&mut self, topic: &str) -> impl Future<Output = Result<u32, GroupError>>;
}

/// A member name reduced to `[A-Za-z0-9._-]`, at most 64 bytes, so that it
/// fits in a key segment; `member` when nothing is left.
pub(crate) fn sanitize(name: &str) -> String {
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

#[allow(clippy::unwrap_used)] // a test: a failed step is the failure
pub mod conformance {
    //! The behaviour every [`GroupStore`] must have, as a test that any
    //! implementation runs (the etcd one from the integration tests,
    //! against a real etcd; the memory one from its unit tests).
    use super::*;

    fn commit(topic: &str, partition: PartitionId, offset: u64) -> OffsetCommit {
        OffsetCommit {
            topic: topic.into(),
            partition,
            offset,
            leader_epoch: 2,
        }
    }

    fn is_unknown_member<T: std::fmt::Debug>(result: &Result<T, GroupError>) -> bool {
        matches!(result, Err(GroupError::UnknownMember { .. }))
    }

    /// Joins, claims, commits, releases, leaves and resets as the module
    /// doc says, and refuses what it says is refused. Expects a store with
    /// no group `conformance` and no topic `conformance-t`.
    #[expect(
        clippy::too_many_lines,
        reason = "the conformance test every group store passes: one scenario read top to bottom"
    )]
    pub async fn check(store: &mut impl GroupStore) {
        let g = "conformance";
        let t = "conformance-t";
        let (members, first) = store.members(g).await.unwrap();
        assert!(members.is_empty(), "{members:?}");

        // Join: topics sorted and deduplicated, a sanitised name, the
        // session that applies.
        let a = store
            .join(g, "a/1", vec!["z".into(), t.into(), "z".into()], 1_500)
            .await
            .unwrap();
        assert!(a.member_id.starts_with("a1-"), "{}", a.member_id);
        assert!(a.session_timeout_ms >= 1_500, "{}", a.session_timeout_ms);
        assert_eq!(
            store.adopt(g, &a.member_id, a.session_id).await.unwrap(),
            a.session_timeout_ms
        );
        let stale = store.adopt(g, &a.member_id, a.session_id + 1).await;
        assert!(is_unknown_member(&stale), "{stale:?}");
        let (members, at_a) = store.members(g).await.unwrap();
        assert_eq!(members.len(), 1);
        assert_eq!(members[0].topics, vec![t.to_string(), "z".to_string()]);
        assert!(at_a > first);

        // A claim ahead of the registry is refused; one from before a
        // join is a conflict; a current one passes and never steals.
        let ahead = store
            .claim(g, &a.member_id, a.session_id, at_a + 1_000_000, t, &[0])
            .await;
        assert!(
            matches!(ahead, Err(GroupError::InvalidRequest { .. })),
            "{ahead:?}"
        );
        let b = store.join(g, "b", vec![t.into()], 1_000).await.unwrap();
        let (members, at_b) = store.members(g).await.unwrap();
        assert_eq!(members.len(), 2);
        assert!(members[0].member_id < members[1].member_id);
        let old_view = store
            .claim(g, &a.member_id, a.session_id, at_a, t, &[0, 1])
            .await;
        assert!(
            matches!(old_view, Err(GroupError::ClaimConflict { .. })),
            "{old_view:?}"
        );
        store
            .claim(g, &a.member_id, a.session_id, at_b, t, &[0, 1])
            .await
            .unwrap();
        let taken = store
            .claim(g, &b.member_id, b.session_id, at_b, t, &[1, 2])
            .await;
        assert!(
            matches!(&taken, Err(GroupError::ClaimConflict { reason, .. }) if reason.contains(&a.member_id)),
            "{taken:?}"
        );
        let wrong_session = store
            .claim(g, &b.member_id, a.session_id, at_b, t, &[2])
            .await;
        assert!(is_unknown_member(&wrong_session), "{wrong_session:?}");
        store
            .claim(g, &b.member_id, b.session_id, at_b, t, &[2])
            .await
            .unwrap();

        // Commits: only the owner's session, all or none.
        assert_eq!(
            store
                .commit(
                    g,
                    &a.member_id,
                    a.session_id,
                    &[commit(t, 0, 10), commit(t, 1, 20)]
                )
                .await
                .unwrap(),
            2
        );
        let not_owner = store
            .commit(
                g,
                &a.member_id,
                a.session_id,
                &[commit(t, 0, 11), commit(t, 2, 5)],
            )
            .await;
        assert!(
            matches!(
                &not_owner,
                Err(GroupError::NotPartitionOwner { partition: 2, .. })
            ),
            "{not_owner:?}"
        );
        let other_session = store
            .commit(g, &a.member_id, b.session_id, &[commit(t, 0, 12)])
            .await;
        assert!(is_unknown_member(&other_session), "{other_session:?}");

        // Release: only the owning session; another's partition stays.
        let released = store.release(g, &a.member_id, b.session_id, t, &[0]).await;
        assert!(is_unknown_member(&released), "{released:?}");
        store
            .release(g, &a.member_id, a.session_id, t, &[1, 2])
            .await
            .unwrap();
        let partitions = store.partitions(g).await.unwrap();
        let owners: Vec<(PartitionId, &str, Option<u64>)> = partitions
            .iter()
            .map(|p| (p.partition, p.owner.as_str(), p.offset))
            .collect();
        assert_eq!(
            owners,
            vec![
                (0, a.member_id.as_str(), Some(10)),
                (1, "", Some(20)),
                (2, b.member_id.as_str(), None),
            ]
        );
        assert_eq!(partitions[0].leader_epoch, 2);
        assert_eq!(store.list().await.unwrap(), vec![g.to_string()]);

        // Reset: refused while a member is live; leave frees everything.
        let busy = store.reset(g, &[commit(t, 0, 0)]).await;
        assert!(
            matches!(busy, Err(GroupError::GroupNotEmpty { .. })),
            "{busy:?}"
        );
        store.leave(g, &a.member_id, a.session_id).await.unwrap();
        let again = store.leave(g, &a.member_id, a.session_id).await;
        assert!(is_unknown_member(&again), "{again:?}");
        let after_leave = store
            .commit(g, &a.member_id, a.session_id, &[commit(t, 0, 13)])
            .await;
        assert!(is_unknown_member(&after_leave), "{after_leave:?}");
        store.leave(g, &b.member_id, b.session_id).await.unwrap();
        let (members, _) = store.members(g).await.unwrap();
        assert!(members.is_empty(), "{members:?}");
        assert_eq!(store.reset(g, &[commit(t, 0, 3)]).await.unwrap(), 1);
        let partitions = store.partitions(g).await.unwrap();
        assert_eq!(partitions.len(), 2, "{partitions:?}");
        assert!(partitions.iter().all(|p| p.owner.is_empty()));
        assert_eq!(partitions[0].offset, Some(3));

        // An expired session: its record and partitions go; once gone,
        // expiring it again changes nothing.
        let c = store.join(g, "c", vec![t.into()], 2_000).await.unwrap();
        let held = store.held().await.unwrap();
        assert!(
            held.contains(&HeldSession {
                group: g.into(),
                member_id: c.member_id.clone(),
                session_id: c.session_id,
                session_timeout_ms: 2_000,
            }),
            "{held:?}"
        );
        let (_, at_c) = store.members(g).await.unwrap();
        store
            .claim(g, &c.member_id, c.session_id, at_c, t, &[1])
            .await
            .unwrap();
        assert!(!store
            .expire(g, &c.member_id, c.session_id + 1)
            .await
            .unwrap());
        assert!(store.expire(g, &c.member_id, c.session_id).await.unwrap());
        assert!(!store.expire(g, &c.member_id, c.session_id).await.unwrap());
        let (members, _) = store.members(g).await.unwrap();
        assert!(members.is_empty(), "{members:?}");
        let partitions = store.partitions(g).await.unwrap();
        assert!(
            partitions.iter().all(|p| p.owner.is_empty()),
            "{partitions:?}"
        );
        let gone = store.adopt(g, &c.member_id, c.session_id).await;
        assert!(is_unknown_member(&gone), "{gone:?}");

        // A deleted topic's offsets go with it.
        assert_eq!(store.forget_topic(t).await.unwrap(), 2);
        assert_eq!(store.partitions(g).await.unwrap(), vec![]);
        assert_eq!(store.list().await.unwrap(), Vec::<String>::new());
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
