//! Spreads on trial (see "Does a spread pay?" in `host`): what a hub
//! achieved before it gave workers back, what its group achieved after,
//! the verdict, and the call back of workers whose spread did not pay.
//! The numbers and the verdict are `policy`'s; this side reads the clocks
//! and counters and moves the workers.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::policy::{self, thread_cpu_ns, thread_cpu_ns_of, Figures};
use super::{Host, NO_HOST, TRIAL_STALE};
use crate::log;

/// What a hub had done at one moment: its CPU time, and the requests
/// served by the loops it held (and how many it held).
#[derive(Clone, Copy)]
pub(super) struct Sample {
    pub(super) at: Instant,
    pub(super) cpu_ns: u64,
    pub(super) reqs: u64,
    pub(super) loops: usize,
}

impl Sample {
    /// What the hub achieved from `self` to `to`.
    pub(super) fn to(self, to: Sample) -> Option<Figures> {
        Figures::of(
            to.reqs.saturating_sub(self.reqs),
            to.cpu_ns.saturating_sub(self.cpu_ns),
            to.at.saturating_duration_since(self.at),
        )
    }
}

/// A spread on trial (see "Does a spread pay?" in the module doc): the
/// group is the hub's thread and the threads given their workers back,
/// and every worker the hub held.
pub(super) struct Trial {
    pub(super) at: Instant,
    /// The hub over its last run of busy [`SPREAD_WINDOW`]s.
    pub(super) before: Figures,
    /// The group's threads (the hub first) and their CPU time at `at`.
    pub(super) threads: Vec<usize>,
    pub(super) cpu_ns: u64,
    /// The group's workers and the requests they had served at `at`.
    pub(super) workers: Vec<usize>,
    pub(super) reqs: u64,
}

impl Host {
    /// What this hub has done so far (see [`Sample`]).
    pub(super) fn sample(&self, now: Instant) -> Sample {
        let slots = &self.hosts.slots;
        let reqs = slots[self.id].reqs.load(Ordering::Relaxed)
            + self
                .adopted
                .iter()
                .map(|a| slots[a.id].reqs.load(Ordering::Relaxed))
                .sum::<u64>();
        Sample {
            at: now,
            cpu_ns: thread_cpu_ns(),
            reqs,
            loops: 1 + self.adopted.len(),
        }
    }

    /// The CPU time so far of `threads` together; `None` if one exited.
    pub(super) fn cpu_of(&self, threads: &[usize]) -> Option<u64> {
        threads.iter().try_fold(0, |sum, &t| {
            Some(sum + thread_cpu_ns_of(self.hosts.slots[t].tid.load(Ordering::Relaxed))?)
        })
    }

    /// The requests `workers` have served so far (as of their last turns).
    pub(super) fn reqs_of(&self, workers: &[usize]) -> u64 {
        let slots = &self.hosts.slots;
        workers
            .iter()
            .map(|&w| slots[w].reqs.load(Ordering::Relaxed))
            .sum()
    }

    /// This hub gave workers back to the threads `given` on a burst,
    /// having achieved `before` with all of `workers`: the spread is on
    /// trial for [`TRIAL`].
    pub(super) fn start_trial(
        &mut self,
        now: Instant,
        before: Figures,
        given: Vec<usize>,
        workers: Vec<usize>,
    ) {
        let mut threads = vec![self.id];
        threads.extend(given);
        let Some(cpu_ns) = self.cpu_of(&threads) else {
            return;
        };
        let reqs = self.reqs_of(&workers);
        self.trial = Some(Trial {
            at: now,
            before,
            threads,
            cpu_ns,
            workers,
            reqs,
        });
    }

    /// The trial's time is up: if the spread did not pay, call the workers
    /// back and back off from spreading (see the module doc).
    pub(super) fn judge(&mut self, now: Instant) {
        let Some(t) = self.trial.take() else { return };
        let span = now.saturating_duration_since(t.at);
        if span >= TRIAL_STALE || !self.own[0].consolidation() {
            return;
        }
        let Some(cpu_ns) = self.cpu_of(&t.threads) else {
            return;
        };
        let reqs = self.reqs_of(&t.workers);
        let Some(after) = Figures::of(
            reqs.saturating_sub(t.reqs),
            cpu_ns.saturating_sub(t.cpu_ns),
            span,
        ) else {
            return;
        };
        let (b, a) = (t.before, after);
        if policy::pays(b, a) {
            log::verbose(format_args!(
                "Thread {}: spreading paid ({} to {} requests/s, {} to {} ns of CPU each): shards {:?} stay on their threads",
                self.id, b.per_sec, a.per_sec, b.cpu_ns_per_req, a.cpu_ns_per_req, &t.threads[1..]
            ));
            self.backoff.paid();
            return;
        }
        let hold = self.backoff.failed(now, b.per_sec);
        log::verbose(format_args!(
            "Thread {}: spreading did not pay ({} to {} requests/s, {} to {} ns of CPU each): shards {:?} come back, no spreading for {} ms",
            self.id, b.per_sec, a.per_sec, b.cpu_ns_per_req, a.cpu_ns_per_req, &t.threads[1..],
            hold.as_millis()
        ));
        for &j in &t.threads[1..] {
            self.hosts.slots[j].rejoin.store(self.id, Ordering::Relaxed);
            (self.hosts.wake)(j);
        }
    }

    /// The hub this thread's worker left in a spread that did not pay
    /// calls it back: it goes now, whatever the loads.
    pub(super) fn rejoin(&mut self) {
        let h = self.slot().rejoin.swap(NO_HOST, Ordering::Relaxed);
        if h >= self.id
            || !self.adopted.is_empty()
            || self.outer.is_some()
            || !self.own[0].consolidation()
            || self.own[0].shutdown_requested()
        {
            return;
        }
        let busy = self.slot().busy.load(Ordering::Relaxed);
        self.hand_off(h, busy, Instant::now(), true);
    }

    /// A hub at the end of a load window: a load much higher or lower than
    /// the one of its last spread that did not pay ends its backoff.
    /// Also keeps the window's figures (`cpu_ns`: this thread's CPU time
    /// in it), what a stuck round's give-back is compared with.
    pub(super) fn observe_load(&mut self, now: Instant, wall: Duration, cpu_ns: u64) {
        let s = self.sample(now);
        let last = self.window.reqs.replace((s.reqs, s.loops));
        self.window.last = None;
        let Some((reqs, loops)) = last else { return };
        if loops != s.loops {
            return;
        }
        let reqs = s.reqs.saturating_sub(reqs);
        self.window.last = Figures::of(reqs, cpu_ns, wall).map(|f| (f, loops));
        let per_sec = policy::per_sec(reqs, wall);
        if self.backoff.observe(per_sec) {
            log::verbose(format_args!(
                "Thread {}: the load changed ({per_sec} requests/s): it may spread again",
                self.id
            ));
        }
    }
}
