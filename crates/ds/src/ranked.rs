//! `Ranked`: a set of `(member, score)` pairs ordered by `(score, member)`
//! with O(1) expected lookup of a member's score and O(log n) expected
//! rank, select, insert and remove. It is the scalable form of the sorted
//! set (Redis's `skiplist` encoding: a skiplist with spans plus a dict).
//!
//! # Layout
//!
//! Every member lives exactly once, in a *slot* of a segmented slab:
//! `{ member, score, left, right, size, next, hash }` (56 bytes; members of
//! up to 22 bytes inline, see [`SmallBytes`]). Slots are named by `u32`
//! ids, and two indexes are threaded through them without owning anything:
//!
//! * an order-statistic **treap** over `(score, member)`: `left`/`right`
//!   child ids and `size` (the subtree's element count) give rank and
//!   select by descent; the heap priority is the member's 32-bit hash, so
//!   the shape is that of a random treap (expected depth ~2 ln n) and no
//!   priority is stored;
//! * a chained **hash index** member → slot: bucket arrays of `u32` heads
//!   and the `next` link in each slot, with incremental rehashing and
//!   Redis's reverse-binary SCAN cursor, as in [`crate::Dict`]. The stored
//!   hash makes migration a relink, never a rehash of member bytes.
//!
//! Memory per member: 56 bytes of slot plus ~4-8 bytes of buckets, plus the
//! member's bytes if longer than 22. Redis spends a skiplist node (~48-64
//! bytes), a dict entry (24) with its bucket (8), and an sds (16+) — about
//! 100+ bytes for short members.
//!
//! # Invariants
//!
//! * Ids below `high` are either live (in both indexes) or free (on the
//!   free list through `next`, with an empty member and `size == 0`).
//! * Treap: in-order is strictly increasing by `(score, member)`
//!   ([`cmp_key`]); every node's `hash` is >= its children's; `size` is
//!   1 + the children's sizes.
//! * Hash index: as `Dict` (tables of power-of-two sizes, each live slot in
//!   bucket `hash & mask` of exactly one table, buckets of `tables[0]`
//!   below `rehash_idx` empty).
//! * Scores are never NaN (the caller's duty; asserted in debug builds).
//!
//! # Why a treap over ids and not a skiplist or B-tree
//!
//! A skiplist of boxed nodes costs a level array per node and a pointer per
//! level; a B-tree keyed by `(score, member)` needs separator keys, which
//! would copy members or dangle when their slot is freed. The treap needs
//! three `u32`s per member and no rebalancing bookkeeping. Its nodes are
//! scattered, so a descent costs a cache miss per level, which is what a
//! skiplist costs too.
//!
//! Limits: at most `u32::MAX - 1` members (ids are `u32`).

use std::cmp::Ordering;
use std::hash::BuildHasher;

use foldhash::fast::RandomState;

use crate::SmallBytes;

const NIL: u32 = u32::MAX;
/// Slots in each chunk past the first [`SMALL_IDS`] ids.
const BIG_CHUNK_BITS: u32 = 12;
const SMALL_IDS: u32 = 1 << BIG_CHUNK_BITS;
/// Ids of the first chunk (chunk k >= 1 below `SMALL_IDS` holds
/// `[2^(k+3), 2^(k+4))`, so small sets waste at most half a chunk).
const FIRST_CHUNK_BITS: u32 = 4;
const SMALL_CHUNKS: usize = (BIG_CHUNK_BITS - FIRST_CHUNK_BITS + 1) as usize;
const INITIAL_BUCKETS: usize = 4;
const EMPTY_VISITS_PER_BUCKET: usize = 10;

#[derive(Clone)]
struct Slot {
    member: SmallBytes,
    score: f64,
    left: u32,
    right: u32,
    size: u32,
    /// Hash chain link (live) or free-list link (free).
    next: u32,
    hash: u32,
}

const _: () = assert!(std::mem::size_of::<Slot>() <= 56);

