//! Pub/Sub across threads (issue 22): exact receiver counts, per-publisher
//! order, visibility of a subscription as soon as it is acknowledged, and a
//! subscriber that stops reading cut off at its output buffer limit while
//! everyone else gets every message. Byte-exact replies are in
//! `tests/diff/pubsub.txt`; real clients in `tests/clients.rs`.
//!
//! The fan-out, visibility and ordering tests run in each layout of
//! [`common::LAYOUTS`] (2 and 16 shards, consolidated and not;
//! `per_layout!`); the others run their shards on separate threads
//! (`shard-consolidation no`), so subscribers and publishers sit on
//! different threads. Every reply has the harness's deadline; loops are
//! bounded by counts.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{encode_command, testing_real_redis, Layout, RawConn, Server};

fn server(shards: usize, consolidation: bool) -> Server {
    Layout::new(shards, consolidation).tessera(&[])
}

fn message(channel: &str, payload: &str) -> Vec<u8> {
    format!(
        "*3\r\n$7\r\nmessage\r\n${}\r\n{channel}\r\n${}\r\n{payload}\r\n",
        channel.len(),
        payload.len()
    )
    .into_bytes()
}

fn pmessage(pattern: &str, channel: &str, payload: &str) -> Vec<u8> {
    format!(
        "*4\r\n$8\r\npmessage\r\n${}\r\n{pattern}\r\n${}\r\n{channel}\r\n${}\r\n{payload}\r\n",
        pattern.len(),
        channel.len(),
        payload.len()
    )
    .into_bytes()
}

/// Subscribers on every thread get every message, in publish order, and
/// PUBLISH counts them exactly.
fn fan_out(layout: Layout) {
    const CHANNEL_SUBS: usize = 8;
    const PATTERN_SUBS: usize = 4;
    const MESSAGES: usize = 300;
    let s = layout.tessera(&[]);
    let mut subs: Vec<RawConn> = (0..CHANNEL_SUBS).map(|_| s.raw()).collect();
    for c in &mut subs {
        assert_eq!(
            c.cmd_str(&["SUBSCRIBE", "news"]),
            b"*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n"
        );
    }
    let mut psubs: Vec<RawConn> = (0..PATTERN_SUBS).map(|_| s.raw()).collect();
    for c in &mut psubs {
        assert_eq!(
            c.cmd_str(&["PSUBSCRIBE", "n*"]),
            b"*3\r\n$10\r\npsubscribe\r\n$2\r\nn*\r\n:1\r\n"
        );
    }
    let mut publisher = s.raw();
    let want = format!(":{}\r\n", CHANNEL_SUBS + PATTERN_SUBS);
    // Pipelined in bursts, so deliveries from one publisher overlap.
    for burst in 0..MESSAGES / 50 {
        let mut bytes = Vec::new();
        for i in burst * 50..(burst + 1) * 50 {
            let p = format!("m{i}");
            bytes.extend(encode_command(&[b"PUBLISH", b"news", p.as_bytes()]));
        }
        publisher.send(&bytes);
        for _ in 0..50 {
            assert_eq!(publisher.read_reply(), want.as_bytes());
        }
    }
    for c in &mut subs {
        for i in 0..MESSAGES {
            assert_eq!(c.read_reply(), message("news", &format!("m{i}")));
        }
    }
    for c in &mut psubs {
        for i in 0..MESSAGES {
            assert_eq!(c.read_reply(), pmessage("n*", "news", &format!("m{i}")));
        }
    }
    // Nothing more for anyone.
    for c in subs.iter_mut().chain(psubs.iter_mut()) {
        assert_eq!(c.cmd_str(&["PING"]), b"*2\r\n$4\r\npong\r\n$0\r\n\r\n");
    }
}

/// Once a client has its SUBSCRIBE reply, a PUBLISH from any other
/// connection finds it; once it has its UNSUBSCRIBE reply, none does.
fn a_subscription_counts_as_soon_as_it_is_acknowledged(layout: Layout) {
    const ROUNDS: usize = 300;
    let s = layout.tessera(&[]);
    // Connections land on threads as the kernel spreads them: several
    // publishers make some pairs cross threads whatever it does.
    let mut pubs: Vec<RawConn> = (0..4).map(|_| s.raw()).collect();
    let mut sub = s.raw();
    for i in 0..ROUNDS {
        let ch = format!("ch{i}");
        let p = &mut pubs[i % 4];
        assert_eq!(
            sub.cmd_str(&["SUBSCRIBE", &ch]),
            message_ack("subscribe", &ch, 1)
        );
        assert_eq!(p.cmd_str(&["PUBLISH", &ch, "x"]), b":1\r\n", "round {i}");
        assert_eq!(sub.read_reply(), message(&ch, "x"));
        assert_eq!(
            sub.cmd_str(&["UNSUBSCRIBE", &ch]),
            message_ack("unsubscribe", &ch, 0)
        );
        assert_eq!(p.cmd_str(&["PUBLISH", &ch, "y"]), b":0\r\n", "round {i}");
    }
    sub.assert_silent(Duration::from_millis(50));
}

fn message_ack(verb: &str, ch: &str, n: usize) -> Vec<u8> {
    format!(
        "*3\r\n${}\r\n{verb}\r\n${}\r\n{ch}\r\n:{n}\r\n",
        verb.len(),
        ch.len()
    )
    .into_bytes()
}

