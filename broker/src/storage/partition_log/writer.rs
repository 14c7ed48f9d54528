//! The log's write policy and its two tasks: the *writer*, which hands
//! pending chunks to the disk (one at a time per partition, in turns with
//! the shard's other writers), and *flush rounds*, which fdatasync what was
//! written and move the flushed offset (one in flight per partition; the
//! requests that arrive meanwhile are covered together by the next: group
//! commit).

use super::*;
/// Appends a validated message set (see [`PartitionLog::append`]) and
/// starts what its acknowledgement needs — the log's write policy, in one
/// place:
///
/// - `acks = flushed`: a flush round now (group commit: requests that arrive
///   while one is in flight are covered together by the next round), not at
///   the flush policy's next deadline (issue 9, item 3);
/// - `acks = written`: the writer now;
/// - `acks = none` (the paper's mode): the writer once a chunk is full, a
///   flush once `flush_messages` are waiting; [`tick`] does the rest when
///   `flush_interval_ms` passes.
pub fn append<S: Storage>(
    log: &Shared<S>,
    bytes: &[u8],
    messages: u32,
    acks: AckMode,
) -> Result<Appended, StorageError> {
    append_with(log, acks, |l| l.append(bytes, messages))
}

/// Appends with `place` (an ordinary or a mirror's append), then starts the
/// writer or a flush as `acks` and the topic's flush policy require.
fn append_with<S: Storage>(
    log: &Shared<S>,
    acks: AckMode,
    place: impl FnOnce(&mut PartitionLog<S>) -> Result<(u64, u64), StorageError>,
) -> Result<Appended, StorageError> {
    let (base, end, epoch, flush_now, chunk_full, append_time) = {
        let mut l = log.borrow_mut();
        l.stamped_time = None;
        let (base, end) = place(&mut l)?;
        if acks == AckMode::Flushed {
            // Its acknowledgement waits for a round that covers `end`; the
            // policy's rounds need only cover what is written by then.
            l.flush_wanted = l.flush_wanted.max(end);
        }
        (
            base,
            end,
            l.epoch(),
            l.flush_count_due(),
            l.pending_bytes() >= WRITE_CHUNK_BYTES,
            l.stamped_time.take(),
        )
    };
    if flush_now || acks == AckMode::Flushed {
        request_sync(log, true);
    } else if chunk_full || acks == AckMode::Written {
        request_sync(log, false);
    }
    flush_for_waiting_fetches(log);
    Ok(Appended {
        base,
        end,
        epoch,
        append_time,
    })
}

/// A retried batch the log holds already at `[base, end)` (an idempotent
/// producer's duplicate): what its acknowledgement waits for, as if it had
/// just been appended, with the writer or a flush started as `acks`
/// requires (the first attempt may have asked for less).
pub fn appended_before<S: Storage>(
    log: &Shared<S>,
    base: u64,
    end: u64,
    acks: AckMode,
) -> Appended {
    let (epoch, flush, write) = {
        let mut l = log.borrow_mut();
        let flush = acks == AckMode::Flushed && l.flushed_offset < end;
        if flush {
            l.flush_wanted = l.flush_wanted.max(end);
        }
        (l.epoch(), flush, l.written_offset < end)
    };
    if flush {
        request_sync(log, true);
    } else if write && acks != AckMode::None {
        request_sync(log, false);
    }
    Appended {
        base,
        end,
        epoch,
        append_time: None,
    }
}

/// A follower's append (see [`PartitionLog::append_replica`]): written and
/// flushed at once, as a flushed produce is (acks=all counts flushed
/// copies); [`stored`] with `AckMode::Flushed` waits for it. On a
/// write-caching topic's copy it is written at once and flushed by the
/// topic's policy, as a written produce is.
pub fn append_replica<S: Storage>(
    log: &Shared<S>,
    offset: u64,
    bytes: &[u8],
    messages: u32,
    segment_base: u64,
) -> Result<Appended, StorageError> {
    let (base, end, epoch, flush) = {
        let mut l = log.borrow_mut();
        let (base, end) = l.append_replica(offset, bytes, messages, segment_base)?;
        let flush = !l.write_caching() || l.flush_count_due();
        if !l.write_caching() {
            l.flush_wanted = l.flush_wanted.max(end);
        }
        (base, end, l.epoch(), flush)
    };
    request_sync(log, flush);
    Ok(Appended {
        base,
        end,
        epoch,
        append_time: None,
    })
}

