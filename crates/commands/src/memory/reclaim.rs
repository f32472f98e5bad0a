//! Giving freed memory back to the operating system.
//!
//! The allocator is glibc's malloc (see `engine::alloc` for why). `free`
//! keeps what it gets in the arena's free lists: only a free chunk at the
//! very top of an arena is ever returned on its own, so after a large
//! delete (FLUSHALL, UNLINK of big values, eviction, expiry of many keys)
//! the pages stay resident and RSS never follows the data down.
//! `malloc_trim(0)` walks every arena and hands each whole free page back
//! with `madvise(MADV_DONTNEED)`; that is all MEMORY PURGE does, and the
//! same call made automatically is how RSS comes back within seconds.
//!
//! When: every worker's cron calls [`due`]. It costs one relaxed load
//! unless [`CHECK_MS`] passed since the last check; then one thread (a CAS
//! picks it) reads the resident anonymous memory (`/proc/self/statm`:
//! resident minus file-backed pages, i.e. what the allocator holds plus
//! thread stacks) and the counting allocator's total, and computes the
//! *slack*: resident anonymous bytes not holding a live allocation. The
//! slack never reaches zero (partly used pages, arena headers, stacks), so
//! the check compares it with its *floor*: the lowest slack seen since the
//! last trim (right after a trim, what the trim could not return). A trim
//! is due when the slack has grown past the floor by [`TRIM_MIN_BYTES`] or
//! an eighth of the live data, whichever is more, and at least
//! [`TRIM_INTERVAL_MS`] after the last one: memory was freed and not
//! reused.
//!
//! Why not trim on every check, or from `free`: a trim walks every free
//! chunk of every arena with the arena's lock held (about 10 ms per
//! million free chunks here), and pages it returns are faulted back in
//! (zeroed) when reused. Under a steady load (a write flood under
//! `maxmemory` frees and allocates the same bytes) the slack stays near
//! its floor and nothing is trimmed; a trim that returns nothing (the
//! freed chunks share pages with live ones) raises the floor, so it is not
//! repeated. Why not jemalloc with decay: it measured more bytes per key
//! (`engine::alloc`), the first target of this store.
//!
//! Who trims: not the event loop that noticed: the caller of [`due`] hands
//! the work to a thread of its own (`src/server/worker/memory.rs`), so no
//! loop stalls for the walk; a loop only waits if it allocates from (or
//! frees into) the one arena being walked at that moment. MEMORY PURGE
//! calls [`trim`] itself, synchronously, as Redis's does.
//!
//! When the server is busy, a trim worth doing waits. glibc's
//! `malloc_trim` holds an arena's mutex for the whole walk of that arena
//! (it consolidates the fast bins, then `madvise`s every free chunk of a
//! page or more, again each time even if already returned), and the shard
//! thread using that arena blocks on the mutex. The walk itself is short
//! (7-117 ms, once 203 ms, for the 100-190 MB the stall repro
//! `bench/stall_repro` leaves free, debug build, load 10-15), but the
//! trimming thread can lose its core while it holds the mutex: on this
//! 2-core VM at load 10-14 trims took 0.4-0.5 s and once 2.39 s, strace
//! showed two shard threads waiting on the arena lock until the trim
//! ended, and a multi-shard MGET waited as long (session 16). So each
//! check counts the commands all shards ran since the previous one (the
//! caller passes `sampled_commands`, which each loop adds to at its cron
//! tick): more than [`QUIET_COMMANDS_PER_S`] is a busy period, and a trim
//! starts only after [`QUIET_MS`] (at least two cron ticks) without one.
//! A request arriving during the walk may still wait for it, but few
//! arrive then. A server that is never quiet still trims once a trim has
//! waited [`OVERDUE_MS`] (at most one such trim per growth of the slack
//! past its floor, see above): there the stall can still happen.
//!
//! Measured (3 shards, debug builds, alternated runs, load 10-15):
//! * `bench/stall_repro/trims.sh`, 11 runs each: a trim overlapped the
//!   load in 9 of 11 runs before, in none after; each ran within 1 s of
//!   the load's end instead, RSS 19-52 MB 2.5 s after it (19-21 MB
//!   before). The repro's slowest MGET did not change (1.0-3.2 s both
//!   ways): it waits for the dropped clients' queue of locks, and no trim
//!   lasted more than 0.2 s in these runs.
//! * A probe MGET of 8 keys every 5 ms while a client sends pipelined GETs
//!   and another FLUSHALLs 150 values of 1 MB and 100,000 of 400 bytes,
//!   6 runs each: worst probe 18-73 ms before (trims of 22-203 ms ran
//!   during the load), 24-71 ms after (none did): at this load the
//!   machine's own noise hides the trim.
//!
//! Rejected:
//! * A fixed `M_MMAP_THRESHOLD` of 128 KiB (`mallopt`, which also turns
//!   off glibc's dynamic threshold), so large buffers are `mmap`ped and
//!   given back by `free` itself, with no trim: last session it cut trims
//!   to 3-14 ms; here no trim ran at all in the repro, but every 256 KiB
//!   reply buffer became an `mmap`, 64 pages to fault in and a `munmap`
//!   (a TLB shootdown across the shard threads): server CPU for the repro rose
//!   from 50 to 65 ticks (median of 6 runs each, alternated) and its
//!   slowest MGET did not improve (1.1-2.8 s both ways: that wait is the
//!   dropped clients' lock queue, not the trim).
//! * Trimming in small steps: glibc has no per-arena or bounded trim
//!   (`malloc_trim`'s `pad` only limits what the main heap's top keeps).
//! * A real-time priority (`SCHED_FIFO`) for the trimming thread: a
//!   runaway walk would then starve the shards. The thread does ask for
//!   nice -10 (`src/server/worker/memory.rs`), which needs root,
//!   `CAP_SYS_NICE` or `RLIMIT_NICE` and is skipped without: trims after
//!   the repro's load (8 runs each, alternated, load 11-13) took 6-56 ms
//!   (median 28) at nice 0, 6-23 ms (median 13) at -10, for 46-159 MB.
//!
//! The floor is also the estimate of the allocator's fragmentation that
//! INFO memory reports (`allocator_active`, see `MemFigures`): what stays
//! resident after a trim is memory the allocator cannot give back.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// How often one thread looks at the slack (milliseconds).
pub const CHECK_MS: u64 = 250;
/// Growth of the slack over its floor below which nothing is trimmed.
pub const TRIM_MIN_BYTES: u64 = 16 << 20;
/// At most one automatic trim per this many milliseconds.
pub const TRIM_INTERVAL_MS: u64 = 1000;
/// Commands per second (all shards together) at or below which a check
/// period counts as quiet: a trim then delays few requests, if any.
pub const QUIET_COMMANDS_PER_S: u64 = 100;
/// How long the server must have been quiet (every check in that span)
/// before an automatic trim starts: two check periods, and at least two
/// cron ticks (see [`quiet_needed_ms`]).
pub const QUIET_MS: u64 = 2 * CHECK_MS;
/// A trim worth doing waits for quiet at most this long; then it runs
/// anyway, under load (a server never quiet must still give memory back).
pub const OVERDUE_MS: u64 = 10_000;

