//! Co-hosted shards: a coordinator's jobs for a shard whose worker runs on
//! the same thread (a hub holding both, see `server::host`) run at once, in
//! a direct call, instead of as a message and its reply.
//!
//! Why: with every shard on one hub, an MSET of 10 keys over 32 shards is
//! a transaction over about 9 shards; through the mailbox that is ~38
//! messages (a lock round and a run round, each a message out and a reply
//! back per shard), each a ring push and pop, a dispatch, a completion and
//! a coordinator step, and the second half of each round waits for the
//! next hub round. The shard's work itself is the same either way.
//!
//! How: whoever runs several workers on one thread (a hub's round, the
//! in-process tests' `Cluster::round`) installs a [`Lender`] for the
//! round ([`lending`]). A coordinator's step (`home::advance`) hands each
//! job for another shard to [`with_worker`]: if the lender holds that
//! worker and it is not the one running, the job is delivered by calling
//! that worker's own shard side (`Worker::run_lent_job`: the same
//! `job_arrived` a message would reach), and its output comes straight
//! back if it ran to its end (its locks granted at once); a job that waits
//! (a lock queued, a deferred batch ahead of it) stays there, and its
//! output goes home by the mailbox later, as any job's. Once every output
//! of a step is in, the coordinator steps again in the same call.
//!
//! Nothing of the transaction protocol changes (`commands::tx`): the same
//! lock requests, in the same order, reach the same lock tables; only
//! their delivery is earlier. Order: a job must not overtake what its
//! connection sent the same shard before it, so a coordinator lends only
//! while it is its connection's oldest outstanding request (every earlier
//! batch is back), and a step only goes out once the previous one's
//! outputs are all in. Another connection's message still in a ring is
//! overtaken, which is the same as it arriving later: neither client has
//! its reply yet.
//!
//! Re-entry: while a lent worker runs, no other is lent ([`with_worker`]
//! takes the lender out for the call), so a lent worker never reaches back
//! into the one that called it (which is borrowed up the stack). One
//! exception, [`with_worker_open`]: while a script runs on a lent worker,
//! its busy passes may reach a hub's idle own loop; every worker but the
//! one running the script stays lendable then (the caller never is: its
//! turn holds it), each with the lender taken out again. Narrower,
//! [`with_worker_for_scripts`]: a transaction's job that may run a script
//! (an EXEC's) is lent as by [`with_worker`], but that script's busy
//! passes may still reach the hub's idle own loop ([`with_idle_worker`]).
//! A hub's
//! adopted workers are lent under their seat's lock (`try_lock`: the one
//! running holds its own, and the watchdog may hold one), so the watchdog
//! never takes a worker back in the middle of a lent job.
//!
//! Single-shard commands (`request::execute`, `Worker::run_lent_command`):
//! a command whose keys are all on a co-hosted shard, from a connection
//! with nothing outstanding (so nothing of it is overtaken, and its reply
//! goes straight to its output), runs on that shard by a call, with a
//! batch's epilogue, when the shard is free as below and the command
//! does not block. A pipelined SETBIT over two shards on one hub cost
//! 2,972 instructions through a batch and 2,526 by a call (callgrind; one
//! shard alone: 2,372). A script runs so with what a long script needs
//! (`in_place::by_call`): the lent worker's desk and inbox, the caller's
//! loop lent as an idle one, and [`with_worker_open`] (below).
//!
//! Unlocked transactions (`home::run_unlocked`): when every shard a keyed
//! multi-shard command would lock is this worker's or lent to it, and
//! none holds a lock, has a request waiting for one or holds work back,
//! the command needs no lock at all: its shards are pinned ([`pin_workers`]:
//! a hub holds their seats until it ends), so nothing else runs on them,
//! and every job of every step runs by a call, the home shard's too (on
//! its `Core`, [`NoClients`]: a keyed command's jobs never look at
//! clients). The pin gives the worker's address ([`Pinned`]): the idle
//! check and every job then run on it directly, inside one [`visit`] per
//! step (the lender taken out once, so no worker is lent meanwhile), with
//! no lend, lookup or closure per call. That is how Redis runs a command, on one thread; with every
//! shard on one hub it skips the lock round, the releases and the lock
//! tables altogether. Excluded: EXEC (its queued commands may look at
//! clients, and WATCH), scripts, blocking commands, and shards with an AOF
//! or replica stream (the locked path assembles a transaction's records
//! into one MULTI/EXEC block).
//!
//! What a lent worker picks up first, as its own turn would: a CONFIG SET
//! since its last turn (`refresh_config`), and the caller's clock if its
//! own is older.
//!
//! What the lent worker owes its own loop afterwards: its messages are
//! flushed at once (it may not take a turn this round), and anything it
//! queued for itself (a resumed connection, a local job) makes it due in
//! the next round (`Worker::due_in`).
//!
//! Cost: one thread-local read per job for another shard; on a thread
//! alone with its worker no lender is installed and nothing else runs.
//! Per job lent, a seat `try_lock` (two atomics) instead of a ring push,
//! a pop and a reply message.
//!
//! How an unlocked transaction's cost grows with the shards it touches
//! (`k`, about 8.7 for 10 random keys over 32 shards, 2 over 2), never
//! with the shard count itself: per shard, a pin (a seat's lock; every
//! shard's in one call to the lender, `Lender::pin_each`) and the idle
//! check (one line while the shard is known free: `Core::maybe_busy`; every
//! shard's in one visit, `home::each_core`),
//! the job (its closure held inline, no allocation: `coord::JobFn`), and
//! the epilogue of [`run_job_now`] (the dirty count published; tracking
//! and events, a branch each while off; the ready check, one line while
//! no client may wait: `Core::may_wait`; the mailbox flushed only if the
//! job sent something). With 32 shards on one hub each visit finds its
//! worker cold: what a visit reads leads `Core`, `engine::Shard` and
//! `engine::Db` (see their docs), and workers' state is spread over the
//! cache's sets (`Worker::color`). Measured with callgrind
//! (`bench/mset_callgrind.sh`, MSET of 10 keys, every shard on one hub,
//! pipeline 1): 39.6k instructions and 230 D1 read misses per MSET at 32
//! shards against 34.6k and 84 at 2 (1.15x; before the cuts of mset27b
//! 40.5k and 286, 1.17x; before the visit and the layouts 42.8k and 390
//! against 34.7k and 87, 1.23x; see bench/README, "One visit per
//! co-hosted shard" and "What a visit reads, continued"). With the
//! benchmark's own workload (`BENCH_WORKLOAD=tx`, pipeline 16): 36.5k
//! against 31.6k (1.155x; 38.7k against 31.8k, 1.22x, before the pins in
//! one call, one visit for the checks and the jobs' calls inlined: bench/
//! README, "A cheaper shard visit"); at pipeline 1, 36.1k against 31.7k
//! (1.14x; 38.2k against 32.8k, 1.165x, before `tx::TxCoord`'s outputs
//! went back as they came, MSET's jobs found their pairs from the last
//! one's end and `Worker::run_unlocked_job` was inlined always: bench/
//! README, "MSET of 10 keys at 32 consolidated shards").

