//! BGREWRITEAOF on the snapshot layer: the new base is an RDB written
//! without fork, begun at the instant logging moves to a new incr file;
//! files exchanged with a real redis-server both ways.

mod common;

use std::time::Duration;

use common::{redis_available, wait_for, DataDir, Server};
use redis::{Commands, Connection};

fn manifest(dir: &DataDir) -> String {
    std::fs::read_to_string(dir.0.join("appendonlydir/appendonly.aof.manifest")).unwrap_or_default()
}

fn aof_files(dir: &DataDir) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir.0.join("appendonlydir"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn tessera(dir: &DataDir, extra: &[&str]) -> Server {
    let mut args = vec!["--dir", dir.path(), "--appendonly", "yes", "--save", ""];
    args.extend_from_slice(extra);
    Server::tessera(&args)
}

fn info(c: &mut Connection, field: &str) -> String {
    common::info_field(c, "persistence", field)
}

/// Rewrites finished (INFO `aof_rewrites` counts them when they start,
/// as Redis's stat_aof_rewrites; one in progress is not done yet).
fn rewrites(c: &mut Connection) -> u64 {
    let text: String = redis::cmd("INFO").arg("persistence").query(c).unwrap();
    let field = |f: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{f}:")))
            .unwrap_or_else(|| panic!("no {f} in INFO"))
            .parse()
            .unwrap()
    };
    field("aof_rewrites") - field("aof_rewrite_in_progress")
}

/// A rewrite under a stream of cross-shard MSETs and INCRs, then kill -9:
/// every acknowledged write is there, every MSET whole, and the old files
/// are gone once the new base is in place.
#[test]
fn rewrite_under_writes_then_kill_loses_nothing() {
    let dir = DataDir::new("rewrite-kill");
    let s = tessera(&dir, &["--shards", "3", "--appendfsync", "always"]);
    let mut c = s.conn();
    for chunk in 0..10 {
        let mut p = redis::pipe();
        for i in 0..2000 {
            p.set(format!("bulk:{chunk}:{i}"), i).ignore();
        }
        let _: () = p.query(&mut c).unwrap();
    }
    let keys: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, keys, mut w) = (stop.clone(), keys.clone(), s.conn());
        std::thread::spawn(move || {
            let mut token = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                token += 1;
                let pairs: Vec<(&String, u64)> = keys.iter().map(|k| (k, token)).collect();
                let _: () = w.mset(&pairs).unwrap();
                let _: u64 = w.incr("counter", 1).unwrap();
            }
            token
        })
    };
    std::thread::sleep(Duration::from_millis(30));
    let r: String = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    assert_eq!(r, "Background append only file rewriting started");
    wait_for("the rewrite", || rewrites(&mut c) == 1);
    assert_eq!(info(&mut c, "aof_last_bgrewrite_status"), "ok");
    std::thread::sleep(Duration::from_millis(30));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let last = writer.join().unwrap();
    assert_eq!(
        manifest(&dir),
        "file appendonly.aof.2.base.rdb seq 2 type b\nfile appendonly.aof.2.incr.aof seq 2 type i\n"
    );
    assert_eq!(
        aof_files(&dir),
        [
            "appendonly.aof.2.base.rdb",
            "appendonly.aof.2.incr.aof",
            "appendonly.aof.manifest"
        ]
    );
    drop(c);
    drop(s); // SIGKILL

    let s = tessera(&dir, &["--shards", "2"]);
    let mut c = s.conn();
    let vals: Vec<u64> = c.mget(&keys).unwrap();
    assert!(vals.iter().all(|v| *v == last), "{vals:?} vs {last}");
    assert_eq!(c.get::<_, u64>("counter").unwrap(), last);
    let n: u64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 20_000 + 8 + 1);
}

