//! RDB compatibility against a real redis-server 7.0: DUMP payloads in
//! both directions, a Redis-written file restored into Tessera, and a file
//! written by `engine::rdb` loaded by Redis. Skipped (with a message) when
//! redis-server is not on PATH.

mod common;

use common::{reply_payload, split_aggregate, RawConn, Rng, Server};
use engine::rdb;
use engine::EncLimits;

fn skip(name: &str) -> bool {
    if !common::redis_available() || common::testing_real_redis() {
        eprintln!("SKIPPED rdb test '{name}': needs redis-server on PATH and the Tessera binary");
        return true;
    }
    false
}

/// A key's contents as comparable bytes: its type, then its elements
/// (sorted for sets and hashes, whose order is unspecified).
fn content(c: &mut RawConn, key: &[u8]) -> Vec<Vec<u8>> {
    let t = reply_payload(&c.cmd(&[b"TYPE", key])).unwrap();
    let (reply, sort) = match &t[..] {
        b"string" => (c.cmd(&[b"GET", key]), false),
        b"list" => (c.cmd(&[b"LRANGE", key, b"0", b"-1"]), false),
        b"set" => (c.cmd(&[b"SMEMBERS", key]), true),
        b"zset" => (c.cmd(&[b"ZRANGE", key, b"0", b"-1", b"WITHSCORES"]), false),
        b"hash" => (c.cmd(&[b"HGETALL", key]), true),
        b"none" => return vec![t],
        other => panic!("unexpected type {other:?}"),
    };
    let mut items = match split_aggregate(&reply) {
        Some((_, items)) => items,
        None => vec![reply],
    };
    if sort {
        if t == b"hash" {
            let mut pairs: Vec<Vec<u8>> = items.chunks(2).map(|p| p.concat()).collect();
            pairs.sort();
            items = pairs;
        } else {
            items.sort();
        }
    }
    let mut out = vec![t];
    out.extend(items);
    out
}

fn element(rng: &mut Rng, kind: u64, i: usize) -> String {
    match kind {
        0 => format!("{}", rng.range(-100_000, 100_000)),
        1 => format!("m{i}-{}", rng.below(1000)),
        2 => format!("{}", rng.range(-(1 << 61), 1 << 61)),
        _ => format!("{i}-{}", "long".repeat(1 + rng.below(40) as usize)),
    }
}

/// Commands creating `n` random keys of every type, small and large, with
/// integer, short, wide-integer and long elements.
fn random_keys(rng: &mut Rng, n: usize) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for k in 0..n {
        let key = format!("k{k}");
        let size = if rng.pct(30) {
            100 + rng.below(600) as usize
        } else {
            1 + rng.below(12) as usize
        };
        let kind = rng.below(4);
        let mut cmd: Vec<String> = Vec::new();
        match rng.below(5) {
            0 => {
                let v = match rng.below(4) {
                    0 => format!("{}", rng.range(-(1 << 61), 1 << 61)),
                    1 => "abc".repeat(1 + rng.below(200) as usize),
                    2 => String::new(),
                    _ => element(rng, kind, 0),
                };
                cmd.extend(["SET".into(), key.clone(), v]);
            }
            1 => {
                cmd.extend(["RPUSH".into(), key.clone()]);
                cmd.extend((0..size).map(|i| element(rng, kind, i)));
            }
            2 => {
                cmd.extend(["SADD".into(), key.clone()]);
                cmd.extend((0..size).map(|i| element(rng, kind, i)));
            }
            3 => {
                cmd.extend(["ZADD".into(), key.clone()]);
                for i in 0..size {
                    let score = match rng.below(3) {
                        0 => format!("{}", rng.range(-1000, 1000)),
                        1 => format!("{}", rng.range(-1_000_000, 1_000_000) as f64 / 7.0),
                        _ => ["inf", "-inf", "0", "1e300", "-2.5e-10"][rng.below(5) as usize]
                            .to_string(),
                    };
                    cmd.push(score);
                    cmd.push(element(rng, kind, i));
                }
            }
            _ => {
                cmd.extend(["HSET".into(), key.clone()]);
                for i in 0..size {
                    cmd.push(element(rng, kind, i));
                    let vkind = rng.below(4);
                    cmd.push(element(rng, vkind, i));
                }
            }
        }
        out.push((key, cmd));
    }
    out
}

fn run(c: &mut RawConn, cmd: &[String]) -> Vec<u8> {
    let args: Vec<&[u8]> = cmd.iter().map(|s| s.as_bytes()).collect();
    c.cmd(&args)
}

