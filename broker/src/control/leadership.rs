//! Who leads each replicated partition, as the control thread changes it:
//! the states it learns and tells the shards, elections when a leader's
//! broker is gone, a new epoch for the partitions a restarted broker led,
//! and the operator's elections — preferred (`ringlog partitions
//! elect-leaders`: the leader is asked to hand over, see
//! `replica::transfer`) and unclean (`ringlog partitions elect --unclean`:
//! this broker takes over an offline partition although it is not in
//! sync). Every change is a compare-and-set on the partition's state key;
//! of brokers that race, one wins and the others learn its state.

use super::ControlPlane;
use crate::mailbox::{ControlError, ShardMsg};
use coordinator::registry::{Registry, TopicRecord};
use coordinator::replicas::{PartitionState, PartitionUpdate, UpdateOutcome, Versioned};
use protocol::codec::operations::{ElectLeaders, Elected};
use protocol::types::BrokerId;
use protocol::ErrorCode;
use std::collections::BTreeMap;

impl<R: Registry> ControlPlane<R> {
    /// Reads a replicated topic's partition states (those without a key are
    /// in their initial state) and tells every shard.
    pub(super) async fn learn_topic_states(&mut self, record: &TopicRecord) {
        let states = self.read_topic_states(record).await;
        self.tell_states(&record.id, states).await;
    }

    /// Reads a replicated topic's partition states (those without a key are
    /// in their initial state) and remembers them.
    pub(super) async fn read_topic_states(
        &mut self,
        record: &TopicRecord,
    ) -> Vec<(u32, Versioned)> {
        let stored = match self.registry.partition_states(&record.id).await {
            Ok(stored) => stored,
            Err(error) => {
                // The watch's resync brings them later.
                tracing::warn!(topic = %record.name, %error, "reading the partitions' states");
                BTreeMap::new()
            }
        };
        let states: Vec<(u32, Versioned)> = (0..record.partitions)
            .map(|p| {
                let state = stored.get(&p).cloned().unwrap_or_else(|| Versioned {
                    state: record.initial_state(p),
                    revision: 0,
                });
                (p, state)
            })
            .collect();
        for (p, state) in &states {
            self.states.insert((record.id.clone(), *p), state.clone());
        }
        states
    }

    /// Tells every shard partition states of a topic.
    pub(super) async fn tell_states(&self, topic_id: &str, states: Vec<(u32, Versioned)>) {
        for shard in &self.shards {
            let msg = ShardMsg::PartitionStates {
                topic_id: topic_id.to_string(),
                states: states.clone(),
            };
            let _ = shard.send_async(msg).await;
        }
    }

    /// Takes a partition state from the registry (newer revisions only)
    /// and tells the shards.
    pub(super) async fn learn_state(&mut self, topic_id: &str, partition: u32, state: Versioned) {
        let key = (topic_id.to_string(), partition);
        if self
            .states
            .get(&key)
            .is_some_and(|known| known.revision >= state.revision)
        {
            return;
        }
        self.states.insert(key, state.clone());
        self.tell_states(topic_id, vec![(partition, state)]).await;
    }

    /// Every replicated partition's state as this broker knows it.
    pub(super) fn state_of(&self, record: &TopicRecord, partition: u32) -> Versioned {
        self.states
            .get(&(record.id.clone(), partition))
            .cloned()
            .unwrap_or_else(|| Versioned {
                state: record.initial_state(partition),
                revision: 0,
            })
    }

    /// The data directory `broker` registered with, if it is live (and
    /// says).
    fn disk_of(&self, broker: BrokerId) -> Option<&str> {
        self.brokers
            .iter()
            .find(|b| b.broker_id == broker)
            .map(|b| b.data_dir_id.as_str())
            .filter(|d| !d.is_empty())
    }

    /// True when `broker` is live and is the ISR member `state` names: in
    /// the ISR, registered from the data directory it was in sync in (this
    /// broker on a new directory is not, whatever an old state without
    /// directories says).
    pub(super) fn live_isr_copy(&self, state: &PartitionState, broker: BrokerId) -> bool {
        if !self.brokers.iter().any(|b| b.broker_id == broker) {
            return false;
        }
        if broker == self.me && self.fresh && !state.disks.contains_key(&broker) {
            return false;
        }
        state.copy_in_sync(broker, self.disk_of(broker))
    }

