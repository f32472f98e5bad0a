//! Blocked clients (issue 4): BLPOP & co. wait without blocking their
//! thread or shard, are served in FIFO order by a push from any connection
//! (on any thread), a MULTI/EXEC or an LMOVE, and end on timeout, CLIENT
//! UNBLOCK or disconnect exactly as in Redis — no element is lost or
//! served twice.
//!
//! "Blocked" is observed, never slept on: a test waits until CLIENT LIST
//! shows the expected number of clients with the `b` flag (bounded by
//! the harness's reply timeout). No timing thresholds: a timeout test only checks that
//! the reply is the timeout reply and came after the requested time.
//!
//! Every test runs in each layout of [`common::LAYOUTS`] (2 and 16 shards,
//! consolidated and not; `per_layout!`).
//!
//! Validate against Redis: `TESSERA_TEST_BIN=/usr/bin/redis-server cargo
//! test --test blocking` (Redis gets no `--shards`).

mod common;

use std::time::{Duration, Instant};

use common::{assert_bytes, encode_command, Layout, RawConn, Server};

use common::{send_str as send, wait_blocked};

/// Tessera in `layout` (every test runs in each of [`common::LAYOUTS`]).
fn server(layout: Layout) -> Server {
    layout.tessera(&[])
}

/// Asserts nothing arrives on `c` for a short while.
fn assert_silent(c: &mut RawConn) {
    c.set_reply_timeout(Duration::from_millis(100));
    let r = c.try_read_reply();
    assert!(
        r.is_err(),
        "unexpected reply: {:?}",
        r.map(|b| String::from_utf8_lossy(&b).into_owned())
    );
    c.set_reply_timeout(Duration::from_secs(10));
}

fn push_from_another_connection_serves_a_blocked_pop(layout: Layout) {
    let s = server(layout);
    let mut ctl = s.raw();
    // Several keys, so with several shards the waiter's key, the waiter's home
    // thread and the pusher's home thread differ in some combination.
    for key in ["k1", "k2", "k3", "k4", "k5"] {
        let mut waiter = s.raw();
        send(&mut waiter, &["BLPOP", key, "0"]);
        wait_blocked(&mut ctl, 1);
        assert_silent(&mut waiter);
        let mut pusher = s.raw();
        assert_bytes(&pusher.cmd_str(&["RPUSH", key, "a", "b"]), b":2\r\n");
        let want = format!("*2\r\n${}\r\n{key}\r\n$1\r\na\r\n", key.len());
        assert_bytes(&waiter.read_reply(), want.as_bytes());
        assert_bytes(
            &pusher.cmd_str(&["LRANGE", key, "0", "-1"]),
            b"*1\r\n$1\r\nb\r\n",
        );
        wait_blocked(&mut ctl, 0);
    }
}

fn blocked_clients_are_served_in_fifo_order(layout: Layout) {
    let s = server(layout);
    let mut ctl = s.raw();
    let mut waiters: Vec<RawConn> = (0..3).map(|_| s.raw()).collect();
    for (i, w) in waiters.iter_mut().enumerate() {
        send(w, &["BRPOP", "q", "0"]);
        wait_blocked(&mut ctl, i + 1);
    }
    // One push of three elements serves all three, oldest first; BRPOP
    // pops from the right, RPUSH appends, so the list is consumed a, b, c
    // from its right end: c, b, a.
    assert_bytes(&ctl.cmd_str(&["LPUSH", "q", "c", "b", "a"]), b":3\r\n");
    for (w, v) in waiters.iter_mut().zip(["c", "b", "a"]) {
        let want = format!("*2\r\n$1\r\nq\r\n$1\r\n{v}\r\n");
        assert_bytes(&w.read_reply(), want.as_bytes());
    }
    assert_bytes(&ctl.cmd_str(&["EXISTS", "q"]), b":0\r\n");
}

