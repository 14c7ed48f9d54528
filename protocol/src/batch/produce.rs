//! A produced batch, from a client's bytes to what is stored: the checks
//! ([`check`]), then the broker's fields ([`stamp`]). Nothing here
//! decompresses: a compressed batch is checked by its header and CRC, an
//! uncompressed one record by record as well.

use super::records::check_records;
use super::{
    at, BatchError, BatchHeader, Compression, ATTR_CODEC, ATTR_CONTROL, ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL, BATCH_BYTES_MAX, HEADER_BYTES,
};

/// Checks one whole produced batch (`batch` is exactly its bytes): its
/// header, its CRC-32C, a known codec, no control or transactional bit,
/// 1 ..= size records with lastOffsetDelta = recordCount - 1, a producer's
/// numbering all set or all -1, and — uncompressed — every record parsed
/// with offsetDelta = its index and nothing after the last.
pub fn check(batch: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = BatchHeader::read(batch)?;
    if header.size != batch.len() {
        return Err(if header.size > batch.len() {
            BatchError::Short {
                have: batch.len(),
                need: header.size,
            }
        } else {
            BatchError::Trailing(batch.len() - header.size)
        });
    }
    let computed = super::crc(batch);
    if computed != header.crc {
        return Err(BatchError::Crc {
            stored: header.crc,
            computed,
        });
    }
    let Some(codec) = header.compression() else {
        return Err(BatchError::Codec(header.attributes & ATTR_CODEC));
    };
    if header.attributes & ATTR_CONTROL != 0 {
        return Err(BatchError::Control);
    }
    if header.attributes & ATTR_TRANSACTIONAL != 0 {
        return Err(BatchError::Transactional);
    }
    let count = header.record_count;
    if count < 1 || count as usize > header.size {
        return Err(BatchError::RecordCount {
            count,
            size: header.size,
        });
    }
    if header.last_offset_delta != count - 1 {
        return Err(BatchError::LastOffsetDelta {
            delta: header.last_offset_delta,
            count,
        });
    }
    let numbered = [
        header.producer_id >= 0,
        header.producer_epoch >= 0,
        header.base_sequence >= 0,
    ];
    let unnumbered = header.producer_id == -1;
    if !(numbered.iter().all(|&n| n) || unnumbered) {
        return Err(BatchError::Producer {
            id: header.producer_id,
            epoch: header.producer_epoch,
            sequence: header.base_sequence,
        });
    }
    if codec == Compression::None {
        let (found, left) = check_records(&batch[HEADER_BYTES..], count)
            .map_err(|(index, problem)| BatchError::Record { index, problem })?;
        if found != count || left != 0 {
            return Err(BatchError::Records { found, left, count });
        }
    }
    Ok(header)
}

/// The broker's fields of a batch it stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// The batch's byte position in the partition: its baseOffset.
    pub position: u64,
    /// The leader's epoch: its partitionLeaderEpoch.
    pub leader_epoch: i32,
    /// The topic's timestamps are the broker's: the append time (ms)
    /// becomes maxTimestamp, and the LogAppendTime bit is set.
    pub log_append_time: Option<i64>,
}

/// Sets a checked batch's baseOffset, partitionLeaderEpoch and
/// lastOffsetDelta (= size - 1, so the offset after it is the next
/// batch's position), and LogAppendTime if asked; the CRC-32C follows from
/// the batch's checked one (it must be right: [`check`] says so) by the
/// header's change alone (`batch/crc_shift.rs`), the records not read
/// again.
///
/// Panics if `batch` is not a header's to [`BATCH_BYTES_MAX`] bytes or
/// `position` is past `i64::MAX` (the caller checked the batch, and a
/// log's positions stay far below).
pub fn stamp(batch: &mut [u8], stamp: Stamp) {
    assert!((HEADER_BYTES..=BATCH_BYTES_MAX).contains(&batch.len()));
    assert!(
        stamp.position <= i64::MAX as u64,
        "a log position below 2^63"
    );
    // The CRC's part of the header before the stamp: the new CRC follows
    // from the checked one and this, without a pass over the records.
    let mut old_head = [0u8; HEADER_BYTES - at::ATTRIBUTES];
    old_head.copy_from_slice(&batch[at::ATTRIBUTES..HEADER_BYTES]);
    let old_crc = u32::from_be_bytes([
        batch[at::CRC],
        batch[at::CRC + 1],
        batch[at::CRC + 2],
        batch[at::CRC + 3],
    ]);
    let position = stamp.position as i64;
    let last_delta = (batch.len() - 1) as i32;
    batch[at::BASE_OFFSET..at::BASE_OFFSET + 8].copy_from_slice(&position.to_be_bytes());
    batch[at::LEADER_EPOCH..at::LEADER_EPOCH + 4]
        .copy_from_slice(&stamp.leader_epoch.to_be_bytes());
    batch[at::LAST_OFFSET_DELTA..at::LAST_OFFSET_DELTA + 4]
        .copy_from_slice(&last_delta.to_be_bytes());
    if let Some(now) = stamp.log_append_time {
        let attributes = u16::from_be_bytes([batch[at::ATTRIBUTES], batch[at::ATTRIBUTES + 1]])
            | ATTR_LOG_APPEND_TIME;
        batch[at::ATTRIBUTES..at::ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
        batch[at::MAX_TIMESTAMP..at::MAX_TIMESTAMP + 8].copy_from_slice(&now.to_be_bytes());
    }
    let crc = super::crc_shift::after_head_change(
        old_crc,
        &old_head,
        &batch[at::ATTRIBUTES..HEADER_BYTES],
        batch.len() - HEADER_BYTES,
    );
    batch[at::CRC..at::CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Sets a stored batch's partitionLeaderEpoch alone (a mirror's copy takes
/// its own cluster's epoch). The field lies outside the CRC: nothing else
/// changes.
///
/// Panics if `batch` is shorter than a header.
pub fn stamp_epoch(batch: &mut [u8], leader_epoch: i32) {
    assert!(batch.len() >= HEADER_BYTES);
    batch[at::LEADER_EPOCH..at::LEADER_EPOCH + 4].copy_from_slice(&leader_epoch.to_be_bytes());
}

/// The batches in `bytes`, in order, each with its place: headers read,
/// nothing else checked (a produce request's records, a fetched chunk, a
/// segment being recovered). Stops at the first error, or at a batch cut
/// short by the end of `bytes` (reported as [`BatchError::Short`]).
pub fn batches(
    bytes: &[u8],
) -> impl Iterator<Item = Result<(usize, BatchHeader), BatchError>> + '_ {
    let mut at = 0usize;
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || at >= bytes.len() {
            return None;
        }
        let result = BatchHeader::read(&bytes[at..]).and_then(|header| {
            if bytes.len() - at < header.size {
                Err(BatchError::Short {
                    have: bytes.len() - at,
                    need: header.size,
                })
            } else {
                Ok((at, header))
            }
        });
        match &result {
            Ok((_, header)) => at += header.size,
            Err(_) => failed = true,
        }
        Some(result)
    })
}
