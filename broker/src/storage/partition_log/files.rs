//! The log's segment files: opened on demand (by the writer, or by a read
//! of a segment whose file was closed), at most a few per partition, and
//! closed when idle or when the shard needs descriptors.

use super::*;
use protocol::batch::{BatchHeader, HEADER_BYTES};

impl<S: Storage> PartitionLog<S> {
    /// Gives a segment the file a reader opened, unless another reader or
    /// the writer got there first, or retention removed the segment.
    pub(super) fn install_file(&mut self, base_offset: u64, file: Rc<S::File>) {
        let now = self.storage.now();
        let Some(index) = self.segments.find(base_offset) else {
            return;
        };
        let Some(segment) = self.segments.get_mut(index) else {
            return;
        };
        if segment.base_offset == base_offset && segment.file.is_none() {
            segment.file = Some(file);
            segment.last_used.set(now);
            self.note_open(base_offset);
        }
    }

    /// Records that a segment's file was just opened (once, whatever stale
    /// entries say) and closes the least recently used others past the cap.
    pub(super) fn note_open(&mut self, base_offset: u64) {
        if !self.files_open.contains(&base_offset) {
            self.files_open.push(base_offset);
        }
        self.trim_open_files(crate::limits::SEGMENT_FILES_PER_LOG_MAX, base_offset);
    }

    /// Closes the least recently used files nobody holds until at most
    /// `keep` are open (or none is left that may be closed); never the
    /// segment at `protect` (a file just opened for a caller).
    pub(super) fn trim_open_files(&mut self, keep: usize, protect: u64) {
        self.forget_closed_files();
        if self.files_open.len() <= keep {
            return;
        }
        let mut closable = self.closable_files();
        closable.retain(|&(_, base)| base != protect);
        closable.sort_unstable();
        let excess = self.files_open.len() - keep;
        for &(_, base) in closable.iter().take(excess) {
            self.close_file(base);
        }
    }

    /// Forgets entries whose segment is gone or whose file is closed
    /// (retention, rollbacks): they must not count as open.
    pub(super) fn forget_closed_files(&mut self) {
        let segments = &self.segments;
        let is_open = |base: u64| {
            segments
                .find(base)
                .map(|i| &segments.as_slice()[i])
                .is_some_and(|s| s.base_offset == base && s.file.is_some())
        };
        self.files_open.retain(|&base| is_open(base));
    }

    /// The open segment files that may be closed now — fully flushed, held
    /// by no write, flush or fetch — with when each was last used.
    pub fn closable_files(&self) -> Vec<(Instant, u64)> {
        let flushed = self.flushed_offset;
        self.files_open
            .iter()
            .filter_map(|&base| {
                let segment = &self.segments.as_slice()[self.segments.find(base)?];
                let file = segment.file.as_ref()?;
                (segment.base_offset == base
                    && Rc::strong_count(file) == 1
                    && segment.end_offset() <= flushed)
                    .then(|| (segment.last_used.get(), base))
            })
            .collect()
    }

    /// Closes the file of the segment at `base` if it may be closed (see
    /// [`Self::closable_files`]); true if it did. The next read or write of
    /// the segment opens it again.
    pub fn close_file(&mut self, base: u64) -> bool {
        let flushed = self.flushed_offset;
        let Some(segment) = self
            .segments
            .find(base)
            .and_then(|i| self.segments.get_mut(i))
        else {
            return false;
        };
        let closable = segment.base_offset == base
            && segment.end_offset() <= flushed
            && segment
                .file
                .as_ref()
                .is_some_and(|f| Rc::strong_count(f) == 1);
        if closable {
            segment.file = None;
            self.files_open.retain(|&b| b != base);
        }
        closable
    }

    /// Closes the files of segments nobody wrote or read for `idle`: fully
    /// flushed, no write in flight, no fetch holding the file. Returns how
    /// many it closed. Only segments with an open file are looked at.
    pub fn close_idle_files(&mut self, now: Instant, idle: Duration) -> usize {
        self.forget_closed_files();
        let idle: Vec<u64> = self
            .closable_files()
            .into_iter()
            .filter(|&(used, _)| now.duration_since(used) >= idle)
            .map(|(_, base)| base)
            .collect();
        idle.into_iter()
            .filter(|&base| self.close_file(base))
            .count()
    }

    /// Segment files open now.
    pub fn files_open(&self) -> usize {
        self.files_open.len()
    }
}

