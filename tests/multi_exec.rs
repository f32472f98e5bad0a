//! MULTI / EXEC / DISCARD / WATCH / UNWATCH as Redis, on a server with
//! several shards: queueing and the replies of EXEC (RESP2 and RESP3, byte
//! for byte where the client library would normalise), errors while
//! queueing and EXECABORT, DISCARD, WATCH invalidation by every kind of
//! change (and by nothing else), SELECT inside MULTI, INFO's counts of
//! the commands EXEC runs. The keys of a test
//! span shards ([`keys_across_shards`]), so every EXEC below runs across
//! them.
//!
//! The isolation and atomicity of multi-shard commands and transactions
//! under concurrency are `tests/transactions.rs`.
//!
//! Validate the tests themselves against Redis (they must all pass there):
//! `TESSERA_TEST_BIN=/usr/bin/redis-server cargo test --test multi_exec`.

mod common;

use common::{assert_bytes, encode_command, escape, Layout, Server};
use redis::Value;

/// Shards of the servers (as `tests/transactions.rs`'s).
const SHARDS: usize = 3;

/// [`SHARDS`] shards, the default threading (Redis standing in for
/// Tessera gets no `--shards`).
fn start() -> Server {
    Layout::new(SHARDS, true).tessera(&[])
}

/// `count` key names starting with `prefix`, any [`SHARDS`] consecutive
/// ones on different shards ([`common::keys_across_shards`]).
fn keys_across_shards(prefix: &str, count: usize) -> Vec<String> {
    common::keys_across_shards(prefix, count, SHARDS)
}

