//! Mirror appends: a mirror's target topic (created with `mirror_source`)
//! takes a source partition's bytes verbatim at the source's offsets, and
//! nothing else. Offsets are byte positions, so a copy that appends the
//! source's bytes where its own log ends, rolling where the source rolled,
//! is the source's log file by file: a consumer's committed offset means
//! the same message in both clusters (issue 21; `shared/REPLICATION.md`
//! §5). The append itself is a follower's: whole, CRC-checked messages at the
//! log's end, in the source's segment ([`partition_log::append_mirror`]),
//! flushed as the produce's ack mode and the topic's policy say.

use super::Failure;
use crate::shard::Shard;
use crate::storage::partition_log::{self, Appended, SharedLog};
use protocol::codec::MirrorAppend;
use protocol::types::PartitionId;
use protocol::{wire, ErrorCode};

/// What a Produce is to `topic`: an ordinary produce (`None`) or a mirror
/// append. An ordinary produce to a mirror's target is MIRRORED_PARTITION;
/// a mirror append to an ordinary topic is INVALID_REQUEST; a mirror append
/// that names another source than the topic records is MIRRORED_PARTITION
/// (issue 45: a copy never takes a second source's bytes).
pub fn check(
    shard: &Shard,
    topic: &str,
    partition: PartitionId,
    request: &wire::ProduceRequest<'_>,
) -> Result<Option<MirrorAppend>, Failure> {
    let offset = request.mirror_offset();
    let Some(state) = shard.topic(topic) else {
        // Unknown here: the produce path says so.
        return Ok(None);
    };
    let state = state.borrow();
    match (&state.mirror_source, u64::try_from(offset)) {
        (None, Err(_)) => Ok(None),
        (Some(source), Err(_)) => Err(Failure::new(
            ErrorCode::MirroredPartition,
            format!(
                "{topic}-{partition} is a mirror of {source:?}: only its mirror writes it, at the source's offsets, until the topic is promoted"
            ),
        )),
        (None, Ok(_)) => Err(Failure::new(
            ErrorCode::InvalidRequest,
            format!("a mirror append to {topic}-{partition}, which is not a mirror's target (create it with a mirror_source)"),
        )),
        (Some(source), Ok(offset)) => match request.mirror_source() {
            Some(claimed) if !claimed.is_empty() && claimed != source => Err(Failure::new(
                ErrorCode::MirroredPartition,
                format!(
                    "{topic}-{partition} is a mirror of {source:?}, and this append comes from {claimed:?}: nothing stored"
                ),
            )),
            _ => Ok(Some(MirrorAppend {
                offset,
                segment_base: request.mirror_segment_base(),
            })),
        },
    }
}

/// Appends a mirror's chunk where the log ends. An empty log starts at the
/// chunk's offset (the source's retention dropped what came before); a
/// chunk anywhere else is OFFSET_OUT_OF_RANGE naming the end, where the
/// mirror resumes.
pub fn append(
    log: &SharedLog,
    append: MirrorAppend,
    bytes: &[u8],
    messages: u32,
    acks: protocol::codec::AckMode,
) -> Result<Appended, Failure> {
    let MirrorAppend {
        offset,
        segment_base,
    } = append;
    {
        let mut l = log.borrow_mut();
        let (start, end) = (l.start_offset(), l.end_offset());
        if start == end && offset > end {
            l.rebase_empty(offset)?;
        } else if offset != end {
            return Err(Failure {
                range: Some((start, end)),
                ..Failure::new(
                    ErrorCode::OffsetOutOfRange,
                    format!(
                        "{}: a mirror append at {offset}, but the copy ends at {end}: resume there",
                        l.label()
                    ),
                )
            });
        }
        if segment_base > offset {
            return Err(Failure::new(
                ErrorCode::InvalidRequest,
                format!(
                    "{}: mirror_segment_base {segment_base} is past the chunk's offset {offset}",
                    l.label()
                ),
            ));
        }
    }
    Ok(partition_log::append_mirror(
        log,
        offset,
        bytes,
        messages,
        segment_base,
        acks,
    )?)
}

/// Handles a PromoteMirror request: the topic stops being a mirror's
/// target and takes ordinary produces ([`crate::control`] rewrites its
/// record, keeping what it was and the ends the request gives: where a
/// failback cuts the old source).
pub fn handle_promote(
    shard: &std::rc::Rc<Shard>,
    header: &[u8],
) -> Result<super::Dispatched, Failure> {
    let api = protocol::frame::Api::PromoteMirror;
    let request = protocol::codec::verify::<wire::PromoteMirrorRequest>(header)
        .map_err(|e| super::invalid_header(api, e))?;
    let name = request.topic().unwrap_or_default().to_string();
    protocol::types::validate_topic_name(&name)
        .map_err(|e| Failure::new(ErrorCode::InvalidTopicName, e.to_string()))?;
    let (reply, answer) = flume::bounded(1);
    let msg = crate::mailbox::ControlMsg::PromoteMirror {
        name: name.clone(),
        ends: request
            .ends()
            .map(|e| e.iter().collect())
            .unwrap_or_default(),
        reply,
    };
    let shard = shard.clone();
    Ok(super::Dispatched::Later(Box::pin(async move {
        let source = match super::topics::ask_control(&shard, msg, answer).await {
            Ok(source) => source,
            Err(error) => {
                return Some(Failure::new(error.code, error.message).response(api as u16))
            }
        };
        let header = super::with_builder(&shard, |fbb| {
            protocol::codec::operations::promote_mirror_response(fbb, &name, &source).to_vec()
        });
        Some(super::Response {
            api: api as u16,
            error: 0,
            header,
            payload: super::Payload::None,
        })
    })))
}
