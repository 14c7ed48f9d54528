//! The storage seam: everything a partition's log asks of a disk.
//!
//! The log (`partition_log.rs`) and its recovery (`recovery.rs`) are a state
//! machine over segment files; they never name glommio or `std::fs`. They
//! call a [`Storage`], of which there are two:
//!
//! - [`DiskStorage`]: the broker's. Segment appends and reads go through
//!   io_uring (glommio `BufferedFile`, see
//!   `docs/design/0001-buffered-appends.md`); flushes and file opens go
//!   through the shard's disk [`Driver`] (`driver.rs`), which makes many
//!   partitions' flushes durable with one `syncfs`
//!   (`0010-disk-driver.md`); directory work (listing, renames,
//!   truncation, the recovery point) is rare and uses `std::fs`.
//! - `MemoryStorage` (`memory.rs`): files in memory that remember what an
//!   fdatasync made durable and which directory entries a directory sync
//!   made durable, so a test can crash it the way a process kill or a power
//!   cut would. The model test (`model_test.rs`) drives the log against it
//!   without io_uring, without a disk and without time.
//!
//! The seam also owns task spawning and time: the log starts its writer and
//! flush tasks through [`Storage::spawn`], so a test decides when they run
//! and can interleave them with appends at every await point, and it reads
//! the clock and sleeps through [`Storage::now`] and [`Storage::sleep`], so
//! a test decides when time passes.
//!
//! Anchors: Redpanda's `segment_appender` (the log decides, an appender
//! does the I/O) and TigerBeetle's `testing/storage.zig` (an in-memory disk
//! with fault injection under the real state machine).

pub use super::driver::{Driver, DriverSettings, Flushed, WriteSlot};
use super::error::os_error;
use glommio::io::BufferedFile;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant, UNIX_EPOCH};

/// One open segment file.
pub trait SegmentFile: 'static {
    /// Writes `buffers`, one after the other, at `position`; returns how
    /// many bytes were written from `position` on (fewer than asked means
    /// the disk filled up).
    fn write_at(
        &self,
        buffers: Vec<Vec<u8>>,
        position: u64,
    ) -> impl Future<Output = io::Result<usize>>;

    /// Reads up to `len` bytes at `position` (fewer at the end of the file).
    fn read_at(&self, position: u64, len: usize) -> impl Future<Output = io::Result<Vec<u8>>>;

    /// Makes every byte written so far durable.
    fn fdatasync(&self) -> impl Future<Output = io::Result<()>>;

    /// The file's path, for error messages.
    fn path(&self) -> PathBuf;
}

/// A file found by [`Storage::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The file name (not the path).
    pub name: String,
    /// Its length in bytes.
    pub len: u64,
    /// Its modification time, milliseconds since the epoch.
    pub modified_ms: u64,
}

