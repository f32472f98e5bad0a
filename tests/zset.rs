//! Sorted sets through the real binary: multi-key commands whose keys live
//! on different shards (run through the scratch layer), Redis 7.2's
//! ZRANK/ZREVRANK WITHSCORE (the 7.0 reference has no such option, so it
//! is tested here and not in `tests/diff/zset.txt`), and a seeded model
//! test: random sorted set commands against a `BTreeMap` model, across the
//! listpack/skiplist conversions.
//!
//! Validate against Redis: `TESSERA_TEST_BIN=/usr/bin/redis-server cargo
//! test --test zset` (Redis gets no `--shards`; the 7.2-only test is
//! skipped).

mod common;

use std::collections::BTreeMap;

use common::{testing_real_redis, Layout, Server};
use redis::Commands;

const SHARDS: usize = 3;
/// Operations of the model test: bounded, seeded, fast in debug builds.
const MODEL_OPS: usize = 3000;
/// Members of the model test are drawn from this many names.
const MODEL_MEMBERS: u64 = 48;

fn start() -> Server {
    if testing_real_redis() {
        Server::tessera(&[])
    } else {
        Server::tessera(&["--shards", &SHARDS.to_string()])
    }
}

/// Tessera in `layout`: the multi-shard test runs in each of
/// [`common::LAYOUTS`] (`per_layout!`).
fn start_in(layout: Layout) -> Server {
    layout.tessera(&[])
}

fn multi_key_commands_across_shards(layout: Layout) {
    let s = start_in(layout);
    let mut c = s.conn();
    let k = common::keys_across_shards("zx", 4, layout.shards);
    let (a, b, d, dst) = (&k[0], &k[1], &k[2], &k[3]);
    let _: () = redis::cmd("ZADD")
        .arg(a)
        .arg(&[(1, "x"), (2, "y"), (3, "z")])
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(b)
        .arg(&[(10, "y"), (20, "w")])
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(d)
        .arg(&[(5, "z")])
        .query(&mut c)
        .unwrap();

    let n: i64 = redis::cmd("ZUNIONSTORE")
        .arg(dst)
        .arg(3)
        .arg(a)
        .arg(b)
        .arg(d)
        .arg("WEIGHTS")
        .arg(&[1, 2, 3])
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 4);
    let got: Vec<(String, f64)> = c.zrange_withscores(dst, 0, -1).unwrap();
    assert_eq!(
        got,
        vec![
            ("x".into(), 1.0),
            ("z".into(), 18.0),
            ("y".into(), 22.0),
            ("w".into(), 40.0)
        ]
    );

    let n: i64 = redis::cmd("ZINTERSTORE")
        .arg(dst)
        .arg(2)
        .arg(a)
        .arg(b)
        .arg("AGGREGATE")
        .arg("MAX")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    let got: Vec<(String, f64)> = c.zrange_withscores(dst, 0, -1).unwrap();
    assert_eq!(got, vec![("y".to_string(), 10.0)]);

    let n: i64 = redis::cmd("ZDIFFSTORE")
        .arg(dst)
        .arg(3)
        .arg(a)
        .arg(b)
        .arg(d)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    let got: Vec<String> = c.zrange(dst, 0, -1).unwrap();
    assert_eq!(got, vec!["x".to_string()]);

    // Reads across shards.
    let got: Vec<String> = redis::cmd("ZUNION")
        .arg(3)
        .arg(a)
        .arg(b)
        .arg(d)
        .query(&mut c)
        .unwrap();
    assert_eq!(got, vec!["x", "z", "y", "w"]);
    let card: i64 = redis::cmd("ZINTERCARD")
        .arg(2)
        .arg(a)
        .arg(d)
        .query(&mut c)
        .unwrap();
    assert_eq!(card, 1);

    // ZRANGESTORE from one shard into another, then an empty result deletes.
    let n: i64 = redis::cmd("ZRANGESTORE")
        .arg(dst)
        .arg(b)
        .arg(0)
        .arg(-1)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 2);
    let n: i64 = redis::cmd("ZRANGESTORE")
        .arg(dst)
        .arg(b)
        .arg(100)
        .arg(200)
        .arg("BYSCORE")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 0);
    let exists: bool = c.exists(dst).unwrap();
    assert!(!exists);

    // ZMPOP takes from the first non-empty key, wherever it lives.
    let missing = common::keys_across_shards("zmissing", 1, layout.shards).remove(0);
    let v: redis::Value = redis::cmd("ZMPOP")
        .arg(2)
        .arg(&missing)
        .arg(d)
        .arg("MIN")
        .query(&mut c)
        .unwrap();
    let expect = redis::Value::Array(vec![
        redis::Value::BulkString(d.as_bytes().to_vec()),
        redis::Value::Array(vec![redis::Value::Array(vec![
            redis::Value::BulkString(b"z".to_vec()),
            redis::Value::BulkString(b"5".to_vec()),
        ])]),
    ]);
    assert_eq!(v, expect);
    let exists: bool = c.exists(d).unwrap();
    assert!(!exists);

    // The inputs are untouched by the stores.
    let got: Vec<(String, f64)> = c.zrange_withscores(a, 0, -1).unwrap();
    assert_eq!(got.len(), 3);
}

