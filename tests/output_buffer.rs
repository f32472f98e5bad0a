//! Client output buffer limits (`client-output-buffer-limit`), client
//! memory figures (CLIENT LIST, INFO), and the request limits, on the real
//! binary.
//!
//! A client that asks for big replies and never reads must be closed once
//! its pending output reaches the hard limit, or stays at or above the soft
//! limit for more than soft-seconds; every other client keeps being served.
//! A client that reads its replies in time is never closed. Whether a client
//! is still connected is read from another client's CLIENT LIST (by id), so
//! no assertion depends on how fast anything happens: waits are bounded
//! polls.
//!
//! Validated against Redis 7.0.15:
//! `TESSERA_TEST_BIN=/usr/bin/redis-server cargo test --test output_buffer`.

mod common;

use common::{assert_bytes, encode_command, escape, testing_real_redis, Layout, RawConn, Server};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// Bound on waiting for the server to close a client.
const CLOSE_WAIT: Duration = Duration::from_secs(20);
/// Size of each big value.
const BIG: usize = 1 << 20;

/// Tessera in `layout` (replies then also come from other threads; every
/// test using it runs in each of [`common::LAYOUTS`]), plain Redis when
/// validating.
fn server(layout: Layout) -> Server {
    layout.tessera(&[])
}

/// 3 shards, for the tests that wait out limits in seconds (they would
/// cost their waits once per layout).
fn server_3() -> Server {
    if testing_real_redis() {
        Server::tessera(&[])
    } else {
        Server::tessera(&["--shards", "3"])
    }
}

fn client_id(c: &mut RawConn) -> String {
    let r = c.cmd_str(&["CLIENT", "ID"]);
    let s = String::from_utf8(r).expect("utf8");
    s.trim_start_matches(':').trim_end().to_string()
}

/// Whether a client with this id is connected, per CLIENT LIST.
fn connected(admin: &mut RawConn, id: &str) -> bool {
    let list = String::from_utf8_lossy(&admin.cmd_str(&["CLIENT", "LIST"])).into_owned();
    let needle = format!("id={id} ");
    list.lines().any(|l| l.starts_with(&needle))
}

/// CLIENT LIST line of client `id`.
fn list_line(admin: &mut RawConn, id: &str) -> Option<String> {
    let list = String::from_utf8_lossy(&admin.cmd_str(&["CLIENT", "LIST"])).into_owned();
    let needle = format!("id={id} ");
    list.lines()
        .find(|l| l.starts_with(&needle))
        .map(|l| l.to_string())
}

fn field(line: &str, name: &str) -> u64 {
    let key = format!(" {name}=");
    let at = line
        .find(&key)
        .unwrap_or_else(|| panic!("{name} in {line}"));
    line[at + key.len()..]
        .split(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} value in {line}"))
}

fn info_field(admin: &mut RawConn, section: &str, name: &str) -> u64 {
    let info = String::from_utf8_lossy(&admin.cmd_str(&["INFO", section])).into_owned();
    let key = format!("{name}:");
    info.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} in INFO {section}"))
}

/// Stores `n` values of [`BIG`] bytes (`big0`..), spread over shards.
fn load_big(admin: &mut RawConn, n: usize) {
    let value = vec![b'v'; BIG];
    for i in 0..n {
        let key = format!("big{i}");
        assert_bytes(&admin.cmd(&[b"SET", key.as_bytes(), &value]), b"+OK\r\n");
    }
}

fn set_limit(admin: &mut RawConn, v: &str) {
    assert_bytes(
        &admin.cmd_str(&["CONFIG", "SET", "client-output-buffer-limit", v]),
        b"+OK\r\n",
    );
}

/// `GET big{i % keys}` for i in `range`, as one pipeline.
fn gets(range: std::ops::Range<usize>, keys: usize) -> Vec<u8> {
    let mut p = Vec::new();
    for i in range {
        let key = format!("big{}", i % keys);
        p.extend(encode_command(&[b"GET", key.as_bytes()]));
    }
    p
}

