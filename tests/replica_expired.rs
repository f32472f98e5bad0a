//! Keys past their deadline on a replica (Redis 7.0's `expireIfNeeded`
//! with `masterhost` set): kept until the master's DEL, seen by the
//! master's commands, missing to every other client's reads, on one shard
//! and across shards (MGET, EXISTS, MULTI/EXEC: before, a coordinated
//! command's jobs saw them). A writable replica's own keys with a TTL
//! expire there (Redis's `expireSlaveKeys`). Against redis-server reply
//! for reply (Redis's Tcl integration/replication-3 "Writable replica
//! doesn't return expired keys", "Slave is able to evict keys created in
//! writable slaves"); four layouts for the replica. Every wait has a
//! deadline.

mod common;

use common::{info_field as field, redis_available, wait_for, Layout, RawConn, Server};

/// A master with active expiry off and `replica` following it; returns
/// their raw connections in database 5.
fn pair(master: &Server, replica: &Server) -> (RawConn, RawConn) {
    let (mut m, mut r) = (master.raw(), replica.raw());
    let port = master.port().to_string();
    assert_eq!(r.cmd_str(&["REPLICAOF", "127.0.0.1", &port]), b"+OK\r\n");
    let mut rc = replica.conn();
    wait_for("the replica's link", || {
        field(&mut rc, "replication", "master_link_status") == "up"
    });
    assert_eq!(m.cmd_str(&["DEBUG", "SET-ACTIVE-EXPIRE", "0"]), b"+OK\r\n");
    assert_eq!(m.cmd_str(&["SELECT", "5"]), b"+OK\r\n");
    assert_eq!(r.cmd_str(&["SELECT", "5"]), b"+OK\r\n");
    (m, r)
}

/// What the replica answers about two keys (of two shards: `{a}`, `{b}`)
/// that expired on the master, which deletes neither.
fn hidden(master: &Server, replica: &Server) -> Vec<Vec<u8>> {
    let (mut m, mut r) = pair(master, replica);
    for k in ["k{a}", "k{b}"] {
        assert_eq!(m.cmd_str(&["SET", k, "5", "PX", "10"]), b"+OK\r\n");
    }
    wait_for("the keys replicated and expired", || {
        r.cmd_str(&["DBSIZE"]) == b":2\r\n" && r.cmd_str(&["EXISTS", "k{a}"]) == b":0\r\n"
    });
    let mut got = Vec::new();
    for cmd in [
        &["EXISTS", "k{a}", "k{b}"][..],
        &["MGET", "k{a}", "k{b}"],
        &["GET", "k{b}"],
        &["MULTI"],
        &["GET", "k{a}"],
        &["EXISTS", "k{a}", "k{b}"],
        &["EXEC"],
        &["DBSIZE"],
    ] {
        got.push(r.cmd_str(cmd));
    }
    got
}

fn expired_keys_are_missing_on_a_replica(layout: Layout) {
    let master = Server::tessera(&[
        "--repl-diskless-sync-delay",
        "0",
        "--enable-debug-command",
        "yes",
    ]);
    let replica = layout.tessera(&[]);
    let got = hidden(&master, &replica);
    let want: [&[u8]; 8] = [
        b":0\r\n",
        b"*2\r\n$-1\r\n$-1\r\n",
        b"$-1\r\n",
        b"+OK\r\n",
        b"+QUEUED\r\n",
        b"+QUEUED\r\n",
        b"*2\r\n$-1\r\n:0\r\n",
        b":2\r\n",
    ];
    assert_eq!(got, want);
    if redis_available() {
        let master = Server::redis(&[
            "--repl-diskless-sync-delay",
            "0",
            "--enable-debug-command",
            "yes",
        ]);
        let replica = Server::redis(&[]);
        assert_eq!(hidden(&master, &replica), got, "redis-server's replies");
    }
}

per_layout!(expired_keys_are_missing_on_a_replica);
