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

/// `scenario` on a Tessera master and a replica in `layout`, then (when
/// redis-server is here) on two redis-servers: both answer `want`.
fn as_redis(layout: Layout, scenario: fn(&Server, &Server) -> Vec<Vec<u8>>, want: &[&[u8]]) {
    let master_args = [
        "--repl-diskless-sync-delay",
        "0",
        "--enable-debug-command",
        "yes",
    ];
    let got = scenario(&Server::tessera(&master_args), &layout.tessera(&[]));
    assert_eq!(got, want);
    if redis_available() {
        let redis = scenario(&Server::redis(&master_args), &Server::redis(&[]));
        assert_eq!(redis, got, "redis-server's replies");
    }
}

fn expired_keys_are_missing_on_a_replica(layout: Layout) {
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
    as_redis(layout, hidden, &want);
}

/// A writable replica: the master's expired keys stay (an INCR makes a
/// new key1 without a TTL, key2 reads missing, both still counted); the
/// replica's own keys with a TTL are deleted when due, by its cron.
fn writable(master: &Server, replica: &Server) -> Vec<Vec<u8>> {
    let (mut m, mut r) = pair(master, replica);
    for k in ["key1", "key2"] {
        assert_eq!(m.cmd_str(&["SET", k, "5", "PX", "10"]), b"+OK\r\n");
    }
    wait_for("the keys replicated and expired", || {
        r.cmd_str(&["DBSIZE"]) == b":2\r\n" && r.cmd_str(&["EXISTS", "key1", "key2"]) == b":0\r\n"
    });
    assert_eq!(
        r.cmd_str(&["CONFIG", "SET", "replica-read-only", "no"]),
        b"+OK\r\n"
    );
    let mut got = Vec::new();
    for cmd in [
        &["INCR", "key1"][..],
        &["TTL", "key1"],
        &["GET", "key2"],
        &["DBSIZE"],
    ] {
        got.push(r.cmd_str(cmd));
    }
    assert_eq!(r.cmd_str(&["SELECT", "6"]), b"+OK\r\n");
    for k in ["own{a}", "own{b}", "own{c}"] {
        assert_eq!(r.cmd_str(&["SET", k, "1", "PX", "300"]), b"+OK\r\n");
    }
    assert_eq!(r.cmd_str(&["SET", "kept", "1"]), b"+OK\r\n");
    got.push(r.cmd_str(&["DBSIZE"]));
    wait_for("the replica's own keys deleted", || {
        r.cmd_str(&["DBSIZE"]) == b":1\r\n"
    });
    got
}

fn a_writable_replica_expires_its_own_keys(layout: Layout) {
    let want: [&[u8]; 5] = [b":1\r\n", b":-1\r\n", b"$-1\r\n", b":2\r\n", b":4\r\n"];
    as_redis(layout, writable, &want);
}

per_layout!(
    expired_keys_are_missing_on_a_replica,
    a_writable_replica_expires_its_own_keys
);
