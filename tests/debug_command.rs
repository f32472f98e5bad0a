//! DEBUG PROTOCOL and DEBUG SET-DISABLE-DENY-SCRIPTS byte for byte beside
//! redis-server 7.0 (the differential scripts' servers run without
//! `enable-debug-command`): Redis's Tcl unit/scripting calls DEBUG
//! PROTOCOL from scripts to test the RESP2/RESP3 conversions both ways.

mod common;

use common::{RawConn, Server};

fn debug_servers() -> Vec<Server> {
    let mut v: Vec<Server> = common::LAYOUTS
        .iter()
        .map(|l| l.tessera(&["--enable-debug-command", "yes"]))
        .collect();
    if common::redis_available() {
        v.push(Server::redis(&["--enable-debug-command", "yes"]));
    } else {
        eprintln!("redis-server not found: compared with the recorded replies only");
    }
    v
}

/// Every reply of the session, in order.
fn session(c: &mut RawConn) -> Vec<Vec<u8>> {
    let types = [
        "string", "integer", "double", "bignum", "null", "array", "set", "map", "attrib", "push",
        "true", "false", "verbatim", "foo", "SET",
    ];
    let mut out = Vec::new();
    for proto in ["2", "3"] {
        let hello = c.cmd_str(&["HELLO", proto]);
        assert!(!hello.starts_with(b"-"), "{hello:?}");
        for t in types {
            out.push(c.cmd_str(&["DEBUG", "PROTOCOL", t]));
        }
        out.push(c.cmd_str(&["DEBUG", "PROTOCOL"]));
        let call = |t: &str, resp: u8| {
            format!("redis.setresp({resp}); return redis.call('debug', 'protocol', '{t}')")
        };
        // Refused from scripts until deny-scripts is disabled.
        out.push(c.cmd_str(&["EVAL", &call("bignum", 2), "0"]));
        out.push(c.cmd_str(&["DEBUG", "SET-DISABLE-DENY-SCRIPTS", "1"]));
        for t in types.iter().filter(|&&t| t != "push") {
            for resp in [2, 3] {
                out.push(c.cmd_str(&["EVAL", &call(t, resp), "0"]));
            }
        }
        out.push(c.cmd_str(&[
            "EVAL",
            "redis.call('debug', 'sleep', '0'); return redis.call('debug', 'set-active-expire', '1')",
            "0",
        ]));
        out.push(c.cmd_str(&["DEBUG", "SET-DISABLE-DENY-SCRIPTS", "0"]));
        out.push(c.cmd_str(&["EVAL", &call("bignum", 3), "0"]));
    }
    out
}

#[test]
fn debug_protocol_from_clients_and_scripts_as_redis() {
    let mut runs: Vec<(common::Flavor, Vec<Vec<u8>>)> = Vec::new();
    for s in debug_servers() {
        let mut c = s.raw();
        runs.push((s.flavor(), session(&mut c)));
    }
    let (_, first) = &runs[0];
    // Spot checks of Redis's own test values (unit/scripting).
    let text: Vec<String> = first
        .iter()
        .map(|r| String::from_utf8_lossy(r).into_owned())
        .collect();
    assert!(text.contains(&"(1234567999999999999999999999999999999\r\n".to_string()));
    assert!(text.contains(&",3.141\r\n".to_string()));
    assert!(text.contains(&"=29\r\ntxt:This is a verbatim\nstring\r\n".to_string()));
    assert!(text.contains(&"%3\r\n:0\r\n#f\r\n:1\r\n#t\r\n:2\r\n#f\r\n".to_string()));
    assert!(text.contains(
        &"|1\r\n$14\r\nkey-popularity\r\n*2\r\n$7\r\nkey:123\r\n:90\r\n$39\r\nSome real reply following the attribute\r\n"
            .to_string()
    ));
    assert!(text
        .iter()
        .any(|t| t.starts_with("-ERR This Redis command is not allowed from script")));
    for (flavor, replies) in &runs[1..] {
        assert_eq!(replies.len(), first.len());
        for (i, (a, b)) in first.iter().zip(replies).enumerate() {
            assert_eq!(
                String::from_utf8_lossy(a),
                String::from_utf8_lossy(b),
                "reply {i} differs ({flavor:?})"
            );
        }
    }
}

