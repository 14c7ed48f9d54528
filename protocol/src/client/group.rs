//! Consumer groups: the group requests on [`Client`], and [`GroupConsumer`],
//! which runs the paper's rebalance itself.
//!
//! There is no group leader: every member reads the group's view through a
//! broker (members, their topics, partition counts), computes its own range
//! of each topic ([`GroupView::assignment`]), commits and releases what it
//! no longer owns, and claims the rest. A claim that loses (the view was
//! stale, or a previous owner has not released yet) makes the member
//! release everything, back off with jitter and start again, as in the
//! paper. Offsets are committed every `auto_commit_interval`, on
//! [`GroupConsumer::commit`] and [`GroupConsumer::close`], and before any
//! release; delivery is at least once: a member that dies hands its
//! partitions over from the last committed offset.
//!
//! **Dropping a member** (a panic while it processes a batch, an early
//! return) leaves the group at once but commits only what the application
//! is known to have processed: with auto-commit, the positions as of the
//! start of the last [`GroupConsumer::poll`] (its messages may be half
//! processed); without auto-commit, nothing — the application commits
//! what it processed itself. The messages after that are delivered again
//! to the partitions' next owner.
//!
//! Heartbeats go out from a thread and a connection of the member's own
//! (`heartbeat.rs`), so a `poll` held up by a broker that stopped
//! answering, or a slow batch, does not end the session; rebalancing stays
//! in [`GroupConsumer::poll`]. A program that does not poll for longer
//! than [`GroupConfig::max_poll_interval`] is taken to be stuck: its
//! heartbeats stop, its partitions go to the others, and it joins again on
//! its next poll.
//!
//! **A broker's death is a partial outage.** A partition whose broker is
//! down (or moved: NOT_OWNER is followed to fresh Metadata) is retried with
//! back-off, one attempt per poll at most, while the member goes on
//! consuming its other partitions; [`GroupConsumer::outages`] says which
//! are unavailable since when, and why. A heartbeat or commit that cannot
//! reach the coordinator (its broker down, etcd unavailable, a
//! registry that is not the cluster's) is retried the same way while the
//! member consumes what it owns; should the session lapse meanwhile, the
//! member joins again once the coordinator answers (its partitions may
//! have gone to others: at least once, as ever).

use super::committer::{Committer, Outcome};
use super::heartbeat::{Heartbeats, Schedule};
use super::{Client, ClientError, Consumer, Truncation};
use crate::codec::groups::{self as codec, GroupDescription, GroupView, Joined, OffsetCommit};
use crate::codec::OffsetSpec;
use crate::frame::Api;
use crate::ErrorCode;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