#[test]
fn rewrite_and_bgsave_schedule_each_other() {
    let dir = DataDir::new("rewrite-schedule");
    let s = tessera(&dir, &[]);
    let mut r = s.raw();
    let mut c = s.conn();
    // Enough data that a save spans several loop iterations.
    let mut p = redis::pipe();
    for i in 0..50_000 {
        p.set(format!("key:{i}"), "x".repeat(100)).ignore();
    }
    let _: () = p.query(&mut c).unwrap();
    assert_eq!(
        r.cmd_str(&["BGREWRITEAOF"]),
        b"+Background append only file rewriting started\r\n"
    );
    let during = r.cmd_str(&["BGSAVE"]);
    if during.starts_with(b"-") {
        // Still running: Redis's texts.
        assert_eq!(
            during,
            &b"-ERR An AOF log rewriting in progress: can't BGSAVE right now. Use BGSAVE SCHEDULE in order to schedule a BGSAVE whenever possible.\r\n"[..]
        );
        let sched = r.cmd_str(&["BGSAVE", "SCHEDULE"]);
        assert!(
            sched == b"+Background saving scheduled\r\n"
                || sched == b"+Background saving started\r\n",
            "{}",
            String::from_utf8_lossy(&sched)
        );
    }
    wait_for("the scheduled save", || {
        info(&mut c, "rdb_bgsave_in_progress") == "0"
            && info(&mut c, "aof_rewrite_in_progress") == "0"
            && std::path::Path::new(&dir.0.join("dump.rdb")).exists()
    });
    // The other way round: a rewrite asked during a save is scheduled.
    assert_eq!(r.cmd_str(&["BGSAVE"]), b"+Background saving started\r\n");
    let rw = r.cmd_str(&["BGREWRITEAOF"]);
    assert!(
        rw == b"+Background append only file rewriting scheduled\r\n"
            || rw == b"+Background append only file rewriting started\r\n",
        "{}",
        String::from_utf8_lossy(&rw)
    );
    wait_for("the scheduled rewrite", || rewrites(&mut c) == 2);
}

#[test]
fn automatic_rewrite_when_the_aof_grows() {
    let dir = DataDir::new("rewrite-auto");
    let s = tessera(
        &dir,
        &[
            "--auto-aof-rewrite-min-size",
            "1mb",
            "--auto-aof-rewrite-percentage",
            "100",
        ],
    );
    let mut c = s.conn();
    assert_eq!(rewrites(&mut c), 0);
    let v = "v".repeat(1000);
    for i in 0..1500 {
        let _: () = c.set(format!("k{i}"), &v).unwrap();
    }
    wait_for("an automatic rewrite", || rewrites(&mut c) >= 1);
    assert!(s
        .log()
        .contains("Background AOF rewrite terminated with success"));
    let base: u64 = info(&mut c, "aof_base_size").parse().unwrap();
    assert!(base > 0);
}

#[test]
fn redis_loads_a_rewritten_aof_and_tessera_loads_redis_rdb_preamble() {
    if !redis_available() {
        eprintln!("skipped: redis-server not installed");
        return;
    }
    // Tessera -> Redis.
    let dir = DataDir::new("rewrite-to-redis");
    // `always`: the writes just before the kill are on disk when acknowledged.
    let s = tessera(&dir, &["--shards", "2", "--appendfsync", "always"]);
    let mut c = s.conn();
    let _: () = c.set("a", 1).unwrap();
    let _: () = c.rpush("l", &["x", "y"]).unwrap();
    let _: () = c.hset("h", "f", "v").unwrap();
    let _: String = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    wait_for("the rewrite", || rewrites(&mut c) == 1);
    let _: () = c.set("after", 2).unwrap();
    drop(c);
    drop(s);
    let r = Server::redis(&[
        "--dir",
        dir.path(),
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ]);
    let mut c = r.conn();
    assert_eq!(c.get::<_, u64>("a").unwrap(), 1);
    assert_eq!(c.get::<_, u64>("after").unwrap(), 2);
    assert_eq!(c.lrange::<_, Vec<String>>("l", 0, -1).unwrap(), ["x", "y"]);
    // Redis rewrites (its base is an RDB preamble) and appends; Tessera
    // loads the result.
    let _: String = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    wait_for("Redis's rewrite", || rewrites(&mut c) == 1);
    let _: () = c.set("from-redis", 3).unwrap();
    drop(c);
    drop(r);
    assert!(manifest(&dir).contains(".base.rdb"), "{}", manifest(&dir));
    let s = tessera(&dir, &["--shards", "3"]);
    let mut c = s.conn();
    let v: Vec<Option<u64>> = c.mget(&["a", "after", "from-redis"]).unwrap();
    assert_eq!(v, [Some(1), Some(2), Some(3)]);
    assert_eq!(c.hget::<_, _, String>("h", "f").unwrap(), "v");
}

