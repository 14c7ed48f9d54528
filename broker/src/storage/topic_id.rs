//! Which topic a partition directory belongs to: `<dir>/topic-id` holds
//! the id of the topic record it was created for (Kafka's
//! `partition.metadata`, KIP-516).
//!
//! A topic's name is not its identity: a name deleted and created again is
//! a new topic with a new id, placed on the same brokers (placement is a
//! function of the name). A directory whose file names another id is the
//! old topic's — left by a crash in the middle of a delete, or by a delete
//! this broker never saw — and is never opened as the new one's: the
//! caller moves it aside and starts the partition empty.
//!
//! The file is written when the directory is first opened for a record
//! with an id, through the storage seam (the shard's disk driver opens it
//! and batches its fdatasync with the shard's other flushes, so creating
//! thousands of partitions costs no blocking fsync each). A directory
//! without the file (created before ids existed, or by a record without
//! one) is adopted by the first record that opens it.

use super::io::{SegmentFile, Storage};
use super::StorageError;
use std::path::Path;

/// The file's name inside a partition directory.
pub const TOPIC_ID_FILE: &str = "topic-id";

/// What a partition directory said about its topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// It belongs to the topic with this id (or the record has no id).
    Ours,
    /// It had no id (new, or older than ids): it has this one now.
    Adopted,
    /// It belongs to another topic of the same name: this id.
    Other(String),
}

/// Checks `dir` against topic id `id`, and writes the id into a directory
/// that has none. An empty `id` (a record from before ids) claims nothing.
pub async fn claim<S: Storage>(storage: &S, dir: &Path, id: &str) -> Result<Claim, StorageError> {
    if id.is_empty() {
        return Ok(Claim::Ours);
    }
    let path = dir.join(TOPIC_ID_FILE);
    match storage.read_file(&path) {
        Ok(bytes) => {
            let found = String::from_utf8_lossy(&bytes).trim().to_string();
            if found == id {
                return Ok(Claim::Ours);
            }
            if !found.is_empty() {
                return Ok(Claim::Other(found));
            }
            // Empty: a crash right after the file was made. Write it again.
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(StorageError::io("reading", &path, e)),
    }
    storage
        .create_dir_all(dir)
        .map_err(|e| StorageError::io("creating", dir, e))?;
    let file = storage
        .open(&path, true)
        .await
        .map_err(|e| StorageError::io("creating", &path, e))?;
    let line = format!("{id}\n").into_bytes();
    let len = line.len();
    let written = file
        .write_at(vec![line], 0)
        .await
        .map_err(|e| StorageError::io("writing", &path, e))?;
    if written < len {
        return Err(StorageError::io(
            "writing",
            &path,
            std::io::Error::from(std::io::ErrorKind::StorageFull),
        ));
    }
    file.fdatasync()
        .await
        .map_err(|e| StorageError::io("fdatasync", &path, e))?;
    Ok(Claim::Adopted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::memory::MemoryStorage;

    #[test]
    fn a_directory_is_claimed_once_and_another_topics_is_recognised() {
        let storage = MemoryStorage::new();
        let dir = Path::new("/data/t-0");
        let run = |id: &'static str| storage.block_on(claim(&storage, dir, id)).unwrap();
        assert_eq!(run(""), Claim::Ours);
        assert_eq!(run("aaa"), Claim::Adopted);
        assert_eq!(run("aaa"), Claim::Ours);
        assert_eq!(run("bbb"), Claim::Other("aaa".into()));
        // What the claim wrote survives the process.
        storage.crash(None);
        assert_eq!(run("aaa"), Claim::Ours);
    }
}
