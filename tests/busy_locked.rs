//! Long scripts that hold shards through the transaction layer's locks
//! rather than in place (issue 23 point 5): a script that calls KEYS with
//! the shards apart (`commands::script::every`: whole-shard write locks on
//! every shard), and a script inside a MULTI/EXEC block whose locks span
//! several shards. Past `busy-reply-threshold` other clients get Redis's
//! `-BUSY` (not a silent wait behind the locks):
//!
//! * commands of every locked shard, from any thread, and the requests
//!   that already waited behind the locks;
//! * every command of the clients of the script's own thread (served from
//!   the script's hook, as for a script run in place);
//! * pipelines stay in order; SCRIPT KILL ends the script, then everything
//!   is served again; SHUTDOWN NOSAVE stops the server.
//!
//! A shard the script's transaction does not lock keeps serving its keys
//! (Redis answers `-BUSY` there too: the one difference, by design).
//!
//! Layouts with the shards apart (consolidated, the scripts run in place:
//! `busy_in_place`). The replies are compared with a real redis-server 7.0
//! when one is installed. Every wait is bounded: replies by the
//! connections' reply timeouts (a request left waiting behind the locks
//! fails the test instead of hanging it), loops in count.

mod common;

use std::time::Duration;

use common::busy::{on_shard, KEYS_SPIN, SPIN};
use common::{encode_command, key_on, wait_busy, Flavor, Layout, RawConn, Server, BUSY_EVAL};

const THRESHOLD_MS: u64 = 100;

/// The server: Tessera with `nshards` apart, busy-reply-threshold 100 ms.
fn tessera(nshards: usize) -> Server {
    common::busy::tessera(Layout::new(nshards, false), THRESHOLD_MS)
}

fn redis() -> Option<Server> {
    common::busy::redis(THRESHOLD_MS)
}

/// A key of each shard (`k<n>`), each set to `v<shard>`, and a connection
/// on each shard's loop.
fn keys_and_conns(s: &Server, nshards: usize) -> (Vec<String>, Vec<RawConn>) {
    let keys: Vec<String> = (0..nshards).map(|i| key_on(i, nshards, "k")).collect();
    let conns: Vec<RawConn> = (0..nshards).map(|i| on_shard(s, i, nshards)).collect();
    let mut c = s.raw();
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(c.cmd_str(&["SET", k, &format!("v{i}")]), b"+OK\r\n");
    }
    (keys, conns)
}

fn bulk(s: &str) -> Vec<u8> {
    format!("${}\r\n{s}\r\n", s.len()).into_bytes()
}

fn pipeline(c: &mut RawConn, cmds: &[&[&str]]) -> Vec<Vec<u8>> {
    let mut pipe = Vec::new();
    for cmd in cmds {
        let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_bytes()).collect();
        pipe.extend_from_slice(&encode_command(&args));
    }
    c.send(&pipe);
    c.read_replies(cmds.len())
}

/// A script on every shard (EVAL calling KEYS, the script's home shard 0),
/// busy: every shard's keys get `-BUSY` from every loop, the own loop's
/// included; a request sent while the script took its locks is answered
/// (its value, or `-BUSY`); SCRIPT KILL ends it. Returns the replies that
/// Redis gives alike, in order.
fn every_shard_scenario(s: &Server, nshards: usize) -> Vec<Vec<u8>> {
    let (keys, mut conns) = keys_and_conns(s, nshards);
    let mut spin = on_shard(s, 0, nshards);
    spin.set_reply_timeout(Duration::from_secs(60));
    let mut got = Vec::new();
    spin.send(&encode_command(&[b"EVAL", KEYS_SPIN.as_bytes(), b"0"]));
    // Sent while the script starts, after it took the locks (nearly
    // always: they wait there until it is published busy) or before: of
    // a key of another shard, and of the script's home shard.
    let last = nshards - 1;
    std::thread::sleep(Duration::from_millis(30));
    common::send_str(&mut conns[last], &["GET", &keys[last]]);
    common::send_str(&mut conns[last], &["GET", &keys[0]]);
    // The script's own loop answers while busy (PING from shard 0's loop).
    got.push(wait_busy(&mut conns[0]));
    for i in [last, 0] {
        let early = conns[last].read_reply();
        assert!(
            early == BUSY_EVAL || early == bulk(&format!("v{i}")),
            "a GET sent as the script started: {}",
            String::from_utf8_lossy(&early)
        );
    }
    for (i, k) in keys.iter().enumerate() {
        got.push(conns[i].cmd_str(&["GET", k]));
        got.push(conns[0].cmd_str(&["SET", k, "x"]));
        got.push(conns[last - i].cmd_str(&["GET", k]));
    }
    // A new connection too.
    got.push(s.raw().cmd_str(&["GET", &keys[last]]));
    got.extend(pipeline(
        &mut conns[last],
        &[
            &["GET", &keys[0]],
            &["SET", &keys[last], "y"],
            &["PING"],
            &["GET", &keys[last]],
        ],
    ));
    got.push(conns[nshards / 2].cmd_str(&["SCRIPT", "KILL"]));
    got.push(spin.read_reply());
    // Everything served again, nothing written meanwhile.
    for (i, k) in keys.iter().enumerate() {
        got.push(conns[i].cmd_str(&["GET", k]));
        got.push(conns[last - i].cmd_str(&["GET", k]));
    }
    got.push(spin.cmd_str(&["PING"]));
    got
}

