//! INCR, DECR, INCRBY, DECRBY and INCRBYFLOAT: integer counters stored as
//! `int`, keeping the TTL, and the `long double` float increment
//! propagated as `SET key value KEEPTTL`.

use ds::events as ev;
use engine::{Str, StrView, Value};
use resp::Args;

use crate::ctx::ShardCtx;
use crate::error::CmdError;
use crate::util::{as_str, parse_i64};

use super::longdouble;

/// Adds `incr` to the integer at `key` (0 if missing), keeping its TTL.
fn incr_generic(ctx: &mut ShardCtx<'_>, args: Args<'_>, incr: i64) -> Result<(), CmdError> {
    let (db, key) = (ctx.db, args.get(1));
    let n = match ctx.shard.lookup_write(db, key) {
        Some(e) => {
            let cur = as_str(e)?.as_i64().ok_or(CmdError::NotInteger)?;
            let n = cur.checked_add(incr).ok_or(CmdError::Overflow)?;
            // An integer is never stored as bytes in its node (at most 20
            // bytes): replacing the value in place converts nothing.
            *e.value_mut() = Value::Str(Str::Int(n));
            ctx.shard.dbs[db].signal(key);
            n
        }
        None => {
            ctx.shard.store(db, key, Value::Str(Str::Int(incr)), 0);
            incr
        }
    };
    ctx.propagate_as_is(args);
    ctx.notify(ev::STRING, "incrby", key);
    ctx.out.int(n);
    Ok(())
}

pub(super) fn incr(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    incr_generic(ctx, args, 1)
}

pub(super) fn decr(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    incr_generic(ctx, args, -1)
}

pub(super) fn incrby(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let by = parse_i64(args.get(2))?;
    incr_generic(ctx, args, by)
}

pub(super) fn decrby(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let by = parse_i64(args.get(2))?;
    if by == i64::MIN {
        // Redis 7: negating LLONG_MIN would overflow.
        return Err(CmdError::err("decrement would overflow"));
    }
    incr_generic(ctx, args, -by)
}

