//! Transactions that wait behind a long script's locks, and WATCH beside
//! one (issue 23 point 5): a script on every shard (KEYS, then a spin)
//! or inside a multi-shard MULTI/EXEC block holds shards through the
//! transaction layer's locks (`commands::script::every`, `multi`).
//!
//! * An MSET across shards or an EXEC of another client whose lock
//!   request already waited at a locked shard when the script went past
//!   `busy-reply-threshold` is withdrawn from every shard it waited at and
//!   answered Redis's `-BUSY` (EXEC: `-EXECABORT ... BUSY ...`), not left
//!   waiting for the script's end (`tx::BusyWithdrawn`); afterwards the
//!   lock table is whole: the same commands run, nothing of the refused
//!   ones was applied.
//! * WATCH of keys of several shards, one of them locked by the busy
//!   script's transaction, is answered `+OK` at once (Redis: WATCH is
//!   allow-busy), from a loop other than the script's; a write the
//!   script's block makes to a watched key afterwards dooms the watcher's
//!   EXEC, as in Redis. So from the script's own loop too (its desk sends
//!   the WATCH's jobs to the free loops and answers once they are back),
//!   and the
//!   block's commands after the script, on other shards, run after it, so
//!   after such WATCHes (`multi`).
//! * A transaction withdrawn at a shard the script's block locks, which
//!   holds a lock on the script's own shard, is answered `-BUSY` at once:
//!   the script's loop drops that lock without waiting for the script.
//!
//! Every layout: shards apart (one thread each: the locks are real) and
//! consolidated on one thread (a script over several shards runs in
//! place there, pinning their loops), 2 and 16 shards. Replies are compared with a real redis-server 7.0 when one is
//! installed. Every wait is bounded (5 s reply timeouts).

mod common;

use std::time::Duration;

use common::busy::{
    busy_or_ended, check, on_shard as conn_on, replies, EXECABORT_BUSY, KEYS_SPIN, SPIN,
};
use common::{encode_command, key_on, wait_busy, Layout, Server, BUSY_EVAL};

const THRESHOLD_MS: u64 = 300;

/// Tessera in `layout`; consolidated, once every shard is on one thread
/// (where a script over several shards runs in place, pinning their
/// loops, instead of under the transaction layer's locks).
fn tessera(layout: Layout) -> Server {
    let s = common::busy::tessera(layout, THRESHOLD_MS);
    if layout.consolidated && !common::testing_real_redis() {
        common::wait_shard_threads(&s, 1);
    }
    s
}

fn redis() -> Option<Server> {
    common::busy::redis(THRESHOLD_MS)
}

/// A script on every shard starts (home shard 0); while it runs, before
/// it is busy, a client of the last shard's loop sends an MSET of a key
/// of shard 0 and one of its own, and another an EXEC of a block setting
/// the same keys (its lock requests wait behind the script's). Once the
/// script is busy both are answered `-BUSY` while it still runs; after
/// SCRIPT KILL nothing of theirs was applied and the same commands run.
fn queued_scenario(s: &Server, nshards: usize) -> Vec<Vec<u8>> {
    let last = nshards - 1;
    let (k0, kl) = (key_on(0, nshards, "q"), key_on(last, nshards, "q"));
    let mut setup = s.raw();
    assert_eq!(setup.cmd_str(&["MSET", &k0, "a", &kl, "b"]), b"+OK\r\n");
    let mut spin = conn_on(s, 0, nshards);
    spin.set_reply_timeout(Duration::from_secs(60));
    let mut ping = conn_on(s, 0, nshards);
    let mut mset = conn_on(s, last, nshards);
    let mut exec = conn_on(s, last, nshards);
    let mut killer = conn_on(s, last, nshards);
    // At 16 shards, a client of a loop neither key is on: its MSET waits
    // at shard 0, the script's own (the script's loop withdraws it).
    let mut mid = (nshards > 2).then(|| conn_on(s, nshards / 2, nshards));
    let mut got = Vec::new();
    got.push(exec.cmd_str(&["MULTI"]));
    got.push(exec.cmd_str(&["SET", &kl, "exec"]));
    got.push(exec.cmd_str(&["SET", &k0, "exec"]));
    spin.send(&encode_command(&[b"EVAL", KEYS_SPIN.as_bytes(), b"0"]));
    // After the script took its locks, before it is busy. It cannot be
    // busy before THRESHOLD_MS after this send, so the sleep stays well
    // below that, and as long as it can: what it stands for is the
    // script's start, which a loaded machine delays (a request sent
    // before the locks would run first, +OK). One that lands after the
    // publication gets the same replies (refused at dispatch), checking
    // less. (60 ms before.)
    std::thread::sleep(Duration::from_millis(THRESHOLD_MS * 2 / 3));
    common::send_str(&mut mset, &["MSET", &kl, "mset", &k0, "mset"]);
    common::send_str(&mut exec, &["EXEC"]);
    if let Some(m) = mid.as_mut() {
        common::send_str(m, &["MSET", &k0, "mid", &kl, "mid"]);
    }
    got.push(wait_busy(&mut ping));
    // Answered while the script still runs.
    got.push(mset.read_reply());
    got.push(exec.read_reply());
    if let Some(m) = mid.as_mut() {
        got.push(m.read_reply());
    }
    got.push(killer.cmd_str(&["SCRIPT", "KILL"]));
    let killed = spin.read_reply();
    assert!(
        killed.starts_with(b"-ERR Script killed by user with SCRIPT KILL..."),
        "{}",
        String::from_utf8_lossy(&killed)
    );
    // Nothing of theirs applied; the locks are whole again.
    got.push(setup.cmd_str(&["MGET", &k0, &kl]));
    got.push(mset.cmd_str(&["MSET", &kl, "2", &k0, "1"]));
    got.push(exec.cmd_str(&["MULTI"]));
    got.push(exec.cmd_str(&["INCR", &kl]));
    got.push(exec.cmd_str(&["INCR", &k0]));
    got.push(exec.cmd_str(&["EXEC"]));
    got
}

