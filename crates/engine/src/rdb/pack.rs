//! Redis's packed blobs as they appear inside RDB values: listpack (written
//! and read), and the legacy ziplist, zipmap and intset (read; intset also
//! written). Tessera's in-memory compact encodings use their own layouts
//! (see `ds::listpack`), so these are encoded and decoded here, at the
//! file-format boundary.
//!
//! Every decoder works on an untrusted byte slice: every length is checked
//! against what remains, structural invariants (total size, terminator,
//! element count) are verified, and a failure is a static reason string.

use ds::string2ll;

/// One decoded element of a packed blob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem<'a> {
    Str(&'a [u8]),
    Int(i64),
}

impl Elem<'_> {
    pub fn to_vec(self) -> Vec<u8> {
        match self {
            Elem::Str(s) => s.to_vec(),
            Elem::Int(n) => itoa::Buffer::new().format(n).as_bytes().to_vec(),
        }
    }
}

pub type PackResult<T> = Result<T, &'static str>;

// ---------------------------------------------------------------- listpack

const LP_HDR: usize = 6;
const LP_EOF: u8 = 0xFF;

/// Builds a Redis listpack (`listpack.c` byte layout) element by element.
pub struct LpWriter {
    buf: Vec<u8>,
    count: usize,
}

impl Default for LpWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl LpWriter {
    pub fn new() -> Self {
        LpWriter {
            buf: vec![0; LP_HDR],
            count: 0,
        }
    }

    /// Bytes the finished listpack will have.
    pub fn bytes(&self) -> usize {
        self.buf.len() + 1
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// Appends a string, stored as an integer when it is a canonical one
    /// (Redis's `lpStringToInt64`, which is `string2ll`).
    pub fn push(&mut self, s: &[u8]) {
        match (s.len() <= 20).then(|| string2ll(s)).flatten() {
            Some(n) => self.push_int(n),
            None => self.push_str(s),
        }
    }

    pub fn push_int(&mut self, v: i64) {
        lp_append_int(&mut self.buf, v);
        self.count += 1;
    }

    pub fn push_str(&mut self, s: &[u8]) {
        lp_append_str(&mut self.buf, s);
        self.count += 1;
    }

    /// The finished blob.
    pub fn finish(mut self) -> Vec<u8> {
        self.buf.push(LP_EOF);
        let total = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&total.to_le_bytes());
        let n = if self.count < 65535 {
            self.count as u16
        } else {
            65535
        };
        self.buf[4..6].copy_from_slice(&n.to_le_bytes());
        self.buf
    }
}

/// Appends one listpack entry (encoding, data, back-length) holding `v`,
/// as Redis's `lpAppendInteger`.
pub fn lp_append_int(b: &mut Vec<u8>, v: i64) {
    let start = b.len();
    if (0..=127).contains(&v) {
        b.push(v as u8);
    } else if (-4096..=4095).contains(&v) {
        let u = if v < 0 { (1i64 << 13) + v } else { v } as u16;
        b.push(((u >> 8) as u8) | 0xC0);
        b.push(u as u8);
    } else if (-32768..=32767).contains(&v) {
        b.push(0xF1);
        b.extend_from_slice(&(v as i16).to_le_bytes());
    } else if (-8_388_608..=8_388_607).contains(&v) {
        b.push(0xF2);
        b.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
    } else if (-2_147_483_648..=2_147_483_647).contains(&v) {
        b.push(0xF3);
        b.extend_from_slice(&(v as i32).to_le_bytes());
    } else {
        b.push(0xF4);
        b.extend_from_slice(&v.to_le_bytes());
    }
    let l = b.len() - start;
    encode_backlen(l, b);
}

/// Appends one listpack entry holding the string `s` as a string.
pub fn lp_append_str(b: &mut Vec<u8>, s: &[u8]) {
    let start = b.len();
    let len = s.len();
    if len < 64 {
        b.push(0x80 | len as u8);
    } else if len < 4096 {
        b.push(0xE0 | (len >> 8) as u8);
        b.push(len as u8);
    } else {
        b.push(0xF0);
        b.extend_from_slice(&(len as u32).to_le_bytes());
    }
    b.extend_from_slice(s);
    let l = b.len() - start;
    encode_backlen(l, b);
}

