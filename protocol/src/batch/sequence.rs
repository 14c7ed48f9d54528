//! An idempotent producer's numbering (Kafka's): each batch carries its
//! producer id, the producer's epoch and `baseSequence`, the number of
//! records that producer sent to the partition before it, counted in an
//! `i32` that wraps from `i32::MAX` to 0. The broker keeps the last
//! batches' numbers per producer and answers a batch it has already
//! stored with that batch's offsets instead of storing it twice.
//!
//! The batch's last sequence is `baseSequence + recordCount - 1`, never
//! `lastOffsetDelta`: ringlog stamps that field with the batch's size
//! (design record 0015), where Kafka's producer state reads it.

use super::BatchHeader;

/// The sequence after `sequence`.
pub fn next(sequence: i32) -> i32 {
    if sequence == i32::MAX {
        0
    } else {
        sequence + 1
    }
}

/// `sequence` moved on by `count` (≥ 0), wrapping past `i32::MAX` to 0.
pub fn advance(sequence: i32, count: i32) -> i32 {
    debug_assert!(sequence >= 0 && count >= 0);
    let moved = i64::from(sequence) + i64::from(count);
    (moved % (i64::from(i32::MAX) + 1)) as i32
}

/// The numbers of one idempotent batch, as its header carries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Numbered {
    /// producerId.
    pub producer_id: i64,
    /// producerEpoch.
    pub epoch: i16,
    /// baseSequence.
    pub first: i32,
    /// baseSequence + recordCount - 1 (wrapped).
    pub last: i32,
}

impl Numbered {
    /// The numbers of `header`'s batch, if its producer is idempotent
    /// (a producer id, an epoch and a sequence, all ≥ 0, and records).
    pub fn of(header: &BatchHeader) -> Option<Numbered> {
        (header.producer_id >= 0
            && header.producer_epoch >= 0
            && header.base_sequence >= 0
            && header.record_count >= 1)
            .then(|| Numbered {
                producer_id: header.producer_id,
                epoch: header.producer_epoch,
                first: header.base_sequence,
                last: advance(header.base_sequence, header.record_count - 1),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_wrap_from_the_largest_i32_to_zero() {
        assert_eq!(next(0), 1);
        assert_eq!(next(i32::MAX), 0);
        assert_eq!(advance(5, 10), 15);
        assert_eq!(advance(i32::MAX, 1), 0);
        assert_eq!(advance(i32::MAX - 2, 5), 2);
        assert_eq!(advance(i32::MAX, 0), i32::MAX);
    }
}
