//! DEBUG LOADAOF end to end, beside redis-server 7.0 where both can run
//! the same commands: the dataset and the function libraries come back
//! from the AOF (what it does not hold goes), the change counter is 0,
//! watchers see their keys touched, the server keeps serving, writes
//! racing the reload are neither lost nor doubled, and with no AOF at all
//! the process exits, as Redis's does.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::Server;
use redis::Commands;

/// Shards, `shard-consolidation`, `appendfsync`.
const LAYOUTS: &[(&str, &str, &str)] = &[
    ("2", "yes", "always"),
    ("2", "no", "everysec"),
    ("16", "yes", "everysec"),
    ("16", "no", "always"),
];

fn tmp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tessera-loadaof-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn tessera(dir: &Path, (shards, consolidation, fsync): (&str, &str, &str)) -> Server {
    Server::tessera(&[
        "--shards",
        shards,
        "--shard-consolidation",
        consolidation,
        "--dir",
        dir.to_str().unwrap(),
        "--appendonly",
        "yes",
        "--appendfsync",
        fsync,
        "--enable-debug-command",
        "yes",
    ])
}

fn redis(dir: &Path) -> Server {
    Server::redis(&[
        "--dir",
        dir.to_str().unwrap(),
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--enable-debug-command",
        "yes",
    ])
}

fn run(con: &mut redis::Connection, argv: &[&str]) -> redis::Value {
    let mut cmd = redis::cmd(argv[0]);
    for a in &argv[1..] {
        cmd.arg(*a);
    }
    cmd.query(con).unwrap_or_else(|e| panic!("{argv:?}: {e}"))
}

/// Every key of db 0 and db 3: type, value, whether it has a TTL; then
/// the function libraries.
fn snapshot(con: &mut redis::Connection) -> Vec<String> {
    let mut out = Vec::new();
    for db in [0, 3] {
        redis::cmd("SELECT").arg(db).query::<()>(con).unwrap();
        let mut keys: Vec<String> = con.keys("*").unwrap();
        keys.sort();
        for k in keys {
            let t: String = redis::cmd("TYPE").arg(&k).query(con).unwrap();
            let v = match t.as_str() {
                "string" => con.get::<_, String>(&k).unwrap(),
                "list" => format!("{:?}", con.lrange::<_, Vec<String>>(&k, 0, -1).unwrap()),
                "set" => {
                    let mut m: Vec<String> = con.smembers(&k).unwrap();
                    m.sort();
                    format!("{m:?}")
                }
                "hash" => {
                    let mut m: Vec<(String, String)> = con.hgetall(&k).unwrap();
                    m.sort();
                    format!("{m:?}")
                }
                "zset" => format!(
                    "{:?}",
                    con.zrange_withscores::<_, Vec<(String, f64)>>(&k, 0, -1)
                        .unwrap()
                ),
                "stream" => format!("{:?}", run(con, &["XRANGE", &k, "-", "+"])),
                other => other.to_string(),
            };
            let ttl: i64 = con.pttl(&k).unwrap();
            out.push(format!("{db} {k} {t} {v} ttl={}", ttl > 0));
        }
    }
    redis::cmd("SELECT").arg(0).query::<()>(con).unwrap();
    out.push(format!("{:?}", run(con, &["FUNCTION", "LIST"])));
    out
}

/// Writes of every type, expiring keys, a transaction, scripts that keep
/// some writes out of the AOF, and function libraries loaded and deleted.
fn write_everything(con: &mut redis::Connection) {
    let lib = "#!lua name=lib1\nredis.register_function('f1', function() return 'one' end)";
    let gone = "#!lua name=lib2\nredis.register_function('f2', function() return 'two' end)";
    let cmds: &[&[&str]] = &[
        &["SET", "s1", "v"],
        &["SET", "s2", "v", "EX", "1000"],
        &["SET", "gone", "v", "PX", "1"],
        &["APPEND", "s1", "x"],
        &["INCRBYFLOAT", "f", "1.25"],
        &["RPUSH", "l", "a", "b", "c", "d"],
        &["LPOP", "l"],
        &["HSET", "h", "a", "1", "b", "2"],
        &["SADD", "set", "1", "2", "3", "4", "5"],
        &["SREM", "set", "3"],
        &["ZADD", "z", "1", "a", "2", "b", "3", "c"],
        &["ZPOPMIN", "z"],
        &["XADD", "x", "1-1", "f", "v"],
        &["MSET", "m1", "1", "m2", "2", "m3", "3", "m4", "4"],
        &["EXPIRE", "m1", "5000"],
        &["DEL", "m2", "m3"],
        &["SELECT", "3"],
        &["SET", "in3", "x"],
        &["SELECT", "0"],
        &["SUNIONSTORE", "u", "set", "nothing"],
        &["RENAME", "m4", "m4renamed"],
        &["FUNCTION", "LOAD", lib],
        &["FUNCTION", "LOAD", gone],
        &["FUNCTION", "DELETE", "lib2"],
    ];
    for c in cmds {
        run(con, c);
    }
    // Redis's Tcl "Test selective replication of certain Redis commands
    // from Lua": REPL_NONE and REPL_REPLICA writes are not in the AOF.
    let script = "redis.call('set','a','1'); redis.set_repl(redis.REPL_NONE); \
                  redis.call('set','b','2'); redis.set_repl(redis.REPL_AOF); \
                  redis.call('set','c','3'); redis.set_repl(redis.REPL_REPLICA); \
                  redis.call('set','e','5'); redis.set_repl(redis.REPL_ALL); \
                  redis.call('set','d','4')";
    run(con, &["EVAL", script, "0"]);
    let _: redis::Value = redis::pipe()
        .atomic()
        .set("t1", "1")
        .incr("t1", 5)
        .lpush("l", "z")
        .query(con)
        .unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let _: Option<String> = con.get("gone").unwrap();
}

