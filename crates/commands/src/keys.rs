//! Keyspace commands (Redis's `db.c`, `expire.c` and `object.c`):
//! existence, deletion, expiry, renaming and copying, iteration, whole-
//! database operations and OBJECT introspection. Request path.
//!
//! # Lazy expiry
//!
//! Every command here sees a key whose deadline has passed as missing: the
//! engine's lookups (`lookup_read`, `lookup_write`, `exists`, `remove`)
//! delete it first. So EXISTS/TYPE/TTL/OBJECT on an expired key answer as
//! for a missing key, EXPIRE/PERSIST/RENAME/MOVE/COPY treat it as absent,
//! and KEYS and SCAN skip it (SCAN deletes it on the way, as Redis's
//! `expireIfNeeded` does; KEYS only skips it, as Redis's `keyIsExpired`).
//!
//! # Commands across shards
//!
//! * Multi-key counts (DEL, UNLINK, EXISTS, TOUCH) group their keys by
//!   shard and sum one job per shard.
//! * RENAME, RENAMENX and COPY run as one shard handler when both keys share
//!   a shard and as a step-by-step [`Coordinator`] when they do not: take
//!   (or read) the source entry on its shard, then store it on the
//!   destination's shard. The entry moves whole, so the TTL (an absolute
//!   deadline) and, for RENAME, the access time travel with it.
//! * KEYS, DBSIZE, RANDOMKEY, FLUSHDB, FLUSHALL and SWAPDB fan out to every
//!   shard, in one round (one job per shard).
//! * SCAN talks to one shard per call; see [`scan::ScanCursor`] for how its
//!   cursor names the shard.
//! * SCAN takes no lock outside MULTI/EXEC ([`scan::scan_locks`]); KEYS, DBSIZE
//!   and RANDOMKEY take a whole-shard Read lock on every shard (asked for
//!   in one round, see `tx`), FLUSHDB, FLUSHALL and SWAPDB a Write lock.
//!
//! OBJECT FREQ, IDLETIME and REFCOUNT depend on the eviction policy, which
//! lives in the server configuration a shard handler does not see, so they
//! run as coordinators that read the policy on the home thread and send one
//! job to the key's shard. The shard itself learns whether to keep LFU
//! counters from [`lfu_params`], which the owning loop applies to
//! `Shard::lfu` whenever the configuration changes.
//!
//! # Module map
//!
//! This file holds the command table, the helpers the families share and
//! DEL, UNLINK, EXISTS, TOUCH, DBSIZE and TYPE; each other family has its
//! own module: [`expire`] (EXPIRE ... PEXPIRETIME), [`rename`] (RENAME,
//! RENAMENX, COPY, MOVE), [`scan`] (KEYS, SCAN, RANDOMKEY and the SCAN
//! parsing the collection scans share), [`flush`] (FLUSHDB, FLUSHALL,
//! SWAPDB) and [`object`] (OBJECT). Their tests sit beside them, sharing
//! this file's test helpers.

use ds::events as ev;
use engine::lazyfree::Del;
use engine::Shard;
use resp::{Args, OwnedArgs, Reply};

use crate::coord::{fan_out, Coordinator, KeyedStep, Plan};
use crate::ctx::{ClientState, ConnCtx, ShardCtx};
use crate::error::CmdError;
use crate::multikey::{prefetch_keys, split_by_shard};
use crate::propagate::as_received;
use crate::table::{flags::*, keys, CommandSpec, Exec, NO_KEYS};
use crate::util::parse_i64;

mod expire;
mod flush;
pub(crate) mod object;
mod rename;
mod scan;
pub(crate) mod script;

use expire::{expire, expireat, expiretime, persist, pexpire, pexpireat, pexpiretime, pttl, ttl};
pub(crate) use flush::invalidate_all;
use flush::{flushall, flushdb, swapdb};
use object::OBJECT_SUBCOMMANDS;
pub use object::{lfu_params, lfu_params_of};
pub(crate) use rename::copy_across;
use rename::{copy, copy_multi, move_, rename, rename_multi, renamenx, renamenx_multi};
use scan::{keys_, randomkey, scan, scan_locks};
pub(crate) use scan::{parse_scan_cursor, parse_scan_opts, reply_empty_scan, ScanOpts};

