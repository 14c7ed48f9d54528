//! A failback's cut of a replicated partition, on its leader: the log is
//! cut back to where another cluster's history forked from it (a mirror's
//! copy promoted there; `handler/failback.rs`), and the leader leads a new
//! epoch that starts at the cut. Its followers then find, by the epochs
//! rule they follow after any election, that their bytes past the cut are
//! of an epoch the leader ended there, and cut theirs: a follower keeps
//! committed bytes against a leader of its own epoch
//! ([`super::rules::truncation_refused`]) but not against a newer one.
//! The high watermark comes down with the cut (what the cut removes was
//! committed in the old history only) and moves again as the followers
//! report in the new epoch.
//!
//! The new epoch's ISR is the leader alone: a follower holds the old
//! history until it has cut its log, so it may not be elected before it
//! has caught up in the new epoch and joined again (a leader lost in
//! between leaves the partition offline rather than hand it the bytes just
//! cut). A leader that dies between its cut and its new epoch leaves the
//! partition to a copy that still holds the bytes; the failback finds the
//! partition uncut when it runs again, and cuts it on the new leader.

use super::SharedReplica;
use crate::storage::io::Storage;
use crate::storage::partition_log;
use coordinator::replicas::PartitionState;

/// What a cut did on the leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cut {
    /// Nothing to do: the log ends at or before the cut, in an epoch that
    /// does not go past it.
    Done,
    /// Cut `bytes` (perhaps 0: the log ended at the cut in an epoch that
    /// began before it); the leader is to lead `next`, a new epoch
    /// starting at the cut, alone in the ISR.
    Cut {
        /// Bytes removed.
        bytes: u64,
        /// The state to propose: the same leader and ISR, a new epoch.
        next: PartitionState,
    },
}

/// Why a copy was not cut.
#[derive(Debug, thiserror::Error)]
pub enum CutError {
    /// This copy does not lead in its epoch.
    #[error("this copy does not lead the partition")]
    NotLeading,
    /// The cut is below where the log starts (retention removed it).
    #[error("the log starts at {start}, past the cut at {offset}")]
    BelowStart {
        /// Where the cut was asked for.
        offset: u64,
        /// Where the log starts.
        start: u64,
    },
    /// The log or its epochs file could not be written.
    #[error("{0}")]
    Storage(String),
}

/// Cuts the leading copy `replica` at `offset` and says which epoch to
/// lead next; the caller proposes it (a compare-and-set through the
/// registry, as any change of leadership).
pub async fn cut_leader<S: Storage>(
    replica: &SharedReplica<S>,
    offset: u64,
) -> Result<Cut, CutError> {
    let log = {
        let r = replica.borrow();
        if !r.leads() {
            return Err(CutError::NotLeading);
        }
        r.log.clone()
    };
    let (start, end) = {
        let l = log.borrow();
        (l.start_offset(), l.end_offset())
    };
    if offset < start {
        return Err(CutError::BelowStart { offset, start });
    }
    let began = replica.borrow().epochs.last().map_or(0, |(_, s)| s);
    if end < offset || (end == offset && began >= offset) {
        return Ok(Cut::Done);
    }
    partition_log::truncate(&log, offset)
        .await
        .map_err(|e| CutError::Storage(e.to_string()))?;
    let now = log.borrow().end_offset();
    let mut r = replica.borrow_mut();
    if r.epochs.truncate(offset) {
        let (storage, dir) = {
            let l = log.borrow();
            (l.storage().clone(), l.dir().to_path_buf())
        };
        r.epochs
            .store(&storage, &dir)
            .map_err(|e| CutError::Storage(format!("recording the leader epochs: {e}")))?;
    }
    // The followers hold the old history past the cut until they have
    // cut theirs: none is in sync with the new one, and none may be
    // elected with it (the leader's death now would hand the partition
    // the bytes just cut). Each joins again once it has caught up in the
    // new epoch, as after a restart.
    let others: Vec<_> = r
        .state
        .state
        .isr
        .iter()
        .copied()
        .filter(|b| *b != r.me)
        .collect();
    let mut next = r.state.state.shrink(&others);
    next.leader_epoch = (r.epochs.last_epoch().max(0) as u32).max(r.epoch()) + 1;
    next.transfer_to = None;
    tracing::warn!(partition = %r.label, offset, bytes_cut = end - now, epoch = next.leader_epoch, "failback: the log is cut where the other cluster's history forked; leading a new epoch from there");
    Ok(Cut::Cut {
        bytes: end - now,
        next,
    })
}