#[test]
fn zrank_withscore_as_redis_7_2() {
    if testing_real_redis() {
        // Redis 7.0 has no WITHSCORE option (ZRANK's arity is 3).
        return;
    }
    let s = start();
    let mut r = s.raw();
    assert_eq!(r.cmd_str(&["ZADD", "z", "1", "a", "2.5", "b"]), b":2\r\n");
    assert_eq!(
        r.cmd_str(&["ZRANK", "z", "b", "WITHSCORE"]),
        b"*2\r\n:1\r\n$3\r\n2.5\r\n"
    );
    assert_eq!(
        r.cmd_str(&["ZREVRANK", "z", "b", "withscore"]),
        b"*2\r\n:0\r\n$3\r\n2.5\r\n"
    );
    assert_eq!(r.cmd_str(&["ZRANK", "z", "x", "WITHSCORE"]), b"*-1\r\n");
    assert_eq!(r.cmd_str(&["ZRANK", "nokey", "a", "WITHSCORE"]), b"*-1\r\n");
    assert_eq!(r.cmd_str(&["ZRANK", "nokey", "a"]), b"$-1\r\n");
    assert_eq!(
        r.cmd_str(&["ZRANK", "z", "a", "WITHSCORES"]),
        b"-ERR syntax error\r\n"
    );
    assert_eq!(
        r.cmd_str(&["ZRANK", "z", "a", "WITHSCORE", "x"]),
        b"-ERR wrong number of arguments for 'zrank' command\r\n"
    );
    let _ = r.cmd_str(&["HELLO", "3"]);
    assert_eq!(
        r.cmd_str(&["ZRANK", "z", "b", "WITHSCORE"]),
        b"*2\r\n:1\r\n,2.5\r\n"
    );
    assert_eq!(r.cmd_str(&["ZRANK", "z", "x", "WITHSCORE"]), b"_\r\n");
}

/// xorshift64*: a small seeded generator, so a failure replays exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The model's members in (score, member) order.
fn ordered(m: &BTreeMap<String, f64>) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64)> = m.iter().map(|(k, s)| (k.clone(), *s)).collect();
    v.sort_by(|a, b| a.1.partial_cmp(&b.1).unwrap().then_with(|| a.0.cmp(&b.0)));
    v
}

