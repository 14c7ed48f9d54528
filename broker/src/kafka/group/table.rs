//! The groups one shard coordinates: a table the shard owns
//! (`Shard::kafka_groups`), kept apart from the code that fills it, which
//! needs the shard.

use super::state::Group;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Instant;

/// A group this shard coordinates.
pub(super) struct Held {
    pub(super) group: Rc<RefCell<Group>>,
    pub(super) verified: Instant,
    /// The last request for it: an empty group idle for a minute is
    /// let go (it is in the registry), so groups that come and go do not
    /// fill the table.
    pub(super) used: Cell<Instant>,
}

/// The groups one shard coordinates.
#[derive(Default)]
pub struct Groups {
    pub(super) held: RefCell<HashMap<String, Held>>,
    pub(super) ticking: Cell<bool>,
}

impl Groups {
    /// The groups this shard coordinates, with their phase and protocol
    /// type (ListGroups).
    pub fn listed(&self) -> Vec<(String, &'static str, String)> {
        let mut out: Vec<_> = self
            .held
            .borrow()
            .iter()
            .map(|(name, held)| {
                let g = held.group.borrow();
                (name.clone(), g.phase.name(), g.protocol_type.clone())
            })
            .collect();
        out.sort();
        out
    }

    /// The bytes all groups of this shard hold for their clients.
    pub fn footprint(&self) -> usize {
        self.held
            .borrow()
            .values()
            .map(|h| h.group.borrow().footprint())
            .sum()
    }

    /// The group, if this shard holds it.
    pub fn get(&self, name: &str) -> Option<Rc<RefCell<Group>>> {
        self.held.borrow().get(name).map(|h| {
            h.used.set(Instant::now());
            h.group.clone()
        })
    }

    /// Lets a group go (another shard coordinates it now).
    pub fn drop_group(&self, name: &str) {
        if self.held.borrow_mut().remove(name).is_some() {
            tracing::warn!(group = %name, "kafka group: no longer its coordinator");
        }
    }
}
