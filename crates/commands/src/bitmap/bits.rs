//! Bit arithmetic on byte strings, as Redis's `bitops.c` numbers bits:
//! bit 0 is the most significant bit of byte 0, bit 8 the most significant
//! of byte 1, and every byte past the end of the string reads as zero.
//!
//! These are pure functions on slices (no replies, no shard) so that every
//! edge the commands rely on (ranges that cut bytes, fields that straddle
//! the end of the string, overflow of a 63- or 64-bit field) is unit-tested
//! here. Redis reaches the same answers through word-at-a-time loops with
//! masked edge bytes; the results are defined bit by bit, which is what
//! these compute, with whole-byte fast paths in between (popcount and the
//! skip over `0x00`/`0xff` bytes vectorise).
//!
//! Bounds: positions are `u64` bit offsets; callers pass ranges already
//! clamped to the string (`count`, `position`) or offsets already checked
//! against `proto-max-bulk-len` (`set_field` writes into a buffer the
//! caller has grown to cover the field).

/// The bit at `bit` (0 or 1); 0 past the end.
#[inline]
pub fn get_bit(s: &[u8], bit: u64) -> u8 {
    match s.get((bit >> 3) as usize) {
        Some(b) => (b >> (7 - (bit & 7))) & 1,
        None => 0,
    }
}

/// Sets the bit at `bit` (which must be inside `s`) to `on`.
#[inline]
pub fn set_bit(s: &mut [u8], bit: u64, on: bool) {
    let mask = 1u8 << (7 - (bit & 7));
    let b = &mut s[(bit >> 3) as usize];
    if on {
        *b |= mask;
    } else {
        *b &= !mask;
    }
}

/// The number of set bits in the inclusive bit range `[first, last]`,
/// which must lie inside `s` (`last < 8 * s.len()`, `first <= last`).
pub fn count(s: &[u8], first: u64, last: u64) -> u64 {
    let (fb, lb) = ((first >> 3) as usize, (last >> 3) as usize);
    // Keep the range's bits of the edge bytes: the high bits from `first`
    // in the first byte, down to `last` in the last.
    let head = 0xffu8 >> (first & 7);
    let tail = 0xffu8 << (7 - (last & 7));
    if fb == lb {
        return u64::from((s[fb] & head & tail).count_ones());
    }
    let middle = popcount(&s[fb + 1..lb]);
    middle + u64::from((s[fb] & head).count_ones()) + u64::from((s[lb] & tail).count_ones())
}

/// Set bits in `s`, eight bytes at a time.
fn popcount(s: &[u8]) -> u64 {
    let words = s.chunks_exact(8);
    let rest: u64 = words
        .remainder()
        .iter()
        .map(|b| u64::from(b.count_ones()))
        .sum();
    words
        // INVARIANT: `chunks_exact(8)` yields 8-byte chunks.
        .map(|w| u64::from(u64::from_ne_bytes(w.try_into().expect("8 bytes")).count_ones()))
        .sum::<u64>()
        + rest
}

/// The index of the first byte of `s` that is not `skip`, skipping eight
/// equal bytes at a time (long runs of 0x00 or 0xff are the common case).
fn first_other(s: &[u8], skip: u8) -> Option<usize> {
    let word = u64::from_ne_bytes([skip; 8]);
    let mut i = 0;
    for w in s.chunks_exact(8) {
        // INVARIANT: `chunks_exact(8)` yields 8-byte chunks.
        if u64::from_ne_bytes(w.try_into().expect("8 bytes")) != word {
            break;
        }
        i += 8;
    }
    s[i..].iter().position(|&b| b != skip).map(|p| i + p)
}

/// The position of the first bit equal to `bit` in the inclusive range
/// `[first, last]` (inside `s`), or `None`.
pub fn position(s: &[u8], bit: bool, first: u64, last: u64) -> Option<u64> {
    // Flip the bytes when looking for a 0, so the search is always for a 1.
    let flip = if bit { 0u8 } else { 0xff };
    let (fb, lb) = ((first >> 3) as usize, (last >> 3) as usize);
    let head = 0xffu8 >> (first & 7);
    let tail = 0xffu8 << (7 - (last & 7));
    let at = |i: usize, byte: u8| (i as u64) * 8 + u64::from(byte.leading_zeros());
    if fb == lb {
        let b = (s[fb] ^ flip) & head & tail;
        return (b != 0).then(|| at(fb, b));
    }
    let b = (s[fb] ^ flip) & head;
    if b != 0 {
        return Some(at(fb, b));
    }
    if let Some(i) = first_other(&s[fb + 1..lb], flip) {
        let i = fb + 1 + i;
        return Some(at(i, s[i] ^ flip));
    }
    let b = (s[lb] ^ flip) & tail;
    (b != 0).then(|| at(lb, b))
}

/// The `bits`-wide (1..=64) unsigned field at bit `offset`, zero-padded
/// past the end of `s` (Redis's `getUnsignedBitfield`).
pub fn get_unsigned(s: &[u8], offset: u64, bits: u32) -> u64 {
    let mut v = 0u64;
    for j in 0..u64::from(bits) {
        v = (v << 1) | u64::from(get_bit(s, offset + j));
    }
    v
}

