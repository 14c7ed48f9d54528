//! Consumer group requests: JoinGroup, Heartbeat, ClaimPartitions,
//! ReleasePartitions, CommitOffsets, LeaveGroup, DescribeGroup, ListGroups.
//!
//! Any shard of any broker serves them. The handler checks what it can
//! alone (names, bounds, that claimed partitions exist), then hands the
//! request to the control thread, which owns the etcd client
//! ([`crate::control::groups`]), and awaits the answer on a channel: a
//! shard never waits on etcd.

use super::{invalid_header, Dispatched, Failure, Payload, Response};
use crate::limits::{
    GROUP_HEARTBEAT_WAIT_MS_MAX, GROUP_ITEMS_MAX, GROUP_SESSION_TIMEOUT_MS_MAX,
    GROUP_SESSION_TIMEOUT_MS_MIN,
};
use crate::mailbox::ControlMsg;
use crate::mailbox::{GroupAnswer, GroupRequest};
use crate::shard::Shard;
use protocol::codec::groups::{self as codec, OffsetCommit};
use protocol::codec::verify;
use protocol::frame::Api;
use protocol::types::validate_topic_name;
use protocol::{wire, ErrorCode};
use std::rc::Rc;

/// What a standalone broker answers every group request.
pub const CLUSTER_REQUIRED: &str =
    "consumer groups need a cluster: this broker runs standalone; start the brokers with --etcd";

fn group_name(api: Api, name: Option<&str>) -> Result<String, Failure> {
    let name = name.unwrap_or_default();
    validate_topic_name(name).map_err(|e| {
        Failure::new(
            ErrorCode::InvalidRequest,
            format!("{api:?}: group names follow the topic naming rule: {e}"),
        )
    })?;
    Ok(name.to_string())
}

fn bounded<T>(api: Api, what: &str, items: Vec<T>) -> Result<Vec<T>, Failure> {
    if items.len() > GROUP_ITEMS_MAX {
        return Err(Failure::new(
            ErrorCode::InvalidRequest,
            format!(
                "{api:?}: {} {what}, the limit is {GROUP_ITEMS_MAX}",
                items.len()
            ),
        ));
    }
    Ok(items)
}

fn member_id(api: Api, id: Option<&str>) -> Result<String, Failure> {
    match id {
        Some(id) if !id.is_empty() => Ok(id.to_string()),
        _ => Err(Failure::new(
            ErrorCode::InvalidRequest,
            format!("{api:?}: member_id is required"),
        )),
    }
}

/// A member's session, required where it fences the request (a client
/// from before `session_id` was added to ReleasePartitions and
/// CommitOffsets sends none).
fn session_id(api: Api, id: u64) -> Result<u64, Failure> {
    if id == 0 {
        return Err(Failure::new(
            ErrorCode::InvalidRequest,
            format!(
                "{api:?}: session_id is required (the JoinGroup answer's; added within version 1)"
            ),
        ));
    }
    Ok(id)
}

/// Refuses a request naming one partition twice: etcd refuses the
/// transaction ("duplicate key"), and the request must not look as if it
/// could pass.
fn distinct<'a>(
    api: Api,
    partitions: impl IntoIterator<Item = (&'a str, u32)>,
) -> Result<(), Failure> {
    let mut seen = std::collections::BTreeSet::new();
    for (topic, partition) in partitions {
        if !seen.insert((topic, partition)) {
            return Err(Failure::new(
                ErrorCode::InvalidRequest,
                format!("{api:?}: partition {partition} of {topic:?} is named twice"),
            ));
        }
    }
    Ok(())
}

/// Checks that `partitions` of `topic` exist (as this shard knows topics).
fn check_partitions(shard: &Shard, topic: &str, partitions: &[u32]) -> Result<(), Failure> {
    let Some(known) = shard.topic(topic) else {
        return Err(Failure::new(
            ErrorCode::UnknownTopic,
            format!("unknown topic {topic:?}"),
        ));
    };
    let count = known.borrow().partitions;
    if let Some(p) = partitions.iter().find(|&&p| p >= count) {
        return Err(Failure::new(
            ErrorCode::UnknownPartition,
            format!("topic {topic:?} has partitions 0..{count}, not {p}"),
        ));
    }
    Ok(())
}

