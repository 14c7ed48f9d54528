//! What the handlers add for a replicated partition: only its leader takes
//! produces and consumers' fetches (NOT_LEADER names the leader); a
//! request's leader epoch is checked (FENCED_LEADER_EPOCH when older,
//! UNKNOWN_LEADER_EPOCH when newer than this copy knows); acks=all is
//! refused with NOT_ENOUGH_REPLICAS before appending when the ISR is too
//! small, answered once the high watermark covers the set, and answered
//! NOT_ENOUGH_REPLICAS_AFTER_APPEND if the leadership moves first. A follower's
//! fetch is answered in `multi_fetch.rs`.

use super::Failure;
use crate::replica::leader::NotReplicated;
use crate::replica::SharedReplica;
use crate::shard::Shard;
use protocol::types::{BrokerId, PartitionId};
use protocol::ErrorCode;

/// NOT_LEADER, naming the leader this copy knows.
pub fn not_leader(topic: &str, partition: PartitionId, leader: BrokerId) -> Failure {
    Failure {
        owner_broker_id: Some(leader),
        ..Failure::new(
            ErrorCode::NotLeader,
            format!(
                "{topic}-{partition} is led by broker {leader}, not this one: refresh metadata"
            ),
        )
    }
}

/// Checks that this copy leads in the epoch the request names (-1: any).
pub fn check_leader(replica: &SharedReplica, requested_epoch: i32) -> Result<(), Failure> {
    let r = replica.borrow();
    let epoch = r.epoch() as i64;
    let requested = i64::from(requested_epoch);
    if requested >= 0 && requested > epoch {
        return Err(Failure::new(
            ErrorCode::UnknownLeaderEpoch,
            format!(
                "{}: leader epoch {requested} is newer than this broker knows ({epoch}); retry",
                r.label
            ),
        ));
    }
    if requested >= 0 && requested < epoch {
        return Err(Failure {
            owner_broker_id: Some(r.leader()),
            ..Failure::new(
                ErrorCode::FencedLeaderEpoch,
                format!(
                    "{}: leader epoch {requested} is fenced: the partition is in epoch {epoch}, led by broker {}; refresh metadata",
                    r.label,
                    r.leader()
                ),
            )
        });
    }
    if !r.leads() {
        if r.leader() == r.me {
            if let Some((_, why)) = r.refused {
                return Err(Failure::new(
                    ErrorCode::NotLeader,
                    format!(
                        "{} is offline: the registry names this broker its leader, but it does not lead: {why}",
                        r.label
                    ),
                ));
            }
        }
        return Err(not_leader(&r.topic, r.partition, r.leader()));
    }
    Ok(())
}

/// Refuses writes while this broker's etcd lease may have expired: another
/// broker may have been elected meanwhile (its epoch fences this one at
/// the followers, but a write here must not even be acknowledged on this
/// copy alone).
pub fn check_lease(shard: &Shard, replica: &SharedReplica) -> Result<(), Failure> {
    if shard.lease.as_ref().is_none_or(|lease| lease.live()) {
        return Ok(());
    }
    let r = replica.borrow();
    Err(Failure::new(
        ErrorCode::NotLeader,
        format!(
            "{}: this broker's etcd lease may have expired, so it takes no writes until the lease is renewed (another broker may lead now): refresh metadata",
            r.label
        ),
    ))
}

/// Refuses writes while the leader hands its partition over (a preferred
/// election, a move off this broker): they go to the new leader, which has
/// everything this one took, once it leads — within a few seconds.
pub fn check_transfer(replica: &SharedReplica) -> Result<(), Failure> {
    let r = replica.borrow();
    match r.transfer {
        None => Ok(()),
        Some(t) => Err(Failure {
            owner_broker_id: Some(t.to),
            ..Failure::new(
                ErrorCode::NotLeader,
                format!(
                    "{}: leadership is being handed over to broker {}; nothing was appended: refresh metadata and retry",
                    r.label, t.to
                ),
            )
        }),
    }
}

/// Refuses acks=all before anything is appended while fewer replicas than
/// the topic's `min_insync_replicas` are in sync.
pub fn check_insync(replica: &SharedReplica) -> Result<(), Failure> {
    let r = replica.borrow();
    let isr = r.state.state.isr.len() as u32;
    if isr < r.min_insync {
        return Err(Failure::new(
            ErrorCode::NotEnoughReplicas,
            format!(
                "{}: {isr} replica(s) in sync ({:?}), the topic needs {} for acks=all; nothing was appended",
                r.label, r.state.state.isr, r.min_insync
            ),
        ));
    }
    Ok(())
}

/// Waits until the high watermark covers `end` (every ISR member flushed
/// it), or says why it never will here
/// ([`crate::replica::leader::replicated`]).
pub async fn await_replicated(
    replica: &SharedReplica,
    end: u64,
    epoch: u32,
) -> Result<(), Failure> {
    let label = replica.borrow().label.clone();
    match crate::replica::leader::replicated(replica, end, epoch).await {
        Ok(()) => Ok(()),
        Err(NotReplicated::Poisoned(reason)) => {
            Err(Failure::new(ErrorCode::StorageFailed, reason))
        }
        // Appended here, perhaps copied: a code of its own, so the client
        // reports the batch's fate as unknown (every NOT_LEADER means
        // nothing was appended).
        Err(NotReplicated::Moved { leader, epoch }) => Err(Failure {
            owner_broker_id: Some(leader),
            ..Failure::new(
                ErrorCode::NotEnoughReplicasAfterAppend,
                format!(
                    "{label}: leadership moved (to broker {leader}, epoch {epoch}) before the messages were replicated; they may or may not be kept: retry"
                ),
            )
        }),
    }
}

pub use crate::replica::leader::follower_offsets;
