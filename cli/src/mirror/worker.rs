//! A mirror's workers: each reads its partitions of one source shard in
//! one long-polling MultiFetch and appends what came to the copies, where
//! they end; a failure it cannot ride out ends the mirror, one that only
//! concerns a partition (a fork, a recreated source topic, a copy that
//! records another source) stops that partition.

use super::{passes, Copies, Plan, APPEND_BYTES_MIN, IDLE, LONG_POLL, READ_BYTES, READ_BYTES_MAX};
use anyhow::Context;
use protocol::client::{Client, ClientError, MirrorChunk, MirrorRead, OffsetSpec};
use protocol::codec::AckMode;
use protocol::stored::{framed_units, unit_len, MessageFormat};
use protocol::ErrorCode;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A worker: copies the partitions dealt to it until the mirror ends. A
/// failure the mirror cannot ride out ends the mirror.
pub(super) fn work(index: usize, source: &Client, target: &Client, copies: &Copies) {
    let mut quiet = false;
    let mut turn = 0usize;
    while !copies.stop.load(Ordering::Relaxed) {
        match round(index, source, target, copies, quiet, turn) {
            Ok(moved) => quiet = !moved,
            Err(error) => {
                if let Ok(mut failure) = copies.failure.lock() {
                    failure.get_or_insert(error);
                }
                copies.stop.store(true, Ordering::Relaxed);
                return;
            }
        }
        turn = turn.wrapping_add(1);
    }
}

/// A partition due for a read.
struct Due {
    key: (String, u32),
    /// Where its copy ends (`None`: looked up first).
    position: Option<u64>,
    /// A read grown for a large message.
    grown: Option<u32>,
    /// The source shard that serves it.
    owner: String,
    /// The epoch of the last chunk appended.
    last_epoch: i32,
    plan: Plan,
}

/// A read's failure the worker rides out: a broker away or busy, or the
/// source topic unknown where it was asked (its leader moved, or it was
/// deleted: the next scan says which, and a topic of that name created
/// again answers UNKNOWN_TOPIC_ID to the reads, which stop the copy).
fn rides_out(error: &ClientError) -> bool {
    passes(error) || error.code() == Some(ErrorCode::UnknownTopic)
}

/// The partitions worker `index` reads now.
fn due(copies: &Copies, index: usize, now: Instant) -> Vec<Due> {
    copies
        .lock()
        .iter()
        .filter(|(_, c)| c.mine && c.stopped.is_none() && c.worker == index && c.retry_at <= now)
        .filter_map(|(key, c)| {
            Some(Due {
                key: key.clone(),
                position: c.position.filter(|_| !c.recheck),
                grown: c.read_grown,
                owner: c.owner.clone()?,
                last_epoch: if c.position.is_some() && !c.recheck {
                    c.last_epoch
                } else {
                    -1
                },
                plan: c.plan.clone(),
            })
        })
        .collect()
}

/// The reads worker `index` sends now, by source shard: each due
/// partition at its copy's end (looked up, and checked against the source,
/// when not known).
fn reads(
    index: usize,
    source: &Client,
    target: &Client,
    copies: &Copies,
) -> anyhow::Result<BTreeMap<String, Vec<(MirrorRead, Plan)>>> {
    let due = due(copies, index, Instant::now());
    let mut by_shard: BTreeMap<String, Vec<(MirrorRead, Plan)>> = BTreeMap::new();
    let append_max = copies.append_max.load(Ordering::Relaxed);
    for Due {
        key,
        position,
        grown,
        owner,
        last_epoch,
        plan,
    } in due
    {
        let max_bytes = grown.unwrap_or(READ_BYTES.min(append_max));
        let offset = match position {
            Some(position) => position,
            None => match resume(source, target, &key.0, &plan, key.1) {
                Ok(Ok(position)) => position,
                Ok(Err(why)) => {
                    copies.stop_one(&key, why);
                    continue;
                }
                Err(error) if rides_out(&error) => {
                    copies.retry_later(&key, &error);
                    continue;
                }
                Err(error) => {
                    return Err(error).with_context(|| format!("mirroring {}-{}", key.0, key.1))
                }
            },
        };
        let read = MirrorRead {
            topic: key.0,
            partition: key.1,
            offset,
            max_bytes,
            format: plan.format,
            topic_id: plan.topic_id.clone(),
            last_epoch,
        };
        by_shard.entry(owner).or_default().push((read, plan));
    }
    Ok(by_shard)
}

