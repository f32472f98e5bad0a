//! One logical database (`SELECT n`) of a shard: the key table and the set
//! of keys that carry a TTL.
//!
//! The expiry deadline lives, as in Redis, in a second dict, `volatile`
//! (key -> Unix ms), which is also what the active expiry cycle samples.
//! The [`Entry`] carries only a flag bit saying the key has one, so a read
//! of a key without a TTL costs one lookup and a key with one two (Redis:
//! two whenever the expires dict is not empty). Keeping the `u64` out of
//! the entry saves 8 bytes in every key's node, which with the 24-byte
//! `Value` lets the node fit glibc's 64-byte chunk instead of the 80-byte
//! one (bench/memory.sh); keys with a TTL pay the 8 bytes in `volatile`
//! instead, where they already had a node.
//!
//! Invariant: a key is in `volatile` (with a deadline != 0) iff its entry
//! has the TTL flag ([`Entry::has_ttl`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use ds::{Dict, SmallBytes, TinyBytes};
use rand::Rng;

use crate::lfu::{self, LfuParams, LFU_INIT_VAL};
use crate::value::{Value, ValueRef};

/// What glibc's malloc takes for a request of `n` bytes: the request plus
/// its 8-byte header, rounded to 16.
pub fn malloc_chunk(n: usize) -> usize {
    (n + 8).next_multiple_of(16).max(32)
}

/// A stored key's value and metadata: the value and 8 bytes.
///
/// Access tracking: Redis keeps either LRU data (the access clock) or LFU
/// data (counter + last decrement minute) in one 24-bit field, by policy.
/// We keep both, in separate fields, and a touch updates only the one the
/// current policy uses (so, as in Redis, the other goes stale); keeping
/// both means switching policy at runtime never reinterprets one as the
/// other (Redis shows meaningless values until keys are touched again).
///
/// The expiry deadline is not here: it lives in the database's `volatile`
/// dict, and a flag bit here says whether there is one (so a key without a
/// TTL costs one lookup, a key with one two, as in Redis). That keeps the
/// entry at the value plus 8 bytes, so the keyspace node (link, key handle,
/// entry) fits a smaller malloc chunk (see the assertion below).
#[derive(Debug, Clone)]
pub struct Entry {
    /// Private: readers take a [`ValueRef`] ([`Entry::value`]), so that a
    /// string may later be stored with its key instead of as a [`Value`].
    value: Value,
    /// Last access, in seconds since the Unix epoch (truncated), for
    /// OBJECT IDLETIME and LRU eviction. Not updated under an LFU policy.
    pub access_s: u32,
    /// LFU "last decrement time": Unix minutes modulo 2^16 (see
    /// [`crate::lfu`]). Updated only under an LFU policy.
    pub lfu_ldt_min: u16,
    /// LFU logarithmic access counter; starts at [`LFU_INIT_VAL`].
    pub lfu_counter: u8,
    /// Bit 7 ([`TTL_BIT`]): the key has a deadline in `volatile`. Bits
    /// 0-6: the snapshot stamp, equal to the database's epoch once this
    /// entry is accounted for by the running snapshot (written, or created
    /// after it began); see [`crate::snapshot`]. Set by [`Db::insert`].
    flags: u8,
}

/// [`Entry::flags`]: the key has a TTL.
const TTL_BIT: u8 = 0x80;
/// [`Entry::flags`]: the snapshot stamp; epochs count modulo 128.
pub(crate) const STAMP_MASK: u8 = 0x7f;

