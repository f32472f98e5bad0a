//! The transaction layer: atomic, isolated commands across shards.
//!
//! Redis runs every command (and every MULTI/EXEC block) alone because it
//! has one thread. Tessera gets the same guarantee with per-shard intent
//! locks on keys, taken by *transactions* only; single-shard commands take
//! no lock and pay one predictable branch.
//!
//! # Protocol
//!
//! A transaction is a multi-shard keyed command (MSET, MGET, DEL, RENAME
//! ... when their keys span shards), a keyspace-wide write (FLUSHALL,
//! FLUSHDB, SWAPDB) or an EXEC. [`TxCoord`] wraps the command's ordinary
//! coordinator (which only describes work as jobs) and runs it in three
//! phases:
//!
//! 1. **Lock**: a [`LockReq`] per shard (the keys on that shard, each Read
//!    or Write; or the whole shard) is granted at once if it conflicts with
//!    nothing held or queued there, and otherwise either waits in that
//!    shard's FIFO queue (it is not retried and nothing spins; the shard
//!    replies when it grants) or, made [`LockReq::nowait`], is refused at
//!    once. Which requests may wait, and which go together in one round,
//!    is the subject of "One round" and "Out of order" below.
//! 2. **Run** the inner coordinator's steps. Its jobs run on their shards
//!    while every lock is held; the runtime packs one step's jobs into one
//!    message per shard.
//! 3. **Release**, attached to the inner coordinator's last jobs (it marks
//!    that plan [`crate::coord::Plan::last`]), so releasing costs no
//!    message of its own. A transaction whose locks all sit on one shard
//!    sends a single message: lock, run, release (*fused*).
//!
//! This is strict two-phase locking, so transactions are serializable:
//! no job runs before every lock is held (a fused job runs at the last
//! one), and no lock is released before every job ran.
//!
//! **Deadlock** is impossible because of one rule every request keeps: *a
//! request that may wait is made holding locks on lower shards only*
//! (nowait requests never wait, so they need no rule). A waiter waits for
//! holders of its shard or for earlier entries of the same FIFO queue. A
//! holder that waits itself waits at a higher shard (it holds this one, so
//! by the rule its own waiting request is above it); an earlier queue
//! entry waits at the same shard, earlier. So the waits-for relation
//! strictly increases (shard, queue position) and has no cycle.
//! **Starvation** is impossible: queues are FIFO, a request passes a
//! queued one only if they do not conflict, and a transaction refused
//! anywhere goes on in ascending order from there, where it waits its
//! turn.
//!
//! **One round.** Locking one shard after another costs one round trip
//! per shard while the earlier locks are held (a 20-key MGET over 64
//! shards waited on ~20). A transaction over three shards or more (or
//! over two, neither of them its home) instead sends *every request at
//! once*, all nowait: each shard grants or refuses on the spot, and the
//! coordinator goes on when the round's answers are in. All granted: the
//! inner's jobs run and release (the second and last round). Some refused
//! (they hold nothing): in ascending shard order, the locks below the
//! first shard not held stay held, the ones above it are released, that
//! shard is asked again with a request that waits (it holds lower shards
//! only, so it keeps the rule), and once granted, the shards above it are
//! asked together again. Each refusal moves that frontier up by one shard
//! at least, and each wait is in a FIFO queue, so a contended transaction
//! makes progress and never spins: one refusal typically costs two round
//! trips (the wait, the next round), at most one per shard. Transactions in
//! one round, walking in order, or out of order (below) keep the same
//! rule, so they can meet without a deadlock. Global tickets (Dragonfly's
//! VLL, Calvin) would let a request wait in one round too, but a shard
//! cannot know that a smaller ticket is not still in flight without a
//! shared sequencer or a scheduling round of its own; a refusal costs the
//! rare contended transaction a round or two instead.
//!
//! Cost, for a transaction over `k` shards (`k <= min(keys, N)`, `N` the
//! shard count): uncontended, 2 round trips and about `2k` works (the
//! lock round, then job plus release), whatever `k` and `N` (MSET of 10
//! keys on 10 of 32 shards: 2 round trips, 20 works; it was 11 round trips
//! and 19 works in order; see `hops` in the tests; the runtime delivers a
//! work for a shard run by the home's own thread, a hub, by a call
//! instead of a message, so the round trips cost nothing there). Refused: about two
//! more round trips per refusal (at most `k` in all). Two shards, one of them the
//! home, keep the fused forms below (one round trip; two remote shards
//! took three in order). Nothing in the protocol grows with `N` beyond
//! the shards a command touches, except keyspace-wide commands
//! (FLUSHALL, DBSIZE, KEYS, RANDOMKEY, EXEC with any of them), which lock
//! all `N` shards, in one round (2 round trips and `2N` works; they took
//! `N + 1` round trips in order). The per-shard [`LockTable`] holds what
//! is granted and queued there and nothing per other shard: its memory is
//! O(locked keys + waiting requests) whatever `N`; a request costs
//! O(its keys) against the held locks and against a summary of the FIFO
//! queue (`tx_queue`), and a release's pass over the queue O(the queued
//! requests' keys). A plain command pays one branch
//! ([`LockTable::any_held`]) while nothing is held on its shard.
//!
//! **Unlocked.** A runtime that can run a transaction to its end in one
//! go, on shards nothing else touches meanwhile and none of which holds
//! or waits for a lock, may tell it to take none
//! ([`Coordinator::run_unlocked`], after [`Coordinator::lock_shards`]
//! named them): it then skips the lock round and the releases, and runs
//! the inner coordinator's steps as they are. Tessera's runtime does so
//! when every shard is run by the connection's own thread (a hub), as
//! Redis runs every command on its one thread. Such a run pays nothing
//! per shard for the locks it does not take: the [`LockSet`] stays one
//! flat list made at dispatch (an entry per key; for the keyed commands
//! whose coordinators keep their keys, MSET, MGET, DEL, EXISTS ..., only
//! the keys' shards, the keys hashed when locking starts), and the
//! requests per shard are only made when locking starts. Nor does the
//! grouping of the inner's jobs: a plan of one job per shard goes out as
//! it is, and its outputs, the first of the step's, go back to the inner
//! as they come (`TxCoord::direct`), with no layout entry, output slot or
//! second vector per shard (locked or not). What is left per shard a
//! transaction touches is the runtime's (with every shard on one hub: a
//! pin, a visit for the idle check and the keys' prefetch, the job and
//! its epilogue; `server::worker::cohost`) and the job's own: an MSET of
//! 10 keys costs 1.14x the instructions over 32 shards on one hub (about
//! 8.7 shards touched) as over 2, at pipeline 1 (bench/README.md, branch
//! `mset27`, session 25).
//!
//! **Plain commands** (single-shard, no coordinator) never lock. Before a
//! plain command runs on a shard that holds any lock, the runtime asks
//! [`LockTable::blocks`] whether one of its keys is held in a conflicting
//! mode (a write under any lock, anything under a write lock); if so the
//! command is deferred until the next release on that shard, behind the
//! connection's earlier deferred commands, instead of reading a half-done
//! transaction. Deferred commands are retried before queued transactions
//! are granted, so a stream of transactions cannot starve them.
//!
//! A connection that goes away while its transaction is locking releases
//! it ([`crate::coord::Coordinator::abort`]): a release also drops the
//! transaction's request from the wait queue. One that goes away later
//! leaves it to finish (see "Disconnects" below).
//!
//! **Out of order** (two shards). Ordered locking costs a connection whose
//! home shard is the higher of its transaction's two an extra round trip:
//! it must lock the remote shard before its own. A two-shard transaction
//! that locks keys (not whole shards) therefore locks its home shard first
//! (it may wait there, holding nothing), then the lower shard with a
//! [`LockReq::nowait`] request that carries the job and the release
//! (fused, as above), so every such command costs one round trip,
//! whichever its home. The rule holds: the waiting request is made holding
//! nothing. A refused request's job comes back unrun ([`LockConflict`]);
//! the transaction releases its home shard and asks again in ascending
//! order, as after a refusal in one round. Still two-phase: every lock is
//! held before any is released.
//!
//! **Lent at the grant** (`script::lend`). A script's round on lent
//! shards locks whole its home shard and the shards it lends, in order,
//! as any transaction. Over its home shard and a higher one, the other's
//! request is its last, marked [`LockReq::lend`]: granted at once, the
//! other shard's thread lends its shard to the home thread there and
//! then, and answers, so the script's job finds the shard lent instead
//! of asking for it (queued, it is granted later as any request, and the
//! job asks). The lend is made with every lock held; the lending thread
//! waits for the job to take the shard only within a bound, then
//! withdraws it and goes on (the job asks as before): `script::lend`
//! argues why this cannot deadlock. Whichever way a shard was lent, its
//! thread releases the transaction's locks there itself when the job
//! gives it back at the script's end, and the inner coordinator says so
//! ([`Coordinator::released`]): no release goes there.
//!
//! **Disconnects.** A connection that goes away while its transaction is
//! still locking releases what it holds ([`Coordinator::abort`]); once
//! jobs have run or are in flight, the transaction is carried to its end
//! ([`Coordinator::must_finish`]), as Redis finishes a command it read
//! (and its AOF record, written at its last step, is not lost).
//!
//! Compared with Dragonfly's VLL, which orders all transactions by a global
//! id, this needs no shared counter and no out-of-order scheduling: one
//! lock round at any shard count while uncontended, and ordered locking
//! (one round trip per shard) only after a refusal.

