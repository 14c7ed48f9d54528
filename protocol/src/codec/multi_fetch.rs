//! MultiFetch (api 17): chunks of many partitions of one shard in one
//! request and one answer (PROTOCOL.md, "MultiFetch").

use super::{finish, verify, DecodeError, PartitionOffsets};
use crate::generated::ringlog::wire;
use crate::types::{BrokerId, PartitionId};
use crate::ErrorCode;
use flatbuffers::FlatBufferBuilder;

/// The most partitions one request may name.
pub const PARTITIONS_MAX: usize = 1000;

/// One partition of a MultiFetch request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPart {
    /// The topic's name.
    pub topic: String,
    /// The topic's id (empty: unchecked).
    pub topic_id: String,
    /// The partition.
    pub partition: PartitionId,
    /// Where to read from.
    pub offset: u64,
    /// At most this many bytes of this partition.
    pub max_bytes: u32,
    /// The leader epoch the fetcher knows (-1: unchecked).
    pub leader_epoch: i32,
    /// A follower's: the epoch of its last message (-1: none).
    pub last_fetched_epoch: i32,
    /// A follower's: how far its copy is flushed.
    pub flushed_offset: u64,
}

impl FetchPart {
    /// A consumer's part: no epochs.
    pub fn consumer(topic: &str, partition: PartitionId, offset: u64, max_bytes: u32) -> Self {
        FetchPart {
            topic: topic.to_string(),
            topic_id: String::new(),
            partition,
            offset,
            max_bytes,
            leader_epoch: -1,
            last_fetched_epoch: -1,
            flushed_offset: 0,
        }
    }
}

/// The request's own fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiFetch {
    /// Bytes over all chunks.
    pub max_bytes: u32,
    /// How long to wait when no partition has anything to say.
    pub max_wait_ms: u32,
    /// A follower's broker id (-1: a consumer).
    pub replica_id: i32,
    /// The follower's incarnation.
    pub incarnation: String,
}

/// MultiFetch request header.
pub fn multi_fetch_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    parts: &[FetchPart],
    request: &MultiFetch,
) -> &'b [u8] {
    fbb.reset();
    let mut offsets = Vec::with_capacity(parts.len());
    for part in parts {
        let topic = fbb.create_string(&part.topic);
        let topic_id = (!part.topic_id.is_empty()).then(|| fbb.create_string(&part.topic_id));
        offsets.push(wire::FetchPartition::create(
            fbb,
            &wire::FetchPartitionArgs {
                topic: Some(topic),
                topic_id,
                partition: part.partition,
                offset: part.offset,
                max_bytes: part.max_bytes,
                leader_epoch: part.leader_epoch,
                last_fetched_epoch: part.last_fetched_epoch,
                replica_flushed_offset: part.flushed_offset,
            },
        ));
    }
    let partitions = fbb.create_vector(&offsets);
    let incarnation =
        (!request.incarnation.is_empty()).then(|| fbb.create_string(&request.incarnation));
    let root = wire::MultiFetchRequest::create(
        fbb,
        &wire::MultiFetchRequestArgs {
            partitions: Some(partitions),
            max_bytes: request.max_bytes,
            max_wait_ms: request.max_wait_ms,
            replica_id: request.replica_id,
            replica_incarnation: incarnation,
        },
    );
    finish(fbb, root)
}

/// One partition of a MultiFetch answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedPart {
    /// The topic's name.
    pub topic: String,
    /// The partition.
    pub partition: PartitionId,
    /// What went wrong with this partition (`None`: nothing).
    pub error: ErrorCode,
    /// Why, in words, when it failed.
    pub message: String,
    /// The broker to ask instead, when the broker knows it.
    pub owner: Option<BrokerId>,
    /// Where the chunk starts.
    pub offset: u64,
    /// The chunk's bytes in the payload.
    pub length: u32,
    /// The partition's offsets (for OFFSET_OUT_OF_RANGE, the valid range is
    /// `start_offset..=end_offset`).
    pub offsets: PartitionOffsets,
    /// The leader's epoch (-1: not replicated).
    pub leader_epoch: i32,
    /// To a follower: the epoch of every byte of the chunk.
    pub chunk_epoch: i32,
    /// To a follower: the base offset of the leader's segment the chunk is in.
    pub segment_base: u64,
    /// To a follower whose log diverged: the epoch and where to truncate.
    pub diverging: Option<(i32, u64)>,
    /// What the chunk holds: 2 record batches v2, else messages.
    pub message_format: u32,
}

impl FetchedPart {
    /// An answer with no bytes and no error yet.
    pub fn empty(topic: &str, partition: PartitionId, offset: u64) -> Self {
        FetchedPart {
            topic: topic.to_string(),
            partition,
            error: ErrorCode::None,
            message: String::new(),
            owner: None,
            offset,
            length: 0,
            offsets: PartitionOffsets::default(),
            leader_epoch: -1,
            chunk_epoch: -1,
            segment_base: 0,
            diverging: None,
            message_format: 0,
        }
    }
}

/// MultiFetch response header: the parts' chunks follow it in their order.
pub fn multi_fetch_response<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    parts: &[FetchedPart],
) -> &'b [u8] {
    multi_fetch_response_throttled(fbb, parts, 0)
}

