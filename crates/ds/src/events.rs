//! Keyspace event classes (`notify-keyspace-events`): the bits, and Redis's
//! conversions between them and the flag string (`keyspaceEventsStringToFlags`,
//! `keyspaceEventsFlagsToString`). Shared by the configuration (which parses
//! the directive) and the engine (which emits events of each class).

/// `K`: publish to `__keyspace@<db>__:<key>`.
pub const KEYSPACE: u32 = 1 << 0;
/// `E`: publish to `__keyevent@<db>__:<event>`.
pub const KEYEVENT: u32 = 1 << 1;
/// `g`: generic commands (DEL, EXPIRE, RENAME, ...).
pub const GENERIC: u32 = 1 << 2;
/// `$`: string commands.
pub const STRING: u32 = 1 << 3;
/// `l`: list commands.
pub const LIST: u32 = 1 << 4;
/// `s`: set commands.
pub const SET: u32 = 1 << 5;
/// `h`: hash commands.
pub const HASH: u32 = 1 << 6;
/// `z`: sorted set commands.
pub const ZSET: u32 = 1 << 7;
/// `x`: a key expired.
pub const EXPIRED: u32 = 1 << 8;
/// `e`: a key was evicted.
pub const EVICTED: u32 = 1 << 9;
/// `t`: stream commands.
pub const STREAM: u32 = 1 << 10;
/// `m`: a read missed its key (not part of `A`).
pub const KEY_MISS: u32 = 1 << 11;
/// `d`: module events.
pub const MODULE: u32 = 1 << 12;
/// `n`: a key was created (not part of `A`).
pub const NEW: u32 = 1 << 13;
/// `A`: every class but `m` and `n`.
pub const ALL: u32 =
    GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// The flags of `s` (any order, repeats allowed); None on an unknown
/// character (Redis's error: "Invalid event class character. Use
/// 'Ag$lshzxeKEtmdn'.").
pub fn parse(s: &[u8]) -> Option<u32> {
    let mut flags = 0;
    for &c in s {
        flags |= match c {
            b'A' => ALL,
            b'g' => GENERIC,
            b'$' => STRING,
            b'l' => LIST,
            b's' => SET,
            b'h' => HASH,
            b'z' => ZSET,
            b'x' => EXPIRED,
            b'e' => EVICTED,
            b'K' => KEYSPACE,
            b'E' => KEYEVENT,
            b't' => STREAM,
            b'm' => KEY_MISS,
            b'd' => MODULE,
            b'n' => NEW,
            _ => return None,
        };
    }
    Some(flags)
}

/// The canonical string of `flags`, as CONFIG GET shows it.
pub fn format(flags: u32) -> String {
    let mut s = String::new();
    if flags & ALL == ALL {
        s.push('A');
    } else {
        for (bit, c) in [
            (GENERIC, 'g'),
            (STRING, '$'),
            (LIST, 'l'),
            (SET, 's'),
            (HASH, 'h'),
            (ZSET, 'z'),
            (EXPIRED, 'x'),
            (EVICTED, 'e'),
            (STREAM, 't'),
            (MODULE, 'd'),
            (NEW, 'n'),
        ] {
            if flags & bit != 0 {
                s.push(c);
            }
        }
    }
    for (bit, c) in [(KEYSPACE, 'K'), (KEYEVENT, 'E'), (KEY_MISS, 'm')] {
        if flags & bit != 0 {
            s.push(c);
        }
    }
    s
}

/// The classes that will actually be published: none unless `K` or `E`
/// is set (Redis accepts `g` alone but then publishes nothing).
pub fn effective(flags: u32) -> u32 {
    if flags & (KEYSPACE | KEYEVENT) == 0 {
        0
    } else {
        flags
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_as_redis_prints_them() {
        // Checked against redis-server 7.0.15's CONFIG GET.
        assert_eq!(format(parse(b"KEA").unwrap()), "AKE");
        assert_eq!(format(parse(b"gxKn$m").unwrap()), "g$xnKm");
        assert_eq!(format(parse(b"").unwrap()), "");
        assert_eq!(format(parse(b"AAm").unwrap()), "Am");
        assert_eq!(parse(b"Q"), None);
        assert_eq!(effective(parse(b"g$").unwrap()), 0);
        assert_eq!(effective(parse(b"Eg").unwrap()), GENERIC | KEYEVENT);
    }
}
