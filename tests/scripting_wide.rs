//! Scripts that touch keys they did not declare, on other shards, through
//! the real binary with concurrent clients (`commands::script::wide`):
//! counters moved between undeclared keys keep their sum while a
//! concurrent script reads them all (atomic and isolated), a pipeline
//! sees a restarted script's effects in order, and the first run's writes
//! on its own shard are taken back before it runs wider (each INCR counted
//! once), and their commands count in INFO commandstats. Each runs in
//! every layout (`per_layout!`).
//!
//! Validate against Redis: `TESSERA_TEST_BIN=/usr/bin/redis-server cargo
//! test --test scripting_wide`.

mod common;

use common::{counters, Layout};

/// Moves ARGV[3] from the counter ARGV[1] to ARGV[2]; the first run
/// writes ARGV[1] (maybe on its own shard) before it finds ARGV[2].
const MOVE: &str = r#"
redis.call('DECRBY', ARGV[1], ARGV[3])
return redis.call('INCRBY', ARGV[2], ARGV[3])
"#;

const COUNTERS: usize = 12;
const START: i64 = 1000;

fn counters_keep_their_sum_under_concurrent_scripts(layout: Layout) {
    const CLIENTS: usize = 4;
    const MOVES_EACH: usize = 120;
    let srv = layout.tessera(&[]);
    let keys = common::keys_across_shards("ctr", COUNTERS, layout.shards);
    let mut con = srv.conn();
    counters::set_all(&mut con, &keys, START);
    // The sum script reads the counters as undeclared keys: it runs wide
    // too.
    let want = START * COUNTERS as i64;
    let reader = counters::SumReader::spawn(srv.addr(), keys.clone(), false, want);
    let movers: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (addr, keys) = (srv.addr(), keys.clone());
            std::thread::spawn(move || {
                let mut con = counters::connect(&addr);
                let mv = redis::Script::new(MOVE);
                for i in 0..MOVES_EACH {
                    let from = &keys[(c + i) % COUNTERS];
                    let to = &keys[(c * 5 + i * 7 + 1) % COUNTERS];
                    let _: i64 = mv
                        .arg(from)
                        .arg(to)
                        .arg(1 + i % 3)
                        .invoke(&mut con)
                        .unwrap();
                }
            })
        })
        .collect();
    for m in movers {
        m.join().unwrap();
    }
    reader.finish();
    counters::assert_sum(&mut con, &keys, want);
}

fn a_pipeline_sees_a_restarted_script_in_order(layout: Layout) {
    let srv = layout.tessera(&[]);
    let keys = common::keys_across_shards("p", 4, layout.shards);
    let mut con = srv.conn();
    let mut pipe = redis::pipe();
    pipe.cmd("SET").arg(&keys[0]).arg(1);
    for round in 0..20 {
        // Declares keys[1], writes it, then finds keys[2] and keys[3].
        pipe.cmd("EVAL")
            .arg(
                "redis.call('incr', KEYS[1]); redis.call('incr', ARGV[1]); \
                 return redis.call('incrby', ARGV[2], redis.call('get', ARGV[1]))",
            )
            .arg(1)
            .arg(&keys[1])
            .arg(&keys[2])
            .arg(&keys[3]);
        pipe.cmd("MGET").arg(&keys[1..]);
        let _ = round;
    }
    let replies: Vec<redis::Value> = pipe.query(&mut con).unwrap();
    let mut total = 0;
    for (i, r) in replies.iter().skip(1).enumerate() {
        let round = (i / 2) as i64 + 1;
        if i % 2 == 0 {
            total += round;
            assert_eq!(*r, redis::Value::Int(total), "EVAL of round {round}");
        } else {
            let got: Vec<i64> = redis::from_redis_value(r.clone()).unwrap();
            assert_eq!(got, vec![round, round, total], "MGET after round {round}");
        }
    }
}

/// Commands a script runs on keys of several shards (on gathered copies)
/// count in INFO commandstats as a one-shard script's do: they were left
/// in the home thread's VM until a one-shard script ran there.
fn scripts_across_shards_count_their_commands(layout: Layout) {
    let srv = layout.tessera(&[]);
    let keys = common::keys_across_shards("cnt", 2, layout.shards);
    let mut con = srv.conn();
    for round in 1..=3 {
        let n: i64 = redis::cmd("EVAL")
            .arg("redis.call('INCR', KEYS[1]) return redis.call('INCR', KEYS[2])")
            .arg(2)
            .arg(&keys[0])
            .arg(&keys[1])
            .query(&mut con)
            .unwrap();
        assert_eq!(n, round);
    }
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut con)
        .unwrap();
    assert!(info.contains("\r\ncmdstat_incr:calls=6,"), "{info}");
}

per_layout!(
    counters_keep_their_sum_under_concurrent_scripts,
    a_pipeline_sees_a_restarted_script_in_order,
    scripts_across_shards_count_their_commands,
);
