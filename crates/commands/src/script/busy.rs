//! Long scripts: `busy-reply-threshold` (alias `lua-time-limit`), SCRIPT
//! KILL and FUNCTION KILL, the FUNCTION LOAD time limit, and `-BUSY` for
//! commands that need a shard a long script holds.
//!
//! # How a running script is watched
//!
//! Every thread's VM carries one instruction-count hook ([`HookState`],
//! installed once with the VM, fired every [`HOOK_INSTRUCTIONS`] Lua
//! instructions; Redis's `luaMaskCountHook` fires every 100,000 too). A run
//! tells the hook what it is ([`HookState::begin`]): nothing else is done
//! per run, no lock, no allocation for EVAL. When the hook sees a script
//! running past the threshold, it *publishes* it: an `Arc<Running>` in its
//! server's busy list ([`Registry`]), and a mark on its shard. From then on:
//!
//! * SCRIPT KILL / FUNCTION KILL, on whatever thread the killer's
//!   connection lives, find it in the list and flip its state from clean
//!   to killed (one compare-and-swap: the script's own thread flips clean
//!   to wrote before its first write command, so a kill and a write cannot
//!   both win). The hook raises Redis's error at its next call, and from
//!   then on at every line (Redis switches its hook to `LUA_MASKLINE` for
//!   the same reason: a `pcall` must not be able to swallow the kill).
//! * Dispatch, on every thread, answers `-BUSY` to a command that needs the
//!   marked shard (`refuse_if_busy`), and to a command that needs no shard
//!   at all (PING, INFO, a keyless EVAL: Redis answers every command so
//!   while busy, and health checks probe with PING), except commands
//!   flagged `allow-busy`. Keyed commands of other shards keep running.
//!
//! A script below the threshold is invisible: SCRIPT KILL answers NOTBUSY,
//! as Redis does (there a client cannot even be heard before it).
//!
//! # One registry per server
//!
//! Everything other threads see of the long scripts (the published list
//! and its count, `busy-reply-threshold`, the SHUTDOWN NOSAVE stop, the
//! count of scripts under locks) is the server's [`Registry`], held by its
//! `Ops` (`ops.busy`, `'static` as `Ops` is). A command reaches it through
//! its server (dispatch: `server.ops.busy`, one more pointer load than the
//! process-wide static it was); a run through its `ShardCtx::ops`, which
//! the hook finds at its first call (`run::running_ops`); a published run
//! keeps it (`Running::registry`). Process-wide, the tests' servers in one
//! process saw each other's scripts: a long script of one test answered
//! another test's SCAN `-BUSY`. What stays per thread (the lent desks and
//! loops, the current run) is per server too: a thread serves one server.
//!
//! # The script's own event loop (Redis's `processEventsWhileBlocked`)
//!
//! Clients whose connection lives on the script's own event loop would not
//! be read at all until the script ends, so a SCRIPT KILL or SHUTDOWN
//! NOSAVE from them could not be heard. So the runtime lends the hook a
//! [`BusyServe`] ([`lend_desk`], around the code that may run a script):
//! once the script is published, every hook call (every
//! [`HOOK_INSTRUCTIONS`], about a millisecond of Lua) lets it serve the
//! loop's *other* connections once, in Redis's restricted mode: requests
//! are read and parsed, commands flagged `allow-busy` that need no shard
//! run (SCRIPT KILL, FUNCTION KILL, FUNCTION STATS, SHUTDOWN, MULTI,
//! DISCARD, AUTH, HELLO, QUIT, RESET ...), and everything else gets
//! Redis's `-BUSY` (dispatch refuses any other command of a connection
//! whose home is the busy shard: `refuse_if_busy` with its home). Nothing
//! runs on a shard from there: an allow-busy command that would (a WATCH
//! with keys of another shard) stays unread, with everything behind it on
//! its connection, until the script ends. Keys of the shard a published
//! script holds (run in place: its home shard and those it pinned; on
//! every shard, `super::every`: any shard) need no job: the script takes
//! them ([`Registry::watch_while_busy`]) and its thread registers them, each on its
//! shard, before its next command, so WATCH is answered at once there and
//! on every thread; keys of the home shard of a script on gathered copies,
//! and of a loop it stalls, are parked with it and registered before that
//! shard runs again ([`Registry::watch_stopped`]; see `watch` for both). The connection that runs
//! the script is not in the table the runtime lends (it is taken out
//! while it executes).
//!
//! The lend is a thread-local pointer with its lifetime erased, set and
//! cleared around the call by a guard: the hook is a `'static` closure
//! (mlua's), so it cannot borrow the runtime's table otherwise. The
//! pointer is taken out of the slot while the desk serves, so it cannot
//! be re-entered.
//!
//! The lending loop is published with the script (`Running::home`): its
//! shard's commands get `-BUSY` on every thread, also while the script
//! runs on gathered copies of several shards' keys (`crate::scratch`,
//! which holds no one shard, but stops its caller's loop). Commands that
//! need those keys' other shards wait on the transaction's locks instead
//! of getting `-BUSY`.
//!
//! A script run in place across co-hosted shards (`super::in_place`)
//! pins their loops to its own: none of them runs until it ends. One that
//! can still be taken back is, past the threshold, and runs again on
//! copies (its loops freed); one that cannot (it published, or wrote what
//! no undo keeps) is published with every loop it pinned (`Running::
//! pinned`, kept up to date at each pass as it pins more), and the
//! runtime lends their desks too ([`lend_pinned`]): each pass serves every
//! pinned loop as the own one, so their clients get `-BUSY`, and their
//! SCRIPT KILL, FUNCTION KILL and SHUTDOWN NOSAVE reach the script, as
//! those of the own loop do.
//!
//! A hub's own loop, idle while a script runs in the turn of a loop the
//! hub adopted (see [`IdleLoops`]), is lent the same way ([`lend_idle`])
//! and served at each pass after the script's own, its shard published as
//! stalled (`Running::stalled`): `-BUSY` everywhere, but not held (a
//! WATCH of its keys is parked, [`Registry::watch_stopped`]).
//!
//! A script run on a co-hosted shard by a call from another loop (the
//! runtime's `in_place::by_call`) lends that shard's desk as any script
//! on its shard does, and stops the caller's loop, whose turn it runs in:
//! that loop is lent as an idle one ([`lend_caller`], its desk moved out
//! of the desk's slot meanwhile), stalled and served as a hub's own loop
//! is. Past the threshold such a run is taken back if it can be, as one in
//! place is ([`by_call`]), and runs again as a hop, which leaves the
//! caller's loop free; and it always can be: it is taken back before
//! anything no take-back undoes too (`run::Run::hop_instead`). Idle loops
//! lent by nested calls are all served ([`lend_idle`] chains them).
//!
//! # Scripts under a transaction's locks
//!
//! A script that runs as a transaction's job rather than in place (one
//! on every shard, `super::every`, which write-locks them all; one inside
//! MULTI/EXEC, whose block locks its keys) runs through [`under_locks`]:
//! the job's registry lends the loop it runs on to the hook
//! (`ClientRegistry::lend_desk`: the connection table is the desk's
//! meanwhile, which a script never reaches), so its own thread's clients
//! are served as above, and the script is published with the shards its
//! transaction locks (`Running::locked`). Their commands get `-BUSY` on
//! every thread, as the home shard's do (keys of shards the transaction
//! does not lock keep being served: Redis answers those `-BUSY` too);
//! each of their loops, free meanwhile, answers `-BUSY` to the requests
//! that already waited behind the locks ([`Registry::locked_busy`]: the runtime
//! tries them again as at a release, and refuses what is still held
//! back), and its own loop's connections blocked on a lock are
//! dispatched again, refused; other transactions' lock requests waiting
//! there are withdrawn from the lock table and answered `-BUSY`
//! (`tx::BusyWithdrawn`; not an allow-busy command's, nor an EXEC's that
//! already ran a command). The first busy pass wakes every loop for
//! that. A WATCH of keys of a locked shard (not the home one) takes no
//! lock (`multi::watch_locks`): the script takes them if it holds every
//! shard (`Running::every`), else its job runs at once on that free loop,
//! also from the script's own loop, whose desk sends it and answers the
//! WATCH once it is back (the runtime's `busy::watch`; a script inside MULTI/EXEC whose block does not lock every shard;
//! the block's later commands of other shards run after the script,
//! `multi`, so after such a WATCH, as in Redis). A transaction withdrawn
//! at one of those loops, which holds a lock on the script's own shard,
//! is answered at once there (the lock goes after the script), so its
//! `-BUSY` does not wait for the script. While the script's thread waits for a
//! call posted to another shard's loop (`every::Reach`), the desk is
//! served at each tick ([`serve_while_waiting`]).
//!
//! Other threads' requests already in the script's shard's mailbox when
//! it became busy are answered `-BUSY` by the desk (the runtime lends it
//! the loop's mailbox too); new ones are refused by the sender's dispatch
//! (`refuse_if_busy`). What the script's own loop held back behind its
//! shard's lock, taken before the script ran (its own connections'
//! requests, other threads' batches not started), is answered by the desk
//! too.
//!
//! SHUTDOWN while a script is busy answers `-BUSY`; SHUTDOWN NOSAVE stops
//! every busy script (as SCRIPT KILL would, written or not) and drops its
//! records from the append-only file, as Redis never propagates an
//! unfinished script (except for one on gathered copies of several
//! shards, whose transaction logs what it wrote back). Once set, the stop
//! stays set: a refused shutdown leaves later busy scripts stopped too.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mlua::{HookTriggers, Lua, VmState};

