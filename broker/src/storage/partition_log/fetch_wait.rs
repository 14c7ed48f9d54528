//! Fetches waiting at the flushed end: while one waits, the partition's
//! appends are flushed within the settings' delay instead of the topic's
//! policy, so a tailing consumer sees messages after about one fdatasync.

use super::*;

/// A fetch waiting at the flushed end (it found nothing flushed to read):
/// while it is held, what is appended beyond the flushed end — already, or
/// while it waits — is flushed within the settings' delay
/// ([`LogSettings::waiting_fetch_flush`]). Dropping it ends the wait.
pub struct WaitingFetch<S: Storage> {
    log: Shared<S>,
}

impl<S: Storage> Drop for WaitingFetch<S> {
    fn drop(&mut self) {
        let mut l = self.log.borrow_mut();
        l.fetches_waiting = l.fetches_waiting.saturating_sub(1);
    }
}

/// Registers a fetch waiting at the flushed end; see [`WaitingFetch`].
pub fn fetch_waits<S: Storage>(log: &Shared<S>) -> WaitingFetch<S> {
    log.borrow_mut().fetches_waiting += 1;
    flush_for_waiting_fetches(log);
    WaitingFetch { log: log.clone() }
}

/// While fetches wait and appended bytes are not flushed, makes sure a
/// flush of them is asked for within the settings' delay: at once, or by
/// a timer that one append arms for all that follow it (so a tailing
/// consumer costs at most one flush round per delay, however fast the
/// producers append).
pub(super) fn flush_for_waiting_fetches<S: Storage>(log: &Shared<S>) {
    let delay = {
        let mut l = log.borrow_mut();
        let Some(delay) = l.settings.waiting_fetch_flush else {
            return;
        };
        if l.fetches_waiting == 0
            || l.waiting_fetch_flush_due
            || l.end_offset <= l.flushed_offset
            || l.poisoned.is_some()
        {
            return;
        }
        if delay.is_zero() {
            l.want_flushed_to_end();
            drop(l);
            request_sync(log, true);
            return;
        }
        l.waiting_fetch_flush_due = true;
        delay
    };
    let storage = log.borrow().storage.clone();
    let log = log.clone();
    let sleeping = storage.clone();
    storage.spawn(async move {
        sleeping.sleep(delay).await;
        let flush = {
            let mut l = log.borrow_mut();
            l.waiting_fetch_flush_due = false;
            // Whoever still waits, and whatever is unflushed by now: the
            // fetch that armed it may have been answered meanwhile.
            let flush = l.fetches_waiting > 0 && l.end_offset > l.flushed_offset;
            if flush {
                l.want_flushed_to_end();
            }
            flush
        };
        if flush {
            request_sync(&log, true);
        }
    });
}
