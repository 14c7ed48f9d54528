//! What lies in `<data-dir>/.orphaned/` (`sweep.rs` moves partition
//! directories there instead of deleting them): each folder
//! `<nanos>-<n>/` holds one partition directory, named as it was, and a
//! `why` file saying why it was moved aside (folders made before the file
//! existed have none). Listed for `ringlog brokers describe` and the
//! metrics; deleted only when an operator asks (`ringlog brokers
//! purge-orphaned N --older-than AGE`), never by the broker on its own.
//! Plain blocking file-system calls: callers run them off the shards.

use super::sweep::{parse_partition_dir, ORPHANED_DIR, WHY_FILE};
use protocol::codec::orphans::Orphan;
use std::path::Path;

/// Every partition directory in `.orphaned/`, oldest first. A data
/// directory without the folder has none.
pub fn list(data_dir: &Path) -> std::io::Result<Vec<Orphan>> {
    let root = data_dir.join(ORPHANED_DIR);
    let folders = match std::fs::read_dir(&root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut orphans = Vec::new();
    for folder in folders.flatten() {
        let stamp = folder.file_name().to_string_lossy().into_owned();
        // `<nanos>-<n>`: when it was moved aside.
        let moved_at_ms = stamp
            .split_once('-')
            .and_then(|(nanos, _)| nanos.parse::<u128>().ok())
            .map_or(0, |nanos| (nanos / 1_000_000) as u64);
        let why = std::fs::read_to_string(folder.path().join(WHY_FILE))
            .map(|w| w.trim_end().to_string())
            .unwrap_or_default();
        let Ok(inside) = std::fs::read_dir(folder.path()) else {
            continue;
        };
        for entry in inside.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((topic, partition)) = parse_partition_dir(&name) else {
                continue;
            };
            orphans.push(Orphan {
                topic: topic.to_string(),
                partition,
                bytes: bytes_in(&entry.path()),
                why: why.clone(),
                moved_at_ms,
                path: format!("{ORPHANED_DIR}/{stamp}/{name}"),
            });
        }
    }
    orphans.sort_by(|a, b| (a.moved_at_ms, &a.path).cmp(&(b.moved_at_ms, &b.path)));
    Ok(orphans)
}

/// Deletes what was moved aside at least `older_than_ms` before `now_ms`
/// (whole folders, their `why` with them); returns what it deleted.
pub fn purge(data_dir: &Path, older_than_ms: u64, now_ms: u64) -> std::io::Result<Vec<Orphan>> {
    let mut purged = Vec::new();
    for orphan in list(data_dir)? {
        if orphan.moved_at_ms.saturating_add(older_than_ms) > now_ms {
            continue;
        }
        let dir = data_dir.join(&orphan.path);
        std::fs::remove_dir_all(&dir)?;
        tracing::warn!(dir = %dir.display(), bytes = orphan.bytes, "orphaned partition directory purged on request");
        if let Some(folder) = dir.parent() {
            // The folder goes with its last directory.
            let empty = std::fs::read_dir(folder).is_ok_and(|entries| {
                entries
                    .flatten()
                    .all(|e| e.file_name() == std::ffi::OsStr::new(WHY_FILE))
            });
            if empty {
                std::fs::remove_dir_all(folder)?;
            }
        }
        purged.push(orphan);
    }
    Ok(purged)
}

/// The bytes of the files under `dir`.
fn bytes_in(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => bytes_in(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_was_moved_aside_is_listed_with_why_and_purged_only_when_old_enough() {
        let dir = std::env::temp_dir().join(format!("ringlog-orphans-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("clicks-0")).unwrap();
        std::fs::write(dir.join("clicks-0").join("0.log"), vec![7u8; 1000]).unwrap();
        assert_eq!(list(&dir).unwrap(), Vec::new());
        let aside =
            super::super::sweep::move_aside(&dir.join("clicks-0"), "a test's reason").unwrap();
        assert!(aside.starts_with(dir.join(ORPHANED_DIR)));
        // One from a broker before the `why` file.
        std::fs::create_dir_all(dir.join(ORPHANED_DIR).join("1000000-0").join("old-3")).unwrap();
        let listed = list(&dir).unwrap();
        assert_eq!(listed.len(), 2, "{listed:?}");
        assert_eq!(
            (
                listed[0].topic.as_str(),
                listed[0].partition,
                listed[0].why.as_str()
            ),
            ("old", 3, "")
        );
        assert_eq!(listed[0].moved_at_ms, 1);
        let clicks = &listed[1];
        assert_eq!(
            (clicks.topic.as_str(), clicks.partition, clicks.bytes),
            ("clicks", 0, 1000)
        );
        assert_eq!(clicks.why, "a test's reason");
        // Too young: kept; the old one goes.
        let now = clicks.moved_at_ms + 1_000;
        let purged = purge(&dir, 60_000, now).unwrap();
        assert_eq!(purged.len(), 1);
        assert_eq!(purged[0].topic, "old");
        assert!(!dir.join(ORPHANED_DIR).join("1000000-0").exists());
        assert_eq!(list(&dir).unwrap().len(), 1);
        let purged = purge(&dir, 0, now).unwrap();
        assert_eq!(purged.len(), 1);
        assert_eq!(list(&dir).unwrap(), Vec::new());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
