//! Sentinel failover of Tessera (issue 25.4): three real `redis-sentinel`
//! processes (Debian's, Redis 7.0) monitor a Tessera master with two
//! Tessera replicas, discover the replicas and each other (INFO, ROLE,
//! CLIENT SETNAME, pub/sub on `__sentinel__:hello`), and when the master
//! dies (`kill -9`) fail over: REPLICAOF NO ONE on one replica, CONFIG
//! REWRITE, the other replica repointed. Every write that `WAIT 1`
//! acknowledged before the kill is on the new master, and redis-py's
//! `Sentinel` client follows the new master.
//!
//! Skipped with a message when `redis-sentinel` is not installed, unless
//! `TESSERA_REQUIRE_REDIS=1` (CI), which makes that a failure. Every wait
//! has a deadline.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, unique_temp_dir, RawConn, Server};

fn sentinel_available() -> bool {
    let found = Command::new("redis-sentinel")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found && std::env::var("TESSERA_REQUIRE_REDIS").is_ok_and(|v| v == "1") {
        panic!("redis-sentinel is not on PATH but TESSERA_REQUIRE_REDIS=1");
    }
    found
}

/// A `redis-sentinel` process with its own config file and directory.
struct Sentinel {
    port: u16,
    child: Child,
    dir: PathBuf,
}

