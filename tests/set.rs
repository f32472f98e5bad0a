//! Sets through the real binary with several shards: multi-key commands
//! whose keys live on different shards (run atomically by the scratch
//! layer), Redis 7.2's `listpack` encoding (which the 7.0 reference server
//! of the differential scripts does not have), RESP3 shapes, and a seeded,
//! bounded property test of random set operations against a `BTreeSet`
//! model.
//!
//! Validate against Redis (the encoding test skips itself there):
//! `TESSERA_TEST_BIN=/usr/bin/redis-server cargo test --test set`.

mod common;

use std::collections::BTreeSet;

use common::{testing_real_redis, Layout, Server};

/// Shards of every Tessera started here.
const SHARDS: usize = 3;

fn server() -> Server {
    if testing_real_redis() {
        Server::tessera(&[])
    } else {
        Server::tessera(&["--shards", &SHARDS.to_string()])
    }
}

/// Tessera in `layout`: the multi-shard tests run in each of
/// [`common::LAYOUTS`] (`per_layout!`).
fn server_in(layout: Layout) -> Server {
    layout.tessera(&[])
}

fn q<T: redis::FromRedisValue>(con: &mut redis::Connection, args: &[&[u8]]) -> T {
    let mut c = redis::cmd(std::str::from_utf8(args[0]).expect("ASCII command"));
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(con)
        .unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(&args.concat())))
}

fn members(con: &mut redis::Connection, key: &str) -> BTreeSet<Vec<u8>> {
    let v: Vec<Vec<u8>> = q(con, &[b"SMEMBERS", key.as_bytes()]);
    v.into_iter().collect()
}

fn set_of(items: &[&str]) -> BTreeSet<Vec<u8>> {
    items.iter().map(|s| s.as_bytes().to_vec()).collect()
}

fn encoding(con: &mut redis::Connection, key: &str) -> String {
    q(con, &[b"OBJECT", b"ENCODING", key.as_bytes()])
}

