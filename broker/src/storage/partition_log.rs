//! `PartitionLog`: one partition's append-only log.
//!
//! Four offsets describe it, always ordered
//! `start_offset <= flushed_offset <= written_offset <= end_offset`:
//!
//! | offset           | meaning                                                      |
//! |------------------|--------------------------------------------------------------|
//! | `start_offset`   | first retained byte (retention moves it forward)             |
//! | `flushed_offset` | fsynced; consumers see everything below it, nothing above    |
//! | `written_offset` | handed to the kernel (page cache) by an io_uring write       |
//! | `end_offset`     | next offset to assign; bytes above `written_offset` wait in memory |
//!
//! An append only copies the message set into a pending buffer and assigns
//! its offsets, so the produce path never waits for I/O. One *writer task*
//! per partition at a time writes pending chunks (with io_uring on the
//! broker's [`DiskStorage`], so tailing consumers are served from the page
//! cache — see `docs/design/0001-buffered-appends.md`), and *flush rounds*
//! fdatasync the touched segments and advance `flushed_offset`.
//!
//! The log owns its policy: [`append`] says what a producer waits for
//! ([`Appended`], then [`stored`]) and starts the writer or a flush round
//! as the ack mode and the topic's flush policy require; [`tick`] is the
//! time half of the policy, called by the shard's timer. All file I/O goes
//! through a [`Storage`] (`io.rs`), so the same code runs on the in-memory
//! disk of the model test (`model_test.rs`).
//!
//! Failures come in two kinds. A *transient* one while creating or writing a
//! segment (disk full, out of descriptors or memory) damages nothing: the
//! log drops its unwritten tail (`end_offset` goes back to `written_offset`,
//! a file a short write extended is truncated back), tells every producer
//! waiting on a dropped offset that it was not stored, and refuses appends
//! for [`STORAGE_RETRY`]; then it tries again — a cured disk takes writes
//! without a restart. Any other failed write, and every failed fdatasync
//! (after which the page cache cannot be trusted to hold what the disk
//! lacks), *poisons* the partition: it refuses writes until a restart
//! recovers it from what is on disk.
//!
//! Not `Send`: owned by the shard that owns the partition, shared within it as
//! `Rc<RefCell<_>>` and never borrowed across an `.await`.

use super::budget::UnwrittenBudget;
use super::error::StorageError;
use super::io::{with_suffix, DiskFile, DiskStorage, SegmentFile, Storage};
use super::recovery::{self, Recovered};
use super::segment::{Segment, DELETED_SUFFIX};
use super::segments::Segments;
use crate::log_limit::LogLimit;
use crate::metrics::{self, FlushStats};
use crate::notify::Notify;
use protocol::codec::AckMode;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A partition log shared within its shard.
pub type Shared<S> = Rc<RefCell<PartitionLog<S>>>;

/// The broker's partition log, on [`DiskStorage`].
pub type SharedLog = Shared<DiskStorage>;

/// Pending bytes above which an append starts a write without waiting for the
/// flush timer: big enough for few, large io_uring writes; small enough to
/// keep memory per partition bounded.
pub const WRITE_CHUNK_BYTES: usize = 1 << 20;

/// The smallest pending chunk a partition allocates.
const PENDING_CHUNK_MIN_BYTES: usize = 4096;

/// The largest pending chunk (unless one append is larger): each chunk is
/// one io_uring write, and the page cache sizes its folios by the write — a
/// 4 MiB write asks for 2 MiB folios, which on this VM come from memory the
/// host took back and must fault in again (`examples/write_sizes.rs`: down
/// to 381 MB/s for 4 MiB writes, 4.2–5.3 GB/s for 64 KiB–1 MiB ones;
/// `docs/design/0010-disk-driver.md`).
pub const PENDING_CHUNK_MAX_BYTES: usize = 256 * 1024;

/// How long a partition refuses appends after a transient failure before it
/// tries the disk again.
pub const STORAGE_RETRY: Duration = Duration::from_secs(1);

/// Rollbacks remembered for producers still waiting; a waiter older than all
/// of them is told its messages were dropped (it cannot tell otherwise).
const ROLLBACKS_KEPT: usize = 64;

/// Per-partition settings (the topic's, with broker defaults filled in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogSettings {
    /// Roll to a new segment when the active one would exceed this.
    pub segment_bytes: u64,
    /// Flush after this many unflushed messages.
    pub flush_messages: u64,
    /// Flush this long after the oldest unflushed append.
    pub flush_interval_ms: u64,
    /// Delete closed segments whose last append is older than this.
    pub retention_ms: u64,
    /// Delete the oldest closed segments while the log is larger (0 = off).
    pub retention_bytes: u64,
    /// While a fetch waits at the flushed end for new messages, appends are
    /// flushed at most this long after they arrive (zero: at once, as for
    /// a flushed produce), so a tailing consumer sees messages after about
    /// one fdatasync, not after the policy's interval. `None`: the policy
    /// alone, whoever waits.
    pub waiting_fetch_flush: Option<std::time::Duration>,
}

/// Bytes appended but not yet written, all for one segment.
#[derive(Debug)]
struct PendingChunk {
    segment_base: u64,
    position: u64,
    bytes: Vec<u8>,
    messages: u64,
}

/// What [`PartitionLog::try_read`] found at an offset.
#[derive(Debug)]
pub enum Read<F> {
    /// Flushed bytes, ready to send.
    Slice(FetchSlice<F>),
    /// Nothing flushed at the offset yet.
    NotYet,
    /// The bytes are in a segment whose file is closed: open it, then ask again.
    Closed {
        /// The segment's base offset.
        base_offset: u64,
        /// Its file.
        path: PathBuf,
    },
}

/// What a fetch returns: a range of one segment file, described, not copied.
#[derive(Debug)]
pub struct FetchSlice<F = DiskFile> {
    /// The segment file.
    pub file: Rc<F>,
    /// Byte position in the file.
    pub position: u64,
    /// Bytes to send (0 when nothing is flushed at the offset yet).
    pub len: u32,
}

impl<F> Clone for FetchSlice<F> {
    fn clone(&self) -> Self {
        FetchSlice {
            file: self.file.clone(),
            position: self.position,
            len: self.len,
        }
    }
}

/// What [`append`] assigned, and what the producer's acknowledgement waits
/// for (see [`stored`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The first offset of the message set.
    pub base: u64,
    /// The offset just past it.
    pub end: u64,
    /// The rollback epoch it was appended in.
    pub epoch: u64,
}

/// Why appended messages will never be acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotStored {
    /// The topic was deleted while the producer waited.
    Deleted,
    /// A transient failure dropped them; a retry may succeed.
    Dropped(String),
    /// A write or fdatasync failed: the partition refuses writes.
    Failed(String),
}