/// Polls until client `id` is gone; panics after [`CLOSE_WAIT`].
fn wait_gone(admin: &mut RawConn, id: &str, what: &str) {
    let deadline = Instant::now() + CLOSE_WAIT;
    while connected(admin, id) {
        assert!(
            Instant::now() < deadline,
            "{what}: client {id} still connected after {CLOSE_WAIT:?}: {:?}",
            list_line(admin, id)
        );
        sleep(Duration::from_millis(50));
    }
}

/// Reads what the server sent before it closed the connection; returns
/// the byte count (a reset is an end too).
fn drain_to_close(c: &mut RawConn) -> usize {
    let mut total = 0;
    let deadline = Instant::now() + CLOSE_WAIT;
    loop {
        match c.try_read_reply() {
            Ok(r) => total += r.len(),
            Err(e)
                if e.kind() == std::io::ErrorKind::UnexpectedEof
                    || e.kind() == std::io::ErrorKind::ConnectionReset
                    || common::is_reset(&e) =>
            {
                return total + c.buffered().len();
            }
            Err(e) => panic!("reading to the close: {e}"),
        }
        assert!(Instant::now() < deadline, "no close after {total} bytes");
    }
}

fn hard_limit_closes_a_client_that_does_not_read(layout: Layout) {
    let srv = server(layout);
    let mut admin = srv.raw();
    load_big(&mut admin, 6);
    set_limit(&mut admin, "normal 10mb 5mb 1");
    let mut slow = srv.raw();
    let id = client_id(&mut slow);
    // 100 MB of replies asked for, none read. Sending may fail once the
    // server has closed the connection (a reset).
    const N: usize = 100;
    let _ = slow.try_send(&gets(0..N, 6));
    wait_gone(&mut admin, &id, "hard limit");
    // Everyone else is still served, big replies included.
    assert_bytes(&admin.cmd_str(&["PING"]), b"+PONG\r\n");
    let mut other = srv.raw();
    let r = other.cmd_str(&["GET", "big3"]);
    assert_eq!(r.len(), BIG + 12, "{}", escape(&r, 40));
    // The slow client got part of its replies, then the close.
    let got = drain_to_close(&mut slow);
    assert!(got < N * BIG, "all {got} bytes were delivered");
    // The log says why (Redis's words).
    if !testing_real_redis() {
        let log = srv.log();
        assert!(
            log.contains("scheduled to be closed ASAP for overcoming of output buffer limits"),
            "{}",
            srv.log_tail(10)
        );
    }
}

#[test]
fn soft_limit_closes_a_client_that_stays_above_it() {
    let srv = server_3();
    let mut admin = srv.raw();
    load_big(&mut admin, 3);
    // No hard limit: only staying above 2 MB for more than a second counts.
    set_limit(&mut admin, "normal 0 2mb 1");
    let mut slow = srv.raw();
    let id = client_id(&mut slow);
    let _ = slow.try_send(&gets(0..20, 3));
    // Keep asking (never reading): Redis checks the limit as replies are
    // added, so new replies keep it checking.
    let deadline = Instant::now() + CLOSE_WAIT;
    let mut i = 20;
    while connected(&mut admin, &id) {
        assert!(
            Instant::now() < deadline,
            "soft limit: client still connected after {CLOSE_WAIT:?}: {:?}",
            list_line(&mut admin, &id)
        );
        let _ = slow.try_send(&gets(i..i + 1, 3));
        i += 1;
        sleep(Duration::from_millis(100));
    }
    assert_bytes(&admin.cmd_str(&["PING"]), b"+PONG\r\n");
    let got = drain_to_close(&mut slow);
    assert!(got < i * BIG, "all {got} bytes were delivered");
}

#[test]
fn a_client_that_reads_in_time_is_not_closed() {
    let srv = server_3();
    let mut admin = srv.raw();
    load_big(&mut admin, 4);
    // Above the soft limit for a moment each round, far below 30 seconds.
    set_limit(&mut admin, "normal 0 2mb 30");
    let mut c = srv.raw();
    let id = client_id(&mut c);
    for round in 0..5 {
        c.send(&gets(0..20, 4));
        for i in 0..20 {
            let r = c.read_reply();
            assert_eq!(r.len(), BIG + 12, "round {round} reply {i}");
        }
    }
    assert!(connected(&mut admin, &id));
    assert_bytes(&c.cmd_str(&["PING"]), b"+PONG\r\n");
    // Limits off (Redis's default for normal clients): nobody is closed.
    set_limit(&mut admin, "normal 0 0 0");
    c.send(&gets(0..30, 4));
    for _ in 0..30 {
        assert_eq!(c.read_reply().len(), BIG + 12);
    }
    assert_bytes(&c.cmd_str(&["PING"]), b"+PONG\r\n");
}

