//! Scripts and functions on a stale replica (issue 23, point 2: the
//! `allow-stale` flag), against a real redis-server 7.0 byte for byte.
//!
//! The replica is made stale the way an operator would: REPLICAOF a port
//! nobody listens on, then `CONFIG SET replica-serve-stale-data no`. Then,
//! as Redis 7.0.15 does:
//! * a script with a shebang, or a function, without `allow-stale` is
//!   refused at admission with MASTERDOWN (after READONLY: one that may
//!   write gets READONLY first), queued commands too (EXECABORT);
//! * a script without a shebang (EVAL's compatibility mode) is refused once
//!   found or compiled (NOSCRIPT and syntax errors come first) with
//!   MASTERDOWN, a failed call rather than a rejected one;
//! * an `allow-stale` script runs, and each `redis.call` of a command
//!   without the `stale` flag fails with "Can not execute the command on a
//!   stale replica" (an error reply, a `redis.pcall` table, a rejected
//!   call of that command in INFO commandstats);
//! * EXEC is refused when a queued command lacks `stale` and the replica
//!   went stale after it was queued; inside EXEC (the replica made stale by
//!   a queued CONFIG SET) scriptPrepareForRun's long MASTERDOWN text.
//!
//! Run at 1 shard and in every layout of [`common::LAYOUTS`]: a script
//! runs on its shard, in place across co-hosted shards, or on gathered
//! copies, and each path must refuse the same calls. INFO commandstats'
//! counts (calls, rejected, failed) and INFO errorstats are compared too.
//! Every wait is bounded by the connections' reply timeouts.

mod common;

use common::{redis_available, DeadPort, Layout, RawConn, Server};

/// One step: the connection (0 or 1) and the command.
type Step = (usize, &'static [&'static str]);

/// Before the replica is stale: data on several shards, a library, a
/// cached script with a shebang.
const SETUP: &[Step] = &[
    (0, &["CONFIG", "RESETSTAT"]),
    (0, &["SET", "a", "1"]),
    (0, &["SET", "b", "2"]),
    (0, &["SET", "c", "3"]),
    (0, &["SET", "{a}x", "4"]),
    (
        0,
        &[
            "FUNCTION",
            "LOAD",
            "#!lua name=lib\n\
             redis.register_function('f', function() return 1 end)\n\
             redis.register_function{function_name='fs', callback=function() return redis.call('get','x') end, flags={'allow-stale','no-writes'}}\n\
             redis.register_function{function_name='fs2', callback=function() return 2 end, flags={'allow-stale'}}\n\
             redis.register_function{function_name='fnw', callback=function() return 3 end, flags={'no-writes'}}\n\
             redis.register_function{function_name='fst', callback=function() return redis.call('time')[1] > '0' end, flags={'allow-stale','no-writes'}}",
        ],
    ),
    (0, &["SCRIPT", "LOAD", "#!lua flags=no-writes\nreturn 5"]),
    (0, &["SCRIPT", "LOAD", "return 7"]),
];

