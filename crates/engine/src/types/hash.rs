//! The hash type: field → value, with Redis's two encodings.
//!
//! * `listpack`: field, value, field, value ... in one compact
//!   [`Listpack`] buffer, in insertion order (HGETALL answers in that order,
//!   as Redis). Lookups are linear, which is cheap at the sizes allowed.
//! * `hashtable`: a [`Dict`] of [`TinyBytes`] fields and [`SmallBytes`] values, boxed so
//!   the type stays small in the key table.
//!
//! A hash starts as a listpack and becomes a hashtable, never back, when it
//! would hold more than `hash-max-listpack-entries` fields or a field or
//! value longer than `hash-max-listpack-value` bytes (Redis's
//! `hashTypeTryConversion` / `hashTypeSet`), or when the listpack would pass
//! the 1 GiB safety size. Nothing here builds a reply: readers get
//! [`LpEntry`] values (a string, or an integer standing for its decimal
//! form) and render them.
//!
//! Invariants: a stored hash is never empty (the commands delete the key);
//! the listpack holds an even number of entries and no duplicate field;
//! `Table::str_heap` is the sum of the heap bytes of its strings, so
//! `heap_bytes` is O(1).

use ds::listpack::{Listpack, LpEntry};
use ds::{Dict, SmallBytes, TinyBytes};
use rand::Rng;

use super::EncLimits;

/// A hash value; see the module docs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Hash(Repr);

#[derive(Debug)]
enum Repr {
    Listpack(Listpack),
    Table(Box<Table>),
}

impl Default for Repr {
    fn default() -> Self {
        Repr::Listpack(Listpack::new())
    }
}

#[derive(Debug, Default)]
struct Table {
    dict: Dict<TinyBytes, SmallBytes>,
    /// Heap bytes of the fields and values (beyond their inline handles).
    str_heap: usize,
}

impl Table {
    fn insert(&mut self, field: &[u8], value: &[u8]) -> bool {
        let v = SmallBytes::from(value);
        self.str_heap += v.heap_bytes();
        match self.dict.get_mut(field) {
            Some(old) => {
                self.str_heap -= old.heap_bytes();
                *old = v;
                false
            }
            None => {
                let f = TinyBytes::from(field);
                self.str_heap += f.heap_bytes();
                self.dict.insert(f, v);
                true
            }
        }
    }
}

impl Clone for Repr {
    fn clone(&self) -> Self {
        match self {
            Repr::Listpack(lp) => Repr::Listpack(lp.clone()),
            Repr::Table(t) => {
                let mut dict = Dict::with_capacity(t.dict.len());
                for (k, v) in t.dict.iter() {
                    dict.insert(k.clone(), v.clone());
                }
                Repr::Table(Box::new(Table {
                    dict,
                    str_heap: t.str_heap,
                }))
            }
        }
    }
}

impl PartialEq for Repr {
    /// Same encoding and same field/value pairs (order matters only for
    /// listpacks, where it is observable).
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Repr::Listpack(a), Repr::Listpack(b)) => a == b,
            (Repr::Table(a), Repr::Table(b)) => {
                a.dict.len() == b.dict.len()
                    && a.dict.iter().all(|(k, v)| b.dict.get(&k[..]) == Some(v))
            }
            _ => false,
        }
    }
}

/// Iterator over a hash's `(field, value)` pairs.
pub enum Iter<'a> {
    Listpack(ds::listpack::Iter<'a>),
    Table(ds::dict::Iter<'a, TinyBytes, SmallBytes>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = (LpEntry<'a>, LpEntry<'a>);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Listpack(it) => {
                let f = it.next()?;
                // INVARIANT: the listpack holds whole pairs.
                let v = it.next().expect("hash listpack holds pairs");
                Some((f, v))
            }
            Iter::Table(it) => it.next().map(|(k, v)| (LpEntry::Str(k), LpEntry::Str(v))),
        }
    }
}

