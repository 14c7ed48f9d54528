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
//!
//! | file            | concern |
//! |-----------------|---------|
//! | `mod.rs`        | the state: offsets, pending chunks, the append's bookkeeping, reads, rollback and poison |
//! | `writer.rs`     | the write policy ([`append`], [`stored`], [`tick`]) and its writer and flush tasks |
//! | `fetch_wait.rs` | fetches waiting at the flushed end, and the flush they ask for |
//! | `files.rs`      | segment files: opened on demand, capped per partition, closed when idle |
//! | `retention.rs`  | retention and the offset-before-time lookup |
//!
//! Time comes from the storage too ([`Storage::now`], [`Storage::sleep`]):
//! on the memory disk the test moves the clock.

use super::budget::UnwrittenBudget;
use super::error::StorageError;
use super::io::{with_suffix, DiskFile, DiskStorage, SegmentFile, Storage};
use super::recovery::{self, Recovered};
use super::segment::{Segment, DELETED_SUFFIX};
use super::segments::Segments;
use crate::log_limit::LogLimit;
use crate::metrics::{self, FlushStats};
use crate::notify::Notify;
use protocol::batch::TimestampType;
use protocol::codec::AckMode;
use protocol::stored::MessageFormat;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

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
    /// What the log stores: format-1 messages or format-2 batches. Fixed
    /// for the log's life (recovery judges its bytes by it).
    pub format: protocol::stored::MessageFormat,
    /// Format 2: whose time a batch carries (LogAppendTime: the append's,
    /// stamped as it is placed).
    pub timestamps: protocol::batch::TimestampType,
    /// Format 2: idempotent producers remembered (see
    /// [`crate::storage::producers`]).
    pub producers_max: usize,
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
    /// A format-2 offset that may lie inside a batch: find the batch that
    /// holds it first ([`read`] does).
    Locate,
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
    /// The log offset of its first byte: the one asked for, or, format 2,
    /// the start of the batch that holds it.
    pub offset: u64,
}

