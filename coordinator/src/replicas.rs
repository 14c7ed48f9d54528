//! A replicated partition's state: who leads it, in which epoch, and which
//! replicas are in sync — the one record every replica acts on, kept in the
//! registry (`partitions/<topic-id>/<partition>` in etcd, see
//! [`crate::keys`]) and changed only by compare-and-set on its revision.
//!
//! There is no controller. The state's changes are made by the brokers it
//! names, each a transaction that succeeds only if the state is still the
//! one the broker read:
//!
//! | change | made by | when |
//! |--------|---------|------|
//! | [`PartitionState::shrink`] | the leader | a follower fell behind for `replica_lag_time_max_ms`, its broker left, or it restarted (a new incarnation) |
//! | [`PartitionState::expand`] | the leader | a follower outside the ISR caught up to the high watermark |
//! | [`PartitionState::elect`]  | an ISR member | the leader's broker left the registry; of the members that race, one wins (epoch + 1) |
//! | [`PartitionState::ask_transfer`] | any broker | `ringlog partitions elect-leaders`: the preferred leader is in sync but does not lead |
//! | [`PartitionState::transfer`] | the leader | a transfer was asked for, or a reassignment moves the partition off the leader, and the new leader has caught up (epoch + 1) |
//! | [`PartitionState::elect_unclean`] | a replica outside the ISR | `ringlog partitions elect --unclean` on an offline partition |
//!
//! A partition whose key does not exist is in its [`PartitionState::initial`]
//! state (revision 0): creating a topic writes no per-partition keys, so a
//! topic of 10,000 partitions stays one transaction.
//!
//! Leases are liveness, epochs are safety: a broker that lost its lease
//! stops accepting writes, but what fences a deposed leader is the epoch
//! every replica and client checks, not the lease.

use protocol::types::BrokerId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One partition's replication state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionState {
    /// The broker that leads it (serves produce and fetch).
    pub leader: BrokerId,
    /// Bumped by every election: requests and fetches carry it, and a
    /// replica refuses an older one.
    pub leader_epoch: u32,
    /// The replicas in sync with the leader, the leader among them.
    pub isr: Vec<BrokerId>,
    /// The incarnation each ISR member had when it joined (KIP-903): a
    /// member that restarted since (and may have lost what it had not
    /// flushed) is out of the ISR until it catches up again. Absent for
    /// the initial ISR, whose members all start empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub incarnations: BTreeMap<BrokerId, String>,
    /// The data directory (its `data_dir_id`, made with the directory:
    /// Kafka's log directory id, KIP-858) each ISR member holds its copy
    /// in. A broker that comes back on another directory — a wiped or
    /// replaced disk — is not the member the ISR names, whatever its id:
    /// it never leads, is never elected and defines no history until a
    /// leader adds it again ([`Self::copy_in_sync`]). Absent for members
    /// of states written before it existed (see `copy_in_sync`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub disks: BTreeMap<BrokerId, String>,
    /// A leadership transfer asked for (`ringlog partitions
    /// elect-leaders`): the leader hands over to this ISR member once it
    /// has caught up, refusing writes meanwhile, so that not even an
    /// acks=written message is lost to the change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_to: Option<BrokerId>,
}

/// A state and the revision of its key (0: no key yet, the initial state).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The state.
    pub state: PartitionState,
    /// Its key's `mod_revision`; the next change compares it.
    pub revision: i64,
}

/// A change to make if the state is still at `expected` (0: no key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionUpdate {
    /// The partition.
    pub partition: u32,
    /// The revision the change was computed from.
    pub expected: i64,
    /// The new state.
    pub state: PartitionState,
}

/// How one update of a batch ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdateOutcome {
    /// Written: the key's new revision.
    Done(i64),
    /// Someone else changed it first: the state now (`None`: its key is
    /// gone, the topic was deleted).
    Conflict(Option<Versioned>),
}

