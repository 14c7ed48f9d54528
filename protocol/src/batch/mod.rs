//! Message format 2: Kafka's RecordBatch v2, stored verbatim at ringlog's
//! byte offsets (issue 43; design record 0015).
//!
//! ```text
//! at  size  field                  set by
//!  0  8     baseOffset      i64 BE the broker: the batch's byte position
//!  8  4     batchLength     i32 BE bytes after this field (size - 12)
//! 12  4     leaderEpoch     i32 BE the broker: the leader's epoch
//! 16  1     magic           2
//! 17  4     crc             u32 BE CRC-32C of bytes 21.. (attributes to the end)
//! 21  2     attributes      i16 BE bits 0-2 codec, 3 LogAppendTime, 4 transactional, 5 control
//! 23  4     lastOffsetDelta i32 BE the broker: size - 1
//! 27  8     baseTimestamp   i64 BE
//! 35  8     maxTimestamp    i64 BE
//! 43  8     producerId      i64 BE -1 unless idempotent
//! 51  2     producerEpoch   i16 BE
//! 53  4     baseSequence    i32 BE
//! 57  4     recordCount     i32 BE
//! 61        records         (compressed as one block when the codec is not 0)
//! ```
//!
//! The offset rule: a record's offset is `baseOffset + offsetDelta`, and a
//! batch's last offset is `baseOffset + size - 1`, so the offset after a
//! batch is the next batch's byte position — every Kafka client moves on
//! to `lastOffset + 1` after a batch, and lands on a batch start. A batch
//! holds at most as many records as it has bytes, or its records' offsets
//! would run into the next batch's. `lastOffsetDelta` is inside the CRC,
//! so stamping it recomputes the CRC over the (still compressed) records.

pub mod compression;
mod crc_shift;
mod error;
pub mod produce;
pub mod read;
pub mod records;
pub mod sequence;
pub mod varint;
pub mod write;

pub use error::BatchError;

/// Bytes before the records.
pub const HEADER_BYTES: usize = 61;
/// Bytes not counted by `batchLength`: baseOffset and batchLength.
pub const LOG_OVERHEAD: usize = 12;
/// The only magic of this format.
pub const MAGIC: u8 = 2;
/// The largest batch ringlog stores (as a format-1 message set's bound).
pub const BATCH_BYTES_MAX: usize = 16 * 1024 * 1024;

/// Where each header field starts.
pub mod at {
    /// baseOffset.
    pub const BASE_OFFSET: usize = 0;
    /// batchLength.
    pub const LENGTH: usize = 8;
    /// partitionLeaderEpoch.
    pub const LEADER_EPOCH: usize = 12;
    /// magic.
    pub const MAGIC: usize = 16;
    /// crc.
    pub const CRC: usize = 17;
    /// attributes: the CRC covers everything from here.
    pub const ATTRIBUTES: usize = 21;
    /// lastOffsetDelta.
    pub const LAST_OFFSET_DELTA: usize = 23;
    /// baseTimestamp.
    pub const BASE_TIMESTAMP: usize = 27;
    /// maxTimestamp.
    pub const MAX_TIMESTAMP: usize = 35;
    /// producerId.
    pub const PRODUCER_ID: usize = 43;
    /// producerEpoch.
    pub const PRODUCER_EPOCH: usize = 51;
    /// baseSequence.
    pub const BASE_SEQUENCE: usize = 53;
    /// recordCount.
    pub const RECORD_COUNT: usize = 57;
}

/// How a batch's records are compressed (attribute bits 0-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    /// Stored as written.
    None = 0,
    /// gzip.
    Gzip = 1,
    /// snappy, in the xerial framing Kafka's Java client writes.
    Snappy = 2,
    /// lz4 frame.
    Lz4 = 3,
    /// zstd.
    Zstd = 4,
}

impl Compression {
    /// The codec of attribute bits 0-2, if one of the five.
    pub fn from_bits(bits: u16) -> Option<Compression> {
        match bits & ATTR_CODEC {
            0 => Some(Compression::None),
            1 => Some(Compression::Gzip),
            2 => Some(Compression::Snappy),
            3 => Some(Compression::Lz4),
            4 => Some(Compression::Zstd),
            _ => None,
        }
    }
}

/// Whose time a topic's batches carry (Kafka's `message.timestamp.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TimestampType {
    /// The producer's: each record's own, as written.
    #[default]
    Create = 1,
    /// The broker's: the time the batch was appended, stamped into its
    /// maxTimestamp with attribute bit 3, and every record reads as having
    /// it.
    LogAppend = 2,
}

