//! Which replicated copies on this broker are *new*: they hold none of
//! their partition's history, whatever the registry says of this broker,
//! until a leader adds them to the ISR again (issue 47,
//! `broker/docs/design/0016-lost-disks.md`).
//!
//! A copy is new when its topic existed before this run and its partition
//! directory was not there when the run started — a new data directory,
//! the partition's directory removed, or a directory of another topic of
//! the same name — or when its directory holds the `not-in-sync` marker a
//! new copy's earlier run left. The marker keeps the copy new across
//! restarts (a copy that was new, fetched part of the log and crashed is
//! still not the ISR's), and is removed once a leader has added the copy.
//!
//! The directories are listed once, before the control thread or any
//! shard creates one, so both judge a copy from the same snapshot: the
//! control thread does not elect a new copy, and the copy does not lead.

use super::partition_dir_name;
use super::topic_id::TOPIC_ID_FILE;
use coordinator::registry::TopicRecord;
use protocol::types::PartitionId;
use std::collections::HashMap;
use std::path::Path;

/// The marker's file name in a partition directory.
pub const MARKER: &str = "not-in-sync";

/// The partition directories as the run found them.
#[derive(Debug, Default, Clone)]
pub struct CopiesAtStart {
    /// Directory name → (its topic id, empty when none; the marker).
    dirs: HashMap<String, (String, bool)>,
}

impl CopiesAtStart {
    /// Lists `data_dir`'s partition directories (none: a new directory).
    pub fn scan(data_dir: &Path) -> std::io::Result<CopiesAtStart> {
        let mut dirs = HashMap::new();
        let entries = match std::fs::read_dir(data_dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || !entry.file_type()?.is_dir() {
                continue;
            }
            let path = entry.path();
            let id = std::fs::read_to_string(path.join(TOPIC_ID_FILE))
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
            let marked = path.join(MARKER).exists();
            dirs.insert(name, (id, marked));
        }
        Ok(CopiesAtStart { dirs })
    }

    /// True when this broker's copy of `record`'s `partition` is new (see
    /// the module). Only for topics that existed when the run started.
    pub fn is_new(&self, record: &TopicRecord, partition: PartitionId) -> bool {
        match self.dirs.get(&partition_dir_name(&record.name, partition)) {
            None => true,
            Some((id, marked)) => {
                *marked || (!id.is_empty() && !record.id.is_empty() && *id != record.id)
            }
        }
    }
}

/// Writes the marker into a new copy's directory (created if missing).
pub fn mark(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    crate::durable_file::replace(
        &dir.join(MARKER),
        b"a new copy: not in sync until a leader adds it to the ISR\n",
    )
}

/// Removes the marker: a leader added the copy to the ISR.
pub fn unmark(storage: &impl super::io::Storage, dir: &Path) {
    match storage.remove_file(&dir.join(MARKER)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            // Harmless: the copy stays new after a restart, leaves the
            // ISR and is added again.
            tracing::warn!(dir = %dir.display(), %error, "removing the new-copy marker");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_new_without_its_directory_with_the_marker_or_under_another_topic() {
        let data = std::env::temp_dir().join(format!("new-copy-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data);
        std::fs::create_dir_all(data.join("t-0")).unwrap();
        std::fs::write(data.join("t-0").join(TOPIC_ID_FILE), "id-a").unwrap();
        std::fs::create_dir_all(data.join("t-1")).unwrap();
        mark(&data.join("t-2")).unwrap();
        std::fs::create_dir_all(data.join("u-0")).unwrap();
        std::fs::write(data.join("u-0").join(TOPIC_ID_FILE), "id-old").unwrap();
        let scan = CopiesAtStart::scan(&data).unwrap();
        let mut t = TopicRecord::new("t", Default::default(), vec![1; 4]);
        t.id = "id-a".into();
        assert!(!scan.is_new(&t, 0), "its own directory");
        assert!(!scan.is_new(&t, 1), "a directory from before topic ids");
        assert!(scan.is_new(&t, 2), "the marker");
        assert!(scan.is_new(&t, 3), "no directory");
        let mut u = TopicRecord::new("u", Default::default(), vec![1]);
        u.id = "id-new".into();
        assert!(scan.is_new(&u, 0), "another topic's directory");
        unmark(&super::super::io::DiskStorage::plain(), &data.join("t-2"));
        assert!(!CopiesAtStart::scan(&data).unwrap().is_new(&t, 2));
        assert!(CopiesAtStart::scan(&data.join("missing"))
            .unwrap()
            .is_new(&t, 0));
        std::fs::remove_dir_all(&data).unwrap();
    }
}
