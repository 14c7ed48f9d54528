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
use crate::storage::partition_log::{self, NotStored, Shared};
use crate::storage::StorageError;
use protocol::codec::multi_fetch::FetchedPart;
use protocol::stored::{whole_units, StoredError};
use protocol::ErrorCode;

/// Why a follower could not apply its leader's answer. Each leaves the
/// partition out of the link's requests for a moment, then it fetches
/// again from where its copy ends.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The leader refused the fetch (NOT_LEADER, FENCED_LEADER_EPOCH,
    /// UNKNOWN_LEADER_EPOCH: the registry's news is on its way).
    #[error("{code}: {message}")]
    Refused {
        /// The leader's code.
        code: ErrorCode,
        /// Its words.
        message: String,
    },
    /// A message of the chunk fails its checks.
    #[error("a damaged message from the leader: {0}")]
    Damaged(StoredError),
    /// The chunk does not start where the copy ends.
    #[error("an answer for offset {offset}, but the copy ends at {end}")]
    NotAtEnd {
        /// Where the chunk starts.
        offset: u64,
        /// Where the copy ends.
        end: u64,
    },
    /// The chunk says an epoch newer than the leader's own.
    #[error("a chunk of epoch {chunk} from a leader in epoch {leader}")]
    NewerEpoch {
        /// The chunk's epoch.
        chunk: i32,
        /// The leader's.
        leader: u32,
    },
    /// Cutting the log would remove committed bytes for a leader that is
    /// not newer ([`rules::truncation_refused`]).
    #[error("{0}")]
    TruncationRefused(String),
    /// The log failed.
    #[error("{0}")]
    Storage(#[from] StorageError),
    /// The append was not stored.
    #[error("{0:?}")]
    NotStored(NotStored),
    /// The epochs file could not be written.
    #[error("recording the leader epoch: {0}")]
    Epochs(std::io::Error),
}

/// What applying an answer did to the log, for the caller's bookkeeping
/// (the flush timer's list, metrics).
pub trait Applied<S: Storage> {
    /// `log` took `bytes` (0: only its high watermark moved, or it was
    /// truncated): it needs the flush timer (its policy, its checkpoint).
    fn touched(&self, log: &Shared<S>, bytes: u64);
}

/// Applies the leader's answer for one followed partition.
#[expect(
    clippy::too_many_lines,
    reason = "one answer applied in the order the rules need: refusal, divergence, checks, epoch, append, flush, high watermark"
)]
pub async fn apply<S: Storage>(
    replica: &SharedReplica<S>,
    answer: &FetchedPart,
    payload: &[u8],
    applied: &impl Applied<S>,
) -> Result<(), ApplyError> {
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
                return Ok(log.borrow_mut().rebase_empty(start)?);
            }
        }
        // NOT_LEADER, FENCED or UNKNOWN_LEADER_EPOCH: the registry's news
        // (a state change) is on its way; the partition waits for it.
        return Err(ApplyError::Refused {
            code: answer.error,
            message: answer.message.clone(),
        });
    }
    if let Some((epoch, leader_end)) = answer.diverging {
        return truncate(replica, epoch, leader_end).await;
    }
    let log = replica.borrow().log.clone();
    let offset = answer.offset;
    let hw = answer.offsets.flushed_offset;
    let chunk_epoch = answer.chunk_epoch;
    // Whole, valid units only (messages, or batches at their own
    // positions): a chunk may end in the middle of one.
    let format = log.borrow().settings().format;
    let (whole, count) = whole_units(format, payload, offset).map_err(ApplyError::Damaged)?;
    if whole > 0 {
        let end = log.borrow().end_offset();
        if end != offset {
            return Err(ApplyError::NotAtEnd { offset, end });
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
                return Err(ApplyError::NewerEpoch {
                    chunk: chunk_epoch,
                    leader: r.epoch(),
                });
            }
            if r.epochs.assign(chunk_epoch as u32, offset) {
                r.epochs.store(&storage, &dir).map_err(ApplyError::Epochs)?;
            }
        }
        let appended = partition_log::append_replica(
            &log,
            offset,
            &payload[..whole],
            count,
            answer.segment_base,
        )?;
        // Verbatim, at the leader's offsets: the chunk's bytes and nothing
        // else, where the copy ended.
        assert_eq!(
            (appended.base, appended.end),
            (offset, offset + whole as u64),
            "a follower's append moved its bytes"
        );
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
            .map_err(ApplyError::NotStored)?;
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
) -> Result<(), ApplyError> {
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
        return Err(ApplyError::TruncationRefused(refusal));
    }
    partition_log::truncate(&log, target).await?;
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
        r.epochs.store(&storage, &dir).map_err(ApplyError::Epochs)?;
    }
    Ok(())
}
