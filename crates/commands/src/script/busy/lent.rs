//! What the runtime lends a published run's busy passes, each for the
//! call that may run a script: the script's own loop (its desk,
//! [`lend_desk`]), the loops a run in place pinned ([`lend_pinned`]),
//! loops it stops idle ([`lend_idle`], [`lend_caller`]), and a
//! transaction's loop for a script under its locks ([`under_locks`]).
//! Each is a thread-local pointer set and cleared by a guard (see the
//! module documentation of `busy`).

use std::sync::atomic::{AtomicUsize, Ordering};

use super::{Registry, Running, CURRENT, LOCKED};

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
    pub(super) static DESK_HOME: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
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
pub(super) fn serve_while_busy() {
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
pub(super) fn serve_pinned(p: &Running, publish_only: bool) {
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
pub(super) fn stall_idle(p: &Running) -> bool {
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
pub(super) fn serve_idle(first: bool) {
    // Taken out while it serves: a nested call finds nothing.
    let Some(mut loops) = IDLE.with(|d| d.take()) else {
        return;
    };
    // SAFETY: set by `lend_idle`, whose borrow is alive; the only
    // reference made from it meanwhile, as the slot is empty.
    unsafe { loops.as_mut() }.serve_idle(first);
    IDLE.with(|d| d.set(Some(loops)));
}
