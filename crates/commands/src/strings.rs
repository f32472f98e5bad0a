//! String commands (Redis's `t_string.c`). Request path.
//!
//! Handlers read as parse → op → reply, and find every syntax error before
//! mutating anything; where Redis checks the key's type before an argument
//! (GETEX's expiry value, INCRBYFLOAT, LCS's options) the same order is
//! kept, since clients see which error comes first. Every access to a
//! stored value goes through `util::as_str`, so the other types answer
//! WRONGTYPE as soon as they exist.
//!
//! Encodings follow Redis's `OBJECT ENCODING`: values written whole (SET,
//! MSET, GETSET, APPEND on a missing key) are `int` when canonical
//! integers, else `embstr`/`raw` by length; values modified in place
//! (APPEND, SETRANGE) become `raw`; INCR-family results are `int`;
//! INCRBYFLOAT results are `embstr`/`raw` by length, never `int`.
//!
//! Multi-key commands (MGET, MSET, MSETNX, LCS) run as one shard handler
//! when their keys share a shard and as a coordinator when they do not:
//! MGET/MSET in one step, MSETNX in two (check every shard, then set on
//! every shard only if no key exists), LCS by fetching both values and
//! computing on the home thread. Across shards, each shard's part gets its
//! keys (and MSET's values) in one buffer, prefetches their table slots
//! and values before the lookups, and MGET's part encodes its replies
//! there, so no value is cloned to the home thread, which only splices
//! the parts in key order.
//!
//! Limits: APPEND and SETRANGE refuse strings longer than
//! `proto-max-bulk-len` (the shard handler's `max_bulk_len`); LCS refuses a
//! transient table larger than Redis's default 512 MB.
//!
//! # Module map
//!
//! This file holds the command table, the shared helpers (`str_mut`,
//! `reply_str`, `set_bytes`, the expiry options) and the GET / SET family
//! (GET, SET, SETNX, SETEX, PSETEX, GETSET, GETDEL, GETEX). The rest:
//! [`multi`] (MGET, MSET, MSETNX), [`range`] (APPEND, STRLEN, GETRANGE,
//! SETRANGE), [`counter`] (INCR, DECR, INCRBY, DECRBY, INCRBYFLOAT),
//! [`lcs`] (LCS) and [`longdouble`] (INCRBYFLOAT's arithmetic).

mod counter;
mod lcs;
pub(crate) mod longdouble;
mod multi;
mod range;

use ds::events as ev;
use engine::{Str, StrRef, StrView};
use resp::{Args, Reply};

use crate::ctx::ShardCtx;
use crate::error::CmdError;
use crate::table::{flags::*, keys, CommandSpec, Exec};
use crate::util::{as_str, eq_ic, parse_i64};

use counter::{decr, decrby, incr, incrby, incrbyfloat};
use lcs::{lcs, lcs_multi};
use multi::{mget, mget_multi, mset, mset_multi, msetnx, msetnx_multi};
use range::{append, getrange, setrange, strlen};

/// Redis's default `proto-max-bulk-len`: the largest transient table LCS
/// may allocate.
const PROTO_MAX_BULK_LEN: u64 = 512 * 1024 * 1024;

const W_STR_FAST: &[&str] = &["write", "string", "fast"];
const W_STR_SLOW: &[&str] = &["write", "string", "slow"];
const R_STR_FAST: &[&str] = &["read", "string", "fast"];
const R_STR_SLOW: &[&str] = &["read", "string", "slow"];

const fn one(
    name: &'static str,
    arity: i32,
    flags: u32,
    h: crate::table::ShardHandler,
    acl: &'static [&'static str],
) -> CommandSpec {
    CommandSpec::new(name, arity, flags, keys(1, 1, 1), Exec::Shard(h, None), acl)
}

