//! Access control: who may do what to which resource, and the check every
//! request of a broker with `authorization = true` goes through.
//!
//! A rule allows or denies one principal (`User:alice`, or `User:*` for
//! everyone) one operation (or all of them) on the resources of one type
//! whose name is the rule's (`*`: every one) or starts with it (a prefixed
//! rule). The decision for a request, as Kafka's authorizer makes it:
//!
//! 1. a super user (the broker's `super_users`) may do everything;
//! 2. else any matching **deny** rule refuses it — deny beats allow;
//! 3. else any matching **allow** rule permits it; `describe` is also
//!    permitted by an allow of `read`, `write`, `delete` or `alter` (who may
//!    read a topic may see that it exists);
//! 4. else it is refused: no rule, no access.
//!
//! Rules have a one-line text form, the one the CLI prints and the
//! registry stores:
//!
//! ```text
//! allow User:alice read topic:clicks
//! deny User:* write topic-prefix:audit.
//! allow User:ops alter cluster:cluster
//! ```
//!
//! [`Acls`] indexes a set of rules so that a check is a few hash lookups,
//! whatever the number of rules: it runs once per request, not per message.

use std::collections::HashMap;
use std::fmt;

/// The principal of a connection without a login, on a broker that needs
/// none.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// The name of the one cluster resource.
pub const CLUSTER: &str = "cluster";

/// The most rules one request may add or remove.
pub const RULES_PER_REQUEST_MAX: usize = 1000;

/// What a rule is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceType {
    /// The cluster itself (topic creation, elections, ACLs, users).
    Cluster,
    /// A topic.
    Topic,
    /// A consumer group.
    Group,
}

impl ResourceType {
    const ALL: [ResourceType; 3] = [
        ResourceType::Cluster,
        ResourceType::Topic,
        ResourceType::Group,
    ];

    /// Its word in the text form.
    pub fn word(self) -> &'static str {
        match self {
            ResourceType::Cluster => "cluster",
            ResourceType::Topic => "topic",
            ResourceType::Group => "group",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// How a rule's name matches resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PatternType {
    /// The name itself (`*`: every resource of the type).
    Literal,
    /// Every name that starts with it.
    Prefixed,
}

/// What a request does to a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operation {
    /// Every operation (in a rule only).
    All,
    /// Fetch a topic; be a member of a group.
    Read,
    /// Produce to a topic.
    Write,
    /// Create topics.
    Create,
    /// Delete a topic.
    Delete,
    /// Change a topic (partitions, promotion, mirror appends) or the
    /// cluster (elections, reassignments, ACLs, users, replication).
    Alter,
    /// See that a resource exists and read its state.
    Describe,
}

impl Operation {
    /// Every operation a request can need (not `All`).
    pub const CONCRETE: [Operation; 6] = [
        Operation::Read,
        Operation::Write,
        Operation::Create,
        Operation::Delete,
        Operation::Alter,
        Operation::Describe,
    ];

    /// Its word in the text form.
    pub fn word(self) -> &'static str {
        match self {
            Operation::All => "all",
            Operation::Read => "read",
            Operation::Write => "write",
            Operation::Create => "create",
            Operation::Delete => "delete",
            Operation::Alter => "alter",
            Operation::Describe => "describe",
        }
    }

    /// Parses its word.
    pub fn from_word(word: &str) -> Option<Operation> {
        [Operation::All]
            .into_iter()
            .chain(Operation::CONCRETE)
            .find(|o| o.word().eq_ignore_ascii_case(word))
    }

    fn bit(self) -> u8 {
        match self {
            Operation::All => 0x7f,
            other => 1 << (other as u8),
        }
    }
}

/// Allow or deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Permission {
    /// The rule permits.
    Allow,
    /// The rule refuses, whatever allows it elsewhere.
    Deny,
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclRule {
    /// Allow or deny.
    pub permission: Permission,
    /// `User:NAME`, or `User:*`.
    pub principal: String,
    /// The operation, or `All`.
    pub operation: Operation,
    /// The resource type.
    pub resource: ResourceType,
    /// How `name` matches.
    pub pattern: PatternType,
    /// The resource name, `*`, or a prefix.
    pub name: String,
}

/// Why a rule is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AclError(pub String);

