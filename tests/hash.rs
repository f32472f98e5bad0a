//! Hashes through the real binary, with several shards: byte-exact replies
//! for the shapes clients parse (RESP2 and RESP3), encodings at the
//! thresholds, hash keys on different shards inside one MULTI, and a model
//! test: seeded random sequences of hash commands applied to Tessera and to
//! an in-test `HashMap` model must agree on every reply.
//!
//! Bounded: a fixed number of operations per seed, every reply bounded by
//! the harness's read timeout. Reproduce a model failure with
//! `TESSERA_HASH_SEED=<seed> cargo test --test hash`. Validate against
//! Redis: `TESSERA_TEST_BIN=/usr/bin/redis-server cargo test --test hash`.

mod common;

use std::collections::{HashMap, HashSet};

use common::{assert_bytes, testing_real_redis, Layout, Server};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use redis::Value;

/// Shards of every Tessera started here.
const SHARDS: usize = 3;
/// Operations per seed of the model test.
const MODEL_OPS: usize = 3000;
/// Seeds run by default.
const MODEL_SEEDS: &[u64] = &[1, 2, 3, 0x5eed];

fn server() -> Server {
    if testing_real_redis() {
        Server::tessera(&[])
    } else {
        Server::tessera(&["--shards", &SHARDS.to_string()])
    }
}

/// Tessera in `layout`: the multi-shard test runs in each of
/// [`common::LAYOUTS`] (`per_layout!`).
fn server_in(layout: Layout) -> Server {
    layout.tessera(&[])
}

#[test]
fn replies_are_byte_exact() {
    let s = server();
    let mut c = s.raw();
    assert_bytes(&c.cmd_str(&["HSET", "h", "a", "1", "b", "two"]), b":2\r\n");
    assert_bytes(
        &c.cmd_str(&["HGETALL", "h"]),
        b"*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$3\r\ntwo\r\n",
    );
    assert_bytes(&c.cmd_str(&["HGET", "h", "zz"]), b"$-1\r\n");
    assert_bytes(
        &c.cmd_str(&["HINCRBYFLOAT", "h", "a", "0.1"]),
        b"$3\r\n1.1\r\n",
    );
    assert_bytes(
        &c.cmd_str(&["HINCRBY", "h", "b", "1"]),
        b"-ERR hash value is not an integer\r\n",
    );
    assert_bytes(
        &c.cmd_str(&["HSCAN", "h", "0"]),
        b"*2\r\n$1\r\n0\r\n*4\r\n$1\r\na\r\n$3\r\n1.1\r\n$1\r\nb\r\n$3\r\ntwo\r\n",
    );
    c.cmd_str(&["HELLO", "3"]);
    assert_bytes(
        &c.cmd_str(&["HGETALL", "h"]),
        b"%2\r\n$1\r\na\r\n$3\r\n1.1\r\n$1\r\nb\r\n$3\r\ntwo\r\n",
    );
    assert_bytes(&c.cmd_str(&["HGETALL", "nokey"]), b"%0\r\n");
    assert_bytes(
        &c.cmd_str(&["HRANDFIELD", "h", "5", "WITHVALUES"]),
        b"*2\r\n*2\r\n$1\r\na\r\n$3\r\n1.1\r\n*2\r\n$1\r\nb\r\n$3\r\ntwo\r\n",
    );
    assert_bytes(&c.cmd_str(&["HGET", "h", "zz"]), b"_\r\n");
}

#[test]
fn encodings_follow_the_thresholds() {
    let s = server();
    let mut c = s.conn();
    let enc = |c: &mut redis::Connection, k: &str| -> String {
        redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(k)
            .query(c)
            .expect("OBJECT ENCODING")
    };
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("hash-max-listpack-entries")
        .arg(4)
        .query(&mut c)
        .unwrap();
    for i in 0..4 {
        let _: i64 = redis::cmd("HSET")
            .arg("e")
            .arg(i)
            .arg("v")
            .query(&mut c)
            .unwrap();
    }
    assert_eq!(enc(&mut c, "e"), "listpack");
    let _: i64 = redis::cmd("HSET")
        .arg("e")
        .arg(4)
        .arg("v")
        .query(&mut c)
        .unwrap();
    assert_eq!(enc(&mut c, "e"), "hashtable");
    let long = "x".repeat(65);
    let _: i64 = redis::cmd("HSET")
        .arg("l")
        .arg("f")
        .arg(&long)
        .query(&mut c)
        .unwrap();
    assert_eq!(enc(&mut c, "l"), "hashtable");
    let got: HashMap<String, String> = redis::cmd("HGETALL").arg("l").query(&mut c).unwrap();
    assert_eq!(got, HashMap::from([("f".to_string(), long)]));
}

