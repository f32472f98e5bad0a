//! APPEND, STRLEN, GETRANGE and SETRANGE: reading and writing parts of a
//! string, with Redis's `proto-max-bulk-len` check on the length a write
//! would reach (a value modified in place becomes `raw`).

use ds::events as ev;
use engine::{Str, Value};
use resp::Args;

use crate::ctx::ShardCtx;
use crate::error::CmdError;
use crate::util::{as_str, parse_i64};

use super::str_mut;

/// Redis's `checkStringLength`: a string of `size + append` bytes must fit
/// `proto-max-bulk-len`.
fn check_string_length(size: u64, append: u64, max: u64) -> Result<(), CmdError> {
    match size.checked_add(append) {
        Some(total) if total <= max => Ok(()),
        _ => Err(CmdError::err(
            "string exceeds maximum allowed size (proto-max-bulk-len)",
        )),
    }
}

/// APPEND key value: the new length. A new key is stored as SET would
/// store it (so `int` for integers); an existing value becomes `raw`.
pub(super) fn append(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (db, key, val, max) = (ctx.db, args.get(1), args.get(2), ctx.max_bulk_len);
    let len = match ctx.shard.lookup_write(db, key) {
        Some(e) => {
            // Checked before anything changes (an error leaves the value
            // as it was stored).
            check_string_length(as_str(e)?.len() as u64, val.len() as u64, max)?;
            let v = str_mut(ctx, key).make_raw();
            v.extend_from_slice(val);
            let n = v.len();
            ctx.shard.dbs[db].signal(key);
            n
        }
        None => {
            ctx.shard.store_bytes(db, key, val, 0);
            val.len()
        }
    };
    ctx.propagate_as_is(args);
    ctx.notify(ev::STRING, "append", key);
    ctx.out.int(len as i64);
    Ok(())
}

/// STRLEN key: the value's length, 0 for a missing key.
pub(super) fn strlen(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let touch = ctx.touch();
    let n = match ctx.shard.lookup_read(ctx.db, args.get(1), touch) {
        Some(e) => as_str(e)?.len(),
        None => 0,
    };
    ctx.out.int(n as i64);
    Ok(())
}

/// GETRANGE key start end (and SUBSTR): the inclusive byte range, negative
/// offsets counting from the end; an empty string when out of range or
/// for a missing key.
pub(super) fn getrange(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let mut start = parse_i64(args.get(2))?;
    let mut end = parse_i64(args.get(3))?;
    let touch = ctx.touch();
    let Some(e) = ctx.shard.lookup_read(ctx.db, args.get(1), touch) else {
        ctx.out.bulk(b"");
        return Ok(());
    };
    let out = &mut *ctx.out;
    as_str(e)?.with_bytes(|s| {
        let len = s.len() as i64;
        if start < 0 && end < 0 && start > end {
            out.bulk(b"");
            return;
        }
        if start < 0 {
            start += len;
        }
        if end < 0 {
            end += len;
        }
        start = start.max(0);
        end = end.max(0);
        if end >= len {
            end = len - 1;
        }
        if start > end || len == 0 {
            out.bulk(b"");
        } else {
            out.bulk(&s[start as usize..=end as usize]);
        }
    });
    Ok(())
}

/// SETRANGE key offset value: overwrites from `offset`, zero-padding as
/// needed; the new length. The result is always `raw`.
pub(super) fn setrange(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let offset = parse_i64(args.get(2))?;
    if offset < 0 {
        return Err(CmdError::err("offset is out of range"));
    }
    let offset = offset as u64;
    let (db, key, val, max) = (ctx.db, args.get(1), args.get(3), ctx.max_bulk_len);
    let len = match ctx.shard.lookup_write(db, key) {
        Some(e) => {
            let s = as_str(e)?;
            if val.is_empty() {
                ctx.out.int(s.len() as i64);
                return Ok(());
            }
            check_string_length(offset, val.len() as u64, max)?;
            let v = str_mut(ctx, key).make_raw();
            write_at(v, offset as usize, val);
            let n = v.len();
            ctx.shard.dbs[db].signal(key);
            n
        }
        None => {
            if val.is_empty() {
                ctx.out.int(0);
                return Ok(());
            }
            check_string_length(offset, val.len() as u64, max)?;
            let mut v = Vec::new();
            write_at(&mut v, offset as usize, val);
            let n = v.len();
            ctx.shard
                .store(db, key, Value::Str(Str::from_vec_raw(v)), 0);
            n
        }
    };
    ctx.propagate_as_is(args);
    ctx.notify(ev::STRING, "setrange", key);
    ctx.out.int(len as i64);
    Ok(())
}

