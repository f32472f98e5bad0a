//! AOF writes that fail under `appendfsync everysec`, as Redis 7.0 handles
//! them (flushAppendOnlyFile, processCommand): the records that could not
//! be written stay buffered and are retried; meanwhile write commands
//! (and PING) get `MISCONF Errors writing to the AOF file: <strerror>`,
//! reads work, INFO says `aof_last_write_status:err`; once a write
//! succeeds everything is accepted again, and a restart from the AOF has
//! every acknowledged write once.
//!
//! The failure: the server's soft RLIMIT_FSIZE lowered to the incr file's
//! size (prlimit(2), no root needed), so its next append fails with EFBIG
//! ("File too large"), or a little above it, so the append is cut short
//! (Redis undoes it with ftruncate and says ENOSPC, "No space left on
//! device"). Tessera ignores SIGXFSZ itself; redis-server does not, but
//! keeps the ignored disposition it inherits: this test process ignores
//! SIGXFSZ so that every test also runs against redis-server
//! (`TESSERA_TEST_BIN=/usr/bin/redis-server`).

mod common;

use common::{info_field, wait_for, DataDir, Layout, RawConn, Server};

/// The incr files the manifest names, oldest first.
fn incr_files(dir: &DataDir) -> Vec<std::path::PathBuf> {
    let aofdir = dir.0.join("appendonlydir");
    let manifest = std::fs::read_to_string(aofdir.join("appendonly.aof.manifest")).unwrap();
    manifest
        .lines()
        .filter(|l| l.ends_with(" type i"))
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(|name| aofdir.join(name))
        .collect()
}

/// The incr file the manifest names last (a replica's sync rewrites the
/// AOF: a new one).
fn incr_file(dir: &DataDir) -> std::path::PathBuf {
    incr_files(dir).pop().expect("an incr file listed")
}

fn incr_len(dir: &DataDir) -> u64 {
    std::fs::metadata(incr_file(dir)).unwrap().len()
}

