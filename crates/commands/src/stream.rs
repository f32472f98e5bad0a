//! Stream commands (Redis 7.0's `t_stream.c`): XADD, XRANGE, XREVRANGE,
//! XLEN, XDEL, XTRIM, XSETID, XREAD and XREADGROUP here; consumer groups
//! (XGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM) in `stream/group.rs`;
//! XINFO in `stream/info.rs`. Request path.
//!
//! The type and its encoding live in `engine::types::stream`; handlers
//! parse in Redis's order of checks, then act, then reply.
//!
//! Propagation (the AOF) follows Redis 7.0, written by the handlers
//! themselves into the effects outbox (`ShardCtx::propagate`), never re-derived from the
//! reply: XADD logs the ID it generated and an approximate trim as the
//! exact one that results (`MAXLEN = <length>` / `MINID = <first id>`);
//! XREADGROUP logs each delivery as `XCLAIM ... FORCE JUSTID LASTID`, a
//! NOACK read as `XGROUP CREATECONSUMER` + `XGROUP SETID ... ENTRIESREAD`;
//! XCLAIM and XAUTOCLAIM log the same XCLAIM form per claimed entry.
//! Differences: an approximate trim's `LIMIT` is dropped from the record
//! (Redis keeps it, relying on AOF loading accepting LIMIT with `=`), and
//! several records of one command are not wrapped in MULTI/EXEC.
//!
//! Blocking: XREAD/XREADGROUP with BLOCK block through `ShardCtx::block_on`
//! like BLPOP; XREAD's `$` is resolved to the stream's last ID when it
//! blocks (the arguments run again carry the ID). A re-run served because
//! a key became ready (`ctx.ready`) reads that key only, at most COUNT
//! entries (1000 without COUNT, Redis's `XREAD_BLOCKED_DEFAULT_COUNT`),
//! and fails as Redis does when the stream or the group went away.

mod group;
mod info;

use engine::types::stream::{Elem, NodeLimits, Stream, StreamId, TrimTo};
use engine::{Entry, Value, ValueRef};
use resp::{Args, OwnedArgs, Reply};

use crate::ctx::ShardCtx;
use crate::error::CmdError;
use crate::table::{flags::*, keys, CommandSpec, Exec, ShardHandler, NO_KEYS};
use crate::util::{eq_ic, parse_i64};

const fn cmd(
    name: &'static str,
    arity: i32,
    flags: u32,
    h: ShardHandler,
    acl: &'static [&'static str],
) -> CommandSpec {
    CommandSpec::new(name, arity, flags, keys(1, 1, 1), Exec::Shard(h, None), acl)
}

const W_FAST: &[&str] = &["write", "stream", "fast"];
const W_SLOW: &[&str] = &["write", "stream", "slow"];
const R_FAST: &[&str] = &["read", "stream", "fast"];
const R_SLOW: &[&str] = &["read", "stream", "slow"];

#[rustfmt::skip]
pub(crate) const COMMANDS: &[CommandSpec] = &[
    cmd("xadd",      -5, WRITE | DENYOOM | FAST, xadd,      W_FAST),
    cmd("xrange",    -4, READONLY,               xrange,    R_SLOW),
    cmd("xrevrange", -4, READONLY,               xrevrange, R_SLOW),
    cmd("xlen",       2, READONLY | FAST,        xlen,      R_FAST),
    cmd("xdel",      -3, WRITE | FAST,           xdel,      W_FAST),
    cmd("xtrim",     -4, WRITE,                  xtrim,     W_SLOW),
    cmd("xsetid",    -3, WRITE | DENYOOM | FAST, xsetid,    W_FAST),
    CommandSpec::new("xread", -4, READONLY | BLOCKING | MOVABLE_KEYS, NO_KEYS,
                     Exec::Shard(xread, None), &["read", "stream", "slow", "blocking"])
        .with_getkeys(xread_keys),
    CommandSpec::new("xreadgroup", -7, WRITE | BLOCKING | MOVABLE_KEYS, NO_KEYS,
                     Exec::Shard(xreadgroup, None), &["write", "stream", "slow", "blocking"])
        .with_getkeys(xread_keys),
    cmd("xack",      -4, WRITE | FAST,           group::xack,       W_FAST),
    cmd("xpending",  -3, READONLY,               group::xpending,   R_SLOW),
    cmd("xclaim",    -6, WRITE | FAST,           group::xclaim,     W_FAST),
    cmd("xautoclaim", -6, WRITE | FAST,          group::xautoclaim, W_FAST),
    CommandSpec::parent("xgroup", -2, 0, &["slow"], group::XGROUP),
    CommandSpec::parent("xinfo", -2, 0, &["slow"], info::XINFO),
];

// ------------------------------------------------------------ shared parts

