//! Consumer group headers (apis 7 to 14): owned forms, builders, decoders.
//!
//! The broker reads requests straight from the verified flatbuffers; these
//! owned forms are what clients get back, and what the broker builds
//! responses from.

use super::{finish, verify};
use crate::generated::ringlog::wire;
use crate::types::{fnv1a, BrokerId, PartitionId};
use flatbuffers::{FlatBufferBuilder, WIPOffset};

/// A member of a group and the topics it consumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMemberInfo {
    /// The member's id (unique in the cluster).
    pub member_id: String,
    /// Its subscribed topics.
    pub topics: Vec<String>,
}

/// A subscribed topic and its partition count (0: no such topic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupTopicInfo {
    /// The topic.
    pub name: String,
    /// Its partitions.
    pub partitions: u32,
}

/// What a member needs to compute its assignment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupView {
    /// Equal views have equal generations ([`GroupView::fingerprint`]).
    pub generation: u64,
    /// A registry revision at which the members were read: a claim that
    /// carries it passes only while no member has joined (or re-joined)
    /// since.
    pub revision: u64,
    /// Members sorted by id.
    pub members: Vec<GroupMemberInfo>,
    /// The subscribed topics sorted by name.
    pub topics: Vec<GroupTopicInfo>,
    /// The live brokers' ids, sorted (for a member's information: not
    /// part of the generation).
    pub brokers: Vec<BrokerId>,
    /// Only `generation` and `revision` were sent: the generation the
    /// heartbeat named is current (it allowed a brief answer).
    pub brief: bool,
}

impl GroupView {
    /// The generation of a view: FNV-1a over its members (with their
    /// topics) and topics (with their partition counts), so every broker
    /// gives the same view the same number. `generation`, `revision` and
    /// the live brokers are not part of it: the assignment depends on
    /// neither, and a broker's death is an outage of its partitions that a
    /// member rides out by keeping them (issue 24, item 8), not a reason
    /// for every member of every group to rebalance.
    pub fn fingerprint(&self) -> u64 {
        let mut text = String::new();
        for member in &self.members {
            text.push_str(&member.member_id);
            for topic in &member.topics {
                text.push('\u{1}');
                text.push_str(topic);
            }
            text.push('\u{2}');
        }
        text.push('\u{3}');
        for topic in &self.topics {
            text.push_str(&format!("{}:{}\u{2}", topic.name, topic.partitions));
        }
        fnv1a(text.as_bytes())
    }

    /// The partitions of each topic that `member_id` owns in this view: for
    /// every topic it consumes, the paper's range assignment over the
    /// members that consume that topic. Topics without partitions are left
    /// out.
    pub fn assignment(&self, member_id: &str) -> Vec<(String, Vec<PartitionId>)> {
        let Some(me) = self.members.iter().find(|m| m.member_id == member_id) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for topic in &me.topics {
            let partitions = self
                .topics
                .iter()
                .find(|t| &t.name == topic)
                .map_or(0, |t| t.partitions);
            if partitions == 0 {
                continue;
            }
            let consumers: Vec<&str> = self
                .members
                .iter()
                .filter(|m| m.topics.contains(topic))
                .map(|m| m.member_id.as_str())
                .collect();
            let all: Vec<PartitionId> = (0..partitions).collect();
            out.push((
                topic.clone(),
                crate::rebalance::assign(&all, &consumers, member_id),
            ));
        }
        out
    }
}

/// A JoinGroup answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    /// The member's id.
    pub member_id: String,
    /// Its session.
    pub session_id: u64,
    /// The session timeout the broker applied.
    pub session_timeout_ms: u32,
}

/// A partition of a group: its owner and committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPartitionInfo {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: PartitionId,
    /// The member that owns it; empty when none does.
    pub owner: String,
    /// The committed offset, if any.
    pub offset: Option<u64>,
    /// The leader epoch committed with it (-1: none).
    pub leader_epoch: i32,
}

/// A DescribeGroup answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupDescription {
    /// The group's view.
    pub view: GroupView,
    /// Every partition with an owner or a committed offset, sorted.
    pub partitions: Vec<GroupPartitionInfo>,
}

