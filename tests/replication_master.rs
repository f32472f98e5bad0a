//! Tessera as a replication master with a real `redis-server --replicaof`
//! as its replica (issue 25): full syncs (to disk and diskless) while a
//! writer runs, every type, TTLs, several databases, a MULTI/EXEC across
//! shards; a cut link resumed with a partial resync; WAIT; a replica that
//! sends garbage. The datasets are compared key by key with type-specific
//! reads. Every wait is bounded by a deadline.
//!
//! Skipped when `redis-server` is missing (a failure under
//! `TESSERA_REQUIRE_REDIS=1`, as CI sets).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{info_field, RawConn, Server};
use redis::{Commands, Connection, Value};

const DEADLINE: Duration = Duration::from_secs(60);
const DBS: [u32; 3] = [0, 2, 9];

fn cmd(c: &mut Connection, args: &[&str]) -> Value {
    let mut k = redis::cmd(args[0]);
    for a in &args[1..] {
        k.arg(*a);
    }
    k.query(c).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Waits until `f` holds, panicking with `what` at the deadline.
fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn start_master(shards: &str, extra: &[&str]) -> Server {
    let mut args = vec![
        "--shards",
        shards,
        "--save",
        "",
        "--repl-diskless-sync-delay",
        "0",
    ];
    args.extend_from_slice(extra);
    Server::tessera(&args)
}

fn start_replica(master: &Server) -> Server {
    let port = master.port().to_string();
    Server::redis(&["--replicaof", "127.0.0.1", &port, "--repl-timeout", "60"])
}

/// Every type, TTLs, several databases; `tag` keeps rounds apart.
fn fill(c: &mut Connection, tag: &str, n: usize) {
    for &db in &DBS {
        let _: () = redis::cmd("SELECT").arg(db).query(c).unwrap();
        let mut p = redis::pipe();
        for i in 0..n {
            p.cmd("SET")
                .arg(format!("{tag}s{i}"))
                .arg(format!("v{i}"))
                .ignore();
            p.cmd("RPUSH")
                .arg(format!("{tag}l{}", i % 7))
                .arg(i)
                .ignore();
            p.cmd("HSET")
                .arg(format!("{tag}h{}", i % 5))
                .arg(format!("f{i}"))
                .arg(i)
                .ignore();
            p.cmd("SADD")
                .arg(format!("{tag}set{}", i % 3))
                .arg(i)
                .ignore();
            p.cmd("ZADD")
                .arg(format!("{tag}z{}", i % 4))
                .arg(i as f64 / 3.0)
                .arg(format!("m{i}"))
                .ignore();
            if i % 10 == 0 {
                p.cmd("XADD")
                    .arg(format!("{tag}x"))
                    .arg("*")
                    .arg("i")
                    .arg(i)
                    .ignore();
                p.cmd("SET")
                    .arg(format!("{tag}ttl{i}"))
                    .arg("t")
                    .arg("PX")
                    .arg(600_000)
                    .ignore();
                p.cmd("INCRBYFLOAT")
                    .arg(format!("{tag}f"))
                    .arg("0.5")
                    .ignore();
                p.cmd("SPOP").arg(format!("{tag}set0")).ignore();
            }
        }
        let _: () = p.query(c).unwrap();
    }
    let _: () = redis::cmd("SELECT").arg(0).query(c).unwrap();
}

/// Every key of [`DBS`] with its type, value and TTL class, comparable
/// across the two servers; PTTLs are returned apart (compared with a
/// tolerance).
fn contents(c: &mut Connection) -> (Vec<String>, Vec<(String, i64)>) {
    let mut out = Vec::new();
    let mut ttls = Vec::new();
    for &db in &DBS {
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
                "stream" => format!("{:?}", cmd(c, &["XRANGE", &k, "-", "+"])),
                other => panic!("type {other}"),
            };
            let ttl: i64 = c.pttl(&k).unwrap();
            out.push(format!("{db} {k} {t} ttl={} {v}", ttl > 0));
            if ttl > 0 {
                ttls.push((format!("{db} {k}"), ttl));
            }
        }
    }
    let _: () = redis::cmd("SELECT").arg(0).query(c).unwrap();
    (out, ttls)
}