use super::vm::reply_error;
use crate::error::CmdError;

mod watch;

pub use watch::{
    any_parked, register_now, register_parked, register_watches, release_stalled,
    take_written_back, PendingWatch,
};

/// Lua instructions between two hook calls.
const HOOK_INSTRUCTIONS: u32 = 100_000;
/// FUNCTION LOAD's limit on a library's loading code (Redis's
/// `LOAD_TIMEOUT_MS`).
const LOAD_TIMEOUT: Duration = Duration::from_millis(500);

pub const BUSY_EVAL: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
pub const BUSY_FUNCTION: &str =
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.";
const UNKILLABLE: &str = "UNKILLABLE Sorry the script already executed write commands against the \
     dataset. You can either wait the script termination or kill the server in a hard way using \
     the SHUTDOWN NOSAVE command.";
const KILLED: &str = "Script killed by user with SCRIPT KILL...";
const LOAD_TIMEOUT_TEXT: &str = "FUNCTION LOAD timeout";

/// `Running::state` values.
const CLEAN: u8 = 0;
const WROTE: u8 = 1;
const KILLED_STATE: u8 = 2;

/// A script running past the threshold, as other threads see it.
pub struct Running {
    /// The server's registry it is published in.
    registry: &'static Registry,
    /// EVAL family (SCRIPT KILL) or FCALL (FUNCTION KILL).
    pub eval: bool,
    /// FCALL: the function's name.
    pub name: String,
    /// FCALL: the command as received (FUNCTION STATS).
    pub command: Vec<Vec<u8>>,
    pub started: Instant,
    /// The shard the script holds, when it runs on one.
    pub shard: Option<usize>,
    /// The event loop (shard) the script runs on, when one lent its desk:
    /// that loop serves nothing else meanwhile (a script on gathered
    /// copies holds no one shard, but stops its loop all the same).
    pub home: Option<usize>,
    /// The co-hosted shards a run in place pinned besides `home` (see
    /// [`lend_pinned`]): their commands get `-BUSY` as `home`'s do.
    /// Grows while it runs (a shard pinned for an undeclared key).
    pinned: Mutex<Vec<usize>>,
    /// Loops the script stops without holding their shards: a hub's own
    /// loop while the script runs on a loop the hub adopted (see
    /// [`lend_idle`]). Their commands get `-BUSY` as `home`'s do, but a
    /// WATCH of their keys is parked ([`Registry::watch_stopped`]). Changed under
    /// the list's lock.
    stalled: Mutex<Vec<usize>>,
    /// Shards its transaction holds under locks while it runs (a script
    /// on every shard, `super::every`, or inside MULTI/EXEC; see
    /// [`under_locks`]): their commands get `-BUSY` as `home`'s do, and
    /// what waits behind those locks is answered `-BUSY` by their loops
    /// ([`Registry::locked_busy`]). A WATCH of their keys is not the script's to
    /// take (it waits for the locks).
    locked: Vec<usize>,
    /// Runs in place (`super::in_place`): it holds the real shards `home`
    /// and `pinned`, whose keys WATCH hands it ([`Registry::watch_while_busy`]).
    in_place: bool,
    /// Holds every shard under its transaction's locks, each reached from
    /// its thread (`super::every`): WATCH hands it the keys of any shard,
    /// which it registers there before its next command.
    every: bool,
    /// CLEAN, WROTE or KILLED_STATE.
    state: AtomicU8,
    /// WATCHes of keys on `shard` answered while it runs (see
    /// [`Registry::watch_while_busy`]), not yet registered on the shard.
    watches: Mutex<Vec<PendingWatch>>,
    /// `watches` is not empty (one load before each of the script's
    /// commands).
    watching: AtomicBool,
    /// WATCHes of keys of its home shard while it holds none (it runs on
    /// gathered copies), by shard: registered there once it ends (see
    /// [`Registry::watch_stopped`]).
    parked: Mutex<Vec<(usize, PendingWatch)>>,
}

thread_local! {
    /// The shards the transaction of the job running on this thread holds
    /// under locks, for a script it runs ([`under_locks`]).
    static LOCKED: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    /// This thread's published run, for [`serve_while_waiting`].
    static CURRENT: RefCell<Option<Arc<Running>>> = const { RefCell::new(None) };
}

