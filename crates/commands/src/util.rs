//! Argument parsing shared by every family, with Redis's error for each
//! kind of bad input.

use engine::{Entry, Hash, List, Set, StrRef, Value, ValueRef, ZSet};

use crate::error::CmdError;

/// An integer argument (Redis's `getLongLongFromObjectOrReply`).
pub fn parse_i64(arg: &[u8]) -> Result<i64, CmdError> {
    resp::string2ll(arg).ok_or(CmdError::NotInteger)
}

/// An `int` argument (Redis's `getIntFromObjectOrReply`).
pub fn parse_i32(arg: &[u8]) -> Result<i32, CmdError> {
    let n = parse_i64(arg)?;
    i32::try_from(n).map_err(|_| {
        CmdError::err("value is out of range, value must between -2147483648 and 2147483647")
    })
}

/// A non-negative integer that must fit an `i64` (counts, indexes).
pub fn parse_u64(arg: &[u8]) -> Result<u64, CmdError> {
    let n = parse_i64(arg)?;
    u64::try_from(n).map_err(|_| CmdError::NotInteger)
}

/// A double argument as Redis's `getDoubleFromObjectOrReply`: `strtod`
/// syntax (no leading space, full consumption), `inf`/`-inf` accepted,
/// NaN rejected.
pub fn parse_f64(arg: &[u8]) -> Result<f64, CmdError> {
    parse_f64_opt(arg).ok_or(CmdError::NotFloat)
}

pub fn parse_f64_opt(arg: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(arg).ok()?;
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    let lower = s.to_ascii_lowercase();
    let v = match lower.as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        _ => {
            // Rust accepts "nan"/"inf" spellings strtod also accepts, but
            // not hex floats; Redis clients never send those.
            if lower.contains("nan") || lower.contains("inf") {
                return None;
            }
            s.parse::<f64>().ok()?
        }
    };
    (!v.is_nan()).then_some(v)
}

/// ASCII case-insensitive comparison of an argument with an option name.
#[inline]
pub fn eq_ic(arg: &[u8], opt: &str) -> bool {
    arg.eq_ignore_ascii_case(opt.as_bytes())
}

macro_rules! typed_access {
    ($get:ident, $get_mut:ident, $variant:ident, $ty:ty, $what:literal) => {
        #[doc = concat!("The ", $what, " value of an entry, or WRONGTYPE.")]
        #[inline]
        pub fn $get(e: &Entry) -> Result<&$ty, CmdError> {
            match e.value() {
                ValueRef::$variant(v) => Ok(v),
                _ => Err(CmdError::WrongType),
            }
        }
        #[inline]
        pub fn $get_mut(e: &mut Entry) -> Result<&mut $ty, CmdError> {
            // Checked on the borrowed view first: `value_mut` on a string
            // may change how it is stored, for nothing on WRONGTYPE.
            if !matches!(e.value(), ValueRef::$variant(_)) {
                return Err(CmdError::WrongType);
            }
            match e.value_mut() {
                Value::$variant(v) => Ok(v),
                _ => Err(CmdError::WrongType),
            }
        }
    };
}

/// The string value of an entry, or WRONGTYPE.
#[inline]
pub fn as_str(e: &Entry) -> Result<StrRef<'_>, CmdError> {
    match e.value() {
        ValueRef::Str(s) => Ok(s),
        _ => Err(CmdError::WrongType),
    }
}

typed_access!(as_hash, as_hash_mut, Hash, Hash, "hash");
typed_access!(as_list, as_list_mut, List, List, "list");
typed_access!(as_set, as_set_mut, Set, Set, "set");
typed_access!(as_zset, as_zset_mut, ZSet, ZSet, "sorted set");

/// A blocking command's timeout in seconds (fractional), as Redis 7.0's
/// `getTimeoutFromObjectOrReply`: the absolute deadline in Unix
/// milliseconds, or 0 for "forever".
pub fn parse_timeout(arg: &[u8], now_ms: u64) -> Result<u64, CmdError> {
    let v =
        string2ld(arg).ok_or_else(|| CmdError::err("timeout is not a float or out of range"))?;
    // `(long long) ceill(v * 1000)`: a part of a millisecond rounds up
    // (0.0001 waits 1 ms, not forever), anything above -1 ms rounds to 0
    // (forever). Out of `long long`'s range (infinities included) the C
    // cast gives LLONG_MIN on the machines Redis runs on, hence
    // "negative"; 7.0 has no "out of range" check, and a deadline past
    // the end of time waits forever.
    let ms = (v * 1000.0).ceil();
    if !(ms > -1.0 && ms < 9_223_372_036_854_775_808.0) {
        return Err(CmdError::err("timeout is negative"));
    }
    let ms = ms as u64;
    if ms == 0 {
        return Ok(0);
    }
    Ok(now_ms.saturating_add(ms))
}