/// Appends `s` as Redis's `lpAppend`: an integer when it is a canonical one.
pub fn lp_append(b: &mut Vec<u8>, s: &[u8]) {
    match (s.len() <= 20).then(|| string2ll(s)).flatten() {
        Some(n) => lp_append_int(b, n),
        None => lp_append_str(b, s),
    }
}

/// Size in bytes of the listpack entry for `s` (encoding, data, back-length).
pub fn lp_entry_size(s: &[u8]) -> usize {
    let enc = match (s.len() <= 20).then(|| string2ll(s)).flatten() {
        Some(v) => match v {
            0..=127 => 1,
            -4096..=4095 => 2,
            -32768..=32767 => 3,
            -8_388_608..=8_388_607 => 4,
            -2_147_483_648..=2_147_483_647 => 5,
            _ => 9,
        },
        None => {
            let len = s.len();
            len + if len < 64 {
                1
            } else if len < 4096 {
                2
            } else {
                5
            }
        }
    };
    enc + backlen_size(enc)
}

fn backlen_size(l: usize) -> usize {
    if l <= 127 {
        1
    } else if l < 16383 {
        2
    } else if l < 2097151 {
        3
    } else if l < 268435455 {
        4
    } else {
        5
    }
}

fn encode_backlen(l: usize, out: &mut Vec<u8>) {
    match backlen_size(l) {
        1 => out.push(l as u8),
        2 => out.extend_from_slice(&[(l >> 7) as u8, (l & 127) as u8 | 128]),
        3 => out.extend_from_slice(&[
            (l >> 14) as u8,
            ((l >> 7) & 127) as u8 | 128,
            (l & 127) as u8 | 128,
        ]),
        4 => out.extend_from_slice(&[
            (l >> 21) as u8,
            ((l >> 14) & 127) as u8 | 128,
            ((l >> 7) & 127) as u8 | 128,
            (l & 127) as u8 | 128,
        ]),
        _ => out.extend_from_slice(&[
            (l >> 28) as u8,
            ((l >> 21) & 127) as u8 | 128,
            ((l >> 14) & 127) as u8 | 128,
            ((l >> 7) & 127) as u8 | 128,
            (l & 127) as u8 | 128,
        ]),
    }
}

fn take(b: &[u8], at: usize, n: usize) -> PackResult<&[u8]> {
    b.get(at..at.checked_add(n).ok_or("listpack entry overflows")?)
        .ok_or("packed entry runs past the end")
}

/// The element at `p` (which must be a valid index) and the length of
/// its encoding (without the back-length).
pub fn lp_elem(b: &[u8], p: usize) -> PackResult<(Elem<'_>, usize)> {
    let h = take(b, p, 1)?[0];
    Ok(match h {
        0x00..=0x7F => (Elem::Int(i64::from(h)), 1),
        0x80..=0xBF => {
            let n = usize::from(h & 0x3F);
            (Elem::Str(take(b, p + 1, n)?), 1 + n)
        }
        0xC0..=0xDF => {
            let lo = take(b, p + 1, 1)?[0];
            let u = (u16::from(h & 0x1F) << 8) | u16::from(lo);
            (Elem::Int(i64::from(((u << 3) as i16) >> 3)), 2)
        }
        0xE0..=0xEF => {
            let lo = take(b, p + 1, 1)?[0];
            let n = (usize::from(h & 0x0F) << 8) | usize::from(lo);
            (Elem::Str(take(b, p + 2, n)?), 2 + n)
        }
        0xF0 => {
            let l = take(b, p + 1, 4)?;
            let n = u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize;
            (Elem::Str(take(b, p + 5, n)?), 5 + n)
        }
        0xF1 => {
            let d = take(b, p + 1, 2)?;
            (Elem::Int(i64::from(i16::from_le_bytes([d[0], d[1]]))), 3)
        }
        0xF2 => {
            let d = take(b, p + 1, 3)?;
            let v = i32::from_le_bytes([0, d[0], d[1], d[2]]) >> 8;
            (Elem::Int(i64::from(v)), 4)
        }
        0xF3 => {
            let d = take(b, p + 1, 4)?;
            (
                Elem::Int(i64::from(i32::from_le_bytes([d[0], d[1], d[2], d[3]]))),
                5,
            )
        }
        0xF4 => {
            let d = take(b, p + 1, 8)?;
            let mut a = [0u8; 8];
            a.copy_from_slice(d);
            (Elem::Int(i64::from_le_bytes(a)), 9)
        }
        _ => return Err("listpack entry has an invalid encoding"),
    })
}

