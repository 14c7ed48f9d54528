//! The standalone registry: `<data-dir>/topics.toml`.
//!
//! Without etcd a broker keeps its topics here, so they survive a restart.
//! Every change rewrites the whole file through a temporary file, an fsync
//! and a rename, then fsyncs the directory, so a crash leaves either the old
//! or the new registry, never a torn one. The file runs on the control
//! thread, never on a shard's reactor. Partition owners are not stored: in a
//! standalone broker every partition is this broker's, whatever its id.

use super::{BrokerRecord, Registry, RegistryError, RegistryEvent, TopicRecord};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// File name of the registry inside the data directory.
pub const TOPICS_FILE: &str = "topics.toml";

/// The next producer id not handed out, in decimal.
pub const PRODUCER_IDS_FILE: &str = "producer-ids";

#[derive(Debug, Default, Serialize, Deserialize)]
struct TopicsFile {
    #[serde(default)]
    topic: Vec<TopicRecord>,
}

/// Topics in `<data-dir>/topics.toml`, all stored by broker `me`.
#[derive(Debug)]
pub struct Standalone {
    data_dir: PathBuf,
    me: BrokerRecord,
    /// The registry as last stored, in name order.
    topics: Vec<TopicRecord>,
    /// Bumped by every change: the revision a rewrite compares.
    revision: i64,
    /// `security.toml`'s modification time as last read or written: a
    /// change by `ringlog users add --data-dir` while the broker runs is
    /// noticed within a second ([`Registry::next_event`]).
    security_seen: Option<std::time::SystemTime>,
    /// When the file was last looked at: the next look is a second later,
    /// however often the control thread's loop polls [`Registry::next_event`]
    /// anew (each request it serves starts a new future).
    security_checked: std::time::Instant,
}