impl Sentinel {
    fn start(master_port: u16) -> Sentinel {
        let dir = unique_temp_dir("sentinel");
        let port = free_port();
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nlogfile {}\n\
                 sentinel resolve-hostnames no\n\
                 sentinel monitor mymaster 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds mymaster 1000\n\
                 sentinel failover-timeout mymaster 10000\n\
                 sentinel parallel-syncs mymaster 1\n",
                dir.display(),
                dir.join("sentinel.log").display(),
            ),
        )
        .unwrap();
        let child = Command::new("redis-sentinel")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-sentinel");
        let s = Sentinel { port, child, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-sentinel did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    fn conn(&self) -> RawConn {
        RawConn::connect(&format!("127.0.0.1:{}", self.port))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("sentinel.log")).unwrap_or_default()
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn text(r: Vec<u8>) -> String {
    String::from_utf8_lossy(&r).into_owned()
}

/// Polls `f` every 100 ms until it is true or `secs` pass.
fn wait_until(secs: u64, what: &str, mut f: impl FnMut() -> bool, on_fail: impl Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(
            Instant::now() < deadline,
            "{what} within {secs} s\n{}",
            on_fail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn info_field(c: &mut RawConn, section: &str, field: &str) -> Option<String> {
    let info = text(c.cmd_str(&["INFO", section]));
    let prefix = format!("{field}:");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix).map(|v| v.trim().to_string()))
}

/// The master's port as `SENTINEL get-master-addr-by-name` gives it.
fn master_port(s: &Sentinel) -> Option<u16> {
    let r = text(
        s.conn()
            .cmd_str(&["SENTINEL", "get-master-addr-by-name", "mymaster"]),
    );
    // *2 $9 127.0.0.1 $N port
    r.lines().nth(4).and_then(|p| p.trim().parse().ok())
}

#[test]
fn sentinels_fail_over_a_killed_tessera_master() {
    if !common::redis_available() || !sentinel_available() {
        eprintln!("skipped: redis-sentinel not installed");
        return;
    }
    let mut master = Server::tessera(&["--shards", "2"]);
    let mport = master.port().to_string();
    let replicas: Vec<Server> = (0..2)
        .map(|_| Server::tessera(&["--shards", "2", "--replicaof", "127.0.0.1", &mport]))
        .collect();
    let mut m = master.raw();
    wait_until(
        30,
        "two replicas online",
        || info_field(&mut m, "replication", "connected_slaves").as_deref() == Some("2"),
        || text(master.raw().cmd_str(&["INFO", "replication"])),
    );
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(master.port())).collect();
    let logs = || {
        sentinels
            .iter()
            .map(|s| s.log())
            .collect::<Vec<_>>()
            .join("\n---\n")
    };
    // Each sentinel finds both replicas (INFO) and the two other
    // sentinels (hello messages over Tessera's pub/sub).
    for s in &sentinels {
        wait_until(
            30,
            "replicas and sentinels discovered",
            || {
                let mut c = s.conn();
                let reps = text(c.cmd_str(&["SENTINEL", "replicas", "mymaster"]));
                let sens = text(c.cmd_str(&["SENTINEL", "sentinels", "mymaster"]));
                reps.starts_with("*2\r\n") && sens.starts_with("*2\r\n")
            },
            logs,
        );
    }
    // Writes acknowledged by a replica before the master dies.
    let mut acked = Vec::new();
    for i in 0..200 {
        let k = format!("key:{i}");
        assert_eq!(m.cmd_str(&["SET", &k, &i.to_string()]), b"+OK\r\n");
        if i % 20 == 19 {
            let n = text(m.cmd_str(&["WAIT", "1", "5000"]));
            assert!(n.starts_with(":1") || n.starts_with(":2"), "WAIT: {n}");
            acked = (0..=i).collect();
        }
    }
    let old = master.port();
    let pid = master.pid().expect("master pid");
    kill9(pid);
    assert!(wait_dead(&mut master), "the master did not die");

    // Failover: a quorum agrees, one replica is promoted.
    wait_until(
        60,
        "the sentinels name a new master",
        || {
            sentinels
                .iter()
                .all(|s| master_port(s).is_some_and(|p| p != old))
        },
        logs,
    );
    let new_port = master_port(&sentinels[0]).unwrap();
    let promoted = replicas
        .iter()
        .find(|r| r.port() == new_port)
        .expect("the new master is one of the replicas");
    let other = replicas.iter().find(|r| r.port() != new_port).unwrap();
    let mut nm = promoted.raw();
    wait_until(
        30,
        "the promoted replica is a master",
        || text(nm.cmd_str(&["ROLE"])).starts_with("*3\r\n$6\r\nmaster"),
        logs,
    );
    for i in &acked {
        let k = format!("key:{i}");
        assert_eq!(
            text(nm.cmd_str(&["GET", &k])),
            format!("${}\r\n{i}\r\n", i.to_string().len()),
            "{k} was acknowledged by WAIT 1 before the kill"
        );
    }
    // The other replica follows the new master.
    let mut o = other.raw();
    wait_until(
        60,
        "the other replica follows the new master",
        || {
            info_field(&mut o, "replication", "master_port").as_deref()
                == Some(&new_port.to_string())
                && info_field(&mut o, "replication", "master_link_status").as_deref() == Some("up")
        },
        || {
            format!(
                "{}\n{}",
                text(other.raw().cmd_str(&["INFO", "replication"])),
                logs()
            )
        },
    );
    assert_eq!(nm.cmd_str(&["SET", "after", "failover"]), b"+OK\r\n");
    wait_until(
        30,
        "a write on the new master reaches the other replica",
        || o.cmd_str(&["GET", "after"]) == b"$8\r\nfailover\r\n",
        logs,
    );
    // redis-py's Sentinel client finds the new master.
    // (Retried for up to 30 s: right after a failover a sentinel can
    // still flag the new master down until its links to it are up.)
    let script = format!(
        "import time\n\
         from redis.sentinel import Sentinel, MasterNotFoundError\n\
         s = Sentinel([('127.0.0.1', {})], socket_timeout=5)\n\
         deadline = time.time() + 30\n\
         while True:\n\
         \x20   try:\n\
         \x20       m = s.master_for('mymaster', socket_timeout=5)\n\
         \x20       m.set('py', 'client')\n\
         \x20       break\n\
         \x20   except MasterNotFoundError:\n\
         \x20       if time.time() > deadline: raise\n\
         \x20       time.sleep(0.2)\n\
         print(s.discover_master('mymaster')[1], m.get('py').decode())\n",
        sentinels[1].port
    );
    let out = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(&script)
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let stdout = String::from_utf8_lossy(&o.stdout);
            assert_eq!(stdout.trim(), format!("{new_port} client"));
            assert_eq!(nm.cmd_str(&["GET", "py"]), b"$6\r\nclient\r\n");
        }
        Ok(o) if String::from_utf8_lossy(&o.stderr).contains("No module named") => {
            eprintln!("redis-py missing: its Sentinel client not tried");
        }
        Ok(o) => panic!("redis-py: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => eprintln!("no python3 ({e}): redis-py's Sentinel client not tried"),
    }
}

fn kill9(pid: u32) {
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
}

fn wait_dead(s: &mut Server) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.is_running() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}
