//! `ringlog mirror --from DC2 --to DC1 --failback`: the datacenter that
//! failed over comes back. DC2 promoted its copy of DC1's topic and wrote
//! to it; DC1 may hold writes made after the copy's end that were never
//! mirrored. Promotion recorded where each partition's copy ended (the
//! fork) and what the copy was (DC1's cluster and topic id); failback:
//!
//! 1. checks that the target topic is the one the promoted copy came from
//!    (its cluster, name and topic id);
//! 2. makes it a copy of DC2's topic (MakeMirror): it refuses ordinary
//!    produces from then on, so what it holds stops changing;
//! 3. per partition, saves what DC1 holds past the fork (all of it
//!    committed first) into two files the operator reads — the bytes as
//!    stored, and one line per message — and cuts the log there
//!    (TruncateMirror, which refuses if the log changed since it was
//!    saved; a replicated partition's leader leads a new epoch from the
//!    cut and its followers cut theirs);
//! 4. resets DC1's group offsets past a fork to the fork (their consumers
//!    read the saved writes; DC2's follow from there), reported;
//!
//! and the mirror copies DC2's log from the fork, as any copy resumes, so
//! DC1's files end byte for byte DC2's. A partition already cut and
//! copied by an earlier run (its bytes past the fork are DC2's) is left
//! as it is: a failback killed at any step is run again.

use super::source::Source;
use anyhow::Context;
use protocol::client::{Client, OffsetCommit, OffsetSpec};
use protocol::codec::failback::Cut;
use protocol::codec::TopicMetadata;
use protocol::stored::MessageFormat;
use protocol::ErrorCode;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long the bytes past a fork may take to be committed (the
/// partition's followers catching up) before they are saved.
const COMMIT_WAIT: Duration = Duration::from_secs(60);

/// Bytes past the fork compared with the source to tell a partition
/// already copied back from one holding this cluster's own writes.
const COPIED_CHECK_BYTES: u64 = 64 << 10;

/// Attempts at saving and cutting a partition whose log changed between
/// the two.
const CUT_ATTEMPTS: usize = 10;

/// A promoted copy's record of where it came from, when it came from
/// `target` (the cluster `cluster_id`): the source it had and where each
/// partition's copy ended.
pub(super) fn promoted_from(topic: &TopicMetadata, cluster_id: &str) -> Option<Source> {
    match super::source::Recorded::parse(&topic.promoted_from) {
        super::source::Recorded::Source(was) if was.cluster_id == cluster_id => Some(was),
        _ => None,
    }
}

/// One partition's failback, as reported.
struct Saved {
    partition: u32,
    fork: u64,
    /// Where the log ended before the cut (`fork` when nothing was cut).
    end: u64,
}

/// Prepares `name` in the target (the old source) to be the copy `ours`
/// of the promoted topic `topic`, which was the copy `was` of it. Returns
/// why not, when the target topic is not the one the copy came from.
#[expect(
    clippy::too_many_arguments,
    reason = "both clusters, both topics and where the saved bytes go"
)]
pub(super) fn prepare(
    source: &Client,
    target: &Client,
    topic: &TopicMetadata,
    name: &str,
    target_topic: &TopicMetadata,
    was: &Source,
    ours: &Source,
    dir: &Path,
) -> anyhow::Result<Result<(), String>> {
    if target_topic.id != was.topic_id {
        return Ok(Err(format!(
            "{name} in the target is topic id {}, but the source's {} was promoted from topic id {} ({was}): it is another topic of that name; not failed back",
            target_topic.id, topic.name, was.topic_id
        )));
    }
    let ends = &topic.promoted_ends;
    if ends.is_empty() {
        return Ok(Err(format!(
            "the source's {} was promoted without recording where its copy ended (promoted by an older ringlog): the fork is not known; not failed back",
            topic.name
        )));
    }
    if target_topic.partitions.len() < ends.len() {
        return Ok(Err(format!(
            "{name} in the target has {} partitions, the promoted copy had {}: not failed back",
            target_topic.partitions.len(),
            ends.len()
        )));
    }
    let already = target_topic.mirror_source == ours.to_string();
    match target.make_mirror(name, &ours.to_string(), &was.topic_id) {
        Ok(_) if already => {}
        Ok(_) => {
            println!("{name}: a copy of {ours} from now on (ordinary produces to it are refused)")
        }
        Err(e)
            if matches!(
                e.code(),
                Some(ErrorCode::MirroredPartition | ErrorCode::UnknownTopicId)
            ) =>
        {
            return Ok(Err(e.to_string()))
        }
        Err(e) => return Err(e).with_context(|| format!("making {name} a copy of {ours}")),
    }
    let format = MessageFormat::from_number(topic.settings.message_format).unwrap_or_default();
    let mut saved = Vec::new();
    for (partition, &fork) in ends.iter().enumerate() {
        let partition = partition as u32;
        let end = save_and_cut(
            source, target, topic, name, ours, partition, fork, format, dir,
        )?;
        saved.push(Saved {
            partition,
            fork,
            end,
        });
    }
    reset_groups(target, name, &saved)?;
    Ok(Ok(()))
}

