//! The parts of the `redis` table that need no running command:
//! `sha1hex`, `log`, `error_reply`, `status_reply`, `replicate_commands`,
//! `breakpoint`, `debug`, `acl_check_cmd`, and the constants
//! (`LOG_*`, `REPL_*`, `REDIS_VERSION`, `REDIS_VERSION_NUM`). `call`,
//! `pcall`, `setresp` and `set_repl` reach the command being run; the
//! prelude (`vm`) wires them to the per-run hooks (`run`).
//!
//! Functions that Redis makes raise `{err=...}` raise a
//! [`super::vm::ReplyError`] here (mlua cannot raise a Lua table from
//! Rust; the message handler and `pcall` read it as the table).

use mlua::{Lua, MultiValue, Table, Value};

use super::vm::reply_error;

/// Redis's `LL_*` levels.
pub const LOG_DEBUG: i64 = 0;
pub const LOG_VERBOSE: i64 = 1;
pub const LOG_NOTICE: i64 = 2;
pub const LOG_WARNING: i64 = 3;
/// Redis's `PROPAGATE_*` flags.
pub const REPL_NONE: i64 = 0;
pub const REPL_AOF: i64 = 1;
pub const REPL_REPLICA: i64 = 2;
pub const REPL_ALL: i64 = 3;

/// `7.0.15` as Redis's `REDIS_VERSION_NUM` (0x00MMmmpp).
fn version_num() -> i64 {
    let mut parts = crate::server::REDIS_VERSION
        .split('.')
        .map(|p| p.parse::<i64>().unwrap_or(0));
    let (a, b, c) = (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    );
    (a << 16) | (b << 8) | c
}

/// Creates the real `redis` table in `globals`.
pub fn install(lua: &Lua, globals: &Table) -> mlua::Result<()> {
    let redis = lua.create_table()?;
    for (k, v) in [
        ("LOG_DEBUG", LOG_DEBUG),
        ("LOG_VERBOSE", LOG_VERBOSE),
        ("LOG_NOTICE", LOG_NOTICE),
        ("LOG_WARNING", LOG_WARNING),
        ("REPL_NONE", REPL_NONE),
        ("REPL_AOF", REPL_AOF),
        ("REPL_SLAVE", REPL_REPLICA),
        ("REPL_REPLICA", REPL_REPLICA),
        ("REPL_ALL", REPL_ALL),
    ] {
        redis.raw_set(k, v)?;
    }
    redis.raw_set("REDIS_VERSION", crate::server::REDIS_VERSION)?;
    redis.raw_set("REDIS_VERSION_NUM", version_num())?;

    redis.raw_set(
        "sha1hex",
        lua.create_function(|lua, args: MultiValue| {
            if args.len() != 1 {
                return Err(reply_error(b"wrong number of arguments"));
            }
            let data = match &args[0] {
                Value::String(s) => s.as_bytes().to_vec(),
                Value::Integer(n) => n.to_string().into_bytes(),
                Value::Number(n) => super::vm::lua_number(*n).into_bytes(),
                // lua_tolstring of a non-string: Redis hashes nothing.
                _ => Vec::new(),
            };
            let hex = super::sha1::hex(&data);
            lua.create_string(hex)
        })?,
    )?;

    redis.raw_set(
        "log",
        lua.create_function(|_, args: MultiValue| {
            if args.len() < 2 {
                return Err(reply_error(b"redis.log() requires two arguments or more."));
            }
            let level = match &args[0] {
                Value::Integer(n) => *n,
                Value::Number(n) => *n as i64,
                Value::String(s) => match std::str::from_utf8(&s.as_bytes())
                    .ok()
                    .and_then(|s| s.trim().parse::<f64>().ok())
                {
                    Some(n) => n as i64,
                    None => {
                        return Err(reply_error(b"First argument must be a number (log level)."))
                    }
                },
                _ => return Err(reply_error(b"First argument must be a number (log level).")),
            };
            if !(LOG_DEBUG..=LOG_WARNING).contains(&level) {
                return Err(reply_error(b"Invalid debug level."));
            }
            let mut line = String::new();
            for (i, a) in args.iter().skip(1).enumerate() {
                let s = match a {
                    Value::String(s) => String::from_utf8_lossy(&s.as_bytes()).into_owned(),
                    Value::Integer(n) => n.to_string(),
                    Value::Number(n) => super::vm::lua_number(*n),
                    _ => continue,
                };
                if i > 0 {
                    line.push(' ');
                }
                line.push_str(&s);
            }
            // The default log level (notice) drops debug and verbose lines.
            // (Held while the run may be taken back: `traces`.)
            if level >= LOG_NOTICE && !super::traces::hold_log(level == LOG_WARNING, &line) {
                crate::persist::log(level == LOG_WARNING, &line);
            }
            Ok(())
        })?,
    )?;

    redis.raw_set(
        "error_reply",
        lua.create_function(|lua, args: MultiValue| {
            let msg = match single_string(&args) {
                Some(s) if s.first() == Some(&b'-') => s,
                Some(s) => {
                    let mut m = b"-".to_vec();
                    m.extend_from_slice(&s);
                    m
                }
                None => b"wrong number or type of arguments".to_vec(),
            };
            super::convert::error_table(lua, &msg)
        })?,
    )?;
    redis.raw_set(
        "status_reply",
        lua.create_function(|lua, args: MultiValue| match single_string(&args) {
            Some(s) => {
                let t = lua.create_table()?;
                t.raw_set("ok", lua.create_string(&s)?)?;
                Ok(t)
            }
            None => super::convert::error_table(lua, b"wrong number or type of arguments"),
        })?,
    )?;
    redis.raw_set(
        "replicate_commands",
        lua.create_function(|_, _: MultiValue| Ok(true))?,
    )?;
    // The debugger is not implemented: its calls do nothing, as when a
    // script runs without SCRIPT DEBUG.
    redis.raw_set(
        "breakpoint",
        lua.create_function(|_, _: MultiValue| Ok(false))?,
    )?;
    redis.raw_set("debug", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
    globals.raw_set("redis", redis)
}

/// The one string argument of `error_reply` / `status_reply` (Redis checks
/// `lua_type == LUA_TSTRING`: numbers do not count).
fn single_string(args: &MultiValue) -> Option<Vec<u8>> {
    match args.len() {
        1 => match &args[0] {
            Value::String(s) => Some(s.as_bytes().to_vec()),
            _ => None,
        },
        _ => None,
    }
}
