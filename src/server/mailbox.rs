//! Mailboxes: how threads pass work and replies to each other.
//!
//! Every ordered pair of threads (i → j) has its own single-producer,
//! single-consumer ring (`rtrb`), so pushing and popping are wait-free and
//! need no lock. Each thread has one `mio::Waker` (an eventfd registered in
//! its epoll set) and a `parked` flag it raises just before sleeping.
//!
//! Batching: during one loop iteration a thread pushes every message it has
//! for a destination and remembers the destination as dirty; at the end of
//! the iteration it wakes each dirty destination once, and only if that
//! destination is parked. A busy thread is never woken (it drains its rings
//! every iteration anyway), so the cost of a hop is a ring push and pop,
//! plus at most one eventfd write per destination per iteration.
//!
//! Lazy sends: a batch whose reply its executing shard already wrote to
//! the client's socket (a direct reply, see `worker::mark_direct`) goes
//! home with [`Mailbox::send_lazy`], which rings only a destination that
//! sleeps with its `eager` flag raised (it has replies queued behind such a
//! batch, or a close waiting for it). Otherwise the home thread takes the
//! batch when it next wakes, first thing in its iteration; at pipeline 1
//! that is the client's next request, so a hop costs one doorbell instead
//! of two. The same fence protocol covers `eager`.
//!
//! Lost wake-ups are impossible: the consumer stores `parked = true`, issues
//! a SeqCst fence, then checks its rings; the producer pushes, issues a
//! SeqCst fence, then reads `parked`. At least one of them sees the other.
//!
//! Naps: a thread may sleep a few microseconds in `park_timeout` instead
//! of in epoll (see `worker::Nap`), with its `napping` flag raised under
//! the same fence protocol; a doorbell then unparks it instead of writing
//! the eventfd, so a message never waits for a nap to end.
//!
//! Bounds: rings hold `RING_CAPACITY` messages; a full ring spills into a
//! per-destination overflow queue that is retried first on every iteration
//! (keeping FIFO order), and a thread with spilled messages polls with a
//! short timeout instead of sleeping. Each message belongs to a connection
//! whose pipeline is itself bounded, so the overflow is bounded too.

use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;

use commands::coord::{JobOut, Work};
use commands::exec::ShardCall;
use commands::table::ShardHandler;
use commands::Resolved;
use resp::OwnedArgs;

pub const RING_CAPACITY: usize = 4096;

/// Names a connection on its home thread; `gen` guards against the slot
/// having been reused by a newer connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnRef {
    pub thread: u16,
    pub slot: u32,
    pub gen: u32,
}

/// One remote request of a batch.
pub struct BatchCmd {
    pub seq: u64,
    pub resolved: Resolved,
    pub handler: ShardHandler,
    pub call: ShardCall,
    pub resp3: bool,
    pub nargs: u32,
    /// A blocking command's claim flag (see `blocking`).
    pub claim: Option<super::blocking::Claim>,
}

/// The requests one connection sends to one shard in one pass over its
/// pipeline, and (on the way back) their replies. A batch travels to the
/// shard and back and is then reused by the home thread, so in steady state
/// a hop allocates nothing and no memory is freed on a thread other than
/// the one that allocated it.
pub struct Batch {
    pub cmds: Vec<BatchCmd>,
    pub args: OwnedArgs,
    /// All replies, back to back; reply `i` ends at `ends[i]`.
    pub reply: Vec<u8>,
    pub ends: Vec<usize>,
    /// Its (last) command blocked: no reply for it yet.
    pub block: Option<super::blocking::BlockTicket>,
    /// The first command that wrote AOF records (`usize::MAX`: none), and
    /// the durability target covering them (see `aof`): its reply and the
    /// later ones are held under `appendfsync always`.
    pub aof_from: usize,
    pub aof_hold: u64,
    /// A direct reply (see [`Msg::ExecDone`]): the socket of the home
    /// connection, which the executing shard may write the reply to itself
    /// (-1: no).
    pub direct_fd: i32,
    /// Bytes of `reply` the executing shard wrote to `direct_fd`.
    pub direct_written: usize,
}

impl Default for Batch {
    fn default() -> Self {
        Batch {
            cmds: Vec::new(),
            args: OwnedArgs::default(),
            reply: Vec::new(),
            ends: Vec::new(),
            block: None,
            aof_from: usize::MAX,
            aof_hold: 0,
            direct_fd: -1,
            direct_written: 0,
        }
    }
}

/// Largest batch (all its buffers) kept to be reused.
const BATCH_KEEP_BYTES: usize = 1 << 20;

