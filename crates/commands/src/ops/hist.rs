//! A latency histogram with the exact bucketing of the HDR histogram Redis
//! 7.0 keeps per command (`hdr_init(1, 1_000_000_000, 2)`: 1 ns to 1 s,
//! two significant figures), so LATENCY HISTOGRAM's buckets and INFO
//! latencystats' percentiles are computed as Redis computes them.
//!
//! Layout (HDR's): 24 half-buckets of 128 counters; values below 256 ns
//! count one by one, each later power of two in 128 steps. 3,072 counters
//! (24 KiB), allocated per command and thread on the command's first call,
//! as Redis allocates one per command on its first call.
//!
//! Rejected: the `hdrhistogram` crate. It would pull a dependency for the
//! ~60 lines used here (record, a percentile, cumulative counts at powers
//! of two), and these must match Redis's vendored C version exactly.

/// Redis's `LATENCY_HISTOGRAM_MIN_VALUE` and `_MAX_VALUE` (ns).
pub const MIN_NS: u64 = 1;
pub const MAX_NS: u64 = 1_000_000_000;

const HALF_MAG: u32 = 7;
const HALF: usize = 1 << HALF_MAG;
const SUB_MASK: u64 = 255;
/// `(bucket_count + 1) * sub_bucket_half_count` for 1 ns .. 1 s.
const LEN: usize = 24 * HALF;

/// Counts of call durations in nanoseconds.
#[derive(Clone)]
pub struct Hist {
    counts: Box<[u64; LEN]>,
    pub total: u64,
}

impl Default for Hist {
    fn default() -> Self {
        Self::new()
    }
}

fn bucket(v: u64) -> u32 {
    (64 - (v | SUB_MASK).leading_zeros()) - (HALF_MAG + 1)
}

fn index(v: u64) -> usize {
    let b = bucket(v);
    let sub = (v >> b) as usize;
    (((b as usize) + 1) << HALF_MAG) + sub - HALF
}

fn value_at(i: usize) -> u64 {
    let mut b = (i >> HALF_MAG) as i64 - 1;
    let mut sub = (i & (HALF - 1)) + HALF;
    if b < 0 {
        sub -= HALF;
        b = 0;
    }
    (sub as u64) << b
}

/// HDR's `highest_equivalent_value`: the largest value counted with `v`.
fn highest_equivalent(v: u64) -> u64 {
    let b = bucket(v);
    let sub = v >> b;
    let lowest = sub << b;
    let size = if sub >= 256 {
        1u64 << (b + 1)
    } else {
        1u64 << b
    };
    lowest + size - 1
}

impl Hist {
    pub fn new() -> Self {
        Hist {
            counts: Box::new([0; LEN]),
            total: 0,
        }
    }

    /// Counts one call of `ns` nanoseconds (clamped into 1 ns ..= 1 s, as
    /// Redis's `updateCommandLatencyHistogram`).
    #[inline]
    pub fn record(&mut self, ns: u64) {
        let i = index(ns.clamp(MIN_NS, MAX_NS)).min(LEN - 1);
        self.counts[i] += 1;
        self.total += 1;
    }

    /// Adds another thread's counts.
    /// Takes back a sample [`Hist::record`] recorded (a script run taken
    /// back: `script::traces`); nothing if its bucket is empty.
    pub fn unrecord(&mut self, ns: u64) {
        let i = index(ns.clamp(MIN_NS, MAX_NS)).min(LEN - 1);
        if self.counts[i] > 0 {
            self.counts[i] -= 1;
            self.total -= 1;
        }
    }

    pub fn merge(&mut self, o: &Hist) {
        for (a, b) in self.counts.iter_mut().zip(o.counts.iter()) {
            *a += b;
        }
        self.total += o.total;
    }

    /// HDR's `hdr_value_at_percentile` (ns).
    pub fn percentile(&self, p: f64) -> u64 {
        let p = p.min(100.0);
        let want = (((p / 100.0) * self.total as f64) + 0.5) as u64;
        let want = want.max(1);
        let mut sum = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            sum += c;
            if sum >= want {
                return highest_equivalent(value_at(i));
            }
        }
        0
    }

    /// LATENCY HISTOGRAM's buckets, as Redis's `fillCommandCDF` walks HDR's
    /// logarithmic iterator (first bucket 1024 ns, base 2): `(usec,
    /// cumulative count)` for each power of two whose count grew.
    pub fn cdf(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let (mut level, mut i, mut cum, mut prev) = (1024u64, 0usize, 0u64, 0u64);
        while cum < self.total {
            let upto = index(level).min(LEN - 1);
            while i <= upto {
                cum += self.counts[i];
                i += 1;
            }
            if cum > prev {
                out.push((highest_equivalent(level) / 1000, cum));
            }
            prev = cum;
            if upto == LEN - 1 {
                break;
            }
            level *= 2;
        }
        out
    }
}

impl std::fmt::Debug for Hist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hist {{ total: {} }}", self.total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_hdrs() {
        // Exact below 256 ns, then 128 steps per power of two.
        assert_eq!(index(1), 1);
        assert_eq!(index(255), 255);
        assert_eq!(index(256), 256);
        assert_eq!(index(257), 256);
        assert_eq!(highest_equivalent(1024), 1031);
        assert_eq!(highest_equivalent(32768), 33023);
        for v in [1u64, 200, 256, 1000, 4096, 123_456, 999_999_999, MAX_NS] {
            let i = index(v);
            assert!(
                value_at(i) <= v && v <= highest_equivalent(value_at(i)),
                "{v}"
            );
        }
        assert!(index(MAX_NS) < LEN);
    }

    #[test]
    fn cdf_and_percentiles_as_redis() {
        let mut h = Hist::new();
        // Keys are HDR's highest equivalents of 1024 ns << k, in us; a
        // bucket whose cumulative count did not grow is left out.
        for us in [0u64, 1, 1, 3, 5, 9, 20] {
            h.record(us * 1000);
        }
        assert_eq!(h.cdf(), vec![(1, 3), (4, 4), (8, 5), (16, 6), (33, 7)]);
        assert_eq!(h.percentile(50.0), highest_equivalent(3000));
        assert_eq!(h.percentile(100.0), highest_equivalent(20000));
        assert_eq!(Hist::new().cdf(), vec![]);
        assert_eq!(Hist::new().percentile(50.0), 0);
    }
}
