//! Commands that need more than one shard: the coordinator side.
//!
//! A command whose keys span shards (MGET a b with a and b on different
//! shards), or that needs every shard (DBSIZE, FLUSHALL, KEYS), runs as a
//! [`Coordinator`] on the connection's home thread. The coordinator issues
//! *jobs*: closures that run on one shard's thread with exclusive access to
//! that shard ([`ShardEnv`]) and return a typed value. The runtime delivers
//! a step's jobs (batched per destination, inline for the home shard),
//! collects their outputs in issue order, and calls [`Coordinator::step`]
//! again with them. A step that issues no jobs finishes the command; its
//! reply must be in `out` by then.
//!
//! Isolation: a coordinator here only describes work. Dispatch wraps every
//! keyed multi-shard command in [`crate::tx::TxCoord`], which locks the
//! command's keys on every shard involved before the first job runs and
//! releases them with the last (see `tx` for the protocol). Commands never
//! see the locks; they express their work as jobs and mark their final
//! plan with [`Plan::last`].
//!
//! While a coordinator runs, the connection executes nothing else, so a
//! pipelined client still sees its commands take effect in order.

use std::any::Any;
use std::mem::MaybeUninit;

use engine::Shard;
use resp::Reply;

use crate::ctx::{ClientState, ThreadStats};
use crate::error::CmdError;

/// A job's output: downcast by the coordinator that issued the job.
pub type JobOut = Box<dyn Any + Send>;

/// Work for one shard: a closure, run once ([`JobFn::call`]) with the
/// shard's [`ShardEnv`]. Two words, as a boxed closure: a closure of at
/// most one word (one that captures a single `Arc`, as MSET's jobs, or
/// nothing) is held inline, a larger one in a box. Why: a job per shard
/// a command touches was a `malloc` and a `free` each (about 160
/// instructions under callgrind, 8.7 times per MSET of 10 keys over 32
/// shards), for closures that mostly hold one pointer; and a `Work`
/// stays 64 bytes (see [`Work::release`]).
pub struct JobFn {
    /// The closure itself (inline), or its box.
    data: MaybeUninit<*mut ()>,
    vt: &'static JobVt,
}

