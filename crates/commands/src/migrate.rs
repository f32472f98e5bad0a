//! MIGRATE (Redis's `cluster.c` `migrateCommand`): moves keys to another
//! server by sending it `RESTORE key ttl payload [REPLACE]` for each, with
//! the DUMP payload DUMP/RESTORE use (`engine::rdb`), then deletes the
//! keys here unless COPY. Request path, but a slow one by nature.
//!
//! `MIGRATE host port key|"" db timeout [COPY] [REPLACE]
//! [AUTH pass | AUTH2 user pass] [KEYS key ...]`
//!
//! The one command of this crate that opens a socket. Redis blocks the
//! whole server while it talks to the target (a blocking connect, write
//! and read, each bounded by `timeout` ms); here the thread that runs the
//! command blocks the same way: the keys' shard, or, when the KEYS span
//! shards, the home thread running the handler on copies of them
//! (`scratch`), whose transaction holds the keys until the reply. Moving
//! the I/O into the runtime would need a resumable command for one rarely
//! used admin command; the blocking is bounded by the client's timeout.
//!
//! Replies, in Redis 7.0's order: option syntax errors, the KEYS/key
//! conflict, then timeout and db as integers (before any lookup); `+NOKEY`
//! when no key exists; `-IOERR error or timeout connecting to the client`
//! when the address does not resolve; `-IOERR error or timeout writing to
//! target instance` when the connection is refused, times out or the
//! request cannot be sent (Redis finds a failed non-blocking connect at
//! its first write); `... reading to target instance` when a reply does
//! not come in time; the
//! target's first error line as `ERR Target instance replied with error:
//! ...` (keys the target accepted are still deleted); else `+OK`.
//!
//! Propagated as `DEL` of the keys the target acknowledged (none under
//! COPY), as Redis rewrites the command.
//!
//! Differences from Redis: no cache of target connections (Redis keeps
//! each for 10 s and skips SELECT when the db is unchanged), so a failed
//! write or read is not retried on a fresh connection (Redis retries once,
//! for a cached socket the target closed); `migrate_cached_sockets` stays
//! 0. The target always sees AUTH (if given), SELECT, then the RESTOREs.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use engine::rdb;
use resp::Args;

use crate::ctx::ShardCtx;
use crate::error::CmdError;
use crate::table::{flags::*, keys, CommandSpec, Exec};
use crate::util::{eq_ic, parse_i64};

pub(crate) const COMMANDS: &[CommandSpec] = &[CommandSpec::new(
    "migrate",
    -6,
    WRITE | MOVABLE_KEYS,
    keys(3, 3, 1),
    Exec::Shard(migrate, None),
    &["keyspace", "write", "slow", "dangerous"],
)
.with_getkeys(migrate_keys)];

/// Redis's reply-line buffer (`char buf[1024]`): longer lines are cut.
const LINE_MAX: usize = 1023;

/// Redis's `migrateGetKeys`: the `key` argument, or every argument after
/// KEYS (option arguments of AUTH/AUTH2 skipped when looking for it);
/// none when KEYS comes with a non-empty `key` (the handler's error).
fn migrate_keys(args: Args<'_>) -> Vec<usize> {
    let n = args.len();
    let mut i = 6;
    while i < n {
        let a = args.get(i);
        if eq_ic(a, "keys") {
            if !args.get(3).is_empty() {
                return Vec::new();
            }
            return (i + 1..n).collect();
        }
        if eq_ic(a, "auth") {
            i += 1;
        } else if eq_ic(a, "auth2") {
            i += 2;
        }
        i += 1;
    }
    vec![3]
}

/// MIGRATE's options.
#[derive(Debug, PartialEq)]
struct Opts<'a> {
    copy: bool,
    replace: bool,
    user: Option<&'a [u8]>,
    password: Option<&'a [u8]>,
    /// Index of the first key argument and how many there are.
    first_key: usize,
    num_keys: usize,
    db: i64,
    timeout_ms: u64,
}

