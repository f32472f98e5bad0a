//! Values and their encodings. Strings follow Redis's three encodings so
//! that `OBJECT ENCODING` answers as Redis does and so integers cost no
//! heap allocation:
//!
//! * `int`: the string is the canonical decimal form of an `i64` of at most
//!   20 characters (Redis's `tryObjectEncoding`), stored as the integer;
//! * `embstr`: up to 44 bytes: in place up to [`INLINE_MAX`] (22) bytes,
//!   else in one exact-size allocation;
//! * `raw`: longer strings, in one exact-size allocation as created, and
//!   any string modified in place (APPEND, SETRANGE, SETBIT...), which
//!   becomes a growable buffer so repeated appends are amortised O(1).
//!
//! # Why 24 bytes
//!
//! (Written when a node was next link 8 + key handle 16 + `Entry`; today's
//! node, `crate::node`, holds link 8 + metadata 8 + tag 1 + the key's
//! bytes + this `Value`, or a long string's bytes instead of it, and the
//! arithmetic below holds for keys of up to 15 bytes.)
//!
//! The key table stores a `Value` in every node (next link 8 + key 16 +
//! `Entry`), and glibc serves a request of `n` bytes from a chunk of
//! `n + 8` rounded up to 16 (`db::malloc_chunk`): a node of at most 56
//! bytes takes a 64-byte chunk, one of 57..=72 bytes an 80-byte chunk. With
//! a 32-byte `Value` the node can hold at most 0 bytes of metadata in 56,
//! so `Entry` could never get there; with 24 bytes, `Entry` = value + 8
//! bytes of metadata (the deadline moved to `Db`'s volatile dict) makes a
//! 56-byte node. Measured (`size_of`): `Value` 32 -> 24, `Str` 32 -> 24,
//! `Entry` 48 -> 32, node 72 -> 56 (an 80-byte chunk -> a 64-byte one: 16
//! bytes less per key; bench/memory.sh).
//!
//! # Layout (no `unsafe`)
//!
//! [`Inline`] is 22 bytes of data and a `Len` byte: an enum of 23 values,
//! so 233 values of that byte (offset 22) are never used by an `Inline`.
//! Rust's niche filling puts [`Str`]'s discriminant there and its other
//! variants' payloads (an `i64`, a box: at most 16 bytes) before it, so
//! `Str` is 24 bytes with 22 bytes in place. [`Value`] does the same one
//! level up: its discriminant takes further unused values of the same
//! byte, and its other variants must fit in the first 16 bytes, which
//! `Hash` (16) and `List` (8) do; `Set` and `ZSet` (24 each) are boxed
//! (an extra 32-byte chunk per set or sorted set key, small beside their
//! contents). The compile-time asserts below hold the sizes.
//!
//! Heap cost per string value is unchanged from the 32-byte layout: none up
//! to 22 bytes (or for an integer), one exact-size allocation otherwise.
//! Only a string modified in place pays one more allocation (its `Vec`
//! header, 32-byte chunk) for a growable buffer.

use std::borrow::Cow;

use crate::types::{Hash, List, Set, Stream, ZSet};

/// Redis's `OBJ_ENCODING_EMBSTR_SIZE_LIMIT`.
pub const EMBSTR_MAX: usize = 44;

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(Str),
    Hash(Hash),
    List(List),
    /// Boxed: a `Set` (24 bytes) in place would keep `Value` at 32.
    Set(Box<Set>),
    /// Boxed: a `ZSet` (24 bytes) in place would keep `Value` at 32.
    ZSet(Box<ZSet>),
    /// Boxed: a stream's metadata is far larger than a `Value`.
    Stream(Box<Stream>),
}

// The key table holds a `Value` per key: a new type must not grow it.
const _: () = assert!(std::mem::size_of::<Value>() == 24);
const _: () = assert!(std::mem::size_of::<Str>() == 24);
const _: () = assert!(std::mem::size_of::<Option<Value>>() == 24);

