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
//! Connections are cached as Redis caches them: one per `host:port` (at
//! most 64), closed after 10 s idle (by the next MIGRATE or INFO, which
//! reports `migrate_cached_sockets`, where Redis's cron closes them);
//! SELECT is sent only when the db differs from the last one selected
//! without error; a socket error before any reply is retried once on a
//! fresh connection unless it was a timeout.
//!
//! Differences from Redis: the cache is the process's, but a connection in
//! use is taken out of it, so two MIGRATEs to one target from different
//! threads at once use two connections; a full cache evicts its least
//! recently used connection where Redis picks one at random.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use engine::lazyfree::Del;
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
/// `Err(None)`: the address does not resolve (a name unknown, an empty
/// host, a negative port), Redis's only "connecting" error;
/// `Err(Some(e))`: no address accepted the connection in time. Redis
/// connects without blocking and reports a refused or timed-out
/// connection when its first write fails, so that is "writing" here too.
fn connect(
    host: &[u8],
    port: &[u8],
    timeout: Duration,
) -> Result<TcpStream, Option<std::io::Error>> {
    let port = atoi(port);
    if port < 0 {
        return Err(None);
    }
    // getaddrinfo takes the port as text and keeps its low 16 bits.
    let port = port as u16;
    let host = std::str::from_utf8(host).map_err(|_| None)?;
    let addrs = (host, port).to_socket_addrs().map_err(|_| None)?;
    let mut last = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    // No address at all is a resolution failure.
    Err(last)
}

/// Reads one reply line without its CRLF (Redis's `connSyncReadLine`,
/// cut to its buffer); an error on timeout or end of stream.
fn read_line(r: &mut BufReader<TcpStream>) -> std::io::Result<Vec<u8>> {
    let mut line = Vec::new();
    // Bounded: a target that never sends a newline costs at most this
    // much memory before the line is refused.
    r.by_ref().take(64 * 1024).read_until(b'\n', &mut line)?;
    if line.last() != Some(&b'\n') {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    line.pop();
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    line.truncate(LINE_MAX);
    Ok(line)
}

/// A connection to a target, cached between MIGRATEs (Redis's
/// `migrateCachedSocket`): its reader, the db it last SELECTed
/// successfully, and when it was last used.
struct Link {
    r: BufReader<TcpStream>,
    db: Option<i64>,
    used: Instant,
}

/// Redis's `MIGRATE_SOCKET_CACHE_ITEMS` and `MIGRATE_SOCKET_CACHE_TTL`.
const CACHE_MAX: usize = 64;
const CACHE_TTL: Duration = Duration::from_secs(10);

/// Idle links by `host:port` as the client wrote them. Process-wide, as
/// Redis's: a MIGRATE runs on whichever thread holds its keys. A link is
/// taken out while in use, so two MIGRATEs to one target at once each
/// use their own connection. Never touched on the data path.
static CACHE: Mutex<Vec<(Vec<u8>, Link)>> = Mutex::new(Vec::new());

fn cache() -> std::sync::MutexGuard<'static, Vec<(Vec<u8>, Link)>> {
    // A poisoned cache holds only sockets: keep using it.
    CACHE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Closes the links idle for longer than [`CACHE_TTL`] (Redis's
/// `migrateCloseTimedoutSockets`, run by its cron; here by every MIGRATE
/// and INFO) and returns how many remain (`migrate_cached_sockets`).
pub fn cached_sockets() -> usize {
    let mut c = cache();
    c.retain(|(_, l)| l.used.elapsed() <= CACHE_TTL);
    c.len()
}

/// The cached link to `name`, taken out of the cache.
fn take_link(name: &[u8]) -> Option<Link> {
    cached_sockets();
    let mut c = cache();
    let i = c.iter().position(|(n, _)| n == name)?;
    Some(c.swap_remove(i).1)
}

/// Puts a link that worked back, evicting the least recently used one
/// when the cache is full (Redis evicts a random one).
fn keep_link(name: Vec<u8>, mut link: Link) {
    link.used = Instant::now();
    let mut c = cache();
    if c.iter().any(|(n, _)| *n == name) {
        return;
    }
    if c.len() >= CACHE_MAX {
        if let Some(i) = (0..c.len()).min_by_key(|&i| c[i].1.used) {
            c.swap_remove(i);
        }
    }
    c.push((name, link));
}

/// How an attempt failed: writing or reading, and whether by timeout
/// (Redis retries once on a fresh connection unless it timed out).
struct SocketErr {
    writing: bool,
    timed_out: bool,
}

impl SocketErr {
    fn of(writing: bool, e: Option<&std::io::Error>) -> Self {
        let timed_out = e.is_some_and(|e| {
            matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            )
        });
        SocketErr { writing, timed_out }
    }
}

/// MIGRATE (see the module docs for its replies).
fn migrate(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let o = parse(args)?;
    let timeout = Duration::from_millis(o.timeout_ms);
    let touch = ctx.touch();
    let compress = ctx.shard.rdb_compression;
    let now = ctx.shard.now_ms;
    // The RESTOREs of the keys that exist, with their remaining TTL (0:
    // none) and payload.
    let mut restores = Vec::new();
    let mut found: Vec<&[u8]> = Vec::new();
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
        write_count(&mut restores, if o.replace { 5 } else { 4 });
        write_bulk(&mut restores, b"RESTORE");
        write_bulk(&mut restores, key);
        write_bulk(&mut restores, itoa::Buffer::new().format(ttl).as_bytes());
        write_bulk(&mut restores, &payload);
        if o.replace {
            write_bulk(&mut restores, b"REPLACE");
        }
        found.push(key);
    }
    if found.is_empty() {
        ctx.out.simple("NOKEY");
        return Ok(());
    }
    let mut name = args.get(1).to_vec();
    name.push(b':');
    name.extend_from_slice(args.get(2));

    let mut may_retry = true;
    let fail = loop {
        let link = match take_link(&name) {
            Some(l) => Ok(l),
            None => match connect(args.get(1), args.get(2), timeout) {
                Ok(s) => Ok(Link {
                    r: BufReader::new(s),
                    db: None,
                    used: Instant::now(),
                }),
                Err(None) => {
                    return Err(CmdError::Raw(
                        "IOERR error or timeout connecting to the client".into(),
                    ))
                }
                Err(Some(e)) => Err(SocketErr::of(true, Some(&e))),
            },
        };
        let err = match link {
            Err(e) => e,
            Ok(mut link) => {
                let sock = link.r.get_ref();
                let _ = sock.set_read_timeout(Some(timeout));
                let _ = sock.set_write_timeout(Some(timeout));
                let select = link.db != Some(o.db);
                match exchange(ctx, &o, &found, &restores, &mut link, select) {
                    Ok(Sent::Done) => {
                        link.db = Some(o.db);
                        keep_link(name, link);
                        ctx.out.ok();
                        return Ok(());
                    }
                    Ok(Sent::TargetErr(e)) => {
                        // Whatever the target's db now, SELECT it next time.
                        link.db = None;
                        keep_link(name, link);
                        return Err(e);
                    }
                    // Replies came for some keys before the socket
                    // failed: too late to retry.
                    Ok(Sent::Broken) => break SocketErr::of(false, None),
                    Err(e) => e,
                }
            }
        };
        if err.timed_out || !may_retry {
            break err;
        }
        may_retry = false;
    };
    Err(io_err(if fail.writing { "writing" } else { "reading" }))
}

