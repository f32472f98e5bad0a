//! `Dict`: a chained hash table that grows and shrinks one bucket at a
//! time (linear hashing), with Redis's `SCAN` guarantee.
//!
//! Owns: the keyspace's and the hash/set types' main index. It is a
//! data structure only: it knows nothing of expiry, eviction or replies.
//!
//! # `RawDict` and `Dict`
//!
//! * [`RawDict`]`<N, S>` is the table machinery: buckets, segments, splits
//!   and merges, lookup, insertion, removal, `scan`, `walk`, iteration,
//!   sampling. It stores **owning node handles** `N` ([`ChainNode`]: a thin
//!   pointer to one node that holds the next link and the key, so an
//!   `Option<N>` is one pointer) and knows a node only through the trait:
//!   its link, its key (hashed again by a split, compared by a lookup) and
//!   an address to prefetch. Whatever else a node holds is the caller's.
//!   It is a building block for trusted code in the workspace: the `&mut N`
//!   it hands out may change a node's payload, never its key or its link.
//! * [`Dict`]`<K, V, S>` is the map everyone uses: a `RawDict` of boxed
//!   nodes `Box<Node { next, key, value }>` with a `HashMap`-like API. A
//!   caller that needs another node layout (the keyspace's single
//!   allocation holding the link, metadata, key bytes and value bytes)
//!   builds on `RawDict` with its own [`ChainNode`] instead.
//!
//! # Module map
//!
//! This file holds the node traits ([`ChainNode`], [`ChainNodeMut`]), the
//! constants and [`RawDict`]'s table operations; `buckets` the segmented
//! bucket array, its chain edits and the cursor arithmetic; `map` the
//! [`Dict`] API; `iter` every iterator and [`WalkPos`]. The white-box
//! tests (`tests.rs`) check the invariants below across all of them.
//!
//! # Layout
//!
//! One bucket array of `n = 2^level + split` buckets; each bucket is a
//! singly linked chain of nodes (for `Dict`, boxed `{ next, key, value }`).
//! A key of hash `h` lives in bucket `h mod 2^level`, unless that bucket is
//! below `split` (it has been split this round), then in bucket
//! `h mod 2^(level+1)`.
//!
//! * **Growth** splits one bucket per insert past the load factor: bucket
//!   `split`'s nodes whose hash has bit `level` set move to the new bucket
//!   `2^level + split`, and `split` advances; when it reaches `2^level`,
//!   `level` goes up and `split` restarts at 0. **Shrinking** is the exact
//!   reverse (the last bucket merges into its sibling), a few buckets per
//!   removal while the table is too sparse.
//! * The array is a list of **segments** that never move: segment 0 holds
//!   buckets `[0, INITIAL_SIZE)`, segment `k >= 1` buckets
//!   `[INITIAL_SIZE << (k-1), INITIAL_SIZE << k)`, so bucket `i`'s segment
//!   and offset come from `i`'s highest bit. A segment is allocated zeroed
//!   (`calloc`: fresh pages for a big one, faulted in only as splits reach
//!   them) when the first bucket in it is split into, and freed once the
//!   table has shrunk to 3/4 of the segment's start (hysteresis: a table
//!   hovering at a boundary does not allocate and free it repeatedly).
//!   Zeroed memory is a valid array of empty buckets because an all-zero
//!   `Option<N>` is `None`: the one promise of [`ChainNode`] that the
//!   table's soundness rests on, hence an `unsafe` trait.
//!
//! # Invariants
//!
//! * `n == 0` (nothing allocated) or `n >= INITIAL_SIZE`, with `level >=
//!   log2(INITIAL_SIZE)` and `split < 2^level`; every allocated bucket at
//!   or past `n` is empty; the segments cover at least `[0, n)`.
//! * Every node sits in the bucket its hash addresses (above); `used`
//!   counts the nodes; keys are unique.
//! * After an insert, `used <= n * MAX_LOAD_FACTOR`; a table shrinks while
//!   `used * SHRINK_FILL_DENOMINATOR < n` (and `n > INITIAL_SIZE`).
//! * No call does more than O(1) expected work besides `clear`, `drain`,
//!   `retain`, iteration, `scan`'s per-call bucket walk and `Drop`: one
//!   split per insert, at most [`SHRINK_STEP`] merges per removal.
//! * Chains are dropped iteratively (see `Seg`'s `Drop`), so a
//!   pathological chain cannot overflow the stack. A node the table hands
//!   back (`remove`, `drain`, `retain`'s rejects) has an empty link, so
//!   dropping it drops one node.
//!
//! A `RawDict` caller that breaks the rules above (changes a key or a link
//! through a `&mut N`, inserts a key already present, or passes a hash that
//! is not `hash_of(key)`) gets a table that misbehaves (lookups miss, nodes
//! are visited twice or leak), never undefined behaviour: the table's
//! `unsafe` is only in allocating and freeing segments.
//!
//! # Why this design
//!
//! * **Linear hashing, not doubling**: Redis (and this dict until it was
//!   measured) grows by allocating a second array of twice the size and
//!   migrating into it incrementally: both arrays are live for the whole
//!   migration, 24 bytes of buckets per 8 M entries instead of 8. At 10 M
//!   keys on 2 shards `bench/memory.sh` caught both tables mid-migration,
//!   19.2 bytes of buckets per key; linear hashing keeps it at 8 (load
//!   factor 1 exactly), with no migration state and no cron work. The
//!   split (and merge) order keeps Redis's `SCAN` guarantee: state
//!   `(level, split)` is exactly Redis's rehash state from `2^level` to
//!   `2^(level+1)` buckets with `rehashidx == split` (a split bucket is a
//!   migrated one), so `scan` is Redis's `dictScan` on that state.
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
//!   cost). The price: a split hashes each moved key again (foldhash on
//!   a short key is a few nanoseconds, next to the cache miss of touching
//!   the node, which a split pays anyway), and a chain walk compares keys
//!   directly (chains average one node at load factor 1, and slice
//!   comparison checks the length first). Each lookup still hashes the key
//!   exactly once (`insert` uses the same hash for its lookup and its
//!   insertion).
//! * **Boxed nodes** (one allocation per entry, as Redis's `dictEntry`) keep
//!   a split a pointer move and need no `unsafe` in `Dict`. A slab of nodes
//!   with `u32` links would save memory and is the next step if profiles
//!   say so.
//! * **Generic over the node handle, not over a node trait object**: the
//!   machinery is monomorphised per node type and `ChainNode`'s methods on
//!   a `Box` are field accesses, so `Dict` compiles to about the code of
//!   the table that knew only boxed nodes (callgrind: as many instructions
//!   per lookup, insert or removal; a walk of a chain one or two more per
//!   node, since it holds where each node's handle is, a `&N`, rather than
//!   the node's address). A variable-size node (key and value bytes inline,
//!   one allocation per key) reuses every part of it: the growth, the
//!   `SCAN` guarantee, sampling, the iterative drop.
//!   Mutable iteration yields a node's payload apart from its link
//!   ([`ChainNodeMut`]): an iterator of `&mut N` would let the caller
//!   unlink (and free) a node the iterator is about to visit.
//! * **Hashing**: `foldhash`'s `RandomState` is seeded randomly per process
//!   (and per table), so bucket placement is unpredictable to clients (hash
//!   flooding), and it is much faster than SipHash on short keys. Lookups
//!   take any borrowed form `Q` of the key (`Dict<SmallBytes, _>` is queried
//!   with `&[u8]`), which requires `Hash` of `K` and `Q` to agree, as for
//!   `std::collections::HashMap`.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::mem;

