//! Wire-level tests: the request parser and reply path of the real binary,
//! byte for byte, over raw sockets (`common::RawConn`).
//!
//! Covers inline requests, pipelines (1000 commands; 10 MB of replies),
//! a pipeline split at every byte boundary, binary safety, every protocol
//! error Redis 7.0 reports (exact text, then the connection is closed), the
//! query-buffer limit, and that one client's protocol error never affects
//! another client.
//!
//! Every expectation here was checked against Redis 7.0.15:
//! `TESSERA_TEST_BIN=/usr/bin/redis-server cargo test --test protocol`.
//! Limits quoted below come from Redis's `networking.c` (7.0):
//! PROTO_INLINE_MAX_SIZE = 64 KiB (inline requests and the `*N` / `$N`
//! header lines), multibulk count <= INT_MAX, bulk length <=
//! proto-max-bulk-len (default 512 MiB), client-query-buffer-limit (default
//! 1 GiB, minimum 1 MiB).

mod common;

use common::{assert_bytes, encode_command, escape, RawConn, Server};
use std::time::{Duration, Instant};

/// How long a request that should get no reply (yet) is watched.
const SILENCE: Duration = Duration::from_millis(300);

fn server() -> Server {
    Server::tessera(&[])
}

/// Sends `request` on a fresh connection, expects exactly `error` and then
/// the server closing the connection.
#[track_caller]
fn assert_protocol_error(srv: &Server, request: &[u8], error: &[u8]) {
    let mut c = srv.raw();
    c.send(request);
    let reply = c.read_reply();
    assert!(
        reply == error,
        "request {}\n  want: {}\n   got: {}",
        escape(request, 80),
        escape(error, 200),
        escape(&reply, 200)
    );
    c.read_eof();
}

/// Sends `request`, expects no reply within [`SILENCE`] and the connection
/// still open (the server waits for the rest of the request).
#[track_caller]
fn assert_waits_for_more(c: &mut RawConn, request: &[u8]) {
    c.send(request);
    if let Some(bytes) = c.poll_bytes(SILENCE) {
        panic!(
            "request {} should wait for more input, got {}",
            escape(request, 80),
            escape(&bytes, 200)
        );
    }
    c.send(b"\r\n");
}

// ---------------------------------------------------------------- inline

#[test]
fn inline_commands() {
    let srv = server();
    let mut c = srv.raw();
    c.send(b"PING\r\n");
    assert_bytes(&c.read_reply(), b"+PONG\r\n");
    c.send(b"SET a b\r\n");
    assert_bytes(&c.read_reply(), b"+OK\r\n");
    c.send(b"GET a\r\n");
    assert_bytes(&c.read_reply(), b"$1\r\nb\r\n");
    // Lower case, extra spaces, and a bare \n line ending.
    c.send(b"  get   a  \n");
    assert_bytes(&c.read_reply(), b"$1\r\nb\r\n");
    // Quoted arguments follow sdssplitargs: escapes in double quotes,
    // \' in single quotes, quotes opening mid-word.
    c.send(b"SET \"a b\" 'c d'\r\n");
    assert_bytes(&c.read_reply(), b"+OK\r\n");
    c.send(b"GET \"a b\"\r\n");
    assert_bytes(&c.read_reply(), b"$3\r\nc d\r\n");
    c.send(b"ECHO \"a\\x41\\n\\r\\t\\\\\\\"\"\r\n");
    assert_bytes(&c.read_reply(), b"$7\r\naA\n\r\t\\\"\r\n");
    c.send(b"ECHO 'it\\'s'\r\n");
    assert_bytes(&c.read_reply(), b"$4\r\nit's\r\n");
    c.send(b"ECHO \"\"\r\n");
    assert_bytes(&c.read_reply(), b"$0\r\n\r\n");
    c.send(b"PI\"NG\"\r\n");
    assert_bytes(&c.read_reply(), b"+PONG\r\n");
    // Empty and blank lines are skipped without a reply.
    c.send(b"\r\n\r\n   \r\n\nPING\r\n");
    assert_bytes(&c.read_reply(), b"+PONG\r\n");
    c.assert_silent(Duration::from_millis(50));
    // A lone \r is not a line end but, like a tab, separates arguments.
    c.send(b"ECHO x\ry\r\n");
    assert_bytes(
        &c.read_reply(),
        b"-ERR wrong number of arguments for 'echo' command\r\n",
    );
    c.send(b"SET\tt\rv\r\nGET t\r\n");
    assert_bytes(&c.read_reply(), b"+OK\r\n");
    assert_bytes(&c.read_reply(), b"$1\r\nv\r\n");
    // Errors for inline requests are ordinary replies.
    c.send(b"foo bar \"baz\"\r\n");
    assert_bytes(
        &c.read_reply(),
        b"-ERR unknown command 'foo', with args beginning with: 'bar' 'baz' \r\n",
    );
    c.send(b"SET a\r\n");
    assert_bytes(
        &c.read_reply(),
        b"-ERR wrong number of arguments for 'set' command\r\n",
    );
    // Inline and multibulk mixed in one write.
    c.send(b"PING\r\n*1\r\n$4\r\nPING\r\nECHO z\r\n");
    assert_bytes(&c.read_reply(), b"+PONG\r\n");
    assert_bytes(&c.read_reply(), b"+PONG\r\n");
    assert_bytes(&c.read_reply(), b"$1\r\nz\r\n");
}

