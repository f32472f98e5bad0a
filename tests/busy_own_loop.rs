//! A long script on a loop a hub adopted (issue 23, point 5): the hub's
//! own loop cannot go back to its thread for good (the watchdog frees
//! only adopted loops), so the hub lends it to the thread of the loop
//! running the script (`server::host::loan`), where its clients are
//! served as any other shard's while a script is busy: its own shard's
//! keys answered (Redis, one thread, answers them `-BUSY`: the one reply
//! compared that differs, as point 5 asks), `-BUSY` for the script's
//! shard and for what needs no shard, EXEC of a transaction queued before
//! the script aborted with the BUSY text, SCRIPT KILL acting on the
//! script, SHUTDOWN NOSAVE stopping the server. Before, they waited for
//! the script's end (forever for an endless one): Redis's Tcl unit/multi
//! "just EXEC and script timeout" hung about half its runs; then they got
//! `-BUSY` for everything (see tests/busy_hub.rs).
//!
//! With every shard on one hub (thread 0), the hub's own loop is shard
//! 0's and shard 1's loop is adopted: the script runs on a connection of
//! shard 1's loop, the clients it must not stall live on shard 0's.
//! Run consolidated with 2 and 16 shards, and the same sequence against a
//! real redis-server 7.0 (one thread there: the texts are compared).
//!
//! Every wait is bounded: replies by the connections' reply timeouts (a
//! loop that is not served fails the test instead of hanging it), loops
//! in count.

mod common;

use std::time::Duration;

use common::busy::{check, SPIN};
use common::{
    encode_command, key_on, slow_connection_on as connection_on, wait_busy, Layout, RawConn,
    Server, BUSY_EVAL,
};

/// The clients: `r` and `r2` on the hub's own loop (shard 0), `rd1` on an
/// adopted one (shard 1), whose endless script `rd1` starts. `xx` is a key
/// of shard 0, `yy` of shard 1.
struct Setup {
    r: RawConn,
    r2: RawConn,
    rd1: RawConn,
    xx: String,
    yy: String,
}

fn setup(s: &Server, nshards: usize) -> Setup {
    let (xx, yy) = (key_on(0, nshards, "x"), key_on(1, nshards, "y"));
    let mut r = connection_on(s, &xx);
    let r2 = connection_on(s, &xx);
    let mut rd1 = connection_on(s, &yy);
    rd1.set_reply_timeout(Duration::from_secs(30));
    assert_eq!(
        r.cmd_str(&["CONFIG", "SET", "lua-time-limit", "10"]),
        b"+OK\r\n"
    );
    Setup { r, r2, rd1, xx, yy }
}

/// Redis's unit/multi "just EXEC and script timeout", with the own loop's
/// other replies while busy: every reply, in order.
fn exec_while_busy(s: &Server, nshards: usize) -> Vec<Vec<u8>> {
    let Setup {
        mut r,
        mut r2,
        mut rd1,
        xx,
        yy,
    } = setup(s, nshards);
    let mut got = vec![r.cmd_str(&["SET", &xx, "1"])];
    got.push(r2.cmd_str(&["MULTI"]));
    got.push(r2.cmd_str(&["INCR", &xx]));
    rd1.send(&encode_command(&[b"EVAL", SPIN.as_bytes(), b"0"]));
    got.push(wait_busy(&mut r));
    got.push(r.cmd_str(&["GET", &xx]));
    got.push(r.cmd_str(&["GET", &yy]));
    got.push(r2.cmd_str(&["EXEC"]));
    got.push(r.cmd_str(&["SCRIPT", "KILL"]));
    let killed = rd1.read_reply();
    assert!(
        killed.starts_with(b"-ERR Script killed by user with SCRIPT KILL..."),
        "{}",
        String::from_utf8_lossy(&killed)
    );
    got.push(r.cmd_str(&["GET", &xx]));
    got.push(r2.cmd_str(&["PING", "asdf"]));
    got.push(rd1.cmd_str(&["PING"]));
    got
}

/// `redis`: Redis's replies (its own shard's GET is `-BUSY` there).
fn exec_while_busy_want(redis: bool) -> Vec<Vec<u8>> {
    let execabort = [
        b"-EXECABORT Transaction discarded because of: ".as_slice(),
        &BUSY_EVAL[1..],
    ]
    .concat();
    vec![
        b"+OK\r\n".to_vec(),
        b"+OK\r\n".to_vec(),
        b"+QUEUED\r\n".to_vec(),
        BUSY_EVAL.to_vec(),
        if redis {
            BUSY_EVAL.to_vec()
        } else {
            b"$1\r\n1\r\n".to_vec()
        },
        BUSY_EVAL.to_vec(),
        execabort,
        b"+OK\r\n".to_vec(),
        b"$1\r\n1\r\n".to_vec(),
        b"$4\r\nasdf\r\n".to_vec(),
        b"+PONG\r\n".to_vec(),
    ]
}

