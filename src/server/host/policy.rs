//! The numbers behind shard consolidation (see `host`): when two threads'
//! loads merge, when a hub spreads, how long a worker or a hub waits
//! before the next move, and whether a spread paid. Pure functions of
//! loads, readings and times, so the policy is tested without threads or
//! clocks; `host` owns the threads and feeds them.

use std::time::{Duration, Instant};

/// CPU share of a thread in per mille of one core.
pub(super) type Permille = u32;

/// A thread hands its worker to a hub when its own load and the hub's
/// added stay below this for `STREAK` windows: two threads at 0.35–0.45
/// of a core each (pipeline 1, 50 clients) merge.
pub(super) const MERGE_BELOW: Permille = 900;

/// A burst: the hub was busy at least this share of [`SPREAD_WINDOW`].
pub(super) const SPREAD_BUSY: Permille = 970;
pub(super) const SPREAD_WINDOW: Duration = Duration::from_millis(5);

/// ... for this many windows after the first of its run of busy ones:
/// those are what the spread's trial compares with, so they must show the
/// hub's steady rate. The first busy window is left out: it holds the
/// burst's ramp. A redis-benchmark run of SETBIT at pipeline 16 began
/// with a 5 ms window of its 50 connections being accepted, 116k
/// requests/s at 6.2 µs of CPU each against a steady 1.5M at 0.6 µs: the
/// spread that followed looked to pay tenfold, stayed for the rest of the
/// run, and cost 18 % more CPU per request for 22 % less throughput (two
/// vCPUs, the load generator on one). So a burst spreads 25 ms after it
/// began, not 5.
pub(super) const BEFORE_WINDOWS: u32 = 4;

/// ... and only while the machine has most of a core idle for the threads
/// given back. Without it, a second thread competes for the same cores:
/// with redis-benchmark on one of two vCPUs, a saturated hub at pipeline
/// 16 ran MGET of 10 keys at 263k/s, the two threads apart at 215k/s; the
/// machine was about half a core idle meanwhile (the load generator waits
/// for replies too). Read from `/proc/stat` once per load window.
pub(super) const SPLIT_MIN_IDLE: Permille = 900;

/// After a worker is given back for load, no merge for this long; doubled
/// (up to `HOLD_MAX`) each time it is given back within `HOLD_RESET` of
/// merging.
pub(super) const HOLD_MIN: Duration = Duration::from_secs(1);
pub(super) const HOLD_MAX: Duration = Duration::from_secs(60);
pub(super) const HOLD_RESET: Duration = Duration::from_secs(30);

/// How long a spread runs before it is judged (see [`pays`]): at 100k
/// requests per second, 5,000 requests.
pub(super) const TRIAL: Duration = Duration::from_millis(50);
/// A trial its hub could not judge within this (it was away at another
/// hub, or stuck in a round) says nothing: it is dropped.
pub(super) const TRIAL_STALE: Duration = Duration::from_millis(200);
/// A spread pays when the group's throughput rose at least this much (per
/// mille), or its CPU per request did not rise.
pub(super) const PAYS_RATE: u64 = 1100;
/// After a spread that did not pay, no spread for this long, doubled (up
/// to `BACKOFF_MAX`) by each further one that does not pay.
pub(super) const BACKOFF_MIN: Duration = Duration::from_secs(1);
pub(super) const BACKOFF_MAX: Duration = Duration::from_secs(64);
/// A spread that paid is reviewed this long after its verdict: the hub
/// calls its workers back, and the next burst, if any, is a trial of its
/// own against the hub's steady rate. Doubled (up to `REVIEW_MAX`) each
/// time the spread pays again. A verdict holds for the load it was made
/// under; without a review a spread that once paid stayed until the load
/// fell below `MERGE_BELOW`, which two saturated threads never do.
pub(super) const REVIEW_MIN: Duration = Duration::from_secs(1);
pub(super) const REVIEW_MAX: Duration = Duration::from_secs(64);
/// The backoff ends when the hub's request rate over a load window moves
/// this far (a factor) from the rate of the last trial: the load changed,
/// and what did not pay then may pay now.
pub(super) const LOAD_CHANGE: u64 = 2;

