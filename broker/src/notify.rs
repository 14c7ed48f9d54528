//! A single-threaded "something changed, look again" signal.
//!
//! Waiters register their waker and re-check their own condition when woken,
//! so a spurious wake-up is harmless. Used for a partition's watermarks (fetch
//! long-polls, produce acknowledgements) and a connection's response queue.
//! Not `Send`: it lives on one shard.

use std::cell::RefCell;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};

/// Wakes every registered waiter on [`Notify::notify_all`].
#[derive(Clone, Default, Debug)]
pub struct Notify {
    waiters: Rc<RefCell<Vec<Waker>>>,
}

impl Notify {
    /// A signal with no waiters.
    pub fn new() -> Self {
        Notify::default()
    }

    /// Wakes everyone waiting.
    pub fn notify_all(&self) {
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for waker in waiters {
            waker.wake();
        }
    }

    /// Wakes `waker` on the next notification (for a poll function that
    /// checks its own condition).
    pub fn register(&self, waker: &Waker) {
        let mut waiters = self.waiters.borrow_mut();
        if !waiters.iter().any(|w| w.will_wake(waker)) {
            waiters.push(waker.clone());
        }
    }

    /// Resolves once `ready()` returns true, checking it now and after every
    /// notification.
    pub async fn wait_until(&self, mut ready: impl FnMut() -> bool) {
        poll_fn(|cx| {
            if ready() {
                return Poll::Ready(());
            }
            self.register(cx.waker());
            Poll::Pending
        })
        .await
    }
}
