//! What each command family propagates, run in process with records on:
//! one table per family (command -> exact records), covering every rule
//! of the module documentation. Expected forms were checked against
//! Redis 7.0.15's append-only file.

use crate::testutil::TestServer;

/// A case: commands run first (their records dropped), the command, and
/// its records, each as its arguments joined by spaces. `{at:KEY}` stands
/// for KEY's deadline in database 0 after the command.
type Case<'a> = (&'a [&'a [&'a str]], &'a [&'a str], &'a [&'a str]);

fn run_table(nshards: usize, cases: &[Case<'_>]) {
    for (setup, cmd, want) in cases {
        let mut t = TestServer::new(nshards);
        t.recording(true);
        for c in *setup {
            t.run(c);
        }
        t.take_records();
        let reply = t.run(cmd);
        let got: Vec<String> = t.take_records().iter().map(|r| r.join(" ")).collect();
        let want: Vec<String> = want.iter().map(|w| expand(&t, w)).collect();
        assert_eq!(got, want, "{cmd:?} (reply {reply:?})");
    }
}

/// Replaces `{at:KEY}` by KEY's deadline.
fn expand(t: &TestServer, w: &str) -> String {
    let Some(start) = w.find("{at:") else {
        return w.to_string();
    };
    let end = start + w[start..].find('}').expect("closing brace");
    let key = &w[start + 4..end];
    let s = crate::table::shard_of(key.as_bytes(), t.shards.len());
    let at = t.shards[s].dbs[0].expire_of(key.as_bytes());
    assert_ne!(at, 0, "{key} has no deadline");
    format!("{}{at}{}", &w[..start], &w[end + 1..])
}

const K: &[&str] = &["SET", "k", "v"];
const K_TTL: &[&str] = &["SET", "k", "v", "EX", "100"];

#[test]
fn strings() {
    run_table(
        1,
        &[
            (&[], &["SET", "k", "v"], &["SET k v"]),
            (
                &[],
                &["set", "k", "v", "EX", "100", "NX"],
                &["SET k v PXAT {at:k}"],
            ),
            (
                &[],
                &["SET", "k", "v", "PX", "100000"],
                &["SET k v PXAT {at:k}"],
            ),
            (
                &[],
                &["SET", "k", "v", "EXAT", "99999999999"],
                &["SET k v PXAT 99999999999000"],
            ),
            // An expiry in the past still logs the SET (Redis 7.0).
            (&[], &["SET", "k", "v", "EXAT", "1"], &["SET k v PXAT 1000"]),
            (
                &[],
                &["SET", "k", "v", "PXAT", "99999999999999", "GET"],
                &["SET k v PXAT 99999999999999"],
            ),
            (&[K], &["set", "k", "w", "GET"], &["set k w"]),
            (
                &[K],
                &["set", "k", "w", "KEEPTTL", "get", "GET"],
                &["set k w KEEPTTL"],
            ),
            (&[K], &["SET", "k", "w", "NX"], &[]),
            (&[], &["SET", "k", "w", "XX"], &[]),
            (&[], &["SET", "k", "w", "XX", "GET"], &[]),
            (&[], &["SETNX", "k", "v"], &["SETNX k v"]),
            (&[K], &["SETNX", "k", "v"], &[]),
            (&[], &["SETEX", "k", "100", "v"], &["SET k v PXAT {at:k}"]),
            (
                &[],
                &["PSETEX", "k", "100000", "v"],
                &["SET k v PXAT {at:k}"],
            ),
            (&[K_TTL], &["GETSET", "k", "w"], &["SET k w"]),
            (&[K], &["GETDEL", "k"], &["DEL k"]),
            (&[], &["GETDEL", "k"], &[]),
            (&[K], &["GETEX", "k", "EX", "100"], &["PEXPIREAT k {at:k}"]),
            (
                &[K],
                &["GETEX", "k", "PXAT", "99999999999999"],
                &["PEXPIREAT k 99999999999999"],
            ),
            (&[K], &["GETEX", "k", "EXAT", "1"], &["DEL k"]),
            (&[K_TTL], &["GETEX", "k", "PERSIST"], &["PERSIST k"]),
            (&[K], &["GETEX", "k", "PERSIST"], &[]),
            (&[K], &["GETEX", "k"], &[]),
            (&[], &["GETEX", "k", "EX", "100"], &[]),
            (&[], &["INCRBYFLOAT", "f", "1.5"], &["SET f 1.5 KEEPTTL"]),
            (
                &[&["SET", "f", "1", "EX", "100"]],
                &["INCRBYFLOAT", "f", "0.25"],
                &["SET f 1.25 KEEPTTL"],
            ),
            (&[&["SET", "f", "x"]], &["INCRBYFLOAT", "f", "1"], &[]),
            (&[], &["INCR", "n"], &["INCR n"]),
            (&[], &["DECRBY", "n", "5"], &["DECRBY n 5"]),
            (&[K], &["APPEND", "k", "x"], &["APPEND k x"]),
            (&[K], &["SETRANGE", "k", "3", "xy"], &["SETRANGE k 3 xy"]),
            (&[K], &["SETRANGE", "k", "3", ""], &[]),
            (&[], &["MSET", "a", "1", "b", "2"], &["MSET a 1 b 2"]),
            (&[], &["MSETNX", "a", "1", "b", "2"], &["MSETNX a 1 b 2"]),
            (&[&["SET", "b", "1"]], &["MSETNX", "a", "1", "b", "2"], &[]),
            (&[K], &["GET", "k"], &[]),
        ],
    );
}

#[test]
fn keys() {
    run_table(
        1,
        &[
            (&[K], &["EXPIRE", "k", "100"], &["PEXPIREAT k {at:k}"]),
            (&[K], &["PEXPIRE", "k", "100000"], &["PEXPIREAT k {at:k}"]),
            (
                &[K],
                &["EXPIREAT", "k", "99999999999"],
                &["PEXPIREAT k 99999999999000"],
            ),
            (
                &[K],
                &["pexpireat", "k", "99999999999999"],
                &["pexpireat k 99999999999999"],
            ),
            // The condition stays with the record, as Redis 7.0 keeps it.
            (
                &[K],
                &["EXPIRE", "k", "100", "NX"],
                &["PEXPIREAT k {at:k} NX"],
            ),
            (&[K_TTL], &["EXPIRE", "k", "100", "NX"], &[]),
            (&[K], &["EXPIRE", "k", "-1"], &["DEL k"]),
            (&[K], &["EXPIREAT", "k", "1"], &["DEL k"]),
            (&[], &["EXPIRE", "k", "100"], &[]),
            (&[K_TTL], &["PERSIST", "k"], &["PERSIST k"]),
            (&[K], &["PERSIST", "k"], &[]),
            (&[K], &["DEL", "k", "nope"], &["DEL k nope"]),
            (&[K], &["UNLINK", "k"], &["UNLINK k"]),
            (&[], &["DEL", "k"], &[]),
            (&[K], &["RENAME", "k", "{k}2"], &["RENAME k {k}2"]),
            (&[K], &["RENAME", "k", "k"], &[]),
            (&[K, &["SET", "{k}2", "x"]], &["RENAMENX", "k", "{k}2"], &[]),
            (&[K], &["COPY", "k", "{k}2"], &["COPY k {k}2"]),
            (&[K, &["SET", "{k}2", "x"]], &["COPY", "k", "{k}2"], &[]),
            (&[K], &["MOVE", "k", "1"], &["MOVE k 1"]),
            (&[], &["MOVE", "k", "1"], &[]),
        ],
    );
}

#[test]
fn restore_gets_an_absolute_ttl() {
    let mut t = TestServer::new(1);
    t.recording(true);
    t.run(&["SET", "src", "v"]);
    let dump = t.raw(&[b"DUMP", b"src"]);
    // `$<len>\r\n<payload>\r\n`
    let start = dump.iter().position(|&b| b == b'\n').unwrap() + 1;
    let payload = &dump[start..dump.len() - 2];
    t.take_records();
    t.raw(&[b"RESTORE", b"k", b"100000", payload]);
    let at = t.shards[0].dbs[0].expire_of(b"k").to_string();
    let got = t.take_records();
    let payload_s = String::from_utf8_lossy(payload).into_owned();
    assert_eq!(
        got,
        vec![vec![
            "RESTORE".to_string(),
            "k".into(),
            at,
            payload_s.clone(),
            "ABSTTL".into()
        ]]
    );
    t.raw(&[b"RESTORE", b"k", b"0", payload, b"REPLACE"]);
    assert_eq!(got.len(), 1);
    let got = t.take_records();
    assert_eq!(
        got,
        vec![vec![
            "RESTORE".to_string(),
            "k".into(),
            "0".into(),
            payload_s,
            "REPLACE".into()
        ]]
    );
    // Already expired: the replaced key's deletion only.
    t.raw(&[b"RESTORE", b"k", b"1", payload, b"REPLACE", b"ABSTTL"]);
    assert_eq!(t.take_records(), vec![vec!["DEL".to_string(), "k".into()]]);
}

const S3: &[&str] = &["SADD", "s", "a", "b", "c"];

#[test]
fn sets() {
    run_table(
        1,
        &[
            (&[], &["SADD", "s", "a", "b"], &["SADD s a b"]),
            (&[S3], &["SADD", "s", "a"], &[]),
            (&[S3], &["SREM", "s", "a", "x"], &["SREM s a x"]),
            (&[S3], &["SREM", "s", "x"], &[]),
            (&[&["SADD", "s", "a"]], &["SPOP", "s"], &["SREM s a"]),
            (&[&["SADD", "s", "7"]], &["SPOP", "s"], &["SREM s 7"]),
            (&[S3], &["SPOP", "s", "3"], &["DEL s"]),
            (&[S3], &["SPOP", "s", "0"], &[]),
            (&[], &["SPOP", "s"], &[]),
            (&[S3], &["SMOVE", "s", "{s}d", "a"], &["SMOVE s {s}d a"]),
            (&[S3], &["SMOVE", "s", "s", "a"], &[]),
            (
                &[S3],
                &["SINTERSTORE", "{s}d", "s"],
                &["SINTERSTORE {s}d s"],
            ),
            (&[], &["SUNIONSTORE", "{s}d", "s"], &[]),
            (
                &[&["SADD", "{s}d", "x"]],
                &["SDIFFSTORE", "{s}d", "s"],
                &["SDIFFSTORE {s}d s"],
            ),
        ],
    );
}

/// SPOP with a count logs the members it removed, which are random.
#[test]
fn spop_with_a_count_logs_the_members_removed() {
    let mut t = TestServer::new(1);
    t.recording(true);
    t.run(&["SADD", "s", "a", "b", "c", "d", "e"]);
    t.take_records();
    t.run(&["SPOP", "s", "2"]);
    let got = t.take_records();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0][..2], ["SREM", "s"]);
    assert_eq!(got[0].len(), 4);
    for m in &got[0][2..] {
        assert_eq!(t.run(&["SISMEMBER", "s", m]), ":0\r\n", "{m} was popped");
    }
}

