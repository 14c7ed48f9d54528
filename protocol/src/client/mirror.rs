//! What a mirror asks of its two clusters: chunks of source partitions cut
//! to whole messages, with the base of the segment each lies in, many
//! partitions of one source shard in one long-polling MultiFetch
//! ([`Client::mirror_read_many`]); and each chunk's verbatim append at the
//! same offset in the target ([`Client::mirror_append`]). Both go to the
//! shard that owns the partition, as ListOffsets does; a broken connection
//! is dropped with the placements that led to it, so the next call finds
//! the partitions again (a restarted broker is a pause, not an error).

use super::{lock, Client, ClientError, Connection};
use crate::codec::multi_fetch::{
    decode_multi_fetch_response, multi_fetch_request, FetchPart, MultiFetch,
};
use crate::codec::{self, verify, AckMode, MirrorAppend, PartitionOffsets};
use crate::frame::Api;
use crate::{wire, ErrorCode};
use bytes::Bytes;
use std::time::Duration;

/// A source chunk for a mirror: whole messages only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorChunk {
    /// Where it starts in the source.
    pub offset: u64,
    /// The base offset of the source segment it lies in.
    pub segment_base: u64,
    /// Its whole messages, as the source stores them (a slice of the
    /// answer's buffer: not copied again on the way to the target).
    pub bytes: Bytes,
    /// How many.
    pub messages: u32,
    /// The source partition's offsets when it was read.
    pub offsets: PartitionOffsets,
    /// The source sent bytes but not one whole message: the next message is
    /// larger than the read asked for (read again with more).
    pub cut: bool,
    /// The leader epoch every byte of the chunk was written in (-1: a
    /// partition of one copy): sent back as the next read's
    /// `last_epoch`.
    pub epoch: i32,
    /// The source's history forked below the read's offset (an unclean
    /// election): the epoch `last_epoch` named ends in the source's log at
    /// this offset, and the source holds other bytes from there.
    pub forked_at: Option<u64>,
}

/// One partition of a mirror's read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorRead {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// Where to read.
    pub offset: u64,
    /// At most this many bytes of it.
    pub max_bytes: u32,
    /// What the topic stores (how a chunk is cut to whole units).
    pub format: crate::stored::MessageFormat,
    /// The topic's id (empty: unchecked): a topic deleted and created
    /// again under the name answers UNKNOWN_TOPIC_ID instead of its bytes.
    pub topic_id: String,
    /// The epoch of the last chunk copied before `offset` (-1: unknown):
    /// the source checks that this epoch reaches `offset` in its log, as
    /// for a consumer (KIP-320), and says where its history forked if not.
    pub last_epoch: i32,
}

/// The most a mirror's read asks for in all (a broker caps an answer at
/// its own limit too); partitions past it in the request answer nothing
/// this time, so a caller turns the order round between reads.
const READ_MANY_BYTES_MAX: u32 = 8 << 20;

/// The longest a read is held for news (a broker caps it at this too).
const WAIT_MAX: Duration = Duration::from_secs(60);

impl Client {
    /// The address of the shard that serves `partition`'s reads and
    /// appends (Metadata's placement, cached unless `fresh`): a mirror
    /// reads the partitions of one shard together, and asks afresh after a
    /// read failed (its workers' connections are not this client's, so
    /// their failures do not clear this cache).
    pub fn shard_address(
        &self,
        topic: &str,
        partition: u32,
        fresh: bool,
    ) -> Result<String, ClientError> {
        self.placement(topic, partition, fresh)
    }

    /// Runs `call` on the connection to `address`; a failure that says the
    /// placement is stale forgets `address`'s connection and the
    /// placements of `topics`.
    fn on_owner<T>(
        &self,
        address: &str,
        topics: &[&str],
        call: impl FnOnce(&mut Connection) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let mut owners = lock(&self.shared.owners);
        if !owners.contains_key(address) {
            let conn = self.open(address)?;
            owners.insert(address.to_string(), conn);
        }
        let Some(conn) = owners.get_mut(address) else {
            return Err(ClientError::protocol("owner connection vanished"));
        };
        let result = call(conn);
        if let Err(error) = &result {
            // A frame too large is answered, then the connection closed.
            if error.is_connection_error()
                || stale_placement(error)
                || error.code() == Some(ErrorCode::FrameTooLarge)
            {
                owners.remove(address);
                let mut placements = lock(&self.shared.placements);
                for topic in topics {
                    placements.remove(*topic);
                }
            }
        }
        result
    }

    fn with_owner<T>(
        &self,
        topic: &str,
        partition: u32,
        call: impl FnOnce(&mut Connection) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let address = self.placement(topic, partition, false)?;
        self.on_owner(&address, &[topic], call)
    }

    /// Reads up to `max_bytes` of `partition` at `offset` for a mirror, as
    /// [`Client::mirror_read_many`] does for many, without waiting.
    pub fn mirror_read(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_bytes: u32,
    ) -> Result<MirrorChunk, ClientError> {
        let address = self.placement(topic, partition, false)?;
        let format = self
            .metadata(&[topic])?
            .topics
            .first()
            .and_then(|t| crate::stored::MessageFormat::from_number(t.settings.message_format))
            .unwrap_or_default();
        let read = MirrorRead {
            topic: topic.to_string(),
            partition,
            offset,
            max_bytes,
            format,
            topic_id: String::new(),
            last_epoch: -1,
        };
        let mut answers = self.mirror_read_many(&address, &[read], Duration::ZERO)?;
        answers.pop().unwrap_or_else(|| {
            Err(ClientError::protocol(
                "a MultiFetch answer without its part",
            ))
        })
    }

