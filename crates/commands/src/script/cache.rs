//! The script cache every thread of a server sees: SHA-1 → body (and its
//! parsed shebang). EVAL adds to it, SCRIPT LOAD adds to it, EVALSHA and
//! SCRIPT EXISTS read it, SCRIPT FLUSH empties it. Each thread's Lua VM
//! compiles a script the first time it runs there and keeps the compiled
//! function (see `vm`); the cache's generation tells a VM that a FLUSH
//! happened so that it drops its compiled functions too.
//!
//! # One cache per server
//!
//! The cache is the server's: a field of its `Ops` (`ops.scripts`,
//! `'static` as `Ops` is, leaked once per server), because shard handlers
//! (EVALSHA runs where its keys live) see their shard and `ShardCtx::ops`,
//! not `ServerShared`; connection commands (SCRIPT LOAD / EXISTS / FLUSH,
//! INFO) reach it through `server.ops`. EVALSHA's look-up costs one
//! pointer load from its context, as the process-wide `OnceLock` it was
//! cost one load and a check. Process-wide, the servers of unit tests in
//! one process (each test builds its own) saw each other's scripts: one
//! test's SCRIPT FLUSH emptied another's cache, and INFO counted another
//! server's scripts and VMs.
//!
//! What stays per thread: the VMs (`vm`), each holding the `Ops` of the
//! server it serves (a thread serves one server; a VM that meets another
//! server's state, as in-process tests running two servers on one thread
//! do, is dropped and made anew). The memory of each kind of VM is counted
//! here ([`ScriptCache::vm_bytes`]), per server.
//!
//! A read-write lock is enough: lookups take the read side for a
//! hash-map probe; writes (a new script) are rare next to runs. Memory is
//! bounded by what clients load, as in Redis (which also never evicts
//! scripts in 7.0); SCRIPT FLUSH frees it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, RwLock};

use super::shebang::ScriptFlags;

/// A script as loaded.
#[derive(Debug)]
pub struct Script {
    /// 40 lower-case hex digits.
    pub sha: [u8; 40],
    pub body: Box<[u8]>,
    pub flags: ScriptFlags,
    /// Length of the shebang line (compiled from there on).
    pub shebang_len: usize,
    /// Its calls from another loop hop rather than run by a call.
    pub hop: HopMark,
}

/// What runs of a script or function taught: two marks, never cleared
/// (a script or library loaded again starts unmarked).
///
/// *Hop*: set once a run of it did what a run by a call from another
/// co-hosted loop must not do (the runtime's `in_place::by_call`):
/// something no take-back undoes (a PUBLISH, a write over a value too
/// large to copy: see `run::Run::hop_instead`), or run past
/// `busy-reply-threshold`. A run by a call is taken back before either
/// and runs again as a hop, which leaves the caller's loop free; once
/// marked, later calls hop at once instead of running twice. A script
/// that does so only sometimes costs a hop (~6 k instructions) per call
/// from another loop.
///
/// *Every shard*: set once a run of it called a keyspace-wide command
/// (KEYS, SCAN, DBSIZE, RANDOMKEY, FLUSHDB, FLUSHALL, SWAPDB): EXEC takes
/// whole-shard write locks on every shard for a block that queues it (see
/// `multi`, `script::needs_every`), as it does for one whose code does not
/// prove it never calls one (the proof, made once, is kept here too:
/// `names`), where such a call is refused otherwise (a script inside
/// MULTI/EXEC cannot run again under wider locks).
#[derive(Debug, Default)]
pub struct HopMark(AtomicU8);

/// [`HopMark`]'s bits.
const HOP: u8 = 1;
const EVERY: u8 = 2;
/// Its code was read for the commands it names (`names`) ...
const READ: u8 = 4;
/// ... and proves every call names a command that is not keyspace-wide.
const PROVEN: u8 = 8;

