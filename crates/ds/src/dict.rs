//! `Dict`: a chained hash table with incremental rehashing, after Redis's
//! `dict.c`.
//!
//! Owns: the keyspace's and the hash/set types' main index. It is a
//! data structure only: it knows nothing of expiry, eviction or replies.
//!
//! # Layout
//!
//! Two tables of power-of-two bucket arrays; each bucket is a singly linked
//! chain of boxed nodes `{ next, hash, key, value }`. Normally only
//! `tables[0]` is in use. A resize allocates `tables[1]` and starts an
//! *incremental rehash*: every mutating call (`insert`, `remove`, `get_mut`,
//! `get_or_insert_with`) first migrates one bucket (skipping at most
//! [`EMPTY_VISITS_PER_BUCKET`] empty ones), and the server's cron calls
//! [`Dict::rehash_step`] to finish idle tables. While rehashing, new entries
//! go to `tables[1]`, lookups probe both tables, and buckets of `tables[0]`
//! below `rehash_idx` are empty. When `tables[0]` is empty the tables swap.
//!
//! # Invariants
//!
//! * Table sizes are 0 or powers of two >= [`INITIAL_SIZE`]; `tables[1]` has
//!   size 0 exactly when no rehash is in progress.
//! * Every node sits in bucket `hash & mask` of its table; `used` counts the
//!   nodes of each table; keys are unique across both tables.
//! * While rehashing, `tables[0]` is non-empty and `rehash_idx` is below its
//!   size: the rehash ends the moment the old table drains, by migration or
//!   by removal.
//! * No call does more than O(1) expected work besides `clear`, `drain`,
//!   iteration, `scan`'s per-call bucket walk and `Drop`: growth and
//!   shrinking below fill 1/8 are both incremental, so there is
//!   never a stop-the-world rehash. Growth starts at [`MAX_LOAD_FACTOR`]
//!   (1) entry per bucket; the load factor stays below 2 during a growth
//!   rehash, because the old table is drained after at most its bucket count
//!   of mutations.
//! * Chains are dropped iteratively (see `Table`'s `Drop`), so a pathological
//!   chain cannot overflow the stack.
//!
//! # Why this design
//!
//! * **Chaining, not open addressing**: Redis's `SCAN` guarantee (every
//!   element present for the whole scan is returned at least once, while the
//!   table grows or shrinks between calls) rests on each element living in
//!   bucket `hash & mask`, so a reverse-binary cursor visits, across sizes,
//!   every bucket an element can be in. Open addressing (SwissTable) moves
//!   elements on insert/delete and loses that; Dragonfly's dashtable keeps it
//!   with segments but is a much larger project. We match Redis first.
//! * **No hash is stored in the nodes**: a node is `{ next, key, value }`,
//!   so the keyspace's node (8 + 16-byte [`crate::TinyBytes`] key + 32-byte
//!   entry = 56 bytes) fits glibc's 64-byte chunk; an 8-byte hash would
//!   take an 80-byte one (16 bytes per key, about 20 % of a small key's
//!   cost). The price: a rehash hashes each migrated key again (foldhash on
//!   a short key is a few nanoseconds, next to the cache miss of touching
//!   the node, which migration pays anyway), and a chain walk compares keys
//!   directly (chains average under one node at load factor <= 1, and slice
//!   comparison checks the length first). Each lookup still hashes the key
//!   exactly once (`insert` uses the same hash for its lookup and its
//!   insertion).
//! * **Boxed nodes** (one allocation per entry, as Redis's `dictEntry`) keep
//!   migration a pointer move and need no `unsafe`. A slab of nodes with
//!   `u32` links would save memory and is the next step if profiles say so.
//! * **`get(&self)` does not rehash**: it takes a shared borrow so readers
//!   can hold several results; migration is driven by writers and the cron.
//! * **Hashing**: `foldhash`'s `RandomState` is seeded randomly per process
//!   (and per table), so bucket placement is unpredictable to clients (hash
//!   flooding), and it is much faster than SipHash on short keys. Lookups
//!   take any borrowed form `Q` of the key (`Dict<SmallBytes, _>` is queried
//!   with `&[u8]`), which requires `Hash` of `K` and `Q` to agree, as for
//!   `std::collections::HashMap`.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::iter::FusedIterator;
use std::mem;

use foldhash::fast::RandomState;
use rand::Rng;

/// Size of the first table, and the smallest a table shrinks to.
pub const INITIAL_SIZE: usize = 4;

/// A table grows when it holds this many entries per bucket (Redis's 1).
/// At 2 the bucket array cost 4..8 bytes per entry instead of 8..16 (-4 to
/// -7 bytes per small key in `bench/memory.sh`), but SET at pipeline 16
/// took about 10 % more server CPU per op (chains of 1..2 nodes instead of
/// 0.5..1; side by side, same build otherwise), so it stays at 1.
pub const MAX_LOAD_FACTOR: usize = 1;

