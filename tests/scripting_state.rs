//! Scripts against the server's state, through the real binary, as Redis
//! 7.0's unit/scripting checks it: too few good replicas (NOREPLICAS up
//! front for a script that may write, and on a write inside a script
//! without a shebang), `maxmemory` for a script run on gathered copies,
//! the error statistics of a call rejected inside a script (counted once,
//! whether `pcall` catches it or not), and `used_memory_lua` counting only
//! the EVAL VMs (functions have their own, `used_memory_vm_functions`),
//! and a failed save (MISCONF: up front, or on a script's first write).
//! Refusals up front are rejected calls whether a script's keys share a
//! shard or not.
//!
//! Validate against Redis: `TESSERA_TEST_BIN=/usr/bin/redis-server cargo
//! test --test scripting_state`.

mod common;

use common::{testing_real_redis, Server};

fn server(shards: &str) -> Server {
    if testing_real_redis() {
        Server::tessera(&[])
    } else {
        Server::tessera(&["--shards", shards])
    }
}

fn eval(c: &mut redis::Connection, body: &str, keys: &[&str]) -> redis::RedisResult<redis::Value> {
    redis::cmd("EVAL")
        .arg(body)
        .arg(keys.len())
        .arg(keys)
        .query(c)
}

/// The error code of a failed call, or "" if it succeeded.
fn code(r: redis::RedisResult<redis::Value>) -> String {
    match r {
        Ok(_) => String::new(),
        Err(e) => e.code().unwrap_or("").to_string(),
    }
}

fn config_set(c: &mut redis::Connection, name: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(c)
        .unwrap();
}

/// Redis's "not enough good replicas": with min-replicas-to-write unmet
/// (no replica at all), right after the CONFIG SET (no cron tick between):
/// a script declared read-only runs; one without a shebang runs until it
/// writes; one with a shebang and without `no-writes`, and a function
/// without it, are refused before running.
#[test]
fn too_few_good_replicas_refuse_scripts_that_may_write() {
    let srv = server("2");
    let mut c = srv.conn();
    let _: () = redis::cmd("SET").arg("x").arg("v").query(&mut c).unwrap();
    let lib = "#!lua name=nore\n\
               redis.register_function('w', function(k) return redis.call('get', k[1]) end)\n\
               redis.register_function{function_name='r', callback=function(k) return redis.call('get', k[1]) end, flags={'no-writes'}}";
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(lib)
        .query(&mut c)
        .unwrap();
    config_set(&mut c, "min-replicas-to-write", "1");
    let e = redis::cmd("SET")
        .arg("y")
        .arg(1)
        .query::<()>(&mut c)
        .unwrap_err();
    assert_eq!(e.code(), Some("NOREPLICAS"), "{e}");
    let get = "return redis.call('get', KEYS[1])";
    let ro = format!("#!lua flags=no-writes\n{get}");
    assert_eq!(code(eval(&mut c, &ro, &["x"])), "");
    assert_eq!(code(eval(&mut c, get, &["x"])), "");
    assert_eq!(
        code(eval(&mut c, &format!("#!lua\n{get}"), &["x"])),
        "NOREPLICAS"
    );
    let set = "return redis.call('set', KEYS[1], 1)";
    let e = eval(&mut c, set, &["x"]).unwrap_err();
    assert_eq!(e.code(), Some("NOREPLICAS"), "{e}");
    assert!(
        e.to_string().contains("Not enough good replicas to write."),
        "{e}"
    );
    // pcall sees the error as a table.
    let caught = "local t = redis.pcall('set', KEYS[1], 1); return t['err']";
    let v: String = redis::cmd("EVAL")
        .arg(caught)
        .arg(1)
        .arg("x")
        .query(&mut c)
        .unwrap();
    assert_eq!(v, "NOREPLICAS Not enough good replicas to write.");
    let fcall = |c: &mut redis::Connection, f: &str| -> redis::RedisResult<redis::Value> {
        redis::cmd("FCALL").arg(f).arg(1).arg("x").query(c)
    };
    assert_eq!(code(fcall(&mut c, "w")), "NOREPLICAS");
    assert_eq!(code(fcall(&mut c, "r")), "");
    // And writes work again as soon as the setting is undone.
    config_set(&mut c, "min-replicas-to-write", "0");
    assert_eq!(code(eval(&mut c, set, &["x"])), "");
    assert_eq!(code(fcall(&mut c, "w")), "");
}