/// One offset to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommit {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: PartitionId,
    /// The offset of the next message to consume.
    pub offset: u64,
    /// The leader epoch of the last message consumed before `offset`
    /// (-1: unknown): a member resuming here learns from the leader
    /// whether the log was cut under it (KIP-320).
    pub leader_epoch: i32,
}

fn strings<'b>(
    fbb: &mut FlatBufferBuilder<'b>,
    items: &[impl AsRef<str>],
) -> WIPOffset<flatbuffers::Vector<'b, flatbuffers::ForwardsUOffset<&'b str>>> {
    let offsets: Vec<_> = items
        .iter()
        .map(|s| fbb.create_string(s.as_ref()))
        .collect();
    fbb.create_vector(&offsets)
}

fn encode_view<'b>(
    fbb: &mut FlatBufferBuilder<'b>,
    view: &GroupView,
) -> WIPOffset<wire::GroupView<'b>> {
    let members: Vec<_> = view
        .members
        .iter()
        .map(|m| {
            let member_id = fbb.create_string(&m.member_id);
            let topics = strings(fbb, &m.topics);
            wire::GroupMember::create(
                fbb,
                &wire::GroupMemberArgs {
                    member_id: Some(member_id),
                    topics: Some(topics),
                },
            )
        })
        .collect();
    let members = fbb.create_vector(&members);
    let topics: Vec<_> = view
        .topics
        .iter()
        .map(|t| {
            let name = fbb.create_string(&t.name);
            wire::GroupTopic::create(
                fbb,
                &wire::GroupTopicArgs {
                    name: Some(name),
                    partitions: t.partitions,
                },
            )
        })
        .collect();
    let topics = fbb.create_vector(&topics);
    let brokers = fbb.create_vector(&view.brokers);
    wire::GroupView::create(
        fbb,
        &wire::GroupViewArgs {
            generation: view.generation,
            revision: view.revision,
            members: Some(members),
            topics: Some(topics),
            brokers: Some(brokers),
            brief: view.brief,
        },
    )
}

