//! AOF rewrites that fail, as Redis 7 handles them: a BGREWRITEAOF whose
//! base cannot be put in place leaves every file listed (a restart loads
//! everything); one whose new incr file cannot be created does not start;
//! `CONFIG SET appendonly yes` whose files cannot be created fails, and one
//! whose rewrite fails keeps the AOF waiting for it (retried from the cron,
//! limited after three failures) with nothing listed until a rewrite
//! succeeds. Every test runs against redis-server too
//! (`TESSERA_TEST_BIN=/usr/bin/redis-server`). The failures are made by
//! putting a directory where a file must go (root ignores permissions).

mod common;

use common::{wait_for, DataDir, Server};
use redis::{Commands, Connection};

fn aofdir(dir: &DataDir) -> std::path::PathBuf {
    dir.0.join("appendonlydir")
}

fn manifest(dir: &DataDir) -> Option<String> {
    std::fs::read_to_string(aofdir(dir).join("appendonly.aof.manifest")).ok()
}

/// A directory where the file `name` of the AOF directory must go.
fn obstacle(dir: &DataDir, name: &str) {
    std::fs::create_dir_all(aofdir(dir).join(name).join("x")).unwrap();
}

fn remove_obstacle(dir: &DataDir, name: &str) {
    std::fs::remove_dir_all(aofdir(dir).join(name)).unwrap();
}

fn info(c: &mut Connection, field: &str) -> String {
    common::info_field(c, "persistence", field)
}

fn config_set(c: &mut Connection, k: &str, v: &str) -> redis::RedisResult<()> {
    redis::cmd("CONFIG").arg("SET").arg(k).arg(v).query(c)
}

/// No rewrite runs, and `n` were started (one INFO: both at one time).
fn rewrites_done(c: &mut Connection, n: u64) -> bool {
    let text: String = redis::cmd("INFO").arg("persistence").query(c).unwrap();
    text.contains("aof_rewrite_in_progress:0\r\n")
        && text.contains(&format!("aof_rewrites:{n}\r\n"))
}

fn start(dir: &DataDir, appendonly: bool) -> Server {
    Server::tessera(&[
        "--dir",
        dir.path(),
        "--save",
        "",
        "--appendonly",
        if appendonly { "yes" } else { "no" },
        "--appendfsync",
        "always",
    ])
}

#[test]
fn a_failed_bgrewriteaof_keeps_every_file_listed() {
    let dir = DataDir::new("aof-err-rewrite");
    let s = start(&dir, true);
    let mut c = s.conn();
    let _: () = c.set("a", 1).unwrap();
    let before = manifest(&dir).unwrap();
    // The new base cannot be renamed into place.
    obstacle(&dir, "appendonly.aof.2.base.rdb");
    let r: String = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    assert_eq!(r, "Background append only file rewriting started");
    wait_for("the failed rewrite", || rewrites_done(&mut c, 1));
    assert_eq!(info(&mut c, "aof_last_bgrewrite_status"), "err");
    assert_eq!(info(&mut c, "aof_rewrites_consecutive_failures"), "1");
    assert_eq!(info(&mut c, "aof_rewrite_scheduled"), "0");
    assert_eq!(info(&mut c, "aof_enabled"), "1");
    // The old files plus the incr opened at the rewrite's instant.
    assert_eq!(
        manifest(&dir).unwrap(),
        format!("{before}file appendonly.aof.2.incr.aof seq 2 type i\n")
    );
    let _: () = c.set("b", 2).unwrap();
    let _: i64 = c.incr("a", 10).unwrap();
    drop(c);
    drop(s); // SIGKILL
    let s = start(&dir, true);
    let mut c = s.conn();
    let v: Vec<Option<u64>> = c.mget(&["a", "b"]).unwrap();
    assert_eq!(v, [Some(11), Some(2)]);

    // Once the base can be written, a rewrite puts it in place and the
    // manifest lists only it and the new incr.
    remove_obstacle(&dir, "appendonly.aof.2.base.rdb");
    let r: String = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    assert_eq!(r, "Background append only file rewriting started");
    wait_for("the rewrite", || rewrites_done(&mut c, 1));
    assert_eq!(info(&mut c, "aof_last_bgrewrite_status"), "ok");
    assert_eq!(info(&mut c, "aof_rewrites_consecutive_failures"), "0");
    let m = manifest(&dir).unwrap();
    assert!(m.starts_with("file appendonly.aof.2.base."), "{m}");
    assert!(
        m.ends_with("file appendonly.aof.3.incr.aof seq 3 type i\n"),
        "{m}"
    );
    assert_eq!(m.lines().count(), 2, "{m}");
    let _: () = c.set("c", 3).unwrap();
    drop(c);
    drop(s);
    let s = start(&dir, true);
    let v: Vec<Option<u64>> = s.conn().mget(&["a", "b", "c"]).unwrap();
    assert_eq!(v, [Some(11), Some(2), Some(3)]);
}