impl PartitionState {
    /// A new partition's state: the preferred leader leads in epoch 0 and
    /// every replica is in sync (all are empty), each in the data
    /// directory `disks` names for it (the topic's record keeps the
    /// directories its brokers had when it was created).
    pub fn initial(replicas: &[BrokerId], disks: &BTreeMap<BrokerId, String>) -> PartitionState {
        PartitionState {
            leader: replicas.first().copied().unwrap_or(0),
            leader_epoch: 0,
            isr: replicas.to_vec(),
            incarnations: BTreeMap::new(),
            disks: disks
                .iter()
                .filter(|(b, _)| replicas.contains(b))
                .map(|(b, d)| (*b, d.clone()))
                .collect(),
            transfer_to: None,
        }
    }

    /// True when `broker` is in sync.
    pub fn in_sync(&self, broker: BrokerId) -> bool {
        self.isr.contains(&broker)
    }

    /// True when `broker`, holding its copy in the data directory `disk`,
    /// is the ISR member the state names: in the ISR, and in the directory
    /// it was in sync in. `disk` is `None` when the caller does not know
    /// the broker's directory (it is not live): membership alone counts.
    /// A member without a recorded directory (a state written before they
    /// were recorded) counts too — its own broker leaves the ISR at start
    /// when its directory is new (`restart` below).
    pub fn copy_in_sync(&self, broker: BrokerId, disk: Option<&str>) -> bool {
        if !self.in_sync(broker) {
            return false;
        }
        match (self.disks.get(&broker), disk) {
            (Some(recorded), Some(disk)) => recorded == disk,
            _ => true,
        }
    }

    /// The leader removes `gone` from the ISR (never itself).
    pub fn shrink(&self, gone: &[BrokerId]) -> PartitionState {
        let mut next = self.clone();
        next.isr.retain(|b| *b == self.leader || !gone.contains(b));
        next.incarnations.retain(|b, _| next.isr.contains(b));
        next.disks.retain(|b, _| next.isr.contains(b));
        if next.transfer_to.is_some_and(|to| !next.isr.contains(&to)) {
            next.transfer_to = None;
        }
        next
    }

    /// The leader adds `broker` (in its `incarnation`, its copy in the
    /// data directory `disk`) to the ISR.
    pub fn expand(&self, broker: BrokerId, incarnation: &str, disk: &str) -> PartitionState {
        let mut next = self.clone();
        if !next.isr.contains(&broker) {
            next.isr.push(broker);
            next.isr.sort_unstable();
        }
        next.incarnations.insert(broker, incarnation.to_string());
        if !disk.is_empty() {
            next.disks.insert(broker, disk.to_string());
        }
        next
    }

    /// `broker`'s copy is not the ISR's (its data directory is new): out
    /// of the ISR. If it led, the leadership goes to another member —
    /// live or not: a member that is down takes over when it returns,
    /// and one that is up and sees its leader gone elects itself — in a
    /// new epoch. `None` when nothing changes (it is not in the ISR), or
    /// when it is the ISR's only member: then the partition has no copy
    /// that holds its committed bytes, it stays as it is (offline: the
    /// broker does not lead on a copy that is not the ISR's) until an
    /// operator's unclean election.
    pub fn leave_as_new_disk(
        &self,
        broker: BrokerId,
        live: &dyn Fn(BrokerId) -> bool,
    ) -> Option<PartitionState> {
        if !self.in_sync(broker) {
            return None;
        }
        let mut next = self.clone();
        if self.leader == broker {
            // A live member first: it serves at once.
            let others: Vec<BrokerId> = self.isr.iter().copied().filter(|b| *b != broker).collect();
            let successor = others
                .iter()
                .copied()
                .find(|b| live(*b))
                .or_else(|| others.first().copied())?;
            next.leader = successor;
            next.leader_epoch = self.leader_epoch + 1;
            next.transfer_to = None;
        }
        next.isr.retain(|b| *b != broker);
        next.incarnations.remove(&broker);
        next.disks.remove(&broker);
        if next.transfer_to == Some(broker) {
            next.transfer_to = None;
        }
        Some(next)
    }

