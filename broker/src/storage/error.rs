//! Errors of the storage layer.

use std::path::PathBuf;

/// What can go wrong in a partition's log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// A file operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A fetch or offset lookup outside the retained log.
    #[error("offset {requested} is outside the log [{start}, {end}]")]
    OffsetOutOfRange {
        /// The offset asked for.
        requested: u64,
        /// First retained offset.
        start: u64,
        /// Next offset to be assigned.
        end: u64,
    },
    /// An earlier write or fsync failed; the partition takes no more writes
    /// until the broker restarts and recovers it.
    #[error("partition storage failed earlier and takes no writes: {0}")]
    Poisoned(String),
}

impl StorageError {
    /// Wraps an I/O error with what was being done and where.
    pub fn io(
        op: &'static str,
        path: impl Into<PathBuf>,
        source: impl Into<std::io::Error>,
    ) -> Self {
        StorageError::Io {
            op,
            path: path.into(),
            source: source.into(),
        }
    }
}
