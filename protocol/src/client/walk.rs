//! Walking a fetched chunk: each whole message (format 1), or each record
//! of each whole batch from the reader's position on (format 2), handed
//! over in order; where the next fetch starts; and what a unit cut short
//! or damaged means.

use super::ClientError;
use crate::batch::read::{decode, records};
use crate::message::{Message, MessageSetIter};
use crate::stored::{unit, MessageFormat, StoredError, Unit};

/// The most a reader decompresses of one batch. A batch is at most 16 MiB
/// as stored, but a hostile producer's can claim far more decompressed:
/// past this the batch is reported damaged rather than filling memory.
pub const RECORDS_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Where a fetched chunk came from.
pub(super) struct ChunkPlace<'a> {
    pub topic: &'a str,
    pub partition: u32,
    /// The offset the chunk starts at (format 2: the start of the batch
    /// that holds `from`).
    pub offset: u64,
    /// The reader's position: nothing below it is handed over (format 2:
    /// the records of its batch before it). At or above `offset`.
    pub from: u64,
    /// What the chunk holds.
    pub format: MessageFormat,
    /// `offset` is known to be a message boundary.
    pub verified: bool,
    pub flushed_offset: u64,
    pub max_bytes: u32,
}

/// What a walk over a chunk found.
pub(super) struct Walked {
    pub delivered: usize,
    /// Where the next fetch starts: after the last whole message.
    pub next_offset: u64,
}

