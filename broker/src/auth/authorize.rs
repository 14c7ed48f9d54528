//! Authorization: which operation on which resource each api needs, and
//! the check of a connection's principal against the rules
//! ([`protocol::acl`]) before its request is served. PROTOCOL.md §7 holds
//! the same table for clients.
//!
//! | api | needs |
//! |---|---|
//! | Handshake, Authenticate | nothing (they log in) |
//! | Metadata | nothing; lists only the topics the principal may describe |
//! | CreateTopic | create on the cluster, or on the topic |
//! | DeleteTopic | delete on the topic |
//! | Produce | write on the topic; a mirror append: alter on the topic |
//! | Fetch, MultiFetch | read on each topic; a follower's (`replica_id` ≥ 0): alter on the cluster |
//! | ListOffsets | describe on the topic |
//! | JoinGroup | read on the group and on each topic it subscribes to |
//! | Heartbeat, LeaveGroup | read on the group |
//! | ClaimPartitions, ReleasePartitions, CommitOffsets | read on the group and on each topic named |
//! | DescribeGroup | describe on the group |
//! | ListGroups | nothing; lists only the groups the principal may describe |
//! | ElectLeaders, ReassignPartition | alter on the cluster |
//! | CreatePartitions, PromoteMirror | alter on the topic |
//! | InitProducerId | write on the topic it names |
//! | Digest | read on the topic |
//! | CreateAcls, DeleteAcls, AlterUsers | alter on the cluster |
//! | DescribeAcls, ListUsers | describe on the cluster |
//!
//! A follower's fetch needs the cluster's alter because it moves the
//! leader's high watermark and ISR: brokers are super users (or hold that
//! rule). A request whose header does not verify is let through to its
//! handler, which answers INVALID_REQUEST: it reads nothing.
//!
//! The check is a few hash lookups on the shard's cached rules, once per
//! request (not per message). A request forwarded between this broker's
//! shards was checked where it arrived.

use crate::reply::Failure;
use crate::shard::Shard;
use protocol::acl::{Decision, Operation, ResourceType, CLUSTER};
use protocol::codec::verify;
use protocol::frame::Api;
use protocol::{wire, ErrorCode};

/// Checks `principal`'s request; `Err` is its AUTHORIZATION_FAILED answer.
// Every api is matched by name: a new one must be placed here.
#[expect(
    clippy::too_many_lines,
    reason = "one exhaustive match: the right each api needs, side by side (PROTOCOL.md §7's table in code)"
)]
#[deny(clippy::wildcard_enum_match_arm)]
pub fn check(shard: &Shard, principal: &str, api: Api, header: &[u8]) -> Result<(), Failure> {
    shard.security.with(|snapshot| {
        let acls = &snapshot.acls;
        if acls.is_super_user(principal) {
            return Ok(());
        }
        let need = |resource: ResourceType, name: &str, operation: Operation| match acls
            .authorize(principal, resource, name, operation)
        {
            Decision::Allowed => Ok(()),
            decision @ (Decision::Denied | Decision::NoRule) => Err(denied(
                shard, principal, api, resource, name, operation, decision,
            )),
        };
        let topic = |name: &str, operation| need(ResourceType::Topic, name, operation);
        let group = |name: &str| need(ResourceType::Group, name, Operation::Read);
        let cluster = |operation| need(ResourceType::Cluster, CLUSTER, operation);
        macro_rules! decode {
            ($t:ty) => {
                match verify::<$t>(header) {
                    Ok(request) => request,
                    Err(_) => return Ok(()),
                }
            };
        }
        match api {
            Api::Handshake | Api::Authenticate | Api::Metadata | Api::ListGroups => Ok(()),
            Api::CreateTopic => {
                let request = decode!(wire::CreateTopicRequest);
                let name = request.name().unwrap_or_default();
                if acls.authorize(principal, ResourceType::Cluster, CLUSTER, Operation::Create)
                    == Decision::Allowed
                {
                    return Ok(());
                }
                topic(name, Operation::Create)
            }
            Api::DeleteTopic => {
                let request = decode!(wire::DeleteTopicRequest);
                topic(request.name().unwrap_or_default(), Operation::Delete)
            }
            Api::Produce => {
                let request = decode!(wire::ProduceRequest);
                let operation = if request.mirror_offset() >= 0 {
                    Operation::Alter
                } else {
                    Operation::Write
                };
                topic(request.topic().unwrap_or_default(), operation)
            }
            Api::Fetch => {
                let request = decode!(wire::FetchRequest);
                if request.replica_id() >= 0 {
                    return cluster(Operation::Alter);
                }
                topic(request.topic().unwrap_or_default(), Operation::Read)
            }
            Api::MultiFetch => {
                let request = decode!(wire::MultiFetchRequest);
                if request.replica_id() >= 0 {
                    return cluster(Operation::Alter);
                }
                for part in request.partitions().iter().flatten() {
                    topic(part.topic().unwrap_or_default(), Operation::Read)?;
                }
                Ok(())
            }
            Api::ListOffsets => {
                let request = decode!(wire::ListOffsetsRequest);
                topic(request.topic().unwrap_or_default(), Operation::Describe)
            }
            Api::JoinGroup => {
                let request = decode!(wire::JoinGroupRequest);
                group(request.group().unwrap_or_default())?;
                for name in request.topics().iter().flatten() {
                    topic(name, Operation::Read)?;
                }
                Ok(())
            }
            Api::Heartbeat => group(decode!(wire::HeartbeatRequest).group().unwrap_or_default()),
            Api::LeaveGroup => group(decode!(wire::LeaveGroupRequest).group().unwrap_or_default()),
            Api::ClaimPartitions => {
                let request = decode!(wire::ClaimPartitionsRequest);
                group(request.group().unwrap_or_default())?;
                topic(request.topic().unwrap_or_default(), Operation::Read)
            }
            Api::ReleasePartitions => {
                let request = decode!(wire::ReleasePartitionsRequest);
                group(request.group().unwrap_or_default())?;
                topic(request.topic().unwrap_or_default(), Operation::Read)
            }
            Api::CommitOffsets => {
                let request = decode!(wire::CommitOffsetsRequest);
                group(request.group().unwrap_or_default())?;
                for offset in request.offsets().iter().flatten() {
                    topic(offset.topic().unwrap_or_default(), Operation::Read)?;
                }
                Ok(())
            }
            Api::DescribeGroup => {
                let request = decode!(wire::DescribeGroupRequest);
                need(
                    ResourceType::Group,
                    request.group().unwrap_or_default(),
                    Operation::Describe,
                )
            }
            Api::ElectLeaders | Api::ReassignPartition => cluster(Operation::Alter),
            Api::CreatePartitions => {
                let request = decode!(wire::CreatePartitionsRequest);
                topic(request.topic().unwrap_or_default(), Operation::Alter)
            }
            Api::PromoteMirror => {
                let request = decode!(wire::PromoteMirrorRequest);
                topic(request.topic().unwrap_or_default(), Operation::Alter)
            }
            Api::MakeMirror => {
                let request = decode!(wire::MakeMirrorRequest);
                topic(request.topic().unwrap_or_default(), Operation::Alter)
            }
            Api::TruncateMirror => {
                let request = decode!(wire::TruncateMirrorRequest);
                topic(request.topic().unwrap_or_default(), Operation::Alter)
            }
            Api::AlterTopicConfig => {
                let request = decode!(wire::AlterTopicConfigRequest);
                topic(request.topic().unwrap_or_default(), Operation::Alter)
            }
            Api::Orphaned => {
                if decode!(wire::OrphanedRequest).purge() {
                    cluster(Operation::Alter)
                } else {
                    cluster(Operation::Describe)
                }
            }
            Api::InitProducerId => {
                let request = decode!(wire::InitProducerIdRequest);
                topic(request.topic().unwrap_or_default(), Operation::Write)
            }
            Api::Digest => {
                let request = decode!(wire::DigestRequest);
                topic(request.topic().unwrap_or_default(), Operation::Read)
            }
            Api::CreateAcls | Api::DeleteAcls | Api::AlterUsers | Api::AlterQuotas => {
                cluster(Operation::Alter)
            }
            Api::DescribeAcls | Api::ListUsers | Api::DescribeQuotas => {
                cluster(Operation::Describe)
            } // No `_` arm: a new api does not compile until its right is
              // placed here.
        }
    })
}

