//! The operator's commands across threads (issue 26.5): MONITOR sees the
//! commands of clients on every thread, in each client's order; CLIENT
//! PAUSE WRITE holds writes (in order, without an error) and lets reads
//! through, until UNPAUSE or its timeout; CLIENT KILL's filters reach
//! clients on every thread; SLOWLOG names clients of other threads.
//! Byte-exact replies are in `tests/diff/ops.txt`.
//!
//! Most tests run in each layout of [`common::LAYOUTS`] (2 and 16 shards,
//! consolidated and not; `per_layout!`), so a handful of connections land
//! on several threads. Every read has the
//! harness's deadline; every loop is bounded by a count.

mod common;

use std::time::Duration;

use common::{Layout, RawConn, Server};

/// Tessera in `layout` (every test runs in each of [`common::LAYOUTS`]).
fn server(layout: Layout) -> Server {
    layout.tessera(&[])
}

fn port_of(c: &RawConn) -> u16 {
    c.stream().local_addr().expect("local addr").port()
}

/// Reads monitor lines until `n` arrived.
fn monitor_lines(m: &mut RawConn, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| String::from_utf8(m.read_reply()).expect("utf8"))
        .collect()
}

fn monitor_sees_every_thread_in_order(layout: Layout) {
    const CLIENTS: usize = 6;
    const CMDS: usize = 20;
    let s = server(layout);
    let mut m = s.raw();
    assert_eq!(m.cmd_str(&["MONITOR"]), b"+OK\r\n");
    let mut clients: Vec<RawConn> = (0..CLIENTS).map(|_| s.raw()).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        assert_eq!(c.cmd_str(&["SELECT", &(i % 3).to_string()]), b"+OK\r\n");
    }
    for j in 0..CMDS {
        for (i, c) in clients.iter_mut().enumerate() {
            let k = format!("k{i}");
            assert_eq!(c.cmd_str(&["SET", &k, &j.to_string()]), b"+OK\r\n");
        }
    }
    // CONFIG is admin: never shown.
    assert!(!clients[0].cmd_str(&["CONFIG", "GET", "port"]).is_empty());
    let lines = monitor_lines(&mut m, CLIENTS * (CMDS + 1));
    for (i, c) in clients.iter().enumerate() {
        let who = format!(" 127.0.0.1:{}] ", port_of(c));
        let mine: Vec<&String> = lines.iter().filter(|l| l.contains(&who)).collect();
        assert_eq!(mine.len(), CMDS + 1, "client {i}: {lines:?}");
        // SELECT shows the database it selected (Redis feeds after the
        // call).
        assert!(mine[0].starts_with('+'), "{}", mine[0]);
        let db = i % 3;
        assert!(mine[0].ends_with(&format!("[{db}{who}\"SELECT\" \"{db}\"\r\n")));
        for (j, l) in mine[1..].iter().enumerate() {
            assert!(l.contains(&format!("[{}{who}", i % 3)), "{l}");
            assert!(
                l.ends_with(&format!("\"SET\" \"k{i}\" \"{j}\"\r\n")),
                "client {i} command {j}: {l}"
            );
        }
    }
    m.assert_silent(Duration::from_millis(100));
    // RESET ends monitoring.
    assert_eq!(m.cmd_str(&["RESET"]), b"+RESET\r\n");
    assert_eq!(clients[1].cmd_str(&["SET", "x", "y"]), b"+OK\r\n");
    m.assert_silent(Duration::from_millis(100));
}

fn monitor_shows_transactions_and_scripts_as_redis(layout: Layout) {
    let s = server(layout);
    let mut m = s.raw();
    assert_eq!(m.cmd_str(&["MONITOR"]), b"+OK\r\n");
    let mut c = s.raw();
    assert_eq!(c.cmd_str(&["MULTI"]), b"+OK\r\n");
    assert_eq!(c.cmd_str(&["SET", "a", "1"]), b"+QUEUED\r\n");
    assert_eq!(c.cmd_str(&["EXEC"]), b"*1\r\n+OK\r\n");
    assert_eq!(
        c.cmd_str(&["EVAL", "return redis.call('get', KEYS[1])", "1", "a"]),
        b"$1\r\n1\r\n"
    );
    assert_eq!(c.cmd_str(&["AUTH", "secret"]).first(), Some(&b'-'));
    let l = monitor_lines(&mut m, 6);
    assert!(l[0].ends_with("\"MULTI\"\r\n"), "{l:?}");
    assert!(l[1].ends_with("\"SET\" \"a\" \"1\"\r\n"), "{l:?}");
    assert!(l[2].ends_with("\"EXEC\"\r\n"), "{l:?}");
    assert!(l[3].contains("\"EVAL\""), "{l:?}");
    assert!(l[4].ends_with("[0 lua] \"get\" \"a\"\r\n"), "{l:?}");
    assert!(l[5].ends_with("\"AUTH\" \"(redacted)\"\r\n"), "{l:?}");
}

