//! GEO commands through the real binary: STORE / STOREDIST /
//! GEOSEARCHSTORE into destinations on other shards than the source
//! (`--shards 3`: the scratch layer runs the search on copies under the
//! transaction layer's locks), checked against the same commands with
//! both keys on one shard, inside MULTI/EXEC and under WATCH; and what
//! the GEO writes put in the append-only file, compared with the file
//! Redis 7.0 writes for the same commands (GEOADD is logged as the ZADD
//! Redis rewrites it to).
//!
//! Validate against Redis (the shard-layout assertions hold trivially
//! there): `TESSERA_TEST_BIN=/usr/bin/redis-server cargo test --test geo`.

mod common;

use std::path::{Path, PathBuf};

use common::{testing_real_redis, Layout, Server};

fn server(extra: &[&str]) -> Server {
    let mut args = if testing_real_redis() {
        vec![]
    } else {
        vec!["--shards", "3"]
    };
    args.extend_from_slice(extra);
    Server::tessera(&args)
}

/// Tessera in `layout` followed by `extra`: the multi-shard tests run in
/// each of [`common::LAYOUTS`] (`per_layout!`).
fn server_in(layout: Layout, extra: &[&str]) -> Server {
    layout.tessera(extra)
}

/// `count` keys, the i-th on shard `i % layout.shards`.
fn keys_in(layout: Layout, prefix: &str, count: usize) -> Vec<String> {
    common::keys_across_shards(prefix, count, layout.shards)
}

fn cmd<T: redis::FromRedisValue>(con: &mut redis::Connection, args: &[&str]) -> T {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(con)
        .unwrap_or_else(|e| panic!("{}: {e}", args.join(" ")))
}

fn zrange(con: &mut redis::Connection, key: &str) -> Vec<String> {
    cmd(con, &["ZRANGE", key, "0", "-1", "WITHSCORES"])
}

/// Points around Sicily and a few far away, added to `key`.
fn add_points(con: &mut redis::Connection, key: &str) {
    let _: i64 = cmd(
        con,
        &[
            "GEOADD",
            key,
            "13.361389",
            "38.115556",
            "Palermo",
            "15.087269",
            "37.502669",
            "Catania",
            "12.5",
            "37.8",
            "Marsala",
            "13.58",
            "37.31",
            "Agrigento",
            "14.55",
            "37.07",
            "Gela",
            "2.35",
            "48.85",
            "Paris",
            "-73.98",
            "40.75",
            "NewYork",
        ],
    );
}

/// Every store form, with the destination on each shard in turn: the
/// stored set equals the one stored next to the source.
fn stores_into_other_shards_equal_stores_on_one_shard(layout: Layout) {
    let srv = server_in(layout, &[]);
    let mut con = srv.conn();
    let [src, d1, d2] = <[String; 3]>::try_from(keys_in(layout, "g", 3)).unwrap();
    // The reference: source and destination share a hash tag.
    let (rsrc, rdst) = ("{r}src", "{r}dst");
    add_points(&mut con, &src);
    add_points(&mut con, rsrc);
    let forms: &[&[&str]] = &[
        &[
            "GEORADIUS",
            "$src",
            "14",
            "37.5",
            "200",
            "km",
            "STORE",
            "$dst",
        ],
        &[
            "GEORADIUS",
            "$src",
            "14",
            "37.5",
            "200",
            "km",
            "STOREDIST",
            "$dst",
            "DESC",
        ],
        &[
            "GEORADIUS",
            "$src",
            "14",
            "37.5",
            "300",
            "mi",
            "COUNT",
            "2",
            "STORE",
            "$dst",
        ],
        &[
            "GEORADIUSBYMEMBER",
            "$src",
            "Palermo",
            "150",
            "km",
            "STOREDIST",
            "$dst",
        ],
        &[
            "GEORADIUSBYMEMBER",
            "$src",
            "Paris",
            "1",
            "km",
            "STORE",
            "$dst",
        ],
        &[
            "GEOSEARCHSTORE",
            "$dst",
            "$src",
            "FROMMEMBER",
            "Gela",
            "BYBOX",
            "400",
            "300",
            "km",
        ],
        &[
            "GEOSEARCHSTORE",
            "$dst",
            "$src",
            "FROMLONLAT",
            "14",
            "38",
            "BYRADIUS",
            "9000",
            "km",
            "COUNT",
            "4",
            "STOREDIST",
        ],
    ];
    for form in forms {
        let with = |s: &str, d: &str| -> Vec<String> {
            form.iter()
                .map(|a| a.replace("$src", s).replace("$dst", d))
                .collect()
        };
        let reference = with(rsrc, rdst);
        let refs: Vec<&str> = reference.iter().map(String::as_str).collect();
        let n: i64 = cmd(&mut con, &refs);
        let want = zrange(&mut con, rdst);
        for dst in [&d1, &d2, &src] {
            // A string with a TTL there first: replaced, TTL gone.
            if *dst != src {
                let _: () = cmd(&mut con, &["SET", dst, "x", "EX", "100"]);
            }
            let args = with(&src, dst);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            assert_eq!(cmd::<i64>(&mut con, &args), n, "{args:?}");
            assert_eq!(zrange(&mut con, dst), want, "{args:?}");
            if *dst != src {
                assert_eq!(cmd::<i64>(&mut con, &["TTL", dst]), -1, "{args:?}");
            } else {
                // The source stored over itself: put it back.
                let _: i64 = cmd(&mut con, &["DEL", &src]);
                add_points(&mut con, &src);
            }
        }
    }
    // Nothing found: the destination on another shard is deleted.
    let _: () = cmd(&mut con, &["SET", &d1, "x"]);
    let n: i64 = cmd(
        &mut con,
        &["GEORADIUS", &src, "50", "50", "1", "m", "STORE", &d1],
    );
    assert_eq!(n, 0);
    assert_eq!(cmd::<i64>(&mut con, &["EXISTS", &d1]), 0);
    // A missing source too.
    let _: () = cmd(&mut con, &["SET", &d2, "x"]);
    let n: i64 = cmd(
        &mut con,
        &[
            "GEOSEARCHSTORE",
            &d2,
            "nosuch",
            "FROMLONLAT",
            "0",
            "0",
            "BYRADIUS",
            "1",
            "m",
        ],
    );
    assert_eq!(n, 0);
    assert_eq!(cmd::<i64>(&mut con, &["EXISTS", &d2]), 0);
}

