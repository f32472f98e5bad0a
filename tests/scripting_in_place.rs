//! Scripts across shards through the real binary, in every layout
//! (`per_layout!`): where the shards share a thread (consolidated, once
//! quiet) they run in place on the real shards (`commands::script::
//! in_place`), elsewhere on copies under locks; either way atomic and
//! isolated. Eight counters on different shards are always incremented
//! together (by scripts declaring them all, scripts declaring two and
//! touching the rest, and MULTI/EXEC), and every read of all eight (MGET,
//! a read-only script, MULTI/EXEC) sees them equal; at the end each holds
//! the number of increments. And a script's keyspace events arrive in
//! Redis's order. A long script across consolidated shards is heard by
//! SCRIPT KILL from the other shard's loop (run in place, it would pin
//! that loop: past the threshold it runs again on copies).
//!
//! Validate against Redis: `TESSERA_TEST_BIN=/usr/bin/redis-server cargo
//! test --test scripting_in_place`.

mod common;

use std::time::Duration;

use common::Layout;

/// Increments every declared key.
const INCR_KEYS: &str = "for i = 1, #KEYS do redis.call('INCR', KEYS[i]) end return #KEYS";
/// Increments every key named in ARGV (declared or not).
const INCR_ARGV: &str = "for i = 1, #ARGV do redis.call('INCR', ARGV[i]) end return #ARGV";
/// Every declared key's value.
const GET_KEYS: &str =
    "local r = {} for i = 1, #KEYS do r[i] = redis.call('GET', KEYS[i]) end return r";

const KEYS: usize = 8;

fn values(v: Vec<Option<i64>>) -> Vec<i64> {
    v.into_iter().map(|x| x.unwrap_or(0)).collect()
}

fn eight_counters_move_together(layout: Layout) {
    const ROUNDS: usize = 150;
    let srv = layout.tessera(&[]);
    if layout.consolidated && !common::testing_real_redis() {
        // Every shard on one thread first: scripts start in place.
        common::wait_shard_threads(&srv, 1);
    }
    let keys = common::keys_across_shards("ctr8", KEYS, layout.shards);
    let mut writers = Vec::new();
    for w in 0..3 {
        let (addr, keys) = (srv.addr(), keys.clone());
        writers.push(std::thread::spawn(move || {
            let client = redis::Client::open(format!("redis://{addr}")).unwrap();
            let mut con = client.get_connection().unwrap();
            let all = redis::Script::new(INCR_KEYS);
            let argv = redis::Script::new(INCR_ARGV);
            for i in 0..ROUNDS {
                match (w + i) % 3 {
                    0 => {
                        let mut inv = all.prepare_invoke();
                        for k in &keys {
                            inv.key(k);
                        }
                        let n: i64 = inv.invoke(&mut con).unwrap();
                        assert_eq!(n, KEYS as i64);
                    }
                    1 => {
                        // Two declared, the other six touched anyway.
                        let mut inv = argv.prepare_invoke();
                        inv.key(&keys[w]).key(&keys[7 - w]);
                        for k in &keys {
                            inv.arg(k);
                        }
                        let n: i64 = inv.invoke(&mut con).unwrap();
                        assert_eq!(n, KEYS as i64);
                    }
                    _ => {
                        let mut p = redis::pipe();
                        p.atomic();
                        for k in &keys {
                            p.cmd("INCR").arg(k);
                        }
                        let _: Vec<i64> = p.query(&mut con).unwrap();
                    }
                }
            }
        }));
    }
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut readers = Vec::new();
    for r in 0..2 {
        let (addr, keys, done) = (srv.addr(), keys.clone(), done.clone());
        readers.push(std::thread::spawn(move || {
            let client = redis::Client::open(format!("redis://{addr}")).unwrap();
            let mut con = client.get_connection().unwrap();
            let get = redis::Script::new(GET_KEYS);
            let mut reads = 0usize;
            while !done.load(std::sync::atomic::Ordering::Acquire) || reads < 10 {
                let got: Vec<i64> = match (r + reads) % 3 {
                    0 => values(redis::cmd("MGET").arg(&keys).query(&mut con).unwrap()),
                    1 => {
                        let mut inv = get.prepare_invoke();
                        for k in &keys {
                            inv.key(k);
                        }
                        values(inv.invoke(&mut con).unwrap())
                    }
                    _ => {
                        let mut p = redis::pipe();
                        p.atomic();
                        for k in &keys {
                            p.cmd("GET").arg(k);
                        }
                        values(p.query(&mut con).unwrap())
                    }
                };
                assert!(
                    got.windows(2).all(|w| w[0] == w[1]),
                    "read {reads}: half an increment seen: {got:?}"
                );
                reads += 1;
            }
        }));
    }
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Release);
    for r in readers {
        r.join().unwrap();
    }
    let mut con = srv.conn();
    let got = values(redis::cmd("MGET").arg(&keys).query(&mut con).unwrap());
    assert_eq!(got, vec![(3 * ROUNDS) as i64; KEYS], "{layout}");
}

