//! `Packed`: a compact sequence of small strings and integers in one
//! exact-size heap block, in the spirit of Redis's listpack.
//!
//! Owns: the compact form of small sets with non-integer members (Redis
//! 7.2's `listpack` set encoding). A data structure only: the caller
//! decides when it grows too large (`set-max-listpack-entries/-value`).
//!
//! # Layout
//!
//! Empty: no allocation. Otherwise a 4-byte little-endian entry count, then
//! the entries in insertion order. Each entry starts with a tag byte:
//!
//! | tag | entry |
//! |---|---|
//! | `0x00..=0x7f` | the integer 0..=127 itself (1 byte) |
//! | `0x80..=0xbf` | a string of `tag - 0x80` (0..=63) bytes follows |
//! | `0xc0` | a LEB128 length, then a string of that length |
//! | `0xc1` / `0xc2` / `0xc3` / `0xc4` | a 16 / 24 / 32 / 64-bit little-endian integer |
//!
//! A string that is the canonical decimal form of an `i64` (Redis's
//! `string2ll`) is always stored as an integer, so equal members have one
//! encoding and lookups compare integers with integers and strings with
//! strings. Every entry is at most as long as Redis's listpack entry for
//! the same value (which also spends a back-length byte per entry), and the
//! header is 4 bytes where Redis spends 7.
//!
//! # Why this design
//!
//! Forward iteration only: sets never walk backwards, so no back-length.
//! Exact size, reallocated per insert and removal, as Redis's listpack:
//! the sequences are short and every change is an O(n) shift anyway. One
//! 16-byte handle keeps the set value inside the key table's 32-byte slot.

use std::fmt;

use crate::num::string2ll;

/// Redis's `LISTPACK_MAX_SAFETY_SIZE`: a packed block never grows past
/// this many bytes (callers convert to a hash table first).
pub const MAX_SAFE_BYTES: usize = 1 << 30;

const HEADER: usize = 4;
const TAG_STR6: u8 = 0x80;
const TAG_STRV: u8 = 0xc0;
const TAG_I16: u8 = 0xc1;
const TAG_I24: u8 = 0xc2;
const TAG_I32: u8 = 0xc3;
const TAG_I64: u8 = 0xc4;

/// One entry: an integer or a string that is not a canonical integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item<'a> {
    Int(i64),
    Str(&'a [u8]),
}

impl<'a> Item<'a> {
    /// The entry for `b`: an integer if `b` is a canonical one.
    #[inline]
    pub fn from_bytes(b: &'a [u8]) -> Item<'a> {
        match string2ll(b) {
            Some(n) => Item::Int(n),
            None => Item::Str(b),
        }
    }
}

/// Bytes an entry for `item` takes.
pub fn encoded_len(item: Item<'_>) -> usize {
    match item {
        Item::Int(n) if (0..=127).contains(&n) => 1,
        Item::Int(n) if i16::try_from(n).is_ok() => 3,
        Item::Int(n) if (-(1 << 23)..(1 << 23)).contains(&n) => 4,
        Item::Int(n) if i32::try_from(n).is_ok() => 5,
        Item::Int(_) => 9,
        Item::Str(s) if s.len() < 64 => 1 + s.len(),
        Item::Str(s) => 1 + leb_len(s.len()) + s.len(),
    }
}

fn leb_len(mut n: usize) -> usize {
    let mut k = 1;
    while n >= 0x80 {
        n >>= 7;
        k += 1;
    }
    k
}

fn encode(out: &mut Vec<u8>, item: Item<'_>) {
    match item {
        Item::Int(n) if (0..=127).contains(&n) => out.push(n as u8),
        Item::Int(n) if i16::try_from(n).is_ok() => {
            out.push(TAG_I16);
            out.extend_from_slice(&(n as i16).to_le_bytes());
        }
        Item::Int(n) if (-(1 << 23)..(1 << 23)).contains(&n) => {
            out.push(TAG_I24);
            out.extend_from_slice(&(n as i32).to_le_bytes()[..3]);
        }
        Item::Int(n) if i32::try_from(n).is_ok() => {
            out.push(TAG_I32);
            out.extend_from_slice(&(n as i32).to_le_bytes());
        }
        Item::Int(n) => {
            out.push(TAG_I64);
            out.extend_from_slice(&n.to_le_bytes());
        }
        Item::Str(s) if s.len() < 64 => {
            out.push(TAG_STR6 + s.len() as u8);
            out.extend_from_slice(s);
        }
        Item::Str(s) => {
            out.push(TAG_STRV);
            let mut n = s.len();
            while n >= 0x80 {
                out.push((n as u8 & 0x7f) | 0x80);
                n >>= 7;
            }
            out.push(n as u8);
            out.extend_from_slice(s);
        }
    }
}

/// Decodes the entry at `b[0..]`: the item and its encoded length.
fn decode(b: &[u8]) -> (Item<'_>, usize) {
    let tag = b[0];
    match tag {
        0x00..=0x7f => (Item::Int(i64::from(tag)), 1),
        0x80..=0xbf => {
            let n = (tag - TAG_STR6) as usize;
            (Item::Str(&b[1..1 + n]), 1 + n)
        }
        TAG_STRV => {
            let (mut n, mut shift, mut i) = (0usize, 0, 1);
            loop {
                let c = b[i];
                n |= ((c & 0x7f) as usize) << shift;
                i += 1;
                if c & 0x80 == 0 {
                    break;
                }
                shift += 7;
            }
            (Item::Str(&b[i..i + n]), i + n)
        }
        TAG_I16 => (Item::Int(i64::from(i16::from_le_bytes([b[1], b[2]]))), 3),
        TAG_I24 => {
            // Sign-extend the 24-bit value through the top byte.
            let v = i32::from_le_bytes([0, b[1], b[2], b[3]]) >> 8;
            (Item::Int(i64::from(v)), 4)
        }
        TAG_I32 => (
            Item::Int(i64::from(i32::from_le_bytes([b[1], b[2], b[3], b[4]]))),
            5,
        ),
        _ => {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[1..9]);
            (Item::Int(i64::from_le_bytes(a)), 9)
        }
    }
}

