//! The run scope: the running script's [`Run`] reached from `redis.call`
//! & co. (installed once per VM) and from the hook (`busy`) through a
//! thread-local pointer set for the duration of one script call.

use std::cell::{Cell, RefCell};

use mlua::{Lua, MultiValue, Value};

use super::{Outcome, Run};
use crate::script::api::REPL_ALL;
use crate::script::call::CallArgs;
use crate::script::vm::{reply_error, CountedError, ReplyError, Vm, COUNTED_FIELD};

thread_local! {
    /// The run `redis.call` & co. reach: a `RefCell<Run>` with its
    /// lifetimes erased, set by [`run_scoped`] for the duration of one
    /// script call (null otherwise).
    static CURRENT: Cell<*const ()> = const { Cell::new(std::ptr::null()) };
}

/// Clears [`CURRENT`] when the call ends, however it ends.
struct CurrentGuard;

impl Drop for CurrentGuard {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(std::ptr::null()));
    }
}

/// Runs `f` with the current run.
fn with_run<R>(f: impl FnOnce(&RefCell<Run<'_, '_>>) -> mlua::Result<R>) -> mlua::Result<R> {
    let p = CURRENT.with(Cell::get);
    if p.is_null() {
        // Nothing runs the real globals outside a run (libraries load in
        // an environment of their own: `load`).
        return Err(reply_error(
            b"redis.call is only available to a running script",
        ));
    }
    // SAFETY: `run_scoped` set `p` from a `&RefCell<Run>` that lives
    // across the whole Lua call this function is called from, and the
    // guard clears it before that borrow ends; only this thread sees it.
    // The lifetimes are erased, never extended: `Run` is used only inside
    // that call.
    let run = unsafe { &*(p as *const RefCell<Run<'static, 'static>>) };
    f(run)
}

/// Installs `redis.call`, `redis.pcall`, `redis.setresp` and
/// `redis.set_repl` in the real `redis` table, once per VM: they reach the
/// running script's command through [`CURRENT`]. (Created per run they
/// cost four closures and eight protected table writes a call.)
pub fn install(lua: &Lua, redis: &mlua::Table) -> mlua::Result<()> {
    redis.raw_set(
        "call",
        lua.create_function(|lua, args: CallArgs| {
            with_run(|run| {
                let (v, failed) = run.borrow_mut().call(lua, args)?;
                if failed {
                    // The table's text, raised as Redis raises the table
                    // (with its mark: see `CountedError`).
                    let (text, counted) = match &v {
                        Value::Table(t) => (
                            match t.raw_get::<Value>("err")? {
                                Value::String(s) => s.to_string_lossy(),
                                _ => String::new(),
                            },
                            matches!(t.raw_get::<Value>(COUNTED_FIELD)?, Value::Boolean(true)),
                        ),
                        _ => (String::new(), false),
                    };
                    if counted {
                        return Err(mlua::Error::external(CountedError(text)));
                    }
                    return Err(mlua::Error::external(ReplyError(text)));
                }
                Ok(v)
            })
        })?,
    )?;
    redis.raw_set(
        "pcall",
        lua.create_function(|lua, args: CallArgs| {
            with_run(|run| Ok(run.borrow_mut().call(lua, args)?.0))
        })?,
    )?;
    redis.raw_set(
        "acl_check_cmd",
        lua.create_function(|_, args: MultiValue| {
            with_run(|run| Ok(run.borrow().acl_check_cmd(args)?.0))
        })?,
    )?;
    redis.raw_set(
        "setresp",
        lua.create_function(|_, args: MultiValue| {
            with_run(|run| {
                if args.len() != 1 {
                    return Err(reply_error(b"redis.setresp() requires one argument."));
                }
                match to_number(&args[0]) as i64 {
                    2 => run.borrow_mut().resp3 = false,
                    3 => run.borrow_mut().resp3 = true,
                    _ => return Err(reply_error(b"RESP version must be 2 or 3.")),
                }
                Ok(())
            })
        })?,
    )?;
    redis.raw_set(
        "set_repl",
        lua.create_function(|_, args: MultiValue| {
            with_run(|run| {
                if args.len() != 1 {
                    return Err(reply_error(b"redis.set_repl() requires two arguments."));
                }
                let flags = to_number(&args[0]) as i64;
                if flags & !REPL_ALL != 0 {
                    return Err(reply_error(
                        b"Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.",
                    ));
                }
                run.borrow_mut().repl = flags;
                Ok(())
            })
        })?,
    )?;
    Ok(())
}