/// The keyspace events of one script over keys of several shards.
fn script_events(srv: &common::Server, keys: &[String]) -> Vec<String> {
    let mut ctl = srv.raw();
    assert_eq!(
        ctl.cmd_str(&["CONFIG", "SET", "notify-keyspace-events", "KEA"]),
        b"+OK\r\n"
    );
    assert_eq!(ctl.cmd_str(&["SET", &keys[1], "1"]), b"+OK\r\n");
    let mut sub = srv.raw();
    sub.set_reply_timeout(Duration::from_secs(10));
    sub.cmd_str(&["PSUBSCRIBE", "__keyevent@0__:*"]);
    let script = "redis.call('SET', KEYS[1], 'a') \
                  redis.call('INCR', KEYS[2]) \
                  redis.call('LPUSH', KEYS[3], 'x', 'y') \
                  redis.call('DEL', KEYS[1]) \
                  redis.call('EXPIRE', KEYS[2], 100) \
                  redis.call('RPOP', KEYS[3]) \
                  redis.call('HSET', KEYS[4], 'f', 'v') \
                  return 1";
    let mut args = vec!["EVAL", script, "4"];
    args.extend(keys.iter().take(4).map(String::as_str));
    assert_eq!(ctl.cmd_str(&args), b":1\r\n");
    // A marker after it: everything before it came.
    assert_eq!(ctl.cmd_str(&["SET", "marker", "1"]), b"+OK\r\n");
    let mut events = Vec::new();
    loop {
        let r = String::from_utf8_lossy(&sub.read_reply()).into_owned();
        let parts: Vec<&str> = r.split("\r\n").collect();
        // *4 $8 pmessage $pattern pattern $chan chan $key key
        let (chan, key) = (parts[6], parts[8]);
        if key == "marker" {
            break;
        }
        let event = chan.trim_start_matches("__keyevent@0__:");
        let i = keys.iter().position(|k| k == key).map_or(9, |i| i);
        events.push(format!("{event} k{i}"));
    }
    events
}

fn events_arrive_in_redis_order(layout: Layout) {
    let srv = layout.tessera(&[]);
    if layout.consolidated && !common::testing_real_redis() {
        common::wait_shard_threads(&srv, 1);
    }
    let keys = common::keys_across_shards("ev", 4, layout.shards);
    let got = script_events(&srv, &keys);
    let want = [
        "set k0",
        "incrby k1",
        "lpush k2",
        "del k0",
        "expire k1",
        "rpop k2",
        "hset k3",
    ];
    assert_eq!(got, want, "{layout}");
    if common::redis_available() && !common::testing_real_redis() {
        let redis = common::Server::redis(&[]);
        assert_eq!(script_events(&redis, &keys), want, "redis-server");
    }
}

per_layout!(eight_counters_move_together, events_arrive_in_redis_order);

/// Whether `key` (missing) lives on `c`'s home shard: a script with no
/// keys runs there, and inside MULTI/EXEC it cannot run again elsewhere.
fn home_has(c: &mut common::RawConn, key: &str) -> bool {
    assert_eq!(c.cmd_str(&["MULTI"]), b"+OK\r\n");
    let script = "return redis.pcall('exists', ARGV[1])";
    assert_eq!(c.cmd_str(&["EVAL", script, "0", key]), b"+QUEUED\r\n");
    c.cmd_str(&["EXEC"]) == b"*1\r\n:0\r\n"
}

/// A connection whose home is the shard of `key`.
fn connection_on(s: &common::Server, key: &str) -> common::RawConn {
    for _ in 0..64 {
        let mut c = s.raw();
        if home_has(&mut c, key) {
            return c;
        }
    }
    panic!("no connection landed on the key's shard");
}

/// Two shards on one thread: a script over both runs in place, pinning
/// the other shard's loop. Past `busy-reply-threshold` it is taken back
/// and runs on copies (it wrote nothing yet), so that loop goes back to
/// its thread and its clients are answered: here its SCRIPT KILL.
#[test]
fn a_long_script_across_consolidated_shards_can_be_killed_from_either_loop() {
    if common::testing_real_redis() {
        return;
    }
    let s = common::Server::tessera(&["--shards", "2", "--shard-consolidation", "yes"]);
    common::wait_shard_threads(&s, 1);
    let keys = common::keys_across_shards("long", 2, 2);
    let (k0, k1) = if commands::table::shard_of(keys[0].as_bytes(), 2) == 0 {
        (&keys[0], &keys[1])
    } else {
        (&keys[1], &keys[0])
    };
    let mut killer = connection_on(&s, k1);
    killer.set_reply_timeout(Duration::from_secs(30));
    assert_eq!(
        killer.cmd_str(&["CONFIG", "SET", "busy-reply-threshold", "100"]),
        b"+OK\r\n"
    );
    assert_eq!(killer.cmd_str(&["SET", k1, "1"]), b"+OK\r\n");
    let mut spin = connection_on(&s, k0);
    spin.set_reply_timeout(Duration::from_secs(60));
    let script = "redis.call('GET', KEYS[2]) while true do end";
    spin.send(&common::encode_command(&[
        b"EVAL",
        script.as_bytes(),
        b"2",
        k0.as_bytes(),
        k1.as_bytes(),
    ]));
    let mut killed = false;
    for _ in 0..500 {
        let r = killer.cmd_str(&["SCRIPT", "KILL"]);
        if r == b"+OK\r\n" {
            killed = true;
            break;
        }
        assert!(r.starts_with(b"-NOTBUSY"), "{}", common::escape(&r, 200));
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(killed, "the script was never busy");
    let r = String::from_utf8(spin.read_reply()).unwrap();
    assert!(
        r.starts_with("-ERR Script killed by user with SCRIPT KILL..."),
        "{r}"
    );
    assert_eq!(spin.cmd_str(&["GET", k1]), b"$1\r\n1\r\n");
}