use resp::Reply;

use crate::coord::{Coordinator, JobFn, JobOut, Plan, ShardEnv, Work};
use crate::ctx::ClientState;
use crate::error::CmdError;

#[path = "tx_locks.rs"]
mod locks;
pub use locks::{LockReq, LockSet, LockTable, Mode};

/// Names a transaction: unique over the process (the home thread's index
/// in the low bits, a per-home counter above).
pub type TxId = u64;

/// One counter per home shard, each on its own cache line: a shard's
/// event loop may run on another thread for a while (shard
/// consolidation), so a per-thread counter could repeat ids of a home.
#[repr(align(64))]
struct TxCounter(std::sync::atomic::AtomicU64);

static NEXT_TX: [TxCounter; config::MAX_SHARDS as usize] =
    [const { TxCounter(std::sync::atomic::AtomicU64::new(1)) }; config::MAX_SHARDS as usize];

/// A fresh transaction id for a coordinator on thread `home`.
pub fn new_tx_id(home: usize) -> TxId {
    // Only the thread running `home`'s loop takes ids of it: no contention.
    let n = NEXT_TX[home % NEXT_TX.len()]
        .0
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (n << 16) | (home as u64 & 0xffff)
}

/// `tx` as a [`Work::release`] carries it.
pub fn release_of(tx: TxId) -> Option<std::num::NonZeroU64> {
    // INVARIANT: `new_tx_id` counts from 1 above the home's 16 bits.
    debug_assert_ne!(tx, 0, "a transaction id is never 0");
    std::num::NonZeroU64::new(tx)
}