#[test]
fn a_rewrite_whose_incr_cannot_be_created_does_not_start() {
    let dir = DataDir::new("aof-err-incr");
    let s = start(&dir, true);
    let mut c = s.conn();
    let _: () = c.set("a", 1).unwrap();
    let before = manifest(&dir).unwrap();
    obstacle(&dir, "appendonly.aof.2.incr.aof");
    let mut r = s.raw();
    assert_eq!(
        r.cmd_str(&["BGREWRITEAOF"]),
        &b"-ERR Can't execute an AOF background rewriting. Please check the server logs for more information.\r\n"[..]
    );
    assert_eq!(info(&mut c, "aof_last_bgrewrite_status"), "err");
    assert_eq!(info(&mut c, "aof_rewrites"), "0");
    assert_eq!(info(&mut c, "aof_rewrite_in_progress"), "0");
    assert_eq!(manifest(&dir).unwrap(), before);
    // Logging goes on in the old incr.
    let _: () = c.set("b", 2).unwrap();
    drop(c);
    drop(s);
    let s = start(&dir, true);
    let v: Vec<Option<u64>> = s.conn().mget(&["a", "b"]).unwrap();
    assert_eq!(v, [Some(1), Some(2)]);
}

#[test]
fn config_set_appendonly_fails_when_its_files_cannot_be_created() {
    let dir = DataDir::new("aof-err-enable");
    let s = start(&dir, false);
    let mut c = s.conn();
    let _: () = c.set("a", 1).unwrap();
    obstacle(&dir, "temp-appendonly.aof.incr");
    let mut r = s.raw();
    assert_eq!(
        r.cmd_str(&["CONFIG", "SET", "appendonly", "yes"]),
        &b"-ERR CONFIG SET failed (possibly related to argument 'appendonly') - Unable to turn on AOF. Check server logs.\r\n"[..]
    );
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendonly")
        .query(&mut c)
        .unwrap();
    assert_eq!(v, ["appendonly", "no"]);
    assert_eq!(info(&mut c, "aof_enabled"), "0");
    assert_eq!(info(&mut c, "aof_rewrite_scheduled"), "0");
    assert_eq!(info(&mut c, "aof_last_bgrewrite_status"), "err");
    assert!(manifest(&dir).is_none());
    // Once the files can be created, it turns on.
    remove_obstacle(&dir, "temp-appendonly.aof.incr");
    config_set(&mut c, "appendonly", "yes").unwrap();
    wait_for("the AOF's first rewrite", || rewrites_done(&mut c, 1));
    assert_eq!(info(&mut c, "aof_last_bgrewrite_status"), "ok");
    let _: () = c.set("b", 2).unwrap();
    drop(c);
    drop(s);
    let s = start(&dir, true);
    let v: Vec<Option<u64>> = s.conn().mget(&["a", "b"]).unwrap();
    assert_eq!(v, [Some(1), Some(2)]);
}

