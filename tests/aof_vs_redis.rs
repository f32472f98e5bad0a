//! Tessera's append-only file against Redis 7.0.15's, byte for byte: both
//! servers (`appendonly yes`, `appendfsync always`, one shard for
//! Tessera) run the same long mixed command sequence, and their incr
//! files must be identical, nothing stripped. The sequence is
//! deterministic on both sides: expiries are absolute (a relative one is
//! logged as a deadline from each server's own clock), stream IDs are
//! explicit, SPOP pops a whole set or its only member.

mod common;

use common::{DataDir, RawConn, Server};

/// Every rewrite rule Redis applies, and the commands logged as received,
/// across the types, databases, transactions and scripts.
const SEQUENCE: &[&[&str]] = &[
    // Strings.
    &["SET", "s1", "v"],
    &["set", "s2", "v", "EXAT", "99999999999", "NX"],
    &["SET", "s3", "v", "PXAT", "99999999999999", "GET"],
    &["SET", "s1", "w", "GET"],
    &["SET", "s1", "x", "KEEPTTL", "GET", "get"],
    &["SET", "s1", "y", "NX"],
    &["SET", "nope", "y", "XX"],
    // Already expired: logged as the SET; the key's `DEL` comes from
    // active or lazy expiry, both before the next command's records.
    &["SET", "s4", "v", "EXAT", "1"],
    &["GET", "s4"],
    &["SETNX", "s5", "v"],
    &["SETNX", "s5", "v"],
    &["GETSET", "s5", "w"],
    &["GETDEL", "s5"],
    &["GETDEL", "s5"],
    &["GETEX", "s3", "EXAT", "99999999998"],
    &["GETEX", "s3", "PERSIST"],
    &["GETEX", "s3", "PERSIST"],
    &["GETEX", "s3", "PXAT", "1"],
    &["INCR", "n"],
    &["INCRBY", "n", "10"],
    &["DECR", "n"],
    &["INCRBYFLOAT", "f", "1.5"],
    &["INCRBYFLOAT", "f", "2.25"],
    &["APPEND", "s1", "tail"],
    &["SETRANGE", "s1", "2", "XY"],
    &["SETRANGE", "s1", "2", ""],
    &["MSET", "m1", "1", "m2", "2"],
    &["MSETNX", "m1", "1", "m3", "3"],
    &["MSETNX", "m4", "4", "m5", "5"],
    // Keys.
    &["EXPIREAT", "m1", "99999999999"],
    &["PEXPIREAT", "m2", "99999999999999"],
    &["EXPIREAT", "m4", "99999999999", "NX"],
    &["EXPIREAT", "m4", "99999999990", "NX"],
    &["PERSIST", "m4"],
    &["PERSIST", "m4"],
    &["EXPIRE", "m5", "-1"],
    &["EXPIRE", "nope", "100"],
    &["DEL", "m1", "nope"],
    &["DEL", "nope"],
    &["UNLINK", "m2"],
    &["RENAME", "m3", "m6"],
    &["RENAMENX", "m6", "m4"],
    &["COPY", "m6", "m7"],
    &["MOVE", "m7", "2"],
    // Lists, the blocking forms served at once.
    &["RPUSH", "l", "a", "b", "c", "d", "e", "f"],
    &["LPUSHX", "nope", "a"],
    &["LPOP", "l"],
    &["RPOP", "l", "1"],
    &["LPOP", "l", "0"],
    &["BLPOP", "nope", "l", "0"],
    &["BRPOP", "l", "0"],
    &["RPUSH", "l", "g", "h", "i"],
    &["LMPOP", "2", "nope", "l", "LEFT", "COUNT", "2"],
    &["BLMPOP", "0", "1", "l", "RIGHT", "COUNT", "10"],
    &["RPUSH", "l", "a", "b", "c"],
    &["LMOVE", "l", "l2", "LEFT", "RIGHT"],
    &["BLMOVE", "l", "l2", "RIGHT", "LEFT", "0"],
    &["RPOPLPUSH", "l", "l2"],
    &["BRPOPLPUSH", "l2", "l", "0"],
    &["LSET", "l", "0", "z"],
    &["LINSERT", "l", "BEFORE", "z", "y"],
    &["LINSERT", "l", "BEFORE", "nope", "y"],
    &["LREM", "l", "0", "y"],
    &["LTRIM", "l", "0", "0"],
    // Sets.
    &["SADD", "st", "a", "b", "c"],
    &["SADD", "st", "a"],
    &["SREM", "st", "a", "nope"],
    &["SMOVE", "st", "st2", "b"],
    &["SINTERSTORE", "st3", "st", "st2"],
    &["SUNIONSTORE", "st3", "st", "st2"],
    &["SDIFFSTORE", "st4", "st", "st2"],
    &["SPOP", "st"],
    &["SPOP", "st4", "5"],
    &["SPOP", "nope"],
    // Hashes.
    &["HSET", "h", "a", "1", "b", "2"],
    &["HMSET", "h", "c", "3"],
    &["HSETNX", "h", "a", "9"],
    &["HSETNX", "h", "d", "4"],
    &["HINCRBY", "h", "a", "5"],
    &["HINCRBYFLOAT", "h", "b", "0.5"],
    &["HDEL", "h", "c", "nope"],
    &["HDEL", "h", "nope"],
    // Sorted sets and GEO.
    &[
        "ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e",
    ],
    &["ZADD", "z", "1", "a"],
    &["ZADD", "z", "XX", "CH", "9", "a"],
    &["ZINCRBY", "z", "1", "b"],
    &["ZREM", "z", "c", "nope"],
    &["ZPOPMIN", "z"],
    &["ZPOPMAX", "z", "1"],
    &["BZPOPMIN", "nope", "z", "0"],
    &["ZADD", "z", "1", "a", "2", "b", "3", "c"],
    &["BZPOPMAX", "z", "0"],
    &["ZMPOP", "1", "z", "MIN", "COUNT", "10"],
    &["ZADD", "z", "1", "a", "2", "b", "3", "c"],
    &["BZMPOP", "0", "1", "z", "MAX"],
    &["ZREMRANGEBYSCORE", "z", "0", "1"],
    &["ZUNIONSTORE", "z2", "1", "z"],
    &["ZINTERSTORE", "z3", "2", "z", "nope"],
    &["ZRANGESTORE", "z4", "z", "0", "-1"],
    &[
        "GEOADD",
        "g",
        "13.361389",
        "38.115556",
        "Palermo",
        "15.087269",
        "37.502669",
        "Catania",
    ],
    &["GEOADD", "g", "XX", "CH", "13", "38", "Palermo"],
    &["GEOADD", "g", "NX", "0", "0", "Palermo"],
    &[
        "GEOSEARCHSTORE",
        "g2",
        "g",
        "FROMLONLAT",
        "15",
        "37",
        "BYRADIUS",
        "200",
        "km",
        "ASC",
    ],
    // Bitmaps and HyperLogLogs.
    &["SETBIT", "b", "7", "1"],
    &["SETBIT", "b", "7", "1"],
    &["BITFIELD", "b", "SET", "u8", "8", "255"],
    &["BITOP", "NOT", "b2", "b"],
    &["PFADD", "hl", "a", "b", "c"],
    &["PFADD", "hl", "a"],
    &["PFCOUNT", "hl"],
    &["PFCOUNT", "hl"],
    &["PFMERGE", "hl2", "hl"],
    // Streams with explicit IDs.
    &["XADD", "x", "1-1", "f", "v"],
    &["XADD", "x", "MAXLEN", "5", "2-1", "f", "v"],
    &["XADD", "nope", "NOMKSTREAM", "1-1", "f", "v"],
    &["XDEL", "x", "1-1", "9-9"],
    &["XGROUP", "CREATE", "x", "g", "0"],
    &["XGROUP", "CREATECONSUMER", "x", "g", "c"],
    &["XGROUP", "SETID", "x", "g", "$"],
    &["XGROUP", "DELCONSUMER", "x", "g", "c"],
    &["XGROUP", "DESTROY", "x", "g"],
    &["XSETID", "x", "5-5"],
    &["XTRIM", "x", "MAXLEN", "0"],
    // Sorting into a key.
    &["RPUSH", "srt", "3", "1", "2"],
    &["SORT", "srt"],
    &["SORT", "srt", "STORE", "srt2"],
    // Other databases.
    &["SELECT", "3"],
    &["SET", "d3", "v"],
    &["INCRBYFLOAT", "d3f", "1"],
    &["SELECT", "0"],
    &["SET", "d0", "v"],
    &["SWAPDB", "0", "3"],
    // Transactions.
    &["MULTI"],
    &["SET", "t1", "v"],
    &["INCRBYFLOAT", "t2", "1.5"],
    &["GET", "t1"],
    &["EXEC"],
    &["MULTI"],
    &["GET", "t1"],
    &["EXEC"],
    &["MULTI"],
    &["SET", "t3", "v"],
    &["GET", "t1"],
    &["EXEC"],
    &["MULTI"],
    &["SELECT", "2"],
    &["SET", "t4", "v"],
    &["SELECT", "0"],
    &["SET", "t4", "v"],
    &["EXEC"],
    // Scripts: their effects, never EVAL.
    &["EVAL", "return redis.call('set', KEYS[1], 'x')", "1", "e1"],
    &[
        "EVAL",
        "redis.call('set', KEYS[1], '1'); redis.call('incrbyfloat', KEYS[1], 1); return 1",
        "1",
        "e2",
    ],
    &["EVAL", "return redis.call('get', KEYS[1])", "1", "e2"],
    &["SELECT", "4"],
    &[
        "EVAL",
        "redis.call('set', KEYS[1], '1'); redis.call('del', KEYS[1]); return 1",
        "1",
        "e3",
    ],
    &[
        "EVAL",
        "redis.call('select', 5); redis.call('set', KEYS[1], '1'); return 1",
        "1",
        "e4",
    ],
    &["SELECT", "0"],
    &["FLUSHALL"],
    &["SET", "last", "v"],
];

