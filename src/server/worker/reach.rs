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
use std::time::{Duration, Instant};

use commands::coord::ClientRegistry as Clients;
use commands::script::every::Lease;
use commands::ThreadStats;
use engine::Shard;

use super::super::mailbox::Doorbell;
use super::super::shutdown::Gate;
use super::cohost;

/// How often a waiting caller looks again whether it can run the call
/// itself (see the module docs).
const TICK: Duration = Duration::from_millis(1);

/// How long a script's job waits for the lends it asked for before it
/// withdraws them and reaches the shards by calls instead (see
/// `commands::script::lend`: only a layout that changed under it, a
/// worker moved to a hub since the script's dispatch, can keep a lend
/// from being made; a loop's turn ends well within it). Also how long a
/// lend made at a lock's grant waits for the job to take it before it is
/// withdrawn (`Reach::hold_lent`: the job's thread hears of the grant in
/// its next turn).
const LEND_WAIT: Duration = Duration::from_millis(100);

/// A closure of the caller's, borrowed for the length of its call.
struct Posted {
    f: *mut (dyn FnMut(&mut Shard, &ThreadStats, &dyn Clients) + 'static),
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
    lending: Lending,
}

/// A lend of the slot's shard to a script's job on another thread
/// (`commands::script::lend`): asked for by the job, made by the thread
/// running the shard at the top of its turn, which then waits for `back`.
#[derive(Default)]
struct Lending {
    st: Mutex<LendState>,
    cv: Condvar,
}

#[derive(Default)]
struct LendState {
    /// Asked for and not made yet (the asker may withdraw it).
    wanted: bool,
    /// Made: what the borrower reaches, until `back`.
    lease: Option<Lease>,
    /// The borrower took the lease (a lend made at a grant is withdrawn
    /// if it is not taken within [`LEND_WAIT`]).
    taken: bool,
    /// The borrower is done with it.
    back: bool,
    /// Given back at the script's end: the lending thread releases the
    /// transaction's locks on its shard itself.
    done: bool,
    /// The borrower's transaction.
    tx: u64,
}

// SAFETY: a lease is only dereferenced by the borrower while the lending
// thread waits for `back` (see `Lending`); the state moves between the two
// threads under its mutex.
unsafe impl Send for LendState {}

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
    fn run_posted(
        &self,
        s: usize,
        shard: &mut Shard,
        stats: &ThreadStats,
        clients: &dyn Clients,
    ) -> bool {
        let slot = &self.slots[s];
        let posted = slot.call.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(p) = posted else {
            return false;
        };
        slot.posted.store(false, Ordering::Relaxed);
        // SAFETY: its caller waits for `done` (set below), so the closure
        // and what it borrows are alive; taken out once, so not aliased.
        let f = unsafe { &mut *p.f };
        f(shard, stats, clients);
        let mut ran = p.done.ran.lock().unwrap_or_else(|e| e.into_inner());
        *ran = true;
        p.done.cv.notify_one();
        true
    }
}

