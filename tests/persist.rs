//! Snapshots: SAVE, BGSAVE, save rules, start-up loading and the shutdown
//! save, with the real binary; files exchanged with a real redis-server
//! both ways when it is installed.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{redis_available, wait_for, DataDir, Server};
use redis::{Commands, Connection, Value};

fn dump(dir: &DataDir) -> PathBuf {
    dir.0.join("dump.rdb")
}

fn tessera(dir: &DataDir, extra: &[&str]) -> Server {
    let mut args = vec!["--dir", dir.path()];
    args.extend_from_slice(extra);
    Server::tessera(&args)
}

/// Sends SHUTDOWN (with `how`) and waits for the process to exit.
fn shutdown(s: &mut Server, how: &[&str]) {
    let mut r = s.raw();
    let mut cmd = vec!["SHUTDOWN"];
    cmd.extend_from_slice(how);
    let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_bytes()).collect();
    r.send(&common::encode_command(&args));
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.is_running() {
        assert!(Instant::now() < deadline, "server did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn info_field(c: &mut Connection, field: &str) -> String {
    common::info_field(c, "persistence", field)
}

/// Fills databases 0 and 5 with every type, small and large encodings,
/// integers, long (compressible) strings and TTLs.
fn fill(c: &mut Connection) {
    let _: () = c.set("int", 12345).unwrap();
    let _: () = c.set("neg", -9_000_000_000i64).unwrap();
    let _: () = c.set("str", "hello").unwrap();
    let _: () = c.set("long", "x".repeat(5000)).unwrap();
    let _: () = c.set_ex("ttl", "soon", 1000).unwrap();
    let _: () = c.rpush("list", &["a", "b", "c"]).unwrap();
    let big: Vec<String> = (0..1000).map(|i| format!("e{i}")).collect();
    let _: () = c.rpush("biglist", &big).unwrap();
    let _: () = c.sadd("iset", &[1, 2, 3]).unwrap();
    let _: () = c.sadd("sset", &["a", "b"]).unwrap();
    let _: () = c.sadd("bigset", &big).unwrap();
    let _: () = c.hset_multiple("hash", &[("f", "v"), ("g", "1")]).unwrap();
    let fields: Vec<(String, String)> = big.iter().map(|e| (e.clone(), e.repeat(3))).collect();
    let _: () = c.hset_multiple("bighash", &fields).unwrap();
    let _: () = c.zadd_multiple("zset", &[(1.5, "a"), (-2.0, "b")]).unwrap();
    let members: Vec<(f64, String)> = big
        .iter()
        .enumerate()
        .map(|(i, e)| (i as f64 / 3.0, e.clone()))
        .collect();
    let _: () = c.zadd_multiple("bigzset", &members).unwrap();
    let _: () = redis::cmd("SELECT").arg(5).query(c).unwrap();
    let _: () = c.set("in5", "five").unwrap();
    let _: () = c.pexpire("in5", 900_000).unwrap();
    let _: () = redis::cmd("SELECT").arg(0).query(c).unwrap();
}

/// Every key of databases 0 and 5 with its type, value and whether it has
/// a TTL, in a comparable form.
fn contents(c: &mut Connection) -> Vec<String> {
    let mut out = Vec::new();
    for db in [0, 5] {
        let _: () = redis::cmd("SELECT").arg(db).query(c).unwrap();
        let mut keys: Vec<String> = c.keys("*").unwrap();
        keys.sort();
        for k in keys {
            let t: String = redis::cmd("TYPE").arg(&k).query(c).unwrap();
            let v = match t.as_str() {
                "string" => format!("{:?}", c.get::<_, Vec<u8>>(&k).unwrap()),
                "list" => format!("{:?}", c.lrange::<_, Vec<String>>(&k, 0, -1).unwrap()),
                "set" => {
                    let mut m: Vec<String> = c.smembers(&k).unwrap();
                    m.sort();
                    format!("{m:?}")
                }
                "hash" => {
                    let mut m: Vec<(String, String)> = c.hgetall(&k).unwrap();
                    m.sort();
                    format!("{m:?}")
                }
                "zset" => format!(
                    "{:?}",
                    c.zrange_withscores::<_, Vec<(String, String)>>(&k, 0, -1)
                        .unwrap()
                ),
                other => panic!("type {other}"),
            };
            let ttl: i64 = c.pttl(&k).unwrap();
            out.push(format!("{db} {k} {t} ttl={} {v}", ttl > 0));
        }
    }
    let _: () = redis::cmd("SELECT").arg(0).query(c).unwrap();
    out
}

#[test]
fn save_then_restart_with_another_shard_count_keeps_everything() {
    let dir = DataDir::new("persist-save");
    let mut s = tessera(&dir, &["--shards", "3", "--save", ""]);
    let mut c = s.conn();
    fill(&mut c);
    let before = contents(&mut c);
    assert_eq!(redis::cmd("SAVE").query::<String>(&mut c).unwrap(), "OK");
    assert!(dump(&dir).exists());
    let lastsave: i64 = redis::cmd("LASTSAVE").query(&mut c).unwrap();
    assert!(lastsave > 1_700_000_000);
    assert_eq!(info_field(&mut c, "rdb_changes_since_last_save"), "0");
    drop(c);
    shutdown(&mut s, &["NOSAVE"]);

    let s = tessera(&dir, &["--shards", "2", "--save", ""]);
    let mut c = s.conn();
    // Loaded data is saved data: nothing for the save rules to do.
    assert_eq!(info_field(&mut c, "rdb_changes_since_last_save"), "0");
    assert_eq!(contents(&mut c), before);
    assert_eq!(
        info_field(&mut c, "rdb_last_load_keys_loaded"),
        before.len().to_string()
    );
    // Encodings chosen on load as Redis chooses them.
    let enc = |c: &mut Connection, k: &str| -> String {
        redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(k)
            .query(c)
            .unwrap()
    };
    assert_eq!(enc(&mut c, "int"), "int");
    assert_eq!(enc(&mut c, "iset"), "intset");
    assert_eq!(enc(&mut c, "hash"), "listpack");
    assert_eq!(enc(&mut c, "bighash"), "hashtable");
    assert_eq!(enc(&mut c, "bigzset"), "skiplist");
    // No temporary file left behind.
    let leftovers: Vec<_> = std::fs::read_dir(&dir.0)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("temp-"))
        .collect();
    assert!(leftovers.is_empty());
}

