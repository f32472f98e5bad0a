use super::*;
use proptest::prelude::*;
use std::collections::VecDeque;

/// What is left of a cursor, copied.
fn rest(mut it: Iter<'_>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(e) = it.next() {
        out.push(e.to_vec());
    }
    out
}

fn model_eq(ql: &QuickList, m: &VecDeque<Vec<u8>>) {
    ql.check();
    assert_eq!(ql.len(), m.len());
    let want: Vec<Vec<u8>> = m.iter().cloned().collect();
    assert_eq!(ql.to_vecs(), want);
    let mut rev = rest(ql.iter_rev());
    rev.reverse();
    assert_eq!(rev, want);
}

fn from(fill: i32, items: &[&[u8]]) -> QuickList {
    let mut q = QuickList::new(fill);
    for i in items {
        q.push_back(i);
    }
    q
}

fn num(i: usize) -> Vec<u8> {
    i.to_string().into_bytes()
}

#[test]
fn entry_encoding_round_trips_at_varint_edges() {
    for n in [0usize, 1, 127, 128, 16383, 16384, 70000, (1 << 21) + 3] {
        let v: Vec<u8> = (0..n).map(|i| i as u8).collect();
        let sz = entry_size(n);
        let mut buf = vec![0u8; sz];
        encode_into(&mut buf, &v);
        let (p, l) = read_fwd(&buf, 0);
        assert_eq!(&buf[p..p + l], &v[..]);
        assert_eq!(p + l + varint_len(l), sz);
        let (s, p2, l2) = read_back(&buf, sz);
        assert_eq!((s, p2, l2), (0, p, l));
    }
    // Listpack-like overhead: 2 bytes up to 127-byte payloads.
    assert_eq!(entry_size(10), 12);
    assert_eq!(entry_size(127), 129);
    assert_eq!(entry_size(128), 132);
}

#[test]
fn both_ends() {
    let mut q = QuickList::new(3);
    let mut m = VecDeque::new();
    for i in 0..20 {
        if i % 2 == 0 {
            q.push_back(&num(i));
            m.push_back(num(i));
        } else {
            q.push_front(&num(i));
            m.push_front(num(i));
        }
        model_eq(&q, &m);
    }
    assert!((7..=8).contains(&q.node_count()), "{}", q.node_count());
    assert_eq!(q.front(), m.front().map(|v| &v[..]));
    assert_eq!(q.back(), m.back().map(|v| &v[..]));
    while !m.is_empty() {
        if m.len() % 3 == 0 {
            assert!(q.pop_front());
            m.pop_front();
        } else {
            assert!(q.pop_back());
            m.pop_back();
        }
        model_eq(&q, &m);
    }
    assert!(!q.pop_front());
    assert!(!q.pop_back());
    assert_eq!(q.front(), None);
    assert_eq!(q.back(), None);
    assert_eq!(q.node_count(), 0);
}

#[test]
fn node_caps_by_count_and_bytes() {
    // Count fill: at most `fill` entries per node.
    let q = from(4, &[&b"a"[..]; 10]);
    assert_eq!(q.node_count(), 3);
    // Fill 0 as Redis: one entry per node.
    let q = from(0, &[&b"a"[..]; 5]);
    assert_eq!(q.node_count(), 5);
    // Count fill is still capped at 8 KiB per node.
    let big = vec![b'x'; 3000];
    let q = from(100, &[&big[..]; 6]);
    assert_eq!(q.node_count(), 3);
    // Size fill -1 = 4 KiB: one 3000-byte entry per node; an oversized
    // element lives alone.
    let q = from(-1, &[&big[..]; 4]);
    assert_eq!(q.node_count(), 4);
    let huge = vec![b'y'; 100_000];
    let q = from(-5, &[b"a", &huge[..], b"b"]);
    assert_eq!(q.node_count(), 3);
    q.check();
    assert_eq!(q.get(1).as_deref(), Some(&huge[..]));
    // Out-of-range fills clamp as Redis's quicklistSetFill.
    assert_eq!(QuickList::new(-100).fill(), -5);
    assert_eq!(QuickList::new(1 << 20).fill(), FILL_MAX);
    // Default -2: 8 KiB nodes; 10-byte payloads cost 12 bytes each.
    let q = from(-2, &[&b"0123456789"[..]; 2000]);
    assert_eq!(q.node_count(), 3);
    assert!(
        q.heap_bytes() < 2000 * 12 + 3 * 8192 / 2 + 256,
        "{}",
        q.heap_bytes()
    );
}

