//! CreateTopics (v2–4) and DeleteTopics (v1–3): Kafka's admin tools and
//! `AdminClient` create and delete topics through the same control thread
//! as `ringlog topic create` (`handler::topics`). A topic made here stores
//! message format 2 — Kafka's record batches — whatever the broker's
//! default. Kafka's topic configs map onto ringlog's settings where one
//! exists; any other is INVALID_CONFIG, named, rather than silently
//! ignored (`cleanup.policy=compact` among them: ringlog has no
//! compaction). Partitions are placed by ringlog, so a request that
//! assigns replicas by hand is refused.

use super::errors::{code, kafka_code};
use super::versions::key;
use super::wire::{Malformed, Reader, Writer};
use crate::auth::authorize::may;
use crate::handler::topics::ask_control;
use crate::mailbox::ControlMsg;
use crate::reply::Dispatched;
use crate::shard::Shard;
use protocol::acl::{Operation, ResourceType, CLUSTER};
use protocol::codec::TopicSettings;
use protocol::types::validate_topic_name;
use std::rc::Rc;

/// One topic a CreateTopics asks for, read.
struct Wanted {
    name: String,
    partitions: i32,
    replication_factor: i16,
    assigned: bool,
    configs: Vec<(String, Option<String>)>,
}

/// A topic config that ringlog cannot keep.
#[derive(Debug, thiserror::Error)]
enum BadConfig {
    /// Not a number where one is needed.
    #[error("{0}={1:?}: not a non-negative number")]
    NotANumber(String, String),
    /// A number too large for the setting.
    #[error("{0}={1}: too large")]
    TooLarge(String, String),
    /// A timestamp type Kafka does not know.
    #[error("message.timestamp.type={0:?}: CreateTime or LogAppendTime")]
    TimestampType(String),
    /// Not a boolean where one is needed.
    #[error("{0}={1:?}: true or false")]
    NotABoolean(String, String),
    /// A config ringlog has no setting for.
    #[error("{0}={1:?} is not supported by ringlog (it keeps retention.ms, retention.bytes, segment.bytes, flush.messages, flush.ms, min.insync.replicas, message.timestamp.type, write.caching, cleanup.policy=delete, compression.type=producer)")]
    Unsupported(String, String),
}

/// Kafka's config names that ringlog keeps, as its settings.
fn apply(settings: &mut TopicSettings, name: &str, value: Option<&str>) -> Result<(), BadConfig> {
    let value = value.unwrap_or_default();
    let number = || {
        value
            .parse::<u64>()
            .map_err(|_| BadConfig::NotANumber(name.into(), value.into()))
    };
    match name {
        "retention.ms" => settings.retention_ms = number()?,
        "retention.bytes" if value == "-1" => settings.retention_bytes = 0,
        "retention.bytes" => settings.retention_bytes = number()?,
        "segment.bytes" => settings.segment_bytes = number()?,
        "flush.messages" => settings.flush_messages = number()?,
        "flush.ms" => settings.flush_interval_ms = number()?,
        "min.insync.replicas" => {
            settings.min_insync_replicas = u32::try_from(number()?)
                .map_err(|_| BadConfig::TooLarge(name.into(), value.into()))?;
        }
        "message.timestamp.type" => {
            settings.timestamp_type = match value {
                "CreateTime" => 1,
                "LogAppendTime" => 2,
                _ => return Err(BadConfig::TimestampType(value.into())),
            }
        }
        // Redpanda's name for the same setting: copies count as written,
        // not flushed, for acks=all.
        "write.caching" => {
            settings.write_caching = match value {
                "true" => true,
                "false" => false,
                _ => return Err(BadConfig::NotABoolean(name.into(), value.into())),
            }
        }
        "cleanup.policy" if value == "delete" => {}
        "compression.type" if value == "producer" => {}
        _ => return Err(BadConfig::Unsupported(name.into(), value.into())),
    }
    Ok(())
}

fn read_topics(r: &mut Reader<'_>) -> Result<Vec<Wanted>, Malformed> {
    let count = r.array(20, "topics")?.unwrap_or(0);
    let mut topics = Vec::with_capacity(count);
    for _ in 0..count {
        let name = r.string("name")?.to_string();
        let partitions = r.i32("num_partitions")?;
        let replication_factor = r.i16("replication_factor")?;
        let assignments = r.array(8, "assignments")?.unwrap_or(0);
        for _ in 0..assignments {
            r.i32("partition_index")?;
            let brokers = r.array(4, "broker_ids")?.unwrap_or(0);
            for _ in 0..brokers {
                r.i32("broker_id")?;
            }
        }
        let config_count = r.array(4, "configs")?.unwrap_or(0);
        let mut configs = Vec::with_capacity(config_count);
        for _ in 0..config_count {
            let name = r.string("config name")?.to_string();
            let value = r.nullable_string("config value")?.map(str::to_string);
            configs.push((name, value));
        }
        topics.push(Wanted {
            name,
            partitions,
            replication_factor,
            assigned: assignments > 0,
            configs,
        });
    }
    Ok(topics)
}

