//! The paper's range rebalance, as a pure function.
//!
//! It lives in the protocol crate because every client runs it (there is
//! no group leader and no broker-side assignment); `coordinator::rebalance`
//! re-exports it, and PROTOCOL.md specifies it for clients in other
//! languages.
//!
//! Every consumer of a group runs this on the same inputs (read from the
//! registries) and so computes the same assignment without talking to the
//! others: sort the partitions and the consumers, split the partitions into
//! contiguous ranges of `partitions / consumers`, give the first
//! `partitions % consumers` consumers one extra, and take the range at your
//! own index.

/// The partitions consumer `me` owns, out of `partitions`, when the group's
/// members are `consumers`. Inputs need not be sorted or unique; an unknown
/// `me` owns nothing.
pub fn assign(partitions: &[u32], consumers: &[&str], me: &str) -> Vec<u32> {
    let mut partitions = partitions.to_vec();
    partitions.sort_unstable();
    partitions.dedup();
    let mut consumers = consumers.to_vec();
    consumers.sort_unstable();
    consumers.dedup();
    let Some(index) = consumers.iter().position(|c| *c == me) else {
        return Vec::new();
    };
    let per = partitions.len() / consumers.len();
    let extra = partitions.len() % consumers.len();
    let start = index * per + index.min(extra);
    let len = per + usize::from(index < extra);
    partitions[start..start + len].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_partition_has_exactly_one_owner_in_contiguous_ranges() {
        for partition_count in 0..20u32 {
            for consumer_count in 1..8usize {
                let partitions: Vec<u32> = (0..partition_count).rev().collect();
                let names: Vec<String> = (0..consumer_count).map(|i| format!("c{i}")).collect();
                let consumers: Vec<&str> = names.iter().map(String::as_str).collect();
                let mut owned = Vec::new();
                for me in &consumers {
                    let mine = assign(&partitions, &consumers, me);
                    assert!(
                        mine.windows(2).all(|w| w[1] == w[0] + 1),
                        "contiguous: {mine:?}"
                    );
                    let fair = partition_count as usize / consumer_count;
                    assert!(mine.len() == fair || mine.len() == fair + 1);
                    owned.extend(mine);
                }
                owned.sort_unstable();
                assert_eq!(owned, (0..partition_count).collect::<Vec<_>>());
            }
        }
    }

    /// A small deterministic PRNG (xorshift), so the property runs the same
    /// cases everywhere without a dependency.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn shuffle<T>(&mut self, items: &mut [T]) {
            for i in (1..items.len()).rev() {
                items.swap(i, (self.next() % (i as u64 + 1)) as usize);
            }
        }
    }

    /// The paper's property, over random groups: every member computes its
    /// share from its own (differently ordered, possibly duplicated) copy of
    /// the inputs; the shares cover every partition exactly once, each is a
    /// contiguous range, they differ in size by at most one, the larger ones
    /// go to the first members in sorted order, and a member not in the group
    /// gets nothing.
    #[test]
    fn random_groups_divide_partitions_exactly_once_whoever_computes() {
        let mut rng = Rng(0x853c_49e6_748f_ea9b);
        for _ in 0..2_000 {
            let partition_count = (rng.next() % 64) as u32;
            let member_count = (rng.next() % 12) as usize + 1;
            // Sparse, unordered partition ids and member ids.
            let partitions: Vec<u32> = (0..partition_count).map(|p| p * 3 + 1).collect();
            let names: Vec<String> = (0..member_count)
                .map(|_| format!("m-{:x}", rng.next()))
                .collect();
            let mut sorted = names.clone();
            sorted.sort();
            sorted.dedup();
            let mut owned = Vec::new();
            for (index, me) in sorted.iter().enumerate() {
                // This member's own view: shuffled, with a duplicate.
                let mut my_partitions = partitions.clone();
                my_partitions.extend(partitions.first());
                rng.shuffle(&mut my_partitions);
                let mut my_members: Vec<&str> = names.iter().map(String::as_str).collect();
                my_members.push(me);
                rng.shuffle(&mut my_members);
                let mine = assign(&my_partitions, &my_members, me);
                let positions: Vec<usize> = mine
                    .iter()
                    .map(|p| partitions.iter().position(|q| q == p).unwrap())
                    .collect();
                assert!(positions.windows(2).all(|w| w[1] == w[0] + 1), "contiguous");
                let per = partitions.len() / sorted.len();
                let extra = usize::from(index < partitions.len() % sorted.len());
                assert_eq!(mine.len(), per + extra, "fair share, extras first");
                owned.extend(mine);
            }
            owned.sort_unstable();
            assert_eq!(owned, partitions, "every partition exactly once");
            assert!(assign(&partitions, &["a", "b"], "zzz").is_empty());
        }
    }

    #[test]
    fn the_order_of_the_inputs_does_not_matter() {
        let a = assign(&[3, 1, 0, 2, 4], &["b", "a", "c"], "b");
        let b = assign(&[0, 1, 2, 3, 4], &["c", "b", "a"], "b");
        assert_eq!(a, b);
        assert_eq!(a, vec![2, 3]);
        assert_eq!(assign(&[0, 1], &["a"], "zzz"), Vec::<u32>::new());
    }
}
