//! The connection table of a worker ([`Conns`]): slots with generations
//! (a [`ConnRef`] names a connection, and stays stale-proof after a close
//! reuses the slot), the registry other commands see (CLIENT LIST, KILL,
//! UNBLOCK through `commands::coord::ClientRegistry`), and closing a
//! connection: aborting or orphaning its coordinator, leaving pub/sub,
//! MONITOR and tracking, and keeping its socket open while a direct reply
//! of another shard may still be written to it (`Conns::zombies`).
//!
//! Per thread, the table grows with this thread's connections only (a
//! slot is a pointer and a generation), never with the number of threads.

use std::sync::atomic::Ordering;

use commands::coord::{ClientIo, ClientRegistry, Plan};
use commands::ClientState;
use resp::Reply;

use super::super::blocking::{self, BlockPhase};
use super::super::conn::Conn;
use super::super::mailbox::ConnRef;
use super::home::send_plan;
use super::request::has_work;
use super::{Conns, Orphan, Worker};
use crate::log;

impl Conns {
    /// The connection `r` names, if it is still there.
    pub(super) fn get(&mut self, r: ConnRef) -> Option<&mut Conn> {
        self.slots
            .get_mut(r.slot as usize)?
            .as_deref_mut()
            .filter(|c| c.gen == r.gen)
    }

    pub(super) fn mark_dirty(&mut self, slot: usize) {
        if let Some(c) = self.slots[slot].as_mut() {
            if !c.dirty {
                c.dirty = true;
                self.dirty.push(slot);
            }
        }
    }
}

impl ClientRegistry for Conns {
    fn unblock(&mut self, id: u64, error: bool) -> Option<usize> {
        let slot = self
            .slots
            .iter()
            .position(|c| c.as_ref().is_some_and(|c| c.client.id == id))?;
        let c = self.slots[slot].as_mut()?;
        let BlockPhase::Blocked(t) = &c.block else {
            return None;
        };
        if !t.claim.take() {
            return None;
        }
        let (seq, cmd) = (t.seq, t.cmd_id);
        let mut r = Reply::new(c.client.resp3);
        if error {
            r.error(commands::connection::UNBLOCKED_ERROR);
        } else {
            // As on timeout.
            r.null_array();
        }
        c.complete(seq, r.as_bytes());
        c.block = BlockPhase::None;
        blocking::set_blocked(self.ops, &mut c.client, false);
        self.mark_dirty(slot);
        self.resume.push(slot);
        Some(cmd)
    }

    fn for_each(&self, f: &mut dyn FnMut(&ClientState, &ClientIo)) {
        for c in self.slots.iter().flatten() {
            f(&c.client, &c.io());
        }
    }
    fn recent_max_buffers(&self) -> (usize, usize) {
        self.peaks.max()
    }
    fn kill(&mut self, id: u64) -> bool {
        let found = self
            .slots
            .iter()
            .position(|c| c.as_ref().is_some_and(|c| c.client.id == id));
        match found {
            Some(slot) => {
                if let Some(c) = self.slots[slot].as_mut() {
                    if c.coord.is_some() {
                        // The killer itself (SKIPME no): reply, then close.
                        c.client.close_after_reply = true;
                    } else {
                        c.closing = true;
                        self.killed.push((slot, c.gen));
                    }
                }
                true
            }
            None => false,
        }
    }
}

impl Worker {
    pub(super) fn close_conn(&mut self, slot: usize) {
        if let Some(mut c) = self.conns.slots[slot].take() {
            // A replica's master: what it sent runs to its end (the next
            // PSYNC continues after it), as a coordinator that cannot be
            // aborted does.
            let master = c.master.take();
            if let Some(m) = &master {
                crate::server::repl::replica::link_lost(&self.core.server, m, c.client.db);
            }
            // Kept running to its end instead (see `Orphan`).
            let orphan = c
                .coord
                .take_if(|ac| master.is_some() || ac.coord.must_finish())
                .map(|ac| (ac, c.client.clone()));
            if let Some(mut ac) = c.coord.take() {
                // A transaction in flight releases its locks; outputs come
                // back to a slot whose generation has moved on.
                let mut plan = Plan::default();
                ac.coord.abort(&mut plan);
                let conn = ConnRef {
                    thread: self.core.id as u16,
                    slot: slot as u32,
                    gen: c.gen,
                };
                send_plan(&mut self.core, conn, plan);
                if let (Some(a), Some(tx)) = (&self.core.aof, ac.coord.tx_id()) {
                    a.tx_abort(tx);
                }
            }
            blocking::set_blocked(self.core.server.ops, &mut c.client, false);
            commands::pubsub::unsubscribe_all(&self.core.server, &mut c.client);
            commands::ops::monitor::stop(&self.core.server, &mut c.client);
            self.core.server.ops.slowlog.forget_client(&c.client);
            self.core.server.tracking.disconnected(&mut c.client);
            if let Some(claim) = c.block.claim() {
                // Whoever claims first decides: a shard that has not served
                // this client yet now never will.
                claim.abandon();
            }
            self.conns.deregister(&self.poll, &mut c.stream);
            self.conns.gens[slot] = self.conns.gens[slot].wrapping_add(1);
            self.conns.free.push(slot);
            self.core
                .server
                .connected_clients
                .fetch_sub(1, Ordering::AcqRel);
            log::verbose(format_args!(
                "Client closed connection id={} addr={}",
                c.client.id, c.client.addr
            ));
            let syncing = c.client.replica.as_ref().is_some_and(|h| h.sync.is_some());
            if c.direct {
                let conn = ConnRef {
                    thread: self.core.id as u16,
                    slot: slot as u32,
                    gen: c.gen,
                };
                self.conns.zombies.push((conn, c.stream));
            } else if syncing {
                // PSYNC / SYNC: the socket becomes a replica's link.
                crate::server::repl::adopt(&self.core.server, c.stream, &mut c.client);
            }
            if let Some((ac, client)) = orphan {
                let conn = ConnRef {
                    thread: self.core.id as u16,
                    slot: slot as u32,
                    gen: c.gen,
                };
                self.conns.orphans.push(Orphan { conn, ac, client });
            }
        }
    }

    /// Before sleeping: prunes the list of connections with a direct hop
    /// in flight, and tells whether one of them needs its batch back as
    /// soon as it comes (replies queued behind it, or a close waiting for
    /// it): then lazily sent batches must wake this thread.
    pub(super) fn direct_eager(&mut self) -> bool {
        let Worker { core, conns, .. } = self;
        if core.direct_conns.is_empty() {
            return false;
        }
        let mut eager = false;
        core.direct_conns.retain(|&(slot, gen)| {
            let c = conns.slots.get_mut(slot).and_then(|c| c.as_mut());
            let Some(c) = c.filter(|c| c.gen == gen) else {
                return false;
            };
            if !c.direct {
                c.direct_listed = false;
                return false;
            }
            eager |=
                c.pending.len() > 1 || c.closing || c.peer_eof || c.hup || c.unread || has_work(c);
            true
        });
        eager
    }
}
