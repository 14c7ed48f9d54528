//! Partition directories that no registered topic owns: deleting a topic
//! crash-safely, and moving aside what a crash, an outage or a registry
//! that forgot left behind.
//!
//! A deleted topic must never come back: re-creating its name must not serve
//! the old topic's messages (issue 8, item 5). Deleting a topic takes two
//! steps that a crash can separate: the registry forgets it, then each
//! partition directory goes. So:
//!
//! - **Delete** renames each partition directory into the *trash*
//!   (`<data-dir>/.trash/<stamp>-<n>`) and fsyncs the data directory
//!   before it answers, then removes it. A rename is atomic, so after a
//!   crash a directory is either still live-named or in the trash.
//! - **At start**, before any partition opens, the trash is emptied (the
//!   delete finishes), and every live-named partition directory that the
//!   registry does not give to this broker — left by a crash between the two
//!   steps, or by a topic deleted while this broker was down — is *moved
//!   aside* into `<data-dir>/.orphaned/<stamp>-<n>/<topic>-<partition>` and
//!   reported loudly. A running broker does the same with a topic that a
//!   registry snapshot no longer lists (an etcd restored from an older
//!   backup): only an observed delete removes data. Orphans are never
//!   deleted: a registry lost by an operator's mistake must not take the
//!   data with it; the directory inside keeps its name, so moving it back
//!   is one `mv`.
//!
//! Both live in their own folders so that a topic name of any valid length
//! (249 characters, plus `-` and the partition's digits) never grows past
//! the 255-byte limit of a file name (issue 24, item 1: a `~deleted-<nanos>`
//! suffix did, and a delete failed with `File name too long`, then the next
//! start). Neither folder's name parses as a partition directory. Older
//! brokers' `<dir>~deleted-N` tombstones are still removed at start.

use crate::storage::StorageError;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Where deletes put partition directories before removing them.
pub const TRASH_DIR: &str = ".trash";
/// Where partition directories that nothing owns are kept.
pub const ORPHANED_DIR: &str = ".orphaned";
/// The file beside a moved-aside directory that says why (`orphans.rs`
/// reads it back).
pub const WHY_FILE: &str = "why";
/// The tombstone marker of brokers before the trash folder.
const OLD_TOMBSTONE: &str = "~deleted-";

/// A name unique within this process and, by its time, across restarts.
fn stamp() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{nanos}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// `(topic, partition)` of a live-named partition directory.
pub fn parse_partition_dir(name: &str) -> Option<(&str, u32)> {
    let (topic, partition) = name.rsplit_once('-')?;
    if partition.is_empty() || !partition.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    protocol::types::validate_topic_name(topic).ok()?;
    Some((topic, partition.parse().ok()?))
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Renames partition directories into the trash, fsyncs their parent, then
/// removes them. Fails if a directory could not be renamed (it is then
/// moved aside at the next start); trash that cannot be removed now is
/// removed at the next start.
pub fn delete_partition_dirs(dirs: &[PathBuf]) -> Result<(), DeleteError> {
    let mut failures = Vec::new();
    let mut trashed = Vec::new();
    let mut parents = BTreeSet::new();
    for dir in dirs {
        let Some(parent) = dir.parent() else {
            continue;
        };
        let trash = parent.join(TRASH_DIR);
        if let Err(e) = std::fs::create_dir_all(&trash) {
            failures.push(StorageError::io("creating", &trash, e));
            continue;
        }
        let target = trash.join(stamp());
        match std::fs::rename(dir, &target) {
            Ok(()) => {
                trashed.push(target);
                parents.insert(parent.to_path_buf());
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => failures.push(StorageError::io("moving aside", dir, e)),
        }
    }
    for parent in &parents {
        if let Err(e) = sync_dir(parent).and_then(|()| sync_dir(&parent.join(TRASH_DIR))) {
            failures.push(StorageError::io("syncing", parent, e));
        }
    }
    // Off the caller's thread: freeing a partition's gigabytes blocks
    // (`reclaim.rs`); what a crash leaves in the trash goes at the next start.
    for dir in trashed {
        super::reclaim::remove(dir);
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(DeleteError(failures))
    }
}

/// The partition directories a delete could not move into the trash (or
/// make durable there): each is moved aside at the next start.
#[derive(Debug, Default, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct DeleteError(pub Vec<StorageError>);

impl DeleteError {
    /// Adds `other`'s failures to these (one topic's, from every shard).
    pub fn extend(&mut self, other: DeleteError) {
        self.0.extend(other.0);
    }
}

/// Moves one partition directory aside into `<data-dir>/.orphaned/`,
/// durably, and says so on the log with `why`. Returns where it went.
pub fn move_aside(dir: &Path, why: &str) -> std::io::Result<PathBuf> {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err(std::io::Error::other(format!(
            "{} is not a partition directory",
            dir.display()
        )));
    };
    let folder = parent.join(ORPHANED_DIR).join(stamp());
    std::fs::create_dir_all(&folder)?;
    // Why, for `ringlog brokers describe` (`orphans.rs`); the stamp says
    // when.
    std::fs::write(folder.join(WHY_FILE), format!("{why}\n"))?;
    let target = folder.join(name);
    std::fs::rename(dir, &target)?;
    sync_dir(&folder)?;
    sync_dir(parent)?;
    tracing::warn!(
        dir = %name.to_string_lossy(),
        moved_to = %target.display(),
        why,
        "a partition directory that no registered topic gives this broker: moved aside, not deleted; move it back if it is needed, remove it once sure it is not"
    );
    Ok(target)
}

/// What the start-up sweep did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Interrupted deletes finished (trash and old tombstones removed).
    pub tombstones_removed: usize,
    /// Partition directories no registered topic owns, moved aside: their
    /// names and where they went.
    pub orphans_moved: Vec<(String, PathBuf)>,
}

