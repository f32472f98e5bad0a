//! What other threads see of one server's long scripts: its
//! [`Registry`] (in its `Ops`) and each published run ([`Running`]); see
//! the module documentation of `busy`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::watch::PendingWatch;
use super::{BUSY_EVAL, BUSY_FUNCTION, CLEAN, KILLED_STATE, UNKILLABLE, WROTE};
use crate::error::CmdError;

/// A script running past the threshold, as other threads see it.
pub struct Running {
    /// The server's registry it is published in.
    pub(super) registry: &'static Registry,
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
    pub(super) pinned: Mutex<Vec<usize>>,
    /// Loops the script stops without holding their shards: a hub's own
    /// loop while the script runs on a loop the hub adopted (see
    /// [`lend_idle`]). Their commands get `-BUSY` as `home`'s do, but a
    /// WATCH of their keys is parked ([`Registry::watch_stopped`]). Changed under
    /// the list's lock.
    pub(super) stalled: Mutex<Vec<usize>>,
    /// Shards its transaction holds under locks while it runs (a script
    /// on every shard, `super::every`, or inside MULTI/EXEC; see
    /// [`under_locks`]): their commands get `-BUSY` as `home`'s do, and
    /// what waits behind those locks is answered `-BUSY` by their loops
    /// ([`Registry::locked_busy`]). A WATCH of their keys is not the script's to
    /// take (it waits for the locks).
    pub(super) locked: Vec<usize>,
    /// Runs in place (`super::in_place`): it holds the real shards `home`
    /// and `pinned`, whose keys WATCH hands it ([`Registry::watch_while_busy`]).
    pub(super) in_place: bool,
    /// Holds every shard under its transaction's locks, each reached from
    /// its thread (`super::every`): WATCH hands it the keys of any shard,
    /// which it registers there before its next command.
    pub(super) every: bool,
    /// CLEAN, WROTE or KILLED_STATE.
    pub(super) state: AtomicU8,
    /// WATCHes of keys on `shard` answered while it runs (see
    /// [`Registry::watch_while_busy`]), not yet registered on the shard.
    pub(super) watches: Mutex<Vec<PendingWatch>>,
    /// `watches` is not empty (one load before each of the script's
    /// commands).
    pub(super) watching: AtomicBool,
    /// WATCHes of keys of its home shard while it holds none (it runs on
    /// gathered copies), by shard: registered there once it ends (see
    /// [`Registry::watch_stopped`]).
    pub(super) parked: Mutex<Vec<(usize, PendingWatch)>>,
}

impl Running {
    pub(super) fn stops_loop(&self, s: usize) -> bool {
        let has = |m: &Mutex<Vec<usize>>| m.lock().unwrap_or_else(|e| e.into_inner()).contains(&s);
        self.shard == Some(s) || self.home == Some(s) || has(&self.pinned) || has(&self.stalled)
    }

    /// Whether a command that needs shards `s` must wait for it: it holds
    /// or stops one of them (its shard, its loop, a loop it pinned or
    /// stalls, a shard its transaction locks).
    pub(super) fn stops_any(&self, s: &[usize]) -> bool {
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
    pub(super) fn holds(&self, s: usize) -> bool {
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
    pub(super) list: Mutex<Vec<Arc<Running>>>,
    /// `list`'s length (a fast check for dispatch).
    pub(super) count: AtomicUsize,
    /// Scripts running in [`under_locks`] now, on every thread.
    pub(super) under_locks: AtomicUsize,
    /// Set by SHUTDOWN NOSAVE: every busy script stops at its next hook
    /// call.
    pub(super) shutdown: AtomicBool,
    /// `busy-reply-threshold` in milliseconds (set from the configuration).
    pub(super) threshold_ms: AtomicU64,
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

    pub(super) fn threshold(&self) -> Duration {
        Duration::from_millis(self.threshold_ms.load(Ordering::Relaxed))
    }

    pub(super) fn list(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Running>>> {
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
    pub(super) fn publish(&self, r: Arc<Running>) {
        let mut list = self.list();
        list.push(r);
        self.count.store(list.len(), Ordering::Relaxed);
    }

    /// Takes published run `p` out of the list (it ended).
    pub(super) fn unpublish(&self, p: &Arc<Running>) {
        let mut list = self.list();
        list.retain(|r| !Arc::ptr_eq(r, p));
        self.count.store(list.len(), Ordering::Relaxed);
    }
}

/// A busy function: its name, its command and milliseconds so far.
pub type RunningFunction = (String, Vec<Vec<u8>>, u64);
