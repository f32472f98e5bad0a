//! The set type: three encodings and the conversions between them, as
//! Redis 7.2 does them (`t_set.c`).
//!
//! * `intset` ([`ds::intset::IntSet`]): every member is a canonical `i64`
//!   and there are at most `set-max-intset-entries` of them.
//! * `listpack` ([`ds::packed::Packed`]): small sets with non-integer
//!   members, at most `set-max-listpack-entries` members of at most
//!   `set-max-listpack-value` bytes each, in insertion order. (Redis 7.0
//!   has no such form and reports `hashtable`; the issue asks for 7.2's.)
//! * `hashtable` ([`ds::Dict`]`<TinyBytes, ()>`): everything else.
//!
//! Conversions only go towards `hashtable` while members are added
//! (`intset` -> `listpack` when a non-integer arrives into a small intset,
//! `intset`/`listpack` -> `hashtable` past a threshold); a set never
//! shrinks back on removal, as in Redis. The one exception is
//! [`Set::maybe_to_intset`], SINTERSTORE's final step.
//!
//! Members are handed out as [`Member`]: an integer (intset members, and
//! packed entries stored as integers) or a byte string. A byte string that
//! is a canonical integer is the same member as that integer in every
//! operation.
//!
//! Invariants: a set value is never empty in the keyspace (commands delete
//! the key instead); `size_of::<Set>() <= 24` so `Value` stays 32 bytes.

use std::collections::HashSet;
use std::fmt;

use ds::intset::IntSet;
use ds::packed::{encoded_len, Packed};
use ds::{string2ll, Dict, TinyBytes};
use rand::Rng;

use super::EncLimits;

/// A member as stored: an integer or bytes (see the module docs).
pub use ds::packed::Item as Member;

/// An owned member (popped from a set).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnedMember {
    Int(i64),
    Bytes(Vec<u8>),
}

impl OwnedMember {
    pub fn as_member(&self) -> Member<'_> {
        match self {
            OwnedMember::Int(n) => Member::Int(*n),
            OwnedMember::Bytes(b) => Member::Str(b),
        }
    }
}

impl From<Member<'_>> for OwnedMember {
    fn from(m: Member<'_>) -> Self {
        match m {
            Member::Int(n) => OwnedMember::Int(n),
            Member::Str(b) => OwnedMember::Bytes(b.to_vec()),
        }
    }
}

/// Calls `f` with the member's bytes (an integer rendered in decimal,
/// without allocating).
#[inline]
pub fn with_bytes<R>(m: Member<'_>, f: impl FnOnce(&[u8]) -> R) -> R {
    match m {
        Member::Int(n) => f(itoa::Buffer::new().format(n).as_bytes()),
        Member::Str(b) => f(b),
    }
}

/// The member as an integer, if it is one.
#[inline]
fn as_int(m: Member<'_>) -> Option<i64> {
    match m {
        Member::Int(n) => Some(n),
        Member::Str(b) => string2ll(b),
    }
}

/// Decimal length of a member (Redis's `sdigits10` for integers).
fn member_len(m: Member<'_>) -> usize {
    match m {
        Member::Int(n) => itoa::Buffer::new().format(n).len(),
        Member::Str(b) => b.len(),
    }
}

/// Which encoding a set uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetEncoding {
    IntSet,
    Packed,
    Table,
}

/// The hashtable form: the dict and the heap bytes its keys own.
#[derive(Debug, Default)]
struct Table {
    dict: Dict<TinyBytes, ()>,
    key_heap: usize,
}

impl Table {
    fn with_capacity(n: usize) -> Self {
        Table {
            dict: Dict::with_capacity(n),
            key_heap: 0,
        }
    }
    fn insert(&mut self, b: &[u8]) -> bool {
        if self.dict.contains_key(b) {
            return false;
        }
        let k = TinyBytes::from(b);
        self.key_heap += k.heap_bytes();
        self.dict.insert(k, ());
        true
    }
    fn remove(&mut self, b: &[u8]) -> bool {
        match self.dict.remove(b) {
            Some((k, ())) => {
                self.key_heap -= k.heap_bytes();
                true
            }
            None => false,
        }
    }
}

enum Repr {
    Ints(IntSet),
    Pack(Packed),
    Table(Box<Table>),
}

