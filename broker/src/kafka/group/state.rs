//! One Kafka group's classic state machine, as its coordinator shard keeps
//! it: Empty → PreparingRebalance (the JoinGroup barrier) →
//! CompletingRebalance (waiting for the leader's SyncGroup) → Stable, and
//! back to PreparingRebalance whenever a member joins, leaves or dies.
//! Pure: no I/O and no clock of its own (every call is given `now`), so
//! its tests drive time. What must be stored (the group after a completed
//! rebalance) is handed back to the caller.

use super::super::errors::code;
use coordinator::kafka_groups::{SavedGroup, SavedMember};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// Where a group stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No members (committed offsets may remain).
    Empty,
    /// Waiting for every member to join again.
    PreparingRebalance,
    /// Joined; waiting for the leader's assignment.
    CompletingRebalance,
    /// Assigned; members heartbeat.
    Stable,
}

impl Phase {
    /// Kafka's name for it (DescribeGroups, ListGroups).
    pub fn name(self) -> &'static str {
        match self {
            Phase::Empty => "Empty",
            Phase::PreparingRebalance => "PreparingRebalance",
            Phase::CompletingRebalance => "CompletingRebalance",
            Phase::Stable => "Stable",
        }
    }
}

/// A JoinGroup answer.
#[derive(Debug, Clone, Default)]
pub struct JoinAnswer {
    /// Kafka's error code.
    pub error: i16,
    /// The new generation (−1 with an error).
    pub generation: i32,
    /// The chosen protocol.
    pub protocol: String,
    /// The leader's member id.
    pub leader: String,
    /// The member's id (given now, with MEMBER_ID_REQUIRED or a first join).
    pub member_id: String,
    /// For the leader: every member, its static id and its metadata.
    pub members: Vec<(String, Option<String>, Vec<u8>)>,
}

impl JoinAnswer {
    fn error(error: i16, member_id: &str) -> JoinAnswer {
        JoinAnswer {
            error,
            generation: -1,
            member_id: member_id.to_string(),
            ..JoinAnswer::default()
        }
    }
}

/// A SyncGroup answer: an error code and the member's assignment.
pub type SyncAnswer = (i16, Vec<u8>);

/// Where an answer goes once the group decides it.
pub type Waiter<T> = flume::Sender<T>;

/// What a JoinGroup asks.
#[derive(Debug, Clone)]
pub struct Join {
    /// The member id it has (empty: none yet).
    pub member_id: String,
    /// Its static id.
    pub instance_id: Option<String>,
    /// Its client id.
    pub client_id: String,
    /// Where it connects from.
    pub client_host: String,
    /// Its session timeout.
    pub session_timeout: Duration,
    /// Its rebalance timeout.
    pub rebalance_timeout: Duration,
    /// `consumer`, usually.
    pub protocol_type: String,
    /// The protocols it can use, preferred first, with its metadata for each.
    pub protocols: Vec<(String, Vec<u8>)>,
    /// The version asked in (v4+ gets MEMBER_ID_REQUIRED first).
    pub version: i16,
}

/// A member.
#[derive(Debug)]
pub struct Member {
    /// Its static id.
    pub instance_id: Option<String>,
    /// Its client id.
    pub client_id: String,
    /// Where it connects from.
    pub client_host: String,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    protocols: Vec<(String, Vec<u8>)>,
    /// What the leader assigned it.
    pub assignment: Vec<u8>,
    last_seen: Instant,
    /// In join order: the first is the leader when one must be chosen.
    joined: u64,
    join_waiter: Option<Waiter<JoinAnswer>>,
    sync_waiter: Option<Waiter<SyncAnswer>>,
}

impl Member {
    /// Its metadata for `protocol` (empty if it has none).
    pub fn metadata(&self, protocol: &str) -> &[u8] {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map_or(&[][..], |(_, m)| m.as_slice())
    }
}

