//! `IntSet`: a sorted set of integers packed at the narrowest width that
//! holds them all, after Redis's `intset.c`.
//!
//! Owns: the compact form of sets whose members are all integers (Redis's
//! `intset` encoding). A data structure only: the caller decides when a set
//! is too large for it (`set-max-intset-entries`).
//!
//! # Layout
//!
//! One exact-size heap block: a width byte (2, 4 or 8) followed by the
//! members in ascending order, each a little-endian integer of that width.
//! The empty set allocates nothing. Adding a member that does not fit the
//! current width *upgrades* the whole block to the member's width (as
//! Redis does; widths never shrink on removal, also as Redis).
//!
//! # Invariants
//!
//! * `buf` is empty, or `buf[0]` is 2, 4 or 8 and `buf.len() - 1` is a
//!   multiple of it.
//! * Members are strictly ascending (no duplicates).
//!
//! # Why this design
//!
//! * Exact size, reallocated on every insert and removal, as Redis's
//!   `intsetResize`: these sets are small (512 members by default), the
//!   insert is an O(n) shift anyway, and no spare capacity is paid for per
//!   key. The header is 1 byte where Redis spends 8.
//! * A byte block rather than `Vec<i16>/Vec<i32>/Vec<i64>`: one 16-byte
//!   handle, so the set value fits the key table's 32-byte slot.

use std::fmt;

/// A sorted, packed set of `i64`; see the module docs.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct IntSet {
    buf: Box<[u8]>,
}

/// The narrowest width (in bytes) that holds `v`.
#[inline]
fn width_for(v: i64) -> usize {
    if i16::try_from(v).is_ok() {
        2
    } else if i32::try_from(v).is_ok() {
        4
    } else {
        8
    }
}

#[inline]
fn read(b: &[u8], width: usize) -> i64 {
    match width {
        2 => i64::from(i16::from_le_bytes([b[0], b[1]])),
        4 => i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        _ => i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
    }
}

#[inline]
fn write(out: &mut Vec<u8>, v: i64, width: usize) {
    // Truncation is exact: `v` fits `width` (checked by the callers).
    match width {
        2 => out.extend_from_slice(&(v as i16).to_le_bytes()),
        4 => out.extend_from_slice(&(v as i32).to_le_bytes()),
        _ => out.extend_from_slice(&v.to_le_bytes()),
    }
}

impl IntSet {
    /// The empty set (no allocation).
    pub fn new() -> Self {
        IntSet::default()
    }

    /// Width in bytes of each member (2 when empty).
    #[inline]
    pub fn width(&self) -> usize {
        self.buf.first().map_or(2, |&w| w as usize)
    }

