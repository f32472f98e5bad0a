//! What one `redis.call` works with: its arguments, read straight off
//! the Lua stack ([`CallArgs`]); its argument, key-position and reply
//! buffers, kept per thread between calls ([`CallBufs`]); and the
//! commands the last calls resolved ([`LastCommand`]). Split from `run`,
//! which runs the call: this is its bookkeeping per call, each part kept
//! to a copy or a compare (figures in bench/README.md, issue 23).

use std::cell::Cell;

use mlua::{Lua, MultiValue, Value};
use resp::{Args, OwnedArgs, Reply};

use crate::table::registry;

/// The buffers of one `redis.call` (its arguments, key positions and
/// reply), kept per thread between calls: made per call they were ~10
/// allocations of an EVALSHA running two commands.
#[derive(Default)]
pub(super) struct CallBufs {
    pub(super) argv: OwnedArgs,
    pub(super) positions: Vec<usize>,
    pub(super) out: Reply,
    /// The commands the last calls resolved (kept across calls).
    pub(super) last: LastCommand,
}

/// The commands of this thread's last few `redis.call`s, by their names
/// exactly as given, when they have no subcommands: a script calls the
/// same few commands again and again, and
/// [`crate::table::Registry::resolve`] (lower-casing, a UTF-8 check, a
/// hash probe) was ~280 instructions of every call. The table never
/// changes once the server runs (renames apply at start-up), so a name
/// resolves the same way every time.
#[derive(Default)]
pub(super) struct LastCommand {
    names: [Vec<u8>; LAST_COMMANDS],
    resolved: [Option<crate::Resolved>; LAST_COMMANDS],
    /// The slot the next one replaces.
    next: usize,
}

/// How many [`LastCommand`] keeps (INCR and EXPIRE alternate in a common
/// script: one slot missed every time).
const LAST_COMMANDS: usize = 4;

impl LastCommand {
    /// The command of `args` if it is one of the last ones and its arity
    /// fits (otherwise `resolve` finds it, or the error).
    pub(super) fn recall(&self, args: Args<'_>) -> Option<crate::Resolved> {
        let name = args.get(0);
        let i = self.names.iter().position(|n| n.as_slice() == name)?;
        let r = self.resolved[i]?;
        r.spec.arity_ok(args.len()).then_some(r)
    }

    /// Remembers `r` as what `name` resolves to: not a container or one of
    /// its subcommands (which one depends on the next argument).
    pub(super) fn keep(&mut self, name: &[u8], r: crate::Resolved) {
        if !r.spec.subcommands.is_empty()
            || registry().full_name(r.id).contains('|')
            || name.len() > 64
            || self.names.iter().any(|n| n.as_slice() == name)
        {
            return;
        }
        let i = self.next;
        self.next = (i + 1) % LAST_COMMANDS;
        self.names[i].clear();
        self.names[i].extend_from_slice(name);
        self.resolved[i] = Some(r);
    }
}

thread_local! {
    static CALL_BUFS: Cell<Option<Box<CallBufs>>> = const { Cell::new(None) };
}

/// The arguments of a `redis.call` / `redis.pcall`, read straight off the
/// Lua stack into this thread's [`CallBufs`] as the callback starts.
///
/// Through mlua's `MultiValue` each argument was a `Value` (a string one
/// a reference on mlua's auxiliary thread, made and dropped) in a
/// `VecDeque` allocated per call: ~1 k instructions of every
/// `redis.call` of two or three arguments, more than its INCR.
pub(super) struct CallArgs {
    pub(super) bufs: Box<CallBufs>,
    /// How many arguments were passed.
    pub(super) given: usize,
    /// One of them is neither a string nor a number (the call is refused,
    /// after the checks that come first: see `Run::call_with`).
    pub(super) bad: bool,
}

impl CallArgs {
    /// Adds number `n` as Redis's luaRedisGenericCommand does: not Lua's
    /// tostring (%.14g) but snprintf's %.17g, so that no precision is
    /// lost (integers below 2^53 without an allocation; a NaN as glibc
    /// prints it, `-nan` for 0/0).
    fn push_number(&mut self, n: f64) {
        let argv = &mut self.bufs.argv;
        if let Some(i) = ds::num::small_integral(n) {
            argv.push(itoa::Buffer::new().format(i).as_bytes());
        } else if n.is_nan() {
            argv.push(if n.is_sign_negative() {
                b"-nan"
            } else {
                b"nan"
            });
        } else {
            argv.push(resp::format_double(n).as_bytes());
        }
    }
}

impl mlua::FromLuaMulti for CallArgs {
    /// The same from values (not the callbacks' path: see
    /// `from_stack_multi`).
    fn from_lua_multi(values: MultiValue, _lua: &Lua) -> mlua::Result<Self> {
        let mut a = CallArgs {
            bufs: CallBufs::take(),
            given: values.len(),
            bad: false,
        };
        for v in &values {
            match v {
                Value::String(s) => a.bufs.argv.push(&s.as_bytes()),
                Value::Integer(n) => a.push_number(*n as f64),
                Value::Number(n) => a.push_number(*n),
                _ => {
                    a.bad = true;
                    break;
                }
            }
        }
        Ok(a)
    }

    unsafe fn from_stack_multi(
        nvals: std::os::raw::c_int,
        lua: &mlua::state::RawLua,
    ) -> mlua::Result<Self> {
        use mlua::ffi;
        let state = lua.state();
        let mut a = CallArgs {
            bufs: CallBufs::take(),
            given: nvals.max(0) as usize,
            bad: false,
        };
        for i in -nvals..0 {
            // SAFETY: mlua calls this in a callback with the `nvals`
            // arguments on top of `state` (the running thread's stack);
            // a string's bytes stay valid while it is on the stack, and
            // are copied before returning. `lua_tolstring` of a string
            // converts nothing (numbers are read as numbers, below).
            unsafe {
                match ffi::lua_type(state, i) {
                    ffi::LUA_TSTRING => {
                        let mut len = 0usize;
                        let p = ffi::lua_tolstring(state, i, &mut len);
                        a.bufs
                            .argv
                            .push(std::slice::from_raw_parts(p.cast::<u8>(), len));
                    }
                    ffi::LUA_TNUMBER => a.push_number(ffi::lua_tonumber(state, i)),
                    _ => {
                        a.bad = true;
                        break;
                    }
                }
            }
        }
        Ok(a)
    }
}

/// What a kept buffer may hold at most (a large reply's buffer is freed).
const CALL_BUF_KEEP_BYTES: usize = 64 << 10;

impl CallBufs {
    /// This thread's buffers, emptied (new ones if they are in use: a
    /// call cannot nest in another today, but nothing depends on it).
    pub(super) fn take() -> Box<CallBufs> {
        let mut b = CALL_BUFS.with(Cell::take).unwrap_or_default();
        b.argv.clear();
        b.positions.clear();
        b.out.clear();
        b
    }

    /// Keeps them for the next call, unless they grew large.
    pub(super) fn put_back(mut self: Box<Self>) {
        if self.argv.capacity_bytes() <= CALL_BUF_KEEP_BYTES
            && self.out.buf_mut().capacity() <= CALL_BUF_KEEP_BYTES
            && self.positions.capacity() <= 1024
        {
            CALL_BUFS.with(|c| c.set(Some(self)));
        }
    }
}
