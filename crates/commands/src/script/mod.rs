//! Lua scripting: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, SCRIPT, and
//! functions (FUNCTION, FCALL, FCALL_RO), with Redis 7.0's semantics
//! (issue 23).
//!
//! # Where a script runs, and why it is atomic
//!
//! EVAL (and FCALL, routed the same way) is an ordinary keyed shard command whose keys are its declared
//! `KEYS` (`numkeys` of them), so dispatch routes it like any other:
//!
//! * **All declared keys on one shard** (the common case, and any script
//!   whose keys share a `{hashtag}`): the handler runs on that shard's
//!   thread, inline when it is the connection's home, with no extra hop
//!   and no lock. The whole script is one handler call, so nothing else
//!   runs on that shard meanwhile. A script declaring no keys runs on the
//!   home shard. Because a script may touch keys it did not declare, a
//!   plain EVAL is held back while *any* transaction holds a lock on its
//!   shard (`flags::SCRIPT`, checked by the runtime), and locks taken for
//!   it (inside MULTI, or across shards) are write locks.
//! * **Declared keys on several shards, all co-hosted and free**: the
//!   runtime runs the handler once on the real shards, in place, each
//!   `redis.call` on the shard of its keys by a call (`in_place`: the
//!   shards share the connection's thread and are pinned, so nothing else
//!   runs on them meanwhile; no lock, no copy).
//! * **Declared keys on several shards, otherwise**: the same handler
//!   runs through the scratch coordinator (`crate::scratch`) under the
//!   transaction layer (`crate::tx`): write locks on every declared key,
//!   a gather of their entries to the home thread, the whole script run
//!   there on the copies, and a write-back of what changed, all before
//!   the locks go. This is MULTI/EXEC's isolation (strict two-phase
//!   locking) with the script in the middle. It costs a copy of the
//!   declared values each way; a script that proves hot across shards can
//!   get a coordinator that runs on the owning shards instead.
//!
//! Chosen over running the script on the home thread and sending each
//! `redis.call` to the owning shard: that needs the Lua call to suspend
//! mid-script, which Lua 5.1 cannot do across `pcall` (scripts use it),
//! unless the owner runs on the same thread (`in_place`).
//!
//! Undeclared keys: on the script's own shard they work (a standalone
//! Redis allows them). One of another shard makes the script run again
//! from the start, in place if every shard it needs is co-hosted and
//! free, else under write locks on its declared keys and the keys it was
//! found to touch, on copies of them, as a cross-shard script runs
//! (`wide`: no global stop; a first run's writes are taken back first).
//! Inside MULTI/EXEC they are still refused with an error.
//!
//! # Propagation
//!
//! Each command a script runs is logged by `run_shard` as it would be
//! from a client (EVAL itself never is). A script on one shard wraps its
//! records in MULTI/EXEC when there are two or more (Redis 7.0's
//! `propagatePendingCommands`); inside a transaction (cross-shard, EXEC)
//! the transaction's own MULTI/EXEC already surrounds them.
//!
//! # Parts
//!
//! `cache` (the server's one script cache, every thread's: `ops.scripts`),
//! `vm` (a Lua VM per thread, serving one server; the sandbox), `api`
//! (the `redis` table), `run` (the EVAL and FCALL handlers and
//! `redis.call`), `convert` (replies ↔ Lua values), `shebang` (`#!lua`
//! flags), `sha1`, `libs` (`bit`, `cjson`, `cmsgpack`, `struct`); for
//! functions, `library` (the server's one library registry, every
//! thread's: `ops.functions`), `load` (a library loaded into a thread's
//! VM, lazily, and `redis.register_function`), `function` (FUNCTION and
//! FCALL's table); `busy` (`busy-reply-threshold`, SCRIPT KILL / FUNCTION
//! KILL, `-BUSY`); `wide` (scripts that touch undeclared keys of other
//! shards);
//! `in_place` (scripts across co-hosted shards, run on them).
//!
//! # Flags checked before a script runs
//!
//! A script's shebang (or a function's flags) replaces its command's
//! `write`, `denyoom` and `stale` flags at admission (`admit`: OOM,
//! MISCONF, NOREPLICAS, READONLY, MASTERDOWN in processCommand's order);
//! `run::execute` then makes scriptPrepareForRun's checks, which matter
//! where admission did not see the script as it runs (EXEC, a real shard's
//! memory). On a stale replica (`Ops::running_stale`) a script without a
//! shebang never runs (MASTERDOWN once found), one with `allow-stale` runs
//! and its `redis.call`s of commands without `stale` fail, wherever it
//! runs (its shard, in place, gathered copies).
//!
//! Server commands from a script: COMMAND (the table) and LASTSAVE run
//! as a client's; INFO renders the server's figures and those of every
//! shard and loop (`server::info_from_script`: a run that does not hold
//! every shard runs again holding them, in place or under locks, see
//! `every`; one that can no longer, after a lasting change, reports its
//! own shard's keyspace and its own loop's statistics).
//!
//! OBJECT FREQ / IDLETIME / REFCOUNT run on their key's shard
//! (`keys::object::from_script`). Keyspace-wide commands (DBSIZE, KEYS,
//! SCAN, RANDOMKEY, FLUSHDB, FLUSHALL, SWAPDB) run from a script that holds every shard (`keys::script`):
//! at one shard, or in place with the others co-hosted. A first run
//! that does not hold them runs again (before its first write: the
//! `found` path, with a key of every shard), in place if they are
//! co-hosted and free, else under whole-shard write locks on every shard
//! with its calls reaching each shard's thread (`every`); after a write
//! that cannot be taken back the call is refused with `run::EVERY_SHARD`'s
//! error. Inside MULTI/EXEC a script cannot run again: EXEC locks every
//! shard whole for a block whose script may call one (`needs_every`,
//! `names`: unless its code proves every command it calls is named by a
//! literal of another command).
//!
//! SLOWLOG GET and MEMORY STATS from a script read the connections of
//! every loop once the run holds every shard (`run::Run::for_each_client`),
//! its caller's too: in its loop's table when the script runs elsewhere,
//! else lent to the run (`ctx::Sender`: out of its slot while its request
//! runs on its own thread), so an entry of the caller's that ran on
//! another shard shows its address and name, and its buffers are counted.
//!
//! Not yet: SCRIPT DEBUG's debugger.