fn incr(dir: &DataDir) -> Vec<u8> {
    let path = dir.0.join("appendonlydir/appendonly.aof.1.incr.aof");
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn run_all(c: &mut RawConn) -> Vec<Vec<u8>> {
    SEQUENCE.iter().map(|cmd| c.cmd_str(cmd)).collect()
}

#[test]
fn the_incr_file_is_redis_s_byte_for_byte() {
    if !common::redis_available() {
        eprintln!("skipped: redis-server not found");
        return;
    }
    let (td, rd) = (DataDir::new("aof-vs-tessera"), DataDir::new("aof-vs-redis"));
    let aof = ["--appendonly", "yes", "--appendfsync", "always", "--dir"];
    let t = Server::tessera(&[&aof[..], &[td.path(), "--shards", "1"]].concat());
    let r = Server::redis(&[&aof[..], &[rd.path()]].concat());
    let (tr, rr) = (run_all(&mut t.raw()), run_all(&mut r.raw()));
    for ((cmd, a), b) in SEQUENCE.iter().zip(&tr).zip(&rr) {
        assert_eq!(
            String::from_utf8_lossy(a),
            String::from_utf8_lossy(b),
            "reply to {cmd:?}"
        );
    }
    let (ti, ri) = (incr(&td), incr(&rd));
    if ti != ri {
        // The first differing record, for the failure message.
        let at = ti
            .iter()
            .zip(&ri)
            .position(|(a, b)| a != b)
            .unwrap_or(ti.len().min(ri.len()));
        let from = ti[..at]
            .windows(3)
            .rposition(|w| w == b"\r\n*")
            .map_or(0, |p| p + 2);
        let show = |b: &[u8]| {
            String::from_utf8_lossy(&b[from..b.len().min(at + 200)]).replace("\r\n", " ")
        };
        panic!(
            "incr files differ at byte {at} ({} vs {} bytes)\n tessera: {}\n redis:   {}",
            ti.len(),
            ri.len(),
            show(&ti),
            show(&ri)
        );
    }
}
