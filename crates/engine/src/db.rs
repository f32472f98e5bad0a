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
//! The key table holds one node per key (see [`crate::node`]: the key's
//! bytes, its metadata and its value, a long string's bytes included).
//!
//! Invariant: a key is in `volatile` (with a deadline != 0) iff its entry
//! has the TTL flag ([`Entry::has_ttl`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use ds::dict::RawDict;
use ds::{Dict, SmallBytes, TinyBytes};
use rand::Rng;

pub(crate) use crate::node::STAMP_MASK;
pub use crate::node::{Entry, KeyNode, Meta, OwnedEntry};
use crate::value::{Str, StrRef, Value, ValueRef, EMBSTR_MAX};

/// What glibc's malloc takes for a request of `n` bytes: the request plus
/// its 8-byte header, rounded to 16.
pub fn malloc_chunk(n: usize) -> usize {
    (n + 8).next_multiple_of(16).max(32)
}

/// The deadline of `key` (entry `e`) in a database's `volatile` dict,
/// 0 = none. A free function so that code holding the key table mutably
/// (the snapshot) can still read the deadlines.
#[inline]
pub(crate) fn deadline(volatile: &Dict<TinyBytes, u64>, key: &[u8], e: &Meta) -> u64 {
    if e.has_ttl() {
        volatile.get(key).copied().unwrap_or(0)
    } else {
        0
    }
}

/// Set when a watched key changes (WATCH): one flag per watching
/// connection, shared with the shards that hold its keys.
pub type WatchFlag = Arc<AtomicBool>;

/// One connection watching one key: its flag, and whether the key was
/// logically expired (not deleted yet) when it was watched. Such a key's
/// deletion is no change; the watcher then watches it as absent, so
/// writing it again is one (Redis's `watchedKey.expired`).
#[derive(Debug)]
struct Watcher {
    flag: Weak<AtomicBool>,
    expired: bool,
}

/// A map that is nearly always empty (a database's watched and blocked-on
/// keys), kept out of line: one pointer, `None` while the map is empty, so
/// the check every write makes (is anything watched, is a client
/// waiting) reads the `Db`'s front line, not the map's 48 bytes (see
/// `Db`). Invariant: never `Some` of an empty map once a method returns
/// (a reservation aside, which only costs a look).
// The box is the point: one word in line instead of the map's 48 bytes.
#[allow(clippy::box_collection)]
struct Rare<V>(Option<Box<HashMap<SmallBytes, V>>>);

impl<V> Default for Rare<V> {
    fn default() -> Self {
        Rare(None)
    }
}

impl<V> Rare<V> {
    #[inline]
    fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    fn map(&mut self) -> &mut HashMap<SmallBytes, V> {
        self.0.get_or_insert_with(Box::default)
    }

    fn get(&self) -> Option<&HashMap<SmallBytes, V>> {
        self.0.as_deref()
    }

    fn contains_key(&self, key: &[u8]) -> bool {
        self.get().is_some_and(|m| m.contains_key(key))
    }

    fn keys(&self) -> impl Iterator<Item = &SmallBytes> {
        self.get().into_iter().flat_map(|m| m.keys())
    }

    fn len(&self) -> usize {
        self.get().map_or(0, HashMap::len)
    }

    fn remove(&mut self, key: &[u8]) -> Option<V> {
        let m = self.0.as_mut()?;
        let v = m.remove(key);
        self.settle();
        v
    }

    fn retain(&mut self, f: impl FnMut(&SmallBytes, &mut V) -> bool) {
        if let Some(m) = self.0.as_mut() {
            m.retain(f);
        }
        self.settle();
    }

    /// Lets go of the map once it is empty.
    fn settle(&mut self) {
        if self.0.as_ref().is_some_and(|m| m.is_empty()) {
            self.0 = None;
        }
    }
}

