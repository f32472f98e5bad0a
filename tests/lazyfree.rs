//! The `lazyfree-*` directives against the real binary: each deletion path
//! frees a big value on the background thread only when its directive says
//! `yes` (Tessera's default for all six, where Redis 7.0 says `no`), and
//! UNLINK and FLUSHALL / FLUSHDB ASYNC always do.
//!
//! Observed through INFO's `lazyfreed_objects`: after waiting for
//! `lazyfree_pending_objects` to drain, it grew by the values (or, for a
//! flush, the keys) the background thread freed; a value freed inline on
//! the shard's thread leaves it unchanged. Every wait is bounded.

mod common;

use std::time::{Duration, Instant};

use common::{Layout, RawConn, Server};

/// Members of the big sets: far above the lazyfree threshold (64), and
/// enough that freeing one inline is a latency event at a 1 ms threshold.
const BIG: usize = 200_000;

fn info_u64(c: &mut RawConn, field: &str) -> u64 {
    let info = String::from_utf8(c.cmd_str(&["INFO", "everything"])).expect("utf8");
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in INFO"))
}

/// `lazyfreed_objects` once nothing waits for the background thread.
fn freed(c: &mut RawConn) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    while info_u64(c, "lazyfree_pending_objects") != 0 {
        assert!(Instant::now() < deadline, "lazyfree never drained");
        std::thread::sleep(Duration::from_millis(5));
    }
    info_u64(c, "lazyfreed_objects")
}

