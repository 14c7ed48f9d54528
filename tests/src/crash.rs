//! The crash-consistency harness (issue 8, item 16).
//!
//! Each round: one producer per partition sends sequence-numbered messages
//! with `acks = flushed`; at a random moment the broker is SIGKILLed; the
//! files are sometimes damaged the way a crash or a power cut damages them;
//! the broker restarts; a verifier reads every partition from its start.
//!
//! What must hold after every restart, per partition:
//! - every acknowledged message is there, exactly once, in order — except
//!   one the harness itself damaged inside a closed (fsynced) segment, which
//!   the reader steps over and which must not take any other with it;
//! - every served message passes its CRC (the client checks each one);
//! - offsets never change: the message with sequence number `n` is always at
//!   offset `n × STORED_BYTES`, in every round — so no offset is reused and
//!   no gap opens;
//! - a topic deleted and re-created between crashes starts empty.
//!
//! Damage is applied only above what is known durable: above both the
//! acknowledged messages and the partition's recovery point. Below that the
//! data was fsynced, and a crash cannot touch it (bit rot in a closed
//! segment is the one exception the harness also plays).
//!
//! `cargo run -p ringlog-tests --bin crash-harness -- --rounds 200` runs a
//! long session; the integration test runs 20 rounds.

use crate::{check_numbered_payload, numbered_payload, Broker, BrokerOptions};
use protocol::client::{
    AckMode, Client, ClientConfig, ClientError, Consumer, Producer, ProducerConfig,
};
use protocol::codec::TopicSettings;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Payload bytes of every message.
pub const PAYLOAD_BYTES: usize = 100;
/// Stored bytes of every message (length, magic, CRC, payload).
pub const STORED_BYTES: u64 = PAYLOAD_BYTES as u64 + 9;
const SEGMENT_BYTES: u64 = 64 * 1024;
const TOPIC: &str = "crash";

/// What is done to the files between the kill and the restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Damage {
    /// Nothing: a plain kill -9.
    None,
    /// The tail cut at a random byte (a torn write).
    TailCut,
    /// Bytes flipped in the unflushed tail.
    TailFlipped,
    /// The tail zero-filled, as after a power cut.
    TailZeroed,
    /// A byte flipped inside a message of a closed, fsynced segment.
    ClosedSegmentFlipped,
    /// The topic deleted and re-created after the restart.
    Recreated,
}

const DAMAGES: [Damage; 6] = [
    Damage::None,
    Damage::TailCut,
    Damage::TailFlipped,
    Damage::TailZeroed,
    Damage::ClosedSegmentFlipped,
    Damage::Recreated,
];

/// How to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Kill/restart rounds.
    pub rounds: usize,
    /// Seed of the random moments and damage (printed; rerun with it).
    pub seed: u64,
    /// Partitions of the topic (spread over both shards).
    pub partitions: u32,
}

/// What a run did.
#[derive(Debug, Default)]
pub struct Report {
    /// Rounds run.
    pub rounds: usize,
    /// Messages acknowledged as flushed, over all rounds.
    pub acknowledged: u64,
    /// Messages read and checked by the verifier, over all rounds.
    pub verified: u64,
    /// Rounds per kind of damage (`applied` = the files allowed it).
    pub damage: BTreeMap<String, (usize, usize)>,
    /// Messages the harness damaged in closed segments (stepped over).
    pub messages_lost_to_closed_segment_damage: u64,
}

/// What the verifier knows about a partition.
#[derive(Debug, Default, Clone)]
struct PartitionState {
    /// Sequence numbers below this were acknowledged.
    acked: u64,
    /// The next sequence number a writer sends (one past the last stored).
    next: u64,
    /// Messages the harness damaged in closed segments.
    lost: BTreeSet<u64>,
}

/// xorshift64*: enough randomness for moments and positions, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

/// Runs the harness; panics with the round, partition and seed on the first
/// broken guarantee.
pub fn run(options: &Options) -> Report {
    let mut rng = Rng(options.seed | 1);
    let mut broker = Broker::start(BrokerOptions {
        config_toml: format!("segment_bytes_min = {SEGMENT_BYTES}\n"),
        ..BrokerOptions::default()
    });
    create_topic(&broker.client(), options.partitions);
    let mut states = vec![PartitionState::default(); options.partitions as usize];
    let mut report = Report::default();
    for round in 0..options.rounds {
        let context = format!("round {round} (seed {})", options.seed);
        let acked_before: u64 = states.iter().map(|s| s.acked).sum();
        write_until_killed(&mut broker, &mut states, &mut rng, &context);
        report.acknowledged += states.iter().map(|s| s.acked).sum::<u64>() - acked_before;
        // Every kind of damage in turn; where and how much, at random.
        let damage = DAMAGES[round % DAMAGES.len()];
        let partition = rng.below(u64::from(options.partitions)) as u32;
        let dir = broker.data_dir().join(format!("{TOPIC}-{partition}"));
        let applied = match damage {
            Damage::None | Damage::Recreated => true,
            _ => damage_files(&dir, damage, &mut states[partition as usize], &mut rng),
        };
        if damage == Damage::ClosedSegmentFlipped && applied {
            report.messages_lost_to_closed_segment_damage += 1;
        }
        let entry = report.damage.entry(format!("{damage:?}")).or_default();
        entry.0 += 1;
        entry.1 += usize::from(applied);
        broker.restart();
        let client = broker.client();
        for (p, state) in states.iter_mut().enumerate() {
            report.verified += verify(&client, p as u32, state, &context);
        }
        if damage == Damage::Recreated {
            client
                .delete_topic(TOPIC)
                .unwrap_or_else(|e| panic!("{context}: deleting: {e}"));
            create_topic(&client, options.partitions);
            for (p, state) in states.iter_mut().enumerate() {
                *state = PartitionState::default();
                let left = verify(&client, p as u32, state, &context);
                assert_eq!(left, 0, "{context}: a re-created topic serves old messages");
            }
        }
        report.rounds += 1;
    }
    report
}

