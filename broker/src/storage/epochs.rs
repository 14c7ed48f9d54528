//! A replica's leader epochs: which epoch wrote which bytes (Kafka's
//! `leader-epoch-checkpoint`, KIP-101/KIP-279).
//!
//! An entry `(epoch, start)` says that the bytes from `start` up to the next
//! entry's start (or the log end) were appended by the leader of `epoch`.
//! Entries rise in both fields. The rules that the Kafka fixes taught:
//!
//! - a new leader records `(its epoch, its log end)` before its first write
//!   (KAFKA PR 5678: else back-to-back elections strand followers);
//! - a follower records an epoch when the first byte of it arrives;
//! - after a truncation, entries starting at or past the new end go;
//! - a follower that diverged truncates to the end the leader gives for
//!   its last epoch: the end of the largest epoch ≤ it (the start of the
//!   next one, or the log end), never by high watermark (KIP-101).
//!
//! Kept in the partition directory as `leader-epochs` (a line per entry
//! and a CRC line), replaced whole. Format-1 messages carry no epoch (a
//! mirror copies their bytes verbatim, and its cluster's own epochs must
//! not change them); a format-2 batch carries the epoch that appended it,
//! outside its CRC, and recovery checks it against this file (design
//! record 0015) — which is why the file lives with the storage.

use crate::storage::io::Storage;
use std::path::{Path, PathBuf};

/// The file's name in a partition directory.
pub const EPOCHS_FILE: &str = "leader-epochs";

/// A partition's epoch entries. Not `Send`: its shard's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Epochs {
    entries: Vec<(u32, u64)>,
}

impl Epochs {
    /// The entries, oldest first.
    pub fn entries(&self) -> &[(u32, u64)] {
        &self.entries
    }

    /// The newest entry.
    pub fn last(&self) -> Option<(u32, u64)> {
        self.entries.last().copied()
    }

    /// The newest epoch, -1 for none.
    pub fn last_epoch(&self) -> i32 {
        self.last().map_or(-1, |(e, _)| e as i32)
    }

    /// Records that `epoch` starts at `start`. An older or equal epoch
    /// changes nothing (it is known already); one that starts below the
    /// last entry's start drops the entries it contradicts. True when it
    /// changed something (and must be stored).
    pub fn assign(&mut self, epoch: u32, start: u64) -> bool {
        if let Some((last, _)) = self.last() {
            if epoch <= last {
                return false;
            }
        }
        self.entries.retain(|&(_, s)| s < start);
        // Two epochs cannot start at one offset: the later one wrote it.
        self.entries.push((epoch, start));
        true
    }

    /// The epoch that wrote `offset` (-1: before every entry).
    pub fn epoch_at(&self, offset: u64) -> i32 {
        self.entries
            .iter()
            .rev()
            .find(|&&(_, start)| start <= offset)
            .map_or(-1, |&(e, _)| e as i32)
    }

    /// Where the epoch after the one that wrote `offset` begins, if a later
    /// one does: a chunk sent to a follower stops there, so that every byte
    /// of it is of one epoch.
    pub fn next_start_after(&self, offset: u64) -> Option<u64> {
        self.entries
            .iter()
            .map(|&(_, start)| start)
            .find(|&start| start > offset)
    }

    /// The leader's answer to a follower whose last epoch is `requested`:
    /// the largest epoch ≤ it and where that epoch ends here (the next
    /// epoch's start, or `log_end`). `(-1, first start)` when every epoch
    /// here is newer: the follower keeps nothing past the first.
    pub fn end_for(&self, requested: i32, log_end: u64) -> (i32, u64) {
        let Some(index) = self
            .entries
            .iter()
            .rposition(|&(e, _)| e as i64 <= i64::from(requested))
        else {
            return (-1, self.entries.first().map_or(log_end, |&(_, s)| s));
        };
        let (epoch, _) = self.entries[index];
        let end = self
            .entries
            .get(index + 1)
            .map_or(log_end, |&(_, next)| next);
        (epoch as i32, end.min(log_end))
    }

    /// After the log was cut to `end`: entries starting at or past it go.
    /// True when one did.
    pub fn truncate(&mut self, end: u64) -> bool {
        let before = self.entries.len();
        // An entry that starts exactly at the end keeps its epoch for the
        // bytes that come next only if nothing was cut: drop it too when
        // bytes after it were, as a later fetch re-records it.
        self.entries.retain(|&(_, s)| s < end);
        self.entries.len() != before
    }

    fn encode(&self) -> Vec<u8> {
        let mut text = String::new();
        for (epoch, start) in &self.entries {
            text.push_str(&format!("{epoch} {start}\n"));
        }
        let crc = crc32fast::hash(text.as_bytes());
        text.push_str(&format!("crc {crc:08x}\n"));
        text.into_bytes()
    }