/// The replica's link is up and it processed everything the master
/// streamed (the writers stopped).
fn wait_caught_up(master: &Server, replica: &Server) {
    let (mut m, mut r) = (master.conn(), replica.conn());
    wait_until("the replica to catch up", || {
        if info_field(&mut r, "replication", "master_link_status") != "up" {
            return false;
        }
        let mo = info_field(&mut m, "replication", "master_repl_offset");
        let ro = info_field(&mut r, "replication", "slave_repl_offset");
        mo == ro
    });
}

fn assert_same(master: &Server, replica: &Server) {
    wait_caught_up(master, replica);
    let (a, at) = contents(&mut master.conn());
    let (b, bt) = contents(&mut replica.conn());
    assert!(!a.is_empty());
    if a != b {
        let only_m: Vec<_> = a.iter().filter(|x| !b.contains(x)).take(10).collect();
        let only_r: Vec<_> = b.iter().filter(|x| !a.contains(x)).take(10).collect();
        panic!(
            "datasets differ ({} vs {} keys)\nmaster only: {only_m:#?}\nreplica only: {only_r:#?}",
            a.len(),
            b.len()
        );
    }
    assert_eq!(at.len(), bt.len());
    // The scans above take seconds apart: TTLs are read again, the
    // master's and the replica's of each key one right after the other.
    let (mut m, mut r) = (master.conn(), replica.conn());
    for (key, _) in &at {
        let (db, k) = key.split_once(' ').unwrap();
        let _: () = redis::cmd("SELECT").arg(db).query(&mut m).unwrap();
        let _: () = redis::cmd("SELECT").arg(db).query(&mut r).unwrap();
        let ta: i64 = m.pttl(k).unwrap();
        let tb: i64 = r.pttl(k).unwrap();
        assert!((ta - tb).abs() < 2_000, "{key}: pttl {ta} vs {tb}");
    }
}

/// Writes on several keys and databases until stopped (bounded); returns
/// how many it made.
fn writer(master: &Server, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let client = master.client();
    std::thread::spawn(move || {
        let mut c = client.get_connection().unwrap();
        let mut n = 0u64;
        while !stop.load(Ordering::Acquire) && n < 200_000 {
            let db = DBS[(n % 3) as usize];
            let mut p = redis::pipe();
            p.cmd("SELECT").arg(db).ignore();
            for j in 0..16 {
                let i = n * 16 + j;
                p.cmd("INCR").arg(format!("w{}", i % 50)).ignore();
                p.cmd("LPUSH").arg(format!("wl{}", i % 5)).arg(i).ignore();
                p.cmd("LTRIM")
                    .arg(format!("wl{}", i % 5))
                    .arg(0)
                    .arg(20)
                    .ignore();
                p.cmd("HINCRBY")
                    .arg("wh")
                    .arg(format!("f{}", i % 9))
                    .arg(1)
                    .ignore();
                p.cmd("SET")
                    .arg(format!("wx{}", i % 30))
                    .arg(i)
                    .arg("EX")
                    .arg(1000)
                    .ignore();
            }
            let _: () = p.query(&mut c).unwrap();
            n += 1;
        }
        n
    })
}

/// A MULTI/EXEC over keys on different shards.
fn cross_shard_tx(c: &mut Connection, shards: usize) {
    let keys = common::keys_across_shards("tx", 4, shards);
    let mut p = redis::pipe();
    p.atomic();
    for (i, k) in keys.iter().enumerate() {
        p.cmd("SET").arg(k).arg(i).ignore();
        p.cmd("INCRBY").arg(k).arg(10).ignore();
    }
    p.cmd("DEL").arg(&keys[0]).ignore();
    let _: () = p.query(c).unwrap();
}

