//! `struct`: Roberto Ierusalimschy's struct library 0.2 as Redis ships
//! it: `pack(fmt, ...)`, `unpack(fmt, s [, i])` and `size(fmt)`, with
//! formats `<` `>` (endianness, little by default), `!n` (alignment),
//! `x` (a pad byte), `b B h H l L T i[n] I[n]` (integers of 1, 2, 8, 8,
//! n (4) bytes, up to 32), `f d` (floats), `s` (zero-terminated string),
//! `c[n]` (n chars; `c0` in unpack takes its size from the previous
//! value) and spaces.

use mlua::{Lua, MultiValue, Table, Value};

use super::{arg_error, check_number, error};

/// The widest integer option (`i32`).
const MAX_INT_SIZE: usize = 32;
/// `!` without a number: the platform's largest alignment.
const MAX_ALIGN: usize = 8;

#[derive(Clone, Copy)]
struct Header {
    little: bool,
    align: usize,
}

enum Opt {
    /// Endianness or alignment changed, or a space: no data.
    Control,
    Pad,
    Int {
        size: usize,
        signed: bool,
    },
    Float,
    Double,
    Str,
    Chars(usize),
}

/// Reads one option at `*i` of `fmt`; `Err` names the bad option.
fn next_opt(fmt: &[u8], i: &mut usize, h: &mut Header) -> Result<Opt, u8> {
    let c = fmt[*i];
    *i += 1;
    let mut num = |default: usize| -> usize {
        if !fmt.get(*i).is_some_and(|c| c.is_ascii_digit()) {
            return default;
        }
        let mut n = 0usize;
        while let Some(d) = fmt.get(*i).filter(|c| c.is_ascii_digit()) {
            n = n.saturating_mul(10).saturating_add((d - b'0') as usize);
            *i += 1;
        }
        n
    };
    Ok(match c {
        b'b' => Opt::Int {
            size: 1,
            signed: true,
        },
        b'B' => Opt::Int {
            size: 1,
            signed: false,
        },
        b'h' => Opt::Int {
            size: 2,
            signed: true,
        },
        b'H' => Opt::Int {
            size: 2,
            signed: false,
        },
        b'l' => Opt::Int {
            size: 8,
            signed: true,
        },
        b'L' => Opt::Int {
            size: 8,
            signed: false,
        },
        b'T' => Opt::Int {
            size: 8,
            signed: false,
        },
        b'i' => Opt::Int {
            size: num(4),
            signed: true,
        },
        b'I' => Opt::Int {
            size: num(4),
            signed: false,
        },
        b'f' => Opt::Float,
        b'd' => Opt::Double,
        b's' => Opt::Str,
        b'c' => Opt::Chars(num(1)),
        b'x' => Opt::Pad,
        b' ' => Opt::Control,
        b'<' => {
            h.little = true;
            Opt::Control
        }
        b'>' => {
            h.little = false;
            Opt::Control
        }
        b'!' => {
            h.align = num(MAX_ALIGN);
            Opt::Control
        }
        other => return Err(other),
    })
}

fn size_of(o: &Opt) -> usize {
    match o {
        Opt::Control | Opt::Str => 0,
        Opt::Pad => 1,
        Opt::Int { size, .. } => *size,
        Opt::Float => 4,
        Opt::Double => 8,
        Opt::Chars(n) => *n,
    }
}

/// Padding before an option of `size` at offset `len`.
fn to_align(len: usize, h: &Header, o: &Opt) -> usize {
    let mut size = size_of(o);
    if size == 0 || matches!(o, Opt::Chars(_)) {
        return 0;
    }
    if size > h.align {
        size = h.align;
    }
    if !size.is_power_of_two() {
        return 0;
    }
    (size - (len & (size - 1))) & (size - 1)
}

fn bad_option(lua: &Lua, fname: &str, c: u8) -> mlua::Error {
    arg_error(
        lua,
        1,
        fname,
        &format!("invalid format option '{}'", c as char),
    )
}

fn int_size_check(lua: &Lua, o: &Opt) -> mlua::Result<()> {
    if let Opt::Int { size, .. } = o {
        if *size > MAX_INT_SIZE || *size == 0 {
            return Err(error(
                lua,
                format!("integral size {size} is larger than limit of {MAX_INT_SIZE}"),
            ));
        }
    }
    Ok(())
}

fn fmt_arg(lua: &Lua, args: &[Value], fname: &str) -> mlua::Result<Vec<u8>> {
    match args.first() {
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(Value::Integer(n)) => Ok(n.to_string().into_bytes()),
        other => Err(arg_error(
            lua,
            1,
            fname,
            &format!("string expected, got {}", super::type_name(other)),
        )),
    }
}

