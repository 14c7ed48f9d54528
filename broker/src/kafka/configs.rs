//! DescribeConfigs (v1–3): a topic's settings under Kafka's names — those
//! ringlog has (retention, segment size, flush policy, minimum in-sync
//! copies, timestamp type) and the fixed answers for those it does not
//! vary (`cleanup.policy=delete`, `compression.type=producer`), each
//! marked as the topic's own or the default. A broker's configs are not
//! listed (Kafka's tools show an empty list).

use super::errors::code;
use super::versions::key;
use super::wire::{ready, Malformed, Reader, Writer};
use crate::auth::authorize::may_describe;
use crate::reply::Dispatched;
use crate::shard::{Shard, Topic};
use protocol::acl::ResourceType;

/// Kafka's resource types.
const TOPIC: i8 = 2;
const BROKER: i8 = 4;

/// Kafka's config sources.
const DYNAMIC_TOPIC_CONFIG: i8 = 1;
const DEFAULT_CONFIG: i8 = 5;

/// Kafka's config types (v3).
const BOOLEAN: i8 = 1;
const STRING: i8 = 2;
const INT: i8 = 3;
const LONG: i8 = 5;
const LIST: i8 = 7;

/// Resources one request may name.
const RESOURCES_MAX: usize = 1_000;

/// One config: name, value, whether the topic sets it, type.
type Entry = (&'static str, String, bool, i8);

/// A topic's configs under Kafka's names.
fn entries(topic: &Topic) -> Vec<Entry> {
    let s = &topic.settings;
    let o = &topic.overrides;
    let timestamps = match s.timestamps {
        protocol::batch::TimestampType::LogAppend => "LogAppendTime",
        _ => "CreateTime",
    };
    let retention_bytes = if s.retention_bytes == 0 {
        "-1".to_string()
    } else {
        s.retention_bytes.to_string()
    };
    vec![
        ("cleanup.policy", "delete".into(), false, LIST),
        ("compression.type", "producer".into(), false, STRING),
        (
            "flush.messages",
            s.flush_messages.to_string(),
            o.flush_messages != 0,
            LONG,
        ),
        (
            "flush.ms",
            s.flush_interval_ms.to_string(),
            o.flush_interval_ms != 0,
            LONG,
        ),
        (
            "message.timestamp.type",
            timestamps.into(),
            o.timestamp_type != 0,
            STRING,
        ),
        (
            "min.insync.replicas",
            topic.min_insync.to_string(),
            o.min_insync_replicas != 0,
            INT,
        ),
        (
            "retention.bytes",
            retention_bytes,
            o.retention_bytes != 0,
            LONG,
        ),
        (
            "retention.ms",
            s.retention_ms.to_string(),
            o.retention_ms != 0,
            LONG,
        ),
        (
            "segment.bytes",
            s.segment_bytes.to_string(),
            o.segment_bytes != 0,
            INT,
        ),
        (
            "write.caching",
            topic.write_caching.to_string(),
            topic.write_caching,
            BOOLEAN,
        ),
    ]
}

/// A resource asked for: its type, its name, the keys wanted (`None`: all).
type Asked = (i8, String, Option<Vec<String>>);

fn read(r: &mut Reader<'_>) -> Result<Vec<Asked>, Malformed> {
    let count = r.array(7, "resources")?.unwrap_or(0);
    let mut resources = Vec::with_capacity(count.min(RESOURCES_MAX));
    for _ in 0..count {
        let kind = r.i8("resource_type")?;
        let name = r.string("resource_name")?.to_string();
        let keys: Option<Vec<String>> = match r.array(2, "configuration_keys")? {
            None => None,
            Some(n) => Some(
                (0..n)
                    .map(|_| r.string("key").map(str::to_string))
                    .collect::<Result<_, _>>()?,
            ),
        };
        resources.push((kind, name, keys));
    }
    Ok(resources)
}

/// Handles a DescribeConfigs request.
pub fn handle(
    shard: &Shard,
    version: i16,
    r: &mut Reader<'_>,
    principal: &str,
) -> Result<Dispatched, Malformed> {
    let resources = read(r)?;
    r.bool("include_synonyms")?;
    if version >= 3 {
        r.bool("include_documentation")?;
    }
    let mut w = Writer::default();
    w.i32(0); // throttle_time_ms
    w.array(resources.len());
    let topics = shard.topics.borrow();
    for (i, (kind, name, keys)) in resources.iter().enumerate() {
        let (error, message, found): (i16, Option<&str>, Vec<Entry>) = if i >= RESOURCES_MAX {
            (
                code::INVALID_REQUEST,
                Some("too many resources"),
                Vec::new(),
            )
        } else if *kind == BROKER {
            (code::NONE, None, Vec::new())
        } else if *kind != TOPIC {
            (
                code::INVALID_REQUEST,
                Some("only topics' and brokers' configs are described"),
                Vec::new(),
            )
        } else if !may_describe(shard, principal, ResourceType::Topic, name) {
            (code::TOPIC_AUTHORIZATION_FAILED, None, Vec::new())
        } else if let Some(topic) = topics.get(name) {
            (code::NONE, None, entries(&topic.borrow()))
        } else {
            (
                code::UNKNOWN_TOPIC_OR_PARTITION,
                Some("no such topic"),
                Vec::new(),
            )
        };
        let wanted: Vec<&Entry> = found
            .iter()
            .filter(|(n, ..)| keys.as_ref().is_none_or(|k| k.iter().any(|k| k == n)))
            .collect();
        w.i16(error);
        w.nullable_string(message);
        w.i8(*kind);
        w.string(name);
        w.array(wanted.len());
        for (config, value, own, kind) in wanted {
            w.string(config);
            w.nullable_string(Some(value));
            w.bool(false); // read_only
            w.i8(if *own {
                DYNAMIC_TOPIC_CONFIG
            } else {
                DEFAULT_CONFIG
            });
            w.bool(false); // is_sensitive
            w.array(0); // synonyms
            if version >= 3 {
                w.i8(*kind);
                w.nullable_string(None); // documentation
            }
        }
    }
    Ok(ready(key::DESCRIBE_CONFIGS, w.out))
}