/// A table shrinks when fewer than `1 / SHRINK_FILL_DENOMINATOR` of its
/// buckets' worth of entries remain.
pub const SHRINK_FILL_DENOMINATOR: usize = 8;

/// During one rehash step, at most this many empty buckets are skipped per
/// bucket requested (Redis's `empty_visits`), bounding the step's cost.
pub const EMPTY_VISITS_PER_BUCKET: usize = 10;

/// Buckets migrated by each mutating operation during a rehash.
const STEP_BUCKETS: usize = 1;

/// Entries sampled by `random_entry` before picking one (Redis's
/// `GETFAIR_NUM_ENTRIES`).
const FAIR_SAMPLE: usize = 15;

/// Random bucket probes before `random_entry` falls back to a linear walk.
const RANDOM_PROBES_MAX: usize = 1024;

type Link<K, V> = Option<Box<Node<K, V>>>;

struct Node<K, V> {
    next: Link<K, V>,
    key: K,
    value: V,
}

struct Table<K, V> {
    buckets: Box<[Link<K, V>]>,
    used: usize,
}

impl<K, V> Table<K, V> {
    fn empty() -> Self {
        Table {
            buckets: Box::new([]),
            used: 0,
        }
    }

    /// A table of `size` empty buckets. The bucket array comes zeroed from
    /// the allocator (`calloc`: fresh pages from the kernel for a large
    /// table, nothing written) instead of being written bucket by bucket:
    /// growing to 32M buckets wrote 256 MiB in one insert (a 200 ms stall).
    fn with_size(size: usize) -> Self {
        debug_assert!(size.is_power_of_two());
        let layout = std::alloc::Layout::array::<Link<K, V>>(size).expect("table size");
        // SAFETY: the layout has a non-zero size (size >= 1, links are
        // pointer-sized); an all-zero `Option<Box<_>>` is `None` (the
        // null-pointer optimisation is guaranteed for `Option<Box<T>>`);
        // the slice is built with the exact layout `Box<[T]>` frees with.
        let buckets = unsafe {
            let p = std::alloc::alloc_zeroed(layout) as *mut Link<K, V>;
            if p.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, size))
        };
        Table { buckets, used: 0 }
    }

    #[inline]
    fn size(&self) -> usize {
        self.buckets.len()
    }

    /// Bucket index mask; only meaningful for a non-empty table.
    #[inline]
    fn mask(&self) -> usize {
        self.buckets.len().wrapping_sub(1)
    }

    #[inline]
    fn bucket_of(&self, hash: u64) -> usize {
        // Truncation on 32-bit targets is fine: only the low bits are used.
        (hash as usize) & self.mask()
    }

    fn find<Q>(&self, hash: u64, key: &Q) -> Option<&Node<K, V>>
    where
        K: Borrow<Q>,
        Q: ?Sized + Eq,
    {
        if self.used == 0 {
            return None;
        }
        let mut cur = self.buckets[self.bucket_of(hash)].as_deref();
        while let Some(node) = cur {
            if node.key.borrow() == key {
                return Some(node);
            }
            cur = node.next.as_deref();
        }
        None
    }

    fn find_mut<Q>(&mut self, hash: u64, key: &Q) -> Option<&mut Node<K, V>>
    where
        K: Borrow<Q>,
        Q: ?Sized + Eq,
    {
        if self.used == 0 {
            return None;
        }
        let bucket = self.bucket_of(hash);
        let mut cur = self.buckets[bucket].as_deref_mut();
        while let Some(node) = cur {
            if node.key.borrow() == key {
                return Some(node);
            }
            cur = node.next.as_deref_mut();
        }
        None
    }

    fn unlink<Q>(&mut self, hash: u64, key: &Q) -> Option<Box<Node<K, V>>>
    where
        K: Borrow<Q>,
        Q: ?Sized + Eq,
    {
        if self.used == 0 {
            return None;
        }
        let bucket = self.bucket_of(hash);
        let mut link = &mut self.buckets[bucket];
        loop {
            match link.as_deref() {
                None => return None,
                Some(node) if node.key.borrow() == key => break,
                Some(_) => {}
            }
            match link {
                Some(node) => link = &mut node.next,
                None => return None,
            }
        }
        let mut node = link.take()?;
        *link = node.next.take();
        self.used -= 1;
        Some(node)
    }

    /// Pushes `node` at the head of its bucket.
    #[inline]
    fn push(&mut self, hash: u64, mut node: Box<Node<K, V>>) -> &mut Node<K, V> {
        let bucket = self.bucket_of(hash);
        let slot = &mut self.buckets[bucket];
        node.next = slot.take();
        self.used += 1;
        slot.insert(node)
    }
}

