//! Which broker stores each partition of a new topic.
//!
//! Decided once, when the topic is created, from the brokers alive at that
//! moment, and stored with the topic: a partition never moves afterwards
//! (there is no replication yet, as in the paper, so moving it would mean
//! moving its data). Partition `p` goes to the live brokers sorted by id,
//! round robin, starting at one chosen by the topic name's FNV-1a hash, so
//! many small topics do not all start on the lowest broker id. Inside a
//! broker the shard is chosen the same way (`broker::shard::placement`).

use protocol::types::{fnv1a, BrokerId};

/// The broker of each partition `0..partitions` of `topic`, spread over
/// `brokers` (any order, duplicates ignored). Empty when there is no broker.
pub fn spread(topic: &str, partitions: u32, brokers: &[BrokerId]) -> Vec<BrokerId> {
    let mut brokers = brokers.to_vec();
    brokers.sort_unstable();
    brokers.dedup();
    if brokers.is_empty() {
        return Vec::new();
    }
    let count = brokers.len() as u64;
    let first = fnv1a(topic.as_bytes()) % count;
    (0..u64::from(partitions))
        .map(|p| brokers[((first + p) % count) as usize])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_spread_evenly_and_identically() {
        for broker_count in 1..=5u32 {
            let brokers: Vec<BrokerId> = (0..broker_count).map(|b| b * 7 + 1).collect();
            let mut reversed = brokers.clone();
            reversed.reverse();
            let assignment = spread("clicks", broker_count * 3, &brokers);
            assert_eq!(assignment, spread("clicks", broker_count * 3, &reversed));
            for broker in &brokers {
                assert_eq!(assignment.iter().filter(|b| *b == broker).count(), 3);
            }
        }
        assert_eq!(spread("t", 4, &[]), Vec::<BrokerId>::new());
        assert_eq!(spread("t", 3, &[9, 9]), vec![9, 9, 9]);
    }
}
