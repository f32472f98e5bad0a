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
//!   ends. It was answered `-BUSY` (session 18), as that shard's other
//!   commands are; it is `+OK` now, as Redis answers it (WATCH is
//!   allow-busy), the key parked with the script and registered on its
//!   shard right after it, before its writes are written back there. The
//!   watcher's EXEC then fails if the script wrote the key after the
//!   WATCH, and succeeds if it never wrote it, or if the watcher
//!   UNWATCHed meanwhile (byte for byte with redis-server). And it
//!   succeeds if the script wrote the key only *before* the WATCH
//!   ([`written_before_the_watch`]; session 20 left this a spurious
//!   abort: the write-back signalled every key registered before it).
//! * WATCH of a key of a loop the script stalls without holding it (every
//!   shard on one hub; an EXEC's script run by a call from an adopted
//!   loop's turn stalls that caller's loop and the hub's own): the own
//!   loop's keys were `-BUSY`, the caller's got no reply before the
//!   script's end. Both are `+OK` now, parked as above, with the same
//!   outcomes (also when the script is killed).
//!
//! Every layout: 2 and 16 shards, consolidated and not (the stalled
//! loops: 4 and 16 shards, consolidated, the layouts where they happen).
//! Every wait is bounded (5 s reply timeouts; loops in count).

mod common;

use std::time::Duration;

use common::busy::{busy_or_ended, check, on_shard as conn_on, replies, SPIN};
use common::{encode_command, key_on, send_str, wait_busy, Layout, RawConn, Server, BUSY_EVAL};

const THRESHOLD_MS: u64 = 300;
/// How long the scripts of [`parked_watch`] and [`s4_watch_of_loops_an_exec_script_stalls`]
/// run at first, in ms: the WATCHes must come in that time, after the
/// script is busy ([`THRESHOLD_MS`]). A run where they did not proves
/// nothing and is run again three times as long, four runs at most (1,
/// 3, 9, 27 s). It began at 3 s: most of each test's 6-7 s (a run on
/// Tessera, one on redis-server) went on waiting it out.
const FIRST_SPIN_MS: u64 = 1000;

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
    // As Redis answers: the WATCHes of the script's shard's key are `+OK`
    // (and are calls). Before, `-BUSY` (rejected calls).
    let want: Vec<&[u8]> = vec![
        b"+OK\r\n",
        BUSY_EVAL,
        BUSY_EVAL,
        b"+OK\r\n",
        b"+OK\r\n",
        b"+OK\r\n",
        b"+OK\r\n",
        b"+OK\r\n",
        b"+OK\r\n",
        b"*-1\r\n",
        b"calls=3,rejected_calls=0,failed_calls=0",
    ];
    check(&got, &replies(&want), &layout.to_string());
    if let Some(r) = common::busy::redis(THRESHOLD_MS) {
        check(
            &stopped_shard_scenario(&r, layout.shards),
            &replies(&want),
            "redis-server",
        );
    }
}

/// Runs on gathered copies of `KEYS[1]` and `KEYS[2]` (of two shards)
/// until `ARGV[1]` ms have passed since it began (by TIME, the real
/// clock), then writes `KEYS[1]` and returns the time (µs since the
/// epoch) just before that write. TIME is called once every 20,000
/// empty iterations: the busy hook counts Lua instructions, and a TIME
/// call each turn (slow in a debug build) spaced its calls so far apart
/// on a loaded machine that the script ended before it was published.
const WRITE_LATE: &str = "local function now() local t = redis.call('time') \
return t[1] * 1000000 + t[2] end \
local t0 = now() local t = t0 \
while t - t0 <= tonumber(ARGV[1]) * 1000 do for i = 1, 20000 do end t = now() end \
redis.call('set', KEYS[1], 'script') return t";

/// Microseconds since the epoch, on the clock the server's TIME reads.
fn now_us() -> u64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970");
    d.as_micros() as u64
}