fn multi_key_commands_across_shards(layout: Layout) {
    let srv = server_in(layout);
    let mut con = srv.conn();
    let k = common::keys_across_shards("s", 6, layout.shards);
    let (a, b, c, d, e, f) = (&k[0], &k[1], &k[2], &k[3], &k[4], &k[5]);
    let _: i64 = q(&mut con, &[b"SADD", a.as_bytes(), b"1", b"2", b"3", b"x"]);
    let _: i64 = q(&mut con, &[b"SADD", b.as_bytes(), b"2", b"3", b"4", b"x"]);
    let _: i64 = q(&mut con, &[b"SADD", c.as_bytes(), b"3", b"x", b"y"]);

    // SMOVE: the member leaves one shard and lands on another.
    let moved: i64 = q(&mut con, &[b"SMOVE", a.as_bytes(), b.as_bytes(), b"1"]);
    assert_eq!(moved, 1);
    assert_eq!(members(&mut con, a), set_of(&["2", "3", "x"]));
    assert_eq!(members(&mut con, b), set_of(&["1", "2", "3", "4", "x"]));
    let moved: i64 = q(&mut con, &[b"SMOVE", a.as_bytes(), e.as_bytes(), b"x"]);
    assert_eq!(moved, 1);
    assert_eq!(members(&mut con, e), set_of(&["x"]));
    let moved: i64 = q(&mut con, &[b"SMOVE", a.as_bytes(), b.as_bytes(), b"nope"]);
    assert_eq!(moved, 0);

    // Reads over three shards.
    let inter: Vec<Vec<u8>> = q(
        &mut con,
        &[b"SINTER", a.as_bytes(), b.as_bytes(), c.as_bytes()],
    );
    assert_eq!(inter, vec![b"3".to_vec()]);
    let union: Vec<Vec<u8>> = q(
        &mut con,
        &[b"SUNION", a.as_bytes(), b.as_bytes(), c.as_bytes()],
    );
    let union: BTreeSet<Vec<u8>> = union.into_iter().collect();
    assert_eq!(union, set_of(&["1", "2", "3", "4", "x", "y"]));
    let diff: Vec<Vec<u8>> = q(
        &mut con,
        &[b"SDIFF", b.as_bytes(), a.as_bytes(), c.as_bytes()],
    );
    let diff: BTreeSet<Vec<u8>> = diff.into_iter().collect();
    assert_eq!(diff, set_of(&["1", "4"]));
    let card: i64 = q(&mut con, &[b"SINTERCARD", b"2", a.as_bytes(), b.as_bytes()]);
    assert_eq!(card, 2);

    // *STORE into a fourth shard's key, replacing a string there.
    let _: () = q(&mut con, &[b"SET", d.as_bytes(), b"string"]);
    let n: i64 = q(
        &mut con,
        &[b"SINTERSTORE", d.as_bytes(), a.as_bytes(), b.as_bytes()],
    );
    assert_eq!(n, 2);
    assert_eq!(members(&mut con, d), set_of(&["2", "3"]));
    let n: i64 = q(
        &mut con,
        &[
            b"SUNIONSTORE",
            f.as_bytes(),
            a.as_bytes(),
            c.as_bytes(),
            e.as_bytes(),
        ],
    );
    assert_eq!(n, 4);
    assert_eq!(members(&mut con, f), set_of(&["2", "3", "x", "y"]));
    let n: i64 = q(
        &mut con,
        &[b"SDIFFSTORE", f.as_bytes(), b.as_bytes(), d.as_bytes()],
    );
    assert_eq!(n, 3);
    assert_eq!(members(&mut con, f), set_of(&["1", "4", "x"]));
    // An empty result deletes the destination.
    let n: i64 = q(
        &mut con,
        &[b"SINTERSTORE", f.as_bytes(), a.as_bytes(), b"missing{x}"],
    );
    assert_eq!(n, 0);
    let exists: i64 = q(&mut con, &[b"EXISTS", f.as_bytes()]);
    assert_eq!(exists, 0);

    // SMOVE that empties the source deletes it, on its own shard.
    let moved: i64 = q(&mut con, &[b"SMOVE", e.as_bytes(), c.as_bytes(), b"x"]);
    assert_eq!(moved, 1);
    let exists: i64 = q(&mut con, &[b"EXISTS", e.as_bytes()]);
    assert_eq!(exists, 0);

    // WATCH on one shard is broken by an SMOVE run from another shard's key
    // that adds to the watched set ...
    let mut other = srv.conn();
    let mut watched_scard = |con: &mut redis::Connection, src: &str, m: &[u8]| {
        let _: () = q(con, &[b"WATCH", b.as_bytes()]);
        let _: i64 = q(&mut other, &[b"SMOVE", src.as_bytes(), b.as_bytes(), m]);
        let _: () = q(con, &[b"MULTI"]);
        let _: () = q(con, &[b"SCARD", b.as_bytes()]);
        let r: Option<Vec<i64>> = q(con, &[b"EXEC"]);
        r
    };
    assert_eq!(watched_scard(&mut con, c, b"y"), None, "SMOVE added to it");
    // ... and not by one that changes nothing there: a missing member, or
    // one the destination already holds (Redis signals only the source).
    assert_eq!(watched_scard(&mut con, a, b"absent"), Some(vec![6]));
    assert_eq!(watched_scard(&mut con, a, b"2"), Some(vec![6]));
    assert_eq!(members(&mut con, a), set_of(&["3"]));

    // WRONGTYPE from a key on another shard.
    let err = redis::cmd("SUNION")
        .arg(a.as_str())
        .arg(k[5].as_str())
        .arg("strkey")
        .query::<Vec<Vec<u8>>>(&mut con);
    assert!(err.is_ok());
    let _: () = q(&mut con, &[b"SET", k[5].as_bytes(), b"v"]);
    let err = redis::cmd("SINTER")
        .arg(a.as_str())
        .arg(k[5].as_str())
        .query::<Vec<Vec<u8>>>(&mut con)
        .expect_err("WRONGTYPE");
    assert_eq!(err.code(), Some("WRONGTYPE"));
}

