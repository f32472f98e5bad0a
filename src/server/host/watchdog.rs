//! The consolidation watchdog (see "Consolidation" in `host`): a thread
//! that wakes every [`WATCH_MIN`] while some hub is in a shared round,
//! finds a hub stuck in one loop's turn (it ran, or the turn outlasted
//! [`STUCK_ANYWAY`]) and takes back every worker it holds but is not
//! running, and the workers handed to a hub that has not taken them.
//!
//! Cost as N grows: O(N) relaxed loads per tick while some worker is
//! adopted (and one CPU clock read per hub in a turn older than a tick);
//! it sleeps for good while no worker is adopted.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::policy::{self, thread_cpu_ns_of};
use super::{locked, Hosted, Hosts, Seat, HOLD_MIN, STUCK, STUCK_ANYWAY, WATCH_MAX, WATCH_MIN};
use crate::log;

impl Hosts {
    /// The watchdog thread: takes back the adopted workers of a hub stuck
    /// in one turn (see the module doc).
    pub(super) fn watch(&self) {
        let _ = self.watchdog.set(std::thread::current());
        let mut tick = WATCH_MIN;
        // Per hub: a round seen lasting at least a tick (its start), the
        // hub's CPU time then, when (µs since `epoch`), and whether it was
        // logged as not stuck.
        let mut seen: Vec<(u64, u64, u64, bool)> = vec![(0, 0, 0, false); self.slots.len()];
        loop {
            if self.hosted.load(Ordering::Acquire) == 0 && self.handed.load(Ordering::Acquire) == 0
            {
                std::thread::park();
                tick = WATCH_MIN;
                continue;
            }
            std::thread::park_timeout(tick);
            let now = Instant::now();
            let now_us = self.us(now);
            // Workers handed to a hub that has not taken them: a hub
            // alone with its own worker in a long command (a script past
            // `busy-reply-threshold`) is in no shared round, so the check
            // below never sees it stuck.
            let mut working = self.handed.load(Ordering::Acquire) != 0;
            if working {
                self.recall_unadopted(now);
            }
            for (h, seen) in seen.iter_mut().enumerate() {
                let round = self.slots[h].round_us.load(Ordering::Relaxed);
                if round == 0 {
                    continue;
                }
                working = true;
                let age = now_us.saturating_sub(round);
                if age < WATCH_MIN.as_micros() as u64 {
                    continue;
                }
                // A long round: the hub's CPU clock tells whether it runs.
                let tid = self.slots[h].tid.load(Ordering::Relaxed);
                let Some(cpu) = thread_cpu_ns_of(tid) else {
                    continue;
                };
                if seen.0 != round {
                    *seen = (round, cpu, now_us, false);
                }
                let (_, cpu0, at, logged) = *seen;
                let wall = Duration::from_micros(now_us.saturating_sub(at));
                let ran = Duration::from_nanos(cpu.saturating_sub(cpu0));
                let running = policy::turn_running(ran);
                let age = Duration::from_micros(age);
                if !self.stuck(h, now_us) {
                    continue;
                }
                if running || age >= STUCK_ANYWAY {
                    self.slots[h].stuck_round.store(round, Ordering::Relaxed);
                    self.recall(h, now);
                } else if !logged && wall >= WATCH_MIN {
                    seen.3 = true;
                    log::verbose(format_args!(
                        "Thread {h} has been in one round for {} ms, but ran {} us of the last {} us: not stuck",
                        age.as_millis(),
                        ran.as_micros(),
                        wall.as_micros()
                    ));
                }
            }
            tick = if working {
                WATCH_MIN
            } else {
                (tick * 2).min(WATCH_MAX)
            };
        }
    }