/// The size of the back-length after an encoding of `enc_len` bytes.
pub fn lp_backlen_size(enc_len: usize) -> usize {
    backlen_size(enc_len)
}

/// Decodes a whole listpack, checking its header, every entry (and its
/// back-length) and the terminator.
pub fn lp_decode(b: &[u8]) -> PackResult<Vec<Elem<'_>>> {
    if b.len() < LP_HDR + 1 {
        return Err("listpack too short");
    }
    let total = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
    if total != b.len() {
        return Err("listpack total size mismatch");
    }
    let count = u16::from_le_bytes([b[4], b[5]]);
    let mut out = Vec::with_capacity(usize::from(count).min(b.len()));
    let mut p = LP_HDR;
    loop {
        let &h = b.get(p).ok_or("listpack has no terminator")?;
        if h == LP_EOF {
            break;
        }
        let (e, enc_len) = lp_elem(b, p)?;
        let bl = backlen_size(enc_len);
        let mut want = Vec::with_capacity(5);
        encode_backlen(enc_len, &mut want);
        if take(b, p + enc_len, bl)? != &want[..] {
            return Err("listpack entry back-length mismatch");
        }
        p += enc_len + bl;
        out.push(e);
    }
    if p + 1 != b.len() {
        return Err("listpack terminator before the end");
    }
    if count != 65535 && usize::from(count) != out.len() {
        return Err("listpack element count mismatch");
    }
    Ok(out)
}

// ----------------------------------------------------------------- ziplist

