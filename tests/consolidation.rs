//! Shard consolidation: while the load is light, one thread runs every
//! shard's event loop and the others sleep; `shard-consolidation no` gives
//! each shard its own thread again. Commands across shards, blocked
//! clients and shutdown work in either state and across the moves.

mod common;

use std::time::{Duration, Instant};

use common::{info_field, send_str, wait_shard_threads, DataDir, RawConn, Server};
use redis::Commands;

const SHARDS: usize = 3;

/// Keys enough to span every shard (each lands on one of 3 by CRC16).
fn keys() -> Vec<String> {
    (0..30).map(|i| format!("key:{i}")).collect()
}

fn set_consolidation(srv: &Server, on: bool) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("shard-consolidation")
        .arg(if on { "yes" } else { "no" })
        .query(&mut srv.conn())
        .unwrap();
}

/// How many threads run shards (INFO `shard_threads_active`).
fn shard_threads(srv: &Server) -> String {
    info_field(&mut srv.conn(), "server", "shard_threads_active")
}

/// Cross-shard writes and reads, a transaction, and a client blocked on
/// a key that another connection pushes to.
fn exercise(srv: &Server, round: &str) {
    let keys = keys();
    let mut c = srv.conn();
    let pairs: Vec<(String, String)> = keys
        .iter()
        .map(|k| (k.clone(), round.to_string()))
        .collect();
    let _: () = c.mset(&pairs).unwrap();
    let got: Vec<String> = c.mget(&keys).unwrap();
    assert!(got.iter().all(|v| v == round), "{round}: {got:?}");
    let n: usize = c.exists(&keys).unwrap();
    assert_eq!(n, keys.len());
    let got: (i64, i64, i64) = redis::pipe()
        .atomic()
        .incr(format!("counter:{round}"), 1)
        .del(&keys[1])
        .ignore()
        .exists(&keys[1])
        .exists(&keys[2])
        .query(&mut c)
        .unwrap();
    assert_eq!(got, (1, 0, 1), "{round}: MULTI/EXEC across shards");

    // Several blocked clients, each on its own key (the keys sit on every
    // shard, the connections on whichever thread accepted them).
    let waiters: Vec<_> = (0..SHARDS * 2)
        .map(|i| {
            let mut w = srv.conn();
            let key = format!("queue:{round}:{i}");
            std::thread::spawn(move || {
                let got: Option<(String, String)> = w.blpop(&key, 10.0).unwrap();
                got
            })
        })
        .collect();
    let mut p = srv.conn();
    for i in 0..SHARDS * 2 {
        let key = format!("queue:{round}:{i}");
        // Push once every client still waiting is blocked.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let blocked = info_field(&mut p, "clients", "blocked_clients");
            if blocked == (SHARDS * 2 - i).to_string() {
                break;
            }
            assert!(Instant::now() < deadline, "{round}: clients never blocked");
            std::thread::sleep(Duration::from_millis(10));
        }
        let _: () = p.rpush(&key, i).unwrap();
    }
    for (i, w) in waiters.into_iter().enumerate() {
        let got = w.join().unwrap();
        assert_eq!(
            got,
            Some((format!("queue:{round}:{i}"), i.to_string())),
            "{round}: blocked client {i}"
        );
    }
}

