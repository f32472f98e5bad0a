//! Running one script on one shard: EVAL's shard handler and
//! `redis.call` (the commands a script issues).
//!
//! The handler runs where dispatch put it: on the shard of its declared
//! keys (or the home shard when it declares none), or, when they span
//! shards, on a scratch shard holding copies of them (`crate::scratch`).
//! Either way the whole script runs inside one handler call on one thread,
//! so it is atomic and isolated as any single command is.
//!
//! Keys a script may touch: on its own shard, any key (declared or not, as
//! a standalone Redis allows); on gathered copies, the keys gathered. A
//! key of another shard that the script did not declare makes the script
//! run again under wider locks (see `wide`), or is refused with an error
//! where that cannot be done.

use std::cell::RefCell;

use mlua::{Lua, Value};
use resp::Args;

use super::api::{REPL_ALL, REPL_AOF, REPL_REPLICA};
use super::busy::{HookState, Kind};
use super::cache::{HopMark, Script, ScriptCache};
use super::call::{CallArgs, CallBufs};
use super::convert::{error_table, lua_to_reply, reply_to_lua};
use super::in_place::on_shard;
use super::shebang::ScriptFlags;
use super::traces::Journal;
use super::undo::Undo;
use super::vm::{error_text, reply_error, with_vm, ReplyError, Vm, VmKind, COUNTED_FIELD};
use crate::ctx::{ShardCtx, ThreadStats};
use crate::error::CmdError;
use crate::exec::{run_shard, ShardCall, OOM_ERROR};
use crate::table::{flags, registry, shard_of, Exec};

mod acl;
mod across;
mod conn;
mod footprint;
mod keyspace;
mod scope;

pub use scope::install;
use scope::run_scoped;
pub(crate) use scope::{abandon_for_busy, running_ops, snapshot_pass};

/// Redis's `scriptVerifyAllowStale` refusing a `redis.call` on a stale
/// replica.
const STALE_CALL: &str = "Can not execute the command on a stale replica";

/// scriptPrepareForRun's refusal of a script (or function) without
/// `allow-stale` on a stale replica.
const STALE_SCRIPT: &str = "MASTERDOWN Link with MASTER is down, replica-serve-stale-data is set \
     to 'no' and 'allow-stale' flag is not set on the script.";

/// A command a script cannot call yet (MEMORY STATS ...).
const NOT_SUPPORTED: &str = "This Redis command is not supported from scripts yet";

/// A keyspace-wide call (KEYS, DBSIZE, FLUSHALL ...) from a script that
/// cannot hold every shard (see `keys::script`, `every`).
pub(crate) const EVERY_SHARD: &str = "This command needs every shard, which a script takes \
     only before its first lasting change and, inside MULTI/EXEC, only once known to call it \
     (a keyspace-wide command queued, or an earlier run): not supported from this script yet";

/// Which EVAL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    /// EVALSHA / EVALSHA_RO: the first argument is a SHA-1.
    pub by_sha: bool,
    /// EVAL_RO / EVALSHA_RO.
    pub read_only: bool,
}

impl Variant {
    /// The command's name.
    fn command(self) -> &'static str {
        match (self.by_sha, self.read_only) {
            (false, false) => "eval",
            (true, false) => "evalsha",
            (false, true) => "eval_ro",
            (true, true) => "evalsha_ro",
        }
    }
}

/// Parses `numkeys` (argument 2) against the argument count, with Redis's
/// errors.
pub fn numkeys(args: Args<'_>) -> Result<usize, CmdError> {
    let n = crate::util::parse_i64(args.get(2)).map_err(|_| CmdError::NotInteger)?;
    if n < 0 {
        return Err(CmdError::err("Number of keys can't be negative"));
    }
    if n as u64 > (args.len() - 3) as u64 {
        return Err(CmdError::err(
            "Number of keys can't be greater than number of args",
        ));
    }
    Ok(n as usize)
}

/// The script of an EVAL-family call, and whether it is new (not cached
/// yet): looked up by SHA-1, or (EVAL) taken from the body, its shebang
/// parsed.
fn script_of(
    cache: &ScriptCache,
    args: Args<'_>,
    by_sha: bool,
) -> Result<(std::sync::Arc<Script>, bool), CmdError> {
    let noscript = || CmdError::Raw("NOSCRIPT No matching script. Please use EVAL.".into());
    if by_sha {
        let key = super::cache::key(args.get(1)).ok_or_else(noscript)?;
        return cache.get(&key).map(|s| (s, false)).ok_or_else(noscript);
    }
    let body = args.get(1);
    let sha = super::sha1::hex(body);
    if let Some(s) = cache.get(&sha) {
        return Ok((s, false));
    }
    let (flags, shebang_len) = super::shebang::parse(body).map_err(CmdError::Err)?;
    let s = Script {
        sha,
        body: body.into(),
        flags,
        shebang_len,
        hop: Default::default(),
    };
    Ok((std::sync::Arc::new(s), true))
}

/// EVAL, EVALSHA, EVAL_RO, EVALSHA_RO.
pub fn eval(ctx: &mut ShardCtx<'_>, args: Args<'_>, v: Variant) -> Result<(), CmdError> {
    let nkeys = numkeys(args)?;
    let ops = ctx.ops;
    let cache = &ops.scripts;
    let (script, new) = script_of(cache, args, v.by_sha)?;
    let gen = cache.generation();
    let s = &*script;
    execute(
        ctx,
        args,
        nkeys,
        (v.read_only, s.flags),
        (&s.sha, &s.hop, v.command()),
        Kind::Eval(s.sha),
        |vm: &mut Vm| {
            let f = vm
                .function(&s.sha, &s.body, s.shebang_len, gen)
                .map_err(CmdError::Err)?;
            // Cached once it compiled (as Redis: a syntax error caches
            // nothing).
            if new {
                cache.insert_arc(script.clone());
            }
            Ok(Callee::Script(f))
        },
    )
}