impl AclRule {
    /// Checks the rule's fields: a principal `User:NAME` or `User:*`, the
    /// cluster named `cluster` (literal), a topic or group name, prefix or
    /// `*` within the naming rule.
    pub fn check(&self) -> Result<(), AclError> {
        check_principal(&self.principal)?;
        let name = self.name.as_str();
        match self.resource {
            ResourceType::Cluster => {
                if name != CLUSTER || self.pattern != PatternType::Literal {
                    return Err(AclError(format!(
                        "the cluster resource is named {CLUSTER:?} (literal), not {name:?}"
                    )));
                }
            }
            ResourceType::Topic | ResourceType::Group => {
                let wildcard = name == "*" && self.pattern == PatternType::Literal;
                let fine = name.len() <= 249
                    && !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
                if !wildcard && !fine {
                    return Err(AclError(format!(
                        "{} name {name:?} must be 1 to 249 of [A-Za-z0-9._-], or * (literal) for every {}",
                        self.resource.word(),
                        self.resource.word()
                    )));
                }
            }
        }
        Ok(())
    }

    /// Parses the text form, `allow|deny PRINCIPAL OPERATION TYPE[-prefix]:NAME`,
    /// and checks the rule.
    pub fn parse(text: &str) -> Result<AclRule, AclError> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let [permission, principal, operation, resource] = words[..] else {
            return Err(AclError(format!(
                "{text:?} is not `allow|deny PRINCIPAL OPERATION TYPE:NAME`"
            )));
        };
        let permission = match permission {
            "allow" => Permission::Allow,
            "deny" => Permission::Deny,
            other => return Err(AclError(format!("{other:?} is neither allow nor deny"))),
        };
        let operation = Operation::from_word(operation).ok_or_else(|| {
            AclError(format!(
                "unknown operation {operation:?}: all, read, write, create, delete, alter or describe"
            ))
        })?;
        let (kind, name) = resource
            .split_once(':')
            .ok_or_else(|| AclError(format!("{resource:?} is not TYPE:NAME")))?;
        let (kind, pattern) = match kind.strip_suffix("-prefix") {
            Some(kind) => (kind, PatternType::Prefixed),
            None => (kind, PatternType::Literal),
        };
        let resource = ResourceType::ALL
            .into_iter()
            .find(|r| r.word() == kind)
            .ok_or_else(|| {
                AclError(format!(
                    "unknown resource type {kind:?}: cluster, topic or group"
                ))
            })?;
        let rule = AclRule {
            permission,
            principal: principal.to_string(),
            operation,
            resource,
            pattern,
            name: name.to_string(),
        };
        rule.check()?;
        Ok(rule)
    }

    fn matches_name(&self, name: &str) -> bool {
        match self.pattern {
            PatternType::Literal => self.name == "*" || self.name == name,
            PatternType::Prefixed => name.starts_with(&self.name),
        }
    }
}

impl fmt::Display for AclRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let permission = match self.permission {
            Permission::Allow => "allow",
            Permission::Deny => "deny",
        };
        let suffix = match self.pattern {
            PatternType::Literal => "",
            PatternType::Prefixed => "-prefix",
        };
        write!(
            f,
            "{permission} {} {} {}{suffix}:{}",
            self.principal,
            self.operation.word(),
            self.resource.word(),
            self.name
        )
    }
}

/// Checks a principal: `User:NAME` (a user name as logins allow, or a TLS
/// certificate's common name) or `User:*`.
pub fn check_principal(principal: &str) -> Result<(), AclError> {
    let fine = principal.strip_prefix("User:").is_some_and(|name| {
        name == "*"
            || (!name.is_empty()
                && name.len() <= 256
                && name.bytes().all(|b| b.is_ascii_graphic() && b != b':'))
    });
    if fine {
        Ok(())
    } else {
        Err(AclError(format!(
            "principal {principal:?} must be User:NAME or User:* (NAME without spaces or ':')"
        )))
    }
}

/// The decision for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Permitted: a super user, or an allow rule and no deny rule.
    Allowed,
    /// A deny rule matched.
    Denied,
    /// No rule allows it.
    NoRule,
}

impl Decision {
    /// True when permitted.
    pub fn allowed(self) -> bool {
        self == Decision::Allowed
    }
}

/// Allow and deny bits of the operations, one bit per [`Operation`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Bits {
    allow: u8,
    deny: u8,
}

impl Bits {
    fn add(&mut self, rule: &AclRule) {
        match rule.permission {
            Permission::Allow => self.allow |= rule.operation.bit(),
            Permission::Deny => self.deny |= rule.operation.bit(),
        }
    }

    fn or(&mut self, other: Bits) {
        self.allow |= other.allow;
        self.deny |= other.deny;
    }
}