/// Redis's "Script - disallow write on OOM": a script that declares no key
/// and writes one that lives on another shard runs again on gathered
/// copies (`wide`); there it is still refused when the server is over
/// `maxmemory`. Every key of several is tried, so that some live on a
/// shard other than the connection's.
#[test]
fn a_script_on_gathered_copies_is_refused_over_maxmemory() {
    let srv = server("4");
    let mut c = srv.conn();
    config_set(&mut c, "maxmemory", "1");
    for k in ["a", "b", "c", "d", "e", "f", "g", "h", "x", "y"] {
        let body = format!("return redis.call('set', '{k}', 1)");
        let e = eval(&mut c, &body, &[]).unwrap_err();
        assert!(
            e.to_string()
                .contains("command not allowed when used memory"),
            "{k}: {e}"
        );
        // Declared keys across shards run on copies too.
        let e = eval(
            &mut c,
            "return redis.call('set', KEYS[1], 1)",
            &[k, "zz", "q"],
        )
        .unwrap_err();
        assert_eq!(e.code(), Some("OOM"), "{k}: {e}");
        let e = eval(&mut c, "#!lua\nreturn 1", &[k, "zz", "q"]).unwrap_err();
        assert_eq!(e.code(), Some("OOM"), "{k}: {e}");
    }
    config_set(&mut c, "maxmemory", "0");
    let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 0);
}

/// INFO errorstats, total_error_replies and the commandstats of `cmds`
/// (calls, rejected_calls, failed_calls), one line each.
fn error_stats(c: &mut redis::Connection, cmds: &[&str]) -> String {
    let mut lines = Vec::new();
    let errs: String = redis::cmd("INFO").arg("errorstats").query(c).unwrap();
    let mut errs: Vec<&str> = errs
        .lines()
        .filter(|l| l.starts_with("errorstat_"))
        .collect();
    errs.sort_unstable();
    lines.extend(errs.iter().map(|l| l.to_string()));
    lines.push(format!(
        "total_error_replies:{}",
        common::info_field(c, "stats", "total_error_replies")
    ));
    let stats: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
    for cmd in cmds {
        let prefix = format!("cmdstat_{cmd}:");
        let Some(l) = stats.lines().find_map(|l| l.strip_prefix(prefix.as_str())) else {
            continue;
        };
        let field = |name: &str| {
            l.split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
                .unwrap_or("?")
                .to_string()
        };
        lines.push(format!(
            "{cmd}:{},{},{}",
            field("calls"),
            field("rejected_calls"),
            field("failed_calls")
        ));
    }
    lines.join(" ")
}