pub mod api;
pub mod busy;
pub mod cache;
mod call;
pub mod convert;
pub mod every;
pub mod function;
pub mod in_place;
pub(crate) mod lend;
pub mod library;
pub mod libs;
pub mod load;
mod names;
pub(crate) mod real;
pub mod run;
pub mod sandbox;
pub mod sha1;
pub mod shebang;
pub mod traces;
mod undo;
pub mod vm;
pub mod wide;

use resp::Args;

use crate::ctx::{ConnCtx, ShardCtx};
use crate::error::CmdError;
use crate::table::{flags::*, CommandSpec, Exec, NO_KEYS};
use crate::util::eq_ic;
use run::Variant;

const EVAL_FLAGS: u32 = NOSCRIPT | STALE | SKIP_MONITOR | NO_MANDATORY_KEYS | MOVABLE_KEYS | SCRIPT;
const ACL: &[&str] = &["slow", "scripting"];

pub(crate) const COMMANDS: &[CommandSpec] = &[
    CommandSpec::new(
        "eval",
        -3,
        EVAL_FLAGS | MAY_REPLICATE,
        NO_KEYS,
        Exec::Shard(eval, None),
        ACL,
    )
    .with_getkeys(eval_keys),
    CommandSpec::new(
        "evalsha",
        -3,
        EVAL_FLAGS | MAY_REPLICATE,
        NO_KEYS,
        Exec::Shard(evalsha, None),
        ACL,
    )
    .with_getkeys(eval_keys),
    CommandSpec::new(
        "eval_ro",
        -3,
        EVAL_FLAGS | READONLY,
        NO_KEYS,
        Exec::Shard(eval_ro, None),
        ACL,
    )
    .with_getkeys(eval_keys),
    CommandSpec::new(
        "evalsha_ro",
        -3,
        EVAL_FLAGS | READONLY,
        NO_KEYS,
        Exec::Shard(evalsha_ro, None),
        ACL,
    )
    .with_getkeys(eval_keys),
    CommandSpec::parent("script", -2, 0, &["slow"], SCRIPT_SUBCOMMANDS),
];

