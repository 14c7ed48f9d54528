//! Small files the broker replaces whole: a temporary file, fsync, rename,
//! then an fsync of the directory, so a crash leaves the old content or
//! the new, never a torn or empty file, and a finished replace survives a
//! power cut. For the control thread and start-up, never a shard's reactor
//! (every step blocks).

use std::io::Write;
use std::path::Path;

/// Replaces `path` with `bytes`, atomically and durably.
pub fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// A file's content, `None` when it does not exist.
pub fn read(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}