/// Redis's `XREAD_BLOCKED_DEFAULT_COUNT`.
const BLOCKED_DEFAULT_COUNT: usize = 1000;

/// Keyspace events of this family (`t`).
pub(crate) const STREAM_EV: u32 = ds::events::STREAM;

fn invalid_id() -> CmdError {
    CmdError::err("Invalid stream ID specified as stream command argument")
}

/// The stream value of an entry, or WRONGTYPE.
pub(crate) fn as_stream(e: &Entry) -> Result<&Stream, CmdError> {
    match e.value() {
        ValueRef::Stream(s) => Ok(s),
        _ => Err(CmdError::WrongType),
    }
}

pub(crate) fn as_stream_mut(e: &mut Entry) -> Result<&mut Stream, CmdError> {
    if !matches!(e.value(), ValueRef::Stream(_)) {
        return Err(CmdError::WrongType);
    }
    match e.value_mut() {
        Value::Stream(s) => Ok(s),
        _ => Err(CmdError::WrongType),
    }
}

/// C's `strtoull` over the whole argument, as Redis's `string2ull`:
/// leading white space, a sign (a `-` negates, wrapping), decimal digits
/// to the end, no overflow; canonical negatives are refused first.
fn string2ull(s: &[u8]) -> Option<u64> {
    if let Some(v) = ds::string2ll(s) {
        return u64::try_from(v).ok();
    }
    let mut i = 0;
    while i < s.len() && matches!(s[i], b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
        i += 1;
    }
    let mut neg = false;
    if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
        neg = s[i] == b'-';
        i += 1;
    }
    let start = i;
    let mut v: u64 = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        v = v.checked_mul(10)?.checked_add(u64::from(s[i] - b'0'))?;
        i += 1;
    }
    if i == start || i != s.len() {
        return None;
    }
    Some(if neg { v.wrapping_neg() } else { v })
}

/// Redis's `streamGenericParseIDOrReply`. `strict`: `-` and `+` are
/// invalid. `missing_seq`: the sequence of a bare `<ms>`. `seq_given`:
/// when given, `<ms>-*` is accepted and reported as false.
fn parse_id_generic(
    arg: &[u8],
    strict: bool,
    missing_seq: u64,
    seq_given: Option<&mut bool>,
) -> Result<StreamId, CmdError> {
    if arg.len() > 127 {
        return Err(invalid_id());
    }
    // C string semantics: the argument ends at its first NUL.
    let arg = &arg[..arg.iter().position(|&b| b == 0).unwrap_or(arg.len())];
    if strict && (arg == b"-" || arg == b"+") {
        return Err(invalid_id());
    }
    let mut seq_given = seq_given;
    if let Some(g) = seq_given.as_deref_mut() {
        *g = true;
    }
    if arg == b"-" {
        return Ok(StreamId::MIN);
    }
    if arg == b"+" {
        return Ok(StreamId::MAX);
    }
    let (ms_part, seq_part) = match arg.iter().position(|&b| b == b'-') {
        Some(p) => (&arg[..p], Some(&arg[p + 1..])),
        None => (arg, None),
    };
    let ms = string2ull(ms_part).ok_or_else(invalid_id)?;
    let seq = match seq_part {
        Some(b"*") if seq_given.is_some() => {
            if let Some(g) = seq_given {
                *g = false;
            }
            0
        }
        Some(s) => string2ull(s).ok_or_else(invalid_id)?,
        None => missing_seq,
    };
    Ok(StreamId::new(ms, seq))
}

/// A plain ID argument (`-`/`+` allowed), Redis's `streamParseIDOrReply`.
pub(crate) fn parse_id(arg: &[u8], missing_seq: u64) -> Result<StreamId, CmdError> {
    parse_id_generic(arg, false, missing_seq, None)
}

/// Redis's `streamParseStrictIDOrReply` (`-`/`+` refused).
pub(crate) fn parse_strict_id(arg: &[u8]) -> Result<StreamId, CmdError> {
    parse_id_generic(arg, true, 0, None)
}

/// A range bound with an optional `(` (exclusive), Redis's
/// `streamParseIntervalIDOrReply` followed by the increment/decrement.
pub(crate) fn parse_range_bound(arg: &[u8], start: bool) -> Result<StreamId, CmdError> {
    let exclusive = arg.len() > 1 && arg[0] == b'(';
    let missing_seq = if start { 0 } else { u64::MAX };
    if !exclusive {
        return parse_id(arg, missing_seq);
    }
    // An exclusive bound is parsed strictly: `(-` and `(+` are invalid.
    let id = parse_id_generic(&arg[1..], true, missing_seq, None)?;
    if start {
        id.incr()
            .ok_or_else(|| CmdError::err("invalid start ID for the interval"))
    } else {
        id.decr()
            .ok_or_else(|| CmdError::err("invalid end ID for the interval"))
    }
}

