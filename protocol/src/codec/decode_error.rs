//! Why a header that passed the frame's checks still cannot be used: it
//! fails flatbuffers verification, names a value this build does not know,
//! or breaks a rule of its own (counts, lengths, an ACL rule's syntax).

/// A header that does not decode.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DecodeError {
    /// The flatbuffer is malformed.
    #[error("the header failed verification: {0}")]
    Header(#[from] flatbuffers::InvalidFlatbuffer),
    /// An enum value this build does not know (a newer peer, or garbage).
    #[error("{what} {value} is not known")]
    Unknown {
        /// Which field.
        what: &'static str,
        /// Its value.
        value: i64,
    },
    /// An ACL rule that breaks the rule syntax.
    #[error("{0}")]
    Rule(String),
    /// Too few or too many items for one request.
    #[error("{count} {what}: a request carries 1 to {max}")]
    Count {
        /// What is counted.
        what: &'static str,
        /// How many it carries.
        count: usize,
        /// The most it may carry.
        max: usize,
    },
    /// A MultiFetch answer whose chunks do not add up to its payload (at
    /// least `held` bytes where the payload has `payload`).
    #[error("a MultiFetch answer's chunks hold {held} bytes, its payload {payload}")]
    Chunks {
        /// The chunks' bytes (up to the first that overruns).
        held: usize,
        /// The payload's bytes.
        payload: usize,
    },
    /// An InitProducerId answer whose id or epoch is below 0.
    #[error("producer id {id} with epoch {epoch}: both must be 0 or above")]
    ProducerId {
        /// The id answered.
        id: i64,
        /// The epoch answered.
        epoch: i16,
    },
    /// A Digest answer whose digests do not cover its range.
    #[error(
        "a Digest answer of {count} digests for {from}..{to} in chunks of {chunk_bytes} bytes"
    )]
    Digests {
        /// Its range's start.
        from: u64,
        /// Its range's end.
        to: u64,
        /// Its chunk.
        chunk_bytes: u32,
        /// Its digests.
        count: usize,
    },
}
