//! A model test of replication's rules (issue 47): three copies of one
//! partition, the registry's state, and random interleavings of produces,
//! follower fetches, flushes, kill -9s, power losses, lost data
//! directories, lost partition directories, restarts, elections and ISR
//! changes — the empty-disk incarnation among them.
//!
//! The decisions are the broker's own functions: who may lead
//! ([`super::may_not_lead`]), what a restart writes
//! ([`PartitionState::on_restart`]), who is a live ISR copy
//! ([`PartitionState::copy_in_sync`]), elections, shrinks and expands, the
//! epochs file's divergence rule ([`Epochs::end_for`]) and the follower's
//! truncation rule ([`super::rules::truncation_refused`]). The tasks
//! around them (sockets, the registry's transactions, the flush timer) are
//! the model's: each step is one of them, atomic. The structure issue's
//! model test on the in-memory disk will drive the real tasks; this one
//! drives the rules, fast enough for thousands of schedules.
//!
//! After every step: every acknowledged message is held, at its offset, by
//! every ISR member whose copy is the one the ISR added (ground truth the
//! brokers cannot see: the model knows which directory is which); a copy
//! that leads is such a copy. After the faults stop and everything heals:
//! a leader serves, holding every acknowledged message, and the ISR is
//! whole again.
//!
//! `RINGLOG_REPLICA_MODEL_CASES` sets the number of schedules (10,000 by
//! default, about a second); `RINGLOG_REPLICA_MODEL_TRACE=SEED` prints one
//! schedule's steps. Each rule below was switched off in turn to see that
//! the test notices (design record 0016): leading on a copy the ISR does
//! not mean, leading an epoch an earlier run led, and a restart's hand-over
//! that takes the old leader out of the ISR each fail it; the others are a
//! second line behind those.

use super::epochs::Epochs;
use super::rules::truncation_refused;
use coordinator::replicas::PartitionState;
use protocol::types::BrokerId;
use std::collections::BTreeMap;

const BROKERS: [BrokerId; 3] = [1, 2, 3];
const MIN_INSYNC: usize = 2;

/// One message: who wrote it, in which epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Msg {
    id: u64,
    epoch: u32,
}

/// One broker and its copy.
#[derive(Debug, Clone)]
struct Copy {
    up: bool,
    /// The data directory's id (a new one when the disk is replaced).
    disk: u32,
    /// Ground truth: bumped whenever the copy's bytes are lost (a new
    /// disk, the partition directory removed).
    generation: u32,
    /// Lost since the last start: the partition's directory (with or
    /// without the data directory).
    lost_dir: bool,
    /// Lost since the last start: the whole data directory.
    lost_disk: bool,
    /// This run started on a new data directory.
    fresh: bool,
    /// The restart's change is not written yet (etcd did not answer): the
    /// control thread tries again at the next change of the live brokers.
    restart_pending: bool,
    /// This run's incarnation.
    run: u32,
    log: Vec<Msg>,
    flushed: usize,
    epochs: Epochs,
    /// The checkpointed high watermark (survives restarts).
    floor: usize,
    hw: usize,
    new_copy: bool,
    leading: Option<u32>,
    /// As leader: each follower's (fetch offset, flushed, run).
    progress: BTreeMap<BrokerId, (usize, usize, u32)>,
}

impl Copy {
    fn disk_id(&self) -> String {
        format!("disk-{}", self.disk)
    }
}

struct Model {
    copies: BTreeMap<BrokerId, Copy>,
    state: PartitionState,
    /// Ground truth: the generation of each ISR member's copy when the ISR
    /// took it in.
    isr_generation: BTreeMap<BrokerId, u32>,
    /// Acknowledged messages, by offset.
    acked: Vec<Msg>,
    next_id: u64,
    /// Truncations the follower rule refused.
    refused: u64,
    rng: u64,
}

