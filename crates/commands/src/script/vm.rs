//! Two Lua 5.1 VMs per thread, each built once and reused by every run on
//! that thread: one for EVAL scripts, one for function libraries (Redis
//! keeps the same two per server, `lctx.lua` and the function engine's
//! VM; we keep them per thread because scripts run where their keys live,
//! and a VM is not `Send`). Two, as Redis, so that each reports its own
//! memory (INFO `used_memory_lua` / `used_memory_vm_eval` for scripts,
//! `used_memory_vm_functions` for libraries: Redis's unit/scripting bounds
//! the first while functions are loaded) and so that loaded libraries
//! never weigh on the scripts' collections. The function VM is created on
//! the first function a thread loads or calls; a thread that runs only
//! scripts has one VM.
//!
//! The VM is a per-thread cache, like an allocator's arena: it holds no
//! state a script could leave for the next one (globals are read-only, see
//! below) beyond compiled functions and library tables, so which thread
//! runs a script changes nothing. It is created on the first script a
//! thread runs, for the server whose `Ops` the run passes ([`with_vm`]):
//! it compiles that server's scripts (`cache`, `ops.scripts`) and counts
//! its memory there. A thread serves one server; a VM that meets another
//! one (in-process tests run several servers on one thread) is dropped
//! and made anew, never shared.
//!
//! # The sandbox (as Redis 7.0.15)
//!
//! * Libraries: base (without `print`, `dofile`, `loadfile`, `setfenv`,
//!   `getfenv`, `module`, `require`, `newproxy`), `table`, `string`,
//!   `math`, and Redis's `cjson`, `cmsgpack`, `bit`, `struct` (written in
//!   Rust here, `libs`); no `os`, `io`, `debug`, `package`.
//! * Globals are read-only: the thread's global table is an empty proxy
//!   whose `__index` reads the real globals and raises Redis's
//!   `Script attempted to access nonexistent global variable 'x'` for a
//!   missing one, and whose `__newindex` raises `Attempt to modify a
//!   readonly table` (Redis 7.0.15's readonly tables). The library tables
//!   (`redis`, `string`, `cjson` ...) are proxies the same way, so no script
//!   can monkey-patch `redis.call` for the next one. `pairs`, `next`,
//!   `ipairs`, `rawget`, `rawset` and `setmetatable` see through (or refuse)
//!   the proxies as Redis's readonly tables would; they are Rust functions
//!   (`sandbox`), not Lua wrappers, so that errors name the user's line
//!   (a Lua wrapper called as `return f(...)` is a tail call that hides
//!   the caller's frame).
//! * `pcall` is Redis's: an error table `{err=...}` caught by it becomes
//!   its message string.
//!
//! Rejected: Redis patches the Lua VM for readonly tables; mlua builds the
//! stock Lua 5.1 sources, so the proxies do the same job from Lua.
//!
//! # Memory
//!
//! Each VM is bounded ([`memory_limit`]): a script that allocates without
//! end (`while true do t[#t+1] = string.rep('x', 1e6) end`) fails with
//! Lua's `not enough memory`, replied as Redis replies an error that is
//! not an error table (`ERR Error running script <name>, not enough
//! memory`), and the VM collects its garbage before the next run. Redis
//! has no such bound (its Lua heap grows until the machine runs out); the
//! bound here is `maxmemory` when set, clamped to [`VM_MEMORY_MIN`,
//! `VM_MEMORY_MAX`], and `VM_MEMORY_MAX` (1 GiB) without it, per VM, so a
//! runaway script cannot take the process down. Lua 5.1 has no emergency
//! collection: an allocation refused at the bound fails even when garbage
//! could be freed, hence a bound far above what real scripts use. The VM's
//! allocations are this thread's, so they also count in its shard's
//! memory (`used_memory`), and INFO reports them as `used_memory_lua` /
//! `used_memory_vm_eval` (`ScriptCache::vm_bytes`, updated after each run).
//! A bound makes mlua run every API call protected (each one a `pcall`
//! with a fresh C closure: a memory error can then happen anywhere), about
//! a third of an EVALSHA's instructions under callgrind. So the bound is
//! set only while Lua code runs ([`Vm::bounded`]: the script, a library's
//! load); the calls around it (KEYS and ARGV, compiling) allocate little
//! and run unprotected. Replies converted for `redis.call` run inside the
//! script, bounded.
//!
//! # Errors
//!
//! Scripts run under `xpcall` with a message handler (Redis's
//! `__redis__err__handler`): it turns any error into `{err=..., line=N}`,
//! where `err` is an error table's own text or `ERR <message>`, and `N` the
//! line of the innermost script frame (the user's code, not the prelude's
//! wrappers); the caller formats Redis's `<err> script: <sha>, on
//! @user_script:<N>.`.