/// A set value; see the module docs.
pub struct Set {
    repr: Repr,
}

const _: () = assert!(std::mem::size_of::<Set>() <= 24);

/// Redis's `intsetMaxEntries`: the intset limit, capped at 2^30.
fn intset_max(lim: &EncLimits) -> usize {
    lim.set_max_intset_entries.min(1 << 30)
}

/// Packed bytes for `n` copies of integer `v` (Redis's
/// `lpEstimateBytesRepeatedInteger`), for the size safety check.
fn est_repeated(v: i64, n: usize) -> usize {
    4 + n.saturating_mul(encoded_len(Member::Int(v)))
}

impl Default for Set {
    fn default() -> Self {
        Set::new_intset()
    }
}

impl Set {
    /// An empty intset (SUNIONSTORE/SDIFFSTORE start their result here).
    pub fn new_intset() -> Set {
        Set {
            repr: Repr::Ints(IntSet::new()),
        }
    }

    /// An empty listpack.
    pub fn new_packed() -> Set {
        Set {
            repr: Repr::Pack(Packed::new()),
        }
    }

    /// Redis's `setTypeCreate`: the encoding a new set starts in, given its
    /// first member and about how many members are coming (`size_hint`).
    pub fn create(first: &[u8], size_hint: usize, lim: &EncLimits) -> Set {
        if string2ll(first).is_some() && size_hint <= lim.set_max_intset_entries {
            Set::new_intset()
        } else if size_hint <= lim.set_max_listpack_entries {
            Set::new_packed()
        } else {
            Set {
                repr: Repr::Table(Box::new(Table::with_capacity(size_hint))),
            }
        }
    }

    /// Redis's `setTypeMaybeConvert`: before adding about `size_hint`
    /// members, go straight to a hashtable if they cannot fit.
    pub fn maybe_convert(&mut self, size_hint: usize, lim: &EncLimits) {
        let over = match &self.repr {
            Repr::Ints(_) => size_hint > lim.set_max_intset_entries,
            Repr::Pack(_) => size_hint > lim.set_max_listpack_entries,
            Repr::Table(_) => false,
        };
        if over {
            self.convert_to_table(size_hint);
        }
    }

    /// Number of members. O(1).
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Ints(s) => s.len(),
            Repr::Pack(p) => p.len(),
            Repr::Table(t) => t.dict.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn kind(&self) -> SetEncoding {
        match &self.repr {
            Repr::Ints(_) => SetEncoding::IntSet,
            Repr::Pack(_) => SetEncoding::Packed,
            Repr::Table(_) => SetEncoding::Table,
        }
    }

    /// The hashtable encoding's dict (`None` for the compact ones), for
    /// writers that walk it in slices (`Dict::walk`).
    pub fn table_dict(&self) -> Option<&Dict<TinyBytes, ()>> {
        match &self.repr {
            Repr::Table(t) => Some(&t.dict),
            _ => None,
        }
    }