/// Orders two `(score, member)` keys as Redis's skiplist does: by score
/// (`-0 == 0`), then by member bytes.
#[inline]
pub fn cmp_key(a_score: f64, a_member: &[u8], b_score: f64, b_member: &[u8]) -> Ordering {
    if a_score < b_score {
        Ordering::Less
    } else if a_score > b_score {
        Ordering::Greater
    } else {
        a_member.cmp(b_member)
    }
}

#[derive(Clone, Default)]
struct Table {
    buckets: Vec<u32>,
    used: usize,
}

impl Table {
    fn with_size(n: usize) -> Self {
        Table {
            buckets: vec![NIL; n],
            used: 0,
        }
    }
    #[inline]
    fn mask(&self) -> usize {
        self.buckets.len().wrapping_sub(1)
    }
}

/// See the module docs.
#[derive(Clone)]
pub struct Ranked {
    chunks: Vec<Vec<Slot>>,
    /// Ids ever allocated (the next fresh id).
    high: u32,
    free: u32,
    root: u32,
    tables: [Table; 2],
    rehash_idx: Option<usize>,
    hasher: RandomState,
    /// Heap bytes of members stored out of line.
    member_heap: usize,
}

impl Default for Ranked {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Ranked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

#[inline]
fn chunk_of(id: u32) -> (usize, usize) {
    if id < SMALL_IDS {
        if id < (1 << FIRST_CHUNK_BITS) {
            (0, id as usize)
        } else {
            let log = 31 - id.leading_zeros();
            (
                (log - FIRST_CHUNK_BITS + 1) as usize,
                (id - (1 << log)) as usize,
            )
        }
    } else {
        let rel = id - SMALL_IDS;
        (
            SMALL_CHUNKS + (rel >> BIG_CHUNK_BITS) as usize,
            (rel & (SMALL_IDS - 1)) as usize,
        )
    }
}

fn chunk_capacity(chunk: usize) -> usize {
    if chunk == 0 {
        1 << FIRST_CHUNK_BITS
    } else if chunk < SMALL_CHUNKS {
        1 << (chunk as u32 + FIRST_CHUNK_BITS - 1)
    } else {
        SMALL_IDS as usize
    }
}

impl Ranked {
    /// An empty set; allocates nothing until the first insert.
    pub fn new() -> Self {
        Ranked {
            chunks: Vec::new(),
            high: 0,
            free: NIL,
            root: NIL,
            tables: [Table::default(), Table::default()],
            rehash_idx: None,
            hasher: RandomState::default(),
            member_heap: 0,
        }
    }

    /// Number of members. O(1).
    #[inline]
    pub fn len(&self) -> usize {
        self.size(self.root) as usize
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.root == NIL
    }

    /// Heap bytes held: slab chunks (by capacity), bucket arrays and
    /// out-of-line members.
    pub fn heap_bytes(&self) -> usize {
        let slots: usize = self.chunks.iter().map(|c| c.capacity()).sum();
        slots * std::mem::size_of::<Slot>()
            + self.chunks.capacity() * std::mem::size_of::<Vec<Slot>>()
            + (self.tables[0].buckets.capacity() + self.tables[1].buckets.capacity()) * 4
            + self.member_heap
    }

    #[inline]
    fn slot(&self, id: u32) -> &Slot {
        let (c, o) = chunk_of(id);
        &self.chunks[c][o]
    }

    #[inline]
    fn slot_mut(&mut self, id: u32) -> &mut Slot {
        let (c, o) = chunk_of(id);
        &mut self.chunks[c][o]
    }

    #[inline]
    fn size(&self, id: u32) -> u32 {
        if id == NIL {
            0
        } else {
            self.slot(id).size
        }
    }

    #[inline]
    fn hash_of(&self, member: &[u8]) -> u32 {
        self.hasher.hash_one(member) as u32
    }