fn a_push_serves_only_as_many_as_it_pushed(layout: Layout) {
    let s = server(layout);
    let mut ctl = s.raw();
    let mut a = s.raw();
    let mut b = s.raw();
    send(&mut a, &["BLPOP", "one", "0"]);
    wait_blocked(&mut ctl, 1);
    send(&mut b, &["BLPOP", "one", "0"]);
    wait_blocked(&mut ctl, 2);
    let info = String::from_utf8(ctl.cmd_str(&["INFO", "clients"])).unwrap();
    assert!(info.contains("blocked_clients:2\r\n"), "{info}");
    assert_bytes(&ctl.cmd_str(&["RPUSH", "one", "x"]), b":1\r\n");
    assert_bytes(&a.read_reply(), b"*2\r\n$3\r\none\r\n$1\r\nx\r\n");
    wait_blocked(&mut ctl, 1);
    assert_silent(&mut b);
    assert_bytes(&ctl.cmd_str(&["RPUSH", "one", "y"]), b":1\r\n");
    assert_bytes(&b.read_reply(), b"*2\r\n$3\r\none\r\n$1\r\ny\r\n");
}

fn timeout_replies_null_after_the_timeout(layout: Layout) {
    let s = server(layout);
    let mut c = s.raw();
    let t = Instant::now();
    assert_bytes(&c.cmd_str(&["BLPOP", "none", "0.2"]), b"*-1\r\n");
    assert!(
        t.elapsed() >= Duration::from_millis(190),
        "{:?}",
        t.elapsed()
    );
    let t = Instant::now();
    // A blocked BLMOVE times out with a null array too (Redis 7.0), while
    // inside MULTI it answers a null bulk.
    assert_bytes(
        &c.cmd_str(&["BLMOVE", "none", "dst", "LEFT", "RIGHT", "0.1"]),
        b"*-1\r\n",
    );
    assert!(
        t.elapsed() >= Duration::from_millis(90),
        "{:?}",
        t.elapsed()
    );
    // RESP3: the null type for both.
    c.cmd_str(&["HELLO", "3"]);
    assert_bytes(&c.cmd_str(&["BRPOP", "none", "0.05"]), b"_\r\n");
    assert_bytes(&c.cmd_str(&["BZPOPMIN", "none", "0.05"]), b"_\r\n");
    // The connection works normally afterwards.
    assert_bytes(&c.cmd_str(&["PING"]), b"+PONG\r\n");
}

fn commands_pipelined_behind_a_blocked_one_wait_for_it(layout: Layout) {
    let s = server(layout);
    let mut ctl = s.raw();
    let mut c = s.raw();
    let mut bytes = encode_command(&[b"BLPOP", b"pipe", b"0"]);
    bytes.extend(encode_command(&[b"SET", b"after", b"1"]));
    bytes.extend(encode_command(&[b"PING"]));
    c.send(&bytes);
    wait_blocked(&mut ctl, 1);
    assert_silent(&mut c);
    assert_bytes(&ctl.cmd_str(&["EXISTS", "after"]), b":0\r\n");
    assert_bytes(&ctl.cmd_str(&["RPUSH", "pipe", "v"]), b":1\r\n");
    assert_bytes(&c.read_reply(), b"*2\r\n$4\r\npipe\r\n$1\r\nv\r\n");
    assert_bytes(&c.read_reply(), b"+OK\r\n");
    assert_bytes(&c.read_reply(), b"+PONG\r\n");
}

fn inside_multi_blocking_commands_do_not_block(layout: Layout) {
    let s = server(layout);
    let mut c = s.raw();
    assert_bytes(&c.cmd_str(&["MULTI"]), b"+OK\r\n");
    assert_bytes(&c.cmd_str(&["BLPOP", "m", "0"]), b"+QUEUED\r\n");
    assert_bytes(
        &c.cmd_str(&["BLMOVE", "m", "d", "LEFT", "LEFT", "0"]),
        b"+QUEUED\r\n",
    );
    assert_bytes(&c.cmd_str(&["BZPOPMAX", "z", "0"]), b"+QUEUED\r\n");
    assert_bytes(&c.cmd_str(&["EXEC"]), b"*3\r\n*-1\r\n$-1\r\n*-1\r\n");
}

fn a_transaction_push_serves_a_blocked_client_after_exec(layout: Layout) {
    let s = server(layout);
    let mut ctl = s.raw();
    let mut w = s.raw();
    send(&mut w, &["BLPOP", "tx", "0"]);
    wait_blocked(&mut ctl, 1);
    assert_bytes(&ctl.cmd_str(&["MULTI"]), b"+OK\r\n");
    assert_bytes(&ctl.cmd_str(&["RPUSH", "tx", "a", "b"]), b"+QUEUED\r\n");
    assert_bytes(&ctl.cmd_str(&["LPOP", "tx"]), b"+QUEUED\r\n");
    // Inside the transaction nobody is served: the LPOP sees "a".
    assert_bytes(&ctl.cmd_str(&["EXEC"]), b"*2\r\n:2\r\n$1\r\na\r\n");
    assert_bytes(&w.read_reply(), b"*2\r\n$2\r\ntx\r\n$1\r\nb\r\n");
}

