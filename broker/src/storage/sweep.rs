//! Partition directories that no registered topic owns: deleting a topic
//! crash-safely, and moving aside at start what a crash or an outage left.
//!
//! A deleted topic must never come back: re-creating its name must not serve
//! the old topic's messages (issue 8, item 5). Deleting a topic takes two
//! steps that a crash can separate: the registry forgets it, then each
//! partition directory goes. So:
//!
//! - **Delete** renames each partition directory to a *tombstone*
//!   (`<topic>-<partition>~deleted-<nanos>`) and fsyncs the data directory
//!   before it answers, then removes the tombstones. A rename is atomic, so
//!   after a crash a directory is either still live-named or a tombstone.
//! - **At start**, before any partition opens, tombstones are removed (the
//!   delete finishes), and every live-named partition directory that the
//!   registry does not give to this broker — left by a crash between the two
//!   steps, or by a topic deleted while this broker was down — is moved
//!   aside as `<topic>-<partition>~orphaned-<nanos>` and reported loudly.
//!   Orphans are never deleted: a registry lost by an operator's mistake must
//!   not take the data with it.
//!
//! `~` cannot appear in a topic name, so these names never collide with a
//! partition's.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const TOMBSTONE: &str = "~deleted-";
const ORPHAN: &str = "~orphaned-";

fn stamp() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
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

/// Renames partition directories to tombstones, fsyncs their parent, then
/// removes the tombstones. Fails if a directory could not be renamed (it is
/// then moved aside at the next start); a tombstone that cannot be removed
/// now is removed at the next start.
pub fn delete_partition_dirs(dirs: &[PathBuf]) -> Result<(), String> {
    let mut failures = Vec::new();
    let mut tombstones = Vec::new();
    let mut parents = BTreeSet::new();
    for dir in dirs {
        let Some(name) = dir.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let tombstone = dir.with_file_name(format!("{name}{TOMBSTONE}{}", stamp()));
        match std::fs::rename(dir, &tombstone) {
            Ok(()) => {
                tombstones.push(tombstone);
                if let Some(parent) = dir.parent() {
                    parents.insert(parent.to_path_buf());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => failures.push(format!("moving {} aside: {e}", dir.display())),
        }
    }
    for parent in &parents {
        if let Err(e) = sync_dir(parent) {
            failures.push(format!("syncing {}: {e}", parent.display()));
        }
    }
    for tombstone in tombstones {
        if let Err(error) = std::fs::remove_dir_all(&tombstone) {
            tracing::warn!(dir = %tombstone.display(), %error, "removing a deleted partition; it is removed at the next start");
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

/// What the start-up sweep did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Tombstones of interrupted deletes, removed.
    pub tombstones_removed: usize,
    /// Partition directories no registered topic owns, moved aside.
    pub orphans_moved: Vec<(String, String)>,
}

/// Finishes interrupted deletes and moves aside the partition directories
/// of `data_dir` for which `owned(topic, partition)` is false.
pub fn sweep(data_dir: &Path, owned: impl Fn(&str, u32) -> bool) -> std::io::Result<Swept> {
    let mut swept = Swept::default();
    for entry in std::fs::read_dir(data_dir)? {
        let entry = entry?;
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let Some(name) = entry.file_name().to_str().map(String::from) else {
            continue;
        };
        if name.contains(TOMBSTONE) {
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
        let aside = format!("{name}{ORPHAN}{}", stamp());
        std::fs::rename(entry.path(), data_dir.join(&aside))?;
        tracing::warn!(
            dir = %name,
            moved_to = %aside,
            "a partition directory that no registered topic gives this broker (a topic deleted during a crash or while this broker was down): moved aside, not deleted; remove it once sure it is not needed"
        );
        swept.orphans_moved.push((name, aside));
    }
    if swept.tombstones_removed > 0 || !swept.orphans_moved.is_empty() {
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
        assert_eq!(parse_partition_dir("a-0~orphaned-123"), None);
        assert_eq!(parse_partition_dir("topics.toml"), None);
        assert_eq!(parse_partition_dir("-3"), None);
        assert_eq!(parse_partition_dir("a-"), None);
    }

    #[test]
    fn a_sweep_finishes_deletes_and_moves_unowned_directories_aside() {
        let dir = std::env::temp_dir().join(format!("ringlog-sweep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for name in ["kept-0", "gone-0", "gone-1", "kept-5", "x-0~deleted-7"] {
            std::fs::create_dir_all(dir.join(name)).unwrap();
            std::fs::write(dir.join(name).join("00000000000000000000.log"), b"data").unwrap();
        }
        std::fs::write(dir.join("topics.toml"), "").unwrap();
        let swept = sweep(&dir, |topic, p| topic == "kept" && p < 2).unwrap();
        assert_eq!(swept.tombstones_removed, 1);
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
        // Moved aside with their data, not deleted.
        for (_, aside) in &swept.orphans_moved {
            assert!(dir.join(aside).join("00000000000000000000.log").exists());
        }
        // A second sweep finds nothing left to do.
        assert_eq!(
            sweep(&dir, |topic, p| topic == "kept" && p < 2).unwrap(),
            Swept::default()
        );

        delete_partition_dirs(&[dir.join("kept-0"), dir.join("never-was-0")]).unwrap();
        assert!(!dir.join("kept-0").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
