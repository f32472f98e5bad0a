//! FLUSHDB, FLUSHALL and SWAPDB: whole-database operations on every shard
//! at one instant (Write locks on every shard). A flush forgets the tracked
//! keys and sends tracking clients a null invalidation
//! ([`invalidate_all`]); ASYNC (or `lazyfree-lazy-user-flush` without an
//! option) hands the old tables to a background thread.

use engine::Shard;
use resp::Args;

use crate::coord::{fan_out, Coordinator};
use crate::ctx::ConnCtx;
use crate::error::CmdError;
use crate::propagate::as_received;
use crate::util::{eq_ic, parse_i64};

/// Redis's `LAZYFREE_THRESHOLD`-like cut-off: fewer keys than this over a
/// shard's flushed databases are freed inline, since a thread costs more.
const LAZYFREE_MIN_KEYS: usize = 64;

/// Redis's `getFlushCommandFlags`: `[ASYNC|SYNC]`; `Some(true)` for
/// ASYNC, `None` without an option (`lazyfree-lazy-user-flush` decides,
/// see `engine::lazyfree::Lazy::flush_async`).
pub(super) fn parse_flush(args: Args<'_>) -> Result<Option<bool>, CmdError> {
    match args.len() {
        1 => Ok(None),
        2 if eq_ic(args.get(1), "sync") => Ok(Some(false)),
        2 if eq_ic(args.get(1), "async") => Ok(Some(true)),
        _ => Err(CmdError::Syntax),
    }
}

/// Empties databases `dbs` of one shard. ASYNC (`mode`, or
/// `lazyfree-lazy-user-flush` without one) swaps the tables out and frees
/// them on a background thread, so the shard never stalls on a large free.
pub(super) fn flush(shard: &mut Shard, dbs: std::ops::Range<usize>, mode: Option<bool>) {
    // Redis forgets every tracked key on any flush (its table spans the
    // databases); the clients get a null invalidation.
    shard.tracked.clear();
    if !shard.lazy().flush_async(mode) {
        for db in dbs {
            shard.dbs[db].clear();
        }
        return;
    }
    let old: Vec<engine::Db> = dbs.map(|db| shard.dbs[db].take()).collect();
    let keys = old.iter().map(engine::Db::len).sum::<usize>();
    if keys < LAZYFREE_MIN_KEYS {
        return;
    }
    engine::lazyfree::free_in_thread(old, keys as u64);
}

/// FLUSHDB [ASYNC|SYNC]: empties the selected database on every shard.
pub(super) fn flushdb(
    c: &mut ConnCtx<'_>,
    args: Args<'_>,
) -> Result<Box<dyn Coordinator>, CmdError> {
    let mode = parse_flush(args)?;
    let db = c.client.db;
    let server = c.server.clone();
    let coord = fan_out(
        c.nshards(),
        move |env| flush(env.shard, db..db + 1, mode),
        move |_: Vec<()>, out, _| {
            invalidate_all(&server);
            out.ok();
            Ok(())
        },
    );
    Ok(as_received(coord, args, db))
}

/// After a flush: every tracking client gets a null invalidation (all its
/// keys), and every shard forgot its tracked keys (in `flush`), as
/// Redis's `trackingInvalidateKeysOnFlush`.
pub(crate) fn invalidate_all(server: &crate::ServerShared) {
    for (id, to) in server.tracking.tracking_clients() {
        server.pubsub.send_one(crate::pubsub::Delivery::Invalidate {
            to,
            id,
            keys: None,
            bcast: false,
        });
    }
}

/// FLUSHALL [ASYNC|SYNC]: empties every database on every shard.
pub(super) fn flushall(
    c: &mut ConnCtx<'_>,
    args: Args<'_>,
) -> Result<Box<dyn Coordinator>, CmdError> {
    let mode = parse_flush(args)?;
    let server = c.server.clone();
    let coord = fan_out(
        c.nshards(),
        move |env| {
            let n = env.shard.dbs.len();
            flush(env.shard, 0..n, mode);
            (env.shard.id, env.shard.dirty())
        },
        move |flushed: Vec<(usize, u64)>, out, _| {
            // A save in progress is abandoned; with save rules, the
            // emptied data is saved before the reply (Redis's
            // flushAllDataAndResetRDB).
            let mut dirty = vec![0; flushed.len()];
            for (id, d) in flushed {
                dirty[id] = d;
            }
            server.persist.after_flushall(&server, &dirty);
            invalidate_all(&server);
            out.ok();
            Ok(())
        },
    );
    Ok(as_received(coord, args, c.client.db))
}

