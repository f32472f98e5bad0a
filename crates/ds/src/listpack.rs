//! `Listpack`: a compact sequence of byte strings in one contiguous
//! allocation, after Redis's `listpack.c` (same idea, not the same bytes).
//!
//! Owns: the compact encoding of small collections (a hash's field/value
//! pairs today; any small sequence of strings). It is a data structure
//! only: it knows nothing of encodings' thresholds, commands or replies.
//!
//! # Layout
//!
//! One exact-size heap buffer (`Box<[u8]>`, 16-byte handle, no spare
//! capacity): a 2-byte little-endian entry count, then the entries back to
//! back. The empty listpack allocates nothing. Each entry is a header byte,
//! maybe a few length/integer bytes, then the string's bytes:
//!
//! | first byte  | entry                                   | size      |
//! |-------------|-----------------------------------------|-----------|
//! | `0xxxxxxx`  | integer 0..=127                         | 1         |
//! | `10llllll`  | string of 0..=63 bytes                  | 1 + len   |
//! | `110xxxxx`  | 13-bit signed integer (+1 byte)         | 2         |
//! | `1110llll`  | string of 64..=4095 bytes (+1 len byte) | 2 + len   |
//! | `0xF0`      | i16 (2 bytes LE)                        | 3         |
//! | `0xF1`      | i24 (3 bytes LE)                        | 4         |
//! | `0xF2`      | i32 (4 bytes LE)                        | 5         |
//! | `0xF3`      | i64 (8 bytes LE)                        | 9         |
//! | `0xF4`      | string, u32 LE length                   | 5 + len   |
//!
//! A string is stored as an integer exactly when it is the canonical
//! decimal form of an `i64` ([`crate::string2ll`]), so reading an entry back
//! gives the same bytes, and `"7"` costs one byte. A short field or value
//! of a small hash costs its length plus one byte.
//!
//! # Invariants
//!
//! * The buffer is empty, or holds the count header and exactly that many
//!   well-formed entries (count [`COUNT_UNKNOWN`] when there are that many
//!   or more: then the entries are counted by walking, as Redis does past
//!   65535).
//! * Only [`Listpack`] writes the buffer, so offsets handed out by it point
//!   at entry starts until the next mutation.
//!
//! # Why this design
//!
//! * **Forward-only**: Redis keeps a back-length byte per entry to walk
//!   backwards (lists pop from the tail). Hashes and sets never walk
//!   backwards, so we save that byte per entry; a user that needs the last
//!   entry walks from the front, which is bounded by the small size these
//!   buffers are kept at.
//! * **Exact size, reallocated on every change** (as Redis's `lpInsert`):
//!   no spare capacity is carried by millions of small values; a change
//!   costs one `realloc` plus a `memmove` of at most a few kilobytes.
//! * **No `unsafe`**: entries are decoded with bounds-checked slices.

use crate::num::string2ll;

/// Count header value meaning "this many or more: walk to count".
pub const COUNT_UNKNOWN: u16 = u16::MAX;

/// Bytes of the count header.
const HEADER: usize = 2;

/// The largest total size a listpack is allowed to reach (Redis's
/// `LISTPACK_MAX_SAFETY_SIZE`); callers convert to a scalable encoding
/// before [`Listpack::safe_to_add`] says no.
pub const MAX_SAFE_BYTES: usize = 1 << 30;

/// One decoded entry: a string, or an integer that stands for its
/// canonical decimal form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LpEntry<'a> {
    Str(&'a [u8]),
    Int(i64),
}

impl<'a> LpEntry<'a> {
    /// Length of the string form in bytes.
    pub fn str_len(&self) -> usize {
        match self {
            LpEntry::Str(s) => s.len(),
            LpEntry::Int(n) => itoa::Buffer::new().format(*n).len(),
        }
    }

