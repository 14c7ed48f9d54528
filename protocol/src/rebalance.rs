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

    #[test]
    fn the_order_of_the_inputs_does_not_matter() {
        let a = assign(&[3, 1, 0, 2, 4], &["b", "a", "c"], "b");
        let b = assign(&[0, 1, 2, 3, 4], &["c", "b", "a"], "b");
        assert_eq!(a, b);
        assert_eq!(a, vec![2, 3]);
        assert_eq!(assign(&[0, 1], &["a"], "zzz"), Vec::<u32>::new());
    }
}
