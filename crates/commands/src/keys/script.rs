//! The keyspace-wide commands (DBSIZE, KEYS, SCAN, RANDOMKEY, FLUSHDB,
//! FLUSHALL, SWAPDB) called from a script that holds every shard.
//!
//! A client's call of one of these is a coordinator that fans out a job
//! to every shard (see `scan`, `flush`). A script runs inside one handler
//! call on one thread and cannot wait for jobs on other threads, so it
//! may call them only while it holds every shard of the process itself:
//! with one shard, run in place with every other shard co-hosted and
//! pinned (`script::in_place`), or under its transaction's whole-shard
//! write locks on every shard, each shard reached on its own thread while
//! the script waits (`script::every`). Then each command reads (or
//! empties) the shards one after another through `each`, and gives the
//! reply a client's call gives: nothing else runs on any shard meanwhile,
//! so the result is one instant's, as in Redis. Where the script cannot
//! hold every shard (and can no longer run again to take them), the
//! caller refuses the call (see `script::run`).
//!
//! The same shard-local pieces as a client's call (`scan::scan_collect`,
//! `flush::flush`), so the replies cannot drift apart.

use engine::{Shard, SmallBytes};
use rand::Rng;
use resp::{Args, Reply};

use super::flush::{flush, invalidate_all, parse_flush};
use super::scan::{
    parse_scan_cursor, parse_scan_opts, scan_collect, scan_keep, scan_reply, ScanCursor,
};
use crate::error::CmdError;

/// Reaches shard `s` (of `0..nshards`) for `f`'s length.
pub(crate) type Each<'a> = dyn FnMut(usize, &mut dyn FnMut(&mut Shard)) + 'a;

/// Whether `full` (the table's full name) is one of this module's commands.
pub(crate) fn handles(full: &str) -> bool {
    matches!(
        full,
        "dbsize" | "keys" | "scan" | "randomkey" | "flushdb" | "flushall" | "swapdb"
    )
}

/// Runs keyspace command `full` (see [`handles`]) over every shard of
/// database `db`, its reply in `out`; the server (for a flush's
/// invalidations and save) when it is known. A flush's record is the
/// caller's to make (the command as received, on the script's shard).
pub(crate) fn call(
    full: &str,
    args: Args<'_>,
    db: usize,
    nshards: usize,
    each: &mut Each<'_>,
    server: Option<&crate::ServerShared>,
    out: &mut Reply,
) -> Result<(), CmdError> {
    match full {
        "dbsize" => {
            let mut n = 0;
            for s in 0..nshards {
                each(s, &mut |sh| n += sh.dbs[db].len());
            }
            out.int(n as i64);
        }
        "keys" => {
            let pattern = args.get(1);
            let all = pattern == b"*";
            let mut keys: Vec<SmallBytes> = Vec::new();
            for s in 0..nshards {
                each(s, &mut |sh| {
                    let now = sh.now_ms;
                    let d = &sh.dbs[db];
                    keys.extend(
                        d.iter()
                            .filter(|(k, e)| {
                                (all || ds::glob_match(pattern, k, false))
                                    && !d.is_expired(k, e, now)
                            })
                            .map(|(k, _)| SmallBytes::from(k)),
                    );
                });
            }
            out.array(keys.len());
            for k in &keys {
                out.bulk(k);
            }
        }
        "scan" => scan(args, db, nshards, each, out)?,
        "randomkey" => {
            let mut found: Vec<(usize, SmallBytes)> = Vec::new();
            for s in 0..nshards {
                each(s, &mut |sh| {
                    if let Some(k) = sh.random_key(db) {
                        found.push((sh.dbs[db].len(), k));
                    }
                });
            }
            // Weighted by size, as a client's RANDOMKEY (see `scan`).
            let total: usize = found.iter().map(|(n, _)| n).sum();
            if total == 0 {
                out.null();
                return Ok(());
            }
            let mut r = rand::thread_rng().gen_range(0..total);
            let pick = found.iter().find(|(n, _)| {
                let hit = r < *n;
                r = r.saturating_sub(*n);
                hit
            });
            match pick {
                Some((_, k)) => out.bulk(k),
                None => out.null(),
            }
        }
        "flushdb" | "flushall" => {
            let mode = parse_flush(args)?;
            // Each shard's change counter after its flush (see
            // `Persist::after_flushall`).
            let mut dirty = vec![0; nshards];
            for (s, d) in dirty.iter_mut().enumerate() {
                each(s, &mut |sh| {
                    let dbs = if full == "flushdb" {
                        db..db + 1
                    } else {
                        0..sh.dbs.len()
                    };
                    flush(sh, dbs, mode);
                    *d = sh.dirty();
                });
            }
            if let Some(server) = server {
                if full == "flushall" {
                    server.persist.after_flushall(server, &dirty);
                }
                invalidate_all(server);
            }
            out.ok();
        }
        "swapdb" => {
            let id = |i: usize, what: &str| {
                let n = crate::util::parse_i64(args.get(i)).map_err(|_| CmdError::err(what))?;
                i32::try_from(n).map_err(|_| CmdError::err(what))
            };
            let a = id(1, "invalid first DB index")?;
            let b = id(2, "invalid second DB index")?;
            let mut databases = 0;
            each(0, &mut |sh| databases = sh.dbs.len());
            let check = |x: i32| {
                usize::try_from(x)
                    .ok()
                    .filter(|&x| x < databases)
                    .ok_or(CmdError::DbIndexOutOfRange)
            };
            let (a, b) = (check(a)?, check(b)?);
            if a != b {
                let (lo, hi) = (a.min(b), a.max(b));
                for s in 0..nshards {
                    each(s, &mut |sh| {
                        let (x, y) = sh.dbs.split_at_mut(hi);
                        engine::Db::swap_contents(&mut x[lo], &mut y[0]);
                    });
                }
            }
            out.ok();
        }
        _ => return Err(CmdError::err("unknown keyspace command")),
    }
    Ok(())
}

/// SCAN from a script: a client's call's page (its shard by shard walk,
/// see `scan::ScanCursor`), in one go.
fn scan(
    args: Args<'_>,
    db: usize,
    nshards: usize,
    each: &mut Each<'_>,
    out: &mut Reply,
) -> Result<(), CmdError> {
    let cursor = parse_scan_cursor(args.get(1))?;
    let o = parse_scan_opts(args, 2, true)?;
    let Some((mut shard, mut at)) = ScanCursor::split(cursor, nshards) else {
        scan_reply(out, 0, &[]);
        return Ok(());
    };
    let (mut budget, mut gathered) = (o.count.saturating_mul(10), 0usize);
    let mut keys: Vec<SmallBytes> = Vec::new();
    loop {
        let mut next = 0;
        each(shard, &mut |sh| {
            let mut part = scan_collect(&sh.dbs[db], at, o.count - gathered, budget);
            part.keys
                .retain(|k| scan_keep(sh, db, k, o.pattern, o.type_name));
            gathered += part.gathered;
            budget = budget.saturating_sub(part.calls);
            keys.extend(part.keys);
            next = part.next;
        });
        if next == 0 && shard + 1 < nshards && gathered < o.count && budget > 0 {
            (shard, at) = (shard + 1, 0);
            continue;
        }
        scan_reply(out, ScanCursor::join(shard, next, nshards), &keys);
        return Ok(());
    }
}
