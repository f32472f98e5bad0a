//! Dispatch: from a request's arguments to where it runs, the one routing
//! decision shared by the runtime and the in-process test driver. Request
//! path: no allocation for a single-shard command, no locks, no logging.
//!
//! [`dispatch`] is one straight line of three stages, each owned by one
//! module:
//!
//! 1. **Resolve** the command in the table (`table::Registry::resolve`):
//!    unknown command, unknown subcommand, arity.
//! 2. **Admit** it ([`crate::admit`]): every check of Redis's
//!    `processCommand`, in its order; a command may also be held (CLIENT
//!    PAUSE) or queued (MULTI, [`crate::multi::queue`]).
//! 3. **Route** it by its table entry ([`route`]): a connection command
//!    runs here at once; a shard command whose keys sit on one shard goes
//!    to that shard (inline when it is the home shard, the runtime
//!    decides); anything else becomes a coordinator, wrapped in a
//!    transaction ([`crate::tx::TxCoord`]) holding the locks it needs.
//!
//! A refusal at stage 1 or 2 is replied in one place ([`reject`]), as
//! Redis's `rejectCommand` does: counted against the command when its
//! name resolved, the open transaction flagged, and a refused EXEC ends
//! its transaction with EXECABORT.
//!
//! Alternatives rejected: checks spread over routing (each stage asking
//! the next one's questions) made the order of errors depend on which
//! path a command took, and sent a reader back and forth between five
//! modules for one request.

use std::time::Instant;

use resp::Args;

use crate::admit::Admission;
use crate::coord::Coordinator;
use crate::ctx::{ConnCtx, ThreadStats};
use crate::error::CmdError;
use crate::exec::{count_rejected, record, reply_error, run_conn, slowlog};
use crate::table::{
    registry, shard_of, target, CoordBuilder, Exec, Resolved, ShardHandler, Target,
};
use crate::tx::{LockSet, TxCoord};

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
    /// A script whose declared keys span shards (see `script::in_place`):
    /// the runtime runs it in place when every shard it needs is on its
    /// thread and free, else drives `script::wide::coordinator` with
    /// nothing found (built only then: it costs a gather plan, copies of
    /// the arguments and a transaction).
    Script {
        resolved: Resolved,
        handler: ShardHandler,
    },
    /// Drive this coordinator (see `coord`).
    Coord {
        resolved: Resolved,
        coord: Box<dyn crate::coord::Coordinator>,
    },
}

/// Buffers [`dispatch`] reuses from request to request, which the caller
/// keeps: the key positions of the request, and, for a keyed command
/// whose keys span shards ([`Step::Coord`] of a command with a
/// coordinator builder of its own: MSET, MGET, DEL ...), each key's shard,
/// `shards[i]` for `positions[i]`. `shards` is empty after any other
/// request, so the runtime can use it (`worker::home::prefetch_plan`)
/// instead of finding and hashing the keys again.
#[derive(Default, Debug)]
pub struct KeyScratch {
    pub positions: Vec<usize>,
    pub shards: Vec<u16>,
}

impl KeyScratch {
    /// The key positions and their shards of the request just dispatched,
    /// if dispatch computed them (see the type's docs).
    pub fn key_shards(&self) -> Option<(&[usize], &[u16])> {
        (!self.shards.is_empty() && self.shards.len() == self.positions.len())
            .then_some((&self.positions[..], &self.shards[..]))
    }
}

/// Resolves a request, admits it and decides where it runs (see the
/// module docs). `scratch`: buffers the caller keeps between requests.
pub fn dispatch(
    args: Args<'_>,
    ctx: &mut ConnCtx<'_>,
    stats: &mut ThreadStats,
    scratch: &mut KeyScratch,
) -> Step {
    scratch.shards.clear();
    let Some(r) = resolve(args, ctx, stats) else {
        return Step::Done;
    };
    match crate::admit::admit(r, args, ctx, &mut scratch.positions) {
        Admission::Run => {}
        Admission::Refused(e) => {
            reject(Some(r.id), r.spec.name == "exec", &e, ctx, stats);
            return Step::Done;
        }
        Admission::Paused => return Step::Paused,
        Admission::Queued => {
            crate::multi::queue(ctx.client, args, ctx.out);
            return Step::Done;
        }
    }
    if ctx.server.ops.monitors.active() && !ctx.client.reprocessing {
        crate::ops::monitor::dispatched(r, args, ctx);
    }
    route(r, args, ctx, stats, scratch)
}

