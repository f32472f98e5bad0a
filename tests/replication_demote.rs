//! A master made a replica (REPLICAOF host port) answers the clients
//! blocked on it before with Redis's error and closes them (Redis's
//! `disconnectAllBlockedClients`; its Tcl integration/replication "BLPOP
//! followed by role change, issue #2473"): a BLPOP left blocked was
//! served by the new master's RPUSH on this replica only, and the two
//! differed. Clients that block after the change stay blocked and are
//! served by the master's stream. Against redis-server too, reply for
//! reply; in four layouts. Every wait has a deadline.

mod common;

use common::{info_field as field, redis_available, wait_for, Layout, RawConn, Server};

const UNBLOCKED: &[u8] =
    b"-UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)\r\n";

/// `b` (a master with clients blocked on it: BLPOP, BLMOVE, XREAD BLOCK,
/// WAIT) becomes a replica of `a`; returns what a client blocked after
/// that got once `a` wrote (an XREAD served from the stream), after
/// checking every other reply.
fn demote(b: &Server, a: &Server) -> Vec<u8> {
    let mut bc = b.conn();
    let blocking: [&[&str]; 4] = [
        &["BLPOP", "foo", "0"],
        &["BLMOVE", "src{2}", "dst", "LEFT", "RIGHT", "0"],
        &["XREAD", "BLOCK", "0", "STREAMS", "s{1}", "$"],
        &["WAIT", "1", "0"],
    ];
    let mut blocked: Vec<RawConn> = blocking
        .iter()
        .map(|cmd| {
            let mut c = b.raw();
            common::send_str(&mut c, cmd);
            c
        })
        .collect();
    wait_for("four blocked clients", || {
        field(&mut bc, "clients", "blocked_clients") == "4"
    });
    let mut braw = b.raw();
    let port = a.port().to_string();
    assert_eq!(braw.cmd_str(&["REPLICAOF", "127.0.0.1", &port]), b"+OK\r\n");
    for (c, cmd) in blocked.iter_mut().zip(blocking) {
        assert_eq!(c.read_reply(), UNBLOCKED, "{cmd:?}");
        c.read_eof();
    }
    assert_eq!(field(&mut bc, "clients", "blocked_clients"), "0");
    wait_for("the replica's link", || {
        field(&mut bc, "replication", "master_link_status") == "up"
    });
    // Blocked after the change: served by the master's stream.
    let mut reader = b.raw();
    common::send_str(
        &mut reader,
        &["XREAD", "BLOCK", "0", "STREAMS", "s{1}", "$"],
    );
    wait_for("a reader blocked on the replica", || {
        field(&mut bc, "clients", "blocked_clients") == "1"
    });
    let mut araw = a.raw();
    assert_eq!(araw.cmd_str(&["RPUSH", "foo", "a", "b", "c"]), b":3\r\n");
    assert_eq!(araw.cmd_str(&["RPUSH", "src{2}", "x"]), b":1\r\n");
    assert_eq!(
        araw.cmd_str(&["XADD", "s{1}", "7-1", "f", "v"]),
        b"$3\r\n7-1\r\n"
    );
    let got = reader.read_reply();
    for (k, want) in [
        ("foo", "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"),
        ("src{2}", "*1\r\n$1\r\nx\r\n"),
    ] {
        wait_for("the replica's copy", || {
            braw.cmd_str(&["LRANGE", k, "0", "-1"]) == want.as_bytes()
        });
    }
    assert_eq!(braw.cmd_str(&["EXISTS", "dst"]), b":0\r\n");
    got
}

fn blocked_clients_of_a_demoted_master(layout: Layout) {
    let a = Server::tessera(&["--repl-diskless-sync-delay", "0"]);
    let b = layout.tessera(&[]);
    let got = demote(&b, &a);
    assert_eq!(
        got,
        b"*1\r\n*2\r\n$4\r\ns{1}\r\n*1\r\n*2\r\n$3\r\n7-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
    );
    if redis_available() {
        let a = Server::redis(&["--repl-diskless-sync-delay", "0"]);
        let b = Server::redis(&[]);
        assert_eq!(demote(&b, &a), got, "redis-server's replies");
    }
}

per_layout!(blocked_clients_of_a_demoted_master);