/// The output of a work whose waiting request a shard withdrew because a
/// busy script's transaction holds that shard
/// ([`LockTable::withdraw_for_busy`]): the transaction releases what it
/// holds and answers `line` (Redis's `-BUSY`), as Redis answers every
/// command it had not run when a script went past `busy-reply-threshold`.
/// Its job did not run.
pub struct BusyWithdrawn {
    pub line: String,
}

/// The output of a work whose [`LockReq::nowait`] request was refused:
/// the request and the job, unrun, back to the coordinator.
pub struct LockConflict {
    pub req: LockReq,
    pub job: JobFn,
}

#[derive(Debug, PartialEq, Eq)]
enum Phase {
    Locking,
    Running,
    Releasing,
}

/// Runs an inner coordinator as a transaction; see the module docs.
pub struct TxCoord {
    tx: TxId,
    /// The connection's home shard (out-of-order locking starts there).
    home: usize,
    inner: Box<dyn Coordinator>,
    /// The locks to take, until locking starts and makes them `locks`
    /// ([`TxCoord::prepare_locks`]); dropped unused by a run without locks.
    set: Option<LockSet>,
    /// One request per shard (empty before locking starts).
    locks: Vec<(usize, LockReq)>,
    /// Locks requested so far (a prefix of `locks`).
    requested: usize,
    phase: Phase,
    /// For each work in flight: the inner jobs it carries.
    layout: Vec<Carried>,
    /// Outputs of the inner's current plan, by its job index.
    acc: Vec<Option<JobOut>>,
    /// The works in flight are the inner's plan as it was, one job per
    /// shard at indices `0..n`, then release-only works (see
    /// [`TxCoord::issue`]): the first `n` outputs are the inner's, in its
    /// order, and go to it as they come, with no `layout` or `acc`.
    direct: Option<usize>,
    /// The inner's first plan, computed at the last lock but not fused.
    early: Option<Plan>,
    /// Jobs of a fused last plan still to send once the last shard ran its
    /// part: `(inner index, shard, job)`.
    rest: Option<Vec<(usize, usize, JobFn)>>,
    released: bool,
    err: Option<CmdError>,
    /// One round or out of order: the requests in ascending shard order,
    /// to go on with when a nowait request is refused.
    fallback: Option<Fallback>,
    /// `fallback` is wanted: made when the first requests go out (an
    /// unlocked run never needs it).
    want_fallback: bool,
    /// After a refusal of the fused request: the inner's last plan, grouped
    /// per shard, to send once the locks are held again.
    pending: Option<Vec<Group>>,
    /// The requests from this index of `locks` on go out together, in one
    /// round, each nowait (see "One round" in the module docs); `usize::MAX`
    /// when every request goes alone, in order.
    together_from: usize,
    /// The shard of each lock request sent in the last step, in issue
    /// order (the outputs come back in that order): who refused.
    round: Vec<usize>,
    /// Runs without locks (see `Coordinator::lock_shards`).
    unlocked: bool,
    /// Its requests stay when a busy script holds their shard
    /// ([`LockSet::keep_when_busy`]).
    keep_when_busy: bool,
}

/// A transaction's lock requests as first made, in ascending shard order
/// and waiting (not nowait), kept to go on with after a refusal. Flat: two
/// allocations whatever the number of shards, where a copy of each
/// shard's request cost one each (an MSET of 10 keys over 8 shards made
/// about 7 of them, for a refusal that seldom comes).
#[derive(Default)]
struct Fallback {
    /// Per request: its shard, its whole-shard mode, and the end of its
    /// keys in `keys`.
    shards: Vec<(usize, Option<Mode>, usize)>,
    keys: Vec<(usize, u64, Mode)>,
}

