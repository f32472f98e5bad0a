use super::buckets::Buckets;
use super::*;
use crate::SmallBytes;
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Checks every structural invariant listed in the module docs.
fn check_invariants<K: Hash + Eq, V, S: BuildHasher>(dict: &Dict<K, V, S>) {
    check_raw_invariants(&dict.raw);
}

fn finish_rehash<K: Hash + Eq, V, S: BuildHasher>(dict: &mut Dict<K, V, S>) {
    let mut rounds = 0;
    while dict.rehash_step(100) {
        rounds += 1;
        assert!(rounds < 1_000_000);
    }
}

#[test]
fn basic_operations() {
    let mut d: Dict<u64, String> = Dict::new();
    assert!(d.is_empty());
    assert_eq!(d.buckets(), 0);
    assert_eq!(d.get(&1), None);
    assert_eq!(d.remove(&1), None);
    assert_eq!(d.insert(1, "one".into()), None);
    assert_eq!(d.insert(2, "two".into()), None);
    assert_eq!(d.insert(1, "uno".into()), Some("one".into()));
    assert_eq!(d.len(), 2);
    assert_eq!(d.get(&1).map(String::as_str), Some("uno"));
    assert_eq!(d.get_key_value(&2), Some((&2, &"two".to_string())));
    assert!(d.contains_key(&2));
    if let Some(v) = d.get_mut(&2) {
        v.push('!');
    }
    assert_eq!(d.get(&2).map(String::as_str), Some("two!"));
    assert_eq!(d.remove(&2), Some((2, "two!".into())));
    assert!(!d.contains_key(&2));
    assert_eq!(*d.get_or_insert_with(3, || "three".into()), "three");
    assert_eq!(*d.get_or_insert_with(3, || "nope".into()), "three");
    d.clear();
    assert!(d.is_empty());
    assert_eq!(d.buckets(), 0);
    check_invariants(&d);
}

#[test]
fn borrowed_lookups_with_small_bytes() {
    let mut d: Dict<SmallBytes, u32> = Dict::new();
    d.insert(SmallBytes::from("short"), 1);
    d.insert(
        SmallBytes::from("a key that is long enough for the heap"),
        2,
    );
    assert_eq!(d.get(&b"short"[..]), Some(&1));
    assert_eq!(
        d.get(&b"a key that is long enough for the heap"[..]),
        Some(&2)
    );
    assert_eq!(d.get(&b"missing"[..]), None);
    *d.get_mut(&b"short"[..]).unwrap() += 10;
    assert_eq!(
        d.remove(&b"short"[..]).map(|(k, v)| (k.into_vec(), v)),
        Some((b"short".to_vec(), 11))
    );
}

#[test]
fn grows_incrementally_and_shrinks() {
    let mut d = Dict::new();
    let mut saw_rehash = false;
    for i in 0..10_000u64 {
        d.insert(i, i * 2);
        saw_rehash |= d.is_rehashing();
        if i % 997 == 0 {
            check_invariants(&d);
        }
    }
    assert!(saw_rehash);
    finish_rehash(&mut d);
    // One bucket per entry: no doubling.
    assert_eq!(d.buckets(), 10_000 / MAX_LOAD_FACTOR);
    assert!((0..10_000u64).all(|i| d.get(&i) == Some(&(i * 2))));
    for i in 0..9_990u64 {
        assert_eq!(d.remove(&i), Some((i, i * 2)));
        if i % 997 == 0 {
            check_invariants(&d);
        }
    }
    finish_rehash(&mut d);
    check_invariants(&d);
    assert_eq!(d.len(), 10);
    assert!(
        d.buckets() <= 10 * SHRINK_FILL_DENOMINATOR,
        "{} buckets",
        d.buckets()
    );
    // 20 buckets: segment 3 holds buckets 16..32; the bigger ones are freed.
    assert_eq!(d.buckets.segs.len(), 4);
    for i in 9_990..10_000u64 {
        assert_eq!(d.remove(&i), Some((i, i * 2)));
    }
    finish_rehash(&mut d);
    assert_eq!(d.buckets(), INITIAL_SIZE);
}

#[test]
fn with_capacity_preallocates() {
    let mut d = Dict::with_capacity(1000);
    assert_eq!(d.buckets(), 1024);
    for i in 0..1000u32 {
        d.insert(i, ());
    }
    assert!(!d.is_rehashing());
    assert_eq!(d.buckets(), 1024);
}

#[test]
fn grows_and_shrinks_one_bucket_at_a_time() {
    let mut d = Dict::new();
    for i in 0..1024 * MAX_LOAD_FACTOR as u32 {
        d.insert(i, ());
        assert_eq!(d.buckets(), (i as usize + 1).max(INITIAL_SIZE));
    }
    assert!(!d.is_rehashing());
    d.insert(5000, ());
    assert_eq!(d.buckets(), 1025);
    assert!(d.is_rehashing(), "a round of splits is under way");
    check_invariants(&d);
    assert!(!d.rehash_step(usize::MAX), "nothing owed while growing");
    // Removals shrink as they go, a bounded number of merges each.
    for i in 0..1000u32 {
        let before = d.buckets();
        d.remove(&i);
        assert!(before - d.buckets() <= SHRINK_STEP);
        assert!(d.len() * SHRINK_FILL_DENOMINATOR >= d.buckets() || d.buckets() == INITIAL_SIZE);
    }
    check_invariants(&d);
    assert!(!d.rehash_step(usize::MAX));
}