/// Whether a thread alone with its worker should hand it to a hub.
pub(super) fn merge_wanted(mine: Permille, hub: Permille) -> bool {
    mine + hub < MERGE_BELOW
}

/// How many workers a burst gives back: one per idle core of the last
/// reading (at least one).
pub(super) fn spread_count(idle: Option<Permille>) -> usize {
    (idle.unwrap_or(0) / 1000).max(1) as usize
}

/// Whether a run of `busy_windows` busy [`SPREAD_WINDOW`]s (the current
/// one included) is long enough to spread on: its first, then
/// [`BEFORE_WINDOWS`] to compare with.
pub(super) fn spread_ready(busy_windows: u32) -> bool {
    busy_windows > BEFORE_WINDOWS
}

/// Whether a hub busy `busy` of its last [`SPREAD_WINDOW`] should give its
/// workers back, given the machine's idle CPU (`None`: not known yet,
/// then it keeps them).
pub(super) fn spread_wanted(busy: Permille, idle: Option<Permille>) -> bool {
    busy >= SPREAD_BUSY && idle.is_some_and(|i| i >= SPLIT_MIN_IDLE)
}

/// A hub's busy share of a span, in per mille, from its idle time in it.
pub(super) fn busy_of(span: Duration, idle: Duration) -> Permille {
    let span = span.as_nanos().max(1);
    1000 - (idle.as_nanos().min(span) * 1000 / span) as Permille
}

/// How long to refuse a merge after giving a worker back that merged
/// `held` ago, given the previous hold.
pub(super) fn next_hold(prev: Duration, held: Duration) -> Duration {
    if held >= HOLD_RESET || prev.is_zero() {
        HOLD_MIN
    } else {
        (prev * 2).min(HOLD_MAX)
    }
}

/// Whether a thread that had `ran` of CPU time over `wall` ran most of
/// it (else it mostly waited on a run queue: the machine is busier than
/// its cores).
pub(super) fn ran_most(ran: Duration, wall: Duration) -> bool {
    ran * 2 >= wall
}

/// Whether a hub turn that ran `ran` of CPU time since the watchdog first
/// saw it in that turn is working through one long command (it is stuck
/// then, once the turn is older than its bar): [`STUCK`](super::STUCK) of
/// CPU, not most of the wall time since. On this 2-vCPU VM, turns of 1 to
/// 16 MSETs of 10 keys over 32 shards (0.01-0.2 ms of work) were measured
/// at 2-3 ms of thread CPU now and then (a build with each turn's CPU
/// logged, branch cores24; cause not found: the request's work it is
/// not), which is most of the 3-4 ms the watchdog had watched them: each
/// such turn gave all 31 adopted shards back, for a 50 ms trial that did
/// not pay (4 of 13 runs of MSET at pipeline 16, 50-100 ms of CPU each).
/// A long command on a hub that runs is found 2-3 ms later than by the
/// half-the-wall rule; one on a hub kept off its core, by `STUCK_ANYWAY`
/// as before.
pub(super) fn turn_running(ran: Duration) -> bool {
    ran >= super::STUCK
}

/// What a group of threads achieved over a span: requests served per
/// second, and CPU time per request.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Figures {
    pub per_sec: u64,
    pub cpu_ns_per_req: u64,
}

impl Figures {
    /// The figures of `reqs` requests served in `wall` with `cpu_ns` of
    /// CPU time; `None` for no requests or no time (nothing to compare).
    pub fn of(reqs: u64, cpu_ns: u64, wall: Duration) -> Option<Figures> {
        if reqs == 0 || wall.is_zero() {
            return None;
        }
        Some(Figures {
            per_sec: per_sec(reqs, wall),
            cpu_ns_per_req: cpu_ns / reqs,
        })
    }
}