#[test]
fn inline_request_size_limit() {
    let srv = server();
    // Just below the limit: a 65000-byte inline argument is fine.
    let mut c = srv.raw();
    let mut req = b"ECHO ".to_vec();
    req.extend(std::iter::repeat_n(b'x', 65_000));
    req.extend_from_slice(b"\r\n");
    c.send(&req);
    let reply = c.read_reply();
    assert!(
        reply.starts_with(b"$65000\r\nxxx"),
        "{}",
        escape(&reply, 40)
    );
    // 64 KiB without a newline: still waiting for it.
    let mut c = srv.raw();
    c.send(&vec![b'x'; 65_536]);
    assert!(
        c.poll_bytes(SILENCE).is_none(),
        "64 KiB inline prefix must not be an error yet"
    );
    // One byte more: too big.
    c.send(b"x");
    assert_bytes(
        &c.read_reply(),
        b"-ERR Protocol error: too big inline request\r\n",
    );
    c.read_eof();
}

// ---------------------------------------------------------------- pipelines

#[test]
fn pipeline_of_1000_commands() {
    let srv = server();
    let mut c = srv.raw();
    let mut request = Vec::new();
    let mut expected = Vec::new();
    for i in 0..500 {
        let (key, value) = (format!("key:{i}"), format!("value:{i}"));
        if i % 2 == 0 {
            request.extend(encode_command(&[b"SET", key.as_bytes(), value.as_bytes()]));
        } else {
            request.extend(format!("SET {key} {value}\r\n").into_bytes());
        }
        expected.push(b"+OK\r\n".to_vec());
        request.extend(encode_command(&[b"GET", key.as_bytes()]));
        expected.push(format!("${}\r\n{value}\r\n", value.len()).into_bytes());
    }
    assert_eq!(expected.len(), 1000);
    c.send(&request);
    for (i, want) in expected.iter().enumerate() {
        let got = c.read_reply();
        assert!(
            &got == want,
            "reply {i}: want {} got {}",
            escape(want, 80),
            escape(&got, 80)
        );
    }
    c.assert_silent(Duration::from_millis(50));
}

#[test]
fn pipeline_with_10mb_of_replies() {
    // The client writes everything before reading anything: the server must
    // buffer (or pace) 10 MB of output without dropping or reordering.
    let srv = server();
    let mut c = srv.raw();
    let value: Vec<u8> = (0..10_240u32).map(|i| b'a' + (i % 26) as u8).collect();
    assert_bytes(&c.cmd(&[b"SET", b"big", &value]), b"+OK\r\n");
    let get = encode_command(&[b"GET", b"big"]);
    let mut request = Vec::with_capacity(get.len() * 1000 + 20);
    for _ in 0..1000 {
        request.extend_from_slice(&get);
    }
    request.extend(encode_command(&[b"ECHO", b"end"]));
    c.send(&request);
    let mut want = format!("${}\r\n", value.len()).into_bytes();
    want.extend_from_slice(&value);
    want.extend_from_slice(b"\r\n");
    for i in 0..1000 {
        let got = c.read_reply();
        assert!(got == want, "reply {i} differs: {}", escape(&got, 60));
    }
    assert_bytes(&c.read_reply(), b"$3\r\nend\r\n");
}

