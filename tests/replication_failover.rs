//! FAILOVER (Redis 6.2+'s coordinated failover) between Tessera servers,
//! and with redis-server on either side: the master pauses writes, waits
//! for its replica to acknowledge every byte, becomes a replica of it and
//! asks it to take over (`PSYNC ... FAILOVER`). Roles swap with nothing
//! lost; the writes held meanwhile get READONLY from the old master; the
//! old master follows the new one. TIMEOUT, FORCE and ABORT are driven by
//! a stopped replica (SIGSTOP), never by timing. At 2 and 16 shards (the
//! pause must hold writes on every shard). Every wait has a deadline.

mod common;

use std::process::Command;

use common::{encode_command, info_field as field, wait_for, RawConn, Server};

const READONLY: &[u8] = b"-READONLY You can't write against a read only replica.\r\n";

fn signal(srv: &Server, sig: &str) {
    let pid = srv.pid().expect("a running server").to_string();
    let ok = Command::new("kill")
        .args([sig, &pid])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid}");
}

/// A master and a replica of it (`replica_flavor`), the replica online.
fn pair(shards: &str, replica_redis: bool) -> (Server, Server) {
    let master = Server::tessera(&["--shards", shards, "--repl-diskless-sync-delay", "0"]);
    let port = master.port().to_string();
    let replica = if replica_redis {
        Server::redis(&["--replicaof", "127.0.0.1", &port])
    } else {
        Server::tessera(&["--shards", shards, "--replicaof", "127.0.0.1", &port])
    };
    let mut m = master.conn();
    wait_for("the replica online", || replica_online(&mut m));
    (master, replica)
}

/// `srv`'s ROLE is `role` with its link up (a replica) and no failover.
fn settled(srv: &Server, role: &str) -> bool {
    let mut c = srv.conn();
    field(&mut c, "replication", "role") == role
        && field(&mut c, "replication", "master_failover_state") == "no-failover"
        && (role == "master" || field(&mut c, "replication", "master_link_status") == "up")
}

/// Whether the master's first replica is online, from one INFO: `slave0`
/// is absent until the replica connects, and may go between two INFO
/// calls (`info_field` panics on an absent field).
fn replica_online(m: &mut redis::Connection) -> bool {
    let text: String = redis::cmd("INFO").arg("replication").query(m).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("slave0:"))
        .is_some_and(|v| v.contains("state=online"))
}

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("k{i}")).collect()
}

/// The roles swap: every write made before FAILOVER is on the new master,
/// the old one follows it and refuses writes.
fn roles_swap(shards: &str) {
    let (master, replica) = pair(shards, false);
    let (mut mraw, mut rraw) = (master.raw(), replica.raw());
    for k in keys(200) {
        mraw.cmd_str(&["SET", &k, &k]);
    }
    mraw.cmd_str(&["MSET", "a", "1", "b", "2", "c", "3", "d", "4"]);
    assert_eq!(mraw.cmd_str(&["FAILOVER"]), b"+OK\r\n");
    wait_for("the roles swapped", || {
        settled(&replica, "master") && settled(&master, "slave")
    });
    let mut m = master.conn();
    assert_eq!(
        field(&mut m, "replication", "master_port"),
        replica.port().to_string()
    );
    let mut r = replica.conn();
    assert_eq!(field(&mut r, "replication", "connected_slaves"), "1");
    for k in keys(200) {
        assert_eq!(
            rraw.cmd_str(&["GET", &k]),
            format!("${}\r\n{k}\r\n", k.len()).into_bytes()
        );
    }
    assert_eq!(
        rraw.cmd_str(&["MGET", "a", "b", "c", "d"]),
        b"*4\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n$1\r\n4\r\n"
    );
    assert_eq!(mraw.cmd_str(&["SET", "x", "1"]), READONLY);
    assert_eq!(rraw.cmd_str(&["SET", "x", "new"]), b"+OK\r\n");
    wait_for("the old master follows the new one", || {
        mraw.cmd_str(&["GET", "x"]) == b"$3\r\nnew\r\n"
    });
    assert_eq!(rraw.cmd_str(&["DBSIZE"]), mraw.cmd_str(&["DBSIZE"]));
    // A partial resync: the new master continued the old one's history.
    assert_eq!(field(&mut r, "stats", "sync_partial_ok"), "1");
    assert_eq!(field(&mut r, "stats", "sync_full"), "0");
}

