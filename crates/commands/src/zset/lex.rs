//! Lex ranges of sorted sets (`-`, `+`, `[x`, `(x`) and the walks Redis
//! makes over them: ZRANGEBYLEX, ZREVRANGEBYLEX, ZRANGE/ZRANGESTORE ...
//! BYLEX, ZLEXCOUNT and ZREMRANGEBYLEX.
//!
//! Redis defines a lex range only on members that share one score (then
//! they are in lex order and the range is a span of ranks). On members
//! whose scores differ the reply is "unspecified", but it is what Redis's
//! code computes, and clients compare with Redis, so this module follows
//! that code (`t_zset.c`) step by step. Everything is in rank order (score,
//! then member), as Redis walks:
//!
//! * the range is empty outright if `min > max` (or `min == max` with an
//!   exclusive side), if the highest member is below `min` or the lowest
//!   above `max` (`zzlIsInLexRange` / `zslIsInLexRange`);
//! * a forward walk starts at the *first member `>= min`*, which must be
//!   `<= max` (else: empty); a reverse walk at the *last member `<= max`*,
//!   which must be `>= min`;
//! * LIMIT's offset skips members whether in range or not; the walk then
//!   goes on while members are `<= max` (forward) or `>= min` (reverse),
//!   never testing the other bound.
//!
//! How "first" and "last" are searched depends on the encoding
//! ([`ZSet::seek_first`], [`ZSet::seek_last`]). A listpack scans: the first
//! member `>= min` from the lowest, the last `<= max` from the highest,
//! exactly as Redis, so replies match Redis's byte for byte. A skiplist
//! descends, and on members out of lex order the member a descent stops at
//! is one of several run starts, chosen by the structure's shape: Redis's
//! random levels, our tree's hash priorities. Replies then match Redis
//! whenever Redis's own answer does not depend on its levels (a single
//! candidate), and are otherwise one of the answers Redis can give.
//!
//! ZLEXCOUNT counts by walking on a listpack, but on a skiplist it is the
//! rank of the last member in range minus that of the first, plus one, each
//! found by its own descent, so it can exceed the members in range, or be
//! negative, as in Redis. ZREMRANGEBYLEX on a skiplist skips the emptiness
//! tests (Redis's `zslDeleteRangeByLex` has none) and deletes from the
//! first member `>= min` while members are `<= max`.

use engine::ZSet;

use crate::error::CmdError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LexBound<'a> {
    /// `-`: below every string.
    Min,
    /// `+`: above every string.
    Max,
    Incl(&'a [u8]),
    Excl(&'a [u8]),
}

impl LexBound<'_> {
    /// `-`, `+` and `(x` are exclusive (`zslParseLexRangeItem`).
    fn exclusive(&self) -> bool {
        !matches!(self, LexBound::Incl(_))
    }
}

/// A parsed `min max` pair of lex bounds.
#[derive(Clone, Copy, Debug)]
pub(super) struct LexRange<'a> {
    min: LexBound<'a>,
    max: LexBound<'a>,
}

