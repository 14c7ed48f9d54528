//! An in-memory disk for tests of the log: [`MemoryStorage`].
//!
//! It keeps, per file, what a process sees (`data`) and what survives a power
//! cut (`synced`, set by fdatasync), and, per directory, which entries a
//! directory sync made durable. [`MemoryStorage::crash`] then does what a
//! `kill -9` (nothing on "disk" changes) or a power cut (unsynced bytes and
//! unsynced directory entries are lost, the unsynced tail may be torn,
//! zero-filled or flipped) would do, and a new log opened on the same storage
//! recovers from what is left.
//!
//! There is no reactor: tasks the log spawns wait in a queue until the test
//! polls them ([`MemoryStorage::poll_task`], [`MemoryStorage::run_until_idle`],
//! [`MemoryStorage::block_on`]). Every file operation yields once before it
//! acts, so a test can interleave appends, flushes and crashes at every await
//! point of the writer and the flush rounds.
//!
//! Simplifications, on purpose: directories are durable as soon as they are
//! created; a rename or unlink is durable only after [`Storage::sync_dir`].

use super::io::{DirEntry, SegmentFile, Storage};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

type Task = Pin<Box<dyn Future<Output = ()>>>;

/// Polls of a queue without progress after which [`MemoryStorage`] says the
/// log is stuck (a task waiting for something that will never happen).
const POLLS_MAX: usize = 100_000;
/// Polls after which pending tasks are taken to wait for time.
const SLEEP_CHECK_POLLS: usize = 1_000;

/// What a power cut does to the bytes written but not fdatasynced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PowerCut {
    /// How much of each file's unsynced tail reached the platter anyway, in
    /// thousandths (a prefix of it, as written).
    pub kept_per_mille: u16,
    /// What the kept part of the `torn` file's tail looks like.
    pub tail: Tail,
    /// The file whose unsynced tail is damaged as `tail` says (the one being
    /// appended to when the power went).
    pub torn: Option<PathBuf>,
}

/// The state of the unsynced bytes that survive a power cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// As written.
    Intact,
    /// Zeros (the file grew, the data blocks did not arrive).
    Zeroed,
    /// One byte in the middle flipped.
    Flipped,
}

/// Faults the next operations meet.
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryFaults {
    /// The next segment write fails with this errno.
    pub write_errno: Option<i32>,
    /// The next fdatasync fails with this errno.
    pub fdatasync_errno: Option<i32>,
}

#[derive(Debug, Default)]
struct Inode {
    data: Vec<u8>,
    synced: Vec<u8>,
    modified_ms: u64,
}

#[derive(Debug, Default)]
struct Fs {
    inodes: HashMap<u64, Inode>,
    next_inode: u64,
    names: BTreeMap<PathBuf, u64>,
    durable_names: BTreeMap<PathBuf, u64>,
    dirs: Vec<PathBuf>,
    faults: MemoryFaults,
}

impl Fs {
    fn inode(&self, path: &Path) -> io::Result<u64> {
        self.names.get(path).copied().ok_or_else(|| not_found(path))
    }

    fn create(&mut self, path: &Path) -> io::Result<u64> {
        let parent = path.parent().unwrap_or(Path::new(""));
        if !self.dirs.iter().any(|d| d == parent) {
            return Err(not_found(parent));
        }
        self.next_inode += 1;
        let inode = self.next_inode;
        self.inodes.insert(
            inode,
            Inode {
                modified_ms: super::io::now_ms(),
                ..Inode::default()
            },
        );
        self.names.insert(path.to_path_buf(), inode);
        Ok(inode)
    }

    fn data(&mut self, inode: u64) -> &mut Inode {
        self.inodes.entry(inode).or_default()
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file", path.display()),
    )
}

/// The in-memory disk. Clones share it (a "restarted" log opens the same).
#[derive(Clone, Default)]
pub struct MemoryStorage {
    fs: Rc<RefCell<Fs>>,
    tasks: Rc<RefCell<Vec<Task>>>,
    /// A writer holds the disk's one write slot.
    writing: Rc<Cell<bool>>,
    /// The disk's clock: how far it is past its start.
    clock: Rc<Cell<Duration>>,
    /// The deadlines of the sleeps pending now.
    sleepers: Rc<RefCell<Vec<Duration>>>,
}