#[test]
fn config_set_appendonly_at_runtime() {
    let dir = DataDir::new("rewrite-runtime");
    let s = Server::tessera(&["--dir", dir.path(), "--shards", "2", "--save", ""]);
    let mut c = s.conn();
    assert_eq!(info(&mut c, "aof_enabled"), "0");
    let _: () = c.set("before", 1).unwrap();
    let _: () = c.mset(&[("x", 1), ("y", 1), ("z", 1)]).unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes")
        .query(&mut c)
        .unwrap();
    wait_for("the AOF to turn on", || {
        info(&mut c, "aof_enabled") == "1" && rewrites(&mut c) == 1
    });
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendfsync")
        .arg("always")
        .query(&mut c)
        .unwrap();
    let _: () = c.set("after", 2).unwrap();
    let _: () = c.mset(&[("x", 2), ("y", 2), ("z", 2)]).unwrap();
    assert!(manifest(&dir).contains("base.rdb"), "{}", manifest(&dir));
    drop(c);
    drop(s); // SIGKILL
    let s = tessera(&dir, &["--shards", "3"]);
    let mut c = s.conn();
    let v: Vec<Option<u64>> = c.mget(&["before", "after", "x", "y", "z"]).unwrap();
    assert_eq!(v, [Some(1), Some(2), Some(2), Some(2), Some(2)]);
    // Off again: later writes are not logged.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("no")
        .query(&mut c)
        .unwrap();
    wait_for("the AOF to turn off", || info(&mut c, "aof_enabled") == "0");
    let _: () = c.set("unlogged", 3).unwrap();
    drop(c);
    drop(s);
    let s = tessera(&dir, &[]);
    let mut c = s.conn();
    let v: Vec<Option<u64>> = c.mget(&["before", "after", "unlogged"]).unwrap();
    assert_eq!(v, [Some(1), Some(2), None]);
}

/// `aof-use-rdb-preamble no`: the base is the commands that rebuild the
/// data (every type, TTLs, several databases), and both servers load it.
#[test]
fn rewrite_without_rdb_preamble_writes_commands() {
    let dir = DataDir::new("rewrite-cmds");
    let args = [
        "--shards",
        "2",
        "--aof-use-rdb-preamble",
        "no",
        "--appendfsync",
        "always",
    ];
    let s = tessera(&dir, &args);
    let mut c = s.conn();
    let _: () = c.set("s", "v").unwrap();
    let _: () = c.set("n", 42).unwrap();
    let _: () = c.pexpire("n", 900_000).unwrap();
    let big: Vec<String> = (0..150).map(|i| format!("m{i}")).collect();
    let _: () = c.rpush("l", &big).unwrap();
    let _: () = c.sadd("st", &big).unwrap();
    let _: () = c.sadd("is", &[1, 2, 3]).unwrap();
    let fields: Vec<(String, String)> = big.iter().map(|m| (m.clone(), m.repeat(2))).collect();
    let _: () = c.hset_multiple("h", &fields).unwrap();
    let members: Vec<(f64, String)> = big
        .iter()
        .enumerate()
        .map(|(i, m)| (i as f64 * 0.5 - 3.0, m.clone()))
        .collect();
    let _: () = c.zadd_multiple("z", &members).unwrap();
    let _: () = redis::cmd("SELECT").arg(4).query(&mut c).unwrap();
    let _: () = c.set("in4", 4).unwrap();
    let _: () = redis::cmd("SELECT").arg(0).query(&mut c).unwrap();
    let _: String = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    wait_for("the rewrite", || rewrites(&mut c) == 1);
    assert!(
        manifest(&dir).starts_with("file appendonly.aof.2.base.aof seq 2 type b\n"),
        "{}",
        manifest(&dir)
    );
    let base = std::fs::read(dir.0.join("appendonlydir/appendonly.aof.2.base.aof")).unwrap();
    assert!(
        base.starts_with(b"*2\r\n$6\r\nSELECT\r\n"),
        "{:?}",
        &base[..20]
    );
    let dump = |c: &mut Connection| -> Vec<String> {
        let mut out = Vec::new();
        for k in ["s", "n", "l", "st", "is", "h", "z"] {
            let d: Vec<u8> = redis::cmd("DUMP").arg(k).query(c).unwrap();
            let ttl: i64 = c.pttl(k).unwrap();
            out.push(format!("{k} {} {}", d.len(), ttl > 0));
        }
        let mut m: Vec<String> = c.smembers("st").unwrap();
        m.sort();
        out.push(m.join(","));
        out.push(format!(
            "{:?}",
            c.zrange_withscores::<_, Vec<(String, f64)>>("z", 0, -1)
                .unwrap()
        ));
        out.push(format!(
            "{:?}",
            c.lrange::<_, Vec<String>>("l", 0, -1).unwrap()
        ));
        out
    };
    let before = dump(&mut c);
    drop(c);
    drop(s);
    let s = tessera(&dir, &args);
    let mut c = s.conn();
    assert_eq!(dump(&mut c), before);
    let _: () = redis::cmd("SELECT").arg(4).query(&mut c).unwrap();
    assert_eq!(c.get::<_, u64>("in4").unwrap(), 4);
    drop(c);
    drop(s);
    if redis_available() {
        let r = Server::redis(&[
            "--dir",
            dir.path(),
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
        ]);
        let mut c = r.conn();
        assert_eq!(c.get::<_, String>("s").unwrap(), "v");
        assert_eq!(c.zcard::<_, u64>("z").unwrap(), 150);
        assert_eq!(c.hlen::<_, u64>("h").unwrap(), 150);
    }
}