impl Client {
    /// A group request on the bootstrap connection; `repeatable` ones are
    /// sent again once if the connection broke under them.
    fn group_call(
        &self,
        api: Api,
        build: impl Fn(&mut flatbuffers::FlatBufferBuilder<'static>) -> Vec<u8>,
        repeatable: bool,
    ) -> Result<Vec<u8>, ClientError> {
        Ok(self.request(api, build, Duration::ZERO, repeatable)?.header)
    }

    /// Joins `group` as a member consuming `topics`.
    pub fn join_group(
        &self,
        group: &str,
        member_name: &str,
        topics: &[&str],
        session_timeout_ms: u32,
    ) -> Result<Joined, ClientError> {
        let response = self.group_call(
            Api::JoinGroup,
            |fbb| {
                codec::join_group_request(fbb, group, member_name, topics, session_timeout_ms)
                    .to_vec()
            },
            false,
        )?;
        codec::decode_joined(&response)
            .map_err(|e| ClientError::protocol(format!("join group: {e}")))
    }

    /// Keeps the member's session alive and returns the group's view, at
    /// once if its generation is not `generation`, else when it changes or
    /// after `max_wait_ms`.
    pub fn heartbeat(
        &self,
        group: &str,
        joined: &Joined,
        generation: u64,
        max_wait_ms: u32,
    ) -> Result<GroupView, ClientError> {
        self.heartbeat_with(group, joined, generation, max_wait_ms, false)
    }

    /// [`Client::heartbeat`] that lets the broker answer an unchanged view
    /// (`generation` is current) brief: its generation and revision only
    /// ([`GroupView::brief`]) — what a heartbeat needs, for a group of
    /// thousands of members.
    pub fn heartbeat_brief(
        &self,
        group: &str,
        joined: &Joined,
        generation: u64,
        max_wait_ms: u32,
    ) -> Result<GroupView, ClientError> {
        self.heartbeat_with(group, joined, generation, max_wait_ms, true)
    }

    fn heartbeat_with(
        &self,
        group: &str,
        joined: &Joined,
        generation: u64,
        max_wait_ms: u32,
        brief_ok: bool,
    ) -> Result<GroupView, ClientError> {
        let response = self
            .request(
                Api::Heartbeat,
                |fbb| {
                    codec::heartbeat_request_brief(
                        fbb,
                        group,
                        &joined.member_id,
                        joined.session_id,
                        generation,
                        max_wait_ms,
                        brief_ok,
                    )
                    .to_vec()
                },
                Duration::from_millis(u64::from(max_wait_ms)),
                true,
            )?
            .header;
        codec::decode_heartbeat(&response)
            .map_err(|e| ClientError::protocol(format!("heartbeat: {e}")))
    }

    /// Claims `partitions` of `topic` for the member, as computed from the
    /// view at `revision`.
    pub fn claim_partitions(
        &self,
        group: &str,
        joined: &Joined,
        revision: u64,
        topic: &str,
        partitions: &[u32],
    ) -> Result<(), ClientError> {
        self.group_call(
            Api::ClaimPartitions,
            |fbb| {
                codec::claim_partitions_request(
                    fbb,
                    group,
                    &joined.member_id,
                    joined.session_id,
                    revision,
                    topic,
                    partitions,
                )
                .to_vec()
            },
            false,
        )
        .map(|_| ())
    }

    /// Releases partitions the member's session owns.
    pub fn release_partitions(
        &self,
        group: &str,
        joined: &Joined,
        topic: &str,
        partitions: &[u32],
    ) -> Result<(), ClientError> {
        self.group_call(
            Api::ReleasePartitions,
            |fbb| {
                codec::release_partitions_request(
                    fbb,
                    group,
                    &joined.member_id,
                    joined.session_id,
                    topic,
                    partitions,
                )
                .to_vec()
            },
            false,
        )
        .map(|_| ())
    }

    /// Commits offsets of partitions the member's session owns (all or
    /// none).
    pub fn commit_offsets(
        &self,
        group: &str,
        joined: &Joined,
        offsets: &[OffsetCommit],
    ) -> Result<u32, ClientError> {
        self.commit_request(group, &joined.member_id, joined.session_id, offsets)
    }

    fn commit_request(
        &self,
        group: &str,
        member_id: &str,
        session_id: u64,
        offsets: &[OffsetCommit],
    ) -> Result<u32, ClientError> {
        let response = self.group_call(
            Api::CommitOffsets,
            |fbb| {
                codec::commit_offsets_request(fbb, group, member_id, session_id, offsets).to_vec()
            },
            true,
        )?;
        crate::codec::verify::<crate::wire::CommitOffsetsResponse>(&response)
            .map(|r| r.committed())
            .map_err(|e| ClientError::protocol(format!("commit offsets: {e}")))
    }

    /// Sets the committed offsets of a group that has no live member
    /// (GROUP_NOT_EMPTY otherwise).
    pub fn reset_offsets(&self, group: &str, offsets: &[OffsetCommit]) -> Result<u32, ClientError> {
        self.commit_request(group, "", 0, offsets)
    }

    /// Ends the member's session: its partitions are free at once.
    pub fn leave_group(&self, group: &str, joined: &Joined) -> Result<(), ClientError> {
        self.group_call(
            Api::LeaveGroup,
            |fbb| {
                codec::leave_group_request(fbb, group, &joined.member_id, joined.session_id)
                    .to_vec()
            },
            false,
        )
        .map(|_| ())
    }

    /// The group's members, partition owners and committed offsets.
    pub fn describe_group(&self, group: &str) -> Result<GroupDescription, ClientError> {
        let response = self.group_call(
            Api::DescribeGroup,
            |fbb| codec::describe_group_request(fbb, group).to_vec(),
            true,
        )?;
        codec::decode_description(&response)
            .map_err(|e| ClientError::protocol(format!("describe group: {e}")))
    }

    /// Every group with a member or a committed offset.
    pub fn list_groups(&self) -> Result<Vec<String>, ClientError> {
        let response = self.group_call(
            Api::ListGroups,
            |fbb| codec::list_groups_request(fbb).to_vec(),
            true,
        )?;
        codec::decode_groups(&response)
            .map_err(|e| ClientError::protocol(format!("list groups: {e}")))
    }
}

/// Where a partition without a committed offset starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFrom {
    /// The first retained offset (the paper's "smallest").
    Earliest,
    /// The flushed end: only messages produced from now on.
    Latest,
}

/// How a [`GroupConsumer`] behaves. `GroupConfig::default()` gives the
/// defaults named on each field.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// A member whose heartbeats stop leaves the group this long after the
    /// last (the broker clamps it to 2 s ..= 300 s). Default 10 s.
    pub session_timeout: Duration,
    /// Commit every interval from `poll`; `None`: only on `commit`,
    /// `close` and before releasing partitions in a rebalance (a drop then
    /// commits nothing). Default every 5 s: **on** — at least once, with up
    /// to 5 s of messages delivered again after a crash.
    pub auto_commit_interval: Option<Duration>,
    /// Where a partition without a committed offset starts. Default
    /// [`StartFrom::Earliest`].
    pub start_from: StartFrom,
    /// A readable prefix of the member id. Default `"consumer"`.
    pub member_name: String,
    /// How long a poll waits for new messages when there are none.
    /// Default 200 ms.
    pub max_wait: Duration,
    /// How often the member heartbeats when nothing changes (at most a
    /// third of the session timeout; a change is seen at once). Default
    /// 1 s.
    pub heartbeat_interval: Duration,
    /// The longest time between two `poll` calls of a live member: past
    /// it the member counts as stuck, stops heartbeating and so gives its
    /// partitions up (it joins again on its next poll). Default 5 min.
    pub max_poll_interval: Duration,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            session_timeout: Duration::from_secs(10),
            auto_commit_interval: Some(Duration::from_secs(5)),
            start_from: StartFrom::Earliest,
            member_name: "consumer".into(),
            max_wait: Duration::from_millis(200),
            heartbeat_interval: Duration::from_secs(1),
            max_poll_interval: Duration::from_secs(300),
        }
    }
}