fn create_topic(client: &Client, partitions: u32) {
    let settings = TopicSettings {
        segment_bytes: SEGMENT_BYTES,
        ..TopicSettings::default()
    };
    client
        .create_topic(TOPIC, partitions, &settings)
        .unwrap_or_else(|e| panic!("creating {TOPIC}: {e}"));
}

/// One writer per partition until a random moment, then SIGKILL.
fn write_until_killed(
    broker: &mut Broker,
    states: &mut [PartitionState],
    rng: &mut Rng,
    context: &str,
) {
    let address = broker.address();
    let writers: Vec<_> = states
        .iter()
        .enumerate()
        .map(|(p, state)| {
            let acked = Arc::new(AtomicU64::new(state.acked.max(state.next)));
            let (address, first, seen) = (address.clone(), state.next, acked.clone());
            let thread = std::thread::spawn(move || write(&address, p as u32, first, &seen));
            (thread, acked)
        })
        .collect();
    // The crash moment: random, after the writers have had a chance to
    // connect (a kill before anything was sent is a valid round too).
    std::thread::sleep(Duration::from_millis(50 + rng.below(450)));
    broker.kill9();
    let deadline = Instant::now() + Duration::from_secs(60);
    for (p, (thread, acked)) in writers.into_iter().enumerate() {
        while !thread.is_finished() {
            assert!(
                Instant::now() < deadline,
                "{context}: writer {p} hangs after the kill"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = thread.join();
        let state = &mut states[p];
        state.acked = state.acked.max(acked.load(Ordering::SeqCst));
    }
}

fn write(address: &str, partition: u32, first: u64, acked: &AtomicU64) {
    // No retries: the writer stops at the kill, and what it counts as
    // acknowledged is exactly what a flush confirmed.
    let no_retries = ClientConfig {
        retries: 0,
        ..ClientConfig::default()
    };
    let Ok(client) = Client::with_config(address, no_retries) else {
        return;
    };
    let config = ProducerConfig {
        acks: AckMode::Flushed,
        batch_messages: 20,
        linger: Duration::from_secs(60),
        retries: 0,
        ..ProducerConfig::default()
    };
    let Ok(mut producer) = Producer::new(&client, TOPIC, config) else {
        return;
    };
    let mut next = first;
    loop {
        for _ in 0..100 {
            let payload = numbered_payload(next, PAYLOAD_BYTES);
            if producer.send_to(partition, None, &payload).is_err() {
                return;
            }
            next += 1;
        }
        if producer.flush().is_err() {
            return;
        }
        acked.store(next, Ordering::SeqCst);
    }
}

/// Segment files of a partition directory, by base offset.
fn segments(dir: &Path) -> Vec<(u64, PathBuf, u64)> {
    let mut found: Vec<(u64, PathBuf, u64)> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let base = name.strip_suffix(".log")?.parse().ok()?;
                    Some((base, e.path(), e.metadata().ok()?.len()))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// Applies `damage` to one partition's files; false if they offered no
/// place for it (no unflushed tail, no closed segment).
fn damage_files(dir: &Path, damage: Damage, state: &mut PartitionState, rng: &mut Rng) -> bool {
    let files = segments(dir);
    let Some(&(last_base, _, last_len)) = files.last() else {
        return false;
    };
    let end = last_base + last_len;
    let recovery_point: u64 = std::fs::read_to_string(dir.join("recovery-point"))
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    // Nothing below this may be touched by a crash: acknowledged, or fsynced.
    let floor = (state.acked * STORED_BYTES).max(recovery_point);
    let file_at = |offset: u64| {
        files
            .iter()
            .rev()
            .find(|(base, _, _)| *base <= offset)
            .cloned()
    };
    let open = |path: &Path| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()))
    };
    use std::os::unix::fs::FileExt;
    match damage {
        Damage::TailCut | Damage::TailFlipped | Damage::TailZeroed => {
            if end <= floor {
                return false;
            }
            let at = floor + rng.below(end - floor);
            let Some((base, path, len)) = file_at(at) else {
                return false;
            };
            let file = open(&path);
            match damage {
                Damage::TailCut => {
                    file.set_len(at - base)
                        .unwrap_or_else(|e| panic!("damaging the files: {e}"));
                    for (later, path, _) in &files {
                        if *later > base {
                            std::fs::remove_file(path)
                                .unwrap_or_else(|e| panic!("damaging the files: {e}"));
                        }
                    }
                }
                Damage::TailFlipped => {
                    for _ in 0..3 {
                        let position = at - base + rng.below(len - (at - base));
                        let mut byte = [0u8; 1];
                        file.read_exact_at(&mut byte, position)
                            .unwrap_or_else(|e| panic!("damaging the files: {e}"));
                        file.write_all_at(&[byte[0] ^ 0xff], position)
                            .unwrap_or_else(|e| panic!("damaging the files: {e}"));
                    }
                }
                _ => {
                    let zeros = vec![0u8; (len - (at - base)) as usize];
                    file.write_all_at(&zeros, at - base)
                        .unwrap_or_else(|e| panic!("damaging the files: {e}"));
                    for (later, path, later_len) in &files {
                        if *later > base {
                            let zeros = vec![0u8; *later_len as usize];
                            open(path)
                                .write_all_at(&zeros, 0)
                                .unwrap_or_else(|e| panic!("damaging the files: {e}"));
                        }
                    }
                }
            }
            true
        }
        Damage::ClosedSegmentFlipped => {
            // A closed segment wholly below the acknowledged end.
            let acked_end = state.acked * STORED_BYTES;
            let closed: Vec<_> = files
                .iter()
                .take(files.len() - 1)
                .filter(|(base, _, len)| base + len <= acked_end && *len >= STORED_BYTES)
                .collect();
            if closed.is_empty() {
                return false;
            }
            let (base, path, len) = closed[rng.below(closed.len() as u64) as usize];
            let first = base.div_ceil(STORED_BYTES);
            let last = (base + len) / STORED_BYTES;
            let seq = first + rng.below(last - first);
            if state.lost.contains(&seq) {
                return false;
            }
            // Inside the payload: the length field stays readable.
            let position = seq * STORED_BYTES + 9 + rng.below(PAYLOAD_BYTES as u64) - base;
            let file = open(path);
            let mut byte = [0u8; 1];
            file.read_exact_at(&mut byte, position)
                .unwrap_or_else(|e| panic!("damaging the files: {e}"));
            file.write_all_at(&[byte[0] ^ 0x5a], position)
                .unwrap_or_else(|e| panic!("damaging the files: {e}"));
            state.lost.insert(seq);
            true
        }
        Damage::None | Damage::Recreated => true,
    }
}

