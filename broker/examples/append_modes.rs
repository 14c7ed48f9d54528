//! Measures the two ways a shard can append to a segment through io_uring:
//! buffered writes (page cache, glommio `BufferedFile`) and O_DIRECT writes
//! (glommio `DmaFile`), then how long reading the same bytes back takes —
//! what a tailing consumer's fetch would pay. Decision and numbers:
//! `broker/docs/design/0001-buffered-appends.md`.
//!
//! `cargo run --release -p ringlog-broker --example append_modes [DIR] [MIB]`

// A measurement program: any I/O failure should stop it loudly.
#![allow(clippy::expect_used)]

use glommio::io::{BufferedFile, DmaFile, OpenOptions};
use glommio::{LocalExecutorBuilder, Placement};
use std::time::Instant;

const CHUNK: usize = 1 << 20;

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().unwrap_or_else(|| "/tmp".into()));
    let mib: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(512);
    LocalExecutorBuilder::new(Placement::Fixed(0))
        .io_memory(4 << 20)
        .spawn(move || async move {
            let payload: Vec<u8> = (0..CHUNK).map(|i| (i % 251) as u8).collect();
            let path = dir.join("ringlog-append-buffered.bench");
            let file: BufferedFile = options().buffered_open(&path).await.expect("create");
            let started = Instant::now();
            for i in 0..mib {
                file.write_at(payload.clone(), (i * CHUNK) as u64)
                    .await
                    .expect("write");
            }
            let written = started.elapsed();
            file.fdatasync().await.expect("fdatasync");
            let synced = started.elapsed();
            let read = read_through_page_cache(&path, mib);
            report("buffered", mib, written, synced, read);
            file.remove().await.expect("remove");

            let path = dir.join("ringlog-append-direct.bench");
            let file: DmaFile = options().dma_open(&path).await.expect("create");
            let started = Instant::now();
            for i in 0..mib {
                let mut buf = file.alloc_dma_buffer(CHUNK);
                buf.as_bytes_mut().copy_from_slice(&payload);
                file.write_at(buf, (i * CHUNK) as u64).await.expect("write");
            }
            let written = started.elapsed();
            file.fdatasync().await.expect("fdatasync");
            let synced = started.elapsed();
            let read = read_through_page_cache(&path, mib);
            report("o_direct", mib, written, synced, read);
            file.remove().await.expect("remove");
        })
        .expect("executor")
        .join()
        .expect("join");
}

/// Reads the file back through the page cache, as sendfile to a tailing
/// consumer would: cached after buffered writes, from disk after O_DIRECT.
fn read_through_page_cache(path: &std::path::Path, mib: usize) -> std::time::Duration {
    use std::io::Read;
    let started = Instant::now();
    let mut file = std::fs::File::open(path).expect("open");
    let mut buf = vec![0u8; CHUNK];
    for _ in 0..mib {
        file.read_exact(&mut buf).expect("read");
    }
    started.elapsed()
}

fn options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true).truncate(true);
    options
}

fn report(
    mode: &str,
    mib: usize,
    written: std::time::Duration,
    synced: std::time::Duration,
    read: std::time::Duration,
) {
    let mb = mib as f64 * 1.048576;
    println!(
        "{mode:9} {mib} MiB: writes {:7.1} MB/s, writes+fdatasync {:7.1} MB/s, read back {:7.1} MB/s",
        mb / written.as_secs_f64(),
        mb / synced.as_secs_f64(),
        mb / read.as_secs_f64()
    );
}