#[test]
fn bgsave_is_point_in_time_across_shards_under_writes() {
    let dir = DataDir::new("persist-bgsave");
    let mut s = tessera(&dir, &["--shards", "3", "--save", ""]);
    let mut c = s.conn();
    // Enough data that the save spans many loop iterations.
    for chunk in 0..20 {
        let mut p = redis::pipe();
        for i in 0..5000 {
            p.set(format!("bulk:{chunk}:{i}"), i).ignore();
        }
        let _: () = p.query(&mut c).unwrap();
    }
    let keys: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let keys = keys.clone();
        let mut w = s.conn();
        std::thread::spawn(move || {
            let mut token = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                token += 1;
                let pairs: Vec<(&String, u64)> = keys.iter().map(|k| (k, token)).collect();
                let _: () = w.mset(&pairs).unwrap();
                let _: () = w.incr("counter", 1).unwrap();
                let _: () = w
                    .del(format!("bulk:{}:{}", token % 20, token % 5000))
                    .unwrap();
            }
            token
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    let reply: String = redis::cmd("BGSAVE").query(&mut c).unwrap();
    assert_eq!(reply, "Background saving started");
    // A second one while the first runs is refused, as in Redis.
    let again = redis::cmd("BGSAVE").query::<String>(&mut c);
    if let Err(e) = again {
        assert!(
            e.to_string()
                .contains("Background save already in progress"),
            "{e}"
        );
    }
    wait_for("the background save", || {
        info_field(&mut c, "rdb_bgsave_in_progress") == "0"
    });
    assert_eq!(info_field(&mut c, "rdb_last_bgsave_status"), "ok");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let last = writer.join().unwrap();
    assert!(last > 0);
    drop(c);
    shutdown(&mut s, &["NOSAVE"]);

    let s = tessera(&dir, &["--shards", "2", "--save", ""]);
    let mut c = s.conn();
    let vals: Vec<Option<u64>> = c.mget(&keys).unwrap();
    // Every MSET is whole or absent in the file: one token for all keys.
    assert!(
        vals.iter().all(|v| *v == vals[0]),
        "a multi-shard MSET was split by the snapshot: {vals:?}"
    );
    // Each writer round deleted at most one bulk key before the snapshot.
    let n: u64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert!(
        n + last >= 100_000 && n <= 100_011,
        "{n} keys, {last} rounds"
    );
}

#[test]
fn save_rules_fire_and_shutdown_saves() {
    let dir = DataDir::new("persist-rules");
    let mut s = tessera(&dir, &["--save", "1 3"]);
    let mut c = s.conn();
    let _: () = c.set("a", 1).unwrap();
    let _: () = c.set("b", 2).unwrap();
    assert_eq!(info_field(&mut c, "rdb_changes_since_last_save"), "2");
    // Two changes: the rule (3 changes) is not met.
    std::thread::sleep(Duration::from_millis(1300));
    assert!(!dump(&dir).exists());
    let _: () = c.set("c", 3).unwrap();
    wait_for("the save rule", || dump(&dir).exists());
    wait_for("the counter reset", || {
        info_field(&mut c, "rdb_changes_since_last_save") == "0"
    });
    assert!(
        s.log().contains("3 changes in 1 seconds. Saving..."),
        "{}",
        s.log()
    );
    // SHUTDOWN with save rules set writes the final snapshot.
    let _: () = c.set("d", 4).unwrap();
    drop(c);
    shutdown(&mut s, &[]);
    let s = tessera(&dir, &["--save", ""]);
    let mut c = s.conn();
    let v: Vec<Option<u64>> = c.mget(&["a", "b", "c", "d"]).unwrap();
    assert_eq!(v, [Some(1), Some(2), Some(3), Some(4)]);
}

#[test]
fn shutdown_nosave_and_save_override_the_rules() {
    let dir = DataDir::new("persist-shutdown");
    let mut s = tessera(&dir, &["--save", "3600 1"]);
    let _: () = s.conn().set("a", 1).unwrap();
    shutdown(&mut s, &["NOSAVE"]);
    assert!(!dump(&dir).exists());
    let mut s = tessera(&dir, &["--save", ""]);
    let _: () = s.conn().set("b", 1).unwrap();
    shutdown(&mut s, &["SAVE"]);
    assert!(dump(&dir).exists());
    let s = tessera(&dir, &["--save", ""]);
    let v: Vec<Option<u64>> = s.conn().mget(&["a", "b"]).unwrap();
    assert_eq!(v, [None, Some(1)]);
}

#[test]
fn save_errors_and_refusals() {
    let dir = DataDir::new("persist-errors");
    let s = tessera(&dir, &["--save", ""]);
    let mut r = s.raw();
    assert_eq!(r.cmd_str(&["BGSAVE", "NOW"]), b"-ERR syntax error\r\n");
    assert!(r.cmd_str(&["SAVE", "x"]).starts_with(b"-ERR wrong number"));
    assert_eq!(r.cmd_str(&["MULTI"]), b"+OK\r\n");
    assert_eq!(
        r.cmd_str(&["SAVE"]),
        b"-ERR Command not allowed inside a transaction\r\n"
    );
    assert_eq!(r.cmd_str(&["DISCARD"]), b"+OK\r\n");
    assert_eq!(
        r.cmd_str(&["CONFIG", "SET", "save", "1 2 3"]),
        &b"-ERR CONFIG SET failed (possibly related to argument 'save') - Invalid save parameters\r\n"[..]
    );
    assert_eq!(
        r.cmd_str(&["CONFIG", "SET", "dir", "/"]),
        &b"-ERR CONFIG SET failed (possibly related to argument 'dir') - can't set protected config\r\n"[..]
    );
    // The directory disappears: the save fails, is reported, and the
    // server keeps serving.
    std::fs::remove_dir_all(&dir.0).unwrap();
    assert_eq!(r.cmd_str(&["SAVE"]), b"-ERR\r\n");
    assert_eq!(r.cmd_str(&["BGSAVE"]), b"+Background saving started\r\n");
    let mut c = s.conn();
    wait_for("the failed save", || {
        info_field(&mut c, "rdb_bgsave_in_progress") == "0"
    });
    assert_eq!(info_field(&mut c, "rdb_last_bgsave_status"), "err");
    assert_eq!(r.cmd_str(&["PING"]), b"+PONG\r\n");
    std::fs::create_dir_all(&dir.0).unwrap();
    assert_eq!(r.cmd_str(&["SAVE"]), b"+OK\r\n");
}

#[test]
fn a_corrupt_or_truncated_dump_stops_start_up_with_a_clear_error() {
    let dir = DataDir::new("persist-corrupt");
    let mut s = tessera(&dir, &["--save", ""]);
    fill(&mut s.conn());
    shutdown(&mut s, &["SAVE"]);
    let good = std::fs::read(dump(&dir)).unwrap();
    for (what, bytes) in [
        ("truncated", good[..good.len() / 2].to_vec()),
        (
            "garbage",
            b"REDIS0010\xfa\x09redis-ver\xff\xff\xff\xff".to_vec(),
        ),
        ("bad magic", b"NOTREDIS".to_vec()),
        ("flipped", {
            let mut b = good.clone();
            let i = b.len() - 20;
            b[i] ^= 0x55;
            b
        }),
    ] {
        std::fs::write(dump(&dir), &bytes).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args([
                "--port",
                "0",
                "--unixsocket",
                &format!("{}/s.sock", dir.path()),
            ])
            .args(["--dir", dir.path()])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{what}: {text}");
        assert!(
            text.contains("Fatal error loading the DB"),
            "{what}: {text}"
        );
        assert!(!text.contains("panicked"), "{what}: {text}");
    }
}

fn redis_dir_server(dir: &DataDir, extra: &[&str]) -> Server {
    let mut args = vec!["--dir", dir.path()];
    args.extend_from_slice(extra);
    Server::redis(&args)
}

#[test]
fn redis_loads_what_tessera_saves() {
    if !redis_available() {
        eprintln!("skipped: redis-server not installed");
        return;
    }
    let dir = DataDir::new("persist-to-redis");
    let mut s = tessera(&dir, &["--shards", "3", "--save", ""]);
    let mut c = s.conn();
    fill(&mut c);
    let ours = contents(&mut c);
    drop(c);
    shutdown(&mut s, &["SAVE"]);
    let r = redis_dir_server(&dir, &[]);
    assert_eq!(contents(&mut r.conn()), ours);
}

#[test]
fn tessera_loads_what_redis_saves() {
    if !redis_available() {
        eprintln!("skipped: redis-server not installed");
        return;
    }
    let dir = DataDir::new("persist-from-redis");
    let r = redis_dir_server(&dir, &[]);
    let mut c = r.conn();
    fill(&mut c);
    let theirs = contents(&mut c);
    let ok: Value = redis::cmd("SAVE").query(&mut c).unwrap();
    assert_eq!(ok, Value::Okay);
    drop(r);
    let s = tessera(&dir, &["--shards", "3", "--save", ""]);
    assert_eq!(contents(&mut s.conn()), theirs);
}

#[test]
fn a_failed_save_refuses_writes_with_misconf_until_a_save_succeeds() {
    let dir = DataDir::new("persist-misconf");
    let s = tessera(&dir, &["--save", "3600 1"]);
    let mut r = s.raw();
    assert_eq!(r.cmd_str(&["SET", "a", "1"]), b"+OK\r\n");
    std::fs::remove_dir_all(&dir.0).unwrap();
    assert_eq!(r.cmd_str(&["BGSAVE"]), b"+Background saving started\r\n");
    let mut c = s.conn();
    wait_for("the failed save", || {
        info_field(&mut c, "rdb_last_bgsave_status") == "err"
    });
    let misconf = r.cmd_str(&["SET", "a", "2"]);
    assert!(misconf.starts_with(b"-MISCONF Redis is configured to save RDB snapshots"));
    assert_eq!(r.cmd_str(&["PING"]), misconf);
    assert_eq!(r.cmd_str(&["GET", "a"]), b"$1\r\n1\r\n");
    assert_eq!(r.cmd_str(&["MULTI"]), b"+OK\r\n");
    assert_eq!(r.cmd_str(&["INCR", "a"]), misconf);
    assert!(r.cmd_str(&["EXEC"]).starts_with(b"-EXECABORT"));
    assert_eq!(
        r.cmd_str(&["CONFIG", "SET", "stop-writes-on-bgsave-error", "no"]),
        b"+OK\r\n"
    );
    assert_eq!(r.cmd_str(&["SET", "a", "3"]), b"+OK\r\n");
    assert_eq!(
        r.cmd_str(&["CONFIG", "SET", "stop-writes-on-bgsave-error", "yes"]),
        b"+OK\r\n"
    );
    assert_eq!(r.cmd_str(&["SET", "a", "4"]), misconf);
    if common::testing_real_redis() {
        // Redis chdir()s into `dir`: a new directory at the same path is
        // not its working directory, so its saves keep failing.
        return;
    }
    std::fs::create_dir_all(&dir.0).unwrap();
    assert_eq!(r.cmd_str(&["SAVE"]), b"+OK\r\n");
    assert_eq!(r.cmd_str(&["SET", "a", "5"]), b"+OK\r\n");
}

#[test]
fn lfu_counters_survive_a_restart_under_an_lfu_policy() {
    let dir = DataDir::new("persist-lfu");
    let policy = ["--save", "", "--maxmemory-policy", "allkeys-lfu"];
    let mut s = tessera(&dir, &policy);
    let mut c = s.conn();
    let _: () = c.set("hot", 1).unwrap();
    let _: () = c.set("cold", 1).unwrap();
    for _ in 0..2000 {
        let _: u64 = c.get("hot").unwrap();
    }
    let freq = |c: &mut Connection, k: &str| -> i64 {
        redis::cmd("OBJECT").arg("FREQ").arg(k).query(c).unwrap()
    };
    let (hot, cold) = (freq(&mut c, "hot"), freq(&mut c, "cold"));
    assert!(hot > cold, "{hot} {cold}");
    drop(c);
    shutdown(&mut s, &["SAVE"]);
    let s = tessera(&dir, &policy);
    let mut c = s.conn();
    assert_eq!(freq(&mut c, "hot"), hot);
    assert_eq!(freq(&mut c, "cold"), cold);
}

/// FLUSHALL with save rules, as Redis 7.0's flushAllDataAndResetRDB:
/// the running BGSAVE is abandoned and the emptied data saved before the
/// reply, so the dump on disk holds no key the moment FLUSHALL returns
/// (a copy taken then loads empty), and INFO says so at once.
#[test]
fn flushall_abandons_a_running_save_and_saves_the_empty_data_before_replying() {
    let dir = DataDir::new("persist-flushall");
    let mut s = tessera(&dir, &["--shards", "2", "--save", "3600 1"]);
    let mut c = s.conn();
    for chunk in 0..10 {
        let mut p = redis::pipe();
        for i in 0..5000 {
            p.set(format!("k:{chunk}:{i}"), "x".repeat(50)).ignore();
        }
        let _: () = p.query(&mut c).unwrap();
    }
    let _: String = redis::cmd("SAVE").query(&mut c).unwrap();
    let saved = std::fs::metadata(dump(&dir)).unwrap().len();
    let _: () = c.set("one-more", 1).unwrap();
    let _: String = redis::cmd("BGSAVE").query(&mut c).unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    let copy = DataDir::new("persist-flushall-copy");
    std::fs::copy(dump(&dir), dump(&copy)).unwrap();
    assert_eq!(info_field(&mut c, "rdb_changes_since_last_save"), "0");
    // The abandoned save ended first; abandoned is not failed: no
    // MISCONF, status ok.
    assert_eq!(info_field(&mut c, "rdb_bgsave_in_progress"), "0");
    assert_eq!(info_field(&mut c, "rdb_last_bgsave_status"), "ok");
    let len = std::fs::metadata(dump(&copy)).unwrap().len();
    assert!(
        len < saved / 100,
        "dump of {len} bytes after FLUSHALL ({saved} before)"
    );
    let loaded = tessera(&copy, &["--save", ""]);
    let n: u64 = redis::cmd("DBSIZE").query(&mut loaded.conn()).unwrap();
    assert_eq!(n, 0);
    // Changes after it count from it.
    let _: () = c.set("after", 1).unwrap();
    assert_eq!(info_field(&mut c, "rdb_changes_since_last_save"), "1");
    // The server keeps serving, and a restart does not bring the keys back.
    drop(c);
    shutdown(&mut s, &["NOSAVE"]);
    let s = tessera(&dir, &["--save", ""]);
    let n: u64 = redis::cmd("DBSIZE").query(&mut s.conn()).unwrap();
    assert_eq!(n, 0);
}

/// Without save rules FLUSHALL saves nothing: the dump stays as it was
/// and its changes count (Redis's unit/other, "FLUSHALL should not reset
/// the dirty counter if we disable save").
#[test]
fn flushall_without_save_rules_leaves_the_dump_and_counts_its_changes() {
    let dir = DataDir::new("persist-flushall-norules");
    let s = tessera(&dir, &["--shards", "2", "--save", ""]);
    let mut c = s.conn();
    let _: () = c.set("a", 1).unwrap();
    let _: () = c.set("b", 1).unwrap();
    let _: String = redis::cmd("SAVE").query(&mut c).unwrap();
    let saved = std::fs::read(dump(&dir)).unwrap();
    let _: () = c.set("c", 1).unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    // SET, then the three keys FLUSHALL removed.
    assert_eq!(info_field(&mut c, "rdb_changes_since_last_save"), "4");
    assert_eq!(std::fs::read(dump(&dir)).unwrap(), saved);
}

/// Big values of every kind (skiplist zset, long list, hashtable hash and
/// set) are written a slice at a time by BGSAVE while a client keeps
/// changing them and other keys: the file holds the data as it was when
/// the save began (each key's additions are a prefix of the client's
/// rounds, in the client's order), and Tessera and redis-server load it
/// to the same contents.
#[test]
fn big_values_saved_in_slices_under_writes_load_in_tessera_and_redis() {
    let dir = DataDir::new("persist-bigvals");
    let mut s = tessera(&dir, &["--shards", "3", "--save", ""]);
    let mut c = s.conn();
    const N: usize = 40_000;
    for chunk in 0..(N / 5000) {
        let r = chunk * 5000..(chunk + 1) * 5000;
        let members: Vec<(f64, String)> = r
            .clone()
            .map(|i| ((i % 1000) as f64 / 7.0, format!("m{i}")))
            .collect();
        let items: Vec<String> = r
            .clone()
            .map(|i| format!("item-{i}-{}", "x".repeat(i % 40)))
            .collect();
        let fields: Vec<(String, usize)> = r.clone().map(|i| (format!("f{i}"), i)).collect();
        let mut p = redis::pipe();
        p.zadd_multiple("bigz", &members).ignore();
        p.rpush("bigl", &items).ignore();
        p.hset_multiple("bigh", &fields).ignore();
        p.sadd("bigs", &items).ignore();
        p.cmd("SELECT").arg(5).ignore();
        p.zadd_multiple("bigz5", &members).ignore();
        p.cmd("SELECT").arg(0).ignore();
        for i in r {
            p.set(format!("small:{i}"), i).ignore();
        }
        let _: () = p.query(&mut c).unwrap();
    }
    let _: () = c.pexpire("bigh", 900_000).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let mut w = s.conn();
        std::thread::spawn(move || {
            let mut t = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                t += 1;
                let m = format!("w{t}");
                let _: () = w.zadd("bigz", &m, -(t as f64)).unwrap();
                let _: () = w.rpush("bigl", &m).unwrap();
                let _: () = w.hset("bigh", &m, t).unwrap();
                let _: () = w.sadd("bigs", &m).unwrap();
                let _: () = w.set(format!("other:{t}"), t).unwrap();
            }
            t
        })
    };
    std::thread::sleep(Duration::from_millis(30));
    let reply: String = redis::cmd("BGSAVE").query(&mut c).unwrap();
    assert_eq!(reply, "Background saving started");
    wait_for("the background save", || {
        info_field(&mut c, "rdb_bgsave_in_progress") == "0"
    });
    assert_eq!(info_field(&mut c, "rdb_last_bgsave_status"), "ok");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = writer.join().unwrap();
    drop(c);
    shutdown(&mut s, &["NOSAVE"]);
    let saved = std::fs::read(dump(&dir)).unwrap();

    // Tessera loads it, as it was when the save began.
    let s = tessera(&dir, &["--shards", "2", "--save", ""]);
    let mut c = s.conn();
    // How many of the client's rounds reached each key: a prefix.
    let mut reached = |what: &str, present: &mut dyn FnMut(&mut Connection, u64) -> bool| {
        let n = (1..=rounds).take_while(|&t| present(&mut c, t)).count() as u64;
        assert!(
            (n + 1..=rounds).all(|t| !present(&mut c, t)),
            "{what}: the writes in the file are not a prefix"
        );
        n
    };
    let z = reached("bigz", &mut |c, t| {
        c.zscore::<_, _, Option<f64>>("bigz", format!("w{t}"))
            .unwrap()
            .is_some()
    });
    let h = reached("bigh", &mut |c, t| {
        c.hexists("bigh", format!("w{t}")).unwrap()
    });
    let st = reached("bigs", &mut |c, t| {
        c.sismember("bigs", format!("w{t}")).unwrap()
    });
    let o = reached("other", &mut |c, t| c.exists(format!("other:{t}")).unwrap());
    let l: u64 = c.llen::<_, u64>("bigl").unwrap() - N as u64;
    let tail: Vec<String> = c.lrange("bigl", N as isize, -1).unwrap();
    assert_eq!(tail, (1..=l).map(|t| format!("w{t}")).collect::<Vec<_>>());
    // One client's commands in order: bigz, bigl, bigh, bigs, other.
    assert!(
        z >= l && l >= h && h >= st && st >= o && o + 1 >= z,
        "not one instant: z {z} l {l} h {h} s {st} o {o}"
    );
    eprintln!("{rounds} rounds; in the file: z {z} l {l} h {h} s {st} o {o}");
    assert!(rounds > 0);
    let ours = contents(&mut c);
    drop(c);
    drop(s);

    // redis-server loads the very same file to the same contents.
    if !redis_available() {
        eprintln!("skipped the redis-server half: not installed");
        return;
    }
    let rdir = DataDir::new("persist-bigvals-redis");
    std::fs::write(dump(&rdir), &saved).unwrap();
    let r = redis_dir_server(&rdir, &[]);
    assert_eq!(contents(&mut r.conn()), ours);
}