/// A pipeline mixing multibulk and inline requests, binary data, ignored
/// empty requests, and a split-sensitive `\r\n` inside a bulk. Returns the
/// bytes and the number of replies it produces. It leaves no state behind,
/// so it can be replayed on one connection.
fn mixed_pipeline() -> (Vec<u8>, usize) {
    let mut p = Vec::new();
    p.extend(encode_command(&[b"DEL", b"ctr", b"k\x00\r\nx", b"sp ace"]));
    p.extend_from_slice(b"PING\r\n");
    p.extend(encode_command(&[
        b"SET",
        b"k\x00\r\nx",
        b"\r\n\x00\xff$3\r\n",
    ]));
    p.extend(encode_command(&[b"GET", b"k\x00\r\nx"]));
    p.extend_from_slice(b"SET \"sp ace\" 'v\\'1'\r\n");
    p.extend_from_slice(b"GET \"sp ace\"\r\n");
    p.extend_from_slice(b"*0\r\n\r\n");
    p.extend(encode_command(&[b"INCR", b"ctr"]));
    p.extend(encode_command(&[b"INCRBY", b"ctr", b"-12345678901"]));
    p.extend_from_slice(b"ECHO \"\\x41\\r\\n\"\n");
    p.extend(encode_command(&[b"MGET", b"ctr", b"nosuch", b"sp ace"]));
    p.extend(encode_command(&[b"NOSUCH", b"a"]));
    p.extend(encode_command(&[b"DEL", b"ctr", b"k\x00\r\nx", b"sp ace"]));
    (p, 12)
}

#[test]
fn pipeline_split_at_every_byte_gives_identical_replies() {
    let srv = server();
    let (pipeline, replies) = mixed_pipeline();
    let mut c = srv.raw();

    // Reference: the whole pipeline in one write.
    c.send(&pipeline);
    let reference: Vec<Vec<u8>> = c.read_replies(replies);
    c.assert_silent(Duration::from_millis(50));
    assert_bytes(&reference[3], b"$8\r\n\r\n\x00\xff$3\r\n\r\n");

    // One byte per write (TCP_NODELAY; a short pause now and then so the
    // server really sees partial requests).
    for (i, byte) in pipeline.iter().enumerate() {
        c.send(std::slice::from_ref(byte));
        if i % 8 == 0 {
            std::thread::sleep(Duration::from_micros(300));
        }
    }
    for (i, want) in reference.iter().enumerate() {
        let got = c.read_reply();
        assert!(
            &got == want,
            "byte-by-byte reply {i}: want {} got {}",
            escape(want, 80),
            escape(&got, 80)
        );
    }

    // Two writes, split at every offset.
    let deadline = Instant::now() + Duration::from_secs(60);
    for split in 1..pipeline.len() {
        assert!(
            Instant::now() < deadline,
            "split loop ran over its time budget"
        );
        c.send(&pipeline[..split]);
        std::thread::sleep(Duration::from_millis(1));
        c.send(&pipeline[split..]);
        for (i, want) in reference.iter().enumerate() {
            let got = c.read_reply();
            assert!(
                &got == want,
                "split at {split} ({} | {}), reply {i}: want {} got {}",
                escape(&pipeline[split.saturating_sub(8)..split], 16),
                escape(&pipeline[split..(split + 8).min(pipeline.len())], 16),
                escape(want, 80),
                escape(&got, 80)
            );
        }
    }
    c.assert_silent(Duration::from_millis(50));
}

// ---------------------------------------------------------------- binary safety

