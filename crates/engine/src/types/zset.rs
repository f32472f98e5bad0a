//! The sorted set type: members with `f64` scores, ordered by `(score,
//! member)`, in one of Redis's two encodings (`OBJECT ENCODING` names):
//!
//! * `listpack`: [`ZPack`], one contiguous sorted buffer, while the set has
//!   at most `zset-max-listpack-entries` members of at most
//!   `zset-max-listpack-value` bytes;
//! * `skiplist`: [`Ranked`] behind a `Box` (O(1) score lookup, O(log n)
//!   rank/select/insert/remove), once either limit is exceeded.
//!
//! As in Redis (`zsetAdd`), a listpack converts when a *new* member would
//! break a limit, and never converts back on removal; only the commands
//! that build a whole new set (ZUNIONSTORE & co., Redis's
//! `zsetConvertToListpackIfNeeded`) pick the compact form for a small
//! result. Scores are never NaN: callers reject NaN before they get here.
//!
//! Nothing here builds a reply.

use ds::ranked::{self, Ranked};
use ds::zpack::{self, ZPack};

use super::EncLimits;

/// A sorted set value (24 bytes: the `Value` enum stays within 32).
#[derive(Debug, Clone, PartialEq)]
pub enum ZSet {
    Pack(ZPack),
    Skip(Box<Ranked>),
}

impl Default for ZSet {
    fn default() -> Self {
        ZSet::Pack(ZPack::new())
    }
}

/// Iterator over members in rank order (see [`ZSet::iter_from`]).
pub enum Iter<'a> {
    Pack(zpack::Iter<'a>),
    Skip(ranked::Iter<'a>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a [u8], f64);
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Pack(i) => i.next(),
            Iter::Skip(i) => i.next(),
        }
    }
}

impl ZSet {
    /// An empty set in the encoding Redis's `zsetTypeCreate` picks for
    /// `size_hint` members of up to `len_hint` bytes.
    pub fn with_hint(size_hint: usize, len_hint: usize, lim: &EncLimits) -> ZSet {
        if size_hint <= lim.zset_max_listpack_entries && len_hint <= lim.zset_max_listpack_value {
            ZSet::Pack(ZPack::new())
        } else {
            ZSet::Skip(Box::default())
        }
    }

