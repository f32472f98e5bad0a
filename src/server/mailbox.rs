//! Mailboxes: how threads pass work and replies to each other.
//!
//! Every ordered pair of threads (i → j) that has exchanged messages has
//! its own single-producer, single-consumer ring (`rtrb`), so pushing and
//! popping are wait-free and need no lock. Each thread has one `mio::Waker`
//! (an eventfd registered in its epoll set) and a `parked` flag it raises
//! just before sleeping.
//!
//! Rings on first use, sized by traffic: no ring exists until `i` first
//! sends to `j`. The first holds [`RING_MIN`] messages; when it is full the
//! producer makes a ring twice as big (up to [`RING_CAPACITY`]) and goes
//! on there. It hands the new ring's consumer end over through the
//! destination's `fresh` list (a mutex taken once per ring, never per
//! message) after its last push to the old one, so a consumer holding the
//! newer ring finishes the old one and then drops its end: order holds. A
//! ring unused for a cron period (a small one: [`SMALL_RING_IDLE_TRIMS`]
//! periods) is let go with a last `Retire` mark, which tells the consumer
//! to drop its end ([`Mailbox::trim`]); a later message makes a new, small
//! one. The producer keeps the rings it let go until the consumer has
//! dropped its end, and frees them itself: a ring is allocated and freed
//! by one worker (charged to its shard's counter, whichever thread runs
//! it), so making rings never moves bytes between two shards' memory
//! counters (`engine::alloc`). Idle, a server holds no rings at all.
//!
//! Ready set: each thread has a bitmap of the threads that sent it
//! something (`Doorbell::ready`, one bit per thread). A producer sets its
//! bit in a destination's map once per loop iteration, after the last push
//! (in [`Mailbox::flush`]); the consumer takes the whole map with one swap
//! per 64 threads and visits only those sources' rings. A set bit may be
//! stale (its messages already taken): that costs one empty pop. A visit
//! takes what its source had queued when it began, no more, so one pass
//! over the sources is bounded however fast they push ([`Mailbox::recv`]).
//!
//! Batching: during one loop iteration a thread pushes every message it has
//! for a destination and remembers the destination as touched; at the end
//! of the iteration it marks itself ready at each touched destination once,
//! and wakes it only if it is parked. A busy thread is never woken (it
//! takes its ready set every iteration anyway), so the cost of a hop is a
//! ring push and pop, plus at most one atomic OR and one eventfd write per
//! destination per iteration (and per extra pass of a drain that keeps
//! finding messages: `worker::sched::Worker::drain` flushes between
//! passes, so what one pass sent does not wait for the next).
//!
//! Lazy sends: a batch whose reply its executing shard already wrote to
//! the client's socket (a direct reply, see `worker::request::mark_direct`) goes
//! home with [`Mailbox::send_lazy`], which rings only a destination that
//! sleeps with its `eager` flag raised (it has replies queued behind such a
//! batch, or a close waiting for it). Otherwise the home thread takes the
//! batch when it next wakes, first thing in its iteration; at pipeline 1
//! that is the client's next request, so a hop costs one doorbell instead
//! of two. The same fence protocol covers `eager`.
//!
//! Gathered replies: the works of one coordinator step sent to two
//! threads or more share a [`Gather`]; each shard adds its work's output
//! there, and the one whose output is the last in sends them all home in
//! one [`Msg::JobsDone`]. A step over `k` remote shards thus costs `k + 1`
//! messages instead of `2k`. Order is unaffected: the coordinator steps
//! only once every output of a step is in, whichever ring brought it.
//!
//! Lost wake-ups are impossible: the consumer stores `parked = true`, issues
//! a SeqCst fence, then reads its ready set; the producer pushes, sets its
//! ready bit, issues a SeqCst fence, then reads `parked`. At least one of
//! them sees the other. The consumer swaps a word of its ready set to zero
//! before popping those sources' rings, and a producer ORs its bit in after
//! pushing (release/acquire on the same word): a message is either seen by
//! the pops that follow the swap, or its bit is set for the next one.
//!
//! One ring per sleep: the first sender to find a thread parked lowers
//! its flag as it rings (a swap), so the senders after it, whose bits are
//! set before their fence as the first one's were, ring no more; the
//! woken thread takes their messages in the iteration that wake-up
//! starts, or, set after that iteration's look, sees them at its next
//! park's fenced look and does not sleep. This is the same as if the
//! thread had lowered the flag itself on waking, only earlier. Before, a
//! thread asleep while several threads sent to it got one eventfd write
//! from each (the replies of an MSET's lock round, from every shard it
//! asked): with 8 threads apart on 2 cores, 5.1 doorbell writes per MSET
//! of 10 keys for 3.0 wake-ups (`bench/README.md`, branch cores24), 2.7-2.9
//! after; SET at pipeline 1 0.78 -> 0.58. A napping thread is unparked
//! once the same way.
//!
//! Naps: a thread may sleep a few microseconds in `park_timeout` instead
//! of in epoll (see `worker::nap::Nap`), with its `napping` flag raised under
//! the same fence protocol; a doorbell then unparks it instead of writing
//! the eventfd, so a message never waits for a nap to end.
//!
//! Bounds: a ring holds at most `RING_CAPACITY` messages; a full ring of
//! that size spills into a per-destination overflow queue that is retried
//! first on every iteration (keeping FIFO order), and a thread with spilled
//! messages polls with a short timeout instead of sleeping. Each message
//! belongs to a connection whose pipeline is itself bounded, so the
//! overflow is bounded too. While a ring grows, the chain of one pair's
//! rings holds less than `2 × RING_CAPACITY` slots.
//!
//! # Cost in the number of threads N (Msg is 88 bytes)
//! - Rings: none idle; one per pair that talks, from `RING_MIN × 88` bytes
//!   (under 3 KB), growing only while that pair's traffic fills it, and
//!   let go after a cron period unused (a small one after
//!   `SMALL_RING_IDLE_TRIMS`). The worst case, every pair
//!   saturated at once, is the old up-front matrix: N(N−1) × 4096 × 88
//!   bytes (1.4 GB at 64 threads); it is never reached idle or under
//!   ordinary load.
//! - Per thread, fixed: one producer slot, one overflow queue and one
//!   consumer list per peer (about 100 bytes × N, 6 KB at 64 threads: N²
//!   in total, 400 KB at 64), and a ready bitmap of ⌈N/64⌉ padded words.
//! - Per loop iteration: sending touches only the destinations messaged;
//!   [`Mailbox::flush`] visits those and the ones with spilled messages;
//!   receiving swaps ⌈N/64⌉ words and visits only sources with a bit set.
//!   Nothing per iteration scans all N peers.
//! - Per cron tick: [`Mailbox::trim`] visits the N peers once.