/// The same random keys on both servers; each side RESTOREs the other's
/// DUMP, and the restored value must read as the original.
#[test]
fn dump_restore_both_ways() {
    if skip("dump_restore_both_ways") {
        return;
    }
    let redis = Server::redis(&[]);
    let tessera = Server::tessera(&["--shards", "3"]);
    let (mut r, mut t) = (redis.raw(), tessera.raw());
    let mut rng = Rng::new(6);
    let keys = random_keys(&mut rng, 150);
    for (_, cmd) in &keys {
        let a = run(&mut r, cmd);
        let b = run(&mut t, cmd);
        assert_eq!(a, b, "{:?}", &cmd[..2]);
    }
    for (key, cmd) in &keys {
        let k = key.as_bytes();
        let want = content(&mut r, k);
        assert_eq!(content(&mut t, k), want, "{:?}", &cmd[..2]);
        let from_redis = reply_payload(&r.cmd(&[b"DUMP", k])).unwrap();
        let from_tessera = reply_payload(&t.cmd(&[b"DUMP", k])).unwrap();
        let dst = format!("restored-{key}");
        let d = dst.as_bytes();
        assert_eq!(
            t.cmd(&[b"RESTORE", d, b"0", &from_redis]),
            b"+OK\r\n",
            "{key}"
        );
        assert_eq!(
            r.cmd(&[b"RESTORE", d, b"0", &from_tessera]),
            b"+OK\r\n",
            "{key}"
        );
        assert_eq!(
            content(&mut t, d),
            want,
            "Redis's DUMP of {key} restored into Tessera"
        );
        assert_eq!(
            content(&mut r, d),
            want,
            "Tessera's DUMP of {key} restored into Redis"
        );
        // Both payloads decode with engine::rdb too.
        for p in [&from_redis, &from_tessera] {
            rdb::restore_payload(p, EncLimits::default()).unwrap();
        }
    }
}

/// Redis loads the committed Redis-written file; Tessera RESTOREs every
/// key of it (read with `rdb::Reader`, re-encoded with `dump_payload`),
/// and both read the same.
#[test]
fn redis_written_file_restored_into_tessera() {
    if skip("redis_written_file_restored_into_tessera") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tessera-rdb-fixture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/redis-7.0.15.rdb"
    );
    std::fs::copy(fixture, dir.join("fixture.rdb")).unwrap();
    let d = dir.to_str().unwrap();
    let redis = Server::redis(&["--dir", d, "--dbfilename", "fixture.rdb"]);
    let tessera = Server::tessera(&["--shards", "2"]);
    let (mut r, mut t) = (redis.raw(), tessera.raw());
    let mut reader =
        rdb::Reader::new(std::fs::File::open(fixture).unwrap(), EncLimits::default()).unwrap();
    let mut n = 0;
    while let Some(l) = reader.next().unwrap() {
        let db = l.db.to_string();
        for c in [&mut r, &mut t] {
            assert_eq!(c.cmd(&[b"SELECT", db.as_bytes()]), b"+OK\r\n");
        }
        let p = rdb::dump_payload(&l.value);
        let ttl = if l.expire_at_ms == 0 {
            "0".to_string()
        } else {
            l.expire_at_ms.to_string()
        };
        assert_eq!(
            t.cmd(&[b"RESTORE", &l.key, ttl.as_bytes(), &p, b"ABSTTL"]),
            b"+OK\r\n"
        );
        assert_eq!(
            content(&mut t, &l.key),
            content(&mut r, &l.key),
            "{:?}",
            String::from_utf8_lossy(&l.key)
        );
        assert_eq!(
            t.cmd(&[b"EXPIRETIME", &l.key]),
            r.cmd(&[b"EXPIRETIME", &l.key])
        );
        n += 1;
    }
    assert_eq!(n, 13);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A whole file written by `engine::rdb` (values taken from Tessera through
/// DUMP, two databases, TTLs) is loaded by redis-server, which then holds
/// what Tessera holds.
#[test]
fn redis_loads_file_written_by_engine() {
    if skip("redis_loads_file_written_by_engine") {
        return;
    }
    let tessera = Server::tessera(&["--shards", "2"]);
    let mut t = tessera.raw();
    let mut rng = Rng::new(11);
    let keys = random_keys(&mut rng, 120);
    for (_, cmd) in &keys {
        run(&mut t, cmd);
    }
    let mut file = Vec::new();
    rdb::write_header(&mut file, 1_800_000_000, 12345, false);
    for db in [0usize, 5] {
        rdb::write_select_db(&mut file, db);
        rdb::write_resize_db(&mut file, keys.len() as u64, 1);
        for (i, (key, _)) in keys.iter().enumerate() {
            let p = reply_payload(&t.cmd(&[b"DUMP", key.as_bytes()])).unwrap();
            let value = rdb::restore_payload(&p, EncLimits::default()).unwrap();
            let at = if i == 0 { 4_102_444_800_000 } else { 0 };
            rdb::write_entry(&mut file, key.as_bytes(), (&value).into(), at, db == 0);
        }
    }
    rdb::write_eof(&mut file);
    let crc = rdb::crc64(0, &file);
    file.extend_from_slice(&crc.to_le_bytes());

    let dir = std::env::temp_dir().join(format!("tessera-rdb-written-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("t.rdb"), &file).unwrap();
    let redis = Server::redis(&["--dir", dir.to_str().unwrap(), "--dbfilename", "t.rdb"]);
    let mut r = redis.raw();
    for db in [b"0", b"5"] {
        assert_eq!(r.cmd(&[b"SELECT", db]), b"+OK\r\n");
        assert_eq!(
            r.cmd(&[b"DBSIZE"]),
            format!(":{}\r\n", keys.len()).into_bytes()
        );
        for (key, _) in &keys {
            let k = key.as_bytes();
            assert_eq!(content(&mut r, k), content(&mut t, k), "{key}");
        }
        assert_eq!(r.cmd(&[b"EXPIRETIME", b"k0"]), b":4102444800\r\n");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
