//! HyperLogLogs through the real binary: PFCOUNT and PFMERGE over keys on
//! different shards (run atomically by the scratch layer), what PFCOUNT's
//! cache write propagates to the append-only file (compared with the file
//! Redis writes for the same commands), sketches surviving a snapshot and
//! restart byte for byte, the estimate of a degenerate sketch, and
//! PFSELFTEST.
//!
//! Validate against Redis (the shard-layout assertions hold trivially
//! there): `TESSERA_TEST_BIN=/usr/bin/redis-server cargo test --test hll`.

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

fn q<T: redis::FromRedisValue>(con: &mut redis::Connection, args: &[&[u8]]) -> T {
    let mut c = redis::cmd(std::str::from_utf8(args[0]).expect("ASCII command"));
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(con)
        .unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(&args.concat())))
}

fn cmd<T: redis::FromRedisValue>(con: &mut redis::Connection, args: &[&str]) -> T {
    let b: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    q(con, &b)
}

fn pfadd(con: &mut redis::Connection, key: &str, elements: impl Iterator<Item = String>) -> i64 {
    let mut c = redis::cmd("PFADD");
    c.arg(key);
    for e in elements {
        c.arg(e);
    }
    c.query(con).expect("PFADD")
}

fn registers(con: &mut redis::Connection, key: &str) -> Vec<i64> {
    cmd(con, &["PFDEBUG", "GETREG", key])
}

fn count_and_merge_across_shards(layout: Layout) {
    let srv = server_in(layout, &[]);
    let mut con = srv.conn();
    // Six sources, two on each shard, of overlapping ranges; `all` gets
    // every element, so its registers are the union's.
    let src = keys_in(layout, "src", 6);
    let [dest, all, fresh] = <[String; 3]>::try_from(keys_in(layout, "d", 3)).unwrap();
    for (i, k) in src.iter().enumerate() {
        // The last one dense: 3000 elements.
        let n = if i == 5 { 3000 } else { 200 };
        let els = (i * 100..i * 100 + n).map(|j| format!("el:{j}"));
        assert_eq!(pfadd(&mut con, k, els), 1);
        pfadd(
            &mut con,
            &all,
            (i * 100..i * 100 + n).map(|j| format!("el:{j}")),
        );
    }
    assert_eq!(
        cmd::<String>(&mut con, &["PFDEBUG", "ENCODING", &src[0]]),
        "sparse"
    );
    assert_eq!(
        cmd::<String>(&mut con, &["PFDEBUG", "ENCODING", &src[5]]),
        "dense"
    );
    let want: i64 = cmd(&mut con, &["PFCOUNT", &all]);
    let mut count = vec!["PFCOUNT"];
    count.extend(src.iter().map(String::as_str));
    assert_eq!(cmd::<i64>(&mut con, &count), want);
    // Missing keys are empty sketches, wherever they live.
    count.push("nosuch:a");
    count.push("nosuch:b");
    assert_eq!(cmd::<i64>(&mut con, &count), want);
    // PFCOUNT of several keys caches nothing: every source stays stale.
    for k in &src {
        let flag: Vec<u8> = cmd(&mut con, &["GETRANGE", k, "15", "15"]);
        assert_eq!(flag, [0x80], "{k}");
    }

    // PFMERGE into a destination on another shard than most sources.
    let mut merge = vec!["PFMERGE", dest.as_str()];
    merge.extend(src.iter().map(String::as_str));
    assert_eq!(cmd::<String>(&mut con, &merge), "OK");
    assert_eq!(cmd::<i64>(&mut con, &["PFCOUNT", &dest]), want);
    assert_eq!(registers(&mut con, &dest), registers(&mut con, &all));
    // A dense source made the destination dense: its registers are the
    // bytes of `all`'s.
    assert_eq!(
        cmd::<String>(&mut con, &["PFDEBUG", "ENCODING", &dest]),
        "dense"
    );
    let a: Vec<u8> = cmd(&mut con, &["GETRANGE", &dest, "16", "-1"]);
    let b: Vec<u8> = cmd(&mut con, &["GETRANGE", &all, "16", "-1"]);
    assert_eq!(a, b);
    // Sources are untouched by the merge.
    assert_eq!(
        cmd::<String>(&mut con, &["PFDEBUG", "ENCODING", &src[0]]),
        "sparse"
    );

    // Sparse sources only: a sparse destination, its TTL kept.
    let sparse_src = &src[..3];
    let _: i64 = cmd(&mut con, &["PFADD", &fresh, "own"]);
    let _: i64 = cmd(&mut con, &["EXPIRE", &fresh, "1000"]);
    let mut merge = vec!["PFMERGE", fresh.as_str()];
    merge.extend(sparse_src.iter().map(String::as_str));
    assert_eq!(cmd::<String>(&mut con, &merge), "OK");
    assert_eq!(
        cmd::<String>(&mut con, &["PFDEBUG", "ENCODING", &fresh]),
        "sparse"
    );
    assert_eq!(cmd::<i64>(&mut con, &["TTL", &fresh]), 1000);
    let mut count = vec!["PFCOUNT", "nosuch:c"];
    count.extend(sparse_src.iter().map(String::as_str));
    let union: i64 = cmd(&mut con, &count);
    assert!(cmd::<i64>(&mut con, &["PFCOUNT", &fresh]) >= union);

    // A destination alone is created, on any shard.
    for k in keys_in(layout, "only", 3) {
        assert_eq!(cmd::<String>(&mut con, &["PFMERGE", &k]), "OK");
        assert_eq!(cmd::<i64>(&mut con, &["PFCOUNT", &k]), 0);
        assert_eq!(cmd::<i64>(&mut con, &["STRLEN", &k]), 18);
    }
}