impl<'a> LexRange<'a> {
    /// `zslParseLexRangeItem` on both bounds: `-`, `+`, `(x`, `[x`.
    pub(super) fn parse(min: &'a [u8], max: &'a [u8]) -> Result<Self, CmdError> {
        fn item(a: &[u8]) -> Option<LexBound<'_>> {
            // "+"/"-" are compared as C strings: "+\0..." is "+".
            let alone = a.len() == 1 || a.get(1) == Some(&0);
            match a.first()? {
                b'+' if alone => Some(LexBound::Max),
                b'-' if alone => Some(LexBound::Min),
                b'(' => Some(LexBound::Excl(&a[1..])),
                b'[' => Some(LexBound::Incl(&a[1..])),
                _ => None,
            }
        }
        let bad = || CmdError::err("min or max not valid string range item");
        Ok(LexRange {
            min: item(min).ok_or_else(bad)?,
            max: item(max).ok_or_else(bad)?,
        })
    }

    fn gte_min(&self, m: &[u8]) -> bool {
        match self.min {
            LexBound::Min => true,
            LexBound::Max => false,
            LexBound::Incl(x) => m >= x,
            LexBound::Excl(x) => m > x,
        }
    }

    fn lte_max(&self, m: &[u8]) -> bool {
        match self.max {
            LexBound::Max => true,
            LexBound::Min => false,
            LexBound::Incl(x) => m <= x,
            LexBound::Excl(x) => m < x,
        }
    }

    /// Empty whatever the set: `min > max`, or `min == max` with either
    /// side exclusive (Redis's `sdscmplex` test: `-` and `+` equal only
    /// themselves).
    fn always_empty(&self) -> bool {
        use std::cmp::Ordering::*;
        let cmp = match (self.min, self.max) {
            (LexBound::Min, LexBound::Min) | (LexBound::Max, LexBound::Max) => Equal,
            (LexBound::Min, _) | (_, LexBound::Max) => Less,
            (LexBound::Max, _) | (_, LexBound::Min) => Greater,
            (LexBound::Incl(a) | LexBound::Excl(a), LexBound::Incl(b) | LexBound::Excl(b)) => {
                a.cmp(b)
            }
        };
        cmp == Greater || (cmp == Equal && (self.min.exclusive() || self.max.exclusive()))
    }

    /// `zzlIsInLexRange` / `zslIsInLexRange`: not empty outright, the
    /// highest member `>= min` and the lowest `<= max`.
    fn may_hit(&self, z: &ZSet) -> bool {
        if self.always_empty() {
            return false;
        }
        let (Some((lo, _)), Some((hi, _))) = (z.get(0), z.last()) else {
            return false;
        };
        self.gte_min(hi) && self.lte_max(lo)
    }

    /// The rank a forward walk starts at (`zzlFirstInLexRange`,
    /// `zslFirstInLexRange`).
    fn first_in(&self, z: &ZSet) -> Option<usize> {
        if !self.may_hit(z) {
            return None;
        }
        let r = z.seek_first(|m| self.gte_min(m));
        let (m, _) = z.get(r)?;
        self.lte_max(m).then_some(r)
    }

    /// The rank a reverse walk starts at (`zzlLastInLexRange`,
    /// `zslLastInLexRange`).
    fn last_in(&self, z: &ZSet) -> Option<usize> {
        if !self.may_hit(z) {
            return None;
        }
        let r = z.seek_last(|m| self.lte_max(m))?;
        let (m, _) = z.get(r)?;
        self.gte_min(m).then_some(r)
    }

    /// The members ZRANGEBYLEX & co. reply (`genericZrangebylexCommand`):
    /// `(first rank, count)`, walking up or (`rev`) down from the first
    /// rank. `limit < 0` is no limit; `offset < 0` walks off the end, as
    /// Redis's `while (node && offset--)` does. The count costs a walk over
    /// the reply's members (the array header needs it before them).
    pub(super) fn window(&self, z: &ZSet, offset: i64, limit: i64, rev: bool) -> (usize, usize) {
        let start = if rev {
            self.last_in(z)
        } else {
            self.first_in(z)
        };
        let (Some(start), Ok(offset)) = (start, usize::try_from(offset)) else {
            return (0, 0);
        };
        let first = if rev {
            start.checked_sub(offset)
        } else {
            start.checked_add(offset).filter(|&r| r < z.len())
        };
        let Some(first) = first else {
            return (0, 0);
        };
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let n = z
            .iter_from(first, rev)
            .take(limit)
            .take_while(|(m, _)| {
                if rev {
                    self.gte_min(m)
                } else {
                    self.lte_max(m)
                }
            })
            .count();
        (first, n)
    }

    /// ZLEXCOUNT's reply (`zlexcountCommand`).
    pub(super) fn count(&self, z: &ZSet) -> i64 {
        let Some(first) = self.first_in(z) else {
            return 0;
        };
        match z {
            ZSet::Pack(_) => self.run_up(z, first) as i64,
            // Ranks of two independent descents: `last` may even be below
            // `first` (a negative count, as Redis's unsigned arithmetic
            // prints it); without a last, Redis counts to the end.
            ZSet::Skip(_) => match self.last_in(z) {
                Some(last) => last as i64 - first as i64 + 1,
                None => (z.len() - first) as i64,
            },
        }
    }

    /// The ascending ranks `[start, end)` ZREMRANGEBYLEX deletes
    /// (`zzlDeleteRangeByLex`, `zslDeleteRangeByLex`).
    pub(super) fn doomed(&self, z: &ZSet) -> (usize, usize) {
        let start = match z {
            ZSet::Pack(_) => self.first_in(z),
            // The skiplist's delete has no emptiness tests and no check of
            // the first member against max: the walk below makes that one.
            ZSet::Skip(_) => Some(z.seek_first(|m| self.gte_min(m))),
        };
        match start {
            Some(a) => (a, a + self.run_up(z, a)),
            None => (0, 0),
        }
    }

    /// How many members from rank `r` up are `<= max`, in a row.
    fn run_up(&self, z: &ZSet, r: usize) -> usize {
        z.iter_from(r, false)
            .take_while(|(m, _)| self.lte_max(m))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::EncLimits;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn lim(entries: usize) -> EncLimits {
        EncLimits {
            zset_max_listpack_entries: entries,
            ..EncLimits::default()
        }
    }

    /// `members` scored 1, 2, 3 ... in the encoding `entries` implies.
    fn zset(members: &[&str], entries: usize) -> ZSet {
        let l = lim(entries);
        let mut z = ZSet::with_hint(members.len(), 0, &l);
        for (i, m) in members.iter().enumerate() {
            z.insert(m.as_bytes(), (i + 1) as f64, &l);
        }
        z
    }

    fn range<'a>(min: &'a str, max: &'a str) -> LexRange<'a> {
        LexRange::parse(min.as_bytes(), max.as_bytes()).unwrap()
    }

    fn names(z: &ZSet, (first, n): (usize, usize), rev: bool) -> Vec<String> {
        z.iter_from(first, rev)
            .take(n)
            .map(|(m, _)| String::from_utf8_lossy(m).into_owned())
            .collect()
    }

    #[test]
    fn always_empty_as_sdscmplex() {
        for (min, max, empty) in [
            ("-", "+", false),
            ("+", "-", true),
            ("-", "-", true),
            ("+", "+", true),
            ("[a", "[a", false),
            ("[a", "(a", true),
            ("(a", "[a", true),
            ("[b", "[a", true),
            ("[a", "[b", false),
            ("-", "[a", false),
            ("[a", "-", true),
            ("+", "[a", true),
            ("[a", "+", false),
            ("[", "[", false),
            ("(", "+", false),
        ] {
            assert_eq!(range(min, max).always_empty(), empty, "{min} {max}");
        }
    }

    #[test]
    fn listpack_walks_in_score_order() {
        // Redis 7.0: ZADD k 1 c 2 10 3 a 4 -5.
        let z = zset(&["c", "10", "a", "-5"], 128);
        assert_eq!(z.encoding(), "listpack");
        // The highest member, "-5", is below "[a": empty.
        assert_eq!(range("[a", "(d").window(&z, 0, -1, false), (0, 0));
        assert_eq!(range("[a", "(d").window(&z, 0, -1, true), (0, 0));
        assert_eq!(range("[a", "(d").count(&z), 0);
        assert_eq!(range("[a", "(d").doomed(&z), (0, 0));
        // The lowest, "c", is above "[b": empty.
        assert_eq!(range("-", "[b").window(&z, 0, -1, true), (0, 0));
        // From c (the first >= "-"), while <= "+": everything.
        let r = range("-", "+");
        assert_eq!(
            names(&z, r.window(&z, 0, -1, false), false),
            ["c", "10", "a", "-5"]
        );
        assert_eq!(
            names(&z, r.window(&z, 0, -1, true), true),
            ["-5", "a", "10", "c"]
        );
        assert_eq!(names(&z, r.window(&z, 1, 2, false), false), ["10", "a"]);
        assert_eq!(names(&z, r.window(&z, 3, 5, true), true), ["c"]);
        assert_eq!(r.window(&z, 4, 1, false), (0, 0));
        assert_eq!(r.window(&z, 4, 1, true), (0, 0));
        assert_eq!(r.window(&z, -1, 1, false), (0, 0));
        assert_eq!(r.window(&z, i64::MAX, 1, false), (0, 0));
        assert_eq!(r.window(&z, 0, 0, false).1, 0);
        assert_eq!(r.count(&z), 4);
        assert_eq!(r.doomed(&z), (0, 4));
    }

    #[test]
    fn each_walk_tests_one_bound() {
        // a z b, [b [y: the first >= b is z, above y: empty forward.
        // Reverse starts at b (the last <= y from the top) and goes down
        // while >= b: b, z; a stops it.
        let z = zset(&["a", "z", "b"], 128);
        let r = range("[b", "[y");
        assert_eq!(r.window(&z, 0, -1, false), (0, 0));
        assert_eq!(names(&z, r.window(&z, 0, -1, true), true), ["b", "z"]);
        assert_eq!(r.count(&z), 0);
        assert_eq!(r.doomed(&z), (0, 0));
        // [a [b: a, then z stops the walk; LIMIT 2 skips a and z, lands on
        // b, which is in range again.
        let r = range("[a", "[b");
        assert_eq!(names(&z, r.window(&z, 0, -1, false), false), ["a"]);
        assert_eq!(names(&z, r.window(&z, 2, 10, false), false), ["b"]);
        assert_eq!(r.window(&z, 1, 10, false).1, 0);
        assert_eq!(r.count(&z), 1);
        assert_eq!(r.doomed(&z), (0, 1));
    }

    #[test]
    fn one_score_is_a_span_of_ranks_in_both_encodings() {
        for entries in [128, 0] {
            let l = lim(entries);
            let mut z = ZSet::with_hint(5, 0, &l);
            for m in ["e", "c", "a", "d", "b"] {
                z.insert(m.as_bytes(), 0.0, &l);
            }
            let r = range("(a", "[d");
            assert_eq!(r.window(&z, 0, -1, false), (1, 3));
            assert_eq!(r.window(&z, 0, -1, true), (3, 3));
            assert_eq!(r.window(&z, 1, 1, true), (2, 1));
            assert_eq!(r.window(&z, 1, -5, false), (2, 2));
            assert_eq!(r.count(&z), 3);
            assert_eq!(r.doomed(&z), (1, 4));
            let r = range("[x", "+");
            assert_eq!(r.count(&z), 0);
            assert_eq!(r.window(&z, 0, -1, true).1, 0);
            let (a, b) = r.doomed(&z);
            assert_eq!(a, b);
        }
    }

    // ---- A model: Redis's loops transcribed over a vector of members in
    // rank order, against random sets, bounds and limits.

    fn is_in(v: &[&[u8]], r: &LexRange<'_>) -> bool {
        !r.always_empty() && !v.is_empty() && r.gte_min(v[v.len() - 1]) && r.lte_max(v[0])
    }

    /// Listpack: `zzlFirstInLexRange` / `zzlLastInLexRange`.
    fn lp_start(v: &[&[u8]], r: &LexRange<'_>, rev: bool) -> Option<usize> {
        if !is_in(v, r) {
            return None;
        }
        if rev {
            let i = (0..v.len()).rev().find(|&i| r.lte_max(v[i]))?;
            r.gte_min(v[i]).then_some(i)
        } else {
            let i = (0..v.len()).find(|&i| r.gte_min(v[i]))?;
            r.lte_max(v[i]).then_some(i)
        }
    }

    /// Skiplist: every member a descent may stop at (a run start of
    /// `>= min`, a run end of `<= max`).
    fn sl_starts(v: &[&[u8]], r: &LexRange<'_>, rev: bool) -> Vec<Option<usize>> {
        if !is_in(v, r) {
            return vec![None];
        }
        let n = v.len();
        if rev {
            (0..n)
                .filter(|&i| r.lte_max(v[i]) && (i + 1 == n || !r.lte_max(v[i + 1])))
                .map(|i| r.gte_min(v[i]).then_some(i))
                .collect()
        } else {
            (0..n)
                .filter(|&i| r.gte_min(v[i]) && (i == 0 || !r.gte_min(v[i - 1])))
                .map(|i| r.lte_max(v[i]).then_some(i))
                .collect()
        }
    }

    /// `genericZrangebylexCommand`'s two loops from `start`.
    fn walk(
        v: &[&[u8]],
        r: &LexRange<'_>,
        start: Option<usize>,
        o: i64,
        l: i64,
        rev: bool,
    ) -> (usize, usize) {
        let step: i64 = if rev { -1 } else { 1 };
        let inside = |i: i64| i >= 0 && i < v.len() as i64;
        let Some(start) = start else { return (0, 0) };
        let (mut i, mut offset, mut limit) = (start as i64, o, l);
        while inside(i) && offset != 0 {
            offset -= 1;
            i += step;
        }
        let first = i;
        let mut n = 0;
        while inside(i) && limit != 0 {
            limit -= 1;
            let ok = if rev {
                r.gte_min(v[i as usize])
            } else {
                r.lte_max(v[i as usize])
            };
            if !ok {
                break;
            }
            n += 1;
            i += step;
        }
        if n == 0 {
            (0, 0)
        } else {
            (first as usize, n)
        }
    }

    fn run(v: &[&[u8]], r: &LexRange<'_>, a: usize) -> usize {
        v[a..].iter().take_while(|m| r.lte_max(m)).count()
    }

    #[test]
    fn random_sets_follow_the_model() {
        const WORDS: &[&str] = &["", "-", "1", "10", "a", "ab", "b", "ba", "c", "d", "z"];
        let mut rng = StdRng::seed_from_u64(7);
        let bound = |rng: &mut StdRng| -> String {
            match rng.gen_range(0..10) {
                0 => "-".into(),
                1 => "+".into(),
                k => format!(
                    "{}{}",
                    if k % 2 == 0 { "[" } else { "(" },
                    WORDS[rng.gen_range(0..WORDS.len())]
                ),
            }
        };
        for round in 0..3000 {
            let one_score = round % 4 == 0;
            let mut members: Vec<&str> = WORDS.to_vec();
            members.retain(|_| rng.gen_bool(0.6));
            let scores: Vec<f64> = members
                .iter()
                .map(|_| {
                    if one_score {
                        0.0
                    } else {
                        f64::from(rng.gen_range(0..4))
                    }
                })
                .collect();
            let (lo, hi) = (bound(&mut rng), bound(&mut rng));
            let r = range(&lo, &hi);
            let (offset, limit) = match rng.gen_range(0..4) {
                0 => (0, -1),
                1 => (rng.gen_range(-1..4), rng.gen_range(-1..4)),
                _ => (rng.gen_range(0..3), -1),
            };
            for entries in [128, 0] {
                let l = lim(entries);
                let mut z = ZSet::with_hint(members.len(), 0, &l);
                for (m, s) in members.iter().zip(&scores) {
                    z.insert(m.as_bytes(), *s, &l);
                }
                let v: Vec<&[u8]> = z.iter().map(|(m, _)| m).collect();
                let ctx = format!("{v:?} {lo} {hi} LIMIT {offset} {limit} ({})", z.encoding());
                let pack = z.encoding() == "listpack";
                for rev in [false, true] {
                    let got = match r.window(&z, offset, limit, rev) {
                        (_, 0) => (0, 0),
                        w => w,
                    };
                    let starts = if pack {
                        vec![lp_start(&v, &r, rev)]
                    } else {
                        sl_starts(&v, &r, rev)
                    };
                    let want: Vec<_> = starts
                        .iter()
                        .map(|&s| walk(&v, &r, s, offset, limit, rev))
                        .collect();
                    assert!(
                        want.contains(&got),
                        "{ctx} rev={rev}: {got:?} not in {want:?}"
                    );
                    if pack || one_score {
                        assert_eq!(got, want[0], "{ctx} rev={rev}");
                    }
                }
                let got = r.count(&z);
                let want: Vec<i64> = if pack {
                    vec![lp_start(&v, &r, false).map_or(0, |a| run(&v, &r, a) as i64)]
                } else {
                    let mut all = Vec::new();
                    for f in sl_starts(&v, &r, false) {
                        for l in sl_starts(&v, &r, true) {
                            all.push(match (f, l) {
                                (None, _) => 0,
                                (Some(f), Some(l)) => l as i64 - f as i64 + 1,
                                (Some(f), None) => (v.len() - f) as i64,
                            });
                        }
                    }
                    all
                };
                assert!(
                    want.contains(&got),
                    "{ctx} ZLEXCOUNT: {got} not in {want:?}"
                );
                if pack || one_score {
                    assert_eq!(got, want[0], "{ctx} ZLEXCOUNT");
                }
                let (a, b) = r.doomed(&z);
                let deleted = b - a;
                if pack {
                    let want = lp_start(&v, &r, false).map_or((0, 0), |a| (a, a + run(&v, &r, a)));
                    assert_eq!((a, b), want, "{ctx} ZREMRANGEBYLEX");
                } else {
                    // No emptiness tests: any run start of >= min, or the
                    // end if the highest member is below min.
                    let n = v.len();
                    let ok = a == n && (n == 0 || !r.gte_min(v[n - 1]))
                        || r.gte_min(v[a]) && (a == 0 || !r.gte_min(v[a - 1]));
                    assert!(ok, "{ctx} ZREMRANGEBYLEX from {a}");
                    assert_eq!(deleted, if a < n { run(&v, &r, a) } else { 0 }, "{ctx}");
                }
            }
        }
    }
}