fn every_shard(nshards: usize) {
    let s = tessera(nshards);
    let got = every_shard_scenario(&s, nshards);
    // Without redis-server: what Redis answers.
    let n = 1 + 3 * nshards + 1 + 4;
    for (i, r) in got[..n].iter().enumerate() {
        assert_eq!(r, BUSY_EVAL, "reply {i}: {}", String::from_utf8_lossy(r));
    }
    assert_eq!(got[n], b"+OK\r\n");
    assert!(got[n + 1].starts_with(b"-ERR Script killed by user with SCRIPT KILL..."));
    if let Some(r) = redis() {
        assert_eq!(every_shard_scenario(&r, nshards), got, "as redis-server");
    }
}

#[test]
fn every_shard_s2_apart() {
    every_shard(2);
}

#[test]
fn every_shard_s16_apart() {
    every_shard(16);
}

/// The shards of the MULTI scenario: the script's home 0, the block's
/// MSET keys (`a`, `b`: the last shard and the middle one, shards the
/// block locks while the script runs), and at 16 shards a shard it does
/// not lock.
fn multi_keys(nshards: usize) -> (String, String, Option<usize>) {
    let (sa, sb) = (nshards - 1, nshards / 2);
    let free = (nshards > 2).then_some(1);
    (key_on(sa, nshards, "a"), key_on(sb, nshards, "b"), free)
}

/// A spinning script inside MULTI/EXEC (on its home shard 0), followed by
/// an MSET of two keys of other shards: the block holds their locks while
/// the script runs. With `every`, the block reads the keyspace first
/// (DBSIZE) and its script calls KEYS: it write-locks every shard whole,
/// and its script reaches every shard (`script::every`). Returns the
/// replies Redis gives alike, and the reply of a GET on a shard the block
/// does not lock (`None` at 2 shards, or with `every`).
fn multi_scenario(s: &Server, nshards: usize, every: bool) -> (Vec<Vec<u8>>, Option<Vec<u8>>) {
    let (keys, mut conns) = keys_and_conns(s, nshards);
    let (a, b, free) = multi_keys(nshards);
    let free = free.filter(|_| !every);
    let (sa, sb) = (nshards - 1, nshards / 2);
    let mut spin = on_shard(s, 0, nshards);
    spin.set_reply_timeout(Duration::from_secs(60));
    let mut got = Vec::new();
    got.push(spin.cmd_str(&["MULTI"]));
    if every {
        got.push(spin.cmd_str(&["DBSIZE"]));
    }
    got.push(spin.cmd_str(&["EVAL", if every { KEYS_SPIN } else { SPIN }, "0"]));
    got.push(spin.cmd_str(&["MSET", &a, "1", &b, "2"]));
    spin.send(&encode_command(&[b"EXEC"]));
    got.push(wait_busy(&mut conns[0]));
    for key in [&a, &b] {
        got.push(conns[sa].cmd_str(&["GET", key]));
        got.push(conns[sb].cmd_str(&["SET", key, "x"]));
        got.push(conns[0].cmd_str(&["GET", key]));
    }
    got.push(conns[0].cmd_str(&["GET", &keys[0]]));
    got.extend(pipeline(
        &mut conns[sa],
        &[&["GET", &a], &["PING"], &["SET", &b, "y"]],
    ));
    // Not locked by the block: served on Tessera (Redis: -BUSY).
    let unlocked = free.map(|f| conns[f].cmd_str(&["GET", &keys[f]]));
    got.push(conns[sb].cmd_str(&["SCRIPT", "KILL"]));
    got.push(spin.read_reply());
    got.push(conns[sa].cmd_str(&["MGET", &a, &b]));
    got.push(conns[0].cmd_str(&["PING"]));
    (got, unlocked)
}

