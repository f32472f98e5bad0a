//! Spreads on trial (see "Does a spread pay?" in `host`): what a hub
//! achieved before it gave workers back, what its group achieved after,
//! the verdict, the call back of workers whose spread did not pay, and
//! the review of those whose spread did.
//! The numbers and the verdict are `policy`'s; this side reads the clocks
//! and counters and moves the workers.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::policy::{self, spread_ready, thread_cpu_ns, thread_cpu_ns_of, Figures};
use super::{Host, NO_HOST, REVIEW_MIN, TRIAL_STALE};
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

/// A hub's idle time over the current [`SPREAD_WINDOW`], and when its
/// last round's work began.
pub(super) struct Burst {
    pub(super) start: Instant,
    pub(super) idle: Duration,
    pub(super) round: Instant,
    /// The hub's loops at the end of the first [`SPREAD_WINDOW`] of the
    /// current run of busy ones (what a spread is compared with, the
    /// burst's ramp left out), and the run's length in windows.
    pub(super) run: Option<Sample>,
    pub(super) busy_windows: u32,
}

impl Burst {
    pub(super) fn new(now: Instant) -> Self {
        Burst {
            start: now,
            idle: Duration::ZERO,
            round: now,
            run: None,
            busy_windows: 0,
        }
    }

    /// Ends a window, `busy` or not, with the hub's `sample` at its end;
    /// the run's measurement so far if it is long enough to spread on
    /// (see `policy::spread_ready`).
    pub(super) fn end_window(&mut self, busy: bool, sample: Sample) -> Option<Figures> {
        let same = self.run.is_some_and(|r| r.loops == sample.loops);
        if !busy {
            self.run = None;
            self.busy_windows = 0;
        } else if same {
            self.busy_windows += 1;
        } else {
            // The first busy window (or the loops changed): measuring
            // starts at its end.
            self.run = Some(sample);
            self.busy_windows = 1;
        }
        if !spread_ready(self.busy_windows) {
            return None;
        }
        self.run.and_then(|r| r.to(sample))
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
    /// The watchdog's give-back of a stuck round, not a burst's spread:
    /// its verdict also sets how long the next turn must last to be
    /// stuck (`Hosts::stuck_verdict`).
    pub(super) stuck: bool,
}

/// A spread to review (see `policy::REVIEW_MIN`): at `at`, the hub calls
/// back the workers of `threads` it gave them.
pub(super) struct Review {
    pub(super) at: Instant,
    pub(super) threads: Vec<usize>,
}

impl Review {
    pub(super) fn after(now: Instant, wait: Duration, threads: Vec<usize>) -> Review {
        Review {
            at: now + wait,
            threads,
        }
    }
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
        stuck: bool,
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
            stuck,
        });
    }

    /// The trial's time is up: if the spread did not pay, call the workers
    /// back and back off from spreading (see the module doc).
    pub(super) fn judge(&mut self, now: Instant) {
        let Some(t) = self.trial.take() else { return };
        let span = now.saturating_duration_since(t.at);
        if !self.own[0].consolidation() {
            return;
        }
        let Some(cpu_ns) = self.cpu_of(&t.threads).filter(|_| span < TRIAL_STALE) else {
            // No verdict: the spread is reviewed instead.
            self.review = Some(Review::after(now, REVIEW_MIN, t.threads[1..].to_vec()));
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
            if t.stuck {
                self.hosts.stuck_verdict(self.id, true);
            }
            let review = self.backoff.paid();
            self.review = Some(Review::after(now, review, t.threads[1..].to_vec()));
            return;
        }
        let hold = self.backoff.failed(now, b.per_sec);
        log::verbose(format_args!(
            "Thread {}: spreading did not pay ({} to {} requests/s, {} to {} ns of CPU each): shards {:?} come back, no spreading for {} ms",
            self.id, b.per_sec, a.per_sec, b.cpu_ns_per_req, a.cpu_ns_per_req, &t.threads[1..],
            hold.as_millis()
        ));
        if t.stuck {
            let after = self.hosts.stuck_verdict(self.id, false);
            log::verbose(format_args!(
                "Thread {}: a turn is stuck from {} ms on",
                self.id,
                after / 1000
            ));
        }
        self.call_back(&t.threads[1..]);
    }

    /// Calls back the workers of `threads` (their threads hand them over
    /// at their next iteration, whatever the loads).
    fn call_back(&self, threads: &[usize]) {
        for &j in threads {
            self.hosts.slots[j].rejoin.store(self.id, Ordering::Relaxed);
            (self.hosts.wake)(j);
        }
    }

    /// The review of a spread that paid (or had no verdict) is due: the
    /// workers come back, so that a burst, if the load still is one,
    /// spreads again on a trial judged against the hub's steady rate.
    pub(super) fn review(&mut self) {
        let Some(r) = self.review.take() else { return };
        if !self.own[0].consolidation() || self.own[0].shutdown_requested() {
            return;
        }
        log::verbose(format_args!(
            "Thread {}: reviewing the spread of shards {:?}: they come back, and a burst spreads again on trial",
            self.id, &r.threads
        ));
        self.burst.run = None;
        self.burst.busy_windows = 0;
        self.call_back(&r.threads);
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
            self.hosts.stuck_verdict(self.id, true);
            log::verbose(format_args!(
                "Thread {}: the load changed ({per_sec} requests/s): it may spread again",
                self.id
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::host::policy::BEFORE_WINDOWS;

    fn at(t0: Instant, ms: u64, cpu_ms: u64, reqs: u64, loops: usize) -> Sample {
        Sample {
            at: t0 + Duration::from_millis(ms),
            cpu_ns: cpu_ms * 1_000_000,
            reqs,
            loops,
        }
    }

    /// The SETBIT run of the doc of `policy::BEFORE_WINDOWS`: a first
    /// window of accepts, then the steady rate. The spread is compared
    /// with the steady windows only, and waits for enough of them.
    #[test]
    fn a_burst_is_measured_without_its_ramp() {
        let t0 = Instant::now();
        let mut b = Burst::new(t0);
        assert_eq!(b.end_window(false, at(t0, 5, 0, 0, 2)), None, "idle");
        // The ramp: 580 requests in 5 ms of CPU.
        assert_eq!(b.end_window(true, at(t0, 10, 5, 580, 2)), None);
        let mut reqs = 580;
        for w in 1..=BEFORE_WINDOWS as u64 {
            reqs += 7_500;
            let f = b.end_window(true, at(t0, 10 + 5 * w, 5 + 5 * w, reqs, 2));
            if w < BEFORE_WINDOWS as u64 {
                assert_eq!(f, None, "window {w}: too short to judge by");
            } else {
                // 30,000 requests in 20 ms on 20 ms of CPU.
                assert_eq!(
                    f,
                    Figures::of(30_000, 20_000_000, Duration::from_millis(20))
                );
                assert_eq!(f.unwrap().per_sec, 1_500_000);
            }
        }
        // A window that is not busy ends the run; so does a change of loops.
        assert_eq!(b.end_window(false, at(t0, 35, 25, reqs, 2)), None);
        assert_eq!(b.busy_windows, 0);
        for w in 0..=BEFORE_WINDOWS as u64 {
            let loops = if w >= 2 { 3 } else { 2 };
            assert_eq!(
                b.end_window(true, at(t0, 40 + 5 * w, 30, reqs, loops)),
                None
            );
        }
        assert_eq!(b.busy_windows, 3, "restarted when the loops changed");
        assert!(!spread_ready(b.busy_windows));
    }
}