/// `reqs` requests in `wall`, per second (0 for no time).
pub(super) fn per_sec(reqs: u64, wall: Duration) -> u64 {
    let wall_ns = wall.as_nanos().max(1);
    (reqs as u128 * 1_000_000_000 / wall_ns) as u64
}

/// Whether a spread paid: the group served at least [`PAYS_RATE`] per
/// mille of its requests per second before, or did not spend more CPU per
/// request. On two vCPUs with the load generator on one, two threads at
/// pipeline 1 served no more than one hub, at 7.4–7.9 µs of CPU per
/// SETBIT against 6.3: they go back. On idle cores a real burst's
/// throughput rises with the threads: they stay.
pub(super) fn pays(before: Figures, after: Figures) -> bool {
    after.per_sec * 1000 >= before.per_sec * PAYS_RATE
        || after.cpu_ns_per_req <= before.cpu_ns_per_req
}

/// A hub's backoff from spreading after spreads that did not pay.
#[derive(Debug, Default)]
pub(super) struct Backoff {
    /// The current backoff (zero: none).
    len: Duration,
    /// No spread before this.
    until: Option<Instant>,
    /// The requests per second of the last spread that did not pay.
    per_sec: u64,
    /// How long after its verdict the last spread that paid was reviewed
    /// (zero: none paid since the last that did not).
    review: Duration,
}

impl Backoff {
    /// Whether the hub may spread at `now`.
    pub fn allows(&self, now: Instant) -> bool {
        self.until.is_none_or(|u| now >= u)
    }

    /// A spread at `per_sec` requests per second did not pay: back off,
    /// twice as long as last time (up to [`BACKOFF_MAX`]).
    pub fn failed(&mut self, now: Instant, per_sec: u64) -> Duration {
        self.len = if self.len.is_zero() {
            BACKOFF_MIN
        } else {
            (self.len * 2).min(BACKOFF_MAX)
        };
        self.until = Some(now + self.len);
        self.per_sec = per_sec;
        self.review = Duration::ZERO;
        self.len
    }

    /// A spread paid: the next burst spreads at once. Returns when to
    /// review it ([`REVIEW_MIN`], doubling while spreads keep paying).
    pub fn paid(&mut self) -> Duration {
        let review = if self.review.is_zero() {
            REVIEW_MIN
        } else {
            (self.review * 2).min(REVIEW_MAX)
        };
        *self = Backoff {
            review,
            ..Backoff::default()
        };
        review
    }

    /// The hub served `per_sec` requests per second over a load window:
    /// a load [`LOAD_CHANGE`] times higher or lower than the one that did
    /// not pay ends the backoff. True if it did.
    pub fn observe(&mut self, per_sec: u64) -> bool {
        if self.len.is_zero() {
            return false;
        }
        let was = self.per_sec.max(1);
        if per_sec * LOAD_CHANGE < was || per_sec > was * LOAD_CHANGE {
            *self = Backoff::default();
            return true;
        }
        false
    }
}

/// This thread's CPU time so far, in ns.
pub(super) fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(0)
}

/// The CPU time so far of thread `tid` of this process, in ns; `None` if
/// it has exited (the kernel refuses another process's thread clocks, so
/// a reused id is refused too). The clock id is glibc's
/// `MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)`, what `pthread_getcpuclockid`
/// returns, built from the kernel's thread id rather than a `pthread_t`
/// that dangles once the thread is gone.
pub(super) fn thread_cpu_ns_of(tid: i32) -> Option<u64> {
    const CPUCLOCK_SCHED: libc::clockid_t = 2;
    const CPUCLOCK_PERTHREAD_MASK: libc::clockid_t = 4;
    if tid <= 0 {
        return None;
    }
    clock_ns(((!tid) << 3) | CPUCLOCK_PERTHREAD_MASK | CPUCLOCK_SCHED)
}