/// Milliseconds from `t` to `now`, as Redis's `mstime_t` subtraction: the
/// times are signed 64-bit and the difference wraps (a time loaded from a
/// payload may be anything), so callers clamp it as Redis does.
pub(crate) fn elapsed_ms(now: u64, t: u64) -> i64 {
    (now as i64).wrapping_sub(t as i64)
}

/// An ID spelled `ms-seq` on the stack (replies write one per entry: no
/// allocation for it).
pub(crate) struct IdText {
    buf: [u8; 41],
    len: usize,
}

impl IdText {
    pub(crate) fn new(id: StreamId) -> Self {
        let mut buf = [0u8; 41];
        let mut i = itoa::Buffer::new();
        let ms = i.format(id.ms).as_bytes();
        buf[..ms.len()].copy_from_slice(ms);
        buf[ms.len()] = b'-';
        let at = ms.len() + 1;
        let seq = i.format(id.seq).as_bytes();
        buf[at..at + seq.len()].copy_from_slice(seq);
        IdText {
            buf,
            len: at + seq.len(),
        }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

pub(crate) fn id_bulk(out: &mut Reply, id: StreamId) {
    out.bulk(IdText::new(id).as_bytes());
}

fn elem_bulk(out: &mut Reply, e: Elem<'_>) {
    match e {
        Elem::Str(s) => out.bulk(s),
        Elem::Int(n) => out.bulk_int(n),
    }
}

/// One entry: `[id, [field, value, ...]]`.
pub(crate) fn reply_entry(out: &mut Reply, id: StreamId, fields: &[(Elem<'_>, Elem<'_>)]) {
    out.array(2);
    id_bulk(out, id);
    out.array(fields.len() * 2);
    for (f, v) in fields {
        elem_bulk(out, *f);
        elem_bulk(out, *v);
    }
}

/// Writes the entries of `s` from `start` to `end` (at most `count`, 0 =
/// all) as an array; returns the IDs written.
pub(crate) fn reply_range(
    out: &mut Reply,
    s: &Stream,
    start: StreamId,
    end: StreamId,
    count: usize,
    rev: bool,
) -> Vec<StreamId> {
    let mut body = Reply::new(out.resp3());
    let mut ids = Vec::new();
    s.range(start, end, rev, |id, fields| {
        reply_entry(&mut body, id, fields);
        ids.push(id);
        count == 0 || ids.len() < count
    });
    out.array(ids.len());
    out.raw(body.as_bytes());
    ids
}

/// A `NOGROUP ...` line echoing client bytes (as Redis's `%s`).
pub(crate) fn nogroup_err(parts: &[&[u8]], tail: &[u8]) -> CmdError {
    let mut line = b"NOGROUP ".to_vec();
    for p in parts {
        line.extend_from_slice(&p[..p.iter().position(|&b| b == 0).unwrap_or(p.len())]);
    }
    line.extend_from_slice(tail);
    CmdError::Bytes(line)
}

fn node_limits(ctx: &ShardCtx<'_>) -> NodeLimits {
    ctx.shard.enc.stream_node
}

// ------------------------------------------------------------ XADD / XTRIM

/// What XADD/XTRIM's options say (Redis's `streamAddTrimArgs`).
struct AddTrim {
    trim: Option<TrimTo>,
    approx: bool,
    limit: i64,
    /// Index of the trim value (MAXLEN's count, MINID's id).
    trim_at: usize,
    limit_at: Option<usize>,
    no_mkstream: bool,
    id: Option<StreamId>,
    seq_given: bool,
    /// Index of the ID argument (XADD).
    id_at: usize,
}

/// Redis 7.0's `streamParseAddOrTrimArgsOrReply`.
fn parse_add_trim(ctx: &ShardCtx<'_>, args: Args<'_>, xadd: bool) -> Result<AddTrim, CmdError> {
    let mut a = AddTrim {
        trim: None,
        approx: false,
        limit: 0,
        trim_at: 0,
        limit_at: None,
        no_mkstream: false,
        id: None,
        seq_given: true,
        id_at: 0,
    };
    let argc = args.len();
    let mut limit_given = false;
    let mut i = 2;
    while i < argc {
        let more = argc - 1 - i;
        let opt = args.get(i);
        if xadd && opt == b"*" {
            break;
        } else if (eq_ic(opt, "maxlen") || eq_ic(opt, "minid")) && more > 0 {
            if a.trim.is_some() {
                return Err(CmdError::err(
                    "syntax error, MAXLEN and MINID options at the same time are not compatible",
                ));
            }
            a.approx = false;
            let next = args.get(i + 1);
            if more >= 2 && next == b"~" {
                a.approx = true;
                i += 1;
            } else if more >= 2 && next == b"=" {
                i += 1;
            }
            let v = args.get(i + 1);
            if eq_ic(opt, "maxlen") {
                let n = parse_i64(v)?;
                if n < 0 {
                    return Err(CmdError::err("The MAXLEN argument must be >= 0."));
                }
                a.trim = Some(TrimTo::MaxLen(n as u64));
            } else {
                a.trim = Some(TrimTo::MinId(parse_strict_id(v)?));
            }
            i += 1;
            a.trim_at = i;
        } else if eq_ic(opt, "limit") && more > 0 {
            let n = parse_i64(args.get(i + 1))?;
            if n < 0 {
                return Err(CmdError::err("The LIMIT argument must be >= 0."));
            }
            a.limit = n;
            limit_given = true;
            a.limit_at = Some(i);
            i += 1;
        } else if xadd && eq_ic(opt, "nomkstream") {
            a.no_mkstream = true;
        } else if xadd {
            let mut seq_given = true;
            a.id = Some(parse_id_generic(opt, true, 0, Some(&mut seq_given))?);
            a.seq_given = seq_given;
            break;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    a.id_at = i;
    if a.limit != 0 && a.trim.is_none() {
        return Err(CmdError::err(
            "syntax error, LIMIT cannot be used without specifying a trimming strategy",
        ));
    }
    if !xadd && a.trim.is_none() {
        return Err(CmdError::err(
            "syntax error, XTRIM must be called with a trimming strategy",
        ));
    }
    if limit_given {
        if !a.approx {
            return Err(CmdError::err(
                "syntax error, LIMIT cannot be used without the special ~ option",
            ));
        }
    } else if a.approx {
        let per = ctx.shard.enc.stream_node.max_entries;
        a.limit = per.saturating_mul(100);
        if a.limit <= 0 || a.limit > 10_000 {
            a.limit = 10_000;
        }
    } else {
        a.limit = 0;
    }
    Ok(a)
}

/// The trim value logged for an approximate trim: the exact one reached.
fn trim_value(s: &Stream, to: TrimTo) -> String {
    match to {
        TrimTo::MaxLen(_) => s.length.to_string(),
        TrimTo::MinId(_) => s
            .nodes()
            .next()
            .map(|(m, lp)| {
                engine::types::stream::node::entries(lp, m)
                    .first()
                    .map_or(m, |e| e.id)
            })
            .unwrap_or(StreamId::MIN)
            .to_string(),
    }
}

/// The record of an XADD/XTRIM: `id` replaces the ID argument (XADD), an
/// approximate trim becomes the exact one reached, LIMIT is dropped.
fn add_trim_record(
    args: Args<'_>,
    a: &AddTrim,
    id: Option<&str>,
    trimmed_to: Option<&str>,
) -> Vec<Vec<u8>> {
    let mut v = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        if Some(i) == a.limit_at && trimmed_to.is_some() {
            i += 2;
            continue;
        }
        let arg = args.get(i);
        let new: &[u8] = match (id, trimmed_to) {
            (Some(id), _) if i == a.id_at && id.as_bytes() != arg => id.as_bytes(),
            (_, Some(_)) if a.trim.is_some() && i + 1 == a.trim_at => b"=",
            (_, Some(t)) if a.trim.is_some() && i == a.trim_at => t.as_bytes(),
            _ => arg,
        };
        v.push(new.to_vec());
        i += 1;
    }
    v
}

/// XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT count]]
/// *|id field value [field value ...]: the new entry's ID; null with
/// NOMKSTREAM on a missing key.
fn xadd(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let a = parse_add_trim(ctx, args, true)?;
    let field_pos = a.id_at + 1;
    let argc = args.len();
    if argc < field_pos + 2 || (argc - field_pos) % 2 == 1 {
        return Err(CmdError::WrongArity("xadd".into()));
    }
    if a.id.is_some() && a.seq_given && a.id == Some(StreamId::MIN) {
        return Err(CmdError::err(
            "The ID specified in XADD must be greater than 0-0",
        ));
    }
    let (db, key) = (ctx.db, args.get(1));
    // The stream's last ID (a new one is empty), or WRONGTYPE.
    let last = match ctx.shard.lookup_write(db, key) {
        Some(e) => Some(as_stream(e)?.last_id),
        None => None,
    };
    let exists = last.is_some();
    let last = last.unwrap_or(StreamId::MIN);
    if !exists && a.no_mkstream {
        ctx.out.null();
        return Ok(());
    }
    let now = ctx.shard.now_ms;
    let lim = node_limits(ctx);
    let fields: Vec<(&[u8], &[u8])> = (field_pos..argc)
        .step_by(2)
        .map(|i| (args.get(i), args.get(i + 1)))
        .collect();
    let tot: usize = fields.iter().map(|(f, v)| f.len() + v.len()).sum();
    if last == StreamId::MAX {
        return Err(CmdError::err(
            "The stream has exhausted the last possible ID, unable to add more items",
        ));
    }
    let top_err = || {
        CmdError::err(
            "The ID specified in XADD is equal or smaller than the target stream top item",
        )
    };
    let id = match a.id {
        Some(id) if a.seq_given => id,
        Some(id) => {
            if last.ms == id.ms {
                if last.seq == u64::MAX {
                    // Redis 7.0.15 reports this overflow so.
                    return Err(CmdError::err("Elements are too large to be stored"));
                }
                StreamId::new(last.ms, last.seq + 1)
            } else {
                id
            }
        }
        None => {
            if now > last.ms {
                StreamId::new(now, 0)
            } else {
                // INVARIANT: `last` is not the largest ID (checked above).
                last.incr().unwrap_or(StreamId::MAX)
            }
        }
    };
    if id <= last {
        return Err(top_err());
    }
    if tot > engine::types::stream::LISTPACK_MAX_SIZE {
        return Err(CmdError::err("Elements are too large to be stored"));
    }
    if !exists {
        ctx.shard
            .store(db, key, Value::Stream(Box::new(Stream::new())), 0);
    }
    let s = match ctx.shard.dbs[db].get_mut(key) {
        Some(e) => as_stream_mut(e)?,
        None => return Err(CmdError::WrongType),
    };
    s.append(id, &fields, lim);
    let trimmed = match a.trim {
        Some(to) => s.trim(to, a.approx, a.limit),
        None => 0,
    };
    let trimmed_to =
        (a.trim.is_some() && a.approx).then(|| trim_value(s, a.trim.unwrap_or(TrimTo::MaxLen(0))));
    let d = &mut ctx.shard.dbs[db];
    d.dirty += 1 + trimmed;
    d.signal(key);
    d.signal_ready(key);
    ctx.notify(STREAM_EV, "xadd", key);
    if trimmed > 0 {
        ctx.notify(STREAM_EV, "xtrim", key);
    }
    let id_s = IdText::new(id);
    ctx.out.bulk(id_s.as_bytes());
    // The record only when something logs it (it copies every argument).
    if ctx.shard.outbox.records_on {
        let id_s = std::str::from_utf8(id_s.as_bytes()).unwrap_or_default();
        let rec = add_trim_record(args, &a, Some(id_s), trimmed_to.as_deref());
        let rec: Vec<&[u8]> = rec.iter().map(Vec::as_slice).collect();
        ctx.propagate(&rec);
    } else {
        ctx.propagate_none();
    }
    Ok(())
}

/// XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT count]: entries removed.
fn xtrim(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let a = parse_add_trim(ctx, args, false)?;
    let (db, key) = (ctx.db, args.get(1));
    let Some(e) = ctx.shard.lookup_write(db, key) else {
        ctx.out.int(0);
        return Ok(());
    };
    let s = as_stream_mut(e)?;
    let to = a.trim.unwrap_or(TrimTo::MaxLen(u64::MAX));
    let n = s.trim(to, a.approx, a.limit);
    let trimmed_to = a.approx.then(|| trim_value(s, to));
    ctx.out.int(n as i64);
    if n > 0 {
        let d = &mut ctx.shard.dbs[db];
        d.dirty += n;
        d.signal(key);
        ctx.notify(STREAM_EV, "xtrim", key);
        let rec = add_trim_record(args, &a, None, trimmed_to.as_deref());
        let rec: Vec<&[u8]> = rec.iter().map(Vec::as_slice).collect();
        ctx.propagate(&rec);
    }
    Ok(())
}

// --------------------------------------------------------- reads and edits

fn xrange_generic(ctx: &mut ShardCtx<'_>, args: Args<'_>, rev: bool) -> Result<(), CmdError> {
    let (start_arg, end_arg) = if rev {
        (args.get(3), args.get(2))
    } else {
        (args.get(2), args.get(3))
    };
    let start = parse_range_bound(start_arg, true)?;
    let end = parse_range_bound(end_arg, false)?;
    let mut count: i64 = -1;
    let mut j = 4;
    while j < args.len() {
        if eq_ic(args.get(j), "count") && j + 1 < args.len() {
            count = parse_i64(args.get(j + 1))?.max(0);
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let touch = ctx.touch();
    let Some(e) = ctx.shard.lookup_read(ctx.db, args.get(1), touch) else {
        ctx.out.array(0);
        return Ok(());
    };
    let s = as_stream(e)?;
    if count == 0 {
        ctx.out.null_array();
        return Ok(());
    }
    let count = if count < 0 { 0 } else { count as usize };
    reply_range(ctx.out, s, start, end, count, rev);
    Ok(())
}

/// XRANGE key start end [COUNT count]
fn xrange(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    xrange_generic(ctx, args, false)
}

/// XREVRANGE key end start [COUNT count]
fn xrevrange(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    xrange_generic(ctx, args, true)
}

/// XLEN key: live entries, 0 for a missing key.
fn xlen(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let touch = ctx.touch();
    let n = match ctx.shard.lookup_read(ctx.db, args.get(1), touch) {
        Some(e) => as_stream(e)?.len(),
        None => 0,
    };
    ctx.out.int(n as i64);
    Ok(())
}

/// XDEL key id [id ...]: entries deleted. Every ID is parsed before any
/// is deleted.
fn xdel(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (db, key) = (ctx.db, args.get(1));
    let Some(e) = ctx.shard.lookup_write(db, key) else {
        ctx.out.int(0);
        return Ok(());
    };
    as_stream(e)?;
    let ids = (2..args.len())
        .map(|i| parse_strict_id(args.get(i)))
        .collect::<Result<Vec<_>, _>>()?;
    let s = as_stream_mut(e)?;
    let (mut deleted, mut first) = (0u64, false);
    for id in ids {
        if s.delete(id) {
            first |= id == s.first_id;
            if id > s.max_deleted_id {
                s.max_deleted_id = id;
            }
            deleted += 1;
        }
    }
    if deleted > 0 {
        if s.length == 0 {
            s.first_id = StreamId::MIN;
        } else if first {
            s.first_id = s.edge_id(true).unwrap_or_default();
        }
        let d = &mut ctx.shard.dbs[db];
        d.dirty += deleted;
        d.signal(key);
        ctx.propagate_as_is(args);
        ctx.notify(STREAM_EV, "xdel", key);
    }
    ctx.out.int(deleted as i64);
    Ok(())
}

/// XSETID key last-id [ENTRIESADDED entries-added] [MAXDELETEDID id]
fn xsetid(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let id = parse_strict_id(args.get(2))?;
    let mut added: i64 = -1;
    let mut max_del = StreamId::MIN;
    let mut i = 3;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let opt = args.get(i);
        if eq_ic(opt, "entriesadded") && more > 0 {
            added = parse_i64(args.get(i + 1))?;
            if added < 0 {
                return Err(CmdError::err("entries_added must be positive"));
            }
        } else if eq_ic(opt, "maxdeletedid") && more > 0 {
            max_del = parse_strict_id(args.get(i + 1))?;
            if id < max_del {
                return Err(CmdError::err(
                    "The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
                ));
            }
        } else {
            return Err(CmdError::Syntax);
        }
        i += 2;
    }
    let (db, key) = (ctx.db, args.get(1));
    let Some(e) = ctx.shard.lookup_write(db, key) else {
        return Err(CmdError::NoSuchKey);
    };
    let s = as_stream_mut(e)?;
    if id < s.max_deleted_id {
        return Err(CmdError::err(
            "The ID specified in XSETID is smaller than current max_deleted_entry_id",
        ));
    }
    if s.length > 0 {
        let top = s.edge_id(false).unwrap_or_default();
        if id < top {
            return Err(CmdError::err(
                "The ID specified in XSETID is smaller than the target stream top item",
            ));
        }
        if added != -1 && s.length > added as u64 {
            return Err(CmdError::err(
                "The entries_added specified in XSETID is smaller than the target stream length",
            ));
        }
    }
    s.last_id = id;
    if added != -1 {
        s.entries_added = added as u64;
    }
    if !max_del.is_zero() {
        s.max_deleted_id = max_del;
    }
    let d = &mut ctx.shard.dbs[db];
    d.dirty += 1;
    d.signal(key);
    ctx.propagate_as_is(args);
    ctx.out.ok();
    ctx.notify(STREAM_EV, "xsetid", key);
    Ok(())
}

// ------------------------------------------------------------ XREAD(GROUP)

/// The key positions of XREAD/XREADGROUP: after STREAMS, the first half.
fn xread_keys(args: Args<'_>) -> Vec<usize> {
    let mut i = 1;
    while i < args.len() {
        let a = args.get(i);
        if eq_ic(a, "streams") {
            let first = i + 1;
            let n = (args.len() - first) / 2;
            return (first..first + n).collect();
        }
        if eq_ic(a, "block") || eq_ic(a, "count") {
            i += 2;
        } else if eq_ic(a, "group") {
            i += 3;
        } else {
            i += 1;
        }
    }
    Vec::new()
}

/// A read's target ID per stream.
#[derive(Clone, Copy, PartialEq)]
enum ReadFrom {
    After(StreamId),
    /// `$`: resolved against the stream when the command runs.
    Last,
    /// `>`: the group's next undelivered entries.
    New,
}

struct ReadArgs<'a> {
    deadline_ms: Option<u64>,
    count: usize,
    group: Option<(&'a [u8], &'a [u8])>,
    noack: bool,
    streams_at: usize,
    n: usize,
    ids: Vec<ReadFrom>,
}

/// Redis 7.0's `xreadCommand` argument parsing (before any lookup).
/// `script`: called from a script, where BLOCK is refused as it is met
/// (Redis keeps this error for Lua rather than just not blocking).
fn parse_read(args: Args<'_>, xreadgroup: bool, script: bool) -> Result<ReadArgs<'_>, CmdError> {
    let mut r = ReadArgs {
        deadline_ms: None,
        count: 0,
        group: None,
        noack: false,
        streams_at: 0,
        n: 0,
        ids: Vec::new(),
    };
    let argc = args.len();
    let mut i = 1;
    while i < argc {
        let more = argc - i - 1;
        let o = args.get(i);
        if eq_ic(o, "block") && more > 0 {
            if script {
                return Err(CmdError::err(format!(
                    "{} command is not allowed with BLOCK option from scripts",
                    String::from_utf8_lossy(args.get(0))
                )));
            }
            i += 1;
            let ms = parse_block_ms(args.get(i))?;
            // From the clock now (Redis reads it here): the loop's cached
            // one may be milliseconds old, and the wait would end early.
            r.deadline_ms = Some(if ms == 0 {
                0
            } else {
                engine::now_ms().saturating_add(ms)
            });
        } else if eq_ic(o, "count") && more > 0 {
            i += 1;
            r.count = parse_i64(args.get(i))?.max(0) as usize;
        } else if eq_ic(o, "streams") && more > 0 {
            r.streams_at = i + 1;
            let n = argc - r.streams_at;
            if !n.is_multiple_of(2) {
                let (name, sym) = if xreadgroup {
                    ("XREADGROUP", '>')
                } else {
                    ("XREAD", '$')
                };
                return Err(CmdError::err(format!(
                    "Unbalanced {name} list of streams: for each stream key an ID or '{sym}' must be specified."
                )));
            }
            r.n = n / 2;
            break;
        } else if eq_ic(o, "group") && more >= 2 {
            if !xreadgroup {
                return Err(CmdError::err(
                    "The GROUP option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            r.group = Some((args.get(i + 1), args.get(i + 2)));
            i += 2;
        } else if eq_ic(o, "noack") {
            if !xreadgroup {
                return Err(CmdError::err(
                    "The NOACK option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            r.noack = true;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    if r.streams_at == 0 {
        return Err(CmdError::Syntax);
    }
    if xreadgroup && r.group.is_none() {
        return Err(CmdError::err("Missing GROUP option for XREADGROUP"));
    }
    Ok(r)
}

/// BLOCK's milliseconds (Redis's `getTimeoutFromObjectOrReply` in
/// milliseconds): an integer, not negative; 0 = forever.
fn parse_block_ms(arg: &[u8]) -> Result<u64, CmdError> {
    let v = ds::string2ll(arg)
        .ok_or_else(|| CmdError::err("timeout is not an integer or out of range"))?;
    if v < 0 {
        return Err(CmdError::err("timeout is negative"));
    }
    Ok(v as u64)
}

/// XREAD [COUNT count] [BLOCK ms] STREAMS key [key ...] id [id ...]
fn xread(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    xread_generic(ctx, args, false)
}

/// XREADGROUP GROUP group consumer [COUNT count] [BLOCK ms] [NOACK]
/// STREAMS key [key ...] id [id ...]
fn xreadgroup(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    xread_generic(ctx, args, true)
}

fn xread_generic(ctx: &mut ShardCtx<'_>, args: Args<'_>, xreadgroup: bool) -> Result<(), CmdError> {
    let mut r = parse_read(args, xreadgroup, ctx.from_script())?;
    let (db, n, sa) = (ctx.db, r.n, r.streams_at);
    let key = |i: usize| args.get(sa + i);
    // A blocked reader served because a key became ready (module docs).
    if let Some(ready) = ctx.ready {
        if let Some((g, _)) = r.group {
            let gone = match ctx.shard.lookup_write(db, ready) {
                Some(e) => match e.value() {
                    ValueRef::Stream(s) => {
                        if !s.groups.contains_key(g) {
                            return Err(CmdError::Raw(
                                "NOGROUP the consumer group this client was blocked on no longer exists"
                                    .into(),
                            ));
                        }
                        false
                    }
                    _ => true,
                },
                None => true,
            };
            if gone {
                return Err(CmdError::Raw(
                    "UNBLOCKED the stream key no longer exists".into(),
                ));
            }
        }
    }
    for i in 0..n {
        let k = key(i);
        let idarg = args.get(sa + n + i);
        let e = ctx.shard.lookup_write(db, k);
        let s = match e {
            // A woken reader whose key is no stream now (a MULTI replaced
            // it) keeps waiting, as Redis 7.0 serves only the clients
            // blocked for the key's type.
            Some(e) if ctx.ready.is_some() => as_stream(e).ok(),
            Some(e) => Some(as_stream(e)?),
            None => None,
        };
        if let Some((g, _)) = r.group {
            if s.is_none_or(|s| !s.groups.contains_key(g)) {
                return Err(nogroup_err(
                    &[b"No such key '", k, b"' or consumer group '", g],
                    b"' in XREADGROUP with GROUP option",
                ));
            }
        }
        if idarg == b"$" {
            if xreadgroup {
                return Err(CmdError::err("The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set."));
            }
            r.ids.push(ReadFrom::Last);
            continue;
        }
        if idarg == b">" {
            if !xreadgroup {
                return Err(CmdError::err("The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option."));
            }
            r.ids.push(ReadFrom::New);
            continue;
        }
        r.ids.push(ReadFrom::After(parse_strict_id(idarg)?));
    }
    let now = ctx.shard.now_ms;
    let count = if ctx.ready.is_some() && r.count == 0 {
        BLOCKED_DEFAULT_COUNT
    } else {
        r.count
    };
    let mut body = Reply::new(ctx.out.resp3());
    let mut served = 0usize;
    // Resolved `$` IDs, for the arguments a blocked XREAD runs again with.
    let mut resolved: Vec<Option<StreamId>> = vec![None; n];
    for (i, slot) in resolved.iter_mut().enumerate() {
        if r.ids[i] == ReadFrom::Last {
            let last = match ctx.shard.dbs[db].get(key(i)) {
                Some(e) => as_stream(e).map_or(StreamId::MIN, |s| s.last_id),
                None => StreamId::MIN,
            };
            *slot = Some(last);
        }
    }
    for i in 0..n {
        let k = key(i);
        if ctx.ready.is_some_and(|rk| rk != k) {
            continue;
        }
        let Some(e) = ctx.shard.dbs[db].get_mut(k) else {
            continue;
        };
        let Value::Stream(s) = e.value_mut() else {
            continue;
        };
        if let Some((g, c)) = r.group {
            let done = group::read_group(
                s,
                g,
                c,
                r.ids[i],
                count,
                r.noack,
                now,
                ctx.ready.is_some(),
                &mut body,
                k,
                ctx.shard.outbox.records_on,
            );
            if done.served {
                served += 1;
            }
            if done.changed {
                ctx.shard.dbs[db].dirty += 1;
                ctx.shard.dbs[db].signal(k);
            }
            if done.created {
                ctx.notify(STREAM_EV, "xgroup-createconsumer", k);
            }
            if done.changed && done.records.is_empty() {
                // A history read (delivery counts, a consumer made):
                // Redis 7.0 propagates nothing for it.
                ctx.propagate_none();
            }
            for cmd in done.records {
                let v: Vec<&[u8]> = cmd.iter().map(Vec::as_slice).collect();
                ctx.propagate(&v);
            }
            continue;
        }
        let gt = match r.ids[i] {
            ReadFrom::After(id) => id,
            _ => s.last_id,
        };
        if s.length == 0 {
            continue;
        }
        let maxid = s.edge_id(false).unwrap_or_default();
        // A woken reader compares with the last ID, as Redis's
        // serveClientsBlockedOnStreamKey.
        let top = if ctx.ready.is_some() {
            s.last_id
        } else {
            maxid
        };
        if top <= gt {
            continue;
        }
        let Some(start) = gt.incr() else { continue };
        served += 1;
        if !body.resp3() {
            body.array(2);
        }
        body.bulk(k);
        reply_range(&mut body, s, start, StreamId::MAX, count, false);
    }
    if served > 0 {
        if ctx.out.resp3() {
            ctx.out.map(served);
        } else {
            ctx.out.array(served);
        }
        ctx.out.raw(body.as_bytes());
        return Ok(());
    }
    if let Some(deadline) = r.deadline_ms {
        if ctx.may_block {
            let keys: Vec<Vec<u8>> = (0..n).map(|i| key(i).to_vec()).collect();
            if !xreadgroup && r.ids.contains(&ReadFrom::Last) {
                let mut again = OwnedArgs::with_capacity(args.len(), args.bytes());
                for j in 0..args.len() {
                    let jj = j.wrapping_sub(sa + n);
                    match resolved.get(jj).copied().flatten() {
                        Some(id) if j >= sa + n && args.get(j) == b"$" => {
                            again.push(id.to_string().as_bytes())
                        }
                        _ => again.push(args.get(j)),
                    }
                }
                ctx.block_on_with(keys, deadline, again);
            } else {
                ctx.block_on(keys, deadline);
            }
            return Ok(());
        }
    }
    ctx.out.null_array();
    Ok(())
}

#[cfg(test)]
mod tests;