fn queued(layout: Layout) {
    let nshards = layout.shards;
    let s = tessera(layout);
    let got = queued_scenario(&s, nshards);
    let mut want: Vec<&[u8]> = vec![
        b"+OK\r\n",
        b"+QUEUED\r\n",
        b"+QUEUED\r\n",
        BUSY_EVAL,
        BUSY_EVAL,
        EXECABORT_BUSY,
    ];
    if nshards > 2 {
        want.push(BUSY_EVAL);
    }
    want.extend::<[&[u8]; 7]>([
        b"+OK\r\n",
        b"*2\r\n$1\r\na\r\n$1\r\nb\r\n",
        b"+OK\r\n",
        b"+OK\r\n",
        b"+QUEUED\r\n",
        b"+QUEUED\r\n",
        b"*2\r\n:3\r\n:2\r\n",
    ]);
    check(&got, &replies(&want), &layout.to_string());
    if let Some(r) = redis() {
        check(&queued_scenario(&r, nshards), &got, "as redis-server");
    }
}

/// A spinning script inside MULTI/EXEC (home shard 0) followed by a SET of
/// a key `a` of the last shard: while the script is busy, a client of the
/// last shard's loop WATCHes `a` and a key `c` of shard 1 (several shards,
/// one locked by the block): `+OK` at once. After SCRIPT KILL the block's
/// SET of `a` ran after the WATCH: the watcher's EXEC fails.
fn watch_scenario(s: &Server, nshards: usize) -> Vec<Vec<u8>> {
    let last = nshards - 1;
    let (a, c) = (key_on(last, nshards, "a"), key_on(1, nshards, "c"));
    let (b, d) = (key_on(0, nshards, "b"), key_on(last, nshards, "d"));
    let mut spin = conn_on(s, 0, nshards);
    spin.set_reply_timeout(Duration::from_secs(60));
    let mut ping = conn_on(s, 0, nshards);
    let mut w = conn_on(s, last, nshards);
    let mut killer = conn_on(s, last, nshards);
    let mut got = Vec::new();
    got.push(spin.cmd_str(&["MULTI"]));
    got.push(spin.cmd_str(&["EVAL", SPIN, "0"]));
    got.push(spin.cmd_str(&["MSET", &a, "1", &b, "2"]));
    spin.send(&encode_command(&[b"EXEC"]));
    got.push(wait_busy(&mut ping));
    got.push(w.cmd_str(&["WATCH", &a, &c]));
    got.push(w.cmd_str(&["WATCH", &d, &c]));
    got.push(killer.cmd_str(&["SCRIPT", "KILL"]));
    let exec = spin.read_reply();
    assert!(
        exec.starts_with(b"*2\r\n-ERR Script killed by user with SCRIPT KILL..."),
        "{}",
        String::from_utf8_lossy(&exec)
    );
    got.push(w.cmd_str(&["MULTI"]));
    got.push(w.cmd_str(&["GET", &a]));
    got.push(w.cmd_str(&["EXEC"]));
    // Not written since: this one runs.
    got.push(w.cmd_str(&["WATCH", &d, &c]));
    got.push(w.cmd_str(&["MULTI"]));
    got.push(w.cmd_str(&["GET", &a]));
    got.push(w.cmd_str(&["EXEC"]));
    got
}

