//! The paper's in-memory view of a partition: the sorted list of its
//! segments' base offsets (with each segment's size). Nothing maps offsets to
//! positions; a fetch binary-searches the base offsets and reads sequentially.

use super::segment::Segment;

/// The segments of one partition, sorted by base offset and contiguous:
/// each segment starts where the previous one ends.
#[derive(Debug)]
pub struct Segments<F> {
    list: Vec<Segment<F>>,
}

impl<F> Default for Segments<F> {
    fn default() -> Self {
        Segments { list: Vec::new() }
    }
}

impl<F> Segments<F> {
    /// An empty list.
    pub fn new() -> Self {
        Segments::default()
    }

    /// Appends a segment that starts where the last one ends.
    pub fn push(&mut self, segment: Segment<F>) {
        if let Some(last) = self.list.last() {
            assert_eq!(
                last.end_offset(),
                segment.base_offset,
                "segments must be contiguous"
            );
        }
        self.list.push(segment);
    }

    /// Index of the segment holding `offset`: the last one whose base offset
    /// is at or below it. An offset equal to a segment's end belongs to the
    /// next segment when there is one.
    pub fn find(&self, offset: u64) -> Option<usize> {
        let after = self.list.partition_point(|s| s.base_offset <= offset);
        after.checked_sub(1)
    }

    /// The segments, oldest first.
    pub fn as_slice(&self) -> &[Segment<F>] {
        &self.list
    }

    /// Mutable access to one segment.
    pub fn get_mut(&mut self, index: usize) -> Option<&mut Segment<F>> {
        self.list.get_mut(index)
    }

    /// The active (last) segment.
    pub fn active(&self) -> Option<&Segment<F>> {
        self.list.last()
    }

    /// The active segment, mutably.
    pub fn active_mut(&mut self) -> Option<&mut Segment<F>> {
        self.list.last_mut()
    }

    /// Removes and returns the oldest segment.
    pub fn pop_oldest(&mut self) -> Option<Segment<F>> {
        if self.list.is_empty() {
            None
        } else {
            Some(self.list.remove(0))
        }
    }

    /// Removes the newest segment (undoing a roll whose bytes were never
    /// written).
    pub fn pop_newest(&mut self) -> Option<Segment<F>> {
        self.list.pop()
    }

    /// Number of segments.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// True when there are no segments.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Total bytes in every segment.
    pub fn total_bytes(&self) -> u64 {
        self.list.iter().map(|s| s.size_bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segments(bases_and_sizes: &[(u64, u64)]) -> Segments<()> {
        let mut s = Segments::new();
        for &(base, size) in bases_and_sizes {
            let mut seg = Segment::new(std::path::Path::new("/nonexistent"), base, 0);
            seg.size_bytes = size;
            s.push(seg);
        }
        s
    }

    #[test]
    fn base_offset_search_finds_the_owning_segment() {
        let s = segments(&[(100, 50), (150, 50), (200, 10)]);
        assert_eq!(s.find(99), None);
        assert_eq!(s.find(100), Some(0));
        assert_eq!(s.find(149), Some(0));
        assert_eq!(s.find(150), Some(1));
        assert_eq!(s.find(209), Some(2));
        assert_eq!(s.find(10_000), Some(2));
        assert_eq!(s.total_bytes(), 110);
    }

    #[test]
    #[should_panic(expected = "contiguous")]
    fn a_gap_between_segments_is_a_bug() {
        segments(&[(0, 10), (11, 10)]);
    }
}
