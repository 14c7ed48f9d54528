//! The paper's partitioned log on disk.
//!
//! ```text
//! <data-dir>/
//!   topics.toml                      standalone topic registry (coordinator::registry::Standalone)
//!   <topic>-<partition>/
//!     00000000000000000000.log       segment files, named by 20-digit base offset
//!     00000000000001073741903.log
//!     recovery-point                 "<flushed offset, 20 digits> <crc32>", overwritten in place; recovery scans from here
//!   <topic>-<partition>~deleted-N/   a delete in progress (removed at start)
//!   <topic>-<partition>~orphaned-N/  moved aside at start: no registered topic owns it (sweep.rs)
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

pub mod budget;
pub mod driver;
pub mod error;
pub mod io;
pub mod memory;
#[cfg(test)]
mod model_test;
pub mod partition_log;
pub mod recovery;
pub mod segment;
pub mod segments;
pub mod sweep;

pub use error::StorageError;
pub use partition_log::{FetchSlice, LogSettings, PartitionLog, SharedLog};

/// The directory name of a partition: `<topic>-<partition>`.
pub fn partition_dir_name(topic: &str, partition: u32) -> String {
    format!("{topic}-{partition}")
}
