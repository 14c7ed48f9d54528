//! AlterTopicConfig (api 31): a topic's settings changed while it runs,
//! named as Kafka names them (`retention.ms`), so an operator's habits from
//! `kafka-configs --alter` carry over.

use super::{decode_topic, encode_topic, finish, TopicMetadata, TopicSettings};
use crate::wire;
use flatbuffers::FlatBufferBuilder;

/// A setting that changes at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alterable {
    /// `retention.ms`.
    RetentionMs,
    /// `retention.bytes`.
    RetentionBytes,
    /// `segment.bytes`.
    SegmentBytes,
    /// `flush.messages`.
    FlushMessages,
    /// `flush.ms`.
    FlushMs,
    /// `min.insync.replicas`.
    MinInsyncReplicas,
}

/// Settings a topic fixes at creation: named so that an attempt to change
/// one says why it cannot, rather than "unknown".
const FIXED: [(&str, &str); 5] = [
    (
        "replication.factor",
        "copies are added and removed by moving partitions: `ringlog partitions reassign`",
    ),
    ("message.format", "a log holds one format for its life"),
    (
        "message.timestamp.type",
        "fixed at creation with the format",
    ),
    ("write.caching", "fixed at creation"),
    ("partitions", "use `ringlog topic alter T --partitions N`"),
];

/// Why a setting's change is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A name no topic has.
    #[error("unknown topic setting {0:?}; the ones that change at run time: {names}", names = Alterable::names())]
    Unknown(String),
    /// A setting fixed at creation.
    #[error("{name} cannot change at run time: {why}")]
    Fixed {
        /// Its name.
        name: String,
        /// What to do instead.
        why: &'static str,
    },
    /// A value that is not a number in the setting's range.
    #[error("{name}={value:?}: {why}")]
    Value {
        /// The setting.
        name: &'static str,
        /// The value as given.
        value: String,
        /// What it must be.
        why: String,
    },
    /// One setting named twice (set and deleted, or set twice).
    #[error("{0} is named more than once")]
    Twice(&'static str),
}

/// The largest value the registries store (TOML and JSON integers).
const STORED_MAX: u64 = i64::MAX as u64;

impl Alterable {
    /// Every one, in the order `topic describe` lists them.
    pub const ALL: [Alterable; 6] = [
        Alterable::RetentionMs,
        Alterable::RetentionBytes,
        Alterable::SegmentBytes,
        Alterable::FlushMessages,
        Alterable::FlushMs,
        Alterable::MinInsyncReplicas,
    ];