fn clock_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// The calling thread's kernel id.
pub(super) fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// The machine's idle and total CPU time so far (`/proc/stat`, in clock
/// ticks), and its number of CPUs.
///
/// Read into a buffer this thread keeps ([`STAT_TEXT`]) and parsed
/// without allocating. A hub reads it every load window (10 times a
/// second, idle or not), and a fresh `String` grew by `realloc` to 2 KiB
/// each time. glibc's `realloc` puts the chunk it moves out of in the
/// thread's cache (tcache) but takes the new one from the arena, never
/// from the cache, so readings left chunks of about 1 KiB in the cache
/// that only a `malloc` of their size takes back, and nothing else mallocs
/// those sizes. With 256 chunks per size (`src/main.rs`) the cache of
/// shard 0's thread held ~0.4 MiB of them after a minute, idle or under
/// load (gdb, `tcache->counts`): most of the RSS creep bench/scripting.sh
/// saw over millions of EVALSHA calls (bench/README.md, issue 23).
pub(super) fn cpu_ticks() -> Option<(u64, u64, u64)> {
    use std::io::Read;
    STAT_TEXT.with(|cell| {
        let mut text = cell.try_borrow_mut().ok()?;
        text.clear();
        text.reserve(STAT_TEXT_BYTES);
        let read = std::fs::File::open("/proc/stat").and_then(|mut f| f.read_to_string(&mut text));
        let ticks = read.ok().and_then(|_| parse_stat(&text));
        if text.capacity() > STAT_KEEP_BYTES {
            *text = String::new();
        }
        ticks
    })
}

/// Room [`cpu_ticks`] reads `/proc/stat` into: its text is ~1.2 KiB on
/// two CPUs and grows by ~100 bytes a CPU.
const STAT_TEXT_BYTES: usize = 16 << 10;
/// A buffer grown past this (hundreds of CPUs) is freed after the reading.
const STAT_KEEP_BYTES: usize = 256 << 10;