/// Finishes interrupted deletes and moves aside the partition directories
/// of `data_dir` for which `owned(topic, partition)` is false. One entry
/// that cannot be handled is logged and left; the sweep goes on.
pub fn sweep(data_dir: &Path, owned: impl Fn(&str, u32) -> bool) -> std::io::Result<Swept> {
    let mut swept = Swept::default();
    let trash = data_dir.join(TRASH_DIR);
    if let Ok(entries) = std::fs::read_dir(&trash) {
        for entry in entries.flatten() {
            match std::fs::remove_dir_all(entry.path()) {
                Ok(()) => swept.tombstones_removed += 1,
                Err(error) => {
                    tracing::warn!(dir = %entry.path().display(), %error, "removing a deleted partition")
                }
            }
        }
    }
    for entry in std::fs::read_dir(data_dir)? {
        let entry = entry?;
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Some(name) = entry.file_name().to_str().map(String::from) else {
            continue;
        };
        if name.contains(OLD_TOMBSTONE) {
            match std::fs::remove_dir_all(entry.path()) {
                Ok(()) => swept.tombstones_removed += 1,
                Err(error) => {
                    tracing::warn!(dir = %entry.path().display(), %error, "removing a deleted partition")
                }
            }
            continue;
        }
        let Some((topic, partition)) = parse_partition_dir(&name) else {
            continue;
        };
        if owned(topic, partition) {
            continue;
        }
        match move_aside(
            &entry.path(),
            "at start: a topic deleted during a crash or while this broker was down, or one the registry does not list",
        ) {
            Ok(target) => swept.orphans_moved.push((name, target)),
            Err(error) => {
                tracing::error!(dir = %name, %error, "moving a partition directory aside; it stays where it is and is not opened")
            }
        }
    }
    if swept.tombstones_removed > 0 {
        sync_dir(data_dir)?;
    }
    Ok(swept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_directory_names_parse_and_markers_never_do() {
        assert_eq!(parse_partition_dir("clicks-0"), Some(("clicks", 0)));
        assert_eq!(parse_partition_dir("a-b-12"), Some(("a-b", 12)));
        assert_eq!(parse_partition_dir("a-0~deleted-123"), None);
        assert_eq!(parse_partition_dir(TRASH_DIR), None);
        assert_eq!(parse_partition_dir(ORPHANED_DIR), None);
        assert_eq!(parse_partition_dir("topics.toml"), None);
        assert_eq!(parse_partition_dir("-3"), None);
        assert_eq!(parse_partition_dir("a-"), None);
    }

    fn temp(label: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("ringlog-sweep-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_sweep_finishes_deletes_and_moves_unowned_directories_aside() {
        let dir = temp("basic");
        for name in ["kept-0", "gone-0", "gone-1", "kept-5", "x-0~deleted-7"] {
            std::fs::create_dir_all(dir.join(name)).unwrap();
            std::fs::write(dir.join(name).join("00000000000000000000.log"), b"data").unwrap();
        }
        std::fs::create_dir_all(dir.join(TRASH_DIR).join("1-0")).unwrap();
        std::fs::write(dir.join("topics.toml"), "").unwrap();
        let swept = sweep(&dir, |topic, p| topic == "kept" && p < 2).unwrap();
        assert_eq!(swept.tombstones_removed, 2);
        let moved: Vec<&str> = swept
            .orphans_moved
            .iter()
            .map(|(a, _)| a.as_str())
            .collect();
        assert_eq!(moved.len(), 3);
        for name in ["gone-0", "gone-1", "kept-5"] {
            assert!(moved.contains(&name), "{moved:?}");
        }
        assert!(dir.join("kept-0").exists());
        // Moved aside with their data and their names, not deleted.
        for (name, aside) in &swept.orphans_moved {
            assert!(aside.starts_with(dir.join(ORPHANED_DIR)));
            assert_eq!(aside.file_name().unwrap().to_str(), Some(name.as_str()));
            assert!(aside.join("00000000000000000000.log").exists());
        }
        // A second sweep finds nothing left to do.
        assert_eq!(
            sweep(&dir, |topic, p| topic == "kept" && p < 2).unwrap(),
            Swept::default()
        );

        delete_partition_dirs(&[dir.join("kept-0"), dir.join("never-was-0")]).unwrap();
        assert!(!dir.join("kept-0").exists());
        // The trash is emptied by the reclaim thread.
        for _ in 0..500 {
            if std::fs::read_dir(dir.join(TRASH_DIR)).unwrap().count() == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(std::fs::read_dir(dir.join(TRASH_DIR)).unwrap().count(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Issue 24, item 1: every valid topic name length, with partition
    /// numbers of up to four digits, can be deleted and moved aside.
    #[test]
    fn r24_1_names_of_every_valid_length_can_be_deleted_and_moved_aside() {
        let dir = temp("long");
        for len in 1usize..=249 {
            let topic: String = "t".repeat(len);
            for partition in [0u32, 999] {
                let name = format!("{topic}-{partition}");
                if name.len() > 255 {
                    continue; // the broker refuses to create such a topic
                }
                std::fs::create_dir_all(dir.join(&name)).unwrap();
                delete_partition_dirs(&[dir.join(&name)]).unwrap();
                assert!(!dir.join(&name).exists(), "{len}");
                std::fs::create_dir_all(dir.join(&name)).unwrap();
                let aside = move_aside(&dir.join(&name), "test").unwrap();
                assert!(aside.exists(), "{len}");
            }
        }
        let swept = sweep(&dir, |_, _| false).unwrap();
        assert!(swept.orphans_moved.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