/// Reads a decoded GroupView (absent = empty).
pub fn decode_view(view: Option<wire::GroupView<'_>>) -> GroupView {
    let Some(view) = view else {
        return GroupView::default();
    };
    GroupView {
        generation: view.generation(),
        revision: view.revision(),
        members: view
            .members()
            .map(|ms| {
                ms.iter()
                    .map(|m| GroupMemberInfo {
                        member_id: m.member_id().unwrap_or_default().to_string(),
                        topics: m
                            .topics()
                            .map(|ts| ts.iter().map(String::from).collect())
                            .unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        topics: view
            .topics()
            .map(|ts| {
                ts.iter()
                    .map(|t| GroupTopicInfo {
                        name: t.name().unwrap_or_default().to_string(),
                        partitions: t.partitions(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        brokers: view
            .brokers()
            .map(|b| b.iter().collect())
            .unwrap_or_default(),
        brief: view.brief(),
    }
}

/// JoinGroup request header.
pub fn join_group_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    group: &str,
    member_name: &str,
    topics: &[impl AsRef<str>],
    session_timeout_ms: u32,
) -> &'b [u8] {
    fbb.reset();
    let group = fbb.create_string(group);
    let member_name = fbb.create_string(member_name);
    let topics = strings(fbb, topics);
    let root = wire::JoinGroupRequest::create(
        fbb,
        &wire::JoinGroupRequestArgs {
            group: Some(group),
            member_name: Some(member_name),
            topics: Some(topics),
            session_timeout_ms,
        },
    );
    finish(fbb, root)
}

/// JoinGroup response header.
pub fn join_group_response<'b>(fbb: &'b mut FlatBufferBuilder<'_>, joined: &Joined) -> &'b [u8] {
    fbb.reset();
    let member_id = fbb.create_string(&joined.member_id);
    let root = wire::JoinGroupResponse::create(
        fbb,
        &wire::JoinGroupResponseArgs {
            member_id: Some(member_id),
            session_id: joined.session_id,
            session_timeout_ms: joined.session_timeout_ms,
        },
    );
    finish(fbb, root)
}

/// Reads a JoinGroup response.
pub fn decode_joined(header: &[u8]) -> Result<Joined, flatbuffers::InvalidFlatbuffer> {
    let response = verify::<wire::JoinGroupResponse>(header)?;
    Ok(Joined {
        member_id: response.member_id().unwrap_or_default().to_string(),
        session_id: response.session_id(),
        session_timeout_ms: response.session_timeout_ms(),
    })
}

/// Heartbeat request header.
pub fn heartbeat_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    group: &str,
    member_id: &str,
    session_id: u64,
    generation: u64,
    max_wait_ms: u32,
) -> &'b [u8] {
    heartbeat_request_brief(
        fbb,
        group,
        member_id,
        session_id,
        generation,
        max_wait_ms,
        false,
    )
}

/// Heartbeat request header that allows (`brief_ok`) an unchanged view to
/// be answered with its generation and revision only.
pub fn heartbeat_request_brief<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    group: &str,
    member_id: &str,
    session_id: u64,
    generation: u64,
    max_wait_ms: u32,
    brief_ok: bool,
) -> &'b [u8] {
    fbb.reset();
    let group = fbb.create_string(group);
    let member_id = fbb.create_string(member_id);
    let root = wire::HeartbeatRequest::create(
        fbb,
        &wire::HeartbeatRequestArgs {
            group: Some(group),
            member_id: Some(member_id),
            session_id,
            generation,
            max_wait_ms,
            brief_ok,
        },
    );
    finish(fbb, root)
}

/// Heartbeat response header.
pub fn heartbeat_response<'b>(fbb: &'b mut FlatBufferBuilder<'_>, view: &GroupView) -> &'b [u8] {
    fbb.reset();
    let view = encode_view(fbb, view);
    let root =
        wire::HeartbeatResponse::create(fbb, &wire::HeartbeatResponseArgs { view: Some(view) });
    finish(fbb, root)
}

/// Reads a Heartbeat response.
pub fn decode_heartbeat(header: &[u8]) -> Result<GroupView, flatbuffers::InvalidFlatbuffer> {
    Ok(decode_view(
        verify::<wire::HeartbeatResponse>(header)?.view(),
    ))
}

/// ClaimPartitions request header.
pub fn claim_partitions_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    group: &str,
    member_id: &str,
    session_id: u64,
    revision: u64,
    topic: &str,
    partitions: &[PartitionId],
) -> &'b [u8] {
    fbb.reset();
    let group = fbb.create_string(group);
    let member_id = fbb.create_string(member_id);
    let topic = fbb.create_string(topic);
    let partitions = fbb.create_vector(partitions);
    let root = wire::ClaimPartitionsRequest::create(
        fbb,
        &wire::ClaimPartitionsRequestArgs {
            group: Some(group),
            member_id: Some(member_id),
            session_id,
            revision,
            topic: Some(topic),
            partitions: Some(partitions),
        },
    );
    finish(fbb, root)
}

/// ClaimPartitions response header.
pub fn claim_partitions_response<'b>(fbb: &'b mut FlatBufferBuilder<'_>, topic: &str) -> &'b [u8] {
    fbb.reset();
    let topic = fbb.create_string(topic);
    let root = wire::ClaimPartitionsResponse::create(
        fbb,
        &wire::ClaimPartitionsResponseArgs { topic: Some(topic) },
    );
    finish(fbb, root)
}

/// ReleasePartitions request header.
pub fn release_partitions_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    group: &str,
    member_id: &str,
    session_id: u64,
    topic: &str,
    partitions: &[PartitionId],
) -> &'b [u8] {
    fbb.reset();
    let group = fbb.create_string(group);
    let member_id = fbb.create_string(member_id);
    let topic = fbb.create_string(topic);
    let partitions = fbb.create_vector(partitions);
    let root = wire::ReleasePartitionsRequest::create(
        fbb,
        &wire::ReleasePartitionsRequestArgs {
            group: Some(group),
            member_id: Some(member_id),
            topic: Some(topic),
            partitions: Some(partitions),
            session_id,
        },
    );
    finish(fbb, root)
}

/// ReleasePartitions response header.
pub fn release_partitions_response<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    topic: &str,
) -> &'b [u8] {
    fbb.reset();
    let topic = fbb.create_string(topic);
    let root = wire::ReleasePartitionsResponse::create(
        fbb,
        &wire::ReleasePartitionsResponseArgs { topic: Some(topic) },
    );
    finish(fbb, root)
}

