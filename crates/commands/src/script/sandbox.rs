//! The base functions that must see through the read-only proxies (see
//! `vm`): `next`, `pairs`, `ipairs` and `rawget` read the real table
//! behind a proxy; `rawset` and `setmetatable` refuse one with Redis's
//! `Attempt to modify a readonly table`. Written in Rust so that they are
//! C functions to Lua: an error they raise names the user's line, and a
//! bad argument names them (`bad argument #1 to 'pairs'`).
//!
//! `unpack` is replaced for another reason: Lua 5.1.5's counts its
//! results in a C int, so `unpack(t, 0, 2147483647)` overflows it and
//! crashes the process (Redis 7.0 patched its lbaselib.c). This one is
//! Lua's, counting in 64 bits, written against Lua's C API so that it
//! behaves as Redis's in everything else (its errors are Lua strings, it
//! takes as many results as the C stack can). It was a Lua guard in the
//! prelude before: that cost 5 KB of every VM, and `return unpack()` (a
//! tail call) lost the caller's line from its errors.

use std::os::raw::c_int;

use mlua::{ffi, Function, Lua, MultiValue, Table, Value};

use super::libs::{arg_error, type_name};

/// Replaces the six functions in `globals`, and `getmetatable` and
/// `loadstring`; `proxies` maps each proxy to the table it stands for
/// (weak keys); `getmeta` is the prelude's answer to `getmetatable`.
pub fn install(lua: &Lua, globals: &Table, proxies: Table, getmeta: Function) -> mlua::Result<()> {
    globals.raw_set(
        "getmetatable",
        lua.create_function(move |lua, args: MultiValue| {
            let Some(o) = args.front() else {
                return Err(arg_error(lua, 1, "getmetatable", "value expected"));
            };
            getmeta.call::<Value>(o.clone())
        })?,
    )?;
    let loadstring_raw: Function = globals.raw_get("loadstring")?;
    globals.raw_set(
        "loadstring",
        lua.create_function(move |lua, args: MultiValue| {
            let text = |i: usize, v: Option<&Value>| match v {
                Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
                Some(Value::Integer(n)) => Ok(n.to_string().into_bytes()),
                Some(Value::Number(n)) => Ok(super::vm::lua_number(*n).into_bytes()),
                other => Err(arg_error(
                    lua,
                    i,
                    "loadstring",
                    &format!("string expected, got {}", type_name(other)),
                )),
            };
            let code = text(1, args.front())?;
            let name = match args.get(1) {
                None | Some(Value::Nil) => None,
                v => Some(text(2, v)?),
            };
            // Redis 7.0.15 reads every chunk as text: bytecode (a chunk
            // starting with ESC) fails to parse at its first byte.
            if code.first() == Some(&0x1b) {
                let name = lua.create_string(name.unwrap_or(code))?;
                let (_, e): (Value, String) = loadstring_raw.call((")", name))?;
                let e = e.strip_suffix("near ')'").unwrap_or(&e);
                let e = lua.create_string(format!("{e}near 'char(27)'"))?;
                return Ok(MultiValue::from_vec(vec![Value::Nil, Value::String(e)]));
            }
            let name = match name {
                Some(n) => Value::String(lua.create_string(n)?),
                None => Value::Nil,
            };
            loadstring_raw.call::<MultiValue>((lua.create_string(code)?, name))
        })?,
    )?;
    let next_raw: Function = globals.raw_get("next")?;
    let ipairs_raw: Function = globals.raw_get("ipairs")?;
    // The iterator `ipairs` returns (Lua's internal `ipairsaux`).
    let ipairs_aux: Function = ipairs_raw
        .call::<(Function, Value, Value)>(lua.create_table()?)?
        .0;

    let real = {
        let proxies = proxies.clone();
        move |t: Table| -> mlua::Result<Table> {
            match proxies.raw_get::<Value>(&t)? {
                Value::Table(r) => Ok(r),
                _ => Ok(t),
            }
        }
    };
    let table_arg = |lua: &Lua, args: &MultiValue, fname: &str| -> mlua::Result<Table> {
        match args.front() {
            Some(Value::Table(t)) => Ok(t.clone()),
            other => Err(arg_error(
                lua,
                1,
                fname,
                &format!("table expected, got {}", type_name(other)),
            )),
        }
    };

    {
        let real = real.clone();
        let next_raw = next_raw.clone();
        globals.raw_set(
            "next",
            lua.create_function(move |lua, args: MultiValue| {
                let t = real(table_arg(lua, &args, "next")?)?;
                let k = args.get(1).cloned().unwrap_or(Value::Nil);
                next_raw.call::<MultiValue>((t, k))
            })?,
        )?;
    }
    {
        let real = real.clone();
        let next_raw = next_raw.clone();
        globals.raw_set(
            "pairs",
            lua.create_function(move |lua, args: MultiValue| {
                let t = real(table_arg(lua, &args, "pairs")?)?;
                Ok((next_raw.clone(), t, Value::Nil))
            })?,
        )?;
    }
    {
        let real = real.clone();
        globals.raw_set(
            "ipairs",
            lua.create_function(move |lua, args: MultiValue| {
                let t = real(table_arg(lua, &args, "ipairs")?)?;
                Ok((ipairs_aux.clone(), t, 0))
            })?,
        )?;
    }
    {
        let real = real.clone();
        globals.raw_set(
            "rawget",
            lua.create_function(move |lua, args: MultiValue| {
                let t = real(table_arg(lua, &args, "rawget")?)?;
                let k = args.get(1).cloned().unwrap_or(Value::Nil);
                t.raw_get::<Value>(k)
            })?,
        )?;
    }
    let readonly = || mlua::Error::RuntimeError("Attempt to modify a readonly table".into());
    {
        let proxies = proxies.clone();
        globals.raw_set(
            "rawset",
            lua.create_function(move |lua, args: MultiValue| {
                let t = table_arg(lua, &args, "rawset")?;
                if !proxies.raw_get::<Value>(&t)?.is_nil() {
                    return Err(readonly());
                }
                let k = args.get(1).cloned().unwrap_or(Value::Nil);
                if k.is_nil() {
                    return Err(arg_error(lua, 2, "rawset", "value expected"));
                }
                t.raw_set(k, args.get(2).cloned().unwrap_or(Value::Nil))?;
                Ok(t)
            })?,
        )?;
    }
    // SAFETY: `unpack` is a `lua_CFunction` that keeps Lua's stack
    // discipline (see its docs).
    globals.raw_set("unpack", unsafe { lua.create_c_function(unpack) }?)?;
    globals.raw_set(
        "setmetatable",
        lua.create_function(move |lua, args: MultiValue| {
            let t = table_arg(lua, &args, "setmetatable")?;
            if !proxies.raw_get::<Value>(&t)?.is_nil() {
                return Err(readonly());
            }
            match args.get(1) {
                Some(Value::Table(m)) => t.set_metatable(Some(m.clone()))?,
                Some(Value::Nil) => t.set_metatable(None)?,
                other => {
                    return Err(arg_error(
                        lua,
                        2,
                        "setmetatable",
                        &format!("nil or table expected, got {}", type_name(other)),
                    ))
                }
            }
            Ok(t)
        })?,
    )?;
    Ok(())
}