/// A packed sequence of items; see the module docs.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Packed {
    buf: Box<[u8]>,
}

impl Packed {
    pub fn new() -> Self {
        Packed::default()
    }

    /// Number of entries. O(1).
    #[inline]
    pub fn len(&self) -> usize {
        if self.buf.is_empty() {
            0
        } else {
            u32::from_le_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Total encoded bytes (header included); also the heap bytes used.
    #[inline]
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// Whether `extra` more bytes keep the block within [`MAX_SAFE_BYTES`]
    /// (Redis's `lpSafeToAdd`).
    pub fn safe_to_add(&self, extra: usize) -> bool {
        self.buf.len().max(HEADER) + extra <= MAX_SAFE_BYTES
    }

    fn set_len(buf: &mut [u8], n: usize) {
        // INVARIANT: n fits u32: the block is at most MAX_SAFE_BYTES long
        // and every entry takes at least one byte.
        buf[..HEADER].copy_from_slice(&(n as u32).to_le_bytes());
    }

    /// Appends `item` (a `Str` holding a canonical integer is stored as an
    /// `Int`). Does not check for duplicates. O(n) (reallocation).
    pub fn push(&mut self, item: Item<'_>) {
        let item = match item {
            Item::Str(s) => Item::from_bytes(s),
            i => i,
        };
        let n = self.len();
        let mut out = std::mem::take(&mut self.buf).into_vec();
        if out.is_empty() {
            out.extend_from_slice(&[0; HEADER]);
        }
        out.reserve_exact(encoded_len(item));
        encode(&mut out, item);
        Self::set_len(&mut out, n + 1);
        self.buf = out.into_boxed_slice();
    }

    /// Entries in order, with their byte offsets (for [`Packed::remove_at`]).
    pub fn iter_at(&self) -> IterAt<'_> {
        IterAt {
            buf: &self.buf,
            at: if self.buf.is_empty() { 0 } else { HEADER },
        }
    }

    /// Entries in order.
    pub fn iter(&self) -> impl Iterator<Item = Item<'_>> + '_ {
        self.iter_at().map(|(_, it)| it)
    }

    /// Offset of the entry equal to `item` (a `Str` holding a canonical
    /// integer matches the `Int`). O(n).
    pub fn find(&self, item: Item<'_>) -> Option<usize> {
        let item = match item {
            Item::Str(s) => Item::from_bytes(s),
            i => i,
        };
        self.iter_at().find(|(_, it)| *it == item).map(|(at, _)| at)
    }

    /// The entry at byte offset `at` (from [`Packed::iter_at`] or `find`).
    pub fn get_at(&self, at: usize) -> Item<'_> {
        decode(&self.buf[at..]).0
    }

    /// Removes the entry at byte offset `at`. O(n).
    pub fn remove_at(&mut self, at: usize) {
        self.remove_many(&[at]);
    }