pub(crate) const COMMANDS: &[CommandSpec] = &[
    one("get", 2, READONLY | FAST, get, R_STR_FAST),
    one("set", -3, WRITE | DENYOOM, set, W_STR_SLOW),
    one("setnx", 3, WRITE | DENYOOM | FAST, setnx, W_STR_FAST),
    one("setex", 4, WRITE | DENYOOM, setex, W_STR_SLOW),
    one("psetex", 4, WRITE | DENYOOM, psetex, W_STR_SLOW),
    one("getset", 3, WRITE | DENYOOM | FAST, getset, W_STR_FAST),
    one("getdel", 2, WRITE | FAST, getdel, W_STR_FAST),
    one("getex", -2, WRITE | FAST, getex, W_STR_FAST),
    CommandSpec::new(
        "mget",
        -2,
        READONLY | FAST,
        keys(1, -1, 1),
        Exec::Shard(mget, Some(mget_multi)),
        R_STR_FAST,
    ),
    CommandSpec::new(
        "mset",
        -3,
        WRITE | DENYOOM,
        keys(1, -1, 2),
        Exec::Shard(mset, Some(mset_multi)),
        W_STR_SLOW,
    ),
    CommandSpec::new(
        "msetnx",
        -3,
        WRITE | DENYOOM,
        keys(1, -1, 2),
        Exec::Shard(msetnx, Some(msetnx_multi)),
        W_STR_SLOW,
    ),
    one("append", 3, WRITE | DENYOOM | FAST, append, W_STR_FAST),
    one("strlen", 2, READONLY | FAST, strlen, R_STR_FAST),
    one("getrange", 4, READONLY, getrange, R_STR_SLOW),
    one("substr", 4, READONLY, getrange, R_STR_SLOW),
    one("setrange", 4, WRITE | DENYOOM, setrange, W_STR_SLOW),
    one("incr", 2, WRITE | DENYOOM | FAST, incr, W_STR_FAST),
    one("decr", 2, WRITE | DENYOOM | FAST, decr, W_STR_FAST),
    one("incrby", 3, WRITE | DENYOOM | FAST, incrby, W_STR_FAST),
    one("decrby", 3, WRITE | DENYOOM | FAST, decrby, W_STR_FAST),
    one(
        "incrbyfloat",
        3,
        WRITE | DENYOOM | FAST,
        incrbyfloat,
        W_STR_FAST,
    ),
    CommandSpec::new(
        "lcs",
        -3,
        READONLY,
        keys(1, 2, 1),
        Exec::Shard(lcs, Some(lcs_multi)),
        R_STR_SLOW,
    ),
];

// ---------------------------------------------------------------------------
// GET / SET family

/// The string at `key` (looked up and type-checked just before), to change
/// in place: see `Db::str_mut`.
fn str_mut<'a>(ctx: &'a mut ShardCtx<'_>, key: &[u8]) -> &'a mut Str {
    ctx.shard.dbs[ctx.db]
        .str_mut(key)
        .expect("INVARIANT: a string, looked up just before")
}

/// Writes a string value as a bulk reply without allocating.
#[inline]
pub(crate) fn reply_str(out: &mut Reply, s: StrRef<'_>) {
    match s.view() {
        StrView::Int(n) => out.bulk_int(n),
        StrView::Bytes(b) => out.bulk(b),
    }
}

/// Redis's `getGenericCommand`: replies the value or null; WRONGTYPE (with
/// nothing replied) for other types. Counts a keyspace hit or miss.
fn get_generic(ctx: &mut ShardCtx<'_>, key: &[u8]) -> Result<(), CmdError> {
    let touch = ctx.touch();
    match ctx.shard.lookup_read(ctx.db, key, touch) {
        None => ctx.out.null(),
        Some(e) => reply_str(ctx.out, as_str(e)?),
    }
    Ok(())
}

/// GET key: the value, or null; WRONGTYPE for other types.
fn get(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    get_generic(ctx, args.get(1))
}

/// When a SET-family command's expiry option says the key expires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExpireOpt {
    None,
    KeepTtl,
    /// Absolute Unix milliseconds.
    At(u64),
}

/// Parses an expiry value as Redis's `getExpireMillisecondsOrReply`:
/// `relative` for EX/PX, `seconds` for EX/EXAT. Errors name `cmd`.
pub(crate) fn expire_ms(
    arg: &[u8],
    seconds: bool,
    relative: bool,
    now_ms: u64,
    cmd: &str,
) -> Result<u64, CmdError> {
    let mut v = parse_i64(arg)?;
    let bad = || CmdError::InvalidExpire(cmd.to_string());
    if v <= 0 || (seconds && v > i64::MAX / 1000) {
        return Err(bad());
    }
    if seconds {
        v *= 1000;
    }
    if relative {
        v = v.checked_add(now_ms as i64).ok_or_else(bad)?;
    }
    if v <= 0 {
        return Err(bad());
    }
    Ok(v as u64)
}

