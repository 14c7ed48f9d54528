//! The shard's disk driver: every segment write and every flush of a shard's
//! partitions, batched onto two threads of the shard's own.
//!
//! A partition's log asks for one write (`pwrite`) or one flush
//! (`fdatasync`) at a time. Through io_uring each became its own request,
//! and on ext4 every buffered write and every fdatasync is punted to
//! io_uring's worker threads (ext4 cannot do them without blocking; a
//! `RWF_NOWAIT` buffered write answers `EOPNOTSUPP` here). With one
//! partition that is a few large requests a second; with 1,000 partitions
//! taking 50-message batches it was a worker hand-off per 10 KB write and an
//! fdatasync per partition every flush interval — with one producer
//! 41,000 fdatasyncs for 4,000,000 messages, and the scheduler's and the
//! workers' share of the broker's CPU larger than the handlers' (issue 9,
//! item 2; `docs/design/0010-disk-driver.md` has the measurements).
//!
//! So the driver queues what every partition of the shard asks for and
//! hands each queue over whole:
//!
//! - **Writes**: everything queued goes to the shard's writer thread as one
//!   batch, `pwritev` after `pwritev`; what arrives meanwhile is the next
//!   batch. A partition never has two writes queued (its log waits for
//!   each), so order within a partition is the log's. The buffers come back
//!   to the shard and are handed out again for new appends
//!   ([`Driver::buffer`]): a partition's pending bytes never fault in fresh
//!   memory in steady state.
//! - **Flushes**: everything queued goes to the shard's syncer thread as
//!   one batch. A batch of at least `syncfs_min_files` files and
//!   directories is made durable with **one `syncfs(2)`** of the data
//!   directory's file system (which also covers new directory entries);
//!   a smaller one with an `fdatasync` per file (`fsync` per directory).
//!   Writes go on while a flush runs, as before.
//!
//! **Errors.** `fdatasync` reports a write-back error of its file once per
//! open file; `syncfs` reports one of any file on the file system once per
//! open file *of the syncfs call* — the driver keeps one such descriptor,
//! opened before the shard writes anything, so no error of the shard's
//! files can escape it. When `syncfs` fails the driver cannot tell whose
//! pages failed: it fdatasyncs each file of the batch (each reports its own
//! error, so exactly the damaged partitions are poisoned) and uses
//! `fdatasync` alone from then on, so every partition that had unflushed
//! bytes at the time is checked by its own next fdatasync too.
//!
//! **Cost of syncfs.** It writes back every dirty page of the file system,
//! not just the batch's: on a broker's own data disk that is other
//! partitions' data, due within their flush interval anyway. On a disk
//! shared with other heavy writers it makes flushes wait for their data;
//! `syncfs_min_files = 0` turns it off.

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::future::{poll_fn, Future};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};

/// Counts of what a driver did, for the shard's metrics.
#[derive(Debug, Default)]
pub struct DriverStats {
    /// Segment writes (`pwrite` calls asked for by logs).
    pub writes: Cell<u64>,
    /// Batches of writes handed to the writer thread.
    pub write_batches: Cell<u64>,
    /// Files and directories asked to be made durable.
    pub syncs: Cell<u64>,
    /// Batches of them handed to the syncer thread.
    pub sync_batches: Cell<u64>,
    /// Batches made durable with one `syncfs`.
    pub syncfs_batches: Cell<u64>,
    /// Pending-byte buffers allocated because the pool had none to give.
    pub buffers_allocated: Cell<u64>,
    /// Buffers freed because the pool was full.
    pub buffers_freed: Cell<u64>,
}

/// How a shard's driver flushes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverSettings {
    /// A directory on the file system the logs live on (the data directory):
    /// what `syncfs` is called on. `None`: never `syncfs`.
    pub syncfs_dir: Option<PathBuf>,
    /// Batches of at least this many files and directories are made durable
    /// with one `syncfs`; 0 = never.
    pub syncfs_min_files: usize,
    /// Names the driver's threads: `<name>-write`, `<name>-sync`,
    /// `<name>-open`.
    pub name: String,
}

