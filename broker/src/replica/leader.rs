//! The leader's side: each follower's progress as its fetches report it,
//! the high watermark it allows, and the ISR changes it calls for.
//!
//! A follower's fetch says where its copy ends (the fetch offset) and how
//! far it is flushed. The high watermark is the least flushed offset over
//! the ISR — the leader's own included — and over a member being added
//! (the *maximal* ISR while a change is in flight: Vanlightly §6.5.2); it
//! does not move while the ISR is smaller than `min_insync_replicas`
//! (KIP-966's strict min ISR). A follower is *caught up* when a fetch asks
//! for the leader's end as it was at the fetch before (Kafka's rule: under
//! steady produce no fetch ever asks for the end as it is). One that has
//! not been caught up for `replica_lag_time_max_ms`, whose broker left the
//! registry, or that restarted (a new incarnation, KIP-903) leaves the ISR,
//! as does one a finished move took out of the replicas; one outside that
//! has everything committed in this epoch joins again.

use super::rules::{self, FollowerRead, LeaderLog};
use super::{Replica, SharedReplica};
use crate::storage::io::Storage;
use crate::storage::partition_log::{self, FetchSlice, Shared};
use crate::storage::StorageError;
use coordinator::replicas::PartitionState;
use protocol::codec::PartitionOffsets;
use protocol::types::BrokerId;
use std::time::{Duration, Instant};

/// One follower as the leader sees it.
#[derive(Debug, Clone)]
pub struct Progress {
    /// Where its copy ends (its last fetch's offset).
    pub end: u64,
    /// How far its copy is flushed (at most `end`).
    pub flushed: u64,
    /// The incarnation its fetches carry.
    pub incarnation: String,
    /// When it last fetched.
    pub last_fetch: Instant,
    /// When it was last caught up.
    pub last_caught_up: Instant,
    /// The leader's end when its last fetch was answered.
    pub leader_end_at_last_fetch: u64,
    /// It came back as a new incarnation since it joined the ISR.
    pub restarted: bool,
}

impl<S: Storage> Replica<S> {
    /// Takes a follower's fetch: checks it against the epochs, records its
    /// progress, moves the high watermark, and says what to send back.
    pub fn follower_fetch(
        &mut self,
        follower: BrokerId,
        incarnation: &str,
        offset: u64,
        flushed: u64,
        last_fetched_epoch: i32,
        now: Instant,
    ) -> FollowerRead {
        let leader = {
            let l = self.log.borrow();
            LeaderLog {
                end: l.end_offset(),
                high_watermark: l.high_watermark().unwrap_or(0),
            }
        };
        let read = rules::follower_read(&self.epochs, leader, offset, last_fetched_epoch);
        if let FollowerRead::Diverging { .. } = read {
            return read;
        }
        let leader_end = leader.end;
        let progress = self.followers.entry(follower).or_insert_with(|| Progress {
            end: offset,
            flushed: 0,
            incarnation: incarnation.to_string(),
            last_fetch: now,
            // First heard of in this epoch: it has had since the
            // leadership began to catch up.
            last_caught_up: self.leading_since,
            leader_end_at_last_fetch: u64::MAX,
            restarted: false,
        });
        if progress.incarnation != incarnation {
            progress.incarnation = incarnation.to_string();
            progress.restarted = true;
        }
        if let Some(joined_as) = self.state.state.incarnations.get(&follower) {
            if joined_as != incarnation {
                progress.restarted = true;
            }
        }
        if offset >= leader_end {
            progress.last_caught_up = now;
        } else if offset >= progress.leader_end_at_last_fetch {
            progress.last_caught_up = progress.last_fetch;
        }
        progress.end = offset;
        progress.flushed = flushed.min(offset);
        debug_assert!(progress.flushed <= progress.end);
        progress.leader_end_at_last_fetch = leader_end;
        progress.last_fetch = now;
        self.update_high_watermark();
        read
    }

    /// Moves the high watermark to the least flushed offset over the
    /// (maximal) ISR, unless the ISR is below `min_insync_replicas`.
    pub fn update_high_watermark(&mut self) {
        if !self.leads() {
            return;
        }
        let isr = &self.state.state.isr;
        let mut members: Vec<BrokerId> = isr.clone();
        if let Some(proposed) = &self.proposed {
            members.extend(proposed.isr.iter().filter(|b| !isr.contains(b)));
        }
        // A write-caching topic counts what each member has written (a
        // follower appends, then fetches again: its fetch offset), others
        // what each has flushed.
        let caching = self.log.borrow().write_caching();
        let own = {
            let l = self.log.borrow();
            if caching {
                l.written_offset()
            } else {
                l.flushed_offset()
            }
        };
        let reported = members
            .into_iter()
            // A member a finished move removed leaves the ISR next; it no
            // longer fetches, and the target's members all count.
            .filter(|member| *member != self.me && self.replicas.contains(member))
            .map(|member| {
                self.followers
                    .get(&member)
                    .map(|p| if caching { p.end } else { p.flushed })
            });
        if let Some(hw) = rules::high_watermark(own, isr.len(), self.min_insync, reported) {
            let mut l = self.log.borrow_mut();
            let before = l.high_watermark().unwrap_or(0);
            l.set_high_watermark(hw);
            // What every ISR member has flushed never goes back while this
            // copy leads (set_high_watermark keeps the greater).
            assert!(l.high_watermark().unwrap_or(0) >= before);
        }
    }

