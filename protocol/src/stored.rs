//! What a log stores, in either message format: the unit at a position —
//! a format-1 message, or a format-2 record batch — judged as stored
//! bytes (recovery, a follower's or a mirror's copy), not as a producer's.
//!
//! A stored batch names its own position (`baseOffset`) and ends where the
//! next begins (`lastOffsetDelta = size - 1`); both are checked, so a
//! batch copied to the wrong place is damage, not data.

use crate::batch::{self, BatchError, BatchHeader};
use crate::message::{MessageError, MessageSetIter, MESSAGE_BYTES_MAX, MESSAGE_HEADER_BYTES};

/// A log's message format: one per log, chosen when its topic is created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum MessageFormat {
    /// The paper's: length, magic 1, CRC-32, key, value (9 bytes each).
    #[default]
    One,
    /// Kafka's record batch v2 at byte offsets (timestamps, headers,
    /// compression, producer ids).
    Two,
}

impl MessageFormat {
    /// The format numbered `n` (1 or 2).
    pub fn from_number(n: u32) -> Option<MessageFormat> {
        match n {
            1 => Some(MessageFormat::One),
            2 => Some(MessageFormat::Two),
            _ => None,
        }
    }

    /// Its number, as topics record it.
    pub fn number(self) -> u32 {
        match self {
            MessageFormat::One => 1,
            MessageFormat::Two => 2,
        }
    }

    /// The bytes that show a unit's size.
    pub fn header_bytes(self) -> usize {
        match self {
            MessageFormat::One => MESSAGE_HEADER_BYTES,
            MessageFormat::Two => batch::HEADER_BYTES,
        }
    }

    /// The largest unit a log of this format holds.
    pub fn unit_bytes_max(self) -> usize {
        match self {
            MessageFormat::One => MESSAGE_BYTES_MAX,
            MessageFormat::Two => batch::BATCH_BYTES_MAX,
        }
    }
}

/// Why stored bytes are not a valid unit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoredError {
    /// A format-1 message.
    #[error(transparent)]
    Message(#[from] MessageError),
    /// A format-2 batch's header or CRC.
    #[error("batch at offset {offset}: {error}")]
    Batch {
        /// Where it is.
        offset: u64,
        /// What is wrong.
        error: BatchError,
    },
    /// A batch that names another position than its own.
    #[error("batch at offset {offset} names offset {named}")]
    Position {
        /// Where it is.
        offset: u64,
        /// Its baseOffset.
        named: i64,
    },
    /// A batch stamped with another leader epoch than the one that wrote
    /// its offset (-1: the copy knows no epoch for it).
    #[error(
        "batch at offset {offset} carries leader epoch {stamped}, where epoch {expected} wrote it"
    )]
    Epoch {
        /// Where it is.
        offset: u64,
        /// Its partitionLeaderEpoch.
        stamped: i32,
        /// The epoch the copy's epochs name for it.
        expected: i32,
    },
    /// A batch whose records do not read (a consumer's check: a stored
    /// batch's CRC held, so the producer wrote them so).
    #[error("batch at offset {offset}: {error}")]
    Records {
        /// Where the batch is.
        offset: u64,
        /// What is wrong.
        error: crate::batch::records::RecordError,
    },
    /// A batch whose records do not decompress, or decompress past the
    /// reader's bound.
    #[error("batch at offset {offset}: {reason}")]
    Decompress {
        /// Where the batch is.
        offset: u64,
        /// The codec's words.
        reason: String,
    },
    /// A batch whose offsets do not end where it does, or that claims more
    /// records than bytes.
    #[error(
        "batch at offset {offset} of {size} bytes has lastOffsetDelta {delta} and {count} records"
    )]
    Offsets {
        /// Where it is.
        offset: u64,
        /// Its bytes.
        size: usize,
        /// lastOffsetDelta.
        delta: i32,
        /// recordCount.
        count: i32,
    },
}

/// The unit at the start of some stored bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unit {
    /// A valid unit of `len` bytes holding `messages` messages.
    Whole {
        /// Its bytes.
        len: usize,
        /// Messages (records) in it.
        messages: u32,
    },
    /// The bytes end before the unit does: `need` bytes would show it
    /// (its header, then its whole length).
    Incomplete {
        /// Bytes needed from the start.
        need: usize,
    },
    /// Not a valid unit. `framed`: its length field is sane and only its
    /// contents are bad, so the next unit starts `framed` bytes on (rot,
    /// where a torn write leaves no framing after it).
    Damaged {
        /// The unit's length, when its framing holds.
        framed: Option<usize>,
        /// What is wrong.
        error: StoredError,
    },
}

