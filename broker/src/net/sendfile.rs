//! The zero-copy fetch path: segment bytes go from the file to the socket
//! with `sendfile(2)`, on the shard that owns the connection, without ever
//! entering a userspace buffer.
//!
//! glommio's sockets are in blocking mode (it uses `MSG_DONTWAIT` and
//! io_uring polls), so a plain `sendfile` would block the whole shard when
//! the socket buffer is full. Connections are therefore switched to
//! `O_NONBLOCK` when accepted — glommio's own reads and writes behave the
//! same either way — and `sendfile` returns `EAGAIN` instead of blocking.
//! glommio exposes no public "wait until writable", so on `EAGAIN` the next
//! few KiB ([`SENDFILE_FALLBACK_BYTES`]) are read with `pread` and written
//! through glommio's async write, which parks the task on an io_uring poll
//! until the socket drains. Other connections on the shard keep running.
//!
//! Copies per path: sendfile — none in userspace (page cache → socket);
//! fallback — one small copy per full-socket event, counted in
//! `fetch_copied_bytes_total` next to `fetch_zero_copy_bytes_total`.
//! sendfile would read a page-cache miss from disk synchronously, stopping
//! the shard: `cold.rs` checks residency first and reads misses off the
//! shard's thread.

use crate::limits::SENDFILE_FALLBACK_BYTES;
use crate::metrics::{bump, ShardMetrics};
use std::io;
use std::os::fd::RawFd;

/// Puts a socket in non-blocking mode.
pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The outcome of one non-blocking attempt.
pub enum Sent {
    /// This many bytes went out.
    Bytes(usize),
    /// The socket is full.
    WouldBlock,
}

/// One `sendfile` call from `file` at `position` to a non-blocking socket.
pub fn sendfile_once(socket: RawFd, file: RawFd, position: u64, len: usize) -> io::Result<Sent> {
    let mut offset = position as libc::off_t;
    loop {
        // SAFETY: both descriptors are open for the duration of the call and
        // `offset` is a valid, exclusive pointer.
        let n = unsafe { libc::sendfile(socket, file, &mut offset, len) };
        if n >= 0 {
            return Ok(Sent::Bytes(n as usize));
        }
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => return Ok(Sent::WouldBlock),
            _ => return Err(error),
        }
    }
}

/// Reads the fallback piece at `position` (at most [`SENDFILE_FALLBACK_BYTES`]).
/// Never blocks on the disk: callers made the range resident first.
pub fn read_fallback_piece(file: RawFd, position: u64, len: usize) -> io::Result<Vec<u8>> {
    pread(file, position, len.min(SENDFILE_FALLBACK_BYTES))
}

/// Reads up to `len` bytes of `file` at `position` (fewer at its end).
pub fn pread(file: RawFd, position: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    loop {
        // SAFETY: `buf` is valid for `buf.len()` bytes and `file` is open.
        let n = unsafe {
            libc::pread(
                file,
                buf.as_mut_ptr().cast(),
                buf.len(),
                position as libc::off_t,
            )
        };
        if n >= 0 {
            buf.truncate(n as usize);
            return Ok(buf);
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EINTR) {
            return Err(error);
        }
    }
}

/// Counts bytes sent by each path.
pub fn count(metrics: &ShardMetrics, zero_copy: usize, copied: usize) {
    bump(
        &metrics.counters.fetch_zero_copy_bytes_total,
        zero_copy as u64,
    );
    bump(&metrics.counters.fetch_copied_bytes_total, copied as u64);
    bump(
        &metrics.counters.fetch_bytes_total,
        (zero_copy + copied) as u64,
    );
}