/// Decodes a whole ziplist (`ziplist.c`, RDB types 10, 12, 13 and the
/// nodes of type 14).
pub fn zl_decode(b: &[u8]) -> PackResult<Vec<Elem<'_>>> {
    const HDR: usize = 10;
    if b.len() < HDR + 1 {
        return Err("ziplist too short");
    }
    let total = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
    if total != b.len() {
        return Err("ziplist total size mismatch");
    }
    let tail = u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as usize;
    if tail >= b.len() {
        return Err("ziplist tail offset out of range");
    }
    let count = u16::from_le_bytes([b[8], b[9]]);
    let mut out = Vec::with_capacity(usize::from(count).min(b.len()));
    let mut p = HDR;
    let mut prev_len = 0usize;
    loop {
        let &h = b.get(p).ok_or("ziplist has no terminator")?;
        if h == 0xFF {
            break;
        }
        let start = p;
        // prevlen: 1 byte below 254, else 0xFE + 4 bytes LE.
        let pl = if h < 254 {
            p += 1;
            usize::from(h)
        } else if h == 254 {
            let d = take(b, p + 1, 4)?;
            p += 5;
            u32::from_le_bytes([d[0], d[1], d[2], d[3]]) as usize
        } else {
            return Err("ziplist prevlen invalid");
        };
        if pl != prev_len {
            return Err("ziplist prevlen mismatch");
        }
        let &e = b.get(p).ok_or("ziplist entry truncated")?;
        let elem = match e >> 6 {
            0 => {
                let n = usize::from(e & 0x3F);
                p += 1;
                let s = take(b, p, n)?;
                p += n;
                Elem::Str(s)
            }
            1 => {
                let lo = take(b, p + 1, 1)?[0];
                let n = (usize::from(e & 0x3F) << 8) | usize::from(lo);
                p += 2;
                let s = take(b, p, n)?;
                p += n;
                Elem::Str(s)
            }
            2 => {
                if e != 0x80 {
                    return Err("ziplist string encoding invalid");
                }
                let d = take(b, p + 1, 4)?;
                let n = u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize;
                p += 5;
                let s = take(b, p, n)?;
                p += n;
                Elem::Str(s)
            }
            _ => {
                p += 1;
                let (v, n) = match e {
                    0xC0 => {
                        let d = take(b, p, 2)?;
                        (i64::from(i16::from_le_bytes([d[0], d[1]])), 2)
                    }
                    0xD0 => {
                        let d = take(b, p, 4)?;
                        (i64::from(i32::from_le_bytes([d[0], d[1], d[2], d[3]])), 4)
                    }
                    0xE0 => {
                        let d = take(b, p, 8)?;
                        let mut a = [0u8; 8];
                        a.copy_from_slice(d);
                        (i64::from_le_bytes(a), 8)
                    }
                    0xF0 => {
                        let d = take(b, p, 3)?;
                        (i64::from(i32::from_le_bytes([0, d[0], d[1], d[2]]) >> 8), 3)
                    }
                    0xFE => {
                        let d = take(b, p, 1)?;
                        (i64::from(d[0] as i8), 1)
                    }
                    0xF1..=0xFD => (i64::from(e & 0x0F) - 1, 0),
                    _ => return Err("ziplist integer encoding invalid"),
                };
                p += n;
                Elem::Int(v)
            }
        };
        prev_len = p - start;
        out.push(elem);
    }
    if p + 1 != b.len() {
        return Err("ziplist terminator before the end");
    }
    if count != u16::MAX && usize::from(count) != out.len() {
        return Err("ziplist element count mismatch");
    }
    Ok(out)
}

// ------------------------------------------------------------------ zipmap

/// Decodes a zipmap (RDB type 9, Redis < 2.6 small hashes) into
/// field, value, field, value ...
pub fn zipmap_decode(b: &[u8]) -> PackResult<Vec<&[u8]>> {
    fn len_at(b: &[u8], p: &mut usize) -> PackResult<Option<usize>> {
        let &h = b.get(*p).ok_or("zipmap truncated")?;
        match h {
            255 => Ok(None),
            254 => {
                let d = take(b, *p + 1, 4)?;
                *p += 5;
                Ok(Some(u32::from_le_bytes([d[0], d[1], d[2], d[3]]) as usize))
            }
            253 => Err("zipmap length invalid"),
            n => {
                *p += 1;
                Ok(Some(usize::from(n)))
            }
        }
    }
    if b.is_empty() {
        return Err("zipmap too short");
    }
    let mut p = 1; // zmlen: a hint only (254 = unknown)
    let mut out = Vec::new();
    while let Some(klen) = len_at(b, &mut p)? {
        out.push(take(b, p, klen)?);
        p += klen;
        let vlen = len_at(b, &mut p)?.ok_or("zipmap field without value")?;
        let free = usize::from(*b.get(p).ok_or("zipmap truncated")?);
        p += 1;
        out.push(take(b, p, vlen)?);
        p += vlen + free;
    }
    if p + 1 != b.len() {
        return Err("zipmap end marker before the end");
    }
    Ok(out)
}

// ------------------------------------------------------------------ intset

