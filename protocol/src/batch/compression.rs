//! The four codecs of a batch's records, as Kafka's clients write them: a
//! producer compresses a batch's records as one block, the broker stores
//! the block as it came (nothing is decompressed on the produce path), and
//! a consumer decompresses it.
//!
//! - gzip: a gzip member (RFC 1952), deflate level 6 (Kafka's default).
//! - snappy: the xerial framing of Kafka's Java client: an 8-byte magic,
//!   two version words, then chunks of `length i32 BE` + a raw snappy
//!   block. A batch without the magic is one raw snappy block (librdkafka
//!   reads both; so does this).
//! - lz4: an LZ4 frame with independent 64 KiB blocks and no content
//!   checksum (what Kafka's `Lz4BlockOutputStream` writes and reads).
//! - zstd: a zstd frame, level 3 (Kafka's default).
//!
//! Every decompression is bounded by the caller's `bytes_max`: a batch of
//! a few KiB can claim gigabytes (a decompression bomb), and a consumer's
//! memory is bounded by its configuration, not by the producer's manners.

use super::Compression;
use std::io::{Read, Write};

/// Why a block does not compress or decompress.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The block is not what its codec writes.
    #[error("{codec:?} block does not decompress: {reason}")]
    Corrupt {
        /// The codec.
        codec: Compression,
        /// The codec's own words.
        reason: String,
    },
    /// The block decompresses past the caller's bound.
    #[error("{codec:?} block decompresses past {bytes_max} bytes")]
    TooLarge {
        /// The codec.
        codec: Compression,
        /// The bound.
        bytes_max: usize,
    },
    /// Writing a compressed block failed (only memory can: the output is a
    /// `Vec`).
    #[error("{codec:?} compression failed: {source}")]
    Compress {
        /// The codec.
        codec: Compression,
        /// The codec's error.
        source: std::io::Error,
    },
}

/// The xerial snappy stream's magic: `0x82 "SNAPPY" 0`.
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
/// Magic, version 1, compatible version 1.
const XERIAL_HEADER_BYTES: usize = 16;
/// Uncompressed bytes per xerial chunk (the Java stream's default).
const XERIAL_CHUNK: usize = 32 * 1024;
/// gzip's level (Kafka's `compression.gzip.level` default).
const GZIP_LEVEL: u32 = 6;
/// zstd's level (Kafka's `compression.zstd.level` default).
const ZSTD_LEVEL: i32 = 3;

/// Appends `records` compressed with `codec` to `out` (`Compression::None`
/// appends them as they are).
pub fn compress(codec: Compression, records: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
    let failed = |source| CodecError::Compress { codec, source };
    match codec {
        Compression::None => out.extend_from_slice(records),
        Compression::Gzip => {
            let mut encoder =
                flate2::write::GzEncoder::new(out, flate2::Compression::new(GZIP_LEVEL));
            encoder.write_all(records).map_err(failed)?;
            encoder.finish().map_err(failed)?;
        }
        Compression::Snappy => {
            out.extend_from_slice(&XERIAL_MAGIC);
            out.extend_from_slice(&1i32.to_be_bytes());
            out.extend_from_slice(&1i32.to_be_bytes());
            let mut encoder = snap::raw::Encoder::new();
            for chunk in records.chunks(XERIAL_CHUNK) {
                let at = out.len();
                out.extend_from_slice(&[0; 4]);
                out.resize(at + 4 + snap::raw::max_compress_len(chunk.len()), 0);
                let written = encoder
                    .compress(chunk, &mut out[at + 4..])
                    .map_err(|e| failed(std::io::Error::other(e)))?;
                out.truncate(at + 4 + written);
                out[at..at + 4].copy_from_slice(&(written as i32).to_be_bytes());
            }
        }
        Compression::Lz4 => {
            let info = lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max64KB)
                .block_mode(lz4_flex::frame::BlockMode::Independent);
            let mut encoder = lz4_flex::frame::FrameEncoder::with_frame_info(info, out);
            encoder.write_all(records).map_err(failed)?;
            encoder
                .finish()
                .map_err(|e| failed(std::io::Error::other(e)))?;
        }
        Compression::Zstd => {
            let mut encoder = zstd::stream::write::Encoder::new(out, ZSTD_LEVEL).map_err(failed)?;
            encoder.write_all(records).map_err(failed)?;
            encoder.finish().map_err(failed)?;
        }
    }
    Ok(())
}

/// Appends the records of a `codec` block to `out`, at most `bytes_max` of
/// them (more is [`CodecError::TooLarge`], and `out` is left as it was).
pub fn decompress(
    codec: Compression,
    block: &[u8],
    bytes_max: usize,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    let start = out.len();
    let result = match codec {
        Compression::None if block.len() > bytes_max => {
            Err(CodecError::TooLarge { codec, bytes_max })
        }
        Compression::None => {
            out.extend_from_slice(block);
            Ok(())
        }
        Compression::Gzip => bounded(codec, flate2::read::GzDecoder::new(block), bytes_max, out),
        Compression::Snappy => snappy(block, bytes_max, out),
        Compression::Lz4 => bounded(
            codec,
            lz4_flex::frame::FrameDecoder::new(block),
            bytes_max,
            out,
        ),
        Compression::Zstd => match zstd::stream::read::Decoder::with_buffer(block) {
            Ok(decoder) => bounded(codec, decoder.single_frame(), bytes_max, out),
            Err(e) => Err(corrupt(codec, e)),
        },
    };
    if result.is_err() {
        out.truncate(start);
    }
    result
}