fn write_at(v: &mut Vec<u8>, offset: usize, val: &[u8]) {
    let end = offset + val.len();
    if v.len() < end {
        v.resize(end, 0);
    }
    v[offset..end].copy_from_slice(val);
}

#[cfg(test)]
mod tests {
    use crate::strings::tests::run_all;

    const RANGE_SCRIPT: &str = r#"
    APPEND x abc => :3
    OBJECT ENCODING x => $6\r\nembstr
    APPEND x def => :6
    OBJECT ENCODING x => $3\r\nraw
    GET x => $6\r\nabcdef
    APPEND y 123 => :3
    OBJECT ENCODING y => $3\r\nint
    APPEND y "" => :3
    OBJECT ENCODING y => $3\r\nraw
    APPEND y 4 => :4
    GET y => $4\r\n1234
    STRLEN y => :4
    STRLEN nokey => :0
    SETEX t 100 a => +OK
    APPEND t b => :2
    TTL t => :100
    SET i 12345 => +OK
    STRLEN i => :5
    GETRANGE i 0 -1 => $5\r\n12345
    GETRANGE i 1 2 => $2\r\n23
    GETRANGE i -3 -1 => $3\r\n345
    GETRANGE i -1 -3 => $0\r\n
    GETRANGE i 3 1 => $0\r\n
    GETRANGE i 100 200 => $0\r\n
    GETRANGE i -100 2 => $3\r\n123
    GETRANGE i 0 100 => $5\r\n12345
    GETRANGE nokey 0 1 => $0\r\n
    GETRANGE nokey a 1 => -ERR value is not an integer or out of range
    GETRANGE i a 1 => -ERR value is not an integer or out of range
    GETRANGE i 0 b => -ERR value is not an integer or out of range
    GETRANGE i 0 9223372036854775807 => $5\r\n12345
    GETRANGE i -9223372036854775808 -9223372036854775808 => $1\r\n1
    GETRANGE i 9223372036854775808 1 => -ERR value is not an integer or out of range
    SUBSTR i 1 3 => $3\r\n234
    SUBSTR i 1 => -ERR wrong number of arguments for 'substr' command
    OBJECT ENCODING i => $3\r\nint
    SET e "" => +OK
    GETRANGE e 0 -1 => $0\r\n
    GETRANGE e 0 0 => $0\r\n
    GETRANGE e -1 -1 => $0\r\n
    SETRANGE k 0 "" => :0
    EXISTS k => :0
    SETRANGE k 5 "" => :0
    SETRANGE k -1 x => -ERR offset is out of range
    SETRANGE k abc x => -ERR value is not an integer or out of range
    SETRANGE k 3 abc => :6
    GET k => $6\r\n\x00\x00\x00abc
    OBJECT ENCODING k => $3\r\nraw
    SETRANGE k 1 Z => :6
    GET k => $6\r\n\x00Z\x00abc
    SET s hello => +OK
    SETRANGE s 1 "" => :5
    OBJECT ENCODING s => $6\r\nembstr
    SETRANGE s 1 EL => :5
    GET s => $5\r\nhELlo
    OBJECT ENCODING s => $3\r\nraw
    SETRANGE s 7 ! => :8
    GET s => $8\r\nhELlo\x00\x00!
    SET n 12345 => +OK
    SETRANGE n 0 9 => :5
    OBJECT ENCODING n => $3\r\nraw
    GET n => $5\r\n92345
    SET n 12345 => +OK
    SETRANGE n 0 "" => :5
    OBJECT ENCODING n => $3\r\nint
    SETRANGE big 536870912 x => -ERR string exceeds maximum allowed size (proto-max-bulk-len)
    SETRANGE big 536870911 xx => -ERR string exceeds maximum allowed size (proto-max-bulk-len)
    SETRANGE k 9223372036854775807 x => -ERR string exceeds maximum allowed size (proto-max-bulk-len)
    SETRANGE k 9223372036854775808 x => -ERR value is not an integer or out of range
    EXISTS big => :0
    SETEX t 100 abc => +OK
    SETRANGE t 1 X => :3
    TTL t => :100
"#;

    #[test]
    fn append_strlen_ranges() {
        run_all(RANGE_SCRIPT);
    }
}
