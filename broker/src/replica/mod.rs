//! Replication: every partition of a topic with `replication_factor` R has
//! a copy on R brokers; one leads it (takes produces, serves fetches), the
//! others follow (fetch the leader's bytes and append them verbatim, at
//! the same offsets). Kafka's in-sync replicas, with etcd instead of a
//! controller ([`coordinator::replicas`]) and byte offsets that mean the
//! same on every replica.
//!
//! | file | what |
//! |------|------|
//! | `rules.rs` | the rules as pure functions (no I/O, no clock): who may lead, a follower's read or divergence, the high watermark, when a follower may truncate |
//! | `mod.rs` | [`Replica`]: one partition's copy, generic over the storage seam; its role and the transitions between roles |
//! | `epochs.rs` | the leader-epoch file (epoch → start offset) and the divergence rule |
//! | `leader.rs` | the leader's side: followers' progress, the high watermark, ISR shrink and expand, the bytes a follower is sent, when an acks=all produce is replicated |
//! | `apply.rs` | the follower's side of one answer: truncate, or append verbatim and flush, then take the high watermark |
//! | `cut.rs` | a failback's cut of a leader's log, and the new epoch that makes its followers cut theirs |
//! | `transfer.rs` | leadership handed over on purpose (a preferred election, a move off the leader) and a reassignment's end |
//! | `tasks.rs` | the leaders' loop: every 100 ms, the high watermark and the changes each leader proposes to the registry |
//! | `follower.rs` | the followers' loop: one connection per leader shard, one MultiFetch naming every partition followed there |
//! | `model_test.rs` | the rules under random schedules with lost disks (10,000 per run) |
//! | `copies_model_test.rs` | three copies on the in-memory disk running this code, with crashes, torn tails, pauses and elections (5,000 per run) |
//!
//! The state (`rules.rs`, [`Replica`], `leader.rs`, `transfer.rs`) knows
//! no socket, shard or registry: a broker's tasks (`tasks.rs`,
//! `follower.rs`) and the model test drive it alike.
//!
//! The rules, from the anchors' bugs (`shared/REPLICATION.md`): a follower
//! appends only whole, CRC-valid messages and rolls where the leader
//! rolled; truncation is by leader epoch, never by high watermark; a new
//! leader records its epoch's start before its first write; the high
//! watermark is the least flushed offset over the ISR and does not move
//! while the ISR is smaller than `min_insync_replicas`; a restarted
//! follower (a new incarnation) leaves the ISR until it has caught up.
//! Not `Send`: a shard's, like the log it replicates.

pub mod apply;
pub mod cut;
pub use crate::storage::epochs;
pub mod follower;
pub mod leader;
pub mod rules;
pub mod tasks;
pub mod transfer;

#[cfg(test)]
mod copies_model_test;
#[cfg(test)]
mod model_test;

use crate::storage::io::{DiskStorage, Storage};
use crate::storage::partition_log::Shared;
use coordinator::replicas::{PartitionState, Versioned};
use epochs::Epochs;
use protocol::types::{BrokerId, PartitionId};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

pub use rules::{is_isr_copy, may_not_lead};

/// A follower link's name: the leader broker and its shard.
pub type LinkKey = (BrokerId, protocol::types::ShardId);

/// A replica shared within its shard.
pub type SharedReplica<S = DiskStorage> = Rc<RefCell<Replica<S>>>;

/// What this copy does now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// It leads the partition in this epoch: produces and fetches come here.
    Leader(u32),
    /// It follows `leader` in this epoch.
    Follower {
        /// The leader.
        leader: BrokerId,
        /// Its epoch.
        epoch: u32,
    },
}

