//! A hub's own worker lent to an idle thread while a long script runs on
//! a loop the hub adopted (issue 23 point 5: "a running script freezes
//! only the shards it holds: clients of other shards, on any thread, keep
//! being served"), and a thread's wait for its worker (`Hosts::wait_back`).
//!
//! The watchdog gives a stuck hub's adopted loops back to their threads,
//! but the hub's own worker lives on the hub's stack and cannot leave it
//! for good. Its turn in the round is over, though, so it is idle while
//! the script spins in an adopted loop's turn; and the thread of the loop
//! running the script is idle too: it sleeps in `Hosts::wait_back` until
//! its worker comes back, which cannot happen before the turn ends (the
//! hub holds its seat's lock). So at the script's first busy pass the hub
//! lends its own worker to that thread (`HubLender::loan_own`, through
//! `worker::cohost::loan_own`), which runs it as its own
//! (`Worker::step_solo`) until the hub wants it back at the end of the
//! round's adopted turns (`HubLender::take_back_own`): its clients are
//! served for real, its shard's commands answered on every thread, as
//! any other shard's while the script holds another.
//!
//! Why not serve it from the script's hook for real (the desk runs only
//! `Step::Done` commands and refuses the rest `-BUSY`): a full turn from
//! inside a Lua hook would re-enter the hub's event buffers and wakeups,
//! the thread's Lua VM (an EVAL of the own loop's client) and the
//! coordinators' lending, each needing its own guard. The loan runs the
//! worker exactly as a worker alone on its thread runs, which every
//! other path already supports; the hub touches it again only once the
//! borrowing thread has let it go (a scoped loan: `recall` waits).
//!
//! The recall ([`Hosts::ask_back`]) is let go after the lent loop's
//! current iteration on the other thread. A command of its own that runs
//! long there (a script of its client: it runs, as on a thread of its
//! own) would keep the hub, and so its other loops, until it ends; the
//! watchdog would give those loops back, but not to the borrower's
//! thread, which takes its worker back only then: its clients would wait
//! for a script that does not hold their shard (issue 23 point 5). So
//! the hub never waits for the recall: until its worker is let go, it
//! serves its adopted loops (the borrower's: the others go back to
//! their threads) in rounds of their own (`round::serve_while_away`:
//! its own loop's shard is the script's, `-BUSY` on every thread while
//! that is published), the watchdog
//! leaves a borrower's worker with the hub ([`Hosts::borrowing`]), and
//! the hub takes no worker handed to it meanwhile (`Slot::own_away`: one
//! handed before waits for no loan, the watchdog gives it back). While
//! lent, the own worker's set (doorbell, listeners) is out of the hub's
//! set, whose waits would otherwise not sleep while it stays ready. A
//! script of those loops that runs long lends the own worker again once
//! it is back.
//!
//! A loan follows the stuck turn: when another adopted loop's script runs
//! long while the own worker is still lent to an earlier script's thread
//! (in the same round, or while the hub serves its loops without it), that
//! script's first busy pass asks the worker back and a later pass lends it
//! to its own thread once let go (`HubLender::loan_own`). Left with the
//! first borrower, it would keep that thread from its own loop, which the
//! watchdog leaves with the hub while its thread borrows: that loop's
//! clients would wait for a script that does not hold their shard (issue
//! 23 point 5). Once let go, the watchdog gives that loop back to its
//! thread as any other loop of the stuck round. And while the hub serves
//! its loops without its own (the borrower runs a long command of the own
//! loop's client, which it cannot let go), it first gives back every
//! adopted loop but the borrower's (`round::give_back_free`): a script of
//! theirs that ran long in those rounds would otherwise hold the hub and
//! with it the borrower's loop (before: that loop's clients got no reply
//! until one of the two scripts ended, tests/busy_hub.rs).
//!
//! Still possible: a second adopted loop's script running long in the
//! same round as the first (a loop the watchdog had not taken yet: a seat
//! the first script pinned) while the borrower runs such a long command
//! of the own loop's client: the borrower's loop then waits for one of
//! the two scripts to end (no thread is free to run it: the stuck turn's
//! thread is the only idle one, and it runs only its own worker or a hub's
//! own).
//!
//! No loop waits for another for good: a call of a borrower's script to
//! a shard the hub holds restarts it (an undeclared key) from the loop's
//! next iteration, after the loan (tests/busy_hub.rs).
//!
//! Not lent (served from the hook in busy mode as before, `-BUSY`): a
//! worker a run in place pinned (the script holds its shard), or a hub
//! whose lender is taken (the script runs inside another worker's call:
//! an EXEC's script job lent from an adopted loop's turn; then the own
//! loop is not even served, as `cohost::with_worker` finds no lender,
//! and its clients wait for the script's end). Until lent, the own loop
//! is stalled by the script: a WATCH of its keys is parked with it
//! (`commands::script::busy::watch`), and the lend registers those keys
//! on its shard first (`Worker::release_stalled`), before the borrower
//! runs anything there.
//!
//! Cost: nothing on the request path or per turn but one `Cell` store
//! per adopted turn (which loop runs); per round one `Option` check. A
//! loan costs two `epoll_ctl` per connection of the own loop each way
//! (its connections leave the hub's set for its own) and one for its own
//! set, and the borrowing thread's wake-ups; rounds while it is away
//! wait at most a millisecond (the adopted loops' parked flags stay
//! down: a message rings no doorbell): only for scripts past
//! `busy-reply-threshold`.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mio::Events;

