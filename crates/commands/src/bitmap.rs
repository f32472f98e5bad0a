//! Bitmap commands (Redis 7.0's `bitops.c`): SETBIT, GETBIT, BITCOUNT,
//! BITPOS, BITOP, BITFIELD and BITFIELD_RO. Request path.
//!
//! A bitmap is a string value: the commands read any string (an `int` one
//! through its decimal form, as Redis does), answer WRONGTYPE for other
//! types, and a write turns the value `raw` and grows it with zero bytes
//! in place (`Str::make_raw`, as APPEND and SETRANGE do). The bit
//! arithmetic is in [`bits`]; here are argument parsing in Redis's order of
//! checks, the ranges' conversions, and the effects.
//!
//! Redis 7.0 quirks kept because clients see them:
//! * BITCOUNT and BITPOS look the key up before parsing their range: a
//!   missing key answers 0 (BITPOS: -1 or 0) whatever the other
//!   arguments; BITCOUNT answers 0 for two negative bounds in the wrong
//!   order before it checks BIT|BYTE;
//! * BITPOS for a clear bit with no end given counts the string as padded
//!   with zeros, so it answers the first bit past the end;
//! * keyword arguments compare as C strings (`strcasecmp`): they end at
//!   the first NUL byte, and BITFIELD's type reads its width up to one;
//! * BITFIELD's `#N` offset is `N * width` with the 64-bit wrap of C;
//!   an unsigned SET of a negative value is a huge value (SAT stores the
//!   maximum).
//!
//! Effects, as Redis 7.0.15 (not older releases): SETBIT and BITFIELD mark
//! the key modified (WATCH, propagation) only when a bit changed or the
//! string was created or grew; BITFIELD with GETs only, or whose writes all
//! FAILed, writes nothing. One deliberate difference: a BITFIELD whose
//! writes all FAILed but which grew an existing string is still logged to
//! the append-only file (without touching WATCH), where Redis loses the
//! growth on replay. BITOP stores a `raw` result (no TTL) or deletes the
//! destination for an empty one; its keys may span shards, where dispatch
//! runs the same handler on gathered copies (`crate::scratch`) under the
//! transaction layer's locks, as SUNIONSTORE.
//!
//! Limits: offsets whose byte is at or past `proto-max-bulk-len` are
//! refused, so no command grows a string past it (plus the 8 bytes a
//! BITFIELD field may straddle, as in Redis).

mod bits;

use engine::lazyfree::Del;
use engine::{Shard, Str, Value};
use resp::{Args, Reply};

use crate::ctx::ShardCtx;
use crate::error::CmdError;
use crate::table::{flags::*, keys, CommandSpec, Exec, ShardHandler};
use crate::util::{as_str, parse_i64};

use bits::Overflow;

const W_SLOW: &[&str] = &["write", "bitmap", "slow"];
const R_FAST: &[&str] = &["read", "bitmap", "fast"];
const R_SLOW: &[&str] = &["read", "bitmap", "slow"];

const fn one(
    name: &'static str,
    arity: i32,
    flags: u32,
    h: ShardHandler,
    acl: &'static [&'static str],
) -> CommandSpec {
    CommandSpec::new(name, arity, flags, keys(1, 1, 1), Exec::Shard(h, None), acl)
}

pub(crate) const COMMANDS: &[CommandSpec] = &[
    one("setbit", 4, WRITE | DENYOOM, setbit, W_SLOW),
    one("getbit", 3, READONLY | FAST, getbit, R_FAST),
    one("bitcount", -2, READONLY, bitcount, R_SLOW),
    one("bitpos", -3, READONLY, bitpos, R_SLOW),
    CommandSpec::new(
        "bitop",
        -4,
        WRITE | DENYOOM,
        keys(2, -1, 1),
        Exec::Shard(bitop, None),
        W_SLOW,
    ),
    one("bitfield", -2, WRITE | DENYOOM, bitfield, W_SLOW),
    one("bitfield_ro", -2, READONLY | FAST, bitfield_ro, R_FAST),
];

// ---------------------------------------------------------------------------
// Arguments

fn offset_error() -> CmdError {
    CmdError::err("bit offset is not an integer or out of range")
}

/// An argument as C's `strcasecmp` sees it: up to the first NUL.
fn c_str(arg: &[u8]) -> &[u8] {
    let end = arg.iter().position(|&c| c == 0).unwrap_or(arg.len());
    &arg[..end]
}

