//! [`Dict`]: the `HashMap`-like map over a [`RawDict`](super::RawDict) of
//! boxed `{ next, key, value }` nodes that the hash and set types (and the
//! TTL index) use: lookups by any borrowed form of the key, insertion,
//! removal, `retain`, `scan`, `walk`, sampling and iteration.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::mem;

use foldhash::fast::RandomState;
use rand::Rng;

use super::iter::{Drain, Iter, IterMut, WalkPos};
use super::node::Node;
use super::RawDict;

/// A chained hash table with linear hashing and Redis's `SCAN` guarantee;
/// see the module docs. A [`RawDict`](super::RawDict) of boxed `{ next, key, value }`
/// nodes.
pub struct Dict<K, V, S = RandomState> {
    pub(super) raw: RawDict<Box<Node<K, V>>, S>,
}

/// Lets the white-box tests reach the table's fields and private methods
/// as `dict.buckets`, `dict.used`, `dict.bucket_of(..)`.
#[cfg(test)]
impl<K, V, S> std::ops::Deref for Dict<K, V, S> {
    type Target = RawDict<Box<Node<K, V>>, S>;

    fn deref(&self) -> &Self::Target {
        &self.raw
    }
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

impl<K, V, S> Dict<K, V, S> {
    /// Bytes of one entry's node (one heap allocation per entry): the next
    /// link, the key and the value.
    pub const NODE_SIZE: usize = mem::size_of::<Node<K, V>>();

    /// An empty dict using `hasher`; allocates nothing until the first insert.
    pub fn with_hasher(hasher: S) -> Self {
        Dict {
            raw: RawDict::with_hasher(hasher),
        }
    }

    /// An empty dict using `hasher`, with room for `capacity` entries.
    pub fn with_capacity_and_hasher(capacity: usize, hasher: S) -> Self {
        Dict {
            raw: RawDict::with_capacity_and_hasher(capacity, hasher),
        }
    }

    /// Number of entries. O(1).
    #[inline]
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// True if there are no entries. O(1).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// Bucket count (for `INFO`/`DEBUG HTSTATS`).
    #[inline]
    pub fn buckets(&self) -> usize {
        self.raw.buckets()
    }

    /// True while a round of splits is under way (the bucket count is not
    /// a power of two): the state Redis calls rehashing.
    #[inline]
    pub fn is_rehashing(&self) -> bool {
        self.raw.is_rehashing()
    }

    /// Rough memory used by the dict itself: the handle, the buckets in
    /// use and the nodes (not counting heap memory owned by keys and
    /// values, nor allocator overhead).
    pub fn allocated_bytes(&self) -> usize {
        mem::size_of::<Self>()
            + self.buckets() * mem::size_of::<Option<Box<Node<K, V>>>>()
            + self.len() * mem::size_of::<Node<K, V>>()
    }

    /// The hasher.
    pub fn hasher(&self) -> &S {
        self.raw.hasher()
    }

    /// Removes every entry and frees the buckets. O(n).
    pub fn clear(&mut self) {
        self.raw.clear();
    }

    /// Removes every entry at once and returns them as an owning iterator;
    /// the dict is empty (and unallocated) right away, and entries not
    /// consumed are dropped with the iterator. Lets a caller free a large
    /// dict elsewhere (lazy free) or in bounded batches.
    pub fn drain(&mut self) -> Drain<K, V> {
        Drain {
            raw: self.raw.drain(),
        }
    }

    /// Iterates over all entries in no particular order. Each entry once.
    pub fn iter(&self) -> Iter<'_, K, V> {
        Iter {
            raw: self.raw.iter(),
        }
    }

    /// Resumable walk: visits the entries from `pos` on, in [`Dict::iter`]'s
    /// order, calling `f` on each until it returns false (that entry counts
    /// as visited); `pos` is left just after the last entry visited. True
    /// when the walk ran to the end (a walk stopped on the last entry says
    /// false: callers that know the count need not call again). Each entry
    /// is visited exactly once over a series of calls, provided the dict is
    /// not changed in between (no insert or remove: the position is a
    /// bucket and a place in its chain). Resuming costs the skipped part of
    /// one chain. A snapshot writes a big hash or set this way, a slice at
    /// a time.
    pub fn walk(&self, pos: &mut WalkPos, mut f: impl FnMut(&K, &V) -> bool) -> bool {
        self.raw.walk(pos, |node| f(&node.key, &node.value))
    }