impl Standalone {
    /// Loads the registry in `data_dir`; a missing file is an empty registry.
    pub fn open(data_dir: &Path, me: BrokerRecord) -> Result<Standalone, RegistryError> {
        let path = data_dir.join(TOPICS_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(RegistryError::io("reading", &path, e)),
        };
        let file: TopicsFile = toml::from_str(&text).map_err(|e| RegistryError::Corrupt {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        let mut topics = file.topic;
        for topic in &mut topics {
            topic.brokers = vec![me.broker_id; topic.partitions as usize];
            topic.check().map_err(|reason| RegistryError::Corrupt {
                path: path.display().to_string(),
                reason: reason.to_string(),
            })?;
        }
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Standalone {
            data_dir: data_dir.to_path_buf(),
            me,
            topics,
            revision: 1,
            security_seen: None,
            security_checked: std::time::Instant::now(),
        })
    }

    /// Replaces the file atomically and durably with `topics`.
    fn store(&self, topics: &[TopicRecord]) -> Result<(), RegistryError> {
        let stored: Vec<TopicRecord> = topics
            .iter()
            .map(|t| TopicRecord {
                brokers: Vec::new(),
                ..t.clone()
            })
            .collect();
        let path = self.data_dir.join(TOPICS_FILE);
        let text = toml::to_string(&TopicsFile { topic: stored })
            .map_err(|e| RegistryError::io("encoding", &path, std::io::Error::other(e)))?;
        self.replace_file(TOPICS_FILE, &text)
    }

    /// Replaces `name` in the data directory atomically and durably: a
    /// temporary file, fsynced, renamed over it, the directory fsynced.
    fn replace_file(&self, name: &str, text: &str) -> Result<(), RegistryError> {
        let path = self.data_dir.join(name);
        let tmp = self.data_dir.join(format!("{name}.tmp"));
        let mut file =
            std::fs::File::create(&tmp).map_err(|e| RegistryError::io("creating", &tmp, e))?;
        file.write_all(text.as_bytes())
            .map_err(|e| RegistryError::io("writing", &tmp, e))?;
        file.sync_all()
            .map_err(|e| RegistryError::io("syncing", &tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| RegistryError::io("renaming", &path, e))?;
        let dir = std::fs::File::open(&self.data_dir)
            .map_err(|e| RegistryError::io("opening", &self.data_dir, e))?;
        dir.sync_all()
            .map_err(|e| RegistryError::io("syncing", &self.data_dir, e))
    }
}

impl Registry for Standalone {
    /// No groups: they need a cluster.
    type Groups = crate::groups::MemoryGroups;

    async fn topics(&mut self) -> Result<Vec<TopicRecord>, RegistryError> {
        Ok(self.topics.clone())
    }

    async fn brokers(&mut self) -> Result<Vec<BrokerRecord>, RegistryError> {
        Ok(vec![self.me.clone()])
    }

    async fn producer_ids(&mut self, count: u32) -> Result<std::ops::Range<i64>, RegistryError> {
        let path = self.data_dir.join(PRODUCER_IDS_FILE);
        let next = match std::fs::read_to_string(&path) {
            Ok(text) => text
                .trim()
                .parse::<i64>()
                .map_err(|e| RegistryError::Corrupt {
                    path: path.display().to_string(),
                    reason: format!("not a producer id: {e}"),
                })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => super::first_producer_id(),
            Err(e) => return Err(RegistryError::io("reading", &path, e)),
        };
        let block = super::producer_id_block(next, count)?;
        self.replace_file(PRODUCER_IDS_FILE, &format!("{}\n", block.end))?;
        Ok(block)
    }

    async fn kafka_group(
        &mut self,
        op: crate::kafka_groups::KafkaGroupOp,
    ) -> Result<crate::kafka_groups::KafkaGroupAnswer, RegistryError> {
        crate::kafka_groups::file::GroupFiles::new(&self.data_dir).serve(op)
    }

    async fn forget_kafka_offsets(&mut self, topic: &str) -> Result<(), RegistryError> {
        crate::kafka_groups::file::GroupFiles::new(&self.data_dir).forget_topic(topic)
    }

    async fn create_topic(&mut self, topic: TopicRecord) -> Result<i64, RegistryError> {
        let index = match self.topics.binary_search_by(|t| t.name.cmp(&topic.name)) {
            Ok(_) => return Err(RegistryError::TopicExists { name: topic.name }),
            Err(index) => index,
        };
        let mut topics = self.topics.clone();
        topics.insert(index, topic);
        self.store(&topics)?;
        self.topics = topics;
        self.revision += 1;
        Ok(self.revision)
    }

    async fn delete_topic(&mut self, name: &str) -> Result<TopicRecord, RegistryError> {
        let Ok(index) = self.topics.binary_search_by(|t| t.name.as_str().cmp(name)) else {
            return Err(RegistryError::UnknownTopic {
                name: name.to_string(),
            });
        };
        let mut topics = self.topics.clone();
        let removed = topics.remove(index);
        self.store(&topics)?;
        self.topics = topics;
        self.revision += 1;
        Ok(removed)
    }

    async fn topic(&mut self, name: &str) -> Result<Option<(TopicRecord, i64)>, RegistryError> {
        Ok(self
            .topics
            .iter()
            .find(|t| t.name == name)
            .map(|t| (t.clone(), self.revision)))
    }

    /// A rewrite of a topic's record (more partitions: a standalone broker
    /// moves none).
    async fn replace_topic(
        &mut self,
        record: TopicRecord,
        expected: i64,
    ) -> Result<Option<i64>, RegistryError> {
        let Ok(index) = self.topics.binary_search_by(|t| t.name.cmp(&record.name)) else {
            return Ok(None);
        };
        if expected != self.revision {
            return Ok(None);
        }
        let mut topics = self.topics.clone();
        topics[index] = TopicRecord {
            brokers: vec![self.me.broker_id; record.partitions as usize],
            ..record
        };
        self.store(&topics)?;
        self.topics = topics;
        self.revision += 1;
        Ok(Some(self.revision))
    }

    async fn next_event(&mut self) -> RegistryEvent {
        // No one else writes topics here; only the security file may change
        // under the broker. Cancel-safe: nothing changes until it returns.
        loop {
            let due = self.security_checked + std::time::Duration::from_secs(1);
            tokio::time::sleep_until(due.into()).await;
            self.security_checked = std::time::Instant::now();
            let now = crate::security::file_version(&self.data_dir);
            if now != self.security_seen {
                self.security_seen = now;
                return RegistryEvent::SecurityChanged;
            }
        }
    }

    async fn security(&mut self) -> Result<crate::security::SecurityRecords, RegistryError> {
        self.security_seen = crate::security::file_version(&self.data_dir);
        let mut records = crate::security::read_file(&self.data_dir)?;
        records.login_secret = crate::security::file_login_secret(&self.data_dir)?;
        Ok(records)
    }

    async fn change_security(
        &mut self,
        change: crate::security::SecurityChange,
    ) -> Result<crate::security::Changed, RegistryError> {
        let changed = crate::security::change_file(&self.data_dir, &change)?;
        self.security_seen = crate::security::file_version(&self.data_dir);
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::super::conformance::broker;
    use super::*;
    use futures_lite::future::block_on;

    fn temp_dir(label: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("ringlog-registry-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn standalone_registry_conforms_and_survives_a_reopen() {
        let dir = temp_dir("conform");
        let mut registry = Standalone::open(&dir, broker(3)).unwrap();
        block_on(super::super::conformance::check(&mut registry, 3));
        let before = block_on(registry.topics()).unwrap();
        // A restart under another id still owns every partition.
        let mut reopened = Standalone::open(&dir, broker(8)).unwrap();
        let after = block_on(reopened.topics()).unwrap();
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].brokers, vec![8; before[0].partitions as usize]);
        assert_eq!(after[0].overrides(), before[0].overrides());
        // Producer ids go on after a restart: none is handed out twice.
        let before = block_on(registry.producer_ids(5)).unwrap();
        let after = block_on(reopened.producer_ids(5)).unwrap();
        assert!(after.start >= before.end, "{before:?} then {after:?}");
        std::fs::write(dir.join(PRODUCER_IDS_FILE), "twelve\n").unwrap();
        let refused = block_on(reopened.producer_ids(5)).unwrap_err().to_string();
        assert!(refused.contains("not a producer id"), "{refused}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reads_the_registry_written_before_the_seam() {
        // The file format of the first standalone broker: no owners stored.
        let dir = temp_dir("compat");
        std::fs::write(
            dir.join(TOPICS_FILE),
            "[[topic]]\nname = \"clicks\"\npartitions = 4\nretention_ms = 0\nretention_bytes = 10\nsegment_bytes = 0\nflush_messages = 0\nflush_interval_ms = 5\n",
        )
        .unwrap();
        let mut registry = Standalone::open(&dir, broker(0)).unwrap();
        let topics = block_on(registry.topics()).unwrap();
        assert_eq!(topics.len(), 1);
        assert_eq!(topics[0].partitions, 4);
        assert_eq!(topics[0].retention_bytes, 10);
        assert_eq!(topics[0].flush_interval_ms, 5);
        assert_eq!(topics[0].brokers, vec![0; 4]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn r8_11_names_loaded_from_the_file_are_checked_like_names_from_the_wire() {
        // issue 8, item 11: an entry named ../../escape created escape-0
        // outside the data directory at start.
        let dir = temp_dir("escape");
        std::fs::write(
            dir.join(TOPICS_FILE),
            "[[topic]]\nname = \"../../escape\"\npartitions = 1\n",
        )
        .unwrap();
        let error = Standalone::open(&dir, broker(0)).unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("../../escape") && text.contains("topics.toml"),
            "{text}"
        );
        std::fs::write(
            dir.join(TOPICS_FILE),
            "[[topic]]\nname = \"t\"\npartitions = 0\n",
        )
        .unwrap();
        let error = Standalone::open(&dir, broker(0)).unwrap_err();
        assert!(error.to_string().contains("no partitions"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unreadable_registry_is_named() {
        let dir = temp_dir("corrupt");
        std::fs::write(dir.join(TOPICS_FILE), "[[topic]]\nname = 7\n").unwrap();
        let error = Standalone::open(&dir, broker(0)).unwrap_err();
        assert!(
            error.to_string().contains("topics.toml is unreadable"),
            "{error}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
