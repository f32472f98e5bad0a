//! `bit`: LuaBitOp 1.0 as Redis ships it. Arguments are numbers reduced
//! to 32 bits the way LuaBitOp does (rounded to the nearest integer, then
//! modulo 2^32); results are signed 32-bit numbers.

use mlua::{Lua, MultiValue, Table, Value};

use super::check_number;

/// LuaBitOp's `barg`: adding 2^52 + 2^51 puts the rounded integer in the
/// low 32 bits of the double's mantissa.
fn to_bits(n: f64) -> u32 {
    let b = (n + 6_755_399_441_055_744.0).to_bits();
    b as u32
}

fn arg(lua: &Lua, args: &[Value], n: usize, fname: &str) -> mlua::Result<u32> {
    Ok(to_bits(check_number(lua, args, n, fname)?))
}

fn ret(b: u32) -> f64 {
    b as i32 as f64
}

pub fn open(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    macro_rules! unary {
        ($name:literal, $f:expr) => {
            t.raw_set(
                $name,
                lua.create_function(|lua, args: MultiValue| {
                    let a: Vec<Value> = args.into_iter().collect();
                    let x = arg(lua, &a, 1, $name)?;
                    let f: fn(u32) -> u32 = $f;
                    Ok(ret(f(x)))
                })?,
            )?;
        };
    }
    macro_rules! fold {
        ($name:literal, $f:expr) => {
            t.raw_set(
                $name,
                lua.create_function(|lua, args: MultiValue| {
                    let a: Vec<Value> = args.into_iter().collect();
                    let mut acc = arg(lua, &a, 1, $name)?;
                    let f: fn(u32, u32) -> u32 = $f;
                    for i in 2..=a.len() {
                        acc = f(acc, arg(lua, &a, i, $name)?);
                    }
                    Ok(ret(acc))
                })?,
            )?;
        };
    }
    macro_rules! shift {
        ($name:literal, $f:expr) => {
            t.raw_set(
                $name,
                lua.create_function(|lua, args: MultiValue| {
                    let a: Vec<Value> = args.into_iter().collect();
                    let x = arg(lua, &a, 1, $name)?;
                    let n = arg(lua, &a, 2, $name)? & 31;
                    let f: fn(u32, u32) -> u32 = $f;
                    Ok(ret(f(x, n)))
                })?,
            )?;
        };
    }
    unary!("tobit", |x| x);
    unary!("bnot", |x| !x);
    unary!("bswap", |x| x.swap_bytes());
    fold!("band", |a, b| a & b);
    fold!("bor", |a, b| a | b);
    fold!("bxor", |a, b| a ^ b);
    shift!("lshift", |x, n| x << n);
    shift!("rshift", |x, n| x >> n);
    shift!("arshift", |x, n| ((x as i32) >> n) as u32);
    shift!("rol", |x, n| x.rotate_left(n));
    shift!("ror", |x, n| x.rotate_right(n));
    t.raw_set(
        "tohex",
        lua.create_function(|lua, args: MultiValue| {
            let a: Vec<Value> = args.into_iter().collect();
            let x = arg(lua, &a, 1, "tohex")?;
            let n = match a.get(1) {
                None | Some(Value::Nil) => 8,
                Some(_) => to_bits(check_number(lua, &a, 2, "tohex")?) as i32,
            };
            // Redis 7.0.15's fix: i32::MIN counts as one more (negating
            // it overflowed).
            let (upper, n) = if n < 0 {
                (true, n.saturating_neg())
            } else {
                (false, n)
            };
            let n = n.clamp(0, 8) as usize;
            let s = if upper {
                format!("{x:08X}")
            } else {
                format!("{x:08x}")
            };
            Ok(s[8 - n..].to_string())
        })?,
    )?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn luabitop_semantics() {
        let lua = Lua::new();
        lua.globals().set("bit", open(&lua).unwrap()).unwrap();
        let e = |c: &str| -> String { lua.load(c).eval::<String>().unwrap() };
        assert_eq!(e("return tostring(bit.tobit(0xffffffff))"), "-1");
        assert_eq!(e("return tostring(bit.tobit(2^32 + 5))"), "5");
        assert_eq!(e("return tostring(bit.band(0xff, 0x0f, 0x3))"), "3");
        assert_eq!(e("return tostring(bit.bor(1, 2, 4))"), "7");
        assert_eq!(e("return tostring(bit.bxor(5, 1))"), "4");
        assert_eq!(e("return tostring(bit.bnot(0))"), "-1");
        assert_eq!(e("return tostring(bit.lshift(1, 31))"), "-2147483648");
        assert_eq!(e("return tostring(bit.rshift(-1, 28))"), "15");
        assert_eq!(e("return tostring(bit.arshift(-256, 4))"), "-16");
        assert_eq!(e("return tostring(bit.rol(0x12345678, 12))"), "1164411171");
        assert_eq!(e("return bit.tohex(65535)"), "0000ffff");
        assert_eq!(e("return bit.tohex(-1, -4)"), "FFFF");
        assert_eq!(e("return bit.tohex(0x12345678, 2)"), "78");
        assert_eq!(e("return tostring(bit.bswap(0x12345678))"), "2018915346");
        assert_eq!(e("return tostring(bit.tobit(1.5))"), "2");
        assert_eq!(e("return tostring(bit.tobit(2.5))"), "2");
    }
}