/// SAVE runs every shard's part at once, in parallel: big values on every
/// shard are written in slices and the shards' open fragments wait for
/// one another at the writer's gate; the file loads back whole.
#[test]
fn save_with_big_values_on_every_shard_loads_back() {
    let dir = DataDir::new("persist-bigsave");
    let mut s = tessera(&dir, &["--shards", "3", "--save", ""]);
    let mut c = s.conn();
    let mut p = redis::pipe();
    for k in 0..6 {
        let items: Vec<String> = (0..20_000)
            .map(|i| format!("{k}-{i}-{}", "y".repeat(i % 30)))
            .collect();
        let members: Vec<(usize, String)> = items
            .iter()
            .enumerate()
            .map(|(i, m)| (i, m.clone()))
            .collect();
        p.zadd_multiple(format!("z{k}"), &members).ignore();
        p.rpush(format!("l{k}"), &items).ignore();
        p.sadd(format!("s{k}"), &items).ignore();
    }
    let _: () = p.query(&mut c).unwrap();
    let before = contents(&mut c);
    let ok: Value = redis::cmd("SAVE").query(&mut c).unwrap();
    assert_eq!(ok, Value::Okay);
    drop(c);
    shutdown(&mut s, &["NOSAVE"]);
    let s = tessera(&dir, &["--shards", "2", "--save", ""]);
    assert_eq!(contents(&mut s.conn()), before);
}

