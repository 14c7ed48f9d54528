//! Shared newtypes and the topic naming rule.

use std::fmt;

/// A logical byte position in a partition's log. The next message's offset is
/// this offset plus this message's stored length (the paper's addressing).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Offset(pub u64);

/// A partition number within a topic, 0-based.
pub type PartitionId = u32;
/// A broker's id in the cluster.
pub type BrokerId = u32;
/// A shard (one pinned core) inside a broker, 0-based.
pub type ShardId = u16;

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// FNV-1a, 64 bit: a hash that is stable across builds, platforms and
/// languages (unlike std's), for anything every party must compute alike —
/// the broker's partition-to-shard placement, the producer's key partitioner.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// Longest topic name accepted (Kafka's limit; leaves room in a file name for
/// the `-<partition>` suffix).
pub const TOPIC_NAME_BYTES_MAX: usize = 249;

/// Why a topic name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TopicNameError {
    /// The name is empty.
    #[error("topic name is empty")]
    Empty,
    /// `.` and `..` would name directories, not topics.
    #[error("topic name {0:?} is reserved")]
    Reserved(String),
    /// Longer than [`TOPIC_NAME_BYTES_MAX`].
    #[error("topic name is {len} bytes, the limit is {max}")]
    TooLong {
        /// The name's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A character outside `[A-Za-z0-9._-]`.
    #[error("topic name {name:?} has {ch:?}; allowed are ASCII letters, digits, '.', '_' and '-'")]
    BadChar {
        /// The name (lossy if it was not valid UTF-8).
        name: String,
        /// The first character refused.
        ch: char,
    },
}

/// Checks the topic naming rule: 1..=249 characters from `[A-Za-z0-9._-]`,
/// and neither `.` nor `..`. The rule keeps every name a safe directory name.
pub fn validate_topic_name(name: &str) -> Result<(), TopicNameError> {
    if name.is_empty() {
        return Err(TopicNameError::Empty);
    }
    if name == "." || name == ".." {
        return Err(TopicNameError::Reserved(name.to_string()));
    }
    if name.len() > TOPIC_NAME_BYTES_MAX {
        return Err(TopicNameError::TooLong {
            len: name.len(),
            max: TOPIC_NAME_BYTES_MAX,
        });
    }
    if let Some(ch) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(TopicNameError::BadChar {
            name: name.to_string(),
            ch,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_published_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        // PROTOCOL.md's example of the key partitioner (Python checks it too).
        assert_eq!(fnv1a(b"key-7"), 8_147_958_347_810_898_444);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn topic_names_follow_the_rule() {
        assert_eq!(validate_topic_name("clicks.v2_a-b"), Ok(()));
        assert_eq!(validate_topic_name(""), Err(TopicNameError::Empty));
        assert!(matches!(
            validate_topic_name(".."),
            Err(TopicNameError::Reserved(_))
        ));
        assert!(matches!(
            validate_topic_name("."),
            Err(TopicNameError::Reserved(_))
        ));
        assert!(matches!(
            validate_topic_name("a/b"),
            Err(TopicNameError::BadChar { ch: '/', .. })
        ));
        assert!(matches!(
            validate_topic_name("a\\b"),
            Err(TopicNameError::BadChar { ch: '\\', .. })
        ));
        assert!(matches!(
            validate_topic_name("é"),
            Err(TopicNameError::BadChar { .. })
        ));
        assert_eq!(validate_topic_name(&"x".repeat(249)), Ok(()));
        assert!(matches!(
            validate_topic_name(&"x".repeat(250)),
            Err(TopicNameError::TooLong { len: 250, .. })
        ));
    }
}
