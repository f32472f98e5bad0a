//! [`QuickList`]: a deque of byte strings stored as a deque of compact
//! nodes, in the spirit of Redis's quicklist of listpacks.
//!
//! Each node is one contiguous byte buffer of entries. An entry is
//! `len` (LEB128 varint) + payload + `len` again with its varint bytes in
//! reverse order, so a node can be walked from either end (the trailer
//! plays the role of listpack's `backlen`). An element of up to 127 bytes
//! costs its payload + 2 bytes, as in a listpack; one of up to 16383 bytes
//! + 4. There is no per-element allocation.
//!
//! Node size follows Redis's `list-max-listpack-size` (`fill`): a positive
//! fill caps the entries per node (and, as Redis's `SIZE_SAFETY_LIMIT`,
//! its bytes at 8 KiB); a negative fill caps the node's bytes at 4, 8, 16,
//! 32 or 64 KiB for -1 .. -5. A node always accepts one entry, so an
//! element larger than the cap lives alone in its node.
//!
//! Complexity: push/pop at either end O(1) amortised. A node's bytes sit
//! in a [`NodeBuf`] that can keep free room before its entries: a front
//! pop only advances the start, and a front push into a node of 256 bytes
//! or more opens room of half its size at once, so LPUSH/LPOP do not move
//! the whole node on every call as listpack's memmove does (small nodes
//! just move their few bytes, and keep no slack); access by index O(nodes) walking from the nearer
//! end, then within the node from its nearer end; insertion and removal in
//! the middle O(nodes + node bytes). Nodes live in a `VecDeque`, so a split
//! or a dropped middle node moves node headers (40 bytes each, one per
//! ~8 KiB of data), never the data.
//!
//! Compression (Redis's `list-compress-depth`, fixed when the list is
//! created as Redis's `quicklistSetOptions` does): with depth `d > 0`
//! every node but the `d` at each end is kept LZF-compressed ([`crate::lzf`],
//! Redis's rules: nodes under 48 bytes are left raw, and so is a node whose
//! compression would not save at least 8 bytes). A mutation that touches an
//! inner node decompresses it, and afterwards the nodes around the change
//! are brought back to the rule (Redis's `__quicklistCompress`); pushes and
//! pops at the ends only ever touch raw nodes, and when a node appears or
//! goes at an end exactly one node changes side (compressed once, or
//! decompressed once). Readers never change the list: an iterator or
//! [`QuickList::get`] decompresses an inner node into its own buffer, so
//! the list stays compressed while it is read (Redis decompresses in place
//! and recompresses after; same result). That is why [`Iter`] lends its
//! elements (`Iter::next` borrows the iterator) instead of implementing
//! `Iterator`: an element of a compressed node lives in the iterator's
//! buffer, not in the list. With depth 0 (the default) nothing is ever
//! compressed and the end operations pay one never-taken branch, only when
//! a node is created or dropped.
//!
//! Invariants (checked by [`QuickList::check`] in tests): no node is
//! empty; `len` is the sum of node counts; every node's entries parse
//! exactly to the end of its (decompressed) buffer; the `depth` nodes at
//! each end are raw; every other node is compressed unless the rules above
//! leave it raw.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fmt;

use crate::lzf;

/// Redis's `SIZE_SAFETY_LIMIT`: the byte cap of a node under a positive
/// (count) fill.
pub const SAFETY_BYTES: usize = 8192;
/// Byte caps of fills -1 .. -5 (Redis's `optimization_level`).
const SIZE_CLASSES: [usize; 5] = [4096, 8192, 16384, 32768, 65536];
/// Largest positive fill (Redis's `FILL_MAX`).
pub const FILL_MAX: i32 = (1 << 15) - 1;
/// Largest compress depth (Redis's `COMPRESS_MAX`).
pub const COMPRESS_MAX: u32 = (1 << 16) - 1;
/// Nodes smaller than this stay raw (Redis's `MIN_COMPRESS_BYTES`).
const MIN_COMPRESS_BYTES: usize = 48;
/// A compression must save more than this many bytes to be kept (Redis's
/// `MIN_COMPRESS_IMPROVE`).
const MIN_COMPRESS_IMPROVE: usize = 8;

#[derive(Clone, Default)]
struct Node {
    /// The entries, or their LZF stream when `lzf_raw != 0`.
    buf: NodeBuf,
    count: u32,
    /// 0 for a raw node; for a compressed one, the size of its entries
    /// (which is never 0: nodes are not empty).
    lzf_raw: u32,
}

// The compression state lives in what was padding after `count`.
const _: () = assert!(std::mem::size_of::<Node>() == 40);

/// A node's bytes: the entries are `v[head..]`; `v[..head]` is free room
/// for front pushes. Derefs to the entries, and offers the `Vec` calls
/// the node code uses with offsets relative to the entries.
#[derive(Clone, Default)]
struct NodeBuf {
    v: Vec<u8>,
    head: usize,
}

/// Front pushes into a node at least this large open room for more.
const FRONT_ROOM_MIN: usize = 256;

impl std::ops::Deref for NodeBuf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        &self.v[self.head..]
    }
}

impl std::ops::DerefMut for NodeBuf {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.v[self.head..]
    }
}

