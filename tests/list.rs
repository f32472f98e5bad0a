//! Lists through the real binary with several shards: the multi-key list
//! commands (LMOVE, RPOPLPUSH, LMPOP, BLPOP, BLMOVE) on keys that live on
//! different shards, a large list, and a seeded random walk of list
//! commands checked against a `VecDeque` model.
//!
//! [`random_commands_match_redis_bytes`] sends the same random list
//! commands (valid and not: bad numbers, bad options, wrong types, wrong
//! arity) to Tessera and to a real `redis-server` and compares the reply
//! bytes.
//!
//! Every test runs in each layout of [`common::LAYOUTS`] (2 and 16 shards,
//! consolidated and not; `per_layout!`).
//!
//! Validate against Redis (everything must pass there too):
//! `TESSERA_TEST_BIN=/usr/bin/redis-server cargo test --test list`
//! (Redis gets no `--shards`).

mod common;

use std::collections::VecDeque;

use common::{escape, redis_available, Layout, RawConn, Server};
use redis::{Commands, Connection, RedisResult, Value};

/// Tessera in `layout` (every test runs in each of [`common::LAYOUTS`]).
fn start(layout: Layout) -> Server {
    layout.tessera(&[])
}

fn range(c: &mut Connection, k: &str) -> Vec<String> {
    c.lrange(k, 0, -1).unwrap()
}

fn cmd(c: &mut Connection, args: &[&str]) -> RedisResult<Value> {
    let mut q = redis::cmd(args[0]);
    for a in &args[1..] {
        q.arg(*a);
    }
    q.query(c)
}

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

fn lmove_between_shards(layout: Layout) {
    let s = start(layout);
    let mut c = s.conn();
    let k = common::keys_across_shards("mv", 3, layout.shards);
    let (src, dst, other) = (&k[0], &k[1], &k[2]);
    let _: () = c.rpush(src, &["a", "b", "c"]).unwrap();
    assert_eq!(
        cmd(&mut c, &["LMOVE", src, dst, "LEFT", "RIGHT"]).unwrap(),
        bulk("a")
    );
    assert_eq!(
        cmd(&mut c, &["LMOVE", src, dst, "RIGHT", "LEFT"]).unwrap(),
        bulk("c")
    );
    assert_eq!(range(&mut c, src), ["b"]);
    assert_eq!(range(&mut c, dst), ["c", "a"]);
    // The last element moves: the source is deleted on its shard.
    assert_eq!(cmd(&mut c, &["RPOPLPUSH", src, dst]).unwrap(), bulk("b"));
    assert!(!c.exists::<_, bool>(src).unwrap());
    assert_eq!(range(&mut c, dst), ["b", "c", "a"]);
    // A missing source: null, nothing created.
    assert_eq!(
        cmd(&mut c, &["LMOVE", src, other, "LEFT", "LEFT"]).unwrap(),
        Value::Nil
    );
    assert!(!c.exists::<_, bool>(other).unwrap());
    // WRONGTYPE destination on another shard: nothing moves.
    let _: () = c.set(other, "str").unwrap();
    let e = cmd(&mut c, &["LMOVE", dst, other, "LEFT", "LEFT"]).unwrap_err();
    assert_eq!(e.code(), Some("WRONGTYPE"));
    assert_eq!(range(&mut c, dst), ["b", "c", "a"]);
    // BLMOVE / BRPOPLPUSH with a non-empty source serve at once.
    let _: () = c.del(other).unwrap();
    assert_eq!(
        cmd(&mut c, &["BLMOVE", dst, other, "RIGHT", "RIGHT", "0"]).unwrap(),
        bulk("a")
    );
    assert_eq!(
        cmd(&mut c, &["BRPOPLPUSH", dst, other, "0"]).unwrap(),
        bulk("c")
    );
    assert_eq!(range(&mut c, other), ["c", "a"]);
    assert_eq!(range(&mut c, dst), ["b"]);
    // Rotation in place.
    assert_eq!(
        cmd(&mut c, &["LMOVE", other, other, "LEFT", "RIGHT"]).unwrap(),
        bulk("c")
    );
    assert_eq!(range(&mut c, other), ["a", "c"]);
}

