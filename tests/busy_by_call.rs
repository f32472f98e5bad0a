//! A long one-shard script whose key lives on a co-hosted shard other
//! than its caller's (issue 23): it runs there by a call from the
//! caller's loop (`worker::in_place::by_call`), not as a hop, so the
//! caller's loop cannot run until it ends. Past `busy-reply-threshold`:
//!
//! * one that cannot be taken back (it PUBLISHed) stays: the key's shard
//!   is held (`-BUSY` for its commands from every loop, its loop's
//!   clients served from the script's hook), the caller's loop is served
//!   from the hook too, stalled (`-BUSY` for its clients, as Redis answers
//!   every client while busy), a hub's own loop as well when it is
//!   neither; SCRIPT KILL from any of them stops the script; a third
//!   shard's clients keep being served (16 shards);
//! * one that can be taken back (it wrote nothing it cannot undo) is, and
//!   runs again as a hop: the caller's loop is free again (its clients
//!   answered as usual) while the key's shard is busy.
//!
//! Consolidated layouts only (every shard on one hub: the by-call path);
//! the replies that Redis gives too are compared with a real
//! redis-server 7.0 (one thread there: everything is `-BUSY`).
//!
//! Every wait is bounded: replies by the connections' reply timeouts (a
//! loop that is not served fails the test instead of hanging it), loops
//! in count.

mod common;

use std::time::Duration;

use common::{
    encode_command, key_on, slow_connection_on as connection_on, wait_busy, RawConn, Server,
    BUSY_EVAL,
};

/// Publishes (not a write, but no restart can take it back), reads its
/// key, spins.
const PUBLISH_SPIN: &str = "redis.call('PUBLISH', 'ch', 'm') redis.call('GET', KEYS[1]) \
     while true do end";
/// Sets its key (taken back by a restart), spins.
const SET_SPIN: &str = "redis.call('SET', KEYS[1], 'spun') while true do end";

/// A consolidated Tessera with `nshards`, once every shard is on one hub
/// (thread 0, whose own loop is shard 0's).
fn hub(nshards: usize) -> Server {
    let s = Server::tessera(&[
        "--shards",
        &nshards.to_string(),
        "--shard-consolidation",
        "yes",
    ]);
    common::wait_shard_threads(&s, 1);
    s
}

/// The clients of a scenario: `spin` (the caller) and `near` on the loop
/// of shard `caller`, `held` on the loop of shard `key`, whose key `k`
/// the script declares; `kc` is a key of the caller's shard. The
/// threshold is lowered to 100 ms.
struct Setup {
    spin: RawConn,
    near: RawConn,
    held: RawConn,
    k: String,
    kc: String,
}

fn setup(s: &Server, nshards: usize, caller: usize, key: usize) -> Setup {
    let (k, kc) = (key_on(key, nshards, "k"), key_on(caller, nshards, "c"));
    let mut held = connection_on(s, &k);
    assert_eq!(
        held.cmd_str(&["CONFIG", "SET", "busy-reply-threshold", "100"]),
        b"+OK\r\n"
    );
    let near = connection_on(s, &kc);
    let mut spin = connection_on(s, &kc);
    spin.set_reply_timeout(Duration::from_secs(60));
    Setup {
        spin,
        near,
        held,
        k,
        kc,
    }
}

/// The PUBLISH-then-spin script from shard `caller`'s loop on a key of
/// shard `key`: every reply, in order, up to the kill from `killer`'s
/// loop (`near`: the caller's; else the key's). `others` (a hub's own
/// loop that is neither, a third shard's loop) are checked in between by
/// `check_others`.
fn publish_spin(
    s: &Server,
    (nshards, caller, key): (usize, usize, usize),
    kill_from_near: bool,
    check_others: &mut dyn FnMut(),
) -> Vec<Vec<u8>> {
    let Setup {
        mut spin,
        mut near,
        mut held,
        k,
        kc,
    } = setup(s, nshards, caller, key);
    let mut got = Vec::new();
    spin.send(&encode_command(&[
        b"EVAL",
        PUBLISH_SPIN.as_bytes(),
        b"1",
        k.as_bytes(),
    ]));
    got.push(wait_busy(&mut held));
    got.push(held.cmd_str(&["GET", &k]));
    // The caller's loop: served from the hook, stalled.
    got.push(near.cmd_str(&["PING"]));
    got.push(near.cmd_str(&["GET", &k]));
    got.push(near.cmd_str(&["GET", &kc]));
    got.push(held.cmd_str(&["GET", &kc]));
    check_others();
    let killer = if kill_from_near { &mut near } else { &mut held };
    got.push(killer.cmd_str(&["SCRIPT", "KILL"]));
    let r = spin.read_reply();
    assert!(
        r.starts_with(b"-ERR Script killed by user with SCRIPT KILL..."),
        "{}",
        String::from_utf8_lossy(&r)
    );
    // Every loop is served again.
    got.push(near.cmd_str(&["PING"]));
    got.push(held.cmd_str(&["GET", &k]));
    got.push(spin.cmd_str(&["PING"]));
    got
}