/// One read of each source shard a worker copies from, and the appends of
/// what it answered; true when there is more to do at once. After a quiet
/// round, a worker of one shard waits in the read for news (the source
/// answers as soon as any of its partitions has some); one of several
/// shards polls them after a pause.
fn round(
    index: usize,
    source: &Client,
    target: &Client,
    copies: &Copies,
    quiet: bool,
    turn: usize,
) -> anyhow::Result<bool> {
    let by_shard = reads(index, source, target, copies)?;
    if by_shard.is_empty() {
        std::thread::sleep(IDLE);
        return Ok(false);
    }
    let wait = if quiet && by_shard.len() == 1 {
        LONG_POLL
    } else {
        Duration::ZERO
    };
    let mut more = false;
    let several = by_shard.len() > 1;
    for (address, mut parts) in by_shard {
        // Past the read's byte budget a shard answers nothing: each
        // partition comes first in turn.
        let len = parts.len();
        parts.rotate_left(turn % len);
        let (reads, plans): (Vec<MirrorRead>, Vec<Plan>) = parts.into_iter().unzip();
        copies.mark(false);
        let answers = match source.mirror_read_many(&address, &reads, wait) {
            Ok(answers) => answers,
            Err(error) if rides_out(&error) => {
                for read in &reads {
                    copies.retry_later(&(read.topic.clone(), read.partition), &error);
                }
                continue;
            }
            Err(error) => return Err(error).with_context(|| format!("reading from {address}")),
        };
        for ((read, plan), answer) in reads.iter().zip(&plans).zip(answers) {
            more |= settle(target, read, plan, answer, copies)
                .with_context(|| format!("mirroring {}-{}", read.topic, read.partition))?;
        }
    }
    if several && !more {
        std::thread::sleep(IDLE);
    }
    Ok(more)
}

