//! ListGroups (v0–2) and DescribeGroups (v0–4): the groups a shard
//! coordinates (Kafka's admin tools ask every node and merge), and one
//! group's phase, protocol and members with their assignments.

use super::super::errors::code;
use super::super::versions::key;
use super::super::wire::{answer, ready, Malformed, Reader, Writer};
use super::{coordinated, Caller};
use crate::auth::authorize::may_describe;
use crate::reply::{Dispatched, Payload};
use crate::shard::Shard;
use protocol::acl::ResourceType;
use std::rc::Rc;

/// Groups one DescribeGroups may name.
const DESCRIBED_MAX: usize = 1_000;

/// Handles a ListGroups request.
pub fn handle_list(shard: &Rc<Shard>, version: i16, caller: &Caller) -> Dispatched {
    let listed: Vec<_> = shard
        .kafka_groups
        .listed()
        .into_iter()
        .filter(|(name, _, _)| may_describe(shard, &caller.principal, ResourceType::Group, name))
        .collect();
    let mut w = Writer::default();
    if version >= 1 {
        w.i32(0); // throttle_time_ms
    }
    w.i16(code::NONE);
    w.array(listed.len());
    for (name, _, protocol_type) in &listed {
        w.string(name);
        w.string(protocol_type);
    }
    ready(key::LIST_GROUPS, w.out)
}

fn described_error(w: &mut Writer, version: i16, name: &str, error: i16) {
    w.i16(error);
    w.string(name);
    w.string(if error == code::NONE { "Dead" } else { "" });
    w.string("");
    w.string("");
    w.array(0);
    if version >= 3 {
        w.i32(i32::MIN);
    }
}

/// Handles a DescribeGroups request.
pub fn handle_describe(
    shard: &Rc<Shard>,
    version: i16,
    r: &mut Reader<'_>,
    caller: &Caller,
) -> Result<Dispatched, Malformed> {
    let count = r.array(2, "groups")?.unwrap_or(0);
    let names = (0..count)
        .map(|_| r.string("group").map(str::to_string))
        .collect::<Result<Vec<_>, _>>()?;
    if version >= 3 {
        r.bool("include_authorized_operations")?;
    }
    let shard = shard.clone();
    let principal = caller.principal.clone();
    Ok(Dispatched::Later(Box::pin(async move {
        let mut w = Writer::default();
        if version >= 1 {
            w.i32(0); // throttle_time_ms
        }
        w.array(names.len());
        for (i, name) in names.iter().enumerate() {
            if i >= DESCRIBED_MAX {
                described_error(&mut w, version, name, code::INVALID_REQUEST);
                continue;
            }
            if !may_describe(&shard, &principal, ResourceType::Group, name) {
                described_error(&mut w, version, name, code::GROUP_AUTHORIZATION_FAILED);
                continue;
            }
            let group = match coordinated(&shard, name).await {
                Ok(group) => group,
                Err(error) => {
                    described_error(&mut w, version, name, error);
                    continue;
                }
            };
            let g = group.borrow();
            w.i16(code::NONE);
            w.string(name);
            w.string(g.phase.name());
            w.string(&g.protocol_type);
            w.string(&g.protocol);
            w.array(g.members.len());
            for (id, m) in &g.members {
                w.string(id);
                if version >= 4 {
                    w.nullable_string(m.instance_id.as_deref());
                }
                w.string(&m.client_id);
                w.string(&m.client_host);
                w.bytes(m.metadata(&g.protocol));
                w.bytes(&m.assignment);
            }
            if version >= 3 {
                w.i32(i32::MIN); // authorized operations: not asked for
            }
        }
        Some(answer(key::DESCRIBE_GROUPS, w.out, Payload::None))
    })))
}