/// A script over `k0` (shard 0) and `k1` (shard 1) runs on shard 0's
/// loop, its caller's, on gathered copies, and writes `k0` `late_ms`
/// after it began. While it runs: a client of shard 1's loop WATCHes
/// `k0` (a), one of the script's own loop WATCHes `k0` (a, served by
/// the loop's desk), one of shard 1's WATCHes `x0`, another key of shard
/// 0 the script never writes (b), and one WATCHes `k0` and UNWATCHes
/// (c). Once the script ended each runs MULTI, GET, EXEC. Returns the
/// replies (the script's own left out) and whether the script's write
/// came after every WATCH's reply (else the run says nothing about
/// Redis's "after the WATCH", and is run again with more time); `None` if
/// the script ended before this thread saw it busy (run again too).
fn parked_scenario(s: &Server, nshards: usize, late_ms: u64) -> Option<(Vec<Vec<u8>>, bool)> {
    let (k0, k1, x0) = (
        key_on(0, nshards, "k"),
        key_on(1, nshards, "k"),
        key_on(0, nshards, "x"),
    );
    let mut spin = conn_on(s, 0, nshards);
    spin.set_reply_timeout(Duration::from_secs(60));
    let mut far = conn_on(s, 1, nshards);
    let mut near = conn_on(s, 0, nshards);
    let mut other = conn_on(s, 1, nshards);
    let mut gone = conn_on(s, 1, nshards);
    let mut got = vec![far.cmd_str(&["FLUSHALL"])];
    let late = late_ms.to_string();
    spin.send(&encode_command(&[
        b"EVAL",
        WRITE_LATE.as_bytes(),
        b"2",
        k0.as_bytes(),
        k1.as_bytes(),
        late.as_bytes(),
    ]));
    got.push(busy_or_ended(&mut other, &mut spin, b":")?);
    got.push(far.cmd_str(&["WATCH", &k0]));
    got.push(near.cmd_str(&["WATCH", &k0]));
    got.push(other.cmd_str(&["WATCH", &x0]));
    got.push(gone.cmd_str(&["WATCH", &k0]));
    got.push(gone.cmd_str(&["UNWATCH"]));
    let watched_us = now_us();
    let r = spin.read_reply();
    let text = String::from_utf8_lossy(&r).into_owned();
    let wrote_us: u64 = text
        .strip_prefix(':')
        .and_then(|t| t.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("the script's reply: {text:?}"));
    for (c, k) in [
        (&mut far, &k0),
        (&mut near, &k0),
        (&mut other, &x0),
        (&mut gone, &k0),
    ] {
        got.push(c.cmd_str(&["MULTI"]));
        got.push(c.cmd_str(&["GET", k]));
        got.push(c.cmd_str(&["EXEC"]));
    }
    Some((got, wrote_us > watched_us))
}

/// [`parked_scenario`] on Tessera (must fail on a binary that answers
/// those WATCHes `-BUSY`) and on redis-server, byte for byte.
fn parked_watch(layout: Layout) {
    let mut want: Vec<&[u8]> = vec![b"+OK\r\n", BUSY_EVAL];
    want.extend([b"+OK\r\n" as &[u8]; 5]);
    // (a) the script wrote the key after the WATCH: EXEC fails.
    for _ in 0..2 {
        want.extend([b"+OK\r\n" as &[u8], b"+QUEUED\r\n", b"*-1\r\n"]);
    }
    // (b) it never wrote the key: EXEC runs.
    want.extend([b"+OK\r\n" as &[u8], b"+QUEUED\r\n", b"*1\r\n$-1\r\n"]);
    // (c) UNWATCHed before the script ended: EXEC runs.
    want.extend([
        b"+OK\r\n" as &[u8],
        b"+QUEUED\r\n",
        b"*1\r\n$6\r\nscript\r\n",
    ]);
    let want = replies(&want);
    let mut servers = vec![(tessera(layout), layout.to_string())];
    if let Some(r) = common::busy::redis(THRESHOLD_MS) {
        servers.push((r, "redis-server".to_string()));
    }
    for (s, who) in &servers {
        let mut late_ms = FIRST_SPIN_MS;
        let mut conclusive = false;
        for _ in 0..4 {
            let run = parked_scenario(s, layout.shards, late_ms);
            // A slow machine: the write came before a WATCH's reply, or
            // the script ended before it was seen busy. Again, longer.
            late_ms *= 3;
            let Some((got, after)) = run else { continue };
            check(&got[..got.len() - 12], &want[..want.len() - 12], who);
            if after {
                check(&got, &want, who);
                conclusive = true;
                break;
            }
        }
        assert!(conclusive, "{who}: the script always wrote before a WATCH");
    }
}

/// Writes `KEYS[1]` first, then spins until `ARGV[1]` ms have passed
/// since it began (as [`SPIN_FOR`]), writing nothing more, and returns
/// the time (µs since the epoch) it ended.
const WRITE_EARLY: &str = "redis.call('set', KEYS[1], 'early') \
local function now() local t = redis.call('time') \
return t[1] * 1000000 + t[2] end \
local t0 = now() local t = t0 \
while t - t0 <= tonumber(ARGV[1]) * 1000 do for i = 1, 20000 do end t = now() end return t";

