//! What replication asks of a partition's log: a high watermark that
//! bounds what consumers see, a follower's verbatim append at the leader's
//! offsets (rolling where the leader rolled, so replicas compare file by
//! file), and truncation to a message boundary when a follower's log
//! diverged from its new leader's.

use super::*;

impl<S: Storage> PartitionLog<S> {
    /// The partition's offsets as reported to clients: where it starts,
    /// what they may read (`visible_offset`) and where it ends.
    pub fn offsets(&self) -> protocol::codec::PartitionOffsets {
        protocol::codec::PartitionOffsets {
            start_offset: self.start_offset(),
            flushed_offset: self.visible_offset(),
            end_offset: self.end_offset(),
        }
    }

    /// The end consumers see: the flushed offset, and on a replicated
    /// partition also the high watermark (what every in-sync replica has
    /// flushed). On one copy the two are the same rule as the paper's.
    pub fn visible_offset(&self) -> u64 {
        match self.high_watermark {
            Some(hw) if self.write_caching => hw.min(self.written_offset),
            Some(hw) => hw.min(self.flushed_offset),
            None => self.flushed_offset,
        }
    }

    /// A `write_caching` topic's copy: its high watermark counts written
    /// bytes, and what is written below it is visible without a flush.
    pub fn set_write_caching(&mut self, on: bool) {
        if self.write_caching != on {
            self.write_caching = on;
            self.watermarks.notify_all();
        }
    }

    /// True for a copy of a `write_caching` topic.
    pub fn write_caching(&self) -> bool {
        self.write_caching
    }

    /// The high watermark, if the partition is replicated.
    pub fn high_watermark(&self) -> Option<u64> {
        self.high_watermark
    }

    /// The highest high watermark this copy has learned, in this run or
    /// an earlier one: every byte below it was committed.
    pub fn committed_floor(&self) -> u64 {
        self.committed_floor
    }

    /// Makes the partition replicated (a high watermark from now on) at
    /// `hw`, or moves its high watermark: never backwards, never past the
    /// log's end. Wakes what waits on it (acks=all, consumers).
    pub fn set_high_watermark(&mut self, hw: u64) {
        let hw = hw.min(self.end_offset);
        if hw > self.committed_floor {
            // Written by the flush timer's checkpoint (the caller puts the
            // log on the timer's list).
            self.committed_floor = hw;
        }
        match self.high_watermark {
            Some(old) if old >= hw => {}
            _ => {
                self.high_watermark = Some(hw);
                self.watermarks.notify_all();
            }
        }
    }

    /// A follower's append: `bytes` (whole, CRC-checked messages of the
    /// leader's log) at `offset`, which must be this log's end, in the
    /// leader's segment that starts at `segment_base` (a new segment here
    /// when this log's active one is older).
    pub fn append_replica(
        &mut self,
        offset: u64,
        bytes: &[u8],
        messages: u32,
        segment_base: u64,
    ) -> Result<(u64, u64), StorageError> {
        if offset != self.end_offset || segment_base > offset {
            return Err(StorageError::Poisoned(format!(
                "{}: a replicated chunk at {offset} in the leader's segment {segment_base} does not follow this log's end {}",
                self.label, self.end_offset
            )));
        }
        self.append_in(bytes, messages, super::Placing::Copy { segment_base })
    }

    /// A mirror's append: as [`Self::append_replica`], of another
    /// cluster's bytes, whose format-2 batches take this copy's leader
    /// epoch.
    pub fn append_mirrored(
        &mut self,
        offset: u64,
        bytes: &[u8],
        messages: u32,
        segment_base: u64,
    ) -> Result<(u64, u64), StorageError> {
        if offset != self.end_offset || segment_base > offset {
            return Err(StorageError::Poisoned(format!(
                "{}: a mirrored chunk at {offset} in the source's segment {segment_base} does not follow this log's end {}",
                self.label, self.end_offset
            )));
        }
        self.append_in(bytes, messages, super::Placing::Mirror { segment_base })
    }