    /// Calls `f` with the string form, without allocating.
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        match self {
            LpEntry::Str(s) => f(s),
            LpEntry::Int(n) => f(itoa::Buffer::new().format(*n).as_bytes()),
        }
    }

    /// The string form as a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        self.with_bytes(|b| b.to_vec())
    }

    /// True if the string form equals `bytes`; `bytes_int` must be
    /// `string2ll(bytes)` (computed once by the caller for a search).
    #[inline]
    pub fn matches(&self, bytes: &[u8], bytes_int: Option<i64>) -> bool {
        match self {
            LpEntry::Str(s) => *s == bytes,
            LpEntry::Int(n) => bytes_int == Some(*n),
        }
    }
}

/// A compact sequence of strings; see the module docs.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Listpack {
    buf: Box<[u8]>,
}

/// How `item` will be encoded: an integer, or a string.
enum Enc<'a> {
    Int(i64),
    Str(&'a [u8]),
}

fn classify(item: &[u8]) -> Enc<'_> {
    if item.len() <= 20 {
        if let Some(n) = string2ll(item) {
            return Enc::Int(n);
        }
    }
    Enc::Str(item)
}

/// Encoded size of `item`.
fn encoded_len(item: &[u8]) -> usize {
    match classify(item) {
        Enc::Int(n) => int_len(n),
        Enc::Str(s) => str_header_len(s.len()) + s.len(),
    }
}

fn int_len(n: i64) -> usize {
    match n {
        0..=127 => 1,
        -4096..=4095 => 2,
        -32768..=32767 => 3,
        -8_388_608..=8_388_607 => 4,
        -2_147_483_648..=2_147_483_647 => 5,
        _ => 9,
    }
}

fn str_header_len(len: usize) -> usize {
    match len {
        0..=63 => 1,
        64..=4095 => 2,
        _ => 5,
    }
}

/// Appends the encoding of `item` to `out`.
fn encode(item: &[u8], out: &mut Vec<u8>) {
    match classify(item) {
        Enc::Int(n) => match int_len(n) {
            1 => out.push(n as u8),
            2 => {
                let u = (n as u16) & 0x1FFF;
                out.push(0xC0 | (u >> 8) as u8);
                out.push(u as u8);
            }
            3 => {
                out.push(0xF0);
                out.extend_from_slice(&(n as i16).to_le_bytes());
            }
            4 => {
                out.push(0xF1);
                out.extend_from_slice(&(n as i32).to_le_bytes()[..3]);
            }
            5 => {
                out.push(0xF2);
                out.extend_from_slice(&(n as i32).to_le_bytes());
            }
            _ => {
                out.push(0xF3);
                out.extend_from_slice(&n.to_le_bytes());
            }
        },
        Enc::Str(s) => {
            let len = s.len();
            match str_header_len(len) {
                1 => out.push(0x80 | len as u8),
                2 => {
                    out.push(0xE0 | (len >> 8) as u8);
                    out.push(len as u8);
                }
                _ => {
                    out.push(0xF4);
                    // INVARIANT: listpacks stay below MAX_SAFE_BYTES (1 GiB),
                    // so a string's length fits 32 bits.
                    out.extend_from_slice(&(len as u32).to_le_bytes());
                }
            }
            out.extend_from_slice(s);
        }
    }
}

