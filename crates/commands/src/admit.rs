//! Admission: whether a resolved command may run now, the second stage of
//! [`crate::dispatch`]. Request path: no allocation, no locks, no logging
//! while nothing refuses (each check is a flag test or one relaxed load).
//!
//! Every check lives here, in the order of Redis 7.0's `processCommand`,
//! because the order is visible to clients: a command that fails two
//! checks gets the first one's error (a `no-multi` command inside MULTI
//! while out of memory is refused as "not allowed inside a transaction",
//! not as OOM). The order:
//!
//! 0. a protected command (DEBUG; MODULE LOAD, LOADEX, UNLOAD) that
//!    `enable-debug-command` / `enable-module-command` does not allow
//!    this client;
//! 1. authentication (NOAUTH);
//! 2. a `no-multi` command inside MULTI;
//! 3. ACL (NOPERM);
//! 4. maxmemory (OOM), the part that needs no shard (see [`oom_refused`]);
//! 5. a failed save, or AOF write or fsync (MISCONF);
//! 6. `min-replicas-to-write` (NOREPLICAS);
//! 7. a read-only replica (READONLY);
//! 8. a RESP2 client with subscriptions;
//! 9. a replica whose master link is down (MASTERDOWN): a command without
//!    `stale`, a script or function whose flags lack `allow-stale`, EXEC
//!    of a queued one;
//! 10. a long script holding a shard the command needs (BUSY);
//! 11. CLIENT PAUSE (held, not refused);
//! 12. MULTI: queued instead of run.
//!
//! A replica's master is obeyed (Redis's `mustObeyClient`): no ACL, no
//! maxmemory, no replica checks. Checks 1 to 10 only say *what* refuses;
//! the caller replies it in one place, as Redis's `rejectCommand` does (a
//! refused EXEC ends its transaction with EXECABORT).

use resp::Args;

use crate::ctx::ConnCtx;
use crate::error::CmdError;
use crate::table::{flags, registry, shard_of, target, CommandSpec, Exec, Resolved, Target};

/// The verdict on one command.
pub enum Admission {
    /// Run it now.
    Run,
    /// Refused with this error (see [`crate::dispatch`]'s `reject`).
    Refused(CmdError),
    /// CLIENT PAUSE holds it: nothing happened (see `ops::pause`).
    Paused,
    /// Inside MULTI: queue it for EXEC.
    Queued,
}

/// Runs the checks in Redis's order (see the module docs). `scratch` is
/// the caller's key-position buffer (its contents are left undefined).
#[inline]
pub fn admit(
    r: Resolved,
    args: Args<'_>,
    ctx: &mut ConnCtx<'_>,
    scratch: &mut Vec<usize>,
) -> Admission {
    if let Some(e) = refusal(r, args, ctx, scratch) {
        return Admission::Refused(e);
    }
    // One atomic load while nothing is paused.
    if ctx.server.ops.pause.active()
        && !ctx.client.reprocessing
        && ctx.server.ops.pause.holds(r, args, ctx)
    {
        return Admission::Paused;
    }
    if ctx.client.multi.is_some() && !crate::multi::runs_in_multi(registry().full_name(r.id)) {
        return Admission::Queued;
    }
    Admission::Run
}