/// One partition's copy on this shard, over the storage its log is on (the
/// broker's disk; the in-memory disk in the model test).
pub struct Replica<S: Storage = DiskStorage> {
    /// `topic-partition`, for logs.
    pub label: String,
    /// The topic.
    pub topic: String,
    /// The topic's id (the partition state's key).
    pub topic_id: String,
    /// The partition.
    pub partition: PartitionId,
    /// The brokers with a copy, the preferred leader first.
    pub replicas: Vec<BrokerId>,
    /// While the partition moves: the replica set it moves to.
    pub moving_to: Option<Vec<BrokerId>>,
    /// A leadership handover under way (writes wait for it).
    pub transfer: Option<transfer::Transfer>,
    /// A handover that timed out is not tried again before this.
    pub transfer_retry_at: Option<std::time::Instant>,
    /// When this leader last asked the control thread to finish the move.
    pub completing_at: Option<std::time::Instant>,
    /// Fewest in-sync replicas an acks=all produce accepts.
    pub min_insync: u32,
    /// This broker.
    pub me: BrokerId,
    /// The partition's state as last learned, with its revision.
    pub state: Versioned,
    /// Which epoch wrote which bytes of this copy.
    pub epochs: Epochs,
    /// The log.
    pub log: Shared<S>,
    /// The leader's view of each follower (empty on a follower).
    pub followers: BTreeMap<BrokerId, leader::Progress>,
    /// An ISR change sent to the control thread and not answered yet:
    /// the state it proposes.
    pub proposed: Option<PartitionState>,
    /// The epoch this copy has recorded its leadership for (its start is
    /// in `epochs`): it takes writes only in this epoch.
    pub leading: Option<u32>,
    /// Bumped whenever the role or the leader changes: a follower's
    /// fetch answered in an older generation is dropped.
    pub generation: u64,
    /// When this copy began leading in its epoch.
    pub leading_since: std::time::Instant,
    /// The state came from the registry (until then the copy neither
    /// leads nor follows: after a restart the initial state may be stale).
    pub known: bool,
    /// This broker's data directory (its `data_dir_id`): the ISR names
    /// the directory each member holds its copy in.
    pub disk: String,
    /// This run's incarnation: a leader's ISR expand records it.
    pub run: String,
    /// The copy's directory was not there when this run started, for a
    /// topic that existed before (a new data directory, or the partition's
    /// directory removed): it holds none of the partition's history,
    /// whatever the registry says of this broker, until a leader adds this
    /// run's copy to the ISR.
    pub new_copy: bool,
    /// A leadership this copy may not take (reported once per state).
    pub refused: Option<(u32, &'static str)>,
}

impl<S: Storage> std::fmt::Debug for Replica<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("label", &self.label)
            .field("state", &self.state)
            .field("leading", &self.leading)
            .field("epochs", &self.epochs)
            .field("followers", &self.followers)
            .field("proposed", &self.proposed)
            .field("known", &self.known)
            .field("new_copy", &self.new_copy)
            .finish_non_exhaustive()
    }
}

