//! `TinyBytes`: a 16-byte owned, immutable byte string, for hash table keys.
//!
//! Owns: the representation of the keys of every [`crate::Dict`] (the
//! keyspace, hash fields, set members). A key costs its table node 16 bytes
//! instead of [`crate::SmallBytes`]'s 24, and that is what fits a keyspace
//! node (next link + key + 48-byte entry = 72 bytes) in glibc's 80-byte
//! chunk instead of the 96-byte one: 16 bytes per key, about 15 % of a
//! small key's whole cost (`bench/memory.sh`).
//!
//! # Layout
//!
//! A union of two 16-byte forms, told apart by the last byte:
//!
//! * inline: up to [`TINY_INLINE_CAP`] (15) bytes in bytes 0..15, the length
//!   in byte 15 (0..=15);
//! * heap: a pointer to a `Box<[u8]>` in bytes 0..8 and the length in bytes
//!   8..15 (56 bits), byte 15 = [`HEAP_TAG`].
//!
//! Invariants: a string is inline iff its length is at most
//! [`TINY_INLINE_CAP`]; the heap form owns exactly one `Box<[u8]>` of the
//! stored length. `Hash`, `Eq` and `Ord` are those of `[u8]`, so
//! `Borrow<[u8]>` lookups are correct.
//!
//! Why `unsafe` here when `SmallBytes` has none: a safe enum spends a tag
//! byte and alignment padding, which makes a 16-byte handle hold only 7
//! inline bytes (or 24 bytes in all). Keys of 8..15 bytes (`user:1234`,
//! `key:9999999`) are the common case this type exists for. The unsafe code
//! is confined to this file: construction, `as_slice` and `Drop`.

use std::mem::ManuallyDrop;
use std::ptr::NonNull;

/// Longest string stored without a heap allocation.
pub const TINY_INLINE_CAP: usize = 15;

/// Last byte of the heap form (never a valid inline length).
const HEAP_TAG: u8 = 0xff;

/// Largest length the heap form can record (56 bits).
const MAX_LEN: u64 = (1 << 56) - 1;

#[derive(Clone, Copy)]
#[repr(C)]
struct Heap {
    ptr: NonNull<u8>,
    /// Length in the low 56 bits, [`HEAP_TAG`] in the top byte (byte 15 of
    /// the handle on a little-endian machine).
    len_tag: u64,
}

#[repr(C)]
union Repr {
    inline: [u8; 16],
    heap: Heap,
}

/// A compact owned byte string of 16 bytes; see the module docs.
pub struct TinyBytes(Repr);

const _: () = assert!(std::mem::size_of::<TinyBytes>() == 16);
// The tag must land in byte 15 of the heap form, which is the top byte of
// `len_tag` only on little-endian targets.
#[cfg(not(target_endian = "little"))]
compile_error!("TinyBytes assumes a little-endian target");

// SAFETY: `TinyBytes` owns its heap bytes exclusively (like `Box<[u8]>`),
// and offers no interior mutability.
unsafe impl Send for TinyBytes {}
// SAFETY: as above; shared access is read-only.
unsafe impl Sync for TinyBytes {}

impl TinyBytes {
    /// Copies `bytes`; allocates only if longer than [`TINY_INLINE_CAP`].
    pub fn from_slice(bytes: &[u8]) -> Self {
        if bytes.len() <= TINY_INLINE_CAP {
            let mut inline = [0u8; 16];
            inline[..bytes.len()].copy_from_slice(bytes);
            inline[15] = bytes.len() as u8;
            TinyBytes(Repr { inline })
        } else {
            Self::from_box(bytes.into())
        }
    }

    fn from_box(b: Box<[u8]>) -> Self {
        let len = b.len() as u64;
        assert!(len <= MAX_LEN, "TinyBytes: string too long");
        let ptr = Box::into_raw(b) as *mut u8;
        TinyBytes(Repr {
            heap: Heap {
                // SAFETY: `Box::into_raw` never returns null (a zero-length
                // box is dangling but non-null; it is never inline here
                // anyway, as short strings are stored inline).
                ptr: unsafe { NonNull::new_unchecked(ptr) },
                len_tag: len | (u64::from(HEAP_TAG) << 56),
            },
        })
    }

    #[inline]
    fn tag(&self) -> u8 {
        // SAFETY: every form initialises all 16 bytes (inline writes the
        // whole array; heap writes two 8-byte fields with no padding), so
        // reading byte 15 through the array is always defined.
        unsafe { self.0.inline[15] }
    }

    /// True if the bytes are stored inside the handle.
    #[inline]
    pub fn is_inline(&self) -> bool {
        self.tag() != HEAP_TAG
    }

