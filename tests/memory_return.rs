//! Memory goes back (issue 28): after a large delete the server's resident
//! set follows the data down within seconds (FLUSHALL, UNLINK of many big
//! values, mass expiry, eviction), and a connection that sent one large command
//! does not keep its buffers while it idles.
//!
//! RSS is read from `/proc/<pid>/status` of the server. Bounds are
//! generous (twice the empty server's RSS plus 16 MB, as the issue says)
//! and every wait is a bounded poll: no timing thresholds. Each load is
//! checked to have raised RSS first, so a server that never returns
//! memory fails.

mod common;

use std::time::{Duration, Instant};

use common::{info_field, RawConn, Server};
use redis::Connection;

const MB: u64 = 1 << 20;
/// Big values loaded (1 MB each).
const BIG: usize = 150;
/// Small keys loaded (400-byte values).
const SMALL: usize = 100_000;

fn rss(srv: &Server) -> u64 {
    let pid = srv.pid().expect("server running");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

fn used(c: &mut Connection) -> u64 {
    info_field(c, "memory", "used_memory").parse().unwrap()
}

/// RSS of the started server once it has answered a few commands.
fn empty_rss(srv: &Server, c: &mut Connection) -> u64 {
    redis::cmd("PING").query::<String>(c).unwrap();
    rss(srv)
}

/// `BIG` values of 1 MB (`big:{i}`) and `SMALL` keys of 400 bytes
/// (`small:{i}`, with `ttl_ms` if given), pipelined.
fn load(c: &mut Connection) {
    let big = vec![b'b'; MB as usize];
    for chunk in (0..BIG).collect::<Vec<_>>().chunks(10) {
        let mut p = redis::pipe();
        for i in chunk {
            p.cmd("SET").arg(format!("big:{i}")).arg(&big[..]).ignore();
        }
        p.query::<()>(c).unwrap();
    }
    let small = "s".repeat(400);
    for chunk in (0..SMALL).collect::<Vec<_>>().chunks(1000) {
        let mut p = redis::pipe();
        for i in chunk {
            p.cmd("SET").arg(format!("small:{i}")).arg(&small).ignore();
        }
        p.query::<()>(c).unwrap();
    }
}

/// Loads, checks the load is resident, runs `delete`, then waits (at most
/// 15 s) for RSS to come back under twice the empty RSS plus 16 MB.
fn returns_after(what: &str, delete: impl FnOnce(&mut Connection)) {
    returns_after_keeping(what, 0, delete)
}

/// [`returns_after`] for a delete that keeps `kept` bytes of data; those
/// may hold up to twice their size (survivors scattered over pages that
/// also held what went cannot give those pages back).
fn returns_after_keeping(what: &str, kept: u64, delete: impl FnOnce(&mut Connection)) {
    let srv = Server::tessera(&[]);
    let mut c = srv.conn();
    let empty = empty_rss(&srv, &mut c);
    load(&mut c);
    let loaded = rss(&srv);
    // The load is resident (else the test proves nothing).
    assert!(
        loaded > empty + 150 * MB,
        "{what}: loaded RSS {loaded} from {empty}"
    );
    delete(&mut c);
    let bound = 2 * empty + 16 * MB + 2 * kept;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let now = rss(&srv);
        if now < bound {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: RSS {now} after 15 s (empty {empty}, loaded {loaded}, used_memory {})",
            used(&mut c)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn rss_comes_back_after_flushall() {
    returns_after("FLUSHALL", |c| {
        redis::cmd("FLUSHALL").query::<()>(c).unwrap();
    });
}

#[test]
fn rss_comes_back_after_unlink_of_many_large_values() {
    returns_after("UNLINK", |c| {
        for chunk in (0..BIG).collect::<Vec<_>>().chunks(25) {
            let keys: Vec<String> = chunk.iter().map(|i| format!("big:{i}")).collect();
            let n: usize = redis::cmd("UNLINK").arg(&keys).query(c).unwrap();
            assert_eq!(n, keys.len());
        }
        // The small keys go too, in one UNLINK each (lazily freed or not).
        for chunk in (0..SMALL).collect::<Vec<_>>().chunks(1000) {
            let keys: Vec<String> = chunk.iter().map(|i| format!("small:{i}")).collect();
            redis::cmd("UNLINK").arg(&keys).query::<usize>(c).unwrap();
        }
        assert_eq!(redis::cmd("DBSIZE").query::<usize>(c).unwrap(), 0);
    });
}

#[test]
fn rss_comes_back_after_mass_expiry() {
    returns_after("expiry", |c| {
        // Every key gets a TTL only once the load is measured (a TTL set
        // while loading could run out before, on a slow machine); nothing
        // reads the keys: active expiry alone removes them.
        for (prefix, n) in [("big", BIG), ("small", SMALL)] {
            for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
                let mut p = redis::pipe();
                for i in chunk {
                    p.cmd("PEXPIRE")
                        .arg(format!("{prefix}:{i}"))
                        .arg(1)
                        .ignore();
                }
                p.query::<()>(c).unwrap();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while redis::cmd("DBSIZE").query::<usize>(c).unwrap() > 0 {
            assert!(Instant::now() < deadline, "keys never expired");
            std::thread::sleep(Duration::from_millis(100));
        }
    });
}

#[test]
fn rss_comes_back_after_eviction() {
    let limit = 24 * MB;
    returns_after_keeping("eviction", limit, |c| {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory-policy")
            .arg("allkeys-random")
            .query::<()>(c)
            .unwrap();
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(limit)
            .query::<()>(c)
            .unwrap();
        // The shards evict on their own; only INFO is sent meanwhile.
        let deadline = Instant::now() + Duration::from_secs(60);
        while used(c) > limit {
            assert!(Instant::now() < deadline, "never got under {limit}");
            std::thread::sleep(Duration::from_millis(50));
        }
    });
}

/// The automatic trims logged so far (lines "Returned ... KB ...").
fn trims_logged(srv: &Server) -> Vec<String> {
    let log = srv.log();
    let lines = log.lines().filter(|l| l.contains(" - Returned "));
    lines.map(str::to_string).collect()
}

/// How long a logged trim waited for a quiet server ("waited N ms"), if
/// its line says.
fn waited_ms(line: &str) -> Option<u64> {
    let (_, rest) = line.split_once("waited ")?;
    rest.split(' ').next()?.parse().ok()
}

/// A trim holds each allocator arena's lock while it walks it, and a shard
/// that allocates meanwhile waits for the whole trim, seconds when the
/// trimming thread loses its core on a loaded machine. So an automatic trim
/// waits for a quiet server (at most 10 s): none starts while commands keep
/// coming, one starts soon after they stop, and RSS comes back. The
/// commands are counted over all shards, whichever thread runs them.
#[test]
fn no_automatic_trim_while_commands_keep_coming() {
    no_trim_while_busy(&[]);
}

#[test]
fn no_automatic_trim_while_commands_keep_coming_16_shards_unconsolidated() {
    no_trim_while_busy(&["--shards", "16", "--shard-consolidation", "no"]);
}

fn no_trim_while_busy(args: &[&str]) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let mut all = vec!["--loglevel", "verbose"];
    all.extend_from_slice(args);
    let srv = Server::tessera(&all);
    let mut c = srv.conn();
    let empty = empty_rss(&srv, &mut c);
    load(&mut c);
    let loaded = rss(&srv);
    assert!(
        loaded > empty + 150 * MB,
        "loaded RSS {loaded} from {empty}"
    );
    // A client sending pipelined GETs (thousands per second, against the
    // 100 per second that counts as quiet) until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let batches = Arc::new(AtomicUsize::new(0));
    let busy = {
        let (stop, batches, mut b) = (stop.clone(), batches.clone(), srv.conn());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let mut p = redis::pipe();
                for i in 0..100 {
                    p.cmd("GET").arg(format!("small:{i}")).ignore();
                }
                p.query::<()>(&mut b).unwrap();
                batches.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    while batches.load(Ordering::Relaxed) == 0 {
        assert!(!busy.is_finished(), "the busy client failed");
        std::thread::sleep(Duration::from_millis(10));
    }
    let before = trims_logged(&srv).len();
    // Freed before the reply: from here a trim is worth doing (the server
    // without the wait trimmed within about a second).
    redis::cmd("FLUSHALL")
        .arg("SYNC")
        .query::<()>(&mut c)
        .unwrap();
    let busy_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < busy_until {
        // Only a trim that waited its 10 s may run under load (one due
        // since the load, on a machine slow enough for that to pass).
        for line in &trims_logged(&srv)[before..] {
            assert!(
                waited_ms(line).is_some_and(|ms| ms >= 10_000),
                "trimmed while busy: {line}"
            );
        }
        assert!(!busy.is_finished(), "the busy client failed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let during = batches.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    busy.join().unwrap();
    assert!(during > 10, "only {during} batches: not busy");
    // Quiet now: the trim runs and RSS comes back.
    let bound = 2 * empty + 16 * MB;
    let deadline = Instant::now() + Duration::from_secs(15);
    while trims_logged(&srv).len() == before || rss(&srv) >= bound {
        assert!(
            Instant::now() < deadline,
            "RSS {} after 15 s quiet (empty {empty}), trims {:?}",
            rss(&srv),
            &trims_logged(&srv)[before..]
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn memory_purge_returns_at_once() {
    let srv = Server::tessera(&[]);
    let mut c = srv.conn();
    let empty = empty_rss(&srv, &mut c);
    load(&mut c);
    // SYNC: freed before the reply (a plain FLUSHALL is ASYNC under
    // Tessera's default `lazyfree-lazy-user-flush yes`).
    redis::cmd("FLUSHALL")
        .arg("SYNC")
        .query::<()>(&mut c)
        .unwrap();
    let ok: String = redis::cmd("MEMORY").arg("PURGE").query(&mut c).unwrap();
    assert_eq!(ok, "OK");
    // Synchronous: no wait.
    let now = rss(&srv);
    assert!(now < 2 * empty + 16 * MB, "RSS {now} (empty {empty})");
    // INFO tells the truth: once returned, the allocator holds little
    // beyond the live data, neither as returnable pages nor as
    // fragmentation, and its resident figure is within the process's.
    let field =
        |c: &mut Connection, f: &str| -> i64 { info_field(c, "memory", f).parse().unwrap() };
    for f in ["allocator_rss_bytes", "allocator_frag_bytes"] {
        let v = field(&mut c, f);
        assert!(v < 16 * MB as i64, "{f} {v}");
    }
    assert!(field(&mut c, "allocator_resident") <= field(&mut c, "used_memory_rss"));
}

/// The `field=` value of a CLIENT LIST / INFO line.
fn client_field(line: &str, field: &str) -> u64 {
    line.split(' ')
        .find_map(|kv| kv.strip_prefix(&format!("{field}=")))
        .unwrap_or_else(|| panic!("no {field} in {line}"))
        .trim()
        .parse()
        .unwrap()
}

fn client_line(c: &mut Connection, name: &str) -> String {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(c).unwrap();
    list.lines()
        .find(|l| l.contains(&format!(" name={name} ")))
        .unwrap_or_else(|| panic!("no client {name} in {list}"))
        .to_string()
}

#[test]
fn an_idle_connection_gives_back_the_buffers_of_a_large_command() {
    let srv = Server::tessera(&[]);
    let mut c = srv.conn();
    let mut big = RawConn::connect(&srv.addr());
    assert_eq!(big.cmd_str(&["CLIENT", "SETNAME", "big"]), b"+OK\r\n");
    let before = used(&mut c);
    // One SADD of 100k members (about 1.5 MB of request, 100k arguments),
    // and a 600 KB reply.
    let members: Vec<String> = (0..100_000).map(|i| format!("member:{i}")).collect();
    let mut args: Vec<&[u8]> = vec![b"SADD", b"s"];
    args.extend(members.iter().map(|m| m.as_bytes()));
    assert_eq!(big.cmd(&args), b":100000\r\n");
    assert_eq!(big.cmd_str(&["UNLINK", "s"]), b":1\r\n");
    let echo = "e".repeat(600 << 10);
    let r = big.cmd_str(&["ECHO", &echo]);
    assert_eq!(r.len(), echo.len() + 11);
    // No check that the buffers are grown here: the cron may shrink the
    // SADD's query buffer to the ECHO's peak at any tick after the ECHO
    // arrived, so what CLIENT LIST shows now depends on where the ticks
    // fell (the official CI caught it already shrunk 600 KB, within
    // 100 ms). Without the shrinking the query buffer stays at the 2 MB
    // the SADD grew it to and the loop below fails.
    // Within seconds the idle connection holds little.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let l = client_line(&mut c, "big");
        let tot = client_field(&l, "tot-mem");
        if tot < 256 << 10 {
            assert_eq!(client_field(&l, "qbuf"), 0, "{l}");
            assert_eq!(client_field(&l, "argv-mem"), 0, "{l}");
            assert!(client_field(&l, "rbs") < 64 << 10, "{l}");
            break;
        }
        assert!(Instant::now() < deadline, "still {tot}: {l}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // And used_memory says so (the set itself is gone: UNLINK).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = used(&mut c);
        if now < before + (256 << 10) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "used_memory {now}, before {before}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // CLIENT INFO of the connection itself reports its own buffers.
    let info = big.cmd_str(&["CLIENT", "INFO"]);
    let line = String::from_utf8_lossy(&info).into_owned();
    assert!(client_field(&line, "tot-mem") > 0, "{line}");
    assert!(client_field(&line, "tot-mem") < 256 << 10, "{line}");
    assert_eq!(client_field(&line, "argv-mem"), 10, "{line}");
}

#[test]
fn the_query_buffer_limit_holds_while_buffers_shrink() {
    let srv = Server::tessera(&[]);
    let mut c = srv.conn();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("client-query-buffer-limit")
        .arg("1mb")
        .query::<()>(&mut c)
        .unwrap();
    let mut raw = RawConn::connect(&srv.addr());
    // A bulk announced and 2 MB of it sent, never completed.
    raw.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3000000\r\n");
    let chunk = vec![b'x'; 64 << 10];
    let mut closed = false;
    for _ in 0..32 {
        if raw.try_send(&chunk).is_err() {
            closed = true;
            break;
        }
    }
    if !closed {
        raw.read_eof();
    }
    let n: usize = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 0);
}