fn loadaof(con: &mut redis::Connection) {
    let ok: String = redis::cmd("DEBUG").arg("LOADAOF").query(con).unwrap();
    assert_eq!(ok, "OK");
}

fn changes(con: &mut redis::Connection) -> String {
    common::info_field(con, "persistence", "rdb_changes_since_last_save")
}

/// What the AOF holds comes back, at every layout, as in Redis: the
/// REPL_NONE and REPL_REPLICA writes go, TTLs stay, functions come back,
/// a WATCH of a key sees it touched, the change counter reads 0, and the
/// server goes on. Then, with the AOF turned off, writes since are gone
/// after another DEBUG LOADAOF.
#[test]
fn the_dataset_and_functions_come_back_from_the_aof_as_in_redis() {
    let want = if common::redis_available() {
        let dir = tmp_dir("redis");
        let r = redis(&dir);
        let mut con = r.conn();
        write_everything(&mut con);
        loadaof(&mut con);
        let after = snapshot(&mut con);
        assert_eq!(changes(&mut con), "0");
        let _ = std::fs::remove_dir_all(&dir);
        Some(after)
    } else {
        eprintln!("redis-server not found: Tessera checked alone");
        None
    };
    for &layout in LAYOUTS {
        let dir = tmp_dir(&format!("layout-{}-{}", layout.0, layout.1));
        let s = tessera(&dir, layout);
        let mut con = s.conn();
        write_everything(&mut con);
        let before = snapshot(&mut con);
        let mut watcher = s.conn();
        run(&mut watcher, &["WATCH", "s1"]);
        assert_ne!(changes(&mut con), "0");
        loadaof(&mut con);
        let after = snapshot(&mut con);
        if let Some(want) = &want {
            assert_eq!(&after, want, "{layout:?}");
        }
        // Only what the AOF did not get is gone.
        let lost: Vec<&String> = before.iter().filter(|l| !after.contains(l)).collect();
        assert_eq!(
            lost,
            ["0 b string 2 ttl=false", "0 e string 5 ttl=false"],
            "{layout:?}"
        );
        assert_eq!(after.len(), before.len() - 2, "{layout:?}");
        assert!(after.contains(&"0 s2 string v ttl=true".to_string()));
        let ttl: i64 = con.ttl("s2").unwrap();
        assert!(ttl > 900 && ttl <= 1000, "{ttl}");
        assert_eq!(changes(&mut con), "0", "{layout:?}");
        assert!(s.log().contains("Append Only File loaded by DEBUG LOADAOF"));
        let f1: String = redis::cmd("FCALL")
            .arg("f1")
            .arg(0)
            .query(&mut con)
            .unwrap();
        assert_eq!(f1, "one");
        // The watched key was touched: the transaction is refused.
        run(&mut watcher, &["MULTI"]);
        run(&mut watcher, &["SET", "s1", "w"]);
        assert_eq!(run(&mut watcher, &["EXEC"]), redis::Value::Nil);
        // Serving as before, and writing to the AOF.
        let _: () = con.set("later", "1").unwrap();
        assert_eq!(changes(&mut con), "1");
        loadaof(&mut con);
        let got: String = con.get("later").unwrap();
        assert_eq!(got, "1");

        // The AOF turned off: the files stay as they were, so a write
        // since is not loaded back.
        run(&mut con, &["CONFIG", "SET", "appendonly", "no"]);
        common::wait_for("the AOF turned off", || {
            common::info_field(&mut con, "persistence", "aof_enabled") == "0"
        });
        let _: () = con.set("unlogged", "1").unwrap();
        loadaof(&mut con);
        let got: Option<String> = con.get("unlogged").unwrap();
        assert_eq!(got, None, "{layout:?}");
        let got: String = con.get("later").unwrap();
        assert_eq!(got, "1");
        drop(con);
        drop(s);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Redis loads the files left when the AOF was turned off and forgets
/// writes made since (the reference for the test above).
#[test]
fn redis_forgets_writes_made_with_the_aof_off() {
    if !common::redis_available() {
        eprintln!("skipped: redis-server not found");
        return;
    }
    let dir = tmp_dir("redis-off");
    let r = redis(&dir);
    let mut con = r.conn();
    let _: () = con.set("logged", "1").unwrap();
    run(&mut con, &["CONFIG", "SET", "appendonly", "no"]);
    let _: () = con.set("unlogged", "1").unwrap();
    loadaof(&mut con);
    let got: (Option<String>, Option<String>) = redis::pipe()
        .get("logged")
        .get("unlogged")
        .query(&mut con)
        .unwrap();
    assert_eq!(got, (Some("1".into()), None));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Transactions over every shard race the reloads: each EXEC that was
/// acknowledged counts exactly once at the end (a record the flush missed
/// would be lost by the reload; one applied twice would count double),
/// and every read sees the counters equal (no half-loaded instant).
#[test]
fn writes_racing_the_reload_are_neither_lost_nor_doubled() {
    for &layout in LAYOUTS {
        let n: usize = layout.0.parse().unwrap();
        let dir = tmp_dir(&format!("race-{}-{}", layout.0, layout.1));
        let s = tessera(&dir, layout);
        let keys = common::keys_across_shards("ctr", n.clamp(2, 8), n);
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let (stop, acked, keys) = (stop.clone(), acked.clone(), keys.clone());
                let mut con = s.conn();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let mut p = redis::pipe();
                        p.atomic();
                        for k in &keys {
                            p.incr(k, 1);
                        }
                        let _: Vec<i64> = p.query(&mut con).unwrap();
                        acked.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        let reader = {
            let (stop, keys) = (stop.clone(), keys.clone());
            let mut con = s.conn();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let v: Vec<Option<i64>> = con.mget(&keys).unwrap();
                    assert!(v.windows(2).all(|w| w[0] == w[1]), "{v:?}");
                }
            })
        };
        let mut con = s.conn();
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(100));
            loadaof(&mut con);
        }
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
        reader.join().unwrap();
        let total = acked.load(Ordering::Relaxed) as i64;
        assert!(total > 0);
        let v: Vec<i64> = con.mget(&keys).unwrap();
        assert!(
            v.iter().all(|&x| x == total),
            "{layout:?}: {v:?} != {total}"
        );
        // And what is in the file is the same again.
        loadaof(&mut con);
        let v: Vec<i64> = con.mget(&keys).unwrap();
        assert!(
            v.iter().all(|&x| x == total),
            "{layout:?}: {v:?} != {total}"
        );
        drop(con);
        drop(s);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// With no AOF at all (`appendonly no` and never on) Redis's DEBUG
