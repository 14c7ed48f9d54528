//! Why a shard could not open, change or delete its part of a topic. The
//! control task gathers these from every shard and answers the request
//! (or logs the registry's change) with them.

use crate::config::SettingsError;
use crate::storage::sweep::DeleteError;
use crate::storage::StorageError;
use coordinator::registry::RecordError;

/// Why a shard could not take a topic's record.
#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    /// The record breaks a rule (a bad record in etcd or on disk).
    #[error(transparent)]
    Record(#[from] RecordError),
    /// Its settings are out of this broker's range.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// A partition directory could not be claimed, recovered or cut.
    #[error("opening partition {label}: {source}")]
    Open {
        /// The partition's directory name.
        label: String,
        /// What failed.
        source: StorageError,
    },
    /// An earlier topic's directory of that name could not be moved aside.
    #[error("moving aside partition {label} of an earlier topic: {source}")]
    MoveAside {
        /// The partition's directory name.
        label: String,
        /// What failed.
        source: std::io::Error,
    },
    /// A new copy could not be marked so (it would enter the ISR empty).
    #[error("marking {label} a new copy: {source}")]
    MarkNewCopy {
        /// The partition's directory name.
        label: String,
        /// What failed.
        source: std::io::Error,
    },
    /// Copies that moved off this broker could not be deleted.
    #[error(transparent)]
    Delete(#[from] DeleteError),
}