impl Model {
    fn new(seed: u64, record_disks: bool) -> Model {
        let copies: BTreeMap<BrokerId, Copy> = BROKERS
            .iter()
            .map(|&b| {
                (
                    b,
                    Copy {
                        up: true,
                        disk: b * 100,
                        generation: 0,
                        lost_dir: false,
                        lost_disk: false,
                        fresh: false,
                        restart_pending: false,
                        run: 1,
                        log: Vec::new(),
                        flushed: 0,
                        epochs: Epochs::default(),
                        floor: 0,
                        hw: 0,
                        new_copy: false,
                        leading: None,
                        progress: BTreeMap::new(),
                    },
                )
            })
            .collect();
        // A topic record written before directories were recorded names
        // none: the copies must know by themselves.
        let disks = if record_disks {
            copies.iter().map(|(b, c)| (*b, c.disk_id())).collect()
        } else {
            BTreeMap::new()
        };
        Model {
            state: PartitionState::initial(&BROKERS, &disks),
            isr_generation: BROKERS.iter().map(|b| (*b, 0)).collect(),
            copies,
            acked: Vec::new(),
            next_id: 0,
            refused: 0,
            rng: seed | 1,
        }
    }

    fn below(&mut self, n: u64) -> u64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }

    fn live(&self, b: BrokerId) -> bool {
        self.copies[&b].up
    }

    /// The control thread's test (`live_isr_copy`): live, and the copy the
    /// ISR names as far as its registration and its own start can tell.
    fn live_isr_copy(&self, b: BrokerId) -> bool {
        let c = &self.copies[&b];
        if !c.up || (c.fresh && !self.state.disks.contains_key(&b)) {
            return false;
        }
        self.state.copy_in_sync(b, Some(&c.disk_id()))
    }

    /// Writes a new state: the ground truth follows the ISR.
    fn write(&mut self, next: PartitionState) {
        for b in &next.isr {
            if !self.state.in_sync(*b) {
                let generation = self.copies[b].generation;
                self.isr_generation.insert(*b, generation);
            }
        }
        self.isr_generation.retain(|b, _| next.isr.contains(b));
        if next.leader_epoch != self.state.leader_epoch || next.leader != self.state.leader {
            for c in self.copies.values_mut() {
                c.progress.clear();
            }
        }
        self.state = next;
        for (b, c) in self.copies.iter_mut() {
            if c.new_copy && self.state.incarnations.get(b) == Some(&c.run.to_string()) {
                c.new_copy = false;
            }
            if c.leading.is_some_and(|e| e != self.state.leader_epoch) || self.state.leader != *b {
                c.leading = None;
            }
        }
    }

    fn leader_copy(&self) -> Option<BrokerId> {
        let l = self.state.leader;
        (self.copies[&l].up && self.copies[&l].leading == Some(self.state.leader_epoch))
            .then_some(l)
    }

    /// The replica's role step: lead when allowed, else propose what
    /// `leave_as_new_copy` / `epoch_to_lead` propose.
    fn role_step(&mut self, b: BrokerId) {
        let c = &self.copies[&b];
        if !c.up || self.state.leader != b || c.leading == Some(self.state.leader_epoch) {
            return;
        }
        let disk = c.disk_id();
        match super::may_not_lead(&self.state, b, &disk, c.new_copy, c.epochs.last_epoch()) {
            None => {
                let epoch = self.state.leader_epoch;
                let c = self.copies.get_mut(&b).expect("copy");
                let start = if epoch == 0 && c.epochs.last().is_none() {
                    0
                } else {
                    c.log.len() as u64
                };
                c.epochs.assign(epoch, start);
                c.leading = Some(epoch);
                c.progress.clear();
                assert!(
                    self.copies[&b].generation == self.isr_generation[&b],
                    "broker {b} leads on a copy the ISR did not add: {:?}",
                    self.state
                );
            }
            Some(_) => {
                let live: Vec<BrokerId> =
                    BROKERS.iter().copied().filter(|x| self.live(*x)).collect();
                if !super::is_isr_copy(&self.state, b, &disk, c.new_copy) {
                    if let Some(next) = self.state.leave_as_new_disk(b, &|x| live.contains(&x)) {
                        self.write(next);
                    }
                } else {
                    let mut next = self.state.clone();
                    next.leader_epoch =
                        (c.epochs.last_epoch().max(0) as u32).max(self.state.leader_epoch) + 1;
                    self.write(next);
                }
            }
        }
    }

    /// A follower that is not the ISR's copy leaves by itself.
    fn leave_step(&mut self, b: BrokerId) {
        let c = &self.copies[&b];
        if !c.up || self.state.leader == b {
            return;
        }
        if self.state.in_sync(b) && !super::is_isr_copy(&self.state, b, &c.disk_id(), c.new_copy) {
            let live: Vec<BrokerId> = BROKERS.iter().copied().filter(|x| self.live(*x)).collect();
            if let Some(next) = self.state.leave_as_new_disk(b, &|x| live.contains(&x)) {
                self.write(next);
            }
        }
    }

    fn produce(&mut self) {
        let Some(l) = self.leader_copy() else { return };
        let msg = Msg {
            id: self.next_id,
            epoch: self.state.leader_epoch,
        };
        self.next_id += 1;
        self.copies.get_mut(&l).expect("copy").log.push(msg);
    }

    /// One follower fetch, answered by the leader: a diverging answer, or
    /// the next message; the leader's progress and high watermark move.
    fn fetch(&mut self, f: BrokerId) {
        let Some(l) = self.leader_copy() else { return };
        if f == l || !self.copies[&f].up {
            return;
        }
        let (leader_end, leader_epochs, leader_log) = {
            let c = &self.copies[&l];
            (c.log.len() as u64, c.epochs.clone(), c.log.clone())
        };
        // A follower flushes what it appended before it fetches again
        // (`follower::apply` awaits the flush: acks=all counts flushed
        // copies); a crash in between loses only what it never reported.
        let follower = self.copies.get_mut(&f).expect("copy");
        follower.flushed = follower.log.len();
        let follower = &self.copies[&f];
        let offset = follower.log.len() as u64;
        let last = follower.epochs.last_epoch();
        let mut diverging = None;
        if last >= 0 {
            let (epoch, end) = leader_epochs.end_for(last, leader_end);
            if epoch < last || end < offset {
                diverging = Some((epoch.max(0), end.min(offset)));
            }
        }
        if diverging.is_none() && offset > leader_end {
            diverging = Some((leader_epochs.last_epoch().max(0), leader_end));
        }
        let epoch = self.state.leader_epoch;
        if let Some((epoch_asked, leader_end)) = diverging {
            let c = self.copies.get_mut(&f).expect("copy");
            let own_end = c.epochs.end_for(epoch_asked, c.log.len() as u64).1;
            let target = leader_end.min(own_end);
            if truncation_refused(target, c.floor as u64, c.epochs.last_epoch(), epoch).is_some() {
                self.refused += 1;
                return;
            }
            let target = target as usize;
            c.log.truncate(target);
            c.flushed = c.flushed.min(target);
            c.hw = c.hw.min(target);
            c.floor = c.floor.min(target);
            c.epochs.truncate(target as u64);
            return;
        }
        // Record the progress the fetch reports, then answer.
        let (flushed, run) = (follower.flushed, follower.run);
        self.copies
            .get_mut(&l)
            .expect("copy")
            .progress
            .insert(f, (offset as usize, flushed, run));
        self.update_high_watermark(l);
        let hw = self.copies[&l].hw;
        let c = self.copies.get_mut(&f).expect("copy");
        if (offset as usize) < leader_log.len() {
            let msg = leader_log[offset as usize];
            let chunk_epoch = leader_epochs.epoch_at(offset);
            if chunk_epoch >= 0 {
                c.epochs.assign(chunk_epoch as u32, offset);
            }
            c.log.push(msg);
        }
        c.hw = c.hw.max(hw.min(c.log.len()));
        c.floor = c.floor.max(c.hw);
    }

    /// The leader's high watermark over the ISR (min ISR strict), and the
    /// acknowledgements it allows.
    fn update_high_watermark(&mut self, l: BrokerId) {
        if self.state.isr.len() < MIN_INSYNC {
            return;
        }
        let c = &self.copies[&l];
        let mut hw = c.flushed;
        for m in &self.state.isr {
            if *m == l {
                continue;
            }
            match c.progress.get(m) {
                Some((_, flushed, _)) => hw = hw.min(*flushed),
                None => return,
            }
        }
        let c = self.copies.get_mut(&l).expect("copy");
        if hw > c.hw {
            c.hw = hw;
            c.floor = c.floor.max(hw);
            for (offset, msg) in c.log[..hw].iter().enumerate() {
                if offset < self.acked.len() {
                    assert_eq!(
                        self.acked[offset], *msg,
                        "offset {offset} acknowledged twice with different messages"
                    );
                } else {
                    self.acked.push(*msg);
                }
            }
        }
    }

    /// The leader's ISR change: who leaves, else who joins.
    fn isr_step(&mut self) {
        let Some(l) = self.leader_copy() else { return };
        let leaving: Vec<BrokerId> = self
            .state
            .isr
            .iter()
            .copied()
            .filter(|m| *m != l)
            .filter(|m| {
                let c = &self.copies[m];
                let restarted = self.copies[&l]
                    .progress
                    .get(m)
                    .is_some_and(|(_, _, run)| *run != c.run);
                !c.up || restarted || !self.state.copy_in_sync(*m, Some(&c.disk_id()))
            })
            .collect();
        if !leaving.is_empty() {
            let next = self.state.shrink(&leaving);
            self.write(next);
            return;
        }
        let hw = self.copies[&l].hw;
        let epoch_start = self.copies[&l].epochs.last().map_or(0, |(_, s)| s as usize);
        let joining = self.copies[&l]
            .progress
            .iter()
            .find(|(b, (end, flushed, run))| {
                !self.state.in_sync(**b)
                    && self.copies[b].up
                    && *run == self.copies[b].run
                    && *end >= hw.max(epoch_start)
                    && *flushed >= hw
            })
            .map(|(b, _)| *b);
        if let Some(b) = joining {
            let c = &self.copies[&b];
            let next = self.state.expand(b, &c.run.to_string(), &c.disk_id());
            self.write(next);
        }
    }

    /// The control thread's election on a live broker with a copy.
    fn elect(&mut self, b: BrokerId) {
        if !self.live_isr_copy(b)
            || self.copies[&b].new_copy
            || self.live_isr_copy(self.state.leader)
        {
            return;
        }
        if let Some(next) = self.state.elect(b) {
            self.write(next);
        }
    }

    /// kill -9 (the page cache survives) or a power loss (what was not
    /// flushed is gone).
    fn crash(&mut self, b: BrokerId, power_loss: bool) {
        let c = self.copies.get_mut(&b).expect("copy");
        c.up = false;
        c.leading = None;
        c.progress.clear();
        c.hw = 0;
        if power_loss {
            // The log loses what was not flushed; the epochs file, written
            // durably before the first byte of an epoch, keeps its entries
            // (as the broker's, which is not cut at start).
            let keep = c.flushed;
            c.log.truncate(keep);
        }
    }

    /// A down broker's data directory replaced (`whole`), or its
    /// partition's directory removed.
    fn lose(&mut self, b: BrokerId, whole: bool) {
        let c = self.copies.get_mut(&b).expect("copy");
        assert!(!c.up);
        c.log.clear();
        c.flushed = 0;
        c.floor = 0;
        c.epochs = Epochs::default();
        c.generation += 1;
        c.lost_dir = true;
        if whole {
            c.disk += 1;
            c.lost_disk = true;
        }
    }

    /// A restart: recovery, the copy's own start, the control thread's
    /// restart change.
    fn restart(&mut self, b: BrokerId) {
        {
            let c = self.copies.get_mut(&b).expect("copy");
            c.up = true;
            c.run += 1;
            // The marker in the partition directory keeps a new copy new
            // across restarts until a leader adds it.
            c.new_copy = c.new_copy || c.lost_dir;
            c.fresh = c.lost_disk;
            c.lost_dir = false;
            c.lost_disk = false;
            c.flushed = c.log.len();
            c.hw = 0;
            c.restart_pending = true;
        }
        // Its registry write may fail: the copy runs meanwhile, and only
        // its own rules keep it from leading on what it does not hold.
        if self.below(2) == 0 {
            self.restart_change(b);
        }
    }

    /// The control thread's restart change (`restart_replicas`), once it
    /// can be written.
    fn restart_change(&mut self, b: BrokerId) {
        if !self.copies[&b].up || !self.copies[&b].restart_pending {
            return;
        }
        self.copies.get_mut(&b).expect("copy").restart_pending = false;
        let new_disk =
            self.state.in_sync(b) && (!self.live_isr_copy(b) || self.copies[&b].new_copy);
        let live: Vec<BrokerId> = BROKERS.iter().copied().filter(|x| self.live(*x)).collect();
        let copies: Vec<BrokerId> = BROKERS
            .iter()
            .copied()
            .filter(|x| self.live_isr_copy(*x))
            .collect();
        if let Some(next) = self
            .state
            .on_restart(b, new_disk, &|x| copies.contains(&x), &|x| {
                live.contains(&x)
            })
        {
            self.write(next);
        }
    }

    /// Every acknowledged message is held by every ISR member whose copy
    /// is the one the ISR added.
    fn check(&self, step: &str) {
        for b in &self.state.isr {
            let c = &self.copies[b];
            if self.isr_generation.get(b) != Some(&c.generation) {
                continue;
            }
            assert!(
                c.log.len() >= self.acked.len() && c.log[..self.acked.len()] == self.acked[..],
                "after {step}: broker {b}, an ISR member, lacks acknowledged messages: holds {:?}, acknowledged {:?}; state {:?}",
                c.log.iter().map(|m| m.id).collect::<Vec<_>>(),
                self.acked.iter().map(|m| m.id).collect::<Vec<_>>(),
                self.state
            );
        }
    }

    /// One random step; faults only while `faults`.
    fn step(&mut self, faults: bool) -> String {
        let b = BROKERS[self.below(3) as usize];
        match self.below(100) {
            0..=24 => {
                self.produce();
                "produce".into()
            }
            25..=59 => {
                self.fetch(b);
                format!("fetch by {b}")
            }
            60..=67 => {
                let c = self.copies.get_mut(&b).expect("copy");
                if c.up {
                    c.flushed = c.log.len();
                }
                format!("flush on {b}")
            }
            68..=71 => {
                self.restart_change(b);
                format!("restart change of {b} written")
            }
            72..=83 => {
                self.role_step(b);
                self.leave_step(b);
                self.isr_step();
                format!("role and ISR step of {b}")
            }
            84..=89 => {
                self.elect(b);
                format!("election by {b}")
            }
            90..=95 if !self.copies[&b].up => {
                self.restart(b);
                format!("restart of {b}")
            }
            96..=99 if faults => self.fault(b),
            _ => "nothing".into(),
        }
    }

    /// One fault: a crash, a lost copy, a power loss of every broker, or
    /// the outside test's power loss with the leader's copy lost.
    fn fault(&mut self, b: BrokerId) -> String {
        let all_up = self.copies.values().all(|c| c.up);
        match self.below(4) {
            0 if self.copies[&b].up => {
                let power = self.below(2) == 0;
                self.crash(b, power);
                format!("crash of {b} (power loss: {power})")
            }
            1 if !self.copies[&b].up && self.may_lose(b) => {
                let whole = self.below(2) == 0;
                self.lose(b, whole);
                format!(
                    "{b} lost its {}",
                    if whole {
                        "data directory"
                    } else {
                        "partition directory"
                    }
                )
            }
            2 if all_up => {
                for x in BROKERS {
                    self.crash(x, true);
                }
                "power loss of every broker".into()
            }
            3 if all_up => {
                let leader = self.state.leader;
                for x in BROKERS {
                    self.crash(x, true);
                }
                let whole = self.below(2) == 0;
                let lost = self.may_lose(leader);
                if lost {
                    self.lose(leader, whole);
                }
                self.restart(leader);
                format!("power loss, leader {leader}'s copy lost: {lost} (whole disk: {whole}), it starts first")
            }
            _ => "nothing".into(),
        }
    }

    /// A copy may be lost while another ISR member holds the ISR's copy:
    /// losing every copy of committed bytes is not a fault any rule can
    /// survive.
    fn may_lose(&self, b: BrokerId) -> bool {
        self.state
            .isr
            .iter()
            .any(|m| *m != b && self.isr_generation.get(m) == Some(&self.copies[m].generation))
    }

    /// Everything heals: every broker up, the tasks run until the
    /// partition is served by a leader holding every acknowledged message
    /// and the ISR is whole.
    fn heal(&mut self, seed: u64) {
        for b in BROKERS {
            if !self.copies[&b].up {
                self.restart(b);
            }
        }
        for _ in 0..2_000 {
            for b in BROKERS {
                self.restart_change(b);
                self.role_step(b);
                self.leave_step(b);
                self.elect(b);
                let c = self.copies.get_mut(&b).expect("copy");
                c.flushed = c.log.len();
                self.fetch(b);
            }
            self.isr_step();
            self.check("healing");
            if self.leader_copy().is_some() && self.state.isr.len() == 3 {
                let l = self.state.leader;
                let log = &self.copies[&l].log;
                if BROKERS.iter().all(|b| self.copies[b].log == *log) {
                    assert!(
                        log.len() >= self.acked.len() && log[..self.acked.len()] == self.acked[..]
                    );
                    return;
                }
            }
        }
        panic!(
            "seed {seed}: not healed: state {:?}, copies {:?}",
            self.state,
            self.copies
                .iter()
                .map(|(b, c)| (*b, c.up, c.log.len(), c.new_copy, c.leading))
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn replication_rules_keep_every_acknowledged_message_through_lost_disks_and_power_losses() {
    let cases: u64 = std::env::var("RINGLOG_REPLICA_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let (mut acked, mut refused, mut steps) = (0usize, 0u64, 0u64);
    for seed in 1..=cases {
        let mut model = Model::new(seed * 0x9e37_79b9, seed % 4 != 0);
        let trace =
            std::env::var("RINGLOG_REPLICA_MODEL_TRACE").is_ok_and(|s| s == seed.to_string());
        for _ in 0..400 {
            let what = model.step(true);
            if trace {
                eprintln!(
                    "{what}: {:?} {:?}",
                    model.state,
                    model
                        .copies
                        .iter()
                        .map(|(b, c)| (
                            *b,
                            c.up,
                            c.log.len(),
                            c.new_copy,
                            c.generation,
                            c.restart_pending
                        ))
                        .collect::<Vec<_>>()
                );
            }
            model.check(&format!("seed {seed}: {what}"));
            steps += 1;
        }
        model.heal(seed);
        acked += model.acked.len();
        refused += model.refused;
    }
    eprintln!(
        "replica model: {cases} cases, {steps} steps, {acked} messages acknowledged, all kept; {refused} truncations below the high watermark refused"
    );
    assert!(acked > 0);
}