fn keyword(arg: &[u8], word: &str) -> bool {
    c_str(arg).eq_ignore_ascii_case(word.as_bytes())
}

/// A bit offset (Redis's `getBitOffsetFromArgument`): a non-negative
/// integer whose byte is below `max_bulk_len`. With `width` (BITFIELD),
/// `#N` means `N * width`.
fn bit_offset(arg: &[u8], width: Option<u32>, max_bulk_len: u64) -> Result<u64, CmdError> {
    let (digits, mul) = match (arg.first(), width) {
        (Some(b'#'), Some(w)) => (&arg[1..], i64::from(w)),
        _ => (arg, 1),
    };
    let n = resp::string2ll(digits).ok_or_else(offset_error)?;
    // C's signed multiply, which wraps on the machines Redis runs on.
    let n = n.wrapping_mul(mul);
    if n < 0 || (n as u64 >> 3) >= max_bulk_len {
        return Err(offset_error());
    }
    Ok(n as u64)
}

/// BITFIELD's `i1`..`i64` / `u1`..`u63`: (signed, width).
fn field_type(arg: &[u8]) -> Result<(bool, u32), CmdError> {
    let err = || {
        CmdError::err(
            "Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported \
             but i64 is.",
        )
    };
    let signed = match arg.first() {
        Some(b'i') => true,
        Some(b'u') => false,
        _ => return Err(err()),
    };
    let width = resp::string2ll(c_str(&arg[1..])).ok_or_else(err)?;
    let max = if signed { 64 } else { 63 };
    if !(1..=max).contains(&width) {
        return Err(err());
    }
    Ok((signed, width as u32))
}

/// BITCOUNT's and BITPOS's `[start end]` in bytes (or bits with `BIT`),
/// negative counting from the end, clamped to a string of `len` bytes: the
/// inclusive bit range, or `None` when empty.
fn bit_range(len: usize, start: i64, end: i64, in_bits: bool) -> Option<(u64, u64)> {
    let total = if in_bits { len as i64 * 8 } else { len as i64 };
    let start = if start < 0 { total + start } else { start }.max(0);
    let end = if end < 0 { total + end } else { end }
        .max(0)
        .min(total - 1);
    if start > end {
        return None;
    }
    let (start, end) = (start as u64, end as u64);
    Some(if in_bits {
        (start, end)
    } else {
        (start * 8, end * 8 + 7)
    })
}

/// `BIT` or `BYTE`: true for bits.
fn unit(arg: &[u8]) -> Result<bool, CmdError> {
    if keyword(arg, "bit") {
        Ok(true)
    } else if keyword(arg, "byte") {
        Ok(false)
    } else {
        Err(CmdError::Syntax)
    }
}

/// The string at `key` (looked up and type-checked just before) as a
/// growable `raw` buffer, converted even when nothing will change, as
/// Redis's `dbUnshareStringValue`.
fn raw_mut<'a>(shard: &'a mut Shard, db: usize, key: &[u8]) -> &'a mut Vec<u8> {
    shard.dbs[db]
        .str_mut(key)
        .expect("INVARIANT: a string, looked up just before")
        .make_raw()
}

/// Grows `v` with zero bytes to at least `len`; true if it grew.
fn grow(v: &mut Vec<u8>, len: usize) -> bool {
    if v.len() >= len {
        return false;
    }
    v.resize(len, 0);
    true
}

// ---------------------------------------------------------------------------
// SETBIT, GETBIT

/// SETBIT key offset 0|1: the bit's previous value. The string grows with
/// zero bytes to reach the bit and becomes `raw`.
fn setbit(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let bit = bit_offset(args.get(2), None, ctx.max_bulk_len)?;
    let on = match resp::string2ll(args.get(3)) {
        Some(n @ (0 | 1)) => n == 1,
        _ => return Err(CmdError::err("bit is not an integer or out of range")),
    };
    let (db, key) = (ctx.db, args.get(1));
    let len = (bit >> 3) as usize + 1;
    let old = match ctx.shard.lookup_write(db, key) {
        None => {
            let mut v = vec![0u8; len];
            bits::set_bit(&mut v, bit, on);
            ctx.shard
                .store(db, key, Value::Str(Str::from_vec_raw(v)), 0);
            ctx.propagate_as_is(args);
            ctx.notify(ds::events::STRING, "setbit", key);
            0
        }
        Some(e) => {
            as_str(e)?;
            // One lookup when the string is already growable.
            let v = match e.str_in_place() {
                Some(s) => s.make_raw(),
                None => raw_mut(ctx.shard, db, key),
            };
            let grew = grow(v, len);
            let old = bits::get_bit(v, bit);
            let changed = grew || (old == 1) != on;
            if changed {
                bits::set_bit(v, bit, on);
                ctx.shard.dbs[db].signal(key);
                ctx.propagate_as_is(args);
                ctx.notify(ds::events::STRING, "setbit", key);
            }
            old
        }
    };
    ctx.out.int(i64::from(old));
    Ok(())
}

