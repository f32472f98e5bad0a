//! Keyspace-wide commands from scripts (issue 23): DBSIZE, KEYS, SCAN,
//! RANDOMKEY, FLUSHDB and FLUSHALL through `redis.call`, which a script may
//! make only while it holds every shard (`commands::keys::script`).
//!
//! * At one shard (the script holds it) every reply is Redis's, byte for
//!   byte, from EVAL and FCALL (`one_shard_matches_redis`).
//! * "Delete by pattern" (KEYS then DEL of each key) racing writers, in
//!   every layout (`per_layout!`): a script that ran did so atomically (it
//!   deleted, of each writer's keys, exactly those written before it: a
//!   prefix of the writer's sequence, and every key it did not delete is
//!   still there), and one refused (shards not co-hosted: its error names
//!   the cause) changed nothing. Consolidated layouts, once every shard
//!   is on one thread, run such scripts in place: there some must run.
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
    let t = Server::tessera(one);
    let r = Server::redis(&[]);
    let (mut tc, mut rc) = (t.raw(), r.raw());
    for line in LINES {
        let got = tc.cmd_str(line);
        let want = rc.cmd_str(line);
        assert_eq!(
            common::escape(&got, 400),
            common::escape(&want, 400),
            "{line:?}"
        );
        if line[0] == "SET" {
            // Let "gone" expire (KEYS and DBSIZE then differ as Redis's).
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// KEYS ARGV[1], DEL of each: the keys deleted.
const DELETE_BY_PATTERN: &str =
    "local k = redis.call('keys', ARGV[1]) for _, x in ipairs(k) do redis.call('del', x) end return k";

const WRITERS: usize = 3;
const WRITES: usize = 300;

fn delete_by_pattern_is_atomic(layout: Layout) {
    let srv = layout.tessera(&[]);
    if layout.consolidated && !common::testing_real_redis() {
        // Every shard on one thread first: scripts start in place.
        common::wait_shard_threads(&srv, 1);
    }
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let addr = srv.addr();
        writers.push(std::thread::spawn(move || {
            let client = redis::Client::open(format!("redis://{addr}")).unwrap();
            let mut con = client.get_connection().unwrap();
            for i in 0..WRITES {
                let _: () = redis::cmd("SET")
                    .arg(format!("pat:{w}:{i}"))
                    .arg(i)
                    .query(&mut con)
                    .unwrap();
            }
        }));
    }
    let mut con = srv.conn();
    let (mut deleted, mut ran, mut refused) = (Vec::<String>::new(), 0, 0);
    // Per writer, the next index a script must delete first.
    let mut next = [0usize; WRITERS];
    for _ in 0..40 {
        let r: redis::RedisResult<Vec<String>> = redis::cmd("EVAL")
            .arg(DELETE_BY_PATTERN)
            .arg(0)
            .arg("pat:*")
            .query(&mut con);
        match r {
            Ok(keys) => {
                ran += 1;
                // Atomic: of each writer's keys, one script deletes those
                // written since the last script, all of them (it saw every
                // key written before it, on every shard at once).
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
                }
                deleted.extend(keys);
            }
            Err(e) => {
                assert!(
                    e.to_string().contains("needs every shard"),
                    "unexpected error: {e}"
                );
                refused += 1;
            }
        }
    }
    for w in writers {
        w.join().unwrap();
    }
    let left: Vec<String> = redis::cmd("KEYS").arg("pat:*").query(&mut con).unwrap();
    eprintln!("{layout:?}: {ran} scripts ran, {refused} refused");
    // Nothing lost, nothing twice.
    let mut all = deleted.clone();
    all.extend(left.iter().cloned());
    all.sort();
    let mut want: Vec<String> = (0..WRITERS)
        .flat_map(|w| (0..WRITES).map(move |i| format!("pat:{w}:{i}")))
        .collect();
    want.sort();
    assert_eq!(all, want, "every key written is deleted once or left");
    if layout.shards == 1 || common::testing_real_redis() {
        assert_eq!(refused, 0);
    }
}

per_layout!(delete_by_pattern_is_atomic);