/// One database of a shard: its keys, their deadlines, and what watches
/// or waits on them.
///
/// Laid out in declaration order (`repr(C)`): what every write reads (the
/// snapshot and tracking switches, the change counter, the blocked-on and
/// the watched keys, the table's header with its hasher's seed) first, on
/// as few cache lines as can be (see `Shard`): 88 bytes, two lines (three
/// when it starts in a line's last 16 bytes). The watched and blocked-on
/// keys are a pointer each ([`Rare`]): as maps in line they took 96 bytes
/// of it, and callgrind's cache simulation (MSET of 10 keys over 32
/// shards on one hub, each job's database cold) counted a miss per job
/// on each of three lines (the switches, the watched keys, the seed).
#[repr(C)]
pub struct Db {
    /// A snapshot of this database is being written: every mutation first
    /// writes the entry it changes if the snapshot has not yet (see
    /// [`crate::snapshot`]). One predictable branch when false.
    pub(crate) saving: bool,
    /// Some client tracks keys (CLIENT TRACKING): every change is listed
    /// in `touched` for the shard's invalidations. Set by the owning loop.
    pub track: bool,
    /// `notify-keyspace-events` has `n`: keys created are listed in
    /// `created` for the shard's `new` events (Redis's `dbAdd`).
    pub track_new: bool,
    /// `lazyfree-lazy-server-del`: a big value an insert replaces is freed
    /// in the background (set through `Shard::set_lazy`).
    pub(crate) lazy_server_del: bool,
    /// The snapshot epoch entries are stamped with (see `Entry::snap`).
    pub(crate) epoch: u8,
    /// Set when a snapshot ended before visiting every entry: stamps are
    /// then mixed, and the next snapshot restamps before it begins.
    pub(crate) stamps_mixed: bool,
    /// Changes made to this database (Redis's `server.dirty`): every
    /// mutation here and every [`Db::signal`] counts one (`dirty += n`).
    /// Save rules and INFO persistence read the sum over databases and
    /// shards; a command changed the dataset iff it moved the sum. The
    /// counter is its shard's, shared by all its databases (see
    /// [`Dirty`]).
    pub dirty: Dirty,
    /// Keys clients are blocked on (BLPOP & co.) in this database, with
    /// their number of waiters; kept by the runtime through
    /// [`Db::add_blocking`] / [`Db::remove_blocking`].
    blocking: Rare<u32>,
    /// WATCHed keys of this database and the flags of their watchers.
    /// Every change to a key goes through `insert`, `remove`, `set_expire`
    /// or [`Db::signal`], which set the flags (Redis's
    /// `signalModifiedKey`); a signalled key's watchers are forgotten, as
    /// their transaction is doomed. Weak: a watcher that went away (UNWATCH,
    /// EXEC, disconnect) costs nothing until [`Db::prune_watches`].
    watched: Rare<Vec<Watcher>>,
    /// The keys: one node per key (see [`crate::node`]).
    pub(crate) table: RawDict<KeyNode>,
    /// The deadline (Unix ms) of every key with a TTL.
    pub(crate) volatile: Dict<TinyBytes, u64>,
    /// Blocked-on keys that were (re)created since the runtime last looked
    /// (Redis's `signalKeyAsReady` from `dbAdd`), in order, each once.
    ready: Vec<SmallBytes>,
    pub(crate) created: Vec<SmallBytes>,
    pub touched: Vec<SmallBytes>,
    /// The running (or finished, not yet collected) snapshot's state.
    pub(crate) snap: Option<Box<crate::snapshot::DbSnap>>,
}

/// A shard's change counter, which each of its databases adds to: the sum
/// over its databases is one load ([`crate::Shard::dirty`]), where summing
/// 16 databases' own counters read 16 cache lines, once per command and
/// per job run on the shard (with 32 shards on one thread, the first
/// source of D1 misses per MSET of 10 keys under callgrind's cache
/// simulation: 128 of 555). Relaxed: only the thread running the shard
/// writes it; other threads read published copies (`persist`). A
/// database made on its own (`Db::new`, tests; the old tables `Db::take`
/// hands out) has a counter of its own.
#[derive(Debug, Default)]
pub struct Dirty(Arc<std::sync::atomic::AtomicU64>);

impl Dirty {
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Zero, for every database of the shard (after loading: what was
    /// loaded is what is on disk).
    pub fn reset(&self) {
        self.0.store(0, Ordering::Relaxed);
    }

    /// Another handle on the same counter (a database of the same shard).
    pub(crate) fn share(&self) -> Dirty {
        Dirty(self.0.clone())
    }
}

impl std::ops::AddAssign<u64> for Dirty {
    fn add_assign(&mut self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
}

impl PartialEq<u64> for Dirty {
    fn eq(&self, n: &u64) -> bool {
        self.get() == *n
    }
}

impl Default for Db {
    fn default() -> Self {
        Db::new()
    }
}

impl Db {
    pub fn new() -> Self {
        Db {
            table: RawDict::new(),
            volatile: Dict::new(),
            watched: Rare::default(),
            blocking: Rare::default(),
            ready: Vec::new(),
            track_new: false,
            created: Vec::new(),
            track: false,
            touched: Vec::new(),
            lazy_server_del: true,
            dirty: Dirty::default(),
            saving: false,
            epoch: 0,
            stamps_mixed: false,
            snap: None,
        }
    }

    /// One more client waits for `key` to be created.
    pub fn add_blocking(&mut self, key: &[u8]) {
        *self
            .blocking
            .map()
            .entry(SmallBytes::from(key))
            .or_default() += 1;
    }

