//! One client connection on its home thread: socket, read buffer, reply
//! buffer, and the in-order reply queue for commands that run elsewhere.
//!
//! Reply order: a command that runs inline writes straight into `out` when
//! nothing is outstanding. A command that hops to another shard, or runs as
//! a coordinator, takes a numbered slot in `pending`; every reply produced
//! while a slot is outstanding goes into a slot of its own, and slots move
//! into `out` strictly from the front as they complete. Pipelined clients
//! therefore see replies in request order whatever shard served them.

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
}

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
        let Some(front) = self.pending.front() else {
            return;
        };
        let idx = seq.wrapping_sub(front.seq) as usize;
        if idx == 0 {
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
            return;
        }
        while let Some(&Slot {
            ready: Some((a, b)),
            ..
        }) = self.pending.front()
        {
            self.out.raw(&self.staging[a..b]);
            self.pending.pop_front();
        }
        self.compact_staging();
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