impl Hash {
    /// An empty hash (listpack, nothing allocated).
    pub fn new() -> Self {
        Hash::default()
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Listpack(lp) => lp.len() / 2,
            Repr::Table(t) => t.dict.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The name OBJECT ENCODING replies with.
    pub fn encoding(&self) -> &'static str {
        match &self.0 {
            Repr::Listpack(_) => "listpack",
            Repr::Table(_) => "hashtable",
        }
    }

    pub fn is_listpack(&self) -> bool {
        matches!(self.0, Repr::Listpack(_))
    }

    /// The hashtable encoding's dict (`None` for a listpack), for writers
    /// that walk it in slices (`Dict::walk`).
    pub fn table_dict(&self) -> Option<&Dict<TinyBytes, SmallBytes>> {
        match &self.0 {
            Repr::Table(t) => Some(&t.dict),
            Repr::Listpack(_) => None,
        }
    }

    /// Heap bytes owned: the listpack buffer, or the table's buckets and
    /// nodes plus the strings' heap parts. O(1).
    pub fn heap_bytes(&self) -> usize {
        match &self.0 {
            Repr::Listpack(lp) => lp.bytes(),
            Repr::Table(t) => t.dict.allocated_bytes() + t.str_heap,
        }
    }

    /// The value of `field`.
    pub fn get(&self, field: &[u8]) -> Option<LpEntry<'_>> {
        match &self.0 {
            Repr::Listpack(lp) => {
                let off = lp.find(field, 1)?;
                // INVARIANT: a field is always followed by its value.
                let next = lp.get(off).1.expect("hash listpack holds pairs");
                Some(lp.get(next).0)
            }
            Repr::Table(t) => t.dict.get(field).map(|v| LpEntry::Str(v)),
        }
    }

    pub fn contains(&self, field: &[u8]) -> bool {
        match &self.0 {
            Repr::Listpack(lp) => lp.find(field, 1).is_some(),
            Repr::Table(t) => t.dict.contains_key(field),
        }
    }

    /// Redis's `hashTypeTryConversion`: converts to a hashtable before a
    /// write of `items` (fields and values) if one of them is longer than
    /// `hash-max-listpack-value`, or their total would pass the listpack's
    /// safety size.
    pub fn prepare_for<'a>(&mut self, items: impl IntoIterator<Item = &'a [u8]>, lim: &EncLimits) {
        let Repr::Listpack(lp) = &self.0 else {
            return;
        };
        let mut sum = 0usize;
        for i in items {
            if i.len() > lim.hash_max_listpack_value {
                self.convert();
                return;
            }
            sum = sum.saturating_add(i.len());
        }
        if !lp.safe_to_add(sum) {
            self.convert();
        }
    }

    /// Sets `field` to `value` (Redis's `hashTypeSet`); true if the field
    /// was created, false if it was updated. Converts to a hashtable when
    /// either string is longer than `hash-max-listpack-value` or the hash
    /// outgrows `hash-max-listpack-entries`.
    pub fn set(&mut self, field: &[u8], value: &[u8], lim: &EncLimits) -> bool {
        if let Repr::Listpack(lp) = &self.0 {
            let long = field.len() > lim.hash_max_listpack_value
                || value.len() > lim.hash_max_listpack_value;
            if long || !lp.safe_to_add(field.len() + value.len() + 10) {
                self.convert();
            }
        }
        match &mut self.0 {
            Repr::Listpack(lp) => {
                if let Some(off) = lp.find(field, 1) {
                    // INVARIANT: a field is always followed by its value.
                    let voff = lp.get(off).1.expect("hash listpack holds pairs");
                    lp.replace(voff, value);
                    return false;
                }
                lp.push_many(&[field, value]);
                if lp.len() / 2 > lim.hash_max_listpack_entries {
                    self.convert();
                }
                true
            }
            Repr::Table(t) => t.insert(field, value),
        }
    }

    /// Deletes `field`; true if it was there.
    pub fn remove(&mut self, field: &[u8]) -> bool {
        match &mut self.0 {
            Repr::Listpack(lp) => match lp.find(field, 1) {
                Some(off) => {
                    lp.delete(off, 2);
                    true
                }
                None => false,
            },
            Repr::Table(t) => match t.dict.remove(field) {
                Some((k, v)) => {
                    t.str_heap -= k.heap_bytes() + v.heap_bytes();
                    true
                }
                None => false,
            },
        }
    }

    /// The pairs: insertion order for a listpack, table order otherwise.
    pub fn iter(&self) -> Iter<'_> {
        match &self.0 {
            Repr::Listpack(lp) => Iter::Listpack(lp.iter()),
            Repr::Table(t) => Iter::Table(t.dict.iter()),
        }
    }

    /// One step of HSCAN from `cursor`: a listpack reports every pair and
    /// cursor 0 (as Redis); a hashtable visits one bucket's worth through
    /// the dict's reverse-binary cursor. Returns the next cursor.
    pub fn scan(&self, cursor: u64, mut f: impl FnMut(LpEntry<'_>, LpEntry<'_>)) -> u64 {
        match &self.0 {
            Repr::Listpack(_) => {
                for (k, v) in self.iter() {
                    f(k, v);
                }
                0
            }
            Repr::Table(t) => t
                .dict
                .scan(cursor, |k, v| f(LpEntry::Str(k), LpEntry::Str(v))),
        }
    }

    /// A uniformly random pair of a hashtable (Redis's
    /// `dictGetFairRandomKey`); `None` for a listpack or an empty hash
    /// (listpack callers index into [`Hash::iter`]'s pairs instead).
    pub fn random_table_pair<R: Rng + ?Sized>(
        &self,
        rng: &mut R,
    ) -> Option<(LpEntry<'_>, LpEntry<'_>)> {
        match &self.0 {
            Repr::Listpack(_) => None,
            Repr::Table(t) => t
                .dict
                .random_entry(rng)
                .map(|(k, v)| (LpEntry::Str(k), LpEntry::Str(v))),
        }
    }

    /// Converts a listpack to a hashtable (Redis's `hashTypeConvert`).
    fn convert(&mut self) {
        let Repr::Listpack(lp) = &self.0 else {
            return;
        };
        let mut t = Table {
            dict: Dict::with_capacity(lp.len() / 2),
            str_heap: 0,
        };
        for (f, v) in self.iter() {
            f.with_bytes(|f| v.with_bytes(|v| t.insert(f, v)));
        }
        self.0 = Repr::Table(Box::new(t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lim(entries: usize, value: usize) -> EncLimits {
        EncLimits {
            hash_max_listpack_entries: entries,
            hash_max_listpack_value: value,
            ..EncLimits::default()
        }
    }

    fn pairs(h: &Hash) -> Vec<(Vec<u8>, Vec<u8>)> {
        h.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect()
    }

    #[test]
    fn handle_is_small() {
        assert!(std::mem::size_of::<Hash>() <= 24);
    }

    #[test]
    fn listpack_keeps_insertion_order_and_updates_in_place() {
        let l = lim(128, 64);
        let mut h = Hash::new();
        assert!(h.set(b"b", b"1", &l));
        assert!(h.set(b"a", b"two", &l));
        assert!(h.set(b"10", b"-5", &l));
        assert!(!h.set(b"b", b"one", &l));
        assert_eq!(h.encoding(), "listpack");
        assert_eq!(
            pairs(&h),
            vec![
                (b"b".to_vec(), b"one".to_vec()),
                (b"a".to_vec(), b"two".to_vec()),
                (b"10".to_vec(), b"-5".to_vec()),
            ]
        );
        assert_eq!(h.get(b"10"), Some(LpEntry::Int(-5)));
        assert_eq!(h.get(b"one"), None);
        assert!(h.remove(b"a"));
        assert!(!h.remove(b"a"));
        assert_eq!(h.len(), 2);
        assert!(h.contains(b"b"));
    }

    #[test]
    fn converts_past_entries_threshold() {
        let l = lim(3, 64);
        let mut h = Hash::new();
        for f in [b"a", b"b", b"c"] {
            h.set(f, b"v", &l);
        }
        assert_eq!(h.encoding(), "listpack");
        h.set(b"c", b"w", &l);
        assert_eq!(h.encoding(), "listpack");
        h.set(b"d", b"v", &l);
        assert_eq!(h.encoding(), "hashtable");
        assert_eq!(h.len(), 4);
        // Never back, even when small again.
        for f in [b"a", b"b", b"c"] {
            h.remove(f);
        }
        assert_eq!(h.encoding(), "hashtable");
        assert_eq!(h.get(b"d"), Some(LpEntry::Str(b"v")));
    }

    #[test]
    fn converts_past_value_threshold() {
        let l = lim(128, 4);
        let mut h = Hash::new();
        h.set(b"f", b"1234", &l);
        assert_eq!(h.encoding(), "listpack");
        h.set(b"f", b"12345", &l);
        assert_eq!(h.encoding(), "hashtable");
        let mut h = Hash::new();
        h.set(b"fffff", b"1", &l);
        assert_eq!(h.encoding(), "hashtable");
        let mut h = Hash::new();
        h.set(b"f", b"1", &l);
        h.prepare_for([&b"f"[..], b"xxxxxxx"], &l);
        assert_eq!(h.encoding(), "hashtable");
        assert_eq!(pairs(&h), vec![(b"f".to_vec(), b"1".to_vec())]);
    }

    #[test]
    fn zero_limits_convert_at_once() {
        let mut h = Hash::new();
        h.set(b"a", b"b", &lim(0, 64));
        assert_eq!(h.encoding(), "hashtable");
        let mut h = Hash::new();
        h.set(b"", b"", &lim(128, 0));
        assert_eq!(h.encoding(), "listpack");
    }

    #[test]
    fn heap_bytes_follow_contents() {
        let l = lim(128, 64);
        let mut h = Hash::new();
        assert_eq!(h.heap_bytes(), 0);
        for i in 0..5 {
            h.set(
                format!("field{i}").as_bytes(),
                format!("value{i}").as_bytes(),
                &l,
            );
        }
        // Count header + 10 entries of 1 header byte + 6 bytes.
        assert_eq!(h.heap_bytes(), 2 + 10 * 7);
        let mut t = Hash::new();
        t.set(b"k", &[b'x'; 100], &l);
        assert_eq!(t.encoding(), "hashtable");
        let base = t.heap_bytes();
        assert!(base >= 100);
        t.set(&[b'y'; 30], b"short", &l);
        assert!(t.heap_bytes() >= base + 30);
        t.set(b"k", b"tiny", &l);
        t.remove(&[b'y'; 30]);
        assert!(t.heap_bytes() < base);
    }

    #[test]
    fn scan_listpack_returns_all_with_cursor_zero() {
        let l = lim(128, 64);
        let mut h = Hash::new();
        h.set(b"a", b"1", &l);
        h.set(b"b", b"2", &l);
        let mut seen = Vec::new();
        assert_eq!(h.scan(12345, |f, v| seen.push((f.to_vec(), v.to_vec()))), 0);
        assert_eq!(seen.len(), 2);
    }

    #[test]
    fn scan_table_visits_everything() {
        let l = lim(4, 64);
        let mut h = Hash::new();
        for i in 0..100 {
            h.set(i.to_string().as_bytes(), b"v", &l);
        }
        let mut seen = std::collections::HashSet::new();
        let mut c = 0;
        loop {
            c = h.scan(c, |f, _| {
                seen.insert(f.to_vec());
            });
            if c == 0 {
                break;
            }
        }
        assert_eq!(seen.len(), 100);
    }

    #[test]
    fn clone_and_eq() {
        let l = lim(2, 64);
        let mut a = Hash::new();
        a.set(b"x", b"1", &l);
        let b = a.clone();
        assert_eq!(a, b);
        a.set(b"y", b"2", &l);
        a.set(b"z", b"3", &l);
        let c = a.clone();
        assert_eq!(c.encoding(), "hashtable");
        assert_eq!(a, c);
        a.set(b"z", b"4", &l);
        assert_ne!(a, c);
    }
}
