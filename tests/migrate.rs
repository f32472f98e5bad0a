//! MIGRATE through the real binary: keys of every type, with and without
//! a TTL, moved from Tessera to a real `redis-server` and to another
//! Tessera (KEYS across shards, so the scratch layer runs it), COPY,
//! REPLACE, a destination db, AUTH/AUTH2, NOKEY, a target that refuses
//! (BUSYKEY, WRONGPASS), a closed port, and the cache of connections;
//! every reply compared byte for byte with what Redis 7.0 sends.
//!
//! Validate against Redis (source and target both Redis):
//! `TESSERA_TEST_BIN=/usr/bin/redis-server cargo test --test migrate`.

mod common;

use common::{redis_available, testing_real_redis, DeadPort, Layout, RawConn, Server};

/// A target server: a real Redis when there is one, else Tessera.
fn targets(extra: &[&str]) -> Vec<Server> {
    let shards: &[&str] = if testing_real_redis() {
        &[]
    } else {
        &["--shards", "3"]
    };
    let mut v = vec![Server::tessera(&[shards, extra].concat())];
    if redis_available() {
        v.push(Server::redis(extra));
    }
    v
}

fn cmd(c: &mut RawConn, args: &[&str]) -> Vec<u8> {
    c.cmd_str(args)
}

fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Fills `keys[0..6]` with one value of each type; the string and the
/// hash expire in 100 s.
fn fill(c: &mut RawConn, keys: &[String]) {
    let k = |i: usize| keys[i].as_str();
    assert_eq!(cmd(c, &["SET", k(0), "hello", "EX", "100"]), b"+OK\r\n");
    assert_eq!(cmd(c, &["RPUSH", k(1), "a", "b", "c"]), b":3\r\n");
    assert_eq!(cmd(c, &["HSET", k(2), "f", "v", "g", "w"]), b":2\r\n");
    assert_eq!(cmd(c, &["EXPIRE", k(2), "100"]), b":1\r\n");
    assert_eq!(cmd(c, &["SADD", k(3), "x", "y"]), b":2\r\n");
    assert_eq!(cmd(c, &["ZADD", k(4), "1", "m", "2.5", "n"]), b":2\r\n");
    assert_eq!(cmd(c, &["XADD", k(5), "1-1", "f", "v"]), b"$3\r\n1-1\r\n");
}

/// Checks the six values of [`fill`] on `c`.
fn check(c: &mut RawConn, keys: &[String]) {
    let k = |i: usize| keys[i].as_str();
    assert_eq!(cmd(c, &["GET", k(0)]), b"$5\r\nhello\r\n");
    assert_eq!(
        cmd(c, &["LRANGE", k(1), "0", "-1"]),
        b"*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"
    );
    assert_eq!(cmd(c, &["HGET", k(2), "g"]), b"$1\r\nw\r\n");
    assert_eq!(cmd(c, &["SISMEMBER", k(3), "y"]), b":1\r\n");
    assert_eq!(cmd(c, &["ZSCORE", k(4), "n"]), b"$3\r\n2.5\r\n");
    assert_eq!(
        cmd(c, &["XRANGE", k(5), "-", "+"]),
        b"*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
    );
    for i in [0, 2] {
        let ttl = s(&cmd(c, &["TTL", k(i)]));
        assert!(
            [":99\r\n", ":100\r\n"].contains(&ttl.as_str()),
            "{} ttl {ttl}",
            k(i)
        );
    }
    for i in [1, 3, 4, 5] {
        assert_eq!(cmd(c, &["TTL", k(i)]), b":-1\r\n");
    }
}