use foldhash::fast::RandomState;
use rand::Rng;

mod buckets;
mod iter;
mod map;

pub use iter::{Drain, Iter, IterMut, RawDrain, RawIter, RawIterMut, WalkPos};
pub use map::Dict;

/// Size of the first table, and the smallest a table shrinks to.
pub const INITIAL_SIZE: usize = 4;
const INITIAL_LOG2: u32 = INITIAL_SIZE.trailing_zeros();
const _: () = assert!(INITIAL_SIZE.is_power_of_two() && INITIAL_SIZE >= 2);

/// A table grows when it holds this many entries per bucket (Redis's 1).
/// At 2 the bucket array cost 4..8 bytes per entry instead of 8..16 (-4 to
/// -7 bytes per small key in `bench/memory.sh`), but SET at pipeline 16
/// took about 10 % more server CPU per op (chains of 1..2 nodes instead of
/// 0.5..1; side by side, same build otherwise), so it stays at 1.
pub const MAX_LOAD_FACTOR: usize = 1;

/// A table shrinks while fewer than `1 / SHRINK_FILL_DENOMINATOR` of its
/// buckets' worth of entries remain: a shrunk table holds 8..16 bytes of
/// buckets per entry, as Redis's does after its shrink rehash.
pub const SHRINK_FILL_DENOMINATOR: usize = 2;

