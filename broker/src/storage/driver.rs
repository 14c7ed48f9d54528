//! The shard's disk driver: the flushes of all of a shard's partitions,
//! batched, and the opening of their files, off the shard's thread.
//!
//! A partition's log flushes on its own: an fdatasync of what it wrote,
//! after `flush_interval_ms` or `flush_messages`, or at once for an
//! `acks = flushed` produce. With one partition that is a few fdatasyncs a
//! second; with 1,000 partitions taking writes it was up to one per
//! partition every flush interval — with one producer, 41,000 fdatasyncs
//! for 4,000,000 messages, each writing its file's data and inode block and
//! flushing the device's cache (issue 9, item 2;
//! `docs/design/0010-disk-driver.md` has the measurements).
//!
//! So the driver queues the flushes every partition of the shard asks for
//! during a turn of the reactor and settles them together:
//!
//! - a batch of at least `syncfs_min_files` files and directories is made
//!   durable with **one `syncfs(2)`** of the data directory's file system,
//!   on the driver's syncer thread (there is no io_uring syncfs), which also
//!   covers new directory entries;
//! - a smaller batch is not covered: each file flushes itself with its own
//!   io_uring fdatasync, as before, and directories are fsynced on the
//!   syncer thread.
//!
//! Appends still go through io_uring (`io.rs`), but the driver hands out the
//! turns to write: at most [`WRITE_SLOTS`] of the shard's logs write at
//! once, so under load a waiting partition's appends gather into one write.
//! It also counts the shard's open segment files and, at
//! `segment_files_max`, has the shard close idle ones before another opens
//! (descriptors are bounded by configuration, not by how many partitions a
//! client writes to).
//! Segment files are opened (and created) on the driver's open thread:
//! creating an inode on an aged ext4 scans its bitmaps (up to 300 µs a file
//! here), and glommio's blocking pool is where cold reads wait for the disk.
//!
//! **Errors.** `fdatasync` reports a write-back error of its file once per
//! open file; `syncfs` reports one of any file on the file system once per
//! open file *of the syncfs call* — the driver keeps one such descriptor,
//! opened before the shard writes anything, so no error of the shard's
//! files can escape it. When `syncfs` fails the driver cannot tell whose
//! pages failed: it answers the batch "not covered", so each file
//! fdatasyncs (and reports its own error, poisoning exactly the damaged
//! partitions), and uses per-file flushes alone from then on, so every
//! partition that had unflushed bytes at the time is checked by its own
//! next fdatasync too.
//!
//! **Cost of syncfs.** It writes back every dirty page of the file system,
//! not just the batch's: on a broker's own data disk that is other
//! partitions' data, due within their flush interval anyway. On a disk
//! shared with other heavy writers it makes flushes wait for their data;
//! `syncfs_min_files = 0` turns it off.

use glommio::sync::Semaphore;
use std::cell::{Cell, RefCell};
use std::fs::File;
use std::future::{poll_fn, Future};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};

/// Counts of what a driver did, for the shard's metrics.
#[derive(Debug, Default)]
pub struct DriverStats {
    /// io_uring writes of segment bytes.
    pub writes: Cell<u64>,
    /// Files and directories asked to be made durable.
    pub syncs: Cell<u64>,
    /// Batches they were settled in.
    pub sync_batches: Cell<u64>,
    /// Batches made durable with one `syncfs`.
    pub syncfs_batches: Cell<u64>,
    /// Segment files closed early to stay within `segment_files_max`.
    pub files_evicted: Cell<u64>,
}

/// The broker's log writers writing at once on one shard.
///
/// Every other writer waits its turn, and meanwhile its partition's
/// appends join its pending chunks, so under load the writes grow instead
/// of multiplying: with no limit, 1,000 partitions written by 32 producers
/// made 40,000–44,000 writes of ~20 KB for 4,000,000 × 200 B, each handed
/// to an io_uring worker thread by ext4; with 4 slots, 11,000–25,000 and
/// 11 % more messages/s (design 0010). A lone partition never waits. More
/// slots than this buys nothing on this machine: a buffered write is a
/// copy into the page cache, and a shard has one core.
pub const WRITE_SLOTS: usize = 4;