fn parse(args: Args<'_>) -> Result<Opts<'_>, CmdError> {
    let mut o = Opts {
        copy: false,
        replace: false,
        user: None,
        password: None,
        first_key: 3,
        num_keys: 1,
        db: 0,
        timeout_ms: 0,
    };
    let n = args.len();
    let mut j = 6;
    while j < n {
        let a = args.get(j);
        let more = n - 1 - j;
        if eq_ic(a, "copy") {
            o.copy = true;
        } else if eq_ic(a, "replace") {
            o.replace = true;
        } else if eq_ic(a, "auth") {
            if more < 1 {
                return Err(CmdError::Syntax);
            }
            j += 1;
            o.password = Some(args.get(j));
        } else if eq_ic(a, "auth2") {
            if more < 2 {
                return Err(CmdError::Syntax);
            }
            o.user = Some(args.get(j + 1));
            o.password = Some(args.get(j + 2));
            j += 2;
        } else if eq_ic(a, "keys") {
            if !args.get(3).is_empty() {
                return Err(CmdError::err(
                    "When using MIGRATE KEYS option, the key argument must be set to the empty string",
                ));
            }
            o.first_key = j + 1;
            o.num_keys = n - j - 1;
            break;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let timeout = parse_i64(args.get(5))?;
    o.db = parse_i64(args.get(4))?;
    o.timeout_ms = if timeout <= 0 { 1000 } else { timeout as u64 };
    Ok(o)
}

/// C's `atoi` on the port argument: leading blanks, a sign, digits up to
/// the first non-digit ("12ab" is 12, "ab" is 0).
fn atoi(s: &[u8]) -> i64 {
    let mut it = s.iter().skip_while(|c| c.is_ascii_whitespace()).peekable();
    let neg = match it.peek() {
        Some(b'-') => {
            it.next();
            true
        }
        Some(b'+') => {
            it.next();
            false
        }
        _ => false,
    };
    let mut v: i64 = 0;
    for c in it.take_while(|c| c.is_ascii_digit()) {
        v = v.saturating_mul(10).saturating_add((c - b'0') as i64);
    }
    if neg {
        -v
    } else {
        v
    }
}

fn write_bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(itoa::Buffer::new().format(b.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

fn write_count(out: &mut Vec<u8>, n: usize) {
    out.push(b'*');
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn io_err(what: &str) -> CmdError {
    CmdError::Raw(format!("IOERR error or timeout {what} to target instance"))
}

/// A blocking connection to `host:port` within `timeout` (Redis's
/// `connBlockingConnect`), with that timeout on every read and write.
/// `Err(true)`: the address does not resolve (a name unknown, an empty
/// host, a negative port), Redis's only "connecting" error; `Err(false)`:
/// no address accepted the connection in time. Redis connects without
/// blocking and reports a refused or timed-out connection when its first
/// write fails, so that is "writing" here too.
fn connect(host: &[u8], port: &[u8], timeout: Duration) -> Result<TcpStream, bool> {
    let port = atoi(port);
    if port < 0 {
        return Err(true);
    }
    // getaddrinfo takes the port as text and keeps its low 16 bits.
    let port = port as u16;
    let host = std::str::from_utf8(host).map_err(|_| true)?;
    let addrs: Vec<_> = (host, port).to_socket_addrs().map_err(|_| true)?.collect();
    if addrs.is_empty() {
        return Err(true);
    }
    for a in addrs {
        if let Ok(s) = TcpStream::connect_timeout(&a, timeout) {
            s.set_read_timeout(Some(timeout)).map_err(|_| false)?;
            s.set_write_timeout(Some(timeout)).map_err(|_| false)?;
            let _ = s.set_nodelay(true);
            return Ok(s);
        }
    }
    Err(false)
}

/// Reads one reply line without its CRLF (Redis's `connSyncReadLine`,
/// cut to its buffer); `None` on error, timeout or end of stream.
fn read_line(r: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut line = Vec::new();
    // Bounded: a target that never sends a newline costs at most this
    // much memory before the line is refused.
    let n = r
        .by_ref()
        .take(64 * 1024)
        .read_until(b'\n', &mut line)
        .ok()?;
    if n == 0 || line.last() != Some(&b'\n') {
        return None;
    }
    line.pop();
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    line.truncate(LINE_MAX);
    Some(line)
}

/// MIGRATE (see the module docs for its replies).
fn migrate(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let o = parse(args)?;
    let timeout = Duration::from_millis(o.timeout_ms);
    let touch = ctx.touch();
    let compress = ctx.shard.rdb_compression;
    let now = ctx.shard.now_ms;
    // Each existing key with its remaining TTL (0: none) and payload.
    let mut found: Vec<(&[u8], i64, Vec<u8>)> = Vec::new();
    for key in args.iter().skip(o.first_key).take(o.num_keys) {
        let Some(e) = ctx.shard.lookup_read(ctx.db, key, touch) else {
            continue;
        };
        let payload = rdb::dump_payload_with(e.value(), compress);
        let at = ctx.shard.dbs[ctx.db].expire_of(key);
        let ttl = if at == 0 {
            0
        } else {
            (at as i64).saturating_sub(now as i64).max(1)
        };
        found.push((key, ttl, payload));
    }
    if found.is_empty() {
        ctx.out.simple("NOKEY");
        return Ok(());
    }

    let mut req = Vec::new();
    if let Some(pass) = o.password {
        write_count(&mut req, if o.user.is_some() { 3 } else { 2 });
        write_bulk(&mut req, b"AUTH");
        if let Some(user) = o.user {
            write_bulk(&mut req, user);
        }
        write_bulk(&mut req, pass);
    }
    write_count(&mut req, 2);
    write_bulk(&mut req, b"SELECT");
    write_bulk(&mut req, itoa::Buffer::new().format(o.db).as_bytes());
    for (key, ttl, payload) in &found {
        write_count(&mut req, if o.replace { 5 } else { 4 });
        write_bulk(&mut req, b"RESTORE");
        write_bulk(&mut req, key);
        write_bulk(&mut req, itoa::Buffer::new().format(*ttl).as_bytes());
        write_bulk(&mut req, payload);
        if o.replace {
            write_bulk(&mut req, b"REPLACE");
        }
    }

    let mut sock = match connect(args.get(1), args.get(2), timeout) {
        Ok(s) => s,
        Err(true) => {
            return Err(CmdError::Raw(
                "IOERR error or timeout connecting to the client".into(),
            ))
        }
        Err(false) => return Err(io_err("writing")),
    };
    if sock.write_all(&req).is_err() {
        return Err(io_err("writing"));
    }
    drop(req);
    let mut r = BufReader::new(sock);
    let auth_reply = match o.password {
        Some(_) => Some(read_line(&mut r).ok_or_else(|| io_err("reading"))?),
        None => None,
    };
    let select_reply = read_line(&mut r).ok_or_else(|| io_err("reading"))?;

    let mut target_err: Option<Vec<u8>> = None;
    let mut socket_err = false;
    let mut deleted: Vec<&[u8]> = Vec::new();
    for (key, _, _) in &found {
        let Some(line) = read_line(&mut r) else {
            socket_err = true;
            break;
        };
        let failed = [
            auth_reply.as_deref(),
            Some(&select_reply[..]),
            Some(&line[..]),
        ]
        .into_iter()
        .flatten()
        .find(|l| l.first() == Some(&b'-'));
        match failed {
            // Only the first error is reported.
            Some(e) => {
                target_err.get_or_insert_with(|| e[1..].to_vec());
            }
            None if !o.copy => {
                if ctx.shard.delete(ctx.db, key) {
                    ctx.notify(ds::events::GENERIC, "del", key);
                }
                deleted.push(key);
            }
            None => {}
        }
    }
    if !deleted.is_empty() {
        ctx.propagate_with(deleted.len() + 1, |out| {
            engine::outbox::write_bulk(out, b"DEL");
            for k in &deleted {
                engine::outbox::write_bulk(out, k);
            }
        });
    }
    if let Some(e) = target_err {
        let mut line = b"ERR Target instance replied with error: ".to_vec();
        line.extend(
            e.iter()
                .map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c }),
        );
        return Err(CmdError::Bytes(line));
    }
    if socket_err {
        return Err(io_err("reading"));
    }
    ctx.out.ok();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use resp::OwnedArgs;

    fn keys_of(argv: &[&[u8]]) -> Vec<usize> {
        migrate_keys(OwnedArgs::from_slices(argv).args())
    }

    #[test]
    fn key_positions_follow_redis_migrate_get_keys() {
        assert_eq!(keys_of(&[b"MIGRATE", b"h", b"1", b"k", b"0", b"5"]), [3]);
        assert_eq!(
            keys_of(&[b"MIGRATE", b"h", b"1", b"", b"0", b"5", b"KEYS", b"a", b"b"]),
            [7, 8]
        );
        // KEYS after AUTH is AUTH's password, not the option.
        assert_eq!(
            keys_of(&[b"MIGRATE", b"h", b"1", b"", b"0", b"5", b"AUTH", b"KEYS", b"x"]),
            [3]
        );
        assert_eq!(
            keys_of(&[b"MIGRATE", b"h", b"1", b"k", b"0", b"5", b"COPY", b"KEYS", b"a"]),
            Vec::<usize>::new()
        );
    }

    #[test]
    fn atoi_reads_like_c() {
        assert_eq!(atoi(b"6379"), 6379);
        assert_eq!(atoi(b" 12ab"), 12);
        assert_eq!(atoi(b"ab"), 0);
        assert_eq!(atoi(b"-5"), -5);
    }

    #[test]
    fn options_and_their_errors() {
        let p = |argv: &[&[u8]]| {
            let a = OwnedArgs::from_slices(argv);
            parse(a.args())
                .map(|o| {
                    (
                        o.copy,
                        o.replace,
                        o.first_key,
                        o.num_keys,
                        o.db,
                        o.timeout_ms,
                    )
                })
                .map_err(|e| String::from_utf8_lossy(&e.line()).into_owned())
        };
        assert_eq!(
            p(
                &[
                    b"MIGRATE", b"h", b"1", b"", b"3", b"0", b"copy", b"REPLACE", b"KEYS", b"a",
                    b"b"
                ]
            ),
            Ok((true, true, 9, 2, 3, 1000))
        );
        assert_eq!(
            p(&[b"MIGRATE", b"h", b"1", b"k", b"0", b"5", b"AUTH"]),
            Err("ERR syntax error".into())
        );
        assert_eq!(
            p(&[b"MIGRATE", b"h", b"1", b"k", b"0", b"5", b"AUTH2", b"u"]),
            Err("ERR syntax error".into())
        );
        assert_eq!(
            p(&[b"MIGRATE", b"h", b"1", b"k", b"0", b"5", b"KEYS", b"a"]),
            Err("ERR When using MIGRATE KEYS option, the key argument must be set to the empty string".into())
        );
        // The timeout is parsed before the db.
        assert_eq!(
            p(&[b"MIGRATE", b"h", b"1", b"k", b"x", b"y"]),
            Err("ERR value is not an integer or out of range".into())
        );
    }

    /// A target on a loopback port that answers each request line of
    /// `replies` at once (before reading: the command writes its whole
    /// request first), then hands back everything it was sent.
    fn fake_target(replies: &'static str) -> (u16, std::thread::JoinHandle<Vec<u8>>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().expect("accept");
            s.set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            s.write_all(replies.as_bytes()).expect("reply");
            let mut got = Vec::new();
            let _ = s.read_to_end(&mut got);
            got
        });
        (port, t)
    }

    #[test]
    fn acknowledged_keys_are_deleted_and_propagated_as_del() {
        for nshards in [1, 3] {
            let mut t = crate::testutil::TestServer::new(nshards);
            t.recording(true);
            t.run(&["SET", "a", "1", "PX", "100000"]);
            t.run(&["SET", "b", "2"]);
            t.run(&["SET", "c", "3"]);
            t.take_records();
            // SELECT, then a's RESTORE accepted, b's refused, c's accepted.
            let (port, target) =
                fake_target("+OK\r\n+OK\r\n-BUSYKEY Target key name already exists.\r\n+OK\r\n");
            let port = port.to_string();
            let argv = [
                "MIGRATE",
                "127.0.0.1",
                &port,
                "",
                "5",
                "5000",
                "KEYS",
                "a",
                "nokey",
                "b",
                "c",
            ];
            assert_eq!(
                t.run(&argv),
                "-ERR Target instance replied with error: BUSYKEY Target key name already exists.\r\n"
            );
            let sent = String::from_utf8_lossy(&target.join().expect("target")).into_owned();
            assert!(
                sent.starts_with(
                    "*2\r\n$6\r\nSELECT\r\n$1\r\n5\r\n*4\r\n$7\r\nRESTORE\r\n$1\r\na\r\n"
                ),
                "{sent:?}"
            );
            // a's remaining TTL, at most its 100 s.
            let ttl: Vec<&str> = sent.split("\r\n").skip(10).take(2).collect();
            let ms: u64 = ttl[1].parse().expect("ttl");
            assert!(ms > 0 && ms <= 100_000, "{ttl:?}");
            assert_eq!(sent.matches("RESTORE").count(), 3);
            assert!(!sent.contains("nokey"));
            assert_eq!(t.take_records(), [["DEL", "a", "c"]]);
            assert_eq!(t.run(&["EXISTS", "a", "b", "c"]), ":1\r\n");
            assert_eq!(t.run(&["GET", "b"]), "$1\r\n2\r\n");
        }
    }

    #[test]
    fn copy_deletes_and_propagates_nothing() {
        let mut t = crate::testutil::TestServer::new(1);
        t.recording(true);
        t.run(&["SET", "a", "1"]);
        t.take_records();
        let (port, target) = fake_target("+OK\r\n+OK\r\n+OK\r\n");
        let port = port.to_string();
        assert_eq!(
            t.run(&[
                "MIGRATE",
                "127.0.0.1",
                &port,
                "a",
                "0",
                "5000",
                "COPY",
                "REPLACE",
                "AUTH2",
                "u",
                "p"
            ]),
            "+OK\r\n"
        );
        let sent = String::from_utf8_lossy(&target.join().expect("target")).into_owned();
        assert!(
            sent.starts_with("*3\r\n$4\r\nAUTH\r\n$1\r\nu\r\n$1\r\np\r\n*2\r\n$6\r\nSELECT\r\n"),
            "{sent:?}"
        );
        assert!(sent.ends_with("$7\r\nREPLACE\r\n"), "{sent:?}");
        assert!(t.take_records().is_empty());
        assert_eq!(t.run(&["EXISTS", "a"]), ":1\r\n");
    }
}
