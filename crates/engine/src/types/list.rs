//! The list type. Placeholder: the representation, its encodings and their
//! conversions land with the list commands.

/// A list value.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct List {}

impl List {
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