/// Saves what `name`-`partition` holds past `fork` and cuts it there;
/// returns where it ended before.
#[expect(
    clippy::too_many_arguments,
    reason = "both clusters, the partition, its fork and where its bytes go"
)]
fn save_and_cut(
    source: &Client,
    target: &Client,
    topic: &TopicMetadata,
    name: &str,
    ours: &Source,
    partition: u32,
    fork: u64,
    format: MessageFormat,
    dir: &Path,
) -> anyhow::Result<u64> {
    let label = format!("{name}-{partition}");
    for _ in 0..CUT_ATTEMPTS {
        let (_, offsets) = target.list_offsets(name, partition, OffsetSpec::Latest, 0)?;
        let end = offsets.end_offset;
        if end <= fork {
            println!("{label}: ends at {end}, not past the fork at {fork}: nothing to cut");
            return Ok(fork);
        }
        if copied_already(source, target, topic, name, partition, fork, end)? {
            println!("{label}: its bytes past the fork at {fork} are the source's (copied back by an earlier run): nothing to cut");
            return Ok(fork);
        }
        let files = save(target, name, partition, (fork, end), format, dir)?;
        let cut = Cut {
            topic: name.to_string(),
            partition,
            offset: fork,
            mirror_source: ours.to_string(),
            expected_end: end,
        };
        match target.truncate_mirror(&cut) {
            Ok(done) => {
                println!(
                    "{label}: cut at the fork {fork} (leader epoch {}): {} bytes of this cluster's writes after it, never mirrored, saved to {} (as stored) and {} (a line per message)",
                    done.leader_epoch,
                    done.bytes_cut,
                    files.0.display(),
                    files.1.display()
                );
                return Ok(end);
            }
            // It grew or shrank since it was read: read again.
            Err(e) if e.code() == Some(ErrorCode::OffsetOutOfRange) => {
                eprintln!("{label}: {e}; saving again");
            }
            Err(e) => return Err(e).with_context(|| format!("cutting {label} at {fork}")),
        }
    }
    anyhow::bail!("{label}: its log kept changing while it was saved and cut at {fork}: is something else writing it?")
}

/// True when the partition's first bytes past the fork are the source's
/// (an earlier failback cut it and the mirror copied on): up to 64 KiB of
/// them read from both sides' leaders, once committed (the followers of a
/// partition just cut rejoin its ISR within a second or so), and
/// compared. A target holding more past the fork than the source does
/// holds writes of its own.
fn copied_already(
    source: &Client,
    target: &Client,
    topic: &TopicMetadata,
    name: &str,
    partition: u32,
    fork: u64,
    end: u64,
) -> anyhow::Result<bool> {
    let to = end.min(fork + COPIED_CHECK_BYTES);
    let (_, theirs) = source.list_offsets(&topic.name, partition, OffsetSpec::Latest, 0)?;
    if theirs.end_offset < end {
        return Ok(false);
    }
    let collect = |client: &Client, topic: &str| -> anyhow::Result<Vec<u8>> {
        let mut bytes = Vec::with_capacity((to - fork) as usize);
        read_range(client, topic, partition, fork, to, |chunk, _| {
            bytes.extend_from_slice(chunk);
            Ok(())
        })?;
        Ok(bytes)
    };
    Ok(collect(target, name)? == collect(source, &topic.name)?)
}

