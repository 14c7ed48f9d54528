//! Leadership handed over on purpose, and a reassignment's end.
//!
//! A leader hands over when its partition's state asks it to
//! (`transfer_to`, written by `ringlog partitions elect-leaders` for the
//! preferred replica) or when a reassignment moves the partition off this
//! broker and every replica of the target is in sync. An election after a
//! crash may lose what only the old leader had (acks=written); a handover
//! need not: the leader stops taking writes (NOT_LEADER, retriable), waits
//! until the new leader has fetched and flushed everything it has, and only
//! then writes the new state (the new leader, epoch + 1). If that does not
//! happen within [`TRANSFER_TIMEOUT`] it gives up — writes resume, an asked
//! transfer is withdrawn from the state — and tries a move again after
//! [`TRANSFER_TIMEOUT`] more. Redpanda's leadership transfer works the same
//! way; Kafka's preferred election does not wait, and may drop acks=1
//! writes.
//!
//! A move ends when the leader is in the target and every target replica
//! is in sync: the leader asks the control thread to make the record's
//! replicas the target; the copies that leave then leave the ISR
//! ([`Replica::isr_change`]) and delete their data.

use super::Replica;
use coordinator::replicas::PartitionState;
use protocol::types::BrokerId;
use std::time::{Duration, Instant};

/// How long writes wait for a handover before it is given up.
pub const TRANSFER_TIMEOUT: Duration = Duration::from_secs(5);

/// How often a leader asks again to finish a move that has not finished.
const COMPLETE_AGAIN: Duration = Duration::from_secs(5);

/// A handover under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// The new leader.
    pub to: BrokerId,
    /// When writes began to wait.
    pub since: Instant,
}

/// What a leader's look at its handover calls for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing now.
    Wait,
    /// Write this state (the handover, or an asked one withdrawn).
    Propose(PartitionState),
    /// Ask the control thread to finish the move to this target.
    Complete(Vec<BrokerId>),
}

impl Replica {
    /// True while writes wait for a handover.
    pub fn transferring(&self) -> bool {
        self.transfer.is_some()
    }

    /// Who this leader should hand over to now: the one its state asks for,
    /// else, when the partition moves off this broker and the whole target
    /// is in sync, the target's first live replica.
    fn handover_target(&self, live: &dyn Fn(BrokerId) -> bool) -> Option<BrokerId> {
        let state = &self.state.state;
        if let Some(to) = state.transfer_to {
            return Some(to);
        }
        let target = self.moving_to.as_ref()?;
        if target.contains(&self.me) || !target.iter().all(|b| state.in_sync(*b)) {
            return None;
        }
        target.iter().copied().find(|b| live(*b))
    }

    /// A leader's look at handovers and moves, every check of its
    /// followers.
    pub fn transfer_step(&mut self, now: Instant, live: &dyn Fn(BrokerId) -> bool) -> Step {
        if !self.leads() || self.proposed.is_some() {
            return Step::Wait;
        }
        let asked = self.state.state.transfer_to.is_some();
        if !asked && self.transfer_retry_at.is_some_and(|at| now < at) {
            return Step::Wait;
        }
        let Some(to) = self.handover_target(live) else {
            self.transfer = None;
            return self.complete_step(now);
        };
        let state = self.state.state.clone();
        if !state.in_sync(to) || !live(to) {
            self.transfer = None;
            return if asked {
                tracing::warn!(partition = %self.label, to, "the replica asked to lead is not in sync or not live: the transfer is withdrawn");
                Step::Propose(state.without_transfer())
            } else {
                Step::Wait
            };
        }
        let transfer = match self.transfer {
            Some(t) if t.to == to => t,
            _ => {
                tracing::info!(partition = %self.label, to, "handing leadership over: writes wait until it has caught up");
                let t = Transfer { to, since: now };
                self.transfer = Some(t);
                t
            }
        };
        let end = self.log.borrow().end_offset();
        let caught_up = self
            .followers
            .get(&to)
            .is_some_and(|p| p.end >= end && p.flushed >= end);
        if caught_up {
            if let Some(next) = state.transfer(to) {
                tracing::info!(partition = %self.label, to, epoch = next.leader_epoch, end_offset = end, "handing leadership over: the new leader has everything");
                return Step::Propose(next);
            }
        }
        if now.duration_since(transfer.since) > TRANSFER_TIMEOUT {
            self.transfer = None;
            self.transfer_retry_at = Some(now + TRANSFER_TIMEOUT);
            tracing::warn!(partition = %self.label, to, waited_ms = TRANSFER_TIMEOUT.as_millis() as u64, "the new leader did not catch up: the handover is given up and writes resume");
            if asked {
                return Step::Propose(state.without_transfer());
            }
        }
        Step::Wait
    }

    /// A move whose target holds this leader and is all in sync is done:
    /// ask (again, now and then) for the record to say so.
    fn complete_step(&mut self, now: Instant) -> Step {
        let Some(target) = self.moving_to.clone() else {
            self.completing_at = None;
            return Step::Wait;
        };
        let state = &self.state.state;
        if !target.contains(&self.me) || !target.iter().all(|b| state.in_sync(*b)) {
            return Step::Wait;
        }
        if self
            .completing_at
            .is_some_and(|at| now.duration_since(at) < COMPLETE_AGAIN)
        {
            return Step::Wait;
        }
        self.completing_at = Some(now);
        Step::Complete(target)
    }
}
