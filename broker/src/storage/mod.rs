//! The paper's partitioned log on disk.
//!
//! ```text
//! <data-dir>/
//!   topics.toml                      standalone topic registry (coordinator::registry::Standalone)
//!   meta.toml                        clustered: the cluster this directory belongs to (control/membership.rs)
//!   cluster-topics.toml              clustered: the topics as last applied from the registry (same file)
//!   <topic>-<partition>/
//!     00000000000000000000.log       segment files, named by 20-digit base offset
//!     00000000000001073741903.log
//!     recovery-point                 "<flushed offset, 20 digits> <crc32>", overwritten in place; recovery scans from here
//!     topic-id                       the id of the topic this directory belongs to (topic_id.rs)
//!     leader-epochs                  replicated: which leader epoch wrote which bytes (replica/epochs.rs)
//!     high-watermark                 replicated: the highest high watermark learned, as recovery-point; a follower never truncates below it for a leader no newer than itself
//!     data-lost                      clustered: its only copy vanished; not served until removed (lost.rs)
//!     not-in-sync                    replicated: a new copy (its directory was not there at start) until a leader adds it (new_copy.rs)
//!     producers                      format 2: the idempotent producers' last batches as of an offset, with a CRC (producers.rs)
//!   .trash/<stamp>/                  a delete in progress (removed at start; sweep.rs)
//!   .orphaned/<stamp>/<topic>-<partition>/  moved aside: no registered topic owns it (sweep.rs);
//!   .orphaned/<stamp>/why                  why, for `ringlog brokers describe` (orphans.rs)
//! ```
//!
//! - **Offset = logical byte position.** A message's offset is the position of
//!   its first byte in the partition; the next message's offset is this offset
//!   plus its stored length. Segment `S` holds offsets `[S.base, S.base+size)`.
//! - **In memory only the sorted list of segment base offsets** (segments.rs);
//!   a fetch binary-searches it, then reads the file sequentially.
//! - **Flush/visibility:** appends are buffered and written by io_uring; a
//!   flush (after N messages or T ms) fdatasyncs them and moves the flushed
//!   offset. Consumers only ever see bytes below the flushed offset.
//! - **Retention** removes whole closed segments, never the active one.
//! - **I/O behind a seam** (`io.rs`): the log and its recovery run on any
//!   [`io::Storage`] — io_uring files in the broker, an in-memory disk that
//!   can crash (`memory.rs`) in the model test (`model_test.rs`).

pub mod batch_index;
pub mod budget;
pub mod driver;
pub mod epochs;
pub mod error;
pub mod io;
pub mod lost;
pub mod memory;
#[cfg(test)]
mod model_test;
pub mod new_copy;
pub mod orphans;
pub mod partition_log;
pub mod producers;
pub mod reclaim;
pub mod recovery;
pub mod segment;
pub mod segments;
pub mod sweep;
pub mod topic_id;

pub use error::StorageError;
pub use partition_log::{FetchSlice, LogSettings, PartitionLog, SharedLog};

/// The directory name of a partition: `<topic>-<partition>`.
pub fn partition_dir_name(topic: &str, partition: u32) -> String {
    format!("{topic}-{partition}")
}