impl Fallback {
    /// Of `locks`: settled requests in ascending shard order, or a
    /// rotation of it (home first, see [`TxCoord::wrap_as`]).
    fn of(locks: &[(usize, LockReq)]) -> Self {
        let mut f = Fallback {
            shards: Vec::with_capacity(locks.len()),
            keys: Vec::with_capacity(locks.iter().map(|(_, r)| r.keys.len()).sum()),
        };
        let n = locks.len();
        let first = (0..n).min_by_key(|&i| locks[i].0).unwrap_or(0);
        for i in (first..n).chain(0..first) {
            let (s, r) = &locks[i];
            debug_assert!(f.shards.last().is_none_or(|&(p, _, _)| p < *s));
            f.keys.extend_from_slice(&r.keys);
            f.shards.push((*s, r.whole, f.keys.len()));
        }
        f
    }

    /// The requests of transaction `tx`, waiting, in ascending shard order.
    fn requests(&self, tx: TxId) -> Vec<(usize, LockReq)> {
        let mut start = 0;
        self.shards
            .iter()
            .map(|&(s, whole, end)| {
                let keys = self.keys[start..end].to_vec();
                start = end;
                (
                    s,
                    LockReq {
                        tx,
                        keys,
                        whole,
                        nowait: false,
                        alone: false,
                        keep_when_busy: false,
                        // Waiting: never lent at a grant.
                        lend: false,
                    },
                )
            })
            .collect()
    }

    fn position(&self, f: impl Fn(usize) -> bool) -> Option<usize> {
        self.shards.iter().position(|&(s, _, _)| f(s))
    }
}

/// One shard's work job for inner jobs, and which inner jobs it carries.
type Group = (usize, JobFn, Carried);

/// The inner jobs one work in flight carries.
#[derive(Clone, Debug)]
enum Carried {
    /// None: a lock- or release-only work.
    Nothing,
    /// One inner job, sent as it is (its output comes back unwrapped).
    One(usize),
    /// Several inner jobs packed into one (their outputs come back as a
    /// `Vec<JobOut>`, in this order).
    Packed(Vec<usize>),
}

impl TxCoord {
    /// Wraps `inner`; with no locks to take the inner runs unwrapped.
    pub fn wrap(home: usize, inner: Box<dyn Coordinator>, set: LockSet) -> Box<dyn Coordinator> {
        if set.is_empty() {
            return inner;
        }
        Self::wrap_as(home, inner, set, new_tx_id(home))
    }

    /// [`TxCoord::wrap`] as transaction `tx` (a script run again over more
    /// keys keeps its id: see `script::wide`); `set` must not be empty.
    /// Its requests are made per shard when locking starts
    /// ([`TxCoord::prepare_locks`]), not here: a run without locks never
    /// needs them.
    pub fn wrap_as(
        home: usize,
        inner: Box<dyn Coordinator>,
        set: LockSet,
        tx: TxId,
    ) -> Box<dyn Coordinator> {
        debug_assert!(!set.is_empty());
        let keep_when_busy = set.keep_when_busy;
        Box::new(TxCoord {
            tx,
            home,
            inner,
            set: Some(set),
            locks: Vec::new(),
            requested: 0,
            phase: Phase::Locking,
            layout: Vec::new(),
            acc: Vec::new(),
            direct: None,
            early: None,
            rest: None,
            released: false,
            err: None,
            fallback: None,
            want_fallback: false,
            pending: None,
            together_from: usize::MAX,
            round: Vec::new(),
            unlocked: false,
            keep_when_busy,
        })
    }

    /// Makes the lock requests, one per shard, and decides how they go out
    /// (in order, out of order or in one round: see the module docs).
    fn prepare_locks(&mut self, mut set: LockSet) {
        if set.is_deferred() {
            set.undefer(&*self.inner);
        }
        let keys_only = set.keys_only();
        let lend = set.lend_at_grant;
        let mut locks = set.requests(self.tx);
        let home = self.home;
        let home_in = locks.iter().any(|(s, _)| *s == home);
        if lend && locks.len() == 2 && locks[0].0 == home {
            // A lend round over its home shard and a higher one (see "Lent
            // at the grant" in the module docs): in order, the other's
            // request last, lent at its grant.
            locks[1].1.lend = true;
        }
        if locks.len() >= 3 || (locks.len() == 2 && !home_in) {
            // One round (see the module docs): every request at once,
            // nowait.
            self.want_fallback = true;
            self.together_from = 0;
            for (_, r) in &mut locks {
                r.nowait = true;
            }
        } else if keys_only && locks.iter().skip(1).any(|(s, _)| *s == home) {
            // Home first (see "Out of order" in the module docs).
            self.want_fallback = true;
            let below = locks.iter().take_while(|(s, _)| *s < home).count();
            locks.rotate_left(below);
            let n = locks.len();
            for (_, r) in &mut locks[n - below..] {
                r.nowait = true;
            }
        }
        self.locks = locks;
    }

    /// Pushes the request for the next lock, alone.
    fn request_next(&mut self, plan: &mut Plan) {
        self.round.clear();
        self.push_request(plan);
    }