    fn alloc(&mut self, member: &[u8], score: f64, hash: u32) -> u32 {
        let slot = Slot {
            member: SmallBytes::from_slice(member),
            score,
            left: NIL,
            right: NIL,
            size: 1,
            next: NIL,
            hash,
        };
        self.member_heap += slot.member.heap_bytes();
        if self.free != NIL {
            let id = self.free;
            let s = self.slot_mut(id);
            let next_free = s.next;
            *s = slot;
            self.free = next_free;
            return id;
        }
        let id = self.high;
        assert!(id != NIL, "sorted set full");
        let (c, o) = chunk_of(id);
        if c == self.chunks.len() {
            self.chunks.push(Vec::with_capacity(chunk_capacity(c)));
        }
        debug_assert_eq!(self.chunks[c].len(), o);
        self.chunks[c].push(slot);
        self.high += 1;
        id
    }

    fn release(&mut self, id: u32) {
        let free = self.free;
        let s = self.slot_mut(id);
        let heap = s.member.heap_bytes();
        s.member = SmallBytes::new();
        s.size = 0;
        s.left = NIL;
        s.right = NIL;
        s.next = free;
        self.member_heap -= heap;
        self.free = id;
    }

    // ---------------------------------------------------------------
    // Hash index

    fn find(&self, member: &[u8], hash: u32) -> Option<u32> {
        for t in 0..2 {
            let table = &self.tables[t];
            if table.buckets.is_empty() {
                continue;
            }
            let mut id = table.buckets[hash as usize & table.mask()];
            while id != NIL {
                let s = self.slot(id);
                if s.hash == hash && &*s.member == member {
                    return Some(id);
                }
                id = s.next;
            }
            if self.rehash_idx.is_none() {
                break;
            }
        }
        None
    }

    fn rehash_step(&mut self, n: usize) {
        let Some(mut idx) = self.rehash_idx else {
            return;
        };
        let mut empty_visits = n * EMPTY_VISITS_PER_BUCKET;
        let mut moved = 0;
        while moved < n && self.tables[0].used > 0 {
            while self.tables[0].buckets[idx] == NIL {
                idx += 1;
                empty_visits -= 1;
                if empty_visits == 0 {
                    self.rehash_idx = Some(idx);
                    return;
                }
            }
            let mut id = std::mem::replace(&mut self.tables[0].buckets[idx], NIL);
            while id != NIL {
                let (next, hash) = {
                    let s = self.slot(id);
                    (s.next, s.hash)
                };
                let b = hash as usize & self.tables[1].mask();
                let head = self.tables[1].buckets[b];
                self.slot_mut(id).next = head;
                self.tables[1].buckets[b] = id;
                self.tables[0].used -= 1;
                self.tables[1].used += 1;
                id = next;
            }
            idx += 1;
            moved += 1;
        }
        if self.tables[0].used == 0 {
            self.tables[0] = std::mem::take(&mut self.tables[1]);
            self.rehash_idx = None;
        } else {
            self.rehash_idx = Some(idx);
        }
    }

    fn resize(&mut self, n: usize) {
        let n = n.max(INITIAL_BUCKETS).next_power_of_two();
        if self.tables[0].buckets.is_empty() {
            self.tables[0] = Table::with_size(n);
            return;
        }
        self.tables[1] = Table::with_size(n);
        self.rehash_idx = Some(0);
    }

    fn link(&mut self, id: u32, hash: u32) {
        let t = if self.rehash_idx.is_some() { 1 } else { 0 };
        let b = hash as usize & self.tables[t].mask();
        let head = self.tables[t].buckets[b];
        self.slot_mut(id).next = head;
        self.tables[t].buckets[b] = id;
        self.tables[t].used += 1;
    }

    fn unlink(&mut self, id: u32, hash: u32) {
        for t in 0..2 {
            if self.tables[t].buckets.is_empty() {
                continue;
            }
            let b = hash as usize & self.tables[t].mask();
            let mut prev = NIL;
            let mut cur = self.tables[t].buckets[b];
            while cur != NIL {
                let next = self.slot(cur).next;
                if cur == id {
                    if prev == NIL {
                        self.tables[t].buckets[b] = next;
                    } else {
                        self.slot_mut(prev).next = next;
                    }
                    self.tables[t].used -= 1;
                    return;
                }
                prev = cur;
                cur = next;
            }
        }
        unreachable!("INVARIANT: a live slot is in the hash index");
    }

