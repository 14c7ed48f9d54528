//! Recovery: make a partition's files trustworthy before it serves.
//!
//! After a crash the tail of the log may hold a torn write or garbage. On
//! start, every segment from the one holding the *recovery point* onwards is
//! scanned: each message's length, magic and CRC are checked, and the log is
//! truncated at the first message that fails, with a warning that says how
//! many bytes were cut. Segments after a cut are removed whole, since their
//! offsets would no longer be contiguous.
//!
//! The recovery point (`recovery-point` in the partition directory) is a
//! flushed offset the broker wrote down: everything below it was fsynced, so
//! it needs no scan. It is written lazily while running and exactly (with
//! fsync) at a graceful stop, so a clean restart scans nothing. A missing or
//! unreadable recovery point means "scan everything" — slower, never unsafe.
//! This runs with the storage's blocking calls, at start-up only, before the
//! shard serves.

use super::epochs::Epochs;
use super::error::StorageError;
use super::io::Storage;
use super::segment::{parse_segment_file_name, DELETED_SUFFIX};
use protocol::stored::{unit, MessageFormat, StoredError, Unit};
use std::path::Path;

/// Name of the recovery-point file inside a partition directory.
pub const RECOVERY_POINT_FILE: &str = "recovery-point";

/// Name of the file in a replicated partition's directory that keeps the
/// highest high watermark the copy has learned (Kafka's
/// `replication-offset-checkpoint`, per partition): after a restart a
/// follower still knows what was committed, and never truncates below it
/// on the word of a leader that is not newer than its own last epoch.
pub const HIGH_WATERMARK_FILE: &str = "high-watermark";

/// A segment as found on disk after recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundSegment {
    /// Its base offset.
    pub base_offset: u64,
    /// Bytes of valid messages.
    pub size_bytes: u64,
    /// File modification time, ms since the epoch.
    pub modified_ms: u64,
}

/// What recovery found and did.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Valid segments, contiguous, oldest first.
    pub segments: Vec<FoundSegment>,
    /// Bytes removed from the tail (torn or corrupt data, orphaned segments).
    pub bytes_cut: u64,
    /// Bytes checked message by message.
    pub bytes_scanned: u64,
    /// Bytes above the recovery point fdatasynced before being exposed.
    pub bytes_synced: u64,
    /// Segments found damaged and kept (see `recover`): damage inside a
    /// message with valid data after it, in the same segment or the next.
    pub damaged_segments: u64,
    /// The offset of the first damaged message kept, if any: a replicated
    /// copy cuts its log there when it lies above what the copy knows was
    /// committed (`partition_log::cut_uncommitted_damage`).
    pub first_damaged: Option<u64>,
}

/// The recovery point's content: the offset and a CRC-32 of it, so that a
/// file torn by a power cut reads as missing rather than as a smaller offset
/// inside a message, from which recovery would "scan" garbage and cut the log
/// mid-message (found by the model test). Always 30 bytes (the offset padded
/// to 20 digits), so an overwrite in place covers the whole previous content.
fn recovery_point_text(offset: u64) -> String {
    format!(
        "{offset:020} {:08x}\n",
        crc32fast::hash(&offset.to_le_bytes())
    )
}

/// Reads the recovery point, if present, whole and checked.
pub fn read_recovery_point(storage: &impl Storage, dir: &Path) -> Option<u64> {
    read_offset_file(storage, &dir.join(RECOVERY_POINT_FILE))
}

/// Reads a file of one offset and its CRC (the recovery point's format),
/// if present, whole and checked.
pub fn read_offset_file(storage: &impl Storage, path: &Path) -> Option<u64> {
    let bytes = storage.read_file(path).ok()?;
    let text = std::str::from_utf8(&bytes).ok()?;
    let (offset, crc) = text.strip_suffix('\n')?.split_once(' ')?;
    let offset: u64 = offset.parse().ok()?;
    (u32::from_str_radix(crc, 16).ok()? == crc32fast::hash(&offset.to_le_bytes())).then_some(offset)
}

/// Writes the recovery point over the previous one, in place; with `durable`
/// (graceful stop) the file and its directory entry are synced.
///
/// In place, not through a temporary file and a rename: every partition
/// writes it once a second while it takes writes, and creating a file per
/// write made ext4 allocate (and scan for) a new inode each time — 17% of
/// the shards' CPU with 1,000 partitions taking writes (issue 9, item 2). A
/// torn overwrite fails the CRC and means a full scan, as a torn rename did.
pub fn write_recovery_point(
    storage: &impl Storage,
    dir: &Path,
    offset: u64,
    durable: bool,
) -> Result<(), StorageError> {
    write_offset_file(storage, dir, RECOVERY_POINT_FILE, offset, durable)
}