/// Appends one partition's answer to its copy; true when there is more
/// to copy at once.
#[expect(
    clippy::too_many_lines,
    reason = "one partition's answer applied in order: errors, the copy's end, the append, the metrics"
)]
fn settle(
    target: &Client,
    read: &MirrorRead,
    plan: &Plan,
    answer: Result<MirrorChunk, ClientError>,
    copies: &Copies,
) -> Result<bool, ClientError> {
    let key = (read.topic.clone(), read.partition);
    let position = read.offset;
    let chunk = match answer {
        Ok(chunk) => chunk,
        Err(error) if error.code() == Some(ErrorCode::OffsetOutOfRange) => {
            // Below the source's start: its retention outran the mirror, a
            // gap the mirror cannot fill. Past its end: the source's log
            // was cut under the copy (an unclean election) or is another
            // log. Either way say so and stop, never skip or fork silently.
            let why = match error.offset_range() {
                Some((start, _)) if position < start => format!(
                    "the source no longer holds offset {position} (it starts at {start}): its retention outran the mirror"
                ),
                Some((_, end)) => format!(
                    "the source's log ends at {end}, below the copy's {position}: it was cut under the copy (an unclean election?) or is another log"
                ),
                None => error.to_string(),
            };
            copies.stop_one(&key, format!("{why}; the copy keeps what it has"));
            return Ok(false);
        }
        Err(error) if error.code() == Some(ErrorCode::UnknownTopicId) => {
            // The name now belongs to another topic: its bytes are another
            // log, never appended to this copy.
            copies.stop_one(&key, recreated(&read.topic, &plan.topic_id));
            return Ok(false);
        }
        Err(error) if rides_out(&error) => {
            copies.retry_later(&key, &error);
            return Ok(false);
        }
        Err(error) => return Err(error),
    };
    if let Some(at) = chunk.forked_at {
        // Decided: stop, not truncate. The copy's bytes past the fork may
        // have been read (and acted on) in the target already, and a mirror
        // has no right to cut them; the operator chooses (design record
        // 0014): delete the copy and mirror again, or promote it.
        copies.stop_one(
            &key,
            format!(
                "the source's history forked at offset {at}, below the copy's end {position}: its epoch {} ends there (an unclean election), and the source holds other bytes from there; the copy keeps what it has, {} bytes the source no longer holds",
                read.last_epoch,
                position - at.min(position)
            ),
        );
        return Ok(false);
    }
    let source_end = chunk.offsets.flushed_offset.max(position);
    copies.update(&key, |c| {
        c.answered_at = Some(Instant::now());
        // The read's offset was looked up afresh if it had to be.
        c.recheck = false;
        if position < source_end {
            c.behind_since.get_or_insert_with(Instant::now);
        }
        c.end_at_start.get_or_insert(source_end);
        c.source_end = source_end;
    });
    if chunk.cut {
        // A message larger than a read is read again with room for it (up
        // to the largest a broker takes), never taken for the end of the
        // log.
        copies.update(&key, |c| {
            c.read_grown = Some(read.max_bytes.saturating_mul(8).min(READ_BYTES_MAX));
            c.position = c.mine.then_some(position);
        });
        return Ok(true);
    }
    if chunk.messages == 0 {
        // Nothing read: at the end when the source's visible log ends
        // here, else this partition was past the read's byte budget (its
        // turn comes) — never taken for the end.
        let at_end = position >= chunk.offsets.flushed_offset;
        copies.update(&key, |c| {
            c.at_end = at_end;
            c.last_error = None;
            if at_end {
                c.behind_since = None;
            }
            c.position = c.mine.then_some(position);
        });
        return Ok(false);
    }
    let chunk = fitted(
        chunk,
        copies.append_max.load(Ordering::Relaxed),
        read.format,
    );
    // acks=written: the mirror keeps no state, so bytes a target broker
    // loses to a power cut before flushing are copied again from where its
    // log ends after the restart (the next append there is refused with
    // that end); waiting for each chunk's fdatasync would only slow it.
    match target.mirror_append(
        &plan.target,
        read.partition,
        &chunk,
        AckMode::Written,
        &plan.source,
    ) {
        Ok(end) => {
            copies.mark(true);
            copies.update(&key, |c| {
                c.position = c.mine.then_some(end);
                c.last_epoch = chunk.epoch;
                c.last_error = None;
                c.at_end = false;
                c.read_grown = None;
                c.bytes += chunk.bytes.len() as u64;
                c.messages += u64::from(chunk.messages);
                if end >= source_end {
                    c.behind_since = None;
                } else {
                    c.behind_since.get_or_insert_with(Instant::now);
                }
            });
            Ok(true)
        }
        Err(error) if error.code() == Some(ErrorCode::OffsetOutOfRange) => {
            // The copy ends elsewhere (another mirror of the same name
            // copied it meanwhile, or the target lost unflushed bytes):
            // resume where it ends, which the refusal names.
            let end = error.offset_range().map(|(_, end)| end);
            copies.update(&key, |c| {
                c.position = end.filter(|_| c.mine);
                c.last_epoch = -1;
            });
            Ok(true)
        }
        Err(error) if error.code() == Some(ErrorCode::FrameTooLarge) && chunk.messages > 1 => {
            // The target's max_request_bytes is below this append: smaller
            // appends from now on (the refused one is copied again).
            let smaller = (chunk.bytes.len() as u32 / 2).max(APPEND_BYTES_MIN);
            let before = copies.append_max.fetch_min(smaller, Ordering::Relaxed);
            if smaller < before {
                eprintln!(
                    "the target refused a {} byte append as too large: appending at most {smaller} bytes at a time",
                    chunk.bytes.len()
                );
            }
            Ok(true)
        }
        Err(error) if error.code() == Some(ErrorCode::MirroredPartition) => {
            // The copy records another source (made or changed since this
            // mirror looked): nothing was stored.
            copies.stop_one(&key, error.to_string());
            Ok(false)
        }
        Err(error) if error.code() == Some(ErrorCode::FrameTooLarge) => {
            Err(ClientError::Protocol(format!(
                "the message at offset {position} ({} bytes) is larger than the target takes in one request (its max_request_bytes); raise it there: {error}",
                chunk.bytes.len()
            )))
        }
        Err(error) if rides_out(&error) => {
            copies.retry_later_at_target(&key, &error);
            Ok(false)
        }
        Err(error) => Err(error),
    }
}

/// Why a copy stops when its source topic's name now names another.
fn recreated(topic: &str, id: &str) -> String {
    format!(
        "the source topic {topic} was deleted and created again (it is no longer topic id {id}): the copy keeps the old topic's bytes; delete it to mirror the new topic, or mirror that under --prefix"
    )
}

