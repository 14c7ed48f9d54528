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
    /// A transient failure (disk full, out of descriptors or memory) made
    /// the partition drop its unwritten tail; it refuses appends until
    /// `retry_in` has passed, then tries again.
    #[error("{reason}; the partition refuses writes for another {} ms, then retries", retry_in.as_millis())]
    Unavailable {
        /// What failed.
        reason: String,
        /// How long until appends are accepted again.
        retry_in: std::time::Duration,
    },
}

/// OS errors that say "not now" rather than "this disk is broken": nothing
/// was damaged, the same write can succeed later. They never poison a
/// partition (issue 8, item 3).
const TRANSIENT_ERRNOS: [i32; 6] = [
    libc::ENOSPC,
    libc::EDQUOT,
    libc::EMFILE,
    libc::ENFILE,
    libc::ENOMEM,
    libc::EAGAIN,
];

/// The OS error inside a glommio error, without glommio's Debug decoration
/// (`op: Writing path: Some(..) with fd: Some(23)`): our own message says
/// what was done and where, and the errno survives for classification.
pub fn os_error<T>(error: glommio::GlommioError<T>) -> std::io::Error {
    match error {
        glommio::GlommioError::IoError(source)
        | glommio::GlommioError::EnhancedIoError { source, .. } => source,
        other => other.into(),
    }
}

impl StorageError {
    /// True for a failure that leaves nothing damaged and may pass: the
    /// partition drops what it could not write and refuses appends for a
    /// moment instead of poisoning itself.
    pub fn is_transient(&self) -> bool {
        match self {
            StorageError::Io { source, .. } => source
                .raw_os_error()
                .is_some_and(|errno| TRANSIENT_ERRNOS.contains(&errno)),
            _ => false,
        }
    }

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