impl Calls {
    /// On shard `s`'s thread, at the top of its turn: makes a lend asked
    /// for (`Reach::lend`), if any, and waits until it is given back,
    /// touching none of what it lent (see `commands::script::lend`, which
    /// argues why the wait ends). Returns the borrower's transaction if
    /// the lend was given back at its script's end: this thread releases
    /// its locks now.
    fn lend_here(
        &self,
        s: usize,
        shard: &mut Shard,
        stats: &ThreadStats,
        clients: &dyn Clients,
    ) -> Option<u64> {
        let slot = &self.slots[s];
        {
            let call = slot.call.lock().unwrap_or_else(|e| e.into_inner());
            if call.is_none() {
                slot.posted.store(false, Ordering::Relaxed);
            }
        }
        let l = &slot.lending;
        let mut st = l.st.lock().unwrap_or_else(|e| e.into_inner());
        if !st.wanted {
            return None;
        }
        st.wanted = false;
        // SAFETY: this thread waits below until the borrower gives it
        // back, touching none of the three meanwhile.
        st.lease = Some(unsafe { Lease::new(shard, stats, clients) });
        l.cv.notify_all();
        while !st.back {
            st = l.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        let done = st.done.then_some(st.tx);
        *st = LendState::default();
        done
    }
}

impl commands::script::every::Reach for Calls {
    fn call(
        &self,
        home: usize,
        s: usize,
        f: &mut dyn FnMut(&mut Shard, &ThreadStats, &dyn Clients),
    ) {
        let lent = cohost::with_worker(s, home, |w| {
            engine::alloc::enter_shard(s);
            f(&mut w.core.shard, &w.core.stats, &w.conns)
        });
        // Or stopped at the shutdown gate: see below (its loop's
        // statistics are not reachable there: none).
        if lent.is_some()
            || self
                .gate
                .with_parked(s, |sh| f(sh, &ThreadStats::default(), &cohost::NoClients))
        {
            engine::alloc::enter_shard(home);
            return;
        }
        let done = Arc::new(Done::default());
        // SAFETY: lifetime erased only for the slot; this function does
        // not return before the call ran (the loop below), see the
        // module docs.
        let f: *mut (dyn FnMut(&mut Shard, &ThreadStats, &dyn Clients) + 'static) = unsafe {
            std::mem::transmute::<*mut (dyn FnMut(&mut Shard, &ThreadStats, &dyn Clients) + '_), _>(
                f as *mut _,
            )
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
                self.run_posted(s, &mut w.core.shard, &w.core.stats, &w.conns)
            });
            // Its worker stopped at the shutdown gate (SHUTDOWN while this
            // script runs; it stops the script at its next hook call):
            // its shard waits there, untouched until this worker arrives.
            self.gate.with_parked(s, |sh| {
                engine::alloc::enter_shard(s);
                self.run_posted(s, sh, &ThreadStats::default(), &cohost::NoClients);
            });
            engine::alloc::enter_shard(home);
            ran = done.ran.lock().unwrap_or_else(|e| e.into_inner());
        }
    }

    fn serve(
        &self,
        s: usize,
        shard: &mut Shard,
        stats: &ThreadStats,
        clients: &dyn Clients,
    ) -> Option<u64> {
        if self.slots[s].posted.load(Ordering::Acquire)
            && !self.run_posted(s, shard, stats, clients)
        {
            return self.lend_here(s, shard, stats, clients);
        }
        None
    }

    fn lend_at_grant(
        &self,
        s: usize,
        tx: u64,
        shard: &mut Shard,
        stats: &ThreadStats,
        clients: &dyn Clients,
    ) -> bool {
        let l = &self.slots[s].lending;
        let mut st = l.st.lock().unwrap_or_else(|e| e.into_inner());
        if st.lease.is_some() {
            // INVARIANT: one lend per shard, and this transaction holds it.
            debug_assert!(false, "a lend at a grant while lent");
            return false;
        }
        // (Asked for already by a job that heard of the grant first: made
        // here, as its thread's turn would make it.)
        *st = LendState {
            tx,
            ..LendState::default()
        };
        // SAFETY: this thread sends the grant, then waits in `hold_lent`
        // until the borrower gives it back (or it is withdrawn untaken),
        // touching none of the three meanwhile.
        st.lease = Some(unsafe { Lease::new(shard, stats, clients) });
        l.cv.notify_all();
        true
    }

    fn hold_lent(&self, s: usize) -> bool {
        let l = &self.slots[s].lending;
        let mut st = l.st.lock().unwrap_or_else(|e| e.into_inner());
        let deadline = Instant::now() + LEND_WAIT;
        while !st.taken && !st.back {
            let now = Instant::now();
            if now >= deadline {
                // Not taken: withdrawn (the job, if it comes, asks again).
                break;
            }
            st =
                l.cv.wait_timeout(st, deadline - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
        }
        if st.taken {
            while !st.back {
                st = l.cv.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        }
        let done = st.taken && st.done;
        *st = LendState::default();
        done
    }

    fn decline(&self, s: usize) {
        let l = &self.slots[s].lending;
        let mut st = l.st.lock().unwrap_or_else(|e| e.into_inner());
        if st.lease.is_some() && !st.taken {
            st.back = true;
            l.cv.notify_all();
        }
    }

    fn lend(&self, home: usize, tx: u64, shards: &[usize], leases: &mut Vec<Lease>) -> bool {
        leases.clear();
        // Co-hosted here, or stopped at the shutdown gate: reached by
        // calls (a lend here would wait for itself).
        let here = |s: usize| {
            let here =
                cohost::with_worker(s, home, |_| ()).is_some() || self.gate.with_parked(s, |_| ());
            engine::alloc::enter_shard(home);
            here
        };
        if shards.iter().any(|&s| here(s)) {
            for &s in shards {
                self.decline(s);
            }
            return false;
        }
        // Every lend asked for first, so the threads stop at once, then
        // each waited for; one made at its grant is taken at once.
        for &s in shards {
            let slot = &self.slots[s];
            {
                let mut st = slot.lending.st.lock().unwrap_or_else(|e| e.into_inner());
                if st.lease.is_some() {
                    debug_assert!(!st.taken && !st.back && st.tx == tx, "one lend per shard");
                    st.taken = true;
                    continue;
                }
                debug_assert!(!st.wanted, "one lend per shard");
                st.wanted = true;
                st.back = false;
                st.tx = tx;
            }
            {
                // Under the call's mutex, as a call is posted (`lend_here`
                // lowers the flag under it).
                let _call = slot.call.lock().unwrap_or_else(|e| e.into_inner());
                slot.posted.store(true, Ordering::Release);
            }
            self.bells[s].wake();
        }
        let deadline = Instant::now() + LEND_WAIT;
        let mut made = true;
        for &s in shards {
            let l = &self.slots[s].lending;
            let mut st = l.st.lock().unwrap_or_else(|e| e.into_inner());
            while st.lease.is_none() {
                if Instant::now() >= deadline || here(s) {
                    made = false;
                    break;
                }
                st =
                    l.cv.wait_timeout(st, TICK)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
            }
            if !made {
                break;
            }
            if let Some(lease) = st.lease {
                st.taken = true;
                leases.push(lease);
            }
        }
        if !made {
            // All or none: each lend not made yet is withdrawn (its
            // thread finds nothing to make), each made one given back.
            leases.clear();
            for &s in shards {
                let mut st = self.slots[s]
                    .lending
                    .st
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                if st.wanted {
                    st.wanted = false;
                } else {
                    // Made (`lend_here` makes it under this mutex).
                    drop(st);
                    self.give_back(s, false);
                }
            }
        }
        made
    }

    fn give_back(&self, s: usize, done: bool) -> bool {
        let l = &self.slots[s].lending;
        let mut st = l.st.lock().unwrap_or_else(|e| e.into_inner());
        st.back = true;
        st.done = done;
        l.cv.notify_all();
        done
    }

    fn posted(&self, s: usize) -> &AtomicBool {
        &self.slots[s].posted
    }
}