    /// The ISR change this leader calls for now, if any: who leaves (lagging
    /// longer than `lag_max`, gone from the registry, or restarted), else
    /// who joins (has everything committed in this epoch, as fetched by the
    /// incarnation the registry lists for it now). One at a time.
    pub fn isr_change(
        &self,
        now: Instant,
        lag_max: Duration,
        live: &dyn Fn(BrokerId) -> bool,
        registered: &dyn Fn(BrokerId) -> Option<(String, String)>,
    ) -> Option<PartitionState> {
        if !self.leads() || self.proposed.is_some() {
            return None;
        }
        let state = &self.state.state;
        let leaving: Vec<BrokerId> = state
            .isr
            .iter()
            .copied()
            .filter(|&member| member != self.me)
            .filter(|&member| {
                // Gone from the registry, or from the replicas (a move
                // ended without it).
                if !live(member) || !self.replicas.contains(&member) {
                    return true;
                }
                // Registered from another data directory than the one it
                // was in sync in: a lost disk, holding nothing.
                let disk = registered(member).map(|(_, disk)| disk);
                if !state.copy_in_sync(member, disk.as_deref().filter(|d| !d.is_empty())) {
                    return true;
                }
                match self.followers.get(&member) {
                    Some(p) => p.restarted || now.duration_since(p.last_caught_up) > lag_max,
                    None => now.duration_since(self.leading_since) > lag_max,
                }
            })
            .collect();
        if !leaving.is_empty() {
            return Some(state.shrink(&leaving));
        }
        let hw = self.log.borrow().high_watermark().unwrap_or(0);
        let epoch_start = self.epochs.last().map_or(0, |(_, start)| start);
        self.followers
            .iter()
            .filter(|(b, _)| !state.in_sync(**b) && self.replicas.contains(b) && live(**b))
            // A progress recorded by an earlier run of the follower's
            // broker says nothing of its disk now: a follower killed and
            // restarted on an empty data directory rejoined the ISR within
            // 0.1 s on its predecessor's progress (before its own first
            // fetch), holding nothing.
            .filter_map(|(b, p)| match registered(*b) {
                Some((run, disk)) if run == p.incarnation => Some((b, p, disk)),
                _ => None,
            })
            .find(|(_, p, _)| p.end >= hw.max(epoch_start) && p.flushed >= hw)
            // The ISR records the directory it holds its copy in.
            .map(|(b, p, disk)| state.expand(*b, &p.incarnation, &disk))
    }
}

/// A partition's offsets as a follower is told them: the high watermark in
/// `flushed_offset`.
pub fn follower_offsets<S: Storage>(log: &Shared<S>) -> PartitionOffsets {
    let l = log.borrow();
    PartitionOffsets {
        start_offset: l.start_offset(),
        flushed_offset: l.high_watermark().unwrap_or(0).min(l.visible_offset()),
        end_offset: l.end_offset(),
    }
}

/// The bytes a follower's fetch at `offset` is sent (up to `bytes_max`):
/// what is written, within the epoch of its first byte — one epoch per
/// chunk, so the follower records each epoch's start where the leader did.
pub async fn read_for_follower<S: Storage>(
    replica: &SharedReplica<S>,
    offset: u64,
    bytes_max: u32,
) -> Result<Option<FetchSlice<S::File>>, StorageError> {
    let (log, limit) = {
        let r = replica.borrow();
        let written = r.log.borrow().written_offset();
        let limit = r
            .epochs
            .next_start_after(offset)
            .map_or(written, |next| next.min(written));
        (r.log.clone(), limit)
    };
    partition_log::read_below(&log, offset, bytes_max, Some(limit)).await
}

/// Why an acks=all produce is not acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotReplicated {
    /// The log failed (its reason).
    Poisoned(String),
    /// The leadership moved before the high watermark covered the
    /// messages: appended here, perhaps copied — their fate is unknown.
    Moved {
        /// The leader this copy knows now.
        leader: BrokerId,
        /// Its epoch.
        epoch: u32,
    },
}

/// Waits until the high watermark covers `end` (every ISR member flushed
/// it) in `epoch`, the leader epoch the messages were appended in, or says
/// why it never will here. The epoch is the append's, not the one this copy
/// knows once its own flush is done: a leader that lost its leadership
/// while it flushed, was truncated as a follower and leads again in a newer
/// epoch has other bytes at these offsets, and that epoch's high watermark
/// says nothing of the messages (found by `copies_model_test.rs`).
pub async fn replicated<S: Storage>(
    replica: &SharedReplica<S>,
    end: u64,
    epoch: u32,
) -> Result<(), NotReplicated> {
    let log = {
        let mut r = replica.borrow_mut();
        // The leader's own flush just completed: it may move the mark.
        r.update_high_watermark();
        r.log.clone()
    };
    let watermarks = log.borrow().watermarks();
    watermarks
        .wait_until(|| {
            let r = replica.borrow();
            let l = log.borrow();
            l.high_watermark().is_some_and(|hw| hw >= end)
                || l.poisoned().is_some()
                || !r.leads()
                || r.epoch() != epoch
        })
        .await;
    let r = replica.borrow();
    let l = log.borrow();
    // Covered only while this copy still leads in the epoch it appended
    // in: a follower's high watermark is the leader's word, not this
    // copy's, and a later epoch's may cover other bytes at these offsets.
    if r.leads() && r.epoch() == epoch && l.high_watermark().is_some_and(|hw| hw >= end) {
        return Ok(());
    }
    if let Some(reason) = l.poisoned() {
        return Err(NotReplicated::Poisoned(reason.to_string()));
    }
    Err(NotReplicated::Moved {
        leader: r.leader(),
        epoch: r.epoch(),
    })
}
