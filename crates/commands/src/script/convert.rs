//! Conversions between Redis replies and Lua values, both ways, as Redis
//! 7.0's `redisProtocolToLuaType` and `luaReplyToRedisReply`.
//!
//! Reply → Lua (what `redis.call` returns), by the protocol the script
//! chose with `redis.setresp` (2 unless it asked for 3):
//!
//! | reply | Lua |
//! |---|---|
//! | integer | number |
//! | bulk string | string |
//! | null bulk / null array (RESP2) | `false` |
//! | array | table (1..n) |
//! | status | `{ok=...}` |
//! | error | `{err="CODE msg"}` |
//! | RESP3 null | `nil` |
//! | RESP3 map | `{map={k=v...}}` |
//! | RESP3 set | `{set={m=true...}}` |
//! | RESP3 boolean | boolean |
//! | RESP3 double | `{double=n}` |
//! | RESP3 big number | `{big_number="..."}` |
//! | RESP3 verbatim | `{verbatim_string={format=..., string=...}}` |
//!
//! Lua → reply (what the script returns), in the client's protocol:
//! strings are bulk strings, numbers integers (truncated as C's cast does),
//! `true` is `:1` and `false`/`nil` a null (with `setresp(3)`, booleans are
//! RESP3 booleans), tables are `{err=}` errors, `{ok=}` statuses, the RESP3
//! shapes above, or arrays of their elements 1..n up to the first `nil`.

use mlua::{Lua, Table, Value};
use resp::Reply;

/// Nesting a reply or a returned table may have: Redis's Lua stack check
/// ends a deeper one with `reached lua stack limit` (a table that contains
/// itself recurses until then).
const DEPTH_MAX: usize = 128;

/// Redis's `luaPushErrorBuff`: `{err="CODE msg"}` from `-CODE msg` (code
/// `ERR` when the text has no space) or from a bare message (`ERR msg`).
pub fn error_table(lua: &Lua, buf: &[u8]) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("err", lua.create_string(error_text(buf))?)?;
    Ok(t)
}

/// The `err` text of [`error_table`].
pub fn error_text(buf: &[u8]) -> Vec<u8> {
    let (code, msg): (&[u8], &[u8]) = match buf.strip_prefix(b"-") {
        Some(rest) => match rest.iter().position(|&c| c == b' ') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (b"ERR", rest),
        },
        None => (b"ERR", buf),
    };
    let msg = trim_crlf(msg);
    let mut out = Vec::with_capacity(code.len() + 1 + msg.len());
    out.extend_from_slice(code);
    out.push(b' ');
    out.extend_from_slice(msg);
    out
}

fn trim_crlf(mut s: &[u8]) -> &[u8] {
    while let [b'\r' | b'\n', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b'\r' | b'\n'] = s {
        s = rest;
    }
    s
}

/// Converts one reply (as a handler wrote it) into a Lua value; the flag
/// says the reply was an error.
pub fn reply_to_lua(lua: &Lua, reply: &[u8]) -> mlua::Result<(Value, bool)> {
    let mut pos = 0;
    let is_err = reply.first() == Some(&b'-');
    let v = parse(lua, reply, &mut pos, 0)?;
    Ok((v, is_err))
}

fn line<'a>(b: &'a [u8], pos: &mut usize) -> mlua::Result<&'a [u8]> {
    let start = *pos;
    let rest = b.get(start..).unwrap_or_default();
    let Some(end) = memchr_crlf(rest) else {
        return Err(bad_reply());
    };
    *pos = start + end + 2;
    Ok(&b[start..start + end])
}

fn memchr_crlf(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\r\n")
}

fn bad_reply() -> mlua::Error {
    mlua::Error::RuntimeError("malformed reply".into())
}

fn number(l: &[u8]) -> mlua::Result<i64> {
    std::str::from_utf8(l)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(bad_reply)
}