pub(super) async fn open_segment_file<S: Storage>(
    storage: &S,
    path: &Path,
) -> Result<S::File, StorageError> {
    storage
        .open(path, true)
        .await
        .map_err(|e| StorageError::io("opening", path, e))
}

/// Describes up to `bytes_max` flushed bytes at `offset`, opening the
/// segment's file when it was closed for idleness.
pub async fn read<S: Storage>(
    log: &Shared<S>,
    offset: u64,
    bytes_max: u32,
) -> Result<Option<FetchSlice<S::File>>, StorageError> {
    read_below(log, offset, bytes_max, None).await
}

/// [`read`] up to `limit` (a follower's fetch: what is written) instead of
/// the visible end.
pub async fn read_below<S: Storage>(
    log: &Shared<S>,
    offset: u64,
    bytes_max: u32,
    limit: Option<u64>,
) -> Result<Option<FetchSlice<S::File>>, StorageError> {
    // Format 1 never needs it; format 2 only off a known batch start.
    let locate = {
        let l = log.borrow();
        l.settings.format == protocol::stored::MessageFormat::Two
            && matches!(
                l.try_read_below(offset, bytes_max, limit.unwrap_or(u64::MAX)),
                Ok(Read::Locate)
            )
    };
    if locate {
        let start = batch_start(log, offset, limit).await?;
        return read_at(log, start, bytes_max, limit).await;
    }
    read_at(log, offset, bytes_max, limit).await
}

/// Bytes to read at once while hopping over batch headers.
pub(super) const HOP_READ_BYTES: u32 = 64 * 1024;

/// Where a hop over format-2 batch headers stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hop {
    /// The first batch the hop was looking for: its offset and header.
    Found(u64, BatchHeader),
    /// The end of what may be read, without it.
    End,
    /// Bytes at this offset that cannot be a batch's header.
    Damaged(u64),
}

/// Hops over the format-2 batch headers from `at` (a batch start) to the
/// visible end (or `limit`), noting each batch in its segment's index,
/// until `wanted` takes one. Reads `read_bytes(at)` bytes at a time (at
/// least a header's): the files' bytes, usually from the page cache.
pub(super) async fn hop<S: Storage>(
    log: &Shared<S>,
    mut at: u64,
    limit: Option<u64>,
    read_bytes: impl Fn(u64) -> u32,
    mut wanted: impl FnMut(u64, &BatchHeader) -> bool,
) -> Result<Hop, StorageError> {
    loop {
        let want = read_bytes(at).max(HEADER_BYTES as u32);
        let Some(slice) = read_at(log, at, want, limit).await? else {
            return Ok(Hop::End);
        };
        let bytes = crate::storage::io::SegmentFile::read_at(
            &*slice.file,
            slice.position,
            slice.len as usize,
        )
        .await
        .map_err(|e| StorageError::io("reading", log.borrow().dir(), e))?;
        let mut hopped = 0usize;
        while bytes.len().saturating_sub(hopped) >= HEADER_BYTES {
            let start = at + hopped as u64;
            let Ok(header) = BatchHeader::read(&bytes[hopped..]) else {
                return Ok(Hop::Damaged(start));
            };
            log.borrow_mut()
                .note_batch(start, header.size as u64, header.max_timestamp);
            if wanted(start, &header) {
                return Ok(Hop::Found(start, header));
            }
            hopped += header.size;
        }
        // Less than a header at `at`: the end (batches end where the
        // visible bytes and the segments do).
        if hopped == 0 {
            return Ok(Hop::End);
        }
        at += hopped as u64;
    }
}

/// The size of the format-2 batch that starts at `offset` (a batch start
/// a read returned), from its header: `None` past the visible end or
/// where no header can be read. A fetch whose first batch is larger than
/// the client's maximum serves that batch whole (Kafka's KIP-74), so it
/// needs the size.
pub async fn batch_size_at<S: Storage>(
    log: &Shared<S>,
    offset: u64,
) -> Result<Option<u32>, StorageError> {
    let header = |_: u64| HEADER_BYTES as u32;
    Ok(match hop(log, offset, None, header, |_, _| true).await? {
        Hop::Found(start, found) if start == offset => u32::try_from(found.size).ok(),
        _ => None,
    })
}

/// The whole batch of `size` bytes at `offset` (visible), read into
/// memory; `None` if it is not all there.
pub(super) async fn read_exact_batch<S: Storage>(
    log: &Shared<S>,
    offset: u64,
    size: usize,
) -> Result<Option<Vec<u8>>, StorageError> {
    let Some(slice) = read_at(log, offset, size as u32, None).await? else {
        return Ok(None);
    };
    if slice.len as usize != size {
        return Ok(None);
    }
    let bytes = crate::storage::io::SegmentFile::read_at(&*slice.file, slice.position, size)
        .await
        .map_err(|e| StorageError::io("reading", log.borrow().dir(), e))?;
    Ok((bytes.len() == size).then_some(bytes))
}