impl<K, V> Drop for Table<K, V> {
    /// Iterative: the default recursive drop of a long `Box` chain would
    /// overflow the stack.
    fn drop(&mut self) {
        if self.used > 0 {
            for slot in self.buckets.iter_mut() {
                let mut link = slot.take();
                while let Some(mut node) = link {
                    link = node.next.take();
                }
            }
        }
        // Every bucket is `None` now: free the array without visiting the
        // buckets again (the slice's drop glue would check each one; for
        // the old table at the end of a rehash to 32M buckets that was
        // tens of milliseconds in one insert).
        let b = mem::replace(&mut self.buckets, Box::new([]));
        let n = b.len();
        if n == 0 {
            return;
        }
        let layout = std::alloc::Layout::array::<Link<K, V>>(n).expect("table size");
        let p = Box::into_raw(b) as *mut u8;
        // SAFETY: no bucket holds a node (emptied above, or `used == 0`),
        // so no element needs dropping; `p` came from the global allocator
        // with this layout (`with_size`, or a `Box<[_]>` of length `n`).
        unsafe { std::alloc::dealloc(p, layout) };
    }
}

/// A chained hash table with incremental rehashing and Redis's `SCAN`
/// guarantee; see the module docs.
pub struct Dict<K, V, S = RandomState> {
    tables: [Table<K, V>; 2],
    /// `Some(i)` while rehashing: buckets `< i` of `tables[0]` are empty.
    rehash_idx: Option<usize>,
    hasher: S,
}

impl<K, V> Dict<K, V, RandomState> {
    /// An empty dict; allocates nothing until the first insert.
    pub fn new() -> Self {
        Self::with_hasher(RandomState::default())
    }

    /// An empty dict with room for `capacity` entries before it grows.
    pub fn with_capacity(capacity: usize) -> Self {
        Self::with_capacity_and_hasher(capacity, RandomState::default())
    }
}

impl<K, V, S: Default> Default for Dict<K, V, S> {
    fn default() -> Self {
        Self::with_hasher(S::default())
    }
}

/// The table size for `n` entries: a power of two >= max(n, INITIAL_SIZE).
fn size_for(n: usize) -> usize {
    n.max(INITIAL_SIZE)
        .checked_next_power_of_two()
        .unwrap_or(1 << (usize::BITS - 1))
}

impl<K, V, S> Dict<K, V, S> {
    /// Bytes of one entry's node (one heap allocation per entry): the next
    /// link, the key and the value.
    pub const NODE_SIZE: usize = mem::size_of::<Node<K, V>>();

    /// An empty dict using `hasher`; allocates nothing until the first insert.
    pub fn with_hasher(hasher: S) -> Self {
        Dict {
            tables: [Table::empty(), Table::empty()],
            rehash_idx: None,
            hasher,
        }
    }

    /// An empty dict using `hasher`, with room for `capacity` entries.
    pub fn with_capacity_and_hasher(capacity: usize, hasher: S) -> Self {
        let mut dict = Self::with_hasher(hasher);
        if capacity > 0 {
            dict.tables[0] = Table::with_size(size_for(capacity));
        }
        dict
    }

    /// Number of entries. O(1).
    #[inline]
    pub fn len(&self) -> usize {
        self.tables[0].used + self.tables[1].used
    }

    /// True if there are no entries. O(1).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Total bucket count of both tables (for `INFO`/`DEBUG HTSTATS`).
    pub fn buckets(&self) -> usize {
        self.tables[0].size() + self.tables[1].size()
    }

    /// True while an incremental rehash is in progress.
    #[inline]
    pub fn is_rehashing(&self) -> bool {
        self.rehash_idx.is_some()
    }

    /// Rough memory used by the dict itself: the handle, bucket arrays and
    /// nodes (not counting heap memory owned by keys and values, nor
    /// allocator overhead).
    pub fn allocated_bytes(&self) -> usize {
        mem::size_of::<Self>()
            + self.buckets() * mem::size_of::<Link<K, V>>()
            + self.len() * mem::size_of::<Node<K, V>>()
    }

    /// The hasher.
    pub fn hasher(&self) -> &S {
        &self.hasher
    }

    /// Removes every entry and frees the tables. O(n).
    pub fn clear(&mut self) {
        self.tables = [Table::empty(), Table::empty()];
        self.rehash_idx = None;
    }

    /// Removes every entry at once and returns them as an owning iterator;
    /// the dict is empty (and unallocated) right away, and entries not
    /// consumed are dropped with the iterator. Lets a caller free a large
    /// dict elsewhere (lazy free) or in bounded batches.
    pub fn drain(&mut self) -> Drain<K, V> {
        let tables = mem::replace(&mut self.tables, [Table::empty(), Table::empty()]);
        self.rehash_idx = None;
        Drain::new(tables)
    }