impl Value {
    /// The name TYPE replies with.
    pub fn type_name(&self) -> &'static str {
        ValueRef::from(self).type_name()
    }
    /// The name OBJECT ENCODING replies with.
    pub fn encoding(&self) -> &'static str {
        ValueRef::from(self).encoding()
    }
    /// Approximate heap bytes used, for MEMORY USAGE / accounting.
    pub fn heap_bytes(&self) -> usize {
        ValueRef::from(self).heap_bytes()
    }
    /// Elements held: 1 for a string. Large values are freed off the
    /// request path (see `Db::remove`).
    pub fn elements(&self) -> usize {
        ValueRef::from(self).elements()
    }
    pub fn as_str(&self) -> Option<&Str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_str_mut(&mut self) -> Option<&mut Str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// Longest string stored inside the value itself (no heap allocation).
pub const INLINE_MAX: usize = 22;

/// The length of an [`Inline`] string. An enum rather than a `u8` so that
/// its byte has 233 values no `Inline` uses: the compiler stores [`Str`]'s
/// and [`Value`]'s discriminants there (see the module docs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum Len {
    L0,
    L1,
    L2,
    L3,
    L4,
    L5,
    L6,
    L7,
    L8,
    L9,
    L10,
    L11,
    L12,
    L13,
    L14,
    L15,
    L16,
    L17,
    L18,
    L19,
    L20,
    L21,
    L22,
}

/// `LENS[n]` is the `Len` of `n`, for `n <= INLINE_MAX`.
const LENS: [Len; INLINE_MAX + 1] = [
    Len::L0,
    Len::L1,
    Len::L2,
    Len::L3,
    Len::L4,
    Len::L5,
    Len::L6,
    Len::L7,
    Len::L8,
    Len::L9,
    Len::L10,
    Len::L11,
    Len::L12,
    Len::L13,
    Len::L14,
    Len::L15,
    Len::L16,
    Len::L17,
    Len::L18,
    Len::L19,
    Len::L20,
    Len::L21,
    Len::L22,
];

/// Up to [`INLINE_MAX`] bytes stored in place: 23 bytes, alignment 1.
///
/// Invariant: `buf[len..]` is zero (so derived equality would also be
/// content equality; the impl compares the slices anyway).
#[derive(Clone)]
pub struct Inline {
    buf: [u8; INLINE_MAX],
    len: Len,
}

impl Inline {
    /// `None` if `b` is longer than [`INLINE_MAX`].
    pub fn new(b: &[u8]) -> Option<Inline> {
        let len = *LENS.get(b.len())?;
        let mut buf = [0; INLINE_MAX];
        buf[..b.len()].copy_from_slice(b);
        Some(Inline { buf, len })
    }

    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }
}

impl std::ops::Deref for Inline {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for Inline {
    fn eq(&self, other: &Inline) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl std::fmt::Debug for Inline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_slice()))
    }
}

/// A string value; see the module docs for the encodings. The constructors
/// ([`Str::from_bytes`], [`Str::from_bytes_no_int`], [`Str::make_raw`])
/// keep the invariants: `Inline` holds at most [`INLINE_MAX`] bytes, `Emb`
/// more than that and at most [`EMBSTR_MAX`], `Raw` more than
/// [`EMBSTR_MAX`]; `Grow` any length.
#[derive(Debug, Clone)]
pub enum Str {
    /// `int`: the canonical decimal form of the integer.
    Int(i64),
    /// `embstr` of at most [`INLINE_MAX`] bytes, in place.
    Inline(Inline),
    /// `embstr` longer than [`INLINE_MAX`]: one exact-size allocation.
    Emb(Box<[u8]>),
    /// `raw` as created (longer than [`EMBSTR_MAX`]): one exact-size
    /// allocation.
    Raw(Box<[u8]>),
    /// `raw` after an in-place modification (APPEND, SETRANGE, SETBIT...):
    /// a growable buffer, so repeated appends are amortised O(1).
    Grow(Box<Vec<u8>>),
}

/// Equal when the encoding and the bytes are (as the derived equality of
/// the 32-byte layout was: a `Raw` and a `Grow` string of the same bytes
/// are both `raw`, so equal; an `int` never equals an `embstr`).
impl PartialEq for Str {
    fn eq(&self, other: &Str) -> bool {
        self.encoding() == other.encoding() && self.view() == other.view()
    }
}

/// A string's contents without rendering an integer: see [`Str::view`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrView<'a> {
    Int(i64),
    Bytes(&'a [u8]),
}

impl Str {
    /// Encodes a client-supplied value as Redis's `tryObjectEncoding` does.
    pub fn from_bytes(b: &[u8]) -> Str {
        match int_form(b) {
            Some(n) => Str::Int(n),
            None => Str::from_bytes_no_int(b),
        }
    }

