//! Pure-Rust against C codecs on format 2's batches (issue 43, item 5):
//! each codec compresses JSON log lines (loadgen's generator) in batches
//! of 50 and of 1,000 lines, as a producer compresses a batch's records,
//! and decompresses them again, as a consumer does. Prints per codec and
//! batch size the ratio and the compress and decompress rates in MB/s of
//! uncompressed bytes (the best of 5 passes over 64 MB), one line each.
//! Which flate2 backend and which lz4_flex mode are measured depends on
//! the build's features (see Cargo.toml and the README).

#[path = "../../src/log_lines.rs"]
#[allow(dead_code)]
mod log_lines;

use std::io::{Read, Write};
use std::time::Instant;

/// Uncompressed bytes per pass.
const PASS_BYTES: usize = 64 << 20;
/// Passes; the fastest counts (the machine's other load is noise).
const PASSES: usize = 5;

type Codec = (&'static str, fn(&[u8]) -> Vec<u8>, fn(&[u8]) -> Vec<u8>);

fn gzip_compress(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn gzip_decompress(block: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(block)
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn snap_compress(data: &[u8]) -> Vec<u8> {
    snap::raw::Encoder::new().compress_vec(data).unwrap()
}

fn snap_decompress(block: &[u8]) -> Vec<u8> {
    snap::raw::Decoder::new().decompress_vec(block).unwrap()
}

fn lz4_flex_compress(data: &[u8]) -> Vec<u8> {
    let info = lz4_flex::frame::FrameInfo::new()
        .block_size(lz4_flex::frame::BlockSize::Max64KB)
        .block_mode(lz4_flex::frame::BlockMode::Independent);
    let mut e = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn lz4_flex_decompress(block: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    lz4_flex::frame::FrameDecoder::new(block)
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn lz4_c_compress(data: &[u8]) -> Vec<u8> {
    let mut e = lz4::EncoderBuilder::new()
        .block_size(lz4::BlockSize::Max64KB)
        .block_mode(lz4::BlockMode::Independent)
        .checksum(lz4::ContentChecksum::NoChecksum)
        .build(Vec::new())
        .unwrap();
    e.write_all(data).unwrap();
    let (out, result) = e.finish();
    result.unwrap();
    out
}

fn lz4_c_decompress(block: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    lz4::Decoder::new(block)
        .unwrap()
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn zstd3_compress(data: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(data, 3).unwrap()
}

fn zstd1_compress(data: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(data, 1).unwrap()
}

fn zstd_decompress(block: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    zstd::stream::read::Decoder::with_buffer(block)
        .unwrap()
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn ruzstd_compress(data: &[u8]) -> Vec<u8> {
    ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
}

fn ruzstd_decompress(block: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    ruzstd::decoding::StreamingDecoder::new(block)
        .unwrap()
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// MB/s of `bytes` uncompressed bytes done `PASSES` times by `run`: the
/// fastest pass.
fn rate(bytes: usize, mut run: impl FnMut()) -> f64 {
    (0..PASSES)
        .map(|_| {
            let started = Instant::now();
            run();
            bytes as f64 / 1e6 / started.elapsed().as_secs_f64()
        })
        .fold(0.0, f64::max)
}

fn main() {
    let gzip = if cfg!(feature = "gzip-zlib-c") {
        "gzip 6 (flate2: zlib, C)"
    } else if cfg!(feature = "gzip-zlib-rs") {
        "gzip 6 (flate2: zlib-rs, Rust)"
    } else {
        "gzip 6 (flate2: miniz_oxide, Rust)"
    };
    let lz4_flex = if cfg!(feature = "lz4-safe") {
        "lz4 frame (lz4_flex safe, Rust)"
    } else {
        "lz4 frame (lz4_flex unchecked, Rust)"
    };
    let codecs: [Codec; 8] = [
        (gzip, gzip_compress, gzip_decompress),
        ("snappy raw (snap, Rust)", snap_compress, snap_decompress),
        (lz4_flex, lz4_flex_compress, lz4_flex_decompress),
        ("lz4 frame (lz4, C)", lz4_c_compress, lz4_c_decompress),
        ("zstd 3 (zstd, C)", zstd3_compress, zstd_decompress),
        ("zstd 1 (zstd, C)", zstd1_compress, zstd_decompress),
        (
            "zstd fastest (ruzstd, Rust)",
            ruzstd_compress,
            ruzstd_decompress,
        ),
        (
            "zstd 3 by C, read by ruzstd (Rust)",
            zstd3_compress,
            ruzstd_decompress,
        ),
    ];
    println!("codec\tlines per batch\tbatch bytes\tratio\tcompress MB/s\tdecompress MB/s");
    for per_batch in [50usize, 1_000] {
        let lines = log_lines::lines(per_batch * 64, 200, 7);
        let batches: Vec<Vec<u8>> = lines.chunks(per_batch).map(|c| c.concat()).collect();
        let batch_bytes: usize = batches.iter().map(Vec::len).sum::<usize>() / batches.len();
        let repeat = PASS_BYTES / (batch_bytes * batches.len()).max(1);
        let total = batch_bytes * batches.len() * repeat;
        for (name, compress, decompress) in codecs {
            let blocks: Vec<Vec<u8>> = batches.iter().map(|b| compress(b)).collect();
            for (block, batch) in blocks.iter().zip(&batches) {
                assert_eq!(&decompress(block), batch, "{name} round trip");
            }
            let stored: usize = blocks.iter().map(Vec::len).sum();
            let plain: usize = batches.iter().map(Vec::len).sum();
            let up = rate(total, || {
                for _ in 0..repeat {
                    for b in &batches {
                        std::hint::black_box(compress(b));
                    }
                }
            });
            let down = rate(total, || {
                for _ in 0..repeat {
                    for b in &blocks {
                        std::hint::black_box(decompress(b));
                    }
                }
            });
            println!(
                "{name}\t{per_batch}\t{batch_bytes}\t{:.2}\t{up:.0}\t{down:.0}",
                plain as f64 / stored as f64
            );
        }
    }
}