fn publish_spin_want() -> Vec<Vec<u8>> {
    let mut want = vec![BUSY_EVAL.to_vec(); 6];
    want.push(b"+OK\r\n".to_vec());
    want.extend([
        b"+PONG\r\n".to_vec(),
        b"$-1\r\n".to_vec(),
        b"+PONG\r\n".to_vec(),
    ]);
    want
}

/// Two shards: the caller on the adopted loop (shard 1) and the key on
/// the hub's own (shard 0), and the other way round; killed from either
/// loop. Fails without the call: the caller's loop, free during a hop,
/// would answer GET of its own shard's key.
#[test]
fn a_script_by_call_stalls_and_serves_the_callers_loop() {
    if common::testing_real_redis() {
        return;
    }
    let s = hub(2);
    for (caller, key) in [(1, 0), (0, 1)] {
        for near in [true, false] {
            common::wait_shard_threads(&s, 1);
            let got = publish_spin(&s, (2, caller, key), near, &mut || {});
            assert_eq!(
                got,
                publish_spin_want(),
                "caller {caller}, key {key}, killed from the caller's loop: {near}"
            );
        }
    }
}

/// Sixteen shards, the caller and the key on two adopted loops: the hub's
/// own loop (shard 0) is served from the hook as well (it cannot go back
/// to another thread), and a third shard's clients, on a loop the
/// watchdog gave back, are answered as usual.
#[test]
fn a_script_by_call_leaves_the_other_loops_served() {
    if common::testing_real_redis() {
        return;
    }
    let s = hub(16);
    let mut own = connection_on(&s, &key_on(0, 16, "o"));
    let third_key = key_on(3, 16, "t");
    let mut third = connection_on(&s, &third_key);
    let got = publish_spin(&s, (16, 1, 2), true, &mut || {
        assert_eq!(own.cmd_str(&["PING"]), BUSY_EVAL);
        assert_eq!(third.cmd_str(&["SET", &third_key, "v"]), b"+OK\r\n");
        assert_eq!(third.cmd_str(&["GET", &third_key]), b"$1\r\nv\r\n");
    });
    assert_eq!(got, publish_spin_want());
    assert_eq!(own.cmd_str(&["PING"]), b"+PONG\r\n");
}

#[test]
fn redis_gives_the_same_replies() {
    if !common::redis_available() || common::testing_real_redis() {
        eprintln!("SKIPPED: needs redis-server on PATH");
        return;
    }
    let s = Server::redis(&[]);
    for near in [true, false] {
        assert_eq!(
            publish_spin(&s, (2, 1, 0), near, &mut || {}),
            publish_spin_want()
        );
    }
}

/// A script that can be taken back is, past the threshold, and runs again
/// as a hop: the key's shard is busy, but the caller's loop is free again
/// (an adopted loop, given back by the watchdog, or the hub's own, whose
/// turn is over). Its first run's write is undone; the kill finds the
/// second run, which wrote already: `-UNKILLABLE`, then SHUTDOWN NOSAVE.
#[test]
fn a_script_by_call_that_can_be_taken_back_runs_again_as_a_hop() {
    if common::testing_real_redis() {
        return;
    }
    let mut s = hub(2);
    let Setup {
        mut spin,
        mut near,
        mut held,
        k,
        kc,
    } = setup(&s, 2, 1, 0);
    spin.send(&encode_command(&[
        b"EVAL",
        SET_SPIN.as_bytes(),
        b"1",
        k.as_bytes(),
    ]));
    assert_eq!(wait_busy(&mut held), BUSY_EVAL);
    assert_eq!(held.cmd_str(&["GET", &k]), BUSY_EVAL);
    // Bounded: the watchdog gives the caller's loop back within moments.
    let mut free = false;
    for _ in 0..500 {
        // A key of the caller's own shard (PING gets -BUSY on every loop
        // while a script is busy, as in Redis).
        if near.cmd_str(&["GET", &kc]) == b"$-1\r\n" {
            free = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(free, "the caller's loop stayed stalled");
    assert_eq!(near.cmd_str(&["SET", &kc, "1"]), b"+OK\r\n");
    assert_eq!(near.cmd_str(&["GET", &k]), BUSY_EVAL);
    let unkillable = near.cmd_str(&["SCRIPT", "KILL"]);
    assert!(unkillable.starts_with(b"-UNKILLABLE"), "{unkillable:?}");
    near.send(&encode_command(&[b"SHUTDOWN", b"NOSAVE"]));
    for _ in 0..1000 {
        if !s.is_running() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("SHUTDOWN NOSAVE did not stop the server");
}