fn multi_spans_shards(layout: Layout) {
    let s = server_in(layout);
    let mut c = s.conn();
    // Keys on different shards.
    let keys = common::keys_across_shards("h:", 6, layout.shards);
    let mut pipe = redis::pipe();
    pipe.atomic();
    for (i, k) in keys.iter().enumerate() {
        pipe.cmd("HSET").arg(k).arg("n").arg(i);
        pipe.cmd("HINCRBY").arg(k).arg("n").arg(10);
    }
    let replies: Vec<i64> = pipe.query(&mut c).unwrap();
    let want: Vec<i64> = (0..keys.len() as i64).flat_map(|i| [1, i + 10]).collect();
    assert_eq!(replies, want);
    for (i, k) in keys.iter().enumerate() {
        let v: i64 = redis::cmd("HGET").arg(k).arg("n").query(&mut c).unwrap();
        assert_eq!(v, i as i64 + 10);
    }
}

// ---------------------------------------------------------------------------
// Model test

type Model = HashMap<Vec<u8>, HashMap<Vec<u8>, Vec<u8>>>;

fn bulk(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::Nil => None,
        other => panic!("expected a bulk string or nil, got {other:?}"),
    }
}

fn bulks(v: &Value) -> Vec<Vec<u8>> {
    match v {
        Value::Array(a) => a.iter().map(|x| bulk(x).expect("bulk")).collect(),
        other => panic!("expected an array, got {other:?}"),
    }
}

fn pairs(flat: Vec<Vec<u8>>) -> HashMap<Vec<u8>, Vec<u8>> {
    assert!(flat.len().is_multiple_of(2), "odd flat map");
    let mut m = HashMap::new();
    let mut it = flat.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        assert!(m.insert(k, v).is_none(), "duplicate field");
    }
    m
}

fn pick<'a, T>(rng: &mut SmallRng, xs: &'a [T]) -> &'a T {
    &xs[rng.gen_range(0..xs.len())]
}

/// A field name: small pool so fields repeat; some integer-looking.
fn field(rng: &mut SmallRng) -> Vec<u8> {
    match rng.gen_range(0..10) {
        0..=5 => format!("f{}", rng.gen_range(0..12)).into_bytes(),
        6 | 7 => rng.gen_range(-3i64..300).to_string().into_bytes(),
        8 => b"".to_vec(),
        _ => vec![b'L'; rng.gen_range(60..70)],
    }
}

/// A value: integers (for HINCRBY), short strings, sometimes long ones.
fn value(rng: &mut SmallRng) -> Vec<u8> {
    match rng.gen_range(0..10) {
        0..=3 => rng.gen_range(-1000i64..1000).to_string().into_bytes(),
        4 => pick(rng, &[i64::MAX, i64::MIN, 0, 127, 128, -4096, 40000])
            .to_string()
            .into_bytes(),
        5..=7 => format!("v{}", rng.gen_range(0..100)).into_bytes(),
        8 => b"012".to_vec(),
        _ => vec![b'x'; rng.gen_range(50..80)],
    }
}