const L3: &[&str] = &["RPUSH", "l", "a", "b", "c"];

#[test]
fn lists() {
    run_table(
        1,
        &[
            (&[], &["RPUSH", "l", "a", "b"], &["RPUSH l a b"]),
            (&[], &["LPUSHX", "l", "a"], &[]),
            (&[L3], &["LPOP", "l"], &["LPOP l"]),
            (&[L3], &["RPOP", "l", "5"], &["RPOP l 5"]),
            (&[L3], &["LPOP", "l", "0"], &[]),
            (&[], &["LPOP", "l"], &[]),
            (&[L3], &["BLPOP", "nope", "l", "0"], &["LPOP l"]),
            (&[L3], &["BRPOP", "l", "0"], &["RPOP l"]),
            (&[], &["BRPOP", "l", "0"], &[]),
            (
                &[L3],
                &["LMPOP", "1", "l", "LEFT", "COUNT", "2"],
                &["LPOP l 2"],
            ),
            (
                &[L3],
                &["BLMPOP", "0", "1", "l", "RIGHT", "COUNT", "5"],
                &["RPOP l 3"],
            ),
            (
                &[L3],
                &["LMOVE", "l", "{l}d", "LEFT", "RIGHT"],
                &["LMOVE l {l}d LEFT RIGHT"],
            ),
            (
                &[L3],
                &["BLMOVE", "l", "{l}d", "LEFT", "RIGHT", "0"],
                &["LMOVE l {l}d LEFT RIGHT"],
            ),
            (&[L3], &["RPOPLPUSH", "l", "l"], &["RPOPLPUSH l l"]),
            (
                &[L3],
                &["BRPOPLPUSH", "l", "{l}d", "0"],
                &["RPOPLPUSH l {l}d"],
            ),
            (&[], &["BRPOPLPUSH", "l", "{l}d", "0"], &[]),
            (&[L3], &["LSET", "l", "0", "x"], &["LSET l 0 x"]),
            (
                &[L3],
                &["LINSERT", "l", "BEFORE", "b", "x"],
                &["LINSERT l BEFORE b x"],
            ),
            (&[L3], &["LINSERT", "l", "BEFORE", "z", "x"], &[]),
            (&[L3], &["LREM", "l", "0", "a"], &["LREM l 0 a"]),
            (&[L3], &["LREM", "l", "0", "z"], &[]),
            (&[L3], &["LTRIM", "l", "0", "1"], &["LTRIM l 0 1"]),
            (&[L3], &["LTRIM", "l", "0", "-1"], &[]),
        ],
    );
}