    /// The name OBJECT ENCODING replies with.
    pub fn encoding(&self) -> &'static str {
        match self.kind() {
            SetEncoding::IntSet => "intset",
            SetEncoding::Packed => "listpack",
            SetEncoding::Table => "hashtable",
        }
    }

    /// Heap bytes used: exact for the compact forms; for a hashtable its
    /// buckets, nodes and the members' own heap blocks (kept as a running
    /// total, so this is O(1)).
    pub fn heap_bytes(&self) -> usize {
        match &self.repr {
            Repr::Ints(s) => s.heap_bytes(),
            Repr::Pack(p) => p.bytes(),
            Repr::Table(t) => std::mem::size_of::<Table>() + t.dict.allocated_bytes() + t.key_heap,
        }
    }

    /// Converts to a hashtable sized for `cap` members.
    fn convert_to_table(&mut self, cap: usize) {
        let mut t = Table::with_capacity(cap.max(self.len()));
        for m in self.iter() {
            with_bytes(m, |b| t.insert(b));
        }
        self.repr = Repr::Table(Box::new(t));
    }

    /// Adds a member given as bytes; false if it was already there.
    pub fn add(&mut self, m: &[u8], lim: &EncLimits) -> bool {
        self.add_member(Member::Str(m), lim)
    }

    /// Redis's `setTypeAddAux`: adds `m`, converting the encoding first
    /// when `m` does not fit it. False if `m` was already a member.
    pub fn add_member(&mut self, m: Member<'_>, lim: &EncLimits) -> bool {
        match &mut self.repr {
            Repr::Ints(s) => {
                if let Some(v) = as_int(m) {
                    if !s.insert(v) {
                        return false;
                    }
                    let n = s.len();
                    if n > intset_max(lim) {
                        self.convert_to_table(n);
                    }
                    return true;
                }
                // A non-integer: a listpack if everything would fit one,
                // judging the integers by the widest of min and max.
                let n = s.len();
                let (mut maxelelen, mut totsize) = (0, 0);
                if let (Some(lo), Some(hi)) = (s.min(), s.max()) {
                    maxelelen = member_len(Member::Int(lo)).max(member_len(Member::Int(hi)));
                    totsize = est_repeated(lo, n).max(est_repeated(hi, n));
                }
                let len = member_len(m);
                if n < lim.set_max_listpack_entries
                    && len <= lim.set_max_listpack_value
                    && maxelelen <= lim.set_max_listpack_value
                    && totsize + len <= ds::packed::MAX_SAFE_BYTES
                {
                    let mut p = Packed::new();
                    for v in s.iter() {
                        p.push(Member::Int(v));
                    }
                    p.push(m);
                    self.repr = Repr::Pack(p);
                } else {
                    self.convert_to_table(n + 1);
                    self.table_insert(m);
                }
                true
            }
            Repr::Pack(p) => {
                if p.find(m).is_some() {
                    return false;
                }
                let len = member_len(m);
                if p.len() < lim.set_max_listpack_entries
                    && len <= lim.set_max_listpack_value
                    && p.safe_to_add(len)
                {
                    p.push(m);
                } else {
                    let n = p.len();
                    self.convert_to_table(n + 1);
                    self.table_insert(m);
                }
                true
            }
            Repr::Table(_) => self.table_insert(m),
        }
    }

    fn table_insert(&mut self, m: Member<'_>) -> bool {
        match &mut self.repr {
            Repr::Table(t) => with_bytes(m, |b| t.insert(b)),
            // INVARIANT: only called on a hashtable.
            _ => unreachable!("table_insert on a compact set"),
        }
    }

    /// Removes a member given as bytes; false if it was not there.
    pub fn remove(&mut self, m: &[u8]) -> bool {
        self.remove_member(Member::Str(m))
    }

    /// Removes `m`; false if it was not a member. The encoding stays.
    pub fn remove_member(&mut self, m: Member<'_>) -> bool {
        match &mut self.repr {
            Repr::Ints(s) => as_int(m).is_some_and(|v| s.remove(v)),
            Repr::Pack(p) => p.remove(m),
            Repr::Table(t) => with_bytes(m, |b| t.remove(b)),
        }
    }

    /// Whether `m` (bytes) is a member.
    pub fn contains(&self, m: &[u8]) -> bool {
        self.contains_member(Member::Str(m))
    }

    pub fn contains_member(&self, m: Member<'_>) -> bool {
        match &self.repr {
            Repr::Ints(s) => as_int(m).is_some_and(|v| s.contains(v)),
            Repr::Pack(p) => p.find(m).is_some(),
            Repr::Table(t) => with_bytes(m, |b| t.dict.contains_key(b)),
        }
    }

    /// Members in the encoding's order: ascending for an intset, insertion
    /// order for a listpack, table order for a hashtable.
    pub fn iter(&self) -> Iter<'_> {
        match &self.repr {
            Repr::Ints(s) => Iter::Ints(s, 0),
            Repr::Pack(p) => Iter::Pack(p.iter_at()),
            Repr::Table(t) => Iter::Table(t.dict.iter()),
        }
    }

    /// A uniformly random member (Redis's `setTypeRandomElement`); `None`
    /// when empty.
    pub fn random<R: Rng + ?Sized>(&self, rng: &mut R) -> Option<Member<'_>> {
        if self.is_empty() {
            return None;
        }
        Some(match &self.repr {
            Repr::Ints(s) => Member::Int(s.get(rng.gen_range(0..s.len()))),
            Repr::Pack(p) => p.iter().nth(rng.gen_range(0..p.len()))?,
            Repr::Table(t) => Member::Str(t.dict.random_entry(rng)?.0),
        })
    }

    /// Removes and returns a random member; `None` when empty.
    pub fn pop_random<R: Rng + ?Sized>(&mut self, rng: &mut R) -> Option<OwnedMember> {
        if let Repr::Pack(p) = &mut self.repr {
            if p.is_empty() {
                return None;
            }
            let (at, m) = p.iter_at().nth(rng.gen_range(0..p.len()))?;
            let out = OwnedMember::from(m);
            p.remove_at(at);
            return Some(out);
        }
        let m = OwnedMember::from(self.random(rng)?);
        self.remove_member(m.as_member());
        Some(m)
    }

    /// SPOP with a count below the size (`0 < count < len`): removes
    /// `count` random distinct members and returns them, with Redis's two
    /// strategies, which also decide the encoding left behind: few members
    /// are popped one by one; when most go, the members that *stay* are
    /// drawn into a new set (a listpack, or an intset when drawn from an
    /// intset) and the old set's contents are returned.
    pub fn pop_many<R: Rng + ?Sized>(
        &mut self,
        count: usize,
        rng: &mut R,
        lim: &EncLimits,
    ) -> Vec<OwnedMember> {
        let size = self.len();
        debug_assert!(count > 0 && count < size);
        let remaining = size - count;
        // Redis's SPOP_MOVE_STRATEGY_MUL.
        if remaining * 5 > count {
            if let Repr::Pack(p) = &mut self.repr {
                let picked = sample_in_order(p.iter_at(), size, count, rng);
                let out = picked.iter().map(|&(_, m)| OwnedMember::from(m)).collect();
                let ats: Vec<usize> = picked.iter().map(|&(at, _)| at).collect();
                p.remove_many(&ats);
                return out;
            }
            return (0..count).filter_map(|_| self.pop_random(rng)).collect();
        }
        let newset = match &mut self.repr {
            Repr::Pack(p) => {
                let keep = sample_in_order(p.iter_at(), size, remaining, rng);
                let mut newset = Set::new_packed();
                for &(_, m) in &keep {
                    newset.add_member(m, lim);
                }
                let ats: Vec<usize> = keep.iter().map(|&(at, _)| at).collect();
                p.remove_many(&ats);
                newset
            }
            _ => {
                let mut newset: Option<Set> = None;
                for _ in 0..remaining {
                    let Some(m) = self.random(rng).map(OwnedMember::from) else {
                        break;
                    };
                    let ns = newset.get_or_insert_with(|| match m {
                        OwnedMember::Int(_) => Set::new_intset(),
                        OwnedMember::Bytes(_) => Set::new_packed(),
                    });
                    ns.add_member(m.as_member(), lim);
                    self.remove_member(m.as_member());
                }
                newset.unwrap_or_default()
            }
        };
        let old = std::mem::replace(self, newset);
        old.iter().map(OwnedMember::from).collect()
    }

    /// SRANDMEMBER with a negative count: `count` members drawn with
    /// repetition, each uniformly, passed to `f`; stops early when `f`
    /// returns false.
    pub fn random_repeated<R: Rng + ?Sized>(
        &self,
        count: usize,
        rng: &mut R,
        mut f: impl FnMut(Member<'_>) -> bool,
    ) {
        let n = self.len();
        if n == 0 {
            return;
        }
        match &self.repr {
            Repr::Pack(p) => {
                // One walk to index the entries, then O(1) per draw.
                let ats: Vec<usize> = p.iter_at().map(|(at, _)| at).collect();
                for _ in 0..count {
                    if !f(p.get_at(ats[rng.gen_range(0..n)])) {
                        return;
                    }
                }
            }
            _ => {
                for _ in 0..count {
                    if let Some(m) = self.random(rng) {
                        if !f(m) {
                            return;
                        }
                    }
                }
            }
        }
    }

    /// SRANDMEMBER with a positive count below the size: `count` distinct
    /// random members (order unspecified, as in Redis).
    pub fn random_distinct<R: Rng + ?Sized>(&self, count: usize, rng: &mut R) -> Vec<Member<'_>> {
        let n = self.len();
        let count = count.min(n);
        match &self.repr {
            Repr::Table(t) if count * 3 <= n => {
                // Few of many: draw until enough distinct ones (Redis's
                // CASE 4); expected draws below 1.5 * count.
                let mut seen: HashSet<&[u8]> = HashSet::with_capacity(count);
                let mut out = Vec::with_capacity(count);
                while out.len() < count {
                    let Some((k, _)) = t.dict.random_entry(rng) else {
                        break;
                    };
                    if seen.insert(k) {
                        out.push(Member::Str(k));
                    }
                }
                out
            }
            Repr::Table(t) => {
                // Most of them: a partial Fisher-Yates shuffle.
                let mut all: Vec<&[u8]> = t.dict.keys().map(|k| &**k).collect();
                for i in 0..count {
                    let j = rng.gen_range(i..all.len());
                    all.swap(i, j);
                }
                all.truncate(count);
                all.into_iter().map(Member::Str).collect()
            }
            _ => sample_in_order(self.iter().enumerate(), n, count, rng)
                .into_iter()
                .map(|(_, m)| m)
                .collect(),
        }
    }

    /// SSCAN: a hashtable is walked with the dict's reverse-binary cursor
    /// (calls `f` for one bucket's members, returns the next cursor); the
    /// compact forms hand out everything at once and return 0, as Redis.
    pub fn scan(&self, cursor: u64, mut f: impl FnMut(Member<'_>)) -> u64 {
        match &self.repr {
            Repr::Table(t) => t.dict.scan(cursor, |k, _| f(Member::Str(k))),
            _ => {
                self.iter().for_each(f);
                0
            }
        }
    }

    /// Redis's `maybeConvertToIntset` (SINTERSTORE's last step, when every
    /// member is known to be an integer): back to an intset if within
    /// `set-max-intset-entries`. A non-integer member leaves the set as is.
    pub fn maybe_to_intset(&mut self, lim: &EncLimits) {
        if matches!(self.repr, Repr::Ints(_)) || self.len() > intset_max(lim) {
            return;
        }
        let mut ints = Vec::with_capacity(self.len());
        for m in self.iter() {
            match as_int(m) {
                Some(v) => ints.push(v),
                None => return,
            }
        }
        self.repr = Repr::Ints(ints.into_iter().collect());
    }
}

