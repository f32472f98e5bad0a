//! Reply encoding for RESP2 and RESP3.
//!
//! A [`Reply`] is an append-only byte buffer plus the protocol the client
//! speaks. Every method emits the shape Redis 7 uses for that protocol:
//! `null()` is `$-1` in RESP2 and `_` in RESP3, `map(n)` is `*2n` or `%n`,
//! `double()` is a bulk string or `,`, and so on, so a command handler
//! writes one sequence of calls for both protocols.

use ds::num::{format_double, small_integral};

/// An append-only reply buffer for one client protocol.
#[derive(Debug, Default, Clone)]
pub struct Reply {
    buf: Vec<u8>,
    resp3: bool,
}

impl Reply {
    pub fn new(resp3: bool) -> Self {
        Reply {
            buf: Vec::new(),
            resp3,
        }
    }
    /// A reply that appends to `buf` (reusing its allocation).
    pub fn from_vec(buf: Vec<u8>, resp3: bool) -> Self {
        Reply { buf, resp3 }
    }
    pub fn with_capacity(resp3: bool, cap: usize) -> Self {
        Reply {
            buf: Vec::with_capacity(cap),
            resp3,
        }
    }
    #[inline]
    pub fn resp3(&self) -> bool {
        self.resp3
    }
    pub fn set_resp3(&mut self, resp3: bool) {
        self.resp3 = resp3;
    }
    #[inline]
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    /// Bytes allocated for the buffer (memory accounting).
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }
    pub fn buf_mut(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }
    /// Drops everything written from `len` on (used to undo a partial reply).
    pub fn truncate(&mut self, len: usize) {
        self.buf.truncate(len);
    }
    pub fn clear(&mut self) {
        self.buf.clear();
    }
    /// Appends already-encoded reply bytes.
    #[inline]
    pub fn raw(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    #[inline]
    fn header(&mut self, tag: u8, n: i64) {
        // `:0`, `:1`, `$5`, `*2`...: most headers are one digit; one copy
        // of four bytes instead of formatting and three appends.
        if (0..10).contains(&n) {
            self.buf
                .extend_from_slice(&[tag, b'0' + n as u8, b'\r', b'\n']);
            return;
        }
        let mut b = itoa::Buffer::new();
        let s = b.format(n);
        self.buf.reserve(s.len() + 3);
        self.buf.push(tag);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }

    #[inline]
    pub fn ok(&mut self) {
        self.buf.extend_from_slice(b"+OK\r\n");
    }
    /// `+status`; `s` must not contain CR or LF.
    pub fn simple(&mut self, s: &str) {
        self.buf.push(b'+');
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }
    /// `-ERR ...`: `msg` is the whole line without the `-` (it starts with
    /// the error code). Line breaks become spaces, as Redis does.
    pub fn error(&mut self, msg: &str) {
        self.error_bytes(msg.as_bytes());
    }
    /// [`Reply::error`] for a line that echoes client bytes as they are.
    pub fn error_bytes(&mut self, msg: &[u8]) {
        self.buf.push(b'-');
        self.buf.extend(
            msg.iter()
                .map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c }),
        );
        self.buf.extend_from_slice(b"\r\n");
    }
    #[inline]
    pub fn int(&mut self, n: i64) {
        self.header(b':', n);
    }
    #[inline]
    pub fn bulk(&mut self, s: &[u8]) {
        self.header(b'$', s.len() as i64);
        self.buf.extend_from_slice(s);
        self.buf.extend_from_slice(b"\r\n");
    }
    /// An integer sent as a bulk string (`$2\r\n42\r\n`).
    pub fn bulk_int(&mut self, n: i64) {
        let mut b = itoa::Buffer::new();
        self.bulk(b.format(n).as_bytes());
    }
    /// Null bulk string: `$-1` (RESP2), `_` (RESP3).
    #[inline]
    pub fn null(&mut self) {
        if self.resp3 {
            self.buf.extend_from_slice(b"_\r\n");
        } else {
            self.buf.extend_from_slice(b"$-1\r\n");
        }
    }
    /// Null array: `*-1` (RESP2), `_` (RESP3).
    pub fn null_array(&mut self) {
        if self.resp3 {
            self.buf.extend_from_slice(b"_\r\n");
        } else {
            self.buf.extend_from_slice(b"*-1\r\n");
        }
    }
    pub fn optional_bulk(&mut self, s: Option<&[u8]>) {
        match s {
            Some(s) => self.bulk(s),
            None => self.null(),
        }
    }
    #[inline]
    pub fn array(&mut self, n: usize) {
        self.header(b'*', n as i64);
    }
    /// A map of `n` pairs: `%n` (RESP3) or a flat array of `2n` (RESP2).
    pub fn map(&mut self, n: usize) {
        if self.resp3 {
            self.header(b'%', n as i64);
        } else {
            self.header(b'*', 2 * n as i64);
        }
    }
    /// A set: `~n` (RESP3) or an array (RESP2).
    pub fn set(&mut self, n: usize) {
        self.header(if self.resp3 { b'~' } else { b'*' }, n as i64);
    }
    /// A push message: `>n` (RESP3) or an array (RESP2).
    pub fn push(&mut self, n: usize) {
        self.header(if self.resp3 { b'>' } else { b'*' }, n as i64);
    }
    /// A boolean: `#t`/`#f` (RESP3) or `:1`/`:0` (RESP2).
    pub fn boolean(&mut self, b: bool) {
        if self.resp3 {
            self.buf
                .extend_from_slice(if b { b"#t\r\n" } else { b"#f\r\n" });
        } else {
            self.int(i64::from(b));
        }
    }
    /// A double formatted as Redis 7.0's `addReplyDouble` (`%.17g`): a `,`
    /// reply in RESP3, a bulk string in RESP2.
    pub fn double(&mut self, d: f64) {
        if let Some(n) = small_integral(d) {
            // The common case (integer scores): no float formatting.
            let mut b = itoa::Buffer::new();
            let s = b.format(n);
            if self.resp3 {
                self.buf.push(b',');
                self.buf.extend_from_slice(s.as_bytes());
                self.buf.extend_from_slice(b"\r\n");
            } else {
                self.bulk(s.as_bytes());
            }
            return;
        }
        let s = format_double(d);
        if self.resp3 {
            self.buf.push(b',');
            self.buf.extend_from_slice(s.as_bytes());
            self.buf.extend_from_slice(b"\r\n");
        } else {
            self.bulk(s.as_bytes());
        }
    }
    /// A verbatim string (`=len\r\ntxt:...`) in RESP3, a bulk string in
    /// RESP2. `format` is three bytes, e.g. `txt`.
    pub fn verbatim(&mut self, format: &str, s: &[u8]) {
        if self.resp3 {
            self.header(b'=', (s.len() + 4) as i64);
            self.buf.extend_from_slice(format.as_bytes());
            self.buf.push(b':');
            self.buf.extend_from_slice(s);
            self.buf.extend_from_slice(b"\r\n");
        } else {
            self.bulk(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ds::num::format_double_exact;

    fn both(f: impl Fn(&mut Reply)) -> (String, String) {
        let mut r2 = Reply::new(false);
        let mut r3 = Reply::new(true);
        f(&mut r2);
        f(&mut r3);
        (
            String::from_utf8(r2.into_bytes()).unwrap(),
            String::from_utf8(r3.into_bytes()).unwrap(),
        )
    }

    #[test]
    fn shapes() {
        assert_eq!(both(|r| r.ok()), ("+OK\r\n".into(), "+OK\r\n".into()));
        assert_eq!(both(|r| r.int(-42)).0, ":-42\r\n");
        // The one-digit fast path and its edges.
        for n in [-1i64, 0, 1, 9, 10, 99, i64::MIN, i64::MAX] {
            assert_eq!(both(|r| r.int(n)).0, format!(":{n}\r\n"));
        }
        assert_eq!(both(|r| r.bulk(b"hi")).0, "$2\r\nhi\r\n");
        assert_eq!(both(|r| r.bulk(b"")).0, "$0\r\n\r\n");
        assert_eq!(both(|r| r.null()), ("$-1\r\n".into(), "_\r\n".into()));
        assert_eq!(both(|r| r.null_array()), ("*-1\r\n".into(), "_\r\n".into()));
        assert_eq!(both(|r| r.map(2)), ("*4\r\n".into(), "%2\r\n".into()));
        assert_eq!(both(|r| r.set(3)), ("*3\r\n".into(), "~3\r\n".into()));
        assert_eq!(
            both(|r| r.boolean(true)),
            (":1\r\n".into(), "#t\r\n".into())
        );
        assert_eq!(
            both(|r| r.double(1.5)),
            ("$3\r\n1.5\r\n".into(), ",1.5\r\n".into())
        );
        assert_eq!(
            both(|r| r.verbatim("txt", b"ab")),
            ("$2\r\nab\r\n".into(), "=6\r\ntxt:ab\r\n".into())
        );
        assert_eq!(both(|r| r.error("ERR a\r\nb")).0, "-ERR a  b\r\n");
    }

    #[test]
    fn doubles_as_printf_g17() {
        let cases: &[(f64, &str)] = &[
            (1.0, "1"),
            (-1.0, "-1"),
            (0.1, "0.10000000000000001"),
            (1.5, "1.5"),
            (3.0e-5, "3.0000000000000001e-05"),
            (0.0001, "0.0001"),
            (1e17, "1e+17"),
            (1e16, "10000000000000000"),
            (123456789.125, "123456789.125"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (-0.0, "-0"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (5e-324, "4.9406564584124654e-324"),
            (2.5, "2.5"),
        ];
        for (d, want) in cases {
            assert_eq!(format_double(*d), *want, "{d}");
        }
    }

    #[test]
    fn the_integer_fast_path_prints_what_printf_prints() {
        let edge = 9_007_199_254_740_991.0f64; // 2^53 - 1
        let mut vals = vec![
            1.0,
            -1.0,
            7.0,
            1e15,
            123456789.0,
            edge,
            -edge,
            2f64.powi(52),
        ];
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            vals.push((x % (1 << 53)) as f64 * if x & 1 == 0 { 1.0 } else { -1.0 });
        }
        for d in vals {
            assert!(small_integral(d).is_some(), "{d}");
            assert_eq!(format_double(d), format_double_exact(d), "{d}");
            let mut fast = Reply::new(false);
            fast.double(d);
            let mut slow = Reply::new(false);
            slow.bulk(format_double_exact(d).as_bytes());
            assert_eq!(fast.as_bytes(), slow.as_bytes());
        }
        assert_eq!(small_integral(-0.0), None);
        assert_eq!(small_integral(9_007_199_254_740_992.0), None);
        assert_eq!(small_integral(0.5), None);
    }
}
