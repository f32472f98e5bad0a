//! Keyspace commands (Redis's `db.c` / `expire.c`): existence, deletion,
//! expiry, renaming, iteration. Request path.

use resp::{Args, Reply};

use crate::coord::{fan_out, group_by_shard, Coordinator, OneStep, Plan};
use crate::ctx::{ClientState, ConnCtx, ShardCtx};
use crate::error::CmdError;
use crate::table::{flags::*, keys, CommandSpec, Exec, NO_KEYS};

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
        "exists",
        -2,
        READONLY | FAST,
        keys(1, -1, 1),
        Exec::Shard(exists, Some(exists_multi)),
        &["keyspace", "read", "fast"],
    ),
    CommandSpec::new(
        "dbsize",
        1,
        READONLY | FAST,
        NO_KEYS,
        Exec::Coord(dbsize),
        &["keyspace", "read", "fast"],
    ),
];

/// DEL key [key ...]: the number of keys removed.
fn del(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let n = args
        .iter()
        .skip(1)
        .filter(|k| ctx.shard.remove(ctx.db, k).is_some())
        .count();
    ctx.out.int(n as i64);
    Ok(())
}

/// Sums a per-shard count over the shards holding the keys.
fn count_multi(
    c: &mut ConnCtx<'_>,
    args: Args<'_>,
    op: fn(&mut engine::Shard, usize, &[u8]) -> bool,
) -> Box<dyn Coordinator> {
    let positions: Vec<usize> = (1..args.len()).collect();
    let db = c.client.db;
    let mut plan = Plan::default();
    for (shard, pos) in group_by_shard(args, &positions, c.nshards()) {
        let keys: Vec<Vec<u8>> = pos.iter().map(|&p| args.get(p).to_vec()).collect();
        plan.run(shard, move |env| {
            keys.iter().filter(|k| op(env.shard, db, k)).count() as i64
        });
    }
    OneStep::new(
        plan,
        |res: Vec<i64>, out: &mut Reply, _: &mut ClientState| {
            out.int(res.iter().sum());
            Ok(())
        },
    )
}

fn del_multi(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    Ok(count_multi(c, args, |s, db, k| s.remove(db, k).is_some()))
}

/// EXISTS key [key ...]: how many of the keys exist (repeats count again).
fn exists(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let n = args
        .iter()
        .skip(1)
        .filter(|k| ctx.shard.exists(ctx.db, k))
        .count();
    ctx.out.int(n as i64);
    Ok(())
}

fn exists_multi(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    Ok(count_multi(c, args, |s, db, k| s.exists(db, k)))
}

/// DBSIZE: keys in the selected database, over all shards.
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
