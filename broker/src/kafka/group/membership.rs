//! JoinGroup (v2–5), SyncGroup (v0–3), Heartbeat (v0–3) and LeaveGroup
//! (v0–3): a member's requests to its group's coordinator. Each needs
//! Read on the group. The state machine is `state.rs`; here are the
//! layouts and the waits: a JoinGroup is answered when the barrier ends,
//! a member's SyncGroup when the leader's arrives.

use super::super::errors::code;
use super::super::versions::key;
use super::super::wire::{ready, Malformed, Reader, Writer};
use super::state::{Join, JoinAnswer};
use super::{save, with_group, Caller};
use crate::auth::authorize::may;
use crate::limits::{
    KAFKA_GROUPS_BYTES_MAX, KAFKA_GROUP_BYTES_MAX, KAFKA_GROUP_MEMBERS_MAX,
    KAFKA_SESSION_TIMEOUT_MS,
};
use crate::reply::Dispatched;
use crate::shard::Shard;
use protocol::acl::{Operation, ResourceType};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Protocols one JoinGroup may offer.
const PROTOCOLS_MAX: usize = 64;

fn join_body(version: i16, a: &JoinAnswer) -> Vec<u8> {
    let mut w = Writer::default();
    w.i32(0); // throttle_time_ms (v2+)
    w.i16(a.error);
    w.i32(a.generation);
    w.string(&a.protocol);
    w.string(&a.leader);
    w.string(&a.member_id);
    w.array(a.members.len());
    for (id, instance, metadata) in &a.members {
        w.string(id);
        if version >= 5 {
            w.nullable_string(instance.as_deref());
        }
        w.bytes(metadata);
    }
    w.out
}

fn join_error(version: i16, error: i16, member_id: &str) -> Vec<u8> {
    join_body(
        version,
        &JoinAnswer {
            error,
            generation: -1,
            member_id: member_id.to_string(),
            ..JoinAnswer::default()
        },
    )
}

fn read_join(
    version: i16,
    r: &mut Reader<'_>,
    caller: &Caller,
) -> Result<(String, Join), Malformed> {
    let group = r.string("group_id")?.to_string();
    let session = r.i32("session_timeout_ms")?;
    let rebalance = r.i32("rebalance_timeout_ms")?;
    let member_id = r.string("member_id")?.to_string();
    let instance_id = if version >= 5 {
        r.nullable_string("group_instance_id")?.map(str::to_string)
    } else {
        None
    };
    let protocol_type = r.string("protocol_type")?.to_string();
    let count = r.array(6, "protocols")?.unwrap_or(0);
    let mut protocols = Vec::with_capacity(count.min(PROTOCOLS_MAX));
    for _ in 0..count {
        let name = r.string("protocol name")?.to_string();
        let metadata = r.nullable_bytes("protocol metadata")?.unwrap_or_default();
        protocols.push((name, metadata.to_vec()));
    }
    let join = Join {
        member_id,
        instance_id,
        client_id: caller.client_id.clone(),
        client_host: caller.host.clone(),
        session_timeout: Duration::from_millis(session.max(0) as u64),
        rebalance_timeout: Duration::from_millis(rebalance.max(session).max(0) as u64),
        protocol_type,
        protocols,
        version,
    };
    Ok((group, join))
}

