//! `cjson`: Lua CJSON 2.1 as Redis ships it, with its defaults: numbers
//! printed with `%.14g`, NaN/Inf refused when encoding and read when
//! decoding (strtod's spellings), arrays told from objects by their keys
//! (an empty table is an object), sparse arrays past ratio 2 and 10
//! elements refused, nesting limited to 1000 both ways, `cjson.null` a
//! light userdata. Error texts are Lua CJSON's
//! (`Expected value but found T_END at character 1`).
//!
//! The configuration functions (`encode_max_depth`, `decode_max_depth`,
//! `encode_number_precision`, `encode_invalid_numbers`,
//! `decode_invalid_numbers`, `encode_sparse_array`, `encode_keep_buffer`)
//! work as Lua CJSON's for the rest of the run. Unlike Redis, whose one Lua
//! state keeps them for every later script, each run starts from the
//! defaults ([`reset`], called as a VM starts running Lua code): scripts
//! run on several threads' VMs here, and a setting left by one script
//! would otherwise reach only the scripts that happen to run on its thread.

use mlua::{LightUserData, Lua, MultiValue, Table, Value};

use super::{arg_error, error, type_name};
use crate::script::vm::fmt_g;

/// Lua CJSON's `json_config_t` (the settings scripts can change).
#[derive(Clone, Copy)]
struct Config {
    encode_max_depth: i64,
    decode_max_depth: i64,
    encode_precision: i64,
    /// 0 refuse, 1 write `inf`/`nan`, 2 write `null`.
    encode_invalid: i64,
    decode_invalid: bool,
    sparse_convert: bool,
    sparse_ratio: i64,
    sparse_safe: i64,
    keep_buffer: bool,
}

const DEFAULTS: Config = Config {
    encode_max_depth: 1000,
    decode_max_depth: 1000,
    encode_precision: 14,
    encode_invalid: 0,
    decode_invalid: true,
    sparse_convert: false,
    sparse_ratio: 2,
    sparse_safe: 10,
    keep_buffer: true,
};

thread_local! {
    static CONFIG: std::cell::Cell<Config> = const { std::cell::Cell::new(DEFAULTS) };
}

fn cfg() -> Config {
    CONFIG.with(|c| c.get())
}

fn set_cfg(f: impl FnOnce(&mut Config)) {
    CONFIG.with(|c| {
        let mut v = c.get();
        f(&mut v);
        c.set(v);
    })
}

/// Back to Lua CJSON's defaults (a new run, see the module docs).
pub fn reset() {
    CONFIG.with(|c| c.set(DEFAULTS));
}

/// `json_verify_arg_count`.
fn max_args(lua: &Lua, name: &str, args: &MultiValue, n: usize) -> mlua::Result<()> {
    if args.len() > n {
        return Err(arg_error(lua, n + 1, name, "found too many arguments"));
    }
    Ok(())
}

/// `json_integer_option`: argument `i` (0-based) when given and not nil,
/// an integer in `min..=max` (range errors name argument #1, as Lua
/// CJSON's do).
fn int_option(
    lua: &Lua,
    name: &str,
    args: &MultiValue,
    i: usize,
    (min, max): (i64, i64),
) -> mlua::Result<Option<i64>> {
    let v = match args.get(i) {
        None | Some(Value::Nil) => return Ok(None),
        Some(v) => v.clone(),
    };
    let tname = type_name(Some(&v));
    let Some(n) = lua.coerce_number(v)? else {
        return Err(arg_error(
            lua,
            i + 1,
            name,
            &format!("number expected, got {tname}"),
        ));
    };
    // lua_tointeger truncates.
    let n = n.trunc();
    if !(min as f64..=max as f64).contains(&n) {
        return Err(arg_error(
            lua,
            1,
            name,
            &format!("expected integer between {min} and {max}"),
        ));
    }
    Ok(Some(n as i64))
}