/// A group.
#[derive(Debug)]
pub struct Group {
    /// Where it stands.
    pub phase: Phase,
    /// Its generation.
    pub generation: i32,
    /// `consumer`, usually (empty while there are no members).
    pub protocol_type: String,
    /// The chosen protocol.
    pub protocol: String,
    /// The leader's member id.
    pub leader: String,
    /// Its members by id.
    pub members: BTreeMap<String, Member>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, until when they may join.
    pending: HashMap<String, Instant>,
    /// When the barrier ends whoever has not joined again.
    rebalance_deadline: Option<Instant>,
    /// Not before then (an empty group's first join waits for others).
    complete_not_before: Option<Instant>,
    joins: u64,
    /// Member ids made so far.
    made: u64,
}

/// Pending member ids at most per group: a client that asks for ids and
/// never joins cannot grow the table.
const PENDING_MAX: usize = 10_000;

impl Default for Group {
    fn default() -> Group {
        Group::new()
    }
}

impl Group {
    /// A new, empty group.
    pub fn new() -> Group {
        Group {
            phase: Phase::Empty,
            generation: 0,
            protocol_type: String::new(),
            protocol: String::new(),
            leader: String::new(),
            members: BTreeMap::new(),
            pending: HashMap::new(),
            rebalance_deadline: None,
            complete_not_before: None,
            joins: 0,
            made: 0,
        }
    }

    /// The group as a previous coordinator stored it: stable, its members'
    /// sessions starting `now`.
    pub fn restored(saved: SavedGroup, now: Instant) -> Group {
        let mut group = Group::new();
        group.generation = saved.generation;
        group.protocol_type = saved.protocol_type;
        group.protocol = saved.protocol.clone();
        group.leader = saved.leader;
        for (i, m) in saved.members.into_iter().enumerate() {
            group.members.insert(
                m.member_id,
                Member {
                    instance_id: m.instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    session_timeout: Duration::from_millis(m.session_timeout_ms.max(0) as u64),
                    rebalance_timeout: Duration::from_millis(m.rebalance_timeout_ms.max(0) as u64),
                    protocols: vec![(saved.protocol.clone(), m.metadata)],
                    assignment: m.assignment,
                    last_seen: now,
                    joined: i as u64,
                    join_waiter: None,
                    sync_waiter: None,
                },
            );
        }
        group.joins = group.members.len() as u64;
        group.phase = if group.members.is_empty() {
            Phase::Empty
        } else {
            Phase::Stable
        };
        group
    }