/// Full sync under writes, then the stream; `extra` picks the sync kind.
fn full_sync_under_writes(shards: usize, extra: &[&str]) -> (Server, Server) {
    let s = shards.to_string();
    let master = start_master(&s, extra);
    let mut c = master.conn();
    fill(&mut c, "a", 3000);
    let stop = Arc::new(AtomicBool::new(false));
    let w = writer(&master, stop.clone());
    let replica = start_replica(&master);
    let mut r = replica.conn();
    // Writes keep coming while the replica syncs and after.
    wait_until("the sync to end", || {
        info_field(&mut r, "replication", "master_link_status") == "up"
    });
    fill(&mut c, "b", 200);
    cross_shard_tx(&mut c, shards);
    stop.store(true, Ordering::Release);
    let n = w.join().unwrap();
    assert!(n > 0);
    assert_same(&master, &replica);
    let mut c = master.conn();
    assert_eq!(info_field(&mut c, "stats", "sync_full"), "1");
    assert_eq!(info_field(&mut c, "replication", "connected_slaves"), "1");
    (master, replica)
}

fn skip() -> bool {
    if !common::redis_available() {
        eprintln!("skipped: redis-server not found");
        return true;
    }
    common::testing_real_redis()
}

#[test]
fn disk_sync_with_two_shards_unconsolidated() {
    if skip() {
        return;
    }
    let (master, _replica) = full_sync_under_writes(
        2,
        &["--shard-consolidation", "no", "--repl-diskless-sync", "no"],
    );
    let log = master.log();
    assert!(
        log.contains("Starting BGSAVE for SYNC with target: disk"),
        "{log}"
    );
}

#[test]
fn diskless_sync_with_sixteen_shards() {
    if skip() {
        return;
    }
    let (master, _replica) = full_sync_under_writes(16, &["--repl-diskless-sync", "yes"]);
    let log = master.log();
    assert!(
        log.contains("Starting BGSAVE for SYNC with target: replicas sockets"),
        "{log}"
    );
}

#[test]
fn a_cut_link_resumes_with_a_partial_resync() {
    if skip() {
        return;
    }
    let master = start_master("4", &[]);
    let mut c = master.conn();
    fill(&mut c, "a", 300);
    let replica = start_replica(&master);
    assert_same(&master, &replica);
    let before: u64 = info_field(&mut c, "stats", "sync_partial_ok")
        .parse()
        .unwrap();
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut c)
        .unwrap();
    assert_eq!(killed, 1);
    // Writes while the link is down and while it comes back.
    fill(&mut c, "b", 200);
    cross_shard_tx(&mut c, 4);
    wait_until("a partial resync", || {
        info_field(&mut c, "stats", "sync_partial_ok")
            .parse::<u64>()
            .unwrap()
            > before
    });
    fill(&mut c, "c", 50);
    assert_same(&master, &replica);
    assert_eq!(info_field(&mut c, "stats", "sync_full"), "1");
    let mut r = replica.conn();
    let log = replica.log();
    assert!(
        log.contains("Successful partial resynchronization"),
        "{log}"
    );
    // ROLE lists it with its offset.
    let role = cmd(&mut c, &["ROLE"]);
    let Value::Array(parts) = role else {
        panic!("ROLE: {role:?}")
    };
    assert_eq!(parts[0], Value::BulkString(b"master".to_vec()));
    let Value::Array(replicas) = &parts[2] else {
        panic!("ROLE: {parts:?}")
    };
    assert_eq!(replicas.len(), 1);
    let _ = info_field(&mut r, "replication", "master_link_status");
}