/// `json_enum_option` with `options` (`off`, `on` ...; a boolean is
/// `off`/`on`): the index chosen, when given and not nil.
fn enum_option(
    lua: &Lua,
    name: &str,
    args: &MultiValue,
    i: usize,
    options: &[&str],
) -> mlua::Result<Option<i64>> {
    match args.get(i) {
        None | Some(Value::Nil) => Ok(None),
        Some(Value::Boolean(b)) => Ok(Some(*b as i64)),
        Some(v) => {
            let text = match v {
                Value::String(s) => s.as_bytes().to_vec(),
                Value::Integer(n) => n.to_string().into_bytes(),
                Value::Number(n) => crate::script::vm::lua_number(*n).into_bytes(),
                other => {
                    return Err(arg_error(
                        lua,
                        i + 1,
                        name,
                        &format!("string expected, got {}", type_name(Some(other))),
                    ))
                }
            };
            match options.iter().position(|o| o.as_bytes() == text) {
                Some(p) => Ok(Some(p as i64)),
                None => Err(arg_error(
                    lua,
                    i + 1,
                    name,
                    &format!("invalid option '{}'", String::from_utf8_lossy(&text)),
                )),
            }
        }
    }
}

/// An enum setting's value as Lua CJSON returns it: a boolean for off/on,
/// the option's name otherwise.
fn enum_value(lua: &Lua, setting: i64, options: &[&str]) -> mlua::Result<Value> {
    Ok(match setting {
        0 | 1 => Value::Boolean(setting == 1),
        n => Value::String(lua.create_string(options[n as usize])?),
    })
}

const INT_MAX: i64 = i32::MAX as i64;
const BOOL: &[&str] = &["off", "on"];
const INVALID: &[&str] = &["off", "on", "null"];

fn config_functions(lua: &Lua, t: &Table) -> mlua::Result<()> {
    type Field = fn(&mut Config) -> &mut i64;
    let ints: [(&str, (i64, i64), Field); 3] = [
        ("encode_max_depth", (1, INT_MAX), |c| {
            &mut c.encode_max_depth
        }),
        ("decode_max_depth", (1, INT_MAX), |c| {
            &mut c.decode_max_depth
        }),
        ("encode_number_precision", (1, 14), |c| {
            &mut c.encode_precision
        }),
    ];
    for (name, range, field) in ints {
        t.raw_set(
            name,
            lua.create_function(move |lua, args: MultiValue| {
                max_args(lua, name, &args, 1)?;
                if let Some(n) = int_option(lua, name, &args, 0, range)? {
                    set_cfg(|c| *field(c) = n);
                }
                let mut c = cfg();
                Ok(*field(&mut c))
            })?,
        )?;
    }
    type Flag = fn(&mut Config) -> &mut bool;
    let flags: [(&str, Flag); 2] = [
        ("encode_keep_buffer", |c| &mut c.keep_buffer),
        ("decode_invalid_numbers", |c| &mut c.decode_invalid),
    ];
    for (name, field) in flags {
        t.raw_set(
            name,
            lua.create_function(move |lua, args: MultiValue| {
                max_args(lua, name, &args, 1)?;
                if let Some(n) = enum_option(lua, name, &args, 0, BOOL)? {
                    set_cfg(|c| *field(c) = n == 1);
                }
                let mut c = cfg();
                Ok(*field(&mut c))
            })?,
        )?;
    }
    t.raw_set(
        "encode_invalid_numbers",
        lua.create_function(|lua, args: MultiValue| {
            let name = "encode_invalid_numbers";
            max_args(lua, name, &args, 1)?;
            if let Some(n) = enum_option(lua, name, &args, 0, INVALID)? {
                set_cfg(|c| c.encode_invalid = n);
            }
            enum_value(lua, cfg().encode_invalid, INVALID)
        })?,
    )?;
    t.raw_set(
        "encode_sparse_array",
        lua.create_function(|lua, args: MultiValue| {
            let name = "encode_sparse_array";
            max_args(lua, name, &args, 3)?;
            let convert = enum_option(lua, name, &args, 0, BOOL)?;
            let ratio = int_option(lua, name, &args, 1, (0, INT_MAX))?;
            let safe = int_option(lua, name, &args, 2, (0, INT_MAX))?;
            set_cfg(|c| {
                if let Some(v) = convert {
                    c.sparse_convert = v == 1;
                }
                if let Some(v) = ratio {
                    c.sparse_ratio = v;
                }
                if let Some(v) = safe {
                    c.sparse_safe = v;
                }
            });
            let c = cfg();
            Ok((c.sparse_convert, c.sparse_ratio, c.sparse_safe))
        })?,
    )?;
    Ok(())
}

