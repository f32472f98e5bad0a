//! Shard consolidation: while the load is light, one thread runs every
//! shard's event loop and the others sleep; `shard-consolidation no` gives
//! each shard its own thread again. Commands across shards, blocked
//! clients and shutdown work in either state and across the moves.

mod common;

use std::time::{Duration, Instant};

use common::{info_field, wait_shard_threads, DataDir, Server};
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
