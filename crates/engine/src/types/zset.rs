//! The sorted set type. Placeholder: the representation, its encodings and their
//! conversions land with the sorted set commands.

/// A sorted set value.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ZSet {}

impl ZSet {
    /// Number of elements.
    pub fn len(&self) -> usize {
        0
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The name OBJECT ENCODING replies with.
    pub fn encoding(&self) -> &'static str {
        "listpack"
    }
    /// Approximate heap bytes used (MEMORY USAGE, accounting).
    pub fn heap_bytes(&self) -> usize {
        0
    }
}