use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use commands::coord::{JobOut, Work};
use commands::exec::ShardCall;
use commands::table::ShardHandler;
use commands::Resolved;
use resp::OwnedArgs;

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
    /// A direct reply (see [`Msg::ExecDone`]): the home connection's
    /// stream lets the executing shard write the reply to the client
    /// itself.
    pub direct: Option<super::conn::DirectReply>,
    /// Bytes of `reply` the executing shard wrote through `direct`.
    pub direct_written: usize,
    /// Its (last) command, a script, touched keys of other shards: no
    /// reply; the home runs it again (`commands::script::wide`).
    pub widen: Option<Box<Widen>>,
}

/// A script to run again on the home thread over more keys.
pub struct Widen {
    pub seq: u64,
    pub resolved: Resolved,
    pub handler: ShardHandler,
    pub args: OwnedArgs,
    /// The keys it found.
    pub keys: Vec<Vec<u8>>,
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
            direct: None,
            direct_written: 0,
            widen: None,
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
        self.direct = None;
        self.direct_written = 0;
        self.widen = None;
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
    /// Over `maxmemory` with nothing to evict on a command's own shard:
    /// evict this shard's share now and answer `EvictDone` to thread `from`
    /// (see `worker::memory::evict_elsewhere`).
    EvictNow { from: u16 },
    /// A shard asked by `EvictNow` has evicted; its invalidations and
    /// events were sent before this.
    EvictDone,
    /// Run a batch of shard handlers and send the batch back with replies.
    Exec { conn: ConnRef, batch: Box<Batch> },
    /// Run a coordinator's work (lock, job, release) and send the job's
    /// output back: alone (`JobDone`), or into `gather` when the step sent
    /// works to several threads (the last output sends them all).
    Job {
        conn: ConnRef,
        idx: u32,
        work: Work,
        gather: Option<Arc<Gather>>,
    },
    /// A batch back with its replies. A direct batch (`Batch::direct`) whose
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
    /// Every output of a coordinator step's works that went out with one
    /// [`Gather`], sent by the shard whose output was the last one in.
    JobsDone { conn: ConnRef, gather: Arc<Gather> },
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

/// The outputs of one coordinator step's works sent to two threads or
/// more: each shard puts its work's output in the work's slot, and the one
/// whose output is the last in sends the gather home in one
/// [`Msg::JobsDone`], instead of one `JobDone` each (an MSET of 10 keys
/// over 8 threads sent about 5 per round, each a ring push, a pop, a
/// dispatch and possibly a doorbell).
///
/// Reply order is kept: the coordinator steps only once every output of
/// the step is in, whichever message brought it. The home thread makes a
/// gather, sizes it before any shard sees it (a shard never allocates in
/// it) and keeps one reference in a pool (`Core::gathers`), so a gather is
/// reused and freed there, not on a shard's thread.
///
/// No lock: slot `i` belongs to the step's work `i` alone, which writes
/// it once, then counts itself out of `left` (release). The last one out
/// (acquire: it sees every slot written) sends the gather home through a
/// ring, whose push and pop order the home thread's reads after all of
/// those writes. A mutex per gather cost about 45 instructions per output.
#[derive(Default)]
pub struct Gather {
    /// Outputs still to come.
    left: AtomicUsize,
    /// `(output, AOF durability target)` of work `i` at `i`.
    slots: Vec<std::cell::UnsafeCell<Option<(JobOut, u64)>>>,
}

// SAFETY: a slot is written by one thread (its work's shard) before that
// thread's release decrement of `left`, and read (taken) only by the home
// thread after the last decrement, which that thread reaches through the
// last shard's acquire decrement and the ring carrying `JobsDone` (see the
// type's docs); `arm` needs `&mut`. No two threads touch a slot at once.
unsafe impl Sync for Gather {}

impl Gather {
    /// Expects outputs of the works named by `idxs` (indexes of the step's
    /// works, each once), with room for indexes below `slots`. Exclusive
    /// (`Arc::get_mut`): no shard holds the gather. A step whose work
    /// never answered (a lock request dropped from its queue by its own
    /// transaction's abort) never completed: what it gathered is dropped
    /// here.
    pub fn arm(&mut self, slots: usize, n: usize) {
        for s in &mut self.slots {
            *s.get_mut() = None;
        }
        if self.slots.len() < slots {
            self.slots.resize_with(slots, Default::default);
        }
        *self.left.get_mut() = n;
    }

