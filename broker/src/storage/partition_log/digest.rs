//! Digests of a copy's bytes (`ringlog verify`, the Digest api): the
//! CRC-32 of each chunk of a range, read from the segment files (usually
//! the page cache) without sending a byte.

use super::files::read_at;
use super::Shared;
use crate::storage::io::{SegmentFile, Storage};
use crate::storage::StorageError;

/// Bytes read at once.
const READ_BYTES: u64 = 1024 * 1024;

/// The CRC-32 of each `chunk` bytes of `[from, to)` (the last chunk may be
/// shorter); `to` must be at or below what the log may serve. Stops early
/// (fewer digests) only if the log's bytes end before `to`.
pub async fn digests<S: Storage>(
    log: &Shared<S>,
    from: u64,
    to: u64,
    chunk: u64,
) -> Result<Vec<u32>, StorageError> {
    assert!(chunk > 0, "a chunk holds bytes");
    let mut digests = Vec::with_capacity(to.saturating_sub(from).div_ceil(chunk) as usize);
    let mut hasher = crc32fast::Hasher::new();
    let mut in_chunk = 0u64;
    let mut at = from;
    while at < to {
        let want = (to - at).min(READ_BYTES) as u32;
        let Some(slice) = read_at(log, at, want, Some(to)).await? else {
            break;
        };
        let bytes = SegmentFile::read_at(&*slice.file, slice.position, slice.len as usize)
            .await
            .map_err(|e| StorageError::io("reading", log.borrow().dir(), e))?;
        if bytes.is_empty() {
            break;
        }
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let take = (chunk - in_chunk).min(rest.len() as u64) as usize;
            hasher.update(&rest[..take]);
            in_chunk += take as u64;
            rest = &rest[take..];
            if in_chunk == chunk {
                digests.push(std::mem::take(&mut hasher).finalize());
                in_chunk = 0;
            }
        }
        at += bytes.len() as u64;
    }
    if in_chunk > 0 {
        digests.push(hasher.finalize());
    }
    Ok(digests)
}