use std::cell::RefCell;

use mlua::{Function, Lua, LuaOptions, StdLib, Table, Value};

use crate::ctx::ThreadStats;

/// The chunk name Redis gives scripts (`user_script:1: ...` in messages).
pub const CHUNK_NAME: &str = "@user_script";
/// The chunk name Redis gives function libraries.
pub const FUNCTION_CHUNK_NAME: &str = "@user_function";

/// A VM's memory bound without `maxmemory`, and its ceiling with it.
pub const VM_MEMORY_MAX: usize = 1 << 30;
/// The lowest bound `maxmemory` can set (the VM's own tables and compiled
/// scripts need a few MiB).
pub const VM_MEMORY_MIN: usize = 32 << 20;

/// The memory bound of a VM under `maxmemory` (0: none); see the module
/// documentation.
pub fn memory_limit(maxmemory: u64) -> usize {
    if maxmemory == 0 {
        return VM_MEMORY_MAX;
    }
    usize::try_from(maxmemory)
        .unwrap_or(usize::MAX)
        .clamp(VM_MEMORY_MIN, VM_MEMORY_MAX)
}

/// Compiled functions a VM keeps at most; past it, the oldest half is
/// dropped (they compile again on their next run). Redis keeps every
/// script; a bound here costs only a recompilation.
const COMPILED_MAX: usize = 10_000;
/// Every this many runs, a collection step of this many KB (Redis's
/// `LUA_GC_CYCLE_PERIOD`; see [`Vm::after_run`]).
const GC_PERIOD: u32 = 50;

/// Runs the prelude: removes what the sandbox forbids, replaces `pcall`
/// (with [`redis_pcall`]), and builds the read-only proxies.
const PRELUDE: &str = r#"
local load_redis, redis_pcall = ...
local real = _G
local error, type, tostring, rawget_raw, rawset_raw, ipairs_raw =
      error, type, tostring, rawget, rawset, ipairs
local setmetatable_raw = setmetatable

for _, name in ipairs_raw({'print', 'dofile', 'loadfile', 'setfenv', 'getfenv',
                           'module', 'require', 'newproxy', 'os', 'io', 'debug',
                           'package'}) do
  rawset_raw(real, name, nil)
end

pcall = redis_pcall

local proxies = setmetatable_raw({}, {__mode = 'k'})
local function readonly() error('Attempt to modify a readonly table', 2) end
local function missing(_, k)
  error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
end
local function protect(t, globals)
  if globals then
    -- On the real table, so that the proxy's __index is a table: a read
    -- of a global that exists costs no function call (a script reads
    -- `redis` and `KEYS` on every call); a missing one still raises.
    setmetatable_raw(t, {__index = missing, __metatable = false})
  end
  local p = setmetatable_raw({}, {__index = t, __newindex = readonly, __metatable = false})
  proxies[p] = t
  return p
end

for _, name in ipairs_raw({'redis', 'string', 'table', 'math', 'coroutine', 'cjson',
                           'cmsgpack', 'bit', 'struct'}) do
  local lib = rawget_raw(real, name)
  if lib ~= nil then rawset_raw(real, name, protect(lib, false)) end
end
local g = protect(real, true)
rawset_raw(real, '_G', g)

-- What `getmetatable` shows (Redis 7.0.15 makes these metatables read-only
-- rather than hiding them): the library proxies have none; _G's is a
-- read-only table with the missing-global `__index`; the strings' one is
-- read-only, its `__index` the `string` proxy (so that no script can add
-- string methods for the next one).
local getmetatable_raw = getmetatable
local smt = getmetatable_raw('')
rawset_raw(smt, '__index', rawget_raw(real, 'string'))
local smt_proxy = protect(smt, false)
local gmeta = protect({__index = missing}, false)
local function getmeta(o)
  if o ~= nil and o == o and proxies[o] ~= nil then
    if o == g then return gmeta end
    return nil
  end
  local m = getmetatable_raw(o)
  if m == smt then return smt_proxy end
  return m
end

