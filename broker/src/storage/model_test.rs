//! The log as a state machine, checked against a model (issue 8, item 18).
//!
//! Proptest generates sequences of operations — appends in every ack mode,
//! polls of the log's writer and flush tasks one await point at a time,
//! flush requests, timer ticks, retention, idle-file closing, reads, injected
//! write and fdatasync failures, damage to a closed segment, graceful
//! restarts, `kill -9` and power cuts (unsynced bytes lost, the active
//! segment's unsynced tail torn, zero-filled or flipped) — and runs them
//! against a `PartitionLog` on the in-memory disk (`memory.rs`) and against
//! a model that is only a list of the messages appended.
//!
//! What must hold, at every step and across every crash:
//! - offsets are byte positions: an append gets the model's end offset;
//! - reading from the start yields exactly the model's messages, in order,
//!   at their offsets (only a message damaged on purpose fails its CRC, and
//!   a reader can step over it);
//! - a producer told "stored" for `acks = flushed` never loses its messages
//!   to any crash; for `acks = written` not to a process crash;
//! - a crash only ever cuts the log back to a message boundary, and offsets
//!   are never handed out twice for different messages;
//! - a failure is reported (a dropped tail, a poisoned partition) — never
//!   silence, and a poisoned partition takes no appends until reopened.
//!
//! `RINGLOG_MODEL_CASES` sets the number of cases (default 1,500).

#![allow(
    clippy::too_many_lines,
    reason = "a model test's steps and checks read top to bottom"
)]

use super::io::Storage;
use super::memory::{MemoryFaults, MemoryStorage, PowerCut, Tail};
use super::partition_log::{self, Appended, LogSettings, NotStored, PartitionLog, Shared};
use super::segment::segment_file_name;
use super::StorageError;
use proptest::prelude::*;
use protocol::codec::AckMode;
use protocol::message::{encode_message, MessageSetIter};
use protocol::stored::{unit, MessageFormat, Unit};
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Waker};

const DIR: &str = "/data/t-0";

#[derive(Debug, Clone)]
enum Op {
    /// Append `values` (lengths) as one message set.
    Append { lengths: Vec<usize>, acks: AckMode },
    /// Poll one of the log's tasks once.
    Poll(usize),
    /// Run the log's tasks until none is left.
    RunAll,
    /// Ask for a flush.
    Flush,
    /// The shard's timer (with a recovery point).
    Tick,
    /// Retention, then unlink what it removed.
    Retention,
    /// Close every idle file.
    CloseIdle,
    /// Read the whole log back from a message, `bytes_max` at a time.
    Read { from: usize, bytes_max: u32 },
    /// The next segment write fails.
    FailWrite { transient: bool },
    /// The next fdatasync fails.
    FailSync,
    /// Flip a byte in a closed, flushed segment (bit rot).
    DamageClosed { segment: usize, at: usize },
    /// Flush everything, write the recovery point, stop, reopen.
    Restart,
    /// `kill -9` (None) or a power cut, then reopen.
    Crash(Option<PowerCut>),
    /// Time passes on the disk's clock (milliseconds): the flush interval,
    /// the waiting-fetch flush and refusals after a failure come due.
    Advance(u64),
    /// A consumer's fetch starts waiting at the flushed end.
    FetchWaits,
    /// The oldest waiting fetch is answered.
    FetchAnswered,
}

fn op() -> impl Strategy<Value = Op> {
    let acks = prop_oneof![
        Just(AckMode::None),
        Just(AckMode::Written),
        Just(AckMode::Flushed)
    ];
    let tail = prop_oneof![Just(Tail::Intact), Just(Tail::Zeroed), Just(Tail::Flipped)];
    let power = prop_oneof![
        1 => Just(None),
        2 => (0u16..=1000, tail).prop_map(|(kept_per_mille, tail)| Some(PowerCut {
            kept_per_mille,
            tail,
            torn: None,
        })),
    ];
    prop_oneof![
        30 => (prop::collection::vec(0usize..120, 1..4), acks)
            .prop_map(|(lengths, acks)| Op::Append { lengths, acks }),
        25 => any::<usize>().prop_map(Op::Poll),
        4 => Just(Op::RunAll),
        4 => Just(Op::Flush),
        4 => Just(Op::Tick),
        3 => Just(Op::Retention),
        2 => Just(Op::CloseIdle),
        3 => (any::<usize>(), 1u32..600).prop_map(|(from, bytes_max)| Op::Read { from, bytes_max }),
        1 => any::<bool>().prop_map(|transient| Op::FailWrite { transient }),
        1 => Just(Op::FailSync),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(segment, at)| Op::DamageClosed { segment, at }),
        2 => Just(Op::Restart),
        3 => power.prop_map(Op::Crash),
        4 => (1u64..300).prop_map(Op::Advance),
        2 => Just(Op::FetchWaits),
        2 => Just(Op::FetchAnswered),
    ]
}