fn run_model(seed: u64) {
    let s = server();
    let mut c = s.conn();
    let mut rng = SmallRng::seed_from_u64(seed);
    // Low thresholds so conversions happen often.
    let entries = rng.gen_range(2..10);
    for (k, v) in [
        ("hash-max-listpack-entries", entries),
        ("hash-max-listpack-value", 64),
    ] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query(&mut c)
            .unwrap();
    }
    let keys: Vec<Vec<u8>> = (0..6).map(|i| format!("k{{{i}}}").into_bytes()).collect();
    let mut model: Model = HashMap::new();
    for step in 0..MODEL_OPS {
        let key = pick(&mut rng, &keys).clone();
        let op = rng.gen_range(0..15);
        let ctx = format!(
            "seed {seed} step {step} op {op} key {}",
            String::from_utf8_lossy(&key)
        );
        let h = model.get(&key).cloned().unwrap_or_default();
        match op {
            0 | 1 => {
                let n = rng.gen_range(1..4);
                let mut cmd = redis::cmd("HSET");
                cmd.arg(&key);
                let mut created = 0;
                let mut new = h.clone();
                for _ in 0..n {
                    let (f, v) = (field(&mut rng), value(&mut rng));
                    cmd.arg(&f).arg(&v);
                    if new.insert(f, v).is_none() {
                        created += 1;
                    }
                }
                let got: i64 = cmd.query(&mut c).expect(&ctx);
                assert_eq!(got, created, "{ctx}");
                model.insert(key, new);
            }
            2 => {
                let (f, v) = (field(&mut rng), value(&mut rng));
                let got: i64 = redis::cmd("HSETNX")
                    .arg(&key)
                    .arg(&f)
                    .arg(&v)
                    .query(&mut c)
                    .expect(&ctx);
                let want = !h.contains_key(&f);
                assert_eq!(got, i64::from(want), "{ctx}");
                if want {
                    model.entry(key).or_default().insert(f, v);
                }
            }
            3 => {
                let fs: Vec<Vec<u8>> = (0..rng.gen_range(1..4)).map(|_| field(&mut rng)).collect();
                let got: i64 = redis::cmd("HDEL")
                    .arg(&key)
                    .arg(&fs)
                    .query(&mut c)
                    .expect(&ctx);
                let mut new = h.clone();
                let want = fs.iter().filter(|f| new.remove(*f).is_some()).count();
                assert_eq!(got, want as i64, "{ctx}");
                if new.is_empty() {
                    model.remove(&key);
                } else if h.is_empty() {
                    // HDEL never creates.
                } else {
                    model.insert(key, new);
                }
            }
            4 => {
                let f = field(&mut rng);
                let got: Value = redis::cmd("HGET")
                    .arg(&key)
                    .arg(&f)
                    .query(&mut c)
                    .expect(&ctx);
                assert_eq!(bulk(&got), h.get(&f).cloned(), "{ctx}");
            }
            5 => {
                let fs: Vec<Vec<u8>> = (0..rng.gen_range(1..5)).map(|_| field(&mut rng)).collect();
                let got: Value = redis::cmd("HMGET")
                    .arg(&key)
                    .arg(&fs)
                    .query(&mut c)
                    .expect(&ctx);
                let Value::Array(items) = got else {
                    panic!("{ctx}: HMGET {got:?}")
                };
                let got: Vec<Option<Vec<u8>>> = items.iter().map(bulk).collect();
                let want: Vec<Option<Vec<u8>>> = fs.iter().map(|f| h.get(f).cloned()).collect();
                assert_eq!(got, want, "{ctx}");
            }
            6 => {
                let f = field(&mut rng);
                let e: i64 = redis::cmd("HEXISTS")
                    .arg(&key)
                    .arg(&f)
                    .query(&mut c)
                    .expect(&ctx);
                assert_eq!(e, i64::from(h.contains_key(&f)), "{ctx}");
                let l: i64 = redis::cmd("HLEN").arg(&key).query(&mut c).expect(&ctx);
                assert_eq!(l, h.len() as i64, "{ctx}");
                let sl: i64 = redis::cmd("HSTRLEN")
                    .arg(&key)
                    .arg(&f)
                    .query(&mut c)
                    .expect(&ctx);
                assert_eq!(sl, h.get(&f).map_or(0, |v| v.len() as i64), "{ctx}");
            }
            7 | 8 => {
                let f = field(&mut rng);
                let by: i64 = *pick(&mut rng, &[1, -1, 7, 1000, i64::MAX, i64::MIN]);
                let got: redis::RedisResult<i64> = redis::cmd("HINCRBY")
                    .arg(&key)
                    .arg(&f)
                    .arg(by)
                    .query(&mut c);
                let cur = match h.get(&f) {
                    None => Some(0),
                    Some(v) => std::str::from_utf8(v)
                        .ok()
                        .and_then(|s| s.parse::<i64>().ok())
                        .filter(|n| n.to_string().as_bytes() == &v[..]),
                };
                match cur {
                    None => {
                        let e = got.expect_err(&ctx);
                        assert!(
                            e.to_string().contains("hash value is not an integer"),
                            "{ctx}: {e}"
                        );
                    }
                    Some(n) => match n.checked_add(by) {
                        None => {
                            let e = got.expect_err(&ctx);
                            assert!(e.to_string().contains("would overflow"), "{ctx}: {e}");
                        }
                        Some(sum) => {
                            assert_eq!(got.expect(&ctx), sum, "{ctx}");
                            model
                                .entry(key)
                                .or_default()
                                .insert(f, sum.to_string().into_bytes());
                        }
                    },
                }
            }
            9 => {
                let got: Value = redis::cmd("HGETALL").arg(&key).query(&mut c).expect(&ctx);
                let got = match got {
                    Value::Map(kv) => kv
                        .iter()
                        .map(|(k, v)| (bulk(k).unwrap(), bulk(v).unwrap()))
                        .collect(),
                    other => pairs(bulks(&other)),
                };
                assert_eq!(got, h, "{ctx}");
            }
            10 => {
                let ks: HashSet<Vec<u8>> =
                    bulks(&redis::cmd("HKEYS").arg(&key).query(&mut c).expect(&ctx))
                        .into_iter()
                        .collect();
                assert_eq!(ks, h.keys().cloned().collect(), "{ctx}");
                let mut vs = bulks(&redis::cmd("HVALS").arg(&key).query(&mut c).expect(&ctx));
                let mut want: Vec<Vec<u8>> = h.values().cloned().collect();
                vs.sort();
                want.sort();
                assert_eq!(vs, want, "{ctx}");
            }
            11 => {
                let count: i64 = rng.gen_range(-5..20);
                let got = bulks(
                    &redis::cmd("HRANDFIELD")
                        .arg(&key)
                        .arg(count)
                        .arg("WITHVALUES")
                        .query(&mut c)
                        .expect(&ctx),
                );
                let got: Vec<(Vec<u8>, Vec<u8>)> = got
                    .chunks(2)
                    .map(|p| (p[0].clone(), p[1].clone()))
                    .collect();
                let want_len = if h.is_empty() {
                    0
                } else if count < 0 {
                    count.unsigned_abs() as usize
                } else {
                    (count as usize).min(h.len())
                };
                assert_eq!(got.len(), want_len, "{ctx}");
                for (f, v) in &got {
                    assert_eq!(h.get(f), Some(v), "{ctx}");
                }
                if count > 0 {
                    let distinct: HashSet<_> = got.iter().map(|(f, _)| f).collect();
                    assert_eq!(distinct.len(), got.len(), "{ctx}: repeats");
                }
            }
            12 => {
                let mut seen = HashMap::new();
                let mut cursor = 0u64;
                for _ in 0..10_000 {
                    let Value::Array(parts) = redis::cmd("HSCAN")
                        .arg(&key)
                        .arg(cursor)
                        .arg("COUNT")
                        .arg(rng.gen_range(1..6))
                        .query(&mut c)
                        .expect(&ctx)
                    else {
                        panic!("{ctx}: HSCAN shape")
                    };
                    cursor = String::from_utf8(bulk(&parts[0]).unwrap())
                        .unwrap()
                        .parse()
                        .unwrap();
                    seen.extend(pairs(bulks(&parts[1])));
                    if cursor == 0 {
                        break;
                    }
                }
                assert_eq!(cursor, 0, "{ctx}: HSCAN did not finish");
                assert_eq!(seen, h, "{ctx}");
            }
            13 => {
                let t: String = redis::cmd("TYPE").arg(&key).query(&mut c).expect(&ctx);
                let want = if h.is_empty() { "none" } else { "hash" };
                assert_eq!(t, want, "{ctx}");
                if !h.is_empty() {
                    let enc: String = redis::cmd("OBJECT")
                        .arg("ENCODING")
                        .arg(&key)
                        .query(&mut c)
                        .expect(&ctx);
                    // Once a hashtable, always one: only check the listpack
                    // case is consistent with the limits.
                    if enc == "listpack" {
                        assert!(
                            h.len() <= entries,
                            "{ctx}: listpack with {} fields",
                            h.len()
                        );
                        assert!(
                            h.iter().all(|(f, v)| f.len() <= 64 && v.len() <= 64),
                            "{ctx}"
                        );
                    } else {
                        assert_eq!(enc, "hashtable", "{ctx}");
                    }
                }
            }
            _ => {
                if rng.gen_range(0..10) == 0 {
                    let _: i64 = redis::cmd("DEL").arg(&key).query(&mut c).expect(&ctx);
                    model.remove(&key);
                }
            }
        }
    }
}

#[test]
fn random_operations_agree_with_a_model() {
    let seeds: Vec<u64> = match std::env::var("TESSERA_HASH_SEED") {
        Ok(s) => vec![s.parse().expect("TESSERA_HASH_SEED is a u64")],
        Err(_) => MODEL_SEEDS.to_vec(),
    };
    for seed in seeds {
        run_model(seed);
    }
}

per_layout!(multi_spans_shards,);