impl Default for DriverSettings {
    fn default() -> Self {
        DriverSettings {
            syncfs_dir: None,
            syncfs_min_files: 0,
            name: "disk".into(),
        }
    }
}

/// One shard's disk driver (see the module doc). Not `Send`.
pub struct Driver {
    queues: RefCell<Queues>,
    pool: RefCell<Pool>,
    writer: Lane<WriteJob, Written>,
    syncer: Lane<SyncJob, io::Result<()>>,
    opener: Lane<OpenJob, io::Result<File>>,
    /// Opened before anything is written through this driver.
    syncfs_dir: Option<Arc<File>>,
    syncfs_min_files: usize,
    /// A `syncfs` failed once: only fdatasyncs from now on.
    syncfs_failed: Cell<bool>,
    stats: DriverStats,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("syncfs_min_files", &self.syncfs_min_files)
            .field("syncfs_failed", &self.syncfs_failed.get())
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Queues {
    writes: Vec<Queued<WriteJob, io::Result<usize>>>,
    syncs: Vec<Queued<SyncJob, io::Result<()>>>,
    writing: bool,
    syncing: bool,
}

/// An operation waiting for its batch.
struct Queued<J, R> {
    job: J,
    done: Rc<Slot<R>>,
}

/// The jobs hold their files: a descriptor a thread is using can never be
/// closed and reused under it, whatever happens to the task that asked.
struct WriteJob {
    file: Arc<File>,
    buffers: Vec<Vec<u8>>,
    position: u64,
}

/// A write's result, and its buffers back for reuse.
type Written = (io::Result<usize>, Vec<Vec<u8>>);

/// Buffers handed out by [`Driver::buffer`] have a capacity of
/// `POOL_SMALLEST << class` for a class below this.
const POOL_CLASSES: usize = 9;

/// The smallest pooled buffer (the log's smallest pending chunk).
const POOL_SMALLEST: usize = 4096;

/// Free buffers a shard keeps for reuse, in bytes of capacity. Past it,
/// buffers coming back from writes are freed.
pub const POOL_BYTES_MAX: usize = 32 << 20;

/// Free buffers by class.
#[derive(Default)]
struct Pool {
    free: [Vec<Vec<u8>>; POOL_CLASSES],
    bytes: usize,
    /// The fewest free bytes since the last trim: what nobody needed.
    low_water: usize,
}

impl Pool {
    /// The class whose buffers hold `capacity` bytes, if one does.
    fn class_for(capacity: usize) -> Option<usize> {
        let units = capacity.div_ceil(POOL_SMALLEST).max(1);
        let class = units.next_power_of_two().trailing_zeros() as usize;
        (class < POOL_CLASSES).then_some(class)
    }

    /// A buffer of the class for `capacity`, and whether it is new.
    fn take(&mut self, capacity: usize) -> (Vec<u8>, bool) {
        let Some(class) = Pool::class_for(capacity) else {
            return (Vec::with_capacity(capacity), true);
        };
        match self.free[class].pop() {
            Some(buffer) => {
                self.bytes -= buffer.capacity();
                self.low_water = self.low_water.min(self.bytes);
                (buffer, false)
            }
            None => (Vec::with_capacity(POOL_SMALLEST << class), true),
        }
    }

    /// Keeps `buffer` for reuse; false when it is freed instead.
    fn give_back(&mut self, mut buffer: Vec<u8>) -> bool {
        let capacity = buffer.capacity();
        let Some(class) = Pool::class_for(capacity) else {
            return false;
        };
        if POOL_SMALLEST << class != capacity || self.bytes + capacity > POOL_BYTES_MAX {
            return false;
        }
        buffer.clear();
        self.bytes += capacity;
        self.free[class].push(buffer);
        true
    }

