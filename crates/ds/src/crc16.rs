//! CRC16 and Redis Cluster key hash slots.
//!
//! Owns: the CRC16-XMODEM checksum (polynomial 0x1021, initial value 0, no
//! reflection, no final xor) that Redis Cluster uses to map keys to its 16384
//! slots, and the `{hashtag}` rule of `keyHashSlot` in Redis's `cluster.c`.
//!
//! Invariants: `key_hash_slot` always returns a value below [`SLOTS`]; the
//! hashtag rule matches Redis byte for byte, because clients compute slots
//! themselves and any disagreement means endless `-MOVED` redirections.
//!
//! Why sixteen tables and one step per chunk of up to 16 bytes: the slot is
//! computed for every key of every command once there are several shards
//! (Redis outside cluster mode computes none), so it is pure overhead on the
//! single-key path. The `crc` crate's `Table<16>` used before walks 16-byte
//! chunks but falls back to one dependent table load per byte for the rest,
//! so a typical 15-byte key (`bm:000000000123`) took every byte the slow
//! way: about 250 instructions per SETBIT under callgrind, 6 % of the
//! server's. Here table `T[j]` holds a byte's effect followed by `j` zero
//! bytes, so any chunk of `k` <= 16 bytes folds in with `k` independent
//! loads (the CRC's top and bottom bytes xored into its first two bytes),
//! and only a lone last byte takes the byte-at-a-time step. The tables
//! (8 KiB) are built at compile time. A carry-less multiply (PCLMULQDQ)
//! fold was not taken: it pays off on kilobytes, not on keys of 10-40
//! bytes, and needs a CPU-feature check. The bitwise definition stays as
//! the test oracle.

/// Number of hash slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// CRC16-XMODEM's polynomial.
const POLY: u16 = 0x1021;

/// `TABLES[j][b]`: the CRC register after byte `b` then `j` zero bytes,
/// from a zero register.
static TABLES: [[u16; 256]; 16] = tables();

const fn tables() -> [[u16; 256]; 16] {
    let mut t = [[0u16; 256]; 16];
    let mut b = 0;
    while b < 256 {
        let mut crc = (b as u16) << 8;
        let mut i = 0;
        while i < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ POLY
            } else {
                crc << 1
            };
            i += 1;
        }
        t[0][b] = crc;
        b += 1;
    }
    let mut j = 1;
    while j < 16 {
        let mut b = 0;
        while b < 256 {
            let prev = t[j - 1][b];
            t[j][b] = (prev << 8) ^ t[0][(prev >> 8) as usize];
            b += 1;
        }
        j += 1;
    }
    t
}

/// Folds an `N`-byte chunk (2 <= N <= 16) into `crc` in one step: the
/// register's high and low bytes enter with the first two bytes, and every
/// byte's effect is one load from the table of its distance to the end
/// (`N` is a constant: the loop unrolls and no index is checked).
#[inline(always)]
fn fold<const N: usize>(crc: u16, chunk: &[u8; N]) -> u16 {
    let mut x = TABLES[N - 1][usize::from(chunk[0] ^ (crc >> 8) as u8)]
        ^ TABLES[N - 2][usize::from(chunk[1] ^ crc as u8)];
    let mut i = 2;
    while i < N {
        x ^= TABLES[N - 1 - i][usize::from(chunk[i])];
        i += 1;
    }
    x
}

/// CRC16-XMODEM of `data`, as Redis's `crc16()` computes it.
///
/// O(len): one step per 16 bytes, then at most one step each of 8, 4, 2
/// and 1 bytes. `crc16(b"123456789") == 0x31C3`.
#[inline]
pub fn crc16(data: &[u8]) -> u16 {
    let mut crc = 0u16;
    let mut rest = data;
    while let Some((c, r)) = rest.split_first_chunk::<16>() {
        crc = fold(crc, c);
        rest = r;
    }
    if let Some((c, r)) = rest.split_first_chunk::<8>() {
        crc = fold(crc, c);
        rest = r;
    }
    if let Some((c, r)) = rest.split_first_chunk::<4>() {
        crc = fold(crc, c);
        rest = r;
    }
    if let Some((c, r)) = rest.split_first_chunk::<2>() {
        crc = fold(crc, c);
        rest = r;
    }
    match rest {
        [b] => (crc << 8) ^ TABLES[0][usize::from((crc >> 8) as u8 ^ b)],
        _ => crc,
    }
}

/// The Redis Cluster slot (0..16384) of `key`.
///
/// If the key contains a `{`, and a `}` follows it with at least one byte in
/// between, only the bytes between the first `{` and the first `}` after it
/// are hashed; otherwise (no `{`, no closing `}`, or an empty tag `{}`) the
/// whole key is hashed. O(len).
#[inline]
pub fn key_hash_slot(key: &[u8]) -> u16 {
    let tag = find_byte(key, b'{').and_then(|open| {
        let rest = &key[open + 1..];
        match find_byte(rest, b'}') {
            Some(close) if close > 0 => Some(&rest[..close]),
            _ => None,
        }
    });
    crc16(tag.unwrap_or(key)) & (SLOTS - 1)
}