/// Hands `sink` the bytes of `name`-`partition` from `from` to `to`, a
/// chunk of whole messages at a time with its offset, each once it is
/// committed (so a tail of any size passes through a bounded buffer).
fn read_range(
    client: &Client,
    name: &str,
    partition: u32,
    from: u64,
    to: u64,
    mut sink: impl FnMut(&[u8], u64) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut at = from;
    let mut waiting_since: Option<Instant> = None;
    // Whole messages are read: at least a megabyte, more for a larger one.
    let mut ask = 1u32 << 20;
    while at < to {
        let chunk = client
            .mirror_read(name, partition, at, ask)
            .with_context(|| format!("reading {name}-{partition} at {at}"))?;
        if chunk.cut {
            ask = ask.saturating_mul(4).min(super::READ_BYTES_MAX);
            continue;
        }
        if chunk.bytes.is_empty() {
            let since = *waiting_since.get_or_insert_with(Instant::now);
            if since.elapsed() > COMMIT_WAIT {
                anyhow::bail!(
                    "{name}-{partition}: its bytes {at}..{to} are not committed after {} s (its replicas behind?): nothing cut; run the failback again",
                    COMMIT_WAIT.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        waiting_since = None;
        let take = chunk.bytes.len().min((to - at) as usize);
        sink(&chunk.bytes[..take], at)?;
        at += take as u64;
    }
    Ok(())
}

/// Saves the bytes of `name`-`partition` in `range` as stored
/// (`LABEL.FORK-END.log`) and a line per message (`.txt`: offset, key,
/// value, escaped), streamed chunk by chunk, synced; returns the two
/// paths.
fn save(
    client: &Client,
    name: &str,
    partition: u32,
    range: (u64, u64),
    format: MessageFormat,
    dir: &Path,
) -> anyhow::Result<(PathBuf, PathBuf)> {
    let (fork, end) = range;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let label = format!("{name}-{partition}");
    let raw_path = dir.join(format!("{label}.{fork}-{end}.log"));
    let text_path = dir.join(format!("{label}.{fork}-{end}.txt"));
    let create = |path: &Path| {
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))
    };
    let (mut raw, mut text) = (
        std::io::BufWriter::new(create(&raw_path)?),
        std::io::BufWriter::new(create(&text_path)?),
    );
    text.write_all(b"offset\tkey\tvalue\n")?;
    read_range(client, name, partition, fork, end, |chunk, at| {
        raw.write_all(chunk)?;
        text.write_all(lines(chunk, at, format).as_bytes())?;
        Ok(())
    })?;
    for (file, path) in [(raw, &raw_path), (text, &text_path)] {
        file.into_inner()
            .map_err(|e| e.into_error())
            .and_then(|f| f.sync_all())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok((raw_path, text_path))
}

/// One line per message of `bytes` (whole messages stored from `base`
/// on): its offset, key and value, escaped as Rust strings are.
fn lines(bytes: &[u8], base: u64, format: MessageFormat) -> String {
    let mut out = String::new();
    let mut line = |offset: u64, key: Option<&[u8]>, value: &[u8]| {
        let text = |b: &[u8]| String::from_utf8_lossy(b).escape_debug().to_string();
        out.push_str(&format!(
            "{offset}\t{}\t{}\n",
            key.map(text).unwrap_or_default(),
            text(value)
        ));
    };
    match format {
        MessageFormat::One => {
            for message in protocol::message::MessageSetIter::new(bytes, base).flatten() {
                line(message.offset, message.key, message.value);
            }
        }
        MessageFormat::Two => {
            let mut at = 0;
            let mut scratch = Vec::new();
            while let Some(len) = protocol::stored::unit_len(format, &bytes[at..]) {
                let Some(batch) = bytes.get(at..at + len) else {
                    break;
                };
                if let Ok((header, records)) =
                    protocol::batch::read::decode(batch, 64 << 20, &mut scratch)
                {
                    for record in protocol::batch::read::records(&header, records).flatten() {
                        line(
                            record.offset as u64,
                            record.record.key,
                            record.record.value.unwrap_or_default(),
                        );
                    }
                }
                at += len;
            }
        }
    }
    out
}

/// Groups of the target whose committed offset on a cut partition is past
/// its fork (they read writes now saved aside) go back to the fork, where
/// the source's writes begin; a group with live members is left to them,
/// said.
fn reset_groups(target: &Client, name: &str, saved: &[Saved]) -> anyhow::Result<()> {
    let groups = match target.list_groups() {
        Ok(groups) => groups,
        // A standalone target keeps no groups.
        Err(e) if e.code() == Some(ErrorCode::ClusterRequired) => return Ok(()),
        Err(e) => return Err(e).context("listing the target's groups"),
    };
    for group in groups {
        let described = target
            .describe_group(&group)
            .with_context(|| format!("describing group {group}"))?;
        let past: Vec<(OffsetCommit, u64)> = described
            .partitions
            .iter()
            .filter(|p| p.topic == name)
            .filter_map(|p| {
                let s = saved.iter().find(|s| s.partition == p.partition)?;
                let offset = p.offset.filter(|o| *o > s.fork && s.end > s.fork)?;
                Some((
                    OffsetCommit {
                        topic: name.to_string(),
                        partition: p.partition,
                        offset: s.fork,
                        leader_epoch: -1,
                    },
                    offset,
                ))
            })
            .collect();
        if past.is_empty() {
            continue;
        }
        let commits: Vec<OffsetCommit> = past.iter().map(|(c, _)| c.clone()).collect();
        let said: Vec<String> = past
            .iter()
            .map(|(c, was)| format!("{name}-{} {was} -> {}", c.partition, c.offset))
            .collect();
        match target.reset_offsets(&group, &commits) {
            Ok(_) => println!(
                "group {group}: committed past the fork (it read writes now saved aside), reset to the fork: {}",
                said.join(", ")
            ),
            Err(e) if e.code() == Some(ErrorCode::GroupNotEmpty) => eprintln!(
                "warning: group {group} has live members: its offsets past the fork ({}) are theirs to reset (`ringlog groups reset`)",
                said.join(", ")
            ),
            Err(e) => return Err(e).with_context(|| format!("resetting group {group}")),
        }
    }
    Ok(())
}