/// FCALL and FCALL_RO: the function by name (any case), then `numkeys`,
/// with Redis's errors in Redis's order.
pub fn fcall(ctx: &mut ShardCtx<'_>, args: Args<'_>, read_only: bool) -> Result<(), CmdError> {
    let Some((lib, idx)) = ctx.ops.functions.read().function(args.get(1)) else {
        return Err(CmdError::err("Function not found"));
    };
    let n = crate::util::parse_i64(args.get(2))
        .map_err(|_| CmdError::err("Bad number of keys provided"))?;
    if n > (args.len() - 3) as i64 {
        return Err(CmdError::err(
            "Number of keys can't be greater than number of args",
        ));
    }
    if n < 0 {
        return Err(CmdError::err("Number of keys can't be negative"));
    }
    let info = &lib.functions[idx];
    let kind = Kind::Function {
        name: info.name.clone(),
        command: args.iter().map(<[u8]>::to_vec).collect(),
    };
    execute(
        ctx,
        args,
        n as usize,
        (read_only, info.flags),
        (
            info.name.as_bytes(),
            &info.hop,
            if read_only { "fcall_ro" } else { "fcall" },
        ),
        kind,
        |vm: &mut Vm| {
            let f = vm.library_function(&lib, idx).map_err(CmdError::Err)?;
            Ok(Callee::Function(f))
        },
    )
}

/// What runs: a script's body (KEYS and ARGV as globals) or a library's
/// function (called with the keys and the arguments as two tables).
pub enum Callee {
    Script(mlua::Function),
    Function(mlua::Function),
}

