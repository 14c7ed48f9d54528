//! Consumer group requests on the control thread.
//!
//! Each request is one or a few etcd operations ([`coordinator::groups`]).
//! A heartbeat that finds the group's view unchanged is *parked* instead of
//! answered: the control thread answers it when the view changes (a member
//! joins or leaves, a topic is created or deleted, a broker comes or goes —
//! all seen through the registry's watch) or when its wait runs out. Parked
//! heartbeats cost a list entry each, bounded by
//! [`GROUP_WAITERS_MAX`](crate::limits::GROUP_WAITERS_MAX); past it, a
//! heartbeat is answered at once.

use crate::mailbox::{ControlError, GroupAnswer, GroupReply, GroupRequest};
use coordinator::groups::{GroupError, GroupStore};
use coordinator::registry::{BrokerRecord, TopicRecord};
use protocol::codec::groups::{GroupDescription, GroupMemberInfo, GroupTopicInfo, GroupView};
use protocol::ErrorCode;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// Which parked heartbeats to look at again.
#[derive(Debug, Clone, Copy)]
pub enum Wake<'g> {
    /// Only those whose wait ran out.
    Expired,
    /// Those of one group (a member joined or left).
    Group(&'g str),
    /// All (topics or brokers changed).
    All,
}

struct Parked {
    group: String,
    generation: u64,
    deadline: Instant,
    reply: GroupReply,
}

/// A group's members as last read from etcd.
struct Members {
    members: Vec<GroupMemberInfo>,
    revision: u64,
    read_at: Instant,
}

// How long a group's members are served from memory (the broker's
// `group_members_cache_ms`, 1 s). Every heartbeat used to read the whole
// member list from etcd: n members heartbeating made n² reads (issue 27,
// item 7). The watch forgets a group's entry when a member joins or leaves
// (a local join or leave at once), so the age bound only covers a change
// the watch has not delivered yet. A view older than the members cannot
// pass a claim: claims are fenced by etcd on the view's revision.

/// Groups whose members are kept at most; past it the cache starts over.
const MEMBERS_CACHED_MAX: usize = 10_000;

/// The control thread's group state: the registries and parked heartbeats.
pub struct GroupPlane<S> {
    groups: Option<S>,
    parked: Vec<Parked>,
    members: HashMap<String, Members>,
    members_fresh_for: Duration,
    deadline: Duration,
}

impl<S: GroupStore> GroupPlane<S> {
    /// Groups over `groups` (`None`: a standalone broker, which answers
    /// CLUSTER_REQUIRED), serving member lists up to `members_fresh_for`
    /// old and answering every request within `deadline`.
    pub fn new(groups: Option<S>, members_fresh_for: Duration, deadline: Duration) -> Self {
        GroupPlane {
            groups,
            parked: Vec::new(),
            members: HashMap::new(),
            members_fresh_for,
            deadline,
        }
    }