/// Unix milliseconds of the next check.
static NEXT_CHECK_MS: AtomicU64 = AtomicU64::new(0);
/// Lowest slack seen since the last trim (`u64::MAX`: none seen yet).
static FLOOR: AtomicU64 = AtomicU64::new(u64::MAX);
/// Unix milliseconds of the last trim's end.
static LAST_TRIM_MS: AtomicU64 = AtomicU64::new(0);
/// A trim was requested and has not finished: no second request.
static PENDING: AtomicBool = AtomicBool::new(false);
/// Commands counted (all shards) and Unix milliseconds at the last check.
static LAST_COMMANDS: AtomicU64 = AtomicU64::new(0);
static LAST_CHECK_MS: AtomicU64 = AtomicU64::new(0);
/// Unix milliseconds of the last check that found the server busy.
static LAST_BUSY_MS: AtomicU64 = AtomicU64::new(0);
/// Unix milliseconds since which a trim has been worth doing and waited
/// for quiet (0: none waiting).
static WAITING_SINCE_MS: AtomicU64 = AtomicU64::new(0);
/// Trims done, and bytes of resident memory they returned (for the log
/// and tests; Redis has no INFO field for them).
static TRIMS: AtomicU64 = AtomicU64::new(0);
static RETURNED: AtomicU64 = AtomicU64::new(0);