impl<S: Storage> Replica<S> {
    /// A copy of `partition` in its initial state (the registry's own
    /// state follows in [`Replica::learn`]).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        topic: &str,
        topic_id: &str,
        partition: PartitionId,
        initial: PartitionState,
        replicas: Vec<BrokerId>,
        min_insync: u32,
        me: BrokerId,
        log: Shared<S>,
        epochs: Epochs,
    ) -> Replica<S> {
        let state = Versioned {
            state: initial,
            revision: 0,
        };
        let (label, now) = {
            let l = log.borrow();
            (l.label().to_string(), l.storage().now())
        };
        Replica {
            label,
            topic: topic.to_string(),
            topic_id: topic_id.to_string(),
            partition,
            replicas,
            moving_to: None,
            transfer: None,
            transfer_retry_at: None,
            completing_at: None,
            min_insync,
            me,
            state,
            epochs,
            log,
            followers: BTreeMap::new(),
            proposed: None,
            leading: None,
            generation: 0,
            leading_since: now,
            known: false,
            disk: String::new(),
            run: String::new(),
            new_copy: false,
            refused: None,
        }
    }

    /// True when this copy is the ISR member its state names: in the ISR,
    /// in the data directory it was in sync in (a new copy, on a state that
    /// records no directory for it, is not).
    pub fn is_isr_copy(&self) -> bool {
        is_isr_copy(&self.state.state, self.me, &self.disk, self.new_copy)
    }

    /// The state to propose when the registry names this copy an ISR
    /// member but it is not the one the ISR means (a new copy, or another
    /// data directory): out of the ISR, and if it leads, the leadership to
    /// another member in a new epoch (`PartitionState::leave_as_new_disk`).
    /// The control thread's restart makes the same change for a whole new
    /// data directory; this covers one partition's directory lost too, and
    /// whatever the restart could not write.
    pub fn leave_as_new_copy(&self, live: &dyn Fn(BrokerId) -> bool) -> Option<PartitionState> {
        if !self.known || self.proposed.is_some() || self.is_isr_copy() {
            return None;
        }
        self.state.state.leave_as_new_disk(self.me, live)
    }

    /// Why this copy may not lead the epoch its state gives it, if it may
    /// not: it is not the ISR's copy (a lost disk: leading would make an
    /// empty log the partition's history), or it led that epoch in an
    /// earlier run (recorded in its epochs file; that run's log may have
    /// ended further than this one's: the epoch must be new, see
    /// [`Replica::epoch_to_lead`]).
    pub fn may_not_lead(&self) -> Option<&'static str> {
        may_not_lead(
            &self.state.state,
            self.me,
            &self.disk,
            self.new_copy,
            self.epochs.last_epoch(),
        )
    }

    /// The state to propose when the registry names this copy the leader
    /// in an epoch it may not lead for the second reason of
    /// [`Replica::may_not_lead`]: the same leadership in an epoch newer
    /// than any this copy has recorded.
    pub fn epoch_to_lead(&self) -> Option<PartitionState> {
        if !self.known
            || self.state.state.leader != self.me
            || self.leading == Some(self.epoch())
            || self.proposed.is_some()
        {
            return None;
        }
        if !self.is_isr_copy() || self.epochs.last_epoch() < self.epoch() as i32 {
            return None;
        }
        let mut next = self.state.state.clone();
        next.leader_epoch = (self.epochs.last_epoch() as u32).max(self.epoch()) + 1;
        Some(next)
    }

    /// What this copy does in the state it knows.
    pub fn role(&self) -> Role {
        let s = &self.state.state;
        if s.leader == self.me {
            Role::Leader(s.leader_epoch)
        } else {
            Role::Follower {
                leader: s.leader,
                epoch: s.leader_epoch,
            }
        }
    }

    /// The leader this copy knows.
    pub fn leader(&self) -> BrokerId {
        self.state.state.leader
    }

    /// The leader epoch this copy knows.
    pub fn epoch(&self) -> u32 {
        self.state.state.leader_epoch
    }

    /// True when this copy leads and has recorded its epoch: it may take
    /// writes and answer fetches.
    pub fn leads(&self) -> bool {
        self.known && self.state.state.leader == self.me && self.leading == Some(self.epoch())
    }

    /// Takes a newer state of the partition (an older revision is
    /// ignored, so a late answer never undoes a newer change). Becoming the
    /// leader records the epoch's start — the log's end now — before
    /// anything else can be written in it. Returns true when it changed.
    pub fn learn(&mut self, state: Versioned) -> bool {
        if self.known
            && (state.revision < self.state.revision
                || (state.revision == self.state.revision && state.state == self.state.state))
        {
            return false;
        }
        self.known = true;
        let before = (self.leader(), self.epoch());
        self.state = state;
        if let Some(proposed) = &self.proposed {
            // Answered (ours or someone else's change): propose again later
            // from what is there now.
            if *proposed == self.state.state || self.epoch() != before.1 {
                self.proposed = None;
            }
        }
        if (self.leader(), self.epoch()) != before {
            self.generation += 1;
            self.followers.clear();
            self.proposed = None;
            self.transfer = None;
            self.completing_at = None;
        }
        // A leader added this run's copy: it is the ISR's from now on.
        if self.new_copy && self.state.state.incarnations.get(&self.me) == Some(&self.run) {
            self.new_copy = false;
            let l = self.log.borrow();
            crate::storage::new_copy::unmark(l.storage(), l.dir());
        }
        // A follower that rejoined in its new incarnation is not a restart
        // any more.
        for (broker, progress) in self.followers.iter_mut() {
            if self.state.state.incarnations.get(broker) == Some(&progress.incarnation) {
                progress.restarted = false;
            }
        }
        if self.state.state.leader == self.me && self.leading != Some(self.epoch()) {
            match self.may_not_lead() {
                None => self.start_leading(),
                Some(why) => {
                    if self.refused != Some((self.epoch(), why)) {
                        self.refused = Some((self.epoch(), why));
                        tracing::warn!(partition = %self.label, epoch = self.epoch(), isr = ?self.state.state.isr, "not leading: {why}");
                    }
                }
            }
        }
        true
    }

    /// Records `(epoch, log end)` durably, then takes writes in the epoch.
    fn start_leading(&mut self) {
        let epoch = self.epoch();
        // Pair assertion with `may_not_lead`: an empty copy on a new disk
        // never defines the partition's history.
        assert!(
            self.is_isr_copy(),
            "{}: leading a copy the ISR does not name",
            self.label
        );
        let end = self.log.borrow().end_offset();
        // Epoch 0 is the first leader's, the only one there has been: a copy
        // that knows no epoch yet holds only its bytes (a topic with one copy
        // that a reassignment made replicated has bytes from before).
        let start = if epoch == 0 && self.epochs.last().is_none() {
            self.log.borrow().start_offset()
        } else {
            end
        };
        if self.epochs.assign(epoch, start) {
            let (storage, dir) = {
                let l = self.log.borrow();
                (l.storage().clone(), l.dir().to_path_buf())
            };
            if let Err(error) = self.epochs.store(&storage, &dir) {
                // Not leading without it: a follower could not be told where
                // this epoch began.
                tracing::error!(partition = %self.label, epoch, %error, "recording the leader epoch failed; not leading");
                return;
            }
        }
        // Pair assertion with `may_not_lead` (no epoch this copy led
        // before): this epoch is the newest it knows, starting here.
        assert_eq!(
            self.epochs.last(),
            Some((epoch, start)),
            "{}: leading epoch {epoch} from {start}",
            self.label
        );
        tracing::info!(partition = %self.label, epoch, start_offset = start, isr = ?self.state.state.isr, "leading");
        self.leading = Some(epoch);
        self.log.borrow_mut().set_leader_epoch(epoch);
        self.leading_since = self.log.borrow().storage().now();
        self.followers.clear();
        // A leader alone in the ISR (an unclean election, min ISR 1)
        // publishes what it has flushed at once, not at its first check
        // 100 ms later: a consumer that saw it lead found the partition
        // empty in between (`disk_loss::r47_1_the_last_in_sync_copy…`,
        // once in CI). With followers it waits for their fetches, as ever.
        self.update_high_watermark();
    }
}
