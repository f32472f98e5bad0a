//! WAIT on a connection's home thread: the connection is paused (nothing
//! else of its pipeline runs) until enough replicas acknowledged the
//! stream offset that covers its writes, or its timeout.
//!
//! The target: the handler cannot know the offset of the client's writes
//! (their records reach the stream through the writer's queue), so the
//! thread hands its shard's records over first, then queues a mark in the
//! stream (`repl::wait_ticket`): every record queued before it is this
//! client's earlier writes or older, and the offset at the mark covers
//! them (the stream's own PINGs and GETACKs after the last data are not
//! counted, as Redis's client `woff`). A `REPLCONF GETACK *` follows it
//! in the stream only when too few replicas acknowledged the target
//! already, and at most one per target (`Master::wait_mark`): a WAIT
//! whose writes the replicas already acknowledged answers with no round
//! trip.
//!
//! Waking: ACKs arrive on the replication threads; while a thread has
//! WAITing connections its loop looks at them every [`POLL`] (a few
//! clients, a few atomic loads and one short lock each), instead of the
//! replication threads learning which thread to wake.

use std::sync::atomic::Ordering;
use std::time::Duration;

use resp::Reply;

use super::super::blocking;
use super::{Conn, Core, Worker};

/// How often a thread with WAITing connections looks at the ACKs.
pub(super) const POLL: Duration = Duration::from_millis(5);

/// `c` executed a WAIT that must block: its target is fixed now.
pub(super) fn start(core: &mut Core, c: &mut Conn, slot: usize) {
    core.aof_flush();
    if let Some(w) = c.client.repl_wait.as_mut() {
        w.target = Some(crate::server::repl::wait_ticket(
            &core.server,
            w.numreplicas,
        ));
    }
    blocking::set_blocked(core.server.ops, &mut c.client, true);
    core.repl_waits.push((slot, c.gen));
}

impl Worker {
    /// Answers the WAITs whose replicas acknowledged or whose time is up.
    pub(super) fn check_repl_waits(&mut self) {
        let now = engine::now_ms();
        for (slot, gen) in std::mem::take(&mut self.core.repl_waits) {
            let Some(c) = self.conns.slots.get_mut(slot).and_then(|c| c.as_mut()) else {
                continue;
            };
            if c.gen != gen {
                continue;
            }
            let Some(w) = c.client.repl_wait.as_ref() else {
                continue;
            };
            let target = w
                .target
                .as_ref()
                .map_or(u64::MAX, |t| t.load(Ordering::Acquire));
            let acked = if target == u64::MAX {
                0
            } else {
                self.core.server.repl.acked(target)
            };
            let timed_out = w.deadline_ms != 0 && now >= w.deadline_ms;
            if acked < w.numreplicas && !timed_out {
                self.core.repl_waits.push((slot, gen));
                continue;
            }
            c.client.repl_wait = None;
            blocking::set_blocked(self.core.server.ops, &mut c.client, false);
            let mut r = Reply::new(c.client.resp3);
            r.int(acked as i64);
            c.push_ready(r.as_bytes());
            self.conns.mark_dirty(slot);
            self.conns.resume.push(slot);
        }
    }
}
