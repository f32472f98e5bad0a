//! Regression tests for stream commands over values loaded from payloads
//! (found by `fuzz/`'s `restore_stream`): whatever RESTORE accepts, the
//! commands must answer without panicking.

use engine::types::stream::{Consumer, Group, Nack, NodeLimits, Stream, StreamId};
use engine::Value;

use crate::testutil::TestServer;

/// A stream with entry 1-1, one group `g` whose consumer `c` has it
/// pending, seen and delivered at the given times (ms).
fn stream(seen_time: u64, delivery_time: u64) -> Stream {
    let mut st = Stream::new();
    let id = StreamId::new(1, 1);
    st.append(id, &[(b"f", b"v")], NodeLimits::default());
    st.last_id = id;
    st.first_id = id;
    st.entries_added = 1;
    let mut g = Group::new(id, 1);
    g.pel.insert(
        id,
        Nack {
            consumer: b"c".to_vec(),
            delivery_time,
            delivery_count: 1,
        },
    );
    let mut c = Consumer {
        seen_time,
        ..Consumer::default()
    };
    c.pel.insert(id);
    g.consumers.insert(b"c".to_vec(), c);
    st.groups.insert(b"g".to_vec(), g);
    st.check_consistency().unwrap();
    st
}

/// A server holding `st` as `s`.
fn server(st: Stream) -> TestServer {
    let mut t = TestServer::new(1);
    t.shards[0].store(0, b"s", Value::Stream(Box::new(st)), 0);
    t
}

fn server_with(seen_time: u64, delivery_time: u64) -> TestServer {
    server(stream(seen_time, delivery_time))
}

/// Times past i64::MAX (negative to Redis's `mstime_t`): the idle time is
/// Redis's wrapping `now - time`, clamped at 0, not an overflow panic.
#[test]
fn idle_times_from_any_loaded_time() {
    let min = i64::MIN as u64;
    let mut t = server_with(min, min);
    let r = t.run(&["XINFO", "CONSUMERS", "s", "g"]);
    assert!(r.ends_with("$4\r\nidle\r\n:0\r\n"), "{r}");
    let r = t.run(&["XPENDING", "s", "g", "-", "+", "10"]);
    assert_eq!(r, "*1\r\n*4\r\n$3\r\n1-1\r\n$1\r\nc\r\n:0\r\n:1\r\n");
    // `now - time` wraps negative: never idle enough to claim.
    assert_eq!(
        t.run(&["XCLAIM", "s", "g", "d", "1", "1-1", "JUSTID"]),
        "*0\r\n"
    );
    assert_eq!(
        t.run(&["XAUTOCLAIM", "s", "g", "d", "1", "0", "JUSTID"]),
        "*3\r\n$3\r\n0-0\r\n*0\r\n*0\r\n"
    );
    // -1 ms: `now + 1` ms idle, claimable.
    let mut t = server_with(u64::MAX, u64::MAX);
    let r = t.run(&["XPENDING", "s", "g", "IDLE", "1", "-", "+", "10"]);
    assert!(
        r.starts_with("*1\r\n*4\r\n$3\r\n1-1\r\n$1\r\nc\r\n:"),
        "{r}"
    );
    assert_eq!(
        t.run(&["XCLAIM", "s", "g", "d", "1", "1-1", "JUSTID"]),
        "*1\r\n$3\r\n1-1\r\n"
    );
}

/// The DUMP payload of `key` (a bulk reply's body).
fn dump(t: &mut TestServer, key: &str) -> Vec<u8> {
    let r = t.raw(&[b"DUMP", key.as_bytes()]);
    let nl = r.iter().position(|&c| c == b'\n').unwrap();
    r[nl + 1..r.len() - 2].to_vec()
}

/// Counters a payload may set anywhere: entries-added below the length
/// (or wrapped by XADD past 2^64 - 1) and entries-read near i64::MAX. The
/// logical offsets and the lag are Redis's unsigned arithmetic, and the
/// stream still DUMPs and RESTOREs.
#[test]
fn loaded_counters_cannot_overflow() {
    let mut st = stream(0, 0);
    st.entries_added = u64::MAX;
    let mut t = server(st);
    assert!(t
        .run(&["XADD", "s", "2-1", "f", "v"])
        .starts_with("$3\r\n2-1"));
    let r = t.run(&["XINFO", "STREAM", "s"]);
    assert!(r.contains("$13\r\nentries-added\r\n:0\r\n"), "{r}");
    let p = dump(&mut t, "s");
    assert_eq!(t.raw(&[b"RESTORE", b"s2", b"0", &p]), b"+OK\r\n");
    t.run(&["XGROUP", "SETID", "s2", "g", "1-1"]);
    t.run(&["XGROUP", "CREATE", "s2", "g2", "1-1"]);
    let r = t.run(&["XINFO", "GROUPS", "s2"]);
    assert!(r.starts_with("*2\r\n"), "{r}");
    // One added, two live: a group before the first entry reads
    // `entries_added - length`, -1 as Redis's wrapped uint64.
    let mut st = stream(0, 0);
    st.append(StreamId::new(2, 1), &[(b"f", b"v")], NodeLimits::default());
    st.last_id = StreamId::new(2, 1);
    st.entries_added = 1;
    let mut t = server(st);
    assert_eq!(t.run(&["XGROUP", "CREATE", "s", "g0", "0-1"]), "+OK\r\n");
    let r = t.run(&["XINFO", "GROUPS", "s"]);
    assert!(r.contains("$2\r\ng0\r\n"), "{r}");
    // entries-read at i64::MAX, then one more read.
    let mut st = stream(0, 0);
    let g = st.groups.get_mut(&b"g"[..]).unwrap();
    g.entries_read = i64::MAX;
    g.last_id = StreamId::MIN;
    let mut t = server(st);
    let p = dump(&mut t, "s");
    assert_eq!(t.raw(&[b"RESTORE", b"s2", b"0", &p]), b"+OK\r\n");
    let r = t.run(&["XINFO", "GROUPS", "s2"]);
    assert!(r.contains("$3\r\nlag\r\n:-9223372036854775806\r\n"), "{r}");
    let r = t.run(&["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s2", ">"]);
    assert!(r.starts_with("*1\r\n"), "{r}");
    let r = t.run(&["XINFO", "GROUPS", "s2"]);
    assert!(
        r.contains("$12\r\nentries-read\r\n:-9223372036854775808\r\n"),
        "{r}"
    );
}