/// Several publishers at once, each to the same subscribers: every
/// subscriber sees each publisher's messages in that publisher's order,
/// and the counts add up.
fn concurrent_publishers_keep_their_order(layout: Layout) {
    const PUBLISHERS: usize = 4;
    const MESSAGES: usize = 200;
    const SUBSCRIBERS: usize = 3;
    let s = layout.tessera(&[]);
    let mut subs: Vec<RawConn> = (0..SUBSCRIBERS).map(|_| s.raw()).collect();
    for c in &mut subs {
        c.cmd_str(&["SUBSCRIBE", "c"]);
    }
    let addr = s.addr();
    let handles: Vec<_> = (0..PUBLISHERS)
        .map(|p| {
            let addr = addr.clone();
            thread::spawn(move || {
                let mut c = RawConn::connect(&addr);
                for i in 0..MESSAGES {
                    let payload = format!("{p}:{i}");
                    let r = c.cmd_str(&["PUBLISH", "c", &payload]);
                    assert_eq!(r, format!(":{SUBSCRIBERS}\r\n").as_bytes());
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("publisher");
    }
    for c in &mut subs {
        let mut next = [0usize; PUBLISHERS];
        for _ in 0..PUBLISHERS * MESSAGES {
            let r = c.read_reply();
            let text = String::from_utf8_lossy(&r).into_owned();
            let payload = text.rsplit("\r\n").nth(1).expect("payload").to_string();
            let (p, i) = payload.split_once(':').expect("p:i");
            let (p, i): (usize, usize) = (p.parse().unwrap(), i.parse().unwrap());
            assert_eq!(i, next[p], "publisher {p} out of order");
            next[p] += 1;
        }
    }
}

fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A subscriber that reads nothing while 100 MB are published is cut off
/// at its output buffer limit (the default `pubsub 32mb 8mb 60`); memory
/// stays bounded; the subscriber that reads gets every message.
#[test]
fn a_subscriber_that_stops_reading_is_cut_off() {
    const PAYLOAD: usize = 1024;
    const MESSAGES: usize = 100 * 1024;
    const BURST: usize = 256;
    let s = server(2, false);
    let mut slow = s.raw();
    slow.cmd_str(&["SUBSCRIBE", "big"]);
    // Keep the kernel's buffer for it small, so the server holds the rest.
    let mut reader = s.raw();
    reader.cmd_str(&["SUBSCRIBE", "big"]);
    let read = Arc::new(AtomicUsize::new(0));
    let reading = {
        let read = read.clone();
        thread::spawn(move || {
            let mut got = 0;
            while got < MESSAGES {
                let r = reader.read_reply();
                assert!(r.starts_with(b"*3\r\n$7\r\nmessage\r\n"), "not a message");
                got += 1;
                read.store(got, Ordering::Relaxed);
            }
            (got, reader)
        })
    };
    let payload = vec![b'x'; PAYLOAD];
    let mut publisher = s.raw();
    let mut rss_max_kb = 0;
    let mut counts = [0usize; 3];
    for burst in 0..MESSAGES / BURST {
        let mut bytes = Vec::new();
        for _ in 0..BURST {
            bytes.extend(encode_command(&[b"PUBLISH", b"big", &payload]));
        }
        publisher.send(&bytes);
        for _ in 0..BURST {
            let r = publisher.read_reply();
            match r.as_slice() {
                b":2\r\n" => counts[2] += 1,
                b":1\r\n" => counts[1] += 1,
                other => panic!("PUBLISH replied {}", String::from_utf8_lossy(other)),
            }
        }
        // The reader keeps up (a few bursts behind at most), as a live
        // subscriber does; only the slow one falls behind.
        let deadline = Instant::now() + Duration::from_secs(30);
        while read.load(Ordering::Relaxed) + 4 * BURST < (burst + 1) * BURST {
            assert!(Instant::now() < deadline, "the reader stopped");
            thread::sleep(Duration::from_millis(1));
        }
        if burst % 16 == 0 {
            if let Some(pid) = s.pid() {
                rss_max_kb = rss_max_kb.max(rss_kb(pid));
            }
        }
    }
    let (got, _reader) = reading.join().expect("reader");
    assert_eq!(got, MESSAGES);
    assert!(counts[1] > 0, "the slow subscriber was never cut off");
    // The slow one is gone: its connection closed.
    slow.set_reply_timeout(Duration::from_secs(20));
    let deadline = Instant::now() + Duration::from_secs(20);
    while slow.try_read_reply().is_ok() {
        assert!(Instant::now() < deadline, "still open");
    }
    let mut c = s.raw();
    assert_eq!(
        c.cmd_str(&["PUBSUB", "NUMSUB", "big"]),
        b"*2\r\n$3\r\nbig\r\n:1\r\n"
    );
    // 32 MB of buffered messages for the slow one, plus what the others
    // hold in flight: far below the 100 MB published.
    if !testing_real_redis() {
        assert!(rss_max_kb < 90 * 1024, "RSS peaked at {rss_max_kb} kB");
    }
}

per_layout!(
    fan_out,
    a_subscription_counts_as_soon_as_it_is_acknowledged,
    concurrent_publishers_keep_their_order,
);