const KEYSPACE_READ_FAST: &[&str] = &["keyspace", "read", "fast"];
const KEYSPACE_WRITE_FAST: &[&str] = &["keyspace", "write", "fast"];
const KEYSPACE_READ_SLOW: &[&str] = &["keyspace", "read", "slow"];

pub(crate) const COMMANDS: &[CommandSpec] = &[
    CommandSpec::new(
        "del",
        -2,
        WRITE,
        keys(1, -1, 1),
        Exec::Shard(del, Some(del_multi)),
        &["keyspace", "write", "slow"],
    ),
    CommandSpec::new(
        "unlink",
        -2,
        WRITE | FAST,
        keys(1, -1, 1),
        Exec::Shard(unlink, Some(unlink_multi)),
        KEYSPACE_WRITE_FAST,
    ),
    CommandSpec::new(
        "exists",
        -2,
        READONLY | FAST,
        keys(1, -1, 1),
        Exec::Shard(exists, Some(exists_multi)),
        KEYSPACE_READ_FAST,
    ),
    CommandSpec::new(
        "touch",
        -2,
        READONLY | FAST,
        keys(1, -1, 1),
        Exec::Shard(touch, Some(touch_multi)),
        KEYSPACE_READ_FAST,
    ),
    CommandSpec::new(
        "dbsize",
        1,
        READONLY | FAST,
        NO_KEYS,
        Exec::Coord(dbsize),
        KEYSPACE_READ_FAST,
    ),
    CommandSpec::new(
        "type",
        2,
        READONLY | FAST,
        keys(1, 1, 1),
        Exec::Shard(type_, None),
        KEYSPACE_READ_FAST,
    ),
    CommandSpec::new(
        "expire",
        -3,
        WRITE | FAST,
        keys(1, 1, 1),
        Exec::Shard(expire, None),
        KEYSPACE_WRITE_FAST,
    ),
    CommandSpec::new(
        "pexpire",
        -3,
        WRITE | FAST,
        keys(1, 1, 1),
        Exec::Shard(pexpire, None),
        KEYSPACE_WRITE_FAST,
    ),
    CommandSpec::new(
        "expireat",
        -3,
        WRITE | FAST,
        keys(1, 1, 1),
        Exec::Shard(expireat, None),
        KEYSPACE_WRITE_FAST,
    ),
    CommandSpec::new(
        "pexpireat",
        -3,
        WRITE | FAST,
        keys(1, 1, 1),
        Exec::Shard(pexpireat, None),
        KEYSPACE_WRITE_FAST,
    ),
    CommandSpec::new(
        "ttl",
        2,
        READONLY | FAST,
        keys(1, 1, 1),
        Exec::Shard(ttl, None),
        KEYSPACE_READ_FAST,
    ),
    CommandSpec::new(
        "pttl",
        2,
        READONLY | FAST,
        keys(1, 1, 1),
        Exec::Shard(pttl, None),
        KEYSPACE_READ_FAST,
    ),
    CommandSpec::new(
        "expiretime",
        2,
        READONLY | FAST,
        keys(1, 1, 1),
        Exec::Shard(expiretime, None),
        KEYSPACE_READ_FAST,
    ),
    CommandSpec::new(
        "pexpiretime",
        2,
        READONLY | FAST,
        keys(1, 1, 1),
        Exec::Shard(pexpiretime, None),
        KEYSPACE_READ_FAST,
    ),
    CommandSpec::new(
        "persist",
        2,
        WRITE | FAST,
        keys(1, 1, 1),
        Exec::Shard(persist, None),
        KEYSPACE_WRITE_FAST,
    ),
    CommandSpec::new(
        "rename",
        3,
        WRITE,
        keys(1, 2, 1),
        Exec::Shard(rename, Some(rename_multi)),
        &["keyspace", "write", "slow"],
    ),
    CommandSpec::new(
        "renamenx",
        3,
        WRITE | FAST,
        keys(1, 2, 1),
        Exec::Shard(renamenx, Some(renamenx_multi)),
        KEYSPACE_WRITE_FAST,
    ),
    CommandSpec::new(
        "copy",
        -3,
        WRITE | DENYOOM,
        keys(1, 2, 1),
        Exec::Shard(copy, Some(copy_multi)),
        &["keyspace", "write", "slow"],
    ),
    CommandSpec::new(
        "move",
        3,
        WRITE | FAST,
        keys(1, 1, 1),
        Exec::Shard(move_, None),
        KEYSPACE_WRITE_FAST,
    ),
    CommandSpec::new(
        "keys",
        2,
        READONLY,
        NO_KEYS,
        Exec::Coord(keys_),
        &["keyspace", "read", "slow", "dangerous"],
    ),
    CommandSpec::new(
        "scan",
        -2,
        READONLY,
        NO_KEYS,
        Exec::Coord(scan),
        KEYSPACE_READ_SLOW,
    )
    .with_locks(scan_locks),
    CommandSpec::new(
        "randomkey",
        1,
        READONLY,
        NO_KEYS,
        Exec::Coord(randomkey),
        KEYSPACE_READ_SLOW,
    ),
    CommandSpec::new(
        "flushdb",
        -1,
        WRITE,
        NO_KEYS,
        Exec::Coord(flushdb),
        &["keyspace", "write", "slow", "dangerous"],
    ),
    CommandSpec::new(
        "flushall",
        -1,
        WRITE,
        NO_KEYS,
        Exec::Coord(flushall),
        &["keyspace", "write", "slow", "dangerous"],
    ),
    CommandSpec::new(
        "swapdb",
        3,
        WRITE | FAST,
        NO_KEYS,
        Exec::Coord(swapdb),
        &["keyspace", "write", "fast", "dangerous"],
    ),
    CommandSpec::parent("object", -2, 0, &["slow"], OBJECT_SUBCOMMANDS),
];

