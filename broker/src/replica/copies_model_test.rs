//! Replication on the in-memory disk, checked after every step (issue 42,
//! item 1): three brokers, each with its own [`MemoryStorage`], the
//! broker's own [`Replica`], log, epochs file, leader and follower code
//! ([`Replica::follower_fetch`], [`read_for_follower`], [`apply`],
//! [`replicated`], [`Replica::isr_change`], [`Replica::learn`]), and an
//! in-memory registry that takes compare-and-set writes as etcd does.
//!
//! Where `model_test.rs` replays the rules over a list of messages, this
//! test runs the code that moves the bytes: the messages are real message
//! sets, a follower's chunk is read from the leader's segment files (cut
//! at any byte), its append and flush are the log's tasks, polled one
//! await point at a time, and a crash is the disk's: a `kill -9` keeps
//! what was written, a power cut keeps what was flushed and tears the
//! active segment's unsynced tail (intact, zeroed or flipped). Between
//! them: produces with acks=all, follower fetches, leaders' checks (high
//! watermark, ISR shrink and expand), the registry's news reaching each
//! broker late, a broker's lease lost while it runs (a pause) and found
//! again, elections by the control thread, restarts with a new
//! incarnation, time passing, and a failback's cut (`cut.rs`: the leader
//! cuts committed bytes on purpose and leads a new epoch from the cut;
//! what was committed and acknowledged past it is dropped from the
//! model, and no leader after it may hold the cut history again).
//!
//! After every step:
//! - the registry's leader epoch never goes back, no epoch is led by two
//!   brokers or two runs, and each copy's epochs rise in both fields;
//! - a leader's high watermark never goes back while it leads;
//! - *committed* — the bytes below the greatest high watermark any leader
//!   has published — never changes: every later leader's bytes agree
//!   with it, and every running ISR member holds all of it (so nothing
//!   below it was ever truncated from one);
//! - no copy believes more is committed than a leader published;
//! - two copies agree byte for byte wherever both say one epoch wrote the
//!   bytes (the log-matching property: below their common end, a
//!   difference is only ever in bytes of different epochs, which the
//!   divergence rule removes);
//! - an acknowledged produce's bytes are committed, at their offsets.
//!
//! Then every fault heals, and the copies must converge: a leader, the
//! whole ISR, the high watermark at the end, three byte-identical logs
//! holding every acknowledged message.
//!
//! Not here (covered elsewhere): lost disks and partition directories
//! (`model_test.rs`, the nemesis), handovers and moves, write-caching
//! topics (they trade durability by design), retention.
//!
//! `RINGLOG_COPIES_MODEL_CASES` sets the number of cases (5,000 by
//! default, about 5 s; a third calm, a third with faults in 8% of the
//! steps, a third in 20%); `RINGLOG_COPIES_MODEL_TRACE=SEED` prints one
//! case's steps.
//!
//! What it found (design record 0012, "the model test on the in-memory
//! disk"): an acks=all produce was acknowledged by a high watermark of a
//! later epoch — the epoch was read after the leader's own flush, and a
//! copy that lost its leadership during the flush, was truncated as a
//! follower and elected again answered "stored" for bytes another leader
//! had replaced; and a leader whose recovery kept a damaged message above
//! its committed floor (a power cut's flipped byte with intact messages
//! after it) stalled its followers for good. Switching off, one at a
//! time, the epoch start in the ISR's expand rule, the high watermark's
//! wait for members not heard from, the one-epoch-per-chunk read, or the
//! divergence check fails it too. So does a failback cut whose new epoch
//! keeps the followers in the ISR: the leader's death hands the partition
//! a follower that still holds the cut history (found at once, case 19).

#![allow(
    clippy::too_many_lines,
    reason = "a model test's steps and checks read top to bottom"
)]

use super::apply::{apply, Applied, ApplyError};
use super::epochs::Epochs;
use super::leader::{follower_offsets, read_for_follower, replicated, NotReplicated};
use super::rules::FollowerRead;
use super::{Replica, SharedReplica};
use crate::storage::io::{SegmentFile, Storage};
use crate::storage::memory::{MemoryStorage, PowerCut, Tail};
use crate::storage::partition_log::{self, LogSettings, PartitionLog, Shared};
use crate::storage::producers::Sequenced;
use coordinator::replicas::{PartitionState, Versioned};
use protocol::batch::produce::{stamp, Stamp};
use protocol::batch::write::{BatchWriter, Producer};
use protocol::codec::multi_fetch::FetchedPart;
use protocol::codec::AckMode;
use protocol::message::encode_message;
use protocol::stored::MessageFormat;
use protocol::types::BrokerId;
use protocol::ErrorCode;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

const BROKERS: [BrokerId; 3] = [1, 2, 3];
const DIR: &str = "/data/t-0";
const MIN_INSYNC: u32 = 2;
/// `replica_lag_time_max_ms`.
const LAG_MAX: Duration = Duration::from_millis(3_000);
/// Steps of one case before the faults stop.
const STEPS: usize = 200;

type Pending<T> = Pin<Box<dyn Future<Output = T>>>;

/// An acks=all produce waiting for its answer.
struct Produce {
    /// Its messages' offset and bytes, as appended.
    base: u64,
    bytes: Vec<u8>,
    answer: Pending<Result<(), String>>,
    /// An idempotent producer's retry answered with the offsets it was
    /// stored at: `bytes` is the batch as sent (its leader stamped the
    /// stored one in an epoch the model does not know).
    duplicate: bool,
    /// The leader epoch it was appended in.
    epoch: u32,
}

/// The model's idempotent producer (format 2): its id.
const PRODUCER_ID: i64 = 4242;