/// The running script passed `busy-reply-threshold` (the hook, see
/// `busy::HookState::in_place`): a run in place that can still be taken
/// back is marked to be (true), to run again on copies, where a long
/// script holds its keys, not whole shards whose clients could not be
/// answered `-BUSY` (their loops are pinned to this one); so is a run by
/// a call from another loop (`busy::by_call`), to run again as a hop,
/// which leaves that loop free.
pub(crate) fn abandon_for_busy() -> bool {
    let p = CURRENT.with(Cell::get);
    if p.is_null() {
        return false;
    }
    // SAFETY: as in `with_run` (the hook runs inside the Lua call).
    let run = unsafe { &*(p as *const RefCell<Run<'static, 'static>>) };
    let Ok(mut r) = run.try_borrow_mut() else {
        return false;
    };
    // (One that published stays as before: a long script's messages
    // are not withdrawn for a busy pass.)
    if !r.restartable || !r.widen_ok || r.wrote || r.pinned || r.published {
        return false;
    }
    r.restart = true;
    // A long script: its calls from another loop hop from now on, rather
    // than run twice (see `HopMark`).
    if r.by_call {
        r.hop.set();
        crate::script::busy::note_marked();
    }
    true
}

/// The server state of the running script (its `ShardCtx::ops`), for the
/// hook (`busy`), whose VM is its thread's and knows no server: where the
/// run publishes itself past its server's `busy-reply-threshold`. `None`
/// outside a script call.
pub(crate) fn running_ops() -> Option<&'static crate::ops::Ops> {
    let p = CURRENT.with(Cell::get);
    if p.is_null() {
        return None;
    }
    // SAFETY: as in `with_run` (the hook runs inside the Lua call).
    let run = unsafe { &*(p as *const RefCell<Run<'static, 'static>>) };
    run.try_borrow().ok().map(|r| r.ctx.ops)
}

/// The hook's step of a running snapshot on the shard the running script
/// holds (`persist::tick`, about every millisecond of Lua): the shard is
/// between commands here (no `redis.call` runs), as between a loop's
/// batches. Without it a script that runs long on a shard's thread stops
/// that shard's part of a snapshot begun before it: the AOF rewrite
/// begun by `CONFIG SET appendonly yes` would then wait for the script's
/// end (and SHUTDOWN NOSAVE, refused while the first AOF is written, with
/// it), where Redis's forked child is done long before. Runs on copies
/// (`scratch`) hold no real shard: the owners' loops step theirs.
pub(crate) fn snapshot_pass() {
    let p = CURRENT.with(Cell::get);
    if p.is_null() {
        return;
    }
    // SAFETY: as in `with_run` (the hook runs inside the Lua call).
    let run = unsafe { &*(p as *const RefCell<Run<'static, 'static>>) };
    let Ok(mut r) = run.try_borrow_mut() else {
        return;
    };
    if r.scratch || !r.ctx.shard.snapshot_running() {
        return;
    }
    let Some(server) = r.ctx.ops.server.get().and_then(std::sync::Weak::upgrade) else {
        return;
    };
    crate::persist::tick(&server.persist, r.ctx.shard, false);
}

/// Calls `f` under the message handler with `redis.call` & co. reaching
/// `run` for the duration of the call.
pub(super) fn run_scoped(
    vm: &Vm,
    f: mlua::Function,
    run: &RefCell<Run<'_, '_>>,
) -> mlua::Result<Outcome> {
    {
        {
            let prev = CURRENT.with(|c| c.replace(run as *const RefCell<Run<'_, '_>> as *const ()));
            debug_assert!(prev.is_null(), "a script run inside another");
            let _guard = CurrentGuard;
            let mut r: MultiValue = vm.bounded(|| vm.xpcall.call((f, vm.handler.clone())))?;
            let ok = matches!(r.pop_front(), Some(Value::Boolean(true)));
            let value = r.pop_front().unwrap_or(Value::Nil);
            if ok {
                return Ok(Outcome::Returned(value));
            }
            if let Value::String(s) = &value {
                return Ok(Outcome::Message(s.as_bytes().to_vec()));
            }
            let Value::Table(t) = value else {
                return Ok(Outcome::Failed {
                    err: b"ERR execution failure".to_vec(),
                    line: None,
                    counted: false,
                });
            };
            let err = match t.raw_get::<Value>("err")? {
                Value::String(s) => s.as_bytes().to_vec(),
                _ => b"ERR execution failure".to_vec(),
            };
            let line = match t.raw_get::<Value>("line")? {
                Value::Integer(n) => Some(n),
                Value::Number(n) => Some(n as i64),
                _ => None,
            };
            let source = match t.raw_get::<Value>("source")? {
                Value::String(s) => s.to_string_lossy(),
                _ => crate::script::vm::CHUNK_NAME.to_string(),
            };
            let line = line.map(|l| (l, source));
            let counted = matches!(t.raw_get::<Value>(COUNTED_FIELD)?, Value::Boolean(true));
            Ok(Outcome::Failed { err, line, counted })
        }
    }
}

/// Lua's `lua_tonumber`: numbers and numeric strings, 0 otherwise.
fn to_number(v: &Value) -> f64 {
    match v {
        Value::Integer(n) => *n as f64,
        Value::Number(n) => *n,
        Value::String(s) => std::str::from_utf8(&s.as_bytes())
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0.0),
        _ => 0.0,
    }
}