/// One principal's (or everyone's) rules, indexed by resource type.
#[derive(Debug, Clone, Default)]
struct Grants {
    literal: [HashMap<String, Bits>; 3],
    every: [Bits; 3],
    prefixed: [Vec<(String, Bits)>; 3],
}

impl Grants {
    fn add(&mut self, rule: &AclRule) {
        let i = rule.resource.index();
        match rule.pattern {
            PatternType::Literal if rule.name == "*" => self.every[i].add(rule),
            PatternType::Literal => self.literal[i]
                .entry(rule.name.clone())
                .or_default()
                .add(rule),
            PatternType::Prefixed => {
                match self.prefixed[i].iter_mut().find(|(p, _)| *p == rule.name) {
                    Some((_, bits)) => bits.add(rule),
                    None => {
                        let mut bits = Bits::default();
                        bits.add(rule);
                        self.prefixed[i].push((rule.name.clone(), bits));
                    }
                }
            }
        }
    }

    fn bits(&self, resource: ResourceType, name: &str) -> Bits {
        let i = resource.index();
        let mut bits = self.every[i];
        if let Some(found) = self.literal[i].get(name) {
            bits.or(*found);
        }
        for (prefix, found) in &self.prefixed[i] {
            if name.starts_with(prefix.as_str()) {
                bits.or(*found);
            }
        }
        bits
    }

    fn any(&self, resource: ResourceType) -> Bits {
        let i = resource.index();
        let mut bits = self.every[i];
        for found in self.literal[i].values() {
            bits.or(*found);
        }
        for (_, found) in &self.prefixed[i] {
            bits.or(*found);
        }
        bits
    }
}

/// A set of rules and the super users, indexed for [`Acls::authorize`].
#[derive(Debug, Clone, Default)]
pub struct Acls {
    rules: Vec<AclRule>,
    super_users: Vec<String>,
    by_principal: HashMap<String, Grants>,
    everyone: Grants,
}

impl Acls {
    /// The set of `rules`, with `super_users` allowed everything.
    pub fn new(mut rules: Vec<AclRule>, super_users: &[String]) -> Acls {
        rules.sort();
        rules.dedup();
        let mut acls = Acls {
            super_users: super_users.to_vec(),
            ..Acls::default()
        };
        for rule in &rules {
            if rule.principal == "User:*" {
                acls.everyone.add(rule);
            } else {
                acls.by_principal
                    .entry(rule.principal.clone())
                    .or_default()
                    .add(rule);
            }
        }
        acls.rules = rules;
        acls
    }

    /// The rules, sorted.
    pub fn rules(&self) -> &[AclRule] {
        &self.rules
    }

    /// True for a super user.
    pub fn is_super_user(&self, principal: &str) -> bool {
        self.super_users.iter().any(|s| s == principal)
    }

    /// May `principal` do `operation` to the resource of this type and name?
    pub fn authorize(
        &self,
        principal: &str,
        resource: ResourceType,
        name: &str,
        operation: Operation,
    ) -> Decision {
        if self.is_super_user(principal) {
            return Decision::Allowed;
        }
        let mut bits = self.everyone.bits(resource, name);
        if let Some(grants) = self.by_principal.get(principal) {
            bits.or(grants.bits(resource, name));
        }
        decide(bits, operation)
    }

    /// May `principal` do `operation` to *some* resource of this type (a
    /// listing that it then filters name by name)?
    pub fn may_some(&self, principal: &str, resource: ResourceType, operation: Operation) -> bool {
        if self.is_super_user(principal) {
            return true;
        }
        let mut bits = self.everyone.any(resource);
        if let Some(grants) = self.by_principal.get(principal) {
            bits.or(grants.any(resource));
        }
        let wanted = operation.bit() | implied_by(operation);
        bits.allow & wanted != 0
    }
}

/// The operations whose allow also allows `operation`.
fn implied_by(operation: Operation) -> u8 {
    match operation {
        Operation::Describe => {
            Operation::Read.bit()
                | Operation::Write.bit()
                | Operation::Delete.bit()
                | Operation::Alter.bit()
        }
        _ => 0,
    }
}

fn decide(bits: Bits, operation: Operation) -> Decision {
    if bits.deny & operation.bit() != 0 {
        Decision::Denied
    } else if bits.allow & (operation.bit() | implied_by(operation)) != 0 {
        Decision::Allowed
    } else {
        Decision::NoRule
    }
}