/// How long an open waits for a segment file to become idle when the shard
/// is at its open-file limit: a few flush intervals of the default policy.
pub const FILE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// How a shard's driver flushes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverSettings {
    /// A directory on the file system the logs live on (the data directory):
    /// what `syncfs` is called on. `None`: never `syncfs`.
    pub syncfs_dir: Option<PathBuf>,
    /// Batches of at least this many files and directories are made durable
    /// with one `syncfs`; 0 = never.
    pub syncfs_min_files: usize,
    /// Log writers of the shard writing at once; 0 = no limit.
    pub write_slots: usize,
    /// Segment files the shard keeps open; past it, opening one first closes
    /// the least recently used idle ones (see [`Driver::set_evictor`]).
    /// 0 = no limit.
    pub segment_files_max: usize,
    /// Names the driver's threads: `<name>-sync`, `<name>-open`.
    pub name: String,
}

impl Default for DriverSettings {
    fn default() -> Self {
        DriverSettings {
            syncfs_dir: None,
            syncfs_min_files: 0,
            write_slots: 0,
            segment_files_max: 0,
            name: "disk".into(),
        }
    }
}

/// What a file's flush request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flushed {
    /// One `syncfs` made it durable, with the rest of its batch.
    ByFileSystem,
    /// The batch was too small for a `syncfs`, or the `syncfs` failed: the
    /// file must fdatasync itself.
    NotCovered,
}

/// One shard's disk driver (see the module doc). Not `Send`.
pub struct Driver {
    queue: RefCell<Vec<Queued>>,
    syncing: Cell<bool>,
    syncer: Lane<SyncJob, SyncResult>,
    opener: Lane<OpenJob, io::Result<File>>,
    /// Opened before anything is written through this driver.
    syncfs_dir: Option<Arc<File>>,
    syncfs_min_files: usize,
    /// A `syncfs` failed once: only per-file flushes from now on.
    syncfs_failed: Cell<bool>,
    /// Turns at the disk for the shard's log writers; `None`: unlimited.
    write_slots: Option<Rc<Semaphore>>,
    /// Segment files open through this driver now.
    files_open: Cell<usize>,
    files_max: usize,
    /// Closes up to n idle segment files of the shard; returns how many.
    evictor: RefCell<Option<Evictor>>,
    stats: DriverStats,
}

/// What [`Driver::set_evictor`] takes.
pub type Evictor = Box<dyn Fn(usize) -> usize>;

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("syncfs_min_files", &self.syncfs_min_files)
            .field("syncfs_failed", &self.syncfs_failed.get())
            .finish_non_exhaustive()
    }
}

/// A flush request waiting for its batch.
struct Queued {
    job: SyncJob,
    done: Rc<Slot<SyncResult>>,
}

/// A flush request as the syncer thread sees it: a file (it flushes itself
/// unless a syncfs covers it) or a directory (fsynced by the thread unless a
/// syncfs covers it).
enum SyncJob {
    File,
    Dir(PathBuf),
}

