//! The bucket array of a [`RawDict`](super::RawDict): segments that never
//! move (allocated zeroed, freed with hysteresis; see the parent module's
//! "Layout"), the chain edits every table operation is made of
//! (`put_link`, `put_node`, `BucketArray::link_mut` / `unlink`), and the
//! arithmetic of bucket indices and SCAN cursors (reverse-binary
//! increments over the buckets of a split round).

use std::borrow::Borrow;
use std::mem;

use super::{ChainNode, INITIAL_LOG2, INITIAL_SIZE};

/// Segment `k`'s first bucket.
#[inline]
pub(super) fn seg_start(k: usize) -> usize {
    if k == 0 {
        0
    } else {
        INITIAL_SIZE << (k - 1)
    }
}

/// Segment `k`'s bucket count.
#[inline]
pub(super) fn seg_len(k: usize) -> usize {
    INITIAL_SIZE << k.saturating_sub(1)
}

/// Segment and offset of bucket `i`: from the highest bit of `i` (or of
/// `INITIAL_SIZE - 1` for the first segment's buckets), without branches.
#[inline]
pub(super) fn locate(i: usize) -> (usize, usize) {
    let top = usize::BITS - 1 - (i | (INITIAL_SIZE - 1)).leading_zeros();
    let k = (top + 1 - INITIAL_LOG2) as usize;
    (k, i - ((1usize << top) & !(INITIAL_SIZE - 1)))
}

/// One segment of the bucket array.
pub(super) struct Seg<N: ChainNode> {
    pub(super) buckets: Box<[Option<N>]>,
}

impl<N: ChainNode> Seg<N> {
    /// A segment of `size` empty buckets. The array comes zeroed from the
    /// allocator (`calloc`: fresh pages from the kernel for a large one,
    /// nothing written, each page faulted in when a split first reaches
    /// it) instead of being written bucket by bucket.
    pub(super) fn zeroed(size: usize) -> Self {
        const {
            assert!(
                mem::size_of::<Option<N>>() == mem::size_of::<*const u8>(),
                "a ChainNode's Option must be pointer-sized"
            )
        };
        let layout = std::alloc::Layout::array::<Option<N>>(size).expect("segment size");
        // SAFETY: the layout has a non-zero size (size >= 1, links are
        // pointer-sized, asserted above); an all-zero `Option<N>` is `None`
        // (`ChainNode`'s contract); the slice is built with the exact
        // layout `Box<[T]>` frees with.
        let buckets = unsafe {
            let p = std::alloc::alloc_zeroed(layout) as *mut Option<N>;
            if p.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, size))
        };
        Seg { buckets }
    }

    /// Frees the array without visiting its buckets, which must all be
    /// empty (the slice's drop glue would check each one, and for a freshly
    /// zeroed segment touch pages the table never used).
    pub(super) fn free_empty(&mut self) {
        let b = mem::replace(&mut self.buckets, Box::new([]));
        let n = b.len();
        if n == 0 {
            return;
        }
        debug_assert!(b.iter().all(Option::is_none));
        let layout = std::alloc::Layout::array::<Option<N>>(n).expect("segment size");
        let p = Box::into_raw(b) as *mut u8;
        // SAFETY: no bucket holds a node (the caller's contract), so no
        // element needs dropping; `p` came from the global allocator with
        // this layout (`zeroed`, or a `Box<[_]>` of length `n`).
        unsafe { std::alloc::dealloc(p, layout) };
    }
}

impl<N: ChainNode> Drop for Seg<N> {
    /// Iterative: the default recursive drop of a long chain (a node owns
    /// the rest of its chain through its link) would overflow the stack.
    fn drop(&mut self) {
        for slot in self.buckets.iter_mut() {
            let mut link = slot.take();
            while let Some(mut node) = link {
                link = node.next_mut().take();
            }
        }
        self.free_empty();
    }
}

/// Writes `link` into `slot`, which must be `None` (a link just taken),
/// without dropping the old value. Dropping a `None` does nothing, but the
/// drop glue of an `Option<N>` is recursive (a node owns the rest of its
/// chain), so the compiler may keep it out of line and call it even where
/// it knows the value is `None` (measured: a call per insert and per split
/// or merge move, about 1 % of `dict_bench`'s instructions).
#[inline]
pub(super) fn put_link<N: ChainNode>(slot: &mut Option<N>, link: Option<N>) {
    let old = mem::replace(slot, link);
    debug_assert!(old.is_none(), "overwriting a link");
    // Nothing to forget but a `None`; were it a chain (a caller changed a
    // link), it would leak rather than be dropped recursively.
    mem::forget(old);
}