    /// Frees what stayed unused since the last trim (the low-water mark),
    /// largest buffers first; returns the bytes and buffers freed.
    fn trim(&mut self) -> (usize, u64) {
        let mut excess = self.low_water;
        let (mut freed, mut buffers) = (0, 0);
        for class in (0..POOL_CLASSES).rev() {
            while excess >= POOL_SMALLEST << class {
                let Some(buffer) = self.free[class].pop() else {
                    break;
                };
                excess -= buffer.capacity();
                freed += buffer.capacity();
                buffers += 1;
            }
        }
        self.bytes -= freed;
        self.low_water = self.bytes;
        (freed, buffers)
    }
}

enum SyncJob {
    File(Arc<File>),
    Dir(PathBuf),
}

/// A file to open for reading and writing, created if `create`.
struct OpenJob {
    path: PathBuf,
    create: bool,
}

/// A batch for a lane's thread (with the syncfs directory, for the
/// syncer), and where its results go.
type Batch<J, R> = (Vec<J>, Option<Arc<File>>, flume::Sender<Vec<R>>);

/// A thread that runs batches of jobs, in order, one batch at a time.
struct Lane<J, R> {
    jobs: flume::Sender<Batch<J, R>>,
}

impl<J: Send + 'static, R: Send + 'static> Lane<J, R> {
    fn start(
        name: String,
        run: impl Fn(Vec<J>, Option<Arc<File>>) -> Vec<R> + Send + 'static,
    ) -> io::Result<Self> {
        let (jobs, incoming) = flume::unbounded::<Batch<J, R>>();
        std::thread::Builder::new().name(name).spawn(move || {
            // Ends when the driver (the only sender) is dropped.
            while let Ok((batch, fd, reply)) = incoming.recv() {
                let _ = reply.send(run(batch, fd));
            }
        })?;
        Ok(Lane { jobs })
    }

    /// Runs one batch on the lane's thread.
    async fn run(&self, batch: Vec<J>, fd: Option<Arc<File>>) -> Option<Vec<R>> {
        let (reply, results) = flume::bounded(1);
        self.jobs.send((batch, fd, reply)).ok()?;
        results.recv_async().await.ok()
    }
}

/// A one-shot result, filled by the driver and awaited by the caller.
struct Slot<T> {
    value: Cell<Option<T>>,
    waker: Cell<Option<Waker>>,
}

impl<T> Slot<T> {
    fn new() -> Rc<Self> {
        Rc::new(Slot {
            value: Cell::new(None),
            waker: Cell::new(None),
        })
    }