#[test]
fn index_walks_from_either_end() {
    for fill in [-1, 1, 2, 5, 100] {
        let items: Vec<Vec<u8>> = (0..257).map(num).collect();
        let mut q = QuickList::new(fill);
        for i in &items {
            q.push_back(i);
        }
        for (i, it) in items.iter().enumerate() {
            assert_eq!(q.get(i).as_deref(), Some(&it[..]), "fill {fill} index {i}");
            assert_eq!(q.iter_from(i).next(), Some(&it[..]));
            assert_eq!(q.iter_rev_from(i).next(), Some(&it[..]));
            assert_eq!(q.iter_from(i).len(), items.len() - i);
            assert_eq!(q.iter_rev_from(i).len(), i + 1);
        }
        assert_eq!(q.get(257), None);
        assert_eq!(q.iter_from(257).next(), None);
        assert_eq!(rest(q.iter_from(250)).len(), 7);
        assert_eq!(rest(q.iter_rev_from(3)), vec![b"3", b"2", b"1", b"0"]);
    }
}

#[test]
fn insert_splits_full_nodes() {
    let mut q = from(3, &[b"a", b"b", b"c", b"d", b"e", b"f"]);
    let mut m: VecDeque<Vec<u8>> = q.to_vecs().into();
    assert_eq!(q.node_count(), 2);
    // Middle of a full node: split.
    q.insert(1, b"X");
    m.insert(1, b"X".to_vec());
    model_eq(&q, &m);
    // At a node boundary, into the neighbour with room.
    for (i, v) in [(4, b"Y"), (0, b"Z"), (9, b"W"), (5, b"V")] {
        q.insert(i, v);
        m.insert(i, v.to_vec());
        model_eq(&q, &m);
    }
    // A node never exceeds the fill.
    assert!(q.node_count() >= m.len().div_ceil(3));
}

#[test]
fn set_replaces_and_resizes() {
    let mut q = from(2, &[b"a", b"b", b"c", b"d", b"e"]);
    let mut m: VecDeque<Vec<u8>> = q.to_vecs().into();
    let long = vec![b'L'; 300];
    for (i, v) in [
        (0, &b"A"[..]),
        (2, &long[..]),
        (4, b""),
        (1, b"bb"),
        (2, b"c"),
    ] {
        assert!(q.set(i, v));
        m[i] = v.to_vec();
        model_eq(&q, &m);
    }
    assert!(!q.set(5, b"x"));
    let mut one = from(0, &[b"a", b"b", b"c"]);
    assert!(one.set(1, b"longer"));
    assert_eq!(one.to_vecs(), vec![&b"a"[..], b"longer", b"c"]);
    one.check();
}

#[test]
fn remove_range_edges() {
    let items: Vec<Vec<u8>> = (0..50).map(num).collect();
    for fill in [1, 4, -1] {
        for (start, n) in [
            (0, 0),
            (0, 1),
            (0, 13),
            (49, 1),
            (10, 30),
            (3, 100),
            (0, 50),
            (50, 3),
        ] {
            let mut q = QuickList::new(fill);
            let mut m: VecDeque<Vec<u8>> = VecDeque::new();
            for i in &items {
                q.push_back(i);
                m.push_back(i.clone());
            }
            q.remove_range(start, n);
            let end = (start + n).min(m.len());
            if start < end {
                m.drain(start..end);
            }
            model_eq(&q, &m);
        }
    }
}

