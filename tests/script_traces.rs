//! A script run taken back leaves no trace (issue 23): a run abandoned to
//! run again (an undeclared key of another shard, a keyspace call with
//! shards apart, a publish by a call from another loop) is seen once in
//! INFO commandstats and errorstats, MONITOR and SLOWLOG, as Redis runs
//! the script once (`commands::script::traces`).
//!
//! The same scripts' figures are Redis's; validate against it:
//! `TESSERA_TEST_BIN=/usr/bin/redis-server cargo test --test script_traces`.

mod common;

use common::{Layout, RawConn, Server};

/// Keys for the scripts: `k1` and `s1` on shard 0, `far` on shard 1.
struct Keys {
    k1: String,
    s1: String,
    far: String,
    spread: Vec<String>,
}

fn keys(layout: Layout) -> Keys {
    let n = layout.shards;
    Keys {
        k1: common::key_on(0, n, "k1:"),
        s1: common::key_on(0, n, "s1:"),
        far: common::key_on(1, n, "far:"),
        spread: common::keys_across_shards("c:", n, n),
    }
}

/// A read, an error reply, a refused call of a known command, an unknown
/// command and two writes before the undeclared key of another shard.
const STRAY: &str = "redis.call('get', KEYS[2]) \
    redis.pcall('lpush', KEYS[2], 'x') \
    redis.pcall('get') \
    redis.pcall('nosuchcmd') \
    redis.call('set', KEYS[1], 'v') \
    redis.call('set', ARGV[1], 'w') \
    return redis.call('get', ARGV[1])";

/// A write and a failed call before a keyspace call (every shard).
const KEYSPACE: &str = "redis.call('set', KEYS[1], '1') \
    redis.pcall('incr', KEYS[2]) \
    return redis.call('dbsize') > 0";

/// A write before a publish (by a call from another loop: taken back to
/// run as a hop).
const PUBLISH: &str = "redis.call('set', KEYS[1], '1') \
    redis.call('publish', 'ch', 'm') \
    return redis.call('get', KEYS[1])";

/// The server in `layout`, its shards on one thread once consolidated
/// (so that a script on another shard than its caller's runs by a call
/// from the caller's loop: `busy::by_call`), and a client whose home is
/// shard 0.
fn start(layout: Layout, k: &Keys) -> (Server, RawConn) {
    let srv = layout.tessera(&[]);
    if layout.consolidated && !common::testing_real_redis() {
        common::wait_shard_threads(&srv, 1);
    }
    let c = common::connection_on(&srv, &k.k1);
    (srv, c)
}

fn run_scripts(c: &mut RawConn, k: &Keys) {
    assert_eq!(
        c.cmd_str(&["EVAL", STRAY, "2", &k.k1, &k.s1, &k.far]),
        b"$1\r\nw\r\n"
    );
    assert_eq!(c.cmd_str(&["EVAL", KEYSPACE, "2", &k.k1, &k.s1]), b":1\r\n");
    // A script each: one taken back by a call is marked to hop from then
    // on (`cache::HopMark`).
    for (i, key) in k.spread.iter().enumerate() {
        let script = format!("{PUBLISH} -- {i}");
        assert_eq!(c.cmd_str(&["EVAL", &script, "1", key]), b"$1\r\n1\r\n");
    }
}

