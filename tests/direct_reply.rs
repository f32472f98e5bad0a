//! Direct replies: a connection's lone request for a key of another shard
//! is answered by that shard writing to the socket itself (see
//! `worker::mark_direct`). These tests drive that path and the ones around
//! it: pipelines that start right behind a direct reply, half-closed and
//! dropped connections with a direct reply in flight, and descriptor reuse.
//! Every test runs in each layout of [`common::LAYOUTS`] (2 and 16 shards,
//! consolidated and not; `per_layout!`). Every wait is bounded by the raw
//! connection's reply timeout.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use commands::table::shard_of;
use common::{assert_bytes, encode_command, Layout, RawConn};

/// A key named `{prefix}{n}` on `shard` of `shards`.
fn key_on(shards: usize, shard: usize, prefix: &str) -> String {
    (0..)
        .map(|n| format!("{prefix}{n}"))
        .find(|k| shard_of(k.as_bytes(), shards) == shard)
        .unwrap()
}

fn bulk(v: &str) -> Vec<u8> {
    format!("${}\r\n{}\r\n", v.len(), v).into_bytes()
}

fn one_request_at_a_time_on_both_shards_from_many_connections(layout: Layout) {
    let srv = layout.tessera(&[]);
    let addr = srv.addr();
    // Enough connections that both threads are home to some.
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut c = RawConn::connect(&addr);
                let keys = [
                    key_on(layout.shards, 0, &format!("t{t}a")),
                    key_on(layout.shards, 1, &format!("t{t}b")),
                ];
                for i in 0..400 {
                    let k = &keys[i % 2];
                    let v = format!("{t}-{i}");
                    assert_bytes(&c.cmd_str(&["SET", k, &v]), b"+OK\r\n");
                    assert_bytes(&c.cmd_str(&["GET", k]), &bulk(&v));
                    if i % 10 == 0 {
                        // Right behind a (possibly direct) reply: a
                        // pipeline whose replies wait for nothing else.
                        let mut wire = encode_command(&[b"GET", keys[1].as_bytes()]);
                        wire.extend(encode_command(&[b"GET", keys[0].as_bytes()]));
                        wire.extend(encode_command(&[b"PING"]));
                        c.send(&wire);
                        let r: Vec<Vec<u8>> = c.read_replies(3);
                        assert_eq!(r[2], b"+PONG\r\n");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

fn requests_sent_right_behind_a_reply_are_answered(layout: Layout) {
    // The home thread gets a direct batch back without a wake-up; a request
    // queued behind it must still be answered (the home asks to be woken).
    let srv = layout.tessera(&[]);
    let k0 = key_on(layout.shards, 0, "near");
    let k1 = key_on(layout.shards, 1, "far");
    let mut c = srv.raw();
    assert_bytes(&c.cmd_str(&["SET", &k0, "zero"]), b"+OK\r\n");
    assert_bytes(&c.cmd_str(&["SET", &k1, "one"]), b"+OK\r\n");
    for _ in 0..300 {
        // Two requests in separate writes: the second may arrive while
        // the first is still on the other shard.
        c.send(&encode_command(&[b"GET", k1.as_bytes()]));
        c.send(&encode_command(&[b"GET", k0.as_bytes()]));
        assert_bytes(&c.read_reply(), &bulk("one"));
        assert_bytes(&c.read_reply(), &bulk("zero"));
        c.send(&encode_command(&[b"GET", k0.as_bytes()]));
        c.send(&encode_command(&[b"GET", k1.as_bytes()]));
        assert_bytes(&c.read_reply(), &bulk("zero"));
        assert_bytes(&c.read_reply(), &bulk("one"));
    }
}

fn half_closed_connections_get_their_reply_then_close(layout: Layout) {
    let srv = layout.tessera(&[]);
    let k0 = key_on(layout.shards, 0, "hc");
    let k1 = key_on(layout.shards, 1, "hc");
    let mut c = srv.raw();
    assert_bytes(&c.cmd_str(&["SET", &k0, "a"]), b"+OK\r\n");
    assert_bytes(&c.cmd_str(&["SET", &k1, "b"]), b"+OK\r\n");
    for i in 0..40 {
        let (k, v) = if i % 2 == 0 { (&k0, "a") } else { (&k1, "b") };
        let mut s = std::net::TcpStream::connect(srv.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&encode_command(&[b"GET", k.as_bytes()]))
            .unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut got = Vec::new();
        // read_to_end returns only once the server has closed.
        s.read_to_end(&mut got).unwrap();
        assert_bytes(&got, &bulk(v));
    }
}

fn a_dropped_connection_never_receives_into_a_new_one(layout: Layout) {
    // A client that goes away while the other shard writes its (large)
    // reply: the socket stays open until the batch is back, so the write
    // can never land on a newer connection given the same descriptor.
    let srv = layout.tessera(&[]);
    let big = "x".repeat(2 << 20);
    let mut c = srv.raw();
    let bigs = [
        key_on(layout.shards, 0, "big"),
        key_on(layout.shards, 1, "big"),
    ];
    for k in &bigs {
        assert_bytes(&c.cmd_str(&["SET", k, &big]), b"+OK\r\n");
    }
    assert_bytes(&c.cmd_str(&["SET", "small", "s"]), b"+OK\r\n");
    for i in 0..60 {
        {
            let mut s = std::net::TcpStream::connect(srv.addr()).unwrap();
            s.write_all(&encode_command(&[b"GET", bigs[i % 2].as_bytes()]))
                .unwrap();
            // Dropped unread.
        }
        let mut fresh = srv.raw();
        assert_bytes(&fresh.cmd_str(&["PING"]), b"+PONG\r\n");
        assert_bytes(&fresh.cmd_str(&["GET", "small"]), &bulk("s"));
    }
    assert_bytes(&c.cmd_str(&["PING"]), b"+PONG\r\n");
}

fn big_replies_written_in_part_by_the_other_shard_arrive_whole(layout: Layout) {
    // The shard writes what the socket takes; the home thread writes the
    // rest.
    let srv = layout.tessera(&[]);
    let mut c = srv.raw();
    for (i, shard) in [0, 1, 1, 0].into_iter().enumerate() {
        let k = key_on(layout.shards, shard, &format!("part{i}"));
        let v: String = (0..(3 << 20) + i)
            .map(|j| (b'a' + (j % 26) as u8) as char)
            .collect();
        assert_bytes(&c.cmd_str(&["SET", &k, &v]), b"+OK\r\n");
        assert_bytes(&c.cmd_str(&["GET", &k]), &bulk(&v));
        assert_bytes(
            &c.cmd_str(&["STRLEN", &k]),
            format!(":{}\r\n", v.len()).as_bytes(),
        );
    }
}

/// Enough connections at pipeline 1 that each thread naps between light
/// iterations (`worker::Nap`: 16 active connections per thread) while
/// single-key requests hop, MGETs coordinate both shards, and a blocked
/// BLPOP is served from the other shard's thread: a doorbell lost during a
/// nap would leave a reply unsent and time the read out.
fn forty_clients_at_pipeline_one_get_every_reply_while_threads_nap(layout: Layout) {
    let srv = layout.tessera(&[]);
    let addr = srv.addr();
    let threads: Vec<_> = (0..40)
        .map(|t| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut c = RawConn::connect(&addr);
                let keys = [
                    key_on(layout.shards, 0, &format!("n{t}a")),
                    key_on(layout.shards, 1, &format!("n{t}b")),
                ];
                for i in 0..300 {
                    let k = &keys[i % 2];
                    let v = format!("{t}-{i}");
                    assert_bytes(&c.cmd_str(&["SET", k, &v]), b"+OK\r\n");
                    assert_bytes(&c.cmd_str(&["GET", k]), &bulk(&v));
                    if i % 25 == 0 {
                        let r = c.cmd_str(&["MGET", &keys[0], &keys[1]]);
                        assert!(r.starts_with(b"*2\r\n"), "{r:?}");
                    }
                }
                // Pairs: the even client blocks on a list, the odd one
                // pushes to it (pairs' lists on both shards).
                let list = key_on(layout.shards, (t / 2) % 2, &format!("l{}-", t / 2));
                if t % 2 == 0 {
                    let r = c.cmd_str(&["BLPOP", &list, "10"]);
                    assert_bytes(&r, &[&b"*2\r\n"[..], &bulk(&list), &bulk("x")].concat());
                } else {
                    std::thread::sleep(Duration::from_millis(50));
                    assert_bytes(&c.cmd_str(&["RPUSH", &list, "x"]), b":1\r\n");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

per_layout!(
    one_request_at_a_time_on_both_shards_from_many_connections,
    requests_sent_right_behind_a_reply_are_answered,
    half_closed_connections_get_their_reply_then_close,
    a_dropped_connection_never_receives_into_a_new_one,
    big_replies_written_in_part_by_the_other_shard_arrive_whole,
    forty_clients_at_pipeline_one_get_every_reply_while_threads_nap,
);