    fn maybe_resize(&mut self) {
        if self.rehash_idx.is_some() {
            self.rehash_step(1);
            return;
        }
        let t0 = &self.tables[0];
        let size = t0.buckets.len();
        if size == 0 || t0.used >= size {
            // Double (the next power of two above the count), as `Dict`.
            self.resize(t0.used + 1);
        } else if size > INITIAL_BUCKETS && t0.used * 8 < size {
            self.resize(t0.used);
        }
    }

    // ---------------------------------------------------------------
    // Treap

    #[inline]
    fn key_cmp(&self, score: f64, member: &[u8], id: u32) -> Ordering {
        let s = self.slot(id);
        cmp_key(score, member, s.score, &s.member)
    }

    #[inline]
    fn fix(&mut self, id: u32) {
        let (l, r) = {
            let s = self.slot(id);
            (s.left, s.right)
        };
        let size = 1 + self.size(l) + self.size(r);
        self.slot_mut(id).size = size;
    }

    /// Splits `t` into (keys < key, keys > key); `x` (the key's own slot)
    /// is never in `t`.
    fn split(&mut self, t: u32, x: u32) -> (u32, u32) {
        if t == NIL {
            return (NIL, NIL);
        }
        let xs = self.slot(x);
        let less = self.key_cmp(xs.score, &xs.member, t) == Ordering::Greater;
        if less {
            let r = self.slot(t).right;
            let (a, b) = self.split(r, x);
            self.slot_mut(t).right = a;
            self.fix(t);
            (t, b)
        } else {
            let l = self.slot(t).left;
            let (a, b) = self.split(l, x);
            self.slot_mut(t).left = b;
            self.fix(t);
            (a, t)
        }
    }

    fn insert_node(&mut self, t: u32, x: u32) -> u32 {
        if t == NIL {
            return x;
        }
        if self.slot(x).hash > self.slot(t).hash {
            let (l, r) = self.split(t, x);
            let s = self.slot_mut(x);
            s.left = l;
            s.right = r;
            self.fix(x);
            return x;
        }
        let go_left = {
            let xs = self.slot(x);
            let ts = self.slot(t);
            cmp_key(xs.score, &xs.member, ts.score, &ts.member) == Ordering::Less
        };
        if go_left {
            let l = self.slot(t).left;
            let nl = self.insert_node(l, x);
            self.slot_mut(t).left = nl;
        } else {
            let r = self.slot(t).right;
            let nr = self.insert_node(r, x);
            self.slot_mut(t).right = nr;
        }
        self.slot_mut(t).size += 1;
        t
    }

    fn merge(&mut self, a: u32, b: u32) -> u32 {
        if a == NIL {
            return b;
        }
        if b == NIL {
            return a;
        }
        if self.slot(a).hash >= self.slot(b).hash {
            let r = self.slot(a).right;
            let m = self.merge(r, b);
            self.slot_mut(a).right = m;
            self.fix(a);
            a
        } else {
            let l = self.slot(b).left;
            let m = self.merge(a, l);
            self.slot_mut(b).left = m;
            self.fix(b);
            b
        }
    }

    /// Removes slot `x` (which is in `t`) from the treap rooted at `t`.
    fn remove_node(&mut self, t: u32, x: u32) -> u32 {
        if t == x {
            let (l, r) = {
                let s = self.slot(t);
                (s.left, s.right)
            };
            return self.merge(l, r);
        }
        let ord = {
            let xs = self.slot(x);
            let ts = self.slot(t);
            cmp_key(xs.score, &xs.member, ts.score, &ts.member)
        };
        if ord == Ordering::Less {
            let l = self.slot(t).left;
            let nl = self.remove_node(l, x);
            self.slot_mut(t).left = nl;
        } else {
            let r = self.slot(t).right;
            let nr = self.remove_node(r, x);
            self.slot_mut(t).right = nr;
        }
        self.slot_mut(t).size -= 1;
        t
    }