/// The `bits`-wide (1..=64) two's-complement field at bit `offset`
/// (Redis's `getSignedBitfield`).
pub fn get_signed(s: &[u8], offset: u64, bits: u32) -> i64 {
    let v = get_unsigned(s, offset, bits);
    if bits < 64 && v & (1 << (bits - 1)) != 0 {
        (v | (u64::MAX << bits)) as i64
    } else {
        v as i64
    }
}

/// Writes the low `bits` bits of `v` at bit `offset`; `s` must cover the
/// field (Redis's `setUnsignedBitfield`; a signed value is written as its
/// two's complement).
pub fn set_field(s: &mut [u8], offset: u64, bits: u32, v: u64) {
    for j in 0..u64::from(bits) {
        let on = v & (1 << (u64::from(bits) - 1 - j)) != 0;
        set_bit(s, offset + j, on);
    }
}

/// BITFIELD's OVERFLOW behaviours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    Wrap,
    Sat,
    Fail,
}

/// The value to store for an unsigned field of `bits` (1..=63) holding
/// `value` after adding `incr` (`incr` 0 for SET, where `value` is the
/// argument as `u64`, so a negative one is huge): `Some(v)`, or `None`
/// when the result does not fit and the behaviour is FAIL. Redis's
/// `checkUnsignedBitfieldOverflow`, including its quirks: SAT clamps a
/// negative SET value to the maximum (it arrives as a huge unsigned).
pub fn unsigned_result(value: u64, incr: i64, bits: u32, ow: Overflow) -> Option<u64> {
    let max = (1u64 << bits) - 1;
    // As Redis computes them: in 64-bit two's complement.
    let max_incr = max.wrapping_sub(value) as i64;
    let min_incr = 0u64.wrapping_sub(value) as i64;
    let over = value > max || (incr > 0 && incr > max_incr);
    let under = !over && incr < 0 && incr < min_incr;
    let wrapped = value.wrapping_add(incr as u64) & max;
    match (over || under, ow) {
        (false, _) => Some(wrapped),
        (true, Overflow::Wrap) => Some(wrapped),
        (true, Overflow::Sat) => Some(if over { max } else { 0 }),
        (true, Overflow::Fail) => None,
    }
}