/// GETBIT key offset: the bit, 0 past the end or for a missing key.
fn getbit(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let bit = bit_offset(args.get(2), None, ctx.max_bulk_len)?;
    let touch = ctx.touch();
    let v = match ctx.shard.lookup_read(ctx.db, args.get(1), touch) {
        None => 0,
        Some(e) => as_str(e)?.with_bytes(|s| bits::get_bit(s, bit)),
    };
    ctx.out.int(i64::from(v));
    Ok(())
}

// ---------------------------------------------------------------------------
// BITCOUNT, BITPOS

/// BITCOUNT key [start end [BYTE|BIT]]: the number of set bits in the
/// range (the whole string by default); 0 for a missing key.
fn bitcount(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let touch = ctx.touch();
    let Some(e) = ctx.shard.lookup_read(ctx.db, args.get(1), touch) else {
        ctx.out.int(0);
        return Ok(());
    };
    let s = as_str(e)?;
    let (start, end, in_bits) = match args.len() {
        2 => (0, -1, false),
        4 | 5 => {
            let start = parse_i64(args.get(2))?;
            let end = parse_i64(args.get(3))?;
            if start < 0 && end < 0 && start > end {
                ctx.out.int(0);
                return Ok(());
            }
            let in_bits = args.len() == 5 && unit(args.get(4))?;
            (start, end, in_bits)
        }
        _ => return Err(CmdError::Syntax),
    };
    let n = s.with_bytes(|b| match bit_range(b.len(), start, end, in_bits) {
        Some((first, last)) => bits::count(b, first, last),
        None => 0,
    });
    ctx.out.int(n as i64);
    Ok(())
}

/// BITPOS key 0|1 [start [end [BYTE|BIT]]]: the position of the first bit
/// with that value in the range, or -1. A missing key is all zeros (0 for
/// a clear bit, -1 for a set one); with no end given, the string counts as
/// padded with zeros, so a clear bit is found past its end.
fn bitpos(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let bit = match parse_i64(args.get(2))? {
        0 => false,
        1 => true,
        _ => return Err(CmdError::err("The bit argument must be 1 or 0.")),
    };
    let touch = ctx.touch();
    let Some(e) = ctx.shard.lookup_read(ctx.db, args.get(1), touch) else {
        ctx.out.int(if bit { -1 } else { 0 });
        return Ok(());
    };
    let s = as_str(e)?;
    let (start, end, in_bits, end_given) = match args.len() {
        3 => (0, -1, false, false),
        4..=6 => {
            let start = parse_i64(args.get(3))?;
            let in_bits = args.len() == 6 && unit(args.get(5))?;
            if args.len() >= 5 {
                (start, parse_i64(args.get(4))?, in_bits, true)
            } else {
                (start, -1, false, false)
            }
        }
        _ => return Err(CmdError::Syntax),
    };
    let pos = s.with_bytes(|b| {
        let (first, last) = bit_range(b.len(), start, end, in_bits)?;
        match bits::position(b, bit, first, last) {
            Some(p) => Some(p),
            None if !bit && !end_given => Some(last + 1),
            None => None,
        }
    });
    ctx.out.int(pos.map_or(-1, |p| p as i64));
    Ok(())
}

// ---------------------------------------------------------------------------
// BITOP

#[derive(Clone, Copy, PartialEq, Eq)]
enum BitOp {
    And,
    Or,
    Xor,
    Not,
}

