//! One logical database (`SELECT n`) of a shard: the key table and the set
//! of keys that carry a TTL.
//!
//! The expiry deadline lives inline in the [`Entry`] (one `u64`), so a read
//! of a key with a TTL costs one lookup, not Redis's two (main dict +
//! expires dict). The `volatile` set exists only so the active expiry cycle
//! can sample keys that have a TTL; it holds a copy of each such key, so
//! keys without a TTL pay nothing for it.
//!
//! Invariant: a key is in `volatile` iff its entry has `expire_at_ms != 0`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use ds::{Dict, SmallBytes, TinyBytes};
use rand::Rng;

use crate::lfu::{self, LfuParams, LFU_INIT_VAL};
use crate::value::Value;

/// What glibc's malloc takes for a request of `n` bytes: the request plus
/// its 8-byte header, rounded to 16.
pub fn malloc_chunk(n: usize) -> usize {
    (n + 8).next_multiple_of(16).max(32)
}

/// A stored key's value and metadata.
///
/// Access tracking: Redis keeps either LRU data (the access clock) or LFU
/// data (counter + last decrement minute) in one 24-bit field, by policy.
/// We keep both, in separate fields, and a touch updates only the one the
/// current policy uses (so, as in Redis, the other goes stale). The LFU
/// pair (3 bytes) sits in what was tail padding after `access_s`, so the
/// entry is no larger than without it (checked in a test); keeping both
/// also means switching policy at runtime never reinterprets one as the
/// other (Redis shows meaningless values until keys are touched again).
#[derive(Debug, Clone)]
pub struct Entry {
    pub value: Value,
    /// Absolute deadline in Unix milliseconds; 0 = no expiry.
    expire_at_ms: u64,
    /// Last access, in seconds since the Unix epoch (truncated), for
    /// OBJECT IDLETIME and LRU eviction. Not updated under an LFU policy.
    pub access_s: u32,
    /// LFU "last decrement time": Unix minutes modulo 2^16 (see
    /// [`crate::lfu`]). Updated only under an LFU policy.
    pub lfu_ldt_min: u16,
    /// LFU logarithmic access counter; starts at [`LFU_INIT_VAL`].
    pub lfu_counter: u8,
    /// Snapshot stamp: equal to the database's epoch once this entry is
    /// accounted for by the running snapshot (written, or created after it
    /// began); see [`crate::snapshot`]. Set by [`Db::insert`].
    pub(crate) snap: u8,
}

impl Entry {
    pub fn new(value: Value, expire_at_ms: u64, now_ms: u64) -> Self {
        Entry {
            value,
            expire_at_ms,
            access_s: (now_ms / 1000) as u32,
            lfu_ldt_min: lfu::minutes(now_ms),
            lfu_counter: LFU_INIT_VAL,
            snap: 0,
        }
    }
    #[inline]
    pub fn expire_at_ms(&self) -> u64 {
        self.expire_at_ms
    }
    #[inline]
    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.expire_at_ms != 0 && now_ms > self.expire_at_ms
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

/// Set when a watched key changes (WATCH): one flag per watching
/// connection, shared with the shards that hold its keys.
pub type WatchFlag = Arc<AtomicBool>;

// A key's node (next link, 16-byte key handle, entry) must fit glibc's
// 80-byte chunk (72 usable bytes): a larger entry costs every key 16 bytes.
const _: () = assert!(Dict::<TinyBytes, Entry>::NODE_SIZE <= 72);

#[derive(Default)]
pub struct Db {
    pub(crate) table: Dict<TinyBytes, Entry>,
    volatile: Dict<TinyBytes, ()>,
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
                + e.value.heap_bytes(),
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
        snap.visit_before_read(k, e, epoch);
        Some(e)
    }

    /// `get_mut` while a snapshot runs: the caller may change the entry,
    /// so the snapshot gets it first.
    #[cold]
    fn get_mut_saving(&mut self, key: &[u8]) -> Option<&mut Entry> {
        let epoch = self.epoch;
        let snap = self.snap.as_deref_mut()?;
        let (k, e) = self.table.get_key_value_mut(key)?;
        snap.visit_before_change(k, e, epoch);
        Some(e)
    }