    /// Iterates over all entries in no particular order. Each entry once.
    pub fn iter(&self) -> Iter<'_, K, V> {
        Iter {
            buckets: self.tables[0]
                .buckets
                .iter()
                .chain(self.tables[1].buckets.iter()),
            cur: None,
            remaining: self.len(),
        }
    }

    /// Resumable walk: visits the entries from `pos` on, in [`Dict::iter`]'s
    /// order, calling `f` on each until it returns false (that entry counts
    /// as visited); `pos` is left just after the last entry visited. True
    /// when the walk ran to the end (a walk stopped on the last entry says
    /// false: callers that know the count need not call again). Each entry is visited exactly once over a
    /// series of calls, provided the dict is not changed in between (no
    /// insert, remove, `get_mut` or rehash step: the position is a bucket
    /// and a place in its chain). Resuming costs the skipped part of one
    /// chain. A snapshot writes a big hash or set this way, a slice at a
    /// time.
    pub fn walk(&self, pos: &mut WalkPos, mut f: impl FnMut(&K, &V) -> bool) -> bool {
        while let Some(table) = self.tables.get(pos.table) {
            while let Some(slot) = table.buckets.get(pos.bucket) {
                let mut cur = slot.as_deref();
                for _ in 0..pos.skip {
                    cur = cur.and_then(|n| n.next.as_deref());
                }
                while let Some(node) = cur {
                    pos.skip += 1;
                    if !f(&node.key, &node.value) {
                        return false;
                    }
                    cur = node.next.as_deref();
                }
                pos.bucket += 1;
                pos.skip = 0;
            }
            pos.table += 1;
            pos.bucket = 0;
        }
        true
    }

    /// Iterates over all entries with mutable values, in no particular order.
    pub fn iter_mut(&mut self) -> IterMut<'_, K, V> {
        let remaining = self.len();
        let [t0, t1] = &mut self.tables;
        IterMut {
            buckets: t0.buckets.iter_mut().chain(t1.buckets.iter_mut()),
            cur: None,
            remaining,
        }
    }

    /// Iterates over the keys.
    pub fn keys(&self) -> impl Iterator<Item = &K> + '_ {
        self.iter().map(|(k, _)| k)
    }

    /// Iterates over the values.
    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.iter().map(|(_, v)| v)
    }

    /// Ends the rehash once the old table is empty (its last entries may
    /// also go by `remove`), then checks whether the new table is already
    /// too sparse, so that a cron driving `rehash_step` settles at the right
    /// size even when no further `remove` comes.
    fn complete_rehash_if_drained(&mut self) {
        if self.rehash_idx.is_some() && self.tables[0].used == 0 {
            self.tables[0] = mem::replace(&mut self.tables[1], Table::empty());
            self.rehash_idx = None;
            self.shrink_if_needed();
        }
    }

    /// Starts a resize to `size` buckets (a power of two). An empty table is
    /// replaced directly; otherwise an incremental rehash begins.
    fn resize(&mut self, size: usize) {
        debug_assert!(self.rehash_idx.is_none());
        if self.tables[0].used == 0 {
            self.tables[0] = Table::with_size(size);
        } else if self.tables[0].size() != size {
            self.tables[1] = Table::with_size(size);
            self.rehash_idx = Some(0);
        }
    }

    fn grow_if_needed(&mut self) {
        if self.rehash_idx.is_some() {
            return;
        }
        let t0 = &self.tables[0];
        if t0.size() == 0 {
            self.resize(INITIAL_SIZE);
        } else if t0.used >= t0.size() * MAX_LOAD_FACTOR {
            self.resize(size_for(t0.used / MAX_LOAD_FACTOR + 1));
        }
    }

    fn shrink_if_needed(&mut self) {
        if self.rehash_idx.is_some() {
            return;
        }
        let t0 = &self.tables[0];
        if t0.size() > INITIAL_SIZE && t0.used * SHRINK_FILL_DENOMINATOR < t0.size() {
            self.resize(size_for(t0.used));
        }
    }

    /// Redis's `dictScan`: calls `f` for the entries of the bucket(s) at
    /// `cursor` and returns the next cursor, 0 when the scan is complete.
    /// Start with 0. Every entry present for the whole scan is visited at
    /// least once, however the dict grows, shrinks or rehashes between calls;
    /// entries may be visited more than once. The cursor's bits are
    /// incremented in reverse order, so that covering all buckets of one size
    /// also covers all buckets of any other size. Cost per call: the entries
    /// of one bucket of the smaller table and of its 1..(size ratio) expansions
    /// in the larger one.
    pub fn scan(&self, cursor: u64, mut f: impl FnMut(&K, &V)) -> u64 {
        if self.is_empty() {
            return 0;
        }
        let emit = |table: &Table<K, V>, v: u64, f: &mut dyn FnMut(&K, &V)| {
            let mut cur = table.buckets[(v as usize) & table.mask()].as_deref();
            while let Some(node) = cur {
                f(&node.key, &node.value);
                cur = node.next.as_deref();
            }
        };
        let mut v = cursor;
        if self.rehash_idx.is_none() {
            let t0 = &self.tables[0];
            let m0 = t0.mask() as u64;
            emit(t0, v, &mut f);
            v = next_cursor(v, m0);
        } else {
            let (small, large) = if self.tables[0].size() <= self.tables[1].size() {
                (&self.tables[0], &self.tables[1])
            } else {
                (&self.tables[1], &self.tables[0])
            };
            let (m0, m1) = (small.mask() as u64, large.mask() as u64);
            emit(small, v, &mut f);
            // Visit every expansion of the small table's bucket in the large
            // one: the cursor values that agree with v on the low m0 bits.
            loop {
                emit(large, v, &mut f);
                v = next_cursor(v, m1);
                if v & (m0 ^ m1) == 0 {
                    break;
                }
            }
        }
        v
    }
}

