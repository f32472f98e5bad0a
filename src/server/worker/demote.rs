//! Blocked clients when this server gets a new master (REPLICAOF host
//! port, a failover's demotion): Redis's `disconnectAllBlockedClients`.
//!
//! A client blocked on a master (BLPOP on an empty list) must not be
//! served by the new master's stream once the server is its replica: the
//! pop would happen here and nowhere else, and the two would differ
//! (Redis's issue #2473; its Tcl integration/replication "BLPOP followed
//! by role change"). So every client blocked before the master was set
//! gets `-UNBLOCKED force unblock ... (master -> replica?)` and its
//! connection closes after that reply; WAIT's clients too. Paused clients
//! (CLIENT PAUSE) are not blocked in this sense and stay.
//!
//! Which clients: each claim carries the server's `masters_set` when its
//! command blocked (`blocking::ClaimFlag::at`), and `masters_set` counts
//! the masters set (`commands::repl::Repl::set_role`, before REPLICAOF
//! replies and before the link connects). The home thread answers them
//! at its next turn (a role change is a new configuration generation,
//! `Worker::refresh_config`) and, for a command still out on another
//! shard then, when its batch comes back blocked. A shard does not serve
//! such a waiter meanwhile (`waiters::serve_key` holds the key back as a
//! lock does), so even a write of the new master that reaches the key's
//! shard before the client's home thread has turned cannot serve it.
//!
//! Cost: one relaxed compare per configuration generation on each loop,
//! a walk of its connections only when a master was set; one atomic load
//! per waiter a shard serves.

use resp::Reply;

use super::super::blocking::{self, BlockPhase, NEW_MASTER_ERROR};
use super::{Conn, Core, Worker};

impl Worker {
    /// At a new configuration generation: if a master was set since this
    /// loop last looked, its clients blocked before get the error and
    /// close (see the module docs).
    pub(super) fn unblock_for_new_master(&mut self) {
        let m = self.core.server.repl.masters_set();
        if m == self.core.masters_seen {
            return;
        }
        self.core.masters_seen = m;
        for slot in 0..self.conns.slots.len() {
            let Some(c) = self.conns.slots[slot].as_mut() else {
                continue;
            };
            let answered = if c.client.repl_wait.take().is_some() {
                // WAIT (never from a replica: its refusal comes first).
                let mut r = Reply::new(c.client.resp3);
                r.error(NEW_MASTER_ERROR);
                c.push_ready(r.as_bytes());
                self.core.stats.count_error(NEW_MASTER_ERROR.as_bytes());
                close_unblocked(self.core.server.ops, c);
                true
            } else {
                answer_if_before_new_master(&mut self.core, c)
            };
            if answered {
                self.conns.mark_dirty(slot);
                self.conns.resume.push(slot);
            }
        }
    }
}

/// If connection `c` is blocked since before a master was set (its claim
/// still free), answers it with the error and marks it to close after
/// the reply; true if so (the caller marks it dirty and resumes it).
/// From the walk above, and for a command that comes back blocked from
/// another shard's batch after it (the walk could not see it blocked).
pub(super) fn answer_if_before_new_master(core: &mut Core, c: &mut Conn) -> bool {
    let BlockPhase::Blocked(t) = &c.block else {
        return false;
    };
    if !t.claim.before_new_master(core.server.repl.masters_set()) || !t.claim.take() {
        return false;
    }
    let mut r = Reply::new(c.client.resp3);
    r.error(NEW_MASTER_ERROR);
    c.complete(t.seq, r.as_bytes());
    c.block = BlockPhase::None;
    core.stats.count_error(NEW_MASTER_ERROR.as_bytes());
    close_unblocked(core.server.ops, c);
    true
}

/// Unblocked: not blocked any more, nothing more of it runs, and it
/// closes once its replies are written (Redis's CLIENT_CLOSE_AFTER_REPLY).
fn close_unblocked(ops: &commands::ops::Ops, c: &mut Conn) {
    blocking::set_blocked(ops, &mut c.client, false);
    c.client.close_after_reply = true;
    c.closing = true;
}
