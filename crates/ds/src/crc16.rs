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
//! Why table-driven: one table lookup per byte instead of eight shift/xor
//! rounds; the 512-byte table is built at compile time by a `const fn`, so
//! there is no start-up cost and no lazy initialisation on the request path.

/// Number of hash slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

const POLY: u16 = 0x1021;

const TABLE: [u16; 256] = build_table();

const fn build_table() -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ POLY
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

/// CRC16-XMODEM of `data`, as Redis's `crc16()` computes it.
///
/// O(len). `crc16(b"123456789") == 0x31C3`.
pub fn crc16(data: &[u8]) -> u16 {
    data.iter().fold(0u16, |crc, &byte| {
        (crc << 8) ^ TABLE[usize::from((crc >> 8) as u8 ^ byte)]
    })
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