/// Redis's "Consistent eval error reporting" and more: an error of a call
/// inside a script (its reply, or its rejection before it ran) counts
/// once in INFO errorstats and total_error_replies, when the call ran, and
/// as the called command's failed or rejected call; the script's own
/// error reply then counts as its failed call but not again as an error,
/// and a `pcall` that catches the error leaves the script's call a
/// success. (Figures taken from Redis 7.0.15.)
#[test]
fn errors_inside_scripts_count_once() {
    let srv = server("2");
    let mut c = srv.conn();
    let cmds = ["set", "get", "select", "geoadd", "incr", "eval", "eval_ro"];
    let check = |c: &mut redis::Connection, body: &str, ro: bool, keys: &[&str], want: &str| {
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(c).unwrap();
        let _ = redis::cmd(if ro { "EVAL_RO" } else { "EVAL" })
            .arg(body)
            .arg(keys.len())
            .arg(keys)
            .query::<redis::Value>(c);
        assert_eq!(error_stats(c, &cmds), want, "{body}");
    };
    config_set(&mut c, "maxmemory", "1");
    check(
        &mut c,
        "return redis.call('set','x','y')",
        false,
        &["x"],
        "errorstat_OOM:count=1 total_error_replies:1 set:0,1,0 eval:1,0,1",
    );
    check(
        &mut c,
        "local t = redis.pcall('set','x','y') return 1",
        false,
        &["x"],
        "errorstat_OOM:count=1 total_error_replies:1 set:0,1,0 eval:1,0,0",
    );
    check(
        &mut c,
        "return redis.pcall('set','x','y')",
        false,
        &["x"],
        "errorstat_OOM:count=1 total_error_replies:1 set:0,1,0 eval:1,0,1",
    );
    config_set(&mut c, "maxmemory", "0");
    check(
        &mut c,
        "return redis.call('select',99)",
        false,
        &[],
        "errorstat_ERR:count=1 total_error_replies:1 select:1,0,1 eval:1,0,1",
    );
    check(
        &mut c,
        "redis.pcall('select',99) return 1",
        false,
        &[],
        "errorstat_ERR:count=1 total_error_replies:1 select:1,0,1 eval:1,0,0",
    );
    check(
        &mut c,
        "redis.pcall('set','x','y') return 1",
        true,
        &["x"],
        "errorstat_ERR:count=1 total_error_replies:1 set:0,1,0 eval_ro:1,0,0",
    );
    let _: () = redis::cmd("SET")
        .arg("Sicily")
        .arg(1)
        .query(&mut c)
        .unwrap();
    check(
        &mut c,
        "return redis.call('GEOADD', 'Sicily', '13.361389', '38.115556', 'Palermo')",
        false,
        &["Sicily"],
        "errorstat_WRONGTYPE:count=1 total_error_replies:1 geoadd:1,0,1 eval:1,0,1",
    );
    // Unknown commands and wrong arities are rejections too; an error
    // table the script makes itself counts when replied.
    check(
        &mut c,
        "redis.pcall('nosuchcmd') return redis.pcall('get')",
        false,
        &[],
        "errorstat_ERR:count=2 total_error_replies:2 get:0,1,0 eval:1,0,1",
    );
    check(
        &mut c,
        "redis.pcall('select',99) return redis.error_reply('MY x')",
        false,
        &[],
        "errorstat_ERR:count=1 errorstat_MY:count=1 total_error_replies:2 select:1,0,1 eval:1,0,1",
    );
    // Error replies below the top of the script's reply count as errors
    // and fail the script; a `pcall` error, counted already, does not
    // count again but fails the script too (Redis's afterErrorReply). A
    // `pcall` that caught a rejection leaves the script a success.
    check(
        &mut c,
        "return {1, redis.error_reply('MYERR x'), {err='E2 y'}, {3, {err='DEEP z'}}}",
        false,
        &[],
        "errorstat_DEEP:count=1 errorstat_E2:count=1 errorstat_MYERR:count=1 \
         total_error_replies:3 eval:1,0,1",
    );
    check(
        &mut c,
        "local e = redis.pcall('INCR', KEYS[1], 'extra') return {e}",
        false,
        &["n"],
        "errorstat_ERR:count=1 total_error_replies:1 incr:0,1,0 eval:1,0,1",
    );
    check(
        &mut c,
        "redis.pcall('INCR', KEYS[1], 'extra') return 1",
        false,
        &["n"],
        "errorstat_ERR:count=1 total_error_replies:1 incr:0,1,0 eval:1,0,0",
    );
    check(
        &mut c,
        "redis.pcall('INCR', KEYS[1], 'extra') redis.call('SET', KEYS[1], '1') return 1",
        false,
        &["n"],
        "errorstat_ERR:count=1 total_error_replies:1 set:1,0,0 incr:0,1,0 eval:1,0,0",
    );
    let _: () = redis::cmd("SET").arg("s").arg("x").query(&mut c).unwrap();
    check(
        &mut c,
        "local e = redis.pcall('INCR', KEYS[1]) return {e}",
        false,
        &["s"],
        "errorstat_ERR:count=1 total_error_replies:1 incr:1,0,1 eval:1,0,1",
    );
}