/// Stores a set of [`BIG`] members under `key`.
fn big_set(c: &mut RawConn, key: &str) {
    for chunk in 0..BIG / 10_000 {
        let mut args: Vec<String> = vec!["SADD".into(), key.into()];
        args.extend((chunk * 10_000..(chunk + 1) * 10_000).map(|i| i.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(c.cmd_str(&args), b":10000\r\n");
    }
}

fn ok(c: &mut RawConn, args: &[&str]) {
    assert_eq!(c.cmd_str(args), b"+OK\r\n", "{args:?}");
}

/// Sets a big set to expire now and waits (bounded) until the active
/// expire cycle deleted it (nothing reads the key meanwhile).
fn expire_big_set_in_the_cycle(c: &mut RawConn) {
    big_set(c, "mybigkey");
    assert_eq!(c.cmd_str(&["PEXPIRE", "mybigkey", "50"]), b":1\r\n");
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.cmd_str(&["DBSIZE"]) != b":0\r\n" {
        assert!(Instant::now() < deadline, "the key never expired");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Redis's default for `lazyfree-lazy-expire`: the expire cycle frees the
/// set itself, and is slow enough to be a latency event (what Redis's
/// unit/latency-monitor "LATENCY of expire events" expects).
#[test]
fn lazy_expire_no_frees_inline_in_the_expire_cycle() {
    let s = Server::tessera(&[
        "--lazyfree-lazy-expire",
        "no",
        "--latency-monitor-threshold",
        "1",
    ]);
    let mut c = s.raw();
    let before = freed(&mut c);
    expire_big_set_in_the_cycle(&mut c);
    assert_eq!(freed(&mut c), before, "freed in the background");
    let latest = String::from_utf8(c.cmd_str(&["LATENCY", "LATEST"])).expect("utf8");
    assert!(latest.contains("expire-cycle"), "{latest}");
}

/// Tessera's default: the expire cycle hands the set to the background.
#[test]
fn lazy_expire_yes_frees_in_the_background() {
    let s = Server::tessera(&[]);
    let mut c = s.raw();
    let before = freed(&mut c);
    expire_big_set_in_the_cycle(&mut c);
    assert_eq!(freed(&mut c), before + 1);
    // Expired on access too (EXPIRE in the past: Redis's
    // expireGenericCommand asks lazyfree-lazy-expire as well).
    big_set(&mut c, "k");
    ok(&mut c, &["CONFIG", "SET", "lazyfree-lazy-expire", "no"]);
    assert_eq!(c.cmd_str(&["EXPIRE", "k", "-1"]), b":1\r\n");
    assert_eq!(freed(&mut c), before + 1);
    ok(&mut c, &["CONFIG", "SET", "lazyfree-lazy-expire", "yes"]);
    big_set(&mut c, "k");
    assert_eq!(c.cmd_str(&["EXPIRE", "k", "-1"]), b":1\r\n");
    assert_eq!(freed(&mut c), before + 2);
}

#[test]
fn del_follows_lazy_user_del_unlink_is_always_lazy() {
    let s = Server::tessera(&[]);
    let mut c = s.raw();
    ok(&mut c, &["CONFIG", "SET", "lazyfree-lazy-user-del", "no"]);
    let before = freed(&mut c);
    big_set(&mut c, "a");
    assert_eq!(c.cmd_str(&["DEL", "a"]), b":1\r\n");
    assert_eq!(freed(&mut c), before);
    big_set(&mut c, "a");
    assert_eq!(c.cmd_str(&["UNLINK", "a"]), b":1\r\n");
    assert_eq!(freed(&mut c), before + 1);
    ok(&mut c, &["CONFIG", "SET", "lazyfree-lazy-user-del", "yes"]);
    big_set(&mut c, "a");
    assert_eq!(c.cmd_str(&["DEL", "a"]), b":1\r\n");
    assert_eq!(freed(&mut c), before + 2);
}

/// Implicit deletes: an overwrite by SET, RENAME's target, a STORE
/// command's empty result (on one shard, and across shards where the
/// command runs on gathered copies).
#[test]
fn implicit_deletes_follow_lazy_server_del() {
    let s = Layout::new(4, true).tessera(&[]);
    let mut c = s.raw();
    let apart = common::keys_across_shards("x", 2, 4);
    let mut expect = freed(&mut c);
    for lazy in ["no", "yes"] {
        ok(&mut c, &["CONFIG", "SET", "lazyfree-lazy-server-del", lazy]);
        let one = u64::from(lazy == "yes");
        big_set(&mut c, "{t}a");
        ok(&mut c, &["SET", "{t}a", "v"]);
        expect += one;
        assert_eq!(freed(&mut c), expect, "SET over a big set, {lazy}");
        big_set(&mut c, "{t}b");
        ok(&mut c, &["RENAME", "{t}a", "{t}b"]);
        expect += one;
        assert_eq!(freed(&mut c), expect, "RENAME onto a big set, {lazy}");
        big_set(&mut c, "{t}c");
        assert_eq!(
            c.cmd_str(&["SINTERSTORE", "{t}c", "{t}nothing", "{t}c"]),
            b":0\r\n"
        );
        expect += one;
        assert_eq!(freed(&mut c), expect, "SINTERSTORE's empty result, {lazy}");
        big_set(&mut c, &apart[0]);
        assert_eq!(
            c.cmd_str(&["SINTERSTORE", &apart[0], &apart[1], &apart[0]]),
            b":0\r\n"
        );
        // The command ran on a gathered copy, freed too (as the shards
        // would free it): the original and the copy with `yes`.
        let got = freed(&mut c);
        assert_eq!(got, expect + 2 * one, "across shards, {lazy}");
        expect = got;
        ok(&mut c, &["FLUSHALL", "SYNC"]);
    }
}

/// FLUSHALL / FLUSHDB without an option follow lazyfree-lazy-user-flush;
/// ASYNC and SYNC say for themselves. A flush counts the keys it frees.
#[test]
fn flush_follows_lazy_user_flush_unless_told() {
    let s = Server::tessera(&[]);
    let mut c = s.raw();
    let keys = 200u64;
    let fill = |c: &mut RawConn| {
        for i in 0..keys {
            ok(c, &["SET", &format!("k{i}"), "v"]);
        }
    };
    let before = freed(&mut c);
    ok(&mut c, &["CONFIG", "SET", "lazyfree-lazy-user-flush", "no"]);
    fill(&mut c);
    ok(&mut c, &["FLUSHALL"]);
    fill(&mut c);
    ok(&mut c, &["FLUSHDB"]);
    fill(&mut c);
    ok(&mut c, &["FLUSHALL", "SYNC"]);
    assert_eq!(freed(&mut c), before);
    fill(&mut c);
    ok(&mut c, &["FLUSHDB", "ASYNC"]);
    assert_eq!(freed(&mut c), before + keys);
    ok(
        &mut c,
        &["CONFIG", "SET", "lazyfree-lazy-user-flush", "yes"],
    );
    fill(&mut c);
    ok(&mut c, &["FLUSHALL"]);
    assert_eq!(freed(&mut c), before + 2 * keys);
    fill(&mut c);
    ok(&mut c, &["FLUSHALL", "SYNC"]);
    assert_eq!(freed(&mut c), before + 2 * keys);
}

#[test]
fn eviction_follows_lazy_eviction() {
    let s = Server::tessera(&[]);
    let mut c = s.raw();
    let mut expect = freed(&mut c);
    for (round, lazy) in ["no", "yes"].into_iter().enumerate() {
        ok(&mut c, &["CONFIG", "SET", "lazyfree-lazy-eviction", lazy]);
        big_set(&mut c, "victim");
        ok(
            &mut c,
            &["CONFIG", "SET", "maxmemory-policy", "allkeys-random"],
        );
        // Far below what the server uses: the only key goes at once.
        ok(&mut c, &["CONFIG", "SET", "maxmemory", "1"]);
        let deadline = Instant::now() + Duration::from_secs(30);
        while info_u64(&mut c, "evicted_keys") != round as u64 + 1 {
            assert!(Instant::now() < deadline, "never evicted");
            std::thread::sleep(Duration::from_millis(5));
        }
        ok(&mut c, &["CONFIG", "SET", "maxmemory", "0"]);
        expect += u64::from(lazy == "yes");
        assert_eq!(freed(&mut c), expect, "{lazy}");
    }
}

/// Tessera's defaults differ from Redis 7.0's on purpose (all `yes`,
/// as Valkey 8): so this is checked here, not in tests/diff.
#[test]
fn directives_default_to_yes_and_are_settable() {
    let s = Server::tessera(&[]);
    let mut c = s.raw();
    let names = [
        "lazyfree-lazy-eviction",
        "lazyfree-lazy-expire",
        "lazyfree-lazy-server-del",
        "lazyfree-lazy-user-del",
        "lazyfree-lazy-user-flush",
        "replica-lazy-flush",
    ];
    for n in names {
        let want = format!("*2\r\n${}\r\n{n}\r\n$3\r\nyes\r\n", n.len());
        assert_eq!(c.cmd_str(&["CONFIG", "GET", n]), want.as_bytes(), "{n}");
        ok(&mut c, &["CONFIG", "SET", n, "no"]);
        let want = format!("*2\r\n${}\r\n{n}\r\n$2\r\nno\r\n", n.len());
        assert_eq!(c.cmd_str(&["CONFIG", "GET", n]), want.as_bytes(), "{n}");
    }
    ok(&mut c, &["CONFIG", "SET", "slave-lazy-flush", "yes"]);
    assert_eq!(
        c.cmd_str(&["CONFIG", "GET", "replica-lazy-flush"]),
        b"*2\r\n$18\r\nreplica-lazy-flush\r\n$3\r\nyes\r\n"
    );
    assert_eq!(
        c.cmd_str(&["CONFIG", "SET", "lazyfree-lazy-expire", "maybe"]),
        &b"-ERR CONFIG SET failed (possibly related to argument 'lazyfree-lazy-expire') - \
           argument must be 'yes' or 'no'\r\n"[..]
    );
}
