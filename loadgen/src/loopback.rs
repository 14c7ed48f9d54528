//! The ceiling for a consumer on this host: how fast `sendfile` moves a
//! cached file through a loopback TCP connection to a reader, with no
//! broker and no parsing. `loadgen loopback` prints it so a consume run can
//! be read as a share of it.

use anyhow::Context;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Instant;

/// Bytes per second of one sendfile transfer of `bytes` over loopback
/// (the file is written first, so it is in the page cache).
pub fn sendfile_bandwidth(bytes: u64) -> anyhow::Result<f64> {
    let path = std::env::temp_dir().join(format!("ringlog-loopback-{}", std::process::id()));
    let result = transfer(&path, bytes);
    let _ = std::fs::remove_file(&path);
    result
}

fn transfer(path: &std::path::Path, bytes: u64) -> anyhow::Result<f64> {
    {
        let mut file = std::fs::File::create(path).context("creating the loopback file")?;
        let block = vec![0x5au8; 1 << 20];
        let mut left = bytes;
        while left > 0 {
            let n = left.min(block.len() as u64) as usize;
            file.write_all(&block[..n])?;
            left -= n as u64;
        }
    }
    let file = std::fs::File::open(path)?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let address = listener.local_addr()?;
    let reader = std::thread::spawn(move || -> std::io::Result<u64> {
        let (mut socket, _) = listener.accept()?;
        // The consumer's read buffer size.
        let mut buf = vec![0u8; 256 * 1024];
        let mut total = 0u64;
        loop {
            match socket.read(&mut buf)? {
                0 => return Ok(total),
                n => total += n as u64,
            }
        }
    });
    let socket = TcpStream::connect(address)?;
    let started = Instant::now();
    let mut offset: libc::off_t = 0;
    while (offset as u64) < bytes {
        let left = (bytes - offset as u64).min(1 << 30) as usize;
        // SAFETY: both descriptors are open; `offset` is a valid pointer.
        let n = unsafe { libc::sendfile(socket.as_raw_fd(), file.as_raw_fd(), &mut offset, left) };
        if n < 0 {
            let error = std::io::Error::last_os_error();
            if error.kind() != std::io::ErrorKind::Interrupted {
                return Err(error.into());
            }
        } else if n == 0 {
            anyhow::bail!("the loopback file ended early");
        }
    }
    socket.shutdown(std::net::Shutdown::Write)?;
    let received = reader
        .join()
        .map_err(|_| anyhow::anyhow!("the loopback reader panicked"))??;
    let elapsed = started.elapsed().as_secs_f64();
    anyhow::ensure!(received == bytes, "received {received} of {bytes} bytes");
    Ok(bytes as f64 / elapsed)
}
