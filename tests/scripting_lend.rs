//! Scripts across shards whose loops run on threads of their own
//! (`--shard-consolidation no`), run on the real shards lent to the
//! script's thread for the call (`commands::script::lend`), at 2 and 16
//! shards: 8-key scripts from several connections (so from several home
//! threads at once, each lending the others' shards) keep their counters'
//! sum, a concurrent reading script never sees a transfer half done, and
//! plain clients of the same shards (other keys, served by the lent
//! threads between scripts) lose no update; a script that fails midway
//! keeps its earlier writes, as in Redis; one that strays onto an
//! undeclared key runs again wider and counts each write once.
//!
//! Validate against Redis: `TESSERA_TEST_BIN=/usr/bin/redis-server cargo
//! test --test scripting_lend`.

mod common;

use common::{counters, Layout};

/// Takes ARGV[1] * (#KEYS - 1) from KEYS[1] and gives ARGV[1] to each
/// other key: the sum of the keys stays.
const SPREAD: &str = r#"
local d = tonumber(ARGV[1])
redis.call('DECRBY', KEYS[1], d * (#KEYS - 1))
for i = 2, #KEYS do redis.call('INCRBY', KEYS[i], d) end
return redis.call('GET', KEYS[1])
"#;

const KEYS: usize = 8;
const START: i64 = 100_000;

fn eight_key_scripts_stay_atomic_beside_plain_clients(layout: Layout) {
    const SCRIPT_CLIENTS: usize = 4;
    const SCRIPTS_EACH: usize = 150;
    const PLAIN_CLIENTS: usize = 2;
    const INCRS_EACH: usize = 300;
    let srv = layout.tessera(&[]);
    let keys = common::keys_across_shards("lend", KEYS, layout.shards);
    let plain = common::keys_across_shards("plain", layout.shards.max(4), layout.shards);
    let mut con = srv.conn();
    counters::set_all(&mut con, &keys, START);
    let reader = counters::SumReader::spawn(srv.addr(), keys.clone(), true, START * KEYS as i64);
    let plains: Vec<_> = (0..PLAIN_CLIENTS)
        .map(|c| {
            let (addr, plain) = (srv.addr(), plain.clone());
            std::thread::spawn(move || {
                let mut con = counters::connect(&addr);
                for i in 0..INCRS_EACH {
                    let k = format!("{}.{c}", plain[i % plain.len()]);
                    let _: i64 = redis::cmd("INCR").arg(&k).query(&mut con).unwrap();
                }
            })
        })
        .collect();
    let scripts: Vec<_> = (0..SCRIPT_CLIENTS)
        .map(|c| {
            let (addr, keys) = (srv.addr(), keys.clone());
            std::thread::spawn(move || {
                let mut con = counters::connect(&addr);
                let spread = redis::Script::new(SPREAD);
                for i in 0..SCRIPTS_EACH {
                    // Each client starts the keys at another one, so the
                    // scripts' first keys (and homes) differ.
                    let mut inv = spread.prepare_invoke();
                    for j in 0..KEYS {
                        inv.key(&keys[(c * 3 + i + j) % KEYS]);
                    }
                    let _: i64 = inv.arg(1 + i % 5).invoke(&mut con).unwrap();
                }
            })
        })
        .collect();
    for s in scripts {
        s.join().unwrap();
    }
    for p in plains {
        p.join().unwrap();
    }
    reader.finish();
    let values = counters::assert_sum(&mut con, &keys, START * KEYS as i64);
    assert!(
        values.iter().any(|&v| v != START),
        "no script ran: {values:?}"
    );
    // Each plain client's INCRs of each of its keys, none lost.
    let n = plain.len();
    for c in 0..PLAIN_CLIENTS {
        for (j, p) in plain.iter().enumerate() {
            let want = (INCRS_EACH / n + usize::from(j < INCRS_EACH % n)) as i64;
            let got: i64 = redis::cmd("GET")
                .arg(format!("{p}.{c}"))
                .query(&mut con)
                .unwrap();
            assert_eq!(got, want, "plain counter {p}.{c}");
        }
    }
}

/// A script that fails after writing keys of two shards keeps those
/// writes, as Redis does (no rollback), and replies the error.
fn a_failing_script_keeps_its_writes(layout: Layout) {
    let srv = layout.tessera(&[]);
    let keys = common::keys_across_shards("fail", 3, layout.shards);
    let mut con = srv.conn();
    let _: () = redis::cmd("RPUSH")
        .arg(&keys[2])
        .arg("x")
        .query(&mut con)
        .unwrap();
    let res: redis::RedisResult<i64> = redis::cmd("EVAL")
        .arg(
            "redis.call('incr', KEYS[1]); redis.call('incr', KEYS[2]); \
             return redis.call('incr', KEYS[3])",
        )
        .arg(3)
        .arg(&keys)
        .query(&mut con);
    let err = res.expect_err("INCR of a list");
    assert_eq!(err.code(), Some("WRONGTYPE"), "{err:?}");
    let got: Vec<Option<i64>> = redis::cmd("MGET").arg(&keys[..2]).query(&mut con).unwrap();
    assert_eq!(got, vec![Some(1), Some(1)]);
}

/// A script that touches a key it did not declare, on a shard its round
/// did not lock, is taken back and runs again wider: each of its writes
/// counted once.
fn an_undeclared_key_runs_again_and_counts_once(layout: Layout) {
    let srv = layout.tessera(&[]);
    let keys = common::keys_across_shards("wide", 3, layout.shards);
    let mut con = srv.conn();
    for round in 1..=20i64 {
        let got: i64 = redis::cmd("EVAL")
            .arg(
                "redis.call('incr', KEYS[1]); redis.call('incr', KEYS[2]); \
                 return redis.call('incr', ARGV[1])",
            )
            .arg(2)
            .arg(&keys[0])
            .arg(&keys[1])
            .arg(&keys[2])
            .query(&mut con)
            .unwrap();
        assert_eq!(got, round);
        let all: Vec<i64> = redis::cmd("MGET").arg(&keys).query(&mut con).unwrap();
        assert_eq!(all, vec![round; 3]);
    }
}

#[test]
fn eight_keys_s2_apart() {
    eight_key_scripts_stay_atomic_beside_plain_clients(Layout::apart(2));
}

#[test]
fn eight_keys_s16_apart() {
    eight_key_scripts_stay_atomic_beside_plain_clients(Layout::apart(16));
}

#[test]
fn failing_script_s2_apart() {
    a_failing_script_keeps_its_writes(Layout::apart(2));
}

#[test]
fn failing_script_s16_apart() {
    a_failing_script_keeps_its_writes(Layout::apart(16));
}

#[test]
fn undeclared_key_s2_apart() {
    an_undeclared_key_runs_again_and_counts_once(Layout::apart(2));
}

#[test]
fn undeclared_key_s16_apart() {
    an_undeclared_key_runs_again_and_counts_once(Layout::apart(16));
}
