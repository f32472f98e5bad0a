//! Running one resolved command: the calls the runtime makes. Request path:
//! no allocation here beyond what a handler's reply needs, no locks, no
//! logging.

use std::time::Instant;

use engine::Shard;
use resp::{Args, Reply};

use crate::ctx::{ConnCtx, ShardCtx, ThreadStats};
use crate::error::CmdError;
use crate::table::{Resolved, ShardHandler};

/// Writes `e` as an error reply and counts it.
pub fn reply_error(out: &mut Reply, stats: &mut ThreadStats, e: &CmdError) {
    let line = e.to_string();
    stats.count_error(&line);
    out.error(&line);
}

/// Counts a command rejected before running (unknown, arity, auth).
pub fn count_rejected(stats: &mut ThreadStats, id: Option<usize>) {
    if let Some(id) = id {
        stats.cmd[id].rejected_calls += 1;
    }
}

/// Records a finished call in the per-command statistics.
#[inline]
pub fn record(stats: &mut ThreadStats, id: usize, started: Instant, failed: bool) {
    let s = &mut stats.cmd[id];
    s.calls += 1;
    s.usec += started.elapsed().as_micros() as u64;
    if failed {
        s.failed_calls += 1;
    }
    stats.total_commands += 1;
}

/// Parameters of a shard execution that come from the client.
#[derive(Clone, Copy, Debug)]
pub struct ShardCall {
    pub db: usize,
    pub no_touch: bool,
    pub databases: usize,
}

/// Runs a shard handler on `shard` (inline on the home thread, or on the
/// owner's thread after a hop), writing its reply or error to `out`.
pub fn run_shard(
    r: Resolved,
    handler: ShardHandler,
    args: Args<'_>,
    shard: &mut Shard,
    call: ShardCall,
    out: &mut Reply,
    stats: &mut ThreadStats,
) {
    let started = Instant::now();
    let mut ctx = ShardCtx {
        shard,
        db: call.db,
        out: &mut *out,
        no_touch: call.no_touch,
        databases: call.databases,
    };
    let res = handler(&mut ctx, args);
    if let Err(e) = &res {
        reply_error(out, stats, e);
    }
    record(stats, r.id, started, res.is_err());
}

/// Runs a connection handler.
pub fn run_conn(
    r: Resolved,
    handler: crate::table::ConnHandler,
    args: Args<'_>,
    ctx: &mut ConnCtx<'_>,
    stats: &mut ThreadStats,
) {
    let started = Instant::now();
    let res = handler(ctx, args);
    if let Err(e) = &res {
        reply_error(ctx.out, stats, e);
    }
    record(stats, r.id, started, res.is_err());
}