    /// Its Kafka name.
    pub fn name(self) -> &'static str {
        match self {
            Alterable::RetentionMs => "retention.ms",
            Alterable::RetentionBytes => "retention.bytes",
            Alterable::SegmentBytes => "segment.bytes",
            Alterable::FlushMessages => "flush.messages",
            Alterable::FlushMs => "flush.ms",
            Alterable::MinInsyncReplicas => "min.insync.replicas",
        }
    }

    fn names() -> String {
        Alterable::ALL.map(Alterable::name).join(", ")
    }

    /// The setting `name` names.
    pub fn parse(name: &str) -> Result<Alterable, ConfigError> {
        if let Some(setting) = Alterable::ALL.into_iter().find(|s| s.name() == name) {
            return Ok(setting);
        }
        match FIXED.iter().find(|(fixed, _)| *fixed == name) {
            Some((fixed, why)) => Err(ConfigError::Fixed {
                name: (*fixed).to_string(),
                why,
            }),
            None => Err(ConfigError::Unknown(name.to_string())),
        }
    }

    /// `value` as this setting stores it: a whole number from 1 up (0 is
    /// "the default", which `delete` says); `-1` for the retention limits
    /// means none, as in Kafka. The broker checks the ranges that depend
    /// on its configuration (segment sizes, flush intervals).
    pub fn parse_value(self, value: &str) -> Result<u64, ConfigError> {
        let refuse = |why: String| ConfigError::Value {
            name: self.name(),
            value: value.to_string(),
            why,
        };
        let unlimited = matches!(self, Alterable::RetentionMs | Alterable::RetentionBytes);
        if unlimited && value.trim() == "-1" {
            return Ok(STORED_MAX);
        }
        let number: u64 = value.trim().parse().map_err(|_| {
            refuse(if unlimited {
                "not a whole number (-1: no limit)".into()
            } else {
                "not a whole number".into()
            })
        })?;
        if number == 0 {
            return Err(refuse(format!(
                "must be at least 1 (to go back to the broker's default, delete it: --delete-config {})",
                self.name()
            )));
        }
        if number > STORED_MAX {
            return Err(refuse(if unlimited {
                "must be below 2^63 (-1: no limit)".into()
            } else {
                "must be below 2^63".into()
            }));
        }
        if self == Alterable::MinInsyncReplicas && number > u64::from(u32::MAX) {
            return Err(refuse("more replicas than there can be".into()));
        }
        Ok(number)
    }

    /// Its value in `settings` (0: not set).
    pub fn get(self, settings: &TopicSettings) -> u64 {
        match self {
            Alterable::RetentionMs => settings.retention_ms,
            Alterable::RetentionBytes => settings.retention_bytes,
            Alterable::SegmentBytes => settings.segment_bytes,
            Alterable::FlushMessages => settings.flush_messages,
            Alterable::FlushMs => settings.flush_interval_ms,
            Alterable::MinInsyncReplicas => u64::from(settings.min_insync_replicas),
        }
    }

    /// Sets it in `settings` (0: back to the default).
    pub fn set(self, settings: &mut TopicSettings, value: u64) {
        match self {
            Alterable::RetentionMs => settings.retention_ms = value,
            Alterable::RetentionBytes => settings.retention_bytes = value,
            Alterable::SegmentBytes => settings.segment_bytes = value,
            Alterable::FlushMessages => settings.flush_messages = value,
            Alterable::FlushMs => settings.flush_interval_ms = value,
            Alterable::MinInsyncReplicas => {
                settings.min_insync_replicas = u32::try_from(value).unwrap_or(u32::MAX);
            }
        }
    }
}

/// A request's changes, checked: each setting with its new value, 0 for
/// "back to the default".
pub fn parse_changes(
    set: &[(&str, &str)],
    delete: &[&str],
) -> Result<Vec<(Alterable, u64)>, ConfigError> {
    let mut changes: Vec<(Alterable, u64)> = Vec::with_capacity(set.len() + delete.len());
    let mut add = |setting: Alterable, value: u64| {
        if changes.iter().any(|(s, _)| *s == setting) {
            return Err(ConfigError::Twice(setting.name()));
        }
        changes.push((setting, value));
        Ok(())
    };
    for (name, value) in set {
        let setting = Alterable::parse(name.trim())?;
        add(setting, setting.parse_value(value)?)?;
    }
    for name in delete {
        add(Alterable::parse(name.trim())?, 0)?;
    }
    Ok(changes)
}

/// AlterTopicConfig request header.
pub fn alter_topic_config_request<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    topic: &str,
    set: &[(&str, &str)],
    delete: &[&str],
) -> &'b [u8] {
    fbb.reset();
    let topic = fbb.create_string(topic);
    let entries: Vec<_> = set
        .iter()
        .map(|(name, value)| {
            let name = fbb.create_string(name);
            let value = fbb.create_string(value);
            wire::ConfigEntry::create(
                fbb,
                &wire::ConfigEntryArgs {
                    name: Some(name),
                    value: Some(value),
                },
            )
        })
        .collect();
    let set = fbb.create_vector(&entries);
    let names: Vec<_> = delete.iter().map(|n| fbb.create_string(n)).collect();
    let delete = fbb.create_vector(&names);
    let root = wire::AlterTopicConfigRequest::create(
        fbb,
        &wire::AlterTopicConfigRequestArgs {
            topic: Some(topic),
            set: Some(set),
            delete: Some(delete),
        },
    );
    finish(fbb, root)
}

