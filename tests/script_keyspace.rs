//! Keyspace-wide commands from scripts (issue 23): DBSIZE, KEYS, SCAN,
//! RANDOMKEY, FLUSHDB, FLUSHALL and SWAPDB through `redis.call`, which a
//! script may make only while it holds every shard
//! (`commands::keys::script`): at one shard, in place with every shard
//! co-hosted, or under whole-shard locks on every shard with its calls
//! reaching each shard's thread (`commands::script::every`).
//!
//! * Every reply is Redis's, byte for byte, from EVAL and FCALL, at one
//!   shard (`one_shard_matches_redis`) and in every layout
//!   (`lines_match_redis`, via `per_layout!`).
//! * "Delete by pattern" (KEYS then DEL of each key) racing writers, in
//!   every layout: every script runs, atomically (it deleted, of each
//!   writer's keys, exactly those written before it: a prefix of the
//!   writer's sequence that covers every SET answered before the script
//!   was sent, and every key it did not delete is still there).
//! * FLUSHALL from a script racing writers: its own DBSIZE right after is
//!   0, and what is left of each writer is a suffix of its sequence that
//!   keeps nothing answered before the last flush.
//!
//! * INFO from a script: every loop's commandstats (and every shard's
//!   keyspace, in the lines above).
//! * With an append-only file, a script's effects on every shard are one
//!   MULTI/EXEC block, in order, the bytes Redis writes.
//!
//! * What the every-shard path used to refuse, in every layout against
//!   redis-server (replies, and a subscriber's messages and keyspace
//!   events, each once and in order): a script that PUBLISHes before its
//!   first keyspace call or undeclared key of another shard (its messages
//!   held while the run may be taken back); one call naming keys of two
//!   shards from a script holding every shard (LMOVE, SMOVE, RENAME,
//!   COPY, ZUNIONSTORE ...), with an isolation race for LMOVE; a script
//!   calling KEYS & co. alone in a multi-shard MULTI/EXEC block (EXEC
//!   locks every shard for a script known to call them, and one that
//!   builds the name at run time learns it).
//!
//! Every reply is awaited with a deadline (10 s read timeouts).
//!
//! Validate against Redis: `TESSERA_TEST_BIN=/usr/bin/redis-server cargo
//! test --test script_keyspace`.

mod common;

use common::{Layout, Server};

/// Lines compared with redis-server at one shard; every reply made
/// order-free inside the script where Redis's is in hash order.
const LINES: &[&[&str]] = &[
    &["FLUSHALL"],
    &["EVAL", "return redis.call('dbsize')", "0"],
    &["EVAL", "return redis.call('keys', '*')", "0"],
    &["EVAL", "return redis.call('randomkey')", "0"],
    &["EVAL", "return redis.call('scan', '0')", "0"],
    &["MSET", "user:1", "a", "user:2", "b", "user:3", "c", "other", "d"],
    // INFO's keyspace from a script: every shard's keys.
    &["EVAL", "return redis.call('info', 'keyspace')", "0"],
    // Inside MULTI/EXEC whose block also reads the keyspace (its locks
    // cover every shard).
    &["MULTI"],
    &["DBSIZE"],
    &["EVAL", "local k = redis.call('keys', 'user:*') table.sort(k) return {k, redis.call('dbsize')}", "0"],
    &["SET", "m", "1"],
    &["EVAL", "redis.call('del', 'm') return redis.call('dbsize')", "0"],
    &["EXEC"],
    &["SET", "gone", "x", "PX", "1"],
    &["EVAL", "return redis.call('dbsize')", "0"],
    &["EVAL", "local k = redis.call('keys', 'user:*') table.sort(k) return k", "0"],
    &["EVAL", "return redis.call('keys', 'oth?r')", "1", "other"],
    &["EVAL", "return redis.call('keys', 'nomatch*')", "0"],
    &["EVAL", "local r = redis.call('scan', 0, 'count', 100) table.sort(r[2]) return r", "0"],
    &["EVAL", "local r = redis.call('scan', 0, 'match', 'user:*', 'count', 100) table.sort(r[2]) return r", "0"],
    &["EVAL", "local r = redis.call('scan', 0, 'type', 'string', 'count', 100) return #r[2]", "0"],
    &["EVAL", "return redis.pcall('scan', 'x')", "0"],
    &["EVAL", "return redis.pcall('scan', 0, 'count', 0)", "0"],
    &["EVAL", "return redis.pcall('scan', 0, 'bogus')", "0"],
    &["EVAL", "return redis.pcall('flushdb', 'bogus')", "0"],
    &["EVAL", "return redis.pcall('dbsize', 'x')", "0"],
    // Read-only scripts may read the keyspace, not flush it.
    &["EVAL_RO", "return {redis.call('dbsize'), #redis.call('keys', '*')}", "0"],
    &["EVAL_RO", "return redis.pcall('flushdb')", "0"],
    &["EVAL", "#!lua flags=no-writes\nreturn redis.pcall('flushall')", "0"],
    // Delete by pattern, then what is left.
    &["EVAL", "local k = redis.call('keys', ARGV[1]) for _, x in ipairs(k) do redis.call('del', x) end return #k", "0", "user:*"],
    &["EVAL", "return redis.call('keys', '*')", "0"],
    &["EVAL", "return redis.call('randomkey')", "0"],
    // Another database, selected inside the script.
    &["EVAL", "redis.call('select', 5) redis.call('set', 'x', 1) return {redis.call('dbsize'), redis.call('keys', '*')}", "0"],
    &["EVAL", "redis.call('set', 'y', 1) return redis.call('dbsize')", "0"],
    &["EVAL", "redis.call('set', 'z', 1) redis.call('flushdb') return redis.call('dbsize')", "0"],
    &["DBSIZE"],
    &["SELECT", "5"],
    &["DBSIZE"],
    &["EVAL", "redis.call('flushall', 'async') return redis.call('dbsize')", "0"],
    &["DBSIZE"],
    &["SELECT", "0"],
    &["EVAL", "redis.call('set', 'w', 1) return redis.call('flushall', 'sync')", "0"],
    &["DBSIZE"],
    // SWAPDB, on every shard at once.
    &["SET", "s0", "zero"],
    &["EVAL", "redis.call('select', 3) redis.call('set', 's3', 'three') return redis.call('swapdb', 0, 3)", "0"],
    &["EVAL", "return {redis.call('keys', '*'), redis.call('get', 's0')}", "0"],
    &["EVAL", "return redis.pcall('swapdb', 0, 99)", "0"],
    &["EVAL", "return redis.pcall('swapdb', 'x', 1)", "0"],
    &["EVAL", "return redis.pcall('swapdb', 1, 'y')", "0"],
    &["EVAL", "return redis.call('swapdb', 2, 2)", "0"],
    &["EVAL_RO", "return redis.pcall('swapdb', 0, 3)", "0"],
    &["EVAL", "redis.call('swapdb', 0, 3) redis.call('select', 3) return redis.call('keys', '*')", "0"],
    &["FLUSHALL"],
    // From functions.
    &["FUNCTION", "LOAD", "#!lua name=kslib\nredis.register_function('ks', function(k, a) local n = 0 for _, x in ipairs(redis.call('keys', a[1])) do n = n + redis.call('del', x) end return {n, redis.call('dbsize')} end)\nredis.register_function{function_name='ksro', callback=function(k, a) return {redis.call('dbsize'), redis.call('randomkey') ~= false} end, flags={'no-writes'}}"],
    &["MSET", "f:1", "1", "f:2", "2", "g", "3"],
    &["FCALL_RO", "ksro", "0"],
    &["FCALL", "ks", "0", "f:*"],
    &["FCALL", "ksro", "0"],
    &["FUNCTION", "FLUSH"],
];