#[test]
fn wait_counts_acknowledging_replicas() {
    if skip() {
        return;
    }
    let master = start_master("2", &[]);
    let mut c = master.conn();
    let _: () = c.set("k", "v").unwrap();
    // No replica: the timeout, then 0.
    let n: i64 = redis::cmd("WAIT").arg(1).arg(200).query(&mut c).unwrap();
    assert_eq!(n, 0);
    let replica = start_replica(&master);
    assert_same(&master, &replica);
    let _: () = c.set("k2", "v2").unwrap();
    let n: i64 = redis::cmd("WAIT").arg(1).arg(0).query(&mut c).unwrap();
    assert_eq!(n, 1);
    let mut r = replica.conn();
    let v: String = r.get("k2").unwrap();
    assert_eq!(v, "v2", "WAIT returned before the replica had the write");
    // Two replicas asked for, one attached: the timeout, then 1.
    let n: i64 = redis::cmd("WAIT").arg(2).arg(300).query(&mut c).unwrap();
    assert_eq!(n, 1);
    // min-replicas-to-write: refused with two required, accepted with one.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("min-replicas-to-write")
        .arg(2)
        .query(&mut c)
        .unwrap();
    wait_until("NOREPLICAS", || {
        let r: redis::RedisResult<()> = c.set("k3", "v");
        r.is_err_and(|e| e.to_string().contains("NOREPLICAS"))
    });
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("min-replicas-to-write")
        .arg(1)
        .query(&mut c)
        .unwrap();
    wait_until("writes accepted again", || {
        c.set::<_, _, ()>("k3", "v").is_ok()
    });
}

#[test]
fn a_replica_sending_garbage_hurts_nobody_else() {
    if skip() {
        return;
    }
    let master = start_master("2", &["--repl-diskless-sync", "no"]);
    let mut c = master.conn();
    fill(&mut c, "a", 50);
    let mut bad = RawConn::connect(&master.addr());
    assert_eq!(
        bad.cmd_str(&["REPLCONF", "listening-port", "1"]),
        b"+OK\r\n"
    );
    common::send_str(&mut bad, &["PSYNC", "?", "-1"]);
    let line = bad.read_reply();
    assert!(
        line.starts_with(b"+FULLRESYNC "),
        "{}",
        String::from_utf8_lossy(&line)
    );
    bad.send(b"\x00\x01 garbage *** $-7\r\n*x\r\n");
    // Other clients go on.
    for i in 0..100 {
        let _: () = c.set(format!("after{i}"), i).unwrap();
    }
    let v: i64 = c.get("after99").unwrap();
    assert_eq!(v, 99);
    wait_until("the bad link to be dropped", || {
        info_field(&mut c, "replication", "connected_slaves") == "0"
    });
    // A real replica still syncs.
    let replica = start_replica(&master);
    assert_same(&master, &replica);
}

/// The stream and the AOF share the writer: turning the AOF off keeps the
/// stream going (the writer drops only its file), turning it on again
/// attaches a file at the rewrite's instant; nothing is lost either way.
#[test]
fn the_aof_turned_off_and_on_under_a_replica() {
    if skip() {
        return;
    }
    let dir = common::DataDir::new("repl-aof");
    let master = start_master("3", &["--appendonly", "yes", "--dir", dir.path()]);
    let mut c = master.conn();
    fill(&mut c, "a", 100);
    let replica = start_replica(&master);
    assert_same(&master, &replica);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("no")
        .query(&mut c)
        .unwrap();
    wait_until("the AOF off", || {
        info_field(&mut c, "persistence", "aof_enabled") == "0"
    });
    fill(&mut c, "b", 100);
    assert_same(&master, &replica);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes")
        .query(&mut c)
        .unwrap();
    fill(&mut c, "c", 100);
    wait_until("the AOF rewrite", || {
        info_field(&mut c, "persistence", "aof_rewrite_in_progress") == "0"
            && info_field(&mut c, "persistence", "aof_enabled") == "1"
    });
    fill(&mut c, "d", 100);
    assert_same(&master, &replica);
    assert_eq!(info_field(&mut c, "stats", "sync_full"), "1");
    // The AOF got the writes after it came back (in the base when they
    // came before the rewrite's instant, else in the incr file).
    let aof_dir = dir.0.join("appendonlydir");
    let logged = std::fs::read_dir(&aof_dir)
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path()).ok())
        .any(|b| b.windows(4).any(|w| w == b"ds99"));
    assert!(
        logged,
        "the AOF lacks the writes made after it was turned on"
    );
}