fn parse(lua: &Lua, b: &[u8], pos: &mut usize, depth: usize) -> mlua::Result<Value> {
    if depth > DEPTH_MAX {
        return Err(mlua::Error::RuntimeError("reached lua stack limit".into()));
    }
    let kind = *b.get(*pos).ok_or_else(bad_reply)?;
    *pos += 1;
    let l = line(b, pos)?;
    Ok(match kind {
        b':' => Value::Number(number(l)? as f64),
        b'$' | b'=' => {
            let n = number(l)?;
            if n < 0 {
                return Ok(Value::Boolean(false));
            }
            let n = n as usize;
            let data = b.get(*pos..*pos + n).ok_or_else(bad_reply)?;
            *pos += n + 2;
            if kind == b'=' {
                let (format, s) = if data.len() >= 4 {
                    (&data[..3], &data[4..])
                } else {
                    (&b"txt"[..], data)
                };
                let inner = lua.create_table()?;
                inner.raw_set("string", lua.create_string(s)?)?;
                inner.raw_set("format", lua.create_string(format)?)?;
                let t = lua.create_table()?;
                t.raw_set("verbatim_string", inner)?;
                Value::Table(t)
            } else {
                Value::String(lua.create_string(data)?)
            }
        }
        b'+' => {
            let t = lua.create_table()?;
            t.raw_set("ok", lua.create_string(l)?)?;
            Value::Table(t)
        }
        b'-' => {
            // The command counted its error reply when it ran (see
            // `vm::CountedError`).
            let mut full = b"-".to_vec();
            full.extend_from_slice(l);
            let t = error_table(lua, &full)?;
            t.raw_set(super::vm::COUNTED_FIELD, true)?;
            Value::Table(t)
        }
        b'*' => {
            let n = number(l)?;
            if n < 0 {
                return Ok(Value::Boolean(false));
            }
            // No preallocated array part, as Redis's lua_newtable: the
            // length operator of a table with holes (RESP3 nulls) agrees.
            let t = lua.create_table()?;
            for i in 0..n {
                let v = super::libs::deep(|| parse(lua, b, pos, depth + 1))?;
                t.raw_set(i + 1, v)?;
            }
            Value::Table(t)
        }
        b'%' | b'~' => {
            let n = number(l)?;
            let inner = lua.create_table()?;
            for _ in 0..n.max(0) {
                let k = parse(lua, b, pos, depth + 1)?;
                let v = if kind == b'%' {
                    parse(lua, b, pos, depth + 1)?
                } else {
                    Value::Boolean(true)
                };
                // A nil key (a RESP3 null) cannot index a table.
                if !k.is_nil() {
                    inner.raw_set(k, v)?;
                }
            }
            let t = lua.create_table()?;
            t.raw_set(if kind == b'%' { "map" } else { "set" }, inner)?;
            Value::Table(t)
        }
        b'_' => Value::Nil,
        b'#' => Value::Boolean(l == b"t"),
        b',' => {
            let d = parse_double(l);
            let t = lua.create_table()?;
            t.raw_set("double", d)?;
            Value::Table(t)
        }
        b'(' => {
            let t = lua.create_table()?;
            t.raw_set("big_number", lua.create_string(l)?)?;
            Value::Table(t)
        }
        b'|' => {
            // Attributes are skipped; the value follows.
            let n = number(l)?;
            for _ in 0..n.max(0) * 2 {
                parse(lua, b, pos, depth + 1)?;
            }
            parse(lua, b, pos, depth + 1)?
        }
        _ => return Err(bad_reply()),
    })
}

fn parse_double(l: &[u8]) -> f64 {
    match l {
        b"inf" => f64::INFINITY,
        b"-inf" => f64::NEG_INFINITY,
        b"nan" | b"-nan" => f64::NAN,
        _ => std::str::from_utf8(l)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0.0),
    }
}

/// C's `(long long)` of a double on x86-64: out of range (and NaN) give
/// `i64::MIN` (`cvttsd2si`'s "integer indefinite"), not Rust's saturation.
pub fn c_cast_i64(n: f64) -> i64 {
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if n.is_nan() || !(-LIMIT..LIMIT).contains(&n) {
        i64::MIN
    } else {
        n as i64
    }
}

