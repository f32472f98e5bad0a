//! Streams end to end: XREAD/XREADGROUP BLOCK woken by XADD from another
//! connection (keys on several shards: each layout of [`common::LAYOUTS`]), `$` resolved when
//! the reader blocks, timeouts, readers failed by XGROUP DESTROY and by
//! the key's deletion, XREAD BLOCK inside MULTI; DUMP/RESTORE with real
//! Redis both ways; RDB and AOF restarts.
//!
//! "Blocked" is observed through CLIENT LIST (flag `b`), never slept on.
//! Validate against Redis: `TESSERA_TEST_BIN=/usr/bin/redis-server cargo
//! test --test stream` (Redis gets no `--shards`).

mod common;

use std::time::{Duration, Instant};

use common::{assert_bytes, testing_real_redis, Layout, RawConn, Server};

use common::{send_str as send, wait_blocked};

/// Tessera in `layout` (the blocking tests run in each of
/// [`common::LAYOUTS`]; `per_layout!`).
fn server(layout: Layout) -> Server {
    layout.tessera(&[])
}

fn server_3() -> Server {
    if testing_real_redis() {
        Server::tessera(&[])
    } else {
        Server::tessera(&["--shards", "3"])
    }
}

/// XREAD BLOCK with `$` on keys of different shards: woken by an XADD
/// to one of them from another connection, served that key only; an
/// entry added before the reader blocked is not served (`$` is resolved
/// when it blocks, not when woken).
fn xread_block_dollar_woken_by_xadd(layout: Layout) {
    let s = server(layout);
    let mut ctl = s.raw();
    let mut r = s.raw();
    ctl.cmd_str(&["XADD", "a", "1-0", "f", "old"]);
    send(
        &mut r,
        &[
            "XREAD", "BLOCK", "0", "STREAMS", "a", "b", "c", "$", "$", "$",
        ],
    );
    wait_blocked(&mut ctl, 1);
    ctl.cmd_str(&["XADD", "c", "5-0", "f", "new"]);
    assert_bytes(
        &r.read_reply(),
        b"*1\r\n*2\r\n$1\r\nc\r\n*1\r\n*2\r\n$3\r\n5-0\r\n*2\r\n$1\r\nf\r\n$3\r\nnew\r\n",
    );
    // An existing stream: only entries after its last ID at block time.
    send(&mut r, &["XREAD", "BLOCK", "0", "STREAMS", "a", "$"]);
    wait_blocked(&mut ctl, 1);
    ctl.cmd_str(&["XADD", "a", "2-0", "f", "x"]);
    assert_bytes(
        &r.read_reply(),
        b"*1\r\n*2\r\n$1\r\na\r\n*1\r\n*2\r\n$3\r\n2-0\r\n*2\r\n$1\r\nf\r\n$1\r\nx\r\n",
    );
}

/// A deleted and recreated stream serves entries after the resolved ID
/// only; a timeout replies a null array.
fn xread_block_timeout_and_recreated_key(layout: Layout) {
    let s = server(layout);
    let mut ctl = s.raw();
    let mut r = s.raw();
    ctl.cmd_str(&["XADD", "k", "3-0", "f", "v"]);
    send(&mut r, &["XREAD", "BLOCK", "0", "STREAMS", "k", "$"]);
    wait_blocked(&mut ctl, 1);
    ctl.cmd_str(&["DEL", "k"]);
    ctl.cmd_str(&["XADD", "k", "2-0", "f", "v"]);
    // Still blocked: 2-0 is not after 3-0.
    wait_blocked(&mut ctl, 1);
    ctl.cmd_str(&["XADD", "k", "4-0", "g", "w"]);
    assert_bytes(
        &r.read_reply(),
        b"*1\r\n*2\r\n$1\r\nk\r\n*1\r\n*2\r\n$3\r\n4-0\r\n*2\r\n$1\r\ng\r\n$1\r\nw\r\n",
    );
    let t0 = Instant::now();
    send(&mut r, &["XREAD", "BLOCK", "50", "STREAMS", "k", "$"]);
    assert_bytes(&r.read_reply(), b"*-1\r\n");
    // The deadline is the millisecond clock read when the command arrives
    // plus 50, as Redis's mstime(): a start late in its millisecond ends
    // up to 1 ms under 50 ms after it (one CI run saw 49.x).
    assert!(t0.elapsed() >= Duration::from_millis(49));
}

