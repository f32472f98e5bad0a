//! One client connection on its home thread: socket, read buffer, reply
//! buffer, and the in-order reply queue for commands that run elsewhere.
//!
//! Reply order: a command that runs inline writes straight into `out` when
//! nothing is outstanding. A command that hops to another shard, or runs as
//! a coordinator, takes a numbered slot in `pending`; every reply produced
//! while a slot is outstanding goes into a slot of its own, and slots move
//! into `out` strictly from the front as they complete. Pipelined clients
//! therefore see replies in request order whatever shard served them.
//!
//! Durability holds (`appendfsync always`): a reply whose command wrote
//! records to the append-only file is complete but *held* until the file is
//! durable up to those records: its slot carries the AOF target
//! ([`Slot::hold`]), and slots leave the front only once
//! [`Conn::release`] is told the target is durable. Replies behind a held
//! one wait with it (order is kept); a connection with nothing held is not
//! delayed at all.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::ops::Range;
use std::time::Instant;

use commands::coord::{Coordinator, JobOut};
use commands::{ClientState, Resolved};
use resp::Reply;

/// A reply not yet complete, or complete but queued behind one.
pub struct Slot {
    pub seq: u64,
    /// Where the reply sits in `Conn::staging`, once complete.
    pub ready: Option<(usize, usize)>,
    /// CLIENT REPLY OFF/SKIP: drop the bytes when they arrive.
    pub suppress: bool,
    /// The AOF target (see `aof`) that must be durable before this reply
    /// leaves; 0: none; [`HOLD_LOCAL`]: this thread's next append.
    pub hold: u64,
}

/// A hold on records still in this thread's shard buffer: resolved to a
/// real target by [`Conn::resolve_local`] once they are appended.
pub const HOLD_LOCAL: u64 = u64::MAX;

/// A coordinator in flight for this connection.
pub struct ActiveCoord {
    pub resolved: Resolved,
    pub coord: Box<dyn Coordinator>,
    pub results: Vec<Option<JobOut>>,
    pub remaining: usize,
    pub seq: u64,
    pub started: Instant,
    pub suppress: bool,
    pub out: Reply,
    /// Durability target of the AOF records its jobs made outside a
    /// transaction (see `aof`).
    pub aof_hold: u64,
}

pub enum Stream {
    Tcp(mio::net::TcpStream),
    Unix(mio::net::UnixStream),
}

impl Stream {
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
    pub fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Stream::Tcp(s) => s,
            Stream::Unix(s) => s,
        }
    }
}

pub struct Conn {
    pub stream: Stream,
    pub gen: u32,
    pub client: ClientState,
    /// Read buffer, fully initialised; request bytes are `rpos..rend`.
    pub rbuf: Vec<u8>,
    pub rpos: usize,
    rend: usize,
    /// The next request needs at least this many unconsumed bytes.
    pub need: usize,
    pub args: Vec<Range<usize>>,
    pub out: Reply,
    /// Bytes of `out` already written to the socket.
    pub written: usize,
    pub pending: VecDeque<Slot>,
    /// Bytes of replies completed out of order, waiting for earlier ones.
    staging: Vec<u8>,
    pub next_seq: u64,
    pub coord: Option<ActiveCoord>,
    /// The next request waits for a transaction's lock on this thread's
    /// shard (it stays unparsed in the read buffer until a release).
    pub lock_wait: bool,
    /// Blocked in BLPOP & co. (see `blocking`).
    pub block: super::blocking::BlockPhase,
    /// The deadline a command woken to run again keeps if it blocks again.
    pub keep_deadline_ms: Option<u64>,
    /// Stop reading and executing; close once `out` is written.
    pub closing: bool,
    /// The peer shut its side (read returned 0): execute what was read,
    /// write the replies, then close.
    pub peer_eof: bool,
    /// A hang-up event was seen: always read to EOF from now on.
    pub hup: bool,
    /// The socket may still hold unread bytes (a read was cut short).
    pub unread: bool,
    /// Queued on the thread's flush list.
    pub dirty: bool,
    /// On the thread's list of connections with [`HOLD_LOCAL`] slots.
    pub local_listed: bool,
    /// On the thread's list of connections with held replies.
    pub held_listed: bool,
}

/// Initial read buffer size; it grows for large requests and shrinks back
/// when idle.
pub const READ_CHUNK: usize = 16 * 1024;

impl Conn {
    pub fn new(stream: Stream, gen: u32, client: ClientState) -> Self {
        Conn {
            stream,
            gen,
            client,
            rbuf: Vec::new(),
            rpos: 0,
            rend: 0,
            need: 0,
            args: Vec::new(),
            out: Reply::new(false),
            written: 0,
            pending: VecDeque::new(),
            staging: Vec::new(),
            next_seq: 0,
            coord: None,
            lock_wait: false,
            block: Default::default(),
            keep_deadline_ms: None,
            closing: false,
            peer_eof: false,
            hup: false,
            unread: false,
            dirty: false,
            local_listed: false,
            held_listed: false,
        }
    }