/// Errors found while parsing or on the source leave the destination on
/// the other shard as it was.
fn failed_stores_across_shards_change_nothing(layout: Layout) {
    let srv = server_in(layout, &[]);
    let mut con = srv.conn();
    let [src, dst, s] = <[String; 3]>::try_from(keys_in(layout, "e", 3)).unwrap();
    add_points(&mut con, &src);
    let _: () = cmd(&mut con, &["SET", &dst, "keep"]);
    let _: () = cmd(&mut con, &["SET", &s, "a string"]);
    let mut raw = srv.raw();
    let cases: &[(&[&str], &[u8])] = &[
        (
            &["GEORADIUS", &src, "14", "38", "200", "km", "WITHDIST", "STORE", &dst],
            b"-ERR STORE option in GEORADIUS is not compatible with WITHDIST, WITHHASH and WITHCOORD options\r\n",
        ),
        (
            &["GEORADIUSBYMEMBER", &src, "nosuch", "200", "km", "STORE", &dst],
            b"-ERR could not decode requested zset member\r\n",
        ),
        (
            &["GEORADIUS", &s, "14", "38", "200", "km", "STORE", &dst],
            b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        ),
        (
            &["GEOSEARCHSTORE", &dst, &src, "FROMLONLAT", "181", "0", "BYRADIUS", "1", "km"],
            b"-ERR invalid longitude,latitude pair 181.000000,0.000000\r\n",
        ),
        (
            &["GEORADIUS_RO", &src, "14", "38", "200", "km", "STORE", &dst],
            b"-ERR syntax error\r\n",
        ),
    ];
    for (args, want) in cases {
        assert_eq!(raw.cmd_str(args), *want, "{args:?}");
        assert_eq!(raw.cmd_str(&["GET", &dst]), b"$4\r\nkeep\r\n", "{args:?}");
    }
}