    /// What a new run of `me` writes for a partition it holds a copy of
    /// (`None`: nothing). `new_disk`: its copy is one the ISR names but
    /// not the one it means (a new data directory); `live_copy(b)`: `b`
    /// is live and is the ISR member the state names; `live(b)`: `b` is
    /// live. A new copy leaves the ISR ([`Self::leave_as_new_disk`]); a
    /// copy that led gets a new epoch — another live ISR member takes
    /// over, or it leads again — so that no follower mistakes the new
    /// run's log for the old one's. Handing over, it stays in the ISR (it
    /// holds everything committed: what it had flushed survived; the new
    /// leader takes it out if it must catch up): the member taken for live
    /// and in sync may turn out to be a new copy (its partition directory
    /// lost, which only its own broker can see), and then hands the
    /// leadership back instead of leaving the partition without a member
    /// that holds its bytes (found by the replication model test).
    pub fn on_restart(
        &self,
        me: BrokerId,
        new_disk: bool,
        live_copy: &dyn Fn(BrokerId) -> bool,
        live: &dyn Fn(BrokerId) -> bool,
    ) -> Option<PartitionState> {
        if new_disk && self.in_sync(me) {
            return self.leave_as_new_disk(me, live);
        }
        if self.leader != me {
            return None;
        }
        let other = self.isr.iter().copied().find(|b| *b != me && live_copy(*b));
        match other {
            Some(other) => self.transfer(other),
            None => {
                let mut again = self.clone();
                again.leader_epoch += 1;
                Some(again)
            }
        }
    }

    /// `candidate`, an ISR member, takes over from a leader that is gone:
    /// epoch + 1, the old leader out of the ISR. `None` when the candidate
    /// is not in sync (an unclean election is [`Self::elect_unclean`]).
    pub fn elect(&self, candidate: BrokerId) -> Option<PartitionState> {
        if !self.in_sync(candidate) || candidate == self.leader {
            return None;
        }
        let mut next = self.clone();
        next.leader = candidate;
        next.leader_epoch = self.leader_epoch + 1;
        next.isr.retain(|b| *b != self.leader);
        next.incarnations.remove(&self.leader);
        next.disks.remove(&self.leader);
        next.transfer_to = None;
        Some(next)
    }

    /// Asks the leader to hand over to `to`, an ISR member that does not
    /// lead. `None` when `to` leads already or is not in sync.
    pub fn ask_transfer(&self, to: BrokerId) -> Option<PartitionState> {
        if to == self.leader || !self.in_sync(to) {
            return None;
        }
        let mut next = self.clone();
        next.transfer_to = Some(to);
        Some(next)
    }

    /// The leader hands over to `to`, an ISR member that has everything it
    /// has: epoch + 1, the ISR unchanged (the old leader follows, in sync).
    pub fn transfer(&self, to: BrokerId) -> Option<PartitionState> {
        if to == self.leader || !self.in_sync(to) {
            return None;
        }
        let mut next = self.clone();
        next.leader = to;
        next.leader_epoch = self.leader_epoch + 1;
        next.transfer_to = None;
        Some(next)
    }

    /// The state without a transfer asked for (it could not be done).
    pub fn without_transfer(&self) -> PartitionState {
        let mut next = self.clone();
        next.transfer_to = None;
        next
    }

