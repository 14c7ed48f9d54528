//! Kafka's classic consumer groups, coordinated by one shard per group.
//!
//! The coordinator of a group is chosen through the registry
//! ([`::coordinator::kafka_groups`]): the first shard asked — the group's
//! shard by hash on the broker that served the FindCoordinator — becomes
//! it, bound in etcd to its broker's lease. That shard keeps the group in
//! memory ([`state::Group`]): the JoinGroup barrier, the members' sessions,
//! the leader's assignment. The group is written to the registry when a
//! rebalance completes or the group empties, so a coordinator that takes
//! over after a broker's death resumes the same generation; the offsets
//! are written at each commit. Both writes are fenced by the coordinator
//! key: a shard that lost the group cannot write over its successor.
//!
//! | file | what |
//! |---|---|
//! | `state.rs` | one group's state machine (pure) |
//! | `table.rs` | the groups a shard coordinates |
//! | `coordinator.rs` | FindCoordinator |
//! | `membership.rs` | JoinGroup, SyncGroup, Heartbeat, LeaveGroup |
//! | `offsets.rs` | OffsetCommit, OffsetFetch |
//! | `listing.rs` | ListGroups, DescribeGroups |
//! | `described.rs` | a Kafka group as `ringlog groups describe` shows it |

pub mod coordinator;
pub mod described;
pub mod listing;
pub mod membership;
pub mod offsets;
pub mod state;
pub mod table;

use super::errors::code;
use crate::shard::Shard;
use ::coordinator::kafka_groups::{Holder, KafkaGroupAnswer, KafkaGroupOp};
use ::coordinator::registry::RegistryError;
use state::Group;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};
pub use table::Groups;
use table::Held;

/// How often a shard looks at its groups' sessions and barriers.
const TICK: Duration = Duration::from_millis(100);

/// How often a held group's coordinator key is read again: a broker whose
/// lease lapsed (and with it the key) finds out, and takes the group again
/// or lets it go.
const VERIFY_EVERY: Duration = Duration::from_secs(5);

/// How long an empty group stays in memory without requests.
const IDLE_EMPTY: Duration = Duration::from_secs(60);

/// This shard as a coordinator.
pub fn me(shard: &Shard) -> Holder {
    Holder {
        broker: shard.config.broker_id,
        shard: u32::from(shard.id),
    }
}