#[test]
fn hashes() {
    run_table(
        1,
        &[
            (&[], &["HSET", "h", "f", "v"], &["HSET h f v"]),
            (&[], &["HMSET", "h", "f", "v"], &["HMSET h f v"]),
            (&[], &["HSETNX", "h", "f", "v"], &["HSETNX h f v"]),
            (&[&["HSET", "h", "f", "v"]], &["HSETNX", "h", "f", "w"], &[]),
            (
                &[&["HSET", "h", "f", "v"]],
                &["HDEL", "h", "f", "g"],
                &["HDEL h f g"],
            ),
            (&[&["HSET", "h", "f", "v"]], &["HDEL", "h", "g"], &[]),
            (&[], &["HINCRBY", "h", "n", "2"], &["HINCRBY h n 2"]),
            (&[], &["HINCRBYFLOAT", "h", "x", "2.5"], &["HSET h x 2.5"]),
            (
                &[&["HSET", "h", "x", "1"]],
                &["HINCRBYFLOAT", "h", "x", "0.5"],
                &["HSET h x 1.5"],
            ),
        ],
    );
}

const Z2: &[&str] = &["ZADD", "z", "1", "a", "2", "b"];

#[test]
fn sorted_sets_and_geo() {
    run_table(
        1,
        &[
            (&[], &["ZADD", "z", "1", "a"], &["ZADD z 1 a"]),
            (&[Z2], &["ZADD", "z", "1", "a"], &[]),
            (&[Z2], &["ZADD", "z", "CH", "3", "a"], &["ZADD z CH 3 a"]),
            (&[Z2], &["ZINCRBY", "z", "1", "a"], &["ZINCRBY z 1 a"]),
            (&[Z2], &["ZREM", "z", "a"], &["ZREM z a"]),
            (
                &[Z2],
                &["ZREMRANGEBYSCORE", "z", "0", "1"],
                &["ZREMRANGEBYSCORE z 0 1"],
            ),
            (&[Z2], &["ZREMRANGEBYRANK", "z", "5", "9"], &[]),
            (&[Z2], &["ZPOPMIN", "z"], &["ZPOPMIN z"]),
            (&[Z2], &["ZPOPMAX", "z", "5"], &["ZPOPMAX z 5"]),
            (&[Z2], &["BZPOPMIN", "z", "0"], &["ZPOPMIN z"]),
            (&[Z2], &["BZPOPMAX", "nope", "z", "0"], &["ZPOPMAX z"]),
            (
                &[Z2],
                &["ZMPOP", "1", "z", "MIN", "COUNT", "10"],
                &["ZPOPMIN z 2"],
            ),
            (&[Z2], &["BZMPOP", "0", "1", "z", "MAX"], &["ZPOPMAX z 1"]),
            (&[], &["ZMPOP", "1", "z", "MIN"], &[]),
            (
                &[Z2],
                &["ZUNIONSTORE", "{z}d", "1", "z"],
                &["ZUNIONSTORE {z}d 1 z"],
            ),
            (
                &[Z2],
                &["ZRANGESTORE", "{z}d", "z", "0", "-1"],
                &["ZRANGESTORE {z}d z 0 -1"],
            ),
            (&[], &["ZINTERSTORE", "{z}d", "1", "z"], &[]),
            // The bytes Redis 7.0.15 writes for the same commands.
            (
                &[],
                &["GEOADD", "g", "13.361389", "38.115556", "Palermo"],
                &["zadd g 3479099956230698 Palermo"],
            ),
            (
                &[&["GEOADD", "g", "13.361389", "38.115556", "Palermo"]],
                &["GEOADD", "g", "xx", "ch", "13", "38", "Palermo"],
                &["zadd g xx ch 3479065152021743 Palermo"],
            ),
            (
                &[&["GEOADD", "g", "13.361389", "38.115556", "Palermo"]],
                &["GEOADD", "g", "nx", "0", "0", "Palermo"],
                &[],
            ),
            (
                &[&["GEOADD", "g", "13.361389", "38.115556", "Palermo"]],
                &[
                    "GEOSEARCHSTORE",
                    "{g}d",
                    "g",
                    "FROMLONLAT",
                    "13",
                    "38",
                    "BYRADIUS",
                    "200",
                    "km",
                ],
                &["GEOSEARCHSTORE {g}d g FROMLONLAT 13 38 BYRADIUS 200 km"],
            ),
        ],
    );
}

