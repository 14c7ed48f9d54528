//! Moving a partition's copies (`ringlog partitions reassign`, `ringlog
//! brokers decommission`), as the control thread does its part.
//!
//! A move is two rewrites of the topic's record, each a compare-and-set on
//! its revision, with the leader's work in between:
//!
//! 1. **begin** (any broker, on request): the partition's replicas become
//!    the old ones and the new ones, and `reassigning[p]` the target. The
//!    partition's state key is written first if it has none: a state
//!    without a key is computed from the replica set, which must not then
//!    count the new, empty copies as in sync. The new copies open empty and
//!    follow; the leader adds each to the ISR once it has caught up.
//! 2. **hand over** (the leader, if the target leaves it out): once the
//!    whole target is in sync, leadership goes to a target replica without
//!    losing a write (`replica::transfer`).
//! 3. **finish** (the leader, in the target, the whole target in sync):
//!    the record's replicas become the target. The copies that leave delete
//!    their data and drop out of the ISR.
//!
//! Every broker applies each record it sees ([`ShardMsg::TopicChanged`]).

use super::ControlPlane;
use crate::mailbox::{ControlError, ShardMsg};
use coordinator::registry::{MoveError, Registry, ServedWait, TopicRecord};
use coordinator::replicas::{PartitionState, PartitionUpdate, UpdateOutcome};
use protocol::codec::operations::Reassigned;
use protocol::types::{BrokerId, PartitionId};
use protocol::ErrorCode;

/// Attempts at a record rewrite that other rewrites keep beating.
const REWRITE_ATTEMPTS: usize = 8;

impl<R: Registry> ControlPlane<R> {
    /// Begins moving `partition` of `topic` to `target`.
    pub(super) async fn reassign(
        &mut self,
        topic: &str,
        partition: PartitionId,
        target: Vec<BrokerId>,
    ) -> Result<(Reassigned, Option<ServedWait>), ControlError> {
        let live: Vec<BrokerId> = self.brokers.iter().map(|b| b.broker_id).collect();
        if let Some(absent) = target.iter().find(|b| !live.contains(b)) {
            return Err(ControlError::new(
                ErrorCode::InvalidReplicas,
                format!("broker {absent} is not live (live brokers: {live:?}): a new copy needs a broker to catch up on"),
            ));
        }
        for _ in 0..REWRITE_ATTEMPTS {
            let Some((record, revision)) = self.registry.topic(topic).await? else {
                return Err(ControlError::new(
                    ErrorCode::UnknownTopic,
                    format!("no topic {topic:?}"),
                ));
            };
            let next = record
                .start_reassignment(partition, &target)
                .map_err(|why| {
                    let code = match why {
                        MoveError::NoPartition { .. } => ErrorCode::UnknownPartition,
                        MoveError::NotDistinct(_) | MoveError::BelowMinInsync { .. } => {
                            ErrorCode::InvalidReplicas
                        }
                    };
                    ControlError::new(code, why.to_string())
                })?;
            let Some(next) = next else {
                let answer = Reassigned {
                    topic: topic.to_string(),
                    partition,
                    replicas: record.replicas_of(partition),
                    moving_to: Vec::new(),
                };
                return Ok((answer, None));
            };
            self.fix_initial_state(&record, partition).await?;
            let Some(written) = self.registry.replace_topic(next.clone(), revision).await? else {
                continue;
            };
            tracing::info!(topic, partition, from = ?record.replicas_of(partition), to = ?target, "a partition's move began");
            let answer = Reassigned {
                topic: topic.to_string(),
                partition,
                replicas: next.replicas_of(partition),
                moving_to: next
                    .moving_to(partition)
                    .map(<[BrokerId]>::to_vec)
                    .unwrap_or_default(),
            };
            let wait = if self.apply_topic(next.clone()).await {
                self.wait_served(&next, written).await
            } else {
                None
            };
            return Ok((answer, wait));
        }
        Err(ControlError::new(
            ErrorCode::CoordinatorUnavailable,
            format!("topic {topic:?}'s record kept changing under the reassignment: retry"),
        ))
    }