/// How to run or drop the closure a [`JobFn`] holds.
struct JobVt {
    /// The closure is in `data` itself (not boxed).
    #[cfg_attr(not(test), allow(dead_code))]
    inline: bool,
    /// Runs the closure, which it moves out of `data`.
    call: unsafe fn(MaybeUninit<*mut ()>, &mut ShardEnv<'_>) -> JobOut,
    /// Drops the closure in `data`.
    drop: unsafe fn(MaybeUninit<*mut ()>),
}

// SAFETY: a `JobFn` is only made from a `Send` closure (`JobFn::new`),
// which it owns.
unsafe impl Send for JobFn {}

impl JobFn {
    /// Takes `f`: inline if it fits a word (size and alignment), boxed
    /// otherwise.
    pub fn new<F>(f: F) -> JobFn
    where
        F: FnOnce(&mut ShardEnv<'_>) -> JobOut + Send + 'static,
    {
        if JobImpl::<F>::INLINE {
            let mut data = MaybeUninit::<*mut ()>::uninit();
            // SAFETY: `F` fits the slot (`INLINE`), which is ours.
            unsafe { data.as_mut_ptr().cast::<F>().write(f) };
            JobFn {
                data,
                vt: &JobImpl::<F>::INLINE_VT,
            }
        } else {
            let boxed = Box::into_raw(Box::new(f)).cast::<()>();
            JobFn {
                data: MaybeUninit::new(boxed),
                vt: &JobImpl::<F>::BOXED_VT,
            }
        }
    }

    /// A job that does nothing and outputs `()`: the job of a work that
    /// only releases its transaction's locks (`tx`'s release-only works),
    /// which a runtime may recognise ([`JobFn::is_noop`]) to release
    /// without running anything (a busy script's shard, whose loop runs
    /// the script: `script::busy`).
    pub fn noop() -> JobFn {
        JobFn {
            data: MaybeUninit::uninit(),
            vt: &NOOP_VT,
        }
    }

    /// Whether this is [`JobFn::noop`].
    pub fn is_noop(&self) -> bool {
        std::ptr::eq(self.vt, &NOOP_VT)
    }

    /// Runs the job on its shard.
    pub fn call(self, env: &mut ShardEnv<'_>) -> JobOut {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `data` holds the closure `vt` was made for (`new`), and
        // `this` is never dropped: the closure is moved out once, here.
        unsafe { (this.vt.call)(this.data, env) }
    }
}

impl Drop for JobFn {
    fn drop(&mut self) {
        // SAFETY: `data` holds the closure `vt` was made for, not moved
        // out (`call` forgets the `JobFn` it consumes).
        unsafe { (self.vt.drop)(self.data) }
    }
}

/// [`JobFn::noop`]'s table: a static, so that its address tells it apart.
static NOOP_VT: JobVt = JobVt {
    inline: true,
    call: noop_call,
    drop: noop_drop,
};

fn noop_call(_: MaybeUninit<*mut ()>, _: &mut ShardEnv<'_>) -> JobOut {
    Box::new(())
}

fn noop_drop(_: MaybeUninit<*mut ()>) {}

/// The [`JobVt`]s of closures of type `F`.
struct JobImpl<F>(std::marker::PhantomData<F>);

impl<F: FnOnce(&mut ShardEnv<'_>) -> JobOut> JobImpl<F> {
    const INLINE: bool = std::mem::size_of::<F>() <= std::mem::size_of::<*mut ()>()
        && std::mem::align_of::<F>() <= std::mem::align_of::<*mut ()>();
    const INLINE_VT: JobVt = JobVt {
        inline: true,
        call: Self::call_inline,
        drop: Self::drop_inline,
    };
    const BOXED_VT: JobVt = JobVt {
        inline: false,
        call: Self::call_boxed,
        drop: Self::drop_boxed,
    };

    /// # Safety
    /// `data` holds an `F` written inline by [`JobFn::new`], not moved
    /// out before.
    unsafe fn call_inline(data: MaybeUninit<*mut ()>, env: &mut ShardEnv<'_>) -> JobOut {
        // SAFETY: see the function's contract.
        let f = unsafe { data.as_ptr().cast::<F>().read() };
        f(env)
    }

    /// # Safety
    /// As [`JobImpl::call_inline`].
    unsafe fn drop_inline(mut data: MaybeUninit<*mut ()>) {
        // SAFETY: see the function's contract.
        unsafe { data.as_mut_ptr().cast::<F>().drop_in_place() }
    }

    /// # Safety
    /// `data` holds the pointer of a `Box<F>` made by [`JobFn::new`],
    /// not freed before.
    unsafe fn call_boxed(data: MaybeUninit<*mut ()>, env: &mut ShardEnv<'_>) -> JobOut {
        // SAFETY: see the function's contract.
        let f = unsafe { Box::from_raw(data.assume_init().cast::<F>()) };
        f(env)
    }

    /// # Safety
    /// As [`JobImpl::call_boxed`].
    unsafe fn drop_boxed(data: MaybeUninit<*mut ()>) {
        // SAFETY: see the function's contract.
        drop(unsafe { Box::from_raw(data.assume_init().cast::<F>()) });
    }
}

/// I/O figures of one connection, for CLIENT LIST and INFO (Redis's
/// names; the runtime says what each measures).
#[derive(Clone, Debug, Default)]
pub struct ClientIo {
    pub qbuf: usize,
    pub qbuf_free: usize,
    /// Reply buffer size and its recent peak (`rbs`, `rbp`).
    pub rbs: usize,
    pub rbp: usize,
    pub obl: usize,
    pub oll: usize,
    pub omem: usize,
    pub tot_mem: usize,
}

/// The connections of one thread, as jobs may see them (CLIENT LIST/KILL).
/// Implemented by the runtime; knows no sockets here.
pub trait ClientRegistry {
    fn for_each(&self, f: &mut dyn FnMut(&ClientState, &ClientIo));
    /// Marks the connection for closing; true if it is on this thread.
    fn kill(&mut self, id: u64) -> bool;
    /// Ends a blocked command of client `id` as on timeout, or with
    /// `-UNBLOCKED` if `error` (CLIENT UNBLOCK); the blocked command's id
    /// if it was blocked here, for its statistics (the caller records it).
    fn unblock(&mut self, _id: u64, _error: bool) -> Option<usize> {
        None
    }
    /// The largest input and output buffer of any of these clients over
    /// the last seconds (INFO's `client_recent_max_input_buffer` and
    /// `client_recent_max_output_buffer`).
    fn recent_max_buffers(&self) -> (usize, usize) {
        (0, 0)
    }
    /// Runs `f`, a script a job runs under its transaction's locks, with
    /// this thread's event loop lent to the script's busy passes (see
    /// `script::busy::under_locks`): the connections are the loop's
    /// meanwhile, so `f` must not reach them through this registry.
    /// Without a loop to lend (a job run away from its worker): `f` alone.
    fn lend_desk(&mut self, f: &mut dyn FnMut()) {
        f()
    }
}

/// What a job may touch on its shard's thread.
pub struct ShardEnv<'a> {
    pub shard: &'a mut Shard,
    pub stats: &'a mut ThreadStats,
    pub clients: &'a mut dyn ClientRegistry,
}

/// One unit of work for one shard: optionally acquire locks first (the
/// work waits on the shard until they are granted), run the job, then
/// optionally release every lock the transaction holds on that shard.
pub struct Work {
    pub lock: Option<crate::tx::LockReq>,
    pub job: JobFn,
    /// The transaction whose locks to release ([`crate::tx::release_of`]:
    /// ids are never 0, so a work stays 64 bytes and a runtime's message
    /// carrying one has room for a word of its own).
    pub release: Option<std::num::NonZeroU64>,
}

/// The jobs of one step.
#[derive(Default)]
pub struct Plan {
    pub jobs: Vec<(usize, Work)>,
    /// Set by a coordinator whose jobs in this plan are its last: after
    /// them it only writes its reply. Lets the transaction layer release
    /// locks with these jobs instead of in a step of its own.
    pub last: bool,
}

impl Plan {
    /// Runs `f` on shard `shard`.
    pub fn run<T: Send + 'static>(
        &mut self,
        shard: usize,
        f: impl FnOnce(&mut ShardEnv<'_>) -> T + Send + 'static,
    ) {
        let job = JobFn::new(move |env| Box::new(f(env)) as JobOut);
        self.jobs.push((
            shard,
            Work {
                lock: None,
                job,
                release: None,
            },
        ));
    }
    /// Runs a clone of `f` on every shard `0..nshards`.
    pub fn run_all<T: Send + 'static>(
        &mut self,
        nshards: usize,
        f: impl Fn(&mut ShardEnv<'_>) -> T + Send + Clone + 'static,
    ) {
        for s in 0..nshards {
            self.run(s, f.clone());
        }
    }
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
}

/// A command running across shards; see the module documentation.
pub trait Coordinator: Send {
    /// Advances the command with the outputs of the previous step's jobs
    /// (empty on the first call). Push jobs into `plan` to continue; push
    /// none to finish, with the reply written to `out`. An `Err` finishes
    /// the command with that error reply.
    fn step(
        &mut self,
        results: Vec<JobOut>,
        plan: &mut Plan,
        out: &mut Reply,
        client: &mut ClientState,
    ) -> Result<(), CmdError>;