fn blocked_clients(c: &mut RawConn) -> u64 {
    let info = String::from_utf8(c.cmd_str(&["INFO", "clients"])).expect("utf8");
    info.lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("blocked_clients")
}

/// Polls until `n` clients are blocked (bounded).
fn wait_blocked(c: &mut RawConn, n: u64) {
    for _ in 0..500 {
        if blocked_clients(c) == n {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("never {n} blocked clients");
}

fn pause_write_holds_writes_in_order_and_lets_reads_through(layout: Layout) {
    const WRITERS: usize = 4;
    let s = server(layout);
    let mut admin = s.raw();
    assert_eq!(admin.cmd_str(&["SET", "k", "0"]), b"+OK\r\n");
    assert_eq!(
        admin.cmd_str(&["CLIENT", "PAUSE", "60000", "WRITE"]),
        b"+OK\r\n"
    );
    // Each writer pipelines three commands: a write is held, and what
    // follows it waits behind it (even the read).
    let mut writers: Vec<RawConn> = (0..WRITERS).map(|_| s.raw()).collect();
    for (i, w) in writers.iter_mut().enumerate() {
        let k = format!("w{i}");
        let mut wire = common::encode_command(&[b"RPUSH", k.as_bytes(), b"a"]);
        wire.extend(common::encode_command(&[b"GET", b"k"]));
        wire.extend(common::encode_command(&[b"RPUSH", k.as_bytes(), b"b"]));
        w.send(&wire);
    }
    wait_blocked(&mut admin, WRITERS as u64);
    for w in &mut writers {
        w.assert_silent(Duration::from_millis(50));
    }
    // Reads of other clients, on any thread, go through; so do
    // transactions of reads only.
    for _ in 0..4 {
        let mut r = s.raw();
        assert_eq!(r.cmd_str(&["GET", "k"]), b"$1\r\n0\r\n");
        assert_eq!(r.cmd_str(&["MULTI"]), b"+OK\r\n");
        assert_eq!(r.cmd_str(&["GET", "k"]), b"+QUEUED\r\n");
        assert_eq!(r.cmd_str(&["EXEC"]), b"*1\r\n$1\r\n0\r\n");
        // A client CLIENT LIST shows as blocked.
        let list = String::from_utf8(r.cmd_str(&["CLIENT", "LIST"])).expect("utf8");
        assert_eq!(list.matches("flags=b").count(), WRITERS, "{list}");
    }
    // A syntax error is answered at once.
    assert_eq!(
        admin.cmd_str(&["SET", "k"]),
        b"-ERR wrong number of arguments for 'set' command\r\n"
    );
    assert_eq!(admin.cmd_str(&["CLIENT", "UNPAUSE"]), b"+OK\r\n");
    for (i, w) in writers.iter_mut().enumerate() {
        assert_eq!(
            w.read_replies(3).concat(),
            b":1\r\n$1\r\n0\r\n:2\r\n",
            "writer {i}"
        );
        let k = format!("w{i}");
        assert_eq!(
            w.cmd_str(&["LRANGE", &k, "0", "-1"]),
            b"*2\r\n$1\r\na\r\n$1\r\nb\r\n"
        );
    }
    assert_eq!(blocked_clients(&mut admin), 0);
}

fn pause_ends_by_itself_and_all_holds_reads(layout: Layout) {
    let s = server(layout);
    let mut admin = s.raw();
    // ALL holds reads too; the pause ends when its time is up, without an
    // UNPAUSE.
    assert_eq!(
        admin.cmd_str(&["CLIENT", "PAUSE", "300", "ALL"]),
        b"+OK\r\n"
    );
    let mut r = s.raw();
    r.send(&common::encode_command(&[b"GET", b"k"]));
    r.send(&common::encode_command(&[b"PUBLISH", b"ch", b"m"]));
    assert_eq!(r.read_replies(2).concat(), b"$-1\r\n:0\r\n");
    // WRITE holds PUBLISH (it replicates) and a transaction with a write.
    assert_eq!(
        admin.cmd_str(&["CLIENT", "PAUSE", "60000", "WRITE"]),
        b"+OK\r\n"
    );
    let mut p = s.raw();
    p.send(&common::encode_command(&[b"PUBLISH", b"ch", b"m"]));
    let mut t = s.raw();
    assert_eq!(t.cmd_str(&["MULTI"]), b"+OK\r\n");
    // Queueing a write is held already (as Redis).
    t.send(&common::encode_command(&[b"SET", b"x", b"1"]));
    t.send(&common::encode_command(&[b"EXEC"]));
    wait_blocked(&mut admin, 2);
    // A script that declares no writes is not held; one that may is.
    assert_eq!(
        admin.cmd_str(&["EVAL", "#!lua flags=no-writes\nreturn 1", "0"]),
        b":1\r\n"
    );
    let mut e = s.raw();
    e.send(&common::encode_command(&[b"EVAL", b"return 2", b"0"]));
    wait_blocked(&mut admin, 3);
    assert_eq!(admin.cmd_str(&["CLIENT", "UNPAUSE"]), b"+OK\r\n");
    assert_eq!(p.read_reply(), b":0\r\n");
    assert_eq!(t.read_replies(2).concat(), b"+QUEUED\r\n*1\r\n+OK\r\n");
    assert_eq!(e.read_reply(), b":2\r\n");
}

/// CLIENT PAUSE WRITE judges a script by the flags it declares, wherever
/// they come from: the cache (EVALSHA), the library (FCALL) or the body's
/// shebang, and EXEC by its queued scripts; a non-RO script may PUBLISH.
fn pause_write_judges_scripts_by_their_declared_flags(layout: Layout) {
    let s = server(layout);
    let mut admin = s.raw();
    let lib = "#!lua name=l\n\
        redis.register_function{function_name='ro', callback=function() return 'r' end, flags={'no-writes'}}\n\
        redis.register_function('rw', function() return 'w' end)";
    assert_eq!(admin.cmd_str(&["FUNCTION", "LOAD", lib]), b"$1\r\nl\r\n");
    let ro_sha = admin.cmd_str(&["SCRIPT", "LOAD", "#!lua flags=no-writes\nreturn 2"]);
    let ro_sha = String::from_utf8(common::reply_payload(&ro_sha).expect("sha")).expect("utf8");
    // Publishing from a script reaches subscribers (none here) and is
    // refused to read-only scripts.
    assert_eq!(
        admin.cmd_str(&["EVAL", "return redis.call('publish','ch','m')", "0"]),
        b":0\r\n"
    );
    let refused = admin.cmd_str(&["EVAL_RO", "return redis.call('publish','ch','m')", "0"]);
    assert!(
        refused.starts_with(b"-ERR Write commands are not allowed from read-only scripts."),
        "{}",
        String::from_utf8_lossy(&refused)
    );
    assert_eq!(
        admin.cmd_str(&["CLIENT", "PAUSE", "60000", "WRITE"]),
        b"+OK\r\n"
    );
    // Not held: declared no-writes.
    assert_eq!(admin.cmd_str(&["EVALSHA", &ro_sha, "0"]), b":2\r\n");
    assert_eq!(admin.cmd_str(&["FCALL", "ro", "0"]), b"$1\r\nr\r\n");
    assert_eq!(admin.cmd_str(&["MULTI"]), b"+OK\r\n");
    assert_eq!(admin.cmd_str(&["EVALSHA", &ro_sha, "0"]), b"+QUEUED\r\n");
    assert_eq!(admin.cmd_str(&["EXEC"]), b"*1\r\n:2\r\n");
    // Held: a function that may write, and EVAL_RO of a script whose
    // shebang does not say no-writes (its flags replace the command's).
    let mut f = s.raw();
    f.send(&common::encode_command(&[b"FCALL", b"rw", b"0"]));
    let mut e = s.raw();
    e.send(&common::encode_command(&[
        b"EVAL_RO",
        b"#!lua\nreturn 3",
        b"0",
    ]));
    wait_blocked(&mut admin, 2);
    assert_eq!(admin.cmd_str(&["CLIENT", "UNPAUSE"]), b"+OK\r\n");
    assert_eq!(f.read_reply(), b"$1\r\nw\r\n");
    assert_eq!(
        e.read_reply(),
        b"-ERR Can not execute a script with write flag using *_ro command.\r\n"
    );
}

/// While clients are paused, keys past their deadline read as missing but
/// are not deleted (INFO expired_keys stays), on access or actively; after
/// UNPAUSE an access deletes them.
fn pause_keeps_expired_keys_until_unpause(layout: Layout) {
    let s = server(layout);
    let mut admin = s.raw();
    let expired = |c: &mut RawConn| -> u64 {
        let info = String::from_utf8(c.cmd_str(&["INFO", "stats"])).expect("utf8");
        info.lines()
            .find_map(|l| l.strip_prefix("expired_keys:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("expired_keys")
    };
    assert_eq!(admin.cmd_str(&["MULTI"]), b"+OK\r\n");
    assert_eq!(
        admin.cmd_str(&["SET", "a{t}", "1", "PX", "1"]),
        b"+QUEUED\r\n"
    );
    assert_eq!(
        admin.cmd_str(&["SET", "b{t}", "1", "PX", "1"]),
        b"+QUEUED\r\n"
    );
    assert_eq!(
        admin.cmd_str(&["CLIENT", "PAUSE", "60000", "WRITE"]),
        b"+QUEUED\r\n"
    );
    assert_eq!(admin.cmd_str(&["EXEC"]), b"*3\r\n+OK\r\n+OK\r\n+OK\r\n");
    common::wait_for("keys past their deadline", || {
        admin.cmd_str(&["GET", "a{t}"]) == b"$-1\r\n"
            && admin.cmd_str(&["GET", "b{t}"]) == b"$-1\r\n"
    });
    // Several server ticks (hz 10): the active cycle deletes nothing either.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(expired(&mut admin), 0);
    assert_eq!(admin.cmd_str(&["CLIENT", "UNPAUSE"]), b"+OK\r\n");
    assert_eq!(admin.cmd_str(&["GET", "a{t}"]), b"$-1\r\n");
    assert_eq!(admin.cmd_str(&["GET", "b{t}"]), b"$-1\r\n");
    assert_eq!(expired(&mut admin), 2);
}

/// A field of a CLIENT LIST / CLIENT INFO line.
fn client_field(reply: &[u8], field: &str) -> String {
    let text = String::from_utf8_lossy(reply);
    let key = format!("{field}=");
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(&key))
        .unwrap_or_else(|| panic!("no {field} in {text}"))
        .to_string()
}

/// CLIENT INFO and the caller's CLIENT LIST line show the query buffer as
/// Redis does while the command runs: what this read brought, the
/// command's own bytes included (Redis trims after the read's commands).
fn client_info_counts_the_running_command_in_qbuf(layout: Layout) {
    let s = server(layout);
    let mut c = s.raw();
    // *2\r\n$6\r\nCLIENT\r\n$4\r\nINFO\r\n: 26 bytes.
    let info = c.cmd_str(&["CLIENT", "INFO"]);
    assert_eq!(client_field(&info, "qbuf"), "26");
    assert_eq!(client_field(&info, "argv-mem"), "10");
    // With ID 2 added: 4 + 12 + 10 + 8 + 7 bytes.
    let id = client_field(&info, "id");
    let list = c.cmd_str(&["CLIENT", "LIST", "ID", &id]);
    assert_eq!(client_field(&list, "qbuf"), (41 + id.len() - 1).to_string());
    // Inline, after a PING of the same read: 6 + 13 bytes.
    c.send(b"PING\r\nCLIENT INFO\r\n");
    let replies = c.read_replies(2);
    assert_eq!(replies[0], b"+PONG\r\n");
    assert_eq!(client_field(&replies[1], "qbuf"), "19");
    // Another, idle, client (answered once, so its thread has it listed):
    // nothing buffered.
    let mut other = s.raw();
    assert_eq!(other.cmd_str(&["PING"]), b"+PONG\r\n");
    let list = c.cmd_str(&["CLIENT", "LIST"]);
    let text = String::from_utf8_lossy(&list);
    let idle: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("id=") && !l.contains("cmd=client|list"))
        .collect();
    assert!(!idle.is_empty(), "{text}");
    for l in idle {
        assert_eq!(client_field(l.as_bytes(), "qbuf"), "0", "{l}");
    }
}

/// An active expiry cycle that takes longer than
/// `latency-monitor-threshold` is a latency event `expire-cycle`. (Redis's
/// own test makes one slow cycle by expiring a set of a million members;
/// Tessera frees such a value on its background thread, so here many small
/// keys expire at once: a threshold of 1 ms is far below what deleting
/// them takes.)
fn slow_expire_cycle_is_a_latency_event(layout: Layout) {
    const KEYS: usize = 30_000;
    let s = server(layout);
    let mut c = s.raw();
    assert_eq!(
        c.cmd_str(&["CONFIG", "SET", "latency-monitor-threshold", "1"]),
        b"+OK\r\n"
    );
    // Keys are set past their deadline only after all are in (PX 200).
    let mut wire = Vec::new();
    for i in 0..KEYS {
        wire.extend(common::encode_command(&[
            b"SET",
            format!("e{i}").as_bytes(),
            b"v",
            b"PX",
            b"200",
        ]));
    }
    c.send(&wire);
    for _ in 0..KEYS {
        assert_eq!(c.read_reply(), b"+OK\r\n");
    }
    common::wait_for("the keys to expire", || c.cmd_str(&["DBSIZE"]) == b":0\r\n");
    let latest = c.cmd_str(&["LATENCY", "LATEST"]);
    assert!(
        String::from_utf8_lossy(&latest).contains("expire-cycle"),
        "{}",
        String::from_utf8_lossy(&latest)
    );
}

fn client_kill_filters_reach_every_thread(layout: Layout) {
    let s = server(layout);
    let mut admin = s.raw();
    let mut victims: Vec<RawConn> = (0..6).map(|_| s.raw()).collect();
    for v in &mut victims {
        assert_eq!(v.cmd_str(&["PING"]), b"+PONG\r\n");
    }
    let id_of = |c: &mut RawConn| -> String {
        let r = String::from_utf8(c.cmd_str(&["CLIENT", "ID"])).expect("utf8");
        r.trim_start_matches(':').trim().to_string()
    };
    // ID.
    let id = id_of(&mut victims[0]);
    assert_eq!(admin.cmd_str(&["CLIENT", "KILL", "ID", &id]), b":1\r\n");
    victims[0]
        .wait_closed(Duration::from_secs(5))
        .expect("killed by id");
    // ADDR (the old form too).
    let addr = format!("127.0.0.1:{}", port_of(&victims[1]));
    assert_eq!(admin.cmd_str(&["CLIENT", "KILL", "ADDR", &addr]), b":1\r\n");
    victims[1]
        .wait_closed(Duration::from_secs(5))
        .expect("killed by addr");
    let addr = format!("127.0.0.1:{}", port_of(&victims[2]));
    assert_eq!(admin.cmd_str(&["CLIENT", "KILL", &addr]), b"+OK\r\n");
    victims[2]
        .wait_closed(Duration::from_secs(5))
        .expect("killed, old form");
    assert_eq!(
        admin.cmd_str(&["CLIENT", "KILL", &addr]),
        b"-ERR No such client\r\n"
    );
    // TYPE pubsub takes only the subscriber.
    assert_eq!(
        victims[3].cmd_str(&["SUBSCRIBE", "c"]),
        b"*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n"
    );
    assert_eq!(
        admin.cmd_str(&["CLIENT", "KILL", "TYPE", "pubsub"]),
        b":1\r\n"
    );
    victims[3]
        .wait_closed(Duration::from_secs(5))
        .expect("killed by type");
    // LADDR with SKIPME yes (the default) takes everyone else, USER
    // default names them all.
    let laddr = s.addr();
    assert_eq!(
        admin.cmd_str(&["CLIENT", "KILL", "LADDR", &laddr, "USER", "default"]),
        b":2\r\n"
    );
    for v in &mut victims[4..] {
        v.wait_closed(Duration::from_secs(5))
            .expect("killed by laddr");
    }
    // SKIPME no: the caller too, after its reply.
    assert_eq!(
        admin.cmd_str(&["CLIENT", "KILL", "LADDR", &laddr, "SKIPME", "no"]),
        b":1\r\n"
    );
    admin
        .wait_closed(Duration::from_secs(5))
        .expect("killed itself");
}

fn slowlog_names_clients_of_every_thread(layout: Layout) {
    const CLIENTS: usize = 5;
    let s = server(layout);
    let mut admin = s.raw();
    assert_eq!(
        admin.cmd_str(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]),
        b"+OK\r\n"
    );
    assert_eq!(admin.cmd_str(&["SLOWLOG", "RESET"]), b"+OK\r\n");
    let mut clients: Vec<RawConn> = (0..CLIENTS).map(|_| s.raw()).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        let name = format!("c{i}");
        assert_eq!(c.cmd_str(&["CLIENT", "SETNAME", &name]), b"+OK\r\n");
        // Keys on every shard: some run here, some on another thread.
        for j in 0..4 {
            let k = format!("key{i}-{j}");
            assert_eq!(c.cmd_str(&["SET", &k, "v"]), b"+OK\r\n");
        }
    }
    // One that has gone keeps its address and name.
    let gone_port = port_of(&clients[0]);
    drop(clients.remove(0));
    // Gone from the server too (before: a 100 ms sleep, which a loaded
    // machine could outlast, and the check below then proved nothing).
    let gone_addr = format!("addr=127.0.0.1:{gone_port} ");
    common::wait_for("the closed client to leave CLIENT LIST", || {
        !String::from_utf8_lossy(&admin.cmd_str(&["CLIENT", "LIST"])).contains(&gone_addr)
    });
    let got = admin.cmd_str(&["SLOWLOG", "GET", "-1"]);
    let text = String::from_utf8_lossy(&got);
    for (i, c) in clients.iter().enumerate() {
        let i = i + 1;
        let addr = format!("127.0.0.1:{}\r\n$2\r\nc{i}\r\n", port_of(c));
        // CLIENT SETNAME and four SETs.
        assert_eq!(text.matches(&addr).count(), 5, "client {i}: {text}");
    }
    let gone = format!("127.0.0.1:{gone_port}\r\n$2\r\nc0\r\n");
    assert_eq!(text.matches(&gone).count(), 5, "{text}");
    // A command across shards is logged with its arguments (the
    // coordinator's own copy of them, `Coordinator::kept_args`).
    assert_eq!(admin.cmd_str(&["SLOWLOG", "RESET"]), b"+OK\r\n");
    assert_eq!(
        admin.cmd_str(&["MSET", "a{1}", "1", "b{2}", "2", "c{3}", "3"]),
        b"+OK\r\n"
    );
    let got = admin.cmd_str(&["SLOWLOG", "GET", "1"]);
    let mset = "*7\r\n$4\r\nMSET\r\n$4\r\na{1}\r\n$1\r\n1\r\n$4\r\nb{2}\r\n$1\r\n2\r\n$4\r\nc{3}\r\n$1\r\n3\r\n";
    assert!(
        String::from_utf8_lossy(&got).contains(mset),
        "{}",
        String::from_utf8_lossy(&got)
    );
}