/// Calls `f` for each whole message of a fetched chunk, in order (format
/// 2: each record of each whole batch, from the reader's position on). A
/// bad message fails the walk with the offset it is at: as
/// [`ClientError::InvalidOffset`] when it is the first and the position
/// was not known to be a boundary, else as [`ClientError::Corrupt`].
pub(super) fn walk_chunk(
    place: &ChunkPlace<'_>,
    chunk: &[u8],
    f: &mut impl FnMut(Message<'_>),
) -> Result<Walked, (ClientError, u64)> {
    if place.format == MessageFormat::Two {
        return walk_batches(place, chunk, f);
    }
    let bad = |source: crate::message::MessageError, delivered: usize| {
        bad_unit(place, source.into(), delivered)
    };
    let mut iter = MessageSetIter::new(chunk, place.offset);
    let mut delivered = 0;
    for message in iter.by_ref() {
        match message {
            Ok(message) => {
                f(message);
                delivered += 1;
            }
            Err(source) => return Err((bad(source, delivered), iter.next_offset())),
        }
    }
    if delivered == 0 && !chunk.is_empty() {
        if let Some((size, present)) = iter.incomplete() {
            let source = crate::message::MessageError::Incomplete {
                position: iter.position(),
                missing: size.saturating_sub(present).max(1),
            };
            cut_unit(place, chunk.len(), size, source.into())?;
        }
    }
    Ok(Walked {
        delivered,
        next_offset: iter.next_offset(),
    })
}

/// A unit that does not read: as [`ClientError::InvalidOffset`] when it is
/// the first and the position was not known to be a boundary, else as
/// [`ClientError::Corrupt`].
fn bad_unit(place: &ChunkPlace<'_>, source: StoredError, delivered: usize) -> ClientError {
    let name = || format!("{}-{}", place.topic, place.partition);
    if delivered == 0 && !place.verified {
        ClientError::InvalidOffset {
            partition: name(),
            offset: place.offset,
            source,
        }
    } else {
        ClientError::Corrupt {
            partition: name(),
            source,
        }
    }
}

/// A unit the chunk holds only part of, where nothing whole came before
/// it. Flushed data always ends at a unit boundary: one still cut at the
/// flushed end never completes, so the position is not a boundary (or the
/// data is damaged) — said, instead of waiting forever. One larger than
/// the fetch size is [`ClientError::MessageTooLarge`].
fn cut_unit(
    place: &ChunkPlace<'_>,
    present: usize,
    size: usize,
    source: StoredError,
) -> Result<(), (ClientError, u64)> {
    let chunk_end = place.offset + present as u64;
    if chunk_end >= place.flushed_offset {
        return Err((bad_unit(place, source, 0), place.from));
    }
    if size > place.max_bytes as usize {
        return Err((
            ClientError::MessageTooLarge {
                offset: place.offset,
                size,
                max_bytes: place.max_bytes,
            },
            place.from,
        ));
    }
    Ok(())
}

/// Format 2: the records of each whole batch, from `place.from` on. A
/// record's offset is its batch's position + its offsetDelta; the next
/// fetch starts at the end of the last whole batch (the next batch's
/// position), or stays at `from` when none was whole.
fn walk_batches(
    place: &ChunkPlace<'_>,
    chunk: &[u8],
    f: &mut impl FnMut(Message<'_>),
) -> Result<Walked, (ClientError, u64)> {
    let mut at = 0usize;
    let mut delivered = 0;
    let mut scratch = Vec::new();
    while at < chunk.len() {
        let offset = place.offset + at as u64;
        let bytes = &chunk[at..];
        let size = match unit(MessageFormat::Two, bytes, offset) {
            Unit::Whole { len, .. } => len,
            Unit::Incomplete { need } => {
                if at == 0 {
                    let source = StoredError::Message(crate::message::MessageError::Incomplete {
                        position: 0,
                        missing: need.saturating_sub(bytes.len()).max(1),
                    });
                    cut_unit(place, chunk.len(), need, source)?;
                }
                break;
            }
            Unit::Damaged { error, .. } => {
                return Err((bad_unit(place, error, delivered), offset.max(place.from)));
            }
        };
        delivered += hand_over(place, offset, &bytes[..size], delivered, &mut scratch, f)?;
        at += size;
    }
    let next_offset = if at == 0 {
        place.from
    } else {
        (place.offset + at as u64).max(place.from)
    };
    Ok(Walked {
        delivered,
        next_offset,
    })
}

/// The records of one whole stored batch at `offset` from `place.from`
/// on, to `f`; how many. `delivered` were handed over before it.
fn hand_over(
    place: &ChunkPlace<'_>,
    offset: u64,
    batch: &[u8],
    delivered: usize,
    scratch: &mut Vec<u8>,
    f: &mut impl FnMut(Message<'_>),
) -> Result<usize, (ClientError, u64)> {
    let end = offset + batch.len() as u64;
    let mut handed = 0;
    let damaged = |error, handed: usize| {
        let error = bad_unit(place, error, delivered + handed);
        (error, offset.max(place.from))
    };
    let (header, records_bytes) = decode(batch, RECORDS_BYTES_MAX, scratch).map_err(|e| {
        let reason = e.to_string();
        damaged(StoredError::Decompress { offset, reason }, 0)
    })?;
    let mut records = records(&header, records_bytes).peekable();
    let mut last = None;
    while let Some(record) = records.next() {
        let record =
            record.map_err(|error| damaged(StoredError::Records { offset, error }, handed))?;
        // Offsets rise inside the batch and stay in it (a compressed
        // batch's were not checked by the broker).
        let record_offset = u64::try_from(record.offset)
            .ok()
            .filter(|&o| o >= offset && o < end && last.is_none_or(|l| o > l));
        let Some(record_offset) = record_offset else {
            let error = crate::batch::records::RecordError::OffsetDelta {
                index: -1,
                found: record.record.offset_delta,
            };
            return Err(damaged(StoredError::Records { offset, error }, handed));
        };
        last = Some(record_offset);
        // To the next record, or for the last to the next batch.
        let next = match records.peek() {
            Some(Ok(next)) => u64::try_from(next.offset)
                .unwrap_or(end)
                .clamp(record_offset + 1, end),
            _ => end,
        };
        if record_offset >= place.from {
            f(Message {
                offset: record_offset,
                key: record.record.key,
                value: record.record.value.unwrap_or_default(),
                stored_len: (next - record_offset) as usize,
                timestamp: Some(record.timestamp),
                headers: record.record.headers,
            });
            handed += 1;
        }
    }
    Ok(handed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::produce::{stamp, Stamp};
    use crate::batch::write::{BatchWriter, Producer};
    use crate::batch::Compression;

    /// Three stored batches of 4 records (the second zstd), at 1000.
    fn log() -> (Vec<u8>, Vec<u64>) {
        let mut bytes = Vec::new();
        let mut offsets = Vec::new();
        for b in 0..3u8 {
            let mut writer = BatchWriter::new();
            for r in 0..4u8 {
                let value = [b'a' + b; 1].repeat(20 + r as usize);
                writer.push(
                    1_000 + i64::from(r),
                    None,
                    Some(&value),
                    &[("n", Some(&[r]))],
                );
            }
            let codec = [Compression::None, Compression::Zstd, Compression::None][b as usize];
            let mut batch = writer.finish_compressed(Producer::NONE, codec).unwrap();
            let position = 1_000 + bytes.len() as u64;
            stamp(
                &mut batch,
                Stamp {
                    position,
                    leader_epoch: 0,
                    log_append_time: None,
                },
            );
            offsets.extend((0..4).map(|r| position + r));
            bytes.extend_from_slice(&batch);
        }
        (bytes, offsets)
    }

    fn place(from: u64, flushed: u64) -> ChunkPlace<'static> {
        ChunkPlace {
            topic: "t",
            partition: 0,
            offset: 1_000,
            from,
            format: MessageFormat::Two,
            verified: true,
            flushed_offset: flushed,
            max_bytes: 1 << 20,
        }
    }

    /// Each record's offset, time and header byte.
    type Seen = Vec<(u64, i64, u8)>;

    fn walk(place: &ChunkPlace<'_>, chunk: &[u8]) -> Result<(Seen, u64), (ClientError, u64)> {
        let mut seen = Vec::new();
        let walked = walk_chunk(place, chunk, &mut |m| {
            let n = m.headers.to_vec()[0].1.unwrap()[0];
            seen.push((m.offset, m.timestamp.unwrap(), n));
            assert!(m.offset + m.stored_len as u64 > m.offset);
        })?;
        assert_eq!(walked.delivered, seen.len());
        Ok((seen, walked.next_offset))
    }

    #[test]
    fn records_of_whole_batches_from_the_position_on_and_the_next_fetch_at_a_batch_start() {
        let (bytes, offsets) = log();
        let end = 1_000 + bytes.len() as u64;
        let (seen, next) = walk(&place(1_000, end), &bytes).unwrap();
        assert_eq!(seen.iter().map(|s| s.0).collect::<Vec<_>>(), offsets);
        assert_eq!(seen[5], (offsets[5], 1_001, 1));
        assert_eq!(next, end);
        // From inside the second (compressed) batch: its records from there.
        let (seen, _) = walk(&place(offsets[6], end), &bytes).unwrap();
        assert_eq!(seen.iter().map(|s| s.0).collect::<Vec<_>>(), offsets[6..]);
        // A chunk cut inside the third batch: the next fetch at its start.
        let cut = &bytes[..bytes.len() - 10];
        let (seen, next) = walk(&place(1_000, end), cut).unwrap();
        assert_eq!(seen.len(), 8);
        assert_eq!(next, offsets[8]);
    }

    #[test]
    fn a_batch_cut_at_the_visible_end_or_damaged_is_an_error_and_one_too_large_is_said() {
        let (bytes, offsets) = log();
        let end = 1_000 + bytes.len() as u64;
        let third = (offsets[8] - 1_000) as usize;
        let cut = &bytes[third..bytes.len() - 1];
        let at_end = ChunkPlace {
            offset: offsets[8],
            from: offsets[8],
            ..place(0, end - 1)
        };
        let (error, at) = walk(&at_end, cut).unwrap_err();
        assert!(matches!(error, ClientError::Corrupt { .. }), "{error}");
        assert_eq!(at, offsets[8]);
        let small = ChunkPlace {
            max_bytes: 40,
            flushed_offset: end,
            ..at_end
        };
        let (error, _) = walk(&small, &cut[..40]).unwrap_err();
        assert!(
            matches!(error, ClientError::MessageTooLarge { .. }),
            "{error}"
        );
        let mut flipped = bytes.clone();
        flipped[third + 70] ^= 1;
        let (error, at) = walk(&place(1_000, end), &flipped).unwrap_err();
        assert!(matches!(error, ClientError::Corrupt { .. }), "{error}");
        assert_eq!(at, offsets[8], "the damaged batch's place");
    }
}