/// Where every memory disk's clock starts (any instant will do; one for
/// all keeps clones and restarts on one timeline).
fn clock_base() -> Instant {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// The turn of a [`MemoryStorage`]'s writer; released when dropped.
#[derive(Debug)]
pub struct MemorySlot(Rc<Cell<bool>>);

impl Drop for MemorySlot {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

impl std::fmt::Debug for MemoryStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStorage")
            .field("files", &self.fs.borrow().names.len())
            .field("tasks", &self.tasks.borrow().len())
            .finish()
    }
}

impl MemoryStorage {
    /// An empty disk.
    pub fn new() -> Self {
        MemoryStorage::default()
    }

    /// Sets the faults the next operations meet (each fires once).
    pub fn set_faults(&self, faults: MemoryFaults) {
        self.fs.borrow_mut().faults = faults;
    }

    /// Moves the disk's clock forward by `by`: sleeps due by then end.
    pub fn advance(&self, by: Duration) {
        self.clock.set(self.clock.get() + by);
    }

    /// Moves the clock to the earliest pending sleep's deadline, if any is
    /// ahead of it: the tasks left are all waiting for time to pass.
    fn advance_to_next_sleeper(&self) -> bool {
        let next = self.sleepers.borrow().iter().copied().min();
        match next {
            Some(deadline) if deadline > self.clock.get() => {
                self.clock.set(deadline);
                true
            }
            _ => false,
        }
    }

    /// Tasks spawned and not finished.
    pub fn tasks(&self) -> usize {
        self.tasks.borrow().len()
    }

    /// Polls the task at `index` (modulo the number of tasks) once; true if
    /// there was one.
    pub fn poll_task(&self, index: usize) -> bool {
        let mut task = {
            let mut tasks = self.tasks.borrow_mut();
            if tasks.is_empty() {
                return false;
            }
            let index = index % tasks.len();
            tasks.swap_remove(index)
        };
        let mut cx = Context::from_waker(Waker::noop());
        if task.as_mut().poll(&mut cx).is_pending() {
            self.tasks.borrow_mut().push(task);
        }
        true
    }

    /// Polls every task until none is left.
    ///
    /// # Panics
    /// If they do not finish (a task of the log waits for ever).
    pub fn run_until_idle(&self) {
        for polls in 1..=POLLS_MAX {
            if !self.poll_task(0) {
                return;
            }
            // Tasks still there after many polls may all be asleep: let
            // time pass to the first deadline, as an idle machine would.
            if polls % SLEEP_CHECK_POLLS == 0 {
                self.advance_to_next_sleeper();
            }
        }
        panic!("the log's tasks did not finish: {self:?}");
    }

