//! Produce (v3–8): each partition's record batches are checked and
//! appended as a native produce's are (`handler::produce`), verbatim but
//! for the three header fields the broker sets; the answer's base offset is
//! the batch's byte position. acks 0, 1 and -1 are ringlog's none, written
//! and all. A Kafka idempotent producer's batches are de-duplicated by the
//! same five-batch memory as ringlog's own producer's.

use super::errors::{code, kafka_code};
use super::versions::key;
use super::wire::{Malformed, Reader, Writer};
use crate::auth::authorize::may;
use crate::handler::produce::{append_checked, check_payload, Acked, Appending, Checked};
use crate::handler::Failure;
use crate::reply::Dispatched;
use crate::shard::{Owner, Shard};
use protocol::acl::{Operation, ResourceType};
use protocol::codec::AckMode;
use protocol::stored::MessageFormat;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

type Acking = Pin<Box<dyn Future<Output = Result<Acked, Failure>>>>;

/// One partition's outcome so far.
enum Outcome {
    /// Answered now: an error code and message.
    Refused(i16, String),
    /// Appended without an answer (acks 0).
    Appended,
    /// Appended; answered once stored as asked.
    Acking(Acking),
    /// Appended (acks 0) while the disk is behind: read nothing more from
    /// the connection until this resolves.
    Throttled(Pin<Box<dyn Future<Output = ()>>>),
}

/// Handles a Produce request.
pub fn handle(
    shard: &Rc<Shard>,
    version: i16,
    r: &mut Reader<'_>,
    principal: &str,
) -> Result<Dispatched, Malformed> {
    let transactional_id = r.nullable_string("transactional_id")?;
    let acks_wire = r.i16("acks")?;
    let _timeout_ms = r.i32("timeout_ms")?;
    let acks = match acks_wire {
        0 => Some(AckMode::None),
        1 => Some(AckMode::Written),
        -1 => Some(AckMode::All),
        _ => None,
    };
    let topic_count = r.array(6, "topic_data")?.unwrap_or(0);
    let mut topics: Vec<(String, Vec<(i32, Outcome)>)> = Vec::with_capacity(topic_count);
    for _ in 0..topic_count {
        let name = r.string("topic name")?;
        let count = r.array(8, "partition_data")?.unwrap_or(0);
        let mut partitions = Vec::with_capacity(count);
        for _ in 0..count {
            let partition = r.i32("partition index")?;
            let records = r.nullable_bytes("records")?;
            let outcome = match (acks, transactional_id) {
                (None, _) => Outcome::Refused(
                    code::INVALID_REQUIRED_ACKS,
                    format!("acks {acks_wire}: only 0, 1 and -1 are known"),
                ),
                (Some(_), Some(_)) => Outcome::Refused(
                    code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "transactions are not supported by ringlog".into(),
                ),
                (Some(acks), None) => {
                    produce_partition(shard, principal, name, partition, acks, records)
                }
            };
            partitions.push((partition, outcome));
        }
        topics.push((name.to_string(), partitions));
    }
    if acks == Some(AckMode::None) {
        return Ok(unanswered(topics));
    }
    let shard = shard.clone();
    Ok(Dispatched::Later(Box::pin(async move {
        let mut answered = Vec::with_capacity(topics.len());
        for (name, partitions) in topics {
            let mut done = Vec::with_capacity(partitions.len());
            for (partition, outcome) in partitions {
                let result = match outcome {
                    Outcome::Refused(error, message) => Err((error, message)),
                    Outcome::Acking(acking) => {
                        acking.await.map_err(|f| (kafka_code(f.code), f.message))
                    }
                    // acks 1 and -1 always wait for an acknowledgement.
                    Outcome::Appended | Outcome::Throttled(_) => {
                        Err((code::UNKNOWN_SERVER_ERROR, "no acknowledgement".into()))
                    }
                };
                done.push((partition, result));
            }
            answered.push((name, done));
        }
        Some(super::wire::answer(
            key::PRODUCE,
            answer(&shard, version, &answered),
            crate::reply::Payload::None,
        ))
    })))
}

/// An acks=0 produce: no answer at all, as Kafka (the producer asked for
/// none; a failure is counted and logged by the append path), but the
/// connection waits while the disk is behind.
fn unanswered(topics: Vec<(String, Vec<(i32, Outcome)>)>) -> Dispatched {
    let throttles: Vec<_> = topics
        .into_iter()
        .flat_map(|(_, partitions)| partitions)
        .filter_map(|(_, outcome)| match outcome {
            Outcome::Throttled(wait) => Some(wait),
            _ => None,
        })
        .collect();
    if throttles.is_empty() {
        return Dispatched::Silent;
    }
    Dispatched::Throttle(Box::pin(async move {
        for wait in throttles {
            wait.await;
        }
    }))
}

type Answered = Vec<(String, Vec<(i32, Result<Acked, (i16, String)>)>)>;