/// A script over `k0` (shard 0) and `k1` (shard 1) runs on shard 0's
/// loop, its caller's, on gathered copies, writes `k0` at once and then
/// only spins for `spin_ms`. While it spins, a client of shard 1's loop
/// and one of the script's own loop (served by its desk) WATCH `k0`.
/// Once the script ended each runs MULTI, GET, EXEC: the script wrote
/// the key only *before* the WATCH, so the EXEC runs. Returns the
/// replies and whether the script ended after every WATCH's reply (else
/// the run says nothing about "before the WATCH"); `None` if it ended
/// before this thread saw it busy.
fn early_scenario(s: &Server, nshards: usize, spin_ms: u64) -> Option<(Vec<Vec<u8>>, bool)> {
    let (k0, k1) = (key_on(0, nshards, "k"), key_on(1, nshards, "k"));
    let mut spin = conn_on(s, 0, nshards);
    spin.set_reply_timeout(Duration::from_secs(60));
    let mut far = conn_on(s, 1, nshards);
    let mut near = conn_on(s, 0, nshards);
    let mut other = conn_on(s, 1, nshards);
    let mut got = vec![far.cmd_str(&["FLUSHALL"])];
    let ms = spin_ms.to_string();
    spin.send(&encode_command(&[
        b"EVAL",
        WRITE_EARLY.as_bytes(),
        b"2",
        k0.as_bytes(),
        k1.as_bytes(),
        ms.as_bytes(),
    ]));
    got.push(busy_or_ended(&mut other, &mut spin, b":")?);
    got.push(far.cmd_str(&["WATCH", &k0]));
    got.push(near.cmd_str(&["WATCH", &k0]));
    let watched_us = now_us();
    let r = spin.read_reply();
    let text = String::from_utf8_lossy(&r).into_owned();
    let ended_us: u64 = text
        .strip_prefix(':')
        .and_then(|t| t.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("the script's reply: {text:?}"));
    for c in [&mut far, &mut near] {
        got.push(c.cmd_str(&["MULTI"]));
        got.push(c.cmd_str(&["GET", &k0]));
        got.push(c.cmd_str(&["EXEC"]));
    }
    Some((got, ended_us > watched_us))
}

/// [`early_scenario`] on Tessera and on redis-server, byte for byte. It
/// fails on a binary that registers the parked keys before the
/// write-back (`*-1`: session 20's spurious abort).
fn written_before_the_watch(layout: Layout) {
    let mut want: Vec<&[u8]> = vec![b"+OK\r\n", BUSY_EVAL, b"+OK\r\n", b"+OK\r\n"];
    for _ in 0..2 {
        want.extend([
            b"+OK\r\n" as &[u8],
            b"+QUEUED\r\n",
            b"*1\r\n$5\r\nearly\r\n",
        ]);
    }
    let want = replies(&want);
    let mut servers = vec![(tessera(layout), layout.to_string())];
    if let Some(r) = common::busy::redis(THRESHOLD_MS) {
        servers.push((r, "redis-server".to_string()));
    }
    for (s, who) in &servers {
        let mut spin_ms = FIRST_SPIN_MS;
        let mut conclusive = false;
        for _ in 0..4 {
            let run = early_scenario(s, layout.shards, spin_ms);
            // A slow machine: the script ended before a WATCH's reply, or
            // before it was seen busy. Again, longer.
            spin_ms *= 3;
            let Some((got, after)) = run else { continue };
            if after {
                check(&got, &want, who);
                conclusive = true;
                break;
            }
        }
        assert!(conclusive, "{who}: the script always ended before a WATCH");
    }
}