#[test]
fn remove_matching_edges() {
    let base: &[&[u8]] = &[b"a", b"b", b"a", b"c", b"a", b"a", b"b", b"a"];
    let cases: &[(i64, usize, &[&[u8]])] = &[
        (0, 5, &[b"b", b"c", b"b"]),
        (2, 2, &[b"b", b"c", b"a", b"a", b"b", b"a"]),
        (-2, 2, &[b"a", b"b", b"a", b"c", b"a", b"b"]),
        (100, 5, &[b"b", b"c", b"b"]),
        (i64::MIN, 5, &[b"b", b"c", b"b"]),
        (-1, 1, &[b"a", b"b", b"a", b"c", b"a", b"a", b"b"]),
    ];
    for fill in [1, 2, 3, -1] {
        for &(count, n, want) in cases {
            let mut q = from(fill, base);
            assert_eq!(
                q.remove_matching(b"a", count),
                n,
                "fill {fill} count {count}"
            );
            q.check();
            assert_eq!(q.to_vecs(), want.to_vec());
        }
        let mut q = from(fill, base);
        assert_eq!(q.remove_matching(b"zz", 0), 0);
        assert_eq!(q.remove_matching(b"", 0), 0);
        assert_eq!(q.len(), base.len());
        let mut all = from(fill, &[&b"x"[..]; 9]);
        assert_eq!(all.remove_matching(b"x", 0), 9);
        assert!(all.is_empty());
        assert_eq!(all.node_count(), 0);
    }
}

#[test]
fn removals_merge_small_nodes() {
    // 2 entries per node; removing every other element leaves half-full
    // nodes that merge back to full ones.
    let mut q = QuickList::new(2);
    for i in 0..20 {
        q.push_back(if i % 2 == 0 { b"k" } else { b"d" });
    }
    assert_eq!(q.node_count(), 10);
    assert_eq!(q.remove_matching(b"d", 0), 10);
    q.check();
    assert_eq!(q.node_count(), 5);
    let mut q = from(4, &[&b"a"[..]; 12]);
    q.remove_range(2, 4); // nodes [2][2][4] -> merge into [4][4]
    q.check();
    assert_eq!(q.node_count(), 2);
}

#[test]
fn equality_ignores_node_layout() {
    let a = from(1, &[b"a", b"b", b"c"]);
    let b = from(-5, &[b"a", b"b", b"c"]);
    assert_eq!(a, b);
    assert_ne!(a, from(1, &[b"a", b"b"]));
    assert_eq!(format!("{a:?}"), r#"["a", "b", "c"]"#);
}

#[derive(Clone, Debug)]
enum Op {
    PushFront(Vec<u8>),
    PushBack(Vec<u8>),
    PopFront,
    PopBack,
    Insert(usize, Vec<u8>),
    Set(usize, Vec<u8>),
    RemoveRange(usize, usize),
    RemoveMatching(Vec<u8>, i64),
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::sample::select(vec![b"a".to_vec(), b"b".to_vec(), b"".to_vec()]),
        2 => prop::collection::vec(any::<u8>(), 0..40),
        1 => prop::collection::vec(any::<u8>(), 100..3000),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => value().prop_map(Op::PushFront),
        4 => value().prop_map(Op::PushBack),
        2 => Just(Op::PopFront),
        2 => Just(Op::PopBack),
        3 => (0usize..200, value()).prop_map(|(i, v)| Op::Insert(i, v)),
        2 => (0usize..200, value()).prop_map(|(i, v)| Op::Set(i, v)),
        1 => (0usize..200, 0usize..50).prop_map(|(s, n)| Op::RemoveRange(s, n)),
        1 => (value(), -3i64..3).prop_map(|(v, c)| Op::RemoveMatching(v, c)),
    ]
}