/// Runs `f`, a script that a transaction's job runs while the transaction
/// holds `locked` (shard ids) under locks: a script on every shard
/// (`super::every`, which write-locks them all) or one inside MULTI/EXEC.
/// Past the threshold it is published with them: commands that need them
/// get `-BUSY` on every thread (not a silent wait behind the locks), and
/// each of their loops answers `-BUSY` to what already waits there
/// ([`Registry::locked_busy`]). The job's event loop is lent to its busy passes
/// (`clients`' [`ClientRegistry::lend_desk`]), so the clients of the
/// script's own thread are served (`-BUSY`, SCRIPT KILL, SHUTDOWN
/// NOSAVE) as those of a script run in place are.
///
/// [`ClientRegistry::lend_desk`]: crate::coord::ClientRegistry::lend_desk
pub fn under_locks<R>(
    busy: &Registry,
    clients: &mut dyn crate::coord::ClientRegistry,
    locked: &[usize],
    f: impl FnOnce() -> R,
) -> R {
    struct Restore(Vec<usize>);
    impl Drop for Restore {
        fn drop(&mut self) {
            LOCKED.with(|l| std::mem::swap(&mut *l.borrow_mut(), &mut self.0));
        }
    }
    struct Count<'a>(&'a AtomicUsize);
    impl Drop for Count<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::Relaxed);
        }
    }
    let _restore = Restore(LOCKED.with(|l| l.replace(locked.to_vec())));
    busy.under_locks.fetch_add(1, Ordering::Relaxed);
    let _running = Count(&busy.under_locks);
    let mut f = Some(f);
    let mut r = None;
    clients.lend_desk(&mut || {
        if let Some(f) = f.take() {
            r = Some(f());
        }
    });
    // INVARIANT: `lend_desk` runs its closure once (`f` otherwise).
    r.expect("lend_desk ran the script")
}

/// Whether this thread's running script is published and holds shards
/// under locks (the runtime then wakes every loop once, so those that
/// hold requests behind the locks answer them `-BUSY` now).
pub fn published_under_locks() -> bool {
    CURRENT.with(|c| c.borrow().as_ref().is_some_and(|r| !r.locked.is_empty()))
}

/// A busy pass for this thread's published script while it waits for
/// something other than Lua (a call posted to another shard's loop,
/// `every::Reach`): its hook cannot run meanwhile. Nothing when no
/// script of this thread is published.
pub fn serve_while_waiting() {
    let Some(p) = CURRENT.with(|c| c.borrow().clone()) else {
        return;
    };
    serve_pinned(&p, true);
    let idle = stall_idle(&p);
    serve_while_busy();
    serve_pinned(&p, false);
    if idle {
        serve_idle(false);
    }
}

impl Running {
    fn stops_loop(&self, s: usize) -> bool {
        let has = |m: &Mutex<Vec<usize>>| m.lock().unwrap_or_else(|e| e.into_inner()).contains(&s);
        self.shard == Some(s) || self.home == Some(s) || has(&self.pinned) || has(&self.stalled)
    }

    /// Whether a command that needs shards `s` must wait for it: it holds
    /// or stops one of them (its shard, its loop, a loop it pinned or
    /// stalls, a shard its transaction locks).
    fn stops_any(&self, s: &[usize]) -> bool {
        self.shard.is_some_and(|b| s.contains(&b))
            || self.home.is_some_and(|h| s.contains(&h))
            || self
                .pinned
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .any(|p| s.contains(p))
            || self
                .stalled
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .any(|p| s.contains(p))
            || self.locked.iter().any(|p| s.contains(p))
    }

    /// Whether it holds real shard `s`: the one it runs on, or, run in
    /// place, its home, one it pinned, or one its transaction locks whole
    /// (`super::lend`).
    fn holds(&self, s: usize) -> bool {
        self.every
            || self.shard == Some(s)
            || (self.in_place
                && (self.home == Some(s)
                    || self.locked.contains(&s)
                    || self
                        .pinned
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .contains(&s)))
    }
}

/// One server's long scripts (see "One registry per server" in the module
/// documentation): held by its `Ops` (`ops.busy`).
pub struct Registry {
    /// Scripts running past the threshold, every thread's. Bounded by the
    /// number of threads (one script per thread at a time).
    list: Mutex<Vec<Arc<Running>>>,
    /// `list`'s length (a fast check for dispatch).
    count: AtomicUsize,
    /// Scripts running in [`under_locks`] now, on every thread.
    under_locks: AtomicUsize,
    /// Set by SHUTDOWN NOSAVE: every busy script stops at its next hook
    /// call.
    shutdown: AtomicBool,
    /// `busy-reply-threshold` in milliseconds (set from the configuration).
    threshold_ms: AtomicU64,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    /// No script busy, the default threshold (5 s).
    pub const fn new() -> Self {
        Registry {
            list: Mutex::new(Vec::new()),
            count: AtomicUsize::new(0),
            under_locks: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            threshold_ms: AtomicU64::new(5000),
        }
    }

    /// Sets `busy-reply-threshold` (at start and after CONFIG SET:
    /// `Ops::configure`).
    pub fn set_threshold_ms(&self, ms: u64) {
        self.threshold_ms.store(ms, Ordering::Relaxed);
    }

    fn threshold(&self) -> Duration {
        Duration::from_millis(self.threshold_ms.load(Ordering::Relaxed))
    }

    fn list(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Running>>> {
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether any script is busy (one relaxed load).
    #[inline]
    pub fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) != 0
    }

    /// The `-BUSY` error for a command that needs one of `shards` while a
    /// long script holds it (`None`: needs every shard), unless the command
    /// may run while busy. One relaxed load when no script is busy.
    #[inline]
    pub fn refuse_if_busy(&self, shards: Option<&[usize]>) -> Option<CmdError> {
        if !self.any() {
            return None;
        }
        self.busy_error(shards)
    }

    #[cold]
    fn busy_error(&self, shards: Option<&[usize]>) -> Option<CmdError> {
        let list = self.list();
        let r = list.iter().find(|r| match shards {
            None => true,
            Some(s) => r.stops_any(s),
        })?;
        Some(CmdError::Raw(
            if r.eval { BUSY_EVAL } else { BUSY_FUNCTION }.into(),
        ))
    }

    /// Whether a script runs under its transaction's locks now, on any
    /// thread ([`under_locks`]; one relaxed load): a shard that holds
    /// locks then skips its active expiry cycle (see `every`: the script's
    /// calls there judge expiry by its start time, as Redis freezes the
    /// time for a script; keys must not expire under it meanwhile).
    #[inline]
    pub fn scripts_under_locks(&self) -> bool {
        self.under_locks.load(Ordering::Relaxed) != 0
    }