/// A mirror's append (see [`PartitionLog::append_replica`]: the source's
/// bytes at the source's offset, in the source's segment) written and
/// flushed as a produce with `acks` would be — by the topic's flush
/// policy, not at once as a follower's, since a mirror that loses unflushed
/// bytes copies them again from where the log ends.
pub fn append_mirror<S: Storage>(
    log: &Shared<S>,
    offset: u64,
    bytes: &[u8],
    messages: u32,
    segment_base: u64,
    acks: AckMode,
) -> Result<Appended, StorageError> {
    append_with(log, acks, |l| {
        l.append_mirrored(offset, bytes, messages, segment_base)
    })
}

/// Waits until what [`append`] assigned is written (`acks = written`) or
/// flushed (`acks = flushed`), or will never be. `acks = none` waits like
/// `written`.
pub async fn stored<S: Storage>(
    log: &Shared<S>,
    appended: Appended,
    acks: AckMode,
) -> Result<(), NotStored> {
    let Appended { end, epoch, .. } = appended;
    let reached = |l: &PartitionLog<S>| {
        if acks == AckMode::Flushed {
            l.flushed_offset >= end
        } else {
            l.written_offset >= end
        }
    };
    let watermarks = log.borrow().watermarks();
    watermarks
        .wait_until(|| {
            let l = log.borrow();
            l.poisoned.is_some() || l.dropped(epoch, end).is_some() || reached(&l)
        })
        .await;
    let l = log.borrow();
    // Not dropped first: after a rollback, later appends reuse the offsets
    // and may already have been written past `end`.
    let dropped = l.dropped(epoch, end);
    if dropped.is_none() && reached(&l) {
        return Ok(());
    }
    if l.deleted {
        return Err(NotStored::Deleted);
    }
    if let Some(reason) = dropped {
        return Err(NotStored::Dropped(reason.to_string()));
    }
    Err(NotStored::Failed(
        l.poisoned
            .clone()
            .unwrap_or_else(|| "storage failed".into()),
    ))
}

/// The time half of the write policy, for the shard's timer: writes what is
/// pending, starts a flush when `flush_interval_ms` (or the message count)
/// says so, and with `checkpoint` records the recovery point. Returns true
/// while the log still has work for the timer.
pub fn tick<S: Storage>(log: &Shared<S>, now: Instant, checkpoint: bool) -> bool {
    let (due, pending) = {
        let l = log.borrow();
        (l.flush_due(now), l.pending_bytes() > 0)
    };
    if due {
        request_sync(log, true);
    } else if pending {
        request_sync(log, false);
    }
    if checkpoint {
        let result = log.borrow_mut().checkpoint(false);
        if let Err(error) = result {
            if let Some(suppressed) = CHECKPOINT_LINES.with(LogLimit::allow) {
                tracing::warn!(%error, suppressed, "writing recovery point");
            }
        }
    }
    log.borrow().has_timer_work()
}

/// Makes sure pending bytes are being written, and, when `flush` is set (or
/// an earlier request asked for it), that a flush follows.
///
/// Writing and flushing are two tasks: the writer writes pending chunks as
/// they come, and a flush round (one at a time) fdatasyncs what was written
/// when it began. Writes never wait behind an fdatasync, so `acks = written`
/// costs a write, not a flush; requests for a flush that arrive during one
/// are covered together by the next round (group commit).
pub fn request_sync<S: Storage>(log: &Shared<S>, flush: bool) {
    let mut l = log.borrow_mut();
    if flush {
        l.flush_requested = true;
    }
    if l.poisoned.is_some() {
        return;
    }
    if !l.sync_running && !l.pending.is_empty() {
        l.sync_running = true;
        let storage = l.storage.clone();
        drop(l);
        storage.spawn(run_sync(log.clone()));
        return;
    }
    if !l.sync_running {
        drop(l);
        start_flush(log);
    }
}

