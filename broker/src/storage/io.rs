//! The storage seam: everything a partition's log asks of a disk.
//!
//! The log (`partition_log.rs`) and its recovery (`recovery.rs`) are a state
//! machine over segment files; they never name glommio or `std::fs`. They
//! call a [`Storage`], of which there are two:
//!
//! - [`DiskStorage`]: the broker's. Segment writes and flushes go through
//!   the shard's disk [`Driver`] (`driver.rs`), which batches those of all
//!   the shard's partitions onto two threads of its own (buffered writes,
//!   see `docs/design/0001-buffered-appends.md` and
//!   `0010-disk-driver.md`); directory work (listing, renames,
//!   truncation, the recovery point) is rare and uses `std::fs`.
//! - `MemoryStorage` (`memory.rs`): files in memory that remember what an
//!   fdatasync made durable and which directory entries a directory sync
//!   made durable, so a test can crash it the way a process kill or a power
//!   cut would. The model test (`model_test.rs`) drives the log against it
//!   without io_uring, without a disk and without time.
//!
//! The seam also owns task spawning: the log starts its writer and flush
//! tasks through [`Storage::spawn`], so a test decides when they run and can
//! interleave them with appends at every await point.
//!
//! Anchors: Redpanda's `segment_appender` (the log decides, an appender
//! does the I/O) and TigerBeetle's `testing/storage.zig` (an in-memory disk
//! with fault injection under the real state machine).

pub use super::driver::{Driver, DriverSettings};
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::UNIX_EPOCH;

/// One open segment file.
pub trait SegmentFile: 'static {
    /// Writes `buffers`, one after the other, at `position`; returns how
    /// many bytes were written (fewer than asked means the disk filled up).
    /// The storage keeps the buffers (see [`Storage::buffer`]).
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

    /// An empty buffer with room for at least `capacity` bytes, for a log's
    /// pending appends; [`SegmentFile::write_at`] takes it back. The broker's
    /// storage hands out buffers its writes gave back, so a partition's
    /// appends do not fault in fresh memory for every batch.
    fn buffer(&self, capacity: usize) -> Vec<u8>;

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
}

/// The broker's storage: segment writes and flushes through the shard's
/// [`Driver`] (batched over all its partitions), `std::fs` for the rest.
/// Clones share the driver: make one per shard.
#[derive(Debug, Clone)]
pub struct DiskStorage {
    driver: Rc<Driver>,
}

impl DiskStorage {
    /// Storage whose writes and flushes go through a new driver (and its two
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
    /// Shared with the driver's threads while they use it.
    file: Arc<std::fs::File>,
    path: PathBuf,
    driver: Rc<Driver>,
}

impl AsRawFd for DiskFile {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

impl SegmentFile for DiskFile {
    async fn write_at(&self, buffers: Vec<Vec<u8>>, position: u64) -> io::Result<usize> {
        self.driver.write(&self.file, buffers, position).await
    }

    async fn read_at(&self, position: u64, len: usize) -> io::Result<Vec<u8>> {
        let file = self.file.clone();
        glommio::executor()
            .spawn_blocking(move || {
                let mut buf = vec![0; len];
                let mut done = 0;
                while done < len {
                    match std::os::unix::fs::FileExt::read_at(
                        &*file,
                        &mut buf[done..],
                        position + done as u64,
                    ) {
                        Ok(0) => break,
                        Ok(n) => done += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                buf.truncate(done);
                Ok(buf)
            })
            .await
    }

    async fn fdatasync(&self) -> io::Result<()> {
        self.driver.fdatasync(&self.file).await
    }

    fn path(&self) -> PathBuf {
        self.path.clone()
    }
}

impl Storage for DiskStorage {
    type File = DiskFile;

    async fn open(&self, path: &Path, create: bool) -> io::Result<DiskFile> {
        let file = self.driver.open(path, create).await?;
        Ok(DiskFile {
            file: Arc::new(file),
            path: path.to_path_buf(),
            driver: self.driver.clone(),
        })
    }

    fn buffer(&self, capacity: usize) -> Vec<u8> {
        self.driver.buffer(capacity)
    }

    fn spawn(&self, task: impl Future<Output = ()> + 'static) {
        glommio::spawn_local(task).detach();
    }

    async fn flush_dir(&self, dir: &Path) -> io::Result<()> {
        self.driver.sync_dir(dir).await
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