/// Folds `src` (the `i`th source; missing keys are empty) into `acc`,
/// which is as long as the longest source so far: shorter strings count
/// as padded with zero bytes.
fn fold(acc: &mut Vec<u8>, src: &[u8], i: usize, op: BitOp) {
    if i == 0 {
        acc.extend_from_slice(src);
        return;
    }
    grow(acc, src.len());
    let (head, tail) = acc.split_at_mut(src.len());
    match op {
        BitOp::And => {
            head.iter_mut().zip(src).for_each(|(a, s)| *a &= s);
            tail.fill(0);
        }
        BitOp::Or => head.iter_mut().zip(src).for_each(|(a, s)| *a |= s),
        BitOp::Xor => head.iter_mut().zip(src).for_each(|(a, s)| *a ^= s),
        // NOT has one source.
        BitOp::Not => {}
    }
}

/// BITOP AND|OR|XOR|NOT destkey key [key ...]: stores the bitwise result
/// (as long as the longest source) in destkey and replies its length;
/// an empty result deletes destkey.
fn bitop(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let name = args.get(1);
    let op = if keyword(name, "and") {
        BitOp::And
    } else if keyword(name, "or") {
        BitOp::Or
    } else if keyword(name, "xor") {
        BitOp::Xor
    } else if keyword(name, "not") {
        BitOp::Not
    } else {
        return Err(CmdError::Syntax);
    };
    if op == BitOp::Not && args.len() != 4 {
        return Err(CmdError::err(
            "BITOP NOT must be called with a single source key.",
        ));
    }
    let (db, dest, touch) = (ctx.db, args.get(2), ctx.touch());
    let mut acc = Vec::new();
    for (i, key) in args.iter().skip(3).enumerate() {
        match ctx.shard.lookup_read(db, key, touch) {
            None => fold(&mut acc, &[], i, op),
            Some(e) => as_str(e)?.with_bytes(|s| fold(&mut acc, s, i, op)),
        }
    }
    if op == BitOp::Not {
        acc.iter_mut().for_each(|b| *b = !*b);
    }
    let len = acc.len();
    if len > 0 {
        ctx.shard
            .store(db, dest, Value::Str(Str::from_vec_raw(acc)), 0);
        ctx.propagate_as_is(args);
        ctx.notify(ds::events::STRING, "set", dest);
    } else if ctx.shard.delete(db, dest, Del::Server) {
        ctx.propagate_as_is(args);
        ctx.notify(ds::events::GENERIC, "del", dest);
    }
    ctx.out.int(len as i64);
    Ok(())
}

// ---------------------------------------------------------------------------
// BITFIELD, BITFIELD_RO

#[derive(Clone, Copy, PartialEq, Eq)]
enum FieldOp {
    Get,
    Set,
    Incrby,
}

/// One parsed BITFIELD subcommand.
#[derive(Clone, Copy)]
struct Field {
    op: FieldOp,
    signed: bool,
    width: u32,
    offset: u64,
    /// SET's value or INCRBY's increment.
    value: i64,
    overflow: Overflow,
}

/// Parses every subcommand (Redis reports the first bad one before looking
/// at the key); also returns the last bit a SET or INCRBY reaches, if any.
fn parse_fields(args: Args<'_>, max_bulk_len: u64) -> Result<(Vec<Field>, Option<u64>), CmdError> {
    let mut fields = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut last_written: Option<u64> = None;
    let mut j = 2;
    while j < args.len() {
        let rest = args.len() - j - 1;
        let sub = args.get(j);
        let op = if keyword(sub, "get") && rest >= 2 {
            FieldOp::Get
        } else if keyword(sub, "set") && rest >= 3 {
            FieldOp::Set
        } else if keyword(sub, "incrby") && rest >= 3 {
            FieldOp::Incrby
        } else if keyword(sub, "overflow") && rest >= 1 {
            let t = args.get(j + 1);
            overflow = if keyword(t, "wrap") {
                Overflow::Wrap
            } else if keyword(t, "sat") {
                Overflow::Sat
            } else if keyword(t, "fail") {
                Overflow::Fail
            } else {
                return Err(CmdError::err("Invalid OVERFLOW type specified"));
            };
            j += 2;
            continue;
        } else {
            return Err(CmdError::Syntax);
        };
        let (signed, width) = field_type(args.get(j + 1))?;
        let offset = bit_offset(args.get(j + 2), Some(width), max_bulk_len)?;
        let mut value = 0;
        if op != FieldOp::Get {
            let end = offset + u64::from(width) - 1;
            last_written = Some(last_written.map_or(end, |l| l.max(end)));
            value = parse_i64(args.get(j + 3))?;
        }
        fields.push(Field {
            op,
            signed,
            width,
            offset,
            value,
            overflow,
        });
        j += if op == FieldOp::Get { 3 } else { 4 };
    }
    Ok((fields, last_written))
}

