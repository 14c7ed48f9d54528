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
use protocol::codec::groups::{GroupDescription, GroupTopicInfo, GroupView};
use protocol::ErrorCode;
use std::collections::BTreeMap;
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

/// The control thread's group state: the registries and parked heartbeats.
pub struct GroupPlane {
    groups: Option<Groups>,
    parked: Vec<Parked>,
}

impl GroupPlane {
    /// Groups over `groups` (`None`: a standalone broker, which answers
    /// CLUSTER_REQUIRED).
    pub fn new(groups: Option<Groups>) -> GroupPlane {
        GroupPlane {
            groups,
            parked: Vec::new(),
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

    /// The group's current view.
    async fn view(
        &mut self,
        group: &str,
        topics: &BTreeMap<String, TopicRecord>,
        brokers: &[BrokerRecord],
    ) -> Result<GroupView, ControlError> {
        let (members, revision) = self.groups()?.members(group).await?;
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