const SCRIPT_SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec::new(
        "flush",
        -2,
        NOSCRIPT,
        NO_KEYS,
        Exec::Conn(script_flush),
        ACL,
    ),
    CommandSpec::new(
        "load",
        3,
        NOSCRIPT | STALE,
        NO_KEYS,
        Exec::Conn(script_load),
        ACL,
    ),
    CommandSpec::new("debug", 3, NOSCRIPT, NO_KEYS, Exec::Conn(script_debug), ACL),
    CommandSpec::new(
        "kill",
        2,
        NOSCRIPT | ALLOW_BUSY,
        NO_KEYS,
        Exec::Conn(script_kill),
        ACL,
    ),
    CommandSpec::new(
        "exists",
        -3,
        NOSCRIPT,
        NO_KEYS,
        Exec::Conn(script_exists),
        ACL,
    ),
    CommandSpec::new(
        "help",
        2,
        LOADING | STALE,
        NO_KEYS,
        Exec::Conn(script_help),
        ACL,
    ),
];

/// The flags a script or function command declares (its shebang, the
/// cached script's, the function's), as Redis's `evalGetCommandFlags` /
/// `fcallGetCommandFlags` read them before the command runs: `None` for
/// other commands, a script without a shebang (or an invalid one), an
/// unknown SHA-1 or function (of the server of `ops`).
pub fn declared_flags(
    r: crate::table::Resolved,
    args: Args<'_>,
    ops: &crate::ops::Ops,
) -> Option<shebang::ScriptFlags> {
    if !r.spec.has(crate::table::flags::SCRIPT) || args.len() < 2 {
        return None;
    }
    let flags = match r.spec.name {
        "eval" | "eval_ro" => shebang::parse(args.get(1)).ok()?.0,
        "evalsha" | "evalsha_ro" => ops.scripts.get(&cache::key(args.get(1))?)?.flags,
        "fcall" | "fcall_ro" => {
            let (lib, idx) = ops.functions.read().function(args.get(1))?;
            lib.functions[idx].flags
        }
        _ => return None,
    };
    flags.shebang.then_some(flags)
}

/// Whether script command `args` (EVAL, EVALSHA, FCALL and their `_RO`)
/// may call a keyspace-wide command (KEYS, SCAN, DBSIZE ...): a run of it
/// called one (`cache::HopMark`), or its code does not prove that every
/// command it calls is named by a literal that is not one
/// (`names::only_named_calls`: a name built at run time, from ARGV or by
/// string functions, is not proven). EXEC then takes whole-shard write
/// locks on every shard for its block (`multi`), since a script inside
/// MULTI/EXEC cannot run again under wider locks. Read only for a block
/// that queues a script; the proof is made once per script (its mark
/// keeps it), or at each EXEC for an EVAL body not cached yet (in the
/// cache of the server of `ops`).
pub(crate) fn needs_every(name: &str, args: Args<'_>, ops: &crate::ops::Ops) -> bool {
    match name {
        "eval" | "eval_ro" => {
            let body = args.get(1);
            match ops.scripts.get(&sha1::hex(body)) {
                Some(s) => s.hop.may_need_every(&s.body),
                None => !names::only_named_calls(body),
            }
        }
        "evalsha" | "evalsha_ro" => cache::key(args.get(1))
            .and_then(|k| ops.scripts.get(&k))
            .is_some_and(|s| s.hop.may_need_every(&s.body)),
        "fcall" | "fcall_ro" => ops
            .functions
            .read()
            .function(args.get(1))
            .is_some_and(|(lib, idx)| lib.functions[idx].hop.may_need_every(&lib.code)),
        _ => false,
    }
}

/// The declared keys: `numkeys` arguments after it (none when `numkeys`
/// is invalid; the handler then replies the error).
pub(crate) fn eval_keys(args: Args<'_>) -> Vec<usize> {
    match run::numkeys(args) {
        Ok(n) => (3..3 + n).collect(),
        Err(_) => Vec::new(),
    }
}

