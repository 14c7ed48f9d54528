//! The shard's budget of unwritten bytes (issue 8, item 14).
//!
//! An append copies a message set into memory and returns; the sync task
//! writes it later. If producers outrun the disk, those copies pile up:
//! before this budget only `acks = none` was held back, and per partition
//! (partitions × 64 MiB). Every partition of a shard now counts its
//! unwritten bytes here, and while the shard is over its share of
//! `unwritten_bytes_max`, connections stop dispatching produces of any ack
//! mode (and the inbox stops serving forwarded ones) until the disk has
//! caught up: TCP pushes back on the producers, memory stays bounded.

use crate::notify::Notify;
use std::cell::Cell;

/// Unwritten bytes of one shard's partitions, and the most it may hold.
#[derive(Debug)]
pub struct UnwrittenBudget {
    bytes: Cell<u64>,
    limit: u64,
    room: Notify,
}

impl UnwrittenBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Self {
        UnwrittenBudget {
            bytes: Cell::new(0),
            limit,
            room: Notify::new(),
        }
    }

    /// A budget that never pushes back (a log opened outside a shard).
    pub fn unlimited() -> Self {
        UnwrittenBudget::new(u64::MAX)
    }

    /// Unwritten bytes now.
    pub fn bytes(&self) -> u64 {
        self.bytes.get()
    }

    /// Applies one log's change of its unwritten bytes.
    pub fn adjust(&self, from: u64, to: u64) {
        let bytes = self.bytes.get() - from + to;
        self.bytes.set(bytes);
        if to < from && bytes < self.limit {
            self.room.notify_all();
        }
    }

    /// True while produces must wait.
    pub fn over(&self) -> bool {
        self.bytes.get() >= self.limit
    }

    /// Resolves once the shard is under its limit.
    pub async fn wait_for_room(&self) {
        self.room.wait_until(|| !self.over()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_changes_and_says_when_it_is_over() {
        let budget = UnwrittenBudget::new(100);
        budget.adjust(0, 60);
        budget.adjust(0, 30);
        assert!(!budget.over());
        budget.adjust(30, 50);
        assert_eq!(budget.bytes(), 110);
        assert!(budget.over());
        budget.adjust(60, 0);
        assert_eq!(budget.bytes(), 50);
        assert!(!budget.over());
    }
}