#[test]
fn bitmaps_and_hyperloglogs() {
    run_table(
        1,
        &[
            (&[], &["SETBIT", "b", "7", "1"], &["SETBIT b 7 1"]),
            (
                &[&["SETBIT", "b", "7", "1"]],
                &["SETBIT", "b", "7", "1"],
                &[],
            ),
            (
                &[],
                &["BITFIELD", "b", "SET", "u8", "0", "1"],
                &["BITFIELD b SET u8 0 1"],
            ),
            (
                &[&["SET", "b", "\x01"]],
                &["BITFIELD", "b", "SET", "u8", "0", "1"],
                &[],
            ),
            (&[K], &["BITOP", "NOT", "{k}d", "k"], &["BITOP NOT {k}d k"]),
            (&[], &["BITOP", "NOT", "{k}d", "k"], &[]),
            (&[], &["PFADD", "h", "a"], &["PFADD h a"]),
            (&[&["PFADD", "h", "a"]], &["PFADD", "h", "a"], &[]),
            // A stale cache is computed and stored: the command is logged.
            (&[&["PFADD", "h", "a"]], &["PFCOUNT", "h"], &["PFCOUNT h"]),
            (
                &[&["PFADD", "h", "a"], &["PFCOUNT", "h"]],
                &["PFCOUNT", "h"],
                &[],
            ),
            (
                &[&["PFADD", "h", "a"]],
                &["PFMERGE", "h", "h"],
                &["PFMERGE h h"],
            ),
        ],
    );
}