impl<K, V, S> Dict<K, V, S> {
    /// [`Dict::scan`] with mutable access to the values: same cursor, same
    /// guarantee (every entry present for the whole scan is visited at least
    /// once), so a caller that must act on each entry exactly once marks the
    /// entries it has handled. Never rehashes.
    pub fn scan_mut(&mut self, cursor: u64, mut f: impl FnMut(&K, &mut V)) -> u64 {
        if self.is_empty() {
            return 0;
        }
        let emit = |table: &mut Table<K, V>, v: u64, f: &mut dyn FnMut(&K, &mut V)| {
            let mask = table.mask();
            let mut cur = table.buckets[(v as usize) & mask].as_deref_mut();
            while let Some(node) = cur {
                f(&node.key, &mut node.value);
                cur = node.next.as_deref_mut();
            }
        };
        let mut v = cursor;
        let rehashing = self.rehash_idx.is_some();
        let [t0, t1] = &mut self.tables;
        if !rehashing {
            let m0 = t0.mask() as u64;
            emit(t0, v, &mut f);
            v = next_cursor(v, m0);
        } else {
            let (small, large) = if t0.size() <= t1.size() {
                (t0, t1)
            } else {
                (t1, t0)
            };
            let (m0, m1) = (small.mask() as u64, large.mask() as u64);
            emit(small, v, &mut f);
            loop {
                emit(large, v, &mut f);
                v = next_cursor(v, m1);
                if v & (m0 ^ m1) == 0 {
                    break;
                }
            }
        }
        v
    }
}

/// Increments the reversed bits of `v` above `mask` (Redis's cursor step).
#[inline]
fn next_cursor(v: u64, mask: u64) -> u64 {
    (v | !mask).reverse_bits().wrapping_add(1).reverse_bits()
}