    /// Runs `future` to completion, polling the spawned tasks while it waits.
    ///
    /// # Panics
    /// If it cannot complete.
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        let mut future = std::pin::pin!(future);
        let mut cx = Context::from_waker(Waker::noop());
        for polls in 1..=POLLS_MAX {
            if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
                return out;
            }
            self.poll_task(0);
            if polls % SLEEP_CHECK_POLLS == 0 {
                self.advance_to_next_sleeper();
            }
        }
        panic!("a future on the memory disk never completed: {self:?}");
    }

    /// The process dies: its tasks vanish. With a `power` cut, so does what
    /// was not made durable. The caller drops its logs first.
    pub fn crash(&self, power: Option<PowerCut>) {
        self.tasks.borrow_mut().clear();
        self.sleepers.borrow_mut().clear();
        let mut fs = self.fs.borrow_mut();
        // Injected faults belong to the process that met them.
        fs.faults = MemoryFaults::default();
        let Some(cut) = power else { return };
        let torn = cut.torn.as_ref().and_then(|p| fs.names.get(p).copied());
        fs.names = fs.durable_names.clone();
        let live: Vec<u64> = fs.names.values().copied().collect();
        fs.inodes.retain(|inode, _| live.contains(inode));
        for (number, inode) in fs.inodes.iter_mut() {
            let grown =
                inode.data.len() > inode.synced.len() && inode.data.starts_with(&inode.synced);
            if !grown {
                if inode.data.len() >= inode.synced.len() {
                    // Rewritten in place (the recovery point): the new bytes
                    // reached the platter up to some point and the old ones
                    // remain after it — old, new or a mix.
                    let reached =
                        inode.data.len() * usize::from(cut.kept_per_mille.min(1000)) / 1000;
                    if reached < inode.synced.len() {
                        let old = inode.synced[reached..].to_vec();
                        inode.data.truncate(reached);
                        inode.data.extend_from_slice(&old);
                    } else {
                        inode.data.truncate(reached);
                    }
                } else {
                    inode.data = inode.synced.clone();
                }
                inode.synced = inode.data.clone();
                continue;
            }
            let unsynced = inode.data.len() - inode.synced.len();
            let kept = unsynced * usize::from(cut.kept_per_mille.min(1000)) / 1000;
            let from = inode.synced.len();
            inode.data.truncate(from + kept);
            match cut.tail {
                _ if torn != Some(*number) => {}
                Tail::Intact => {}
                Tail::Zeroed => inode.data[from..].fill(0),
                Tail::Flipped if kept > 0 => inode.data[from + kept / 2] ^= 0xff,
                Tail::Flipped => {}
            }
            inode.synced = inode.data.clone();
        }
    }

    /// The bytes of a file as a process sees them (tests damage them with
    /// [`Self::overwrite`]).
    pub fn contents(&self, path: &Path) -> io::Result<Vec<u8>> {
        let fs = self.fs.borrow();
        let inode = fs.inode(path)?;
        Ok(fs
            .inodes
            .get(&inode)
            .map(|i| i.data.clone())
            .unwrap_or_default())
    }

    /// Replaces bytes of a file, durably (damage on the platter).
    pub fn overwrite(&self, path: &Path, position: usize, bytes: &[u8]) -> io::Result<()> {
        let mut fs = self.fs.borrow_mut();
        let inode = fs.inode(path)?;
        let file = fs.data(inode);
        let end = position + bytes.len();
        if file.data.len() < end {
            file.data.resize(end, 0);
        }
        file.data[position..end].copy_from_slice(bytes);
        file.synced = file.data.clone();
        Ok(())
    }

    fn fault(&self, pick: impl FnOnce(&mut MemoryFaults) -> Option<i32>) -> io::Result<()> {
        match pick(&mut self.fs.borrow_mut().faults) {
            Some(errno) => Err(io::Error::from_raw_os_error(errno)),
            None => Ok(()),
        }
    }
}