    /// Unconsumed request bytes (Redis's query buffer length).
    pub fn qbuf_len(&self) -> usize {
        self.rend - self.rpos
    }
    #[inline]
    pub fn rbuf_end(&self) -> usize {
        self.rend
    }
    #[inline]
    pub fn set_rbuf_end(&mut self, end: usize) {
        self.rend = end;
    }

    /// Takes a reply slot for a command that completes later.
    pub fn open_slot(&mut self, suppress: bool) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.pending.push_back(Slot {
            seq,
            ready: None,
            suppress,
            hold: 0,
        });
        seq
    }

    /// Where an inline reply goes: `out` directly when nothing is pending.
    pub fn inline_reply_target(&self) -> bool {
        self.pending.is_empty()
    }

    /// Queues a finished inline reply behind outstanding slots.
    pub fn push_ready(&mut self, bytes: &[u8]) {
        let seq = self.open_slot(false);
        self.complete(seq, bytes);
    }

    /// Fills slot `seq` and moves every completed front slot into `out`.
    pub fn complete(&mut self, seq: u64, reply: &[u8]) {
        self.complete_held(seq, reply, 0);
    }

    /// Fills slot `seq` with a reply that must wait until the AOF is
    /// durable up to `hold` (0: no wait), and moves every completed front
    /// slot not held into `out`.
    pub fn complete_held(&mut self, seq: u64, reply: &[u8], hold: u64) {
        let Some(front) = self.pending.front() else {
            return;
        };
        let idx = seq.wrapping_sub(front.seq) as usize;
        if idx == 0 && hold == 0 {
            // The common case: the oldest reply, straight to `out`.
            if let Some(slot) = self.pending.pop_front() {
                if !slot.suppress {
                    self.out.raw(reply);
                }
            }
        } else if let Some(slot) = self.pending.get_mut(idx) {
            let start = self.staging.len();
            if !slot.suppress {
                self.staging.extend_from_slice(reply);
            }
            slot.ready = Some((start, self.staging.len()));
            slot.hold = hold;
            if idx != 0 {
                return;
            }
        }
        if !self.release(0) {
            self.compact_staging();
        }
    }

    /// Queues an inline reply that waits for the AOF target `hold`.
    pub fn push_held(&mut self, bytes: &[u8], hold: u64) {
        let seq = self.open_slot(false);
        self.complete_held(seq, bytes, hold);
    }

    /// Moves the reply bytes written to `out` from `mark` on into a slot
    /// held until the AOF target `hold` is durable.
    pub fn hold_tail(&mut self, mark: usize, hold: u64) {
        let seq = self.open_slot(false);
        let start = self.staging.len();
        self.staging.extend_from_slice(&self.out.as_bytes()[mark..]);
        self.out.truncate(mark);
        if let Some(slot) = self.pending.back_mut() {
            debug_assert_eq!(slot.seq, seq);
            slot.ready = Some((start, self.staging.len()));
            slot.hold = hold;
        }
    }

    /// Gives every [`HOLD_LOCAL`] slot the target of the append that took
    /// this thread's records.
    pub fn resolve_local(&mut self, target: u64) {
        for s in self.pending.iter_mut() {
            if s.hold == HOLD_LOCAL {
                s.hold = target;
            }
        }
    }

    /// Moves every completed front slot whose hold is at most `durable`
    /// into `out`; true if any moved.
    pub fn release(&mut self, durable: u64) -> bool {
        let mut moved = false;
        while let Some(&Slot {
            ready: Some((a, b)),
            hold,
            ..
        }) = self.pending.front()
        {
            if hold > durable {
                break;
            }
            self.out.raw(&self.staging[a..b]);
            self.pending.pop_front();
            moved = true;
        }
        if moved {
            self.compact_staging();
        }
        moved
    }

    /// The AOF target the front reply waits for (0: none held).
    pub fn front_hold(&self) -> u64 {
        match self.pending.front() {
            Some(s) if s.ready.is_some() => s.hold,
            _ => 0,
        }
    }

    /// Whether any queued reply waits for the AOF.
    pub fn has_held(&self) -> bool {
        self.pending.iter().any(|s| s.hold != 0)
    }

    /// Whether the oldest outstanding reply is still being computed (on
    /// another shard, or by a coordinator), rather than done and held.
    pub fn front_in_flight(&self) -> bool {
        self.pending.front().is_some_and(|s| s.ready.is_none())
    }

    /// Drops staged bytes no queued reply refers to any more.
    fn compact_staging(&mut self) {
        // Slots complete out of order, so the lowest offset may belong to
        // any of them.
        let first = self
            .pending
            .iter()
            .filter_map(|s| s.ready.map(|r| r.0))
            .min();
        match first {
            None if self.staging.capacity() > 1 << 20 => self.staging = Vec::new(),
            None => self.staging.clear(),
            Some(base) if base > 0 && base >= self.staging.len() / 2 => {
                self.staging.drain(..base);
                for s in self.pending.iter_mut() {
                    if let Some((a, b)) = s.ready.as_mut() {
                        *a -= base;
                        *b -= base;
                    }
                }
            }
            Some(_) => {}
        }
    }

    /// Bytes of replies done but queued behind earlier ones.
    pub fn staged_bytes(&self) -> usize {
        self.staging.len()
    }

    /// Bytes waiting to be written.
    pub fn unwritten(&self) -> usize {
        self.out.len() - self.written
    }

    /// Writes as much of `out` as the socket takes. Returns bytes written;
    /// `Err` only for a broken connection.
    pub fn flush(&mut self) -> io::Result<usize> {
        let mut total = 0;
        while self.written < self.out.len() {
            match self.stream.write(&self.out.as_bytes()[self.written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.written += n;
                    total += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        if self.written == self.out.len() {
            self.written = 0;
            self.out.clear();
            // Do not keep a huge reply buffer around after a big reply.
            if self.out.buf_mut().capacity() > 1 << 20 {
                *self.out.buf_mut() = Vec::new();
            }
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn() -> Conn {
        let (a, _b) = mio::net::UnixStream::pair().expect("socketpair");
        Conn::new(Stream::Unix(a), 0, ClientState::default())
    }

    #[test]
    fn replies_leave_in_request_order_whatever_order_they_complete_in() {
        let mut c = conn();
        let s: Vec<u64> = (0..5).map(|_| c.open_slot(false)).collect();
        c.complete(s[3], b"d");
        c.complete(s[1], b"b");
        c.push_ready(b"f");
        c.complete(s[4], b"e");
        assert!(c.out.is_empty());
        c.complete(s[0], b"a");
        assert_eq!(c.out.as_bytes(), b"ab");
        c.complete(s[2], b"c");
        assert_eq!(c.out.as_bytes(), b"abcdef");
        assert!(c.pending.is_empty());
        assert!(c.staging.is_empty());
    }

    #[test]
    fn staging_is_compacted_under_a_steady_pipeline() {
        let mut c = conn();
        let mut oldest = c.open_slot(false);
        for i in 0..10_000u64 {
            // Always one slot outstanding ahead of completed ones.
            let next = c.open_slot(false);
            c.push_ready(&[b'x'; 100]);
            c.complete(oldest, &i.to_le_bytes());
            oldest = next;
            assert!(
                c.staging.len() <= 1_000,
                "staging grew to {}",
                c.staging.len()
            );
        }
        c.complete(oldest, b"");
        assert!(c.pending.is_empty());
    }

    #[test]
    fn held_replies_wait_for_their_target_and_keep_order() {
        let mut c = conn();
        // A read before anything is held goes at once.
        c.out.raw(b"r0");
        // A write's reply, written inline, then held on local records.
        let mark = c.out.len();
        c.out.raw(b"w1");
        c.hold_tail(mark, HOLD_LOCAL);
        assert_eq!(c.out.as_bytes(), b"r0");
        // A read behind it waits with it; a hop completes behind both.
        c.push_ready(b"r2");
        let hop = c.open_slot(false);
        c.complete_held(hop, b"w3", 9);
        c.push_ready(b"r4");
        assert!(c.has_held());
        assert!(!c.front_in_flight());
        assert!(!c.release(100), "an unresolved local hold never goes");
        c.resolve_local(5);
        assert_eq!(c.front_hold(), 5);
        assert!(!c.release(4));
        assert_eq!(c.out.as_bytes(), b"r0");
        assert!(c.release(5));
        assert_eq!(c.out.as_bytes(), b"r0w1r2");
        assert_eq!(c.front_hold(), 9);
        assert!(c.release(9));
        assert_eq!(c.out.as_bytes(), b"r0w1r2w3r4");
        assert!(c.pending.is_empty() && !c.has_held());
        assert_eq!(c.staged_bytes(), 0);
    }

    #[test]
    fn a_held_reply_behind_one_in_flight_waits_for_both() {
        let mut c = conn();
        let hop = c.open_slot(false);
        c.push_held(b"w", 3);
        assert!(c.front_in_flight());
        assert_eq!(c.front_hold(), 0);
        assert!(!c.release(10));
        c.complete(hop, b"h");
        assert_eq!(c.out.as_bytes(), b"h");
        assert_eq!(c.front_hold(), 3);
        assert!(c.release(3));
        assert_eq!(c.out.as_bytes(), b"hw");
        // A suppressed (empty) held reply still orders what follows.
        c.push_held(b"", 7);
        c.push_ready(b"g");
        assert!(!c.release(6));
        assert!(c.release(7));
        assert_eq!(c.out.as_bytes(), b"hwg");
    }

    #[test]
    fn suppressed_replies_are_dropped_in_place() {
        let mut c = conn();
        let a = c.open_slot(false);
        let b = c.open_slot(true);
        let d = c.open_slot(false);
        c.complete(d, b"3");
        c.complete(b, b"2");
        c.complete(a, b"1");
        assert_eq!(c.out.as_bytes(), b"13");
    }
}