    /// Iterates over all entries with mutable values, in no particular order.
    pub fn iter_mut(&mut self) -> IterMut<'_, K, V> {
        IterMut {
            raw: self.raw.iter_mut(),
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

    /// Redis's `dictScan`: calls `f` for the entries of the bucket(s) at
    /// `cursor` and returns the next cursor, 0 when the scan is complete.
    /// Start with 0. Every entry present for the whole scan is visited at
    /// least once, however the dict grows or shrinks between calls; entries
    /// may be visited more than once. The cursor's bits are incremented in
    /// reverse order, so that covering all buckets of one size also covers
    /// all buckets of any other size. Cost per call: the entries of one
    /// bucket, or of a split bucket's two halves.
    pub fn scan(&self, cursor: u64, mut f: impl FnMut(&K, &V)) -> u64 {
        self.raw.scan(cursor, |node| f(&node.key, &node.value))
    }

    /// [`Dict::scan`] with mutable access to the values: same cursor, same
    /// guarantee (every entry present for the whole scan is visited at least
    /// once), so a caller that must act on each entry exactly once marks the
    /// entries it has handled.
    pub fn scan_mut(&mut self, cursor: u64, mut f: impl FnMut(&K, &mut V)) -> u64 {
        self.raw.scan_mut(cursor, |node| {
            let node = &mut **node;
            f(&node.key, &mut node.value)
        })
    }
}

impl<K, V, S> Dict<K, V, S>
where
    K: Hash + Eq,
    S: BuildHasher,
{
    #[inline]
    fn hash_of<Q: ?Sized + Hash>(&self, key: &Q) -> u64 {
        self.raw.hash_of(key)
    }

    /// Shrink work owed (removals shrink as they go, so there is rarely
    /// any): merges up to `max_buckets` buckets. Returns true if more work
    /// remains. Meant for the server's cron.
    pub fn rehash_step(&mut self, max_buckets: usize) -> bool {
        self.raw.rehash_step(max_buckets)
    }

    /// The value for `key`. O(1) expected.
    #[inline]
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.raw.get(key).map(|node| &node.value)
    }

    /// The stored key and value for `key`. O(1) expected.
    #[inline]
    pub fn get_key_value<Q>(&self, key: &Q) -> Option<(&K, &V)>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.raw.get(key).map(|node| (&node.key, &node.value))
    }

    /// The stored key and the value for `key`, the value mutably.
    #[inline]
    pub fn get_key_value_mut<Q>(&mut self, key: &Q) -> Option<(&K, &mut V)>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.raw.get_mut(key).map(|node| {
            let node = &mut **node;
            (&node.key, &mut node.value)
        })
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
        self.raw.prefetch(self.hash_of(key), stage);
    }

    /// True if `key` is present. O(1) expected.
    #[inline]
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.get_key_value(key).is_some()
    }

    /// The value for `key`, mutably. O(1) expected.
    #[inline]
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.raw.get_mut(key).map(|node| &mut node.value)
    }

    /// Inserts or replaces. Returns the previous value if `key` was present
    /// (the stored key is kept, as in `HashMap`). May split one bucket.
    /// O(1) expected.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let hash = self.hash_of(&key);
        if let Some(node) = self.raw.find_mut(hash, &key) {
            return Some(mem::replace(&mut node.value, value));
        }
        self.insert_new(hash, key, value);
        None
    }

    /// The value for `key`, inserting `make()` first if absent. May split
    /// one bucket. O(1) expected.
    pub fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        let hash = self.hash_of(&key);
        // Two walks of one short chain on a hit: returning the first walk's
        // borrow conditionally is rejected by today's borrow checker.
        if self.raw.find(hash, &key).is_some() {
            // INVARIANT: found just above, with no mutation in between.
            let node = self.raw.find_mut(hash, &key).expect("key found by find");
            return &mut node.value;
        }
        self.insert_new(hash, key, make())
    }

    #[inline]
    fn insert_new(&mut self, hash: u64, key: K, value: V) -> &mut V {
        let node = Box::new(Node {
            next: None,
            key,
            value,
        });
        &mut self.raw.insert_new(hash, node).value
    }

    /// Removes `key`, returning the stored key and value. May merge a few
    /// buckets. O(1) expected.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<(K, V)>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        let Node { key, value, .. } = *self.raw.remove(key)?;
        Some((key, value))
    }

    /// Keeps only the entries for which `keep` returns true. O(n); shrinks
    /// the table as far as the removals allow.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        self.raw.retain(|node| {
            let node = &mut **node;
            keep(&node.key, &mut node.value)
        });
    }
}

impl<K, V, S> Dict<K, V, S> {
    /// A uniformly random entry, like Redis's `dictGetFairRandomKey`: samples
    /// up to 15 entries from random consecutive buckets and picks one of
    /// them, which is fairer than picking a random bucket (that favours
    /// entries in short chains). O(1) expected; `None` if empty.
    pub fn random_entry<R: Rng + ?Sized>(&self, rng: &mut R) -> Option<(&K, &V)> {
        self.raw
            .random_node(rng)
            .map(|node| (&node.key, &node.value))
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
        self.raw
            .sample_nodes(rng, count, |node| out.push(&node.key))
    }

    /// Like [`Dict::sample_keys`], with values.
    pub fn sample_entries<'a, R: Rng + ?Sized>(
        &'a self,
        rng: &mut R,
        count: usize,
        out: &mut Vec<(&'a K, &'a V)>,
    ) -> usize {
        self.raw
            .sample_nodes(rng, count, |node| out.push((&node.key, &node.value)))
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

    fn into_iter(mut self) -> Drain<K, V> {
        self.drain()
    }
}
