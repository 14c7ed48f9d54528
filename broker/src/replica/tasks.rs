//! The leaders' task: every 100 ms a shard looks at the partitions it
//! leads — their high watermarks, the ISR changes and handovers they call
//! for — and proposes each change to the control thread, which writes it
//! to the registry as a compare-and-set. The decisions are the replica's
//! (`leader.rs`, `transfer.rs`, `rules.rs`); this file only carries them
//! to the registry and back. The followers' task is `follower.rs`.

use super::{transfer, SharedReplica};
use coordinator::replicas::PartitionState;
use coordinator::replicas::Versioned;
use protocol::types::BrokerId;
use std::rc::Rc;

/// How often a shard's leaders look at their followers: the high watermark
/// (a leader's own flush may have moved it), the ISR, handovers and moves.
const LEADER_CHECK: std::time::Duration = std::time::Duration::from_millis(100);

/// A shard's leaders, checked every 100 ms: each moves its high
/// watermark, and proposes the ISR change it calls for — else the handover
/// it is due ([`transfer`]) — one at a time per partition, to the control
/// thread, which writes it to the registry as a compare-and-set; the answer
/// (or someone else's change) comes back as the partition's new state. A
/// move whose target is all in sync is handed to the control thread to
/// finish.
pub async fn run_leaders(shard: Rc<crate::shard::Shard>) {
    let lag_max = std::time::Duration::from_millis(shard.config.replica_lag_time_max_ms);
    while !shard.stopping.get() {
        glommio::timer::sleep(LEADER_CHECK).await;
        let now = std::time::Instant::now();
        let live = |broker: BrokerId| {
            broker == shard.config.broker_id
                || shard.brokers.borrow().iter().any(|b| b.broker_id == broker)
        };
        let registered = |broker: BrokerId| {
            shard
                .brokers
                .borrow()
                .iter()
                .find(|b| b.broker_id == broker)
                .map(|b| (b.incarnation.clone(), b.data_dir_id.clone()))
        };
        for replica in shard.all_replicas() {
            let again = {
                let r = replica.borrow();
                r.leave_as_new_copy(&live).or_else(|| r.epoch_to_lead())
            };
            if let Some(state) = again {
                propose(&shard, &replica, state).await;
                continue;
            }
            let step = {
                let mut r = replica.borrow_mut();
                if !r.leads() {
                    continue;
                }
                r.update_high_watermark();
                // Its checkpoint is the flush timer's.
                shard.needs_timer(&r.log);
                match r.isr_change(now, lag_max, &live, &registered) {
                    Some(change) => transfer::Step::Propose(change),
                    None => r.transfer_step(now, &live),
                }
            };
            match step {
                transfer::Step::Wait => {}
                transfer::Step::Propose(state) => propose(&shard, &replica, state).await,
                transfer::Step::Complete(target) => {
                    let msg = {
                        let r = replica.borrow();
                        tracing::info!(partition = %r.label, ?target, "every replica of the move's target is in sync: finishing the move");
                        crate::mailbox::ControlMsg::CompleteReassignment {
                            topic: r.topic.clone(),
                            topic_id: r.topic_id.clone(),
                            partition: r.partition,
                            target,
                        }
                    };
                    let _ = shard.control.send_async(msg).await;
                }
            }
        }
    }
}

/// Sends a leader's change of its partition's state to the control thread
/// and learns the outcome (written, or someone else's change first).
pub async fn propose(
    shard: &Rc<crate::shard::Shard>,
    replica: &SharedReplica,
    state: PartitionState,
) {
    let (topic_id, partition, expected, before) = {
        let mut r = replica.borrow_mut();
        r.proposed = Some(state.clone());
        (
            r.topic_id.clone(),
            r.partition,
            r.state.revision,
            r.state.state.clone(),
        )
    };
    let shrink = state.isr.len() < before.isr.len();
    let expand = state.isr.len() > before.isr.len();
    if shrink || expand {
        tracing::info!(
            partition = %replica.borrow().label,
            from = ?before.isr,
            to = ?state.isr,
            "ISR change"
        );
    }
    let (reply, answer) = flume::bounded(1);
    let msg = crate::mailbox::ControlMsg::UpdatePartition {
        topic_id: topic_id.clone(),
        update: coordinator::replicas::PartitionUpdate {
            partition,
            expected,
            state: state.clone(),
        },
        reply,
    };
    if shard.control.send_async(msg).await.is_err() {
        replica.borrow_mut().proposed = None;
        return;
    }
    let outcome = answer.recv_async().await;
    let learned = match outcome {
        Ok(Ok(coordinator::replicas::UpdateOutcome::Done(revision))) => {
            if shrink {
                crate::metrics::bump(&shard.metrics.counters.isr_shrinks_total, 1);
            } else if expand {
                crate::metrics::bump(&shard.metrics.counters.isr_expands_total, 1);
            }
            Some(Versioned { state, revision })
        }
        Ok(Ok(coordinator::replicas::UpdateOutcome::Conflict(current))) => current,
        _ => None,
    };
    replica.borrow_mut().proposed = None;
    if let Some(learned) = learned {
        learn(shard, &topic_id, &[(partition, learned)]);
    }
}

/// The registry's news of a topic's partitions reaches this shard: each
/// copy learns its state, and the follower links follow the leaders.
pub fn learn(
    shard: &Rc<crate::shard::Shard>,
    topic_id: &str,
    states: &[(protocol::types::PartitionId, Versioned)],
) {
    if shard.learn_states(topic_id, states) {
        super::follower::reconcile(shard);
    }
}