/// Stage 1: the command's table entry, or `None` once its error is
/// replied. Sets CLIENT LIST's `cmd` as soon as the name resolves, as
/// Redis's processCommand does (also for a command queued in MULTI or
/// refused; an unknown one shows NULL).
fn resolve(args: Args<'_>, ctx: &mut ConnCtx<'_>, stats: &mut ThreadStats) -> Option<Resolved> {
    let reg = registry();
    ctx.client.last_cmd.clear();
    match reg.resolve(args) {
        Ok(r) => {
            ctx.client.last_cmd.push_str(reg.full_name(r.id));
            Some(r)
        }
        Err(e) => {
            if let CmdError::WrongArity(name) = &e {
                ctx.client.last_cmd.push_str(name);
            }
            // Counted against the command when its name resolved.
            let top = reg.top(args.get(0));
            let is_exec = top.is_some_and(|(_, s)| s.name == "exec");
            reject(top.map(|(id, _)| id), is_exec, &e, ctx, stats);
            None
        }
    }
}

/// Replies a refused command's error (Redis's `rejectCommand`): counts
/// it against command `id`, flags the open transaction, and ends it with
/// EXECABORT when the refused command is EXEC itself.
#[cold]
fn reject(
    id: Option<usize>,
    is_exec: bool,
    e: &CmdError,
    ctx: &mut ConnCtx<'_>,
    stats: &mut ThreadStats,
) {
    count_rejected(stats, id);
    if is_exec {
        crate::multi::exec_abort(ctx.client, ctx.out, stats, e);
    } else {
        reply_error(ctx.out, stats, e);
        crate::multi::flag_abort(ctx.client);
    }
}

/// Stage 3: where an admitted command runs, from its table entry.
#[inline]
fn route(
    r: Resolved,
    args: Args<'_>,
    ctx: &mut ConnCtx<'_>,
    stats: &mut ThreadStats,
    scratch: &mut KeyScratch,
) -> Step {
    match r.spec.exec {
        Exec::Conn(h) => {
            run_conn(r, h, args, ctx, stats);
            Step::Done
        }
        Exec::Shard(handler, multi) => {
            match target(r.spec, args, ctx.nshards(), &mut scratch.positions) {
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
                // `target` left the key positions in `scratch`.
                Target::Many => across_shards(r, handler, multi, args, ctx, stats, scratch),
            }
        }
        Exec::Coord(build) => {
            let locks = coordinated_locks(
                r,
                args,
                ctx.client.db,
                ctx.nshards(),
                ctx.server,
                &mut scratch.positions,
            );
            coordinate(r, build, args, ctx, stats, |_| locks)
        }
        Exec::Parent => {
            // INVARIANT: resolve() always descends into a subcommand.
            reply_error(ctx.out, stats, &CmdError::Syntax);
            Step::Done
        }
    }
}

