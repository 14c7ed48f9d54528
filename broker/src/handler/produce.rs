//! Produce: validate a message set (every length and CRC) and append it to
//! the partition's log, then acknowledge as the request asked: not at all
//! (the paper's mode), once written to the page cache, or once flushed.

use super::forward::forward;
use super::{invalid_header, Dispatched, Failure, Payload, Response};
use crate::limits::PENDING_BYTES_MAX;
use crate::shard::{Owner, Shard};
use crate::storage::partition_log::{self, Appended, NotStored, SharedLog};
use crate::storage::producers::{SequenceError, Sequenced};
use protocol::batch::sequence::Numbered;
use protocol::codec::{verify, AckMode};
use protocol::frame::Api;
use protocol::message::{validate_message_set, MessageSetSummary};
use protocol::stored::{whole_units, MessageFormat};
use protocol::{wire, ErrorCode};
use std::rc::Rc;
use std::time::Instant;

/// Handles a Produce request.
#[expect(
    clippy::too_many_lines,
    reason = "a produce's checks in the order PROTOCOL.md states them, then the append"
)]
pub fn handle(
    shard: &Rc<Shard>,
    request_id: u32,
    header: &[u8],
    payload: &[u8],
) -> Result<Dispatched, Failure> {
    let request =
        verify::<wire::ProduceRequest>(header).map_err(|e| invalid_header(Api::Produce, e))?;
    let topic_name = request.topic().unwrap_or_default();
    let partition = request.partition();
    let Some(acks) = AckMode::from_wire(request.acks()) else {
        return Err(Failure::new(
            ErrorCode::InvalidRequest,
            format!("unknown ack mode {}", request.acks().0),
        ));
    };
    super::check_topic_id(shard, topic_name, request.topic_id())?;
    let owner = super::locate(shard, topic_name, partition)?;
    let mirror = super::mirror::check(shard, topic_name, partition, &request)?;
    if let Owner::Broker(broker) = owner {
        return Err(Failure::not_owner(topic_name, partition, broker));
    }
    // Checked before any forwarding too, so a bad set is refused at once
    // whichever shard the client talks to.
    // The log's own when it is here (no second lookup by name on the hot
    // path); the topic's when the request is forwarded.
    let format = match &owner {
        Owner::Here(log) => log.borrow().settings().format,
        Owner::Shard(_) | Owner::Broker(_) => shard
            .topic(topic_name)
            .map_or(MessageFormat::One, |t| t.borrow().settings.format),
    };
    let (summary, numbered) =
        check_payload(format, payload, mirror.map(|m| m.offset)).map_err(|e| {
            Failure::new(
                ErrorCode::CorruptMessage,
                format!("{topic_name}-{partition}: {e}"),
            )
        })?;
    if summary.largest_bytes > shard.config.message_bytes_max {
        return Err(Failure::new(
            ErrorCode::MessageTooLarge,
            format!(
                "a message of {} bytes exceeds the broker's message_bytes_max of {}",
                summary.largest_bytes, shard.config.message_bytes_max
            ),
        ));
    }
    let log = match owner {
        Owner::Here(log) => log,
        // Forwarded with a reply channel in every ack mode: an `acks = none`
        // produce that fails on the owner (storage refusing writes) is
        // answered like a local one, in its place in the order; a success
        // stays silent (issue 8, item 12).
        Owner::Shard(owner) => {
            return forward(
                shard,
                owner,
                Api::Produce as u16,
                request_id,
                header,
                payload,
            );
        }
        Owner::Broker(broker) => return Err(Failure::not_owner(topic_name, partition, broker)),
    };
    let appending = append_checked(
        shard,
        log,
        Checked {
            topic: topic_name,
            partition,
            acks,
            leader_epoch: request.leader_epoch(),
            payload,
            summary,
            numbered,
            mirror,
        },
    )?;
    Ok(match appending {
        Appending::Silent => Dispatched::Silent,
        Appending::Throttle(wait) => Dispatched::Throttle(wait),
        Appending::Acked(acked) => {
            let shard = shard.clone();
            Dispatched::Later(Box::pin(async move {
                Some(match acked.await {
                    Ok(Acked {
                        base, end, count, ..
                    }) => {
                        let header = super::with_builder(&shard, |fbb| {
                            protocol::codec::produce_response(fbb, base, end, count).to_vec()
                        });
                        Response {
                            api: Api::Produce as u16,
                            error: 0,
                            header,
                            payload: Payload::None,
                        }
                    }
                    Err(failure) => failure.response(Api::Produce as u16),
                })
            }))
        }
    })
}