/// DEBUG SLEEP is timed as the command (it sleeps in the coordinator's
/// step): a latency monitor `command` event and a slowlog entry, as in
/// Redis.
#[test]
fn debug_sleep_is_a_slow_command() {
    for s in debug_servers() {
        let mut c = s.raw();
        c.cmd_str(&["CONFIG", "SET", "latency-monitor-threshold", "5"]);
        c.cmd_str(&["SLOWLOG", "RESET"]);
        assert_eq!(c.cmd_str(&["DEBUG", "SLEEP", "0.02"]), b"+OK\r\n");
        let latest = String::from_utf8_lossy(&c.cmd_str(&["LATENCY", "LATEST"])).into_owned();
        assert!(
            latest.starts_with("*1\r\n*4\r\n$7\r\ncommand\r\n:"),
            "{:?}: {latest}",
            s.flavor()
        );
        assert_eq!(
            c.cmd_str(&["SLOWLOG", "LEN"]),
            b":1\r\n",
            "{:?}",
            s.flavor()
        );
    }
}

/// DEBUG OBJECT beside Redis, the address and LRU fields aside: refcount,
/// encoding, the RDB length and a list's quicklist figures; a key expired
/// but not deleted yet is still found (Redis's `dictFind`, which unit/
/// scripting's "Script delete the expired key" relies on); a missing key
/// is `-ERR no such key`.
#[test]
fn debug_object_as_redis() {
    let big = "a".repeat(100);
    let many: Vec<String> = (0..300).map(|i| format!("element-{i}")).collect();
    let mut runs: Vec<(common::Flavor, Vec<String>)> = Vec::new();
    for s in debug_servers() {
        let mut c = s.raw();
        let mut rpush = vec!["RPUSH", "long"];
        rpush.extend(many.iter().map(String::as_str));
        for cmd in [
            vec!["SET", "s", "hello"],
            vec!["SET", "i", "123"],
            vec!["SET", "big", &big],
            vec!["RPUSH", "l", "a", "b", "c"],
            rpush,
            vec!["HSET", "h", "a", "1"],
            vec!["SADD", "st", "1", "2"],
            vec!["ZADD", "z", "1", "a"],
            vec!["DEBUG", "SET-ACTIVE-EXPIRE", "0"],
            vec!["SET", "e", "v", "PX", "1"],
        ] {
            let r = c.cmd_str(&cmd);
            assert!(!r.starts_with(b"-"), "{cmd:?}: {r:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
        let mut lines = Vec::new();
        // (Not a small set of strings: a listpack here, Redis 7.0's
        // hashtable, a deliberate difference.)
        for k in ["s", "i", "big", "l", "long", "h", "st", "z", "e", "nokey"] {
            let r = String::from_utf8_lossy(&c.cmd_str(&["DEBUG", "OBJECT", k])).into_owned();
            // Address, LRU clock and idle time differ by nature.
            let kept: Vec<&str> = r
                .split(' ')
                .filter(|w| !w.starts_with("at:") && !w.starts_with("lru"))
                .collect();
            lines.push(kept.join(" "));
        }
        assert!(
            lines[8].starts_with("+Value"),
            "expired key found: {}",
            lines[8]
        );
        assert_eq!(lines[9], "-ERR no such key\r\n");
        c.cmd_str(&["DEBUG", "SET-ACTIVE-EXPIRE", "1"]);
        runs.push((s.flavor(), lines));
    }
    let (_, first) = &runs[0];
    assert!(first[4].contains("ql_nodes:"), "{}", first[4]);
    for (flavor, lines) in &runs[1..] {
        assert_eq!(lines, first, "{flavor:?}");
    }
}