    fn push_request(&mut self, plan: &mut Plan) {
        let keep = self.keeps_when_busy();
        let (shard, req) = &mut self.locks[self.requested];
        req.alone = true;
        req.keep_when_busy = keep;
        plan.jobs.push((
            *shard,
            Work {
                lock: Some(std::mem::take(req)),
                job: Self::noop(),
                release: None,
            },
        ));
        self.round.push(*shard);
        self.layout.push(Carried::Nothing);
        self.requested += 1;
    }

    /// Pushes every request not made yet, in one round (all nowait).
    fn request_rest(&mut self, plan: &mut Plan) {
        self.round.clear();
        let n = self.locks.len() - self.requested;
        plan.jobs.reserve(n);
        self.round.reserve(n);
        self.layout.reserve(n);
        while self.requested < self.locks.len() {
            debug_assert!(self.locks[self.requested].1.nowait);
            self.push_request(plan);
        }
    }

    /// Nowait requests (among those of the last step, whose shards
    /// `round` lists) were refused, as `results` say: go on in ascending
    /// shard order from the first shard not held, where requests wait
    /// (see [`TxCoord::restart_without`]).
    fn restart(&mut self, plan: &mut Plan, results: &[JobOut]) {
        let refused: Vec<usize> = self
            .round
            .iter()
            .zip(results)
            .filter(|(_, r)| r.is::<LockConflict>())
            .map(|(s, _)| *s)
            .collect();
        self.restart_without(plan, &refused);
    }

    /// [`TxCoord::restart`] with the refused shards known: in ascending
    /// shard order, the locks below the first shard not held stay held,
    /// those above it are released; that shard is asked again with a
    /// request that waits (holding lower shards only), then the shards
    /// above it (in one round again if there are two or more).
    fn restart_without(&mut self, plan: &mut Plan, refused: &[usize]) {
        // INVARIANT: only out-of-order or one-round transactions make
        // nowait requests, and both keep their requests in order.
        let ascending = self.fallback.as_ref().expect("out-of-order locks");
        let held: Vec<usize> = self.locks[..self.requested]
            .iter()
            .map(|(s, _)| *s)
            .filter(|s| !refused.contains(s))
            .collect();
        let frontier = ascending
            .position(|s| !held.contains(&s))
            .expect("INVARIANT: a refused shard is not held");
        let mut locks = ascending.requests(self.tx);
        for (_, r) in &mut locks[..frontier] {
            // Held: no request to make.
            *r = LockReq::default();
        }
        let n = locks.len();
        self.together_from = usize::MAX;
        if n - frontier > 2 {
            self.together_from = frontier + 1;
            for (_, r) in &mut locks[frontier + 1..] {
                r.nowait = true;
            }
        }
        self.layout.clear();
        for s in held {
            if s > locks[frontier].0 {
                plan.jobs.push((s, self.release_only()));
                self.layout.push(Carried::Nothing);
            }
        }
        self.locks = locks;
        self.requested = frontier;
        self.phase = Phase::Locking;
        let released = plan.jobs.len();
        self.request_next(plan);
        // The outputs of the releases come first: `round` names the
        // request, after them.
        self.round
            .splice(0..0, std::iter::repeat_n(usize::MAX, released));
    }

    /// Whether its requests stay when a busy script holds their shard: an
    /// allow-busy command's, or once its coordinator did what a `-BUSY`
    /// reply cannot take back (EXEC's first step ran a SELECT early).
    fn keeps_when_busy(&self) -> bool {
        self.keep_when_busy || !self.inner.refusable_when_busy()
    }

    /// A waiting request was withdrawn for a busy script
    /// ([`BusyWithdrawn`]): nothing ran (a waiting request's jobs run only
    /// once it is granted), so everything held is released and the
    /// command answers the busy error (the inner's form of it: EXEC's
    /// `EXECABORT`).
    /// `free`: the shards known to hold nothing of it (those that withdrew
    /// or refused a request of the last step): no release goes there (a
    /// busy script's own loop would keep it until the script's end).
    fn withdrawn(&mut self, plan: &mut Plan, line: String, free: &[usize]) -> Result<(), CmdError> {
        let e = self.inner.busy_error(CmdError::Rejected(line));
        self.rest = None;
        self.pending = None;
        self.early = None;
        self.released = true;
        self.layout.clear();
        for &(s, _) in &self.locks[..self.requested] {
            if !free.contains(&s) {
                plan.jobs.push((s, self.release_only()));
                self.layout.push(Carried::Nothing);
            }
        }
        if plan.jobs.is_empty() {
            return Err(e);
        }
        self.err = Some(e);
        self.phase = Phase::Releasing;
        Ok(())
    }

    fn noop() -> JobFn {
        JobFn::noop()
    }

    /// A work that only releases this transaction's locks on its shard.
    fn release_only(&self) -> Work {
        Work {
            lock: None,
            job: Self::noop(),
            release: release_of(self.tx),
        }
    }