/// One message the model knows: where it is and what it says.
#[derive(Debug, Clone)]
struct Known {
    offset: u64,
    end: u64,
    value: Vec<u8>,
}

type Waiting = Pin<Box<dyn Future<Output = Result<(), NotStored>>>>;

/// A producer waiting for its acknowledgement.
struct Waiter {
    end: u64,
    acks: AckMode,
    future: Waiting,
}

struct Harness {
    storage: MemoryStorage,
    settings: LogSettings,
    log: Shared<MemoryStorage>,
    /// Every message in the log's lineage, in offset order.
    model: Vec<Known>,
    waiters: Vec<Waiter>,
    /// Fetches waiting at the flushed end (dropped with their log).
    fetches: Vec<partition_log::WaitingFetch<MemoryStorage>>,
    /// Highest end a producer was told is flushed / written.
    acked_flushed: u64,
    acked_written: u64,
    /// Offsets of messages damaged on purpose.
    damaged: BTreeSet<u64>,
    /// A fault was injected since the last reopen (a refusal is allowed).
    faulted: bool,
    next_value: u64,
    epoch: u64,
}

fn dir() -> &'static Path {
    Path::new(DIR)
}

fn value_for(sequence: u64, len: usize) -> Vec<u8> {
    let mut value = format!("m{sequence}:").into_bytes();
    value.extend((0..len).map(|i| (sequence as usize * 31 + i) as u8));
    value
}

impl Harness {
    fn new(settings: LogSettings) -> Harness {
        let storage = MemoryStorage::new();
        let log = open(&storage, settings);
        Harness {
            storage,
            settings,
            log,
            model: Vec::new(),
            waiters: Vec::new(),
            fetches: Vec::new(),
            acked_flushed: 0,
            acked_written: 0,
            damaged: BTreeSet::new(),
            faulted: false,
            next_value: 0,
            epoch: 0,
        }
    }

    fn model_end(&self) -> u64 {
        self.model.last().map_or(0, |m| m.end)
    }