/// A blocked XREAD whose key a MULTI turns into a list keeps waiting (no
/// WRONGTYPE; Redis 7.0 serves only the clients blocked for the key's
/// type), and is served by the stream created after (Redis's unit
/// type/stream "XREAD: XADD + DEL + LPUSH should not awake client").
fn xread_block_survives_its_key_becoming_a_list(layout: Layout) {
    let s = server(layout);
    let mut ctl = s.raw();
    let mut r = s.raw();
    send(&mut r, &["XREAD", "BLOCK", "20000", "STREAMS", "s1", "$"]);
    wait_blocked(&mut ctl, 1);
    ctl.cmd_str(&["MULTI"]);
    ctl.cmd_str(&["XADD", "s1", "1-0", "old", "abcd1234"]);
    ctl.cmd_str(&["DEL", "s1"]);
    ctl.cmd_str(&["LPUSH", "s1", "foo", "bar"]);
    ctl.cmd_str(&["EXEC"]);
    wait_blocked(&mut ctl, 1);
    ctl.cmd_str(&["DEL", "s1"]);
    ctl.cmd_str(&["XADD", "s1", "2-0", "new", "abcd1234"]);
    assert_bytes(
        &r.read_reply(),
        b"*1\r\n*2\r\n$2\r\ns1\r\n*1\r\n*2\r\n$3\r\n2-0\r\n*2\r\n$3\r\nnew\r\n$8\r\nabcd1234\r\n",
    );
}

/// XREADGROUP BLOCK `>`: woken by XADD (the entry enters the PEL), failed
/// by XGROUP DESTROY (NOGROUP) and by the key's deletion (UNBLOCKED).
fn xreadgroup_block_woken_and_failed(layout: Layout) {
    let s = server(layout);
    let mut ctl = s.raw();
    let mut r = s.raw();
    assert_bytes(
        &ctl.cmd_str(&["XGROUP", "CREATE", "q", "g", "$", "MKSTREAM"]),
        b"+OK\r\n",
    );
    send(
        &mut r,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "alice",
            "BLOCK",
            "0",
            "STREAMS",
            "q",
            ">",
        ],
    );
    wait_blocked(&mut ctl, 1);
    ctl.cmd_str(&["XADD", "q", "1-0", "f", "v"]);
    assert_bytes(
        &r.read_reply(),
        b"*1\r\n*2\r\n$1\r\nq\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n",
    );
    let p = ctl.cmd_str(&["XPENDING", "q", "g"]);
    assert_bytes(
        &p,
        b"*4\r\n:1\r\n$3\r\n1-0\r\n$3\r\n1-0\r\n*1\r\n*2\r\n$5\r\nalice\r\n$1\r\n1\r\n",
    );
    send(
        &mut r,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "alice",
            "BLOCK",
            "0",
            "STREAMS",
            "q",
            ">",
        ],
    );
    wait_blocked(&mut ctl, 1);
    ctl.cmd_str(&["XGROUP", "DESTROY", "q", "g"]);
    assert_bytes(
        &r.read_reply(),
        b"-NOGROUP the consumer group this client was blocked on no longer exists\r\n",
    );
    ctl.cmd_str(&["XGROUP", "CREATE", "q", "g", "$"]);
    send(
        &mut r,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "alice",
            "BLOCK",
            "0",
            "STREAMS",
            "q",
            ">",
        ],
    );
    wait_blocked(&mut ctl, 1);
    ctl.cmd_str(&["DEL", "q"]);
    assert_bytes(
        &r.read_reply(),
        b"-UNBLOCKED the stream key no longer exists\r\n",
    );
}