use std::cell::Cell;
use std::ptr::NonNull;

use commands::coord::{JobOut, Work};

use super::super::mailbox::ConnRef;
use super::{tracking, Core, Worker};

/// Gives access to the workers a thread holds, one at a time.
pub trait Lender {
    /// Runs `f` on worker `id` if this lender holds it and it is not
    /// running now; false (with `f` not run) otherwise.
    fn lend(&self, id: usize, f: &mut dyn FnMut(&mut Worker)) -> bool;
    /// Keeps worker `id` lendable, and on this thread, until
    /// [`Lender::unpin_all`] (a hub holds its seat's lock meanwhile), and
    /// gives its address, valid until then; `None` if it cannot be lent
    /// now.
    fn pin(&self, id: usize) -> Option<NonNull<Worker>>;
    /// [`Lender::pin`] for each of `ids` but `skip` (the caller's own),
    /// each pushed to `out` with its worker, in the order given; false
    /// at the first that cannot be lent (those before it stay pinned
    /// until [`Lender::unpin_all`]). An unlocked transaction's shards in
    /// one call: a hub's pins then share one look at what it holds
    /// pinned already, and a call, instead of paying both per shard.
    fn pin_each(&self, ids: &[usize], skip: usize, out: &mut Vec<(usize, Pinned)>) -> bool {
        for &id in ids {
            if id == skip {
                continue;
            }
            let Some(w) = self.pin(id) else {
                return false;
            };
            out.push((id, Pinned(w)));
        }
        true
    }
    fn unpin_all(&self);
    /// Lends the hub's own worker, idle in this round, to the thread of
    /// the loop running now, for a long script's duration (see
    /// `host::loan`); true if it is lent (now or already).
    fn loan_own(&self) -> bool {
        false
    }
}