    /// Whether a published script's transaction holds `shard` under locks
    /// ([`under_locks`]): its loop answers `-BUSY` to the requests that
    /// wait there behind them, as Redis answers every command while busy.
    /// False at once when no script is busy.
    #[inline]
    pub fn locked_busy(&self, shard: usize) -> bool {
        self.any() && self.locked_busy_slow(shard)
    }

    #[cold]
    fn locked_busy_slow(&self, shard: usize) -> bool {
        self.list().iter().any(|r| r.locked.contains(&shard))
    }

    /// Whether a published script stops loop `s` itself: it runs there,
    /// pinned or stalls it (nothing runs on that loop until it ends). The
    /// loops of shards its transaction only locks are free: false for
    /// them.
    pub fn stops_loop(&self, s: usize) -> bool {
        self.any() && self.list().iter().any(|r| r.stops_loop(s))
    }

    /// SHUTDOWN NOSAVE: stops every busy script (written or not; its
    /// effects are not logged, see `run`), so that its thread can reach
    /// shutdown.
    pub fn stop_for_shutdown(&self) {
        self.shutdown.store(true, Ordering::Release);
    }

    /// SHUTDOWN without NOSAVE while a script is busy: Redis's `-BUSY`.
    pub fn refuse_shutdown(&self) -> Result<(), CmdError> {
        match self.list().first() {
            None => Ok(()),
            Some(r) => Err(CmdError::Raw(
                if r.eval { BUSY_EVAL } else { BUSY_FUNCTION }.into(),
            )),
        }
    }

    /// SCRIPT KILL (`eval`) or FUNCTION KILL: kills the busy scripts of
    /// that kind that have not written. Errors as Redis's `scriptKill`:
    /// NOTBUSY when none is busy, UNKILLABLE when the busy one wrote,
    /// `-BUSY` naming the other command when the busy one is of the other
    /// kind.
    pub fn kill(&self, eval: bool) -> Result<(), CmdError> {
        let list = self.list();
        if list.is_empty() {
            return Err(CmdError::Raw(
                "NOTBUSY No scripts in execution right now.".into(),
            ));
        }
        let mut first_err = None;
        let mut killed = false;
        for r in list.iter() {
            // Redis's scriptKill checks the writes before the kind.
            if r.state.load(Ordering::Acquire) == WROTE {
                first_err.get_or_insert(CmdError::Raw(UNKILLABLE.into()));
                continue;
            }
            if r.eval != eval {
                first_err.get_or_insert(CmdError::Raw(
                    if r.eval { BUSY_EVAL } else { BUSY_FUNCTION }.into(),
                ));
                continue;
            }
            match r
                .state
                .compare_exchange(CLEAN, KILLED_STATE, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) | Err(KILLED_STATE) => killed = true,
                Err(_) => {
                    first_err.get_or_insert(CmdError::Raw(UNKILLABLE.into()));
                }
            }
        }
        match (killed, first_err) {
            (true, _) | (false, None) => Ok(()),
            (false, Some(e)) => Err(e),
        }
    }

    /// What FUNCTION STATS reports while busy: `Err` (Redis's `-BUSY` for
    /// SCRIPT KILL) when the busy script is an EVAL, the busy function's
    /// name, command and milliseconds so far otherwise.
    pub fn running_function(&self) -> Result<Option<RunningFunction>, CmdError> {
        let list = self.list();
        match list.first() {
            None => Ok(None),
            Some(r) if r.eval => Err(CmdError::Raw(BUSY_EVAL.into())),
            Some(r) => Ok(Some((
                r.name.clone(),
                r.command.clone(),
                r.started.elapsed().as_millis() as u64,
            ))),
        }
    }

    /// Publishes `r` (its hook found it past the threshold).
    fn publish(&self, r: Arc<Running>) {
        let mut list = self.list();
        list.push(r);
        self.count.store(list.len(), Ordering::Relaxed);
    }

    /// Takes published run `p` out of the list (it ended).
    fn unpublish(&self, p: &Arc<Running>) {
        let mut list = self.list();
        list.retain(|r| !Arc::ptr_eq(r, p));
        self.count.store(list.len(), Ordering::Relaxed);
    }
}

/// A busy function: its name, its command and milliseconds so far.
pub type RunningFunction = (String, Vec<Vec<u8>>, u64);

/// The runtime's side of a busy script: serves the script's own event
/// loop once, in the restricted mode of the module documentation. Must
/// not run anything on a shard, nor any Lua.
pub trait BusyServe {
    fn serve_busy(&mut self);
    /// Visits the loop's connections (not the one whose request runs the
    /// script, out of its slot meanwhile): what a script's SLOWLOG GET
    /// and MEMORY STATS read of its own loop ([`for_each_home_client`]).
    fn for_each_client(&self, _f: &mut dyn FnMut(&crate::ClientState, &crate::coord::ClientIo)) {}
}

thread_local! {
    /// The desk lent by [`lend_desk`] for this thread's running scripts.
    static DESK: std::cell::Cell<Option<std::ptr::NonNull<dyn BusyServe>>> =
        const { std::cell::Cell::new(None) };
    /// The loop that lent it (published as `Running::home`).
    static DESK_HOME: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Lends `desk`, the event loop of shard `home`, to the scripts `f` runs
/// on this thread (see the module documentation).
pub fn lend_desk<R>(desk: &mut dyn BusyServe, home: usize, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<std::ptr::NonNull<dyn BusyServe>>, Option<usize>);
    impl Drop for Restore {
        fn drop(&mut self) {
            DESK.with(|d| d.set(self.0));
            DESK_HOME.with(|d| d.set(self.1));
        }
    }
    let ptr: std::ptr::NonNull<dyn BusyServe + '_> = std::ptr::NonNull::from(desk);
    // SAFETY: only the trait object's lifetime bound changes (same fat
    // pointer). The pointer is dereferenced only by `serve_while_busy` on
    // this thread while `f` runs: `Restore` puts the previous value back
    // before this function returns or unwinds, so it never outlives the
    // borrow of `desk`.
    let ptr: std::ptr::NonNull<dyn BusyServe + 'static> = unsafe { std::mem::transmute(ptr) };
    let _restore = Restore(
        DESK.with(|d| d.replace(Some(ptr))),
        DESK_HOME.with(|d| d.replace(Some(home))),
    );
    f()
}

/// The loop whose desk is lent to this thread's scripts now
/// ([`lend_desk`]), if any.
pub fn desk_home() -> Option<usize> {
    DESK_HOME.with(|d| d.get())
}

/// Visits the connections of the loop whose desk is lent to this thread's
/// running script, if any ([`BusyServe::for_each_client`]); returns that
/// loop's id.
pub(crate) fn for_each_home_client(
    f: &mut dyn FnMut(&crate::ClientState, &crate::coord::ClientIo),
) -> Option<usize> {
    let desk = DESK.with(|d| d.get())?;
    // SAFETY: set by `lend_desk`, whose borrow is alive (see there). The
    // script calls this between hook calls (a pass takes the desk out of
    // its slot while it serves), so nothing else uses the desk meanwhile,
    // and this shared reference ends with the call.
    unsafe { desk.as_ref().for_each_client(f) };
    DESK_HOME.with(|d| d.get())
}