fn one_huge_reply_past_the_hard_limit_closes_the_client(layout: Layout) {
    let srv = server(layout);
    let mut admin = srv.raw();
    // A list whose LRANGE reply is about 8 MB.
    let item = vec![b'x'; 1000];
    for _ in 0..8 {
        let mut cmd: Vec<&[u8]> = vec![b"RPUSH", b"biglist"];
        cmd.extend(std::iter::repeat_n(&item[..], 1000));
        admin.cmd(&cmd);
    }
    set_limit(&mut admin, "normal 1mb 0 0");
    let mut c = srv.raw();
    let id = client_id(&mut c);
    c.send(&encode_command(&[b"LRANGE", b"biglist", b"0", b"-1"]));
    wait_gone(&mut admin, &id, "one huge reply");
    let got = drain_to_close(&mut c);
    assert!(got < 8_000_000, "{got} bytes delivered");
    // The memory went with the client: the server's own figure for client
    // buffers is back to small.
    let clients = info_field(&mut admin, "memory", "mem_clients_normal");
    assert!(clients < 4 << 20, "mem_clients_normal {clients}");
    assert_bytes(&admin.cmd_str(&["PING"]), b"+PONG\r\n");
}

/// A reply past the hard limit is never sent, however fast the socket
/// would take it: the client is closed first (Redis checks as it appends).
/// A lone command for another shard wrote its reply straight to the socket
/// before any check; connections on each thread cover that path.
fn a_reply_past_the_hard_limit_is_not_sent(layout: Layout) {
    let srv = server(layout);
    let mut admin = srv.raw();
    let item = vec![b'x'; 1000];
    let mut cmd: Vec<&[u8]> = vec![b"RPUSH", b"l"];
    cmd.extend(std::iter::repeat_n(&item[..], 1100));
    admin.cmd(&cmd);
    set_limit(&mut admin, "normal 1mb 0 0");
    for _ in 0..4 {
        let mut c = srv.raw();
        let id = client_id(&mut c);
        c.send(&encode_command(&[b"LRANGE", b"l", b"0", b"-1"]));
        wait_gone(&mut admin, &id, "LRANGE");
        assert_eq!(drain_to_close(&mut c), 0, "bytes of a reply past the limit");
    }
}

/// The limits compare what Redis's reply list would hold, in whole
/// blocks (`getClientOutputBufferMemoryUsage`: blocks of 20464 bytes,
/// jemalloc's 20 KiB class less a header, and 40 bytes each besides), not
/// the exact bytes. With a 100000-byte hard limit, an LRANGE of 97
/// 1000-byte items (97878 bytes: 16 KiB in the fixed buffer, then 4
/// blocks) is sent and one of 98 (5 blocks) closes the client, as in Redis
/// 7.0.15; so does KEYS with 1000 keys of 100 bytes and more (Redis's Tcl
/// unit/obuf-limits 'Obuf limit, KEYS stopped mid-run', which the exact
/// bytes past the fixed buffer, 97 KB, let through).
fn limits_count_whole_reply_blocks_as_redis(layout: Layout) {
    let srv = server(layout);
    let mut admin = srv.raw();
    let item = vec![b'x'; 1000];
    let mut cmd: Vec<&[u8]> = vec![b"RPUSH", b"l"];
    cmd.extend(std::iter::repeat_n(&item[..], 98));
    assert_bytes(&admin.cmd(&cmd), b":98\r\n");
    set_limit(&mut admin, "normal 100000 0 0");
    let mut c = srv.raw();
    assert_eq!(c.cmd_str(&["LRANGE", "l", "0", "96"]).len(), 97_878);
    let line = list_line(&mut admin, &client_id(&mut c)).expect("listed");
    assert_eq!(field(&line, "omem"), 0, "{line}");
    let id = client_id(&mut c);
    c.send(&encode_command(&[b"LRANGE", b"l", b"0", b"97"]));
    wait_gone(&mut admin, &id, "LRANGE of 98 items");
    assert_eq!(drain_to_close(&mut c), 0, "bytes of a reply past the limit");
    let prefix = format!("long-key-name-prefix-of-100-chars{}", "-".repeat(67));
    for chunk in 0..10 {
        let mut cmd = vec![b"MSET".to_vec()];
        for i in chunk * 100..(chunk + 1) * 100 {
            cmd.push(format!("{prefix}{i}").into_bytes());
            cmd.push(b"v".to_vec());
        }
        let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_slice()).collect();
        assert_bytes(&admin.cmd(&args), b"+OK\r\n");
    }
    let mut c = srv.raw();
    let id = client_id(&mut c);
    c.send(&encode_command(&[b"KEYS", b"*"]));
    wait_gone(&mut admin, &id, "KEYS of 1000 long keys");
    assert_eq!(drain_to_close(&mut c), 0, "bytes of a reply past the limit");
    assert_bytes(&admin.cmd_str(&["PING"]), b"+PONG\r\n");
}