    /// The connection went away while this coordinator ran: push the work
    /// that must still happen (releasing locks). Its outputs are dropped.
    fn abort(&mut self, _plan: &mut Plan) {}

    /// After the last step: the command blocked instead of replying (a
    /// blocking command whose keys span shards); the runtime parks it on
    /// the shards of the keys it waits for.
    fn parked(&mut self) -> Option<Parked> {
        None
    }

    /// The transaction this coordinator runs as, if any (the append-only
    /// file writes its changes as one MULTI/EXEC block, or bare when they
    /// are one record).
    fn tx_id(&self) -> Option<crate::tx::TxId> {
        None
    }

    /// The records it made on the home thread (its own record, as a
    /// FLUSHALL's, or those of a handler it ran on scratch copies), for
    /// the runtime to hand to their consumers after each step; jobs record
    /// into their shard's outbox instead. A wrapper forwards its inner's.
    fn take_records(&mut self) -> Vec<engine::outbox::Chunk> {
        Vec::new()
    }

    /// Moves into `stats` what it counted of the commands it ran on the
    /// home thread (EXEC's connection commands and commands across
    /// shards: Redis counts each command of a transaction); the runtime
    /// calls it when the coordinator ends. A wrapper forwards its inner's.
    fn drain_stats(&mut self, _stats: &mut crate::ctx::ThreadStats) {}

