//! `ZPack`: the compact form of a small sorted set (Redis's `listpack`
//! encoding): one contiguous buffer of `(member, score)` entries sorted by
//! `(score, member)`, scanned linearly. Used below the
//! `zset-max-listpack-*` thresholds, where a linear scan over a few cache
//! lines beats any index and costs no per-member allocation.
//!
//! # Layout
//!
//! ```text
//! [count: u32 LE] entry* ;  entry = [len: LEB128][member][score: f64 LE][len: reversed LEB128]
//! ```
//!
//! The trailing length (its LEB128 bytes in reverse order, as listpack's
//! `backlen`) lets iteration run backwards from the end (ZREVRANGE) without
//! an index. Scores are stored as raw `f64` (never NaN): exact, and no
//! parsing on reads. Overhead per entry: 10 bytes for members under 128
//! bytes.
//!
//! Scores are stored as `-0`-free doubles, as Redis's listpack does.
//!
//! Invariants: `count` is the number of entries; entries are strictly
//! increasing by [`crate::ranked::cmp_key`]; members are unique.

use std::cmp::Ordering;

use crate::ranked::cmp_key;

const HEADER: usize = 4;

/// See the module docs.
#[derive(Clone, PartialEq)]
pub struct ZPack {
    buf: Vec<u8>,
}

impl Default for ZPack {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for ZPack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

fn put_varint(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Reads a LEB128 at `p`: (value, bytes).
fn get_varint(b: &[u8], p: usize) -> (usize, usize) {
    let mut n = 0usize;
    let mut i = 0;
    loop {
        let c = b[p + i];
        n |= ((c & 0x7f) as usize) << (7 * i);
        i += 1;
        if c & 0x80 == 0 {
            return (n, i);
        }
    }
}

/// Reads a reversed LEB128 that ends just before `end`: (value, bytes).
fn get_backlen(b: &[u8], end: usize) -> (usize, usize) {
    let mut n = 0usize;
    let mut i = 0;
    loop {
        let c = b[end - 1 - i];
        n |= ((c & 0x7f) as usize) << (7 * i);
        i += 1;
        if c & 0x80 == 0 {
            return (n, i);
        }
    }
}

fn encode_entry(out: &mut Vec<u8>, member: &[u8], score: f64) {
    // Redis's listpack stores scores as strings and writes -0 as "0": a
    // compact set has no negative zero (adding +0 turns -0 into +0).
    let score = score + 0.0;
    put_varint(out, member.len());
    out.extend_from_slice(member);
    out.extend_from_slice(&score.to_le_bytes());
    let start = out.len();
    put_varint(out, member.len());
    out[start..].reverse();
}

impl ZPack {
    pub fn new() -> Self {
        ZPack {
            buf: vec![0; HEADER],
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        u32::from_le_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn set_len(&mut self, n: usize) {
        // INVARIANT: a listpack never holds 2^32 entries (the thresholds
        // convert long before, and `insert` asserts).
        self.buf[..HEADER].copy_from_slice(&(n as u32).to_le_bytes());
    }

    /// Bytes of the buffer (by capacity).
    pub fn heap_bytes(&self) -> usize {
        self.buf.capacity()
    }

    /// Decodes the entry at `p`: (member, score, offset of the next entry).
    #[inline]
    fn entry(&self, p: usize) -> (&[u8], f64, usize) {
        let (l, n) = get_varint(&self.buf, p);
        let m = p + n;
        let s = m + l;
        let mut sb = [0u8; 8];
        sb.copy_from_slice(&self.buf[s..s + 8]);
        (&self.buf[m..s], f64::from_le_bytes(sb), s + 8 + n)
    }

    /// Start of the entry that ends at `end`.
    #[inline]
    fn entry_before(&self, end: usize) -> usize {
        let (l, n) = get_backlen(&self.buf, end);
        end - (2 * n + l + 8)
    }

    /// Offset, score and rank of `member`.
    fn find(&self, member: &[u8]) -> Option<(usize, f64, usize)> {
        let mut p = HEADER;
        let mut r = 0;
        while p < self.buf.len() {
            let (m, s, next) = self.entry(p);
            if m == member {
                return Some((p, s, r));
            }
            p = next;
            r += 1;
        }
        None
    }

    /// Offset of the entry at rank `r` (the end if `r == len`).
    fn offset_of(&self, r: usize) -> usize {
        let mut p = HEADER;
        for _ in 0..r {
            p = self.entry(p).2;
        }
        p
    }

    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.find(member).map(|(_, s, _)| s)
    }

    /// Ascending rank and score of `member`.
    pub fn rank(&self, member: &[u8]) -> Option<(usize, f64)> {
        self.find(member).map(|(_, s, r)| (r, s))
    }

    /// Inserts or moves `member`; returns the previous score. O(n).
    pub fn insert(&mut self, member: &[u8], score: f64) -> Option<f64> {
        debug_assert!(!score.is_nan());
        let old = self.remove(member);
        let mut p = HEADER;
        while p < self.buf.len() {
            let (m, s, next) = self.entry(p);
            if cmp_key(score, member, s, m) == Ordering::Less {
                break;
            }
            p = next;
        }
        let mut e = Vec::with_capacity(member.len() + 12);
        encode_entry(&mut e, member, score);
        self.buf.splice(p..p, e);
        let n = self.len() + 1;
        assert!(n < u32::MAX as usize, "listpack full");
        self.set_len(n);
        old
    }

    /// Appends an entry known to sort after every entry (building from a
    /// sorted source, e.g. a conversion).
    pub fn push_sorted(&mut self, member: &[u8], score: f64) {
        encode_entry(&mut self.buf, member, score);
        let n = self.len() + 1;
        self.set_len(n);
    }

    /// Removes `member`; returns its score. O(n).
    pub fn remove(&mut self, member: &[u8]) -> Option<f64> {
        let (p, s, _) = self.find(member)?;
        let end = self.entry(p).2;
        self.buf.drain(p..end);
        let n = self.len() - 1;
        self.set_len(n);
        self.shrink();
        Some(s)
    }

    /// Removes the entries of ascending ranks `start..end`.
    pub fn remove_ranks(&mut self, start: usize, end: usize) {
        let end = end.min(self.len());
        if start >= end {
            return;
        }
        let a = self.offset_of(start);
        let mut b = a;
        for _ in start..end {
            b = self.entry(b).2;
        }
        self.buf.drain(a..b);
        let n = self.len() - (end - start);
        self.set_len(n);
        self.shrink();
    }

    fn shrink(&mut self) {
        if self.buf.capacity() > 2 * self.buf.len() + 64 {
            self.buf.shrink_to_fit();
        }
    }

    /// The number of leading entries for which `pred` holds (`pred` holds
    /// on a prefix only).
    pub fn partition_point(&self, mut pred: impl FnMut(&[u8], f64) -> bool) -> usize {
        self.iter().take_while(|(m, s)| pred(m, *s)).count()
    }

    /// The entry at ascending rank `r`.
    pub fn get(&self, r: usize) -> Option<(&[u8], f64)> {
        if r >= self.len() {
            return None;
        }
        let (m, s, _) = self.entry(self.offset_of(r));
        Some((m, s))
    }

    /// Entries from ascending rank `start` up (`rev == false`) or down.
    pub fn iter_from(&self, start: usize, rev: bool) -> Iter<'_> {
        if start >= self.len() {
            return Iter {
                pack: self,
                pos: if rev { HEADER } else { self.buf.len() },
                rev,
            };
        }
        let p = self.offset_of(start);
        Iter {
            pack: self,
            pos: if rev { self.entry(p).2 } else { p },
            rev,
        }
    }

    pub fn iter(&self) -> Iter<'_> {
        Iter {
            pack: self,
            pos: HEADER,
            rev: false,
        }
    }

    /// All entries from the highest down (O(1) to start, unlike
    /// `iter_from(len - 1, true)`, which seeks from the front).
    pub fn iter_rev(&self) -> Iter<'_> {
        Iter {
            pack: self,
            pos: self.buf.len(),
            rev: true,
        }
    }
}

