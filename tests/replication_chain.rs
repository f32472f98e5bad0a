//! A Tessera replica's own replicas and its promotion (issue 25): the
//! replica keeps a backlog of its master's stream and proxies it byte for
//! byte, so that
//! * a replica of the replica (Redis or Tessera) gets the top master's
//!   data and stream, with the master's replication ID and offsets, in
//!   the database the stream is in (`repl-stream-db`, and after a partial
//!   resync of the replica), and continues with a partial resync after
//!   its link is cut, and again once the replica is promoted;
//! * once the replica is promoted (REPLICAOF NO ONE), the old master's
//!   other replicas re-pointed to it continue with `+CONTINUE`
//!   (`sync_partial_ok` grows, `sync_full` does not) and then get the new
//!   master's own writes.
//!
//! Also: a master that answers PSYNC with an error is asked with SYNC
//! (Redis's fallback for old masters). Every wait has a deadline.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::time::Duration;

use common::{info_field as field, wait_for, Server};

fn q<T: redis::FromRedisValue>(c: &mut redis::Connection, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(c).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Every master here starts a (diskless) sync as soon as a replica asks:
/// Redis's default, and Tessera's, waits 5 s for more replicas first,
/// a third to a half of these tests' time (5-16 s each) and no part of
/// what they check.
const NO_SYNC_DELAY: &[&str] = &["--repl-diskless-sync-delay", "0"];

fn skip() -> bool {
    if !common::redis_available() {
        eprintln!("skipped: redis-server not found");
        return true;
    }
    common::testing_real_redis()
}

/// Writes of several kinds (INCR is not idempotent: applied twice, it
/// shows), a transaction and a second database.
fn writes(c: &mut redis::Connection, tag: &str, n: usize) {
    for i in 0..n {
        let _: () = q(c, &["SET", &format!("{tag}:s{i}"), &i.to_string()]);
        let _: i64 = q(c, &["INCR", &format!("{tag}:counter")]);
        let _: i64 = q(c, &["RPUSH", &format!("{tag}:list"), &i.to_string()]);
    }
    let _: redis::Value = redis::pipe()
        .atomic()
        .cmd("INCRBY")
        .arg(format!("{tag}:counter"))
        .arg(100)
        .cmd("SET")
        .arg(format!("{tag}:tx"))
        .arg("done")
        .query(c)
        .unwrap();
}

/// The keys `writes(tag, n)` made, as read from `c`.
fn contents(c: &mut redis::Connection, tag: &str, n: usize) -> Vec<Option<String>> {
    let mut v: Vec<Option<String>> = (0..n)
        .map(|i| q(c, &["GET", &format!("{tag}:s{i}")]))
        .collect();
    v.push(q(c, &["GET", &format!("{tag}:counter")]));
    v.push(q(c, &["GET", &format!("{tag}:tx")]));
    let list: Vec<String> = q(c, &["LRANGE", &format!("{tag}:list"), "0", "-1"]);
    v.push(Some(list.join(",")));
    v
}

fn get(c: &mut redis::Connection, k: &str) -> Option<String> {
    q(c, &["GET", k])
}

/// `r`'s link to its master is up (its sync is done).
fn link_up(r: &mut redis::Connection) -> bool {
    field(r, "replication", "master_link_status") == "up"
}

/// `r`'s link is up and it applied exactly what `m` streamed.
fn caught_up(m: &mut redis::Connection, r: &mut redis::Connection) -> bool {
    let off = field(m, "replication", "master_repl_offset");
    field(r, "replication", "master_link_status") == "up"
        && off != "0"
        && field(r, "replication", "master_repl_offset") == off
}

/// Redis master → Tessera replica → `sub` (Redis or Tessera): the data
/// and the stream arrive, the IDs and offsets are the top master's, and a
/// cut link to the sub-replica resumes with a partial resync from the
/// Tessera replica's backlog.
fn chain(top: Server, sub_tessera: bool) {
    let tport = top.port().to_string();
    let mid = Server::tessera(&[
        "--shards",
        "4",
        "--replicaof",
        "127.0.0.1",
        &tport,
        "--repl-diskless-sync-delay",
        "0",
    ]);
    let mport = mid.port().to_string();
    let (mut t, mut m) = (top.conn(), mid.conn());
    let mut t3 = top.conn();
    let _: () = q(&mut t3, &["SELECT", "3"]);
    writes(&mut t, "before", 20);
    // (Offsets move with the stream: the writes before the replica's sync
    // may leave the master's at 0 until its next PING, 10 s apart; the
    // write after the link is up moves it at once.)
    wait_for("the replica syncs", || link_up(&mut m));
    let _: () = q(&mut t3, &["SET", "db3:a", "1"]);
    wait_for("the replica follows", || caught_up(&mut t, &mut m));
    let sub_args = ["--replicaof", "127.0.0.1", &mport];
    let sub = if sub_tessera {
        Server::tessera(&sub_args)
    } else {
        Server::redis(&sub_args)
    };
    let mut s = sub.conn();
    wait_for("the sub-replica syncs", || caught_up(&mut m, &mut s));
    // The stream is in database 3 (no SELECT comes again): the payload
    // says so (`repl-stream-db`), and a partial resync goes on there.
    let _: () = q(&mut t3, &["SET", "db3:b", "2"]);
    let mut s3 = sub.conn();
    let _: () = q(&mut s3, &["SELECT", "3"]);
    // (A Tessera master's offset counts a write a moment after its reply:
    // the waits also look at the data.)
    wait_for("the write in db 3 arrives", || {
        caught_up(&mut t, &mut s) && get(&mut s3, "db3:b").as_deref() == Some("2")
    });
    let killed: i64 = q(&mut t, &["CLIENT", "KILL", "TYPE", "replica"]);
    assert_eq!(killed, 1);
    let _: () = q(&mut t3, &["SET", "db3:c", "3"]);
    let mut m3 = mid.conn();
    let _: () = q(&mut m3, &["SELECT", "3"]);
    wait_for("the replica continues", || {
        field(&mut t, "stats", "sync_partial_ok") == "1"
            && caught_up(&mut t, &mut s)
            && get(&mut s3, "db3:c").is_some()
            && get(&mut m3, "db3:c").is_some()
    });
    for c in [&mut s3, &mut m3] {
        assert_eq!(
            q::<Option<String>>(c, &["GET", "db3:c"]).as_deref(),
            Some("3")
        );
    }
    for c in [&mut s, &mut m] {
        let db0: Option<String> = q(c, &["GET", "db3:c"]);
        assert_eq!(db0, None, "not in database 0");
    }
    writes(&mut t, "after", 20);
    wait_for("the stream reaches the sub-replica", || {
        caught_up(&mut t, &mut m)
            && caught_up(&mut t, &mut s)
            && contents(&mut s, "after", 20) == contents(&mut t, "after", 20)
    });
    assert_eq!(
        field(&mut s, "replication", "master_replid"),
        field(&mut t, "replication", "master_replid"),
        "the sub-replica holds the top master's history"
    );
    for tag in ["before", "after"] {
        assert_eq!(
            contents(&mut s, tag, 20),
            contents(&mut t, tag, 20),
            "{tag}"
        );
    }
    assert_eq!(field(&mut m, "stats", "sync_full"), "1");
    // The sub-replica's link is cut: it continues from the backlog.
    let killed: i64 = q(&mut m, &["CLIENT", "KILL", "TYPE", "replica"]);
    assert_eq!(killed, 1);
    writes(&mut t, "cut", 10);
    wait_for("a partial resync of the sub-replica", || {
        field(&mut m, "stats", "sync_partial_ok") == "1"
            && caught_up(&mut t, &mut s)
            && contents(&mut s, "cut", 10) == contents(&mut t, "cut", 10)
    });
    assert_eq!(
        field(&mut m, "stats", "sync_full"),
        "1",
        "no second full sync"
    );
    assert_eq!(contents(&mut s, "cut", 10), contents(&mut t, "cut", 10));
    let dbsize: i64 = q(&mut t, &["DBSIZE"]);
    let sub_dbsize: i64 = q(&mut s, &["DBSIZE"]);
    assert_eq!(sub_dbsize, dbsize);
    // The middle one is promoted: its replica reconnects (to learn the
    // new ID) and continues, then gets the new master's writes.
    let _: String = q(&mut m, &["REPLICAOF", "NO", "ONE"]);
    let _: () = q(&mut m, &["SET", "promoted", "yes"]);
    wait_for("the sub-replica continues after the promotion", || {
        field(&mut m, "stats", "sync_partial_ok") == "2"
            && caught_up(&mut m, &mut s)
            && get(&mut s, "promoted").as_deref() == Some("yes")
    });
    assert_eq!(field(&mut m, "stats", "sync_full"), "1");
    assert_eq!(
        field(&mut s, "replication", "master_replid"),
        field(&mut m, "replication", "master_replid")
    );
}

#[test]
fn redis_master_tessera_replica_redis_sub_replica() {
    if skip() {
        return;
    }
    chain(Server::redis(NO_SYNC_DELAY), false);
}

#[test]
fn tessera_chain_of_three() {
    if common::testing_real_redis() {
        return;
    }
    chain(
        Server::tessera(&["--shards", "2", "--repl-diskless-sync-delay", "0"]),
        true,
    );
}

/// The old master's other replica, re-pointed to the promoted Tessera
/// replica, continues (`+CONTINUE`), then follows the new master's writes.
/// `promoted_args`: more arguments of the Tessera replica promoted.
fn promotion(old: Server, other_tessera: bool, promoted_args: &[&str]) {
    let oport = old.port().to_string();
    let args = ["--replicaof", "127.0.0.1", oport.as_str()];
    let mut pargs = vec!["--shards", "4", "--replicaof", "127.0.0.1", &oport];
    pargs.extend_from_slice(promoted_args);
    let promoted = Server::tessera(&pargs);
    let other = if other_tessera {
        Server::tessera(&args)
    } else {
        Server::redis(&args)
    };
    let (mut o, mut p, mut r) = (old.conn(), promoted.conn(), other.conn());
    writes(&mut o, "old", 30);
    // A write once both links are up moves the offset (see `chain`).
    wait_for("both replicas sync", || link_up(&mut p) && link_up(&mut r));
    let _: () = q(&mut o, &["SET", "old:synced", "1"]);
    wait_for("both replicas catch up", || {
        let want = contents(&mut o, "old", 30);
        caught_up(&mut o, &mut p)
            && caught_up(&mut o, &mut r)
            && contents(&mut p, "old", 30) == want
            && contents(&mut r, "old", 30) == want
    });
    // The old master goes away (its PINGs would move the offsets on).
    drop(o);
    drop(old);
    wait_for("both links down", || {
        field(&mut p, "replication", "master_link_status") == "down"
            && field(&mut r, "replication", "master_link_status") == "down"
    });
    let at = field(&mut p, "replication", "master_repl_offset");
    assert_eq!(field(&mut r, "replication", "master_repl_offset"), at);
    let _: String = q(&mut p, &["REPLICAOF", "NO", "ONE"]);
    assert_eq!(field(&mut p, "replication", "master_repl_offset"), at);
    assert_eq!(
        field(&mut p, "replication", "second_repl_offset"),
        (at.parse::<u64>().unwrap() + 1).to_string()
    );
    // Writes of the new master before its first replica continue the
    // stream too.
    writes(&mut p, "promoted", 10);
    let pport = promoted.port().to_string();
    let _: String = q(&mut r, &["REPLICAOF", "127.0.0.1", &pport]);
    wait_for("the re-pointed replica continues", || {
        caught_up(&mut p, &mut r)
            && contents(&mut r, "promoted", 10) == contents(&mut p, "promoted", 10)
    });
    assert_eq!(field(&mut p, "stats", "sync_partial_ok"), "1");
    assert_eq!(field(&mut p, "stats", "sync_full"), "0", "no full sync");
    assert_eq!(
        field(&mut r, "replication", "master_replid"),
        field(&mut p, "replication", "master_replid")
    );
    writes(&mut p, "later", 10);
    wait_for("the new master's writes arrive", || {
        caught_up(&mut p, &mut r) && contents(&mut r, "later", 10) == contents(&mut p, "later", 10)
    });
    for tag in ["old", "promoted", "later"] {
        let n = if tag == "old" { 30 } else { 10 };
        assert_eq!(contents(&mut r, tag, n), contents(&mut p, tag, n), "{tag}");
    }
    let a: i64 = q(&mut p, &["DBSIZE"]);
    let b: i64 = q(&mut r, &["DBSIZE"]);
    assert_eq!(a, b);
}

#[test]
fn a_promoted_tessera_replica_continues_a_redis_replica() {
    if skip() {
        return;
    }
    promotion(Server::redis(NO_SYNC_DELAY), false, &[]);
}

#[test]
fn a_promoted_tessera_replica_continues_a_tessera_replica() {
    if common::testing_real_redis() {
        return;
    }
    promotion(
        Server::tessera(&["--shards", "2", "--repl-diskless-sync-delay", "0"]),
        true,
        &[],
    );
}

/// The promoted replica writes an append-only file: the stream writer is
/// the AOF's, its records of the old master's commands are dropped from
/// the stream (they were proxied) and its own go on from the offset.
#[test]
fn a_promoted_tessera_replica_with_an_aof_continues_a_redis_replica() {
    if skip() {
        return;
    }
    promotion(
        Server::redis(NO_SYNC_DELAY),
        false,
        &["--appendonly", "yes"],
    );
}

/// A payload from a real save: Tessera's own RDB of `k = v`.
fn rdb_of_one_key() -> Vec<u8> {
    let s = Server::tessera(&[]);
    let mut c = s.conn();
    let _: () = q(&mut c, &["SET", "k", "v"]);
    let _: String = q(&mut c, &["SAVE"]);
    let cfg: Vec<String> = q(&mut c, &["CONFIG", "GET", "dir"]);
    let name: Vec<String> = q(&mut c, &["CONFIG", "GET", "dbfilename"]);
    std::fs::read(std::path::Path::new(&cfg[1]).join(&name[1])).unwrap()
}

/// A master that knows no PSYNC (`-ERR unknown command`): the replica
/// asks with SYNC, loads the payload, then applies the stream.
#[test]
fn a_master_without_psync_is_asked_with_sync() {
    if common::testing_real_redis() {
        return;
    }
    let rdb = rdb_of_one_key();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<String>>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let h = std::thread::spawn(move || {
        let Ok((s, _)) = l.accept() else { return };
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut w = s;
        let mut seen = Vec::new();
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            let word = if let Some(n) = line.strip_prefix('*') {
                let n: usize = n.trim().parse().unwrap_or(0);
                let mut argv = Vec::new();
                for _ in 0..n {
                    let (mut len, mut arg) = (String::new(), String::new());
                    r.read_line(&mut len).unwrap();
                    r.read_line(&mut arg).unwrap();
                    argv.push(arg.trim().to_uppercase());
                }
                argv.first().cloned().unwrap_or_default()
            } else {
                // SYNC comes inline, as Redis's replica sends it.
                line.trim().to_uppercase()
            };
            seen.push(word.clone());
            match word.as_str() {
                "PING" => w.write_all(b"+PONG\r\n").unwrap(),
                "REPLCONF" => w.write_all(b"+OK\r\n").unwrap(),
                "PSYNC" => w
                    .write_all(b"-ERR unknown command 'PSYNC', with args beginning with: \r\n")
                    .unwrap(),
                "SYNC" => {
                    w.write_all(format!("${}\r\n", rdb.len()).as_bytes())
                        .unwrap();
                    w.write_all(&rdb).unwrap();
                    w.write_all(b"*3\r\n$3\r\nSET\r\n$2\r\nk2\r\n$2\r\nv2\r\n")
                        .unwrap();
                    tx.send(seen.clone()).unwrap();
                    // Held open until the test has seen what it needs.
                    let _ = done_rx.recv_timeout(Duration::from_secs(60));
                    break;
                }
                _ => w.write_all(b"-ERR unknown\r\n").unwrap(),
            }
        }
    });
    let replica = Server::tessera(&[
        "--shards",
        "2",
        "--replicaof",
        "127.0.0.1",
        &port.to_string(),
    ]);
    let mut c = replica.conn();
    let seen = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(seen, ["PING", "REPLCONF", "REPLCONF", "PSYNC", "SYNC"]);
    wait_for("the payload and the stream are applied", || {
        q::<Option<String>>(&mut c, &["GET", "k2"]).as_deref() == Some("v2")
    });
    assert_eq!(
        q::<Option<String>>(&mut c, &["GET", "k"]).as_deref(),
        Some("v")
    );
    assert_eq!(field(&mut c, "replication", "master_link_status"), "up");
    let log = replica.log();
    assert!(
        log.contains("Master does not support PSYNC or is in error state"),
        "{log}"
    );
    assert!(log.contains("Retrying with SYNC..."), "{log}");
    let _ = done_tx.send(());
    drop(replica);
    let _ = h.join();
}