/// Reads a partition from its start and checks every guarantee; returns
/// how many messages it read.
fn verify(client: &Client, partition: u32, state: &mut PartitionState, context: &str) -> u64 {
    let context = format!("{context}, partition {partition}");
    let mut consumer = Consumer::new(client, TOPIC, partition, 0)
        .unwrap_or_else(|e| panic!("{context}: consumer: {e}"));
    consumer.set_max_wait_ms(0);
    let mut expected = 0u64;
    let mut read = 0u64;
    let mut newly_lost = Vec::new();
    let mut check = |offset: u64, value: &[u8]| {
        let seq = check_numbered_payload(value, PAYLOAD_BYTES);
        assert_eq!(
            offset,
            seq * STORED_BYTES,
            "{context}: message {seq} moved: offsets must never change"
        );
        assert!(
            seq >= expected,
            "{context}: message {seq} served twice or out of order"
        );
        for missing in expected..seq {
            // A message never acknowledged may be lost to damage in the
            // tail, and stays missing in later rounds; an acknowledged one
            // only to the harness's own damage of a closed segment.
            assert!(
                missing >= state.acked || state.lost.contains(&missing),
                "{context}: message {missing} is missing (acknowledged below {})",
                state.acked
            );
            newly_lost.push(missing);
        }
        expected = seq + 1;
        read += 1;
    };
    loop {
        match consumer.poll_with(|m| check(m.offset, m.value)) {
            Ok(0) if consumer.at_end() => break,
            Ok(_) => {}
            Err(ClientError::Corrupt { .. }) => {
                consumer
                    .skip_damaged()
                    .unwrap_or_else(|e| panic!("{context}: moving past damage: {e}"));
            }
            Err(other) => panic!("{context}: reading: {other}"),
        }
    }
    for missing in expected..state.acked {
        assert!(
            state.lost.contains(&missing),
            "{context}: the log ends before message {missing}, but {} were acknowledged",
            state.acked
        );
    }
    state.lost.extend(newly_lost);
    state.next = expected;
    read
}

/// A seed from the clock, for runs that do not give one.
pub fn seed_from_clock() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}