/// How many bytes below the copy's end a resuming mirror compares with
/// the source (one digest each side), to find a fork that happened while
/// no mirror ran.
const RESUME_CHECK_BYTES: u64 = 64 << 10;

/// Where a partition's copy resumes: the target's end, or for an empty
/// copy the source's earliest offset (its retention may have dropped the
/// start). `Ok(Err(why))`: the copy's last bytes are not the source's
/// there (its history forked while no mirror ran): nothing is copied.
fn resume(
    source: &Client,
    target: &Client,
    topic: &str,
    plan: &Plan,
    partition: u32,
) -> Result<Result<u64, String>, ClientError> {
    let copy = plan.target.as_str();
    // Where the copy's log ends (written, perhaps not flushed yet): the
    // next append must land exactly there.
    let (_, offsets) = target.list_offsets(copy, partition, OffsetSpec::Latest, 0)?;
    let end = offsets.end_offset;
    if offsets.start_offset < end {
        // The digests go by name: first, is it still the same topic?
        let now = source.metadata(&[topic])?;
        if let Some(t) = now.topics.iter().find(|t| t.name == topic) {
            if !plan.topic_id.is_empty() && t.id != plan.topic_id {
                return Ok(Err(recreated(topic, &plan.topic_id)));
            }
        }
        // The last bytes the copy holds flushed (digests cover only
        // those): the check does not depend on the target's flush policy.
        let to = offsets.flushed_offset.min(end);
        let from = to
            .saturating_sub(RESUME_CHECK_BYTES)
            .max(offsets.start_offset);
        return Ok(match forked(source, target, topic, copy, partition, from, to)? {
            Some((lo, hi)) => Err(format!(
                "the copy's bytes {lo}..{hi} differ from the source's there: the source's history forked below the copy's end {end} (an unclean election while no mirror ran?); the copy keeps what it has"
            )),
            None => Ok(end),
        });
    }
    let (earliest, _) = source.list_offsets(topic, partition, OffsetSpec::Earliest, 0)?;
    Ok(Ok(end.max(earliest)))
}

/// Whether the copy's bytes in `from..to` differ from the source's (one
/// digest over what both hold flushed there): the range compared when
/// they do.
fn forked(
    source: &Client,
    target: &Client,
    topic: &str,
    copy: &str,
    partition: u32,
    from: u64,
    to: u64,
) -> Result<Option<(u64, u64)>, ClientError> {
    use protocol::codec::digest::DigestArgs;
    let ask = |from: u64, to: u64| -> Result<_, ClientError> {
        let args = DigestArgs {
            from,
            to,
            chunk_bytes: (to - from).clamp(1, 64 << 20) as u32,
        };
        Ok((
            target.digest(copy, partition, &args)?,
            source.digest(topic, partition, &args)?,
        ))
    };
    let (mut ours, mut theirs) = ask(from, to)?;
    let (lo, hi) = (ours.from.max(theirs.from), ours.to.min(theirs.to));
    if hi <= lo {
        // Nothing both hold flushed there yet: the reads' epochs check on.
        return Ok(None);
    }
    if (ours.from, ours.to, theirs.from, theirs.to) != (lo, hi, lo, hi) {
        (ours, theirs) = ask(lo, hi)?;
    }
    Ok((ours.digests != theirs.digests).then_some((lo, hi)))
}

/// `chunk` cut to the whole messages within `max` bytes (at least its
/// first message): what a target that takes only small requests gets in
/// one append; the rest is read again.
fn fitted(mut chunk: MirrorChunk, max: u32, format: MessageFormat) -> MirrorChunk {
    let max = max as usize;
    if chunk.bytes.len() <= max {
        return chunk;
    }
    let (mut len, mut messages) = framed_units(format, &chunk.bytes[..max]).unwrap_or((0, 0));
    if messages == 0 {
        // The first unit alone is larger: it goes whole (the chunk holds
        // it, cut to whole units when read).
        len = unit_len(format, &chunk.bytes).unwrap_or(chunk.bytes.len());
        messages = 1;
    }
    chunk.bytes = chunk.bytes.slice(..len);
    chunk.messages = messages;
    chunk
}