impl From<Vec<u8>> for NodeBuf {
    fn from(v: Vec<u8>) -> Self {
        NodeBuf { v, head: 0 }
    }
}

impl NodeBuf {
    #[inline]
    fn len(&self) -> usize {
        self.v.len() - self.head
    }
    /// Room for entries without reallocating (after the entries).
    #[inline]
    fn capacity(&self) -> usize {
        self.v.capacity() - self.head
    }
    /// Bytes allocated.
    fn allocated(&self) -> usize {
        self.v.capacity()
    }
    fn reserve_exact(&mut self, additional: usize) {
        self.v.reserve_exact(additional);
    }
    fn resize(&mut self, new_len: usize, b: u8) {
        self.v.resize(self.head + new_len, b);
    }
    fn truncate(&mut self, n: usize) {
        self.v.truncate(self.head + n);
    }
    fn extend_from_slice(&mut self, s: &[u8]) {
        self.v.extend_from_slice(s);
    }
    /// Removes bytes `r` of the entries; removing a prefix only moves the
    /// start.
    fn drain(&mut self, r: std::ops::Range<usize>) {
        if r.start == 0 {
            self.head += r.end;
            if self.head == self.v.len() {
                self.v.clear();
                self.head = 0;
            }
        } else {
            self.v.drain(self.head + r.start..self.head + r.end);
        }
    }
    /// Gives back the free room, before and after the entries.
    fn shrink_to_fit(&mut self) {
        if self.head > 0 {
            self.v.drain(..self.head);
            self.head = 0;
        }
        self.v.shrink_to_fit();
    }
    /// Makes `sz` bytes of room before the entries; they become entries
    /// `[0, sz)` (contents unspecified). A node of `FRONT_ROOM_MIN` bytes
    /// or more also opens half its size (at most up to `cap` in all) for
    /// later front pushes.
    fn grow_front(&mut self, sz: usize, cap: usize) {
        if self.head >= sz {
            self.head -= sz;
            return;
        }
        let live = self.len();
        let room = if live >= FRONT_ROOM_MIN {
            (live / 2).min(cap.saturating_sub(live + sz))
        } else {
            0
        };
        let new_len = room + sz + live;
        if new_len > self.v.len() {
            self.v.reserve_exact(new_len - self.v.len());
            self.v.resize(new_len, 0);
        }
        let old = self.head;
        self.v.copy_within(old..old + live, room + sz);
        self.v.truncate(new_len);
        self.head = room;
    }
}

/// Bytes of the varint encoding of `n`.
#[inline]
fn varint_len(mut n: usize) -> usize {
    let mut l = 1;
    while n >= 0x80 {
        n >>= 7;
        l += 1;
    }
    l
}

/// Bytes an entry with a payload of `n` bytes takes in a node.
#[inline]
pub fn entry_size(n: usize) -> usize {
    n + 2 * varint_len(n)
}

/// Writes the entry for `v` into `out` (exactly `entry_size(v.len())`).
fn encode_into(out: &mut [u8], v: &[u8]) {
    let h = varint_len(v.len());
    debug_assert_eq!(out.len(), v.len() + 2 * h);
    let mut n = v.len();
    for i in 0..h {
        let mut b = (n & 0x7f) as u8;
        n >>= 7;
        if i + 1 < h {
            b |= 0x80;
        }
        out[i] = b;
        // The trailer holds the same bytes reversed: read backwards from
        // the entry's end they come low group first.
        out[out.len() - 1 - i] = b;
    }
    out[h..h + v.len()].copy_from_slice(v);
}

/// The entry starting at `off`: (payload start, payload length).
#[inline]
fn read_fwd(buf: &[u8], off: usize) -> (usize, usize) {
    let (mut n, mut shift, mut p) = (0usize, 0, off);
    loop {
        let b = buf[p];
        n |= ((b & 0x7f) as usize) << shift;
        p += 1;
        if b & 0x80 == 0 {
            return (p, n);
        }
        shift += 7;
    }
}