impl HopMark {
    #[inline]
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed) & HOP != 0
    }

    pub fn set(&self) {
        self.0.fetch_or(HOP, Ordering::Relaxed);
    }

    /// Whether a run called a keyspace-wide command.
    #[inline]
    pub fn needs_every(&self) -> bool {
        self.0.load(Ordering::Relaxed) & EVERY != 0
    }

    pub fn set_needs_every(&self) {
        if !self.needs_every() {
            self.0.fetch_or(EVERY, Ordering::Relaxed);
        }
    }

    /// Whether a run of it may call a keyspace-wide command: one did, or
    /// `code` (its script's, or its library's) does not prove it never
    /// does (`names::only_named_calls`, read once and kept here).
    pub fn may_need_every(&self, code: &[u8]) -> bool {
        let bits = self.0.load(Ordering::Relaxed);
        if bits & EVERY != 0 {
            return true;
        }
        if bits & READ != 0 {
            return bits & PROVEN == 0;
        }
        let proven = super::names::only_named_calls(code);
        self.0
            .fetch_or(if proven { READ | PROVEN } else { READ }, Ordering::Relaxed);
        !proven
    }
}

impl Clone for HopMark {
    fn clone(&self) -> HopMark {
        HopMark(AtomicU8::new(self.0.load(Ordering::Relaxed)))
    }
}

/// Scripts by SHA-1, hashed with foldhash (seeded per process, as
/// std's SipHash is, so crafted bodies cannot aim at one bucket): SipHash
/// of the 40-byte key was ~400 instructions of every EVALSHA, twice (here
/// and in the VM's compiled functions, `Vm::function`).
pub type ShaMap<V> = HashMap<[u8; 40], V, foldhash::fast::RandomState>;

/// One server's scripts (see "One cache per server" above).
#[derive(Default)]
pub struct ScriptCache {
    map: RwLock<ShaMap<Arc<Script>>>,
    /// Bumped by every flush.
    gen: AtomicU64,
    /// Sum of the bodies' lengths (INFO `used_memory_scripts_eval`).
    bytes: AtomicU64,
    /// Bytes every thread's Lua VMs of each kind (`VmKind` as the index)
    /// hold for this server (see [`VmBytes`]).
    vm_bytes: [VmBytes; 2],
}

impl ScriptCache {
    pub fn get(&self, sha: &[u8; 40]) -> Option<Arc<Script>> {
        self.map
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(sha)
            .cloned()
    }

    pub fn contains(&self, sha: &[u8; 40]) -> bool {
        self.map
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(sha)
    }

    /// Adds `s` (a script already present stays as it is); returns the
    /// cached one.
    pub fn insert(&self, s: Script) -> Arc<Script> {
        self.insert_arc(Arc::new(s))
    }

    /// [`ScriptCache::insert`] of a script made shared already.
    pub fn insert_arc(&self, s: Arc<Script>) -> Arc<Script> {
        let mut m = self.map.write().unwrap_or_else(|e| e.into_inner());
        m.entry(s.sha)
            .or_insert_with(|| {
                self.bytes.fetch_add(s.body.len() as u64, Ordering::Relaxed);
                s
            })
            .clone()
    }

    /// SCRIPT FLUSH: forgets every script; VMs drop their compiled
    /// functions at their next run.
    pub fn flush(&self) {
        let old = {
            let mut m = self.map.write().unwrap_or_else(|e| e.into_inner());
            // Zeroed before the bump: a VM made after it reads the new
            // generation and finds its count (one made between the two
            // has the old one: stale, dropped before its first run).
            let next = self.gen.load(Ordering::Acquire) + 1;
            self.vm_bytes[super::vm::VmKind::Eval as usize].reset(next);
            self.gen.fetch_add(1, Ordering::AcqRel);
            self.bytes.store(0, Ordering::Relaxed);
            std::mem::take(&mut *m)
        };
        // Freed outside the lock.
        drop(old);
    }

    pub fn generation(&self) -> u64 {
        self.gen.load(Ordering::Acquire)
    }

