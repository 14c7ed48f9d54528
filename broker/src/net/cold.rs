//! Fetches of bytes that are not in the page cache, without blocking the
//! shard.
//!
//! `sendfile` reads a page-cache miss from the disk synchronously, on the
//! calling thread: on a shard's reactor that stops every other connection
//! of the shard for a disk read. So before each piece of a fetch the range
//! is checked with `cachestat(2)` (Linux 6.5+; a count of cached pages, no
//! copy, never blocks). A resident piece goes out with `sendfile`, zero
//! copy. A piece that is not is first read into the page cache on glommio's
//! blocking thread pool (`pread` into a scratch buffer that thread reuses),
//! while the reactor serves the other connections, and then goes out with
//! `sendfile` too: no copy reaches the socket and no buffer is held per
//! connection, so a client that reads slowly pins no memory. (Pages evicted
//! again in between would make that sendfile read them; under such memory
//! pressure that is rare and short.) The blocking thread also
//! asks the kernel to read [`READ_AHEAD_BYTES`] beyond it
//! (`POSIX_FADV_WILLNEED`, asynchronous), so a consumer catching up from
//! disk finds its next fetches in the cache and keeps the disk busy ahead
//! of it. A resident piece whose read-ahead window ends in uncached pages
//! starts the next window the same way, in the background.
//!
//! Bytes sent each way are counted: `fetch_zero_copy_bytes_total`,
//! `fetch_cold_bytes_total`.

use crate::faults::Faults;
use std::cell::Cell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// How far beyond a cold piece the kernel is asked to read.
pub const READ_AHEAD_BYTES: u64 = 16 * 1024 * 1024;

/// The largest piece checked and sent at once.
pub const PIECE_BYTES: usize = 1024 * 1024;

/// Background read-aheads a shard keeps in flight at most.
const READ_AHEADS_MAX: u32 = 4;

const PAGE: u64 = 4096;

/// cachestat(2)'s number: the same on every architecture (the unified
/// syscall table since Linux 6.5); the libc crate does not name it on
/// x86_64 yet.
const SYS_CACHESTAT: libc::c_long = 451;

thread_local! {
    /// Read-aheads started by this shard and not finished.
    static READ_AHEADS: Cell<u32> = const { Cell::new(0) };
    /// `cachestat` is missing (kernel older than 6.5): every read is
    /// treated as resident, as before this module.
    static NO_CACHESTAT: Cell<bool> = const { Cell::new(false) };
}

#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// True when every page of `[position, position + len)` is in the page
/// cache (or residency cannot be told).
pub fn resident(file: RawFd, position: u64, len: usize) -> bool {
    if len == 0 || NO_CACHESTAT.with(Cell::get) {
        return true;
    }
    let first = position / PAGE;
    let last = (position + len as u64 - 1) / PAGE;
    let range = CachestatRange {
        off: first * PAGE,
        len: (last - first + 1) * PAGE,
    };
    let mut stat = Cachestat::default();
    // SAFETY: cachestat reads `range` and writes `stat`, both valid for the
    // call; `file` is open.
    let result = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file,
            &range as *const CachestatRange,
            &mut stat as *mut Cachestat,
            0u32,
        )
    };
    if result != 0 {
        if io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
            tracing::warn!("cachestat(2) is not available (Linux < 6.5): page-cache misses on fetch will block their shard");
            NO_CACHESTAT.with(|c| c.set(true));
        }
        return true;
    }
    let pages = last - first + 1;
    stat.nr_cache >= pages
}

fn duplicate(file: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: dup of an open descriptor; the new one is owned by the result.
    let fd = unsafe { libc::fcntl(file, libc::F_DUPFD_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn will_need(file: RawFd, position: u64, len: u64) {
    // SAFETY: advice on an open descriptor; no memory is passed. Failure
    // only loses the read-ahead.
    unsafe {
        libc::posix_fadvise(
            file,
            position as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_WILLNEED,
        )
    };
}

/// Brings `[position, position + len)` of `file` into the page cache on the
/// blocking thread pool (a `pread` into that thread's scratch buffer, then
/// thrown away) and starts the kernel's read of the [`READ_AHEAD_BYTES`]
/// after it. Returns the bytes read (fewer at the end of the file). The
/// caller then sends the range with sendfile, still without a copy: no
/// buffer is held per connection, however slowly its client reads.
pub async fn load(file: RawFd, position: u64, len: usize) -> io::Result<usize> {
    thread_local! {
        /// The blocking thread's read buffer, reused for every cold read.
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let fd = duplicate(file)?;
    let delay = Faults::get().cold_read_delay;
    glommio::executor()
        .spawn_blocking(move || {
            if let Some(delay) = delay {
                std::thread::sleep(delay);
            }
            will_need(fd.as_raw_fd(), position + len as u64, READ_AHEAD_BYTES);
            SCRATCH.with(|scratch| {
                let mut buf = scratch.borrow_mut();
                buf.resize(len.min(PIECE_BYTES), 0);
                let mut done = 0;
                while done < len {
                    let want = (len - done).min(buf.len());
                    // SAFETY: the destination is `buf`, valid for `want`
                    // bytes; `fd` is open.
                    let n = unsafe {
                        libc::pread(
                            fd.as_raw_fd(),
                            buf.as_mut_ptr().cast(),
                            want,
                            (position + done as u64) as libc::off_t,
                        )
                    };
                    match n {
                        0 => break,
                        n if n > 0 => done += n as usize,
                        _ => {
                            let error = io::Error::last_os_error();
                            if error.kind() != io::ErrorKind::Interrupted {
                                return Err(error);
                            }
                        }
                    }
                }
                Ok(done)
            })
        })
        .await
}

/// Starts the next read-ahead window in the background when the current
/// one's last page is not cached: a consumer reading from the cache keeps
/// the disk busy ahead of it. At most `READ_AHEADS_MAX` (4) per shard.
pub fn read_ahead_if_needed(file: RawFd, next: u64) {
    let window_end = next + READ_AHEAD_BYTES - PAGE;
    if resident(file, window_end, 1) || READ_AHEADS.with(Cell::get) >= READ_AHEADS_MAX {
        return;
    }
    let Ok(fd) = duplicate(file) else {
        return;
    };
    READ_AHEADS.with(|c| c.set(c.get() + 1));
    glommio::spawn_local(async move {
        glommio::executor()
            .spawn_blocking(move || will_need(fd.as_raw_fd(), next, READ_AHEAD_BYTES))
            .await;
        READ_AHEADS.with(|c| c.set(c.get() - 1));
    })
    .detach();
}