/// On the stale replica (after REPLICAOF and CONFIG SET, see [`run`]).
const STALE: &[Step] = &[
    (0, &["GET", "a"]),
    // No shebang: refused once found (MASTERDOWN, a failed call).
    (0, &["EVAL", "return 1", "0"]),
    (0, &["EVAL_RO", "return 1", "0"]),
    (0, &["EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0"]),
    (0, &["EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", "0"]),
    (0, &["EVAL", "return (", "0"]),
    (0, &["EVAL", "return 1", "x"]),
    (0, &["EVAL", "return 1", "1"]),
    (0, &["EVAL", "return 1", "3", "a", "b", "c"]),
    (0, &["EVAL_RO", "return redis.call('get', KEYS[1])", "2", "a", "b"]),
    // A shebang without allow-stale: READONLY first when it may write,
    // else MASTERDOWN, at admission.
    (0, &["EVAL", "#!lua\nreturn 1", "0"]),
    (0, &["EVAL", "#!lua\nreturn (", "0"]),
    (0, &["EVAL", "#!lua flags=no-writes\nreturn 1", "0"]),
    (0, &["EVAL", "#!lua flags=no-writes\nreturn 1", "3", "a", "b", "c"]),
    (0, &["EVAL_RO", "#!lua flags=no-writes\nreturn 1", "0"]),
    (0, &["EVAL_RO", "#!lua\nreturn 1", "0"]),
    (0, &["EVALSHA", "bacb0fa9e0511ae36561f3fbe6a4b9d07a79e1a4", "0"]),
    (0, &["EVAL", "#!lua flags=bad\nreturn 1", "0"]),
    (0, &["EVAL", "#!lua flags=allow-stale\nreturn 1", "0"]),
    (0, &["EVAL_RO", "#!lua flags=allow-stale\nreturn 1", "0"]),
    (0, &["EVAL", "#!lua flags=allow-stale,no-writes\nreturn (", "0"]),
    // allow-stale: runs; calls without the stale flag fail.
    (0, &["EVAL", "#!lua flags=allow-stale,no-writes\nreturn 1", "0"]),
    (0, &["EVAL_RO", "#!lua flags=allow-stale,no-writes\nreturn 1", "0"]),
    (0, &["EVAL", "#!lua flags=allow-stale,no-writes\nreturn redis.call('get','x')", "0"]),
    (0, &["EVAL", "#!lua flags=allow-stale,no-writes\nreturn redis.pcall('get','x')", "0"]),
    (
        0,
        &[
            "EVAL",
            "#!lua flags=allow-stale,no-writes\nlocal t = redis.pcall('get','x') return t['err']",
            "0",
        ],
    ),
    (0, &["EVAL", "#!lua flags=allow-stale,no-writes\nreturn redis.call('ping')", "0"]),
    (0, &["EVAL", "#!lua flags=allow-stale,no-writes\nreturn redis.call('echo','hi')", "0"]),
    (0, &["EVAL", "#!lua flags=allow-stale,no-writes\nreturn redis.call('time')[1] > '0'", "0"]),
    (0, &["EVAL", "#!lua flags=allow-stale,no-writes\nreturn redis.call('select','0')", "0"]),
    (0, &["EVAL", "#!lua flags=allow-stale,no-writes\nreturn redis.call('nosuch')", "0"]),
    (0, &["EVAL", "#!lua flags=allow-stale,no-writes\nreturn redis.call('get')", "0"]),
    (0, &["EVAL", "#!lua flags=allow-stale,no-writes\nreturn redis.call('set','x','1')", "0"]),
    (0, &["EVAL", "#!lua flags=allow-stale,no-writes\nreturn redis.call('replicaof','no','one')", "0"]),
    (0, &["EVAL", "#!lua flags=allow-stale,no-writes\nreturn redis.call('dbsize')", "0"]),
    (0, &["EVAL", "#!lua flags=allow-stale,no-writes\nreturn redis.call('exists','hi')", "0"]),
    // Across shards (in place, or on gathered copies), undeclared keys.
    (
        0,
        &[
            "EVAL",
            "#!lua flags=allow-stale,no-writes\nreturn redis.pcall('mget',KEYS[1],KEYS[2],KEYS[3])['err']",
            "3", "a", "b", "c",
        ],
    ),
    (
        0,
        &[
            "EVAL",
            "#!lua flags=allow-stale,no-writes\nreturn {redis.pcall('get',KEYS[1])['err'], redis.pcall('get',KEYS[2])['err'], redis.call('echo','z')}",
            "2", "a", "b",
        ],
    ),
    (
        0,
        &[
            "EVAL",
            "#!lua flags=allow-stale,no-writes\nreturn {redis.pcall('get','b')['err'], redis.pcall('get','c')['err']}",
            "1", "a",
        ],
    ),
    (0, &["EVAL", "#!lua flags=allow-stale,no-writes\nreturn redis.call('get',KEYS[2])", "2", "a", "b"]),
    (0, &["EVAL", "#!lua flags=allow-stale,no-writes\nreturn redis.call('get',KEYS[1])", "2", "a", "{a}x"]),
    (0, &["EVAL", "#!lua flags=allow-stale,no-writes\nreturn redis.call('time')[1] > '0'", "3", "a", "b", "c"]),
    // Functions.
    (0, &["FCALL", "f", "0"]),
    (0, &["FCALL_RO", "f", "0"]),
    (0, &["FCALL", "fs", "0"]),
    (0, &["FCALL_RO", "fs", "0"]),
    (0, &["FCALL", "fs2", "0"]),
    (0, &["FCALL", "fnw", "0"]),
    (0, &["FCALL_RO", "fnw", "0"]),
    (0, &["FCALL", "fst", "2", "a", "b"]),
    (0, &["FCALL", "nosuch", "0"]),
    (0, &["FCALL", "f", "x"]),
    // MULTI: refused when queued (EXECABORT), or run inside EXEC.
    (0, &["MULTI"]),
    (0, &["EVAL", "return 1", "0"]),
    (0, &["EVAL", "#!lua flags=no-writes\nreturn 1", "0"]),
    (0, &["EXEC"]),
    (0, &["MULTI"]),
    (0, &["EVAL", "return 1", "0"]),
    (0, &["EVAL", "#!lua flags=no-writes,allow-stale\nreturn redis.pcall('get','x')", "0"]),
    (0, &["FCALL", "fs", "0"]),
    (0, &["EVAL", "#!lua flags=allow-stale,no-writes\nreturn redis.pcall('get',KEYS[2])['err']", "2", "a", "b"]),
    (0, &["EXEC"]),
    (0, &["MULTI"]),
    (0, &["FCALL", "fnw", "0"]),
    (0, &["EXEC"]),
    // Stale after the commands were queued: EXEC is refused.
    (0, &["CONFIG", "SET", "replica-serve-stale-data", "yes"]),
    (0, &["MULTI"]),
    (0, &["EVAL", "return 1", "0"]),
    (0, &["EVAL", "#!lua flags=no-writes\nreturn 1", "0"]),
    (0, &["GET", "x"]),
    (1, &["CONFIG", "SET", "replica-serve-stale-data", "no"]),
    (0, &["EXEC"]),
    (0, &["CONFIG", "SET", "replica-serve-stale-data", "yes"]),
    (0, &["MULTI"]),
    (0, &["EVAL", "#!lua flags=no-writes,allow-stale\nreturn 1", "0"]),
    (1, &["CONFIG", "SET", "replica-serve-stale-data", "no"]),
    (0, &["EXEC"]),
    // Stale from inside EXEC: scriptPrepareForRun's refusals.
    (0, &["CONFIG", "SET", "replica-serve-stale-data", "yes"]),
    (0, &["MULTI"]),
    (0, &["CONFIG", "SET", "replica-serve-stale-data", "no"]),
    (0, &["EVAL", "return 1", "0"]),
    (0, &["EVAL", "#!lua flags=no-writes\nreturn 1", "0"]),
    (0, &["EVAL", "#!lua flags=no-writes\nreturn 1", "2", "a", "b"]),
    (0, &["EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0"]),
    (0, &["FCALL", "fnw", "0"]),
    (0, &["FCALL", "fs", "0"]),
    (0, &["EVAL", "#!lua flags=no-writes,allow-stale\nreturn redis.pcall('get','x')", "0"]),
    (0, &["EXEC"]),
    // Serving stale data again, then a master again: scripts run.
    (0, &["CONFIG", "SET", "replica-serve-stale-data", "yes"]),
    (0, &["EVAL", "return redis.call('get', KEYS[1]) .. redis.call('get', KEYS[2])", "2", "a", "b"]),
    (0, &["EVAL", "#!lua flags=no-writes\nreturn redis.call('get', KEYS[1])", "1", "a"]),
    (0, &["REPLICAOF", "NO", "ONE"]),
    (0, &["EVAL", "return redis.call('get', KEYS[1]) .. redis.call('get', KEYS[2])", "2", "a", "b"]),
    (0, &["INFO", "errorstats"]),
];