/// A script refused up front as Redis's processCommand refuses a write
/// command (over `maxmemory`, too few good replicas) is a rejected call:
/// `rejected_calls`, not `calls` or `failed_calls`, and one error in INFO
/// errorstats. (Figures taken from Redis 7.0.15.)
#[test]
fn scripts_refused_up_front_are_rejected_calls() {
    let srv = server("2");
    let mut c = srv.conn();
    let cmds = ["eval", "eval_ro"];
    let run = |c: &mut redis::Connection, cmd: &str, body: &str| {
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(c).unwrap();
        let r = redis::cmd(cmd).arg(body).arg(0).query::<redis::Value>(c);
        (code(r), error_stats(c, &cmds))
    };
    let _: () = redis::cmd("SET").arg("x").arg("v").query(&mut c).unwrap();
    config_set(&mut c, "maxmemory", "1");
    assert_eq!(
        run(&mut c, "EVAL", "#!lua\nreturn 1"),
        (
            "OOM".to_string(),
            "errorstat_OOM:count=1 total_error_replies:1 eval:0,1,0".to_string()
        )
    );
    config_set(&mut c, "maxmemory", "0");
    config_set(&mut c, "min-replicas-to-write", "1");
    assert_eq!(
        run(&mut c, "EVAL", "#!lua\nreturn 1"),
        (
            "NOREPLICAS".to_string(),
            "errorstat_NOREPLICAS:count=1 total_error_replies:1 eval:0,1,0".to_string()
        )
    );
    assert_eq!(
        run(&mut c, "EVAL_RO", "#!lua\nreturn 1"),
        (
            "NOREPLICAS".to_string(),
            "errorstat_NOREPLICAS:count=1 total_error_replies:1 eval_ro:0,1,0".to_string()
        )
    );
    // One that runs is a call.
    assert_eq!(
        run(&mut c, "EVAL", "#!lua flags=no-writes\nreturn 1"),
        (
            String::new(),
            "total_error_replies:0 eval:1,0,0".to_string()
        )
    );
    config_set(&mut c, "min-replicas-to-write", "0");
}

/// A script across shards (in place, or on gathered copies) that replies
/// an error below its reply's top: counted, and a failed call, in every
/// layout. (Figures taken from Redis 7.0.15.)
#[test]
fn cross_shard_scripts_count_errors_below_the_top() {
    for layout in layouts() {
        let srv = Server::tessera(layout);
        let mut c = srv.conn();
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
        let body = "for i = 1, #KEYS do redis.call('SET', KEYS[i], i) end \
                    return {#KEYS, redis.error_reply('NESTED x')}";
        let _ = redis::cmd("EVAL")
            .arg(body)
            .arg(KEYS8.len())
            .arg(&KEYS8)
            .query::<redis::Value>(&mut c);
        let _ = redis::cmd("EVAL")
            .arg("return {#KEYS}")
            .arg(KEYS8.len())
            .arg(&KEYS8)
            .query::<redis::Value>(&mut c);
        assert_eq!(
            error_stats(&mut c, &["eval"]),
            "errorstat_NESTED:count=1 total_error_replies:1 eval:2,0,1",
            "{layout:?}"
        );
    }
}

/// Shard layouts in which scripts over [`KEYS8`] run across shards: on
/// copies, or in place on co-hosted shards. (One server for real Redis.)
fn layouts() -> &'static [&'static [&'static str]] {
    if testing_real_redis() {
        &[&[]]
    } else {
        &[
            &["--shards", "2"],
            &["--shards", "2", "--shard-consolidation", "no"],
            &["--shards", "16"],
            &["--shards", "16", "--shard-consolidation", "no"],
        ]
    }
}

/// Eight keys: on both of two shards, on several of sixteen.
const KEYS8: [&str; 8] = ["a", "b", "c", "d", "e", "f", "g", "h"];

