//! A format-2 partition's idempotent producers: for each producer id its
//! epoch and the numbers and offsets of its last [`BATCHES_KEPT`] batches
//! (Kafka's `ProducerStateManager`, issue 43 item 6).
//!
//! The state is a function of the log: every batch appended — a produce's,
//! a follower's copy of its leader's, a mirror's — is [`Producers::apply`]ed
//! in log order, a truncation forgets the batches it removes
//! ([`Producers::truncate`]), and recovery loads the last snapshot (the
//! `producers` file, written with the recovery point every
//! [`SNAPSHOT_EVERY_BYTES`]) and applies the batch headers after its offset.
//! So a leader, its followers and a restarted copy answer a retried batch
//! alike.
//!
//! The rules, checked on the leader before a produce is appended
//! ([`Producers::check`]):
//! - a producer this partition does not know may start at any sequence
//!   (Kafka's rule: its batches may have been removed by retention);
//! - an older epoch is fenced (INVALID_PRODUCER_EPOCH), a newer one must
//!   start at sequence 0;
//! - in its epoch, a batch whose first and last sequence match one of the
//!   kept batches is a duplicate: answered with that batch's offsets, not
//!   stored again; otherwise its first sequence must follow the last one
//!   (OUT_OF_ORDER_SEQUENCE names the expected one).
//!
//! Memory is bounded by [`Producers::new`]'s `max` per partition: past it
//! the producers that appended least recently are forgotten (they may
//! start again at any sequence). A producer keeps at most
//! [`BATCHES_KEPT`] batches in flight per partition, so a retried batch is
//! always among the kept ones.

use protocol::batch::sequence::{self, Numbered};
use std::collections::HashMap;

/// Batches kept per producer: the in-flight requests per partition an
/// idempotent producer may have (Kafka's 5).
pub const BATCHES_KEPT: usize = 5;

/// Bytes appended between two snapshots: the most a recovery hops over
/// (batch headers only) to rebuild the state. The model tests, whose logs
/// hold a few KiB, snapshot every 256 bytes, so their crashes and cuts
/// meet snapshots at every turn.
pub const SNAPSHOT_EVERY_BYTES: u64 = if cfg!(test) { 256 } else { 64 * 1024 * 1024 };

/// The snapshot's file in a partition's directory.
pub const SNAPSHOT_FILE: &str = "producers";

/// One kept batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Kept {
    first: i32,
    last: i32,
    base: u64,
    end: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Producer {
    epoch: i16,
    /// Oldest first, at most [`BATCHES_KEPT`].
    batches: Vec<Kept>,
}

impl Producer {
    /// Where its newest batch ends (its recency).
    fn last_end(&self) -> u64 {
        self.batches.last().map_or(0, |k| k.end)
    }
}

/// A kept batch as the model tests see it: first and last sequence,
/// offset, end.
#[cfg(test)]
pub type KeptBatch = (i32, i32, u64, u64);

/// What a numbered batch is to the partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sequenced {
    /// Next in its producer's order (or from a producer not known here):
    /// append it.
    New,
    /// Stored already at `[base, end)`: answer with those, store nothing.
    Duplicate {
        /// Its offset.
        base: u64,
        /// The offset after it.
        end: u64,
    },
}

/// Why a numbered batch is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SequenceError {
    /// An epoch older than the producer's newest here.
    #[error(
        "producer {producer_id} epoch {epoch} is fenced: this partition has its epoch {current}"
    )]
    Fenced {
        /// The producer id.
        producer_id: i64,
        /// The batch's epoch.
        epoch: i16,
        /// The newest epoch the partition has of it.
        current: i16,
    },
    /// A gap in the producer's sequence.
    #[error("producer {producer_id} epoch {epoch}: sequence {first} where {expected} is next (an earlier batch is missing; send it first)")]
    OutOfOrder {
        /// The producer id.
        producer_id: i64,
        /// Its epoch.
        epoch: i16,
        /// The batch's first sequence.
        first: i32,
        /// The sequence the partition expects.
        expected: i32,
    },
}

/// A partition's idempotent producers (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Producers {
    producers: HashMap<i64, Producer>,
    max: usize,
}