/// One broker: its disk, and while it runs, its copy.
struct Node {
    id: BrokerId,
    storage: MemoryStorage,
    up: bool,
    /// Its lease is live in the registry (false: paused past it).
    registered: bool,
    run: u32,
    replica: Option<SharedReplica<MemoryStorage>>,
    /// A follower's answer being applied: its next fetch waits for it.
    applying: Option<Pending<Result<(), ApplyError>>>,
    producing: Vec<Produce>,
    /// The high watermark it last had while leading: (run, epoch, hw).
    led_hw: Option<(u32, u32, u64)>,
}

impl Node {
    fn incarnation(&self) -> String {
        format!("run-{}", self.run)
    }

    fn live(&self) -> bool {
        self.up && self.registered
    }
}

/// The follower's bookkeeping the shard does (the flush timer's list,
/// metrics): the test ticks every log itself.
struct NoBookkeeping;

impl Applied<MemoryStorage> for NoBookkeeping {
    fn touched(&self, _log: &Shared<MemoryStorage>, _bytes: u64) {}
}

struct Cluster {
    nodes: Vec<Node>,
    /// The registry's partition state, with its revision.
    registry: Versioned,
    settings: LogSettings,
    /// The committed bytes: below the greatest high watermark a leader
    /// has published.
    committed: Vec<u8>,
    /// Who led each epoch: (broker, run).
    led: BTreeMap<u32, (BrokerId, u32)>,
    acked: Vec<(u64, Vec<u8>)>,
    next_message: u64,
    rng: u64,
    trace: bool,
    /// Percent of steps that are faults.
    storm: u64,
    /// Truncations refused, fetches refused (counted, for the summary).
    refusals: u64,
    /// Format 2: the batches the idempotent producer sent, as sent (a
    /// produce may send one of the last five again), and its next
    /// sequence.
    numbered: Vec<Vec<u8>>,
    next_sequence: i32,
    /// Retries answered as duplicates (for the summary).
    duplicates: u64,
    /// The epoch of the last failback cut (0: none): copies of older
    /// epochs hold the history it cut until they cut theirs.
    cut_epoch: u32,
    /// Every failback cut: its epoch and where it was made.
    cut_log: Vec<(u32, u64)>,
    /// Failback cuts made (for the summary).
    cuts: u64,
}

fn noop_poll<T>(future: &mut Pending<T>) -> Poll<T> {
    let mut cx = Context::from_waker(Waker::noop());
    future.as_mut().poll(&mut cx)
}

fn dir() -> &'static Path {
    Path::new(DIR)
}

/// A copy's written bytes from offset 0 (no retention here), read from
/// its segment files.
fn written_bytes(storage: &MemoryStorage, log: &Shared<MemoryStorage>) -> Vec<u8> {
    let written = log.borrow().written_offset();
    let mut segments: Vec<(u64, String)> = storage
        .list(dir())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| {
            let base = e.name.strip_suffix(".log")?.parse::<u64>().ok()?;
            Some((base, e.name))
        })
        .collect();
    segments.sort();
    let mut bytes = Vec::new();
    for (base, name) in segments {
        if base as usize != bytes.len() {
            // A segment the log rolled past an empty one, or recovery's
            // leftovers: the log's own offsets decide.
            bytes.resize(base as usize, 0);
        }
        bytes.extend(storage.contents(&dir().join(name)).unwrap_or_default());
    }
    bytes.truncate(written as usize);
    bytes
}

impl Cluster {
    fn new(seed: u64, trace: bool) -> Cluster {
        let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut below = |n: u64| {
            rng ^= rng >> 12;
            rng ^= rng << 25;
            rng ^= rng >> 27;
            rng.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
        };
        let format = [MessageFormat::One, MessageFormat::Two][below(2) as usize];
        let settings = LogSettings {
            segment_bytes: 150 + below(1_500),
            flush_messages: 1_000_000,
            flush_interval_ms: [3_600_000, 50][below(2) as usize],
            retention_ms: 7 * 24 * 3_600_000,
            retention_bytes: 0,
            waiting_fetch_flush: None,
            // Half the cases store format-2 batches, stamped by the leader,
            // half of those with the leader's append time.
            format,
            timestamps: match (format, below(2)) {
                (MessageFormat::Two, 1) => protocol::batch::TimestampType::LogAppend,
                _ => protocol::batch::TimestampType::Create,
            },
            producers_max: 1000,
        };
        let mut cluster = Cluster {
            nodes: BROKERS
                .iter()
                .map(|&id| Node {
                    id,
                    storage: MemoryStorage::new(),
                    up: false,
                    registered: false,
                    run: 0,
                    replica: None,
                    applying: None,
                    producing: Vec::new(),
                    led_hw: None,
                })
                .collect(),
            registry: Versioned {
                state: PartitionState::initial(&BROKERS, &BTreeMap::new()),
                revision: 1,
            },
            settings,
            committed: Vec::new(),
            led: BTreeMap::new(),
            acked: Vec::new(),
            next_message: 0,
            storm: [3, 8, 20][(seed % 3) as usize],
            rng,
            trace,
            refusals: 0,
            numbered: Vec::new(),
            next_sequence: 0,
            duplicates: 0,
            cut_epoch: 0,
            cut_log: Vec::new(),
            cuts: 0,
        };
        for i in 0..BROKERS.len() {
            cluster.start(i);
        }
        cluster
    }