#[test]
fn listpack_encoding_as_redis_7_2() {
    if testing_real_redis() {
        eprintln!("skipped: Redis 7.0 has no listpack sets");
        return;
    }
    let srv = server();
    let mut con = srv.conn();
    let sadd = |con: &mut redis::Connection, key: &str, items: &[String]| -> i64 {
        let mut c = redis::cmd("SADD");
        c.arg(key);
        for i in items {
            c.arg(i.as_str());
        }
        c.query(con).expect("SADD")
    };
    let strs = |n: usize| (0..n).map(|i| format!("m{i}")).collect::<Vec<_>>();
    let ints = |n: usize| (0..n).map(|i| i.to_string()).collect::<Vec<_>>();

    // Small non-integer sets are listpacks up to 128 members.
    sadd(&mut con, "lp", &strs(128));
    assert_eq!(encoding(&mut con, "lp"), "listpack");
    sadd(&mut con, "lp", &["m128".to_string()]);
    assert_eq!(encoding(&mut con, "lp"), "hashtable");
    // One argument list over the limit goes straight to a hashtable.
    sadd(&mut con, "lp2", &strs(129));
    assert_eq!(encoding(&mut con, "lp2"), "hashtable");
    // A member over set-max-listpack-value.
    sadd(&mut con, "lp3", &["a".to_string()]);
    assert_eq!(encoding(&mut con, "lp3"), "listpack");
    sadd(&mut con, "lp3", &["x".repeat(65)]);
    assert_eq!(encoding(&mut con, "lp3"), "hashtable");
    sadd(&mut con, "lp4", &["x".repeat(64)]);
    assert_eq!(encoding(&mut con, "lp4"), "listpack");

    // intset -> listpack when a string joins a small intset; -> hashtable
    // when it joins a big one.
    sadd(&mut con, "is", &ints(10));
    assert_eq!(encoding(&mut con, "is"), "intset");
    sadd(&mut con, "is", &["a".to_string()]);
    assert_eq!(encoding(&mut con, "is"), "listpack");
    assert_eq!(members(&mut con, "is").len(), 11);
    sadd(&mut con, "is2", &ints(200));
    sadd(&mut con, "is2", &["a".to_string()]);
    assert_eq!(encoding(&mut con, "is2"), "hashtable");
    // Listpack order is insertion order.
    sadd(&mut con, "ord", &["c".into(), "a".into(), "b".into()]);
    let v: Vec<String> = q(&mut con, &[b"SMEMBERS", b"ord"]);
    assert_eq!(v, ["c", "a", "b"]);
    let v: (String, Vec<String>) = q(&mut con, &[b"SSCAN", b"ord", b"0", b"COUNT", b"1"]);
    assert_eq!(
        v,
        ("0".to_string(), vec!["c".into(), "a".into(), "b".into()])
    );

    // Thresholds follow CONFIG SET.
    let _: () = q(
        &mut con,
        &[b"CONFIG", b"SET", b"set-max-listpack-entries", b"2"],
    );
    sadd(&mut con, "c1", &["a".into(), "b".into()]);
    assert_eq!(encoding(&mut con, "c1"), "listpack");
    sadd(&mut con, "c1", &["c".into()]);
    assert_eq!(encoding(&mut con, "c1"), "hashtable");
    let _: () = q(
        &mut con,
        &[b"CONFIG", b"SET", b"set-max-listpack-value", b"3"],
    );
    sadd(&mut con, "c2", &["abc".into()]);
    assert_eq!(encoding(&mut con, "c2"), "listpack");
    sadd(&mut con, "c2", &["abcd".into()]);
    assert_eq!(encoding(&mut con, "c2"), "hashtable");
    let _: () = q(
        &mut con,
        &[b"CONFIG", b"SET", b"set-max-listpack-entries", b"128"],
    );
    let _: () = q(
        &mut con,
        &[b"CONFIG", b"SET", b"set-max-listpack-value", b"64"],
    );
    // set-max-intset-entries 0: a one-integer set starts as a listpack
    // (7.2's size hint), where 7.0 reports hashtable.
    let _: () = q(
        &mut con,
        &[b"CONFIG", b"SET", b"set-max-intset-entries", b"0"],
    );
    sadd(&mut con, "z", &["1".into()]);
    assert_eq!(encoding(&mut con, "z"), "listpack");
    let _: () = q(
        &mut con,
        &[b"CONFIG", b"SET", b"set-max-intset-entries", b"512"],
    );

    // SINTERSTORE: from a listpack, an all-integer result becomes an intset;
    // a string result stays a listpack. SUNIONSTORE of strings: listpack.
    sadd(
        &mut con,
        "a",
        &["1".into(), "2".into(), "x".into(), "y".into()],
    );
    sadd(
        &mut con,
        "b",
        &["1".into(), "2".into(), "x".into(), "z".into()],
    );
    let _: i64 = q(&mut con, &[b"SINTERSTORE", b"r1", b"a", b"b"]);
    assert_eq!(encoding(&mut con, "r1"), "listpack");
    let _: i64 = q(&mut con, &[b"SREM", b"b", b"x"]);
    let _: i64 = q(&mut con, &[b"SINTERSTORE", b"r2", b"a", b"b"]);
    assert_eq!(encoding(&mut con, "r2"), "intset");
    let _: i64 = q(&mut con, &[b"SUNIONSTORE", b"r3", b"a", b"b"]);
    assert_eq!(encoding(&mut con, "r3"), "listpack");
    // SINTERSTORE from a hashtable with integer strings: intset.
    let mut big = ints(300);
    big.push("s".into());
    sadd(&mut con, "h1", &big);
    sadd(&mut con, "h2", &big);
    assert_eq!(encoding(&mut con, "h1"), "hashtable");
    let _: i64 = q(&mut con, &[b"SREM", b"h2", b"s"]);
    let n: i64 = q(&mut con, &[b"SINTERSTORE", b"r4", b"h1", b"h2"]);
    assert_eq!(n, 300);
    assert_eq!(encoding(&mut con, "r4"), "intset");
    // SPOP of most of a big hashtable leaves a listpack behind (Redis's
    // "keep the rest in a new set" strategy).
    sadd(&mut con, "sp", &strs(300));
    let popped: Vec<String> = q(&mut con, &[b"SPOP", b"sp", b"290"]);
    assert_eq!(popped.len(), 290);
    assert_eq!(encoding(&mut con, "sp"), "listpack");
    assert_eq!(members(&mut con, "sp").len(), 10);
    // A removal never converts back.
    let _: i64 = q(&mut con, &[b"SREM", b"is", b"a"]);
    assert_eq!(encoding(&mut con, "is"), "listpack");
}

