//! Regression tests for stream commands over values loaded from payloads
//! (found by `fuzz/`'s `restore_stream`): whatever RESTORE accepts, the
//! commands must answer without panicking.

use engine::types::stream::{Consumer, Group, Nack, NodeLimits, Stream, StreamId};
use engine::Value;

use crate::testutil::TestServer;

/// A stream `s` with entry 1-1, one group `g` whose consumer `c` has it
/// pending, seen and delivered at the given times (ms).
fn server_with(seen_time: u64, delivery_time: u64) -> TestServer {
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
    let mut t = TestServer::new(1);
    t.shards[0].store(0, b"s", Value::Stream(Box::new(st)), 0);
    t
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