#[test]
fn binary_safe_keys_and_values() {
    let srv = server();
    let mut c = srv.raw();
    let all_bytes: Vec<u8> = (0..=255u8).collect();
    let keys: [&[u8]; 5] = [b"\x00", b"a\x00b", b"\r\n", b"k\r\n$3\r\n", &all_bytes];
    for (i, key) in keys.iter().enumerate() {
        let mut value = all_bytes.clone();
        value.extend_from_slice(key);
        value.push(i as u8);
        assert_bytes(&c.cmd(&[b"SET", key, &value]), b"+OK\r\n");
        let mut want = format!("${}\r\n", value.len()).into_bytes();
        want.extend_from_slice(&value);
        want.extend_from_slice(b"\r\n");
        assert_bytes(&c.cmd(&[b"GET", key]), &want);
        assert_bytes(&c.cmd(&[b"EXISTS", key]), b":1\r\n");
    }
    assert_bytes(&c.cmd(&[b"EXISTS", b"a"]), b":0\r\n");
    assert_bytes(&c.cmd(&[b"SET", b"", b""]), b"+OK\r\n");
    assert_bytes(&c.cmd(&[b"GET", b""]), b"$0\r\n\r\n");
    assert_bytes(&c.cmd(&[b"STRLEN", b""]), b":0\r\n");

    // Values past 32 KiB take Redis's "big argument" path; check sizes
    // around it and a 4 MiB one, sent in small chunks.
    for len in [32 * 1024 - 1, 32 * 1024, 32 * 1024 + 1, 4 << 20] {
        let value: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let request = encode_command(&[b"SET", b"bigbin", &value]);
        for chunk in request.chunks(60_000) {
            c.send(chunk);
        }
        assert_bytes(&c.read_reply(), b"+OK\r\n");
        let reply = c.cmd(&[b"GET", b"bigbin"]);
        assert_eq!(
            common::reply_payload(&reply).as_deref(),
            Some(&value[..]),
            "len {len}"
        );
    }
}

#[test]
fn redis_crate_clients_work() {
    let srv = server();
    let mut con = srv.conn();
    let (): () = redis::cmd("SET")
        .arg("k")
        .arg(b"v\x00\r\n")
        .query(&mut con)
        .expect("SET");
    let v: Vec<u8> = redis::cmd("GET").arg("k").query(&mut con).expect("GET");
    assert_eq!(v, b"v\x00\r\n");
    let missing: Option<Vec<u8>> = redis::cmd("GET")
        .arg("nosuch")
        .query(&mut con)
        .expect("GET");
    assert_eq!(missing, None);

    let mut con3 = srv.conn_resp3();
    let v: redis::Value = redis::cmd("GET")
        .arg("nosuch")
        .query(&mut con3)
        .expect("GET");
    assert_eq!(v, redis::Value::Nil);
    // A RESP3 map (HGETALL's empty map arrives with the hash type).
    let v: redis::Value = redis::cmd("CONFIG")
        .arg("GET")
        .arg("hz")
        .query(&mut con3)
        .expect("CONFIG GET");
    assert_eq!(
        v,
        redis::Value::Map(vec![(
            redis::Value::BulkString(b"hz".to_vec()),
            redis::Value::BulkString(b"10".to_vec())
        )])
    );
}

// ---------------------------------------------------------------- protocol errors

/// Under CLIENT REPLY OFF or SKIP a protocol error is not sent either (as
/// Redis), and the connection still closes.
#[test]
fn protocol_errors_are_silent_when_replies_are_off() {
    let srv = server();
    for mode in [&b"OFF"[..], b"SKIP"] {
        let mut c = srv.raw();
        c.send(&encode_command(&[b"CLIENT", b"REPLY", mode]));
        c.send(b"*abc\r\n");
        c.read_eof();
        let mut c = srv.raw();
        c.send(&encode_command(&[b"CLIENT", b"REPLY", mode]));
        c.send(b"GET \"a\r\n");
        c.read_eof();
    }
}

