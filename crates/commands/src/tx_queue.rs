//! What a lock table's waiting requests ask for, summed up: enough to tell
//! in O(a request's keys) whether a request conflicts with any of them.
//!
//! The queue is FIFO and a request passes a queued one only if they do not
//! conflict (see `tx`'s "Starvation"). Comparing each request with every
//! queued one made a new request O(waiting) and a grant pass over the
//! queue O(waiting²): with a few hundred MSETs of dropped clients queued
//! on a shard, each release compared tens of thousands of pairs. A
//! summary counts, per key, the queued requests that read it and write it,
//! and how many lock a whole shard or hold any key or any written key:
//! [`LockReq::conflicts`] is an OR over those, so "conflicts with some
//! request of the set" is the same OR over the counts. The table keeps one
//! for its whole queue (new requests); a grant pass builds one for the
//! requests still waiting ahead of the one it looks at.
//!
//! Memory: one entry per distinct (database, key) queued; nothing when
//! the queue is empty (cleared, not freed, between passes).

use std::collections::HashMap;

use super::{LockReq, Mode};

/// A lock table's two summaries.
#[derive(Default, Debug)]
pub(super) struct Summaries {
    /// Every waiting request.
    pub queued: Summary,
    /// A grant pass's: the requests that stay waiting ahead of the one it
    /// looks at (kept between passes to reuse its table).
    pub ahead: Summary,
}

#[derive(Default, Debug)]
pub(super) struct Summary {
    /// `(db, key hash)` → (requests reading it, requests writing it).
    keys: HashMap<(usize, u64), (u32, u32), foldhash::fast::FixedState>,
    whole_readers: u32,
    whole_writers: u32,
    /// Requests with at least one key, and with at least one written key.
    with_keys: u32,
    with_write_keys: u32,
}

impl Summary {
    pub(super) fn add(&mut self, r: &LockReq) {
        self.count(r, true);
    }

    pub(super) fn remove(&mut self, r: &LockReq) {
        self.count(r, false);
    }

    pub(super) fn clear(&mut self) {
        self.keys.clear();
        self.whole_readers = 0;
        self.whole_writers = 0;
        self.with_keys = 0;
        self.with_write_keys = 0;
    }

    fn count(&mut self, r: &LockReq, add: bool) {
        let step = |n: &mut u32| {
            if add {
                *n += 1;
            } else {
                debug_assert!(*n > 0, "removing a request never added");
                *n = n.saturating_sub(1);
            }
        };
        match r.whole {
            Some(Mode::Read) => step(&mut self.whole_readers),
            Some(Mode::Write) => step(&mut self.whole_writers),
            None => {}
        }
        if !r.keys.is_empty() {
            step(&mut self.with_keys);
        }
        if r.keys.iter().any(|k| k.2 == Mode::Write) {
            step(&mut self.with_write_keys);
        }
        for &(db, key, mode) in &r.keys {
            let e = self.keys.entry((db, key)).or_default();
            match mode {
                Mode::Read => step(&mut e.0),
                Mode::Write => step(&mut e.1),
            }
            if *e == (0, 0) {
                self.keys.remove(&(db, key));
            }
        }
    }

    /// Whether `req` (settled) conflicts with some request summed here:
    /// [`LockReq::conflicts`] with each of them, OR-ed.
    pub(super) fn conflicts(&self, req: &LockReq) -> bool {
        #[cfg(test)]
        super::tests::count_check();
        let writes = || req.keys.iter().any(|k| k.2 == Mode::Write);
        let whole = match req.whole {
            Some(Mode::Write) => self.whole_readers + self.whole_writers + self.with_keys > 0,
            Some(Mode::Read) => self.whole_writers + self.with_write_keys > 0,
            None => false,
        };
        if whole
            || (self.whole_writers > 0 && !req.keys.is_empty())
            || (self.whole_readers > 0 && writes())
        {
            return true;
        }
        if self.keys.is_empty() {
            return false;
        }
        req.keys.iter().any(|&(db, key, mode)| {
            self.keys
                .get(&(db, key))
                .is_some_and(|&(readers, writers)| match mode {
                    Mode::Read => writers > 0,
                    Mode::Write => readers + writers > 0,
                })
        })
    }
}