    fn below(&mut self, n: u64) -> u64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }

    /// The brokers whose lease is live.
    fn live(&self) -> Vec<BrokerId> {
        self.nodes
            .iter()
            .filter(|n| n.live())
            .map(|n| n.id)
            .collect()
    }

    fn index(&self, broker: BrokerId) -> usize {
        self.nodes
            .iter()
            .position(|n| n.id == broker)
            .expect("node")
    }

    fn say(&self, what: impl FnOnce() -> String) {
        if self.trace {
            eprintln!("{}", what());
        }
    }

    /// A compare-and-set write to the registry, as the control thread's:
    /// the state written, or the one there now.
    fn write(&mut self, expected: i64, next: PartitionState) -> Versioned {
        if expected != self.registry.revision {
            return self.registry.clone();
        }
        assert!(
            next.leader_epoch >= self.registry.state.leader_epoch,
            "the leader epoch went back: {:?} after {:?}",
            next,
            self.registry.state
        );
        self.say(|| format!("  registry: {next:?}"));
        self.registry = Versioned {
            state: next,
            revision: self.registry.revision + 1,
        };
        self.registry.clone()
    }

    /// A broker starts (again): its log recovered, its epochs read, a new
    /// incarnation; the control thread writes what a restart changes
    /// (`PartitionState::on_restart`); the copy learns the registry.
    fn start(&mut self, i: usize) {
        let settings = self.settings;
        let node = &mut self.nodes[i];
        node.run += 1;
        node.up = true;
        node.registered = true;
        let storage = node.storage.clone();
        let (mut log, recovered) = storage
            .block_on(PartitionLog::open(storage.clone(), dir(), "t-0", settings))
            .unwrap_or_else(|e| panic!("opening broker {}'s copy: {e}", node.id));
        // Nothing is visible until the leader says what is committed.
        log.set_high_watermark(0);
        let log = Rc::new(RefCell::new(log));
        storage
            .block_on(partition_log::cut_uncommitted_damage(
                &log,
                recovered.first_damaged,
            ))
            .unwrap_or_else(|e| panic!("cutting broker {}'s damaged tail: {e}", node.id));
        let epochs = Epochs::load(&storage, dir());
        let mut replica = Replica::new(
            "t",
            "topic-id",
            0,
            PartitionState::initial(&BROKERS, &BTreeMap::new()),
            BROKERS.to_vec(),
            MIN_INSYNC,
            node.id,
            log,
            epochs,
        );
        replica.disk = format!("disk-{}", node.id);
        replica.run = node.incarnation();
        node.replica = Some(Rc::new(RefCell::new(replica)));
        let me = node.id;
        let live = self.live();
        let current = self.registry.clone();
        let change = current.state.on_restart(
            me,
            false,
            &|b| live.contains(&b) && current.state.in_sync(b),
            &|b| live.contains(&b),
        );
        if let Some(next) = change {
            self.write(current.revision, next);
        }
        self.learn(i);
    }

    /// The broker dies: `kill -9`, or a power cut that tears the active
    /// segment's unsynced tail.
    fn crash(&mut self, i: usize, power: Option<(u16, Tail)>) {
        let node = &mut self.nodes[i];
        // The newest segment is the one being appended to.
        let active = node
            .storage
            .list(dir())
            .unwrap_or_default()
            .into_iter()
            .map(|e| e.name)
            .filter(|n| n.ends_with(".log"))
            .max()
            .map(|n| dir().join(n));
        node.applying = None;
        node.producing.clear();
        node.replica = None;
        node.up = false;
        node.registered = false;
        node.led_hw = None;
        node.storage
            .crash(power.map(|(kept_per_mille, tail)| PowerCut {
                kept_per_mille,
                tail,
                torn: active,
            }));
    }

    /// The copy learns the registry's state (its watch's news arrives).
    fn learn(&mut self, i: usize) {
        let state = self.registry.clone();
        if let Some(replica) = &self.nodes[i].replica {
            replica.borrow_mut().learn(state);
        }
    }

    /// The control thread's election, when the leader's lease is gone: a
    /// live ISR member takes over.
    fn elect(&mut self, pick: usize) {
        let state = self.registry.clone();
        let leader = self.index(state.state.leader);
        if self.nodes[leader].live() {
            return;
        }
        let candidates: Vec<BrokerId> = state
            .state
            .isr
            .iter()
            .copied()
            .filter(|b| self.nodes[self.index(*b)].live())
            .collect();
        if candidates.is_empty() {
            return;
        }
        let candidate = candidates[pick % candidates.len()];
        if let Some(next) = state.state.elect(candidate) {
            self.write(state.revision, next);
        }
    }

    /// A leader's check (`tasks::run_leaders`): its high watermark, and the
    /// change it proposes, written as a compare-and-set and learned back.
    fn leader_check(&mut self, i: usize) {
        let Some(replica) = self.nodes[i].replica.clone() else {
            return;
        };
        let now = self.nodes[i].storage.now();
        let live = self.live();
        let registered: BTreeMap<BrokerId, (String, String)> = self
            .nodes
            .iter()
            .filter(|n| n.live())
            .map(|n| (n.id, (n.incarnation(), format!("disk-{}", n.id))))
            .collect();
        let change = {
            let mut r = replica.borrow_mut();
            let again = r
                .leave_as_new_copy(&|b| live.contains(&b))
                .or_else(|| r.epoch_to_lead());
            match again {
                Some(state) => Some(state),
                None if r.leads() => {
                    r.update_high_watermark();
                    r.isr_change(now, LAG_MAX, &|b| live.contains(&b), &|b| {
                        registered.get(&b).cloned()
                    })
                }
                None => None,
            }
        };
        let Some(next) = change else { return };
        if !self.nodes[i].registered {
            // Its control thread cannot reach the registry.
            return;
        }
        let expected = {
            let mut r = replica.borrow_mut();
            r.proposed = Some(next.clone());
            r.state.revision
        };
        let learned = self.write(expected, next);
        let mut r = replica.borrow_mut();
        r.proposed = None;
        r.learn(learned);
    }

    /// An acks=all produce at broker `i`, if it leads and may take writes.
    fn produce(&mut self, i: usize, count: usize) {
        let Some(replica) = self.nodes[i].replica.clone() else {
            return;
        };
        {
            let r = replica.borrow();
            // check_leader, check_lease and check_insync.
            if !r.leads()
                || !self.nodes[i].registered
                || (r.state.state.isr.len() as u32) < r.min_insync
            {
                return;
            }
        }
        let (log, epoch) = {
            let r = replica.borrow();
            (r.log.clone(), r.epoch())
        };
        let mut bytes = Vec::new();
        if self.settings.format == MessageFormat::Two {
            // One batch from the idempotent producer: a new one, or (one
            // time in four) one of its last five sent again, as a
            // producer whose answer was lost does.
            let sent = self.numbered.len();
            if sent > 0 && self.below(4) == 0 {
                let back = self.below(sent.min(5) as u64) as usize;
                bytes = self.numbered[sent - 1 - back].clone();
            } else {
                let mut writer = BatchWriter::new();
                for _ in 0..count {
                    writer.push(0, None, Some(&self.next_value()), &[]);
                }
                bytes = writer.finish(Producer {
                    id: PRODUCER_ID,
                    epoch: 0,
                    base_sequence: self.next_sequence,
                });
                self.next_sequence += count as i32;
                self.numbered.push(bytes.clone());
            }
            let header = protocol::batch::BatchHeader::read(&bytes).expect("a batch");
            let numbered = protocol::batch::sequence::Numbered::of(&header).expect("numbered");
            let sequenced = log.borrow().producers().check(numbered);
            match sequenced {
                Ok(Sequenced::New) => {}
                Ok(Sequenced::Duplicate { base, end }) => {
                    self.say(|| format!("  produce again: stored at {base}..{end}"));
                    let appended =
                        partition_log::appended_before(&log, base, end, AckMode::Flushed);
                    self.wait_for_answer(i, &replica, appended, epoch, bytes, true);
                    return;
                }
                Err(error) => {
                    self.say(|| format!("  produce refused: {error}"));
                    return;
                }
            }
        } else {
            for _ in 0..count {
                encode_message(&mut bytes, None, &self.next_value());
            }
        }
        let records = match self.settings.format {
            MessageFormat::One => count as u32,
            MessageFormat::Two => {
                protocol::batch::BatchHeader::read(&bytes).map_or(0, |h| h.record_count as u32)
            }
        };
        let Ok(appended) = partition_log::append(&log, &bytes, records, AckMode::Flushed) else {
            return;
        };
        if self.settings.format == MessageFormat::Two {
            // What the leader stores: each batch at its position, in its
            // epoch, at its disk's time under LogAppendTime (the model
            // stamps its own copy to compare with).
            let append_time = (self.settings.timestamps
                == protocol::batch::TimestampType::LogAppend)
                .then(|| self.nodes[i].storage.time_ms() as i64);
            let mut at = 0usize;
            while at < bytes.len() {
                let size = protocol::batch::BatchHeader::read(&bytes[at..])
                    .map_or(bytes.len() - at, |h| h.size);
                stamp(
                    &mut bytes[at..at + size],
                    Stamp {
                        position: appended.base + at as u64,
                        leader_epoch: epoch as i32,
                        log_append_time: append_time,
                    },
                );
                at += size;
            }
        }
        self.say(|| format!("  produce at {}..{}", appended.base, appended.end));
        self.wait_for_answer(i, &replica, appended, epoch, bytes, false);
    }

    /// The next message's value.
    fn next_value(&mut self) -> Vec<u8> {
        let n = self.next_message;
        self.next_message += 1;
        let len = (n * 7 % 40) as usize;
        let mut value = format!("m{n}:").into_bytes();
        value.extend((0..len).map(|k| (n as usize * 31 + k) as u8));
        value
    }

    /// A produce at broker `i` waits for its acknowledgement as the
    /// handler's does: flushed, then replicated in `epoch`.
    fn wait_for_answer(
        &mut self,
        i: usize,
        replica: &SharedReplica<MemoryStorage>,
        appended: partition_log::Appended,
        epoch: u32,
        bytes: Vec<u8>,
        duplicate: bool,
    ) {
        let (log, replica) = (replica.borrow().log.clone(), replica.clone());
        let answer: Pending<Result<(), String>> = Box::pin(async move {
            partition_log::stored(&log, appended, AckMode::Flushed)
                .await
                .map_err(|e| format!("{e:?}"))?;
            replicated(&replica, appended.end, epoch)
                .await
                .map_err(|e: NotReplicated| format!("{e:?}"))
        });
        self.nodes[i].producing.push(Produce {
            base: appended.base,
            bytes,
            answer,
            duplicate,
            epoch,
        });
    }

    /// A follower's fetch, answered by the broker it takes for its leader,
    /// and its answer applied (started: the rest is polled later).
    fn fetch(&mut self, i: usize, bytes_max: u32) {
        let node = &self.nodes[i];
        if node.applying.is_some() {
            return;
        }
        let Some(follower) = node.replica.clone() else {
            return;
        };
        let (leader, epoch, offset, flushed, last_epoch) = {
            let r = follower.borrow();
            let l = r.log.borrow();
            if !r.known || r.leader() == r.me {
                return;
            }
            (
                r.leader(),
                r.epoch(),
                l.end_offset(),
                l.flushed_offset(),
                r.epochs.last_epoch(),
            )
        };
        let l = self.index(leader);
        let Some(leading) = self.nodes[l].replica.clone() else {
            return; // not running: the connection fails
        };
        let incarnation = self.nodes[i].incarnation();
        let now = self.nodes[l].storage.now();
        let mut answer = FetchedPart::empty("t", 0, offset);
        let mut payload = Vec::new();
        {
            let mut r = leading.borrow_mut();
            // check_leader: the fetch names the epoch the follower knows.
            if r.epoch() != epoch || !r.leads() {
                answer.error = if epoch < r.epoch() {
                    ErrorCode::FencedLeaderEpoch
                } else {
                    ErrorCode::NotLeader
                };
            } else {
                let read = r.follower_fetch(
                    self.nodes[i].id,
                    &incarnation,
                    offset,
                    flushed,
                    last_epoch,
                    now,
                );
                answer.leader_epoch = epoch as i32;
                answer.offsets = follower_offsets(&r.log);
                match read {
                    FollowerRead::Diverging { epoch, end } => answer.diverging = Some((epoch, end)),
                    FollowerRead::Read { chunk_epoch, .. } => answer.chunk_epoch = chunk_epoch,
                }
            }
        }
        if answer.error == ErrorCode::None && answer.diverging.is_none() {
            let storage = self.nodes[l].storage.clone();
            let slice = storage
                .block_on(read_for_follower(&leading, offset, bytes_max))
                .unwrap_or_else(|e| panic!("the leader's read at {offset}: {e}"));
            if let Some(slice) = slice {
                payload = storage
                    .block_on(slice.file.read_at(slice.position, slice.len as usize))
                    .expect("reading the leader's segment");
                answer.segment_base = offset - slice.position;
                answer.length = payload.len() as u32;
            } else {
                answer.segment_base = offset;
            }
        }
        self.say(|| {
            format!(
                "  {} fetches {offset} (epoch {epoch}, last {last_epoch}) from {leader}: {:?} {:?} {} bytes, hw {}",
                self.nodes[i].id,
                answer.error,
                answer.diverging,
                payload.len(),
                answer.offsets.flushed_offset
            )
        });
        let mut applying: Pending<Result<(), ApplyError>> =
            Box::pin(async move { apply(&follower, &answer, &payload, &NoBookkeeping).await });
        match noop_poll(&mut applying) {
            Poll::Ready(result) => self.applied(i, result),
            Poll::Pending => self.nodes[i].applying = Some(applying),
        }
    }

    fn applied(&mut self, i: usize, result: Result<(), ApplyError>) {
        if let Err(error) = result {
            self.refusals += 1;
            self.say(|| format!("  {} applied: {error}", self.nodes[i].id));
        }
    }

    /// Polls broker `i`'s disk task `task` once, then what waits on it.
    fn poll(&mut self, i: usize, task: usize) {
        let node = &mut self.nodes[i];
        node.storage.poll_task(task);
        if let Some(applying) = node.applying.as_mut() {
            if let Poll::Ready(result) = noop_poll(applying) {
                node.applying = None;
                self.applied(i, result);
            }
        }
        self.answer_produces(i);
    }

    /// Produces answered: the acknowledged ones are recorded.
    fn answer_produces(&mut self, i: usize) {
        let mut acked = Vec::new();
        self.nodes[i]
            .producing
            .retain_mut(|p| match noop_poll(&mut p.answer) {
                Poll::Pending => true,
                Poll::Ready(Ok(())) => {
                    acked.push((p.base, std::mem::take(&mut p.bytes), p.duplicate, p.epoch));
                    false
                }
                Poll::Ready(Err(_)) => false,
            });
        // The high watermark that acknowledged them is committed.
        self.note_committed();
        for (base, mut bytes, duplicate, epoch) in acked {
            // Acknowledged in the history a failback's cut dropped (by a
            // leader of an older epoch, for bytes past the cut): dropped
            // with it, on purpose.
            let end = base + bytes.len() as u64;
            if self.cut_log.iter().any(|&(e, at)| epoch < e && end > at) {
                self.say(|| {
                    format!("  acked {base}.. in epoch {epoch}, before the cut: dropped with it")
                });
                continue;
            }
            if duplicate {
                // The batch as stored: its numbers and records are the
                // ones sent again.
                self.duplicates += 1;
                let end = base as usize + bytes.len();
                assert!(
                    end <= self.committed.len(),
                    "a retry answered with {base}..{end}, but only {} is committed",
                    self.committed.len()
                );
                let stored = &self.committed[base as usize..end];
                let size = protocol::batch::BatchHeader::read(stored).map(|h| h.size);
                // Numbers, count and records; the leader stamped the rest.
                let numbers = protocol::batch::at::PRODUCER_ID;
                assert!(
                    size == Ok(bytes.len()) && stored[numbers..] == bytes[numbers..],
                    "a retry answered with {base}..{end}, where another batch is stored"
                );
                bytes = stored.to_vec();
            }
            self.say(|| format!("  acked {base}..{}", base as usize + bytes.len()));
            let end = base as usize + bytes.len();
            assert!(
                end <= self.committed.len(),
                "acknowledged {base}..{end}, but only {} is committed",
                self.committed.len()
            );
            assert_eq!(
                &self.committed[base as usize..end],
                &bytes[..],
                "acknowledged bytes at {base} are not what is committed there"
            );
            self.acked.push((base, bytes));
        }
    }

    /// Leaders' high watermarks extend what is committed; each must agree
    /// with it, and never go back while it leads.
    fn note_committed(&mut self) {
        for i in 0..self.nodes.len() {
            let Some(replica) = self.nodes[i].replica.clone() else {
                continue;
            };
            let r = replica.borrow();
            // A leader of an epoch before a failback's cut leads the
            // history it cut (it has not learned of it yet): what it
            // publishes is not the partition's.
            if !r.leads() || r.epoch() < self.cut_epoch {
                continue;
            }
            // Nothing a failback cut comes back: a leader after it holds,
            // past each cut, only bytes of the cut's epoch or later.
            let end = r.log.borrow().end_offset();
            for &(epoch, at) in &self.cut_log {
                assert!(
                    end <= at || r.epoch() < epoch || r.epochs.epoch_at(at) >= epoch as i32,
                    "broker {} leads epoch {} holding bytes past the cut at {at} (epoch {epoch}) of epoch {}: the cut history came back ({:?})",
                    r.me,
                    r.epoch(),
                    r.epochs.epoch_at(at),
                    r.epochs
                );
            }
            let hw = r.log.borrow().high_watermark().unwrap_or(0);
            let key = (self.nodes[i].run, r.epoch());
            if let Some((run, epoch, before)) = self.nodes[i].led_hw {
                if (run, epoch) == key {
                    assert!(
                        hw >= before,
                        "broker {}'s high watermark went back from {before} to {hw} in epoch {epoch}",
                        r.me
                    );
                }
            }
            self.nodes[i].led_hw = Some((key.0, key.1, hw));
            let bytes = written_bytes(&self.nodes[i].storage, &r.log);
            assert!(
                bytes.len() as u64 >= hw,
                "broker {} publishes high watermark {hw} past its written end {}",
                r.me,
                bytes.len()
            );
            let common = self.committed.len().min(hw as usize);
            assert!(
                bytes[..common] == self.committed[..common],
                "broker {} leads epoch {} with bytes below the committed end {} that differ from what was committed",
                r.me,
                r.epoch(),
                self.committed.len()
            );
            if hw as usize > self.committed.len() {
                self.committed = bytes[..hw as usize].to_vec();
            }
        }
    }

    /// A copy's idempotent producers agree with its log: every batch its
    /// state keeps is that batch at that offset in the log (a wrong one
    /// would answer a retry with another batch's offsets), and a producer
    /// it knows has its newest batch of the log as its newest (else a
    /// retry or the next batch is judged against an older one).
    fn check_producers(&self, node: &Node, log: &Shared<MemoryStorage>) {
        let l = log.borrow();
        let written = l.written_offset();
        let bytes = written_bytes(&node.storage, log);
        let mut newest: BTreeMap<i64, (i32, i32, u64, u64)> = BTreeMap::new();
        let mut at = 0usize;
        let mut found = BTreeMap::new();
        while let Ok(header) = protocol::batch::BatchHeader::read(&bytes[at..]) {
            if at + header.size > bytes.len() {
                break;
            }
            if let Some(n) = protocol::batch::sequence::Numbered::of(&header) {
                let batch = (n.first, n.last, at as u64, (at + header.size) as u64);
                newest.insert(n.producer_id, batch);
                found.insert(
                    (at as u64, (at + header.size) as u64),
                    (n.producer_id, n.first, n.last),
                );
            }
            at += header.size;
        }
        for (id, (_, batches)) in l.producers().kept() {
            for &(first, last, base, end) in &batches {
                if end > written {
                    continue;
                }
                assert_eq!(
                    found.get(&(base, end)),
                    Some(&(id, first, last)),
                    "broker {}'s producer state keeps batch {first}..={last} of {id} at {base}..{end}, which its log does not hold",
                    node.id
                );
            }
            if let Some(&(first, last, base, end)) = batches.last() {
                if end <= written {
                    assert_eq!(
                        newest.get(&id),
                        Some(&(first, last, base, end)),
                        "broker {}'s producer state has {first}..={last} at {base}..{end} as {id}'s newest batch; its log has another",
                        node.id
                    );
                }
            }
        }
    }

    /// A failback's cut (`replica/cut.rs`, issue 45): the leader cuts its
    /// log at a message boundary at or below what is committed (an
    /// acknowledged message's start, or 0) and leads a new epoch from
    /// there, alone in the ISR, as `TruncateMirror` does. What was
    /// committed past the cut is dropped on purpose, so the model's
    /// committed bytes and acknowledged messages are cut with it; the
    /// followers must cut theirs by the epochs rule, no produce waiting
    /// across the cut may be acknowledged, and every later check holds
    /// from the cut on. Made only when the leader knows the registry's
    /// newest state, so its compare-and-set is the one written (a client
    /// repeats a cut whose epoch was not taken).
    fn failback_cut(&mut self) {
        let leader = self.index(self.registry.state.leader);
        let Some(replica) = self.nodes[leader].replica.clone() else {
            return;
        };
        {
            let r = replica.borrow();
            if !self.nodes[leader].live()
                || !r.leads()
                || r.state.revision != self.registry.revision
            {
                return;
            }
        }
        let boundaries: Vec<u64> = self
            .acked
            .iter()
            .map(|(base, _)| *base)
            .filter(|base| *base as usize <= self.committed.len())
            .collect();
        let at = match boundaries.len() {
            0 => 0,
            n => boundaries[self.below(n as u64) as usize],
        };
        let storage = self.nodes[leader].storage.clone();
        let cutting = replica.clone();
        let mut cut: Pending<Result<super::cut::Cut, super::cut::CutError>> =
            Box::pin(async move { super::cut::cut_leader(&cutting, at).await });
        let mut outcome = None;
        for _ in 0..100 {
            storage.run_until_idle();
            if let Poll::Ready(done) = noop_poll(&mut cut) {
                outcome = Some(done);
                break;
            }
            storage.advance(Duration::from_millis(1));
        }
        let next = match outcome {
            Some(Ok(super::cut::Cut::Cut { next, .. })) => next,
            Some(Ok(super::cut::Cut::Done)) => return,
            Some(Err(error)) => panic!("the leader's cut at {at} failed: {error}"),
            // Still waiting for the log's writes: not cut (a cut is made
            // once they end, with nothing awaited after it).
            None => return,
        };
        let expected = replica.borrow().state.revision;
        let written = self.write(expected, next.clone());
        assert_eq!(written.state, next, "the cut's epoch is written");
        self.say(|| format!("failback cut at {at}: {next:?}"));
        self.cut_epoch = next.leader_epoch;
        self.cut_log.push((next.leader_epoch, at));
        self.cuts += 1;
        self.committed.truncate(at as usize);
        self.acked
            .retain(|(base, bytes)| base + bytes.len() as u64 <= at);
        self.learn(leader);
        assert!(
            replica.borrow().leads()
                && replica.borrow().epochs.last() == Some((next.leader_epoch, at)),
            "the cut leader leads its new epoch from the cut: {:?}",
            replica.borrow().epochs
        );
    }

    /// Everything that must hold after any step.
    fn check(&mut self) {
        self.note_committed();
        let state = self.registry.state.clone();
        for node in &self.nodes {
            let Some(replica) = &node.replica else {
                continue;
            };
            let r = replica.borrow();
            if self.settings.format == MessageFormat::Two {
                self.check_producers(node, &r.log);
            }
            // Epochs rise in both fields.
            for pair in r.epochs.entries().windows(2) {
                assert!(
                    pair[0].0 < pair[1].0 && pair[0].1 <= pair[1].1,
                    "broker {}'s epochs do not rise: {:?}",
                    node.id,
                    r.epochs.entries()
                );
            }
            let floor = r.log.borrow().committed_floor();
            // A copy that has not cut its log since a failback's cut holds
            // the old history's floor until its leader tells it to cut.
            let before_cut = r.epochs.last_epoch() < self.cut_epoch as i32;
            assert!(
                before_cut || floor <= self.committed.len() as u64,
                "broker {} believes {floor} committed; leaders published {}",
                node.id,
                self.committed.len()
            );
            // Every running ISR member holds everything committed.
            if state.in_sync(node.id) {
                let bytes = written_bytes(&node.storage, &r.log);
                let n = self.committed.len();
                assert!(
                    bytes.len() >= n && bytes[..n] == self.committed[..],
                    "broker {}, in the ISR {:?}, holds {} bytes that do not begin with the {n} committed (a committed byte was lost or truncated); first difference at {:?}",
                    node.id,
                    state.isr,
                    bytes.len(),
                    (0..n.min(bytes.len())).find(|&k| bytes[k] != self.committed[k]).map(|k| (k, &bytes[k.saturating_sub(20)..(k + 20).min(bytes.len())], &self.committed[k.saturating_sub(20)..(k + 20).min(n)]))
                );
            }
        }
        // Log matching: where two copies say one epoch wrote the bytes, the
        // bytes agree.
        for a in 0..self.nodes.len() {
            for b in a + 1..self.nodes.len() {
                let (Some(ra), Some(rb)) = (&self.nodes[a].replica, &self.nodes[b].replica) else {
                    continue;
                };
                let (ra, rb) = (ra.borrow(), rb.borrow());
                let x = written_bytes(&self.nodes[a].storage, &ra.log);
                let y = written_bytes(&self.nodes[b].storage, &rb.log);
                let end = x.len().min(y.len()) as u64;
                let mut cuts: Vec<u64> = ra
                    .epochs
                    .entries()
                    .iter()
                    .chain(rb.epochs.entries())
                    .map(|(_, start)| *start)
                    .filter(|s| *s < end)
                    .chain([0, end])
                    .collect();
                cuts.sort_unstable();
                cuts.dedup();
                for w in cuts.windows(2) {
                    let (from, to) = (w[0], w[1]);
                    let (ea, eb) = (ra.epochs.epoch_at(from), rb.epochs.epoch_at(from));
                    if ea >= 0 && ea == eb {
                        assert!(
                            x[from as usize..to as usize] == y[from as usize..to as usize],
                            "brokers {} and {} both hold epoch {ea}'s bytes at {from}..{to}, and they differ",
                            self.nodes[a].id,
                            self.nodes[b].id
                        );
                    }
                }
            }
        }
        // Who led which epoch: one broker, one run.
        for node in &self.nodes {
            let Some(replica) = &node.replica else {
                continue;
            };
            let r = replica.borrow();
            if let Some(epoch) = r.leading {
                let who = (node.id, node.run);
                let first = *self.led.entry(epoch).or_insert(who);
                assert_eq!(
                    first, who,
                    "epoch {epoch} led by broker {} run {} and by broker {} run {}",
                    first.0, first.1, who.0, who.1
                );
            }
        }
    }

    /// One random step.
    fn step(&mut self) {
        let i = self.below(3) as usize;
        // Faults (elections, crashes, starts, pauses) take `storm` percent
        // of the steps: a case is calm (3%) or stormy (up to 20%).
        let roll = if self.below(100) < self.storm {
            94 + self.below(6)
        } else {
            self.below(94)
        };
        match roll {
            0..=17 => {
                let count = 1 + self.below(3) as usize;
                self.produce(i, count);
            }
            18..=45 => {
                let bytes_max = 20 + self.below(400) as u32;
                self.fetch(i, bytes_max);
            }
            46..=73 => {
                for _ in 0..1 + self.below(3) {
                    let task = self.below(8) as usize;
                    self.poll(i, task);
                }
            }
            74..=81 => self.leader_check(i),
            82..=88 => {
                if self.nodes[i].live() {
                    self.say(|| format!("  {} learns {:?}", self.nodes[i].id, self.registry));
                    self.learn(i);
                }
            }
            89..=91 => {
                let ms = 1 + self.below(600);
                for node in &self.nodes {
                    node.storage.advance(Duration::from_millis(ms));
                }
            }
            92..=93 => {
                if let Some(replica) = self.nodes[i].replica.clone() {
                    let now = self.nodes[i].storage.now();
                    let log = replica.borrow().log.clone();
                    partition_log::tick(&log, now, true);
                }
            }
            94 => {
                if self.cuts < 2 && self.below(4) == 0 {
                    self.failback_cut();
                } else {
                    let pick = self.below(3) as usize;
                    self.elect(pick);
                }
            }
            95..=96 => {
                if self.nodes[i].up {
                    let power = match self.below(3) {
                        0 => None,
                        _ => {
                            let tail =
                                [Tail::Intact, Tail::Zeroed, Tail::Flipped][self.below(3) as usize];
                            Some((self.below(1_001) as u16, tail))
                        }
                    };
                    self.say(|| format!("crash {} {power:?}", self.nodes[i].id));
                    self.crash(i, power);
                }
            }
            97..=98 => {
                if !self.nodes[i].up {
                    self.say(|| format!("start {}", self.nodes[i].id));
                    self.start(i);
                }
            }
            _ => {
                // Paused past its lease (the registry counts it gone), or
                // back from the pause.
                if self.nodes[i].up {
                    let registered = !self.nodes[i].registered;
                    self.say(|| format!("{} registered: {registered}", self.nodes[i].id));
                    self.nodes[i].registered = registered;
                }
            }
        }
        self.check();
    }

    /// Every fault heals; the copies must converge.
    fn heal(&mut self) {
        for i in 0..self.nodes.len() {
            if !self.nodes[i].up {
                self.start(i);
            }
            self.nodes[i].registered = true;
        }
        for round in 0..400 {
            for i in 0..self.nodes.len() {
                self.learn(i);
            }
            self.elect(round);
            for i in 0..self.nodes.len() {
                self.leader_check(i);
                self.fetch(i, 1 << 20);
                let storage = self.nodes[i].storage.clone();
                storage.run_until_idle();
                self.poll(i, 0);
                if let Some(replica) = self.nodes[i].replica.clone() {
                    let log = replica.borrow().log.clone();
                    partition_log::tick(&log, storage.now(), true);
                    storage.run_until_idle();
                }
            }
            for node in &self.nodes {
                node.storage.advance(Duration::from_millis(100));
            }
            self.check();
            if self.converged() {
                return;
            }
        }
        panic!(
            "the copies did not converge after the faults stopped: registry {:?}, copies {:?}",
            self.registry,
            self.nodes
                .iter()
                .map(|n| n.replica.as_ref().map(|r| {
                    let r = r.borrow();
                    let l = r.log.borrow();
                    (
                        r.me,
                        l.end_offset(),
                        l.written_offset(),
                        l.flushed_offset(),
                        l.high_watermark(),
                        r.leading,
                        r.epochs.clone(),
                    )
                }))
                .collect::<Vec<_>>()
        );
    }

    fn converged(&self) -> bool {
        let state = &self.registry.state;
        if state.isr.len() != BROKERS.len() {
            return false;
        }
        let leader = &self.nodes[self.index(state.leader)];
        let Some(lr) = &leader.replica else {
            return false;
        };
        let lr = lr.borrow();
        if !lr.leads() {
            return false;
        }
        let reference = written_bytes(&leader.storage, &lr.log);
        let end = lr.log.borrow().end_offset();
        if reference.len() as u64 != end || lr.log.borrow().high_watermark() != Some(end) {
            return false;
        }
        self.nodes.iter().all(|n| {
            n.replica.as_ref().is_some_and(|r| {
                let r = r.borrow();
                written_bytes(&n.storage, &r.log) == reference
            })
        })
    }

    /// After convergence: no batch of the idempotent producer is stored
    /// twice, however often it was sent.
    fn check_once(&self) {
        let leader = &self.nodes[self.index(self.registry.state.leader)];
        let replica = leader.replica.as_ref().expect("running");
        let bytes = written_bytes(&leader.storage, &replica.borrow().log);
        let mut seen = std::collections::BTreeSet::new();
        let mut at = 0usize;
        while at < bytes.len() {
            let header = protocol::batch::BatchHeader::read(&bytes[at..]).expect("a batch");
            if let Some(n) = protocol::batch::sequence::Numbered::of(&header) {
                assert!(
                    seen.insert(n.first),
                    "the batch from sequence {} is stored twice (again at {at})",
                    n.first
                );
            }
            at += header.size;
        }
    }

    /// After convergence: every acknowledged message is in every copy.
    fn check_acked(&self) {
        for node in &self.nodes {
            let replica = node.replica.as_ref().expect("running");
            let bytes = written_bytes(&node.storage, &replica.borrow().log);
            for (base, acked) in &self.acked {
                let (from, to) = (*base as usize, *base as usize + acked.len());
                assert!(
                    to <= bytes.len() && bytes[from..to] == acked[..],
                    "broker {} lost the acknowledged messages at {from}..{to}",
                    node.id
                );
            }
        }
    }
}