#[test]
fn failover_swaps_roles_at_2_shards() {
    roles_swap("2");
}

#[test]
fn failover_swaps_roles_at_16_shards() {
    roles_swap("16");
}

/// Sends a write on `c` that the pause must hold (its reply is read
/// later), and waits until the server counts it blocked.
fn held_write(srv: &Server, c: &mut RawConn, args: &[&str], n_held: usize) {
    let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    c.send(&encode_command(&argv));
    let mut info = srv.conn();
    wait_for("the write held", || {
        field(&mut info, "clients", "blocked_clients") == n_held.to_string()
    });
}

/// TIMEOUT + FORCE with the replica stopped: writes are held while the
/// master waits; at the timeout it fails over anyway, and once the target
/// runs again it takes over; the held writes then get READONLY.
fn forced_failover(shards: &str) {
    let (master, replica) = pair(shards, false);
    let mut mraw = master.raw();
    mraw.cmd_str(&["SET", "before", "1"]);
    let mut r = replica.conn();
    wait_for("the replica has it", || {
        redis::cmd("GET")
            .arg("before")
            .query::<Option<String>>(&mut r)
            .unwrap()
            .is_some()
    });
    signal(&replica, "-STOP");
    // Not acknowledged by the stopped replica: FAILOVER waits for it.
    mraw.cmd_str(&["SET", "lost", "1"]);
    let rport = replica.port().to_string();
    assert_eq!(
        mraw.cmd_str(&["FAILOVER", "TO", "127.0.0.1", "1", "TIMEOUT", "100"]),
        b"-ERR FAILOVER target HOST and PORT is not a replica.\r\n"
    );
    assert_eq!(
        mraw.cmd_str(&["FAILOVER", "TO", "127.0.0.1", &rport, "FORCE"]),
        b"-ERR FAILOVER with force option requires both a timeout and target HOST and IP.\r\n"
    );
    assert_eq!(
        mraw.cmd_str(&[
            "FAILOVER",
            "TO",
            "127.0.0.1",
            &rport,
            "TIMEOUT",
            "500",
            "FORCE"
        ]),
        b"+OK\r\n"
    );
    let mut w1 = master.raw();
    held_write(&master, &mut w1, &["SET", "held", "1"], 1);
    let mut w2 = master.raw();
    held_write(
        &master,
        &mut w2,
        &["MSET", "h1", "1", "h2", "2", "h3", "3"],
        2,
    );
    // Reads are served meanwhile.
    assert_eq!(mraw.cmd_str(&["GET", "before"]), b"$1\r\n1\r\n");
    assert_eq!(
        mraw.cmd_str(&["FAILOVER"]),
        b"-ERR FAILOVER already in progress.\r\n"
    );
    assert_eq!(
        mraw.cmd_str(&["REPLICAOF", "NO", "ONE"]),
        b"-ERR REPLICAOF not allowed while failing over.\r\n"
    );
    let mut m = master.conn();
    wait_for("the forced demotion", || {
        field(&mut m, "replication", "master_failover_state") == "failover-in-progress"
    });
    assert_eq!(field(&mut m, "replication", "role"), "slave");
    signal(&replica, "-CONT");
    assert_eq!(w1.read_reply(), READONLY);
    assert_eq!(w2.read_reply(), READONLY);
    wait_for("the roles swapped", || {
        settled(&replica, "master") && settled(&master, "slave")
    });
    let mut rraw = replica.raw();
    assert_eq!(rraw.cmd_str(&["SET", "after", "1"]), b"+OK\r\n");
    wait_for("the old master follows", || {
        mraw.cmd_str(&["GET", "after"]) == b"$1\r\n1\r\n"
    });
    // The write the stopped target had not acknowledged is kept only if
    // it had reached its socket (its master's stream is read first); the
    // old master ends with the new one's data either way.
    assert_eq!(mraw.cmd_str(&["GET", "held"]), b"$-1\r\n");
    assert_eq!(mraw.cmd_str(&["DBSIZE"]), rraw.cmd_str(&["DBSIZE"]));
    assert_eq!(
        mraw.cmd_str(&["GET", "lost"]),
        rraw.cmd_str(&["GET", "lost"])
    );
    assert!(master.log().contains("time out exceeded, failing over."));
}