impl<F> Clone for FetchSlice<F> {
    fn clone(&self) -> Self {
        FetchSlice {
            file: self.file.clone(),
            position: self.position,
            len: self.len,
            offset: self.offset,
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
    /// A LogAppendTime topic's produce: the time stamped into its batches.
    pub append_time: Option<i64>,
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
    /// The leader epoch a format-2 append stamps into its batches
    /// (`partitionLeaderEpoch`): the copy's while it leads, 0 unreplicated.
    leader_epoch: i32,
    /// The time the last produce stamped into its batches (LogAppendTime),
    /// until its append hands it to the producer's answer.
    stamped_time: Option<i64>,
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
    /// A replicated partition's high watermark: consumers see nothing at
    /// or past it (nor past the flushed offset). `None`: one copy, the
    /// flushed offset alone bounds what is visible.
    high_watermark: Option<u64>,
    /// The highest high watermark this copy has learned, in this run or
    /// an earlier one (`high-watermark` in its directory): committed bytes
    /// below it are the partition's, whatever a leader no newer than this
    /// copy's last epoch says (see `replica::follower`).
    committed_floor: u64,
    /// The floor as last written to its file.
    floor_checkpointed: u64,
    /// A replicated partition of a `write_caching` topic: what is written
    /// (not only flushed) below the high watermark is visible.
    write_caching: bool,
    poisoned: Option<String>,
    /// Its only copy vanished (`storage/lost.rs`): nothing is served or
    /// written until an operator decides.
    lost: bool,
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
    /// Format 2: the idempotent producers' last batches
    /// (`producer_state.rs`).
    producers: crate::storage::producers::Producers,
    /// Where the `producers` snapshot file stands.
    producers_snapshot_at: u64,
}

pub use super::io::now_ms;

impl<S: Storage> PartitionLog<S> {
    /// Opens (or creates) the log in `dir` on `storage`, recovering its tail
    /// first.
    #[expect(
        clippy::too_many_lines,
        reason = "a log's opening: recovery, segments, recovery point, watermarks, files; one constructor"
    )]
    pub async fn open(
        storage: S,
        dir: &Path,
        label: &str,
        settings: LogSettings,
    ) -> Result<(PartitionLog<S>, Recovered), StorageError> {
        storage
            .create_dir_all(dir)
            .map_err(|e| StorageError::io("creating", dir, e))?;
        let mut recovered = recovery::recover(&storage, dir, label, settings.format)?;
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
        let (producers, producers_snapshot_at) = if settings.format == MessageFormat::Two {
            producer_state::recover(
                &storage,
                dir,
                segments.as_slice(),
                start_offset,
                end_offset,
                settings.producers_max,
            )?
        } else {
            (crate::storage::producers::Producers::new(1), 0)
        };
        let committed_floor =
            recovery::read_offset_file(&storage, &dir.join(recovery::HIGH_WATERMARK_FILE))
                .unwrap_or(0)
                .min(end_offset);
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
            leader_epoch: 0,
            stamped_time: None,
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
            lost: false,
            deleted: false,
            high_watermark: None,
            committed_floor,
            floor_checkpointed: committed_floor,
            write_caching: false,
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
            producers,
            producers_snapshot_at,
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

    /// Takes a topic's changed settings (`ringlog topic alter --config`):
    /// the next roll, flush decision and retention sweep follow them. What
    /// the log's bytes are (format, timestamps) never changes.
    pub fn change_settings(&mut self, settings: LogSettings) {
        self.settings = LogSettings {
            format: self.settings.format,
            timestamps: self.settings.timestamps,
            ..settings
        };
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

    /// Marks the partition as one whose data vanished: it refuses writes
    /// (as poisoned) and its shard refuses to serve it at all.
    pub fn mark_lost(&mut self) {
        self.lost = true;
        self.poisoned = Some(format!(
            "the data of {} was lost from this broker's data directory",
            self.label
        ));
    }

    /// True when the partition's data vanished (see [`Self::mark_lost`]).
    pub fn lost(&self) -> bool {
        self.lost
    }

    /// Appends a message set that the caller has validated (whole messages,
    /// CRCs checked). Returns the offsets `[base, end)` it was given. Never
    /// waits: the bytes are written later by the sync task.
    pub fn append(&mut self, bytes: &[u8], messages: u32) -> Result<(u64, u64), StorageError> {
        self.append_in(bytes, messages, Placing::Produce)
    }

    /// [`Self::append`], rolling by size (a produce) or, for a copy,
    /// exactly where its source rolled: to a new segment at the source's
    /// `segment_base` when the active one is older.
    fn append_in(
        &mut self,
        bytes: &[u8],
        messages: u32,
        placing: Placing,
    ) -> Result<(u64, u64), StorageError> {
        if let Some(reason) = &self.poisoned {
            return Err(StorageError::Poisoned(reason.clone()));
        }
        if let Some((until, reason)) = &self.refusing {
            let now = self.storage.now();
            if now < *until {
                return Err(StorageError::Unavailable {
                    reason: reason.clone(),
                    retry_in: *until - now,
                });
            }
            self.refusing = None;
        }
        let len = bytes.len() as u64;
        let needs_roll = match placing {
            Placing::Produce => self.segments.active().is_none_or(|a| {
                a.size_bytes > 0 && a.size_bytes + len > self.settings.segment_bytes
            }),
            Placing::Copy { segment_base } | Placing::Mirror { segment_base } => self
                .segments
                .active()
                .is_none_or(|a| a.base_offset < segment_base),
        };
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
        // A produce's format-2 batches get their positions and the
        // leader's epoch as they are placed, a mirror's copy this cluster's
        // epoch (design record 0015); a follower's bytes are its leader's.
        let stamp = (self.settings.format == MessageFormat::Two).then_some(self.leader_epoch);
        // LogAppendTime: a produce's batches take this moment as their
        // time; a copy keeps the time its leader (or source) stamped.
        let append_time = (placing == Placing::Produce
            && self.settings.timestamps == TimestampType::LogAppend)
            .then(|| self.storage.time_ms() as i64);
        self.stamped_time = append_time;
        let placed = self.place(segment_base, position, bytes, messages);
        if let Some(epoch) = stamp {
            stamp_batches(placed, base, epoch, placing, append_time);
            self.note_producers(bytes, base);
            if let Some(active) = self.segments.active_mut() {
                for (at, header) in protocol::batch::produce::batches(bytes).flatten() {
                    let time = append_time.unwrap_or(header.max_timestamp);
                    active
                        .index
                        .note(position + at as u64, header.size as u64, time);
                }
            }
        }
        self.pending_bytes += bytes.len();
        self.end_offset += len;
        self.appended_messages += u64::from(messages);
        if self.oldest_unflushed_at.is_none() {
            self.oldest_unflushed_at = Some(self.storage.now());
        }
        debug_assert!(self.written_offset <= self.end_offset);
        self.account();
        Ok((base, self.end_offset))
    }

    /// Copies `bytes` into the pending chunks at `position` of the segment
    /// at `segment_base`; the copy, to stamp.
    fn place(
        &mut self,
        segment_base: u64,
        position: u64,
        bytes: &[u8],
        messages: u32,
    ) -> &mut [u8] {
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
        let Some(chunk) = self.pending.last_mut() else {
            unreachable!("a chunk was just filled");
        };
        let from = chunk.bytes.len() - bytes.len();
        &mut chunk.bytes[from..]
    }

    /// Notes a format-2 batch of `size` bytes a hop found at `offset`,
    /// its maxTimestamp `max_time`, in its segment's index.
    pub(super) fn note_batch(&mut self, offset: u64, size: u64, max_time: i64) {
        let Some(i) = self.segments.find(offset) else {
            return;
        };
        if let Some(segment) = self.segments.get_mut(i) {
            let position = offset - segment.base_offset;
            segment.index.note(position, size, max_time);
        }
    }

    /// The leader epoch format-2 appends stamp into their batches from now
    /// on (the replica sets it as it starts leading).
    pub fn set_leader_epoch(&mut self, epoch: u32) {
        self.leader_epoch = i32::try_from(epoch).unwrap_or(i32::MAX);
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
                || self.checkpointed_offset != self.flushed_offset
                || self.floor_checkpointed != self.committed_floor)
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
        self.try_read_below(offset, bytes_max, self.visible_offset())
    }

    /// [`Self::try_read`] up to `limit` instead of the visible end (a
    /// follower's fetch reads up to what the leader has written).
    pub fn try_read_below(
        &self,
        offset: u64,
        bytes_max: u32,
        limit: u64,
    ) -> Result<Read<S::File>, StorageError> {
        self.try_read_at(offset, bytes_max, limit, false)
    }

    /// [`Self::try_read_below`]; `located`: `offset` is known to start a
    /// unit (else a format-2 offset that may lie inside a batch is
    /// [`Read::Locate`]).
    pub(super) fn try_read_at(
        &self,
        offset: u64,
        bytes_max: u32,
        limit: u64,
        located: bool,
    ) -> Result<Read<S::File>, StorageError> {
        // Bytes past the written offset are not in the file yet.
        let limit = limit.min(self.written_offset);
        if offset < self.start_offset || offset > self.end_offset {
            return Err(StorageError::OffsetOutOfRange {
                requested: offset,
                start: self.start_offset,
                end: self.end_offset,
            });
        }
        if offset >= limit || bytes_max == 0 {
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
        let relative = offset - segment.base_offset;
        // A reader at a batch start the index knows (a follower or a
        // consumer that read whole batches usually is) reads at once.
        if !located
            && self.settings.format == MessageFormat::Two
            && !segment.index.knows_start(relative)
        {
            return Ok(Read::Locate);
        }
        let visible_end = segment.end_offset().min(limit);
        let len = (visible_end - offset).min(u64::from(bytes_max)) as u32;
        let Some(file) = segment.file.clone() else {
            return Ok(Read::Closed {
                base_offset: segment.base_offset,
                path: segment.path.clone(),
            });
        };
        segment.last_used.set(self.storage.now());
        let position = offset - segment.base_offset;
        // Pair assertion: the slice lies inside the segment and below the flush.
        assert!(position + u64::from(len) <= segment.size_bytes);
        assert!(offset + u64::from(len) <= limit);
        Ok(Read::Slice(FetchSlice {
            file,
            position,
            len,
            offset,
        }))
    }

    /// Records the flushed offset as the recovery point when it moved; with
    /// `durable` (graceful stop) the file is fsynced.
    pub fn checkpoint(&mut self, durable: bool) -> Result<(), StorageError> {
        if self.committed_floor != self.floor_checkpointed || (durable && self.committed_floor > 0)
        {
            recovery::write_offset_file(
                &self.storage,
                &self.dir,
                recovery::HIGH_WATERMARK_FILE,
                self.committed_floor,
                durable,
            )?;
            self.floor_checkpointed = self.committed_floor;
        }
        if self.flushed_offset == self.checkpointed_offset && !durable {
            return Ok(());
        }
        recovery::write_recovery_point(&self.storage, &self.dir, self.flushed_offset, durable)?;
        self.checkpointed_offset = self.flushed_offset;
        self.checkpoint_producers(durable)
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
            active.index.truncate(keep);
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
        self.producers.truncate(to);
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
        self.refusing = Some((self.storage.now() + STORAGE_RETRY, reason));
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

thread_local! {
    /// A shard's storage warnings, a line a second each: a full disk or a
    /// descriptor shortage would otherwise log once per partition per tick.
    static ROLLBACK_LINES: LogLimit = const { LogLimit::new(Duration::from_secs(1)) };
    static CHECKPOINT_LINES: LogLimit = const { LogLimit::new(Duration::from_secs(1)) };
}

mod by_time;
mod digest;
mod fetch_wait;
mod files;
mod producer_state;
mod replica;
mod retention;
mod writer;

pub use by_time::{offset_for_time, record_for_time};
pub use digest::digests;
use fetch_wait::flush_for_waiting_fetches;
pub use fetch_wait::{fetch_waits, WaitingFetch};
pub use files::{batch_size_at, read, read_below};
use files::{open_segment_file, segment_file};
pub use replica::{cut_uncommitted_damage, truncate};
pub use retention::Retired;
pub use writer::{
    append, append_mirror, append_replica, appended_before, request_sync, stored, sync_all, tick,
};

#[cfg(test)]
mod tests;

/// How an append's bytes come: a producer's (the log rolls by size and
/// stamps its batches), a follower's copy of its leader's log, or a
/// mirror's copy of another cluster's (both roll where the source did).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placing {
    Produce,
    Copy { segment_base: u64 },
    Mirror { segment_base: u64 },
}

/// Stamps the format-2 batches of an append placed at `base` (checked by
/// its caller): a produce's get their position as baseOffset,
/// `leader_epoch`, lastOffsetDelta = size - 1 and a new CRC; a mirror's
/// only this cluster's `leader_epoch` (outside the CRC: the source's
/// epochs mean nothing here, and recovery checks the field against this
/// copy's epochs); a follower's none (design record 0015).
fn stamp_batches(
    bytes: &mut [u8],
    base: u64,
    leader_epoch: i32,
    placing: Placing,
    log_append_time: Option<i64>,
) {
    if let Placing::Copy { .. } = placing {
        return;
    }
    let mut at = 0usize;
    while at < bytes.len() {
        let size = match protocol::batch::BatchHeader::read(&bytes[at..]) {
            Ok(header) if header.size <= bytes.len() - at => header.size,
            // The caller checked every batch (`batch::produce::check`).
            other => panic!("stamping an unchecked batch at {at}: {other:?}"),
        };
        let batch = &mut bytes[at..at + size];
        if placing == Placing::Produce {
            protocol::batch::produce::stamp(
                batch,
                protocol::batch::produce::Stamp {
                    position: base + at as u64,
                    leader_epoch,
                    log_append_time,
                },
            );
        } else {
            protocol::batch::produce::stamp_epoch(batch, leader_epoch);
        }
        at += size;
    }
}
