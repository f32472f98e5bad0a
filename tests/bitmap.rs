//! Bitmaps through the real binary with several shards: BITOP whose keys
//! live on different shards (in each layout of [`common::LAYOUTS`]) (run atomically by the scratch layer)
//! checked against a byte model, and bitmaps surviving a SAVE (RDB) and a
//! restart, and a kill and restart with the append-only file, where the log must
//! hold exactly the writes that changed something.
//!
//! Validate against Redis (the AOF test needs Tessera's flags and skips
//! itself there): `TESSERA_TEST_BIN=/usr/bin/redis-server cargo test --test
//! bitmap`.

mod common;

use std::path::Path;

use common::{testing_real_redis, Layout, Rng, Server};

/// Shards of every Tessera started here.
const SHARDS: usize = 3;

fn server(extra: &[&str]) -> Server {
    if testing_real_redis() {
        Server::tessera(extra)
    } else {
        let mut args = vec!["--shards", "3"];
        args.extend_from_slice(extra);
        Server::tessera(&args)
    }
}

/// A key named `{prefix}.{n}` on shard `shard`.
fn key_on(prefix: &str, shard: usize, shards: usize) -> String {
    (0..10_000)
        .map(|n| format!("{prefix}.{n}"))
        .find(|k| commands::table::shard_of(k.as_bytes(), shards) == shard)
        .expect("a key on every shard")
}

fn q<T: redis::FromRedisValue>(con: &mut redis::Connection, args: &[&[u8]]) -> T {
    let mut c = redis::cmd(std::str::from_utf8(args[0]).expect("ASCII command"));
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(con)
        .unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(&args.concat())))
}

fn get(con: &mut redis::Connection, key: &str) -> Option<Vec<u8>> {
    q(con, &[b"GET", key.as_bytes()])
}

/// BITOP computed byte by byte: missing keys are empty, shorter strings
/// are padded with zeros.
fn model(op: &str, srcs: &[Option<Vec<u8>>]) -> Vec<u8> {
    let len = srcs.iter().flatten().map(Vec::len).max().unwrap_or(0);
    let byte =
        |s: &Option<Vec<u8>>, i: usize| s.as_ref().and_then(|v| v.get(i).copied()).unwrap_or(0);
    (0..len)
        .map(|i| {
            let mut it = srcs.iter().map(|s| byte(s, i));
            let first = it.next().unwrap_or(0);
            match op {
                "AND" => it.fold(first, |a, b| a & b),
                "OR" => it.fold(first, |a, b| a | b),
                "XOR" => it.fold(first, |a, b| a ^ b),
                _ => !first,
            }
        })
        .collect()
}

fn bitop_across_shards_matches_a_byte_model(layout: Layout) {
    let s = layout.tessera(&[]);
    let mut con = s.conn();
    // One source per shard and a destination on each shard in turn.
    let srcs: Vec<String> = (0..layout.shards)
        .map(|i| key_on("src", i, layout.shards))
        .collect();
    let mut rng = Rng::new(7);
    for round in 0..60 {
        for k in &srcs {
            match rng.below(6) {
                // Missing sometimes, empty sometimes.
                0 => {
                    let _: i64 = q(&mut con, &[b"DEL", k.as_bytes()]);
                }
                1 => {
                    let _: () = q(&mut con, &[b"SET", k.as_bytes(), b""]);
                }
                _ => {
                    let len = rng.below(80) as usize;
                    let v: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                    let _: () = q(&mut con, &[b"SET", k.as_bytes(), &v]);
                }
            }
        }
        let dest = key_on("dest", round % layout.shards, layout.shards);
        let _: () = q(&mut con, &[b"SET", dest.as_bytes(), b"old", b"EX", b"1000"]);
        let op = *rng.pick(&["AND", "OR", "XOR", "NOT"]);
        let used: Vec<&String> = if op == "NOT" {
            vec![&srcs[round % layout.shards]]
        } else {
            srcs.iter().collect()
        };
        let values: Vec<Option<Vec<u8>>> = used.iter().map(|k| get(&mut con, k)).collect();
        let want = model(op, &values);
        let mut args: Vec<&[u8]> = vec![b"BITOP", op.as_bytes(), dest.as_bytes()];
        args.extend(used.iter().map(|k| k.as_bytes()));
        let n: i64 = q(&mut con, &args);
        assert_eq!(n as usize, want.len(), "round {round}: {op}");
        if want.is_empty() {
            let e: i64 = q(&mut con, &[b"EXISTS", dest.as_bytes()]);
            assert_eq!(e, 0, "round {round}: an empty result deletes");
        } else {
            assert_eq!(get(&mut con, &dest), Some(want), "round {round}: {op}");
            let ttl: i64 = q(&mut con, &[b"TTL", dest.as_bytes()]);
            assert_eq!(ttl, -1, "round {round}: the TTL goes");
            let enc: String = q(&mut con, &[b"OBJECT", b"ENCODING", dest.as_bytes()]);
            assert_eq!(enc, "raw");
        }
        // The sources are untouched.
        for (k, v) in used.iter().zip(&values) {
            assert_eq!(&get(&mut con, k), v);
        }
    }
    // A wrong type on any shard: an error, and the destination unchanged.
    let dest = key_on("dest", 0, layout.shards);
    let _: () = q(&mut con, &[b"SET", dest.as_bytes(), b"keep"]);
    let _: () = q(&mut con, &[b"SET", srcs[0].as_bytes(), b"x"]);
    let _: i64 = q(&mut con, &[b"DEL", srcs[srcs.len() - 1].as_bytes()]);
    let _: i64 = q(&mut con, &[b"RPUSH", srcs[srcs.len() - 1].as_bytes(), b"x"]);
    let r: redis::RedisResult<i64> = redis::cmd("BITOP")
        .arg("OR")
        .arg(&dest)
        .arg(&srcs)
        .query(&mut con);
    let e = r.expect_err("WRONGTYPE");
    assert_eq!(e.code(), Some("WRONGTYPE"));
    assert_eq!(get(&mut con, &dest), Some(b"keep".to_vec()));
}