-- A function library's environment (Redis 7.0's function_lua.c): while
-- its code loads, the only global is the load-time `redis` table; once
-- loaded, `done()` turns it into the scripts' globals (without KEYS and
-- ARGV, which functions receive as arguments). Writes are refused both
-- times, missing names raise Redis's error. Only the functions' VM has it.
if load_redis == nil then return g, proxies, nil, getmeta end
local load_api = {redis = protect(load_redis, true)}
local function make_env()
  local api = load_api
  local env = setmetatable_raw({}, {
    __index = function(_, k)
      local v = rawget_raw(api, k)
      if v == nil or (api == real and (k == 'KEYS' or k == 'ARGV')) then
        error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
      end
      return v
    end,
    __newindex = readonly, __metatable = false})
  return env, function() api = real end
end
return g, proxies, make_env, getmeta
"#;

/// Where [`redis_pcall`] finds `errstr` in the registry: a function that
/// turns an mlua error value into its message.
const ERRSTR_KEY: &std::ffi::CStr = c"tessera.errstr";

/// The scripts' `pcall`, Redis 7.0's `luaRedisPcall` step for step, so that
/// what scripts see is Redis's: its first argument called with the others
/// (no check that there is one: with none it would call the `true` it
/// pushed, so it returns `false, 'attempt to call a boolean value'`);
/// `true` and the results, or `false` and the error, where an error table
/// with a string (or number) `err` gives that string and one without
/// gives the table and its `err` field (three values, as Redis). An
/// error mlua raised (a userdata: `redis.call`'s) becomes its text. A C
/// function, so `error(msg, level)` counts the levels as in Redis (a Lua
/// wrapper was a frame more).
///
/// # Safety
/// Called by Lua only, with its arguments on `state`'s stack. Its own
/// Rust frame holds nothing to drop: an error raised by a metamethod of
/// the error table may unwind past it (as in Redis).
unsafe extern "C-unwind" fn redis_pcall(state: *mut mlua::lua_State) -> std::os::raw::c_int {
    use mlua::ffi;
    // SAFETY: see the function's contract; every index used exists (the
    // placeholder at 1, the error object on top after a failed call).
    unsafe {
        let argc = ffi::lua_gettop(state);
        if argc == 0 {
            ffi::lua_pushboolean(state, 0);
            ffi::lua_pushstring(state, c"attempt to call a boolean value".as_ptr());
            return 2;
        }
        ffi::lua_pushboolean(state, 1);
        ffi::lua_insert(state, 1);
        if ffi::lua_pcall(state, argc - 1, ffi::LUA_MULTRET, 0) != 0 {
            ffi::lua_remove(state, 1);
            match ffi::lua_type(state, -1) {
                ffi::LUA_TTABLE => {
                    ffi::lua_getfield(state, -1, c"err".as_ptr());
                    if ffi::lua_isstring(state, -1) != 0 {
                        ffi::lua_replace(state, -2);
                    }
                }
                ffi::LUA_TUSERDATA => {
                    // errstr(e): its text (a string in any case).
                    ffi::lua_getfield(state, ffi::LUA_REGISTRYINDEX, ERRSTR_KEY.as_ptr());
                    ffi::lua_insert(state, -2);
                    if ffi::lua_pcall(state, 1, 1, 0) != 0 {
                        ffi::lua_pop(state, 1);
                        ffi::lua_pushstring(state, c"".as_ptr());
                    }
                }
                _ => {}
            }
            ffi::lua_pushboolean(state, 0);
            ffi::lua_insert(state, 1);
        }
        ffi::lua_gettop(state)
    }
}

/// Which of a thread's two VMs (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmKind {
    /// EVAL, EVALSHA, SCRIPT LOAD.
    Eval = 0,
    /// FUNCTION LOAD, FCALL.
    Functions = 1,
}