/// Judges the unit at the start of `bytes`, stored at `offset`.
pub fn unit(format: MessageFormat, bytes: &[u8], offset: u64) -> Unit {
    match format {
        MessageFormat::One => message_unit(bytes, offset),
        MessageFormat::Two => batch_unit(bytes, offset),
    }
}

fn message_unit(bytes: &[u8], offset: u64) -> Unit {
    let mut iter = MessageSetIter::new(bytes, offset);
    match iter.next() {
        Some(Ok(message)) => Unit::Whole {
            len: message.stored_len,
            messages: 1,
        },
        Some(Err(error)) => {
            let content_only = matches!(
                error,
                MessageError::CrcMismatch { .. }
                    | MessageError::BadMagic { .. }
                    | MessageError::BadKey { .. }
            );
            let length = bytes
                .get(..4)
                .map(|l| u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize);
            let framed = length
                .filter(|l| content_only && (5..=MESSAGE_BYTES_MAX - 4).contains(l))
                .map(|l| 4 + l);
            Unit::Damaged {
                framed,
                error: error.into(),
            }
        }
        None => Unit::Incomplete {
            need: iter
                .incomplete()
                .map_or(MESSAGE_HEADER_BYTES, |(need, _)| need),
        },
    }
}

fn batch_unit(bytes: &[u8], offset: u64) -> Unit {
    let damaged = |framed, error| Unit::Damaged {
        framed,
        error: StoredError::Batch { offset, error },
    };
    // The length field alone says whether framing holds.
    let Some(length) = bytes.get(batch::at::LENGTH..batch::at::LENGTH + 4) else {
        return Unit::Incomplete {
            need: batch::HEADER_BYTES,
        };
    };
    let length = i32::from_be_bytes([length[0], length[1], length[2], length[3]]);
    let size = usize::try_from(length)
        .ok()
        .map(|l| l + batch::LOG_OVERHEAD)
        .filter(|s| (batch::HEADER_BYTES..=batch::BATCH_BYTES_MAX).contains(s));
    let Some(size) = size else {
        return damaged(None, BatchError::Length(length));
    };
    if bytes.len() < size {
        return Unit::Incomplete { need: size };
    }
    let header = match BatchHeader::read(bytes) {
        Ok(header) => header,
        Err(error) => return damaged(Some(size), error),
    };
    let computed = batch::crc(&bytes[..size]);
    if computed != header.crc {
        return damaged(
            Some(size),
            BatchError::Crc {
                stored: header.crc,
                computed,
            },
        );
    }
    if u64::try_from(header.base_offset) != Ok(offset) {
        return Unit::Damaged {
            framed: Some(size),
            error: StoredError::Position {
                offset,
                named: header.base_offset,
            },
        };
    }
    let count = header.record_count;
    if header.last_offset_delta as i64 != size as i64 - 1 || count < 1 || count as usize > size {
        return Unit::Damaged {
            framed: Some(size),
            error: StoredError::Offsets {
                offset,
                size,
                delta: header.last_offset_delta,
                count,
            },
        };
    }
    Unit::Whole {
        len: size,
        messages: count as u32,
    }
}

/// The whole valid units at the start of `bytes` (stored at `offset`):
/// their bytes and messages; the first damaged unit's error. Bytes after
/// the last whole unit that do not complete one are left for later (a
/// chunk may end mid-unit).
pub fn whole_units(
    format: MessageFormat,
    bytes: &[u8],
    offset: u64,
) -> Result<(usize, u32), StoredError> {
    let mut at = 0usize;
    let mut messages = 0u32;
    while at < bytes.len() {
        match unit(format, &bytes[at..], offset + at as u64) {
            Unit::Whole { len, messages: m } => {
                at += len;
                messages += m;
            }
            Unit::Incomplete { .. } => break,
            Unit::Damaged { error, .. } => return Err(error),
        }
    }
    Ok((at, messages))
}

/// The whole units at the start of `bytes`, judged by their framing only
/// (length fields, magic): their bytes and messages. For a copier that
/// hands the bytes on to a broker which checks them itself (a mirror), so
/// they are not hashed twice. A unit cut by the end of `bytes` is left out.
pub fn framed_units(format: MessageFormat, bytes: &[u8]) -> Result<(usize, u32), StoredError> {
    match format {
        MessageFormat::One => Ok(crate::message::whole_messages(bytes)?),
        MessageFormat::Two => {
            let mut at = 0usize;
            let mut messages = 0u32;
            while bytes.len() - at >= batch::HEADER_BYTES {
                let header =
                    BatchHeader::read(&bytes[at..]).map_err(|error| StoredError::Batch {
                        offset: at as u64,
                        error,
                    })?;
                if bytes.len() - at < header.size {
                    break;
                }
                at += header.size;
                messages = messages.saturating_add(header.record_count.max(1) as u32);
            }
            Ok((at, messages))
        }
    }
}