/// CommitOffsets request header (an empty `member_id`, session 0, resets
/// an empty group).
pub fn commit_offsets_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    group: &str,
    member_id: &str,
    session_id: u64,
    offsets: &[OffsetCommit],
) -> &'b [u8] {
    fbb.reset();
    let group = fbb.create_string(group);
    let member_id = fbb.create_string(member_id);
    let items: Vec<_> = offsets
        .iter()
        .map(|o| {
            let topic = fbb.create_string(&o.topic);
            wire::PartitionOffset::create(
                fbb,
                &wire::PartitionOffsetArgs {
                    topic: Some(topic),
                    partition: o.partition,
                    offset: o.offset,
                    leader_epoch: o.leader_epoch,
                },
            )
        })
        .collect();
    let offsets = fbb.create_vector(&items);
    let root = wire::CommitOffsetsRequest::create(
        fbb,
        &wire::CommitOffsetsRequestArgs {
            group: Some(group),
            member_id: Some(member_id),
            offsets: Some(offsets),
            session_id,
        },
    );
    finish(fbb, root)
}

/// CommitOffsets response header.
pub fn commit_offsets_response<'b>(fbb: &'b mut FlatBufferBuilder<'_>, committed: u32) -> &'b [u8] {
    fbb.reset();
    let root =
        wire::CommitOffsetsResponse::create(fbb, &wire::CommitOffsetsResponseArgs { committed });
    finish(fbb, root)
}

/// LeaveGroup request header.
pub fn leave_group_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    group: &str,
    member_id: &str,
    session_id: u64,
) -> &'b [u8] {
    fbb.reset();
    let group = fbb.create_string(group);
    let member_id = fbb.create_string(member_id);
    let root = wire::LeaveGroupRequest::create(
        fbb,
        &wire::LeaveGroupRequestArgs {
            group: Some(group),
            member_id: Some(member_id),
            session_id,
        },
    );
    finish(fbb, root)
}

/// LeaveGroup response header.
pub fn leave_group_response<'b>(fbb: &'b mut FlatBufferBuilder<'_>, group: &str) -> &'b [u8] {
    fbb.reset();
    let group = fbb.create_string(group);
    let root =
        wire::LeaveGroupResponse::create(fbb, &wire::LeaveGroupResponseArgs { group: Some(group) });
    finish(fbb, root)
}

/// DescribeGroup request header.
pub fn describe_group_request<'b>(fbb: &'b mut FlatBufferBuilder<'_>, group: &str) -> &'b [u8] {
    fbb.reset();
    let group = fbb.create_string(group);
    let root = wire::DescribeGroupRequest::create(
        fbb,
        &wire::DescribeGroupRequestArgs { group: Some(group) },
    );
    finish(fbb, root)
}

/// DescribeGroup response header.
pub fn describe_group_response<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    description: &GroupDescription,
) -> &'b [u8] {
    fbb.reset();
    let view = encode_view(fbb, &description.view);
    let partitions: Vec<_> = description
        .partitions
        .iter()
        .map(|p| {
            let topic = fbb.create_string(&p.topic);
            let owner = fbb.create_string(&p.owner);
            wire::GroupPartition::create(
                fbb,
                &wire::GroupPartitionArgs {
                    topic: Some(topic),
                    partition: p.partition,
                    owner: Some(owner),
                    offset: p.offset.unwrap_or(0),
                    committed: p.offset.is_some(),
                    leader_epoch: p.leader_epoch,
                },
            )
        })
        .collect();
    let partitions = fbb.create_vector(&partitions);
    let root = wire::DescribeGroupResponse::create(
        fbb,
        &wire::DescribeGroupResponseArgs {
            view: Some(view),
            partitions: Some(partitions),
        },
    );
    finish(fbb, root)
}

