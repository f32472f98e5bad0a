//! Parsing sorted-set arguments as Redis does: scores with
//! `getDoubleFromObject` (a port of C's `strtod`, which GEO and INCRBYFLOAT
//! share), score-range bounds with `zslParseRange`'s leniency
//! ([`ScoreRange`]), and the integer arguments with their exact error texts.

use engine::ZSet;

use crate::error::CmdError;

/// C's `strtod` on `s`: the value and the length of the longest prefix it
/// accepts (0 if none), and whether the result over- or underflowed
/// (`ERANGE`). Accepts leading whitespace, a sign, decimal and hex forms,
/// `inf`/`infinity` and `nan` in any case.
pub(crate) fn strtod(s: &[u8]) -> (f64, usize, bool) {
    let mut i = 0;
    while i < s.len() && matches!(s[i], b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
        i += 1;
    }
    let neg = i < s.len() && s[i] == b'-';
    if i < s.len() && (s[i] == b'-' || s[i] == b'+') {
        i += 1;
    }
    let sign = if neg { -1.0 } else { 1.0 };
    let rest = &s[i..];
    let starts =
        |w: &str| rest.len() >= w.len() && rest[..w.len()].eq_ignore_ascii_case(w.as_bytes());
    if starts("infinity") {
        return (sign * f64::INFINITY, i + 8, false);
    }
    if starts("inf") {
        return (sign * f64::INFINITY, i + 3, false);
    }
    if starts("nan") {
        let mut j = i + 3;
        if j < s.len() && s[j] == b'(' {
            let mut k = j + 1;
            while k < s.len() && (s[k].is_ascii_alphanumeric() || s[k] == b'_') {
                k += 1;
            }
            if k < s.len() && s[k] == b')' {
                j = k + 1;
            }
        }
        return (f64::NAN, j, false);
    }
    if rest.len() >= 2 && rest[0] == b'0' && (rest[1] | 0x20) == b'x' {
        if let Some((v, n)) = hex_float(&rest[2..]) {
            return (sign * v, i + 2 + n, v.is_infinite());
        }
        // "0x" alone: strtod takes the "0".
        return (0.0, i + 1, false);
    }
    let mut j = i;
    let mut digits = 0;
    let mut nonzero = false;
    while j < s.len() && s[j].is_ascii_digit() {
        nonzero |= s[j] != b'0';
        j += 1;
        digits += 1;
    }
    if j < s.len() && s[j] == b'.' {
        j += 1;
        while j < s.len() && s[j].is_ascii_digit() {
            nonzero |= s[j] != b'0';
            j += 1;
            digits += 1;
        }
    }
    if digits == 0 {
        return (0.0, 0, false);
    }
    if j < s.len() && (s[j] | 0x20) == b'e' {
        let mut k = j + 1;
        if k < s.len() && (s[k] == b'-' || s[k] == b'+') {
            k += 1;
        }
        let ds = k;
        while k < s.len() && s[k].is_ascii_digit() {
            k += 1;
        }
        if k > ds {
            j = k;
        }
    }
    // INVARIANT: s[i..j] is ASCII digits, '.', 'e' and signs only.
    let text = std::str::from_utf8(&s[i..j]).unwrap_or("0");
    let v: f64 = text.parse().unwrap_or(0.0);
    let erange = v.is_infinite() || (v == 0.0 && nonzero);
    (sign * v, j, erange)
}

/// The hex digits `[h*][.h*][p[+-]d+]` after "0x": value and length.
fn hex_float(s: &[u8]) -> Option<(f64, usize)> {
    let mut v = 0.0f64;
    let mut j = 0;
    let mut digits = 0;
    let mut scale = 0i32;
    while j < s.len() && s[j].is_ascii_hexdigit() {
        v = v * 16.0 + f64::from((s[j] as char).to_digit(16)?);
        j += 1;
        digits += 1;
    }
    if j < s.len() && s[j] == b'.' {
        j += 1;
        while j < s.len() && s[j].is_ascii_hexdigit() {
            v = v * 16.0 + f64::from((s[j] as char).to_digit(16)?);
            scale -= 4;
            j += 1;
            digits += 1;
        }
    }
    if digits == 0 {
        return None;
    }
    if j < s.len() && (s[j] | 0x20) == b'p' {
        let mut k = j + 1;
        let neg = k < s.len() && s[k] == b'-';
        if k < s.len() && (s[k] == b'-' || s[k] == b'+') {
            k += 1;
        }
        let ds = k;
        let mut e: i32 = 0;
        while k < s.len() && s[k].is_ascii_digit() {
            e = e.saturating_mul(10).saturating_add(i32::from(s[k] - b'0'));
            k += 1;
        }
        if k > ds {
            scale = scale.saturating_add(if neg { -e } else { e });
            j = k;
        }
    }
    Some((v * 2f64.powi(scale), j))
}

