//! A group member's automatic commits, on a thread and a connection of
//! their own (as Kafka's consumer commits asynchronously from `poll`), so
//! that a commit never holds up reading.
//!
//! A commit is one etcd transaction on the coordinator's side: while etcd
//! is slow or away, the broker answers it only after its etcd timeout, and
//! a member that committed from `poll` read nothing meanwhile. Seen as a
//! member printing a tenth of what it owned while etcd was paused (issue
//! 27, item 6's test, flaky once the coordinator answered a parked
//! heartbeat and the member took that as "back").
//!
//! One commit is in flight at a time; the member hands the next one over
//! only after taking the outcome of the last, and waits for an in-flight
//! commit to end ([`Committer::settle`]) before any commit of its own on
//! its home connection (a release, `commit`, `close`), so commits of a
//! partition land in the order they were made.

use super::{lock, Client, ClientError};
use crate::codec::groups::{Joined, OffsetCommit};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// What a commit came to: the offsets it carried, and whether they landed.
pub type Outcome = (Vec<OffsetCommit>, Result<(), ClientError>);

#[derive(Default)]
struct State {
    /// A commit handed over and not yet sent: the session and offsets.
    pending: Option<(Joined, Vec<OffsetCommit>)>,
    /// A commit is being sent.
    busy: bool,
    /// The last commit's outcome, not taken yet.
    outcome: Option<Outcome>,
    stopped: bool,
}

/// The member's side of its commit thread.
pub struct Committer {
    shared: Arc<(Mutex<State>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Committer {
    /// Starts the thread; its connection goes to `home`'s brokers and gives
    /// a request up after `timeout`.
    pub fn start(home: &Client, group: &str, timeout: Duration) -> Result<Committer, ClientError> {
        let shared = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let mut config = home.config().clone();
        config.request_timeout = config.request_timeout.min(timeout);
        let brokers = home.reconnect_addresses().join(",");
        let group = group.to_string();
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("ringlog-commit".into())
            .spawn(move || run(&thread_shared, &brokers, &config, &group))?;
        Ok(Committer {
            shared,
            thread: Some(thread),
        })
    }

    /// Whether a commit is handed over or in flight (its outcome not yet
    /// known).
    pub fn busy(&self) -> bool {
        let state = lock(&self.shared.0);
        state.busy || state.pending.is_some() || state.outcome.is_some()
    }

    /// Hands a commit over; `false` (and nothing sent) while the last one
    /// is not taken yet.
    pub fn send(&self, joined: &Joined, offsets: Vec<OffsetCommit>) -> bool {
        let (mutex, changed) = &*self.shared;
        let mut state = lock(mutex);
        if state.busy || state.pending.is_some() || state.outcome.is_some() {
            return false;
        }
        state.pending = Some((joined.clone(), offsets));
        changed.notify_all();
        true
    }

    /// The outcome of the last commit, if it has ended and not been taken.
    pub fn take(&self) -> Option<Outcome> {
        lock(&self.shared.0).outcome.take()
    }

    /// Waits for the commit in flight, if any, to end; its outcome.
    pub fn settle(&self) -> Option<Outcome> {
        let (mutex, changed) = &*self.shared;
        let mut state = lock(mutex);
        while (state.busy || state.pending.is_some()) && !state.stopped {
            state = changed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        state.outcome.take()
    }

    /// Stops the thread (after the commit in flight) and waits for it.
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

impl Drop for Committer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(shared: &(Mutex<State>, Condvar), brokers: &str, config: &super::ClientConfig, group: &str) {
    let (mutex, changed) = shared;
    let mut client: Option<Client> = None;
    loop {
        let (joined, offsets) = {
            let mut state = lock(mutex);
            loop {
                if state.stopped {
                    return;
                }
                if let Some(pending) = state.pending.take() {
                    state.busy = true;
                    break pending;
                }
                state = changed.wait(state).unwrap_or_else(|p| p.into_inner());
            }
        };
        let committed = match &client {
            Some(c) => c.commit_offsets(group, &joined, &offsets),
            None => Client::with_config(brokers, config.clone()).and_then(|c| {
                let answer = c.commit_offsets(group, &joined, &offsets);
                client = Some(c);
                answer
            }),
        };
        if committed.is_err() {
            // A broken or timed-out connection is not used again: a late
            // answer would be taken for the next request's.
            client = None;
        }
        let mut state = lock(mutex);
        state.busy = false;
        state.outcome = Some((offsets, committed.map(|_| ())));
        changed.notify_all();
    }
}