impl Producers {
    /// No producers; at most `max` (≥ 1) kept.
    pub fn new(max: usize) -> Producers {
        Producers {
            producers: HashMap::new(),
            max: max.max(1),
        }
    }

    /// Producers known.
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    /// True when none is known.
    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// Every producer's epoch and kept batches (first and last sequence,
    /// offset, end), by id: what the model tests compare with the log.
    #[cfg(test)]
    pub fn kept(&self) -> std::collections::BTreeMap<i64, (i16, Vec<KeptBatch>)> {
        self.producers
            .iter()
            .map(|(id, p)| {
                let batches = p.batches.iter().map(|k| (k.first, k.last, k.base, k.end));
                (*id, (p.epoch, batches.collect()))
            })
            .collect()
    }

    /// What `batch` is to this partition, by the rules in the module doc.
    pub fn check(&self, batch: Numbered) -> Result<Sequenced, SequenceError> {
        let Some(producer) = self.producers.get(&batch.producer_id) else {
            return Ok(Sequenced::New);
        };
        if batch.epoch < producer.epoch {
            return Err(SequenceError::Fenced {
                producer_id: batch.producer_id,
                epoch: batch.epoch,
                current: producer.epoch,
            });
        }
        if batch.epoch > producer.epoch {
            return if batch.first == 0 {
                Ok(Sequenced::New)
            } else {
                Err(SequenceError::OutOfOrder {
                    producer_id: batch.producer_id,
                    epoch: batch.epoch,
                    first: batch.first,
                    expected: 0,
                })
            };
        }
        if let Some(kept) = producer
            .batches
            .iter()
            .find(|k| k.first == batch.first && k.last == batch.last)
        {
            return Ok(Sequenced::Duplicate {
                base: kept.base,
                end: kept.end,
            });
        }
        let expected = producer
            .batches
            .last()
            .map_or(batch.first, |k| sequence::next(k.last));
        if batch.first == expected {
            Ok(Sequenced::New)
        } else {
            Err(SequenceError::OutOfOrder {
                producer_id: batch.producer_id,
                epoch: batch.epoch,
                first: batch.first,
                expected,
            })
        }
    }

    /// Records a batch appended at `[base, end)`: its producer's newest
    /// (a newer epoch starts its kept batches afresh). No rule is checked:
    /// a copy takes what its leader stored.
    pub fn apply(&mut self, batch: Numbered, base: u64, end: u64) {
        let kept = Kept {
            first: batch.first,
            last: batch.last,
            base,
            end,
        };
        let producer = self
            .producers
            .entry(batch.producer_id)
            .or_insert_with(|| Producer {
                epoch: batch.epoch,
                batches: Vec::with_capacity(BATCHES_KEPT),
            });
        if batch.epoch != producer.epoch {
            producer.epoch = batch.epoch;
            producer.batches.clear();
        }
        if producer.batches.len() == BATCHES_KEPT {
            producer.batches.remove(0);
        }
        producer.batches.push(kept);
        if self.producers.len() > self.max {
            self.forget_least_recent();
        }
    }

    /// Forgets the eighth of the producers (at least one) that appended
    /// least recently: one sort per `max / 8` new producers.
    fn forget_least_recent(&mut self) {
        let mut ends: Vec<(u64, i64)> = self
            .producers
            .iter()
            .map(|(id, p)| (p.last_end(), *id))
            .collect();
        ends.sort_unstable();
        let excess = self.producers.len() - self.max;
        let forget = excess.max(self.max / 8).max(1);
        for (_, id) in ends.into_iter().take(forget) {
            self.producers.remove(&id);
        }
    }

    /// Forgets every batch at or past `to` (the log was cut there); a
    /// producer left with none is forgotten (it may start again at any
    /// sequence).
    pub fn truncate(&mut self, to: u64) {
        self.producers.retain(|_, producer| {
            producer.batches.retain(|k| k.end <= to);
            !producer.batches.is_empty()
        });
    }

