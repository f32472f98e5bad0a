//! A VM's instruction-count hook ([`HookState`]): what a run is
//! ([`HookState::begin`]), its publication past its server's threshold,
//! its busy passes, and SCRIPT KILL, SHUTDOWN NOSAVE and the FUNCTION LOAD
//! time limit raised inside it (see the module documentation of `busy`).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mlua::{HookTriggers, Lua, VmState};

use super::super::vm::reply_error;
use super::lent::{serve_idle, serve_pinned, serve_while_busy, stall_idle, DESK_HOME};
use super::watch::{self, PendingWatch};
use super::{
    Registry, Running, CLEAN, CURRENT, HOOK_INSTRUCTIONS, KILLED, KILLED_STATE, LOAD_TIMEOUT,
    LOAD_TIMEOUT_TEXT, LOCKED, WROTE,
};

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
    /// Holds every shard (`super::super::every`): see `Running::every`.
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
                let r = &super::super::run::running_ops()?.busy;
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
    pub(super) abort: Cell<Option<&'static str>>,
    /// The run was stopped by SHUTDOWN NOSAVE (its records are dropped).
    stopped_for_shutdown: Cell<bool>,
    /// Watches its published run took and had not registered when it
    /// ended (see [`HookState::take_watches`]).
    left_watches: RefCell<Vec<PendingWatch>>,
    /// The hook fires within [`HURRY_INSTRUCTIONS`], once
    /// ([`HookState::after_call`]).
    pub(super) hurried: Cell<bool>,
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
    /// locks, reaching each from its thread (`super::super::every`): published,
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
            super::super::run::snapshot_pass();
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
                    Some(super::super::wide::RESTART_TEXT)
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
    if (t.in_place || t.restartable) && super::super::run::abandon_for_busy() {
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