/// A cross-shard store is one command to other clients: it fails a WATCH
/// on the destination's shard, and runs inside MULTI/EXEC.
fn stores_across_shards_are_atomic_commands(layout: Layout) {
    let srv = server_in(layout, &[]);
    let mut con = srv.conn();
    let mut other = srv.conn();
    let [src, dst] = <[String; 2]>::try_from(keys_in(layout, "w", 2)).unwrap();
    add_points(&mut con, &src);
    let _: () = cmd(&mut con, &["WATCH", &dst]);
    let n: i64 = cmd(
        &mut other,
        &["GEORADIUS", &src, "14", "37.5", "200", "km", "STORE", &dst],
    );
    assert_eq!(n, 5);
    let _: () = cmd(&mut con, &["MULTI"]);
    let _: () = cmd(&mut con, &["GET", &dst]);
    let r: Option<Vec<redis::Value>> = cmd(&mut con, &["EXEC"]);
    assert!(r.is_none(), "the store fired the WATCH: {r:?}");

    let _: () = cmd(&mut con, &["MULTI"]);
    let _: () = cmd(&mut con, &["DEL", &dst]);
    let _: () = cmd(
        &mut con,
        &[
            "GEORADIUSBYMEMBER",
            &src,
            "Palermo",
            "100",
            "km",
            "STOREDIST",
            &dst,
        ],
    );
    let _: () = cmd(&mut con, &["ZCARD", &dst]);
    let r: Vec<i64> = cmd(&mut con, &["EXEC"]);
    assert_eq!(r, vec![1, 3, 3]);
    let got = zrange(&mut con, &dst);
    assert_eq!(got[0], "Palermo");
    assert_eq!(got[1], "0");
    assert_eq!(got[2], "Marsala");
}

/// A fresh directory of its own (the same test runs in several layouts
/// at once, so a name per process is not enough).
fn tmp_dir(name: &str) -> PathBuf {
    common::unique_temp_dir(name)
}

/// The same GEO writes on a server with an AOF; the incremental file.
fn aof_of(flavor_redis: bool, dir: &Path) -> Vec<u8> {
    let d = dir.to_str().unwrap();
    let args = ["--dir", d, "--appendonly", "yes", "--appendfsync", "always"];
    let srv = if flavor_redis {
        Server::redis(&args)
    } else {
        server(&args)
    };
    let mut con = srv.conn();
    // One shard for all (a multi-shard write is logged inside MULTI/EXEC,
    // as every multi-shard write).
    let (g, d1, d2) = ("{g}", "{g}d1", "{g}d2");
    add_points(&mut con, g);
    // Options are kept, in the order given.
    let _: i64 = cmd(&mut con, &["GEOADD", g, "xx", "CH", "13", "38", "Palermo"]);
    // Nothing changed: nothing logged.
    let _: i64 = cmd(&mut con, &["GEOADD", g, "NX", "0", "0", "Palermo"]);
    // Reads log nothing, GEORADIUS without STORE included.
    let _: Vec<String> = cmd(&mut con, &["GEORADIUS", g, "14", "38", "200", "km"]);
    let _: Vec<String> = cmd(
        &mut con,
        &["GEOSEARCH", g, "FROMMEMBER", "Gela", "BYRADIUS", "5", "km"],
    );
    let _: i64 = cmd(
        &mut con,
        &["GEORADIUS", g, "14", "38", "200", "km", "STORE", d1],
    );
    let _: i64 = cmd(
        &mut con,
        &["GEORADIUSBYMEMBER", g, "Gela", "100", "mi", "STOREDIST", d2],
    );
    let _: i64 = cmd(
        &mut con,
        &[
            "GEOSEARCHSTORE",
            d1,
            g,
            "FROMLONLAT",
            "2",
            "48",
            "BYBOX",
            "500",
            "500",
            "km",
            "STOREDIST",
        ],
    );
    // Empty results: the existing destination is deleted (logged), the
    // missing one is not touched (nothing logged).
    let _: i64 = cmd(
        &mut con,
        &["GEORADIUS", g, "50", "50", "1", "m", "STORE", d2],
    );
    let _: i64 = cmd(
        &mut con,
        &["GEORADIUS", g, "50", "50", "1", "m", "STORE", d2],
    );
    drop(con);
    drop(srv);
    std::fs::read(dir.join("appendonlydir/appendonly.aof.1.incr.aof")).unwrap()
}

#[test]
fn propagation_matches_redis() {
    let ours = aof_of(false, &tmp_dir("aof-t"));
    let text = String::from_utf8_lossy(&ours).to_lowercase();
    assert_eq!(text.matches("zadd").count(), 2, "{text}");
    assert_eq!(text.matches("geoadd").count(), 0, "{text}");
    assert_eq!(text.matches("georadius").count(), 3, "{text}");
    assert_eq!(text.matches("geosearchstore").count(), 1, "{text}");
    if !common::redis_available() {
        eprintln!("skipped the comparison: redis-server not found");
        return;
    }
    let theirs = aof_of(true, &tmp_dir("aof-r"));
    assert_eq!(
        String::from_utf8_lossy(&ours),
        String::from_utf8_lossy(&theirs)
    );
}

per_layout!(
    stores_into_other_shards_equal_stores_on_one_shard,
    failed_stores_across_shards_change_nothing,
    stores_across_shards_are_atomic_commands,
);