fn blmove_and_lmove_into_a_waited_key_serve_it(layout: Layout) {
    let s = server(layout);
    let mut ctl = s.raw();
    let mut w = s.raw();
    // Same hash tag: one shard.
    send(
        &mut w,
        &["BLMOVE", "{t}src", "{t}dst", "RIGHT", "LEFT", "0"],
    );
    wait_blocked(&mut ctl, 1);
    let mut w2 = s.raw();
    send(&mut w2, &["BLPOP", "{t}dst", "0"]);
    wait_blocked(&mut ctl, 2);
    // The push into src serves the BLMOVE, whose push into dst serves the
    // BLPOP.
    assert_bytes(&ctl.cmd_str(&["RPUSH", "{t}src", "v"]), b":1\r\n");
    assert_bytes(&w.read_reply(), b"$1\r\nv\r\n");
    assert_bytes(&w2.read_reply(), b"*2\r\n$6\r\n{t}dst\r\n$1\r\nv\r\n");
    assert_bytes(&ctl.cmd_str(&["EXISTS", "{t}src", "{t}dst"]), b":0\r\n");
}

fn zadd_serves_bzpopmin(layout: Layout) {
    let s = server(layout);
    let mut ctl = s.raw();
    let mut w = s.raw();
    send(&mut w, &["BZPOPMIN", "zq", "0"]);
    wait_blocked(&mut ctl, 1);
    assert_bytes(&ctl.cmd_str(&["ZADD", "zq", "2", "b", "1", "a"]), b":2\r\n");
    assert_bytes(&w.read_reply(), b"*3\r\n$2\r\nzq\r\n$1\r\na\r\n$1\r\n1\r\n");
    assert_bytes(&ctl.cmd_str(&["ZCARD", "zq"]), b":1\r\n");
}

fn a_key_of_another_type_does_not_serve(layout: Layout) {
    let s = server(layout);
    let mut ctl = s.raw();
    let mut w = s.raw();
    send(&mut w, &["BLPOP", "ty", "0"]);
    wait_blocked(&mut ctl, 1);
    assert_bytes(&ctl.cmd_str(&["SET", "ty", "str"]), b"+OK\r\n");
    assert_silent(&mut w);
    assert_bytes(&ctl.cmd_str(&["DEL", "ty"]), b":1\r\n");
    assert_bytes(&ctl.cmd_str(&["RPUSH", "ty", "x"]), b":1\r\n");
    assert_bytes(&w.read_reply(), b"*2\r\n$2\r\nty\r\n$1\r\nx\r\n");
}

fn a_disconnected_waiter_loses_nothing(layout: Layout) {
    let s = server(layout);
    let mut ctl = s.raw();
    {
        let mut w = s.raw();
        send(&mut w, &["BLPOP", "gone", "0"]);
        wait_blocked(&mut ctl, 1);
    }
    wait_blocked(&mut ctl, 0);
    assert_bytes(&ctl.cmd_str(&["RPUSH", "gone", "kept"]), b":1\r\n");
    assert_bytes(
        &ctl.cmd_str(&["LRANGE", "gone", "0", "-1"]),
        b"*1\r\n$4\r\nkept\r\n",
    );
}

