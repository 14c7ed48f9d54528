//! Replication's rules as pure functions: who may lead, what a follower's
//! fetch is answered with, where the high watermark stands and when a
//! follower may cut its log. No I/O, no clock, no shard: the copy's state
//! goes in, a decision comes out. [`super::Replica`] and the tasks around
//! it (`leader.rs`, `apply.rs`, `follower.rs`, `tasks.rs`) gather the
//! inputs and carry the decision out; the model tests (`model_test.rs`,
//! `copies_model_test.rs`) check the decisions under every interleaving.

use super::epochs::Epochs;
use coordinator::replicas::PartitionState;
use protocol::types::BrokerId;

/// True when `me`'s copy (in the data directory `disk`; `new_copy`: its
/// directory was not there when this run started) is the ISR member
/// `state` names: in the ISR, not new, and in the directory the ISR
/// records for it (a state without one: membership alone).
pub fn is_isr_copy(state: &PartitionState, me: BrokerId, disk: &str, new_copy: bool) -> bool {
    if !state.in_sync(me) || new_copy {
        return false;
    }
    match state.disks.get(&me) {
        Some(recorded) => disk.is_empty() || recorded == disk,
        None => true,
    }
}

/// Why `me`'s copy may not lead the epoch `state` gives it, if it may
/// not: it is not the ISR's copy (a lost disk: leading would make an
/// empty log the partition's history), or it led that epoch in an earlier
/// run (recorded in its epochs file, `last_epoch`, -1 for none; that
/// run's log may have ended further than this one's: the epoch must be
/// new).
pub fn may_not_lead(
    state: &PartitionState,
    me: BrokerId,
    disk: &str,
    new_copy: bool,
    last_epoch: i32,
) -> Option<&'static str> {
    if !is_isr_copy(state, me, disk, new_copy) {
        return Some("its copy is not the in-sync replica the registry names (its data directory is new, or its partition directory was not there when this run started): the partition waits for a member that holds its committed bytes, or `ringlog partitions elect --unclean`");
    }
    if last_epoch >= state.leader_epoch as i32 {
        return Some("it led this epoch in an earlier run: it leads again only in a new epoch");
    }
    None
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
    /// Send bytes from the fetch offset, all of `chunk_epoch`: what is
    /// written when the answer is read, not past the start of a later
    /// epoch (`leader::read_for_follower`).
    Read {
        /// The epoch of every byte read.
        chunk_epoch: i32,
    },
}

/// What the leader's log looks like to a follower's fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderLog {
    /// Where the log ends (appended, perhaps not written yet).
    pub end: u64,
    /// The high watermark.
    pub high_watermark: u64,
}

/// The answer to a follower at `offset` whose last epoch is
/// `last_fetched_epoch` (-1: it holds none), from a leader whose epochs are
/// `epochs`: past the end of the largest epoch not newer than the
/// follower's, or in a newer epoch than any the leader has, the follower
/// holds bytes this log does not (KIP-101, KIP-279) and truncates; else it
/// reads the epoch its offset is in.
pub fn follower_read(
    epochs: &Epochs,
    leader: LeaderLog,
    offset: u64,
    last_fetched_epoch: i32,
) -> FollowerRead {
    if last_fetched_epoch >= 0 {
        let (epoch, end) = epochs.end_for(last_fetched_epoch, leader.end);
        if epoch < last_fetched_epoch || end < offset {
            return FollowerRead::Diverging {
                epoch: epoch.max(0),
                end: end.min(offset),
            };
        }
    } else if offset > 0 && offset > leader.high_watermark {
        // Bytes but no epochs (a lost epoch file): only what is committed
        // is known to be the leader's.
        return FollowerRead::Diverging {
            epoch: 0,
            end: leader.high_watermark,
        };
    }
    if offset > leader.end {
        return FollowerRead::Diverging {
            epoch: epochs.last_epoch().max(0),
            end: leader.end,
        };
    }
    FollowerRead::Read {
        chunk_epoch: epochs.epoch_at(offset),
    }
}