impl Batch {
    /// Empties the batch for reuse; the bytes its buffers keep, or `None`
    /// if it grew too big to keep.
    pub fn recycle(&mut self) -> Option<usize> {
        self.cmds.clear();
        self.args.clear();
        self.reply.clear();
        self.ends.clear();
        self.block = None;
        self.aof_from = usize::MAX;
        self.aof_hold = 0;
        self.direct_fd = -1;
        self.direct_written = 0;
        // Pooled batches keep their buffers, up to a bound on the whole
        // batch (the argument buffer of a hop that carried a 100 MB SET
        // counts too); the pool as a whole is bounded in bytes by the
        // worker. (Bounding each batch at 64 KiB made tests/eviction.rs's
        // LFU test flaky: hot keys evicted while memory hovered at the
        // limit.)
        Some(self.capacity_bytes()).filter(|&b| b <= BATCH_KEEP_BYTES)
    }

    /// Bytes the batch's buffers hold (their capacities).
    pub fn capacity_bytes(&self) -> usize {
        self.cmds.capacity() * std::mem::size_of::<BatchCmd>()
            + self.args.capacity_bytes()
            + self.reply.capacity()
            + self.ends.capacity() * std::mem::size_of::<usize>()
    }
}

pub enum Msg {
    /// Run a batch of shard handlers and send the batch back with replies.
    Exec { conn: ConnRef, batch: Box<Batch> },
    /// Run a coordinator's work (lock, job, release) and send the job's
    /// output back.
    Job { conn: ConnRef, idx: u32, work: Work },
    /// A batch back with its replies. A direct batch (`direct_fd`) whose
    /// reply the executing shard wrote to the socket completely comes back
    /// through [`Mailbox::send_lazy`]: the home thread needs no wake-up to
    /// write anything, and picks the batch up when it next wakes.
    ExecDone { conn: ConnRef, batch: Box<Batch> },
    JobDone {
        conn: ConnRef,
        idx: u32,
        out: JobOut,
        /// Durability target of the job's own AOF records (0: none).
        aof: u64,
    },
    /// A blocked command was served: its reply, for slot `seq`.
    Unblocked {
        conn: ConnRef,
        seq: u64,
        reply: Vec<u8>,
        /// Durability target of the served command's AOF records (0: none).
        aof: u64,
    },
    /// Park a blocked multi-shard command on this shard's `keys` (see
    /// `blocking`).
    Park {
        conn: ConnRef,
        seq: u64,
        cmd: Box<super::blocking::ParkReq>,
    },
    /// A key a home-woken command waits for was created: run the command
    /// in slot `seq` again (see `blocking`).
    Wake { conn: ConnRef, seq: u64 },
    /// A unix-socket connection accepted by another thread.
    Adopt(mio::net::UnixStream),
    /// A tracking client read these keys of this shard (CLIENT TRACKING).
    Track {
        who: engine::Tracker,
        keys: Vec<engine::SmallBytes>,
    },
}

/// The wake-up side of one thread, shared by all threads.
pub struct Doorbell {
    pub waker: mio::Waker,
    pub parked: AtomicBool,
    /// Raised with `parked` when lazily sent messages must wake the thread
    /// too (something of the thread waits for them).
    pub eager: AtomicBool,
    /// Raised while the thread naps (see [`Mailbox::nap`]): it sleeps in
    /// `park_timeout`, not in epoll, so a doorbell unparks it.
    pub napping: AtomicBool,
    /// The thread, once it runs (set by [`Mailbox::nap`]'s first call).
    pub thread: std::sync::OnceLock<std::thread::Thread>,
}

impl Doorbell {
    /// Wakes the thread if it is (about to be) asleep.
    pub fn ring_if_parked(&self) {
        fence(Ordering::SeqCst);
        if self.parked.load(Ordering::Relaxed) {
            // A failed eventfd write means the counter is saturated, i.e.
            // the thread is awake already.
            let _ = self.waker.wake();
        } else if self.napping.load(Ordering::Relaxed) {
            self.end_nap();
        }
    }

    /// Wakes the thread whether it sleeps in epoll, naps, or is busy (then
    /// its next poll returns at once).
    pub fn wake(&self) {
        let _ = self.waker.wake();
        fence(Ordering::SeqCst);
        if self.napping.load(Ordering::Relaxed) {
            self.end_nap();
        }
    }