fn migrate_keys(layout: Layout) {
    let src = layout.tessera(&[]);
    let mut c = src.raw();
    for dst in targets(&[]) {
        let port = dst.port().to_string();
        let mut d = dst.raw();
        let keys = common::keys_across_shards("mk", 6, layout.shards);
        fill(&mut c, &keys);
        let mut argv = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        argv.extend(keys.iter().map(String::as_str));
        // A missing key among them is skipped.
        argv.push("missing");
        assert_eq!(cmd(&mut c, &argv), b"+OK\r\n", "to {:?}", dst.flavor());
        check(&mut d, &keys);
        for k in &keys {
            assert_eq!(cmd(&mut c, &["EXISTS", k]), b":0\r\n");
        }

        // Nothing left to move.
        assert_eq!(cmd(&mut c, &argv), b"+NOKEY\r\n");

        // COPY keeps the source; without REPLACE the target refuses keys
        // it has, and the first error comes back; nothing is deleted.
        fill(&mut c, &keys);
        let mut copy = argv.clone();
        copy.insert(6, "COPY");
        assert_eq!(
            cmd(&mut c, &copy),
            b"-ERR Target instance replied with error: BUSYKEY Target key name already exists.\r\n"
        );
        assert_eq!(cmd(&mut c, &["EXISTS", &keys[0]]), b":1\r\n");
        assert_eq!(
            cmd(&mut c, &["SET", &keys[0], "new", "EX", "100"]),
            b"+OK\r\n"
        );
        copy.insert(7, "REPLACE");
        assert_eq!(cmd(&mut c, &copy), b"+OK\r\n");
        assert_eq!(cmd(&mut d, &["GET", &keys[0]]), b"$3\r\nnew\r\n");
        assert_eq!(cmd(&mut c, &["GET", &keys[0]]), b"$3\r\nnew\r\n");

        // The single-key form, into another database.
        assert_eq!(
            cmd(
                &mut c,
                &["MIGRATE", "127.0.0.1", &port, &keys[1], "3", "5000"]
            ),
            b"+OK\r\n"
        );
        assert_eq!(cmd(&mut c, &["EXISTS", &keys[1]]), b":0\r\n");
        assert_eq!(cmd(&mut d, &["SELECT", "3"]), b"+OK\r\n");
        assert_eq!(cmd(&mut d, &["LLEN", &keys[1]]), b":3\r\n");
        assert_eq!(cmd(&mut d, &["FLUSHALL"]), b"+OK\r\n");
        assert_eq!(cmd(&mut c, &["FLUSHALL"]), b"+OK\r\n");
    }
}

/// A key of the target accepted, one refused: the accepted one is moved
/// (deleted here), the refused one stays, and the reply is the error.
fn partial_failure(layout: Layout) {
    let src = layout.tessera(&[]);
    let mut c = src.raw();
    for dst in targets(&[]) {
        let port = dst.port().to_string();
        let mut d = dst.raw();
        let keys = common::keys_across_shards("pf", 2, layout.shards);
        let (a, b) = (keys[0].as_str(), keys[1].as_str());
        cmd(&mut c, &["SET", a, "1"]);
        cmd(&mut c, &["SET", b, "2"]);
        cmd(&mut d, &["SET", b, "old"]);
        assert_eq!(
            cmd(
                &mut c,
                &["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS", a, b]
            ),
            b"-ERR Target instance replied with error: BUSYKEY Target key name already exists.\r\n"
        );
        assert_eq!(cmd(&mut c, &["EXISTS", a, b]), b":1\r\n");
        assert_eq!(cmd(&mut c, &["GET", b]), b"$1\r\n2\r\n");
        assert_eq!(cmd(&mut d, &["GET", a]), b"$1\r\n1\r\n");
        assert_eq!(cmd(&mut d, &["GET", b]), b"$3\r\nold\r\n");
        cmd(&mut c, &["FLUSHALL"]);
    }
}

per_layout!(migrate_keys, partial_failure);

#[test]
fn auth_and_auth2() {
    let src = Server::tessera(&[]);
    let mut c = src.raw();
    for dst in targets(&[]) {
        let port = dst.port().to_string();
        assert_eq!(
            cmd(&mut dst.raw(), &["CONFIG", "SET", "requirepass", "pw"]),
            b"+OK\r\n"
        );
        cmd(&mut c, &["SET", "k", "v"]);
        let base = ["MIGRATE", "127.0.0.1", &port, "k", "0", "5000"];
        // No password: the target's SELECT error is the one reported.
        assert_eq!(
            cmd(&mut c, &base),
            b"-ERR Target instance replied with error: NOAUTH Authentication required.\r\n"
        );
        assert_eq!(
            cmd(&mut c, &[&base[..], &["COPY", "AUTH", "nope"]].concat()),
            b"-ERR Target instance replied with error: WRONGPASS invalid username-password pair or user is disabled.\r\n"
        );
        assert_eq!(
            cmd(&mut c, &[&base[..], &["COPY", "AUTH", "pw"]].concat()),
            b"+OK\r\n"
        );
        assert_eq!(
            cmd(
                &mut c,
                &[&base[..], &["REPLACE", "AUTH2", "default", "pw"]].concat()
            ),
            b"+OK\r\n"
        );
        assert_eq!(cmd(&mut c, &["EXISTS", "k"]), b":0\r\n");
        let mut d = dst.raw();
        assert_eq!(cmd(&mut d, &["AUTH", "pw"]), b"+OK\r\n");
        assert_eq!(cmd(&mut d, &["GET", "k"]), b"$1\r\nv\r\n");
    }
}