/// HRANDFIELD / SRANDMEMBER / ZRANDMEMBER with a huge negative count stop
/// drawing once the reply is past the hard limit and the client is closed,
/// as Redis's loops stop on CLIENT_CLOSE_ASAP (Redis's Tcl unit/obuf-limits
/// 'Obuf limit, HRANDFIELD with huge count stopped mid-run'): they built the
/// whole reply, 12 GB for -999999999. A script's call is not limited.
fn random_picks_stop_at_the_hard_limit(layout: Layout) {
    let srv = server(layout);
    let mut admin = srv.raw();
    assert_bytes(&admin.cmd_str(&["HSET", "h", "a", "b"]), b":1\r\n");
    assert_bytes(&admin.cmd_str(&["SADD", "s", "a"]), b":1\r\n");
    assert_bytes(&admin.cmd_str(&["ZADD", "z", "1", "a"]), b":1\r\n");
    // The pubsub class unlimited (as Redis's Tcl unit leaves it): the
    // client's own class decides.
    set_limit(&mut admin, "normal 1mb 0 0 pubsub 0 100000 4");
    for cmd in [
        &["HRANDFIELD", "h", "-999999999"][..],
        &["HRANDFIELD", "h", "-999999999", "WITHVALUES"],
        &["SRANDMEMBER", "s", "-999999999"],
        &["ZRANDMEMBER", "z", "-999999999", "WITHSCORES"],
    ] {
        let mut c = srv.raw();
        let id = client_id(&mut c);
        c.send(&encode_command(
            &cmd.iter().map(|a| a.as_bytes()).collect::<Vec<_>>(),
        ));
        wait_gone(&mut admin, &id, cmd[0]);
        let got = drain_to_close(&mut c);
        assert!(got < 64 << 20, "{cmd:?}: {got} bytes delivered");
    }
    // A RESP3 subscriber is of the pubsub class: its limit applies.
    set_limit(&mut admin, "normal 0 0 0 pubsub 1mb 0 0");
    let mut c = srv.raw();
    let id = client_id(&mut c);
    assert!(c.cmd_str(&["HELLO", "3"]).starts_with(b"%"));
    assert!(c.cmd_str(&["SUBSCRIBE", "ch"]).starts_with(b">3"));
    c.send(&encode_command(&[b"HRANDFIELD", b"h", b"-999999999"]));
    wait_gone(&mut admin, &id, "a subscriber's HRANDFIELD");
    drain_to_close(&mut c);
    set_limit(&mut admin, "normal 1mb 0 0 pubsub 0 100000 4");
    // In a transaction the commands after it still run (Redis's EXEC
    // runs every queued command of a client closed meanwhile).
    let mut c = srv.raw();
    let id = client_id(&mut c);
    let mut p = encode_command(&[b"MULTI"]);
    p.extend(encode_command(&[b"HRANDFIELD", b"h", b"-999999999"]));
    p.extend(encode_command(&[b"SET", b"after", b"1"]));
    p.extend(encode_command(&[b"EXEC"]));
    c.send(&p);
    wait_gone(&mut admin, &id, "MULTI");
    drain_to_close(&mut c);
    assert_bytes(&admin.cmd_str(&["GET", "after"]), b"$1\r\n1\r\n");
    let used = info_field(&mut admin, "memory", "used_memory_peak");
    assert!(used < 512 << 20, "used_memory_peak {used}");
    assert_bytes(
        &admin.cmd_str(&[
            "EVAL",
            "return #redis.call('hrandfield', KEYS[1], -200000)",
            "1",
            "h",
        ]),
        b":200000\r\n",
    );
}

