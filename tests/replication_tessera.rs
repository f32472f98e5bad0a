//! Tessera replicating from Tessera (issue 25): both sides of the
//! protocol are Tessera's own. A replica syncs in full once, follows the
//! stream, and after its link is cut resumes with a partial resync
//! (`+CONTINUE`: `sync_partial_ok` grows, `sync_full` does not) with
//! nothing lost; at 2 and 16 shards (the replica unconsolidated). While
//! the master delays a full sync (`repl-diskless-sync-delay`) the replica
//! waits in ROLE's `handshake` state, kept alive by the master's newlines
//! past its `repl-timeout`, and times out with Redis's log line once the
//! master stops answering (Redis's Tcl integration/replication "Slave
//! enters handshake", "Slave is able to detect timeout during
//! handshake"). Every wait has a deadline.

mod common;

use common::{info_field as field, wait_for as wait_until, Server};

/// The replica has processed everything the master streamed.
fn caught_up(m: &mut redis::Connection, r: &mut redis::Connection) -> bool {
    let off = field(m, "replication", "master_repl_offset");
    field(r, "replication", "master_link_status") == "up"
        && off != "0"
        && field(r, "replication", "slave_repl_offset") == off
}

fn partial_resync_after_a_cut(replica_args: &[&str]) {
    let master = Server::tessera(&["--shards", "2", "--repl-diskless-sync-delay", "0"]);
    let port = master.port().to_string();
    let mut args = vec!["--replicaof", "127.0.0.1", &port];
    args.extend_from_slice(replica_args);
    let replica = Server::tessera(&args);
    let (mut m, mut r) = (master.conn(), replica.conn());
    let (mut mraw, mut rraw) = (master.raw(), replica.raw());
    for i in 0..50 {
        mraw.cmd_str(&["SET", &format!("k{i}"), &i.to_string()]);
    }
    // Writes before the replica's sync may leave the master's offset at 0
    // until its next PING, 10 s apart: one once the link is up moves it.
    wait_until("the replica syncs", || {
        field(&mut r, "replication", "master_link_status") == "up"
    });
    mraw.cmd_str(&["SET", "synced", "1"]);
    wait_until("the replica catches up", || caught_up(&mut m, &mut r));
    assert_eq!(field(&mut m, "stats", "sync_full"), "1");
    assert_eq!(
        mraw.cmd_str(&["CLIENT", "KILL", "TYPE", "replica"]),
        b":1\r\n"
    );
    for i in 50..80 {
        mraw.cmd_str(&["SET", &format!("k{i}"), &i.to_string()]);
    }
    mraw.cmd_str(&["MSET", "a{x}", "1", "b", "2", "c", "3"]);
    wait_until("a partial resync", || {
        field(&mut m, "stats", "sync_partial_ok") == "1" && caught_up(&mut m, &mut r)
    });
    assert_eq!(
        field(&mut m, "stats", "sync_full"),
        "1",
        "no second full sync"
    );
    assert_eq!(rraw.cmd_str(&["DBSIZE"]), mraw.cmd_str(&["DBSIZE"]));
    for i in 0..80 {
        let k = format!("k{i}");
        assert_eq!(
            rraw.cmd_str(&["GET", &k]),
            mraw.cmd_str(&["GET", &k]),
            "{k}"
        );
    }
    assert_eq!(
        rraw.cmd_str(&["MGET", "a{x}", "b", "c"]),
        mraw.cmd_str(&["MGET", "a{x}", "b", "c"])
    );
}

#[test]
fn a_tessera_replica_resumes_with_a_partial_resync() {
    partial_resync_after_a_cut(&["--shards", "2"]);
}

#[test]
fn a_tessera_replica_of_16_threads_resumes_with_a_partial_resync() {
    partial_resync_after_a_cut(&["--shards", "16", "--shard-consolidation", "no"]);
}

/// ROLE's link state and the replica's log, through a delayed sync and a
/// master that stops (SIGSTOP: Redis's test uses DEBUG SLEEP, which here
/// blocks one thread, not the server).
#[test]
fn a_replica_in_the_handshake_waits_then_times_out() {
    let master = Server::tessera(&["--repl-diskless-sync-delay", "1000"]);
    let replica = Server::tessera(&["--repl-timeout", "3"]);
    let mut r = replica.raw();
    let port = master.port().to_string();
    assert_eq!(r.cmd_str(&["REPLICAOF", "127.0.0.1", &port]), b"+OK\r\n");
    let role = |r: &mut common::RawConn| r.cmd_str(&["ROLE"]);
    let handshake =
        format!("*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:{port}\r\n$9\r\nhandshake\r\n:-1\r\n");
    wait_until("the handshake", || role(&mut r) == handshake.as_bytes());
    // Past repl-timeout (3 s): the master's newlines keep it waiting.
    std::thread::sleep(std::time::Duration::from_millis(4500));
    assert_eq!(role(&mut r), handshake.as_bytes());
    assert!(!replica
        .log()
        .contains("Timeout connecting to the MASTER..."));
    let pid = master.pid().expect("the master's pid").to_string();
    let signal = |s: &str| {
        let ok = std::process::Command::new("kill").args([s, &pid]).status();
        assert!(ok.is_ok_and(|st| st.success()), "kill {s}");
    };
    signal("-STOP");
    wait_until("the replica's timeout", || {
        replica
            .log()
            .contains("Timeout connecting to the MASTER...")
    });
    signal("-CONT");
}