    fn is_boundary(&self, offset: u64) -> bool {
        offset == 0 || self.model.iter().any(|m| m.end == offset)
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Append { lengths, acks } => self.append(lengths, *acks),
            Op::Poll(index) => {
                self.storage.poll_task(*index);
            }
            Op::RunAll => self.storage.run_until_idle(),
            Op::Flush => partition_log::request_sync(&self.log, true),
            Op::Tick => {
                let now = self.storage.now();
                partition_log::tick(&self.log, now, true);
            }
            Op::Retention => {
                let removed = self
                    .log
                    .borrow_mut()
                    .enforce_retention(partition_log::now_ms());
                for retired in removed {
                    self.storage.remove_file(&retired.path).unwrap();
                }
                let start = self.log.borrow().start_offset();
                assert!(self.is_boundary(start), "retention cut inside a message");
            }
            Op::CloseIdle => {
                let later = self.storage.now() + std::time::Duration::from_secs(3600);
                self.log
                    .borrow_mut()
                    .close_idle_files(later, std::time::Duration::ZERO);
            }
            Op::Read { from, bytes_max } => {
                let start = self.log.borrow().start_offset();
                let visible: Vec<u64> = self
                    .model
                    .iter()
                    .filter(|m| m.offset >= start)
                    .map(|m| m.offset)
                    .collect();
                let at = if visible.is_empty() {
                    start
                } else {
                    visible[from % visible.len()]
                };
                self.check_read(at, *bytes_max, u64::MAX);
            }
            Op::FailWrite { transient } => {
                self.faulted = true;
                let errno = if *transient { libc::ENOSPC } else { libc::EIO };
                self.storage.set_faults(MemoryFaults {
                    write_errno: Some(errno),
                    fdatasync_errno: None,
                });
            }
            Op::FailSync => {
                self.faulted = true;
                self.storage.set_faults(MemoryFaults {
                    write_errno: None,
                    fdatasync_errno: Some(libc::EIO),
                });
            }
            Op::DamageClosed { segment, at } => self.damage_closed(*segment, *at),
            Op::Restart => self.restart(),
            Op::Crash(power) => self.crash(power.clone()),
            Op::Advance(ms) => self.storage.advance(std::time::Duration::from_millis(*ms)),
            Op::FetchWaits => self.fetches.push(partition_log::fetch_waits(&self.log)),
            Op::FetchAnswered => {
                if !self.fetches.is_empty() {
                    self.fetches.remove(0);
                }
            }
        }
        self.poll_waiters();
        self.follow_rollbacks();
        self.check_offsets();
    }

    fn append(&mut self, lengths: &[usize], acks: AckMode) {
        let mut set = Vec::new();
        let mut known = Vec::new();
        let mut at = self.model_end();
        for &len in lengths {
            let value = value_for(self.next_value, len);
            self.next_value += 1;
            let before = set.len();
            encode(self.settings.format, &mut set, &value);
            let stored = (set.len() - before) as u64;
            known.push(Known {
                offset: at,
                end: at + stored,
                value,
            });
            at += stored;
        }
        let poisoned = self.log.borrow().poisoned().is_some();
        match partition_log::append(&self.log, &set, lengths.len() as u32, acks) {
            Ok(appended) => {
                assert!(!poisoned, "a poisoned log took an append");
                assert_eq!(
                    (appended.base, appended.end),
                    (self.model_end(), at),
                    "offsets are byte positions"
                );
                self.model.extend(known);
                if acks != AckMode::None {
                    self.wait(appended, acks);
                }
            }
            Err(StorageError::Poisoned(_)) => {
                assert!(poisoned, "refused as poisoned, but not poisoned");
            }
            Err(StorageError::Unavailable { .. }) => {
                assert!(self.faulted, "refused without a fault");
            }
            Err(other) => panic!("append failed: {other}"),
        }
    }

    fn wait(&mut self, appended: Appended, acks: AckMode) {
        let log = self.log.clone();
        self.waiters.push(Waiter {
            end: appended.end,
            acks,
            future: Box::pin(async move { partition_log::stored(&log, appended, acks).await }),
        });
    }

    fn poll_waiters(&mut self) {
        let mut cx = Context::from_waker(Waker::noop());
        let mut still = Vec::new();
        for mut waiter in std::mem::take(&mut self.waiters) {
            match waiter.future.as_mut().poll(&mut cx) {
                std::task::Poll::Pending => still.push(waiter),
                std::task::Poll::Ready(Ok(())) => {
                    let l = self.log.borrow();
                    if waiter.acks == AckMode::Flushed {
                        assert!(l.flushed_offset() >= waiter.end);
                        self.acked_flushed = self.acked_flushed.max(waiter.end);
                    } else {
                        assert!(l.written_offset() >= waiter.end);
                    }
                    self.acked_written = self.acked_written.max(waiter.end);
                }
                std::task::Poll::Ready(Err(NotStored::Deleted)) => {
                    panic!("nothing was deleted")
                }
                std::task::Poll::Ready(Err(_)) => {
                    assert!(self.faulted, "a produce failed without a fault");
                }
            }
        }
        self.waiters = still;
    }

    /// After a transient failure the log drops its unwritten tail: so does
    /// the model (what was acknowledged must not be in it).
    fn follow_rollbacks(&mut self) {
        let (epoch, end) = {
            let l = self.log.borrow();
            (l.epoch(), l.end_offset())
        };
        if epoch == self.epoch {
            return;
        }
        self.epoch = epoch;
        assert!(self.faulted, "a rollback without a fault");
        assert!(self.is_boundary(end), "a rollback inside a message");
        assert!(
            end >= self.acked_written,
            "a rollback dropped acknowledged messages"
        );
        self.model.retain(|m| m.end <= end);
    }

    fn check_offsets(&self) {
        let l = self.log.borrow();
        assert_eq!(l.end_offset(), self.model_end(), "end offset");
        assert!(self.is_boundary(l.flushed_offset()));
        assert!(self.is_boundary(l.written_offset()));
        assert!(self.is_boundary(l.start_offset()));
    }

    /// Reads from `at` to the flushed offset and compares with the model.
    /// A message that fails its CRC must be one damaged on purpose, or lie
    /// at or above `torn_from` (bytes a power cut may have damaged; they are
    /// returned, to be known as damaged from now on).
    fn check_read(&self, at: u64, bytes_max: u32, torn_from: u64) -> Vec<u64> {
        let mut torn = Vec::new();
        let flushed = self.log.borrow().flushed_offset();
        let mut expected = self
            .model
            .iter()
            .filter(|m| m.offset >= at && m.end <= flushed);
        let mut offset = at;
        let mut max = bytes_max;
        while offset < flushed {
            let slice = self
                .storage
                .block_on(partition_log::read(&self.log, offset, max))
                .unwrap_or_else(|e| panic!("read at {offset}: {e}"))
                .expect("flushed bytes are readable");
            let bytes = self
                .storage
                .block_on(crate::storage::io::SegmentFile::read_at(
                    &*slice.file,
                    slice.position,
                    slice.len as usize,
                ))
                .unwrap();
            assert_eq!(bytes.len(), slice.len as usize, "short read");
            // The tasks polled while this read waited may have flushed more;
            // compare up to the flushed offset this check began with.
            let bytes = &bytes[..bytes.len().min((flushed - offset) as usize)];
            let mut progressed = false;
            for message in units(self.settings.format, bytes, offset) {
                let want = expected.next().unwrap_or_else(|| {
                    panic!(
                        "more messages than the model: {:?} at {offset}, flushed {flushed}, model {:?}",
                        message.as_ref().map(|m| m.offset),
                        self.model.iter().map(|m| (m.offset, m.end)).collect::<Vec<_>>()
                    )
                });
                match message {
                    Ok(m) => {
                        assert_eq!((m.offset, m.value), (want.offset, &want.value[..]));
                    }
                    Err(error) => {
                        if want.offset >= torn_from {
                            torn.push(want.offset);
                        } else {
                            assert!(
                                self.damaged.contains(&want.offset),
                                "{error} at {} of an undamaged message",
                                want.offset
                            );
                        }
                        // A consumer steps over it and goes on.
                        offset = want.end;
                        progressed = true;
                        break;
                    }
                }
                progressed = true;
                offset = want.end;
            }
            if !progressed {
                // A message larger than `bytes_max`: ask for more.
                max = max.saturating_mul(2);
            }
        }
        assert!(
            expected.next().is_none(),
            "the log lacks messages the model has"
        );
        torn
    }

    fn damage_closed(&mut self, segment: usize, at: usize) {
        let (closed, flushed) = {
            let l = self.log.borrow();
            let bases: Vec<u64> = self
                .model
                .iter()
                .map(|m| m.offset)
                .filter(|&o| o >= l.start_offset())
                .collect();
            (segment_bases(&self.storage, &bases), l.flushed_offset())
        };
        // Only segments before the active one, wholly flushed.
        let candidates: Vec<(u64, u64)> = closed
            .windows(2)
            .map(|w| (w[0], w[1]))
            .filter(|&(_, next)| next <= flushed)
            .collect();
        if candidates.is_empty() {
            return;
        }
        let (base, next) = candidates[segment % candidates.len()];
        // Rot hits single messages: recovery follows runs of damaged
        // messages within a segment and across one roll, not a chain of
        // wholly damaged segments, so victims have intact neighbours.
        let intact = |i: usize| {
            self.model
                .get(i)
                .is_none_or(|m| !self.damaged.contains(&m.offset))
        };
        let victims: Vec<&Known> = self
            .model
            .iter()
            .enumerate()
            .filter(|(_, m)| m.offset >= base && m.end <= next)
            .filter(|(i, _)| intact(*i) && intact(i + 1) && (*i == 0 || intact(i - 1)))
            .map(|(_, m)| m)
            .collect();
        if victims.is_empty() {
            return;
        }
        let victim = victims[at % victims.len()];
        // A byte of the value (past the header): the length still frames it.
        let position = (victim.end - 1 - base) as usize;
        let path = dir().join(segment_file_name(base));
        let mut byte = self.storage.contents(&path).unwrap()[position];
        byte ^= 0x5a;
        self.storage.overwrite(&path, position, &[byte]).unwrap();
        self.damaged.insert(victim.offset);
    }

    fn restart(&mut self) {
        let synced = self
            .storage
            .block_on(partition_log::sync_all(&self.log))
            .is_ok();
        if synced {
            self.log.borrow_mut().checkpoint(true).unwrap();
            self.poll_waiters();
            self.follow_rollbacks();
        }
        let end = self.log.borrow().end_offset();
        self.reopen(None);
        if synced {
            assert_eq!(
                self.log.borrow().end_offset(),
                end,
                "a clean restart keeps everything"
            );
        }
    }

    fn crash(&mut self, power: Option<PowerCut>) {
        let written = self.log.borrow().written_offset();
        let power = power.map(|cut| PowerCut {
            // Damage goes to the active segment's unsynced tail; other files
            // only lose part of theirs.
            torn: self.active_segment(),
            ..cut
        });
        let killed_only = power.is_none();
        self.reopen(power);
        let end = self.log.borrow().end_offset();
        if killed_only {
            assert!(
                end >= written.min(self.model_end()),
                "kill -9 lost written bytes: end {end} < written {written}"
            );
        }
    }

    fn active_segment(&self) -> Option<PathBuf> {
        let bases: Vec<u64> = self.model.iter().map(|m| m.offset).collect();
        segment_bases(&self.storage, &bases)
            .last()
            .map(|&b| dir().join(segment_file_name(b)))
    }

    /// Drops the log and everything waiting on it, crashes the disk as
    /// asked, opens the log again and checks what it recovered.
    fn reopen(&mut self, power: Option<PowerCut>) {
        self.waiters.clear();
        self.fetches.clear();
        let (old_start, flushed) = {
            let l = self.log.borrow();
            (l.start_offset(), l.flushed_offset())
        };
        // Recovery keeps a message damaged in the middle when valid messages
        // follow it (rot, as far as it can tell): after a power cut that can
        // be a message the cut tore, never one below the flushed offset.
        let torn_from = if power.is_some() { flushed } else { u64::MAX };
        let placeholder = open(&MemoryStorage::new(), self.settings);
        drop(std::mem::replace(&mut self.log, placeholder));
        self.storage.crash(power);
        self.log = open(&self.storage, self.settings);
        self.faulted = false;
        self.epoch = self.log.borrow().epoch();
        let (start, end, flushed) = {
            let l = self.log.borrow();
            (l.start_offset(), l.end_offset(), l.flushed_offset())
        };
        assert!(
            self.is_boundary(end),
            "recovery cut inside a message: {end}"
        );
        assert!(end <= self.model_end(), "recovery invented bytes");
        // Every flush-acknowledged message survives, except one damaged on
        // purpose at the very end of what is left: recovery cuts a bad last
        // message as a torn tail (it was unreadable anyway).
        let lost: Vec<u64> = self
            .model
            .iter()
            .filter(|m| m.end > end && m.end <= self.acked_flushed)
            .filter(|m| !self.damaged.contains(&m.offset))
            .map(|m| m.offset)
            .collect();
        assert!(
            lost.is_empty(),
            "a restart lost flush-acknowledged messages at {lost:?}: end {end}, acked {}",
            self.acked_flushed
        );
        assert_eq!(flushed, end, "what recovery keeps is flushed");
        // A power cut may bring back a segment retention had unlinked.
        assert!(
            start <= old_start.max(end),
            "the start moved forward in a crash"
        );
        self.model.retain(|m| m.end <= end);
        self.damaged.retain(|&o| o < end);
        // Offsets past `end` now go to new messages.
        self.acked_flushed = self.acked_flushed.min(end);
        // kill -9 keeps what was written (crash() checks it); a power cut may not.
        self.acked_written = self.acked_written.min(end);
        let torn = self.check_read(start, 1 << 16, torn_from);
        self.damaged.extend(torn);
    }
}