#[test]
fn resp3_shapes() {
    let srv = server();
    let mut raw = srv.raw();
    raw.cmd_str(&["HELLO", "3"]);
    raw.cmd_str(&["SADD", "s", "1", "2"]);
    assert_eq!(
        raw.cmd_str(&["SMEMBERS", "s"]),
        b"~2\r\n$1\r\n1\r\n$1\r\n2\r\n"
    );
    assert_eq!(
        raw.cmd_str(&["SRANDMEMBER", "s", "5"]),
        b"*2\r\n$1\r\n1\r\n$1\r\n2\r\n"
    );
    assert_eq!(raw.cmd_str(&["SPOP", "s", "0"]), b"~0\r\n");
    assert_eq!(raw.cmd_str(&["SINTER", "s", "nokey"]), b"~0\r\n");
    assert_eq!(
        raw.cmd_str(&["SPOP", "s", "5"]),
        b"~2\r\n$1\r\n1\r\n$1\r\n2\r\n"
    );
    assert_eq!(raw.cmd_str(&["SPOP", "s"]), b"_\r\n");
}

/// A small deterministic PRNG (xorshift64*).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A member from a pool that mixes small and wide integers, near-integers,
/// short and long strings, so the sets cross every encoding.
fn member(rng: &mut Rng) -> Vec<u8> {
    match rng.below(6) {
        0 | 1 => (rng.below(40) as i64 - 10).to_string().into_bytes(),
        2 => (1_i64 << 40)
            .wrapping_add(rng.below(5) as i64)
            .to_string()
            .into_bytes(),
        3 => format!("m{}", rng.below(30)).into_bytes(),
        4 => format!("0{}", rng.below(5)).into_bytes(),
        _ => format!("{}{}", "L".repeat(70), rng.below(5)).into_bytes(),
    }
}

