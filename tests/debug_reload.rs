//! DEBUG RELOAD, DEBUG DIGEST and DEBUG DIGEST-VALUE beside redis-server
//! 7.0, at 2 and 16 shards, consolidated and not: the same commands give
//! the same digests (every type, expiring keys, several databases, the
//! compact and the big encodings), a RELOAD keeps every digest, and the
//! options, errors and INFO fields read byte for byte as Redis's. Redis's
//! Tcl units (functions, scripting, type/*, keyspace, other) lean on
//! both commands.

#[macro_use]
mod common;

use common::{Layout, RawConn, Server, LAYOUTS};

fn tessera(layout: Layout) -> Server {
    layout.tessera(&["--enable-debug-command", "yes"])
}

/// The servers each test compares: Tessera in `layout`, then
/// redis-server when it is installed.
fn servers(layout: Layout) -> Vec<Server> {
    let mut v = vec![tessera(layout)];
    if common::redis_available() {
        v.push(Server::redis(&["--enable-debug-command", "yes"]));
    } else {
        eprintln!("redis-server not found: Tessera checked alone");
    }
    v
}

fn cmd(c: &mut RawConn, argv: &[&str]) -> String {
    String::from_utf8_lossy(&c.cmd_str(argv)).into_owned()
}

/// Writes of every type in databases 0 and 5, in the compact encodings
/// and past their thresholds, with expiring keys, a stream with deleted
/// entries and consumer groups, an HLL, and an expired key still stored.
fn write_everything(c: &mut RawConn) {
    let mut big_list = vec!["RPUSH", "biglist"];
    let items: Vec<String> = (0..300).map(|i| format!("item-{i}")).collect();
    big_list.extend(items.iter().map(String::as_str));
    let mut big_zset = vec!["ZADD", "bigz"];
    let scores: Vec<(String, String)> = (0..200)
        .map(|i| (format!("{}", f64::from(i) / 7.0), format!("m{i}")))
        .collect();
    for (s, m) in &scores {
        big_zset.push(s);
        big_zset.push(m);
    }
    let mut big_hash = vec!["HSET", "bigh"];
    let fields: Vec<(String, String)> = (0..200)
        .map(|i| (format!("f{i}"), format!("{}", i * 3)))
        .collect();
    for (f, v) in &fields {
        big_hash.push(f);
        big_hash.push(v);
    }
    let mut big_set = vec!["SADD", "bigset"];
    let members: Vec<String> = (0..600).map(|i| format!("{}", i * 11)).collect();
    big_set.extend(members.iter().map(String::as_str));
    let mut str_set = vec!["SADD", "strset"];
    let strs: Vec<String> = (0..200).map(|i| format!("s{i}")).collect();
    str_set.extend(strs.iter().map(String::as_str));
    let cmds: &[&[&str]] = &[
        &["SET", "s", "hello"],
        &["SET", "n", "12345"],
        &["SET", "neg", "-7"],
        &["SET", "big", &"x".repeat(100)],
        &["SET", "ttl", "v", "EX", "1000"],
        &["SET", "pttl", "v", "PX", "100000000"],
        &["RPUSH", "l", "a", "1", "b", "2"],
        &big_list,
        &["SADD", "ints", "3", "1", "2"],
        &big_set,
        &str_set,
        &[
            "ZADD", "z", "1", "a", "2.5", "b", "-3", "c", "inf", "d", "1e-7", "e",
        ],
        &big_zset,
        &["HSET", "h", "f1", "v1", "f2", "2"],
        &big_hash,
        &["XADD", "x", "1-1", "f", "v", "n", "1"],
        &["XADD", "x", "2-1", "g", "w"],
        &["XADD", "x", "3-1", "h", "3"],
        &["XDEL", "x", "2-1"],
        &["XGROUP", "CREATE", "x", "g1", "0"],
        &[
            "XREADGROUP",
            "GROUP",
            "g1",
            "c1",
            "COUNT",
            "1",
            "STREAMS",
            "x",
            ">",
        ],
        &["PFADD", "hll", "a", "b", "c"],
        &["EXPIRE", "l", "5000"],
        &["SELECT", "5"],
        &["SET", "s", "in five"],
        &["RPUSH", "l5", "x"],
        &["SELECT", "0"],
    ];
    for a in cmds {
        let r = cmd(c, a);
        assert!(!r.starts_with('-'), "{a:?}: {r}");
    }
}