/// `key-load-delay` (Redis's hidden test hook): every key loaded sleeps
/// that many microseconds, so 4 keys at 100 ms take at least 0.4 s to load
/// (a lower bound sleeping guarantees, not a speed threshold).
#[test]
fn key_load_delay_slows_loading_by_each_key() {
    let dir = DataDir::new("persist-key-load-delay");
    let mut s = tessera(&dir, &["--save", ""]);
    let mut c = s.conn();
    for k in 0..4 {
        let _: () = c.set(format!("k{k}"), k).unwrap();
    }
    assert_eq!(redis::cmd("SAVE").query::<String>(&mut c).unwrap(), "OK");
    drop(c);
    shutdown(&mut s, &["NOSAVE"]);

    let s = tessera(&dir, &["--save", "", "--key-load-delay", "100000"]);
    let mut c = s.conn();
    let delay: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("key-load-delay")
        .query(&mut c)
        .unwrap();
    assert_eq!(delay, ["key-load-delay", "100000"]);
    let log = s.log();
    let secs: f64 = log
        .split("DB loaded from disk: ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no load time in the log:\n{log}"));
    assert!(secs >= 0.4, "loaded in {secs} s");
    assert_eq!(info_field(&mut c, "rdb_last_load_keys_loaded"), "4");
}