    /// Gives back the workers a hub has left in its inbox for [`STUCK`],
    /// unless it is in a shared round: it adopts them when the round ends,
    /// and a stuck turn gives them back with the rest (`recall`). A round
    /// of 32 loops with heavy pipelines lasts 5-30 ms on two busy vCPUs:
    /// timed from the hand-over, 16 shards at a time went back while
    /// thread 0 gathered them at the start of an MSET run.
    pub(super) fn recall_unadopted(&self, now: Instant) {
        let now_us = self.us(now);
        for h in 0..self.slots.len() {
            // A hub whose own worker is away serves its loops in rounds
            // that may last as long as the borrower's long command, and
            // adopts nothing before: what waits goes back after STUCK.
            let away = self.slots[h].own_away.load(Ordering::Relaxed);
            if self.slots[h].round_us.load(Ordering::Relaxed) != 0 && !away {
                continue;
            }
            let (since, since_cpu) = {
                let inbox = locked(&self.inbox[h]);
                (inbox.since_us, inbox.since_cpu)
            };
            let wall = Duration::from_micros(now_us.saturating_sub(since));
            if since == 0 || wall < STUCK {
                continue;
            }
            // As for a round: a hub kept off its core is not stuck.
            let tid = self.slots[h].tid.load(Ordering::Relaxed);
            let ran = thread_cpu_ns_of(tid)
                .filter(|_| since_cpu != 0)
                .map(|cpu| Duration::from_nanos(cpu.saturating_sub(since_cpu)));
            let running = ran.is_none_or(|ran| policy::ran_most(ran, wall) || ran >= STUCK);
            if away || running || wall >= STUCK_ANYWAY {
                self.recall_waiting(h, now);
            }
        }
    }

    /// Gives back the workers handed to hub `h` that it has not adopted
    /// yet (it is stuck).
    fn recall_waiting(&self, h: usize, now: Instant) {
        let waiting = {
            let mut inbox = locked(&self.inbox[h]);
            inbox.since_us = 0;
            std::mem::take(&mut inbox.workers)
        };
        self.handed.fetch_sub(waiting.len(), Ordering::Release);
        for Hosted(w) in waiting {
            let id = w.id();
            log::verbose(format_args!(
                "Shard {id} back on its own thread: thread {h} did not take it (in one long command)"
            ));
            let hold = self.ms(now + HOLD_MIN);
            self.slots[id].hold_until_ms.store(hold, Ordering::Relaxed);
            *locked(&self.seats[id]) = Seat {
                worker: Some(w),
                back: true,
            };
            if let Some(t) = self.threads[id].get() {
                t.unpark();
            }
        }
    }

    /// Takes back every worker stuck hub `h` holds but is not running,
    /// and those handed to it that it has not adopted yet.
    fn recall(&self, h: usize, now: Instant) {
        self.recall_waiting(h, now);
        for id in 0..self.slots.len() {
            if self.slots[id].host.load(Ordering::Relaxed) != h {
                continue;
            }
            // The round may have ended meanwhile.
            let start = self.slots[h].round_us.load(Ordering::Relaxed);
            if !self.stuck(h, self.us(now)) {
                return;
            }
            // The seat of the worker running now is locked: it stays. So
            // does one whose thread runs the hub's own worker (a loan, see
            // `loan`): that thread would not run it before the loan ends,
            // which may be a long command later; the hub serves it
            // meanwhile.
            if self.borrowing(id) {
                continue;
            }
            let Ok(mut seat) = self.seats[id].try_lock() else {
                continue;
            };
            // Read again under the lock: since `host` was read above, hub
            // `h` may have given the worker back and another hub adopted
            // it; giving it back then counted it off `h`'s loops (which
            // wrapped below zero when `h` had folded and handed its own
            // worker away, and failed an overflow check in `fold_target`).
            if seat.back
                || seat.worker.is_none()
                || self.slots[id].host.load(Ordering::Relaxed) != h
            {
                continue;
            }
            seat.back = true;
            drop(seat);
            let round = self.us(now).saturating_sub(start) / 1000;
            log::verbose(format_args!(
                "Shard {id} back on its own thread: thread {h} has been in one round for {round} ms"
            ));
            self.taken_from_stuck(h, id, now);
        }
    }
}