#[test]
fn shards_share_a_thread_when_idle_and_part_when_told() {
    let dir = DataDir::new("consolidation");
    let shards = SHARDS.to_string();
    let mut srv = Server::tessera(&["--shards", &shards, "--dir", dir.path()]);
    // Idle: every shard on one thread.
    wait_shard_threads(&srv, 1);
    exercise(&srv, "together");

    set_consolidation(&srv, false);
    wait_shard_threads(&srv, SHARDS);
    exercise(&srv, "apart");
    // Stays apart however idle it is.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(shard_threads(&srv), SHARDS.to_string());

    set_consolidation(&srv, true);
    wait_shard_threads(&srv, 1);
    exercise(&srv, "together-again");

    // A refused shutdown while consolidated (the final save cannot be put
    // in place): the shards go back to their threads for the gate, come
    // back, and consolidate again.
    let dump = dir.0.join("dump.rdb");
    std::fs::create_dir(&dump).unwrap();
    std::fs::write(dump.join("x"), b"x").unwrap();
    let mut r = srv.raw();
    r.send(&common::encode_command(&[b"SHUTDOWN", b"SAVE"]));
    assert_eq!(
        r.read_reply(),
        b"-ERR Errors trying to SHUTDOWN. Check logs.\r\n"
    );
    assert!(srv.is_running());
    wait_shard_threads(&srv, 1);
    exercise(&srv, "after-refusal");
    std::fs::remove_dir_all(&dump).unwrap();

    // A shutdown while consolidated: every shard reaches the final save.
    r.send(&common::encode_command(&[b"SHUTDOWN", b"SAVE"]));
    let deadline = Instant::now() + Duration::from_secs(20);
    while srv.is_running() {
        assert!(Instant::now() < deadline, "server did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(srv);
    let srv = Server::tessera(&["--shards", &shards, "--dir", dir.path()]);
    let got: Vec<String> = srv.conn().mget(&keys()[2..]).unwrap();
    assert!(got.iter().all(|v| v == "after-refusal"), "{got:?}");
    let size: usize = redis::cmd("DBSIZE").query(&mut srv.conn()).unwrap();
    assert_eq!(
        size,
        keys().len() - 1 + 4,
        "all keys but the deleted one, and 4 counters"
    );
}

/// With consolidation off from the start, no shard ever moves.
#[test]
fn consolidation_off_keeps_a_thread_per_shard() {
    let shards = SHARDS.to_string();
    let srv = Server::tessera(&["--shards", &shards, "--shard-consolidation", "no"]);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(shard_threads(&srv), SHARDS.to_string());
    exercise(&srv, "apart");
}

const BUSY: &[u8] =
    b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n";

/// A consolidated server whose hub is stuck in an endless script on the
/// shard of `busy:key`: the server, the script's connection, the idle
/// clients (their index in the returned list says nothing), and one
/// client that is served meanwhile with the index it had when probed.
/// Clients whose connection lives on the script's own loop, or on the
/// stuck hub's own, wait for the script (see `host`).
fn stuck_hub() -> (Server, RawConn, Vec<RawConn>, RawConn, usize) {
    let srv = Server::tessera(&["--shards", "4", "--busy-reply-threshold", "100"]);
    // Connections spread over the threads by the kernel (SO_REUSEPORT).
    let mut clients: Vec<RawConn> = (0..12).map(|_| srv.raw()).collect();
    for c in &mut clients {
        assert_eq!(c.cmd_str(&["PING"]), b"+PONG\r\n");
    }
    wait_shard_threads(&srv, 1);

    let mut runner = srv.raw();
    send_str(&mut runner, &["EVAL", "while true do end", "1", "busy:key"]);
    // A client served while the script is busy (past the threshold): one
    // on a loop that neither runs the script nor is the stuck hub's own.
    // FUNCTION KILL, which does not touch an EVAL script, tells: NOTBUSY
    // until the threshold, then BUSY. A client that gets no answer within
    // a bounded wait is on a stuck loop, and is left alone (its FUNCTION
    // KILL is answered later).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut free = None;
    let mut next = 0;
    while free.is_none() && next < clients.len() {
        assert!(
            Instant::now() < deadline,
            "no client was told BUSY: the script never became busy, or no loop was free"
        );
        let c = &mut clients[next];
        send_str(c, &["FUNCTION", "KILL"]);
        c.set_reply_timeout(Duration::from_secs(3));
        match c.try_read_reply() {
            Ok(r) if r == BUSY => free = Some(next),
            Ok(r) => {
                assert_eq!(r, b"-NOTBUSY No scripts in execution right now.\r\n");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(_) => next += 1,
        }
    }
    let free = free.expect("some client on another loop is served while the script runs");
    let mut c = clients.swap_remove(free);
    c.set_reply_timeout(common::REPLY_TIMEOUT);
    (srv, runner, clients, c, free)
}

/// A hub stuck in a long script gives its other shards' loops back to
/// their threads: their clients are served, get `-BUSY` for the busy
/// shard's keys, and can SCRIPT KILL it.
#[test]
fn a_script_stuck_on_a_hub_frees_the_other_loops() {
    let (_srv, mut runner, mut clients, mut c, free) = stuck_hub();
    assert_eq!(c.cmd_str(&["GET", "busy:key"]), BUSY);
    assert_eq!(c.cmd_str(&["SCRIPT", "KILL"]), b"+OK\r\n");
    let r = runner.read_reply();
    let text = String::from_utf8_lossy(&r);
    assert!(
        text.starts_with("-ERR") && text.contains("Script killed by user with SCRIPT KILL"),
        "{text}"
    );
    // Everyone is served again, including the clients that waited.
    assert_eq!(c.cmd_str(&["GET", "busy:key"]), b"$-1\r\n");
    for (i, c) in clients.iter_mut().enumerate() {
        c.set_reply_timeout(common::REPLY_TIMEOUT);
        if i < free {
            // Its FUNCTION KILL, answered once its loop was free again.
            let r = c.read_reply();
            assert!(
                r == b"-NOTBUSY No scripts in execution right now.\r\n" || r == BUSY,
                "{}",
                String::from_utf8_lossy(&r)
            );
        }
        assert_eq!(c.cmd_str(&["PING"]), b"+PONG\r\n");
    }
}

/// SHUTDOWN NOSAVE from a loop the stuck hub gave back stops the script,
/// and every shard, adopted or not, reaches the exit.
#[test]
fn shutdown_nosave_while_a_hub_is_stuck() {
    let (mut srv, _runner, _clients, mut c, _) = stuck_hub();
    send_str(&mut c, &["SHUTDOWN", "NOSAVE"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while srv.is_running() {
        assert!(Instant::now() < deadline, "server did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(srv);
}

/// `server-cpulist 0`: every shard thread runs on CPU 0 only, and the
/// server serves (and consolidates) as usual.
#[test]
fn server_cpulist_pins_the_shard_threads() {
    let srv = Server::tessera(&["--shards", "3", "--server-cpulist", "0"]);
    let mut c = srv.conn();
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("server_cpulist")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, ["server_cpulist", "0"]);
    let pid = info_field(&mut c, "server", "process_id");
    let mut pinned = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap().path();
        let name = std::fs::read_to_string(task.join("comm")).unwrap();
        if !name.starts_with("shard-") {
            continue;
        }
        let status = std::fs::read_to_string(task.join("status")).unwrap();
        let cpus = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim();
        assert_eq!(cpus, "0", "{}", name.trim());
        pinned += 1;
    }
    assert_eq!(pinned, 3);
    wait_shard_threads(&srv, 1);
    exercise(&srv, "pinned");
}

/// 32 shards written to from start-up (as a preload does) may gather on
/// several hubs when many threads merge at once (first fit counts loads
/// pledged to a hub before its window measures them); once the load is
/// gone they end on one thread. Before `host::fold` a hub never left, so
/// two hubs stayed apart for good: this test timed out in 1 of 2 runs
/// with the fold turned off (4 of 8 fresh release servers after a
/// preload). Not every run makes two hubs: it cannot fail without the
/// bug, only miss it.
#[test]
fn hubs_made_under_load_fold_into_one_when_idle() {
    let srv = Server::tessera(&["--shards", "32"]);
    let stop = Instant::now() + Duration::from_millis(2500);
    let writers: Vec<_> = (0..16)
        .map(|t| {
            let mut c = srv.conn();
            std::thread::spawn(move || {
                let mut i = 0u64;
                while Instant::now() < stop {
                    let mut p = redis::pipe();
                    for _ in 0..16 {
                        let pairs: Vec<(String, u64)> =
                            (0..10).map(|k| (format!("w{t}:{k}:{i}"), i)).collect();
                        p.mset(&pairs).ignore();
                        i += 1;
                    }
                    let _: () = p.query(&mut c).unwrap();
                    std::thread::sleep(Duration::from_millis(2));
                }
                i * 10
            })
        })
        .collect();
    let written: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
    wait_shard_threads(&srv, 1);
    let size: u64 = redis::cmd("DBSIZE").query(&mut srv.conn()).unwrap();
    assert_eq!(size, written);
}