fn pack(lua: &Lua, args: &[Value]) -> mlua::Result<Vec<u8>> {
    let fmt = fmt_arg(lua, args, "pack")?;
    let mut h = Header {
        little: true,
        align: 1,
    };
    let mut out = Vec::new();
    let mut i = 0;
    let mut arg = 2;
    while i < fmt.len() {
        let o = next_opt(&fmt, &mut i, &mut h).map_err(|c| bad_option(lua, "pack", c))?;
        int_size_check(lua, &o)?;
        out.resize(out.len() + to_align(out.len(), &h, &o), 0);
        match o {
            Opt::Control => {}
            Opt::Pad => out.push(0),
            Opt::Int { size, .. } => {
                let n = check_number(lua, args, arg, "pack")?;
                arg += 1;
                let v: u64 = if n < 0.0 { n as i64 as u64 } else { n as u64 };
                let mut bytes = vec![0u8; size];
                for (k, b) in bytes.iter_mut().enumerate().take(8) {
                    *b = (v >> (8 * k)) as u8;
                }
                if !h.little {
                    bytes.reverse();
                }
                out.extend_from_slice(&bytes);
            }
            Opt::Float => {
                let n = check_number(lua, args, arg, "pack")? as f32;
                arg += 1;
                let b = if h.little {
                    n.to_le_bytes()
                } else {
                    n.to_be_bytes()
                };
                out.extend_from_slice(&b);
            }
            Opt::Double => {
                let n = check_number(lua, args, arg, "pack")?;
                arg += 1;
                let b = if h.little {
                    n.to_le_bytes()
                } else {
                    n.to_be_bytes()
                };
                out.extend_from_slice(&b);
            }
            Opt::Chars(size) => {
                let s = string_arg(lua, args, arg)?;
                let size = if size == 0 { s.len() } else { size };
                if s.len() < size {
                    return Err(arg_error(lua, arg, "pack", "string too short"));
                }
                arg += 1;
                out.extend_from_slice(&s[..size]);
            }
            Opt::Str => {
                let s = string_arg(lua, args, arg)?;
                if s.contains(&0) {
                    return Err(arg_error(lua, arg, "pack", "string contains zeros"));
                }
                arg += 1;
                out.extend_from_slice(&s);
                out.push(0);
            }
        }
    }
    Ok(out)
}

fn string_arg(lua: &Lua, args: &[Value], n: usize) -> mlua::Result<Vec<u8>> {
    match args.get(n - 1) {
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(Value::Integer(i)) => Ok(i.to_string().into_bytes()),
        Some(Value::Number(x)) => Ok(crate::script::vm::lua_number(*x).into_bytes()),
        other => Err(arg_error(
            lua,
            n,
            "pack",
            &format!("string expected, got {}", super::type_name(other)),
        )),
    }
}

fn unpack(lua: &Lua, args: &[Value]) -> mlua::Result<MultiValue> {
    let fmt = fmt_arg(lua, args, "unpack")?;
    let data: Vec<u8> = match args.get(1) {
        Some(Value::String(s)) => s.as_bytes().to_vec(),
        Some(Value::Integer(n)) => n.to_string().into_bytes(),
        other => {
            return Err(arg_error(
                lua,
                2,
                "unpack",
                &format!("string expected, got {}", super::type_name(other)),
            ))
        }
    };
    let ld = data.len();
    let mut pos = match args.get(2) {
        Some(Value::Integer(n)) => (*n).max(1) as usize - 1,
        Some(Value::Number(n)) => (*n).max(1.0) as usize - 1,
        _ => 0,
    };
    if pos > ld {
        return Err(arg_error(lua, 3, "unpack", "offset must be 1 or greater"));
    }
    let mut h = Header {
        little: true,
        align: 1,
    };
    let mut vals: Vec<Value> = Vec::new();
    let short = || arg_error(lua, 2, "unpack", "data string too short");
    let mut i = 0;
    while i < fmt.len() {
        let o = next_opt(&fmt, &mut i, &mut h).map_err(|c| bad_option(lua, "unpack", c))?;
        int_size_check(lua, &o)?;
        pos += to_align(pos, &h, &o);
        let size = size_of(&o);
        if !matches!(o, Opt::Str | Opt::Chars(0)) && pos + size > ld {
            return Err(short());
        }
        match o {
            Opt::Control => {}
            Opt::Pad => pos += 1,
            Opt::Int { size, signed } => {
                let mut bytes = data[pos..pos + size].to_vec();
                if !h.little {
                    bytes.reverse();
                }
                // Little-endian now; only the low 8 bytes fit a number.
                let mut v = 0u64;
                for (k, b) in bytes.iter().take(8).enumerate() {
                    v |= (*b as u64) << (8 * k);
                }
                let n = if signed && size < 8 {
                    let shift = 64 - 8 * size as u32;
                    ((v << shift) as i64 >> shift) as f64
                } else if signed {
                    v as i64 as f64
                } else {
                    v as f64
                };
                vals.push(Value::Number(n));
                pos += size;
            }
            Opt::Float => {
                let b: [u8; 4] = data[pos..pos + 4].try_into().unwrap_or_default();
                let f = if h.little {
                    f32::from_le_bytes(b)
                } else {
                    f32::from_be_bytes(b)
                };
                vals.push(Value::Number(f as f64));
                pos += 4;
            }
            Opt::Double => {
                let b: [u8; 8] = data[pos..pos + 8].try_into().unwrap_or_default();
                let f = if h.little {
                    f64::from_le_bytes(b)
                } else {
                    f64::from_be_bytes(b)
                };
                vals.push(Value::Number(f));
                pos += 8;
            }
            Opt::Chars(mut size) => {
                if size == 0 {
                    let n = match vals.pop() {
                        Some(Value::Number(n)) => n,
                        Some(Value::Integer(n)) => n as f64,
                        _ => return Err(error(lua, "format 'c0' needs a previous size")),
                    };
                    size = n.max(0.0) as usize;
                    if size > ld || pos > ld - size {
                        return Err(short());
                    }
                }
                vals.push(Value::String(lua.create_string(&data[pos..pos + size])?));
                pos += size;
            }
            Opt::Str => {
                let Some(len) = data[pos..].iter().position(|&c| c == 0) else {
                    return Err(arg_error(lua, 2, "unpack", "unfinished string in data"));
                };
                vals.push(Value::String(lua.create_string(&data[pos..pos + len])?));
                pos += len + 1;
            }
        }
    }
    vals.push(Value::Integer(pos as i64 + 1));
    Ok(MultiValue::from_vec(vals))
}