type SyncResult = io::Result<Flushed>;

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
            while let Ok((batch, dir, reply)) = incoming.recv() {
                let _ = reply.send(run(batch, dir));
            }
        })?;
        Ok(Lane { jobs })
    }

    /// Runs one batch on the lane's thread.
    async fn run(&self, batch: Vec<J>, dir: Option<Arc<File>>) -> Option<Vec<R>> {
        let (reply, results) = flume::bounded(1);
        self.jobs.send((batch, dir, reply)).ok()?;
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
    /// A driver with its threads; opens `settings.syncfs_dir` now, before
    /// anything is written on the shard.
    pub fn start(settings: &DriverSettings) -> io::Result<Rc<Driver>> {
        let syncfs_dir = match (&settings.syncfs_dir, settings.syncfs_min_files) {
            (Some(dir), n) if n > 0 => Some(Arc::new(File::open(dir)?)),
            _ => None,
        };
        Ok(Rc::new(Driver {
            queue: RefCell::default(),
            syncing: Cell::new(false),
            syncer: Lane::start(format!("{}-sync", settings.name), sync_batch)?,
            opener: Lane::start(format!("{}-open", settings.name), open_batch)?,
            syncfs_dir,
            syncfs_min_files: settings.syncfs_min_files,
            syncfs_failed: Cell::new(false),
            write_slots: match settings.write_slots {
                0 => None,
                n => Some(Rc::new(Semaphore::new(n as u64))),
            },
            files_open: Cell::new(0),
            files_max: settings.segment_files_max,
            evictor: RefCell::new(None),
            stats: DriverStats::default(),
        }))
    }

    /// What the driver did so far.
    pub fn stats(&self) -> &DriverStats {
        &self.stats
    }

    /// How the shard closes idle segment files when opening one would pass
    /// `segment_files_max`: the driver knows how many are open, the shard
    /// knows which are idle (flushed, held by no write or fetch).
    pub fn set_evictor(&self, evictor: Evictor) {
        *self.evictor.borrow_mut() = Some(evictor);
    }

    /// Called before a segment file is opened: at the limit, closes the
    /// least recently used idle files down to 7/8 of it (so the scan of the
    /// shard's logs is paid once per many opens, not once per open). When
    /// none is idle — every open file is being written, flushed or sent,
    /// or holds appends its next flush round will cover — waits for
    /// flushes to make some idle, up to [`FILE_WAIT`]; then the open goes
    /// ahead, and past RLIMIT_NOFILE fails like any transient storage error.
    pub async fn make_room_for_a_file(&self) {
        if self.files_max == 0 {
            return;
        }
        let started = std::time::Instant::now();
        while self.files_open.get() >= self.files_max {
            let excess = self.files_open.get() + 1 - self.files_max * 7 / 8;
            let closed = match self.evictor.borrow().as_ref() {
                Some(evict) => evict(excess),
                None => return,
            };
            bump(&self.stats.files_evicted, closed as u64);
            if closed > 0 || started.elapsed() >= FILE_WAIT {
                return;
            }
            glommio::timer::sleep(FILE_WAIT / 100).await;
        }
    }

    /// Counts a segment file opened through this driver.
    pub fn file_opened(&self) {
        self.files_open.set(self.files_open.get() + 1);
    }

    /// Counts a segment file closed.
    pub fn file_closed(&self) {
        self.files_open.set(self.files_open.get().saturating_sub(1));
    }

    /// Segment files open through this driver.
    pub fn files_open(&self) -> usize {
        self.files_open.get()
    }

    /// The most segment files it keeps open (0 = no limit).
    pub fn files_max(&self) -> usize {
        self.files_max
    }

    /// Waits for one of the shard's write slots.
    pub async fn write_slot(&self) -> WriteSlot {
        match &self.write_slots {
            // The semaphore is never closed, so acquiring only waits.
            Some(slots) => match slots.acquire_static_permit(1).await {
                Ok(permit) => WriteSlot::held(permit),
                Err(_) => WriteSlot::unlimited(),
            },
            None => WriteSlot::unlimited(),
        }
    }

    /// Counts io_uring writes of segment bytes (made by the files).
    pub fn count_writes(&self, n: usize) {
        bump(&self.stats.writes, n as u64);
    }

    /// Opens `path` for reading and writing (creating it with `create`) on
    /// the driver's open thread.
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

    /// Joins the shard's next flush batch for a file that has bytes written
    /// to flush: the answer says whether a `syncfs` made them durable or the
    /// file must fdatasync itself.
    pub async fn flush_file(self: &Rc<Self>) -> Flushed {
        // A file's request never fails: NotCovered sends it to its own
        // fdatasync, which reports its own errors.
        self.queue_sync(SyncJob::File)
            .await
            .unwrap_or(Flushed::NotCovered)
    }

    /// Makes the entries of `dir` durable, with the shard's next flush
    /// batch.
    pub async fn sync_dir(self: &Rc<Self>, dir: &Path) -> io::Result<()> {
        self.queue_sync(SyncJob::Dir(dir.to_path_buf()))
            .await
            .map(|_| ())
    }

    async fn queue_sync(self: &Rc<Self>, job: SyncJob) -> SyncResult {
        let done = Slot::new();
        self.queue.borrow_mut().push(Queued {
            job,
            done: done.clone(),
        });
        if !self.syncing.replace(true) {
            spawn(run_syncs(self.clone()));
        }
        done.wait().await
    }
}

fn bump(counter: &Cell<u64>, n: u64) {
    counter.set(counter.get().wrapping_add(n));
}

fn spawn(task: impl Future<Output = ()> + 'static) {
    glommio::spawn_local(task).detach();
}