/// One thread's VM of one kind; see the module documentation.
pub struct Vm {
    pub kind: VmKind,
    /// The server this VM serves (its script cache, where its memory is
    /// counted, its function libraries): see the module documentation.
    pub(crate) ops: &'static crate::ops::Ops,
    pub lua: Lua,
    /// The real globals (KEYS and ARGV are set here before each run).
    pub real: Table,
    /// The real `redis` table (its `call`, `pcall`, `setresp` and
    /// `set_repl` reach the running command: `run::install`).
    pub redis: Table,
    pub xpcall: Function,
    pub handler: Function,
    compiled: super::cache::ShaMap<Function>,
    /// The script cache generation the compiled functions belong to.
    gen: u64,
    /// This VM's memory as last reported (see `ScriptCache::report_vm_bytes`).
    reported_bytes: usize,
    /// Builds a library's environment (see the prelude's `make_env`); the
    /// functions' VM only (the scripts' one is smaller without it).
    pub make_env: Option<Function>,
    /// `bind(f, keys, args)`: a function calling `f(keys, args)`, run
    /// under `xpcall` for FCALL (Lua 5.1's `xpcall` passes no arguments).
    pub bind: Function,
    /// Function libraries this VM has loaded (see `load`).
    pub libs: super::load::VmLibraries,
    /// Runs so far (see [`Vm::after_run`]).
    runs: u32,
    /// The instruction hook's state: time limits and kills (see `busy`).
    pub hook: std::rc::Rc<super::busy::HookState>,
    /// The memory bound set on `lua` (see [`memory_limit`]).
    memory_limit: usize,
    /// The journal of this VM's last run that could be abandoned, kept for
    /// its buffers (see `traces`; a field, not a thread-local: ~40
    /// instructions less a run).
    pub(crate) journal: Option<Box<super::traces::Journal>>,
}