/// Runs a script or function: the up-front flag checks, then the call on
/// this thread's VM, its reply, and the MULTI/EXEC around its records.
/// `name` is what errors name (the SHA-1, or the function's name); `hop`,
/// its mark (see `HopMark`).
fn execute(
    ctx: &mut ShardCtx<'_>,
    args: Args<'_>,
    nkeys: usize,
    (read_only, flags): (bool, ScriptFlags),
    (name, hop, cmd): (&[u8], &HopMark, &'static str),
    kind: Kind,
    callee: impl FnOnce(&mut Vm) -> Result<Callee, CmdError>,
) -> Result<(), CmdError> {
    // A mark a run recorded elsewhere left (see `vm::take_nested_failed`).
    super::vm::take_nested_failed();
    let keys_: Vec<&[u8]> = (3..3 + nkeys).map(|i| args.get(i)).collect();
    // Declared keys on several shards, or a run inside `wide::Wide`: this
    // runs on gathered copies, on a scratch shard without a limit.
    // (Unless it runs in place on the real shards: `in_place`.)
    let in_place = ctx.in_place.is_some();
    // In place over every shard under locks (`every`): never taken back
    // or run again (it holds everything it can touch).
    let every = ctx.in_place.as_deref().is_some_and(|s| s.every());
    // (Each key after the first compared with the first's shard: a
    // one-key script hashes nothing here.)
    let spread = |first: &[u8], rest: &[&[u8]]| {
        !rest.is_empty() && {
            let home = shard_of(first, ctx.nshards);
            rest.iter().any(|k| shard_of(k, ctx.nshards) != home)
        }
    };
    // (Inside `wide::Wide` first: a run on copies hashes no key here.)
    let scratch = !in_place
        && (super::wide::held(b"").is_some()
            || keys_
                .split_first()
                .is_some_and(|(first, rest)| spread(first, rest)));
    // By a call from another loop (`busy::by_call`): a script known to do
    // what such a run must not (see `HopMark`) is taken back before it
    // starts, to run as a hop at once.
    let by_call = !scratch && !in_place && super::busy::is_by_call();
    if by_call && hop.is_set() {
        super::busy::note_marked();
        ctx.block = Some(crate::ctx::BlockOn {
            keys: Vec::new(),
            deadline_ms: 0,
            args: None,
            widen: true,
        });
        return Ok(());
    }
    // Redis's pre_command_oom_state: the server over `maxmemory` with
    // nothing to evict. On a real shard, its check (which evicts first);
    // on copies, the server's snapshot.
    let over_maxmemory = |ctx: &mut ShardCtx<'_>| {
        if scratch {
            ctx.ops.out_of_memory()
        } else {
            ctx.shard.evict.maxmemory != 0 && ctx.shard.check_memory(true)
        }
    };
    // Scripts with a shebang, and functions, are checked up front. One that
    // may write is a `denyoom` write command to Redis 7.0's processCommand
    // (OOM, then a failed save, then too few good replicas, then a
    // read-only replica), then scriptPrepareForRun refuses it to the
    // read-only variants.
    let may_write = flags.shebang && !flags.no_writes;
    // scriptPrepareForRun's own stale check, first of its checks: reached
    // from EXEC only (admission refuses such a script with MASTERDOWN,
    // before the checks below, everywhere else).
    let stale = ctx.ops.running_stale();
    if stale && flags.shebang && !flags.allow_stale {
        return Err(CmdError::Raw(STALE_SCRIPT.into()));
    }
    if may_write && !flags.allow_oom && over_maxmemory(ctx) {
        return Err(CmdError::Rejected(OOM_ERROR.into()));
    }
    if let Some(e) = ctx.ops.disk_error().filter(|_| may_write) {
        return Err(CmdError::Rejected(e.text()));
    }
    if may_write && ctx.ops.refuses_writes() {
        return Err(CmdError::Rejected(crate::repl::NOREPLICAS.into()));
    }
    if may_write && ctx.shard.expiry == engine::Expiry::Hide && ctx.shard.read_only_replica {
        return Err(CmdError::Rejected(crate::replica::READONLY_ERR.into()));
    }
    if read_only && may_write {
        return Err(CmdError::err(
            "Can not execute a script with write flag using *_ro command.",
        ));
    }
    let keys = keys_;
    let argv: Vec<&[u8]> = (3 + nkeys..args.len()).map(|i| args.get(i)).collect();
    let mark = (ctx.shard.outbox.records_on && !ctx.in_tx).then(|| ctx.shard.outbox.mark());
    let mut stopped = false;
    // Whether a run may be abandoned for a wider one (see `wide`): on
    // copies only inside `Wide`; on a shard, outside transactions, and
    // only with other shards (with one, every key is held: nothing can
    // abandon the run, so its writes need no take-back copies, ~700
    // instructions of a two-command script).
    let lent = ctx.in_place.as_deref().is_some_and(|s| s.may_widen());
    let widen_ok = !every
        && (lent
            || super::wide::held(b"").is_some()
            || (!scratch && !ctx.in_tx && ctx.nshards > 1));
    // Redis's pre_command_oom_state, for scriptVerifyOOM (see `Run::oom`);
    // a shebang script that may write was refused above already.
    let oom = !flags.allow_oom && !flags.no_writes && !read_only && over_maxmemory(ctx);
    let vm_kind = match kind {
        Kind::Eval(_) => VmKind::Eval,
        Kind::Function { .. } | Kind::Load => VmKind::Functions,
    };
    // The command that runs the script, as its caller's CLIENT LIST line
    // shows it where it is not read live (see `connection::listing`).
    let caller_cmd = cmd;
    let res = with_vm(vm_kind, ctx.ops, |vm| -> Result<(), CmdError> {
        vm.set_memory_limit(super::vm::memory_limit(ctx.shard.evict.maxmemory));
        let f = callee(vm)?;
        // A script without a shebang (EVAL's compatibility mode) never
        // runs on a stale replica: scriptPrepareForRun refuses it once it
        // is found or compiled (a NOSCRIPT or a syntax error comes first).
        if stale && !flags.shebang {
            return Err(CmdError::Raw(crate::replica::MASTERDOWN_ERR.into()));
        }
        // The thread's (lent: `vm::lend_stats`), or the scripts' own;
        // not defaulted: a default allocates a slot per command.
        let stats = super::vm::take_stats();
        // By a call from another loop (`busy::by_call`): taken back
        // past the threshold as a run in place is, to run again as a
        // hop; and before anything no take-back undoes.
        let restartable = (in_place && !every) || by_call;
        // What it records is taken back with it (see `traces`).
        let journal = (widen_ok || restartable).then(|| Journal::begin(&stats, vm.journal.take()));
        let run = Run {
            db: ctx.db,
            orig_db: ctx.db,
            resp3: false,
            repl: REPL_ALL,
            read_only: read_only || flags.no_writes,
            declared: &keys,
            scratch,
            shard: ctx.shard.id,
            stats,
            journal,
            hook: vm.hook.clone(),
            read_called: false,
            widen_ok,
            wrote: false,
            oom,
            dirty: false,
            pinned: false,
            published: false,
            // In place, the home shard's marks are taken first: other
            // shards' events move to it (see `Run::after_call`), and a run
            // taken back drops them too.
            undo: (in_place && !every).then(|| Undo::new(ctx.shard)),
            undo_others: Vec::new(),
            found: Vec::new(),
            restart: false,
            restartable,
            by_call,
            hop,
            lua_client: match vm_kind {
                VmKind::Eval => crate::connection::LUA_CLIENT,
                VmKind::Functions => crate::connection::FUNCTION_CLIENT,
            },
            caller_cmd,
            ctx: &mut *ctx,
        };
        // A script across shards publishes no busy shard (see `busy`).
        let busy_shard = (!scratch && !in_place).then_some(run.shard);
        vm.hook.begin(kind, busy_shard);
        if in_place && !every {
            vm.hook.in_place();
        } else if run.restartable {
            vm.hook.restartable();
        } else if every {
            vm.hook.every();
        }
        let (outcome, mut run) = call_function(vm, f, &keys, &argv, run);
        if is_memory_error(&outcome) {
            vm.collect_garbage();
        } else {
            vm.after_run();
        }
        let lua = vm.lua.clone();
        stopped = vm.hook.end(&lua);
        // Watches taken while it ran and not registered yet.
        if let Some(w) = vm.hook.take_watches() {
            let ctx = &mut *run.ctx;
            super::busy::register_watches(ctx.shard, ctx.in_place.as_deref_mut(), ctx.nshards, w);
        }
        let abandoned = run.restart || !run.found.is_empty();
        if let Some(j) = run.journal.take() {
            vm.journal = Some(if abandoned {
                let ctx = &mut *run.ctx;
                j.take_back(&mut run.stats, |s, f| {
                    on_shard(ctx.shard, ctx.in_place.as_deref_mut(), s, |sh| f(sh));
                })
            } else {
                j.keep(run.ctx.ops)
            });
        }
        super::vm::put_stats(std::mem::replace(&mut run.stats, ThreadStats::lent()));
        let read_called = run.read_called;
        vm.report_memory();
        // It did what no take-back undoes: its calls from another loop
        // hop from now on (see `HopMark`).
        if run.pinned || run.wrote {
            hop.set();
        }
        if abandoned {
            // Abandoned (whatever it returned): no reply, its writes taken
            // back, run it again over more keys (see `wide`), or on copies
            // (`restart`).
            for (s, u) in std::mem::take(&mut run.undo_others) {
                let ctx = &mut *run.ctx;
                on_shard(ctx.shard, ctx.in_place.as_deref_mut(), s, |sh| u.apply(sh));
            }
            if let Some(u) = run.undo.take() {
                u.apply(run.ctx.shard);
            }
            run.ctx.block = Some(crate::ctx::BlockOn {
                keys: std::mem::take(&mut run.found),
                deadline_ms: 0,
                args: None,
                widen: true,
            });
            return Ok(());
        }
        // Client-side caching: a script that read remembers its declared
        // keys for a tracking caller, here on their shard, before anything
        // else runs on it (scripts across shards remembered them up front:
        // `tracking::keys_read`).
        // (In place the runtime passes no tracker: such callers take the
        // copies' path.)
        if let (Some(who), true, false) = (run.ctx.tracker, read_called, scratch) {
            // Changes made so far are collected first: their
            // invalidations (numbered before this read) skip the caller.
            run.ctx.shard.collect_touched();
            let since = run.ctx.shard.outbox.next_seq();
            for k in &keys {
                run.ctx.shard.tracked.remember(k, who, since);
            }
        }
        let script_resp3 = run.resp3;
        match outcome.map_err(|e| CmdError::err(error_text(&e)))? {
            Outcome::Returned(value) => {
                let mut nested = Vec::new();
                let top = lua_to_reply(&value, ctx.out, script_resp3, &mut nested)
                    .map_err(|e| CmdError::err(error_text(&e)))?;
                if !nested.is_empty() {
                    super::vm::count_nested_errors(&nested);
                }
                match top {
                    Some((line, true)) => Err(CmdError::Counted(line[1..].to_vec())),
                    Some((line, false)) => Err(CmdError::Bytes(line[1..].to_vec())),
                    None => Ok(()),
                }
            }
            Outcome::Message(text) => {
                // Redis's luaCallFunction for an error that is not an
                // error table (Lua's own memory error): `%.100s` of it.
                let mut msg = b"ERR Error running script ".to_vec();
                msg.extend_from_slice(name);
                msg.extend_from_slice(b", ");
                msg.extend(text.iter().take(100).map(|&c| {
                    if c == b'\r' || c == b'\n' {
                        b' '
                    } else {
                        c
                    }
                }));
                while msg.last() == Some(&b' ') {
                    msg.pop();
                }
                Err(CmdError::Bytes(msg))
            }
            Outcome::Failed { err, line, counted } => {
                let mut msg: Vec<u8> = err
                    .into_iter()
                    .map(|c| if c == b'\r' || c == b'\n' { b' ' } else { c })
                    .collect();
                if let Some((l, source)) = line {
                    msg.extend_from_slice(b" script: ");
                    msg.extend_from_slice(name);
                    msg.extend_from_slice(format!(", on {source}:{l}.").as_bytes());
                }
                if counted {
                    return Err(CmdError::Counted(msg));
                }
                Err(CmdError::Bytes(msg))
            }
        }
    });
    if let Some(m) = mark {
        if stopped {
            ctx.shard.outbox.rollback(m);
        } else {
            ctx.shard.outbox.wrap_multi(m);
        }
    }
    res.map_err(|e| CmdError::err(error_text(&e)))?
}