/// Resident memory of the process in bytes: (all of it, anonymous only).
/// Anonymous = resident minus file-backed and shared pages (`statm`'s
/// second and third fields): the heap, the arenas, large `mmap`ped
/// allocations and thread stacks, without the binary's own code pages.
pub fn resident() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let mut f = text.split_whitespace().skip(1);
    let mut next = || f.next().and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    let (rss, shared) = (next(), next());
    // SAFETY: sysconf has no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    (rss * page, rss.saturating_sub(shared) * page)
}

/// Slack for anonymous resident bytes `anon` and live bytes `used`.
fn slack(anon: u64, used: u64) -> u64 {
    anon.saturating_sub(used)
}

/// The floor a trim leaves: the slack it could not return, unless values
/// were still being freed in the background (`lazyfree`: a FLUSHALL's
/// databases, big values) while it ran. Pages those values still held
/// could not be returned then and come free later, in pieces that may each
/// stay under [`TRIM_MIN_BYTES`]: taken as the floor they would stay
/// resident. Floor 0 keeps the next check's trim due (at most one per
/// [`TRIM_INTERVAL_MS`]) until a trim ran with nothing pending.
fn floor_after(slack: u64, lazyfree_busy: bool) -> u64 {
    if lazyfree_busy {
        0
    } else {
        slack
    }
}

/// Whether the background thread still has values to free.
fn lazyfree_busy() -> bool {
    engine::lazyfree::pending() > 0
}

/// Whether the slack grew enough over `floor` for a trim to be worth it.
fn worth_trimming(slack: u64, floor: u64, used: u64) -> bool {
    slack > floor.saturating_add(TRIM_MIN_BYTES.max(used / 8))
}

/// Whether `commands` executed in `elapsed_ms` make a busy period (more
/// than [`QUIET_COMMANDS_PER_S`]).
fn busy(commands: u64, elapsed_ms: u64) -> bool {
    commands.saturating_mul(1000) > QUIET_COMMANDS_PER_S.saturating_mul(elapsed_ms.max(1))
}

/// How long without a busy check makes a quiet server, for loops whose
/// cron ticks every `tick_ms`: [`QUIET_MS`], or two ticks if longer. The
/// commands a loop ran reach the count only at its tick, so checks between
/// two ticks see none: a quiet span shorter than a tick (`hz 1`: a second)
/// would mistake that for quiet.
fn quiet_needed_ms(tick_ms: u64) -> u64 {
    QUIET_MS.max(tick_ms.saturating_mul(2))
}

/// Whether a trim worth doing starts now: at least [`TRIM_INTERVAL_MS`]
/// after the last one (`since_trim_ms`), and once the server has been
/// quiet (`quiet_ms`) for `quiet_needed_ms` or the trim has waited for
/// that [`OVERDUE_MS`] (`waited_ms`).
fn starts_now(since_trim_ms: u64, quiet_ms: u64, quiet_needed_ms: u64, waited_ms: u64) -> bool {
    since_trim_ms >= TRIM_INTERVAL_MS && (quiet_ms >= quiet_needed_ms || waited_ms >= OVERDUE_MS)
}