fn lmpop_and_blpop_over_shards(layout: Layout) {
    let s = start(layout);
    let mut c = s.conn();
    let k = common::keys_across_shards("mp", 3, layout.shards);
    let _: () = c.rpush(&k[1], &["1", "2", "3"]).unwrap();
    let _: () = c.rpush(&k[2], &["x", "y"]).unwrap();
    let r = cmd(
        &mut c,
        &["LMPOP", "3", &k[0], &k[1], &k[2], "LEFT", "COUNT", "2"],
    )
    .unwrap();
    assert_eq!(
        r,
        Value::Array(vec![bulk(&k[1]), Value::Array(vec![bulk("1"), bulk("2")])])
    );
    let r = cmd(
        &mut c,
        &["LMPOP", "3", &k[0], &k[1], &k[2], "RIGHT", "COUNT", "9"],
    )
    .unwrap();
    assert_eq!(
        r,
        Value::Array(vec![bulk(&k[1]), Value::Array(vec![bulk("3")])])
    );
    assert!(!c.exists::<_, bool>(&k[1]).unwrap());
    let r = cmd(&mut c, &["BLPOP", &k[0], &k[1], &k[2], "0"]).unwrap();
    assert_eq!(r, Value::Array(vec![bulk(&k[2]), bulk("x")]));
    let r = cmd(&mut c, &["BLMPOP", "0", "3", &k[0], &k[1], &k[2], "RIGHT"]).unwrap();
    assert_eq!(
        r,
        Value::Array(vec![bulk(&k[2]), Value::Array(vec![bulk("y")])])
    );
    assert_eq!(
        cmd(&mut c, &["LMPOP", "3", &k[0], &k[1], &k[2], "LEFT"]).unwrap(),
        Value::Nil
    );
    // A non-list before the first non-empty list: WRONGTYPE, nothing popped.
    let _: () = c.set(&k[0], "s").unwrap();
    let _: () = c.rpush(&k[2], "z").unwrap();
    let e = cmd(&mut c, &["LMPOP", "2", &k[0], &k[2], "LEFT"]).unwrap_err();
    assert_eq!(e.code(), Some("WRONGTYPE"));
    let e = cmd(&mut c, &["BRPOP", &k[0], &k[2], "0"]).unwrap_err();
    assert_eq!(e.code(), Some("WRONGTYPE"));
    assert_eq!(range(&mut c, &k[2]), ["z"]);
    // ... and after it, the list is served.
    let r = cmd(&mut c, &["BRPOP", &k[2], &k[0], "0"]).unwrap();
    assert_eq!(r, Value::Array(vec![bulk(&k[2]), bulk("z")]));
    // Inside MULTI, nothing to serve: the timeout reply at once.
    let r: Value = redis::pipe()
        .atomic()
        .cmd("BLPOP")
        .arg(&k[1])
        .arg(&k[2])
        .arg(0)
        .cmd("BLMOVE")
        .arg(&k[1])
        .arg(&k[2])
        .arg("LEFT")
        .arg("LEFT")
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!(r, Value::Array(vec![Value::Nil, Value::Nil]));
}

fn large_list(layout: Layout) {
    let s = start(layout);
    let mut c = s.conn();
    const N: usize = 200_000;
    const BATCH: usize = 1000;
    for b in 0..N / BATCH {
        let vals: Vec<String> = (b * BATCH..(b + 1) * BATCH)
            .map(|i| i.to_string())
            .collect();
        let _: () = c.rpush("big", &vals).unwrap();
    }
    assert_eq!(c.llen::<_, usize>("big").unwrap(), N);
    let all: Vec<String> = c.lrange("big", 0, -1).unwrap();
    assert_eq!(all.len(), N);
    assert!(all.iter().enumerate().all(|(i, v)| *v == i.to_string()));
    let mid = N as isize / 2;
    assert_eq!(c.lindex::<_, String>("big", mid).unwrap(), mid.to_string());
    let _: () = c.lset("big", mid, "middle").unwrap();
    let _: () = redis::cmd("LINSERT")
        .arg("big")
        .arg("AFTER")
        .arg("middle")
        .arg("after-middle")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        c.lrange::<_, Vec<String>>("big", mid - 1, mid + 2).unwrap(),
        [
            (mid - 1).to_string(),
            "middle".into(),
            "after-middle".into(),
            (mid + 1).to_string()
        ]
    );
    assert_eq!(c.lrem::<_, _, usize>("big", -1, "after-middle").unwrap(), 1);
    let _: () = c.ltrim("big", 1000, -1001).unwrap();
    assert_eq!(c.llen::<_, usize>("big").unwrap(), N - 2000);
    assert_eq!(c.lindex::<_, String>("big", 0).unwrap(), "1000");
    let e: String = c.lindex("big", -1).unwrap();
    assert_eq!(e, (N - 1001).to_string());
    let enc: String = redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg("big")
        .query(&mut c)
        .unwrap();
    assert_eq!(enc, "quicklist");
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
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// An index in `-(len+2) ..= len+1`, out of range at times.
    fn index(&mut self, len: usize) -> i64 {
        let span = 2 * len as i64 + 5;
        self.below(span as u64) as i64 - (len as i64 + 2)
    }
}

