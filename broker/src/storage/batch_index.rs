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

/// Bytes between indexed batch starts (at least).
pub const INTERVAL: u64 = 4096;

/// A segment's sparse batch starts, positions relative to the segment.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BatchIndex {
    /// Batch starts, rising, at least [`INTERVAL`] apart; 0 implied.
    starts: Vec<u32>,
    /// Every batch start below this is one `starts` leads to by hops; a
    /// batch starts here.
    covered: u64,
}

impl BatchIndex {
    /// Notes the batch of `size` bytes at `position`, if it follows what is
    /// covered (a batch placed elsewhere — after a gap the index never saw
    /// — is left for a hop to find).
    pub fn note(&mut self, position: u64, size: u64) {
        if position != self.covered {
            return;
        }
        let last = self.starts.last().map_or(0, |&s| u64::from(s));
        if position >= last + INTERVAL {
            if let Ok(at) = u32::try_from(position) {
                self.starts.push(at);
            }
        }
        self.covered = position + size;
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

    /// How far the layout is known.
    pub fn covered(&self) -> u64 {
        self.covered
    }

    /// Forgets everything at or past `position` (a cut).
    pub fn truncate(&mut self, position: u64) {
        self.starts.retain(|&s| u64::from(s) < position);
        if self.covered > position {
            // The batch that held `position` may reach past it: start over
            // from the last indexed start.
            self.covered = self.starts.last().map_or(0, |&s| u64::from(s));
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
            index.note(at, 1000);
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
        index.note(200_000, 10);
        assert_eq!(index.covered(), 100_000);
        index.truncate(12_000);
        assert_eq!(index.covered(), 10_000);
        assert_eq!(index.from(11_000), 10_000);
    }
}
