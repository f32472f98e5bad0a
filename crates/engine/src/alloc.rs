//! Memory accounting: a counting wrapper around the system allocator
//! (glibc malloc), behind INFO's `used_memory` and eviction.
//!
//! Why glibc and not jemalloc: for this workload (many small keys and
//! values) glibc measured fewer bytes per key than jemalloc (see the commit
//! that introduced this module and `bench/memory.sh`), needs no C
//! dependency to build, and a counter around it costs two arithmetic
//! operations and one uncontended relaxed atomic add per call.
//!
//! What is counted: every allocation is charged what glibc really takes for
//! it, the request plus the 8-byte chunk header rounded up to 16 bytes,
//! at least 32 ([`chunk`]); a free gives the same figure back (Rust passes
//! the layout to `dealloc`, so no `malloc_usable_size` call is needed).
//! The sum is what the heap holds for live allocations; free chunks,
//! arena slack and pages not yet returned show up only in RSS (INFO's
//! fragmentation figures compare the two).
//!
//! Per-thread counters: each thread adds to one of [`SLOTS`] cache-line
//! sized counters, chosen by a thread-local index: slot `1 + id` for shard
//! thread `id` ([`enter_shard`]), slot 0 for every other thread. The total
//! is the sum of the slots in use, read with relaxed loads, no locks. A
//! shard's own slot is an approximation of what that shard holds: memory
//! allocated on one thread and freed on another (a reply built by the
//! owner of a key and written by the connection's thread, scratch copies of
//! a multi-shard command) moves between slots. The lazyfree thread charges
//! the frees it does to the shard that handed it the value, so deleting a
//! large value lowers its shard's slot. Eviction uses the per-shard figure
//! only to share out work (see `evict`), never as a hard per-shard limit.
//!
//! Process state by nature, not a server's: the allocator is the
//! process's, so the counters below are too. Two servers in one process
//! (unit tests) read one `used_memory`; everything a server keeps of its
//! own lives in its `ServerShared` / `Ops`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, Ordering};

/// Counters: slot 0 for threads that are not shards, `1 + id` for shard
/// `id` (the configuration allows at most 1024 shards).
pub const SLOTS: usize = 1025;

#[repr(align(64))]
struct Slot(AtomicIsize);

static COUNTERS: [Slot; SLOTS] = [const { Slot(AtomicIsize::new(0)) }; SLOTS];
/// Set on the first allocation counted: false when the process runs
/// without [`Counting`] as its global allocator (unit tests).
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Highest total seen by [`update_peak`] (`used_memory_peak`).
static PEAK: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static SLOT: Cell<usize> = const { Cell::new(0) };
}

/// What glibc takes for a request of `n` bytes: the request plus the
/// chunk header, rounded to 16, at least 32.
#[inline]
pub const fn chunk(n: usize) -> usize {
    let c = (n + 8 + 15) & !15;
    if c < 32 {
        32
    } else {
        c
    }
}

#[inline]
fn charge(delta: isize) {
    let s = SLOT.try_with(Cell::get).unwrap_or(0);
    COUNTERS[s].0.fetch_add(delta, Ordering::Relaxed);
}

/// The global allocator of the `tessera` binary: glibc's malloc, counted.
pub struct Counting;

// SAFETY: every call is forwarded unchanged to `System`, which upholds the
// `GlobalAlloc` contract; the wrapper only updates counters and never
// allocates itself (the thread-local is a const-initialised `Cell`).
unsafe impl GlobalAlloc for Counting {
    #[inline]
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = System.alloc(l);
        if !p.is_null() {
            charge(chunk(l.size()) as isize);
        }
        p
    }
    #[inline]
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(l);
        if !p.is_null() {
            charge(chunk(l.size()) as isize);
        }
        p
    }
    #[inline]
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l);
        charge(-(chunk(l.size()) as isize));
    }
    #[inline]
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = System.realloc(p, l, new);
        if !q.is_null() {
            charge(chunk(new) as isize - chunk(l.size()) as isize);
        }
        q
    }
}

/// Marks the counting allocator as in use; the binary calls it first
/// thing in `main`.
pub fn mark_installed() {
    INSTALLED.store(true, Ordering::Relaxed);
}

/// Whether the counters measure this process (false in unit tests).
pub fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

/// Charges this thread's allocations to shard `id` from now on.
#[inline]
pub fn enter_shard(id: usize) {
    set_slot(1 + id.min(SLOTS - 2));
}

/// The slot this thread charges.
#[inline]
pub fn current_slot() -> usize {
    SLOT.try_with(Cell::get).unwrap_or(0)
}

/// Charges this thread's allocations to `slot` (the lazyfree thread takes
/// the slot of the shard whose value it frees).
#[inline]
pub fn set_slot(slot: usize) {
    let _ = SLOT.try_with(|s| s.set(slot.min(SLOTS - 1)));
}

/// Bytes charged to shard `id`'s thread (may be negative: see the module
/// doc).
#[inline]
pub fn shard_used(id: usize) -> isize {
    COUNTERS[1 + id.min(SLOTS - 2)].0.load(Ordering::Relaxed)
}

/// Bytes charged to the threads that are not shards (slot 0; may be
/// negative).
#[inline]
pub fn others_used() -> isize {
    COUNTERS[0].0.load(Ordering::Relaxed)
}

/// Total bytes allocated by the process and not freed, counting slots
/// `0..=nshards` (every thread charges one of those).
#[inline]
pub fn used_total(nshards: usize) -> u64 {
    let n = (nshards + 1).min(SLOTS);
    let sum: isize = COUNTERS[..n]
        .iter()
        .map(|c| c.0.load(Ordering::Relaxed))
        .sum();
    sum.max(0) as u64
}

/// Records `used` as a candidate for the peak; returns the peak.
pub fn update_peak(used: u64) -> u64 {
    PEAK.fetch_max(used, Ordering::Relaxed).max(used)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_is_glibc_rounding() {
        assert_eq!(chunk(0), 32);
        assert_eq!(chunk(24), 32);
        assert_eq!(chunk(25), 48);
        assert_eq!(chunk(40), 48);
        assert_eq!(chunk(100), 112);
        assert_eq!(chunk(1000), 1008);
    }

    #[test]
    fn the_wrapper_counts_into_this_threads_slot() {
        // Not the global allocator here: drive it by hand on a slot no
        // other test uses.
        std::thread::spawn(|| {
            enter_shard(SLOTS - 3);
            let id = SLOTS - 3;
            let a = Counting;
            let l = Layout::from_size_align(100, 8).unwrap();
            // SAFETY: a valid non-zero layout; the pointer is freed with it.
            unsafe {
                let p = a.alloc(l);
                assert_eq!(shard_used(id), 112);
                let q = a.realloc(p, l, 1000);
                assert_eq!(shard_used(id), 1008);
                a.dealloc(q, Layout::from_size_align(1000, 8).unwrap());
            }
            assert_eq!(shard_used(id), 0);
        })
        .join()
        .unwrap();
        assert_eq!(update_peak(5).max(5), update_peak(0).max(5));
    }
}