impl<K, V, S> Dict<K, V, S>
where
    K: Hash + Eq,
    S: BuildHasher,
{
    #[inline]
    fn hash_of<Q: ?Sized + Hash>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Migrates up to `max_buckets` non-empty buckets of an in-progress
    /// rehash (skipping at most `EMPTY_VISITS_PER_BUCKET * max_buckets`
    /// empty ones). Returns true if more work remains. Meant for the server's
    /// cron, e.g. in a loop bounded by a time budget.
    pub fn rehash_step(&mut self, max_buckets: usize) -> bool {
        let Some(mut idx) = self.rehash_idx else {
            return false;
        };
        let mut empty_visits = max_buckets.saturating_mul(EMPTY_VISITS_PER_BUCKET);
        let hasher = &self.hasher;
        let [t0, t1] = &mut self.tables;
        let mut todo = max_buckets;
        while todo > 0 && t0.used > 0 {
            todo -= 1;
            // INVARIANT: t0.used > 0 and buckets below idx are empty, so a
            // non-empty bucket exists at or after idx: indexing stays in
            // bounds.
            while t0.buckets[idx].is_none() {
                idx += 1;
                empty_visits -= 1;
                if empty_visits == 0 {
                    self.rehash_idx = Some(idx);
                    return true;
                }
            }
            let mut link = t0.buckets[idx].take();
            while let Some(mut node) = link {
                link = node.next.take();
                t0.used -= 1;
                t1.push(hasher.hash_one(&node.key), node);
            }
            idx += 1;
        }
        self.rehash_idx = Some(idx);
        self.complete_rehash_if_drained();
        self.rehash_idx.is_some()
    }

    #[inline]
    fn step(&mut self) {
        if self.rehash_idx.is_some() {
            self.rehash_step(STEP_BUCKETS);
        }
    }

    #[inline]
    fn find<Q>(&self, hash: u64, key: &Q) -> Option<&Node<K, V>>
    where
        K: Borrow<Q>,
        Q: ?Sized + Eq,
    {
        match self.tables[0].find(hash, key) {
            None if self.rehash_idx.is_some() => self.tables[1].find(hash, key),
            found => found,
        }
    }

    #[inline]
    fn find_mut<Q>(&mut self, hash: u64, key: &Q) -> Option<&mut Node<K, V>>
    where
        K: Borrow<Q>,
        Q: ?Sized + Eq,
    {
        let rehashing = self.rehash_idx.is_some();
        let [t0, t1] = &mut self.tables;
        match t0.find_mut(hash, key) {
            None if rehashing => t1.find_mut(hash, key),
            found => found,
        }
    }

    /// The value for `key`. O(1) expected; never rehashes.
    #[inline]
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.get_key_value(key).map(|(_, v)| v)
    }

    /// The stored key and value for `key`. O(1) expected; never rehashes.
    #[inline]
    pub fn get_key_value<Q>(&self, key: &Q) -> Option<(&K, &V)>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        if self.is_empty() {
            return None;
        }
        self.find(self.hash_of(key), key)
            .map(|node| (&node.key, &node.value))
    }

    /// The stored key and the value for `key`, the value mutably. Never
    /// rehashes (unlike [`Dict::get_mut`]).
    #[inline]
    pub fn get_key_value_mut<Q>(&mut self, key: &Q) -> Option<(&K, &mut V)>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        if self.is_empty() {
            return None;
        }
        let hash = self.hash_of(key);
        self.find_mut(hash, key)
            .map(|node| (&node.key, &mut node.value))
    }

    /// Starts loading what a lookup of `key` will touch, without waiting
    /// for it: stage 0 the bucket slot, stage 1 (once stage 0 had time to
    /// land) the first node of the chain. Issued over a batch of keys
    /// before the batch runs, the cache misses of the whole batch overlap
    /// instead of being paid one after another.
    #[inline]
    pub fn prefetch<Q>(&self, key: &Q, stage: u8)
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash,
    {
        if self.is_empty() {
            return;
        }
        let hash = self.hash_of(key);
        for t in &self.tables {
            if t.used == 0 {
                continue;
            }
            let slot = &t.buckets[t.bucket_of(hash)];
            if stage == 0 {
                prefetch_ptr(slot as *const Link<K, V> as *const u8);
            } else if let Some(node) = slot.as_deref() {
                prefetch_ptr(node as *const Node<K, V> as *const u8);
            }
        }
    }

    /// True if `key` is present. O(1) expected; never rehashes.
    #[inline]
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.get_key_value(key).is_some()
    }

    /// The value for `key`, mutably. Performs one rehash step. O(1) expected.
    #[inline]
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.step();
        if self.is_empty() {
            return None;
        }
        let hash = self.hash_of(key);
        self.find_mut(hash, key).map(|node| &mut node.value)
    }

    /// Inserts or replaces. Returns the previous value if `key` was present
    /// (the stored key is kept, as in `HashMap`). Performs one rehash step
    /// and may start a growth rehash. O(1) expected.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.step();
        let hash = self.hash_of(&key);
        if let Some(node) = self.find_mut(hash, &key) {
            return Some(mem::replace(&mut node.value, value));
        }
        self.insert_new(hash, key, value);
        None
    }

    /// The value for `key`, inserting `make()` first if absent. Performs one
    /// rehash step. O(1) expected.
    pub fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        self.step();
        let hash = self.hash_of(&key);
        // Two walks of one short chain on a hit: returning the first walk's
        // borrow conditionally is rejected by today's borrow checker.
        if self.find(hash, &key).is_some() {
            // INVARIANT: found just above, with no mutation in between.
            let node = self.find_mut(hash, &key).expect("key found by find");
            return &mut node.value;
        }
        self.insert_new(hash, key, make())
    }

    fn insert_new(&mut self, hash: u64, key: K, value: V) -> &mut V {
        self.grow_if_needed();
        let table = if self.rehash_idx.is_some() { 1 } else { 0 };
        let node = Box::new(Node {
            next: None,
            key,
            value,
        });
        &mut self.tables[table].push(hash, node).value
    }

    /// Removes `key`, returning the stored key and value. Performs one rehash
    /// step and may start a shrink rehash. O(1) expected.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<(K, V)>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.step();
        if self.is_empty() {
            return None;
        }
        let hash = self.hash_of(key);
        let rehashing = self.rehash_idx.is_some();
        let [t0, t1] = &mut self.tables;
        let node = match t0.unlink(hash, key) {
            None if rehashing => t1.unlink(hash, key),
            found => found,
        }?;
        self.complete_rehash_if_drained();
        self.shrink_if_needed();
        let Node { key, value, .. } = *node;
        Some((key, value))
    }

    /// Keeps only the entries for which `keep` returns true. O(n); may start
    /// a shrink rehash.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        for table in &mut self.tables {
            for slot in table.buckets.iter_mut() {
                let mut link = slot.take();
                while let Some(mut node) = link {
                    link = node.next.take();
                    if keep(&node.key, &mut node.value) {
                        node.next = slot.take();
                        *slot = Some(node);
                    } else {
                        table.used -= 1;
                    }
                }
            }
        }
        self.complete_rehash_if_drained();
        self.shrink_if_needed();
    }
}

impl<K, V, S> Dict<K, V, S> {
    /// A uniformly random entry, like Redis's `dictGetFairRandomKey`: samples
    /// up to 15 entries from random consecutive buckets and picks one of
    /// them, which is fairer than picking a random bucket (that favours
    /// entries in short chains). O(1) expected; `None` if empty.
    pub fn random_entry<R: Rng + ?Sized>(&self, rng: &mut R) -> Option<(&K, &V)> {
        if self.is_empty() {
            return None;
        }
        let mut picks: [Option<&Node<K, V>>; FAIR_SAMPLE] = [None; FAIR_SAMPLE];
        let mut picked = 0;
        self.sample_nodes(rng, FAIR_SAMPLE, |node| {
            picks[picked] = Some(node);
            picked += 1;
        });
        let node = if picked > 0 {
            picks[rng.gen_range(0..picked)]
        } else {
            self.random_node_slow(rng)
        }?;
        Some((&node.key, &node.value))
    }