/// [`LINES`] on `t` and on redis-server `r`, byte for byte.
fn lines_match(t: &Server, r: &Server) {
    let (mut tc, mut rc) = (t.raw(), r.raw());
    for line in LINES {
        let got = tc.cmd_str(line);
        let want = rc.cmd_str(line);
        assert_eq!(
            common::escape(&got, 400),
            common::escape(&want, 400),
            "{line:?}"
        );
        if line[0] == "SET" && line.contains(&"gone") {
            // Let "gone" expire, and make sure it is deleted on both sides
            // (a lookup deletes it): whether DBSIZE still counts it
            // otherwise depends on when an active expiry cycle runs.
            std::thread::sleep(std::time::Duration::from_millis(20));
            let exists = &["EXISTS", "gone"][..];
            assert_eq!(tc.cmd_str(exists), rc.cmd_str(exists));
        }
    }
}

#[test]
fn one_shard_matches_redis() {
    if !common::redis_available() {
        eprintln!("SKIPPED: no redis-server");
        return;
    }
    let one: &[&str] = if common::testing_real_redis() {
        &[]
    } else {
        &["--shards", "1"]
    };
    lines_match(&Server::tessera(one), &Server::redis(&[]));
}

/// The same lines in every layout: with the shards apart (or not yet
/// gathered on one thread) the scripts run under locks on every shard
/// (`commands::script::every`), and reply as Redis does.
fn lines_match_redis(layout: Layout) {
    if !common::redis_available() {
        eprintln!("SKIPPED: no redis-server");
        return;
    }
    lines_match(&layout.tessera(&[]), &Server::redis(&[]));
}

/// KEYS ARGV[1], DEL of each: the keys deleted.
const DELETE_BY_PATTERN: &str =
    "local k = redis.call('keys', ARGV[1]) for _, x in ipairs(k) do redis.call('del', x) end return k";

const WRITERS: usize = 3;
const WRITES: usize = 300;
const SCRIPTS: usize = 40;

/// Writers racing the scripts: writer `w` sets `{prefix}{w}:{i}` for `i` in
/// `0..WRITES`, in order, and publishes in `acked[w]` how many of its SETs
/// were answered.
fn start_writers(
    srv: &Server,
    prefix: &'static str,
) -> (
    Vec<std::thread::JoinHandle<()>>,
    std::sync::Arc<[std::sync::atomic::AtomicUsize; WRITERS]>,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let acked = std::sync::Arc::new([const { AtomicUsize::new(0) }; WRITERS]);
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let addr = srv.addr();
        let acked = acked.clone();
        writers.push(std::thread::spawn(move || {
            let client = redis::Client::open(format!("redis://{addr}")).unwrap();
            let mut con = client.get_connection().unwrap();
            con.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            for i in 0..WRITES {
                let _: () = redis::cmd("SET")
                    .arg(format!("{prefix}{w}:{i}"))
                    .arg(i)
                    .query(&mut con)
                    .unwrap();
                acked[w].store(i + 1, Ordering::Release);
            }
        }));
    }
    (writers, acked)
}

/// A connection whose every reply comes within 10 s (a wait with a
/// deadline: a script that never ends fails the test).
fn bounded_conn(srv: &Server) -> redis::Connection {
    let con = srv.conn();
    con.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    con
}