#[test]
fn forced_failover_at_2_shards() {
    forced_failover("2");
}

#[test]
fn forced_failover_at_16_shards() {
    forced_failover("16");
}

/// TIMEOUT without FORCE aborts, and ABORT ends a waiting failover: the
/// held writes then run on the master, which stays one.
#[test]
fn timeout_and_abort_resume_writes() {
    let (master, replica) = pair("2", false);
    let mut mraw = master.raw();
    mraw.cmd_str(&["SET", "a", "1"]);
    let mut r = replica.conn();
    wait_for("the replica has it", || {
        redis::cmd("EXISTS").arg("a").query::<i64>(&mut r).unwrap() == 1
    });
    signal(&replica, "-STOP");
    mraw.cmd_str(&["SET", "b", "1"]);
    assert_eq!(mraw.cmd_str(&["FAILOVER", "TIMEOUT", "300"]), b"+OK\r\n");
    let mut w = master.raw();
    held_write(&master, &mut w, &["INCR", "n"], 1);
    assert_eq!(w.read_reply(), b":1\r\n");
    let mut m = master.conn();
    assert_eq!(
        field(&mut m, "replication", "master_failover_state"),
        "no-failover"
    );
    assert!(master
        .log()
        .contains("FAILOVER to any replica aborted: Replica never caught up before timeout"));

    assert_eq!(mraw.cmd_str(&["FAILOVER"]), b"+OK\r\n");
    assert_eq!(
        field(&mut m, "replication", "master_failover_state"),
        "waiting-for-sync"
    );
    held_write(&master, &mut w, &["INCR", "n"], 1);
    // CLIENT UNPAUSE does not lift the failover's pause.
    assert_eq!(mraw.cmd_str(&["CLIENT", "UNPAUSE"]), b"+OK\r\n");
    assert_eq!(mraw.cmd_str(&["FAILOVER", "ABORT"]), b"+OK\r\n");
    assert_eq!(w.read_reply(), b":2\r\n");
    assert_eq!(
        mraw.cmd_str(&["FAILOVER", "ABORT"]),
        b"-ERR No failover in progress.\r\n"
    );
    assert_eq!(field(&mut m, "replication", "role"), "master");
    signal(&replica, "-CONT");
    wait_for("the replica catches up", || {
        redis::cmd("GET")
            .arg("n")
            .query::<Option<String>>(&mut r)
            .unwrap()
            .as_deref()
            == Some("2")
    });
    assert!(master
        .log()
        .contains("FAILOVER to any replica aborted: Failover manually aborted"));
}

/// A Tessera master fails over to a redis-server replica.
#[test]
fn tessera_fails_over_to_redis() {
    if !common::redis_available() {
        return;
    }
    let (master, replica) = pair("2", true);
    let mut mraw = master.raw();
    for k in keys(50) {
        mraw.cmd_str(&["SET", &k, &k]);
    }
    let rport = replica.port().to_string();
    assert_eq!(
        mraw.cmd_str(&["FAILOVER", "TO", "127.0.0.1", &rport]),
        b"+OK\r\n"
    );
    wait_for("the roles swapped", || {
        settled(&replica, "master") && settled(&master, "slave")
    });
    let mut rraw = replica.raw();
    assert_eq!(rraw.cmd_str(&["DBSIZE"]), b":50\r\n");
    assert_eq!(rraw.cmd_str(&["SET", "x", "1"]), b"+OK\r\n");
    wait_for("the old master follows", || {
        mraw.cmd_str(&["GET", "x"]) == b"$1\r\n1\r\n"
    });
    let mut r = replica.conn();
    assert_eq!(field(&mut r, "stats", "sync_partial_ok"), "1");
}