/// The expiry options of SET and GETEX.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ExpKind {
    Ex,
    Px,
    ExAt,
    PxAt,
}

impl ExpKind {
    fn seconds(self) -> bool {
        matches!(self, ExpKind::Ex | ExpKind::ExAt)
    }
    fn relative(self) -> bool {
        matches!(self, ExpKind::Ex | ExpKind::Px)
    }
}

/// Parsed options of SET (`[NX|XX] [GET] [EX|PX|EXAT|PXAT t|KEEPTTL]`) and
/// GETEX (`[EX|PX|EXAT|PXAT t|PERSIST]`).
#[derive(Default)]
struct ExtOpts<'a> {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    persist: bool,
    exp: Option<(ExpKind, &'a [u8])>,
}

/// Redis's `parseExtendedStringArgumentsOrReply`. As there, an option may
/// repeat (`EX 1 EX 2` keeps the last) but never combine with a
/// conflicting one (`EX 1 PX 2`, `NX XX`, `KEEPTTL EX 1`).
fn parse_ext<'a>(args: Args<'a>, start: usize, set: bool) -> Result<ExtOpts<'a>, CmdError> {
    let mut o = ExtOpts::default();
    let mut i = start;
    while i < args.len() {
        let a = args.get(i);
        let has_next = i + 1 < args.len();
        let kind = if eq_ic(a, "ex") {
            Some(ExpKind::Ex)
        } else if eq_ic(a, "px") {
            Some(ExpKind::Px)
        } else if eq_ic(a, "exat") {
            Some(ExpKind::ExAt)
        } else if eq_ic(a, "pxat") {
            Some(ExpKind::PxAt)
        } else {
            None
        };
        let other_exp = |k: ExpKind| o.exp.is_some_and(|(e, _)| e != k);
        if set && eq_ic(a, "nx") && !o.xx {
            o.nx = true;
        } else if set && eq_ic(a, "xx") && !o.nx {
            o.xx = true;
        } else if set && eq_ic(a, "get") {
            o.get = true;
        } else if set && eq_ic(a, "keepttl") && o.exp.is_none() {
            o.keepttl = true;
        } else if !set && eq_ic(a, "persist") && o.exp.is_none() {
            o.persist = true;
        } else if let Some(k) = kind.filter(|&k| !o.keepttl && !o.persist && !other_exp(k)) {
            if !has_next {
                return Err(CmdError::Syntax);
            }
            i += 1;
            o.exp = Some((k, args.get(i)));
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    Ok(o)
}

/// What SET-family commands reply on success and when NX/XX abort.
#[derive(Clone, Copy)]
enum SetReply {
    /// `+OK` / null (SET, SETEX, PSETEX).
    OkNull,
    /// `:1` / `:0` (SETNX).
    OneZero,
}

/// Redis's `setGenericCommand`: expiry value errors first, then GET's
/// reply (or WRONGTYPE), then the NX/XX condition, then the write.
///
/// Propagated as Redis 7.0's: with any expiry option `SET key value PXAT
/// ms` (other options dropped: the condition held); with GET, the command
/// without its GETs; else as received.
fn set_generic(
    ctx: &mut ShardCtx<'_>,
    args: Args<'_>,
    (key, val): (&[u8], &[u8]),
    o: &ExtOpts<'_>,
    cmd: &str,
    replies: SetReply,
) -> Result<(), CmdError> {
    let now = ctx.shard.now_ms;
    let expire = match o.exp {
        Some((k, v)) => ExpireOpt::At(expire_ms(v, k.seconds(), k.relative(), now, cmd)?),
        None if o.keepttl => ExpireOpt::KeepTtl,
        None => ExpireOpt::None,
    };
    if o.get {
        get_generic(ctx, key)?;
    }
    let found = ctx.shard.lookup_write(ctx.db, key).is_some();
    if (o.nx && found) || (o.xx && !found) {
        if !o.get {
            match replies {
                SetReply::OkNull => ctx.out.null(),
                SetReply::OneZero => ctx.out.int(0),
            }
        }
        return Ok(());
    }
    set_bytes(ctx, key, val, expire);
    match expire {
        ExpireOpt::At(ms) => {
            let mut at = itoa::Buffer::new();
            ctx.propagate(&[b"SET", key, val, b"PXAT", at.format(ms).as_bytes()]);
        }
        _ if o.get => propagate_without_get(ctx, args),
        _ => ctx.propagate_as_is(args),
    }
    ctx.notify(ev::STRING, "set", key);
    if matches!(expire, ExpireOpt::At(_)) {
        ctx.notify(ev::GENERIC, "expire", key);
    }
    if !o.get {
        match replies {
            SetReply::OkNull => ctx.out.ok(),
            SetReply::OneZero => ctx.out.int(1),
        }
    }
    Ok(())
}

/// SET without its GET options (each may repeat), as Redis 7.0 propagates
/// `SET ... GET` without an expiry.
fn propagate_without_get(ctx: &mut ShardCtx<'_>, args: Args<'_>) {
    let kept = |(j, a): &(usize, &[u8])| *j < 3 || !eq_ic(a, "get");
    let argc = args.iter().enumerate().filter(kept).count();
    ctx.propagate_with(argc, |out| {
        for (_, a) in args.iter().enumerate().filter(kept) {
            engine::outbox::write_bulk(out, a);
        }
    });
}

/// SET key value [NX|XX] [GET] [EX s|PX ms|EXAT ts|PXAT ms-ts|KEEPTTL]
fn set(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let o = parse_ext(args, 3, true)?;
    let kv = (args.get(1), args.get(2));
    set_generic(ctx, args, kv, &o, "set", SetReply::OkNull)
}

/// SETNX key value: `:1` if set, `:0` if the key existed.
fn setnx(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let o = ExtOpts {
        nx: true,
        ..Default::default()
    };
    let kv = (args.get(1), args.get(2));
    set_generic(ctx, args, kv, &o, "setnx", SetReply::OneZero)
}

/// SETEX key seconds value
fn setex(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let o = ExtOpts {
        exp: Some((ExpKind::Ex, args.get(2))),
        ..Default::default()
    };
    let kv = (args.get(1), args.get(3));
    set_generic(ctx, args, kv, &o, "setex", SetReply::OkNull)
}

/// PSETEX key milliseconds value
fn psetex(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let o = ExtOpts {
        exp: Some((ExpKind::Px, args.get(2))),
        ..Default::default()
    };
    let kv = (args.get(1), args.get(3));
    set_generic(ctx, args, kv, &o, "psetex", SetReply::OkNull)
}

/// Stores a client's bytes as a string, encoded as `Str::from_bytes` would
/// (see `Shard::store_bytes`), applying the expiry option (KEEPTTL keeps a
/// live key's deadline).
pub(crate) fn set_bytes(ctx: &mut ShardCtx<'_>, key: &[u8], value: &[u8], expire: ExpireOpt) {
    let at = deadline_of(ctx, key, expire);
    ctx.shard.store_bytes(ctx.db, key, value, at);
}

/// The deadline a SET-family expiry option gives `key` (0 = none).
fn deadline_of(ctx: &ShardCtx<'_>, key: &[u8], expire: ExpireOpt) -> u64 {
    match expire {
        ExpireOpt::None => 0,
        ExpireOpt::At(ms) => ms,
        ExpireOpt::KeepTtl => ctx.shard.dbs[ctx.db].expire_of(key),
    }
}

/// GETSET key value: the old value (or null), then SET without options
/// (the TTL is dropped); propagated as `SET key value`.
fn getset(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let key = args.get(1);
    get_generic(ctx, key)?;
    set_bytes(ctx, key, args.get(2), ExpireOpt::None);
    // Redis 7.0 propagates GETSET as the SET it is.
    ctx.propagate(&[b"SET", key, args.get(2)]);
    ctx.notify(ev::STRING, "set", key);
    Ok(())
}

/// GETDEL key: the value (or null), and the key deleted (propagated as
/// `DEL key`).
fn getdel(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let key = args.get(1);
    get_generic(ctx, key)?;
    if ctx.shard.remove(ctx.db, key).is_some() {
        ctx.propagate(&[b"DEL", key]);
        ctx.notify(ev::GENERIC, "del", key);
    }
    Ok(())
}

/// GETEX key [EX s|PX ms|EXAT ts|PXAT ms-ts|PERSIST]: the value, and the
/// TTL changed. As in Redis, a missing key replies null before the expiry
/// value is checked, and an EXAT/PXAT in the past deletes the key.
/// Propagated as `DEL key`, `PEXPIREAT key ms` or `PERSIST key`.
fn getex(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let o = parse_ext(args, 2, false)?;
    let (db, key) = (ctx.db, args.get(1));
    let touch = ctx.touch();
    let now = ctx.shard.now_ms;
    let Some(e) = ctx.shard.lookup_read(db, key, touch) else {
        ctx.out.null();
        return Ok(());
    };
    let had_ttl = e.has_ttl();
    let s = as_str(e)?;
    let at = match o.exp {
        Some((k, v)) => Some((k, expire_ms(v, k.seconds(), k.relative(), now, "getex")?)),
        None => None,
    };
    reply_str(ctx.out, s);
    match at {
        Some((k, ms)) if !k.relative() && ctx.shard.already_expired(ms as i64) => {
            ctx.shard.remove(db, key);
            ctx.propagate(&[b"DEL", key]);
            ctx.notify(ev::GENERIC, "del", key);
        }
        Some((_, ms)) => {
            ctx.shard.dbs[db].set_expire(key, ms);
            let mut at = itoa::Buffer::new();
            ctx.propagate(&[b"PEXPIREAT", key, at.format(ms).as_bytes()]);
            ctx.notify(ev::GENERIC, "expire", key);
        }
        // As Redis: a key without a TTL is not modified (no WATCH fails,
        // nothing is propagated).
        None if o.persist && had_ttl => {
            ctx.shard.dbs[db].set_expire(key, 0);
            ctx.propagate(&[b"PERSIST", key]);
            ctx.notify(ev::GENERIC, "persist", key);
        }
        None => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Command scripts whose expected replies are Redis 7.0.15's bytes. A
    //! script line is `ARGS => REPLY`: arguments split on spaces (`""` is
    //! an empty argument, `\xHH`, `\r`, `\n`, `\s` (a space) escapes),
    //! the reply without its final CRLF. `OBJECT ENCODING k` and `TTL k`
    //! are answered from the shard's data here (those commands belong to
    //! another family); `@resp3` switches the client to RESP3 (`HELLO 3`).
    //! The scripts run against 1, 2 and 4 shards; the keys are chosen so
    //! that multi-key commands span shards (see `keys_span_shards`).

    use super::*;
    use crate::table::shard_of;
    use crate::testutil::TestServer;

    fn unescape(s: &str) -> Vec<u8> {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'\\' && i + 1 < b.len() {
                match b[i + 1] {
                    b'r' => out.push(b'\r'),
                    b'n' => out.push(b'\n'),
                    b's' => out.push(b' '),
                    b'\\' => out.push(b'\\'),
                    b'x' => {
                        let h = std::str::from_utf8(&b[i + 2..i + 4]).unwrap();
                        out.push(u8::from_str_radix(h, 16).unwrap());
                        i += 2;
                    }
                    c => panic!("bad escape \\{}", c as char),
                }
                i += 2;
            } else {
                out.push(b[i]);
                i += 1;
            }
        }
        out
    }

    /// The shard holding `key` and its entry, for the intercepted commands.
    fn entry<'a>(t: &'a mut TestServer, key: &[u8]) -> Option<&'a engine::Entry> {
        let s = shard_of(key, t.shards.len());
        let db = t.client.db;
        let sh = &mut t.shards[s];
        sh.lookup_read(db, key, false).map(|e| &*e)
    }

    fn exec(t: &mut TestServer, argv: &[Vec<u8>]) -> Vec<u8> {
        let name = String::from_utf8_lossy(&argv[0]).to_ascii_lowercase();
        if name == "object" && argv.len() == 3 {
            let mut r = Reply::new(t.client.resp3);
            match entry(t, &argv[2]) {
                Some(e) => r.bulk(e.value().encoding().as_bytes()),
                None => r.null(),
            }
            return r.into_bytes();
        }
        if name == "ttl" {
            let now = t.shards[shard_of(&argv[1], t.shards.len())].now_ms;
            let db = t.client.db;
            let at = t.shards[shard_of(&argv[1], t.shards.len())].dbs[db].expire_of(&argv[1]);
            let ttl = match entry(t, &argv[1]) {
                None => -2,
                Some(_) if at == 0 => -1,
                Some(_) => ((at as i64 - now as i64) + 500) / 1000,
            };
            return format!(":{ttl}\r\n").into_bytes();
        }
        let v: Vec<&[u8]> = argv.iter().map(|a| a.as_slice()).collect();
        t.raw(&v)
    }

    fn run_script(nshards: usize, script: &str) {
        let mut t = TestServer::new(nshards);
        for (no, line) in script.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if line == "@resp3" {
                t.client.resp3 = true;
                continue;
            }
            let (cmd, want) = line
                .split_once(" => ")
                .unwrap_or_else(|| panic!("bad script line {line}"));
            let argv: Vec<Vec<u8>> = cmd
                .split_whitespace()
                .map(|a| if a == "\"\"" { Vec::new() } else { unescape(a) })
                .collect();
            let got = exec(&mut t, &argv);
            let mut want = unescape(want);
            want.extend_from_slice(b"\r\n");
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&want),
                "{nshards} shard(s), script line {}: {cmd}",
                no + 1
            );
        }
    }

    pub(super) fn run_all(script: &str) {
        for n in [1, 2, 4] {
            run_script(n, script);
        }
    }

    #[test]
    fn keys_span_shards() {
        for n in [2, 4] {
            for (a, b) in [("key1", "key2"), ("a", "b"), ("n1", "n2"), ("m1", "m2")] {
                assert_ne!(shard_of(a.as_bytes(), n), shard_of(b.as_bytes(), n));
            }
            let s: Vec<usize> = ["m1", "m2", "m3", "m4"]
                .iter()
                .map(|k| shard_of(k.as_bytes(), 4))
                .collect();
            assert_eq!(s, [1, 2, 3, 0]);
        }
    }

    const SET_SCRIPT: &str = r#"
        SET k v ex 10 ex 20 => +OK
        TTL k => :20
        SET k v px 100 ex 20 => -ERR syntax error
        SET k v nx nx => $-1
        SET k v nx xx => -ERR syntax error
        SET k v xx nx => -ERR syntax error
        SET k v keepttl ex 10 => -ERR syntax error
        SET k v ex 10 keepttl => -ERR syntax error
        SET k v exat 10 pxat 10 => -ERR syntax error
        SET k v ex => -ERR syntax error
        SET k v persist => -ERR syntax error
        SET k v foo => -ERR syntax error
        SET k v ex 0 => -ERR invalid expire time in 'set' command
        SET k v ex -1 => -ERR invalid expire time in 'set' command
        SET k v exat -1 => -ERR invalid expire time in 'set' command
        SET k v ex abc => -ERR value is not an integer or out of range
        SET k v ex 9223372036854775 => -ERR invalid expire time in 'set' command
        SET k v px 9223372036854775807 => -ERR invalid expire time in 'set' command
        SET k v get get => $1\r\nv
        SET k v2 keepttl get => $1\r\nv
        TTL k => :-1
        SET k v ex 20 => +OK
        SET k v2 keepttl get => $1\r\nv
        TTL k => :20
        SET k v3 => +OK
        TTL k => :-1
        SET k v exat 9223372036854775 => +OK
        SET k v pxat 9223372036854775807 => +OK
        SET k v ex 9223372036854 => +OK
        SET k v exat 1 => +OK
        GET k => $-1
        SET k v EX 10 GET => $-1
        SET k w nx get => $1\r\nv
        GET k => $1\r\nv
        SET k w xx get => $1\r\nv
        SET nk v xx get => $-1
        SET nk v xx => $-1
        EXISTS nk => :0
        SET nk v nx => +OK
        SET nk v nx => $-1
        SET n 12345 => +OK
        OBJECT ENCODING n => $3\r\nint
        SET n 012 => +OK
        OBJECT ENCODING n => $6\r\nembstr
        SET n aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa => +OK
        OBJECT ENCODING n => $6\r\nembstr
        SET n aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa => +OK
        OBJECT ENCODING n => $3\r\nraw
        SETNX k v => :0
        SETNX k2 v => :1
        SETEX k 0 v => -ERR invalid expire time in 'setex' command
        SETEX k abc v => -ERR value is not an integer or out of range
        SETEX k 100 v => +OK
        TTL k => :100
        PSETEX k 0 v => -ERR invalid expire time in 'psetex' command
        PSETEX k -5 v => -ERR invalid expire time in 'psetex' command
        PSETEX k 10000 5 => +OK
        TTL k => :10
        OBJECT ENCODING k => $3\r\nint
        SETEX k => -ERR wrong number of arguments for 'setex' command
        SETNX k => -ERR wrong number of arguments for 'setnx' command
        GETSET k x => $1\r\n5
        TTL k => :-1
        GETSET nokey 1 => $-1
        OBJECT ENCODING nokey => $3\r\nint
        GETDEL k => $1\r\nx
        GETDEL k => $-1
        EXISTS k => :0
        @resp3
        GET k => _
        GETDEL k => _
        SET k v nx get => _
        SETNX k v => :0
    "#;

    #[test]
    fn set_family() {
        run_all(SET_SCRIPT);
    }

    const GETEX_SCRIPT: &str = r#"
        GETEX k => $-1
        SET k 10 ex 100 => +OK
        GETEX k => $2\r\n10
        TTL k => :100
        GETEX k persist => $2\r\n10
        TTL k => :-1
        GETEX k ex 50 => $2\r\n10
        TTL k => :50
        GETEX k px 5000 => $2\r\n10
        TTL k => :5
        GETEX k exat 9999999999 => $2\r\n10
        GETEX k pxat 9999999999000 => $2\r\n10
        GETEX k ex 10 persist => -ERR syntax error
        GETEX k persist ex 10 => -ERR syntax error
        GETEX k persist persist => $2\r\n10
        TTL k => :-1
        GETEX k ex 10 ex 20 => $2\r\n10
        TTL k => :20
        GETEX k ex 10 px 20 => -ERR syntax error
        GETEX k keepttl => -ERR syntax error
        GETEX k nx => -ERR syntax error
        GETEX k get => -ERR syntax error
        GETEX k ex => -ERR syntax error
        GETEX k ex 0 => -ERR invalid expire time in 'getex' command
        GETEX k pxat -3 => -ERR invalid expire time in 'getex' command
        GETEX k ex abc => -ERR value is not an integer or out of range
        GETEX nokey ex abc => $-1
        GETEX nokey foo => -ERR syntax error
        GETEX k exat 1 => $2\r\n10
        EXISTS k => :0
        SET k 10 => +OK
        GETEX k pxat 1 => $2\r\n10
        EXISTS k => :0
        GETEX => -ERR wrong number of arguments for 'getex' command
    "#;

    #[test]
    fn getex() {
        run_all(GETEX_SCRIPT);
    }

    #[test]
    fn expired_keys_read_as_missing() {
        for n in [1, 2] {
            let mut t = TestServer::new(n);
            assert_eq!(t.run(&["SET", "k", "12", "PX", "50"]), "+OK\r\n");
            assert_eq!(t.run(&["SETEX", "key1", "1", "abc"]), "+OK\r\n");
            for sh in &mut t.shards {
                sh.now_ms += 2000;
            }
            // The test driver re-reads the clock before each command; move
            // the deadlines instead so they are in the past.
            for key in ["k", "key1"] {
                let s = shard_of(key.as_bytes(), n);
                t.shards[s].dbs[0].set_expire(key.as_bytes(), 1);
            }
            assert_eq!(t.run(&["GET", "k"]), "$-1\r\n");
            assert_eq!(t.run(&["INCR", "k"]), ":1\r\n");
            assert_eq!(t.run(&["APPEND", "key1", "x"]), ":1\r\n");
            assert_eq!(t.run(&["MSETNX", "key1", "y", "key2", "z"]), ":0\r\n");
        }
    }

    #[test]
    fn writes_count_as_one_lfu_access_as_in_redis() {
        // Expected values from redis-server 7.0.15 with allkeys-lfu and
        // lfu-log-factor 0 (every access adds one).
        for n in [1, 2, 4] {
            let mut t = crate::testutil::TestServer::new(n);
            t.run(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"]);
            t.run(&["CONFIG", "SET", "lfu-log-factor", "0"]);
            t.run(&["SET", "k", "v"]);
            assert_eq!(t.run(&["OBJECT", "FREQ", "k"]), ":5\r\n");
            t.run(&["MSET", "k", "v2", "other", "x"]);
            assert_eq!(t.run(&["OBJECT", "FREQ", "k"]), ":6\r\n", "{n} shards");
            t.run(&["SET", "f", "1.5"]);
            t.run(&["INCRBYFLOAT", "f", "1"]);
            assert_eq!(t.run(&["OBJECT", "FREQ", "f"]), ":6\r\n", "{n} shards");
        }
    }
}