/// DELETE_BY_PATTERN with the command's name built at run time (from
/// ARGV), run inside MULTI/EXEC beside a SET of another shard: EXEC
/// cannot prove it calls no keyspace-wide command, so it locks every
/// shard for it (`script::names`) and it runs its first time, atomically.
const DELETE_BY_PATTERN_BUILT: &str =
    "local k = redis.call(ARGV[2], ARGV[1]) for _, x in ipairs(k) do redis.call('del', x) end return k";

fn delete_by_pattern_is_atomic(layout: Layout) {
    delete_by_pattern(layout, false);
}

fn delete_by_pattern_in_multi_is_atomic(layout: Layout) {
    delete_by_pattern(layout, true);
}

/// Delete by pattern racing writers, as one EVAL or (`in_multi`) inside
/// MULTI/EXEC with the name built at run time.
fn delete_by_pattern(layout: Layout, in_multi: bool) {
    use std::sync::atomic::Ordering;
    let srv = layout.tessera(&[]);
    let n = layout.shards;
    let (own, other) = (
        common::key_on(0, n, "own"),
        common::key_on(n - 1, n, "other"),
    );
    if layout.consolidated && !common::testing_real_redis() {
        // Every shard on one thread first: scripts start in place.
        common::wait_shard_threads(&srv, 1);
    }
    let (writers, acked) = start_writers(&srv, "pat:");
    let mut con = bounded_conn(&srv);
    let mut deleted = Vec::<String>::new();
    // Per writer, the next index a script must delete first.
    let mut next = [0usize; WRITERS];
    for _ in 0..SCRIPTS {
        let before: Vec<usize> = acked.iter().map(|a| a.load(Ordering::Acquire)).collect();
        let keys: Vec<String> = if in_multi {
            let (keys, (), ()): (Vec<String>, (), ()) = redis::pipe()
                .atomic()
                .cmd("SET")
                .arg(&own)
                .arg(1)
                .cmd("EVAL")
                .arg(DELETE_BY_PATTERN_BUILT)
                .arg(0)
                .arg("pat:*")
                .arg("KEYS")
                .cmd("SET")
                .arg(&other)
                .arg(2)
                .query(&mut con)
                .map(|(a, k, b)| (k, a, b))
                .unwrap();
            keys
        } else {
            redis::cmd("EVAL")
                .arg(DELETE_BY_PATTERN)
                .arg(0)
                .arg("pat:*")
                .query(&mut con)
                .unwrap()
        };
        // Atomic: of each writer's keys, one script deletes those written
        // since the last script, all of them (it saw every key written
        // before it, on every shard at once): every SET answered before
        // the script was sent, and none it did not see since.
        for (w, n) in next.iter_mut().enumerate() {
            let prefix = format!("pat:{w}:");
            let mut idx: Vec<usize> = keys
                .iter()
                .filter_map(|k| k.strip_prefix(&prefix)?.parse().ok())
                .collect();
            idx.sort_unstable();
            let want: Vec<usize> = (*n..*n + idx.len()).collect();
            assert_eq!(idx, want, "writer {w}: a script's deletions have a gap");
            *n += idx.len();
            assert!(
                *n >= before[w],
                "writer {w}: {} keys answered before the script, it left some ({n} deleted)",
                before[w]
            );
        }
        deleted.extend(keys);
    }
    for w in writers {
        w.join().unwrap();
    }
    let left: Vec<String> = redis::cmd("KEYS").arg("pat:*").query(&mut con).unwrap();
    // Nothing lost, nothing twice.
    let mut all = deleted.clone();
    all.extend(left.iter().cloned());
    all.sort();
    let mut want: Vec<String> = (0..WRITERS)
        .flat_map(|w| (0..WRITES).map(move |i| format!("pat:{w}:{i}")))
        .collect();
    want.sort();
    assert_eq!(all, want, "every key written is deleted once or left");
}

/// FLUSHALL from a script racing writers, in every layout: each flush is
/// one instant on every shard, so of each writer's keys those left after
/// the last flush are exactly the ones written after it (a suffix of its
/// sequence), and the script's own DBSIZE right after its flush is 0.
fn flushall_is_atomic(layout: Layout) {
    use std::sync::atomic::Ordering;
    let srv = layout.tessera(&[]);
    let (writers, acked) = start_writers(&srv, "fl:");
    let mut con = bounded_conn(&srv);
    // Per writer, its SETs answered before the last flush was sent.
    let mut before_last = [0usize; WRITERS];
    for _ in 0..SCRIPTS {
        for (w, a) in acked.iter().enumerate() {
            before_last[w] = a.load(Ordering::Acquire);
        }
        let n: i64 = redis::cmd("EVAL")
            .arg("redis.call('flushall') return redis.call('dbsize')")
            .arg(0)
            .query(&mut con)
            .unwrap();
        assert_eq!(
            n, 0,
            "nothing runs between a script's FLUSHALL and its DBSIZE"
        );
    }
    for w in writers {
        w.join().unwrap();
    }
    let left: Vec<String> = redis::cmd("KEYS").arg("fl:*").query(&mut con).unwrap();
    for (w, &before) in before_last.iter().enumerate() {
        let prefix = format!("fl:{w}:");
        let mut idx: Vec<usize> = left
            .iter()
            .filter_map(|k| k.strip_prefix(&prefix)?.parse().ok())
            .collect();
        idx.sort_unstable();
        // A suffix: every key from the first one left to the last written
        // (none lost after the flush, none kept from before it).
        if let Some(&first) = idx.first() {
            let want: Vec<usize> = (first..WRITES).collect();
            assert_eq!(idx, want, "writer {w}: keys left after the last flush");
            assert!(
                first >= before,
                "writer {w}: key {first} answered before the last flush survived it"
            );
        }
    }
}

