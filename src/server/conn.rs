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

use commands::coord::{ClientIo, Coordinator, JobOut};
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
    /// The arguments, kept while the slowlog is on (the coordinator may
    /// turn out slow; see `commands::ops::slowlog`).
    pub slow_args: Option<resp::OwnedArgs>,
}

/// A connection's byte stream. Plain TCP and unix sockets go straight to
/// the kernel; TLS goes through rustls (see `tls`). One match per read or
/// write; the TLS state is boxed so the plain variants stay small.
pub enum Stream {
    Tcp(mio::net::TcpStream),
    Unix(mio::net::UnixStream),
    Tls(Box<super::tls::TlsStream>),
}

impl Stream {
    /// Plaintext in. A short count means the socket is drained (the
    /// worker's edge-triggered reads rely on it); `Ok(0)`: the peer closed.
    #[inline]
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
    /// Plaintext out. After `WouldBlock` a TLS stream expects the same
    /// bytes again (see `tls`); `Conn::flush` retries from `written`.
    #[inline]
    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    pub fn raw_fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tls(s) => s.tcp.as_raw_fd(),
        }
    }
    /// The right for the shard that runs this connection's lone hop to
    /// write its reply to the client itself (see [`DirectReply`]), if this
    /// stream grants it: a TLS stream declines, its records can only come
    /// from its own state.
    #[inline]
    pub fn direct_reply(&self) -> Option<DirectReply> {
        use std::os::fd::AsRawFd;
        match self {
            Stream::Tcp(s) => Some(DirectReply { fd: s.as_raw_fd() }),
            Stream::Unix(s) => Some(DirectReply { fd: s.as_raw_fd() }),
            Stream::Tls(_) => None,
        }
    }
    pub fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Stream::Tcp(s) => s,
            Stream::Unix(s) => s,
            Stream::Tls(s) => &mut s.tcp,
        }
    }
}

/// A direct reply: the right a connection's stream grants the shard that
/// runs its lone hop to write the hop's reply to the client itself,
/// without waking the home thread (see `worker::request::mark_direct`).
/// The shard side never holds the socket: this is the one thing it can do
/// with it: write bytes, never read, close, or change its registration.
///
/// Only a stream whose bytes any thread may write grants it (a plain TCP
/// or unix socket: the kernel keeps one `send` in order with the home
/// thread's writes, and the home thread writes nothing until the batch is
/// back). A TLS stream declines ([`Stream::direct_reply`]).
///
/// Valid while the batch carrying it is away: the home thread keeps the
/// socket open until the batch is back, even past a close
/// (`worker::Conns::zombies`), so the descriptor is never one reused by a
/// newer socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirectReply {
    fd: std::os::fd::RawFd,
}