/// Starts a flush round if one was asked for, none is in flight and the
/// writer has nothing queued ahead of it (it starts one when done).
pub(super) fn start_flush<S: Storage>(log: &Shared<S>) {
    let mut l = log.borrow_mut();
    if !l.flush_requested || l.flush_running || l.poisoned.is_some() {
        return;
    }
    if l.written_offset <= l.flushed_offset && l.dirty_files.is_empty() {
        // Nothing written to flush yet: the writer starts the round once
        // the requested bytes are written.
        l.flush_requested = l.flush_wanted > l.flushed_offset;
        return;
    }
    // Bytes appended after the request, or still being written, need a
    // round of their own once written, if a request covers them.
    l.flush_requested = l.flush_wanted > l.written_offset;
    l.flush_running = true;
    let round = FlushRound {
        files: std::mem::take(&mut l.dirty_files),
        sync_dir: std::mem::take(&mut l.dir_unsynced),
        target: l.written_offset,
        messages: l.written_messages,
    };
    let storage = l.storage.clone();
    drop(l);
    storage.spawn(run_flush(log.clone(), round));
}

/// Writes and flushes everything appended so far and waits for it (graceful
/// stop, tests).
pub async fn sync_all<S: Storage>(log: &Shared<S>) -> Result<(), StorageError> {
    let (target, epoch) = {
        let mut l = log.borrow_mut();
        l.want_flushed_to_end();
        (l.end_offset, l.epoch)
    };
    request_sync(log, true);
    let watermarks = log.borrow().watermarks();
    watermarks
        .wait_until(|| {
            let l = log.borrow();
            if l.poisoned.is_some() || l.dropped(epoch, target).is_some() {
                return true;
            }
            if l.flushed_offset < target && !l.sync_running && !l.flush_running {
                drop(l);
                request_sync(log, true);
                return false;
            }
            l.flushed_offset >= target
        })
        .await;
    let l = log.borrow();
    if let Some(reason) = l.dropped(epoch, target) {
        return Err(StorageError::Unavailable {
            reason: reason.to_string(),
            retry_in: Duration::ZERO,
        });
    }
    match &l.poisoned {
        Some(reason) => Err(StorageError::Poisoned(reason.clone())),
        None => Ok(()),
    }
}

pub(super) async fn run_sync<S: Storage>(log: Shared<S>) {
    let storage = log.borrow().storage.clone();
    loop {
        let _slot = storage.write_slot().await;
        let chunks = {
            let mut l = log.borrow_mut();
            l.pending_bytes = 0;
            std::mem::take(&mut l.pending)
        };
        if chunks.is_empty() {
            log.borrow_mut().sync_running = false;
            // Everything is written: a requested flush can cover it all.
            start_flush(&log);
            return;
        }
        let error = match write_chunks(&log, chunks).await {
            Ok(()) => {
                // A flush asked for while these were written starts now,
                // beside the next writes.
                start_flush(&log);
                continue;
            }
            Err(error) if error.is_transient() => error,
            Err(error) => {
                let mut l = log.borrow_mut();
                if l.poisoned.is_none() {
                    l.poison(error.to_string());
                }
                l.sync_running = false;
                return;
            }
        };
        let mut l = log.borrow_mut();
        if l.poisoned.is_some() {
            l.sync_running = false;
            return;
        }
        if let Err(undo) = l.roll_back_unwritten(error.to_string()) {
            l.poison(format!("{error}, and undoing it failed: {undo}"));
            l.sync_running = false;
            return;
        }
        // What was written before the failure may still need its flush:
        // the next round does it (the tail is gone, so no write retries).
    }
}

/// What one flush round covers: the files written since the last round,
/// up to `target`, and the directory if a segment was created since.
pub(super) struct FlushRound<F> {
    files: Vec<Rc<F>>,
    sync_dir: bool,
    target: u64,
    messages: u64,
}