/// INFO commandstats as sorted lines without the timings (`usec=...`,
/// `usec_per_call=...`): calls, rejected and failed calls per command.
fn commandstats(c: &mut RawConn) -> Vec<String> {
    let reply = c.cmd_str(&["INFO", "commandstats"]);
    let text = String::from_utf8_lossy(&reply).into_owned();
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("cmdstat_"))
        .map(|l| {
            let (name, fields) = l.split_once(':').unwrap_or((l, ""));
            let kept: Vec<&str> = fields
                .split(',')
                .filter(|f| !f.starts_with("usec"))
                .collect();
            format!("{name}:{}", kept.join(","))
        })
        .collect();
    lines.sort();
    lines
}

/// Every reply of the steps on `s`, then INFO commandstats (see
/// [`commandstats`]); `master_port` is where nobody listens.
fn run(s: &Server, master_port: u16) -> (Vec<Vec<u8>>, Vec<String>) {
    let mut conns = [s.raw(), s.raw()];
    let mut out = Vec::new();
    for &(c, args) in SETUP {
        out.push(conns[c].cmd_str(args));
    }
    let port = master_port.to_string();
    out.push(conns[0].cmd_str(&["REPLICAOF", "127.0.0.1", &port]));
    out.push(conns[0].cmd_str(&["CONFIG", "SET", "replica-serve-stale-data", "no"]));
    for &(c, args) in STALE {
        out.push(conns[c].cmd_str(args));
    }
    let stats = commandstats(&mut conns[0]);
    (out, stats)
}

