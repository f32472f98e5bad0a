//! A long script run in place across co-hosted shards (issue 23): it pins
//! every co-hosted shard it holds, and one that cannot be taken back and
//! run again on copies (it PUBLISHed, XADDed, or replaced a value too
//! large to keep for an undo) stays in place past `busy-reply-threshold`.
//! The clients of every pinned loop are then served from the script's
//! hook as those of its own loop are: `-BUSY` for everything but
//! allow-busy commands, SCRIPT KILL / FUNCTION KILL acting on the script,
//! `-UNKILLABLE` once it wrote, SHUTDOWN NOSAVE stopping the server. Before
//! that, they waited for the script's end (forever, for an endless one).
//!
//! Run in the layouts where scripts run in place (consolidated, 2 and 16
//! shards), and the same sequences against a real redis-server 7.0 (one
//! thread there: the texts are compared, not the layouts).
//!
//! Every wait is bounded: replies by the harness's timeouts (a loop that
//! is not served fails the test instead of hanging it), loops in count.

mod common;

use std::time::Duration;

use common::busy::{check, UNKILLABLE};
use common::{
    connection_on, encode_command, key_on, wait_busy, Layout, RawConn, Server, BUSY_EVAL,
    BUSY_FUNCTION,
};

/// Publishes (not a write: killable), reads the other shard's key, spins.
const PUBLISH_SPIN: &str =
    "redis.call('PUBLISH', 'ch', 'm') redis.call('GET', KEYS[2]) while true do end";
/// Appends to a stream of the other shard (an existing stream is never
/// taken back), spins.
const XADD_SPIN: &str = "redis.call('XADD', KEYS[2], '*', 'f', 'v') while true do end";
/// Replaces the other shard's key, whose old value is too large to keep
/// for an undo, spins.
const BIG_SPIN: &str = "redis.call('SET', KEYS[2], 'small') while true do end";
/// A function that publishes and spins.
const LIB: &str = "#!lua name=pspin\nredis.register_function('pspin', function(k) \
     redis.call('PUBLISH', 'ch', 'm') redis.call('GET', k[2]) while true do end end)";

/// Publishes, reads the other shard's key, spins for ARGV[1]
/// microseconds, then sets that key.
const PUBLISH_SPIN_THEN_SET: &str = "redis.call('PUBLISH', 'ch', 'm') redis.call('GET', KEYS[2]) \
     local function now() local t = redis.call('time') return t[1] * 1000000 + t[2] end \
     local t0 = now() while now() - t0 < tonumber(ARGV[1]) do end \
     redis.call('SET', KEYS[2], 'script') return 1";

/// The SHA-1 of `PUBLISH_SPIN` (Redis names the script in its error).
fn publish_spin_sha(c: &mut RawConn) -> String {
    let r = c.cmd_str(&["SCRIPT", "LOAD", PUBLISH_SPIN]);
    String::from_utf8(r[5..45].to_vec()).unwrap()
}

