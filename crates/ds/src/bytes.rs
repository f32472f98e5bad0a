//! `SmallBytes`: a compact, owned, immutable byte string.
//!
//! Owns: the representation of keys and small values. Most Redis keys and
//! many values are short (ids, counters, flags), so strings of up to
//! [`INLINE_CAP`] bytes live inline in the 24-byte handle and cost no heap
//! allocation and no pointer chase; longer ones live in a `Box<[u8]>`
//! (pointer + length, no spare capacity, since stored strings do not grow).
//!
//! Invariants: `size_of::<SmallBytes>() <= 24` (checked at compile time); a
//! string is inline iff its length is at most [`INLINE_CAP`] (so equal
//! contents always have the same representation, though nothing relies on
//! that: comparisons and hashing go through the byte slice). `Hash`, `Eq` and
//! `Ord` are exactly those of `[u8]`, which is what makes
//! `Borrow<[u8]>` lookups in hash maps (and in [`crate::Dict`]) correct.
//!
//! Why an enum and no `unsafe`: the enum's tag byte shares the first word with
//! the inline length and bytes, so the safe layout already reaches 24 bytes
//! with 22 inline bytes. Packing the length into the last byte (23 inline
//! bytes, as some crates do) needs a union and `unsafe` for one extra byte.

/// Longest string stored without a heap allocation.
pub const INLINE_CAP: usize = 22;

/// A compact owned byte string; see the module docs.
#[derive(Clone)]
pub struct SmallBytes(Repr);

#[derive(Clone)]
enum Repr {
    // INVARIANT: len <= INLINE_CAP.
    Inline { len: u8, buf: [u8; INLINE_CAP] },
    Heap(Box<[u8]>),
}

const _: () = assert!(std::mem::size_of::<SmallBytes>() <= 24);
const _: () = assert!(std::mem::size_of::<Option<SmallBytes>>() <= 24);

impl SmallBytes {
    /// The empty string (inline).
    pub const fn new() -> Self {
        SmallBytes(Repr::Inline {
            len: 0,
            buf: [0; INLINE_CAP],
        })
    }

    /// Copies `bytes`; allocates only if longer than [`INLINE_CAP`].
    pub fn from_slice(bytes: &[u8]) -> Self {
        if bytes.len() <= INLINE_CAP {
            let mut buf = [0; INLINE_CAP];
            buf[..bytes.len()].copy_from_slice(bytes);
            SmallBytes(Repr::Inline {
                // INVARIANT: len <= INLINE_CAP < 256, checked above.
                len: bytes.len() as u8,
                buf,
            })
        } else {
            SmallBytes(Repr::Heap(bytes.into()))
        }
    }

    /// The contents.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, buf } => &buf[..usize::from(*len)],
            Repr::Heap(heap) => heap,
        }
    }

    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Inline { len, .. } => usize::from(*len),
            Repr::Heap(heap) => heap.len(),
        }
    }

    /// True for the empty string.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True if the bytes are stored inside the handle (no heap allocation).
    #[inline]
    pub fn is_inline(&self) -> bool {
        matches!(self.0, Repr::Inline { .. })
    }

    /// Heap bytes owned by this value beyond the handle itself (0 when
    /// inline), for memory accounting.
    #[inline]
    pub fn heap_bytes(&self) -> usize {
        match &self.0 {
            Repr::Inline { .. } => 0,
            Repr::Heap(heap) => heap.len(),
        }
    }

    /// The contents as a `Vec`; reuses the heap allocation when there is one.
    pub fn into_vec(self) -> Vec<u8> {
        match self.0 {
            Repr::Inline { len, buf } => buf[..usize::from(len)].to_vec(),
            Repr::Heap(heap) => heap.into_vec(),
        }
    }
}

impl Default for SmallBytes {
    fn default() -> Self {
        Self::new()
    }
}

impl From<Vec<u8>> for SmallBytes {
    /// Short strings are copied inline (and the `Vec` freed); long ones keep
    /// the allocation (shrunk to fit, which may reallocate).
    fn from(vec: Vec<u8>) -> Self {
        if vec.len() <= INLINE_CAP {
            Self::from_slice(&vec)
        } else {
            SmallBytes(Repr::Heap(vec.into_boxed_slice()))
        }
    }
}

impl From<SmallBytes> for Vec<u8> {
    fn from(bytes: SmallBytes) -> Self {
        bytes.into_vec()
    }
}

