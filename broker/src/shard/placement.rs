//! Which shard owns a partition: a pure function of the topic name, the
//! partition and the shard count, so every shard (and Metadata) agrees
//! without talking. Partitions of one topic go to consecutive shards,
//! starting at a shard chosen by the topic's hash, so small topics spread
//! across the cores instead of all starting on shard 0.

use protocol::types::{fnv1a, PartitionId, ShardId};

/// The shard that owns `partition` of `topic` on a broker with `shard_count` shards.
pub fn owner_shard(topic: &str, partition: PartitionId, shard_count: usize) -> ShardId {
    assert!(shard_count > 0);
    let first = fnv1a(topic.as_bytes()) % shard_count as u64;
    ((first + u64::from(partition)) % shard_count as u64) as ShardId
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_spread_evenly_over_shards() {
        for shards in 1..=8 {
            let mut per_shard = vec![0; shards];
            for p in 0..(shards as u32 * 4) {
                per_shard[owner_shard("events", p, shards) as usize] += 1;
            }
            assert!(per_shard.iter().all(|&n| n == 4), "{per_shard:?}");
        }
        assert_eq!(owner_shard("a", 3, 1), 0);
        // Fixed values: the placement is part of the contract (Metadata,
        // and a data dir written by one build is read by the next).
        // fnv1a("a") = 0xaf63dc4c8601ec8c, even: "a" starts on shard 0.
        assert_eq!(owner_shard("a", 3, 2), 1);
        assert_eq!(owner_shard("a", 4, 2), 0);
    }
}