    fn fill(&self, value: T) {
        self.value.set(Some(value));
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    async fn wait(&self) -> T {
        poll_fn(|cx| match self.value.take() {
            Some(value) => Poll::Ready(value),
            None => {
                self.waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        })
        .await
    }
}

impl Driver {
    /// A driver with its two threads; opens `settings.syncfs_dir` now, before
    /// anything is written through it.
    pub fn start(settings: &DriverSettings) -> io::Result<Rc<Driver>> {
        let syncfs_dir = match (&settings.syncfs_dir, settings.syncfs_min_files) {
            (Some(dir), n) if n > 0 => Some(Arc::new(File::open(dir)?)),
            _ => None,
        };
        Ok(Rc::new(Driver {
            queues: RefCell::default(),
            pool: RefCell::default(),
            writer: Lane::start(format!("{}-write", settings.name), write_batch)?,
            syncer: Lane::start(format!("{}-sync", settings.name), sync_batch)?,
            opener: Lane::start(format!("{}-open", settings.name), open_batch)?,
            syncfs_dir,
            syncfs_min_files: settings.syncfs_min_files,
            syncfs_failed: Cell::new(false),
            stats: DriverStats::default(),
        }))
    }

    /// What the driver did so far.
    pub fn stats(&self) -> &DriverStats {
        &self.stats
    }

    /// An empty buffer for at least `capacity` bytes: one a write gave
    /// back if there is one of its size class.
    pub fn buffer(&self, capacity: usize) -> Vec<u8> {
        let (buffer, new) = self.pool.borrow_mut().take(capacity);
        if new {
            bump(&self.stats.buffers_allocated, 1);
        }
        buffer
    }

    /// Free bytes (of capacity) kept for [`Driver::buffer`].
    pub fn pooled_bytes(&self) -> usize {
        self.pool.borrow().bytes
    }

    /// Frees the pooled buffers nobody took since the last call (call it
    /// every few seconds): a burst's buffers go back to the allocator once
    /// the partitions are quiet, a steady load keeps what it uses.
    pub fn trim_pool(&self) -> usize {
        let (freed, buffers) = self.pool.borrow_mut().trim();
        bump(&self.stats.buffers_freed, buffers);
        freed
    }

    /// Writes all of `buffers`, one after the other, at `position` of
    /// `file`; returns how many bytes were written (fewer when the disk
    /// filled up part-way). The buffers go back to the pool.
    pub async fn write(
        self: &Rc<Self>,
        file: &Arc<File>,
        buffers: Vec<Vec<u8>>,
        position: u64,
    ) -> io::Result<usize> {
        let done = Slot::new();
        let job = WriteJob {
            file: file.clone(),
            buffers,
            position,
        };
        let start = {
            let mut queues = self.queues.borrow_mut();
            queues.writes.push(Queued {
                job,
                done: done.clone(),
            });
            !std::mem::replace(&mut queues.writing, true)
        };
        if start {
            spawn(run_writes(self.clone()));
        }
        done.wait().await
    }

    /// Opens `path` for reading and writing (creating it with `create`) on
    /// a thread of the driver's own: creating an inode on an aged ext4
    /// scans its bitmaps (135 µs a file here), and glommio's blocking pool
    /// is where cold reads wait for the disk.
    pub async fn open(&self, path: &Path, create: bool) -> io::Result<File> {
        let job = OpenJob {
            path: path.to_path_buf(),
            create,
        };
        match self.opener.run(vec![job], None).await {
            Some(mut results) if results.len() == 1 => results.remove(0),
            _ => Err(io::Error::other("the disk driver's open thread is gone")),
        }
    }

    /// Makes every byte written to `file` so far durable.
    pub async fn fdatasync(self: &Rc<Self>, file: &Arc<File>) -> io::Result<()> {
        self.sync(SyncJob::File(file.clone())).await
    }

    /// Makes the entries of `dir` durable.
    pub async fn sync_dir(self: &Rc<Self>, dir: &Path) -> io::Result<()> {
        self.sync(SyncJob::Dir(dir.to_path_buf())).await
    }

    async fn sync(self: &Rc<Self>, job: SyncJob) -> io::Result<()> {
        let done = Slot::new();
        let start = {
            let mut queues = self.queues.borrow_mut();
            queues.syncs.push(Queued {
                job,
                done: done.clone(),
            });
            !std::mem::replace(&mut queues.syncing, true)
        };
        if start {
            spawn(run_syncs(self.clone()));
        }
        done.wait().await
    }
}

/// At most this many buffers go into one `pwritev` (Linux's `IOV_MAX`).
const IOV_MAX: usize = 1024;

/// The most one `pwritev` writes. The page cache sizes its folios by the
/// write: a 4 MiB write asks for 2 MiB folios, which on this VM come from
/// free blocks the host has taken back and must fault in again — measured
/// down to 381 MB/s for 4 MiB writes against 4.2–5.3 GB/s for 64 KiB–1 MiB
/// ones (`examples/write_sizes.rs`, `docs/design/0010-disk-driver.md`).
/// Four calls per MiB cost nothing measurable elsewhere.
pub const WRITE_PIECE_BYTES: usize = 256 * 1024;

fn bump(counter: &Cell<u64>, n: u64) {
    counter.set(counter.get().wrapping_add(n));
}

fn spawn(task: impl Future<Output = ()> + 'static) {
    glommio::spawn_local(task).detach();
}

/// Lets the other tasks of this turn of the reactor queue their operations
/// before a batch is taken.
async fn let_others_queue() {
    futures_lite::future::yield_now().await;
}

async fn run_writes(driver: Rc<Driver>) {
    let_others_queue().await;
    loop {
        let mut batch = std::mem::take(&mut driver.queues.borrow_mut().writes);
        if batch.is_empty() {
            driver.queues.borrow_mut().writing = false;
            return;
        }
        bump(&driver.stats.writes, batch.len() as u64);
        bump(&driver.stats.write_batches, 1);
        let jobs = batch
            .iter_mut()
            .map(|q| WriteJob {
                file: q.job.file.clone(),
                buffers: std::mem::take(&mut q.job.buffers),
                position: q.job.position,
            })
            .collect();
        let results = driver.writer.run(jobs, None).await.map(|results| {
            let mut pool = driver.pool.borrow_mut();
            results
                .into_iter()
                .map(|(result, buffers)| {
                    for buffer in buffers {
                        if !pool.give_back(buffer) {
                            bump(&driver.stats.buffers_freed, 1);
                        }
                    }
                    result
                })
                .collect()
        });
        finish(batch, results);
    }
}

async fn run_syncs(driver: Rc<Driver>) {
    let_others_queue().await;
    loop {
        let mut batch = std::mem::take(&mut driver.queues.borrow_mut().syncs);
        if batch.is_empty() {
            driver.queues.borrow_mut().syncing = false;
            return;
        }
        bump(&driver.stats.syncs, batch.len() as u64);
        bump(&driver.stats.sync_batches, 1);
        let syncfs = driver
            .syncfs_dir
            .clone()
            .filter(|_| !driver.syncfs_failed.get() && batch.len() >= driver.syncfs_min_files);
        let use_syncfs = syncfs.is_some();
        let jobs = batch
            .iter_mut()
            .map(|q| match &mut q.job {
                SyncJob::File(file) => SyncJob::File(file.clone()),
                SyncJob::Dir(path) => SyncJob::Dir(std::mem::take(path)),
            })
            .collect();
        let results = driver.syncer.run(jobs, syncfs).await;
        if use_syncfs {
            match &results {
                Some(results) if results.len() == batch.len() + 1 => {
                    // The syncer appends how the syncfs went.
                    if results[batch.len()].is_err() {
                        driver.syncfs_failed.set(true);
                        tracing::error!(
                            "syncfs reported a write-back error on the data directory's file system; \
                             flushing with one fdatasync per file from now on"
                        );
                    } else {
                        bump(&driver.stats.syncfs_batches, 1);
                    }
                }
                _ => {}
            }
        }
        finish(batch, results);
    }
}

/// Hands each operation its result; then lets go of the batch's files.
fn finish<J, R>(batch: Vec<Queued<J, R>>, results: Option<Vec<R>>) {
    let mut results = results.map(Vec::into_iter);
    for queued in batch {
        match results.as_mut().and_then(Iterator::next) {
            Some(result) => queued.done.fill(result),
            // The thread is gone (it never panics on its own; only at exit).
            None => drop(queued),
        }
    }
}

/// The open thread's work.
fn open_batch(jobs: Vec<OpenJob>, _: Option<Arc<File>>) -> Vec<io::Result<File>> {
    jobs.into_iter()
        .map(|job| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(job.create)
                .truncate(false)
                .open(job.path)
        })
        .collect()
}

/// The writer thread's work: every write of the batch, in order.
fn write_batch(jobs: Vec<WriteJob>, _: Option<Arc<File>>) -> Vec<Written> {
    jobs.into_iter()
        .map(|job| {
            let result = pwritev_all(job.file.as_raw_fd(), &job.buffers, job.position);
            (result, job.buffers)
        })
        .collect()
}

/// `pwritev` until everything is written, at most [`WRITE_PIECE_BYTES`] a
/// call; a short count means the disk filled up part-way (the error comes
/// with the next call).
fn pwritev_all(fd: RawFd, buffers: &[Vec<u8>], position: u64) -> io::Result<usize> {
    let total: usize = buffers.iter().map(Vec::len).sum();
    let mut done = 0;
    while done < total {
        // The bytes from `done` on, at most a piece's worth.
        let mut skip = done;
        let mut room = WRITE_PIECE_BYTES;
        let iovecs: Vec<libc::iovec> = buffers
            .iter()
            .filter_map(|b| {
                if skip >= b.len() {
                    skip -= b.len();
                    return None;
                }
                let rest = &b[skip..];
                skip = 0;
                let len = rest.len().min(room);
                room -= len;
                (len > 0).then_some(libc::iovec {
                    iov_base: rest.as_ptr() as *mut libc::c_void,
                    iov_len: len,
                })
            })
            .take(IOV_MAX)
            .collect();
        // SAFETY: every iovec points into a live buffer of `buffers`; the
        // job holds the file, so `fd` is open.
        let n = unsafe {
            libc::pwritev(
                fd,
                iovecs.as_ptr(),
                iovecs.len() as libc::c_int,
                (position + done as u64) as libc::off_t,
            )
        };
        match n {
            n if n > 0 => done += n as usize,
            0 => break,
            _ => {
                let error = io::Error::last_os_error();
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                if done > 0 {
                    break;
                }
                return Err(error);
            }
        }
    }
    Ok(done)
}

/// The syncer thread's work: one `syncfs` (when `syncfs` names a
/// descriptor), else or after a failed one an fdatasync per file and an
/// fsync per directory. With `syncfs`, the syncfs result comes last.
fn sync_batch(jobs: Vec<SyncJob>, syncfs: Option<Arc<File>>) -> Vec<io::Result<()>> {
    let syncfs_result = syncfs.map(|dir| {
        if let Some(errno) = crate::faults::Faults::get().syncfs_errno {
            return Err(io::Error::from_raw_os_error(errno));
        }
        // SAFETY: a plain syscall on a descriptor `dir` keeps open.
        if unsafe { libc::syncfs(dir.as_raw_fd()) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    });
    let mut results: Vec<io::Result<()>> = match &syncfs_result {
        Some(Ok(())) => jobs.iter().map(|_| Ok(())).collect(),
        _ => jobs.iter().map(sync_one).collect(),
    };
    if let Some(result) = syncfs_result {
        results.push(result);
    }
    results
}

fn sync_one(job: &SyncJob) -> io::Result<()> {
    match job {
        SyncJob::File(file) => file.sync_data(),
        SyncJob::Dir(path) => File::open(path)?.sync_all(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<F: Future<Output = ()> + 'static>(f: impl FnOnce() -> F + Send + 'static) {
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .io_memory(256 * 1024)
            .spawn(move || async move { f().await })
            .unwrap()
            .join()
            .unwrap();
    }

    fn temp_dir(label: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("ringlog-driver-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn open(path: &Path) -> Arc<File> {
        Arc::new(
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
                .unwrap(),
        )
    }

    /// Writes and flushes asked for in one turn go out as one batch each,
    /// land where they were asked to, and a batch of enough files is one
    /// syncfs.
    #[test]
    fn one_turn_of_writes_and_flushes_is_one_batch_each() {
        let dir = temp_dir("batch");
        run(move || async move {
            let driver = Driver::start(&DriverSettings {
                syncfs_dir: Some(dir.clone()),
                syncfs_min_files: 4,
                name: "test".into(),
            })
            .unwrap();
            let files: Vec<Arc<File>> = (0..8)
                .map(|i| open(&dir.join(format!("{i}.log"))))
                .collect();
            let writes: Vec<_> = files
                .iter()
                .enumerate()
                .map(|(i, file)| {
                    let (driver, file) = (driver.clone(), file.clone());
                    glommio::spawn_local(async move {
                        let mut first = driver.buffer(1000);
                        first.resize(600, i as u8);
                        let second = vec![i as u8; 400 + i];
                        driver.write(&file, vec![first, second], 7).await.unwrap()
                    })
                })
                .collect();
            for (i, write) in writes.into_iter().enumerate() {
                assert_eq!(write.await, 1000 + i);
            }
            assert_eq!(driver.stats().writes.get(), 8);
            assert_eq!(driver.stats().write_batches.get(), 1);
            // Each write gave its 4 KiB buffer back (not the odd-sized one).
            assert_eq!(driver.pooled_bytes(), 8 * 4096);
            assert_eq!(driver.buffer(3000).capacity(), 4096);
            assert_eq!(driver.pooled_bytes(), 7 * 4096);
            assert_eq!(driver.buffer(5000).capacity(), 8192);
            // The pool was empty at the start, so the first trim frees
            // nothing; the seven buffers nobody takes until the next trim
            // are freed by it, and then there is nothing left.
            assert_eq!(driver.trim_pool(), 0);
            assert_eq!(driver.trim_pool(), 7 * 4096);
            assert_eq!(driver.pooled_bytes(), 0);
            assert_eq!(driver.trim_pool(), 0);
            let syncs: Vec<_> = files
                .iter()
                .map(|file| {
                    let (driver, file) = (driver.clone(), file.clone());
                    glommio::spawn_local(async move { driver.fdatasync(&file).await.unwrap() })
                })
                .collect();
            for sync in syncs {
                sync.await;
            }
            assert_eq!(driver.stats().sync_batches.get(), 1);
            assert_eq!(driver.stats().syncfs_batches.get(), 1);
            // Below the threshold: fdatasyncs, no syncfs.
            driver.fdatasync(&files[0]).await.unwrap();
            driver.sync_dir(&dir).await.unwrap();
            assert_eq!(driver.stats().sync_batches.get(), 3);
            assert_eq!(driver.stats().syncfs_batches.get(), 1);
            for i in 0..8usize {
                let bytes = std::fs::read(dir.join(format!("{i}.log"))).unwrap();
                assert_eq!(bytes.len(), 7 + 1000 + i);
                assert!(bytes[..7].iter().all(|&b| b == 0));
                assert!(bytes[7..].iter().all(|&b| b == i as u8));
            }
            std::fs::remove_dir_all(&dir).unwrap();
        });
    }

    /// Errors come back to the operation that caused them, not its batch.
    #[test]
    fn a_failed_write_fails_only_itself() {
        let dir = temp_dir("errors");
        run(move || async move {
            let driver = Driver::start(&DriverSettings::default()).unwrap();
            let good = open(&dir.join("good.log"));
            let read_only = Arc::new(File::open(dir.join("good.log")).unwrap());
            let (d1, g) = (driver.clone(), good.clone());
            let first =
                glommio::spawn_local(async move { d1.write(&g, vec![vec![1; 10]], 0).await });
            let (d2, r) = (driver.clone(), read_only.clone());
            let second =
                glommio::spawn_local(async move { d2.write(&r, vec![vec![2; 10]], 0).await });
            assert_eq!(first.await.unwrap(), 10);
            assert_eq!(second.await.unwrap_err().raw_os_error(), Some(libc::EBADF));
            assert_eq!(driver.stats().write_batches.get(), 1);
            assert!(driver.sync_dir(&dir.join("missing")).await.is_err());
            std::fs::remove_dir_all(&dir).unwrap();
        });
    }
}
