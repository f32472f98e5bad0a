//! Running one resolved command: the calls the runtime makes once
//! [`dispatch`] has decided where it runs (a shard handler on its shard, a
//! connection handler at home), and the statistics every call updates.
//! Request path: no allocation here beyond what a handler's reply needs,
//! no locks, no logging.

use std::time::Instant;

use engine::Shard;
use resp::{Args, Reply};

use crate::ctx::{ConnCtx, ShardCtx, ThreadStats};
use crate::error::CmdError;
use crate::table::{Resolved, ShardHandler};

pub use crate::dispatch::{dispatch, KeyScratch, Step};

/// Redis's `shared.oomerr`.
pub const OOM_ERROR: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// Writes `e` as an error reply and counts it.
pub fn reply_error(out: &mut Reply, stats: &mut ThreadStats, e: &CmdError) {
    let line = e.line();
    if !matches!(e, CmdError::Counted(_)) {
        stats.count_error(&line);
    }
    out.error_bytes(&line);
}

/// Counts a command rejected before running (unknown, arity, auth).
pub fn count_rejected(stats: &mut ThreadStats, id: Option<usize>) {
    if let Some(id) = id {
        stats.cmd[id].rejected_calls += 1;
    }
}

/// Records a finished call in the per-command statistics, its latency
/// histogram and the latency monitor. Returns its duration in
/// microseconds when the slowlog wants it: the caller, who has the
/// arguments, logs it ([`slowlog`]).
#[inline]
#[must_use]
pub fn record(
    stats: &mut ThreadStats,
    ops: &crate::ops::Ops,
    id: usize,
    started: Instant,
    failed: bool,
) -> Option<u64> {
    record_us(stats, ops, id, started.elapsed().as_micros() as u64, failed)
}

/// [`record`] for a call that took `us` microseconds (timed with
/// [`crate::clock`]).
#[inline]
#[must_use]
pub fn record_us(
    stats: &mut ThreadStats,
    ops: &crate::ops::Ops,
    id: usize,
    us: u64,
    failed: bool,
) -> Option<u64> {
    let s = &mut stats.cmd[id];
    s.calls += 1;
    s.usec += us;
    if failed {
        s.failed_calls += 1;
    }
    stats.total_commands += 1;
    ops.after_call(stats, id, us).then_some(us)
}

/// Logs a call of `r` that [`record`] found slow (`us`: its duration).
#[cold]
pub fn slowlog(
    ops: &crate::ops::Ops,
    r: Resolved,
    args: Args<'_>,
    us: u64,
    client: u64,
    label: Option<crate::ops::slowlog::Label>,
) {
    let name = crate::table::registry().full_name(r.id);
    // A script's call, held while its run may be taken back.
    if client == crate::ops::slowlog::SCRIPT_CLIENT
        && crate::script::traces::hold_slow(name, args, us, client)
    {
        return;
    }
    ops.slowlog.push(name, args, us, client, label);
}

/// Parameters of a shard execution that come from the client.
#[derive(Clone, Debug)]
pub struct ShardCall {
    pub db: usize,
    pub no_touch: bool,
    pub databases: usize,
    /// `proto-max-bulk-len`: the largest string a command may build.
    pub max_bulk_len: u64,
    /// The output hard limit of the client's class (`ctx::reply_cap_bytes`),
    /// 0 for none or for a caller that reads the reply whole (a script).
    pub reply_cap_bytes: u64,
    /// A blocking command may block (false inside MULTI/EXEC).
    pub may_block: bool,
    /// Runs inside a transaction (EXEC, a multi-shard command's run on
    /// gathered keys): its records go into that transaction's MULTI/EXEC.
    pub in_tx: bool,
    /// Shards in the process (a script checks that the keys it did not
    /// declare live on its own shard).
    pub nshards: usize,
    /// The restricted user running a script command (see `acl::caller`);
    /// `None` for everything else.
    pub caller: Option<std::sync::Arc<crate::acl::Caller>>,
    /// A script command of a client that tracks keys (CLIENT TRACKING's
    /// default mode): the script remembers its declared keys for it if it
    /// runs a read-only command (see `script::run`); `None` otherwise.
    pub tracker: Option<engine::Tracker>,
    /// A client whose invalidations are pushes on its own connection
    /// (`tracking::evicting_for`): keys evicted for its command are
    /// invalidated ahead of the reply, as Redis.
    pub evicting_for: Option<engine::Tracker>,
    /// The client's id (its slowlog entries name it; 0 for a script's
    /// commands).
    pub client: u64,
    /// SLOWLOG, LATENCY and MONITOR state.
    pub ops: &'static crate::ops::Ops,
    /// Run for a replica's master (see `ClientState::master`): no OOM
    /// refusal, and keys past their deadline are still there.
    pub master: bool,
}