fn watch(layout: Layout) {
    let nshards = layout.shards;
    let s = tessera(layout);
    let got = watch_scenario(&s, nshards);
    let want: Vec<&[u8]> = vec![
        b"+OK\r\n",
        b"+QUEUED\r\n",
        b"+QUEUED\r\n",
        BUSY_EVAL,
        b"+OK\r\n",
        b"+OK\r\n",
        b"+OK\r\n",
        b"+OK\r\n",
        b"+QUEUED\r\n",
        b"*-1\r\n",
        b"+OK\r\n",
        b"+OK\r\n",
        b"+QUEUED\r\n",
        b"*1\r\n$1\r\n1\r\n",
    ];
    check(&got, &replies(&want), &layout.to_string());
    if let Some(r) = redis() {
        check(&watch_scenario(&r, nshards), &got, "as redis-server");
    }
}

/// Reaches every shard (KEYS), spins `ARGV[1]` microseconds (calling
/// TIME, so its thread registers waiting watches between its commands),
/// then sets `ARGV[2]` (a key of another shard) and returns 1.
const KEYS_SPIN_THEN_SET: &str = "redis.call('keys', '*') \
     local function now() local t = redis.call('time') return t[1] * 1000000 + t[2] end \
     local t0 = now() while now() - t0 < tonumber(ARGV[1]) do end \
     redis.call('set', ARGV[2], 'script') return 1";

/// How long [`KEYS_SPIN_THEN_SET`] spins at first, in µs: the WATCHes and
/// the PING after them must come within it. A run where the script ended
/// first proves nothing (on a loaded machine, consolidated, they took up
/// to 2.3 s) and is run again with a spin four times as long, three runs
/// at most (1.5, 6, 24 s). It was 6 s every time: 12 of the test's 13 s.
const SPIN_US: u64 = 1_500_000;

/// A script on every shard (home 0) busy: WATCH from the script's own
/// loop (served by its desk, which runs no job) and from another loop, of
/// keys of several shards, is answered `+OK` at once (the script takes
/// the keys and registers them on their shards before its next command:
/// `script::busy::watch_while_busy`); the key it sets afterwards dooms
/// the transaction, others do not. Proof that the WATCHes came before the
/// write: the own loop's PING after them still gets `-BUSY` (a run
/// without that proof is run again, longer: [`SPIN_US`]; a WATCH that
/// waits for the script's end never has it, and fails the test).
fn every_watch_scenario(s: &Server, nshards: usize) -> Vec<Vec<u8>> {
    let last = nshards - 1;
    let (w0, wl, other) = (
        key_on(0, nshards, "w"),
        key_on(last, nshards, "w"),
        key_on(last, nshards, "o"),
    );
    let mut spin = conn_on(s, 0, nshards);
    spin.set_reply_timeout(Duration::from_secs(60));
    let mut near = conn_on(s, 0, nshards);
    let mut far = conn_on(s, last, nshards);
    let mut us = SPIN_US;
    for _ in 0..3 {
        let mut got = Vec::new();
        spin.send(&encode_command(&[
            b"EVAL",
            KEYS_SPIN_THEN_SET.as_bytes(),
            b"0",
            us.to_string().as_bytes(),
            wl.as_bytes(),
        ]));
        us *= 4;
        let Some(busy) = busy_or_ended(&mut near, &mut spin, b":1\r\n") else {
            continue;
        };
        got.push(busy);
        got.push(near.cmd_str(&["WATCH", &w0, &wl]));
        got.push(far.cmd_str(&["WATCH", &other, &w0]));
        let ping = near.cmd_str(&["PING"]);
        let proven = ping == BUSY_EVAL;
        got.push(ping);
        got.push(spin.read_reply());
        if !proven {
            for c in [&mut near, &mut far] {
                assert_eq!(c.cmd_str(&["UNWATCH"]), b"+OK\r\n");
            }
            continue;
        }
        for c in [&mut near, &mut far] {
            got.push(c.cmd_str(&["MULTI"]));
            got.push(c.cmd_str(&["PING"]));
            got.push(c.cmd_str(&["EXEC"]));
        }
        return got;
    }
    panic!("the script always ended before the WATCHes and the PING after them");
}