/// Applies `ops` to a list of `fill` and `depth` and to a model, checking
/// the invariants (compression included) after each.
fn run_model(fill: i32, depth: u32, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut q = QuickList::with_compress(fill, depth);
    let mut m: VecDeque<Vec<u8>> = VecDeque::new();
    for o in ops {
        match o {
            Op::PushFront(v) => {
                q.push_front(&v);
                m.push_front(v);
            }
            Op::PushBack(v) => {
                q.push_back(&v);
                m.push_back(v);
            }
            Op::PopFront => {
                prop_assert_eq!(q.pop_front(), m.pop_front().is_some());
            }
            Op::PopBack => {
                prop_assert_eq!(q.pop_back(), m.pop_back().is_some());
            }
            Op::Insert(i, v) => {
                let i = i.min(m.len());
                q.insert(i, &v);
                m.insert(i, v);
            }
            Op::Set(i, v) => {
                let ok = i < m.len();
                prop_assert_eq!(q.set(i, &v), ok);
                if ok {
                    m[i] = v;
                }
            }
            Op::RemoveRange(s, n) => {
                q.remove_range(s, n);
                let e = (s + n).min(m.len());
                if s < e {
                    m.drain(s..e);
                }
            }
            Op::RemoveMatching(v, c) => {
                let mut idx: Vec<usize> = m
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| **e == v)
                    .map(|(i, _)| i)
                    .collect();
                if c < 0 {
                    idx.reverse();
                }
                if c != 0 {
                    idx.truncate(c.unsigned_abs() as usize);
                }
                idx.sort_unstable();
                for &i in idx.iter().rev() {
                    m.remove(i);
                }
                prop_assert_eq!(q.remove_matching(&v, c), idx.len());
            }
        }
        q.check();
        prop_assert_eq!(q.len(), m.len());
    }
    model_eq(&q, &m);
    for (i, want) in m.iter().enumerate() {
        let got = q.get(i);
        prop_assert_eq!(got.as_deref(), Some(&want[..]));
        let mut it = q.iter_from(i);
        prop_assert_eq!(it.next(), Some(&want[..]));
        let mut it = q.iter_rev_from(i);
        prop_assert_eq!(it.next(), Some(&want[..]));
    }
    let copy = q.clone();
    prop_assert_eq!(&copy, &q);
    Ok(())
}

/// Values that LZF shrinks: runs and repeated words, with a little noise.
fn compressible() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (1usize..300, any::<u8>()).prop_map(|(n, b)| vec![b; n]),
        (0usize..40, 0u32..1000)
            .prop_map(|(n, k)| format!("item:{k}:{}", "ab".repeat(n)).into_bytes()),
        prop::sample::select(vec![b"a".to_vec(), b"b".to_vec()]),
    ]
}

fn op_with(v: BoxedStrategy<Vec<u8>>) -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => v.clone().prop_map(Op::PushFront),
        5 => v.clone().prop_map(Op::PushBack),
        2 => Just(Op::PopFront),
        2 => Just(Op::PopBack),
        3 => (0usize..400, v.clone()).prop_map(|(i, v)| Op::Insert(i, v)),
        3 => (0usize..400, v.clone()).prop_map(|(i, v)| Op::Set(i, v)),
        1 => (0usize..400, 0usize..60).prop_map(|(s, n)| Op::RemoveRange(s, n)),
        1 => (v, -3i64..3).prop_map(|(v, c)| Op::RemoveMatching(v, c)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
    #[test]
    fn model(fill in prop::sample::select(vec![-5, -2, -1, 0, 1, 2, 3, 7, 128]),
             ops in prop::collection::vec(op(), 0..300)) {
        run_model(fill, 0, ops)?;
    }

    /// Compressed lists: small nodes so there are many, depths 1..=3.
    #[test]
    fn model_compressed(fill in prop::sample::select(vec![-1, 0, 1, 2, 4, 16]),
                        depth in 1u32..=3,
                        ops in prop::collection::vec(
                            op_with(prop_oneof![3 => compressible(), 1 => value()].boxed()),
                            0..400)) {
        run_model(fill, depth, ops)?;
    }
}

