//! Loading an append-only file set at start-up, as Redis 7.0's
//! `loadAppendOnlyFiles` (found by Redis's Tcl integration/aof and
//! aof-multi-part): each test crafts the files in a data directory and
//! starts the real binary on it. A manifest Redis refuses (with its log
//! line), a file it names but the disk lacks, an AOF ending inside MULTI
//! without `aof-load-truncated` make the server exit; a past deadline
//! while loading sets the TTL rather than deleting the key (the key goes
//! once loaded); an AOF of Redis before 7.0 is moved into the AOF
//! directory as its base. Every test runs against redis-server too
//! (`TESSERA_TEST_BIN=/usr/bin/redis-server`).

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{DataDir, Layout, Server};
use redis::Commands;

/// How long a server that must refuse to start may take to exit.
const EXIT_DEADLINE: Duration = Duration::from_secs(30);

const MANIFEST: &str = "appendonly.aof.manifest";

fn aofdir(dir: &DataDir) -> PathBuf {
    dir.0.join("appendonlydir")
}

fn cmd(args: &[&str]) -> Vec<u8> {
    let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
    common::encode_command(&a)
}

fn cmds(list: &[&[&str]]) -> Vec<u8> {
    list.iter().flat_map(|c| cmd(c)).collect()
}

/// Writes `files` (name, bytes) into the AOF directory, and the manifest
/// if given.
fn craft(dir: &DataDir, manifest: Option<&str>, files: &[(&str, &[u8])]) {
    let d = aofdir(dir);
    std::fs::create_dir_all(&d).unwrap();
    for (name, data) in files {
        std::fs::write(d.join(name), data).unwrap();
    }
    if let Some(m) = manifest {
        std::fs::write(d.join(MANIFEST), m).unwrap();
    }
}

fn manifest(dir: &DataDir) -> String {
    std::fs::read_to_string(aofdir(dir).join(MANIFEST)).unwrap()
}

fn binary() -> PathBuf {
    match std::env::var_os("TESSERA_TEST_BIN") {
        Some(b) if !b.is_empty() => PathBuf::from(b),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_tessera")),
    }
}

/// Starts the server on `dir` with the AOF on, which must exit (within
/// [`EXIT_DEADLINE`]) with a failure; returns its log.
fn refused(dir: &DataDir, extra: &[&str]) -> String {
    let log = dir.0.join("refused.log");
    let out = std::fs::File::create(&log).unwrap();
    let port = common::free_port().to_string();
    let mut child = Command::new(binary())
        .args(["--port", &port, "--bind", "127.0.0.1", "--save", ""])
        .args(["--dir", dir.path(), "--appendonly", "yes"])
        .args(extra)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + EXIT_DEADLINE;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the server did not exit:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "{status}: {text}");
    text
}

/// The last non-blank line of a log.
fn last_line(log: &str) -> &str {
    log.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("")
}

fn start(dir: &DataDir, extra: &[&str]) -> Server {
    start_in(None, dir, extra)
}

fn start_in(layout: Option<Layout>, dir: &DataDir, extra: &[&str]) -> Server {
    // Each write on disk before its reply: a test kills (SIGKILL) and
    // restarts.
    let mut args = vec![
        "--dir",
        dir.path(),
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ];
    args.extend_from_slice(extra);
    match layout {
        Some(l) => l.tessera(&args),
        None => Server::tessera(&args),
    }
}

fn get(c: &mut redis::Connection, k: &str) -> Option<String> {
    c.get(k).unwrap()
}

const BASE1: &str = "file appendonly.aof.1.base.aof seq 1 type b\n";
const INCR1: &str = "file appendonly.aof.1.incr.aof seq 1 type i\n";