/// INCRBYFLOAT key increment: the new value as Redis prints a `long
/// double` (`%.17Lf`, trailing zeros trimmed), stored as a string (never
/// `int`), keeping the TTL. See `longdouble` for why not `f64`.
/// Propagated as `SET key value KEEPTTL`: replicas and the AOF must not
/// redo the float arithmetic.
pub(super) fn incrbyfloat(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (db, key) = (ctx.db, args.get(1));
    let cur = match ctx.shard.lookup_write(db, key) {
        Some(e) => Some(match as_str(e)?.view() {
            StrView::Int(n) => longdouble::Ld::from_i64(n),
            StrView::Bytes(b) => longdouble::parse(b).ok_or(CmdError::NotFloat)?,
        }),
        None => None,
    };
    let by = longdouble::parse(args.get(2)).ok_or(CmdError::NotFloat)?;
    let sum = match cur {
        Some(v) => v.add(by),
        None => longdouble::Ld::from_i64(0).add(by),
    };
    if !sum.is_finite() {
        return Err(CmdError::err("increment would produce NaN or Infinity"));
    }
    let text = sum.format_human();
    let value = Str::from_bytes_no_int(text.as_bytes());
    // The lookup above already counted the access (and expired the key if
    // due): write back without a second one, as Redis does.
    match ctx.shard.dbs[db].str_mut(key) {
        Some(s) => {
            *s = value;
            ctx.shard.dbs[db].signal(key);
        }
        None => ctx.shard.store(db, key, Value::Str(value), 0),
    }
    ctx.propagate(&[b"SET", key, text.as_bytes(), b"KEEPTTL"]);
    ctx.notify(ev::STRING, "incrbyfloat", key);
    ctx.out.bulk(text.as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::strings::tests::run_all;

    const INCR_SCRIPT: &str = r#"
    INCR c => :1
    OBJECT ENCODING c => $3\r\nint
    DECR c => :0
    DECR c => :-1
    INCRBY c 10 => :9
    DECRBY c 10 => :-1
    INCRBY c abc => -ERR value is not an integer or out of range
    INCRBY c -0 => -ERR value is not an integer or out of range
    INCRBY c +1 => -ERR value is not an integer or out of range
    INCRBY c 01 => -ERR value is not an integer or out of range
    DECRBY c -9223372036854775808 => -ERR decrement would overflow
    DECRBY c 9223372036854775808 => -ERR value is not an integer or out of range
    DECRBY c -9223372036854775807 => :9223372036854775806
    SET c 9223372036854775807 => +OK
    INCR c => -ERR increment or decrement would overflow
    INCRBY c 0 => :9223372036854775807
    SET c -9223372036854775808 => +OK
    DECR c => -ERR increment or decrement would overflow
    INCRBY c -1 => -ERR increment or decrement would overflow
    SET c \s1 => +OK
    INCR c => -ERR value is not an integer or out of range
    SET c 01 => +OK
    INCR c => -ERR value is not an integer or out of range
    SET c abc => +OK
    INCR c => -ERR value is not an integer or out of range
    SET c 1.5 => +OK
    INCR c => -ERR value is not an integer or out of range
    SET c 100 ex 100 => +OK
    INCR c => :101
    TTL c => :100
    OBJECT ENCODING c => $3\r\nint
    SET c 5 => +OK
    APPEND c 1 => :2
    OBJECT ENCODING c => $3\r\nraw
    INCR c => :52
    OBJECT ENCODING c => $3\r\nint
    INCRBY d 5 => :5
    DECRBY e 5 => :-5
    INCR => -ERR wrong number of arguments for 'incr' command
    INCRBY c => -ERR wrong number of arguments for 'incrby' command
"#;

    #[test]
    fn incr_family() {
        run_all(INCR_SCRIPT);
    }

    const INCRBYFLOAT_SCRIPT: &str = r#"
    INCRBYFLOAT f 10.5 => $4\r\n10.5
    OBJECT ENCODING f => $6\r\nembstr
    INCRBYFLOAT f 0.1 => $4\r\n10.6
    INCRBYFLOAT f -5.6 => $1\r\n5
    OBJECT ENCODING f => $6\r\nembstr
    INCR f => :6
    INCRBYFLOAT f 1 => $1\r\n7
    OBJECT ENCODING f => $6\r\nembstr
    SET f 1.1 => +OK
    INCRBYFLOAT f 2.2 => $3\r\n3.3
    SET f 3.0e3 => +OK
    INCRBYFLOAT f 0 => $4\r\n3000
    INCRBYFLOAT f 3.0e3 => $4\r\n6000
    SET f 0 => +OK
    INCRBYFLOAT f 1e-17 => $19\r\n0.00000000000000001
    INCRBYFLOAT f 1e-18 => $19\r\n0.00000000000000001
    SET f 0 => +OK
    INCRBYFLOAT f 5e-18 => $1\r\n0
    INCRBYFLOAT f 1e4933 => -ERR value is not a valid float
    INCRBYFLOAT f 1e-4952 => -ERR value is not a valid float
    INCRBYFLOAT f inf => -ERR increment would produce NaN or Infinity
    INCRBYFLOAT f -inf => -ERR increment would produce NaN or Infinity
    INCRBYFLOAT f nan => -ERR value is not a valid float
    INCRBYFLOAT f 0x => -ERR value is not a valid float
    INCRBYFLOAT f 1e => -ERR value is not a valid float
    INCRBYFLOAT f \s1 => -ERR value is not a valid float
    INCRBYFLOAT f 1\s => -ERR value is not a valid float
    INCRBYFLOAT f "" => -ERR value is not a valid float
    INCRBYFLOAT f abc => -ERR value is not a valid float
    INCRBYFLOAT f 0x1.8p1 => $1\r\n3
    INCRBYFLOAT f .5 => $3\r\n3.5
    INCRBYFLOAT f 5. => $3\r\n8.5
    INCRBYFLOAT f +1 => $3\r\n9.5
    INCRBYFLOAT f -0 => $3\r\n9.5
    INCRBYFLOAT f 1e+2 => $5\r\n109.5
    INCRBYFLOAT f -109.5 => $1\r\n0
    INCRBYFLOAT f -1e-2 => $5\r\n-0.01
    SET f abc => +OK
    INCRBYFLOAT f 1 => -ERR value is not a valid float
    INCRBYFLOAT f abc => -ERR value is not a valid float
    SET f inf => +OK
    INCRBYFLOAT f 1 => -ERR increment would produce NaN or Infinity
    GET f => $3\r\ninf
    SET f 9223372036854775807 => +OK
    INCRBYFLOAT f 1 => $19\r\n9223372036854775808
    SET f 123456789012345678901234567890 => +OK
    INCRBYFLOAT f 1 => $30\r\n123456789012345678899921813504
    SET f -0.00000000000000000001 => +OK
    INCRBYFLOAT f 0 => $1\r\n0
    SET f 0.1 => +OK
    INCRBYFLOAT f 0.2 => $3\r\n0.3
    SET f 100 ex 100 => +OK
    INCRBYFLOAT f 1.5 => $5\r\n101.5
    TTL f => :100
    INCRBYFLOAT g 123456789.123456789 => $27\r\n123456789.12345678899873747
    INCRBYFLOAT h 1e30 => $31\r\n1000000000000000000024696061952
    INCRBYFLOAT h 1e14 => $31\r\n1000000000000000100011534712832
    OBJECT ENCODING h => $6\r\nembstr
    INCRBYFLOAT i 12345678901234567890123456789.5 => $29\r\n12345678901234567890421678080
    INCRBYFLOAT j 1e40 => $40\r\n9999999999999999999783686092270256259072
    OBJECT ENCODING j => $6\r\nembstr
    INCRBYFLOAT j2 1e50 => $51\r\n100000000000000000003583830118858923890798487404544
    OBJECT ENCODING j2 => $3\r\nraw
    SET z 1\x00junk => +OK
    INCRBYFLOAT z 1 => -ERR value is not a valid float
    SET z 1 => +OK
    INCRBYFLOAT z 1\x00junk => -ERR value is not a valid float
    INCRBYFLOAT z \x00 => -ERR value is not a valid float
    INCRBYFLOAT => -ERR wrong number of arguments for 'incrbyfloat' command
"#;

    #[test]
    fn incrbyfloat() {
        run_all(INCRBYFLOAT_SCRIPT);
    }
}