    /// Packs several inner jobs of one shard into one job whose output is
    /// their outputs, in order.
    fn packed(jobs: Vec<JobFn>) -> JobFn {
        JobFn::new(move |env: &mut ShardEnv<'_>| {
            let outs: Vec<JobOut> = jobs.into_iter().map(|j| j.call(env)).collect();
            Box::new(outs) as JobOut
        })
    }

    /// Groups `(inner index, shard, job)` by shard, one work's job per
    /// shard: a shard's only job goes as it is (nothing to allocate, box
    /// and unbox: the common case, one job per shard), several are packed.
    fn group(mut jobs: Vec<(usize, usize, JobFn)>) -> Vec<Group> {
        // Stable: a shard's jobs keep their issue order.
        jobs.sort_by_key(|(_, s, _)| *s);
        let mut groups: Vec<Group> = Vec::with_capacity(jobs.len());
        let mut it = jobs.into_iter().peekable();
        while let Some((i, shard, job)) = it.next() {
            if it.peek().is_none_or(|(_, s, _)| *s != shard) {
                groups.push((shard, job, Carried::One(i)));
                continue;
            }
            let (mut idx, mut js) = (vec![i], vec![job]);
            while let Some((i, _, job)) = it.next_if(|(_, s, _)| *s == shard) {
                idx.push(i);
                js.push(job);
            }
            groups.push((shard, Self::packed(js), Carried::Packed(idx)));
        }
        groups
    }

    /// Sends groups of inner jobs, one work per shard; with `release`,
    /// every locked shard not in `skip` without a job gets a release-only
    /// work.
    fn send(&mut self, groups: Vec<Group>, plan: &mut Plan, release: bool, skip: Option<usize>) {
        let rel = if release && !self.unlocked {
            release_of(self.tx)
        } else {
            None
        };
        self.direct = None;
        plan.jobs.reserve(groups.len());
        self.layout.reserve(groups.len());
        for (shard, job, carried) in groups {
            plan.jobs.push((
                shard,
                Work {
                    lock: None,
                    job,
                    release: rel,
                },
            ));
            self.layout.push(carried);
        }
        if release {
            self.release_rest(plan, skip);
        }
    }

    /// With the last jobs in `plan`: a release-only work for every locked
    /// shard not in `skip` that has no job there.
    fn release_rest(&mut self, plan: &mut Plan, skip: Option<usize>) {
        self.released = true;
        for &(s, _) in &self.locks[..self.requested] {
            // (Released by the inner's job already: `Coordinator::released`.)
            if Some(s) != skip
                && !plan.jobs.iter().any(|(js, _)| *js == s)
                && !self.inner.released(s)
            {
                plan.jobs.push((s, self.release_only()));
                self.layout.push(Carried::Nothing);
            }
        }
    }

    /// Issues an inner plan while every lock is held (or none is needed).
    fn issue(&mut self, p: Plan, plan: &mut Plan) {
        self.layout.clear();
        let last = p.last;
        if plan.jobs.is_empty() && p.jobs.windows(2).all(|w| w[0].0 < w[1].0) {
            // One job per shard, ascending (MSET, MGET, DEL ...): the
            // inner's plan goes out as it is, nothing to group, sort or
            // allocate per shard, and its outputs come back as they are
            // (`direct`): no layout entry or output slot per shard.
            let rel = if last && !self.unlocked {
                release_of(self.tx)
            } else {
                None
            };
            *plan = p;
            plan.last = false;
            for (_, w) in &mut plan.jobs {
                debug_assert!(w.lock.is_none() && w.release.is_none());
                w.release = rel;
            }
            self.direct = Some(plan.jobs.len());
            if last {
                self.release_rest(plan, None);
            }
            return;
        }
        self.acc.clear();
        self.acc.resize_with(p.jobs.len(), || None);
        let groups = Self::group(
            p.jobs
                .into_iter()
                .enumerate()
                .map(|(i, (s, w))| (i, s, w.job))
                .collect(),
        );
        self.send(groups, plan, last, None);
    }

    /// Stores packed results into `acc`.
    fn collect(&mut self, results: Vec<JobOut>) {
        // Drained, not taken: the layout keeps its room for the next step.
        for (r, l) in results.into_iter().zip(self.layout.drain(..)) {
            match l {
                Carried::Nothing => {}
                Carried::One(i) => self.acc[i] = Some(r),
                Carried::Packed(idx) => {
                    let outs = *r
                        .downcast::<Vec<JobOut>>()
                        .expect("INVARIANT: packed job output");
                    for (i, o) in idx.into_iter().zip(outs) {
                        self.acc[i] = Some(o);
                    }
                }
            }
        }
    }

    fn release_all(&mut self, plan: &mut Plan) {
        self.released = true;
        for &(s, _) in &self.locks[..self.requested] {
            // (Released by the inner's job already: `Coordinator::released`.)
            if !self.inner.released(s) {
                plan.jobs.push((s, self.release_only()));
            }
        }
        self.layout = vec![Carried::Nothing; plan.jobs.len()];
    }

    /// Feeds `p` (a plan the inner just returned) on: issue it, or finish.
    fn after_inner(&mut self, p: Plan, plan: &mut Plan) {
        if p.jobs.is_empty() {
            if !self.released {
                self.phase = Phase::Releasing;
                self.release_all(plan);
            }
            return;
        }
        debug_assert!(!self.released, "a plan after the last one");
        self.issue(p, plan);
    }

    /// At the last lock: if the inner's first plan is also its last, its
    /// jobs on the last shard go with that lock (lock, run, release in one
    /// message) and the others follow once it ran. True if it did so.
    fn try_fuse(&mut self, p: Plan, plan: &mut Plan) -> bool {
        let n = self.locks.len();
        let shard = self.locks[n - 1].0;
        if !p.last || !p.jobs.iter().any(|(s, _)| *s == shard) {
            self.early = Some(p);
            return false;
        }
        self.direct = None;
        self.acc = (0..p.jobs.len()).map(|_| None).collect();
        let (mut mine, mut rest) = (Vec::with_capacity(1), Vec::with_capacity(p.jobs.len()));
        for (i, (s, w)) in p.jobs.into_iter().enumerate() {
            if s == shard {
                mine.push((i, s, w.job));
            } else {
                rest.push((i, s, w.job));
            }
        }
        let keep = self.keeps_when_busy();
        let mut req = std::mem::take(&mut self.locks[n - 1].1);
        req.keep_when_busy = keep;
        // INVARIANT: `mine` holds jobs of one shard: one group.
        let (_, job, carried) = Self::group(mine).pop().expect("the last shard's jobs");
        plan.jobs.push((
            shard,
            Work {
                lock: Some(req),
                job,
                release: release_of(self.tx),
            },
        ));
        self.layout.clear();
        self.layout.push(carried);
        self.requested = n;
        self.rest = Some(rest);
        self.phase = Phase::Running;
        true
    }
}