thread_local! {
    /// [`cpu_ticks`]'s buffer.
    static STAT_TEXT: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// (idle, total, CPUs) of `/proc/stat`'s text: idle is idle + iowait,
/// total the first eight fields of the `cpu` line (user nice system idle
/// iowait irq softirq steal; guest is in user), CPUs the `cpuN` lines.
fn parse_stat(stat: &str) -> Option<(u64, u64, u64)> {
    let mut lines = stat.lines();
    let first = lines.next()?.strip_prefix("cpu ")?;
    let (mut total, mut idle) = (0u64, 0u64);
    for (i, x) in first.split_whitespace().take(8).enumerate() {
        let v: u64 = x.parse().unwrap_or(0);
        total += v;
        if i == 3 || i == 4 {
            idle += v;
        }
    }
    let cpus = lines.filter(|l| l.starts_with("cpu")).count() as u64;
    Some((idle, total, cpus.max(1)))
}

/// Idle CPU between two [`cpu_ticks`] readings, per mille of one core;
/// a full core's worth when `/proc/stat` cannot be read (then only the
/// hub's load decides); `None` for a first reading.
pub(super) fn idle_between(
    a: Option<(u64, u64, u64)>,
    b: Option<(u64, u64, u64)>,
) -> Option<Permille> {
    match (a, b) {
        (Some((i0, t0, _)), Some((i1, t1, cpus))) if t1 > t0 => {
            Some(((i1.saturating_sub(i0)) * 1000 * cpus / (t1 - t0)) as Permille)
        }
        (Some(_), Some(_)) => Some(0),
        (None, Some(_)) => None,
        (_, None) => Some(1000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_light_threads_merge_and_a_core_of_work_does_not() {
        assert!(merge_wanted(400, 400));
        assert!(merge_wanted(0, 0));
        assert!(!merge_wanted(450, 450));
        assert!(!merge_wanted(5, 990), "the hub is nearly full");
        assert!(!merge_wanted(1000, 0));
    }

    #[test]
    fn a_hub_spreads_on_a_burst_when_a_core_is_idle() {
        assert!(spread_wanted(1000, Some(1000)));
        assert!(spread_wanted(SPREAD_BUSY, Some(SPLIT_MIN_IDLE)));
        assert!(!spread_wanted(1000, None), "no reading yet");
        assert!(
            !spread_wanted(1000, Some(500)),
            "half a core idle: the load generator waits"
        );
        assert!(!spread_wanted(900, Some(1000)), "it still sleeps");
        assert_eq!(spread_count(Some(SPLIT_MIN_IDLE)), 1);
        assert_eq!(spread_count(Some(1999)), 1);
        assert_eq!(spread_count(Some(30_500)), 30, "one per idle core");
        assert_eq!(spread_count(None), 1);
        let ms = Duration::from_millis;
        assert_eq!(busy_of(ms(5), ms(0)), 1000);
        assert_eq!(busy_of(ms(5), ms(5)), 0);
        assert_eq!(busy_of(ms(10), ms(1)), 900);
        assert_eq!(busy_of(ms(0), ms(1)), 0, "no span");
    }

    #[test]
    fn idle_cpu_is_counted_in_cores() {
        // Two CPUs, 20 ticks, 10 of them idle: one core idle.
        assert_eq!(idle_between(Some((0, 0, 2)), Some((10, 20, 2))), Some(1000));
        assert_eq!(idle_between(Some((0, 0, 2)), Some((1, 20, 2))), Some(100));
        assert_eq!(idle_between(None, Some((1, 20, 2))), None, "first reading");
        assert_eq!(idle_between(Some((0, 0, 2)), None), Some(1000), "unknown");
        assert_eq!(idle_between(Some((5, 20, 2)), Some((5, 20, 2))), Some(0));
        let now = cpu_ticks().expect("/proc/stat");
        assert!(now.1 >= now.0 && now.2 >= 1);
    }

    #[test]
    fn proc_stat_is_parsed_as_before() {
        let text = "cpu  10 1 5 100 4 2 3 1 7 0\ncpu0 5 0 2 50 2 1 1 0 3 0\n\
                    cpu1 5 1 3 50 2 1 2 1 4 0\nintr 12 0\nctxt 99\n";
        assert_eq!(parse_stat(text), Some((104, 126, 2)), "guest not added");
        assert_eq!(parse_stat("cpu  1 2\n"), Some((0, 3, 1)), "short line");
        assert_eq!(parse_stat("intr 1\n"), None);
        assert_eq!(parse_stat(""), None);
    }

    #[test]
    fn reading_proc_stat_reuses_the_threads_buffer() {
        // Allocating per reading is what filled glibc's cache (see
        // cpu_ticks): the second reading must reuse the first's buffer.
        assert!(cpu_ticks().is_some());
        let first = STAT_TEXT.with(|b| (b.borrow().as_ptr(), b.borrow().capacity()));
        assert!(first.1 >= STAT_TEXT_BYTES);
        assert!(cpu_ticks().is_some());
        let second = STAT_TEXT.with(|b| (b.borrow().as_ptr(), b.borrow().capacity()));
        assert_eq!(first, second, "no new buffer, no growth");
    }

    #[test]
    fn the_hold_doubles_when_a_worker_comes_back_soon_after_merging() {
        let s = Duration::from_secs;
        assert_eq!(next_hold(Duration::ZERO, s(1)), HOLD_MIN);
        assert_eq!(next_hold(s(1), s(2)), s(2));
        assert_eq!(next_hold(s(2), s(2)), s(4));
        assert_eq!(next_hold(s(40), s(2)), HOLD_MAX);
        assert_eq!(next_hold(s(40), HOLD_RESET), HOLD_MIN);
    }

    #[test]
    fn a_thread_that_ran_half_its_time_ran() {
        let ms = Duration::from_millis;
        assert!(ran_most(ms(5), ms(5)));
        assert!(ran_most(ms(3), ms(6)));
        assert!(!ran_most(ms(1), ms(6)), "on a run queue");
        assert!(ran_most(Duration::ZERO, Duration::ZERO));
    }

    #[test]
    fn a_turn_runs_long_only_with_stuck_of_cpu() {
        let ms = Duration::from_millis;
        // Most of the 4 ms watched, but ordinary work on a busy VM.
        assert!(!turn_running(ms(3)));
        assert!(!turn_running(ms(4)));
        assert!(turn_running(super::super::STUCK));
        assert!(turn_running(ms(9)));
    }

    fn fig(per_sec: u64, cpu_ns_per_req: u64) -> Figures {
        Figures {
            per_sec,
            cpu_ns_per_req,
        }
    }

    #[test]
    fn figures_are_rates_over_the_span() {
        let ms = Duration::from_millis;
        // 5,000 requests in 50 ms on 0.3 s of CPU (two threads at 3 cores'
        // worth would be 150 ms each: any sum is fine).
        assert_eq!(
            Figures::of(5_000, 30_000_000, ms(50)),
            Some(fig(100_000, 6_000))
        );
        assert_eq!(Figures::of(0, 1, ms(50)), None, "no requests");
        assert_eq!(per_sec(0, ms(50)), 0);
        assert_eq!(
            per_sec(3, Duration::ZERO),
            3_000_000_000,
            "no time: a bound"
        );
        assert_eq!(Figures::of(1, 1, Duration::ZERO), None, "no time");
    }

    /// Last session's SETBIT at pipeline 1 on two vCPUs: one hub 6.3 µs
    /// per op; the two threads apart 7.4–7.9 µs, and no more throughput.
    #[test]
    fn a_spread_that_only_costs_cpu_does_not_pay() {
        let hub = fig(160_000, 6_300);
        assert!(!pays(hub, fig(158_000, 7_600)), "same rate, more CPU");
        assert!(!pays(hub, fig(172_000, 7_400)), "+7.5 %: not enough");
        assert!(!pays(hub, fig(120_000, 7_900)), "less and dearer");
    }

    #[test]
    fn a_spread_that_serves_more_or_costs_no_more_pays() {
        let hub = fig(160_000, 6_300);
        assert!(pays(hub, fig(176_000, 7_000)), "+10 %: the burst needed it");
        assert!(pays(hub, fig(300_000, 6_900)), "a many-core burst");
        assert!(pays(hub, fig(160_000, 6_300)), "no dearer: it may stay");
        assert!(pays(hub, fig(150_000, 6_000)), "cheaper");
    }

    #[test]
    fn the_backoff_doubles_up_to_its_cap_and_a_paying_spread_ends_it() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut b = Backoff::default();
        assert!(b.allows(t0), "no backoff at first");
        assert_eq!(b.failed(t0, 160_000), BACKOFF_MIN);
        assert!(!b.allows(t0));
        assert!(!b.allows(t0 + BACKOFF_MIN / 2));
        assert!(b.allows(t0 + BACKOFF_MIN));
        let mut len = BACKOFF_MIN;
        for _ in 0..10 {
            let next = b.failed(t0, 160_000);
            assert_eq!(next, (len * 2).min(BACKOFF_MAX));
            len = next;
        }
        assert_eq!(len, BACKOFF_MAX, "capped");
        assert!(!b.allows(t0 + BACKOFF_MAX - s(1)));
        assert!(b.allows(t0 + BACKOFF_MAX));
        assert_eq!(b.paid(), REVIEW_MIN);
        assert!(b.allows(t0));
        assert_eq!(b.failed(t0, 160_000), BACKOFF_MIN, "starts over");
    }

    #[test]
    fn a_spread_that_keeps_paying_is_reviewed_less_and_less_often() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut b = Backoff::default();
        let reviews: Vec<Duration> = (0..9).map(|_| b.paid()).collect();
        assert_eq!(
            reviews,
            [1, 2, 4, 8, 16, 32, 64, 64, 64].map(s).to_vec(),
            "doubling up to the cap"
        );
        assert!(b.allows(t0), "a paying spread sets no backoff");
        b.failed(t0, 160_000);
        assert_eq!(b.paid(), REVIEW_MIN, "a spread that failed starts it over");
    }

    #[test]
    fn a_burst_spreads_once_its_steady_windows_are_measured() {
        assert!(!spread_ready(0));
        assert!(!spread_ready(1), "the ramp alone");
        assert!(!spread_ready(BEFORE_WINDOWS), "the ramp and all but one");
        assert!(spread_ready(BEFORE_WINDOWS + 1));
        assert!(spread_ready(1000));
    }

    #[test]
    fn the_backoff_ends_when_the_load_changes_a_lot() {
        let t0 = Instant::now();
        let mut b = Backoff::default();
        assert!(!b.observe(0), "nothing to end");
        b.failed(t0, 160_000);
        assert!(!b.observe(150_000), "the same load, consolidated again");
        assert!(!b.observe(90_000));
        assert!(!b.allows(t0));
        assert!(b.observe(70_000), "the load went away");
        assert!(b.allows(t0), "the next burst spreads at once");
        b.failed(t0, 1_000);
        b.failed(t0, 1_000);
        assert!(b.observe(2_001), "twice the load (a hub not saturated)");
        assert_eq!(b.failed(t0, 1_000), BACKOFF_MIN, "and the length restarts");
    }

    /// A hub that sees a burst every 100 ms for two minutes, each spread
    /// judged as it turns out: spreads that pay go on at every burst,
    /// spreads that do not pay come back fewer and fewer times.
    fn spreads_in_two_minutes(after: Figures, rate_between: u64) -> usize {
        let t0 = Instant::now();
        let before = fig(160_000, 6_300);
        let mut b = Backoff::default();
        let mut spreads = 0;
        for tick in 0..1200 {
            let now = t0 + Duration::from_millis(100 * tick);
            b.observe(rate_between);
            if !b.allows(now) {
                continue;
            }
            spreads += 1;
            if pays(before, after) {
                b.paid();
            } else {
                b.failed(now, before.per_sec);
            }
        }
        spreads
    }

    #[test]
    fn a_load_that_pays_keeps_spreading_and_one_that_does_not_backs_off() {
        assert_eq!(
            spreads_in_two_minutes(fig(300_000, 6_800), 160_000),
            1200,
            "a many-core burst: every time"
        );
        // 1, 2, 4, 8, 16, 32, 64 s of backoff: spreads at 0, 1, 3, 7, 15,
        // 31, 63 and 127 s (past the end).
        assert_eq!(
            spreads_in_two_minutes(fig(158_000, 7_600), 160_000),
            7,
            "two vCPUs and a load generator"
        );
        assert_eq!(
            spreads_in_two_minutes(fig(158_000, 7_600), 10_000),
            1200,
            "a load that keeps changing ends every backoff"
        );
    }

    #[test]
    fn a_threads_cpu_clock_is_read_from_its_id_while_it_lives() {
        let me = gettid();
        let mine = thread_cpu_ns();
        let read = thread_cpu_ns_of(me).expect("this thread's clock");
        assert!(read >= mine, "{read} < {mine}");
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        // Alive until told: under load a thread that spun 20 ms had exited
        // before the look.
        let t = std::thread::spawn(move || {
            tx.send(gettid()).expect("send");
            let _ = done_rx.recv();
        });
        let other = rx.recv().expect("tid");
        assert!(thread_cpu_ns_of(other).is_some(), "a live thread");
        done_tx.send(()).expect("done");
        t.join().expect("join");
        // `join` returns once the kernel cleared the thread's id, which is
        // before the thread is released (and its clock with it): looked at
        // again until then, with a deadline.
        let t0 = std::time::Instant::now();
        while thread_cpu_ns_of(other).is_some() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(thread_cpu_ns_of(other), None, "an exited thread");
        assert_eq!(thread_cpu_ns_of(0), None);
        assert_eq!(thread_cpu_ns_of(-5), None);
    }
}
