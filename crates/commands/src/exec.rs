//! Running one resolved command: the calls the runtime makes. Request path:
//! no allocation here beyond what a handler's reply needs, no locks, no
//! logging.

use std::time::Instant;

use engine::Shard;
use resp::{Args, Reply};

use crate::ctx::{ConnCtx, ShardCtx, ThreadStats};
use crate::error::CmdError;
use crate::table::{Resolved, ShardHandler};

/// Redis's `shared.oomerr`.
pub const OOM_ERROR: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// Writes `e` as an error reply and counts it.
pub fn reply_error(out: &mut Reply, stats: &mut ThreadStats, e: &CmdError) {
    let line = e.line();
    stats.count_error(&line);
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
    let us = started.elapsed().as_micros() as u64;
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
    // Redis's processCommand with maxmemory: evict, then refuse a command
    // that may grow memory if that did not help. One branch when unset.
    if shard.evict.maxmemory != 0
        && !call.master
        && shard.check_memory(r.spec.has(crate::table::flags::DENYOOM))
    {
        count_rejected(stats, Some(r.id));
        reply_error(out, stats, &CmdError::Raw(OOM_ERROR.into()));
        return None;
    }
    let started = Instant::now();
    #[cfg(debug_assertions)]
    let said0 = said_so_mark(shard);
    let mut ctx = ShardCtx {
        shard,
        db: call.db,
        out: &mut *out,
        no_touch: call.no_touch,
        databases: call.databases,
        max_bulk_len: call.max_bulk_len,
        may_block: call.may_block,
        in_tx: call.in_tx,
        nshards: call.nshards,
        client: call.client,
        ops: call.ops,
        block: None,
        ready,
        caller: call.caller,
        tracker: call.tracker,
    };
    // A replica: a normal client's command reads keys past their deadline
    // as missing; its master's see them (one branch on a master).
    // Restored after: a script's `redis.call` runs nested in its command.
    let expiry = ctx.shard.expiry;
    let replica = expiry != engine::Expiry::Delete;
    if replica && !call.master {
        ctx.shard.expiry = engine::Expiry::Hide;
    }
    let res = handler(&mut ctx, args);
    if replica {
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
        if let Some(us) = record(stats, call.ops, r.id, started, true) {
            slowlog(call.ops, r, args, us, call.client, None);
        }
        return None;
    }
    // A blocked command is counted when it is served or times out.
    if block.is_none() {
        if let Some(us) = record(stats, call.ops, r.id, started, false) {
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
    let started = Instant::now();
    let res = handler(ctx, args);
    if let Err(e) = &res {
        reply_error(ctx.out, stats, e);
    }
    let ops = ctx.server.ops;
    if let Some(us) = record(stats, ops, r.id, started, res.is_err()) {
        let label = crate::ops::slowlog::label_of(ctx.client);
        slowlog(ops, r, args, us, ctx.client.id, Some(label));
    }
}

/// What the runtime must do with one request after [`dispatch`].
pub enum Step {
    /// Finished on the home thread; the reply (or error) is in `out`.
    Done,
    /// Run `handler` on `shard`: inline if it is the home shard, through a
    /// hop otherwise.
    Shard {
        shard: usize,
        resolved: Resolved,
        handler: ShardHandler,
    },
    /// Set by the runtime, never by dispatch: a transaction's lock holds
    /// the command back.
    Blocked,
    /// CLIENT PAUSE holds the command: nothing happened; the runtime
    /// dispatches it again when the pause changes or ends (see
    /// `ops::pause`).
    Paused,
    /// Drive this coordinator (see `coord`).
    Coord {
        resolved: Resolved,
        coord: Box<dyn crate::coord::Coordinator>,
    },
}

/// Resolves a request and decides where it runs: the one routing decision,
/// shared by the runtime and the in-process test driver. Unknown commands,
/// arity and authentication errors are replied here.
pub fn dispatch(
    args: Args<'_>,
    ctx: &mut ConnCtx<'_>,
    stats: &mut ThreadStats,
    scratch: &mut Vec<usize>,
) -> Step {
    use crate::table::{flags, target, Exec, Target};
    let reg = crate::table::registry();
    // CLIENT LIST's `cmd`: set as soon as the name resolves, as Redis's
    // processCommand does (also for a command queued in MULTI or refused;
    // an unknown one shows NULL).
    ctx.client.last_cmd.clear();
    let r = match reg.resolve(args) {
        Ok(r) => r,
        Err(e) => {
            if let CmdError::WrongArity(name) = &e {
                ctx.client.last_cmd.push_str(name);
            }
            // Counted against the command when its name resolved.
            let top = reg.top(args.get(0));
            count_rejected(stats, top.map(|(id, _)| id));
            if top.is_some_and(|(_, s)| s.name == "exec") {
                // Redis's execCommandAbort: a rejected EXEC ends the
                // transaction, naming the reason.
                crate::multi::exec_abort(ctx.client, ctx.out, stats, &e);
                return Step::Done;
            }
            reply_error(ctx.out, stats, &e);
            crate::multi::flag_abort(ctx.client);
            return Step::Done;
        }
    };
    ctx.client.last_cmd.push_str(reg.full_name(r.id));
    // Redis's authRequired: the default user may have become nopass since
    // this client connected.
    if !ctx.client.authenticated && !r.spec.has(flags::NO_AUTH) && !ctx.server.acl.default_open() {
        count_rejected(stats, Some(r.id));
        if r.spec.name == "exec" {
            crate::multi::exec_abort(ctx.client, ctx.out, stats, &CmdError::NoAuth);
            return Step::Done;
        }
        reply_error(ctx.out, stats, &CmdError::NoAuth);
        crate::multi::flag_abort(ctx.client);
        return Step::Done;
    }
    // ACL (Redis's processCommand order: after NOAUTH and the no-multi
    // refusal, which comes below here and so is skipped for the check).
    let no_multi = ctx.client.multi.is_some() && r.spec.has(flags::NO_MULTI);
    // A replica's master is obeyed: no ACL, no maxmemory (Redis's
    // mustObeyClient).
    let obey = ctx.client.master;
    if !no_multi && !obey && !crate::acl::permitted(ctx.server, ctx.client, r, args, ctx.out, stats)
    {
        return Step::Done;
    }
    // Redis's processCommand order: maxmemory first, then disk errors.
    if ctx
        .server
        .mem
        .maxmemory
        .load(std::sync::atomic::Ordering::Relaxed)
        != 0
        && !obey
        && oom_refused(r, args, ctx, stats, scratch)
    {
        return Step::Done;
    }
    // One relaxed load while saves succeed.
    if ctx.server.persist.refuses_writes(ctx.server)
        && (r.spec.has(flags::WRITE) || r.spec.name == "ping")
    {
        count_rejected(stats, Some(r.id));
        reply_error(
            ctx.out,
            stats,
            &CmdError::Raw(crate::persist::MISCONF.into()),
        );
        crate::multi::flag_abort(ctx.client);
        return Step::Done;
    }
    // Redis's processCommand: not enough good replicas (min-replicas-to-
    // write; one relaxed load).
    if ctx.server.repl.refuses_writes() && r.spec.has(flags::WRITE) {
        count_rejected(stats, Some(r.id));
        reply_error(
            ctx.out,
            stats,
            &CmdError::Raw(crate::repl::NOREPLICAS.into()),
        );
        crate::multi::flag_abort(ctx.client);
        return Step::Done;
    }
    // A replica: READONLY and MASTERDOWN (one relaxed load on a master).
    if ctx.server.repl.replica_fast() {
        if let Some(e) = crate::replica::refusal(ctx.server, ctx.client, r.spec.flags) {
            count_rejected(stats, Some(r.id));
            reply_error(ctx.out, stats, &CmdError::Raw(e.into()));
            crate::multi::flag_abort(ctx.client);
            return Step::Done;
        }
    }
    // A long script holds a shard this command needs (one relaxed load
    // when none does).
    if crate::script::busy::any() && !r.spec.has(flags::ALLOW_BUSY) {
        if let Some(e) = busy_refusal(r, args, ctx.home, ctx.nshards(), scratch) {
            count_rejected(stats, Some(r.id));
            if r.spec.name == "exec" && ctx.client.multi.is_some() {
                // Redis's EXEC is allow-busy: it discards the transaction
                // its refused commands flagged.
                crate::multi::exec_abort(ctx.client, ctx.out, stats, &e);
                return Step::Done;
            }
            reply_error(ctx.out, stats, &e);
            crate::multi::flag_abort(ctx.client);
            return Step::Done;
        }
    }
    // Redis's processCommand: a RESP2 client with subscriptions may only
    // (un)subscribe, PING, QUIT and RESET.
    if ctx.client.subs.is_some()
        && !ctx.client.resp3
        && !crate::pubsub::allowed_when_subscribed(r.spec.name)
    {
        count_rejected(stats, Some(r.id));
        let e = crate::pubsub::refused_when_subscribed(reg.full_name(r.id));
        reply_error(ctx.out, stats, &e);
        crate::multi::flag_abort(ctx.client);
        return Step::Done;
    }
    // CLIENT PAUSE: one atomic load while nothing is paused.
    if ctx.server.ops.pause.active()
        && !ctx.client.reprocessing
        && ctx.server.ops.pause.holds(r, args, ctx)
    {
        return Step::Paused;
    }
    if ctx.client.multi.is_some() && !crate::multi::runs_in_multi(reg.full_name(r.id)) {
        if r.spec.has(flags::NO_MULTI) {
            count_rejected(stats, Some(r.id));
            reply_error(
                ctx.out,
                stats,
                &CmdError::err("Command not allowed inside a transaction"),
            );
            crate::multi::flag_abort(ctx.client);
        } else {
            crate::multi::queue(ctx.client, args, ctx.out);
        }
        return Step::Done;
    }
    if ctx.server.ops.monitors.active() && !ctx.client.reprocessing {
        crate::ops::monitor::dispatched(r, args, ctx);
    }
    match r.spec.exec {
        Exec::Conn(h) => {
            run_conn(r, h, args, ctx, stats);
            Step::Done
        }
        Exec::Shard(handler, multi) => match target(r.spec, args, ctx.nshards(), scratch) {
            Target::NoKeys => Step::Shard {
                shard: ctx.home,
                resolved: r,
                handler,
            },
            Target::One(shard) => Step::Shard {
                shard,
                resolved: r,
                handler,
            },
            Target::Many => {
                let mut set = crate::tx::LockSet::default();
                match multi {
                    Some(build) => {
                        // Each key's shard, hashed once for the locks and
                        // the builder (`target` left the key positions in
                        // `scratch`).
                        let n = ctx.nshards();
                        let shards: Vec<u16> = scratch
                            .iter()
                            .map(|&p| crate::table::shard_of(args.get(p), n) as u16)
                            .collect();
                        set.command_on(r.spec, args, ctx.client.db, scratch, &shards);
                        let mut ctx = ConnCtx {
                            client: &mut *ctx.client,
                            out: &mut *ctx.out,
                            server: ctx.server,
                            home: ctx.home,
                            key_shards: &shards,
                        };
                        coordinate(r, build, args, &mut ctx, stats, set)
                    }
                    // A script may touch keys it did not declare: it runs
                    // over a key set that can grow (see `script::wide`).
                    None if r.spec.has(flags::SCRIPT) => {
                        crate::script::wide::step(r, handler, ctx, args)
                    }
                    // No coordinator of its own: the handler runs on copies
                    // of its keys (see `scratch`).
                    None => {
                        set.command(r.spec, args, ctx.client.db, ctx.nshards(), scratch);
                        Step::Coord {
                            resolved: r,
                            coord: crate::tx::TxCoord::wrap(
                                ctx.home,
                                crate::scratch::coordinator(r.spec, handler, ctx, args, true),
                                set,
                            ),
                        }
                    }
                }
            }
        },
        Exec::Coord(build) => {
            let declares_keys = r.spec.getkeys.is_some() || r.spec.keys.first > 0;
            let planned = r
                .spec
                .locks
                .and_then(|f| f(args, ctx.client.db, ctx.nshards()));
            // Locks the command plans from its arguments (SORT with BY/GET
            // patterns whose keys may live anywhere) come first.
            let set = if let Some(set) = planned {
                set
            } else if declares_keys {
                // A keyed coordinated command (SORT): lock its keys when
                // they span shards; on one shard its single job is atomic
                // by itself.
                let mut set = crate::tx::LockSet::default();
                if target(r.spec, args, ctx.nshards(), scratch) == Target::Many {
                    set.command(r.spec, args, ctx.client.db, ctx.nshards(), scratch);
                }
                set
            } else {
                crate::multi::keyspace_locks(r.spec, ctx.nshards())
            };
            coordinate(r, build, args, ctx, stats, set)
        }
        Exec::Parent => {
            // INVARIANT: resolve() always descends into a subcommand.
            reply_error(ctx.out, stats, &CmdError::Syntax);
            Step::Done
        }
    }
}

/// Redis's `-BUSY` for a command that needs a shard a long script holds
/// (see `script::busy`): a keyed command on that shard, or a command over
/// every shard. Commands on other shards, and connection commands, run,
/// except on the busy shard's own event loop (`home`), served from the
/// script's hook: there, as in Redis, only allow-busy commands run.
#[cold]
fn busy_refusal(
    r: Resolved,
    args: Args<'_>,
    home: usize,
    nshards: usize,
    scratch: &mut Vec<usize>,
) -> Option<CmdError> {
    use crate::script::busy::refuse_if_busy;
    use crate::table::{shard_of, target, Exec, Target};
    if let Some(e) = refuse_if_busy(Some(&[home])) {
        return Some(e);
    }
    match r.spec.exec {
        Exec::Shard(..) => match target(r.spec, args, nshards, scratch) {
            Target::NoKeys => None,
            Target::One(s) => refuse_if_busy(Some(&[s])),
            Target::Many => {
                let shards: Vec<usize> = scratch
                    .iter()
                    .map(|&p| shard_of(args.get(p), nshards))
                    .collect();
                refuse_if_busy(Some(&shards))
            }
        },
        Exec::Coord(_) => {
            if r.spec.getkeys.is_some() || r.spec.keys.first > 0 {
                r.spec.key_positions(args, scratch);
                let shards: Vec<usize> = scratch
                    .iter()
                    .map(|&p| shard_of(args.get(p), nshards))
                    .collect();
                refuse_if_busy(Some(&shards))
            } else {
                refuse_if_busy(None)
            }
        }
        Exec::Conn(_) | Exec::Parent => None,
    }
}

/// The part of Redis's maxmemory check in `processCommand` that needs no
/// shard: commands queued in MULTI (any command but EXEC, DISCARD, QUIT
/// and RESET is refused while out of memory), EXEC of a transaction
/// holding a `denyoom` command (the transaction is discarded), and
/// `denyoom` commands whose keys span shards. Single-shard commands are
/// checked where they run, by their shard (`run_shard`), which can evict
/// first. True if the command was refused (the reply is written).
#[cold]
fn oom_refused(
    r: crate::table::Resolved,
    args: Args<'_>,
    ctx: &mut ConnCtx<'_>,
    stats: &mut ThreadStats,
    scratch: &mut Vec<usize>,
) -> bool {
    use crate::table::{flags, target, Exec, Target};
    let reg = crate::table::registry();
    let name = reg.full_name(r.id);
    let is_exec = name == "exec";
    let denyoom = if is_exec {
        ctx.client.multi.as_ref().is_some_and(|m| {
            m.queued.iter().any(|q| {
                let owned = resp::OwnedArgs::from_slices(q);
                reg.resolve(owned.args())
                    .is_ok_and(|q| q.spec.has(flags::DENYOOM))
            })
        })
    } else {
        r.spec.has(flags::DENYOOM)
    };
    let in_multi =
        ctx.client.multi.is_some() && !matches!(name, "exec" | "discard" | "quit" | "reset");
    let elsewhere = in_multi
        || is_exec
        || match r.spec.exec {
            Exec::Coord(_) => true,
            Exec::Shard(..) => target(r.spec, args, ctx.nshards(), scratch) == Target::Many,
            _ => false,
        };
    if !(elsewhere && (denyoom || in_multi)) || !ctx.server.mem.out_of_memory() {
        return false;
    }
    count_rejected(stats, Some(r.id));
    let e = CmdError::Raw(OOM_ERROR.into());
    if is_exec {
        crate::multi::exec_abort(ctx.client, ctx.out, stats, &e);
    } else {
        reply_error(ctx.out, stats, &e);
        crate::multi::flag_abort(ctx.client);
    }
    true
}

fn coordinate(
    r: Resolved,
    build: crate::table::CoordBuilder,
    args: Args<'_>,
    ctx: &mut ConnCtx<'_>,
    stats: &mut ThreadStats,
    locks: crate::tx::LockSet,
) -> Step {
    match build(ctx, args) {
        Ok(coord) => Step::Coord {
            resolved: r,
            coord: crate::tx::TxCoord::wrap(ctx.home, coord, locks),
        },
        Err(e) => {
            reply_error(ctx.out, stats, &e);
            let ops = ctx.server.ops;
            if let Some(us) = record(stats, ops, r.id, Instant::now(), true) {
                let label = crate::ops::slowlog::label_of(ctx.client);
                slowlog(ops, r, args, us, ctx.client.id, Some(label));
            }
            Step::Done
        }
    }
}
