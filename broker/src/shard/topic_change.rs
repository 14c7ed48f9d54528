//! A topic's record changed under a running shard: a reassignment began
//! (new copies to open here, a topic with one copy made replicated) or
//! ended (copies no longer assigned here to delete), or partitions were
//! added (opened empty here if they are this shard's).
//!
//! A copy is deleted only once the record says its broker no longer holds
//! it, which its leader writes only when every replica of the target is in
//! sync (`replica::transfer`): the data is on the target's brokers first.

use super::{Shard, Topic};
use crate::storage::SharedLog;
use crate::topic_error::TopicError;
use coordinator::registry::TopicRecord;
use coordinator::replicas::Versioned;
use protocol::types::{BrokerId, PartitionId};
use std::rc::Rc;

impl Shard {
    /// Takes a changed record of a topic this shard has (any other is
    /// opened as new).
    #[expect(
        clippy::too_many_lines,
        reason = "a topic's change applied to every partition this shard holds: close, open, learn, in that order"
    )]
    pub async fn change_topic(self: &Rc<Self>, stored: &TopicRecord) -> Result<(), TopicError> {
        stored.check()?;
        let Some(topic) = self
            .topic(&stored.name)
            .filter(|t| t.borrow().id == stored.id)
        else {
            return self.open_topic(stored).await;
        };
        let me = self.config.broker_id;
        // Copies no longer assigned here: closed, then deleted.
        let removed: Vec<(PartitionId, SharedLog)> = {
            let mut t = topic.borrow_mut();
            let gone: Vec<PartitionId> = t
                .logs
                .keys()
                .copied()
                .filter(|p| !stored.has_replica(*p, me))
                .collect();
            gone.into_iter()
                .filter_map(|p| {
                    t.replicas.remove(&p);
                    t.logs.remove(&p).map(|log| (p, log))
                })
                .collect()
        };
        let mut dirs = Vec::new();
        for (partition, log) in &removed {
            log.borrow_mut().close_for_delete();
            dirs.push(log.borrow().dir().to_path_buf());
            tracing::info!(topic = %stored.name, partition, "the partition moved off this broker: its copy here is deleted");
        }
        if !dirs.is_empty() {
            crate::storage::sweep::delete_partition_dirs(&dirs)?;
        }
        // Settings changed (`ringlog topic alter --config`): every copy
        // here follows them from its next roll, flush and sweep on.
        let settings = self.config.stored_topic_settings(&stored.overrides())?;
        if settings != topic.borrow().settings || stored.overrides() != topic.borrow().overrides {
            let mut t = topic.borrow_mut();
            for log in t.logs.values() {
                log.borrow_mut().change_settings(settings);
            }
            t.settings = settings;
            t.overrides = stored.overrides();
            tracing::info!(topic = %stored.name, ?settings, "the topic's settings changed");
        }
        // A topic with one copy per partition made replicated: each copy
        // here becomes its partition's only replica, everything flushed
        // committed (it was the only copy).
        if stored.is_replicated() && !topic.borrow().is_replicated() {
            let mut t = topic.borrow_mut();
            let held: Vec<(PartitionId, SharedLog)> =
                t.logs.iter().map(|(p, l)| (*p, l.clone())).collect();
            for (partition, log) in held {
                let flushed = log.borrow().flushed_offset();
                log.borrow_mut().set_high_watermark(flushed);
                let replica = self.new_replica(stored, partition, &log);
                t.replicas.insert(partition, replica);
            }
            t.states = (0..stored.partitions)
                .map(|p| Versioned {
                    state: stored.initial_state(p),
                    revision: 0,
                })
                .collect();
            tracing::info!(topic = %stored.name, "the topic is replicated now (a reassignment)");
        }
        // Copies newly assigned here (and owned by this shard): opened
        // empty (or as a directory left here holds them) and following.
        let added: Vec<PartitionId> = {
            let t = topic.borrow();
            (0..stored.partitions)
                .filter(|p| {
                    stored.has_replica(*p, me)
                        && self.owner_of(&stored.name, *p) == self.id
                        && !t.logs.contains_key(p)
                })
                .collect()
        };
        for partition in added {
            let (log, replica) = self.open_partition(stored, partition, settings).await?;
            tracing::info!(topic = %stored.name, partition, end_offset = log.borrow().end_offset(), "the partition moves here: its copy follows the leader");
            let mut t = topic.borrow_mut();
            if let Some(replica) = replica {
                if let Some(state) = t.states.get(partition as usize).filter(|s| s.revision > 0) {
                    replica.borrow_mut().learn(state.clone());
                }
                t.replicas.insert(partition, replica);
            }
            t.logs.insert(partition, log);
        }
        {
            let mut t = topic.borrow_mut();
            apply_record(&mut t, stored);
        }
        self.metadata_changed();
        crate::replica::follower::reconcile(self);
        Ok(())
    }

    /// Where this shard's copies of a topic's `partitions` end and the high
    /// watermark each last learned.
    pub fn replica_positions(
        &self,
        topic_id: &str,
        partitions: &[PartitionId],
    ) -> Vec<(PartitionId, u64, u64)> {
        let topics = self.topics.borrow();
        let Some(topic) = topics.values().find(|t| t.borrow().id == topic_id) else {
            return Vec::new();
        };
        let t = topic.borrow();
        partitions
            .iter()
            .filter_map(|p| {
                let log = t.logs.get(p)?;
                let l = log.borrow();
                Some((
                    *p,
                    l.end_offset(),
                    l.high_watermark().unwrap_or(0).max(l.committed_floor()),
                ))
            })
            .collect()
    }
}

/// The record's placement, replica sets and moves, into the shard's topic
/// and its replicas.
fn apply_record(t: &mut Topic, stored: &TopicRecord) {
    // More partitions (`ringlog topic alter`): the new ones start in their
    // initial state, every replica in sync at offset 0.
    t.partitions = stored.partitions;
    if stored.is_replicated() {
        while t.states.len() < stored.partitions as usize {
            let p = t.states.len() as PartitionId;
            t.states.push(Versioned {
                state: stored.initial_state(p),
                revision: 0,
            });
        }
    }
    t.brokers = stored.brokers.clone();
    t.replica_sets = stored.replicas.clone();
    t.min_insync = stored.min_insync_replicas.max(1);
    t.write_caching = stored.write_caching;
    t.mirror_source = stored.mirror_source.clone();
    t.promoted = (stored.promoted_from.clone(), stored.promoted_ends.clone());
    t.reassigning = stored.reassigning.clone();
    for (partition, replica) in &t.replicas {
        let mut r = replica.borrow_mut();
        r.replicas = stored.replicas_of(*partition);
        r.min_insync = stored.min_insync_replicas.max(1);
        r.log.borrow_mut().set_write_caching(stored.write_caching);
        r.moving_to = stored.moving_to(*partition).map(<[BrokerId]>::to_vec);
    }
}