    /// The contents.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        let tag = self.tag();
        if tag != HEAP_TAG {
            // SAFETY: inline form (tag is the length, <= 15, by the
            // invariant); the range is within the 16-byte array.
            unsafe { self.0.inline.get_unchecked(..usize::from(tag)) }
        } else {
            // SAFETY: heap form: `ptr`/len describe the live `Box<[u8]>`
            // this handle owns.
            unsafe {
                let h = self.0.heap;
                std::slice::from_raw_parts(h.ptr.as_ptr(), (h.len_tag & MAX_LEN) as usize)
            }
        }
    }

    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// True for the empty string.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap bytes owned beyond the handle (0 when inline), for memory
    /// accounting.
    #[inline]
    pub fn heap_bytes(&self) -> usize {
        if self.is_inline() {
            0
        } else {
            self.len()
        }
    }

    /// The contents as a `Vec`, reusing the heap allocation if any.
    pub fn into_vec(self) -> Vec<u8> {
        if self.is_inline() {
            return self.as_slice().to_vec();
        }
        let this = ManuallyDrop::new(self);
        // SAFETY: heap form; ownership of the box moves out of `this`,
        // which is never dropped.
        unsafe { this.take_box() }.into_vec()
    }

    /// Rebuilds the owned box of the heap form.
    ///
    /// # Safety
    /// `self` must be in the heap form, and must not be used (or dropped)
    /// afterwards as owning the box.
    unsafe fn take_box(&self) -> Box<[u8]> {
        let h = self.0.heap;
        let len = (h.len_tag & MAX_LEN) as usize;
        Box::from_raw(std::ptr::slice_from_raw_parts_mut(h.ptr.as_ptr(), len))
    }
}

impl Drop for TinyBytes {
    fn drop(&mut self) {
        if !self.is_inline() {
            // SAFETY: heap form, and `self` is being dropped.
            drop(unsafe { self.take_box() });
        }
    }
}

impl Clone for TinyBytes {
    fn clone(&self) -> Self {
        Self::from_slice(self.as_slice())
    }
}

impl Default for TinyBytes {
    fn default() -> Self {
        Self::from_slice(b"")
    }
}

impl From<Vec<u8>> for TinyBytes {
    /// Reuses the vector's allocation when the string is too long to be
    /// inline (after shrinking it to fit).
    fn from(vec: Vec<u8>) -> Self {
        if vec.len() <= TINY_INLINE_CAP {
            Self::from_slice(&vec)
        } else {
            Self::from_box(vec.into_boxed_slice())
        }
    }
}

impl From<&crate::SmallBytes> for TinyBytes {
    fn from(s: &crate::SmallBytes) -> Self {
        Self::from_slice(s)
    }
}

impl From<&TinyBytes> for crate::SmallBytes {
    #[inline]
    fn from(s: &TinyBytes) -> Self {
        crate::SmallBytes::from_slice(s)
    }
}

impl From<TinyBytes> for Vec<u8> {
    fn from(bytes: TinyBytes) -> Self {
        bytes.into_vec()
    }
}

crate::bytes::byte_string_traits!(TinyBytes);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::hash::BuildHasher;

    #[test]
    fn inline_boundary() {
        let short = TinyBytes::from(&[7u8; TINY_INLINE_CAP][..]);
        assert!(short.is_inline());
        assert_eq!(short.len(), TINY_INLINE_CAP);
        assert_eq!(short.heap_bytes(), 0);
        let long = TinyBytes::from(&[7u8; TINY_INLINE_CAP + 1][..]);
        assert!(!long.is_inline());
        assert_eq!(&*long, &[7u8; TINY_INLINE_CAP + 1][..]);
        assert_eq!(long.heap_bytes(), TINY_INLINE_CAP + 1);
        assert!(TinyBytes::default().is_empty());
        assert!(TinyBytes::default().is_inline());
    }

    #[test]
    fn conversions_and_clone() {
        let long = "x".repeat(100);
        let a = TinyBytes::from(long.clone().into_bytes());
        let b = a.clone();
        drop(a);
        assert_eq!(&*b, long.as_bytes());
        assert_eq!(b.into_vec(), long.as_bytes());
        let s = TinyBytes::from("hi");
        assert_eq!(Vec::from(s.clone()), b"hi");
        assert_eq!(crate::SmallBytes::from(&s), crate::SmallBytes::from("hi"));
        assert_eq!(format!("{s:?}"), "\"hi\"");
    }

    proptest! {
        #[test]
        fn behaves_like_a_slice(a in proptest::collection::vec(any::<u8>(), 0..48),
                                b in proptest::collection::vec(any::<u8>(), 0..48)) {
            let (ta, tb) = (TinyBytes::from(a.as_slice()), TinyBytes::from(b.clone()));
            prop_assert_eq!(&*ta, a.as_slice());
            prop_assert_eq!(ta.is_inline(), a.len() <= TINY_INLINE_CAP);
            prop_assert_eq!(ta.cmp(&tb), a.cmp(&b));
            prop_assert_eq!(ta == tb, a == b);
            let state = std::collections::hash_map::RandomState::new();
            prop_assert_eq!(state.hash_one(&ta), state.hash_one(a.as_slice()));
            prop_assert_eq!(ta.clone().into_vec(), a);
        }
    }
}