/// A disk, as the partition log uses it. Not `Send`: a shard's.
pub trait Storage: Clone + 'static {
    /// An open segment file.
    type File: SegmentFile;

    /// Opens a segment file for reading and writing, creating it with `create`.
    fn open(&self, path: &Path, create: bool) -> impl Future<Output = io::Result<Self::File>>;

    /// Runs a task of the log's (its writer, a flush round) beside the caller.
    fn spawn(&self, task: impl Future<Output = ()> + 'static);

    /// Creates a directory and its parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;

    /// The files in a directory, in no particular order.
    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>>;

    /// Reads up to `buf.len()` bytes at `position` of a file that is not open
    /// (recovery, at start). Blocking.
    fn read_at(&self, path: &Path, position: u64, buf: &mut [u8]) -> io::Result<usize>;

    /// A small file's whole content.
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>>;

    /// Writes `bytes` over the start of a small file, creating it if missing.
    /// In place — no new inode, no rename, no truncation — so a crash may
    /// leave the old bytes, the new ones or a mix: the caller's format must
    /// tell (the recovery point carries a CRC). With `durable`, fdatasyncs it.
    fn overwrite_file(&self, path: &Path, bytes: &[u8], durable: bool) -> io::Result<()>;

    /// Cuts a file to `len` bytes; with `durable`, fsyncs it.
    fn truncate(&self, path: &Path, len: u64, durable: bool) -> io::Result<()>;

    /// A file's length.
    fn len(&self, path: &Path) -> io::Result<u64>;

    /// Renames a file.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;

    /// Unlinks a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;

    /// Makes the directory's entries (files created, renamed, removed in it)
    /// durable. Blocking: for start-up and a graceful stop.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;

    /// [`Storage::sync_dir`] for a flush round: awaited, never blocking the
    /// caller's thread, and batched with the other flushes of the shard.
    fn flush_dir(&self, dir: &Path) -> impl Future<Output = io::Result<()>>;

    /// A log writer's turn at the disk; the turn ends when it is dropped.
    type Slot;

    /// Waits for a turn to write: a log's writer holds it while it writes
    /// what it took from its pending chunks, and meanwhile later appends
    /// gather in new ones.
    fn write_slot(&self) -> impl Future<Output = Self::Slot>;

    /// Now, by this disk's clock: the monotonic clock in the broker; a clock
    /// the test moves on the memory disk, so every time-driven policy (the
    /// flush interval, the waiting-fetch flush, refusals after a transient
    /// failure, idle files) runs in the model test too.
    fn now(&self) -> Instant;

    /// The wall clock in ms since the Unix epoch, as this storage keeps
    /// time: what a LogAppendTime batch is stamped with (the memory disk's
    /// moves with its clock, so the model tests know it).
    fn time_ms(&self) -> u64;

    /// Resolves once `delay` has passed by [`Storage::now`]'s clock.
    fn sleep(&self, delay: Duration) -> impl Future<Output = ()>;
}

/// The broker's storage: segment appends through io_uring (glommio
/// `BufferedFile`), flushes through the shard's [`Driver`] (one `syncfs`
/// for many partitions), `std::fs` for the rest. Clones share the driver:
/// make one per shard.
#[derive(Debug, Clone)]
pub struct DiskStorage {
    driver: Rc<Driver>,
}

impl DiskStorage {
    /// Storage whose flushes and opens go through a new driver (and its
    /// threads) made with `settings`.
    pub fn new(settings: &DriverSettings) -> io::Result<DiskStorage> {
        Ok(DiskStorage {
            driver: Driver::start(settings)?,
        })
    }

    /// Storage with a driver that never uses `syncfs` (tests, tools).
    pub fn plain() -> DiskStorage {
        DiskStorage::new(&DriverSettings::default())
            .unwrap_or_else(|e| panic!("starting the disk driver's threads: {e}"))
    }

    /// The shard's driver (for its metrics).
    pub fn driver(&self) -> &Rc<Driver> {
        &self.driver
    }
}

/// An open segment file of a [`DiskStorage`].
#[derive(Debug)]
pub struct DiskFile {
    file: BufferedFile,
    driver: Rc<Driver>,
}

impl Drop for DiskFile {
    fn drop(&mut self) {
        // glommio closes the descriptor when the BufferedFile goes.
        self.driver.file_closed();
    }
}