    /// Number of members. O(1).
    pub fn len(&self) -> usize {
        match self {
            ZSet::Pack(p) => p.len(),
            ZSet::Skip(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The name OBJECT ENCODING replies with.
    pub fn encoding(&self) -> &'static str {
        match self {
            ZSet::Pack(_) => "listpack",
            ZSet::Skip(_) => "skiplist",
        }
    }

    /// Heap bytes used (MEMORY USAGE, accounting).
    pub fn heap_bytes(&self) -> usize {
        match self {
            ZSet::Pack(p) => p.heap_bytes(),
            ZSet::Skip(s) => std::mem::size_of::<Ranked>() + s.heap_bytes(),
        }
    }

    /// The score of `member`: O(1) expected (skiplist), O(n) (listpack).
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        match self {
            ZSet::Pack(p) => p.score(member),
            ZSet::Skip(s) => s.score(member),
        }
    }

    /// Sets `member`'s score (adding it if new); returns the old score. A
    /// listpack that a new member would push past a limit becomes a
    /// skiplist first (Redis's `zsetAdd`).
    pub fn insert(&mut self, member: &[u8], score: f64, lim: &EncLimits) -> Option<f64> {
        debug_assert!(!score.is_nan());
        if let ZSet::Pack(p) = self {
            if member.len() > lim.zset_max_listpack_value
                || p.len() + 1 > lim.zset_max_listpack_entries
            {
                if let Some(old) = p.score(member) {
                    return p.insert(member, score).or(Some(old));
                }
                self.to_skiplist();
            }
        }
        match self {
            ZSet::Pack(p) => p.insert(member, score),
            ZSet::Skip(s) => s.insert(member, score),
        }
    }

    /// Removes `member`; returns its score.
    pub fn remove(&mut self, member: &[u8]) -> Option<f64> {
        match self {
            ZSet::Pack(p) => p.remove(member),
            ZSet::Skip(s) => s.remove(member),
        }
    }

    /// Ascending 0-based rank of `member`, with its score.
    pub fn rank(&self, member: &[u8]) -> Option<(usize, f64)> {
        match self {
            ZSet::Pack(p) => p.rank(member),
            ZSet::Skip(s) => s.rank(member),
        }
    }

    /// The number of leading members (ascending) for which `pred` holds;
    /// `pred` must hold on a prefix (a lower bound on score, or on members
    /// that share one score; see [`ZSet::seek_first`] for other cases).
    pub fn partition_point(&self, pred: impl FnMut(&[u8], f64) -> bool) -> usize {
        match self {
            ZSet::Pack(p) => p.partition_point(pred),
            ZSet::Skip(s) => s.partition_point(pred),
        }
    }

    /// Where this encoding's search for the first member on which `hit`
    /// holds stops, as Redis's searches do (`zzlFirstInLexRange`'s scan,
    /// `zslFirstInLexRange`'s descent); `len()` if it finds none. `hit`
    /// need not hold on a suffix (lex bounds on members whose scores
    /// differ): a listpack answers the lowest rank where `hit` holds (a
    /// linear scan); a skiplist some rank where `hit` holds and did not at
    /// the rank before (a descent: which one depends on the structure's
    /// shape, as Redis's depends on its random levels). On a suffix, both
    /// answer its start.
    pub fn seek_first(&self, mut hit: impl FnMut(&[u8]) -> bool) -> usize {
        self.partition_point(|m, _| !hit(m))
    }

    /// Where this encoding's search for the last member on which `ok`
    /// holds stops, as Redis's searches do; `None` if it finds none. A
    /// listpack scans down from the highest member to the first where `ok`
    /// holds (`zzlLastInLexRange`); a skiplist descends from the lowest
    /// while `ok` holds (`zslLastInLexRange`): some rank where `ok` holds
    /// and fails at the next rank (or is the highest), or `None` (always
    /// when `ok` holds nowhere). On a prefix, both answer its end.
    pub fn seek_last(&self, mut ok: impl FnMut(&[u8]) -> bool) -> Option<usize> {
        match self {
            ZSet::Pack(p) => {
                let down = p.iter_rev().position(|(m, _)| ok(m))?;
                Some(p.len() - 1 - down)
            }
            ZSet::Skip(s) => s.partition_point(|m, _| ok(m)).checked_sub(1),
        }
    }

    /// The member at ascending rank `r`.
    pub fn get(&self, r: usize) -> Option<(&[u8], f64)> {
        match self {
            ZSet::Pack(p) => p.get(r),
            ZSet::Skip(s) => s.get(r),
        }
    }

    /// The highest member.
    pub fn last(&self) -> Option<(&[u8], f64)> {
        match self {
            ZSet::Pack(p) => p.iter_rev().next(),
            ZSet::Skip(s) => s.get(s.len().checked_sub(1)?),
        }
    }

    /// Members from ascending rank `start`, upwards or (`rev`) downwards.
    pub fn iter_from(&self, start: usize, rev: bool) -> Iter<'_> {
        match self {
            ZSet::Pack(p) => Iter::Pack(p.iter_from(start, rev)),
            ZSet::Skip(s) => Iter::Skip(s.iter_from(start, rev)),
        }
    }

