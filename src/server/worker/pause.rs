//! CLIENT PAUSE on a connection's home thread: connections whose next
//! command the pause holds (see `commands::ops::pause`).
//!
//! A held connection keeps its request unparsed in its buffer and waits
//! like a connection behind a transaction's lock (`lock_wait`, so nothing
//! else of its pipeline runs), on this thread's `pause_held` list, in the
//! order the commands were held. It counts as blocked (INFO
//! `blocked_clients`, CLIENT LIST flag `b`), as Redis counts postponed
//! clients.
//!
//! Release without spinning: each held connection is dispatched again
//! only when the pause's generation moved (UNPAUSE or another PAUSE, which
//! also wake every thread) or its end time passed (the loop's timeout
//! includes it). Connections still held then simply go back on the list,
//! in their order.

use std::time::Duration;

use super::super::blocking;
use super::{Conn, Core, Worker};

/// Holds `c`'s next command (dispatch answered `Step::Paused`).
pub(super) fn hold(core: &mut Core, c: &mut Conn, slot: usize) {
    if core.pause_held.is_empty() {
        core.pause_gen = core.server.ops.pause.gen();
    }
    blocking::set_blocked(core.server.ops, &mut c.client, true);
    core.pause_held.push((slot, c.gen));
}

impl Worker {
    /// How long the loop may sleep before a pause holding some of its
    /// connections ends.
    pub(super) fn pause_wait(&self) -> Option<Duration> {
        if self.core.pause_held.is_empty() {
            return None;
        }
        let end = self.core.server.ops.pause.end_ms()?;
        Some(Duration::from_millis(end.saturating_sub(engine::now_ms())))
    }

    /// Once per loop iteration: dispatches the held connections again when
    /// the pause changed or ended. Nothing when none is held.
    pub(super) fn release_paused(&mut self) {
        if self.core.pause_held.is_empty() {
            return;
        }
        let p = &self.core.server.ops.pause;
        let gen = p.gen();
        let over = p.end_ms().is_none_or(|end| end <= engine::now_ms());
        if gen == self.core.pause_gen && !over {
            return;
        }
        self.core.pause_gen = gen;
        for (slot, g) in std::mem::take(&mut self.core.pause_held) {
            let Some(mut c) = self.conns.slots.get_mut(slot).and_then(Option::take) else {
                continue;
            };
            if c.gen != g {
                self.conns.slots[slot] = Some(c);
                continue;
            }
            c.lock_wait = false;
            blocking::set_blocked(self.core.server.ops, &mut c.client, false);
            // Out of its slot while it runs (a script may serve the rest).
            self.process_lent(&mut c, slot);
            self.conns.slots[slot] = Some(c);
            self.after_desk();
            self.conns.mark_dirty(slot);
        }
    }
}