/// The same refusals for scripts and functions whose keys span shards
/// (run on gathered copies under a transaction, or in place on co-hosted
/// shards): rejected calls too, in every layout. (Figures taken from
/// Redis 7.0.15, where the keys' spread makes no difference.)
#[test]
fn cross_shard_scripts_refused_up_front_are_rejected_calls() {
    let keys = KEYS8;
    let cmds = ["eval", "eval_ro", "fcall"];
    for layout in layouts() {
        let srv = Server::tessera(layout);
        let mut c = srv.conn();
        for k in keys {
            let _: () = redis::cmd("SET").arg(k).arg("v").query(&mut c).unwrap();
        }
        let lib = "#!lua name=xs\n\
                   redis.register_function('w', function(k) return #k end)";
        let _: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg(lib)
            .query(&mut c)
            .unwrap();
        let refused = |c: &mut redis::Connection, code_: &str| {
            let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(c).unwrap();
            for cmd in ["EVAL", "EVAL_RO"] {
                let r = redis::cmd(cmd)
                    .arg("#!lua\nreturn 1")
                    .arg(keys.len())
                    .arg(&keys[..])
                    .query::<redis::Value>(c);
                assert_eq!(code(r), code_, "{cmd} {layout:?}");
            }
            let r = redis::cmd("FCALL")
                .arg("w")
                .arg(keys.len())
                .arg(&keys[..])
                .query::<redis::Value>(c);
            assert_eq!(code(r), code_, "FCALL {layout:?}");
            // One that may run does, and is a call.
            let r = redis::cmd("EVAL")
                .arg("#!lua flags=no-writes\nreturn redis.call('get', KEYS[8])")
                .arg(keys.len())
                .arg(&keys[..])
                .query::<redis::Value>(c);
            assert_eq!(code(r), "", "{layout:?}");
            error_stats(c, &cmds)
        };
        config_set(&mut c, "maxmemory", "1");
        assert_eq!(
            refused(&mut c, "OOM"),
            "errorstat_OOM:count=3 total_error_replies:3 eval:1,1,0 eval_ro:0,1,0 fcall:0,1,0",
            "{layout:?}"
        );
        config_set(&mut c, "maxmemory", "0");
        config_set(&mut c, "min-replicas-to-write", "1");
        assert_eq!(
            refused(&mut c, "NOREPLICAS"),
            "errorstat_NOREPLICAS:count=3 total_error_replies:3 eval:1,1,0 eval_ro:0,1,0 \
             fcall:0,1,0",
            "{layout:?}"
        );
        config_set(&mut c, "min-replicas-to-write", "0");
    }
}

