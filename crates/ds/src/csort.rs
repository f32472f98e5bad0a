//! The two C sorts whose results Redis's replies depend on, reproduced
//! step for step so that elements comparing equal (two members at the
//! same distance) come out in the order Redis sends them:
//!
//! * [`merge_sort`]: glibc's `qsort`, which is a top-down merge sort
//!   (`msort.c`) whenever its scratch memory can be had, as it always can
//!   for a reply's worth of elements: stable, taking from the left run on
//!   ties. Redis sorts a full GEO result with it.
//! * [`partial_quicksort`]: Redis's `pqsort` (NetBSD's Bentley–McIlroy
//!   quicksort that skips partitions outside a wanted range): not stable.
//!   Redis sorts a GEO result with it when COUNT keeps fewer elements
//!   than were found. Reproduced from what redis-server 7.0.15 does (its
//!   machine code was read to settle it): NetBSD's switch to insertion
//!   sort after a partitioning pass that swapped nothing is not in it, so
//!   such a pass partitions like any other (the source file in Redis's
//!   repository still shows the switch; replies follow the binary).
//!
//! Both take a C-style comparator (negative, zero, positive), which may be
//! inconsistent (NaN distances compare below everything both ways, as in
//! Redis): neither sort panics or leaves its bounds on one. Neither
//! allocates beyond one scratch buffer the size of the input.

/// glibc's merge sort: halves `[0, n/2)` and `[n/2, n)` sorted
/// recursively, then merged taking the left element unless the
/// comparator says it is greater. O(n log n) comparisons, O(n) scratch,
/// recursion depth log2(n).
pub fn merge_sort<T: Copy>(v: &mut [T], mut cmp: impl FnMut(&T, &T) -> i32) {
    let mut tmp = Vec::with_capacity(v.len());
    msort(v, &mut tmp, &mut cmp);
}

fn msort<T: Copy>(b: &mut [T], tmp: &mut Vec<T>, cmp: &mut impl FnMut(&T, &T) -> i32) {
    let n = b.len();
    if n <= 1 {
        return;
    }
    let n1 = n / 2;
    msort(&mut b[..n1], tmp, cmp);
    msort(&mut b[n1..], tmp, cmp);
    tmp.clear();
    let (mut i, mut j) = (0, n1);
    while i < n1 && j < n {
        if cmp(&b[i], &b[j]) <= 0 {
            tmp.push(b[i]);
            i += 1;
        } else {
            tmp.push(b[j]);
            j += 1;
        }
    }
    // What is left of the right run is already in place.
    tmp.extend_from_slice(&b[i..n1]);
    b[..tmp.len()].copy_from_slice(tmp);
}

/// Redis's `pqsort(a, n, cmp, lrange, rrange)`: sorts `v` enough that
/// positions `lrange..=rrange` hold what a full sort would put there
/// (partitions entirely outside are left unsorted). Expected O(n log n).
pub fn partial_quicksort<T>(
    v: &mut [T],
    mut cmp: impl FnMut(&T, &T) -> i32,
    lrange: usize,
    rrange: usize,
) {
    let n = v.len();
    pq(v, 0, n, &mut cmp, lrange, rrange);
}

fn med3<T>(v: &[T], a: usize, b: usize, c: usize, cmp: &mut impl FnMut(&T, &T) -> i32) -> usize {
    if cmp(&v[a], &v[b]) < 0 {
        if cmp(&v[b], &v[c]) < 0 {
            b
        } else if cmp(&v[a], &v[c]) < 0 {
            c
        } else {
            a
        }
    } else if cmp(&v[b], &v[c]) > 0 {
        b
    } else if cmp(&v[a], &v[c]) < 0 {
        a
    } else {
        c
    }
}

fn insertion<T>(v: &mut [T], lo: usize, n: usize, cmp: &mut impl FnMut(&T, &T) -> i32) {
    for m in lo + 1..lo + n {
        let mut l = m;
        while l > lo && cmp(&v[l - 1], &v[l]) > 0 {
            v.swap(l, l - 1);
            l -= 1;
        }
    }
}

/// Swaps `v[a..a+n]` with `v[b..b+n]` element by element (the ranges
/// never overlap here).
fn vecswap<T>(v: &mut [T], a: usize, b: usize, n: usize) {
    for i in 0..n {
        v.swap(a + i, b + i);
    }
}

/// Whether the partition `[lo, lo + n)` meets the wanted range.
fn wanted(lo: usize, n: usize, lrange: usize, rrange: usize) -> bool {
    let end = lo + n;
    !((lrange < lo && rrange < lo) || (lrange >= end && rrange >= end))
}