/// The base offsets of the segment files on the disk, among `offsets`.
fn segment_bases(storage: &MemoryStorage, offsets: &[u64]) -> Vec<u64> {
    let mut bases: Vec<u64> = storage
        .list(dir())
        .unwrap_or_default()
        .iter()
        .filter_map(|e| super::segment::parse_segment_file_name(&e.name))
        .filter(|b| offsets.contains(b))
        .collect();
    bases.sort_unstable();
    bases
}

fn open(storage: &MemoryStorage, settings: LogSettings) -> Shared<MemoryStorage> {
    let (log, _) = storage
        .block_on(PartitionLog::open(storage.clone(), dir(), "t-0", settings))
        .unwrap_or_else(|e| panic!("opening the log: {e}"));
    Rc::new(RefCell::new(log))
}

fn settings() -> impl Strategy<Value = LogSettings> {
    (
        200u64..2_000,
        1u64..20,
        prop_oneof![Just(0u64), 400u64..4_000],
        prop_oneof![Just(3_600_000u64), 1u64..100],
        prop_oneof![Just(None), Just(Some(0u64)), (1u64..50).prop_map(Some)],
        prop_oneof![Just(MessageFormat::One), Just(MessageFormat::Two)],
    )
        .prop_map(
            |(
                segment_bytes,
                flush_messages,
                retention_bytes,
                flush_interval_ms,
                waiting,
                format,
            )| {
                LogSettings {
                    segment_bytes,
                    flush_messages,
                    flush_interval_ms,
                    retention_ms: 7 * 24 * 3_600_000,
                    retention_bytes,
                    // The clock is the disk's now, so the waiting-fetch
                    // flush runs here too (it used glommio's timer before).
                    waiting_fetch_flush: waiting.map(std::time::Duration::from_millis),
                    format,
                    timestamps: protocol::batch::TimestampType::Create,
                    producers_max: 1000,
                }
            },
        )
}

