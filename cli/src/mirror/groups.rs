//! `--groups`: the committed offsets of the matching source groups, copied
//! to the target's groups of the same name every second — valid there as
//! they are, since the offsets are the same, but never past what the copy
//! holds yet (a commit ahead of the copy is copied as the copy's end, a
//! message boundary: at least once), and never into a target group with
//! live members (they commit for themselves).

use super::passes;
use anyhow::bail;
use protocol::client::{Client, OffsetCommit};
use protocol::ErrorCode;
use std::collections::BTreeMap;
use std::time::Instant;

/// The source groups' offsets as last copied.
#[derive(Default)]
pub(super) struct GroupSync {
    pub(super) at: Option<Instant>,
    copied: BTreeMap<(String, String, u32), u64>,
    pub(super) copied_total: u64,
    /// Target groups found with live members (said once each).
    busy: std::collections::BTreeSet<String>,
}

impl GroupSync {
    /// Copies what the matching source groups committed since the last
    /// pass, bounded by what each copy holds.
    pub(super) fn run(
        &mut self,
        source: &Client,
        target: &Client,
        pattern: &regex::Regex,
        positions: &BTreeMap<(String, u32), (u64, String)>,
    ) -> anyhow::Result<()> {
        self.at = Some(Instant::now());
        let groups = match source.list_groups() {
            Ok(groups) => groups,
            Err(e) if e.code() == Some(ErrorCode::ClusterRequired) => {
                bail!("--groups needs the source cluster on etcd: {e}")
            }
            Err(e) if passes(&e) => {
                eprintln!("warning: listing the source's groups: {e}; retrying");
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        for group in groups.iter().filter(|g| pattern.is_match(g)) {
            let described = match source.describe_group(group) {
                Ok(d) => d,
                Err(e) if passes(&e) => continue,
                Err(e) => return Err(e.into()),
            };
            let offsets: Vec<OffsetCommit> = described
                .partitions
                .iter()
                .filter_map(|p| {
                    let (copied, copy) = positions.get(&(p.topic.clone(), p.partition))?;
                    let offset = p.offset?.min(*copied);
                    let key = (group.clone(), copy.clone(), p.partition);
                    (self.copied.get(&key) != Some(&offset)).then(|| OffsetCommit {
                        topic: copy.clone(),
                        partition: p.partition,
                        offset,
                        leader_epoch: -1,
                    })
                })
                .collect();
            if offsets.is_empty() {
                continue;
            }
            match target.reset_offsets(group, &offsets) {
                Ok(_) => {
                    self.busy.remove(group);
                    self.copied_total += offsets.len() as u64;
                    for o in offsets {
                        self.copied
                            .insert((group.clone(), o.topic, o.partition), o.offset);
                    }
                }
                Err(e) if e.code() == Some(ErrorCode::GroupNotEmpty) => {
                    if self.busy.insert(group.clone()) {
                        eprintln!("group {group} has live members in the target: its offsets are its own there; not copied while they are");
                    }
                }
                Err(e) if e.code() == Some(ErrorCode::ClusterRequired) => {
                    bail!("--groups needs the target cluster on etcd: {e}")
                }
                Err(e) if passes(&e) => {
                    eprintln!("warning: copying group {group}'s offsets: {e}; retrying")
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}
