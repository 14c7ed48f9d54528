//! An idempotent producer's numbering (format-2 topics): its producer id,
//! and per partition an epoch and the next sequence. Each batch is
//! numbered once, when it is finished, and resent with the same numbers,
//! so a broker that stored it already answers with its offsets instead of
//! storing it twice (PROTOCOL.md §4a).
//!
//! A partition whose broker has a gap before the oldest batch still to be
//! stored (OUT_OF_ORDER_SEQUENCE: batches before it were given up on, or
//! lost with an unclean failover) starts afresh: once none of its batches
//! is on the wire, its epoch moves on, its sequence restarts at 0, and the
//! batches waiting to be resent are numbered again in order
//! ([`Numbering::restart`]).

use crate::batch::sequence;
use crate::batch::write::{self, Producer};
use crate::codec::producer_id::ProducerId;

/// Batches of one partition an idempotent producer has on the wire at
/// most: the batches a broker keeps per producer (Kafka's 5), so a resent
/// batch is always one it still knows.
pub const IN_FLIGHT_MAX: usize = 5;

/// The numbers of an idempotent producer (see the module doc).
#[derive(Debug, Clone)]
pub struct Numbering {
    producer: ProducerId,
    epochs: Vec<i16>,
    sequences: Vec<i32>,
    /// Per partition: the first message of the batch that met a gap, while
    /// the partition waits to start afresh.
    restarting: Vec<Option<u64>>,
}

impl Numbering {
    /// Numbers under `producer` for `partitions` partitions.
    pub fn new(producer: ProducerId, partitions: usize) -> Numbering {
        let mut numbering = Numbering {
            producer,
            epochs: Vec::new(),
            sequences: Vec::new(),
            restarting: Vec::new(),
        };
        numbering.grow(partitions);
        numbering
    }

    /// The producer id.
    pub fn producer(&self) -> ProducerId {
        self.producer
    }

    /// Room for `partitions` partitions (the topic grew).
    pub fn grow(&mut self, partitions: usize) {
        while self.epochs.len() < partitions {
            self.epochs.push(self.producer.epoch);
            self.sequences.push(0);
            self.restarting.push(None);
        }
    }

    /// The numbers of `partition`'s next batch of `count` records.
    pub fn next(&mut self, partition: usize, count: u32) -> Producer {
        self.grow(partition + 1);
        let base_sequence = self.sequences[partition];
        self.sequences[partition] =
            sequence::advance(base_sequence, i32::try_from(count).unwrap_or(i32::MAX));
        Producer {
            id: self.producer.id,
            epoch: self.epochs[partition],
            base_sequence,
        }
    }

    /// Marks `partition` to start afresh once none of its batches is on
    /// the wire, if the batch whose first message is `first_sequence`
    /// (which met a gap) is then the oldest still to be stored.
    pub fn restart_later(&mut self, partition: usize, first_sequence: u64) {
        self.grow(partition + 1);
        let mark = self.restarting[partition].map_or(first_sequence, |m| m.min(first_sequence));
        self.restarting[partition] = Some(mark);
    }

    /// The batch that met a gap, while `partition` waits to start afresh.
    pub fn restarting(&self, partition: usize) -> Option<u64> {
        self.restarting.get(partition).copied().flatten()
    }

    /// `partition` need not start afresh after all (an earlier batch is
    /// still to be stored: it goes first).
    pub fn cancel_restart(&mut self, partition: usize) {
        if let Some(mark) = self.restarting.get_mut(partition) {
            *mark = None;
        }
    }

    /// Starts `partition` afresh: the next epoch, sequence 0, and
    /// `waiting` (its batches not yet stored, in their order) numbered
    /// again. False, changing nothing, when the epochs are used up.
    pub fn restart<'a>(
        &mut self,
        partition: usize,
        waiting: impl Iterator<Item = (&'a mut Vec<u8>, u32)>,
    ) -> bool {
        self.grow(partition + 1);
        let Some(epoch) = self.epochs[partition].checked_add(1) else {
            return false;
        };
        self.epochs[partition] = epoch;
        self.sequences[partition] = 0;
        self.restarting[partition] = None;
        for (bytes, count) in waiting {
            let numbers = self.next(partition, count);
            write::renumber(bytes, numbers);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{sequence::Numbered, write::BatchWriter, BatchHeader};

    fn numbers(bytes: &[u8]) -> Numbered {
        Numbered::of(&BatchHeader::read(bytes).unwrap()).unwrap()
    }

    #[test]
    fn batches_count_their_records_and_a_restart_renumbers_the_waiting_in_order() {
        let mut numbering = Numbering::new(ProducerId { id: 9, epoch: 0 }, 2);
        let mut records = BatchWriter::new();
        records.push(1, None, Some(b"a"), &[]);
        records.push(1, None, Some(b"b"), &[]);
        let first = numbering.next(0, 2);
        let second = numbering.next(0, 2);
        assert_eq!((first.base_sequence, second.base_sequence), (0, 2));
        assert_eq!(numbering.next(1, 7).base_sequence, 0, "per partition");
        let mut a = records.finish(first);
        let mut b = records.finish(second);
        numbering.restart_later(0, 7);
        numbering.restart_later(0, 3);
        assert_eq!(numbering.restarting(0), Some(3), "the oldest gap");
        assert!(numbering.restart(0, [(&mut a, 2), (&mut b, 2)].into_iter()));
        assert_eq!(numbering.restarting(0), None);
        assert_eq!((numbers(&a).epoch, numbers(&a).first), (1, 0));
        assert_eq!((numbers(&b).epoch, numbers(&b).first), (1, 2));
        assert_eq!(numbering.next(0, 1).base_sequence, 4);
        assert_eq!(numbering.next(1, 1).epoch, 0);
    }
}