/// Decodes the entry at `off` of `buf`: the entry and the offset after it.
/// Panics on a malformed buffer, which only a bug in this module can make.
#[inline]
fn decode(buf: &[u8], off: usize) -> (LpEntry<'_>, usize) {
    let b = buf[off];
    match b {
        0x00..=0x7F => (LpEntry::Int(i64::from(b)), off + 1),
        0x80..=0xBF => {
            let len = usize::from(b & 0x3F);
            let start = off + 1;
            (LpEntry::Str(&buf[start..start + len]), start + len)
        }
        0xC0..=0xDF => {
            let u = (u16::from(b & 0x1F) << 8) | u16::from(buf[off + 1]);
            // Sign-extend 13 bits.
            let n = ((u << 3) as i16) >> 3;
            (LpEntry::Int(i64::from(n)), off + 2)
        }
        0xE0..=0xEF => {
            let len = (usize::from(b & 0x0F) << 8) | usize::from(buf[off + 1]);
            let start = off + 2;
            (LpEntry::Str(&buf[start..start + len]), start + len)
        }
        0xF0 => {
            let n = i16::from_le_bytes([buf[off + 1], buf[off + 2]]);
            (LpEntry::Int(i64::from(n)), off + 3)
        }
        0xF1 => {
            let raw = [0, buf[off + 1], buf[off + 2], buf[off + 3]];
            // Bytes shifted up one place, then an arithmetic shift back.
            let n = i32::from_le_bytes(raw) >> 8;
            (LpEntry::Int(i64::from(n)), off + 4)
        }
        0xF2 => {
            let mut raw = [0; 4];
            raw.copy_from_slice(&buf[off + 1..off + 5]);
            (LpEntry::Int(i64::from(i32::from_le_bytes(raw))), off + 5)
        }
        0xF3 => {
            let mut raw = [0; 8];
            raw.copy_from_slice(&buf[off + 1..off + 9]);
            (LpEntry::Int(i64::from_le_bytes(raw)), off + 9)
        }
        0xF4 => {
            let mut raw = [0; 4];
            raw.copy_from_slice(&buf[off + 1..off + 5]);
            let len = u32::from_le_bytes(raw) as usize;
            let start = off + 5;
            (LpEntry::Str(&buf[start..start + len]), start + len)
        }
        // INVARIANT: only `encode` writes entries; it never emits these.
        _ => panic!("listpack: corrupt entry header {b:#x}"),
    }
}

impl Listpack {
    /// The empty listpack; allocates nothing.
    pub fn new() -> Self {
        Listpack { buf: Box::new([]) }
    }

    /// Number of entries. O(1) below 65535 entries, O(n) from there.
    pub fn len(&self) -> usize {
        if self.buf.is_empty() {
            return 0;
        }
        let c = u16::from_le_bytes([self.buf[0], self.buf[1]]);
        if c == COUNT_UNKNOWN {
            self.iter().count()
        } else {
            usize::from(c)
        }
    }

    pub fn is_empty(&self) -> bool {
        self.buf.len() <= HEADER
    }

    /// Total bytes of the buffer (the heap memory it owns, before the
    /// allocator's rounding).
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// True if `extra` more bytes keep the listpack under
    /// [`MAX_SAFE_BYTES`] (Redis's `lpSafeToAdd`).
    pub fn safe_to_add(&self, extra: usize) -> bool {
        self.buf.len().saturating_add(extra) <= MAX_SAFE_BYTES
    }

    /// Offset of the first entry, `None` if empty.
    pub fn first(&self) -> Option<usize> {
        (!self.is_empty()).then_some(HEADER)
    }

    /// The entry at `off` (an offset this listpack handed out) and the
    /// offset of the next one, `None` after the last.
    #[inline]
    pub fn get(&self, off: usize) -> (LpEntry<'_>, Option<usize>) {
        let (e, next) = decode(&self.buf, off);
        (e, (next < self.buf.len()).then_some(next))
    }