    /// True when this broker's copy of `record`'s partition `p` is new
    /// (`storage::new_copy`): its topic existed when this run started and
    /// its directory did not (or was marked), and no leader has added this
    /// run's copy to the ISR since.
    fn my_copy_is_new(&self, record: &TopicRecord, p: u32, state: &PartitionState) -> bool {
        self.topics_at_start.contains(&record.id)
            && self.copies_at_start.is_new(record, p)
            && state.incarnations.get(&self.me) != Some(&self.incarnation)
    }

    /// True when `state`'s leader serves it: live, and on the data
    /// directory the ISR names for it. A leader back on a new disk does
    /// not (it refuses to lead on an empty copy), so the ISR elects another.
    fn leader_serves(&self, state: &PartitionState) -> bool {
        self.live_isr_copy(state, state.leader)
    }

    /// Elections: for every replicated partition whose leader's broker is
    /// not live (or is back on a new disk) and whose ISR has this broker's
    /// copy, this broker tries to take over (epoch + 1, the old leader out
    /// of the ISR). Of the ISR members that try, the registry's
    /// compare-and-set lets one win; the others learn the winner. A
    /// partition whose whole ISR is gone stays offline (no unclean
    /// election).
    pub(super) async fn elect_where_leaderless(&mut self) {
        if self.foreign.is_some() {
            return;
        }
        let records: Vec<TopicRecord> = self
            .known
            .values()
            .filter(|t| t.is_replicated())
            .cloned()
            .collect();
        for record in records {
            let mut updates = Vec::new();
            for p in 0..record.partitions {
                let current = self.state_of(&record, p);
                // Only a broker that holds the partition: one a finished move
                // took out may still be listed in the ISR for a moment.
                if self.leader_serves(&current.state)
                    || !record.has_replica(p, self.me)
                    || !self.live_isr_copy(&current.state, self.me)
                    || self.my_copy_is_new(&record, p, &current.state)
                {
                    continue;
                }
                if let Some(next) = current.state.elect(self.me) {
                    updates.push(PartitionUpdate {
                        partition: p,
                        expected: current.revision,
                        state: next,
                    });
                }
            }
            if updates.is_empty() {
                continue;
            }
            self.write_states(&record.id, updates, "elected the leader")
                .await;
        }
    }

    /// Writes partition state changes; what was written and what another
    /// broker wrote first are learned alike.
    /// True for each update that was written.
    pub(super) async fn write_states(
        &mut self,
        topic_id: &str,
        updates: Vec<PartitionUpdate>,
        what: &str,
    ) -> Vec<bool> {
        let outcomes = match self
            .registry
            .update_partitions(topic_id, updates.clone())
            .await
        {
            Ok(outcomes) => outcomes,
            Err(error) => {
                tracing::warn!(%error, topic_id, "writing partition states; retried at the next change of the live brokers");
                return vec![false; updates.len()];
            }
        };
        let mut written = Vec::with_capacity(updates.len());
        for (update, outcome) in updates.into_iter().zip(outcomes) {
            written.push(matches!(outcome, UpdateOutcome::Done(_)));
            match outcome {
                UpdateOutcome::Done(revision) => {
                    tracing::info!(
                        topic_id,
                        partition = update.partition,
                        leader = update.state.leader,
                        epoch = update.state.leader_epoch,
                        isr = ?update.state.isr,
                        "{what}"
                    );
                    let state = Versioned {
                        state: update.state,
                        revision,
                    };
                    self.learn_state(topic_id, update.partition, state).await;
                }
                UpdateOutcome::Conflict(Some(current)) => {
                    self.learn_state(topic_id, update.partition, current).await;
                }
                UpdateOutcome::Conflict(None) => {}
            }
        }
        written
    }

    /// Every replicated partition with a copy here has a restart change
    /// to make ([`Self::restart_replicas`]).
    pub(super) fn plan_restart(&mut self) {
        if self.foreign.is_some() {
            return;
        }
        self.restart_pending = self
            .known
            .values()
            .filter(|t| t.is_replicated())
            .flat_map(|t| {
                (0..t.partitions)
                    .filter(|p| t.has_replica(*p, self.me))
                    .map(|p| (t.id.clone(), p))
            })
            .collect();
    }