/// A worker pinned for an unlocked transaction ([`pin_workers`]), reached
/// without the lender: one seat lock per shard for the whole transaction,
/// and no lookup per call. Only ever held on the pinning thread between
/// the pin and [`unpin_all`] (`Core::unlocked` is emptied before that).
pub struct Pinned(NonNull<Worker>);

// SAFETY: a `Pinned` never leaves the thread that pinned it while it is
// held (see the type's docs); it is `Send` only so that the `Core` that
// keeps the (empty) list between transactions stays `Send`.
unsafe impl Send for Pinned {}

impl Pinned {
    /// Worker `w`, which a [`Lender`] has just pinned (see
    /// [`Lender::pin_each`]).
    pub(in crate::server) fn new(w: NonNull<Worker>) -> Pinned {
        Pinned(w)
    }

    /// The pinned worker.
    ///
    /// # Safety
    /// Only inside [`visit`] (no worker is lent meanwhile, so no other
    /// reference to it exists), before [`unpin_all`], and not while
    /// another `&mut` from this `Pinned` is alive.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn worker(&self) -> &mut Worker {
        // SAFETY: see the function's contract; the seat's lock (or the
        // hub's round, for its own worker) keeps the worker in place.
        unsafe { &mut *self.0.as_ptr() }
    }
}