/// Whether a run failed on the VM's memory bound (see `vm`'s "Memory").
fn is_memory_error(outcome: &mlua::Result<Outcome>) -> bool {
    match outcome {
        Ok(Outcome::Message(m)) => m.as_slice() == MEMORY_ERROR.as_bytes(),
        Ok(_) => false,
        Err(e) => matches!(e, mlua::Error::MemoryError(_)) || error_text(e) == MEMORY_ERROR,
    }
}

/// Lua 5.1's text for an allocation refused (`MEMERRMSG`).
const MEMORY_ERROR: &str = "not enough memory";

/// How a script ended.
enum Outcome {
    Returned(Value),
    /// An error that is not an error table: Lua's memory error, which
    /// Lua 5.1 raises without calling the message handler.
    Message(Vec<u8>),
    /// The message handler's `{err=..., line=..., source=...}`.
    Failed {
        err: Vec<u8>,
        line: Option<(i64, String)>,
        /// Its error was counted already (see `vm::CountedError`).
        counted: bool,
    },
}

/// Runs `f` with KEYS and ARGV set, `redis.call` & co. wired to `run`.
fn call_function<'r, 'a>(
    vm: &mut Vm,
    f: Callee,
    keys: &[&[u8]],
    argv: &[&[u8]],
    run: Run<'r, 'a>,
) -> (mlua::Result<Outcome>, Run<'r, 'a>) {
    let run = RefCell::new(run);
    let res = (|| {
        let lua = &vm.lua;
        let f = match f {
            Callee::Function(f) => vm.bind.call::<mlua::Function>((
                f,
                string_array(lua, keys)?,
                string_array(lua, argv)?,
            ))?,
            Callee::Script(f) => {
                set_keys_argv(vm, keys, argv)?;
                f
            }
        };
        run_scoped(vm, f, &run)
    })();
    (res, run.into_inner())
}

/// Sets the KEYS and ARGV globals of a script: two new arrays, as
/// Redis's `luaCreateArray` builds them per call.
///
/// Built through Lua's C API: through mlua's `create_sequence_from` and
/// `raw_set` each key was a registry reference made and dropped, ~4.7 k
/// instructions an EVALSHA of one key (Redis's whole EVALSHA is ~25 k).
fn set_keys_argv(vm: &Vm, keys: &[&[u8]], argv: &[&[u8]]) -> mlua::Result<()> {
    use mlua::ffi;
    vm.lua.exec_raw_lua(|raw| {
        // SAFETY: the state is the VM's own, outside any Lua call (no
        // callback frame is running on it); the stack has the room checked
        // here and is restored to `top`. Unprotected as mlua's own calls
        // are while no memory bound is set (`Vm::bounded` sets it only
        // while Lua code runs): an allocation cannot fail at a bound.
        unsafe {
            let state = raw.state();
            if ffi::lua_checkstack(state, 4) == 0 {
                return Err(mlua::Error::runtime("Lua stack overflow"));
            }
            let top = ffi::lua_gettop(state);
            raw.push(&vm.real)?;
            for (name, items) in [(&b"KEYS"[..], keys), (&b"ARGV"[..], argv)] {
                ffi::lua_pushlstring_(state, name.as_ptr().cast(), name.len());
                push_array(state, items);
                ffi::lua_rawset(state, -3);
            }
            ffi::lua_settop(state, top);
        }
        Ok(())
    })
}

/// A new array of `items` as Lua strings, as a table handle (FCALL's
/// keys and arguments); see [`set_keys_argv`].
fn string_array(lua: &Lua, items: &[&[u8]]) -> mlua::Result<mlua::Table> {
    use mlua::ffi;
    lua.exec_raw_lua(|raw| {
        // SAFETY: as in `set_keys_argv`; the table is popped into a handle.
        unsafe {
            let state = raw.state();
            if ffi::lua_checkstack(state, 3) == 0 {
                return Err(mlua::Error::runtime("Lua stack overflow"));
            }
            push_array(state, items);
            raw.pop::<mlua::Table>()
        }
    })
}

/// Pushes a new array of `items` (strings at 1..=n).
///
/// # Safety
/// `state` is a valid Lua state with two free stack slots, and no memory
/// bound can make an allocation fail (see [`set_keys_argv`]).
unsafe fn push_array(state: *mut mlua::ffi::lua_State, items: &[&[u8]]) {
    use mlua::ffi;
    let n = std::os::raw::c_int::try_from(items.len()).unwrap_or(std::os::raw::c_int::MAX);
    ffi::lua_createtable(state, n, 0);
    for (i, s) in items.iter().take(n as usize).enumerate() {
        ffi::lua_pushlstring_(state, s.as_ptr().cast(), s.len());
        // `i < n <= c_int::MAX`, so `i + 1` fits.
        ffi::lua_rawseti_(state, -2, (i + 1) as std::os::raw::c_int);
    }
}

/// Who reads the records of a call made under `redis.set_repl(repl)`
/// (Redis's `PROPAGATE_AOF` / `PROPAGATE_REPL` bits); `None`: nobody.
pub(super) fn repl_target(repl: i64) -> Option<engine::outbox::Target> {
    use engine::outbox::Target;
    match (repl & REPL_AOF != 0, repl & REPL_REPLICA != 0) {
        (true, true) => Some(Target::All),
        (true, false) => Some(Target::Aof),
        (false, true) => Some(Target::Replicas),
        (false, false) => None,
    }
}