/// [`unsigned_result`] for a signed field of `bits` (1..=64): Redis's
/// `checkSignedBitfieldOverflow`, wrapping towards the most negative
/// value.
pub fn signed_result(value: i64, incr: i64, bits: u32, ow: Overflow) -> Option<i64> {
    let max = if bits == 64 {
        i64::MAX
    } else {
        (1i64 << (bits - 1)) - 1
    };
    let min = -max - 1;
    // Both may wrap, as in Redis; they are only used once `value` is known
    // to be in range, where they do not.
    let max_incr = (max as u64).wrapping_sub(value as u64) as i64;
    let min_incr = min.wrapping_sub(value);
    let over = value > max
        || (bits != 64 && incr > max_incr)
        || (value >= 0 && incr > 0 && incr > max_incr);
    let under = !over
        && (value < min
            || (bits != 64 && incr < min_incr)
            || (value < 0 && incr < 0 && incr < min_incr));
    let mut c = (value as u64).wrapping_add(incr as u64);
    if bits < 64 {
        let mask = u64::MAX << bits;
        if c & (1 << (bits - 1)) != 0 {
            c |= mask;
        } else {
            c &= !mask;
        }
    }
    match (over || under, ow) {
        (false, _) | (true, Overflow::Wrap) => Some(c as i64),
        (true, Overflow::Sat) => Some(if over { max } else { min }),
        (true, Overflow::Fail) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference: one bit at a time.
    fn naive_count(s: &[u8], first: u64, last: u64) -> u64 {
        (first..=last).map(|b| u64::from(get_bit(s, b))).sum()
    }

    fn naive_position(s: &[u8], bit: bool, first: u64, last: u64) -> Option<u64> {
        (first..=last).find(|&b| get_bit(s, b) == u8::from(bit))
    }

    #[test]
    fn bits_are_numbered_from_the_most_significant() {
        let s = [0b1000_0001u8, 0b0100_0000];
        assert_eq!(get_bit(&s, 0), 1);
        assert_eq!(get_bit(&s, 7), 1);
        assert_eq!(get_bit(&s, 9), 1);
        assert_eq!(get_bit(&s, 8), 0);
        assert_eq!(get_bit(&s, 16), 0, "past the end reads 0");
        assert_eq!(get_bit(&s, u64::MAX), 0);
        let mut t = [0u8; 2];
        set_bit(&mut t, 15, true);
        set_bit(&mut t, 1, true);
        assert_eq!(t, [0x40, 0x01]);
        set_bit(&mut t, 1, false);
        assert_eq!(t, [0, 1]);
    }

    #[test]
    fn count_and_position_agree_with_bit_by_bit_on_every_range() {
        // Runs of 0x00 and 0xff longer than a word, so the eight-byte
        // paths are taken, and short mixed stretches around them.
        let s = b"\x00\xff\x5a\x00\x00\x81\xff\xff\x01\
                  \xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f\
                  \x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x10\xa5";
        let n = s.len() as u64 * 8;
        for first in 0..n {
            for last in first..n {
                assert_eq!(count(s, first, last), naive_count(s, first, last));
                for bit in [false, true] {
                    assert_eq!(
                        position(s, bit, first, last),
                        naive_position(s, bit, first, last),
                        "{bit} {first} {last}"
                    );
                }
            }
        }
    }

    #[test]
    fn position_over_long_runs() {
        let mut s = vec![0xffu8; 1000];
        assert_eq!(position(&s, false, 0, 7999), None);
        assert_eq!(position(&s, true, 3, 7999), Some(3));
        s[700] = 0xfe;
        assert_eq!(position(&s, false, 0, 7999), Some(5607));
        assert_eq!(position(&s, false, 0, 5606), None);
        let z = vec![0u8; 1000];
        assert_eq!(position(&z, true, 0, 7999), None);
        assert_eq!(count(&z, 0, 7999), 0);
        assert_eq!(count(&s, 0, 7999), 7999);
    }

    #[test]
    fn fields_straddle_bytes_and_the_end() {
        // Redis's example: u5 = 23 at offset 7 into zeroes.
        let mut s = [0u8; 2];
        set_field(&mut s, 7, 5, 23);
        assert_eq!(s, [0b0000_0001, 0b0111_0000]);
        assert_eq!(get_unsigned(&s, 7, 5), 23);
        assert_eq!(get_signed(&s, 7, 5), -9);
        // Past the end: zero padding.
        assert_eq!(get_unsigned(&s, 12, 8), 0);
        assert_eq!(get_unsigned(&s, 9, 8), 0b1110_0000);
        let mut w = [0u8; 9];
        set_field(&mut w, 3, 64, (-2i64) as u64);
        assert_eq!(get_signed(&w, 3, 64), -2);
        assert_eq!(get_unsigned(&w, 3, 63), u64::MAX >> 1);
        set_field(&mut w, 0, 63, 1 << 62);
        assert_eq!(get_unsigned(&w, 0, 63), 1 << 62);
    }

    #[test]
    fn unsigned_overflow() {
        use Overflow::*;
        assert_eq!(unsigned_result(250, 10, 8, Wrap), Some(4));
        assert_eq!(unsigned_result(250, 10, 8, Sat), Some(255));
        assert_eq!(unsigned_result(250, 10, 8, Fail), None);
        assert_eq!(unsigned_result(5, -6, 8, Wrap), Some(255));
        assert_eq!(unsigned_result(5, -6, 8, Sat), Some(0));
        assert_eq!(unsigned_result(5, -5, 8, Fail), Some(0));
        // SET of a negative value: a huge unsigned, so an overflow.
        assert_eq!(unsigned_result(-1i64 as u64, 0, 8, Wrap), Some(255));
        assert_eq!(unsigned_result(-1i64 as u64, 0, 8, Sat), Some(255));
        assert_eq!(unsigned_result(256, 0, 8, Wrap), Some(0));
        let max63 = u64::MAX >> 1;
        assert_eq!(unsigned_result(max63, 1, 63, Wrap), Some(0));
        assert_eq!(unsigned_result(0, i64::MIN, 63, Sat), Some(0));
        assert_eq!(unsigned_result(0, i64::MAX, 63, Fail), Some(max63));
    }

    #[test]
    fn signed_overflow() {
        use Overflow::*;
        assert_eq!(signed_result(120, 10, 8, Wrap), Some(-126));
        assert_eq!(signed_result(120, 10, 8, Sat), Some(127));
        assert_eq!(signed_result(-120, -10, 8, Sat), Some(-128));
        assert_eq!(signed_result(-120, -10, 8, Wrap), Some(126));
        assert_eq!(signed_result(-120, -10, 8, Fail), None);
        assert_eq!(signed_result(200, 0, 8, Wrap), Some(-56));
        assert_eq!(signed_result(200, 0, 8, Sat), Some(127));
        assert_eq!(signed_result(-1, 0, 1, Fail), Some(-1));
        assert_eq!(signed_result(1, 0, 1, Sat), Some(0));
        assert_eq!(signed_result(i64::MAX, 1, 64, Wrap), Some(i64::MIN));
        assert_eq!(signed_result(i64::MAX, 1, 64, Sat), Some(i64::MAX));
        assert_eq!(signed_result(i64::MIN, -1, 64, Sat), Some(i64::MIN));
        assert_eq!(signed_result(i64::MIN, -1, 64, Fail), None);
        assert_eq!(signed_result(i64::MIN, i64::MAX, 64, Fail), Some(-1));
        assert_eq!(signed_result(-5, i64::MAX, 64, Fail), Some(i64::MAX - 5));
    }
}