    /// One client fewer waits for `key`.
    pub fn remove_blocking(&mut self, key: &[u8]) {
        let gone = match self.blocking.0.as_mut().and_then(|m| m.get_mut(key)) {
            Some(n) => {
                *n -= 1;
                *n == 0
            }
            None => false,
        };
        if gone {
            self.blocking.remove(key);
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

    /// Marks `key` ready if a client waits for it although it existed
    /// already: a stream exists empty, so XADD (and XGROUP DESTROY, which
    /// fails its readers) signal it, as Redis's `signalKeyAsReady`.
    pub fn signal_ready(&mut self, key: &[u8]) {
        if !self.blocking.is_empty() {
            self.mark_ready(key);
        }
    }

    /// Marks every waited-on key ready (after a flush: the readers of a
    /// stream that was there fail).
    fn mark_all_waited_ready(&mut self) {
        let all: Vec<SmallBytes> = self.blocking.keys().cloned().collect();
        for k in all {
            self.mark_ready(&k);
        }
    }

    /// Marks every waited-on key that exists as ready (after SWAPDB).
    fn mark_existing_ready(&mut self) {
        let hit: Vec<SmallBytes> = self
            .blocking
            .keys()
            .filter(|k| self.table.get(&k[..]).is_some())
            .cloned()
            .collect();
        for k in hit {
            self.mark_ready(&k);
        }
    }

    /// Makes room for `n` more watched keys (a scratch copy watches each
    /// of its keys: growing the table one by one rehashed it three times
    /// for eight keys).
    pub fn reserve_watches(&mut self, n: usize) {
        if n > 0 {
            self.watched.map().reserve(n);
        }
    }

    /// Registers `flag` to be set when `key` changes.
    pub fn watch(&mut self, key: &[u8], flag: &WatchFlag) {
        self.watch_as(key, flag, false);
    }

    /// WATCH of `key` at `now_ms`, as Redis's `watchForKey`: a key that
    /// is logically expired but not deleted yet is watched as expired, so
    /// its deletion is no change (it was gone already) while writing it
    /// again is one (see [`Watcher`]).
    pub fn watch_key(&mut self, key: &[u8], flag: &WatchFlag, now_ms: u64) {
        let expired = self
            .get(key)
            .is_some_and(|e| self.is_expired(key, e, now_ms));
        self.watch_as(key, flag, expired);
    }

    fn watch_as(&mut self, key: &[u8], flag: &WatchFlag, expired: bool) {
        let v = self.watched.map().entry(SmallBytes::from(key)).or_default();
        if !v.iter().any(|w| w.flag.as_ptr() == Arc::as_ptr(flag)) {
            v.push(Watcher {
                flag: Arc::downgrade(flag),
                expired,
            });
        }
    }

    /// Marks `key` as modified: its watchers' transactions will fail.
    /// Called by every mutation here; handlers that change a value in place
    /// (APPEND, INCR ...) call it themselves.
    #[inline]
    pub fn signal(&mut self, key: &[u8]) {
        self.dirty += 1;
        if !self.watched.is_empty() {
            let gone = self.table.get(key).is_none();
            self.signal_slow(key, gone);
        }
        if self.track {
            self.touched.push(SmallBytes::from(key));
        }
    }

    /// Sets the flags of `key`'s watchers (Redis's `touchWatchedKey`),
    /// and forgets them: their transactions are doomed. `gone`: the key
    /// does not exist after this change (deleted, expired, flushed); a
    /// watcher that saw it expired at WATCH then stays, as no longer
    /// expired, and its flag is not set (the key was gone already).
    #[cold]
    fn signal_slow(&mut self, key: &[u8], gone: bool) {
        let Some(mut v) = self.watched.remove(key) else {
            return;
        };
        v.retain_mut(|w| {
            if w.expired && gone {
                w.expired = false;
                return true;
            }
            if let Some(f) = w.flag.upgrade() {
                f.store(true, Ordering::Release);
            }
            false
        });
        if !v.is_empty() {
            self.watched.map().insert(SmallBytes::from(key), v);
        }
    }

    /// Approximate bytes `key` and its value use (MEMORY USAGE): the table
    /// node as the allocator rounds it, its bucket slot, and the heap
    /// memory of the key and the value. `None` if the key is absent.
    pub fn memory_usage(&self, key: &[u8]) -> Option<usize> {
        let n = self.table.get(key)?;
        Some(malloc_chunk(n.size()) + std::mem::size_of::<usize>() + n.entry().value().heap_bytes())
    }

    /// Signals every watched key that exists here or in `other` (FLUSHDB,
    /// FLUSHALL, SWAPDB: Redis's `touchAllWatchedKeysInDb`).
    fn signal_existing(&mut self, other: Option<&Db>) {
        if self.watched.is_empty() {
            return;
        }
        let hit: Vec<(SmallBytes, bool)> = self
            .watched
            .keys()
            .filter_map(|k| {
                let theirs = other.is_some_and(|o| o.contains(k));
                (self.table.get(&k[..]).is_some() || theirs).then(|| (k.clone(), !theirs))
            })
            .collect();
        for (k, gone) in hit {
            self.signal_slow(&k, gone);
        }
    }

    /// Forgets every watcher, their flags left as they are: a scratch
    /// shard's (`commands::scratch`) before its copies are taken out,
    /// which must not signal the clients' watches a script on it carried.
    pub fn forget_watches(&mut self) {
        self.watched = Rare::default();
    }

    /// Forgets watchers that went away; returns how many keys are watched.
    pub fn prune_watches(&mut self) -> usize {
        self.watched.retain(|_, v| {
            v.retain(|w| w.flag.strong_count() > 0);
            !v.is_empty()
        });
        self.watched.len()
    }

    /// Exchanges the contents of two databases (SWAPDB); watchers and
    /// blocked clients stay with their database index. Watchers are
    /// signalled for keys in either. A blocked client's key is marked
    /// ready if it exists after the swap (Redis's
    /// `scanDatabaseForReadyKeys`) or existed before it (Redis's
    /// `scanDatabaseForDeletedKeys`: a reader of a stream that is gone or
    /// no stream now fails with UNBLOCKED; before, it waited for good).
    /// A marked key that holds nothing for its clients only has them
    /// look again.
    pub fn swap_contents(a: &mut Db, b: &mut Db) {
        // A running snapshot writes each database's entries under its own
        // index: finish both before their entries change places.
        a.snapshot_finish();
        b.snapshot_finish();
        a.signal_existing(Some(b));
        b.signal_existing(Some(a));
        a.dirty += 1;
        b.dirty += 1;
        a.mark_existing_ready();
        b.mark_existing_ready();
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
    /// See `ds::dict::RawDict::prefetch`.
    #[inline]
    pub fn prefetch(&self, key: &[u8], stage: u8) {
        self.table.prefetch(self.table.hash_of(key), stage);
    }
    /// [`Db::prefetch`] of a key hashed once for several stages
    /// ([`Db::hash_of`]).
    #[inline]
    pub fn prefetch_hashed(&self, hash: u64, stage: u8) {
        self.table.prefetch(hash, stage);
    }
    /// `key`'s hash in this database's table, for [`Db::prefetch_hashed`].
    #[inline]
    pub fn hash_of(&self, key: &[u8]) -> u64 {
        self.table.hash_of(key)
    }
    pub fn contains(&self, key: &[u8]) -> bool {
        self.table.get(key).is_some()
    }
    /// The entry under `key`, expired or not.
    pub fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.table.get(key).map(KeyNode::entry)
    }
    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut Entry> {
        if self.saving {
            return self.get_mut_saving(key);
        }
        self.table.get_mut(key).map(KeyNode::entry_mut)
    }

    /// [`Db::get_mut`] for a read: the caller may update the access data
    /// but must not change the value. While a snapshot runs, a big value
    /// it is writing in slices is then left to its slices instead of being
    /// finished first (a read of a big key does not stall on it).
    pub fn get_mut_read(&mut self, key: &[u8]) -> Option<&mut Entry> {
        if self.saving {
            return self.get_mut_read_saving(key);
        }
        self.table.get_mut(key).map(KeyNode::entry_mut)
    }

    /// The string under `key`, to change in place (APPEND, SETRANGE): a
    /// string stored as bytes in its node moves first to a node holding a
    /// growable `Str`, and the old node is freed, so nothing is kept twice
    /// (`Entry::value_mut` converts within the node, keeping its size).
    /// `None` if the key is absent or holds another type.
    pub fn str_mut(&mut self, key: &[u8]) -> Option<&mut Str> {
        if self.saving {
            self.preserve(key);
        }
        let hash = self.table.hash_of(key);
        let node = self.table.find_mut_replacing(
            hash,
            key,
            |n| matches!(n.entry().value(), ValueRef::Str(StrRef::Bytes(_))),
            |old| KeyNode::new_value(key, old.into_owned()),
        )?;
        match node.entry_mut().value_mut() {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The bytes of the string under `key`, to change in place without
    /// changing their length (PFCOUNT's cached cardinality): a `raw`
    /// string stored with its key stays there (nothing Redis shows
    /// depends on the node), an `embstr` one moves as in [`Db::str_mut`].
    /// `None` if the key is absent or holds another type.
    pub fn str_bytes_mut(&mut self, key: &[u8]) -> Option<&mut [u8]> {
        if self.saving {
            self.preserve(key);
        }
        let hash = self.table.hash_of(key);
        let node = self.table.find_mut_replacing(
            hash,
            key,
            |n| matches!(n.entry().value(), ValueRef::Str(StrRef::Bytes(b)) if b.len() <= EMBSTR_MAX),
            |old| KeyNode::new_value(key, old.into_owned()),
        )?;
        node.entry_mut().raw_bytes_mut()
    }

    #[cold]
    fn get_mut_read_saving(&mut self, key: &[u8]) -> Option<&mut Entry> {
        let epoch = self.epoch;
        let snap = self.snap.as_deref_mut()?;
        let e = self.table.get_mut(key)?.entry_mut();
        snap.visit_before_read(key, e, &self.volatile, epoch);
        Some(e)
    }

    /// `get_mut` while a snapshot runs: the caller may change the entry,
    /// so the snapshot gets it first.
    #[cold]
    fn get_mut_saving(&mut self, key: &[u8]) -> Option<&mut Entry> {
        let epoch = self.epoch;
        let snap = self.snap.as_deref_mut()?;
        let e = self.table.get_mut(key)?.entry_mut();
        snap.visit_before_change(key, e, &self.volatile, epoch);
        Some(e)
    }

    /// Writes `key`'s entry to the running snapshot if it has not been
    /// written yet (before a change to it).
    #[cold]
    fn preserve(&mut self, key: &[u8]) {
        let epoch = self.epoch;
        if let Some(snap) = self.snap.as_deref_mut() {
            if let Some(n) = self.table.get_mut(key) {
                snap.visit_before_change(key, n.entry_mut(), &self.volatile, epoch);
            }
        }
    }

    /// Whether `key` exists and has expired at `now_ms` (nothing changes).
    pub fn expired(&self, key: &[u8], now_ms: u64) -> bool {
        if self.volatile.is_empty() {
            return false;
        }
        self.table
            .get(key)
            .is_some_and(|n| self.is_expired(key, n.entry(), now_ms))
    }

    /// Deletes `key` if it has expired at `now_ms` (a big value freed in
    /// the background if `lazy`: `lazyfree-lazy-expire`); true if it did.
    pub fn expire_if_needed(&mut self, key: &[u8], now_ms: u64, lazy: bool) -> bool {
        // No key with a TTL (the invariant above): nothing can expire, and
        // the lookup that follows is the only one.
        if self.volatile.is_empty() {
            return false;
        }
        match self.table.get(key) {
            Some(n) if self.is_expired(key, n.entry(), now_ms) => {
                self.delete(key, lazy);
                true
            }
            _ => false,
        }
    }

    /// Stores `entry` under `key` with deadline `expire_at_ms` (Unix ms,
    /// 0 = none), replacing any entry there.
    pub fn insert(&mut self, key: &[u8], mut entry: OwnedEntry, expire_at_ms: u64) {
        self.before_store(key, &mut entry.meta, expire_at_ms);
        self.link(key, KeyNode::new(key, entry), expire_at_ms);
    }

    /// Stores the string `bytes` (not an integer: the caller encodes
    /// those as `Str::Int`) under `key`, as [`Db::insert`] would store
    /// `Str::from_bytes_no_int(bytes)`, without building the `Str` first.
    pub fn insert_str(&mut self, key: &[u8], bytes: &[u8], mut meta: Meta, expire_at_ms: u64) {
        self.before_store(key, &mut meta, expire_at_ms);
        self.link(key, KeyNode::new_str(key, meta, bytes), expire_at_ms);
    }

    /// Before `key` gets a new node: the snapshot writes the old one if it
    /// has not, and `meta` gets the snapshot stamp and the TTL flag.
    fn before_store(&mut self, key: &[u8], meta: &mut Meta, expire_at_ms: u64) {
        if self.saving {
            self.preserve(key);
        }
        meta.set_stamp(self.epoch);
        meta.set_ttl_flag(expire_at_ms != 0);
    }

    /// Puts `node` in the table in place of `key`'s node if any, and
    /// keeps `volatile` in step (`expire_at_ms`: the node's deadline).
    fn link(&mut self, key: &[u8], node: KeyNode, expire_at_ms: u64) {
        self.signal(key);
        if !self.blocking.is_empty() {
            self.mark_ready(key);
        }
        let hash = self.table.hash_of(key);
        let mut new = Some(node);
        let mut old = None;
        self.table.replace_node(hash, key, |o| {
            old = Some(o);
            // INVARIANT: `replace_node` calls this at most once.
            new.take().expect("one replacement")
        });
        if let Some(n) = new {
            self.table.insert_new(hash, n);
            if self.track_new {
                self.created.push(SmallBytes::from(key));
            }
        }
        let had_ttl = old.as_ref().is_some_and(|o| o.entry().has_ttl());
        if let Some(o) = old {
            free_node(o, self.lazy_server_del);
        }
        if expire_at_ms != 0 {
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

    /// Unlinks `key`'s node; returns it and its deadline (0 = none).
    fn unlink(&mut self, key: &[u8]) -> Option<(KeyNode, u64)> {
        if self.saving {
            self.preserve(key);
        }
        let n = self.table.remove(key)?;
        self.signal(key);
        // A stream's waiters hear of its deletion (XREADGROUP fails then).
        if !self.blocking.is_empty() {
            self.mark_ready(key);
        }
        let at = if n.entry().has_ttl() {
            self.volatile.remove(key).map_or(0, |(_, at)| at)
        } else {
            0
        };
        Some((n, at))
    }

    /// Removes `key`; returns its entry and deadline (0 = none).
    pub fn remove_with_ttl(&mut self, key: &[u8]) -> Option<(OwnedEntry, u64)> {
        self.unlink(key).map(|(n, at)| (n.into_owned(), at))
    }

    /// Removes `key` (a scratch shard's copy, `commands::scratch`) and
    /// returns `Some` of its entry and deadline (`None` inside: missing)
    /// if `changed` says so of them, else frees it and returns `None`: one
    /// lookup where a read and then a removal took two.
    pub fn take_if(
        &mut self,
        key: &[u8],
        changed: impl FnOnce(Option<(&Entry, u64)>) -> bool,
    ) -> Option<Option<(OwnedEntry, u64)>> {
        let Some((n, at)) = self.unlink(key) else {
            return changed(None).then_some(None);
        };
        if changed(Some((n.entry(), at))) {
            Some(Some((n.into_owned(), at)))
        } else {
            free_node(n, false);
            None
        }
    }

    /// Forgets that `key` was created (a script's write taken back before
    /// its `new` event went out: `commands::script::wide`).
    pub fn forget_created(&mut self, key: &[u8]) {
        self.created.retain(|c| c[..] != *key);
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<OwnedEntry> {
        self.remove_with_ttl(key).map(|(e, _)| e)
    }

    /// Removes `key` and frees its value (a large one in the background
    /// if `lazy`, see `lazyfree`); false if absent.
    pub fn delete(&mut self, key: &[u8], lazy: bool) -> bool {
        match self.unlink(key) {
            Some((n, _)) => {
                free_node(n, lazy);
                true
            }
            None => false,
        }
    }

    /// The deadline (Unix ms, 0 = none) of `key`, whose entry is `e`.
    #[inline]
    pub fn expire_at(&self, key: &[u8], e: &Meta) -> u64 {
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
    pub fn is_expired(&self, key: &[u8], e: &Meta, now_ms: u64) -> bool {
        e.has_ttl() && now_ms > self.expire_at(key, e)
    }

    /// The entry under `key` and its deadline (0 = none).
    #[inline]
    pub fn get_with_ttl(&self, key: &[u8]) -> Option<(&Entry, u64)> {
        let e = self.table.get(key)?.entry();
        Some((e, self.expire_at(key, e)))
    }

    /// Sets (`at_ms > 0`) or clears (`0`) the deadline of an existing key.
    /// Returns false if the key does not exist.
    pub fn set_expire(&mut self, key: &[u8], at_ms: u64) -> bool {
        if self.saving {
            self.preserve(key);
        }
        if !self.watched.is_empty() && self.table.get(key).is_some() {
            self.signal_slow(key, false);
        }
        if self.track && self.table.get(key).is_some() {
            self.touched.push(SmallBytes::from(key));
        }
        let Some(e) = self.table.get_mut(key).map(KeyNode::entry_mut) else {
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
        self.mark_all_waited_ready();
    }

    /// Takes the whole table out, leaving this database empty (FLUSHDB
    /// ASYNC hands the old tables to another thread to free). Watchers
    /// stay, signalled for the keys that existed.
    pub fn take(&mut self) -> Db {
        self.signal_existing(None);
        // The shard's counter stays with this database.
        let mut dirty = std::mem::take(&mut self.dirty);
        dirty += self.table.len() as u64;
        // A running snapshot keeps the table (see `snapshot`); the rest is
        // handed back to be freed.
        self.snapshot_retire();
        let watched = std::mem::take(&mut self.watched);
        let blocking = std::mem::take(&mut self.blocking);
        let (epoch, snap) = (self.epoch, self.snap.take());
        let (track, track_new) = (self.track, self.track_new);
        let lazy_server_del = self.lazy_server_del;
        let old = std::mem::take(self);
        self.lazy_server_del = lazy_server_del;
        self.watched = watched;
        self.blocking = blocking;
        self.dirty = dirty;
        (self.track, self.track_new) = (track, track_new);
        (self.epoch, self.snap) = (epoch, snap);
        self.mark_all_waited_ready();
        old
    }

    pub fn random_entry(&self, rng: &mut impl Rng) -> Option<(&[u8], &Entry)> {
        self.table.random_node(rng).map(|n| (n.key(), n.entry()))
    }

    /// Bytes the key table and the TTL set take themselves (MEMORY STATS
    /// `overhead.hashtable.main` / `.expires`).
    pub fn overhead_bytes(&self) -> (usize, usize) {
        // The table's own part of each node (link, metadata, tag: what
        // Redis counts as its `dictEntry`), keys and values apart.
        let table = std::mem::size_of::<RawDict<KeyNode>>()
            + self.table.buckets() * std::mem::size_of::<usize>()
            + self.table.len() * crate::node::HEAD_SIZE;
        (table, self.volatile.allocated_bytes())
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
        self.table.scan(cursor, |n| f(n.key(), n.entry()))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Entry)> {
        self.table.iter().map(|n| (n.key(), n.entry()))
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

/// Frees a removed node: a string at once, any other value through
/// `lazyfree` (which frees a big one in the background if `lazy`).
fn free_node(n: KeyNode, lazy: bool) {
    if matches!(n.entry().value(), ValueRef::Str(_)) {
        drop(n);
    } else {
        crate::lazyfree::free(n.into_owned().value, lazy);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lfu::LFU_INIT_VAL;

    /// What every write reads of its database stays at the front (see
    /// `Db`): the switches, the counter, the blocked-on and the watched
    /// keys in the first 64 bytes, the table's header (its hasher's seed
    /// too) within 96. A field added above them, a map back in line, or
    /// the `repr(C)` dropped, fails here.
    #[test]
    fn hot_fields_lead_the_db() {
        use std::mem::{offset_of, size_of};
        for end in [
            offset_of!(Db, saving) + 1,
            offset_of!(Db, track) + 1,
            offset_of!(Db, dirty) + size_of::<Dirty>(),
            offset_of!(Db, blocking) + size_of::<Rare<u32>>(),
            offset_of!(Db, watched) + size_of::<Rare<Vec<Watcher>>>(),
        ] {
            assert!(end <= 64, "{end}");
        }
        let table = offset_of!(Db, table) + size_of::<RawDict<KeyNode>>();
        assert!(table <= 96, "{table}");
    }

    /// The watched and blocked-on keys hold no map while there are none
    /// (the one-pointer check of every write, see [`Rare`]), and let go of
    /// it when the last one goes.
    #[test]
    fn rare_maps_are_none_while_empty() {
        let mut db = Db::new();
        assert!(db.watched.is_empty() && db.blocking.is_empty());
        db.add_blocking(b"q");
        db.add_blocking(b"q");
        assert!(!db.blocking.is_empty());
        db.remove_blocking(b"q");
        assert!(!db.blocking.is_empty());
        db.remove_blocking(b"q");
        assert!(db.blocking.0.is_none());
        let flag: WatchFlag = Arc::default();
        db.reserve_watches(0);
        assert!(db.watched.0.is_none());
        db.watch(b"w", &flag);
        assert!(!db.watched.is_empty());
        db.insert(b"w", e(), 0);
        assert!(flag.load(Ordering::Acquire), "the watcher was told");
        assert!(db.watched.0.is_none(), "its entry went with the signal");
        let gone: WatchFlag = Arc::default();
        db.watch(b"x", &gone);
        drop(gone);
        assert_eq!(db.prune_watches(), 0);
        assert!(db.watched.0.is_none());
    }
    use crate::value::{Str, Value};

    /// Redis's `watchedKey.expired`: a key watched while logically expired
    /// (not deleted yet) dooms no transaction when it is deleted or
    /// flushed, and dooms it when written again after; a live key's
    /// deletion dooms it.
    #[test]
    fn a_key_watched_expired_is_changed_by_a_write_not_by_its_deletion() {
        let mut db = Db::new();
        db.insert(b"old", e(), 1_000);
        db.insert(b"live", e(), 0);
        let (old, live): (WatchFlag, WatchFlag) = (Arc::default(), Arc::default());
        db.watch_key(b"old", &old, 2_000);
        db.watch_key(b"live", &live, 2_000);
        assert!(db.delete(b"old", false));
        assert!(db.delete(b"live", false));
        assert!(
            !old.load(Ordering::Acquire),
            "an expired key's deletion is no change"
        );
        assert!(live.load(Ordering::Acquire));
        db.insert(b"old", e(), 0);
        assert!(old.load(Ordering::Acquire), "written again: a change");

        // Flushed while still there: no change either.
        let mut db = Db::new();
        db.insert(b"old", e(), 1_000);
        let flag: WatchFlag = Arc::default();
        db.watch_key(b"old", &flag, 2_000);
        let _ = db.take();
        assert!(!flag.load(Ordering::Acquire));
        db.insert(b"old", e(), 0);
        assert!(flag.load(Ordering::Acquire));

        // Overwritten before anything deleted it: a change.
        let mut db = Db::new();
        db.insert(b"old", e(), 1_000);
        let flag: WatchFlag = Arc::default();
        db.watch_key(b"old", &flag, 2_000);
        db.insert(b"old", e(), 0);
        assert!(flag.load(Ordering::Acquire));
    }

    fn e() -> OwnedEntry {
        OwnedEntry::new(Value::Str(Str::from_bytes(b"v")), 0)
    }

    /// SWAPDB marks a blocked-on key ready both when it exists after the
    /// swap and when it existed before it (a reader of a stream swapped
    /// away must be woken to fail, as Redis's `scanDatabaseForDeletedKeys`;
    /// before, only existing keys were marked and it waited for good).
    #[test]
    fn swapdb_marks_keys_waited_on_that_came_or_went() {
        let (mut a, mut b) = (Db::new(), Db::new());
        a.insert(b"went", e(), 0);
        b.insert(b"came", e(), 0);
        for k in [&b"went"[..], b"came", b"never"] {
            a.add_blocking(k);
        }
        Db::swap_contents(&mut a, &mut b);
        let mut ready: Vec<Vec<u8>> = a.take_ready().iter().map(|k| k.to_vec()).collect();
        ready.sort();
        assert_eq!(ready, vec![b"came".to_vec(), b"went".to_vec()]);
        assert!(!b.has_ready(), "nobody waits in the other database");
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
        assert!(db.expire_if_needed(b"b", 401, true));
        assert_eq!((db.len(), db.volatile_len()), (0, 0));
    }

    fn str_of(db: &Db, key: &[u8]) -> Option<Vec<u8>> {
        match db.get(key)?.value() {
            ValueRef::Str(s) => Some(s.as_bytes().into_owned()),
            _ => None,
        }
    }

    #[test]
    fn strings_of_every_size_replace_each_other_with_their_ttls() {
        let mut db = Db::new();
        let sizes = [0, 5, 22, 23, 30, 44, 45, 100, 1000];
        let mut want = std::collections::HashMap::new();
        for round in 0..4usize {
            for k in 0..60usize {
                let key = format!("key:{k}").into_bytes();
                let v = vec![b'a' + (k % 26) as u8; sizes[(k + round) % sizes.len()]];
                let ttl = if (k + round) % 3 == 0 {
                    99 + k as u64
                } else {
                    0
                };
                if round % 2 == 0 {
                    db.insert(
                        &key,
                        OwnedEntry::new(Value::Str(Str::from_bytes(&v)), 0),
                        ttl,
                    );
                } else {
                    db.insert_str(&key, &v, Meta::new(0), ttl);
                }
                want.insert(key, (v, ttl));
            }
            for (k, (v, ttl)) in &want {
                assert_eq!(str_of(&db, k).as_ref(), Some(v));
                assert_eq!(db.expire_of(k), *ttl);
            }
            assert_eq!(db.len(), 60);
            assert_eq!(
                db.volatile_len(),
                want.values().filter(|w| w.1 != 0).count()
            );
        }
        // An in-place change of a long string keeps it stored with its key.
        let e = db.get_mut(b"key:7").unwrap();
        let Value::Str(s) = e.value_mut() else {
            panic!("a string")
        };
        s.make_raw().extend_from_slice(b"!");
        let mut v = want[&b"key:7"[..]].0.clone();
        v.push(b'!');
        assert_eq!(str_of(&db, b"key:7"), Some(v));
        // str_mut moves a string stored as bytes into a new node with a
        // growable buffer: the node shrinks to a `Value`'s.
        db.insert(
            b"key:8",
            OwnedEntry::new(Value::Str(Str::from_bytes(&[b'w'; 1000])), 0),
            5,
        );
        let before = db.memory_usage(b"key:8").unwrap();
        db.str_mut(b"key:8").unwrap().make_raw().push(b'!');
        let after = db.memory_usage(b"key:8").unwrap();
        // The buffer doubled (1000 -> 2000); the node kept no copy (it
        // would be 1000 bytes more).
        assert!(after < 2 * before + 64, "{before} -> {after}");
        assert_eq!(str_of(&db, b"key:8").map(|v| v.len()), Some(1001));
        assert_eq!(db.expire_of(b"key:8"), 5);
        want.insert(b"key:8".to_vec(), (Vec::new(), 5));
        assert!(db.str_mut(b"nokey").is_none());
        let list = Value::List(crate::types::List::default());
        db.insert(b"list", OwnedEntry::new(list, 0), 0);
        assert!(db.str_mut(b"list").is_none(), "another type: no string");
        assert!(db.delete(b"list", true));
        for k in 0..60usize {
            let key = format!("key:{k}");
            if k % 2 == 0 {
                assert!(db.delete(key.as_bytes(), true));
            } else {
                let (e, at) = db.remove_with_ttl(key.as_bytes()).unwrap();
                assert_eq!(at, want[key.as_bytes()].1);
                assert!(matches!(e.value, Value::Str(_)));
            }
        }
        assert_eq!((db.len(), db.volatile_len()), (0, 0));
    }
}