/// One partition's log. See the module doc for the offsets and the tasks.
#[derive(Debug)]
pub struct PartitionLog<S: Storage = DiskStorage> {
    storage: S,
    label: String,
    dir: PathBuf,
    settings: LogSettings,
    segments: Segments<S::File>,
    start_offset: u64,
    flushed_offset: u64,
    written_offset: u64,
    end_offset: u64,
    pending: Vec<PendingChunk>,
    pending_bytes: usize,
    appended_messages: u64,
    written_messages: u64,
    flushed_messages: u64,
    oldest_unflushed_at: Option<Instant>,
    dirty_files: Vec<Rc<S::File>>,
    /// A segment file was created since the directory was last synced: the
    /// next flush round syncs it, or a power cut could lose the file's name
    /// and with it fdatasynced (acknowledged) messages. Found by the model
    /// test.
    dir_unsynced: bool,
    /// The writer task (pending chunks to the files) is running.
    sync_running: bool,
    /// An fdatasync round is in flight (its own task, beside the writer).
    flush_running: bool,
    flush_requested: bool,
    /// Fetches waiting for messages past the flushed end (see
    /// [`LogSettings::waiting_fetch_flush`]).
    fetches_waiting: usize,
    /// A flush for the waiting fetches is due (its timer runs).
    waiting_fetch_flush_due: bool,
    /// The end offset flushed acknowledgements (and `sync_all`) wait for: a
    /// round that covers less (their bytes were still being written) leaves
    /// the request standing for the next round. The policy's requests do
    /// not raise it: a policy round covers what is written when it starts.
    flush_wanted: u64,
    /// Set when its topic was deleted (it also counts as poisoned, so
    /// nothing more is written; waiting requests learn UNKNOWN_TOPIC).
    deleted: bool,
    poisoned: Option<String>,
    checkpointed_offset: u64,
    /// On its shard's list of logs with work for the flush timer.
    listed: bool,
    /// Bumped by every rollback of the unwritten tail.
    epoch: u64,
    /// The last rollbacks: (epoch before it, `written_offset` it rolled back
    /// to, why). Rollback offsets never decrease.
    rollbacks: VecDeque<(u64, u64, String)>,
    /// After a transient failure: appends are refused until then.
    refusing: Option<(Instant, String)>,
    /// Base offsets of the segments whose file is open (some may have been
    /// closed or removed since; [`Self::close_idle_files`] prunes them).
    files_open: Vec<u64>,
    watermarks: Notify,
    /// Where flushes are counted and timed (the owning shard's metrics).
    flush_stats: Rc<FlushStats>,
    /// The shard's unwritten-bytes budget, and what this log counts in it.
    budget: Rc<UnwrittenBudget>,
    budget_counted: u64,
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl<S: Storage> PartitionLog<S> {
    /// Opens (or creates) the log in `dir` on `storage`, recovering its tail
    /// first.
    pub async fn open(
        storage: S,
        dir: &Path,
        label: &str,
        settings: LogSettings,
    ) -> Result<(PartitionLog<S>, Recovered), StorageError> {
        storage
            .create_dir_all(dir)
            .map_err(|e| StorageError::io("creating", dir, e))?;
        let mut recovered = recovery::recover(&storage, dir, label)?;
        let mut segments = Segments::new();
        for found in &recovered.segments {
            let mut segment = Segment::new(dir, found.base_offset, found.modified_ms);
            segment.size_bytes = found.size_bytes;
            segments.push(segment);
        }
        let checkpoint = recovery::read_recovery_point(&storage, dir).unwrap_or(0);
        // A new partition's files are made now, with the partition (off the
        // shard's thread, by the storage), not by its first write and first
        // checkpoint: on an aged ext4 the inode allocator's scans cost up to
        // 300 µs a file, and 1,000 new partitions taking their first writes
        // spent a fifth of a core-second of the produce on them (issue 9,
        // item 2). An empty recovery point reads as missing; an empty
        // segment is an empty log.
        let point = dir.join(recovery::RECOVERY_POINT_FILE);
        let mut create = Vec::new();
        if storage.len(&point).is_err() {
            create.push(point);
        }
        if segments.is_empty() {
            // Retention may have removed every segment that reached the
            // disk: go on from the last flushed offset, never from 0 again,
            // or offsets consumers have seen would name new messages.
            let segment = Segment::new(dir, checkpoint, now_ms());
            create.push(segment.path.clone());
            segments.push(segment);
        }
        for path in create {
            storage
                .open(&path, true)
                .await
                .map_err(|e| StorageError::io("creating", &path, e))?;
        }
        let start_offset = segments.as_slice().first().map_or(0, |s| s.base_offset);
        let end_offset = segments.active().map_or(0, |s| s.end_offset());
        // Bytes above the recovery point outlived the crash in the page
        // cache, but nothing says they reached the disk: fdatasync them
        // before they count as flushed, or a power loss after the restart
        // could take back what consumers were already served (issue 8,
        // item 9).
        let mut synced = false;
        for segment in segments.as_slice() {
            if segment.end_offset() <= checkpoint || segment.size_bytes == 0 {
                continue;
            }
            let file = open_segment_file(&storage, &segment.path).await?;
            file.fdatasync()
                .await
                .map_err(|e| StorageError::io("fdatasync", &segment.path, e))?;
            drop(file);
            synced = true;
            recovered.bytes_synced += segment.end_offset() - checkpoint.max(segment.base_offset);
        }
        if synced {
            storage
                .sync_dir(dir)
                .map_err(|e| StorageError::io("syncing", dir, e))?;
        }
        let log = PartitionLog {
            storage,
            label: label.to_string(),
            dir: dir.to_path_buf(),
            settings,
            segments,
            start_offset,
            flushed_offset: end_offset,
            written_offset: end_offset,
            end_offset,
            pending: Vec::new(),
            pending_bytes: 0,
            appended_messages: 0,
            written_messages: 0,
            flushed_messages: 0,
            oldest_unflushed_at: None,
            dirty_files: Vec::new(),
            dir_unsynced: false,
            sync_running: false,
            flush_running: false,
            flush_requested: false,
            fetches_waiting: 0,
            waiting_fetch_flush_due: false,
            flush_wanted: 0,
            poisoned: None,
            deleted: false,
            checkpointed_offset: checkpoint,
            listed: false,
            epoch: 0,
            rollbacks: VecDeque::new(),
            refusing: None,
            files_open: Vec::new(),
            watermarks: Notify::new(),
            flush_stats: Rc::new(FlushStats::default()),
            budget: Rc::new(UnwrittenBudget::unlimited()),
            budget_counted: 0,
        };
        log.check_offsets();
        Ok((log, recovered))
    }

    /// Counts and times this log's flushes in `stats` (a shard's metrics).
    pub fn set_flush_stats(&mut self, stats: Rc<FlushStats>) {
        self.flush_stats = stats;
    }

    /// Counts this log's unwritten bytes in its shard's `budget`.
    pub fn set_budget(&mut self, budget: Rc<UnwrittenBudget>) {
        self.budget.adjust(self.budget_counted, 0);
        self.budget_counted = 0;
        self.budget = budget;
        self.account();
    }

    /// Brings the budget up to date with this log's unwritten bytes. A
    /// poisoned or deleted log will never write its tail: it counts 0.
    fn account(&mut self) {
        let now = if self.poisoned.is_some() {
            0
        } else {
            self.end_offset - self.written_offset
        };
        if now != self.budget_counted {
            self.budget.adjust(self.budget_counted, now);
            self.budget_counted = now;
        }
    }

    fn check_offsets(&self) {
        assert!(
            self.start_offset <= self.flushed_offset
                && self.flushed_offset <= self.written_offset
                && self.written_offset <= self.end_offset,
            "{}: offsets out of order: start {} flushed {} written {} end {}",
            self.label,
            self.start_offset,
            self.flushed_offset,
            self.written_offset,
            self.end_offset
        );
    }

    /// The storage the log lives on.
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// The partition's label, `topic-partition`.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The directory holding the segments.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// First retained offset.
    pub fn start_offset(&self) -> u64 {
        self.start_offset
    }

    /// Everything below is fsynced and visible to consumers.
    pub fn flushed_offset(&self) -> u64 {
        self.flushed_offset
    }

    /// Everything below has been handed to the kernel.
    pub fn written_offset(&self) -> u64 {
        self.written_offset
    }

    /// The offset the next append gets.
    pub fn end_offset(&self) -> u64 {
        self.end_offset
    }

    /// The settings in force.
    pub fn settings(&self) -> LogSettings {
        self.settings
    }

    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Signalled whenever `written_offset` or `flushed_offset` moves, or the
    /// partition is poisoned.
    pub fn watermarks(&self) -> Notify {
        self.watermarks.clone()
    }

    /// Why the partition refuses writes, if it does.
    pub fn poisoned(&self) -> Option<&str> {
        self.poisoned.as_deref()
    }

    /// Appends a message set that the caller has validated (whole messages,
    /// CRCs checked). Returns the offsets `[base, end)` it was given. Never
    /// waits: the bytes are written later by the sync task.
    pub fn append(&mut self, bytes: &[u8], messages: u32) -> Result<(u64, u64), StorageError> {
        if let Some(reason) = &self.poisoned {
            return Err(StorageError::Poisoned(reason.clone()));
        }
        if let Some((until, reason)) = &self.refusing {
            let now = Instant::now();
            if now < *until {
                return Err(StorageError::Unavailable {
                    reason: reason.clone(),
                    retry_in: *until - now,
                });
            }
            self.refusing = None;
        }
        let len = bytes.len() as u64;
        let needs_roll = self
            .segments
            .active()
            .is_none_or(|a| a.size_bytes > 0 && a.size_bytes + len > self.settings.segment_bytes);
        if needs_roll {
            self.segments
                .push(Segment::new(&self.dir, self.end_offset, now_ms()));
        }
        let base = self.end_offset;
        let Some(active) = self.segments.active_mut() else {
            unreachable!("a segment was just ensured");
        };
        let position = active.size_bytes;
        active.size_bytes += len;
        active.last_append_ms = now_ms();
        let segment_base = active.base_offset;
        // The last chunk takes the bytes while they fit in its buffer;
        // otherwise a new chunk follows it, sized to twice the partition's
        // pending bytes (at least this append, 4 KiB to 256 KiB): nothing
        // pending is copied again (growing one buffer by reallocation
        // faulted in fresh memory for most batches with 1,000 partitions),
        // a busy partition writes 256 KiB at a time, and a quiet one holds
        // little (a fixed 64 KiB each was 640 MB with 10,000 partitions
        // taking writes; issue 9, item 2).
        let contiguous = |chunk: &PendingChunk| {
            chunk.segment_base == segment_base
                && chunk.position + chunk.bytes.len() as u64 == position
        };
        match self.pending.last_mut() {
            Some(chunk)
                if contiguous(chunk)
                    && chunk.bytes.len() + bytes.len() <= chunk.bytes.capacity() =>
            {
                chunk.bytes.extend_from_slice(bytes);
                chunk.messages += u64::from(messages);
            }
            _ => {
                let capacity = (self.pending_bytes + bytes.len())
                    .next_power_of_two()
                    .clamp(PENDING_CHUNK_MIN_BYTES, PENDING_CHUNK_MAX_BYTES)
                    .max(bytes.len());
                let mut chunk_bytes = Vec::with_capacity(capacity);
                chunk_bytes.extend_from_slice(bytes);
                self.pending.push(PendingChunk {
                    segment_base,
                    position,
                    bytes: chunk_bytes,
                    messages: u64::from(messages),
                });
            }
        }
        self.pending_bytes += bytes.len();
        self.end_offset += len;
        self.appended_messages += u64::from(messages);
        if self.oldest_unflushed_at.is_none() {
            self.oldest_unflushed_at = Some(Instant::now());
        }
        debug_assert!(self.written_offset <= self.end_offset);
        self.account();
        Ok((base, self.end_offset))
    }

    /// The rollback epoch: read it right after [`Self::append`] and pass it
    /// to [`Self::dropped`] while waiting for the acknowledgement.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Why the bytes below `end` appended in `epoch` were dropped by a
    /// rollback, if they were (they will never be written; their offsets
    /// go to later appends).
    pub fn dropped(&self, epoch: u64, end: u64) -> Option<&str> {
        if epoch == self.epoch {
            return None;
        }
        match self
            .rollbacks
            .iter()
            .find(|(before, _, _)| *before == epoch)
        {
            // Written before the rollback: safe, whatever came later.
            Some((_, to, _)) if end <= *to => None,
            Some((_, _, reason)) => Some(reason),
            None => Some("dropped by a storage failure long ago"),
        }
    }

    /// Marks the log as on its shard's work list; true if it was not
    /// already (so the caller adds it once).
    pub fn list(&mut self) -> bool {
        !std::mem::replace(&mut self.listed, true)
    }

    /// True while the flush timer has something to do for this log: bytes
    /// to write or flush, a sync in flight, or a recovery point to record.
    /// When false the log leaves the work list (and [`Self::list`] puts it
    /// back on the next append).
    pub fn has_timer_work(&self) -> bool {
        !self.deleted
            && (!self.pending.is_empty()
                || self.sync_running
                || self.flush_running
                || self.appended_messages != self.flushed_messages
                || self.checkpointed_offset != self.flushed_offset)
    }

    /// Takes the log off the work list.
    pub fn unlist(&mut self) {
        self.listed = false;
    }

    /// Bytes waiting in memory for the sync task to pick up.
    pub fn pending_bytes(&self) -> usize {
        self.pending_bytes
    }

    /// Bytes appended but not yet handed to the kernel.
    pub fn unwritten_bytes(&self) -> u64 {
        self.end_offset - self.written_offset
    }

    /// Asks the flush rounds to cover everything appended so far (a flushed
    /// produce asks only up to its own end).
    fn want_flushed_to_end(&mut self) {
        self.flush_wanted = self.flush_wanted.max(self.end_offset);
    }

    /// True when enough messages wait for a flush (the count half of the policy).
    pub fn flush_count_due(&self) -> bool {
        self.appended_messages - self.flushed_messages >= self.settings.flush_messages
    }

    /// True when the flush policy (messages or time) says to flush now.
    pub fn flush_due(&self, now: Instant) -> bool {
        let unflushed = self.appended_messages - self.flushed_messages;
        if unflushed == 0 {
            return false;
        }
        unflushed >= self.settings.flush_messages
            || self.oldest_unflushed_at.is_some_and(|t| {
                now.duration_since(t).as_millis() as u64 >= self.settings.flush_interval_ms
            })
    }

    /// Describes up to `bytes_max` flushed bytes at `offset`, within one
    /// segment. An offset at or past `flushed_offset` (but not past
    /// `end_offset`) yields [`Read::NotYet`]: the data is not visible yet.
    /// A segment whose file was closed for idleness yields [`Read::Closed`]:
    /// [`read`] opens it and asks again.
    pub fn try_read(&self, offset: u64, bytes_max: u32) -> Result<Read<S::File>, StorageError> {
        if offset < self.start_offset || offset > self.end_offset {
            return Err(StorageError::OffsetOutOfRange {
                requested: offset,
                start: self.start_offset,
                end: self.end_offset,
            });
        }
        if offset >= self.flushed_offset || bytes_max == 0 {
            return Ok(Read::NotYet);
        }
        let index = self
            .segments
            .find(offset)
            .ok_or(StorageError::OffsetOutOfRange {
                requested: offset,
                start: self.start_offset,
                end: self.end_offset,
            })?;
        let segment = &self.segments.as_slice()[index];
        let visible_end = segment.end_offset().min(self.flushed_offset);
        let len = (visible_end - offset).min(u64::from(bytes_max)) as u32;
        let Some(file) = segment.file.clone() else {
            return Ok(Read::Closed {
                base_offset: segment.base_offset,
                path: segment.path.clone(),
            });
        };
        segment.last_used.set(Instant::now());
        let position = offset - segment.base_offset;
        // Pair assertion: the slice lies inside the segment and below the flush.
        assert!(position + u64::from(len) <= segment.size_bytes);
        assert!(offset + u64::from(len) <= self.flushed_offset);
        Ok(Read::Slice(FetchSlice {
            file,
            position,
            len,
        }))
    }

    /// Gives a segment the file a reader opened, unless another reader or
    /// the writer got there first, or retention removed the segment.
    fn install_file(&mut self, base_offset: u64, file: Rc<S::File>) {
        let Some(index) = self.segments.find(base_offset) else {
            return;
        };
        let Some(segment) = self.segments.get_mut(index) else {
            return;
        };
        if segment.base_offset == base_offset && segment.file.is_none() {
            segment.file = Some(file);
            segment.last_used.set(Instant::now());
            self.note_open(base_offset);
        }
    }

    /// Records that a segment's file was just opened (once, whatever stale
    /// entries say) and closes the least recently used others past the cap.
    fn note_open(&mut self, base_offset: u64) {
        if !self.files_open.contains(&base_offset) {
            self.files_open.push(base_offset);
        }
        self.trim_open_files(crate::limits::SEGMENT_FILES_PER_LOG_MAX, base_offset);
    }

    /// Closes the least recently used files nobody holds until at most
    /// `keep` are open (or none is left that may be closed); never the
    /// segment at `protect` (a file just opened for a caller).
    fn trim_open_files(&mut self, keep: usize, protect: u64) {
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
    fn forget_closed_files(&mut self) {
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

    /// The first offset of the earliest segment appended to at or after
    /// `timestamp_ms` — so consuming from it yields every message appended
    /// since then — or the flushed offset if there is none (the paper's
    /// segment-granularity offset lookup).
    pub fn offset_before_time(&self, timestamp_ms: u64) -> u64 {
        self.segments
            .as_slice()
            .iter()
            .find(|s| s.last_append_ms >= timestamp_ms && s.size_bytes > 0)
            .map_or(self.flushed_offset, |s| {
                s.base_offset.min(self.flushed_offset)
            })
    }

    /// Removes closed, fully flushed segments that retention says to drop:
    /// older than `retention_ms`, or the oldest while the log exceeds
    /// `retention_bytes`. Never the active segment. Returns their paths after
    /// renaming them to `.deleted`; the caller unlinks them.
    pub fn enforce_retention(&mut self, now_ms: u64) -> Vec<PathBuf> {
        let mut removed = Vec::new();
        while self.segments.len() > 1 {
            let total = self.segments.total_bytes();
            let Some(oldest) = self.segments.as_slice().first() else {
                break;
            };
            // The next segment must hold flushed bytes, so that a segment
            // that reached the disk is left after any crash and the log
            // does not start again below offsets already handed out
            // (found by the model test).
            let fully_flushed = oldest.end_offset() < self.flushed_offset;
            let too_old = now_ms.saturating_sub(oldest.last_append_ms) > self.settings.retention_ms;
            let too_big = self.settings.retention_bytes > 0
                && total - oldest.size_bytes >= self.settings.retention_bytes;
            if !fully_flushed || !(too_old || too_big) {
                break;
            }
            let Some(segment) = self.segments.pop_oldest() else {
                break;
            };
            self.start_offset = segment.end_offset();
            let deleted = with_suffix(&segment.path, DELETED_SUFFIX);
            match self.storage.rename(&segment.path, &deleted) {
                Ok(()) => removed.push(deleted),
                Err(error) => {
                    tracing::warn!(segment = %segment.path.display(), %error, "retention: rename failed");
                    removed.push(segment.path.clone());
                }
            }
            tracing::info!(
                partition = %self.label,
                base_offset = segment.base_offset,
                bytes = segment.size_bytes,
                start_offset = self.start_offset,
                "retention: deleted segment"
            );
        }
        self.check_offsets();
        removed
    }

    /// Records the flushed offset as the recovery point when it moved; with
    /// `durable` (graceful stop) the file is fsynced.
    pub fn checkpoint(&mut self, durable: bool) -> Result<(), StorageError> {
        if self.flushed_offset == self.checkpointed_offset && !durable {
            return Ok(());
        }
        recovery::write_recovery_point(&self.storage, &self.dir, self.flushed_offset, durable)?;
        self.checkpointed_offset = self.flushed_offset;
        Ok(())
    }

    /// Stops all further writes because the topic is being deleted: a sync
    /// task still running must not create or write files in a directory that
    /// a new topic of the same name may reuse.
    pub fn close_for_delete(&mut self) {
        self.deleted = true;
        self.poisoned = Some("the topic was deleted".into());
        self.pending.clear();
        self.pending_bytes = 0;
        self.account();
        self.watermarks.notify_all();
    }

    /// True once its topic was deleted.
    pub fn deleted(&self) -> bool {
        self.deleted
    }

    /// Undoes everything appended but not written, after a transient
    /// failure while creating or writing a segment. Fails (and the caller
    /// poisons) only if a file cannot be put back as it was.
    fn roll_back_unwritten(&mut self, reason: String) -> Result<(), StorageError> {
        let to = self.written_offset;
        let dropped_bytes = self.end_offset - to;
        let dropped_messages = self.appended_messages - self.written_messages;
        // Segments rolled after the last written byte hold nothing: forget
        // them, and remove a file that a failed write may have begun.
        while self.segments.len() > 1 && self.segments.active().is_some_and(|s| s.base_offset >= to)
        {
            let Some(segment) = self.segments.pop_newest() else {
                break;
            };
            match self.storage.remove_file(&segment.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StorageError::io("removing", &segment.path, e)),
            }
        }
        if let Some(active) = self.segments.active_mut() {
            let keep = to - active.base_offset;
            active.size_bytes = keep;
            // A short write may have left bytes past the last whole chunk.
            match self.storage.len(&active.path) {
                Ok(len) if len > keep => self
                    .storage
                    .truncate(&active.path, keep, false)
                    .map_err(|e| StorageError::io("truncating", &active.path, e))?,
                _ => {}
            }
        }
        self.pending.clear();
        self.pending_bytes = 0;
        self.end_offset = to;
        self.flush_wanted = self.flush_wanted.min(to);
        self.appended_messages = self.written_messages;
        if self.appended_messages == self.flushed_messages {
            self.oldest_unflushed_at = None;
        }
        self.rollbacks.push_back((self.epoch, to, reason.clone()));
        if self.rollbacks.len() > ROLLBACKS_KEPT {
            self.rollbacks.pop_front();
        }
        self.epoch += 1;
        if let Some(suppressed) = ROLLBACK_LINES.with(LogLimit::allow) {
            tracing::warn!(
                partition = %self.label,
                %reason,
                dropped_bytes,
                dropped_messages,
                end_offset = to,
                retry_ms = STORAGE_RETRY.as_millis() as u64,
                suppressed,
                "transient storage failure: dropped the unwritten tail; refusing writes, then retrying"
            );
        }
        self.refusing = Some((Instant::now() + STORAGE_RETRY, reason));
        self.account();
        self.check_offsets();
        self.watermarks.notify_all();
        Ok(())
    }

    fn poison(&mut self, reason: String) {
        tracing::error!(partition = %self.label, %reason, "partition poisoned: refusing writes until restart");
        self.poisoned = Some(reason);
        // Its tail will never be written: give the memory and the budget back.
        self.pending.clear();
        self.pending_bytes = 0;
        self.account();
        self.watermarks.notify_all();
    }
}

impl<S: Storage> Drop for PartitionLog<S> {
    fn drop(&mut self) {
        self.budget.adjust(self.budget_counted, 0);
    }
}

async fn open_segment_file<S: Storage>(storage: &S, path: &Path) -> Result<S::File, StorageError> {
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
    // The file this call opened, held until the read below has its own
    // handle: a file nobody holds may be closed again at once by the
    // per-partition cap, and the read would open it forever.
    let mut opened: Option<Rc<S::File>> = None;
    loop {
        let found = log.borrow().try_read(offset, bytes_max)?;
        match found {
            Read::Slice(slice) => return Ok(Some(slice)),
            Read::NotYet => return Ok(None),
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

/// Appends a validated message set (see [`PartitionLog::append`]) and
/// starts what its acknowledgement needs — the log's write policy, in one
/// place:
///
/// - `acks = flushed`: a flush round now (group commit: requests that arrive
///   while one is in flight are covered together by the next round), not at
///   the flush policy's next deadline (issue 9, item 3);
/// - `acks = written`: the writer now;
/// - `acks = none` (the paper's mode): the writer once a chunk is full, a
///   flush once `flush_messages` are waiting; [`tick`] does the rest when
///   `flush_interval_ms` passes.
pub fn append<S: Storage>(
    log: &Shared<S>,
    bytes: &[u8],
    messages: u32,
    acks: AckMode,
) -> Result<Appended, StorageError> {
    let (base, end, epoch, flush_now, chunk_full) = {
        let mut l = log.borrow_mut();
        let (base, end) = l.append(bytes, messages)?;
        if acks == AckMode::Flushed {
            // Its acknowledgement waits for a round that covers `end`; the
            // policy's rounds need only cover what is written by then.
            l.flush_wanted = l.flush_wanted.max(end);
        }
        (
            base,
            end,
            l.epoch(),
            l.flush_count_due(),
            l.pending_bytes() >= WRITE_CHUNK_BYTES,
        )
    };
    if flush_now || acks == AckMode::Flushed {
        request_sync(log, true);
    } else if chunk_full || acks == AckMode::Written {
        request_sync(log, false);
    }
    flush_for_waiting_fetches(log);
    Ok(Appended { base, end, epoch })
}

/// Waits until what [`append`] assigned is written (`acks = written`) or
/// flushed (`acks = flushed`), or will never be. `acks = none` waits like
/// `written`.
pub async fn stored<S: Storage>(
    log: &Shared<S>,
    appended: Appended,
    acks: AckMode,
) -> Result<(), NotStored> {
    let Appended { end, epoch, .. } = appended;
    let reached = |l: &PartitionLog<S>| {
        if acks == AckMode::Flushed {
            l.flushed_offset >= end
        } else {
            l.written_offset >= end
        }
    };
    let watermarks = log.borrow().watermarks();
    watermarks
        .wait_until(|| {
            let l = log.borrow();
            l.poisoned.is_some() || l.dropped(epoch, end).is_some() || reached(&l)
        })
        .await;
    let l = log.borrow();
    // Not dropped first: after a rollback, later appends reuse the offsets
    // and may already have been written past `end`.
    let dropped = l.dropped(epoch, end);
    if dropped.is_none() && reached(&l) {
        return Ok(());
    }
    if l.deleted {
        return Err(NotStored::Deleted);
    }
    if let Some(reason) = dropped {
        return Err(NotStored::Dropped(reason.to_string()));
    }
    Err(NotStored::Failed(
        l.poisoned
            .clone()
            .unwrap_or_else(|| "storage failed".into()),
    ))
}

/// The time half of the write policy, for the shard's timer: writes what is
/// pending, starts a flush when `flush_interval_ms` (or the message count)
/// says so, and with `checkpoint` records the recovery point. Returns true
/// while the log still has work for the timer.
pub fn tick<S: Storage>(log: &Shared<S>, now: Instant, checkpoint: bool) -> bool {
    let (due, pending) = {
        let l = log.borrow();
        (l.flush_due(now), l.pending_bytes() > 0)
    };
    if due {
        request_sync(log, true);
    } else if pending {
        request_sync(log, false);
    }
    if checkpoint {
        let result = log.borrow_mut().checkpoint(false);
        if let Err(error) = result {
            if let Some(suppressed) = CHECKPOINT_LINES.with(LogLimit::allow) {
                tracing::warn!(%error, suppressed, "writing recovery point");
            }
        }
    }
    log.borrow().has_timer_work()
}

/// Makes sure pending bytes are being written, and, when `flush` is set (or
/// an earlier request asked for it), that a flush follows.
///
/// Writing and flushing are two tasks: the writer writes pending chunks as
/// they come, and a flush round (one at a time) fdatasyncs what was written
/// when it began. Writes never wait behind an fdatasync, so `acks = written`
/// costs a write, not a flush; requests for a flush that arrive during one
/// are covered together by the next round (group commit).
pub fn request_sync<S: Storage>(log: &Shared<S>, flush: bool) {
    let mut l = log.borrow_mut();
    if flush {
        l.flush_requested = true;
    }
    if l.poisoned.is_some() {
        return;
    }
    if !l.sync_running && !l.pending.is_empty() {
        l.sync_running = true;
        let storage = l.storage.clone();
        drop(l);
        storage.spawn(run_sync(log.clone()));
        return;
    }
    if !l.sync_running {
        drop(l);
        start_flush(log);
    }
}

/// Starts a flush round if one was asked for, none is in flight and the
/// writer has nothing queued ahead of it (it starts one when done).
fn start_flush<S: Storage>(log: &Shared<S>) {
    let mut l = log.borrow_mut();
    if !l.flush_requested || l.flush_running || l.poisoned.is_some() {
        return;
    }
    if l.written_offset <= l.flushed_offset && l.dirty_files.is_empty() {
        // Nothing written to flush yet: the writer starts the round once
        // the requested bytes are written.
        l.flush_requested = l.flush_wanted > l.flushed_offset;
        return;
    }
    // Bytes appended after the request, or still being written, need a
    // round of their own once written, if a request covers them.
    l.flush_requested = l.flush_wanted > l.written_offset;
    l.flush_running = true;
    let round = FlushRound {
        files: std::mem::take(&mut l.dirty_files),
        sync_dir: std::mem::take(&mut l.dir_unsynced),
        target: l.written_offset,
        messages: l.written_messages,
    };
    let storage = l.storage.clone();
    drop(l);
    storage.spawn(run_flush(log.clone(), round));
}

/// A fetch waiting at the flushed end (it found nothing flushed to read):
/// while it is held, what is appended beyond the flushed end — already, or
/// while it waits — is flushed within the settings' delay
/// ([`LogSettings::waiting_fetch_flush`]). Dropping it ends the wait.
pub struct WaitingFetch<S: Storage> {
    log: Shared<S>,
}

impl<S: Storage> Drop for WaitingFetch<S> {
    fn drop(&mut self) {
        let mut l = self.log.borrow_mut();
        l.fetches_waiting = l.fetches_waiting.saturating_sub(1);
    }
}

/// Registers a fetch waiting at the flushed end; see [`WaitingFetch`].
pub fn fetch_waits<S: Storage>(log: &Shared<S>) -> WaitingFetch<S> {
    log.borrow_mut().fetches_waiting += 1;
    flush_for_waiting_fetches(log);
    WaitingFetch { log: log.clone() }
}

/// While fetches wait and appended bytes are not flushed, makes sure a
/// flush of them is asked for within the settings' delay: at once, or by
/// a timer that one append arms for all that follow it (so a tailing
/// consumer costs at most one flush round per delay, however fast the
/// producers append).
fn flush_for_waiting_fetches<S: Storage>(log: &Shared<S>) {
    let delay = {
        let mut l = log.borrow_mut();
        let Some(delay) = l.settings.waiting_fetch_flush else {
            return;
        };
        if l.fetches_waiting == 0
            || l.waiting_fetch_flush_due
            || l.end_offset <= l.flushed_offset
            || l.poisoned.is_some()
        {
            return;
        }
        if delay.is_zero() {
            l.want_flushed_to_end();
            drop(l);
            request_sync(log, true);
            return;
        }
        l.waiting_fetch_flush_due = true;
        delay
    };
    let storage = log.borrow().storage.clone();
    let log = log.clone();
    storage.spawn(async move {
        glommio::timer::sleep(delay).await;
        let flush = {
            let mut l = log.borrow_mut();
            l.waiting_fetch_flush_due = false;
            // Whoever still waits, and whatever is unflushed by now: the
            // fetch that armed it may have been answered meanwhile.
            let flush = l.fetches_waiting > 0 && l.end_offset > l.flushed_offset;
            if flush {
                l.want_flushed_to_end();
            }
            flush
        };
        if flush {
            request_sync(&log, true);
        }
    });
}

/// Writes and flushes everything appended so far and waits for it (graceful
/// stop, tests).
pub async fn sync_all<S: Storage>(log: &Shared<S>) -> Result<(), StorageError> {
    let (target, epoch) = {
        let mut l = log.borrow_mut();
        l.want_flushed_to_end();
        (l.end_offset, l.epoch)
    };
    request_sync(log, true);
    let watermarks = log.borrow().watermarks();
    watermarks
        .wait_until(|| {
            let l = log.borrow();
            if l.poisoned.is_some() || l.dropped(epoch, target).is_some() {
                return true;
            }
            if l.flushed_offset < target && !l.sync_running && !l.flush_running {
                drop(l);
                request_sync(log, true);
                return false;
            }
            l.flushed_offset >= target
        })
        .await;
    let l = log.borrow();
    if let Some(reason) = l.dropped(epoch, target) {
        return Err(StorageError::Unavailable {
            reason: reason.to_string(),
            retry_in: Duration::ZERO,
        });
    }
    match &l.poisoned {
        Some(reason) => Err(StorageError::Poisoned(reason.clone())),
        None => Ok(()),
    }
}

async fn run_sync<S: Storage>(log: Shared<S>) {
    let storage = log.borrow().storage.clone();
    loop {
        let _slot = storage.write_slot().await;
        let chunks = {
            let mut l = log.borrow_mut();
            l.pending_bytes = 0;
            std::mem::take(&mut l.pending)
        };
        if chunks.is_empty() {
            log.borrow_mut().sync_running = false;
            // Everything is written: a requested flush can cover it all.
            start_flush(&log);
            return;
        }
        let error = match write_chunks(&log, chunks).await {
            Ok(()) => {
                // A flush asked for while these were written starts now,
                // beside the next writes.
                start_flush(&log);
                continue;
            }
            Err(error) if error.is_transient() => error,
            Err(error) => {
                let mut l = log.borrow_mut();
                if l.poisoned.is_none() {
                    l.poison(error.to_string());
                }
                l.sync_running = false;
                return;
            }
        };
        let mut l = log.borrow_mut();
        if l.poisoned.is_some() {
            l.sync_running = false;
            return;
        }
        if let Err(undo) = l.roll_back_unwritten(error.to_string()) {
            l.poison(format!("{error}, and undoing it failed: {undo}"));
            l.sync_running = false;
            return;
        }
        // What was written before the failure may still need its flush:
        // the next round does it (the tail is gone, so no write retries).
    }
}

/// What one flush round covers: the files written since the last round,
/// up to `target`, and the directory if a segment was created since.
struct FlushRound<F> {
    files: Vec<Rc<F>>,
    sync_dir: bool,
    target: u64,
    messages: u64,
}

/// Writes pending chunks in order, advancing `written_offset` after each
/// write; the chunks that follow one another in one segment go to the file
/// in one call (submitted together).
async fn write_chunks<S: Storage>(
    log: &Shared<S>,
    chunks: Vec<PendingChunk>,
) -> Result<(), StorageError> {
    let mut chunks = chunks.into_iter().peekable();
    while let Some(first) = chunks.next() {
        let (segment_base, position) = (first.segment_base, first.position);
        let mut len = first.bytes.len();
        let mut messages = first.messages;
        let mut buffers = vec![first.bytes];
        while let Some(next) = chunks
            .next_if(|c| c.segment_base == segment_base && c.position == position + len as u64)
        {
            len += next.bytes.len();
            messages += next.messages;
            buffers.push(next.bytes);
        }
        if let Some(reason) = &log.borrow().poisoned {
            return Err(StorageError::Poisoned(reason.clone()));
        }
        if let Some(delay) = crate::faults::Faults::get().write_delay {
            glommio::timer::sleep(delay).await;
        }
        let file = segment_file(log, segment_base).await?;
        let path = log
            .borrow()
            .dir
            .join(super::segment::segment_file_name(segment_base));
        let end = segment_base + position + len as u64;
        // The storage takes the buffers; a short write on a regular file means
        // the disk is full or failing, which poisons the partition like an
        // error.
        let written = file
            .write_at(buffers, position)
            .await
            .map_err(|e| StorageError::io("writing", &path, e))?;
        if written != len {
            // A short write on a regular file: the disk filled up mid-way
            // (a failing disk answers EIO instead).
            return Err(StorageError::io(
                "writing",
                &path,
                std::io::Error::from_raw_os_error(libc::ENOSPC),
            ));
        }
        let mut l = log.borrow_mut();
        assert_eq!(
            l.written_offset,
            segment_base + position,
            "chunks are written in order"
        );
        l.written_offset = end;
        l.written_messages += messages;
        l.account();
        if !l.dirty_files.iter().any(|f| Rc::ptr_eq(f, &file)) {
            l.dirty_files.push(file);
        }
        l.check_offsets();
        l.watermarks.notify_all();
    }
    Ok(())
}

/// One flush round: fdatasync of the round's files, then `flushed_offset`
/// moves to its target. A failure poisons the partition (the kernel may
/// have dropped the dirty pages: what was written is no longer known to be
/// on disk). Starts the next round if more flushes were asked for.
async fn run_flush<S: Storage>(log: Shared<S>, round: FlushRound<S::File>) {
    let FlushRound {
        files,
        sync_dir,
        target,
        messages,
    } = round;
    let started = Instant::now();
    if let Some(delay) = crate::faults::Faults::get().sync_delay {
        glommio::timer::sleep(delay).await;
    }
    let mut failure = None;
    for file in &files {
        if let Err(e) = file.fdatasync().await {
            failure = Some(StorageError::io("fdatasync", file.path(), e));
            break;
        }
    }
    if sync_dir && failure.is_none() {
        let (storage, dir) = {
            let l = log.borrow();
            (l.storage.clone(), l.dir.clone())
        };
        match storage.flush_dir(&dir).await {
            Ok(()) => {}
            // Opening the directory failed: nothing was synced, so no
            // write-back error was consumed; the next round tries again.
            Err(e) if out_of_descriptors(&e) => {
                let mut l = log.borrow_mut();
                l.flush_running = false;
                l.dir_unsynced = true;
                l.dirty_files.extend(files);
                if let Some(suppressed) = ROLLBACK_LINES.with(LogLimit::allow) {
                    tracing::warn!(partition = %l.label, error = %e, suppressed, "flush postponed: no descriptor to sync the directory with");
                }
                return;
            }
            Err(e) => failure = Some(StorageError::io("syncing", dir, e)),
        }
    }
    {
        let mut l = log.borrow_mut();
        l.flush_running = false;
        if let Some(error) = failure {
            if l.poisoned.is_none() {
                l.poison(error.to_string());
            }
            return;
        }
        metrics::bump(&l.flush_stats.flushes, 1);
        metrics::record_us(
            &l.flush_stats.latency_us,
            started.elapsed().as_micros() as u64,
        );
        if target > l.flushed_offset {
            l.flushed_offset = target;
        }
        l.flushed_messages = l.flushed_messages.max(messages);
        l.oldest_unflushed_at = if l.flushed_messages == l.appended_messages {
            None
        } else {
            Some(Instant::now())
        };
        // The segments this round rolled past are flushed now: close all
        // but the last few (one round may cross many small segments).
        drop(files);
        l.trim_open_files(crate::limits::SEGMENT_FILES_PER_LOG_MAX, u64::MAX);
        l.check_offsets();
        l.watermarks.notify_all();
    }
    start_flush(&log);
}

/// The process or the system is out of file descriptors: an open failed, and
/// nothing else did.
fn out_of_descriptors(error: &std::io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

thread_local! {
    /// A shard's storage warnings, a line a second each: a full disk or a
    /// descriptor shortage would otherwise log once per partition per tick.
    static ROLLBACK_LINES: LogLimit = const { LogLimit::new(Duration::from_secs(1)) };
    static CHECKPOINT_LINES: LogLimit = const { LogLimit::new(Duration::from_secs(1)) };
}

/// The file of the segment starting at `base`, created on first use.
async fn segment_file<S: Storage>(log: &Shared<S>, base: u64) -> Result<Rc<S::File>, StorageError> {
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
            segment.last_used.set(Instant::now());
            l.note_open(base);
            Ok(file)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::message::{encode_message, MessageSetIter};

    /// Runs a test body on a small glommio executor (the storage code uses
    /// io_uring through glommio, so the tests do too).
    fn run<F: std::future::Future<Output = ()> + 'static>(
        body: impl FnOnce() -> F + Send + 'static,
    ) {
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .io_memory(256 * 1024)
            .spawn(move || async move { body().await })
            .unwrap()
            .join()
            .unwrap();
    }

    fn temp_dir(label: &str) -> PathBuf {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir =
            std::env::temp_dir().join(format!("ringlog-unit-{}-{label}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn settings(segment_bytes: u64) -> LogSettings {
        LogSettings {
            segment_bytes,
            flush_messages: 1_000_000,
            flush_interval_ms: 1_000_000,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: 0,
            waiting_fetch_flush: Some(std::time::Duration::from_millis(1)),
        }
    }

    fn message(value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_message(&mut out, None, value);
        out
    }

    async fn open(dir: &Path, segment_bytes: u64) -> SharedLog {
        let (log, _) =
            PartitionLog::open(DiskStorage::plain(), dir, "t-0", settings(segment_bytes))
                .await
                .unwrap();
        Rc::new(RefCell::new(log))
    }

    async fn read_values(log: &SharedLog, offset: u64) -> Vec<Vec<u8>> {
        let mut values = Vec::new();
        let mut at = offset;
        loop {
            let slice = read(log, at, 1 << 20).await.unwrap();
            let Some(slice) = slice else { return values };
            let bytes = slice
                .file
                .read_at(slice.position, slice.len as usize)
                .await
                .unwrap();
            let mut iter = MessageSetIter::new(&bytes, at);
            for m in iter.by_ref() {
                values.push(m.unwrap().value.to_vec());
            }
            at = iter.next_offset();
        }
    }

    #[test]
    fn offsets_are_byte_positions_and_unflushed_messages_are_not_visible() {
        run(|| async {
            let dir = temp_dir("visible");
            let log = open(&dir, 1 << 20).await;
            let (base, end) = log.borrow_mut().append(&message(b"hello"), 1).unwrap();
            assert_eq!((base, end), (0, 14));
            let (base, end) = log.borrow_mut().append(&message(b"world!"), 1).unwrap();
            assert_eq!((base, end), (14, 29));
            // Appended, not flushed: a fetch sees nothing yet.
            assert!(read(&log, 0, 100).await.unwrap().is_none());
            request_sync(&log, false);
            let watermarks = log.borrow().watermarks();
            watermarks
                .wait_until(|| log.borrow().written_offset() == 29)
                .await;
            assert!(
                read(&log, 0, 100).await.unwrap().is_none(),
                "written is not flushed"
            );
            sync_all(&log).await.unwrap();
            assert_eq!(log.borrow().flushed_offset(), 29);
            assert_eq!(
                read_values(&log, 0).await,
                vec![b"hello".to_vec(), b"world!".to_vec()]
            );
            assert_eq!(read_values(&log, 14).await, vec![b"world!".to_vec()]);
            // Past the end is out of range, with the valid range.
            assert!(matches!(
                log.borrow().try_read(30, 100),
                Err(StorageError::OffsetOutOfRange {
                    requested: 30,
                    start: 0,
                    end: 29
                })
            ));
            std::fs::remove_dir_all(&dir).unwrap();
        });
    }

    /// A flush policy of ~17 minutes, `acks = written` appends: only a fetch
    /// waiting at the end makes them flushed (visible) within the waiting-
    /// fetch delay (200 ms here), first what was there when it began to
    /// wait, then every later append; once it stops waiting, the policy
    /// alone decides again. (Turned off: the
    /// integration test `produce_consume::a_consumer_at_the_end_sees_messages_after_one_flush`.)
    #[test]
    fn a_waiting_fetch_has_appends_flushed_within_its_delay() {
        run(|| async {
            let dir = temp_dir("waiting-fetch");
            let delay = std::time::Duration::from_millis(200);
            let (log, _) = PartitionLog::open(
                DiskStorage::plain(),
                &dir,
                "t-0",
                LogSettings {
                    waiting_fetch_flush: Some(delay),
                    ..settings(1 << 20)
                },
            )
            .await
            .unwrap();
            let log = Rc::new(RefCell::new(log));
            let watermarks = log.borrow().watermarks();
            let first = append(&log, &message(b"before"), 1, AckMode::Written).unwrap();
            stored(&log, first, AckMode::Written).await.unwrap();
            assert_eq!(log.borrow().flushed_offset(), 0, "the policy waits");
            // Within 5 s, or never: the policy's interval is 1,000 s.
            let flushed_to = |end: u64| {
                let (log, watermarks) = (log.clone(), watermarks.clone());
                futures_lite::future::or(
                    async move {
                        watermarks
                            .wait_until(|| log.borrow().flushed_offset() == end)
                            .await;
                        true
                    },
                    async {
                        glommio::timer::sleep(std::time::Duration::from_secs(5)).await;
                        false
                    },
                )
            };
            let waiting = fetch_waits(&log);
            assert_eq!(log.borrow().flushed_offset(), 0, "a timer, not at once");
            assert!(flushed_to(first.end).await, "what the fetch waits for");
            let second = append(&log, &message(b"during"), 1, AckMode::Written).unwrap();
            assert!(flushed_to(second.end).await, "an append during the wait");
            drop(waiting);
            let third = append(&log, &message(b"after"), 1, AckMode::Written).unwrap();
            stored(&log, third, AckMode::Written).await.unwrap();
            glommio::timer::sleep(delay * 2).await;
            assert_eq!(
                log.borrow().flushed_offset(),
                second.end,
                "nobody waits: the policy decides again"
            );
            std::fs::remove_dir_all(&dir).unwrap();
        });
    }

    /// A client that keeps a fetch waiting and appends as fast as it can
    /// gets no more than one flush round per delay: 300 appends, one every
    /// millisecond, under a 50 ms delay (flushing at once would be a round
    /// per append).
    #[test]
    fn a_waiting_fetch_costs_at_most_one_flush_round_per_delay() {
        run(|| async {
            let dir = temp_dir("waiting-fetch-bound");
            let delay = std::time::Duration::from_millis(50);
            let storage = DiskStorage::plain();
            let (log, _) = PartitionLog::open(
                storage.clone(),
                &dir,
                "t-0",
                LogSettings {
                    waiting_fetch_flush: Some(delay),
                    ..settings(1 << 20)
                },
            )
            .await
            .unwrap();
            let log = Rc::new(RefCell::new(log));
            let syncs = || storage.driver().stats().syncs.get();
            let before = syncs();
            let started = std::time::Instant::now();
            let _waiting = fetch_waits(&log);
            let mut last = None;
            for i in 0..300u32 {
                let value = i.to_le_bytes();
                last = Some(append(&log, &message(&value), 1, AckMode::Written).unwrap());
                glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
            }
            let end = last.unwrap().end;
            let watermarks = log.borrow().watermarks();
            watermarks
                .wait_until(|| log.borrow().flushed_offset() == end)
                .await;
            let rounds_allowed = (started.elapsed().as_millis() / delay.as_millis()) as u64 + 2;
            // A round syncs the segment file, and the first also its directory.
            let synced = syncs() - before;
            assert!(
                synced <= 2 * rounds_allowed,
                "{synced} files synced for at most {rounds_allowed} rounds"
            );
            std::fs::remove_dir_all(&dir).unwrap();
        });
    }

    #[test]
    fn segments_roll_at_the_size_limit_and_reads_stop_at_segment_ends() {
        run(|| async {
            let dir = temp_dir("roll");
            let log = open(&dir, 1024).await;
            let value = [7u8; 91]; // 100 bytes stored
            for _ in 0..25 {
                log.borrow_mut().append(&message(&value), 1).unwrap();
            }
            sync_all(&log).await.unwrap();
            assert_eq!(log.borrow().segment_count(), 3, "10 + 10 + 5 messages");
            let names: Vec<String> = {
                let mut n: Vec<String> = std::fs::read_dir(&dir)
                    .unwrap()
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .filter(|n| n.ends_with(".log"))
                    .collect();
                n.sort();
                n
            };
            assert_eq!(
                names,
                vec![
                    "00000000000000000000.log",
                    "00000000000000001000.log",
                    "00000000000000002000.log"
                ]
            );
            // One read never crosses a segment boundary.
            let slice = read(&log, 900, 1 << 20).await.unwrap().unwrap();
            assert_eq!((slice.position, slice.len), (900, 100));
            assert_eq!(read_values(&log, 0).await.len(), 25);
            // Reopen: the same segments, offsets and data.
            drop(log);
            let log = open(&dir, 1024).await;
            assert_eq!(log.borrow().end_offset(), 2500);
            assert_eq!(read_values(&log, 0).await.len(), 25);
            std::fs::remove_dir_all(&dir).unwrap();
        });
    }

    #[test]
    fn recovery_truncates_a_torn_tail_the_test_writes_itself() {
        run(|| async {
            let dir = temp_dir("torn");
            let log = open(&dir, 1 << 20).await;
            for i in 0..10u8 {
                log.borrow_mut().append(&message(&[i; 20]), 1).unwrap();
            }
            sync_all(&log).await.unwrap();
            drop(log);
            // Half a message at the end, as a crash mid-write leaves it.
            let torn = &message(&[9; 20])[..15];
            let path = dir.join("00000000000000000000.log");
            let mut bytes = std::fs::read(&path).unwrap();
            bytes.extend_from_slice(torn);
            std::fs::write(&path, &bytes).unwrap();
            std::fs::remove_file(dir.join(recovery::RECOVERY_POINT_FILE)).ok();
            let (log, recovered) =
                PartitionLog::open(DiskStorage::plain(), &dir, "t-0", settings(1 << 20))
                    .await
                    .unwrap();
            assert_eq!(recovered.bytes_cut, 15);
            assert_eq!(log.end_offset(), 290);
            assert_eq!(std::fs::metadata(&path).unwrap().len(), 290);
            std::fs::remove_dir_all(&dir).unwrap();
        });
    }

    #[test]
    fn a_transient_failure_drops_the_unwritten_tail_refuses_then_accepts_again() {
        run(|| async {
            let dir = temp_dir("rollback");
            let log = open(&dir, 1024).await;
            for _ in 0..5 {
                log.borrow_mut().append(&message(&[1; 91]), 1).unwrap();
            }
            sync_all(&log).await.unwrap();
            let epoch = log.borrow().epoch();
            // Unwritten: 6 more messages, rolling into two more segments;
            // a failed write had begun the second's file (and a short one
            // extended the first).
            let (_, end) = log.borrow_mut().append(&message(&[2; 891]), 1).unwrap();
            for _ in 0..5 {
                log.borrow_mut().append(&message(&[3; 91]), 1).unwrap();
            }
            assert_eq!(log.borrow().segment_count(), 3);
            let first = dir.join("00000000000000000000.log");
            let second = dir.join(super::super::segment::segment_file_name(500));
            let f = std::fs::OpenOptions::new()
                .append(true)
                .open(&first)
                .unwrap();
            f.set_len(700).unwrap();
            std::fs::write(&second, b"half a chunk").unwrap();
            log.borrow_mut()
                .roll_back_unwritten("disk full".into())
                .unwrap();
            {
                let l = log.borrow();
                assert_eq!((l.end_offset(), l.written_offset()), (500, 500));
                assert_eq!(l.segment_count(), 1);
                assert_eq!(std::fs::metadata(&first).unwrap().len(), 500);
                assert!(!second.exists(), "the rolled segment's file is removed");
                // Waiters learn which appends were dropped.
                assert_eq!(l.dropped(epoch, end), Some("disk full"));
                assert_eq!(l.dropped(epoch, 500), None, "written before the failure");
                assert_eq!(l.dropped(l.epoch(), 10_000), None);
            }
            // Refused for a moment, with the reason; then accepted again at
            // the offsets that were given back.
            let refused = log.borrow_mut().append(&message(b"x"), 1).unwrap_err();
            assert!(
                matches!(refused, StorageError::Unavailable { ref reason, .. } if reason == "disk full"),
                "{refused}"
            );
            log.borrow_mut().refusing = None;
            let (base, _) = log.borrow_mut().append(&message(&[4; 91]), 1).unwrap();
            assert_eq!(base, 500);
            sync_all(&log).await.unwrap();
            let values = read_values(&log, 0).await;
            assert_eq!(values.len(), 6);
            assert_eq!(values[5], vec![4; 91]);
            assert_eq!(
                log.borrow().dropped(epoch, end),
                Some("disk full"),
                "a dropped append stays dropped though its offsets were reused"
            );
            std::fs::remove_dir_all(&dir).unwrap();
        });
    }

    #[test]
    fn idle_segment_files_are_closed_and_reopened_on_demand() {
        run(|| async {
            let dir = temp_dir("idle");
            let log = open(&dir, 1024).await;
            for _ in 0..35 {
                log.borrow_mut().append(&message(&[1; 91]), 1).unwrap();
            }
            sync_all(&log).await.unwrap();
            assert_eq!(log.borrow().segment_count(), 4);
            assert_eq!(log.borrow().files_open(), 4, "written segments are open");
            let now = Instant::now();
            let idle = Duration::from_secs(10);
            assert_eq!(
                log.borrow_mut().close_idle_files(now, idle),
                0,
                "not idle yet"
            );
            // A fetch holding a file keeps it open.
            let held = read(&log, 1000, 100).await.unwrap().unwrap();
            let later = now + Duration::from_secs(60);
            assert_eq!(log.borrow_mut().close_idle_files(later, idle), 3);
            assert_eq!(log.borrow().files_open(), 1);
            drop(held);
            assert_eq!(log.borrow_mut().close_idle_files(later, idle), 1);
            assert_eq!(log.borrow().files_open(), 0);
            // Reads open what they need, a few at a time; appends reopen the
            // active segment.
            assert_eq!(read_values(&log, 0).await.len(), 35);
            assert!(log.borrow().files_open() <= crate::limits::SEGMENT_FILES_PER_LOG_MAX);
            log.borrow_mut().append(&message(&[2; 91]), 1).unwrap();
            sync_all(&log).await.unwrap();
            assert_eq!(read_values(&log, 3500).await, vec![vec![2; 91]]);
            // A reopened log opens nothing until it is used.
            drop(log);
            let log = open(&dir, 1024).await;
            assert_eq!(log.borrow().files_open(), 0);
            assert_eq!(read_values(&log, 0).await.len(), 36);
            std::fs::remove_dir_all(&dir).unwrap();
        });
    }

    #[test]
    fn damage_across_a_roll_is_a_torn_tail_but_damage_before_intact_data_is_kept() {
        run(|| async {
            for zero_the_rest in [true, false] {
                let dir = temp_dir("across-roll");
                let log = open(&dir, 1024).await;
                for _ in 0..25 {
                    log.borrow_mut().append(&message(&[1; 91]), 1).unwrap();
                }
                sync_all(&log).await.unwrap();
                drop(log);
                // A stale recovery point, as a crash leaves it.
                recovery::write_recovery_point(&DiskStorage::plain(), &dir, 500, true).unwrap();
                let second = dir.join(super::super::segment::segment_file_name(1000));
                let third = dir.join(super::super::segment::segment_file_name(2000));
                let mut bytes = std::fs::read(&second).unwrap();
                if zero_the_rest {
                    // Power cut: the unsynced tail of a closed segment and the
                    // whole next one are zeros.
                    bytes[500..].fill(0);
                    std::fs::write(&third, vec![0u8; 500]).unwrap();
                } else {
                    // One bad byte, then intact messages: not a tail.
                    bytes[550] ^= 0x5a;
                }
                std::fs::write(&second, &bytes).unwrap();
                let (log, recovered) =
                    PartitionLog::open(DiskStorage::plain(), &dir, "t-0", settings(1024))
                        .await
                        .unwrap();
                if zero_the_rest {
                    assert_eq!(log.end_offset(), 1500, "cut where the zeros begin");
                    assert!(!third.exists(), "the zeroed segment after it is gone");
                    assert_eq!(recovered.damaged_segments, 0);
                } else {
                    assert_eq!(log.end_offset(), 2500, "everything kept");
                    assert_eq!(recovered.damaged_segments, 1);
                }
                std::fs::remove_dir_all(&dir).unwrap();
            }
        });
    }

    #[test]
    fn retention_removes_old_closed_segments_but_never_the_active_one() {
        run(|| async {
            let dir = temp_dir("retention");
            let log = open(&dir, 1024).await;
            for _ in 0..35 {
                log.borrow_mut().append(&message(&[1; 91]), 1).unwrap();
            }
            sync_all(&log).await.unwrap();
            assert_eq!(log.borrow().segment_count(), 4);
            // Nothing is old yet.
            assert!(log.borrow_mut().enforce_retention(now_ms()).is_empty());
            // Far in the future everything closed is expired; the active segment stays.
            let removed = log
                .borrow_mut()
                .enforce_retention(now_ms() + 30 * 24 * 3600 * 1000);
            assert_eq!(removed.len(), 3);
            for path in &removed {
                assert!(path.to_string_lossy().ends_with(".log.deleted"));
                std::fs::remove_file(path).unwrap();
            }
            assert_eq!(log.borrow().segment_count(), 1);
            assert_eq!(log.borrow().start_offset(), 3000);
            assert!(matches!(
                log.borrow().try_read(0, 10),
                Err(StorageError::OffsetOutOfRange { start: 3000, .. })
            ));
            assert_eq!(read_values(&log, 3000).await.len(), 5);
            // Offsets before a time: segment granularity.
            assert_eq!(log.borrow().offset_before_time(0), 3000);
            assert_eq!(log.borrow().offset_before_time(now_ms() + 1_000_000), 3500);
            std::fs::remove_dir_all(&dir).unwrap();
        });
    }

    #[test]
    fn size_retention_keeps_the_log_under_its_limit() {
        run(|| async {
            let dir = temp_dir("size");
            let log = open(&dir, 1024).await;
            log.borrow_mut().settings.retention_bytes = 2048;
            for _ in 0..50 {
                log.borrow_mut().append(&message(&[1; 91]), 1).unwrap();
            }
            sync_all(&log).await.unwrap();
            let removed = log.borrow_mut().enforce_retention(now_ms());
            // As Kafka does: drop the oldest while the rest still holds at
            // least retention_bytes, so 3000 of 5000 bytes stay.
            assert_eq!(removed.len(), 2, "5000 bytes in 5 segments");
            assert_eq!(log.borrow().start_offset(), 2000);
            std::fs::remove_dir_all(&dir).unwrap();
        });
    }
}