/// The entry ending at `end`: (entry start, payload start, payload length).
#[inline]
fn read_back(buf: &[u8], end: usize) -> (usize, usize, usize) {
    let (mut n, mut shift, mut p, mut h) = (0usize, 0, end, 0);
    loop {
        p -= 1;
        h += 1;
        let b = buf[p];
        n |= ((b & 0x7f) as usize) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    let start = end - 2 * h - n;
    (start, start + h, n)
}

/// Byte offset of entry `i` of the `count` entries in `buf` (`i == count`
/// gives the end), walking from the nearer end.
fn offset_in(buf: &[u8], count: usize, i: usize) -> usize {
    if i <= count / 2 {
        let mut off = 0;
        for _ in 0..i {
            let (p, n) = read_fwd(buf, off);
            off = p + n + varint_len(n);
        }
        off
    } else {
        let mut end = buf.len();
        for _ in i..count {
            end = read_back(buf, end).0;
        }
        end
    }
}

/// The payload of the entry at `off` in `buf` and the offset of the next.
#[inline]
fn entry_in(buf: &[u8], off: usize) -> (&[u8], usize) {
    let (p, n) = read_fwd(buf, off);
    (&buf[p..p + n], p + n + varint_len(n))
}

impl Node {
    #[inline]
    fn is_lzf(&self) -> bool {
        self.lzf_raw != 0
    }

    /// Bytes of the entries, compressed or not.
    #[inline]
    fn raw_len(&self) -> usize {
        if self.is_lzf() {
            self.lzf_raw as usize
        } else {
            self.buf.len()
        }
    }

    /// Compresses a raw node under Redis's rules (`__quicklistCompressNode`):
    /// left raw when smaller than `MIN_COMPRESS_BYTES` or when LZF saves no
    /// more than `MIN_COMPRESS_IMPROVE` bytes.
    fn compress(&mut self) {
        let n = self.buf.len();
        if self.is_lzf() || n < MIN_COMPRESS_BYTES || n > u32::MAX as usize {
            return;
        }
        let Some(mut c) = lzf::compress(&self.buf, n) else {
            return;
        };
        if c.len() + MIN_COMPRESS_IMPROVE >= n {
            return;
        }
        c.shrink_to_fit();
        self.buf = NodeBuf::from(c);
        self.lzf_raw = n as u32;
    }

    /// Makes a compressed node raw again.
    fn decompress(&mut self) {
        if !self.is_lzf() {
            return;
        }
        let mut v = Vec::new();
        self.inflate_into(&mut v);
        self.buf = NodeBuf::from(v);
        self.lzf_raw = 0;
    }

    /// The entries of this compressed node, into `out`.
    fn inflate_into(&self, out: &mut Vec<u8>) {
        let ok = lzf::decompress_into(&self.buf, self.lzf_raw as usize, out);
        // INVARIANT: the stream is our own compression of this node; a
        // failure means memory corruption, and going on would serve or
        // save garbage.
        assert!(ok, "quicklist node fails to decompress");
    }

    /// Appends the entries of `b` (the node after this one).
    fn absorb(&mut self, mut b: Node) {
        self.decompress();
        b.decompress();
        self.buf.extend_from_slice(&b.buf);
        self.count += b.count;
    }

    fn with(v: &[u8]) -> Node {
        let mut n = Node::default();
        n.insert_at(0, v, 0);
        n
    }

    /// Inserts the entry for `v` at byte offset `off`, growing the buffer
    /// geometrically up to `cap_hint` bytes (the node cap) so pushes are
    /// amortised without leaving more slack than the cap.
    fn insert_at(&mut self, off: usize, v: &[u8], cap_hint: usize) {
        let sz = entry_size(v.len());
        if off == 0 && !self.buf.is_empty() {
            self.buf.grow_front(sz, cap_hint);
            encode_into(&mut self.buf[..sz], v);
            self.count += 1;
            return;
        }
        let old = self.buf.len();
        if self.buf.capacity() < old + sz {
            let want = (self.buf.capacity() * 2)
                .min(cap_hint)
                .max(old + sz)
                .max(16);
            self.buf.reserve_exact(want - old);
        }
        self.buf.resize(old + sz, 0);
        self.buf.copy_within(off..old, off + sz);
        encode_into(&mut self.buf[off..off + sz], v);
        self.count += 1;
    }

    /// Byte offset of entry `i` of this raw node; see [`offset_in`].
    fn offset_of(&self, i: usize) -> usize {
        debug_assert!(!self.is_lzf());
        offset_in(&self.buf, self.count as usize, i)
    }

    /// The payload of the entry at `off` and the offset of the next one.
    #[inline]
    fn entry_at(&self, off: usize) -> (&[u8], usize) {
        debug_assert!(!self.is_lzf());
        entry_in(&self.buf, off)
    }

    /// Removes entries `[from, to)` (entry indexes), given the byte offset
    /// of `from`.
    fn remove_entries(&mut self, from: usize, from_off: usize, to: usize) {
        let mut end = from_off;
        for _ in from..to {
            end = self.entry_at(end).1;
        }
        self.buf.drain(from_off..end);
        self.count -= (to - from) as u32;
    }
}

/// A list of byte strings; see the module documentation.
#[derive(Clone)]
pub struct QuickList {
    nodes: VecDeque<Node>,
    len: usize,
    fill: i32,
    /// Nodes kept raw at each end; 0: no compression.
    depth: u32,
}

impl Default for QuickList {
    /// Redis's default fill, -2 (8 KiB nodes).
    fn default() -> Self {
        QuickList::new(-2)
    }
}

impl PartialEq for QuickList {
    /// Same elements in the same order, whatever the node layout.
    fn eq(&self, other: &Self) -> bool {
        if self.len != other.len {
            return false;
        }
        let (mut a, mut b) = (self.iter(), other.iter());
        while let Some(x) = a.next() {
            if b.next() != Some(x) {
                return false;
            }
        }
        true
    }
}

impl fmt::Debug for QuickList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let all = self.to_vecs();
        f.debug_list()
            .entries(all.iter().map(|v| String::from_utf8_lossy(v)))
            .finish()
    }
}

/// Where an element is: node index, entry index in the node, byte offset.
#[derive(Clone, Copy, Debug)]
struct Pos {
    node: usize,
    idx: usize,
    off: usize,
}