    // ---------------------------------------------------------------
    // Public operations

    /// The score of `member`. O(1) expected.
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        if self.is_empty() {
            return None;
        }
        let h = self.hash_of(member);
        self.find(member, h).map(|id| self.slot(id).score)
    }

    /// Inserts `member` with `score`, or moves it to `score`; returns the
    /// previous score. O(log n) expected.
    pub fn insert(&mut self, member: &[u8], score: f64) -> Option<f64> {
        debug_assert!(!score.is_nan());
        let h = self.hash_of(member);
        if let Some(id) = self.find(member, h) {
            let old = self.slot(id).score;
            if old.to_bits() != score.to_bits() {
                let root = self.remove_node(self.root, id);
                let s = self.slot_mut(id);
                s.score = score;
                s.left = NIL;
                s.right = NIL;
                s.size = 1;
                self.root = self.insert_node(root, id);
            }
            return Some(old);
        }
        self.maybe_resize();
        let id = self.alloc(member, score, h);
        self.link(id, h);
        self.root = self.insert_node(self.root, id);
        None
    }

    /// Removes `member`; returns its score. O(log n) expected.
    pub fn remove(&mut self, member: &[u8]) -> Option<f64> {
        if self.is_empty() {
            return None;
        }
        let h = self.hash_of(member);
        let id = self.find(member, h)?;
        self.unlink(id, h);
        self.root = self.remove_node(self.root, id);
        let score = self.slot(id).score;
        self.release(id);
        self.maybe_resize();
        Some(score)
    }

    /// The 0-based rank of `member` in ascending order, with its score.
    pub fn rank(&self, member: &[u8]) -> Option<(usize, f64)> {
        let score = self.score(member)?;
        Some((self.count_less(score, member), score))
    }

    /// Number of members whose key is below `(score, member)`.
    fn count_less(&self, score: f64, member: &[u8]) -> usize {
        self.partition_point(|m, s| cmp_key(s, m, score, member) == Ordering::Less)
    }

    /// The number of leading members (in ascending order) for which `pred`
    /// holds, if `pred` holds on a prefix only. O(log n) expected.
    ///
    /// For any other `pred` the answer is still a *boundary*: a rank `r`
    /// with `pred` true at `r - 1` (or `r == 0`) and false at `r` (or `r ==
    /// len`), as a binary search finds; which one, where there are several,
    /// depends on the tree's shape (so on the hash seed). Redis's skiplist
    /// descents answer the same way, by their random levels: ZRANGEBYLEX on
    /// members that are not in lex order relies on this.
    pub fn partition_point(&self, mut pred: impl FnMut(&[u8], f64) -> bool) -> usize {
        let mut n = 0usize;
        let mut t = self.root;
        while t != NIL {
            let s = self.slot(t);
            if pred(&s.member, s.score) {
                n += self.size(s.left) as usize + 1;
                t = s.right;
            } else {
                t = s.left;
            }
        }
        n
    }

    /// The member at ascending rank `r`. O(log n) expected.
    pub fn get(&self, r: usize) -> Option<(&[u8], f64)> {
        let id = self.select(r)?;
        let s = self.slot(id);
        Some((&s.member, s.score))
    }

    fn select(&self, mut r: usize) -> Option<u32> {
        if r >= self.len() {
            return None;
        }
        let mut t = self.root;
        loop {
            let s = self.slot(t);
            let ls = self.size(s.left) as usize;
            match r.cmp(&ls) {
                Ordering::Less => t = s.left,
                Ordering::Equal => return Some(t),
                Ordering::Greater => {
                    r -= ls + 1;
                    t = s.right;
                }
            }
        }
    }