    /// Redis's `dictGetRandomKey`: a random non-empty bucket, then a random
    /// entry of its chain. Random probes are bounded; then a linear walk
    /// from a random bucket, which must find an entry since `len() > 0`.
    fn random_node_slow<R: Rng + ?Sized>(&self, rng: &mut R) -> Option<&Node<K, V>> {
        let [t0, t1] = &self.tables;
        let start = self.rehash_idx.unwrap_or(0);
        let total = t0.size() + t1.size();
        if start >= total {
            return None;
        }
        let bucket = |h: usize| {
            if h >= t0.size() {
                &t1.buckets[h - t0.size()]
            } else {
                &t0.buckets[h]
            }
        };
        let mut head = None;
        for _ in 0..RANDOM_PROBES_MAX {
            head = bucket(rng.gen_range(start..total)).as_deref();
            if head.is_some() {
                break;
            }
        }
        if head.is_none() {
            let first = rng.gen_range(0..total);
            head = (0..total).find_map(|i| bucket((first + i) % total).as_deref());
        }
        let head = head?;
        let mut chain_len = 0;
        let mut cur = Some(head);
        while let Some(node) = cur {
            chain_len += 1;
            cur = node.next.as_deref();
        }
        let mut node = head;
        for _ in 0..rng.gen_range(0..chain_len) {
            node = node.next.as_deref()?;
        }
        Some(node)
    }

    /// Redis's `dictGetSomeKeys`: appends up to `count` keys to `out`, taken
    /// from consecutive buckets starting at a random one (jumping elsewhere
    /// after runs of empty buckets). Not uniformly random and possibly fewer
    /// than `count` (at most `10 * count` buckets are visited), but fast:
    /// meant for eviction and active-expiry sampling. Returns the number
    /// appended. As in Redis, a key may appear more than once when the walk
    /// wraps around or jumps back over buckets it already took.
    pub fn sample_keys<'a, R: Rng + ?Sized>(
        &'a self,
        rng: &mut R,
        count: usize,
        out: &mut Vec<&'a K>,
    ) -> usize {
        self.sample_nodes(rng, count, |node| out.push(&node.key))
    }

    /// Like [`Dict::sample_keys`], with values.
    pub fn sample_entries<'a, R: Rng + ?Sized>(
        &'a self,
        rng: &mut R,
        count: usize,
        out: &mut Vec<(&'a K, &'a V)>,
    ) -> usize {
        self.sample_nodes(rng, count, |node| out.push((&node.key, &node.value)))
    }

    fn sample_nodes<'a, R: Rng + ?Sized>(
        &'a self,
        rng: &mut R,
        count: usize,
        mut f: impl FnMut(&'a Node<K, V>),
    ) -> usize {
        let count = count.min(self.len());
        if count == 0 {
            return 0;
        }
        let rehash_idx = self.rehash_idx.unwrap_or(0);
        let tables = if self.rehash_idx.is_some() { 2 } else { 1 };
        let [t0, t1] = &self.tables;
        let mut max_mask = t0.mask();
        if tables == 2 && t1.mask() > max_mask {
            max_mask = t1.mask();
        }
        let mut i = (rng.gen::<u64>() as usize) & max_mask;
        let mut empty_run = 0;
        let mut stored = 0;
        let mut max_steps = count.saturating_mul(10);
        while stored < count && max_steps > 0 {
            max_steps -= 1;
            for (j, table) in self.tables[..tables].iter().enumerate() {
                if tables == 2 && j == 0 && i < rehash_idx {
                    // Buckets below rehash_idx in the old table are empty.
                    // If i is also past the new table, jump to the first
                    // bucket that may hold entries.
                    if i >= t1.size() {
                        i = rehash_idx;
                    } else {
                        continue;
                    }
                }
                if i >= table.size() {
                    continue;
                }
                match table.buckets[i].as_deref() {
                    None => {
                        empty_run += 1;
                        if empty_run >= 5 && empty_run > count {
                            i = (rng.gen::<u64>() as usize) & max_mask;
                            empty_run = 0;
                        }
                    }
                    Some(mut node) => {
                        empty_run = 0;
                        loop {
                            f(node);
                            stored += 1;
                            if stored == count {
                                return stored;
                            }
                            match node.next.as_deref() {
                                Some(next) => node = next,
                                None => break,
                            }
                        }
                    }
                }
            }
            i = (i + 1) & max_mask;
        }
        stored
    }
}

