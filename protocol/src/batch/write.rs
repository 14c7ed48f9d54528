//! Writing a batch, as a producer does: records one by one, then the
//! header (baseOffset 0, leader epoch -1, lastOffsetDelta recordCount - 1,
//! the CRC-32C). The broker stamps its own fields when it stores it
//! ([`super::produce::stamp`]).

use super::varint::{varint_len, varlong_len, write_varint, write_varlong};
use super::{at, Compression, HEADER_BYTES, LOG_OVERHEAD, MAGIC};

/// An idempotent producer's numbering of a batch, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Producer {
    /// producerId (-1: not idempotent).
    pub id: i64,
    /// producerEpoch.
    pub epoch: i16,
    /// The first record's sequence number.
    pub base_sequence: i32,
}

impl Producer {
    /// A producer that does not number its batches.
    pub const NONE: Producer = Producer {
        id: -1,
        epoch: -1,
        base_sequence: -1,
    };
}

/// Sets a finished batch's producer fields to `producer`'s (an idempotent
/// producer numbering a batch again, in a new epoch) and its CRC-32C.
///
/// Panics if `batch` is shorter than a header.
pub fn renumber(batch: &mut [u8], producer: Producer) {
    assert!(batch.len() >= HEADER_BYTES);
    batch[at::PRODUCER_ID..at::PRODUCER_ID + 8].copy_from_slice(&producer.id.to_be_bytes());
    batch[at::PRODUCER_EPOCH..at::PRODUCER_EPOCH + 2]
        .copy_from_slice(&producer.epoch.to_be_bytes());
    batch[at::BASE_SEQUENCE..at::BASE_SEQUENCE + 4]
        .copy_from_slice(&producer.base_sequence.to_be_bytes());
    let crc = super::crc(batch);
    batch[at::CRC..at::CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Records gathered into one uncompressed batch.
///
/// The records are written after room for the header, so the finished
/// batch is the same buffer with its header filled in ([`BatchWriter::take`]):
/// a producer neither copies its records nor allocates per batch (a
/// fresh megabyte per grown batch was a page fault per 4 KiB).
#[derive(Debug, Default, Clone)]
pub struct BatchWriter {
    /// Room for the header, then the records (empty before the first).
    buf: Vec<u8>,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
}

impl BatchWriter {
    /// An empty batch.
    pub fn new() -> BatchWriter {
        BatchWriter::default()
    }

    /// Adds a record written at `timestamp_ms` (the first record's is the
    /// batch's baseTimestamp).
    pub fn push(
        &mut self,
        timestamp_ms: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, Option<&[u8]>)],
    ) {
        if self.count == 0 {
            self.base_timestamp = timestamp_ms;
            self.max_timestamp = timestamp_ms;
            self.buf.clear();
            self.buf.resize(HEADER_BYTES, 0);
        }
        self.max_timestamp = self.max_timestamp.max(timestamp_ms);
        let delta = timestamp_ms.wrapping_sub(self.base_timestamp);
        // The record's length comes first: count it, then write the record
        // straight into the batch (no copy through a scratch buffer).
        let field_len = |bytes: Option<&[u8]>| match bytes {
            Some(b) => varint_len(b.len() as i32) + b.len(),
            None => 1,
        };
        let headers_len: usize = headers
            .iter()
            .map(|(name, value)| field_len(Some(name.as_bytes())) + field_len(*value))
            .sum();
        let body_len = 1
            + varlong_len(delta)
            + varint_len(self.count)
            + field_len(key)
            + field_len(value)
            + varint_len(headers.len() as i32)
            + headers_len;
        let out = &mut self.buf;
        out.reserve(body_len + 5);
        write_varint(out, body_len as i32);
        let start = out.len();
        out.push(0); // attributes
        write_varlong(out, delta);
        write_varint(out, self.count);
        let field = |out: &mut Vec<u8>, bytes: Option<&[u8]>| match bytes {
            Some(b) => {
                write_varint(out, b.len() as i32);
                out.extend_from_slice(b);
            }
            None => write_varint(out, -1),
        };
        field(out, key);
        field(out, value);
        write_varint(out, headers.len() as i32);
        for (name, value) in headers {
            field(out, Some(name.as_bytes()));
            field(out, *value);
        }
        debug_assert_eq!(out.len() - start, body_len);
        self.count += 1;
    }

    /// Empties it for the next batch, keeping its buffers.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.count = 0;
        self.base_timestamp = 0;
        self.max_timestamp = 0;
    }

    /// Records so far.
    pub fn count(&self) -> i32 {
        self.count
    }

    /// The batch's bytes if finished now.
    pub fn size(&self) -> usize {
        HEADER_BYTES + self.records().len()
    }

    /// The records' bytes (what a codec compresses).
    pub fn records(&self) -> &[u8] {
        self.buf.get(HEADER_BYTES..).unwrap_or_default()
    }

    /// The batch, uncompressed (a copy: the writer keeps its records).
    pub fn finish(&self, producer: Producer) -> Vec<u8> {
        self.finish_with(producer, Compression::None, self.records())
    }

    /// The batch with its records compressed by `codec` — or uncompressed
    /// when that is no smaller, or when the compressed batch would hold
    /// more records than bytes (a batch's records need offsets below the
    /// next batch's position: the broker refuses such a batch).
    pub fn finish_compressed(
        &self,
        producer: Producer,
        codec: Compression,
    ) -> Result<Vec<u8>, super::compression::CodecError> {
        if codec == Compression::None {
            return Ok(self.finish(producer));
        }
        let mut block = Vec::with_capacity(self.records().len() / 2);
        super::compression::compress(codec, self.records(), &mut block)?;
        if !self.compressed_wins(block.len()) {
            return Ok(self.finish(producer));
        }
        Ok(self.finish_with(producer, codec, &block))
    }

    /// The batch with `records` in place of the records written (the same
    /// records compressed with `codec`).
    pub fn finish_with(&self, producer: Producer, codec: Compression, records: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES + records.len());
        out.resize(HEADER_BYTES, 0);
        out.extend_from_slice(records);
        self.write_header(&mut out, producer, codec);
        out
    }

    /// Finishes the batch as [`BatchWriter::finish_compressed`] does and
    /// hands it over, emptied for the next batch, which is written into
    /// `next` (a buffer the caller recycles). Uncompressed, the batch is
    /// the records' own buffer; compressed, it is `next` (the records'
    /// buffer stays). A codec that fails sends the batch uncompressed.
    pub fn take(&mut self, producer: Producer, codec: Compression, mut next: Vec<u8>) -> Vec<u8> {
        if codec != Compression::None && self.count > 0 {
            next.clear();
            next.resize(HEADER_BYTES, 0);
            let compressed = super::compression::compress(codec, self.records(), &mut next);
            if compressed.is_ok() && self.compressed_wins(next.len() - HEADER_BYTES) {
                self.write_header(&mut next, producer, codec);
                self.clear();
                return next;
            }
        }
        if self.count == 0 {
            self.buf.clear();
            self.buf.resize(HEADER_BYTES, 0);
        }
        let mut out = std::mem::replace(&mut self.buf, next);
        self.write_header(&mut out, producer, Compression::None);
        self.clear();
        out
    }

    /// Whether `block_len` bytes of compressed records are worth storing:
    /// smaller than the records, and with at least as many bytes in the
    /// batch as records (each record's offset lies inside its batch).
    fn compressed_wins(&self, block_len: usize) -> bool {
        block_len < self.records().len() && HEADER_BYTES + block_len >= self.count as usize
    }

    /// Fills in the header of `out` (room for it, then the records).
    fn write_header(&self, out: &mut [u8], producer: Producer, codec: Compression) {
        let size = out.len();
        let mut put = |at: usize, bytes: &[u8]| out[at..at + bytes.len()].copy_from_slice(bytes);
        put(at::BASE_OFFSET, &0i64.to_be_bytes());
        put(at::LENGTH, &((size - LOG_OVERHEAD) as i32).to_be_bytes());
        put(at::LEADER_EPOCH, &(-1i32).to_be_bytes());
        put(at::MAGIC, &[MAGIC]);
        put(at::ATTRIBUTES, &(codec as u16).to_be_bytes());
        put(at::LAST_OFFSET_DELTA, &(self.count - 1).to_be_bytes());
        put(at::BASE_TIMESTAMP, &self.base_timestamp.to_be_bytes());
        put(at::MAX_TIMESTAMP, &self.max_timestamp.to_be_bytes());
        put(at::PRODUCER_ID, &producer.id.to_be_bytes());
        put(at::PRODUCER_EPOCH, &producer.epoch.to_be_bytes());
        put(at::BASE_SEQUENCE, &producer.base_sequence.to_be_bytes());
        put(at::RECORD_COUNT, &self.count.to_be_bytes());
        let crc = super::crc(out);
        out[at::CRC..at::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    }
}
