//! A follower applies its leader's answer for one partition: a diverging
//! answer truncates its log (never below what it knows is committed,
//! unless a newer leader asks: [`rules::truncation_refused`]); a chunk's
//! whole, CRC-checked messages are appended verbatim at the chunk's
//! offset, rolling where the leader's segment starts, the chunk's epoch
//! recorded at its first byte, and the flush awaited (acks=all counts
//! flushed copies); then the leader's high watermark is taken.
//!
//! Generic over the storage, so the model test (`copies_model_test.rs`)
//! applies answers to copies on the in-memory disk with this very code;
//! the link that fetches them is `follower.rs`.

use super::rules;
use super::SharedReplica;
use crate::storage::io::Storage;
use crate::storage::partition_log::{self, Shared};
use protocol::codec::multi_fetch::FetchedPart;
use protocol::message::MessageSetIter;
use protocol::ErrorCode;

/// What applying an answer did to the log, for the caller's bookkeeping
/// (the flush timer's list, metrics).
pub trait Applied<S: Storage> {
    /// `log` took `bytes` (0: only its high watermark moved, or it was
    /// truncated): it needs the flush timer (its policy, its checkpoint).
    fn touched(&self, log: &Shared<S>, bytes: u64);
}

/// Applies the leader's answer for one followed partition.
pub async fn apply<S: Storage>(
    replica: &SharedReplica<S>,
    answer: &FetchedPart,
    payload: &[u8],
    applied: &impl Applied<S>,
) -> Result<(), String> {
    if answer.error != ErrorCode::None {
        if answer.error == ErrorCode::OffsetOutOfRange {
            // The leader's log starts past this empty copy's end
            // (retention): begin there.
            let start = answer.offsets.start_offset;
            let log = replica.borrow().log.clone();
            let empty = {
                let l = log.borrow();
                l.end_offset() == l.start_offset() && l.end_offset() < start
            };
            if empty {
                return log
                    .borrow_mut()
                    .rebase_empty(start)
                    .map_err(|e| e.to_string());
            }
        }
        // NOT_LEADER, FENCED or UNKNOWN_LEADER_EPOCH: the registry's news
        // (a state change) is on its way; the partition waits for it.
        return Err(format!("{}: {}", answer.error, answer.message));
    }
    if let Some((epoch, leader_end)) = answer.diverging {
        return truncate(replica, epoch, leader_end).await;
    }
    let log = replica.borrow().log.clone();
    let offset = answer.offset;
    let hw = answer.offsets.flushed_offset;
    let chunk_epoch = answer.chunk_epoch;
    // Whole, valid messages only: a chunk may end in the middle of one.
    let mut iter = MessageSetIter::new(payload, offset);
    let mut count = 0u32;
    for message in iter.by_ref() {
        message.map_err(|e| format!("a damaged message from the leader: {e}"))?;
        count += 1;
    }
    let whole = iter.position();
    if whole > 0 {
        if log.borrow().end_offset() != offset {
            return Err(format!(
                "an answer for offset {offset}, but the copy ends at {}",
                log.borrow().end_offset()
            ));
        }
        if chunk_epoch >= 0 {
            let (storage, dir) = {
                let l = log.borrow();
                (l.storage().clone(), l.dir().to_path_buf())
            };
            let mut r = replica.borrow_mut();
            // A follower never records an epoch newer than its leader's
            // (the fetch named it, and the leader answers only in it).
            if chunk_epoch as u32 > r.epoch() {
                return Err(format!(
                    "a chunk of epoch {chunk_epoch} from a leader in epoch {}",
                    r.epoch()
                ));
            }
            if r.epochs.assign(chunk_epoch as u32, offset) {
                r.epochs.store(&storage, &dir).map_err(|e| e.to_string())?;
            }
        }
        let appended = partition_log::append_replica(
            &log,
            offset,
            &payload[..whole],
            count,
            answer.segment_base,
        )
        .map_err(|e| e.to_string())?;
        applied.touched(&log, whole as u64);
        // acks=all counts flushed copies (written ones on a write-caching
        // topic): the next fetch reports this one.
        let counted = if log.borrow().write_caching() {
            protocol::codec::AckMode::Written
        } else {
            protocol::codec::AckMode::Flushed
        };
        partition_log::stored(&log, appended, counted)
            .await
            .map_err(|e| format!("{e:?}"))?;
    }
    log.borrow_mut().set_high_watermark(hw);
    // The high watermark's checkpoint (`committed_floor`) is the timer's.
    applied.touched(&log, 0);
    Ok(())
}

/// A diverging answer: the log is cut to the end the leader gives for
/// `epoch`, bounded by this copy's own end for that epoch (Vanlightly's
/// follower rule), unless that would cut committed bytes for a leader that
/// is not newer.
async fn truncate<S: Storage>(
    replica: &SharedReplica<S>,
    epoch: i32,
    leader_end: u64,
) -> Result<(), String> {
    let log = replica.borrow().log.clone();
    let (own_end, floor, own_epoch, leader_epoch) = {
        let r = replica.borrow();
        let (end, floor) = {
            let l = r.log.borrow();
            (l.end_offset(), l.committed_floor())
        };
        (
            r.epochs.end_for(epoch, end).1,
            floor,
            r.epochs.last_epoch(),
            r.epoch(),
        )
    };
    let target = leader_end.min(own_end);
    if let Some(refusal) = rules::truncation_refused(target, floor, own_epoch, leader_epoch) {
        let r = replica.borrow();
        tracing::error!(partition = %r.label, leader = r.leader(), target, committed_floor = floor, own_epoch, leader_epoch, "{refusal}");
        return Err(refusal);
    }
    partition_log::truncate(&log, target)
        .await
        .map_err(|e| e.to_string())?;
    let (storage, dir, end) = {
        let l = log.borrow();
        (l.storage().clone(), l.dir().to_path_buf(), l.end_offset())
    };
    assert!(
        end <= target,
        "truncated to {target}, the log ends at {end}"
    );
    let mut r = replica.borrow_mut();
    if r.epochs.truncate(target) {
        r.epochs.store(&storage, &dir).map_err(|e| e.to_string())?;
    }
    Ok(())
}