impl DirectReply {
    /// Writes as much of `buf` as the socket takes without blocking;
    /// returns the bytes written (what is left goes home with the batch,
    /// as do all the bytes after an error, where the home thread finds the
    /// socket broken).
    pub fn write(&self, buf: &[u8]) -> usize {
        let mut done = 0;
        while done < buf.len() {
            let rest = &buf[done..];
            // SAFETY: `fd` is the home connection's socket, kept open until
            // the batch carrying this is back (`worker::Conns::zombies`);
            // `rest` is valid for reads of its length. MSG_NOSIGNAL: a
            // closed peer is an error, not a SIGPIPE.
            let r = unsafe {
                libc::send(
                    self.fd,
                    rest.as_ptr().cast(),
                    rest.len(),
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                )
            };
            if r > 0 {
                done += r as usize;
            } else if r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            } else {
                break;
            }
        }
        done
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
    /// A script went to another shard's thread in a batch: no later
    /// request runs until the batch is back (the script may come back to
    /// run again here over more keys: `commands::script::wide`).
    pub script_wait: bool,
    pub lock_wait: bool,
    /// Other shards were asked to evict for this connection's next
    /// request (`worker::memory::evict_elsewhere`): it runs next time
    /// whatever they freed.
    pub evict_asked: bool,
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
    /// Nothing can reach the peer any more (a reset, or shut both ways:
    /// `hub_set::ConnEvent::gone`): closed as soon as it is seen, even in
    /// the middle of a command.
    pub gone: bool,
    /// The socket may still hold unread bytes (a read was cut short).
    pub unread: bool,
    /// Its read waits for the loop's next turn: this turn's budget ran out
    /// (see `worker::budget`); listed there, kept off the resume list
    /// until then.
    pub deferred: bool,
    /// Queued on the thread's flush list.
    pub dirty: bool,
    /// Unix second since which the output has stayed at or above the soft
    /// limit (Redis's `obuf_soft_limit_reached_time`).
    obuf_soft_since_s: Option<u64>,
    /// Past its output buffer limit: closed at the next flush point without
    /// writing anything more (Redis's `CLIENT_CLOSE_ASAP`).
    pub obuf_over: bool,
    /// On the thread's list of connections with [`HOLD_LOCAL`] slots.
    pub local_listed: bool,
    /// On the thread's list of connections with held replies.
    pub held_listed: bool,
    /// Its only outstanding request runs on another shard, which writes
    /// the reply to the socket itself (see `worker::request::mark_direct`): nothing
    /// else may be written, and the socket must stay open, until the batch
    /// is back.
    pub direct: bool,
    /// On the thread's list of connections with a direct hop in flight.
    pub direct_listed: bool,
    /// The worker's activity window in which this connection last read
    /// (see `worker::nap::Nap`).
    pub read_window: u32,
    /// Most unconsumed request bytes held since the cron last looked
    /// (Redis's `querybuf_peak`, see `worker::memory`).
    pub qbuf_peak: usize,
    /// Most reply bytes `out` held at once since `out_peak_since_ms`
    /// (Redis's `buf_peak`, CLIENT LIST `rbp`).
    pub out_peak: usize,
    pub out_peak_since_ms: u64,
    /// The link from this replica's master (see `repl::replica`).
    pub master: Option<Box<crate::server::repl::replica::MasterLink>>,
}

/// Redis's `client_recent_max_input_buffer` / `_output_buffer`: the
/// largest input and output buffer of any client of this thread, one slot
/// per second over the last [`PEAK_SLOTS`] seconds (Redis's
/// `CLIENTS_PEAK_MEM_USAGE_SLOTS`), sampled by the cron.
#[derive(Default)]
pub struct RecentPeaks {
    slots: [(usize, usize); PEAK_SLOTS],
    sec: u64,
}

pub const PEAK_SLOTS: usize = 8;

impl RecentPeaks {
    /// Records one client's figures at unix second `now_s`.
    pub fn sample(&mut self, now_s: u64, input: usize, output: usize) {
        if now_s != self.sec {
            // Forget the seconds that passed since the last sample.
            let gap = now_s.saturating_sub(self.sec).min(PEAK_SLOTS as u64);
            for k in 1..=gap {
                self.slots[((self.sec + k) % PEAK_SLOTS as u64) as usize] = (0, 0);
            }
            self.sec = now_s;
        }
        let s = &mut self.slots[(now_s % PEAK_SLOTS as u64) as usize];
        s.0 = s.0.max(input);
        s.1 = s.1.max(output);
    }

    /// The largest (input, output) over the window.
    pub fn max(&self) -> (usize, usize) {
        self.slots
            .iter()
            .fold((0, 0), |(a, b), &(i, o)| (a.max(i), b.max(o)))
    }
}

/// Redis's `PROTO_REPLY_CHUNK_BYTES`: the size of a client's fixed reply
/// buffer, whose bytes the output buffer limits do not count.
pub const REPLY_CHUNK: usize = 16 * 1024;

/// Bytes of one block of Redis's reply list (`clientReplyBlock.size`):
/// a block is allocated for at least [`REPLY_CHUNK`] bytes plus its
/// 16-byte header, which jemalloc rounds up to its 20 KiB size class, and
/// the block takes the rounding over (`_addReplyProtoToList`). Replies
/// smaller than that fill blocks to this size.
const REPLY_BLOCK_BYTES: usize = 20 * 1024 - 16;

/// What Redis's `getClientOutputBufferMemoryUsage` adds per block: its
/// list node (24 bytes) and block header (16).
const REPLY_BLOCK_OVERHEAD: usize = 40;