    /// Writes `key`'s entry to the running snapshot if it has not been
    /// written yet (before a change to it).
    #[cold]
    fn preserve(&mut self, key: &[u8]) {
        let epoch = self.epoch;
        if let Some(snap) = self.snap.as_deref_mut() {
            if let Some((k, e)) = self.table.get_key_value_mut(key) {
                snap.visit_before_change(k, e, epoch);
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
            Some(e) if e.is_expired(now_ms) => {
                if let Some(e) = self.remove(key) {
                    crate::lazyfree::free(e.value);
                }
                true
            }
            _ => false,
        }
    }

    pub fn insert(&mut self, key: &[u8], mut entry: Entry) {
        if self.saving {
            self.preserve(key);
        }
        entry.snap = self.epoch;
        self.signal(key);
        if !self.blocking.is_empty() {
            self.mark_ready(key);
        }
        let has_ttl = entry.expire_at_ms != 0;
        let old = self.table.insert(TinyBytes::from(key), entry);
        let had_ttl = old.as_ref().is_some_and(|o| o.expire_at_ms != 0);
        if let Some(o) = old {
            crate::lazyfree::free(o.value);
        }
        if has_ttl && !had_ttl {
            self.volatile.insert(TinyBytes::from(key), ());
        } else if had_ttl && !has_ttl {
            self.volatile.remove(key);
        }
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        if self.saving {
            self.preserve(key);
        }
        let (_, e) = self.table.remove(key)?;
        self.signal(key);
        if e.expire_at_ms != 0 {
            self.volatile.remove(key);
        }
        Some(e)
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
        let had = e.expire_at_ms != 0;
        e.expire_at_ms = at_ms;
        if at_ms != 0 && !had {
            self.volatile.insert(TinyBytes::from(key), ());
        } else if at_ms == 0 && had {
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

    /// Background rehash progress for the cron; true while work remains.
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
        for (k, _) in self.volatile.iter().take(64) {
            if let Some(e) = self.table.get(k) {
                if e.expire_at_ms > now_ms {
                    sum += u128::from(e.expire_at_ms - now_ms);
                    cnt += 1;
                }
            }
        }
        (n, sum.checked_div(cnt).map_or(0, |a| a as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Str;

    fn e(ttl: u64) -> Entry {
        Entry::new(Value::Str(Str::from_bytes(b"v")), ttl, 0)
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
        db.insert(b"kept", e(0));
        assert!(live.load(Ordering::Acquire));
        assert_eq!(db.prune_watches(), 0);
    }

    #[test]
    fn created_keys_that_clients_wait_on_are_reported_once() {
        let mut db = Db::new();
        db.insert(b"other", e(0));
        assert!(!db.has_ready());
        db.add_blocking(b"q");
        db.add_blocking(b"q");
        db.insert(b"q", e(0));
        db.insert(b"q", e(0));
        assert_eq!(db.take_ready(), vec![SmallBytes::from(&b"q"[..])]);
        db.remove_blocking(b"q");
        db.remove_blocking(b"q");
        db.remove(b"q");
        db.insert(b"q", e(0));
        assert!(!db.has_ready());
    }

    #[test]
    fn volatile_set_follows_ttl() {
        let mut db = Db::new();
        db.insert(b"a", e(100));
        db.insert(b"b", e(0));
        assert_eq!(db.volatile_len(), 1);
        db.insert(b"a", e(0));
        assert_eq!(db.volatile_len(), 0);
        assert!(db.set_expire(b"b", 5));
        assert_eq!(db.volatile_len(), 1);
        assert!(db.set_expire(b"b", 0));
        assert_eq!(db.volatile_len(), 0);
        assert!(!db.set_expire(b"zz", 5));
        db.insert(b"c", e(7));
        db.remove(b"c");
        assert_eq!(db.volatile_len(), 0);
        assert_eq!(db.len(), 2);
    }

    #[test]
    fn every_change_moves_the_dirty_counter() {
        let mut d = Db::new();
        d.insert(b"a", e(0));
        d.insert(b"b", e(0));
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
    fn lfu_state_lives_in_padding() {
        // Value + deadline + access clock, rounded to 8: the 3 LFU bytes
        // must not grow the entry.
        let without = (std::mem::size_of::<Value>() + 8 + 4).next_multiple_of(8);
        assert_eq!(std::mem::size_of::<Entry>(), without);
        let e = e(0);
        assert_eq!(e.lfu_counter, LFU_INIT_VAL);
        assert_eq!(e.lfu_ldt_min, 0);
    }
}