    /// The group as it must be stored.
    pub fn saved(&self) -> SavedGroup {
        SavedGroup {
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            members: self
                .members
                .iter()
                .map(|(id, m)| SavedMember {
                    member_id: id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout_ms: m.session_timeout.as_millis() as i32,
                    rebalance_timeout_ms: m.rebalance_timeout.as_millis() as i32,
                    metadata: m.metadata(&self.protocol).to_vec(),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    /// True when nothing of it lives only in memory: no members, no ids
    /// handed out.
    pub fn is_idle(&self) -> bool {
        self.members.is_empty() && self.pending.is_empty()
    }

    /// The bytes this group holds for its clients: members' metadata and
    /// assignments, and a share for each member and pending id.
    pub fn footprint(&self) -> usize {
        let members: usize = self
            .members
            .values()
            .map(|m| {
                256 + m.assignment.len()
                    + m.protocols
                        .iter()
                        .map(|(n, meta)| n.len() + meta.len())
                        .sum::<usize>()
            })
            .sum();
        members + self.pending.len() * 128
    }

    /// True when every member could use `protocol_type` and one of `protocols`.
    fn fits(&self, join: &Join) -> bool {
        if self.members.is_empty() {
            return !join.protocol_type.is_empty() && !join.protocols.is_empty();
        }
        join.protocol_type == self.protocol_type
            && join.protocols.iter().any(|(name, _)| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == name))
            })
    }

    /// The id a joining member has from now on, or the answer that ends
    /// its request: a new member gets an id (v4+: and is told to join
    /// again with it), a known one keeps its own, an unknown one is
    /// refused.
    fn member_id(&mut self, join: &Join, now: Instant) -> Result<String, JoinAnswer> {
        if !join.member_id.is_empty() {
            if !self.members.contains_key(&join.member_id)
                && self.pending.remove(&join.member_id).is_none()
            {
                return Err(JoinAnswer::error(code::UNKNOWN_MEMBER_ID, &join.member_id));
            }
            return Ok(join.member_id.clone());
        }
        self.made += 1;
        let member_id = format!("{}-{}-{}", join.client_id, self.made, random_suffix());
        // A static member takes the place of its previous instance.
        if let Some(instance) = &join.instance_id {
            let old: Vec<String> = self
                .members
                .iter()
                .filter(|(_, m)| m.instance_id.as_ref() == Some(instance))
                .map(|(id, _)| id.clone())
                .collect();
            for id in old {
                self.remove(&id);
            }
        } else if join.version >= 4 {
            if self.pending.len() >= PENDING_MAX {
                self.pending.retain(|_, until| *until > now);
            }
            if self.pending.len() >= PENDING_MAX {
                return Err(JoinAnswer::error(code::GROUP_MAX_SIZE_REACHED, ""));
            }
            self.pending
                .insert(member_id.clone(), now + join.session_timeout);
            return Err(JoinAnswer::error(code::MEMBER_ID_REQUIRED, &member_id));
        }
        Ok(member_id)
    }

    /// A JoinGroup: answered at once (`Some`, an error or a new member id)
    /// or through `waiter` when the barrier ends.
    pub fn join(
        &mut self,
        join: Join,
        waiter: Waiter<JoinAnswer>,
        initial_delay: Duration,
        now: Instant,
    ) -> Option<JoinAnswer> {
        if !self.fits(&join) {
            return Some(JoinAnswer::error(
                code::INCONSISTENT_GROUP_PROTOCOL,
                &join.member_id,
            ));
        }
        let member_id = match self.member_id(&join, now) {
            Ok(id) => id,
            Err(answer) => return Some(answer),
        };
        if self.members.is_empty() {
            self.protocol_type = join.protocol_type.clone();
        }
        let joined = self.members.get(&member_id).map_or_else(
            || {
                self.joins += 1;
                self.joins
            },
            |m| m.joined,
        );
        let previous = self.members.insert(
            member_id.clone(),
            Member {
                instance_id: join.instance_id,
                client_id: join.client_id,
                client_host: join.client_host,
                session_timeout: join.session_timeout,
                rebalance_timeout: join.rebalance_timeout,
                protocols: join.protocols,
                assignment: Vec::new(),
                last_seen: now,
                joined,
                join_waiter: Some(waiter),
                sync_waiter: None,
            },
        );
        if let Some(previous) = previous {
            if let Some(old) = previous.join_waiter {
                // The same member asked again: the older request is over.
                let _ = old.send(JoinAnswer::error(code::UNKNOWN_MEMBER_ID, &member_id));
            }
        }
        match self.phase {
            Phase::PreparingRebalance => {}
            Phase::Empty => self.prepare(now, Some(now + initial_delay)),
            Phase::CompletingRebalance | Phase::Stable => self.prepare(now, None),
        }
        self.try_complete(now);
        None
    }

    /// Opens the barrier.
    fn prepare(&mut self, now: Instant, not_before: Option<Instant>) {
        // Members waiting for an assignment learn it is void.
        for m in self.members.values_mut() {
            if let Some(w) = m.sync_waiter.take() {
                let _ = w.send((code::REBALANCE_IN_PROGRESS, Vec::new()));
            }
        }
        let longest = self
            .members
            .values()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or_default();
        self.phase = Phase::PreparingRebalance;
        self.rebalance_deadline = Some(now + longest);
        self.complete_not_before = not_before.map(|t| t.min(now + longest));
    }

    /// Ends the barrier if everyone joined (or its time is up): a new
    /// generation, the leader told every member's metadata. True when it
    /// ended.
    pub fn try_complete(&mut self, now: Instant) -> bool {
        if self.phase != Phase::PreparingRebalance {
            return false;
        }
        let deadline_passed = self.rebalance_deadline.is_some_and(|d| now >= d);
        let all_joined = self.members.values().all(|m| m.join_waiter.is_some());
        let early = self.complete_not_before.is_some_and(|t| now < t);
        if !(deadline_passed || all_joined && !early) {
            return false;
        }
        // Whoever did not join again is out.
        let absent: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| m.join_waiter.is_none())
            .map(|(id, _)| id.clone())
            .collect();
        for id in absent {
            self.members.remove(&id);
        }
        self.rebalance_deadline = None;
        self.complete_not_before = None;
        self.generation += 1;
        if self.members.is_empty() {
            self.phase = Phase::Empty;
            self.protocol.clear();
            self.leader.clear();
            return true;
        }
        self.protocol = self.choose_protocol();
        if !self.members.contains_key(&self.leader) {
            self.leader = self
                .members
                .iter()
                .min_by_key(|(_, m)| m.joined)
                .map(|(id, _)| id.clone())
                .unwrap_or_default();
        }
        let everyone: Vec<(String, Option<String>, Vec<u8>)> = self
            .members
            .iter()
            .map(|(id, m)| {
                (
                    id.clone(),
                    m.instance_id.clone(),
                    m.metadata(&self.protocol).to_vec(),
                )
            })
            .collect();
        for (id, m) in &mut self.members {
            m.last_seen = now;
            m.assignment.clear();
            if let Some(w) = m.join_waiter.take() {
                let _ = w.send(JoinAnswer {
                    error: code::NONE,
                    generation: self.generation,
                    protocol: self.protocol.clone(),
                    leader: self.leader.clone(),
                    member_id: id.clone(),
                    members: if *id == self.leader {
                        everyone.clone()
                    } else {
                        Vec::new()
                    },
                });
            }
        }
        self.phase = Phase::CompletingRebalance;
        true
    }