/// LOADAOF finds nothing to load and the process exits with status 1;
/// so does Tessera's, with a log line saying why.
#[test]
fn without_an_aof_the_process_exits_as_redis() {
    let mut servers = vec![Server::tessera(&[
        "--shards",
        "2",
        "--enable-debug-command",
        "yes",
    ])];
    if common::redis_available() {
        servers.push(Server::redis(&["--enable-debug-command", "yes"]));
    }
    for mut s in servers {
        let mut c = s.raw();
        c.cmd_str(&["SET", "k", "v"]);
        c.send(&common::encode_command(&[b"DEBUG", b"LOADAOF"]));
        c.read_eof();
        common::wait_for("the server to exit", || !s.is_running());
        if s.flavor() == common::Flavor::Tessera {
            assert!(
                s.log()
                    .contains("DEBUG LOADAOF: there is no append only file to load"),
                "{}",
                s.log()
            );
        }
    }
}

/// DEBUG LOADAOF inside MULTI, as Redis 7.0: the transaction's own writes
/// reach the AOF after EXEC, so the reload inside it does not see them
/// (GET answers the old value) and the next reload does.
#[test]
fn loadaof_inside_exec_as_redis() {
    let mut servers = Vec::new();
    let dir = tmp_dir("exec");
    let sub = |name: &str| {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    };
    for layout in [("2", "no", "everysec"), ("16", "yes", "always")] {
        servers.push(tessera(&sub(layout.0), layout));
    }
    if common::redis_available() {
        servers.push(redis(&sub("redis")));
    }
    for s in servers {
        let mut con = s.conn();
        let _: () = con.set("k", "1").unwrap();
        let r: (String, String, Option<String>) = redis::pipe()
            .atomic()
            .cmd("SET")
            .arg("k")
            .arg("2")
            .cmd("DEBUG")
            .arg("LOADAOF")
            .cmd("GET")
            .arg("k")
            .query(&mut con)
            .unwrap();
        assert_eq!(
            r,
            ("OK".into(), "OK".into(), Some("1".into())),
            "{:?}",
            s.flavor()
        );
        let got: String = con.get("k").unwrap();
        assert_eq!(got, "1");
        loadaof(&mut con);
        let got: String = con.get("k").unwrap();
        assert_eq!(got, "2");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
