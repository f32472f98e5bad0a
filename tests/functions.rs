//! Functions and long scripts through the real binary: libraries persist
//! in RDB files both ways with Redis 7.0.15 and in the append-only file
//! (replayed, and in a rewrite's base with and without the RDB preamble);
//! a script spinning past `busy-reply-threshold` is killed by SCRIPT KILL
//! / FUNCTION KILL from a connection on another thread, its caller gets
//! Redis's error, other clients get `-BUSY` for its shard meanwhile, a
//! script that wrote is UNKILLABLE, and SHUTDOWN NOSAVE stops it.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{encode_command, RawConn, Server};

fn tmp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tessera-fn-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const LIB_A: &str = "#!lua name=liba\nlocal function add(k, a) return redis.call('incrby', k[1], a[1]) end\nredis.register_function('add', add)\nredis.register_function{function_name='peek', callback=function(k) return redis.call('get', k[1]) end, flags={'no-writes'}, description='reads'}";
const LIB_B: &str = "#!lua name=libb\nredis.register_function('hello', function(k, a) return 'hello ' .. a[1] .. ' and a long enough text to be compressed' end)";

fn bulk(s: &str) -> Vec<u8> {
    format!("${}\r\n{s}\r\n", s.len()).into_bytes()
}

/// Both libraries work on `c` (after `add` ran once with 5).
fn check_libraries(c: &mut RawConn) {
    assert_eq!(c.cmd_str(&["FCALL", "add", "1", "n", "2"]), b":7\r\n");
    assert_eq!(c.cmd_str(&["FCALL_RO", "peek", "1", "n"]), bulk("7"));
    assert_eq!(
        c.cmd_str(&["FCALL", "hello", "0", "x"]),
        bulk("hello x and a long enough text to be compressed")
    );
    let list = c.cmd_str(&["FUNCTION", "LIST", "LIBRARYNAME", "liba", "WITHCODE"]);
    assert!(list.windows(LIB_A.len()).any(|w| w == LIB_A.as_bytes()));
    assert!(list.windows(5).any(|w| w == b"reads"));
}

fn load_libraries(c: &mut RawConn) {
    assert_eq!(c.cmd_str(&["FUNCTION", "LOAD", LIB_A]), bulk("liba"));
    assert_eq!(c.cmd_str(&["FUNCTION", "LOAD", LIB_B]), bulk("libb"));
    assert_eq!(c.cmd_str(&["FCALL", "add", "1", "n", "5"]), b":5\r\n");
}

#[test]
fn rdb_files_with_functions_load_both_ways() {
    if !common::redis_available() || common::testing_real_redis() {
        eprintln!("SKIPPED: needs redis-server on PATH and the Tessera binary");
        return;
    }
    // Tessera writes, Redis loads.
    let dir = tmp_dir("rdb-t2r");
    let d = dir.to_str().unwrap();
    {
        let t = Server::tessera(&["--shards", "2", "--dir", d, "--dbfilename", "f.rdb"]);
        let mut c = t.raw();
        load_libraries(&mut c);
        assert_eq!(c.cmd_str(&["SAVE"]), b"+OK\r\n");
    }
    {
        let r = Server::redis(&["--dir", d, "--dbfilename", "f.rdb"]);
        check_libraries(&mut r.raw());
    }
    // Redis writes, Tessera loads.
    let dir2 = tmp_dir("rdb-r2t");
    let d2 = dir2.to_str().unwrap();
    {
        let r = Server::redis(&["--dir", d2, "--dbfilename", "f.rdb"]);
        let mut c = r.raw();
        load_libraries(&mut c);
        assert_eq!(c.cmd_str(&["SAVE"]), b"+OK\r\n");
    }
    {
        let t = Server::tessera(&["--shards", "2", "--dir", d2, "--dbfilename", "f.rdb"]);
        check_libraries(&mut t.raw());
    }
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&dir2);
}

