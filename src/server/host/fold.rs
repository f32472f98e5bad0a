//! Two hubs whose loads fit in one become one (see "Hubs" in `host`).
//!
//! A thread alone with its worker merges into the first lower thread with
//! room; a hub never hands its own worker away (it would first have to
//! give the others back), so without this a layout of two hubs stayed for
//! good once made, however idle. It is made whenever many threads merge
//! at once under some load: first fit counts the loads pledged to a hub
//! before its next window measures them, so at start-up (the watchdog
//! gives every shard back after the first round of 31 adoptions, which
//! lasts 8-13 ms) with a client preloading keys, 32 threads at 45-70 per
//! mille each filled thread 0 after 13-14 of them and the rest made
//! thread 1 (or 3, or 4) a hub: 4 of 8 fresh 32-shard servers idled on
//! two hubs after a preload and a warm-up (`bench/README.md`, branch
//! `mset27c`), and an MSET of 10 keys at pipeline 16 then cost 23.4 µs of
//! server CPU against 5.7 on one hub (8.5 system calls per MSET against
//! 0.2: most of them the two hubs' doorbells to each other).
//!
//! So a hub at the end of a load window *folds* when its load and a lower
//! thread's (with what is pledged to it) stay below `MERGE_BELOW` for
//! `STREAK` windows, and the loops of both fit in `MAX_LOOPS`: the
//! condition under which a thread alone would merge, taken as a whole.
//! It gives every worker it holds back (no hold: this is not a spread)
//! and marks their threads and itself *untried*, so that each merges at
//! its next windows into the first thread with room whatever the loads
//! (`Hosts::first_hub`): the loads were judged here, for the group. Not
//! while a spread of its own is on trial or due for review (the loads
//! then are the trial's), and not under shutdown. A fold is a few
//! hundred milliseconds of threads apart at a load that fits in one, and
//! two `epoll_ctl` per connection.
//!
//! Cost as N grows: per hub per window, O(id) relaxed loads (the lower
//! threads' slots), as a thread alone looking for a hub.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::policy::{merge_wanted, Permille};
use super::{Host, Hosts, MAX_LOOPS, STREAK};
use crate::log;

impl Hosts {
    /// The thread hub `id`, running `loops` loops at load `mine`, should
    /// fold into: the first lower thread running its worker whose load
    /// leaves room for `mine` and whose loops leave room for `loops`.
    pub(super) fn fold_target(
        &self,
        id: usize,
        mine: Permille,
        loops: usize,
        now: Instant,
    ) -> Option<usize> {
        let now_us = self.us(now);
        self.slots[..id].iter().enumerate().position(|(j, s)| {
            let runs = s.runs.load(Ordering::Relaxed);
            let load = s.busy.load(Ordering::Relaxed) + s.pledged.load(Ordering::Relaxed);
            runs != 0
                && runs + loops <= MAX_LOOPS
                && !self.stuck(j, now_us)
                && merge_wanted(mine, load)
        })
    }
}

impl Host {
    /// A hub at the end of a load window at load `busy`: folds into a
    /// lower thread once the condition held for `STREAK` windows (see the
    /// module doc).
    pub(super) fn fold(&mut self, busy: Permille, now: Instant) {
        let loops = self.adopted.len() + 1;
        let target = (self.trial.is_none()
            && self.review.is_none()
            && self.own[0].consolidation()
            && !self.own[0].shutdown_requested())
        .then(|| self.hosts.fold_target(self.id, busy, loops, now))
        .flatten();
        self.window.streak = match target {
            Some(_) => self.window.streak + 1,
            None => 0,
        };
        let Some(j) = target.filter(|_| self.window.streak >= STREAK) else {
            return;
        };
        log::verbose(format_args!(
            "Thread {} ({loops} shards, load {busy} per mille) folds into thread {j}: its shards merge there",
            self.id
        ));
        for id in self.give_back_all(now, false) {
            self.hosts.slots[id].refold.store(true, Ordering::Relaxed);
        }
        self.untried = true;
    }