/// Reads `reader` to its end into `out`, refusing more than `bytes_max`.
fn bounded(
    codec: Compression,
    reader: impl Read,
    bytes_max: usize,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    let start = out.len();
    let limit = u64::try_from(bytes_max)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    reader
        .take(limit)
        .read_to_end(out)
        .map_err(|e| corrupt(codec, e))?;
    if out.len() - start > bytes_max {
        return Err(CodecError::TooLarge { codec, bytes_max });
    }
    Ok(())
}

/// A xerial-framed snappy stream, or one raw snappy block.
fn snappy(block: &[u8], bytes_max: usize, out: &mut Vec<u8>) -> Result<(), CodecError> {
    let codec = Compression::Snappy;
    // `out` may hold bytes before these: the bound is on what is added.
    let end_max = out.len().saturating_add(bytes_max);
    let mut decoder = snap::raw::Decoder::new();
    let mut raw = |chunk: &[u8], out: &mut Vec<u8>| {
        let len = snap::raw::decompress_len(chunk).map_err(|e| corrupt(codec, e))?;
        let at = out.len();
        if at.saturating_add(len) > end_max {
            return Err(CodecError::TooLarge { codec, bytes_max });
        }
        out.resize(at + len, 0);
        let written = decoder
            .decompress(chunk, &mut out[at..])
            .map_err(|e| corrupt(codec, e))?;
        out.truncate(at + written);
        Ok(())
    };
    if !block.starts_with(&XERIAL_MAGIC) {
        return raw(block, out);
    }
    let mut chunks = block
        .get(XERIAL_HEADER_BYTES..)
        .ok_or_else(|| CodecError::Corrupt {
            codec,
            reason: "a xerial header cut short".into(),
        })?;
    while !chunks.is_empty() {
        let (length, rest) = chunks
            .split_at_checked(4)
            .ok_or_else(|| CodecError::Corrupt {
                codec,
                reason: format!("{} bytes where a chunk length needs 4", chunks.len()),
            })?;
        let length = i32::from_be_bytes([length[0], length[1], length[2], length[3]]);
        let chunk = usize::try_from(length)
            .ok()
            .and_then(|n| rest.get(..n))
            .ok_or_else(|| CodecError::Corrupt {
                codec,
                reason: format!("a chunk of {length} bytes where {} are left", rest.len()),
            })?;
        raw(chunk, out)?;
        chunks = &rest[chunk.len()..];
    }
    Ok(())
}

fn corrupt(codec: Compression, error: impl std::fmt::Display) -> CodecError {
    CodecError::Corrupt {
        codec,
        reason: error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CODECS: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    fn lines(n: usize) -> Vec<u8> {
        (0..n)
            .flat_map(|i| {
                format!("{{\"level\":\"info\",\"n\":{i},\"msg\":\"request served\"}}\n")
                    .into_bytes()
            })
            .collect()
    }

    #[test]
    fn every_codec_round_trips_empty_small_and_multi_chunk_records() {
        for codec in CODECS {
            for records in [Vec::new(), b"x".to_vec(), lines(5_000)] {
                let mut block = Vec::new();
                compress(codec, &records, &mut block).unwrap();
                let mut back = b"before".to_vec();
                decompress(codec, &block, records.len(), &mut back).unwrap();
                assert_eq!(&back[..6], b"before", "{codec:?}: appends");
                assert_eq!(back[6..], records[..], "{codec:?}");
                if codec != Compression::None && records.len() > 1000 {
                    assert!(
                        block.len() * 4 < records.len(),
                        "{codec:?} compresses log lines"
                    );
                }
            }
        }
    }

    #[test]
    fn a_block_that_decompresses_past_the_bound_is_refused_and_leaves_nothing() {
        let records = vec![0u8; 1 << 20];
        for codec in CODECS {
            let mut block = Vec::new();
            compress(codec, &records, &mut block).unwrap();
            let mut out = b"kept".to_vec();
            let refused = decompress(codec, &block, (1 << 20) - 1, &mut out).unwrap_err();
            assert!(
                matches!(refused, CodecError::TooLarge { bytes_max, .. } if bytes_max == (1 << 20) - 1),
                "{codec:?}: {refused}"
            );
            assert_eq!(out, b"kept", "{codec:?}");
        }
    }

    #[test]
    fn damaged_blocks_are_errors_not_panics() {
        let records = lines(2_000);
        for codec in CODECS.into_iter().skip(1) {
            let mut block = Vec::new();
            compress(codec, &records, &mut block).unwrap();
            // (An LZ4 frame cut inside its 4-byte end mark still reads
            // whole: the batch's CRC-32C, checked first, covers the block.)
            for cut in [0, 1, 7, 16, 20, block.len() / 2, block.len() - 5] {
                let mut out = Vec::new();
                let result = decompress(codec, &block[..cut], 1 << 20, &mut out);
                assert!(
                    result.is_err() || out.len() < records.len(),
                    "{codec:?} cut at {cut} of {} read as whole: {result:?}",
                    block.len()
                );
            }
            let mut flipped = block.clone();
            let middle = flipped.len() / 2;
            flipped[middle] ^= 0x55;
            let mut out = Vec::new();
            if decompress(codec, &flipped, 1 << 20, &mut out).is_ok() {
                assert_ne!(out, records, "{codec:?}: a flipped byte changes something");
            }
        }
    }

    #[test]
    fn a_raw_snappy_block_without_the_xerial_framing_reads_too() {
        let records = lines(100);
        let block = snap::raw::Encoder::new().compress_vec(&records).unwrap();
        let mut out = Vec::new();
        decompress(Compression::Snappy, &block, records.len(), &mut out).unwrap();
        assert_eq!(out, records);
    }
}