#[test]
fn streams() {
    const X: &[&str] = &["XADD", "x", "1-1", "f", "v"];
    const G: &[&str] = &["XGROUP", "CREATE", "x", "g", "0"];
    run_table(
        1,
        &[
            (&[], &["XADD", "x", "1-1", "f", "v"], &["XADD x 1-1 f v"]),
            (&[], &["XADD", "x", "NOMKSTREAM", "*", "f", "v"], &[]),
            (
                &[X],
                &["XADD", "x", "MAXLEN", "1", "2-1", "f", "v"],
                &["XADD x MAXLEN 1 2-1 f v"],
            ),
            (&[X], &["XDEL", "x", "1-1"], &["XDEL x 1-1"]),
            (&[X], &["XDEL", "x", "9-9"], &[]),
            (&[X], &["XTRIM", "x", "MAXLEN", "0"], &["XTRIM x MAXLEN 0"]),
            (&[X], &["XSETID", "x", "5-5"], &["XSETID x 5-5"]),
            (
                &[X],
                &["XGROUP", "CREATE", "x", "g", "0"],
                &["XGROUP CREATE x g 0"],
            ),
            (
                &[X, G],
                &["XGROUP", "SETID", "x", "g", "$"],
                &["XGROUP SETID x g $"],
            ),
            (
                &[X, G],
                &["XGROUP", "CREATECONSUMER", "x", "g", "c"],
                &["XGROUP CREATECONSUMER x g c"],
            ),
            (
                &[X, G],
                &["XGROUP", "DESTROY", "x", "g"],
                &["XGROUP DESTROY x g"],
            ),
            (&[X, G], &["XGROUP", "DESTROY", "x", "nope"], &[]),
            (&[X, G], &["XACK", "x", "g", "1-1"], &[]),
        ],
    );
}