    /// A new run of this broker takes its place in each replicated
    /// partition it holds a copy of:
    ///
    /// - a copy on a new data directory (a lost disk) that the ISR names
    ///   leaves the ISR, and if it led, hands the leadership to another
    ///   member in a new epoch — a live one if any, else one that is down
    ///   and takes over when it returns: an empty copy never leads or
    ///   defines history. The ISR's only member lost its disk: nothing
    ///   changes, the partition stays offline (the copy refuses to lead)
    ///   until `ringlog partitions elect --unclean`;
    /// - a partition it led gets a new epoch: another live ISR member takes
    ///   over, or it leads again in a new epoch, so a follower never
    ///   mistakes the new run's log for the old one's.
    ///
    /// What could not be written is tried again at the next change of the
    /// live brokers, until every partition's change is made.
    #[expect(
        clippy::too_many_lines,
        reason = "a restart's changes to every replicated partition, one compare-and-set batch, read top to bottom"
    )]
    pub(super) async fn restart_replicas(&mut self) {
        if self.foreign.is_some() || self.restart_pending.is_empty() {
            return;
        }
        let records: Vec<TopicRecord> = self
            .known
            .values()
            .filter(|t| t.is_replicated())
            .cloned()
            .collect();
        let live: Vec<BrokerId> = self.brokers.iter().map(|b| b.broker_id).collect();
        let is_live = |b: BrokerId| live.contains(&b);
        // Partitions of topics gone meanwhile have nothing to change.
        self.restart_pending
            .retain(|(id, _)| records.iter().any(|r| r.id == *id));
        for record in records {
            let mut updates = Vec::new();
            for p in 0..record.partitions {
                if !self.restart_pending.contains(&(record.id.clone(), p)) {
                    continue;
                }
                let current = self.state_of(&record, p);
                let state = &current.state;
                let new_disk = state.in_sync(self.me)
                    && (!self.live_isr_copy(state, self.me)
                        || self.my_copy_is_new(&record, p, state));
                let next = state.on_restart(
                    self.me,
                    new_disk,
                    &|b| self.live_isr_copy(state, b),
                    &is_live,
                );
                if new_disk && state.leader == self.me {
                    match &next {
                        Some(next) => tracing::error!(
                            topic = %record.name,
                            partition = p,
                            successor = next.leader,
                            successor_live = is_live(next.leader),
                            epoch = next.leader_epoch,
                            "this broker led the partition and its copy is new (a new data directory, or the partition's directory was missing): it leaves the ISR, and broker {} leads in a new epoch{}",
                            next.leader,
                            if is_live(next.leader) { "" } else { " once it returns: the partition is offline until then (or `ringlog partitions elect --unclean`)" }
                        ),
                        None => tracing::error!(
                            topic = %record.name,
                            partition = p,
                            "this broker led the partition, its copy is new (a new data directory, or the partition's directory was missing), and it was the only in-sync replica: the partition stays offline (nothing here holds its committed bytes) until an operator accepts the loss with `ringlog partitions elect --unclean`"
                        ),
                    }
                } else if new_disk && next.is_some() {
                    tracing::warn!(topic = %record.name, partition = p, "this broker's copy is new (a new data directory, or the partition's directory was missing): it leaves the ISR and catches up from the leader");
                }
                match next {
                    Some(next) => updates.push(PartitionUpdate {
                        partition: p,
                        expected: current.revision,
                        state: next,
                    }),
                    None => {
                        self.restart_pending.remove(&(record.id.clone(), p));
                    }
                }
            }
            if updates.is_empty() {
                continue;
            }
            let written = self
                .write_states(&record.id, updates.clone(), "restarted: a new epoch")
                .await;
            for (update, ok) in updates.iter().zip(written) {
                // A conflict means someone else changed the state first:
                // the state learned from it is looked at again next time.
                if ok {
                    self.restart_pending
                        .remove(&(record.id.clone(), update.partition));
                }
            }
        }
    }

    /// The operator's elections of a topic's partitions; each partition's
    /// outcome.
    #[expect(
        clippy::too_many_lines,
        reason = "an election's rounds: candidates, the batch of compare-and-sets, the answers; one transaction's life"
    )]
    pub(super) async fn elect_leaders(
        &mut self,
        request: ElectLeaders,
    ) -> Result<Vec<Elected>, ControlError> {
        let Some(record) = self.known.get(&request.topic).cloned() else {
            return Err(ControlError::new(
                ErrorCode::UnknownTopic,
                format!("no topic {:?}", request.topic),
            ));
        };
        if !record.is_replicated() {
            return Err(ControlError::new(
                ErrorCode::ElectionNotPossible,
                format!(
                    "topic {:?} has one copy per partition: it has no leaders to elect",
                    record.name
                ),
            ));
        }
        let partitions: Vec<u32> = if request.partitions.is_empty() {
            (0..record.partitions).collect()
        } else {
            request.partitions.clone()
        };
        if let Some(p) = partitions.iter().find(|p| **p >= record.partitions) {
            return Err(ControlError::new(
                ErrorCode::UnknownPartition,
                format!(
                    "topic {:?} has {} partitions, not {p}",
                    record.name, record.partitions
                ),
            ));
        }
        let live: Vec<BrokerId> = self.brokers.iter().map(|b| b.broker_id).collect();
        let positions = if request.unclean {
            self.replica_positions(&record.id, &partitions).await
        } else {
            BTreeMap::new()
        };
        let mut answers = Vec::new();
        let mut updates = Vec::new();
        for &p in &partitions {
            let current = self.state_of(&record, p);
            let position = positions.get(&p).copied();
            let planned = if request.unclean {
                self.plan_unclean(&record, p, &current.state, &live, position)
            } else {
                plan_preferred(&record, p, &current.state, &live)
            };
            let mut answer = Elected {
                partition: p,
                error: ErrorCode::None,
                message: String::new(),
                leader: current.state.leader,
                leader_epoch: current.state.leader_epoch as i32,
                end_offset: position.map_or(0, |(end, _)| end),
                high_watermark: position.map_or(0, |(_, hw)| hw),
            };
            match planned {
                Err(why) => {
                    answer.error = ErrorCode::ElectionNotPossible;
                    answer.message = why.to_string();
                }
                Ok(None) => {
                    answer.message = format!("broker {} leads already", current.state.leader);
                }
                Ok(Some((next, what))) => {
                    answer.message = what;
                    if !request.dry_run {
                        updates.push(PartitionUpdate {
                            partition: p,
                            expected: current.revision,
                            state: next,
                        });
                    }
                }
            }
            answers.push(answer);
        }
        if !updates.is_empty() {
            let what = if request.unclean {
                "unclean election: this broker leads, although it was not in sync"
            } else {
                "asked the leader to hand over to the preferred replica"
            };
            let written = self.write_states(&record.id, updates.clone(), what).await;
            for (update, ok) in updates.iter().zip(written) {
                let Some(answer) = answers.iter_mut().find(|a| a.partition == update.partition)
                else {
                    continue;
                };
                let now = self.state_of(&record, update.partition).state;
                answer.leader = now.leader;
                answer.leader_epoch = now.leader_epoch as i32;
                if !ok {
                    answer.error = ErrorCode::ElectionNotPossible;
                    answer.message = format!(
                        "the partition's state changed meanwhile (broker {} leads in epoch {}): ask again",
                        now.leader, now.leader_epoch
                    );
                } else if request.unclean {
                    tracing::warn!(
                        topic = %record.name,
                        partition = update.partition,
                        epoch = now.leader_epoch,
                        end_offset = answer.end_offset,
                        high_watermark_seen = answer.high_watermark,
                        bytes_lost_at_least = answer.high_watermark.saturating_sub(answer.end_offset),
                        "unclean election: what only the lost in-sync replicas held is lost"
                    );
                }
            }
        }
        Ok(answers)
    }

    /// An unclean election of this broker for `p`, or why not: the
    /// partition must be offline (its leader gone, no in-sync replica live)
    /// and this broker must hold a copy.
    fn plan_unclean(
        &self,
        record: &TopicRecord,
        p: u32,
        state: &PartitionState,
        live: &[BrokerId],
        position: Option<(u64, u64)>,
    ) -> Result<Option<(PartitionState, String)>, NotElected> {
        if self.leader_serves(state) {
            return Err(NotElected::LeaderServes(state.leader));
        }
        // A member back on a new disk holds nothing: it does not count.
        if let Some(member) = state
            .isr
            .iter()
            .find(|b| live.contains(b) && self.live_isr_copy(state, **b))
        {
            return Err(NotElected::InSyncLive(*member));
        }
        if !record.has_replica(p, self.me) || position.is_none() {
            return Err(NotElected::NoCopyHere {
                me: self.me,
                replicas: record.replicas_of(p).to_vec(),
            });
        }
        let (end, hw) = position.unwrap_or_default();
        Ok(Some((
            state.elect_unclean(self.me, self.disk_of(self.me).unwrap_or_default()),
            format!(
                "broker {} leads, unclean: its copy ends at {end}; the high watermark it last saw was {hw}, so at least {} committed bytes are lost, and whatever the in-sync replicas {:?} held past it",
                self.me,
                hw.saturating_sub(end),
                state.isr
            ),
        )))
    }

    /// Where this broker's copies of `partitions` end, and the high
    /// watermark each last learned, from the shards that hold them.
    async fn replica_positions(
        &self,
        topic_id: &str,
        partitions: &[u32],
    ) -> BTreeMap<u32, (u64, u64)> {
        let mut positions = BTreeMap::new();
        for shard in &self.shards {
            let (reply, answer) = flume::bounded(1);
            let msg = ShardMsg::ReplicaPositions {
                topic_id: topic_id.to_string(),
                partitions: partitions.to_vec(),
                reply,
            };
            if shard.send_async(msg).await.is_err() {
                continue;
            }
            if let Ok(held) = answer.recv_async().await {
                for (p, end, hw) in held {
                    positions.insert(p, (end, hw));
                }
            }
        }
        positions
    }
}