#[test]
fn inner_nodes_are_compressed() {
    let elem = |i: usize| format!("element:{:06}:{}", i, "abcd".repeat(8)).into_bytes();
    for depth in 1..=3u32 {
        let mut q = QuickList::with_compress(16, depth);
        let mut m = VecDeque::new();
        for i in 0..320 {
            if i % 2 == 0 {
                q.push_back(&elem(i));
                m.push_back(elem(i));
            } else {
                q.push_front(&elem(i));
                m.push_front(elem(i));
            }
        }
        // 21 nodes (16 elements each, the first node shared by both
        // sides); all but `depth` at each end compressed.
        assert_eq!(q.node_count(), 21);
        assert_eq!(
            q.compressed_nodes(),
            21 - 2 * depth as usize,
            "depth {depth}"
        );
        model_eq(&q, &m);
        // Changes in the middle leave it compressed.
        assert!(q.set(150, b"x"));
        m[150] = b"x".to_vec();
        q.insert(100, &elem(999));
        m.insert(100, elem(999));
        q.remove_range(40, 30);
        m.drain(40..70);
        model_eq(&q, &m);
        assert!(q.compressed_nodes() >= q.node_count() - 2 * depth as usize - 1);
        assert_eq!(q.get(200).as_deref(), Some(&m[200][..]));
        // Popping down to 2 * depth nodes leaves every node raw.
        while q.node_count() > 2 * depth as usize {
            q.pop_back();
            m.pop_back();
        }
        assert_eq!(q.compressed_nodes(), 0);
        model_eq(&q, &m);
    }
    // Depth 0 never compresses; tiny or incompressible nodes stay raw.
    let mut q = QuickList::new(16);
    for i in 0..320 {
        q.push_back(&elem(i));
    }
    assert_eq!(q.compressed_nodes(), 0);
    let mut q = QuickList::with_compress(4, 1);
    for _ in 0..40 {
        q.push_back(b"ab");
    }
    assert_eq!(q.compressed_nodes(), 0, "nodes under 48 bytes");
    q.check();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut q = QuickList::with_compress(4, 1);
    for _ in 0..40 {
        let v: Vec<u8> = (0..40)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        q.push_back(&v);
    }
    assert_eq!(q.compressed_nodes(), 0, "random bytes do not compress");
    q.check();
    assert_eq!(
        QuickList::with_compress(-2, u32::MAX).compress_depth(),
        COMPRESS_MAX
    );
}

#[test]
fn compression_saves_memory() {
    let mut plain = QuickList::new(-2);
    let mut packed = QuickList::with_compress(-2, 1);
    for i in 0..100_000u32 {
        let v = format!("user:{:08}:session-active", i % 1000);
        plain.push_back(v.as_bytes());
        packed.push_back(v.as_bytes());
    }
    packed.check();
    assert!(packed.compressed_nodes() > 0);
    assert!(
        packed.heap_bytes() * 3 < plain.heap_bytes(),
        "{} vs {}",
        packed.heap_bytes(),
        plain.heap_bytes()
    );
    assert_eq!(packed, plain);
    // Reading leaves the list as it was.
    let before = packed.heap_bytes();
    assert_eq!(packed.to_vecs().len(), 100_000);
    assert_eq!(packed.position(b"user:00000999:session-active"), Some(999));
    assert_eq!(packed.heap_bytes(), before);
}

/// Front pushes and pops into large nodes use the room before the
/// entries; every other operation must see the same list as a model.
#[test]
fn front_room_keeps_the_list_exact() {
    for fill in [-2, -1, 128] {
        let mut q = QuickList::new(fill);
        let mut m: std::collections::VecDeque<Vec<u8>> = Default::default();
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        for step in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = format!("v{step}-{}", "x".repeat((x % 40) as usize)).into_bytes();
            match x % 10 {
                0..=4 => {
                    q.push_front(&v);
                    m.push_front(v);
                }
                5 | 6 => {
                    assert_eq!(q.pop_front(), m.pop_front().is_some());
                }
                7 => {
                    q.push_back(&v);
                    m.push_back(v);
                }
                8 if !m.is_empty() => {
                    let i = (x >> 8) as usize % m.len();
                    q.insert(i, &v);
                    m.insert(i, v);
                }
                _ if !m.is_empty() => {
                    let i = (x >> 8) as usize % m.len();
                    assert!(q.set(i, &v));
                    m[i] = v;
                }
                _ => {}
            }
            if step % 997 == 0 {
                q.check();
                assert_eq!(q.to_vecs(), Vec::from(m.clone()), "fill {fill} step {step}");
            }
        }
        q.check();
        model_eq(&q, &m);
        assert_eq!(q.len(), m.len());
    }
}