#[test]
fn locate_maps_each_bucket_into_its_segment() {
    let mut want = (0, 0);
    for i in 0..100_000usize {
        assert_eq!(locate(i), want, "bucket {i}");
        want.1 += 1;
        if want.1 == seg_len(want.0) {
            want = (want.0 + 1, 0);
        }
        assert_eq!(seg_start(locate(i).0) + locate(i).1, i);
    }
}

#[test]
fn a_table_at_a_segment_boundary_keeps_its_segment() {
    // Growing past 64 buckets allocates segment 5 (64..128); dropping back
    // below 64 keeps it until the table falls to 3/4 of 64.
    let mut d = Dict::new();
    for i in 0..65u32 {
        d.insert(i, ());
    }
    assert_eq!(d.buckets.segs.len(), 6);
    for i in 0..34u32 {
        d.remove(&i);
    }
    // 31 entries: shrunk to 62 buckets (fill 1/2).
    assert!(d.buckets() < 64 && d.buckets() > 48, "{}", d.buckets());
    assert_eq!(d.buckets.segs.len(), 6, "kept at the boundary");
    for i in 34..45u32 {
        d.remove(&i);
    }
    assert!(d.buckets.segs.len() < 6);
    check_invariants(&d);
}

#[test]
fn iterators_and_drain() {
    let mut d: Dict<u32, u32> = (0..500).map(|i| (i, i)).collect();
    assert!(d.is_rehashing() || d.buckets() * MAX_LOAD_FACTOR >= 500);
    assert_eq!(d.iter().len(), 500);
    let mut keys: Vec<u32> = d.keys().copied().collect();
    keys.sort_unstable();
    assert_eq!(keys, (0..500).collect::<Vec<_>>());
    for (_, v) in d.iter_mut() {
        *v += 1;
    }
    assert!(d.iter().all(|(k, v)| *v == k + 1));
    d.retain(|k, _| k % 2 == 0);
    assert_eq!(d.len(), 250);
    check_invariants(&d);
    let mut drained: Vec<(u32, u32)> = d.drain().collect();
    assert!(d.is_empty());
    assert_eq!(d.buckets(), 0);
    drained.sort_unstable();
    assert_eq!(
        drained,
        (0..500).step_by(2).map(|i| (i, i + 1)).collect::<Vec<_>>()
    );
    let d2: Dict<u32, u32> = (0..10).map(|i| (i, i)).collect();
    assert_eq!(d2.into_iter().count(), 10);
    assert_eq!(format!("{:?}", Dict::<u8, u8>::new()), "{}");
}

/// A hasher that puts every key in one bucket.
#[derive(Default, Clone)]
struct Collide;

impl BuildHasher for Collide {
    type Hasher = CollideHasher;
    fn build_hasher(&self) -> CollideHasher {
        CollideHasher
    }
}

struct CollideHasher;

impl Hasher for CollideHasher {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, _: &[u8]) {}
}

#[test]
fn collisions_are_correct() {
    let mut d = Dict::with_hasher(Collide);
    for i in 0..300u32 {
        d.insert(i, i);
    }
    for i in (0..300u32).step_by(3) {
        assert_eq!(d.remove(&i), Some((i, i)));
    }
    check_invariants(&d);
    assert_eq!(d.len(), 200);
    assert!((0..300u32).all(|i| d.contains_key(&i) == (i % 3 != 0)));
}

#[test]
fn long_chain_drops_without_stack_overflow() {
    // Built by hand: inserting this many colliding keys is quadratic.
    let mut buckets: Buckets<u64, u64> = Buckets {
        segs: vec![Seg::zeroed(INITIAL_SIZE)],
    };
    for i in 0..1_000_000 {
        buckets.push(
            0,
            Box::new(Node {
                next: None,
                key: i,
                value: i,
            }),
        );
    }
    let mut drain = Drain::new(buckets.segs, 1_000_000);
    assert_eq!(drain.next().map(|(k, _)| k), Some(999_999));
    drop(drain);
}