/// Called by every worker's cron (which runs every `tick_ms`) with the
/// commands executed so far by all shards (a running total).
/// `Some(waited_ms)` when this caller must start a trim (hand [`trim`] to
/// the reclaiming thread), with how long it waited for quiet; then it is
/// due once, until that trim ends. Cheap when not time to check: one
/// relaxed load.
pub fn due(now_ms: u64, nshards: usize, commands: u64, tick_ms: u64) -> Option<u64> {
    let next = NEXT_CHECK_MS.load(Ordering::Relaxed);
    if now_ms < next || !engine::alloc::installed() {
        return None;
    }
    // One thread per period does the check.
    if NEXT_CHECK_MS
        .compare_exchange(
            next,
            now_ms + CHECK_MS,
            Ordering::Relaxed,
            Ordering::Relaxed,
        )
        .is_err()
    {
        return None;
    }
    // The CAS above makes this thread the only one checking in this
    // period: the activity figures below need no stronger ordering.
    let since_ms = now_ms.saturating_sub(LAST_CHECK_MS.swap(now_ms, Ordering::Relaxed));
    let ran = commands.saturating_sub(LAST_COMMANDS.swap(commands, Ordering::Relaxed));
    if busy(ran, since_ms) {
        LAST_BUSY_MS.store(now_ms, Ordering::Relaxed);
    }
    if PENDING.load(Ordering::Acquire) {
        return None;
    }
    let used = engine::alloc::used_total(nshards);
    let s = slack(resident().1, used);
    let floor = FLOOR.fetch_min(s, Ordering::Relaxed).min(s);
    if !worth_trimming(s, floor, used) {
        WAITING_SINCE_MS.store(0, Ordering::Relaxed);
        return None;
    }
    let waiting_since = match WAITING_SINCE_MS.load(Ordering::Relaxed) {
        0 => {
            WAITING_SINCE_MS.store(now_ms, Ordering::Relaxed);
            now_ms
        }
        t => t,
    };
    let waited_ms = now_ms.saturating_sub(waiting_since);
    if !starts_now(
        now_ms.saturating_sub(LAST_TRIM_MS.load(Ordering::Relaxed)),
        now_ms.saturating_sub(LAST_BUSY_MS.load(Ordering::Relaxed)),
        quiet_needed_ms(tick_ms),
        waited_ms,
    ) {
        return None;
    }
    if PENDING
        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return None;
    }
    WAITING_SINCE_MS.store(0, Ordering::Relaxed);
    Some(waited_ms)
}

/// What one trim did.
#[derive(Debug, Clone, Copy)]
pub struct Trimmed {
    /// Resident anonymous bytes before and after.
    pub before: u64,
    pub after: u64,
    pub took_us: u64,
}

impl Trimmed {
    pub fn returned(&self) -> u64 {
        self.before.saturating_sub(self.after)
    }
}

/// Returns every free page of every arena to the system now
/// (`malloc_trim(0)`), and makes what stays the new floor. Blocks the
/// caller for the walk (see the module doc); `nshards` sizes the read of
/// the allocator's counters.
pub fn trim(nshards: usize) -> Trimmed {
    let before = resident().1;
    let t = Instant::now();
    // SAFETY: malloc_trim only walks the allocator's own free lists, under
    // its locks; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
    let took_us = t.elapsed().as_micros() as u64;
    let after = resident().1;
    if engine::alloc::installed() {
        let used = engine::alloc::used_total(nshards);
        FLOOR.store(
            floor_after(slack(after, used), lazyfree_busy()),
            Ordering::Relaxed,
        );
    }
    LAST_TRIM_MS.store(engine::now_ms(), Ordering::Relaxed);
    TRIMS.fetch_add(1, Ordering::Relaxed);
    RETURNED.fetch_add(before.saturating_sub(after), Ordering::Relaxed);
    PENDING.store(false, Ordering::Release);
    Trimmed {
        before,
        after,
        took_us,
    }
}