/// A client that has not authenticated may hold 1 KiB of output whatever
/// the limits (Redis's checkClientOutputBufferLimits; Tcl unit/auth 'For
/// unauthenticated clients output buffer is limited'): one that sends
/// commands without reading their NOAUTH errors is closed.
#[test]
fn an_unauthenticated_client_that_does_not_read_is_closed() {
    let srv = server_3();
    let mut admin = srv.raw();
    assert_bytes(
        &admin.cmd_str(&["CONFIG", "SET", "requirepass", "pw"]),
        b"+OK\r\n",
    );
    let mut c = srv.raw();
    let one = encode_command(&[b"SET", b"x", b"5"]);
    let batch: Vec<u8> = one
        .iter()
        .copied()
        .cycle()
        .take(one.len() * 10_000)
        .collect();
    let mut closed = false;
    for _ in 0..200 {
        if c.try_send(&batch).is_err() {
            closed = true;
            break;
        }
    }
    // 2 million NOAUTH errors (70 MB) were asked for and none read.
    assert!(
        closed,
        "an unauthenticated client that never reads was not closed"
    );
    assert_bytes(&admin.cmd_str(&["AUTH", "pw"]), b"+OK\r\n");
    assert_bytes(&admin.cmd_str(&["PING"]), b"+PONG\r\n");
}

fn client_list_and_info_show_real_buffer_figures(layout: Layout) {
    let srv = server(layout);
    let mut admin = srv.raw();
    load_big(&mut admin, 2);
    let mut slow = srv.raw();
    let id = client_id(&mut slow);
    // Idle: nothing pending.
    let line = list_line(&mut admin, &id).expect("listed");
    assert_eq!(field(&line, "obl"), 0, "{line}");
    assert_eq!(field(&line, "oll"), 0, "{line}");
    assert_eq!(field(&line, "omem"), 0, "{line}");
    assert_eq!(field(&line, "qbuf"), 0, "{line}");
    assert!(field(&line, "tot-mem") > 0, "{line}");
    // 40 MB of replies not read: most of it waits in the server.
    let _ = slow.try_send(&gets(0..40, 2));
    let deadline = Instant::now() + CLOSE_WAIT;
    let line = loop {
        let line = list_line(&mut admin, &id).expect("listed");
        if field(&line, "omem") > 8 << 20 {
            break line;
        }
        assert!(Instant::now() < deadline, "omem never grew: {line}");
        sleep(Duration::from_millis(50));
    };
    assert!(field(&line, "tot-mem") >= field(&line, "omem"), "{line}");
    assert!(field(&line, "obl") > 0 || field(&line, "oll") > 0, "{line}");
    let normal = info_field(&mut admin, "memory", "mem_clients_normal");
    assert!(normal > 8 << 20, "mem_clients_normal {normal}");
    // The cron samples the largest output buffer of the last seconds.
    let deadline = Instant::now() + CLOSE_WAIT;
    loop {
        let recent = info_field(&mut admin, "clients", "client_recent_max_output_buffer");
        if recent > 8 << 20 {
            break;
        }
        assert!(Instant::now() < deadline, "recent max output {recent}");
        sleep(Duration::from_millis(100));
    }
    // Reading everything empties it again.
    for _ in 0..40 {
        assert_eq!(slow.read_reply().len(), BIG + 12);
    }
    let line = list_line(&mut admin, &id).expect("listed");
    assert_eq!(field(&line, "omem"), 0, "{line}");
    // A big request shows in the query buffer while it is incomplete.
    let mut partial = encode_command(&[b"SET", b"k", &vec![b'q'; 100_000]]);
    partial.truncate(60_000);
    slow.send(&partial);
    let deadline = Instant::now() + CLOSE_WAIT;
    loop {
        let line = list_line(&mut admin, &id).expect("listed");
        if field(&line, "qbuf") >= 50_000 {
            break;
        }
        assert!(Instant::now() < deadline, "qbuf never grew: {line}");
        sleep(Duration::from_millis(50));
    }
}