    /// Iterates over the entries from the first.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            buf: &self.buf,
            off: HEADER.min(self.buf.len()),
        }
    }

    /// Iterates over `(offset, entry)` pairs.
    pub fn iter_offsets(&self) -> IterOffsets<'_> {
        IterOffsets {
            buf: &self.buf,
            off: HEADER.min(self.buf.len()),
        }
    }

    /// Offset of the first entry equal to `needle` among the entries at
    /// positions `0, skip + 1, 2 * (skip + 1), ...` (`skip = 1` searches
    /// the fields of a field/value sequence). O(n).
    pub fn find(&self, needle: &[u8], skip: usize) -> Option<usize> {
        let needle_int = if needle.len() <= 20 {
            string2ll(needle)
        } else {
            None
        };
        let buf = &self.buf[..];
        let mut off = HEADER.min(buf.len());
        let mut to_skip = 0;
        while off < buf.len() {
            let (e, next) = decode(buf, off);
            if to_skip == 0 {
                if e.matches(needle, needle_int) {
                    return Some(off);
                }
                to_skip = skip;
            } else {
                to_skip -= 1;
            }
            off = next;
        }
        None
    }

    /// Appends `items` at the end, with one reallocation.
    pub fn push_many(&mut self, items: &[&[u8]]) {
        let add: usize = items.iter().map(|i| encoded_len(i)).sum();
        let count = self.len() + items.len();
        let mut v = self.take_vec(add);
        for i in items {
            encode(i, &mut v);
        }
        self.put_vec(v, count);
    }

    /// Appends one item at the end.
    pub fn push(&mut self, item: &[u8]) {
        self.push_many(&[item]);
    }

    /// Inserts `item` before the entry at `off` (or at the end when `off`
    /// is the buffer's length).
    pub fn insert(&mut self, off: usize, item: &[u8]) {
        let count = self.len() + 1;
        let mut enc = Vec::with_capacity(encoded_len(item));
        encode(item, &mut enc);
        let mut v = self.take_vec(enc.len());
        let off = off.max(HEADER);
        v.splice(off..off, enc);
        self.put_vec(v, count);
    }

    /// Replaces the entry at `off` with `item`; returns the offset after
    /// the new entry.
    pub fn replace(&mut self, off: usize, item: &[u8]) -> usize {
        let (_, end) = decode(&self.buf, off);
        let mut enc = Vec::with_capacity(encoded_len(item));
        encode(item, &mut enc);
        let new_end = off + enc.len();
        if enc.len() == end - off {
            self.buf[off..end].copy_from_slice(&enc);
            return new_end;
        }
        let count = self.len();
        let grow = enc.len().saturating_sub(end - off);
        let mut v = self.take_vec(grow);
        v.splice(off..end, enc);
        self.put_vec(v, count);
        new_end
    }

    /// Deletes `n` entries starting at `off` (fewer if the listpack ends
    /// first); returns how many were deleted.
    pub fn delete(&mut self, off: usize, n: usize) -> usize {
        let mut end = off;
        let mut deleted = 0;
        while deleted < n && end < self.buf.len() {
            end = decode(&self.buf, end).1;
            deleted += 1;
        }
        if deleted == 0 {
            return 0;
        }
        let count = self.len() - deleted;
        let mut v = self.take_vec(0);
        v.drain(off..end);
        self.put_vec(v, count);
        deleted
    }

    /// The buffer as a vector with room for `extra` more bytes and a
    /// header in place.
    fn take_vec(&mut self, extra: usize) -> Vec<u8> {
        let mut v = std::mem::take(&mut self.buf).into_vec();
        if v.is_empty() {
            v.reserve_exact(HEADER + extra);
            v.extend_from_slice(&[0, 0]);
        } else {
            v.reserve_exact(extra);
        }
        v
    }

    /// Stores `v` back (exact size) with `count` entries; an empty
    /// listpack frees its buffer.
    fn put_vec(&mut self, mut v: Vec<u8>, count: usize) {
        if count == 0 {
            self.buf = Box::new([]);
            return;
        }
        let c = u16::try_from(count).unwrap_or(COUNT_UNKNOWN);
        v[..HEADER].copy_from_slice(&c.to_le_bytes());
        self.buf = v.into_boxed_slice();
    }
}

impl std::fmt::Debug for Listpack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(
                self.iter()
                    .map(|e| String::from_utf8_lossy(&e.to_vec()).into_owned()),
            )
            .finish()
    }
}

/// Iterator over a listpack's entries.
pub struct Iter<'a> {
    buf: &'a [u8],
    off: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = LpEntry<'a>;

    #[inline]
    fn next(&mut self) -> Option<LpEntry<'a>> {
        if self.off >= self.buf.len() {
            return None;
        }
        let (e, next) = decode(self.buf, self.off);
        self.off = next;
        Some(e)
    }
}

