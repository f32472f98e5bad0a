//! HyperLogLog sketches in Redis's exact byte layout (`hyperloglog.c`).
//!
//! An HLL is an ordinary string value, so its bytes are its format: `GET`
//! must return what Redis returns for the same PFADDs, DUMP/RESTORE and
//! RDB carry it unchanged, and a sketch written by Redis must count the
//! same here. Everything below therefore works on the string's bytes
//! (`&[u8]` / `&mut Vec<u8>`) rather than on a parsed structure: parsing
//! into a register array and re-encoding would be simpler but could not
//! reproduce the byte sequences Redis's in-place sparse updates produce
//! (its opcode splits and its bounded merge of neighbours are not a
//! canonical encoding).
//!
//! Layout (16-byte header, then the registers):
//!
//! ```text
//! "HYLL" | encoding (0 dense, 1 sparse) | 3 unused | cached cardinality
//!                                                    (u64 little endian,
//!                                                    MSB set = stale)
//! ```
//!
//! * dense: 16384 registers of 6 bits, packed from each byte's LSB up
//!   (12288 bytes; a dense HLL is exactly [`DENSE_SIZE`] bytes long);
//! * sparse: run-length opcodes, `00xxxxxx` ZERO (1..=64 zero registers),
//!   `01xxxxxx yyyyyyyy` XZERO (1..=16384 zeros), `1vvvvvxx` VAL (1..=4
//!   registers of value 1..=32). A sparse HLL is promoted to dense when a
//!   register needs a value above 32 or an update would make the string
//!   longer than `hll-sparse-max-bytes`.
//!
//! Elements hash with MurmurHash64A (seed `0xadc83b19`): the low 14 bits
//! pick the register, the position of the first set bit above them is the
//! candidate value. The count is Ertl's improved estimator, as Redis 7.0.
//!
//! Corrupted sketches (anyone can SETRANGE into the string) are reported
//! as [`Corrupt`] exactly where Redis reports `INVALIDOBJ`, and never
//! panic: reads past the end of the string see a zero byte, as Redis's
//! reads of the sds terminator do. Any opcode that runs past the last
//! register makes a sparse body invalid when it is converted, counted or
//! merged: the bounds of the CVE-2025-32023 fix, which the reference
//! Redis 7.0.15 build (Debian's) and every later Redis carry; the
//! unpatched 7.0.15 accepted a VAL overrunning the end in a conversion or
//! a merge. This module knows nothing of replies.

/// Bytes of the header.
pub const HDR_SIZE: usize = 16;
/// Bits of the hash that index the register.
pub const P: u32 = 14;
/// Bits of the hash left to count the run of zeros in.
pub const Q: u32 = 64 - P;
/// Number of registers.
pub const REGISTERS: usize = 1 << P;
/// Bits per dense register.
const BITS: usize = 6;
const REGISTER_MAX: u8 = (1 << BITS) - 1;
/// Length of a dense HLL string.
pub const DENSE_SIZE: usize = HDR_SIZE + (REGISTERS * BITS).div_ceil(8);
/// Encoding byte of a dense HLL.
pub const DENSE: u8 = 0;
/// Encoding byte of a sparse HLL.
pub const SPARSE: u8 = 1;
/// Default of `hll-sparse-max-bytes`.
pub const SPARSE_MAX_BYTES_DEFAULT: usize = 3000;
/// Seed of the element hash.
const SEED: u64 = 0xadc8_3b19;

const XZERO_BIT: u8 = 0x40;
const VAL_BIT: u8 = 0x80;
const VAL_MAX_VALUE: u8 = 32;
const VAL_MAX_LEN: usize = 4;
const ZERO_MAX_LEN: usize = 64;
const XZERO_MAX_LEN: usize = 16384;
/// 0.5 / ln(2).
const ALPHA_INF: f64 = 0.721_347_520_444_481_7;

/// The sketch is not a valid HLL (Redis's `INVALIDOBJ`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt;

/// A register histogram: how many registers hold each value.
pub type Histogram = [u64; 64];