/// SWAPDB fails a blocked XREADGROUP whose stream it swaps away or
/// replaces with another type (Redis's `scanDatabaseForDeletedKeys`;
/// before, the reader of a stream swapped away waited for good), and
/// leaves a blocked XREAD waiting, as Redis: only group readers fail.
fn swapdb_fails_group_readers_of_a_stream_it_takes_away(layout: Layout) {
    let s = server(layout);
    let mut ctl = s.raw();
    let mut r = s.raw();
    let read_group = [
        "XREADGROUP",
        "GROUP",
        "g",
        "alice",
        "BLOCK",
        "0",
        "STREAMS",
        "q",
        ">",
    ];
    assert_bytes(&r.cmd_str(&["SELECT", "9"]), b"+OK\r\n");
    // Swapped away for an empty database; then for a list.
    for other in [None, Some("list")] {
        ctl.cmd_str(&["SELECT", "4"]);
        ctl.cmd_str(&["FLUSHDB"]);
        if other.is_some() {
            ctl.cmd_str(&["LPUSH", "q", "e1"]);
        }
        ctl.cmd_str(&["SELECT", "9"]);
        ctl.cmd_str(&["DEL", "q"]);
        ctl.cmd_str(&["XADD", "q", "666", "f", "v"]);
        assert_bytes(
            &ctl.cmd_str(&["XGROUP", "CREATE", "q", "g", "$"]),
            b"+OK\r\n",
        );
        send(&mut r, &read_group);
        wait_blocked(&mut ctl, 1);
        assert_bytes(&ctl.cmd_str(&["SWAPDB", "4", "9"]), b"+OK\r\n");
        assert_bytes(
            &r.read_reply(),
            b"-UNBLOCKED the stream key no longer exists\r\n",
        );
    }
    // A plain XREAD of a stream swapped away keeps waiting, and is served
    // by the next entry in its database.
    ctl.cmd_str(&["SELECT", "4"]);
    ctl.cmd_str(&["FLUSHDB"]);
    ctl.cmd_str(&["SELECT", "9"]);
    ctl.cmd_str(&["DEL", "q"]);
    ctl.cmd_str(&["XADD", "q", "1-0", "f", "v"]);
    send(&mut r, &["XREAD", "BLOCK", "0", "STREAMS", "q", "$"]);
    wait_blocked(&mut ctl, 1);
    assert_bytes(&ctl.cmd_str(&["SWAPDB", "4", "9"]), b"+OK\r\n");
    wait_blocked(&mut ctl, 1);
    ctl.cmd_str(&["XADD", "q", "7-0", "f", "new"]);
    assert_bytes(
        &r.read_reply(),
        b"*1\r\n*2\r\n$1\r\nq\r\n*1\r\n*2\r\n$3\r\n7-0\r\n*2\r\n$1\r\nf\r\n$3\r\nnew\r\n",
    );
}

/// Inside MULTI, XREAD BLOCK does not block: a null array at once.
fn xread_block_in_multi_does_not_block(layout: Layout) {
    let s = server(layout);
    let mut c = s.raw();
    c.cmd_str(&["MULTI"]);
    c.cmd_str(&["XREAD", "BLOCK", "0", "STREAMS", "m", "$"]);
    assert_bytes(&c.cmd_str(&["EXEC"]), b"*1\r\n*-1\r\n");
}

