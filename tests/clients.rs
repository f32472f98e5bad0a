//! Real client libraries against Tessera: scripts in `tests/clients/`
//! written for redis-py (Debian's `python3-redis`, installed by `.ci/run`)
//! run against a fresh server, and the `redis` crate's own PubSub.
//!
//! A script is run with `/usr/bin/python3` (Debian's interpreter, where
//! `python3-redis` installs) under a time limit, and must exit 0. Without
//! redis-py the script tests print `SKIPPED` and pass, unless
//! `TESSERA_REQUIRE_REDIS=1` (set by `.ci/run`).

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{testing_real_redis, Server};

/// Four shards on four threads (Redis itself when validating the tests).
fn server() -> Server {
    if testing_real_redis() {
        return Server::tessera(&[]);
    }
    Server::tessera(&["--shards", "4", "--shard-consolidation", "no"])
}

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

#[test]
fn redis_py_pubsub() {
    let srv = server();
    run_script("redis_py_pubsub.py", &srv);
}

/// redis-py as a keyspace listener (a session store's pattern): `set`,
/// `expire`, then `expired` from active expiry on the key's keyspace
/// channel; `expired` for keys on every shard through `run_in_thread`.
#[test]
fn redis_py_notify() {
    let srv = server();
    run_script("redis_py_notify.py", &srv);
}

/// The `redis` crate's PubSub: subscribe, get messages published from
/// another connection, patterns, unsubscribe.
#[test]
fn redis_crate_pubsub() {
    let srv = server();
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

#[test]
fn redis_py_acl() {
    let srv = server();
    run_script("redis_py_acl.py", &srv);
}