    /// Adds work `idx`'s output; true if it was the last one to come (the
    /// caller then sends the gather home).
    pub fn add(&self, idx: u32, out: JobOut, aof: u64) -> bool {
        let slot = &self.slots[idx as usize];
        // SAFETY: slot `idx` is this work's alone and nobody reads it
        // before `left` reaches 0 below (see the `Sync` impl).
        unsafe { *slot.get() = Some((out, aof)) };
        let before = self.left.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "more outputs than works");
        before == 1
    }

    /// The outputs, every one in (the gather came home in `JobsDone`), in
    /// work order; each slot is emptied.
    pub fn outputs(&self) -> impl Iterator<Item = (u32, JobOut, u64)> + '_ {
        assert_eq!(
            self.left.load(Ordering::Acquire),
            0,
            "INVARIANT: a gather comes home with every output in"
        );
        self.slots.iter().enumerate().filter_map(|(i, slot)| {
            // SAFETY: `left` is 0: every work wrote its slot and no shard
            // touches the gather any more; only this (home) thread reads.
            let taken = unsafe { (*slot.get()).take() };
            taken.map(|(out, aof)| (i as u32, out, aof))
        })
    }
}

/// Messages a ring holds when first made: 32 × 88 bytes.
pub const RING_MIN: usize = 32;

/// The largest ring; past it messages spill into the overflow queue.
pub const RING_CAPACITY: usize = 4096;

/// One padded word of a ready bitmap (producers of different
/// destinations never share a line).
#[repr(align(64))]
struct ReadyWord(AtomicU64);

/// The wake-up side of one thread, and its ready set, shared by all
/// threads.
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
    /// Bit `i`: thread `i` pushed messages for this thread since it last
    /// took its ready set. Shared with this thread's [`Mailbox`], which
    /// reads it without going through the doorbells.
    ready: Arc<[ReadyWord]>,
    /// Consumer ends of rings producers made for this thread, not yet
    /// taken by it, in the order they were made.
    fresh: Mutex<Vec<(u16, rtrb::Consumer<Slot>)>>,
    /// Set (under `fresh`'s lock) when `fresh` is not empty.
    fresh_any: AtomicBool,
    /// Doorbells rung by senders (`ring_if_parked`, `ring_if_eager`).
    #[cfg(test)]
    rings: AtomicUsize,
}

impl Doorbell {
    /// The doorbell of one of `nthreads` threads.
    pub fn new(waker: mio::Waker, nthreads: usize) -> Self {
        Doorbell {
            waker,
            parked: AtomicBool::new(false),
            eager: AtomicBool::new(false),
            napping: AtomicBool::new(false),
            thread: std::sync::OnceLock::new(),
            ready: (0..nthreads.div_ceil(64).max(1))
                .map(|_| ReadyWord(AtomicU64::new(0)))
                .collect(),
            fresh: Mutex::new(Vec::new()),
            fresh_any: AtomicBool::new(false),
            #[cfg(test)]
            rings: AtomicUsize::new(0),
        }
    }

    /// Marks thread `from` as having messages for this one.
    fn mark_ready(&self, from: usize) {
        // Always the read-modify-write, even when the bit looks set: a
        // plain load could read the word from before the consumer's swap
        // while the consumer's pops miss this push (the store-buffer
        // pattern). An OR is ordered with the swap either way: before it
        // (the swap's acquire then sees the push) or after (the bit stays
        // for the next swap).
        self.ready[from / 64]
            .0
            .fetch_or(1u64 << (from % 64), Ordering::AcqRel);
    }

