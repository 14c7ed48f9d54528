//! Security headers: the login (Handshake fields and Authenticate, api 20),
//! access control rules (apis 21–23) and users (apis 24–25). Builders, and
//! decoders from verified headers to the owned forms of [`crate::acl`].

use super::{finish, verify, DecodeError};
use crate::acl::{AclRule, Operation, PatternType, Permission, ResourceType};
use crate::generated::ringlog::wire;
use flatbuffers::{FlatBufferBuilder, WIPOffset};

/// Handshake request header with a login's first message.
pub fn handshake_login_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    client_name: &str,
    mechanism: &str,
    first: &[u8],
) -> &'b [u8] {
    super::handshake(fbb, client_name, Some((mechanism, first)), false)
}

/// Authenticate request header.
pub fn authenticate_request<'b>(fbb: &'b mut FlatBufferBuilder<'_>, bytes: &[u8]) -> &'b [u8] {
    fbb.reset();
    let bytes = fbb.create_vector(bytes);
    let root = wire::AuthenticateRequest::create(
        fbb,
        &wire::AuthenticateRequestArgs {
            sasl_bytes: Some(bytes),
        },
    );
    finish(fbb, root)
}

/// Authenticate response header.
pub fn authenticate_response<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    bytes: &[u8],
    principal: &str,
    hello: &super::BrokerHello<'_>,
) -> &'b [u8] {
    fbb.reset();
    let bytes = fbb.create_vector(bytes);
    let principal = fbb.create_string(principal);
    let broker_version = fbb.create_string(hello.broker_version);
    let root = wire::AuthenticateResponse::create(
        fbb,
        &wire::AuthenticateResponseArgs {
            sasl_bytes: Some(bytes),
            principal: Some(principal),
            broker_id: hello.broker_id,
            shard_id: hello.shard_id,
            shard_count: hello.shard_count,
            broker_version: Some(broker_version),
        },
    );
    finish(fbb, root)
}

fn resource_to_wire(resource: ResourceType) -> wire::ResourceType {
    match resource {
        ResourceType::Cluster => wire::ResourceType::Cluster,
        ResourceType::Topic => wire::ResourceType::Topic,
        ResourceType::Group => wire::ResourceType::Group,
    }
}

/// A wire resource type; `None` for Any or a value this version does not
/// know.
pub fn resource_from_wire(resource: wire::ResourceType) -> Option<ResourceType> {
    match resource {
        wire::ResourceType::Cluster => Some(ResourceType::Cluster),
        wire::ResourceType::Topic => Some(ResourceType::Topic),
        wire::ResourceType::Group => Some(ResourceType::Group),
        _ => None,
    }
}

fn operation_to_wire(operation: Operation) -> wire::AclOperation {
    match operation {
        Operation::All => wire::AclOperation::All,
        Operation::Read => wire::AclOperation::Read,
        Operation::Write => wire::AclOperation::Write,
        Operation::Create => wire::AclOperation::Create,
        Operation::Delete => wire::AclOperation::Delete,
        Operation::Alter => wire::AclOperation::Alter,
        Operation::Describe => wire::AclOperation::Describe,
    }
}

fn operation_from_wire(operation: wire::AclOperation) -> Option<Operation> {
    Some(match operation {
        wire::AclOperation::All => Operation::All,
        wire::AclOperation::Read => Operation::Read,
        wire::AclOperation::Write => Operation::Write,
        wire::AclOperation::Create => Operation::Create,
        wire::AclOperation::Delete => Operation::Delete,
        wire::AclOperation::Alter => Operation::Alter,
        wire::AclOperation::Describe => Operation::Describe,
        _ => return None,
    })
}

fn encode_rule<'b>(
    fbb: &mut FlatBufferBuilder<'b>,
    rule: &AclRule,
) -> WIPOffset<wire::AclRule<'b>> {
    let principal = fbb.create_string(&rule.principal);
    let name = fbb.create_string(&rule.name);
    wire::AclRule::create(
        fbb,
        &wire::AclRuleArgs {
            principal: Some(principal),
            resource_type: resource_to_wire(rule.resource),
            resource_name: Some(name),
            pattern: match rule.pattern {
                PatternType::Literal => wire::PatternType::Literal,
                PatternType::Prefixed => wire::PatternType::Prefixed,
            },
            operation: operation_to_wire(rule.operation),
            permission: match rule.permission {
                Permission::Allow => wire::AclPermission::Allow,
                Permission::Deny => wire::AclPermission::Deny,
            },
        },
    )
}