/// Both protocols: a fresh connection, RESP2 or RESP3.
fn both_protocols(srv: &Server) -> [(&'static str, redis::Connection); 2] {
    [("RESP2", srv.conn()), ("RESP3", srv.conn_resp3())]
}

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

#[track_caller]
fn err_text(r: redis::RedisResult<Value>) -> String {
    match r {
        Ok(v) => panic!("expected an error reply, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

/// MULTI replies OK, commands reply QUEUED, EXEC runs them in order (own
/// writes visible, multi-shard commands included) and returns their
/// replies; a runtime error fails only its command.
#[test]
fn multi_exec_queues_and_executes() {
    let srv = start();
    let keys = keys_across_shards("mx:", 3);
    for (proto, mut con) in both_protocols(&srv) {
        let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
        let ok: String = redis::cmd("MULTI").query(&mut con).unwrap();
        assert_eq!(ok, "OK", "{proto}");
        let queue: [&[&str]; 6] = [
            &["SET", &keys[0], "a"],
            &["INCR", &keys[1]],
            &["MSET", &keys[1], "5", &keys[2], "c"],
            &["INCR", &keys[0]],
            &["MGET", &keys[0], &keys[1], &keys[2], "nokey"],
            &["EXISTS", &keys[0], &keys[1], &keys[2]],
        ];
        for args in queue {
            let q: String = redis::cmd(args[0]).arg(&args[1..]).query(&mut con).unwrap();
            assert_eq!(q, "QUEUED", "{proto} {args:?}");
        }
        // Raw value: `query` would turn the error inside the array into Err.
        let got = redis::ConnectionLike::req_command(&mut con, &redis::cmd("EXEC")).unwrap();
        let Value::Array(replies) = got else {
            panic!("{proto}: EXEC replied {got:?}");
        };
        assert_eq!(replies.len(), 6, "{proto}: {replies:?}");
        assert_eq!(replies[0], Value::Okay, "{proto}");
        assert_eq!(replies[1], Value::Int(1), "{proto}");
        assert_eq!(replies[2], Value::Okay, "{proto}");
        match &replies[3] {
            Value::ServerError(e) => assert_eq!(
                e.details(),
                Some("value is not an integer or out of range"),
                "{proto}"
            ),
            other => panic!("{proto}: INCR of a string in EXEC replied {other:?}"),
        }
        assert_eq!(
            replies[4],
            Value::Array(vec![bulk("a"), bulk("5"), bulk("c"), Value::Nil]),
            "{proto}"
        );
        assert_eq!(replies[5], Value::Int(3), "{proto}");

        // The pipeline API of the redis crate, typed.
        let (a, n, vals): (String, i64, Vec<Option<String>>) = redis::pipe()
            .atomic()
            .cmd("GETSET")
            .arg(&keys[0])
            .arg("b")
            .incr(&keys[1], 10)
            .del(&keys[2])
            .ignore()
            .cmd("MGET")
            .arg(&keys)
            .query(&mut con)
            .expect("EXEC");
        assert_eq!((a.as_str(), n), ("a", 15), "{proto}");
        assert_eq!(
            vals,
            vec![Some("b".into()), Some("15".into()), None],
            "{proto}"
        );
        // An empty transaction.
        let ok: String = redis::cmd("MULTI").query(&mut con).unwrap();
        assert_eq!(ok, "OK");
        let got: Value = redis::cmd("EXEC").query(&mut con).unwrap();
        assert_eq!(got, Value::Array(vec![]), "{proto}");
    }
}

/// Errors while queueing (arity, unknown command) make EXEC fail with
/// EXECABORT and run nothing; nesting and misplaced commands are errors.
#[test]
fn multi_errors_and_execabort() {
    let srv = start();
    let keys = keys_across_shards("ab:", 2);
    for (proto, mut con) in both_protocols(&srv) {
        let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
        let e = err_text(redis::cmd("EXEC").query(&mut con));
        assert!(e.contains("EXEC without MULTI"), "{proto}: {e}");
        let e = err_text(redis::cmd("DISCARD").query(&mut con));
        assert!(e.contains("DISCARD without MULTI"), "{proto}: {e}");

        let _: String = redis::cmd("MULTI").query(&mut con).unwrap();
        let e = err_text(redis::cmd("MULTI").query(&mut con));
        assert!(e.contains("MULTI calls can not be nested"), "{proto}: {e}");
        let e = err_text(redis::cmd("WATCH").arg(&keys[0]).query(&mut con));
        assert!(
            e.contains("WATCH inside MULTI is not allowed"),
            "{proto}: {e}"
        );
        let q: String = redis::cmd("MSET")
            .arg(&keys[0])
            .arg("1")
            .arg(&keys[1])
            .arg("1")
            .query(&mut con)
            .unwrap();
        assert_eq!(q, "QUEUED");
        let e = err_text(redis::cmd("SET").arg(&keys[0]).query(&mut con));
        assert!(e.contains("wrong number of arguments"), "{proto}: {e}");
        let e = err_text(redis::cmd("NOSUCHCOMMAND").arg("x").query(&mut con));
        assert!(e.contains("unknown command"), "{proto}: {e}");
        match redis::cmd("EXEC").query::<Value>(&mut con) {
            Err(e) => {
                assert_eq!(e.code(), Some("EXECABORT"), "{proto}: {e}");
                assert!(
                    e.to_string()
                        .contains("Transaction discarded because of previous errors"),
                    "{proto}: {e}"
                );
            }
            Ok(v) => panic!("{proto}: EXEC after queueing errors replied {v:?}"),
        }
        let n: i64 = redis::cmd("EXISTS").arg(&keys).query(&mut con).unwrap();
        assert_eq!(n, 0, "{proto}: an aborted transaction wrote");
        // The connection left MULTI.
        let e = err_text(redis::cmd("EXEC").query(&mut con));
        assert!(e.contains("EXEC without MULTI"), "{proto}: {e}");

        // Through the pipeline API: the whole query fails.
        let r: redis::RedisResult<Value> = redis::pipe()
            .atomic()
            .set(&keys[0], 1)
            .cmd("SET")
            .arg(&keys[1])
            .query(&mut con);
        assert!(r.is_err(), "{proto}: {r:?}");
        let n: i64 = redis::cmd("EXISTS").arg(&keys).query(&mut con).unwrap();
        assert_eq!(n, 0, "{proto}: an aborted transaction wrote");
        let pong: String = redis::cmd("PING").query(&mut con).unwrap();
        assert_eq!(pong, "PONG");
    }
}

/// DISCARD drops the queue (nothing runs) and leaves MULTI and the WATCHes.
#[test]
fn discard_drops_the_queue() {
    let srv = start();
    let keys = keys_across_shards("dis:", 2);
    let mut other = srv.conn();
    for (proto, mut con) in both_protocols(&srv) {
        let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
        redis::cmd("WATCH").arg(&keys).exec(&mut con).unwrap();
        let _: String = redis::cmd("MULTI").query(&mut con).unwrap();
        let q: String = redis::cmd("MSET")
            .arg(&keys[0])
            .arg("x")
            .arg(&keys[1])
            .arg("y")
            .query(&mut con)
            .unwrap();
        assert_eq!(q, "QUEUED");
        let ok: String = redis::cmd("DISCARD").query(&mut con).unwrap();
        assert_eq!(ok, "OK", "{proto}");
        let n: i64 = redis::cmd("EXISTS").arg(&keys).query(&mut con).unwrap();
        assert_eq!(n, 0, "{proto}: a discarded transaction wrote");
        // DISCARD also unwatched: a change by another client does not
        // abort the next transaction.
        redis::cmd("SET")
            .arg(&keys[1])
            .arg("other")
            .exec(&mut other)
            .unwrap();
        let got: Option<(String,)> = redis::pipe()
            .atomic()
            .set(&keys[0], "z")
            .ignore()
            .get(&keys[0])
            .query(&mut con)
            .unwrap();
        assert_eq!(got, Some(("z".to_string(),)), "{proto}");
    }
}

/// WATCH: a change by another connection, on any watched key (on any
/// shard), or by the connection itself, makes EXEC return nil and run
/// nothing; UNWATCH, EXEC and an untouched WATCH behave as in Redis; a
/// change in another database does not count.
#[test]
fn watch_invalidation() {
    let srv = start();
    let keys = keys_across_shards("w:", 3);
    let mut other = srv.conn();
    for (proto, mut con) in both_protocols(&srv) {
        let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
        for (i, touched) in keys.iter().enumerate() {
            // Another client modifies one of the watched keys.
            redis::cmd("WATCH").arg(&keys).exec(&mut con).unwrap();
            redis::cmd("SET")
                .arg(touched)
                .arg(format!("other-{i}"))
                .exec(&mut other)
                .unwrap();
            let got: Option<(String,)> = redis::pipe()
                .atomic()
                .set(&keys[0], "mine")
                .ignore()
                .get(&keys[1])
                .query(&mut con)
                .unwrap();
            assert_eq!(got, None, "{proto}: EXEC ran after {touched} changed");
            let v: Option<String> = redis::cmd("GET").arg(&keys[0]).query(&mut con).unwrap();
            assert_ne!(v.as_deref(), Some("mine"), "{proto}: aborted EXEC wrote");
            // EXEC forgot the watches: the next transaction runs.
            redis::cmd("SET")
                .arg(touched)
                .arg("again")
                .exec(&mut other)
                .unwrap();
            let got: Option<(String,)> =
                redis::pipe().atomic().get(touched).query(&mut con).unwrap();
            assert_eq!(got, Some(("again".to_string(),)), "{proto}");
        }
        // Deleting a watched key counts as a change.
        redis::cmd("WATCH").arg(&keys).exec(&mut con).unwrap();
        let n: i64 = redis::cmd("DEL").arg(&keys[2]).query(&mut other).unwrap();
        assert_eq!(n, 1);
        let got: Value = redis::pipe()
            .atomic()
            .get(&keys[0])
            .query(&mut con)
            .unwrap();
        assert_eq!(
            got,
            Value::Nil,
            "{proto}: EXEC ran after DEL of a watched key"
        );
        // Nobody touches the keys: EXEC runs.
        redis::cmd("WATCH").arg(&keys).exec(&mut con).unwrap();
        let _: Vec<Option<String>> = redis::cmd("MGET").arg(&keys).query(&mut con).unwrap();
        let got: Option<(String,)> = redis::pipe()
            .atomic()
            .set(&keys[2], "mine")
            .get(&keys[2])
            .ignore()
            .query(&mut con)
            .unwrap();
        assert_eq!(got, Some(("OK".to_string(),)), "{proto}");
        // UNWATCH: changes no longer matter.
        redis::cmd("WATCH").arg(&keys).exec(&mut con).unwrap();
        let ok: String = redis::cmd("UNWATCH").query(&mut con).unwrap();
        assert_eq!(ok, "OK");
        redis::cmd("SET")
            .arg(&keys[1])
            .arg("x")
            .exec(&mut other)
            .unwrap();
        let got: Option<(String,)> = redis::pipe()
            .atomic()
            .get(&keys[1])
            .query(&mut con)
            .unwrap();
        assert_eq!(got, Some(("x".to_string(),)), "{proto}");
        // The watching connection's own write also invalidates (as Redis).
        redis::cmd("WATCH").arg(&keys[0]).exec(&mut con).unwrap();
        redis::cmd("SET")
            .arg(&keys[0])
            .arg("self")
            .exec(&mut con)
            .unwrap();
        let got: Value = redis::pipe()
            .atomic()
            .get(&keys[0])
            .query(&mut con)
            .unwrap();
        assert_eq!(got, Value::Nil, "{proto}: own write did not invalidate");
        // A write to the same name in another database does not.
        redis::cmd("WATCH").arg(&keys[0]).exec(&mut con).unwrap();
        let _: () = redis::pipe()
            .cmd("SELECT")
            .arg(1)
            .cmd("SET")
            .arg(&keys[0])
            .arg("db1")
            .cmd("SELECT")
            .arg(0)
            .query(&mut other)
            .unwrap();
        let got: Option<(String,)> = redis::pipe()
            .atomic()
            .get(&keys[0])
            .query(&mut con)
            .unwrap();
        assert_eq!(got, Some(("self".to_string(),)), "{proto}");
    }
}

/// SELECT inside MULTI switches the database for the commands queued after
/// it, and the connection stays in that database after EXEC.
#[test]
fn select_inside_multi() {
    let srv = start();
    let keys = keys_across_shards("sel:", 2);
    for (proto, mut con) in both_protocols(&srv) {
        let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
        let got: (String, String, String, Vec<Option<String>>) = redis::pipe()
            .atomic()
            .set(&keys[0], "db0")
            .cmd("SELECT")
            .arg(1)
            .cmd("MSET")
            .arg(&keys[0])
            .arg("db1")
            .arg(&keys[1])
            .arg("db1")
            .cmd("MGET")
            .arg(&keys)
            .query(&mut con)
            .expect("EXEC");
        assert_eq!(
            got,
            (
                "OK".to_string(),
                "OK".to_string(),
                "OK".to_string(),
                vec![Some("db1".to_string()), Some("db1".to_string())]
            ),
            "{proto}"
        );
        // Still in database 1.
        let vals: Vec<Option<String>> = redis::cmd("MGET").arg(&keys).query(&mut con).unwrap();
        assert_eq!(vals, vec![Some("db1".to_string()); 2], "{proto}");
        redis::cmd("SELECT").arg(0).exec(&mut con).unwrap();
        let vals: Vec<Option<String>> = redis::cmd("MGET").arg(&keys).query(&mut con).unwrap();
        assert_eq!(vals, vec![Some("db0".to_string()), None], "{proto}");
    }
}

/// Byte-exact replies: `+QUEUED`, the EXEC array, the nil EXEC after a
/// WATCH failure (`*-1` in RESP2, `_` in RESP3), and a reply inside EXEC
/// that differs by protocol (CONFIG GET: array in RESP2, map in RESP3).
#[test]
fn exec_reply_shapes_raw() {
    let srv = start();
    let keys = keys_across_shards("raw:", 2);
    for resp3 in [false, true] {
        let mut c = srv.raw();
        let mut other = srv.raw();
        if resp3 {
            let hello = c.cmd_str(&["HELLO", "3"]);
            assert_eq!(hello[0], b'%', "HELLO 3: {}", escape(&hello, 100));
        }
        assert_bytes(&c.cmd_str(&["FLUSHALL"]), b"+OK\r\n");
        assert_bytes(&c.cmd_str(&["MULTI"]), b"+OK\r\n");
        assert_bytes(
            &c.cmd_str(&["MSET", &keys[0], "1", &keys[1], "2"]),
            b"+QUEUED\r\n",
        );
        assert_bytes(&c.cmd_str(&["INCR", &keys[1]]), b"+QUEUED\r\n");
        assert_bytes(&c.cmd_str(&["MGET", &keys[0], &keys[1]]), b"+QUEUED\r\n");
        assert_bytes(&c.cmd_str(&["CONFIG", "GET", "databases"]), b"+QUEUED\r\n");
        let config: &[u8] = if resp3 {
            b"%1\r\n$9\r\ndatabases\r\n$2\r\n16\r\n"
        } else {
            b"*2\r\n$9\r\ndatabases\r\n$2\r\n16\r\n"
        };
        let mut want = b"*4\r\n+OK\r\n:3\r\n*2\r\n$1\r\n1\r\n$1\r\n3\r\n".to_vec();
        want.extend_from_slice(config);
        assert_bytes(&c.cmd_str(&["EXEC"]), &want);

        assert_bytes(&c.cmd_str(&["WATCH", &keys[0], &keys[1]]), b"+OK\r\n");
        assert_bytes(&other.cmd_str(&["SET", &keys[1], "x"]), b"+OK\r\n");
        assert_bytes(&c.cmd_str(&["MULTI"]), b"+OK\r\n");
        assert_bytes(&c.cmd_str(&["SET", &keys[0], "y"]), b"+QUEUED\r\n");
        let nil: &[u8] = if resp3 { b"_\r\n" } else { b"*-1\r\n" };
        assert_bytes(&c.cmd_str(&["EXEC"]), nil);
        assert_bytes(&c.cmd_str(&["GET", &keys[0]]), b"$1\r\n1\r\n");

        // Pipelined in one write, replies in order.
        let mut wire = Vec::new();
        for args in [
            &["MULTI"][..],
            &["SET", &keys[0], "p"],
            &["GET", &keys[0]],
            &["EXEC"],
            &["GET", &keys[0]],
        ] {
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            wire.extend(encode_command(&args));
        }
        c.send(&wire);
        let got = c.read_replies(5).concat();
        assert_bytes(
            &got,
            b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n+OK\r\n$1\r\np\r\n$1\r\np\r\n",
        );
    }
}

/// Every command EXEC runs counts in INFO commandstats, errorstats and
/// total_commands_processed, as in Redis: connection commands (PING,
/// ECHO, SELECT), commands across shards (MSET, MGET, SMOVE), and a
/// script across shards with the commands it calls, not only one-shard
/// commands. (Figures taken from Redis 7.0.15.)
#[test]
fn every_command_of_exec_counts() {
    let layouts: &[common::Layout] = if common::testing_real_redis() {
        &common::LAYOUTS[..1]
    } else {
        &common::LAYOUTS
    };
    let script = "return redis.call('set', KEYS[1], 2)";
    for l in layouts {
        let srv = l.tessera(&[]);
        let mut r = srv.raw();
        let mut keys: Vec<&str> = vec!["8"];
        keys.extend(["a", "b", "c", "d", "e", "f", "g", "h"]);
        let cmds: Vec<Vec<&str>> = vec![
            vec!["MULTI"],
            vec!["PING"],
            vec!["ECHO", "a"],
            vec!["MSET", "a", "1", "b", "2", "c", "3", "d", "4"],
            vec!["MGET", "a", "b", "c", "d"],
            vec!["SELECT", "99"],
            [vec!["EVAL", script], keys.clone()].concat(),
            vec!["EVAL", "return redis.call('nosuch')", "2", "a", "b"],
            vec!["SMOVE", "a", "b", "x"],
            vec!["SET", "k", "v"],
        ];
        assert_eq!(r.cmd_str(&["CONFIG", "RESETSTAT"]), b"+OK\r\n");
        for c in &cmds {
            r.cmd_str(c);
        }
        let exec = r.cmd_str(&["EXEC"]);
        assert!(
            exec.starts_with(b"*9\r\n"),
            "{l}: {}",
            String::from_utf8_lossy(&exec)
        );
        let stats = String::from_utf8(r.cmd_str(&["INFO", "commandstats"])).unwrap();
        let mut got: Vec<String> = stats
            .lines()
            .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_config"))
            .map(|l| {
                let (name, rest) = l.split_once(':').unwrap();
                let f: Vec<&str> = rest.split(',').collect();
                format!("{name}:{},{},{}", f[0], f[3], f[4])
            })
            .collect();
        got.sort();
        let errors = String::from_utf8(r.cmd_str(&["INFO", "errorstats"])).unwrap();
        got.extend(
            errors
                .lines()
                .filter(|l| l.starts_with("errorstat_"))
                .map(String::from),
        );
        let totals = String::from_utf8(r.cmd_str(&["INFO", "stats"])).unwrap();
        got.extend(
            totals
                .lines()
                .filter(|l| {
                    l.starts_with("total_commands_processed")
                        || l.starts_with("total_error_replies")
                })
                .map(String::from),
        );
        assert_eq!(
            got.join(" "),
            "cmdstat_echo:calls=1,rejected_calls=0,failed_calls=0 \
             cmdstat_eval:calls=2,rejected_calls=0,failed_calls=1 \
             cmdstat_exec:calls=1,rejected_calls=0,failed_calls=0 \
             cmdstat_mget:calls=1,rejected_calls=0,failed_calls=0 \
             cmdstat_mset:calls=1,rejected_calls=0,failed_calls=0 \
             cmdstat_multi:calls=1,rejected_calls=0,failed_calls=0 \
             cmdstat_ping:calls=1,rejected_calls=0,failed_calls=0 \
             cmdstat_select:calls=1,rejected_calls=0,failed_calls=1 \
             cmdstat_set:calls=2,rejected_calls=0,failed_calls=0 \
             cmdstat_smove:calls=1,rejected_calls=0,failed_calls=1 \
             errorstat_ERR:count=2 errorstat_WRONGTYPE:count=1 \
             total_commands_processed:15 total_error_replies:3",
            "{l}"
        );
    }
}

/// WATCH of a key that is logically expired but not deleted yet (active
/// expiry off: DEBUG SET-ACTIVE-EXPIRE 0), as Redis 7.0.15's
/// `watchedKey.expired`: its deletion (a read that finds it expired, a
/// DEL) is no change, writing it again is one, before or after the
/// deletion. With active expiry on, whether the key was deleted before the
/// WATCH depended on the cron (tests/diff/multi.txt's "creating it again"
/// line failed when it had not run).
#[test]
fn watching_an_expired_key_sees_it_written_again_not_deleted() {
    let layouts: &[common::Layout] = if common::testing_real_redis() {
        &common::LAYOUTS[..1]
    } else {
        &common::LAYOUTS
    };
    for l in layouts {
        let srv = l.tessera(&["--enable-debug-command", "yes"]);
        let (mut a, mut b) = (srv.raw(), srv.raw());
        assert_eq!(a.cmd_str(&["DEBUG", "SET-ACTIVE-EXPIRE", "0"]), b"+OK\r\n");
        let keys = keys_across_shards("wx:", 4);
        for k in &keys {
            assert_eq!(a.cmd_str(&["SET", k, "v", "PX", "1"]), b"+OK\r\n");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        let cases: [(&[&[&str]], &[u8]); 4] = [
            // Written again while still there: a change.
            (&[&["SET", "{k}", "new"]], b"*-1\r\n"),
            // Deleted by a read that found it expired: none.
            (&[&["GET", "{k}"]], b"*1\r\n+PONG\r\n"),
            // Deleted, then written again: a change.
            (&[&["GET", "{k}"], &["SET", "{k}", "x"]], b"*-1\r\n"),
            // A DEL of it (deletes nothing logically): none.
            (&[&["DEL", "{k}"]], b"*1\r\n+PONG\r\n"),
        ];
        for ((others, want), k) in cases.iter().zip(&keys) {
            assert_eq!(a.cmd_str(&["WATCH", k]), b"+OK\r\n");
            for cmd in *others {
                let cmd: Vec<&str> = cmd
                    .iter()
                    .map(|x| if *x == "{k}" { k.as_str() } else { x })
                    .collect();
                b.cmd_str(&cmd);
            }
            assert_eq!(a.cmd_str(&["MULTI"]), b"+OK\r\n");
            assert_eq!(a.cmd_str(&["PING"]), b"+QUEUED\r\n");
            assert_eq!(a.cmd_str(&["EXEC"]), *want, "{l}: {others:?} on {k}");
        }
        // Refused where the option does not allow it (Redis's default).
        let plain = l.tessera(&[]);
        let r = plain.raw().cmd_str(&["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
        assert!(
            r.starts_with(b"-ERR DEBUG command not allowed. If the enable-debug-command option"),
            "{}",
            escape(&r, 200)
        );
    }
}