/// Merges a removal may do: twice what one removal can owe (each lowers
/// the bucket count the fill allows by `SHRINK_FILL_DENOMINATOR`), so a
/// shrink keeps up with any stream of removals.
pub const SHRINK_STEP: usize = 2 * SHRINK_FILL_DENOMINATOR;

/// Entries sampled by `random_entry` before picking one (Redis's
/// `GETFAIR_NUM_ENTRIES`).
const FAIR_SAMPLE: usize = 15;

/// Random bucket probes before `random_entry` falls back to a linear walk.
const RANDOM_PROBES_MAX: usize = 1024;

/// An owning handle to one chain node: a thin pointer whose `Option` is
/// pointer-sized and all-zero for `None`. A [`RawDict`] stores `Option<N>`
/// in its buckets and in each node's link.
///
/// The key is hashed (with the table's hasher) when a split moves the node
/// and compared when a lookup walks its chain; it needs `Hash + Eq` for
/// those methods only, so that a type like `Dict<K, V>` can exist for any
/// `K`, as `HashMap` can.
///
/// # Safety
///
/// `Option<Self>` must have the size of a pointer and the all-zero bit
/// pattern must be `None` (segments are allocated zeroed): a
/// `#[repr(transparent)]` wrapper around a `Box`, a `NonNull` or a
/// reference qualifies (the null-pointer optimisation is guaranteed for
/// those). `next`/`next_mut` must return the link stored in the node, and
/// `key` must not change while the node is in a table (breaking these two
/// makes the table misbehave, as a wrong `Hash` does a `HashMap`; its
/// memory safety rests on the first rule only).
pub unsafe trait ChainNode: Sized {
    /// The key a lookup compares (`Dict`: `K`; a byte-string node: `[u8]`).
    type Key: ?Sized;

    /// The link to the next node of the chain.
    fn next(&self) -> &Option<Self>;

    /// The link to the next node of the chain, mutably.
    fn next_mut(&mut self) -> &mut Option<Self>;

    /// The node's key.
    fn key(&self) -> &Self::Key;

    /// An address in the node for [`RawDict::prefetch`] to load ahead of a
    /// lookup: where the node starts, computed without reading it (a read
    /// would wait for the very miss the prefetch is meant to overlap). The
    /// default, the key's address, reads nothing for a key stored at a
    /// fixed place in the node; a node whose key's place depends on the
    /// node's contents overrides it.
    #[inline]
    fn prefetch_addr(&self) -> *const u8 {
        self.key() as *const Self::Key as *const u8
    }
}

/// A [`ChainNode`] that can lend its payload (whatever a caller may change)
/// apart from its link, so that [`RawDict::iter_mut`] can hold the link to
/// the next node while the caller holds the payload of this one.
pub trait ChainNodeMut: ChainNode {
    /// The mutable view of a node (`Dict`: `(&K, &mut V)`); it must not
    /// give access to the link.
    type PayloadMut<'a>
    where
        Self: 'a;

    /// The node's link (as [`ChainNode::next_mut`]) and its payload.
    fn link_and_payload_mut(&mut self) -> (&mut Option<Self>, Self::PayloadMut<'_>);
}

/// `Dict`'s node: one heap allocation per entry. `pub` in a private module:
/// unnameable outside this one, but public enough to appear in the `Deref`
/// the white-box tests use to reach a `Dict`'s `RawDict`.
mod node {
    pub struct Node<K, V> {
        pub(super) next: Option<Box<Node<K, V>>>,
        pub(super) key: K,
        pub(super) value: V,
    }
}
use buckets::{
    locate, put_link, put_node, scan_buckets, seg_len, seg_start, size_for, BucketArray, Seg,
};
use node::Node;

// SAFETY: `Option<Box<_>>` is pointer-sized and its `None` is the null
// pointer (the null-pointer optimisation is guaranteed for `Box`); the link
// is the node's `next` field and the key its `key` field, which `Dict`
// never changes while the node is in the table.
unsafe impl<K, V> ChainNode for Box<Node<K, V>> {
    type Key = K;

    #[inline]
    fn next(&self) -> &Option<Self> {
        &self.next
    }

    #[inline]
    fn next_mut(&mut self) -> &mut Option<Self> {
        &mut self.next
    }

    #[inline]
    fn key(&self) -> &K {
        &self.key
    }

