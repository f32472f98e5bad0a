//! A call on another shard's thread, waited for: the runtime side of
//! `commands::script::every` (which argues why the wait always ends).
//!
//! A script that holds every shard under whole-shard write locks runs in
//! a job on its home shard; each `redis.call` for another shard `s` runs
//! here ([`Calls::call`]):
//! - by a call, when `s` is co-hosted on this thread and lendable
//!   (`cohost::with_worker`), as a script run in place reaches it;
//! - else it is *posted* in `s`'s slot (a flag, a mutex, the closure's
//!   address) and `s`'s doorbell rung; whichever thread runs `s` runs the
//!   call at the top of its next turn ([`Calls::serve`], from
//!   `sched::serve`), and wakes the caller. The caller waits on a
//!   condition variable, and at each tick ([`TICK`]) tries the call
//!   again itself in case `s` became lendable here (a seat the watchdog
//!   held, a worker adopted meanwhile), or on its shard at the shutdown
//!   gate if its worker stopped there for a SHUTDOWN (`Gate::with_parked`:
//!   the script ends at its next hook call, and its worker only arrives
//!   then): whoever takes the posted call out of the slot runs it, once.
//!
//! While it waits, a caller whose script is published busy serves its
//! loop's desk at each tick (`commands::script::busy::serve_while_waiting`,
//! what its hook would do): its clients are answered `-BUSY`, SCRIPT KILL
//! and SHUTDOWN NOSAVE heard. The desk touches the loop's connections
//! and mailbox only, nothing the posted closure borrows.
//!
//! Why the closure may borrow the caller's stack: the caller does not
//! return before the call ran (it waits for `done`), as a scoped thread's
//! parent waits for it; the closure runs shard code only (a command, an
//! undo copy, the keyspace pieces), no Lua, and the caller's thread
//! touches nothing the closure borrows meanwhile.
//!
//! Cost: per turn of every worker, one relaxed load of its slot's flag
//! (`Worker::reach_posted`, kept from its start).
//! Per call posted: a mutex, a doorbell and a wake-up each way.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use commands::ThreadStats;
use engine::Shard;

use super::super::mailbox::Doorbell;
use super::super::shutdown::Gate;
use super::cohost;

/// How often a waiting caller looks again whether it can run the call
/// itself (see the module docs).
const TICK: Duration = Duration::from_millis(1);

/// A closure of the caller's, borrowed for the length of its call.
struct Posted {
    f: *mut (dyn FnMut(&mut Shard, &ThreadStats) + 'static),
    done: Arc<Done>,
}

// SAFETY: the closure is only run while its caller waits for `done` (see
// the module docs), by one thread at a time (taken out of the slot under
// its mutex).
unsafe impl Send for Posted {}

#[derive(Default)]
struct Done {
    ran: Mutex<bool>,
    cv: Condvar,
}

#[derive(Default)]
struct Slot {
    posted: AtomicBool,
    call: Mutex<Option<Posted>>,
}

/// Every shard's slot, their doorbells, and the shutdown gate (where a
/// shard waits once its worker stopped for a shutdown).
pub struct Calls {
    slots: Box<[Slot]>,
    bells: Arc<Vec<Doorbell>>,
    gate: Arc<Gate>,
}

impl Calls {
    pub fn new(bells: Arc<Vec<Doorbell>>, gate: Arc<Gate>) -> Self {
        Calls {
            slots: (0..bells.len()).map(|_| Slot::default()).collect(),
            bells,
            gate,
        }
    }

    /// Takes the call posted for `s`, if any, and runs it on `shard`.
    fn run_posted(&self, s: usize, shard: &mut Shard, stats: &ThreadStats) -> bool {
        let slot = &self.slots[s];
        let posted = slot.call.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(p) = posted else {
            return false;
        };
        slot.posted.store(false, Ordering::Relaxed);
        // SAFETY: its caller waits for `done` (set below), so the closure
        // and what it borrows are alive; taken out once, so not aliased.
        let f = unsafe { &mut *p.f };
        f(shard, stats);
        let mut ran = p.done.ran.lock().unwrap_or_else(|e| e.into_inner());
        *ran = true;
        p.done.cv.notify_one();
        true
    }
}

impl commands::script::every::Reach for Calls {
    fn call(&self, home: usize, s: usize, f: &mut dyn FnMut(&mut Shard, &ThreadStats)) {
        let lent = cohost::with_worker(s, home, |w| {
            engine::alloc::enter_shard(s);
            f(&mut w.core.shard, &w.core.stats)
        });
        // Or stopped at the shutdown gate: see below (its loop's
        // statistics are not reachable there: none).
        if lent.is_some()
            || self
                .gate
                .with_parked(s, |sh| f(sh, &ThreadStats::default()))
        {
            engine::alloc::enter_shard(home);
            return;
        }
        let done = Arc::new(Done::default());
        // SAFETY: lifetime erased only for the slot; this function does
        // not return before the call ran (the loop below), see the
        // module docs.
        let f: *mut (dyn FnMut(&mut Shard, &ThreadStats) + 'static) = unsafe {
            std::mem::transmute::<*mut (dyn FnMut(&mut Shard, &ThreadStats) + '_), _>(f as *mut _)
        };
        let slot = &self.slots[s];
        {
            let mut call = slot.call.lock().unwrap_or_else(|e| e.into_inner());
            debug_assert!(call.is_none(), "one script holds every shard");
            *call = Some(Posted {
                f,
                done: done.clone(),
            });
            slot.posted.store(true, Ordering::Release);
        }
        self.bells[s].wake();
        let mut ran = done.ran.lock().unwrap_or_else(|e| e.into_inner());
        while !*ran {
            let (g, _) = done
                .cv
                .wait_timeout(ran, TICK)
                .unwrap_or_else(|e| e.into_inner());
            ran = g;
            if *ran {
                break;
            }
            drop(ran);
            // The script may be published busy: its loop's clients are
            // served meanwhile, as its hook serves them (the call runs
            // shard code only, nothing of the loop's).
            commands::script::busy::serve_while_waiting();
            // Co-hosted here by now: run it here (if still posted).
            let _ = cohost::with_worker(s, home, |w| {
                engine::alloc::enter_shard(s);
                self.run_posted(s, &mut w.core.shard, &w.core.stats)
            });
            // Its worker stopped at the shutdown gate (SHUTDOWN while this
            // script runs; it stops the script at its next hook call):
            // its shard waits there, untouched until this worker arrives.
            self.gate.with_parked(s, |sh| {
                engine::alloc::enter_shard(s);
                self.run_posted(s, sh, &ThreadStats::default());
            });
            engine::alloc::enter_shard(home);
            ran = done.ran.lock().unwrap_or_else(|e| e.into_inner());
        }
    }

    fn serve(&self, s: usize, shard: &mut Shard, stats: &ThreadStats) {
        if self.slots[s].posted.load(Ordering::Acquire) {
            self.run_posted(s, shard, stats);
        }
    }

    fn posted(&self, s: usize) -> &AtomicBool {
        &self.slots[s].posted
    }
}