/// The slack floor: resident anonymous bytes beyond the live data that
/// the last trim could not return, lowered since as the slack shrank
/// (0 before the first check).
pub fn floor() -> u64 {
    match FLOOR.load(Ordering::Relaxed) {
        u64::MAX => 0,
        f => f,
    }
}

/// Trims done so far, and the resident bytes they returned.
pub fn totals() -> (u64, u64) {
    (
        TRIMS.load(Ordering::Relaxed),
        RETURNED.load(Ordering::Relaxed),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trim_during_background_frees_leaves_the_next_one_due() {
        let mb = 1 << 20;
        // 30 MB the trim could not return while a FLUSHALL was being
        // freed: not a floor, so 20 MB more slack still gets trimmed.
        let floor = floor_after(30 * mb, true);
        assert!(worth_trimming(20 * mb, floor, 0));
        // The same with nothing pending is the floor.
        let floor = floor_after(30 * mb, false);
        assert!(!worth_trimming(40 * mb, floor, 0));
    }

    #[test]
    fn a_trim_is_worth_it_only_past_the_floor_by_the_threshold() {
        let mb = 1 << 20;
        // Steady state: slack at its floor.
        assert!(!worth_trimming(10 * mb, 10 * mb, 64 * mb));
        // Up by less than 16 MB (or used/8): not yet.
        assert!(!worth_trimming(25 * mb, 10 * mb, 64 * mb));
        assert!(worth_trimming(27 * mb, 10 * mb, 64 * mb));
        // With 1 GB live, an eighth of it: 128 MB.
        assert!(!worth_trimming(130 * mb, 10 * mb, 1024 * mb));
        assert!(worth_trimming(140 * mb, 10 * mb, 1024 * mb));
        // After FLUSHALL: everything freed is slack.
        assert!(worth_trimming(300 * mb, 3 * mb, mb));
        assert_eq!(slack(5, 9), 0);
    }

    #[test]
    fn a_busy_server_is_not_trimmed_until_quiet_or_overdue() {
        // 100 commands per second or fewer is quiet, whatever the period.
        assert!(!busy(25, 250));
        assert!(busy(26, 250));
        assert!(!busy(100, 1000));
        assert!(busy(101, 1000));
        assert!(!busy(0, 0));
        assert!(busy(1, 0));
        // A trim worth doing, the last one long ago: it waits while the
        // server was busy in the last two check periods...
        let need = quiet_needed_ms(100);
        assert_eq!(need, 500);
        assert!(!starts_now(60_000, 0, need, 0));
        assert!(!starts_now(60_000, need - 1, need, OVERDUE_MS - 1));
        // ...and starts once it was quiet for both, or waited 10 s.
        assert!(starts_now(60_000, need, need, 0));
        assert!(starts_now(60_000, 0, need, OVERDUE_MS));
        // Never sooner than a second after the last one.
        assert!(!starts_now(TRIM_INTERVAL_MS - 1, u64::MAX, need, u64::MAX));
        assert!(starts_now(TRIM_INTERVAL_MS, u64::MAX, need, u64::MAX));
        // With `hz 1` the loops add their commands once a second: two
        // seconds without any make a quiet server, not two check periods.
        assert_eq!(quiet_needed_ms(1000), 2000);
        assert!(!starts_now(60_000, 1500, quiet_needed_ms(1000), 0));
    }

    #[test]
    fn resident_reads_this_process() {
        let (rss, anon) = resident();
        assert!(rss > 0 && anon > 0 && anon <= rss, "{rss} {anon}");
    }

    #[test]
    fn a_trim_records_its_result() {
        let (n, _) = totals();
        let t = trim(1);
        assert!(t.took_us < 60_000_000);
        assert_eq!(t.returned(), t.before.saturating_sub(t.after));
        assert!(totals().0 > n);
        assert!(!PENDING.load(Ordering::Relaxed));
    }
}
