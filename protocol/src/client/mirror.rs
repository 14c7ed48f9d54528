//! What a mirror asks of its two clusters: a source partition's chunk cut
//! to whole messages with the base of the segment it lies in
//! ([`Client::mirror_read`]), and its verbatim append at the same offset in
//! the target ([`Client::mirror_append`]). Both go to the shard that owns
//! the partition, as ListOffsets does; a broken connection is dropped with
//! the placement that led to it, so the next call finds the partition
//! again (a restarted broker is a pause, not an error).

use super::{lock, Client, ClientError, Connection};
use crate::codec::multi_fetch::{
    decode_multi_fetch_response, multi_fetch_request, FetchPart, MultiFetch,
};
use crate::codec::{self, verify, AckMode, MirrorAppend, PartitionOffsets};
use crate::frame::Api;
use crate::message::MessageSetIter;
use crate::{wire, ErrorCode};

/// A source chunk for a mirror: whole messages only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorChunk {
    /// Where it starts in the source.
    pub offset: u64,
    /// The base offset of the source segment it lies in.
    pub segment_base: u64,
    /// Its whole messages, as the source stores them.
    pub bytes: Vec<u8>,
    /// How many.
    pub messages: u32,
    /// The source partition's offsets when it was read.
    pub offsets: PartitionOffsets,
    /// The source sent bytes but not one whole message: the next message is
    /// larger than the read asked for (read again with more).
    pub cut: bool,
}

impl Client {
    fn with_owner<T>(
        &self,
        topic: &str,
        partition: u32,
        call: impl FnOnce(&mut Connection) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let address = self.placement(topic, partition, false)?;
        let mut owners = lock(&self.shared.owners);
        if !owners.contains_key(&address) {
            let conn = self.open(&address)?;
            owners.insert(address.clone(), conn);
        }
        let Some(conn) = owners.get_mut(&address) else {
            return Err(ClientError::protocol("owner connection vanished"));
        };
        let result = call(conn);
        if let Err(error) = &result {
            if error.is_connection_error()
                || matches!(
                    error.code(),
                    Some(ErrorCode::NotOwner | ErrorCode::NotLeader | ErrorCode::UnknownTopic)
                )
            {
                owners.remove(&address);
                lock(&self.shared.placements).remove(topic);
            }
        }
        result
    }

    /// Reads up to `max_bytes` of `partition` at `offset` for a mirror:
    /// committed bytes only (below the high watermark of a replicated
    /// partition), cut to whole, CRC-checked messages. No messages: the
    /// source has nothing more yet.
    pub fn mirror_read(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_bytes: u32,
    ) -> Result<MirrorChunk, ClientError> {
        self.with_owner(topic, partition, |conn| {
            let parts = [FetchPart::consumer(topic, partition, offset, max_bytes)];
            let request = MultiFetch {
                max_bytes,
                max_wait_ms: 0,
                replica_id: -1,
                incarnation: String::new(),
            };
            let header = multi_fetch_request(&mut conn.fbb, &parts, &request).to_vec();
            let frame = conn.call(Api::MultiFetch, &header, &[])?;
            let mut answer = decode_multi_fetch_response(&frame.header, frame.payload.len())
                .map_err(ClientError::protocol)?;
            if answer.is_empty() {
                return Err(ClientError::protocol(
                    "a MultiFetch answer without its part",
                ));
            }
            let (part, range) = answer.remove(0);
            if part.error != ErrorCode::None {
                return Err(ClientError::Broker {
                    code: part.error,
                    message: part.message,
                    range: (part.error == ErrorCode::OffsetOutOfRange)
                        .then_some((part.offsets.start_offset, part.offsets.end_offset)),
                    owner_broker_id: part.owner,
                });
            }
            let chunk = &frame.payload[range];
            let mut iter = MessageSetIter::new(chunk, offset);
            let mut messages = 0u32;
            for message in iter.by_ref() {
                message.map_err(|e| ClientError::Corrupt {
                    partition: format!("{topic}-{partition}"),
                    source: e,
                })?;
                messages += 1;
            }
            Ok(MirrorChunk {
                offset,
                segment_base: part.segment_base,
                bytes: chunk[..iter.position()].to_vec(),
                messages,
                offsets: part.offsets,
                cut: messages == 0 && !chunk.is_empty(),
            })
        })
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
    ) -> Result<u64, ClientError> {
        self.with_owner(topic, partition, |conn| {
            let at = MirrorAppend {
                offset: chunk.offset,
                segment_base: chunk.segment_base,
            };
            let header =
                codec::mirror_append_request(&mut conn.fbb, topic, partition, acks, at).to_vec();
            let frame = conn.call(Api::Produce, &header, &chunk.bytes)?;
            verify::<wire::ProduceResponse>(&frame.header)
                .map(|r| r.end_offset())
                .map_err(|e| ClientError::protocol(format!("mirror append: {e}")))
        })
    }
}