fn run_case(seed: u64, trace: bool) -> (usize, u64, u32, u64, u64) {
    let mut cluster = Cluster::new(seed, trace);
    cluster.check();
    for _ in 0..STEPS {
        cluster.step();
    }
    cluster.heal();
    cluster.check_acked();
    if cluster.settings.format == MessageFormat::Two {
        cluster.check_once();
    }
    (
        cluster.acked.len(),
        cluster.refusals,
        cluster.registry.state.leader_epoch,
        cluster.duplicates,
        cluster.cuts,
    )
}

#[test]
fn replication_on_the_in_memory_disk_keeps_every_acknowledged_byte() {
    if let Ok(seed) = std::env::var("RINGLOG_COPIES_MODEL_TRACE") {
        let seed: u64 = seed.parse().expect("a seed");
        let outcome = run_case(seed, true);
        eprintln!("seed {seed}: {outcome:?}");
        return;
    }
    let cases: u64 = std::env::var("RINGLOG_COPIES_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    let (mut acked, mut refusals, mut epochs, mut duplicates, mut cuts) =
        (0usize, 0u64, 0u64, 0u64, 0u64);
    for seed in 0..cases {
        let outcome = std::panic::catch_unwind(|| run_case(seed, false));
        match outcome {
            Ok((a, r, e, d, c)) => {
                acked += a;
                refusals += r;
                epochs += u64::from(e);
                duplicates += d;
                cuts += c;
            }
            Err(panic) => {
                eprintln!("case {seed} failed; RINGLOG_COPIES_MODEL_TRACE={seed} prints its steps");
                std::panic::resume_unwind(panic);
            }
        }
    }
    eprintln!(
        "{cases} cases: {acked} acknowledged produces ({duplicates} of them retries answered with the offsets stored before), {epochs} leader epochs, {refusals} fetches refused or failed, {cuts} failback cuts"
    );
    assert!(cuts > 0, "no failback cut was made: the cut is not tested");
    assert!(
        acked > 0,
        "no produce was ever acknowledged: the test tests nothing"
    );
}