/// Redis's `string2ld`: C `strtold` syntax (hex floats and `inf`
/// included) over the whole argument, no leading space, not NaN, at most
/// 5 KiB. A `long double` holds what overflows or underflows an `f64`
/// (up to 1e4932, down to 1e-4951): such a value stands in as an infinity
/// or the smallest normal `f64` of its sign, which make the same timeout.
fn string2ld(arg: &[u8]) -> Option<f64> {
    if arg.is_empty()
        || arg.len() > 5 * 1024
        || matches!(arg[0], b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
    {
        return None;
    }
    let (v, n, erange) = crate::zset::strtod(arg);
    if n != arg.len() || v.is_nan() {
        return None;
    }
    Some(if erange && v == 0.0 {
        f64::MIN_POSITIVE.copysign(v)
    } else {
        v
    })
}

/// A database index argument as SELECT/MOVE/COPY parse it.
pub fn parse_db_index(arg: &[u8], databases: usize) -> Result<usize, CmdError> {
    let n = parse_i32(arg)?;
    if n < 0 || n as u64 >= databases as u64 {
        return Err(CmdError::DbIndexOutOfRange);
    }
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats() {
        assert_eq!(parse_f64(b"1.5"), Ok(1.5));
        assert_eq!(parse_f64(b"-inf"), Ok(f64::NEG_INFINITY));
        assert_eq!(parse_f64(b"+inf"), Ok(f64::INFINITY));
        assert_eq!(parse_f64(b"1e3"), Ok(1000.0));
        assert!(parse_f64(b"nan").is_err());
        assert!(parse_f64(b" 1").is_err());
        assert!(parse_f64(b"1 ").is_err());
        assert!(parse_f64(b"").is_err());
        assert!(parse_f64(b"abc").is_err());
    }

    #[test]
    fn timeouts() {
        assert_eq!(parse_timeout(b"0", 1000), Ok(0));
        assert_eq!(parse_timeout(b"0.5", 1000), Ok(1500));
        assert_eq!(parse_timeout(b"2", 1000), Ok(3000));
        // A part of a millisecond rounds up (Redis's ceill), and anything
        // above -1 ms is 0 (forever).
        assert_eq!(parse_timeout(b"0.0001", 1000), Ok(1001));
        assert_eq!(parse_timeout(b"0.0015", 1000), Ok(1002));
        assert_eq!(parse_timeout(b"-0.0009", 1000), Ok(0));
        assert_eq!(parse_timeout(b"-0", 1000), Ok(0));
        // strtold syntax: hex floats.
        assert_eq!(parse_timeout(b"0x1", 1000), Ok(2000));
        assert_eq!(parse_timeout(b"0x1p-3", 0), Ok(125));
        let e = |m: &str| Err(CmdError::err(m));
        assert_eq!(parse_timeout(b"-0.0011", 0), e("timeout is negative"));
        assert_eq!(parse_timeout(b"-1", 0), e("timeout is negative"));
        // Past an f64, within a long double.
        assert_eq!(parse_timeout(b"1e999", 0), e("timeout is negative"));
        assert_eq!(parse_timeout(b"1e-400", 7), Ok(8));
        assert_eq!(parse_timeout(b"-1e-400", 7), Ok(0));
        // string2ld reads at most 5 KiB.
        let long = [&b"1"[..], &[b'0'; 5120]].concat();
        for bad in [&b" 1"[..], b"1 ", b"", b"nan", b"0x", &long] {
            assert_eq!(
                parse_timeout(bad, 0),
                e("timeout is not a float or out of range"),
                "{bad:?}"
            );
        }
        assert_eq!(
            parse_timeout(b"x", 0),
            e("timeout is not a float or out of range")
        );
        assert_eq!(parse_timeout(b"1e300", 5), e("timeout is negative"));
        assert_eq!(parse_timeout(b"1e16", 5), e("timeout is negative"));
        assert_eq!(parse_timeout(b"inf", 5), e("timeout is negative"));
    }
}