/// Writes the script's return value `v` as a reply in `out`'s protocol.
/// `script_resp3`: the script called `redis.setresp(3)` (booleans are
/// then RESP3 booleans). An error at the top is returned instead of
/// written, so that the caller replies and counts it as an error (unless
/// its flag says it was counted: see `vm::CountedError`).
///
/// Error tables below the top are written as error replies and added to
/// `nested`, with whether they were counted already (a `redis.pcall`
/// error): Redis counts the others in errorstats, and fails the call for
/// either kind.
pub fn lua_to_reply(
    v: &Value,
    out: &mut Reply,
    script_resp3: bool,
    nested: &mut Vec<(Vec<u8>, bool)>,
) -> mlua::Result<Option<(Vec<u8>, bool)>> {
    if let Value::Table(t) = v {
        if let Value::String(e) = t.raw_get::<Value>("err")? {
            return Ok(Some((error_reply_line(&e.as_bytes()), counted(t)?)));
        }
    }
    write(v, out, script_resp3, 0, nested)?;
    Ok(None)
}

/// Whether an error table was counted already (a `redis.call` error: see
/// `vm::CountedError`).
fn counted(t: &Table) -> mlua::Result<bool> {
    Ok(matches!(
        t.raw_get::<Value>(super::vm::COUNTED_FIELD)?,
        Value::Boolean(true)
    ))
}

/// An `{err=...}` table's reply line: `-` + the text (Redis prints it with
/// `-%s`, so no `ERR` is added), newlines made spaces.
fn error_reply_line(e: &[u8]) -> Vec<u8> {
    let mut line = Vec::with_capacity(e.len() + 1);
    line.push(b'-');
    line.extend(
        e.iter()
            .map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c }),
    );
    line
}

fn write(
    v: &Value,
    out: &mut Reply,
    script_resp3: bool,
    depth: usize,
    nested: &mut Vec<(Vec<u8>, bool)>,
) -> mlua::Result<()> {
    if depth > DEPTH_MAX {
        out.error("ERR reached lua stack limit");
        return Ok(());
    }
    match v {
        Value::String(s) => out.bulk(&s.as_bytes()),
        Value::Boolean(b) => {
            if script_resp3 {
                out.boolean(*b);
            } else if *b {
                out.int(1);
            } else {
                out.null();
            }
        }
        Value::Integer(n) => out.int(*n),
        Value::Number(n) => out.int(c_cast_i64(*n)),
        Value::Table(t) => write_table(t, out, script_resp3, depth, nested)?,
        _ => out.null(),
    }
    Ok(())
}

/// Fields are read raw, as Redis's `lua_rawget`: a table's metatable (a
/// script's `__index`, the guard on `_G` against missing globals) is never
/// consulted.
fn write_table(
    t: &Table,
    out: &mut Reply,
    script_resp3: bool,
    depth: usize,
    nested: &mut Vec<(Vec<u8>, bool)>,
) -> mlua::Result<()> {
    if let Value::String(e) = t.raw_get::<Value>("err")? {
        let line = error_reply_line(&e.as_bytes());
        out.error_bytes(&line[1..]);
        nested.push((line[1..].to_vec(), counted(t)?));
        return Ok(());
    }
    if let Value::String(s) = t.raw_get::<Value>("ok")? {
        let s: Vec<u8> = s
            .as_bytes()
            .iter()
            .map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c })
            .collect();
        let b = out.buf_mut();
        b.push(b'+');
        b.extend_from_slice(&s);
        b.extend_from_slice(b"\r\n");
        return Ok(());
    }
    match t.raw_get::<Value>("double")? {
        Value::Number(d) => {
            out.double(d);
            return Ok(());
        }
        Value::Integer(d) => {
            out.double(d as f64);
            return Ok(());
        }
        _ => {}
    }
    if let Value::String(s) = t.raw_get::<Value>("big_number")? {
        let s: Vec<u8> = s
            .as_bytes()
            .iter()
            .map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c })
            .collect();
        if out.resp3() {
            let b = out.buf_mut();
            b.push(b'(');
            b.extend_from_slice(&s);
            b.extend_from_slice(b"\r\n");
        } else {
            out.bulk(&s);
        }
        return Ok(());
    }
    if let Value::Table(vs) = t.raw_get::<Value>("verbatim_string")? {
        if let (Value::String(f), Value::String(s)) = (
            vs.raw_get::<Value>("format")?,
            vs.raw_get::<Value>("string")?,
        ) {
            let f = String::from_utf8_lossy(&f.as_bytes()).into_owned();
            out.verbatim(&f, &s.as_bytes());
            return Ok(());
        }
    }
    if let Value::Table(m) = t.raw_get::<Value>("map")? {
        // Counted, then written a pair at a time (see `write_array`).
        let mut n = 0;
        for kv in m.pairs::<Value, Value>() {
            kv?;
            n += 1;
        }
        out.map(n);
        for kv in m.pairs::<Value, Value>() {
            let (k, v) = kv?;
            write(&k, out, script_resp3, depth + 1, nested)?;
            write(&v, out, script_resp3, depth + 1, nested)?;
        }
        return Ok(());
    }
    if let Value::Table(s) = t.raw_get::<Value>("set")? {
        let mut n = 0;
        for kv in s.pairs::<Value, Value>() {
            kv?;
            n += 1;
        }
        out.set(n);
        for kv in s.pairs::<Value, Value>() {
            let (k, _) = kv?;
            write(&k, out, script_resp3, depth + 1, nested)?;
        }
        return Ok(());
    }
    super::libs::deep(|| write_array(t, out, script_resp3, depth, nested))
}