/// The state of one script run that `redis.call` needs.
struct Run<'r, 'a> {
    ctx: &'r mut ShardCtx<'a>,
    /// The script's database (SELECT inside the script changes it, not the
    /// client's).
    db: usize,
    /// The database the script started in (its declared keys are there).
    orig_db: usize,
    /// `redis.setresp(3)` was called.
    resp3: bool,
    /// `redis.set_repl` flags.
    repl: i64,
    /// EVAL_RO / `no-writes`: write commands are refused.
    read_only: bool,
    declared: &'r [&'r [u8]],
    /// Running on gathered copies: only declared keys exist here.
    scratch: bool,
    /// The shard this runs on (when not on copies).
    shard: usize,
    stats: ThreadStats,
    /// While the run may be abandoned: what `stats` were, to take its
    /// calls' records back with it (see `traces`).
    journal: Option<Box<Journal>>,
    /// The VM's hook (a kill must win or lose against the first write).
    hook: std::rc::Rc<HookState>,
    /// A read-only command ran (a tracking caller then remembers the
    /// declared keys, as Redis's `call` does for a script's caller).
    read_called: bool,
    /// The run may be abandoned for a wider one (see `wide`).
    widen_ok: bool,
    /// A write command ran on a real shard that the run cannot take back
    /// (too large to copy: see `Undo`).
    wrote: bool,
    /// Over `maxmemory` when the script started (and not `allow-oom`):
    /// its calls of commands that may grow memory are refused until it
    /// has written (Redis's scriptVerifyOOM). The calls themselves neither
    /// evict nor refuse (Redis's `call` does not).
    oom: bool,
    /// A write command ran (Redis's SCRIPT_WRITE_DIRTY).
    dirty: bool,
    /// Something ran that no restart can take back (a PUBLISH by a call
    /// or with no room to hold it, see `traces::hold_publish`; a write
    /// outside the command's keys).
    pinned: bool,
    /// It published, its messages held until it completes
    /// (`traces::hold_publish`): it may still be taken back to run again
    /// over more keys or every shard, not past the threshold
    /// ([`abandon_for_busy`]).
    published: bool,
    /// On real shards: what its writes replaced, per shard (see `wide`).
    undo: Option<Undo>,
    /// In place: the same for each other shard it wrote.
    undo_others: Vec<(usize, Undo)>,
    /// Keys it touched and does not hold: the run is abandoned, every
    /// later `redis.call` raises, and it runs again over them.
    found: Vec<Vec<u8>>,
    /// In place and past `busy-reply-threshold`: abandoned as for `found`,
    /// to run again on copies (see [`abandon_for_busy`]).
    restart: bool,
    /// It may be so abandoned (in place, or by a call).
    restartable: bool,
    /// By a call from another loop (`busy::by_call`): taken back, to run
    /// again as a hop, before anything no take-back undoes
    /// ([`Run::hop_instead`]).
    by_call: bool,
    /// The script's or function's mark (see `HopMark`).
    hop: &'r HopMark,
    /// Redis's Lua client its calls run on (EVAL's or the functions'),
    /// as CLIENT ID and INFO from the script show it.
    lua_client: u64,
    /// The command running the script, as its caller's CLIENT LIST line
    /// shows it from the script.
    caller_cmd: &'static str,
}

/// The command `args` name, found as Redis's `lookupCommand` finds it (no
/// arity check), for the statistics of a call of the wrong arity.
fn command_id(args: Args<'_>) -> Option<usize> {
    let reg = registry();
    let (id, spec) = reg.top(args.get(0))?;
    if spec.subcommands.is_empty() || args.len() == 1 {
        return Some(id);
    }
    let mut full = args.get(0).to_vec();
    full.push(b'|');
    full.extend_from_slice(args.get(1));
    reg.lookup_full(&full)
}

/// A call of a key the script cannot reach (another shard's, undeclared,
/// where the run cannot start again over it).
pub(crate) const NOT_HELD: &str =
    "Script attempted to access a key that was not declared in KEYS and lives on another shard";

/// The error of a `redis.call` whose arguments are not a command (Redis's
/// text without the `ERR ` code, which `error_table` adds): counted only
/// if the script replies it.
fn refuse(lua: &Lua, msg: &str) -> mlua::Result<(Value, bool)> {
    Ok((Value::Table(error_table(lua, msg.as_bytes())?), true))
}

impl Run<'_, '_> {
    /// [`refuse`] a call of a known command, counted in its
    /// `rejected_calls` (Redis's scriptCall errors).
    fn reject(&mut self, lua: &Lua, r: crate::Resolved, msg: &str) -> mlua::Result<(Value, bool)> {
        self.reject_id(lua, Some(r.id), msg)
    }

    /// Redis's scriptCall refusing a call (`id`: its command, when known):
    /// the error counts now, in INFO errorstats and the command's
    /// `rejected_calls`, and its table is marked so that the script's own
    /// error reply does not count it again (see `vm::CountedError`).
    fn reject_id(
        &mut self,
        lua: &Lua,
        id: Option<usize>,
        msg: &str,
    ) -> mlua::Result<(Value, bool)> {
        if let (Some(j), Some(id)) = (&mut self.journal, id) {
            j.note(&self.stats, id);
        }
        crate::exec::count_rejected(&mut self.stats, id);
        self.stats
            .count_error(&super::convert::error_text(msg.as_bytes()));
        let t = error_table(lua, msg.as_bytes())?;
        t.raw_set(COUNTED_FIELD, true)?;
        Ok((Value::Table(t), true))
    }

    /// A call's error written to `out` and counted in the error stats.
    fn error_reply(&mut self, out: &mut resp::Reply, e: &crate::error::CmdError) {
        let line = e.line();
        out.error_bytes(&line);
        self.stats
            .count_error(line.strip_prefix(b"-").unwrap_or(&line));
    }

    /// Records a call made here rather than by `exec::run_shard`: in the
    /// statistics and, when slow, the slowlog (as Redis's `call` with
    /// CMD_CALL_SLOWLOG, which `scriptCall` passes: a script's calls are
    /// logged, named `?:0`).
    fn record(
        &mut self,
        r: crate::Resolved,
        args: Args<'_>,
        started: std::time::Instant,
        failed: bool,
    ) {
        let ops = self.ctx.ops;
        if let Some(us) = crate::exec::record(&mut self.stats, ops, r.id, started, failed) {
            let client = crate::ops::slowlog::SCRIPT_CLIENT;
            crate::exec::slowlog(ops, r, args, us, client, None);
        }
    }