fn null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

pub fn open(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set(
        "encode",
        lua.create_function(|lua, args: MultiValue| {
            if args.len() != 1 {
                return Err(arg_error(lua, 1, "encode", "expected 1 argument"));
            }
            let mut out = Vec::new();
            encode(lua, &args[0], 0, &mut out)?;
            lua.create_string(out)
        })?,
    )?;
    t.raw_set(
        "decode",
        lua.create_function(|lua, args: MultiValue| {
            if args.len() != 1 {
                return Err(arg_error(lua, 1, "decode", "expected 1 argument"));
            }
            let text: Vec<u8> = match &args[0] {
                Value::String(s) => s.as_bytes().to_vec(),
                Value::Integer(n) => n.to_string().into_bytes(),
                Value::Number(n) => crate::script::vm::lua_number(*n).into_bytes(),
                other => {
                    return Err(arg_error(
                        lua,
                        1,
                        "decode",
                        &format!("string expected, got {}", type_name(Some(other))),
                    ))
                }
            };
            let mut d = Decoder {
                lua,
                s: &text,
                pos: 0,
                depth: 0,
            };
            let tok = d.next_token()?;
            let v = d.value(tok)?;
            let end = d.next_token()?;
            if !matches!(end.kind, Kind::End) {
                return Err(d.expected("the end", &end));
            }
            Ok(v)
        })?,
    )?;
    t.raw_set("null", null())?;
    config_functions(lua, &t)?;
    t.raw_set("_NAME", "cjson")?;
    t.raw_set("_VERSION", "2.1.0")?;
    Ok(t)
}

/// `json_append_number` (keys too, as Lua CJSON writes them).
fn number(lua: &Lua, n: f64, out: &mut Vec<u8>) -> mlua::Result<()> {
    let c = cfg();
    if !n.is_finite() {
        match c.encode_invalid {
            0 => {
                return Err(error(
                    lua,
                    "Cannot serialise number: must not be NaN or Inf",
                ))
            }
            1 if n.is_nan() => out.extend_from_slice(b"nan"),
            1 if n > 0.0 => out.extend_from_slice(b"inf"),
            1 => out.extend_from_slice(b"-inf"),
            _ => out.extend_from_slice(b"null"),
        }
        return Ok(());
    }
    out.extend_from_slice(fmt_g(n, c.encode_precision as usize).as_bytes());
    Ok(())
}

fn string(s: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &c in s {
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            0..=0x1f | 0x7f => out.extend_from_slice(format!("\\u{c:04x}").as_bytes()),
            _ => out.push(c),
        }
    }
    out.push(b'"');
}

fn encode(lua: &Lua, v: &Value, depth: usize, out: &mut Vec<u8>) -> mlua::Result<()> {
    match v {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(p) if p.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(n) => number(lua, *n as f64, out)?,
        Value::Number(n) => number(lua, *n, out)?,
        Value::String(s) => string(&s.as_bytes(), out),
        Value::Table(t) => {
            let depth = depth + 1;
            if depth as i64 > cfg().encode_max_depth {
                return Err(error(
                    lua,
                    format!("Cannot serialise, excessive nesting ({depth})"),
                ));
            }
            match array_length(lua, t)? {
                Some(n) if n > 0 => {
                    out.push(b'[');
                    for i in 1..=n {
                        if i > 1 {
                            out.push(b',');
                        }
                        let v: Value = t.raw_get(i)?;
                        super::deep(|| encode(lua, &v, depth, out))?;
                    }
                    out.push(b']');
                }
                _ => {
                    out.push(b'{');
                    // A pair at a time (see `array_length`).
                    for (i, kv) in t.pairs::<Value, Value>().enumerate() {
                        let (k, v) = kv?;
                        if i > 0 {
                            out.push(b',');
                        }
                        match &k {
                            Value::String(s) => string(&s.as_bytes(), out),
                            Value::Integer(n) => {
                                out.push(b'"');
                                number(lua, *n as f64, out)?;
                                out.push(b'"');
                            }
                            Value::Number(n) => {
                                out.push(b'"');
                                number(lua, *n, out)?;
                                out.push(b'"');
                            }
                            other => {
                                return Err(error(
                                    lua,
                                    format!(
                                        "Cannot serialise {}: table key must be a number or string",
                                        type_name(Some(other))
                                    ),
                                ))
                            }
                        }
                        out.push(b':');
                        super::deep(|| encode(lua, &v, depth, out))?;
                    }
                    out.push(b'}');
                }
            }
        }
        other => {
            return Err(error(
                lua,
                format!(
                    "Cannot serialise {}: type not supported",
                    type_name(Some(other))
                ),
            ))
        }
    }
    Ok(())
}

