//! `CONFIG SET appendonly yes` takes its rewrite's snapshot in the command
//! (every shard at one instant, under whole-keyspace locks), as Redis's
//! startAppendOnly forks it there: a script that starts right after the
//! reply and runs without end cannot hold the rewrite up. The rewrite
//! completes while the script runs (its hook steps the shard the script
//! holds), SHUTDOWN NOSAVE stops the server (it is refused while the
//! first AOF is being written, as Redis's prepareForShutdown), and the
//! AOF loads back with the data of the instant. Redis's Tcl unit/scripting
//! "SHUTDOWN NOSAVE can kill a timedout script anyway" relied on it.

mod common;

use std::time::{Duration, Instant};

use common::{DataDir, Layout, RawConn, Server};
use redis::Connection;

/// Keys written before the AOF is turned on (every shard gets some).
const KEYS: usize = 10_000;

fn populate(c: &mut Connection) {
    for chunk in 0..KEYS / 1000 {
        let mut p = redis::pipe();
        for i in chunk * 1000..(chunk + 1) * 1000 {
            p.cmd("SET")
                .arg(format!("key:{i}"))
                .arg(format!("value-{i}"))
                .ignore();
        }
        p.cmd("HSET")
            .arg(format!("hash:{chunk}"))
            .arg("f")
            .arg(chunk)
            .ignore();
        let _: () = p.query(c).unwrap();
    }
}

fn args<'a>(dir: &'a DataDir, appendonly: &'a str) -> Vec<&'a str> {
    vec![
        "--dir",
        dir.path(),
        "--save",
        "",
        "--appendonly",
        appendonly,
        "--busy-reply-threshold",
        "100",
        "--enable-debug-command",
        "yes",
    ]
}

/// DEBUG DIGEST of the 10k keys, whose reply a debug build on a loaded
/// machine gave after the harness's 5 s (session 22, 3 test threads: EAGAIN):
/// 30 s, a hang guard, not a budget.
fn digest(c: &mut Connection) -> String {
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    redis::cmd("DEBUG").arg("DIGEST").query(c).unwrap()
}

/// The manifest lists a base: the turn-on rewrite is complete on disk.
fn rewritten(dir: &DataDir) -> bool {
    std::fs::read_to_string(dir.0.join("appendonlydir/appendonly.aof.manifest"))
        .is_ok_and(|m| m.contains(" type b"))
}

/// CONFIG SET appendonly yes on `ctl`, and `script` sent on `spin` as
/// soon as its `+OK` is read; returns once `other` gets `-BUSY`.
fn enable_then_spin(ctl: &mut RawConn, spin: &mut RawConn, other: &mut RawConn, script: &[&str]) {
    let set = common::encode_command(&[b"CONFIG", b"SET", b"appendonly", b"yes"]);
    let mut eval: Vec<&[u8]> = vec![b"EVAL"];
    eval.extend(script.iter().map(|s| s.as_bytes()));
    let eval = common::encode_command(&eval);
    ctl.send(&set);
    assert_eq!(ctl.read_reply(), b"+OK\r\n");
    spin.send(&eval);
    assert_eq!(common::wait_busy(other), common::BUSY_EVAL);
}

/// Waits (bounded) for the rewrite to be on disk while the script still
/// runs: `other` still gets `-BUSY` afterwards.
fn rewrite_done_while_busy(dir: &DataDir, other: &mut RawConn, layout: Layout) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !rewritten(dir) {
        assert!(
            Instant::now() < deadline,
            "{layout}: the rewrite never completed while the script ran"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(other.cmd_str(&["PING"]), common::BUSY_EVAL, "{layout}");
}

fn wait_stopped(srv: &mut Server, layout: Layout) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while srv.is_running() {
        assert!(
            Instant::now() < deadline,
            "{layout}: SHUTDOWN NOSAVE did not stop the server"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A one-key script that writes, then loops without end (unkillable):
/// the rewrite completes under it, SHUTDOWN NOSAVE stops the server, and
/// a restart loads the data of the rewrite's instant.
fn a_writing_script_does_not_hold_up_the_turn_on_rewrite(layout: Layout) {
    let dir = DataDir::new("aof-enable-busy");
    let mut srv = layout.tessera(&args(&dir, "no"));
    let mut c = srv.conn();
    populate(&mut c);
    let before = digest(&mut c);
    let mut ctl = common::slow_connection_on(&srv, "ctl");
    let mut spin = srv.raw();
    let mut other = srv.raw();
    let script = "redis.call('set', KEYS[1], 'spun') while true do end";
    enable_then_spin(&mut ctl, &mut spin, &mut other, &[script, "1", "spin"]);
    rewrite_done_while_busy(&dir, &mut other, layout);
    other.send(&common::encode_command(&[b"SHUTDOWN", b"NOSAVE"]));
    wait_stopped(&mut srv, layout);
    drop(srv);
    let again = layout.tessera(&args(&dir, "yes"));
    let mut c = again.conn();
    // The script's write never completed: its records were dropped.
    assert_eq!(digest(&mut c), before, "{layout}: the AOF's data");
}

/// A script that holds every shard (it calls KEYS) and loops without end:
/// the rewrite completes under it; once killed, INFO shows the rewrite
/// done and ok, and the AOF loads back (DEBUG LOADAOF) with the data of
/// the instant.
fn a_script_on_every_shard_does_not_hold_up_the_turn_on_rewrite(layout: Layout) {
    let dir = DataDir::new("aof-enable-every");
    let mut srv = layout.tessera(&args(&dir, "no"));
    let mut c = srv.conn();
    populate(&mut c);
    let before = digest(&mut c);
    let mut ctl = common::slow_connection_on(&srv, "ctl");
    let mut spin = srv.raw();
    let mut other = srv.raw();
    let script = "redis.call('keys', 'nomatch:*') while true do end";
    enable_then_spin(&mut ctl, &mut spin, &mut other, &[script, "0"]);
    rewrite_done_while_busy(&dir, &mut other, layout);
    assert_eq!(other.cmd_str(&["SCRIPT", "KILL"]), b"+OK\r\n", "{layout}");
    let r = spin.read_reply();
    assert!(
        r.starts_with(b"-ERR Script killed by user with SCRIPT KILL"),
        "{layout}: {}",
        common::escape(&r, 300)
    );
    let mut c = srv.conn();
    assert_eq!(
        common::info_field(&mut c, "persistence", "aof_rewrite_in_progress"),
        "0"
    );
    assert_eq!(
        common::info_field(&mut c, "persistence", "aof_last_bgrewrite_status"),
        "ok"
    );
    let _: () = redis::cmd("DEBUG").arg("LOADAOF").query(&mut c).unwrap();
    assert_eq!(digest(&mut c), before, "{layout}: the AOF's data");
    other.send(&common::encode_command(&[b"SHUTDOWN", b"NOSAVE"]));
    wait_stopped(&mut srv, layout);
}

per_layout!(
    a_writing_script_does_not_hold_up_the_turn_on_rewrite,
    a_script_on_every_shard_does_not_hold_up_the_turn_on_rewrite,
);
