//! WATCH beside a busy script (issue 23 point 5: "a running script
//! freezes only the shards it holds: clients of other shards, on any
//! thread, keep being served"), where it used to wait for the script's
//! end, forever for an endless script:
//!
//! * From a client of the script's own loop, WATCH of a key of a free
//!   loop that is slow to answer (busy in DEBUG SLEEP; consolidated, a
//!   loop the script's hub holds until the watchdog hands it back): the
//!   desk waited 100 ms for the WATCH's job, then left the WATCH for the
//!   script's end. It is now the connection's coordinator, finished by a
//!   later pass once its job is back: `+OK` while the script still runs,
//!   after the key is registered (a write after the reply dooms the
//!   watcher's EXEC).
//! * WATCH of a key of the script's own shard when the script does not
//!   hold it (it runs on gathered copies of its keys, whose transaction
//!   holds only those): nothing runs on that shard until the script
//!   ends, so its job waited there. It is answered `-BUSY` now, as every
//!   other command of that shard is (GET there gets `-BUSY` too), and
//!   counted as a rejected call. A deliberate difference: Redis, one
//!   thread, answers every WATCH `+OK` while busy (WATCH is allow-busy)
//!   since nothing but the script can write before it ends.
//!
//! Every layout: 2 and 16 shards, consolidated and not. Every wait is
//! bounded (5 s reply timeouts; loops in count).

mod common;

use std::time::Duration;

use common::busy::{check, on_shard as conn_on, replies, SPIN};
use common::{encode_command, key_on, send_str, wait_busy, Layout, RawConn, Server, BUSY_EVAL};

const THRESHOLD_MS: u64 = 300;

/// Tessera in `layout`, DEBUG allowed; consolidated, once every shard is
/// on one thread.
fn tessera(layout: Layout) -> Server {
    let s = layout.tessera(&[
        "--busy-reply-threshold",
        &THRESHOLD_MS.to_string(),
        "--enable-debug-command",
        "yes",
    ]);
    if layout.consolidated && !common::testing_real_redis() {
        common::wait_shard_threads(&s, 1);
    }
    s
}

/// The killed script's reply (SPIN, by EVAL).
fn killed(r: &[u8]) {
    assert!(
        r.starts_with(b"-ERR Script killed by user with SCRIPT KILL..."),
        "{}",
        String::from_utf8_lossy(r)
    );
}

/// A script spins on shard 1's loop; shard 0's loop is in DEBUG SLEEP
/// (sent first, `lead` before the script). A client of the script's own
/// loop WATCHes a key of shard 0 (and, 16 shards, one of shard 2): its
/// job waits on the sleeping loop,
/// then `+OK` while the script still runs (its PING after it is `-BUSY`).
/// A SET of that key after the reply dooms its EXEC. Returns the replies
/// and whether the sleep happened (the sleeping loop answered `+OK`: it
/// began before the script was busy).
fn slow_loop_scenario(s: &Server, nshards: usize, lead: Duration) -> (Vec<Vec<u8>>, bool) {
    let a = key_on(0, nshards, "a");
    // With 16 shards, a key of a third shard too: the WATCH's keys span
    // two free shards, whose locks it takes in turn.
    let c = key_on(if nshards > 2 { 2 } else { 0 }, nshards, "c");
    let mut sleeper = conn_on(s, 0, nshards);
    let mut spin = conn_on(s, 1, nshards);
    spin.set_reply_timeout(Duration::from_secs(60));
    let mut near = conn_on(s, 1, nshards);
    let mut killer = conn_on(s, 1, nshards);
    let mut got = Vec::new();
    send_str(&mut sleeper, &["DEBUG", "SLEEP", "2"]);
    // Ordering only: the sleep should begin before the script is busy.
    std::thread::sleep(lead);
    spin.send(&encode_command(&[b"EVAL", SPIN.as_bytes(), b"0"]));
    got.push(wait_busy(&mut near));
    // Before: the desk's 100 ms wait ran out, and the WATCH waited for
    // the script's end (here, the 5 s reply timeout).
    got.push(near.cmd_str(&["WATCH", &a, &c]));
    got.push(near.cmd_str(&["PING"]));
    let slept = sleeper.read_reply() == b"+OK\r\n";
    got.push(sleeper.cmd_str(&["SET", &a, "after"]));
    got.push(killer.cmd_str(&["SCRIPT", "KILL"]));
    killed(&spin.read_reply());
    got.push(near.cmd_str(&["MULTI"]));
    got.push(near.cmd_str(&["GET", &a]));
    got.push(near.cmd_str(&["EXEC"]));
    (got, slept)
}