#[test]
fn an_aof_ending_inside_multi_refuses_to_start_without_load_truncated() {
    let dir = DataDir::new("aofload-multi");
    let incr = cmds(&[
        &["set", "foo", "hello"],
        &["multi"],
        &["set", "bar", "world"],
    ]);
    let whole = cmd(&["set", "foo", "hello"]).len() as u64;
    craft(
        &dir,
        Some(&format!("{BASE1}{INCR1}")),
        &[
            ("appendonly.aof.1.base.aof", b""),
            ("appendonly.aof.1.incr.aof", &incr),
        ],
    );
    let log = refused(&dir, &["--aof-load-truncated", "no"]);
    assert!(
        last_line(&log).contains(
            "Unexpected end of file reading the append only file appendonly.aof.1.incr.aof"
        ),
        "{log}"
    );
    // Nothing was cut: with `aof-load-truncated yes` it starts, without
    // the MULTI, and the file ends before it.
    let incr_path = aofdir(&dir).join("appendonly.aof.1.incr.aof");
    assert_eq!(
        std::fs::metadata(&incr_path).unwrap().len(),
        incr.len() as u64
    );
    let s = start(&dir, &["--aof-load-truncated", "yes"]);
    let mut c = s.conn();
    assert_eq!(get(&mut c, "foo").as_deref(), Some("hello"));
    assert_eq!(get(&mut c, "bar"), None);
    assert!(s
        .log()
        .contains("Revert incomplete MULTI/EXEC transaction in AOF file"));
    drop(c);
    drop(s);
    assert_eq!(std::fs::metadata(&incr_path).unwrap().len(), whole);
}

/// A string's DUMP payload ("v"), as Redis 7.0 makes it.
const DUMP_V: &[u8] = b"\x00\x01v\n\x00\x91\x08\xce\xb2\x198\x8a\xce";

/// An RDB (version 9, checksum 0: not checked) holding `k` = `v` with a
/// deadline at 1000 ms after the epoch: long past.
fn rdb_with_expired_key() -> Vec<u8> {
    let mut b = b"REDIS0009\xfe\x00\xfc".to_vec();
    b.extend_from_slice(&1000u64.to_le_bytes());
    b.extend_from_slice(b"\x00\x01k\x01v\xff");
    b.extend_from_slice(&[0; 8]);
    b
}

/// Redis's checkAlreadyExpired is false while loading: a deadline in the
/// past sets the TTL (the key stays, seen by the commands after it), and
/// the key expires once loaded. Redis's Tcl 'AOF+EXPIRE: List should be
/// empty': deleted at the PEXPIREAT, the second RPUSH made a new list.
fn a_past_deadline_while_loading_sets_the_ttl(layout: Layout) {
    let dir = DataDir::new("aofload-expire");
    let mut incr = cmds(&[
        // Redis's Tcl case: the list is gone after loading.
        &["rpush", "list", "foo"],
        &["pexpireat", "list", "1000"],
        &["rpush", "list", "bar"],
        // The key is still there for the commands after the deadline: a
        // PERSIST keeps it for good.
        &["rpush", "l2", "a"],
        &["pexpireat", "l2", "1000"],
        &["rpush", "l2", "b"],
        &["persist", "l2"],
        &["set", "s1", "v"],
        &["expireat", "s1", "1"],
        &["append", "s1", "x"],
        &["persist", "s1"],
        &["set", "s2", "v"],
        &["expire", "s2", "-5"],
        &["append", "s2", "x"],
        &["set", "s3", "v"],
        &["getex", "s3", "pxat", "1"],
        &["append", "s3", "x"],
        &["persist", "s3"],
        &["sadd", "st", "a"],
        &["pexpire", "st", "-1"],
        &["sadd", "st", "b"],
        // The base's key past its deadline is loaded too.
        &["persist", "k"],
    ]);
    for (key, keep) in [("r1", true), ("r2", false)] {
        let k = key.as_bytes();
        incr.extend(common::encode_command(&[
            b"restore", k, b"1", DUMP_V, b"absttl",
        ]));
        incr.extend(common::encode_command(&[b"append", k, b"x"]));
        if keep {
            incr.extend(common::encode_command(&[b"persist", k]));
        }
    }
    craft(
        &dir,
        Some(&format!(
            "file appendonly.aof.1.base.rdb seq 1 type b\n{INCR1}"
        )),
        &[
            ("appendonly.aof.1.base.rdb", &rdb_with_expired_key()),
            ("appendonly.aof.1.incr.aof", &incr),
        ],
    );
    let s = start_in(Some(layout), &dir, &[]);
    let mut c = s.conn();
    for gone in ["list", "s2", "r2", "st"] {
        assert_eq!(c.exists::<_, i64>(gone).unwrap(), 0, "{gone}");
    }
    let l2: Vec<String> = c.lrange("l2", 0, -1).unwrap();
    assert_eq!(l2, ["a", "b"]);
    for kept in ["s1", "s3", "r1"] {
        assert_eq!(get(&mut c, kept).as_deref(), Some("vx"), "{kept}");
        assert_eq!(c.ttl::<_, i64>(kept).unwrap(), -1, "{kept}");
    }
    assert_eq!(get(&mut c, "k").as_deref(), Some("v"));
    assert_eq!(c.ttl::<_, i64>("l2").unwrap(), -1);
}