/// Output a client that has not authenticated may hold (Redis's 1024 in
/// `checkClientOutputBufferLimits`).
const UNAUTH_OBUF_MAX: usize = 1024;

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
            evict_asked: false,
            script_wait: false,
            block: Default::default(),
            keep_deadline_ms: None,
            closing: false,
            peer_eof: false,
            hup: false,
            gone: false,
            unread: false,
            deferred: false,
            dirty: false,
            obuf_soft_since_s: None,
            obuf_over: false,
            local_listed: false,
            held_listed: false,
            direct: false,
            direct_listed: false,
            read_window: u32::MAX,
            qbuf_peak: 0,
            out_peak: 0,
            out_peak_since_ms: 0,
            master: None,
        }
    }

    /// Puts `bytes` (read elsewhere: a replica's link read past the sync
    /// payload) at the end of the read buffer, to be executed as read.
    pub fn preload(&mut self, bytes: &[u8]) {
        let end = self.rbuf_end();
        if self.rbuf.len() < end + bytes.len() {
            self.rbuf.resize(end + bytes.len(), 0);
        }
        self.rbuf[end..end + bytes.len()].copy_from_slice(bytes);
        self.set_rbuf_end(end + bytes.len());
    }

    /// Unconsumed request bytes (Redis's query buffer length).
    pub fn qbuf_len(&self) -> usize {
        self.rend - self.rpos
    }
    #[inline]
    pub fn rbuf_end(&self) -> usize {
        self.rend
    }
    /// Sets the end of the request bytes, noting the query buffer peak
    /// (one compare per read).
    #[inline]
    pub fn set_rbuf_end(&mut self, end: usize) {
        self.rend = end;
        self.qbuf_peak = self.qbuf_peak.max(end.saturating_sub(self.rpos));
    }

    /// Before a read: keeps at least half of [`READ_CHUNK`] of initialised
    /// room after the request bytes (the consumed front is reused first,
    /// then the buffer doubles).
    pub fn make_read_room(&mut self) {
        if self.rpos == self.rend {
            self.rpos = 0;
            self.set_rbuf_end(0);
        }
        if self.rbuf.len() - self.rend < READ_CHUNK / 2 {
            if self.rpos > 0 {
                let (s, e) = (self.rpos, self.rend);
                self.rbuf.copy_within(s..e, 0);
                self.set_rbuf_end(e - s);
                self.rpos = 0;
            }
            if self.rbuf.len() - self.rend < READ_CHUNK / 2 {
                let want = (self.rbuf.len() * 2).max(READ_CHUNK);
                self.rbuf.resize(want, 0);
            }
        }
    }

    /// Moves the unconsumed request bytes to the front of the read buffer
    /// and makes the buffer `size` bytes (at least those bytes; 0 frees
    /// it). Only between requests: nothing keeps offsets into it then.
    pub fn resize_rbuf(&mut self, size: usize) {
        let (s, e) = (self.rpos, self.rend);
        let size = size.max(e - s);
        if s > 0 {
            self.rbuf.copy_within(s..e, 0);
        }
        self.rpos = 0;
        self.rend = e - s;
        if size == 0 {
            self.rbuf = Vec::new();
        } else {
            self.rbuf.truncate(size);
            self.rbuf.shrink_to(size);
        }
    }

    /// Gives the reply buffer `size` bytes of capacity, or what its unsent
    /// bytes need if more.
    pub fn resize_out(&mut self, size: usize) {
        let buf = self.out.buf_mut();
        if size == 0 && buf.is_empty() {
            *buf = Vec::new();
        } else {
            buf.shrink_to(size);
        }
    }

    /// Frees the queue of out-of-order replies and its byte buffer when
    /// nothing is queued.
    pub fn free_idle_queues(&mut self) {
        if self.pending.is_empty() {
            if self.staging.capacity() > 0 {
                self.staging = Vec::new();
            }
            if self.pending.capacity() > 0 {
                self.pending = VecDeque::new();
            }
        }
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

    /// Appends bytes nobody asked for (a pub/sub message) after every
    /// reply the connection owes so far.
    pub fn push_unsolicited(&mut self, bytes: &[u8]) {
        if self.pending.is_empty() {
            self.out.raw(bytes);
        } else {
            self.push_held(bytes, 0);
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

    /// Output held for the client and not yet written: unwritten bytes of
    /// `out`, replies done but queued behind earlier ones, and the reply of
    /// a running coordinator.
    pub fn obuf_bytes(&self) -> usize {
        self.unwritten() + self.staging.len() + self.coord.as_ref().map_or(0, |a| a.out.len())
    }

    /// The blocks Redis's reply list would hold for [`Self::obuf_bytes`]:
    /// all but the first [`REPLY_CHUNK`] unwritten bytes, which Redis
    /// keeps in a fixed per-client buffer, in blocks of
    /// [`REPLY_BLOCK_BYTES`] (CLIENT LIST `oll`).
    fn obuf_blocks(&self) -> usize {
        let listed = self.obuf_bytes() - self.unwritten().min(REPLY_CHUNK);
        listed.div_ceil(REPLY_BLOCK_BYTES)
    }

    /// What the output buffer limits compare (CLIENT LIST `omem`, INFO
    /// `client_recent_max_output_buffer`), as Redis's
    /// `getClientOutputBufferMemoryUsage` counts it: the reply list's
    /// blocks whole, with their overhead ([`Self::obuf_blocks`]). So, as
    /// in Redis, small replies never trip even a 1-byte limit, and a limit
    /// trips at the same output as Redis's within one block (Redis sizes a
    /// block for a reply of more than 16 KiB to that reply, rounded up to
    /// jemalloc's size class: up to a block less than here). Measured
    /// against redis-server 7.0.15 (2026-11-28): LRANGE of 97 1000-byte
    /// items passes a 100000-byte hard limit and 98 close the client in
    /// both; a subscriber 253 blocks behind shows omem=5187512 in Redis,
    /// 5152297 (the exact bytes) before this count.
    pub fn obuf_counted(&self) -> usize {
        self.obuf_blocks() * (REPLY_BLOCK_BYTES + REPLY_BLOCK_OVERHEAD)
    }

    /// Redis's `checkClientOutputBufferLimits`: whether output has reached
    /// the hard limit, or has stayed at or above the soft limit for more
    /// than `soft_seconds` (a limit of 0 is off). Remembers when the soft
    /// limit was first reached and forgets it once output is below it.
    pub fn obuf_limit_reached(&mut self, l: &config::ObufLimit, now_s: u64) -> bool {
        let used = self.obuf_counted() as u64;
        let hard = l.hard != 0 && used >= l.hard;
        let mut soft = l.soft != 0 && used >= l.soft;
        if soft {
            match self.obuf_soft_since_s {
                None => {
                    self.obuf_soft_since_s = Some(now_s);
                    soft = false;
                }
                Some(t) => soft = now_s.saturating_sub(t) > l.soft_seconds.max(0) as u64,
            }
        } else {
            self.obuf_soft_since_s = None;
        }
        hard || soft
    }

    /// Redis's `closeClientOnOutputBufferLimitReached(c, async=1)`: checks
    /// the limits of the client's class (`pubsub` while subscribed, else
    /// `normal`; `limits` is indexed by `config::ObufClass`); once passed,
    /// the client stops executing and is closed at the next flush point
    /// without another byte written. True when it is (or already was) marked.
    /// Cheap when the class has no limits and the client is authenticated:
    /// a few loads and compares.
    pub fn check_obuf(&mut self, limits: &[config::ObufLimit; 3], now_ms: u64) -> bool {
        if self.obuf_over {
            return true;
        }
        // Redis's checkClientOutputBufferLimits: a client that must still
        // authenticate may hold 1 KiB of output, whatever its class's limits
        // (so it cannot grow the server's memory by not reading replies).
        if !self.client.authenticated && self.obuf_counted() > UNAUTH_OBUF_MAX {
            return self.close_over_limit(now_ms);
        }
        let st = &self.client;
        let class = if st.sub_count + st.psub_count + st.ssub_count > 0 {
            config::ObufClass::Pubsub
        } else {
            config::ObufClass::Normal
        };
        let l = &limits[class as usize];
        if l.hard == 0 && l.soft == 0 {
            self.obuf_soft_since_s = None;
            return false;
        }
        if !self.obuf_limit_reached(l, now_ms / 1000) {
            return false;
        }
        self.close_over_limit(now_ms)
    }

    /// Marks the client to be closed for its output (see [`Self::check_obuf`]).
    fn close_over_limit(&mut self, now_ms: u64) -> bool {
        self.obuf_over = true;
        self.closing = true;
        crate::log::warning(format_args!(
            "Client {} scheduled to be closed ASAP for overcoming of output buffer limits.",
            self.describe(now_ms)
        ));
        true
    }

    /// Heap bytes this connection holds, all buffers at their capacity
    /// (Redis's `getClientMemoryUsage`, CLIENT LIST `tot-mem`).
    pub fn mem_total(&self) -> usize {
        let st = &self.client;
        std::mem::size_of::<Self>()
            + self.rbuf.capacity()
            + self.args.capacity() * std::mem::size_of::<Range<usize>>()
            + self.out.capacity()
            + self.staging.capacity()
            + self.pending.capacity() * std::mem::size_of::<Slot>()
            + self
                .coord
                .as_ref()
                .map_or(0, |a| std::mem::size_of::<ActiveCoord>() + a.out.capacity())
            + st.addr.capacity()
            + st.laddr.capacity()
            + st.last_cmd.capacity()
            + st.name.as_ref().map_or(0, |n| n.len())
    }

    /// Input side of [`Self::mem_total`]: the read buffer and the parsed
    /// argument ranges (Redis's `client_recent_max_input_buffer` figure).
    pub fn mem_input(&self) -> usize {
        self.rbuf.capacity() + self.args.capacity() * std::mem::size_of::<Range<usize>>()
    }

    /// CLIENT LIST's I/O fields, in Redis's terms. `qbuf`: unconsumed
    /// request bytes; `qbuf-free`: the rest of the read buffer; `rbs` and
    /// `rbp`: the reply buffer's capacity and recent peak (see
    /// `worker::memory`); `obl`: unwritten bytes
    /// of the reply buffer up to [`REPLY_CHUNK`] (Redis's fixed buffer);
    /// `oll`: the blocks of Redis's reply list the rest would fill
    /// ([`Self::obuf_blocks`]); `omem`: [`Self::obuf_counted`], what the
    /// output limits compare.
    pub fn io(&self) -> ClientIo {
        // While a command runs (a coordinator in flight: CLIENT LIST and
        // CLIENT INFO are ones), Redis's query buffer still holds what was
        // read and consumed since its last trim, the command's own bytes
        // included: it trims after the read's commands ran. Here that is
        // the buffer up to its end. Between commands, consumed bytes are
        // room too (the next read moves the rest to the front), as Redis's
        // `sdsavail` after `sdsrange`.
        let qbuf = if self.coord.is_some() {
            self.rend
        } else {
            self.qbuf_len()
        };
        ClientIo {
            qbuf,
            qbuf_free: self.rbuf.len() - qbuf,
            rbs: self.out.capacity(),
            rbp: self.out_peak,
            obl: self.unwritten().min(REPLY_CHUNK),
            oll: self.obuf_blocks(),
            omem: self.obuf_counted(),
            tot_mem: self.mem_total(),
        }
    }

    /// One line for the log about this client (a subset of CLIENT LIST).
    pub fn describe(&self, now_ms: u64) -> String {
        let st = &self.client;
        let io = self.io();
        format!(
            "id={} addr={} laddr={} fd={} name={} age={} idle={} db={} qbuf={} obl={} oll={} \
             omem={} tot-mem={} cmd={}",
            st.id,
            st.addr,
            st.laddr,
            st.fd,
            st.name
                .as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default(),
            now_ms.saturating_sub(st.created_ms) / 1000,
            now_ms.saturating_sub(st.last_interaction_ms) / 1000,
            st.db,
            io.qbuf,
            io.obl,
            io.oll,
            io.omem,
            io.tot_mem,
            st.last_cmd,
        )
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
            // Records a TLS stream still holds with nothing of `out` left
            // (handshake messages a full socket delayed).
            if let Stream::Tls(t) = &mut self.stream {
                t.push()?;
            }
            self.out_peak = self.out_peak.max(self.out.len());
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

    /// A direct reply writes to the client's end of the socket, all of it
    /// while the socket takes it, and reports what the socket did not take.
    #[test]
    fn a_direct_reply_writes_to_the_peer_and_counts_what_went() {
        use std::io::Read as _;
        let (a, b) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        a.set_nonblocking(true).unwrap();
        let s = Stream::Unix(mio::net::UnixStream::from_std(a));
        let d = s
            .direct_reply()
            .expect("a unix stream grants direct replies");
        assert_eq!(d.write(b"+OK\r\n"), 5);
        let mut got = [0u8; 5];
        (&b).read_exact(&mut got).unwrap();
        assert_eq!(&got, b"+OK\r\n");
        // Nobody reads: the socket fills, and the rest is left to the home
        // thread (never a blocking write on the shard's thread).
        let big = vec![b'x'; 64 << 20];
        let n = d.write(&big);
        assert!(n > 0 && n < big.len(), "wrote {n}");
        // A peer gone: nothing is written, no SIGPIPE.
        drop(b);
        assert_eq!(d.write(b"+OK\r\n"), 0);
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

    #[test]
    fn output_limits_follow_redis_rules() {
        let mut c = conn();
        c.client.authenticated = true;
        // Redis's count of one reply list block.
        let block = REPLY_BLOCK_BYTES + REPLY_BLOCK_OVERHEAD;
        let l = config::ObufLimit {
            hard: 2 * block as u64,
            soft: 100,
            soft_seconds: 2,
        };
        assert!(!c.obuf_limit_reached(&l, 50));
        // The fixed buffer's worth is not counted.
        c.out.raw(&[b'x'; REPLY_CHUNK]);
        assert_eq!(c.obuf_counted(), 0);
        assert!(!c.obuf_limit_reached(&l, 50));
        // A byte more is a block of Redis's reply list, counted whole.
        c.out.raw(&[b'x'; 150]);
        assert_eq!(c.obuf_counted(), block);
        // Soft reached: the clock starts, nothing happens yet.
        assert!(!c.obuf_limit_reached(&l, 50));
        assert!(!c.obuf_limit_reached(&l, 52));
        // More than soft_seconds above it.
        assert!(c.obuf_limit_reached(&l, 53));
        // Dropping below the soft limit resets the clock.
        c.written = 150;
        assert_eq!(c.obuf_counted(), 0);
        assert!(!c.obuf_limit_reached(&l, 54));
        c.out.raw(&[b'x'; 100]);
        assert!(!c.obuf_limit_reached(&l, 55));
        assert!(!c.obuf_limit_reached(&l, 57));
        assert!(c.obuf_limit_reached(&l, 58));
        // The hard limit closes at once; replies queued behind count too
        // (here filling a second block).
        let s = c.open_slot(false);
        c.push_ready(&[b'y'; REPLY_BLOCK_BYTES]);
        assert_eq!(c.obuf_bytes(), REPLY_CHUNK + 100 + REPLY_BLOCK_BYTES);
        assert_eq!(c.obuf_counted(), 2 * block);
        assert_eq!(c.io().oll, 2);
        let hard = config::ObufLimit { soft: 0, ..l };
        assert!(c.obuf_limit_reached(&hard, 58));
        c.complete(s, b"");
        // Limits of 0 are off.
        let off = config::ObufLimit::default();
        assert!(!c.obuf_limit_reached(&off, 1000));
        let limits = [off; 3];
        assert!(!c.check_obuf(&limits, 1_000_000));
        assert!(!c.obuf_over);
        let limits = [l, off, off];
        assert!(c.check_obuf(&limits, 1_000_000));
        assert!(c.obuf_over && c.closing);
    }

    #[test]
    fn an_unauthenticated_client_may_hold_1_kib_of_output() {
        let off = [config::ObufLimit::default(); 3];
        let mut c = conn();
        c.client.authenticated = false;
        c.out.raw(&[b'x'; REPLY_CHUNK]);
        assert!(!c.check_obuf(&off, 1_000_000));
        // One byte past the fixed buffer is a whole block of Redis's list,
        // past 1 KiB.
        const { assert!(REPLY_BLOCK_BYTES > UNAUTH_OBUF_MAX) };
        c.out.raw(b"x");
        assert!(c.check_obuf(&off, 1_000_000));
        assert!(c.obuf_over && c.closing);
        // Authenticated, the class's limits (none here) decide.
        let mut c = conn();
        c.client.authenticated = true;
        c.out.raw(&[b'x'; REPLY_CHUNK + 10 * UNAUTH_OBUF_MAX]);
        assert!(!c.check_obuf(&off, 1_000_000));
    }

    #[test]
    fn recent_peaks_cover_the_last_seconds() {
        let mut p = RecentPeaks::default();
        p.sample(100, 10, 500);
        p.sample(101, 20, 5);
        assert_eq!(p.max(), (20, 500));
        p.sample(100 + PEAK_SLOTS as u64 - 1, 0, 0);
        assert_eq!(p.max(), (20, 500));
        // Second 100 falls out of the window.
        p.sample(100 + PEAK_SLOTS as u64, 0, 0);
        assert_eq!(p.max(), (20, 5));
        p.sample(1000, 0, 0);
        assert_eq!(p.max(), (0, 0));
    }
}