fn slow_free_loop(layout: Layout) {
    if common::testing_real_redis() {
        // Redis's DEBUG SLEEP stops the whole server: not comparable.
        return;
    }
    let want: Vec<&[u8]> = vec![
        BUSY_EVAL,
        b"+OK\r\n",
        BUSY_EVAL,
        b"+OK\r\n",
        b"+OK\r\n",
        b"+OK\r\n",
        b"+QUEUED\r\n",
        b"*-1\r\n",
    ];
    let mut lead = Duration::from_millis(100);
    for _ in 0..3 {
        let s = tessera(layout);
        let (got, slept) = slow_loop_scenario(&s, layout.shards, lead);
        check(&got, &replies(&want), &layout.to_string());
        if slept {
            return;
        }
        // The sleep came after the script was busy (`-BUSY`): a slow
        // machine. Again, with more lead.
        lead *= 3;
    }
    panic!("{layout}: DEBUG SLEEP never began before the script was busy");
}

/// The `cmdstat_<name>` line of INFO commandstats, without its `usec`
/// figures.
fn cmdstat(c: &mut RawConn, name: &str) -> Vec<u8> {
    let r = String::from_utf8(c.cmd_str(&["INFO", "commandstats"])).unwrap();
    let line = r
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:")))
        .unwrap_or_else(|| panic!("no cmdstat_{name} in {r}"));
    let kept: Vec<&str> = line.split(',').filter(|f| !f.contains("usec")).collect();
    kept.join(",").into_bytes()
}

/// A script over keys of shards 0 and 1 (`k0`, `k1`) spins on shard 0's
/// loop (its caller's), on gathered copies of its keys. Clients of shard
/// 1's loop and of the script's own: GET and WATCH of another key of
/// shard 0 (`x0`), WATCH of another key of shard 1 (`x1`). Then the
/// script is killed and the refused WATCHes counted.
fn stopped_shard_scenario(s: &Server, nshards: usize) -> Vec<Vec<u8>> {
    let (k0, k1) = (key_on(0, nshards, "k"), key_on(1, nshards, "k"));
    let (x0, x1) = (key_on(0, nshards, "x"), key_on(1, nshards, "x"));
    let mut spin = conn_on(s, 0, nshards);
    spin.set_reply_timeout(Duration::from_secs(60));
    let mut near = conn_on(s, 0, nshards);
    let mut other = conn_on(s, 1, nshards);
    let mut got = vec![other.cmd_str(&["CONFIG", "RESETSTAT"])];
    spin.send(&encode_command(&[
        b"EVAL",
        SPIN.as_bytes(),
        b"2",
        k0.as_bytes(),
        k1.as_bytes(),
    ]));
    got.push(wait_busy(&mut other));
    got.push(other.cmd_str(&["GET", &x0]));
    got.push(other.cmd_str(&["WATCH", &x0]));
    got.push(other.cmd_str(&["WATCH", &x1]));
    got.push(near.cmd_str(&["WATCH", &x0]));
    got.push(other.cmd_str(&["SCRIPT", "KILL"]));
    killed(&spin.read_reply());
    got.push(other.cmd_str(&["SET", &x1, "after"]));
    got.push(other.cmd_str(&["MULTI"]));
    got.push(other.cmd_str(&["EXEC"]));
    got.push(cmdstat(&mut other, "watch"));
    got
}

fn stopped_shard(layout: Layout) {
    let s = tessera(layout);
    let got = stopped_shard_scenario(&s, layout.shards);
    let mut want: Vec<&[u8]> = vec![
        b"+OK\r\n",
        BUSY_EVAL,
        BUSY_EVAL,
        BUSY_EVAL,
        b"+OK\r\n",
        BUSY_EVAL,
        b"+OK\r\n",
        b"+OK\r\n",
        b"+OK\r\n",
        b"*-1\r\n",
        b"calls=1,rejected_calls=2,failed_calls=0",
    ];
    if common::testing_real_redis() {
        want = redis_stopped_shard(want);
    }
    check(&got, &replies(&want), &layout.to_string());
    if let Some(r) = common::busy::redis(THRESHOLD_MS) {
        // The same but for the refused WATCHes (see the module doc).
        let want = redis_stopped_shard(want);
        check(
            &stopped_shard_scenario(&r, layout.shards),
            &replies(&want),
            "redis-server",
        );
    }
}

/// [`stopped_shard`]'s replies as Redis gives them: its WATCHes of the
/// script's shard's key are answered `+OK` (and are calls).
fn redis_stopped_shard(mut want: Vec<&[u8]>) -> Vec<&[u8]> {
    want[3] = b"+OK\r\n";
    want[5] = b"+OK\r\n";
    want[10] = b"calls=3,rejected_calls=0,failed_calls=0";
    want
}

per_layout!(slow_free_loop, stopped_shard);