/// A redis-server master fails over to a Tessera replica.
#[test]
fn redis_fails_over_to_tessera() {
    if !common::redis_available() {
        return;
    }
    let master = Server::redis(&[]);
    let port = master.port().to_string();
    let replica = Server::tessera(&["--shards", "2", "--replicaof", "127.0.0.1", &port]);
    let mut m = master.conn();
    wait_for("the replica online", || replica_online(&mut m));
    let mut mraw = master.raw();
    for k in keys(50) {
        mraw.cmd_str(&["SET", &k, &k]);
    }
    assert_eq!(mraw.cmd_str(&["FAILOVER"]), b"+OK\r\n");
    wait_for("the roles swapped", || {
        settled(&replica, "master") && settled(&master, "slave")
    });
    let mut rraw = replica.raw();
    assert_eq!(rraw.cmd_str(&["DBSIZE"]), b":50\r\n");
    assert_eq!(rraw.cmd_str(&["SET", "x", "1"]), b"+OK\r\n");
    wait_for("the old master follows", || {
        mraw.cmd_str(&["GET", "x"]) == b"$1\r\n1\r\n"
    });
    let mut r = replica.conn();
    assert_eq!(field(&mut r, "stats", "sync_partial_ok"), "1");
    assert!(replica
        .log()
        .contains("MASTER MODE enabled (failover request from"));
}

/// A target that is no longer a replica refuses `PSYNC ... FAILOVER`: the
/// old master aborts, is a master again, and runs the held writes.
#[test]
fn a_refused_takeover_aborts_and_resumes_writes() {
    let (master, replica) = pair("2", false);
    let mut mraw = master.raw();
    mraw.cmd_str(&["SET", "a", "1"]);
    let mut r = replica.conn();
    wait_for("the replica has it", || {
        redis::cmd("EXISTS").arg("a").query::<i64>(&mut r).unwrap() == 1
    });
    let mut rctl = replica.raw();
    assert_eq!(rctl.cmd_str(&["PING"]), b"+PONG\r\n");
    signal(&replica, "-STOP");
    mraw.cmd_str(&["SET", "b", "1"]);
    let rport = replica.port().to_string();
    assert_eq!(
        mraw.cmd_str(&[
            "FAILOVER",
            "TO",
            "127.0.0.1",
            &rport,
            "TIMEOUT",
            "300",
            "FORCE"
        ]),
        b"+OK\r\n"
    );
    // Read by the stopped target before the demoted master's handshake
    // can reach its PSYNC (three exchanges later).
    rctl.send(&encode_command(&[b"REPLICAOF", b"NO", b"ONE"]));
    let mut w = master.raw();
    held_write(&master, &mut w, &["INCR", "n"], 1);
    let mut m = master.conn();
    wait_for("the forced demotion", || {
        field(&mut m, "replication", "master_failover_state") == "failover-in-progress"
    });
    signal(&replica, "-CONT");
    assert_eq!(rctl.read_reply(), b"+OK\r\n");
    assert_eq!(w.read_reply(), b":1\r\n");
    wait_for("a master again", || settled(&master, "master"));
    assert!(master
        .log()
        .contains("aborted: Failover target rejected psync request"));
    assert_eq!(mraw.cmd_str(&["GET", "b"]), b"$1\r\n1\r\n");
}

/// ABORT after the demotion (`failover-in-progress`, the target stopped):
/// the server is a master again, runs the held writes, and its replica
/// follows it once it runs again.
#[test]
fn abort_after_the_demotion_promotes_back() {
    let (master, replica) = pair("2", false);
    let mut mraw = master.raw();
    mraw.cmd_str(&["SET", "a", "1"]);
    let mut r = replica.conn();
    wait_for("the replica has it", || {
        redis::cmd("EXISTS").arg("a").query::<i64>(&mut r).unwrap() == 1
    });
    signal(&replica, "-STOP");
    mraw.cmd_str(&["SET", "b", "1"]);
    let rport = replica.port().to_string();
    assert_eq!(
        mraw.cmd_str(&[
            "FAILOVER",
            "TO",
            "127.0.0.1",
            &rport,
            "TIMEOUT",
            "200",
            "FORCE"
        ]),
        b"+OK\r\n"
    );
    let mut w = master.raw();
    held_write(&master, &mut w, &["INCR", "n"], 1);
    let mut m = master.conn();
    wait_for("the forced demotion", || {
        field(&mut m, "replication", "master_failover_state") == "failover-in-progress"
    });
    assert_eq!(mraw.cmd_str(&["SET", "c", "1"]), READONLY);
    assert_eq!(mraw.cmd_str(&["FAILOVER", "ABORT"]), b"+OK\r\n");
    assert_eq!(w.read_reply(), b":1\r\n");
    assert!(settled(&master, "master"));
    assert!(master.log().contains("aborted: Failover manually aborted"));
    signal(&replica, "-CONT");
    wait_for("the replica follows again", || {
        redis::cmd("GET")
            .arg("n")
            .query::<Option<String>>(&mut r)
            .unwrap()
            .as_deref()
            == Some("1")
    });
    let mut rr = replica.conn();
    assert_eq!(field(&mut rr, "replication", "role"), "slave");
}