/// A SORT without STORE changes nothing and is not logged, also when its
/// patterns read other shards; with STORE it is.
#[test]
fn sort_is_logged_only_with_store() {
    let dir = DataDir::new("aof-sort");
    let s = tessera(&dir, &["--shards", "3", "--appendfsync", "always"]);
    let mut c = s.conn();
    let _: () = c.rpush("l", &[3, 1, 2]).unwrap();
    for i in 1..=3 {
        let _: () = c.set(format!("w_{i}"), 10 - i).unwrap();
    }
    let sorted: Vec<u64> = redis::cmd("SORT")
        .arg("l")
        .arg("BY")
        .arg("w_*")
        .query(&mut c)
        .unwrap();
    assert_eq!(sorted, [3, 2, 1]);
    let incr = || std::fs::read(dir.0.join("appendonlydir/appendonly.aof.1.incr.aof")).unwrap();
    let has = |b: &[u8], w: &[u8]| b.windows(w.len()).any(|x| x.eq_ignore_ascii_case(w));
    assert!(!has(&incr(), b"SORT"));
    let n: u64 = redis::cmd("SORT")
        .arg("l")
        .arg("BY")
        .arg("w_*")
        .arg("STORE")
        .arg("dst")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 3);
    assert!(has(&incr(), b"SORT"));
    drop(c);
    drop(s);
    let s = tessera(&dir, &["--shards", "2"]);
    let v: Vec<u64> = s.conn().lrange("dst", 0, -1).unwrap();
    assert_eq!(v, [3, 2, 1]);
}

/// CONFIG SET appendonly yes outside EXEC starts its rewrite at once, as
/// Redis's startAppendOnly forks it: from its reply on, INFO shows the
/// rewrite in progress (not merely scheduled) until it is done, so that
/// `aof_rewrite_in_progress:0` means the AOF is complete (Redis's Tcl
/// `waitForBgrewriteaof`, which unit/functions runs before DEBUG
/// LOADAOF). Beside redis-server when there is one.
#[test]
fn appendonly_yes_shows_its_rewrite_in_progress_at_once() {
    let dir = DataDir::new("rewrite-at-once");
    let mut servers = vec![Server::tessera(&[
        "--dir",
        dir.path(),
        "--shards",
        "2",
        "--save",
        "",
    ])];
    let rdir = DataDir::new("rewrite-at-once-redis");
    if redis_available() {
        servers.push(Server::redis(&["--dir", rdir.path()]));
    }
    for s in servers {
        let mut c = s.conn();
        let _: () = c.set("k", 1).unwrap();
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("appendonly")
            .arg("yes")
            .query(&mut c)
            .unwrap();
        wait_for("the rewrite to end", || {
            let text: String = redis::cmd("INFO").arg("persistence").query(&mut c).unwrap();
            let field = |f: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(&format!("{f}:")))
                    .unwrap_or_else(|| panic!("no {f} in INFO"))
                    .to_string()
            };
            assert_eq!(field("aof_rewrite_scheduled"), "0", "{:?}", s.flavor());
            if field("aof_rewrite_in_progress") == "1" {
                return false;
            }
            assert_eq!(field("aof_rewrites"), "1", "{:?}: not started", s.flavor());
            assert_eq!(field("aof_last_bgrewrite_status"), "ok");
            true
        });
        assert_eq!(info(&mut c, "aof_enabled"), "1");
    }
}