/// With an append-only file, a script's effects on every shard go out as
/// one MULTI/EXEC block, in the order the script made them, as Redis 7.0
/// writes them (the block checked against the bytes Redis writes).
fn aof_has_one_block_per_script(layout: Layout) {
    let dir = std::env::temp_dir().join(format!(
        "tessera-script-keyspace-aof-{}-{}-{}",
        layout.shards,
        layout.consolidated,
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap();
    let srv = layout.tessera(&["--dir", d, "--appendonly", "yes", "--appendfsync", "always"]);
    let mut c = srv.raw();
    assert_eq!(
        c.cmd_str(&["MSET", "user:1", "a", "user:2", "b", "user:3", "c", "x", "d"]),
        b"+OK\r\n"
    );
    let script = "local k = redis.call('keys', ARGV[1]) table.sort(k) \
        for _, x in ipairs(k) do redis.call('del', x) end \
        redis.call('select', 2) redis.call('set', 'moved', #k) \
        redis.call('select', 0) redis.call('set', 'after', 1) return #k";
    assert_eq!(c.cmd_str(&["EVAL", script, "0", "user:*"]), b":3\r\n");
    // (appendfsync always: written before the reply.)
    let aof = std::fs::read(dir.join("appendonlydir/appendonly.aof.1.incr.aof")).unwrap();
    let block = "*1\r\n$5\r\nMULTI\r\n\
        *2\r\n$3\r\ndel\r\n$6\r\nuser:1\r\n*2\r\n$3\r\ndel\r\n$6\r\nuser:2\r\n\
        *2\r\n$3\r\ndel\r\n$6\r\nuser:3\r\n\
        *2\r\n$6\r\nSELECT\r\n$1\r\n2\r\n*3\r\n$3\r\nset\r\n$5\r\nmoved\r\n$1\r\n3\r\n\
        *2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n*3\r\n$3\r\nset\r\n$5\r\nafter\r\n$1\r\n1\r\n\
        *1\r\n$4\r\nEXEC\r\n";
    let text = String::from_utf8_lossy(&aof);
    assert!(
        text.ends_with(block),
        "{layout}: the script's block, last in the AOF:\n{}",
        common::escape(&aof, 2000)
    );
    drop(srv);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A long script holding every shard under locks (4 shards apart) is
/// published busy as any script: another loop's client gets `-BUSY` for
/// PING, SCRIPT KILL stops it, and SHUTDOWN NOSAVE stops it and the
/// server (the shards parked at the shutdown gate meanwhile still answer
/// its calls: `worker::reach`).
#[test]
fn a_long_script_holding_every_shard_is_killed_and_shut_down() {
    let layout = Layout::new(4, false);
    let mut srv = layout.tessera(&[]);
    let (home, other) = (
        common::key_on(0, layout.shards, "home"),
        common::key_on(1, layout.shards, "other"),
    );
    let mut spin = common::connection_on(&srv, &home);
    let mut other = common::connection_on(&srv, &other);
    let c = &["CONFIG", "SET", "busy-reply-threshold", "100"][..];
    assert_eq!(other.cmd_str(c), b"+OK\r\n");
    let spin_script = "while true do redis.call('keys', '*') end";
    let eval = common::encode_command(&[b"EVAL", spin_script.as_bytes(), b"0"]);
    spin.send(&eval);
    assert_eq!(common::wait_busy(&mut other), common::BUSY_EVAL);
    assert_eq!(other.cmd_str(&["SCRIPT", "KILL"]), b"+OK\r\n");
    let r = spin.read_reply();
    assert!(
        r.starts_with(b"-ERR Script killed by user with SCRIPT KILL"),
        "{}",
        common::escape(&r, 300)
    );
    spin.send(&eval);
    assert_eq!(common::wait_busy(&mut other), common::BUSY_EVAL);
    other.send(&common::encode_command(&[b"SHUTDOWN", b"NOSAVE"]));
    let stopped = (0..1000).any(|_| {
        let gone = !srv.is_running();
        if !gone {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        gone
    });
    assert!(stopped, "SHUTDOWN NOSAVE stopped the script and the server");
}

/// INFO from a script covers every shard and every loop: its keyspace
/// (in [`LINES`]) and its commandstats, here the PINGs of 20 connections,
/// which land on every loop (as Redis counts them).
fn info_from_a_script_is_whole(layout: Layout) {
    let srv = layout.tessera(&[]);
    let mut c = srv.raw();
    assert_eq!(c.cmd_str(&["CONFIG", "RESETSTAT"]), b"+OK\r\n");
    for _ in 0..20 {
        assert_eq!(srv.raw().cmd_str(&["PING"]), b"+PONG\r\n");
    }
    let script = "local s = redis.call('info', 'commandstats') \
        return string.match(s, 'cmdstat_ping:calls=%d+')";
    let got = c.cmd_str(&["EVAL", script, "0"]);
    assert_eq!(
        common::escape(&got, 200),
        common::escape(b"$21\r\ncmdstat_ping:calls=20\r\n", 200),
        "{layout}"
    );
}

/// The scripts the every-shard path used to refuse (issue 23 point 4),
/// with the shards apart: (A) a script that PUBLISHes (and SPUBLISHes)
/// before its first keyspace call, (B) one call naming keys of two shards
/// from a script holding every shard (LMOVE, RPOPLPUSH, SMOVE, RENAME,
/// COPY, ZUNIONSTORE, DEL, MSET), (C) a script calling KEYS & co. alone in
/// a multi-shard MULTI/EXEC block (EVAL, EVALSHA, FCALL). Each reply as
/// redis-server's, byte for byte, and a subscriber (channels, a shard
/// channel, keyspace events) gets Redis's messages, each once, in order.
fn apart_lines(layout: Layout, part: char) -> Vec<Vec<String>> {
    let n = layout.shards;
    let on = |s: usize, p: &str| common::key_on(s % n, n, p);
    let (src, dst) = (on(0, "src"), on(1, "dst"));
    let (sa, sb) = (on(0, "sa"), on(1, "sb"));
    let (s1, s2, s3) = (on(0, "str"), on(1, "str"), on(2, "strc"));
    let (z1, z2, zo) = (on(0, "za"), on(1, "zb"), on(2, "zo"));
    let (m1, m2) = (on(1, "m"), on(0, "m"));
    let far = on(n - 1, "far");
    let head: Vec<Vec<&str>> = vec![
        vec!["FLUSHALL"],
        vec!["CONFIG", "SET", "notify-keyspace-events", "KEA"],
    ];
    let a: Vec<Vec<&str>> = vec![
        // (A) PUBLISH / SPUBLISH before KEYS, receiver counts at call time.
        // (One shard a command: a plain MSET's events across shards are
        // not in one order.)
        vec!["SET", "pub:1", "a"],
        vec!["SET", "pub:2", "b"],
        vec!["EVAL", "local a = redis.call('publish', 'ksch', 'before') local k = redis.call('keys', 'pub:*') table.sort(k) local b = redis.call('publish', 'ksch', #k) return {a, b, k, redis.call('publish', 'nobody', 'x')}", "0"],
        vec!["EVAL", "local a = redis.call('spublish', 'sch', 'one') redis.call('set', KEYS[1], 'v') local b = redis.call('publish', 'ksch', 'two') return {a, b, redis.call('dbsize')}", "1", "pub:3"],
        vec!["EVAL", "redis.call('publish', 'ksch', 'p1') redis.call('publish', 'ksch', 'p2') redis.call('del', 'pub:1') return redis.call('randomkey') ~= false", "0"],
        // ... or an undeclared key of another shard (run again over it).
        vec!["SET", &far, "far"],
        vec!["EVAL", "local a = redis.call('publish', 'ksch', 'u1') return {a, redis.call('get', ARGV[1]), redis.call('publish', 'ksch', 'u2')}", "0", &far],
        vec!["EVAL", "redis.call('publish', 'ksch', 'f1') redis.call('flushall') redis.call('publish', 'ksch', 'f2') return redis.call('dbsize')", "0"],
    ];
    let b: Vec<Vec<&str>> = vec![
        // (B) one call, keys of two shards, every shard held.
        vec!["RPUSH", &src, "1", "2", "3"],
        vec!["SADD", &sa, "x", "y"],
        vec!["SET", &s1, "v"],
        vec!["ZADD", &z1, "1", "a", "2", "b"],
        vec!["ZADD", &z2, "3", "c", "1", "a"],
        vec!["EVAL", "local n = #redis.call('keys', '*') return {n, redis.call('lmove', ARGV[1], ARGV[2], 'left', 'right'), redis.call('rpoplpush', ARGV[1], ARGV[2]), redis.call('lrange', ARGV[1], 0, -1), redis.call('lrange', ARGV[2], 0, -1)}", "0", &src, &dst],
        vec!["EVAL", "redis.call('dbsize') return {redis.call('smove', ARGV[1], ARGV[2], 'x'), redis.call('smove', ARGV[1], ARGV[2], 'nope'), redis.call('smembers', ARGV[2])}", "0", &sa, &sb],
        vec!["EVAL", "redis.call('dbsize') redis.call('rename', ARGV[1], ARGV[2]) return {redis.call('get', ARGV[2]), redis.call('exists', ARGV[1])}", "0", &s1, &s2],
        vec!["EVAL", "redis.call('dbsize') return {redis.call('copy', ARGV[1], ARGV[2]), redis.call('copy', ARGV[1], ARGV[2]), redis.call('get', ARGV[2])}", "0", &s2, &s3],
        vec!["EVAL", "redis.call('dbsize') return {redis.call('zunionstore', ARGV[3], 2, ARGV[1], ARGV[2]), redis.call('zrange', ARGV[3], 0, -1, 'withscores')}", "0", &z1, &z2, &zo],
        vec!["EVAL", "redis.call('dbsize') return {redis.pcall('lmove', ARGV[1], ARGV[2], 'left', 'left'), redis.pcall('rename', 'missing', ARGV[2])}", "0", &sb, &dst],
        vec!["EVAL", "redis.call('dbsize') redis.call('mset', ARGV[1], 'one', ARGV[2], 'two') return {redis.call('mget', ARGV[1], ARGV[2]), redis.call('del', ARGV[1], ARGV[2], ARGV[3])}", "0", &m1, &m2, &s3],
        vec!["LRANGE", &dst, "0", "-1"],
        vec!["SMEMBERS", &sb],
        vec!["ZRANGE", &zo, "0", "-1", "WITHSCORES"],
        vec!["MGET", &s1, &s2, &s3, &m1, &m2],
    ];
    let c: Vec<Vec<&str>> = vec![
        // (C) a script alone in a multi-shard block calls KEYS & co. (No
        // keyspace events: a multi-shard block's are each shard's, not in
        // one order.)
        vec!["CONFIG", "SET", "notify-keyspace-events", ""],
        vec!["SET", "user:1", "a"],
        vec!["SET", "user:2", "b"],
        vec!["MULTI"],
        vec!["SET", &s1, "1"],
        vec!["SET", &s2, "2"],
        vec!["EVAL", "local k = redis.call('keys', 'user:*') table.sort(k) return {k, redis.call('dbsize')}", "0"],
        vec!["EXEC"],
        vec!["MULTI"],
        vec!["EVAL", "return redis.call('dbsize')", "0"],
        vec!["EXEC"],
        vec!["SCRIPT", "LOAD", "return #redis.call('KEYS', ARGV[1])"],
        vec!["MULTI"],
        vec!["INCR", &s1],
        vec!["EVALSHA", "SHA", "0", "user:*"],
        vec!["INCR", &s2],
        vec!["EXEC"],
        // A call across shards there too.
        vec!["RPUSH", &src, "x", "y"],
        vec!["MULTI"],
        vec!["SET", &s1, "1"],
        vec!["EVAL", "redis.call('dbsize') return {redis.call('rpoplpush', ARGV[1], ARGV[2]), redis.call('lrange', ARGV[2], 0, -1)}", "0", &src, &dst],
        vec!["SET", &s2, "2"],
        vec!["EXEC"],
        // Declared keys of two shards: it runs where every shard is
        // reached, not on copies of them.
        vec!["MULTI"],
        vec!["EVAL", "redis.call('set', KEYS[1], 'k1') redis.call('set', KEYS[2], 'k2') local k = redis.call('keys', 'str*') table.sort(k) return k", "2", &s1, &s2],
        vec!["EXEC"],
        vec!["FUNCTION", "LOAD", "#!lua name=cnt\nredis.register_function('cnt', function(k, a) return redis.call('dbsize') end)"],
        vec!["MULTI"],
        vec!["INCR", &s1],
        vec!["FCALL", "cnt", "0"],
        vec!["INCR", &s2],
        vec!["EXEC"],
        vec!["FUNCTION", "FLUSH"],
    ];
    let part = match part {
        'A' => a,
        'B' => b,
        _ => c,
    };
    head.into_iter()
        .chain(part)
        .map(|l| l.into_iter().map(String::from).collect())
        .collect()
}

/// Every message `sub` gets until it stays silent `quiet` (Redis's, sent
/// before its replies: all there) or `n` of them (Tessera's, each awaited
/// with a deadline), then nothing more for a moment (no message twice).
fn messages(sub: &mut common::RawConn, n: Option<usize>) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    match n {
        Some(n) => {
            for _ in 0..n {
                got.push(sub.read_reply());
            }
        }
        None => {
            while sub
                .poll_bytes(std::time::Duration::from_millis(300))
                .is_some()
            {
                got.push(sub.read_reply());
            }
        }
    }
    sub.assert_silent(std::time::Duration::from_millis(200));
    got
}

/// (A): publications held while the run may be taken back.
fn publish_then_keyspace_call_matches_redis(layout: Layout) {
    apart_part_matches_redis(layout, 'A');
}

/// (B): one call naming keys of two shards, every shard held.
fn one_call_across_shards_matches_redis(layout: Layout) {
    apart_part_matches_redis(layout, 'B');
}

/// (C): a script calling KEYS & co. alone in a multi-shard block.
fn keyspace_script_alone_in_multi_matches_redis(layout: Layout) {
    apart_part_matches_redis(layout, 'C');
}

/// (C), scripts whose code does not name the command (built at run time
/// from ARGV, by string functions, through an alias): EXEC cannot prove
/// they call no keyspace-wide command (`script::names`), so it locks every
/// shard for their block, and they run their first time, as in Redis,
/// with Redis's replies byte for byte. A script that names only other
/// commands keeps its block on its keys' locks.
fn built_names_run_in_exec_the_first_time(layout: Layout) {
    let n = layout.shards;
    let (a, b) = (common::key_on(0, n, "a"), common::key_on(n - 1, n, "b"));
    let lines: Vec<Vec<&str>> = vec![
        vec!["FLUSHALL"],
        vec!["SET", "user:1", "x"],
        vec!["SET", "user:2", "y"],
        vec!["MULTI"],
        vec!["SET", &a, "1"],
        vec!["EVAL", "return redis.call(ARGV[1])", "0", "DBSIZE"],
        vec!["SET", &b, "2"],
        vec!["EXEC"],
        vec!["MULTI"],
        vec!["EVAL", "local k = redis.call(ARGV[1], 'user:*') table.sort(k) return k", "0", "keys"],
        vec!["INCR", &b],
        vec!["EXEC"],
        vec!["MULTI"],
        vec!["INCR", &a],
        vec!["EVAL", "return redis.call(string.upper('k'..'eys'), 'nomatch*')", "0"],
        vec!["EVAL", "local r = redis.call(ARGV[1], '0', 'MATCH', 'user:*', 'COUNT', '1000') table.sort(r[2]) return r", "0", "SCAN"],
        vec!["EXEC"],
        vec!["MULTI"],
        vec!["SET", &a, "only"],
        vec!["EVAL", "local rcall = redis.call return {rcall(ARGV[1]), rcall(ARGV[2])}", "0", "FLUSHDB", "DBSIZE"],
        vec!["SET", &b, "z"],
        vec!["EVAL", "return redis.call(ARGV[1])", "0", "RANDOMKEY"],
        vec!["EVAL", "return redis.pcall(ARGV[1], 'user:*')", "0", "KEYS"],
        vec!["EXEC"],
        vec!["SCRIPT", "LOAD", "return redis.call(ARGV[1])"],
        vec!["MULTI"],
        vec!["INCR", &a],
        vec!["EVALSHA", "SHA", "0", "dbsize"],
        vec!["INCR", &b],
        vec!["EXEC"],
        vec!["FUNCTION", "LOAD", "#!lua name=dyn\nredis.register_function('dyn', function(k, a) return redis.call(a[1]) end)"],
        vec!["MULTI"],
        vec!["SET", &a, "1"],
        vec!["FCALL", "dyn", "0", "DBSIZE"],
        vec!["SET", &b, "2"],
        vec!["EXEC"],
        // Named by literals only, of other commands: runs on its keys.
        vec!["MULTI"],
        vec!["EVAL", "redis.call('set', KEYS[1], 'v') return redis.call('get', KEYS[1])", "1", &a],
        vec!["EVAL", "return redis.call('incr', KEYS[1])", "1", &b],
        vec!["EXEC"],
        vec!["FUNCTION", "FLUSH"],
    ];
    let srv = layout.tessera(&[]);
    let mut c = srv.raw();
    let sha = common::reply_payload(&c.cmd_str(&["SCRIPT", "LOAD", "return redis.call(ARGV[1])"]))
        .unwrap();
    let sha = String::from_utf8(sha).unwrap();
    let want: Vec<&[u8]> = vec![
        b"+OK\r\n",
        b"+OK\r\n",
        b"+OK\r\n",
        b"+OK\r\n",
        b"+QUEUED\r\n",
        b"+QUEUED\r\n",
        b"+QUEUED\r\n",
        b"*3\r\n+OK\r\n:3\r\n+OK\r\n",
        b"+OK\r\n",
        b"+QUEUED\r\n",
        b"+QUEUED\r\n",
        b"*2\r\n*2\r\n$6\r\nuser:1\r\n$6\r\nuser:2\r\n:3\r\n",
        b"+OK\r\n",
        b"+QUEUED\r\n",
        b"+QUEUED\r\n",
        b"+QUEUED\r\n",
        b"*3\r\n:2\r\n*0\r\n*2\r\n$1\r\n0\r\n*2\r\n$6\r\nuser:1\r\n$6\r\nuser:2\r\n",
    ];
    let other =
        (common::redis_available() && !common::testing_real_redis()).then(|| Server::redis(&[]));
    let mut rc = other.as_ref().map(|r| r.raw());
    for (i, line) in lines.iter().enumerate() {
        let line: Vec<&str> = line
            .iter()
            .map(|x| if *x == "SHA" { sha.as_str() } else { x })
            .collect();
        let got = c.cmd_str(&line);
        if let Some(w) = want.get(i) {
            assert_eq!(
                common::escape(&got, 600),
                common::escape(w, 600),
                "{layout}: {line:?}"
            );
        }
        if let Some(rc) = rc.as_mut() {
            assert_eq!(
                common::escape(&got, 600),
                common::escape(&rc.cmd_str(&line), 600),
                "{layout}: {line:?} as redis-server"
            );
        }
    }
}

fn apart_part_matches_redis(layout: Layout, part: char) {
    if !common::redis_available() {
        eprintln!("SKIPPED: no redis-server");
        return;
    }
    let lines = apart_lines(layout, part);
    let (t, r) = (layout.tessera(&[]), Server::redis(&[]));
    if part == 'B' && layout.consolidated && !common::testing_real_redis() {
        // Every shard on one thread first: the scripts run in place, where
        // a keyspace call pins every shard (then calls across shards run
        // on copies there too).
        common::wait_shard_threads(&t, 1);
    }
    let mut subs = Vec::new();
    for srv in [&t, &r] {
        let mut s = srv.raw();
        s.cmd_str(&["SUBSCRIBE", "ksch"]);
        s.cmd_str(&["SSUBSCRIBE", "sch"]);
        s.cmd_str(&["PSUBSCRIBE", "__key*@0__:*"]);
        subs.push(s);
    }
    let (mut tc, mut rc) = (t.raw(), r.raw());
    let sha = {
        let l = &["SCRIPT", "LOAD", "return #redis.call('KEYS', ARGV[1])"][..];
        String::from_utf8(common::reply_payload(&rc.cmd_str(l)).unwrap()).unwrap()
    };
    for line in &lines {
        let line: Vec<&str> = line
            .iter()
            .map(|a| if a == "SHA" { sha.as_str() } else { a.as_str() })
            .collect();
        let got = tc.cmd_str(&line);
        let want = rc.cmd_str(&line);
        assert_eq!(
            common::escape(&got, 600),
            common::escape(&want, 600),
            "{layout}: {line:?}"
        );
    }
    let want = messages(&mut subs[1], None);
    let got = messages(&mut subs[0], Some(want.len()));
    // Keyspace events (pmessage) and the scripts' messages each in
    // Redis's order; between the two the order is not kept (a script's
    // messages go when it completes, its shards' events after it: see
    // `commands::script::every`, "What differs from Redis").
    let split = |m: &[Vec<u8>]| -> (Vec<String>, Vec<String>) {
        let (ev, msg): (Vec<&Vec<u8>>, Vec<&Vec<u8>>) = m
            .iter()
            .partition(|x| x.starts_with(b"*4\r\n$8\r\npmessage"));
        let esc = |v: Vec<&Vec<u8>>| v.into_iter().map(|x| common::escape(x, 300)).collect();
        (esc(ev), esc(msg))
    };
    let (got_ev, got_msg) = split(&got);
    let (want_ev, want_msg) = split(&want);
    assert_eq!(got_msg, want_msg, "{layout}: the scripts' messages");
    assert_eq!(got_ev, want_ev, "{layout}: keyspace events");
}

/// (B)'s isolation: a script that reads the keyspace (DBSIZE: every shard
/// held) moves an element between lists of two shards (LMOVE) while
/// writers push on both; inside the script nothing of theirs lands
/// between its calls (it checks its own reads), and at the end every
/// element pushed is in one of the lists once, each writer's in order.
#[test]
fn lmove_across_shards_in_a_keyspace_script_is_isolated() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let layout = Layout::new(16, false);
    let srv = layout.tessera(&[]);
    let (src, dst) = (
        common::key_on(0, layout.shards, "iso:src"),
        common::key_on(1, layout.shards, "iso:dst"),
    );
    let mut con = bounded_conn(&srv);
    let seed: Vec<String> = (0..50).map(|i| format!("seed:{i}")).collect();
    let _: () = redis::cmd("RPUSH")
        .arg(&src)
        .arg(&seed)
        .query(&mut con)
        .unwrap();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (mut c, stop) = (bounded_conn(&srv), stop.clone());
        let keys = [src.clone(), dst.clone()];
        writers.push(std::thread::spawn(move || {
            let mut i = 0;
            // Bounded: at most 5,000 pushes each.
            while !stop.load(Ordering::Acquire) && i < 5000 {
                let _: i64 = redis::cmd("RPUSH")
                    .arg(&keys[i % 2])
                    .arg(format!("w{w}:{i}"))
                    .query(&mut c)
                    .unwrap();
                i += 1;
            }
            i
        }));
    }
    let script = "redis.call('dbsize') \
        local before = redis.call('lrange', KEYS[1], 0, -1) \
        local m = redis.call('lmove', KEYS[1], KEYS[2], 'left', 'right') \
        local after = redis.call('lrange', KEYS[1], 0, -1) \
        local d = redis.call('lrange', KEYS[2], 0, -1) \
        return {m, #after == #before - 1 and m == before[1] and d[#d] == m and 1 or 0}";
    for n in 0..SCRIPTS {
        // Undeclared keys (ARGV): the first run is taken back at DBSIZE
        // and runs again holding every shard.
        let s = script.replace("KEYS[", "ARGV[");
        let (m, ok): (String, i64) = redis::cmd("EVAL")
            .arg(&s)
            .arg(0)
            .arg(&src)
            .arg(&dst)
            .query(&mut con)
            .unwrap();
        assert_eq!(
            ok, 1,
            "script {n}: a write landed between its calls (moved {m})"
        );
    }
    stop.store(true, Ordering::Release);
    let pushed: Vec<usize> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    let mut all: Vec<String> = redis::cmd("LRANGE")
        .arg(&src)
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    let d: Vec<String> = redis::cmd("LRANGE")
        .arg(&dst)
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    // Each writer's elements in its order within each list.
    for list in [&all, &d] {
        for w in 0..WRITERS {
            let idx: Vec<usize> = list
                .iter()
                .filter_map(|x| x.strip_prefix(&format!("w{w}:"))?.parse().ok())
                .collect();
            assert!(
                idx.windows(2).all(|p| p[0] < p[1]),
                "writer {w} out of order"
            );
        }
    }
    all.extend(d);
    all.sort();
    let mut want = seed.clone();
    for (w, &n) in pushed.iter().enumerate() {
        want.extend((0..n).map(|i| format!("w{w}:{i}")));
    }
    want.sort();
    assert_eq!(all, want, "every element once");
}

/// (B) with an append-only file: the call on copies across shards is
/// recorded once, in order in the script's MULTI/EXEC block (the bytes
/// Redis writes).
fn aof_has_a_call_across_shards(layout: Layout) {
    let dir = common::unique_temp_dir("script-keyspace-across-aof");
    let d = dir.to_str().unwrap();
    let srv = layout.tessera(&["--dir", d, "--appendonly", "yes", "--appendfsync", "always"]);
    let mut c = srv.raw();
    let n = layout.shards;
    let (src, dst) = (common::key_on(0, n, "src"), common::key_on(1, n, "dst"));
    assert_eq!(c.cmd_str(&["RPUSH", &src, "a", "b"]), b":2\r\n");
    let script = "redis.call('dbsize') \
        local m = redis.call('lmove', ARGV[1], ARGV[2], 'left', 'right') \
        redis.call('set', 'after', m) return m";
    assert_eq!(
        c.cmd_str(&["EVAL", script, "0", &src, &dst]),
        b"$1\r\na\r\n"
    );
    let aof = std::fs::read(dir.join("appendonlydir/appendonly.aof.1.incr.aof")).unwrap();
    let block = format!(
        "*1\r\n$5\r\nMULTI\r\n*5\r\n$5\r\nlmove\r\n${}\r\n{src}\r\n${}\r\n{dst}\r\n\
         $4\r\nleft\r\n$5\r\nright\r\n*3\r\n$3\r\nset\r\n$5\r\nafter\r\n$1\r\na\r\n\
         *1\r\n$4\r\nEXEC\r\n",
        src.len(),
        dst.len()
    );
    let text = String::from_utf8_lossy(&aof);
    assert!(
        text.ends_with(&block),
        "{layout}: the script's block, last in the AOF:\n{}",
        common::escape(&aof, 2000)
    );
    drop(srv);
    let _ = std::fs::remove_dir_all(&dir);
}

per_layout!(
    publish_then_keyspace_call_matches_redis,
    aof_has_a_call_across_shards,
    keyspace_script_alone_in_multi_matches_redis,
    built_names_run_in_exec_the_first_time,
    one_call_across_shards_matches_redis,
    info_from_a_script_is_whole,
    lines_match_redis,
    delete_by_pattern_is_atomic,
    delete_by_pattern_in_multi_is_atomic,
    flushall_is_atomic,
    aof_has_one_block_per_script
);