#[test]
fn random_entry_is_fair_enough() {
    // A fixed hasher: with a random seed the chain lengths vary per run, and
    // Redis's choice (a random bucket, then a random entry of its chain)
    // gives an entry in a chain of n about 1/n of a lone entry's share.
    let mut rng = SmallRng::seed_from_u64(7);
    let mut d = Dict::with_hasher(BuildHasherDefault::<DefaultHasher>::default());
    assert_eq!(d.random_entry(&mut rng), None);
    for i in 0..20u32 {
        d.insert(i, ());
    }
    let mut counts = [0u32; 20];
    for _ in 0..20_000 {
        let (k, _) = d.random_entry(&mut rng).unwrap();
        counts[*k as usize] += 1;
    }
    assert!(counts.iter().all(|&c| c > 400), "{counts:?}");

    // During a rehash, and when sparse (forces the slow path at times).
    for i in 20..4096u32 {
        d.insert(i, ());
    }
    d.retain(|k, _| *k % 64 == 0);
    let mut seen = HashSet::new();
    for _ in 0..10_000 {
        let (k, _) = d.random_entry(&mut rng).unwrap();
        assert_eq!(k % 64, 0);
        seen.insert(*k);
    }
    assert_eq!(seen.len(), d.len());
}

#[test]
fn sample_keys_returns_distinct_present_keys() {
    let mut rng = SmallRng::seed_from_u64(11);
    let mut d = Dict::new();
    assert_eq!(d.sample_keys(&mut rng, 5, &mut Vec::new()), 0);
    for i in 0..1000u32 {
        d.insert(i, i);
        if i % 50 == 0 {
            let mut out = Vec::new();
            let n = d.sample_keys(&mut rng, 20, &mut out);
            assert_eq!(n, out.len());
            assert!(n <= 20 && n > 0);
            assert!(out.iter().all(|k| d.contains_key(*k)));
        }
    }
    let mut out = Vec::new();
    assert_eq!(d.sample_keys(&mut rng, 5000, &mut out), out.len());
    assert!(out.len() <= 1000);
    let mut entries = Vec::new();
    d.sample_entries(&mut rng, 3, &mut entries);
    assert!(entries.iter().all(|(k, v)| k == v));
}

/// Runs a full scan, calling `between` after every call, and returns the
/// multiset of visited keys.
fn scan_all<S: BuildHasher>(
    d: &mut Dict<u64, u64, S>,
    mut between: impl FnMut(&mut Dict<u64, u64, S>, usize),
) -> HashMap<u64, usize> {
    let mut seen = HashMap::new();
    let mut cursor = 0;
    let mut calls = 0;
    loop {
        cursor = d.scan(cursor, |k, _| *seen.entry(*k).or_insert(0) += 1);
        calls += 1;
        assert!(calls < 10_000_000, "scan does not terminate");
        if cursor == 0 {
            return seen;
        }
        between(d, calls);
    }
}

#[test]
fn scan_stable_table_visits_each_once() {
    let mut d = Dict::new();
    assert_eq!(d.scan(0, |_, _| panic!("empty")), 0);
    for i in 0..5000u64 {
        d.insert(i, i);
    }
    finish_rehash(&mut d);
    let seen = scan_all(&mut d, |_, _| {});
    assert_eq!(seen.len(), 5000);
    assert!(seen.values().all(|&n| n == 1));
}

#[test]
fn scan_guarantee_while_growing() {
    let mut d = Dict::new();
    for i in 0..1000u64 {
        d.insert(i, i);
    }
    let mut next = 1_000_000u64;
    let mut max_buckets = 0;
    let seen = scan_all(&mut d, |d, _| {
        // Bounded: a table growing in step with the scan would keep the
        // cursor from ever finishing (as in Redis).
        for _ in 0..50 {
            if next < 1_020_000 {
                d.insert(next, next);
                next += 1;
            }
        }
        max_buckets = max_buckets.max(d.buckets());
    });
    assert!(max_buckets >= 8192, "the table grew during the scan");
    assert!((0..1000u64).all(|k| seen.contains_key(&k)));
}

#[test]
fn scan_guarantee_while_shrinking() {
    let mut d = Dict::new();
    for i in 0..20_000u64 {
        d.insert(i, i);
    }
    finish_rehash(&mut d);
    let start_buckets = d.buckets();
    // Keys divisible by 100 stay; the others are deleted during the scan.
    let mut doomed: Vec<u64> = (0..20_000u64).filter(|k| k % 100 != 0).collect();
    let mut shrank = false;
    let seen = scan_all(&mut d, |d, _| {
        for _ in 0..200 {
            if let Some(k) = doomed.pop() {
                d.remove(&k);
            }
        }
        // The cron's share of the rehash work.
        d.rehash_step(1);
        shrank |= d.buckets() < start_buckets;
    });
    assert!(shrank, "the table shrank during the scan");
    assert!((0..20_000u64).step_by(100).all(|k| seen.contains_key(&k)));
}