/// The first `needle` in `hay`, eight bytes per step (most keys have no
/// `{`: a byte-at-a-time scan cost as much as the CRC of a short key).
#[inline]
fn find_byte(hay: &[u8], needle: u8) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let pattern = LO * u64::from(needle);
    // The first zero byte of `w ^ pattern`: its lowest set high bit of
    // `found` (borrows only run upward, past a zero byte).
    let first = |w: &[u8; 8]| {
        let x = u64::from_le_bytes(*w) ^ pattern;
        let found = x.wrapping_sub(LO) & !x & HI;
        (found != 0).then(|| found.trailing_zeros() as usize / 8)
    };
    if hay.len() < 8 {
        return hay.iter().position(|&b| b == needle);
    }
    let mut at = 0;
    while let Some((w, _)) = hay[at..].split_first_chunk::<8>() {
        if let Some(i) = first(w) {
            return Some(at + i);
        }
        at += 8;
    }
    // The last 8 bytes, overlapping bytes already searched (without the
    // needle, so a find is past them).
    if at == hay.len() {
        return None;
    }
    let last = hay.len() - 8;
    let (w, _) = hay[last..].split_first_chunk::<8>()?;
    first(w).map(|i| last + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain bitwise definition (polynomial 0x1021, init 0, no
    /// reflection), as an oracle for the fast version.
    fn crc16_bitwise(data: &[u8]) -> u16 {
        let mut crc = 0u16;
        for &b in data {
            crc ^= u16::from(b) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x1021
                } else {
                    crc << 1
                };
            }
        }
        crc
    }

    #[test]
    fn fast_crc_matches_the_definition() {
        let data: Vec<u8> = (0..2000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        for len in 0..data.len() {
            assert_eq!(
                crc16(&data[..len]),
                crc16_bitwise(&data[..len]),
                "len {len}"
            );
        }
    }

    /// Redis's `keyHashSlot` written out plainly over the bitwise CRC.
    fn slot_oracle(key: &[u8]) -> u16 {
        let mut s = None;
        for (i, &b) in key.iter().enumerate() {
            if b == b'{' {
                s = Some(i);
                break;
            }
        }
        let Some(s) = s else {
            return crc16_bitwise(key) & 0x3FFF;
        };
        let mut e = None;
        for (j, &b) in key.iter().enumerate().skip(s + 1) {
            if b == b'}' {
                e = Some(j);
                break;
            }
        }
        match e {
            Some(e) if e != s + 1 => crc16_bitwise(&key[s + 1..e]) & 0x3FFF,
            _ => crc16_bitwise(key) & 0x3FFF,
        }
    }

    #[test]
    fn random_keys_get_the_oracles_slot() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(24);
        // Bytes drawn mostly from a small alphabet rich in braces, so that
        // tags, empty tags, unclosed and nested ones all come up.
        let alphabet = b"{}{}ab:09";
        for _ in 0..200_000 {
            let len = rng.gen_range(0..48);
            let key: Vec<u8> = (0..len)
                .map(|_| {
                    if rng.gen_bool(0.7) {
                        alphabet[rng.gen_range(0..alphabet.len())]
                    } else {
                        rng.gen()
                    }
                })
                .collect();
            assert_eq!(key_hash_slot(&key), slot_oracle(&key), "key {key:?}");
            assert_eq!(crc16(&key), crc16_bitwise(&key), "key {key:?}");
        }
    }

    #[test]
    fn find_byte_finds_the_first() {
        let hay: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37)).collect();
        for needle in 0..=255u8 {
            for start in 0..hay.len() {
                let h = &hay[start..];
                assert_eq!(
                    find_byte(h, needle),
                    h.iter().position(|&b| b == needle),
                    "needle {needle} start {start}"
                );
            }
        }
        // A 0x01 byte after the needle's byte (a borrow) must not matter.
        assert_eq!(find_byte(b"\x01{{{{{{{", b'{'), Some(1));
        assert_eq!(find_byte(b"{\x01\x01\x01\x01\x01\x01\x01", b'{'), Some(0));
        assert_eq!(find_byte(b"aaaaaaa\x7c{", b'{'), Some(8));
    }

    #[test]
    fn check_value() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
    }

    #[test]
    fn known_slots() {
        assert_eq!(key_hash_slot(b"foo"), 12182);
        assert_eq!(key_hash_slot(b"bar"), 5061);
        assert_eq!(key_hash_slot(b""), 0);
        assert_eq!(key_hash_slot(b"123456789"), 0x31C3 & 0x3FFF);
    }

    #[test]
    fn hashtags() {
        let a = key_hash_slot(b"{user1000}.following");
        assert_eq!(a, key_hash_slot(b"{user1000}.followers"));
        assert_eq!(a, key_hash_slot(b"user1000"));
        // Empty tag: the whole key is hashed.
        assert_eq!(key_hash_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") & 0x3FFF);
        // First `{`, then the first `}` after it: the tag is "{bar".
        assert_eq!(key_hash_slot(b"foo{{bar}}zap"), key_hash_slot(b"{bar"));
        assert_eq!(key_hash_slot(b"foo{{bar}}zap"), crc16(b"{bar") & 0x3FFF);
        // Only the first tag counts.
        assert_eq!(key_hash_slot(b"foo{bar}{zap}"), key_hash_slot(b"bar"));
        // Unclosed tag: whole key.
        assert_eq!(key_hash_slot(b"foo{bar"), crc16(b"foo{bar") & 0x3FFF);
        assert_eq!(key_hash_slot(b"}{"), crc16(b"}{") & 0x3FFF);
    }

    #[test]
    fn always_in_range() {
        for i in 0..10_000u32 {
            assert!(key_hash_slot(i.to_string().as_bytes()) < SLOTS);
        }
    }
}