fn client_unblock_ends_a_blocked_command(layout: Layout) {
    let s = server(layout);
    let mut ctl = s.raw();
    let mut w = s.raw();
    let id = String::from_utf8(w.cmd_str(&["CLIENT", "ID"])).unwrap();
    let id = id.trim_start_matches(':').trim().to_string();
    send(&mut w, &["BLPOP", "u", "0"]);
    wait_blocked(&mut ctl, 1);
    assert_bytes(&ctl.cmd_str(&["CLIENT", "UNBLOCK", &id]), b":1\r\n");
    assert_bytes(&w.read_reply(), b"*-1\r\n");
    assert_bytes(&ctl.cmd_str(&["CLIENT", "UNBLOCK", &id]), b":0\r\n");
    // Same hash tag: a BLMOVE whose destination is on another shard does
    // not block (see `commands::scratch`).
    send(&mut w, &["BLMOVE", "u", "{u}v", "LEFT", "LEFT", "0"]);
    wait_blocked(&mut ctl, 1);
    assert_bytes(
        &ctl.cmd_str(&["CLIENT", "UNBLOCK", &id, "ERROR"]),
        b":1\r\n",
    );
    assert_bytes(
        &w.read_reply(),
        b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n",
    );
    assert_bytes(
        &ctl.cmd_str(&["CLIENT", "UNBLOCK", "123456", "TIMEOUT"]),
        b":0\r\n",
    );
    // Nothing was popped by the unblocked commands.
    assert_bytes(&ctl.cmd_str(&["RPUSH", "u", "x"]), b":1\r\n");
    assert_bytes(&ctl.cmd_str(&["LLEN", "u"]), b":1\r\n");
}

/// Redis 7.0.15 counts a command ended by CLIENT UNBLOCK as a failed call,
/// with or without ERROR, and the ERROR reply in errorstats and
/// total_error_replies (Redis's Tcl unit/info 'errorstats: blocking
/// commands'; the figures are redis-server's for this sequence).
fn client_unblock_counts_in_the_statistics(layout: Layout) {
    let s = server(layout);
    let mut ctl = s.raw();
    let mut w = s.raw();
    let id = String::from_utf8(w.cmd_str(&["CLIENT", "ID"])).unwrap();
    let id = id.trim_start_matches(':').trim().to_string();
    assert_bytes(&ctl.cmd_str(&["CONFIG", "RESETSTAT"]), b"+OK\r\n");
    send(&mut w, &["BLPOP", "st", "0"]);
    wait_blocked(&mut ctl, 1);
    assert_bytes(
        &ctl.cmd_str(&["CLIENT", "UNBLOCK", &id, "ERROR"]),
        b":1\r\n",
    );
    assert_bytes(
        &w.read_reply(),
        b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n",
    );
    send(&mut w, &["BLPOP", "st", "0"]);
    wait_blocked(&mut ctl, 1);
    assert_bytes(&ctl.cmd_str(&["CLIENT", "UNBLOCK", &id]), b":1\r\n");
    assert_bytes(&w.read_reply(), b"*-1\r\n");
    let info = String::from_utf8(ctl.cmd_str(&["INFO", "all"])).unwrap();
    assert!(info.contains("errorstat_UNBLOCKED:count=1\r\n"), "{info}");
    assert!(info.contains("total_error_replies:1\r\n"), "{info}");
    assert!(
        info.contains("cmdstat_blpop:calls=2,")
            && info.contains(",rejected_calls=0,failed_calls=2\r\n"),
        "{info}"
    );
}

fn many_waiters_many_keys_every_element_served_once(layout: Layout) {
    let s = server(layout);
    let mut ctl = s.raw();
    let keys: Vec<String> = (0..6).map(|i| format!("mk{i}")).collect();
    let mut waiters = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        for _ in 0..3 {
            let mut w = s.raw();
            send(&mut w, &["BLPOP", k, "0"]);
            waiters.push((i, w));
        }
    }
    wait_blocked(&mut ctl, waiters.len());
    // Pushes from several connections (several home threads).
    let mut pushers: Vec<RawConn> = (0..3).map(|_| s.raw()).collect();
    for (i, k) in keys.iter().enumerate() {
        let p = &mut pushers[i % 3];
        for j in 0..3 {
            p.cmd_str(&["RPUSH", k, &format!("{i}-{j}")]);
        }
    }
    let mut got = Vec::new();
    for (i, w) in waiters.iter_mut() {
        let r = String::from_utf8(w.read_reply()).unwrap();
        assert!(r.contains(&format!("mk{i}")), "{r}");
        got.push(r.rsplit("\r\n").nth(1).unwrap().to_string());
    }
    got.sort();
    let mut want: Vec<String> = (0..6)
        .flat_map(|i| (0..3).map(move |j| format!("{i}-{j}")))
        .collect();
    want.sort();
    assert_eq!(got, want);
    for k in &keys {
        assert_bytes(&ctl.cmd_str(&["EXISTS", k]), b":0\r\n");
    }
}