/// Settles the queued flush requests, a batch at a time: what arrives while
/// one batch is on the syncer thread is the next batch (group commit).
async fn run_syncs(driver: Rc<Driver>) {
    // The other tasks of this turn of the reactor (every partition whose
    // flush came due on this tick) queue theirs first.
    futures_lite::future::yield_now().await;
    loop {
        let mut batch = std::mem::take(&mut *driver.queue.borrow_mut());
        if batch.is_empty() {
            driver.syncing.set(false);
            return;
        }
        bump(&driver.stats.syncs, batch.len() as u64);
        bump(&driver.stats.sync_batches, 1);
        let syncfs = driver
            .syncfs_dir
            .clone()
            .filter(|_| !driver.syncfs_failed.get() && batch.len() >= driver.syncfs_min_files);
        let files_only = batch.iter().all(|q| matches!(q.job, SyncJob::File));
        let results = if syncfs.is_none() && files_only {
            // Nothing for the thread to do: every file flushes itself.
            Some(batch.iter().map(|_| Ok(Flushed::NotCovered)).collect())
        } else {
            let jobs = batch
                .iter_mut()
                .map(|q| match &mut q.job {
                    SyncJob::File => SyncJob::File,
                    SyncJob::Dir(path) => SyncJob::Dir(std::mem::take(path)),
                })
                .collect();
            let used_syncfs = syncfs.is_some();
            let results = driver.syncer.run(jobs, syncfs).await;
            if used_syncfs {
                let covered = results
                    .as_ref()
                    .and_then(|r| r.first())
                    .is_some_and(|r| matches!(r, Ok(Flushed::ByFileSystem)));
                if covered {
                    bump(&driver.stats.syncfs_batches, 1);
                } else if !driver.syncfs_failed.replace(true) {
                    tracing::error!(
                        "syncfs reported a write-back error on the data directory's file system; \
                         flushing with one fdatasync per file from now on"
                    );
                }
            }
            results
        };
        let mut results = results.map(Vec::into_iter);
        for queued in batch {
            match results.as_mut().and_then(Iterator::next) {
                Some(result) => queued.done.fill(result),
                // The thread is gone (only at exit): each file flushes itself.
                None => queued.done.fill(match queued.job {
                    SyncJob::File => Ok(Flushed::NotCovered),
                    SyncJob::Dir(_) => Err(io::Error::other("the disk driver's syncer is gone")),
                }),
            }
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

/// The syncer thread's work: with `syncfs` set, one `syncfs` covers every
/// job; otherwise, or when it fails, directories are fsynced here and files
/// are told to flush themselves.
fn sync_batch(jobs: Vec<SyncJob>, syncfs: Option<Arc<File>>) -> Vec<SyncResult> {
    let covered = syncfs.is_some_and(|dir| {
        if crate::faults::Faults::get().syncfs_errno.is_some() {
            return false;
        }
        // SAFETY: a plain syscall on a descriptor `dir` keeps open.
        unsafe { libc::syncfs(dir.as_raw_fd()) == 0 }
    });
    jobs.into_iter()
        .map(|job| match job {
            _ if covered => Ok(Flushed::ByFileSystem),
            SyncJob::File => Ok(Flushed::NotCovered),
            SyncJob::Dir(path) => File::open(path)?.sync_all().map(|()| Flushed::NotCovered),
        })
        .collect()
}

/// A turn at a `DiskStorage` (see [`Driver::write_slot`]); it ends when
/// dropped.
#[derive(Debug)]
pub struct WriteSlot {
    _permit: Option<glommio::sync::StaticPermit>,
}

impl WriteSlot {
    /// A turn from storage that does not limit its writers.
    pub fn unlimited() -> WriteSlot {
        WriteSlot { _permit: None }
    }

    /// A turn held with `permit`.
    pub fn held(permit: glommio::sync::StaticPermit) -> WriteSlot {
        WriteSlot {
            _permit: Some(permit),
        }
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

    /// No more writers hold a turn at once than the driver has slots, the
    /// others wait and all get theirs; with no limit, nobody waits.
    #[test]
    fn writers_take_turns_within_the_slots() {
        for (slots, expected) in [(2, 2), (0, 6)] {
            run(move || async move {
                let driver = Driver::start(&DriverSettings {
                    write_slots: slots,
                    ..DriverSettings::default()
                })
                .unwrap();
                let active = Rc::new(Cell::new(0usize));
                let most = Rc::new(Cell::new(0usize));
                let writers: Vec<_> = (0..6)
                    .map(|_| {
                        let (driver, active, most) = (driver.clone(), active.clone(), most.clone());
                        glommio::spawn_local(async move {
                            let _slot = driver.write_slot().await;
                            active.set(active.get() + 1);
                            most.set(most.get().max(active.get()));
                            glommio::timer::sleep(std::time::Duration::from_millis(5)).await;
                            active.set(active.get() - 1);
                        })
                    })
                    .collect();
                for writer in writers {
                    writer.await;
                }
                assert_eq!(most.get(), expected, "{slots} slots");
                assert_eq!(active.get(), 0);
            });
        }
    }

    /// Flushes asked for in one turn are one batch; a batch of enough files
    /// is one syncfs that covers them all, a smaller one leaves each file to
    /// its own fdatasync, and directories are synced either way.
    #[test]
    fn one_turn_of_flushes_is_one_batch_and_a_large_one_is_one_syncfs() {
        let dir = temp_dir("batch");
        run(move || async move {
            let driver = Driver::start(&DriverSettings {
                syncfs_dir: Some(dir.clone()),
                syncfs_min_files: 4,
                write_slots: 0,
                segment_files_max: 0,
                name: "test".into(),
            })
            .unwrap();
            let flushes: Vec<_> = (0..8)
                .map(|_| {
                    let driver = driver.clone();
                    glommio::spawn_local(async move { driver.flush_file().await })
                })
                .collect();
            for flush in flushes {
                assert_eq!(flush.await, Flushed::ByFileSystem);
            }
            assert_eq!(driver.stats().syncs.get(), 8);
            assert_eq!(driver.stats().sync_batches.get(), 1);
            assert_eq!(driver.stats().syncfs_batches.get(), 1);
            // Below the threshold: the file flushes itself, the directory is
            // fsynced by the thread, no syncfs.
            assert_eq!(driver.flush_file().await, Flushed::NotCovered);
            driver.sync_dir(&dir).await.unwrap();
            assert!(driver.sync_dir(&dir.join("missing")).await.is_err());
            assert_eq!(driver.stats().sync_batches.get(), 4);
            assert_eq!(driver.stats().syncfs_batches.get(), 1);
            std::fs::remove_dir_all(&dir).unwrap();
        });
    }

    /// A lane's answer is never lost, even when the waiting task is polled
    /// again while the thread sends it and drops its end of the reply
    /// channel: flume 0.10's `recv_async` could then report the channel
    /// disconnected and drop the answer (zesterer/flume#120), which made a
    /// fetch fail with "the disk driver's open thread is gone" (CI, stop 17).
    #[test]
    fn a_lane_never_loses_an_answer_to_a_task_polled_while_it_is_sent() {
        run(|| async {
            let lane = Lane::start("test-lane".into(), |jobs: Vec<u32>, _| jobs).unwrap();
            for i in 0..200_000u32 {
                // A second future that wakes the task at every poll, so the
                // reply is polled for over and over while the thread works.
                let spin = async {
                    loop {
                        futures_lite::future::yield_now().await;
                    }
                };
                let answer = futures_lite::future::or(lane.run(vec![i], None), spin).await;
                assert_eq!(answer, Some(vec![i]), "round {i}: the answer was lost");
            }
        });
    }

    /// Files open on the driver's thread, created only when asked.
    #[test]
    fn files_open_on_the_open_thread_and_are_created_only_when_asked() {
        let dir = temp_dir("open");
        run(move || async move {
            let driver = Driver::start(&DriverSettings::default()).unwrap();
            let path = dir.join("00000000000000000000.log");
            let missing = driver.open(&path, false).await.unwrap_err();
            assert_eq!(missing.kind(), io::ErrorKind::NotFound);
            let file = driver.open(&path, true).await.unwrap();
            std::os::unix::fs::FileExt::write_all_at(&file, b"abc", 0).unwrap();
            drop(file);
            assert_eq!(std::fs::read(&path).unwrap(), b"abc");
            // Opening again keeps the bytes (no truncation).
            drop(driver.open(&path, true).await.unwrap());
            assert_eq!(std::fs::read(&path).unwrap(), b"abc");
            std::fs::remove_dir_all(&dir).unwrap();
        });
    }
}
