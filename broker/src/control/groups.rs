//! Consumer group requests on the control thread.
//!
//! Each request is one or a few etcd operations ([`coordinator::groups`]),
//! but a heartbeat: the sessions of the members that joined through this
//! broker (or whose heartbeats came here since) are kept in memory — a
//! heartbeat notes the time and touches no store — and one whose member
//! stops heartbeating for its session timeout is expired in the store by
//! the sweep (issue 46, item 5). A heartbeat for a session this broker
//! does not keep takes it over ([`GroupStore::adopt`]): its broker died,
//! or its client moved.
//!
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
    brief_ok: bool,
    deadline: Instant,
    reply: GroupReply,
}

/// A group's members as last read from etcd, and the view last computed
/// from them (with the topics' partition counts and the brokers it was
/// computed with).
struct Members {
    members: Vec<GroupMemberInfo>,
    revision: u64,
    read_at: Instant,
    view: Option<(u64, GroupView)>,
}

/// A session this broker keeps: its member's liveness is here, not in
/// the store.
struct Session {
    session_id: u64,
    timeout: Duration,
    last: Instant,
}

impl Session {
    fn expired(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last) >= self.timeout
    }
}

/// How often the sessions are looked over for expired ones.
const SWEEP_EVERY: Duration = Duration::from_millis(100);