/// A produce's checked bytes and what it asks, for [`append_checked`].
pub struct Checked<'a> {
    /// The topic.
    pub topic: &'a str,
    /// The partition.
    pub partition: protocol::types::PartitionId,
    /// When to answer.
    pub acks: AckMode,
    /// The leader epoch the producer knows (-1: any).
    pub leader_epoch: i32,
    /// The message set or batches, checked by [`check_payload`].
    pub payload: &'a [u8],
    /// What the check found.
    pub summary: MessageSetSummary,
    /// An idempotent producer's numbers.
    pub numbered: Option<Numbered>,
    /// A mirror's append: where its source stored the bytes.
    pub mirror: Option<protocol::codec::MirrorAppend>,
}

/// A produce's acknowledgement: where its bytes were stored.
#[derive(Debug, Clone, Copy)]
pub struct Acked {
    /// The offset of its first byte.
    pub base: u64,
    /// The offset after its last byte.
    pub end: u64,
    /// Messages (format 2: records).
    pub count: u32,
    /// A LogAppendTime topic's: the time stamped into its batches.
    pub append_time: Option<i64>,
}

/// What appending a produce came to.
pub enum Appending {
    /// Appended, nothing to answer (`acks = none`).
    Silent,
    /// Appended, nothing to answer, and the connection reads nothing more
    /// until this resolves (the disk is behind).
    Throttle(std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>),
    /// The acknowledgement, once the bytes are as stored as `acks` asks.
    Acked(std::pin::Pin<Box<dyn std::future::Future<Output = Result<Acked, Failure>>>>),
}

/// Appends a checked produce to its partition's log on this shard — the
/// leader's checks, an idempotent producer's sequence, the append — and
/// says when it is acknowledged. Every protocol's produce ends here.
#[expect(
    clippy::too_many_lines,
    reason = "the leader's checks, the sequence, the append and the ack in the order a produce meets them"
)]
pub fn append_checked(
    shard: &Rc<Shard>,
    log: SharedLog,
    checked: Checked<'_>,
) -> Result<Appending, Failure> {
    let Checked {
        topic: topic_name,
        partition,
        acks,
        leader_epoch,
        payload,
        summary,
        numbered,
        mirror,
    } = checked;
    let replica = shard.replica(topic_name, partition);
    if let Some(replica) = &replica {
        super::replicated::check_leader(replica, leader_epoch)?;
        super::replicated::check_lease(shard, replica)?;
        super::replicated::check_transfer(replica)?;
        if acks == AckMode::All {
            super::replicated::check_insync(replica)?;
        }
    }
    let started = Instant::now();
    if let Some(numbered) = numbered {
        let sequenced = log.borrow().producers().check(numbered);
        match sequenced {
            Ok(Sequenced::New) => {}
            Ok(Sequenced::Duplicate { base, end }) => {
                crate::metrics::bump(&shard.metrics.counters.produce_duplicates_total, 1);
                return Ok(acknowledge(
                    shard,
                    log,
                    replica,
                    acks,
                    base,
                    end,
                    summary.count,
                    started,
                ));
            }
            Err(error) => {
                let code = match error {
                    SequenceError::Fenced { .. } => ErrorCode::InvalidProducerEpoch,
                    SequenceError::OutOfOrder { .. } => ErrorCode::OutOfOrderSequence,
                };
                return Err(Failure::new(
                    code,
                    format!("{topic_name}-{partition}: {error}"),
                ));
            }
        }
    }
    // acks=all is a flushed produce here, then a wait for the copies; on one
    // copy it is just that. A write-caching topic's is a written one.
    let local_acks = match acks {
        AckMode::All if log.borrow().write_caching() => AckMode::Written,
        AckMode::All => AckMode::Flushed,
        other => other,
    };
    // The log starts the writer or a flush as `acks` and the topic's flush
    // policy require (storage owns the policy, issue 8, item 18).
    let appended = match mirror {
        Some(at) => super::mirror::append(&log, at, payload, summary.count, local_acks)?,
        None => partition_log::append(&log, payload, summary.count, local_acks)?,
    };
    shard.needs_timer(&log);
    let counters = &shard.metrics.counters;
    crate::metrics::bump(&counters.produce_messages_total, u64::from(summary.count));
    crate::metrics::bump(&counters.produce_bytes_total, payload.len() as u64);
    if acks == AckMode::None {
        if log.borrow().unwritten_bytes() < PENDING_BYTES_MAX {
            return Ok(Appending::Silent);
        }
        // The disk is behind the producers: stop reading this connection
        // until the sync task has written the backlog down to half.
        let watermarks = log.borrow().watermarks();
        return Ok(Appending::Throttle(Box::pin(async move {
            watermarks
                .wait_until(|| {
                    let l = log.borrow();
                    l.unwritten_bytes() < PENDING_BYTES_MAX / 2 || l.poisoned().is_some()
                })
                .await;
        })));
    }
    let shard = shard.clone();
    let count = summary.count;
    // The epoch the messages were appended in: they are acknowledged only
    // by a high watermark of that epoch (see `replica::leader::replicated`).
    let replicated = replica.filter(|_| acks == AckMode::All).map(|r| {
        let epoch = r.borrow().epoch();
        (r, epoch)
    });
    Ok(Appending::Acked(Box::pin(async move {
        await_ack(
            &shard, &log, local_acks, appended, count, started, replicated,
        )
        .await
    })))
}