/// After a failed save, with `stop-writes-on-bgsave-error yes` and save
/// rules set (Redis's MISCONF), as Redis 7.0.15 answers (replies and
/// counts taken from it): a script with a shebang that may write (even
/// `allow-oom`), a function without `no-writes` (even by FCALL_RO, even
/// one that only reads) and EVAL_RO of a writing shebang are rejected
/// calls; a script without a shebang runs, and its first write fails
/// with MISCONF (the script's error, or `pcall`'s error table), also
/// inside MULTI/EXEC; read-only scripts and functions run. A script that
/// may write is refused as it is queued in MULTI, and EXEC of one queued
/// before is refused whole (EXECABORT). Keys on several shards, in every
/// layout.
#[test]
fn scripts_after_a_failed_save_get_misconf() {
    let misconf = "MISCONF Redis is configured to save RDB snapshots, but it's currently \
                   unable to persist to disk. Commands that may modify the data set are \
                   disabled, because this instance is configured to report errors during \
                   writes if RDB snapshotting fails (stop-writes-on-bgsave-error option). \
                   Please check the Redis logs for details about the RDB error.";
    let write = "return redis.call('set', KEYS[1], 'z')";
    let lib = "#!lua name=mc\n\
               redis.register_function('w', function(k) return redis.call('set', k[1], 'x') end)\n\
               redis.register_function('r0', function(k) return redis.call('get', k[1]) end)\n\
               redis.register_function{function_name='r', \
                   callback=function(k) return redis.call('get', k[1]) end, flags={'no-writes'}}";
    for layout in layouts() {
        let dir = common::unique_temp_dir("misconf");
        let mut args = vec![
            "--dir",
            dir.to_str().unwrap(),
            "--save",
            "3600 1",
            "--stop-writes-on-bgsave-error",
            "yes",
        ];
        args.extend_from_slice(layout);
        let srv = Server::tessera(&args);
        let mut c = srv.conn();
        for k in KEYS8 {
            let _: () = redis::cmd("SET").arg(k).arg("v").query(&mut c).unwrap();
        }
        let _: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg(lib)
            .query(&mut c)
            .unwrap();
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(write)
            .query(&mut c)
            .unwrap();
        let sha_shebang: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg("#!lua\nreturn 1")
            .query(&mut c)
            .unwrap();
        // A transaction queued before the save fails.
        let mut queued = srv.raw();
        assert_eq!(queued.cmd_str(&["MULTI"]), b"+OK\r\n");
        assert_eq!(
            queued.cmd_str(&["EVAL", "#!lua flags=no-writes\nreturn 1", "0"]),
            b"+QUEUED\r\n"
        );
        assert_eq!(
            queued.cmd_str(&["EVAL", "#!lua\nreturn 1", "0"]),
            b"+QUEUED\r\n"
        );
        // Redis chdir()s into `dir`: its saves fail once it is gone, as
        // Tessera's do.
        std::fs::remove_dir_all(&dir).unwrap();
        let _: String = redis::cmd("BGSAVE").query(&mut c).unwrap();
        common::wait_for("the failed save", || {
            common::info_field(&mut c, "persistence", "rdb_last_bgsave_status") == "err"
        });
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
        let mut r = srv.raw();
        let with_keys = |r: &mut common::RawConn, cmd: &str, body: &str| {
            let mut a = vec![cmd, body, "8"];
            a.extend(KEYS8);
            String::from_utf8(r.cmd_str(&a)).unwrap()
        };
        let rejected = format!("-{misconf}\r\n");
        let in_script = format!("-{misconf} script: {sha}, on @user_script:1.\r\n");
        let v = "$1\r\nv\r\n";
        let cases = [
            ("EVAL", "return redis.call('get', KEYS[1])", v.to_string()),
            ("EVAL", write, in_script.clone()),
            ("EVALSHA", &sha, in_script.clone()),
            (
                "EVAL",
                "local r = redis.pcall('set', KEYS[1], 'z') return r['err']",
                format!("${}\r\n{misconf}\r\n", misconf.len()),
            ),
            ("EVAL", "return redis.call('ping')", "+PONG\r\n".into()),
            (
                "EVAL",
                "#!lua\nreturn redis.call('get', KEYS[1])",
                rejected.clone(),
            ),
            ("EVAL", "#!lua flags=allow-oom\nreturn 1", rejected.clone()),
            (
                "EVAL",
                "#!lua flags=no-writes\nreturn redis.call('get', KEYS[1])",
                v.into(),
            ),
            ("EVAL_RO", "#!lua\nreturn 1", rejected.clone()),
            (
                "EVAL_RO",
                write,
                format!(
                    "-ERR Write commands are not allowed from read-only scripts. \
                     script: {sha}, on @user_script:1.\r\n"
                ),
            ),
            ("FCALL", "w", rejected.clone()),
            ("FCALL", "r", v.into()),
            ("FCALL_RO", "r0", rejected.clone()),
        ];
        for (cmd, body, want) in &cases {
            assert_eq!(
                &with_keys(&mut r, cmd, body),
                want,
                "{cmd} {body} {layout:?}"
            );
        }
        // EXEC of a transaction holding a script that may write is a
        // write command (Redis's `mstate.cmd_flags`): refused whole.
        assert_eq!(
            String::from_utf8(queued.cmd_str(&["EXEC"])).unwrap(),
            format!("-EXECABORT Transaction discarded because of: {misconf}\r\n")
        );
        // Such a script is refused as it is queued, and dooms the
        // transaction.
        assert_eq!(queued.cmd_str(&["MULTI"]), b"+OK\r\n");
        assert_eq!(
            String::from_utf8(queued.cmd_str(&["EVALSHA", &sha_shebang, "0"])).unwrap(),
            rejected
        );
        assert_eq!(
            queued.cmd_str(&["EXEC"]),
            b"-EXECABORT Transaction discarded because of previous errors.\r\n"
        );
        // Inside a transaction: EXEC runs (EVAL is not a write command),
        // the script's write fails.
        assert_eq!(r.cmd_str(&["MULTI"]), b"+OK\r\n");
        assert_eq!(with_keys(&mut r, "EVAL", write), "+QUEUED\r\n");
        assert_eq!(
            String::from_utf8(r.cmd_str(&["EXEC"])).unwrap(),
            format!("*1\r\n{in_script}")
        );
        assert_eq!(
            error_stats(
                &mut c,
                &["eval", "evalsha", "eval_ro", "fcall", "fcall_ro", "set", "exec"]
            ),
            "errorstat_ERR:count=1 errorstat_EXECABORT:count=2 errorstat_MISCONF:count=10 \
             total_error_replies:13 eval:6,2,2 evalsha:1,1,1 eval_ro:1,1,1 fcall:1,1,0 \
             fcall_ro:0,1,0 set:0,5,0 exec:2,1,1",
            "{layout:?}"
        );
        config_set(&mut c, "stop-writes-on-bgsave-error", "no");
        assert_eq!(with_keys(&mut r, "EVAL", write), "+OK\r\n", "{layout:?}");
    }
}

