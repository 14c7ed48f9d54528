//! Rate-limited log lines: one line per interval for a repeated event, with
//! the count of the ones left out, so a failing client cannot turn the
//! broker's log into a flood (issue 8, item 12: 526,336 WARN lines in 5 s).

use std::cell::Cell;
use std::time::{Duration, Instant};

/// One kind of repeated event. Not `Send`; owned by one shard.
#[derive(Debug)]
pub struct LogLimit {
    every: Duration,
    last: Cell<Option<Instant>>,
    suppressed: Cell<u64>,
}

impl LogLimit {
    /// At most one line per `every`.
    pub const fn new(every: Duration) -> LogLimit {
        LogLimit {
            every,
            last: Cell::new(None),
            suppressed: Cell::new(0),
        }
    }

    /// `Some(n)` when a line may be written now (`n` lines were left out
    /// since the last one), `None` when this one is left out.
    pub fn allow(&self) -> Option<u64> {
        let now = Instant::now();
        match self.last.get() {
            Some(last) if now.duration_since(last) < self.every => {
                self.suppressed.set(self.suppressed.get() + 1);
                None
            }
            _ => {
                self.last.set(Some(now));
                Some(self.suppressed.replace(0))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_and_the_rest_are_counted() {
        let limit = LogLimit::new(Duration::from_secs(3600));
        assert_eq!(limit.allow(), Some(0));
        for _ in 0..1000 {
            assert_eq!(limit.allow(), None);
        }
        limit
            .last
            .set(Instant::now().checked_sub(Duration::from_secs(7200)));
        assert_eq!(limit.allow(), Some(1000));
        assert_eq!(limit.allow(), None);
    }
}