/// Handles a JoinGroup request.
pub fn handle_join(
    shard: &Rc<Shard>,
    version: i16,
    r: &mut Reader<'_>,
    caller: &Caller,
) -> Result<Dispatched, Malformed> {
    let (group, join) = read_join(version, r, caller)?;
    let now = |error: i16| {
        Ok(ready(
            key::JOIN_GROUP,
            join_error(version, error, &join.member_id),
        ))
    };
    if !may(
        shard,
        &caller.principal,
        ResourceType::Group,
        &group,
        Operation::Read,
    ) {
        return now(code::GROUP_AUTHORIZATION_FAILED);
    }
    let session_ms = join.session_timeout.as_millis() as i32;
    if !KAFKA_SESSION_TIMEOUT_MS.contains(&session_ms) {
        return now(code::INVALID_SESSION_TIMEOUT);
    }
    if join.protocols.len() > PROTOCOLS_MAX
        || join
            .protocols
            .iter()
            .any(|(_, m)| m.len() > KAFKA_GROUP_BYTES_MAX)
    {
        return now(code::INVALID_REQUEST);
    }
    let delay = Duration::from_millis(shard.config.kafka_group_initial_delay_ms);
    let member_id = join.member_id.clone();
    Ok(with_group(
        shard,
        key::JOIN_GROUP,
        group,
        move |error| join_error(version, error, &member_id),
        move |shard, group| async move {
            let (waiter, answered) = flume::bounded(1);
            let bytes: usize = join.protocols.iter().map(|(n, m)| n.len() + m.len()).sum();
            let over_budget = shard.kafka_groups.footprint() + bytes > KAFKA_GROUPS_BYTES_MAX;
            let immediate = {
                let mut g = group.borrow_mut();
                let new = !g.members.contains_key(&join.member_id);
                if new && g.members.len() >= KAFKA_GROUP_MEMBERS_MAX || over_budget {
                    Some(JoinAnswer {
                        error: code::GROUP_MAX_SIZE_REACHED,
                        generation: -1,
                        member_id: join.member_id.clone(),
                        ..JoinAnswer::default()
                    })
                } else {
                    g.join(join.clone(), waiter, delay, Instant::now())
                }
            };
            let answer = match immediate {
                Some(answer) => answer,
                // The group was let go while this member waited.
                None => answered.recv_async().await.unwrap_or_else(|_| JoinAnswer {
                    error: code::NOT_COORDINATOR,
                    generation: -1,
                    member_id: join.member_id.clone(),
                    ..JoinAnswer::default()
                }),
            };
            join_body(version, &answer)
        },
    ))
}

fn sync_body(version: i16, error: i16, assignment: &[u8]) -> Vec<u8> {
    let mut w = Writer::default();
    if version >= 1 {
        w.i32(0); // throttle_time_ms
    }
    w.i16(error);
    w.bytes(assignment);
    w.out
}

/// Handles a SyncGroup request.
pub fn handle_sync(
    shard: &Rc<Shard>,
    version: i16,
    r: &mut Reader<'_>,
    caller: &Caller,
) -> Result<Dispatched, Malformed> {
    let name = r.string("group_id")?.to_string();
    let generation = r.i32("generation_id")?;
    let member_id = r.string("member_id")?.to_string();
    if version >= 3 {
        r.nullable_string("group_instance_id")?;
    }
    let count = r.array(6, "assignments")?.unwrap_or(0);
    let mut assignments = Vec::with_capacity(count.min(KAFKA_GROUP_MEMBERS_MAX));
    for _ in 0..count {
        let id = r.string("member_id")?.to_string();
        let bytes = r.nullable_bytes("assignment")?.unwrap_or_default();
        assignments.push((id, bytes.to_vec()));
    }
    if !may(
        shard,
        &caller.principal,
        ResourceType::Group,
        &name,
        Operation::Read,
    ) {
        return Ok(ready(
            key::SYNC_GROUP,
            sync_body(version, code::GROUP_AUTHORIZATION_FAILED, &[]),
        ));
    }
    if assignments.len() > KAFKA_GROUP_MEMBERS_MAX
        || assignments
            .iter()
            .any(|(_, a)| a.len() > KAFKA_GROUP_BYTES_MAX)
    {
        return Ok(ready(
            key::SYNC_GROUP,
            sync_body(version, code::INVALID_REQUEST, &[]),
        ));
    }
    Ok(with_group(
        shard,
        key::SYNC_GROUP,
        name.clone(),
        move |error| sync_body(version, error, &[]),
        move |shard, group| async move {
            let bytes: usize = assignments.iter().map(|(_, a)| a.len()).sum();
            if shard.kafka_groups.footprint() + bytes > KAFKA_GROUPS_BYTES_MAX {
                return sync_body(version, code::GROUP_MAX_SIZE_REACHED, &[]);
            }
            let (waiter, answered) = flume::bounded(1);
            let (immediate, saved) = group.borrow_mut().sync(
                &member_id,
                generation,
                assignments,
                waiter,
                Instant::now(),
            );
            if let Some(saved) = saved {
                save(&shard, &name, saved).await;
            }
            let (error, assignment) = match immediate {
                Some(answer) => answer,
                None => answered
                    .recv_async()
                    .await
                    .unwrap_or((code::NOT_COORDINATOR, Vec::new())),
            };
            sync_body(version, error, &assignment)
        },
    ))
}