#[test]
fn multibulk_protocol_errors_close_the_connection() {
    let srv = server();
    let invalid_mbulk = b"-ERR Protocol error: invalid multibulk length\r\n";
    let invalid_bulk = b"-ERR Protocol error: invalid bulk length\r\n";
    let cases: &[(&[u8], &[u8])] = &[
        (b"*abc\r\n", invalid_mbulk),
        (b"*\r\n", invalid_mbulk),
        (b"*+1\r\n", invalid_mbulk),
        (b"*01\r\n", invalid_mbulk),
        (b"*1 \r\n", invalid_mbulk),
        (b"*1.0\r\n", invalid_mbulk),
        // Above INT_MAX.
        (b"*2147483648\r\n", invalid_mbulk),
        (b"*99999999999999999999\r\n", invalid_mbulk),
        (b"*1\r\n$abc\r\n", invalid_bulk),
        (b"*1\r\n$\r\n", invalid_bulk),
        (b"*1\r\n$-1\r\n", invalid_bulk),
        (b"*1\r\n$+4\r\nPING\r\n", invalid_bulk),
        (b"*1\r\n$04\r\nPING\r\n", invalid_bulk),
        // proto-max-bulk-len (512 MiB) + 1.
        (b"*1\r\n$536870913\r\n", invalid_bulk),
        (
            b"*1\r\nfoo\r\n",
            b"-ERR Protocol error: expected '$', got 'f'\r\n",
        ),
        (
            b"*2\r\n$4\r\nECHO\r\n:1\r\n",
            b"-ERR Protocol error: expected '$', got ':'\r\n",
        ),
    ];
    for (request, error) in cases {
        assert_protocol_error(&srv, request, error);
    }
    // Header lines longer than 64 KiB without a newline.
    let mut long_count = b"*".to_vec();
    long_count.extend(std::iter::repeat_n(b'1', 70_000));
    assert_protocol_error(
        &srv,
        &long_count,
        b"-ERR Protocol error: too big mbulk count string\r\n",
    );
    let mut long_len = b"*1\r\n$".to_vec();
    long_len.extend(std::iter::repeat_n(b'1', 70_000));
    assert_protocol_error(
        &srv,
        &long_len,
        b"-ERR Protocol error: too big bulk count string\r\n",
    );
}

#[test]
fn inline_protocol_errors_close_the_connection() {
    let srv = server();
    let unbalanced = b"-ERR Protocol error: unbalanced quotes in request\r\n";
    for request in [
        &b"SET a \"b\r\n"[..],
        b"SET a 'b\r\n",
        b"SET a \"b\"c\r\n",
        b"SET a 'b'c\r\n",
        b"\"\r\n",
    ] {
        assert_protocol_error(&srv, request, unbalanced);
    }
}

#[test]
fn replies_before_a_protocol_error_are_delivered() {
    let srv = server();
    let mut c = srv.raw();
    c.send(b"PING\r\n*1\r\n$4\r\nPING\r\n*abc\r\nPING\r\n");
    assert_bytes(&c.read_reply(), b"+PONG\r\n");
    assert_bytes(&c.read_reply(), b"+PONG\r\n");
    assert_bytes(
        &c.read_reply(),
        b"-ERR Protocol error: invalid multibulk length\r\n",
    );
    c.read_eof();
}