/// Writes a file of one offset and its CRC over the previous one, in
/// place (see [`write_recovery_point`]).
pub fn write_offset_file(
    storage: &impl Storage,
    dir: &Path,
    name: &str,
    offset: u64,
    durable: bool,
) -> Result<(), StorageError> {
    let path = dir.join(name);
    storage
        .overwrite_file(&path, recovery_point_text(offset).as_bytes(), durable)
        .map_err(|e| StorageError::io("writing", &path, e))?;
    if durable {
        // A file created since the last directory sync has a durable name
        // only once the directory is synced; a recovery point lost to a
        // power cut means a full scan.
        storage
            .sync_dir(dir)
            .map_err(|e| StorageError::io("syncing", dir, e))?;
    }
    Ok(())
}

/// Scans a partition directory, removes leftovers of retention, checks the
/// tail past the recovery point and truncates it where it is torn or corrupt.
#[expect(
    clippy::too_many_lines,
    reason = "recovery's scan, segment by segment, with the rot and torn-tail cases side by side"
)]
pub fn recover(
    storage: &impl Storage,
    dir: &Path,
    partition_label: &str,
    format: MessageFormat,
) -> Result<Recovered, StorageError> {
    let mut found = Vec::new();
    let entries = storage
        .list(dir)
        .map_err(|e| StorageError::io("listing", dir, e))?;
    for entry in entries {
        if entry.name.ends_with(DELETED_SUFFIX) {
            // Retention renamed it but did not get to unlink it.
            let _ = storage.remove_file(&dir.join(&entry.name));
            continue;
        }
        let Some(base_offset) = parse_segment_file_name(&entry.name) else {
            continue;
        };
        found.push(FoundSegment {
            base_offset,
            size_bytes: entry.len,
            modified_ms: entry.modified_ms,
        });
    }
    found.sort_by_key(|s| s.base_offset);

    let mut recovered = Recovered::default();
    // Offsets must be contiguous; anything after a gap or overlap is orphaned.
    let mut keep = found.len();
    for i in 1..found.len() {
        if found[i].base_offset != found[i - 1].base_offset + found[i - 1].size_bytes {
            keep = i;
            break;
        }
    }
    remove_from(
        storage,
        dir,
        &mut found,
        keep,
        &mut recovered,
        partition_label,
    )?;

    let recovery_point = read_recovery_point(storage, dir).unwrap_or(0);
    // A format-2 batch carries its leader epoch outside its CRC: the
    // epochs file says which it must be (see `judge`).
    let epochs = match format {
        MessageFormat::One => Epochs::default(),
        MessageFormat::Two => Epochs::load(storage, dir),
    };
    let scan = Scan {
        format,
        epochs: &epochs,
    };
    let first_to_scan = found
        .iter()
        .position(|s| s.base_offset + s.size_bytes > recovery_point)
        .unwrap_or(found.len());
    for i in first_to_scan..found.len() {
        let path = dir.join(super::segment::segment_file_name(found[i].base_offset));
        // Below the recovery point everything was fsynced and checked when
        // written: scan from there, so that only the unflushed tail can be
        // cut (issue 8, item 8). Without a recovery point, from the start.
        let from = recovery_point
            .saturating_sub(found[i].base_offset)
            .min(found[i].size_bytes);
        let (valid, scanned, damaged, first_damaged) =
            scan_segment(storage, &path, &scan, found[i].base_offset, from)?;
        recovered.bytes_scanned += scanned;
        if damaged > 0 {
            recovered.damaged_segments += 1;
            recovered.first_damaged = recovered.first_damaged.or(first_damaged);
        }
        if valid < found[i].size_bytes
            && i + 1 < found.len()
            && next_segment_starts_valid(storage, dir, &scan, &found[i + 1])?
        {
            // Damage in a closed segment followed by intact data is not a
            // torn tail: the segments after it were written later and may
            // hold acknowledged messages. Keep everything (truncating here
            // would delete them and hand their offsets out again, issue 8,
            // item 8); consumers get a CRC error at the damaged message and
            // can skip it. (A closed segment whose damage runs into a next
            // segment that is empty or invalid from its first byte is the
            // unflushed tail of a crash that spanned a roll: it is cut below,
            // with everything after it — found by the crash harness.)
            let next = found[i + 1].base_offset;
            tracing::error!(
                partition = partition_label,
                segment = %path.display(),
                damaged_offset = found[i].base_offset + valid,
                next_segment_offset = next,
                "recovery: a closed segment is damaged; kept as it is, with every later segment (a consumer can skip the damage by starting at the next segment's offset)"
            );
            recovered.damaged_segments += 1;
            recovered.first_damaged = recovered
                .first_damaged
                .or(Some(found[i].base_offset + valid));
            continue;
        }
        if valid < found[i].size_bytes {
            let cut = found[i].size_bytes - valid;
            tracing::warn!(
                partition = partition_label,
                segment = %path.display(),
                valid_bytes = valid,
                bytes_cut = cut,
                "recovery: truncating torn or corrupt tail"
            );
            storage
                .truncate(&path, valid, true)
                .map_err(|e| StorageError::io("truncating", &path, e))?;
            recovered.bytes_cut += cut;
            found[i].size_bytes = valid;
            remove_from(
                storage,
                dir,
                &mut found,
                i + 1,
                &mut recovered,
                partition_label,
            )?;
            break;
        }
    }
    recovered.segments = found;
    Ok(recovered)
}