/// A message of a group consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMessage {
    /// Its topic.
    pub topic: String,
    /// Its partition.
    pub partition: u32,
    /// Its offset.
    pub offset: u64,
    /// Its key, if keyed.
    pub key: Option<Vec<u8>>,
    /// Its payload.
    pub value: Vec<u8>,
    /// Format 2: its time (ms since the Unix epoch).
    pub timestamp: Option<i64>,
    /// Format 2: its headers.
    pub headers: crate::batch::records::OwnedHeaders,
}

/// Claims that lose in a row before a poll gives up for this time (the next
/// poll starts again).
const CLAIM_ATTEMPTS_MAX: u32 = 8;

/// A member of a consumer group. Not thread-safe; owns its connections.
pub struct GroupConsumer {
    client: Client,
    /// The member's group requests go here ([`Client::group_home`]).
    home: Client,
    group: String,
    topics: Vec<String>,
    config: GroupConfig,
    joined: Joined,
    view: GroupView,
    owned: BTreeMap<(String, u32), Owned>,
    /// The last committed position of each owned partition: offset and
    /// leader epoch.
    committed: BTreeMap<(String, u32), Position>,
    /// Cuts of the log found under owned partitions, not yet taken.
    truncations: Vec<Truncation>,
    /// Committed offsets the log did not hold, not yet taken.
    offset_resets: Vec<OffsetReset>,
    /// With auto-commit: the positions as of the start of the last poll,
    /// everything earlier polls returned — what a drop commits.
    processed: BTreeMap<(String, u32), Position>,
    /// Subscribed topics that do not exist, since when.
    missing: BTreeMap<String, Instant>,
    /// The heartbeat thread (from the end of `subscribe` on).
    beats: Option<Heartbeats>,
    /// The auto-commit thread (with auto-commit, from the end of
    /// `subscribe` on).
    committer: Option<Committer>,
    last_commit: Instant,
    cursor: usize,
    rebalances: u64,
    /// The coordinator (heartbeats, commits) did not answer: since when,
    /// how often, and why.
    coordinator: Option<Unavailable>,
}

/// A committed offset the partition's log did not hold, and what the
/// member did instead (see [`GroupConsumer::take_offset_resets`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetReset {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// The committed offset.
    pub committed: u64,
    /// What the fetch there answered.
    pub error: String,
}

/// A partition this member owns.
struct Owned {
    /// Open once the partition's broker answered.
    consumer: Option<Consumer>,
    /// Where the partition continues while there is no consumer: the
    /// committed offset, or `None` for "where `start_from` says".
    position: Option<Position>,
    /// Set while the partition cannot be read.
    unavailable: Option<Unavailable>,
    /// The committed offset it started at, until a fetch there succeeds:
    /// one out of range or inside a message is replaced by `start_from`.
    unchecked_commit: Option<u64>,
}

impl Owned {
    fn position(&self) -> Option<Position> {
        match &self.consumer {
            Some(consumer) => Some(Position::of(consumer)),
            None => self.position,
        }
    }
}

/// Where a partition continues: the offset and the leader epoch of the
/// message before it (-1: unknown), committed together (KIP-320).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Position {
    offset: u64,
    epoch: i32,
}

impl Position {
    fn of(consumer: &Consumer) -> Position {
        Position {
            offset: consumer.position(),
            epoch: consumer.position_epoch(),
        }
    }
}

/// Truncations a member keeps until they are taken.
const TRUNCATIONS_KEPT: usize = 256;

/// Something that failed and is retried with back-off.
#[derive(Debug, Clone)]
struct Unavailable {
    since: Instant,
    attempts: u32,
    retry_at: Instant,
    error: ClientError,
}

impl Unavailable {
    fn new(error: ClientError, client: &Client) -> Unavailable {
        let now = Instant::now();
        Unavailable {
            since: now,
            attempts: 1,
            retry_at: now + client.config().backoff(0),
            error,
        }
    }

    /// Another failure: the next try waits longer.
    fn again(&mut self, error: ClientError, client: &Client) {
        self.retry_at = Instant::now() + client.config().backoff(self.attempts);
        self.attempts = self.attempts.saturating_add(1);
        self.error = error;
    }

    fn due(&self) -> bool {
        Instant::now() >= self.retry_at
    }
}

/// A partition of a group consumer that cannot be read now (its broker is
/// down or unreachable), or the group's coordinator when `partition` is
/// `None`.
#[derive(Debug, Clone)]
pub struct Outage {
    /// The topic, or empty for the coordinator.
    pub topic: String,
    /// The partition; `None` for the coordinator (heartbeats, commits;
    /// `topic` empty) and for a subscribed topic that does not exist.
    pub partition: Option<u32>,
    /// How long it has been unavailable.
    pub since: Duration,
    /// Attempts so far.
    pub attempts: u32,
    /// The last failure.
    pub error: ClientError,
}