impl TimestampType {
    /// 1 or 2, as the wire and the registry carry it.
    pub fn from_number(n: u32) -> Option<TimestampType> {
        match n {
            1 => Some(TimestampType::Create),
            2 => Some(TimestampType::LogAppend),
            _ => None,
        }
    }

    /// Kafka's name: CreateTime or LogAppendTime.
    pub fn name(self) -> &'static str {
        match self {
            TimestampType::Create => "CreateTime",
            TimestampType::LogAppend => "LogAppendTime",
        }
    }
}

/// Attribute bits 0-2: the codec.
pub const ATTR_CODEC: u16 = 0x07;
/// Attribute bit 3: the timestamps are the broker's (LogAppendTime).
pub const ATTR_LOG_APPEND_TIME: u16 = 0x08;
/// Attribute bit 4: part of a transaction.
pub const ATTR_TRANSACTIONAL: u16 = 0x10;
/// Attribute bit 5: a control batch (transaction markers).
pub const ATTR_CONTROL: u16 = 0x20;
/// Attribute bit 6: baseTimestamp is a compaction's delete horizon.
pub const ATTR_DELETE_HORIZON: u16 = 0x40;

/// A batch's header fields, read without touching its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// baseOffset: as stored, the batch's byte position.
    pub base_offset: i64,
    /// The whole batch's bytes (batchLength + 12).
    pub size: usize,
    /// partitionLeaderEpoch.
    pub leader_epoch: i32,
    /// The CRC-32C it carries.
    pub crc: u32,
    /// The attribute bits.
    pub attributes: u16,
    /// lastOffsetDelta.
    pub last_offset_delta: i32,
    /// baseTimestamp (ms).
    pub base_timestamp: i64,
    /// maxTimestamp (ms).
    pub max_timestamp: i64,
    /// producerId (-1: none).
    pub producer_id: i64,
    /// producerEpoch.
    pub producer_epoch: i16,
    /// baseSequence.
    pub base_sequence: i32,
    /// recordCount.
    pub record_count: i32,
}

impl BatchHeader {
    /// Reads the header at the start of `bytes` (which may hold more, or
    /// less, than the batch): magic 2 and a size of 61 ..=
    /// [`BATCH_BYTES_MAX`] bytes, nothing else checked.
    pub fn read(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
        if bytes.len() < HEADER_BYTES {
            return Err(BatchError::Short {
                have: bytes.len(),
                need: HEADER_BYTES,
            });
        }
        if bytes[at::MAGIC] != MAGIC {
            return Err(BatchError::Magic(bytes[at::MAGIC]));
        }
        let length = i32_at(bytes, at::LENGTH);
        let size = usize::try_from(length)
            .ok()
            .and_then(|l| l.checked_add(LOG_OVERHEAD))
            .filter(|s| (HEADER_BYTES..=BATCH_BYTES_MAX).contains(s))
            .ok_or(BatchError::Length(length))?;
        Ok(BatchHeader {
            base_offset: i64_at(bytes, at::BASE_OFFSET),
            size,
            leader_epoch: i32_at(bytes, at::LEADER_EPOCH),
            crc: i32_at(bytes, at::CRC) as u32,
            attributes: i16_at(bytes, at::ATTRIBUTES) as u16,
            last_offset_delta: i32_at(bytes, at::LAST_OFFSET_DELTA),
            base_timestamp: i64_at(bytes, at::BASE_TIMESTAMP),
            max_timestamp: i64_at(bytes, at::MAX_TIMESTAMP),
            producer_id: i64_at(bytes, at::PRODUCER_ID),
            producer_epoch: i16_at(bytes, at::PRODUCER_EPOCH),
            base_sequence: i32_at(bytes, at::BASE_SEQUENCE),
            record_count: i32_at(bytes, at::RECORD_COUNT),
        })
    }

    /// The codec, if one of the five.
    pub fn compression(&self) -> Option<Compression> {
        Compression::from_bits(self.attributes)
    }

    /// The offset of the batch's last record slot: `baseOffset +
    /// lastOffsetDelta` (as stored: `position + size - 1`).
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(i64::from(self.last_offset_delta))
    }

    /// True when the producer is idempotent (it numbers its batches).
    pub fn has_producer(&self) -> bool {
        self.producer_id >= 0
    }
}

/// The CRC-32C a batch should carry: over attributes to the end.
///
/// Panics if `batch` is shorter than the header (callers read the header
/// first).
pub fn crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(&batch[at::ATTRIBUTES..])
}

fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut eight = [0u8; 8];
    eight.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(eight)
}

#[cfg(test)]
mod tests;