    /// `redis.call` / `redis.pcall`: runs one command; returns its reply as
    /// a Lua value and whether it is an error (`redis.call` raises it).
    fn call(&mut self, lua: &Lua, args: CallArgs) -> mlua::Result<(Value, bool)> {
        // Keys other clients WATCHed while the script is busy are
        // watched before it writes again (see `busy::watch_while_busy`).
        if let Some(w) = self.hook.take_watches() {
            let ctx = &mut *self.ctx;
            super::busy::register_watches(ctx.shard, ctx.in_place.as_deref_mut(), ctx.nshards, w);
        }
        let CallArgs {
            mut bufs,
            given,
            bad,
        } = args;
        let res = self.call_with(lua, given, bad, &mut bufs);
        bufs.put_back();
        self.hook.after_call(lua);
        res
    }

    /// [`Run::call`] with its buffers, `bufs.argv` holding its arguments
    /// (`given` of them; `bad`: one was not a string or a number).
    fn call_with(
        &mut self,
        lua: &Lua,
        given: usize,
        bad: bool,
        bufs: &mut CallBufs,
    ) -> mlua::Result<(Value, bool)> {
        if self.restart || !self.found.is_empty() {
            return Err(mlua::Error::external(ReplyError(
                super::wide::RESTART_TEXT.into(),
            )));
        }
        if given == 0 {
            return refuse(
                lua,
                "Please specify at least one argument for this redis lib call",
            );
        }
        if bad {
            return refuse(
                lua,
                "Lua redis lib command arguments must be strings or integers",
            );
        }
        let args = bufs.argv.args();
        let known = bufs.last.recall(args);
        let r = match known.map_or_else(|| registry().resolve(args), Ok) {
            Ok(r) => {
                if known.is_none() {
                    bufs.last.keep(args.get(0), r);
                }
                r
            }
            Err(CmdError::WrongArity(_)) => {
                return self.reject_id(
                    lua,
                    command_id(args),
                    "Wrong number of args calling Redis command from script",
                )
            }
            Err(_) => return self.reject_id(lua, None, "Unknown Redis command called from script"),
        };
        if let Some(j) = &mut self.journal {
            j.note(&self.stats, r.id);
        }
        if r.spec.has(flags::NOSCRIPT)
            && !self
                .ctx
                .ops
                .scripts_call_noscript
                .load(std::sync::atomic::Ordering::Relaxed)
        {
            return self.reject(lua, r, "This Redis command is not allowed from script");
        }
        // Redis's scriptVerifyAllowStale: on a stale replica a script runs
        // only with `allow-stale` (see `execute`), and even then only
        // commands flagged `stale` (INFO, TIME, ECHO ...).
        if !r.spec.has(flags::STALE) && self.ctx.ops.running_stale() {
            return self.reject(lua, r, STALE_CALL);
        }
        // Redis's scriptVerifyWriteCommandAllow: may-replicate commands
        // (PUBLISH, PFCOUNT ...) count as writes.
        if self.read_only && (r.spec.has(flags::WRITE) || r.spec.has(flags::MAY_REPLICATE)) {
            return self.reject(
                lua,
                r,
                "Write commands are not allowed from read-only scripts.",
            );
        }
        // Redis's scriptVerifyWriteCommandAllow on a read-only replica (a
        // normal client's script: `Hide`).
        if r.spec.has(flags::WRITE)
            && self.ctx.shard.read_only_replica
            && self.ctx.shard.expiry == engine::Expiry::Hide
        {
            return self.reject(lua, r, &format!("-{}", crate::replica::READONLY_ERR));
        }
        // The user who ran the script must be allowed this call (before
        // the call counts as a write: a refused one writes nothing).
        if let Some(caller) = &self.ctx.caller {
            if let Err(msg) = caller.check(r, args) {
                return self.reject(lua, r, msg);
            }
        }
        let positions = &mut bufs.positions;
        r.spec.key_positions(args, positions);
        let positions = &positions[..];
        // Keys it does not hold, found before anything ran (see `wide`).
        // Found none: the check below is not made again.
        let mut all_held = false;
        // The shard the call runs on (in place: its keys' shard).
        let mut target = self.ctx.shard.id;
        // Keys of several shards, every shard held: on copies (`across`).
        let mut across = false;
        if self.ctx.in_place.is_some() {
            match self.place(args, positions) {
                Some(s) => {
                    target = s;
                    all_held = true;
                }
                None if (across::can_run(r, args) || across::runs_apart(r, args))
                    && self.holds_across(args, positions) =>
                {
                    all_held = true;
                    across = true;
                }
                // Another database's key: run again holding every shard.
                None if self.db != self.orig_db && self.every_again() => {
                    return Err(mlua::Error::external(ReplyError(
                        super::wide::RESTART_TEXT.into(),
                    )));
                }
                // Keys of a shard it cannot hold, or of two shards: run
                // again on copies (see `in_place`).
                None if self.widen_ok && !self.wrote && !self.pinned && self.db == self.orig_db => {
                    self.found = positions.iter().map(|&p| args.get(p).to_vec()).collect();
                    return Err(mlua::Error::external(ReplyError(
                        super::wide::RESTART_TEXT.into(),
                    )));
                }
                None => return self.reject(lua, r, NOT_HELD),
            }
        } else if self.widen_ok && !self.wrote && !self.pinned && self.db == self.orig_db {
            let mut missing: Vec<Vec<u8>> = Vec::new();
            for &p in positions {
                let k = args.get(p);
                if !self.holds(k) {
                    missing.push(k.to_vec());
                }
            }
            // (The script's first database always exists on copies.)
            if !missing.is_empty() {
                self.found = missing;
                return Err(mlua::Error::external(ReplyError(
                    super::wide::RESTART_TEXT.into(),
                )));
            }
            all_held = true;
        }
        // Redis's scriptVerifyWriteCommandAllow: a failed save or AOF
        // write, then too few good replicas, refuse a write until the
        // script has written (then it must go on: a half-done script
        // would be worse). Only a script without a shebang gets here with
        // them: others were refused up front.
        if let Some(e) = self.ctx.ops.disk_error() {
            if r.spec.has(flags::WRITE) && !self.dirty {
                return self.reject(lua, r, &format!("-{}", e.text()));
            }
        }
        if r.spec.has(flags::WRITE) && !self.dirty && self.ctx.ops.refuses_writes() {
            return self.reject(lua, r, &format!("-{}", crate::repl::NOREPLICAS));
        }
        if self.oom && !self.dirty && r.spec.has(flags::DENYOOM) {
            return self.reject(lua, r, &format!("-{OOM_ERROR}"));
        }
        if r.spec.has(flags::WRITE) && !self.hook.note_write() {
            return Err(HookState::killed_error());
        }
        // On gathered copies only the declared keys of the first database
        // exist (and only the databases up to it).
        let shard_cmd = matches!(r.spec.exec, Exec::Shard(..));
        let missing_db = shard_cmd && self.db >= self.ctx.shard.dbs.len();
        let other_db = || across::other_db(r, args, self.db, self.ctx.databases);
        if self.scratch
            && (missing_db || (self.db != self.orig_db && !positions.is_empty()) || other_db())
        {
            if self.every_again() {
                return Err(mlua::Error::external(ReplyError(
                    super::wide::RESTART_TEXT.into(),
                )));
            }
            return self.reject(lua, r, NOT_HELD);
        }
        if !all_held {
            for &p in positions {
                let k = args.get(p);
                if !self.holds(k) {
                    // Another database's key (the check above asked for
                    // any other): run again holding every shard.
                    if self.every_again() {
                        return Err(mlua::Error::external(ReplyError(
                            super::wide::RESTART_TEXT.into(),
                        )));
                    }
                    return self.reject(lua, r, NOT_HELD);
                }
            }
        }
        // Take-back copies of what it writes: for a shard command, made in
        // the same call on its shard as the command (one lend per write on
        // another shard, not two); else here. (Before MONITOR sees the
        // call: a run by a call may be taken back here, before it, to run
        // again as a hop, see `hop_instead`.)
        let save = self.widen_ok && !self.pinned && self.before_effects(r, positions);
        if save && !shard_cmd {
            self.save_undo(args, positions, target);
        }
        if self.restart {
            return Err(mlua::Error::external(ReplyError(
                super::wide::RESTART_TEXT.into(),
            )));
        }
        if self.ctx.ops.monitors.active() {
            crate::ops::monitor::from_script(self.ctx.ops, r, self.db, args);
        }
        if r.spec.has(flags::READONLY) {
            self.read_called = true;
        }
        let out = &mut bufs.out;
        out.set_resp3(self.resp3);
        match r.spec.exec {
            // Its destination in another database, on another shard.
            Exec::Shard(..) if across && !across::can_run(r, args) => {
                self.copy_apart(r, args, out);
            }
            Exec::Shard(handler, _) => {
                let call = ShardCall {
                    db: self.db,
                    no_touch: self.ctx.no_touch,
                    databases: self.ctx.databases,
                    max_bulk_len: self.ctx.max_bulk_len,
                    reply_cap_bytes: 0,
                    may_block: false,
                    in_tx: self.ctx.in_tx,
                    nshards: self.ctx.nshards,
                    caller: None,
                    tracker: None,
                    evicting_for: None,
                    client: crate::ops::slowlog::SCRIPT_CLIENT,
                    ops: self.ctx.ops,
                    master: false,
                };
                // redis.set_repl: who reads the command's records (none:
                // they are not written).
                let to = repl_target(self.repl);
                // A failed call counts as any command's: in commandstats
                // (failed_calls) and errorstats, as Redis's `call` counts
                // it; its error table is marked so that the script's reply
                // does not count it again (see `vm::CountedError`). (These
                // may be the thread's statistics, lent: `vm::lend_stats`.)
                let unexpected = self.stats.unexpected_error_replies;
                let stats = &mut self.stats;
                let ctx = &mut *self.ctx;
                let home = ctx.shard.id;
                let (undo, others, db) = (&mut self.undo, &mut self.undo_others, self.db);
                let journal = &mut self.journal;
                let mut too_large = false;
                // By a call, a write no take-back undoes does not run: the
                // run is taken back first (see `hop_instead`).
                let hop_first = self.by_call && !self.wrote;
                let body = |shard: &mut engine::Shard| {
                    // (On copies across shards, `across`: the run is
                    // final, nothing to take back.)
                    if let (Some(j), false) = (journal, across) {
                        j.note_shard(shard);
                    }
                    if save && !across {
                        too_large = Undo::save(undo, others, home, shard, db, args, positions);
                        if too_large && hop_first {
                            return;
                        }
                    }
                    let prop = shard.outbox.records_on;
                    match to {
                        Some(t) => shard.outbox.target = t,
                        None => shard.outbox.records_on = false,
                    }
                    // No eviction or OOM refusal inside a script (see `oom`).
                    let maxmemory = std::mem::replace(&mut shard.evict.maxmemory, 0);
                    run_shard(r, handler, args, shard, call, out, stats);
                    shard.evict.maxmemory = maxmemory;
                    shard.outbox.records_on = prop;
                    shard.outbox.target = engine::outbox::Target::All;
                };
                if across {
                    let a = across::run(ctx, db, args, positions, body);
                    self.after_across(a);
                } else {
                    on_shard(ctx.shard, ctx.in_place.as_deref_mut(), target, body);
                }
                if too_large {
                    if self.hop_instead() {
                        return Err(mlua::Error::external(ReplyError(
                            super::wide::RESTART_TEXT.into(),
                        )));
                    }
                    self.wrote = true;
                }
                self.after_call(target);
                if r.spec.has(flags::WRITE) {
                    self.dirty = true;
                }
                self.stats.unexpected_error_replies = unexpected;
            }
            Exec::Conn(_) => {
                if let Some(refused) = self.conn_counted(lua, r, args, out)? {
                    return Ok(refused);
                }
            }
            // DEBUG from a script runs as a connection command
            // (`debug_now`): the subcommands that are coordinators from a
            // client (LOADAOF, RELOAD, OBJECT, DIGEST, DIGEST-VALUE) are
            // not run there.
            Exec::Coord(_) if r.spec.name == "debug" => {
                if let Some(refused) = self.conn_counted(lua, r, args, out)? {
                    return Ok(refused);
                }
            }
            // SORT runs here on the script's shard, its pattern keys
            // gathered first when it does not hold them (see `wide`).
            Exec::Coord(_) if matches!(r.spec.name, "sort" | "sort_ro") => {
                let (scratch, nshards, shard) = (self.scratch, self.ctx.nshards, self.shard);
                let in_place = self.ctx.in_place.is_some();
                let declared = self.declared;
                let held = |k: &[u8]| {
                    if scratch {
                        declared.contains(&k) || super::wide::held(k) == Some(true)
                    } else if in_place {
                        // Pattern keys of other shards: run on copies.
                        shard_of(k, nshards) == target
                    } else {
                        shard_of(k, nshards) == shard || declared.contains(&k)
                    }
                };
                let call = crate::sort::ScriptCall {
                    readonly: r.spec.name == "sort_ro",
                    reads_every_key: self
                        .ctx
                        .caller
                        .as_ref()
                        .is_none_or(|c| c.reads_every_key(r.id, args)),
                };
                let (db, touch) = (self.db, !self.ctx.no_touch);
                let started = std::time::Instant::now();
                let ctx = &mut *self.ctx;
                // Keys of several shards: on copies (below).
                let mut sorted = Ok(Err(Vec::new()));
                if !across {
                    sorted = on_shard(ctx.shard, ctx.in_place.as_deref_mut(), target, |sh| {
                        // Run again on copies if it needs pattern keys of
                        // other shards: its source's lookup counts once.
                        let counts = (sh.stats.keyspace_hits, sh.stats.keyspace_misses);
                        let r = crate::sort::from_script(sh, db, touch, args, call, &held, out);
                        if matches!(r, Ok(Err(_))) {
                            (sh.stats.keyspace_hits, sh.stats.keyspace_misses) = counts;
                        }
                        r
                    });
                    self.after_call(target);
                }
                // Pattern keys (or its keys) on shards the run holds: on
                // copies of all of them (`across`).
                if let Ok(Err(missing)) = &sorted {
                    if let Some(res) = self.sort_across(args, call, positions, missing, across, out)
                    {
                        sorted = res;
                    }
                }
                // Counted as Redis's `call` counts it: in commandstats
                // and, failed, in errorstats (its error table is marked
                // counted: see `vm::CountedError`).
                let failed = match sorted {
                    Ok(Ok(())) => false,
                    Ok(Err(missing)) => {
                        if self.widen_ok && !self.wrote && !self.pinned && self.db == self.orig_db {
                            self.found = missing;
                            return Err(mlua::Error::external(ReplyError(
                                super::wide::RESTART_TEXT.into(),
                            )));
                        }
                        return self.reject(lua, r, NOT_HELD);
                    }
                    Err(e) => {
                        self.error_reply(out, &e);
                        true
                    }
                };
                // As the shard commands above: a write call makes the run
                // dirty whatever it answered.
                if r.spec.has(flags::WRITE) {
                    self.dirty = true;
                }
                self.record(r, args, started, failed);
            }
            // DBSIZE, KEYS, SCAN, RANDOMKEY, FLUSHDB, FLUSHALL: over every
            // shard, which the script must hold (see `keys::script`).
            Exec::Coord(_) if crate::keys::script::handles(registry().full_name(r.id)) => {
                if let Some(refused) = self.keyspace_call(lua, r, args, out)? {
                    return Ok(refused);
                }
            }
            // OBJECT FREQ / IDLETIME / REFCOUNT: on the key's shard, held.
            Exec::Coord(_) if registry().full_name(r.id).starts_with("object|") => {
                let started = std::time::Instant::now();
                let Some(server) = self.ctx.ops.server.get().and_then(std::sync::Weak::upgrade)
                else {
                    return self.reject(lua, r, NOT_SUPPORTED);
                };
                let (db, full) = (self.db, registry().full_name(r.id));
                let ctx = &mut *self.ctx;
                let res = on_shard(ctx.shard, ctx.in_place.as_deref_mut(), target, |sh| {
                    crate::keys::object::from_script(full, &server, sh, db, args, out)
                });
                let failed = match res {
                    Some(Ok(())) => false,
                    Some(Err(e)) => {
                        self.error_reply(out, &e);
                        true
                    }
                    None => return self.reject(lua, r, NOT_SUPPORTED),
                };
                self.record(r, args, started, failed);
            }
            // INFO, MEMORY STATS and MEMORY DOCTOR: the server's figures
            // and every shard's (see `server::info_from_script`).
            Exec::Coord(_)
                if matches!(
                    registry().full_name(r.id),
                    "info" | "memory|stats" | "memory|doctor"
                ) =>
            {
                // Their per-shard figures need every shard: a run that
                // does not hold them runs again holding them, if it still
                // can (in place, the pins come here).
                if self.ctx.nshards > 1 && !self.hold_every_shard() && self.every_again() {
                    return Err(mlua::Error::external(ReplyError(
                        super::wide::RESTART_TEXT.into(),
                    )));
                }
                let started = std::time::Instant::now();
                let ops = self.ctx.ops;
                let done = if registry().full_name(r.id) == "info" {
                    let (mut visit, stats) = self.visit_shards();
                    crate::server::info_from_script(ops, &mut *visit, stats, args, out)
                } else {
                    // Every loop's connections (see `client_buffers`).
                    let buffers = self.client_buffers();
                    let (mut visit, _) = self.visit_shards();
                    let full = registry().full_name(r.id);
                    crate::memory::from_script(ops, &mut *visit, buffers, full, out)
                };
                if done.is_none() {
                    return self.reject(lua, r, NOT_SUPPORTED);
                }
                self.record(r, args, started, false);
            }
            // CLIENT LIST and INFO (with DEBUG SET-DISABLE-DENY-SCRIPTS 1):
            // read no shard (see `connection::listing`).
            Exec::Coord(_)
                if matches!(registry().full_name(r.id), "client|list" | "client|info") =>
            {
                if let Some(refused) = self.conn_counted(lua, r, args, out)? {
                    return Ok(refused);
                }
            }
            // SLOWLOG GET: entries carry their clients' labels (see
            // `ops::slowlog`); those written without are looked up on
            // every loop, which the run holds if it can (as for INFO).
            Exec::Coord(_) if registry().full_name(r.id) == "slowlog|get" => {
                if self.ctx.nshards > 1 && !self.hold_every_shard() && self.every_again() {
                    return Err(mlua::Error::external(ReplyError(
                        super::wide::RESTART_TEXT.into(),
                    )));
                }
                self.slowlog_get(r, args, out);
            }
            Exec::Coord(_) | Exec::Parent => {
                return self.reject(
                    lua,
                    r,
                    "This Redis command is not supported from scripts yet",
                )
            }
        }
        reply_to_lua(lua, out.as_bytes())
    }
}
