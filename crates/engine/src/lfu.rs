//! Redis's LFU access-frequency estimate (`evict.c`), kept per key when
//! `maxmemory-policy` is `allkeys-lfu` or `volatile-lfu`.
//!
//! Each key has an 8-bit logarithmic counter and a 16-bit "last decrement
//! time" (`ldt`, Unix minutes modulo 65536). A key starts at
//! [`LFU_INIT_VAL`] with `ldt` = its creation minute. On every access that
//! touches the key, the counter first decays by one per `lfu-decay-time`
//! minutes elapsed since `ldt`, then is incremented with probability
//! `1 / ((counter - LFU_INIT_VAL) * lfu-log-factor + 1)` (always at or below
//! [`LFU_INIT_VAL`], never past 255), and `ldt` becomes the current minute.
//! OBJECT FREQ reports the decayed counter without storing it.
//!
//! Everything here is Redis 7.0's arithmetic, quirks included, so OBJECT
//! FREQ gives the same numbers for the same access pattern:
//! * the elapsed time across the 16-bit wrap is `65535 - ldt + now`, one
//!   minute less than the true modular difference (`LFUTimeElapsed`);
//! * decay subtracts one per period, whatever the counter (the comment in
//!   `evict.c` speaks of halving; the code never halves);
//! * the random draw is `rand() / RAND_MAX` over glibc's 31-bit `rand()`,
//!   so `r` lies in `[0, 1]` and an increment at probability 1 fails once in
//!   2^31 draws, as in Redis.
//!
//! The random stream itself differs from Redis's (the shard's `SmallRng`,
//! not glibc's `rand()`), so individual runs differ while the distribution
//! of counters is the same.

use rand::Rng;

/// Counter of a key just created (Redis's `LFU_INIT_VAL`).
pub const LFU_INIT_VAL: u8 = 5;

/// glibc's `RAND_MAX`: `rand()` returns `0..=RAND_MAX`.
const RAND_MAX: u32 = (1 << 31) - 1;

/// The LFU settings a shard applies on every touch (`lfu-log-factor`,
/// `lfu-decay-time`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LfuParams {
    /// `lfu-log-factor`: how much harder each further increment gets.
    pub log_factor: u32,
    /// `lfu-decay-time`: minutes per decrement of an idle key; 0 = never.
    pub decay_time_min: u32,
}

impl Default for LfuParams {
    /// Redis's defaults: `lfu-log-factor 10`, `lfu-decay-time 1`.
    fn default() -> Self {
        LfuParams {
            log_factor: 10,
            decay_time_min: 1,
        }
    }
}

/// The 16-bit minute clock at `now_ms` (Redis's `LFUGetTimeInMinutes`).
#[inline]
pub fn minutes(now_ms: u64) -> u16 {
    (now_ms / 1000 / 60) as u16
}

/// Minutes since `ldt`, assuming the clock wrapped at most once (Redis's
/// `LFUTimeElapsed`, off-by-one across the wrap included).
#[inline]
pub fn elapsed_min(ldt: u16, now: u16) -> u32 {
    if now >= ldt {
        u32::from(now - ldt)
    } else {
        65535 - u32::from(ldt) + u32::from(now)
    }
}

/// The counter after decay (Redis's `LFUDecrAndReturn`): one less per
/// `decay_time_min` minutes elapsed since `ldt`, floored at 0.
#[inline]
pub fn decayed(counter: u8, ldt: u16, now_ms: u64, decay_time_min: u32) -> u8 {
    if decay_time_min == 0 {
        return counter;
    }
    let periods = elapsed_min(ldt, minutes(now_ms)) / decay_time_min;
    counter.saturating_sub(periods.min(255) as u8)
}

/// The probability that an access increments `counter`.
#[inline]
pub fn incr_probability(counter: u8, log_factor: u32) -> f64 {
    let base = counter.saturating_sub(LFU_INIT_VAL);
    1.0 / (f64::from(base) * f64::from(log_factor) + 1.0)
}