    /// Whether its first step reads state that a transaction's locks
    /// protect (EXEC's WATCH flag, set by writes to watched keys): the
    /// transaction layer then runs it only once every lock is held, not
    /// before the last one is requested.
    fn first_step_needs_locks(&self) -> bool {
        false
    }

    /// A transaction that has not started: pushes the shards it would
    /// lock into `out` and returns true. The runtime may then run it
    /// without locks ([`Coordinator::run_unlocked`]) when it can run it
    /// to its end in one go, on shards nothing else touches meanwhile (all
    /// run by the connection's own thread, none holding a lock or work
    /// waiting for one): as one thread runs a command in Redis.
    fn lock_shards(&self, _out: &mut Vec<usize>) -> bool {
        false
    }

    /// The command's arguments as received, if it keeps a copy of them
    /// (`propagate::as_received`, `scratch::Scratch`): its transaction
    /// then reads its keys for lock requests from them, and only if it
    /// takes locks (`tx::LockSet::deferred`).
    fn received_args(&self) -> Option<resp::Args<'_>> {
        None
    }

    /// The command's arguments as received, if it keeps them unchanged
    /// to its end: the slowlog entry made then reads them here instead of
    /// a copy the runtime would make at dispatch (`script::wide`, whose
    /// template keeps them).
    fn kept_args(&self) -> Option<resp::Args<'_>> {
        None
    }

    /// Its keys split by shard, `(shard, keys)`, if it keeps them until
    /// its first step makes its jobs of them ([`KeyedStep`]: MGET, EXISTS,
    /// TOUCH, LCS across shards): its transaction then reads them for lock
    /// requests only if it takes locks (`tx::LockSet::deferred_groups`).
    fn key_groups(&self) -> Option<&[(usize, resp::OwnedArgs)]> {
        None
    }

    /// Run without taking locks (see [`Coordinator::lock_shards`]): every
    /// job of every step then runs at once, on shards nothing else
    /// touches until the last step ends.
    fn run_unlocked(&mut self) {}

    /// Whether, stepped so far, it can still be answered a busy script's
    /// `-BUSY` instead of running (nothing it did can be seen): its
    /// transaction's waiting lock requests may then be withdrawn while a
    /// script holding their shard is busy (`tx::BusyWithdrawn`).
    fn refusable_when_busy(&self) -> bool {
        true
    }

    /// The reply for a busy script's `-BUSY` refusal `e` of this command
    /// (EXEC answers `EXECABORT Transaction discarded because of: BUSY
    /// ...`, as Redis's execCommandAbort).
    fn busy_error(&self, e: CmdError) -> CmdError {
        e
    }

    /// Whether its jobs had shard `shard` release its transaction's locks
    /// there already (a script's lent shard, released by its own thread
    /// when the job gave it back: `script::lend`): its transaction then
    /// sends that shard no release of its own.
    fn released(&self, _shard: usize) -> bool {
        false
    }

    /// Whether [`Coordinator::abort`] cannot stop it cleanly now: the
    /// runtime must then keep stepping it to its end (outputs and reply
    /// dropped) when its connection goes away.
    fn must_finish(&self) -> bool {
        false
    }
}