/// A rule from the wire, checked ([`AclRule::check`]); `Err` says what is
/// wrong with it.
pub fn decode_rule(rule: wire::AclRule<'_>) -> Result<AclRule, DecodeError> {
    let unknown = |what, value| DecodeError::Unknown {
        what,
        value: i64::from(value),
    };
    let resource = resource_from_wire(rule.resource_type())
        .ok_or_else(|| unknown("resource type", rule.resource_type().0))?;
    let operation = operation_from_wire(rule.operation())
        .ok_or_else(|| unknown("operation", rule.operation().0))?;
    let pattern = match rule.pattern() {
        wire::PatternType::Literal => PatternType::Literal,
        wire::PatternType::Prefixed => PatternType::Prefixed,
        other => return Err(unknown("pattern type", other.0)),
    };
    let permission = match rule.permission() {
        wire::AclPermission::Allow => Permission::Allow,
        wire::AclPermission::Deny => Permission::Deny,
        other => return Err(unknown("permission", other.0)),
    };
    let decoded = AclRule {
        permission,
        principal: rule.principal().unwrap_or_default().to_string(),
        operation,
        resource,
        pattern,
        name: rule.resource_name().unwrap_or_default().to_string(),
    };
    decoded.check().map_err(|e| DecodeError::Rule(e.0))?;
    Ok(decoded)
}

/// Decodes a request's rules: 1 to [`crate::acl::RULES_PER_REQUEST_MAX`],
/// each valid.
pub fn decode_rules(
    rules: Option<flatbuffers::Vector<'_, flatbuffers::ForwardsUOffset<wire::AclRule<'_>>>>,
) -> Result<Vec<AclRule>, DecodeError> {
    let rules = rules
        .map(|r| r.iter().collect::<Vec<_>>())
        .unwrap_or_default();
    if rules.is_empty() || rules.len() > crate::acl::RULES_PER_REQUEST_MAX {
        return Err(DecodeError::Count {
            what: "rules",
            count: rules.len(),
            max: crate::acl::RULES_PER_REQUEST_MAX,
        });
    }
    rules.into_iter().map(decode_rule).collect()
}

/// CreateAcls request header.
pub fn create_acls_request<'b>(fbb: &'b mut FlatBufferBuilder<'_>, rules: &[AclRule]) -> &'b [u8] {
    fbb.reset();
    let encoded: Vec<_> = rules.iter().map(|r| encode_rule(fbb, r)).collect();
    let rules = fbb.create_vector(&encoded);
    let root =
        wire::CreateAclsRequest::create(fbb, &wire::CreateAclsRequestArgs { rules: Some(rules) });
    finish(fbb, root)
}

/// CreateAcls response header.
pub fn create_acls_response<'b>(fbb: &'b mut FlatBufferBuilder<'_>, created: u32) -> &'b [u8] {
    fbb.reset();
    let root = wire::CreateAclsResponse::create(fbb, &wire::CreateAclsResponseArgs { created });
    finish(fbb, root)
}

/// DeleteAcls request header.
pub fn delete_acls_request<'b>(fbb: &'b mut FlatBufferBuilder<'_>, rules: &[AclRule]) -> &'b [u8] {
    fbb.reset();
    let encoded: Vec<_> = rules.iter().map(|r| encode_rule(fbb, r)).collect();
    let rules = fbb.create_vector(&encoded);
    let root =
        wire::DeleteAclsRequest::create(fbb, &wire::DeleteAclsRequestArgs { rules: Some(rules) });
    finish(fbb, root)
}

/// DeleteAcls response header.
pub fn delete_acls_response<'b>(fbb: &'b mut FlatBufferBuilder<'_>, deleted: u32) -> &'b [u8] {
    fbb.reset();
    let root = wire::DeleteAclsResponse::create(fbb, &wire::DeleteAclsResponseArgs { deleted });
    finish(fbb, root)
}

/// A DescribeAcls filter: each part `None` matches every rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AclFilter {
    /// Rules of this principal.
    pub principal: Option<String>,
    /// Rules of this resource type.
    pub resource: Option<ResourceType>,
    /// Rules with this name (a prefixed rule's prefix).
    pub name: Option<String>,
}

/// DescribeAcls request header.
pub fn describe_acls_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    filter: &AclFilter,
) -> &'b [u8] {
    fbb.reset();
    let principal = filter.principal.as_deref().map(|p| fbb.create_string(p));
    let name = filter.name.as_deref().map(|n| fbb.create_string(n));
    let root = wire::DescribeAclsRequest::create(
        fbb,
        &wire::DescribeAclsRequestArgs {
            principal,
            resource_type: filter
                .resource
                .map_or(wire::ResourceType::Any, resource_to_wire),
            resource_name: name,
        },
    );
    finish(fbb, root)
}

/// Decodes a DescribeAcls request's filter.
pub fn decode_acl_filter(request: wire::DescribeAclsRequest<'_>) -> Result<AclFilter, DecodeError> {
    let resource = match request.resource_type() {
        wire::ResourceType::Any => None,
        other => Some(resource_from_wire(other).ok_or(DecodeError::Unknown {
            what: "resource type",
            value: i64::from(other.0),
        })?),
    };
    let some = |s: Option<&str>| s.filter(|s| !s.is_empty()).map(str::to_string);
    Ok(AclFilter {
        principal: some(request.principal()),
        resource,
        name: some(request.resource_name()),
    })
}