/// A future that is pending once, then ready: the await point where a test
/// may run something else.
async fn yield_once() {
    let mut yielded = false;
    std::future::poll_fn(|_| {
        if std::mem::replace(&mut yielded, true) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
}

/// An open file of a [`MemoryStorage`]; follows its inode across renames.
#[derive(Debug)]
pub struct MemoryFile {
    storage: MemoryStorage,
    inode: u64,
    path: PathBuf,
}

impl SegmentFile for MemoryFile {
    async fn write_at(&self, buffers: Vec<Vec<u8>>, position: u64) -> io::Result<usize> {
        yield_once().await;
        let bytes = buffers.concat();
        self.storage.fault(|f| f.write_errno.take())?;
        let mut fs = self.storage.fs.borrow_mut();
        let file = fs.data(self.inode);
        let start = position as usize;
        let end = start + bytes.len();
        if file.data.len() < end {
            file.data.resize(end, 0);
        }
        file.data[start..end].copy_from_slice(&bytes);
        file.modified_ms = super::io::now_ms();
        Ok(bytes.len())
    }

    async fn read_at(&self, position: u64, len: usize) -> io::Result<Vec<u8>> {
        yield_once().await;
        let mut fs = self.storage.fs.borrow_mut();
        let data = &fs.data(self.inode).data;
        let start = (position as usize).min(data.len());
        let end = (start + len).min(data.len());
        Ok(data[start..end].to_vec())
    }

    async fn fdatasync(&self) -> io::Result<()> {
        yield_once().await;
        self.storage.fault(|f| f.fdatasync_errno.take())?;
        let mut fs = self.storage.fs.borrow_mut();
        let file = fs.data(self.inode);
        file.synced = file.data.clone();
        Ok(())
    }

    fn path(&self) -> PathBuf {
        self.path.clone()
    }
}

impl Storage for MemoryStorage {
    type File = MemoryFile;

    async fn open(&self, path: &Path, create: bool) -> io::Result<MemoryFile> {
        yield_once().await;
        let mut fs = self.fs.borrow_mut();
        let inode = match fs.inode(path) {
            Ok(inode) => inode,
            Err(_) if create => fs.create(path)?,
            Err(e) => return Err(e),
        };
        Ok(MemoryFile {
            storage: self.clone(),
            inode,
            path: path.to_path_buf(),
        })
    }

    fn spawn(&self, task: impl Future<Output = ()> + 'static) {
        self.tasks.borrow_mut().push(Box::pin(task));
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut fs = self.fs.borrow_mut();
        for ancestor in dir.ancestors() {
            if !fs.dirs.iter().any(|d| d == ancestor) {
                fs.dirs.push(ancestor.to_path_buf());
            }
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        let fs = self.fs.borrow();
        if !fs.dirs.iter().any(|d| d == dir) {
            return Err(not_found(dir));
        }
        Ok(fs
            .names
            .iter()
            .filter(|(path, _)| path.parent() == Some(dir))
            .map(|(path, inode)| {
                let file = fs.inodes.get(inode);
                DirEntry {
                    name: path
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    len: file.map_or(0, |f| f.data.len() as u64),
                    modified_ms: file.map_or(0, |f| f.modified_ms),
                }
            })
            .collect())
    }

    fn read_at(&self, path: &Path, position: u64, buf: &mut [u8]) -> io::Result<usize> {
        let fs = self.fs.borrow();
        let inode = fs.inode(path)?;
        let data = fs.inodes.get(&inode).map_or(&[][..], |f| &f.data[..]);
        let start = (position as usize).min(data.len());
        let n = buf.len().min(data.len() - start);
        buf[..n].copy_from_slice(&data[start..start + n]);
        Ok(n)
    }

    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.contents(path)
    }

    fn overwrite_file(&self, path: &Path, bytes: &[u8], durable: bool) -> io::Result<()> {
        let mut fs = self.fs.borrow_mut();
        let inode = match fs.inode(path) {
            Ok(inode) => inode,
            Err(_) => fs.create(path)?,
        };
        let file = fs.data(inode);
        if file.data.len() < bytes.len() {
            file.data.resize(bytes.len(), 0);
        }
        file.data[..bytes.len()].copy_from_slice(bytes);
        if durable {
            file.synced = file.data.clone();
        }
        Ok(())
    }

    fn truncate(&self, path: &Path, len: u64, durable: bool) -> io::Result<()> {
        let mut fs = self.fs.borrow_mut();
        let inode = fs.inode(path)?;
        let file = fs.data(inode);
        file.data.resize(len as usize, 0);
        if durable {
            file.synced = file.data.clone();
        }
        Ok(())
    }

    fn len(&self, path: &Path) -> io::Result<u64> {
        let fs = self.fs.borrow();
        let inode = fs.inode(path)?;
        Ok(fs.inodes.get(&inode).map_or(0, |f| f.data.len() as u64))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut fs = self.fs.borrow_mut();
        let inode = fs.names.remove(from).ok_or_else(|| not_found(from))?;
        fs.names.insert(to.to_path_buf(), inode);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut fs = self.fs.borrow_mut();
        fs.names
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| not_found(path))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut fs = self.fs.borrow_mut();
        let in_dir = |path: &PathBuf| path.parent() == Some(dir);
        fs.durable_names.retain(|path, _| !in_dir(path));
        let now: Vec<(PathBuf, u64)> = fs
            .names
            .iter()
            .filter(|(path, _)| in_dir(path))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        fs.durable_names.extend(now);
        Ok(())
    }

    async fn flush_dir(&self, dir: &Path) -> io::Result<()> {
        yield_once().await;
        self.sync_dir(dir)
    }

    type Slot = MemorySlot;

    /// One writer at a time over all the logs on this disk, so the model
    /// test meets appends that gather while their writer waits its turn.
    async fn write_slot(&self) -> MemorySlot {
        loop {
            if !self.writing.replace(true) {
                return MemorySlot(self.writing.clone());
            }
            yield_once().await;
        }
    }

    fn now(&self) -> Instant {
        clock_base() + self.clock.get()
    }

    /// 14 November 2023 at the clock's start (any fixed time would do).
    fn time_ms(&self) -> u64 {
        1_700_000_000_000 + self.clock.get().as_millis() as u64
    }

    /// Pending until the test moves the clock past the deadline
    /// ([`MemoryStorage::advance`]), or every other task is done.
    async fn sleep(&self, delay: Duration) {
        let deadline = self.clock.get() + delay;
        self.sleepers.borrow_mut().push(deadline);
        std::future::poll_fn(|_| {
            if self.clock.get() >= deadline {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
        let mut sleepers = self.sleepers.borrow_mut();
        if let Some(i) = sleepers.iter().position(|d| *d == deadline) {
            sleepers.swap_remove(i);
        }
    }
}