fn eval(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let v = Variant {
        by_sha: false,
        read_only: false,
    };
    run::eval(ctx, args, v)
}

fn evalsha(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let v = Variant {
        by_sha: true,
        read_only: false,
    };
    run::eval(ctx, args, v)
}

fn eval_ro(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let v = Variant {
        by_sha: false,
        read_only: true,
    };
    run::eval(ctx, args, v)
}

fn evalsha_ro(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let v = Variant {
        by_sha: true,
        read_only: true,
    };
    run::eval(ctx, args, v)
}

/// SCRIPT LOAD body: compiles it (on this thread's VM, so a syntax error
/// is reported and nothing is cached) and caches it; replies its SHA-1.
fn script_load(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let body = args.get(2);
    let sha = sha1::hex(body);
    let ops = c.server.ops;
    if !ops.scripts.contains(&sha) {
        let (flags, shebang_len) = shebang::parse(body).map_err(CmdError::Err)?;
        let gen = ops.scripts.generation();
        vm::with_vm(vm::VmKind::Eval, ops, |vm| {
            let f = vm.function(&sha, body, shebang_len, gen);
            vm.report_memory();
            f
        })
        .map_err(|e| CmdError::err(vm::error_text(&e)))?
        .map_err(CmdError::Err)?;
        ops.scripts.insert(cache::Script {
            sha,
            body: body.into(),
            flags,
            shebang_len,
            hop: cache::HopMark::default(),
        });
    }
    c.out.bulk(&sha);
    Ok(())
}

/// SCRIPT EXISTS sha...: 1 or 0 per SHA-1.
fn script_exists(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    c.out.array(args.len() - 2);
    for sha in args.iter().skip(2) {
        let found = cache::key(sha).is_some_and(|k| c.server.ops.scripts.contains(&k));
        c.out.int(i64::from(found));
    }
    Ok(())
}

/// SCRIPT FLUSH [ASYNC|SYNC]: empties the server's cache for every thread
/// (both modes free at once: the bodies are small next to a keyspace).
fn script_flush(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let ok = match args.len() {
        2 => true,
        3 => eq_ic(args.get(2), "async") || eq_ic(args.get(2), "sync"),
        _ => false,
    };
    if !ok {
        return Err(CmdError::err("SCRIPT FLUSH only support SYNC|ASYNC option"));
    }
    c.server.ops.scripts.flush();
    c.out.ok();
    Ok(())
}

/// SCRIPT DEBUG: only NO (the debugger is not implemented).
fn script_debug(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let mode = args.get(2);
    if eq_ic(mode, "no") {
        c.out.ok();
        return Ok(());
    }
    if eq_ic(mode, "yes") || eq_ic(mode, "sync") {
        return Err(CmdError::err(
            "SCRIPT DEBUG YES/SYNC is not supported: the Lua debugger is not implemented",
        ));
    }
    Err(CmdError::err("Use SCRIPT DEBUG YES/SYNC/NO"))
}

/// SCRIPT KILL: see `busy::Registry::kill`.
fn script_kill(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    c.server.ops.busy.kill(true)?;
    c.out.ok();
    Ok(())
}

const SCRIPT_HELP: &[&str] = &[
    "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DEBUG (YES|SYNC|NO)",
    "    Set the debug mode for subsequent scripts executed.",
    "EXISTS <sha1> [<sha1> ...]",
    "    Return information about the existence of the scripts in the script cache.",
    "FLUSH [ASYNC|SYNC]",
    "    Flush the Lua scripts cache. Very dangerous on replicas.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the scripts cache.",
    "    * SYNC: Synchronously flush the scripts cache.",
    "KILL",
    "    Kill the currently executing Lua script.",
    "LOAD <script>",
    "    Load a script into the scripts cache without executing it.",
    "HELP",
    "    Prints this help.",
];

fn script_help(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    c.out.array(SCRIPT_HELP.len());
    for l in SCRIPT_HELP {
        c.out.simple(l);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