/// A score or weight as Redis's `getDoubleFromObject`: the whole argument
/// is a strtod number, not empty, no leading space, no overflow or
/// underflow to zero, not NaN.
pub(super) fn parse_double(arg: &[u8]) -> Option<f64> {
    if arg.is_empty() || arg[0].is_ascii_whitespace() || arg[0] == 0x0b {
        return None;
    }
    let (v, n, erange) = strtod(arg);
    if n != arg.len() || v.is_nan() || (erange && (v.is_infinite() || v == 0.0)) {
        return None;
    }
    Some(v)
}

pub(super) fn parse_score(arg: &[u8]) -> Result<f64, CmdError> {
    parse_double(arg).ok_or(CmdError::NotFloat)
}

/// One bound of a score range (`zslParseRange`): `(` makes it exclusive;
/// strtod must consume everything (an empty string is 0); NaN is refused.
fn parse_score_bound(arg: &[u8]) -> Option<(f64, bool)> {
    let (ex, body) = match arg.first() {
        Some(b'(') => (true, &arg[1..]),
        _ => (false, arg),
    };
    // Redis reads the argument as a C string: it ends at a NUL.
    let body = &body[..body.iter().position(|&c| c == 0).unwrap_or(body.len())];
    let (v, n, _) = strtod(body);
    if n != body.len() || v.is_nan() {
        return None;
    }
    Some((v, ex))
}

#[derive(Clone, Copy, Debug)]
pub(super) struct ScoreRange {
    min: f64,
    max: f64,
    minex: bool,
    maxex: bool,
}

impl ScoreRange {
    pub(super) fn parse(min: &[u8], max: &[u8]) -> Result<Self, CmdError> {
        let bad = || CmdError::err("min or max is not a float");
        let (min, minex) = parse_score_bound(min).ok_or_else(bad)?;
        let (max, maxex) = parse_score_bound(max).ok_or_else(bad)?;
        Ok(ScoreRange {
            min,
            max,
            minex,
            maxex,
        })
    }
    fn gte_min(&self, v: f64) -> bool {
        if self.minex {
            v > self.min
        } else {
            v >= self.min
        }
    }
    fn lte_max(&self, v: f64) -> bool {
        if self.maxex {
            v < self.max
        } else {
            v <= self.max
        }
    }
    /// Ascending ranks `[start, end)` of the members in range.
    pub(super) fn ranks(&self, z: &ZSet) -> (usize, usize) {
        let start = z.partition_point(|_, s| !self.gte_min(s));
        let end = z.partition_point(|_, s| self.lte_max(s));
        (start, end.max(start))
    }
}

/// Redis's `getRangeLongFromObjectOrReply` with a message used for both a
/// non-integer and an out-of-range value.
pub(super) fn parse_range_i64(arg: &[u8], min: i64, max: i64, msg: &str) -> Result<i64, CmdError> {
    match resp::string2ll(arg) {
        Some(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(CmdError::err(msg)),
    }
}

/// `getPositiveLongFromObjectOrReply` without a message.
pub(super) fn parse_positive(arg: &[u8]) -> Result<i64, CmdError> {
    parse_range_i64(arg, 0, i64::MAX, "value is out of range, must be positive")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strtod_like_c() {
        assert_eq!(strtod(b"1.5"), (1.5, 3, false));
        assert_eq!(strtod(b" -2e3x"), (-2000.0, 5, false));
        assert_eq!(strtod(b"0x10"), (16.0, 4, false));
        assert_eq!(strtod(b"0x1p-2"), (0.25, 6, false));
        assert_eq!(strtod(b"InFinity"), (f64::INFINITY, 8, false));
        assert_eq!(strtod(b"1e"), (1.0, 1, false));
        assert_eq!(strtod(b""), (0.0, 0, false));
        assert_eq!(strtod(b"."), (0.0, 0, false));
        assert!(strtod(b"1e400").2);
        assert!(strtod(b"1e-400").2);
        assert!(strtod(b"nan").0.is_nan());
        assert_eq!(parse_double(b"1e400"), None);
        assert_eq!(parse_double(b" 1"), None);
        assert_eq!(parse_double(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_score_bound(b""), Some((0.0, false)));
        assert_eq!(parse_score_bound(b"(1e400"), Some((f64::INFINITY, true)));
        assert_eq!(parse_score_bound(b"nan"), None);
    }
}