/// Lua 5.1.5's `luaB_unpack` with Redis 7.0's fix (see the module docs): a
/// C function, as Lua's, so that its errors are Lua's own (strings, named
/// after the caller's name for it, at the caller's line).
///
/// # Safety
///
/// Called by Lua only, as a `lua_CFunction`. Its errors (`luaL_*`)
/// `longjmp` out of it: nothing in its frame has a destructor.
unsafe extern "C-unwind" fn unpack(l: *mut ffi::lua_State) -> c_int {
    // SAFETY: `l` is the calling Lua state; every call below is Lua's
    // auxiliary API on its own stack, used as `luaB_unpack` uses it.
    unsafe {
        ffi::luaL_checktype(l, 1, ffi::LUA_TTABLE);
        // luaL_optint / luaL_checkint: the number truncated to a
        // lua_Integer, then to an int (`as`: the C casts).
        let i = if ffi::lua_type(l, 2) <= ffi::LUA_TNIL {
            1
        } else {
            ffi::luaL_checkinteger(l, 2) as c_int
        };
        let e = if ffi::lua_type(l, 3) <= ffi::LUA_TNIL {
            ffi::lua_objlen(l, 1) as c_int
        } else {
            ffi::luaL_checkinteger(l, 3) as c_int
        };
        if i > e {
            return 0;
        }
        // In 64 bits: Lua 5.1.5 computes this in an int, which overflows.
        let n = i64::from(e) - i64::from(i) + 1;
        if n >= i64::from(c_int::MAX) || ffi::lua_checkstack(l, n as c_int) == 0 {
            return ffi::luaL_error(l, c"too many results to unpack".as_ptr());
        }
        for k in i..=e {
            ffi::lua_rawgeti(l, 1, k.into());
        }
        n as c_int
    }
}