fn a_pop_waiting_on_keys_of_several_shards_is_served_once(layout: Layout) {
    let s = server(layout);
    let mut ctl = s.raw();
    let keys = ["ma", "mb", "mc", "md", "me", "mf"];
    for (round, served) in keys.iter().enumerate() {
        let mut w = s.raw();
        let mut args = vec!["BLPOP"];
        args.extend(keys);
        args.push("0");
        send(&mut w, &args);
        wait_blocked(&mut ctl, 1);
        assert_silent(&mut w);
        assert_bytes(&ctl.cmd_str(&["RPUSH", served, "v"]), b":1\r\n");
        let want = format!("*2\r\n$2\r\n{served}\r\n$1\r\nv\r\n");
        assert_bytes(&w.read_reply(), want.as_bytes());
        wait_blocked(&mut ctl, 0);
        // Served once: a second push stays in the list.
        assert_bytes(&ctl.cmd_str(&["RPUSH", served, "w"]), b":1\r\n");
        assert_bytes(&ctl.cmd_str(&["LLEN", served]), b":1\r\n");
        assert_bytes(&ctl.cmd_str(&["DEL", served]), b":1\r\n");
        // BZMPOP over several keys, timing out.
        if round == 0 {
            let t = Instant::now();
            let mut z = vec!["BZMPOP", "0.1", "6"];
            z.extend(keys);
            z.push("MIN");
            assert_bytes(&w.cmd_str(&z), b"*-1\r\n");
            assert!(t.elapsed() >= Duration::from_millis(90));
        }
    }
}

fn blmove_between_shards_blocks_and_moves(layout: Layout) {
    let s = server(layout);
    let mut ctl = s.raw();
    // Several pairs, so with several shards most cross shards.
    for (src, dst) in [("xa", "xb"), ("xc", "xd"), ("xe", "xf"), ("xg", "xh")] {
        let mut w = s.raw();
        send(&mut w, &["BLMOVE", src, dst, "LEFT", "RIGHT", "0"]);
        wait_blocked(&mut ctl, 1);
        assert_silent(&mut w);
        assert_bytes(&ctl.cmd_str(&["RPUSH", dst, "old"]), b":1\r\n");
        // A push into the destination does not serve it.
        assert_silent(&mut w);
        assert_bytes(&ctl.cmd_str(&["RPUSH", src, "v1", "v2"]), b":2\r\n");
        assert_bytes(&w.read_reply(), b"$2\r\nv1\r\n");
        wait_blocked(&mut ctl, 0);
        assert_bytes(
            &ctl.cmd_str(&["LRANGE", dst, "0", "-1"]),
            b"*2\r\n$3\r\nold\r\n$2\r\nv1\r\n",
        );
        assert_bytes(
            &ctl.cmd_str(&["LRANGE", src, "0", "-1"]),
            b"*1\r\n$2\r\nv2\r\n",
        );
        // And it times out like any other.
        assert_bytes(
            &w.cmd_str(&["BRPOPLPUSH", &format!("{src}-none"), dst, "0.05"]),
            b"*-1\r\n",
        );
    }
}

fn replies_before_a_blocked_command_are_not_held_back(layout: Layout) {
    let s = server(layout);
    let mut ctl = s.raw();
    // Several keys, so the blocked one lives on this connection's shard
    // for some and on another shard for others.
    for key in ["r1", "r2", "r3", "r4"] {
        let mut c = s.raw();
        let mut bytes = encode_command(&[b"SET", b"before", b"1"]);
        bytes.extend(encode_command(&[b"MGET", b"a", b"b", b"c", b"d"]));
        bytes.extend(encode_command(&[b"BLPOP", key.as_bytes(), b"0"]));
        c.send(&bytes);
        assert_bytes(&c.read_reply(), b"+OK\r\n");
        assert_bytes(&c.read_reply(), b"*4\r\n$-1\r\n$-1\r\n$-1\r\n$-1\r\n");
        wait_blocked(&mut ctl, 1);
        assert_bytes(&ctl.cmd_str(&["RPUSH", key, "x"]), b":1\r\n");
        let want = format!("*2\r\n$2\r\n{key}\r\n$1\r\nx\r\n");
        assert_bytes(&c.read_reply(), want.as_bytes());
    }
}