fn size(lua: &Lua, args: &[Value]) -> mlua::Result<i64> {
    let fmt = fmt_arg(lua, args, "size")?;
    let mut h = Header {
        little: true,
        align: 1,
    };
    let mut total = 0usize;
    let mut i = 0;
    while i < fmt.len() {
        let o = next_opt(&fmt, &mut i, &mut h).map_err(|c| bad_option(lua, "size", c))?;
        int_size_check(lua, &o)?;
        match o {
            Opt::Str => return Err(arg_error(lua, 1, "size", "option 's' has no fixed size")),
            Opt::Chars(0) => {
                return Err(arg_error(lua, 1, "size", "option 'c0' has no fixed size"))
            }
            _ => {}
        }
        total += to_align(total, &h, &o) + size_of(&o);
    }
    Ok(total as i64)
}

pub fn open(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set(
        "pack",
        lua.create_function(|lua, args: MultiValue| {
            let a: Vec<Value> = args.into_iter().collect();
            lua.create_string(pack(lua, &a)?)
        })?,
    )?;
    t.raw_set(
        "unpack",
        lua.create_function(|lua, args: MultiValue| {
            let a: Vec<Value> = args.into_iter().collect();
            unpack(lua, &a)
        })?,
    )?;
    t.raw_set(
        "size",
        lua.create_function(|lua, args: MultiValue| {
            let a: Vec<Value> = args.into_iter().collect();
            size(lua, &a)
        })?,
    )?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_and_unpacks_as_struct_0_2() {
        let lua = Lua::new();
        lua.globals().set("struct", open(&lua).unwrap()).unwrap();
        let hex = |code: &str| -> String {
            let s: mlua::LuaString = lua.load(code).eval().unwrap();
            s.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
        };
        assert_eq!(
            hex("return struct.pack('<hHbBlLdfc3s', -1, 65535, -1, 255, -1, 1, 1.5, 2.5, 'abc', 'str')"),
            "ffffffffffffffffffffffffffff0100000000000000000000000000f83f0000204061626373747200"
        );
        assert_eq!(hex("return struct.pack('>I2', 70000)"), "1170");
        assert_eq!(hex("return struct.pack('>i4', -2)"), "fffffffe");
        let n: i64 = lua.load("return struct.size('!4bi')").eval().unwrap();
        assert_eq!(n, 8);
        let (a, b): (String, i64) = lua
            .load("return struct.unpack('bc0', struct.pack('b', 2) .. 'xyz')")
            .eval()
            .unwrap();
        assert_eq!((a.as_str(), b), ("xy", 4));
        let (a, b): (i64, i64) = lua
            .load("return struct.unpack('>i4', struct.pack('>i4', -2))")
            .eval()
            .unwrap();
        assert_eq!((a, b), (-2, 5));
        let e = lua
            .load("return struct.unpack('>i4', 'ab')")
            .exec()
            .unwrap_err();
        assert!(crate::script::vm::error_text(&e).contains("data string too short"));
        let e = lua.load("return struct.pack('z')").exec().unwrap_err();
        assert!(crate::script::vm::error_text(&e).contains("invalid format option 'z'"));
    }
}