/// DUMP payloads: Tessera's for a stream with groups equal Redis's after
/// the same commands (no time-dependent fields: a group without readers),
/// and each loads the other's.
#[test]
fn dump_restore_with_real_redis() {
    if !common::redis_available() || testing_real_redis() {
        return;
    }
    let t = server_3();
    let r = Server::redis(&[]);
    let mut tc = t.raw();
    let mut rc = r.raw();
    let script: &[&[&str]] = &[
        &["XADD", "s", "1-1", "a", "1", "b", "2"],
        &["XADD", "s", "1-2", "a", "3", "b", "4"],
        &["XADD", "s", "2-0", "c", "3"],
        &[
            "XADD",
            "s",
            "3-0",
            "long",
            "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        ],
        &["XDEL", "s", "1-2"],
        &["XGROUP", "CREATE", "s", "g", "0"],
        &["XGROUP", "CREATE", "s", "h", "$", "ENTRIESREAD", "3"],
    ];
    for cmd in script {
        assert_bytes(&tc.cmd_str(cmd), &rc.cmd_str(cmd));
    }
    for i in 0..250 {
        let id = format!("{}-0", 10 + i);
        let v = format!("v{i}");
        assert_bytes(
            &tc.cmd_str(&["XADD", "big", &id, "f", &v]),
            &rc.cmd_str(&["XADD", "big", &id, "f", &v]),
        );
    }
    for k in ["s", "big"] {
        let td = tc.cmd_str(&["DUMP", k]);
        let rd = rc.cmd_str(&["DUMP", k]);
        assert_bytes(&td, &rd);
    }
    // Each side restores the other's payload (a copy under a new name).
    let cross = |from: &mut RawConn, to: &mut RawConn| {
        let d = from.cmd(&[b"DUMP", b"s"]);
        let payload = bulk_body(&d);
        assert_bytes(&to.cmd(&[b"RESTORE", b"s2", b"0", &payload]), b"+OK\r\n");
        assert_bytes(
            &to.cmd_str(&["XRANGE", "s2", "-", "+"]),
            &to.cmd_str(&["XRANGE", "s", "-", "+"]),
        );
        to.cmd_str(&["DEL", "s2"]);
    };
    cross(&mut tc, &mut rc);
    cross(&mut rc, &mut tc);
}

/// The body of a bulk reply `$<n>\r\n<body>\r\n`.
fn bulk_body(reply: &[u8]) -> Vec<u8> {
    let nl = reply.iter().position(|&b| b == b'\n').unwrap_or(0);
    reply[nl + 1..reply.len() - 2].to_vec()
}

/// A stream with groups survives SAVE and a restart, and an AOF restart.
#[test]
fn stream_survives_restart() {
    for aof in [false, true] {
        let dir = common::unique_temp_dir("stream-restart");
        let d = dir.to_str().unwrap_or_default().to_string();
        let mut args = vec!["--dir", d.as_str(), "--save", ""];
        if aof {
            args.extend(["--appendonly", "yes", "--appendfsync", "always"]);
        }
        let before;
        {
            let s = Server::tessera(&args);
            let mut c = s.raw();
            c.cmd_str(&["XADD", "s", "*", "a", "1"]);
            c.cmd_str(&["XADD", "s", "MAXLEN", "~", "1", "*", "b", "2"]);
            c.cmd_str(&["XADD", "s", "5000000000000-*", "c", "3"]);
            c.cmd_str(&["XGROUP", "CREATE", "s", "g", "0"]);
            c.cmd_str(&[
                "XREADGROUP",
                "GROUP",
                "g",
                "alice",
                "COUNT",
                "2",
                "STREAMS",
                "s",
                ">",
            ]);
            c.cmd_str(&[
                "XREADGROUP",
                "GROUP",
                "g",
                "bob",
                "NOACK",
                "STREAMS",
                "s",
                ">",
            ]);
            c.cmd_str(&["XCLAIM", "s", "g", "carol", "0", "5000000000000-0"]);
            before = (
                c.cmd_str(&["XRANGE", "s", "-", "+"]),
                c.cmd_str(&["XPENDING", "s", "g", "-", "+", "10"]),
                c.cmd_str(&["XINFO", "GROUPS", "s"]),
            );
            if !aof {
                assert_bytes(&c.cmd_str(&["SAVE"]), b"+OK\r\n");
            }
        }
        let s = Server::tessera(&args);
        let mut c = s.raw();
        assert_bytes(&c.cmd_str(&["XRANGE", "s", "-", "+"]), &before.0);
        // Idle times in XPENDING differ: compare the IDs and owners.
        let p = String::from_utf8_lossy(&c.cmd_str(&["XPENDING", "s", "g", "-", "+", "10"]))
            .to_string();
        let b = String::from_utf8_lossy(&before.1).to_string();
        let owners = |x: &str| -> Vec<String> {
            x.split("\r\n")
                .filter(|l| !l.starts_with(':'))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(owners(&p), owners(&b), "aof={aof}");
        assert_bytes(&c.cmd_str(&["XINFO", "GROUPS", "s"]), &before.2);
    }
}

per_layout!(
    xread_block_dollar_woken_by_xadd,
    xread_block_timeout_and_recreated_key,
    xreadgroup_block_woken_and_failed,
    xread_block_in_multi_does_not_block,
    xread_block_survives_its_key_becoming_a_list,
    swapdb_fails_group_readers_of_a_stream_it_takes_away,
);