#[test]
fn functions_survive_aof_replay_and_rewrites() {
    if common::testing_real_redis() {
        return;
    }
    for preamble in ["yes", "no"] {
        let dir = tmp_dir(&format!("aof-{preamble}"));
        let d = dir.to_str().unwrap();
        let args = [
            "--shards",
            "2",
            "--dir",
            d,
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--aof-use-rdb-preamble",
            preamble,
        ];
        {
            let t = Server::tessera(&args);
            let mut c = t.raw();
            load_libraries(&mut c);
            assert_eq!(
                c.cmd_str(&[
                    "FUNCTION",
                    "LOAD",
                    "#!lua name=gone\nredis.register_function('g', function() return 1 end)"
                ]),
                bulk("gone")
            );
            assert_eq!(c.cmd_str(&["FUNCTION", "DELETE", "gone"]), b"+OK\r\n");
        }
        {
            // Replayed from the incr file.
            let t = Server::tessera(&args);
            let mut c = t.raw();
            check_libraries(&mut c);
            assert_eq!(
                c.cmd_str(&["FCALL", "g", "0"]),
                b"-ERR Function not found\r\n"
            );
            assert_eq!(c.cmd_str(&["BGREWRITEAOF"]).first(), Some(&b'+'));
            let mut done = false;
            for _ in 0..500 {
                let info = c.cmd_str(&["INFO", "persistence"]);
                let s = String::from_utf8_lossy(&info);
                if s.contains("aof_rewrite_in_progress:0") && s.contains("aof_rewrites:1") {
                    done = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(done, "the rewrite finished");
        }
        {
            // From the rewritten base only (FUNCTION2 opcodes, or FUNCTION
            // LOAD commands without the preamble).
            let t = Server::tessera(&args);
            let mut c = t.raw();
            assert_eq!(c.cmd_str(&["FCALL", "add", "1", "n", "0"]), b":7\r\n");
            assert_eq!(c.cmd_str(&["SET", "n", "5"]), b"+OK\r\n");
            check_libraries(&mut c);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A key on `shard` of `nshards`.
fn key_on(shard: usize, nshards: usize, prefix: &str) -> String {
    (0..10_000)
        .map(|n| format!("{prefix}{n}"))
        .find(|k| commands::table::shard_of(k.as_bytes(), nshards) == shard)
        .expect("a key on the shard")
}

/// A connection whose home thread is not the one owning `busy_key`: a
/// script in MULTI/EXEC may touch undeclared keys of its own shard only
/// (it cannot run again wider there), which tells where it lives.
fn connection_off(s: &Server, busy_key: &str) -> RawConn {
    for _ in 0..64 {
        let mut c = s.raw();
        assert_eq!(c.cmd_str(&["MULTI"]), b"+OK\r\n");
        let script = "return redis.pcall('exists', ARGV[1])";
        assert_eq!(c.cmd_str(&["EVAL", script, "0", busy_key]), b"+QUEUED\r\n");
        if c.cmd_str(&["EXEC"]).starts_with(b"*1\r\n-") {
            return c;
        }
    }
    panic!("no connection landed on another thread");
}

/// Waits (bounded) until a script is busy (FUNCTION STATS, which runs on
/// the connection's own thread, shows it), then returns the reply to a
/// command on `key`'s shard (`-BUSY`). A command sent to the shard before
/// the script is busy would wait behind it.
fn wait_busy(c: &mut RawConn, key: &str) -> Vec<u8> {
    for _ in 0..2000 {
        let r = c.cmd_str(&["FUNCTION", "STATS"]);
        if r.starts_with(b"-BUSY") || !r.windows(5).any(|w| w == b"$-1\r\n") {
            return c.cmd_str(&["GET", key]);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("the script never became busy");
}

#[test]
fn script_kill_and_function_kill_from_another_thread() {
    if common::testing_real_redis() {
        return;
    }
    let mut s = Server::tessera(&["--shards", "2", "--shard-consolidation", "no"]);
    let busy_key = key_on(0, 2, "spin");
    let other_key = key_on(1, 2, "free");
    let mut killer = connection_off(&s, &busy_key);
    assert_eq!(
        killer.cmd_str(&["CONFIG", "SET", "busy-reply-threshold", "50"]),
        b"+OK\r\n"
    );
    assert_eq!(
        killer.cmd_str(&["SCRIPT", "KILL"]),
        b"-NOTBUSY No scripts in execution right now.\r\n"
    );

    // An EVAL that never ends, killed.
    let mut caller = s.raw();
    caller.set_reply_timeout(Duration::from_secs(60));
    caller.send(&encode_command(&[
        b"EVAL",
        b"local i = 0 while true do i = i + 1 end",
        b"1",
        busy_key.as_bytes(),
    ]));
    assert_eq!(
        wait_busy(&mut killer, &busy_key),
        b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n"
    );
    // Other shards keep being served.
    assert_eq!(killer.cmd_str(&["SET", &other_key, "1"]), b"+OK\r\n");
    assert_eq!(
        killer.cmd_str(&["FUNCTION", "KILL"]),
        b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n"
    );
    assert_eq!(
        killer.cmd_str(&["FUNCTION", "STATS"]),
        b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n"
    );
    assert_eq!(killer.cmd_str(&["SCRIPT", "KILL"]), b"+OK\r\n");
    let reply = String::from_utf8(caller.read_reply()).unwrap();
    assert!(
        reply.starts_with("-ERR Script killed by user with SCRIPT KILL... script: ")
            && reply.ends_with(", on @user_script:1.\r\n"),
        "{reply}"
    );
    // The shard serves again, the caller too.
    assert_eq!(killer.cmd_str(&["SET", &busy_key, "x"]), b"+OK\r\n");
    assert_eq!(caller.cmd_str(&["GET", &busy_key]), bulk("x"));

    // A pcall cannot swallow the kill.
    caller.send(&encode_command(&[
        b"EVAL",
        b"while true do pcall(function() while true do end end) end",
        b"1",
        busy_key.as_bytes(),
    ]));
    wait_busy(&mut killer, &busy_key);
    assert_eq!(killer.cmd_str(&["SCRIPT", "KILL"]), b"+OK\r\n");
    assert!(caller
        .read_reply()
        .starts_with(b"-ERR Script killed by user"));

    // A function, killed by FUNCTION KILL (SCRIPT KILL names it).
    assert_eq!(
        killer.cmd_str(&[
            "FUNCTION",
            "LOAD",
            "#!lua name=spin\nredis.register_function('spin', function(k) while true do end end)"
        ]),
        bulk("spin")
    );
    caller.send(&encode_command(&[
        b"FCALL",
        b"spin",
        b"1",
        busy_key.as_bytes(),
    ]));
    assert_eq!(
        wait_busy(&mut killer, &busy_key),
        b"-BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.\r\n"
    );
    let stats = String::from_utf8(killer.cmd_str(&["FUNCTION", "STATS"])).unwrap();
    assert!(
        stats.starts_with("*4\r\n$14\r\nrunning_script\r\n*6\r\n$4\r\nname\r\n$4\r\nspin\r\n$7\r\ncommand\r\n*4\r\n$5\r\nFCALL\r\n$4\r\nspin\r\n$1\r\n1\r\n"),
        "{stats}"
    );
    assert_eq!(
        killer.cmd_str(&["SCRIPT", "KILL"]),
        b"-BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.\r\n"
    );
    assert_eq!(killer.cmd_str(&["FUNCTION", "KILL"]), b"+OK\r\n");
    let reply = caller.read_reply();
    assert_eq!(
        reply,
        b"-ERR Script killed by user with SCRIPT KILL... script: spin, on @user_function:2.\r\n"
    );

    // A script that wrote cannot be killed.
    caller.send(&encode_command(&[
        b"EVAL",
        b"redis.call('set', KEYS[1], 'w') while true do end",
        b"1",
        busy_key.as_bytes(),
    ]));
    wait_busy(&mut killer, &busy_key);
    let unkillable: &[u8] = b"-UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.\r\n";
    assert_eq!(killer.cmd_str(&["SCRIPT", "KILL"]), unkillable);
    assert_eq!(killer.cmd_str(&["FUNCTION", "KILL"]), unkillable);
    // The other shard is still served.
    assert_eq!(killer.cmd_str(&["GET", &other_key]), bulk("1"));
    // Only SHUTDOWN NOSAVE stops the server, and the script with it.
    assert_eq!(
        killer.cmd_str(&["SHUTDOWN"]),
        b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n"
    );
    killer.send(&encode_command(&[b"SHUTDOWN", b"NOSAVE"]));
    let mut stopped = false;
    for _ in 0..1000 {
        if !s.is_running() {
            stopped = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(stopped, "SHUTDOWN NOSAVE stopped the server");
}

/// `rdb_changes_since_last_save` of `c`.
fn changes(c: &mut RawConn) -> u64 {
    let info = c.cmd_str(&["INFO", "persistence"]);
    let text = String::from_utf8_lossy(&info);
    text.lines()
        .find_map(|l| l.strip_prefix("rdb_changes_since_last_save:"))
        .expect("rdb_changes_since_last_save in INFO")
        .trim()
        .parse()
        .unwrap()
}

/// FUNCTION LOAD [REPLACE], DELETE, FLUSH [SYNC|ASYNC] and RESTORE
/// [APPEND|REPLACE|FLUSH] each count one change in
/// `rdb_changes_since_last_save` when they succeed, none when they fail
/// (Redis's `server.dirty++`), beside redis-server; SAVE starts the count
/// again. Each step: the command, its reply's first byte, the changes it
/// adds.
#[test]
fn function_changes_count_as_redis_counts_them() {
    let mut servers = vec![Server::tessera(&["--shards", "2", "--save", ""])];
    if common::redis_available() && !common::testing_real_redis() {
        servers.push(Server::redis(&["--save", ""]));
    }
    for s in servers {
        let flavor = s.flavor();
        let mut c = s.raw();
        let step = |c: &mut RawConn, args: &[&[u8]], first: u8, added: u64| {
            let before = changes(c);
            let r = c.cmd(args);
            assert_eq!(r[0], first, "{flavor:?} {}", common::escape(&r, 200));
            assert_eq!(
                changes(c) - before,
                added,
                "{flavor:?}: {:?}",
                String::from_utf8_lossy(args[1])
            );
            r
        };
        let (a, b) = (LIB_A.as_bytes(), LIB_B.as_bytes());
        step(&mut c, &[b"FUNCTION", b"LOAD", a], b'$', 1);
        step(&mut c, &[b"FUNCTION", b"LOAD", a], b'-', 0);
        step(&mut c, &[b"FUNCTION", b"LOAD", b"REPLACE", a], b'$', 1);
        step(&mut c, &[b"FUNCTION", b"LOAD", b], b'$', 1);
        step(&mut c, &[b"FUNCTION", b"DELETE", b"nolib"], b'-', 0);
        step(&mut c, &[b"FUNCTION", b"DELETE", b"libb"], b'+', 1);
        let dump = step(&mut c, &[b"FUNCTION", b"DUMP"], b'$', 0);
        let payload = common::reply_payload(&dump).unwrap();
        step(&mut c, &[b"FUNCTION", b"RESTORE", &payload], b'-', 0);
        step(
            &mut c,
            &[b"FUNCTION", b"RESTORE", &payload, b"REPLACE"],
            b'+',
            1,
        );
        step(
            &mut c,
            &[b"FUNCTION", b"RESTORE", &payload, b"FLUSH"],
            b'+',
            1,
        );
        step(&mut c, &[b"FUNCTION", b"RESTORE", b"bad"], b'-', 0);
        step(&mut c, &[b"FUNCTION", b"FLUSH"], b'+', 1);
        step(
            &mut c,
            &[b"FUNCTION", b"RESTORE", &payload, b"APPEND"],
            b'+',
            1,
        );
        step(&mut c, &[b"FUNCTION", b"FLUSH", b"ASYNC"], b'+', 1);
        // Nothing to flush: still a change in Redis.
        step(&mut c, &[b"FUNCTION", b"FLUSH", b"SYNC"], b'+', 1);
        step(&mut c, &[b"FUNCTION", b"FLUSH", b"NOW"], b'-', 0);
        step(&mut c, &[b"FUNCTION", b"LOAD", a], b'$', 1);
        assert_eq!(c.cmd_str(&["SAVE"]), b"+OK\r\n");
        assert_eq!(changes(&mut c), 0, "{flavor:?}: after SAVE");
        step(&mut c, &[b"FUNCTION", b"DELETE", b"liba"], b'+', 1);
    }
}