/// The high watermark a leader may publish: the least of `own` (what it
/// has flushed, or written on a write-caching topic) and what each member
/// of `members` (the maximal ISR, the leader left out) reported in
/// `reported` — `None` when a member has not been heard from in this epoch
/// (it may lack anything past what was committed before), or when `isr`
/// members are fewer than `min_insync` (KIP-966's strict min ISR).
pub fn high_watermark(
    own: u64,
    isr: usize,
    min_insync: u32,
    members: impl IntoIterator<Item = Option<u64>>,
) -> Option<u64> {
    if (isr as u32) < min_insync {
        return None;
    }
    let mut hw = own;
    for reported in members {
        hw = hw.min(reported?);
    }
    Some(hw)
}

/// Why a follower must not cut its log to `target`, if it must not: the
/// cut would remove bytes below the high watermark it knows (`floor`,
/// kept across restarts) — committed, acknowledged to producers — and the
/// leader asking for it is not newer than this copy's last epoch. Such a
/// leader wrote (or copied) every committed byte itself, so a log that
/// lacks them lost them: a wiped disk leading in the old epoch. Only a
/// newer leader, elected from the ISR or by an operator's unclean
/// election, defines what the partition holds below the floor.
pub fn truncation_refused(
    target: u64,
    floor: u64,
    own_epoch: i32,
    leader_epoch: u32,
) -> Option<String> {
    if target >= floor || i64::from(leader_epoch) > i64::from(own_epoch) {
        return None;
    }
    Some(format!(
        "refusing to truncate to {target}, below the high watermark {floor} this copy knows: the leader is in epoch {leader_epoch}, not newer than this copy's {own_epoch}, yet lacks committed bytes (did it lose its disk?); the copy keeps them and waits for a leader that holds them"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_keeps_committed_bytes_unless_a_newer_leader_cuts_them() {
        // Above the floor: uncommitted bytes, cut for any leader.
        assert_eq!(truncation_refused(500, 400, 3, 3), None);
        // Below it, for a leader of this copy's own epoch (the wiped
        // leader of the outside test) or an older one: refused.
        let refused = truncation_refused(0, 360_000, 0, 0).unwrap();
        assert!(
            refused.contains("below the high watermark 360000"),
            "{refused}"
        );
        assert!(truncation_refused(100, 400, 5, 4).is_some());
        // A newer leader (an unclean election) may.
        assert_eq!(truncation_refused(100, 400, 3, 4), None);
        // A copy that knows no epoch follows any leader.
        assert_eq!(truncation_refused(0, 0, -1, 0), None);
    }

    #[test]
    fn a_follower_reads_one_epoch_at_a_time_and_truncates_where_its_epoch_ends_here() {
        let mut epochs = Epochs::default();
        epochs.assign(0, 0);
        epochs.assign(2, 300);
        let leader = LeaderLog {
            end: 500,
            high_watermark: 200,
        };
        // In step: epoch 0's bytes, then epoch 2's.
        assert_eq!(
            follower_read(&epochs, leader, 100, 0),
            FollowerRead::Read { chunk_epoch: 0 }
        );
        assert_eq!(
            follower_read(&epochs, leader, 300, 2),
            FollowerRead::Read { chunk_epoch: 2 }
        );
        // A follower that wrote epoch 1 (never here) past 300: epoch 0
        // ends at 300 here.
        assert_eq!(
            follower_read(&epochs, leader, 350, 1),
            FollowerRead::Diverging { epoch: 0, end: 300 }
        );
        // No epochs, bytes past the high watermark: back to it.
        assert_eq!(
            follower_read(&epochs, leader, 250, -1),
            FollowerRead::Diverging { epoch: 0, end: 200 }
        );
        // Past the leader's end in its own last epoch.
        assert_eq!(
            follower_read(&epochs, leader, 600, 2),
            FollowerRead::Diverging { epoch: 2, end: 500 }
        );
    }

    #[test]
    fn the_high_watermark_waits_for_every_member_and_the_minimum_isr() {
        assert_eq!(high_watermark(900, 3, 2, [Some(500), Some(700)]), Some(500));
        assert_eq!(high_watermark(400, 3, 2, [Some(500), Some(700)]), Some(400));
        // A member not heard from in this epoch holds it.
        assert_eq!(high_watermark(900, 3, 2, [Some(500), None]), None);
        // Fewer in sync than the topic needs: it does not move.
        assert_eq!(high_watermark(900, 1, 2, []), None);
    }
}
