//! Redis's strict integer parsing (`string2ll` in util.c), shared by the
//! protocol parser (`*<count>`, `$<len>`), the engine (is a string value an
//! integer?), commands (every integer argument) and the config table, so
//! all of them accept exactly the inputs Redis accepts; and Redis's `%.17g`
//! formatting of doubles, shared by replies and the RDB writer.

/// A strict base-10 `i64`: no `+`, no leading zeros, no blanks, no `-0`, no
/// overflow, at most 20 bytes.
pub fn string2ll(s: &[u8]) -> Option<i64> {
    // LONG_STR_SIZE: anything longer cannot be a long long.
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (negative, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    if !matches!(digits.first(), Some(b'1'..=b'9')) {
        return None;
    }
    let mut mag: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        mag = mag.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    if negative {
        0i64.checked_sub_unsigned(mag)
    } else {
        i64::try_from(mag).ok()
    }
}

// ----------------------------------------------------------------- doubles
//
// Redis prints doubles with `%.17g` (replies, and `d2string` for the
// scores of a zset listpack in RDB files: the same text for every value).

/// `d` as an integer when `%.17g` prints it as one digit for digit:
/// integral and below 2^53 in magnitude (all such values are exact, and
/// have at most 16 digits). Not -0, which prints as `-0`.
#[inline]
pub fn small_integral(d: f64) -> Option<i64> {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    (d.fract() == 0.0 && d.abs() < EXACT && !(d == 0.0 && d.is_sign_negative())).then_some(d as i64)
}

/// Formats `d` as C's `printf("%.17g")` does, with Redis's spelling of
/// infinities (`inf`, `-inf`) and `nan`.
pub fn format_double(d: f64) -> String {
    if d.is_nan() {
        return "nan".into();
    }
    if d.is_infinite() {
        return if d > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if d == 0.0 {
        return if d.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    if let Some(n) = small_integral(d) {
        return itoa::Buffer::new().format(n).to_string();
    }
    format_double_exact(d)
}

/// `%.17g` of a finite non-zero `d` through exact decimal expansion (the
/// slow path of [`format_double`]; public so callers can test the fast
/// path against it).
pub fn format_double_exact(d: f64) -> String {
    const P: i32 = 17;
    // Rust's `{:e}` rounds exactly, as glibc does: 17 significant digits.
    let e = format!("{:.*e}", (P - 1) as usize, d.abs());
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: Vec<u8> = mant.bytes().filter(|c| c.is_ascii_digit()).collect();
    let mut out = String::with_capacity(24);
    if d < 0.0 {
        out.push('-');
    }
    if !(-4..P).contains(&exp) {
        let frac = trim_zeros(&digits[1..]);
        out.push(char::from(digits[0]));
        if !frac.is_empty() {
            out.push('.');
            out.push_str(std::str::from_utf8(frac).unwrap_or(""));
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        let a = exp.unsigned_abs();
        if a < 10 {
            out.push('0');
        }
        out.push_str(&a.to_string());
    } else if exp >= 0 {
        let int_len = exp as usize + 1;
        out.push_str(std::str::from_utf8(&digits[..int_len]).unwrap_or(""));
        let frac = trim_zeros(&digits[int_len..]);
        if !frac.is_empty() {
            out.push('.');
            out.push_str(std::str::from_utf8(frac).unwrap_or(""));
        }
    } else {
        out.push_str("0.");
        for _ in 0..(-exp - 1) {
            out.push('0');
        }
        out.push_str(std::str::from_utf8(trim_zeros(&digits)).unwrap_or(""));
    }
    out
}

fn trim_zeros(s: &[u8]) -> &[u8] {
    let end = s.iter().rposition(|&c| c != b'0').map_or(0, |i| i + 1);
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::string2ll;

    #[test]
    fn strict_like_redis() {
        assert_eq!(string2ll(b"0"), Some(0));
        assert_eq!(string2ll(b"-1"), Some(-1));
        assert_eq!(string2ll(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(string2ll(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"01",
            b"-0",
            b"+1",
            b" 1",
            b"1 ",
            b"9223372036854775808",
            b"1a",
        ] {
            assert_eq!(string2ll(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    proptest::proptest! {
        #[test]
        fn round_trips_display(n in proptest::num::i64::ANY) {
            proptest::prop_assert_eq!(string2ll(n.to_string().as_bytes()), Some(n));
        }
    }
}