fn pq<T>(
    v: &mut [T],
    mut lo: usize,
    mut n: usize,
    cmp: &mut impl FnMut(&T, &T) -> i32,
    lrange: usize,
    rrange: usize,
) {
    loop {
        if n < 7 {
            insertion(v, lo, n, cmp);
            return;
        }
        let mut pm = lo + n / 2;
        if n > 7 {
            let mut pl = lo;
            let mut pn = lo + n - 1;
            if n > 40 {
                let d = n / 8;
                pl = med3(v, pl, pl + d, pl + 2 * d, cmp);
                pm = med3(v, pm - d, pm, pm + d, cmp);
                pn = med3(v, pn - 2 * d, pn - d, pn, cmp);
            }
            pm = med3(v, pl, pm, pn, cmp);
        }
        v.swap(lo, pm);
        let (mut pa, mut pb) = (lo + 1, lo + 1);
        let (mut pc, mut pd) = (lo + n - 1, lo + n - 1);
        loop {
            while pb <= pc {
                let c = cmp(&v[pb], &v[lo]);
                if c > 0 {
                    break;
                }
                if c == 0 {
                    v.swap(pa, pb);
                    pa += 1;
                }
                pb += 1;
            }
            while pb <= pc {
                let c = cmp(&v[pc], &v[lo]);
                if c < 0 {
                    break;
                }
                if c == 0 {
                    v.swap(pc, pd);
                    pd -= 1;
                }
                // pc >= pb > lo: no underflow.
                pc -= 1;
            }
            if pb > pc {
                break;
            }
            v.swap(pb, pc);
            pb += 1;
            pc -= 1;
        }
        let pn = lo + n;
        let r = (pa - lo).min(pb - pa);
        vecswap(v, lo, pb - r, r);
        let r = (pd - pc).min(pn - pd - 1);
        vecswap(v, pb, pn - r, r);
        let r = pb - pa;
        if r > 1 && wanted(lo, r, lrange, rrange) {
            pq(v, lo, r, cmp, lrange, rrange);
        }
        let r = pd - pc;
        if r > 1 {
            lo = pn - r;
            n = r;
            if wanted(lo, n, lrange, rrange) {
                continue;
            }
        }
        return;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c_cmp(a: &(u32, usize), b: &(u32, usize)) -> i32 {
        match a.0.cmp(&b.0) {
            std::cmp::Ordering::Less => -1,
            std::cmp::Ordering::Equal => 0,
            std::cmp::Ordering::Greater => 1,
        }
    }

    /// A small deterministic generator (no dependency for tests).
    fn lcg(seed: &mut u64) -> u32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*seed >> 33) as u32
    }

    #[test]
    fn merge_sort_is_a_stable_sort() {
        let mut seed = 7;
        for n in 0..200 {
            let mut v: Vec<(u32, usize)> = (0..n).map(|i| (lcg(&mut seed) % 10, i)).collect();
            let mut want = v.clone();
            want.sort_by_key(|e| e.0);
            merge_sort(&mut v, c_cmp);
            assert_eq!(v, want);
        }
    }

    #[test]
    fn partial_quicksort_sorts_the_wanted_prefix() {
        let mut seed = 11;
        for n in 1..300 {
            for k in [1, 2, n / 3 + 1, n] {
                let k = k.min(n);
                let mut v: Vec<(u32, usize)> = (0..n).map(|i| (lcg(&mut seed) % 50, i)).collect();
                let mut want: Vec<u32> = v.iter().map(|e| e.0).collect();
                want.sort_unstable();
                partial_quicksort(&mut v, c_cmp, 0, k - 1);
                let got: Vec<u32> = v[..k].iter().map(|e| e.0).collect();
                assert_eq!(got, want[..k], "n={n} k={k}");
                // A permutation of the input.
                let mut ids: Vec<usize> = v.iter().map(|e| e.1).collect();
                ids.sort_unstable();
                assert_eq!(ids, (0..n).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn inconsistent_comparators_do_not_panic() {
        let mut v: Vec<f64> = (0..100)
            .map(|i| if i % 3 == 0 { f64::NAN } else { i as f64 })
            .collect();
        let c = |a: &f64, b: &f64| {
            if a > b {
                1
            } else if a == b {
                0
            } else {
                -1
            }
        };
        merge_sort(&mut v, c);
        partial_quicksort(&mut v, c, 0, 9);
        assert_eq!(v.len(), 100);
    }
}