    /// Removes the entries at the given byte offsets (ascending, distinct,
    /// each from [`Packed::iter_at`]) in one pass. O(n).
    pub fn remove_many(&mut self, ats: &[usize]) {
        if ats.is_empty() {
            return;
        }
        let n = self.len();
        debug_assert!(ats.len() <= n && ats.windows(2).all(|w| w[0] < w[1]));
        if ats.len() == n {
            self.buf = Box::default();
            return;
        }
        let mut out = Vec::with_capacity(self.buf.len());
        out.extend_from_slice(&self.buf[..HEADER]);
        let mut from = HEADER;
        for &at in ats {
            out.extend_from_slice(&self.buf[from..at]);
            from = at + decode(&self.buf[at..]).1;
        }
        out.extend_from_slice(&self.buf[from..]);
        Self::set_len(&mut out, n - ats.len());
        self.buf = out.into_boxed_slice();
    }

    /// Removes the entry equal to `item`; false if there is none.
    pub fn remove(&mut self, item: Item<'_>) -> bool {
        match self.find(item) {
            Some(at) => {
                self.remove_at(at);
                true
            }
            None => false,
        }
    }
}

/// Iterator over `(offset, item)`.
pub struct IterAt<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Iterator for IterAt<'a> {
    type Item = (usize, Item<'a>);
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.buf.len() {
            return None;
        }
        let at = self.at;
        let (item, len) = decode(&self.buf[at..]);
        self.at += len;
        Some((at, item))
    }
}

impl fmt::Debug for Packed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn encodings_and_sizes() {
        let mut p = Packed::new();
        assert_eq!(p.bytes(), 0);
        let items: Vec<Vec<u8>> = [
            "0",
            "127",
            "128",
            "-1",
            "-32768",
            "32768",
            "-8388608",
            "8388607",
            "8388608",
            "2147483647",
            "-2147483649",
            "9223372036854775807",
            "-9223372036854775808",
            "",
            "a",
            "01",
            "-0",
            "+1",
            "1.5",
            "9223372036854775808",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .chain([
            vec![b'x'; 63],
            vec![b'y'; 64],
            vec![b'z'; 200],
            vec![0; 20000],
        ])
        .collect();
        for it in &items {
            p.push(Item::Str(it));
        }
        assert_eq!(p.len(), items.len());
        let back: Vec<Vec<u8>> = p
            .iter()
            .map(|it| match it {
                Item::Int(n) => n.to_string().into_bytes(),
                Item::Str(s) => s.to_vec(),
            })
            .collect();
        assert_eq!(back, items);
        assert_eq!(p.get_at(4), Item::Int(0));
        assert!(p.find(Item::Str(b"127")).is_some());
        assert_eq!(p.find(Item::Int(127)), p.find(Item::Str(b"127")));
        assert!(p.find(Item::Str(b"126")).is_none());
        assert!(matches!(
            p.get_at(p.find(Item::Str(b"01")).unwrap()),
            Item::Str(b"01")
        ));
        assert_eq!(encoded_len(Item::Int(5)), 1);
        assert_eq!(encoded_len(Item::Str(b"member:1")), 9);
        assert_eq!(encoded_len(Item::Str(&[0; 64])), 66);
        // Removal of everything frees the block.
        while let Some((at, _)) = p.iter_at().next() {
            p.remove_at(at);
        }
        assert!(p.is_empty());
        assert_eq!(p.bytes(), 0);
    }

    fn item_strategy() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            any::<i64>().prop_map(|n| n.to_string().into_bytes()),
            (-200i64..200).prop_map(|n| n.to_string().into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..80),
            "[a-c]{0,3}".prop_map(String::into_bytes),
        ]
    }

    proptest! {
        #[test]
        fn model(ops in proptest::collection::vec((0u8..3, item_strategy()), 0..120)) {
            let mut p = Packed::new();
            let mut m: Vec<Vec<u8>> = Vec::new();
            for (op, v) in ops {
                match op {
                    0 => { p.push(Item::Str(&v)); m.push(v); }
                    1 => {
                        let pos = m.iter().position(|x| *x == v);
                        prop_assert_eq!(p.remove(Item::Str(&v)), pos.is_some());
                        if let Some(i) = pos { m.remove(i); }
                    }
                    _ => {
                        // Batch removal of every other entry.
                        let ats: Vec<usize> = p.iter_at().map(|(a, _)| a).step_by(2).collect();
                        p.remove_many(&ats);
                        let mut i = 0;
                        m.retain(|_| { i += 1; i % 2 == 0 });
                    }
                }
                prop_assert_eq!(p.len(), m.len());
                let back: Vec<Vec<u8>> = p.iter().map(|it| match it {
                    Item::Int(n) => n.to_string().into_bytes(),
                    Item::Str(s) => s.to_vec(),
                }).collect();
                prop_assert_eq!(&back, &m);
            }
        }
    }
}
