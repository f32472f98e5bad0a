//! The append-only file, end to end: the real binary writes its AOF into a
//! temporary directory, is killed with SIGKILL, and a new process loads it.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

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
        "file appendonly.aof.1.base.aof seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n"
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
    assert!(log.contains("AOF loaded anyway because aof-load-truncated is enabled"));
    let mut con = s.conn();
    assert_eq!(
        con.get::<_, Option<String>>("kept").unwrap().as_deref(),
        Some("1")
    );
    assert_eq!(con.exists::<_, i64>("x").unwrap(), 0);
    assert_eq!(con.exists::<_, i64>("y").unwrap(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn acknowledged_writes_survive_kill_under_load() {
    for fsync in ["always", "everysec"] {
        let dir = tmp_dir(&format!("load-{fsync}"));
        let acked = {
            let s = start(&dir, fsync, &[]);
            let addr = s.addr();
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let mut hs = Vec::new();
            for t in 0..4 {
                let addr = addr.clone();
                let stop = stop.clone();
                hs.push(std::thread::spawn(move || {
                    let c = redis::Client::open(format!("redis://{addr}")).unwrap();
                    let mut con = c.get_connection().unwrap();
                    let mut n = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        if con.set::<_, _, ()>(format!("k{t}:{n}"), n).is_err() {
                            break;
                        }
                        n += 1;
                    }
                    n
                }));
            }
            std::thread::sleep(std::time::Duration::from_millis(1500));
            drop(s); // SIGKILL while the clients write
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            hs.into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<u64>>()
        };
        let s = start(&dir, fsync, &[]);
        let mut con = s.conn();
        let total: u64 = acked.iter().sum();
        let present: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
        if fsync == "always" {
            for (t, &n) in acked.iter().enumerate() {
                if n > 0 {
                    let last: Option<u64> = con.get(format!("k{t}:{}", n - 1)).unwrap();
                    assert_eq!(last, Some(n - 1), "acknowledged write lost ({fsync})");
                }
            }
            assert!(present as u64 >= total, "{present} < {total}");
        } else {
            // At most about two seconds lost: the run lasted 1.5 s, so only
            // check that the file is loadable and holds a prefix.
            assert!(present as u64 <= total + 4);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
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
    let r = Server::redis(&["--appendonly", "yes", "--dir", d]);
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
