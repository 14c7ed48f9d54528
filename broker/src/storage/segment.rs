//! One segment file of a partition's log.
//!
//! A segment is named by its base offset, 20 digits, zero-padded:
//! `<data-dir>/<topic>-<partition>/00000000000000000000.log`. Its bytes are
//! messages in the format of `protocol::message`, back to back, exactly as
//! producers sent them; the byte at position `p` has offset `base_offset + p`.
//! Only the last (active) segment is appended to; the others are sealed.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Instant;

/// File-name suffix of a live segment.
pub const SEGMENT_SUFFIX: &str = ".log";
/// Suffix of a segment that retention removed but has not unlinked yet.
pub const DELETED_SUFFIX: &str = ".deleted";

/// A segment's file name for a base offset.
pub fn segment_file_name(base_offset: u64) -> String {
    format!("{base_offset:020}{SEGMENT_SUFFIX}")
}

/// Parses a segment file name back into its base offset.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// One segment: where it starts, how many bytes it holds (written or still
/// pending in memory), and its file while open. Files are opened when first
/// written or read and closed when idle, so a descriptor costs nothing for
/// the segments nobody touches (issue 8, item 4). `F` is the storage's file
/// type (`storage::io`). Not `Send`; owned by the shard that owns the
/// partition.
#[derive(Debug)]
pub struct Segment<F> {
    /// The offset of the first byte.
    pub base_offset: u64,
    /// Bytes assigned to this segment, including bytes not written yet.
    pub size_bytes: u64,
    /// The open file; `None` until written or read, and again once idle.
    pub file: Option<Rc<F>>,
    /// When the file was last written or read.
    pub last_used: Cell<Instant>,
    /// Milliseconds since the epoch of the last append (file mtime after a restart).
    pub last_append_ms: u64,
    /// The file's path.
    pub path: PathBuf,
    /// Where its format-2 batches start, sparsely (empty for format 1).
    pub index: super::batch_index::BatchIndex,
}

impl<F> Segment<F> {
    /// A segment in `dir` starting at `base_offset`, not yet opened.
    pub fn new(dir: &Path, base_offset: u64, now_ms: u64) -> Self {
        Segment {
            base_offset,
            size_bytes: 0,
            file: None,
            last_used: Cell::new(Instant::now()),
            last_append_ms: now_ms,
            path: dir.join(segment_file_name(base_offset)),
            index: super::batch_index::BatchIndex::default(),
        }
    }

    /// The offset just past this segment's last byte.
    pub fn end_offset(&self) -> u64 {
        self.base_offset + self.size_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_have_twenty_digits_and_round_trip() {
        assert_eq!(segment_file_name(0), "00000000000000000000.log");
        assert_eq!(segment_file_name(1234), "00000000000000001234.log");
        assert_eq!(
            parse_segment_file_name("00000000000000001234.log"),
            Some(1234)
        );
        assert_eq!(parse_segment_file_name("1234.log"), None);
        assert_eq!(parse_segment_file_name("0000000000000000123x.log"), None);
        assert_eq!(
            parse_segment_file_name("00000000000000001234.deleted"),
            None
        );
    }
}