/// Reads a DescribeGroup response.
pub fn decode_description(
    header: &[u8],
) -> Result<GroupDescription, flatbuffers::InvalidFlatbuffer> {
    let response = verify::<wire::DescribeGroupResponse>(header)?;
    Ok(GroupDescription {
        view: decode_view(response.view()),
        partitions: response
            .partitions()
            .map(|ps| {
                ps.iter()
                    .map(|p| GroupPartitionInfo {
                        topic: p.topic().unwrap_or_default().to_string(),
                        partition: p.partition(),
                        owner: p.owner().unwrap_or_default().to_string(),
                        offset: p.committed().then(|| p.offset()),
                        leader_epoch: p.leader_epoch(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// ListGroups request header.
pub fn list_groups_request<'b>(fbb: &'b mut FlatBufferBuilder<'_>) -> &'b [u8] {
    fbb.reset();
    let root = wire::ListGroupsRequest::create(fbb, &wire::ListGroupsRequestArgs {});
    finish(fbb, root)
}

/// ListGroups response header.
pub fn list_groups_response<'b>(fbb: &'b mut FlatBufferBuilder<'_>, groups: &[String]) -> &'b [u8] {
    fbb.reset();
    let groups = strings(fbb, groups);
    let root = wire::ListGroupsResponse::create(
        fbb,
        &wire::ListGroupsResponseArgs {
            groups: Some(groups),
        },
    );
    finish(fbb, root)
}

/// Reads a ListGroups response.
pub fn decode_groups(header: &[u8]) -> Result<Vec<String>, flatbuffers::InvalidFlatbuffer> {
    Ok(verify::<wire::ListGroupsResponse>(header)?
        .groups()
        .map(|gs| gs.iter().map(String::from).collect())
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> GroupView {
        let mut view = GroupView {
            generation: 0,
            revision: 17,
            members: vec![
                GroupMemberInfo {
                    member_id: "a".into(),
                    topics: vec!["t".into(), "u".into()],
                },
                GroupMemberInfo {
                    member_id: "b".into(),
                    topics: vec!["t".into()],
                },
            ],
            topics: vec![
                GroupTopicInfo {
                    name: "t".into(),
                    partitions: 5,
                },
                GroupTopicInfo {
                    name: "u".into(),
                    partitions: 2,
                },
            ],
            brokers: vec![1, 2],
            brief: false,
        };
        view.generation = view.fingerprint();
        view
    }

    #[test]
    fn views_round_trip_and_assign_per_topic() {
        let view = view();
        let mut fbb = FlatBufferBuilder::new();
        let bytes = heartbeat_response(&mut fbb, &view).to_vec();
        assert_eq!(decode_heartbeat(&bytes).unwrap(), view);
        assert_eq!(
            view.assignment("a"),
            vec![
                ("t".to_string(), vec![0, 1, 2]),
                ("u".to_string(), vec![0, 1])
            ]
        );
        assert_eq!(view.assignment("b"), vec![("t".to_string(), vec![3, 4])]);
        assert_eq!(view.assignment("nobody"), vec![]);
    }

    #[test]
    fn the_generation_follows_every_part_of_the_view() {
        let base = view();
        let mut same = base.clone();
        same.brokers.pop();
        assert_eq!(same.fingerprint(), base.fingerprint(), "a broker's death");
        let mut changed = base.clone();
        changed.topics[1].partitions = 3;
        assert_ne!(changed.fingerprint(), base.fingerprint());
        let mut changed = base.clone();
        changed.members[1].topics.push("u".into());
        assert_ne!(changed.fingerprint(), base.fingerprint());
        let mut same = base.clone();
        same.revision = 99;
        assert_eq!(same.fingerprint(), base.fingerprint());
    }

    #[test]
    fn descriptions_and_group_lists_round_trip() {
        let description = GroupDescription {
            view: view(),
            partitions: vec![
                GroupPartitionInfo {
                    topic: "t".into(),
                    partition: 0,
                    owner: "a".into(),
                    offset: Some(418),
                    leader_epoch: 3,
                },
                GroupPartitionInfo {
                    topic: "t".into(),
                    partition: 3,
                    owner: String::new(),
                    offset: None,
                    leader_epoch: -1,
                },
            ],
        };
        let mut fbb = FlatBufferBuilder::new();
        let bytes = describe_group_response(&mut fbb, &description).to_vec();
        assert_eq!(decode_description(&bytes).unwrap(), description);
        let groups = vec!["g1".to_string(), "g2".to_string()];
        let bytes = list_groups_response(&mut fbb, &groups).to_vec();
        assert_eq!(decode_groups(&bytes).unwrap(), groups);
        let joined = Joined {
            member_id: "host-1f".into(),
            session_id: 31,
            session_timeout_ms: 6000,
        };
        let bytes = join_group_response(&mut fbb, &joined).to_vec();
        assert_eq!(decode_joined(&bytes).unwrap(), joined);
    }
}