/// Serves the lent desk once, if any (from the hook of a published run).
fn serve_while_busy() {
    // Taken out while it serves: a nested call finds nothing.
    let Some(mut desk) = DESK.with(|d| d.take()) else {
        return;
    };
    // SAFETY: set by `lend_desk`, whose borrow is alive (see there); this
    // is the only reference made from it, as the slot is empty meanwhile.
    unsafe { desk.as_mut().serve_busy() };
    DESK.with(|d| d.set(Some(desk)));
}

thread_local! {
    /// Inside [`by_call`].
    static BY_CALL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The run [`by_call`] ran last was taken back for its script's
    /// `HopMark` (see [`take_marked`]).
    static MARKED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A run [`by_call`] runs is taken back to hop, its script marked
/// (`cache::HopMark`: now, or by an earlier run).
pub(crate) fn note_marked() {
    MARKED.with(|m| m.set(true));
}

/// Whether the last run [`by_call`] ran was taken back for its script's
/// `HopMark` (cleared): the runtime then remembers the script's calls
/// as hops, sparing their next visits.
pub fn take_marked() -> bool {
    MARKED.with(|m| m.replace(false))
}

/// Runs `f`, a script command run on a co-hosted shard by a call from
/// another loop (see [`lend_caller`]): a run it starts that is still
/// running past the threshold is taken back if it can be (it wrote
/// nothing it cannot undo and published nothing), as one in place is,
/// rather than published; the runtime then runs it again as a hop, which
/// leaves the caller's loop free (served, not stalled). A run is taken
/// back before it would do what cannot be undone too
/// (`run::Run::hop_instead`), so none is known to be published, with
/// the caller's loop stalled, from here.
pub fn by_call<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            BY_CALL.with(|b| b.set(self.0));
        }
    }
    let _restore = Restore(BY_CALL.with(|b| b.replace(true)));
    MARKED.with(|m| m.set(false));
    f()
}

/// Whether this thread runs a script command [`by_call`] (one load per
/// script run).
pub(crate) fn is_by_call() -> bool {
    BY_CALL.with(|b| b.get())
}

/// The runtime's side of a script run in place across co-hosted shards
/// (`super::in_place`): the event loops of the shards it pinned besides
/// its own, which cannot run while it does. Once the script is published
/// each busy pass serves them exactly as the own loop's [`BusyServe`]
/// serves that one (their connections, their mailboxes), and their
/// commands get `-BUSY` everywhere, as the own loop's do. Must not touch
/// a pinned shard's data, nor run any Lua.
pub trait PinnedLoops {
    /// Sets `into` to the shards pinned so far.
    fn pinned(&self, into: &mut Vec<usize>);
    /// Serves each pinned loop once.
    fn serve_pinned(&mut self);
}

thread_local! {
    /// The loops lent by [`lend_pinned`].
    static PINNED: std::cell::Cell<Option<std::ptr::NonNull<dyn PinnedLoops>>> =
        const { std::cell::Cell::new(None) };
}

/// Lends `loops`, the loops a run in place pinned, to the scripts `f` runs
/// on this thread, as [`lend_desk`] lends the own loop (the same guard,
/// for the same reason).
pub fn lend_pinned<R>(loops: &mut dyn PinnedLoops, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<std::ptr::NonNull<dyn PinnedLoops>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            PINNED.with(|d| d.set(self.0));
        }
    }
    let ptr: std::ptr::NonNull<dyn PinnedLoops + '_> = std::ptr::NonNull::from(loops);
    // SAFETY: as in `lend_desk`: only the lifetime bound changes, and the
    // pointer is dereferenced only by `serve_pinned` on this thread while
    // `f` runs (`Restore` puts the previous value back first).
    let ptr: std::ptr::NonNull<dyn PinnedLoops + 'static> = unsafe { std::mem::transmute(ptr) };
    let _restore = Restore(PINNED.with(|d| d.replace(Some(ptr))));
    f()
}

/// A busy pass over the lent pinned loops, if any (from the hook of
/// published run `p`): `publish_only` updates `p`'s pinned shards (before
/// any loop is served, so every dispatch of the pass refuses them);
/// otherwise serves each loop once.
fn serve_pinned(p: &Running, publish_only: bool) {
    // Taken out while it serves: a nested call finds nothing.
    let Some(mut loops) = PINNED.with(|d| d.take()) else {
        return;
    };
    // SAFETY: set by `lend_pinned`, whose borrow is alive; the only
    // reference made from it meanwhile, as the slot is empty.
    let l = unsafe { loops.as_mut() };
    if publish_only {
        l.pinned(&mut p.pinned.lock().unwrap_or_else(|e| e.into_inner()));
    } else {
        l.serve_pinned();
    }
    PINNED.with(|d| d.set(Some(loops)));
}

/// The runtime's side of a script that stops event loops it does not
/// hold: a hub runs the loops it holds one at a time, so while a script
/// runs in one adopted loop's turn the hub's own loop, idle (its turn is
/// over) but on the hub's stack where no other thread can take it (the
/// watchdog gives back only adopted loops), is served by the script's hook
/// as a pinned loop is ([`PinnedLoops`]): its connections and mailbox,
/// never its shard. Its shard's commands get `-BUSY` everywhere meanwhile
/// (`Running::stalled`), as Redis answers every command while busy.
pub trait IdleLoops {
    /// Adds the loops lent to `into`.
    fn idle(&self, into: &mut Vec<usize>);
    /// Serves each once (`first`: its first pass for this script).
    fn serve_idle(&mut self, first: bool);
}

thread_local! {
    /// The loops lent by [`lend_idle`].
    static IDLE: std::cell::Cell<Option<std::ptr::NonNull<dyn IdleLoops>>> =
        const { std::cell::Cell::new(None) };
}