fn every_watch(layout: Layout) {
    let nshards = layout.shards;
    let s = tessera(layout);
    let got = every_watch_scenario(&s, nshards);
    let want: Vec<&[u8]> = vec![
        BUSY_EVAL,
        b"+OK\r\n",
        b"+OK\r\n",
        BUSY_EVAL,
        b":1\r\n",
        b"+OK\r\n",
        b"+QUEUED\r\n",
        b"*-1\r\n",
        b"+OK\r\n",
        b"+QUEUED\r\n",
        b"*1\r\n+PONG\r\n",
    ];
    check(&got, &replies(&want), &layout.to_string());
    if let Some(r) = redis() {
        check(&every_watch_scenario(&r, nshards), &got, "as redis-server");
    }
}

/// A spinning script inside MULTI/EXEC (home shard 0) followed by a SET
/// of a key `a` of the last shard (a block that does not lock every
/// shard). While the script is busy, a client of the script's own loop
/// WATCHes `a` (its shard is the block's, its loop free): `+OK` at once,
/// not at the script's end; so does a client of the last shard's loop.
/// The block's SET of `a` comes after the script, so after both WATCHes,
/// as in Redis: both EXECs fail. (It ran beside the script before, so
/// before those WATCHes: both EXECs ran.)
fn own_loop_watch_scenario(s: &Server, nshards: usize) -> Vec<Vec<u8>> {
    let last = nshards - 1;
    let a = key_on(last, nshards, "a");
    let mut spin = conn_on(s, 0, nshards);
    spin.set_reply_timeout(Duration::from_secs(60));
    let mut near = conn_on(s, 0, nshards);
    let mut far = conn_on(s, last, nshards);
    let mut killer = conn_on(s, last, nshards);
    let mut got = Vec::new();
    got.push(spin.cmd_str(&["MULTI"]));
    got.push(spin.cmd_str(&["EVAL", SPIN, "0"]));
    got.push(spin.cmd_str(&["SET", &a, "1"]));
    spin.send(&encode_command(&[b"EXEC"]));
    got.push(wait_busy(&mut near));
    // Answered while the script runs (5 s reply timeout; it spins until
    // killed).
    got.push(near.cmd_str(&["WATCH", &a]));
    got.push(far.cmd_str(&["WATCH", &a]));
    got.push(near.cmd_str(&["PING"]));
    got.push(killer.cmd_str(&["SCRIPT", "KILL"]));
    let exec = spin.read_reply();
    assert!(
        exec.starts_with(b"*2\r\n-ERR Script killed by user with SCRIPT KILL..."),
        "{}",
        String::from_utf8_lossy(&exec)
    );
    assert!(
        exec.ends_with(b"+OK\r\n"),
        "{}",
        String::from_utf8_lossy(&exec)
    );
    for c in [&mut near, &mut far] {
        got.push(c.cmd_str(&["MULTI"]));
        got.push(c.cmd_str(&["GET", &a]));
        got.push(c.cmd_str(&["EXEC"]));
    }
    got
}

fn own_loop_watch(layout: Layout) {
    let nshards = layout.shards;
    let s = tessera(layout);
    let got = own_loop_watch_scenario(&s, nshards);
    let want: Vec<&[u8]> = vec![
        b"+OK\r\n",
        b"+QUEUED\r\n",
        b"+QUEUED\r\n",
        BUSY_EVAL,
        b"+OK\r\n",
        b"+OK\r\n",
        BUSY_EVAL,
        b"+OK\r\n",
        b"+OK\r\n",
        b"+QUEUED\r\n",
        b"*-1\r\n",
        b"+OK\r\n",
        b"+QUEUED\r\n",
        b"*-1\r\n",
    ];
    check(&got, &replies(&want), &layout.to_string());
    if let Some(r) = redis() {
        check(
            &own_loop_watch_scenario(&r, nshards),
            &got,
            "as redis-server",
        );
    }
}