/// A decoded request's entries, borrowed: `(set, delete)`.
pub fn request_entries<'a>(
    request: &wire::AlterTopicConfigRequest<'a>,
) -> (Vec<(&'a str, &'a str)>, Vec<&'a str>) {
    let set = request
        .set()
        .map(|entries| {
            entries
                .iter()
                .map(|e| (e.name().unwrap_or_default(), e.value().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    let delete = request
        .delete()
        .map(|names| names.iter().collect())
        .unwrap_or_default();
    (set, delete)
}

/// AlterTopicConfig response header: the topic as it is now.
pub fn alter_topic_config_response<'b>(
    fbb: &'b mut FlatBufferBuilder<'_>,
    topic: &TopicMetadata,
) -> &'b [u8] {
    fbb.reset();
    let topic = encode_topic(fbb, topic);
    let root = wire::AlterTopicConfigResponse::create(
        fbb,
        &wire::AlterTopicConfigResponseArgs { topic: Some(topic) },
    );
    finish(fbb, root)
}

/// The topic an AlterTopicConfig response carries.
pub fn decode_alter_topic_config_response(
    response: wire::AlterTopicConfigResponse<'_>,
) -> Option<TopicMetadata> {
    response.topic().map(decode_topic)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_values_and_mistakes() {
        let changes = parse_changes(
            &[("retention.ms", "3600000"), ("retention.bytes", "-1")],
            &["segment.bytes"],
        )
        .unwrap();
        assert_eq!(
            changes,
            vec![
                (Alterable::RetentionMs, 3_600_000),
                (Alterable::RetentionBytes, STORED_MAX),
                (Alterable::SegmentBytes, 0)
            ]
        );
        let unknown = parse_changes(&[("retention.mss", "1")], &[]).unwrap_err();
        assert!(unknown.to_string().contains("unknown topic setting \"retention.mss\"; the ones that change at run time: retention.ms, "), "{unknown}");
        let fixed = parse_changes(&[("message.format", "2")], &[]).unwrap_err();
        assert_eq!(
            fixed.to_string(),
            "message.format cannot change at run time: a log holds one format for its life"
        );
        let zero = parse_changes(&[("flush.ms", "0")], &[]).unwrap_err();
        assert!(
            zero.to_string().contains("--delete-config flush.ms"),
            "{zero}"
        );
        let text = parse_changes(&[("segment.bytes", "1GiB")], &[]).unwrap_err();
        assert_eq!(
            text.to_string(),
            "segment.bytes=\"1GiB\": not a whole number"
        );
        let minus = parse_changes(&[("flush.messages", "-1")], &[]).unwrap_err();
        assert!(minus.to_string().contains("not a whole number"), "{minus}");
        let huge = parse_changes(&[("retention.ms", "9223372036854775808")], &[]).unwrap_err();
        assert!(huge.to_string().contains("below 2^63"), "{huge}");
        let twice = parse_changes(&[("flush.ms", "5")], &["flush.ms"]).unwrap_err();
        assert_eq!(twice, ConfigError::Twice("flush.ms"));
        let mut settings = TopicSettings::default();
        for (i, setting) in Alterable::ALL.into_iter().enumerate() {
            setting.set(&mut settings, i as u64 + 1);
            assert_eq!(setting.get(&settings), i as u64 + 1, "{setting:?}");
            assert_eq!(Alterable::parse(setting.name()), Ok(setting));
        }
    }

    #[test]
    fn request_and_response_round_trip() {
        let mut fbb = FlatBufferBuilder::new();
        let bytes = alter_topic_config_request(
            &mut fbb,
            "clicks",
            &[("retention.ms", "1000")],
            &["flush.ms"],
        )
        .to_vec();
        let request = flatbuffers::root::<wire::AlterTopicConfigRequest>(&bytes).unwrap();
        assert_eq!(request.topic(), Some("clicks"));
        let (set, delete) = request_entries(&request);
        assert_eq!(set, vec![("retention.ms", "1000")]);
        assert_eq!(delete, vec!["flush.ms"]);
        let topic = TopicMetadata {
            name: "clicks".into(),
            partitions: Vec::new(),
            settings: TopicSettings {
                retention_ms: 1000,
                ..TopicSettings::default()
            },
            overrides: TopicSettings {
                retention_ms: 1000,
                ..TopicSettings::default()
            },
            id: "ab".into(),
            mirror_source: String::new(),
            promoted_from: String::new(),
            promoted_ends: Vec::new(),
        };
        let bytes = alter_topic_config_response(&mut fbb, &topic).to_vec();
        let response = flatbuffers::root::<wire::AlterTopicConfigResponse>(&bytes).unwrap();
        assert_eq!(decode_alter_topic_config_response(response), Some(topic));
    }
}