/// The shard of this broker a new group is given to: its name's hash.
pub fn candidate(shard: &Shard, group: &str) -> Holder {
    // FNV-1a: the same on every broker and every run.
    let mut hash: u32 = 0x811c_9dc5;
    for b in group.bytes() {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    Holder {
        broker: shard.config.broker_id,
        shard: hash % shard.peers.len().max(1) as u32,
    }
}

/// Asks the registry, through the control thread.
pub async fn ask(shard: &Shard, op: KafkaGroupOp) -> Result<KafkaGroupAnswer, RegistryError> {
    let (reply, answer) = flume::bounded(1);
    if shard
        .control
        .send_async(crate::mailbox::ControlMsg::KafkaGroup { op, reply })
        .await
        .is_err()
    {
        return Err(RegistryError::Unavailable {
            reason: "the broker is stopping".into(),
        });
    }
    answer.recv_async().await.unwrap_or_else(|_| {
        Err(RegistryError::Unavailable {
            reason: "the broker is stopping".into(),
        })
    })
}

/// Kafka's error for a registry's.
pub fn registry_code(error: &RegistryError) -> i16 {
    match error {
        RegistryError::NotCoordinator { .. } => code::NOT_COORDINATOR,
        _ => code::COORDINATOR_NOT_AVAILABLE,
    }
}

/// Kafka's rule for group names here: as topic names (`[A-Za-z0-9._-]`,
/// at most 249 bytes), since a name is a key segment in etcd and a file
/// name standalone.
pub fn valid_name(name: &str) -> bool {
    protocol::types::validate_topic_name(name).is_ok()
}

/// The group, if this shard coordinates it: held already, or elected now
/// (its saved state loaded). Otherwise Kafka's error: NOT_COORDINATOR
/// (the client finds the coordinator again) or COORDINATOR_NOT_AVAILABLE.
pub async fn coordinated(shard: &Rc<Shard>, name: &str) -> Result<Rc<RefCell<Group>>, i16> {
    if !valid_name(name) {
        return Err(code::INVALID_GROUP_ID);
    }
    if let Some(group) = shard.kafka_groups.get(name) {
        return Ok(group);
    }
    if shard.kafka_groups.held.borrow().len() >= crate::limits::KAFKA_GROUPS_PER_SHARD_MAX {
        return Err(code::COORDINATOR_NOT_AVAILABLE);
    }
    let op = KafkaGroupOp::Coordinator {
        group: name.to_string(),
        candidate: candidate(shard, name),
    };
    match ask(shard, op).await {
        Ok(KafkaGroupAnswer::Coordinator(holder)) if holder == me(shard) => {}
        Ok(_) => return Err(code::NOT_COORDINATOR),
        Err(error) => return Err(registry_code(&error)),
    }
    let saved = match ask(
        shard,
        KafkaGroupOp::Load {
            group: name.to_string(),
        },
    )
    .await
    {
        Ok(KafkaGroupAnswer::State(saved)) => saved,
        Ok(_) => None,
        Err(error) => return Err(registry_code(&error)),
    };
    // Another request may have loaded it while this one waited.
    if let Some(group) = shard.kafka_groups.get(name) {
        return Ok(group);
    }
    let now = Instant::now();
    let group = Rc::new(RefCell::new(match saved {
        Some(saved) => {
            tracing::info!(group = %name, generation = saved.generation, members = saved.members.len(), "kafka group: coordinating, resumed from the registry");
            Group::restored(saved, now)
        }
        None => {
            tracing::info!(group = %name, "kafka group: coordinating, a new group");
            Group::new()
        }
    }));
    shard.kafka_groups.held.borrow_mut().insert(
        name.to_string(),
        Held {
            group: group.clone(),
            verified: now,
            used: Cell::new(now),
        },
    );
    start_ticking(shard);
    Ok(group)
}

/// Stores a group as it stands (a completed rebalance, an emptied group);
/// a shard that finds it is no longer the coordinator lets the group go.
pub async fn save(shard: &Rc<Shard>, name: &str, state: ::coordinator::kafka_groups::SavedGroup) {
    let op = KafkaGroupOp::Save {
        group: name.to_string(),
        me: me(shard),
        state: Some(state),
    };
    match ask(shard, op).await {
        Ok(_) => {}
        Err(RegistryError::NotCoordinator { .. }) => shard.kafka_groups.drop_group(name),
        Err(error) => {
            tracing::warn!(group = %name, %error, "kafka group: its state was not stored; a new coordinator would start from the one before");
        }
    }
}

/// Starts the shard's group timer, once.
fn start_ticking(shard: &Rc<Shard>) {
    if shard.kafka_groups.ticking.replace(true) {
        return;
    }
    let shard = shard.clone();
    glommio::spawn_local(async move {
        while !shard.stopping.get() {
            glommio::timer::sleep(TICK).await;
            tick(&shard).await;
        }
    })
    .detach();
}

/// One look at every held group: sessions, barriers, and now and then the
/// coordinator key.
async fn tick(shard: &Rc<Shard>) {
    let now = Instant::now();
    let mut to_save = Vec::new();
    let mut to_verify = Vec::new();
    for (name, held) in shard.kafka_groups.held.borrow_mut().iter_mut() {
        if let Some(saved) = held.group.borrow_mut().tick(now) {
            to_save.push((name.clone(), saved));
        }
        if now.saturating_duration_since(held.verified) >= VERIFY_EVERY {
            held.verified = now;
            to_verify.push(name.clone());
        }
    }
    for (name, saved) in to_save {
        save(shard, &name, saved).await;
    }
    shard.kafka_groups.held.borrow_mut().retain(|_, held| {
        let g = held.group.borrow();
        !(g.is_idle() && now.saturating_duration_since(held.used.get()) >= IDLE_EMPTY)
    });
    for name in to_verify {
        let op = KafkaGroupOp::Coordinator {
            group: name.clone(),
            candidate: me(shard),
        };
        match ask(shard, op).await {
            Ok(KafkaGroupAnswer::Coordinator(holder)) if holder == me(shard) => {}
            Ok(_) => shard.kafka_groups.drop_group(&name),
            // etcd out of reach: the commits' fencing still holds.
            Err(_) => {}
        }
    }
}

/// Who asks: the connection's principal, client id and address.
#[derive(Debug, Clone)]
pub struct Caller {
    /// Its principal.
    pub principal: Rc<str>,
    /// The request header's client id.
    pub client_id: String,
    /// Kafka's form of its address (`/127.0.0.1`).
    pub host: String,
}

/// A request that needs its group: runs `serve` on it if this shard
/// coordinates it, or answers `error(code)`.
pub fn with_group<F, Fut>(
    shard: &Rc<Shard>,
    api: i16,
    name: String,
    error: impl FnOnce(i16) -> Vec<u8> + 'static,
    serve: F,
) -> crate::reply::Dispatched
where
    F: FnOnce(Rc<Shard>, Rc<RefCell<Group>>) -> Fut + 'static,
    Fut: std::future::Future<Output = Vec<u8>> + 'static,
{
    let shard = shard.clone();
    crate::reply::Dispatched::Later(Box::pin(async move {
        let body = match coordinated(&shard, &name).await {
            Ok(group) => serve(shard.clone(), group).await,
            Err(code) => error(code),
        };
        Some(super::wire::answer(api, body, crate::reply::Payload::None))
    }))
}