    /// Members from ascending rank `start` upwards (`rev == false`) or
    /// from rank `start` downwards (`rev == true`).
    pub fn iter_from(&self, start: usize, rev: bool) -> Iter<'_> {
        let mut stack = Vec::with_capacity(48);
        if start < self.len() {
            let mut r = start;
            let mut t = self.root;
            while t != NIL {
                let s = self.slot(t);
                let ls = self.size(s.left) as usize;
                match r.cmp(&ls) {
                    Ordering::Less => {
                        if !rev {
                            stack.push(t);
                        }
                        t = s.left;
                    }
                    Ordering::Equal => {
                        stack.push(t);
                        break;
                    }
                    Ordering::Greater => {
                        if rev {
                            stack.push(t);
                        }
                        r -= ls + 1;
                        t = s.right;
                    }
                }
            }
        }
        Iter {
            set: self,
            stack,
            rev,
        }
    }

    /// All members in ascending order.
    pub fn iter(&self) -> Iter<'_> {
        self.iter_from(0, false)
    }

    /// Redis's `dictScan` over the member index (see [`crate::Dict::scan`]).
    pub fn scan(&self, cursor: u64, mut f: impl FnMut(&[u8], f64)) -> u64 {
        if self.is_empty() {
            return 0;
        }
        let emit = |table: &Table, v: u64, f: &mut dyn FnMut(&[u8], f64)| {
            let mut id = table.buckets[(v as usize) & table.mask()];
            while id != NIL {
                let s = self.slot(id);
                f(&s.member, s.score);
                id = s.next;
            }
        };
        let mut v = cursor;
        if self.rehash_idx.is_none() {
            let t0 = &self.tables[0];
            emit(t0, v, &mut f);
            v = next_cursor(v, t0.mask() as u64);
        } else {
            let (small, large) = if self.tables[0].buckets.len() <= self.tables[1].buckets.len() {
                (&self.tables[0], &self.tables[1])
            } else {
                (&self.tables[1], &self.tables[0])
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

    /// Checks every invariant (tests).
    #[doc(hidden)]
    pub fn check(&self) {
        fn walk(r: &Ranked, t: u32, out: &mut Vec<u32>) -> u32 {
            if t == NIL {
                return 0;
            }
            let s = r.slot(t);
            for c in [s.left, s.right] {
                if c != NIL {
                    assert!(r.slot(c).hash <= s.hash, "heap order");
                }
            }
            let l = walk(r, s.left, out);
            out.push(t);
            let rr = walk(r, s.right, out);
            assert_eq!(s.size, l + rr + 1, "size");
            s.size
        }
        let mut order = Vec::new();
        walk(self, self.root, &mut order);
        for w in order.windows(2) {
            let (a, b) = (self.slot(w[0]), self.slot(w[1]));
            assert_eq!(
                cmp_key(a.score, &a.member, b.score, &b.member),
                Ordering::Less
            );
        }
        assert_eq!(self.tables[0].used + self.tables[1].used, order.len());
        for &id in &order {
            let s = self.slot(id);
            assert_eq!(self.find(&s.member, s.hash), Some(id));
        }
    }
}

/// Increments the reversed bits of `v` above `mask` (Redis's cursor step).
#[inline]
fn next_cursor(v: u64, mask: u64) -> u64 {
    (v | !mask).reverse_bits().wrapping_add(1).reverse_bits()
}

/// In-order iterator (see [`Ranked::iter_from`]).
pub struct Iter<'a> {
    set: &'a Ranked,
    stack: Vec<u32>,
    rev: bool,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a [u8], f64);

    fn next(&mut self) -> Option<Self::Item> {
        let t = self.stack.pop()?;
        let set = self.set;
        let s = set.slot(t);
        let mut c = if self.rev { s.left } else { s.right };
        while c != NIL {
            self.stack.push(c);
            let cs = set.slot(c);
            c = if self.rev { cs.right } else { cs.left };
        }
        Some((&s.member, s.score))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, HashMap};

    fn model_order(m: &HashMap<Vec<u8>, f64>) -> Vec<(Vec<u8>, f64)> {
        let mut v: Vec<_> = m.iter().map(|(k, s)| (k.clone(), *s)).collect();
        v.sort_by(|a, b| cmp_key(a.1, &a.0, b.1, &b.0));
        v
    }

    #[test]
    fn chunks_map_ids_densely() {
        let mut seen = std::collections::HashSet::new();
        for id in 0..(SMALL_IDS * 3) {
            let (c, o) = chunk_of(id);
            assert!(o < chunk_capacity(c), "id {id}");
            assert!(seen.insert((c, o)));
        }
        assert_eq!(chunk_of(15), (0, 15));
        assert_eq!(chunk_of(16), (1, 0));
        assert_eq!(chunk_of(32), (2, 0));
        assert_eq!(chunk_of(SMALL_IDS), (SMALL_CHUNKS, 0));
    }

    #[test]
    fn ranks_ranges_and_deletion() {
        let mut r = Ranked::new();
        for i in 0..1000u32 {
            let m = format!("m{i:04}");
            assert_eq!(r.insert(m.as_bytes(), f64::from(i % 10)), None);
        }
        r.check();
        assert_eq!(r.len(), 1000);
        // Score 3: members m0003, m0013, ... ranks 300..400.
        assert_eq!(r.rank(b"m0003"), Some((300, 3.0)));
        assert_eq!(r.get(300), Some((&b"m0003"[..], 3.0)));
        assert_eq!(r.partition_point(|_, s| s < 3.0), 300);
        let v: Vec<_> = r.iter_from(299, false).take(2).collect();
        assert_eq!(v, vec![(&b"m0992"[..], 2.0), (&b"m0003"[..], 3.0)]);
        let v: Vec<_> = r.iter_from(300, true).take(2).collect();
        assert_eq!(v, vec![(&b"m0003"[..], 3.0), (&b"m0992"[..], 2.0)]);
        assert_eq!(r.insert(b"m0003", -1.0), Some(3.0));
        assert_eq!(r.rank(b"m0003"), Some((0, -1.0)));
        for i in (0..1000u32).step_by(2) {
            assert!(r.remove(format!("m{i:04}").as_bytes()).is_some());
        }
        r.check();
        assert_eq!(r.len(), 500);
        assert_eq!(r.remove(b"m0000"), None);
        assert_eq!(r.iter().count(), 500);
        assert_eq!(r.iter_from(499, true).count(), 500);
    }

    #[test]
    fn partition_point_on_any_predicate_finds_a_boundary() {
        // Members in score order are not in lex order: `m >= "m"` holds on
        // several runs, and any run's start is a valid answer.
        let mut r = Ranked::new();
        let members: Vec<Vec<u8>> = (0..300u32)
            .map(|i| format!("{}{i}", char::from(b'a' + (i * 7 % 26) as u8)).into_bytes())
            .collect();
        for (i, m) in members.iter().enumerate() {
            r.insert(m, i as f64);
        }
        for pivot in [&b"a"[..], b"g", b"m", b"z", b"{"] {
            let pred = |m: &[u8]| m < pivot;
            let p = r.partition_point(|m, _| pred(m));
            assert!(p == 0 || pred(&members[p - 1]), "pivot {pivot:?} at {p}");
            assert!(
                p == members.len() || !pred(&members[p]),
                "pivot {pivot:?} at {p}"
            );
        }
        assert_eq!(r.partition_point(|_, _| true), 300);
        assert_eq!(r.partition_point(|_, _| false), 0);
    }

    #[test]
    fn zero_scores_tie_on_member() {
        let mut r = Ranked::new();
        r.insert(b"b", -0.0);
        r.insert(b"a", 0.0);
        let v: Vec<_> = r.iter().map(|(m, _)| m.to_vec()).collect();
        assert_eq!(v, vec![b"a".to_vec(), b"b".to_vec()]);
        assert!(r.score(b"b").unwrap().is_sign_negative());
    }

    #[test]
    fn scan_sees_every_member_across_resizes() {
        let mut r = Ranked::new();
        for i in 0..500 {
            r.insert(format!("k{i}").as_bytes(), i as f64);
        }
        let mut seen = std::collections::HashSet::new();
        let mut cursor = 0;
        let mut i = 0;
        loop {
            cursor = r.scan(cursor, |m, _| {
                seen.insert(m.to_vec());
            });
            // Grow and shrink between calls; k0..k499 stay throughout.
            i += 1;
            if i % 3 == 0 {
                for j in 0..50 {
                    r.insert(format!("x{i}_{j}").as_bytes(), 0.0);
                }
            } else {
                for j in 0..50 {
                    r.remove(format!("x{}_{j}", i - 1).as_bytes());
                }
            }
            if cursor == 0 {
                break;
            }
        }
        for i in 0..500 {
            assert!(seen.contains(format!("k{i}").as_bytes()));
        }
        r.check();
    }

    /// Memory per member, the budget against Redis's skiplist + dict +
    /// sds (100+ bytes for short members).
    #[test]
    fn heap_bytes_per_short_member_is_well_below_redis() {
        let mut r = Ranked::new();
        let n = 200_000;
        for i in 0..n {
            r.insert(format!("member:{i}").as_bytes(), f64::from(i));
        }
        let per = r.heap_bytes() / n as usize;
        assert!(per <= 72, "{per} bytes per member");
        // Long members are counted too.
        let before = r.heap_bytes();
        r.insert(&[b'x'; 100], 0.0);
        assert!(r.heap_bytes() >= before + 100);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, i8),
        Remove(u8),
        Rank(u8),
        Select(u16),
        Range(u16, bool, u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (any::<u8>(), any::<i8>()).prop_map(|(m, s)| Op::Insert(m, s)),
            any::<u8>().prop_map(Op::Remove),
            any::<u8>().prop_map(Op::Rank),
            any::<u16>().prop_map(Op::Select),
            (any::<u16>(), any::<bool>(), any::<u8>()).prop_map(|(a, b, c)| Op::Range(a, b, c)),
        ]
    }

    proptest! {
        #[test]
        fn matches_a_model(ops in proptest::collection::vec(op(), 1..400)) {
            let mut r = Ranked::new();
            let mut m: HashMap<Vec<u8>, f64> = HashMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, s) => {
                        let k = vec![k; (k % 30) as usize + 1];
                        prop_assert_eq!(r.insert(&k, f64::from(s)), m.insert(k, f64::from(s)));
                    }
                    Op::Remove(k) => {
                        let k = vec![k; (k % 30) as usize + 1];
                        prop_assert_eq!(r.remove(&k), m.remove(&k));
                    }
                    Op::Rank(k) => {
                        let k = vec![k; (k % 30) as usize + 1];
                        let want = model_order(&m).iter().position(|(x, _)| *x == k)
                            .map(|p| (p, m[&k]));
                        prop_assert_eq!(r.rank(&k), want);
                    }
                    Op::Select(i) => {
                        let o = model_order(&m);
                        let i = i as usize % (o.len() + 1);
                        prop_assert_eq!(r.get(i), o.get(i).map(|(k, s)| (&k[..], *s)));
                    }
                    Op::Range(i, rev, n) => {
                        let o = model_order(&m);
                        let i = i as usize % (o.len() + 1);
                        let got: Vec<_> = r.iter_from(i, rev).take(n as usize)
                            .map(|(k, s)| (k.to_vec(), s)).collect();
                        let want: Vec<_> = if i >= o.len() {
                            Vec::new()
                        } else if rev {
                            o[..=i].iter().rev().take(n as usize).cloned().collect()
                        } else {
                            o[i..].iter().take(n as usize).cloned().collect()
                        };
                        prop_assert_eq!(got, want);
                    }
                }
            }
            r.check();
            let bt: BTreeMap<_, _> = m.iter().map(|(k, v)| (k.clone(), *v)).collect();
            prop_assert_eq!(r.len(), bt.len());
        }
    }
}