per_layout!(a_past_deadline_while_loading_sets_the_ttl);

/// Outside loading a past deadline still deletes at once (and a normal
/// start after the load is a master's).
#[test]
fn after_loading_a_past_deadline_deletes() {
    let dir = DataDir::new("aofload-expire-after");
    let s = start(&dir, &[]);
    let mut c = s.conn();
    let _: () = c.rpush("list", "foo").unwrap();
    let r: i64 = redis::cmd("PEXPIREAT")
        .arg("list")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    assert_eq!(r, 1);
    let _: () = c.rpush("list", "bar").unwrap();
    assert_eq!(c.llen::<_, i64>("list").unwrap(), 1);
}

#[test]
fn debug_aof_flush_sleep_delays_each_write_and_is_reset_by_zero() {
    let dir = DataDir::new("aofload-flush-sleep");
    let s = start(&dir, &["--enable-debug-command", "yes"]);
    let mut c = s.conn();
    let ok: String = redis::cmd("DEBUG")
        .arg("AOF-FLUSH-SLEEP")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    assert_eq!(ok, "OK");
    let _: () = c.set("a", "1").unwrap();
    let ok: String = redis::cmd("DEBUG")
        .arg("aof-flush-sleep")
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!(ok, "OK");
    let _: () = c.set("b", "2").unwrap();
    let e = redis::cmd("DEBUG")
        .arg("AOF-FLUSH-SLEEP")
        .query::<String>(&mut c)
        .unwrap_err();
    assert!(e.to_string().contains("unknown subcommand"), "{e}");
    drop(c);
    drop(s);
    let incr = std::fs::read(aofdir(&dir).join("appendonly.aof.1.incr.aof")).unwrap();
    let text = String::from_utf8_lossy(&incr);
    assert!(
        text.contains("$1\r\na\r\n") && text.contains("$1\r\nb\r\n"),
        "{text}"
    );
}

