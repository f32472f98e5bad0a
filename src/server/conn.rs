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

/// Replies to a command not yet complete, or complete but queued behind one.
pub struct Slot {
    pub seq: u64,
    pub reply: Option<Vec<u8>>,
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
    pub next_seq: u64,
    pub coord: Option<ActiveCoord>,
    /// Stop reading and executing; close once `out` is written.
    pub closing: bool,
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
            next_seq: 0,
            coord: None,
            closing: false,
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
            reply: None,
            suppress,
        });
        seq
    }

    /// Where an inline reply goes: `out` directly when nothing is pending.
    pub fn inline_reply_target(&self) -> bool {
        self.pending.is_empty()
    }

    /// Queues a finished inline reply behind outstanding slots.
    pub fn push_ready(&mut self, bytes: Vec<u8>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.pending.push_back(Slot {
            seq,
            reply: Some(bytes),
            suppress: false,
        });
    }

    /// Fills slot `seq` and moves every completed front slot into `out`.
    pub fn complete(&mut self, seq: u64, reply: Vec<u8>) {
        if let Some(front) = self.pending.front() {
            let idx = seq.wrapping_sub(front.seq) as usize;
            if let Some(slot) = self.pending.get_mut(idx) {
                slot.reply = Some(reply);
            }
        }
        while let Some(front) = self.pending.front() {
            if front.reply.is_none() {
                break;
            }
            if let Some(slot) = self.pending.pop_front() {
                if !slot.suppress {
                    if let Some(r) = slot.reply {
                        self.out.raw(&r);
                    }
                }
            }
        }
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