    /// When the next parked heartbeat runs out.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.parked.iter().map(|p| p.deadline).min()
    }

    fn groups(&mut self) -> Result<&mut S, ControlError> {
        self.groups.as_mut().ok_or_else(|| {
            ControlError::new(
                ErrorCode::ClusterRequired,
                crate::handler::groups::CLUSTER_REQUIRED,
            )
        })
    }

    /// Runs one request's store operations within the request deadline.
    async fn within<T>(
        deadline: Duration,
        work: impl std::future::Future<Output = Result<T, ControlError>>,
    ) -> Result<T, ControlError> {
        match tokio::time::timeout(deadline, work).await {
            Ok(result) => result,
            Err(_) => Err(GroupError::Unavailable {
                reason: format!("no answer within {deadline:?}"),
            }
            .into()),
        }
    }

    /// Removes every group's committed offsets of `topic` (deleted, or
    /// created again), so a new topic of an old name starts with no
    /// position in it (issue 24, item 13). A standalone broker has none.
    pub async fn forget_topic(&mut self, topic: &str) -> Result<u32, ControlError> {
        let deadline = self.deadline;
        match self.groups.as_mut() {
            None => Ok(0),
            Some(groups) => {
                Self::within(deadline, async { Ok(groups.forget_topic(topic).await?) }).await
            }
        }
    }

    /// The group's members: from memory while fresh, else from etcd.
    async fn members(&mut self, group: &str) -> Result<(Vec<GroupMemberInfo>, u64), ControlError> {
        if let Some(m) = self
            .members
            .get(group)
            .filter(|m| m.read_at.elapsed() < self.members_fresh_for)
        {
            return Ok((m.members.clone(), m.revision));
        }
        self.read_members(group).await
    }

    /// The group's members read from the store now (and remembered).
    async fn read_members(
        &mut self,
        group: &str,
    ) -> Result<(Vec<GroupMemberInfo>, u64), ControlError> {
        let read_at = Instant::now();
        let (members, revision) = self.groups()?.members(group).await?;
        if self.members.len() >= MEMBERS_CACHED_MAX {
            self.members.clear();
        }
        self.members.insert(
            group.to_string(),
            Members {
                members: members.clone(),
                revision,
                read_at,
            },
        );
        Ok((members, revision))
    }

    /// Forgets what is known of `group`'s members (`None`: of every
    /// group): they changed.
    pub fn forget(&mut self, group: Option<&str>) {
        match group {
            Some(group) => {
                self.members.remove(group);
            }
            None => self.members.clear(),
        }
    }

    /// The group's current view.
    async fn view(
        &mut self,
        group: &str,
        topics: &BTreeMap<String, TopicRecord>,
        brokers: &[BrokerRecord],
    ) -> Result<GroupView, ControlError> {
        let (members, revision) = self.members(group).await?;
        Ok(Self::view_of(members, revision, topics, brokers))
    }

    fn view_of(
        members: Vec<GroupMemberInfo>,
        revision: u64,
        topics: &BTreeMap<String, TopicRecord>,
        brokers: &[BrokerRecord],
    ) -> GroupView {
        let mut subscribed: Vec<&String> = members.iter().flat_map(|m| &m.topics).collect();
        subscribed.sort();
        subscribed.dedup();
        let mut view = GroupView {
            generation: 0,
            revision,
            topics: subscribed
                .into_iter()
                .map(|name| GroupTopicInfo {
                    name: name.clone(),
                    partitions: topics.get(name).map_or(0, |t| t.partitions),
                })
                .collect(),
            members,
            brokers: brokers.iter().map(|b| b.broker_id).collect(),
        };
        view.generation = view.fingerprint();
        view
    }

    /// Serves one request; a heartbeat may be parked instead of answered.
    pub async fn handle(
        &mut self,
        request: GroupRequest,
        reply: GroupReply,
        topics: &BTreeMap<String, TopicRecord>,
        brokers: &[BrokerRecord],
    ) {
        let deadline = self.deadline;
        let answer = match request {
            GroupRequest::Heartbeat {
                group,
                member_id,
                session_id,
                generation,
                max_wait_ms,
            } => {
                let view = Self::within(deadline, async {
                    let session_ms = self
                        .groups()?
                        .heartbeat(&group, &member_id, session_id)
                        .await?;
                    Ok((session_ms, self.view(&group, topics, brokers).await?))
                })
                .await;
                match view {
                    Ok((session_ms, view))
                        if view.generation == generation
                            && max_wait_ms > 0
                            && self.parked.len() < crate::limits::GROUP_WAITERS_MAX =>
                    {
                        let wait = max_wait_ms
                            .min(crate::limits::GROUP_HEARTBEAT_WAIT_MS_MAX)
                            .min(session_ms / 3);
                        self.parked.push(Parked {
                            group,
                            generation,
                            deadline: Instant::now() + Duration::from_millis(u64::from(wait)),
                            reply,
                        });
                        return;
                    }
                    other => other.map(|(_, view)| GroupAnswer::View(view)),
                }
            }
            other => Self::within(deadline, self.serve(other, topics, brokers)).await,
        };
        let _ = reply.send_async(answer).await;
    }

    /// Refuses a claim the member's own record and the current view do not
    /// allow (issue 24, item 11): a topic it does not subscribe to, or
    /// partitions outside its share. Read from the store, not the cache: a
    /// claim is rare, and must not be judged on an older member list than
    /// the one it was computed from.
    async fn check_claim(
        &mut self,
        group: &str,
        member_id: &str,
        topic: &str,
        partitions: &[u32],
        topics: &BTreeMap<String, TopicRecord>,
        brokers: &[BrokerRecord],
    ) -> Result<(), ControlError> {
        let (members, revision) = self.read_members(group).await?;
        let view = Self::view_of(members, revision, topics, brokers);
        let Some(member) = view.members.iter().find(|m| m.member_id == member_id) else {
            return Err(GroupError::UnknownMember {
                group: group.to_string(),
                member_id: member_id.to_string(),
            }
            .into());
        };
        if !member.topics.iter().any(|t| t == topic) {
            return Err(ControlError::new(
                ErrorCode::InvalidRequest,
                format!(
                    "ClaimPartitions: member {member_id} does not subscribe to {topic:?} (it joined with {:?})",
                    member.topics
                ),
            ));
        }
        let share: Vec<u32> = view
            .assignment(member_id)
            .into_iter()
            .find(|(t, _)| t == topic)
            .map(|(_, share)| share)
            .unwrap_or_default();
        if let Some(p) = partitions.iter().find(|p| !share.contains(p)) {
            return Err(GroupError::ClaimConflict {
                group: group.to_string(),
                topic: topic.to_string(),
                partitions: partitions.to_vec(),
                reason: format!(
                    "{topic}-{p} is not the member's share in the current view (generation {}: {share:?}); heartbeat for the new view",
                    view.generation
                ),
            }
            .into());
        }
        Ok(())
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one match over the group requests the control thread serves"
    )]
    async fn serve(
        &mut self,
        request: GroupRequest,
        topics: &BTreeMap<String, TopicRecord>,
        brokers: &[BrokerRecord],
    ) -> Result<GroupAnswer, ControlError> {
        self.groups()?;
        Ok(match request {
            GroupRequest::Join {
                group,
                member_name,
                topics,
                session_timeout_ms,
            } => {
                let joined = self
                    .groups()?
                    .join(&group, &member_name, topics, session_timeout_ms)
                    .await?;
                tracing::info!(%group, member = %joined.member_id, "member joined");
                self.forget(Some(&group));
                GroupAnswer::Joined(joined)
            }
            GroupRequest::Claim {
                group,
                member_id,
                session_id,
                revision,
                topic,
                partitions,
            } => {
                self.check_claim(&group, &member_id, &topic, &partitions, topics, brokers)
                    .await?;
                self.groups()?
                    .claim(
                        &group,
                        &member_id,
                        session_id,
                        revision,
                        &topic,
                        &partitions,
                    )
                    .await?;
                GroupAnswer::Done
            }
            GroupRequest::Release {
                group,
                member_id,
                session_id,
                topic,
                partitions,
            } => {
                self.groups()?
                    .release(&group, &member_id, session_id, &topic, &partitions)
                    .await?;
                GroupAnswer::Done
            }
            GroupRequest::Commit {
                group,
                member_id,
                session_id,
                offsets,
            } => {
                let groups = self.groups()?;
                GroupAnswer::Committed(if member_id.is_empty() {
                    groups.reset(&group, &offsets).await?
                } else {
                    groups
                        .commit(&group, &member_id, session_id, &offsets)
                        .await?
                })
            }
            GroupRequest::Leave {
                group,
                member_id,
                session_id,
            } => {
                self.groups()?.leave(&group, &member_id, session_id).await?;
                tracing::info!(%group, member = %member_id, "member left");
                self.forget(Some(&group));
                GroupAnswer::Done
            }
            GroupRequest::Describe { group } => {
                let partitions = self.groups()?.partitions(&group).await?;
                let view = self.view(&group, topics, brokers).await?;
                GroupAnswer::Described(GroupDescription { view, partitions })
            }
            GroupRequest::List => GroupAnswer::Groups(self.groups()?.list().await?),
            GroupRequest::Heartbeat { .. } => {
                return Err(ControlError::new(
                    ErrorCode::Internal,
                    "heartbeats are served by handle",
                ))
            }
        })
    }

    /// Answers the parked heartbeats whose view may have changed (as `wake`
    /// says) and whose view did change, and every parked heartbeat whose
    /// wait ran out.
    pub async fn wake(
        &mut self,
        wake: Wake<'_>,
        topics: &BTreeMap<String, TopicRecord>,
        brokers: &[BrokerRecord],
    ) {
        // Topics and brokers are read fresh into every view; members only
        // change with a member.
        if let Wake::Group(group) = wake {
            self.forget(Some(group));
        }
        let now = Instant::now();
        let mut due: Vec<String> = self
            .parked
            .iter()
            .filter(|p| {
                p.deadline <= now
                    || match wake {
                        Wake::Expired => false,
                        Wake::Group(group) => group == p.group,
                        Wake::All => true,
                    }
            })
            .map(|p| p.group.clone())
            .collect();
        due.sort();
        due.dedup();
        for name in due {
            let view = self.view(&name, topics, brokers).await;
            let now = Instant::now();
            let (answer, keep): (Vec<Parked>, Vec<Parked>) =
                std::mem::take(&mut self.parked).into_iter().partition(|p| {
                    p.group == name
                        && (p.deadline <= now
                            || view.as_ref().map_or(true, |v| v.generation != p.generation))
                });
            self.parked = keep;
            for parked in answer {
                let _ = parked.reply.try_send(match &view {
                    Ok(view) => Ok(GroupAnswer::View(view.clone())),
                    Err(error) => Err(error.clone()),
                });
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a test: a failed step is the failure
mod tests {
    //! The group handling of the control thread on the in-memory store
    //! (issue 24: the seam). Each test drives [`GroupPlane`] as the control
    //! thread does and reads the answers from the reply channel.
    use super::*;
    use coordinator::groups::MemoryGroups;
    use coordinator::registry::conformance::broker;
    use protocol::codec::groups::{Joined, OffsetCommit};
    use protocol::codec::TopicSettings;

    type Plane = GroupPlane<MemoryGroups>;

    fn plane() -> Plane {
        GroupPlane::new(
            Some(MemoryGroups::new()),
            Duration::from_secs(1),
            Duration::from_millis(200),
        )
    }

    fn topics(partitions: u32) -> BTreeMap<String, TopicRecord> {
        let t = TopicRecord::new("t", TopicSettings::default(), vec![1; partitions as usize]);
        let u = TopicRecord::new("u", TopicSettings::default(), vec![1; 2]);
        BTreeMap::from([("t".to_string(), t), ("u".to_string(), u)])
    }

    fn run<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(future)
    }

    /// Serves `request` and returns its answer; `None` when it was parked.
    async fn ask(
        plane: &mut Plane,
        request: GroupRequest,
        topics: &BTreeMap<String, TopicRecord>,
    ) -> Option<Result<GroupAnswer, ControlError>> {
        let (reply, answer) = flume::bounded(1);
        plane.handle(request, reply, topics, &[broker(1)]).await;
        answer.try_recv().ok()
    }

    async fn join(plane: &mut Plane, name: &str, subscribe: &[&str], session_ms: u32) -> Joined {
        let topics = topics(4);
        let request = GroupRequest::Join {
            group: "g".into(),
            member_name: name.into(),
            topics: subscribe.iter().map(|t| t.to_string()).collect(),
            session_timeout_ms: session_ms,
        };
        match ask(plane, request, &topics).await {
            Some(Ok(GroupAnswer::Joined(joined))) => joined,
            other => panic!("{other:?}"),
        }
    }

    fn heartbeat(joined: &Joined, generation: u64, max_wait_ms: u32) -> GroupRequest {
        GroupRequest::Heartbeat {
            group: "g".into(),
            member_id: joined.member_id.clone(),
            session_id: joined.session_id,
            generation,
            max_wait_ms,
        }
    }

    async fn view(plane: &mut Plane, joined: &Joined) -> GroupView {
        match ask(plane, heartbeat(joined, 0, 0), &topics(4)).await {
            Some(Ok(GroupAnswer::View(view))) => view,
            other => panic!("{other:?}"),
        }
    }

    fn claim(joined: &Joined, revision: u64, topic: &str, partitions: &[u32]) -> GroupRequest {
        GroupRequest::Claim {
            group: "g".into(),
            member_id: joined.member_id.clone(),
            session_id: joined.session_id,
            revision,
            topic: topic.into(),
            partitions: partitions.to_vec(),
        }
    }

    async fn described(plane: &mut Plane) -> Vec<protocol::codec::groups::GroupPartitionInfo> {
        let request = GroupRequest::Describe { group: "g".into() };
        match ask(plane, request, &topics(4)).await {
            Some(Ok(GroupAnswer::Described(d))) => d.partitions,
            other => panic!("{other:?}"),
        }
    }

    fn code(answer: Option<Result<GroupAnswer, ControlError>>) -> ErrorCode {
        match answer {
            Some(Err(error)) => error.code,
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn a_parked_heartbeat_waits_at_most_a_third_of_its_session_and_a_minute() {
        run(async {
            let mut plane = plane();
            let a = join(&mut plane, "a", &["t"], 3_000).await;
            assert_eq!(a.session_timeout_ms, 3_000);
            let current = view(&mut plane, &a).await;
            let parked = ask(
                &mut plane,
                heartbeat(&a, current.generation, 20_000),
                &topics(4),
            )
            .await;
            assert!(parked.is_none(), "an unchanged view parks: {parked:?}");
            let wait = plane.next_deadline().unwrap() - Instant::now();
            assert!(wait <= Duration::from_millis(1_000), "{wait:?}");
            // A long session: the minute's cap.
            let b = join(&mut plane, "b", &["t"], 300_000).await;
            let current = view(&mut plane, &b).await;
            let mut plane_b = plane;
            plane_b.parked.clear();
            assert!(ask(
                &mut plane_b,
                heartbeat(&b, current.generation, u32::MAX),
                &topics(4)
            )
            .await
            .is_none());
            let wait = plane_b.next_deadline().unwrap() - Instant::now();
            assert!(wait <= Duration::from_secs(60), "{wait:?}");
            assert!(wait > Duration::from_secs(59), "{wait:?}");
        });
    }

    #[test]
    fn a_parked_heartbeat_is_answered_when_the_view_changes_and_not_when_a_broker_goes() {
        run(async {
            let mut plane = plane();
            let a = join(&mut plane, "a", &["t"], 6_000).await;
            let current = view(&mut plane, &a).await;
            let (reply, answer) = flume::bounded(1);
            let topics4 = topics(4);
            plane
                .handle(
                    heartbeat(&a, current.generation, 1_500),
                    reply,
                    &topics4,
                    &[broker(1), broker(2)],
                )
                .await;
            // Broker 2 is gone: the generation does not move (issue 24,
            // item 8), so the heartbeat stays parked.
            plane.wake(Wake::All, &topics4, &[broker(1)]).await;
            assert!(
                answer.try_recv().is_err(),
                "parked through a broker's death"
            );
            // The topic grows: answered with the new generation.
            plane.wake(Wake::All, &topics(6), &[broker(1)]).await;
            match answer.try_recv() {
                Ok(Ok(GroupAnswer::View(view))) => {
                    assert_ne!(view.generation, current.generation);
                    assert_eq!(view.topics[0].partitions, 6);
                }
                other => panic!("{other:?}"),
            }
        });
    }

    #[test]
    fn claims_outside_the_subscription_or_the_share_are_refused() {
        run(async {
            let mut plane = plane();
            let a = join(&mut plane, "a", &["t"], 6_000).await;
            let b = join(&mut plane, "b", &["t", "u"], 6_000).await;
            let v = view(&mut plane, &a).await;
            let share_a = v.assignment(&a.member_id)[0].1.clone();
            assert_eq!(share_a, vec![0, 1]);
            let t4 = topics(4);
            let not_subscribed = ask(&mut plane, claim(&a, v.revision, "u", &[0]), &t4).await;
            assert_eq!(code(not_subscribed), ErrorCode::InvalidRequest);
            let not_its_share = ask(&mut plane, claim(&a, v.revision, "t", &[0, 2]), &t4).await;
            assert_eq!(code(not_its_share), ErrorCode::ClaimConflict);
            let ok = ask(&mut plane, claim(&a, v.revision, "t", &share_a), &t4).await;
            assert!(matches!(ok, Some(Ok(GroupAnswer::Done))), "{ok:?}");
            let ok = ask(&mut plane, claim(&b, v.revision, "u", &[0, 1]), &t4).await;
            assert!(matches!(ok, Some(Ok(GroupAnswer::Done))), "{ok:?}");
        });
    }

    #[test]
    fn releases_and_commits_are_fenced_by_the_session_and_a_deleted_topic_forgets_its_offsets() {
        run(async {
            let mut plane = plane();
            let a = join(&mut plane, "a", &["t"], 6_000).await;
            let v = view(&mut plane, &a).await;
            let t4 = topics(4);
            ask(&mut plane, claim(&a, v.revision, "t", &[0, 1, 2, 3]), &t4)
                .await
                .unwrap()
                .unwrap();
            let commit = |session_id| GroupRequest::Commit {
                group: "g".into(),
                member_id: a.member_id.clone(),
                session_id,
                offsets: vec![OffsetCommit {
                    topic: "t".into(),
                    partition: 1,
                    offset: 90,
                    leader_epoch: -1,
                }],
            };
            let release = |session_id| GroupRequest::Release {
                group: "g".into(),
                member_id: a.member_id.clone(),
                session_id,
                topic: "t".into(),
                partitions: vec![0],
            };
            assert_eq!(
                code(ask(&mut plane, commit(a.session_id + 7), &t4).await),
                ErrorCode::UnknownMember
            );
            assert_eq!(
                code(ask(&mut plane, release(a.session_id + 7), &t4).await),
                ErrorCode::UnknownMember
            );
            let committed = ask(&mut plane, commit(a.session_id), &t4).await;
            assert!(
                matches!(committed, Some(Ok(GroupAnswer::Committed(1)))),
                "{committed:?}"
            );
            let before = described(&mut plane).await;
            assert_eq!(before.iter().filter(|p| p.offset == Some(90)).count(), 1);
            assert_eq!(plane.forget_topic("t").await.unwrap(), 1);
            let after = described(&mut plane).await;
            assert!(after.iter().all(|p| p.offset.is_none()), "{after:?}");
            assert_eq!(after.len(), 4, "owners stay with their session: {after:?}");
        });
    }

    #[test]
    fn every_request_is_answered_within_the_deadline_when_the_store_stops_answering() {
        run(async {
            let mut plane = plane();
            let a = join(&mut plane, "a", &["t"], 6_000).await;
            plane.groups.as_mut().unwrap().stalled = true;
            let t4 = topics(4);
            let requests = [
                heartbeat(&a, 0, 0),
                claim(&a, 1, "t", &[0]),
                GroupRequest::Describe { group: "g".into() },
                GroupRequest::List,
            ];
            for request in requests {
                assert_eq!(
                    code(ask(&mut plane, request, &t4).await),
                    ErrorCode::CoordinatorUnavailable
                );
            }
        });
    }

    #[test]
    fn a_standalone_plane_answers_cluster_required() {
        run(async {
            let mut plane: Plane = GroupPlane::new(None, Duration::ZERO, Duration::from_secs(1));
            let answer = ask(&mut plane, GroupRequest::List, &topics(1)).await;
            assert_eq!(code(answer), ErrorCode::ClusterRequired);
            assert_eq!(plane.forget_topic("t").await.unwrap(), 0);
        });
    }
}