/// The bytes of the unit at the start of `bytes`, from its length field
/// (at least its header must be there).
pub fn unit_len(format: MessageFormat, bytes: &[u8]) -> Option<usize> {
    match format {
        MessageFormat::One => bytes
            .get(..4)
            .map(|l| 4 + u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize),
        MessageFormat::Two => BatchHeader::read(bytes).ok().map(|h| h.size),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::produce::{stamp, Stamp};
    use crate::batch::write::{BatchWriter, Producer};
    use crate::message::encode_message;

    fn stored_batch(position: u64, values: usize) -> Vec<u8> {
        let mut writer = BatchWriter::new();
        for i in 0..values {
            writer.push(i as i64, None, Some(&[i as u8; 10]), &[]);
        }
        let mut batch = writer.finish(Producer::NONE);
        stamp(
            &mut batch,
            Stamp {
                position,
                leader_epoch: 1,
                log_append_time: None,
            },
        );
        batch
    }

    #[test]
    fn stored_batches_are_whole_at_their_own_position_only() {
        let first = stored_batch(1000, 3);
        let second = stored_batch(1000 + first.len() as u64, 2);
        let mut log = first.clone();
        log.extend_from_slice(&second);
        assert_eq!(
            whole_units(MessageFormat::Two, &log, 1000),
            Ok((log.len(), 5))
        );
        // Cut anywhere: the whole batches before the cut, nothing else.
        for cut in 0..log.len() {
            let (len, messages) = whole_units(MessageFormat::Two, &log[..cut], 1000).unwrap();
            let expected = if cut >= first.len() {
                (first.len(), 3)
            } else {
                (0, 0)
            };
            assert_eq!((len, messages), expected, "cut at {cut}");
        }
        // Copied to another place, it is damage, framed.
        assert_eq!(
            unit(MessageFormat::Two, &first, 0),
            Unit::Damaged {
                framed: Some(first.len()),
                error: StoredError::Position {
                    offset: 0,
                    named: 1000
                }
            }
        );
        // A flipped record byte: framed damage; a broken length: unframed.
        let mut rotten = first.clone();
        *rotten.last_mut().unwrap() ^= 0x40;
        assert!(matches!(
            unit(MessageFormat::Two, &rotten, 1000),
            Unit::Damaged { framed: Some(len), error: StoredError::Batch { error: BatchError::Crc { .. }, .. } } if len == first.len()
        ));
        let mut torn = first.clone();
        torn[batch::at::LENGTH..batch::at::LENGTH + 4].copy_from_slice(&[0xff; 4]);
        assert!(matches!(
            unit(MessageFormat::Two, &torn, 1000),
            Unit::Damaged { framed: None, .. }
        ));
        // A producer's batch (not stamped) is not a stored one.
        let mut writer = BatchWriter::new();
        writer.push(0, None, Some(b"v"), &[]);
        let produced = writer.finish(Producer::NONE);
        assert!(matches!(
            unit(MessageFormat::Two, &produced, 0),
            Unit::Damaged {
                framed: Some(_),
                error: StoredError::Offsets { .. }
            }
        ));
    }

    #[test]
    fn framing_alone_finds_whole_batches_and_their_records() {
        let first = stored_batch(0, 3);
        let second = stored_batch(first.len() as u64, 2);
        let mut bytes = first.clone();
        bytes.extend_from_slice(&second);
        assert_eq!(
            framed_units(MessageFormat::Two, &bytes),
            Ok((bytes.len(), 5))
        );
        assert_eq!(
            framed_units(MessageFormat::Two, &bytes[..bytes.len() - 1]),
            Ok((first.len(), 3))
        );
        assert_eq!(unit_len(MessageFormat::Two, &bytes), Some(first.len()));
        let mut magic = bytes.clone();
        magic[batch::at::MAGIC] = 1;
        assert!(framed_units(MessageFormat::Two, &magic).is_err());
    }

    #[test]
    fn format_one_units_are_messages() {
        let mut set = Vec::new();
        encode_message(&mut set, None, b"hello");
        encode_message(&mut set, Some(b"k"), b"world");
        assert_eq!(whole_units(MessageFormat::One, &set, 7), Ok((set.len(), 2)));
        assert_eq!(
            unit(MessageFormat::One, &set[..3], 7),
            Unit::Incomplete { need: 4 }
        );
        let mut rotten = set.clone();
        rotten[10] ^= 1;
        assert!(matches!(
            unit(MessageFormat::One, &rotten, 7),
            Unit::Damaged {
                framed: Some(14),
                ..
            }
        ));
        assert_eq!(MessageFormat::from_number(2), Some(MessageFormat::Two));
        assert_eq!(MessageFormat::from_number(3), None);
        assert_eq!(MessageFormat::Two.number(), 2);
    }
}
