//! Where a format-2 segment's batches start, sparsely: a fetch at an
//! offset inside a batch (a commit after part of a batch, a seek) is served
//! from the start of the batch that holds it (Kafka's rule: the first batch
//! whose last offset is at or past the fetch offset), so the index needs
//! only a batch start every [`INTERVAL`] bytes, and a hop over the headers
//! after it (design record 0015; Kafka's `log.index.interval.bytes` is the
//! same 4 KiB).
//!
//! The index knows the layout of its segment up to `covered`: appends
//! extend it as they place batches; a segment opened at start knows
//! nothing until a fetch hops through it (each hop adds what it passed).
//!
//! It is a time index too: beside each start, the largest timestamp of
//! the batches before it (Kafka's time index keeps the same running
//! maximum), so a lookup by time hops from the last start before which
//! every timestamp is older than the time asked for.

/// Bytes between indexed batch starts (at least).
pub const INTERVAL: u64 = 4096;

/// A segment's sparse batch starts, positions relative to the segment.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BatchIndex {
    /// Batch starts, rising, at least [`INTERVAL`] apart; 0 implied.
    starts: Vec<u32>,
    /// Beside each start: the largest maxTimestamp of the batches before
    /// it (so never falling).
    times: Vec<i64>,
    /// The largest maxTimestamp of the batches covered, if any.
    max_time: Option<i64>,
    /// Every batch start below this is one `starts` leads to by hops; a
    /// batch starts here.
    covered: u64,
}

impl BatchIndex {
    /// Notes the batch of `size` bytes at `position` whose maxTimestamp
    /// is `max_time`, if it follows what is covered (a batch placed
    /// elsewhere — after a gap the index never saw — is left for a hop to
    /// find).
    pub fn note(&mut self, position: u64, size: u64, max_time: i64) {
        if position != self.covered {
            return;
        }
        let last = self.starts.last().map_or(0, |&s| u64::from(s));
        if position >= last + INTERVAL {
            if let Ok(at) = u32::try_from(position) {
                self.starts.push(at);
                self.times.push(self.max_time.unwrap_or(i64::MIN));
            }
        }
        self.max_time = Some(self.max_time.map_or(max_time, |t| t.max(max_time)));
        self.covered = position + size;
    }

    /// Where to start hopping to find the first batch whose maxTimestamp
    /// is `time` or later: the last start before which every batch is
    /// older, or the end of what is covered if all of it is.
    pub fn from_time(&self, time: i64) -> u64 {
        if self.max_time.is_none_or(|t| t < time) {
            return self.covered;
        }
        let i = self.times.partition_point(|&t| t < time);
        if i == 0 {
            0
        } else {
            u64::from(self.starts[i - 1])
        }
    }

    /// Where to start hopping to find the batch that holds `position`: the
    /// nearest known batch start at or below it, and whether the batches
    /// from there to `position` are all known (else each one hopped over
    /// should be [`Self::note`]d).
    pub fn from(&self, position: u64) -> u64 {
        if position >= self.covered {
            return self.covered;
        }
        let i = self.starts.partition_point(|&s| u64::from(s) <= position);
        if i == 0 {
            0
        } else {
            u64::from(self.starts[i - 1])
        }
    }

    /// True when a batch is known to start at `position`: the segment's
    /// start, an indexed start, or the end of what is covered (a reader
    /// there needs no hop).
    pub fn knows_start(&self, position: u64) -> bool {
        position == 0
            || position == self.covered
            || u32::try_from(position).is_ok_and(|p| self.starts.binary_search(&p).is_ok())
    }

    /// How far the layout is known.
    pub fn covered(&self) -> u64 {
        self.covered
    }

    /// Forgets everything at or past `position` (a cut).
    pub fn truncate(&mut self, position: u64) {
        let kept = self.starts.partition_point(|&s| u64::from(s) < position);
        self.starts.truncate(kept);
        self.times.truncate(kept);
        if self.covered > position {
            // The batch that held `position` may reach past it: start over
            // from the last indexed start, knowing only the batches before
            // it.
            self.covered = self.starts.last().map_or(0, |&s| u64::from(s));
            self.max_time = self.times.last().copied().filter(|&t| t > i64::MIN);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_are_kept_an_interval_apart_and_hops_begin_at_the_nearest() {
        let mut index = BatchIndex::default();
        let mut at = 0;
        for _ in 0..100 {
            index.note(at, 1000, 1_000 + at as i64 / 1000);
            at += 1000;
        }
        assert_eq!(index.covered(), 100_000);
        assert_eq!(index.starts.first(), Some(&5000));
        assert!(index
            .starts
            .windows(2)
            .all(|w| u64::from(w[1] - w[0]) >= INTERVAL));
        assert_eq!(index.from(0), 0);
        assert_eq!(index.from(4_999), 0);
        assert_eq!(index.from(5_000), 5_000);
        assert_eq!(index.from(12_345), 10_000);
        assert_eq!(
            index.from(150_000),
            100_000,
            "past it: from what is covered"
        );
        // A batch that does not follow is not taken on trust.
        index.note(200_000, 10, 0);
        assert_eq!(index.covered(), 100_000);
        index.truncate(12_000);
        assert_eq!(index.covered(), 10_000);
        assert_eq!(index.from(11_000), 10_000);
        assert!(index.knows_start(0) && index.knows_start(5_000) && index.knows_start(10_000));
        assert!(!index.knows_start(6_000), "a batch start, but not indexed");
        assert!(!index.knows_start(5_001));
    }

    #[test]
    fn a_time_lookup_starts_after_every_start_whose_batches_before_are_all_older() {
        let mut index = BatchIndex::default();
        assert_eq!(index.from_time(0), 0, "nothing known: from the start");
        // 100 batches of 1000 bytes, times 10, 20, ..., with one early
        // outlier (a producer's clock) at batch 30.
        for n in 0..100u64 {
            let time = if n == 30 { 5 } else { 10 * (n as i64 + 1) };
            index.note(n * 1000, 1000, time);
        }
        // The batch at 40,000 has time 410: every batch before 40,000 is
        // older than 405, and the start at 40,000 is indexed.
        assert_eq!(index.from_time(405), 40_000);
        assert_eq!(index.from_time(10), 0);
        assert_eq!(index.from_time(i64::MIN), 0);
        assert_eq!(
            index.from_time(1000),
            95_000,
            "the newest: from the last start before it"
        );
        assert_eq!(
            index.from_time(1001),
            100_000,
            "newer than all: from the end"
        );
        index.truncate(42_000);
        assert_eq!(index.covered(), 40_000);
        assert_eq!(
            index.from_time(405),
            40_000,
            "known up to 40,000, all older"
        );
        assert_eq!(index.from_time(395), 35_000);
        let mut empty = BatchIndex::default();
        empty.note(0, 100, 7);
        empty.truncate(50);
        assert_eq!((empty.covered(), empty.from_time(1)), (0, 0));
    }
}