impl<K: fmt::Debug, V: fmt::Debug, S> fmt::Debug for Dict<K, V, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: Hash + Eq, V, S: BuildHasher> Extend<(K, V)> for Dict<K, V, S> {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        for (k, v) in iter {
            self.insert(k, v);
        }
    }
}

impl<K: Hash + Eq, V> FromIterator<(K, V)> for Dict<K, V, RandomState> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut dict = Dict::new();
        dict.extend(iter);
        dict
    }
}

impl<'a, K, V, S> IntoIterator for &'a Dict<K, V, S> {
    type Item = (&'a K, &'a V);
    type IntoIter = Iter<'a, K, V>;

    fn into_iter(self) -> Iter<'a, K, V> {
        self.iter()
    }
}

impl<'a, K, V, S> IntoIterator for &'a mut Dict<K, V, S> {
    type Item = (&'a K, &'a mut V);
    type IntoIter = IterMut<'a, K, V>;

    fn into_iter(self) -> IterMut<'a, K, V> {
        self.iter_mut()
    }
}

impl<K, V, S> IntoIterator for Dict<K, V, S> {
    type Item = (K, V);
    type IntoIter = Drain<K, V>;

    fn into_iter(self) -> Drain<K, V> {
        Drain::new(self.tables)
    }
}

/// Both tables' buckets, old table first.
type BucketsIter<'a, K, V> =
    std::iter::Chain<std::slice::Iter<'a, Link<K, V>>, std::slice::Iter<'a, Link<K, V>>>;
type BucketsIterMut<'a, K, V> =
    std::iter::Chain<std::slice::IterMut<'a, Link<K, V>>, std::slice::IterMut<'a, Link<K, V>>>;

/// Iterator over `(&K, &V)`; see [`Dict::iter`].
pub struct Iter<'a, K, V> {
    buckets: BucketsIter<'a, K, V>,
    cur: Option<&'a Node<K, V>>,
    remaining: usize,
}

impl<'a, K, V> Iterator for Iter<'a, K, V> {
    type Item = (&'a K, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(node) = self.cur {
                self.cur = node.next.as_deref();
                self.remaining = self.remaining.saturating_sub(1);
                return Some((&node.key, &node.value));
            }
            self.cur = self.buckets.next()?.as_deref();
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl<K, V> ExactSizeIterator for Iter<'_, K, V> {}
impl<K, V> FusedIterator for Iter<'_, K, V> {}

/// Iterator over `(&K, &mut V)`; see [`Dict::iter_mut`].
pub struct IterMut<'a, K, V> {
    buckets: BucketsIterMut<'a, K, V>,
    cur: Option<&'a mut Node<K, V>>,
    remaining: usize,
}

impl<'a, K, V> Iterator for IterMut<'a, K, V> {
    type Item = (&'a K, &'a mut V);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(node) = self.cur.take() {
                self.cur = node.next.as_deref_mut();
                self.remaining = self.remaining.saturating_sub(1);
                return Some((&node.key, &mut node.value));
            }
            self.cur = self.buckets.next()?.as_deref_mut();
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl<K, V> ExactSizeIterator for IterMut<'_, K, V> {}
impl<K, V> FusedIterator for IterMut<'_, K, V> {}

/// Where a [`Dict::walk`] resumes: a table, a bucket, and how many nodes
/// of its chain were visited. `WalkPos::default()` is the start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalkPos {
    table: usize,
    bucket: usize,
    skip: usize,
}

/// Owning iterator over all entries; see [`Dict::drain`]. Entries left when
/// it is dropped are dropped (iteratively).
pub struct Drain<K, V> {
    tables: [Table<K, V>; 2],
    table: usize,
    bucket: usize,
}

impl<K, V> Drain<K, V> {
    fn new(tables: [Table<K, V>; 2]) -> Self {
        Drain {
            tables,
            table: 0,
            bucket: 0,
        }
    }
}

impl<K, V> Iterator for Drain<K, V> {
    type Item = (K, V);

    fn next(&mut self) -> Option<(K, V)> {
        while let Some(table) = self.tables.get_mut(self.table) {
            match table.buckets.get_mut(self.bucket) {
                Some(slot) => match slot.take() {
                    Some(mut node) => {
                        *slot = node.next.take();
                        table.used -= 1;
                        let Node { key, value, .. } = *node;
                        return Some((key, value));
                    }
                    None => self.bucket += 1,
                },
                None => {
                    self.table += 1;
                    self.bucket = 0;
                }
            }
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let remaining = self.tables[0].used + self.tables[1].used;
        (remaining, Some(remaining))
    }
}

impl<K, V> ExactSizeIterator for Drain<K, V> {}
impl<K, V> FusedIterator for Drain<K, V> {}

#[cfg(test)]
mod tests;

/// A hint to the CPU to bring the cache line at `p` closer; no effect on
/// program state (any address is fine, even an invalid one).
#[inline(always)]
pub fn prefetch_ptr(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint: it never faults, even for an invalid
    // address, and changes no memory; SSE is part of the x86_64 baseline.
    #[allow(unused_unsafe)]
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