/// Iterator over `(offset, entry)`.
pub struct IterOffsets<'a> {
    buf: &'a [u8],
    off: usize,
}

impl<'a> Iterator for IterOffsets<'a> {
    type Item = (usize, LpEntry<'a>);

    #[inline]
    fn next(&mut self) -> Option<(usize, LpEntry<'a>)> {
        if self.off >= self.buf.len() {
            return None;
        }
        let at = self.off;
        let (e, next) = decode(self.buf, at);
        self.off = next;
        Some((at, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn strings(lp: &Listpack) -> Vec<Vec<u8>> {
        lp.iter().map(|e| e.to_vec()).collect()
    }

    #[test]
    fn empty_allocates_nothing() {
        let lp = Listpack::new();
        assert_eq!(lp.bytes(), 0);
        assert_eq!(lp.len(), 0);
        assert!(lp.is_empty());
        assert_eq!(lp.first(), None);
        assert_eq!(lp.iter().count(), 0);
    }

    #[test]
    fn integer_boundaries_round_trip() {
        let cases: &[(i64, usize)] = &[
            (0, 1),
            (127, 1),
            (128, 2),
            (-1, 2),
            (-4096, 2),
            (4095, 2),
            (4096, 3),
            (-4097, 3),
            (32767, 3),
            (-32768, 3),
            (32768, 4),
            (-8_388_608, 4),
            (8_388_607, 4),
            (8_388_608, 5),
            (i64::from(i32::MIN), 5),
            (i64::from(i32::MAX) + 1, 9),
            (i64::MIN, 9),
            (i64::MAX, 9),
        ];
        for &(n, size) in cases {
            let mut lp = Listpack::new();
            let s = n.to_string();
            lp.push(s.as_bytes());
            assert_eq!(lp.bytes(), HEADER + size, "{n}");
            assert_eq!(lp.iter().next(), Some(LpEntry::Int(n)));
            assert_eq!(strings(&lp), vec![s.into_bytes()]);
        }
    }

    #[test]
    fn non_canonical_integers_stay_strings() {
        let mut lp = Listpack::new();
        for s in ["012", "-0", "+1", " 1", "1 ", "9223372036854775808", ""] {
            lp.push(s.as_bytes());
        }
        assert!(lp.iter().all(|e| matches!(e, LpEntry::Str(_))));
        assert_eq!(lp.find(b"-0", 0), lp.iter_offsets().nth(1).map(|(o, _)| o));
        assert_eq!(lp.find(b"0", 0), None);
    }

    #[test]
    fn string_length_classes() {
        for (len, header) in [(0, 1), (63, 1), (64, 2), (4095, 2), (4096, 5), (70000, 5)] {
            let mut lp = Listpack::new();
            let s = vec![b'x'; len];
            lp.push(&s);
            assert_eq!(lp.bytes(), HEADER + header + len);
            assert_eq!(strings(&lp), vec![s]);
        }
    }

    #[test]
    fn small_pairs_are_compact() {
        // Five short field/value pairs: one header byte per entry.
        let mut lp = Listpack::new();
        for i in 0..5 {
            lp.push_many(&[
                format!("field{i}").as_bytes(),
                format!("value{i}").as_bytes(),
            ]);
        }
        assert_eq!(lp.len(), 10);
        assert_eq!(lp.bytes(), HEADER + 10 * 7);
    }

    #[test]
    fn find_with_skip_searches_fields_only() {
        let mut lp = Listpack::new();
        lp.push_many(&[b"a", b"b", b"b", b"c", b"10", b"x"]);
        let off_b = lp.find(b"b", 1).unwrap();
        assert_eq!(lp.get(off_b).0, LpEntry::Str(b"b"));
        // "b" as the field at position 2, not the value at position 1.
        assert_eq!(lp.iter_offsets().nth(2).unwrap().0, off_b);
        assert_eq!(lp.find(b"c", 1), None);
        assert_eq!(lp.get(lp.find(b"10", 1).unwrap()).0, LpEntry::Int(10));
        assert_eq!(lp.find(b"x", 1), None);
        assert!(lp.find(b"x", 0).is_some());
    }

    #[test]
    fn replace_insert_delete() {
        let mut lp = Listpack::new();
        lp.push_many(&[b"a", b"1", b"b", b"2"]);
        let off = lp.find(b"1", 0).unwrap();
        lp.replace(off, b"a much longer value than before");
        assert_eq!(strings(&lp)[1], b"a much longer value than before");
        let off = lp.find(b"b", 0).unwrap();
        lp.replace(off, b"c");
        lp.insert(off, b"new");
        assert_eq!(
            strings(&lp),
            vec![
                b"a".to_vec(),
                b"a much longer value than before".to_vec(),
                b"new".to_vec(),
                b"c".to_vec(),
                b"2".to_vec()
            ]
        );
        assert_eq!(lp.len(), 5);
        let off = lp.find(b"new", 0).unwrap();
        assert_eq!(lp.delete(off, 10), 3);
        assert_eq!(lp.len(), 2);
        assert_eq!(lp.delete(HEADER, 2), 2);
        assert_eq!(lp.bytes(), 0);
        assert!(lp.is_empty());
    }

    #[test]
    fn count_past_u16() {
        let mut lp = Listpack::new();
        let items: Vec<&[u8]> = vec![b"1"; 70_000];
        lp.push_many(&items);
        assert_eq!(lp.len(), 70_000);
        lp.delete(HEADER, 10_000);
        assert_eq!(lp.len(), 60_000);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(Vec<u8>),
        Insert(usize, Vec<u8>),
        Replace(usize, Vec<u8>),
        Delete(usize, usize),
    }

    fn item() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            any::<i64>().prop_map(|n| n.to_string().into_bytes()),
            (-5000i64..5000).prop_map(|n| n.to_string().into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..80),
            (0usize..5000).prop_map(|n| vec![b'z'; n]),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            item().prop_map(Op::Push),
            (any::<usize>(), item()).prop_map(|(i, s)| Op::Insert(i, s)),
            (any::<usize>(), item()).prop_map(|(i, s)| Op::Replace(i, s)),
            (any::<usize>(), 0usize..4).prop_map(|(i, n)| Op::Delete(i, n)),
        ]
    }

    proptest! {
        #[test]
        fn behaves_like_a_vec(ops in proptest::collection::vec(op(), 0..60)) {
            let mut lp = Listpack::new();
            let mut model: Vec<Vec<u8>> = Vec::new();
            for op in ops {
                let offs: Vec<usize> = lp.iter_offsets().map(|(o, _)| o).collect();
                match op {
                    Op::Push(s) => { lp.push(&s); model.push(s); }
                    Op::Insert(i, s) => {
                        let i = i % (model.len() + 1);
                        let off = offs.get(i).copied().unwrap_or(lp.bytes());
                        lp.insert(off, &s);
                        model.insert(i, s);
                    }
                    Op::Replace(i, s) => {
                        if !model.is_empty() {
                            let i = i % model.len();
                            lp.replace(offs[i], &s);
                            model[i] = s;
                        }
                    }
                    Op::Delete(i, n) => {
                        if !model.is_empty() {
                            let i = i % model.len();
                            let d = lp.delete(offs[i], n);
                            let want = n.min(model.len() - i);
                            prop_assert_eq!(d, want);
                            model.drain(i..i + want);
                        }
                    }
                }
                prop_assert_eq!(lp.len(), model.len());
                prop_assert_eq!(strings(&lp), model.clone());
                let size: usize = model.iter().map(|s| encoded_len(s)).sum();
                prop_assert_eq!(lp.bytes(), if model.is_empty() { 0 } else { HEADER + size });
            }
        }
    }
}
