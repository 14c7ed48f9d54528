//! A group member's heartbeats, on a thread and a connection of their own
//! (as Kafka's KIP-62), so that its session lives while `poll` is busy: a
//! fetch from a broker that stopped answering waits out its request
//! timeout (30 s by default), longer than a session; a slow batch of the
//! application's, too. Heartbeats used to go out only between fetches,
//! and a member whose fetch retried against a dead broker lost its
//! partitions (issue 27, item 2).
//!
//! The thread long-polls the coordinator with the generation it saw last,
//! at most one heartbeat period at a time, so a changed view comes back at
//! once and an unchanged one once a period. It only keeps the session
//! alive and hands the newest answer to the member: rebalancing (release,
//! claim, commit) stays with `poll`, which owns the partitions.
//!
//! A member whose application stops calling `poll` for longer than
//! `max_poll_interval` is stuck, not slow: the thread stops heartbeating,
//! the session lapses and its partitions go to the others; the next `poll`
//! joins again.

use super::{lock, Client, ClientError};
use crate::codec::groups::{GroupView, Joined};
use crate::ErrorCode;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the thread and the member share.
#[derive(Debug)]
struct State {
    /// The session heartbeats are sent for; replaced by the member when it
    /// joins again.
    joined: Joined,
    /// The generation the last answer carried: what the long-poll waits
    /// to change.
    seen: u64,
    /// The newest answer the member has not taken.
    latest: Option<Result<GroupView, ClientError>>,
    /// When the member last polled.
    last_poll: Instant,
    /// The session is gone (UNKNOWN_MEMBER): nothing is sent until the
    /// member joins again.
    lost: bool,
    stopped: bool,
}

/// The member's side of its heartbeat thread.
pub struct Heartbeats {
    shared: Arc<(Mutex<State>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

/// How the thread heartbeats.
pub struct Schedule {
    /// Between two heartbeats when nothing changes (the long-poll's wait).
    pub period: Duration,
    /// Past this without a `poll`, the member is stuck: no more heartbeats.
    pub max_poll_interval: Duration,
}

impl Heartbeats {
    /// Starts heartbeating `joined` in `group` through a connection of its
    /// own to `client`'s brokers.
    pub fn start(
        client: &Client,
        group: &str,
        joined: Joined,
        seen: u64,
        schedule: Schedule,
    ) -> Result<Heartbeats, ClientError> {
        let shared = Arc::new((
            Mutex::new(State {
                joined,
                seen,
                latest: None,
                last_poll: Instant::now(),
                lost: false,
                stopped: false,
            }),
            Condvar::new(),
        ));
        // Its own connection: a long-poll must not hold the member's
        // requests, nor theirs its heartbeat. A request that hangs (a
        // stopped broker) gives up within a period, so the next goes to
        // another broker while the session still lives.
        let mut config = client.config().clone();
        config.request_timeout = config.request_timeout.min(schedule.period.max(MIN_TIMEOUT));
        // Every broker the member knows of: its bootstrap broker may be
        // the one that dies.
        let brokers = client.reconnect_addresses().join(",");
        let group = group.to_string();
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("ringlog-heartbeat".into())
            .spawn(move || run(&thread_shared, &brokers, config, &group, &schedule))?;
        Ok(Heartbeats {
            shared,
            thread: Some(thread),
        })
    }

    /// Notes a poll, and takes the newest answer not taken yet.
    pub fn take(&self) -> Option<Result<GroupView, ClientError>> {
        let mut state = lock(&self.shared.0);
        state.last_poll = Instant::now();
        state.latest.take()
    }

    /// Waits up to `wait` for an answer, and takes it.
    pub fn wait(&self, wait: Duration) -> Option<Result<GroupView, ClientError>> {
        let (mutex, changed) = &*self.shared;
        let mut state = lock(mutex);
        state.last_poll = Instant::now();
        let deadline = Instant::now() + wait;
        while state.latest.is_none() && !state.stopped {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = changed
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        state.latest.take()
    }

    /// The member joined again: heartbeat its new session from `seen`.
    pub fn rejoined(&self, joined: Joined, seen: u64) {
        let (mutex, changed) = &*self.shared;
        let mut state = lock(mutex);
        state.joined = joined;
        state.seen = seen;
        state.latest = None;
        state.lost = false;
        changed.notify_all();
    }

    /// Stops the thread (at once: it is woken) and waits for it.
    pub fn stop(&mut self) {
        {
            let (mutex, changed) = &*self.shared;
            lock(mutex).stopped = true;
            changed.notify_all();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Heartbeats {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The shortest request timeout a heartbeat gets.
const MIN_TIMEOUT: Duration = Duration::from_millis(500);

fn run(
    shared: &(Mutex<State>, Condvar),
    brokers: &str,
    config: super::ClientConfig,
    group: &str,
    schedule: &Schedule,
) {
    let (mutex, changed) = shared;
    let mut client: Option<Client> = None;
    let mut failures = 0u32;
    loop {
        let (joined, seen) = {
            let mut state = lock(mutex);
            loop {
                if state.stopped {
                    return;
                }
                let stuck = state.last_poll.elapsed() > schedule.max_poll_interval;
                if !state.lost && !stuck {
                    break;
                }
                state = changed
                    .wait_timeout(state, schedule.period)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            (state.joined.clone(), state.seen)
        };
        let wait_ms = u32::try_from(schedule.period.as_millis()).unwrap_or(u32::MAX);
        let answer = match &client {
            Some(client) => client.heartbeat_brief(group, &joined, seen, wait_ms),
            None => Client::with_config(brokers, config.clone()).and_then(|c| {
                // Learns the live brokers, to reconnect through later.
                let _ = c.metadata(&[]);
                let answer = c.heartbeat(group, &joined, seen, 0);
                client = Some(c);
                answer
            }),
        };
        let mut state = lock(mutex);
        if state.joined.session_id != joined.session_id {
            // Joined again meanwhile: this answer was for the old session.
            continue;
        }
        let pause = match &answer {
            Ok(view) => {
                failures = 0;
                state.seen = view.generation;
                None
            }
            Err(error) => {
                if error.code() == Some(ErrorCode::UnknownMember) {
                    state.lost = true;
                }
                failures = failures.saturating_add(1);
                Some(config.backoff(failures - 1).min(schedule.period))
            }
        };
        state.latest = Some(answer);
        changed.notify_all();
        if let Some(pause) = pause {
            // A failing coordinator is not asked again at once.
            let _ = changed
                .wait_timeout_while(state, pause, |s| !s.stopped)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
}
