//! Values and their encodings. Strings follow Redis's three encodings so
//! that `OBJECT ENCODING` answers as Redis does and so integers cost no
//! heap allocation:
//!
//! * `int`: the string is the canonical decimal form of an `i64` of at most
//!   20 characters (Redis's `tryObjectEncoding`), stored as the integer;
//! * `embstr`: up to 44 bytes, stored compactly (inline up to the
//!   `SmallBytes` inline capacity);
//! * `raw`: longer strings, and any string modified in place (APPEND,
//!   SETRANGE), stored in a growable buffer so repeated appends are
//!   amortised O(1).

use std::borrow::Cow;

use ds::SmallBytes;

use crate::types::{Hash, List, Set, ZSet};

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
}

// The key table holds a `Value` per key: a new type must not grow it.
const _: () = assert!(std::mem::size_of::<Value>() <= 32);

impl Value {
    /// The name TYPE replies with.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::Hash(_) => "hash",
            Value::List(_) => "list",
            Value::Set(_) => "set",
            Value::ZSet(_) => "zset",
        }
    }
    /// The name OBJECT ENCODING replies with.
    pub fn encoding(&self) -> &'static str {
        match self {
            Value::Str(s) => s.encoding(),
            Value::Hash(h) => h.encoding(),
            Value::List(l) => l.encoding(),
            Value::Set(s) => s.encoding(),
            Value::ZSet(z) => z.encoding(),
        }
    }
    /// Approximate heap bytes used, for MEMORY USAGE / accounting.
    pub fn heap_bytes(&self) -> usize {
        match self {
            Value::Str(s) => s.heap_bytes(),
            Value::Hash(h) => h.heap_bytes(),
            Value::List(l) => l.heap_bytes(),
            Value::Set(s) => std::mem::size_of::<Set>() + s.heap_bytes(),
            Value::ZSet(z) => std::mem::size_of::<ZSet>() + z.heap_bytes(),
        }
    }
    /// Elements held: 1 for a string. Large values are freed off the
    /// request path (see `Db::remove`).
    pub fn elements(&self) -> usize {
        match self {
            Value::Str(_) => 1,
            Value::Hash(h) => h.len(),
            Value::List(l) => l.len(),
            Value::Set(s) => s.len(),
            Value::ZSet(z) => z.len(),
        }
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

#[derive(Debug, Clone, PartialEq)]
pub enum Str {
    Int(i64),
    Emb(SmallBytes),
    Raw(Vec<u8>),
}

impl Str {
    /// Encodes a client-supplied value as Redis's `tryObjectEncoding` does.
    pub fn from_bytes(b: &[u8]) -> Str {
        if b.len() <= 20 {
            if let Some(n) = parse_i64_canonical(b) {
                return Str::Int(n);
            }
        }
        Str::from_bytes_no_int(b)
    }

    /// Encodes without trying the integer form (embstr or raw by length),
    /// as Redis's `createStringObject`.
    pub fn from_bytes_no_int(b: &[u8]) -> Str {
        if b.len() <= EMBSTR_MAX {
            Str::Emb(SmallBytes::from(b))
        } else {
            Str::Raw(b.to_vec())
        }
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            Str::Int(_) => "int",
            Str::Emb(_) => "embstr",
            Str::Raw(_) => "raw",
        }
    }

    /// The string's bytes (an integer is rendered in decimal).
    pub fn as_bytes(&self) -> Cow<'_, [u8]> {
        match self {
            Str::Int(n) => Cow::Owned(itoa::Buffer::new().format(*n).as_bytes().to_vec()),
            Str::Emb(b) => Cow::Borrowed(b),
            Str::Raw(v) => Cow::Borrowed(v),
        }
    }

    /// Calls `f` with the bytes, without allocating for integers.
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        match self {
            Str::Int(n) => f(itoa::Buffer::new().format(*n).as_bytes()),
            Str::Emb(b) => f(b),
            Str::Raw(v) => f(v),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Str::Int(n) => itoa::Buffer::new().format(*n).len(),
            Str::Emb(b) => b.len(),
            Str::Raw(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes as a growable buffer for in-place modification; the value
    /// becomes `raw`, as after Redis's `dbUnshareStringValue`.
    pub fn make_raw(&mut self) -> &mut Vec<u8> {
        if !matches!(self, Str::Raw(_)) {
            let v = self.as_bytes().into_owned();
            *self = Str::Raw(v);
        }
        match self {
            Str::Raw(v) => v,
            // INVARIANT: converted to Raw just above.
            _ => unreachable!(),
        }
    }

    /// The value as an integer, if it is one (Redis's `getLongLongFromObject`
    /// accepts only the strict decimal form).
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Str::Int(n) => Some(*n),
            Str::Emb(b) => parse_i64_canonical(b),
            Str::Raw(v) => parse_i64_canonical(v),
        }
    }

    /// Approximate heap bytes used, for MEMORY USAGE / accounting.
    pub fn heap_bytes(&self) -> usize {
        match self {
            Str::Int(_) => 0,
            Str::Emb(b) => {
                if b.is_inline() {
                    0
                } else {
                    b.len()
                }
            }
            Str::Raw(v) => v.capacity(),
        }
    }
}

/// Redis's `string2ll`: only the canonical decimal form is an integer.
pub use ds::string2ll as parse_i64_canonical;

#[cfg(test)]
mod tests {
    use super::*;

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