/// SWAPDB index1 index2: swaps two databases on every shard.
pub(super) fn swapdb(
    c: &mut ConnCtx<'_>,
    args: Args<'_>,
) -> Result<Box<dyn Coordinator>, CmdError> {
    let id = |i: usize, what: &str| {
        let n = parse_i64(args.get(i)).map_err(|_| CmdError::err(what))?;
        i32::try_from(n).map_err(|_| CmdError::err(what))
    };
    let a = id(1, "invalid first DB index")?;
    let b = id(2, "invalid second DB index")?;
    let databases = c.server.databases();
    let check = |x: i32| {
        usize::try_from(x)
            .ok()
            .filter(|&x| x < databases)
            .ok_or(CmdError::DbIndexOutOfRange)
    };
    let (a, b) = (check(a)?, check(b)?);
    let coord = fan_out(
        c.nshards(),
        move |env| {
            if a != b {
                let (lo, hi) = (a.min(b), a.max(b));
                let (x, y) = env.shard.dbs.split_at_mut(hi);
                engine::Db::swap_contents(&mut x[lo], &mut y[0]);
            }
        },
        |_: Vec<()>, out, _| {
            out.ok();
            Ok(())
        },
    );
    Ok(as_received(coord, args, c.client.db))
}

#[cfg(test)]
mod tests {

    use crate::keys::tests::*;
    use crate::testutil::TestServer;

    #[test]
    fn flushdb_flushall() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            let fill = |t: &mut TestServer, db: &str, count: usize| {
                t.run(&["SELECT", db]);
                for i in 0..count {
                    t.run(&["SET", &format!("k{i}"), "v"]);
                }
                t.run(&["SELECT", "0"]);
            };
            let size = |t: &mut TestServer, db: &str| {
                t.run(&["SELECT", db]);
                let r = t.run(&["DBSIZE"]);
                t.run(&["SELECT", "0"]);
                r
            };
            assert_eq!(t.run(&["FLUSHDB", "foo"]), "-ERR syntax error\r\n");
            assert_eq!(t.run(&["FLUSHALL", "async", "x"]), "-ERR syntax error\r\n");
            assert_eq!(t.run(&["FLUSHALL", "foo"]), "-ERR syntax error\r\n");
            for opt in [None, Some("SYNC"), Some("async"), Some("ASYNC")] {
                // Above and below the inline-free threshold.
                for count in [10, 300] {
                    fill(&mut t, "0", count);
                    fill(&mut t, "5", 3);
                    let mut argv = vec!["FLUSHDB"];
                    argv.extend(opt);
                    assert_eq!(t.run(&argv), "+OK\r\n");
                    assert_eq!(size(&mut t, "0"), ":0\r\n");
                    assert_eq!(size(&mut t, "5"), ":3\r\n");
                    argv[0] = "FLUSHALL";
                    fill(&mut t, "0", count);
                    assert_eq!(t.run(&argv), "+OK\r\n");
                    assert_eq!(size(&mut t, "0"), ":0\r\n");
                    assert_eq!(size(&mut t, "5"), ":0\r\n");
                    assert_eq!(t.run(&["SET", "k1", "after"]), "+OK\r\n");
                    assert_eq!(t.run(&["GET", "k1"]), "$5\r\nafter\r\n");
                    t.run(&["FLUSHALL"]);
                }
            }
        }
    }

    #[test]
    fn swapdb_command() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            assert_eq!(
                t.run(&["SWAPDB", "0", "x"]),
                "-ERR invalid second DB index\r\n"
            );
            assert_eq!(
                t.run(&["SWAPDB", "x", "0"]),
                "-ERR invalid first DB index\r\n"
            );
            assert_eq!(
                t.run(&["SWAPDB", "16", "x"]),
                "-ERR invalid second DB index\r\n"
            );
            assert_eq!(
                t.run(&["SWAPDB", "99999999999", "0"]),
                "-ERR invalid first DB index\r\n"
            );
            assert_eq!(
                t.run(&["SWAPDB", "0", "99999999999"]),
                "-ERR invalid second DB index\r\n"
            );
            let range = "-ERR DB index is out of range\r\n";
            assert_eq!(t.run(&["SWAPDB", "0", "16"]), range);
            assert_eq!(t.run(&["SWAPDB", "-1", "0"]), range);
            assert_eq!(t.run(&["SWAPDB", "1", "-5"]), range);
            assert_eq!(t.run(&["SWAPDB", "0", "0"]), "+OK\r\n");
            t.run(&["MSET", "a", "1", "b", "2", "c", "3"]);
            assert_eq!(t.run(&["SWAPDB", "0", "7"]), "+OK\r\n");
            assert_eq!(t.run(&["DBSIZE"]), ":0\r\n");
            t.run(&["SELECT", "7"]);
            assert_eq!(
                t.run(&["MGET", "a", "b", "c"]),
                "*3\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n"
            );
            assert_eq!(t.run(&["SWAPDB", "7", "0"]), "+OK\r\n");
            assert_eq!(t.run(&["DBSIZE"]), ":0\r\n");
        }
    }
}