/// Lends `loops`, loops idle on this thread while `f` runs, to the busy
/// passes of the scripts `f` runs (the same guard as [`lend_desk`], for
/// the same reason). Loops lent already (by an enclosing call) stay lent
/// beside them: a pass serves `loops`, then those.
pub fn lend_idle<R>(loops: &mut dyn IdleLoops, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<std::ptr::NonNull<dyn IdleLoops>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            IDLE.with(|d| d.set(self.0));
        }
    }
    /// `this` and the loops lent before.
    struct Chain<'a> {
        this: &'a mut dyn IdleLoops,
        outer: Option<std::ptr::NonNull<dyn IdleLoops>>,
    }
    impl IdleLoops for Chain<'_> {
        fn idle(&self, into: &mut Vec<usize>) {
            self.this.idle(into);
            if let Some(o) = self.outer {
                // SAFETY: lent by the enclosing `lend_idle`, whose borrow
                // outlives this one; reached only through this chain
                // while it is lent (the slot holds the chain).
                unsafe { o.as_ref() }.idle(into);
            }
        }
        fn serve_idle(&mut self, first: bool) {
            self.this.serve_idle(first);
            if let Some(mut o) = self.outer {
                // SAFETY: as in `idle`; `serve_idle` (which took the chain
                // out of the slot) makes the only reference meanwhile.
                unsafe { o.as_mut() }.serve_idle(first);
            }
        }
    }
    let outer = IDLE.with(|d| d.get());
    let mut chain = Chain { this: loops, outer };
    let ptr: std::ptr::NonNull<dyn IdleLoops + '_> = std::ptr::NonNull::from(&mut chain);
    // SAFETY: as in `lend_desk`: only the lifetime bound changes, and the
    // pointer is dereferenced only by `stall_idle` and `serve_idle` on
    // this thread while `f` runs (`Restore` puts the previous value back
    // first).
    let ptr: std::ptr::NonNull<dyn IdleLoops + 'static> = unsafe { std::mem::transmute(ptr) };
    let _restore = Restore(IDLE.with(|d| d.replace(Some(ptr))));
    f()
}

/// A script that `f` runs on another co-hosted loop's shard, by a call
/// from the loop whose desk is lent now ([`lend_desk`]: the caller's,
/// loop `id`): that loop cannot run until the script ends, and the
/// script's loop lends its own desk for it. So the caller's loop is lent
/// as an idle loop ([`lend_idle`]), stalled by a published script (its
/// shard's commands get `-BUSY` everywhere; its keys are not the
/// script's, a WATCH of them is parked) and served at each busy pass:
/// `inbox` (its mailbox, the runtime's) first, then its connections
/// through its desk, taken out of the desk's slot for `f` (and put back
/// after).
pub fn lend_caller<R>(id: usize, inbox: &mut dyn FnMut(), f: impl FnOnce() -> R) -> R {
    struct Restore(Option<std::ptr::NonNull<dyn BusyServe>>, Option<usize>);
    impl Drop for Restore {
        fn drop(&mut self) {
            DESK.with(|d| d.set(self.0));
            DESK_HOME.with(|d| d.set(self.1));
        }
    }
    struct Caller<'a> {
        id: usize,
        inbox: &'a mut dyn FnMut(),
        desk: Option<std::ptr::NonNull<dyn BusyServe>>,
    }
    impl IdleLoops for Caller<'_> {
        fn idle(&self, into: &mut Vec<usize>) {
            into.push(self.id);
        }
        fn serve_idle(&mut self, _first: bool) {
            (self.inbox)();
            if let Some(mut d) = self.desk {
                // SAFETY: lent by the `lend_desk` enclosing this call,
                // whose borrow is alive; out of its slot while `f` runs,
                // so this is the only reference made from it.
                unsafe { d.as_mut() }.serve_busy();
            }
        }
    }
    let restore = Restore(DESK.with(|d| d.take()), DESK_HOME.with(|d| d.take()));
    debug_assert!(restore.1.is_none_or(|h| h == id), "another loop's desk");
    let mut caller = Caller {
        id,
        inbox,
        desk: restore.0,
    };
    let r = lend_idle(&mut caller, f);
    drop(restore);
    r
}

/// Publishes the lent idle loops that published run `p` does not hold
/// itself (its home, its shard or a loop it pinned, served as such) as
/// stalled by it: true if there is any to serve.
fn stall_idle(p: &Running) -> bool {
    let Some(loops) = IDLE.with(|d| d.get()) else {
        return false;
    };
    // Asked with no lock held: `idle` may lend a loop away, which first
    // takes what was parked for it (`watch::release_stalled`, under the
    // list's lock). Until the new list is in, the old one stands.
    let mut now = Vec::new();
    // SAFETY: set by `lend_idle`, whose borrow is alive; a shared
    // reference for this call only (`serve_idle` takes it out of the
    // slot before making a unique one, and neither calls the other).
    unsafe { loops.as_ref() }.idle(&mut now);
    {
        let pinned = p.pinned.lock().unwrap_or_else(|e| e.into_inner());
        now.retain(|s| p.home != Some(*s) && p.shard != Some(*s) && !pinned.contains(s));
    }
    let any = !now.is_empty();
    // Under the list's lock, as WATCH parks (`watch::park`): a loop that
    // leaves the list parks nothing more.
    let _list = p.registry.list();
    *p.stalled.lock().unwrap_or_else(|e| e.into_inner()) = now;
    any
}

/// A busy pass over the lent idle loops (see [`IdleLoops`]).
fn serve_idle(first: bool) {
    // Taken out while it serves: a nested call finds nothing.
    let Some(mut loops) = IDLE.with(|d| d.take()) else {
        return;
    };
    // SAFETY: set by `lend_idle`, whose borrow is alive; the only
    // reference made from it meanwhile, as the slot is empty.
    unsafe { loops.as_mut() }.serve_idle(first);
    IDLE.with(|d| d.set(Some(loops)));
}

/// What runs in a VM, for its hook.
pub enum Kind {
    /// A library's loading code (FUNCTION LOAD, or a VM loading a library).
    Load,
    /// A script, by its SHA-1 (for the log).
    Eval([u8; 40]),
    Function {
        name: String,
        command: Vec<Vec<u8>>,
    },
}

struct Timed {
    kind: Kind,
    started: Instant,
    shard: Option<usize>,
    wrote: bool,
    published: Option<Arc<Running>>,
    /// Runs in place across shards (`in_place`): past the threshold it is
    /// taken back and run again on copies, if it still can be.
    in_place: bool,
    /// ... and it was: raised at every line until the run ends.
    restarting: bool,
    /// Runs by a call from another loop (`by_call`): taken back as one
    /// in place is, to run again as a hop.
    restartable: bool,
    /// A busy pass served the idle loops lent to it already
    /// ([`lend_idle`]; the first visits every connection).
    idle_served: bool,
    /// Holds every shard (`super::every`): see `Running::every`.
    every: bool,
    /// Its server's registry, found at the hook's first call ([`Timed::due`]).
    registry: Option<&'static Registry>,
}

impl Timed {
    /// The registry to publish the run in, if it is unpublished and past
    /// its server's threshold. The registry is the one of the `ShardCtx`
    /// the run runs with (`run::running_ops`), looked up at the first
    /// call (a VM is its thread's, not a server's: `begin` comes before
    /// the run is reachable); a run outside one (none runs so) is never
    /// published.
    fn due(&mut self) -> Option<&'static Registry> {
        if self.published.is_some() {
            return None;
        }
        let registry = match self.registry {
            Some(r) => r,
            None => {
                let r = &super::run::running_ops()?.busy;
                self.registry = Some(r);
                r
            }
        };
        (self.started.elapsed() >= registry.threshold()).then_some(registry)
    }
}

