//! The time a turn runs at, read once per turn.
//!
//! A turn (one iteration of a loop, `sched`) needs the time three ways:
//! the shard's wall clock in milliseconds (expiry, idle times: Redis's
//! `mstime()` at each command, here at each turn), the monotonic instant
//! its cron is due at, and, on a hub, the turn's start for the watchdog
//! (`host::Slot::round_us`). Each was its own clock read: with 32 loops
//! on one hub and 50 clients at pipeline 1, a turn serves one or two
//! connections, and the three reads and their conversions were about 200
//! of a turn's instructions (callgrind: `SystemTime::now` and its
//! `duration_since` in `Shard::tick` ~110, the cron's `Instant::now` ~30,
//! the hub's `Instant::now` and its conversion to microseconds ~80).
//!
//! Now whoever runs the turn reads the monotonic clock once and gives it
//! as a [`TurnTime`]: a hub derives the wall clock from the microseconds
//! it computes for the watchdog anyway and a wall reading taken once per
//! round; a loop on its own thread from a [`WallAnchor`] taken at its
//! cron. Both anchors are read wall clock first, monotonic clock second,
//! so a derived time is never ahead of the wall clock (a key never
//! expires early; `engine::now_ms()` read later is never behind it), and
//! behind it by at most the time between the two reads. Both clocks run
//! at the same rate (NTP slews both); a step of the wall clock reaches a
//! hub's turns at its next round, a loop's at its next cron (1 / `hz`).
//!
//! A hub's turn also carries its budget (`TurnTime::until`): past it, the
//! turn reads no more sockets (see `budget`).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The time of one turn: its start on the monotonic clock (timers: the
/// cron) and on the wall clock (the shard's `now_ms`), and for a hub's
/// turn the time past which it reads no more sockets.
#[derive(Clone, Copy, Debug)]
pub struct TurnTime {
    pub at: Instant,
    pub wall_ms: u64,
    pub until: Option<Instant>,
}

impl TurnTime {
    /// Both clocks read now (the in-process tests' rounds).
    #[cfg(test)]
    pub fn now() -> Self {
        WallAnchor::now().turn(Instant::now())
    }
}

/// Microseconds since the Unix epoch on the wall clock.
pub fn wall_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The wall clock as an offset from a monotonic epoch (a hub's,
/// `Hosts::epoch`), for a caller that has an instant's microseconds since
/// that epoch already (a hub's turn has them for the watchdog). Only hubs
/// use it: each turn it times gets [`TURN_BUDGET`].
#[derive(Clone, Copy, Debug)]
pub struct EpochWall {
    base_us: u64,
    budget: Duration,
}

/// How long a hub's turn reads sockets (see `budget`): well under the
/// watchdog's `STUCK` (5 ms), so that a turn long only because it serves
/// many short commands ends, and the hub's next round serves the rest,
/// before the watchdog would take it for one long command.
pub const TURN_BUDGET: Duration = Duration::from_millis(1);

impl EpochWall {
    /// From a wall-clock reading `wall_us` and the microseconds since the
    /// epoch of an instant read right after it.
    pub fn new(wall_us: u64, at_us: u64) -> Self {
        EpochWall {
            base_us: wall_us.saturating_sub(at_us),
            budget: TURN_BUDGET,
        }
    }

    /// The same, its turns with `budget` instead of [`TURN_BUDGET`] (a
    /// test spends it at once).
    pub fn with_budget(self, budget: Duration) -> Self {
        EpochWall { budget, ..self }
    }

    /// A turn starting at `at`, `at_us` microseconds after the epoch.
    #[inline]
    pub fn turn(&self, at: Instant, at_us: u64) -> TurnTime {
        TurnTime {
            at,
            wall_ms: (self.base_us + at_us) / 1000,
            until: at.checked_add(self.budget),
        }
    }
}

/// A wall-clock reading and the monotonic instant taken right after it,
/// to derive the wall clock from later instants without reading it.
#[derive(Clone, Copy, Debug)]
pub struct WallAnchor {
    at: Instant,
    wall_us: u64,
}

impl WallAnchor {
    pub fn now() -> Self {
        let wall_us = wall_us();
        WallAnchor {
            at: Instant::now(),
            wall_us,
        }
    }

    /// The monotonic instant of the reading.
    pub fn at(&self) -> Instant {
        self.at
    }

    /// A turn starting at `at` (not before the anchor: an earlier one is
    /// taken as the anchor's own time).
    #[inline]
    pub fn turn(&self, at: Instant) -> TurnTime {
        let us = self.wall_us + at.saturating_duration_since(self.at).as_micros() as u64;
        TurnTime {
            at,
            wall_ms: us / 1000,
            until: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A derived time is never ahead of the wall clock read after it, and
    /// behind it by no more than the reads take.
    #[test]
    fn a_derived_time_follows_the_wall_clock() {
        let a = WallAnchor::now();
        for _ in 0..3 {
            std::thread::sleep(std::time::Duration::from_millis(5));
            let t = a.turn(Instant::now());
            let wall_ms = wall_us() / 1000;
            assert!(t.wall_ms <= wall_ms, "{} > {wall_ms}", t.wall_ms);
            // Not a timing bound (the reads may be far apart on a loaded
            // machine): a wrong unit or base would be off by far more.
            assert!(wall_ms - t.wall_ms < 60_000, "{} {wall_ms}", t.wall_ms);
        }
        // A hub's way, from microseconds since an epoch it keeps: the
        // same time as the anchor's for the same instant.
        let epoch = a.at();
        let at = Instant::now();
        let at_us = at.duration_since(epoch).as_micros() as u64;
        let hub = EpochWall::new(a.wall_us, 0).turn(at, at_us);
        assert_eq!(hub.wall_ms, a.turn(at).wall_ms);
        assert_eq!(hub.at, at);
        // An instant before the anchor reads as the anchor's time.
        let before = a.at().checked_sub(std::time::Duration::from_secs(1));
        if let Some(b) = before {
            assert_eq!(a.turn(b).wall_ms, a.wall_us / 1000);
        }
    }
}
