//! Where a worker's connections are registered: its own epoll set, or,
//! while a hub runs it with others, the hub's set.
//!
//! A hub sleeps on one epoll set for all the loops it holds (see
//! `server::host`). If that set held only the loops' own sets (nested
//! epoll), every loop with a socket event would need its own
//! `epoll_wait` to learn which sockets: one call per loop with work per
//! round, which grows with the loops a hub holds (see `host::round` for
//! the figures). So while a worker is
//! held, its connections are registered in the hub's set directly, tagged
//! with the worker's id and the connection's slot ([`tag`]): one wait per
//! round tells every loop's socket events, and the hub hands each loop
//! its own ([`Worker::step_shared`]). The worker's own set keeps its
//! doorbell and listeners (rare events): the hub's set holds it too, and
//! a loop polls it only in a round where it is ready.
//!
//! Invariants:
//! * a connection is registered in exactly one set: the hub's while
//!   `Conns::hub` is set, the worker's own otherwise (every admission,
//!   a busy script's desk's included, goes through [`Conns::register`]);
//!   one that could not move stays in the own set and is still served,
//!   through it;
//! * the hub's set stays open while a worker holds a handle to it (an
//!   `Arc`), so leaving never touches a descriptor number reused since;
//! * moving is edge-safe: `EPOLL_CTL_ADD` checks the socket's readiness
//!   and queues an event if it is ready, so an edge that came while the
//!   socket was on its way (or that the hub took and dropped for a worker
//!   it no longer holds) is not lost.
//!
//! What a busy script's desk cannot do while the worker is held: poll its
//! connections' events (they go to the hub's set, which also holds other
//! loops' sockets). It reads every connection on each pass instead
//! (`busy`): a lone script past `busy-reply-threshold` on a hub, so
//! rarely, O(connections) reads that find nothing each millisecond.
//!
//! Cost: joining and leaving are one `epoll_ctl` pair per connection
//! (a hub adopts or gives back a worker at most every few hundred
//! milliseconds); a round costs nothing per loop here.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use mio::{Interest, Poll, Token};

use super::{Conns, Worker};
use crate::log;

/// The epoll flags mio registers a connection with (readable and
/// writable, edge-triggered, peer hang-up reported).
const CONN_EVENTS: u32 = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;

/// The tag of connection `slot` of worker `id` in a hub's set. A loop's
/// own set is tagged with its id alone (below 2^32), so the two never
/// collide.
pub fn tag(id: usize, slot: usize) -> u64 {
    ((id as u64 + 1) << 32) | slot as u64
}

/// What [`tag`] made: `(worker id, slot)`; `None` for a loop's own set
/// (its id).
pub fn untag(t: u64) -> Option<(usize, usize)> {
    let hi = t >> 32;
    (hi != 0).then(|| ((hi - 1) as usize, (t & 0xffff_ffff) as usize))
}

/// A socket event as the loop reads it, from mio or from a hub's set.
#[derive(Clone, Copy)]
pub(super) struct ConnEvent {
    pub slot: usize,
    pub readable: bool,
    pub writable: bool,
    /// The peer hung up, or the socket failed.
    pub hup: bool,
    /// Nothing can reach the peer any more: the socket failed (a reset)
    /// or is shut both ways (`EPOLLERR`, `EPOLLHUP`), unlike a peer that
    /// only shut its sending side (`EPOLLRDHUP`: replies are still owed).
    pub gone: bool,
}

impl ConnEvent {
    /// Decodes a raw event as mio does on Linux.
    pub fn of_raw(slot: usize, ev: u32) -> Self {
        let has = |f: i32| ev & f as u32 != 0;
        ConnEvent {
            slot,
            readable: has(libc::EPOLLIN) || has(libc::EPOLLPRI),
            writable: has(libc::EPOLLOUT),
            hup: has(libc::EPOLLHUP)
                || (has(libc::EPOLLIN) && has(libc::EPOLLRDHUP))
                || has(libc::EPOLLERR),
            gone: has(libc::EPOLLHUP) || has(libc::EPOLLERR),
        }
    }

    pub fn of_mio(ev: &mio::event::Event) -> Self {
        ConnEvent {
            slot: ev.token().0,
            readable: ev.is_readable(),
            writable: ev.is_writable(),
            hup: ev.is_read_closed() || ev.is_error(),
            gone: ev.is_write_closed() || ev.is_error(),
        }
    }
}

/// The hub's set a held worker's connections are registered in.
pub(super) struct HubSet {
    fd: Arc<OwnedFd>,
    id: usize,
}