/// A preferred election for `p`, or why not: its first replica must be
/// live and in sync, and the leader live (to hand over; a partition without
/// one gets a leader by itself).
fn plan_preferred(
    record: &TopicRecord,
    p: u32,
    state: &PartitionState,
    live: &[BrokerId],
) -> Result<Option<(PartitionState, String)>, NotElected> {
    let preferred = record.replicas_of(p).first().copied().unwrap_or(0);
    if state.leader == preferred {
        return Ok(None);
    }
    if !live.contains(&preferred) {
        return Err(NotElected::PreferredNotLive(preferred));
    }
    if !live.contains(&state.leader) {
        return Err(NotElected::LeaderNotLive(state.leader));
    }
    match state.ask_transfer(preferred) {
        Some(next) => Ok(Some((
            next,
            format!(
                "broker {} hands over to broker {preferred} once it has caught up",
                state.leader
            ),
        ))),
        None => Err(NotElected::PreferredNotInSync {
            preferred,
            isr: state.isr.clone(),
        }),
    }
}

/// Why an election was not held for a partition (the answer's message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum NotElected {
    /// Unclean: the leader is live and serves.
    #[error(
        "broker {0} leads it and is live: an unclean election is only for an offline partition"
    )]
    LeaderServes(BrokerId),
    /// Unclean: a live in-sync replica takes over without losing data.
    #[error("broker {0} is in sync and live: it takes over by itself, losing nothing")]
    InSyncLive(BrokerId),
    /// Unclean: this broker has nothing to lead with.
    #[error("broker {me} holds no copy of it (its replicas: {replicas:?}): send the election to one that does")]
    NoCopyHere {
        /// This broker.
        me: BrokerId,
        /// The partition's replicas.
        replicas: Vec<BrokerId>,
    },
    /// Preferred: the first replica is not live.
    #[error("the preferred replica, broker {0}, is not live")]
    PreferredNotLive(BrokerId),
    /// Preferred: no live leader to hand over.
    #[error("its leader, broker {0}, is not live: an in-sync replica takes over by itself")]
    LeaderNotLive(BrokerId),
    /// Preferred: the first replica is behind.
    #[error("the preferred replica, broker {preferred}, is not in sync (ISR {isr:?}); it is elected once it is")]
    PreferredNotInSync {
        /// The first replica.
        preferred: BrokerId,
        /// The ISR.
        isr: Vec<BrokerId>,
    },
}