/// Manifests Redis refuses, each with its reason (the log's last line)
/// and the files beside it (Redis's Tcl aof-multi-part cases).
#[test]
fn manifests_redis_refuses_stop_the_start() {
    let k1 = cmd(&["set", "k1", "v1"]);
    let k2 = cmd(&["set", "k2", "v2"]);
    let files: &[(&str, &[u8])] = &[
        ("appendonly.aof.1.base.aof", &k1),
        ("appendonly.aof.2.base.aof", &k1),
        ("appendonly.aof.1.incr.aof", &k2),
        ("appendonly.aof.3.incr.aof", &k2),
    ];
    let long = "file appendonly.aof.1.base.aof seq 1 type b ".repeat(30);
    let cases: &[(&str, String, &str)] = &[
        (
            "a file missing",
            format!("{BASE1}file appendonly.aof.2.incr.aof seq 2 type i\n"),
            "Unable to obtain the AOF file appendonly.aof.2.incr.aof length. stat: No such file or directory",
        ),
        (
            "the old name, missing",
            "file appendonly.aof seq 1 type b\n".into(),
            "Unable to obtain the AOF file appendonly.aof length. stat: No such file or directory",
        ),
        (
            "sequences not increasing",
            "file appendonly.aof.3.incr.aof seq 3 type i\nfile appendonly.aof.1.incr.aof seq 1 type i\n".into(),
            "Found a non-monotonic sequence number",
        ),
        (
            "a blank line",
            format!("{INCR1}\nfile appendonly.aof.3.incr.aof seq 3 type i\n"),
            "Invalid AOF manifest file format",
        ),
        (
            "two bases",
            format!("{BASE1}file appendonly.aof.2.base.aof seq 2 type b\n{INCR1}"),
            "Found duplicate base file information",
        ),
        (
            "an unknown type",
            format!("file appendonly.aof.1.base.aof seq 1 type x\n{INCR1}"),
            "Unknown AOF file type",
        ),
        (
            "a key missing",
            format!("filx appendonly.aof.1.base.aof seq 1 type b\n{INCR1}"),
            "Invalid AOF manifest file format",
        ),
        (
            "a line too short",
            format!("{BASE1}file appendonly.aof.1.incr.aof type i\n"),
            "Invalid AOF manifest file format",
        ),
        (
            "a line too long",
            format!("{long}\n{INCR1}"),
            "The AOF manifest file contains too long line",
        ),
        (
            "an odd parameter",
            format!("{BASE1}file appendonly.aof.1.incr.aof seq 1 type i newkey\n"),
            "Invalid AOF manifest file format",
        ),
        (
            "a path for a name",
            format!("file ../appendonly.aof.1.base.aof seq 1 type b\n{INCR1}"),
            "File can't be a path, just a filename",
        ),
        ("an empty manifest", String::new(), "Found an empty AOF manifest"),
    ];
    for (what, m, why) in cases {
        let dir = DataDir::new("aofload-manifest");
        craft(&dir, Some(m), files);
        let log = refused(&dir, &[]);
        assert!(last_line(&log).contains(why), "{what}: {log}");
    }
}

/// What Redis loads: extra keys in a line, comments, empty files, gaps in
/// the sequence; a quoted file name; a manifest naming no incr file gets
/// one.
#[test]
fn manifests_redis_accepts_load() {
    let dir = DataDir::new("aofload-accepts");
    craft(
        &dir,
        Some(
            "# a comment\n\
             file appendonly.aof.1.base.aof seq 1 type b newkey newvalue\n\
             file appendonly.aof.1.incr.aof seq 1 type i\n\
             file \"appendonly.aof.3.incr.aof\" seq 3 type i\n\
             file appendonly.aof.4.incr.aof seq 4 type i\n",
        ),
        &[
            ("appendonly.aof.1.base.aof", &cmd(&["set", "k1", "v1"])),
            ("appendonly.aof.1.incr.aof", b""),
            ("appendonly.aof.3.incr.aof", &cmd(&["set", "k3", "v3"])),
            ("appendonly.aof.4.incr.aof", &cmd(&["set", "k4", "v4"])),
        ],
    );
    {
        let s = start(&dir, &[]);
        let mut c = s.conn();
        assert_eq!(get(&mut c, "k1").as_deref(), Some("v1"));
        assert_eq!(get(&mut c, "k3").as_deref(), Some("v3"));
        assert_eq!(get(&mut c, "k4").as_deref(), Some("v4"));
    }
    // A base alone: an incr file is added after it.
    let dir = DataDir::new("aofload-base-alone");
    craft(
        &dir,
        Some(BASE1),
        &[("appendonly.aof.1.base.aof", &cmd(&["set", "k1", "v1"]))],
    );
    {
        let s = start(&dir, &[]);
        let mut c = s.conn();
        assert_eq!(get(&mut c, "k1").as_deref(), Some("v1"));
        let _: () = c.set("k2", "v2").unwrap();
        assert_eq!(manifest(&dir), format!("{BASE1}{INCR1}"));
    }
    let s = start(&dir, &[]);
    assert_eq!(get(&mut s.conn(), "k2").as_deref(), Some("v2"));
}