/// Waits (bounded) until `s` has exited.
fn wait_stopped(s: &mut Server, who: &str) {
    for _ in 0..1000 {
        if !s.is_running() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{who}: SHUTDOWN NOSAVE from a pinned loop did not stop the server");
}

/// The clients of a scenario and the script's two keys: `other` lives on
/// the loop of `k1`'s shard, `spin` (the caller) on `k0`'s, `third` on a
/// third shard's (any loop with 2 shards). The threshold is lowered to
/// 100 ms.
struct Setup {
    other: RawConn,
    spin: RawConn,
    third: RawConn,
    k0: String,
    k1: String,
}

fn setup(s: &Server, nshards: usize) -> Setup {
    let (k0, k1) = (key_on(0, nshards, "a"), key_on(1, nshards, "b"));
    let mut third = match nshards {
        2 => s.raw(),
        _ => connection_on(s, &key_on(2, nshards, "c")),
    };
    third.set_reply_timeout(Duration::from_secs(10));
    let mut other = connection_on(s, &k1);
    other.set_reply_timeout(Duration::from_secs(10));
    assert_eq!(
        other.cmd_str(&["CONFIG", "SET", "busy-reply-threshold", "100"]),
        b"+OK\r\n"
    );
    let mut spin = connection_on(s, &k0);
    spin.set_reply_timeout(Duration::from_secs(60));
    Setup {
        other,
        spin,
        third,
        k0,
        k1,
    }
}

/// The counts of `INFO` `section`'s `name:` line fields.
fn info_field(c: &mut RawConn, section: &str, name: &str, field: &str) -> String {
    let r = String::from_utf8(c.cmd_str(&["INFO", section])).unwrap();
    let line = r
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in {r}"));
    line.split(',')
        .find_map(|f| f.strip_prefix(&format!("{field}=")))
        .unwrap_or_else(|| panic!("no {field} in {line}"))
        .to_string()
}

/// (a) A script that only PUBLISHed (not a write) is busy in place: the
/// other loop's client gets `-BUSY`, and so does a command for that
/// loop's shard from a third loop (with 16 shards, one the watchdog gave
/// back to its thread); then the other loop's SCRIPT KILL kills the
/// script; the refusals are counted as Redis counts them. Returns the
/// replies.
fn publish_then_loop(s: &Server, nshards: usize) -> Vec<Vec<u8>> {
    let Setup {
        mut other,
        mut spin,
        mut third,
        k0,
        k1,
    } = setup(s, nshards);
    assert_eq!(other.cmd_str(&["CONFIG", "RESETSTAT"]), b"+OK\r\n");
    let sha = publish_spin_sha(&mut other);
    let mut got = Vec::new();
    spin.send(&encode_command(&[
        b"EVALSHA",
        sha.as_bytes(),
        b"2",
        k0.as_bytes(),
        k1.as_bytes(),
    ]));
    got.push(wait_busy(&mut other));
    got.push(other.cmd_str(&["GET", &k1]));
    got.push(third.cmd_str(&["GET", &k1]));
    got.push(other.cmd_str(&["FUNCTION", "KILL"]));
    got.push(other.cmd_str(&["SCRIPT", "KILL"]));
    got.push(spin.read_reply());
    // Both loops are served again.
    got.push(other.cmd_str(&["GET", &k1]));
    got.push(spin.cmd_str(&["PING"]));
    // The desk's refusals, counted as Redis counts them: PING's and GET's
    // rejected calls, one BUSY error each (and FUNCTION KILL's).
    // (PING's rejected call: the one `wait_busy` returned.)
    for (cmd, field) in [("ping", "rejected_calls"), ("get", "rejected_calls")] {
        let n = info_field(&mut other, "commandstats", &format!("cmdstat_{cmd}"), field);
        got.push(format!("{cmd} {field}={n}").into_bytes());
    }
    let n = info_field(&mut other, "errorstats", "errorstat_BUSY", "count");
    got.push(format!("errorstat_BUSY count={n}").into_bytes());
    got
}

/// (a) with a function: FUNCTION KILL from the pinned loop. (A server of
/// its own: a stuck round spreads the shards for a while, see
/// `server::host`.)
fn function_publish_then_loop(s: &Server, nshards: usize) -> Vec<Vec<u8>> {
    let Setup {
        mut other,
        mut spin,
        k0,
        k1,
        ..
    } = setup(s, nshards);
    let mut got = Vec::new();
    let r = other.cmd_str(&["FUNCTION", "LOAD", "REPLACE", LIB]);
    assert_eq!(r, b"$5\r\npspin\r\n");
    spin.send(&encode_command(&[
        b"FCALL",
        b"pspin",
        b"2",
        k0.as_bytes(),
        k1.as_bytes(),
    ]));
    got.push(wait_busy(&mut other));
    got.push(other.cmd_str(&["SCRIPT", "KILL"]));
    got.push(other.cmd_str(&["FUNCTION", "KILL"]));
    got.push(spin.read_reply());
    got.push(other.cmd_str(&["GET", &k1]));
    got
}

fn publish_then_loop_want(sha: &str) -> Vec<Vec<u8>> {
    vec![
        BUSY_EVAL.to_vec(),
        BUSY_EVAL.to_vec(),
        BUSY_EVAL.to_vec(),
        BUSY_EVAL.to_vec(),
        b"+OK\r\n".to_vec(),
        format!(
            "-ERR Script killed by user with SCRIPT KILL... script: {sha}, on @user_script:1.\r\n"
        )
        .into_bytes(),
        b"$-1\r\n".to_vec(),
        b"+PONG\r\n".to_vec(),
        b"ping rejected_calls=1".to_vec(),
        b"get rejected_calls=2".to_vec(),
        b"errorstat_BUSY count=4".to_vec(),
    ]
}

fn function_publish_then_loop_want() -> Vec<Vec<u8>> {
    vec![
        BUSY_FUNCTION.to_vec(),
        BUSY_FUNCTION.to_vec(),
        b"+OK\r\n".to_vec(),
        b"-ERR Script killed by user with SCRIPT KILL... script: pspin, on @user_function:2.\r\n"
            .to_vec(),
        b"$-1\r\n".to_vec(),
    ]
}

/// (b) A script that wrote what cannot be taken back, then loops: the
/// other loop's client gets `-BUSY`, SCRIPT KILL `-UNKILLABLE`, SHUTDOWN
/// `-BUSY`, and SHUTDOWN NOSAVE from it stops the server.
fn write_then_loop(s: &mut Server, nshards: usize, script: &str) -> Vec<Vec<u8>> {
    let Setup {
        mut other,
        mut spin,
        k0,
        k1,
        ..
    } = setup(s, nshards);
    if script == XADD_SPIN {
        // A stream is never copied for an undo.
        let r = other.cmd_str(&["XADD", &k1, "1-1", "f", "v"]);
        assert_eq!(r, b"$3\r\n1-1\r\n");
    } else {
        // Over `run::UNDO_BYTES_MAX` (64 KiB): not copied for an undo.
        let big = "x".repeat(100 << 10);
        assert_eq!(other.cmd_str(&["SET", &k1, &big]), b"+OK\r\n");
    }
    let mut got = Vec::new();
    spin.send(&encode_command(&[
        b"EVAL",
        script.as_bytes(),
        b"2",
        k0.as_bytes(),
        k1.as_bytes(),
    ]));
    got.push(wait_busy(&mut other));
    got.push(other.cmd_str(&["SCRIPT", "KILL"]));
    got.push(other.cmd_str(&["SHUTDOWN"]));
    other.send(&encode_command(&[b"SHUTDOWN", b"NOSAVE"]));
    wait_stopped(s, &format!("{:?}", s.flavor()));
    got
}

/// WATCH of keys of the shards a busy script in place holds, from a
/// pinned loop and from a third one, and (16 shards) of a third shard's
/// key from the pinned loop (its desk sends that shard's job): `+OK`
/// while the script runs, as Redis answers it (before, the pinned loop's
/// waited for the script's end), and the key the script sets afterwards
/// dooms both transactions. Proof that the write came after the
/// watches: the pinned loop's PING, answered after them, still gets
/// `-BUSY`. A script that ended before (a slow machine) is run again
/// longer on a fresh server (`server`: a stuck round leaves the shards
/// apart for a while, where the script would run on copies, not in
/// place), at most four times.
fn watch_then_script_sets(server: &dyn Fn() -> Server, nshards: usize) {
    let k2 = (nshards > 2).then(|| key_on(2, nshards, "w"));
    let mut us = 2_000_000u64;
    for _ in 0..4 {
        let s = server();
        let Setup {
            mut other,
            mut spin,
            mut third,
            k0,
            k1,
        } = setup(&s, nshards);
        spin.send(&encode_command(&[
            b"EVAL",
            PUBLISH_SPIN_THEN_SET.as_bytes(),
            b"2",
            k0.as_bytes(),
            k1.as_bytes(),
            us.to_string().as_bytes(),
        ]));
        assert_eq!(wait_busy(&mut other), BUSY_EVAL);
        let watched = other.cmd_str(&["WATCH", &k0, &k1]);
        if watched == BUSY_EVAL && s.flavor() == common::Flavor::Tessera {
            // The shards were apart when the script started (a busy
            // machine spread them): it runs on copies, holding neither
            // shard, and a WATCH of its home shard's key is refused as
            // that shard's commands are. Not this test's case: again.
            assert_eq!(spin.read_reply(), b":1\r\n");
            continue;
        }
        assert_eq!(watched, b"+OK\r\n");
        if let Some(k2) = &k2 {
            assert_eq!(other.cmd_str(&["WATCH", k2]), b"+OK\r\n");
        }
        assert_eq!(third.cmd_str(&["WATCH", &k1]), b"+OK\r\n");
        let proven = other.cmd_str(&["PING"]) == BUSY_EVAL;
        assert_eq!(spin.read_reply(), b":1\r\n");
        if !proven {
            us *= 4;
            continue;
        }
        for c in [&mut other, &mut third] {
            assert_eq!(c.cmd_str(&["MULTI"]), b"+OK\r\n");
            assert_eq!(c.cmd_str(&["PING"]), b"+QUEUED\r\n");
            assert_eq!(c.cmd_str(&["EXEC"]), b"*-1\r\n");
        }
        return;
    }
    panic!("the script always ended before the watches");
}

fn write_then_loop_want() -> Vec<Vec<u8>> {
    vec![BUSY_EVAL.to_vec(), UNKILLABLE.to_vec(), BUSY_EVAL.to_vec()]
}

/// A Tessera in `layout`, once every shard is on one thread (where a
/// script over two shards runs in place).
fn in_place_server(layout: Layout) -> Server {
    let s = layout.tessera(&[]);
    common::wait_shard_threads(&s, 1);
    s
}

const IN_PLACE_LAYOUTS: [Layout; 2] = [Layout::new(2, true), Layout::new(16, true)];

fn published_script_is_killed_from_a_pinned_loop(layout: Layout) {
    if common::testing_real_redis() {
        return;
    }
    let s = in_place_server(layout);
    let sha = publish_spin_sha(&mut s.raw());
    let got = publish_then_loop(&s, layout.shards);
    check(&got, &publish_then_loop_want(&sha), &layout.to_string());
    let s = in_place_server(layout);
    let got = function_publish_then_loop(&s, layout.shards);
    check(
        &got,
        &function_publish_then_loop_want(),
        &layout.to_string(),
    );
}

fn unkillable_script_is_stopped_by_shutdown_from_a_pinned_loop(layout: Layout, script: &str) {
    if common::testing_real_redis() {
        return;
    }
    let mut s = in_place_server(layout);
    let got = write_then_loop(&mut s, layout.shards, script);
    check(&got, &write_then_loop_want(), &layout.to_string());
}

#[test]
fn s2_publish_then_loop() {
    published_script_is_killed_from_a_pinned_loop(IN_PLACE_LAYOUTS[0]);
}

#[test]
fn s16_publish_then_loop() {
    published_script_is_killed_from_a_pinned_loop(IN_PLACE_LAYOUTS[1]);
}

#[test]
fn s2_watch_while_busy_in_place() {
    if !common::testing_real_redis() {
        watch_then_script_sets(&|| in_place_server(IN_PLACE_LAYOUTS[0]), 2);
    }
}

#[test]
fn s16_watch_while_busy_in_place() {
    if !common::testing_real_redis() {
        watch_then_script_sets(&|| in_place_server(IN_PLACE_LAYOUTS[1]), 16);
    }
}

#[test]
fn s2_xadd_then_loop() {
    unkillable_script_is_stopped_by_shutdown_from_a_pinned_loop(IN_PLACE_LAYOUTS[0], XADD_SPIN);
}

#[test]
fn s16_xadd_then_loop() {
    unkillable_script_is_stopped_by_shutdown_from_a_pinned_loop(IN_PLACE_LAYOUTS[1], XADD_SPIN);
}

#[test]
fn s2_big_write_then_loop() {
    unkillable_script_is_stopped_by_shutdown_from_a_pinned_loop(IN_PLACE_LAYOUTS[0], BIG_SPIN);
}

#[test]
fn s16_big_write_then_loop() {
    unkillable_script_is_stopped_by_shutdown_from_a_pinned_loop(IN_PLACE_LAYOUTS[1], BIG_SPIN);
}

#[test]
fn redis_gives_the_same_replies() {
    if !common::redis_available() || common::testing_real_redis() {
        eprintln!("SKIPPED: needs redis-server on PATH");
        return;
    }
    let s = Server::redis(&[]);
    let sha = publish_spin_sha(&mut s.raw());
    check(
        &publish_then_loop(&s, 16),
        &publish_then_loop_want(&sha),
        "redis-server (publish)",
    );
    watch_then_script_sets(&|| Server::redis(&[]), 16);
    let s = Server::redis(&[]);
    check(
        &function_publish_then_loop(&s, 2),
        &function_publish_then_loop_want(),
        "redis-server (function)",
    );
    for script in [XADD_SPIN, BIG_SPIN] {
        let mut s = Server::redis(&[]);
        check(
            &write_then_loop(&mut s, 2, script),
            &write_then_loop_want(),
            "redis-server (write)",
        );
    }
}