#[test]
fn scan_guarantee_with_grow_shrink_cycles() {
    let mut rng = SmallRng::seed_from_u64(3);
    let mut d = Dict::new();
    for i in 0..300u64 {
        d.insert(i, i);
    }
    let mut extra = Vec::new();
    let mut next = 1_000_000u64;
    let seen = scan_all(&mut d, |d, call| {
        // Alternate phases of heavy growth and heavy deletion.
        if (call / 20) % 2 == 0 {
            for _ in 0..rng.gen_range(0..200) {
                d.insert(next, next);
                extra.push(next);
                next += 1;
            }
        } else {
            for _ in 0..rng.gen_range(0..400) {
                if let Some(k) = extra.pop() {
                    d.remove(&k);
                }
            }
        }
        if rng.gen_bool(0.1) {
            d.rehash_step(rng.gen_range(0..8));
        }
    });
    assert!((0..300u64).all(|k| seen.contains_key(&k)));
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u16, u32),
    Remove(u16),
    Get(u16),
    GetMut(u16),
    GetOrInsert(u16, u32),
    RehashStep(usize),
    Retain(u16),
    Clear,
}

fn op() -> impl Strategy<Value = Op> {
    // A small key space so that removes and replacements hit.
    let key = 0u16..400;
    prop_oneof![
        10 => (key.clone(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
        6 => key.clone().prop_map(Op::Remove),
        3 => key.clone().prop_map(Op::Get),
        2 => key.clone().prop_map(Op::GetMut),
        2 => (key.clone(), any::<u32>()).prop_map(|(k, v)| Op::GetOrInsert(k, v)),
        2 => (0usize..4).prop_map(Op::RehashStep),
        1 => (1u16..8).prop_map(Op::Retain),
        1 => Just(Op::Clear),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn model_against_hashmap(ops in proptest::collection::vec(op(), 0..600)) {
        let mut d: Dict<u16, u32> = Dict::new();
        let mut model: HashMap<u16, u32> = HashMap::new();
        for (i, op) in ops.iter().enumerate() {
            match *op {
                Op::Insert(k, v) => prop_assert_eq!(d.insert(k, v), model.insert(k, v)),
                Op::Remove(k) => prop_assert_eq!(d.remove(&k), model.remove_entry(&k)),
                Op::Get(k) => prop_assert_eq!(d.get(&k), model.get(&k)),
                Op::GetMut(k) => {
                    let got = d.get_mut(&k).map(|v| {
                        *v = v.wrapping_add(1);
                        *v
                    });
                    let want = model.get_mut(&k).map(|v| {
                        *v = v.wrapping_add(1);
                        *v
                    });
                    prop_assert_eq!(got, want);
                }
                Op::GetOrInsert(k, v) => {
                    prop_assert_eq!(*d.get_or_insert_with(k, || v), *model.entry(k).or_insert(v));
                }
                Op::RehashStep(n) => {
                    d.rehash_step(n);
                }
                Op::Retain(m) => {
                    d.retain(|k, _| k % m != 0);
                    model.retain(|k, _| k % m != 0);
                }
                Op::Clear => {
                    d.clear();
                    model.clear();
                }
            }
            prop_assert_eq!(d.len(), model.len());
            if i % 50 == 0 {
                check_invariants(&d);
            }
        }
        check_invariants(&d);
        let got: HashMap<u16, u32> = d.iter().map(|(k, v)| (*k, *v)).collect();
        prop_assert_eq!(got, model);
    }

    #[test]
    fn scan_returns_every_stable_key(
        initial in 1u64..2000,
        ops in proptest::collection::vec((any::<bool>(), 0u64..300), 1..60),
    ) {
        let mut d = Dict::new();
        for i in 0..initial {
            d.insert(i, i);
        }
        let mut ops = ops.into_iter();
        let mut next = 1_000_000u64;
        let mut extra = Vec::new();
        let seen = scan_all(&mut d, |d, _| {
            let Some((grow, n)) = ops.next() else { return };
            for _ in 0..n {
                if grow {
                    d.insert(next, next);
                    extra.push(next);
                    next += 1;
                } else if let Some(k) = extra.pop() {
                    d.remove(&k);
                }
            }
        });
        prop_assert!((0..initial).all(|k| seen.contains_key(&k)));
    }
}

#[test]
fn scan_mut_marks_each_entry_while_the_table_grows() {
    // The snapshot's use: mark each entry once (value 0 -> 1), counting
    // first visits; entries inserted during the scan arrive marked.
    let mut d = Dict::new();
    for i in 0..3000u64 {
        d.insert(i, 0u64);
    }
    let (mut cursor, mut first, mut next) = (0, 0, 1_000_000u64);
    loop {
        cursor = d.scan_mut(cursor, |_, v| {
            if *v == 0 {
                *v = 1;
                first += 1;
            }
        });
        if cursor == 0 {
            break;
        }
        for _ in 0..20 {
            if next < 1_010_000 {
                d.insert(next, 1);
                next += 1;
            }
        }
    }
    assert_eq!(first, 3000);
    assert!(d.iter().all(|(_, v)| *v == 1));
    let (k, v) = d.get_key_value_mut(&7).unwrap();
    assert_eq!(*k, 7);
    *v = 9;
    assert_eq!(d.get(&7), Some(&9));
    assert!(d.get_key_value_mut(&u64::MAX).is_none());
}

/// A walk in slices of random sizes visits every entry exactly once, in
/// `iter`'s order, also while the dict is half way through a rehash
/// (both tables in use) and with long chains.
#[test]
fn walk_in_slices_visits_each_entry_once_in_iter_order() {
    let mut rng = SmallRng::seed_from_u64(11);
    for n in [0usize, 1, 7, 100, 1000, 5000] {
        for rehashing in [false, true] {
            let mut d: Dict<u64, u64> = Dict::new();
            for i in 0..n as u64 {
                d.insert(i, i * 3);
            }
            if rehashing {
                // Growth: inserts past the load factor start a rehash.
                let mut i = n as u64;
                while !d.is_rehashing() && i < 1_000_000 {
                    d.insert(i, i * 3);
                    i += 1;
                }
            }
            let want: Vec<(u64, u64)> = d.iter().map(|(k, v)| (*k, *v)).collect();
            let mut got = Vec::new();
            let mut pos = WalkPos::default();
            let mut calls = 0;
            loop {
                let mut room = rng.gen_range(1..50);
                let end = d.walk(&mut pos, |k, v| {
                    got.push((*k, *v));
                    room -= 1;
                    room > 0
                });
                calls += 1;
                if end {
                    break;
                }
                assert!(calls < 100_000);
            }
            assert_eq!(got, want, "n {n} rehashing {rehashing}");
            // A finished walk stays finished.
            assert!(d.walk(&mut pos, |_, _| panic!("visited twice")));
        }
    }
}

// `RawDict` on its own, with a node that is not a `Box<Node>`: a thin
// owning pointer to one allocation holding the link, a byte-string key and
// a value, as a variable-size keyspace node will be.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::rc::Rc;

/// Counts the test nodes built and dropped, to check that each is freed
/// exactly once.
#[derive(Default)]
struct Census {
    made: Cell<usize>,
    dropped: Cell<usize>,
}

impl Census {
    fn live(&self) -> usize {
        self.made.get() - self.dropped.get()
    }
}

struct TestInner {
    next: Option<TestNode>,
    key: Box<[u8]>,
    value: u64,
    census: Rc<Census>,
}

/// Owns its `TestInner`, built by `Box::into_raw` and freed by `Drop`.
#[repr(transparent)]
struct TestNode(NonNull<TestInner>);

impl TestNode {
    pub(super) fn new(key: &[u8], value: u64, census: &Rc<Census>) -> Self {
        census.made.set(census.made.get() + 1);
        let inner = Box::new(TestInner {
            next: None,
            key: key.into(),
            value,
            census: Rc::clone(census),
        });
        TestNode(NonNull::from(Box::leak(inner)))
    }

    fn inner(&self) -> &TestInner {
        // SAFETY: the pointer came from `Box::leak` and is freed only by
        // `Drop`; `self` owns it, so a shared borrow of `self` is one of
        // the node.
        unsafe { self.0.as_ref() }
    }

    fn inner_mut(&mut self) -> &mut TestInner {
        // SAFETY: as in `inner`; `&mut self` is the only way to the node.
        unsafe { self.0.as_mut() }
    }

    fn value(&self) -> u64 {
        self.inner().value
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `Box::leak` of this layout and is
        // freed only here, once, by the node's only owner.
        let inner = unsafe { Box::from_raw(self.0.as_ptr()) };
        inner.census.dropped.set(inner.census.dropped.get() + 1);
    }
}

// SAFETY: `TestNode` is a `#[repr(transparent)]` `NonNull`, so
// `Option<TestNode>` is pointer-sized with `None` all-zero; the link and the
// key are fields of the node, and the key never changes.
unsafe impl ChainNode for TestNode {
    type Key = [u8];

    fn next(&self) -> &Option<Self> {
        &self.inner().next
    }

    fn next_mut(&mut self) -> &mut Option<Self> {
        &mut self.inner_mut().next
    }

    fn key(&self) -> &[u8] {
        &self.inner().key
    }

    fn prefetch_addr(&self) -> *const u8 {
        self.0.as_ptr() as *const u8
    }
}

impl ChainNodeMut for TestNode {
    type PayloadMut<'a> = (&'a [u8], &'a mut u64);

    fn link_and_payload_mut(&mut self) -> (&mut Option<Self>, (&[u8], &mut u64)) {
        let inner = self.inner_mut();
        (&mut inner.next, (&inner.key, &mut inner.value))
    }
}

fn tkey(i: u64) -> Vec<u8> {
    format!("key:{i}").into_bytes()
}

/// The structural invariants of the module docs, for any node type.
fn check_raw_invariants<N: ChainNode, S: BuildHasher>(raw: &RawDict<N, S>)
where
    N::Key: Hash + Eq,
{
    let segs = &raw.buckets.segs;
    for (k, s) in segs.iter().enumerate() {
        assert_eq!(s.buckets.len(), seg_len(k), "segment {k}");
    }
    let n = raw.buckets();
    if n == 0 {
        assert!(segs.is_empty());
        assert_eq!(raw.used, 0);
        return;
    }
    assert!(raw.level >= INITIAL_LOG2 && raw.split < 1 << raw.level);
    assert!(segs.len() > locate(n - 1).0, "segments cover the buckets");
    let mut seen = HashSet::new();
    let mut used = 0;
    for (k, seg) in segs.iter().enumerate() {
        for (off, slot) in seg.buckets.iter().enumerate() {
            let b = seg_start(k) + off;
            assert_eq!(locate(b), (k, off));
            let mut cur = slot.as_ref();
            while let Some(node) = cur {
                assert!(b < n, "a node past the bucket count");
                assert_eq!(raw.bucket_of(raw.hash_of(node.key())), b);
                assert!(seen.insert(node.key()), "duplicate key");
                used += 1;
                cur = node.next().as_ref();
            }
        }
    }
    assert_eq!(used, raw.used);
    assert_eq!(raw.iter().len(), used);
    assert_eq!(raw.iter().count(), used);
}

fn raw_insert<S: BuildHasher>(raw: &mut RawDict<TestNode, S>, i: u64, census: &Rc<Census>) {
    let key = tkey(i);
    let hash = raw.hash_of(&key[..]);
    assert!(raw.find(hash, &key[..]).is_none());
    let node = raw.insert_new(hash, TestNode::new(&key, i, census));
    assert_eq!(node.value(), i);
}

#[test]
fn raw_dict_with_a_custom_node() {
    let census = Rc::new(Census::default());
    let mut raw: RawDict<TestNode> = RawDict::new();
    assert!(raw.get(&b"nope"[..]).is_none());
    assert!(raw.remove(&b"nope"[..]).is_none());
    for i in 0..5000 {
        raw_insert(&mut raw, i, &census);
        if i % 997 == 0 {
            check_raw_invariants(&raw);
        }
    }
    assert_eq!(raw.len(), 5000);
    assert_eq!(raw.buckets(), 5000 / MAX_LOAD_FACTOR);
    assert_eq!(census.live(), 5000);
    for i in 0..5000 {
        let key = tkey(i);
        let hash = raw.hash_of(&key[..]);
        assert_eq!(raw.find(hash, &key[..]).map(TestNode::value), Some(i));
        raw.find_mut(hash, &key[..]).unwrap().inner_mut().value += 1;
        assert_eq!(raw.get(&key[..]).map(TestNode::value), Some(i + 1));
        raw.prefetch(hash, 0);
        raw.prefetch(hash, 1);
    }
    assert!(raw.get(&b"missing"[..]).is_none());
    // Removals hand back unlinked nodes and shrink the table.
    for i in 0..4990 {
        let key = tkey(i);
        let node = raw.remove(&key[..]).expect("present");
        assert!(node.next().is_none());
        assert_eq!((node.key(), node.value()), (&key[..], i + 1));
        drop(node);
        assert_eq!(census.dropped.get(), i as usize + 1);
        assert!(raw.get(&key[..]).is_none());
        if i % 997 == 0 {
            check_raw_invariants(&raw);
        }
    }
    let key = tkey(4995);
    assert!(raw.remove_hashed(raw.hash_of(&key[..]), &key[..]).is_some());
    while raw.rehash_step(100) {}
    check_raw_invariants(&raw);
    assert!(raw.buckets() <= 9 * SHRINK_FILL_DENOMINATOR);
    assert_eq!(census.live(), 9);
    drop(raw);
    assert_eq!(census.live(), 0, "the table's drop frees its nodes");
    assert_eq!(census.made.get(), 5000);
}

#[test]
fn raw_scan_across_growth_and_shrink() {
    let census = Rc::new(Census::default());
    let mut raw: RawDict<TestNode> = RawDict::new();
    assert_eq!(raw.scan(0, |_| panic!("empty")), 0);
    for i in 0..500 {
        raw_insert(&mut raw, i, &census);
    }
    let scan_all = |raw: &mut RawDict<TestNode>,
                    between: &mut dyn FnMut(&mut RawDict<TestNode>)| {
        let mut seen: HashMap<u64, usize> = HashMap::new();
        let mut cursor = 0;
        loop {
            cursor = raw.scan(cursor, |n| *seen.entry(n.value()).or_default() += 1);
            if cursor == 0 {
                return seen;
            }
            between(raw);
        }
    };
    // Growth: 500 stable keys, 20 000 more inserted during the scan.
    let mut next = 1_000_000;
    let seen = scan_all(&mut raw, &mut |raw| {
        for _ in 0..100 {
            if next < 1_020_000 {
                raw_insert(raw, next, &census);
                next += 1;
            }
        }
    });
    assert!(raw.buckets() >= 16_384, "the table grew during the scan");
    assert!((0..500).all(|k| seen.contains_key(&k)));
    check_raw_invariants(&raw);
    // Shrinking: the 20 000 are removed during the scan, with scan_mut
    // marking (value | 1 << 40) each stable node it visits.
    let start = raw.buckets();
    let mut doomed: Vec<u64> = (1_000_000..next).collect();
    let mut cursor = 0;
    loop {
        cursor = raw.scan_mut(cursor, |n| n.inner_mut().value |= 1 << 40);
        if cursor == 0 {
            break;
        }
        for _ in 0..300 {
            if let Some(k) = doomed.pop() {
                assert!(raw.remove(&tkey(k)[..]).is_some());
            }
        }
    }
    assert!(raw.buckets() < start, "the table shrank during the scan");
    assert!((0..500).all(|k| raw.get(&tkey(k)[..]).unwrap().value() == k | 1 << 40));
    check_raw_invariants(&raw);
    assert_eq!(census.live(), raw.len());
    raw.clear();
    assert_eq!((raw.len(), raw.buckets(), census.live()), (0, 0, 0));
}

#[test]
fn raw_drain_and_retain_free_each_node_once() {
    let census = Rc::new(Census::default());
    let mut raw: RawDict<TestNode> = RawDict::with_capacity_and_hasher(100, Default::default());
    assert_eq!(raw.buckets(), 128);
    for i in 0..1000 {
        raw_insert(&mut raw, i, &census);
    }
    raw.retain(|n| {
        n.inner_mut().value += 1;
        n.value() % 3 != 1
    });
    assert_eq!(raw.len(), 666);
    assert_eq!(census.live(), 666);
    check_raw_invariants(&raw);
    assert!(raw
        .iter()
        .all(|n| n.value() % 3 != 1 && raw.get(n.key()).is_some()));
    // A drain consumed in part: the rest is freed with it.
    let mut drain = raw.drain();
    assert_eq!((raw.len(), raw.buckets()), (0, 0));
    assert_eq!(drain.len(), 666);
    for node in drain.by_ref().take(100) {
        assert!(node.next().is_none());
    }
    assert_eq!(census.live(), 566);
    assert_eq!(drain.len(), 566);
    drop(drain);
    assert_eq!(census.live(), 0);
    // A drain consumed to the end, and the emptied table reused.
    for i in 0..300 {
        raw_insert(&mut raw, i, &census);
    }
    let mut values: Vec<u64> = raw.drain().map(|n| n.value()).collect();
    values.sort_unstable();
    assert_eq!(values, (0..300).collect::<Vec<_>>());
    assert_eq!(census.live(), 0);
    assert_eq!(census.made.get(), census.dropped.get());
}

#[test]
fn raw_replace_node_keeps_the_chain() {
    let census = Rc::new(Census::default());
    // One chain: every replacement is at the head, the middle or the tail.
    let mut raw = RawDict::with_hasher(Collide);
    for i in 0..10 {
        raw_insert(&mut raw, i, &census);
    }
    let order = |raw: &RawDict<TestNode, Collide>| -> Vec<Vec<u8>> {
        raw.iter().map(|n| n.key().to_vec()).collect()
    };
    let before = order(&raw);
    for (round, key) in before.clone().iter().enumerate() {
        let hash = raw.hash_of(&key[..]);
        let dropped = census.dropped.get();
        let new = raw
            .replace_node(hash, &key[..], |old| {
                assert!(old.next().is_none(), "f gets the node unlinked");
                // A bigger node: the key again and a new value.
                TestNode::new(old.key(), old.value() + 100, &census)
            })
            .expect("present");
        assert_eq!(new.key(), &key[..]);
        assert_eq!(census.dropped.get(), dropped + 1, "the old node is freed");
        assert_eq!(raw.len(), 10);
        assert_eq!(
            order(&raw),
            before,
            "round {round}: same place in the chain"
        );
        check_raw_invariants(&raw);
    }
    assert!(raw.iter().all(|n| n.value() >= 100));
    // An absent key: `f` is not called.
    let hash = raw.hash_of(&b"absent"[..]);
    assert!(raw
        .replace_node(hash, &b"absent"[..], |_| panic!("called"))
        .is_none());
    // `f` panics: the table is whole without the node.
    let key = before[5].clone();
    let hash = raw.hash_of(&key[..]);
    let live = census.live();
    let r = catch_unwind(AssertUnwindSafe(|| {
        raw.replace_node(hash, &key[..], |_| panic!("allocation failed"));
    }));
    assert!(r.is_err());
    assert_eq!(raw.len(), 9);
    assert_eq!(census.live(), live - 1);
    assert!(raw.get(&key[..]).is_none());
    let mut want = before.clone();
    want.remove(5);
    assert_eq!(order(&raw), want);
    check_raw_invariants(&raw);
    drop(raw);
    assert_eq!(census.live(), 0);
}

#[test]
fn raw_find_mut_replacing_replaces_only_stale_nodes() {
    let census = Rc::new(Census::default());
    let mut raw = RawDict::with_hasher(Collide);
    for i in 0..10 {
        raw_insert(&mut raw, i, &census);
    }
    let order = |raw: &RawDict<TestNode, Collide>| -> Vec<Vec<u8>> {
        raw.iter().map(|n| n.key().to_vec()).collect()
    };
    let before = order(&raw);
    for key in &before {
        let hash = raw.hash_of(&key[..]);
        let made = census.made.get();
        let n = raw
            .find_mut_replacing(
                hash,
                &key[..],
                |n| n.value() % 2 == 0,
                |old| {
                    assert!(old.next().is_none(), "f gets the node unlinked");
                    TestNode::new(old.key(), old.value() + 101, &census)
                },
            )
            .expect("present");
        assert_eq!(n.key(), &key[..]);
        assert_eq!(n.value() % 2, 1, "stale nodes replaced, others found");
        let replaced = census.made.get() - made;
        assert!(replaced <= 1);
        assert_eq!(census.live(), 10);
        assert_eq!(order(&raw), before, "same place in the chain");
        check_raw_invariants(&raw);
    }
    assert_eq!(raw.iter().filter(|n| n.value() >= 100).count(), 5);
    let hash = raw.hash_of(&b"absent"[..]);
    assert!(raw
        .find_mut_replacing(
            hash,
            &b"absent"[..],
            |_| panic!("asked"),
            |_| panic!("called")
        )
        .is_none());
    // `f` panics: the table is whole without the node.
    let key = before[3].clone();
    let hash = raw.hash_of(&key[..]);
    let r = catch_unwind(AssertUnwindSafe(|| {
        raw.find_mut_replacing(hash, &key[..], |_| true, |_| panic!("allocation failed"));
    }));
    assert!(r.is_err());
    assert_eq!(raw.len(), 9);
    assert_eq!(census.live(), 9);
    assert!(raw.get(&key[..]).is_none());
    check_raw_invariants(&raw);
    drop(raw);
    assert_eq!(census.live(), 0);
}

#[test]
fn raw_iterators_walk_and_sampling() {
    let census = Rc::new(Census::default());
    let mut raw: RawDict<TestNode> = RawDict::new();
    let mut rng = SmallRng::seed_from_u64(5);
    assert!(raw.random_node(&mut rng).is_none());
    assert_eq!(raw.sample_nodes(&mut rng, 3, |_| panic!("empty")), 0);
    for i in 0..700 {
        raw_insert(&mut raw, i, &census);
    }
    assert!(raw.is_rehashing());
    assert_eq!(raw.iter().len(), 700);
    for (key, value) in raw.iter_mut() {
        assert_eq!(key, &tkey(*value)[..]);
        *value *= 2;
    }
    raw.for_each_mut(|n| n.inner_mut().value += 1);
    let mut values: Vec<u64> = raw.iter().map(TestNode::value).collect();
    values.sort_unstable();
    assert_eq!(values, (0..700).map(|i| 2 * i + 1).collect::<Vec<_>>());
    // A walk in slices of 7 gives `iter`'s order.
    let want: Vec<u64> = raw.iter().map(TestNode::value).collect();
    let (mut got, mut pos) = (Vec::new(), WalkPos::default());
    loop {
        let mut room = 7;
        let end = raw.walk(&mut pos, |n| {
            got.push(n.value());
            room -= 1;
            room > 0
        });
        if end {
            break;
        }
    }
    assert_eq!(got, want);
    let mut seen = HashSet::new();
    for _ in 0..20_000 {
        let n = raw.random_node(&mut rng).unwrap();
        assert!(raw.get(n.key()).is_some());
        seen.insert(n.value());
    }
    assert!(seen.len() > 650, "{} of 700", seen.len());
    let mut sampled = Vec::new();
    assert_eq!(
        raw.sample_nodes(&mut rng, 20, |n| sampled.push(n.value())),
        20
    );
    assert!(sampled.iter().all(|v| v % 2 == 1));
    drop(raw);
    assert_eq!(census.live(), 0);
}

#[test]
fn raw_long_chain_of_custom_nodes_drops_iteratively() {
    // Built by hand: inserting this many colliding keys is quadratic.
    let census = Rc::new(Census::default());
    let chain = |census: &Rc<Census>| {
        let mut buckets: BucketArray<TestNode> = BucketArray {
            segs: vec![Seg::zeroed(INITIAL_SIZE)],
        };
        for i in 0..300_000 {
            buckets.push(0, TestNode::new(b"k", i, census));
        }
        buckets
    };
    // By the table's drop.
    let raw = RawDict {
        buckets: chain(&census),
        level: INITIAL_LOG2,
        split: 0,
        used: 300_000,
        hasher: Collide,
    };
    assert_eq!(raw.iter().len(), 300_000);
    drop(raw);
    assert_eq!(census.live(), 0);
    // By a drain's.
    let mut drain = RawDrain::new(chain(&census).segs, 300_000);
    assert_eq!(drain.next().map(|n| n.value()), Some(299_999));
    drop(drain);
    assert_eq!(census.live(), 0);
    assert_eq!(census.made.get(), 600_000);
}
