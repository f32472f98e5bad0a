//! Writing replies out: one `write` per connection with new output per
//! iteration, however many replies it holds (a pipelined multi-shard
//! command's predecessors wait for its reply, up to [`FLUSH_DEFER_MAX`]);
//! closing connections that are done; and, under `appendfsync always`,
//! holding the replies of writes until their AOF records are durable
//! (`settle_holds`, `want_durable`; a thread that runs every shard fsyncs
//! itself, `lead_aof`).
//!
//! Per thread: the held lists grow with this thread's connections that
//! hold replies, never with the number of threads.

use std::sync::Arc;

use super::super::conn::Conn;
use super::request::{has_work, paused};
use super::{Core, Worker};

/// Unwritten output a connection may hold back while a pipelined
/// multi-shard command of it is still running (see `flush_one`).
const FLUSH_DEFER_MAX: usize = 64 << 10;

impl Core {
    /// Puts a connection that got a held reply on the held list.
    pub(super) fn note_held(&mut self, c: &mut Conn, slot: usize) {
        self.held_aof = self.aof.as_ref().map(|a| Arc::as_ptr(a) as usize);
        if !c.held_listed {
            c.held_listed = true;
            self.held.push((slot, c.gen));
        }
    }
}

impl Worker {
    /// Under `always` with `led`: writes and fsyncs the AOF records this
    /// worker appended since the last call (and everything queued before
    /// them), waking the threads other than the shards in `mine` that wait
    /// for them, then sends the replies that waited for them (as Redis
    /// writes its replies right after its fsync, before it sleeps).
    /// `inline` false: the batch goes to the writer thread instead, and
    /// this thread serves the next requests while the writer fsyncs.
    pub fn lead_aof(&mut self, mine: &[usize], inline: bool) {
        if self.core.aof_due.replace(0) == 0 {
            return;
        }
        engine::alloc::enter_shard(self.core.id);
        let Some(a) = &self.core.aof else { return };
        if !inline {
            a.hand_off();
            return;
        }
        if a.lead(mine) {
            self.flush_conns();
        }
    }

    /// Records appended under `always` since the last lead.
    pub fn aof_due(&self) -> u64 {
        self.core.aof_due.get()
    }

    /// Writes every connection with new output; then closes those that are
    /// done, and re-runs those that can execute more. Repeats (bounded)
    /// while re-running produced new output.
    pub(super) fn flush_conns(&mut self) {
        for _ in 0..4 {
            self.settle_holds();
            if self.conns.dirty.is_empty() {
                return;
            }
            let spare = self.conns.spare.pop().unwrap_or_default();
            let mut list = std::mem::replace(&mut self.conns.dirty, spare);
            for &slot in &list {
                self.flush_one(slot);
            }
            list.clear();
            self.conns.spare.push(list);
            if self.conns.resume.is_empty() {
                return;
            }
            self.run_resumes();
        }
    }

    /// `appendfsync always`: gives replies held on this shard's buffered
    /// records their target (appending the records), then releases every
    /// held reply whose records are durable. With another policy (changed
    /// at runtime) every held reply goes.
    pub(super) fn settle_holds(&mut self) {
        let Worker { core, conns, .. } = self;
        // Every policy: records reach the writer before the replies that
        // follow them are written.
        core.aof_flush();
        if core.local_holds.is_empty() && core.held.is_empty() {
            return;
        }
        let durable = match (&core.aof, core.aof_always) {
            (Some(a), true) if core.held_aof == Some(Arc::as_ptr(a) as usize) => a.durable(),
            _ => u64::MAX,
        };
        if !core.local_holds.is_empty() {
            let target = core.aof_last;
            for (slot, gen) in std::mem::take(&mut core.local_holds) {
                let c = conns.slots.get_mut(slot).and_then(|c| c.as_mut());
                if let Some(c) = c.filter(|c| c.gen == gen) {
                    c.local_listed = false;
                    c.resolve_local(target);
                }
            }
        }
        let mut list = std::mem::take(&mut core.held);
        list.retain(|&(slot, gen)| {
            let c = conns.slots.get_mut(slot).and_then(|c| c.as_mut());
            let Some(c) = c.filter(|c| c.gen == gen) else {
                return false;
            };
            let moved = c.release(durable);
            let keep = c.has_held();
            c.held_listed = keep;
            if moved {
                conns.mark_dirty(slot);
            }
            keep
        });
        core.held = list;
    }

    /// Before sleeping: asks the AOF writer to wake this thread once the
    /// oldest held reply can go. True if one can go already (then the
    /// thread must not sleep).
    pub(super) fn want_durable(&mut self) -> bool {
        let core = &self.core;
        if core.held.is_empty() {
            return false;
        }
        let Some(a) = core.aof.as_ref().filter(|_| core.aof_always) else {
            return true;
        };
        if !core.local_holds.is_empty() {
            return true;
        }
        let min = core
            .held
            .iter()
            .filter_map(|&(slot, gen)| {
                let c = self.conns.slots.get(slot)?.as_ref()?;
                Some(c.front_hold()).filter(|&h| h != 0 && c.gen == gen)
            })
            .min();
        match min {
            Some(t) => a.want(core.id, t) >= t,
            // Held replies wait behind replies still in flight.
            None => false,
        }
    }

    pub(super) fn flush_one(&mut self, slot: usize) {
        let Some(c) = self.conns.slots.get_mut(slot).and_then(|c| c.as_mut()) else {
            return;
        };
        c.dirty = false;
        if c.check_obuf(&self.core.cfg.obuf, self.core.shard.now_ms) {
            return self.close_conn(slot);
        }
        // Replies ahead of a pipelined command still running elsewhere (a
        // coordinator, or a hop to another shard) go out with its reply:
        // one write for the pipeline instead of one per multi-shard command
        // or hop (finishing marks the connection dirty). Bounded by
        // FLUSH_DEFER_MAX.
        // A blocked command may wait forever: what precedes it goes now.
        // (A reply held for the AOF is not in flight: what precedes it goes.)
        let in_flight = (c.coord.is_some() || c.front_in_flight()) && c.block.is_none();
        let defer = in_flight && !c.closing && c.unwritten() < FLUSH_DEFER_MAX;
        if !defer {
            match c.flush() {
                Ok(n) => self.core.stats.net_output_bytes += n as u64,
                Err(_) => return self.close_conn(slot),
            }
        }
        if let Some(m) = c.master.as_mut() {
            if c.pending.is_empty() && c.coord.is_none() {
                crate::server::repl::replica::publish(&self.core.server, m);
            }
        }
        let idle = c.unwritten() == 0 && c.pending.is_empty() && c.coord.is_none();
        if idle && (c.closing || (c.peer_eof && !has_work(c))) {
            // QUIT, a protocol error, CLIENT KILL of itself, or a peer that
            // shut its side: every reply owed has been written.
            self.close_conn(slot);
        } else if !c.closing
            && !paused(c)
            && !c.deferred
            && (has_work(c) || (c.unread && !c.peer_eof))
        {
            self.conns.resume.push(slot);
        }
    }
}
