//! Digest (api 27): the CRC-32 of each chunk of a copy's bytes, what
//! `ringlog verify` compares copies with.

use super::{finish, verify, DecodeError};
use crate::generated::ringlog::wire;
use crate::types::PartitionId;
use flatbuffers::FlatBufferBuilder;

/// The most bytes one answer covers.
pub const DIGEST_BYTES_MAX: u64 = 256 * 1024 * 1024;
/// The most digests one answer holds.
pub const DIGESTS_MAX: u64 = 65_536;
/// The largest chunk.
pub const CHUNK_BYTES_MAX: u32 = 64 * 1024 * 1024;
/// The chunk when the request gives none.
pub const CHUNK_BYTES_DEFAULT: u32 = 1024 * 1024;

/// What a Digest asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestArgs {
    /// From this offset...
    pub from: u64,
    /// ...to at most this one.
    pub to: u64,
    /// Bytes per digest (0: [`CHUNK_BYTES_DEFAULT`]).
    pub chunk_bytes: u32,
}

/// A copy's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digests {
    /// The range covered.
    pub from: u64,
    /// Its end.
    pub to: u64,
    /// Bytes per digest (the last may cover less).
    pub chunk_bytes: u32,
    /// The copy's log start.
    pub start_offset: u64,
    /// The copy's visible end (what a consumer may read there).
    pub visible_offset: u64,
    /// The copy's flushed end: where its digests may reach.
    pub flushed_offset: u64,
    /// CRC-32 of each chunk.
    pub digests: Vec<u32>,
}

/// Digest request header.
pub fn digest_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    topic: &str,
    partition: PartitionId,
    args: &DigestArgs,
) -> &'b [u8] {
    fbb.reset();
    let topic = fbb.create_string(topic);
    let root = wire::DigestRequest::create(
        fbb,
        &wire::DigestRequestArgs {
            topic: Some(topic),
            partition,
            from: args.from,
            to: args.to,
            chunk_bytes: args.chunk_bytes,
        },
    );
    finish(fbb, root)
}

/// Digest response header.
pub fn digest_response<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    topic: &str,
    partition: PartitionId,
    digests: &Digests,
) -> &'b [u8] {
    fbb.reset();
    let topic = fbb.create_string(topic);
    let list = fbb.create_vector(&digests.digests);
    let root = wire::DigestResponse::create(
        fbb,
        &wire::DigestResponseArgs {
            topic: Some(topic),
            partition,
            from: digests.from,
            to: digests.to,
            chunk_bytes: digests.chunk_bytes,
            start_offset: digests.start_offset,
            visible_offset: digests.visible_offset,
            digests: Some(list),
            flushed_offset: digests.flushed_offset,
        },
    );
    finish(fbb, root)
}

/// Reads a Digest response header; one whose digests do not cover its
/// range in its chunks is not one.
pub fn decode_digests(header: &[u8]) -> Result<Digests, DecodeError> {
    let response = verify::<wire::DigestResponse>(header)?;
    let digests = Digests {
        from: response.from(),
        to: response.to(),
        chunk_bytes: response.chunk_bytes(),
        start_offset: response.start_offset(),
        visible_offset: response.visible_offset(),
        flushed_offset: response.flushed_offset(),
        digests: response
            .digests()
            .map(|d| d.iter().collect())
            .unwrap_or_default(),
    };
    let span = digests.to.saturating_sub(digests.from);
    let expected = span.div_ceil(u64::from(digests.chunk_bytes.max(1)));
    if digests.chunk_bytes == 0
        || digests.to < digests.from
        || expected != digests.digests.len() as u64
    {
        return Err(DecodeError::Digests {
            from: digests.from,
            to: digests.to,
            chunk_bytes: digests.chunk_bytes,
            count: digests.digests.len(),
        });
    }
    Ok(digests)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_round_trip_and_a_count_that_does_not_cover_the_range_is_refused() {
        let mut fbb = FlatBufferBuilder::new();
        let digests = Digests {
            from: 100,
            to: 2_148,
            chunk_bytes: 1024,
            start_offset: 0,
            visible_offset: 5_000,
            flushed_offset: 6_000,
            digests: vec![7, 8],
        };
        let bytes = digest_response(&mut fbb, "t", 3, &digests).to_vec();
        assert_eq!(decode_digests(&bytes), Ok(digests.clone()));
        let short = Digests {
            digests: vec![7],
            ..digests
        };
        let bytes = digest_response(&mut fbb, "t", 3, &short).to_vec();
        assert!(decode_digests(&bytes).is_err());
    }
}