impl QuickList {
    /// An empty list whose nodes follow `fill` (`list-max-listpack-size`;
    /// clamped to -5 ..= [`FILL_MAX`] as Redis does).
    pub fn new(fill: i32) -> Self {
        QuickList {
            nodes: VecDeque::new(),
            len: 0,
            fill: fill.clamp(-5, FILL_MAX),
            depth: 0,
        }
    }

    /// As [`QuickList::new`], compressing all nodes but `depth` at each
    /// end (`list-compress-depth`; 0: none; clamped to [`COMPRESS_MAX`]).
    pub fn with_compress(fill: i32, depth: u32) -> Self {
        QuickList {
            depth: depth.min(COMPRESS_MAX),
            ..QuickList::new(fill)
        }
    }

    /// The compress depth the list was created with.
    pub fn compress_depth(&self) -> u32 {
        self.depth
    }

    /// Number of nodes stored compressed (for tests and introspection).
    pub fn compressed_nodes(&self) -> usize {
        self.nodes.iter().filter(|n| n.is_lzf()).count()
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Number of nodes (for tests and introspection).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }
    pub fn fill(&self) -> i32 {
        self.fill
    }
    /// Entries in the head node and in the tail node (0, 0 when empty):
    /// a list grown by pushes at the head has a partial head node, one
    /// grown at the tail a partial tail node.
    pub fn end_node_counts(&self) -> (usize, usize) {
        let count = |n: Option<&Node>| n.map_or(0, |n| n.count as usize);
        (count(self.nodes.front()), count(self.nodes.back()))
    }

    /// The nodes' sizes as listpacks, uncompressed (Redis's sum of
    /// `node->sz`, DEBUG OBJECT's `ql_uncompressed_size`): the entries
    /// plus a listpack's 6-byte header and end byte each.
    pub fn listpack_bytes(&self) -> usize {
        self.nodes
            .iter()
            .map(|n| {
                let entries = if n.lzf_raw != 0 {
                    n.lzf_raw as usize
                } else {
                    n.buf.len()
                };
                entries + 7
            })
            .sum()
    }