    #[inline]
    fn prefetch_addr(&self) -> *const u8 {
        &**self as *const Node<K, V> as *const u8
    }
}

impl<K, V> ChainNodeMut for Box<Node<K, V>> {
    type PayloadMut<'a>
        = (&'a K, &'a mut V)
    where
        Self: 'a;

    #[inline]
    fn link_and_payload_mut(&mut self) -> (&mut Option<Self>, (&K, &mut V)) {
        let node = &mut **self;
        (&mut node.next, (&node.key, &mut node.value))
    }
}

/// The table machinery of [`Dict`] over owning node handles `N` (see the
/// module docs): linear hashing over segments, Redis's `SCAN` guarantee.
///
/// The table owns its nodes: `remove`, `drain` and `retain` hand them back
/// unlinked (link `None`), `clear` and `Drop` drop them. Methods that give
/// out a `&mut N` let the caller change the node's payload; the caller must
/// not change its key or its link (see [`ChainNode`]). Lookups take the
/// key's hash from the caller where it says `hash`: it must be
/// [`RawDict::hash_of`] of the key.
pub struct RawDict<N: ChainNode, S = RandomState> {
    buckets: BucketArray<N>,
    /// The round's base size is `2^level` (0 while nothing is allocated).
    level: u32,
    /// Buckets of this round split so far.
    split: usize,
    used: usize,
    hasher: S,
}

impl<N: ChainNode> RawDict<N, RandomState> {
    /// An empty table; allocates nothing until the first insert.
    pub fn new() -> Self {
        Self::with_hasher(RandomState::default())
    }
}

impl<N: ChainNode, S: Default> Default for RawDict<N, S> {
    fn default() -> Self {
        Self::with_hasher(S::default())
    }
}

impl<N: ChainNode, S> RawDict<N, S> {
    /// An empty table using `hasher`; allocates nothing until the first
    /// insert.
    pub fn with_hasher(hasher: S) -> Self {
        RawDict {
            buckets: BucketArray { segs: Vec::new() },
            level: 0,
            split: 0,
            used: 0,
            hasher,
        }
    }

    /// An empty table using `hasher`, with room for `capacity` nodes.
    pub fn with_capacity_and_hasher(capacity: usize, hasher: S) -> Self {
        let mut dict = Self::with_hasher(hasher);
        if capacity > 0 {
            let level = size_for(capacity).trailing_zeros();
            dict.buckets.segs = (0..=(level - INITIAL_LOG2) as usize)
                .map(|k| Seg::zeroed(seg_len(k)))
                .collect();
            dict.level = level;
        }
        dict
    }

    /// Number of nodes. O(1).
    #[inline]
    pub fn len(&self) -> usize {
        self.used
    }

    /// True if there are no nodes. O(1).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.used == 0
    }

    /// Bucket count (for `INFO`/`DEBUG HTSTATS`).
    #[inline]
    pub fn buckets(&self) -> usize {
        if self.buckets.segs.is_empty() {
            0
        } else {
            (1 << self.level) + self.split
        }
    }

    /// True while a round of splits is under way (the bucket count is not
    /// a power of two): the state Redis calls rehashing.
    #[inline]
    pub fn is_rehashing(&self) -> bool {
        self.split != 0
    }

    /// The hasher.
    pub fn hasher(&self) -> &S {
        &self.hasher
    }

    /// The bucket a key of hash `hash` lives in; only for an allocated
    /// table.
    #[inline]
    fn bucket_of(&self, hash: u64) -> usize {
        let h = hash as usize;
        let low = h & ((1usize << self.level) - 1);
        if low < self.split {
            h & ((2usize << self.level) - 1)
        } else {
            low
        }
    }

    /// The node whose key is `key`, `hash` being its hash. O(1) expected.
    // Always inlined: the boxed-only table's private `find` was inlined
    // into its lookups by the optimiser; left to `#[inline]`, this one
    // stayed a call of its own under `get` for `Dict<SmallBytes, _>`
    // (callgrind: 6 % more instructions per lookup).
    #[inline(always)]
    pub fn find<Q>(&self, hash: u64, key: &Q) -> Option<&N>
    where
        N::Key: Borrow<Q>,
        Q: ?Sized + Eq,
    {
        if self.is_empty() {
            return None;
        }
        let mut link = self.buckets.slot(self.bucket_of(hash));
        while let Some(node) = link {
            if node.key().borrow() == key {
                return Some(node);
            }
            link = node.next();
        }
        None
    }