/// MultiFetch response header with a quota's delay (see
/// [`super::with_throttle`]).
pub fn multi_fetch_response_throttled<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    parts: &[FetchedPart],
    throttle_ms: u32,
) -> &'b [u8] {
    fbb.reset();
    let mut offsets = Vec::with_capacity(parts.len());
    for part in parts {
        let topic = fbb.create_string(&part.topic);
        let message = (!part.message.is_empty()).then(|| fbb.create_string(&part.message));
        let (diverging_epoch, diverging_end_offset) = part.diverging.unwrap_or((-1, 0));
        offsets.push(wire::FetchedPartition::create(
            fbb,
            &wire::FetchedPartitionArgs {
                topic: Some(topic),
                partition: part.partition,
                error: part.error as u16,
                message,
                owner_broker_id: part.owner.map_or(-1, |b| b as i32),
                offset: part.offset,
                length: part.length,
                start_offset: part.offsets.start_offset,
                flushed_offset: part.offsets.flushed_offset,
                end_offset: part.offsets.end_offset,
                leader_epoch: part.leader_epoch,
                chunk_epoch: part.chunk_epoch,
                segment_base: part.segment_base,
                diverging_epoch,
                diverging_end_offset,
                message_format: part.message_format,
            },
        ));
    }
    let partitions = fbb.create_vector(&offsets);
    let root = wire::MultiFetchResponse::create(
        fbb,
        &wire::MultiFetchResponseArgs {
            partitions: Some(partitions),
            throttle_ms,
        },
    );
    finish(fbb, root)
}

/// Decodes a MultiFetch answer whose frame carried `payload_len` bytes after
/// the header: the parts, each with its chunk's place in the payload. Fails
/// when the chunks' lengths do not add up to the payload.
pub fn decode_multi_fetch_response(
    header: &[u8],
    payload_len: usize,
) -> Result<Vec<(FetchedPart, std::ops::Range<usize>)>, DecodeError> {
    let response = verify::<wire::MultiFetchResponse>(header)?;
    let mut parts = Vec::new();
    let mut at = 0usize;
    for p in response.partitions().iter().flatten() {
        let length = p.length();
        let end = at
            .checked_add(length as usize)
            .filter(|&end| end <= payload_len)
            .ok_or(DecodeError::Chunks {
                held: at.saturating_add(length as usize),
                payload: payload_len,
            })?;
        let diverging =
            (p.diverging_epoch() >= 0).then(|| (p.diverging_epoch(), p.diverging_end_offset()));
        let part = FetchedPart {
            topic: p.topic().unwrap_or_default().to_string(),
            partition: p.partition(),
            error: ErrorCode::from_u16(p.error()).unwrap_or(ErrorCode::Internal),
            message: p.message().unwrap_or_default().to_string(),
            owner: (p.owner_broker_id() >= 0).then(|| p.owner_broker_id() as BrokerId),
            offset: p.offset(),
            length,
            offsets: PartitionOffsets {
                start_offset: p.start_offset(),
                flushed_offset: p.flushed_offset(),
                end_offset: p.end_offset(),
            },
            leader_epoch: p.leader_epoch(),
            chunk_epoch: p.chunk_epoch(),
            segment_base: p.segment_base(),
            diverging,
            message_format: p.message_format(),
        };
        parts.push((part, at..end));
        at = end;
    }
    if at != payload_len {
        return Err(DecodeError::Chunks {
            held: at,
            payload: payload_len,
        });
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_round_trips_and_its_chunks_must_fill_the_payload() {
        let mut fbb = FlatBufferBuilder::new();
        let mut a = FetchedPart::empty("a", 0, 10);
        a.length = 5;
        a.chunk_epoch = 2;
        a.diverging = None;
        let mut b = FetchedPart::empty("b", 3, 0);
        b.error = ErrorCode::NotLeader;
        b.message = "led by 2".into();
        b.owner = Some(2);
        let mut c = FetchedPart::empty("a", 1, 7);
        c.length = 3;
        c.diverging = Some((1, 4));
        let header = multi_fetch_response(&mut fbb, &[a.clone(), b.clone(), c.clone()]).to_vec();
        let parts = decode_multi_fetch_response(&header, 8).unwrap();
        assert_eq!(
            parts,
            vec![(a, 0..5), (b, 5..5), (c, 5..8)],
            "every field, and each chunk's place in the payload"
        );
        let short = decode_multi_fetch_response(&header, 7).unwrap_err();
        assert_eq!(
            short,
            DecodeError::Chunks {
                held: 8,
                payload: 7
            },
            "the last chunk overruns"
        );
        let long = decode_multi_fetch_response(&header, 9).unwrap_err();
        assert_eq!(
            long,
            DecodeError::Chunks {
                held: 8,
                payload: 9
            }
        );
        assert!(long.to_string().contains("hold 8 bytes"), "{long}");
    }

    #[test]
    fn a_request_round_trips() {
        let mut fbb = FlatBufferBuilder::new();
        let mut part = FetchPart::consumer("t", 4, 100, 4096);
        part.topic_id = "id".into();
        part.leader_epoch = 3;
        let request = MultiFetch {
            max_bytes: 1 << 20,
            max_wait_ms: 500,
            replica_id: 2,
            incarnation: "inc".into(),
        };
        let header = multi_fetch_request(&mut fbb, &[part], &request).to_vec();
        let r = verify::<wire::MultiFetchRequest>(&header).unwrap();
        let p = r.partitions().unwrap().get(0);
        assert_eq!(
            (
                p.topic(),
                p.topic_id(),
                p.partition(),
                p.offset(),
                p.max_bytes(),
                p.leader_epoch()
            ),
            (Some("t"), Some("id"), 4, 100, 4096, 3)
        );
        assert_eq!(
            (
                r.max_bytes(),
                r.max_wait_ms(),
                r.replica_id(),
                r.replica_incarnation()
            ),
            (1 << 20, 500, 2, Some("inc"))
        );
    }
}
