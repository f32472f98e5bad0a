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
//! loop stalls for the walk; a loop only waits if it allocates from the
//! one arena being walked at that moment. MEMORY PURGE calls [`trim`]
//! itself, synchronously, as Redis's does.
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

/// Unix milliseconds of the next check.
static NEXT_CHECK_MS: AtomicU64 = AtomicU64::new(0);
/// Lowest slack seen since the last trim (`u64::MAX`: none seen yet).
static FLOOR: AtomicU64 = AtomicU64::new(u64::MAX);
/// Unix milliseconds of the last trim's end.
static LAST_TRIM_MS: AtomicU64 = AtomicU64::new(0);
/// A trim was requested and has not finished: no second request.
static PENDING: AtomicBool = AtomicBool::new(false);
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

/// Called by every worker's cron. True when this caller must start a trim
/// (hand [`trim`] to the reclaiming thread); then it is due once, until
/// that trim ends. Cheap when not time to check: one relaxed load.
pub fn due(now_ms: u64, nshards: usize) -> bool {
    let next = NEXT_CHECK_MS.load(Ordering::Relaxed);
    if now_ms < next || !engine::alloc::installed() {
        return false;
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
        return false;
    }
    if PENDING.load(Ordering::Acquire) {
        return false;
    }
    let used = engine::alloc::used_total(nshards);
    let s = slack(resident().1, used);
    let floor = FLOOR.fetch_min(s, Ordering::Relaxed).min(s);
    if !worth_trimming(s, floor, used)
        || now_ms < LAST_TRIM_MS.load(Ordering::Relaxed) + TRIM_INTERVAL_MS
    {
        return false;
    }
    PENDING
        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
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