/// True if the segment begins with a whole valid message, or with damaged
/// messages whose framing holds followed by one (damage at both ends of a
/// roll is rot too, not a torn tail).
fn next_segment_starts_valid(
    storage: &impl Storage,
    dir: &Path,
    scan: &Scan<'_>,
    next: &FoundSegment,
) -> Result<bool, StorageError> {
    if next.size_bytes == 0 {
        return Ok(false);
    }
    let path = dir.join(super::segment::segment_file_name(next.base_offset));
    Ok(next_valid_unit(storage, &path, scan, next.base_offset, 0)?.is_some())
}

fn remove_from(
    storage: &impl Storage,
    dir: &Path,
    found: &mut Vec<FoundSegment>,
    keep: usize,
    recovered: &mut Recovered,
    partition_label: &str,
) -> Result<(), StorageError> {
    for orphan in found.drain(keep.min(found.len())..) {
        let path = dir.join(super::segment::segment_file_name(orphan.base_offset));
        tracing::warn!(
            partition = partition_label,
            segment = %path.display(),
            bytes_cut = orphan.size_bytes,
            "recovery: removing segment after a gap or a truncated segment"
        );
        storage
            .remove_file(&path)
            .map_err(|e| StorageError::io("removing", &path, e))?;
        recovered.bytes_cut += orphan.size_bytes;
    }
    Ok(())
}

/// How recovery judges a log's units.
struct Scan<'a> {
    format: MessageFormat,
    /// The copy's leader epochs (none for format 1, or a copy that never
    /// had any: a topic with one copy, or a lost epochs file).
    epochs: &'a Epochs,
}

impl Scan<'_> {
    /// The unit at the start of `bytes`, stored at `offset`. A format-2
    /// batch's partitionLeaderEpoch lies outside its CRC: a flipped byte
    /// there would pass, and the copy would differ from its leader's for
    /// good (found by `replica/copies_model_test.rs`). Every append stamps
    /// the epoch the epochs file names for its offset (0 on a topic with
    /// one copy), so a batch of another epoch is damage, framed.
    fn judge(&self, bytes: &[u8], offset: u64) -> Unit {
        let judged = unit(self.format, bytes, offset);
        let Unit::Whole { len, .. } = judged else {
            return judged;
        };
        if self.format == MessageFormat::One {
            return judged;
        }
        let at = protocol::batch::at::LEADER_EPOCH;
        let stamped = i32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
        let expected = self.epochs.epoch_at(offset);
        let fits = if expected >= 0 {
            stamped == expected
        } else {
            (0..=self.epochs.last_epoch().max(0)).contains(&stamped)
        };
        if fits {
            judged
        } else {
            Unit::Damaged {
                framed: Some(len),
                error: StoredError::Epoch {
                    offset,
                    stamped,
                    expected,
                },
            }
        }
    }
}