thread_local! {
    static LENDER: Cell<Option<*const (dyn Lender + 'static)>> = const { Cell::new(None) };
}

/// Runs `f` with `l` installed as this thread's lender.
pub fn lending<R>(l: &dyn Lender, f: impl FnOnce() -> R) -> R {
    struct Reset(Option<*const (dyn Lender + 'static)>);
    impl Drop for Reset {
        fn drop(&mut self) {
            LENDER.set(self.0);
        }
    }
    let ptr: *const (dyn Lender + '_) = l;
    // SAFETY: only the lifetime is erased; the pointer is removed (by
    // `Reset`, also on unwinding) before `l`'s borrow ends, and only
    // dereferenced inside `f` (in `with_worker`).
    let ptr: *const (dyn Lender + 'static) = unsafe { std::mem::transmute(ptr) };
    let _reset = Reset(LENDER.replace(Some(ptr)));
    f()
}

/// Runs `f` on co-hosted worker `id`, if the installed lender holds it and
/// it is free; `home` is the calling worker (its shard's allocation
/// accounting is restored after the call). While `f` runs no worker is
/// lent (no re-entry).
pub(super) fn with_worker<R>(
    id: usize,
    home: usize,
    f: impl FnOnce(&mut Worker) -> R,
) -> Option<R> {
    let l = LENDER.take()?;
    struct Put(*const (dyn Lender + 'static));
    impl Drop for Put {
        fn drop(&mut self) {
            LENDER.set(Some(self.0));
        }
    }
    let _put = Put(l);
    // SAFETY: installed by `lending`, whose scope encloses this call (the
    // pointer is removed when it ends).
    lend_once(unsafe { &*l }, id, home, f)
}

/// Runs `f` once on worker `id` through `lender` (`None`: not lent), then
/// restores the allocation accounting of `home`, the calling worker.
fn lend_once<R>(
    lender: &dyn Lender,
    id: usize,
    home: usize,
    f: impl FnOnce(&mut Worker) -> R,
) -> Option<R> {
    let (mut f, mut r) = (Some(f), None);
    lender.lend(id, &mut |w| {
        if let Some(f) = f.take() {
            r = Some(f(w));
        }
    });
    engine::alloc::enter_shard(home);
    r
}

/// [`with_worker`] for a script run on worker `id` by a call (see
/// `in_place::by_call`): while `f` runs, the other workers the lender
/// holds stay lendable (never `id`, which `f` holds), for the busy passes
/// of that script, which serve a hub's idle own loop through this module
/// (`busy::lending_own`). No other re-entry is possible: `f` runs one
/// shard's commands (a script's `redis.call`s run on its own shard), the
/// worker running the caller is never lendable (its turn holds it), and a
/// worker lent from inside is lent with the lender taken out again.
pub(super) fn with_worker_open<R>(
    id: usize,
    home: usize,
    f: impl FnOnce(&mut Worker) -> R,
) -> Option<R> {
    /// The thread's lender, but for worker `lent`; pins nothing.
    struct Except {
        inner: *const (dyn Lender + 'static),
        lent: usize,
    }
    impl Lender for Except {
        fn lend(&self, id: usize, f: &mut dyn FnMut(&mut Worker)) -> bool {
            // SAFETY: installed by the `lending` that encloses the
            // `with_worker` this runs inside.
            id != self.lent && unsafe { &*self.inner }.lend(id, f)
        }
        fn pin(&self, _id: usize) -> Option<std::ptr::NonNull<Worker>> {
            None
        }
        fn unpin_all(&self) {}
        // `loan_own`: never (the default). The worker `f` holds may be
        // the hub's own; and a run by a call is taken back before it is
        // published, so it has no busy pass to lend it from.
    }
    let inner = LENDER.get()?;
    with_worker(id, home, |w| {
        let except = Except { inner, lent: id };
        lending(&except, || f(w))
    })
}

thread_local! {
    /// The lender [`with_worker_for_scripts`] took out for a job that may
    /// run a script, and that job's worker: reached by the busy passes of
    /// that script only ([`with_idle_worker`]).
    static IDLE_LENDER: Cell<Option<(*const (dyn Lender + 'static), usize)>> =
        const { Cell::new(None) };
}

/// [`with_worker`] for a transaction's job that may run a script (an
/// EXEC's, or a script's own: `busy::JobDesk` lends it the loop): while
/// `f` runs no worker is lent to anything, as in [`with_worker`], but
/// the busy passes of a script it runs may reach a hub's idle own loop
/// ([`with_idle_worker`]; never worker `id`, which `f` holds, nor the
/// caller, whose turn holds it), to serve its clients as the passes of
/// a script run by a call do ([`with_worker_open`], which keeps every
/// worker lendable for the whole call instead: a job's epilogue may
/// step other coordinators, which must not lend workers meanwhile).
pub(super) fn with_worker_for_scripts<R>(
    id: usize,
    home: usize,
    f: impl FnOnce(&mut Worker) -> R,
) -> Option<R> {
    let inner = LENDER.get()?;
    let _restore = RestoreIdle(IDLE_LENDER.replace(Some((inner, id))));
    with_worker(id, home, f)
}

/// Runs `f` on idle co-hosted worker `id` for a busy pass (a hub's own
/// loop, `busy::lending_own`): through the installed lender if there is
/// one ([`with_worker`]), else through the one a job lent by
/// [`with_worker_for_scripts`] took out, unless `id` is that job's
/// worker. `None` (not run) otherwise.
pub(super) fn with_idle_worker<R>(
    id: usize,
    home: usize,
    f: impl FnOnce(&mut Worker) -> R,
) -> Option<R> {
    if LENDER.get().is_some() {
        return with_worker(id, home, f);
    }
    let (l, lent) = IDLE_LENDER.get()?;
    if id == lent {
        return None;
    }
    // Taken out while `f` runs: nothing reaches another worker from it.
    let _restore = RestoreIdle(IDLE_LENDER.take());
    // SAFETY: installed by `lending`, whose scope encloses the
    // `with_worker_for_scripts` call this runs inside (it put the pointer
    // here, and takes it away before returning). The lender lends a
    // worker inside another's lend (`with_worker_open` relies on it too).
    lend_once(unsafe { &*l }, id, home, f)
}

/// Puts back [`IDLE_LENDER`]'s value when dropped (also on unwinding).
struct RestoreIdle(Option<(*const (dyn Lender + 'static), usize)>);

impl Drop for RestoreIdle {
    fn drop(&mut self) {
        IDLE_LENDER.set(self.0);
    }
}

/// Whether workers are lent to this thread's calls now (it runs other
/// workers' loops: a hub's round).
pub(super) fn lending_here() -> bool {
    LENDER.get().is_some()
}

/// Pins worker `id` for a script in place (see `in_place`): false if
/// there is no lender or it cannot lend that worker.
pub(super) fn pin(id: usize) -> bool {
    // SAFETY: as in `with_worker`.
    LENDER
        .get()
        .is_some_and(|l| unsafe { &*l }.pin(id).is_some())
}

/// Pins the workers of `ids` but `home` (the caller's) for an unlocked
/// transaction (see `home::run_unlocked`) and pushes them to `out` with
/// their shards, in the order of `ids`, for calls inside [`visit`]; false
/// if there is no lender or it cannot lend one of them (those pinned
/// before it stay so until [`unpin_all`]).
pub(super) fn pin_workers(ids: &[usize], home: usize, out: &mut Vec<(usize, Pinned)>) -> bool {
    let Some(l) = LENDER.get() else {
        return false;
    };
    // SAFETY: as in `with_worker`.
    unsafe { &*l }.pin_each(ids, home, out)
}

/// Runs `f`, which calls pinned workers ([`Pinned::worker`]), with no
/// worker lent meanwhile (no re-entry, as in [`with_worker`]); `home`
/// is the calling worker (its shard's allocation accounting is restored
/// after the call). One lender take and put for every call `f` makes.
pub(super) fn visit<R>(home: usize, f: impl FnOnce() -> R) -> R {
    struct Put(Option<*const (dyn Lender + 'static)>, usize);
    impl Drop for Put {
        fn drop(&mut self) {
            LENDER.set(self.0);
            engine::alloc::enter_shard(self.1);
        }
    }
    let _put = Put(LENDER.take(), home);
    f()
}

/// Lends the hub's own worker away for a long script (see
/// [`Lender::loan_own`]); false if there is no lender or it cannot.
pub(super) fn loan_own() -> bool {
    // SAFETY: as in `with_worker`.
    LENDER.get().is_some_and(|l| unsafe { &*l }.loan_own())
}

/// Lets go of every pinned worker.
pub(super) fn unpin_all() {
    if let Some(l) = LENDER.get() {
        // SAFETY: as in `with_worker`.
        unsafe { &*l }.unpin_all();
    }
}

/// What a job run without its connection's worker sees of connections:
/// none. Only for the jobs of keyed multi-key commands (see
/// `home::run_unlocked`), which never look at clients.
pub(super) struct NoClients;

impl commands::coord::ClientRegistry for NoClients {
    fn for_each(&self, _f: &mut dyn FnMut(&commands::ClientState, &commands::coord::ClientIo)) {}
    fn kill(&mut self, _id: u64) -> bool {
        false
    }
}

/// Runs a job of an unlocked transaction (see `home::run_unlocked`) on
/// `core`'s shard, now, with the epilogue `Worker::run_work` gives a job:
/// tracking, the dirty count, keyspace events, blocked clients served.
/// No lock, no waiter, no AOF record (unlocked transactions run where
/// there is no AOF). Its output, and whether it may have sent messages
/// (it served blocked clients, whose replies go home by the mailbox):
/// nothing else it does sends one. Inlined: it runs once per shard an
/// unlocked transaction touches, where a call's saves and restores were
/// a tenth of its own cost.
#[inline(always)]
pub(super) fn run_job_now(
    core: &mut Core,
    clients: &mut dyn commands::coord::ClientRegistry,
    conn: ConnRef,
    job: commands::coord::JobFn,
) -> (JobOut, bool) {
    tracking::track_check(core);
    let restore = super::shard::hide_expired(&core.server, &mut core.shard, conn);
    let out = job.call(&mut commands::coord::ShardEnv {
        shard: &mut core.shard,
        stats: &mut core.stats,
        clients,
    });
    if let Some(mode) = restore {
        core.shard.expiry = mode;
    }
    tracking::tag_touched(core, Some(tracking::home_of(conn)));
    core.publish_dirty();
    super::pubsub::publish_events(core);
    // A key is only marked ready while a client of this shard waits for
    // it: with none waiting (nearly always), one load instead of a look
    // at every database. Anything marked before the last waiter left is
    // only ever dropped (`serve_ready` with no waiters), here or at the
    // shard's next look.
    let served = core.may_have_waiters() && core.shard.dbs.iter().any(|d| d.has_ready());
    if served {
        super::waiters::serve_ready(core);
    }
    (out, served)
}

impl Core {
    /// Whether an unlocked transaction may run on this shard now: no lock
    /// held or asked for, nothing held back for one, no AOF or replica
    /// stream (their records of a transaction go out as one block, which
    /// the locked path assembles). One line read while `maybe_busy` is
    /// clear (see the field); otherwise the lists themselves, and the
    /// flag cleared if they are all empty.
    #[inline]
    pub(super) fn idle_for_unlocked(&mut self) -> bool {
        if !self.maybe_busy {
            debug_assert!(self.idle_in_full(), "maybe_busy clear on a busy shard");
            return true;
        }
        let idle = self.idle_in_full();
        self.maybe_busy = !idle;
        idle
    }

    /// [`Core::idle_for_unlocked`] from the lists themselves.
    fn idle_in_full(&self) -> bool {
        !self.locks.any_held()
            && self.locks.waiting_len() == 0
            && self.deferred.is_empty()
            && self.lock_blocked.is_empty()
            && self.aof.is_none()
            && !self.shard.outbox.records_on
    }

    /// Whether a client may wait on this shard's keys: `may_wait`'s line
    /// while it is clear (see the field), else the waiters' own, and
    /// the flag cleared if there are none.
    #[inline]
    pub(super) fn may_have_waiters(&mut self) -> bool {
        if !self.may_wait {
            debug_assert!(self.waiters.is_empty(), "may_wait clear with waiters");
            return false;
        }
        self.may_wait = !self.waiters.is_empty();
        self.may_wait
    }
}

impl Worker {
    /// A job of an unlocked transaction whose home is another worker on
    /// this thread: run now ([`run_job_now`]) on this worker, shard
    /// `shard` (the caller's to say: one cache line fewer to read per
    /// shard visited), after what this worker's turn would have picked up
    /// first (see `run_lent_job`). Inlined into the visit that runs a
    /// step's jobs (`home::run_plan_unlocked`): it runs once per shard an
    /// unlocked transaction touches, and a call's saves and restores were
    /// about 20 of its instructions.
    #[inline(always)]
    pub(super) fn run_unlocked_job(
        &mut self,
        shard: usize,
        conn: ConnRef,
        work: Work,
        now_ms: u64,
    ) -> JobOut {
        debug_assert_eq!(shard, self.core.id);
        engine::alloc::enter_shard(shard);
        self.refresh_config();
        self.core.shard.now_ms = self.core.shard.now_ms.max(now_ms);
        debug_assert!(work.lock.is_none() && work.release.is_none());
        let (out, sent) = run_job_now(&mut self.core, &mut self.conns, conn, work.job);
        // This worker may sit this round out: what it sent goes now. Only
        // if it sent anything: the mailbox is one more cache line per
        // shard visited.
        if sent {
            self.spilled |= self.core.mailbox.flush();
        }
        out
    }

    /// A single-shard command of a connection whose worker runs on this
    /// thread, run here now by a call instead of a batch and its reply
    /// (see `request::execute`), with the epilogue a batch gets
    /// (`run_batch`): blocked clients served, tracking, the dirty count,
    /// keyspace events, the memory figure. False, with nothing run, unless
    /// this shard is free as for an unlocked transaction
    /// ([`Worker::idle_for_unlocked`]: no lock, nothing held back, no AOF
    /// or replica stream) and keeps no memory limit (a hop may first wait
    /// for the other shards to evict). Only for commands that neither
    /// block nor run scripts: their reply goes to `out` in full.
    pub(super) fn run_lent_command(
        &mut self,
        conn: ConnRef,
        (resolved, handler): (commands::Resolved, commands::table::ShardHandler),
        args: resp::Args<'_>,
        call: commands::exec::ShardCall,
        out: &mut resp::Reply,
        now_ms: u64,
    ) -> bool {
        engine::alloc::enter_shard(self.core.id);
        // What its turn would have picked up first (see `run_lent_job`).
        self.refresh_config();
        if !self.idle_for_unlocked() || self.core.shard.evict.maxmemory != 0 {
            return false;
        }
        self.core.shard.now_ms = self.core.shard.now_ms.max(now_ms);
        tracking::track_check(&mut self.core);
        let db = call.db;
        let block = commands::exec::run_shard(
            resolved,
            handler,
            args,
            &mut self.core.shard,
            call,
            out,
            &mut self.core.stats,
        );
        debug_assert!(block.is_none(), "a lent command blocked");
        if self.core.shard.dbs[db].has_ready() {
            super::waiters::serve_ready(&mut self.core);
        }
        tracking::tag_touched(&mut self.core, Some(tracking::home_of(conn)));
        self.core.publish_dirty();
        self.publish_events();
        self.core.shard.publish_memory();
        // This worker may sit this round out: what it sent goes now.
        self.spilled |= self.core.mailbox.flush();
        true
    }

    /// [`Core::idle_for_unlocked`] of this worker's shard.
    pub(super) fn idle_for_unlocked(&mut self) -> bool {
        self.core.idle_for_unlocked()
    }

    /// A coordinator job from a worker on this thread, delivered by a
    /// call (see the module docs): handled as the `Msg::Job` would be.
    /// Its output and AOF target if it ran to its end now; otherwise it
    /// waits here and its output goes home by the mailbox.
    pub(super) fn run_lent_job(
        &mut self,
        conn: ConnRef,
        idx: u32,
        work: Work,
        now_ms: u64,
    ) -> Option<(JobOut, u64)> {
        engine::alloc::enter_shard(self.core.id);
        // What its turn would have picked up first: a CONFIG SET since
        // (encodings, notifications, LFU), ...
        self.refresh_config();
        // ... and the caller's clock (it ticked at its turn, after this worker's
        // last one): a shard idle for a while must not run on a stale one.
        self.core.shard.now_ms = self.core.shard.now_ms.max(now_ms);
        self.core.lent_job = Some((conn, idx));
        self.job_arrived(conn, idx, work);
        self.core.lent_job = None;
        // This worker may sit this round out: what it sent goes now.
        self.spilled |= self.core.mailbox.flush();
        self.core.lent_out.take()
    }

    /// Where a job's output goes: the connection's coordinator on this
    /// thread, the caller of a lent job (`run_lent_job`), or home by the
    /// mailbox.
    pub(super) fn send_job_out(&mut self, conn: ConnRef, idx: u32, out: JobOut, aof: u64) {
        if conn.thread as usize == self.core.id {
            self.job_done(conn, idx, out, aof);
        } else if self.core.lent_job == Some((conn, idx)) {
            self.core.lent_job = None;
            self.core.lent_out = Some((out, aof));
        } else {
            self.core.mailbox.send(
                conn.thread as usize,
                super::super::mailbox::Msg::JobDone {
                    conn,
                    idx,
                    out,
                    aof,
                },
            );
        }
    }
}