use super::super::worker::Worker;
use super::Hosts;

/// A worker lent to one thread (at most one at a time per thread).
/// How often a thread asleep in [`Hosts::wait_back`] that holds a
/// scripts' VM looks whether SCRIPT FLUSH made it stale.
const STALE_VM_LOOK: Duration = Duration::from_secs(1);

#[derive(Default)]
pub(super) struct Loan {
    /// The lent worker, null while none is: set by the lender, cleared by
    /// the borrower once it has let it go.
    pub(super) worker: AtomicPtr<Worker>,
    /// The lender wants it back.
    pub(super) recall: AtomicBool,
    /// The lending hub (its thread is woken when the worker is let go).
    from: AtomicUsize,
}

impl Hosts {
    /// Thread `id` sleeps until its worker is given back, running the
    /// worker a hub lends it meanwhile (see the module doc). The seat is only
    /// tried: a hub holds it for each of the worker's turns, and a loan
    /// comes during one (the thread looks again within a millisecond).
    pub(super) fn wait_back(&self, id: usize) -> Box<Worker> {
        loop {
            if self.serve_loan(id) {
                continue;
            }
            let seat = match self.seats[id].try_lock() {
                Ok(seat) => Some(seat),
                Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => None,
            };
            let Some(mut seat) = seat else {
                std::thread::park_timeout(Duration::from_millis(1));
                continue;
            };
            if seat.back {
                if let Some(w) = seat.worker.take() {
                    seat.back = false;
                    return w;
                }
            }
            drop(seat);
            // Its cron runs on the hub now: a scripts' VM SCRIPT FLUSH made
            // stale would stay (and count in `used_memory_lua`) until the
            // worker came back, so a thread that holds one looks now and
            // then (see `commands::script::vm::holds_eval_vm`).
            commands::script::vm::cron();
            if commands::script::vm::holds_eval_vm() {
                std::thread::park_timeout(STALE_VM_LOOK);
            } else {
                std::thread::park();
            }
        }
    }

    /// Lends worker `w`, hub `hub`'s own, to thread `to` (asleep in
    /// [`Hosts::wait_back`]). The caller must not touch `w` until
    /// [`Hosts::ask_back`] has seen it let go.
    pub(super) fn lend_own(&self, to: usize, hub: usize, w: *mut Worker) {
        let l = &self.loans[to];
        l.from.store(hub, Ordering::Relaxed);
        l.recall.store(false, Ordering::Relaxed);
        l.worker.store(w, Ordering::Release);
        if let Some(t) = self.threads[to].get() {
            t.unpark();
        }
    }

    /// Asks thread `to` for the worker hub `hub` lent it: true once that
    /// thread has let it go (after its current iteration; the first ask
    /// rings the worker's doorbell, which ends a wait of that iteration),
    /// then the hub may touch it again. Never waits (see the module doc:
    /// the hub serves its other loops meanwhile).
    pub(super) fn ask_back(&self, to: usize, hub: usize) -> bool {
        let l = &self.loans[to];
        let asked = l.recall.swap(true, Ordering::AcqRel);
        if l.worker.load(Ordering::Acquire).is_null() {
            return true;
        }
        if !asked {
            (self.wake)(hub);
        }
        false
    }

    /// Whether thread `id` runs a worker a hub lent it: then it cannot
    /// take its own worker back (the watchdog leaves it with the hub,
    /// which serves it meanwhile: see the module doc).
    pub(super) fn borrowing(&self, id: usize) -> bool {
        !self.loans[id].worker.load(Ordering::Acquire).is_null()
    }

    /// Whether the worker lent to thread `to` was asked back
    /// ([`Hosts::ask_back`]) and let go.
    pub(super) fn let_go(&self, to: usize) -> bool {
        let l = &self.loans[to];
        l.recall.load(Ordering::Acquire) && l.worker.load(Ordering::Acquire).is_null()
    }

    /// Thread `id`, waiting for its worker: runs the worker lent to it,
    /// if any, until recalled. False if none was lent.
    pub(super) fn serve_loan(&self, id: usize) -> bool {
        let l = &self.loans[id];
        let p = l.worker.load(Ordering::Acquire);
        if p.is_null() {
            return false;
        }
        // SAFETY: the lender does not touch the worker from `lend_own`
        // until `ask_back` or `let_go` has seen it let go (the null store
        // below).
        let w = unsafe { &mut *p };
        let mut events = Events::with_capacity(256);
        while !l.recall.load(Ordering::Acquire) {
            w.step_solo(Instant::now(), &mut events, false);
        }
        l.worker.store(std::ptr::null_mut(), Ordering::Release);
        if let Some(t) = self.threads[l.from.load(Ordering::Relaxed)].get() {
            t.unpark();
        }
        true
    }
}