fn reply_get(out: &mut Reply, s: &[u8], f: &Field) {
    if f.signed {
        out.int(bits::get_signed(s, f.offset, f.width));
    } else {
        // At most 63 bits: fits.
        out.int(bits::get_unsigned(s, f.offset, f.width) as i64);
    }
}

/// Runs `fields` on `v` (already grown to cover every write), replying
/// each; returns how many writes count as changes (Redis's `changes`:
/// every write that did not FAIL when `grew`, else those that changed a
/// field).
fn apply(out: &mut Reply, v: &mut [u8], fields: &[Field], grew: bool) -> u64 {
    out.array(fields.len());
    let mut changes = 0;
    for f in fields {
        let (old, new, reply) = match (f.op, f.signed) {
            (FieldOp::Get, _) => {
                reply_get(out, v, f);
                continue;
            }
            (op, true) => {
                let old = bits::get_signed(v, f.offset, f.width);
                let new = if op == FieldOp::Incrby {
                    bits::signed_result(old, f.value, f.width, f.overflow)
                } else {
                    bits::signed_result(f.value, 0, f.width, f.overflow)
                };
                let reply = if op == FieldOp::Incrby {
                    new
                } else {
                    Some(old)
                };
                (old as u64, new.map(|n| n as u64), reply)
            }
            (op, false) => {
                let old = bits::get_unsigned(v, f.offset, f.width);
                let new = if op == FieldOp::Incrby {
                    bits::unsigned_result(old, f.value, f.width, f.overflow)
                } else {
                    bits::unsigned_result(f.value as u64, 0, f.width, f.overflow)
                };
                let reply = if op == FieldOp::Incrby {
                    new
                } else {
                    Some(old)
                };
                (old, new, reply.map(|r| r as i64))
            }
        };
        match (new, reply) {
            (Some(new), Some(reply)) => {
                out.int(reply);
                bits::set_field(v, f.offset, f.width, new);
                // Compared as stored: a signed value's bits beyond the
                // width are all copies of its sign on both sides.
                if grew || old != new {
                    changes += 1;
                }
            }
            // OVERFLOW FAIL: nothing written.
            _ => out.null(),
        }
    }
    changes
}

fn bitfield(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    bitfield_generic(ctx, args, false)
}

fn bitfield_ro(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    bitfield_generic(ctx, args, true)
}