/// Checks 1 to 10 of the module docs: the first that refuses.
#[inline]
fn refusal(
    r: Resolved,
    args: Args<'_>,
    ctx: &mut ConnCtx<'_>,
    scratch: &mut Vec<usize>,
) -> Option<CmdError> {
    let spec = r.spec;
    let server = ctx.server;
    if spec.has(flags::PROTECTED) {
        if let Some(e) = protected_refusal(ctx, spec) {
            return Some(e);
        }
    }
    // Redis's authRequired: the default user may have become nopass since
    // this client connected.
    if !ctx.client.authenticated && !spec.has(flags::NO_AUTH) && !server.acl.default_open() {
        return Some(CmdError::NoAuth);
    }
    if ctx.client.multi.is_some()
        && spec.has(flags::NO_MULTI)
        && !crate::multi::runs_in_multi(registry().full_name(r.id))
    {
        return Some(CmdError::err("Command not allowed inside a transaction"));
    }
    let obey = ctx.client.master;
    if !obey {
        if let Some(e) = crate::acl::refusal(server, ctx.client, r, args) {
            return Some(e);
        }
    }
    if server
        .mem
        .maxmemory
        .load(std::sync::atomic::Ordering::Relaxed)
        != 0
        && !obey
        && oom_refused(r, args, ctx, scratch)
    {
        return Some(CmdError::Raw(crate::exec::OOM_ERROR.into()));
    }
    // One relaxed load.
    if let Some(e) = server.ops.disk_error() {
        if spec.name == "ping" || command_flags(r, args, ctx) & flags::WRITE != 0 {
            if !obey {
                return Some(CmdError::Raw(e.text()));
            }
            // A replica's master: panic, or apply it anyway (see there).
            server
                .ops
                .disk
                .obey_anyway(spec.name == "ping", replica_ignores_disk_errors(ctx));
        }
    }
    // Not enough good replicas (one relaxed load).
    if server.ops.refuses_writes() && command_flags(r, args, ctx) & flags::WRITE != 0 {
        return Some(CmdError::Raw(crate::repl::NOREPLICAS.into()));
    }
    // One relaxed load on a master.
    let replica = server.repl.replica_fast();
    if replica {
        let f = command_flags(r, args, ctx);
        if let Some(e) = crate::replica::read_only_refusal(server, ctx.client, f) {
            return Some(CmdError::Raw(e.into()));
        }
    }
    // A RESP2 client with subscriptions may only (un)subscribe, PING, QUIT
    // and RESET.
    if ctx.client.subs.is_some()
        && !ctx.client.resp3
        && !crate::pubsub::allowed_when_subscribed(spec.name)
    {
        return Some(crate::pubsub::refused_when_subscribed(
            registry().full_name(r.id),
        ));
    }
    if replica {
        if let Some(e) =
            crate::replica::stale_refusal(server, ctx.client, || denies_stale(r, args, ctx))
        {
            return Some(CmdError::Raw(e.into()));
        }
    }
    // One relaxed load when no script of this server is busy.
    if server.ops.busy.any() && !spec.has(flags::ALLOW_BUSY) {
        let queued = ctx.client.multi.is_some();
        let busy = &server.ops.busy;
        return busy_refusal(busy, r, args, ctx.home, ctx.nshards(), queued, scratch);
    }
    None
}

/// Redis's `-BUSY` for a command that needs a shard a long script holds
/// (see `script::busy`): a keyed command on that shard, a command over
/// every shard, or a command with no key at all (PING, INFO, CLIENT LIST,
/// a keyless EVAL...), which needs no shard but is answered as Redis
/// answers every command while a script is busy: health checks and the
/// scripts of Redis's own suite (unit/scripting's SCRIPT KILL tests) probe
/// a busy server with PING. Keyed commands on other shards run, on any
/// loop but the busy shard's own event loop (`home`), served from the
/// script's hook: there, as in Redis, only allow-busy commands run.
///
/// A command a client in MULTI sends (`queued`) needs no shard either
/// until EXEC, which is refused while a script is busy: it is answered
/// `-BUSY` as a keyless command, and the refusal fails the transaction's
/// EXEC (`EXECABORT`), as in Redis (unit/multi "MULTI-EXEC body and
/// script timeout"). Queuing it instead would run the transaction's
/// other commands without it after the script ends.
#[cold]
fn busy_refusal(
    busy: &crate::script::busy::Registry,
    r: Resolved,
    args: Args<'_>,
    home: usize,
    nshards: usize,
    queued: bool,
    scratch: &mut Vec<usize>,
) -> Option<CmdError> {
    let refuse_if_busy = |shards: Option<&[usize]>| busy.refuse_if_busy(shards);
    if let Some(e) = refuse_if_busy(Some(&[home])) {
        return Some(e);
    }
    if queued && !matches!(r.spec.exec, Exec::Parent) {
        return refuse_if_busy(None);
    }
    let shards_of = |scratch: &[usize]| -> Vec<usize> {
        scratch
            .iter()
            .map(|&p| shard_of(args.get(p), nshards))
            .collect()
    };
    match r.spec.exec {
        Exec::Shard(..) => match target(r.spec, args, nshards, scratch) {
            Target::NoKeys => refuse_if_busy(None),
            Target::One(s) => refuse_if_busy(Some(&[s])),
            Target::Many => refuse_if_busy(Some(&shards_of(scratch))),
        },
        Exec::Coord(_) => {
            if r.spec.getkeys.is_some() || r.spec.keys.first > 0 {
                r.spec.key_positions(args, scratch);
                refuse_if_busy(Some(&shards_of(scratch)))
            } else {
                refuse_if_busy(None)
            }
        }
        Exec::Conn(_) => refuse_if_busy(None),
        // Replied as an unknown subcommand or arity error (Redis looks
        // the command up before any busy check).
        Exec::Parent => None,
    }
}

