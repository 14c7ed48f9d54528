//! How fast plain `pwrite`s land in the page cache by write size and by the
//! number of files they are spread over — what the disk driver's writer
//! thread pays for one partition's large appends against 1,000 partitions'
//! small ones, and why it caps each call at 256 KiB
//! (`broker/docs/design/0010-disk-driver.md`).
//!
//! `cargo run --release -p ringlog-broker --example write_sizes [DIR] [MIB]`
//!
//! Each case writes MIB MiB into new files in DIR (round-robin over the
//! files), then removes them.

// A measurement program: any I/O failure should stop it loudly.
#![allow(clippy::expect_used)]

use std::os::unix::fs::FileExt;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().unwrap_or_else(|| "/tmp".into()));
    let mib: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(512);
    let total = mib << 20;
    let cases: [(usize, usize); 7] = [
        (1, 16 << 10),
        (1, 64 << 10),
        (1, 256 << 10),
        (1, 1 << 20),
        (1, 4 << 20),
        (1000, 10_450),
        (1000, 64 << 10),
    ];
    for (files, size) in cases {
        let paths: Vec<_> = (0..files)
            .map(|i| dir.join(format!("ringlog-write-sizes-{i}.bench")))
            .collect();
        let handles: Vec<std::fs::File> = paths
            .iter()
            .map(|p| std::fs::File::create(p).expect("create"))
            .collect();
        let buffer = vec![0x5au8; size];
        let mut positions = vec![0u64; files];
        let started = Instant::now();
        let mut written = 0;
        let mut i = 0;
        while written < total {
            handles[i]
                .write_all_at(&buffer, positions[i])
                .expect("write");
            positions[i] += size as u64;
            written += size;
            i = (i + 1) % files;
        }
        let seconds = started.elapsed().as_secs_f64();
        println!(
            "{files:>5} file(s), {:>8} B writes: {:>6.0} MB/s",
            size,
            written as f64 / 1e6 / seconds
        );
        drop(handles);
        for path in paths {
            std::fs::remove_file(path).expect("remove");
        }
    }
}