    /// The snapshot file's bytes: the state, and `offset`, the log's
    /// offset it is read back at (see [`Producers::decode`]). Its own
    /// length and a CRC-32 frame it: the file is overwritten in place, so
    /// an older, longer snapshot's tail may follow it, and a crash may
    /// tear it.
    pub fn encode(&self, offset: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(24 + self.producers.len() * 64);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&offset.to_be_bytes());
        out.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        let mut ids: Vec<&i64> = self.producers.keys().collect();
        ids.sort_unstable();
        for id in ids {
            let producer = &self.producers[id];
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&producer.epoch.to_be_bytes());
            out.push(producer.batches.len() as u8);
            for k in &producer.batches {
                out.extend_from_slice(&k.first.to_be_bytes());
                out.extend_from_slice(&k.last.to_be_bytes());
                out.extend_from_slice(&k.base.to_be_bytes());
                out.extend_from_slice(&k.end.to_be_bytes());
            }
        }
        let len = (out.len() + 4) as u32;
        out[4..8].copy_from_slice(&len.to_be_bytes());
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// A snapshot read back (bytes after it ignored): its offset and the
    /// state, with every batch at or past that offset forgotten (recovery
    /// applies the log past it again). `None` when the bytes are not a
    /// whole snapshot (torn by a crash, or damaged): then recovery
    /// rebuilds from the log.
    pub fn decode(bytes: &[u8], max: usize) -> Option<(u64, Producers)> {
        let len = u32::from_be_bytes(bytes.get(4..8)?.try_into().ok()?) as usize;
        let (body, crc) = bytes.get(..len)?.split_last_chunk::<4>()?;
        if crc32fast::hash(body) != u32::from_be_bytes(*crc) {
            return None;
        }
        let mut r = Reader(body);
        if r.take(MAGIC.len())? != MAGIC {
            return None;
        }
        r.take(4)?;
        let offset = u64::from_be_bytes(r.array()?);
        let count = u32::from_be_bytes(r.array()?);
        let mut producers = Producers::new(max);
        for _ in 0..count {
            let id = i64::from_be_bytes(r.array()?);
            let epoch = i16::from_be_bytes(r.array()?);
            let n = r.take(1)?[0] as usize;
            if n > BATCHES_KEPT {
                return None;
            }
            let mut batches = Vec::with_capacity(BATCHES_KEPT);
            for _ in 0..n {
                batches.push(Kept {
                    first: i32::from_be_bytes(r.array()?),
                    last: i32::from_be_bytes(r.array()?),
                    base: u64::from_be_bytes(r.array()?),
                    end: u64::from_be_bytes(r.array()?),
                });
            }
            producers.producers.insert(id, Producer { epoch, batches });
        }
        if !r.0.is_empty() {
            return None;
        }
        producers.truncate(offset);
        Some((offset, producers))
    }
}

