//! Partitions whose only copy vanished: a clustered broker that starts on a
//! fresh data directory (no `meta.toml`) although the registry places
//! one-copy partitions on its id lost their data — the directory was wiped
//! or its disk replaced. Serving them empty from offset 0 would reuse
//! offsets that consumers and groups already hold (a committed offset
//! would point into different messages), so each gets a `data-lost` marker
//! in its directory instead, and the shard refuses every produce, fetch
//! and list-offsets of it with DATA_LOST until an operator decides:
//! restore the directory from a copy, or accept the loss by removing the
//! marker. Either way the broker is restarted.
//!
//! The marker, not the fresh directory, is the record: once the broker has
//! started, `meta.toml` exists again, and only the marker remembers.
//!
//! Replicated partitions need none of this: a copy on a fresh directory
//! leaves the ISR and catches up from its leader (`control/replicas.rs`).

use crate::durable_file;
use crate::storage::partition_dir_name;
use coordinator::registry::TopicRecord;
use protocol::types::BrokerId;
use std::path::Path;

/// The marker's file name in a partition directory.
pub const MARKER: &str = "data-lost";

/// Marks every one-copy partition `topics` place on broker `me` that has
/// no directory in `data_dir` (a fresh one); returns their labels.
pub fn mark_vanished(
    data_dir: &Path,
    topics: &[TopicRecord],
    me: BrokerId,
) -> std::io::Result<Vec<String>> {
    let mut marked = Vec::new();
    for topic in topics.iter().filter(|t| !t.is_replicated()) {
        for partition in 0..topic.partitions {
            if !topic.has_replica(partition, me) {
                continue;
            }
            let label = partition_dir_name(&topic.name, partition);
            let dir = data_dir.join(&label);
            if dir.exists() {
                // Its data is here (only meta.toml went missing): served.
                continue;
            }
            std::fs::create_dir_all(&dir)?;
            let text = format!(
                "The registry places partition {label} (topic id {}) on broker {me}, but this\n\
                 broker started on a data directory without it: its data was lost.\n\
                 The broker refuses to serve it, so that no offset is reused.\n\
                 Restore this directory from a copy, or accept the loss (the partition starts\n\
                 again, empty, at offset 0) by removing this file; then restart the broker.\n",
                topic.id
            );
            durable_file::replace(&dir.join(MARKER), text.as_bytes())?;
            marked.push(label);
        }
    }
    if !marked.is_empty() {
        std::fs::File::open(data_dir)?.sync_all()?;
    }
    Ok(marked)
}

/// True when the partition directory `dir` carries the marker.
pub fn is_marked(dir: &Path) -> bool {
    dir.join(MARKER).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(name: &str, brokers: Vec<BrokerId>) -> TopicRecord {
        TopicRecord {
            id: format!("{name}-id"),
            ..TopicRecord::new(name, Default::default(), brokers)
        }
    }

    #[test]
    fn only_missing_one_copy_partitions_placed_here_are_marked() {
        let dir = tempfile_dir();
        // Broker 1 holds partitions 0 and 2 of "a"; 1 is broker 2's.
        let a = topic("a", vec![1, 2, 1]);
        std::fs::create_dir_all(dir.join("a-2")).unwrap();
        let marked = mark_vanished(&dir, &[a], 1).unwrap();
        assert_eq!(marked, vec!["a-0".to_string()]);
        assert!(is_marked(&dir.join("a-0")));
        assert!(!is_marked(&dir.join("a-2")), "its directory was there");
        assert!(!dir.join("a-1").exists(), "not this broker's");
        let text = std::fs::read_to_string(dir.join("a-0").join(MARKER)).unwrap();
        assert!(text.contains("topic id a-id"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "ringlog-lost-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