    /// Reads `parts`, all served by the shard at `address`
    /// ([`Client::shard_address`]), in one MultiFetch: committed bytes only
    /// (below the high watermark of a replicated partition), each cut to
    /// whole messages. When none has anything, the shard holds the answer
    /// up to `wait` (capped at a minute) for the first to get some. An
    /// answer per part, in order: a chunk (no messages: the source has
    /// nothing more yet) or that partition's error; the outer error is the
    /// request's (a broken connection, a timeout).
    ///
    /// The CRCs are not checked here: the target checks every message of
    /// a mirror append, so a corrupt source byte is refused there.
    #[expect(
        clippy::too_many_lines,
        reason = "one MultiFetch over a mirror's partitions, each part checked and cut to whole messages"
    )]
    pub fn mirror_read_many(
        &self,
        address: &str,
        parts: &[MirrorRead],
        wait: Duration,
    ) -> Result<Vec<Result<MirrorChunk, ClientError>>, ClientError> {
        let wait = wait.min(WAIT_MAX);
        let topics: Vec<&str> = parts.iter().map(|p| p.topic.as_str()).collect();
        let answers = self.on_owner(address, &topics, |conn| {
            let fetch: Vec<FetchPart> = parts
                .iter()
                .map(|p| FetchPart {
                    topic_id: p.topic_id.clone(),
                    last_fetched_epoch: p.last_epoch,
                    ..FetchPart::consumer(&p.topic, p.partition, p.offset, p.max_bytes)
                })
                .collect();
            // The sum, within the cap; one part larger than the cap (a
            // large message) still gets its room.
            let largest = parts.iter().map(|p| p.max_bytes).max().unwrap_or(0);
            let total = parts
                .iter()
                .map(|p| p.max_bytes)
                .fold(0u32, u32::saturating_add)
                .min(READ_MANY_BYTES_MAX.max(largest));
            let request = MultiFetch {
                max_bytes: total,
                max_wait_ms: wait.as_millis() as u32,
                replica_id: -1,
                incarnation: String::new(),
            };
            let header = multi_fetch_request(&mut conn.fbb, &fetch, &request).to_vec();
            conn.expect_wait(wait)?;
            let frame = conn.call(Api::MultiFetch, &header, &[]);
            conn.expect_wait(Duration::ZERO)?;
            let mut frame = frame?;
            let answer = decode_multi_fetch_response(&frame.header, frame.payload.len())
                .map_err(|e| ClientError::protocol(e.to_string()))?;
            if answer.len() != parts.len() {
                return Err(ClientError::protocol(format!(
                    "a MultiFetch of {} partitions answered {}",
                    parts.len(),
                    answer.len()
                )));
            }
            let payload = Bytes::from(std::mem::take(&mut frame.payload));
            Ok(answer
                .into_iter()
                .zip(parts)
                .map(|((part, range), asked)| {
                    if part.error != ErrorCode::None {
                        return Err(ClientError::Broker {
                            code: part.error,
                            message: part.message,
                            range: (part.error == ErrorCode::OffsetOutOfRange)
                                .then_some((part.offsets.start_offset, part.offsets.end_offset)),
                            owner_broker_id: part.owner,
                        });
                    }
                    let chunk = payload.slice(range);
                    let partition = format!("{}-{}", asked.topic, asked.partition);
                    let (whole, messages) = crate::stored::framed_units(asked.format, &chunk)
                        .map_err(|source| ClientError::Corrupt { partition, source })?;
                    Ok(MirrorChunk {
                        offset: asked.offset,
                        segment_base: part.segment_base,
                        cut: messages == 0 && !chunk.is_empty(),
                        bytes: chunk.slice(..whole),
                        messages,
                        offsets: part.offsets,
                        epoch: part.chunk_epoch,
                        forked_at: part.diverging.map(|(_, at)| at),
                    })
                })
                .collect::<Vec<_>>())
        })?;
        // A partition that moved: its placement is looked up again.
        let mut placements = lock(&self.shared.placements);
        for (answer, asked) in answers.iter().zip(parts) {
            if let Err(error) = answer {
                if stale_placement(error) {
                    placements.remove(&asked.topic);
                }
            }
        }
        Ok(answers)
    }

    /// Appends `chunk` verbatim to a mirror's target partition at the
    /// chunk's offset, which must be where the copy ends
    /// (OFFSET_OUT_OF_RANGE names the end otherwise); returns the copy's
    /// new end.
    pub fn mirror_append(
        &self,
        topic: &str,
        partition: u32,
        chunk: &MirrorChunk,
        acks: AckMode,
        source: &str,
    ) -> Result<u64, ClientError> {
        self.with_owner(topic, partition, |conn| {
            let at = MirrorAppend {
                offset: chunk.offset,
                segment_base: chunk.segment_base,
            };
            let header =
                codec::mirror_append_request(&mut conn.fbb, topic, partition, acks, at, source)
                    .to_vec();
            let frame = conn.call(Api::Produce, &header, &chunk.bytes)?;
            verify::<wire::ProduceResponse>(&frame.header)
                .map(|r| r.end_offset())
                .map_err(|e| ClientError::protocol(format!("mirror append: {e}")))
        })
    }
}

/// A partition's answer that says it lives elsewhere now.
fn stale_placement(error: &ClientError) -> bool {
    matches!(
        error.code(),
        Some(ErrorCode::NotOwner | ErrorCode::NotLeader | ErrorCode::UnknownTopic)
    )
}