thread_local! {
    static VMS: [RefCell<Option<Vm>>; 2] = const { [RefCell::new(None), RefCell::new(None)] };
    /// Statistics of commands run from scripts on this thread, not
    /// reported yet (Redis counts them in commandstats); `None` while a
    /// run holds them.
    static STATS: RefCell<Option<ThreadStats>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's VM of `kind` for the server of `ops`,
/// creating it on first use (and when the VM served another server).
pub fn with_vm<R>(
    kind: VmKind,
    ops: &'static crate::ops::Ops,
    f: impl FnOnce(&mut Vm) -> R,
) -> Result<R, mlua::Error> {
    VMS.with(|vms| {
        // A re-entry (a command served while a script runs, see `busy`)
        // is refused, never a panic, whichever VM the run holds.
        let busy = || mlua::Error::runtime("the Lua VM is busy running a script");
        if vms[1 - kind as usize].try_borrow_mut().is_err() {
            return Err(busy());
        }
        let Ok(mut slot) = vms[kind as usize].try_borrow_mut() else {
            return Err(busy());
        };
        // Another server's VM (one pointer compare): see the module docs.
        if slot.as_ref().is_some_and(|vm| !std::ptr::eq(vm.ops, ops)) {
            if let Some(old) = slot.take() {
                old.uncount();
            }
        }
        if kind == VmKind::Eval {
            drop_stale(&mut slot);
        }
        if slot.is_none() {
            *slot = Some(Vm::new(kind, ops)?);
        }
        // INVARIANT: filled just above.
        Ok(f(slot.as_mut().expect("VM created")))
    })
}

/// SCRIPT FLUSH resets the scripts' VMs, as Redis resets its one (its
/// unit/scripting runs 10,000 scripts after one and bounds
/// `used_memory_lua` at 100 KB, about two fresh VMs here): a thread's VM
/// older than its server's script cache generation is dropped, from its thread's
/// cron ([`cron`]) or at its next use, whichever comes first, and made
/// anew on its next use. Function VMs live on (FUNCTION FLUSH does not
/// reset Redis's).
fn drop_stale(slot: &mut Option<Vm>) {
    if slot
        .as_ref()
        .is_some_and(|vm| vm.gen != vm.ops.scripts.generation())
    {
        if let Some(old) = slot.take() {
            old.uncount();
        }
    }
}

/// A worker's cron, each tick: drops this thread's scripts' VM if SCRIPT
/// FLUSH made it stale (see [`drop_stale`]); nothing while it runs.
pub fn cron() {
    VMS.with(|vms| {
        if let Ok(mut slot) = vms[VmKind::Eval as usize].try_borrow_mut() {
            drop_stale(&mut slot);
        }
    });
}

/// Whether this thread holds a scripts' VM (made stale or not): a thread
/// asleep while a hub runs its worker runs no cron of its own (the hub's
/// drops the hub's VM), so it wakes now and then to run [`cron`] while it
/// holds one (`server::host::loan`), and SCRIPT FLUSH frees every thread's.
pub fn holds_eval_vm() -> bool {
    VMS.with(|vms| {
        vms[VmKind::Eval as usize]
            .try_borrow()
            .map_or(true, |slot| slot.is_some())
    })
}

/// Takes this thread's script statistics for a run (fresh ones if a run
/// holds them: runs do not nest); [`put_stats`] gives them back.
pub fn take_stats() -> ThreadStats {
    STATS.with(|s| s.borrow_mut().take()).unwrap_or_default()
}

/// Gives back what [`take_stats`] took.
pub fn put_stats(stats: ThreadStats) {
    STATS.with(|s| *s.borrow_mut() = Some(stats));
}

/// Counts the error replies a script returned below its reply's top (see
/// `convert::lua_to_reply`; `true`: counted already, a `redis.pcall`
/// error) in the scripts' statistics, as Redis counts every error reply,
/// and marks the script command failed, for [`take_nested_failed`]:
/// Redis fails a command for an error it replies, counted or not
/// (`afterErrorReply`).
pub fn count_nested_errors(lines: &[(Vec<u8>, bool)]) {
    STATS.with(|s| {
        if let Ok(Some(own)) = s.try_borrow_mut().as_deref_mut() {
            for (l, _) in lines.iter().filter(|(_, counted)| !counted) {
                own.count_error(l);
            }
        }
    });
    NESTED_FAILED.with(|f| f.set(true));
}

/// Whether the script command that just ran returned error replies below
/// its top (then it counts as failed); clears the mark.
pub fn take_nested_failed() -> bool {
    NESTED_FAILED.with(|f| f.replace(false))
}

thread_local! {
    static NESTED_FAILED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Lends the thread's statistics to its scripts for one script command
/// (`exec::run_shard_ready`), so that the script's `redis.call`s count
/// straight into them: draining the scripts' own afterwards cost ~15 k
/// instructions a call (a pass over every command's slot) plus a latency
/// histogram (24 KiB) freed and allocated again per command it ran.
/// Returns whether they were lent (not before this thread's first script
/// or while a script runs); [`return_stats`] gives them back.
pub fn lend_stats(stats: &mut ThreadStats) -> bool {
    STATS.with(|s| match s.try_borrow_mut().as_deref_mut() {
        Ok(Some(own)) => {
            std::mem::swap(own, stats);
            true
        }
        _ => false,
    })
}

/// Takes back what [`lend_stats`] lent (`stats` holds the scripts' own
/// meanwhile). A script's run gives its statistics back before it ends,
/// so the swap restores both.
pub fn return_stats(stats: &mut ThreadStats) {
    STATS.with(|s| {
        if let Ok(Some(own)) = s.try_borrow_mut().as_deref_mut() {
            std::mem::swap(own, stats);
        }
    });
}

/// Moves the statistics of the commands this thread's scripts ran with
/// `redis.call` into `into` (Redis counts them in INFO commandstats and
/// total_commands_processed, as any command). Nothing while a script
/// runs (those come next time).
pub fn drain_stats(into: &mut ThreadStats) {
    STATS.with(|s| {
        if let Ok(Some(own)) = s.try_borrow_mut().as_deref_mut() {
            into.absorb(own);
        }
    });
}

/// An error Redis raises as a table `{err=...}` (from `redis.call`,
/// `redis.setresp` ...): the table's `err` text, `CODE message`. Raised
/// from Rust as an mlua error (mlua cannot raise a table); the message
/// handler and `pcall` read it back as Redis's table would be read.
#[derive(Debug, Clone)]
pub struct ReplyError(pub String);

impl std::fmt::Display for ReplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReplyError {}

/// A [`ReplyError`] whose error was counted in INFO errorstats already:
/// `redis.call`'s error reply or rejection (Redis marks that table
/// `ignore_error_stats_update`, so the script's own error reply does not
/// count it again).
#[derive(Debug, Clone)]
pub struct CountedError(pub String);

impl std::fmt::Display for CountedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CountedError {}

/// The field Redis sets on an error table whose error was counted (see
/// [`CountedError`]).
pub const COUNTED_FIELD: &str = "ignore_error_stats_update";

/// Raises `{err="ERR msg"}` (or the code `msg` carries, see
/// `convert::error_text`).
pub fn reply_error(msg: &[u8]) -> mlua::Error {
    let text = super::convert::error_text(msg);
    mlua::Error::external(ReplyError(String::from_utf8_lossy(&text).into_owned()))
}

/// The table text of a [`ReplyError`] or [`CountedError`] inside `e`, if
/// it is one, and whether it is counted.
pub fn reply_error_text(e: &mlua::Error) -> Option<(&str, bool)> {
    let mut e = e;
    loop {
        match e {
            mlua::Error::CallbackError { cause, .. } => e = cause,
            mlua::Error::ExternalError(x) => {
                if let Some(c) = x.downcast_ref::<CountedError>() {
                    return Some((c.0.as_str(), true));
                }
                return x
                    .downcast_ref::<ReplyError>()
                    .map(|r| (r.0.as_str(), false));
            }
            _ => return None,
        }
    }
}

/// The innermost message of an mlua error (a Rust library function's
/// error comes wrapped in callback errors).
pub fn error_text(e: &mlua::Error) -> String {
    let mut e = e;
    loop {
        match e {
            mlua::Error::CallbackError { cause, .. } => e = cause,
            mlua::Error::ExternalError(x) => return x.to_string(),
            mlua::Error::RuntimeError(s) => return s.clone(),
            mlua::Error::SyntaxError { message, .. } => return message.clone(),
            mlua::Error::MemoryError(s) => return s.clone(),
            other => return other.to_string(),
        }
    }
}

impl Vm {
    /// Reports this VM's memory for INFO (after a run or a compilation).
    pub fn report_memory(&mut self) {
        let now = self.lua.used_memory();
        let cache = &self.ops.scripts;
        cache.report_vm_bytes(self.kind, self.gen, self.reported_bytes, now);
        self.reported_bytes = now;
    }

    /// Takes this VM's memory out of its server's count (it is dropped).
    fn uncount(self) {
        let cache = &self.ops.scripts;
        cache.report_vm_bytes(self.kind, self.gen, self.reported_bytes, 0);
    }

    /// Sets the bound of this VM's memory (see [`memory_limit`]), applied
    /// while Lua code runs ([`Vm::bounded`]).
    pub fn set_memory_limit(&mut self, limit: usize) {
        self.memory_limit = limit;
    }

    /// Runs `f` (Lua code) under the memory bound; unbounded again after
    /// (see "Memory" above).
    pub fn bounded<R>(&self, f: impl FnOnce() -> R) -> R {
        // Fails only without mlua's allocator, which the vendored build
        // always has; the VM then stays unbounded.
        let _ = self.lua.set_memory_limit(self.memory_limit);
        super::libs::cjson::reset();
        let r = f();
        let _ = self.lua.set_memory_limit(0);
        r
    }

    /// After every run: each [`GC_PERIOD`]th run takes an incremental
    /// collection step of [`GC_PERIOD`] KB (Redis's `LUA_GC_CYCLE_PERIOD`
    /// in `evalGenericCommand`), so the garbage of many short scripts (their
    /// KEYS/ARGV tables, reply strings) is collected a little at a time
    /// instead of piling up until Lua's own threshold (twice the live heap)
    /// and then costing one long cycle. Redis's unit/scripting asserts
    /// `used_memory_lua` stays under 100 KB over 10,000 runs.
    pub fn after_run(&mut self) {
        self.runs = self.runs.wrapping_add(1);
        if !self.runs.is_multiple_of(GC_PERIOD) {
            return;
        }
        use mlua::ffi;
        self.lua.exec_raw_lua(|raw| {
            // SAFETY: the VM's own state, outside any Lua call; LUA_GCSTEP
            // runs finalizers only for userdata with `__gc`, which scripts
            // cannot create (no `newproxy`, protected metatables).
            unsafe {
                ffi::lua_gc(
                    raw.state(),
                    ffi::LUA_GCSTEP,
                    GC_PERIOD as std::os::raw::c_int,
                );
            }
        });
    }

    /// After a run that hit the bound: frees its garbage now (Lua 5.1 has
    /// no emergency collection), so the next run starts with room.
    pub fn collect_garbage(&mut self) {
        let _ = self.lua.gc_collect();
        let _ = self.lua.gc_collect();
    }

    fn new(kind: VmKind, ops: &'static crate::ops::Ops) -> mlua::Result<Vm> {
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::new(),
        )?;
        let real = lua.globals();
        let xpcall: Function = real.get("xpcall")?;
        super::api::install(&lua, &real)?;
        super::libs::install(&lua, &real)?;
        let redis: Table = real.raw_get("redis")?;
        super::run::install(&lua, &redis)?;
        let errstr = lua.create_function(|_, v: Value| {
            Ok(match v {
                Value::Error(e) => error_text(&e),
                _ => String::new(),
            })
        })?;
        let key = ERRSTR_KEY.to_str().map_err(mlua::Error::external)?;
        lua.set_named_registry_value(key, errstr)?;
        // SAFETY: `redis_pcall` follows the Lua C API's contract (see it).
        let redis_pcall = unsafe { lua.create_c_function(redis_pcall)? };
        let libs = super::load::VmLibraries::default();
        let load_redis = match kind {
            VmKind::Functions => Some(super::load::load_api(&lua, &redis, &libs)?),
            VmKind::Eval => None,
        };
        let (proxy, proxies, make_env, getmeta): (Table, Table, Option<Function>, Function) = lua
            .load(PRELUDE)
            .set_name("=prelude")
            .call((load_redis, redis_pcall))?;
        super::sandbox::install(&lua, &real, proxies, getmeta)?;
        lua.set_globals(proxy)?;
        let handler = lua.create_function(message_handler)?;
        let hook = super::busy::HookState::install(&lua)?;
        let bind: Function = lua
            .load("return function(f, k, a) return function() return f(k, a) end end")
            .set_name("=bind")
            .call(())?;
        // What building the libraries, the sandbox and the prelude left
        // behind is garbage from here on: collected once, so a VM starts
        // at its live size (each thread has one).
        lua.gc_collect()?;
        let reported_bytes = lua.used_memory();
        let gen = ops.scripts.generation();
        ops.scripts.report_vm_bytes(kind, gen, 0, reported_bytes);
        let mut vm = Vm {
            kind,
            ops,
            reported_bytes,
            lua,
            real,
            redis,
            xpcall,
            handler,
            compiled: Default::default(),
            gen,
            make_env,
            bind,
            libs,
            runs: 0,
            hook,
            memory_limit: VM_MEMORY_MAX,
            journal: None,
        };
        // Bounded from the start (FUNCTION LOAD runs library code before
        // any script sets the bound under maxmemory).
        vm.set_memory_limit(VM_MEMORY_MAX);
        Ok(vm)
    }

    /// The compiled function of `sha`, compiling `body` (from `skip`, the
    /// shebang's length) if this VM has not yet. A compile error is
    /// Redis's `Error compiling script (new function): ...` text without
    /// the `ERR ` code.
    pub fn function(
        &mut self,
        sha: &[u8; 40],
        body: &[u8],
        skip: usize,
        gen: u64,
    ) -> Result<Function, String> {
        if gen != self.gen {
            self.compiled.clear();
            self.gen = gen;
        }
        if let Some(f) = self.compiled.get(sha) {
            return Ok(f.clone());
        }
        let f = compile(&self.lua, &body[skip..])?;
        if self.compiled.len() >= COMPILED_MAX {
            let drop: Vec<[u8; 40]> = self
                .compiled
                .keys()
                .take(COMPILED_MAX / 2)
                .copied()
                .collect();
            for k in drop {
                self.compiled.remove(&k);
            }
        }
        self.compiled.insert(*sha, f.clone());
        Ok(f)
    }
}

/// Compiles a script body as Redis names it (`f_<sha>`'s body, chunk
/// `@user_script`).
pub fn compile(lua: &Lua, body: &[u8]) -> Result<Function, String> {
    lua.load(body)
        .set_name(CHUNK_NAME)
        .set_mode(mlua::chunk::ChunkMode::Text)
        .into_function()
        .map_err(|e| format!("Error compiling script (new function): {}", error_text(&e)))
}

/// Redis's `__redis__err__handler`, see the module documentation.
fn message_handler(lua: &Lua, err: Value) -> mlua::Result<Table> {
    let mut msg: Vec<u8> = Vec::new();
    let mut counted = false;
    match &err {
        Value::Table(t) => match t.get::<Value>("err")? {
            Value::String(s) => msg.extend_from_slice(&s.as_bytes()),
            Value::Integer(n) => msg.extend_from_slice(n.to_string().as_bytes()),
            Value::Number(n) => msg.extend_from_slice(lua_number(n).as_bytes()),
            // Redis 7.0.15 crashes on an error table without `err`.
            _ => msg.extend_from_slice(b"ERR unknown error"),
        },
        Value::String(s) => {
            msg.extend_from_slice(b"ERR ");
            msg.extend_from_slice(&s.as_bytes());
        }
        Value::Error(e) => match reply_error_text(e) {
            // A run abandoned for a wider one (`wide`: it named a key it
            // does not hold) has no reply: its caller drops what this
            // returns. Building the error table (three protected
            // `raw_set`s, a string, the stack walk for the line) and
            // collecting it after cost ~13 k instructions of the ~50 k an
            // undeclared key added to a call (bench/scripting_cg.sh
            // `stray`, session 24).
            Some((t, _)) if t == super::wide::RESTART_TEXT => return lua.create_table(),
            Some((t, c)) => {
                msg.extend_from_slice(t.as_bytes());
                counted = c;
            }
            None => {
                msg.extend_from_slice(b"ERR ");
                msg.extend_from_slice(error_text(e).as_bytes());
            }
        },
        Value::Nil => msg.extend_from_slice(b"ERR nil"),
        Value::Boolean(b) => msg.extend_from_slice(if *b { b"ERR true" } else { b"ERR false" }),
        Value::Integer(n) => msg.extend_from_slice(format!("ERR {n}").as_bytes()),
        Value::Number(n) => msg.extend_from_slice(format!("ERR {}", lua_number(*n)).as_bytes()),
        other => msg.extend_from_slice(format!("ERR {}", other.type_name()).as_bytes()),
    }
    // Level 0 is this handler; the first frame of the user's script from
    // the error point outwards gives the line.
    let mut line = None;
    for level in 1..256 {
        let Some((user, l)) = lua.inspect_stack(level, |d| {
            let user = match d.source().source.as_deref() {
                Some(CHUNK_NAME) => Some(CHUNK_NAME),
                Some(FUNCTION_CHUNK_NAME) => Some(FUNCTION_CHUNK_NAME),
                _ => None,
            };
            (user, d.current_line())
        }) else {
            break;
        };
        if let Some(source) = user {
            line = l.map(|l| (l, source));
            break;
        }
    }
    // The raised table itself, as Redis's handler returns it, keeps its
    // mark (see `CountedError`).
    if let Value::Table(t) = &err {
        counted = matches!(t.raw_get::<Value>(COUNTED_FIELD)?, Value::Boolean(true));
    }
    let t = lua.create_table()?;
    t.raw_set("err", lua.create_string(&msg)?)?;
    if counted {
        t.raw_set(COUNTED_FIELD, true)?;
    }
    if let Some((l, source)) = line {
        t.raw_set("line", l as i64)?;
        t.raw_set("source", source)?;
    }
    Ok(t)
}

/// A Lua number as `tostring` prints it (`%.14g`).
pub fn lua_number(n: f64) -> String {
    if n.is_nan() {
        return if n.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    if n.is_infinite() {
        return if n > 0.0 { "inf" } else { "-inf" }.into();
    }
    if n.fract() == 0.0 && n.abs() < 1e15 {
        return format!("{}", n as i64);
    }
    fmt_g(n, 14)
}

/// C's `%.<prec>g` for a finite, non-zero `n`.
pub fn fmt_g(n: f64, prec: usize) -> String {
    if n == 0.0 {
        return if n.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let e = format!("{:.*e}", prec - 1, n);
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if exp < -4 || exp >= prec as i32 {
        let mant = trim_zeros(mant);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mant}e{sign}{:02}", exp.abs())
    } else {
        let decimals = (prec as i32 - 1 - exp).max(0) as usize;
        trim_zeros(&format!("{:.*}", decimals, n)).to_string()
    }
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use mlua::{Lua, Table, Value};

    use super::{message_handler, ReplyError};

    fn handled(lua: &Lua, e: mlua::Error) -> Table {
        message_handler(lua, Value::Error(Box::new(e))).unwrap()
    }

    /// The error of a run abandoned for a wider one gets a bare table (its
    /// reply is dropped): no message, no line. Any other error gets its
    /// text.
    #[test]
    fn an_abandoned_runs_error_is_not_built() {
        let lua = Lua::new();
        let restart = mlua::Error::external(ReplyError(super::super::wide::RESTART_TEXT.into()));
        let t = handled(&lua, restart);
        assert_eq!(t.raw_len(), 0);
        assert!(matches!(t.raw_get::<Value>("err").unwrap(), Value::Nil));
        let other = mlua::Error::external(ReplyError("ERR some error".into()));
        let t = handled(&lua, other);
        assert_eq!(t.raw_get::<String>("err").unwrap(), "ERR some error");
    }
}