/// Writers keep writing on every shard while FAILOVER runs: each stops at
/// its first READONLY, and the new master holds exactly every write that
/// was acknowledged (the pause and the offsets cover every shard).
fn no_acknowledged_write_lost(shards: &str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let (master, replica) = pair(shards, false);
    let done = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..4)
        .map(|t| {
            let mut c = master.raw();
            let done = done.clone();
            std::thread::spawn(move || {
                let mut acked = vec![0u64; 8];
                for i in 0..1_000_000usize {
                    let k = format!("w{t}:{}", i % 8);
                    let reply = c.cmd_str(&["INCR", &k]);
                    if reply == READONLY {
                        return acked;
                    }
                    let n = std::str::from_utf8(&reply[1..reply.len() - 2])
                        .ok()
                        .and_then(|s| s.parse::<u64>().ok())
                        .unwrap_or_else(|| panic!("INCR {k}: {reply:?}"));
                    acked[i % 8] = n;
                    done.fetch_add(1, Ordering::Relaxed);
                }
                panic!("never refused");
            })
        })
        .collect();
    wait_for("writes flowing", || done.load(Ordering::Relaxed) >= 400);
    let mut mraw = master.raw();
    assert_eq!(mraw.cmd_str(&["FAILOVER"]), b"+OK\r\n");
    let acked: Vec<Vec<u64>> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    wait_for("the roles swapped", || {
        settled(&replica, "master") && settled(&master, "slave")
    });
    let mut rraw = replica.raw();
    for (t, keys) in acked.iter().enumerate() {
        for (j, n) in keys.iter().enumerate() {
            let k = format!("w{t}:{j}");
            // 0: never acknowledged (its first INCR was held, then refused).
            let want = match n {
                0 => b"$-1\r\n".to_vec(),
                n => format!("${}\r\n{n}\r\n", n.to_string().len()).into_bytes(),
            };
            assert_eq!(rraw.cmd_str(&["GET", &k]), want, "{k}");
            assert_eq!(mraw.cmd_str(&["GET", &k]), want, "{k} on the old master");
        }
    }
}

#[test]
fn no_acknowledged_write_lost_at_2_shards() {
    no_acknowledged_write_lost("2");
}

#[test]
fn no_acknowledged_write_lost_at_16_shards() {
    no_acknowledged_write_lost("16");
}

/// The old master's other replica keeps replicating from it (chained
/// under the new master), as in Redis.
#[test]
fn another_replica_follows_through_the_old_master() {
    let (master, replica) = pair("2", false);
    let port = master.port().to_string();
    let other = Server::tessera(&["--shards", "2", "--replicaof", "127.0.0.1", &port]);
    let mut m = master.conn();
    wait_for("two replicas online", || {
        field(&mut m, "replication", "connected_slaves") == "2"
            && field(&mut m, "replication", "slave1").contains("state=online")
    });
    let mut mraw = master.raw();
    mraw.cmd_str(&["SET", "a", "1"]);
    let rport = replica.port().to_string();
    assert_eq!(
        mraw.cmd_str(&["FAILOVER", "TO", "127.0.0.1", &rport]),
        b"+OK\r\n"
    );
    wait_for("the roles swapped", || {
        settled(&replica, "master") && settled(&master, "slave")
    });
    let mut rraw = replica.raw();
    assert_eq!(rraw.cmd_str(&["SET", "b", "2"]), b"+OK\r\n");
    let mut oraw = other.raw();
    wait_for("the other replica gets the new master's write", || {
        oraw.cmd_str(&["MGET", "a", "b"]) == b"*2\r\n$1\r\n1\r\n$1\r\n2\r\n"
    });
    let mut o = other.conn();
    assert_eq!(
        field(&mut o, "replication", "master_port"),
        master.port().to_string()
    );
}