/// A VM's hook state; see the module documentation.
pub struct HookState {
    run: RefCell<Option<Timed>>,
    /// An error raised once and again at every line until the run ends.
    abort: Cell<Option<&'static str>>,
    /// The run was stopped by SHUTDOWN NOSAVE (its records are dropped).
    stopped_for_shutdown: Cell<bool>,
    /// Watches its published run took and had not registered when it
    /// ended (see [`HookState::take_watches`]).
    left_watches: RefCell<Vec<PendingWatch>>,
    /// The hook fires within [`HURRY_INSTRUCTIONS`], once
    /// ([`HookState::after_call`]).
    hurried: Cell<bool>,
    /// When the hook last looked at the run (or the run began).
    looked: Cell<Instant>,
    /// `redis.call`s counted toward the next look at the clock
    /// ([`CALLS_PER_LOOK`]).
    calls: Cell<u32>,
}

/// Lua instructions before the hook's next call once the calls between
/// two of its calls took long ([`HookState::after_call`]): the next one (a
/// loop of calls runs a handful of instructions per call).
const HURRY_INSTRUCTIONS: u32 = 1;
/// `redis.call`s between two looks at the clock ([`HookState::after_call`]).
const CALLS_PER_LOOK: u32 = 8;
/// Time since the hook's last call after which a `redis.call` hurries its
/// next one: about what [`HOOK_INSTRUCTIONS`] of plain Lua take.
const LOOK_AFTER: Duration = Duration::from_millis(2);

impl HookState {
    /// Creates the state and installs its hook on `lua`.
    pub fn install(lua: &Lua) -> mlua::Result<Rc<HookState>> {
        let st = Rc::new(HookState {
            run: RefCell::new(None),
            abort: Cell::new(None),
            stopped_for_shutdown: Cell::new(false),
            left_watches: RefCell::new(Vec::new()),
            hurried: Cell::new(false),
            looked: Cell::new(Instant::now()),
            calls: Cell::new(0),
        });
        set_hook(lua, &st, false);
        Ok(st)
    }

    /// A run begins (`shard`: the shard it holds, if it runs on one).
    pub fn begin(&self, kind: Kind, shard: Option<usize>) {
        self.looked.set(Instant::now());
        *self.run.borrow_mut() = Some(Timed {
            kind,
            started: Instant::now(),
            shard,
            wrote: false,
            published: None,
            in_place: false,
            restarting: false,
            restartable: false,
            idle_served: false,
            every: false,
            registry: None,
        });
    }

    /// The run that began holds every shard under its transaction's
    /// locks, reaching each from its thread (`super::every`): published,
    /// it takes WATCHes of any shard's keys ([`Registry::watch_while_busy`]).
    pub fn every(&self) {
        if let Some(t) = self.run.borrow_mut().as_mut() {
            t.every = true;
        }
    }

    /// The run that began runs in place across shards: rather than be
    /// published past the threshold, holding whole shards (their loops
    /// pinned, whose clients then only get `-BUSY`, see [`lend_pinned`]),
    /// it is abandoned if it can still be taken back
    /// (`run::abandon_for_busy`) and runs again on copies, where it is
    /// published as any script across shards, holding its keys only.
    pub fn in_place(&self) {
        if let Some(t) = self.run.borrow_mut().as_mut() {
            t.in_place = true;
        }
    }

    /// The run that began runs by a call from another loop (`by_call`):
    /// past the threshold it is abandoned, as a run in place is, if it
    /// can still be taken back, and runs again as a hop.
    pub fn restartable(&self) {
        if let Some(t) = self.run.borrow_mut().as_mut() {
            t.restartable = true;
        }
    }

    /// The run ended: unpublished, and the hook back to counting. True if
    /// SHUTDOWN NOSAVE stopped it.
    pub fn end(self: &Rc<Self>, lua: &Lua) -> bool {
        let t = self.run.borrow_mut().take();
        if let Some(p) = t.and_then(|t| t.published) {
            CURRENT.with(|c| {
                let mut c = c.borrow_mut();
                if c.as_ref().is_some_and(|r| Arc::ptr_eq(r, &p)) {
                    *c = None;
                }
            });
            p.registry.unpublish(&p);
            // Nothing is pushed any more (`watch_while_busy` finds it
            // under the list's lock).
            let mut w = p.watches.lock().unwrap_or_else(|e| e.into_inner());
            self.left_watches.borrow_mut().append(&mut w);
            drop(w);
            // The keys parked for its home shard: registered by its loop
            // right after the step that ran it (`watch`).
            watch::leave_parked(&p);
        }
        // Both reset, not `||`'s first: a run killed at a hurried hook
        // call left `hurried` set, and the VM's later runs never hurried
        // again (`hurry_if_late` sees it set), so a loop of quick calls was
        // published only at the hook's plain interval, seconds late in a
        // debug build (Redis's Tcl unit/scripting, "Timedout scripts and
        // unblocked command", failed so with the shards apart).
        let aborted = self.abort.take().is_some();
        let hurried = self.hurried.replace(false);
        if aborted || hurried {
            set_hook(lua, self, false);
        }
        self.stopped_for_shutdown.take()
    }

    /// The script is about to run a write command: false if it was killed
    /// meanwhile (the command must not run; the hook raises the kill).
    pub fn note_write(&self) -> bool {
        let mut run = self.run.borrow_mut();
        let Some(t) = run.as_mut() else { return true };
        t.wrote = true;
        match &t.published {
            None => true,
            Some(p) => {
                match p
                    .state
                    .compare_exchange(CLEAN, WROTE, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => true,
                    Err(s) => s != KILLED_STATE,
                }
            }
        }
    }

    /// The watches of keys on its shard that other clients made while
    /// the run is published ([`Registry::watch_while_busy`]) and, once it ended,
    /// those it had not taken: the caller registers them on the shard
    /// ([`register_watches`]) before the script's next command, and when
    /// it ends. Cheap while nothing waits (a flag test).
    #[inline]
    pub fn take_watches(&self) -> Option<Vec<PendingWatch>> {
        let run = self.run.borrow();
        match run.as_ref() {
            Some(t) => match &t.published {
                Some(p) if p.watching.load(Ordering::Acquire) => {
                    let mut w = p.watches.lock().unwrap_or_else(|e| e.into_inner());
                    p.watching.store(false, Ordering::Release);
                    Some(std::mem::take(&mut *w))
                }
                _ => None,
            },
            None => {
                drop(run);
                let left = std::mem::take(&mut *self.left_watches.borrow_mut());
                (!left.is_empty()).then_some(left)
            }
        }
    }

    /// The error of a killed run (raised by `redis.call` when a kill won
    /// the race against a write).
    pub fn killed_error() -> mlua::Error {
        reply_error(KILLED.as_bytes())
    }