impl Entry {
    pub fn new(value: Value, now_ms: u64) -> Self {
        Entry {
            value,
            access_s: (now_ms / 1000) as u32,
            lfu_ldt_min: lfu::minutes(now_ms),
            lfu_counter: LFU_INIT_VAL,
            flags: 0,
        }
    }
    /// The value, borrowed.
    #[inline]
    pub fn value(&self) -> ValueRef<'_> {
        ValueRef::from(&self.value)
    }
    /// The value, to change in place. Readers use [`Entry::value`]: this
    /// may change how a string is stored (never what it holds).
    #[inline]
    pub fn value_mut(&mut self) -> &mut Value {
        &mut self.value
    }
    /// The value, owned.
    #[inline]
    pub fn into_value(self) -> Value {
        self.value
    }
    /// Whether the key has a deadline (in its database's `volatile` dict;
    /// [`Db::expire_at`] reads it).
    #[inline]
    pub fn has_ttl(&self) -> bool {
        self.flags & TTL_BIT != 0
    }
    #[inline]
    fn set_ttl_flag(&mut self, on: bool) {
        self.flags = (self.flags & !TTL_BIT) | if on { TTL_BIT } else { 0 };
    }
    /// The snapshot stamp (see [`crate::snapshot`]).
    #[inline]
    pub(crate) fn stamp(&self) -> u8 {
        self.flags & STAMP_MASK
    }
    #[inline]
    pub(crate) fn set_stamp(&mut self, epoch: u8) {
        self.flags = (self.flags & TTL_BIT) | (epoch & STAMP_MASK);
    }
    #[inline]
    pub fn touch(&mut self, now_ms: u64) {
        self.access_s = (now_ms / 1000) as u32;
    }
    /// Seconds since the last access.
    pub fn idle_s(&self, now_ms: u64) -> u64 {
        ((now_ms / 1000) as u32).wrapping_sub(self.access_s) as u64
    }
    /// Records an access under an LFU policy (Redis's `updateLFU`): decay
    /// the counter for the minutes since its last decrement, increment it
    /// logarithmically, and stamp the current minute.
    #[inline]
    pub fn touch_lfu(&mut self, now_ms: u64, p: LfuParams, rng: &mut impl Rng) {
        let c = lfu::decayed(self.lfu_counter, self.lfu_ldt_min, now_ms, p.decay_time_min);
        self.lfu_counter = lfu::log_incr(c, p.log_factor, rng);
        self.lfu_ldt_min = lfu::minutes(now_ms);
    }
    /// The LFU counter as OBJECT FREQ reports it (Redis's
    /// `LFUDecrAndReturn`): decayed to `now_ms`, nothing stored.
    pub fn lfu_freq(&self, now_ms: u64, p: LfuParams) -> u8 {
        lfu::decayed(self.lfu_counter, self.lfu_ldt_min, now_ms, p.decay_time_min)
    }
}

/// The deadline of `key` (entry `e`) in a database's `volatile` dict,
/// 0 = none. A free function so that code holding the key table mutably
/// (the snapshot) can still read the deadlines.
#[inline]
pub(crate) fn deadline(volatile: &Dict<TinyBytes, u64>, key: &[u8], e: &Entry) -> u64 {
    if e.has_ttl() {
        volatile.get(key).copied().unwrap_or(0)
    } else {
        0
    }
}

/// Set when a watched key changes (WATCH): one flag per watching
/// connection, shared with the shards that hold its keys.
pub type WatchFlag = Arc<AtomicBool>;

// A key's node (next link 8, 16-byte key handle, entry 32) must fit
// glibc's 64-byte chunk (56 usable bytes): a larger entry costs every key
// 16 bytes (the 80-byte chunk).
const _: () = assert!(Dict::<TinyBytes, Entry>::NODE_SIZE <= 56);
// The entry is its value plus 8 bytes of metadata.
const _: () = assert!(std::mem::size_of::<Entry>() == std::mem::size_of::<Value>() + 8);