    fn lock_fresh(&self) -> std::sync::MutexGuard<'_, Vec<(u16, rtrb::Consumer<Slot>)>> {
        // A panic while holding it cannot leave the list inconsistent
        // (push and drain only).
        self.fresh.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes the thread if it is (about to be) asleep. The first sender
    /// to find it parked (or napping) lowers the flag as it rings: the
    /// senders after it leave the thread to the wake-up already on its
    /// way (see "One ring per sleep" in the module docs).
    pub fn ring_if_parked(&self) {
        fence(Ordering::SeqCst);
        if self.parked.load(Ordering::Relaxed) {
            if self.parked.swap(false, Ordering::Relaxed) {
                #[cfg(test)]
                self.rings.fetch_add(1, Ordering::Relaxed);
                // A failed eventfd write means the counter is saturated,
                // i.e. the thread is awake already.
                let _ = self.waker.wake();
            }
        } else if self.napping.load(Ordering::Relaxed)
            && self.napping.swap(false, Ordering::Relaxed)
        {
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
        if self.parked.load(Ordering::Relaxed)
            && self.eager.load(Ordering::Relaxed)
            && self.parked.swap(false, Ordering::Relaxed)
        {
            #[cfg(test)]
            self.rings.fetch_add(1, Ordering::Relaxed);
            let _ = self.waker.wake();
        }
    }
}

/// What a ring carries: messages, and last the mark of a ring its
/// producer let go (see [`Mailbox::trim`]).
enum Slot {
    Msg(Msg),
    Retire,
}

/// Pushes a message; a full ring hands it back.
fn push_msg(p: &mut rtrb::Producer<Slot>, m: Msg) -> Result<(), Msg> {
    match p.push(Slot::Msg(m)) {
        Ok(()) => Ok(()),
        Err(rtrb::PushError::Full(Slot::Msg(m))) => Err(m),
        // INVARIANT: `push` hands back the value it was given.
        Err(rtrb::PushError::Full(Slot::Retire)) => unreachable!("not what was pushed"),
    }
}

/// The producer side of one destination.
#[derive(Default)]
struct Outbound {
    /// The newest ring to the destination (`None`: none yet, or trimmed).
    ring: Option<rtrb::Producer<Slot>>,
    /// Messages that found the largest ring full, oldest first.
    overflow: VecDeque<Msg>,
    /// Got messages this iteration: 1 lazy only, 2 at least one eager.
    mark: u8,
    /// Got messages since the last [`Mailbox::trim`].
    used: bool,
    /// Trims since it last got messages.
    idle: u8,
}

/// Cron periods a ring of `RING_MIN` may stay unused before it is let go
/// (a grown one goes after one): a pair that talks now and then keeps its
/// small ring, rather than making one (an allocation and a lock) for
/// every message.
const SMALL_RING_IDLE_TRIMS: u8 = 50;

/// A look at one thread's inbound side from another thread, without its
/// [`Mailbox`]: what a hub reads, with no lock, of each loop it holds
/// that took no turn (see `host::round`'s ready set).
#[derive(Clone)]
pub struct Probe {
    me: usize,
    bells: Arc<Vec<Doorbell>>,
}

impl Probe {
    /// Whether some thread marked messages for this one since it last
    /// took its ready set (a relaxed load per 64 threads). Messages the
    /// thread took and has not handled yet are its own to report
    /// ([`Mailbox::has_inbound`]). A mark made after this look is seen by
    /// the next one, or by [`Mailbox::park`]'s fenced look before a sleep.
    pub fn marked(&self) -> bool {
        self.bells[self.me]
            .ready
            .iter()
            .any(|w| w.0.load(Ordering::Relaxed) != 0)
    }

    /// [`Mailbox::park`] from another thread, for a thread that has
    /// taken no source it has not drained (its own look found nothing
    /// waiting since): raises its parked flag (and `eager`), then looks at
    /// its ready words after the fence. True if messages wait.
    pub fn park(&self, eager: bool) -> bool {
        let bell = &self.bells[self.me];
        bell.eager.store(eager, Ordering::Relaxed);
        bell.parked.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        self.marked()
    }

    /// Lowers the thread's parked flag ([`Mailbox::unpark`]).
    pub fn unpark(&self) {
        self.bells[self.me].parked.store(false, Ordering::Relaxed);
    }
}

/// One thread's ends of its rings. Laid out in declaration order
/// (`repr(C)`): what [`Mailbox::has_inbound`] reads leads it.
#[repr(C)]
pub struct Mailbox {
    pub me: usize,
    /// The source being drained.
    cur: Option<usize>,
    /// Bits set in `taken`.
    taken_count: u32,
    /// Messages the visit of `cur` may still take (see [`Mailbox::recv`]).
    left: u32,
    /// This thread's ready set (its doorbell's). `has_inbound`, which a
    /// hub asks of every loop it holds each round, then reads this struct
    /// and the ready words: two cache lines per loop, where the bitmap
    /// behind `taken` and the doorbell on the way to its ready words made
    /// four.
    own_ready: Arc<[ReadyWord]>,
    /// Per destination thread.
    out: Vec<Outbound>,
    /// Per source thread: its rings to this one, oldest first (more than
    /// one only while a ring grows).
    inb: Vec<VecDeque<rtrb::Consumer<Slot>>>,
    /// Destinations marked in `out` this iteration.
    touched: Vec<u16>,
    /// Destinations with spilled messages.
    spilled: Vec<u16>,
    /// Sources taken from the ready set and not yet drained.
    taken: Vec<u64>,
    /// Rings this thread let go (outgrown or idle), kept until their
    /// consumer lets go too: a ring is freed by the thread that made it.
    retired: Vec<rtrb::Producer<Slot>>,
    bells: Arc<Vec<Doorbell>>,
    /// Messages sent (tests count hops with it).
    #[cfg(test)]
    pub sent: usize,
}

/// One mailbox per thread (no ring is made before it is needed).
pub fn matrix(bells: Arc<Vec<Doorbell>>) -> Vec<Mailbox> {
    let n = bells.len();
    (0..n)
        .map(|me| Mailbox {
            me,
            out: (0..n).map(|_| Outbound::default()).collect(),
            inb: (0..n).map(|_| VecDeque::new()).collect(),
            touched: Vec::new(),
            spilled: Vec::new(),
            taken: vec![0; n.div_ceil(64).max(1)],
            taken_count: 0,
            left: 0,
            own_ready: bells[me].ready.clone(),
            cur: None,
            retired: Vec::new(),
            bells: bells.clone(),
            #[cfg(test)]
            sent: 0,
        })
        .collect()
}

impl Mailbox {
    /// Queues `msg` for thread `to` (never itself).
    pub fn send(&mut self, to: usize, msg: Msg) {
        #[cfg(test)]
        {
            self.sent += 1;
        }
        self.mark(to, 2);
        self.push(to, msg);
    }