/// Puts `node` into `slot`, which must be `None`, and returns it in place:
/// `Option::insert` without its drop of the old value (see `put_link`).
#[inline]
pub(super) fn put_node<N: ChainNode>(slot: &mut Option<N>, node: N) -> &mut N {
    put_link(slot, Some(node));
    match slot {
        Some(node) => node,
        None => unreachable!("a node was just put there"),
    }
}

/// The bucket array: segments that never move (see the module docs).
pub(super) struct BucketArray<N: ChainNode> {
    pub(super) segs: Vec<Seg<N>>,
}

/// The white-box tests' name for a `Dict`'s bucket array.
#[cfg(test)]
pub(super) type Buckets<K, V> = BucketArray<Box<super::node::Node<K, V>>>;

impl<N: ChainNode> BucketArray<N> {
    #[inline]
    pub(super) fn slot(&self, i: usize) -> &Option<N> {
        let (k, off) = locate(i);
        &self.segs[k].buckets[off]
    }

    #[inline]
    pub(super) fn slot_mut(&mut self, i: usize) -> &mut Option<N> {
        let (k, off) = locate(i);
        &mut self.segs[k].buckets[off]
    }

    /// Pushes `node` at the head of bucket `i`.
    #[inline]
    pub(super) fn push(&mut self, i: usize, node: N) -> &mut N {
        let slot = self.slot_mut(i);
        let head = slot.take();
        let node = put_node(slot, node);
        put_link(node.next_mut(), head);
        node
    }

    /// The link (bucket slot or a node's `next`) that holds the node of
    /// bucket `i`'s chain whose key is `key`.
    #[inline]
    pub(super) fn link_mut<Q>(&mut self, i: usize, key: &Q) -> Option<&mut Option<N>>
    where
        N::Key: Borrow<Q>,
        Q: ?Sized + Eq,
    {
        let mut link = self.slot_mut(i);
        loop {
            match link.as_ref() {
                None => return None,
                Some(node) if node.key().borrow() == key => break,
                Some(_) => {}
            }
            match link {
                Some(node) => link = node.next_mut(),
                None => return None,
            }
        }
        Some(link)
    }

    /// Unlinks the node of `key` from bucket `i`'s chain: returns the link
    /// it was in (now holding its successor) and the node (link `None`).
    pub(super) fn unlink<Q>(&mut self, i: usize, key: &Q) -> Option<(&mut Option<N>, N)>
    where
        N::Key: Borrow<Q>,
        Q: ?Sized + Eq,
    {
        let link = self.link_mut(i, key)?;
        let mut node = link.take()?;
        put_link(link, node.next_mut().take());
        Some((link, node))
    }
}

/// Calls `visit` with the buckets `dictScan` visits at `cursor` in state
/// `(level, split)`, and returns the next cursor (see [`Dict::scan`](super::Dict::scan)).
pub(super) fn scan_buckets(
    level: u32,
    split: usize,
    cursor: u64,
    mut visit: impl FnMut(usize),
) -> u64 {
    let m0 = (1u64 << level) - 1;
    let b0 = cursor & m0;
    if (b0 as usize) >= split {
        // An unsplit bucket (Redis: a bucket of the small table whose
        // expansions in the large one are empty).
        visit(b0 as usize);
        return next_cursor(cursor, m0);
    }
    // A split bucket: every expansion from the cursor's on, as Redis visits
    // the large table's buckets that agree with the cursor on m0's bits.
    let m1 = (m0 << 1) | 1;
    let mut v = cursor;
    loop {
        visit((v & m1) as usize);
        v = next_cursor(v, m1);
        if v & (m0 ^ m1) == 0 {
            return v;
        }
    }
}

/// Increments the reversed bits of `v` above `mask` (Redis's cursor step).
#[inline]
fn next_cursor(v: u64, mask: u64) -> u64 {
    (v | !mask).reverse_bits().wrapping_add(1).reverse_bits()
}

/// The table size for `n` entries: a power of two >= max(n, INITIAL_SIZE).
pub(super) fn size_for(n: usize) -> usize {
    n.max(INITIAL_SIZE)
        .checked_next_power_of_two()
        .unwrap_or(1 << (usize::BITS - 1))
}
