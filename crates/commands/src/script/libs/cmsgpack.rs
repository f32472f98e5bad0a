//! `cmsgpack`: lua-cmsgpack 0.4 as Redis ships it. `pack(...)` encodes
//! each argument (integral numbers as the smallest integer type, other
//! numbers as float32 when exact and float64 otherwise, strings as
//! fixstr/str8/str16/str32, tables as arrays when their keys are exactly
//! 1..n and as maps otherwise, nesting past 16 levels and unsupported
//! types as nil); `unpack`, `unpack_one`, `unpack_limit` decode, refusing
//! what lua-cmsgpack does not read (bin, ext) with its texts.

use mlua::{Lua, MultiValue, Table, Value};

use super::{arg_error, error, type_name};

/// lua-cmsgpack's LUACMSGPACK_MAX_NESTING.
const MAX_NESTING: usize = 16;

pub fn open(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set(
        "pack",
        lua.create_function(|lua, args: MultiValue| {
            if args.is_empty() {
                return Err(arg_error(lua, 0, "pack", "MessagePack pack needs input."));
            }
            let mut out = Vec::new();
            for a in &args {
                encode(a, 0, &mut out)?;
            }
            lua.create_string(out)
        })?,
    )?;
    t.raw_set(
        "unpack",
        lua.create_function(|lua, args: MultiValue| {
            let s = input(lua, &args, "unpack")?;
            let (_, vals) = decode_many(lua, &s, 0, 0)?;
            Ok(MultiValue::from_vec(vals))
        })?,
    )?;
    t.raw_set(
        "unpack_one",
        lua.create_function(|lua, args: MultiValue| {
            let s = input(lua, &args, "unpack_one")?;
            let offset = offset_arg(&args, 1);
            let (next, vals) = decode_many(lua, &s, 1, offset)?;
            let mut r = vec![Value::Integer(next)];
            r.extend(vals);
            Ok(MultiValue::from_vec(r))
        })?,
    )?;
    t.raw_set(
        "unpack_limit",
        lua.create_function(|lua, args: MultiValue| {
            let s = input(lua, &args, "unpack_limit")?;
            let limit = offset_arg(&args, 1).max(0) as usize;
            let offset = offset_arg(&args, 2);
            let (next, vals) = decode_many(lua, &s, limit, offset)?;
            let mut r = vec![Value::Integer(next)];
            r.extend(vals);
            Ok(MultiValue::from_vec(r))
        })?,
    )?;
    t.raw_set("_NAME", "cmsgpack")?;
    t.raw_set("_VERSION", "lua-cmsgpack 0.4.0")?;
    Ok(t)
}

fn input(lua: &Lua, args: &MultiValue, fname: &str) -> mlua::Result<Vec<u8>> {
    match args.front() {
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(Value::Integer(n)) => Ok(n.to_string().into_bytes()),
        Some(Value::Number(n)) => Ok(crate::script::vm::lua_number(*n).into_bytes()),
        other => Err(arg_error(
            lua,
            1,
            fname,
            &format!("string expected, got {}", type_name(other)),
        )),
    }
}

fn offset_arg(args: &MultiValue, i: usize) -> i64 {
    match args.get(i) {
        Some(Value::Integer(n)) => *n,
        Some(Value::Number(n)) => *n as i64,
        _ => 0,
    }
}

fn encode(v: &Value, depth: usize, out: &mut Vec<u8>) -> mlua::Result<()> {
    match v {
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(n) => int(*n, out),
        Value::Number(n) => number(*n, out),
        Value::String(s) => string(&s.as_bytes(), out),
        Value::Table(t) if depth < MAX_NESTING => {
            super::deep(|| table(t, depth + 1, out))?;
        }
        _ => out.push(0xc0),
    }
    Ok(())
}