/// Decodes and checks a group request.
#[expect(
    clippy::too_many_lines,
    reason = "one decode per group api, side by side"
)]
fn decode(shard: &Shard, api: Api, header: &[u8]) -> Result<GroupRequest, Failure> {
    let bad = |e| invalid_header(api, e);
    Ok(match api {
        Api::JoinGroup => {
            let r = verify::<wire::JoinGroupRequest>(header).map_err(bad)?;
            let topics: Vec<String> = r
                .topics()
                .map(|ts| ts.iter().map(String::from).collect())
                .unwrap_or_default();
            let topics = bounded(api, "topics", topics)?;
            if topics.is_empty() {
                return Err(Failure::new(
                    ErrorCode::InvalidRequest,
                    "JoinGroup: a member must subscribe to at least one topic",
                ));
            }
            for topic in &topics {
                validate_topic_name(topic)
                    .map_err(|e| Failure::new(ErrorCode::InvalidTopicName, e.to_string()))?;
            }
            GroupRequest::Join {
                group: group_name(api, r.group())?,
                member_name: r.member_name().unwrap_or_default().to_string(),
                topics,
                session_timeout_ms: r
                    .session_timeout_ms()
                    .clamp(GROUP_SESSION_TIMEOUT_MS_MIN, GROUP_SESSION_TIMEOUT_MS_MAX),
            }
        }
        Api::Heartbeat => {
            let r = verify::<wire::HeartbeatRequest>(header).map_err(bad)?;
            GroupRequest::Heartbeat {
                group: group_name(api, r.group())?,
                member_id: member_id(api, r.member_id())?,
                session_id: r.session_id(),
                generation: r.generation(),
                max_wait_ms: r.max_wait_ms().min(GROUP_HEARTBEAT_WAIT_MS_MAX),
                brief_ok: r.brief_ok(),
            }
        }
        Api::ClaimPartitions => {
            let r = verify::<wire::ClaimPartitionsRequest>(header).map_err(bad)?;
            let topic = r.topic().unwrap_or_default().to_string();
            let partitions = bounded(
                api,
                "partitions",
                r.partitions()
                    .map(|p| p.iter().collect())
                    .unwrap_or_default(),
            )?;
            check_partitions(shard, &topic, &partitions)?;
            distinct(api, partitions.iter().map(|p| (topic.as_str(), *p)))?;
            GroupRequest::Claim {
                group: group_name(api, r.group())?,
                member_id: member_id(api, r.member_id())?,
                session_id: r.session_id(),
                revision: r.revision(),
                topic,
                partitions,
            }
        }
        Api::ReleasePartitions => {
            let r = verify::<wire::ReleasePartitionsRequest>(header).map_err(bad)?;
            let topic = r.topic().unwrap_or_default().to_string();
            validate_topic_name(&topic)
                .map_err(|e| Failure::new(ErrorCode::InvalidTopicName, e.to_string()))?;
            // A partition named twice is released once (etcd would refuse
            // a transaction that deletes one key twice).
            let mut partitions = bounded(
                api,
                "partitions",
                r.partitions()
                    .map(|p| p.iter().collect())
                    .unwrap_or_default(),
            )?;
            partitions.sort_unstable();
            partitions.dedup();
            GroupRequest::Release {
                group: group_name(api, r.group())?,
                member_id: member_id(api, r.member_id())?,
                session_id: session_id(api, r.session_id())?,
                topic,
                partitions,
            }
        }
        Api::CommitOffsets => {
            let r = verify::<wire::CommitOffsetsRequest>(header).map_err(bad)?;
            let offsets: Vec<OffsetCommit> = r
                .offsets()
                .map(|os| {
                    os.iter()
                        .map(|o| OffsetCommit {
                            topic: o.topic().unwrap_or_default().to_string(),
                            partition: o.partition(),
                            offset: o.offset(),
                            leader_epoch: o.leader_epoch().max(-1),
                        })
                        .collect()
                })
                .unwrap_or_default();
            let offsets = bounded(api, "offsets", offsets)?;
            for offset in &offsets {
                check_partitions(shard, &offset.topic, &[offset.partition])?;
            }
            distinct(api, offsets.iter().map(|o| (o.topic.as_str(), o.partition)))?;
            let member_id = r.member_id().unwrap_or_default().to_string();
            // A member's commit carries its session; a reset (no member)
            // carries none.
            let session_id = if member_id.is_empty() {
                0
            } else {
                session_id(api, r.session_id())?
            };
            GroupRequest::Commit {
                group: group_name(api, r.group())?,
                member_id,
                session_id,
                offsets,
            }
        }
        Api::LeaveGroup => {
            let r = verify::<wire::LeaveGroupRequest>(header).map_err(bad)?;
            GroupRequest::Leave {
                group: group_name(api, r.group())?,
                member_id: member_id(api, r.member_id())?,
                session_id: r.session_id(),
            }
        }
        Api::DescribeGroup => {
            let r = verify::<wire::DescribeGroupRequest>(header).map_err(bad)?;
            GroupRequest::Describe {
                group: group_name(api, r.group())?,
            }
        }
        Api::ListGroups => {
            verify::<wire::ListGroupsRequest>(header).map_err(bad)?;
            GroupRequest::List
        }
        other => {
            return Err(Failure::new(
                ErrorCode::Internal,
                format!("{other:?} is not a group request"),
            ))
        }
    })
}