/// Runs a shard handler on `shard` (inline on the home thread, or on the
/// owner's thread after a hop), writing its reply or error to `out`.
/// Returns what a blocking command waits for when it blocked instead of
/// replying (only when `call.may_block`).
pub fn run_shard(
    r: Resolved,
    handler: ShardHandler,
    args: Args<'_>,
    shard: &mut Shard,
    call: ShardCall,
    out: &mut Reply,
    stats: &mut ThreadStats,
) -> Option<crate::ctx::BlockOn> {
    run_shard_ready(r, handler, args, shard, call, out, stats, None)
}

/// [`run_shard`] for a blocked command served because `ready` became
/// ready: it pops from that key only (`ShardCtx::ready`).
#[allow(clippy::too_many_arguments)]
pub fn run_shard_ready(
    r: Resolved,
    handler: ShardHandler,
    args: Args<'_>,
    shard: &mut Shard,
    call: ShardCall,
    out: &mut Reply,
    stats: &mut ThreadStats,
    ready: Option<&[u8]>,
) -> Option<crate::ctx::BlockOn> {
    run_shard_with(
        r,
        handler,
        args,
        shard,
        call,
        out,
        stats,
        ready,
        (None, None),
    )
}

/// [`run_shard`] of a script command run on its sender's own thread while
/// the connection is out of its slot (`ShardCtx::sender`).
#[allow(clippy::too_many_arguments)]
pub fn run_shard_sent(
    r: Resolved,
    handler: ShardHandler,
    args: Args<'_>,
    shard: &mut Shard,
    call: ShardCall,
    out: &mut Reply,
    stats: &mut ThreadStats,
    sender: crate::ctx::Sender<'_>,
) -> Option<crate::ctx::BlockOn> {
    run_shard_with(
        r,
        handler,
        args,
        shard,
        call,
        out,
        stats,
        None,
        (None, Some(sender)),
    )
}

/// [`run_shard_ready`] of a script run in place across co-hosted shards
/// (`in_place`: the others it may reach, see `script::in_place`), or with
/// its sender lent (`ShardCtx::sender`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_shard_with(
    r: Resolved,
    handler: ShardHandler,
    args: Args<'_>,
    shard: &mut Shard,
    call: ShardCall,
    out: &mut Reply,
    stats: &mut ThreadStats,
    ready: Option<&[u8]>,
    (in_place, sender): (
        Option<&mut dyn crate::script::in_place::Shards>,
        Option<crate::ctx::Sender<'_>>,
    ),
) -> Option<crate::ctx::BlockOn> {
    // Redis's processCommand with maxmemory: evict, then refuse a command
    // that may grow memory if that did not help. One branch when unset.
    if shard.evict.maxmemory != 0 && !call.master {
        let ahead = call.evicting_for.filter(|_| !call.in_tx);
        let mark = ahead.map(|_| {
            shard.collect_touched();
            shard.outbox.invalidations_len()
        });
        let refused = shard.check_memory(r.spec.has(crate::table::flags::DENYOOM));
        if let (Some(me), Some(mark)) = (ahead, mark) {
            crate::tracking::invalidate_evicted(shard, &me, mark, out);
        }
        if refused {
            count_rejected(stats, Some(r.id));
            reply_error(out, stats, &CmdError::Raw(OOM_ERROR.into()));
            return None;
        }
    }
    let started = crate::clock::start();
    #[cfg(debug_assertions)]
    let said0 = said_so_mark(shard);
    let mut ctx = ShardCtx {
        shard,
        db: call.db,
        out: &mut *out,
        no_touch: call.no_touch,
        databases: call.databases,
        max_bulk_len: call.max_bulk_len,
        reply_cap_bytes: call.reply_cap_bytes,
        may_block: call.may_block,
        in_tx: call.in_tx,
        nshards: call.nshards,
        client: call.client,
        ops: call.ops,
        block: None,
        ready,
        caller: call.caller,
        tracker: call.tracker,
        // Reborrowed for the context's lifetime (the trait object's shortened).
        in_place: in_place.map(|s| s as &mut dyn crate::script::in_place::Shards),
        sender,
    };
    // A replica, or any server while clients are paused (see
    // `ops::pause`): a normal client's command reads keys past their
    // deadline as missing, without deleting them; a master's see them.
    // Restored after: a script's `redis.call` runs nested in its command.
    let expiry = ctx.shard.expiry;
    let keep = expiry != engine::Expiry::Delete || call.ops.pause.paused();
    if keep && !call.master {
        ctx.shard.expiry = engine::Expiry::Hide;
    }
    let script = r.spec.has(crate::table::flags::SCRIPT);
    let lent = script && crate::script::vm::lend_stats(stats);
    let res = handler(&mut ctx, args);
    // A writable replica's client wrote: its keys with a deadline are this
    // replica's to expire (`engine::Shard::remember_replica_key`).
    if expiry == engine::Expiry::Keep
        && !call.master
        && !ctx.shard.read_only_replica
        && r.spec.has(crate::table::flags::WRITE)
        && res.is_ok()
    {
        remember_replica_keys(r, args, &mut ctx);
    }
    if script {
        if lent {
            crate::script::vm::return_stats(stats);
        }
        // What scripts ran where the thread's statistics were not lent
        // (the thread's first script, a run on gathered copies).
        crate::script::vm::drain_stats(stats);
    }
    if keep {
        ctx.shard.expiry = expiry;
    }
    let block = ctx.block.take();
    // The command's invalidations, numbered after its records and events.
    shard.collect_touched();
    #[cfg(debug_assertions)]
    if res.is_ok() && block.is_none() {
        check_said_so(r, shard, said0);
    }
    if let Err(e) = &res {
        reply_error(out, stats, e);
        if matches!(e, CmdError::Rejected(_)) {
            count_rejected(stats, Some(r.id));
            return None;
        }
        if let Some(us) = record_us(stats, call.ops, r.id, started.elapsed_us(), true) {
            slowlog(call.ops, r, args, us, call.client, None);
        }
        return None;
    }
    // A blocked command is counted when it is served or times out.
    if block.is_none() {
        // A script that returned error replies below its top failed
        // (Redis's failed_calls counts errors since its last call).
        let failed =
            r.spec.has(crate::table::flags::SCRIPT) && crate::script::vm::take_nested_failed();
        if let Some(us) = record_us(stats, call.ops, r.id, started.elapsed_us(), failed) {
            slowlog(call.ops, r, args, us, call.client, None);
        }
    }
    block
}

