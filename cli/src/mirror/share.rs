//! The mirrors of one name share the partitions through a consumer group
//! of the target cluster (`mirror.NAME`): each copies its range-assignment
//! share of the group's view, and one that dies hands its share to the
//! others when its session ends. A standalone target has no groups: one
//! mirror then copies everything.

use protocol::client::{Client, GroupView, Joined};
use protocol::ErrorCode;
use std::time::{Duration, Instant};

/// The session of a mirror in its group, and how often it heartbeats.
const SESSION_MS: u32 = 6_000;
const BEAT_EVERY: Duration = Duration::from_secs(1);

/// The mirrors of one name: who copies which partitions.
pub(super) struct Share {
    group: String,
    member: String,
    topics: Vec<String>,
    joined: Option<Joined>,
    view: Option<GroupView>,
    beat_at: Option<Instant>,
    /// The target has no groups (standalone): this mirror copies all.
    alone: bool,
}

impl Share {
    pub(super) fn new(name: &str) -> Share {
        Share {
            group: format!("mirror.{}", group_safe(name)),
            member: format!("mirror-{}", std::process::id()),
            topics: Vec::new(),
            joined: None,
            view: None,
            beat_at: None,
            alone: false,
        }
    }

    /// Joins (again, when the mirrored topics changed) and heartbeats as
    /// due; a coordinator that does not answer leaves the last view.
    pub(super) fn beat(&mut self, target: &Client, topics: Vec<String>) {
        if self.alone || self.beat_at.is_some_and(|at| at.elapsed() < BEAT_EVERY) {
            return;
        }
        self.beat_at = Some(Instant::now());
        if topics != self.topics {
            if let Some(joined) = self.joined.take() {
                let _ = target.leave_group(&self.group, &joined);
            }
            self.topics = topics;
            self.view = None;
        }
        if self.topics.is_empty() {
            return;
        }
        if self.joined.is_none() {
            let names: Vec<&str> = self.topics.iter().map(String::as_str).collect();
            match target.join_group(&self.group, &self.member, &names, SESSION_MS) {
                Ok(joined) => self.joined = Some(joined),
                Err(e) if e.code() == Some(ErrorCode::ClusterRequired) => {
                    self.alone = true;
                    return;
                }
                Err(e) => {
                    eprintln!(
                        "warning: joining {}: {e}; copying the last share meanwhile",
                        self.group
                    );
                    return;
                }
            }
        }
        let Some(joined) = &self.joined else { return };
        match target.heartbeat(&self.group, joined, 0, 0) {
            Ok(view) => self.view = Some(view),
            Err(e) if e.code() == Some(ErrorCode::UnknownMember) => {
                self.joined = None; // the session lapsed: join again
                self.view = None;
            }
            Err(e) => eprintln!("warning: heartbeat of {}: {e}", self.group),
        }
    }

    /// Whether this mirror knows its share: it runs alone, or it has a
    /// view of its group.
    pub(super) fn decided(&self) -> bool {
        self.alone || (self.joined.is_some() && self.view.is_some())
    }

    /// Whether this mirror copies `partition` of `topic` now.
    pub(super) fn mine(&self, topic: &str, partition: u32) -> bool {
        if self.alone {
            return true;
        }
        let (Some(view), Some(joined)) = (&self.view, &self.joined) else {
            return false;
        };
        view.assignment(&joined.member_id)
            .iter()
            .any(|(t, ps)| t == topic && ps.contains(&partition))
    }

    pub(super) fn leave(&mut self, target: &Client) {
        if let Some(joined) = self.joined.take() {
            let _ = target.leave_group(&self.group, &joined);
        }
    }
}

/// A mirror name as a group name: the topic naming rule's characters.
fn group_safe(name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(200)
        .collect();
    if safe.is_empty() {
        "mirror".into()
    } else {
        safe
    }
}