    /// Encodes without trying the integer form (embstr or raw by length),
    /// as Redis's `createStringObject`.
    pub fn from_bytes_no_int(b: &[u8]) -> Str {
        if let Some(i) = Inline::new(b) {
            Str::Inline(i)
        } else if b.len() <= EMBSTR_MAX {
            Str::Emb(b.into())
        } else {
            Str::Raw(b.into())
        }
    }

    /// A `raw` string owning `v` (kept growable, with its capacity), as if
    /// modified in place: for values built up by SETRANGE and the like.
    pub fn from_vec_raw(v: Vec<u8>) -> Str {
        Str::Grow(Box::new(v))
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            Str::Int(_) => "int",
            Str::Inline(_) | Str::Emb(_) => "embstr",
            Str::Raw(_) | Str::Grow(_) => "raw",
        }
    }

    /// The integer, or the stored bytes of any other encoding.
    #[inline]
    pub fn view(&self) -> StrView<'_> {
        match self {
            Str::Int(n) => StrView::Int(*n),
            Str::Inline(b) => StrView::Bytes(b),
            Str::Emb(b) | Str::Raw(b) => StrView::Bytes(b),
            Str::Grow(v) => StrView::Bytes(v),
        }
    }

    /// The string's bytes (an integer is rendered in decimal).
    pub fn as_bytes(&self) -> Cow<'_, [u8]> {
        StrRef::Str(self).as_bytes()
    }

    /// Calls `f` with the bytes, without allocating for integers.
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        StrRef::Str(self).with_bytes(f)
    }

    pub fn len(&self) -> usize {
        StrRef::Str(self).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes as a growable buffer for in-place modification; the value
    /// becomes `raw` (`Grow`), as after Redis's `dbUnshareStringValue`. A
    /// `Raw` value's allocation is reused.
    pub fn make_raw(&mut self) -> &mut Vec<u8> {
        if !matches!(self, Str::Grow(_)) {
            let v = match std::mem::replace(self, Str::Int(0)) {
                Str::Raw(b) | Str::Emb(b) => b.into_vec(),
                s => s.as_bytes().into_owned(),
            };
            *self = Str::Grow(Box::new(v));
        }
        match self {
            Str::Grow(v) => v,
            // INVARIANT: converted to Grow just above.
            _ => unreachable!(),
        }
    }

    /// The value as an integer, if it is one (Redis's `getLongLongFromObject`
    /// accepts only the strict decimal form).
    pub fn as_i64(&self) -> Option<i64> {
        StrRef::Str(self).as_i64()
    }

    /// Approximate heap bytes used, for MEMORY USAGE / accounting: the
    /// allocations' requested sizes (a `Grow` value counts its `Vec`
    /// header's allocation and the buffer's capacity).
    pub fn heap_bytes(&self) -> usize {
        match self {
            Str::Int(_) | Str::Inline(_) => 0,
            Str::Emb(b) | Str::Raw(b) => b.len(),
            Str::Grow(v) => std::mem::size_of::<Vec<u8>>() + v.capacity(),
        }
    }
}