/// Starting from nothing: the base is an (empty) RDB with
/// `aof-use-rdb-preamble yes`, commands without; an RDB file beside it
/// is not loaded (Redis loads only the AOF when it is enabled).
#[test]
fn an_empty_start_creates_a_base_of_the_preamble_s_format() {
    for (preamble, base) in [("yes", "rdb"), ("no", "aof")] {
        let dir = DataDir::new("aofload-empty");
        {
            let s = Server::tessera(&["--dir", dir.path(), "--save", "60 1"]);
            let mut c = s.conn();
            let _: () = c.set("in-rdb", "1").unwrap();
            let _: String = redis::cmd("SAVE").query(&mut c).unwrap();
        }
        assert!(dir.0.join("dump.rdb").exists());
        let s = start(&dir, &["--aof-use-rdb-preamble", preamble]);
        let mut c = s.conn();
        assert_eq!(c.exists::<_, i64>("in-rdb").unwrap(), 0, "{preamble}");
        let name = format!("appendonly.aof.1.base.{base}");
        assert_eq!(manifest(&dir), format!("file {name} seq 1 type b\n{INCR1}"));
        let body = std::fs::read(aofdir(&dir).join(&name)).unwrap();
        assert_eq!(body.starts_with(b"REDIS"), preamble == "yes", "{preamble}");
        let _: () = c.set("k", "v").unwrap();
        drop(c);
        drop(s);
        let s = start(&dir, &["--aof-use-rdb-preamble", preamble]);
        assert_eq!(get(&mut s.conn(), "k").as_deref(), Some("v"));
    }
}

/// An AOF of Redis before 7.0 (`appendonly.aof` in `dir`): loaded, moved
/// into the AOF directory as its base, an incr file after it; also when an
/// upgrade stopped before the move (the manifest already names it), and
/// with an RDB preamble (its command tail loads too). With a base of that
/// name already in the directory, the one in `dir` is left alone.
#[test]
fn an_old_style_aof_is_upgraded() {
    let old = cmds(&[&["set", "k1", "v1"], &["set", "k2", "v2"]]);
    let mut preamble = b"REDIS0009\xfe\x00\x00\x02p1\x02v1\xff".to_vec();
    preamble.extend_from_slice(&[0; 8]);
    preamble.extend(cmd(&["set", "k2", "v2"]));
    let upgraded = format!("file appendonly.aof seq 1 type b\n{INCR1}");
    for (what, data, interrupted, first) in [
        ("commands", &old, false, "k1"),
        ("interrupted", &old, true, "k1"),
        ("rdb preamble", &preamble, false, "p1"),
    ] {
        // Each first key holds "v1".
        let dir = DataDir::new("aofload-upgrade");
        std::fs::write(dir.0.join("appendonly.aof"), data).unwrap();
        if interrupted {
            craft(&dir, Some("file appendonly.aof seq 1 type b\n"), &[]);
        }
        let s = start(&dir, &[]);
        let mut c = s.conn();
        assert_eq!(get(&mut c, first).as_deref(), Some("v1"), "{what}");
        assert_eq!(get(&mut c, "k2").as_deref(), Some("v2"), "{what}");
        assert!(!dir.0.join("appendonly.aof").exists(), "{what}");
        assert!(aofdir(&dir).join("appendonly.aof").exists(), "{what}");
        assert_eq!(manifest(&dir), upgraded, "{what}");
        let _: () = c.set("k3", "v3").unwrap();
        drop(c);
        drop(s);
        let s = start(&dir, &[]);
        assert_eq!(get(&mut s.conn(), "k3").as_deref(), Some("v3"), "{what}");
    }
    // Both: the directory's wins, the old one stays.
    let dir = DataDir::new("aofload-upgrade-both");
    std::fs::write(dir.0.join("appendonly.aof"), &old).unwrap();
    craft(
        &dir,
        Some("file appendonly.aof seq 1 type b\n"),
        &[("appendonly.aof", &cmd(&["set", "k4", "v4"]))],
    );
    let s = start(&dir, &[]);
    let mut c = s.conn();
    assert_eq!(c.exists::<_, i64>("k1").unwrap(), 0);
    assert_eq!(get(&mut c, "k4").as_deref(), Some("v4"));
    assert!(dir.0.join("appendonly.aof").exists());
    assert_eq!(manifest(&dir), upgraded);
}

