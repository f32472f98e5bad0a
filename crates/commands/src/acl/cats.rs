//! ACL command categories as bits. Each command's categories come from its
//! table entry (`CommandSpec::acl`, the names COMMAND INFO prints) and are
//! turned into a `u32` once, when the registry is built
//! ([`crate::table::Registry::cats`]); permission checks and ACL rules only
//! ever test bits.

/// Redis's categories in its order (`ACL CAT`, and the order in which
/// ACL LIST's rule approximation tries them).
pub const NAMES: [&str; 21] = [
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

/// The bit of category `name` (any case, without `@`), or `None`.
pub fn bit(name: &[u8]) -> Option<u32> {
    NAMES
        .iter()
        .position(|n| n.as_bytes().eq_ignore_ascii_case(name))
        .map(|i| 1 << i)
}

/// The bit set of a table entry's category names. A name that is not a
/// category is a bug in the table (a test checks every entry).
pub fn bits(names: &[&str]) -> u32 {
    names
        .iter()
        .filter_map(|n| bit(n.as_bytes()))
        .fold(0, |a, b| a | b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::registry;

    #[test]
    fn every_table_category_is_known() {
        let reg = registry();
        for (name, spec, _) in &reg.specs {
            for c in spec.acl {
                assert!(bit(c.as_bytes()).is_some(), "{name}: unknown category {c}");
            }
        }
    }

    #[test]
    fn bits_follow_the_names() {
        assert_eq!(bit(b"keyspace"), Some(1));
        assert_eq!(bit(b"SCRIPTING"), Some(1 << 20));
        assert_eq!(bit(b"all"), None);
        assert_eq!(bits(&["read", "fast"]), (1 << 1) | (1 << 14));
    }
}