/// BITFIELD key [GET type offset] [SET type offset value] [INCRBY type
/// offset increment] [OVERFLOW WRAP|SAT|FAIL] ...: one reply per GET, SET
/// (the old value) and INCRBY (the new value, null when it FAILs), in
/// order. BITFIELD_RO accepts GET only.
fn bitfield_generic(ctx: &mut ShardCtx<'_>, args: Args<'_>, ro: bool) -> Result<(), CmdError> {
    let (fields, last_written) = parse_fields(args, ctx.max_bulk_len)?;
    let (db, key) = (ctx.db, args.get(1));
    let Some(last) = last_written else {
        let touch = ctx.touch();
        let out = &mut *ctx.out;
        let s = match ctx.shard.lookup_read(db, key, touch) {
            Some(e) => Some(as_str(e)?),
            None => None,
        };
        out.array(fields.len());
        let mut reply = |b: &[u8]| fields.iter().for_each(|f| reply_get(out, b, f));
        match s {
            Some(s) => s.with_bytes(reply),
            None => reply(&[]),
        }
        return Ok(());
    };
    if ro {
        return Err(CmdError::err(
            "BITFIELD_RO only supports the GET subcommand",
        ));
    }
    let len = (last >> 3) as usize + 1;
    match ctx.shard.lookup_write(db, key) {
        None => {
            let mut v = vec![0u8; len];
            let changes = apply(ctx.out, &mut v, &fields, true);
            // The store counts as one change (even when every write
            // FAILed: see the module docs).
            ctx.shard
                .store(db, key, Value::Str(Str::from_vec_raw(v)), 0);
            ctx.shard.dbs[db].dirty += changes.saturating_sub(1);
            ctx.propagate_as_is(args);
            if changes > 0 {
                ctx.notify(ds::events::STRING, "setbit", key);
            }
        }
        Some(e) => {
            as_str(e)?;
            let out = &mut *ctx.out;
            let v = raw_mut(ctx.shard, db, key);
            let grew = grow(v, len);
            let changes = apply(out, v, &fields, grew);
            let d = &mut ctx.shard.dbs[db];
            if changes > 0 {
                d.signal(key);
                d.dirty += changes - 1;
                ctx.shard.notify(db, ds::events::STRING, "setbit", key);
                ctx.propagate_as_is(args);
            } else if grew {
                // Logged, without signalling WATCH (see the module docs).
                d.dirty += 1;
                ctx.propagate_as_is(args);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TestServer;

    fn check(t: &mut TestServer, cmd: &[&str], want: &str) {
        assert_eq!(t.run(cmd), want, "{cmd:?}");
    }

    /// `check` for binary arguments and replies.
    fn check_bytes(t: &mut TestServer, cmd: &[&[u8]], want: &[u8]) {
        assert_eq!(t.raw(cmd), want, "{cmd:?}");
    }

    #[test]
    fn offsets() {
        let max = 512 * 1024 * 1024;
        assert_eq!(bit_offset(b"0", None, max), Ok(0));
        assert_eq!(bit_offset(b"4294967295", None, max), Ok(4294967295));
        assert_eq!(bit_offset(b"4294967296", None, max), Err(offset_error()));
        assert_eq!(bit_offset(b"-1", None, max), Err(offset_error()));
        assert_eq!(bit_offset(b"#3", None, max), Err(offset_error()));
        assert_eq!(bit_offset(b"#3", Some(8), max), Ok(24));
        assert_eq!(bit_offset(b"#-1", Some(8), max), Err(offset_error()));
        // Wraps as C's multiply: 2^63-1 times 8 is -8.
        assert_eq!(
            bit_offset(b"#9223372036854775807", Some(8), max),
            Err(offset_error())
        );
        assert_eq!(bit_offset(b"8", None, 1), Err(offset_error()));
        assert_eq!(bit_offset(b"7", None, 1), Ok(7));
    }

    #[test]
    fn field_types() {
        assert_eq!(field_type(b"i64"), Ok((true, 64)));
        assert_eq!(field_type(b"u63"), Ok((false, 63)));
        assert_eq!(field_type(b"u1"), Ok((false, 1)));
        // As C's strlen: the width ends at a NUL.
        assert_eq!(field_type(b"i8\0junk"), Ok((true, 8)));
        for bad in [
            &b"u64"[..],
            b"i65",
            b"i0",
            b"u",
            b"",
            b"x8",
            b"i08",
            b"i+8",
            b"I8",
        ] {
            assert!(field_type(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ranges() {
        assert_eq!(bit_range(6, 0, -1, false), Some((0, 47)));
        assert_eq!(bit_range(6, 1, 1, false), Some((8, 15)));
        assert_eq!(bit_range(6, -2, 100, false), Some((32, 47)));
        assert_eq!(bit_range(6, 5, 30, true), Some((5, 30)));
        assert_eq!(bit_range(6, -3, -1, true), Some((45, 47)));
        assert_eq!(bit_range(6, 3, 2, false), None);
        assert_eq!(bit_range(0, 0, -1, false), None);
        assert_eq!(bit_range(6, i64::MIN, i64::MAX, false), Some((0, 47)));
    }

    #[test]
    fn setbit_getbit_grow_and_encoding() {
        let t = &mut TestServer::new(1);
        check(t, &["SETBIT", "k", "7", "1"], ":0\r\n");
        check(t, &["GET", "k"], "$1\r\n\x01\r\n");
        check(t, &["SETBIT", "k", "7", "1"], ":1\r\n");
        check(t, &["SETBIT", "k", "23", "1"], ":0\r\n");
        check(t, &["STRLEN", "k"], ":3\r\n");
        check(t, &["GETBIT", "k", "23"], ":1\r\n");
        check(t, &["GETBIT", "k", "1000"], ":0\r\n");
        check(t, &["OBJECT", "ENCODING", "k"], "$3\r\nraw\r\n");
        // An integer is read through its decimal form ('1' is 0x31).
        t.run(&["SET", "n", "1"]);
        check(t, &["GETBIT", "n", "2"], ":1\r\n");
        check(t, &["GETBIT", "n", "7"], ":1\r\n");
        check(t, &["SETBIT", "n", "6", "1"], ":0\r\n");
        check(t, &["GET", "n"], "$1\r\n3\r\n");
        check(t, &["OBJECT", "ENCODING", "n"], "$3\r\nraw\r\n");
        t.run(&["LPUSH", "l", "x"]);
        let wrongtype = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
        check(t, &["SETBIT", "l", "0", "1"], wrongtype);
        check(t, &["GETBIT", "l", "0"], wrongtype);
        // Argument errors come before the type check.
        check(
            t,
            &["SETBIT", "l", "0", "2"],
            "-ERR bit is not an integer or out of range\r\n",
        );
    }

    #[test]
    fn setbit_signals_only_changes() {
        let t = &mut TestServer::new(1);
        t.run(&["SETBIT", "k", "0", "1"]);
        let d0 = t.shards[0].dirty();
        t.run(&["SETBIT", "k", "0", "1"]);
        assert_eq!(t.shards[0].dirty(), d0, "same bit: no change");
        t.run(&["SETBIT", "k", "0", "0"]);
        assert_eq!(t.shards[0].dirty(), d0 + 1);
        t.run(&["SETBIT", "k", "9", "0"]);
        assert_eq!(t.shards[0].dirty(), d0 + 2, "grown: a change");
    }

    #[test]
    fn bitfield_effects() {
        let t = &mut TestServer::new(1);
        check(t, &["BITFIELD", "k", "GET", "u8", "0"], "*1\r\n:0\r\n");
        check(t, &["EXISTS", "k"], ":0\r\n");
        check(
            t,
            &["BITFIELD", "k", "SET", "u8", "#1", "255", "GET", "i8", "8"],
            "*2\r\n:0\r\n:-1\r\n",
        );
        check_bytes(t, &[b"GET", b"k"], b"$2\r\n\x00\xff\r\n");
        let d0 = t.shards[0].dirty();
        check(
            t,
            &["BITFIELD", "k", "SET", "u8", "8", "255"],
            "*1\r\n:255\r\n",
        );
        assert_eq!(t.shards[0].dirty(), d0, "unchanged");
        check(
            t,
            &[
                "BITFIELD", "k", "OVERFLOW", "FAIL", "INCRBY", "u8", "8", "1",
            ],
            "*1\r\n$-1\r\n",
        );
        assert_eq!(t.shards[0].dirty(), d0, "failed");
        check(
            t,
            &[
                "BITFIELD", "k", "OVERFLOW", "FAIL", "INCRBY", "u8", "32", "300",
            ],
            "*1\r\n$-1\r\n",
        );
        check(t, &["STRLEN", "k"], ":5\r\n");
        assert_eq!(t.shards[0].dirty(), d0 + 1, "grown: logged");
        check(
            t,
            &[
                "BITFIELD", "k", "INCRBY", "i8", "8", "1", "INCRBY", "i8", "8", "1",
            ],
            "*2\r\n:0\r\n:1\r\n",
        );
        assert_eq!(t.shards[0].dirty(), d0 + 3, "two changes");
        check(
            t,
            &["BITFIELD_RO", "k", "GET", "u8", "0", "SET", "u8", "0", "1"],
            "-ERR BITFIELD_RO only supports the GET subcommand\r\n",
        );
    }

    #[test]
    fn bitop_across_shards_matches_one_shard() {
        for n in [1, 3] {
            let t = &mut TestServer::new(n);
            t.raw(&[b"SET", b"a", b"\x0f\xf0abc"]);
            t.raw(&[b"SET", b"b", b"\xff"]);
            t.run(&["SET", "c", "12"]);
            check(t, &["BITOP", "AND", "d", "a", "b", "c"], ":5\r\n");
            check(t, &["GET", "d"], "$5\r\n\x01\x00\x00\x00\x00\r\n");
            check(t, &["BITOP", "OR", "d", "a", "b", "nokey"], ":5\r\n");
            check_bytes(t, &[b"GET", b"d"], b"$5\r\n\xff\xf0abc\r\n");
            check(t, &["BITOP", "XOR", "d", "a", "c"], ":5\r\n");
            check_bytes(t, &[b"GET", b"d"], b"$5\r\n\x3e\xc2abc\r\n");
            check(t, &["BITOP", "NOT", "d", "b"], ":1\r\n");
            check(t, &["GET", "d"], "$1\r\n\x00\r\n");
            check(t, &["OBJECT", "ENCODING", "d"], "$3\r\nraw\r\n");
            check(t, &["BITOP", "OR", "d", "x", "y"], ":0\r\n");
            check(t, &["EXISTS", "d"], ":0\r\n");
        }
    }
}