#[test]
fn random_commands_agree_with_a_model() {
    let s = start();
    let mut c = s.conn();
    // A low threshold so the set crosses listpack <-> skiplist often.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("zset-max-listpack-entries")
        .arg(16)
        .query(&mut c)
        .unwrap();
    let mut rng = Rng(0x5EED_0F2E);
    let mut model: BTreeMap<String, f64> = BTreeMap::new();
    let key = "model";
    for step in 0..MODEL_OPS {
        let member = format!("m{:02}", rng.below(MODEL_MEMBERS));
        // Scores: small integers and halves, so sums stay exact.
        let score = (rng.below(41) as f64 - 20.0) / if rng.below(4) == 0 { 2.0 } else { 1.0 };
        let what = rng.below(12);
        let ctx = format!("step {step} op {what} member {member} score {score}");
        match what {
            0..=2 => {
                let added: i64 = c.zadd(key, &member, score).unwrap();
                let was = model.insert(member.clone(), score);
                assert_eq!(added, i64::from(was.is_none()), "{ctx}");
            }
            3 => {
                let removed: i64 = c.zrem(key, &member).unwrap();
                assert_eq!(removed, i64::from(model.remove(&member).is_some()), "{ctx}");
            }
            4 => {
                let got: f64 = c.zincr(key, &member, score).unwrap();
                let e = model.entry(member.clone()).or_insert(0.0);
                *e += score;
                assert_eq!(got, *e, "{ctx}");
            }
            5 => {
                let o = ordered(&model);
                let got: Option<usize> = c.zrank(key, &member).unwrap();
                assert_eq!(got, o.iter().position(|(m, _)| *m == member), "{ctx}");
                let got: Option<usize> = c.zrevrank(key, &member).unwrap();
                assert_eq!(got, o.iter().rev().position(|(m, _)| *m == member), "{ctx}");
            }
            6 => {
                let o = ordered(&model);
                let a = rng.below(60) as isize - 30;
                let b = rng.below(60) as isize - 30;
                let got: Vec<(String, f64)> = c.zrange_withscores(key, a, b).unwrap();
                let n = o.len() as isize;
                let (mut s0, mut e0) =
                    (if a < 0 { a + n } else { a }, if b < 0 { b + n } else { b });
                s0 = s0.max(0);
                let want: Vec<(String, f64)> = if s0 > e0 || s0 >= n {
                    Vec::new()
                } else {
                    e0 = e0.min(n - 1);
                    o[s0 as usize..=e0 as usize].to_vec()
                };
                assert_eq!(got, want, "{ctx} range {a} {b}");
            }
            7 => {
                let o = ordered(&model);
                let lo = rng.below(41) as f64 - 20.0;
                let hi = lo + rng.below(20) as f64;
                let got: Vec<String> = c.zrangebyscore(key, format!("({lo}"), hi).unwrap();
                let want: Vec<String> = o
                    .iter()
                    .filter(|(_, s)| *s > lo && *s <= hi)
                    .map(|(m, _)| m.clone())
                    .collect();
                assert_eq!(got, want, "{ctx} ({lo} {hi}");
                let n: usize = c.zcount(key, lo, hi).unwrap();
                let want = o.iter().filter(|(_, s)| *s >= lo && *s <= hi).count();
                assert_eq!(n, want, "{ctx} zcount {lo} {hi}");
            }
            8 => {
                let o = ordered(&model);
                let count = rng.below(4) as usize;
                let max = rng.below(2) == 1;
                let got: Vec<(String, f64)> = if max {
                    c.zpopmax(key, count as isize).unwrap()
                } else {
                    c.zpopmin(key, count as isize).unwrap()
                };
                let want: Vec<(String, f64)> = if max {
                    o.iter().rev().take(count).cloned().collect()
                } else {
                    o.iter().take(count).cloned().collect()
                };
                for (m, _) in &want {
                    model.remove(m);
                }
                assert_eq!(got, want, "{ctx} pop {count} max={max}");
            }
            9 => {
                let o = ordered(&model);
                let a = rng.below(10) as isize;
                let b = a + rng.below(5) as isize;
                let n: usize = c.zremrangebyrank(key, a, b).unwrap();
                let gone: Vec<String> = o
                    .iter()
                    .skip(a as usize)
                    .take((b - a + 1) as usize)
                    .map(|(m, _)| m.clone())
                    .collect();
                for m in &gone {
                    model.remove(m);
                }
                assert_eq!(n, gone.len(), "{ctx} zremrangebyrank {a} {b}");
            }
            10 => {
                let lo = rng.below(41) as f64 - 20.0;
                let hi = lo + rng.below(6) as f64;
                let n: usize = c.zrembyscore(key, lo, hi).unwrap();
                let before = model.len();
                model.retain(|_, s| !(*s >= lo && *s <= hi));
                assert_eq!(n, before - model.len(), "{ctx} zremrangebyscore {lo} {hi}");
            }
            _ => {
                let n: usize = c.zcard(key).unwrap();
                assert_eq!(n, model.len(), "{ctx}");
                let all: Vec<(String, f64)> = c.zrange_withscores(key, 0, -1).unwrap();
                assert_eq!(all, ordered(&model), "{ctx}");
                let scores: Vec<Option<f64>> = redis::cmd("ZMSCORE")
                    .arg(key)
                    .arg(&member)
                    .arg("nope")
                    .query(&mut c)
                    .unwrap();
                assert_eq!(scores, vec![model.get(&member).copied(), None], "{ctx}");
            }
        }
    }
    let all: Vec<(String, f64)> = c.zrange_withscores(key, 0, -1).unwrap();
    assert_eq!(all, ordered(&model));
}

per_layout!(multi_key_commands_across_shards,);