/// XADD `*` logs the ID it generated.
#[test]
fn xadd_logs_the_generated_id() {
    let mut t = TestServer::new(1);
    t.recording(true);
    let reply = t.run(&["XADD", "x", "*", "f", "v"]);
    let id = reply.lines().nth(1).unwrap().to_string();
    assert_eq!(
        t.take_records(),
        vec![vec![
            "XADD".to_string(),
            "x".into(),
            id,
            "f".into(),
            "v".into()
        ]]
    );
}

#[test]
fn scripts_log_the_commands_they_ran() {
    run_table(
        1,
        &[
            // One command: bare; several: in MULTI/EXEC; none: nothing.
            (
                &[],
                &["EVAL", "return redis.call('set', KEYS[1], 'x')", "1", "k"],
                &["set k x"],
            ),
            (
                &[],
                &[
                    "EVAL",
                    "redis.call('set', KEYS[1], '1'); redis.call('incrbyfloat', KEYS[1], 1)",
                    "1",
                    "k",
                ],
                &["MULTI", "set k 1", "SET k 2 KEEPTTL", "EXEC"],
            ),
            (
                &[K],
                &["EVAL", "return redis.call('get', KEYS[1])", "1", "k"],
                &[],
            ),
            // A command that changed nothing logs nothing inside one either.
            (
                &[K],
                &[
                    "EVAL",
                    "return redis.call('set', KEYS[1], 'x', 'NX')",
                    "1",
                    "k",
                ],
                &[],
            ),
        ],
    );
}