impl Coordinator for TxCoord {
    fn step(
        &mut self,
        results: Vec<JobOut>,
        plan: &mut Plan,
        out: &mut Reply,
        client: &mut ClientState,
    ) -> Result<(), CmdError> {
        match self.phase {
            Phase::Locking if self.unlocked => {
                // Nothing to lock: the inner's first plan goes out now.
                self.phase = Phase::Running;
                let mut p = Plan::default();
                self.inner.step(Vec::new(), &mut p, out, client)?;
                self.after_inner(p, plan);
                Ok(())
            }
            Phase::Locking => {
                if let Some(set) = self.set.take() {
                    self.prepare_locks(set);
                }
                if std::mem::take(&mut self.want_fallback) {
                    // The requests as made, in ascending shard order,
                    // before any goes out.
                    self.fallback = Some(Fallback::of(&self.locks));
                }
                if let Some(w) = results
                    .iter()
                    .find_map(|r| r.downcast_ref::<BusyWithdrawn>())
                {
                    let line = w.line.clone();
                    let free: Vec<usize> = self
                        .round
                        .iter()
                        .zip(&results)
                        .filter(|(_, r)| r.is::<BusyWithdrawn>() || r.is::<LockConflict>())
                        .map(|(s, _)| *s)
                        .collect();
                    return self.withdrawn(plan, line, &free);
                }
                if results.iter().any(|r| r.is::<LockConflict>()) {
                    self.restart(plan, &results);
                    return Ok(());
                }
                let n = self.locks.len();
                if self.requested == self.together_from {
                    self.layout.clear();
                    self.request_rest(plan);
                    return Ok(());
                }
                if self.requested == n - 1
                    && self.early.is_none()
                    && self.pending.is_none()
                    && !self.inner.first_step_needs_locks()
                {
                    // The inner's first step sees no shard data, so it may
                    // run before the last lock is granted.
                    let mut p = Plan::default();
                    if let Err(e) = self.inner.step(Vec::new(), &mut p, out, client) {
                        if self.requested == 0 {
                            return Err(e);
                        }
                        self.err = Some(e);
                        self.phase = Phase::Releasing;
                        self.release_all(plan);
                        return Ok(());
                    }
                    if p.jobs.is_empty() {
                        // Finished without touching a shard.
                        if self.requested > 0 {
                            self.phase = Phase::Releasing;
                            self.release_all(plan);
                        }
                        return Ok(());
                    }
                    if self.try_fuse(p, plan) {
                        return Ok(());
                    }
                }
                if self.requested < n {
                    self.layout.clear();
                    self.request_next(plan);
                    return Ok(());
                }
                self.phase = Phase::Running;
                if let Some(groups) = self.pending.take() {
                    self.layout.clear();
                    self.send(groups, plan, true, None);
                    return Ok(());
                }
                let p = match self.early.take() {
                    Some(p) => p,
                    None => {
                        // Not run early (`first_step_needs_locks`).
                        let mut p = Plan::default();
                        if let Err(e) = self.inner.step(Vec::new(), &mut p, out, client) {
                            self.err = Some(e);
                            self.phase = Phase::Releasing;
                            self.release_all(plan);
                            return Ok(());
                        }
                        p
                    }
                };
                self.after_inner(p, plan);
                Ok(())
            }
            Phase::Running => {
                if self.rest.is_some() {
                    let w = results
                        .first()
                        .and_then(|r| r.downcast_ref::<BusyWithdrawn>());
                    if let Some(w) = w {
                        // The fused request, withdrawn: its job did not run.
                        let line = w.line.clone();
                        let shard = self.locks[self.requested - 1].0;
                        return self.withdrawn(plan, line, &[shard]);
                    }
                }
                if self.rest.is_some() && results.first().is_some_and(|r| r.is::<LockConflict>()) {
                    // The fused request was refused: its job comes back unrun.
                    let refused = results.into_iter().next().expect("the fused output");
                    // INVARIANT: checked just above.
                    let c = refused.downcast::<LockConflict>().expect("a conflict");
                    let carried = std::mem::take(&mut self.layout).pop();
                    let shard = self.locks[self.requested - 1].0;
                    let mut groups = vec![(shard, c.job, carried.unwrap_or(Carried::Nothing))];
                    groups.extend(Self::group(self.rest.take().unwrap_or_default()));
                    self.pending = Some(groups);
                    self.restart_without(plan, &[shard]);
                    return Ok(());
                }
                let inner_results = match self.direct.take() {
                    Some(n) => {
                        // Issued as the inner's plan (`issue`): its
                        // outputs first, then the releases'.
                        self.layout.clear();
                        let mut inner_results = results;
                        inner_results.truncate(n);
                        inner_results
                    }
                    None => {
                        self.collect(results);
                        if let Some(rest) = self.rest.take() {
                            let last_shard = self.locks[self.locks.len() - 1].0;
                            let groups = Self::group(rest);
                            if !groups.is_empty() || self.locks.len() > 1 {
                                self.send(groups, plan, true, Some(last_shard));
                                if !plan.jobs.is_empty() {
                                    return Ok(());
                                }
                            }
                            self.released = true;
                        }
                        // Sized at once: collected from a flattening
                        // iterator it grew (and moved) twice for ten
                        // outputs.
                        let mut inner_results: Vec<JobOut> = Vec::with_capacity(self.acc.len());
                        inner_results.extend(self.acc.drain(..).flatten());
                        inner_results
                    }
                };
                let mut p = Plan::default();
                if let Err(e) = self.inner.step(inner_results, &mut p, out, client) {
                    if self.released || self.unlocked {
                        return Err(e);
                    }
                    self.phase = Phase::Releasing;
                    self.release_all(plan);
                    if plan.jobs.is_empty() {
                        // Every shard released by the inner's job.
                        return Err(e);
                    }
                    self.err = Some(e);
                    return Ok(());
                }
                if p.jobs.is_empty() && self.released {
                    return Ok(());
                }
                self.after_inner(p, plan);
                Ok(())
            }
            Phase::Releasing => {
                drop(results);
                match self.err.take() {
                    Some(e) => Err(e),
                    None => Ok(()),
                }
            }
        }
    }

