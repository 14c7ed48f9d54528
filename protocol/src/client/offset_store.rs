//! Consumer positions in a file, for consumers without a group: saved with
//! write-to-temporary, fsync, rename, fsync of the directory, so a crash at
//! any moment leaves either the previous positions or the new ones.

use super::ClientError;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

const HEADER: &str = "# ringlog consumer positions v1: partition offset";

/// Positions (next offset per partition) of one topic, kept in a file.
///
/// ```
/// use protocol::client::OffsetStore;
/// # let dir = std::env::temp_dir().join(format!("ringlog-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// let store = OffsetStore::new(dir.join("clicks.offsets"));
/// assert!(store.load()?.is_empty()); // no file yet: start from scratch
/// store.save(&[(0, 4096), (3, 128)].into_iter().collect())?;
/// assert_eq!(store.load()?.get(&0), Some(&4096));
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), protocol::client::ClientError>(())
/// ```
#[derive(Debug, Clone)]
pub struct OffsetStore {
    path: PathBuf,
}

impl OffsetStore {
    /// A store in the file at `path` (created by the first `save`).
    pub fn new(path: impl Into<PathBuf>) -> OffsetStore {
        OffsetStore { path: path.into() }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The saved positions; empty when nothing was saved yet.
    pub fn load(&self) -> Result<BTreeMap<u32, u64>, ClientError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
            Err(e) => return Err(self.io("reading", e)),
        };
        let mut positions = BTreeMap::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let parsed = line
                .split_once(' ')
                .and_then(|(p, o)| Some((p.parse::<u32>().ok()?, o.trim().parse::<u64>().ok()?)));
            let Some((partition, offset)) = parsed else {
                return Err(ClientError::Usage(format!(
                    "{}:{}: expected \"PARTITION OFFSET\", found {line:?}",
                    self.path.display(),
                    number + 1
                )));
            };
            positions.insert(partition, offset);
        }
        Ok(positions)
    }

    /// Replaces the saved positions, atomically and durably.
    pub fn save(&self, positions: &BTreeMap<u32, u64>) -> Result<(), ClientError> {
        let mut text = String::from(HEADER);
        text.push('\n');
        for (partition, offset) in positions {
            text.push_str(&format!("{partition} {offset}\n"));
        }
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temporary = self.path.with_file_name(format!(".{name}.tmp"));
        let write = || -> std::io::Result<()> {
            let mut file = std::fs::File::create(&temporary)?;
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&temporary, &self.path)?;
            // The rename itself must survive a crash.
            let dir = match self.path.parent() {
                Some(dir) if !dir.as_os_str().is_empty() => dir,
                _ => Path::new("."),
            };
            std::fs::File::open(dir)?.sync_all()
        };
        write().map_err(|e| self.io("saving", e))
    }

    fn io(&self, doing: &str, e: std::io::Error) -> ClientError {
        ClientError::Io(std::io::Error::new(
            e.kind(),
            format!("{doing} {}: {e}", self.path.display()),
        ))
    }
}
