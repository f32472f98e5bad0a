//! The append-only file, end to end: the real binary writes its AOF into a
//! temporary directory, is killed with SIGKILL, and a new process loads it.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Server;
use redis::Commands;

fn tmp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tessera-aof-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn start(dir: &Path, fsync: &str, extra: &[&str]) -> Server {
    let d = dir.to_str().unwrap();
    let mut args = vec![
        "--shards",
        "3",
        "--dir",
        d,
        "--appendonly",
        "yes",
        "--appendfsync",
        fsync,
    ];
    args.extend_from_slice(extra);
    Server::tessera(&args)
}

fn incr_file(dir: &Path) -> PathBuf {
    dir.join("appendonlydir/appendonly.aof.1.incr.aof")
}

/// Every key of db 0 and 3 with its type, value and whether it has a TTL.
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
                other => other.to_string(),
            };
            let ttl: i64 = con.pttl(&k).unwrap();
            out.push(format!("{db} {k} {t} {v} ttl={}", ttl > 0));
        }
    }
    redis::cmd("SELECT").arg(0).query::<()>(con).unwrap();
    out
}

fn write_everything(con: &mut redis::Connection) {
    let cmds: &[&[&str]] = &[
        &["SET", "s1", "v"],
        &["SET", "s2", "v", "EX", "1000"],
        &["SETEX", "s3", "1000", "v"],
        &["SET", "gone", "v", "PX", "1"],
        &["APPEND", "s1", "x"],
        &["INCRBYFLOAT", "f", "1.25"],
        &["RPUSH", "l", "a", "b", "c", "d"],
        &["LPOP", "l"],
        &["HSET", "h", "a", "1", "b", "2"],
        &["HINCRBYFLOAT", "h", "a", "0.5"],
        &["SADD", "set", "1", "2", "3", "4", "5"],
        &["SPOP", "set"],
        &["SPOP", "set", "2"],
        &["ZADD", "z", "1", "a", "2", "b", "3", "c"],
        &["ZPOPMIN", "z"],
        &["MSET", "m1", "1", "m2", "2", "m3", "3", "m4", "4"],
        &["EXPIRE", "m1", "5000"],
        &["DEL", "m2", "m3"],
        &["SELECT", "3"],
        &["SET", "in3", "x"],
        &["SELECT", "0"],
        &["SUNIONSTORE", "u", "set", "m4x"],
        &["RENAME", "m4", "m4renamed"],
    ];
    for c in cmds {
        let mut cmd = redis::cmd(c[0]);
        for a in &c[1..] {
            cmd.arg(*a);
        }
        let _: redis::Value = cmd.query(con).unwrap();
    }
    let _: redis::Value = redis::pipe()
        .atomic()
        .set("t1", "1")
        .incr("t1", 5)
        .lpush("l", "z")
        .query(con)
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    let _: Option<String> = con.get("gone").unwrap();
}