fn errors_across_shards_change_nothing(layout: Layout) {
    let srv = server_in(layout, &[]);
    let mut con = srv.conn();
    let [a, s, l, dest, c] = <[String; 5]>::try_from(keys_in(layout, "e", 5)).unwrap();
    let _: i64 = cmd(&mut con, &["PFADD", &a, "x", "y"]);
    let _: () = cmd(&mut con, &["SET", &s, "not a sketch"]);
    let _: i64 = cmd(&mut con, &["RPUSH", &l, "x"]);
    let mut raw = srv.raw();
    let not_hll = b"-WRONGTYPE Key is not a valid HyperLogLog string value.\r\n";
    assert_eq!(raw.cmd_str(&["PFCOUNT", &a, &s]), not_hll);
    assert_eq!(raw.cmd_str(&["PFMERGE", &dest, &a, &s]), not_hll);
    assert_eq!(
        raw.cmd_str(&["PFMERGE", &dest, &a, &l]),
        b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
    );
    assert_eq!(raw.cmd_str(&["EXISTS", &dest]), b":0\r\n");
    // A sparse body one register short, on another shard than `dest`.
    let _: i64 = cmd(&mut con, &["PFADD", &c]);
    raw.cmd(&[b"SETRANGE", c.as_bytes(), b"16", b"\x7f\xfe"]);
    let corrupt = b"-INVALIDOBJ Corrupted HLL object detected\r\n";
    assert_eq!(raw.cmd_str(&["PFCOUNT", &a, &c]), corrupt);
    assert_eq!(raw.cmd_str(&["PFMERGE", &dest, &a, &c]), corrupt);
    assert_eq!(raw.cmd_str(&["EXISTS", &dest]), b":0\r\n");
}

/// A fresh directory of its own (the same test runs in several layouts
/// at once, so a name per process is not enough).
fn tmp_dir(name: &str) -> PathBuf {
    common::unique_temp_dir(name)
}

fn incr_aof(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join("appendonlydir/appendonly.aof.1.incr.aof")).unwrap()
}

/// The same commands on a server with an AOF; the incremental file.
fn aof_of(flavor_redis: bool, dir: &Path) -> Vec<u8> {
    let d = dir.to_str().unwrap();
    let args = ["--dir", d, "--appendonly", "yes", "--appendfsync", "always"];
    let srv = if flavor_redis {
        Server::redis(&args)
    } else {
        server(&args)
    };
    let mut con = srv.conn();
    // One shard for all (a multi-shard PFMERGE is logged inside
    // MULTI/EXEC, as every multi-shard write).
    let (h, h2, m) = ("{h}", "{h}2", "{h}m");
    let _: i64 = cmd(&mut con, &["PFADD", h, "a", "b"]);
    let _: i64 = cmd(&mut con, &["PFADD", h, "a"]);
    // Stale cache: computed, stored, propagated.
    let _: i64 = cmd(&mut con, &["PFCOUNT", h]);
    // Valid cache: nothing changes.
    let _: i64 = cmd(&mut con, &["PFCOUNT", h]);
    let _: i64 = cmd(&mut con, &["PFADD", h2, "c"]);
    // Several keys: nothing cached, nothing propagated.
    let _: i64 = cmd(&mut con, &["PFCOUNT", h, h2]);
    let _: String = cmd(&mut con, &["PFMERGE", m, h, h2]);
    let _: String = cmd(&mut con, &["PFMERGE", m]);
    // A conversion is propagated, a no-op is not.
    let _: i64 = cmd(&mut con, &["PFDEBUG", "TODENSE", h]);
    let _: i64 = cmd(&mut con, &["PFDEBUG", "TODENSE", h]);
    let _: Vec<i64> = cmd(&mut con, &["PFDEBUG", "GETREG", h2]);
    let _: Vec<i64> = cmd(&mut con, &["PFDEBUG", "GETREG", h2]);
    let _: String = cmd(&mut con, &["PFDEBUG", "ENCODING", m]);
    drop(con);
    drop(srv);
    incr_aof(dir)
}