/// The answer to an idempotent producer's retried batch, which the log
/// holds at `[base, end)`: its original offsets, once they are as stored
/// as `acks` asks (the first attempt's answer may be what was lost, and
/// may have asked for less). Nothing is appended.
#[expect(
    clippy::too_many_arguments,
    reason = "a produce's answer: where it waits, what it waits for, what it says"
)]
fn acknowledge(
    shard: &Rc<Shard>,
    log: SharedLog,
    replica: Option<crate::replica::SharedReplica>,
    acks: AckMode,
    base: u64,
    end: u64,
    count: u32,
    started: Instant,
) -> Appending {
    let local_acks = match acks {
        AckMode::All if log.borrow().write_caching() => AckMode::Written,
        AckMode::All => AckMode::Flushed,
        other => other,
    };
    let appended = partition_log::appended_before(&log, base, end, local_acks);
    if acks == AckMode::None {
        return Appending::Silent;
    }
    // In the epoch leading now: a high watermark of it past `end` commits
    // the bytes this leader holds there, which are the batch.
    let replicated = replica.filter(|_| acks == AckMode::All).map(|r| {
        let epoch = r.borrow().epoch();
        (r, epoch)
    });
    let shard = shard.clone();
    Appending::Acked(Box::pin(async move {
        await_ack(
            &shard, &log, local_acks, appended, count, started, replicated,
        )
        .await
    }))
}