/// Appends `value` as one unit of `format`: a message, or a batch of one
/// record (the log stamps it).
fn encode(format: MessageFormat, out: &mut Vec<u8>, value: &[u8]) {
    match format {
        MessageFormat::One => encode_message(out, None, value),
        MessageFormat::Two => {
            let mut writer = protocol::batch::write::BatchWriter::new();
            writer.push(0, None, Some(value), &[]);
            out.extend_from_slice(&writer.finish(protocol::batch::write::Producer::NONE));
        }
    }
}

/// One unit read back: its offset and value, or why it is damaged.
struct ReadUnit<'a> {
    offset: u64,
    value: &'a [u8],
}

/// The units of `bytes` read at `offset`, as a consumer would: up to an
/// incomplete one at the end, or the first damaged one (then its error).
fn units(format: MessageFormat, bytes: &[u8], offset: u64) -> Vec<Result<ReadUnit<'_>, String>> {
    let mut out = Vec::new();
    match format {
        MessageFormat::One => {
            for message in MessageSetIter::new(bytes, offset) {
                let failed = message.is_err();
                out.push(
                    message
                        .map(|m| ReadUnit {
                            offset: m.offset,
                            value: m.value,
                        })
                        .map_err(|e| e.to_string()),
                );
                if failed {
                    break;
                }
            }
        }
        MessageFormat::Two => {
            let mut at = 0usize;
            while at < bytes.len() {
                match unit(format, &bytes[at..], offset + at as u64) {
                    Unit::Whole { len, .. } => {
                        let records = &bytes[at + protocol::batch::HEADER_BYTES..at + len];
                        let (record, _) = protocol::batch::records::read_record(records)
                            .unwrap_or_else(|e| panic!("a whole batch's record: {e}"));
                        out.push(Ok(ReadUnit {
                            offset: offset + at as u64,
                            value: record.value.unwrap_or_default(),
                        }));
                        at += len;
                    }
                    Unit::Incomplete { .. } => break,
                    Unit::Damaged { error, .. } => {
                        out.push(Err(error.to_string()));
                        break;
                    }
                }
            }
        }
    }
    out
}