#[derive(Default)]
pub struct Db {
    pub(crate) table: Dict<TinyBytes, Entry>,
    /// The deadline (Unix ms) of every key with a TTL.
    pub(crate) volatile: Dict<TinyBytes, u64>,
    /// WATCHed keys of this database and the flags of their watchers.
    /// Every change to a key goes through `insert`, `remove`, `set_expire`
    /// or [`Db::signal`], which set the flags (Redis's
    /// `signalModifiedKey`); a signalled key's watchers are forgotten, as
    /// their transaction is doomed. Weak: a watcher that went away (UNWATCH,
    /// EXEC, disconnect) costs nothing until [`Db::prune_watches`].
    watched: HashMap<SmallBytes, Vec<Weak<AtomicBool>>>,
    /// Keys clients are blocked on (BLPOP & co.) in this database, with
    /// their number of waiters; kept by the runtime through
    /// [`Db::add_blocking`] / [`Db::remove_blocking`].
    blocking: HashMap<SmallBytes, u32>,
    /// Blocked-on keys that were (re)created since the runtime last looked
    /// (Redis's `signalKeyAsReady` from `dbAdd`), in order, each once.
    ready: Vec<SmallBytes>,
    /// Changes made to this database since it was created (Redis's
    /// `server.dirty`, per database): every mutation here and every
    /// [`Db::signal`] counts one. Save rules and INFO persistence read the
    /// sum over databases and shards; a command changed the dataset iff it
    /// moved this counter.
    pub dirty: u64,
    /// A snapshot of this database is being written: every mutation first
    /// writes the entry it changes if the snapshot has not yet (see
    /// [`crate::snapshot`]). One predictable branch when false.
    pub(crate) saving: bool,
    /// The snapshot epoch entries are stamped with (see `Entry::snap`).
    pub(crate) epoch: u8,
    /// Set when a snapshot ended before visiting every entry: stamps are
    /// then mixed, and the next snapshot restamps before it begins.
    pub(crate) stamps_mixed: bool,
    /// The running (or finished, not yet collected) snapshot's state.
    pub(crate) snap: Option<Box<crate::snapshot::DbSnap>>,
}

impl Db {
    pub fn new() -> Self {
        Db {
            table: Dict::new(),
            volatile: Dict::new(),
            watched: HashMap::new(),
            blocking: HashMap::new(),
            ready: Vec::new(),
            dirty: 0,
            saving: false,
            epoch: 0,
            stamps_mixed: false,
            snap: None,
        }
    }

    /// One more client waits for `key` to be created.
    pub fn add_blocking(&mut self, key: &[u8]) {
        *self.blocking.entry(SmallBytes::from(key)).or_default() += 1;
    }

