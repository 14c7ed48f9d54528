//! Which brokers store each partition of a new topic.
//!
//! Decided once, when the topic is created, from the brokers alive at that
//! moment, and stored with the topic. Partition `p`'s first replica (its
//! preferred leader) goes to the live brokers sorted by id, round robin,
//! starting at one chosen by the topic name's FNV-1a hash, so many small
//! topics do not all start on the lowest broker id; its other replicas are
//! the next brokers in that order, so no broker holds two copies of one
//! partition and every broker leads and follows about as many partitions.
//! Inside a broker the shard is chosen the same way
//! (`broker::shard::placement`).

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

/// The replicas of each partition `0..partitions` of `topic`: `factor`
/// distinct brokers each, the first as in [`spread`] (the preferred leader).
/// `None` when there are fewer live brokers than `factor`.
pub fn assign(
    topic: &str,
    partitions: u32,
    factor: u32,
    brokers: &[BrokerId],
) -> Option<Vec<Vec<BrokerId>>> {
    let mut brokers = brokers.to_vec();
    brokers.sort_unstable();
    brokers.dedup();
    let count = brokers.len() as u64;
    if factor == 0 || u64::from(factor) > count {
        return None;
    }
    let first = fnv1a(topic.as_bytes()) % count;
    Some(
        (0..u64::from(partitions))
            .map(|p| {
                (0..u64::from(factor))
                    .map(|j| brokers[((first + p + j) % count) as usize])
                    .collect()
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_are_distinct_brokers_and_leaders_and_copies_spread_evenly() {
        let brokers = [1, 2, 3, 4];
        let replicas = assign("orders", 12, 3, &brokers).unwrap();
        assert_eq!(replicas.len(), 12);
        let leaders: Vec<BrokerId> = replicas.iter().map(|r| r[0]).collect();
        assert_eq!(leaders, spread("orders", 12, &brokers));
        for set in &replicas {
            let mut distinct = set.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), 3, "{set:?}");
        }
        for b in brokers {
            assert_eq!(leaders.iter().filter(|l| **l == b).count(), 3);
            let copies = replicas.iter().filter(|r| r.contains(&b)).count();
            assert_eq!(copies, 9);
        }
        assert_eq!(assign("t", 3, 4, &brokers[..3]), None);
        assert_eq!(assign("t", 3, 0, &brokers), None);
        assert_eq!(assign("t", 2, 1, &[7]), Some(vec![vec![7], vec![7]]));
    }

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