const VALUE_KEYS: &[&str] = &[
    "s", "n", "neg", "big", "ttl", "pttl", "l", "biglist", "ints", "bigset", "strset", "z", "bigz",
    "h", "bigh", "x", "hll", "missing",
];

/// DEBUG DIGEST, then DIGEST-VALUE of every key, in db 0 and 5.
fn digests(c: &mut RawConn) -> Vec<String> {
    let mut out = vec![cmd(c, &["DEBUG", "DIGEST"])];
    let mut argv = vec!["DEBUG", "DIGEST-VALUE"];
    argv.extend_from_slice(VALUE_KEYS);
    out.push(cmd(c, &argv));
    cmd(c, &["SELECT", "5"]);
    out.push(cmd(c, &["DEBUG", "DIGEST-VALUE", "s", "l5", "n"]));
    cmd(c, &["SELECT", "0"]);
    out
}

/// The same writes give Redis's digests; a RELOAD (and a RELOAD NOSAVE of
/// the file it wrote) keeps them; a change moves the dataset's digest and
/// the changed key's only.
fn digests_and_reload_as_redis(layout: Layout) {
    let mut seen: Vec<Vec<String>> = Vec::new();
    for s in servers(layout) {
        let mut c = s.raw();
        let mut got = vec![cmd(&mut c, &["DEBUG", "DIGEST"])];
        write_everything(&mut c);
        let before = digests(&mut c);
        assert_eq!(before[0].len(), 43, "{before:?}");
        got.extend(before.clone());
        assert_eq!(cmd(&mut c, &["DEBUG", "RELOAD"]), "+OK\r\n");
        assert_eq!(digests(&mut c), before, "{:?} {layout}", s.flavor());
        assert_eq!(cmd(&mut c, &["DEBUG", "RELOAD", "NOSAVE"]), "+OK\r\n");
        assert_eq!(digests(&mut c), before, "{:?} {layout}", s.flavor());
        // The TTLs came back.
        let ttl = cmd(&mut c, &["TTL", "ttl"]);
        assert!(ttl.starts_with(":9") || ttl == ":1000\r\n", "{ttl}");
        cmd(&mut c, &["HSET", "bigh", "f1", "changed"]);
        let after = digests(&mut c);
        assert_ne!(after[0], before[0]);
        let (b, a) = (before[1].split("\r\n"), after[1].split("\r\n"));
        let moved: Vec<(&str, &str)> = b.zip(a).filter(|(x, y)| x != y).collect();
        assert_eq!(moved.len(), 1, "{moved:?}");
        got.extend(after);
        cmd(&mut c, &["FLUSHALL"]);
        got.push(cmd(&mut c, &["DEBUG", "DIGEST"]));
        seen.push(got);
    }
    assert_eq!(seen[0][0], "+0000000000000000000000000000000000000000\r\n");
    if let [ours, redis] = &seen[..] {
        assert_eq!(ours, redis, "{layout}");
    }
}

