//! The offset for a time (ListOffsets by timestamp, `ringlog offsets
//! --before`, `consume --from @MS`). Format 1's messages carry no time:
//! the paper's answer, at a segment's granularity. Format 2 is exact, by
//! Kafka's rule: the offset of the first record whose time is the one
//! asked for or later — found from the segments' time indexes
//! (`storage/batch_index.rs`), a hop over the batch headers after the
//! indexed start, then the records of the one batch that holds it
//! (decompressed if they must be, under CreateTime only: under
//! LogAppendTime every record has its batch's time).

use super::files::{hop, read_exact_batch, Hop, HOP_READ_BYTES};
use super::*;

/// The most a lookup decompresses of one batch. A batch is at most 16 MiB
/// as stored, but a hostile producer's can claim far more decompressed:
/// past this, the answer is the batch's start (earlier than exact, so a
/// consumer starting there misses nothing).
const RECORDS_BYTES_MAX: usize = 16 * 1024 * 1024;

impl<S: Storage> PartitionLog<S> {
    /// Where a format-2 lookup of `time` starts hopping: in the first
    /// segment not known to hold only older batches, the last indexed
    /// start before which every batch is older.
    fn time_hop_start(&self, time: i64) -> u64 {
        for segment in self.segments.as_slice() {
            let from = segment.index.from_time(time);
            // `from` reaches the segment's end only when its index covers
            // all of it and every batch is older.
            if from < segment.size_bytes {
                return segment.base_offset + from;
            }
        }
        self.end_offset
    }
}

/// The offset to read from to see every message of `time_ms` or later (a
/// message's time: its producer's, or its append's): format 2's exact
/// record, format 1's segment; the visible end if none is that late.
pub async fn offset_for_time<S: Storage>(
    log: &Shared<S>,
    time_ms: u64,
) -> Result<u64, StorageError> {
    record_for_time(log, time_ms)
        .await
        .map(|(offset, _)| offset)
}

/// [`offset_for_time`] with the time of the record there, when one was
/// found and its time is known (format 2; `None`: the end, format 1, or a
/// batch whose records could not be read).
pub async fn record_for_time<S: Storage>(
    log: &Shared<S>,
    time_ms: u64,
) -> Result<(u64, Option<i64>), StorageError> {
    let time = i64::try_from(time_ms).unwrap_or(i64::MAX);
    let (from, end) = {
        let l = log.borrow();
        if l.settings.format == MessageFormat::One {
            return Ok((l.offset_before_time(time_ms), None));
        }
        (l.time_hop_start(time), l.visible_offset())
    };
    if from >= end {
        return Ok((end, None));
    }
    let late_enough = |_: u64, header: &protocol::batch::BatchHeader| header.max_timestamp >= time;
    let (start, header) = match hop(log, from, None, |_| HOP_READ_BYTES, late_enough).await? {
        Hop::Found(start, header) => (start, header),
        Hop::End => return Ok((end, None)),
        // A reader from here meets the damage, as it would have.
        Hop::Damaged(at) => return Ok((at, None)),
    };
    if header.attributes & protocol::batch::ATTR_LOG_APPEND_TIME != 0 {
        return Ok((start, Some(header.max_timestamp)));
    }
    let Some(slice) = read_exact_batch(log, start, header.size).await? else {
        return Ok((start, None));
    };
    // The batch's own baseOffset is its position (stamped so); the
    // record's delta counts from there.
    Ok(
        protocol::batch::read::first_record_at_or_after(&slice, time, RECORDS_BYTES_MAX)
            .and_then(|(offset, at)| u64::try_from(offset).ok().map(|o| (o, Some(at))))
            .filter(|&(offset, _)| offset >= start && offset < start + header.size as u64)
            .unwrap_or((start, None)),
    )
}