    /// Queues `msg` for thread `to` without waking it, unless it sleeps
    /// with its `eager` flag raised: for a message the destination can take
    /// whenever it next wakes.
    pub fn send_lazy(&mut self, to: usize, msg: Msg) {
        // Behind spilled messages it is not lazy: those need the wake-up.
        let mark = if self.out[to].overflow.is_empty() {
            1
        } else {
            2
        };
        #[cfg(test)]
        {
            self.sent += 1;
        }
        self.mark(to, mark);
        self.push(to, msg);
    }

    fn mark(&mut self, to: usize, mark: u8) {
        debug_assert_ne!(to, self.me);
        let o = &mut self.out[to];
        if o.mark == 0 {
            self.touched.push(to as u16);
        }
        o.mark = o.mark.max(mark);
        o.used = true;
    }

    /// Pushes onto `to`'s ring: a new one if there is none or it is full
    /// and below `RING_CAPACITY`, the overflow queue if it is full at that
    /// size or messages are spilled already.
    fn push(&mut self, to: usize, msg: Msg) {
        let o = &mut self.out[to];
        if !o.overflow.is_empty() {
            o.overflow.push_back(msg);
            return;
        }
        let msg = match o.ring.as_mut() {
            Some(p) => match push_msg(p, msg) {
                Ok(()) => return,
                Err(m) => m,
            },
            None => msg,
        };
        let cap = o.ring.as_ref().map_or(0, |p| p.buffer().capacity());
        if cap >= RING_CAPACITY {
            o.overflow.push_back(msg);
            self.spilled.push(to as u16);
            self.mark(to, 2);
            return;
        }
        let (mut p, c) = rtrb::RingBuffer::new((cap * 2).max(RING_MIN));
        // Handed over after every push to the old ring: a consumer that
        // holds the new one has seen all of the old one's messages.
        {
            let bell = &self.bells[to];
            let mut fresh = bell.lock_fresh();
            fresh.push((self.me as u16, c));
            bell.fresh_any.store(true, Ordering::Release);
        }
        // INVARIANT: a new ring has room for one message.
        if push_msg(&mut p, msg).is_err() {
            unreachable!("a new ring is empty");
        }
        if let Some(old) = o.ring.replace(p) {
            self.retired.push(old);
        }
    }

    /// Retries spilled messages, marks this thread ready at every thread
    /// that got messages this iteration and rings the doorbells. Returns
    /// true if messages are still spilled (the caller must not sleep long).
    /// Nothing sent and nothing spilled (most of a busy hub's turns): one
    /// look, inlined.
    #[inline]
    pub fn flush(&mut self) -> bool {
        if self.spilled.is_empty() && self.touched.is_empty() {
            return false;
        }
        self.flush_marked()
    }

    fn flush_marked(&mut self) -> bool {
        let mut i = 0;
        while i < self.spilled.len() {
            let to = usize::from(self.spilled[i]);
            let o = &mut self.out[to];
            if let Some(p) = o.ring.as_mut() {
                while let Some(m) = o.overflow.pop_front() {
                    if let Err(m) = push_msg(p, m) {
                        o.overflow.push_front(m);
                        break;
                    }
                }
            }
            if self.out[to].overflow.is_empty() {
                self.spilled.swap_remove(i);
            } else {
                i += 1;
            }
            self.mark(to, 2);
        }
        for &to in &self.touched {
            let to = usize::from(to);
            let bell = &self.bells[to];
            bell.mark_ready(self.me);
            match std::mem::take(&mut self.out[to].mark) {
                2 => bell.ring_if_parked(),
                _ => bell.ring_if_eager(),
            }
        }
        self.touched.clear();
        !self.spilled.is_empty()
    }

    /// Takes this thread's ready set: the sources [`Mailbox::recv`] visits
    /// next. Messages sent after it wait for the next call.
    pub fn collect(&mut self) {
        for (t, w) in self.taken.iter_mut().zip(self.own_ready.iter()) {
            if w.0.load(Ordering::Relaxed) != 0 {
                let new = w.0.swap(0, Ordering::AcqRel);
                self.taken_count += (new & !*t).count_ones();
                *t |= new;
            }
        }
    }

    /// Pops one inbound message from the sources taken by
    /// [`Mailbox::collect`], visiting each once, in turn. A visit takes
    /// what its source had queued when the visit began and no more: what
    /// the producer pushes meanwhile waits for a later visit (its flush
    /// marks the source ready again). So `None` ends a *pass*, bounded by
    /// what was queued, not an empty mailbox; a thread that kept pushing
    /// could otherwise hold its consumer on its ring, away from its other
    /// sources, its local work and the end of its iteration (which
    /// publishes what it sent and writes its replies) for as long as it
    /// kept up (see `worker::sched::Worker::drain`).
    pub fn recv(&mut self) -> Option<Msg> {
        loop {
            let src = match self.cur {
                Some(s) => s,
                None => {
                    let (w, bits) = self.taken.iter_mut().enumerate().find(|(_, b)| **b != 0)?;
                    let bit = bits.trailing_zeros() as usize;
                    *bits &= *bits - 1;
                    self.taken_count -= 1;
                    let s = w * 64 + bit;
                    self.cur = Some(s);
                    self.left = self.queued_from(s);
                    s
                }
            };
            if self.left > 0 {
                if let Some(m) = self.pop_from(src) {
                    self.left -= 1;
                    return Some(m);
                }
            }
            self.cur = None;
        }
    }