const MAGIC: &[u8; 4] = b"RLP1";

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(id: i64, epoch: i16, first: i32, count: i32) -> Numbered {
        Numbered {
            producer_id: id,
            epoch,
            first,
            last: sequence::advance(first, count - 1),
        }
    }

    #[test]
    fn a_retried_batch_gets_its_offsets_and_a_gap_names_the_next_sequence() {
        let mut p = Producers::new(100);
        assert_eq!(p.check(batch(7, 0, 0, 10)), Ok(Sequenced::New));
        p.apply(batch(7, 0, 0, 10), 0, 500);
        p.apply(batch(7, 0, 10, 5), 500, 800);
        assert_eq!(
            p.check(batch(7, 0, 0, 10)),
            Ok(Sequenced::Duplicate { base: 0, end: 500 })
        );
        assert_eq!(p.check(batch(7, 0, 15, 1)), Ok(Sequenced::New));
        assert_eq!(
            p.check(batch(7, 0, 16, 1)),
            Err(SequenceError::OutOfOrder {
                producer_id: 7,
                epoch: 0,
                first: 16,
                expected: 15
            })
        );
        // The same first sequence with another count is not the batch.
        assert!(p.check(batch(7, 0, 10, 4)).is_err());
    }

    #[test]
    fn epochs_fence_older_ones_and_a_new_one_starts_at_zero() {
        let mut p = Producers::new(100);
        p.apply(batch(1, 3, 40, 2), 0, 100);
        assert!(matches!(
            p.check(batch(1, 2, 42, 1)),
            Err(SequenceError::Fenced { current: 3, .. })
        ));
        assert!(matches!(
            p.check(batch(1, 4, 5, 1)),
            Err(SequenceError::OutOfOrder { expected: 0, .. })
        ));
        assert_eq!(p.check(batch(1, 4, 0, 1)), Ok(Sequenced::New));
        p.apply(batch(1, 4, 0, 1), 100, 170);
        assert_eq!(p.check(batch(1, 4, 1, 1)), Ok(Sequenced::New));
        // The old epoch's batches are gone with it.
        assert!(p.check(batch(1, 4, 40, 2)).is_err());
    }

    #[test]
    fn an_unknown_producer_starts_anywhere_and_only_five_batches_are_kept() {
        let mut p = Producers::new(100);
        assert_eq!(p.check(batch(9, 0, 1234, 1)), Ok(Sequenced::New));
        for i in 0..7 {
            p.apply(
                batch(9, 0, i, 1),
                u64::from(i as u32) * 100,
                u64::from(i as u32 + 1) * 100,
            );
        }
        assert_eq!(
            p.check(batch(9, 0, 2, 1)),
            Ok(Sequenced::Duplicate {
                base: 200,
                end: 300
            })
        );
        // Older than the kept five: out of order, never stored twice.
        assert!(p.check(batch(9, 0, 1, 1)).is_err());
        // Sequences wrap.
        let mut q = Producers::new(10);
        q.apply(batch(2, 0, i32::MAX - 1, 2), 0, 90);
        assert_eq!(q.check(batch(2, 0, 0, 3)), Ok(Sequenced::New));
    }

    #[test]
    fn a_truncation_forgets_the_batches_it_cut() {
        let mut p = Producers::new(100);
        p.apply(batch(1, 0, 0, 1), 0, 100);
        p.apply(batch(1, 0, 1, 1), 100, 200);
        p.apply(batch(2, 0, 0, 1), 200, 300);
        p.truncate(150);
        assert_eq!(p.len(), 1, "producer 2's only batch was cut");
        assert_eq!(p.check(batch(1, 0, 1, 1)), Ok(Sequenced::New));
        assert_eq!(p.check(batch(2, 0, 77, 1)), Ok(Sequenced::New));
    }

    #[test]
    fn past_its_bound_the_least_recent_producers_are_forgotten() {
        let mut p = Producers::new(16);
        for id in 0..100i64 {
            let at = id as u64 * 10;
            p.apply(batch(id, 0, 0, 1), at, at + 10);
            assert!(p.len() <= 16);
        }
        assert!(p.producers.contains_key(&99));
        assert!(!p.producers.contains_key(&0));
    }

    #[test]
    fn a_snapshot_reads_back_as_of_its_offset_and_a_damaged_one_not_at_all() {
        let mut p = Producers::new(100);
        p.apply(batch(1, 0, 0, 3), 0, 100);
        p.apply(batch(1, 0, 3, 3), 100, 200);
        p.apply(batch(5, 2, 10, 1), 200, 260);
        let bytes = p.encode(150);
        let (offset, q) = Producers::decode(&bytes, 100).unwrap();
        assert_eq!(offset, 150);
        assert_eq!(q.len(), 1);
        assert_eq!(
            q.check(batch(1, 0, 0, 3)),
            Ok(Sequenced::Duplicate { base: 0, end: 100 })
        );
        let mut all = p.clone();
        all.truncate(u64::MAX);
        assert_eq!(Producers::decode(&p.encode(u64::MAX), 100).unwrap().1, all);
        for cut in [0, 3, bytes.len() / 2, bytes.len() - 1] {
            assert!(Producers::decode(&bytes[..cut], 100).is_none());
        }
        let mut flipped = bytes.clone();
        flipped[10] ^= 1;
        assert!(Producers::decode(&flipped, 100).is_none());
        // Overwritten in place by a shorter one: the old tail is ignored.
        let mut shorter = Producers::new(100);
        shorter.apply(batch(3, 0, 0, 1), 0, 70);
        let mut overwritten = bytes.clone();
        let new = shorter.encode(70);
        overwritten[..new.len()].copy_from_slice(&new);
        assert_eq!(Producers::decode(&overwritten, 100).unwrap().1, shorter);
    }
}