/// A stored value, borrowed: what readers of a key get ([`crate::Entry::value`]).
/// A string is a [`StrRef`], which may be a [`Str`] or bytes stored with
/// the key itself; the other types are the values themselves.
#[derive(Debug, Clone, Copy)]
pub enum ValueRef<'a> {
    Str(StrRef<'a>),
    Hash(&'a Hash),
    List(&'a List),
    Set(&'a Set),
    ZSet(&'a ZSet),
    Stream(&'a Stream),
}

impl<'a> ValueRef<'a> {
    /// The name TYPE replies with.
    pub fn type_name(self) -> &'static str {
        match self {
            ValueRef::Str(_) => "string",
            ValueRef::Hash(_) => "hash",
            ValueRef::List(_) => "list",
            ValueRef::Set(_) => "set",
            ValueRef::ZSet(_) => "zset",
            ValueRef::Stream(_) => "stream",
        }
    }
    /// The name OBJECT ENCODING replies with.
    pub fn encoding(self) -> &'static str {
        match self {
            ValueRef::Str(s) => s.encoding(),
            ValueRef::Hash(h) => h.encoding(),
            ValueRef::List(l) => l.encoding(),
            ValueRef::Set(s) => s.encoding(),
            ValueRef::ZSet(z) => z.encoding(),
            ValueRef::Stream(_) => "stream",
        }
    }
    /// Approximate heap bytes used, for MEMORY USAGE / accounting.
    pub fn heap_bytes(self) -> usize {
        match self {
            ValueRef::Str(s) => s.heap_bytes(),
            ValueRef::Hash(h) => h.heap_bytes(),
            ValueRef::List(l) => l.heap_bytes(),
            ValueRef::Set(s) => std::mem::size_of::<Set>() + s.heap_bytes(),
            ValueRef::ZSet(z) => std::mem::size_of::<ZSet>() + z.heap_bytes(),
            ValueRef::Stream(s) => std::mem::size_of::<Stream>() + s.heap_bytes(),
        }
    }
    /// Elements held: 1 for a string.
    pub fn elements(self) -> usize {
        match self {
            ValueRef::Str(_) => 1,
            ValueRef::Hash(h) => h.len(),
            ValueRef::List(l) => l.len(),
            ValueRef::Set(s) => s.len(),
            ValueRef::ZSet(z) => z.len(),
            // Redis's lazy-free effort for a stream: its nodes plus its
            // groups' PELs.
            ValueRef::Stream(s) => {
                s.node_count() + s.groups.values().map(|g| g.pel.len() + 1).sum::<usize>()
            }
        }
    }
    /// An owned copy (same encoding).
    pub fn to_owned_value(self) -> Value {
        match self {
            ValueRef::Str(s) => Value::Str(s.to_owned_str()),
            ValueRef::Hash(h) => Value::Hash(h.clone()),
            ValueRef::List(l) => Value::List(l.clone()),
            ValueRef::Set(s) => Value::Set(Box::new(s.clone())),
            ValueRef::ZSet(z) => Value::ZSet(Box::new(z.clone())),
            ValueRef::Stream(s) => Value::Stream(Box::new(s.clone())),
        }
    }
}

impl<'a> From<&'a Value> for ValueRef<'a> {
    #[inline]
    fn from(v: &'a Value) -> Self {
        match v {
            Value::Str(s) => ValueRef::Str(StrRef::Str(s)),
            Value::Hash(h) => ValueRef::Hash(h),
            Value::List(l) => ValueRef::List(l),
            Value::Set(s) => ValueRef::Set(s),
            Value::ZSet(z) => ValueRef::ZSet(z),
            Value::Stream(s) => ValueRef::Stream(s),
        }
    }
}

/// Same type, encoding and contents (as `Value`'s equality).
impl PartialEq for ValueRef<'_> {
    fn eq(&self, other: &Self) -> bool {
        match (*self, *other) {
            (ValueRef::Str(a), ValueRef::Str(b)) => a == b,
            (ValueRef::Hash(a), ValueRef::Hash(b)) => a == b,
            (ValueRef::List(a), ValueRef::List(b)) => a == b,
            (ValueRef::Set(a), ValueRef::Set(b)) => a == b,
            (ValueRef::ZSet(a), ValueRef::ZSet(b)) => a == b,
            (ValueRef::Stream(a), ValueRef::Stream(b)) => a == b,
            _ => false,
        }
    }
}

/// A stored string, borrowed: a [`Str`], or (for keys whose string is
/// stored with the key, see `db`) its bytes, which are `embstr` up to
/// [`EMBSTR_MAX`] bytes and `raw` beyond, as [`Str::from_bytes`] would
/// encode them.
#[derive(Debug, Clone, Copy)]
pub enum StrRef<'a> {
    Str(&'a Str),
    Bytes(&'a [u8]),
}

impl<'a> StrRef<'a> {
    /// The integer, or the stored bytes of any other encoding.
    #[inline]
    pub fn view(self) -> StrView<'a> {
        match self {
            StrRef::Str(s) => s.view(),
            StrRef::Bytes(b) => StrView::Bytes(b),
        }
    }
    pub fn encoding(self) -> &'static str {
        match self {
            StrRef::Str(s) => s.encoding(),
            StrRef::Bytes(b) if b.len() <= EMBSTR_MAX => "embstr",
            StrRef::Bytes(_) => "raw",
        }
    }
    /// The string's bytes (an integer is rendered in decimal).
    pub fn as_bytes(self) -> Cow<'a, [u8]> {
        match self.view() {
            StrView::Int(n) => Cow::Owned(itoa::Buffer::new().format(n).as_bytes().to_vec()),
            StrView::Bytes(b) => Cow::Borrowed(b),
        }
    }
    /// Calls `f` with the bytes, without allocating for integers.
    pub fn with_bytes<R>(self, f: impl FnOnce(&[u8]) -> R) -> R {
        match self.view() {
            StrView::Int(n) => f(itoa::Buffer::new().format(n).as_bytes()),
            StrView::Bytes(b) => f(b),
        }
    }
    pub fn len(self) -> usize {
        match self.view() {
            StrView::Int(n) => itoa::Buffer::new().format(n).len(),
            StrView::Bytes(b) => b.len(),
        }
    }
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }
    /// The value as an integer, if it is one (see [`Str::as_i64`]).
    pub fn as_i64(self) -> Option<i64> {
        match self.view() {
            StrView::Int(n) => Some(n),
            StrView::Bytes(b) => parse_i64_canonical(b),
        }
    }
    /// Approximate heap bytes used: none for bytes stored with the key
    /// (the node holding them is counted with the key).
    pub fn heap_bytes(self) -> usize {
        match self {
            StrRef::Str(s) => s.heap_bytes(),
            StrRef::Bytes(_) => 0,
        }
    }
    /// An owned copy with the same encoding.
    pub fn to_owned_str(self) -> Str {
        match self {
            StrRef::Str(s) => s.clone(),
            StrRef::Bytes(b) => Str::from_bytes_no_int(b),
        }
    }
}