    /// Kafka's vote: among the protocols every member supports, each member
    /// votes for the one it prefers; most votes wins (ties: the first
    /// member's preference order).
    fn choose_protocol(&self) -> String {
        let Some(first) = self.members.values().min_by_key(|m| m.joined) else {
            return String::new();
        };
        let common: Vec<&str> = first
            .protocols
            .iter()
            .map(|(n, _)| n.as_str())
            .filter(|name| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == name))
            })
            .collect();
        let votes = |name: &str| {
            self.members
                .values()
                .filter(|m| {
                    m.protocols
                        .iter()
                        .map(|(n, _)| n.as_str())
                        .find(|n| common.contains(n))
                        == Some(name)
                })
                .count()
        };
        let mut best = common.first().copied().unwrap_or_default();
        for name in &common {
            if votes(name) > votes(best) {
                best = name;
            }
        }
        best.to_string()
    }

    /// Checks a member and its generation (SyncGroup, Heartbeat, OffsetCommit).
    pub fn check(&self, member_id: &str, generation: i32) -> i16 {
        if !self.members.contains_key(member_id) {
            code::UNKNOWN_MEMBER_ID
        } else if generation != self.generation {
            code::ILLEGAL_GENERATION
        } else {
            code::NONE
        }
    }

    /// A SyncGroup: answered at once or through `waiter`. When the leader's
    /// assignment completes the rebalance, the group to store is returned
    /// as well.
    pub fn sync(
        &mut self,
        member_id: &str,
        generation: i32,
        assignments: Vec<(String, Vec<u8>)>,
        waiter: Waiter<SyncAnswer>,
        now: Instant,
    ) -> (Option<SyncAnswer>, Option<SavedGroup>) {
        let checked = self.check(member_id, generation);
        if checked != code::NONE {
            return (Some((checked, Vec::new())), None);
        }
        if let Some(m) = self.members.get_mut(member_id) {
            m.last_seen = now;
        }
        match self.phase {
            Phase::Empty | Phase::PreparingRebalance => {
                (Some((code::REBALANCE_IN_PROGRESS, Vec::new())), None)
            }
            Phase::Stable => {
                let assignment = self
                    .members
                    .get(member_id)
                    .map(|m| m.assignment.clone())
                    .unwrap_or_default();
                (Some((code::NONE, assignment)), None)
            }
            Phase::CompletingRebalance => {
                if member_id != self.leader {
                    if let Some(m) = self.members.get_mut(member_id) {
                        m.sync_waiter = Some(waiter);
                    }
                    return (None, None);
                }
                let mut given: HashMap<String, Vec<u8>> = assignments.into_iter().collect();
                for (id, m) in &mut self.members {
                    m.assignment = given.remove(id).unwrap_or_default();
                    if let Some(w) = m.sync_waiter.take() {
                        let _ = w.send((code::NONE, m.assignment.clone()));
                    }
                }
                self.phase = Phase::Stable;
                let mine = self
                    .members
                    .get(member_id)
                    .map(|m| m.assignment.clone())
                    .unwrap_or_default();
                (Some((code::NONE, mine)), Some(self.saved()))
            }
        }
    }

    /// A Heartbeat's answer.
    pub fn heartbeat(&mut self, member_id: &str, generation: i32, now: Instant) -> i16 {
        let Some(m) = self.members.get_mut(member_id) else {
            return code::UNKNOWN_MEMBER_ID;
        };
        m.last_seen = now;
        match self.phase {
            Phase::PreparingRebalance | Phase::CompletingRebalance => code::REBALANCE_IN_PROGRESS,
            _ if generation != self.generation => code::ILLEGAL_GENERATION,
            _ => code::NONE,
        }
    }

    /// Notes that a member is alive (an offset commit).
    pub fn touch(&mut self, member_id: &str, now: Instant) {
        if let Some(m) = self.members.get_mut(member_id) {
            m.last_seen = now;
        }
    }

    /// Takes a member out; its waiting requests are answered
    /// UNKNOWN_MEMBER_ID. True if it was a member.
    fn remove(&mut self, member_id: &str) -> bool {
        let Some(m) = self.members.remove(member_id) else {
            return false;
        };
        if let Some(w) = m.join_waiter {
            let _ = w.send(JoinAnswer::error(code::UNKNOWN_MEMBER_ID, member_id));
        }
        if let Some(w) = m.sync_waiter {
            let _ = w.send((code::UNKNOWN_MEMBER_ID, Vec::new()));
        }
        true
    }

    /// A LeaveGroup of one member (by id, or by static id when the id is
    /// empty); its error code, and the group to store when it emptied.
    pub fn leave(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        now: Instant,
    ) -> (i16, Option<SavedGroup>) {
        let id = if member_id.is_empty() {
            instance_id.and_then(|instance| {
                self.members
                    .iter()
                    .find(|(_, m)| m.instance_id.as_deref() == Some(instance))
                    .map(|(id, _)| id.clone())
            })
        } else {
            Some(member_id.to_string())
        };
        let Some(id) = id else {
            return (code::UNKNOWN_MEMBER_ID, None);
        };
        if !self.remove(&id) {
            return (code::UNKNOWN_MEMBER_ID, None);
        }
        (code::NONE, self.after_departure(now))
    }

    /// After members left or died: a new barrier, or an empty group.
    fn after_departure(&mut self, now: Instant) -> Option<SavedGroup> {
        if self.members.is_empty() {
            self.phase = Phase::Empty;
            self.rebalance_deadline = None;
            self.complete_not_before = None;
            self.leader.clear();
            self.protocol.clear();
            return Some(self.saved());
        }
        match self.phase {
            Phase::Stable | Phase::CompletingRebalance => self.prepare(now, None),
            Phase::PreparingRebalance => {
                self.try_complete(now);
            }
            Phase::Empty => {}
        }
        None
    }

    /// Removes members whose session ran out and ends a barrier whose time
    /// is up; the group to store when it emptied.
    pub fn tick(&mut self, now: Instant) -> Option<SavedGroup> {
        self.pending.retain(|_, until| *until > now);
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| {
                m.join_waiter.is_none()
                    && now.saturating_duration_since(m.last_seen) >= m.session_timeout
            })
            .map(|(id, _)| id.clone())
            .collect();
        let mut saved = None;
        if !expired.is_empty() {
            for id in &expired {
                tracing::info!(member = %id, "kafka group: a member's session expired");
                self.remove(id);
            }
            saved = self.after_departure(now);
        }
        if self.try_complete(now) && self.phase == Phase::Empty {
            saved = Some(self.saved());
        }
        saved
    }
}