#[test]
fn commands_across_shards() {
    run_table(
        4,
        &[
            (
                &[],
                &["MSET", "a", "1", "b", "2", "c", "3"],
                &["MSET a 1 b 2 c 3"],
            ),
            (&[], &["FLUSHALL"], &["FLUSHALL"]),
            (&[], &["SWAPDB", "0", "1"], &["SWAPDB 0 1"]),
            // Run on scratch copies: the handler's own record.
            (
                &[&["SADD", "a", "x"]],
                &["SMOVE", "a", "b", "x"],
                &["SMOVE a b x"],
            ),
            (&[&["SADD", "a", "x"]], &["SMOVE", "a", "b", "y"], &[]),
            (
                &[&["RPUSH", "a", "x"]],
                &["BLMOVE", "a", "b", "LEFT", "LEFT", "0"],
                &["LMOVE a b LEFT LEFT"],
            ),
            // SORT logs itself only when it stored something.
            (&[&["RPUSH", "a", "2", "1"]], &["SORT", "a"], &[]),
            (
                &[&["RPUSH", "a", "2", "1"]],
                &["SORT", "a", "STORE", "b"],
                &["SORT a STORE b"],
            ),
            (&[], &["SORT", "a", "STORE", "b"], &[]),
        ],
    );
}

#[test]
fn lazy_expiry_logs_del_before_the_command() {
    let mut t = TestServer::new(1);
    t.recording(true);
    t.run(&["SET", "k", "v", "PX", "1"]);
    std::thread::sleep(std::time::Duration::from_millis(5));
    t.take_records();
    t.run(&["GET", "k"]);
    assert_eq!(t.take_records(), vec![vec!["DEL".to_string(), "k".into()]]);
    t.run(&["SET", "k", "v", "PX", "1"]);
    std::thread::sleep(std::time::Duration::from_millis(5));
    t.take_records();
    t.run(&["SET", "k", "w"]);
    let got: Vec<String> = t.take_records().iter().map(|r| r.join(" ")).collect();
    assert_eq!(got, ["DEL k", "SET k w"]);
}

/// Records carry the shard's sequence numbers, and nothing is recorded
/// (nor a number spent) without a consumer.
#[test]
fn records_are_numbered_per_shard_and_only_with_a_consumer() {
    let mut t = TestServer::new(1);
    t.run(&["SET", "a", "1"]);
    assert!(t.shards[0].outbox.is_empty());
    t.recording(true);
    t.run(&["SET", "a", "1"]);
    t.run(&["SET", "b", "1"]);
    let c = t.shards[0].outbox.take().unwrap();
    assert_eq!((c.first_seq, c.last_seq, c.records), (1, 2, 2));
    t.run(&["SELECT", "3"]);
    t.run(&["SET", "a", "1"]);
    let c = t.shards[0].outbox.take().unwrap();
    assert_eq!((c.first_seq, c.last_seq, c.first_db), (3, 3, 3));
}

/// Records, keyspace events and invalidations of one shard share one
/// sequence, in execution order (a command's invalidations after its
/// records and events).
#[test]
fn effects_share_one_sequence_in_execution_order() {
    let mut t = TestServer::new(1);
    t.recording(true);
    t.shards[0].set_notify(ds::events::parse(b"KEA").unwrap());
    t.shards[0].set_tracking(true);
    t.run(&["SET", "a", "1"]);
    t.run(&["SET", "b", "2"]);
    let s = &mut t.shards[0];
    let c = s.outbox.take().unwrap();
    assert_eq!((c.first_seq, c.last_seq, c.records), (1, 4, 2));
    let ev: Vec<(u64, String)> = s
        .take_events()
        .iter()
        .map(|e| (e.seq, String::from_utf8_lossy(&e.key).into_owned()))
        .collect();
    assert_eq!(ev, [(2, "a".to_string()), (5, "b".to_string())]);
    let inv: Vec<(u64, String)> = s
        .outbox
        .drain_invalidations()
        .map(|i| (i.seq, String::from_utf8_lossy(&i.key).into_owned()))
        .collect();
    assert_eq!(inv, [(3, "a".to_string()), (6, "b".to_string())]);
}