fn ctl(set: &OwnedFd, op: i32, fd: i32, tag: u64) -> io::Result<()> {
    let mut ev = libc::epoll_event {
        events: CONN_EVENTS,
        u64: tag,
    };
    // SAFETY: `set` is an open epoll set and `ev` is ours; a DEL ignores
    // the event.
    if unsafe { libc::epoll_ctl(set.as_raw_fd(), op, fd, &mut ev) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Conns {
    /// Registers the new connection in `slot` (its stream given) where
    /// this worker's connections are: the hub's set, or `poll`.
    pub(super) fn register(
        &self,
        poll: &Poll,
        stream: &mut super::super::conn::Stream,
        slot: usize,
    ) -> io::Result<()> {
        match &self.hub {
            Some(h) => ctl(&h.fd, libc::EPOLL_CTL_ADD, stream.raw_fd(), tag(h.id, slot)),
            None => poll.registry().register(
                stream.source(),
                Token(slot),
                Interest::READABLE | Interest::WRITABLE,
            ),
        }
    }

    /// Takes a closing connection's stream out of the set it is in.
    pub(super) fn deregister(&self, poll: &Poll, stream: &mut super::super::conn::Stream) {
        if let Some(h) = &self.hub {
            if ctl(&h.fd, libc::EPOLL_CTL_DEL, stream.raw_fd(), 0).is_ok() {
                return;
            }
        }
        let _ = poll.registry().deregister(stream.source());
    }

    /// Whether the connections' events go to a hub's set.
    pub(super) fn in_hub_set(&self) -> bool {
        self.hub.is_some()
    }
}

impl Worker {
    /// A hub runs this worker from now on, waiting on `set`: its
    /// connections move there. One that cannot move stays in the own set
    /// (served through it, as the doorbell is).
    pub fn join_set(&mut self, set: Arc<OwnedFd>) {
        if self.conns.hub.is_some() {
            self.leave_set();
        }
        let id = self.core.id;
        for (slot, c) in self.conns.slots.iter_mut().enumerate() {
            let Some(c) = c.as_mut() else { continue };
            let fd = c.stream.raw_fd();
            if let Err(e) = ctl(&set, libc::EPOLL_CTL_ADD, fd, tag(id, slot)) {
                log::warning(format_args!("Moving a client to its hub's poll set: {e}"));
                continue;
            }
            let _ = self.poll.registry().deregister(c.stream.source());
        }
        self.conns.hub = Some(HubSet { fd: set, id });
    }

    /// This worker runs alone again: its connections come back to its own
    /// set (from any thread: the hub's set stays open while this worker
    /// holds it).
    pub fn leave_set(&mut self) {
        let Some(h) = self.conns.hub.take() else {
            return;
        };
        for (slot, c) in self.conns.slots.iter_mut().enumerate() {
            let Some(c) = c.as_mut() else { continue };
            if ctl(&h.fd, libc::EPOLL_CTL_DEL, c.stream.raw_fd(), 0).is_err() {
                // Never moved (or registered in the own set meanwhile).
                continue;
            }
            if let Err(e) = self.poll.registry().register(
                c.stream.source(),
                Token(slot),
                Interest::READABLE | Interest::WRITABLE,
            ) {
                log::warning(format_args!("Moving a client back to its poll set: {e}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_of_connections_and_of_loops_never_collide() {
        assert_eq!(untag(5), None, "a loop's own set");
        assert_eq!(untag(tag(0, 0)), Some((0, 0)));
        assert_eq!(untag(tag(31, 70_000)), Some((31, 70_000)));
        assert!(tag(0, 0) > u32::MAX as u64);
    }

    #[test]
    fn raw_events_read_as_mio_reads_them() {
        let ev = |f: i32| ConnEvent::of_raw(3, f as u32);
        let r = ev(libc::EPOLLIN);
        assert!(r.readable && !r.writable && !r.hup);
        let w = ev(libc::EPOLLOUT);
        assert!(!w.readable && w.writable && !w.hup);
        assert!(ev(libc::EPOLLIN | libc::EPOLLRDHUP).hup);
        assert!(!ev(libc::EPOLLRDHUP).hup, "mio: read-closed needs EPOLLIN");
        assert!(ev(libc::EPOLLHUP).hup);
        assert!(ev(libc::EPOLLERR).hup);
        assert!(ev(libc::EPOLLHUP).gone && ev(libc::EPOLLERR | libc::EPOLLIN).gone);
        assert!(
            !ev(libc::EPOLLIN | libc::EPOLLRDHUP).gone,
            "a peer that only shut its side still reads its replies"
        );
    }
}