#[test]
fn propagation_matches_redis() {
    let ours = aof_of(false, &tmp_dir("aof-t"));
    let text = String::from_utf8_lossy(&ours).to_lowercase();
    assert_eq!(text.matches("pfcount").count(), 1, "{text}");
    assert_eq!(text.matches("pfdebug").count(), 2, "{text}");
    assert_eq!(text.matches("pfmerge").count(), 2, "{text}");
    assert_eq!(text.matches("pfadd").count(), 2, "{text}");
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

fn sketches_survive_a_restart_byte_for_byte(layout: Layout) {
    let dir = tmp_dir("rdb");
    let d = dir.to_str().unwrap();
    let keys = keys_in(layout, "keep", 3);
    let before: Vec<Vec<u8>> = {
        let srv = server_in(layout, &["--dir", d]);
        let mut con = srv.conn();
        for (i, k) in keys.iter().enumerate() {
            pfadd(&mut con, k, (0..(i + 1) * 1500).map(|j| format!("{j}")));
        }
        let _: i64 = cmd(&mut con, &["PFCOUNT", &keys[0]]);
        let _: String = cmd(&mut con, &["SAVE"]);
        keys.iter().map(|k| cmd(&mut con, &["GET", k])).collect()
    };
    let srv = server_in(layout, &["--dir", d]);
    let mut con = srv.conn();
    for (k, bytes) in keys.iter().zip(&before) {
        let now: Vec<u8> = cmd(&mut con, &["GET", k]);
        assert_eq!(&now, bytes, "{k}");
    }
    // Redis reads the file too and counts the same.
    if common::redis_available() && !testing_real_redis() {
        let counts: Vec<i64> = keys
            .iter()
            .map(|k| cmd(&mut con, &["PFCOUNT", k]))
            .collect();
        drop(con);
        drop(srv);
        let r = Server::redis(&["--dir", d]);
        let mut con = r.conn();
        for (k, c) in keys.iter().zip(counts) {
            assert_eq!(cmd::<i64>(&mut con, &["PFCOUNT", k]), c, "{k}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn degenerate_dense_sketch_counts_as_redis() {
    let srv = server(&[]);
    let mut raw = srv.raw();
    // A dense sketch whose 16384 registers all hold 50, stale cache: the
    // estimate overflows a long long; Redis 7.0.15 replies LLONG_MIN.
    let mut v = b"HYLL\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80".to_vec();
    for _ in 0..4096 {
        v.extend_from_slice(&[0xb2, 0x2c, 0xcb]);
    }
    assert_eq!(raw.cmd(&[b"SET", b"deg", &v]), b"+OK\r\n");
    for _ in 0..2 {
        // The value cached has its top bit set: it reads back as stale.
        assert_eq!(
            raw.cmd_str(&["PFCOUNT", "deg"]),
            b":-9223372036854775808\r\n"
        );
    }
    assert_eq!(
        raw.cmd_str(&["PFCOUNT", "deg", "nosuch"]),
        b":-9223372036854775808\r\n"
    );
    assert_eq!(
        raw.cmd_str(&["GETRANGE", "deg", "8", "15"]),
        b"$8\r\n\0\0\0\0\0\0\0\x80\r\n"
    );
}

#[test]
fn selftest_passes() {
    use std::io::{Read, Write};
    // PFSELFTEST runs for seconds in a debug build (6 s on a loaded 2-core
    // machine), longer than the harness allows one read; its own deadline.
    const SELFTEST_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);
    let srv = server(&[]);
    let mut s = std::net::TcpStream::connect(srv.addr()).unwrap();
    s.set_read_timeout(Some(SELFTEST_DEADLINE)).unwrap();
    s.write_all(b"*1\r\n$10\r\nPFSELFTEST\r\n").unwrap();
    let mut reply = [0u8; 5];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"+OK\r\n");
}

per_layout!(
    count_and_merge_across_shards,
    errors_across_shards_change_nothing,
    sketches_survive_a_restart_byte_for_byte,
);