#[test]
fn limits_that_are_not_errors() {
    let srv = server();
    let mut c = srv.raw();
    // Empty and negative multibulk counts are skipped silently.
    c.send(b"*0\r\n*-1\r\n*-5\r\nPING\r\n");
    assert_bytes(&c.read_reply(), b"+PONG\r\n");
    // An empty bulk as the command name is an unknown command.
    assert_bytes(
        &c.cmd(&[b""]),
        b"-ERR unknown command '', with args beginning with: \r\n",
    );
    // Counts up to INT_MAX and lengths up to proto-max-bulk-len are legal:
    // the server waits for the data (no old 1M-argument limit).
    let mut c = srv.raw();
    assert_waits_for_more(&mut c, b"*1048577");
    let mut c = srv.raw();
    assert_waits_for_more(&mut c, b"*2147483647");
    let mut c = srv.raw();
    assert_waits_for_more(&mut c, b"*1\r\n$536870912");
    // An incomplete request is simply waited for.
    let mut c = srv.raw();
    c.send(b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n");
    assert!(c.poll_bytes(SILENCE).is_none());
    c.send(b"$1\r\nb\r\n");
    assert_bytes(&c.read_reply(), b"+OK\r\n");
}

#[test]
fn proto_max_bulk_len_is_configurable() {
    let srv = server();
    let mut admin = srv.raw();
    assert_bytes(
        &admin.cmd_str(&["CONFIG", "SET", "proto-max-bulk-len", "1048576"]),
        b"+OK\r\n",
    );
    assert_protocol_error(
        &srv,
        b"*2\r\n$4\r\nECHO\r\n$1048577\r\n",
        b"-ERR Protocol error: invalid bulk length\r\n",
    );
    let mut c = srv.raw();
    let value = vec![b'v'; 1_048_576];
    let reply = c.cmd(&[b"ECHO", &value]);
    // "$1048576\r\n" + data + "\r\n"
    assert_eq!(reply.len(), 10 + 1_048_576 + 2);
}

#[test]
fn query_buffer_limit_closes_the_client() {
    let srv = server();
    let mut admin = srv.raw();
    assert_bytes(
        &admin.cmd_str(&["CONFIG", "SET", "client-query-buffer-limit", "1mb"]),
        b"+OK\r\n",
    );
    let mut c = srv.raw();
    // A 10 MB argument (legal: below proto-max-bulk-len) that never ends:
    // the query buffer passes 1 MB and the server drops the client without
    // a reply (Redis logs "closing client that reached max query buffer
    // length").
    c.send(b"*2\r\n$4\r\nECHO\r\n$10000000\r\n");
    let chunk = vec![b'x'; 64 * 1024];
    let mut sent = 0usize;
    for _ in 0..64 {
        match c.try_send(&chunk) {
            Ok(()) => sent += chunk.len(),
            Err(e) if common::is_reset(&e) => break,
            Err(e) => panic!("send after {sent} bytes: {e}"),
        }
    }
    c.wait_closed(Duration::from_secs(10)).unwrap_or_else(|e| {
        panic!("client above client-query-buffer-limit not closed after {sent} bytes: {e}")
    });
    assert!(
        c.buffered().is_empty(),
        "no reply expected: {}",
        escape(c.buffered(), 100)
    );
    // Others are still served.
    assert_bytes(&admin.cmd_str(&["PING"]), b"+PONG\r\n");
}

#[test]
fn other_clients_survive_a_protocol_error() {
    let srv = server();
    let mut before = srv.raw();
    assert_bytes(&before.cmd_str(&["SET", "k", "v"]), b"+OK\r\n");
    let mut bad = srv.raw();
    bad.send(b"*1\r\nfoo\r\n");
    assert_bytes(
        &bad.read_reply(),
        b"-ERR Protocol error: expected '$', got 'f'\r\n",
    );
    bad.read_eof();
    assert_bytes(&before.cmd_str(&["GET", "k"]), b"$1\r\nv\r\n");
    let mut after = srv.raw();
    assert_bytes(&after.cmd_str(&["GET", "k"]), b"$1\r\nv\r\n");
    // Many bad clients at once, then the good ones again.
    let mut bads: Vec<RawConn> = (0..20).map(|_| srv.raw()).collect();
    for b in &mut bads {
        b.send(b"*abc\r\n");
    }
    for b in &mut bads {
        assert_bytes(
            &b.read_reply(),
            b"-ERR Protocol error: invalid multibulk length\r\n",
        );
        b.read_eof();
    }
    assert_bytes(&before.cmd_str(&["PING"]), b"+PONG\r\n");
    assert_bytes(&after.cmd_str(&["PING"]), b"+PONG\r\n");
}

#[test]
fn quit_replies_ok_then_closes() {
    let srv = server();
    let mut c = srv.raw();
    c.send(b"QUIT\r\nPING\r\n");
    assert_bytes(&c.read_reply(), b"+OK\r\n");
    c.read_eof();
    let mut c = srv.raw();
    assert_bytes(&c.cmd_str(&["QUIT"]), b"+OK\r\n");
    c.read_eof();
}

#[test]
fn client_closing_mid_request_does_not_hurt_the_server() {
    let srv = server();
    for partial in [&b"*2\r\n$3\r\nGET"[..], b"SET a", b"*1\r\n$100000\r\nabc"] {
        let mut c = srv.raw();
        c.send(partial);
        c.shutdown_write();
        // The server sees EOF and closes its side too.
        c.read_eof();
    }
    let mut c = srv.raw();
    assert_bytes(&c.cmd_str(&["PING"]), b"+PONG\r\n");
}