/// How often the sessions bound to this broker's lease are read back from
/// the store: a join or take-over whose answer this broker gave up waiting
/// for may have been made all the same, and its member would never expire
/// (nor its partitions be free) while this broker lives.
const RECONCILE_EVERY: Duration = Duration::from_secs(5);

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
    /// The sessions this broker keeps, by (group, member id).
    sessions: HashMap<(String, String), Session>,
    next_sweep: Instant,
    next_reconcile: Instant,
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
            sessions: HashMap::new(),
            next_sweep: Instant::now(),
            next_reconcile: Instant::now(),
        }
    }

    /// When the next parked heartbeat runs out, or the next sweep of the
    /// sessions is due.
    pub fn next_deadline(&self) -> Option<Instant> {
        // The sweep while there are sessions; else the next reconcile
        // (in a cluster), which may find some.
        let sweep = if !self.sessions.is_empty() {
            Some(self.next_sweep)
        } else if self.groups.is_some() {
            Some(self.next_reconcile.max(self.next_sweep))
        } else {
            None
        };
        self.parked.iter().map(|p| p.deadline).chain(sweep).min()
    }

    /// How many sessions this broker keeps.
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Notes a member's heartbeat: its session is kept here, or is taken
    /// over; the session's length in milliseconds.
    async fn keep_alive(
        &mut self,
        group: &str,
        member_id: &str,
        session_id: u64,
    ) -> Result<u32, ControlError> {
        let now = Instant::now();
        let key = (group.to_string(), member_id.to_string());
        if let Some(session) = self.sessions.get_mut(&key) {
            if session.session_id == session_id {
                if session.expired(now) {
                    // Expired, its removal not yet written (the store is
                    // away): gone all the same.
                    return Err(GroupError::unknown_member(group, member_id).into());
                }
                session.last = now;
                return Ok(u32::try_from(session.timeout.as_millis()).unwrap_or(u32::MAX));
            }
        }
        self.room_for_a_session(&key)?;
        let session_ms = self.groups()?.adopt(group, member_id, session_id).await?;
        tracing::info!(%group, member = %member_id, "member's session taken over");
        self.sessions.insert(
            key,
            Session {
                session_id,
                timeout: Duration::from_millis(u64::from(session_ms)),
                last: now,
            },
        );
        // Its record was rewritten (under this broker's lease).
        self.forget(Some(group));
        Ok(session_ms)
    }

    /// Times every session the store binds to this broker's lease that it
    /// does not time yet (from now: its member gets a whole session to
    /// heartbeat, else the sweep expires it).
    async fn reconcile(&mut self, deadline: Duration, now: Instant) {
        let Ok(groups) = self.groups() else {
            return;
        };
        let held = Self::within(deadline, async { Ok(groups.held().await?) }).await;
        match held {
            Ok(held) => {
                for h in held {
                    if let std::collections::hash_map::Entry::Vacant(entry) =
                        self.sessions.entry((h.group, h.member_id))
                    {
                        let (group, member) = entry.key();
                        tracing::info!(%group, %member, "a member under this broker's lease it did not time: timed from now");
                        entry.insert(Session {
                            session_id: h.session_id,
                            timeout: Duration::from_millis(u64::from(h.session_timeout_ms)),
                            last: now,
                        });
                    }
                }
            }
            Err(error) => {
                tracing::warn!(error = %error.message, "reading the sessions under this broker's lease; retried");
            }
        }
    }

    /// Refuses a new session past [`GROUP_SESSIONS_MAX`]: memory is bounded
    /// by configuration, not by how many members clients make.
    ///
    /// [`GROUP_SESSIONS_MAX`]: crate::limits::GROUP_SESSIONS_MAX
    fn room_for_a_session(&self, key: &(String, String)) -> Result<(), ControlError> {
        if self.sessions.len() >= crate::limits::GROUP_SESSIONS_MAX
            && !self.sessions.contains_key(key)
        {
            return Err(ControlError::new(
                ErrorCode::Overloaded,
                format!(
                    "this broker keeps {} group members' sessions already (the most it keeps); join through another broker",
                    self.sessions.len()
                ),
            ));
        }
        Ok(())
    }

    /// Expires the sessions whose member stopped heartbeating (at most one
    /// pass per [`SWEEP_EVERY`]); the groups that lost a member. A store
    /// that fails leaves the rest for the next pass.
    async fn sweep(&mut self) -> Vec<String> {
        let now = Instant::now();
        if now < self.next_sweep || self.groups.is_none() {
            return Vec::new();
        }
        self.next_sweep = now + SWEEP_EVERY;
        let deadline = self.deadline;
        if now >= self.next_reconcile {
            self.next_reconcile = now + RECONCILE_EVERY;
            self.reconcile(deadline, now).await;
        }
        let over: Vec<((String, String), u64)> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.expired(now))
            .map(|(key, s)| (key.clone(), s.session_id))
            .collect();
        let mut changed = Vec::new();
        for ((group, member_id), session_id) in over {
            let Ok(groups) = self.groups() else {
                break;
            };
            let expired = Self::within(deadline, async {
                Ok(groups.expire(&group, &member_id, session_id).await?)
            })
            .await;
            match expired {
                Ok(ended) => {
                    self.sessions.remove(&(group.clone(), member_id.clone()));
                    if ended {
                        tracing::info!(%group, member = %member_id, "member's session expired");
                        self.forget(Some(&group));
                        changed.push(group);
                    }
                }
                Err(error) => {
                    tracing::warn!(%group, member = %member_id, error = %error.message, "expiring a member's session; retried at the next sweep");
                    break;
                }
            }
        }
        changed.sort();
        changed.dedup();
        changed
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
                view: None,
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
        Ok(self.current(group, topics, brokers).await?.clone())
    }

    /// The group's current view, by reference: computed once per change of
    /// its members, topics or brokers, not once per heartbeat (10,000
    /// members heartbeating were 10,000 views of 10,000 members a second).
    async fn current(
        &mut self,
        group: &str,
        topics: &BTreeMap<String, TopicRecord>,
        brokers: &[BrokerRecord],
    ) -> Result<&GroupView, ControlError> {
        let fresh = self
            .members
            .get(group)
            .is_some_and(|m| m.read_at.elapsed() < self.members_fresh_for);
        if !fresh {
            self.read_members(group).await?;
        }
        let Some(cached) = self.members.get_mut(group) else {
            return Err(ControlError::new(
                ErrorCode::Internal,
                "a group's members vanished from the cache",
            ));
        };
        let key = Self::surroundings(cached.view.as_ref().map(|(_, v)| v), topics, brokers);
        let stale = match (&cached.view, key) {
            (Some((had, _)), Some(key)) => *had != key,
            _ => true,
        };
        if stale {
            let view = Self::view_of(cached.members.clone(), cached.revision, topics, brokers);
            let key = Self::surroundings(Some(&view), topics, brokers).unwrap_or_default();
            cached.view = Some((key, view));
        }
        match &cached.view {
            Some((_, view)) => Ok(view),
            None => Err(ControlError::new(ErrorCode::Internal, "no view")),
        }
    }

    /// What a view depends on beside its members: the partition counts of
    /// its topics and the live brokers, hashed (`None`: no view yet).
    fn surroundings(
        view: Option<&GroupView>,
        topics: &BTreeMap<String, TopicRecord>,
        brokers: &[BrokerRecord],
    ) -> Option<u64> {
        let view = view?;
        let mut text = String::new();
        for topic in &view.topics {
            let partitions = topics.get(&topic.name).map_or(0, |t| t.partitions);
            text.push_str(&format!("{}:{partitions}\u{1}", topic.name));
        }
        for broker in brokers {
            text.push_str(&format!("{}\u{2}", broker.broker_id));
        }
        Some(protocol::types::fnv1a(text.as_bytes()))
    }

    /// The answer to a heartbeat that named `generation`: the whole view
    /// when it changed, else only its generation and revision (the member
    /// has the rest; 10,000 members' view is about 400 KB).
    fn answer_for(view: &GroupView, generation: u64, brief_ok: bool) -> GroupView {
        if brief_ok && view.generation == generation {
            GroupView {
                generation: view.generation,
                revision: view.revision,
                brief: true,
                ..GroupView::default()
            }
        } else {
            view.clone()
        }
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
            brief: false,
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
                brief_ok,
            } => {
                let view = Self::within(deadline, async {
                    let session_ms = self.keep_alive(&group, &member_id, session_id).await?;
                    let view = self.current(&group, topics, brokers).await?;
                    if view
                        .members
                        .binary_search_by(|m| m.member_id.as_str().cmp(&member_id))
                        .is_err()
                    {
                        // Its record is gone (it left through another
                        // broker, or this broker's lease was lost): so is
                        // the session.
                        self.sessions.remove(&(group.clone(), member_id.clone()));
                        return Err(GroupError::unknown_member(&group, &member_id).into());
                    }
                    Ok((session_ms, Self::answer_for(view, generation, brief_ok)))
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
                            brief_ok,
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
                self.room_for_a_session(&(group.clone(), String::new()))?;
                let joined = self
                    .groups()?
                    .join(&group, &member_name, topics, session_timeout_ms)
                    .await?;
                tracing::info!(%group, member = %joined.member_id, "member joined");
                self.sessions.insert(
                    (group.clone(), joined.member_id.clone()),
                    Session {
                        session_id: joined.session_id,
                        timeout: Duration::from_millis(u64::from(joined.session_timeout_ms)),
                        last: Instant::now(),
                    },
                );
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
                let left = self.groups()?.leave(&group, &member_id, session_id).await;
                let key = (group.clone(), member_id.clone());
                if self
                    .sessions
                    .get(&key)
                    .is_some_and(|s| s.session_id == session_id)
                {
                    self.sessions.remove(&key);
                }
                left?;
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
        let expired = self.sweep().await;
        let now = Instant::now();
        let mut due: Vec<String> = self
            .parked
            .iter()
            .filter(|p| {
                p.deadline <= now
                    || expired.contains(&p.group)
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
                    Ok(view) => Ok(GroupAnswer::View(Self::answer_for(
                        view,
                        parked.generation,
                        parked.brief_ok,
                    ))),
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
            brief_ok: true,
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

    /// When the last parked heartbeat runs out.
    fn parked_until(plane: &Plane) -> Instant {
        plane.parked.iter().map(|p| p.deadline).max().unwrap()
    }

    #[test]
    fn a_member_that_stops_heartbeating_is_expired_by_the_sweep_and_one_that_heartbeats_is_not() {
        run(async {
            let mut plane = plane();
            let a = join(&mut plane, "a", &["t"], 2_000).await;
            let b = join(&mut plane, "b", &["t"], 2_000).await;
            assert_eq!(plane.sessions(), 2);
            let first = view(&mut plane, &a).await;
            assert_eq!(first.members.len(), 2);
            // Only a heartbeats; the sweep (due at least every 100 ms, as
            // next_deadline says) expires b once its 2 s are up.
            let started = Instant::now();
            while started.elapsed() < Duration::from_millis(2_600) {
                let _ = view(&mut plane, &a).await;
                let due = plane.next_deadline().unwrap();
                assert!(due <= Instant::now() + Duration::from_millis(100));
                tokio::time::sleep(Duration::from_millis(50)).await;
                plane.wake(Wake::Expired, &topics(4), &[]).await;
            }
            assert_eq!(plane.sessions(), 1);
            let now = view(&mut plane, &a).await;
            let ids: Vec<&str> = now.members.iter().map(|m| m.member_id.as_str()).collect();
            assert_eq!(ids, vec![a.member_id.as_str()]);
            // b's next heartbeat finds its session gone.
            assert_eq!(
                code(ask(&mut plane, heartbeat(&b, 0, 0), &topics(4)).await),
                ErrorCode::UnknownMember
            );
            // An unchanged view is answered with its generation only.
            match ask(&mut plane, heartbeat(&a, now.generation, 0), &topics(4)).await {
                Some(Ok(GroupAnswer::View(same))) => {
                    assert_eq!(same.generation, now.generation);
                    assert!(same.members.is_empty(), "{same:?}");
                }
                other => panic!("{other:?}"),
            }
        });
    }

    #[test]
    fn a_member_made_in_the_store_but_not_answered_is_timed_and_expired() {
        run(async {
            let mut plane = plane();
            // A join the store made, whose answer the plane gave up on (it
            // never recorded the session): found by the first sweep's
            // reconcile, then expired once its 2 s pass without a heartbeat.
            let ghost = plane
                .groups
                .as_mut()
                .unwrap()
                .join("g", "ghost", vec!["t".into()], 2_000)
                .await
                .unwrap();
            assert_eq!(plane.sessions(), 0);
            plane.wake(Wake::Expired, &topics(4), &[]).await;
            assert_eq!(plane.sessions(), 1, "reconciled");
            let started = Instant::now();
            while plane.sessions() > 0 {
                assert!(started.elapsed() < Duration::from_secs(5), "never expired");
                tokio::time::sleep(Duration::from_millis(50)).await;
                plane.wake(Wake::Expired, &topics(4), &[]).await;
            }
            assert!(started.elapsed() >= Duration::from_millis(1_900));
            let (members, _) = plane.groups.as_mut().unwrap().members("g").await.unwrap();
            assert!(members.is_empty(), "{members:?}");
            assert_eq!(
                code(ask(&mut plane, heartbeat(&ghost, 0, 0), &topics(4)).await),
                ErrorCode::UnknownMember
            );
        });
    }

    #[test]
    fn past_the_most_sessions_a_broker_keeps_a_join_is_refused_and_harms_nothing() {
        run(async {
            let mut plane = plane();
            let max = crate::limits::GROUP_SESSIONS_MAX;
            for i in 0..max {
                let request = GroupRequest::Join {
                    group: format!("g{}", i % 100),
                    member_name: "m".into(),
                    topics: vec!["t".into()],
                    session_timeout_ms: 60_000,
                };
                match ask(&mut plane, request, &topics(4)).await {
                    Some(Ok(GroupAnswer::Joined(_))) => {}
                    other => panic!("join {i}: {other:?}"),
                }
            }
            assert_eq!(plane.sessions(), max);
            let one_more = GroupRequest::Join {
                group: "g0".into(),
                member_name: "m".into(),
                topics: vec!["t".into()],
                session_timeout_ms: 60_000,
            };
            match ask(&mut plane, one_more, &topics(4)).await {
                Some(Err(error)) => {
                    assert_eq!(error.code, ErrorCode::Overloaded);
                    assert!(
                        error.message.contains("join through another broker"),
                        "{}",
                        error.message
                    );
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(plane.sessions(), max);
        });
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
            let wait = parked_until(&plane) - Instant::now();
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
            let wait = parked_until(&plane_b) - Instant::now();
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