#[test]
fn every_type_survives_a_kill_and_restart() {
    let dir = tmp_dir("types");
    let before = {
        let s = start(&dir, "always", &[]);
        let mut con = s.conn();
        write_everything(&mut con);
        snapshot(&mut con)
        // Dropped: SIGKILL.
    };
    assert!(before.iter().any(|l| l.contains("s2 string v ttl=true")));
    let s = start(&dir, "always", &[]);
    let mut con = s.conn();
    assert_eq!(snapshot(&mut con), before);
    let ttl: i64 = con.ttl("s2").unwrap();
    assert!(ttl > 900 && ttl <= 1000, "{ttl}");
    let text = std::fs::read(incr_file(&dir)).unwrap();
    let text = String::from_utf8_lossy(&text);
    assert!(text.contains("PXAT"), "relative TTLs are logged absolute");
    assert!(text.contains("MULTI"), "cross-shard writes are blocks");
    let manifest =
        std::fs::read_to_string(dir.join("appendonlydir/appendonly.aof.manifest")).unwrap();
    assert_eq!(
        manifest,
        // The base Redis writes at an empty start (`aof-use-rdb-preamble
        // yes`): an RDB of no key.
        "file appendonly.aof.1.base.rdb seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn torn_tail_and_torn_multi() {
    let dir = tmp_dir("torn");
    {
        let s = start(&dir, "always", &[]);
        let mut con = s.conn();
        let _: () = con.set("kept", "1").unwrap();
    }
    // A torn MULTI block, then a torn record.
    let f = incr_file(&dir);
    let mut data = std::fs::read(&f).unwrap();
    data.extend_from_slice(b"*1\r\n$5\r\nMULTI\r\n*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$1\r\n1\r\n*3\r\n$3\r\nSET\r\n$1\r\ny\r\n$1");
    std::fs::write(&f, &data).unwrap();
    // aof-load-truncated no: refuses to start.
    let bin = env!("CARGO_BIN_EXE_tessera");
    let out = Command::new(bin)
        .args([
            "--port",
            "0",
            "--unixsocket",
            dir.join("s.sock").to_str().unwrap(),
        ])
        .args(["--dir", dir.to_str().unwrap(), "--appendonly", "yes"])
        .args(["--aof-load-truncated", "no"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("Unexpected end of file"));
    // Default (yes): starts, logs Redis's lines, none of the block applied.
    let s = start(&dir, "always", &[]);
    let log = s.log();
    assert!(
        log.contains("!!! Warning: short read while loading the AOF file"),
        "{log}"
    );
    assert!(log.contains(
        "AOF appendonly.aof.1.incr.aof loaded anyway because aof-load-truncated is enabled"
    ));
    let mut con = s.conn();
    assert_eq!(
        con.get::<_, Option<String>>("kept").unwrap().as_deref(),
        Some("1")
    );
    assert_eq!(con.exists::<_, i64>("x").unwrap(), 0);
    assert_eq!(con.exists::<_, i64>("y").unwrap(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// One round of a crash-test client: a pipeline mixing single-key writes
/// on several shards, a counter, a cross-shard MSET, a MULTI/EXEC block
/// spanning shards, and a read of its own write.
fn round_cmds(t: usize, r: u64) -> Vec<Vec<String>> {
    let v = r.to_string();
    let s = |a: &[&str]| a.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    vec![
        s(&["SET", &format!("a:{t}:{r}"), &v]),
        s(&["SET", &format!("b:{t}:{r}"), &v]),
        s(&["INCR", &format!("ctr:{t}")]),
        s(&[
            "MSET",
            &format!("c:{t}:{r}:1"),
            &v,
            &format!("c:{t}:{r}:2"),
            &v,
            &format!("c:{t}:{r}:3"),
            &v,
        ]),
        s(&["MULTI"]),
        s(&["SET", &format!("d:{t}:{r}"), &v]),
        s(&["RPUSH", &format!("l:{t}"), &v]),
        s(&["SADD", &format!("e:{t}"), &v]),
        s(&["EXEC"]),
        s(&["GET", &format!("a:{t}:{r}")]),
    ]
}

/// What a crash-test client saw acknowledged: for each round, how many of
/// its replies arrived; and the last counter value it was told.
struct Acked {
    rounds: Vec<usize>,
    ctr: i64,
}

/// A client that sends [`round_cmds`] pipelines until the server dies,
/// reading replies one at a time and checking each as it arrives (so the
/// order of replies on one connection is checked too).
fn crash_client(addr: String, t: usize, stop: Arc<AtomicBool>) -> Acked {
    let mut con = common::RawConn::connect(&addr);
    let mut acked = Acked {
        rounds: Vec::new(),
        ctr: 0,
    };
    for r in 0u64.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let cmds = round_cmds(t, r);
        let mut bytes = Vec::new();
        for c in &cmds {
            let a: Vec<&[u8]> = c.iter().map(|x| x.as_bytes()).collect();
            bytes.extend(common::encode_command(&a));
        }
        acked.rounds.push(0);
        if con.try_send(&bytes).is_err() {
            break;
        }
        for (i, c) in cmds.iter().enumerate() {
            let Ok(reply) = con.try_read_reply() else {
                return acked;
            };
            let text = String::from_utf8_lossy(&reply).into_owned();
            match c[0].as_str() {
                _ if i > 4 && i < 8 => assert_eq!(text, "+QUEUED\r\n", "{c:?}"),
                "SET" | "MSET" => assert_eq!(text, "+OK\r\n", "{c:?}"),
                "MULTI" => assert_eq!(text, "+OK\r\n"),
                "INCR" => {
                    let n: i64 = text[1..text.len() - 2].parse().unwrap();
                    assert_eq!(n, r as i64 + 1, "counter of client {t}");
                    acked.ctr = n;
                }
                "EXEC" => assert!(text.starts_with("*3\r\n+OK\r\n:"), "{text}"),
                "GET" => assert_eq!(text, format!("${}\r\n{r}\r\n", r.to_string().len())),
                _ => {}
            }
            *acked.rounds.last_mut().unwrap() = i + 1;
        }
    }
    acked
}

/// Shards on their own threads: the AOF writer thread fsyncs.
#[test]
fn always_keeps_every_acknowledged_write_across_kill_9() {
    always_survives_kill_9("load-always", &["--shard-consolidation", "no"], false);
}

/// Every shard on one thread: that thread fsyncs itself (`Aof::lead`).
#[test]
fn always_keeps_every_acknowledged_write_across_kill_9_on_one_thread() {
    always_survives_kill_9("load-always-led", &[], true);
}

fn always_survives_kill_9(name: &str, extra: &[&str], merged: bool) {
    let dir = tmp_dir(name);
    const CLIENTS: usize = 6;
    let acked: Vec<Acked> = {
        let s = start(&dir, "always", extra);
        if merged {
            common::wait_shard_threads(&s, 1);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let hs: Vec<_> = (0..CLIENTS)
            .map(|t| {
                let (addr, stop) = (s.addr(), stop.clone());
                std::thread::spawn(move || crash_client(addr, t, stop))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(1500));
        drop(s); // SIGKILL while the clients write
        stop.store(true, Ordering::Relaxed);
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    };
    let s = start(&dir, "always", &[]);
    let mut con = s.conn();
    let mut checked = 0;
    for (t, a) in acked.iter().enumerate() {
        let ctr: i64 = con
            .get::<_, Option<i64>>(format!("ctr:{t}"))
            .unwrap()
            .unwrap_or(0);
        assert!(
            ctr >= a.ctr,
            "client {t}: counter {ctr} < acknowledged {}",
            a.ctr
        );
        let list: Vec<String> = con.lrange(format!("l:{t}"), 0, -1).unwrap();
        let set: std::collections::HashSet<String> = con.smembers(format!("e:{t}")).unwrap();
        let mut pipe = redis::pipe();
        for r in 0..a.rounds.len() {
            pipe.exists(format!("a:{t}:{r}"))
                .exists(format!("b:{t}:{r}"))
                .exists(&[
                    format!("c:{t}:{r}:1"),
                    format!("c:{t}:{r}:2"),
                    format!("c:{t}:{r}:3"),
                ])
                .exists(format!("d:{t}:{r}"));
        }
        let ex: Vec<i64> = pipe.query(&mut con).unwrap();
        for (r, &n) in a.rounds.iter().enumerate() {
            let e = &ex[r * 4..r * 4 + 4];
            let v = r.to_string();
            // MULTI/EXEC blocks are all or nothing, acknowledged or not.
            let in_list = list.contains(&v);
            assert_eq!(e[3] == 1, in_list, "client {t} round {r}: torn transaction");
            assert_eq!(
                set.contains(&v),
                in_list,
                "client {t} round {r}: torn transaction"
            );
            // A cross-shard MSET is all or nothing too.
            assert!(e[2] == 0 || e[2] == 3, "client {t} round {r}: torn MSET");
            let lost = |i: usize, what: &str, present: bool| {
                assert!(
                    n <= i || present,
                    "client {t} round {r}: acknowledged {what} lost"
                )
            };
            lost(0, "SET", e[0] == 1);
            lost(1, "SET", e[1] == 1);
            lost(3, "MSET", e[2] == 3);
            lost(8, "EXEC", in_list);
            checked += n;
        }
    }
    assert!(checked > 0, "no write was acknowledged");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_read_pipelined_behind_a_write_sees_it_and_keeps_its_place() {
    for fsync in ["always", "everysec", "always"] {
        let dir = tmp_dir(&format!("order-{fsync}"));
        let s = start(&dir, fsync, &[]);
        let mut raw = s.raw();
        let mut con = s.conn();
        for round in 0..3 {
            let mut bytes = Vec::new();
            for i in 0..100 {
                let (k, v) = (format!("k{i}"), format!("v{round}:{i}"));
                bytes.extend(common::encode_command(&[
                    b"SET",
                    k.as_bytes(),
                    v.as_bytes(),
                ]));
                bytes.extend(common::encode_command(&[b"GET", k.as_bytes()]));
                bytes.extend(common::encode_command(&[b"INCR", b"n"]));
                bytes.extend(common::encode_command(&[b"GET", b"n"]));
                bytes.extend(common::encode_command(&[b"MGET", k.as_bytes(), b"n"]));
            }
            raw.send(&bytes);
            for i in 0..100 {
                let v = format!("v{round}:{i}");
                let n = (round * 100 + i + 1).to_string();
                assert_eq!(raw.read_reply(), b"+OK\r\n");
                let want = format!("${}\r\n{v}\r\n", v.len());
                assert_eq!(String::from_utf8(raw.read_reply()).unwrap(), want);
                assert_eq!(
                    String::from_utf8(raw.read_reply()).unwrap(),
                    format!(":{n}\r\n")
                );
                let want_n = format!("${}\r\n{n}\r\n", n.len());
                assert_eq!(String::from_utf8(raw.read_reply()).unwrap(), want_n);
                assert_eq!(
                    String::from_utf8(raw.read_reply()).unwrap(),
                    format!("*2\r\n{want}{want_n}")
                );
            }
            // The policy changes at runtime; nothing held is left behind.
            let other = if round % 2 == 0 { "everysec" } else { "always" };
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg("appendfsync")
                .arg(other)
                .query(&mut con)
                .unwrap();
        }
        drop(s);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn everysec_loses_at_most_the_last_seconds_across_kill_9() {
    let dir = tmp_dir("load-everysec");
    const CLIENTS: usize = 4;
    let (acked, killed_at) = {
        let s = start(&dir, "everysec", &[]);
        let addr = s.addr();
        let stop = Arc::new(AtomicBool::new(false));
        let hs: Vec<_> = (0..CLIENTS)
            .map(|t| {
                let (addr, stop) = (addr.clone(), stop.clone());
                std::thread::spawn(move || {
                    let c = redis::Client::open(format!("redis://{addr}")).unwrap();
                    let mut con = c.get_connection().unwrap();
                    // When each write was acknowledged.
                    let mut at = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let n = at.len();
                        if con.set::<_, _, ()>(format!("k{t}:{n}"), n).is_err() {
                            break;
                        }
                        at.push(Instant::now());
                    }
                    at
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(3500));
        let killed_at = Instant::now();
        drop(s); // SIGKILL while the clients write
        stop.store(true, Ordering::Relaxed);
        let acked: Vec<Vec<Instant>> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        (acked, killed_at)
    };
    let s = start(&dir, "everysec", &[]);
    let mut con = s.conn();
    for (t, at) in acked.iter().enumerate() {
        let mut pipe = redis::pipe();
        for n in 0..at.len() {
            pipe.exists(format!("k{t}:{n}"));
        }
        let ex: Vec<i64> = pipe.query(&mut con).unwrap();
        // Each client's writes are a sequence: what survived is a prefix.
        let kept = ex.iter().take_while(|&&e| e == 1).count();
        assert!(
            ex[kept..].iter().all(|&e| e == 0),
            "client {t}: a hole in the surviving writes"
        );
        // Redis's promise: at most about two seconds of writes lost.
        if let Some(first_lost) = at.get(kept) {
            let age = killed_at.saturating_duration_since(*first_lost);
            assert!(
                age <= Duration::from_millis(2000),
                "client {t}: lost writes acknowledged {age:?} before the kill"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn redis_loads_tessera_files_and_tessera_loads_redis_files() {
    if !common::redis_available() {
        eprintln!("skipped: redis-server not found");
        return;
    }
    let dir = tmp_dir("compat");
    let before = {
        let s = start(&dir, "always", &[]);
        let mut con = s.conn();
        write_everything(&mut con);
        snapshot(&mut con)
    };
    let d = dir.to_str().unwrap();
    // `always`: Redis is killed below, and under `everysec` it may
    // postpone its write while a background fsync runs.
    let r = Server::redis(&["--appendonly", "yes", "--appendfsync", "always", "--dir", d]);
    let mut con = r.conn();
    assert_eq!(snapshot(&mut con), before);
    let _: () = con.set("from-redis", "1").unwrap();
    let _: () = redis::cmd("EXPIRE")
        .arg("s1")
        .arg(100)
        .query(&mut con)
        .unwrap();
    let after = snapshot(&mut con);
    drop(con);
    drop(r);
    let s = start(&dir, "always", &[]);
    let mut con = s.conn();
    assert_eq!(snapshot(&mut con), after);
    let _ = std::fs::remove_dir_all(&dir);
}

/// CONFIG SET appendonly yes inside EXEC schedules the rewrite that turns
/// the AOF on, with Redis's log line (Tcl unit/multi "MULTI with config
/// set appendonly"); the cron then starts it and the AOF is on.
#[test]
fn appendonly_turned_on_inside_exec_is_scheduled() {
    let dir = tmp_dir("in-exec");
    let s = Server::tessera(&["--shards", "2", "--dir", dir.to_str().unwrap()]);
    let mut c = s.conn();
    assert_eq!(common::info_field(&mut c, "stats", "total_forks"), "0");
    let (ok, set): (String, String) = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("foo")
        .arg("bar")
        .cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes")
        .query(&mut c)
        .unwrap();
    assert_eq!((ok.as_str(), set.as_str()), ("OK", "OK"));
    common::wait_for("the AOF turned on", || {
        common::info_field(&mut c, "persistence", "aof_enabled") == "1"
            && common::info_field(&mut c, "persistence", "aof_rewrite_in_progress") == "0"
            && common::info_field(&mut c, "persistence", "aof_rewrites") == "1"
    });
    // The rewrite's snapshot counts where Redis forks (Redis's Tcl tests
    // wait on total_forks to see a background job start).
    assert_eq!(common::info_field(&mut c, "stats", "total_forks"), "1");
    assert!(
        s.log().contains(
            "AOF was enabled during a transaction. An AOF background was scheduled to start when possible."
        ),
        "{}",
        s.log()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