/// The settings a topic asks for, or its error.
fn settings(shard: &Shard, wanted: &Wanted) -> Result<(u32, TopicSettings), (i16, String)> {
    validate_topic_name(&wanted.name)
        .map_err(|e| (code::INVALID_TOPIC_EXCEPTION, e.to_string()))?;
    if wanted.assigned {
        return Err((
            code::INVALID_REQUEST,
            "ringlog places partitions itself: give num_partitions and replication_factor, not assignments".into(),
        ));
    }
    let partitions = match wanted.partitions {
        -1 => 1,
        n if n >= 1 && n as u32 <= crate::limits::PARTITIONS_MAX => n as u32,
        n => {
            return Err((
                code::INVALID_PARTITIONS,
                format!("num_partitions {n}: 1..={}", crate::limits::PARTITIONS_MAX),
            ))
        }
    };
    let mut settings = TopicSettings {
        message_format: 2,
        replication_factor: match wanted.replication_factor {
            -1 => 0,
            n if n >= 1 => n as u32,
            n => {
                return Err((
                    code::INVALID_REPLICATION_FACTOR,
                    format!("replication_factor {n}"),
                ))
            }
        },
        ..TopicSettings::default()
    };
    for (name, value) in &wanted.configs {
        apply(&mut settings, name, value.as_deref())
            .map_err(|e| (code::INVALID_CONFIG, e.to_string()))?;
    }
    shard
        .config
        .topic_settings(&settings)
        .map_err(|e| (code::INVALID_CONFIG, e.to_string()))?;
    Ok((partitions, settings))
}

/// Handles a CreateTopics request.
pub fn handle_create(
    shard: &Rc<Shard>,
    _version: i16,
    r: &mut Reader<'_>,
    principal: &str,
) -> Result<Dispatched, Malformed> {
    let topics = read_topics(r)?;
    r.i32("timeout_ms")?;
    let validate_only = r.bool("validate_only")?;
    let may_create_any = may(
        shard,
        principal,
        ResourceType::Cluster,
        CLUSTER,
        Operation::Create,
    );
    let shard = shard.clone();
    let principal = principal.to_string();
    Ok(Dispatched::Later(Box::pin(async move {
        let mut results = Vec::with_capacity(topics.len());
        for wanted in &topics {
            let allowed = may_create_any
                || may(
                    &shard,
                    &principal,
                    ResourceType::Topic,
                    &wanted.name,
                    Operation::Create,
                );
            let result = if allowed {
                create(&shard, wanted, validate_only).await
            } else {
                Err((
                    code::TOPIC_AUTHORIZATION_FAILED,
                    format!("{principal} may not create topic {:?}", wanted.name),
                ))
            };
            results.push((wanted.name.clone(), result));
        }
        let mut w = Writer::default();
        w.i32(0); // throttle_time_ms
        w.array(results.len());
        for (name, result) in &results {
            w.string(name);
            match result {
                Ok(()) => {
                    w.i16(code::NONE);
                    w.nullable_string(None);
                }
                Err((error, message)) => {
                    w.i16(*error);
                    w.nullable_string(Some(message));
                }
            }
        }
        Some(super::wire::answer(
            key::CREATE_TOPICS,
            w.out,
            crate::reply::Payload::None,
        ))
    })))
}

async fn create(shard: &Shard, wanted: &Wanted, validate_only: bool) -> Result<(), (i16, String)> {
    let (partitions, overrides) = settings(shard, wanted)?;
    if validate_only {
        return Ok(());
    }
    let (reply, answer) = flume::bounded(1);
    let msg = ControlMsg::CreateTopic {
        name: wanted.name.clone(),
        partitions,
        overrides,
        mirror_source: None,
        reply,
    };
    ask_control(shard, msg, answer)
        .await
        .map(|_| ())
        .map_err(|e| (kafka_code(e.code), e.message))
}

/// Handles a DeleteTopics request.
pub fn handle_delete(
    shard: &Rc<Shard>,
    _version: i16,
    r: &mut Reader<'_>,
    principal: &str,
) -> Result<Dispatched, Malformed> {
    let count = r.array(2, "topic_names")?.unwrap_or(0);
    let names: Vec<String> = (0..count)
        .map(|_| r.string("topic name").map(str::to_string))
        .collect::<Result<_, _>>()?;
    r.i32("timeout_ms")?;
    let shard = shard.clone();
    let principal = principal.to_string();
    Ok(Dispatched::Later(Box::pin(async move {
        let mut w = Writer::default();
        w.i32(0); // throttle_time_ms
        w.array(names.len());
        for name in &names {
            let error = if !may(
                &shard,
                &principal,
                ResourceType::Topic,
                name,
                Operation::Delete,
            ) {
                code::TOPIC_AUTHORIZATION_FAILED
            } else if validate_topic_name(name).is_err() {
                code::UNKNOWN_TOPIC_OR_PARTITION
            } else {
                let (reply, answer) = flume::bounded(1);
                let msg = ControlMsg::DeleteTopic {
                    name: name.clone(),
                    reply,
                };
                match ask_control(&shard, msg, answer).await {
                    Ok(()) => code::NONE,
                    Err(error) => kafka_code(error.code),
                }
            };
            w.string(name);
            w.i16(error);
        }
        Some(super::wire::answer(
            key::DELETE_TOPICS,
            w.out,
            crate::reply::Payload::None,
        ))
    })))
}