/// Reads `KEYS[1]` and spins `ARGV[1]` microseconds (calling TIME), below
/// the threshold: never busy.
const READ_THEN_WAIT: &str = "redis.call('get', KEYS[1]) \
     local function now() local t = redis.call('time') return t[1] * 1000000 + t[2] end \
     local t0 = now() while now() - t0 < tonumber(ARGV[1]) do end return 1";

/// A transaction that holds a lock on the busy script's own shard when it
/// is withdrawn at another shard gets its `-BUSY` at once, not at the
/// script's end. A block (home shard 0) reads `b` of shard 1 for 150 ms,
/// then spins on shard 0, then reads `b` again (it holds `b` until after
/// the spin). Meanwhile an MSET of `x` (shard 0) and `b`,
/// from a client of a third loop, takes `x`'s lock on shard 0 and waits
/// at shard 1 behind the block's. Once the spin is busy, shard 1's loop
/// withdraws it: its release of shard 0 must not wait there. After
/// SCRIPT KILL nothing of it was applied; the locks are whole again.
fn held_release_scenario(s: &Server, nshards: usize) -> Vec<Vec<u8>> {
    let (x, b) = (key_on(0, nshards, "x"), key_on(1, nshards, "b"));
    let mut spin = conn_on(s, 0, nshards);
    spin.set_reply_timeout(Duration::from_secs(60));
    let mut mset = conn_on(s, 2, nshards);
    let mut ping = conn_on(s, 3, nshards);
    let mut killer = conn_on(s, 3, nshards);
    let mut got = vec![
        spin.cmd_str(&["MULTI"]),
        spin.cmd_str(&["EVAL", READ_THEN_WAIT, "1", &b, "150000"]),
        spin.cmd_str(&["EVAL", SPIN, "0"]),
        // The block holds `b` until after the spin.
        spin.cmd_str(&["GET", &b]),
    ];
    spin.send(&encode_command(&[b"EXEC"]));
    // While the block reads `b`, before its spin starts.
    std::thread::sleep(Duration::from_millis(50));
    common::send_str(&mut mset, &["MSET", &x, "m", &b, "m"]);
    got.push(wait_busy(&mut ping));
    // Answered while the script still runs.
    got.push(mset.read_reply());
    got.push(killer.cmd_str(&["SCRIPT", "KILL"]));
    let exec = spin.read_reply();
    assert!(
        exec.starts_with(b"*3\r\n:1\r\n-ERR Script killed by user with SCRIPT KILL..."),
        "{}",
        String::from_utf8_lossy(&exec)
    );
    assert!(
        exec.ends_with(b"$-1\r\n"),
        "{}",
        String::from_utf8_lossy(&exec)
    );
    got.push(ping.cmd_str(&["MGET", &x, &b]));
    got.push(mset.cmd_str(&["MSET", &x, "1", &b, "2"]));
    got.push(ping.cmd_str(&["MGET", &x, &b]));
    got
}

/// At 16 shards only: the MSET's home must be a third loop. Apart, the
/// case the test is for (the locks are real, the MSET's loop free);
/// consolidated, the same replies (the script's thread runs every loop
/// there until the watchdog hands them back).
fn held_release(layout: Layout) {
    let s = tessera(layout);
    let got = held_release_scenario(&s, layout.shards);
    let want: Vec<&[u8]> = vec![
        b"+OK\r\n",
        b"+QUEUED\r\n",
        b"+QUEUED\r\n",
        b"+QUEUED\r\n",
        BUSY_EVAL,
        BUSY_EVAL,
        b"+OK\r\n",
        b"*2\r\n$-1\r\n$-1\r\n",
        b"+OK\r\n",
        b"*2\r\n$1\r\n1\r\n$1\r\n2\r\n",
    ];
    check(&got, &replies(&want), &layout.to_string());
    if let Some(r) = redis() {
        check(
            &held_release_scenario(&r, layout.shards),
            &got,
            "as redis-server",
        );
    }
}

#[test]
fn withdrawn_transactions_release_the_scripts_shard_later_s16_apart() {
    held_release(Layout::new(16, false));
}

#[test]
fn withdrawn_transactions_release_the_scripts_shard_later_s16() {
    held_release(Layout::new(16, true));
}

per_layout!(queued, watch, every_watch, own_loop_watch);