/// A value: mostly from a small alphabet (so LREM, LPOS and LINSERT find
/// matches), sometimes long (so nodes fill and split).
fn value(r: &mut Rng) -> String {
    match r.below(10) {
        0 => "v".repeat(100 + r.below(900) as usize),
        1 => String::new(),
        _ => ["a", "b", "c", "d"][r.below(4) as usize].to_string(),
    }
}

fn norm(len: usize, i: i64) -> Option<usize> {
    let i = if i < 0 { i + len as i64 } else { i };
    (0..len as i64).contains(&i).then_some(i as usize)
}

/// Redis's LRANGE/LTRIM range on a list of `len`: (start, count).
fn clamp(len: usize, s: i64, e: i64) -> (usize, usize) {
    let l = len as i64;
    let s = if s < 0 { (s + l).max(0) } else { s };
    let e = if e < 0 { e + l } else { e };
    if s > e || s >= l {
        return (0, 0);
    }
    let e = e.min(l - 1);
    (s as usize, (e - s + 1) as usize)
}

fn random_operations_match_a_model(layout: Layout) {
    const OPS: usize = 4000;
    const SEEDS: [u64; 3] = [1, 7, 2024];
    let s = start(layout);
    let mut c = s.conn();
    for (round, seed) in SEEDS.into_iter().enumerate() {
        // Small nodes so a few hundred elements already span many nodes.
        let fill = ["3", "-1", "1"][round];
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("list-max-listpack-size")
            .arg(fill)
            .query(&mut c)
            .unwrap();
        let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
        let keys = common::keys_across_shards(&format!("r{seed}."), 3, layout.shards);
        let mut model: Vec<VecDeque<String>> = vec![VecDeque::new(); keys.len()];
        let mut r = Rng::new(seed);
        for step in 0..OPS {
            let ki = r.below(keys.len() as u64) as usize;
            let key = keys[ki].as_str();
            let ctx = format!("seed {seed} step {step} key {key}");
            let m = &mut model[ki];
            match r.below(14) {
                0 | 1 => {
                    let n = 1 + r.below(4) as usize;
                    let vals: Vec<String> = (0..n).map(|_| value(&mut r)).collect();
                    let left = r.below(2) == 0;
                    let got: usize = if left {
                        c.lpush(key, &vals)
                    } else {
                        c.rpush(key, &vals)
                    }
                    .unwrap();
                    for v in vals {
                        if left {
                            m.push_front(v);
                        } else {
                            m.push_back(v);
                        }
                    }
                    assert_eq!(got, m.len(), "{ctx}");
                }
                2 => {
                    let left = r.below(2) == 0;
                    let n = r.below(5) as usize;
                    let got: Option<Vec<String>> = redis::cmd(if left { "LPOP" } else { "RPOP" })
                        .arg(key)
                        .arg(n)
                        .query(&mut c)
                        .unwrap();
                    let want = if m.is_empty() {
                        None
                    } else {
                        let k = n.min(m.len());
                        Some(
                            (0..k)
                                .map(|_| if left { m.pop_front() } else { m.pop_back() }.unwrap())
                                .collect(),
                        )
                    };
                    assert_eq!(got, want, "{ctx}");
                }
                3 => {
                    let i = r.index(m.len());
                    let got: Option<String> = c.lindex(key, i as isize).unwrap();
                    assert_eq!(got, norm(m.len(), i).map(|i| m[i].clone()), "{ctx}");
                }
                4 => {
                    let i = r.index(m.len());
                    let v = value(&mut r);
                    let got: RedisResult<()> = c.lset(key, i as isize, &v);
                    match (m.is_empty(), norm(m.len(), i)) {
                        (true, _) => assert!(got.is_err(), "{ctx}"),
                        (false, None) => assert!(got.is_err(), "{ctx}"),
                        (false, Some(i)) => {
                            got.unwrap();
                            m[i] = v;
                        }
                    }
                }
                5 => {
                    let pivot = value(&mut r);
                    let v = value(&mut r);
                    let after = r.below(2) == 0;
                    let got: i64 = redis::cmd("LINSERT")
                        .arg(key)
                        .arg(if after { "AFTER" } else { "BEFORE" })
                        .arg(&pivot)
                        .arg(&v)
                        .query(&mut c)
                        .unwrap();
                    let want = if m.is_empty() {
                        0
                    } else if let Some(p) = m.iter().position(|e| *e == pivot) {
                        m.insert(p + usize::from(after), v);
                        m.len() as i64
                    } else {
                        -1
                    };
                    assert_eq!(got, want, "{ctx}");
                }
                6 => {
                    let count = r.below(7) as i64 - 3;
                    let v = value(&mut r);
                    let got: usize = c.lrem(key, count as isize, &v).unwrap();
                    let mut idx: Vec<usize> = (0..m.len()).filter(|&i| m[i] == v).collect();
                    if count < 0 {
                        idx.reverse();
                    }
                    if count != 0 {
                        idx.truncate(count.unsigned_abs() as usize);
                    }
                    idx.sort_unstable();
                    for &i in idx.iter().rev() {
                        m.remove(i);
                    }
                    assert_eq!(got, idx.len(), "{ctx}");
                }
                7 => {
                    // Mostly mild trims, so lists keep growing.
                    let (s0, e0) = if r.below(4) == 0 {
                        (r.index(m.len()), r.index(m.len()))
                    } else {
                        (r.below(3) as i64, -1 - r.below(3) as i64)
                    };
                    let _: () = c.ltrim(key, s0 as isize, e0 as isize).unwrap();
                    let (s, n) = clamp(m.len(), s0, e0);
                    *m = m.iter().skip(s).take(n).cloned().collect();
                }
                8 => {
                    let (s0, e0) = (r.index(m.len()), r.index(m.len()));
                    let got: Vec<String> = c.lrange(key, s0 as isize, e0 as isize).unwrap();
                    let (s, n) = clamp(m.len(), s0, e0);
                    let want: Vec<String> = m.iter().skip(s).take(n).cloned().collect();
                    assert_eq!(got, want, "{ctx}");
                }
                9 => {
                    let v = value(&mut r);
                    let rank = [1i64, 2, -1, -2][r.below(4) as usize];
                    let got: Vec<usize> = redis::cmd("LPOS")
                        .arg(key)
                        .arg(&v)
                        .arg("RANK")
                        .arg(rank)
                        .arg("COUNT")
                        .arg(0)
                        .query(&mut c)
                        .unwrap();
                    let mut hits: Vec<usize> = (0..m.len()).filter(|&i| m[i] == v).collect();
                    if rank < 0 {
                        hits.reverse();
                    }
                    let want: Vec<usize> = hits
                        .into_iter()
                        .skip(rank.unsigned_abs() as usize - 1)
                        .collect();
                    assert_eq!(got, want, "{ctx}");
                }
                10 | 11 => {
                    let di = r.below(keys.len() as u64) as usize;
                    let (from_left, to_left) = (r.below(2) == 0, r.below(2) == 0);
                    let got: Option<String> = redis::cmd("LMOVE")
                        .arg(key)
                        .arg(&keys[di])
                        .arg(if from_left { "LEFT" } else { "RIGHT" })
                        .arg(if to_left { "LEFT" } else { "RIGHT" })
                        .query(&mut c)
                        .unwrap();
                    let v = if from_left {
                        model[ki].pop_front()
                    } else {
                        model[ki].pop_back()
                    };
                    if let Some(v) = &v {
                        if to_left {
                            model[di].push_front(v.clone());
                        } else {
                            model[di].push_back(v.clone());
                        }
                    }
                    assert_eq!(got, v, "{ctx} -> {}", keys[di]);
                }
                12 => {
                    let got: Value = redis::cmd("LMPOP")
                        .arg(keys.len())
                        .arg(&keys)
                        .arg("LEFT")
                        .arg("COUNT")
                        .arg(3)
                        .query(&mut c)
                        .unwrap();
                    let want = match model.iter().position(|l| !l.is_empty()) {
                        None => Value::Nil,
                        Some(j) => {
                            let k = model[j].len().min(3);
                            let popped: Vec<Value> =
                                model[j].drain(..k).map(|v| bulk(&v)).collect();
                            Value::Array(vec![bulk(&keys[j]), Value::Array(popped)])
                        }
                    };
                    assert_eq!(got, want, "{ctx}");
                }
                _ => {
                    let got: usize = c.llen(key).unwrap();
                    assert_eq!(got, m.len(), "{ctx}");
                    let exists: bool = c.exists(key).unwrap();
                    assert_eq!(exists, !m.is_empty(), "{ctx}");
                }
            }
        }
        for (k, m) in keys.iter().zip(&model) {
            let want: Vec<String> = m.iter().cloned().collect();
            assert_eq!(range(&mut c, k), want, "seed {seed} final {k}");
        }
    }
}