/// A blocked multi-shard command: what each shard needs to run it again
/// when one of its waited keys is created there.
pub struct Parked {
    pub on: crate::ctx::BlockOn,
    pub handler: crate::table::ShardHandler,
    pub args: resp::OwnedArgs,
    pub call: crate::exec::ShardCall,
    /// The command also writes keys it does not wait on (BLMOVE into
    /// another shard's key): a shard must not re-run it, only wake its
    /// home thread, which runs the whole command again.
    pub wake_home: bool,
}

/// Downcasts job outputs issued with one type.
///
/// INVARIANT: a coordinator only downcasts outputs of jobs it issued with
/// that type; a mismatch is a bug in the coordinator, not client input.
pub fn outputs<T: 'static>(results: Vec<JobOut>) -> Vec<T> {
    results
        .into_iter()
        .map(|r| *r.downcast::<T>().expect("INVARIANT: job output type"))
        .collect()
}

type Finish<T> =
    Box<dyn FnOnce(Vec<T>, &mut Reply, &mut ClientState) -> Result<(), CmdError> + Send>;

/// A one-step coordinator: the jobs given, then `finish` with their outputs
/// in issue order.
pub struct OneStep<T> {
    plan: Option<Plan>,
    finish: Option<Finish<T>>,
}

impl<T: Send + 'static> OneStep<T> {
    /// The coordinator, boxed as dispatch wants it.
    pub fn boxed(
        plan: Plan,
        finish: impl FnOnce(Vec<T>, &mut Reply, &mut ClientState) -> Result<(), CmdError>
            + Send
            + 'static,
    ) -> Box<dyn Coordinator> {
        Box::new(OneStep {
            plan: Some(plan),
            finish: Some(Box::new(finish)),
        })
    }
}

impl<T: Send + 'static> Coordinator for OneStep<T> {
    fn step(
        &mut self,
        results: Vec<JobOut>,
        plan: &mut Plan,
        out: &mut Reply,
        client: &mut ClientState,
    ) -> Result<(), CmdError> {
        if let Some(p) = self.plan.take() {
            // A plan with no jobs (WATCH of keys already watched) finishes
            // now: the runtime ends a coordinator at its first step without
            // jobs, and a finish left unrun would leave it without a reply.
            if !p.is_empty() {
                *plan = p;
                plan.last = true;
                return Ok(());
            }
        }
        match self.finish.take() {
            Some(f) => f(outputs(results), out, client),
            None => Ok(()),
        }
    }
}

/// A one-step coordinator over a command's keys split by shard, `(shard,
/// keys)` (MGET, EXISTS, TOUCH, LCS across shards): it keeps the groups
/// until its first step, which makes each group's job (`job` pushes it
/// into the plan), so that its transaction reads the keys for lock
/// requests only if it takes locks ([`Coordinator::key_groups`]); a run
/// without locks never hashes them. Then as [`OneStep`]: `finish` with
/// the jobs' outputs in the groups' order.
pub struct KeyedStep<T, J> {
    groups: Vec<(usize, resp::OwnedArgs)>,
    job: J,
    finish: Option<Finish<T>>,
}

impl<T, J> KeyedStep<T, J>
where
    T: Send + 'static,
    J: FnMut(&mut Plan, usize, resp::OwnedArgs) + Send + 'static,
{
    /// The coordinator, boxed as dispatch wants it.
    pub fn boxed(
        groups: Vec<(usize, resp::OwnedArgs)>,
        job: J,
        finish: impl FnOnce(Vec<T>, &mut Reply, &mut ClientState) -> Result<(), CmdError>
            + Send
            + 'static,
    ) -> Box<dyn Coordinator> {
        Box::new(KeyedStep {
            groups,
            job,
            finish: Some(Box::new(finish)),
        })
    }
}

