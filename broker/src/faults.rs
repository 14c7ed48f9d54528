//! Faults a test can inject into a running broker binary.
//!
//! Some behaviours only show when the disk is slow — a produce that waits
//! for an fdatasync while its topic is deleted, a shard that must stay
//! responsive while a read waits for the disk. Tests start the real broker
//! binary, so they ask for the fault through the environment:
//!
//! ```text
//! RINGLOG_TEST_FAULTS="sync_delay_ms=500"
//! ```
//!
//! | fault           | effect                                                  |
//! |-----------------|---------------------------------------------------------|
//! | `sync_delay_ms` | every flush waits this long before its fdatasync        |
//! | `write_delay_ms`| every chunk write waits this long before it starts     |
//! | `cold_read_delay_ms` | every read of uncached fetch bytes takes this much longer (a slow disk) |
//! | `syncfs_errno`  | every `syncfs` of a flush batch fails with this errno (a write-back error somewhere on the file system) |
//! | `open_topic_errno` | every topic a shard opens fails with this errno, as if the disk refused its directories (the broker applies no new topic; an answer that waits for it names it) |
//! | `topic_apply_delay_ms` | every new or changed topic record the broker learns from etcd (its watch, or a read on a request for a topic it does not know) is applied this much later (a control thread busy opening thousands of partitions) |
//! | `delete_delay_ms` | a DeleteTopic waits this long between the registry forgetting the topic and the shards removing its directories (a window for a kill -9 mid-delete) |
//!
//! Unset (always, in production) every fault is off and costs one load of a
//! `OnceLock`. An unknown or malformed entry stops the broker at start: a
//! test that asked for a fault must get it.

use std::sync::OnceLock;
use std::time::Duration;

/// The environment variable read at start.
pub const FAULTS_ENV: &str = "RINGLOG_TEST_FAULTS";

/// The faults in force.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Faults {
    /// Delay before every flush's fdatasync.
    pub sync_delay: Option<Duration>,
    /// Delay before every write of a pending chunk (a disk slower than the
    /// producers).
    pub write_delay: Option<Duration>,
    /// Delay added to every read of fetch bytes that are not in the page
    /// cache (a slow disk; the shard must stay responsive meanwhile).
    pub cold_read_delay: Option<Duration>,
    /// Every `syncfs` of the disk driver fails with this errno.
    pub syncfs_errno: Option<i32>,
    /// Delay between a delete's registry change and its directories' removal.
    pub delete_delay: Option<Duration>,
    /// Delay before a new or changed topic record learned from etcd is
    /// applied.
    pub topic_apply_delay: Option<Duration>,
    /// Every topic a shard opens fails with this errno.
    pub open_topic_errno: Option<i32>,
    /// Delay before a follower link's first fetch (a follower slow to
    /// start fetching after it registered).
    pub follower_start_delay: Option<Duration>,
}

static FAULTS: OnceLock<Faults> = OnceLock::new();

/// An entry of the faults variable that is not a fault this build knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultsError {
    /// No `=`.
    #[error("{FAULTS_ENV}: `{0}` is not name=value")]
    NotNameValue(String),
    /// A value that is not a whole number.
    #[error("{FAULTS_ENV}: the value is not a number in `{0}`")]
    NotNumber(String),
    /// An errno out of range.
    #[error("{FAULTS_ENV}: the value is not an errno in `{0}`")]
    NotErrno(String),
    /// A name this build does not know.
    #[error("{FAULTS_ENV}: unknown fault `{0}`")]
    Unknown(String),
}

impl Faults {
    /// Parses `name=value` pairs separated by commas.
    pub fn parse(text: &str) -> Result<Faults, FaultsError> {
        let mut faults = Faults::default();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, value) = entry
                .split_once('=')
                .ok_or_else(|| FaultsError::NotNameValue(entry.to_string()))?;
            let number: u64 = value
                .parse()
                .map_err(|_| FaultsError::NotNumber(entry.to_string()))?;
            match name {
                "sync_delay_ms" => faults.sync_delay = Some(Duration::from_millis(number)),
                "write_delay_ms" => faults.write_delay = Some(Duration::from_millis(number)),
                "delete_delay_ms" => faults.delete_delay = Some(Duration::from_millis(number)),
                "topic_apply_delay_ms" => {
                    faults.topic_apply_delay = Some(Duration::from_millis(number))
                }
                "follower_start_delay_ms" => {
                    faults.follower_start_delay = Some(Duration::from_millis(number))
                }
                "cold_read_delay_ms" => {
                    faults.cold_read_delay = Some(Duration::from_millis(number))
                }
                "syncfs_errno" => {
                    faults.syncfs_errno = Some(
                        i32::try_from(number)
                            .map_err(|_| FaultsError::NotErrno(entry.to_string()))?,
                    )
                }
                "open_topic_errno" => {
                    faults.open_topic_errno = Some(
                        i32::try_from(number)
                            .map_err(|_| FaultsError::NotErrno(entry.to_string()))?,
                    )
                }
                other => return Err(FaultsError::Unknown(other.to_string())),
            }
        }
        Ok(faults)
    }

    /// Reads the environment once (at start); later calls return the same.
    pub fn init_from_env() -> Result<Faults, FaultsError> {
        let faults = match std::env::var(FAULTS_ENV) {
            Ok(text) => Faults::parse(&text)?,
            Err(_) => Faults::default(),
        };
        Ok(*FAULTS.get_or_init(|| faults))
    }

    /// The faults in force (none before [`Faults::init_from_env`]).
    pub fn get() -> Faults {
        FAULTS.get().copied().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_known_faults_and_refuses_others() {
        assert_eq!(Faults::parse("").unwrap(), Faults::default());
        assert_eq!(
            Faults::parse("sync_delay_ms=250").unwrap().sync_delay,
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            Faults::parse("sync_delay_ms"),
            Err(FaultsError::NotNameValue("sync_delay_ms".into()))
        );
        assert_eq!(
            Faults::parse("sync_delay_ms=soon"),
            Err(FaultsError::NotNumber("sync_delay_ms=soon".into()))
        );
        assert_eq!(
            Faults::parse("syncfs_errno=5").unwrap().syncfs_errno,
            Some(5)
        );
        assert_eq!(
            Faults::parse("syncfs_errno=99999999999"),
            Err(FaultsError::NotErrno("syncfs_errno=99999999999".into()))
        );
        let unknown = Faults::parse("disk_on_fire=1").unwrap_err();
        assert_eq!(unknown, FaultsError::Unknown("disk_on_fire".into()));
        assert!(unknown.to_string().contains("unknown fault"), "{unknown}");
    }
}