/// Iterator over a [`ZPack`]; `pos` is the next entry's start (forward) or
/// the end of the next entry (backward).
pub struct Iter<'a> {
    pack: &'a ZPack,
    pos: usize,
    rev: bool,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a [u8], f64);

    fn next(&mut self) -> Option<Self::Item> {
        let pack = self.pack;
        if self.rev {
            if self.pos <= HEADER {
                return None;
            }
            let p = pack.entry_before(self.pos);
            let (m, s, _) = pack.entry(p);
            self.pos = p;
            Some((m, s))
        } else {
            if self.pos >= pack.buf.len() {
                return None;
            }
            let (m, s, next) = pack.entry(self.pos);
            self.pos = next;
            Some((m, s))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_insert_update_remove() {
        let mut z = ZPack::new();
        assert_eq!(z.insert(b"b", 2.0), None);
        assert_eq!(z.insert(b"a", 2.0), None);
        assert_eq!(z.insert(&[b'x'; 300], 1.0), None);
        assert_eq!(z.insert(b"c", -1.0), None);
        assert_eq!(z.len(), 4);
        let v: Vec<_> = z.iter().map(|(m, s)| (m.len(), s)).collect();
        assert_eq!(v, vec![(1, -1.0), (300, 1.0), (1, 2.0), (1, 2.0)]);
        assert_eq!(z.rank(b"a"), Some((2, 2.0)));
        assert_eq!(z.insert(b"a", 5.0), Some(2.0));
        assert_eq!(z.get(3), Some((&b"a"[..], 5.0)));
        let rev: Vec<_> = z.iter_from(3, true).map(|(m, _)| m.len()).collect();
        assert_eq!(rev, vec![1, 1, 300, 1]);
        assert!(z.iter_rev().eq(z.iter_from(3, true)));
        assert_eq!(ZPack::new().iter_rev().count(), 0);
        let rev: Vec<_> = z.iter_from(1, true).map(|(m, _)| m.len()).collect();
        assert_eq!(rev, vec![300, 1]);
        assert_eq!(z.partition_point(|_, s| s < 2.0), 2);
        assert_eq!(z.remove(&[b'x'; 300]), Some(1.0));
        assert_eq!(z.remove(b"zz"), None);
        z.remove_ranks(0, 2);
        assert_eq!(z.len(), 1);
        assert_eq!(z.get(0), Some((&b"a"[..], 5.0)));
        assert_eq!(z.iter_from(5, false).count(), 0);
        assert_eq!(z.iter_from(5, true).count(), 0);
    }
}
