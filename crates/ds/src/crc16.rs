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
//! Why slice-by-16 (the `crc` crate's `Table<16>`): the slot is computed for
//! every key of every command once there are several shards, and the
//! byte-at-a-time table walk is a chain of dependent loads: perf showed it at
//! about 4 % of server CPU for 16-byte keys at pipeline 16 on 2 shards.
//! Sixteen tables (8 KiB) let the CPU work on 16 bytes at once. The crate's
//! tables are built at compile time (`const`), so there is no start-up cost.
//! The byte-at-a-time form stays as the test oracle.

/// Number of hash slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

static CRC16: crc::Crc<u16, crc::Table<16>> =
    crc::Crc::<u16, crc::Table<16>>::new(&crc::CRC_16_XMODEM);

/// CRC16-XMODEM of `data`, as Redis's `crc16()` computes it.
///
/// O(len). `crc16(b"123456789") == 0x31C3`.
#[inline]
pub fn crc16(data: &[u8]) -> u16 {
    CRC16.checksum(data)
}

/// The Redis Cluster slot (0..16384) of `key`.
///
/// If the key contains a `{`, and a `}` follows it with at least one byte in
/// between, only the bytes between the first `{` and the first `}` after it
/// are hashed; otherwise (no `{`, no closing `}`, or an empty tag `{}`) the
/// whole key is hashed. O(len).
pub fn key_hash_slot(key: &[u8]) -> u16 {
    let tag = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        match rest.iter().position(|&b| b == b'}') {
            Some(close) if close > 0 => Some(&rest[..close]),
            _ => None,
        }
    });
    crc16(tag.unwrap_or(key)) & (SLOTS - 1)
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