impl<T, J> Coordinator for KeyedStep<T, J>
where
    T: Send + 'static,
    J: FnMut(&mut Plan, usize, resp::OwnedArgs) + Send + 'static,
{
    fn step(
        &mut self,
        results: Vec<JobOut>,
        plan: &mut Plan,
        out: &mut Reply,
        client: &mut ClientState,
    ) -> Result<(), CmdError> {
        if !self.groups.is_empty() {
            let groups = std::mem::take(&mut self.groups);
            plan.jobs.reserve(groups.len());
            for (shard, keys) in groups {
                (self.job)(plan, shard, keys);
            }
            plan.last = true;
            return Ok(());
        }
        match self.finish.take() {
            Some(f) => f(outputs(results), out, client),
            None => Ok(()),
        }
    }

    fn key_groups(&self) -> Option<&[(usize, resp::OwnedArgs)]> {
        (!self.groups.is_empty()).then_some(&self.groups[..])
    }
}

/// A one-step fan-out to every shard.
pub fn fan_out<T: Send + 'static>(
    nshards: usize,
    job: impl Fn(&mut ShardEnv<'_>) -> T + Send + Clone + 'static,
    finish: impl FnOnce(Vec<T>, &mut Reply, &mut ClientState) -> Result<(), CmdError> + Send + 'static,
) -> Box<dyn Coordinator> {
    let mut plan = Plan::default();
    plan.run_all(nshards, job);
    OneStep::boxed(plan, finish)
}

#[cfg(test)]
mod job_tests {
    use std::sync::Arc;

    use super::*;
    use crate::testutil::NoClients;

    fn run(job: JobFn) -> JobOut {
        let mut shard = Shard::new(0, 1);
        let mut stats = ThreadStats::default();
        job.call(&mut ShardEnv {
            shard: &mut shard,
            stats: &mut stats,
            clients: &mut NoClients,
        })
    }

    /// A job that captures one `Arc` (MSET's, per shard) or nothing is
    /// held inline, a larger one boxed; either runs once, or is dropped
    /// with what it captured, and a `Work` stays 64 bytes.
    #[test]
    fn small_jobs_are_held_inline_and_run_or_dropped_once() {
        let shared = Arc::new(20u64);
        let (a, b) = (shared.clone(), shared.clone());
        let one = JobFn::new(move |_| Box::new(*a + 1) as JobOut);
        assert!(one.vt.inline);
        let dropped = JobFn::new(move |_| Box::new(*b) as JobOut);
        assert_eq!(Arc::strong_count(&shared), 3);
        drop(dropped);
        assert_eq!(Arc::strong_count(&shared), 2);
        assert_eq!(*run(one).downcast::<u64>().unwrap(), 21);
        assert_eq!(Arc::strong_count(&shared), 1);

        let (c, d) = (shared.clone(), shared.clone());
        let big = JobFn::new(move |env| Box::new((*c, *d, env.shard.id)) as JobOut);
        assert!(!big.vt.inline);
        assert_eq!(
            *run(big).downcast::<(u64, u64, usize)>().unwrap(),
            (20, 20, 0)
        );
        let (e, f) = (shared.clone(), shared.clone());
        drop(JobFn::new(move |_| Box::new(*e + *f) as JobOut));
        assert_eq!(Arc::strong_count(&shared), 1);

        assert!(JobFn::new(|_| Box::new(()) as JobOut).vt.inline);
        assert_eq!(std::mem::size_of::<Work>(), 64);
    }

    /// The no-op job (a release-only work's) is told apart from every
    /// other, even one that does the same, and outputs `()`.
    #[test]
    fn the_noop_job_is_recognised() {
        assert!(JobFn::noop().is_noop());
        assert!(!JobFn::new(|_| Box::new(()) as JobOut).is_noop());
        assert!(run(JobFn::noop()).downcast::<()>().is_ok());
        drop(JobFn::noop());
    }

    /// `Plan::run` of a closure holding one `Arc` (MSET's per-shard job)
    /// allocates no box for it.
    #[test]
    fn a_plan_job_of_one_arc_is_inline() {
        let shared = Arc::new(7u32);
        let mut plan = Plan::default();
        let s = shared.clone();
        plan.run(0, move |_| *s);
        assert!(plan.jobs[0].1.job.vt.inline);
        let (_, work) = plan.jobs.pop().unwrap();
        assert_eq!(*run(work.job).downcast::<u32>().unwrap(), 7);
        assert_eq!(Arc::strong_count(&shared), 1);
    }
}