    /// [`RawDict::find`], mutably (the payload only: see the type's docs).
    #[inline(always)] // As `find`.
    pub fn find_mut<Q>(&mut self, hash: u64, key: &Q) -> Option<&mut N>
    where
        N::Key: Borrow<Q>,
        Q: ?Sized + Eq,
    {
        if self.is_empty() {
            return None;
        }
        let i = self.bucket_of(hash);
        let mut link = self.buckets.slot_mut(i);
        while let Some(node) = link {
            if node.key().borrow() == key {
                return Some(node);
            }
            link = node.next_mut();
        }
        None
    }

    /// Replaces the node whose key is `key` (`hash` being its hash) with
    /// `f(node)`, in the same place of the same chain: `f` gets the node
    /// unlinked (link `None`) and must return a node with an equal key and
    /// an empty link, which takes over the old node's link. For a node that
    /// must be reallocated (a different size) without a remove and an
    /// insert. Returns the new node, or `None` (and `f` is not called) if
    /// the key is absent. If `f` panics, the table is left without the
    /// node. O(1) expected.
    pub fn replace_node<Q>(&mut self, hash: u64, key: &Q, f: impl FnOnce(N) -> N) -> Option<&mut N>
    where
        N::Key: Borrow<Q>,
        Q: ?Sized + Eq,
    {
        if self.is_empty() {
            return None;
        }
        let i = self.bucket_of(hash);
        let (link, old) = self.buckets.unlink(i, key)?;
        // The table is whole without the node while `f` runs.
        self.used -= 1;
        let new = f(old);
        debug_assert!(new.key().borrow() == key, "replace_node changed the key");
        let rest = link.take();
        let new = put_node(link, new);
        put_link(new.next_mut(), rest);
        self.used += 1;
        Some(new)
    }

    /// [`RawDict::find_mut`], first replacing the node found with `f(node)`
    /// (as [`RawDict::replace_node`] does) when `stale(node)`: one walk
    /// of the chain either way, where `find` + `replace_node` + `find_mut`
    /// took three.
    #[inline]
    pub fn find_mut_replacing<Q>(
        &mut self,
        hash: u64,
        key: &Q,
        stale: impl FnOnce(&N) -> bool,
        f: impl FnOnce(N) -> N,
    ) -> Option<&mut N>
    where
        N::Key: Borrow<Q>,
        Q: ?Sized + Eq,
    {
        if self.is_empty() {
            return None;
        }
        let i = self.bucket_of(hash);
        let link = self.buckets.link_mut(i, key)?;
        if stale(link.as_ref()?) {
            // Unlinked as `replace_node` does: should `f` panic, the table
            // is whole without the node.
            let mut old = link.take()?;
            put_link(link, old.next_mut().take());
            self.used -= 1;
            let new = f(old);
            debug_assert!(
                new.key().borrow() == key,
                "find_mut_replacing changed the key"
            );
            let rest = link.take();
            let new = put_node(link, new);
            put_link(new.next_mut(), rest);
            self.used += 1;
            return Some(new);
        }
        link.as_mut()
    }

    /// Starts loading what a lookup of a key of hash `hash` will touch,
    /// without waiting for it: stage 0 the bucket slot, stage 1 (once
    /// stage 0 had time to land) the first node of the chain. Issued over
    /// a batch of keys before the batch runs, the cache misses of the whole
    /// batch overlap instead of being paid one after another.
    #[inline]
    pub fn prefetch(&self, hash: u64, stage: u8) {
        if self.is_empty() {
            return;
        }
        let slot = self.buckets.slot(self.bucket_of(hash));
        if stage == 0 {
            prefetch_ptr(slot as *const Option<N> as *const u8);
        } else if let Some(node) = slot.as_ref() {
            prefetch_ptr(node.prefetch_addr());
        }
    }

    /// Removes every node and frees the buckets. O(n).
    pub fn clear(&mut self) {
        drop(self.drain());
    }

    /// Removes every node at once and returns them as an owning iterator;
    /// the table is empty (and unallocated) right away, and nodes not
    /// consumed are dropped with the iterator. Lets a caller free a large
    /// table elsewhere (lazy free) or in bounded batches.
    pub fn drain(&mut self) -> RawDrain<N> {
        let segs = mem::take(&mut self.buckets.segs);
        let used = mem::take(&mut self.used);
        self.level = 0;
        self.split = 0;
        RawDrain::new(segs, used)
    }

