//! The libraries Redis loads into its Lua VM beside Lua's own: `bit`
//! (LuaBitOp), `cjson`, `cmsgpack` and `struct`, written in Rust with the
//! behaviour of the C modules Redis 7.0 ships (on the cases Redis's test
//! suite checks). Errors are plain messages with the caller's position
//! (`user_script:1: bad argument #1 to 'tobit' ...`), as `luaL_error`
//! would give.

use mlua::{Lua, Table, Value};

pub mod bit;
pub mod cjson;
pub mod cmsgpack;
pub mod lstruct;

/// Adds every library table to `globals`.
pub fn install(lua: &Lua, globals: &Table) -> mlua::Result<()> {
    globals.raw_set("bit", bit::open(lua)?)?;
    globals.raw_set("cjson", cjson::open(lua)?)?;
    globals.raw_set("cmsgpack", cmsgpack::open(lua)?)?;
    globals.raw_set("struct", lstruct::open(lua)?)?;
    Ok(())
}

/// Runs a step of a recursion whose depth the input decides (nested JSON,
/// MessagePack, replies) with at least 64 KiB of stack left, growing the
/// stack on the heap when needed: a thread's stack (2 MiB) would not hold
/// the 1000 levels Lua CJSON allows, and running out aborts the process.
pub fn deep<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(64 * 1024, 1024 * 1024, f)
}

/// `luaL_where(L, 1)`: the position of the Lua code that called the
/// running library function (`user_script:3: `), or nothing.
pub fn where_(lua: &Lua) -> String {
    lua.inspect_stack(1, |d| {
        let src = d.source();
        match (src.short_src.as_deref(), d.current_line()) {
            (Some(s), Some(l)) if src.what != "C" => format!("{s}:{l}: "),
            _ => String::new(),
        }
    })
    .unwrap_or_default()
}

/// An error raised by library function `fname` (`luaL_error` text with
/// the caller's position).
pub fn error(lua: &Lua, msg: impl std::fmt::Display) -> mlua::Error {
    mlua::Error::RuntimeError(format!("{}{msg}", where_(lua)))
}

/// `luaL_argerror`: `bad argument #n to 'fname' (msg)`.
pub fn arg_error(lua: &Lua, n: usize, fname: &str, msg: &str) -> mlua::Error {
    error(lua, format!("bad argument #{n} to '{fname}' ({msg})"))
}

/// Lua's type name of a value, as `luaL_typename` gives it.
pub fn type_name(v: Option<&Value>) -> &'static str {
    match v {
        None => "no value",
        Some(Value::Nil) => "nil",
        Some(Value::Boolean(_)) => "boolean",
        Some(Value::Integer(_)) | Some(Value::Number(_)) => "number",
        Some(Value::String(_)) => "string",
        Some(Value::Table(_)) => "table",
        Some(Value::Function(_)) => "function",
        Some(Value::Thread(_)) => "thread",
        Some(Value::LightUserData(_)) | Some(Value::UserData(_)) | Some(Value::Error(_)) => {
            "userdata"
        }
        Some(_) => "userdata",
    }
}

/// `luaL_checknumber`: a number, or a string convertible to one.
pub fn check_number(lua: &Lua, args: &[Value], n: usize, fname: &str) -> mlua::Result<f64> {
    match args.get(n - 1) {
        Some(Value::Integer(i)) => Ok(*i as f64),
        Some(Value::Number(x)) => Ok(*x),
        Some(Value::String(s)) => std::str::from_utf8(&s.as_bytes())
            .ok()
            .and_then(|s| parse_lua_number(s.trim()))
            .ok_or_else(|| arg_error(lua, n, fname, "number expected, got string")),
        other => Err(arg_error(
            lua,
            n,
            fname,
            &format!("number expected, got {}", type_name(other)),
        )),
    }
}

/// `lua_str2number`: decimal (strtod) or `0x` hex.
pub fn parse_lua_number(s: &str) -> Option<f64> {
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        return u64::from_str_radix(h, 16).ok().map(|n| n as f64);
    }
    if s.is_empty() || s.contains(|c: char| c.is_ascii_alphabetic() && !matches!(c, 'e' | 'E')) {
        // strtod also reads inf/nan; Lua 5.1 does too, rarely used.
        return match s {
            "inf" | "+inf" => Some(f64::INFINITY),
            "-inf" => Some(f64::NEG_INFINITY),
            _ => None,
        };
    }
    s.parse().ok()
}