fn memory_field(c: &mut redis::Connection, field: &str) -> u64 {
    common::info_field(c, "memory", field).parse().unwrap()
}

/// SCRIPT FLUSH frees the scripts' VM of a thread whose worker a hub
/// adopted after it ran scripts: the thread sleeps meanwhile and its cron
/// runs on the hub (which drops the hub's VM). Before, such a VM stayed,
/// and counted in `used_memory_lua`, until the worker came back (seen as
/// a flaky `script_flush_resets_the_scripts_vms` beside other tests).
#[test]
fn script_flush_frees_the_vm_of_a_thread_whose_worker_a_hub_adopted() {
    if testing_real_redis() {
        return;
    }
    let srv = Server::tessera(&["--shards", "2", "--shard-consolidation", "no"]);
    // Connections land on both loops; each runs a script on each shard,
    // so both threads make their VM.
    for _ in 0..4 {
        let mut c = srv.conn();
        for k in common::keys_across_shards("k", 2, 2) {
            let body = "local t = {} for i = 1, 1000 do t[i] = i end return #t";
            let n: i64 = redis::cmd("EVAL")
                .arg(body)
                .arg(1)
                .arg(k)
                .query(&mut c)
                .unwrap();
            assert_eq!(n, 1000);
        }
    }
    let mut c = srv.conn();
    let set = ["shard-consolidation", "yes"];
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(&set)
        .query(&mut c)
        .unwrap();
    let before = memory_field(&mut c, "used_memory_lua");
    assert!(before > 128 * 1024, "two VMs: used_memory_lua {before}");
    common::wait_shard_threads(&srv, 1);
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut c).unwrap();
    common::wait_for("the scripts' VMs freed", || {
        memory_field(&mut c, "used_memory_lua") < 64 * 1024
    });
}

/// SCRIPT FLUSH takes every thread's scripts' VM out of `used_memory_lua`
/// at once, as Redis's reset of its one VM does: a stale VM here is
/// dropped later (at its thread's next script or cron, once a second for
/// a thread whose worker a hub runs), and until then it was counted, which
/// failed Redis's unit/scripting "EVAL does not leak in the Lua stack" 1
/// run in 3 (10,000 scripts after a flush, the count over 100 KB). The
/// INFO pipelined behind the flush runs in the same turn of its loop, before
/// any cron: it counted the flushing thread's own VM at least.
#[test]
fn script_flush_uncounts_every_vm_at_once() {
    if testing_real_redis() {
        return;
    }
    for (shards, consolidation) in [("2", "no"), ("2", "yes"), ("16", "no"), ("16", "yes")] {
        let layout = ["--shards", shards, "--shard-consolidation", consolidation];
        let srv = Server::tessera(&layout);
        let mut c = srv.conn();
        for k in common::keys_across_shards("k", 2, shards.parse().unwrap()) {
            let n: i64 = redis::cmd("EVAL")
                .arg("return redis.call('incr', KEYS[1])")
                .arg(1)
                .arg(k)
                .query(&mut c)
                .unwrap();
            assert_eq!(n, 1);
        }
        assert!(memory_field(&mut c, "used_memory_lua") > 0, "{layout:?}");
        let (_, info): ((), String) = redis::pipe()
            .cmd("SCRIPT")
            .arg("FLUSH")
            .cmd("INFO")
            .arg("memory")
            .query(&mut c)
            .unwrap();
        let lua = info
            .lines()
            .find_map(|l| l.strip_prefix("used_memory_lua:"))
            .unwrap_or_else(|| panic!("used_memory_lua in {info}"))
            .trim()
            .to_string();
        assert_eq!(lua, "0", "{layout:?}: the stale VMs are not counted");
        // The next script makes a VM of the new generation, counted.
        let n: i64 = redis::cmd("EVAL")
            .arg("return redis.call('incr', KEYS[1])")
            .arg(1)
            .arg("k")
            .query(&mut c)
            .unwrap();
        assert!(n >= 1);
        let lua = memory_field(&mut c, "used_memory_lua");
        assert!(
            lua > 0 && lua < 64 * 1024,
            "{layout:?}: one fresh VM, {lua}"
        );
    }
}