/// The traits every owned byte string of this crate has, all those of its
/// bytes: `Deref`/`AsRef`/`Borrow` to `[u8]`, `Hash`, `Eq` and `Ord` exactly
/// as `[u8]`'s (which is what makes `Borrow<[u8]>` lookups in hash maps
/// correct), a lossy-string `Debug`, and copies from slices and `&str`.
/// The type needs `as_slice(&self) -> &[u8]` and `from_slice(&[u8]) -> Self`.
macro_rules! byte_string_traits {
    ($t:ty) => {
        impl std::ops::Deref for $t {
            type Target = [u8];
            #[inline]
            fn deref(&self) -> &[u8] {
                self.as_slice()
            }
        }
        impl AsRef<[u8]> for $t {
            #[inline]
            fn as_ref(&self) -> &[u8] {
                self.as_slice()
            }
        }
        impl std::borrow::Borrow<[u8]> for $t {
            #[inline]
            fn borrow(&self) -> &[u8] {
                self.as_slice()
            }
        }
        impl From<&[u8]> for $t {
            fn from(bytes: &[u8]) -> Self {
                Self::from_slice(bytes)
            }
        }
        impl<const N: usize> From<&[u8; N]> for $t {
            fn from(bytes: &[u8; N]) -> Self {
                Self::from_slice(bytes)
            }
        }
        impl From<&str> for $t {
            fn from(s: &str) -> Self {
                Self::from_slice(s.as_bytes())
            }
        }
        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Debug::fmt(&String::from_utf8_lossy(self.as_slice()), f)
            }
        }
        impl PartialEq for $t {
            #[inline]
            fn eq(&self, other: &Self) -> bool {
                self.as_slice() == other.as_slice()
            }
        }
        impl Eq for $t {}
        impl PartialEq<[u8]> for $t {
            fn eq(&self, other: &[u8]) -> bool {
                self.as_slice() == other
            }
        }
        impl PartialEq<&[u8]> for $t {
            fn eq(&self, other: &&[u8]) -> bool {
                self.as_slice() == *other
            }
        }
        impl PartialOrd for $t {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }
        impl Ord for $t {
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                self.as_slice().cmp(other.as_slice())
            }
        }
        impl std::hash::Hash for $t {
            /// Exactly `<[u8] as Hash>::hash`, so `Borrow<[u8]>` lookups agree.
            #[inline]
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                self.as_slice().hash(state);
            }
        }
    };
}
pub(crate) use byte_string_traits;

byte_string_traits!(SmallBytes);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;
    use std::hash::BuildHasher;

    #[test]
    fn size_and_inline_boundary() {
        assert!(std::mem::size_of::<SmallBytes>() <= 24);
        let short = SmallBytes::from(&[7u8; INLINE_CAP][..]);
        assert!(short.is_inline());
        assert_eq!(short.len(), INLINE_CAP);
        assert_eq!(short.heap_bytes(), 0);
        let long = SmallBytes::from(&[7u8; INLINE_CAP + 1][..]);
        assert!(!long.is_inline());
        assert_eq!(long.len(), INLINE_CAP + 1);
        assert_eq!(long.heap_bytes(), INLINE_CAP + 1);
        assert!(SmallBytes::new().is_empty());
        assert!(SmallBytes::default().is_inline());
    }

    #[test]
    fn conversions() {
        let a = SmallBytes::from("hello");
        assert_eq!(&*a, b"hello");
        assert_eq!(a.as_ref(), b"hello");
        assert_eq!(a, SmallBytes::from(b"hello".to_vec()));
        assert_eq!(a, SmallBytes::from(b"hello"));
        assert_eq!(a, &b"hello"[..]);
        let long = "x".repeat(100);
        let b = SmallBytes::from(long.clone().into_bytes());
        assert!(!b.is_inline());
        assert_eq!(b.clone().into_vec(), long.as_bytes());
        assert_eq!(Vec::from(a), b"hello");
    }

    #[test]
    fn debug_is_lossy_string() {
        assert_eq!(format!("{:?}", SmallBytes::from("hi")), "\"hi\"");
        assert_eq!(
            format!("{:?}", SmallBytes::from(&b"a\xffb"[..])),
            "\"a\u{fffd}b\""
        );
    }

    #[test]
    fn ordering_like_slices() {
        let mut v: Vec<SmallBytes> = ["b", "a", "ab", "", &"z".repeat(30)]
            .iter()
            .map(|s| SmallBytes::from(*s))
            .collect();
        v.sort();
        let got: Vec<&[u8]> = v.iter().map(|s| s.as_slice()).collect();
        let mut want: Vec<&[u8]> = vec![b"b", b"a", b"ab", b"", &[b'z'; 30]];
        want.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn borrowed_lookup_in_hashmap() {
        let mut map = HashMap::new();
        map.insert(SmallBytes::from("key"), 1);
        map.insert(SmallBytes::from("k".repeat(40).as_str()), 2);
        assert_eq!(map.get(&b"key"[..]), Some(&1));
        assert_eq!(map.get("k".repeat(40).as_bytes()), Some(&2));
    }

    proptest! {
        #[test]
        fn round_trips_and_hashes_like_slice(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let small = SmallBytes::from(bytes.as_slice());
            prop_assert_eq!(small.len(), bytes.len());
            prop_assert_eq!(small.is_inline(), bytes.len() <= INLINE_CAP);
            prop_assert_eq!(&*small, bytes.as_slice());
            prop_assert_eq!(&small, &SmallBytes::from(bytes.clone()));
            let state = std::collections::hash_map::RandomState::new();
            prop_assert_eq!(state.hash_one(&small), state.hash_one(bytes.as_slice()));
            prop_assert_eq!(small.clone().into_vec(), bytes);
        }

        #[test]
        fn order_like_slices(a in proptest::collection::vec(any::<u8>(), 0..40),
                             b in proptest::collection::vec(any::<u8>(), 0..40)) {
            let (sa, sb) = (SmallBytes::from(a.clone()), SmallBytes::from(b.clone()));
            prop_assert_eq!(sa.cmp(&sb), a.cmp(&b));
            prop_assert_eq!(sa == sb, a == b);
        }
    }
}
