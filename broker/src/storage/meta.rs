//! The standalone topic registry: `<data-dir>/topics.toml`.
//!
//! Without etcd the broker keeps its topics here, so they survive a restart.
//! Every change rewrites the whole file through a temporary file, an fsync
//! and a rename, so a crash leaves either the old or the new registry.

use super::error::StorageError;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// File name of the registry inside the data directory.
pub const TOPICS_FILE: &str = "topics.toml";

/// One topic as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredTopic {
    /// Topic name.
    pub name: String,
    /// Number of partitions.
    pub partitions: u32,
    /// Per-topic overrides; 0 = broker default.
    #[serde(default)]
    pub retention_ms: u64,
    /// Size retention override; 0 = broker default.
    #[serde(default)]
    pub retention_bytes: u64,
    /// Segment size override; 0 = broker default.
    #[serde(default)]
    pub segment_bytes: u64,
    /// Flush-after-messages override; 0 = broker default.
    #[serde(default)]
    pub flush_messages: u64,
    /// Flush interval override; 0 = broker default.
    #[serde(default)]
    pub flush_interval_ms: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct TopicsFile {
    #[serde(default)]
    topic: Vec<StoredTopic>,
}

/// Loads the registry; a missing file is an empty registry.
pub fn load_topics(data_dir: &Path) -> Result<Vec<StoredTopic>, StorageError> {
    let path = data_dir.join(TOPICS_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StorageError::io("reading", &path, e)),
    };
    let file: TopicsFile = toml::from_str(&text).map_err(|e| {
        StorageError::io(
            "parsing",
            &path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        )
    })?;
    Ok(file.topic)
}

/// Replaces the registry atomically and durably.
pub fn store_topics(data_dir: &Path, topics: &[StoredTopic]) -> Result<(), StorageError> {
    use std::io::Write;
    let path = data_dir.join(TOPICS_FILE);
    let tmp = data_dir.join(format!("{TOPICS_FILE}.tmp"));
    let text = toml::to_string(&TopicsFile {
        topic: topics.to_vec(),
    })
    .map_err(|e| StorageError::io("encoding", &path, std::io::Error::other(e)))?;
    let mut file =
        std::fs::File::create(&tmp).map_err(|e| StorageError::io("creating", &tmp, e))?;
    file.write_all(text.as_bytes())
        .map_err(|e| StorageError::io("writing", &tmp, e))?;
    file.sync_all()
        .map_err(|e| StorageError::io("syncing", &tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| StorageError::io("renaming", &path, e))?;
    let dir =
        std::fs::File::open(data_dir).map_err(|e| StorageError::io("opening", data_dir, e))?;
    dir.sync_all()
        .map_err(|e| StorageError::io("syncing", data_dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_round_trips_and_starts_empty() {
        let dir = std::env::temp_dir().join(format!("ringlog-meta-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(load_topics(&dir).unwrap(), vec![]);
        let topics = vec![StoredTopic {
            name: "clicks".into(),
            partitions: 4,
            retention_ms: 0,
            retention_bytes: 10,
            segment_bytes: 0,
            flush_messages: 0,
            flush_interval_ms: 5,
        }];
        store_topics(&dir, &topics).unwrap();
        assert_eq!(load_topics(&dir).unwrap(), topics);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