/// Why a produce's bytes are refused (CORRUPT_MESSAGE).
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    /// A format-1 message set that is not whole, valid messages.
    #[error(transparent)]
    Messages(#[from] protocol::message::MessageError),
    /// A format-2 batch a producer should not have written so.
    #[error("batch at byte {position}: {error}")]
    Batch {
        /// Where in the request.
        position: usize,
        /// What is wrong.
        error: protocol::batch::BatchError,
    },
    /// A mirror's chunk that is not its source's stored batches.
    #[error(transparent)]
    Stored(#[from] protocol::stored::StoredError),
    /// A mirror's chunk that ends inside a batch.
    #[error("a mirrored chunk of {len} bytes holds {whole} bytes of whole batches")]
    Partial {
        /// Its bytes.
        len: usize,
        /// Those of whole batches.
        whole: usize,
    },
    /// Nothing.
    #[error("no batch: a produce to a format-2 topic carries record batches v2")]
    Empty,
    /// An idempotent producer's batch with others.
    #[error("{batches} batches, one of them an idempotent producer's: its batch must be the only one in its produce request")]
    NumberedNotAlone {
        /// Batches in the request.
        batches: usize,
    },
}

/// Checks a produce's bytes as the topic's format wants them: whole, valid
/// messages (format 1); whole batches as a producer writes them, or — from
/// a mirror, at `mirror_offset` — as its source stored them (format 2).
///
/// With it, an idempotent producer's numbers: its batch must be the only
/// one (as Kafka's produce requests carry one batch per partition), so a
/// retry is the same request and is answered as one.
pub fn check_payload(
    format: MessageFormat,
    payload: &[u8],
    mirror_offset: Option<u64>,
) -> Result<(MessageSetSummary, Option<Numbered>), PayloadError> {
    use protocol::batch::produce::{batches, check};
    match (format, mirror_offset) {
        (MessageFormat::One, _) => Ok((validate_message_set(payload)?, None)),
        (MessageFormat::Two, Some(offset)) => {
            let (whole, count) = whole_units(format, payload, offset)?;
            if whole != payload.len() || count == 0 {
                return Err(PayloadError::Partial {
                    len: payload.len(),
                    whole,
                });
            }
            let largest_bytes = batches(payload)
                .filter_map(Result::ok)
                .map(|(_, h)| h.size)
                .max()
                .unwrap_or(0);
            Ok((
                MessageSetSummary {
                    count,
                    largest_bytes,
                },
                None,
            ))
        }
        (MessageFormat::Two, None) => {
            let mut count = 0u32;
            let mut largest_bytes = 0;
            let mut next = 0;
            let mut numbered = None;
            let mut batch_count = 0usize;
            for found in batches(payload) {
                let (position, header) = found.map_err(|error| PayloadError::Batch {
                    position: next,
                    error,
                })?;
                check(&payload[position..position + header.size])
                    .map_err(|error| PayloadError::Batch { position, error })?;
                count = count.saturating_add(header.record_count as u32);
                largest_bytes = largest_bytes.max(header.size);
                next = position + header.size;
                batch_count += 1;
                numbered = numbered.or(Numbered::of(&header));
            }
            if count == 0 {
                return Err(PayloadError::Empty);
            }
            if numbered.is_some() && batch_count > 1 {
                return Err(PayloadError::NumberedNotAlone {
                    batches: batch_count,
                });
            }
            Ok((
                MessageSetSummary {
                    count,
                    largest_bytes,
                },
                numbered,
            ))
        }
    }
}

async fn await_ack(
    shard: &Shard,
    log: &SharedLog,
    acks: AckMode,
    appended: Appended,
    count: u32,
    started: Instant,
    replicated: Option<(crate::replica::SharedReplica, u32)>,
) -> Result<Acked, Failure> {
    let Appended {
        base,
        end,
        append_time,
        ..
    } = appended;
    if let Err(not_stored) = partition_log::stored(log, appended, acks).await {
        crate::metrics::bump(&shard.metrics.counters.request_errors_total, 1);
        let label = log.borrow().label().to_string();
        let failure = match not_stored {
            // A topic deleted under a waiting produce is not a failed disk.
            NotStored::Deleted => Failure::new(
                ErrorCode::UnknownTopic,
                format!(
                    "{label}: the topic was deleted while this produce waited for its acknowledgement"
                ),
            ),
            NotStored::Dropped(reason) => Failure::new(
                ErrorCode::StorageUnavailable,
                format!("{label}: not stored: {reason}; retry after a back-off"),
            ),
            NotStored::Failed(reason) => Failure::new(ErrorCode::StorageFailed, reason),
        };
        return Err(failure);
    }
    if let Some((replica, epoch)) = replicated {
        if let Err(failure) = super::replicated::await_replicated(&replica, end, epoch).await {
            crate::metrics::bump(&shard.metrics.counters.request_errors_total, 1);
            return Err(failure);
        }
    }
    crate::metrics::record_us(
        &shard.metrics.produce_latency_us,
        started.elapsed().as_micros() as u64,
    );
    Ok(Acked {
        base,
        end,
        count,
        append_time,
    })
}