impl AsRawFd for DiskFile {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

impl SegmentFile for DiskFile {
    async fn write_at(&self, buffers: Vec<Vec<u8>>, position: u64) -> io::Result<usize> {
        // One io_uring write a buffer, all submitted at once (in one turn of
        // the reactor); io_uring runs the writes of one file in order.
        let lens: Vec<usize> = buffers.iter().map(Vec::len).collect();
        let mut at = position;
        let mut writes: Vec<_> = buffers
            .into_iter()
            .map(|buffer| {
                let (file, pos) = (&self.file, at);
                at += buffer.len() as u64;
                Some(Box::pin(async move { file.write_at(buffer, pos).await }))
            })
            .collect();
        self.driver.count_writes(writes.len());
        let mut results: Vec<Option<io::Result<usize>>> = writes.iter().map(|_| None).collect();
        std::future::poll_fn(|cx| {
            for (write, result) in writes.iter_mut().zip(results.iter_mut()) {
                if let Some(future) = write {
                    if let std::task::Poll::Ready(done) = future.as_mut().poll(cx) {
                        *result = Some(done.map_err(os_error));
                        *write = None;
                    }
                }
            }
            if writes.iter().all(Option::is_none) {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await;
        // What was written from `position` on without a gap: a short or
        // failed write ends it (the log rolls back what lies beyond).
        let mut written = 0;
        for (result, len) in results.into_iter().zip(lens) {
            match result {
                Some(Ok(n)) if n == len => written += n,
                Some(Ok(n)) => return Ok(written + n),
                Some(Err(error)) if written == 0 => return Err(error),
                _ => return Ok(written),
            }
        }
        Ok(written)
    }

    async fn read_at(&self, position: u64, len: usize) -> io::Result<Vec<u8>> {
        self.file
            .read_at(position, len)
            .await
            .map(|read| read.to_vec())
            .map_err(os_error)
    }

    async fn fdatasync(&self) -> io::Result<()> {
        match self.driver.flush_file().await {
            Flushed::ByFileSystem => Ok(()),
            Flushed::NotCovered => self.file.fdatasync().await.map_err(os_error),
        }
    }

    fn path(&self) -> PathBuf {
        self.file
            .path()
            .map_or_else(PathBuf::new, |p| p.to_path_buf())
    }
}

impl Storage for DiskStorage {
    type File = DiskFile;

    async fn open(&self, path: &Path, create: bool) -> io::Result<DiskFile> {
        self.driver.make_room_for_a_file().await;
        let file = self.driver.open(path, create).await?;
        self.driver.file_opened();
        // SAFETY: the descriptor comes from a std File that gives up its
        // ownership here; the BufferedFile is its only owner.
        let file = unsafe { BufferedFile::from_raw_fd(file.into_raw_fd()) };
        Ok(DiskFile {
            file,
            driver: self.driver.clone(),
        })
    }

    fn spawn(&self, task: impl Future<Output = ()> + 'static) {
        glommio::spawn_local(task).detach();
    }

    async fn flush_dir(&self, dir: &Path) -> io::Result<()> {
        self.driver.sync_dir(dir).await
    }

    type Slot = WriteSlot;

    async fn write_slot(&self) -> WriteSlot {
        self.driver.write_slot().await
    }

    fn now(&self) -> Instant {
        Instant::now()
    }

    fn time_ms(&self) -> u64 {
        now_ms()
    }

    async fn sleep(&self, delay: Duration) {
        glommio::timer::sleep(delay).await;
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let meta = entry.metadata()?;
            let modified_ms = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_millis() as u64);
            found.push(DirEntry {
                name,
                len: meta.len(),
                modified_ms,
            });
        }
        Ok(found)
    }

    fn read_at(&self, path: &Path, position: u64, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        std::fs::File::open(path)?.read_at(buf, position)
    }

    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    fn overwrite_file(&self, path: &Path, bytes: &[u8], durable: bool) -> io::Result<()> {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        std::os::unix::fs::FileExt::write_all_at(&file, bytes, 0)?;
        if durable {
            file.sync_data()?;
        }
        Ok(())
    }

    fn truncate(&self, path: &Path, len: u64, durable: bool) -> io::Result<()> {
        let file = std::fs::OpenOptions::new().write(true).open(path)?;
        file.set_len(len)?;
        if durable {
            file.sync_all()?;
        }
        Ok(())
    }

    fn len(&self, path: &Path) -> io::Result<u64> {
        std::fs::metadata(path).map(|m| m.len())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::File::open(dir)?.sync_all()
    }
}

/// A path with `suffix` appended to its file name (`x.log` → `x.log.deleted`).
pub fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

/// Files are shared between the log and the fetches sending from them.
pub type SharedFile<S> = Rc<<S as Storage>::File>;

/// Milliseconds since the Unix epoch (the wall clock: file times and
/// retention; the storage's `now` is the monotonic one).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