    /// A new follower of a leader whose log starts at `start` (retention
    /// removed what came before) begins there: an empty log takes `start`
    /// as its first offset. Fails on a log that holds bytes.
    pub fn rebase_empty(&mut self, start: u64) -> Result<(), StorageError> {
        if start == self.end_offset {
            return Ok(());
        }
        if self.end_offset != self.start_offset || !self.pending.is_empty() {
            return Err(StorageError::Poisoned(format!(
                "{}: cannot start the log at {start}: it holds {}..{}",
                self.label, self.start_offset, self.end_offset
            )));
        }
        if let Some(old) = self.segments.pop_newest() {
            match self.storage.remove_file(&old.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StorageError::io("removing", &old.path, e)),
            }
        }
        self.segments.push(Segment::new(&self.dir, start, now_ms()));
        self.start_offset = start;
        self.flushed_offset = start;
        self.written_offset = start;
        self.end_offset = start;
        self.cut_producers(start)?;
        self.flush_wanted = start;
        self.dir_unsynced = true;
        recovery::write_recovery_point(&self.storage, &self.dir, start, true)?;
        self.checkpointed_offset = start;
        self.check_offsets();
        Ok(())
    }

    /// Cuts the log back to `end` (a message boundary of the leader's log):
    /// segments past it go, the active one is truncated, durably. Only when
    /// nothing is pending or being written ([`truncate`] waits for that).
    #[expect(
        clippy::too_many_lines,
        reason = "a cut's bookkeeping: every offset and list the log keeps moves back together"
    )]
    fn cut(&mut self, end: u64) -> Result<(), StorageError> {
        if end > self.end_offset || end < self.start_offset {
            return Err(StorageError::OffsetOutOfRange {
                requested: end,
                start: self.start_offset,
                end: self.end_offset,
            });
        }
        if !self.pending.is_empty() || self.sync_running || self.flush_running {
            return Err(StorageError::Unavailable {
                reason: "the log is being written; truncating after it".into(),
                retry_in: Duration::from_millis(1),
            });
        }
        let cut = self.end_offset - end;
        if cut == 0 {
            return Ok(());
        }
        while self.segments.len() > 1
            && self.segments.active().is_some_and(|s| s.base_offset >= end)
        {
            let Some(segment) = self.segments.pop_newest() else {
                break;
            };
            match self.storage.remove_file(&segment.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StorageError::io("removing", &segment.path, e)),
            }
        }
        if let Some(active) = self.segments.active_mut() {
            let keep = end - active.base_offset;
            active.size_bytes = keep;
            active.index.truncate(keep);
            self.storage
                .truncate(&active.path, keep, true)
                .map_err(|e| StorageError::io("truncating", &active.path, e))?;
        }
        self.storage
            .sync_dir(&self.dir)
            .map_err(|e| StorageError::io("syncing", &self.dir, e))?;
        self.end_offset = end;
        self.written_offset = end;
        self.cut_producers(end)?;
        self.flushed_offset = self.flushed_offset.min(end);
        self.flush_wanted = self.flush_wanted.min(end);
        self.high_watermark = self.high_watermark.map(|hw| hw.min(end));
        if self.committed_floor > end {
            // Only a newer leader's word cuts committed bytes (an unclean
            // election): the floor follows, durably.
            self.committed_floor = end;
            recovery::write_offset_file(
                &self.storage,
                &self.dir,
                recovery::HIGH_WATERMARK_FILE,
                end,
                true,
            )?;
            self.floor_checkpointed = end;
        }
        self.appended_messages = self.flushed_messages;
        self.written_messages = self.flushed_messages;
        self.oldest_unflushed_at = None;
        self.dirty_files.clear();
        if self.checkpointed_offset > end {
            recovery::write_recovery_point(&self.storage, &self.dir, end, true)?;
            self.checkpointed_offset = end;
        }
        tracing::warn!(
            partition = %self.label,
            end_offset = end,
            bytes_cut = cut,
            "truncated the replica to where its leader's log diverged"
        );
        self.check_offsets();
        self.watermarks.notify_all();
        Ok(())
    }
}

/// Truncates a follower's log to `end`, after writing and flushing what it
/// holds (so no write lands past the cut).
pub async fn truncate<S: Storage>(log: &Shared<S>, end: u64) -> Result<(), StorageError> {
    loop {
        super::sync_all(log).await?;
        match log.borrow_mut().cut(end) {
            Err(StorageError::Unavailable { .. }) => {}
            other => return other,
        }
        let storage = log.borrow().storage.clone();
        storage.sleep(Duration::from_millis(1)).await;
    }
}

/// A replicated copy keeps no damaged message above what it knows was
/// committed (`committed_floor`). Recovery keeps a damaged message that has
/// valid ones after it, taking it for rot that consumers can step over
/// (`recovery.rs`); but on a replica such a message above the floor is the
/// unflushed tail of a crash (never acknowledged with acks=all) — and kept,
/// it would stall every follower for good, since a follower copies only
/// CRC-valid messages (found by `replica/copies_model_test.rs`: a leader's
/// power cut left a flipped byte with intact messages after it, and its
/// followers fetched that chunk forever). Cut there; the partition's leader
/// supplies whatever was committed. Damage below the floor is kept (rot in
/// committed bytes: cutting it would hand committed offsets out again).
/// Returns how many bytes were cut.
pub async fn cut_uncommitted_damage<S: Storage>(
    log: &Shared<S>,
    first_damaged: Option<u64>,
) -> Result<u64, StorageError> {
    let (floor, end) = {
        let l = log.borrow();
        (l.committed_floor(), l.end_offset())
    };
    let Some(at) = first_damaged.filter(|at| *at >= floor && *at < end) else {
        return Ok(0);
    };
    truncate(log, at).await?;
    Ok(end - log.borrow().end_offset())
}