fn number(n: f64, out: &mut Vec<u8>) {
    // IS_INT64_EQUIVALENT: finite and equal to its int64 cast (2^63 is not:
    // C's cast overflows where Rust's saturates).
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if n.is_finite() && (n as i64) as f64 == n && n < TWO_63 {
        return int(n as i64, out);
    }
    if (n as f32) as f64 == n || n.is_nan() {
        out.push(0xca);
        out.extend_from_slice(&(n as f32).to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn int(n: i64, out: &mut Vec<u8>) {
    if n >= 0 {
        let u = n as u64;
        if u < 128 {
            out.push(u as u8);
        } else if u <= 0xff {
            out.extend_from_slice(&[0xcc, u as u8]);
        } else if u <= 0xffff {
            out.push(0xcd);
            out.extend_from_slice(&(u as u16).to_be_bytes());
        } else if u <= 0xffff_ffff {
            out.push(0xce);
            out.extend_from_slice(&(u as u32).to_be_bytes());
        } else {
            out.push(0xcf);
            out.extend_from_slice(&u.to_be_bytes());
        }
    } else if n >= -32 {
        out.push(n as i8 as u8);
    } else if n >= -128 {
        out.extend_from_slice(&[0xd0, n as i8 as u8]);
    } else if n >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(n as i16).to_be_bytes());
    } else if n >= -2_147_483_648 {
        out.push(0xd2);
        out.extend_from_slice(&(n as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn string(s: &[u8], out: &mut Vec<u8>) {
    let n = s.len();
    if n < 32 {
        out.push(0xa0 | n as u8);
    } else if n <= 0xff {
        out.extend_from_slice(&[0xd9, n as u8]);
    } else if n <= 0xffff {
        out.push(0xda);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
    out.extend_from_slice(s);
}

fn header(n: usize, fix: u8, b16: u8, b32: u8, out: &mut Vec<u8>) {
    if n < 16 {
        out.push(fix | n as u8);
    } else if n <= 0xffff {
        out.push(b16);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(b32);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

/// Two walks with `next` (lua-cmsgpack's `table_is_an_array`, then the
/// encoding), holding one pair at a time: a table of 100,000 strings
/// collected at once would need a reference for each, past Lua's stack.
fn table(t: &Table, depth: usize, out: &mut Vec<u8>) -> mlua::Result<()> {
    // An array when the keys are exactly 1..n.
    let mut max = 0f64;
    let mut count = 0usize;
    let mut array = true;
    for kv in t.pairs::<Value, Value>() {
        let (k, _) = kv?;
        count += 1;
        if !array {
            continue;
        }
        let n = match k {
            Value::Integer(n) => n as f64,
            Value::Number(n) => n,
            _ => {
                array = false;
                continue;
            }
        };
        if n <= 0.0 || n.fract() != 0.0 {
            array = false;
            continue;
        }
        max = f64::max(max, n);
    }
    if array && max as usize == count {
        header(count, 0x90, 0xdc, 0xdd, out);
        for i in 1..=count {
            let v: Value = t.raw_get(i)?;
            encode(&v, depth, out)?;
        }
    } else {
        header(count, 0x80, 0xde, 0xdf, out);
        for kv in t.pairs::<Value, Value>() {
            let (k, v) = kv?;
            encode(&k, depth, out)?;
            encode(&v, depth, out)?;
        }
    }
    Ok(())
}

/// Decodes up to `limit` objects (0: all) from byte `offset`; returns the
/// offset after them (-1 at the end of the input) and the values.
fn decode_many(lua: &Lua, s: &[u8], limit: usize, offset: i64) -> mlua::Result<(i64, Vec<Value>)> {
    let mut pos = usize::try_from(offset).unwrap_or(0).min(s.len());
    let mut vals = Vec::new();
    while pos < s.len() && (limit == 0 || vals.len() < limit) {
        vals.push(decode(lua, s, &mut pos)?);
    }
    let next = if pos >= s.len() { -1 } else { pos as i64 };
    Ok((next, vals))
}

fn take<'a>(lua: &Lua, s: &'a [u8], pos: &mut usize, n: usize) -> mlua::Result<&'a [u8]> {
    let end = pos.checked_add(n).filter(|&e| e <= s.len());
    let Some(end) = end else {
        return Err(error(lua, "Missing bytes in input."));
    };
    let b = &s[*pos..end];
    *pos = end;
    Ok(b)
}

fn be(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |a, &c| (a << 8) | c as u64)
}

fn decode(lua: &Lua, s: &[u8], pos: &mut usize) -> mlua::Result<Value> {
    let c = take(lua, s, pos, 1)?[0];
    let num = |n: f64| Ok(Value::Number(n));
    match c {
        0x00..=0x7f => num(c as f64),
        0xe0..=0xff => num(c as i8 as f64),
        0xc0 => Ok(Value::Nil),
        0xc2 => Ok(Value::Boolean(false)),
        0xc3 => Ok(Value::Boolean(true)),
        0xcc => num(take(lua, s, pos, 1)?[0] as f64),
        0xcd => num(be(take(lua, s, pos, 2)?) as f64),
        0xce => num(be(take(lua, s, pos, 4)?) as f64),
        0xcf => num(be(take(lua, s, pos, 8)?) as f64),
        0xd0 => num(take(lua, s, pos, 1)?[0] as i8 as f64),
        0xd1 => num(be(take(lua, s, pos, 2)?) as u16 as i16 as f64),
        0xd2 => num(be(take(lua, s, pos, 4)?) as u32 as i32 as f64),
        0xd3 => num(be(take(lua, s, pos, 8)?) as i64 as f64),
        0xca => num(f32::from_bits(be(take(lua, s, pos, 4)?) as u32) as f64),
        0xcb => num(f64::from_bits(be(take(lua, s, pos, 8)?))),
        0xa0..=0xbf => str_of(lua, s, pos, (c & 0x1f) as usize),
        0xd9 => {
            let n = take(lua, s, pos, 1)?[0] as usize;
            str_of(lua, s, pos, n)
        }
        0xda => {
            let n = be(take(lua, s, pos, 2)?) as usize;
            str_of(lua, s, pos, n)
        }
        0xdb => {
            let n = be(take(lua, s, pos, 4)?) as usize;
            str_of(lua, s, pos, n)
        }
        0x90..=0x9f => array(lua, s, pos, (c & 0x0f) as usize),
        0xdc => {
            let n = be(take(lua, s, pos, 2)?) as usize;
            array(lua, s, pos, n)
        }
        0xdd => {
            let n = be(take(lua, s, pos, 4)?) as usize;
            array(lua, s, pos, n)
        }
        0x80..=0x8f => map(lua, s, pos, (c & 0x0f) as usize),
        0xde => {
            let n = be(take(lua, s, pos, 2)?) as usize;
            map(lua, s, pos, n)
        }
        0xdf => {
            let n = be(take(lua, s, pos, 4)?) as usize;
            map(lua, s, pos, n)
        }
        _ => Err(error(lua, "Bad data format in input.")),
    }
}

fn str_of(lua: &Lua, s: &[u8], pos: &mut usize, n: usize) -> mlua::Result<Value> {
    Ok(Value::String(lua.create_string(take(lua, s, pos, n)?)?))
}

fn array(lua: &Lua, s: &[u8], pos: &mut usize, n: usize) -> mlua::Result<Value> {
    // Each element takes at least a byte: a count beyond the input is
    // refused before anything is allocated for it.
    if n > s.len() - *pos {
        return Err(error(lua, "Missing bytes in input."));
    }
    let t = lua.create_table()?;
    for i in 1..=n {
        let v = super::deep(|| decode(lua, s, pos))?;
        t.raw_set(i, v)?;
    }
    Ok(Value::Table(t))
}

fn map(lua: &Lua, s: &[u8], pos: &mut usize, n: usize) -> mlua::Result<Value> {
    if n > s.len() - *pos {
        return Err(error(lua, "Missing bytes in input."));
    }
    let t = lua.create_table()?;
    for _ in 0..n {
        let k = super::deep(|| decode(lua, s, pos))?;
        let v = super::deep(|| decode(lua, s, pos))?;
        if !k.is_nil() {
            t.raw_set(k, v)?;
        }
    }
    Ok(Value::Table(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(lua: &Lua, code: &str) -> String {
        let s: mlua::LuaString = lua.load(code).eval().unwrap();
        s.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn packs_as_lua_cmsgpack() {
        let lua = Lua::new();
        lua.globals().set("cmsgpack", open(&lua).unwrap()).unwrap();
        assert_eq!(
            hex(&lua, "return cmsgpack.pack(1, -1, 127, 128, 255, 256, 65535, 65536, -32, -33, -128, -129, -32768, -32769, 4294967296, -4294967296)"),
            "01ff7fcc80ccffcd0100cdffffce00010000e0d0dfd080d1ff7fd18000d2ffff7fffcf0000000100000000d3ffffffff00000000"
        );
        assert_eq!(
            hex(
                &lua,
                "return cmsgpack.pack(1.5, 0.1, true, false, nil, 'abc', {1,2,3}, {a=1}, {})"
            ),
            "ca3fc00000cb3fb999999999999ac3c2c0a36162639301020381a1610190"
        );
        assert_eq!(
            hex(&lua, "return cmsgpack.pack(1e300, -0.0, 2^53, 2^64)"),
            "cb7e37e43c8800759c00cf0020000000000000ca5f800000"
        );
        assert_eq!(
            hex(&lua, "local a = {} a[1] = a return cmsgpack.pack(a)"),
            "91919191919191919191919191919191c0"
        );
        assert_eq!(hex(&lua, "return cmsgpack.pack({1,nil,3})"), "8201010303");
        let r: String = lua
            .load("local t = cmsgpack.unpack(cmsgpack.pack({x='y', n={1,2}})) return t.x .. t.n[2]")
            .eval()
            .unwrap();
        assert_eq!(r, "y2");
        let r: (i64, i64) = lua
            .load("return cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3), 2)")
            .eval()
            .unwrap();
        assert_eq!(r, (-1, 3));
        let e = lua
            .load("return cmsgpack.unpack(string.char(0x92, 1))")
            .exec()
            .unwrap_err();
        assert!(crate::script::vm::error_text(&e).ends_with("Missing bytes in input."));
        let e = lua
            .load("return cmsgpack.unpack(string.char(0xc4, 1, 1))")
            .exec()
            .unwrap_err();
        assert!(crate::script::vm::error_text(&e).ends_with("Bad data format in input."));
    }
}