#[test]
fn config_set_appendonly_whose_rewrite_fails_waits_for_one_that_works() {
    let dir = DataDir::new("aof-err-enable-rewrite");
    let s = start(&dir, false);
    let mut c = s.conn();
    let _: () = c.set("a", 1).unwrap();
    obstacle(&dir, "appendonly.aof.1.base.rdb");
    config_set(&mut c, "appendonly", "yes").unwrap();
    let _: () = c.set("b", 2).unwrap();
    // Retried from the cron until three consecutive failures, then held
    // back (a minute first).
    wait_for("three failed rewrites", || {
        let text: String = redis::cmd("INFO").arg("persistence").query(&mut c).unwrap();
        text.contains("aof_rewrites_consecutive_failures:3\r\n")
            && text.contains("aof_rewrite_in_progress:0\r\n")
    });
    assert_eq!(info(&mut c, "aof_enabled"), "1");
    assert_eq!(info(&mut c, "aof_rewrite_scheduled"), "1");
    assert_eq!(info(&mut c, "aof_last_bgrewrite_status"), "err");
    assert_eq!(info(&mut c, "aof_rewrites"), "3");
    // Nothing is listed, and the temporary incr is gone.
    assert!(manifest(&dir).is_none());
    wait_for("the temporary incr removed", || {
        !aofdir(&dir).join("temp-appendonly.aof.incr").exists()
    });
    wait_for("the limit", || {
        s.log()
            .contains("Background AOF rewrite has repeatedly failed and triggered the limit, will retry in 1 minutes")
    });
    let _: () = c.set("c", 3).unwrap();

    // BGREWRITEAOF is not held back: with the base writable it completes
    // the AOF, and every write is in it.
    remove_obstacle(&dir, "appendonly.aof.1.base.rdb");
    let r: String = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    assert_eq!(r, "Background append only file rewriting started");
    wait_for("the rewrite", || rewrites_done(&mut c, 4));
    assert_eq!(info(&mut c, "aof_last_bgrewrite_status"), "ok");
    assert_eq!(info(&mut c, "aof_rewrite_scheduled"), "0");
    assert_eq!(info(&mut c, "aof_rewrites_consecutive_failures"), "0");
    let m = manifest(&dir).unwrap();
    assert_eq!(
        m,
        "file appendonly.aof.1.base.rdb seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n"
    );
    let _: () = c.set("d", 4).unwrap();
    drop(c);
    drop(s);
    let s = start(&dir, true);
    let v: Vec<Option<u64>> = s.conn().mget(&["a", "b", "c", "d"]).unwrap();
    assert_eq!(v, [Some(1), Some(2), Some(3), Some(4)]);
}

/// Under `always` a write that cannot reach the file is never
/// acknowledged: the server exits, as Redis does, and every write it did
/// acknowledge is there after a restart. The file fails through
/// RLIMIT_FSIZE (`ulimit -f`, 1 KiB blocks): its write gets EFBIG.
#[test]
fn always_exits_rather_than_acknowledge_a_failed_write() {
    let dir = DataDir::new("aof-err-efbig");
    let port = common::free_port();
    let bin =
        std::env::var("TESSERA_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_tessera").into());
    let log = std::fs::File::create(dir.0.join("server.log")).unwrap();
    let mut child = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "ulimit -f 16 && exec '{bin}' --port {port} --bind 127.0.0.1 --dir '{}' \
             --save '' --appendonly yes --appendfsync always",
            dir.path()
        ))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut c = None;
    wait_for("the server", || {
        c = client.get_connection().ok();
        c.is_some()
    });
    let mut c = c.unwrap();
    let value = "v".repeat(1000);
    let mut acked = Vec::new();
    for i in 0..100 {
        let r: redis::RedisResult<()> = c.set(format!("k{i}"), &value);
        match r {
            Ok(()) => acked.push(i),
            Err(_) => break,
        }
    }
    assert!(
        acked.len() < 20,
        "16 KiB cannot hold {} SETs of 1 KB",
        acked.len()
    );
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(t0.elapsed().as_secs() < 30, "the server did not exit");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(1));
    let text = std::fs::read_to_string(dir.0.join("server.log")).unwrap();
    assert!(
        text.contains(
            "Can't recover from AOF write error when the AOF fsync policy is 'always'. Exiting..."
        ),
        "{text}"
    );
    // Restarted without the limit (the torn tail is cut), every
    // acknowledged write is there.
    let s = start(&dir, true);
    let mut c = s.conn();
    for i in &acked {
        let v: Option<String> = c.get(format!("k{i}")).unwrap();
        assert_eq!(
            v.as_deref(),
            Some(value.as_str()),
            "k{i} acknowledged but lost"
        );
    }
}
