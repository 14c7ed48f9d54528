//! Why bytes are not a batch ringlog stores: each check of a produced
//! batch (design record 0015) is a variant, with the numbers it saw.

/// A batch refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// Fewer bytes than the header, or than the batch says it has.
    #[error("{have} bytes where a batch needs {need}")]
    Short {
        /// Bytes there.
        have: usize,
        /// Bytes needed.
        need: usize,
    },
    /// Not magic 2 (format 2 stores Kafka's RecordBatch v2 only).
    #[error("magic {0}, not 2: only record batch v2 is stored")]
    Magic(u8),
    /// A batchLength below the header or above the limit.
    #[error("batchLength {0} is outside 49..={max}", max = super::BATCH_BYTES_MAX - super::LOG_OVERHEAD)]
    Length(i32),
    /// Bytes after the last whole batch, or a batch longer than the bytes
    /// it was sent in.
    #[error("the batches end mid-batch: {0} bytes left over")]
    Trailing(usize),
    /// The CRC-32C does not match the bytes.
    #[error("CRC-32C mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Crc {
        /// The CRC in the batch.
        stored: u32,
        /// The CRC of its bytes.
        computed: u32,
    },
    /// Codec bits 5-7, which no codec uses.
    #[error("compression codec {0} is not none, gzip, snappy, lz4 or zstd")]
    Codec(u16),
    /// A control batch from a client: only a broker writes those.
    #[error("a control batch (transaction marker) cannot be produced")]
    Control,
    /// Transactions are not offered.
    #[error("a transactional batch: ringlog does not offer transactions")]
    Transactional,
    /// recordCount below 1, or above the batch's size (its offsets would
    /// run into the next batch's).
    #[error("recordCount {count} is not 1..={size} (the batch's bytes)")]
    RecordCount {
        /// recordCount.
        count: i32,
        /// The batch's bytes.
        size: usize,
    },
    /// lastOffsetDelta is not recordCount - 1, as a producer writes it.
    #[error("lastOffsetDelta {delta} with {count} records (a producer writes recordCount - 1)")]
    LastOffsetDelta {
        /// lastOffsetDelta.
        delta: i32,
        /// recordCount.
        count: i32,
    },
    /// An idempotent producer's fields out of range.
    #[error("producerId {id} with producerEpoch {epoch} and baseSequence {sequence}: an idempotent batch needs all three at 0 or above, others -1")]
    Producer {
        /// producerId.
        id: i64,
        /// producerEpoch.
        epoch: i16,
        /// baseSequence.
        sequence: i32,
    },
    /// An uncompressed record that does not parse, or whose offsetDelta
    /// is not its index.
    #[error("record {index}: {problem}")]
    Record {
        /// Its index in the batch.
        index: i32,
        /// What is wrong.
        problem: super::records::RecordError,
    },
    /// The records end before recordCount, or bytes follow the last.
    #[error(
        "the records hold {found} records and {left} bytes more, where recordCount is {count}"
    )]
    Records {
        /// Records parsed.
        found: i32,
        /// Bytes left after them.
        left: usize,
        /// recordCount.
        count: i32,
    },
}
