//! A format-2 log's idempotent producers kept with it (the rules are in
//! [`crate::storage::producers`]): recovered at open from the last
//! snapshot and the batch headers after it, snapshotted with the recovery
//! point, cut with the log.

use super::PartitionLog;
use crate::storage::io::Storage;
use crate::storage::producers::{Producers, SNAPSHOT_EVERY_BYTES, SNAPSHOT_FILE};
use crate::storage::segment::Segment;
use crate::storage::StorageError;
use protocol::batch::sequence::Numbered;
use protocol::batch::{BatchHeader, HEADER_BYTES};
use protocol::stored::MessageFormat;
use std::path::Path;

/// Bytes read at once while hopping over the headers at recovery.
const READ_BYTES: usize = 64 * 1024;

/// The producers of the log in `dir` whose segments (as recovered) hold
/// `[start, end)`: the snapshot, cut to its offset, then every header from
/// there to `end`; without a usable snapshot, every header of the log.
/// Returns them and the offset the snapshot file now stands at (rewritten
/// when it stood past `end`: a recovery cut the log below it, and a later
/// snapshot must not be read with bytes that are no longer the log's).
pub(super) fn recover<S: Storage, F>(
    storage: &S,
    dir: &Path,
    segments: &[Segment<F>],
    start: u64,
    end: u64,
    max: usize,
) -> Result<(Producers, u64), StorageError> {
    let path = dir.join(SNAPSHOT_FILE);
    let snapshot = storage
        .read_file(&path)
        .ok()
        .and_then(|bytes| Producers::decode(&bytes, max));
    let (from, mut producers, mut snapshot_at) = match snapshot {
        Some((at, producers)) => (at.max(start), producers, at),
        None => (start, Producers::new(max), 0),
    };
    if snapshot_at > end {
        producers.truncate(end);
        storage
            .overwrite_file(&path, &producers.encode(end), true)
            .map_err(|e| StorageError::io("writing", &path, e))?;
        snapshot_at = end;
    }
    for segment in segments {
        let segment_end = segment.base_offset + segment.size_bytes;
        if segment_end <= from || segment.base_offset >= end {
            continue;
        }
        let mut position = from.saturating_sub(segment.base_offset);
        let mut buf = vec![0u8; READ_BYTES];
        'segment: while position + HEADER_BYTES as u64 <= segment.size_bytes {
            let read = storage
                .read_at(&segment.path, position, &mut buf)
                .map_err(|e| StorageError::io("reading", &segment.path, e))?;
            let mut at = 0usize;
            while read.saturating_sub(at) >= HEADER_BYTES {
                // Recovery judged every byte here; a header that does not
                // read is rot it kept, which ends what can be hopped.
                let Ok(header) = BatchHeader::read(&buf[at..read]) else {
                    break 'segment;
                };
                let base = segment.base_offset + position + at as u64;
                if let Some(numbered) = Numbered::of(&header) {
                    producers.apply(numbered, base, base + header.size as u64);
                }
                at += header.size;
            }
            if at == 0 {
                break;
            }
            position += at as u64;
        }
    }
    Ok((producers, snapshot_at))
}

impl<S: Storage> PartitionLog<S> {
    /// The log's idempotent producers (none for format 1).
    pub fn producers(&self) -> &Producers {
        &self.producers
    }

    /// Records the producers of the batches in `bytes`, appended at `base`.
    pub(super) fn note_producers(&mut self, bytes: &[u8], base: u64) {
        for (at, header) in protocol::batch::produce::batches(bytes).flatten() {
            if let Some(numbered) = Numbered::of(&header) {
                let from = base + at as u64;
                self.producers
                    .apply(numbered, from, from + header.size as u64);
            }
        }
    }

    /// Forgets the producers' batches at or past `end` (the log was cut
    /// there); a snapshot past it is rewritten at `end`, durably.
    pub(super) fn cut_producers(&mut self, end: u64) -> Result<(), StorageError> {
        self.producers.truncate(end);
        if self.producers_snapshot_at > end {
            self.write_producers(end, true)?;
        }
        Ok(())
    }

    /// With the recovery point: a snapshot at the flushed offset when
    /// [`SNAPSHOT_EVERY_BYTES`] were flushed since the last one, or on a
    /// graceful stop (`durable`).
    pub(super) fn checkpoint_producers(&mut self, durable: bool) -> Result<(), StorageError> {
        if self.settings.format != MessageFormat::Two {
            return Ok(());
        }
        let at = self.flushed_offset;
        let due = at >= self.producers_snapshot_at + SNAPSHOT_EVERY_BYTES
            || (durable && at != self.producers_snapshot_at);
        if due {
            self.write_producers(at, durable)?;
        }
        Ok(())
    }

    fn write_producers(&mut self, at: u64, durable: bool) -> Result<(), StorageError> {
        let path = self.dir.join(SNAPSHOT_FILE);
        self.storage
            .overwrite_file(&path, &self.producers.encode(at), durable)
            .map_err(|e| StorageError::io("writing", &path, e))?;
        self.producers_snapshot_at = at;
        Ok(())
    }
}
