//! The call timer: how long a command's handler ran, for INFO
//! commandstats (`usec`), the latency histograms (`latency-tracking`), the
//! latency monitor and the slowlog. Request path: two reads per command,
//! no syscall, no lock, no allocation.
//!
//! Why not `Instant`: every command reads the clock twice (Redis's `call()`
//! does too), and on this project's VMs a `clock_gettime` through the vDSO
//! cost about 100 ns (a pair of `Instant::now` and `elapsed`: ~200 ns)
//! against ~45 ns for a bare `rdtsc`; perf put `clock_gettime` at 6 % of a
//! pipelined SETBIT's server CPU. So where the kernel itself keeps time
//! with the TSC (its clocksource is `tsc`: it found the counter invariant
//! and synchronised across CPUs, so a thread that moves between the two
//! reads still measures right), [`calibrate`] measures the counter's rate
//! once at start-up against the monotonic clock, and [`Started`] holds
//! counter ticks; anywhere else (another clocksource, another
//! architecture, or a process that never calibrated, such as the
//! in-process tests) it holds an `Instant`, as before.
//!
//! Accuracy: the rate comes from a 10 ms window whose two ends are each
//! read within about a microsecond, so durations are off by well under
//! 0.1 %; a counter read that went backwards (it cannot under an invariant
//! TSC, but a VM migration might) reads as zero, never as a huge duration.
//! Alternatives rejected: one read per command (the end of one command as
//! the start of the next) would add the parsing and dispatch between them
//! to every command's `usec`; a cached per-iteration time would make every
//! command of a pipelined batch read zero.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Microseconds per counter tick as a 32.32 fixed-point number; 0 until
/// [`calibrate`] found a usable counter.
static US_PER_TICK_FP32: AtomicU64 = AtomicU64::new(0);

/// When a call started.
#[derive(Clone, Copy, Debug)]
pub enum Started {
    /// The TSC's value.
    Ticks(u64),
    /// No calibrated counter.
    Mono(Instant),
}

/// Now, for [`Started::elapsed_us`] later.
#[inline]
pub fn start() -> Started {
    if US_PER_TICK_FP32.load(Ordering::Relaxed) != 0 {
        if let Some(t) = ticks() {
            return Started::Ticks(t);
        }
    }
    Started::Mono(Instant::now())
}

impl Started {
    /// Whole microseconds since `self`.
    #[inline]
    pub fn elapsed_us(self) -> u64 {
        match self {
            Started::Ticks(t0) => us_between(
                t0,
                ticks().unwrap_or(t0),
                US_PER_TICK_FP32.load(Ordering::Relaxed),
            ),
            Started::Mono(i) => i.elapsed().as_micros() as u64,
        }
    }
}

/// Microseconds from tick `t0` to tick `t1` at `fp` (32.32) microseconds
/// per tick; zero if the counter went back.
#[inline]
fn us_between(t0: u64, t1: u64, fp: u64) -> u64 {
    ((u128::from(t1.saturating_sub(t0)) * u128::from(fp)) >> 32) as u64
}

/// The time-stamp counter, where there is one.
#[inline]
fn ticks() -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC exists on every x86_64 CPU and has no side effect
        // (CR4.TSD would make it fault in user mode; no mainstream kernel
        // sets it, and `calibrate` read it once already before it is used).
        Some(unsafe { core::arch::x86_64::_rdtsc() })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// Whether the kernel keeps time with the TSC (see the module docs).
fn kernel_uses_tsc() -> bool {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .is_ok_and(|s| s.trim() == "tsc")
}

/// Measures the counter's rate (10 ms, once, at start-up) and switches
/// [`start`] to it when the kernel keeps time with it; otherwise leaves
/// the monotonic clock in use. Returns whether the counter is used.
pub fn calibrate() -> bool {
    if !kernel_uses_tsc() {
        return false;
    }
    let Some(fp) = measure(Duration::from_millis(10)) else {
        return false;
    };
    US_PER_TICK_FP32.store(fp, Ordering::Relaxed);
    true
}

/// The counter's microseconds per tick (32.32) over a window of `span`,
/// or `None` if it did not advance sensibly.
fn measure(span: Duration) -> Option<u64> {
    let (i0, c0) = pair()?;
    std::thread::sleep(span);
    let (i1, c1) = pair()?;
    let ns = (i1 - i0).as_nanos();
    let dt = u128::from(c1.checked_sub(c0)?);
    // Under 1 MHz or no time passed: not a counter to trust.
    if dt < ns / 1000 || ns == 0 {
        return None;
    }
    // us per tick = ns / 1000 / dt, in 32.32.
    u64::try_from((ns << 32) / 1000 / dt)
        .ok()
        .filter(|&fp| fp != 0)
}

/// The monotonic clock and the counter read at (nearly) the same moment:
/// of 8 tries, the one whose counter reads around the clock's are closest
/// (a thread preempted between the reads of one try would skew the rate
/// by the time it lost), with the counter taken half-way.
fn pair() -> Option<(Instant, u64)> {
    let mut best: Option<(u64, Instant, u64)> = None;
    for _ in 0..8 {
        let a = ticks()?;
        let i = Instant::now();
        let b = ticks()?;
        let gap = b.checked_sub(a)?;
        if best.is_none_or(|(g, ..)| gap < g) {
            best = Some((gap, i, a + gap / 2));
        }
    }
    best.map(|(_, i, t)| (i, t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uncalibrated_falls_back_to_the_monotonic_clock() {
        // (Calibration is process-wide; this test does not calibrate.)
        let s = Started::Mono(Instant::now() - Duration::from_millis(3));
        let us = s.elapsed_us();
        assert!(us >= 3000, "{us}");
    }

    #[test]
    fn the_counter_measures_what_the_monotonic_clock_does() {
        let Some(fp) = measure(Duration::from_millis(20)) else {
            return; // no counter here
        };
        let (i0, t0) = pair().expect("measured");
        std::thread::sleep(Duration::from_millis(30));
        let (i1, t1) = pair().expect("measured");
        let mono = (i1 - i0).as_micros() as u64;
        let tsc = us_between(t0, t1, fp);
        // The same interval within 1 %: each end is read within about a
        // microsecond, whatever the load.
        assert!(
            tsc.abs_diff(mono) * 100 <= mono,
            "tsc {tsc} us, monotonic {mono} us"
        );
    }

    #[test]
    fn a_counter_that_went_back_reads_zero() {
        assert_eq!(us_between(1 << 40, 5, 1 << 32), 0);
        assert_eq!(us_between(5, 2005, 1 << 32), 2000);
        // 2.5 GHz: 0.0004 us per tick.
        let fp = (1u64 << 32) / 2500;
        assert_eq!(us_between(0, 2_500_000_000, fp), 999_999);
    }
}