fn cases() -> u32 {
    std::env::var("RINGLOG_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_500)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_log_matches_its_model_through_crashes(
        settings in settings(),
        ops in prop::collection::vec(op(), 1..150),
    ) {
        let mut harness = Harness::new(settings);
        for op in &ops {
            harness.apply(op);
        }
        // Whatever happened, a graceful restart keeps what is there.
        harness.restart();
    }
}

/// The waiting-fetch flush runs on the disk's clock: nothing before the
/// delay has passed on it, the flush once it has (it used glommio's timer,
/// so the model test had to switch it off).
#[test]
fn a_waiting_fetch_flush_comes_due_on_the_disks_clock() {
    let storage = MemoryStorage::new();
    let log = open(
        &storage,
        LogSettings {
            segment_bytes: 1 << 20,
            flush_messages: 1_000,
            flush_interval_ms: 3_600_000,
            retention_ms: 7 * 24 * 3_600_000,
            retention_bytes: 0,
            waiting_fetch_flush: Some(std::time::Duration::from_millis(5)),
            format: MessageFormat::One,
            timestamps: protocol::batch::TimestampType::Create,
            producers_max: 1000,
        },
    );
    let mut set = Vec::new();
    encode_message(&mut set, None, b"tail me");
    let waiting = partition_log::fetch_waits(&log);
    partition_log::append(&log, &set, 1, AckMode::None).unwrap();
    for i in 0..100 {
        storage.poll_task(i);
    }
    assert_eq!(log.borrow().flushed_offset(), 0, "not before the delay");
    storage.advance(std::time::Duration::from_millis(5));
    for i in 0..100 {
        storage.poll_task(i);
    }
    assert_eq!(log.borrow().flushed_offset(), set.len() as u64);
    drop(waiting);
}