/// A key on shard `shard` of `layout` (the server's own `shard_of`), named
/// `prefix` plus a number.
fn key_on(prefix: &str, shard: usize, layout: Layout) -> String {
    (0..10_000)
        .map(|n| format!("{prefix}{n}"))
        .find(|k| commands::table::shard_of(k.as_bytes(), layout.shards) == shard)
        .expect("a key on every shard")
}

/// Issue 21: the oldest waiter is served first even when it moves into
/// another shard (its home thread runs it again) and the next one could be
/// served on the spot. The reply came to the second waiter before.
fn a_waiter_moving_across_shards_keeps_its_turn(layout: Layout) {
    let s = server(layout);
    let mut ctl = s.raw();
    let src = key_on("src", 0, layout);
    let (far, near) = (key_on("far", 1, layout), key_on("near", 0, layout));
    let mut first = s.raw();
    send(&mut first, &["BLMOVE", &src, &far, "LEFT", "RIGHT", "0"]);
    wait_blocked(&mut ctl, 1);
    let mut second = s.raw();
    send(&mut second, &["BRPOPLPUSH", &src, &near, "0"]);
    wait_blocked(&mut ctl, 2);
    assert_bytes(&ctl.cmd_str(&["LPUSH", &src, "z"]), b":1\r\n");
    assert_bytes(&first.read_reply(), b"$1\r\nz\r\n");
    assert_silent(&mut second);
    assert_bytes(&ctl.cmd_str(&["LPUSH", &src, "y"]), b":1\r\n");
    assert_bytes(&second.read_reply(), b"$1\r\ny\r\n");
    wait_blocked(&mut ctl, 0);
    assert_bytes(
        &ctl.cmd_str(&["LRANGE", &far, "0", "-1"]),
        b"*1\r\n$1\r\nz\r\n",
    );
}

/// Issue 21: a waiter is served from the key that became ready, whatever
/// its other keys hold now (Redis 7.0's serveClientsBlockedOnKey): a key
/// of another type created meanwhile does not make it WRONGTYPE.
fn a_waiter_is_served_from_the_ready_key_only(layout: Layout) {
    let s = server(layout);
    let mut ctl = s.raw();
    let mut w = s.raw();
    send(&mut w, &["BZPOPMIN", "rz1", "rs", "rz2", "0"]);
    wait_blocked(&mut ctl, 1);
    assert_bytes(&ctl.cmd_str(&["SET", "rs", "x"]), b"+OK\r\n");
    assert_bytes(&ctl.cmd_str(&["ZADD", "rz2", "1", "m"]), b":1\r\n");
    assert_bytes(
        &w.read_reply(),
        b"*3\r\n$3\r\nrz2\r\n$1\r\nm\r\n$1\r\n1\r\n",
    );
    let mut w = s.raw();
    send(&mut w, &["BLPOP", "rl1", "rs2", "rl2", "0"]);
    wait_blocked(&mut ctl, 1);
    assert_bytes(&ctl.cmd_str(&["SET", "rs2", "x"]), b"+OK\r\n");
    assert_bytes(&ctl.cmd_str(&["RPUSH", "rl2", "v"]), b":1\r\n");
    assert_bytes(&w.read_reply(), b"*2\r\n$3\r\nrl2\r\n$1\r\nv\r\n");
}

per_layout!(
    push_from_another_connection_serves_a_blocked_pop,
    blocked_clients_are_served_in_fifo_order,
    a_push_serves_only_as_many_as_it_pushed,
    timeout_replies_null_after_the_timeout,
    commands_pipelined_behind_a_blocked_one_wait_for_it,
    inside_multi_blocking_commands_do_not_block,
    a_transaction_push_serves_a_blocked_client_after_exec,
    blmove_and_lmove_into_a_waited_key_serve_it,
    zadd_serves_bzpopmin,
    a_key_of_another_type_does_not_serve,
    a_disconnected_waiter_loses_nothing,
    client_unblock_ends_a_blocked_command,
    client_unblock_counts_in_the_statistics,
    many_waiters_many_keys_every_element_served_once,
    a_pop_waiting_on_keys_of_several_shards_is_served_once,
    blmove_between_shards_blocks_and_moves,
    replies_before_a_blocked_command_are_not_held_back,
    a_waiter_moving_across_shards_keeps_its_turn,
    a_waiter_is_served_from_the_ready_key_only,
);