/// The wire format of both sync kinds, read raw: SYNC (no capabilities)
/// gets a disk-style `$<len>` RDB with no `+FULLRESYNC`; PSYNC with
/// `capa eof` under `repl-diskless-sync yes` gets `+FULLRESYNC <replid>
/// <offset>` and an EOF-marked transfer ending with its 40-byte mark.
#[test]
fn sync_and_psync_on_the_wire() {
    if skip() {
        return;
    }
    let master = start_master("2", &["--repl-diskless-sync", "yes"]);
    let mut c = master.conn();
    let _: () = c.set("k", "v").unwrap();

    let mut old = RawConn::connect(&master.addr());
    common::send_str(&mut old, &["SYNC"]);
    // Newlines may precede the bulk (keep-alives while the save runs).
    let skip_nl = |b: &[u8]| b.iter().position(|&c| c != b'\n').unwrap_or(b.len());
    let bulk = read_until(&mut old, |b| {
        let b = &b[skip_nl(b)..];
        let Some(nl) = b.windows(2).position(|w| w == b"\r\n") else {
            return false;
        };
        let len: usize = std::str::from_utf8(&b[1..nl]).unwrap().parse().unwrap();
        b.len() >= nl + 2 + len
    });
    let bulk = &bulk[skip_nl(&bulk)..];
    assert_eq!(bulk[0], b'$', "{}", String::from_utf8_lossy(bulk));
    let nl = bulk.windows(2).position(|w| w == b"\r\n").unwrap();
    assert!(bulk[nl + 2..].starts_with(b"REDIS0010"));

    let mut new = RawConn::connect(&master.addr());
    assert_eq!(
        new.cmd_str(&["REPLCONF", "capa", "eof", "capa", "psync2"]),
        b"+OK\r\n"
    );
    common::send_str(&mut new, &["PSYNC", "?", "-1"]);
    let got = read_until(&mut new, |b| {
        let Some(at) = b.windows(5).position(|w| w == b"$EOF:") else {
            return false;
        };
        let Some(mark) = b.get(at + 5..at + 45) else {
            return false;
        };
        b.len() > at + 47 + 40 && b.ends_with(mark)
    });
    // Newlines may precede `+FULLRESYNC` too (keep-alives while the
    // sync waits for `repl-diskless-sync-delay`, as Redis sends them).
    let text = String::from_utf8_lossy(&got);
    let line = text.trim_start_matches('\n').lines().next().unwrap();
    let words: Vec<&str> = line.split(' ').collect();
    assert_eq!(words[0], "+FULLRESYNC", "{line}");
    assert_eq!(words[1].len(), 40);
    assert_eq!(
        words[1],
        info_field(&mut c, "replication", "master_replid"),
        "the announced ID is the master's"
    );
    assert!(text.contains("\r\n$EOF:"));
    assert!(text.contains("REDIS0010"));
    assert_eq!(info_field(&mut c, "stats", "sync_full"), "2");
}

/// Reads from `c` until `done` holds on everything read (bounded).
fn read_until(c: &mut RawConn, mut done: impl FnMut(&[u8]) -> bool) -> Vec<u8> {
    use std::io::Read;
    let mut got = c.buffered().to_vec();
    let mut s = c.stream();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let t0 = Instant::now();
    let mut chunk = [0u8; 65536];
    while !done(&got) {
        assert!(
            t0.elapsed() < DEADLINE,
            "read only {:?}",
            String::from_utf8_lossy(&got)
        );
        if let Ok(n) = s.read(&mut chunk) {
            assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&chunk[..n]);
        }
    }
    got
}