fn code_body(version: i16, error: i16) -> Vec<u8> {
    let mut w = Writer::default();
    if version >= 1 {
        w.i32(0); // throttle_time_ms
    }
    w.i16(error);
    w.out
}

/// Handles a Heartbeat request.
pub fn handle_heartbeat(
    shard: &Rc<Shard>,
    version: i16,
    r: &mut Reader<'_>,
    caller: &Caller,
) -> Result<Dispatched, Malformed> {
    let name = r.string("group_id")?.to_string();
    let generation = r.i32("generation_id")?;
    let member_id = r.string("member_id")?.to_string();
    if version >= 3 {
        r.nullable_string("group_instance_id")?;
    }
    if !may(
        shard,
        &caller.principal,
        ResourceType::Group,
        &name,
        Operation::Read,
    ) {
        return Ok(ready(
            key::HEARTBEAT,
            code_body(version, code::GROUP_AUTHORIZATION_FAILED),
        ));
    }
    Ok(with_group(
        shard,
        key::HEARTBEAT,
        name,
        move |error| code_body(version, error),
        move |_shard, group| async move {
            let error = group
                .borrow_mut()
                .heartbeat(&member_id, generation, Instant::now());
            code_body(version, error)
        },
    ))
}

fn leave_body(version: i16, error: i16, members: &[(String, Option<String>, i16)]) -> Vec<u8> {
    let mut w = Writer::default();
    if version >= 1 {
        w.i32(0); // throttle_time_ms
    }
    w.i16(error);
    if version >= 3 {
        w.array(members.len());
        for (id, instance, error) in members {
            w.string(id);
            w.nullable_string(instance.as_deref());
            w.i16(*error);
        }
    }
    w.out
}

/// Handles a LeaveGroup request.
pub fn handle_leave(
    shard: &Rc<Shard>,
    version: i16,
    r: &mut Reader<'_>,
    caller: &Caller,
) -> Result<Dispatched, Malformed> {
    let name = r.string("group_id")?.to_string();
    let mut leaving: Vec<(String, Option<String>)> = Vec::new();
    if version >= 3 {
        let count = r.array(4, "members")?.unwrap_or(0);
        for _ in 0..count {
            let id = r.string("member_id")?.to_string();
            let instance = r.nullable_string("group_instance_id")?.map(str::to_string);
            leaving.push((id, instance));
        }
    } else {
        leaving.push((r.string("member_id")?.to_string(), None));
    }
    if !may(
        shard,
        &caller.principal,
        ResourceType::Group,
        &name,
        Operation::Read,
    ) {
        return Ok(ready(
            key::LEAVE_GROUP,
            leave_body(version, code::GROUP_AUTHORIZATION_FAILED, &[]),
        ));
    }
    if leaving.len() > KAFKA_GROUP_MEMBERS_MAX {
        return Ok(ready(
            key::LEAVE_GROUP,
            leave_body(version, code::INVALID_REQUEST, &[]),
        ));
    }
    Ok(with_group(
        shard,
        key::LEAVE_GROUP,
        name.clone(),
        move |error| leave_body(version, error, &[]),
        move |shard, group| async move {
            let now = Instant::now();
            let mut results = Vec::with_capacity(leaving.len());
            let mut to_save = None;
            for (id, instance) in leaving {
                let (error, saved) = group.borrow_mut().leave(&id, instance.as_deref(), now);
                if saved.is_some() {
                    to_save = saved;
                }
                results.push((id, instance, error));
            }
            if let Some(saved) = to_save {
                save(&shard, &name, saved).await;
            }
            // v0–2 name one member: its error is the answer's.
            let top = if version >= 3 {
                code::NONE
            } else {
                results.first().map_or(code::NONE, |r| r.2)
            };
            leave_body(version, top, &results)
        },
    ))
}