#[test]
fn errors() {
    let src = Layout::new(2, false).tessera(&[]);
    let mut c = src.raw();
    cmd(&mut c, &["SET", "k", "v"]);
    // A port nobody listens on (held, see `DeadPort`): Redis connects
    // without blocking, so the refusal shows at its first write.
    let dead = DeadPort::new();
    let closed = dead.port.to_string();
    let writing = b"-IOERR error or timeout writing to target instance\r\n";
    assert_eq!(
        cmd(&mut c, &["MIGRATE", "127.0.0.1", &closed, "k", "0", "1000"]),
        writing
    );
    // The port is read by atoi: "notaport" is port 0, refused too.
    assert_eq!(
        cmd(
            &mut c,
            &["MIGRATE", "127.0.0.1", "notaport", "k", "0", "1000"]
        ),
        writing
    );
    // An address that does not resolve is the "connecting" error.
    let connecting = b"-IOERR error or timeout connecting to the client\r\n";
    assert_eq!(
        cmd(&mut c, &["MIGRATE", "", &closed, "k", "0", "1000"]),
        connecting
    );
    assert_eq!(
        cmd(&mut c, &["MIGRATE", "127.0.0.1", "-1", "k", "0", "1000"]),
        connecting
    );
    assert_eq!(cmd(&mut c, &["EXISTS", "k"]), b":1\r\n");
    // Nothing to move: no connection is tried.
    assert_eq!(
        cmd(
            &mut c,
            &["MIGRATE", "127.0.0.1", &closed, "nokey", "0", "1000"]
        ),
        b"+NOKEY\r\n"
    );
    assert_eq!(
        cmd(&mut c, &["MIGRATE", "127.0.0.1", &closed, "k", "0", "1000", "KEYS", "k"]),
        b"-ERR When using MIGRATE KEYS option, the key argument must be set to the empty string\r\n"
    );
    assert_eq!(
        cmd(
            &mut c,
            &["MIGRATE", "127.0.0.1", &closed, "k", "0", "1000", "BOGUS"]
        ),
        b"-ERR syntax error\r\n"
    );
    assert_eq!(
        cmd(
            &mut c,
            &[
                "MIGRATE",
                "127.0.0.1",
                &closed,
                "k",
                "0",
                "1000",
                "AUTH2",
                "u"
            ]
        ),
        b"-ERR syntax error\r\n"
    );
    assert_eq!(
        cmd(
            &mut c,
            &["MIGRATE", "127.0.0.1", &closed, "k", "db", "1000"]
        ),
        b"-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(
        cmd(&mut c, &["MIGRATE", "127.0.0.1", &closed, "k", "0"]),
        b"-ERR wrong number of arguments for 'migrate' command\r\n"
    );
}

/// A target that accepts the connection but never answers: the reply is
/// the read timeout's IOERR and the key stays.
#[test]
fn silent_target_times_out() {
    let src = Server::tessera(&[]);
    let mut c = src.raw();
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port().to_string();
    cmd(&mut c, &["SET", "k", "v"]);
    assert_eq!(
        cmd(&mut c, &["MIGRATE", "127.0.0.1", &port, "k", "0", "200"]),
        b"-IOERR error or timeout reading to target instance\r\n"
    );
    assert_eq!(cmd(&mut c, &["EXISTS", "k"]), b":1\r\n");
    drop(l);
}

/// The value of `field` in `INFO section`.
fn info_field(c: &mut RawConn, section: &str, field: &str) -> String {
    let info = s(&cmd(c, &["INFO", section]));
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {info}"))
        .to_string()
}

/// Connections to a target are kept (Redis's cache, 10 s) and SELECT is
/// sent only when the db changes; a cached connection the target closed
/// is replaced on the spot (Redis retries once when no reply came).
#[test]
fn connections_are_cached_and_replaced_when_closed() {
    let src = Server::tessera(&[]);
    let mut c = src.raw();
    assert_eq!(info_field(&mut c, "stats", "migrate_cached_sockets"), "0");
    let dsts = targets(&[]);
    for (i, dst) in dsts.iter().enumerate() {
        let port = dst.port().to_string();
        let mut d = dst.raw();
        for k in ["k1", "k2"] {
            cmd(&mut c, &["SET", k, "v"]);
            assert_eq!(
                cmd(&mut c, &["MIGRATE", "127.0.0.1", &port, k, "2", "5000"]),
                b"+OK\r\n"
            );
        }
        assert_eq!(
            info_field(&mut c, "stats", "migrate_cached_sockets"),
            (i + 1).to_string()
        );
        assert_eq!(
            info_field(&mut d, "commandstats", "cmdstat_select")
                .split(',')
                .next(),
            Some("calls=1")
        );
        // The target drops the cached connection.
        assert_eq!(
            cmd(
                &mut d,
                &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]
            ),
            b":1\r\n"
        );
        cmd(&mut c, &["SET", "k3", "v"]);
        assert_eq!(
            cmd(&mut c, &["MIGRATE", "127.0.0.1", &port, "k3", "2", "5000"]),
            b"+OK\r\n"
        );
        assert_eq!(cmd(&mut d, &["SELECT", "2"]), b"+OK\r\n");
        assert_eq!(cmd(&mut d, &["DBSIZE"]), b":3\r\n");
    }
}