/// Lua CJSON's `lua_array_length`: `Some(max index)` when every key is a
/// positive integer (refusing excessively sparse arrays), `None` for an
/// object. Walks the table with `next`, holding one pair at a time: a
/// table of 100,000 strings collected at once would need a reference for
/// each, past Lua's stack.
fn array_length(lua: &Lua, t: &Table) -> mlua::Result<Option<usize>> {
    let mut max = 0usize;
    let mut items = 0usize;
    for kv in t.pairs::<Value, Value>() {
        let (k, _) = kv?;
        let n = match k {
            Value::Integer(n) => n as f64,
            Value::Number(n) => n,
            _ => return Ok(None),
        };
        if n < 1.0 || n.fract() != 0.0 {
            return Ok(None);
        }
        max = max.max(n as usize);
        items += 1;
    }
    let c = cfg();
    let (ratio, safe) = (c.sparse_ratio as usize, c.sparse_safe as usize);
    if ratio > 0 && max > items.saturating_mul(ratio) && max > safe {
        if c.sparse_convert {
            return Ok(None);
        }
        return Err(error(
            lua,
            "Cannot serialise table: excessively sparse array",
        ));
    }
    Ok(Some(max))
}

#[derive(Debug)]
enum Kind {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    Str(Vec<u8>),
    Num(f64),
    Bool(bool),
    Null,
    Colon,
    Comma,
    End,
    /// Lua CJSON's T_ERROR with its message.
    Error(&'static str),
}

struct Token {
    kind: Kind,
    /// 0-based position of the token's first byte.
    at: usize,
}

impl Kind {
    fn name(&self) -> &'static str {
        match self {
            Kind::ObjBegin => "T_OBJ_BEGIN",
            Kind::ObjEnd => "T_OBJ_END",
            Kind::ArrBegin => "T_ARR_BEGIN",
            Kind::ArrEnd => "T_ARR_END",
            Kind::Str(_) => "T_STRING",
            Kind::Num(_) => "T_NUMBER",
            Kind::Bool(_) => "T_BOOLEAN",
            Kind::Null => "T_NULL",
            Kind::Colon => "T_COLON",
            Kind::Comma => "T_COMMA",
            Kind::End => "T_END",
            Kind::Error(m) => m,
        }
    }
}

struct Decoder<'a> {
    lua: &'a Lua,
    s: &'a [u8],
    pos: usize,
    depth: usize,
}