/// What an exchange with the target came to (a failure before any key's
/// reply is the `Err` of [`exchange`]).
enum Sent {
    Done,
    TargetErr(CmdError),
    /// The socket failed after some keys' replies.
    Broken,
}

/// Sends AUTH, SELECT (when `select`) and the RESTOREs, reads their
/// replies and deletes each key the target accepted (unless COPY),
/// propagating one DEL of them.
fn exchange(
    ctx: &mut ShardCtx<'_>,
    o: &Opts<'_>,
    found: &[&[u8]],
    restores: &[u8],
    link: &mut Link,
    select: bool,
) -> Result<Sent, SocketErr> {
    let mut req = Vec::new();
    if let Some(pass) = o.password {
        write_count(&mut req, if o.user.is_some() { 3 } else { 2 });
        write_bulk(&mut req, b"AUTH");
        if let Some(user) = o.user {
            write_bulk(&mut req, user);
        }
        write_bulk(&mut req, pass);
    }
    if select {
        write_count(&mut req, 2);
        write_bulk(&mut req, b"SELECT");
        write_bulk(&mut req, itoa::Buffer::new().format(o.db).as_bytes());
    }
    let sock = link.r.get_mut();
    sock.write_all(&req)
        .and_then(|()| sock.write_all(restores))
        .map_err(|e| SocketErr::of(true, Some(&e)))?;
    let read_err = |e: std::io::Error| SocketErr::of(false, Some(&e));
    let auth_reply = match o.password {
        Some(_) => Some(read_line(&mut link.r).map_err(read_err)?),
        None => None,
    };
    let select_reply = match select {
        true => Some(read_line(&mut link.r).map_err(read_err)?),
        false => None,
    };

    let mut target_err: Option<Vec<u8>> = None;
    let mut broken = false;
    let mut deleted: Vec<&[u8]> = Vec::new();
    for (j, &key) in found.iter().enumerate() {
        let line = match read_line(&mut link.r) {
            Ok(l) => l,
            // No reply at all: the caller may retry (nothing changed).
            Err(e) if j == 0 => return Err(read_err(e)),
            Err(_) => {
                broken = true;
                break;
            }
        };
        let failed = [
            auth_reply.as_deref(),
            select_reply.as_deref(),
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
                if ctx.shard.delete(ctx.db, key, Del::Server) {
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
        return Ok(Sent::TargetErr(CmdError::Bytes(line)));
    }
    Ok(if broken { Sent::Broken } else { Sent::Done })
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

    /// Closes the cached link to 127.0.0.1:`port` (the fake target reads
    /// to its end).
    fn drop_link(port: &str) {
        assert!(take_link(format!("127.0.0.1:{port}").as_bytes()).is_some());
    }

    #[test]
    fn idle_links_are_closed_after_the_ttl() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let new_link = || Link {
            r: BufReader::new(TcpStream::connect(l.local_addr().expect("addr")).expect("connect")),
            db: Some(0),
            used: Instant::now(),
        };
        let name = |n: &str| format!("test-ttl-{n}").into_bytes();
        keep_link(name("fresh"), new_link());
        let mut old = new_link();
        old.used = Instant::now() - CACHE_TTL - Duration::from_secs(1);
        cache().push((name("old"), old));
        cached_sockets();
        assert!(take_link(&name("old")).is_none());
        assert!(take_link(&name("fresh")).is_some());
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
            drop_link(&port);
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
        drop_link(&port);
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
