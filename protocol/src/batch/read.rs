//! Reading a stored batch's records as a consumer does (and the broker's
//! lookup by time): the header, the records decompressed when they must
//! be, each with its own offset and timestamp.

use super::compression::{decompress, CodecError};
use super::records::{read_record, Record, RecordError};
use super::{BatchError, BatchHeader, Compression, ATTR_LOG_APPEND_TIME, HEADER_BYTES};

/// Why a stored batch's records cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The header is not a batch's, or the bytes are not the whole batch.
    #[error(transparent)]
    Batch(#[from] BatchError),
    /// A codec this format does not have.
    #[error("compression codec {0} is not none, gzip, snappy, lz4 or zstd")]
    Codec(u16),
    /// The records do not decompress (or past the reader's bound).
    #[error(transparent)]
    Decompress(#[from] CodecError),
}

/// One record of a batch, with what its batch says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRecord<'a> {
    /// Its offset: the batch's baseOffset + its offsetDelta.
    pub offset: i64,
    /// Its time (ms): its own (CreateTime), or the batch's append time
    /// (LogAppendTime).
    pub timestamp: i64,
    /// The record itself.
    pub record: Record<'a>,
}

/// A whole stored batch (`batch` is exactly its bytes): its header and its
/// records' bytes, decompressed into `scratch` (cleared first, at most
/// `bytes_max` bytes) when they are compressed, else borrowed.
pub fn decode<'a>(
    batch: &'a [u8],
    bytes_max: usize,
    scratch: &'a mut Vec<u8>,
) -> Result<(BatchHeader, &'a [u8]), ReadError> {
    let header = BatchHeader::read(batch)?;
    if header.size != batch.len() {
        return Err(ReadError::Batch(BatchError::Short {
            have: batch.len(),
            need: header.size,
        }));
    }
    let codec = header
        .compression()
        .ok_or(ReadError::Codec(header.attributes & super::ATTR_CODEC))?;
    let block = &batch[HEADER_BYTES..];
    if codec == Compression::None {
        return Ok((header, block));
    }
    scratch.clear();
    decompress(codec, block, bytes_max, scratch)?;
    Ok((header, scratch.as_slice()))
}

/// The records of a decoded batch, in order; the first that does not
/// parse ends them with its error.
pub fn records<'a>(
    header: &BatchHeader,
    bytes: &'a [u8],
) -> impl Iterator<Item = Result<BatchRecord<'a>, RecordError>> + 'a {
    let header = *header;
    let mut at = 0usize;
    let mut left = header.record_count.max(0);
    std::iter::from_fn(move || {
        if left == 0 || at >= bytes.len() {
            return None;
        }
        left -= 1;
        match read_record(&bytes[at..]) {
            Ok((record, used)) => {
                at += used;
                Some(Ok(BatchRecord {
                    offset: header
                        .base_offset
                        .saturating_add(i64::from(record.offset_delta)),
                    timestamp: timestamp_of(&header, &record),
                    record,
                }))
            }
            Err(e) => {
                left = 0;
                Some(Err(e))
            }
        }
    })
}

/// A record's time: the batch's maxTimestamp under LogAppendTime (the
/// broker's), else the batch's baseTimestamp + the record's delta.
pub fn timestamp_of(header: &BatchHeader, record: &Record<'_>) -> i64 {
    if header.attributes & ATTR_LOG_APPEND_TIME != 0 {
        header.max_timestamp
    } else {
        header.base_timestamp.saturating_add(record.timestamp_delta)
    }
}

/// The offset of the first record of a whole stored batch whose time is
/// `time` or later (Kafka's rule for an offset by time): its baseOffset
/// under LogAppendTime (every record has the batch's time), else the
/// record's; `None` if no record is that late, or the records cannot be
/// read within `bytes_max`.
pub fn first_at_or_after(batch: &[u8], time: i64, bytes_max: usize) -> Option<i64> {
    first_record_at_or_after(batch, time, bytes_max).map(|(offset, _)| offset)
}

/// [`first_at_or_after`] with that record's time (Kafka's ListOffsets
/// answers both).
pub fn first_record_at_or_after(batch: &[u8], time: i64, bytes_max: usize) -> Option<(i64, i64)> {
    let header = BatchHeader::read(batch).ok()?;
    if header.attributes & ATTR_LOG_APPEND_TIME != 0 {
        return (header.max_timestamp >= time)
            .then_some((header.base_offset, header.max_timestamp));
    }
    let mut scratch = Vec::new();
    let (header, bytes) = decode(batch, bytes_max, &mut scratch).ok()?;
    let found = records(&header, bytes)
        .map_while(Result::ok)
        .find(|r| r.timestamp >= time)
        .map(|r| (r.offset, r.timestamp));
    found
}