/// A random integer argument: mostly small, sometimes at the edges of
/// `long` or not a number at all.
fn int_arg(r: &mut Rng) -> String {
    match r.below(20) {
        0 => "x".into(),
        1 => "9223372036854775807".into(),
        2 => "-9223372036854775808".into(),
        3 => "1.5".into(),
        4 => "9223372036854775808".into(),
        _ => (r.below(16) as i64 - 6).to_string(),
    }
}

fn end_arg(r: &mut Rng) -> String {
    let choices = if r.below(10) == 0 { 5 } else { 4 };
    ["LEFT", "RIGHT", "left", "Right", "up"][r.below(choices) as usize].into()
}

/// One random list command over `keys` (the last holds a string).
fn random_command(r: &mut Rng, keys: &[String]) -> Vec<String> {
    let key = |r: &mut Rng| keys[r.below(keys.len() as u64) as usize].clone();
    let val = |r: &mut Rng| value(r);
    let mut c: Vec<String> = match r.below(22) {
        0 | 1 => {
            let name = ["LPUSH", "RPUSH", "LPUSHX", "RPUSHX"][r.below(4) as usize];
            let mut c = vec![name.to_string(), key(r)];
            for _ in 0..1 + r.below(4) {
                c.push(val(r));
            }
            c
        }
        2 | 3 => {
            let mut c = vec![["LPOP", "RPOP"][r.below(2) as usize].to_string(), key(r)];
            if r.below(2) == 0 {
                c.push(int_arg(r));
            }
            c
        }
        4 => vec!["LLEN".into(), key(r)],
        5 | 6 => vec!["LRANGE".into(), key(r), int_arg(r), int_arg(r)],
        7 => vec!["LINDEX".into(), key(r), int_arg(r)],
        8 => vec!["LSET".into(), key(r), int_arg(r), val(r)],
        9 => {
            let w = ["BEFORE", "after", "AFTER", "middle"][r.below(4) as usize];
            vec!["LINSERT".into(), key(r), w.into(), val(r), val(r)]
        }
        10 => vec!["LREM".into(), key(r), int_arg(r), val(r)],
        11 => vec!["LTRIM".into(), key(r), int_arg(r), int_arg(r)],
        12 | 13 => {
            let mut c = vec!["LPOS".into(), key(r), val(r)];
            for _ in 0..r.below(4) {
                let o = ["RANK", "COUNT", "MAXLEN", "rank", "bogus"][r.below(5) as usize];
                c.push(o.into());
                if r.below(12) != 0 {
                    c.push(int_arg(r));
                }
            }
            c
        }
        14 | 15 => vec!["LMOVE".into(), key(r), key(r), end_arg(r), end_arg(r)],
        16 => vec!["RPOPLPUSH".into(), key(r), key(r)],
        17 | 18 => {
            let n = r.below(keys.len() as u64 + 1);
            let shown = if r.below(10) == 0 {
                int_arg(r)
            } else {
                n.to_string()
            };
            let mut c = vec!["LMPOP".into(), shown];
            for _ in 0..n {
                c.push(key(r));
            }
            c.push(end_arg(r));
            if r.below(2) == 0 {
                c.push("COUNT".into());
                c.push(int_arg(r));
            }
            c
        }
        // Blocking forms: a short timeout, so an empty key costs Redis a
        // few milliseconds and a blocking Tessera the same.
        19 => {
            let name = ["BLPOP", "BRPOP"][r.below(2) as usize];
            let mut c = vec![name.to_string(), key(r), key(r)];
            c.push(["0.01", "-1", "x"][r.below(3) as usize].into());
            c
        }
        20 => {
            let t = ["0.01", "-1", "x"][r.below(3) as usize].to_string();
            if r.below(2) == 0 {
                vec!["BLMOVE".into(), key(r), key(r), end_arg(r), end_arg(r), t]
            } else {
                vec!["BRPOPLPUSH".into(), key(r), key(r), t]
            }
        }
        _ => {
            let t = ["0.01", "-1", "x"][r.below(3) as usize].to_string();
            vec!["BLMPOP".into(), t, "2".into(), key(r), key(r), end_arg(r)]
        }
    };
    // Now and then a wrong arity.
    if r.below(40) == 0 {
        c.truncate(1 + r.below(2) as usize);
    }
    c
}