/// Whether an error of a partition's fetch (or of opening it) is an outage
/// to ride out — its broker down, moved, restarting, overloaded, or its
/// data lost until an operator restores it (DATA_LOST) — rather than a
/// failure to return: the member goes on with its other partitions.
/// A fetch's refusal of its offset: not in the log, or not a message's
/// start.
fn bad_offset(error: &ClientError) -> bool {
    matches!(error, ClientError::InvalidOffset { .. })
        || error.code() == Some(ErrorCode::OffsetOutOfRange)
}

fn passes(error: &ClientError) -> bool {
    error.is_retriable() || error.code() == Some(ErrorCode::DataLost)
}

/// Whether an error of a heartbeat or commit means the coordinator is away
/// (the member goes on with what it owns) rather than a failure.
fn coordinator_away(error: &ClientError) -> bool {
    error.is_retriable() || error.code() == Some(ErrorCode::ClusterIdMismatch)
}

impl GroupConsumer {
    /// Joins `group` through the brokers at `brokers` (comma-separated)
    /// and takes this member's share of `topics`, with the default
    /// [`ClientConfig`](super::ClientConfig) (plain TCP); see
    /// [`GroupConsumer::subscribe_with`] for TLS and other timeouts.
    pub fn subscribe(
        brokers: &str,
        group: &str,
        topics: &[&str],
        config: GroupConfig,
    ) -> Result<GroupConsumer, ClientError> {
        GroupConsumer::subscribe_with(&Client::connect(brokers)?, group, topics, config)
    }

