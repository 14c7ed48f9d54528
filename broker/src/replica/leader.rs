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

use super::Replica;
use coordinator::replicas::PartitionState;
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

/// How to answer a follower's fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowerRead {
    /// Its log diverged: it truncates to `end`, the end of `epoch` here
    /// (bounded by its own end for that epoch).
    Diverging {
        /// The largest epoch here not newer than the follower's last (0
        /// when none is: the follower keeps nothing past `end`).
        epoch: i32,
        /// Where that epoch ends here.
        end: u64,
    },
    /// Send bytes from the fetch offset, below `limit` (what is written,
    /// and not past the start of a later epoch), all of `chunk_epoch`.
    Read {
        /// The read's end.
        limit: u64,
        /// The epoch of every byte read.
        chunk_epoch: i32,
    },
}

impl Replica {
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
        let (leader_end, written) = {
            let l = self.log.borrow();
            (l.end_offset(), l.written_offset())
        };
        if last_fetched_epoch >= 0 {
            // The largest epoch here not newer than the follower's last, and
            // its end here: past it, or in a newer epoch than that, the
            // follower holds bytes this log does not (KIP-101, KIP-279).
            let (epoch, end) = self.epochs.end_for(last_fetched_epoch, leader_end);
            if epoch < last_fetched_epoch || end < offset {
                return FollowerRead::Diverging {
                    epoch: epoch.max(0),
                    end: end.min(offset),
                };
            }
        } else if offset > 0 {
            // Bytes but no epochs (a lost epoch file): only what is
            // committed is known to be the leader's.
            let hw = self.log.borrow().high_watermark().unwrap_or(0);
            if offset > hw {
                return FollowerRead::Diverging { epoch: 0, end: hw };
            }
        }
        if offset > leader_end {
            return FollowerRead::Diverging {
                epoch: self.epochs.last_epoch().max(0),
                end: leader_end,
            };
        }
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
        progress.leader_end_at_last_fetch = leader_end;
        progress.last_fetch = now;
        self.update_high_watermark();
        let limit = self
            .epochs
            .next_start_after(offset)
            .map_or(written, |next| next.min(written));
        FollowerRead::Read {
            limit,
            chunk_epoch: self.epochs.epoch_at(offset),
        }
    }

    /// Moves the high watermark to the least flushed offset over the
    /// (maximal) ISR, unless the ISR is below `min_insync_replicas`.
    pub fn update_high_watermark(&mut self) {
        if !self.leads() {
            return;
        }
        let isr = &self.state.state.isr;
        if (isr.len() as u32) < self.min_insync {
            return;
        }
        let mut members: Vec<BrokerId> = isr.clone();
        if let Some(proposed) = &self.proposed {
            members.extend(proposed.isr.iter().filter(|b| !isr.contains(b)));
        }
        // A write-caching topic counts what each member has written (a
        // follower appends, then fetches again: its fetch offset), others
        // what each has flushed.
        let caching = self.log.borrow().write_caching();
        let mut hw = {
            let l = self.log.borrow();
            if caching {
                l.written_offset()
            } else {
                l.flushed_offset()
            }
        };
        for member in members {
            // A member a finished move removed leaves the ISR next; it no
            // longer fetches, and the target's members all count.
            if member == self.me || !self.replicas.contains(&member) {
                continue;
            }
            match self.followers.get(&member) {
                Some(progress) if caching => hw = hw.min(progress.end),
                Some(progress) => hw = hw.min(progress.flushed),
                // Not heard from in this epoch: it may lack anything past
                // what was committed before.
                None => return,
            }
        }
        self.log.borrow_mut().set_high_watermark(hw);
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