    fn parked(&mut self) -> Option<crate::coord::Parked> {
        self.inner.parked()
    }

    fn take_records(&mut self) -> Vec<engine::outbox::Chunk> {
        self.inner.take_records()
    }

    fn kept_args(&self) -> Option<resp::Args<'_>> {
        self.inner.kept_args()
    }

    fn drain_stats(&mut self, stats: &mut crate::ctx::ThreadStats) {
        self.inner.drain_stats(stats);
    }

    fn tx_id(&self) -> Option<TxId> {
        Some(self.tx)
    }

    /// Jobs ran or are in flight: the command must be carried to its end,
    /// as Redis runs a command it read whatever the client does next. In
    /// particular the other shards' part of a fused command must not run
    /// before the fused part: its request may still wait (or, nowait, be
    /// refused), and another transaction that holds that shard could then
    /// take the released keys out of order and see half the command. And
    /// once released, the last step still makes the command's record
    /// (`propagate::as_received`).
    fn must_finish(&self) -> bool {
        self.phase == Phase::Running
    }

    fn first_step_needs_locks(&self) -> bool {
        self.inner.first_step_needs_locks()
    }

    fn lock_shards(&self, out: &mut Vec<usize>) -> bool {
        match &self.set {
            Some(set) if self.phase == Phase::Locking && !self.unlocked => {
                set.shards_into(out);
                true
            }
            _ => false,
        }
    }

    fn run_unlocked(&mut self) {
        debug_assert!(self.phase == Phase::Locking && self.requested == 0);
        self.unlocked = true;
        self.set = None;
    }

    /// Only while locking (nothing ran) or releasing after an error: see
    /// `must_finish`.
    fn abort(&mut self, plan: &mut Plan) {
        debug_assert!(
            !self.must_finish(),
            "abort of a transaction that must finish"
        );
        if self.released || self.requested == 0 {
            return;
        }
        for &(s, _) in &self.locks[..self.requested] {
            plan.jobs.push((s, self.release_only()));
        }
        self.released = true;
    }
}

#[cfg(test)]
#[path = "tx_tests.rs"]
mod tests;