/// Decodes an intset blob (RDB type 11): members must be strictly
/// ascending (Redis's `intsetValidateIntegrity` with deep checks).
pub fn intset_decode(b: &[u8]) -> PackResult<Vec<i64>> {
    if b.len() < 8 {
        return Err("intset too short");
    }
    let enc = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
    if !matches!(enc, 2 | 4 | 8) {
        return Err("intset encoding invalid");
    }
    let n = u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as usize;
    if n.checked_mul(enc).and_then(|x| x.checked_add(8)) != Some(b.len()) {
        return Err("intset size mismatch");
    }
    let mut out = Vec::with_capacity(n);
    for c in b[8..].chunks_exact(enc) {
        let v = match enc {
            2 => i64::from(i16::from_le_bytes([c[0], c[1]])),
            4 => i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            _ => {
                let mut a = [0u8; 8];
                a.copy_from_slice(c);
                i64::from_le_bytes(a)
            }
        };
        if out.last().is_some_and(|&l| l >= v) {
            return Err("intset not sorted or has duplicates");
        }
        out.push(v);
    }
    if out.is_empty() {
        return Err("intset empty");
    }
    Ok(out)
}

/// Encodes sorted, distinct integers as an intset of `width` bytes (at
/// least the narrowest width holding them all).
pub fn intset_encode(vals: impl ExactSizeIterator<Item = i64> + Clone, width: usize) -> Vec<u8> {
    let need = vals
        .clone()
        .map(|v| {
            if i16::try_from(v).is_ok() {
                2
            } else if i32::try_from(v).is_ok() {
                4
            } else {
                8
            }
        })
        .max()
        .unwrap_or(2);
    let w = need.max(if matches!(width, 2 | 4 | 8) { width } else { 2 });
    let mut out = Vec::with_capacity(8 + vals.len() * w);
    out.extend_from_slice(&(w as u32).to_le_bytes());
    out.extend_from_slice(&(vals.len() as u32).to_le_bytes());
    for v in vals {
        out.extend_from_slice(&v.to_le_bytes()[..w]);
    }
    out
}

// ----------------------------------------------------------------- doubles

/// Redis 7.0's `d2string` (the scores in a zset listpack): the same text
/// as `%.17g` replies, so the one formatter serves both.
pub use ds::num::format_double as d2string;