    /// After every `redis.call`: when the calls since the hook's last call
    /// took [`LOOK_AFTER`] or more (the clock is read every
    /// [`CALLS_PER_LOOK`] calls), its next call comes within
    /// [`HURRY_INSTRUCTIONS`] rather than [`HOOK_INSTRUCTIONS`]. The hook
    /// counts Lua instructions, as Redis's, and a call costs a few: a loop
    /// of slow calls (KEYS on a large keyspace, INFO or CLIENT LIST, any
    /// call across shards in a debug build: 0.1 ms or more each) would run
    /// 100,000 instructions, seconds, between two calls of the hook, so a
    /// run past the threshold would be published busy seconds late, its
    /// loop's clients served and a SCRIPT KILL heard seconds apart. Once
    /// the hook has looked, its usual interval comes back.
    #[inline]
    pub fn after_call(self: &Rc<Self>, lua: &Lua) {
        let n = self.calls.get().wrapping_add(1);
        self.calls.set(n);
        if n.is_multiple_of(CALLS_PER_LOOK) {
            self.hurry_if_late(lua);
        }
    }

    #[cold]
    fn hurry_if_late(self: &Rc<Self>, lua: &Lua) {
        if self.hurried.get() || self.abort.get().is_some() || self.run.borrow().is_none() {
            return;
        }
        if self.looked.get().elapsed() >= LOOK_AFTER {
            self.hurried.set(true);
            let st = self.clone();
            let triggers = HookTriggers::new().every_nth_instruction(HURRY_INSTRUCTIONS);
            // Setting a hook on the main thread only fails for a dead state.
            let _ = lua.set_hook(triggers, move |lua, _| st.check(lua));
        }
    }

    fn check(self: &Rc<Self>, lua: &Lua) -> mlua::Result<VmState> {
        self.looked.set(Instant::now());
        if let Some(msg) = self.abort.get() {
            return Err(reply_error(msg.as_bytes()));
        }
        let serve = match self.run.borrow_mut().as_mut() {
            Some(t) if !matches!(t.kind, Kind::Load) => {
                if let Some(registry) = t.due() {
                    publish_or_restart(t, registry);
                }
                let first_idle =
                    t.published.is_some() && !std::mem::replace(&mut t.idle_served, true);
                t.published.clone().map(|p| (p, first_idle))
            }
            _ => None,
        };
        if !matches!(
            self.run.borrow().as_ref().map(|t| &t.kind),
            None | Some(Kind::Load)
        ) {
            super::run::snapshot_pass();
        }
        if let Some((p, first_idle)) = serve {
            // Before the kill check: a SCRIPT KILL served now stops the
            // script at once. The loops it pinned or stalls are published
            // first, so their own dispatch refuses them from this pass on.
            serve_pinned(&p, true);
            let idle = stall_idle(&p);
            serve_while_busy();
            serve_pinned(&p, false);
            if idle {
                serve_idle(first_idle);
            }
        }
        let mut run = self.run.borrow_mut();
        let Some(t) = run.as_mut() else {
            return Ok(VmState::Continue);
        };
        let abort = match &t.kind {
            Kind::Load => (t.started.elapsed() > LOAD_TIMEOUT).then_some(LOAD_TIMEOUT_TEXT),
            Kind::Eval(_) | Kind::Function { .. } => {
                if let Some(registry) = t.due() {
                    publish_or_restart(t, registry);
                }
                if t.restarting {
                    // Taken back (`publish_or_restart`): raised at every
                    // line until the run ends, as a kill is.
                    Some(super::wide::RESTART_TEXT)
                } else if t
                    .published
                    .as_ref()
                    .is_some_and(|p| p.registry.shutdown.load(Ordering::Acquire))
                {
                    self.stopped_for_shutdown.set(true);
                    Some(KILLED)
                } else {
                    t.published
                        .as_ref()
                        .is_some_and(|p| p.state.load(Ordering::Acquire) == KILLED_STATE)
                        .then_some(KILLED)
                }
            }
        };
        drop(run);
        match abort {
            None => {
                if self.hurried.replace(false) {
                    set_hook(lua, self, false);
                }
                Ok(VmState::Continue)
            }
            Some(msg) => {
                if matches!(msg, KILLED) {
                    crate::persist::log(true, "Lua script killed by user with SCRIPT KILL.");
                }
                self.abort.set(Some(msg));
                // The every-line hook replaces a hurried one.
                self.hurried.set(false);
                set_hook(lua, self, true);
                Err(reply_error(msg.as_bytes()))
            }
        }
    }
}

/// A run past the threshold: published, unless it runs in place and can
/// be taken back (then `restarting`, which `check` raises).
#[cold]
fn publish_or_restart(t: &mut Timed, registry: &'static Registry) {
    if (t.in_place || t.restartable) && super::run::abandon_for_busy() {
        t.restarting = true;
        return;
    }
    publish(t, registry);
}

#[cold]
fn publish(t: &mut Timed, registry: &'static Registry) {
    let (eval, name, command) = match &t.kind {
        Kind::Function { name, command } => (false, name.clone(), command.clone()),
        _ => (true, String::new(), Vec::new()),
    };
    let r = Arc::new(Running {
        registry,
        eval,
        name,
        command,
        started: t.started,
        shard: t.shard,
        home: DESK_HOME.with(|d| d.get()),
        pinned: Mutex::new(Vec::new()),
        stalled: Mutex::new(Vec::new()),
        locked: LOCKED.with(|l| l.borrow().clone()),
        in_place: t.in_place,
        every: t.every,
        state: AtomicU8::new(if t.wrote { WROTE } else { CLEAN }),
        watches: Mutex::new(Vec::new()),
        watching: AtomicBool::new(false),
        parked: Mutex::new(Vec::new()),
    });
    // Redis's scriptInterrupt, word for word.
    let script = match &t.kind {
        Kind::Eval(sha) => String::from_utf8_lossy(sha).into_owned(),
        Kind::Function { name, .. } => name.clone(),
        Kind::Load => String::new(),
    };
    crate::persist::log(
        true,
        &format!(
            "Slow script detected: still in execution after {} milliseconds. You can try \
             killing the script using the {} command. Script name is: {script}.",
            t.started.elapsed().as_millis(),
            if eval { "SCRIPT KILL" } else { "FUNCTION KILL" },
        ),
    );
    registry.publish(r.clone());
    CURRENT.with(|c| *c.borrow_mut() = Some(r.clone()));
    t.published = Some(r);
}

/// (Re)installs the hook: every [`HOOK_INSTRUCTIONS`] instructions, or
/// at every line once a run is being aborted.
fn set_hook(lua: &Lua, st: &Rc<HookState>, every_line: bool) {
    let triggers = if every_line {
        HookTriggers::new().every_line().every_nth_instruction(1000)
    } else {
        HookTriggers::new().every_nth_instruction(HOOK_INSTRUCTIONS)
    };
    let st = st.clone();
    // Setting a hook on the main thread only fails for a dead state.
    let _ = lua.set_hook(triggers, move |lua, _| st.check(lua));
}

#[cfg(test)]
mod tests;