/// SHUTDOWN NOSAVE from the own loop stops the server while the script
/// on the adopted loop spins.
fn shutdown_while_busy(s: &mut Server, nshards: usize) {
    let Setup { mut r, mut rd1, .. } = setup(s, nshards);
    rd1.send(&encode_command(&[b"EVAL", SPIN.as_bytes(), b"0"]));
    assert_eq!(wait_busy(&mut r), BUSY_EVAL);
    r.send(&encode_command(&[b"SHUTDOWN", b"NOSAVE"]));
    for _ in 0..1000 {
        if !s.is_running() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("SHUTDOWN NOSAVE from the hub's own loop did not stop the server");
}

/// The symmetric case: the script spins on the hub's own loop (shard
/// 0), the client lives on an adopted one (shard 1), which the watchdog
/// gives back to its thread: a command for shard 0's keys gets `-BUSY`
/// there (the first ones may wait for the watchdog), and its SCRIPT KILL
/// stops the script. Every reply, in order.
fn script_on_the_own_loop(s: &Server, nshards: usize) -> Vec<Vec<u8>> {
    let Setup {
        r: mut spin,
        mut rd1,
        xx,
        ..
    } = setup(s, nshards);
    spin.set_reply_timeout(Duration::from_secs(30));
    assert_eq!(spin.cmd_str(&["SET", &xx, "1"]), b"+OK\r\n");
    spin.send(&encode_command(&[b"EVAL", SPIN.as_bytes(), b"0"]));
    let mut got = Vec::new();
    for _ in 0..500 {
        let r = rd1.cmd_str(&["GET", &xx]);
        if r != b"$1\r\n1\r\n" {
            got.push(r);
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    got.push(rd1.cmd_str(&["SCRIPT", "KILL"]));
    let killed = spin.read_reply();
    assert!(
        killed.starts_with(b"-ERR Script killed by user with SCRIPT KILL..."),
        "{}",
        String::from_utf8_lossy(&killed)
    );
    got.push(rd1.cmd_str(&["GET", &xx]));
    got.push(spin.cmd_str(&["PING"]));
    got
}

fn script_on_the_own_loop_want() -> Vec<Vec<u8>> {
    vec![
        BUSY_EVAL.to_vec(),
        b"+OK\r\n".to_vec(),
        b"$1\r\n1\r\n".to_vec(),
        b"+PONG\r\n".to_vec(),
    ]
}

/// A Tessera in `layout` once every shard is on one hub (thread 0).
fn consolidated(layout: Layout) -> Server {
    let s = layout.tessera(&[]);
    common::wait_shard_threads(&s, 1);
    s
}

#[test]
fn s2_exec_while_a_script_spins_on_an_adopted_loop() {
    let layout = Layout::new(2, true);
    let got = exec_while_busy(&consolidated(layout), 2);
    check(&got, &exec_while_busy_want(false), &layout.to_string());
}

#[test]
fn s16_exec_while_a_script_spins_on_an_adopted_loop() {
    let layout = Layout::new(16, true);
    let got = exec_while_busy(&consolidated(layout), 16);
    check(&got, &exec_while_busy_want(false), &layout.to_string());
}

#[test]
fn s2_shutdown_nosave_from_the_hubs_own_loop() {
    shutdown_while_busy(&mut consolidated(Layout::new(2, true)), 2);
}

#[test]
fn s16_shutdown_nosave_from_the_hubs_own_loop() {
    shutdown_while_busy(&mut consolidated(Layout::new(16, true)), 16);
}

#[test]
fn s2_script_on_the_hubs_own_loop() {
    let layout = Layout::new(2, true);
    let got = script_on_the_own_loop(&consolidated(layout), 2);
    check(&got, &script_on_the_own_loop_want(), &layout.to_string());
}

#[test]
fn s16_script_on_the_hubs_own_loop() {
    let layout = Layout::new(16, true);
    let got = script_on_the_own_loop(&consolidated(layout), 16);
    check(&got, &script_on_the_own_loop_want(), &layout.to_string());
}

#[test]
fn redis_gives_the_same_replies() {
    if !common::redis_available() || common::testing_real_redis() {
        eprintln!("SKIPPED: needs redis-server on PATH");
        return;
    }
    let got = exec_while_busy(&Server::redis(&[]), 2);
    check(&got, &exec_while_busy_want(true), "redis-server");
    shutdown_while_busy(&mut Server::redis(&[]), 2);
    let got = script_on_the_own_loop(&Server::redis(&[]), 2);
    check(
        &got,
        &script_on_the_own_loop_want(),
        "redis-server (own loop)",
    );
}