    /// Iterates over all nodes in no particular order. Each node once.
    pub fn iter(&self) -> RawIter<'_, N> {
        RawIter {
            segs: self.buckets.segs.iter(),
            buckets: [].iter(),
            // A promoted constant: `'static`, no allocation.
            link: &None,
            remaining: self.len(),
        }
    }

    /// Iterates over all nodes' payloads (see [`ChainNodeMut`]), in
    /// [`RawDict::iter`]'s order.
    pub fn iter_mut(&mut self) -> RawIterMut<'_, N>
    where
        N: ChainNodeMut,
    {
        RawIterMut {
            remaining: self.len(),
            segs: self.buckets.segs.iter_mut(),
            buckets: [].iter_mut(),
            cur: None,
        }
    }

    /// Calls `f` on every node, mutably (the payload only: see the type's
    /// docs), in [`RawDict::iter`]'s order.
    pub fn for_each_mut(&mut self, mut f: impl FnMut(&mut N)) {
        for seg in &mut self.buckets.segs {
            for slot in seg.buckets.iter_mut() {
                let mut link = slot;
                while let Some(node) = link {
                    f(node);
                    link = node.next_mut();
                }
            }
        }
    }

    /// Resumable walk: visits the nodes from `pos` on, in [`RawDict::iter`]'s
    /// order, calling `f` on each until it returns false (that node counts
    /// as visited); `pos` is left just after the last node visited. True
    /// when the walk ran to the end (a walk stopped on the last node says
    /// false: callers that know the count need not call again). Each node
    /// is visited exactly once over a series of calls, provided the table
    /// is not changed in between (no insert or remove: the position is a
    /// bucket and a place in its chain). Resuming costs the skipped part of
    /// one chain.
    pub fn walk(&self, pos: &mut WalkPos, mut f: impl FnMut(&N) -> bool) -> bool {
        let n = self.buckets();
        while pos.bucket < n {
            let mut link = self.buckets.slot(pos.bucket);
            for _ in 0..pos.skip {
                match link {
                    Some(node) => link = node.next(),
                    None => break,
                }
            }
            while let Some(node) = link {
                link = node.next();
                pos.skip += 1;
                if !f(node) {
                    return false;
                }
            }
            pos.bucket += 1;
            pos.skip = 0;
        }
        true
    }

    /// Undoes the last split: the last bucket's chain joins its sibling's,
    /// and segments the table has shrunk well below are freed. The caller
    /// checks that the table is bigger than `INITIAL_SIZE`.
    fn merge_one(&mut self) {
        debug_assert!(self.buckets() > INITIAL_SIZE);
        if self.split == 0 {
            self.level -= 1;
            self.split = 1 << self.level;
        }
        self.split -= 1;
        let dst = self.split;
        let mut link = self.buckets.slot_mut(dst + (1 << self.level)).take();
        while let Some(mut node) = link {
            link = node.next_mut().take();
            self.buckets.push(dst, node);
        }
        let n = self.buckets();
        while self.buckets.segs.len() > 1 {
            let last = self.buckets.segs.len() - 1;
            let start = seg_start(last);
            if n > start - start / 4 {
                break;
            }
            if let Some(mut seg) = self.buckets.segs.pop() {
                seg.free_empty();
            }
        }
    }

    /// True while the table is sparser than the shrink threshold.
    #[inline]
    fn too_sparse(&self) -> bool {
        let n = self.buckets();
        n > INITIAL_SIZE && self.used * SHRINK_FILL_DENOMINATOR < n
    }

    /// Shrinks by at most `max` buckets; true if the table is still too
    /// sparse.
    fn shrink(&mut self, max: usize) -> bool {
        for _ in 0..max {
            if !self.too_sparse() {
                return false;
            }
            self.merge_one();
        }
        self.too_sparse()
    }

    /// Shrink work owed (removals shrink as they go, so there is rarely
    /// any): merges up to `max_buckets` buckets. Returns true if more work
    /// remains. Meant for the server's cron.
    pub fn rehash_step(&mut self, max_buckets: usize) -> bool {
        self.shrink(max_buckets)
    }

    /// Keeps only the nodes for which `keep` returns true; the others are
    /// dropped (unlinked). O(n); shrinks the table as far as the removals
    /// allow.
    pub fn retain(&mut self, mut keep: impl FnMut(&mut N) -> bool) {
        for seg in &mut self.buckets.segs {
            for slot in seg.buckets.iter_mut() {
                let mut link = slot.take();
                while let Some(mut node) = link {
                    link = node.next_mut().take();
                    if keep(&mut node) {
                        let head = slot.take();
                        put_link(put_node(slot, node).next_mut(), head);
                    } else {
                        self.used -= 1;
                    }
                }
            }
        }
        self.shrink(usize::MAX);
    }

    /// Redis's `dictScan`: calls `f` for the nodes of the bucket(s) at
    /// `cursor` and returns the next cursor, 0 when the scan is complete.
    /// Start with 0. Every node present for the whole scan is visited at
    /// least once, however the table grows or shrinks between calls; nodes
    /// may be visited more than once. The cursor's bits are incremented in
    /// reverse order, so that covering all buckets of one size also covers
    /// all buckets of any other size. Cost per call: the nodes of one
    /// bucket, or of a split bucket's two halves.
    pub fn scan(&self, cursor: u64, mut f: impl FnMut(&N)) -> u64 {
        if self.is_empty() {
            return 0;
        }
        scan_buckets(self.level, self.split, cursor, |i| {
            let mut link = self.buckets.slot(i);
            while let Some(node) = link {
                // Before `f`: the compiler cannot tell that `f`'s writes
                // leave the link alone, and would read it again.
                link = node.next();
                f(node);
            }
        })
    }

    /// [`RawDict::scan`] with mutable access to the nodes (the payload
    /// only: see the type's docs): same cursor, same guarantee (every node
    /// present for the whole scan is visited at least once), so a caller
    /// that must act on each node exactly once marks the nodes it has
    /// handled.
    pub fn scan_mut(&mut self, cursor: u64, mut f: impl FnMut(&mut N)) -> u64 {
        if self.is_empty() {
            return 0;
        }
        let buckets = &mut self.buckets;
        scan_buckets(self.level, self.split, cursor, |i| {
            let mut link = buckets.slot_mut(i);
            while let Some(node) = link {
                f(node);
                link = node.next_mut();
            }
        })
    }

    /// A uniformly random node, like Redis's `dictGetFairRandomKey`: samples
    /// up to 15 nodes from random consecutive buckets and picks one of
    /// them, which is fairer than picking a random bucket (that favours
    /// nodes in short chains). O(1) expected; `None` if empty.
    pub fn random_node<R: Rng + ?Sized>(&self, rng: &mut R) -> Option<&N> {
        if self.is_empty() {
            return None;
        }
        let mut picks: [Option<&N>; FAIR_SAMPLE] = [None; FAIR_SAMPLE];
        let mut picked = 0;
        self.sample_nodes(rng, FAIR_SAMPLE, |node| {
            picks[picked] = Some(node);
            picked += 1;
        });
        if picked > 0 {
            picks[rng.gen_range(0..picked)]
        } else {
            self.random_node_slow(rng)
        }
    }

    /// Redis's `dictGetRandomKey`: a random non-empty bucket, then a random
    /// node of its chain. Random probes are bounded; then a linear walk
    /// from a random bucket, which must find a node since `len() > 0`.
    fn random_node_slow<R: Rng + ?Sized>(&self, rng: &mut R) -> Option<&N> {
        let n = self.buckets();
        if n == 0 {
            return None;
        }
        let mut head = None;
        for _ in 0..RANDOM_PROBES_MAX {
            head = self.buckets.slot(rng.gen_range(0..n)).as_ref();
            if head.is_some() {
                break;
            }
        }
        if head.is_none() {
            let first = rng.gen_range(0..n);
            head = (0..n).find_map(|i| self.buckets.slot((first + i) % n).as_ref());
        }
        let head = head?;
        let mut chain_len = 1;
        let mut link = head.next();
        while let Some(node) = link {
            chain_len += 1;
            link = node.next();
        }
        let mut node = head;
        for _ in 0..rng.gen_range(0..chain_len) {
            node = node.next().as_ref()?;
        }
        Some(node)
    }

    /// Redis's `dictGetSomeKeys`: calls `f` on up to `count` nodes, taken
    /// from consecutive buckets starting at a random one (jumping elsewhere
    /// after runs of empty buckets). Not uniformly random and possibly fewer
    /// than `count` (at most `10 * count` buckets are visited), but fast:
    /// meant for eviction and active-expiry sampling. Returns the number of
    /// calls. As in Redis, a node may come more than once when the walk
    /// wraps around or jumps back over buckets it already took.
    pub fn sample_nodes<'a, R: Rng + ?Sized>(
        &'a self,
        rng: &mut R,
        count: usize,
        mut f: impl FnMut(&'a N),
    ) -> usize {
        let count = count.min(self.len());
        if count == 0 {
            return 0;
        }
        let n = self.buckets();
        let mut i = rng.gen_range(0..n);
        let mut empty_run = 0;
        let mut stored = 0;
        let mut max_steps = count.saturating_mul(10);
        while stored < count && max_steps > 0 {
            max_steps -= 1;
            let mut link = self.buckets.slot(i);
            if link.is_none() {
                empty_run += 1;
                if empty_run >= 5 && empty_run > count {
                    i = rng.gen_range(0..n);
                    empty_run = 0;
                    continue;
                }
            } else {
                empty_run = 0;
                while let Some(node) = link {
                    link = node.next(); // Before `f`, as in `scan`.
                    f(node);
                    stored += 1;
                    if stored == count {
                        return stored;
                    }
                }
            }
            i = if i + 1 == n { 0 } else { i + 1 };
        }
        stored
    }
}