/// A shard command whose keys (at the positions in `positions`) span
/// shards: its own coordinator when it has one (MSET, MGET, DEL ...),
/// else its handler run on copies of its keys (see `scratch`); either
/// way a transaction locking its keys.
#[allow(clippy::too_many_arguments)]
fn across_shards(
    r: Resolved,
    handler: ShardHandler,
    multi: Option<CoordBuilder>,
    args: Args<'_>,
    ctx: &mut ConnCtx<'_>,
    stats: &mut ThreadStats,
    scratch: &mut KeyScratch,
) -> Step {
    // A script may touch keys it did not declare: it runs over a key set
    // that can grow (see `script::wide`).
    if multi.is_none() && r.spec.has(crate::table::flags::SCRIPT) {
        return Step::Script {
            resolved: r,
            handler,
        };
    }
    let n = ctx.nshards();
    let db = ctx.client.db;
    let mut set = LockSet::default();
    let Some(build) = multi else {
        // Run on copies: the coordinator keeps the arguments, so the keys'
        // lock entries are made only when the transaction takes its locks.
        let coord = crate::scratch::coordinator(r.spec, handler, ctx, args, true);
        debug_assert!(coord.received_args().is_some());
        let shards = scratch.positions.iter();
        let shards = shards.map(|&p| shard_of(args.get(p), n) as u16);
        let set = LockSet::deferred(r.spec, db, shards).unwrap_or_default();
        return Step::Coord {
            resolved: r,
            coord: TxCoord::wrap(ctx.home, coord, set),
        };
    };
    // Each key's shard, hashed once for the locks, the builder and the
    // runtime (left in `scratch`).
    let KeyScratch { positions, shards } = scratch;
    shards.extend(positions.iter().map(|&p| shard_of(args.get(p), n) as u16));
    let mut ctx = ConnCtx {
        client: &mut *ctx.client,
        out: &mut *ctx.out,
        server: ctx.server,
        home: ctx.home,
        key_shards: shards,
    };
    // The keys' lock entries: made when the transaction takes its locks
    // if the coordinator keeps the arguments or the keys (a run without
    // locks never needs them), else now.
    let locks = |coord: &dyn Coordinator| {
        let deferred = if coord.received_args().is_some() {
            LockSet::deferred(r.spec, db, shards.iter().copied())
        } else {
            let groups = coord.key_groups();
            groups.and_then(|g| LockSet::deferred_groups(r.spec, db, g))
        };
        deferred.unwrap_or_else(|| {
            set.command_on(r.spec, args, db, positions, shards);
            set
        })
    };
    coordinate(r, build, args, &mut ctx, stats, locks)
}

/// The locks of a command with a coordinator of its own: those it plans
/// from its arguments (SORT with BY/GET patterns whose keys may live
/// anywhere); else its keys when they span shards (on one shard its
/// single job is atomic by itself); else, keyless, the whole keyspace it
/// reads or writes (`multi::keyspace_locks`).
fn coordinated_locks(
    r: Resolved,
    args: Args<'_>,
    db: usize,
    nshards: usize,
    server: &crate::ctx::ServerShared,
    scratch: &mut Vec<usize>,
) -> LockSet {
    if let Some(set) = r.spec.locks.and_then(|f| f(args, db, nshards, server)) {
        return set;
    }
    if r.spec.getkeys.is_none() && r.spec.keys.first == 0 {
        return crate::multi::keyspace_locks(r.spec, nshards);
    }
    let mut set = LockSet::default();
    if target(r.spec, args, nshards, scratch) == Target::Many {
        set.command(r.spec, args, db, nshards, scratch);
    }
    set
}

/// Builds the coordinator and wraps it in its transaction, whose locks
/// `locks` gives (it may look at the coordinator); a builder's error (a
/// syntax error found before any job) is the command's reply.
fn coordinate(
    r: Resolved,
    build: CoordBuilder,
    args: Args<'_>,
    ctx: &mut ConnCtx<'_>,
    stats: &mut ThreadStats,
    locks: impl FnOnce(&dyn Coordinator) -> LockSet,
) -> Step {
    match build(ctx, args) {
        Ok(coord) => {
            let mut locks = locks(&*coord);
            // WATCH (allow-busy) is answered while a script is busy, as in
            // Redis: its requests are not withdrawn for one
            // (`tx::BusyWithdrawn`).
            locks.keep_when_busy = r.spec.has(crate::table::flags::ALLOW_BUSY);
            Step::Coord {
                resolved: r,
                coord: TxCoord::wrap(ctx.home, coord, locks),
            }
        }
        Err(e) => {
            reply_error(ctx.out, stats, &e);
            // Refused before it ran (WATCH's `-BUSY`): a rejected call,
            // as Redis's rejectCommand counts it.
            if matches!(e, CmdError::Rejected(_)) {
                count_rejected(stats, Some(r.id));
                return Step::Done;
            }
            let ops = ctx.server.ops;
            if let Some(us) = record(stats, ops, r.id, Instant::now(), true) {
                let label = crate::ops::slowlog::label_of(ctx.client);
                slowlog(ops, r, args, us, ctx.client.id, Some(label));
            }
            Step::Done
        }
    }
}