/// `INFO <section>`'s lines starting with `prefix`, without their
/// timings, sorted.
fn stat_lines(c: &mut RawConn, section: &str, prefix: &str) -> Vec<String> {
    let reply = c.cmd_str(&["INFO", section]);
    let text = String::from_utf8(reply).expect("utf8");
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with(prefix) && !l.contains("config|") && !l.contains("_info:"))
        .map(|l| {
            l.split(',')
                .filter(|f| !f.starts_with("usec"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
    lines.sort();
    lines
}

fn stats_count_each_call_once(layout: Layout) {
    let k = keys(layout);
    let (_srv, mut c) = start(layout, &k);
    assert_eq!(c.cmd_str(&["SET", &k.s1, "str"]), b"+OK\r\n");
    assert_eq!(c.cmd_str(&["CONFIG", "RESETSTAT"]), b"+OK\r\n");
    run_scripts(&mut c, &k);
    let n = k.spread.len();
    let mut want = vec![
        "cmdstat_dbsize:calls=1,rejected_calls=0,failed_calls=0".to_string(),
        format!(
            "cmdstat_eval:calls={},rejected_calls=0,failed_calls=0",
            2 + n
        ),
        format!(
            "cmdstat_get:calls={},rejected_calls=1,failed_calls=0",
            2 + n
        ),
        "cmdstat_incr:calls=1,rejected_calls=0,failed_calls=1".to_string(),
        "cmdstat_lpush:calls=1,rejected_calls=0,failed_calls=1".to_string(),
        format!("cmdstat_publish:calls={n},rejected_calls=0,failed_calls=0"),
        format!(
            "cmdstat_set:calls={},rejected_calls=0,failed_calls=0",
            3 + n
        ),
    ];
    want.sort();
    assert_eq!(
        stat_lines(&mut c, "commandstats", "cmdstat_"),
        want,
        "{layout}"
    );
    assert_eq!(
        stat_lines(&mut c, "errorstats", "errorstat_"),
        ["errorstat_ERR:count=3", "errorstat_WRONGTYPE:count=1"],
        "{layout}"
    );
    let total = stat_lines(&mut c, "stats", "total_error_replies:");
    assert_eq!(total, ["total_error_replies:4"], "{layout}");
    // Reads: STRAY's GETs and each PUBLISH script's GET hit
    // (writes count none), in every layout: with shards on threads of
    // their own STRAY's wider run is on lent shards (`script::lend`);
    // on gathered copies, as before, its reads counted no hit.
    let hits = stat_lines(&mut c, "stats", "keyspace_");
    let want = 2 + n;
    assert_eq!(
        hits,
        [format!("keyspace_hits:{want}"), "keyspace_misses:0".into()],
        "{layout}"
    );
}

/// MONITOR: the commands of `lines`' script calls (`[0 lua] ...`), in order.
fn lua_lines(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| {
            l.split_once(" lua] ")
                .map(|(_, cmd)| cmd.trim_end().to_string())
        })
        .collect()
}

fn monitor_shows_each_call_once(layout: Layout) {
    let k = keys(layout);
    let (srv, mut c) = start(layout, &k);
    let mut m = srv.raw();
    assert_eq!(m.cmd_str(&["MONITOR"]), b"+OK\r\n");
    assert_eq!(c.cmd_str(&["SET", &k.s1, "str"]), b"+OK\r\n");
    run_scripts(&mut c, &k);
    assert_eq!(c.cmd_str(&["ECHO", "end"]), b"$3\r\nend\r\n");
    let mut lines = Vec::new();
    for _ in 0..1000 {
        let l = String::from_utf8(m.read_reply()).expect("utf8");
        let end = l.contains("\"ECHO\" \"end\"");
        lines.push(l);
        if end {
            break;
        }
    }
    let q = |s: &str| format!("\"{s}\"");
    let mut want = vec![
        format!("\"get\" {}", q(&k.s1)),
        format!("\"lpush\" {} \"x\"", q(&k.s1)),
        format!("\"set\" {} \"v\"", q(&k.k1)),
        format!("\"set\" {} \"w\"", q(&k.far)),
        format!("\"get\" {}", q(&k.far)),
        format!("\"set\" {} \"1\"", q(&k.k1)),
        format!("\"incr\" {}", q(&k.s1)),
        "\"dbsize\"".to_string(),
    ];
    for key in &k.spread {
        want.push(format!("\"set\" {} \"1\"", q(key)));
        want.push("\"publish\" \"ch\" \"m\"".to_string());
        want.push(format!("\"get\" {}", q(key)));
    }
    assert_eq!(lua_lines(&lines), want, "{layout}: {lines:#?}");
}

/// SLOWLOG GET's entries' commands, oldest first.
fn slowlog_commands(c: &mut redis::Connection) -> Vec<String> {
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query(c)
        .expect("slowlog get");
    let mut names: Vec<String> = entries
        .iter()
        .map(|e| match e {
            redis::Value::Array(fields) => match &fields[3] {
                redis::Value::Array(argv) => match &argv[0] {
                    redis::Value::BulkString(b) => String::from_utf8_lossy(b).to_lowercase(),
                    v => panic!("argv[0] {v:?}"),
                },
                v => panic!("argv {v:?}"),
            },
            v => panic!("entry {v:?}"),
        })
        .collect();
    names.reverse();
    names
}

fn slowlog_logs_each_call_once(layout: Layout) {
    let k = keys(layout);
    let (srv, mut c) = start(layout, &k);
    let mut r = srv.conn();
    assert_eq!(c.cmd_str(&["SET", &k.s1, "str"]), b"+OK\r\n");
    assert_eq!(
        c.cmd_str(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]),
        b"+OK\r\n"
    );
    assert_eq!(c.cmd_str(&["SLOWLOG", "RESET"]), b"+OK\r\n");
    run_scripts(&mut c, &k);
    let mut want: Vec<String> = ["slowlog", "get", "lpush", "set", "set", "get", "eval"]
        .iter()
        .chain(&["set", "incr", "dbsize", "eval"])
        .map(|s| s.to_string())
        .collect();
    for _ in &k.spread {
        want.extend(["set", "publish", "get", "eval"].map(String::from));
    }
    assert_eq!(slowlog_commands(&mut r), want, "{layout}");
}

per_layout!(
    stats_count_each_call_once,
    monitor_shows_each_call_once,
    slowlog_logs_each_call_once
);

/// A script run on gathered copies (the shards apart, the lend declined:
/// here by `maxmemory`, see `commands::script::lend`) counts its reads'
/// keyspace hits as Redis does: the copies' counts join a real shard's
/// with the write-back. Before, they were dropped with the copies (0 hits
/// where Redis counts 2), and a consolidated layout that happened to be
/// spread showed it too.
#[test]
fn reads_on_copies_count_their_hits() {
    let layout = Layout::apart(2);
    let k = keys(layout);
    let srv = layout.tessera(&["--maxmemory", "1gb"]);
    let mut c = common::connection_on(&srv, &k.k1);
    assert_eq!(c.cmd_str(&["SET", &k.s1, "str"]), b"+OK\r\n");
    assert_eq!(c.cmd_str(&["SET", &k.far, "x"]), b"+OK\r\n");
    assert_eq!(c.cmd_str(&["CONFIG", "RESETSTAT"]), b"+OK\r\n");
    // Both keys declared, on two shards: the copies' path from the start.
    let read = "return {redis.call('get', KEYS[1]), redis.call('get', KEYS[2]), \
        redis.call('exists', KEYS[1])}";
    assert_eq!(
        c.cmd_str(&["EVAL", read, "2", &k.s1, &k.far]),
        b"*3\r\n$3\r\nstr\r\n$1\r\nx\r\n:1\r\n"
    );
    assert_eq!(
        stat_lines(&mut c, "stats", "keyspace_"),
        ["keyspace_hits:3", "keyspace_misses:0"]
    );
    // And a script that writes too (the counts ride on the write-back).
    let write = "redis.call('get', KEYS[1]) redis.call('get', KEYS[3]) \
        return redis.call('set', KEYS[2], 'y')";
    assert_eq!(
        c.cmd_str(&["EVAL", write, "3", &k.s1, &k.far, &k.k1]),
        b"+OK\r\n"
    );
    assert_eq!(
        stat_lines(&mut c, "stats", "keyspace_"),
        ["keyspace_hits:4", "keyspace_misses:1"]
    );
}