/// The dirty counter and the outbox's emission counters before a handler
/// (see [`check_said_so`]).
#[cfg(debug_assertions)]
pub fn said_so_mark(shard: &Shard) -> (u64, u64, u64) {
    (shard.dirty(), shard.outbox.emitted, shard.outbox.implicit)
}

/// Debug builds: a handler that changed data (the dirty counter moved by
/// more than the keys expired or evicted on the way) must have emitted a
/// record saying what (`ShardCtx::propagate`), else the append-only file
/// and replicas would silently miss the change. The name is only read to
/// say which handler forgot.
#[cfg(debug_assertions)]
pub fn check_said_so(r: Resolved, shard: &Shard, (dirty0, emitted0, implicit0): (u64, u64, u64)) {
    let changed = shard.dirty() - dirty0;
    let implicit = shard.outbox.implicit - implicit0;
    let emitted = shard.outbox.emitted - emitted0;
    debug_assert!(
        changed <= implicit || emitted > 0,
        "{} changed data ({} changes) and emitted no record",
        crate::table::registry().full_name(r.id),
        changed - implicit
    );
}

/// Runs a connection handler.
pub fn run_conn(
    r: Resolved,
    handler: crate::table::ConnHandler,
    args: Args<'_>,
    ctx: &mut ConnCtx<'_>,
    stats: &mut ThreadStats,
) {
    let started = crate::clock::start();
    let res = handler(ctx, args);
    if let Err(e) = &res {
        reply_error(ctx.out, stats, e);
    }
    let ops = ctx.server.ops;
    if let Some(us) = record_us(stats, ops, r.id, started.elapsed_us(), res.is_err()) {
        let label = crate::ops::slowlog::label_of(ctx.client);
        slowlog(ops, r, args, us, ctx.client.id, Some(label));
    }
}

/// The keys of write command `r` that now have a deadline, remembered as
/// the writable replica's own (see `engine::Shard::remember_replica_key`).
#[cold]
fn remember_replica_keys(r: Resolved, args: Args<'_>, ctx: &mut ShardCtx<'_>) {
    let mut positions = Vec::new();
    r.spec.key_positions(args, &mut positions);
    let db = ctx.db;
    for p in positions {
        let key = args.get(p);
        if ctx.shard.dbs[db]
            .get_with_ttl(key)
            .is_some_and(|(_, at)| at != 0)
        {
            ctx.shard.remember_replica_key(db, key);
        }
    }
}