// ---------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------

/// Redis's `getIntFromObjectOrReply`: an integer that must fit a C `int`.
fn parse_i32(arg: &[u8]) -> Result<i32, CmdError> {
    let n = parse_i64(arg)?;
    i32::try_from(n).map_err(|_| {
        CmdError::err("value is out of range, value must between -2147483648 and 2147483647")
    })
}

/// A database index as MOVE and COPY check it (`selectDb`'s range).
fn parse_db(arg: &[u8], databases: usize) -> Result<usize, CmdError> {
    let n = parse_i32(arg)?;
    usize::try_from(n)
        .ok()
        .filter(|&n| n < databases)
        .ok_or(CmdError::DbIndexOutOfRange)
}

/// Deletes `key` if its deadline has passed, counting it as Redis's
/// `expireIfNeeded` does; true if it was deleted.
fn expire_if_needed(shard: &mut Shard, db: usize, key: &[u8]) -> bool {
    // On a replica: nothing is deleted (see `engine::Expiry`).
    shard.expire_or_hide(db, key)
}

/// Sums a per-shard count over the shards holding the keys.
fn count_multi(
    c: &mut ConnCtx<'_>,
    args: Args<'_>,
    op: fn(&mut Shard, usize, &[u8]) -> bool,
) -> Box<dyn Coordinator> {
    let db = c.client.db;
    let (groups, _) = split_by_shard(args, 1, c.nshards(), c.key_shards);
    let job = move |plan: &mut Plan, shard: usize, keys: OwnedArgs| {
        plan.run(shard, move |env| {
            count(env.shard, db, keys.args(), op) as i64
        });
    };
    KeyedStep::boxed(
        groups,
        job,
        |res: Vec<i64>, out: &mut Reply, _: &mut ClientState| {
            out.int(res.iter().sum());
            Ok(())
        },
    )
}

/// Counts the keys of `args[1..]` for which `op` holds, on one shard.
fn count_local(
    ctx: &mut ShardCtx<'_>,
    args: Args<'_>,
    op: fn(&mut Shard, usize, &[u8]) -> bool,
) -> Result<(), CmdError> {
    let n = count(ctx.shard, ctx.db, args.skip(1), op);
    ctx.out.int(n as i64);
    Ok(())
}

