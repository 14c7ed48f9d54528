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
use coordinator::groups::Groups;
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
pub struct GroupPlane {
    groups: Option<Groups>,
    parked: Vec<Parked>,
    members: HashMap<String, Members>,
    members_fresh_for: Duration,
}

impl GroupPlane {
    /// Groups over `groups` (`None`: a standalone broker, which answers
    /// CLUSTER_REQUIRED), serving member lists up to `members_fresh_for`
    /// old.
    pub fn new(groups: Option<Groups>, members_fresh_for: Duration) -> GroupPlane {
        GroupPlane {
            groups,
            parked: Vec::new(),
            members: HashMap::new(),
            members_fresh_for,
        }
    }

    /// When the next parked heartbeat runs out.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.parked.iter().map(|p| p.deadline).min()
    }

    fn groups(&mut self) -> Result<&mut Groups, ControlError> {
        self.groups.as_mut().ok_or_else(|| {
            ControlError::new(
                ErrorCode::ClusterRequired,
                "consumer groups need a cluster: this broker runs standalone; start the brokers with --etcd",
            )
        })
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
        Ok(view)
    }

    /// Serves one request; a heartbeat may be parked instead of answered.
    pub async fn handle(
        &mut self,
        request: GroupRequest,
        reply: GroupReply,
        topics: &BTreeMap<String, TopicRecord>,
        brokers: &[BrokerRecord],
    ) {
        let answer = match request {
            GroupRequest::Heartbeat {
                group,
                member_id,
                session_id,
                generation,
                max_wait_ms,
            } => {
                let view = async {
                    self.groups()?
                        .heartbeat(&group, &member_id, session_id)
                        .await?;
                    self.view(&group, topics, brokers).await
                }
                .await;
                match view {
                    Ok(view)
                        if view.generation == generation
                            && max_wait_ms > 0
                            && self.parked.len() < crate::limits::GROUP_WAITERS_MAX =>
                    {
                        self.parked.push(Parked {
                            group,
                            generation,
                            deadline: Instant::now()
                                + Duration::from_millis(u64::from(max_wait_ms)),
                            reply,
                        });
                        return;
                    }
                    other => other.map(GroupAnswer::View),
                }
            }
            other => self.serve(other, topics, brokers).await,
        };
        let _ = reply.send_async(answer).await;
    }

    async fn serve(
        &mut self,
        request: GroupRequest,
        topics: &BTreeMap<String, TopicRecord>,
        brokers: &[BrokerRecord],
    ) -> Result<GroupAnswer, ControlError> {
        let groups = self.groups()?;
        Ok(match request {
            GroupRequest::Join {
                group,
                member_name,
                topics,
                session_timeout_ms,
            } => {
                let joined = groups
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
                groups
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
                topic,
                partitions,
            } => {
                groups
                    .release(&group, &member_id, &topic, &partitions)
                    .await?;
                GroupAnswer::Done
            }
            GroupRequest::Commit {
                group,
                member_id,
                offsets,
            } => GroupAnswer::Committed(if member_id.is_empty() {
                groups.reset(&group, &offsets).await?
            } else {
                groups.commit(&group, &member_id, &offsets).await?
            }),
            GroupRequest::Leave {
                group,
                member_id,
                session_id,
            } => {
                groups.leave(&group, &member_id, session_id).await?;
                tracing::info!(%group, member = %member_id, "member left");
                self.forget(Some(&group));
                GroupAnswer::Done
            }
            GroupRequest::Describe { group } => {
                let partitions = groups.partitions(&group).await?;
                let view = self.view(&group, topics, brokers).await?;
                GroupAnswer::Described(GroupDescription { view, partitions })
            }
            GroupRequest::List => GroupAnswer::Groups(groups.list().await?),
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