    pub fn len(&self) -> usize {
        self.map.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn body_bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// A VM of `kind` and this cache's generation `gen` went from
    /// `before` to `now` bytes.
    pub fn report_vm_bytes(&self, kind: super::vm::VmKind, gen: u64, before: usize, now: usize) {
        let gen = (kind == super::vm::VmKind::Eval).then_some(gen);
        self.vm_bytes[kind as usize].report(gen, before, now);
    }

    /// The sum over this server's threads of their `kind` VMs' memory.
    pub fn vm_bytes(&self, kind: super::vm::VmKind) -> u64 {
        self.vm_bytes[kind as usize].get()
    }
}

/// `sha` as a cache key: 40 hex digits, lower-cased (EVALSHA and SCRIPT
/// EXISTS accept either case, as Redis); `None` if it cannot be one.
pub fn key(sha: &[u8]) -> Option<[u8; 40]> {
    let k: [u8; 40] = sha.try_into().ok()?;
    Some(k.map(|c| c.to_ascii_lowercase()))
}

/// The memory of one kind's VMs (INFO `used_memory_lua` for the EVAL
/// VMs, `used_memory_vm_functions` for the function VMs): each VM adds
/// what changed since it last reported, after every run. Counted for the
/// script cache's current generation only. SCRIPT FLUSH resets Redis's one VM at once; here each
/// thread's scripts' VM is dropped at its next use or its thread's cron,
/// and a thread whose worker a hub runs looks only once a second
/// (`server::host::loan`), so a stale VM's bytes would stay in
/// `used_memory_lua` for up to a second after the flush (Redis's
/// unit/scripting failed "EVAL does not leak in the Lua stack" 1 run in 3:
/// 10,000 scripts after a flush, the count over 100 KB). The flush
/// ([`ScriptCache::flush`]) zeroes the count under the next generation,
/// and a VM of an older generation is not counted again (it runs no more
/// scripts: [`super::vm`] drops it before its next run).
///
/// Packed in one word, the generation's low 16 bits over 48 bits of
/// bytes, so a report checks its generation and adds in one
/// compare-and-swap (a VM reports after every run).
pub struct VmBytes(AtomicU64);

const VM_BYTES_BITS: u32 = 48;
const VM_BYTES_MASK: u64 = (1 << VM_BYTES_BITS) - 1;

impl VmBytes {
    pub const fn new() -> VmBytes {
        VmBytes(AtomicU64::new(0))
    }

    /// A VM of generation `gen` (`None`: counted whatever the generation,
    /// as the function VMs, which a SCRIPT FLUSH leaves) went from
    /// `before` to `now` bytes.
    pub fn report(&self, gen: Option<u64>, before: usize, now: usize) {
        let mut cur = self.0.load(Ordering::Relaxed);
        loop {
            if gen.is_some_and(|g| (g & 0xffff) != cur >> VM_BYTES_BITS) {
                return;
            }
            let bytes = ((cur & VM_BYTES_MASK) + now as u64).saturating_sub(before as u64);
            let next = (cur & !VM_BYTES_MASK) | bytes.min(VM_BYTES_MASK);
            match self
                .0
                .compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(seen) => cur = seen,
            }
        }
    }

    /// Generation `gen` begins with nothing counted.
    pub fn reset(&self, gen: u64) {
        self.0
            .store((gen & 0xffff) << VM_BYTES_BITS, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed) & VM_BYTES_MASK
    }
}

impl Default for VmBytes {
    fn default() -> VmBytes {
        VmBytes::new()
    }
}

#[cfg(test)]
mod tests {
    use super::VmBytes;

    #[test]
    fn a_reset_uncounts_the_vms_of_older_generations() {
        let b = VmBytes::new();
        b.reset(7);
        b.report(Some(7), 0, 40_000);
        b.report(Some(7), 0, 45_000);
        b.report(None, 0, 1_000);
        assert_eq!(b.get(), 86_000);
        b.report(Some(7), 40_000, 50_000);
        assert_eq!(b.get(), 96_000);
        b.reset(8);
        assert_eq!(b.get(), 0);
        // A stale VM's later reports (a run that ended after the flush,
        // its drop) change nothing; the new generation's count.
        b.report(Some(7), 50_000, 52_000);
        b.report(Some(7), 45_000, 0);
        assert_eq!(b.get(), 0);
        b.report(Some(8), 0, 30_000);
        assert_eq!(b.get(), 30_000);
        // Generations are told apart by their low 16 bits.
        b.report(Some(8 + (1 << 16)), 0, 5);
        assert_eq!(b.get(), 30_005);
    }

    #[test]
    fn a_count_never_goes_below_zero() {
        let b = VmBytes::new();
        b.report(None, 10, 0);
        assert_eq!(b.get(), 0);
    }
}