impl Decoder<'_> {
    fn expected(&self, what: &str, t: &Token) -> mlua::Error {
        error(
            self.lua,
            format!(
                "Expected {what} but found {} at character {}",
                t.kind.name(),
                t.at + 1
            ),
        )
    }

    fn next_token(&mut self) -> mlua::Result<Token> {
        while matches!(self.s.get(self.pos), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
        let at = self.pos;
        let Some(&c) = self.s.get(at) else {
            return Ok(Token {
                kind: Kind::End,
                at,
            });
        };
        let single = |k| Token { kind: k, at };
        let tok = match c {
            b'{' => single(Kind::ObjBegin),
            b'}' => single(Kind::ObjEnd),
            b'[' => single(Kind::ArrBegin),
            b']' => single(Kind::ArrEnd),
            b':' => single(Kind::Colon),
            b',' => single(Kind::Comma),
            // Lua CJSON stops at a NUL as at the end.
            0 => {
                return Ok(Token {
                    kind: Kind::End,
                    at,
                })
            }
            b'"' => return Ok(self.string(at)),
            _ => {
                let rest = &self.s[at..];
                let word = |w: &[u8]| rest.starts_with(w);
                let number = |d: &mut Self| match strtod(rest) {
                    Some((n, used)) => {
                        d.pos += used;
                        Kind::Num(n)
                    }
                    None => Kind::Error("invalid number"),
                };
                let kind = if c == b'-' || c.is_ascii_digit() {
                    if !cfg().decode_invalid && invalid_number(rest) {
                        Kind::Error("invalid number")
                    } else {
                        number(self)
                    }
                } else if word(b"true") {
                    self.pos += 4;
                    Kind::Bool(true)
                } else if word(b"false") {
                    self.pos += 5;
                    Kind::Bool(false)
                } else if word(b"null") {
                    self.pos += 4;
                    Kind::Null
                } else if cfg().decode_invalid && invalid_number(rest) {
                    number(self)
                } else {
                    Kind::Error("invalid token")
                };
                return Ok(Token { kind, at });
            }
        };
        self.pos += 1;
        Ok(tok)
    }

    fn string(&mut self, at: usize) -> Token {
        let mut out = Vec::new();
        let mut i = at + 1;
        // An error token is placed where the error was found.
        let err = |m, at| Token {
            kind: Kind::Error(m),
            at,
        };
        loop {
            let Some(&c) = self.s.get(i) else {
                return err("unexpected end of string", i);
            };
            match c {
                b'"' => break,
                0 => return err("unexpected end of string", i),
                b'\\' => {
                    let Some(&e) = self.s.get(i + 1) else {
                        return err("invalid escape code", i);
                    };
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'b' => out.push(0x08),
                        b'f' => out.push(0x0c),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => match self.unicode(i, &mut out) {
                            Some(used) => {
                                i += used;
                                continue;
                            }
                            None => return err("invalid unicode escape code", i),
                        },
                        _ => return err("invalid escape code", i),
                    }
                    i += 2;
                }
                _ => {
                    out.push(c);
                    i += 1;
                }
            }
        }
        self.pos = i + 1;
        Token {
            kind: Kind::Str(out),
            at,
        }
    }

    /// A `\uXXXX` escape (a surrogate pair as two) at `i`: appends its
    /// UTF-8, returns the bytes consumed.
    fn unicode(&self, i: usize, out: &mut Vec<u8>) -> Option<usize> {
        let hex4 = |p: usize| -> Option<u32> {
            let h = self.s.get(p..p + 4)?;
            u32::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()
        };
        let hi = hex4(i + 2)?;
        let (cp, used) = if (0xd800..0xdc00).contains(&hi) {
            if self.s.get(i + 6..i + 8)? != b"\\u" {
                return None;
            }
            let lo = hex4(i + 8)?;
            if !(0xdc00..0xe000).contains(&lo) {
                return None;
            }
            (0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00), 12)
        } else if (0xdc00..0xe000).contains(&hi) {
            return None;
        } else {
            (hi, 6)
        };
        let ch = char::from_u32(cp)?;
        let mut b = [0u8; 4];
        out.extend_from_slice(ch.encode_utf8(&mut b).as_bytes());
        Some(used)
    }

    fn value(&mut self, t: Token) -> mlua::Result<Value> {
        let lua = self.lua;
        Ok(match t.kind {
            Kind::Str(s) => Value::String(lua.create_string(s)?),
            Kind::Num(n) => Value::Number(n),
            Kind::Bool(b) => Value::Boolean(b),
            Kind::Null => null(),
            Kind::ObjBegin => super::deep(|| self.object(t.at))?,
            Kind::ArrBegin => super::deep(|| self.array(t.at))?,
            _ => return Err(self.expected("value", &t)),
        })
    }

    fn descend(&mut self, at: usize) -> mlua::Result<()> {
        self.depth += 1;
        if self.depth as i64 > cfg().decode_max_depth {
            return Err(error(
                self.lua,
                format!(
                    "Found too many nested data structures ({}) at character {}",
                    self.depth,
                    at + 1
                ),
            ));
        }
        Ok(())
    }

    fn object(&mut self, at: usize) -> mlua::Result<Value> {
        self.descend(at)?;
        let t = self.lua.create_table()?;
        let mut tok = self.next_token()?;
        if matches!(tok.kind, Kind::ObjEnd) {
            self.depth -= 1;
            return Ok(Value::Table(t));
        }
        loop {
            let Kind::Str(key) = tok.kind else {
                return Err(self.expected("object key string", &tok));
            };
            let colon = self.next_token()?;
            if !matches!(colon.kind, Kind::Colon) {
                return Err(self.expected("colon", &colon));
            }
            let vt = self.next_token()?;
            let v = self.value(vt)?;
            t.raw_set(self.lua.create_string(key)?, v)?;
            tok = self.next_token()?;
            match tok.kind {
                Kind::ObjEnd => break,
                Kind::Comma => tok = self.next_token()?,
                _ => return Err(self.expected("comma or object end", &tok)),
            }
        }
        self.depth -= 1;
        Ok(Value::Table(t))
    }

    fn array(&mut self, at: usize) -> mlua::Result<Value> {
        self.descend(at)?;
        let t = self.lua.create_table()?;
        let mut tok = self.next_token()?;
        if matches!(tok.kind, Kind::ArrEnd) {
            self.depth -= 1;
            return Ok(Value::Table(t));
        }
        let mut i = 1;
        loop {
            let v = self.value(tok)?;
            t.raw_set(i, v)?;
            i += 1;
            tok = self.next_token()?;
            match tok.kind {
                Kind::ArrEnd => break,
                Kind::Comma => tok = self.next_token()?,
                _ => return Err(self.expected("comma or array end", &tok)),
            }
        }
        self.depth -= 1;
        Ok(Value::Table(t))
    }
}