    /// Writes `partition`'s state key if it has none, as the state its
    /// replicas before the move make (see the module's step 1).
    async fn fix_initial_state(
        &mut self,
        record: &TopicRecord,
        partition: PartitionId,
    ) -> Result<(), ControlError> {
        if !record.is_replicated() {
            // Made replicated now: each partition's one broker leads it.
            let disks = self
                .brokers
                .iter()
                .filter(|b| !b.data_dir_id.is_empty())
                .map(|b| (b.broker_id, b.data_dir_id.clone()))
                .collect();
            let state = PartitionState::initial(&record.replicas_of(partition), &disks);
            return self.create_state(record, partition, state).await;
        }
        let current = self.state_of(record, partition);
        if current.revision > 0 {
            return Ok(());
        }
        self.create_state(record, partition, current.state).await
    }

    async fn create_state(
        &mut self,
        record: &TopicRecord,
        partition: PartitionId,
        state: PartitionState,
    ) -> Result<(), ControlError> {
        let update = PartitionUpdate {
            partition,
            expected: 0,
            state,
        };
        let outcome = self
            .registry
            .update_partitions(&record.id, vec![update.clone()])
            .await?;
        match outcome.first() {
            // Written, or someone else wrote one first: either way it exists.
            Some(UpdateOutcome::Done(revision)) => {
                let state = coordinator::replicas::Versioned {
                    state: update.state,
                    revision: *revision,
                };
                self.learn_state(&record.id, partition, state).await;
                Ok(())
            }
            Some(UpdateOutcome::Conflict(Some(current))) => {
                self.learn_state(&record.id, partition, current.clone())
                    .await;
                Ok(())
            }
            _ => Err(ControlError::new(
                ErrorCode::UnknownTopic,
                format!("topic {:?} is gone", record.name),
            )),
        }
    }

    /// A leader saw the whole target of its partition's move in sync:
    /// the record's replicas become the target (if the move is still the
    /// one it saw).
    pub(super) async fn complete_reassignment(
        &mut self,
        topic: &str,
        topic_id: &str,
        partition: PartitionId,
        target: &[BrokerId],
    ) {
        for _ in 0..REWRITE_ATTEMPTS {
            let record = match self.registry.topic(topic).await {
                Ok(Some(found)) => found,
                Ok(None) => return,
                Err(error) => {
                    tracing::warn!(%error, topic, partition, "finishing a move; the leader asks again");
                    return;
                }
            };
            let (record, revision) = record;
            if record.id != topic_id || record.moving_to(partition) != Some(target) {
                return;
            }
            let Some(next) = record.complete_reassignment(partition) else {
                return;
            };
            match self.registry.replace_topic(next.clone(), revision).await {
                Ok(Some(_)) => {
                    tracing::info!(topic, partition, replicas = ?target, "a partition's move is done");
                    self.apply_topic(next).await;
                    return;
                }
                Ok(None) => continue,
                Err(error) => {
                    tracing::warn!(%error, topic, partition, "finishing a move; the leader asks again");
                    return;
                }
            }
        }
    }

    /// Has every shard take a changed record of a topic it has.
    pub(super) async fn change_everywhere(&mut self, record: &TopicRecord) -> bool {
        self.known.insert(record.name.clone(), record.clone());
        self.remember_topics();
        let mut applied = true;
        for shard in &self.shards {
            let (done, result) = flume::bounded(1);
            let msg = ShardMsg::TopicChanged {
                topic: record.clone(),
                done,
            };
            if shard.send_async(msg).await.is_err() {
                applied = false;
                continue;
            }
            match result.recv_async().await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    applied = false;
                    tracing::error!(topic = %record.name, %error, "applying a changed topic record");
                }
                Err(_) => applied = false,
            }
        }
        // New copies (and a topic made replicated) learn who leads.
        self.learn_topic_states(record).await;
        applied
    }
}