/// DescribeAcls response header.
pub fn describe_acls_response<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    rules: &[&AclRule],
) -> &'b [u8] {
    fbb.reset();
    let encoded: Vec<_> = rules.iter().map(|r| encode_rule(fbb, r)).collect();
    let rules = fbb.create_vector(&encoded);
    let root = wire::DescribeAclsResponse::create(
        fbb,
        &wire::DescribeAclsResponseArgs { rules: Some(rules) },
    );
    finish(fbb, root)
}

/// Decodes a DescribeAcls answer.
pub fn decode_describe_acls(header: &[u8]) -> Result<Vec<AclRule>, DecodeError> {
    let response = verify::<wire::DescribeAclsResponse>(header)?;
    response
        .rules()
        .map(|r| r.iter().map(decode_rule).collect())
        .unwrap_or_else(|| Ok(Vec::new()))
}

/// AlterUsers request header: `upserts` are (name, stored credential text).
pub fn alter_users_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    upserts: &[(String, String)],
    deletions: &[String],
) -> &'b [u8] {
    fbb.reset();
    let users: Vec<_> = upserts
        .iter()
        .map(|(name, credential)| {
            let name = fbb.create_string(name);
            let credential = fbb.create_string(credential);
            wire::UserCredential::create(
                fbb,
                &wire::UserCredentialArgs {
                    name: Some(name),
                    credential: Some(credential),
                },
            )
        })
        .collect();
    let users = fbb.create_vector(&users);
    let names: Vec<_> = deletions.iter().map(|d| fbb.create_string(d)).collect();
    let names = fbb.create_vector(&names);
    let root = wire::AlterUsersRequest::create(
        fbb,
        &wire::AlterUsersRequestArgs {
            upserts: Some(users),
            deletions: Some(names),
        },
    );
    finish(fbb, root)
}

/// AlterUsers response header.
pub fn alter_users_response<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    upserted: u32,
    deleted: u32,
) -> &'b [u8] {
    fbb.reset();
    let root =
        wire::AlterUsersResponse::create(fbb, &wire::AlterUsersResponseArgs { upserted, deleted });
    finish(fbb, root)
}

/// ListUsers request header.
pub fn list_users_request<'b>(fbb: &'b mut FlatBufferBuilder<'_>) -> &'b [u8] {
    fbb.reset();
    let root = wire::ListUsersRequest::create(fbb, &wire::ListUsersRequestArgs {});
    finish(fbb, root)
}

/// ListUsers response header.
pub fn list_users_response<'b>(fbb: &'b mut FlatBufferBuilder<'_>, users: &[String]) -> &'b [u8] {
    fbb.reset();
    let names: Vec<_> = users.iter().map(|u| fbb.create_string(u)).collect();
    let names = fbb.create_vector(&names);
    let root =
        wire::ListUsersResponse::create(fbb, &wire::ListUsersResponseArgs { users: Some(names) });
    finish(fbb, root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_and_filters_round_trip() {
        let rules: Vec<AclRule> = [
            "allow User:alice read topic:clicks",
            "deny User:* all group-prefix:ops.",
            "allow User:root alter cluster:cluster",
        ]
        .iter()
        .map(|l| AclRule::parse(l).unwrap())
        .collect();
        let mut fbb = FlatBufferBuilder::new();
        let header = create_acls_request(&mut fbb, &rules).to_vec();
        let request = verify::<wire::CreateAclsRequest>(&header).unwrap();
        assert_eq!(decode_rules(request.rules()).unwrap(), rules);
        let refs: Vec<&AclRule> = rules.iter().collect();
        let header = describe_acls_response(&mut fbb, &refs).to_vec();
        assert_eq!(decode_describe_acls(&header).unwrap(), rules);
        let filter = AclFilter {
            principal: Some("User:alice".into()),
            resource: Some(ResourceType::Topic),
            name: None,
        };
        let header = describe_acls_request(&mut fbb, &filter).to_vec();
        let request = verify::<wire::DescribeAclsRequest>(&header).unwrap();
        assert_eq!(decode_acl_filter(request).unwrap(), filter);
    }

    #[test]
    fn empty_or_invalid_rule_lists_are_refused() {
        let mut fbb = FlatBufferBuilder::new();
        let header = create_acls_request(&mut fbb, &[]).to_vec();
        let request = verify::<wire::CreateAclsRequest>(&header).unwrap();
        assert_eq!(
            decode_rules(request.rules()).unwrap_err(),
            DecodeError::Count {
                what: "rules",
                count: 0,
                max: 1000
            }
        );
        let bad = AclRule {
            principal: "alice".into(),
            ..AclRule::parse("allow User:a read topic:t").unwrap()
        };
        let header = create_acls_request(&mut fbb, &[bad]).to_vec();
        let request = verify::<wire::CreateAclsRequest>(&header).unwrap();
        let refused = decode_rules(request.rules()).unwrap_err();
        assert!(
            matches!(&refused, DecodeError::Rule(words) if words.contains("principal")),
            "{refused}"
        );
    }
}
