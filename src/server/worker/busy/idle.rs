//! Loops a script stops without holding their shards: a hub's own loop,
//! idle while a script runs in the turn of a loop it adopted, lent to the
//! busy passes ([`lending_own`]); and the WATCHes parked for such loops,
//! registered before anything runs there again
//! ([`Worker::register_parked`], [`Worker::release_stalled`]).

use std::cell::Cell;

use super::super::Worker;

/// A hub's own loop, lent to the busy passes of the scripts its adopted
/// loops run (see `commands::script::busy::IdleLoops`): its turn in the
/// round is over, so it is idle, but it lives on the hub's stack, where
/// the watchdog cannot take it back to another thread. Each pass serves
/// it as a pinned loop is served ([`Worker::serve_pinned`]: its mailbox,
/// then its connections; never its shard), through the round's lender.
struct OwnIdle {
    hub: usize,
    /// A pass served it (its counts wait in its desk's tally).
    served: bool,
    /// Lent to the thread of the loop running the script (see
    /// `host::loan`): served there for real, neither stalled nor served
    /// here.
    loaned: Cell<bool>,
}

impl commands::script::busy::IdleLoops for OwnIdle {
    fn idle(&self, into: &mut Vec<usize>) {
        // Asked at each busy pass before the loops are served: the first
        // lends the worker away, so its shard is never published stalled;
        // the later ones lend it again if it came back meanwhile (a
        // borrower's long command ended while the hub served its loops
        // without it: `host::round`).
        let slot = engine::alloc::current_slot();
        self.loaned.set(super::super::cohost::loan_own());
        engine::alloc::set_slot(slot);
        if !self.loaned.get() {
            into.push(self.hub);
        }
    }

    fn serve_idle(&mut self, first: bool) {
        if self.loaned.get() {
            return;
        }
        // `with_worker` charges the caller's shard afterwards: the
        // script's, whichever it is, is put back as it was.
        let slot = engine::alloc::current_slot();
        // `None` (not lent): before the hub's own turn is over, or inside
        // a lent worker's call that keeps it from the passes (a script by
        // a call and a transaction's job that may run one keep it
        // reachable: `cohost::with_worker_open`, `with_worker_for_scripts`).
        let served =
            super::super::cohost::with_idle_worker(self.hub, self.hub, |w| w.serve_pinned(first));
        self.served |= served.is_some();
        engine::alloc::set_slot(slot);
    }
}

/// Runs `f` (the turns of the loops hub `hub` adopted, after its own
/// turn: its own loop is lent by the round's lender) with the hub's own
/// loop lent to the busy passes of the scripts they run. True if a pass
/// served it: then the caller settles it ([`Worker::settle_idle`]) before
/// it runs anything else.
pub fn lending_own<R>(hub: usize, f: impl FnOnce() -> R) -> (R, bool) {
    let mut own = OwnIdle {
        hub,
        served: false,
        loaned: Cell::new(false),
    };
    let r = commands::script::busy::lend_idle(&mut own, f);
    (r, own.served)
}

impl Worker {
    /// Before anything runs on this loop's shard from this thread (a
    /// turn, a job or pin a hub lends it): the WATCHes parked for it by
    /// busy scripts of this thread that ended (it stopped or stalled this
    /// loop) are registered first (`commands::script::busy::
    /// register_parked`). One thread-local load when none waits.
    #[inline]
    pub fn register_parked(&mut self) {
        if commands::script::busy::any_parked() {
            // Charged to this shard, whoever's turn it is.
            let slot = engine::alloc::current_slot();
            engine::alloc::enter_shard(self.core.id);
            commands::script::busy::register_parked(&mut self.core.shard);
            engine::alloc::set_slot(slot);
        }
    }

    /// This loop, stalled by this thread's busy script, is lent to
    /// another thread before the script ends (`host::loan`): the WATCHes
    /// parked for it are registered now, and no more are parked
    /// (`commands::script::busy::release_stalled`).
    pub fn release_stalled(&mut self) {
        engine::alloc::enter_shard(self.core.id);
        commands::script::busy::release_stalled(&mut self.core.shard);
    }

    /// After busy passes served this loop as a hub's idle own loop
    /// ([`lending_own`]): what they counted goes to its statistics, and a
    /// listener's event they took is replayed. Its kept messages and the
    /// connections left on its resume list make its next turn due at once.
    pub fn settle_idle(&mut self) {
        self.settle_desk();
        self.after_desk();
    }
}