/// Scans from position `from` (a unit's boundary: a format-1 message or a
/// format-2 batch); returns (the position where valid whole units end,
/// bytes read, damaged units kept, the offset of the first of them).
fn scan_segment(
    storage: &impl Storage,
    path: &Path,
    scan: &Scan<'_>,
    base_offset: u64,
    from: u64,
) -> Result<(u64, u64, u64, Option<u64>), StorageError> {
    let format = scan.format;
    let mut damaged = 0u64;
    let mut first_damaged = None;
    let mut position = from;
    let mut buf: Vec<u8> = Vec::with_capacity(4 << 20);
    let mut valid = from;
    let mut read_total = 0u64;
    let mut eof = false;
    loop {
        // Top up the buffer; it holds the bytes from `valid` onwards.
        if !eof {
            let want = (4usize << 20).max(buf.len() + 1);
            let old = buf.len();
            buf.resize(want.min(old + (4 << 20)), 0);
            let n = storage
                .read_at(path, position, &mut buf[old..])
                .map_err(|e| StorageError::io("reading", path, e))?;
            position += n as u64;
            buf.truncate(old + n);
            read_total += n as u64;
            eof = n == 0;
        }
        let mut consumed = 0usize;
        let mut failed = None;
        let mut need = None;
        while consumed < buf.len() {
            match scan.judge(&buf[consumed..], base_offset + valid + consumed as u64) {
                Unit::Whole { len, .. } => consumed += len,
                Unit::Incomplete { need: n } => {
                    need = Some(n);
                    break;
                }
                Unit::Damaged { framed, error } => {
                    failed = Some((framed, error));
                    break;
                }
            }
        }
        valid += consumed as u64;
        buf.drain(..consumed);
        if let Some((framed, error)) = failed {
            // Damage inside one unit whose framing still holds, followed
            // by a valid unit, is rot, not a torn write: a crash leaves
            // garbage or a short unit at the end, not a good unit after a
            // bad one. Keep it and go on, or acknowledged messages after
            // it would be cut (found by the model test: a damaged closed
            // segment whose successor had not reached the disk). Consumers
            // get a CRC error there and can step over it.
            if let Some(stored) = framed {
                let next =
                    next_valid_unit(storage, path, scan, base_offset, valid + stored as u64)?;
                if let Some((next, skipped)) = next {
                    tracing::error!(
                        segment = %path.display(),
                        offset = base_offset + valid,
                        damaged_units = 1 + skipped,
                        %error,
                        "recovery: damaged messages with intact data after them; kept (consumers can skip them)"
                    );
                    first_damaged = first_damaged.or(Some(base_offset + valid));
                    valid = next;
                    position = valid;
                    buf.clear();
                    eof = false;
                    damaged += 1 + skipped;
                    continue;
                }
            }
            tracing::warn!(segment = %path.display(), %error, "recovery: invalid message");
            return Ok((valid, read_total, damaged, first_damaged));
        }
        if need.is_some_and(|need| need > format.unit_bytes_max()) || eof {
            // Anything left is an incomplete (torn) unit.
            return Ok((valid, read_total, damaged, first_damaged));
        }
    }
}

/// Damaged units in a row that recovery follows by their length fields
/// looking for a valid one.
const DAMAGED_RUN_MAX: u64 = 64;

/// From `position`, follows units whose framing holds but whose contents
/// are bad, up to the first whole valid one: returns its position and how
/// many damaged ones were passed, or `None` if framing breaks, the file
/// ends or the run is too long (then it is a torn tail, not rot).
fn next_valid_unit(
    storage: &impl Storage,
    path: &Path,
    scan: &Scan<'_>,
    base_offset: u64,
    mut position: u64,
) -> Result<Option<(u64, u64)>, StorageError> {
    let format = scan.format;
    let read = |at: u64, buf: &mut Vec<u8>, len: usize| {
        buf.resize(len, 0);
        let n = storage
            .read_at(path, at, buf)
            .map_err(|e| StorageError::io("reading", path, e))?;
        buf.truncate(n);
        Ok::<bool, StorageError>(n == len)
    };
    let mut buf = Vec::new();
    for skipped in 0..DAMAGED_RUN_MAX {
        if !read(position, &mut buf, format.header_bytes())? {
            return Ok(None);
        }
        let mut judged = scan.judge(&buf, base_offset + position);
        if let Unit::Incomplete { need } = judged {
            if need > format.unit_bytes_max() || !read(position, &mut buf, need)? {
                return Ok(None);
            }
            judged = scan.judge(&buf, base_offset + position);
        }
        match judged {
            Unit::Whole { .. } => return Ok(Some((position, skipped))),
            Unit::Damaged {
                framed: Some(len), ..
            } => position += len as u64,
            Unit::Damaged { framed: None, .. } | Unit::Incomplete { .. } => return Ok(None),
        }
    }
    Ok(None)
}
