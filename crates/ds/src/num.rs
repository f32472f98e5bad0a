//! Redis's strict integer parsing (`string2ll` in util.c), shared by the
//! protocol parser (`*<count>`, `$<len>`), the engine (is a string value an
//! integer?), commands (every integer argument) and the config table, so
//! all of them accept exactly the inputs Redis accepts.

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