/// While a script on copies of `k0` and `k1` spins on shard 0's loop: a
/// client of shard 1's loop pipelines WATCH `k0`, MULTI, GET, EXEC (the
/// WATCH is `+OK`, the GET and so the EXEC refused), one of the script's
/// own loop sends WATCH inside MULTI (Redis's error, nothing watched).
/// After the script: the aborted block is gone, a new one runs (its
/// WATCH went with the abort).
fn queued_scenario(s: &Server, nshards: usize) -> Vec<Vec<u8>> {
    let (k0, k1) = (key_on(0, nshards, "k"), key_on(1, nshards, "k"));
    let mut spin = conn_on(s, 0, nshards);
    spin.set_reply_timeout(Duration::from_secs(60));
    let mut piped = conn_on(s, 1, nshards);
    let mut near = conn_on(s, 0, nshards);
    let mut other = conn_on(s, 1, nshards);
    spin.send(&encode_command(&[
        b"EVAL",
        SPIN.as_bytes(),
        b"2",
        k0.as_bytes(),
        k1.as_bytes(),
    ]));
    let mut got = vec![wait_busy(&mut other)];
    let mut pipe = Vec::new();
    for cmd in [&["WATCH", &k0][..], &["MULTI"], &["GET", &k0], &["EXEC"]] {
        let a: Vec<&[u8]> = cmd.iter().map(|s| s.as_bytes()).collect();
        pipe.extend(encode_command(&a));
    }
    piped.send(&pipe);
    for _ in 0..4 {
        got.push(piped.read_reply());
    }
    got.push(near.cmd_str(&["MULTI"]));
    got.push(near.cmd_str(&["WATCH", &k0]));
    got.push(near.cmd_str(&["EXEC"]));
    got.push(other.cmd_str(&["SCRIPT", "KILL"]));
    killed(&spin.read_reply());
    got.push(piped.cmd_str(&["EXEC"]));
    got.push(other.cmd_str(&["SET", &k0, "after"]));
    got.push(piped.cmd_str(&["MULTI"]));
    got.push(piped.cmd_str(&["EXEC"]));
    got
}

fn queued_behind(layout: Layout) {
    let abort: &[u8] = common::busy::EXECABORT_BUSY;
    let want = replies(&[
        BUSY_EVAL,
        b"+OK\r\n",
        b"+OK\r\n",
        BUSY_EVAL,
        abort,
        b"+OK\r\n",
        b"-ERR WATCH inside MULTI is not allowed\r\n",
        abort,
        b"+OK\r\n",
        b"-ERR EXEC without MULTI\r\n",
        b"+OK\r\n",
        b"+OK\r\n",
        b"*0\r\n",
    ]);
    let s = tessera(layout);
    check(
        &queued_scenario(&s, layout.shards),
        &want,
        &layout.to_string(),
    );
    if let Some(r) = common::busy::redis(THRESHOLD_MS) {
        check(&queued_scenario(&r, layout.shards), &want, "redis-server");
    }
}

per_layout!(
    slow_free_loop,
    stopped_shard,
    parked_watch,
    written_before_the_watch,
    queued_behind
);

/// Runs until `ARGV[1]` ms have passed since it began (by TIME, called
/// once per 20,000 empty iterations, see [`WRITE_LATE`]), writes
/// nothing, and returns the time (µs since the epoch) it ended.
const SPIN_FOR: &str = "local function now() local t = redis.call('time') \
return t[1] * 1000000 + t[2] end \
local t0 = now() local t = t0 \
while t - t0 <= tonumber(ARGV[1]) * 1000 do for i = 1, 20000 do end t = now() end return t";