/// The part of Redis's maxmemory check in `processCommand` that needs no
/// shard: commands queued in MULTI (any command but EXEC, DISCARD, QUIT
/// and RESET is refused while out of memory), EXEC of a transaction
/// holding a `denyoom` command (the transaction is discarded), and
/// `denyoom` commands whose keys span shards. Single-shard commands are
/// checked where they run, by their shard (`exec::run_shard`), which can
/// evict first. True if the command is refused.
#[cold]
fn oom_refused(r: Resolved, args: Args<'_>, ctx: &ConnCtx<'_>, scratch: &mut Vec<usize>) -> bool {
    let reg = registry();
    let name = reg.full_name(r.id);
    let is_exec = name == "exec";
    let denyoom = if is_exec {
        command_flags(r, args, ctx) & flags::DENYOOM != 0
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
    (elsewhere && (denyoom || in_multi)) && ctx.server.mem.out_of_memory()
}

/// A protected command (DEBUG; MODULE LOAD, LOADEX, UNLOAD) for a client
/// that `enable-debug-command` / `enable-module-command` does not allow:
/// Redis's refusal, before any other check. Local: a unix socket or a
/// loopback peer.
#[cold]
fn protected_refusal(ctx: &ConnCtx<'_>, spec: &CommandSpec) -> Option<CmdError> {
    let debug = spec.name == "debug";
    let allowed = {
        let cfg = ctx.server.config.read().unwrap_or_else(|e| e.into_inner());
        if debug {
            cfg.enable_debug_command
        } else {
            cfg.enable_module_command
        }
    };
    let c = &ctx.client;
    let local = c.unix
        || ["127.0.0.1:", "::1:", "[::1]:"]
            .iter()
            .any(|p| c.addr.starts_with(p));
    let (command, option) = if debug {
        ("DEBUG", "enable-debug-command")
    } else {
        ("MODULE", "enable-module-command")
    };
    (!allowed.allows(local)).then(|| {
        CmdError::err(format!(
            "{command} command not allowed. If the {option} option is set to \"local\", you can \
             run it from a local connection, otherwise you need to set this option in the \
             configuration file, and then restart the server."
        ))
    })
}

/// `replica-ignore-disk-write-errors` (read only while a disk error
/// stands: a read of the config).
#[cold]
fn replica_ignores_disk_errors(ctx: &ConnCtx<'_>) -> bool {
    let cfg = ctx.server.config.read().unwrap_or_else(|e| e.into_inner());
    cfg.replica_ignore_disk_write_errors
}

/// Redis's `getCommandFlags` for the write checks (MISCONF, NOREPLICAS,
/// READONLY, and OOM for EXEC): a script or function with declared flags
/// is a write (`WRITE`) unless `no-writes`, and `DENYOOM` unless also
/// `allow-oom` (`scriptFlagsToCmdFlags`); EXEC carries what its queued
/// commands carry (`mstate.cmd_flags`). Called only while a check could
/// refuse (a cache or library lookup per script; a pass over the queue).
#[cold]
fn command_flags(r: Resolved, args: Args<'_>, ctx: &ConnCtx<'_>) -> u32 {
    let reg = registry();
    if reg.full_name(r.id) == "exec" {
        let Some(m) = ctx.client.multi.as_ref() else {
            return r.spec.flags;
        };
        return m.queued.iter().fold(r.spec.flags, |f, q| {
            let owned = resp::OwnedArgs::from_slices(q);
            match reg.resolve(owned.args()) {
                Ok(q) => {
                    let q_flags = one_command_flags(q, owned.args(), ctx.server.ops);
                    f | (q_flags & (flags::WRITE | flags::DENYOOM))
                }
                Err(_) => f,
            }
        });
    }
    one_command_flags(r, args, ctx.server.ops)
}

/// [`command_flags`] of one command (not EXEC): a script's or function's
/// declared flags replace its command's `write`, `denyoom` and `stale`
/// (Redis's `scriptFlagsToCmdFlags`).
fn one_command_flags(r: Resolved, args: Args<'_>, ops: &crate::ops::Ops) -> u32 {
    let Some(sf) = crate::script::declared_flags(r, args, ops) else {
        return r.spec.flags;
    };
    let mut f = r.spec.flags & !(flags::WRITE | flags::DENYOOM | flags::STALE);
    if !sf.no_writes {
        f |= flags::WRITE;
        if !sf.allow_oom {
            f |= flags::DENYOOM;
        }
    }
    if sf.allow_stale {
        f |= flags::STALE;
    }
    f
}

/// Redis's `is_denystale_command`: the command lacks the `stale` flag (a
/// script or function: unless it declares `allow-stale`), or it is EXEC
/// and one of its queued commands does (`mstate.cmd_inv_flags`). Called
/// only on a stale replica.
#[cold]
fn denies_stale(r: Resolved, args: Args<'_>, ctx: &ConnCtx<'_>) -> bool {
    let ops = ctx.server.ops;
    if one_command_flags(r, args, ops) & flags::STALE == 0 {
        return true;
    }
    let reg = registry();
    if reg.full_name(r.id) != "exec" {
        return false;
    }
    let Some(m) = ctx.client.multi.as_ref() else {
        return false;
    };
    m.queued.iter().any(|q| {
        let owned = resp::OwnedArgs::from_slices(q);
        reg.resolve(owned.args())
            .is_ok_and(|q| one_command_flags(q, owned.args(), ops) & flags::STALE == 0)
    })
}