/// The bitmaps `write` leaves, by key.
fn bitmaps(con: &mut redis::Connection, keys: &[String]) -> Vec<(String, Option<Vec<u8>>)> {
    keys.iter().map(|k| (k.clone(), get(con, k))).collect()
}

/// Bitmap writes of every kind, on keys of every shard; returns the keys.
fn write(con: &mut redis::Connection) -> Vec<String> {
    let a = key_on("bm-a", 0, SHARDS);
    let b = key_on("bm-b", 1, SHARDS);
    let c = key_on("bm-c", 2, SHARDS);
    let d = key_on("bm-d", 1, SHARDS);
    let (ab, bb, cb, db) = (a.as_bytes(), b.as_bytes(), c.as_bytes(), d.as_bytes());
    let cmds: &[&[&[u8]]] = &[
        &[b"SETBIT", ab, b"7", b"1"],
        &[b"SETBIT", ab, b"1000", b"1"],
        &[b"SETBIT", ab, b"7", b"0"],
        &[b"SET", bb, b"12345"],
        &[b"SETBIT", bb, b"0", b"1"],
        &[
            b"BITFIELD",
            cb,
            b"SET",
            b"i16",
            b"#3",
            b"-2",
            b"INCRBY",
            b"u8",
            b"0",
            b"200",
        ],
        &[
            b"BITFIELD",
            cb,
            b"OVERFLOW",
            b"FAIL",
            b"INCRBY",
            b"u8",
            b"0",
            b"100",
        ],
        // Fails but grows the string: logged all the same.
        &[
            b"BITFIELD",
            cb,
            b"OVERFLOW",
            b"FAIL",
            b"INCRBY",
            b"u2",
            b"400",
            b"7",
        ],
        &[b"BITOP", b"XOR", db, ab, bb, cb],
    ];
    for c in cmds {
        let _: redis::Value = q(con, c);
    }
    vec![a, b, c, d]
}

#[test]
fn bitmaps_survive_save_and_restart() {
    let dir = common::unique_temp_dir("bitmap-rdb");
    let d = dir.to_str().expect("UTF-8 temp dir");
    let args = ["--dir", d, "--dbfilename", "bitmaps.rdb"];
    let (keys, before) = {
        let s = server(&args);
        let mut con = s.conn();
        let keys = write(&mut con);
        let before = bitmaps(&mut con, &keys);
        assert!(before.iter().all(|(_, v)| v.is_some()));
        let _: () = q(&mut con, &[b"SAVE"]);
        (keys, before)
        // Dropped: SIGKILL.
    };
    let s = server(&args);
    let mut con = s.conn();
    assert_eq!(bitmaps(&mut con, &keys), before);
    let n: i64 = q(&mut con, &[b"BITCOUNT", keys[0].as_bytes()]);
    assert_eq!(n, 1);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

fn count(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle)
        .count()
}

#[test]
fn bitmaps_survive_a_kill_and_restart_with_the_aof() {
    if testing_real_redis() {
        eprintln!("SKIPPED: Tessera's append-only file layout");
        return;
    }
    let dir = common::unique_temp_dir("bitmap-aof");
    let d = dir.to_str().expect("UTF-8 temp dir");
    let args = ["--dir", d, "--appendonly", "yes", "--appendfsync", "always"];
    let (keys, before) = {
        let s = server(&args);
        let mut con = s.conn();
        let keys = write(&mut con);
        // Writes that change nothing are not logged.
        let a = keys[0].as_bytes();
        let _: i64 = q(&mut con, &[b"SETBIT", a, b"1000", b"1"]);
        let _: Vec<i64> = q(&mut con, &[b"BITFIELD", a, b"SET", b"u1", b"1000", b"1"]);
        let _: Vec<i64> = q(&mut con, &[b"BITFIELD", a, b"GET", b"u8", b"0"]);
        let _: i64 = q(&mut con, &[b"BITOP", b"AND", keys[3].as_bytes(), b"nokey"]);
        let _: i64 = q(&mut con, &[b"BITOP", b"AND", keys[3].as_bytes(), b"nokey"]);
        let before = bitmaps(&mut con, &keys[..3]);
        (keys, before)
        // Dropped: SIGKILL.
    };
    let aof = std::fs::read(Path::new(d).join("appendonlydir/appendonly.aof.1.incr.aof"))
        .expect("the incremental AOF");
    assert_eq!(
        count(&aof, b"SETBIT"),
        4,
        "the unchanged SETBIT is not logged"
    );
    assert_eq!(
        count(&aof, b"BITFIELD"),
        2,
        "changed or grown, not unchanged or GET-only"
    );
    assert_eq!(count(&aof, b"BITOP"), 2, "the store and the first deletion");
    let s = server(&args);
    let mut con = s.conn();
    assert_eq!(bitmaps(&mut con, &keys[..3]), before);
    let e: i64 = q(&mut con, &[b"EXISTS", keys[3].as_bytes()]);
    assert_eq!(e, 0);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

per_layout!(bitop_across_shards_matches_a_byte_model);