    /// Slots `src` has queued for this thread now, over all its rings
    /// (an idle ring's `Retire` mark counts as one: the visit it bounds
    /// may then take one message more).
    fn queued_from(&mut self, src: usize) -> u32 {
        // A ring handed over before its first push is in `fresh` until
        // taken: the bit that named `src` was set after that push.
        self.take_fresh();
        let n: usize = self.inb[src].iter().map(|c| c.slots()).sum();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Pops from `src`'s oldest ring, moving to the next one when the
    /// producer let the oldest go.
    fn pop_from(&mut self, src: usize) -> Option<Msg> {
        loop {
            let q = &mut self.inb[src];
            let newer = q.len() > 1;
            if let Some(c) = q.front_mut() {
                match c.pop() {
                    Ok(Slot::Msg(m)) => return Some(m),
                    Ok(Slot::Retire) => {
                        q.pop_front();
                        continue;
                    }
                    Err(_) => {
                        // Empty, and finished if a newer ring follows (it
                        // was handed over after the last push here) or
                        // the producer is gone (dropped after its last
                        // push; acquire, then look again).
                        let finished = newer || c.is_abandoned();
                        if finished && c.is_empty() {
                            q.pop_front();
                            continue;
                        }
                        if finished {
                            continue;
                        }
                    }
                }
            }
            // No ring, or the newest is empty: a bit with no ring means
            // the ring waits in `fresh`; so may a newer one.
            if !self.take_fresh() {
                return None;
            }
        }
    }

    /// Moves the rings producers handed over into `inb`; false if there
    /// were none.
    fn take_fresh(&mut self) -> bool {
        let bell = &self.bells[self.me];
        if !bell.fresh_any.load(Ordering::Acquire) {
            return false;
        }
        let mut fresh = bell.lock_fresh();
        bell.fresh_any.store(false, Ordering::Relaxed);
        let any = !fresh.is_empty();
        for (src, c) in fresh.drain(..) {
            self.inb[usize::from(src)].push_back(c);
        }
        any
    }

    /// From the cron: lets go of rings to destinations that got nothing
    /// since the last call (a small one only after
    /// [`SMALL_RING_IDLE_TRIMS`] calls; a later message makes a new, small
    /// one), and frees the rings let go whose consumer let go too.
    /// Visits every peer.
    pub fn trim(&mut self) {
        for (to, o) in self.out.iter_mut().enumerate() {
            let Some(p) = o.ring.as_mut() else { continue };
            if std::mem::take(&mut o.used) {
                o.idle = 0;
                continue;
            }
            o.idle = o.idle.saturating_add(1);
            let cap = p.buffer().capacity();
            let empty = p.slots() == cap && o.overflow.is_empty();
            if empty && (cap > RING_MIN || o.idle >= SMALL_RING_IDLE_TRIMS) {
                // INVARIANT: an empty ring has room for the mark. The
                // consumer drops its end when it pops it.
                if p.push(Slot::Retire).is_err() {
                    unreachable!("the ring is empty");
                }
                self.retired.extend(o.ring.take());
                o.idle = 0;
                // Told lazily: it finds the mark when it next wakes.
                if o.mark == 0 {
                    o.mark = 1;
                    self.touched.push(to as u16);
                }
            }
        }
        // Freed here, where they were made (`is_abandoned`: the consumer
        // dropped its end).
        self.retired.retain(|p| !p.is_abandoned());
    }

    pub fn threads(&self) -> usize {
        self.inb.len()
    }

    /// Raises this thread's parked flag and reports whether any messages
    /// wait (then the thread must not sleep). `eager`: lazily sent messages
    /// must wake it too.
    pub fn park(&self, eager: bool) -> bool {
        self.bells[self.me].eager.store(eager, Ordering::Relaxed);
        self.bells[self.me].parked.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        self.has_inbound()
    }

    /// Whether messages may wait: sources taken and not yet drained, or
    /// sources marked ready since.
    pub fn has_inbound(&self) -> bool {
        debug_assert_eq!(
            self.taken_count,
            self.taken.iter().map(|b| b.count_ones()).sum::<u32>()
        );
        self.cur.is_some()
            || self.taken_count != 0
            || self
                .own_ready
                .iter()
                .any(|w| w.0.load(Ordering::Relaxed) != 0)
    }

    pub fn unpark(&self) {
        self.bells[self.me].parked.store(false, Ordering::Relaxed);
    }

    /// This thread's inbound side, for a hub's look without this mailbox.
    pub fn probe(&self) -> Probe {
        Probe {
            me: self.me,
            bells: self.bells.clone(),
        }
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

    /// `n` mailboxes (and the polls their wakers live in).
    fn mailboxes(n: usize) -> (Vec<mio::Poll>, Vec<Mailbox>) {
        let polls: Vec<mio::Poll> = (0..n).map(|_| mio::Poll::new().unwrap()).collect();
        let bells = polls
            .iter()
            .map(|p| Doorbell::new(mio::Waker::new(p.registry(), mio::Token(0)).unwrap(), n))
            .collect();
        (polls, matrix(Arc::new(bells)))
    }

    fn wake(from: usize, seq: u64) -> Msg {
        let conn = ConnRef {
            thread: from as u16,
            slot: 0,
            gen: 0,
        };
        Msg::Wake { conn, seq }
    }

    /// (sender, seq) of every message `m` receives now.
    fn received(m: &mut Mailbox) -> Vec<(u16, u64)> {
        m.collect();
        std::iter::from_fn(|| m.recv())
            .map(|m| match m {
                Msg::Wake { conn, seq } => (conn.thread, seq),
                _ => unreachable!(),
            })
            .collect()
    }

    /// Ring ends `m` holds.
    fn rings(m: &Mailbox) -> usize {
        m.out.iter().filter(|o| o.ring.is_some()).count()
            + m.retired.len()
            + m.inb.iter().map(|q| q.len()).sum::<usize>()
    }

    /// A sleeping thread is rung once, by the first sender that finds it
    /// parked: the senders after it leave their messages to the iteration
    /// that wake-up starts, and if they come after that iteration's look,
    /// the thread's next park finds them (it does not sleep). Before, each
    /// sender rang: an eventfd write apiece, for one wake-up.
    #[test]
    fn a_parked_thread_is_rung_once_by_many_senders() {
        let (mut polls, mut mb) = mailboxes(4);
        let rings = |mb: &[Mailbox]| mb[0].bells[0].rings.load(Ordering::Relaxed);
        assert!(!mb[0].park(false), "nothing waits: it may sleep");
        for (from, m) in mb.iter_mut().enumerate().skip(1) {
            m.send(0, wake(from, 1));
            assert!(!m.flush());
        }
        assert_eq!(rings(&mb), 1, "three senders, one ring");
        let mut events = mio::Events::with_capacity(4);
        polls[0]
            .poll(&mut events, Some(std::time::Duration::ZERO))
            .unwrap();
        assert!(!events.is_empty(), "the ring wakes it");
        mb[0].unpark();
        assert_eq!(received(&mut mb[0]), [(1, 1), (2, 1), (3, 1)]);
        // Asleep again: the next sender rings again.
        assert!(!mb[0].park(false));
        mb[1].send(0, wake(1, 2));
        mb[1].flush();
        assert_eq!(rings(&mb), 2);
        // A sender after the ring, before the woken thread looks: no ring;
        // its message is taken with the other, or by the next park's look.
        mb[2].send(0, wake(2, 2));
        mb[2].flush();
        assert_eq!(rings(&mb), 2);
        assert!(mb[0].park(false), "mail waits: it must not sleep");
        mb[0].unpark();
        assert_eq!(received(&mut mb[0]), [(1, 2), (2, 2)]);
        // A lazy message rings only a thread parked eager, once too.
        assert!(!mb[0].park(true));
        mb[1].send_lazy(0, wake(1, 3));
        mb[1].flush();
        mb[2].send_lazy(0, wake(2, 3));
        mb[2].flush();
        assert_eq!(rings(&mb), 3);
    }

    #[test]
    fn a_slot_costs_what_a_message_does() {
        // The module doc's figures count 88 bytes a slot.
        assert_eq!(std::mem::size_of::<Slot>(), std::mem::size_of::<Msg>());
        assert_eq!(std::mem::size_of::<Msg>(), 88);
    }

    #[test]
    fn no_ring_exists_before_a_message_and_only_senders_are_visited() {
        let (_p, mut mb) = mailboxes(130);
        assert_eq!(mb.iter().map(rings).sum::<usize>(), 0, "idle: no rings");
        for &from in &[3usize, 70, 129] {
            mb[from].send(5, wake(from, 1));
            mb[from].send(5, wake(from, 2));
            assert!(!mb[from].flush());
        }
        assert!(mb[5].has_inbound());
        let got = received(&mut mb[5]);
        assert_eq!(got, [(3, 1), (3, 2), (70, 1), (70, 2), (129, 1), (129, 2)]);
        assert!(!mb[5].has_inbound());
        assert_eq!(rings(&mb[5]), 3, "one ring per source that sent");
        assert_eq!(
            mb.iter().map(rings).sum::<usize>(),
            6,
            "both ends of 3 rings"
        );
    }

    /// A source that keeps pushing while its consumer pops (another
    /// thread, in the server) cannot hold the consumer on its ring: a
    /// visit takes what the source had queued when it began, the pass ends
    /// once every source was visited, and the next pass goes on with what
    /// came meanwhile. Draining a source until it was empty, as `recv`
    /// did, never reached source 2 here (nor ended the pass, which the
    /// loop's local jobs, flushes and replies wait for).
    #[test]
    fn a_source_that_keeps_sending_does_not_hold_a_pass() {
        let (_p, mut mb) = mailboxes(3);
        for seq in 0..4 {
            mb[1].send(0, wake(1, seq));
        }
        mb[2].send(0, wake(2, 0));
        mb[1].flush();
        mb[2].flush();
        mb[0].collect();
        let mut order = Vec::new();
        let mut next = 4;
        while let Some(m) = mb[0].recv() {
            let Msg::Wake { conn, seq } = m else {
                unreachable!()
            };
            order.push((conn.thread, seq));
            // Source 1 sends another message for every one taken (bounded:
            // a regression would otherwise loop for ever).
            assert!(order.len() < 100, "a pass that does not end: {order:?}");
            mb[1].send(0, wake(1, next));
            next += 1;
        }
        assert_eq!(order, [(1, 0), (1, 1), (1, 2), (1, 3), (2, 0)]);
        // What came during the pass is the next pass's (its flush marked
        // source 1 ready again), in order.
        assert!(!mb[0].has_inbound(), "not before its flush");
        mb[1].flush();
        assert!(mb[0].has_inbound());
        let rest: Vec<u64> = received(&mut mb[0]).into_iter().map(|(_, s)| s).collect();
        assert_eq!(rest, (4..next).collect::<Vec<_>>());
    }

    #[test]
    fn a_ring_grows_with_traffic_then_spills_and_order_holds() {
        let (_p, mut mb) = mailboxes(2);
        let n = 3 * RING_CAPACITY as u64;
        for seq in 0..n {
            mb[0].send(1, wake(0, seq));
        }
        let cap = mb[0].out[1].ring.as_ref().unwrap().buffer().capacity();
        assert_eq!(cap, RING_CAPACITY, "grown from RING_MIN by doubling");
        assert!(mb[0].flush(), "the rest spilled");
        let mut got = Vec::new();
        loop {
            got.extend(received(&mut mb[1]).into_iter().map(|(_, s)| s));
            if !mb[0].flush() {
                got.extend(received(&mut mb[1]).into_iter().map(|(_, s)| s));
                break;
            }
        }
        assert_eq!(got, (0..n).collect::<Vec<_>>());
        assert_eq!(mb[1].inb[0].len(), 1, "the consumer let the outgrown go");
        assert_eq!(mb[0].retired.len(), 7, "32 to 2048, kept by their maker");
        mb[0].trim();
        assert_eq!(rings(&mb[0]), 1, "and freed by it");
    }

    #[test]
    fn idle_rings_are_trimmed_and_made_again_when_needed() {
        let (_p, mut mb) = mailboxes(2);
        for seq in 0..100 {
            mb[0].send(1, wake(0, seq));
        }
        mb[0].flush();
        assert_eq!(received(&mut mb[1]).len(), 100);
        mb[0].trim();
        assert!(mb[0].out[1].ring.is_some(), "used since the last trim");
        mb[0].trim();
        assert!(
            mb[0].out[1].ring.is_none(),
            "a grown ring goes after one idle period"
        );
        assert_eq!(mb[0].retired.len(), 1, "until the consumer lets go");
        assert!(!mb[0].flush());
        assert!(received(&mut mb[1]).is_empty());
        assert_eq!(rings(&mb[1]), 0, "the consumer took the mark");
        mb[0].trim();
        assert_eq!(rings(&mb[0]), 0, "the producer freed it");
        mb[0].send(1, wake(0, 7));
        mb[0].flush();
        assert_eq!(received(&mut mb[1]), [(0, 7)]);
        assert_eq!(
            mb[0].out[1].ring.as_ref().unwrap().buffer().capacity(),
            RING_MIN
        );
        for _ in 0..=SMALL_RING_IDLE_TRIMS {
            assert!(mb[0].out[1].ring.is_some());
            mb[0].trim();
        }
        assert!(mb[0].out[1].ring.is_none(), "a small ring stays longer");
    }

    #[test]
    fn threads_exchanging_messages_lose_none_and_keep_order() {
        let (_p, mb) = mailboxes(3);
        let n: u64 = 50_000;
        let mut mb = mb.into_iter();
        let (mut rx, tx) = (mb.next().unwrap(), mb.collect::<Vec<_>>());
        let senders: Vec<_> = tx
            .into_iter()
            .map(|mut m| {
                std::thread::spawn(move || {
                    for seq in 0..n {
                        m.send(0, wake(m.me, seq));
                        if seq % 100 == 0 {
                            m.flush();
                        }
                    }
                    while m.flush() {
                        std::thread::yield_now();
                    }
                })
            })
            .collect();
        let mut next = [0u64; 3];
        while next[1] < n || next[2] < n {
            for (from, seq) in received(&mut rx) {
                assert_eq!(seq, next[from as usize], "from {from}");
                next[from as usize] += 1;
            }
            std::thread::yield_now();
        }
        for s in senders {
            s.join().unwrap();
        }
        assert!(received(&mut rx).is_empty());
    }

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

    #[test]
    fn a_gather_sends_once_with_every_output_and_forgets_an_unfinished_step() {
        let out = |v: u32| -> JobOut { Box::new(v) };
        let mut g = Gather::default();
        g.arm(4, 3);
        // Outputs come in any order; only the last one is told to send.
        assert!(!g.add(3, out(30), 0));
        assert!(!g.add(0, out(0), 7));
        assert!(g.add(1, out(10), 0));
        let got: Vec<(u32, u32, u64)> = g
            .outputs()
            .map(|(i, o, aof)| (i, *o.downcast::<u32>().unwrap(), aof))
            .collect();
        assert_eq!(got, vec![(0, 0, 7), (1, 10, 0), (3, 30, 0)]);
        // A step that never completed (a work dropped unanswered): its
        // outputs do not leak into the next one.
        g.arm(2, 2);
        assert!(!g.add(0, out(1), 0));
        g.arm(6, 1);
        assert!(g.add(5, out(50), 0));
        let outs: Vec<u32> = g.outputs().map(|(i, _, _)| i).collect();
        assert_eq!(outs, vec![5]);
    }
}