/// An RDB file at start-up: a master leaves keys already expired out, a
/// replica (`replicaof` configured) loads them, for its master's DEL
/// (Redis's rdbLoad: `iAmMaster()`); both read them as missing.
#[test]
fn a_replica_keeps_an_rdb_s_expired_keys_at_start() {
    let dead = common::DeadPort::new();
    let port = dead.port.to_string();
    for (replica, keys) in [(false, 0), (true, 1)] {
        let dir = DataDir::new("aofload-rdb-expired");
        std::fs::write(dir.0.join("dump.rdb"), rdb_with_expired_key()).unwrap();
        let mut args = vec!["--dir", dir.path(), "--save", ""];
        if replica {
            args.extend(["--replicaof", "127.0.0.1", &port]);
        }
        let s = Server::tessera(&args);
        let mut c = s.conn();
        let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
        assert_eq!(n, keys, "replica {replica}");
        assert_eq!(get(&mut c, "k"), None);
    }
}

/// `aof-timestamp-enabled yes`: a `#TS:<unix seconds>` line before the
/// first record of each new second, and at the start of a base of
/// commands (Redis's Tcl 'Generate timestamp annotations in AOF'); the
/// file loads (annotations skipped).
#[test]
fn timestamp_annotations_are_written_and_loaded() {
    let dir = DataDir::new("aofload-ts");
    let incr = |dir: &DataDir, n: u32| {
        std::fs::read(aofdir(dir).join(format!("appendonly.aof.{n}.incr.aof"))).unwrap()
    };
    {
        let s = start(&dir, &[]);
        let mut c = s.conn();
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("aof-timestamp-enabled")
            .arg("yes")
            .arg("aof-use-rdb-preamble")
            .arg("no")
            .query(&mut c)
            .unwrap();
        let _: () = c.set("foo", "bar").unwrap();
        let text = String::from_utf8(incr(&dir, 1)).unwrap();
        assert!(text.starts_with("#TS:"), "{text}");
        let ts: u64 = text[4..text.find("\r\n").unwrap()].parse().unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(ts <= now && ts + 3600 > now, "{ts} {now}");
        let _: String = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
        common::wait_for("the rewrite", || {
            let m = manifest(&dir);
            m.contains(".2.base.aof") && !m.contains(".1.incr.aof")
        });
        let base = std::fs::read(aofdir(&dir).join("appendonly.aof.2.base.aof")).unwrap();
        assert!(
            base.starts_with(b"#TS:"),
            "{}",
            String::from_utf8_lossy(&base)
        );
        // The next line only in a new second (as Redis: not per file).
        let _: () = c.set("k2", "v2").unwrap();
        assert!(!incr(&dir, 2).is_empty());
    }
    let s = start(&dir, &[]);
    let mut c = s.conn();
    assert_eq!(get(&mut c, "foo").as_deref(), Some("bar"));
    assert_eq!(get(&mut c, "k2").as_deref(), Some("v2"));
}