/// One logarithmic increment (Redis's `LFULogIncr`): saturates at 255.
#[inline]
pub fn log_incr(counter: u8, log_factor: u32, rng: &mut impl Rng) -> u8 {
    if counter == 255 {
        return 255;
    }
    let r = f64::from(rng.gen_range(0..=RAND_MAX)) / f64::from(RAND_MAX);
    if r < incr_probability(counter, log_factor) {
        counter + 1
    } else {
        counter
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    const MIN_MS: u64 = 60_000;

    #[test]
    fn minute_clock_wraps_at_16_bits() {
        assert_eq!(minutes(0), 0);
        assert_eq!(minutes(MIN_MS - 1), 0);
        assert_eq!(minutes(MIN_MS), 1);
        assert_eq!(minutes(65535 * MIN_MS), 65535);
        assert_eq!(minutes(65536 * MIN_MS), 0);
        assert_eq!(minutes(65537 * MIN_MS + 59_999), 1);
    }

    #[test]
    fn elapsed_across_the_wrap_is_redis_off_by_one() {
        assert_eq!(elapsed_min(10, 10), 0);
        assert_eq!(elapsed_min(10, 15), 5);
        // True difference 65535 - 65530 + 1 + 3 = 9; Redis says 8.
        assert_eq!(elapsed_min(65530, 3), 8);
        assert_eq!(elapsed_min(65535, 0), 0);
        assert_eq!(elapsed_min(1, 0), 65534);
    }

    #[test]
    fn decay_subtracts_one_per_period() {
        let t = 1000 * MIN_MS;
        let ldt = minutes(t);
        assert_eq!(decayed(20, ldt, t, 1), 20);
        assert_eq!(decayed(20, ldt, t + MIN_MS - 1, 1), 20);
        assert_eq!(decayed(20, ldt, t + MIN_MS, 1), 19);
        assert_eq!(decayed(200, ldt, t + 7 * MIN_MS, 1), 193, "no halving");
        assert_eq!(decayed(20, ldt, t + 7 * MIN_MS, 2), 17);
        assert_eq!(decayed(20, ldt, t + 7 * MIN_MS, 8), 20);
        assert_eq!(decayed(20, ldt, t + 25 * MIN_MS, 1), 0);
        assert_eq!(decayed(255, ldt, t + 300 * MIN_MS, 1), 0);
        assert_eq!(decayed(20, ldt, t + 25 * MIN_MS, 0), 20, "0 = no decay");
        // Across the wrap: ldt 65534, now 65536 + 1 → Redis counts 2.
        let ldt = 65534;
        assert_eq!(decayed(10, ldt, 65537 * MIN_MS, 1), 8);
    }

    #[test]
    fn increment_probability_is_redis_formula() {
        for c in 0..=LFU_INIT_VAL {
            assert_eq!(incr_probability(c, 10), 1.0);
        }
        assert_eq!(incr_probability(6, 10), 1.0 / 11.0);
        assert_eq!(incr_probability(15, 10), 1.0 / 101.0);
        assert_eq!(incr_probability(15, 0), 1.0);
        assert_eq!(incr_probability(255, 100), 1.0 / 25_001.0);
    }

    #[test]
    fn log_incr_saturates_and_always_climbs_to_init() {
        let mut rng = SmallRng::seed_from_u64(1);
        assert_eq!(log_incr(255, 0, &mut rng), 255);
        assert_eq!(log_incr(254, 0, &mut rng), 255);
        for c in 0..=LFU_INIT_VAL {
            assert_eq!(log_incr(c, 10, &mut rng), c + 1);
        }
    }

    /// The observed increment rate at each counter matches `1/(b*f+1)`.
    #[test]
    fn log_incr_rate_matches_probability() {
        let mut rng = SmallRng::seed_from_u64(7);
        for (c, f) in [(6u8, 10u32), (8, 10), (10, 1), (20, 100)] {
            let p = incr_probability(c, f);
            let n = 200_000;
            let hits = (0..n).filter(|_| log_incr(c, f, &mut rng) == c + 1).count();
            let rate = hits as f64 / n as f64;
            // Within 5 standard deviations.
            let sd = (p * (1.0 - p) / n as f64).sqrt();
            assert!((rate - p).abs() < 5.0 * sd, "c {c} f {f}: {rate} vs {p}");
        }
    }

    /// The exact distribution after `n` accesses (a Markov chain on the
    /// counter), for comparing simulated means against.
    fn exact_mean(n: usize, f: u32) -> f64 {
        let mut d = [0f64; 256];
        d[LFU_INIT_VAL as usize] = 1.0;
        for _ in 0..n {
            let mut nd = [0f64; 256];
            for c in 0..256 {
                let p = if c == 255 {
                    0.0
                } else {
                    incr_probability(c as u8, f)
                };
                nd[c] += d[c] * (1.0 - p);
                if c < 255 {
                    nd[c + 1] += d[c] * p;
                }
            }
            d = nd;
        }
        d.iter().enumerate().map(|(c, p)| c as f64 * p).sum()
    }

    #[test]
    fn counters_after_many_accesses_match_the_chain_and_redis() {
        // Means measured on redis-server 7.0.15 (allkeys-lfu, defaults):
        // 400 keys × 100 GETs → 9.81, 150 keys × 1000 GETs → 19.58.
        let mut rng = SmallRng::seed_from_u64(42);
        for (n, trials, redis_mean) in [(100usize, 2000, 9.81), (1000, 500, 19.58)] {
            let mut sum = 0u64;
            for _ in 0..trials {
                let mut c = LFU_INIT_VAL;
                for _ in 0..n {
                    c = log_incr(c, 10, &mut rng);
                }
                sum += u64::from(c);
            }
            let mean = sum as f64 / trials as f64;
            let exact = exact_mean(n, 10);
            assert!((mean - exact).abs() < 0.25, "n {n}: {mean} vs {exact}");
            assert!(
                (exact - redis_mean).abs() < 0.3,
                "n {n}: {exact} vs {redis_mean}"
            );
        }
    }
}