/// Random set commands on keys spread over every shard, checked against a
/// `BTreeSet` model after each step. Seeded and bounded (a fixed number of
/// operations); small encoding thresholds make conversions frequent.
fn random_operations_agree_with_a_model(layout: Layout) {
    const KEYS: usize = 5;
    const OPS: usize = 3000;
    let srv = server_in(layout);
    let mut con = srv.conn();
    let _: () = q(
        &mut con,
        &[b"CONFIG", b"SET", b"set-max-intset-entries", b"6"],
    );
    if !testing_real_redis() {
        // Redis 7.0 has no such directive (no listpack sets).
        let _: () = q(
            &mut con,
            &[b"CONFIG", b"SET", b"set-max-listpack-entries", b"8"],
        );
    }
    let keys = common::keys_across_shards("p", KEYS, layout.shards);
    let mut model: Vec<BTreeSet<Vec<u8>>> = vec![BTreeSet::new(); KEYS];
    let mut rng = Rng::new(2024);
    for step in 0..OPS {
        let i = rng.below(KEYS);
        let j = rng.below(KEYS);
        let key = keys[i].as_bytes();
        let ctx = |what: &str| format!("step {step}: {what}");
        match rng.below(12) {
            0..=2 => {
                let ms: Vec<Vec<u8>> = (0..1 + rng.below(4)).map(|_| member(&mut rng)).collect();
                let mut args: Vec<&[u8]> = vec![b"SADD", key];
                args.extend(ms.iter().map(|m| m.as_slice()));
                let n: usize = q(&mut con, &args);
                let want = ms.iter().filter(|m| model[i].insert(m.to_vec())).count();
                assert_eq!(n, want, "{}", ctx("SADD"));
            }
            3 => {
                let m = member(&mut rng);
                let n: usize = q(&mut con, &[b"SREM", key, &m]);
                assert_eq!(n, usize::from(model[i].remove(&m)), "{}", ctx("SREM"));
            }
            4 => {
                let m = member(&mut rng);
                let n: usize = q(&mut con, &[b"SISMEMBER", key, &m]);
                assert_eq!(
                    n,
                    usize::from(model[i].contains(&m)),
                    "{}",
                    ctx("SISMEMBER")
                );
                let v: Vec<usize> = q(&mut con, &[b"SMISMEMBER", key, &m, b"m1"]);
                let want = vec![
                    usize::from(model[i].contains(&m)),
                    usize::from(model[i].contains(b"m1".as_slice())),
                ];
                assert_eq!(v, want, "{}", ctx("SMISMEMBER"));
            }
            5 => {
                let count = rng.below(4);
                let v: Vec<Vec<u8>> = q(&mut con, &[b"SPOP", key, count.to_string().as_bytes()]);
                assert_eq!(v.len(), count.min(model[i].len()), "{}", ctx("SPOP n"));
                for m in v {
                    assert!(model[i].remove(&m), "{}", ctx("SPOP popped a non-member"));
                }
            }
            6 => {
                let count = rng.below(10) as i64 - 5;
                let v: Vec<Vec<u8>> = q(
                    &mut con,
                    &[b"SRANDMEMBER", key, count.to_string().as_bytes()],
                );
                let want = if count < 0 {
                    if model[i].is_empty() {
                        0
                    } else {
                        count.unsigned_abs() as usize
                    }
                } else {
                    (count as usize).min(model[i].len())
                };
                assert_eq!(v.len(), want, "{}", ctx("SRANDMEMBER"));
                assert!(
                    v.iter().all(|m| model[i].contains(m)),
                    "{}",
                    ctx("SRANDMEMBER")
                );
                if count > 0 {
                    let uniq: BTreeSet<&Vec<u8>> = v.iter().collect();
                    assert_eq!(uniq.len(), v.len(), "{}", ctx("SRANDMEMBER distinct"));
                }
            }
            7 => {
                let m = if rng.below(2) == 0 {
                    model[i]
                        .iter()
                        .next()
                        .cloned()
                        .unwrap_or_else(|| member(&mut rng))
                } else {
                    member(&mut rng)
                };
                let n: usize = q(&mut con, &[b"SMOVE", key, keys[j].as_bytes(), &m]);
                let want = model[i].contains(&m);
                assert_eq!(n, usize::from(want), "{}", ctx("SMOVE"));
                if want && i != j {
                    model[i].remove(&m);
                    model[j].insert(m);
                }
            }
            8 => {
                let k = rng.below(KEYS);
                let args: [&[u8]; 4] = [b"SINTER", key, keys[j].as_bytes(), keys[k].as_bytes()];
                let v: Vec<Vec<u8>> = q(&mut con, &args);
                let want: BTreeSet<Vec<u8>> = model[i]
                    .iter()
                    .filter(|m| model[j].contains(*m) && model[k].contains(*m))
                    .cloned()
                    .collect();
                assert_eq!(v.len(), want.len(), "{}", ctx("SINTER dup"));
                assert_eq!(
                    v.into_iter().collect::<BTreeSet<_>>(),
                    want,
                    "{}",
                    ctx("SINTER")
                );
                let n: usize = q(
                    &mut con,
                    &[
                        b"SINTERCARD",
                        b"3",
                        key,
                        keys[j].as_bytes(),
                        keys[k].as_bytes(),
                        b"LIMIT",
                        b"3",
                    ],
                );
                assert_eq!(n, want.len().min(3), "{}", ctx("SINTERCARD"));
            }
            9 => {
                let dst = rng.below(KEYS);
                let op: &[u8] =
                    [b"SUNIONSTORE".as_slice(), b"SDIFFSTORE", b"SINTERSTORE"][rng.below(3)];
                let n: usize = q(
                    &mut con,
                    &[op, keys[dst].as_bytes(), key, keys[j].as_bytes()],
                );
                let (a, b) = (&model[i], &model[j]);
                let res: BTreeSet<Vec<u8>> = match op {
                    b"SUNIONSTORE" => a.union(b).cloned().collect(),
                    b"SDIFFSTORE" => a.difference(b).cloned().collect(),
                    _ => a.intersection(b).cloned().collect(),
                };
                assert_eq!(n, res.len(), "{}", ctx("*STORE"));
                model[dst] = res;
            }
            10 => {
                let v: Vec<Vec<u8>> = q(&mut con, &[b"SUNION", key, keys[j].as_bytes()]);
                let want: BTreeSet<Vec<u8>> = model[i].union(&model[j]).cloned().collect();
                assert_eq!(v.len(), want.len(), "{}", ctx("SUNION dup"));
                assert_eq!(
                    v.into_iter().collect::<BTreeSet<_>>(),
                    want,
                    "{}",
                    ctx("SUNION")
                );
                let v: Vec<Vec<u8>> = q(&mut con, &[b"SDIFF", key, keys[j].as_bytes()]);
                let want: BTreeSet<Vec<u8>> = model[i].difference(&model[j]).cloned().collect();
                assert_eq!(
                    v.into_iter().collect::<BTreeSet<_>>(),
                    want,
                    "{}",
                    ctx("SDIFF")
                );
            }
            _ => {
                // A full SSCAN returns every member (maybe more than once).
                let mut cursor = "0".to_string();
                let mut seen = BTreeSet::new();
                for _ in 0..10_000 {
                    let (next, page): (String, Vec<Vec<u8>>) = q(
                        &mut con,
                        &[b"SSCAN", key, cursor.as_bytes(), b"COUNT", b"2"],
                    );
                    seen.extend(page);
                    cursor = next;
                    if cursor == "0" {
                        break;
                    }
                }
                assert_eq!(cursor, "0", "{}", ctx("SSCAN ends"));
                assert_eq!(seen, model[i], "{}", ctx("SSCAN"));
            }
        }
        let card: usize = q(&mut con, &[b"SCARD", key]);
        assert_eq!(card, model[i].len(), "{}", ctx("SCARD"));
        if step % 50 == 0 {
            for (k, m) in keys.iter().zip(&model) {
                assert_eq!(&members(&mut con, k), m, "{}", ctx("SMEMBERS"));
                let exists: usize = q(&mut con, &[b"EXISTS", k.as_bytes()]);
                assert_eq!(
                    exists,
                    usize::from(!m.is_empty()),
                    "{}",
                    ctx("empty sets are deleted")
                );
            }
        }
    }
}

per_layout!(
    multi_key_commands_across_shards,
    random_operations_agree_with_a_model,
);