#[test]
fn client_output_buffer_limit_through_config_get_and_set() {
    let srv = server_3();
    let mut c = srv.raw();
    let get = |c: &mut RawConn| {
        let r = c.cmd_str(&["CONFIG", "GET", "client-output-buffer-limit"]);
        String::from_utf8(r).expect("utf8")
    };
    let want = |v: &str| {
        format!(
            "*2\r\n$26\r\nclient-output-buffer-limit\r\n${}\r\n{v}\r\n",
            v.len()
        )
    };
    assert_eq!(
        get(&mut c),
        want("normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60")
    );
    set_limit(&mut c, "replica 1mb 1kb 5 normal 10mb 5mb 1");
    assert_eq!(
        get(&mut c),
        want("normal 10485760 5242880 1 slave 1048576 1024 5 pubsub 33554432 8388608 60")
    );
    assert_bytes(
        &c.cmd_str(&["CONFIG", "SET", "client-output-buffer-limit", "master 0 0 0"]),
        b"-ERR CONFIG SET failed (possibly related to argument 'client-output-buffer-limit') - Invalid client class specified in buffer limit configuration.\r\n",
    );
}

#[test]
fn client_output_buffer_limit_from_the_command_line() {
    let srv = Server::tessera(&["--client-output-buffer-limit", "pubsub 1mb 512kb 7"]);
    let mut c = srv.raw();
    let r = c.cmd_str(&["CONFIG", "GET", "client-output-buffer-limit"]);
    let v = "normal 0 0 0 slave 268435456 67108864 60 pubsub 1048576 524288 7";
    assert_bytes(
        &r,
        format!(
            "*2\r\n$26\r\nclient-output-buffer-limit\r\n${}\r\n{v}\r\n",
            v.len()
        )
        .as_bytes(),
    );
}

/// The request limits for clients that have not authenticated (Redis's
/// `processMultibulkBuffer`): at most 10 arguments of at most 16 KiB.
#[test]
fn unauthenticated_request_limits() {
    let srv = Server::tessera(&[]);
    let mut admin = srv.raw();
    assert_bytes(
        &admin.cmd_str(&["CONFIG", "SET", "requirepass", "pw"]),
        b"+OK\r\n",
    );
    let mut c = srv.raw();
    c.send(b"*11\r\n");
    assert_bytes(
        &c.read_reply(),
        b"-ERR Protocol error: unauthenticated multibulk length\r\n",
    );
    c.read_eof();
    let mut c = srv.raw();
    c.send(b"*2\r\n$4\r\nAUTH\r\n$16385\r\n");
    assert_bytes(
        &c.read_reply(),
        b"-ERR Protocol error: unauthenticated bulk length\r\n",
    );
    c.read_eof();
    // At the limits, the request is read (and refused for want of AUTH).
    let mut c = srv.raw();
    let big = vec![b'a'; 16384];
    let mut args: Vec<&[u8]> = vec![b"ECHO", &big];
    assert_bytes(&c.cmd(&args), b"-NOAUTH Authentication required.\r\n");
    args = vec![b"AUTH"; 10];
    args[1] = b"pw";
    let r = c.cmd(&args);
    assert!(r.starts_with(b"-"), "{}", escape(&r, 80));
    assert_bytes(&c.cmd_str(&["AUTH", "pw"]), b"+OK\r\n");
    // Authenticated: larger counts are fine.
    let args: Vec<&[u8]> = std::iter::once(&b"DEL"[..])
        .chain(std::iter::repeat_n(&b"k"[..], 100))
        .collect();
    assert_bytes(&c.cmd(&args), b":0\r\n");
}

per_layout!(
    hard_limit_closes_a_client_that_does_not_read,
    one_huge_reply_past_the_hard_limit_closes_the_client,
    random_picks_stop_at_the_hard_limit,
    a_reply_past_the_hard_limit_is_not_sent,
    client_list_and_info_show_real_buffer_figures,
    limits_count_whole_reply_blocks_as_redis,
);
