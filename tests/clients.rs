//! Real client libraries against Tessera: scripts in `tests/clients/`
//! written for redis-py (Debian's `python3-redis`, installed by `.ci/run`)
//! run against a fresh server, the `redis` crate's own PubSub, and a
//! BullMQ-like queue script over keys on every shard under concurrent
//! connections. Every test runs in each layout of [`common::LAYOUTS`] (2
//! and 16 shards, consolidated and not; `per_layout!`).
//!
//! A script is run with `/usr/bin/python3` (Debian's interpreter, where
//! `python3-redis` installs) under a time limit, and must exit 0. Without
//! redis-py the script tests print `SKIPPED` and pass, unless
//! `TESSERA_REQUIRE_REDIS=1` (set by `.ci/run`).

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Layout, Server};

/// Bound on one client script.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);
const PYTHON: &str = "/usr/bin/python3";

fn redis_py_available() -> bool {
    Command::new(PYTHON)
        .args(["-c", "import redis"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `tests/clients/<name>` against `srv`; panics with its output if
/// it fails or overruns.
fn run_script(name: &str, srv: &Server) {
    if !redis_py_available() {
        let required = std::env::var("TESSERA_REQUIRE_REDIS").is_ok_and(|v| v == "1");
        assert!(!required, "redis-py (python3-redis) is not installed");
        eprintln!("SKIPPED {name}: redis-py is not installed");
        return;
    }
    let path = format!("{}/tests/clients/{name}", env!("CARGO_MANIFEST_DIR"));
    let mut child = Command::new(PYTHON)
        .arg(&path)
        .arg(srv.port().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn python3");
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let out = child.wait_with_output().expect("output");
            assert!(
                status.success(),
                "{name} failed ({status}):\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        if start.elapsed() > SCRIPT_TIMEOUT {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{name} ran past {SCRIPT_TIMEOUT:?}:\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A client-side cache on redis-py 4 (REDIRECT to a RESP2 subscriber):
/// every cached key is invalidated when another client changes it.
fn redis_py_tracking_cache(layout: Layout) {
    let srv = layout.tessera(&[]);
    run_script("redis_py_cache.py", &srv);
}

fn redis_py_pubsub(layout: Layout) {
    let srv = layout.tessera(&[]);
    run_script("redis_py_pubsub.py", &srv);
}

/// redis-py as a keyspace listener (a session store's pattern): `set`,
/// `expire`, then `expired` from active expiry on the key's keyspace
/// channel; `expired` for keys on every shard through `run_in_thread`.
fn redis_py_notify(layout: Layout) {
    let srv = layout.tessera(&[]);
    run_script("redis_py_notify.py", &srv);
}

/// The `redis` crate's PubSub: subscribe, get messages published from
/// another connection, patterns, unsubscribe.
fn redis_crate_pubsub(layout: Layout) {
    let srv = layout.tessera(&[]);
    let mut sub_conn = srv.conn();
    let mut publisher = srv.conn();
    let mut ps = sub_conn.as_pubsub();
    ps.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    ps.subscribe("chan").expect("subscribe");
    ps.psubscribe("pat.*").expect("psubscribe");
    let n: i64 = redis::cmd("PUBLISH")
        .arg("chan")
        .arg("one")
        .query(&mut publisher)
        .expect("publish");
    assert_eq!(n, 1);
    let m = ps.get_message().expect("message");
    assert_eq!(m.get_channel_name(), "chan");
    assert_eq!(m.get_payload::<String>().unwrap(), "one");
    let n: i64 = redis::cmd("PUBLISH")
        .arg("pat.x")
        .arg("two")
        .query(&mut publisher)
        .expect("publish");
    assert_eq!(n, 1);
    let m = ps.get_message().expect("pmessage");
    assert_eq!(m.get_pattern::<String>().unwrap(), "pat.*");
    assert_eq!(m.get_channel_name(), "pat.x");
    assert_eq!(m.get_payload::<String>().unwrap(), "two");
    ps.unsubscribe("chan").expect("unsubscribe");
    ps.punsubscribe("pat.*").expect("punsubscribe");
    drop(ps);
    let n: i64 = redis::cmd("PUBLISH")
        .arg("chan")
        .arg("three")
        .query(&mut publisher)
        .expect("publish");
    assert_eq!(n, 0);
}

/// redis-py's `Lock` (acquire, extend, reacquire, release; two threads
/// contending) and `register_script` (EVALSHA, the NOSCRIPT fallback, in a
/// pipeline), and its function commands.
fn redis_py_scripting(layout: Layout) {
    let srv = layout.tessera(&[]);
    run_script("redis_py_scripting.py", &srv);
}

/// The queue's nine keys, key `i` on shard `i % shards`.
fn queue_keys(shards: usize) -> Vec<String> {
    let names = [
        "q:wait",
        "q:active",
        "q:completed",
        "q:delayed",
        "q:jobs",
        "q:attempts",
        "q:stats",
        "q:events",
        "q:seen",
    ];
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            (0..10_000)
                .map(|n| format!("{name}.{n}"))
                .find(|k| commands::table::shard_of(k.as_bytes(), shards) == i % shards)
                .expect("a key on every shard")
        })
        .collect()
}

/// One step of a BullMQ-like queue, over nine declared keys (lists, sorted
/// sets, hashes, a set): completes an active job, moves the oldest
/// completed job to the delayed set, promotes the oldest delayed job to
/// the waiting list, and moves a waiting job to active (recording it in
/// the job table, the events list, the seen set and the counters).
/// Replies the job activated, or false.
const QUEUE_STEP: &str = r#"
local a = redis.call('RPOP', KEYS[2])
if a then
  redis.call('ZADD', KEYS[3], ARGV[1], a)
  redis.call('HINCRBY', KEYS[6], a, 1)
  redis.call('HINCRBY', KEYS[7], 'completed', 1)
end
local c = redis.call('ZPOPMIN', KEYS[3])
if c[1] then redis.call('ZADD', KEYS[4], ARGV[1], c[1]) end
local d = redis.call('ZPOPMIN', KEYS[4])
if d[1] then redis.call('LPUSH', KEYS[1], d[1]) end
local j = redis.call('RPOPLPUSH', KEYS[1], KEYS[2])
if j then
  redis.call('HSET', KEYS[5], j, ARGV[1])
  redis.call('SADD', KEYS[9], j)
  redis.call('LPUSH', KEYS[8], j)
  redis.call('LTRIM', KEYS[8], 0, 99)
  redis.call('HINCRBY', KEYS[7], 'activated', 1)
end
return j
"#;

/// Every job where it can be (waiting, active, completed, delayed), read
/// atomically by a read-only script.
const QUEUE_JOBS: &str = r#"#!lua flags=no-writes
local all = redis.call('LRANGE', KEYS[1], 0, -1)
for _, j in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do all[#all + 1] = j end
for _, j in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do all[#all + 1] = j end
for _, j in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do all[#all + 1] = j end
return all
"#;

/// No job lost or duplicated: exactly `0..jobs`, once each.
fn check_jobs(mut found: Vec<String>, jobs: usize) {
    found.sort_by_key(|j| j.parse::<usize>().unwrap_or(usize::MAX));
    let want: Vec<String> = (0..jobs).map(|i| i.to_string()).collect();
    assert_eq!(found, want, "a job was lost or duplicated");
}

/// A BullMQ-like script moving jobs across nine keys on four shards, run
/// concurrently by eight connections while a ninth reads every job
/// atomically: no job is ever lost or duplicated, and the counters add up
/// (every activation and completion happened exactly once).
fn redis_crate_queue_script_across_shards(layout: Layout) {
    let srv = layout.tessera(&[]);
    let keys = queue_keys(layout.shards);
    let jobs = 50;
    let mut con = srv.conn();
    for i in 0..jobs {
        let _: i64 = redis::cmd("LPUSH")
            .arg(&keys[0])
            .arg(i)
            .query(&mut con)
            .expect("seed");
    }
    let step = redis::Script::new(QUEUE_STEP);
    let read = redis::Script::new(QUEUE_JOBS);
    let (workers, rounds) = (8, 150);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let checker = {
        let client = srv.client();
        let keys = keys.clone();
        let stop = stop.clone();
        let read = read.clone();
        std::thread::spawn(move || {
            let mut con = client.get_connection().expect("connect");
            let mut checks = 0;
            while !stop.load(std::sync::atomic::Ordering::Acquire) || checks == 0 {
                let found: Vec<String> = read.key(&keys[..4]).invoke(&mut con).expect("read jobs");
                check_jobs(found, jobs);
                checks += 1;
            }
            checks
        })
    };
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let client = srv.client();
            let keys = keys.clone();
            let step = step.clone();
            std::thread::spawn(move || {
                let mut con = client.get_connection().expect("connect");
                let mut activated = 0u64;
                for r in 0..rounds {
                    let j: Option<String> = step
                        .key(&keys)
                        .arg(w * rounds + r)
                        .invoke(&mut con)
                        .expect("step");
                    activated += u64::from(j.is_some());
                }
                activated
            })
        })
        .collect();
    let activated: u64 = handles.into_iter().map(|h| h.join().expect("worker")).sum();
    stop.store(true, std::sync::atomic::Ordering::Release);
    let checks = checker.join().expect("checker");
    assert!(checks > 0);
    let found: Vec<String> = read.key(&keys[..4]).invoke(&mut con).expect("read");
    check_jobs(found, jobs);
    let stats: std::collections::HashMap<String, u64> = redis::cmd("HGETALL")
        .arg(&keys[6])
        .query(&mut con)
        .expect("stats");
    assert_eq!(stats["activated"], activated);
    let attempts: std::collections::HashMap<String, u64> = redis::cmd("HGETALL")
        .arg(&keys[5])
        .query(&mut con)
        .expect("attempts");
    assert_eq!(attempts.values().sum::<u64>(), stats["completed"]);
    // Every step but those that found the active list empty completed one.
    assert!(stats["completed"] + 1 >= activated && stats["completed"] <= activated);
    let seen: u64 = redis::cmd("SCARD")
        .arg(&keys[8])
        .query(&mut con)
        .expect("seen");
    assert_eq!(seen, jobs as u64);
    let events: u64 = redis::cmd("LLEN")
        .arg(&keys[7])
        .query(&mut con)
        .expect("events");
    assert_eq!(events, 100);
}

fn redis_py_acl(layout: Layout) {
    let srv = layout.tessera(&[]);
    run_script("redis_py_acl.py", &srv);
}

per_layout!(
    redis_py_tracking_cache,
    redis_py_pubsub,
    redis_py_notify,
    redis_crate_pubsub,
    redis_py_scripting,
    redis_crate_queue_script_across_shards,
    redis_py_acl,
);