    /// `candidate` (its copy in the data directory `disk`) takes over
    /// although it is not in sync (the operator's `partitions elect
    /// --unclean`): what only the lost ISR had is lost.
    pub fn elect_unclean(&self, candidate: BrokerId, disk: &str) -> PartitionState {
        let mut disks = BTreeMap::new();
        if !disk.is_empty() {
            disks.insert(candidate, disk.to_string());
        }
        PartitionState {
            leader: candidate,
            leader_epoch: self.leader_epoch + 1,
            isr: vec![candidate],
            incarnations: BTreeMap::new(),
            disks,
            transfer_to: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elections_shrinks_and_expands_keep_the_leader_in_sync() {
        let start = PartitionState::initial(&[2, 1, 3], &BTreeMap::new());
        assert_eq!((start.leader, start.leader_epoch), (2, 0));
        let shrunk = start.shrink(&[3, 2]);
        assert_eq!(shrunk.isr, vec![2, 1], "the leader stays");
        let elected = shrunk.elect(1).unwrap();
        assert_eq!((elected.leader, elected.leader_epoch), (1, 1));
        assert_eq!(elected.isr, vec![1]);
        assert_eq!(elected.elect(3), None, "3 is not in sync");
        assert_eq!(elected.elect(1), None, "already the leader");
        let back = elected.expand(3, "inc-a", "disk-3");
        assert_eq!(back.isr, vec![1, 3]);
        assert_eq!(back.incarnations.get(&3).map(String::as_str), Some("inc-a"));
        let unclean = back.shrink(&[3]).elect_unclean(2, "disk-2");
        assert_eq!(
            (unclean.leader, unclean.leader_epoch, unclean.isr),
            (2, 2, vec![2])
        );
        let asked = back.ask_transfer(3).unwrap();
        assert_eq!(asked.transfer_to, Some(3));
        assert_eq!(back.ask_transfer(1), None, "leads already");
        assert_eq!(back.ask_transfer(2), None, "not in sync");
        assert_eq!(asked.shrink(&[3]).transfer_to, None, "left the ISR");
        let moved = asked.transfer(3).unwrap();
        assert_eq!(
            (
                moved.leader,
                moved.leader_epoch,
                &moved.isr,
                moved.transfer_to
            ),
            (3, 2, &vec![1, 3], None)
        );
        let json = serde_json::to_string(&back).unwrap();
        assert_eq!(serde_json::from_str::<PartitionState>(&json).unwrap(), back);
    }

    #[test]
    fn a_copy_on_a_new_data_directory_is_not_the_member_the_isr_names() {
        let disks = BTreeMap::from([(1, "d1".to_string()), (2, "d2".into()), (3, "d3".into())]);
        let start = PartitionState::initial(&[3, 1, 2], &disks);
        assert_eq!(
            start.disks, disks,
            "the initial ISR names every member's directory"
        );
        assert!(start.copy_in_sync(3, Some("d3")));
        assert!(
            !start.copy_in_sync(3, Some("wiped")),
            "broker 3 on a new disk"
        );
        assert!(start.copy_in_sync(3, None), "not live: membership alone");
        let legacy = PartitionState::initial(&[3, 1, 2], &BTreeMap::new());
        assert!(
            legacy.copy_in_sync(3, Some("wiped")),
            "no directory recorded"
        );

        // The wiped leader with nobody else up: leadership passes to a
        // member that is down, in a new epoch, and 3 leaves the ISR.
        let none_live = |_: BrokerId| false;
        let next = start.leave_as_new_disk(3, &none_live).unwrap();
        assert_eq!((next.leader, next.leader_epoch), (1, 1));
        assert_eq!(next.isr, vec![1, 2]);
        assert!(!next.disks.contains_key(&3));
        // With broker 2 up, 2 takes over.
        let two_live = |b: BrokerId| b == 2;
        let next = start.leave_as_new_disk(3, &two_live).unwrap();
        assert_eq!((next.leader, next.isr.clone()), (2, vec![1, 2]));
        // A follower on a new disk just leaves; one outside changes nothing.
        let follower = start.leave_as_new_disk(1, &none_live).unwrap();
        assert_eq!((follower.leader, follower.leader_epoch), (3, 0));
        assert_eq!(follower.isr, vec![3, 2]);
        assert_eq!(follower.leave_as_new_disk(1, &none_live), None);
        // The last member: nobody holds the committed bytes; no change.
        let alone = start.shrink(&[1, 2]);
        assert_eq!(alone.leave_as_new_disk(3, &none_live), None);
        // Expanding records the directory; an unclean election names only
        // the candidate's.
        let back = next.expand(3, "run-b", "wiped");
        assert!(back.copy_in_sync(3, Some("wiped")));
        assert!(!back.copy_in_sync(3, Some("d3")));
        let unclean = alone.elect_unclean(1, "d1");
        assert_eq!(unclean.disks, BTreeMap::from([(1, "d1".to_string())]));
    }
}