/// MurmurHash2, 64-bit version, reading blocks little endian (Redis's
/// endian-neutral variant).
pub fn murmur64a(data: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (data.len() as u64).wrapping_mul(M);
    let mut blocks = data.chunks_exact(8);
    for b in &mut blocks {
        // INVARIANT: chunks_exact yields 8-byte slices.
        let mut k = u64::from_le_bytes(b.try_into().expect("8 bytes"));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate() {
            h ^= u64::from(b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// The register an element maps to and the value it proposes (the length
/// of the `000..1` pattern above the index bits, 1..=Q+1).
pub fn pat_len(ele: &[u8]) -> (usize, u8) {
    let hash = murmur64a(ele, SEED);
    let index = (hash & (REGISTERS as u64 - 1)) as usize;
    // The sentinel bit bounds the run at Q+1.
    let rest = (hash >> P) | (1u64 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

/// Redis's `isHLLObjectOrReply` on the string's bytes: the magic, a known
/// encoding, and the exact length of a dense sketch. A sparse body is only
/// checked when it is walked.
pub fn is_valid(b: &[u8]) -> bool {
    b.len() >= HDR_SIZE
        && &b[..4] == b"HYLL"
        && b[4] <= SPARSE
        && (b[4] != DENSE || b.len() == DENSE_SIZE)
}

/// An empty sketch, sparse (Redis's `createHLLObject`): one XZERO covering
/// every register, cached cardinality 0.
pub fn new_sparse() -> Vec<u8> {
    let mut v = Vec::with_capacity(HDR_SIZE + 2);
    v.extend_from_slice(b"HYLL");
    v.push(SPARSE);
    v.extend_from_slice(&[0; 11]);
    let mut left = REGISTERS;
    while left > 0 {
        let n = left.min(XZERO_MAX_LEN);
        push_xzero(&mut v, n);
        left -= n;
    }
    v
}

/// The encoding byte (check [`is_valid`] first).
#[inline]
pub fn encoding(b: &[u8]) -> u8 {
    b[4]
}

/// The cached cardinality, if valid.
pub fn cached(b: &[u8]) -> Option<u64> {
    // INVARIANT: callers checked is_valid (at least HDR_SIZE bytes).
    let card = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
    (b[15] & 0x80 == 0).then_some(card)
}

/// Stores `card` as the cached cardinality. A value with its top bit set
/// (possible only from a degenerate sketch) reads back as stale, as in
/// Redis.
pub fn set_cached(b: &mut [u8], card: u64) {
    b[8..16].copy_from_slice(&card.to_le_bytes());
}

/// Marks the cached cardinality stale.
#[inline]
pub fn invalidate(b: &mut [u8]) {
    b[15] |= 0x80;
}

// ---------------------------------------------------------------------------
// Dense registers

/// Register `i` of a dense register array. The last register's second
/// byte lies past the array, where Redis reads the sds terminator (0).
#[inline]
pub fn dense_get(regs: &[u8], i: usize) -> u8 {
    let bit = i * BITS;
    let (byte, fb) = (bit / 8, bit % 8);
    let b0 = u16::from(regs[byte]);
    let b1 = u16::from(regs.get(byte + 1).copied().unwrap_or(0));
    (((b0 >> fb) | (b1 << (8 - fb))) as u8) & REGISTER_MAX
}

/// Sets register `i` of a dense register array to `v` (at most 63).
#[inline]
pub fn dense_set(regs: &mut [u8], i: usize, v: u8) {
    let bit = i * BITS;
    let (byte, fb) = (bit / 8, bit % 8);
    let v = u16::from(v & REGISTER_MAX);
    let mask = u16::from(REGISTER_MAX);
    regs[byte] = ((u16::from(regs[byte]) & !(mask << fb)) | (v << fb)) as u8;
    if let Some(b1) = regs.get_mut(byte + 1) {
        let fb8 = 8 - fb;
        *b1 = ((u16::from(*b1) & !(mask >> fb8)) | (v >> fb8)) as u8;
    }
}

/// Raises register `i` to `v`; true if it changed (`hllDenseSet`).
#[inline]
fn dense_raise(regs: &mut [u8], i: usize, v: u8) -> bool {
    if v > dense_get(regs, i) {
        dense_set(regs, i, v);
        true
    } else {
        false
    }
}

// ---------------------------------------------------------------------------
// Sparse opcodes

/// One decoded opcode: its length in bytes, registers covered, value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Op {
    bytes: usize,
    span: usize,
    /// 0 for ZERO and XZERO.
    value: u8,
}

#[inline]
fn is_zero(op: u8) -> bool {
    op & 0xc0 == 0
}
#[inline]
fn is_xzero(op: u8) -> bool {
    op & 0xc0 == XZERO_BIT
}
#[inline]
fn is_val(op: u8) -> bool {
    op & VAL_BIT != 0
}

/// Decodes the opcode at `p` (which must be in `b`); an XZERO cut short by
/// the end of the string reads its second byte as 0.
#[inline]
fn op_at(b: &[u8], p: usize) -> Op {
    let op = b[p];
    if is_zero(op) {
        Op {
            bytes: 1,
            span: usize::from(op & 0x3f) + 1,
            value: 0,
        }
    } else if is_val(op) {
        Op {
            bytes: 1,
            span: usize::from(op & 0x3) + 1,
            value: ((op >> 2) & 0x1f) + 1,
        }
    } else {
        let lo = b.get(p + 1).copied().unwrap_or(0);
        Op {
            bytes: 2,
            span: ((usize::from(op & 0x3f) << 8) | usize::from(lo)) + 1,
            value: 0,
        }
    }
}

#[inline]
fn val_op(value: u8, len: usize) -> u8 {
    ((value - 1) << 2) | (len as u8 - 1) | VAL_BIT
}

/// Where opcodes are written: a sketch, or [`Ops5`].
trait PushByte {
    fn push(&mut self, x: u8);
}

impl PushByte for Vec<u8> {
    fn push(&mut self, x: u8) {
        Vec::push(self, x);
    }
}

/// The at most five opcode bytes of a sparse split (XZERO-VAL-XZERO), on
/// the stack: PFADD makes one per changed register.
struct Ops5 {
    b: [u8; 5],
    n: usize,
}

impl PushByte for Ops5 {
    fn push(&mut self, x: u8) {
        self.b[self.n] = x;
        self.n += 1;
    }
}

fn push_xzero(v: &mut impl PushByte, len: usize) {
    let l = len - 1;
    v.push((l >> 8) as u8 | XZERO_BIT);
    v.push((l & 0xff) as u8);
}

/// Appends the opcode(s) for a run of `len` zeros (1..=16384): ZERO when
/// it fits, XZERO otherwise.
fn push_zeros(v: &mut impl PushByte, len: usize) {
    if len > ZERO_MAX_LEN {
        push_xzero(v, len);
    } else {
        v.push((len - 1) as u8);
    }
}

/// Converts a sparse sketch to dense in place (`hllSparseToDense`); the
/// header (cached cardinality included) is kept. A dense sketch is left
/// alone.
pub fn to_dense(b: &mut Vec<u8>) -> Result<(), Corrupt> {
    if encoding(b) == DENSE {
        return Ok(());
    }
    let mut dense = vec![0u8; DENSE_SIZE];
    dense[..HDR_SIZE].copy_from_slice(&b[..HDR_SIZE]);
    dense[4] = DENSE;
    let regs = &mut dense[HDR_SIZE..];
    let mut idx = 0usize;
    let mut p = HDR_SIZE;
    while p < b.len() {
        let op = op_at(b, p);
        if idx + op.span > REGISTERS {
            return Err(Corrupt);
        }
        for r in idx..idx + op.span {
            if op.value != 0 {
                dense_set(regs, r, op.value);
            }
        }
        idx += op.span;
        p += op.bytes;
    }
    if idx != REGISTERS {
        return Err(Corrupt);
    }
    *b = dense;
    Ok(())
}

/// Raises register `index` of a sparse sketch to `count` in place
/// (`hllSparseSet`), promoting it to dense when `count` exceeds what VAL
/// can hold or the update would grow the string past `sparse_max_bytes`.
/// True if a register changed; the cached cardinality is invalidated then
/// (when it stayed sparse: a promotion keeps the header as it was).
fn sparse_set(
    b: &mut Vec<u8>,
    index: usize,
    count: u8,
    sparse_max_bytes: usize,
) -> Result<bool, Corrupt> {
    if count > VAL_MAX_VALUE {
        return promote(b, index, count);
    }
    // Step 1: find the opcode covering `index`. Spans only (the value is
    // decoded once, for the opcode found): this loop is most of a sparse
    // PFADD's time (perf: 58 % of a pipelined PFADD run's samples).
    let end = b.len();
    let body = &b[..end];
    let mut p = HDR_SIZE;
    let mut first = 0usize;
    let mut prev = None;
    loop {
        let Some(&o) = body.get(p) else {
            return Err(Corrupt);
        };
        let (span, bytes) = if o & VAL_BIT != 0 {
            (usize::from(o & 0x3) + 1, 1)
        } else if o & 0xc0 == 0 {
            (usize::from(o & 0x3f) + 1, 1)
        } else {
            let lo = body.get(p + 1).copied().unwrap_or(0);
            (((usize::from(o & 0x3f) << 8) | usize::from(lo)) + 1, 2)
        };
        if index < first + span {
            break;
        }
        prev = Some(p);
        p += bytes;
        first += span;
    }
    let op = op_at(b, p);
    let zeros = op.value == 0;

    // Step 2: the trivial updates in place, else the split.
    if !zeros && op.value >= count {
        return Ok(false);
    }
    if op.span == 1 && (!zeros || op.bytes == 1) {
        // A VAL or a ZERO of one register becomes a VAL of one.
        b[p] = val_op(count, 1);
    } else {
        // At most XZERO-VAL-XZERO: five bytes.
        let mut seq = Ops5 { b: [0; 5], n: 0 };
        let last = first + op.span - 1;
        if zeros {
            if index != first {
                push_zeros(&mut seq, index - first);
            }
            seq.push(val_op(count, 1));
            if index != last {
                push_zeros(&mut seq, last - index);
            }
        } else {
            if index != first {
                seq.push(val_op(op.value, index - first));
            }
            seq.push(val_op(count, 1));
            if index != last {
                seq.push(val_op(op.value, last - index));
            }
        }
        // Step 3: replace the old opcode with the sequence.
        let grow = seq.n as isize - op.bytes as isize;
        if grow > 0 && end + grow as usize > sparse_max_bytes {
            return promote(b, index, count);
        }
        let new_len = (end as isize + grow) as usize;
        b.splice(p..(p + op.bytes).min(end), seq.b[..seq.n].iter().copied());
        // An XZERO cut by the end of the string counted two bytes: Redis's
        // length moves by the difference all the same.
        b.truncate(new_len);
    }

    // Step 4: merge adjacent VALs of equal value, scanning at most five
    // opcodes from the one before the change.
    let mut p = prev.unwrap_or(HDR_SIZE);
    let mut scan = 5;
    while p < b.len() && scan > 0 {
        scan -= 1;
        let op = b[p];
        if is_xzero(op) {
            p += 2;
            continue;
        }
        if is_zero(op) {
            p += 1;
            continue;
        }
        if p + 1 < b.len() && is_val(b[p + 1]) {
            let (a, c) = (op_at(b, p), op_at(b, p + 1));
            let len = a.span + c.span;
            if a.value == c.value && len <= VAL_MAX_LEN {
                b[p + 1] = val_op(a.value, len);
                b.remove(p);
                // Try the merged opcode with its right neighbour too.
                continue;
            }
        }
        p += 1;
    }
    invalidate(b);
    Ok(true)
}

/// The promotion path of `hllSparseSet`: to dense, then the dense update
/// (which must change a register: the sparse walk found it lower).
fn promote(b: &mut Vec<u8>, index: usize, count: u8) -> Result<bool, Corrupt> {
    to_dense(b)?;
    Ok(dense_raise(&mut b[HDR_SIZE..], index, count))
}

/// Raises register `index` to `count` in either encoding; true if it
/// changed. See [`add`].
pub fn set_register(
    b: &mut Vec<u8>,
    index: usize,
    count: u8,
    sparse_max_bytes: usize,
) -> Result<bool, Corrupt> {
    match encoding(b) {
        DENSE => Ok(dense_raise(&mut b[HDR_SIZE..], index, count)),
        SPARSE => sparse_set(b, index, count, sparse_max_bytes),
        _ => Err(Corrupt),
    }
}

/// Adds one element (`hllAdd`): true if a register changed. A dense update
/// leaves the cached cardinality to the caller (PFADD invalidates it once
/// at the end, as Redis); a sparse one invalidates it itself.
pub fn add(b: &mut Vec<u8>, ele: &[u8], sparse_max_bytes: usize) -> Result<bool, Corrupt> {
    let (index, count) = pat_len(ele);
    set_register(b, index, count, sparse_max_bytes)
}

// ---------------------------------------------------------------------------
// Counting and merging

/// The register histogram of a valid sketch; `Corrupt` for a sparse body
/// that does not cover exactly [`REGISTERS`] registers.
pub fn histogram(b: &[u8]) -> Result<Histogram, Corrupt> {
    let mut h = [0u64; 64];
    let regs = &b[HDR_SIZE..];
    if encoding(b) == DENSE {
        // A group of 3 bytes at a time, as `merge_into`.
        for g in regs[..DENSE_SIZE - HDR_SIZE].chunks_exact(3) {
            let w = u32::from(g[0]) | (u32::from(g[1]) << 8) | (u32::from(g[2]) << 16);
            for k in 0..4 {
                h[((w >> (BITS * k)) & 63) as usize] += 1;
            }
        }
        return Ok(h);
    }
    let mut idx = 0usize;
    let mut p = HDR_SIZE;
    while p < b.len() {
        let op = op_at(b, p);
        if idx + op.span > REGISTERS {
            return Err(Corrupt);
        }
        idx += op.span;
        h[usize::from(op.value)] += op.span as u64;
        p += op.bytes;
    }
    if idx != REGISTERS {
        return Err(Corrupt);
    }
    Ok(h)
}

/// The histogram of a one-byte-per-register array (a merge result).
pub fn histogram_raw(regs: &[u8; REGISTERS]) -> Histogram {
    let mut h = [0u64; 64];
    for &r in regs.iter() {
        h[usize::from(r & 63)] += 1;
    }
    h
}

/// Ertl's sigma ("New cardinality estimation algorithms for HyperLogLog
/// sketches", arXiv:1702.01284), iterated to a fixed point as Redis does.
fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let mut y = 1.0;
    let mut z = x;
    loop {
        x *= x;
        let z_prev = z;
        z += x * y;
        y += y;
        if z_prev == z {
            return z;
        }
    }
}

/// Ertl's tau (same paper).
fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let mut y = 1.0;
    let mut z = 1.0 - x;
    loop {
        x = x.sqrt();
        let z_prev = z;
        y *= 0.5;
        // Redis writes pow(1 - x, 2), which compilers fold to a product.
        let d = 1.0 - x;
        z -= d * d * y;
        if z_prev == z {
            return z / 3.0;
        }
    }
}

/// The estimated cardinality from a register histogram (Redis's
/// `hllCount`, same operations in the same order, so the same doubles).
pub fn estimate(h: &Histogram) -> u64 {
    let m = REGISTERS as f64;
    let mut z = m * tau((m - h[Q as usize + 1] as f64) / m);
    for j in (1..=Q as usize).rev() {
        z += h[j] as f64;
        z *= 0.5;
    }
    z += m * sigma(h[0] as f64 / m);
    let e = (ALPHA_INF * m * m / z).round();
    // llroundl of a value outside long long (a degenerate sketch of huge
    // registers) yields LLONG_MIN, which Redis then casts to uint64.
    let two63 = 2f64.powi(63);
    let ll = if (-two63..two63).contains(&e) {
        e as i64
    } else {
        i64::MIN
    };
    ll as u64
}

/// The estimated cardinality of a valid sketch (the cache not consulted).
pub fn count(b: &[u8]) -> Result<u64, Corrupt> {
    histogram(b).map(|h| estimate(&h))
}

/// Merges a valid sketch into `max` (`max[i] = max(max[i], reg[i])`,
/// Redis's `hllMerge`); `Corrupt` for an invalid sparse body.
pub fn merge_into(max: &mut [u8; REGISTERS], b: &[u8]) -> Result<(), Corrupt> {
    if encoding(b) == DENSE {
        // Four 6-bit registers in every 3 bytes (12288 bytes: no partial
        // group), unpacked a group at a time rather than one `dense_get`
        // per register: PFCOUNT of several dense keys spends its time
        // here.
        let regs = &b[HDR_SIZE..DENSE_SIZE];
        for (g, m) in regs.chunks_exact(3).zip(max.chunks_exact_mut(4)) {
            let w = u32::from(g[0]) | (u32::from(g[1]) << 8) | (u32::from(g[2]) << 16);
            for (k, m) in m.iter_mut().enumerate() {
                *m = (*m).max(((w >> (BITS * k)) & 63) as u8);
            }
        }
        return Ok(());
    }
    let mut i = 0usize;
    let mut p = HDR_SIZE;
    while p < b.len() {
        let op = op_at(b, p);
        if i + op.span > REGISTERS {
            return Err(Corrupt);
        }
        for m in &mut max[i..i + op.span] {
            if op.value > *m {
                *m = op.value;
            }
        }
        i += op.span;
        p += op.bytes;
    }
    if i != REGISTERS {
        return Err(Corrupt);
    }
    Ok(())
}

/// The opcodes of a sparse body as PFDEBUG DECODE prints them
/// (`z:len`, `Z:len`, `v:value,len`, space separated).
pub fn decode_sparse(b: &[u8]) -> String {
    let mut s = String::new();
    let mut p = HDR_SIZE;
    while p < b.len() {
        let op = op_at(b, p);
        if !s.is_empty() {
            s.push(' ');
        }
        let _ = match (op.value, op.bytes) {
            (0, 1) => std::fmt::Write::write_fmt(&mut s, format_args!("z:{}", op.span)),
            (0, _) => std::fmt::Write::write_fmt(&mut s, format_args!("Z:{}", op.span)),
            (v, _) => std::fmt::Write::write_fmt(&mut s, format_args!("v:{},{}", v, op.span)),
        };
        p += op.bytes;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// Adds `e0 .. e{n-1}` one at a time, as `PFADD k eI` n times.
    fn filled(n: usize, max: usize) -> Vec<u8> {
        let mut h = new_sparse();
        for i in 0..n {
            if add(&mut h, format!("e{i}").as_bytes(), max).unwrap() {
                invalidate(&mut h);
            }
        }
        h
    }

    #[test]
    fn register_index_and_value_match_redis() {
        // From real Redis 7.0.15: PFADD t <e>; PFDEBUG DECODE t.
        for (e, idx, val) in [
            (&b"a"[..], 12711, 2),
            (b"b", 15780, 1),
            (b"foo", 7348, 5),
            (b"", 5938, 2),
            (b"hello", 9216, 1),
            (b"12345678", 10579, 3),
            (b"123456789", 9293, 2),
        ] {
            assert_eq!(pat_len(e), (idx, val), "{e:?}");
        }
    }

    #[test]
    fn empty_sketch_layout() {
        let h = new_sparse();
        assert_eq!(hex(&h), "48594c4c0100000000000000000000007fff");
        assert!(is_valid(&h));
        assert_eq!(cached(&h), Some(0));
        assert_eq!(count(&h), Ok(0));
        assert_eq!(decode_sparse(&h), "Z:16384");
    }

    #[test]
    fn sparse_bytes_match_redis() {
        // Redis: PFADD t a b c; GET t.
        let mut h = new_sparse();
        for e in [&b"a"[..], b"b", b"c"] {
            add(&mut h, e, 3000).unwrap();
        }
        invalidate(&mut h);
        assert_eq!(
            hex(&h),
            "48594c4c01000000000000000000008060f3805\
             0b1844bfb80425a"
                .replace(char::is_whitespace, "")
        );
        // Redis: PFADD c10 e0 .. e9 one by one, then PFCOUNT c10.
        let mut h = filled(10, 3000);
        assert_eq!(count(&h), Ok(10));
        set_cached(&mut h, 10);
        assert_eq!(
            hex(&h),
            "48594c4c010000000a00000000000000452580472e844fc9804412844a51\
             84430d844103844eb984408880406a8441b1"
        );
        assert_eq!(
            decode_sparse(&h),
            "Z:1318 v:1,1 Z:1839 v:2,1 Z:4042 v:1,1 Z:1043 v:2,1 Z:2642 v:2,1 \
             Z:782 v:2,1 Z:260 v:2,1 Z:3770 v:2,1 Z:137 v:1,1 Z:107 v:2,1 Z:434"
        );
    }

    #[test]
    fn estimates_and_encodings_match_redis() {
        // (n, PFCOUNT, encoding, STRLEN) from Redis 7.0.15 with the
        // default hll-sparse-max-bytes.
        for (n, card, enc, len) in [
            (1, 1, SPARSE, 21),
            (10, 10, SPARSE, 48),
            (100, 100, SPARSE, 285),
            (1000, 1008, SPARSE, 1906),
            (3000, 2979, DENSE, DENSE_SIZE),
            (10000, 9973, DENSE, DENSE_SIZE),
            (100_000, 100_853, DENSE, DENSE_SIZE),
        ] {
            let h = filled(n, 3000);
            assert_eq!((encoding(&h), h.len()), (enc, len), "n={n}");
            assert_eq!(count(&h), Ok(card), "n={n}");
        }
    }

    #[test]
    fn sparse_and_dense_agree() {
        for n in [0, 1, 5, 50, 500, 1500] {
            let s = filled(n, usize::MAX);
            assert_eq!(encoding(&s), SPARSE);
            let mut d = s.clone();
            to_dense(&mut d).unwrap();
            assert_eq!(d.len(), DENSE_SIZE);
            assert_eq!(histogram(&s), histogram(&d), "n={n}");
            let mut a = [0u8; REGISTERS];
            let mut b = [0u8; REGISTERS];
            merge_into(&mut a, &s).unwrap();
            merge_into(&mut b, &d).unwrap();
            assert_eq!(a, b);
            for (i, &v) in a.iter().enumerate() {
                assert_eq!(dense_get(&d[HDR_SIZE..], i), v);
            }
            assert_eq!(estimate(&histogram_raw(&a)), count(&s).unwrap());
        }
    }

    #[test]
    fn dense_merge_and_histogram_read_every_register() {
        let mut d = new_sparse();
        to_dense(&mut d).unwrap();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x & 63) as u8
        };
        for i in 0..REGISTERS {
            dense_set(&mut d[HDR_SIZE..], i, next());
        }
        let mut max = [0u8; REGISTERS];
        max.iter_mut().for_each(|m| *m = next());
        let before = max;
        merge_into(&mut max, &d).unwrap();
        let mut want = [0u64; 64];
        for i in 0..REGISTERS {
            let r = dense_get(&d[HDR_SIZE..], i);
            assert_eq!(max[i], before[i].max(r), "register {i}");
            want[usize::from(r)] += 1;
        }
        assert_eq!(histogram(&d).unwrap(), want);
    }

    #[test]
    fn dense_registers_do_not_disturb_neighbours() {
        let mut regs = vec![0u8; DENSE_SIZE - HDR_SIZE];
        let mut model = vec![0u8; REGISTERS];
        let mut x = 0x1234_5678_9abc_def0u64;
        for _ in 0..5 {
            for (i, m) in model.iter_mut().enumerate() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *m = (x & 63) as u8;
                dense_set(&mut regs, i, *m);
            }
            for (i, &v) in model.iter().enumerate() {
                assert_eq!(dense_get(&regs, i), v, "register {i}");
            }
        }
    }

    #[test]
    fn big_values_promote_to_dense() {
        let mut h = new_sparse();
        assert_eq!(set_register(&mut h, 100, 32, 3000), Ok(true));
        assert_eq!(encoding(&h), SPARSE);
        assert_eq!(set_register(&mut h, 100, 33, 3000), Ok(true));
        assert_eq!(encoding(&h), DENSE);
        assert_eq!(dense_get(&h[HDR_SIZE..], 100), 33);
        assert_eq!(set_register(&mut h, 100, 20, 3000), Ok(false));
        // The last register lives in the last byte alone.
        assert_eq!(set_register(&mut h, REGISTERS - 1, 63, 3000), Ok(true));
        assert_eq!(dense_get(&h[HDR_SIZE..], REGISTERS - 1), 63);
    }

    #[test]
    fn adjacent_values_merge() {
        let mut h = new_sparse();
        for i in 10..14 {
            set_register(&mut h, i, 3, 3000).unwrap();
        }
        assert_eq!(decode_sparse(&h), "z:10 v:3,4 Z:16370");
        set_register(&mut h, 14, 3, 3000).unwrap();
        assert_eq!(decode_sparse(&h), "z:10 v:3,4 v:3,1 Z:16369");
        set_register(&mut h, 11, 5, 3000).unwrap();
        // The split's right part merges with its right neighbour.
        assert_eq!(decode_sparse(&h), "z:10 v:3,1 v:5,1 v:3,3 Z:16369");
        // A zero run of one register becomes a VAL in place.
        set_register(&mut h, 16, 1, 3000).unwrap();
        set_register(&mut h, 15, 1, 3000).unwrap();
        assert_eq!(count(&h).map(|_| ()), Ok(()));
    }

    #[test]
    fn corrupted_sketches_are_reported() {
        let mut h = new_sparse();
        // XZERO:16383: one register short.
        h[17] = 0xfe;
        assert_eq!(count(&h), Err(Corrupt));
        assert_eq!(merge_into(&mut [0; REGISTERS], &h), Err(Corrupt));
        assert_eq!(set_register(&mut h.clone(), 16383, 1, 3000), Err(Corrupt));
        assert_eq!(to_dense(&mut h.clone()), Err(Corrupt));
        // Within the covered part an update still works, as in Redis.
        assert_eq!(set_register(&mut h, 5, 1, 3000), Ok(true));
        // An XZERO cut by the end of the string reads a zero byte.
        let mut h = new_sparse();
        h.pop();
        assert_eq!(decode_sparse(&h), "Z:16129");
        assert_eq!(count(&h), Err(Corrupt));
        assert_eq!(set_register(&mut h, 0, 1, 3000), Ok(true));
        // Runs past the last register.
        let mut h = new_sparse();
        h.extend_from_slice(&[0x80, 0x80]);
        assert_eq!(count(&h), Err(Corrupt));
        assert_eq!(to_dense(&mut h.clone()), Err(Corrupt));
        assert_eq!(merge_into(&mut [0; REGISTERS], &h), Err(Corrupt));
        h.truncate(h.len() - 2);
        h.push(0);
        assert_eq!(to_dense(&mut h), Err(Corrupt));
        // Headers.
        assert!(!is_valid(b"HYLL"));
        assert!(!is_valid(b"HYLX\x01\0\0\0\0\0\0\0\0\0\0\0\x7f\xff"));
        assert!(!is_valid(b"HYLL\x02\0\0\0\0\0\0\0\0\0\0\0\x7f\xff"));
        assert!(!is_valid(b"HYLL\x00\0\0\0\0\0\0\0\0\0\0\0\x7f\xff"));
        assert!(is_valid(b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\0"));
    }

    #[test]
    fn degenerate_estimates() {
        // Every register at 50: the estimate overflows long long and comes
        // out as Redis's cast of LLONG_MIN.
        let mut h = [0u64; 64];
        h[50] = REGISTERS as u64;
        assert_eq!(estimate(&h), 1 << 63);
        h[50] = 0;
        h[51] = REGISTERS as u64;
        assert_eq!(estimate(&h), 1 << 63);
    }
}