    /// [`GroupConsumer::subscribe`] through `client`: the member's
    /// connections (coordinator and partitions) take its configuration —
    /// TLS, connect and request timeouts, retries.
    pub fn subscribe_with(
        client: &Client,
        group: &str,
        topics: &[&str],
        config: GroupConfig,
    ) -> Result<GroupConsumer, ClientError> {
        let client = client.clone();
        let home = client.group_home(topics)?;
        let session_ms = u32::try_from(config.session_timeout.as_millis()).unwrap_or(u32::MAX);
        let joined = home.join_group(group, &config.member_name, topics, session_ms)?;
        let mut consumer = GroupConsumer {
            client,
            home,
            group: group.to_string(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            config,
            joined,
            view: GroupView::default(),
            owned: BTreeMap::new(),
            committed: BTreeMap::new(),
            truncations: Vec::new(),
            offset_resets: Vec::new(),
            processed: BTreeMap::new(),
            missing: BTreeMap::new(),
            beats: None,
            committer: None,
            last_commit: Instant::now(),
            cursor: 0,
            rebalances: 0,
            coordinator: None,
        };
        consumer.heartbeat(0)?;
        let schedule = Schedule {
            period: consumer.heartbeat_period(),
            max_poll_interval: consumer.config.max_poll_interval,
        };
        consumer.beats = Some(Heartbeats::start(
            &consumer.home,
            &consumer.group,
            consumer.joined.clone(),
            consumer.view.generation,
            schedule,
        )?);
        if consumer.config.auto_commit_interval.is_some() {
            let timeout = consumer.heartbeat_period().max(Duration::from_secs(1));
            consumer.committer = Some(Committer::start(&consumer.home, &consumer.group, timeout)?);
        }
        Ok(consumer)
    }

    /// What this member cannot reach now: partitions whose broker is down
    /// (retried with back-off while the others are consumed), the
    /// coordinator if heartbeats or commits fail, and subscribed topics that
    /// do not exist (the member waits for them: `partition` is `None`, the
    /// error UNKNOWN_TOPIC). Empty when all is well.
    pub fn outages(&self) -> Vec<Outage> {
        let mut outages: Vec<Outage> = self
            .owned
            .iter()
            .filter_map(|((topic, partition), owned)| {
                let u = owned.unavailable.as_ref()?;
                Some(Outage {
                    topic: topic.clone(),
                    partition: Some(*partition),
                    since: u.since.elapsed(),
                    attempts: u.attempts,
                    error: u.error.clone(),
                })
            })
            .collect();
        for (topic, since) in &self.missing {
            outages.push(Outage {
                topic: topic.clone(),
                partition: None,
                since: since.elapsed(),
                attempts: 0,
                error: ClientError::Broker {
                    code: ErrorCode::UnknownTopic,
                    message: format!(
                        "topic {topic:?} does not exist (yet): this member of group {:?} waits for it to be created",
                        self.group
                    ),
                    range: None,
                    owner_broker_id: None,
                },
            });
        }
        if let Some(u) = &self.coordinator {
            outages.push(Outage {
                topic: String::new(),
                partition: None,
                since: u.since.elapsed(),
                attempts: u.attempts,
                error: u.error.clone(),
            });
        }
        outages
    }

    /// This member's id.
    pub fn member_id(&self) -> &str {
        &self.joined.member_id
    }

    /// The partitions this member owns now.
    pub fn assignment(&self) -> Vec<(String, u32)> {
        self.owned.keys().cloned().collect()
    }

    /// How many times this member has rebalanced.
    pub fn rebalances(&self) -> u64 {
        self.rebalances
    }

    fn heartbeat_period(&self) -> Duration {
        Duration::from_millis(u64::from(self.joined.session_timeout_ms) / 3)
            .min(self.config.heartbeat_interval)
    }

    /// Heartbeats once from here (at the start, and when a commit found
    /// a partition gone) and acts on the answer.
    fn heartbeat(&mut self, max_wait_ms: u32) -> Result<(), ClientError> {
        let generation = self.view.generation;
        let answer = self
            .home
            .heartbeat(&self.group, &self.joined, generation, max_wait_ms);
        self.act_on(answer)
    }

    /// Rebalances when a heartbeat's view changed; joins again when the
    /// session was lost.
    fn act_on(&mut self, answer: Result<GroupView, ClientError>) -> Result<(), ClientError> {
        let generation = self.view.generation;
        let view = match answer {
            Err(error) if error.code() == Some(ErrorCode::UnknownMember) => {
                self.rejoin()?;
                self.home.heartbeat(&self.group, &self.joined, 0, 0)?
            }
            other => other?,
        };
        // A brief view (the heartbeat thread's generation is current) of a
        // generation this member does not have: the whole view first.
        let view = if view.brief && view.generation != generation {
            self.home.heartbeat(&self.group, &self.joined, 0, 0)?
        } else {
            view
        };
        if view.generation != generation {
            if let Err(error) = self.rebalance(view) {
                // Half done (the coordinator went away mid-way): the next
                // heartbeat must rebalance again, whatever it answers.
                self.view.generation = 0;
                return Err(error);
            }
        }
        Ok(())
    }

    /// The session was lost: whatever was owned is gone already.
    fn rejoin(&mut self) -> Result<(), ClientError> {
        self.owned.clear();
        self.committed.clear();
        let topics: Vec<&str> = self.topics.iter().map(String::as_str).collect();
        self.joined = self.home.join_group(
            &self.group,
            &self.config.member_name,
            &topics,
            self.joined.session_timeout_ms,
        )?;
        self.view = GroupView::default();
        if let Some(beats) = &self.beats {
            beats.rejoined(self.joined.clone(), 0);
        }
        Ok(())
    }

    /// Moves to the assignment of `view`: commit and release what goes,
    /// claim what comes; on a lost claim release everything, back off and
    /// start again from a fresh view.
    fn rebalance(&mut self, mut view: GroupView) -> Result<(), ClientError> {
        // Subscribed topics the view does not know (with partitions) do
        // not exist: noted since the first view that lacked them.
        let now = Instant::now();
        let exists = |view: &GroupView, topic: &str| {
            view.topics
                .iter()
                .any(|t| t.name == topic && t.partitions > 0)
        };
        self.missing.retain(|topic, _| !exists(&view, topic));
        for topic in &self.topics {
            if !exists(&view, topic) {
                self.missing.entry(topic.clone()).or_insert(now);
            }
        }
        for attempt in 0..CLAIM_ATTEMPTS_MAX {
            self.view = view.clone();
            let wanted: BTreeSet<(String, u32)> = view
                .assignment(&self.joined.member_id)
                .into_iter()
                .flat_map(|(topic, ps)| ps.into_iter().map(move |p| (topic.clone(), p)))
                .collect();
            let going: Vec<(String, u32)> = self
                .owned
                .keys()
                .filter(|k| !wanted.contains(*k))
                .cloned()
                .collect();
            self.release(&going)?;
            let coming: Vec<(String, u32)> = wanted
                .iter()
                .filter(|k| !self.owned.contains_key(*k))
                .cloned()
                .collect();
            match self.claim(&coming, view.revision) {
                Ok(()) => {
                    self.rebalances += 1;
                    return Ok(());
                }
                Err(error) if error.code() == Some(ErrorCode::ClaimConflict) => {
                    // The paper: release everything, back off, try again.
                    let all: Vec<(String, u32)> = self.owned.keys().cloned().collect();
                    self.release(&all)?;
                    std::thread::sleep(backoff(attempt));
                    view = self.home.heartbeat(&self.group, &self.joined, 0, 0)?;
                }
                Err(error) if error.code() == Some(ErrorCode::UnknownMember) => {
                    self.rejoin()?;
                    view = self.home.heartbeat(&self.group, &self.joined, 0, 0)?;
                }
                Err(error) => return Err(error),
            }
        }
        // Still contended: own nothing for now; the next heartbeat retries.
        self.view.generation = 0;
        Ok(())
    }

    /// Commits then releases `partitions`.
    fn release(&mut self, partitions: &[(String, u32)]) -> Result<(), ClientError> {
        if partitions.is_empty() {
            return Ok(());
        }
        let _ = self.commit_some(partitions);
        let mut by_topic: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
        for (topic, partition) in partitions {
            by_topic.entry(topic).or_default().push(*partition);
            self.owned.remove(&(topic.clone(), *partition));
            self.committed.remove(&(topic.clone(), *partition));
        }
        for (topic, ps) in by_topic {
            self.home
                .release_partitions(&self.group, &self.joined, topic, &ps)?;
        }
        Ok(())
    }

    /// Claims `partitions` (per topic) and notes for each where it starts:
    /// its committed offset, or where `start_from` says. Consumers open on
    /// the partitions' brokers at the next poll; a broker that is down
    /// delays only its own partitions.
    fn claim(&mut self, partitions: &[(String, u32)], revision: u64) -> Result<(), ClientError> {
        let mut by_topic: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
        for (topic, partition) in partitions {
            by_topic.entry(topic).or_default().push(*partition);
        }
        for (topic, ps) in &by_topic {
            self.home
                .claim_partitions(&self.group, &self.joined, revision, topic, ps)?;
        }
        if partitions.is_empty() {
            return Ok(());
        }
        let description = self.home.describe_group(&self.group)?;
        for (topic, partition) in partitions {
            let committed = description
                .partitions
                .iter()
                .find(|p| &p.topic == topic && p.partition == *partition)
                .and_then(|p| {
                    p.offset.map(|offset| Position {
                        offset,
                        epoch: p.leader_epoch,
                    })
                });
            if let Some(position) = committed {
                self.committed.insert((topic.clone(), *partition), position);
            }
            self.owned.insert(
                (topic.clone(), *partition),
                Owned {
                    consumer: None,
                    position: committed,
                    unavailable: None,
                    unchecked_commit: committed.map(|p| p.offset),
                },
            );
        }
        Ok(())
    }

    /// Opens the consumer of an owned partition: at its position, or where
    /// `start_from` says. One attempt: the caller backs off.
    fn open(
        &self,
        topic: &str,
        partition: u32,
        position: Option<Position>,
    ) -> Result<Consumer, ClientError> {
        let offset = match position {
            Some(position) => position.offset,
            None => {
                let spec = match self.config.start_from {
                    StartFrom::Earliest => OffsetSpec::Earliest,
                    StartFrom::Latest => OffsetSpec::Latest,
                };
                self.client.list_offsets(topic, partition, spec, 0)?.0
            }
        };
        let mut consumer = Consumer::new(&self.client, topic, partition, offset)?;
        if let Some(position) = position {
            // Its first fetch checks that the log still holds what was
            // read before the offset.
            consumer.seek_committed(position.offset, position.epoch);
        }
        consumer.set_max_wait_ms(0);
        // One reconnect per poll: a dead broker must not hold the member
        // (and its other partitions, and its heartbeats) for the client's
        // whole retry budget.
        consumer.set_retries(1);
        Ok(consumer)
    }

    /// Commits the positions of `partitions` that moved since their last
    /// commit.
    fn commit_some(&mut self, partitions: &[(String, u32)]) -> Result<(), ClientError> {
        let positions: Vec<((String, u32), Position)> = partitions
            .iter()
            .filter_map(|key| Some((key.clone(), self.owned.get(key)?.position()?)))
            .collect();
        self.commit_positions(positions)
    }

    /// The position of every owned partition that has one.
    fn positions(&self) -> Vec<((String, u32), Position)> {
        self.owned
            .iter()
            .filter_map(|(key, owned)| Some((key.clone(), owned.position()?)))
            .collect()
    }

    /// The commits of these positions of owned partitions that moved
    /// since their last commit.
    fn moved(&self, positions: Vec<((String, u32), Position)>) -> Vec<OffsetCommit> {
        positions
            .into_iter()
            .filter(|(key, position)| {
                self.owned.contains_key(key) && self.committed.get(key) != Some(position)
            })
            .map(|(key, position)| OffsetCommit {
                topic: key.0,
                partition: key.1,
                offset: position.offset,
                leader_epoch: position.epoch,
            })
            .collect()
    }

    /// Notes what landed of the commit thread's last commit; its error,
    /// if any. A lost partition or session makes the next step look again.
    fn commit_outcome(&mut self, (offsets, landed): Outcome) -> Result<(), ClientError> {
        match landed {
            Ok(()) => {
                self.note_committed(offsets);
                Ok(())
            }
            Err(error) => self.look_again_if_lost(error),
        }
    }

    /// Remembers these offsets as committed, for partitions still owned.
    fn note_committed(&mut self, offsets: Vec<OffsetCommit>) {
        for offset in offsets {
            let key = (offset.topic, offset.partition);
            if self.owned.contains_key(&key) {
                let position = Position {
                    offset: offset.offset,
                    epoch: offset.leader_epoch,
                };
                self.committed.insert(key, position);
            }
        }
    }

    /// Commits these positions of owned partitions, those that moved since
    /// their last commit, on the member's own connection — after the
    /// commit thread's commit in flight, so a partition's commits land in
    /// order.
    fn commit_positions(
        &mut self,
        positions: Vec<((String, u32), Position)>,
    ) -> Result<(), ClientError> {
        if let Some((offsets, Ok(()))) = self.committer.as_ref().and_then(Committer::settle) {
            self.note_committed(offsets);
        }
        let offsets = self.moved(positions);
        if offsets.is_empty() {
            return Ok(());
        }
        self.home
            .commit_offsets(&self.group, &self.joined, &offsets)?;
        self.note_committed(offsets);
        Ok(())
    }

    /// Moves an owned partition's position (rewind or skip); the next poll
    /// and commit use it. Partitions not owned are ignored.
    pub fn seek(&mut self, topic: &str, partition: u32, offset: u64) {
        let key = (topic.to_string(), partition);
        if self.processed.contains_key(&key) {
            // The application's own choice of where it continues.
            self.processed
                .insert(key.clone(), Position { offset, epoch: -1 });
        }
        if let Some(owned) = self.owned.get_mut(&key) {
            match &mut owned.consumer {
                Some(consumer) => consumer.seek(offset),
                None => owned.position = Some(Position { offset, epoch: -1 }),
            }
        }
    }

    /// Takes the cuts of the log found under this member's partitions
    /// since the last call: messages it had read (and maybe committed) that
    /// an unclean election removed, so that offsets from each `from` on
    /// hold other messages now. The member goes on from `from` by itself;
    /// this says what was lost (KIP-320).
    pub fn take_truncations(&mut self) -> Vec<Truncation> {
        std::mem::take(&mut self.truncations)
    }

    /// Takes the committed offsets this member found outside its
    /// partitions' logs since the last call (a commit past the log's end,
    /// below its start, or inside a message). Each such partition went on
    /// where [`GroupConfig::start_from`] says instead of failing.
    pub fn take_offset_resets(&mut self) -> Vec<OffsetReset> {
        std::mem::take(&mut self.offset_resets)
    }

    /// Commits the position of every owned partition.
    pub fn commit(&mut self) -> Result<(), ClientError> {
        let all: Vec<(String, u32)> = self.owned.keys().cloned().collect();
        self.last_commit = Instant::now();
        match self.commit_some(&all) {
            Err(error) => self.look_again_if_lost(error),
            ok => ok,
        }
    }

    /// A commit's failure: when a partition or the session was lost, looks
    /// again (a heartbeat that finds the session gone joins again); any
    /// other error is the caller's.
    fn look_again_if_lost(&mut self, error: ClientError) -> Result<(), ClientError> {
        if matches!(
            error.code(),
            Some(ErrorCode::NotPartitionOwner | ErrorCode::UnknownMember)
        ) {
            self.view.generation = 0;
            self.heartbeat(0)
        } else {
            Err(error)
        }
    }

    /// Returns the next messages of the member's partitions (possibly none,
    /// after waiting up to `max_wait`), heartbeating, rebalancing and
    /// auto-committing as due. Partitions whose broker is down, and a
    /// coordinator that does not answer, are retried with back-off (see
    /// [`GroupConsumer::outages`]) while the rest goes on.
    pub fn poll(&mut self) -> Result<Vec<GroupMessage>, ClientError> {
        if self.config.auto_commit_interval.is_some() {
            // Calling poll again says the last batch was processed.
            self.processed = self.positions().into_iter().collect();
        }
        if let Some(answer) = self.beats.as_ref().and_then(Heartbeats::take) {
            let acted = self.act_on(answer);
            self.coordinator_result(acted)?;
        }
        if let Some(outcome) = self.committer.as_ref().and_then(Committer::take) {
            let landed = self.commit_outcome(outcome);
            self.coordinator_result(landed)?;
        }
        if let Some(interval) = self.config.auto_commit_interval {
            // On the commit thread, never from here: a commit waits out the
            // broker's etcd timeout when etcd is away. Not while the
            // coordinator is away (the heartbeats say when it is back).
            if self.last_commit.elapsed() >= interval
                && self.coordinator.is_none()
                && self.committer.as_ref().is_some_and(|c| !c.busy())
            {
                self.last_commit = Instant::now();
                let offsets = self.moved(self.positions());
                if !offsets.is_empty() {
                    if let Some(committer) = &self.committer {
                        committer.send(&self.joined, offsets);
                    }
                }
            }
        }
        let wait_ms = u32::try_from(self.config.max_wait.as_millis()).unwrap_or(u32::MAX);
        let readable: Vec<(String, u32)> = self
            .owned
            .iter()
            .filter(|(_, o)| o.unavailable.as_ref().is_none_or(Unavailable::due))
            .map(|(k, _)| k.clone())
            .collect();
        if readable.is_empty() {
            // Nothing to read: wait for the next heartbeat's answer instead
            // (at once if the group changes).
            let wait = self.config.max_wait.min(self.heartbeat_period());
            if let Some(answer) = self.beats.as_ref().and_then(|b| b.wait(wait)) {
                let acted = self.act_on(answer);
                self.coordinator_result(acted)?;
            }
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for (topic, partition) in &readable {
            self.read_from(topic, *partition, 0, &mut out)?;
        }
        if out.is_empty() {
            // Long-poll one partition (in turn), so an idle group does not spin.
            self.cursor = (self.cursor + 1) % readable.len();
            let (topic, partition) = &readable[self.cursor];
            self.read_from(topic, *partition, wait_ms, &mut out)?;
        }
        Ok(out)
    }

    /// Lets a heartbeat's or commit's failure pass when the coordinator is
    /// merely away (noted in `outages`, retried with back-off).
    fn coordinator_result(&mut self, result: Result<(), ClientError>) -> Result<(), ClientError> {
        match result {
            Ok(()) => {
                self.coordinator = None;
                Ok(())
            }
            Err(error) if coordinator_away(&error) => {
                match &mut self.coordinator {
                    Some(u) => u.again(error, &self.client),
                    None => self.coordinator = Some(Unavailable::new(error, &self.client)),
                }
                Ok(())
            }
            Err(error) => Err(error),
        }
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one read over a member's partitions with its outages and resets; the loop's state is local"
    )]
    fn read_from(
        &mut self,
        topic: &str,
        partition: u32,
        wait_ms: u32,
        out: &mut Vec<GroupMessage>,
    ) -> Result<(), ClientError> {
        let key = (topic.to_string(), partition);
        let Some(owned) = self.owned.get(&key) else {
            return Ok(());
        };
        if owned.consumer.is_none() {
            let position = owned.position;
            let opened = self.open(topic, partition, position);
            let Some(owned) = self.owned.get_mut(&key) else {
                return Ok(());
            };
            match opened {
                Ok(consumer) => owned.consumer = Some(consumer),
                Err(error) if passes(&error) => {
                    match &mut owned.unavailable {
                        Some(u) => u.again(error, &self.client),
                        None => owned.unavailable = Some(Unavailable::new(error, &self.client)),
                    }
                    return Ok(());
                }
                Err(error) => return Err(error),
            }
        }
        let Some(owned) = self.owned.get_mut(&key) else {
            return Ok(());
        };
        let Some(consumer) = owned.consumer.as_mut() else {
            return Ok(());
        };
        consumer.set_max_wait_ms(wait_ms);
        let polled = consumer.poll_with(|m| {
            out.push(GroupMessage {
                topic: topic.to_string(),
                partition,
                offset: m.offset,
                key: m.key.map(<[u8]>::to_vec),
                value: m.value.to_vec(),
                timestamp: m.timestamp,
                headers: m.headers.to_owned_vec(),
            })
        });
        for truncation in consumer.take_truncations() {
            if self.truncations.len() < TRUNCATIONS_KEPT {
                self.truncations.push(truncation);
            }
        }
        match polled {
            Ok(_) => {
                owned.unavailable = None;
                owned.unchecked_commit = None;
                Ok(())
            }
            Err(error) if owned.unchecked_commit.is_some() && bad_offset(&error) => {
                // The committed offset is not in the log (past its end,
                // before its start, or inside a message: the broker does
                // not check commits against logs). Start where
                // `start_from` says, as Kafka's `auto.offset.reset`, and
                // say so (issue 24, item 12).
                let committed = owned.unchecked_commit.take().unwrap_or_default();
                owned.consumer = None;
                owned.position = None;
                if self.offset_resets.len() < TRUNCATIONS_KEPT {
                    self.offset_resets.push(OffsetReset {
                        topic: topic.to_string(),
                        partition,
                        committed,
                        error: error.to_string(),
                    });
                }
                Ok(())
            }
            Err(error) if passes(&error) => {
                // The broker went away under an open consumer: keep its
                // position, reopen (with fresh Metadata) after a back-off.
                owned.position = owned.consumer.as_ref().map(Position::of);
                owned.consumer = None;
                match &mut owned.unavailable {
                    Some(u) => u.again(error, &self.client),
                    None => owned.unavailable = Some(Unavailable::new(error, &self.client)),
                }
                Ok(())
            }
            Err(error) => Err(error),
        }
    }

    /// Commits the position of every owned partition (everything `poll`
    /// returned counts as processed) and leaves the group: its partitions
    /// go to the others at once. Dropping the member leaves too, but
    /// commits less (see the module's documentation).
    pub fn close(mut self) -> Result<(), ClientError> {
        let committed = self.commit();
        let left = self.leave();
        committed.and(left)
    }

    fn leave(&mut self) -> Result<(), ClientError> {
        // No heartbeat, and no commit, after the leave.
        if let Some(beats) = self.beats.as_mut() {
            beats.stop();
        }
        if let Some(committer) = self.committer.as_mut() {
            committer.stop();
        }
        self.owned.clear();
        let left = self.home.leave_group(&self.group, &self.joined);
        self.joined.session_id = 0;
        left
    }
}

impl Drop for GroupConsumer {
    fn drop(&mut self) {
        if self.joined.session_id == 0 {
            return;
        }
        if self.config.auto_commit_interval.is_some() {
            let processed = std::mem::take(&mut self.processed);
            let _ = self.commit_positions(processed.into_iter().collect());
        }
        let _ = self.leave();
    }
}

/// The pause before the next claim: doubling from 50 ms, capped at 1.6 s,
/// with up to half of it added at random so that members that saw the same
/// change do not retry in lockstep.
fn backoff(attempt: u32) -> Duration {
    let base = 50u64 << attempt.min(5);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let jitter = crate::types::fnv1a(&nanos.to_le_bytes()) % (base / 2 + 1);
    Duration::from_millis(base + jitter)
}