/// Sets the server's soft RLIMIT_FSIZE (`None`: unlimited).
fn limit_file_size(s: &Server, bytes: Option<u64>) {
    let pid = s.pid().expect("the server runs") as libc::pid_t;
    let lim = libc::rlimit {
        rlim_cur: bytes.unwrap_or(libc::RLIM_INFINITY),
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: `lim` is a valid rlimit; the old limit is not asked for.
    let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_FSIZE, &lim, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
}

/// Children inherit an ignored SIGXFSZ (see the module docs).
fn ignore_sigxfsz() {
    // SAFETY: SIG_IGN has no handler to run and no memory to share.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

fn start(layout: Layout, dir: &DataDir) -> Server {
    start_with(layout, dir, &[])
}

fn start_with(layout: Layout, dir: &DataDir, extra: &[&str]) -> Server {
    ignore_sigxfsz();
    let mut args = vec![
        "--dir",
        dir.path(),
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
    ];
    args.extend_from_slice(extra);
    layout.tessera(&args)
}

fn write_status(s: &Server) -> String {
    info_field(&mut s.conn(), "persistence", "aof_last_write_status")
}

/// A value big enough that the incr file outgrows the server's log (which
/// the lowered limit must not stop: Redis's log lines are the test's
/// evidence too).
fn ballast(r: &mut RawConn) {
    let big = "b".repeat(64 << 10);
    assert_eq!(r.cmd_str(&["SET", "ballast", &big]), b"+OK\r\n");
}

/// Waits until everything acknowledged so far is in the incr files (the
/// last record is: a rewrite that failed before its switch leaves the
/// records in the older of the files listed).
fn settled(dir: &DataDir, last: &[u8]) {
    wait_for("the AOF to hold the last write", || {
        incr_files(dir).iter().any(|f| {
            let text = std::fs::read(f).unwrap_or_default();
            text.windows(last.len()).any(|w| w == last)
        })
    });
}

/// The steps of the module docs, with every kind of command a client may
/// send meanwhile: plain writes, PING, reads, a transaction queued before
/// the failure (EXEC refused whole) and one queued during it, scripts
/// without a shebang (their first write fails; `pcall` gets the error),
/// with one (refused up front unless `no-writes`). Counts prove nothing
/// acknowledged is lost and nothing refused or retried is applied twice.
fn refuses_writes_until_a_write_succeeds(layout: Layout) {
    let dir = DataDir::new("aof-write-error");
    let s = start(layout, &dir);
    let mut r = s.raw();
    ballast(&mut r);
    for i in 0..10 {
        assert_eq!(
            r.cmd_str(&["INCR", "ctr"]),
            format!(":{}\r\n", i + 1).as_bytes()
        );
        assert_eq!(
            r.cmd_str(&["RPUSH", "list", &format!("before{i}")]),
            format!(":{}\r\n", i + 1).as_bytes()
        );
    }
    let mut queued = s.raw();
    assert_eq!(queued.cmd_str(&["MULTI"]), b"+OK\r\n");
    assert_eq!(queued.cmd_str(&["SET", "q", "1"]), b"+QUEUED\r\n");
    settled(&dir, b"before9");

    limit_file_size(&s, Some(incr_len(&dir)));
    // A pipeline of increments: those admitted before the writer's failure
    // is published are acknowledged (their records wait in its buffer),
    // the others refused.
    let n = 20;
    let mut pipeline = Vec::new();
    for _ in 0..n {
        pipeline.extend_from_slice(&common::encode_command(&[b"INCR", b"ctr"]));
    }
    r.send(&pipeline);
    let misconf = b"-MISCONF Errors writing to the AOF file: File too large\r\n";
    let mut acked = 0;
    for reply in r.read_replies(n) {
        if reply.starts_with(b":") {
            acked += 1;
            assert_eq!(reply, format!(":{}\r\n", 10 + acked).as_bytes());
        } else {
            assert_eq!(reply, misconf);
        }
    }
    assert!(
        acked >= 1,
        "the first increment was admitted before any failure"
    );
    wait_for("the failed write", || write_status(&s) == "err");
    assert_eq!(r.cmd_str(&["SET", "x", "1"]), misconf);
    assert_eq!(r.cmd_str(&["RPUSH", "list", "refused"]), misconf);
    assert_eq!(r.cmd_str(&["PING"]), misconf);
    assert_eq!(
        r.cmd_str(&["GET", "ctr"]),
        format!("${}\r\n{}\r\n", (10 + acked).to_string().len(), 10 + acked).as_bytes()
    );
    assert_eq!(r.cmd_str(&["LLEN", "list"]), b":10\r\n");
    assert_eq!(
        queued.cmd_str(&["EXEC"]),
        &b"-EXECABORT Transaction discarded because of: MISCONF Errors writing to the AOF file: File too large\r\n"[..]
    );
    assert_eq!(r.cmd_str(&["MULTI"]), b"+OK\r\n");
    assert_eq!(r.cmd_str(&["GET", "ctr"]), b"+QUEUED\r\n");
    assert_eq!(r.cmd_str(&["INCR", "ctr"]), misconf);
    assert_eq!(
        r.cmd_str(&["EXEC"]),
        &b"-EXECABORT Transaction discarded because of previous errors.\r\n"[..]
    );
    // Scripts: without a shebang the first write fails (the script's
    // error names it); its reads run.
    let write = "return redis.call('incr', KEYS[1])";
    let sha = {
        let reply = r.cmd_str(&["SCRIPT", "LOAD", write]);
        String::from_utf8(common::reply_payload(&reply).unwrap()).unwrap()
    };
    assert_eq!(
        r.cmd_str(&["EVAL", write, "1", "ctr"]),
        format!(
            "-MISCONF Errors writing to the AOF file: File too large script: {sha}, on @user_script:1.\r\n"
        )
        .as_bytes()
    );
    assert_eq!(
        r.cmd_str(&["EVAL", "return redis.pcall('incr', KEYS[1])", "1", "ctr"]),
        misconf
    );
    assert_eq!(
        r.cmd_str(&["EVAL", "return redis.call('llen', KEYS[1])", "1", "list"]),
        b":10\r\n"
    );
    // With a shebang: refused up front unless it may not write.
    assert_eq!(
        r.cmd_str(&[
            "EVAL",
            "#!lua\nreturn redis.call('llen', KEYS[1])",
            "1",
            "list"
        ]),
        misconf
    );
    assert_eq!(
        r.cmd_str(&[
            "EVAL",
            "#!lua flags=no-writes\nreturn redis.call('llen', KEYS[1])",
            "1",
            "list"
        ]),
        b":10\r\n"
    );
    let persistence: String = redis::cmd("INFO")
        .arg("persistence")
        .query(&mut s.conn())
        .unwrap();
    assert!(persistence.contains("aof_last_write_status:err\r\n"));
    assert!(persistence.contains("aof_last_bgrewrite_status:ok\r\n"));
    assert!(s
        .log()
        .contains("Error writing to the AOF file: File too large"));

    limit_file_size(&s, None);
    wait_for("the recovery", || write_status(&s) == "ok");
    assert!(s
        .log()
        .contains("AOF write error looks solved, Redis can write again."));
    assert_eq!(
        r.cmd_str(&["INCR", "ctr"]),
        format!(":{}\r\n", 11 + acked).as_bytes()
    );
    assert_eq!(r.cmd_str(&["PING"]), b"+PONG\r\n");
    // Last: once it is in the file, so is everything before it.
    assert_eq!(r.cmd_str(&["RPUSH", "list", "after"]), b":11\r\n");
    settled(&dir, b"after");
    drop(r);
    drop(queued);
    drop(s); // SIGKILL: what is in the file is all a restart gets.

    let s = start(layout, &dir);
    let mut r = s.raw();
    assert_eq!(
        r.cmd_str(&["GET", "ctr"]),
        format!("${}\r\n{}\r\n", (11 + acked).to_string().len(), 11 + acked).as_bytes()
    );
    let mut want = String::from("*11\r\n");
    for i in 0..10 {
        want.push_str(&format!("$7\r\nbefore{i}\r\n"));
    }
    want.push_str("$5\r\nafter\r\n");
    assert_eq!(
        String::from_utf8_lossy(&r.cmd_str(&["LRANGE", "list", "0", "-1"])),
        want
    );
    assert_eq!(r.cmd_str(&["EXISTS", "q", "x"]), b":0\r\n");
    assert_eq!(r.cmd_str(&["STRLEN", "ballast"]), b":65536\r\n");
}

per_layout!(refuses_writes_until_a_write_succeeds);

/// An append cut short by the limit is undone (ftruncate back to the
/// file's size before it) and retried whole; its errno is ENOSPC, as
/// Redis's short-write path records it.
#[test]
fn a_short_write_is_undone_and_retried_whole() {
    let dir = DataDir::new("aof-short-write");
    let s = start(common::LAYOUTS[0], &dir);
    let mut r = s.raw();
    ballast(&mut r);
    assert_eq!(r.cmd_str(&["SET", "a", "1"]), b"+OK\r\n");
    settled(&dir, b"$1\r\na\r\n$1\r\n1\r\n");
    let len = incr_len(&dir);
    limit_file_size(&s, Some(len + 10));
    let value = "v".repeat(300);
    assert_eq!(r.cmd_str(&["SET", "long", &value]), b"+OK\r\n");
    wait_for("the failed write", || write_status(&s) == "err");
    assert_eq!(
        r.cmd_str(&["SET", "b", "2"]),
        &b"-MISCONF Errors writing to the AOF file: No space left on device\r\n"[..]
    );
    assert_eq!(incr_len(&dir), len, "the short write was not undone");
    limit_file_size(&s, None);
    wait_for("the recovery", || write_status(&s) == "ok");
    assert_eq!(r.cmd_str(&["SET", "b", "2"]), b"+OK\r\n");
    settled(&dir, b"$1\r\nb\r\n$1\r\n2\r\n");
    drop(r);
    drop(s);
    let s = start(common::LAYOUTS[0], &dir);
    let mut r = s.raw();
    assert_eq!(
        r.cmd_str(&["GET", "long"]),
        format!("$300\r\n{value}\r\n").as_bytes()
    );
    assert_eq!(
        r.cmd_str(&["MGET", "a", "b"]),
        b"*2\r\n$1\r\n1\r\n$1\r\n2\r\n"
    );
}

/// The replica has processed everything the master streamed.
fn caught_up(m: &Server, r: &Server) -> bool {
    let (mut m, mut r) = (m.conn(), r.conn());
    let off = info_field(&mut m, "replication", "master_repl_offset");
    info_field(&mut r, "replication", "master_link_status") == "up"
        && off != "0"
        && info_field(&mut r, "replication", "slave_repl_offset") == off
}

fn incr_pipeline(r: &mut RawConn, n: usize) -> Vec<Vec<u8>> {
    let mut pipeline = Vec::new();
    for _ in 0..n {
        pipeline.extend_from_slice(&common::encode_command(&[b"INCR", b"ctr"]));
    }
    r.send(&pipeline);
    r.read_replies(n)
}

/// The master's AOF fails: the increments it acknowledged reach its
/// replica once, while the file waits (the stream does not wait for the
/// file), and the retry that writes the file feeds nothing again.
#[test]
fn a_masters_failed_write_reaches_its_replica_once() {
    let dir = DataDir::new("aof-write-error-master");
    let master = start_with(
        common::LAYOUTS[0],
        &dir,
        &["--repl-diskless-sync-delay", "0"],
    );
    let port = master.port().to_string();
    let replica = Server::tessera(&["--replicaof", "127.0.0.1", &port]);
    let mut r = master.raw();
    ballast(&mut r);
    for _ in 0..10 {
        r.cmd_str(&["INCR", "ctr"]);
    }
    assert_eq!(r.cmd_str(&["SET", "marker", "before"]), b"+OK\r\n");
    settled(&dir, b"before");
    wait_for("the replica to catch up", || caught_up(&master, &replica));
    limit_file_size(&master, Some(incr_len(&dir)));
    let acked = incr_pipeline(&mut r, 20)
        .iter()
        .filter(|reply| reply.starts_with(b":"))
        .count();
    wait_for("the failed write", || write_status(&master) == "err");
    wait_for("the replica to catch up", || caught_up(&master, &replica));
    let want = format!("${}\r\n{}\r\n", (10 + acked).to_string().len(), 10 + acked);
    assert_eq!(replica.raw().cmd_str(&["GET", "ctr"]), want.as_bytes());
    limit_file_size(&master, None);
    wait_for("the recovery", || write_status(&master) == "ok");
    assert_eq!(r.cmd_str(&["SET", "marker", "after"]), b"+OK\r\n");
    let mut rr = replica.raw();
    wait_for("the replica to get the last write", || {
        rr.cmd_str(&["GET", "marker"]) == b"$5\r\nafter\r\n"
    });
    assert_eq!(rr.cmd_str(&["GET", "ctr"]), want.as_bytes());
}

/// A replica and its AOF, synced with `master`, with the ballast in its
/// incr file and everything settled.
fn synced_replica(master: &Server, dir: &DataDir, extra: &[&str]) -> Server {
    let port = master.port().to_string();
    let mut args = vec!["--replicaof", "127.0.0.1", &port];
    args.extend_from_slice(extra);
    let replica = start_with(common::LAYOUTS[0], dir, &args);
    let mut m = master.raw();
    // A write sent before the sync may leave the master's offset at 0
    // until its next PING, 10 s apart (most of these tests' time): this
    // one, once the link is up, moves it at once.
    wait_for("the replica's sync", || {
        info_field(&mut replica.conn(), "replication", "master_link_status") == "up"
    });
    assert_eq!(m.cmd_str(&["SET", "marker", "before"]), b"+OK\r\n");
    wait_for("the replica to catch up", || caught_up(master, &replica));
    wait_for("the replica's rewrite after its sync", || {
        info_field(
            &mut replica.conn(),
            "persistence",
            "aof_rewrite_in_progress",
        ) == "0"
    });
    ballast(&mut m);
    assert_eq!(m.cmd_str(&["SET", "marker", "logged"]), b"+OK\r\n");
    settled(dir, b"logged");
    replica
}

/// A replica whose AOF fails, with `replica-ignore-disk-write-errors
/// yes`, applies its master's stream anyway (logged) and keeps the
/// records for the retry: restarted alone from its AOF it has every one
/// of them once. Its own clients get MISCONF (before READONLY, Redis's
/// order), PING too.
#[test]
fn a_replica_ignoring_disk_errors_follows_its_master() {
    let master = Server::tessera(&["--repl-diskless-sync-delay", "0"]);
    let dir = DataDir::new("aof-write-error-replica");
    let replica = synced_replica(
        &master,
        &dir,
        &["--replica-ignore-disk-write-errors", "yes"],
    );
    let mut m = master.raw();
    limit_file_size(&replica, Some(incr_len(&dir)));
    assert_eq!(incr_pipeline(&mut m, 20).len(), 20);
    wait_for("the replica's failed write", || {
        write_status(&replica) == "err"
    });
    // Applied while the replica's AOF fails.
    assert_eq!(incr_pipeline(&mut m, 5).len(), 5);
    let mut rr = replica.raw();
    wait_for("the replica to apply them", || {
        rr.cmd_str(&["GET", "ctr"]) == b"$2\r\n25\r\n"
    });
    assert!(replica
        .log()
        .contains("Replica is applying a command even though it is unable to write to disk."));
    let misconf = b"-MISCONF Errors writing to the AOF file: File too large\r\n";
    assert_eq!(rr.cmd_str(&["SET", "x", "1"]), misconf);
    assert_eq!(rr.cmd_str(&["PING"]), misconf);
    limit_file_size(&replica, None);
    wait_for("the recovery", || write_status(&replica) == "ok");
    assert_eq!(
        rr.cmd_str(&["SET", "x", "1"]),
        &b"-READONLY You can't write against a read only replica.\r\n"[..]
    );
    assert_eq!(m.cmd_str(&["SET", "marker", "after"]), b"+OK\r\n");
    settled(&dir, b"after");
    drop(rr);
    drop(replica);
    let alone = start(common::LAYOUTS[0], &dir);
    let mut a = alone.raw();
    assert_eq!(a.cmd_str(&["GET", "ctr"]), b"$2\r\n25\r\n");
    assert_eq!(a.cmd_str(&["GET", "marker"]), b"$5\r\nafter\r\n");
}

/// By default a replica that cannot write its AOF ends when its master
/// sends a write (Redis's serverPanic "Replica was unable to write
/// command to disk."): it can neither keep nor refuse it.
#[test]
fn a_replica_ends_when_its_master_writes_past_a_failed_write() {
    let master = Server::tessera(&["--repl-diskless-sync-delay", "0"]);
    let dir = DataDir::new("aof-write-error-replica-panic");
    let mut replica = synced_replica(&master, &dir, &[]);
    let mut m = master.raw();
    limit_file_size(&replica, Some(incr_len(&dir)));
    assert_eq!(m.cmd_str(&["INCR", "ctr"]), b":1\r\n");
    wait_for("the replica's failed write", || {
        write_status(&replica) == "err"
    });
    assert_eq!(m.cmd_str(&["INCR", "ctr"]), b":2\r\n");
    wait_for("the replica to end", || !replica.is_running());
    assert!(replica
        .log()
        .contains("Replica was unable to write command to disk."));
}

/// A rewrite begun while the AOF cannot be written: what the old incr
/// file owes is written there first, the new incr gets what follows, and
/// a restart has every acknowledged increment once, whether the rewrite's
/// base made it (the limit at the incr file's size: the compressed base
/// fits) or not (a lower limit, no compression). (Redis moves its
/// unwritten buffer to the new incr file, whose records the new base
/// already holds: a restart applies them twice. Tessera only.)
#[test]
fn a_rewrite_during_a_failed_write_loses_and_doubles_nothing() {
    if common::testing_real_redis() {
        return;
    }
    rewrite_during_a_failed_write(true);
    rewrite_during_a_failed_write(false);
}

fn rewrite_during_a_failed_write(base_fits: bool) {
    let dir = DataDir::new("aof-write-error-rewrite");
    let compression = if base_fits { "yes" } else { "no" };
    let args = ["--rdbcompression", compression];
    let s = start_with(common::LAYOUTS[0], &dir, &args);
    let mut r = s.raw();
    ballast(&mut r);
    for _ in 0..5 {
        r.cmd_str(&["INCR", "ctr"]);
    }
    assert_eq!(r.cmd_str(&["SET", "marker", "before"]), b"+OK\r\n");
    settled(&dir, b"before");
    let limit = if base_fits { incr_len(&dir) } else { 4096 };
    limit_file_size(&s, Some(limit));
    let acked = incr_pipeline(&mut r, 20)
        .iter()
        .filter(|reply| reply.starts_with(b":"))
        .count();
    wait_for("the failed write", || write_status(&s) == "err");
    assert_eq!(
        r.cmd_str(&["BGREWRITEAOF"]),
        &b"+Background append only file rewriting started\r\n"[..]
    );
    wait_for("the rewrite to end", || {
        let text: String = redis::cmd("INFO")
            .arg("persistence")
            .query(&mut s.conn())
            .unwrap();
        text.contains("aof_rewrite_in_progress:0\r\n") && text.contains("aof_rewrites:1\r\n")
    });
    let status = if base_fits { "ok" } else { "err" };
    assert_eq!(
        info_field(&mut s.conn(), "persistence", "aof_last_bgrewrite_status"),
        status
    );
    limit_file_size(&s, None);
    wait_for("the recovery", || write_status(&s) == "ok");
    assert_eq!(
        r.cmd_str(&["INCR", "ctr"]),
        format!(":{}\r\n", 6 + acked).as_bytes()
    );
    assert_eq!(r.cmd_str(&["SET", "marker", "after"]), b"+OK\r\n");
    settled(&dir, b"after");
    drop(r);
    drop(s);
    let s = start_with(common::LAYOUTS[0], &dir, &args);
    let want = (6 + acked).to_string();
    assert_eq!(
        s.raw().cmd_str(&["MGET", "ctr", "marker"]),
        format!("*2\r\n${}\r\n{want}\r\n$5\r\nafter\r\n", want.len()).as_bytes()
    );
}