/// Counts a group request's outcome in the shard's group metrics.
fn count(shard: &Shard, api: Api, outcome: Result<&GroupAnswer, ErrorCode>) {
    let c = &shard.metrics.counters;
    let counter = match (api, outcome) {
        (_, Err(ErrorCode::UnknownMember)) => &c.group_members_lost_total,
        (Api::ClaimPartitions, Err(ErrorCode::ClaimConflict)) => &c.group_claim_conflicts_total,
        (_, Err(_)) => return,
        (Api::JoinGroup, Ok(_)) => &c.group_joins_total,
        (Api::Heartbeat, Ok(_)) => &c.group_heartbeats_total,
        (Api::ClaimPartitions, Ok(_)) => &c.group_claims_total,
        (Api::CommitOffsets, Ok(_)) => &c.group_commits_total,
        (Api::LeaveGroup, Ok(_)) => &c.group_leaves_total,
        _ => return,
    };
    crate::metrics::bump(counter, 1);
}

/// What of a group's description `principal` may see: only the topics it
/// may describe, in the subscriptions, the members' topic lists and the
/// partitions with their owners and committed offsets. Describe on the
/// group shows the group, not the topics of others (Kafka's OffsetFetch
/// answers such partitions TOPIC_AUTHORIZATION_FAILED).
fn describable_part(
    shard: &Shard,
    principal: &str,
    mut description: codec::GroupDescription,
) -> codec::GroupDescription {
    let may = |topic: &str| {
        crate::auth::authorize::may_describe(
            shard,
            principal,
            protocol::acl::ResourceType::Topic,
            topic,
        )
    };
    description.view.topics.retain(|t| may(&t.name));
    for member in &mut description.view.members {
        member.topics.retain(|t| may(t));
    }
    description.partitions.retain(|p| may(&p.topic));
    description
}

/// Handles a consumer group request of `principal` (ListGroups lists only
/// the groups it may describe, with authorization on).
#[expect(clippy::too_many_lines, reason = "one match over the group apis")]
pub fn handle(
    shard: &Rc<Shard>,
    api: Api,
    header: &[u8],
    principal: &str,
) -> Result<Dispatched, Failure> {
    // One order for all eight: a standalone broker says groups need a
    // cluster before it looks at the request (issue 24, item 16).
    // Kafka groups (`kafka/group/`) are described and listed standalone too.
    let kafka_groups_too = matches!(api, Api::DescribeGroup | Api::ListGroups);
    if !shard.config.clustered() && !kafka_groups_too {
        return Err(Failure::new(ErrorCode::ClusterRequired, CLUSTER_REQUIRED));
    }
    let request = decode(shard, api, header)?;
    // What the response names: the topic of a claim or release, the group
    // of a leave.
    let named = match &request {
        GroupRequest::Claim { topic, .. } | GroupRequest::Release { topic, .. } => topic.clone(),
        GroupRequest::Leave { group, .. } => group.clone(),
        _ => String::new(),
    };
    let (reply, answer) = flume::bounded(1);
    let shard = shard.clone();
    let principal = principal.to_string();
    Ok(Dispatched::Later(Box::pin(async move {
        let stopping = || Failure::new(ErrorCode::ShuttingDown, "the broker is stopping");
        let answer = if shard
            .control
            .send_async(ControlMsg::Group { request, reply })
            .await
            .is_err()
        {
            Err(stopping())
        } else {
            match answer.recv_async().await {
                Ok(Ok(answer)) => Ok(answer),
                Ok(Err(error)) => Err(Failure::new(error.code, error.message)),
                Err(_) => Err(stopping()),
            }
        };
        count(&shard, api, answer.as_ref().map_err(|f| f.code));
        let answer = match answer {
            Ok(answer) => answer,
            Err(failure) => {
                crate::metrics::bump(&shard.metrics.counters.request_errors_total, 1);
                return Some(failure.response(api as u16));
            }
        };
        let header = super::with_builder(&shard, |fbb| {
            match answer {
                GroupAnswer::Joined(joined) => codec::join_group_response(fbb, &joined),
                GroupAnswer::View(view) => codec::heartbeat_response(fbb, &view),
                GroupAnswer::Done => match api {
                    Api::LeaveGroup => codec::leave_group_response(fbb, &named),
                    Api::ReleasePartitions => codec::release_partitions_response(fbb, &named),
                    _ => codec::claim_partitions_response(fbb, &named),
                },
                GroupAnswer::Committed(count) => codec::commit_offsets_response(fbb, count),
                GroupAnswer::Described(description) => codec::describe_group_response(
                    fbb,
                    &describable_part(&shard, &principal, description),
                ),
                GroupAnswer::Groups(mut groups) => {
                    groups.retain(|g| {
                        crate::auth::authorize::may_describe(
                            &shard,
                            &principal,
                            protocol::acl::ResourceType::Group,
                            g,
                        )
                    });
                    codec::list_groups_response(fbb, &groups)
                }
            }
            .to_vec()
        });
        Some(Response {
            api: api as u16,
            error: 0,
            header,
            payload: Payload::None,
        })
    })))
}