/// May `principal` describe this resource (Metadata's and ListGroups'
/// listings)? Always, where authorization is off.
pub fn may_describe(shard: &Shard, principal: &str, resource: ResourceType, name: &str) -> bool {
    if !shard.config.authorization {
        return true;
    }
    shard.security.with(|snapshot| {
        snapshot
            .acls
            .authorize(principal, resource, name, Operation::Describe)
            .allowed()
    })
}

/// May `principal` do `operation` on this resource (Kafka's listener,
/// which checks each partition of a request in its place)? Always where
/// authorization is off; a super user may do everything. A refusal is
/// counted.
pub fn may(
    shard: &Shard,
    principal: &str,
    resource: ResourceType,
    name: &str,
    operation: Operation,
) -> bool {
    if !shard.config.authorization {
        return true;
    }
    let allowed = shard.security.with(|snapshot| {
        snapshot.acls.is_super_user(principal)
            || snapshot
                .acls
                .authorize(principal, resource, name, operation)
                .allowed()
    });
    if !allowed {
        crate::metrics::bump(&shard.metrics.counters.authorization_denied_total, 1);
    }
    allowed
}

/// The refusal: counted, logged (once a second per shard, with the count
/// of lines left out), and answered naming the operation and resource.
fn denied(
    shard: &Shard,
    principal: &str,
    api: Api,
    resource: ResourceType,
    name: &str,
    operation: Operation,
    decision: Decision,
) -> Failure {
    crate::metrics::bump(&shard.metrics.counters.authorization_denied_total, 1);
    let what = match resource {
        ResourceType::Cluster => "the cluster".to_string(),
        other => format!("{} {name:?}", other.word()),
    };
    let why = match decision {
        Decision::Denied => "a deny rule matches",
        _ => "no rule allows it",
    };
    if let Some(suppressed) = shard.denials_log.allow() {
        tracing::warn!(
            principal,
            api = ?api,
            operation = operation.word(),
            resource = %what,
            suppressed,
            "request denied: {why}"
        );
    }
    Failure::new(
        ErrorCode::AuthorizationFailed,
        format!(
            "{principal} may not {} {what} ({why}): {api:?} needs {} on it",
            operation.word(),
            operation.word()
        ),
    )
}
