//! Naps: a worker alone on its thread, with many active connections and
//! little to do in its last iteration, waits a few microseconds before it
//! sleeps in epoll, so that its next poll collects several requests (see
//! [`Nap`] for the measurements). Only the decision lives here; the loop
//! (`sched`) takes the nap through the mailbox, whose doorbell ends it.
//!
//! Per thread: a few counters, whatever the number of threads.

use std::time::{Duration, Instant};

use super::super::mailbox::Msg;
#[allow(unused_imports)]
use super::Worker;

/// When to nap instead of sleeping in epoll (see [`Worker::step_solo`]).
///
/// At pipeline 1 with many clients, a thread that blocks in epoll as soon
/// as it has answered what was ready is woken again for each request or
/// two: two threads each woke about once per 2 requests (SET, 50 clients,
/// 0.46 context switches per request against Redis's 0.13, whose single
/// thread sees all 50 clients), and the switches were 15-20 % of the
/// server's CPU. When many connections are active and the iteration found
/// few events, the thread naps a few microseconds first, so that the next
/// poll collects several requests. A message from another thread ends the
/// nap at once (its doorbell unparks the thread), so cross-shard hops do
/// not wait for it; a lone client never causes a nap.
pub(super) struct Nap {
    pub(super) epoch: Instant,
    /// Current 1 ms window (since `epoch`), connections that read in it,
    /// and in the window before.
    pub(super) window: u32,
    pub(super) active: u32,
    pub(super) active_prev: u32,
    /// Messages of multi-shard coordination (a hop whose sender waits for
    /// the reply, and that reply) in the current and the previous window.
    pub(super) coord: u32,
    pub(super) coord_prev: u32,
    /// Socket events of the last iteration, and commands it ran.
    pub(super) events: usize,
    pub(super) cmds: u64,
    pub(super) dur: Duration,
}

/// Active connections (read in the previous 1 ms window) a thread needs
/// before it naps: 16 with 50 clients on 2 threads; with 20 clients on 2
/// threads, naps raised redis-benchmark's p50 without a throughput gain.
const NAP_MIN_ACTIVE: u32 = 16;

/// An iteration with at most this many socket events, and twice as many
/// commands, did little work: worth napping after (at pipeline 16 one
/// event brings 16 commands, and batches are big already).
const NAP_MAX_EVENTS: usize = 2;

/// Nap length in microseconds unless `TESSERA_NAP_US` says otherwise (0
/// turns naps off, for side-by-side benchmarks). 20 and 40 us measured
/// alike on multi-key commands; 40 gave SET at pipeline 1 more.
const NAP_US: u64 = 40;

impl Nap {
    pub(super) fn new() -> Self {
        let us = std::env::var("TESSERA_NAP_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(NAP_US);
        Nap {
            epoch: Instant::now(),
            window: 0,
            active: 0,
            active_prev: 0,
            coord: 0,
            coord_prev: 0,
            events: 0,
            cmds: 0,
            dur: Duration::from_micros(us),
        }
    }

    /// Starts a new window if `now` is past the current one.
    pub(super) fn tick(&mut self, now: Instant) {
        let w = now.saturating_duration_since(self.epoch).as_millis() as u32;
        if w != self.window {
            let next = w == self.window.wrapping_add(1);
            self.active_prev = if next { self.active } else { 0 };
            self.coord_prev = if next { self.coord } else { 0 };
            self.active = 0;
            self.coord = 0;
            self.window = w;
        }
    }

    pub(super) fn wanted(&self) -> bool {
        !self.dur.is_zero()
            && self.events > 0
            && self.events <= NAP_MAX_EVENTS
            && self.cmds <= 2 * NAP_MAX_EVENTS as u64
            && self.active_prev >= NAP_MIN_ACTIVE
            && self.coord_prev.saturating_mul(4) < self.active_prev
    }

    /// Counts `m` if it is multi-shard coordination: naps would delay
    /// such work at both ends.
    pub(super) fn note(&mut self, m: &Msg) {
        let coord = match m {
            Msg::Exec { batch, .. } => batch.direct.is_none(),
            Msg::ExecDone { batch, .. } => batch.direct_written < batch.reply.len(),
            Msg::Job { .. } | Msg::JobDone { .. } | Msg::JobsDone { .. } => true,
            _ => false,
        };
        self.coord += u32::from(coord);
    }
}

#[cfg(test)]
mod nap_tests {
    use super::*;

    fn busy(n: &mut Nap, t0: Instant, ms: u64, active: u32, coord: u32) {
        n.tick(t0 + Duration::from_millis(ms));
        n.active = active;
        n.coord = coord;
    }

    #[test]
    fn naps_only_after_a_light_iteration_among_many_active_clients() {
        let mut n = Nap::new();
        n.dur = Duration::from_micros(NAP_US);
        let t0 = n.epoch;
        n.events = 1;
        n.cmds = 1;
        // Window 0: many clients read; from window 1 on it counts.
        busy(&mut n, t0, 0, 25, 0);
        assert!(!n.wanted(), "nothing known of the previous window");
        busy(&mut n, t0, 1, 25, 0);
        assert!(n.wanted());
        // A lone client (or a few) never causes a nap.
        busy(&mut n, t0, 2, 1, 0);
        busy(&mut n, t0, 3, 1, 0);
        assert!(!n.wanted());
        // An idle gap forgets the old window's activity.
        busy(&mut n, t0, 4, 25, 0);
        n.tick(t0 + Duration::from_millis(9));
        assert!(!n.wanted());
        // Multi-shard coordination in flight: no nap.
        busy(&mut n, t0, 10, 25, 20);
        busy(&mut n, t0, 11, 25, 20);
        assert!(!n.wanted());
        // A heavy iteration (pipelined batch) or none at all: no nap.
        busy(&mut n, t0, 12, 25, 0);
        busy(&mut n, t0, 13, 25, 0);
        assert!(n.wanted());
        n.cmds = 16;
        assert!(!n.wanted());
        n.cmds = 1;
        n.events = 0;
        assert!(!n.wanted());
        n.events = 1;
        n.dur = Duration::ZERO;
        assert!(!n.wanted(), "TESSERA_NAP_US=0 turns naps off");
    }
}
