//! A connection answers its requests in order, so a fetch long-poll at the
//! head of its queue holds back every answer behind it: another partition's
//! new messages, a produce's acknowledgement. A consumer of many partitions
//! on one connection would see a message on one partition wait for another
//! partition's long-poll to time out (up to `max_wait_ms`).
//!
//! So when the connection's writer is waiting on a fetch and an answer
//! behind it is ready, it asks that fetch to give way: the fetch stops
//! waiting and answers with what its partition has now, usually nothing,
//! which `max_wait_ms` allows (it is an upper bound), and the answers behind
//! it follow at once. The client sends that partition's fetch again.
//!
//! A fetch forwarded to another shard does not hear the request: it waits
//! out its time on the owning shard. Clients that read many partitions
//! connect to each partition's own shard (metadata names it), so that path
//! is the exception.
//!
//! A MultiFetch waits on all its partitions at once, so a connection has at
//! most one waiting: a later one answers at once with what it has. That
//! keeps what one connection's pipelined requests make the shard check on
//! every new message to what single fetches cost (PROTOCOL.md, MultiFetch).

use crate::notify::Notify;
use std::cell::Cell;

/// One connection's "the fetch with this request id, stop waiting".
#[derive(Default)]
pub struct GiveWay {
    asked: Cell<Option<u32>>,
    notify: Notify,
    multi_fetch_waiting: Cell<bool>,
}

/// Held while a MultiFetch of the connection waits.
pub struct MultiFetchWait<'a>(&'a GiveWay);

impl Drop for MultiFetchWait<'_> {
    fn drop(&mut self) {
        self.0.multi_fetch_waiting.set(false);
    }
}

impl GiveWay {
    /// Asks the waiting fetch with `request_id` to answer now.
    pub fn ask(&self, request_id: u32) {
        self.asked.set(Some(request_id));
        self.notify.notify_all();
    }

    /// Forgets the request: the fetch it named has answered.
    pub fn clear(&self) {
        self.asked.set(None);
    }

    /// The right to wait for a MultiFetch, unless another of the
    /// connection's waits.
    pub fn multi_fetch_wait(&self) -> Option<MultiFetchWait<'_>> {
        if self.multi_fetch_waiting.replace(true) {
            return None;
        }
        Some(MultiFetchWait(self))
    }

    /// Resolves once the fetch with `request_id` is asked to give way.
    pub async fn asked(&self, request_id: u32) {
        self.notify
            .wait_until(|| self.asked.get() == Some(request_id))
            .await
    }
}