fn bin() -> String {
    std::env::var("TESSERA_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_tessera").into())
}

/// Starts the binary on `conf` (a config file, first as for
/// redis-server) and waits for it to exit or listen on `port`.
fn spawn_with_conf(conf: &std::path::Path, port: u16) -> std::process::Child {
    std::process::Command::new(bin())
        .args([
            conf.to_str().expect("path"),
            "--port",
            &port.to_string(),
            "--save",
            "",
        ])
        .current_dir(conf.parent().expect("dir"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn")
}

#[test]
fn rename_command_in_the_config_file() {
    let dir = common::unique_temp_dir("rename");
    let conf = dir.join("r.conf");
    std::fs::write(
        &conf,
        "rename-command SET myset\nrename-command flushall \"\"\nrename-command config cfg\n",
    )
    .expect("write");
    let port = common::free_port();
    let mut child = spawn_with_conf(&conf, port);
    let mut c = None;
    for _ in 0..500 {
        if let Ok(s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            drop(s);
            c = Some(RawConn::connect(&format!("127.0.0.1:{port}")));
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut c = c.expect("server did not start");
    assert_eq!(
        c.cmd_str(&["SET", "k", "v"]),
        b"-ERR unknown command 'SET', with args beginning with: 'k' 'v' \r\n"
    );
    assert_eq!(c.cmd_str(&["MYSET", "k", "v"]), b"+OK\r\n");
    assert_eq!(c.cmd_str(&["GET", "k"]), b"$1\r\nv\r\n");
    assert_eq!(c.cmd_str(&["FLUSHALL"]).first(), Some(&b'-'));
    assert_eq!(c.cmd_str(&["CFG", "GET", "port"]).first(), Some(&b'*'));
    let _ = child.kill();
    let _ = child.wait();

    // A command that does not exist, or a name taken: Redis's errors.
    for (text, why) in [
        (
            "port 1\nrename-command nosuch x\n",
            "No such command in rename-command",
        ),
        (
            "rename-command get set\n",
            "Target command name already exists",
        ),
    ] {
        std::fs::write(&conf, text).expect("write");
        let mut child = spawn_with_conf(&conf, common::free_port());
        for _ in 0..500 {
            if child.try_wait().expect("wait").is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Still running after 10 s: killed, and the assertions fail.
        let _ = child.kill();
        let out = child.wait_with_output().expect("wait");
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why), "{err}");
        assert!(err.contains(">>> 'rename-command"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `maxmemory-clients` (Redis 7.0's client eviction): a client whose query
/// buffer takes the clients' memory over the limit is disconnected and
/// counted in INFO `evicted_clients`; one with CLIENT NO-EVICT on is not.
/// Clients land on several threads: the limit is on their sum.
fn maxmemory_clients_evicts_the_biggest_client(layout: Layout) {
    let s = server(layout);
    let mut admin = s.raw();
    assert_eq!(admin.cmd_str(&["CLIENT", "NO-EVICT", "on"]), b"+OK\r\n");
    assert_eq!(
        admin.cmd_str(&["CONFIG", "SET", "maxmemory-clients", "1mb"]),
        b"+OK\r\n"
    );
    let mut others: Vec<RawConn> = (0..4).map(|_| s.raw()).collect();
    for o in &mut others {
        assert_eq!(o.cmd_str(&["PING"]), b"+PONG\r\n");
    }
    // An unfinished 3 MB argument: its query buffer goes past 1 MB.
    const BULK: usize = 3_000_000;
    let head = format!("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n${BULK}\r\n");
    let body = vec![b'x'; 2_000_000];
    let mut victim = s.raw();
    let _ = victim.try_send(head.as_bytes());
    let _ = victim.try_send(&body);
    assert!(
        victim.try_read_reply().is_err(),
        "the big client was disconnected"
    );
    let info = String::from_utf8(admin.cmd_str(&["INFO", "stats"])).unwrap();
    assert!(info.contains("\r\nevicted_clients:1\r\n"), "{info}");
    // The small clients stayed.
    for o in &mut others {
        assert_eq!(o.cmd_str(&["PING"]), b"+PONG\r\n");
    }
    // NO-EVICT: the same request completes. (While it is over the limit
    // alone, Redis evicts every evictable client: only NO-EVICT ones stay.)
    drop(others);
    let mut kept = s.raw();
    assert_eq!(kept.cmd_str(&["CLIENT", "NO-EVICT", "on"]), b"+OK\r\n");
    kept.send(head.as_bytes());
    kept.send(&body);
    kept.send(&vec![b'x'; BULK - body.len()]);
    kept.send(b"\r\n");
    assert_eq!(kept.read_reply(), b"+OK\r\n");
    let info = String::from_utf8(admin.cmd_str(&["INFO", "stats"])).unwrap();
    assert!(info.contains("\r\nevicted_clients:1\r\n"), "{info}");
    // CONFIG RESETSTAT zeroes the count, as in Redis.
    assert_eq!(admin.cmd_str(&["CONFIG", "RESETSTAT"]), b"+OK\r\n");
    let info = String::from_utf8(admin.cmd_str(&["INFO", "stats"])).unwrap();
    assert!(info.contains("\r\nevicted_clients:0\r\n"), "{info}");
}

per_layout!(
    maxmemory_clients_evicts_the_biggest_client,
    monitor_sees_every_thread_in_order,
    monitor_shows_transactions_and_scripts_as_redis,
    pause_write_holds_writes_in_order_and_lets_reads_through,
    pause_ends_by_itself_and_all_holds_reads,
    pause_write_judges_scripts_by_their_declared_flags,
    pause_keeps_expired_keys_until_unpause,
    client_info_counts_the_running_command_in_qbuf,
    slow_expire_cycle_is_a_latency_event,
    client_kill_filters_reach_every_thread,
    slowlog_names_clients_of_every_thread,
);