/// Rules matching a DescribeAcls filter: each part absent matches all.
pub fn filter<'a>(
    rules: &'a [AclRule],
    principal: Option<&'a str>,
    resource: Option<ResourceType>,
    name: Option<&'a str>,
) -> impl Iterator<Item = &'a AclRule> + 'a {
    rules.iter().filter(move |r| {
        principal.is_none_or(|p| r.principal == p)
            && resource.is_none_or(|t| r.resource == t)
            && name.is_none_or(|n| r.name == n)
    })
}

/// True when `rule` would apply to this resource (for tests and listings).
pub fn applies(rule: &AclRule, resource: ResourceType, name: &str) -> bool {
    rule.resource == resource && rule.matches_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(lines: &[&str]) -> Vec<AclRule> {
        lines.iter().map(|l| AclRule::parse(l).unwrap()).collect()
    }

    #[test]
    fn the_text_form_round_trips_and_bad_rules_are_named() {
        for line in [
            "allow User:alice read topic:clicks",
            "deny User:* write topic-prefix:audit.",
            "allow User:ops alter cluster:cluster",
            "allow User:bob all group:*",
        ] {
            assert_eq!(AclRule::parse(line).unwrap().to_string(), line);
        }
        for (bad, says) in [
            ("allow alice read topic:clicks", "principal"),
            ("permit User:a read topic:x", "neither allow nor deny"),
            ("allow User:a fly topic:x", "unknown operation"),
            ("allow User:a read table:x", "unknown resource type"),
            ("allow User:a read topic:a/b", "name"),
            ("allow User:a alter cluster:other", "cluster resource"),
            ("allow User:a read topic-prefix:*", "name"),
            ("allow User:a read", "is not"),
        ] {
            let error = AclRule::parse(bad).unwrap_err().to_string();
            assert!(error.contains(says), "{bad:?}: {error}");
        }
    }

    #[test]
    fn deny_beats_allow_and_no_rule_is_no_access() {
        let acls = Acls::new(
            rules(&[
                "allow User:alice read topic:clicks",
                "allow User:alice all topic-prefix:logs.",
                "deny User:alice write topic:logs.audit",
                "allow User:* describe topic:public",
                "deny User:* all topic:secret",
                "allow User:alice read topic:secret",
            ]),
            &["User:admin".to_string()],
        );
        let check = |p, name, op| acls.authorize(p, ResourceType::Topic, name, op);
        assert_eq!(
            check("User:alice", "clicks", Operation::Read),
            Decision::Allowed
        );
        assert_eq!(
            check("User:alice", "clicks", Operation::Write),
            Decision::NoRule
        );
        assert_eq!(
            check("User:alice", "clicks", Operation::Describe),
            Decision::Allowed
        );
        assert_eq!(
            check("User:alice", "logs.web", Operation::Write),
            Decision::Allowed
        );
        assert_eq!(
            check("User:alice", "logs.audit", Operation::Write),
            Decision::Denied
        );
        assert_eq!(
            check("User:alice", "logs.audit", Operation::Read),
            Decision::Allowed
        );
        assert_eq!(
            check("User:alice", "secret", Operation::Read),
            Decision::Denied
        );
        assert_eq!(
            check("User:bob", "public", Operation::Describe),
            Decision::Allowed
        );
        assert_eq!(
            check("User:bob", "public", Operation::Read),
            Decision::NoRule
        );
        assert_eq!(
            check("User:admin", "secret", Operation::Delete),
            Decision::Allowed
        );
        // Another resource type with the same name is another resource.
        assert_eq!(
            acls.authorize("User:alice", ResourceType::Group, "clicks", Operation::Read),
            Decision::NoRule
        );
        assert!(acls.may_some("User:bob", ResourceType::Topic, Operation::Describe));
        assert!(!acls.may_some("User:bob", ResourceType::Group, Operation::Describe));
    }

    #[test]
    fn duplicates_collapse_and_filters_select() {
        let acls = Acls::new(
            rules(&[
                "allow User:a read topic:t",
                "allow User:a read topic:t",
                "allow User:b read group:g",
            ]),
            &[],
        );
        assert_eq!(acls.rules().len(), 2);
        assert_eq!(filter(acls.rules(), Some("User:b"), None, None).count(), 1);
        assert_eq!(
            filter(acls.rules(), None, Some(ResourceType::Topic), Some("t")).count(),
            1
        );
        assert!(applies(&acls.rules()[0], ResourceType::Topic, "t"));
    }
}