/// The answer's body.
fn answer(shard: &Shard, version: i16, answered: &Answered) -> Vec<u8> {
    let mut w = Writer::default();
    w.array(answered.len());
    for (name, partitions) in answered {
        w.string(name);
        w.array(partitions.len());
        for (partition, result) in partitions {
            w.i32(*partition);
            let (error, base, time, message) = match result {
                Ok(acked) => (
                    code::NONE,
                    acked.base as i64,
                    acked.append_time.unwrap_or(-1),
                    None,
                ),
                Err((error, message)) => (*error, -1, -1, Some(message.as_str())),
            };
            w.i16(error);
            w.i64(base);
            // log_append_time_ms: the broker's time on a LogAppendTime
            // topic, -1 where the producer's times are kept.
            w.i64(time);
            if version >= 5 {
                w.i64(log_start(shard, name, *partition));
            }
            if version >= 8 {
                w.array(0); // record_errors
                w.nullable_string(message);
            }
        }
    }
    w.i32(0); // throttle_time_ms
    w.out
}

/// The partition's first offset (-1 when it is not here).
fn log_start(shard: &Shard, topic: &str, partition: i32) -> i64 {
    match u32::try_from(partition).map(|p| shard.locate(topic, p)) {
        Ok(Ok(Owner::Here(log))) => log.borrow().start_offset() as i64,
        _ => -1,
    }
}

/// Checks and appends one partition's batches.
fn produce_partition(
    shard: &Rc<Shard>,
    principal: &str,
    topic: &str,
    partition: i32,
    acks: AckMode,
    records: Option<&[u8]>,
) -> Outcome {
    match try_produce(shard, principal, topic, partition, acks, records) {
        Ok(Appending::Silent) => Outcome::Appended,
        Ok(Appending::Throttle(wait)) => Outcome::Throttled(wait),
        Ok(Appending::Acked(acking)) => Outcome::Acking(acking),
        Err((error, message)) => Outcome::Refused(error, message),
    }
}

/// The log of a partition this shard leads that `principal` may write
/// Kafka's batches to, or why not.
fn writable_log(
    shard: &Shard,
    principal: &str,
    topic: &str,
    partition: i32,
) -> Result<(crate::storage::SharedLog, u32), (i16, String)> {
    let refused = |f: Failure| (kafka_code(f.code), f.message);
    if !may(
        shard,
        principal,
        ResourceType::Topic,
        topic,
        Operation::Write,
    ) {
        return Err((
            code::TOPIC_AUTHORIZATION_FAILED,
            format!("{principal} may not write to topic {topic:?}"),
        ));
    }
    let Ok(partition) = u32::try_from(partition) else {
        return Err((
            code::UNKNOWN_TOPIC_OR_PARTITION,
            format!("partition {partition} of {topic:?}"),
        ));
    };
    let log = match crate::handler::locate(shard, topic, partition).map_err(refused)? {
        Owner::Here(log) => log,
        Owner::Shard(_) | Owner::Broker(_) => {
            return Err((
                code::NOT_LEADER_OR_FOLLOWER,
                format!("{topic}-{partition} is led elsewhere: refresh metadata"),
            ))
        }
    };
    if let Some(source) = shard
        .topic(topic)
        .and_then(|t| t.borrow().mirror_source.clone())
    {
        return Err((
            code::POLICY_VIOLATION,
            format!("{topic} is a mirror of {source:?}: only its mirror writes it"),
        ));
    }
    if log.borrow().settings().format != MessageFormat::Two {
        return Err((
            code::UNSUPPORTED_FOR_MESSAGE_FORMAT,
            format!("{topic} stores the paper's messages (format 1); Kafka's clients write record batches v2: create the topic with --message-format 2"),
        ));
    }
    Ok((log, partition))
}

fn try_produce(
    shard: &Rc<Shard>,
    principal: &str,
    topic: &str,
    partition: i32,
    acks: AckMode,
    records: Option<&[u8]>,
) -> Result<Appending, (i16, String)> {
    let refused = |f: Failure| (kafka_code(f.code), f.message);
    let (log, partition) = writable_log(shard, principal, topic, partition)?;
    let Some(payload) = records else {
        return Err((code::INVALID_RECORD, "no records".into()));
    };
    let (summary, numbered) = check_payload(MessageFormat::Two, payload, None)
        .map_err(|e| (code::INVALID_RECORD, format!("{topic}-{partition}: {e}")))?;
    if summary.largest_bytes > shard.config.message_bytes_max {
        return Err((
            code::MESSAGE_TOO_LARGE,
            format!(
                "a batch of {} bytes exceeds the broker's message_bytes_max of {}",
                summary.largest_bytes, shard.config.message_bytes_max
            ),
        ));
    }
    append_checked(
        shard,
        log,
        Checked {
            topic,
            partition,
            acks,
            leader_epoch: -1,
            payload,
            summary,
            numbered,
            mirror: None,
        },
    )
    .map_err(refused)
}