/// Every shard on one hub (thread 0, whose own loop is shard 0's): a
/// client of shard 1's loop runs MULTI, [`SPIN_FOR`] on a key of shard 2,
/// SET `z` (shard 0), SET `w` (shard 1), EXEC. The EXEC's job runs the
/// script on shard 2's loop by a call from shard 1's turn, so the script
/// stalls two loops it does not hold: the hub's own, idle (it cannot be
/// lent to another thread from inside that call), and the caller's.
/// While it runs, clients of shard 3's loop (given back to its thread),
/// of the script's own loop and of the caller's WATCH `z` or `w` (a: the
/// EXEC writes them after the WATCH), `y` of shard 0 and `v` of shard 1
/// (b: nothing writes them), and `z` then UNWATCH (c). Once the EXEC is
/// answered each runs MULTI, GET, EXEC. Returns the replies and whether
/// the script ended after every WATCH's reply (else the run says nothing
/// of "after the WATCH"); `None` if the script ended before this thread
/// saw it busy.
fn stalled_scenario(s: &Server, nshards: usize, spin_ms: u64) -> Option<(Vec<Vec<u8>>, bool)> {
    let (k2, z, y) = (
        key_on(2, nshards, "k"),
        key_on(0, nshards, "z"),
        key_on(0, nshards, "y"),
    );
    let (w, v) = (key_on(1, nshards, "w"), key_on(1, nshards, "v"));
    let mut spin = conn_on(s, 1, nshards);
    spin.set_reply_timeout(Duration::from_secs(60));
    let mut free = conn_on(s, 3, nshards);
    let mut near = conn_on(s, 2, nshards);
    let mut caller = conn_on(s, 1, nshards);
    let mut free_w = conn_on(s, 3, nshards);
    let mut never = conn_on(s, 3, nshards);
    let mut never_v = conn_on(s, 3, nshards);
    let mut gone = conn_on(s, 3, nshards);
    let mut got = vec![free.cmd_str(&["FLUSHALL"])];
    got.push(spin.cmd_str(&["MULTI"]));
    let ms = spin_ms.to_string();
    got.push(spin.cmd_str(&["EVAL", SPIN_FOR, "1", &k2, &ms]));
    got.push(spin.cmd_str(&["SET", &z, "exec"]));
    got.push(spin.cmd_str(&["SET", &w, "exec"]));
    send_str(&mut spin, &["EXEC"]);
    got.push(busy_or_ended(&mut free, &mut spin, b"*3\r\n:")?);
    // Before: -BUSY for the own loop's keys (as every command of that
    // shard), no reply before the script's end for the caller's.
    got.push(free.cmd_str(&["WATCH", &z]));
    got.push(near.cmd_str(&["WATCH", &z]));
    got.push(caller.cmd_str(&["WATCH", &w]));
    got.push(free_w.cmd_str(&["WATCH", &w]));
    got.push(never.cmd_str(&["WATCH", &y]));
    got.push(never_v.cmd_str(&["WATCH", &v]));
    got.push(gone.cmd_str(&["WATCH", &z]));
    got.push(gone.cmd_str(&["UNWATCH"]));
    got.push(free.cmd_str(&["GET", &z]));
    let watched_us = now_us();
    let r = spin.read_reply();
    let text = String::from_utf8_lossy(&r).into_owned();
    let ended_us: u64 = text
        .strip_prefix("*3\r\n:")
        .and_then(|t| t.strip_suffix("\r\n+OK\r\n+OK\r\n"))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("the EXEC's reply: {text:?}"));
    for (c, k) in [
        (&mut free, &z),
        (&mut near, &z),
        (&mut caller, &w),
        (&mut free_w, &w),
        (&mut never, &y),
        (&mut never_v, &v),
        (&mut gone, &z),
    ] {
        got.push(c.cmd_str(&["MULTI"]));
        got.push(c.cmd_str(&["GET", k]));
        got.push(c.cmd_str(&["EXEC"]));
    }
    Some((got, ended_us > watched_us))
}

/// [`stalled_scenario`] on a consolidated Tessera with `nshards` (must
/// fail on a binary that answers those WATCHes `-BUSY`, or not before the
/// script's end) and on redis-server, byte for byte.
fn stalled_own_loop(nshards: usize) {
    let mut want: Vec<&[u8]> = vec![b"+OK\r\n", b"+OK\r\n", b"+QUEUED\r\n"];
    want.extend([b"+QUEUED\r\n" as &[u8]; 2]);
    want.push(BUSY_EVAL);
    want.extend([b"+OK\r\n" as &[u8]; 8]);
    want.push(BUSY_EVAL);
    // (a) the EXEC wrote `z` and `w` after the WATCH: EXEC fails.
    for _ in 0..4 {
        want.extend([b"+OK\r\n" as &[u8], b"+QUEUED\r\n", b"*-1\r\n"]);
    }
    // (b) nothing wrote `y` and `v`: EXEC runs.
    for _ in 0..2 {
        want.extend([b"+OK\r\n" as &[u8], b"+QUEUED\r\n", b"*1\r\n$-1\r\n"]);
    }
    // (c) UNWATCHed before the script ended: EXEC runs.
    want.extend([b"+OK\r\n" as &[u8], b"+QUEUED\r\n", b"*1\r\n$4\r\nexec\r\n"]);
    let want = replies(&want);
    let layout = Layout {
        shards: nshards,
        consolidated: true,
    };
    let mut servers = vec![(tessera(layout), format!("{nshards} shards, consolidated"))];
    if let Some(r) = common::busy::redis(THRESHOLD_MS) {
        servers.push((r, "redis-server".to_string()));
    }
    let after = 3 * 7;
    for (s, who) in &servers {
        let mut spin_ms = FIRST_SPIN_MS;
        let mut conclusive = false;
        for _ in 0..4 {
            let run = stalled_scenario(s, nshards, spin_ms);
            // A slow machine: the script ended before a WATCH's reply, or
            // before it was seen busy. Again, longer.
            spin_ms *= 3;
            let Some((got, after_watch)) = run else {
                continue;
            };
            check(&got[..got.len() - after], &want[..want.len() - after], who);
            if after_watch {
                check(&got, &want, who);
                conclusive = true;
                break;
            }
        }
        assert!(conclusive, "{who}: the script always ended before a WATCH");
    }
}

