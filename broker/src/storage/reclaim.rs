//! Deleted files, freed off the shards' threads.
//!
//! Unlinking the last name of a file frees its blocks, and on a file system
//! mounted with `discard` (this machine's ext4 is) the kernel waits there
//! for the device to discard them. Retention did that on the shard's thread:
//! sampled in D state in `blkdev_issue_discard` ← `ext4_free_blocks` ←
//! `ext4_truncate` ← `ext4_evict_inode` while 1 GiB segments went, it
//! stalled every partition of the shard — a topic paced at 20,000 msg/s
//! beside a full-rate one on the same shard had p99.9 344 ms against 5.6 ms
//! alone (issue 51, item 4; `broker/docs/design/0018-deletes-off-the-shard.md`).
//!
//! So retention and topic deletes hand what they remove to one thread of the
//! process, which cuts each file to zero bytes (the blocks are freed there,
//! whichever thread later closes a descriptor still open on it) and then
//! unlinks it. Nothing here is needed for safety: the files were renamed
//! (`.deleted`, the trash) before they got here, and a start finishes what a
//! crash left (`recovery.rs`, `sweep.rs`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Mutex, OnceLock};

/// Paths handed over and not yet removed (a test waits for 0).
static PENDING: AtomicU64 = AtomicU64::new(0);

fn reclaimer() -> Option<&'static Mutex<Sender<PathBuf>>> {
    static SENDER: OnceLock<Option<Mutex<Sender<PathBuf>>>> = OnceLock::new();
    SENDER
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel::<PathBuf>();
            let spawned = std::thread::Builder::new()
                .name("reclaim".into())
                .spawn(move || {
                    for path in rx {
                        remove_now(&path);
                        PENDING.fetch_sub(1, Ordering::Relaxed);
                    }
                });
            match spawned {
                Ok(_) => Some(Mutex::new(tx)),
                Err(error) => {
                    tracing::warn!(%error, "no thread to remove deleted files: removing them inline");
                    None
                }
            }
        })
        .as_ref()
}

/// Removes a file or a directory tree in the background; errors are logged
/// (a start removes what is left).
pub fn remove(path: PathBuf) {
    let Some(sender) = reclaimer() else {
        remove_now(&path);
        return;
    };
    PENDING.fetch_add(1, Ordering::Relaxed);
    let sent = sender.lock().unwrap_or_else(|p| p.into_inner()).send(path);
    if let Err(unsent) = sent {
        PENDING.fetch_sub(1, Ordering::Relaxed);
        remove_now(&unsent.0);
    }
}

/// Paths handed to [`remove`] and not removed yet.
pub fn pending() -> u64 {
    PENDING.load(Ordering::Relaxed)
}

/// Cuts every file under `path` (or `path` itself) to zero bytes, then
/// removes it all.
fn remove_now(path: &Path) {
    let result = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => {
            empty_files(path);
            std::fs::remove_dir_all(path)
        }
        Ok(_) => {
            cut_to_zero(path);
            std::fs::remove_file(path)
        }
        Err(error) => Err(error),
    };
    match result {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "removing a deleted file; a restart removes it");
        }
    }
}

fn empty_files(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => empty_files(&entry.path()),
            Ok(kind) if kind.is_file() => cut_to_zero(&entry.path()),
            _ => {}
        }
    }
}

/// How much one truncation step frees: the device discards each step's
/// blocks before the next, so a flush of another partition waits behind
/// at most one step's discard, not a whole segment's.
const STEP_BYTES: u64 = 64 << 20;

/// Cuts a file to nothing from its end, a step at a time.
fn cut_to_zero(path: &Path) {
    let Ok(file) = std::fs::OpenOptions::new().write(true).open(path) else {
        return;
    };
    let mut len = file.metadata().map_or(0, |m| m.len());
    while len > 0 {
        len = len.saturating_sub(STEP_BYTES);
        if file.set_len(len).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait_until_idle() {
        for _ in 0..500 {
            if pending() == 0 {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("the reclaim thread did not finish");
    }

    #[test]
    fn files_and_trees_are_removed_in_the_background_even_while_open() {
        let dir = std::env::temp_dir().join(format!("ringlog-reclaim-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("tree/inner")).unwrap();
        std::fs::write(dir.join("segment.log.deleted"), vec![7u8; 100_000]).unwrap();
        std::fs::write(dir.join("tree/inner/a.log"), vec![1u8; 5_000]).unwrap();
        // A descriptor still open (a fetch sending from it): the file is
        // cut to nothing and unlinked all the same.
        let open = std::fs::File::open(dir.join("segment.log.deleted")).unwrap();
        remove(dir.join("segment.log.deleted"));
        remove(dir.join("tree"));
        remove(dir.join("never-there"));
        wait_until_idle();
        assert!(!dir.join("segment.log.deleted").exists());
        assert!(!dir.join("tree").exists());
        assert_eq!(open.metadata().unwrap().len(), 0, "its blocks were freed");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