fn multi(nshards: usize, every: bool) {
    let s = tessera(nshards);
    let (got, unlocked) = multi_scenario(&s, nshards, every);
    let q = 3 + usize::from(every);
    assert_eq!(got[0], b"+OK\r\n");
    assert!(got[1..q].iter().all(|r| r == b"+QUEUED\r\n"));
    let n = q + 1 + 6 + 1 + 3;
    for (i, r) in got[q..n].iter().enumerate() {
        assert_eq!(
            r,
            BUSY_EVAL,
            "reply {}: {}",
            i + q,
            String::from_utf8_lossy(r)
        );
    }
    assert_eq!(got[n], b"+OK\r\n");
    let exec = if every {
        format!("*3\r\n:{nshards}\r\n-ERR Script killed by user with SCRIPT KILL...")
    } else {
        "*2\r\n-ERR Script killed by user with SCRIPT KILL...".to_string()
    };
    assert!(
        got[n + 1].starts_with(exec.as_bytes()),
        "{}",
        String::from_utf8_lossy(&got[n + 1])
    );
    assert_eq!(got[n + 2], b"*2\r\n$1\r\n1\r\n$1\r\n2\r\n");
    if let Some(u) = unlocked {
        assert_eq!(
            u, b"$2\r\nv1\r\n",
            "a shard the block does not lock is served"
        );
    }
    if let Some(r) = redis() {
        let (theirs, _) = multi_scenario(&r, nshards, every);
        assert_eq!(theirs, got, "as redis-server");
    }
}

#[test]
fn multi_s2_apart() {
    multi(2, false);
}

#[test]
fn multi_s16_apart() {
    multi(16, false);
}

#[test]
fn multi_every_shard_s2_apart() {
    multi(2, true);
}

#[test]
fn multi_every_shard_s16_apart() {
    multi(16, true);
}

/// SHUTDOWN NOSAVE from the script's own loop (`own`) or from another
/// shard's stops the server while a script on every shard is busy.
fn shutdown_nosave(nshards: usize, own: bool) {
    let mut s = tessera(nshards);
    assert_ne!(s.flavor(), Flavor::Redis);
    let (_, mut conns) = keys_and_conns(&s, nshards);
    let mut spin = on_shard(&s, 0, nshards);
    spin.set_reply_timeout(Duration::from_secs(60));
    spin.send(&encode_command(&[b"EVAL", KEYS_SPIN.as_bytes(), b"0"]));
    assert_eq!(wait_busy(&mut conns[0]), BUSY_EVAL);
    let from = if own { 0 } else { nshards - 1 };
    assert_eq!(conns[from].cmd_str(&["SHUTDOWN"]), BUSY_EVAL);
    common::send_str(&mut conns[from], &["SHUTDOWN", "NOSAVE"]);
    for _ in 0..1000 {
        if !s.is_running() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("SHUTDOWN NOSAVE did not stop the server");
}

#[test]
fn shutdown_nosave_from_the_scripts_loop() {
    shutdown_nosave(2, true);
    shutdown_nosave(16, true);
}

#[test]
fn shutdown_nosave_from_another_loop() {
    shutdown_nosave(2, false);
    shutdown_nosave(16, false);
}

/// A client of the script's home loop sends GET of a home shard key, one
/// after the other, while a script on every shard starts: a request that
/// came while the script held the home shard's lock but had not run yet
/// (held back by the lock) is answered `-BUSY` once the script is busy,
/// as the later ones are, instead of waiting for its end (which only the
/// SCRIPT KILL after this client's `-BUSY` brings). Whether a request
/// falls in that window is up to the timing: each run may or may not
/// reach it; none may hang.
fn home_loop_requests_held_by_its_lock(nshards: usize) {
    let s = tessera(nshards);
    let (keys, mut conns) = keys_and_conns(&s, nshards);
    let mut spin = on_shard(&s, 0, nshards);
    spin.set_reply_timeout(Duration::from_secs(60));
    let mut hammer = on_shard(&s, 0, nshards);
    let key = keys[0].clone();
    let gets = std::thread::spawn(move || {
        for n in 0..1_000_000u32 {
            let r = hammer.cmd_str(&["GET", &key]);
            if r == BUSY_EVAL {
                return n;
            }
            assert_eq!(r, bulk("v0"));
        }
        panic!("the script never became busy");
    });
    std::thread::sleep(Duration::from_millis(5));
    spin.send(&encode_command(&[b"EVAL", KEYS_SPIN.as_bytes(), b"0"]));
    let served = gets.join();
    let last = nshards - 1;
    assert_eq!(conns[last].cmd_str(&["SCRIPT", "KILL"]), b"+OK\r\n");
    assert!(spin
        .read_reply()
        .starts_with(b"-ERR Script killed by user with SCRIPT KILL..."));
    assert!(
        served.is_ok(),
        "a GET of the home loop waited for the script"
    );
}

#[test]
fn home_loop_requests_held_by_its_lock_s2_apart() {
    home_loop_requests_held_by_its_lock(2);
}

#[test]
fn home_loop_requests_held_by_its_lock_s16_apart() {
    home_loop_requests_held_by_its_lock(16);
}