    /// One client fewer waits for `key`.
    pub fn remove_blocking(&mut self, key: &[u8]) {
        if let Some(n) = self.blocking.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                self.blocking.remove(key);
            }
        }
    }

    /// Whether some key waited on was created since [`Db::take_ready`].
    #[inline]
    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// The keys waited on that were created, in order.
    pub fn take_ready(&mut self) -> Vec<SmallBytes> {
        std::mem::take(&mut self.ready)
    }

    #[cold]
    fn mark_ready(&mut self, key: &[u8]) {
        if self.blocking.contains_key(key) && !self.ready.iter().any(|k| &k[..] == key) {
            self.ready.push(SmallBytes::from(key));
        }
    }

    /// Marks every waited-on key that exists as ready (after SWAPDB).
    fn mark_existing_ready(&mut self) {
        let hit: Vec<SmallBytes> = self
            .blocking
            .keys()
            .filter(|k| self.table.contains_key(&k[..]))
            .cloned()
            .collect();
        for k in hit {
            self.mark_ready(&k);
        }
    }

    /// Registers `flag` to be set when `key` changes.
    pub fn watch(&mut self, key: &[u8], flag: &WatchFlag) {
        let v = self.watched.entry(SmallBytes::from(key)).or_default();
        if !v.iter().any(|w| w.as_ptr() == Arc::as_ptr(flag)) {
            v.push(Arc::downgrade(flag));
        }
    }

    /// Marks `key` as modified: its watchers' transactions will fail.
    /// Called by every mutation here; handlers that change a value in place
    /// (APPEND, INCR ...) call it themselves.
    #[inline]
    pub fn signal(&mut self, key: &[u8]) {
        self.dirty += 1;
        if !self.watched.is_empty() {
            self.signal_slow(key);
        }
    }

    #[cold]
    fn signal_slow(&mut self, key: &[u8]) {
        if let Some(v) = self.watched.remove(key) {
            for f in v.iter().filter_map(Weak::upgrade) {
                f.store(true, Ordering::Release);
            }
        }
    }

    /// Approximate bytes `key` and its value use (MEMORY USAGE): the table
    /// node as the allocator rounds it, its bucket slot, and the heap
    /// memory of the key and the value. `None` if the key is absent.
    pub fn memory_usage(&self, key: &[u8]) -> Option<usize> {
        const NODE: usize = Dict::<TinyBytes, Entry>::NODE_SIZE;
        let (k, e) = self.table.get_key_value(key)?;
        Some(
            malloc_chunk(NODE)
                + std::mem::size_of::<usize>()
                + k.heap_bytes()
                + e.value().heap_bytes(),
        )
    }

    /// Signals every watched key that exists here or in `other` (FLUSHDB,
    /// FLUSHALL, SWAPDB: Redis's `touchAllWatchedKeysInDb`).
    fn signal_existing(&mut self, other: Option<&Db>) {
        if self.watched.is_empty() {
            return;
        }
        let hit: Vec<SmallBytes> = self
            .watched
            .keys()
            .filter(|k| self.table.contains_key(&k[..]) || other.is_some_and(|o| o.contains(k)))
            .cloned()
            .collect();
        for k in hit {
            self.signal_slow(&k);
        }
    }

    /// Forgets watchers that went away; returns how many keys are watched.
    pub fn prune_watches(&mut self) -> usize {
        self.watched.retain(|_, v| {
            v.retain(|w| w.strong_count() > 0);
            !v.is_empty()
        });
        self.watched.len()
    }

    /// Exchanges the contents of two databases (SWAPDB); watchers stay with
    /// their database index and are signalled for keys in either.
    pub fn swap_contents(a: &mut Db, b: &mut Db) {
        // A running snapshot writes each database's entries under its own
        // index: finish both before their entries change places.
        a.snapshot_finish();
        b.snapshot_finish();
        a.signal_existing(Some(b));
        b.signal_existing(Some(a));
        a.dirty += 1;
        b.dirty += 1;
        std::mem::swap(&mut a.table, &mut b.table);
        std::mem::swap(&mut a.volatile, &mut b.volatile);
        a.mark_existing_ready();
        b.mark_existing_ready();
    }
    pub fn len(&self) -> usize {
        self.table.len()
    }
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
    pub fn volatile_len(&self) -> usize {
        self.volatile.len()
    }
    /// See `ds::Dict::prefetch`.
    #[inline]
    pub fn prefetch(&self, key: &[u8], stage: u8) {
        self.table.prefetch(key, stage);
    }
    pub fn contains(&self, key: &[u8]) -> bool {
        self.table.contains_key(key)
    }
    /// The entry under `key`, expired or not.
    pub fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.table.get(key)
    }
    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut Entry> {
        if self.saving {
            return self.get_mut_saving(key);
        }
        self.table.get_mut(key)
    }

    /// [`Db::get_mut`] for a read: the caller may update the access data
    /// but must not change the value. While a snapshot runs, a big value
    /// it is writing in slices is then left to its slices instead of being
    /// finished first (a read of a big key does not stall on it).
    pub fn get_mut_read(&mut self, key: &[u8]) -> Option<&mut Entry> {
        if self.saving {
            return self.get_mut_read_saving(key);
        }
        self.table.get_mut(key)
    }

    #[cold]
    fn get_mut_read_saving(&mut self, key: &[u8]) -> Option<&mut Entry> {
        let epoch = self.epoch;
        let snap = self.snap.as_deref_mut()?;
        let (k, e) = self.table.get_key_value_mut(key)?;
        snap.visit_before_read(k, e, &self.volatile, epoch);
        Some(e)
    }

    /// `get_mut` while a snapshot runs: the caller may change the entry,
    /// so the snapshot gets it first.
    #[cold]
    fn get_mut_saving(&mut self, key: &[u8]) -> Option<&mut Entry> {
        let epoch = self.epoch;
        let snap = self.snap.as_deref_mut()?;
        let (k, e) = self.table.get_key_value_mut(key)?;
        snap.visit_before_change(k, e, &self.volatile, epoch);
        Some(e)
    }

    /// Writes `key`'s entry to the running snapshot if it has not been
    /// written yet (before a change to it).
    #[cold]
    fn preserve(&mut self, key: &[u8]) {
        let epoch = self.epoch;
        if let Some(snap) = self.snap.as_deref_mut() {
            if let Some((k, e)) = self.table.get_key_value_mut(key) {
                snap.visit_before_change(k, e, &self.volatile, epoch);
            }
        }
    }

    /// Deletes `key` if it has expired at `now_ms`; true if it did.
    pub fn expire_if_needed(&mut self, key: &[u8], now_ms: u64) -> bool {
        // No key with a TTL (the invariant above): nothing can expire, and
        // the lookup that follows is the only one.
        if self.volatile.is_empty() {
            return false;
        }
        match self.table.get(key) {
            Some(e) if self.is_expired(key, e, now_ms) => {
                if let Some(e) = self.remove(key) {
                    crate::lazyfree::free(e.into_value());
                }
                true
            }
            _ => false,
        }
    }

    /// Stores `entry` under `key` with deadline `expire_at_ms` (Unix ms,
    /// 0 = none), replacing any entry there.
    pub fn insert(&mut self, key: &[u8], mut entry: Entry, expire_at_ms: u64) {
        if self.saving {
            self.preserve(key);
        }
        entry.set_stamp(self.epoch);
        self.signal(key);
        if !self.blocking.is_empty() {
            self.mark_ready(key);
        }
        let has_ttl = expire_at_ms != 0;
        entry.set_ttl_flag(has_ttl);
        let old = self.table.insert(TinyBytes::from(key), entry);
        let had_ttl = old.as_ref().is_some_and(Entry::has_ttl);
        if let Some(o) = old {
            crate::lazyfree::free(o.into_value());
        }
        if has_ttl {
            match self.volatile.get_mut(key) {
                Some(at) => *at = expire_at_ms,
                None => {
                    self.volatile.insert(TinyBytes::from(key), expire_at_ms);
                }
            }
        } else if had_ttl {
            self.volatile.remove(key);
        }
    }

    /// Removes `key`; returns its entry and deadline (0 = none).
    pub fn remove_with_ttl(&mut self, key: &[u8]) -> Option<(Entry, u64)> {
        if self.saving {
            self.preserve(key);
        }
        let (_, e) = self.table.remove(key)?;
        self.signal(key);
        let at = if e.has_ttl() {
            self.volatile.remove(key).map_or(0, |(_, at)| at)
        } else {
            0
        };
        Some((e, at))
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        self.remove_with_ttl(key).map(|(e, _)| e)
    }

    /// The deadline (Unix ms, 0 = none) of `key`, whose entry is `e`.
    #[inline]
    pub fn expire_at(&self, key: &[u8], e: &Entry) -> u64 {
        deadline(&self.volatile, key, e)
    }

    /// The deadline (Unix ms, 0 = none) of `key`; 0 for a missing key.
    #[inline]
    pub fn expire_of(&self, key: &[u8]) -> u64 {
        if self.volatile.is_empty() {
            return 0;
        }
        self.volatile.get(key).copied().unwrap_or(0)
    }

    /// Whether `key`, whose entry is `e`, has a deadline before `now_ms`.
    #[inline]
    pub fn is_expired(&self, key: &[u8], e: &Entry, now_ms: u64) -> bool {
        e.has_ttl() && now_ms > self.expire_at(key, e)
    }

    /// The entry under `key` and its deadline (0 = none).
    #[inline]
    pub fn get_with_ttl(&self, key: &[u8]) -> Option<(&Entry, u64)> {
        let e = self.table.get(key)?;
        Some((e, self.expire_at(key, e)))
    }

    /// Sets (`at_ms > 0`) or clears (`0`) the deadline of an existing key.
    /// Returns false if the key does not exist.
    pub fn set_expire(&mut self, key: &[u8], at_ms: u64) -> bool {
        if self.saving {
            self.preserve(key);
        }
        if !self.watched.is_empty() && self.table.contains_key(key) {
            self.signal_slow(key);
        }
        let Some(e) = self.table.get_mut(key) else {
            return false;
        };
        self.dirty += 1;
        let had = e.has_ttl();
        e.set_ttl_flag(at_ms != 0);
        if at_ms != 0 {
            match self.volatile.get_mut(key) {
                Some(at) => *at = at_ms,
                None => {
                    self.volatile.insert(TinyBytes::from(key), at_ms);
                }
            }
        } else if had {
            self.volatile.remove(key);
        }
        true
    }

    pub fn clear(&mut self) {
        self.dirty += self.table.len() as u64;
        self.signal_existing(None);
        // A running snapshot keeps the table (see `snapshot`).
        if !self.snapshot_retire() {
            self.table.clear();
        }
        self.volatile.clear();
    }

    /// Takes the whole table out, leaving this database empty (FLUSHDB
    /// ASYNC hands the old tables to another thread to free). Watchers
    /// stay, signalled for the keys that existed.
    pub fn take(&mut self) -> Db {
        self.signal_existing(None);
        let dirty = self.dirty + self.table.len() as u64;
        // A running snapshot keeps the table (see `snapshot`); the rest is
        // handed back to be freed.
        self.snapshot_retire();
        let watched = std::mem::take(&mut self.watched);
        let blocking = std::mem::take(&mut self.blocking);
        let (epoch, snap) = (self.epoch, self.snap.take());
        let old = std::mem::take(self);
        self.watched = watched;
        self.blocking = blocking;
        self.dirty = dirty;
        (self.epoch, self.snap) = (epoch, snap);
        old
    }

    pub fn random_entry(&self, rng: &mut impl Rng) -> Option<(&[u8], &Entry)> {
        self.table.random_entry(rng).map(|(k, e)| (&k[..], e))
    }

    /// Bytes the key table and the TTL set take themselves (MEMORY STATS
    /// `overhead.hashtable.main` / `.expires`).
    pub fn overhead_bytes(&self) -> (usize, usize) {
        (
            self.table.allocated_bytes(),
            self.volatile.allocated_bytes(),
        )
    }

    /// A random key with a TTL (volatile-random eviction).
    pub fn random_volatile(&self, rng: &mut impl Rng) -> Option<&[u8]> {
        self.volatile.random_entry(rng).map(|(k, _)| &k[..])
    }

    pub fn sample_volatile(&self, rng: &mut impl Rng, n: usize, out: &mut Vec<SmallBytes>) {
        let mut keys = Vec::with_capacity(n);
        self.volatile.sample_keys(rng, n, &mut keys);
        out.extend(keys.into_iter().map(SmallBytes::from));
    }

    /// One SCAN step with Redis's cursor semantics (see `ds::Dict::scan`).
    pub fn scan(&self, cursor: u64, mut f: impl FnMut(&[u8], &Entry)) -> u64 {
        self.table.scan(cursor, |k, e| f(k, e))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Entry)> {
        self.table.iter().map(|(k, e)| (&k[..], e))
    }

    /// Shrink work the tables owe, for the cron; true while work remains.
    pub fn rehash_step(&mut self, buckets: usize) -> bool {
        let a = self.table.rehash_step(buckets);
        let b = self.volatile.rehash_step(buckets);
        a || b
    }

    /// Keys with a TTL and the mean remaining TTL in ms (INFO keyspace's
    /// `expires` and `avg_ttl`), estimated from a bounded sample.
    pub fn expires_info(&self, now_ms: u64) -> (usize, u64) {
        let n = self.volatile.len();
        if n == 0 {
            return (0, 0);
        }
        let (mut sum, mut cnt) = (0u128, 0u128);
        for (_, &at) in self.volatile.iter().take(64) {
            if at > now_ms {
                sum += u128::from(at - now_ms);
                cnt += 1;
            }
        }
        (n, sum.checked_div(cnt).map_or(0, |a| a as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Str;

    fn e() -> Entry {
        Entry::new(Value::Str(Str::from_bytes(b"v")), 0)
    }

    #[test]
    fn watchers_that_went_away_are_pruned_and_live_ones_kept() {
        let mut db = Db::new();
        let live: WatchFlag = Arc::new(AtomicBool::new(false));
        for i in 0..100 {
            let gone: WatchFlag = Arc::new(AtomicBool::new(false));
            db.watch(format!("k{i}").as_bytes(), &gone);
        }
        db.watch(b"kept", &live);
        assert_eq!(db.prune_watches(), 1);
        db.insert(b"kept", e(), 0);
        assert!(live.load(Ordering::Acquire));
        assert_eq!(db.prune_watches(), 0);
    }

    #[test]
    fn created_keys_that_clients_wait_on_are_reported_once() {
        let mut db = Db::new();
        db.insert(b"other", e(), 0);
        assert!(!db.has_ready());
        db.add_blocking(b"q");
        db.add_blocking(b"q");
        db.insert(b"q", e(), 0);
        db.insert(b"q", e(), 0);
        assert_eq!(db.take_ready(), vec![SmallBytes::from(&b"q"[..])]);
        db.remove_blocking(b"q");
        db.remove_blocking(b"q");
        db.remove(b"q");
        db.insert(b"q", e(), 0);
        assert!(!db.has_ready());
    }

    #[test]
    fn volatile_set_follows_ttl() {
        let mut db = Db::new();
        db.insert(b"a", e(), 100);
        db.insert(b"b", e(), 0);
        assert_eq!(db.volatile_len(), 1);
        db.insert(b"a", e(), 0);
        assert_eq!(db.volatile_len(), 0);
        assert!(db.set_expire(b"b", 5));
        assert_eq!(db.volatile_len(), 1);
        assert!(db.set_expire(b"b", 0));
        assert_eq!(db.volatile_len(), 0);
        assert!(!db.set_expire(b"zz", 5));
        db.insert(b"c", e(), 7);
        db.remove(b"c");
        assert_eq!(db.volatile_len(), 0);
        assert_eq!(db.len(), 2);
    }

    #[test]
    fn every_change_moves_the_dirty_counter() {
        let mut d = Db::new();
        d.insert(b"a", e(), 0);
        d.insert(b"b", e(), 0);
        assert_eq!(d.dirty, 2);
        assert!(d.set_expire(b"a", 5));
        assert!(!d.set_expire(b"zz", 5));
        assert_eq!(d.dirty, 3);
        d.signal(b"b");
        d.remove(b"a");
        assert!(d.remove(b"a").is_none());
        assert_eq!(d.dirty, 5);
        d.clear();
        assert_eq!(d.dirty, 6);
        let _ = d.get_mut(b"b");
        assert_eq!(d.dirty, 6);
    }

    #[test]
    fn new_entries_start_lfu_at_init() {
        let e = e();
        assert_eq!(e.lfu_counter, LFU_INIT_VAL);
        assert_eq!(e.lfu_ldt_min, 0);
    }

    #[test]
    fn deadlines_live_in_volatile_and_follow_every_change() {
        let mut db = Db::new();
        db.insert(b"a", e(), 100);
        db.insert(b"b", e(), 0);
        let (a, at) = db.get_with_ttl(b"a").unwrap();
        assert!(a.has_ttl());
        assert_eq!(at, 100);
        assert_eq!(db.expire_of(b"a"), 100);
        assert_eq!(db.expire_of(b"b"), 0);
        assert_eq!(db.expire_of(b"nope"), 0);
        assert!(db.is_expired(b"a", a, 101));
        assert!(!db.is_expired(b"a", a, 100));
        let b = db.get(b"b").unwrap();
        assert!(!b.has_ttl() && !db.is_expired(b"b", b, u64::MAX));
        // A new deadline replaces the old one in place.
        db.insert(b"a", e(), 200);
        assert!(db.set_expire(b"b", 300));
        assert_eq!((db.expire_of(b"a"), db.expire_of(b"b")), (200, 300));
        assert_eq!(db.volatile_len(), 2);
        assert!(db.set_expire(b"b", 400));
        assert_eq!(db.expire_of(b"b"), 400);
        // The stamp and the flag share a byte without disturbing each other.
        let a = db.get_mut(b"a").unwrap();
        a.set_stamp(0x7f);
        assert!(a.has_ttl());
        assert_eq!(a.stamp(), 0x7f);
        a.set_stamp(3);
        assert!(a.has_ttl() && a.stamp() == 3);
        assert_eq!(db.remove_with_ttl(b"a").map(|(_, at)| at), Some(200));
        assert!(db.expire_if_needed(b"b", 401));
        assert_eq!((db.len(), db.volatile_len()), (0, 0));
    }
}
