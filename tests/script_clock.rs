//! One clock for a whole script (issue 23 point 1): Redis freezes the time
//! for a script, so a key that expires while the script runs is still
//! there for each of its calls (expiry is judged at the script's start).
//! A script holding every shard with the shards apart
//! (`commands::script::every`) reaches another shard by a call posted to
//! that shard's loop, which ticks between calls: its calls there now see
//! the script's home clock too (`script::in_place::on_shard`).
//!
//! The script spins on TIME past the key's expiry, in the four layouts,
//! against redis-server too. The one assumption: the script starts
//! within 1.5 s of the SET before it (it is sent right after).

mod common;

use common::{key_on, Flavor, Layout, Server};

/// KEYS first (every shard held), the key's existence, a spin of ARGV[2]
/// ms by the real clock, then the key again.
const SCRIPT: &str = "redis.call('keys', 'nomatch*') \
     local t0 = redis.call('time') \
     local a = redis.call('exists', ARGV[1]) \
     repeat local t = redis.call('time') \
     until (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) > tonumber(ARGV[2]) * 1000 \
     return {a, redis.call('exists', ARGV[1]), redis.call('get', ARGV[1])}";

fn scenario(s: &Server, nshards: usize) -> Vec<Vec<u8>> {
    // The script's home is shard 0, its key on the last shard.
    let home = key_on(0, nshards, "home");
    let key = key_on(nshards - 1, nshards, "k");
    let mut c = common::connection_on(s, &home);
    let mut got = vec![c.cmd_str(&["SET", &key, "v", "PX", "1500"])];
    got.push(c.cmd_str(&["EVAL", SCRIPT, "0", &key, "2000"]));
    // Expired by now for everyone else.
    got.push(c.cmd_str(&["EXISTS", &key]));
    got
}

fn expected() -> Vec<Vec<u8>> {
    vec![
        b"+OK\r\n".to_vec(),
        b"*3\r\n:1\r\n:1\r\n$1\r\nv\r\n".to_vec(),
        b":0\r\n".to_vec(),
    ]
}

fn a_key_expiring_during_a_script_stays_for_the_script(layout: Layout) {
    let s = layout.tessera(&[]);
    assert_eq!(scenario(&s, layout.shards), expected(), "{layout}");
}

per_layout!(a_key_expiring_during_a_script_stays_for_the_script);

#[test]
fn redis_freezes_the_time_for_a_script() {
    if !common::redis_available() || common::testing_real_redis() {
        eprintln!("redis-server not installed: not compared");
        return;
    }
    let s = Server::redis(&[]);
    assert_eq!(s.flavor(), Flavor::Redis);
    assert_eq!(scenario(&s, 2), expected());
}