/// A session of RELOAD's options and errors, DIGEST's, and the INFO
/// fields Redis leaves: every reply byte for byte.
fn reload_session(c: &mut RawConn) -> Vec<String> {
    let lib = |name: &str| {
        format!(
            "#!lua name={name}\nredis.register_function('{name}', function() return 'hello' end)"
        )
    };
    // `changes`: with rdb_changes_since_last_save (FUNCTION LOAD and
    // DELETE do not count in Tessera's, a difference of their own).
    let persistence = |c: &mut RawConn, changes: bool| {
        let info = cmd(c, &["INFO", "persistence"]);
        info.lines()
            .filter(|l| {
                (changes && l.starts_with("rdb_changes_since_last_save"))
                    || l.starts_with("rdb_saves")
                    || l.starts_with("rdb_last_load_keys")
                    || l.starts_with("rdb_last_bgsave_status")
                    || l.starts_with("loading:")
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut out = Vec::new();
    let mut run = |c: &mut RawConn, argv: &[&str]| out.push(cmd(c, argv));
    // No file yet: the data is emptied, the load fails.
    run(c, &["SET", "a", "1"]);
    run(c, &["DEBUG", "RELOAD", "NOSAVE"]);
    run(c, &["DBSIZE"]);
    run(c, &["DEBUG", "RELOAD", "BOGUS"]);
    run(c, &["DEBUG", "RELOAD", "merge", "NOSAVE", "extra"]);
    run(c, &["DEBUG", "DIGEST", "x"]);
    run(c, &["DEBUG", "DIGEST-VALUE"]);
    run(c, &["DEBUG", "RELOAD", "nosave", "noflush", "merge"]);
    // Redis's Tcl unit/functions, "test debug reload different options"
    // and "with nosave and noflush".
    run(c, &["FUNCTION", "LOAD", &lib("test")]);
    run(c, &["SET", "x", "1"]);
    run(c, &["SET", "e", "1", "PX", "100000"]);
    run(c, &["DEBUG", "RELOAD"]);
    run(c, &["FCALL", "test", "0"]);
    out.push(persistence(c, true));
    let mut run = |c: &mut RawConn, argv: &[&str]| out.push(cmd(c, argv));
    run(c, &["FUNCTION", "DELETE", "test"]);
    run(c, &["FUNCTION", "LOAD", &lib("test")]);
    run(c, &["DEBUG", "RELOAD", "NOSAVE", "NOFLUSH"]);
    run(c, &["FUNCTION", "LIST"]);
    run(c, &["DEBUG", "RELOAD", "noflush", "merge"]);
    run(c, &["FUNCTION", "LIST"]);
    run(c, &["FUNCTION", "DELETE", "test"]);
    run(c, &["FUNCTION", "LOAD", &lib("test1")]);
    run(c, &["DEBUG", "RELOAD"]);
    run(c, &["FUNCTION", "LOAD", &lib("test2")]);
    run(c, &["SET", "x", "changed"]);
    run(c, &["SET", "new", "1"]);
    run(c, &["DEBUG", "RELOAD", "NOSAVE", "NOFLUSH", "MERGE"]);
    run(c, &["FCALL", "test1", "0"]);
    run(c, &["FCALL", "test2", "0"]);
    run(c, &["MGET", "x", "new", "e"]);
    run(c, &["FUNCTION", "STATS"]);
    out.push(persistence(c, false));
    let mut run = |c: &mut RawConn, argv: &[&str]| out.push(cmd(c, argv));
    // NOSAVE: the change counter stays as the commands left it.
    run(c, &["SET", "y", "1"]);
    run(c, &["DEBUG", "RELOAD", "NOSAVE"]);
    run(c, &["MGET", "x", "y", "new"]);
    out.push(persistence(c, false));
    let mut run = |c: &mut RawConn, argv: &[&str]| out.push(cmd(c, argv));
    run(c, &["DEBUG", "RELOAD"]);
    run(c, &["SET", "y", "2"]);
    run(c, &["DEBUG", "RELOAD", "NOSAVE"]);
    out.push(persistence(c, true));
    // Inside a transaction.
    let mut run = |c: &mut RawConn, argv: &[&str]| out.push(cmd(c, argv));
    run(c, &["MULTI"]);
    run(c, &["SET", "t", "1"]);
    run(c, &["DEBUG", "RELOAD"]);
    run(c, &["GET", "t"]);
    run(c, &["EXEC"]);
    run(c, &["DEBUG", "RELOAD", "NOSAVE"]);
    run(c, &["GET", "t"]);
    out
}

/// The options, errors and INFO fields, as Redis's; a WATCH of a key the
/// RELOAD replaced fails its EXEC, as after Redis's emptyData.
fn options_and_errors_as_redis(layout: Layout) {
    let mut seen: Vec<Vec<String>> = Vec::new();
    for s in servers(layout) {
        let mut c = s.raw();
        let got = reload_session(&mut c);
        // WATCH and tracking, then a RELOAD from another client: the
        // watch fails and the tracking client hears of the flush.
        let mut w = s.raw();
        cmd(&mut w, &["WATCH", "x"]);
        let mut t = s.raw();
        cmd(&mut t, &["HELLO", "3"]);
        assert_eq!(cmd(&mut t, &["CLIENT", "TRACKING", "ON"]), "+OK\r\n");
        cmd(&mut t, &["GET", "x"]);
        let mut watch = vec![cmd(&mut c, &["DEBUG", "RELOAD"])];
        cmd(&mut w, &["MULTI"]);
        cmd(&mut w, &["SET", "x", "w"]);
        watch.push(cmd(&mut w, &["EXEC"]));
        assert_eq!(watch, ["+OK\r\n", "*-1\r\n"], "{:?} {layout}", s.flavor());
        let pushed = String::from_utf8_lossy(&t.read_reply()).into_owned();
        assert_eq!(
            pushed,
            ">2\r\n$10\r\ninvalidate\r\n_\r\n",
            "{:?}",
            s.flavor()
        );
        // NOFLUSH keeps the data. MERGE replaces `x`: Redis's
        // dbSyncDelete + dbAddRDBLoad tell no tracking client; Tessera's
        // insert does, as for any change (a deliberate difference: a
        // client's cache must not keep a value that was replaced).
        cmd(&mut t, &["GET", "x"]);
        assert_eq!(
            cmd(&mut c, &["DEBUG", "RELOAD", "NOFLUSH", "MERGE"]),
            "+OK\r\n"
        );
        let next = cmd(&mut t, &["PING"]);
        if s.flavor() == common::Flavor::Tessera {
            // The invalidation comes from `x`'s shard by the mailbox, the
            // PONG from the tracking client's own loop: either may come
            // first (CI saw the PONG first at 16 shards consolidated).
            let then = String::from_utf8_lossy(&t.read_reply()).into_owned();
            let mut both = [next, then];
            both.sort();
            assert_eq!(
                both,
                [
                    "+PONG\r\n".to_string(),
                    ">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nx\r\n".to_string()
                ]
            );
        } else {
            assert_eq!(next, "+PONG\r\n");
        }
        if s.flavor() == common::Flavor::Tessera {
            let log = s.log();
            assert!(log.contains("DB reloaded by DEBUG RELOAD"), "{log}");
            assert!(
                log.contains("Failed loading library, Library 'test' already exists"),
                "{log}"
            );
        }
        seen.push(got);
    }
    let ours = &seen[0];
    assert_eq!(ours[1], "-ERR Error trying to load the RDB dump\r\n");
    assert_eq!(ours[2], ":0\r\n");
    assert_eq!(
        ours[3],
        "-ERR DEBUG RELOAD only supports the MERGE, NOFLUSH and NOSAVE options.\r\n"
    );
    if let [ours, redis] = &seen[..] {
        for (i, (a, b)) in ours.iter().zip(redis).enumerate() {
            assert_eq!(a, b, "reply {i} at {layout}");
        }
        assert_eq!(ours.len(), redis.len());
    }
}

per_layout!(digests_and_reload_as_redis, options_and_errors_as_redis);

/// RELOAD NOFLUSH without MERGE over a key that is still there: Redis's
/// serverPanic ("Duplicated key found in RDB file") ends the process; so
/// does Tessera, with Redis's log lines.
#[test]
fn a_duplicated_key_without_merge_ends_the_process_as_redis() {
    for layout in [LAYOUTS[0], LAYOUTS[3]] {
        for mut s in servers(layout) {
            let mut c = s.raw();
            cmd(&mut c, &["SET", "k", "v"]);
            assert_eq!(cmd(&mut c, &["SAVE"]), "+OK\r\n");
            c.send(&common::encode_command(&[
                b"DEBUG", b"RELOAD", b"NOSAVE", b"NOFLUSH",
            ]));
            c.read_eof();
            common::wait_for("the server to exit", || !s.is_running());
            assert!(
                s.log().contains("RDB has duplicated key 'k' in DB 0"),
                "{}",
                s.log()
            );
        }
    }
}