    fn decode(bytes: &[u8]) -> Option<Epochs> {
        let text = std::str::from_utf8(bytes).ok()?;
        let (body, last) = text
            .trim_end_matches('\n')
            .rsplit_once('\n')
            .map_or(("", text.trim_end_matches('\n')), |(body, last)| {
                (body, last)
            });
        let body = if body.is_empty() {
            String::new()
        } else {
            format!("{body}\n")
        };
        let crc = u32::from_str_radix(last.strip_prefix("crc ")?, 16).ok()?;
        if crc32fast::hash(body.as_bytes()) != crc {
            return None;
        }
        let mut entries = Vec::new();
        for line in body.lines() {
            let (epoch, start) = line.split_once(' ')?;
            entries.push((epoch.parse().ok()?, start.parse().ok()?));
        }
        let rising = entries
            .windows(2)
            .all(|w: &[(u32, u64)]| w[0].0 < w[1].0 && w[0].1 < w[1].1);
        rising.then_some(Epochs { entries })
    }

    /// Reads a partition's epochs; a missing file is none. A damaged one
    /// is none too, and says so: the replica then starts from what the
    /// leader tells it (truncating to the leader's first epoch if need be).
    pub fn load<S: Storage>(storage: &S, dir: &Path) -> Epochs {
        let path = dir.join(EPOCHS_FILE);
        match storage.read_file(&path) {
            Ok(bytes) => Epochs::decode(&bytes).unwrap_or_else(|| {
                tracing::error!(file = %path.display(), "the leader epochs file is damaged; starting without it");
                Epochs::default()
            }),
            Err(_) => Epochs::default(),
        }
    }

    /// Stores the epochs, durably: a temporary file, fsynced, renamed over
    /// the old one, the directory synced. Blocking; rare (an election, a
    /// new epoch's first bytes, a truncation).
    pub fn store<S: Storage>(&self, storage: &S, dir: &Path) -> std::io::Result<()> {
        let path: PathBuf = dir.join(EPOCHS_FILE);
        let tmp = dir.join(format!("{EPOCHS_FILE}.tmp"));
        let _ = storage.remove_file(&tmp);
        storage.overwrite_file(&tmp, &self.encode(), true)?;
        storage.rename(&tmp, &path)?;
        storage.sync_dir(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::memory::MemoryStorage;

    #[test]
    fn epochs_answer_kafkas_questions() {
        let mut epochs = Epochs::default();
        assert_eq!(epochs.end_for(3, 100), (-1, 100));
        assert!(epochs.assign(0, 0));
        assert!(epochs.assign(2, 50));
        assert!(!epochs.assign(2, 70), "known");
        assert!(!epochs.assign(1, 60), "older");
        assert!(epochs.assign(5, 80));
        assert_eq!(epochs.entries(), &[(0, 0), (2, 50), (5, 80)]);
        assert_eq!(epochs.epoch_at(49), 0);
        assert_eq!(epochs.epoch_at(50), 2);
        assert_eq!(epochs.epoch_at(100), 5);
        assert_eq!(epochs.next_start_after(10), Some(50));
        assert_eq!(epochs.next_start_after(80), None);
        // A follower whose last epoch is 3 (a leader that never reached
        // this replica): the largest epoch ≤ 3 is 2, ending at 80.
        assert_eq!(epochs.end_for(3, 120), (2, 80));
        assert_eq!(epochs.end_for(5, 120), (5, 120));
        assert_eq!(epochs.end_for(9, 120), (5, 120));
        assert_eq!(epochs.end_for(0, 120), (0, 50));
        // A new leader's epoch starting below the last entry drops the
        // contradicted ones.
        assert!(epochs.assign(7, 60));
        assert_eq!(epochs.entries(), &[(0, 0), (2, 50), (7, 60)]);
        assert!(epochs.truncate(60));
        assert_eq!(epochs.entries(), &[(0, 0), (2, 50)]);
        assert!(!epochs.truncate(60));
    }

    #[test]
    fn epochs_survive_the_file_and_a_damaged_file_reads_as_none() {
        let storage = MemoryStorage::new();
        let dir = Path::new("/data/t-0");
        storage.create_dir_all(dir).unwrap();
        assert_eq!(Epochs::load(&storage, dir), Epochs::default());
        let mut epochs = Epochs::default();
        epochs.assign(1, 0);
        epochs.assign(4, 1234);
        epochs.store(&storage, dir).unwrap();
        assert_eq!(Epochs::load(&storage, dir), epochs);
        Epochs::default().store(&storage, dir).unwrap();
        assert_eq!(Epochs::load(&storage, dir), Epochs::default());
        epochs.store(&storage, dir).unwrap();
        storage.overwrite(&dir.join(EPOCHS_FILE), 0, b"9").unwrap();
        assert_eq!(Epochs::load(&storage, dir), Epochs::default());
    }
}