    /// Heap bytes held: node headers and buffers (compressed ones at their
    /// compressed size), capacity included.
    pub fn heap_bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<Node>()
            + self.nodes.iter().map(|n| n.buf.allocated()).sum::<usize>()
    }

    /// The byte cap of a node.
    #[inline]
    fn cap_bytes(&self) -> usize {
        if self.fill < 0 {
            SIZE_CLASSES[(-self.fill - 1) as usize]
        } else {
            SAFETY_BYTES
        }
    }

    /// Whether a node of `count` entries and `bytes` bytes (uncompressed)
    /// may take one more entry of `sz` bytes.
    #[inline]
    fn fits_len(&self, count: u32, bytes: usize, sz: usize) -> bool {
        if count == 0 {
            return true;
        }
        let bytes_ok = bytes + sz <= self.cap_bytes();
        if self.fill < 0 {
            bytes_ok
        } else {
            bytes_ok && (count as i64) < self.fill as i64
        }
    }

    /// Whether `node` (raw or compressed) may take one more entry of `sz`
    /// bytes.
    #[inline]
    fn fits(&self, node: &Node, sz: usize) -> bool {
        self.fits_len(node.count, node.raw_len(), sz)
    }

    /// Whether nodes `a` and `b` may become one.
    fn may_merge(&self, a: &Node, b: &Node) -> bool {
        let bytes_ok = a.raw_len() + b.raw_len() <= self.cap_bytes();
        if self.fill < 0 {
            bytes_ok
        } else {
            bytes_ok && (a.count as i64 + b.count as i64) <= self.fill as i64
        }
    }

    // ------------------------------------------------------- compression

    /// Whether node `k` is an inner node, kept compressed.
    #[inline]
    fn is_inner(&self, k: usize) -> bool {
        let d = self.depth as usize;
        d != 0 && k >= d && k + d < self.nodes.len()
    }

    /// Brings node `k` to the rule: compressed if inner, raw otherwise.
    fn settle(&mut self, k: usize) {
        if self.is_inner(k) {
            self.nodes[k].compress();
        } else {
            self.nodes[k].decompress();
        }
    }

    /// After a change confined to nodes `[lo, hi)` (indexes after the
    /// change; nodes created, changed, dropped or decompressed all lie
    /// there) that took the node count from `old_nodes` to the current
    /// one, settles the changed nodes and those that crossed to the other
    /// side of the depth line. A node outside the range keeps its distance
    /// to one end and moves by the count change relative to the other, so
    /// only nodes near the ends can cross, and only these are visited: a
    /// change in the middle of a long list settles its own nodes only.
    fn settle_changed(&mut self, lo: usize, hi: usize, old_nodes: usize) {
        if self.depth == 0 {
            return;
        }
        let d = self.depth as usize;
        let n = self.nodes.len();
        let hi = hi.min(n);
        let lo = lo.min(hi);
        let grown = n.saturating_sub(old_nodes);
        // After the range: head distance changed; it crossed if it is
        // below `d` now or was before (up to `d + grown` now).
        let after_end = (d + grown).min(n);
        // Before the range: tail distance changed, symmetrically.
        let before_start = n.saturating_sub(d + grown);
        for k in lo..hi {
            self.settle(k);
        }
        for k in hi..after_end.max(hi) {
            self.settle(k);
        }
        for k in before_start.min(lo)..lo {
            self.settle(k);
        }
    }

    // ------------------------------------------------------------- ends

    /// Appends `v` at the tail.
    pub fn push_back(&mut self, v: &[u8]) {
        let sz = entry_size(v.len());
        let cap = self.cap_bytes();
        match self.nodes.back() {
            // The tail node is always raw.
            Some(last) if self.fits_len(last.count, last.buf.len(), sz) => {
                // INVARIANT: back() is Some in this arm.
                let last = self.nodes.back_mut().unwrap();
                let end = last.buf.len();
                last.insert_at(end, v, cap);
            }
            _ => {
                if let Some(last) = self.nodes.back_mut() {
                    // Sealed: give back the growth slack.
                    last.buf.shrink_to_fit();
                }
                self.nodes.push_back(Node::with(v));
                if self.depth != 0 {
                    // One node moved `depth` away from the tail.
                    if let Some(k) = self.nodes.len().checked_sub(self.depth as usize + 1) {
                        self.settle(k);
                    }
                }
            }
        }
        self.len += 1;
    }

    /// Prepends `v` at the head.
    pub fn push_front(&mut self, v: &[u8]) {
        let sz = entry_size(v.len());
        let cap = self.cap_bytes();
        match self.nodes.front() {
            // The head node is always raw.
            Some(first) if self.fits_len(first.count, first.buf.len(), sz) => {
                // INVARIANT: front() is Some in this arm.
                self.nodes.front_mut().unwrap().insert_at(0, v, cap);
            }
            _ => {
                if let Some(first) = self.nodes.front_mut() {
                    first.buf.shrink_to_fit();
                }
                self.nodes.push_front(Node::with(v));
                if self.depth != 0 && (self.depth as usize) < self.nodes.len() {
                    self.settle(self.depth as usize);
                }
            }
        }
        self.len += 1;
    }

    /// The first element.
    pub fn front(&self) -> Option<&[u8]> {
        let n = self.nodes.front()?;
        Some(n.entry_at(0).0)
    }

    /// The last element.
    pub fn back(&self) -> Option<&[u8]> {
        let n = self.nodes.back()?;
        debug_assert!(!n.is_lzf());
        let (_, p, l) = read_back(&n.buf, n.buf.len());
        Some(&n.buf[p..p + l])
    }

    /// Removes the first element; false if the list is empty.
    pub fn pop_front(&mut self) -> bool {
        let Some(n) = self.nodes.front_mut() else {
            return false;
        };
        n.remove_entries(0, 0, 1);
        if n.count == 0 {
            self.nodes.pop_front();
            if self.depth != 0 && (self.depth as usize) <= self.nodes.len() {
                // The node that was `depth` from the head is now inside.
                self.settle(self.depth as usize - 1);
            }
        }
        self.len -= 1;
        true
    }

    /// Removes the last element; false if the list is empty.
    pub fn pop_back(&mut self) -> bool {
        let Some(n) = self.nodes.back_mut() else {
            return false;
        };
        debug_assert!(!n.is_lzf());
        let start = read_back(&n.buf, n.buf.len()).0;
        n.buf.truncate(start);
        n.count -= 1;
        if n.count == 0 {
            self.nodes.pop_back();
            if self.depth != 0 {
                if let Some(k) = self.nodes.len().checked_sub(self.depth as usize) {
                    self.settle(k);
                }
            }
        }
        self.len -= 1;
        true
    }

    // ----------------------------------------------------------- middle

    /// Node and entry index of element `i < len`, walking the node counts
    /// from the nearer end.
    fn locate_node(&self, i: usize) -> (usize, usize) {
        debug_assert!(i < self.len);
        if i < self.len / 2 {
            let mut rest = i;
            let mut k = 0;
            while rest >= self.nodes[k].count as usize {
                rest -= self.nodes[k].count as usize;
                k += 1;
            }
            (k, rest)
        } else {
            // Count from the tail: element i is `back` places before the end.
            let mut back = self.len - i;
            let mut k = self.nodes.len() - 1;
            while back > self.nodes[k].count as usize {
                back -= self.nodes[k].count as usize;
                k -= 1;
            }
            (k, self.nodes[k].count as usize - back)
        }
    }

    /// Position of element `i < len`, its node decompressed for a change.
    fn locate_mut(&mut self, i: usize) -> Pos {
        let (node, idx) = self.locate_node(i);
        self.nodes[node].decompress();
        Pos {
            node,
            idx,
            off: self.nodes[node].offset_of(idx),
        }
    }

    /// Element `i`, or `None` past the end. Borrowed from a raw node; an
    /// element of a compressed node is a copy (the node is decompressed
    /// into a temporary, the list is left as it is).
    pub fn get(&self, i: usize) -> Option<Cow<'_, [u8]>> {
        if i >= self.len {
            return None;
        }
        let (k, idx) = self.locate_node(i);
        let node = &self.nodes[k];
        if !node.is_lzf() {
            return Some(Cow::Borrowed(node.entry_at(node.offset_of(idx)).0));
        }
        let mut tmp = Vec::new();
        node.inflate_into(&mut tmp);
        let off = offset_in(&tmp, node.count as usize, idx);
        Some(Cow::Owned(entry_in(&tmp, off).0.to_vec()))
    }

    /// Replaces element `i` with `v`; false (nothing changed) if `i` is
    /// past the end.
    pub fn set(&mut self, i: usize, v: &[u8]) -> bool {
        if i >= self.len {
            return false;
        }
        let old_nodes = self.nodes.len();
        let p = self.locate_mut(i);
        self.set_at(p, v);
        // Touched: the node, a split-off node and one alone between the
        // halves, and the neighbours a merge may take in.
        self.settle_changed(p.node.saturating_sub(1), p.node + 3, old_nodes);
        true
    }

    fn set_at(&mut self, p: Pos, v: &[u8]) {
        let node = &mut self.nodes[p.node];
        let (old, next) = node.entry_at(p.off);
        if old.len() == v.len() {
            let (ps, _) = read_fwd(&node.buf, p.off);
            node.buf[ps..ps + v.len()].copy_from_slice(v);
            return;
        }
        node.buf.drain(p.off..next);
        node.count -= 1;
        self.len -= 1;
        if node.count == 0 {
            self.nodes.remove(p.node);
            // Element i is now the first of node p.node (or past the end).
            self.insert_node_edge(p.node, v);
        } else {
            self.insert_pos(p, v);
            self.merge_around(p.node);
        }
    }

    /// Inserts `v` so that it becomes element `i` (`i == len` appends).
    ///
    /// # Panics
    /// If `i > len`.
    pub fn insert(&mut self, i: usize, v: &[u8]) {
        assert!(i <= self.len, "insert index {i} > len {}", self.len);
        if i == 0 {
            self.push_front(v);
        } else if i == self.len {
            self.push_back(v);
        } else {
            let old_nodes = self.nodes.len();
            let p = self.locate_mut(i);
            self.insert_pos(p, v);
            self.settle_changed(p.node.saturating_sub(1), p.node + 3, old_nodes);
        }
    }

    /// Inserts `v` before the first entry of node `k` (or at the tail when
    /// `k == nodes.len()`), where no node holds a partial neighbour.
    fn insert_node_edge(&mut self, k: usize, v: &[u8]) {
        let sz = entry_size(v.len());
        let cap = self.cap_bytes();
        if k > 0 && self.fits(&self.nodes[k - 1], sz) {
            let prev = &mut self.nodes[k - 1];
            prev.decompress();
            let end = prev.buf.len();
            prev.insert_at(end, v, cap);
        } else if k < self.nodes.len() && self.fits(&self.nodes[k], sz) {
            let next = &mut self.nodes[k];
            next.decompress();
            next.insert_at(0, v, cap);
        } else {
            self.nodes.insert(k, Node::with(v));
        }
        self.len += 1;
    }

    /// Inserts `v` before the element at `p` (in a raw node).
    fn insert_pos(&mut self, p: Pos, v: &[u8]) {
        let sz = entry_size(v.len());
        let cap = self.cap_bytes();
        if self.fits(&self.nodes[p.node], sz) {
            self.nodes[p.node].insert_at(p.off, v, cap);
            self.len += 1;
            return;
        }
        if p.idx == 0 {
            return self.insert_node_edge(p.node, v);
        }
        if p.idx == self.nodes[p.node].count as usize {
            return self.insert_node_edge(p.node + 1, v);
        }
        // Full node: split it at the insertion point; the element then
        // goes at the end of the first half, the start of the second, or
        // alone between them.
        let node = &mut self.nodes[p.node];
        let tail = Node {
            buf: NodeBuf::from(node.buf[p.off..].to_vec()),
            count: node.count - p.idx as u32,
            lzf_raw: 0,
        };
        node.buf.truncate(p.off);
        node.buf.shrink_to_fit();
        node.count = p.idx as u32;
        self.nodes.insert(p.node + 1, tail);
        self.insert_node_edge(p.node + 1, v);
    }

    /// Merges node `k` with its neighbours while they fit one node.
    fn merge_around(&mut self, k: usize) {
        let mut k = k.min(self.nodes.len().saturating_sub(1));
        if k > 0 && self.try_merge(k - 1) {
            k -= 1;
        }
        self.try_merge(k);
    }

    /// Merges node `k + 1` into node `k` if they fit one node.
    fn try_merge(&mut self, k: usize) -> bool {
        if k + 1 >= self.nodes.len() || !self.may_merge(&self.nodes[k], &self.nodes[k + 1]) {
            return false;
        }
        // INVARIANT: k + 1 < len, checked above.
        let b = self.nodes.remove(k + 1).unwrap();
        self.nodes[k].absorb(b);
        true
    }

    /// Drops the emptied nodes of `[lo, hi)` and merges neighbours that
    /// fit one node, from `lo - 1` through `hi` (the untouched neighbours
    /// included), in one linear pass: node headers move once, never once
    /// per dropped node.
    fn compact(&mut self, lo: usize, hi: usize) {
        let lo = lo.saturating_sub(1);
        let hi = (hi + 1).min(self.nodes.len());
        // `w` is the last kept node; nodes after it up to `r` are free slots.
        let mut w: Option<usize> = None;
        for r in lo..hi {
            if self.nodes[r].count == 0 {
                continue;
            }
            match w {
                Some(wi) if self.may_merge(&self.nodes[wi], &self.nodes[r]) => {
                    let b = std::mem::take(&mut self.nodes[r]);
                    self.nodes[wi].absorb(b);
                }
                _ => {
                    let wi = w.map_or(lo, |x| x + 1);
                    self.nodes.swap(wi, r);
                    w = Some(wi);
                }
            }
        }
        let keep_end = w.map_or(lo, |x| x + 1);
        self.nodes.drain(keep_end..hi);
    }

    /// Removes `n` elements starting at element `start` (clamped to the
    /// end). Whole nodes are dropped without touching (or decompressing)
    /// their bytes.
    pub fn remove_range(&mut self, start: usize, n: usize) {
        let n = n.min(self.len.saturating_sub(start));
        if n == 0 {
            return;
        }
        if start == 0 && n == self.len {
            self.nodes.clear();
            self.len = 0;
            return;
        }
        let old_nodes = self.nodes.len();
        let (k0, idx) = self.locate_node(start);
        let mut rest = n;
        let mut k = k0;
        if idx > 0 {
            let node = &mut self.nodes[k];
            node.decompress();
            let off = node.offset_of(idx);
            let to = (idx + rest).min(node.count as usize);
            node.remove_entries(idx, off, to);
            rest -= to - idx;
            k += 1;
        }
        let mut j = k;
        while j < self.nodes.len() && rest >= self.nodes[j].count as usize {
            rest -= self.nodes[j].count as usize;
            j += 1;
        }
        self.nodes.drain(k..j);
        if rest > 0 {
            let node = &mut self.nodes[k];
            node.decompress();
            node.remove_entries(0, 0, rest);
        }
        self.len -= n;
        self.merge_around(k.saturating_sub(1));
        // Touched: the trimmed nodes (k0, k) and what merges took in.
        self.settle_changed(k0.saturating_sub(2), k0 + 2, old_nodes);
    }

    /// Removes elements equal to `v`: the first `count` from the head
    /// (`count > 0`), the last `-count` from the tail (`count < 0`), or all
    /// (`count == 0`). Returns how many were removed.
    pub fn remove_matching(&mut self, v: &[u8], count: i64) -> usize {
        let mut quota = if count == 0 {
            usize::MAX
        } else {
            usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX)
        };
        let from_tail = count < 0;
        let mut removed = 0;
        let mut hits: Vec<(usize, usize)> = Vec::new();
        let mut tmp: Vec<u8> = Vec::new();
        let nn = self.nodes.len();
        let (mut lo, mut hi) = (usize::MAX, 0);
        for step in 0..nn {
            if quota == 0 {
                break;
            }
            let k = if from_tail { nn - 1 - step } else { step };
            let node = &mut self.nodes[k];
            hits.clear();
            {
                // A compressed node is searched in a temporary and only
                // kept decompressed when something goes.
                let buf: &[u8] = if node.is_lzf() {
                    node.inflate_into(&mut tmp);
                    &tmp
                } else {
                    &node.buf
                };
                let mut off = 0;
                while off < buf.len() {
                    let (e, next) = entry_in(buf, off);
                    if e == v {
                        hits.push((off, next));
                    }
                    off = next;
                }
            }
            if hits.is_empty() {
                continue;
            }
            if node.is_lzf() {
                node.buf = NodeBuf::from(std::mem::take(&mut tmp));
                node.lzf_raw = 0;
            }
            let take = hits.len().min(quota);
            let sel = if from_tail {
                &hits[hits.len() - take..]
            } else {
                &hits[..take]
            };
            // Compact in place: move the kept spans down over the removed.
            let mut w = sel[0].0;
            for (i, &(_, end)) in sel.iter().enumerate() {
                let next_start = sel.get(i + 1).map_or(node.buf.len(), |s| s.0);
                node.buf.copy_within(end..next_start, w);
                w += next_start - end;
            }
            node.buf.truncate(w);
            node.count -= take as u32;
            quota -= take;
            removed += take;
            lo = lo.min(k);
            hi = hi.max(k);
        }
        if removed == 0 {
            return 0;
        }
        self.len -= removed;
        self.compact(lo, hi + 1);
        // compact keeps fewer nodes than it was given, from `lo - 1` on.
        self.settle_changed(lo.saturating_sub(1), hi + 2, nn);
        removed
    }

    /// Index of the first element equal to `v`.
    pub fn position(&self, v: &[u8]) -> Option<usize> {
        let mut it = self.iter();
        let mut i = 0;
        while let Some(e) = it.next() {
            if e == v {
                return Some(i);
            }
            i += 1;
        }
        None
    }

    /// Copies of all the elements, from the head.
    pub fn to_vecs(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::with_capacity(self.len);
        self.iter().copy_into(self.len, &mut out);
        out
    }

    // -------------------------------------------------------- iteration

    /// Elements from the head.
    pub fn iter(&self) -> Iter<'_> {
        self.iter_from(0)
    }

    fn cursor(&self, rev: bool) -> Iter<'_> {
        Iter {
            ql: self,
            node: 0,
            pos: 0,
            left: 0,
            rev,
            tmp: Vec::new(),
            in_tmp: false,
        }
    }

    /// Elements from element `i` towards the tail.
    pub fn iter_from(&self, i: usize) -> Iter<'_> {
        let mut it = self.cursor(false);
        if i < self.len {
            let (k, idx) = self.locate_node(i);
            it.enter(k);
            it.pos = offset_in(it.buf(), self.nodes[k].count as usize, idx);
            it.left = self.len - i;
        }
        it
    }

    /// Elements from the tail towards the head.
    pub fn iter_rev(&self) -> Iter<'_> {
        match self.len {
            0 => self.cursor(true),
            n => self.iter_rev_from(n - 1),
        }
    }

    /// Elements from element `i` towards the head (from the tail when `i`
    /// is past the end).
    pub fn iter_rev_from(&self, i: usize) -> Iter<'_> {
        let mut it = self.cursor(true);
        if self.len == 0 {
            return it;
        }
        let i = i.min(self.len - 1);
        let (k, idx) = self.locate_node(i);
        it.enter(k);
        it.pos = offset_in(it.buf(), self.nodes[k].count as usize, idx + 1);
        it.left = i + 1;
        it
    }

    /// Checks the invariants; panics with a description if one fails.
    pub fn check(&self) {
        let mut total = 0;
        let mut tmp = Vec::new();
        for (k, n) in self.nodes.iter().enumerate() {
            assert!(n.count > 0, "node {k} empty");
            let buf: &[u8] = if n.is_lzf() {
                assert!(
                    n.buf.len() + MIN_COMPRESS_IMPROVE < n.lzf_raw as usize,
                    "node {k} compressed for nothing"
                );
                n.inflate_into(&mut tmp);
                &tmp
            } else {
                &n.buf
            };
            if self.is_inner(k) {
                if !n.is_lzf() {
                    let mut c = n.clone();
                    c.compress();
                    assert!(!c.is_lzf(), "inner node {k} of {} raw", self.nodes.len());
                }
            } else {
                assert!(
                    !n.is_lzf(),
                    "outer node {k} of {} compressed",
                    self.nodes.len()
                );
            }
            let mut off = 0;
            let mut c = 0;
            while off < buf.len() {
                off = entry_in(buf, off).1;
                c += 1;
            }
            assert_eq!(off, buf.len(), "node {k} entries overrun");
            assert_eq!(c, n.count as usize, "node {k} count");
            let mut end = buf.len();
            for _ in 0..c {
                end = read_back(buf, end).0;
            }
            assert_eq!(end, 0, "node {k} backward walk");
            total += c;
        }
        assert_eq!(total, self.len, "len");
    }
}

