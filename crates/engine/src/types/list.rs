//! The list type: a [`QuickList`] (Redis 7.0's only list encoding, so
//! `OBJECT ENCODING` always answers `quicklist`), boxed so a `Value` stays
//! 32 bytes.
//!
//! Node size and compress depth are fixed when the list is created from
//! `list-max-listpack-size` and `list-compress-depth` (`EncLimits`), as
//! Redis 7.0 sets both with `quicklistSetOptions` when it creates a list
//! (push to a new key, LMOVE to a new key, RDB load): a CONFIG SET applies
//! to lists created afterwards; existing lists keep theirs.

use std::ops::{Deref, DerefMut};

use ds::QuickList;

use super::EncLimits;

/// A list value. Derefs to its [`QuickList`] for the operations.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct List {
    ql: Box<QuickList>,
}

impl List {
    /// An empty list with nodes sized by `enc.list_max_listpack_size`,
    /// inner nodes compressed past `enc.list_compress_depth`.
    pub fn new(enc: &EncLimits) -> Self {
        List {
            ql: Box::new(QuickList::with_compress(
                enc.list_max_listpack_size,
                enc.list_compress_depth,
            )),
        }
    }
    /// The name OBJECT ENCODING replies with.
    pub fn encoding(&self) -> &'static str {
        "quicklist"
    }
    /// Heap bytes used (MEMORY USAGE, accounting): the boxed header, node
    /// headers and node buffers with their capacity (compressed nodes at
    /// their compressed size).
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of::<QuickList>() + self.ql.heap_bytes()
    }
}

impl Deref for List {
    type Target = QuickList;
    fn deref(&self) -> &QuickList {
        &self.ql
    }
}

impl DerefMut for List {
    fn deref_mut(&mut self) -> &mut QuickList {
        &mut self.ql
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basics() {
        let mut l = List::new(&EncLimits::default());
        assert_eq!(l.encoding(), "quicklist");
        assert!(l.is_empty());
        l.push_back(b"a");
        l.push_front(b"b");
        assert_eq!(l.len(), 2);
        assert_eq!(l.get(0).as_deref(), Some(&b"b"[..]));
        assert!(l.heap_bytes() >= std::mem::size_of::<QuickList>() + 6);
        let fill = EncLimits {
            list_max_listpack_size: 5,
            ..EncLimits::default()
        };
        assert_eq!(List::new(&fill).fill(), 5);
    }

    #[test]
    fn memory_per_element_is_listpack_like() {
        // 100k 10-byte elements: Redis's listpack costs 12 bytes each plus
        // ~0.5% of node headers; stay within that.
        let mut l = List::new(&EncLimits::default());
        for i in 0..100_000u32 {
            l.push_back(format!("{i:010}").as_bytes());
        }
        let per = l.heap_bytes() as f64 / 100_000.0;
        assert!(per < 12.5, "{per} bytes per element");
    }

    #[test]
    fn compress_depth_comes_from_the_limits() {
        let enc = EncLimits {
            list_compress_depth: 1,
            ..EncLimits::default()
        };
        let mut l = List::new(&enc);
        let mut plain = List::new(&EncLimits::default());
        for i in 0..100_000u32 {
            let v = format!("{:010}", i % 100);
            l.push_back(v.as_bytes());
            plain.push_back(v.as_bytes());
        }
        assert_eq!(l.compress_depth(), 1);
        assert_eq!(l.encoding(), "quicklist");
        assert!(l.compressed_nodes() > 0);
        assert!(l.heap_bytes() * 2 < plain.heap_bytes());
        assert_eq!(l, plain);
    }
}
