//! Setup shared by the long-script tests (`tests/busy_*.rs`): the spinning
//! scripts, Redis's replies while busy, connections on a chosen shard's
//! loop, the servers (Tessera in a layout, the redis-server compared
//! against) and the reply comparison. Each file keeps its scenarios.

use std::time::Duration;

use super::{connection_on, key_on, Layout, RawConn, Server};

/// Spins until killed (SCRIPT KILL: it has not written).
pub const SPIN: &str = "while true do end";
/// Reaches every shard (KEYS), then spins: killable.
pub const KEYS_SPIN: &str = "redis.call('keys', '*') while true do end";

/// EXEC of a block refused while a script is busy.
pub const EXECABORT_BUSY: &[u8] = b"-EXECABORT Transaction discarded because of: BUSY Redis is \
busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n";
/// SCRIPT KILL of a script that wrote.
pub const UNKILLABLE: &[u8] = b"-UNKILLABLE Sorry the script already executed write commands \
against the dataset. You can either wait the script termination or kill the server in a hard \
way using the SHUTDOWN NOSAVE command.\r\n";

/// How long a reply may take in these tests, but those that wait for a
/// script's end.
pub const REPLY: Duration = Duration::from_secs(5);

/// A connection whose home is the shard of `key` (any on Redis), whose
/// replies are awaited [`REPLY`] at most.
pub fn near(s: &Server, key: &str) -> RawConn {
    let mut c = connection_on(s, key);
    c.set_reply_timeout(REPLY);
    c
}

/// A connection on shard `i`'s loop (through a key of it never set).
pub fn on_shard(s: &Server, i: usize, nshards: usize) -> RawConn {
    near(s, &key_on(i, nshards, "home"))
}

/// Tessera in `layout` with `busy-reply-threshold` `threshold_ms`.
pub fn tessera(layout: Layout, threshold_ms: u64) -> Server {
    layout.tessera(&["--busy-reply-threshold", &threshold_ms.to_string()])
}

/// A redis-server with `busy-reply-threshold` `threshold_ms` to compare
/// against, or `None` when none is installed or the tests themselves run
/// against redis-server.
pub fn redis(threshold_ms: u64) -> Option<Server> {
    if !super::redis_available() || super::testing_real_redis() {
        eprintln!("redis-server not installed: not compared");
        return None;
    }
    Some(Server::redis(&[
        "--busy-reply-threshold",
        &threshold_ms.to_string(),
    ]))
}

/// PINGs `near` every 10 ms until the reply is not `+PONG` (a script is
/// busy) and returns that reply; or, if the script `spin` sent ends
/// first (its reply arrives, and must begin with `ended`), returns `None`: on a
/// loaded machine a short spin can end before this thread saw it busy,
/// and the caller runs it again longer. Bounded: 60 s.
pub fn busy_or_ended(near: &mut RawConn, spin: &mut RawConn, ended: &[u8]) -> Option<Vec<u8>> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    spin.set_reply_timeout(Duration::from_millis(1));
    let busy = loop {
        let r = near.cmd_str(&["PING"]);
        if r != b"+PONG\r\n" {
            break Some(r);
        }
        if let Ok(r) = spin.try_read_reply() {
            assert!(
                r.starts_with(ended),
                "the script: {}",
                super::escape(&r, 300)
            );
            break None;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the script neither became busy nor ended"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    spin.set_reply_timeout(Duration::from_secs(60));
    busy
}

/// Asserts `got` is `want`, reply by reply, shown escaped.
pub fn check(got: &[Vec<u8>], want: &[Vec<u8>], who: &str) {
    let show = |v: &[Vec<u8>]| -> Vec<String> { v.iter().map(|r| super::escape(r, 300)).collect() };
    assert_eq!(show(got), show(want), "{who}");
}

/// `want` as owned replies.
pub fn replies(want: &[&[u8]]) -> Vec<Vec<u8>> {
    want.iter().map(|r| r.to_vec()).collect()
}