/// A cursor over elements, towards the tail ([`QuickList::iter_from`]) or
/// the head ([`QuickList::iter_rev_from`]). It lends each element
/// (`next` borrows the cursor): an element of a compressed node lives in
/// the cursor's buffer, where the node is decompressed when reached.
pub struct Iter<'a> {
    ql: &'a QuickList,
    node: usize,
    /// Forward: offset of the next entry; backward: end of the next entry.
    pos: usize,
    left: usize,
    rev: bool,
    /// The entries of the current node when it is compressed.
    tmp: Vec<u8>,
    in_tmp: bool,
}

impl Iter<'_> {
    /// Moves to node `k`, decompressing it into the buffer if needed.
    fn enter(&mut self, k: usize) {
        self.node = k;
        let n = &self.ql.nodes[k];
        self.in_tmp = n.is_lzf();
        if self.in_tmp {
            n.inflate_into(&mut self.tmp);
        }
    }

    #[inline]
    fn buf(&self) -> &[u8] {
        if self.in_tmp {
            &self.tmp
        } else {
            &self.ql.nodes[self.node].buf
        }
    }

    /// The next element, or `None` at the end.
    // A lending iterator cannot implement `Iterator`; see the type.
    #[allow(clippy::should_implement_trait)]
    #[inline]
    pub fn next(&mut self) -> Option<&[u8]> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        if !self.rev {
            if self.pos >= self.buf().len() {
                self.enter(self.node + 1);
                self.pos = 0;
            }
            let buf: &[u8] = if self.in_tmp {
                &self.tmp
            } else {
                &self.ql.nodes[self.node].buf
            };
            let (p, n) = read_fwd(buf, self.pos);
            self.pos = p + n + varint_len(n);
            Some(&buf[p..p + n])
        } else {
            if self.pos == 0 {
                self.enter(self.node - 1);
                self.pos = self.buf().len();
            }
            let buf: &[u8] = if self.in_tmp {
                &self.tmp
            } else {
                &self.ql.nodes[self.node].buf
            };
            let (start, p, l) = read_back(buf, self.pos);
            self.pos = start;
            Some(&buf[p..p + l])
        }
    }

    /// Appends copies of up to `n` more elements to `out`.
    pub fn copy_into(mut self, n: usize, out: &mut Vec<Vec<u8>>) {
        for _ in 0..n {
            match self.next() {
                Some(e) => out.push(e.to_vec()),
                None => break,
            }
        }
    }

    /// Elements left.
    pub fn len(&self) -> usize {
        self.left
    }

    pub fn is_empty(&self) -> bool {
        self.left == 0
    }
}

#[cfg(test)]
mod tests;
