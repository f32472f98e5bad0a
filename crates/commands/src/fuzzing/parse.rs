//! The `parse_request` target: `resp::parse_request` on arbitrary bytes, whole and split in two.
//!
//! Input layout: two bytes (little-endian u16, taken modulo `len + 1`) pick
//! where the request is cut to simulate a partial read; the rest is what the
//! client sent. Every input is parsed under three [`Limits`]: the server
//! default, a 64-byte `proto-max-bulk-len`, and an unauthenticated client.
//!
//! Properties (each a contract the connection loop relies on):
//! * no panic;
//! * `Complete(n)`: `0 < n <= len`, every argument range lies in `..n`, and
//!   no byte from `n` on was modified;
//! * `Incomplete(need)`: `need > len` (else the caller would wait for bytes
//!   it already has) and, when the whole buffer holds a complete request of
//!   `n` bytes, a prefix's `need <= n` (else the caller would wait for bytes
//!   the client never sends);
//! * a prefix that parses completely parses identically in the whole buffer,
//!   and a prefix's protocol error (other than a header that is already too
//!   long, which more bytes can cure, as in Redis) is the whole buffer's too;
//! * multibulk parsing does not modify the buffer, so parsing it twice gives
//!   the same result (inline requests are unescaped in place: not checked);
//! * with `max_bulk_len = 64` no multibulk argument is longer than 64.

use std::ops::Range;

use resp::{parse_request as parse_wire, Limits, Parsed, ProtoError};

const SMALL_BULK_MAX: u64 = 64;

const LIMITS: [Limits; 3] = [
    Limits {
        max_bulk_len: 512 * 1024 * 1024,
        auth_required: false,
    },
    Limits {
        max_bulk_len: SMALL_BULK_MAX,
        auth_required: false,
    },
    Limits {
        max_bulk_len: 512 * 1024 * 1024,
        auth_required: true,
    },
];

/// Outcome, argument ranges, argument bytes, buffer as the parser left it.
type Outcome = (Parsed, Vec<Range<usize>>, Vec<Vec<u8>>, Vec<u8>);

/// Parses a private copy of `wire`, checking the per-parse properties.
fn parse(wire: &[u8], limits: &Limits) -> Outcome {
    let mut buf = wire.to_vec();
    // A stale range the parser must clear (it would fail the check below).
    let mut ranges = Vec::with_capacity(8);
    ranges.push(0..usize::MAX);
    let p = parse_wire(&mut buf, limits, &mut ranges);
    let mut args = Vec::new();
    match p {
        Parsed::Complete(n) => {
            assert!(n > 0, "Complete(0) on {wire:?}");
            assert!(
                n <= wire.len(),
                "Complete({n}) > len {} on {wire:?}",
                wire.len()
            );
            for r in &ranges {
                assert!(
                    r.start <= r.end && r.end <= n,
                    "range {r:?} outside ..{n} on {wire:?}"
                );
                args.push(buf[r.clone()].to_vec());
            }
            assert_eq!(&buf[n..], &wire[n..], "bytes past consumed modified");
        }
        Parsed::Incomplete(need) => {
            assert!(
                need > wire.len(),
                "Incomplete({need}) <= len {}",
                wire.len()
            );
        }
        Parsed::Error(_) => {}
    }
    (p, ranges, args, buf)
}

fn header_too_long(e: &ProtoError) -> bool {
    matches!(
        e,
        ProtoError::TooBigMbulkCount | ProtoError::TooBigBulkCount | ProtoError::TooBigInline
    )
}

/// One input (see the module docs); true when it was long enough to
/// parse.
pub fn parse_request(data: &[u8]) -> bool {
    if data.len() < 2 {
        return false;
    }
    let (cut, wire) = data.split_at(2);
    let cut = usize::from(u16::from_le_bytes([cut[0], cut[1]])) % (wire.len() + 1);
    let multibulk = wire.first() == Some(&b'*');

    for limits in &LIMITS {
        let (full, full_ranges, full_args, full_buf) = parse(wire, limits);

        if multibulk {
            assert_eq!(full_buf, wire, "multibulk parsing modified the buffer");
            let (again, again_ranges, _, _) = parse(&full_buf, limits);
            assert_eq!(full, again, "not idempotent on {wire:?}");
            if matches!(full, Parsed::Complete(_)) {
                assert_eq!(full_ranges, again_ranges);
            }
            if limits.max_bulk_len == SMALL_BULK_MAX {
                for a in &full_args {
                    assert!(a.len() as u64 <= SMALL_BULK_MAX, "arg of {} bytes", a.len());
                }
            }
        }

        let (part, _, part_args, _) = parse(&wire[..cut], limits);
        match (&part, &full) {
            (Parsed::Incomplete(need), Parsed::Complete(n)) => {
                assert!(
                    need <= n,
                    "prefix {cut}: need {need} > request {n} on {wire:?}"
                );
            }
            (Parsed::Incomplete(_), _) => {}
            (Parsed::Complete(m), _) => {
                assert_eq!(&part, &full, "prefix {cut} Complete({m}) on {wire:?}");
                assert_eq!(part_args, full_args, "prefix {cut} args differ on {wire:?}");
            }
            (Parsed::Error(e), _) if header_too_long(e) => {}
            (Parsed::Error(_), _) => {
                assert_eq!(&part, &full, "prefix {cut} error differs on {wire:?}");
            }
        }
    }
    true
}