/// Writes pending chunks in order, advancing `written_offset` after each
/// write; the chunks that follow one another in one segment go to the file
/// in one call (submitted together).
pub(super) async fn write_chunks<S: Storage>(
    log: &Shared<S>,
    chunks: Vec<PendingChunk>,
) -> Result<(), StorageError> {
    let mut chunks = chunks.into_iter().peekable();
    while let Some(first) = chunks.next() {
        let (segment_base, position) = (first.segment_base, first.position);
        let mut len = first.bytes.len();
        let mut messages = first.messages;
        let mut buffers = vec![first.bytes];
        while let Some(next) = chunks
            .next_if(|c| c.segment_base == segment_base && c.position == position + len as u64)
        {
            len += next.bytes.len();
            messages += next.messages;
            buffers.push(next.bytes);
        }
        if let Some(reason) = &log.borrow().poisoned {
            return Err(StorageError::Poisoned(reason.clone()));
        }
        if let Some(delay) = crate::faults::Faults::get().write_delay {
            let storage = log.borrow().storage.clone();
            storage.sleep(delay).await;
        }
        let file = segment_file(log, segment_base).await?;
        let path = log
            .borrow()
            .dir
            .join(crate::storage::segment::segment_file_name(segment_base));
        let end = segment_base + position + len as u64;
        // The storage takes the buffers; a short write on a regular file means
        // the disk is full or failing, which poisons the partition like an
        // error.
        let written = file
            .write_at(buffers, position)
            .await
            .map_err(|e| StorageError::io("writing", &path, e))?;
        if written != len {
            // A short write on a regular file: the disk filled up mid-way
            // (a failing disk answers EIO instead).
            return Err(StorageError::io(
                "writing",
                &path,
                std::io::Error::from_raw_os_error(libc::ENOSPC),
            ));
        }
        let mut l = log.borrow_mut();
        assert_eq!(
            l.written_offset,
            segment_base + position,
            "chunks are written in order"
        );
        l.written_offset = end;
        l.written_messages += messages;
        l.account();
        if !l.dirty_files.iter().any(|f| Rc::ptr_eq(f, &file)) {
            l.dirty_files.push(file);
        }
        l.check_offsets();
        l.watermarks.notify_all();
    }
    Ok(())
}

/// One flush round: fdatasync of the round's files, then `flushed_offset`
/// moves to its target. A failure poisons the partition (the kernel may
/// have dropped the dirty pages: what was written is no longer known to be
/// on disk). Starts the next round if more flushes were asked for.
pub(super) async fn run_flush<S: Storage>(log: Shared<S>, round: FlushRound<S::File>) {
    let FlushRound {
        files,
        sync_dir,
        target,
        messages,
    } = round;
    let storage = log.borrow().storage.clone();
    let started = storage.now();
    if let Some(delay) = crate::faults::Faults::get().sync_delay {
        storage.sleep(delay).await;
    }
    let mut failure = None;
    for file in &files {
        if let Err(e) = file.fdatasync().await {
            failure = Some(StorageError::io("fdatasync", file.path(), e));
            break;
        }
    }
    if sync_dir && failure.is_none() {
        let (storage, dir) = {
            let l = log.borrow();
            (l.storage.clone(), l.dir.clone())
        };
        match storage.flush_dir(&dir).await {
            Ok(()) => {}
            // Opening the directory failed: nothing was synced, so no
            // write-back error was consumed; the next round tries again.
            Err(e) if out_of_descriptors(&e) => {
                let mut l = log.borrow_mut();
                l.flush_running = false;
                l.dir_unsynced = true;
                l.dirty_files.extend(files);
                if let Some(suppressed) = ROLLBACK_LINES.with(LogLimit::allow) {
                    tracing::warn!(partition = %l.label, error = %e, suppressed, "flush postponed: no descriptor to sync the directory with");
                }
                return;
            }
            Err(e) => failure = Some(StorageError::io("syncing", dir, e)),
        }
    }
    {
        let mut l = log.borrow_mut();
        l.flush_running = false;
        if let Some(error) = failure {
            if l.poisoned.is_none() {
                l.poison(error.to_string());
            }
            return;
        }
        metrics::bump(&l.flush_stats.flushes, 1);
        metrics::record_us(
            &l.flush_stats.latency_us,
            l.storage.now().duration_since(started).as_micros() as u64,
        );
        if target > l.flushed_offset {
            l.flushed_offset = target;
        }
        l.flushed_messages = l.flushed_messages.max(messages);
        l.oldest_unflushed_at = if l.flushed_messages == l.appended_messages {
            None
        } else {
            Some(l.storage.now())
        };
        // The segments this round rolled past are flushed now: close all
        // but the last few (one round may cross many small segments).
        drop(files);
        l.trim_open_files(crate::limits::SEGMENT_FILES_PER_LOG_MAX, u64::MAX);
        l.check_offsets();
        l.watermarks.notify_all();
    }
    start_flush(&log);
}

/// The process or the system is out of file descriptors: an open failed, and
/// nothing else did.
pub(super) fn out_of_descriptors(error: &std::io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}