/// Counted, then written an element at a time: holding every element at
/// once (a reference each, on mlua's reference stack) overflows Lua's
/// stack past a few thousand strings or tables.
fn write_array(
    t: &Table,
    out: &mut Reply,
    script_resp3: bool,
    depth: usize,
    nested: &mut Vec<(Vec<u8>, bool)>,
) -> mlua::Result<()> {
    let mut n = 0;
    while !t.raw_get::<Value>(n + 1)?.is_nil() {
        n += 1;
    }
    out.array(n);
    for i in 1..=n {
        let v: Value = t.raw_get(i)?;
        write(&v, out, script_resp3, depth + 1, nested)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lua_reply(lua: &Lua, code: &str, resp3: bool, script_resp3: bool) -> String {
        let v: Value = lua.load(code).eval().unwrap();
        let mut out = Reply::new(resp3);
        match lua_to_reply(&v, &mut out, script_resp3, &mut Vec::new()).unwrap() {
            Some((e, _)) => String::from_utf8_lossy(&e).into_owned(),
            None => String::from_utf8_lossy(out.as_bytes()).into_owned(),
        }
    }

    #[test]
    fn lua_values_to_replies_as_redis() {
        let lua = Lua::new();
        let r = |c: &str| lua_reply(&lua, c, false, false);
        assert_eq!(r("return 3.99"), ":3\r\n");
        assert_eq!(r("return -3.7"), ":-3\r\n");
        assert_eq!(r("return 1e20"), ":-9223372036854775808\r\n");
        assert_eq!(r("return 0/0"), ":-9223372036854775808\r\n");
        assert_eq!(r("return true"), ":1\r\n");
        assert_eq!(r("return false"), "$-1\r\n");
        assert_eq!(r("return nil"), "$-1\r\n");
        assert_eq!(r("return {1,2,nil,4}"), "*2\r\n:1\r\n:2\r\n");
        assert_eq!(r("return {foo='bar'}"), "*0\r\n");
        assert_eq!(r("return {ok='fine'}"), "+fine\r\n");
        assert_eq!(r("return {err='My Error'}"), "-My Error");
        assert_eq!(r("return {err='-My Error'}"), "--My Error");
        assert_eq!(
            r("return {1, {err='x'}}"),
            "*2\r\n:1\r\n-x\r\n",
            "a nested error is written as one"
        );
        assert_eq!(r("return {double=3.5}"), "$3\r\n3.5\r\n");
        assert_eq!(r("return {big_number='123'}"), "$3\r\n123\r\n");
        assert_eq!(r("return {map={a=1}}"), "*2\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(r("return {set={a=true}}"), "*1\r\n$1\r\na\r\n");
        let r3 = |c: &str| lua_reply(&lua, c, true, false);
        assert_eq!(r3("return true"), ":1\r\n");
        assert_eq!(r3("return false"), "_\r\n");
        assert_eq!(r3("return {double=3.5}"), ",3.5\r\n");
        assert_eq!(r3("return {map={a=1}}"), "%1\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(r3("return {set={a=true}}"), "~1\r\n$1\r\na\r\n");
        assert_eq!(r3("return {big_number='123'}"), "(123\r\n");
        assert_eq!(
            r3("return {verbatim_string={format='txt',string='hi'}}"),
            "=6\r\ntxt:hi\r\n"
        );
        assert_eq!(lua_reply(&lua, "return false", true, true), "#f\r\n");
        assert_eq!(lua_reply(&lua, "return true", false, true), ":1\r\n");
    }

    #[test]
    fn recursive_tables_end_at_the_stack_limit() {
        let lua = Lua::new();
        let s = lua_reply(
            &lua,
            "local a = {}; local b = {a}; a[1] = b; return a",
            false,
            false,
        );
        assert!(s.starts_with("*1\r\n*1\r\n"));
        assert!(s.ends_with("-ERR reached lua stack limit\r\n"));
    }

    #[test]
    fn replies_to_lua_values_as_redis() {
        let lua = Lua::new();
        let t = |reply: &[u8]| -> (String, bool) {
            let (v, e) = reply_to_lua(&lua, reply).unwrap();
            lua.globals().set("v", v).unwrap();
            let s: String = lua
                .load(
                    r#"
                    local function show(x)
                      if type(x) ~= 'table' then return type(x) .. ':' .. tostring(x) end
                      local keys = {}
                      for k in pairs(x) do table.insert(keys, tostring(k)) end
                      table.sort(keys)
                      local parts = {}
                      for _, k in ipairs(keys) do
                        local kk = tonumber(k) or k
                        if x[kk] == nil then kk = k end
                        table.insert(parts, k .. '=' .. show(x[kk]))
                      end
                      return '{' .. table.concat(parts, ',') .. '}'
                    end
                    return show(v)"#,
                )
                .eval()
                .unwrap();
            (s, e)
        };
        assert_eq!(t(b":5\r\n"), ("number:5".into(), false));
        assert_eq!(t(b"$-1\r\n"), ("boolean:false".into(), false));
        assert_eq!(t(b"*-1\r\n"), ("boolean:false".into(), false));
        assert_eq!(t(b"$2\r\nhi\r\n"), ("string:hi".into(), false));
        assert_eq!(t(b"+OK\r\n"), ("{ok=string:OK}".into(), false));
        assert_eq!(
            t(b"-WRONGTYPE Operation\r\n"),
            (
                "{err=string:WRONGTYPE Operation,ignore_error_stats_update=boolean:true}".into(),
                true
            )
        );
        // Redis marks a command's error reply as counted (see
        // `vm::CountedError`); scripts see the field as in Redis.
        assert_eq!(
            t(b"-FOO\r\n"),
            (
                "{err=string:ERR FOO,ignore_error_stats_update=boolean:true}".into(),
                true
            )
        );
        assert_eq!(
            t(b"*2\r\n:1\r\n$1\r\na\r\n"),
            ("{1=number:1,2=string:a}".into(), false)
        );
        assert_eq!(t(b"_\r\n"), ("nil:nil".into(), false));
        assert_eq!(t(b"#t\r\n"), ("boolean:true".into(), false));
        assert_eq!(t(b",1.5\r\n"), ("{double=number:1.5}".into(), false));
        assert_eq!(t(b"(12\r\n"), ("{big_number=string:12}".into(), false));
        assert_eq!(
            t(b"%1\r\n$1\r\na\r\n:1\r\n"),
            ("{map={a=number:1}}".into(), false)
        );
        assert_eq!(
            t(b"~1\r\n$1\r\na\r\n"),
            ("{set={a=boolean:true}}".into(), false)
        );
        assert_eq!(
            t(b"=6\r\ntxt:hi\r\n"),
            (
                "{verbatim_string={format=string:txt,string=string:hi}}".into(),
                false
            )
        );
    }

    #[test]
    fn error_texts() {
        assert_eq!(error_text(b"-ERR x y\r\n"), b"ERR x y");
        assert_eq!(error_text(b"-x"), b"ERR x");
        assert_eq!(error_text(b"-My Error"), b"My Error");
        assert_eq!(error_text(b"plain"), b"ERR plain");
    }
}
