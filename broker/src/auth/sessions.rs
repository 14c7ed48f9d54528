//! A shard's logged-in sessions, so that removing a user (or giving it a
//! password that [ends sessions](protocol::scram::Credential::ends_sessions))
//! closes its open connections at once instead of leaving them full access
//! until they happen to close.
//!
//! A connection that logged in with SCRAM registers its user and the stored
//! key it proved; the registration is dropped with the connection. Each
//! time the control thread publishes new users and rules it tells every
//! shard (`ShardMsg::SecurityChanged`), which reviews its sessions against
//! them and ends those whose user is gone, or whose user's credential now
//! in force is another one that ends sessions. An ended connection reads no
//! further request and closes; what it had already asked is answered.
//!
//! A session is also reviewed when it registers, so one that logged in on
//! a shard a moment before the news reached it does not slip through. A
//! certificate's principal is not a user of this table: a certificate is
//! revoked by its CA, not here.

use super::Snapshot;
use crate::notify::Notify;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::{Rc, Weak};

/// The shard's open sessions.
#[derive(Debug, Default)]
pub struct Sessions {
    next_id: Cell<u64>,
    open: RefCell<HashMap<u64, Entry>>,
}

#[derive(Debug)]
struct Entry {
    user: String,
    stored_key: [u8; 32],
    end: Rc<End>,
}

/// Whether a session was ended, and why; awaited by its connection.
#[derive(Debug, Default)]
pub struct End {
    why: RefCell<Option<String>>,
    notify: Notify,
}

impl End {
    /// Why the session was ended, if it was.
    pub fn why(&self) -> Option<String> {
        self.why.borrow().clone()
    }

    /// Resolves once the session is ended.
    pub async fn ended(&self) {
        self.notify.wait_until(|| self.why.borrow().is_some()).await
    }

    fn end(&self, why: String) {
        if self.why.borrow().is_none() {
            *self.why.borrow_mut() = Some(why);
            self.notify.notify_all();
        }
    }
}

/// A registered session: unregistered when dropped (its connection closed).
#[derive(Debug)]
pub struct Session {
    id: u64,
    sessions: Weak<Sessions>,
    end: Rc<End>,
}

impl Session {
    /// Whether (and why) the session was ended.
    pub fn end(&self) -> &Rc<End> {
        &self.end
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(sessions) = self.sessions.upgrade() {
            sessions.open.borrow_mut().remove(&self.id);
        }
    }
}

impl Sessions {
    /// Registers a session of `user`, which proved the credential with
    /// `stored_key`, and reviews it against `snapshot` at once.
    pub fn open(self: &Rc<Self>, user: &str, stored_key: [u8; 32], snapshot: &Snapshot) -> Session {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let entry = Entry {
            user: user.to_string(),
            stored_key,
            end: Rc::new(End::default()),
        };
        if let Some(why) = verdict(&entry, snapshot) {
            entry.end.end(why);
        }
        let end = entry.end.clone();
        self.open.borrow_mut().insert(id, entry);
        Session {
            id,
            sessions: Rc::downgrade(self),
            end,
        }
    }

    /// Ends the sessions `snapshot` no longer admits; returns how many.
    pub fn review(&self, snapshot: &Snapshot) -> u64 {
        let mut ended = 0;
        for entry in self.open.borrow().values() {
            if entry.end.why.borrow().is_some() {
                continue;
            }
            if let Some(why) = verdict(entry, snapshot) {
                tracing::info!(user = %entry.user, "closing a connection: {why}");
                entry.end.end(why);
                ended += 1;
            }
        }
        ended
    }

    /// Sessions open on this shard.
    pub fn len(&self) -> usize {
        self.open.borrow().len()
    }

    /// True when no session is open on this shard.
    pub fn is_empty(&self) -> bool {
        self.open.borrow().is_empty()
    }
}

/// Why `snapshot` ends this session, if it does.
fn verdict(entry: &Entry, snapshot: &Snapshot) -> Option<String> {
    match snapshot.users.get(&entry.user) {
        None => Some(format!("user {:?} was removed", entry.user)),
        Some(now) if now.stored_key != entry.stored_key && now.ends_sessions => Some(format!(
            "user {:?} has a new password that ends the sessions of the old one",
            entry.user
        )),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::scram::{Credential, ITERATIONS_MIN};

    fn snapshot(users: &[(&str, &Credential)]) -> Snapshot {
        Snapshot {
            users: users
                .iter()
                .map(|(n, c)| (n.to_string(), (*c).clone()))
                .collect(),
            ..Snapshot::default()
        }
    }

    #[test]
    fn removing_a_user_or_an_ending_password_ends_its_sessions_and_nothing_else() {
        let alice = Credential::new(b"a", ITERATIONS_MIN);
        let bob = Credential::new(b"b", ITERATIONS_MIN);
        let sessions = Rc::new(Sessions::default());
        let before = snapshot(&[("alice", &alice), ("bob", &bob)]);
        let a = sessions.open("alice", alice.stored_key, &before);
        let b = sessions.open("bob", bob.stored_key, &before);
        assert_eq!(sessions.len(), 2);
        assert_eq!(sessions.review(&before), 0);

        // A new password that does not end sessions: both go on.
        let rotated = Credential::new(b"b2", ITERATIONS_MIN);
        assert_eq!(
            sessions.review(&snapshot(&[("alice", &alice), ("bob", &rotated)])),
            0
        );
        // One that does: bob's old session ends, alice's does not.
        let leaked = Credential::new(b"b3", ITERATIONS_MIN).ending_sessions();
        assert_eq!(
            sessions.review(&snapshot(&[("alice", &alice), ("bob", &leaked)])),
            1
        );
        assert!(b.end().why().unwrap().contains("new password"));
        assert_eq!(a.end().why(), None);
        // A session proved with the ending credential itself stays.
        let after = snapshot(&[("alice", &alice), ("bob", &leaked)]);
        let b2 = sessions.open("bob", leaked.stored_key, &after);
        assert_eq!(b2.end().why(), None);

        // alice removed: hers ends, once; bob's new one goes on.
        let removed = snapshot(&[("bob", &leaked)]);
        assert_eq!(sessions.review(&removed), 1);
        assert_eq!(sessions.review(&removed), 0);
        assert!(a.end().why().unwrap().contains("\"alice\" was removed"));
        assert_eq!(b2.end().why(), None);
        // A login that raced the removal is ended as it registers.
        let late = sessions.open("alice", alice.stored_key, &removed);
        assert!(late.end().why().is_some());

        drop((a, b, b2, late));
        assert!(sessions.is_empty());
    }
}