fn random_commands_match_redis_bytes(layout: Layout) {
    if !redis_available() {
        eprintln!("SKIPPED random_commands_match_redis_bytes: redis-server is not on PATH");
        return;
    }
    const STEPS: usize = 3000;
    const SEED: u64 = 0x1157;
    let tessera = start(layout);
    let redis = Server::redis(&[]);
    let mut t = RawConn::connect(&tessera.addr());
    let mut rd = RawConn::connect(&redis.addr());
    let mut keys = common::keys_across_shards("rb", 3, layout.shards);
    keys.push("str".into());
    let mut both = |args: &[String]| -> (Vec<u8>, Vec<u8>) {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        (t.cmd(&a), rd.cmd(&a))
    };
    let config = |fill: &str| {
        ["CONFIG", "SET", "list-max-listpack-size", fill]
            .map(String::from)
            .to_vec()
    };
    let (a, b) = both(&config("4"));
    assert_eq!(a, b);
    let (a, b) = both(&["SET".to_string(), "str".to_string(), "s".to_string()]);
    assert_eq!(a, b);
    let mut r = Rng::new(SEED);
    for step in 0..STEPS {
        let cmd = random_command(&mut r, &keys);
        // BLMOVE/BRPOPLPUSH on an empty source: Redis times out with a null
        // array, Tessera without a blocking runtime answers at once with
        // the MULTI reply (null bulk); compare them where both answer at
        // once.
        let in_multi = cmd[0] == "BLMOVE" || cmd[0] == "BRPOPLPUSH";
        if in_multi {
            let (a, b) = both(&["MULTI".to_string()]);
            assert_eq!(a, b);
        }
        let (mut a, mut b) = both(&cmd);
        if in_multi {
            let (ea, eb) = both(&["EXEC".to_string()]);
            a.extend_from_slice(&ea);
            b.extend_from_slice(&eb);
        }
        assert!(
            a == b,
            "step {step}: {cmd:?}\n  tessera: {}\n  redis:   {}",
            escape(&a, 300),
            escape(&b, 300)
        );
    }
    for k in &keys[..3] {
        let cmd = ["LRANGE", k, "0", "-1"].map(String::from);
        let (a, b) = both(&cmd);
        assert_eq!(escape(&a, 10_000), escape(&b, 10_000), "final {k}");
    }
}

per_layout!(
    lmove_between_shards,
    lmpop_and_blpop_over_shards,
    large_list,
    random_operations_match_a_model,
    random_commands_match_redis_bytes,
);
