//! Retention: whole closed, flushed segments by age or by the partition's
//! size, never the active one; and the paper's offset-before-time lookup,
//! at segment granularity.

use super::*;

/// A segment retention removed from the log: its file, renamed, and the
/// descriptor the log had open on it, if any (a fetch may hold it still).
#[derive(Debug)]
pub struct Retired<F> {
    /// Where the file is now (`….log.deleted`).
    pub path: PathBuf,
    /// The log's descriptor on it.
    pub file: Option<Rc<F>>,
}

impl<S: Storage> PartitionLog<S> {
    /// The first offset of the earliest segment appended to at or after
    /// `timestamp_ms` — so consuming from it yields every message appended
    /// since then — or the flushed offset if there is none (the paper's
    /// segment-granularity offset lookup).
    pub fn offset_before_time(&self, timestamp_ms: u64) -> u64 {
        self.segments
            .as_slice()
            .iter()
            .find(|s| s.last_append_ms >= timestamp_ms && s.size_bytes > 0)
            .map_or(self.flushed_offset, |s| {
                s.base_offset.min(self.flushed_offset)
            })
    }

    /// Removes closed, fully flushed segments that retention says to drop:
    /// older than `retention_ms`, or the oldest while the log exceeds
    /// `retention_bytes`. Never the active segment. Returns them after
    /// renaming them to `.deleted`; the caller unlinks them (the broker off
    /// the shard's thread, once fetches let go of the file: `reclaim.rs`).
    pub fn enforce_retention(&mut self, now_ms: u64) -> Vec<Retired<S::File>> {
        let mut removed = Vec::new();
        while self.segments.len() > 1 {
            let total = self.segments.total_bytes();
            let Some(oldest) = self.segments.as_slice().first() else {
                break;
            };
            // The next segment must hold flushed bytes, so that a segment
            // that reached the disk is left after any crash and the log
            // does not start again below offsets already handed out
            // (found by the model test).
            let fully_flushed = oldest.end_offset() < self.flushed_offset;
            let too_old = now_ms.saturating_sub(oldest.last_append_ms) > self.settings.retention_ms;
            let too_big = self.settings.retention_bytes > 0
                && total - oldest.size_bytes >= self.settings.retention_bytes;
            if !fully_flushed || !(too_old || too_big) {
                break;
            }
            let Some(segment) = self.segments.pop_oldest() else {
                break;
            };
            self.start_offset = segment.end_offset();
            let deleted = with_suffix(&segment.path, DELETED_SUFFIX);
            let path = match self.storage.rename(&segment.path, &deleted) {
                Ok(()) => deleted,
                Err(error) => {
                    tracing::warn!(segment = %segment.path.display(), %error, "retention: rename failed");
                    segment.path.clone()
                }
            };
            tracing::info!(
                partition = %self.label,
                base_offset = segment.base_offset,
                bytes = segment.size_bytes,
                start_offset = self.start_offset,
                "retention: deleted segment"
            );
            removed.push(Retired {
                path,
                file: segment.file,
            });
        }
        self.check_offsets();
        removed
    }
}