/// How many of `keys` (all on `shard`) `op` holds for. Their table slots
/// are prefetched first, so the lookups' cache misses overlap.
fn count(
    shard: &mut Shard,
    db: usize,
    keys: Args<'_>,
    op: fn(&mut Shard, usize, &[u8]) -> bool,
) -> usize {
    prefetch_keys(shard, db, keys, 1);
    keys.iter().filter(|k| op(shard, db, k)).count()
}

/// DEL's deletion of one key (`lazyfree-lazy-user-del`).
fn op_del(s: &mut Shard, db: usize, k: &[u8]) -> bool {
    op_remove(s, db, k, Del::User)
}

/// UNLINK's deletion of one key (always lazy).
fn op_unlink(s: &mut Shard, db: usize, k: &[u8]) -> bool {
    op_remove(s, db, k, Del::Unlink)
}

#[inline]
fn op_remove(s: &mut Shard, db: usize, k: &[u8], why: Del) -> bool {
    let deleted = s.delete(db, k, why);
    if deleted {
        s.notify(db, ev::GENERIC, "del", k);
    }
    deleted
}

/// EXISTS looks keys up without touching them but counts hits and misses
/// (Redis's `lookupKeyReadWithFlags(LOOKUP_NOTOUCH)`).
fn op_exists(s: &mut Shard, db: usize, k: &[u8]) -> bool {
    s.lookup_read(db, k, false).is_some()
}

/// TOUCH always updates the access time (Redis's `lookupKeyRead`).
fn op_touch(s: &mut Shard, db: usize, k: &[u8]) -> bool {
    s.lookup_read(db, k, true).is_some()
}

// ---------------------------------------------------------------------------
// DEL UNLINK EXISTS TOUCH DBSIZE TYPE
// ---------------------------------------------------------------------------

/// DEL key [key ...]: the number of keys removed. A large value is freed
/// in the background under `lazyfree-lazy-user-del` (`engine::lazyfree`).
///
/// Propagated as received when it deleted a key.
fn del(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    del_local(ctx, args, op_del)
}

fn del_multi(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let db = c.client.db;
    Ok(as_received(count_multi(c, args, op_del), args, db))
}

/// UNLINK key [key ...]: DEL that always frees a large value in the
/// background.
fn unlink(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    del_local(ctx, args, op_unlink)
}

fn unlink_multi(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let db = c.client.db;
    Ok(as_received(count_multi(c, args, op_unlink), args, db))
}

fn del_local(
    ctx: &mut ShardCtx<'_>,
    args: Args<'_>,
    op: fn(&mut Shard, usize, &[u8]) -> bool,
) -> Result<(), CmdError> {
    let n = count(ctx.shard, ctx.db, args.skip(1), op);
    if n > 0 {
        ctx.propagate_as_is(args);
    }
    ctx.out.int(n as i64);
    Ok(())
}

/// EXISTS key [key ...]: how many of the keys exist (repeats count again).
fn exists(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    count_local(ctx, args, op_exists)
}

fn exists_multi(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    Ok(count_multi(c, args, op_exists))
}

/// TOUCH key [key ...]: updates the access time of each key; replies how
/// many exist (repeats count again).
fn touch(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    count_local(ctx, args, op_touch)
}

fn touch_multi(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    Ok(count_multi(c, args, op_touch))
}

/// DBSIZE: keys in the selected database, over all shards (keys expired
/// but not yet deleted included, as in Redis).
fn dbsize(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let db = c.client.db;
    Ok(fan_out(
        c.nshards(),
        move |env| env.shard.dbs[db].len() as i64,
        |res, out, _| {
            out.int(res.iter().sum());
            Ok(())
        },
    ))
}