/// Parses a score as Redis's `zzlStrtod` / `strtod`: decimal or
/// exponent notation, `inf`, `-inf`; NaN is refused.
pub fn parse_score(s: &[u8]) -> Option<f64> {
    let t = std::str::from_utf8(s).ok()?;
    let v: f64 = match t.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        _ => t.parse().ok()?,
    };
    (!v.is_nan()).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listpack_round_trip_all_encodings() {
        let items: Vec<Vec<u8>> = vec![
            b"0".to_vec(),
            b"127".to_vec(),
            b"128".to_vec(),
            b"-1".to_vec(),
            b"-4096".to_vec(),
            b"4095".to_vec(),
            b"4096".to_vec(),
            b"-32768".to_vec(),
            b"32768".to_vec(),
            b"8388607".to_vec(),
            b"-8388609".to_vec(),
            b"2147483647".to_vec(),
            b"2147483648".to_vec(),
            b"-9223372036854775808".to_vec(),
            b"".to_vec(),
            b"hello".to_vec(),
            b"007".to_vec(),
            vec![b'x'; 63],
            vec![b'x'; 64],
            vec![b'y'; 4095],
            vec![b'z'; 4096],
            vec![b'w'; 20000],
        ];
        let mut w = LpWriter::new();
        for i in &items {
            w.push(i);
        }
        let sizes: usize = items.iter().map(|i| lp_entry_size(i)).sum();
        assert_eq!(w.bytes(), LP_HDR + sizes + 1);
        let blob = w.finish();
        let got: Vec<Vec<u8>> = lp_decode(&blob)
            .unwrap()
            .into_iter()
            .map(Elem::to_vec)
            .collect();
        assert_eq!(got, items);
    }

    #[test]
    fn listpack_matches_redis_bytes() {
        // redis-cli DUMP of RPUSH l a 1 (Redis 7.0): type 18, 1 node,
        // container 2, then this listpack.
        let mut w = LpWriter::new();
        w.push(b"a");
        w.push(b"1");
        assert_eq!(
            w.finish(),
            [0x0c, 0, 0, 0, 0x02, 0, 0x81, b'a', 0x02, 0x01, 0x01, 0xff]
        );
    }

    #[test]
    fn listpack_rejects_corruption() {
        let mut w = LpWriter::new();
        w.push(b"abc");
        w.push(b"1000");
        let blob = w.finish();
        for i in 0..blob.len() {
            assert!(lp_decode(&blob[..i]).is_err());
        }
        let mut bad = blob.clone();
        bad[4] = 3; // count
        assert!(lp_decode(&bad).is_err());
        let mut bad = blob.clone();
        bad[6] = 0x8F; // string longer than the blob
        assert!(lp_decode(&bad).is_err());
    }

    #[test]
    fn ziplist_hand_written() {
        // zlbytes, zltail, zllen=4, entries: "ab", 12 (imm), -2 (int8),
        // 300 (int16), then 0xFF.
        let mut z = vec![0u8; 10];
        let entries: &[&[u8]] = &[
            &[0x00, 0x02, b'a', b'b'],
            &[0x04, 0xFD],             // prevlen 4, immediate 12
            &[0x02, 0xFE, 0xFE],       // int8 -2
            &[0x03, 0xC0, 0x2C, 0x01], // int16 300
        ];
        let mut tail = 0;
        for e in entries {
            tail = z.len();
            z.extend_from_slice(e);
        }
        z.push(0xFF);
        let n = z.len() as u32;
        z[0..4].copy_from_slice(&n.to_le_bytes());
        z[4..8].copy_from_slice(&(tail as u32).to_le_bytes());
        z[8..10].copy_from_slice(&4u16.to_le_bytes());
        let got = zl_decode(&z).unwrap();
        assert_eq!(
            got,
            vec![
                Elem::Str(b"ab"),
                Elem::Int(12),
                Elem::Int(-2),
                Elem::Int(300)
            ]
        );
        for i in 0..z.len() {
            assert!(zl_decode(&z[..i]).is_err());
        }
    }

    #[test]
    fn zipmap_hand_written() {
        // zmlen 2, "f" -> "vv" (1 free byte), "g" -> "" ; end.
        let z = [2, 1, b'f', 2, 1, b'v', b'v', 0, 1, b'g', 0, 0, 255];
        assert_eq!(
            zipmap_decode(&z).unwrap(),
            vec![&b"f"[..], b"vv", b"g", b""]
        );
        assert!(zipmap_decode(&z[..z.len() - 1]).is_err());
        assert!(zipmap_decode(&[1, 1, b'f', 255]).is_err());
    }

    #[test]
    fn intset_round_trip() {
        let v = [-5i64, 1, 70000];
        let b = intset_encode(v.iter().copied(), 2);
        assert_eq!(&b[..8], &[4, 0, 0, 0, 3, 0, 0, 0]);
        assert_eq!(intset_decode(&b).unwrap(), v);
        let b = intset_encode([1i64, 2].into_iter(), 8);
        assert_eq!(b.len(), 8 + 16);
        assert_eq!(intset_decode(&b).unwrap(), [1, 2]);
        assert!(intset_decode(&intset_encode([2i64, 1].into_iter(), 2)).is_err());
        assert!(intset_decode(&b[..b.len() - 1]).is_err());
    }

    #[test]
    fn d2string_as_redis_7_0() {
        assert_eq!(d2string(1.0), "1");
        assert_eq!(d2string(-3.0), "-3");
        assert_eq!(d2string(1.5), "1.5");
        assert_eq!(d2string(0.1), "0.10000000000000001");
        assert_eq!(d2string(-0.0), "-0");
        assert_eq!(d2string(f64::INFINITY), "inf");
        assert_eq!(d2string(1e20), "1e+20");
        assert_eq!(d2string(4503599627370496.0), "4503599627370496");
        assert_eq!(d2string(1.5e-7), "1.4999999999999999e-07");
        assert_eq!(parse_score(b"1.5"), Some(1.5));
        assert_eq!(parse_score(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_score(b"nan"), None);
        assert_eq!(parse_score(b"x"), None);
    }
}