    /// Number of members. O(1).
    #[inline]
    pub fn len(&self) -> usize {
        if self.buf.is_empty() {
            0
        } else {
            (self.buf.len() - 1) / self.width()
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The `i`-th smallest member. Panics if `i >= len()`.
    #[inline]
    pub fn get(&self, i: usize) -> i64 {
        let w = self.width();
        read(&self.buf[1 + i * w..], w)
    }

    /// Smallest and largest member; `None` when empty.
    pub fn min(&self) -> Option<i64> {
        (!self.is_empty()).then(|| self.get(0))
    }
    pub fn max(&self) -> Option<i64> {
        (!self.is_empty()).then(|| self.get(self.len() - 1))
    }

    /// Binary search: `Ok(index)` if present, else `Err(insertion index)`.
    fn search(&self, v: i64) -> Result<usize, usize> {
        let n = self.len();
        if n == 0 {
            return Err(0);
        }
        // Out-of-width values are never present (Redis's fast path).
        if width_for(v) > self.width() {
            return Err(if v < 0 { 0 } else { n });
        }
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.get(mid).cmp(&v) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    /// Whether `v` is a member. O(log n).
    pub fn contains(&self, v: i64) -> bool {
        self.search(v).is_ok()
    }

    /// Adds `v`; false if it was already a member. O(n) (a shift and a
    /// reallocation; an upgrade rewrites every member).
    pub fn insert(&mut self, v: i64) -> bool {
        let w = self.width();
        let nw = width_for(v);
        if !self.is_empty() && nw <= w {
            let Err(at) = self.search(v) else {
                return false;
            };
            let mut out = std::mem::take(&mut self.buf).into_vec();
            out.reserve_exact(w);
            let pos = 1 + at * w;
            let mut enc = Vec::with_capacity(w);
            write(&mut enc, v, w);
            out.splice(pos..pos, enc);
            self.buf = out.into_boxed_slice();
            return true;
        }
        // Empty, or an upgrade: a value wider than every member is smaller
        // or larger than all of them, so it goes at one end.
        let nw = nw.max(w);
        let n = self.len();
        let mut out = Vec::with_capacity(1 + (n + 1) * nw);
        out.push(nw as u8);
        if v < 0 && n > 0 {
            write(&mut out, v, nw);
        }
        for i in 0..n {
            write(&mut out, self.get(i), nw);
        }
        if v >= 0 || n == 0 {
            write(&mut out, v, nw);
        }
        self.buf = out.into_boxed_slice();
        true
    }

    /// Removes `v`; false if it was not a member. O(n).
    pub fn remove(&mut self, v: i64) -> bool {
        let Ok(at) = self.search(v) else {
            return false;
        };
        if self.len() == 1 {
            self.buf = Box::default();
            return true;
        }
        let w = self.width();
        let mut out = std::mem::take(&mut self.buf).into_vec();
        let pos = 1 + at * w;
        out.drain(pos..pos + w);
        self.buf = out.into_boxed_slice();
        true
    }

    /// Members in ascending order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = i64> + '_ {
        (0..self.len()).map(move |i| self.get(i))
    }

    /// Heap bytes used (exact: the block has no spare capacity).
    pub fn heap_bytes(&self) -> usize {
        self.buf.len()
    }
}

impl FromIterator<i64> for IntSet {
    fn from_iter<T: IntoIterator<Item = i64>>(iter: T) -> Self {
        let mut v: Vec<i64> = iter.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        let w = v.iter().map(|&x| width_for(x)).max().unwrap_or(2);
        if v.is_empty() {
            return IntSet::new();
        }
        let mut out = Vec::with_capacity(1 + v.len() * w);
        out.push(w as u8);
        for x in v {
            write(&mut out, x, w);
        }
        IntSet {
            buf: out.into_boxed_slice(),
        }
    }
}

impl fmt::Debug for IntSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn widths_upgrade_like_redis() {
        let mut s = IntSet::new();
        assert_eq!(s.heap_bytes(), 0);
        assert!(s.insert(5));
        assert!(!s.insert(5));
        assert_eq!(s.width(), 2);
        assert_eq!(s.heap_bytes(), 3);
        assert!(s.insert(-32768));
        assert_eq!(s.width(), 2);
        assert!(s.insert(65536));
        assert_eq!(s.width(), 4);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![-32768, 5, 65536]);
        assert!(s.insert(i64::MIN));
        assert_eq!(s.width(), 8);
        assert_eq!(
            s.iter().collect::<Vec<_>>(),
            vec![i64::MIN, -32768, 5, 65536]
        );
        assert_eq!(s.heap_bytes(), 1 + 4 * 8);
        // Removal keeps the width, as Redis.
        assert!(s.remove(i64::MIN));
        assert!(!s.remove(i64::MIN));
        assert_eq!(s.width(), 8);
        assert!(s.contains(65536));
        assert!(!s.contains(i64::MAX));
        assert_eq!((s.min(), s.max()), (Some(-32768), Some(65536)));
        for v in [-32768, 5, 65536] {
            assert!(s.remove(v));
        }
        assert!(s.is_empty());
        assert_eq!(s.heap_bytes(), 0);
    }

    proptest! {
        #[test]
        fn model(ops in proptest::collection::vec((any::<bool>(), prop_oneof![
            -40i64..40, any::<i16>().prop_map(i64::from), any::<i32>().prop_map(i64::from),
            any::<i64>()]), 0..200)) {
            let mut s = IntSet::new();
            let mut m = BTreeSet::new();
            for (add, v) in ops {
                if add {
                    prop_assert_eq!(s.insert(v), m.insert(v));
                } else {
                    prop_assert_eq!(s.remove(v), m.remove(&v));
                }
                prop_assert_eq!(s.len(), m.len());
                prop_assert!(s.iter().eq(m.iter().copied()));
                prop_assert_eq!(s.min(), m.first().copied());
            }
            let rebuilt: IntSet = m.iter().copied().collect();
            prop_assert!(rebuilt.iter().eq(s.iter()));
        }
    }
}