/// Lua CJSON's `json_is_invalid_number`: what JSON does not allow but
/// strtod reads (a `+`, hex, leading zeros, `inf` / `nan`), read only
/// under `decode_invalid_numbers` (the default).
fn invalid_number(s: &[u8]) -> bool {
    if s.first() == Some(&b'+') {
        return true;
    }
    let s = s.strip_prefix(b"-").unwrap_or(s);
    match s.first() {
        Some(b'0') => matches!(s.get(1), Some(c) if c | 0x20 == b'x' || c.is_ascii_digit()),
        Some(c) if *c <= b'9' => false,
        _ => {
            let lower: Vec<u8> = s.iter().take(3).map(|c| c.to_ascii_lowercase()).collect();
            lower == b"inf" || lower == b"nan"
        }
    }
}

/// C's `strtod` on the start of `s`: the value and the bytes used.
fn strtod(s: &[u8]) -> Option<(f64, usize)> {
    let mut i = 0;
    let neg = match s.first() {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let sign = if neg { -1.0 } else { 1.0 };
    let rest = &s[i..];
    let lower: Vec<u8> = rest
        .iter()
        .take(8)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    if lower.starts_with(b"infinity") {
        return Some((sign * f64::INFINITY, i + 8));
    }
    if lower.starts_with(b"inf") {
        return Some((sign * f64::INFINITY, i + 3));
    }
    if lower.starts_with(b"nan") {
        return Some((f64::NAN, i + 3));
    }
    if lower.starts_with(b"0x") {
        let digits = rest[2..]
            .iter()
            .take_while(|c| c.is_ascii_hexdigit())
            .count();
        if digits > 0 {
            let mut v = 0f64;
            for &c in &rest[2..2 + digits] {
                v = v * 16.0 + (c as char).to_digit(16).unwrap_or(0) as f64;
            }
            return Some((sign * v, i + 2 + digits));
        }
        // "0x" without digits: strtod reads the 0.
        return Some((0.0, i + 1));
    }
    let start = i;
    let int = s[i..].iter().take_while(|c| c.is_ascii_digit()).count();
    i += int;
    let mut frac = 0;
    if s.get(i) == Some(&b'.') {
        frac = s[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if int == 0 && frac == 0 {
            return None;
        }
        i += 1 + frac;
    }
    if int == 0 && frac == 0 {
        return None;
    }
    if matches!(s.get(i), Some(b'e' | b'E')) {
        let mut j = i + 1;
        if matches!(s.get(j), Some(b'+' | b'-')) {
            j += 1;
        }
        let exp = s[j..].iter().take_while(|c| c.is_ascii_digit()).count();
        if exp > 0 {
            i = j + exp;
        }
    }
    let text = std::str::from_utf8(&s[start..i]).ok()?;
    let v: f64 = text.parse().ok()?;
    Some((sign * v, i))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(lua: &Lua, code: &str) -> String {
        match lua.load(code).eval::<String>() {
            Ok(s) => s,
            Err(e) => crate::script::vm::error_text(&e),
        }
    }

    #[test]
    fn encode_and_decode_as_lua_cjson() {
        let lua = Lua::new();
        lua.globals().set("cjson", open(&lua).unwrap()).unwrap();
        let e = |c: &str| eval(&lua, c);
        assert_eq!(
            e("return cjson.encode({1,2,3,'a',{x=1}})"),
            r#"[1,2,3,"a",{"x":1}]"#
        );
        assert_eq!(e("return cjson.encode({})"), "{}");
        assert_eq!(e("return cjson.encode({[1]=1,[3]=3})"), "[1,null,3]");
        assert_eq!(e("return cjson.encode({1,2,3,nil,5})"), "[1,2,3,null,5]");
        assert_eq!(e("return cjson.encode(1/3)"), "0.33333333333333");
        assert_eq!(e("return cjson.encode(1e20)"), "1e+20");
        assert_eq!(
            e("return cjson.encode(12345678901234567)"),
            "1.2345678901235e+16"
        );
        assert_eq!(e("return cjson.encode({[1.5]=1})"), r#"{"1.5":1}"#);
        assert_eq!(e("return cjson.encode(cjson.null)"), "null");
        assert_eq!(
            e("return cjson.encode('a\"b\\\\c/d\\n\\1')"),
            r#""a\"b\\c\/d\n\u0001""#
        );
        assert!(e("return cjson.encode({[1]=1,[20]=3})")
            .ends_with("Cannot serialise table: excessively sparse array"));
        assert!(e("return cjson.encode(0/0)")
            .ends_with("Cannot serialise number: must not be NaN or Inf"));
        assert!(e("return cjson.encode({[true]=1})")
            .ends_with("Cannot serialise boolean: table key must be a number or string"));
        assert!(e(
            "local t={} local c=t for i=1,1100 do c[1]={} c=c[1] end return cjson.encode(t)"
        )
        .ends_with("Cannot serialise, excessive nesting (1001)"));
        assert_eq!(
            e(
                r#"local t = cjson.decode('[1,2,{"a":null,"b":[true,false]},"x\\u00e9\\n"]')
                 return tostring(t[1]) .. tostring(t[3].b[1]) .. tostring(t[3].a == cjson.null) .. t[4]"#
            ),
            "1truetruexé\n"
        );
        assert_eq!(e(r#"return cjson.decode('"\\ud83d\\ude00"')"#), "😀");
        assert_eq!(
            e("return tostring(cjson.decode('0x10') + cjson.decode('[01]')[1])"),
            "17"
        );
        assert_eq!(e("return tostring(cjson.decode('-0.5e-1'))"), "-0.05");
        assert!(e("return cjson.decode('{')")
            .ends_with("Expected object key string but found T_END at character 2"));
        assert!(e("return cjson.decode('[1,]')")
            .ends_with("Expected value but found T_ARR_END at character 4"));
        assert!(e("return cjson.decode('nope')")
            .ends_with("Expected value but found invalid token at character 1"));
        assert!(e("return cjson.decode('1 2')")
            .ends_with("Expected the end but found T_NUMBER at character 3"));
        assert!(e("return cjson.decode('\"abc')")
            .ends_with("Expected value but found unexpected end of string at character 5"));
        assert!(e("return cjson.decode('{\"a\" 1}')")
            .ends_with("Expected colon but found T_NUMBER at character 6"));
        assert!(e("return cjson.decode(string.rep('[', 1100))")
            .ends_with("Found too many nested data structures (1001) at character 1001"));
    }
}