/// Selection sampling (Knuth's Algorithm S): `k` of the `n` items of `it`,
/// each subset equally likely, in iteration order.
fn sample_in_order<T, R: Rng + ?Sized>(
    it: impl Iterator<Item = T>,
    n: usize,
    k: usize,
    rng: &mut R,
) -> Vec<T> {
    let mut out = Vec::with_capacity(k);
    let mut left = n;
    for x in it {
        if out.len() == k {
            break;
        }
        if rng.gen_range(0..left) < k - out.len() {
            out.push(x);
        }
        left -= 1;
    }
    out
}

/// Iterator over a set's members; see [`Set::iter`].
pub enum Iter<'a> {
    Ints(&'a IntSet, usize),
    Pack(ds::packed::IterAt<'a>),
    Table(ds::dict::Iter<'a, TinyBytes, ()>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = Member<'a>;
    #[inline]
    fn next(&mut self) -> Option<Member<'a>> {
        match self {
            Iter::Ints(s, i) => {
                if *i >= s.len() {
                    return None;
                }
                *i += 1;
                Some(Member::Int(s.get(*i - 1)))
            }
            Iter::Pack(it) => it.next().map(|(_, m)| m),
            Iter::Table(it) => it.next().map(|(k, _)| Member::Str(k)),
        }
    }
}

impl Clone for Set {
    fn clone(&self) -> Self {
        let repr = match &self.repr {
            Repr::Ints(s) => Repr::Ints(s.clone()),
            Repr::Pack(p) => Repr::Pack(p.clone()),
            Repr::Table(t) => {
                let mut c = Table::with_capacity(t.dict.len());
                for k in t.dict.keys() {
                    c.insert(k);
                }
                Repr::Table(Box::new(c))
            }
        };
        Set { repr }
    }
}

impl PartialEq for Set {
    /// Same encoding and same members (a listpack's order counts: a
    /// reordered listpack is a changed value).
    fn eq(&self, other: &Set) -> bool {
        match (&self.repr, &other.repr) {
            (Repr::Ints(a), Repr::Ints(b)) => a == b,
            (Repr::Pack(a), Repr::Pack(b)) => a == b,
            (Repr::Table(a), Repr::Table(b)) => {
                a.dict.len() == b.dict.len() && a.dict.keys().all(|k| b.dict.contains_key(k))
            }
            _ => false,
        }
    }
}

impl fmt::Debug for Set {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.repr {
            Repr::Ints(s) => write!(f, "IntSet({s:?})"),
            Repr::Pack(p) => write!(f, "Packed({p:?})"),
            Repr::Table(t) => write!(f, "Table({:?})", t.dict),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;
    use std::collections::BTreeSet;

    fn lim() -> EncLimits {
        EncLimits::default()
    }

    fn members(s: &Set) -> BTreeSet<Vec<u8>> {
        s.iter().map(|m| with_bytes(m, |b| b.to_vec())).collect()
    }

    fn build(items: &[&str]) -> Set {
        let l = lim();
        let mut s = Set::create(items[0].as_bytes(), items.len(), &l);
        for i in items {
            s.add(i.as_bytes(), &l);
        }
        s
    }

    #[test]
    fn encodings_follow_redis_7_2() {
        let l = lim();
        let mut s = build(&["1", "2", "-3"]);
        assert_eq!(s.encoding(), "intset");
        assert_eq!(
            s.iter().collect::<Vec<_>>(),
            [Member::Int(-3), Member::Int(1), Member::Int(2)]
        );
        // A non-integer into a small intset: listpack, integers first.
        assert!(s.add(b"a", &l));
        assert_eq!(s.encoding(), "listpack");
        assert!(s.contains(b"1") && s.contains(b"a") && !s.contains(b"01"));
        // A value longer than set-max-listpack-value: hashtable.
        assert!(s.add(&[b'x'; 65], &l));
        assert_eq!(s.encoding(), "hashtable");
        assert!(s.contains(b"-3") && s.contains(&[b'x'; 65]));
        // Past set-max-intset-entries: hashtable directly.
        let mut s = Set::create(b"0", 1, &l);
        for i in 0..512 {
            s.add(i.to_string().as_bytes(), &l);
        }
        assert_eq!(s.encoding(), "intset");
        s.add(b"512", &l);
        assert_eq!(s.encoding(), "hashtable");
        // A big intset gets a non-integer: hashtable (too many for a listpack).
        let mut s = Set::create(b"0", 1, &l);
        for i in 0..200 {
            s.add(i.to_string().as_bytes(), &l);
        }
        s.add(b"x", &l);
        assert_eq!(s.encoding(), "hashtable");
        // Listpack full at set-max-listpack-entries.
        let mut s = Set::create(b"m0", 1, &l);
        for i in 0..128 {
            s.add(format!("m{i}").as_bytes(), &l);
        }
        assert_eq!((s.encoding(), s.len()), ("listpack", 128));
        s.add(b"m128", &l);
        assert_eq!(s.encoding(), "hashtable");
        assert_eq!(s.len(), 129);
        // Size hints (SADD with many arguments).
        assert_eq!(Set::create(b"1", 513, &l).encoding(), "hashtable");
        assert_eq!(Set::create(b"1", 512, &l).encoding(), "intset");
        assert_eq!(Set::create(b"a", 128, &l).encoding(), "listpack");
        assert_eq!(Set::create(b"a", 129, &l).encoding(), "hashtable");
        let mut s = build(&["a"]);
        s.maybe_convert(129, &l);
        assert_eq!(s.encoding(), "hashtable");
        // Removal never converts back.
        let mut s = build(&["a", "1"]);
        assert!(s.remove(b"a"));
        assert!(!s.remove(b"a"));
        assert_eq!(s.encoding(), "listpack");
        s.maybe_to_intset(&l);
        assert_eq!(s.encoding(), "intset");
        assert!(s.contains(b"1"));
    }

    #[test]
    fn size_and_equality() {
        assert!(std::mem::size_of::<crate::Value>() <= 32);
        let s = build(&["a", "b"]);
        assert_eq!(s.heap_bytes(), 4 + 2 + 2);
        let mut t = s.clone();
        assert_eq!(s, t);
        t.convert_to_table(2);
        assert_ne!(s, t);
        assert_eq!(t.clone(), t);
        assert!(t.heap_bytes() > 0);
    }

    #[test]
    fn pops_and_samples() {
        let l = lim();
        let mut rng = SmallRng::seed_from_u64(7);
        for base in [
            (0..100).map(|i| i.to_string()).collect::<Vec<_>>(),
            (0..100).map(|i| format!("m{i}")).collect(),
            (0..300).map(|i| format!("m{i}")).collect(),
        ] {
            let refs: Vec<&str> = base.iter().map(|s| s.as_str()).collect();
            for count in [1, 10, 90, 99] {
                let mut s = build(&refs);
                let before = members(&s);
                let popped = s.pop_many(count.min(base.len() - 1), &mut rng, &l);
                let popped: BTreeSet<Vec<u8>> = popped
                    .iter()
                    .map(|m| with_bytes(m.as_member(), |b| b.to_vec()))
                    .collect();
                assert_eq!(popped.len(), count);
                let after = members(&s);
                assert_eq!(after.len(), before.len() - count);
                assert!(popped.is_disjoint(&after));
                assert_eq!(&popped | &after, before);
            }
            let s = build(&refs);
            for count in [1, 5, 60, 99] {
                let got = s.random_distinct(count, &mut rng);
                let uniq: BTreeSet<Vec<u8>> =
                    got.iter().map(|&m| with_bytes(m, |b| b.to_vec())).collect();
                assert_eq!(uniq.len(), count);
                assert!(uniq.iter().all(|m| s.contains(m)));
            }
            let mut n = 0;
            s.random_repeated(500, &mut rng, |m| {
                n += 1;
                assert!(s.contains_member(m));
                true
            });
            assert_eq!(n, 500);
        }
    }

    #[test]
    fn spop_most_of_a_hashtable_leaves_a_listpack() {
        let l = lim();
        let mut rng = SmallRng::seed_from_u64(1);
        let items: Vec<String> = (0..300).map(|i| format!("m{i}")).collect();
        let refs: Vec<&str> = items.iter().map(|s| s.as_str()).collect();
        let mut s = build(&refs);
        assert_eq!(s.encoding(), "hashtable");
        s.pop_many(290, &mut rng, &l);
        assert_eq!((s.encoding(), s.len()), ("listpack", 10));
    }

    /// Random operations against a `BTreeSet` model, under random (small)
    /// thresholds so that every conversion is crossed. Seeded, bounded.
    #[test]
    fn model() {
        let mut rng = SmallRng::seed_from_u64(42);
        for round in 0..200 {
            let l = EncLimits {
                set_max_intset_entries: rng.gen_range(1..20),
                set_max_listpack_entries: rng.gen_range(1..20),
                set_max_listpack_value: rng.gen_range(1..70),
                ..EncLimits::default()
            };
            let mut s = Set::default();
            let mut m: BTreeSet<Vec<u8>> = BTreeSet::new();
            for _ in 0..rng.gen_range(0..300) {
                let v: Vec<u8> = match rng.gen_range(0..5) {
                    0 => rng.gen_range(-50i64..50).to_string().into_bytes(),
                    1 => rng.gen::<i64>().to_string().into_bytes(),
                    2 => vec![b'a' + rng.gen_range(0..4); rng.gen_range(0..3)],
                    3 => vec![b'x'; rng.gen_range(60..70)],
                    _ => format!("0{}", rng.gen_range(0..5)).into_bytes(),
                };
                match rng.gen_range(0..4) {
                    0 | 1 => assert_eq!(s.add(&v, &l), m.insert(v.clone()), "round {round}"),
                    2 => assert_eq!(s.remove(&v), m.remove(&v)),
                    _ => {
                        if let Some(p) = s.pop_random(&mut rng) {
                            let p = with_bytes(p.as_member(), |b| b.to_vec());
                            assert!(m.remove(&p));
                        }
                    }
                }
                assert_eq!(s.len(), m.len());
                assert_eq!(s.contains(&v), m.contains(&v));
                assert_eq!(members(&s), m);
                let all_ints = m.iter().all(|x| string2ll(x).is_some());
                match s.encoding() {
                    "intset" => assert!(all_ints && m.len() <= l.set_max_intset_entries),
                    "listpack" => assert!(
                        m.len() <= l.set_max_listpack_entries
                            && m.iter().all(|x| x.len() <= l.set_max_listpack_value)
                    ),
                    _ => {}
                }
            }
        }
    }
}