    /// All members, ascending.
    pub fn iter(&self) -> Iter<'_> {
        self.iter_from(0, false)
    }

    /// Removes the members of ascending ranks `start..end`.
    pub fn remove_ranks(&mut self, start: usize, end: usize) {
        match self {
            ZSet::Pack(p) => p.remove_ranks(start, end),
            ZSet::Skip(s) => {
                let doomed: Vec<Vec<u8>> = s
                    .iter_from(start, false)
                    .take(end.saturating_sub(start))
                    .map(|(m, _)| m.to_vec())
                    .collect();
                for m in doomed {
                    s.remove(&m);
                }
            }
        }
    }

    /// One ZSCAN step: a listpack returns everything and cursor 0 (as
    /// Redis); a skiplist walks its member index with Redis's cursor.
    pub fn scan(&self, cursor: u64, mut f: impl FnMut(&[u8], f64)) -> u64 {
        match self {
            ZSet::Pack(p) => {
                for (m, s) in p.iter() {
                    f(m, s);
                }
                0
            }
            ZSet::Skip(s) => s.scan(cursor, f),
        }
    }

    /// Converts to the skiplist encoding.
    pub fn to_skiplist(&mut self) {
        if let ZSet::Pack(p) = self {
            let mut r = Ranked::new();
            for (m, s) in p.iter() {
                r.insert(m, s);
            }
            *self = ZSet::Skip(Box::new(r));
        }
    }

    /// A skiplist small enough for the listpack limits becomes a listpack
    /// (Redis's `zsetConvertToListpackIfNeeded`, used when a command builds
    /// a whole new set).
    pub fn compact_if_fits(&mut self, lim: &EncLimits) {
        if let ZSet::Skip(r) = self {
            if r.len() > lim.zset_max_listpack_entries {
                return;
            }
            if r.iter().any(|(m, _)| m.len() > lim.zset_max_listpack_value) {
                return;
            }
            let mut p = ZPack::new();
            for (m, s) in r.iter() {
                p.push_sorted(m, s);
            }
            *self = ZSet::Pack(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lim(entries: usize, value: usize) -> EncLimits {
        EncLimits {
            zset_max_listpack_entries: entries,
            zset_max_listpack_value: value,
            ..EncLimits::default()
        }
    }

    #[test]
    fn value_stays_small() {
        assert!(std::mem::size_of::<ZSet>() <= 24);
    }

    #[test]
    fn converts_at_the_thresholds() {
        let l = lim(3, 5);
        let mut z = ZSet::with_hint(1, 1, &l);
        for (i, m) in [b"a", b"b", b"c"].iter().enumerate() {
            z.insert(*m, i as f64, &l);
        }
        assert_eq!(z.encoding(), "listpack");
        // Updating an existing member never converts.
        assert_eq!(z.insert(b"a", 9.0, &l), Some(0.0));
        assert_eq!(z.encoding(), "listpack");
        z.insert(b"d", 1.5, &l);
        assert_eq!(z.encoding(), "skiplist");
        let all: Vec<_> = z.iter().map(|(m, s)| (m.to_vec(), s)).collect();
        assert_eq!(
            all,
            vec![
                (b"b".to_vec(), 1.0),
                (b"d".to_vec(), 1.5),
                (b"c".to_vec(), 2.0),
                (b"a".to_vec(), 9.0)
            ]
        );
        z.remove(b"d");
        assert_eq!(z.encoding(), "skiplist");
        z.compact_if_fits(&l);
        assert_eq!(z.encoding(), "listpack");
        assert_eq!(z.rank(b"a"), Some((2, 9.0)));
        let mut long = ZSet::with_hint(1, 1, &l);
        long.insert(b"toolong", 1.0, &l);
        assert_eq!(long.encoding(), "skiplist");
        assert_eq!(ZSet::with_hint(4, 1, &l).encoding(), "skiplist");
        assert_eq!(ZSet::with_hint(1, 6, &l).encoding(), "skiplist");
    }

    /// Members in score order: c 10 a -5 b (not in lex order).
    fn mixed(l: &EncLimits) -> ZSet {
        let mut z = ZSet::with_hint(5, 2, l);
        for (i, m) in ["c", "10", "a", "-5", "b"].iter().enumerate() {
            z.insert(m.as_bytes(), i as f64, l);
        }
        z
    }

    #[test]
    fn seeks_on_a_listpack_scan_as_redis() {
        let z = mixed(&lim(128, 64));
        assert_eq!(z.encoding(), "listpack");
        // First member >= "a" from the lowest: c (rank 0); >= "b": c;
        // >= "c": c; > "c": none.
        assert_eq!(z.seek_first(|m| m >= &b"a"[..]), 0);
        assert_eq!(z.seek_first(|m| m < &b"1"[..]), 3);
        assert_eq!(z.seek_first(|m| m > &b"c"[..]), 5);
        // Last member <= "a" scanning down from the highest: -5 (rank 3),
        // skipping b; <= "b": b; < "-": none.
        assert_eq!(z.seek_last(|m| m <= &b"a"[..]), Some(3));
        assert_eq!(z.seek_last(|m| m <= &b"b"[..]), Some(4));
        assert_eq!(z.seek_last(|m| m >= &b"c"[..]), Some(0));
        assert_eq!(z.seek_last(|m| m < &b"-"[..]), None);
        assert_eq!(ZSet::default().seek_last(|_| true), None);
        assert_eq!(ZSet::default().seek_first(|_| true), 0);
        assert_eq!(z.last(), Some((&b"b"[..], 4.0)));
        assert_eq!(ZSet::default().last(), None);
    }

    #[test]
    fn seeks_on_a_skiplist_stop_at_a_boundary() {
        let z = mixed(&lim(0, 64));
        assert_eq!(z.encoding(), "skiplist");
        let members: Vec<&[u8]> = z.iter().map(|(m, _)| m).collect();
        for pivot in [&b"-"[..], b"1", b"a", b"b", b"c", b"d"] {
            let hit = |m: &[u8]| m >= pivot;
            let r = z.seek_first(hit);
            assert!(r == 0 || !hit(members[r - 1]), "{pivot:?}: {r}");
            assert!(r == members.len() || hit(members[r]), "{pivot:?}: {r}");
            let ok = |m: &[u8]| m <= pivot;
            if let Some(r) = z.seek_last(ok) {
                assert!(ok(members[r]), "{pivot:?}: {r}");
                assert!(
                    r + 1 == members.len() || !ok(members[r + 1]),
                    "{pivot:?}: {r}"
                );
            } else {
                assert!(!ok(members[0]), "{pivot:?}");
            }
        }
        // A single boundary leaves no choice: the answers are the
        // listpack's.
        assert_eq!(z.seek_first(|m| m == &b"b"[..]), 4);
        assert_eq!(z.seek_last(|m| m != &b"b"[..]), Some(3));
        assert_eq!(z.last(), Some((&b"b"[..], 4.0)));
    }

    #[test]
    fn both_encodings_agree() {
        let small = lim(1000, 64);
        let big = lim(0, 64);
        let mut a = ZSet::with_hint(0, 0, &small);
        let mut b = ZSet::with_hint(1, 0, &big);
        assert_eq!((a.encoding(), b.encoding()), ("listpack", "skiplist"));
        for i in 0..200u32 {
            let m = format!("m{}", (i * 7919) % 211);
            let s = f64::from(i % 13) - 6.0;
            assert_eq!(
                a.insert(m.as_bytes(), s, &small),
                b.insert(m.as_bytes(), s, &big)
            );
        }
        assert!(a.iter().eq(b.iter()));
        assert!(a.iter_from(50, true).eq(b.iter_from(50, true)));
        assert_eq!(
            a.partition_point(|_, s| s < 0.0),
            b.partition_point(|_, s| s < 0.0)
        );
        a.remove_ranks(10, 40);
        b.remove_ranks(10, 40);
        assert!(a.iter().eq(b.iter()));
        assert_eq!(a.rank(b"m7"), b.rank(b"m7"));
        // One score: members in lex order, where both seeks are exact.
        let mut a = ZSet::with_hint(0, 0, &small);
        let mut b = ZSet::with_hint(1, 0, &big);
        for i in 0..100u32 {
            let m = format!("m{:03}", (i * 37) % 100);
            a.insert(m.as_bytes(), 1.0, &small);
            b.insert(m.as_bytes(), 1.0, &big);
        }
        for p in [&b"m"[..], b"m000", b"m050", b"m0505", b"m099", b"n"] {
            assert_eq!(a.seek_first(|m| m >= p), b.seek_first(|m| m >= p));
            assert_eq!(a.seek_last(|m| m <= p), b.seek_last(|m| m <= p));
        }
        assert_eq!(a.seek_first(|m| m >= &b"m050"[..]), 50);
        assert_eq!(a.seek_last(|m| m < &b"m050"[..]), Some(49));
    }
}