    /// A thread alone at the end of a load window: a hub that folded gave
    /// its worker back to merge whatever the loads.
    pub(super) fn take_refold(&mut self) {
        if self.slot().refold.swap(false, Ordering::Relaxed) {
            self.untried = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use std::time::Duration;

    use super::super::trial::Review;
    use super::super::{locked, Hosted};
    use super::*;

    fn hosts(n: usize) -> Arc<Hosts> {
        Hosts::unwatched(n, Box::new(|_| {}), Arc::new(AtomicUsize::new(0)))
    }

    #[test]
    fn a_hub_folds_into_a_lower_thread_with_room() {
        let h = hosts(6);
        let now = Instant::now();
        let set = |i: usize, busy: Permille, runs: usize| {
            h.slots[i].busy.store(busy, Ordering::Relaxed);
            h.slots[i].runs.store(runs, Ordering::Relaxed);
        };
        assert_eq!(
            h.fold_target(0, 0, 3, now),
            None,
            "thread 0 folds into nobody"
        );
        set(0, 100, 10);
        assert_eq!(h.fold_target(4, 100, 5, now), Some(0), "both idle");
        assert_eq!(
            h.fold_target(4, 850, 5, now),
            Some(1),
            "no room on 0 for the load"
        );
        assert_eq!(
            h.fold_target(4, 100, MAX_LOOPS - 9, now),
            Some(1),
            "no room on 0 for the loops"
        );
        set(1, 0, 0);
        set(2, 0, 0);
        set(3, 0, 0);
        assert_eq!(
            h.fold_target(4, 100, MAX_LOOPS - 9, now),
            None,
            "1-3 are away at hubs"
        );
        h.slots[0].pledged.store(750, Ordering::Relaxed);
        assert_eq!(
            h.fold_target(4, 100, 5, now),
            None,
            "loads handed to 0 fill it"
        );
        h.slots[0].pledged.store(0, Ordering::Relaxed);
        h.slots[0].round_us.store(1, Ordering::Relaxed);
        assert_eq!(
            h.fold_target(4, 100, 5, h.epoch + Duration::from_secs(1)),
            None,
            "thread 0 is stuck in a round"
        );
    }

    /// Thread 0 alone, thread 1 a hub holding worker 2, both idle: after
    /// `STREAK` windows the hub gives worker 2 back, and both threads then
    /// merge into thread 0 whatever the loads. Without the fold, the two
    /// threads stayed apart for good (thread 1 never hands its worker
    /// away while it holds another).
    #[test]
    fn two_idle_hubs_become_one() {
        let h = hosts(3);
        let mut c = crate::server::worker::testing::Cluster::new(3);
        let w2 = c.workers.pop().expect("worker 2");
        let w1 = c.workers.pop().expect("worker 1");
        let mut hub = Host::new(w1, h.clone());
        let now = Instant::now();
        assert!(h.give(1, Hosted(Box::new(w2)), 0, now, true).is_ok());
        hub.adopt();
        hub.untried = false;
        assert_eq!(hub.adopted.len(), 1);
        h.slots[0].busy.store(50, Ordering::Relaxed);

        // Too loaded together: it stays.
        hub.fold(870, now);
        hub.fold(870, now);
        assert_eq!(hub.adopted.len(), 1, "870 + 50 is above MERGE_BELOW");
        // A spread of its own to review: the loads are the trial's.
        hub.review = Some(Review::after(now, Duration::from_secs(1), vec![2]));
        hub.fold(40, now);
        hub.fold(40, now);
        assert_eq!(hub.adopted.len(), 1, "not while a spread is under review");
        hub.review = None;

        hub.fold(40, now);
        assert_eq!(hub.adopted.len(), 1, "one window is not a streak");
        hub.fold(40, now);
        assert!(hub.adopted.is_empty(), "folded");
        let seat = locked(&h.seats[2]);
        assert!(seat.back && seat.worker.is_some(), "worker 2 given back");
        drop(seat);
        assert_eq!(h.slots[1].runs.load(Ordering::Relaxed), 1);
        assert_eq!(
            h.slots[2].hold_until_ms.load(Ordering::Relaxed),
            0,
            "no hold: a fold is no spread"
        );
        assert!(hub.untried);
        h.slots[1].busy.store(950, Ordering::Relaxed);
        assert_eq!(hub.merge_target(950, now), Some(0), "whatever the loads");

        // Worker 2's thread, given its worker back: it merges the same way.
        let w2 = locked(&h.seats[2]).worker.take().expect("worker 2");
        let mut t2 = Host::new(*w2, h.clone());
        t2.untried = false;
        assert_eq!(t2.merge_target(950, now), None, "by the loads: none");
        t2.take_refold();
        assert!(t2.untried);
        assert_eq!(t2.merge_target(950, now), Some(0));
        t2.take_refold();
        assert!(!h.slots[2].refold.load(Ordering::Relaxed), "taken once");
    }
}