/// A replica that stops reading is cut at the `replica` output limit
/// (the stream waiting for it would otherwise grow without bound); the
/// master and its other clients go on.
#[test]
fn a_replica_that_falls_behind_is_cut_at_its_output_limit() {
    if skip() {
        return;
    }
    let master = start_master("2", &["--repl-diskless-sync", "no"]);
    let mut c = master.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("client-output-buffer-limit")
        .arg("replica 1mb 0 0")
        .query(&mut c)
        .unwrap();
    let mut slow = RawConn::connect(&master.addr());
    common::send_str(&mut slow, &["PSYNC", "?", "-1"]);
    wait_until("the replica to stream", || {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut c).unwrap();
        info.contains("state=online")
    });
    // It never reads: the kernel's buffers fill, then its queue.
    let big = "x".repeat(1 << 20);
    let t0 = Instant::now();
    while info_field(&mut c, "replication", "connected_slaves") != "0" {
        assert!(t0.elapsed() < DEADLINE, "the slow replica was never cut");
        for i in 0..8 {
            let _: () = c.set(format!("big{i}"), &big).unwrap();
        }
    }
    let log = master.log();
    assert!(log.contains("overcoming of output buffer limits"), "{log}");
    let _: () = c.set("still", "fine").unwrap();
}

/// SHUTDOWN hands the stream's last records to the replicas before the
/// process exits.
#[test]
fn shutdown_sends_the_last_writes_to_the_replica() {
    if skip() {
        return;
    }
    let master = start_master("2", &[]);
    let mut c = master.conn();
    fill(&mut c, "a", 20);
    let replica = start_replica(&master);
    assert_same(&master, &replica);
    let mut p = redis::pipe();
    for i in 0..2000 {
        p.cmd("SET").arg(format!("last{i}")).arg(i).ignore();
    }
    let _: () = p.query(&mut c).unwrap();
    let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").arg("NOSAVE").query(&mut c);
    let mut r = replica.conn();
    wait_until("the last write on the replica", || {
        r.get::<_, Option<i64>>("last1999").unwrap() == Some(1999)
    });
}

/// Two replicas at once: both sync (sharing a diskless snapshot when they
/// ask within the delay) and both stream; INFO lists each.
#[test]
fn two_replicas_at_once() {
    if skip() {
        return;
    }
    let master = start_master("3", &["--repl-diskless-sync-delay", "1"]);
    let mut c = master.conn();
    fill(&mut c, "a", 500);
    let stop = Arc::new(AtomicBool::new(false));
    let w = writer(&master, stop.clone());
    let r1 = start_replica(&master);
    let r2 = start_replica(&master);
    let mut a = r1.conn();
    let mut b = r2.conn();
    wait_until("both links up", || {
        info_field(&mut a, "replication", "master_link_status") == "up"
            && info_field(&mut b, "replication", "master_link_status") == "up"
    });
    fill(&mut c, "b", 100);
    stop.store(true, Ordering::Release);
    w.join().unwrap();
    assert_same(&master, &r1);
    assert_same(&master, &r2);
    let info: String = redis::cmd("INFO").arg("replication").query(&mut c).unwrap();
    assert!(info.contains("connected_slaves:2"), "{info}");
    assert!(info.contains("\r\nslave0:ip=127.0.0.1,port="), "{info}");
    assert!(info.contains("\r\nslave1:ip=127.0.0.1,port="), "{info}");
    let sent: u64 = info_field(&mut c, "stats", "total_net_repl_output_bytes")
        .parse()
        .unwrap();
    assert!(sent > 0);
    assert_eq!(
        info_field(&mut c, "memory", "mem_replication_backlog"),
        "1048576"
    );
    assert_eq!(
        info_field(&mut c, "replication", "repl_backlog_active"),
        "1"
    );
}