fn stale_scripts_match_redis(layout: Layout) {
    if !redis_available() {
        eprintln!("SKIPPED: redis-server is not on PATH");
        return;
    }
    // Held, never listened on, for the whole test: freed early, another
    // test's server could take it, and both replicas' handshakes would count
    // errors there (seen once in ~400 runs under load).
    let dead = DeadPort::new();
    let master_port = dead.port;
    let tessera = layout.tessera(&[]);
    let redis = Server::redis(&[]);
    let (got, got_stats) = run(&tessera, master_port);
    let (want, want_stats) = run(&redis, master_port);
    let steps: Vec<String> = SETUP
        .iter()
        .map(|s| s.1.join(" "))
        .chain(["REPLICAOF".into(), "CONFIG SET".into()])
        .chain(STALE.iter().map(|s| s.1.join(" ")))
        .collect();
    let mut diffs = String::new();
    for ((step, g), w) in steps.iter().zip(&got).zip(&want) {
        if g != w {
            diffs.push_str(&format!(
                "{step}\n  tessera: {:?}\n  redis:   {:?}\n",
                String::from_utf8_lossy(g),
                String::from_utf8_lossy(w)
            ));
        }
    }
    assert!(diffs.is_empty(), "{layout}: replies differ:\n{diffs}");
    assert_eq!(got_stats, want_stats, "{layout}: INFO commandstats");
}

#[test]
fn one_shard() {
    stale_scripts_match_redis(Layout::new(1, true));
}

/// A write script queued in MULTI on each shard's loop while master;
/// then REPLICAOF (a port nobody listens on) from another connection,
/// and each EXEC: READONLY on every shard at once, as Redis answers
/// (Tcl unit/scripting, "no-writes shebang flag on replica"). Before, a
/// shard learned the role at its next cron tick, so an EXEC right after
/// REPLICAOF's reply could still write there (seen with the shards
/// apart).
fn queued_write_meets_readonly(layout: Layout) {
    let dead = DeadPort::new();
    let port = dead.port.to_string();
    let s = layout.tessera(&[]);
    let keys: Vec<String> = (0..layout.shards)
        .map(|i| common::key_on(i, layout.shards, "w"))
        .collect();
    let mut conns: Vec<RawConn> = keys.iter().map(|k| common::connection_on(&s, k)).collect();
    for (c, k) in conns.iter_mut().zip(&keys) {
        assert_eq!(c.cmd_str(&["MULTI"]), b"+OK\r\n");
        let eval = ["EVAL", "redis.call('set',KEYS[1],1) return 1", "1", k];
        assert_eq!(c.cmd_str(&eval), b"+QUEUED\r\n");
    }
    let mut ctl = s.raw();
    assert_eq!(ctl.cmd_str(&["REPLICAOF", "127.0.0.1", &port]), b"+OK\r\n");
    // Redis 7.0.15's reply, byte for byte (by hand, the same steps).
    let want = "*1\r\n-READONLY You can't write against a read only replica. script: \
                f724e8f050c373fbbc6e50b362af3c6cbdc375e1, on @user_script:1.\r\n";
    for (c, k) in conns.iter_mut().zip(&keys) {
        let r = String::from_utf8_lossy(&c.cmd_str(&["EXEC"])).into_owned();
        assert_eq!(r, want, "{layout}: EXEC of a write script on {k}'s shard");
    }
    assert_eq!(ctl.cmd_str(&["REPLICAOF", "NO", "ONE"]), b"+OK\r\n");
}

per_layout!(stale_scripts_match_redis, queued_write_meets_readonly);
