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
//!
//! With racks (`broker --rack`), the brokers are first put in rack
//! alternating order — the first broker of each rack, then the second of
//! each, and so on — and a partition's followers are the next brokers in
//! that order whose rack holds no copy yet, so its copies span as many
//! racks as there are (a lost rack, like a lost broker, takes at most one
//! copy when there are at least as many racks as copies). When racks run
//! out, the remaining copies go to the next brokers regardless of rack. A
//! broker without a rack counts as a rack of its own.

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

/// A live broker as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placeable {
    /// Its id.
    pub id: BrokerId,
    /// Its rack (`broker --rack`), if it was given one.
    pub rack: Option<String>,
}

impl Placeable {
    /// A broker without a rack.
    pub fn new(id: BrokerId) -> Placeable {
        Placeable { id, rack: None }
    }

    /// The rack it counts as: its own, or one of its own when it has none.
    fn rack_key(&self) -> (bool, String) {
        match &self.rack {
            Some(rack) => (false, rack.clone()),
            None => (true, self.id.to_string()),
        }
    }
}

/// The brokers in rack alternating order: every rack's lowest id first
/// (racks by name), then every rack's second, and so on. Without any rack
/// this is simply id order.
fn rack_alternating(brokers: &[Placeable]) -> Vec<Placeable> {
    let mut brokers = brokers.to_vec();
    brokers.sort_by_key(|b| b.id);
    brokers.dedup_by_key(|b| b.id);
    if brokers.iter().all(|b| b.rack.is_none()) {
        return brokers;
    }
    let mut racks: std::collections::BTreeMap<(bool, String), Vec<Placeable>> =
        std::collections::BTreeMap::new();
    for broker in brokers {
        racks.entry(broker.rack_key()).or_default().push(broker);
    }
    let deepest = racks.values().map(Vec::len).max().unwrap_or(0);
    let mut order = Vec::new();
    for depth in 0..deepest {
        for members in racks.values() {
            if let Some(broker) = members.get(depth) {
                order.push(broker.clone());
            }
        }
    }
    order
}

/// The replicas of each partition `0..partitions` of `topic`: `factor`
/// distinct brokers each, over as many racks as possible; without racks,
/// the first is as in [`spread`] (the preferred leader). `None` when there
/// are fewer live brokers than `factor`.
pub fn assign(
    topic: &str,
    partitions: u32,
    factor: u32,
    brokers: &[Placeable],
) -> Option<Vec<Vec<BrokerId>>> {
    let order = rack_alternating(brokers);
    let count = order.len();
    if factor == 0 || factor as usize > count {
        return None;
    }
    let first = (fnv1a(topic.as_bytes()) % count as u64) as usize;
    Some(
        (0..partitions as usize)
            .map(|p| {
                let start = (first + p) % count;
                let mut chosen: Vec<usize> = vec![start];
                let mut racks = vec![order[start].rack_key()];
                // Brokers of racks without a copy first, in order; then any.
                for pass in 0..2 {
                    for step in 1..count {
                        if chosen.len() == factor as usize {
                            break;
                        }
                        let at = (start + step) % count;
                        let rack = order[at].rack_key();
                        if chosen.contains(&at) || (pass == 0 && racks.contains(&rack)) {
                            continue;
                        }
                        chosen.push(at);
                        racks.push(rack);
                    }
                }
                chosen.into_iter().map(|i| order[i].id).collect()
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
        let replicas = assign("orders", 12, 3, &unracked(&brokers)).unwrap();
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
        assert_eq!(assign("t", 3, 4, &unracked(&brokers[..3])), None);
        assert_eq!(assign("t", 3, 0, &unracked(&brokers)), None);
        assert_eq!(
            assign("t", 2, 1, &unracked(&[7])),
            Some(vec![vec![7], vec![7]])
        );
    }

    fn unracked(ids: &[BrokerId]) -> Vec<Placeable> {
        ids.iter().copied().map(Placeable::new).collect()
    }

    fn racked(brokers: &[(BrokerId, &str)]) -> Vec<Placeable> {
        brokers
            .iter()
            .map(|(id, rack)| Placeable {
                id: *id,
                rack: Some(rack.to_string()),
            })
            .collect()
    }

    fn racks_of(set: &[BrokerId], brokers: &[Placeable]) -> Vec<String> {
        let mut racks: Vec<String> = set
            .iter()
            .map(|id| {
                let b = brokers.iter().find(|b| b.id == *id).unwrap();
                b.rack.clone().unwrap_or_else(|| format!("own-{id}"))
            })
            .collect();
        racks.sort();
        racks.dedup();
        racks
    }

    #[test]
    fn copies_span_racks_and_leaders_still_spread_evenly() {
        // Three racks of two brokers, racks not in id order.
        let brokers = racked(&[(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c"), (6, "c")]);
        let replicas = assign("orders", 12, 3, &brokers).unwrap();
        for set in &replicas {
            assert_eq!(racks_of(set, &brokers).len(), 3, "{set:?}");
        }
        for b in 1..=6 {
            assert_eq!(replicas.iter().filter(|r| r[0] == b).count(), 2);
            assert_eq!(replicas.iter().filter(|r| r.contains(&b)).count(), 6);
        }
        // Two racks, uneven: every partition has a copy in each rack, so
        // the lone broker of rack b holds a copy of every partition.
        let uneven = racked(&[(1, "a"), (2, "a"), (3, "a"), (4, "b")]);
        for set in assign("t", 8, 2, &uneven).unwrap() {
            assert_eq!(racks_of(&set, &uneven), vec!["a", "b"], "{set:?}");
            assert!(set.contains(&4), "{set:?}");
        }
        // More copies than racks: two racks, then any broker, all distinct.
        for set in assign("t", 8, 3, &uneven).unwrap() {
            let mut distinct = set.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), 3, "{set:?}");
            assert_eq!(racks_of(&set, &uneven).len(), 2, "{set:?}");
        }
        // A broker without a rack is a rack of its own.
        let mixed = vec![
            Placeable::new(1),
            Placeable {
                id: 2,
                rack: Some("a".into()),
            },
            Placeable {
                id: 3,
                rack: Some("a".into()),
            },
        ];
        for set in assign("t", 6, 2, &mixed).unwrap() {
            assert_eq!(racks_of(&set, &mixed).len(), 2, "{set:?}");
        }
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