/// TYPE key: `+string` etc., `+none` for a missing key.
fn type_(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let name = ctx
        .shard
        .lookup_read(ctx.db, args.get(1), false)
        .map_or("none", |e| e.value().type_name());
    ctx.out.simple(name);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::table::shard_of;
    use crate::testutil::TestServer;

    pub(super) const SHARD_COUNTS: [usize; 3] = [1, 2, 4];

    /// A key starting with `prefix` that lives on `shard` of `n`.
    pub(super) fn key_on(prefix: &str, shard: usize, n: usize) -> String {
        (0..10_000)
            .map(|i| format!("{prefix}{i}"))
            .find(|k| shard_of(k.as_bytes(), n) == shard)
            .expect("some key lands on every shard")
    }

    /// Two keys on different shards when `n > 1` (the same shard otherwise).
    pub(super) fn apart(n: usize) -> (String, String) {
        (key_on("src", 0, n), key_on("dst", n - 1, n))
    }

    /// Makes `key` (in `db`) expired without deleting it, as if its
    /// deadline had just passed.
    pub(super) fn expire_now(t: &mut TestServer, db: usize, key: &str) {
        let n = t.shards.len();
        let s = shard_of(key.as_bytes(), n);
        assert!(t.shards[s].dbs[db].set_expire(key.as_bytes(), 1));
    }

    pub(super) fn now_ms() -> u64 {
        engine::now_ms()
    }

    #[test]
    fn del_unlink_exists_touch() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            t.run(&["MSET", "a", "1", "b", "2", "c", "3", "d", "4"]);
            assert_eq!(t.run(&["EXISTS", "a", "b", "a", "zz"]), ":3\r\n");
            assert_eq!(t.run(&["TOUCH", "a", "zz", "c", "c"]), ":3\r\n");
            assert_eq!(t.run(&["UNLINK", "a", "zz", "a"]), ":1\r\n");
            assert_eq!(t.run(&["DEL", "b", "c", "zz"]), ":2\r\n");
            assert_eq!(t.run(&["DBSIZE"]), ":1\r\n");
            expire_now(&mut t, 0, "d");
            assert_eq!(t.run(&["EXISTS", "d"]), ":0\r\n");
            assert_eq!(t.run(&["DBSIZE"]), ":0\r\n");
            assert_eq!(
                t.run(&["UNLINK"]),
                "-ERR wrong number of arguments for 'unlink' command\r\n"
            );
            assert_eq!(
                t.run(&["TOUCH"]),
                "-ERR wrong number of arguments for 'touch' command\r\n"
            );
        }
    }

    #[test]
    fn touch_updates_access_time_and_exists_does_not() {
        let mut t = TestServer::new(1);
        t.run(&["SET", "k", "v"]);
        t.shards[0].dbs[0].get_mut(b"k").unwrap().access_s -= 100;
        t.run(&["EXISTS", "k"]);
        t.run(&["TYPE", "k"]);
        t.run(&["TTL", "k"]);
        let idle = t.run(&["OBJECT", "IDLETIME", "k"]);
        assert!(idle == ":100\r\n" || idle == ":101\r\n", "{idle}");
        assert_eq!(t.run(&["TOUCH", "k"]), ":1\r\n");
        assert_eq!(t.run(&["OBJECT", "IDLETIME", "k"]), ":0\r\n");
    }

    #[test]
    fn type_of_keys() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            t.run(&["SET", "s", "v"]);
            assert_eq!(t.run(&["TYPE", "s"]), "+string\r\n");
            assert_eq!(t.run(&["TYPE", "nokey"]), "+none\r\n");
            expire_now(&mut t, 0, "s");
            assert_eq!(t.run(&["TYPE", "s"]), "+none\r\n");
            assert_eq!(
                t.run(&["TYPE"]),
                "-ERR wrong number of arguments for 'type' command\r\n"
            );
        }
    }

    #[test]
    fn lookups_count_hits_and_misses() {
        let mut t = TestServer::new(1);
        t.run(&["SET", "k", "v"]);
        let before = t.shards[0].stats;
        t.run(&["EXISTS", "k", "nokey"]);
        t.run(&["TYPE", "k"]);
        t.run(&["TTL", "nokey"]);
        let after = t.shards[0].stats;
        assert_eq!(after.keyspace_hits - before.keyspace_hits, 2);
        assert_eq!(after.keyspace_misses - before.keyspace_misses, 2);
    }
}