/// `redis.set_repl` sends each call's records where Redis's does: none,
/// the AOF only, or the replicas only (Redis's Tcl unit/scripting
/// "Test selective replication of certain Redis commands from Lua"). The
/// keys are on several shards (a script across shards, and one on each
/// key's own shard), from EVAL and from a function.
#[test]
fn set_repl_sends_records_only_where_asked() {
    if skip() {
        return;
    }
    const BODY: &str = "redis.call('set',KEYS[1],'1'); \
        redis.set_repl(redis.REPL_NONE); redis.call('set',KEYS[2],'2'); \
        redis.set_repl(redis.REPL_AOF); redis.call('set',KEYS[3],'3'); \
        redis.set_repl(redis.REPL_REPLICA); redis.call('set',KEYS[4],'4'); \
        redis.set_repl(redis.REPL_ALL); redis.call('set',KEYS[5],'5')";
    for shards in ["2", "16"] {
        let dir = common::DataDir::new("set-repl");
        let aof = ["--dir", dir.path(), "--appendonly", "yes"];
        let master = start_master(shards, &aof);
        let replica = start_replica(&master);
        let mut c = master.conn();
        cmd(
            &mut c,
            &[
                "FUNCTION",
                "LOAD",
                &format!("#!lua name=lib\nredis.register_function('f', function(KEYS) {BODY} end)"),
            ],
        );
        wait_caught_up(&master, &replica);
        let keys = |t: &str| (1..=5).map(|i| format!("{{{t}}}{i}")).collect::<Vec<_>>();
        let spread = |t: &str| (1..=5).map(|i| format!("{t}{i}")).collect::<Vec<_>>();
        let sets = [
            ("EVAL", keys("e")),
            ("EVAL", spread("s")),
            ("FCALL", spread("f")),
        ];
        for (how, ks) in &sets {
            let head = if *how == "EVAL" { BODY } else { "f" };
            let mut args = vec![*how, head, "5"];
            args.extend(ks.iter().map(String::as_str));
            cmd(&mut c, &args);
        }
        // Every write of this client acknowledged by the replica.
        let acked: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut c).unwrap();
        assert_eq!(acked, 1);
        let mut r = replica.conn();
        for (_, ks) in &sets {
            let on_master: Vec<Option<String>> = c.mget(ks).unwrap();
            let on_replica: Vec<Option<String>> = r.mget(ks).unwrap();
            let want =
                |v: &[Option<&str>]| v.iter().map(|x| x.map(String::from)).collect::<Vec<_>>();
            assert_eq!(
                on_master,
                want(&[Some("1"), Some("2"), Some("3"), Some("4"), Some("5")])
            );
            assert_eq!(
                on_replica,
                want(&[Some("1"), None, None, Some("4"), Some("5")]),
                "{shards} shards: {ks:?} on the replica"
            );
        }
        // The AOF: what a restart from it loads.
        drop(c);
        drop(replica);
        drop(master);
        let again = start_master(shards, &aof);
        let mut c = again.conn();
        for (_, ks) in &sets {
            let back: Vec<Option<String>> = c.mget(ks).unwrap();
            assert_eq!(
                back,
                [Some("1"), None, Some("3"), None, Some("5")].map(|x| x.map(String::from)),
                "{shards} shards: {ks:?} loaded from the AOF"
            );
        }
    }
}