impl<N: ChainNode, S: BuildHasher> RawDict<N, S> {
    /// The hash of `key` (or of any borrowed form of a key, whose `Hash`
    /// agrees with the key's) with this table's hasher: what `find`,
    /// `insert_new` and the other methods taking a `hash` expect.
    #[inline]
    pub fn hash_of<Q: ?Sized + Hash>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The node whose key is `key`. O(1) expected.
    #[inline]
    pub fn get<Q>(&self, key: &Q) -> Option<&N>
    where
        N::Key: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        if self.is_empty() {
            return None;
        }
        self.find(self.hash_of(key), key)
    }

    /// The node whose key is `key`, mutably (the payload only: see the
    /// type's docs). O(1) expected.
    #[inline]
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut N>
    where
        N::Key: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        if self.is_empty() {
            return None;
        }
        let hash = self.hash_of(key);
        self.find_mut(hash, key)
    }

    /// Links `node` (whose link must be `None`) into the table, `hash`
    /// being its key's hash; the caller guarantees that the key is absent.
    /// May split one bucket. Returns the node in place. O(1) expected.
    pub fn insert_new(&mut self, hash: u64, node: N) -> &mut N
    where
        N::Key: Hash + Eq,
    {
        debug_assert!(node.next().is_none(), "insert_new's node has a link");
        debug_assert_eq!(hash, self.hash_of(node.key()), "insert_new's hash");
        debug_assert!(
            self.find(hash, node.key()).is_none(),
            "insert_new's key is present"
        );
        if self.buckets.segs.is_empty() {
            self.buckets.segs.push(Seg::zeroed(INITIAL_SIZE));
            self.level = INITIAL_LOG2;
            self.split = 0;
        } else if self.used >= self.buckets() * MAX_LOAD_FACTOR {
            self.split_one();
        }
        self.used += 1;
        let i = self.bucket_of(hash);
        self.buckets.push(i, node)
    }

    /// Removes the node whose key is `key` and returns it unlinked. May
    /// merge a few buckets. O(1) expected.
    #[inline]
    pub fn remove<Q>(&mut self, key: &Q) -> Option<N>
    where
        N::Key: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        if self.is_empty() {
            return None;
        }
        self.remove_hashed(self.hash_of(key), key)
    }

    /// [`RawDict::remove`] with the key's hash from the caller.
    pub fn remove_hashed<Q>(&mut self, hash: u64, key: &Q) -> Option<N>
    where
        N::Key: Borrow<Q>,
        Q: ?Sized + Eq,
    {
        if self.is_empty() {
            return None;
        }
        let i = self.bucket_of(hash);
        let (_, node) = self.buckets.unlink(i, key)?;
        self.used -= 1;
        self.shrink(SHRINK_STEP);
        Some(node)
    }

    /// Splits the next bucket of the round, allocating the segment the
    /// round's new buckets start when this is its first split.
    fn split_one(&mut self)
    where
        N::Key: Hash,
    {
        let base = 1usize << self.level;
        let src = self.split;
        if src == 0 {
            let (k, _) = locate(base);
            if self.buckets.segs.len() == k {
                self.buckets.segs.push(Seg::zeroed(seg_len(k)));
            }
        }
        let mut link = self.buckets.slot_mut(src).take();
        while let Some(mut node) = link {
            link = node.next_mut().take();
            let hi = (self.hasher.hash_one(node.key()) as usize) & base != 0;
            self.buckets.push(if hi { base + src } else { src }, node);
        }
        self.split += 1;
        if self.split == base {
            self.level += 1;
            self.split = 0;
        }
    }
}

impl<N: ChainNode + fmt::Debug, S> fmt::Debug for RawDict<N, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

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
