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
    /// Delay before a follower link's first fetch (a follower slow to
    /// start fetching after it registered).
    pub follower_start_delay: Option<Duration>,
}

static FAULTS: OnceLock<Faults> = OnceLock::new();

impl Faults {
    /// Parses `name=value` pairs separated by commas.
    pub fn parse(text: &str) -> Result<Faults, String> {
        let mut faults = Faults::default();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, value) = entry
                .split_once('=')
                .ok_or_else(|| format!("{FAULTS_ENV}: `{entry}` is not name=value"))?;
            let number: u64 = value
                .parse()
                .map_err(|_| format!("{FAULTS_ENV}: `{value}` is not a number in `{entry}`"))?;
            match name {
                "sync_delay_ms" => faults.sync_delay = Some(Duration::from_millis(number)),
                "write_delay_ms" => faults.write_delay = Some(Duration::from_millis(number)),
                "delete_delay_ms" => faults.delete_delay = Some(Duration::from_millis(number)),
                "follower_start_delay_ms" => {
                    faults.follower_start_delay = Some(Duration::from_millis(number))
                }
                "cold_read_delay_ms" => {
                    faults.cold_read_delay = Some(Duration::from_millis(number))
                }
                "syncfs_errno" => {
                    faults.syncfs_errno = Some(i32::try_from(number).map_err(|_| {
                        format!("{FAULTS_ENV}: `{value}` is not an errno in `{entry}`")
                    })?)
                }
                other => return Err(format!("{FAULTS_ENV}: unknown fault `{other}`")),
            }
        }
        Ok(faults)
    }

    /// Reads the environment once (at start); later calls return the same.
    pub fn init_from_env() -> Result<Faults, String> {
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
        assert!(Faults::parse("sync_delay_ms")
            .unwrap_err()
            .contains("not name=value"));
        assert!(Faults::parse("sync_delay_ms=soon")
            .unwrap_err()
            .contains("not a number"));
        assert_eq!(
            Faults::parse("syncfs_errno=5").unwrap().syncfs_errno,
            Some(5)
        );
        assert!(Faults::parse("syncfs_errno=99999999999")
            .unwrap_err()
            .contains("not an errno"));
        assert!(Faults::parse("disk_on_fire=1")
            .unwrap_err()
            .contains("unknown fault"));
    }
}