/// The start of the format-2 batch that holds `offset` (Kafka's rule: the
/// first batch whose last offset is at or past it): from the segment's
/// sparse index, hopping over the headers after it. A header that cannot
/// be a batch's ends the hop at `offset` itself (the reader meets the
/// damage there, as it would have).
async fn batch_start<S: Storage>(
    log: &Shared<S>,
    offset: u64,
    limit: Option<u64>,
) -> Result<u64, StorageError> {
    let from = {
        let l = log.borrow();
        let Some(i) = l.segments.find(offset) else {
            return Ok(offset);
        };
        let segment = &l.segments.as_slice()[i];
        segment.base_offset + segment.index.from(offset - segment.base_offset)
    };
    if from >= offset {
        return Ok(offset);
    }
    // Up to the header at the offset: usually the few KiB after an
    // indexed start.
    let read_bytes = |at: u64| {
        (offset.saturating_sub(at) + HEADER_BYTES as u64).min(u64::from(HOP_READ_BYTES)) as u32
    };
    let holds = |start: u64, header: &BatchHeader| start + header.size as u64 > offset;
    Ok(match hop(log, from, limit, read_bytes, holds).await? {
        Hop::Found(start, _) => start,
        Hop::End | Hop::Damaged(_) => offset,
    })
}

/// [`read_below`] at an offset known to start a unit.
pub(super) async fn read_at<S: Storage>(
    log: &Shared<S>,
    offset: u64,
    bytes_max: u32,
    limit: Option<u64>,
) -> Result<Option<FetchSlice<S::File>>, StorageError> {
    // The file this call opened, held until the read below has its own
    // handle: a file nobody holds may be closed again at once by the
    // per-partition cap, and the read would open it forever.
    let mut opened: Option<Rc<S::File>> = None;
    loop {
        let found = {
            let l = log.borrow();
            let limit = limit.unwrap_or_else(|| l.visible_offset());
            l.try_read_at(offset, bytes_max, limit, true)?
        };
        match found {
            Read::Slice(slice) => return Ok(Some(slice)),
            Read::NotYet => return Ok(None),
            Read::Locate => unreachable!("a located read is never asked to locate"),
            Read::Closed { .. } if opened.is_some() => {
                return Err(StorageError::io(
                    "opening",
                    log.borrow().dir(),
                    std::io::Error::other("a segment file closed again while being read"),
                ));
            }
            Read::Closed { base_offset, path } => {
                // Writable, as the writer may use it too (the active
                // segment); never created: retention may have removed it.
                let storage = log.borrow().storage.clone();
                let file = storage
                    .open(&path, false)
                    .await
                    .map_err(|e| StorageError::io("opening", &path, e))?;
                let file = Rc::new(file);
                log.borrow_mut().install_file(base_offset, file.clone());
                opened = Some(file);
            }
        }
    }
}

/// The file of the segment starting at `base`, created on first use.
pub(super) async fn segment_file<S: Storage>(
    log: &Shared<S>,
    base: u64,
) -> Result<Rc<S::File>, StorageError> {
    let (existing, path, storage) = {
        let l = log.borrow();
        let index = l.segments.find(base);
        let segment = index.and_then(|i| l.segments.as_slice().get(i));
        match segment {
            Some(s) if s.base_offset == base => (s.file.clone(), s.path.clone(), l.storage.clone()),
            _ => {
                return Err(StorageError::Poisoned(format!(
                    "{}: pending bytes for unknown segment {base}",
                    l.label
                )))
            }
        }
    };
    if let Some(file) = existing {
        return Ok(file);
    }
    let file = Rc::new(open_segment_file(&storage, &path).await?);
    let mut l = log.borrow_mut();
    // Maybe created just now: its name is durable only once the directory
    // is synced, which the next flush round does.
    l.dir_unsynced = true;
    let Some(segment) = l.segments.find(base).and_then(|i| l.segments.get_mut(i)) else {
        return Ok(file);
    };
    match &segment.file {
        // A reader opened it meanwhile: use that one.
        Some(theirs) => Ok(theirs.clone()),
        None => {
            segment.file = Some(file.clone());
            segment.last_used.set(storage.now());
            l.note_open(base);
            Ok(file)
        }
    }
}