/// Redis propagates a write before it replies: once a client has read a
/// write's reply, INFO's `master_repl_offset` and ROLE's offset count its
/// records. Redis's Tcl `wait_for_ofs_sync` and tools comparing a
/// replica's offset with its master's rely on it. Before, the stream
/// writer's next turn fed them: 220 of 300 writes read an offset that
/// did not count them (16 shards apart), and a replica could look caught
/// up while it lacked the last writes. Single-shard and cross-shard
/// writes, a script and a MULTI/EXEC, at 2 and 16 shards, consolidated
/// and not.
fn answered_writes_count_in_the_offset(shards: &str, consolidation: &str) {
    if skip() {
        return;
    }
    let master = start_master(shards, &["--shard-consolidation", consolidation]);
    let _replica = start_replica(&master);
    let mut m = master.conn();
    wait_until("the replica to come online", || {
        // One INFO (`info_field` panics while `slave0` is absent).
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut m)
            .expect("INFO");
        info.contains("state=online")
    });
    let offset = |m: &mut Connection| -> u64 {
        info_field(m, "replication", "master_repl_offset")
            .parse()
            .expect("master_repl_offset")
    };
    for i in 0..200 {
        let before = offset(&mut m);
        let (a, b, c) = (format!("a{i}"), format!("b{i}"), format!("c{i}"));
        match i % 4 {
            0 => cmd(&mut m, &["SET", &a, "v"]),
            1 => cmd(&mut m, &["MSET", &a, "1", &b, "2", &c, "3"]),
            2 => cmd(
                &mut m,
                &[
                    "EVAL",
                    "redis.call('SET', KEYS[1], 'x') return redis.call('INCR', KEYS[2])",
                    "2",
                    &a,
                    &b,
                ],
            ),
            _ => {
                let mut p = redis::pipe();
                p.atomic().cmd("SET").arg(&a).arg("t").cmd("DEL").arg(&c);
                p.query::<Value>(&mut m).expect("MULTI/EXEC");
                Value::Okay
            }
        };
        let after = offset(&mut m);
        assert!(after > before, "write {i}: offset {before} -> {after}");
        // ROLE reads the same offset.
        let role: Vec<Value> = redis::cmd("ROLE").query(&mut m).expect("ROLE");
        assert_eq!(role[1], Value::Int(after as i64), "write {i}");
    }
}

#[test]
fn answered_writes_count_in_the_offset_2() {
    answered_writes_count_in_the_offset("2", "yes");
}

#[test]
fn answered_writes_count_in_the_offset_2_apart() {
    answered_writes_count_in_the_offset("2", "no");
}

#[test]
fn answered_writes_count_in_the_offset_16() {
    answered_writes_count_in_the_offset("16", "yes");
}

#[test]
fn answered_writes_count_in_the_offset_16_apart() {
    answered_writes_count_in_the_offset("16", "no");
}

/// `min-replicas-to-write`: a replica counts as good as soon as INFO shows
/// it online, and stops counting as soon as INFO no longer lists it, as
/// Redis's `refreshGoodSlavesCount` (at `replicaPutOnline` and when a
/// replica goes). Before, the replication cron's next look decided: a
/// write right after the replica came online was refused NOREPLICAS
/// (Redis's Tcl unit/scripting 'not enough good replicas state change
/// during long script' failed on it).
#[test]
fn min_replicas_follow_a_replica_coming_and_going_at_once() {
    if skip() {
        return;
    }
    let master = start_master("4", &["--min-replicas-to-write", "1"]);
    let mut m = master.conn();
    let set = |m: &mut Connection| -> String {
        match redis::cmd("SET").arg("k").arg("v").query::<Value>(m) {
            Ok(v) => format!("{v:?}"),
            Err(e) => e.to_string(),
        }
    };
    let replication = |m: &mut Connection| -> String {
        redis::cmd("INFO")
            .arg("replication")
            .query(m)
            .expect("INFO")
    };
    assert!(set(&mut m).contains("NOREPLICAS"), "no replica yet");
    let replica = start_replica(&master);
    wait_until("the replica to come online", || {
        replication(&mut m).contains("state=online")
    });
    assert_eq!(
        set(&mut m),
        format!("{:?}", Value::Okay),
        "a write right after the replica came online"
    );
    drop(replica);
    wait_until("the replica to be gone", || {
        replication(&mut m).contains("connected_slaves:0")
    });
    assert!(
        set(&mut m).contains("NOREPLICAS"),
        "a write right after the replica went"
    );
}