/// Redis keeps scripts and function libraries in two VMs, and INFO
/// reports them apart: `used_memory_lua` (and `used_memory_vm_eval`) are
/// the scripts' VMs only, `used_memory_vm_functions` the libraries'. A
/// library holding ~320 KB of Lua data (20,000 array slots) weighs on the
/// second, not the first (Redis's unit/scripting bounds the first at 100
/// KB after 10,000 scripts, with its function tests' libraries loaded).
#[test]
fn function_libraries_live_in_their_own_vm() {
    let srv = server("2");
    let mut c = srv.conn();
    let lib = "#!lua name=big\n\
               local t = {}\n\
               for i = 1, 20000 do t[i] = i end\n\
               redis.register_function('big', function() return #t end)";
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(lib)
        .query(&mut c)
        .unwrap();
    for k in ["a", "b", "c", "d"] {
        let n: i64 = redis::cmd("FCALL")
            .arg("big")
            .arg(1)
            .arg(k)
            .query(&mut c)
            .unwrap();
        assert_eq!(n, 20_000);
        let n: i64 = redis::cmd("EVAL")
            .arg("return redis.call('incr', KEYS[1])")
            .arg(1)
            .arg(k)
            .query(&mut c)
            .unwrap();
        assert_eq!(n, 1);
    }
    let lua = memory_field(&mut c, "used_memory_lua");
    let eval = memory_field(&mut c, "used_memory_vm_eval");
    let functions = memory_field(&mut c, "used_memory_vm_functions");
    let total = memory_field(&mut c, "used_memory_vm_total");
    assert_eq!(lua, eval);
    assert!(lua > 0 && lua < 200_000, "used_memory_lua {lua}");
    assert!(functions > 300_000, "used_memory_vm_functions {functions}");
    assert_eq!(total, lua + functions);
}

/// SCRIPT FLUSH resets the scripts' VMs as Redis resets its one: the
/// compiled scripts they held go with them (Redis's "EVAL does not leak in
/// the Lua stack" flushes, then bounds `used_memory_lua`). Tessera drops
/// each thread's VM from its cron, so the figure is awaited.
#[test]
fn script_flush_resets_the_scripts_vms() {
    let srv = server("2");
    let mut c = srv.conn();
    for i in 0..300 {
        let body = format!("local t = {{}} for i = 1, 10 do t[i] = {i} end return #t");
        let _: i64 = redis::cmd("EVAL")
            .arg(body)
            .arg(1)
            .arg(format!("k{i}"))
            .query(&mut c)
            .unwrap();
    }
    let before = memory_field(&mut c, "used_memory_lua");
    assert!(before > 200_000, "used_memory_lua {before}");
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut c).unwrap();
    common::wait_for("the scripts' VMs reset", || {
        memory_field(&mut c, "used_memory_lua") < 64 * 1024
    });
    // Scripts run on fresh VMs.
    let n: i64 = redis::cmd("EVAL")
        .arg("return 7")
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 7);
}