    fn end_nap(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    /// Wakes the thread if it is asleep and asked to be woken by lazily
    /// sent messages.
    pub fn ring_if_eager(&self) {
        fence(Ordering::SeqCst);
        if self.parked.load(Ordering::Relaxed) && self.eager.load(Ordering::Relaxed) {
            let _ = self.waker.wake();
        }
    }
}

/// One thread's ends of the ring matrix.
pub struct Mailbox {
    pub me: usize,
    out: Vec<Option<rtrb::Producer<Msg>>>,
    inb: Vec<Option<rtrb::Consumer<Msg>>>,
    overflow: Vec<VecDeque<Msg>>,
    dirty: Vec<bool>,
    /// Got only lazy messages this iteration.
    lazy: Vec<bool>,
    bells: Arc<Vec<Doorbell>>,
}

/// Builds the n × n ring matrix: one mailbox per thread.
pub fn matrix(bells: Arc<Vec<Doorbell>>) -> Vec<Mailbox> {
    let n = bells.len();
    let mut outs: Vec<Vec<Option<rtrb::Producer<Msg>>>> =
        (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
    let mut inbs: Vec<Vec<Option<rtrb::Consumer<Msg>>>> =
        (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
    for (i, out_i) in outs.iter_mut().enumerate() {
        for (j, slot) in out_i.iter_mut().enumerate() {
            if i != j {
                let (p, c) = rtrb::RingBuffer::new(RING_CAPACITY);
                *slot = Some(p);
                inbs[j][i] = Some(c);
            }
        }
    }
    outs.into_iter()
        .zip(inbs)
        .enumerate()
        .map(|(me, (out, inb))| Mailbox {
            me,
            out,
            inb,
            overflow: (0..n).map(|_| VecDeque::new()).collect(),
            dirty: vec![false; n],
            lazy: vec![false; n],
            bells: bells.clone(),
        })
        .collect()
}

impl Mailbox {
    /// Queues `msg` for thread `to` (never itself).
    pub fn send(&mut self, to: usize, msg: Msg) {
        debug_assert_ne!(to, self.me);
        self.dirty[to] = true;
        if !self.overflow[to].is_empty() {
            self.overflow[to].push_back(msg);
            return;
        }
        if let Some(p) = self.out[to].as_mut() {
            if let Err(rtrb::PushError::Full(m)) = p.push(msg) {
                self.overflow[to].push_back(m);
            }
        }
    }

    /// Queues `msg` for thread `to` without waking it, unless it sleeps
    /// with its `eager` flag raised: for a message the destination can take
    /// whenever it next wakes.
    pub fn send_lazy(&mut self, to: usize, msg: Msg) {
        debug_assert_ne!(to, self.me);
        if !self.overflow[to].is_empty() {
            self.dirty[to] = true;
            self.overflow[to].push_back(msg);
            return;
        }
        self.lazy[to] = true;
        if let Some(p) = self.out[to].as_mut() {
            if let Err(rtrb::PushError::Full(m)) = p.push(msg) {
                self.dirty[to] = true;
                self.overflow[to].push_back(m);
            }
        }
    }

    /// Retries spilled messages, then rings the doorbell of every thread
    /// that got messages this iteration. Returns true if messages are still
    /// spilled (the caller must not sleep long).
    pub fn flush(&mut self) -> bool {
        let mut spilled = false;
        for to in 0..self.dirty.len() {
            let q = &mut self.overflow[to];
            if let (false, Some(p)) = (q.is_empty(), self.out[to].as_mut()) {
                while let Some(m) = q.pop_front() {
                    if let Err(rtrb::PushError::Full(m)) = p.push(m) {
                        q.push_front(m);
                        break;
                    }
                }
                spilled |= !q.is_empty();
                self.dirty[to] = true;
            }
            if self.dirty[to] {
                self.dirty[to] = false;
                self.lazy[to] = false;
                self.bells[to].ring_if_parked();
            } else if self.lazy[to] {
                self.lazy[to] = false;
                self.bells[to].ring_if_eager();
            }
        }
        spilled
    }

    /// Pops one inbound message, visiting senders round-robin from `start`.
    pub fn recv_from(&mut self, from: usize) -> Option<Msg> {
        self.inb[from].as_mut().and_then(|c| c.pop().ok())
    }

    pub fn threads(&self) -> usize {
        self.inb.len()
    }

    /// Raises this thread's parked flag and reports whether any inbound ring
    /// holds messages (then the thread must not sleep). `eager`: lazily
    /// sent messages must wake it too.
    pub fn park(&self, eager: bool) -> bool {
        self.bells[self.me].eager.store(eager, Ordering::Relaxed);
        self.bells[self.me].parked.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        self.has_inbound()
    }

    /// Whether any inbound ring holds messages.
    pub fn has_inbound(&self) -> bool {
        self.inb.iter().flatten().any(|c| !c.is_empty())
    }

    pub fn unpark(&self) {
        self.bells[self.me].parked.store(false, Ordering::Relaxed);
    }

    /// Sleeps up to `dur`, or until a message arrives (a sender's doorbell
    /// unparks the thread; socket events wait for the nap to end). Same
    /// fence protocol as [`Mailbox::park`].
    pub fn nap(&self, dur: std::time::Duration) {
        let bell = &self.bells[self.me];
        bell.thread.get_or_init(std::thread::current);
        bell.napping.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if !self.has_inbound() {
            std::thread::park_timeout(dur);
        }
        bell.napping.store(false, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_that_carried_a_big_argument_is_not_kept() {
        let mut b = Batch::default();
        b.args.push(b"SET");
        b.args.push(&vec![b'x'; 64 << 10]);
        assert!(b.recycle().is_some(), "64 KiB of arguments is kept");
        b.args.push(&vec![b'x'; 2 << 20]);
        assert!(b.capacity_bytes() > BATCH_KEEP_BYTES);
        assert!(
            b.recycle().is_none(),
            "2 MiB of arguments is freed, not pooled"
        );
    }
}