/// A few random hex digits, so a member id is not guessed from the count.
fn random_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut x = u64::from(nanos) ^ (std::process::id() as u64) << 32;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    format!("{:08x}", x as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join(id: &str, version: i16) -> Join {
        Join {
            member_id: id.into(),
            instance_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout: Duration::from_secs(10),
            rebalance_timeout: Duration::from_secs(30),
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), vec![1]), ("sticky".into(), vec![2])],
            version,
        }
    }

    /// Joins `id` and returns the receiver of its answer.
    fn joined(g: &mut Group, j: Join, now: Instant) -> flume::Receiver<JoinAnswer> {
        let (tx, rx) = flume::bounded(1);
        assert!(g.join(j, tx, Duration::ZERO, now).is_none());
        rx
    }

    #[test]
    fn a_new_member_is_given_an_id_then_the_barrier_waits_for_everyone() {
        let t0 = Instant::now();
        let mut g = Group::new();
        let (tx, _rx) = flume::bounded(1);
        let first = g.join(join("", 5), tx, Duration::ZERO, t0).unwrap();
        assert_eq!(first.error, code::MEMBER_ID_REQUIRED);
        let a = joined(&mut g, join(&first.member_id, 5), t0);
        let answer = a.try_recv().unwrap();
        assert_eq!((answer.error, answer.generation), (code::NONE, 1));
        assert_eq!(answer.leader, first.member_id);
        assert_eq!(answer.members.len(), 1);
        // An id nobody was given is refused.
        let (tx, _rx) = flume::bounded(1);
        let bogus = g.join(join("made-up", 5), tx, Duration::ZERO, t0).unwrap();
        assert_eq!(bogus.error, code::UNKNOWN_MEMBER_ID);
        // The leader's assignment makes the group stable and is stored.
        let (tx, _rx) = flume::bounded(1);
        let (mine, saved) = g.sync(
            &first.member_id,
            1,
            vec![(first.member_id.clone(), vec![9])],
            tx,
            t0,
        );
        assert_eq!(mine, Some((code::NONE, vec![9])));
        assert_eq!(saved.unwrap().members[0].assignment, vec![9]);
        assert_eq!(g.phase, Phase::Stable);
        // A second member (v3: no id round) opens a barrier the first must
        // join; its heartbeat says so.
        let b = joined(&mut g, join("", 3), t0);
        assert!(
            b.try_recv().is_err(),
            "the barrier waits for the first member"
        );
        assert_eq!(
            g.heartbeat(&first.member_id, 1, t0),
            code::REBALANCE_IN_PROGRESS
        );
        let a = joined(&mut g, join(&first.member_id, 5), t0);
        let (a, b) = (a.try_recv().unwrap(), b.try_recv().unwrap());
        assert_eq!((a.generation, b.generation), (2, 2));
        assert_eq!(a.members.len(), 2, "the leader learns everyone");
        assert!(b.members.is_empty());
        assert_eq!(a.protocol, "range");
    }

    #[test]
    fn a_member_that_does_not_join_again_is_dropped_when_the_barrier_times_out() {
        let t0 = Instant::now();
        let mut g = Group::new();
        let a = joined(&mut g, join("", 3), t0).try_recv().unwrap();
        let b = joined(&mut g, join("", 3), t0);
        // `a` was a member: the barrier waits for it while it heartbeats
        // (told REBALANCE_IN_PROGRESS), then its rebalance timeout (30 s)
        // ends it without `a`.
        for s in [9, 18, 27] {
            let at = t0 + Duration::from_secs(s);
            assert_eq!(
                g.heartbeat(&a.member_id, 1, at),
                code::REBALANCE_IN_PROGRESS
            );
            assert!(g.tick(at).is_none());
            assert!(b.try_recv().is_err());
        }
        g.tick(t0 + Duration::from_secs(31));
        let b = b.try_recv().unwrap();
        assert_eq!(b.generation, 2);
        assert!(!g.members.contains_key(&a.member_id));
        assert_eq!(g.check(&a.member_id, 2), code::UNKNOWN_MEMBER_ID);
    }

    #[test]
    fn a_waiting_member_learns_the_leaders_assignment_and_a_dead_one_is_expired() {
        let t0 = Instant::now();
        let mut g = Group::new();
        let (tx, _) = flume::bounded(1);
        let a = g.join(join("", 3), tx, Duration::from_secs(1), t0);
        assert!(
            a.is_none(),
            "an empty group's first join waits the initial delay"
        );
        let b = joined(&mut g, join("", 3), t0);
        g.tick(t0 + Duration::from_secs(2));
        let b = b.try_recv().unwrap();
        let leader = b.leader.clone();
        let other = g.members.keys().find(|id| **id != leader).unwrap().clone();
        let (tx, waiting) = flume::bounded(1);
        let (now, saved) = g.sync(&other, 1, vec![], tx, t0);
        assert!(
            now.is_none() && saved.is_none(),
            "a follower waits for the leader"
        );
        let (tx, _) = flume::bounded(1);
        let assignments = vec![(leader.clone(), vec![1]), (other.clone(), vec![2])];
        g.sync(&leader, 1, assignments, tx, t0);
        assert_eq!(waiting.try_recv().unwrap(), (code::NONE, vec![2]));
        // A wrong generation is refused; the leader's session runs out.
        assert_eq!(g.heartbeat(&other, 7, t0), code::ILLEGAL_GENERATION);
        let later = t0 + Duration::from_secs(9);
        assert_eq!(g.heartbeat(&other, 1, later), code::NONE);
        g.tick(t0 + Duration::from_secs(11));
        assert!(!g.members.contains_key(&leader));
        assert_eq!(g.phase, Phase::PreparingRebalance);
        // The last member leaves: the group is empty and stored so.
        let (error, saved) = g.leave(&other, None, later);
        assert_eq!(error, code::NONE);
        assert!(saved.unwrap().members.is_empty());
        assert_eq!(g.phase, Phase::Empty);
    }

    #[test]
    fn a_member_of_another_protocol_type_or_without_a_common_protocol_is_refused() {
        let t0 = Instant::now();
        let mut g = Group::new();
        joined(&mut g, join("", 3), t0);
        let mut other = join("", 3);
        other.protocol_type = "connect".into();
        let (tx, _) = flume::bounded(1);
        assert_eq!(
            g.join(other, tx, Duration::ZERO, t0).unwrap().error,
            code::INCONSISTENT_GROUP_PROTOCOL
        );
        let mut other = join("", 3);
        other.protocols = vec![("roundrobin".into(), vec![])];
        let (tx, _) = flume::bounded(1);
        assert_eq!(
            g.join(other, tx, Duration::ZERO, t0).unwrap().error,
            code::INCONSISTENT_GROUP_PROTOCOL
        );
        // A stored group comes back stable, its sessions fresh.
        let restored = Group::restored(g.saved(), t0);
        assert_eq!(restored.phase, Phase::Stable);
        assert_eq!(restored.generation, g.generation);
    }
}