/// Equal when the encoding and the bytes are (as [`Str`]'s equality).
impl PartialEq for StrRef<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.encoding() == other.encoding() && self.view() == other.view()
    }
}

/// Redis's `string2ll`: only the canonical decimal form is an integer.
pub use ds::string2ll as parse_i64_canonical;

/// The integer a client's string is stored as (`int` encoding), if any:
/// Redis's `tryObjectEncoding` tries strings of at most 20 bytes.
#[inline]
pub fn int_form(b: &[u8]) -> Option<i64> {
    if b.len() <= 20 {
        parse_i64_canonical(b)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_encodings() -> Vec<Str> {
        let mut grown = Str::from_bytes(b"ab");
        grown.make_raw().push(b'c');
        vec![
            Str::from_bytes(b"42"),
            Str::from_bytes(b"abc"),
            Str::from_bytes(&[b'e'; 30]),
            Str::from_bytes(&[b'r'; 100]),
            grown,
        ]
    }

    #[test]
    fn sizes() {
        use std::mem::size_of;
        assert_eq!(size_of::<Value>(), 24);
        assert_eq!(size_of::<Option<Value>>(), 24);
        assert_eq!(size_of::<Str>(), 24);
        assert_eq!(size_of::<Inline>(), 23);
        assert!(size_of::<Hash>() <= 16);
        assert!(size_of::<List>() <= 16);
    }

    #[test]
    fn encoding_boundaries() {
        let enc = |n: usize| {
            let s = Str::from_bytes(&vec![b'x'; n]);
            let v = match &s {
                Str::Int(_) => "int",
                Str::Inline(_) => "inline",
                Str::Emb(_) => "emb",
                Str::Raw(_) => "raw",
                Str::Grow(_) => "grow",
            };
            (s.encoding(), v)
        };
        assert_eq!(enc(0), ("embstr", "inline"));
        assert_eq!(enc(INLINE_MAX), ("embstr", "inline"));
        assert_eq!(enc(INLINE_MAX + 1), ("embstr", "emb"));
        assert_eq!(enc(EMBSTR_MAX), ("embstr", "emb"));
        assert_eq!(enc(EMBSTR_MAX + 1), ("raw", "raw"));
        assert!(matches!(Str::from_bytes(b"-17"), Str::Int(-17)));
        assert!(matches!(Str::from_bytes_no_int(b"-17"), Str::Inline(_)));
        // 22 digits: too long for an int, still inline.
        assert!(matches!(
            Str::from_bytes(b"1234567890123456789012"),
            Str::Inline(_)
        ));
        assert_eq!(Str::from_vec_raw(b"5".to_vec()).encoding(), "raw");
    }

    #[test]
    fn make_raw_keeps_bytes_and_becomes_raw() {
        for mut s in all_encodings() {
            let before = s.as_bytes().into_owned();
            let v = s.make_raw();
            assert_eq!(*v, before);
            v.extend_from_slice(b"!");
            assert!(matches!(s, Str::Grow(_)));
            assert_eq!(s.encoding(), "raw");
            let mut want = before;
            want.push(b'!');
            assert_eq!(&*s.as_bytes(), &want[..]);
            // A second call keeps the same buffer.
            let p = s.make_raw().as_ptr();
            assert_eq!(s.make_raw().as_ptr(), p);
        }
        // A raw value's allocation is reused, not copied.
        let mut s = Str::from_bytes(&[b'r'; 100]);
        let p = s.view();
        let StrView::Bytes(b) = p else { panic!() };
        let p = b.as_ptr();
        assert_eq!(s.make_raw().as_ptr(), p);
    }

    #[test]
    fn heap_bytes_per_variant() {
        let h: Vec<usize> = all_encodings().iter().map(Str::heap_bytes).collect();
        let vec_header = std::mem::size_of::<Vec<u8>>();
        // The grown one: "abc" pushed to a 2-byte Vec, capacity >= 3.
        assert_eq!(h[..4], [0, 0, 30, 100]);
        assert!(h[4] >= vec_header + 3);
        assert_eq!(Str::from_bytes(&[b'a'; 16]).heap_bytes(), 0);
        assert_eq!(Str::from_bytes(&[b'a'; 23]).heap_bytes(), 23);
        let set = Value::Set(Box::default());
        assert!(set.heap_bytes() >= std::mem::size_of::<Set>());
    }

    #[test]
    fn bytes_round_trip() {
        for n in 0..=60usize {
            let b: Vec<u8> = (0..n).map(|i| b'a' + (i % 26) as u8).collect();
            let s = Str::from_bytes(&b);
            assert_eq!(&*s.as_bytes(), &b[..]);
            assert_eq!(s.len(), n);
            assert_eq!(s.is_empty(), n == 0);
            s.with_bytes(|x| assert_eq!(x, &b[..]));
            assert_eq!(s.view(), StrView::Bytes(&b[..]));
            assert_eq!(s.clone(), s);
            let mut g = s.clone();
            g.make_raw();
            assert_eq!(&*g.as_bytes(), &b[..]);
        }
        for n in [0i64, -1, 7, i64::MIN, i64::MAX] {
            let s = Str::from_bytes(n.to_string().as_bytes());
            assert_eq!(s.view(), StrView::Int(n));
            assert_eq!(s.as_i64(), Some(n));
            assert_eq!(&*s.as_bytes(), n.to_string().as_bytes());
        }
    }

    #[test]
    fn equality_is_by_encoding_and_bytes() {
        let big = [b'r'; 50];
        let mut grown = Str::from_bytes(&big[..49]);
        grown.make_raw().push(b'r');
        assert_eq!(grown, Str::from_bytes(&big));
        assert_ne!(Str::from_bytes(b"5"), Str::from_bytes_no_int(b"5"));
        assert_ne!(Str::from_vec_raw(b"ab".to_vec()), Str::from_bytes(b"ab"));
    }

    #[test]
    fn encodings_follow_redis() {
        assert_eq!(Str::from_bytes(b"12345").encoding(), "int");
        assert_eq!(Str::from_bytes(b"-9223372036854775808").encoding(), "int");
        assert_eq!(Str::from_bytes(b"9223372036854775808").encoding(), "embstr");
        assert_eq!(Str::from_bytes(b"012").encoding(), "embstr");
        assert_eq!(Str::from_bytes(b"-0").encoding(), "embstr");
        assert_eq!(Str::from_bytes(&[b'a'; 44]).encoding(), "embstr");
        assert_eq!(Str::from_bytes(&[b'a'; 45]).encoding(), "raw");
        let mut s = Str::from_bytes(b"12");
        s.make_raw().extend_from_slice(b"3");
        assert_eq!(s.encoding(), "raw");
        assert_eq!(s.as_i64(), Some(123));
        assert_eq!(&*s.as_bytes(), b"123");
        assert_eq!(Str::Int(-5).len(), 2);
    }
}