/// [`stalled_scenario`]'s layout with a script that spins until killed:
/// WATCH of `z` (the EXEC's SET writes it once the script is killed) and
/// of `y` (nothing writes it) while it runs, then PING and SCRIPT KILL
/// from a client of the caller's loop; the EXEC's reply holds the kill's
/// error and the SET's `+OK`.
fn stalled_killed_scenario(s: &Server, nshards: usize) -> Vec<Vec<u8>> {
    let (k2, z, y) = (
        key_on(2, nshards, "k"),
        key_on(0, nshards, "z"),
        key_on(0, nshards, "y"),
    );
    let mut spin = conn_on(s, 1, nshards);
    spin.set_reply_timeout(Duration::from_secs(60));
    let mut free = conn_on(s, 3, nshards);
    let mut never = conn_on(s, 3, nshards);
    let mut caller = conn_on(s, 1, nshards);
    let mut got = vec![free.cmd_str(&["FLUSHALL"])];
    got.push(spin.cmd_str(&["MULTI"]));
    got.push(spin.cmd_str(&["EVAL", SPIN, "1", &k2]));
    got.push(spin.cmd_str(&["SET", &z, "exec"]));
    send_str(&mut spin, &["EXEC"]);
    got.push(wait_busy(&mut free));
    got.push(free.cmd_str(&["WATCH", &z]));
    got.push(never.cmd_str(&["WATCH", &y]));
    // From the caller's loop, stalled by the script and served by its
    // passes (before: no reply until the script's end, so never).
    got.push(caller.cmd_str(&["PING"]));
    got.push(caller.cmd_str(&["SCRIPT", "KILL"]));
    let r = spin.read_reply();
    let text = String::from_utf8_lossy(&r).into_owned();
    let set = text
        .strip_prefix("*2\r\n-ERR Script killed by user with SCRIPT KILL...")
        .and_then(|t| t.split_once("\r\n"))
        .map(|(_, set)| set.as_bytes().to_vec())
        .unwrap_or_else(|| panic!("the EXEC's reply: {text:?}"));
    got.push(set);
    for (c, k) in [(&mut free, &z), (&mut never, &y)] {
        got.push(c.cmd_str(&["MULTI"]));
        got.push(c.cmd_str(&["GET", k]));
        got.push(c.cmd_str(&["EXEC"]));
    }
    got
}

/// [`stalled_killed_scenario`] on a consolidated Tessera with `nshards`
/// and on redis-server, byte for byte.
fn stalled_own_loop_killed(nshards: usize) {
    let mut want: Vec<&[u8]> = vec![b"+OK\r\n", b"+OK\r\n", b"+QUEUED\r\n", b"+QUEUED\r\n"];
    want.push(BUSY_EVAL);
    want.extend([b"+OK\r\n" as &[u8]; 2]);
    want.push(BUSY_EVAL);
    want.extend([b"+OK\r\n" as &[u8]; 2]);
    want.extend([b"+OK\r\n" as &[u8], b"+QUEUED\r\n", b"*-1\r\n"]);
    want.extend([b"+OK\r\n" as &[u8], b"+QUEUED\r\n", b"*1\r\n$-1\r\n"]);
    let want = replies(&want);
    let layout = Layout {
        shards: nshards,
        consolidated: true,
    };
    let s = tessera(layout);
    let got = stalled_killed_scenario(&s, nshards);
    check(&got, &want, &format!("{nshards} shards, consolidated"));
    if let Some(r) = common::busy::redis(THRESHOLD_MS) {
        check(&stalled_killed_scenario(&r, nshards), &want, "redis-server");
    }
}

#[test]
fn s4_watch_of_loops_an_exec_script_stalls() {
    stalled_own_loop(4);
}

#[test]
fn s4_watch_of_a_loop_an_exec_script_stalls_killed() {
    stalled_own_loop_killed(4);
}

#[test]
fn s16_watch_of_a_loop_an_exec_script_stalls_killed() {
    stalled_own_loop_killed(16);
}

#[test]
fn s16_watch_of_loops_an_exec_script_stalls() {
    stalled_own_loop(16);
}
