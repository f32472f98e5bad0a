//! Consumer groups: XGROUP (CREATE, SETID, DESTROY, CREATECONSUMER,
//! DELCONSUMER, HELP), XACK, XPENDING, XCLAIM, XAUTOCLAIM, and the group
//! side of XREADGROUP ([`read_group`]). Request path.
//!
//! Errors follow Redis 7.0's order: argument parsing first where Redis
//! parses first (XAUTOCLAIM, XPENDING), the key's type, then the group.
//! Consumers are looked up with their seen time refreshed (Redis 7.0's
//! `SLC_DEFAULT`) by XREADGROUP, XCLAIM and XAUTOCLAIM only.

use engine::types::stream::{Consumer, Group, Nack, Stream, StreamId, ENTRIES_READ_INVALID};
use resp::{Args, Reply};

use super::{
    as_stream, as_stream_mut, elapsed_ms, id_bulk, nogroup_err, parse_range_bound, parse_strict_id,
    reply_entry, ReadFrom,
};
use crate::ctx::{ConnCtx, ShardCtx};
use crate::error::CmdError;
use crate::stream::STREAM_EV;
use crate::table::{flags::*, keys, CommandSpec, Exec, ShardHandler, NO_KEYS};
use crate::util::{eq_ic, parse_i64};

const fn sub(
    name: &'static str,
    arity: i32,
    flags: u32,
    h: ShardHandler,
    acl: &'static [&'static str],
) -> CommandSpec {
    CommandSpec::new(name, arity, flags, keys(2, 2, 1), Exec::Shard(h, None), acl)
}

const W_SLOW: &[&str] = &["write", "stream", "slow"];

#[rustfmt::skip]
pub(super) const XGROUP: &[CommandSpec] = &[
    sub("create",         -5, WRITE | DENYOOM, xgroup_create,         W_SLOW),
    sub("setid",          -5, WRITE,           xgroup_setid,          W_SLOW),
    sub("destroy",         4, WRITE,           xgroup_destroy,        W_SLOW),
    sub("createconsumer",  5, WRITE | DENYOOM, xgroup_createconsumer, W_SLOW),
    sub("delconsumer",     5, WRITE,           xgroup_delconsumer,    W_SLOW),
    CommandSpec::new("help", 2, LOADING | STALE, NO_KEYS, Exec::Conn(xgroup_help),
                     &["stream", "slow"]),
];

const XGROUP_HELP: &[&str] = &[
    "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
    "HELP",
    "    Prints this help.",
];

fn xgroup_help(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    c.out.array(XGROUP_HELP.len());
    for line in XGROUP_HELP {
        c.out.simple(line);
    }
    Ok(())
}

fn subcommand_syntax(args: Args<'_>) -> CmdError {
    CmdError::err_echo(
        "unknown subcommand or wrong number of arguments for '",
        args.get(1),
        "'. Try XGROUP HELP.",
    )
}

fn no_such_group(key: &[u8], group: &[u8]) -> CmdError {
    nogroup_err(
        &[b"No such key '", key, b"' or consumer group '", group],
        b"'",
    )
}

/// XGROUP's shared checks (Redis 7.0's `xgroupCommand` before the
/// dispatch): the options of CREATE/SETID, the key's type, its existence
/// unless MKSTREAM, the group's for SETID/CREATECONSUMER/DELCONSUMER.
/// Returns (MKSTREAM, ENTRIESREAD, whether the key exists).
fn xgroup_checks(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(bool, i64, bool), CmdError> {
    let opt = args.get(1);
    let (mut mkstream, mut entries_read) = (false, ENTRIES_READ_INVALID);
    let create = eq_ic(opt, "create");
    if (create || eq_ic(opt, "setid")) && args.len() >= 5 {
        let mut i = 5;
        while i < args.len() {
            if create && eq_ic(args.get(i), "mkstream") {
                mkstream = true;
                i += 1;
            } else if eq_ic(args.get(i), "entriesread") && i + 1 < args.len() {
                entries_read = parse_i64(args.get(i + 1))?;
                if entries_read < 0 && entries_read != ENTRIES_READ_INVALID {
                    return Err(CmdError::err(
                        "value for ENTRIESREAD must be positive or -1",
                    ));
                }
                i += 2;
            } else {
                return Err(subcommand_syntax(args));
            }
        }
    }
    let (key, group) = (args.get(2), args.get(3));
    let s = match ctx.shard.lookup_write(ctx.db, key) {
        Some(e) => Some(as_stream(e)?),
        None => None,
    };
    if !mkstream {
        let Some(s) = s else {
            return Err(CmdError::err("The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically."));
        };
        let needs_group =
            eq_ic(opt, "setid") || eq_ic(opt, "createconsumer") || eq_ic(opt, "delconsumer");
        if needs_group && !s.groups.contains_key(group) {
            return Err(nogroup_err(
                &[b"No such consumer group '", group, b"' for key name '", key],
                b"'",
            ));
        }
    }
    Ok((mkstream, entries_read, s.is_some()))
}

fn stream_mut<'a>(ctx: &'a mut ShardCtx<'_>, key: &[u8]) -> &'a mut Stream {
    match ctx.shard.dbs[ctx.db].get_mut(key).map(|e| as_stream_mut(e)) {
        Some(Ok(s)) => s,
        // INVARIANT: the caller checked the key holds a stream.
        _ => unreachable!("stream checked by xgroup_checks"),
    }
}

/// XGROUP CREATE key group id|$ [MKSTREAM] [ENTRIESREAD n]
fn xgroup_create(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (_, entries_read, exists) = xgroup_checks(ctx, args)?;
    if args.len() > 8 {
        return Err(subcommand_syntax(args));
    }
    let (db, key, group) = (ctx.db, args.get(2), args.get(3));
    let id = if args.get(4) == b"$" {
        match ctx.shard.dbs[db].get(key) {
            Some(e) => as_stream(e)?.last_id,
            None => StreamId::MIN,
        }
    } else {
        parse_strict_id(args.get(4))?
    };
    if !exists {
        ctx.shard
            .store(db, key, engine::Value::Stream(Box::default()), 0);
    }
    let s = stream_mut(ctx, key);
    if s.groups.contains_key(group) {
        return Err(CmdError::Raw(
            "BUSYGROUP Consumer Group name already exists".into(),
        ));
    }
    s.groups
        .insert(group.to_vec(), Group::new(id, entries_read));
    ctx.shard.dbs[db].dirty += 1;
    ctx.shard.dbs[db].signal(key);
    ctx.propagate_as_is(args);
    ctx.out.ok();
    ctx.notify(STREAM_EV, "xgroup-create", key);
    Ok(())
}

/// XGROUP SETID key group id|$ [ENTRIESREAD n]
fn xgroup_setid(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (_, entries_read, _) = xgroup_checks(ctx, args)?;
    if args.len() != 5 && args.len() != 7 {
        return Err(subcommand_syntax(args));
    }
    let (db, key, group) = (ctx.db, args.get(2), args.get(3));
    let s = stream_mut(ctx, key);
    let id = if args.get(4) == b"$" {
        s.last_id
    } else {
        super::parse_id(args.get(4), 0)?
    };
    if let Some(g) = s.groups.get_mut(group) {
        g.last_id = id;
        g.entries_read = entries_read;
    }
    ctx.shard.dbs[db].dirty += 1;
    ctx.shard.dbs[db].signal(key);
    ctx.propagate_as_is(args);
    ctx.out.ok();
    ctx.notify(STREAM_EV, "xgroup-setid", key);
    Ok(())
}

/// XGROUP DESTROY key group: 1 if destroyed. Its blocked readers fail.
fn xgroup_destroy(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    xgroup_checks(ctx, args)?;
    let (db, key, group) = (ctx.db, args.get(2), args.get(3));
    let s = stream_mut(ctx, key);
    if s.groups.remove(group).is_some() {
        let d = &mut ctx.shard.dbs[db];
        d.dirty += 1;
        d.signal(key);
        d.signal_ready(key);
        ctx.propagate_as_is(args);
        ctx.out.int(1);
        ctx.notify(STREAM_EV, "xgroup-destroy", key);
    } else {
        ctx.out.int(0);
    }
    Ok(())
}

/// XGROUP CREATECONSUMER key group consumer: 1 if created.
fn xgroup_createconsumer(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    xgroup_checks(ctx, args)?;
    let (db, key, group, name) = (ctx.db, args.get(2), args.get(3), args.get(4));
    let now = ctx.shard.now_ms;
    let s = stream_mut(ctx, key);
    let Some(g) = s.groups.get_mut(group) else {
        return Err(CmdError::Syntax);
    };
    if g.consumers.contains_key(name) {
        ctx.out.int(0);
        return Ok(());
    }
    g.consumers.insert(
        name.to_vec(),
        Consumer {
            seen_time: now,
            ..Consumer::default()
        },
    );
    ctx.shard.dbs[db].dirty += 1;
    ctx.shard.dbs[db].signal(key);
    ctx.propagate_as_is(args);
    ctx.out.int(1);
    ctx.notify(STREAM_EV, "xgroup-createconsumer", key);
    Ok(())
}

/// XGROUP DELCONSUMER key group consumer: its pending entries, dropped.
fn xgroup_delconsumer(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    xgroup_checks(ctx, args)?;
    let (db, key, group, name) = (ctx.db, args.get(2), args.get(3), args.get(4));
    let s = stream_mut(ctx, key);
    let Some(g) = s.groups.get_mut(group) else {
        return Err(CmdError::Syntax);
    };
    let Some(c) = g.consumers.remove(name) else {
        ctx.out.int(0);
        return Ok(());
    };
    for id in &c.pel {
        g.pel.remove(id);
    }
    ctx.shard.dbs[db].dirty += 1;
    ctx.shard.dbs[db].signal(key);
    ctx.propagate_as_is(args);
    ctx.out.int(c.pel.len() as i64);
    ctx.notify(STREAM_EV, "xgroup-delconsumer", key);
    Ok(())
}

// ----------------------------------------------------------- XREADGROUP

/// What a group read did to one stream.
pub(super) struct GroupRead {
    pub served: bool,
    /// The read changed the group (a consumer, the PEL, the last ID).
    pub changed: bool,
    /// It made the consumer (`xgroup-createconsumer`).
    pub created: bool,
    /// Records to log (module docs of `stream`).
    pub records: Vec<Vec<Vec<u8>>>,
}

fn consumer_mut<'a>(g: &'a mut Group, name: &[u8], now: u64) -> (&'a mut Consumer, bool) {
    let created = !g.consumers.contains_key(name);
    let c = g.consumers.entry(name.to_vec()).or_default();
    c.seen_time = now;
    (c, created)
}

fn xclaim_record(key: &[u8], group: &[u8], id: StreamId, n: &Nack, last: StreamId) -> Vec<Vec<u8>> {
    vec![
        b"XCLAIM".to_vec(),
        key.to_vec(),
        group.to_vec(),
        n.consumer.clone(),
        b"0".to_vec(),
        id.to_string().into_bytes(),
        b"TIME".to_vec(),
        n.delivery_time.to_string().into_bytes(),
        b"RETRYCOUNT".to_vec(),
        n.delivery_count.to_string().into_bytes(),
        b"FORCE".to_vec(),
        b"JUSTID".to_vec(),
        b"LASTID".to_vec(),
        last.to_string().into_bytes(),
    ]
}

/// XREADGROUP on one stream (Redis 7.0's `xreadCommand` for a group and
/// `streamReplyWithRange` with it): writes `[key, entries]` to `body` when
/// it serves. `log`: propagation is on (the per-entry XCLAIM records are
/// built only then).
#[allow(clippy::too_many_arguments)]
pub(super) fn read_group(
    s: &mut Stream,
    group: &[u8],
    consumer: &[u8],
    from: ReadFrom,
    count: usize,
    noack: bool,
    now: u64,
    woken: bool,
    body: &mut Reply,
    key: &[u8],
    log: bool,
) -> GroupRead {
    let mut out = GroupRead {
        served: false,
        changed: false,
        created: false,
        records: Vec::new(),
    };
    let maxid = s.edge_id(false);
    let Some(g) = s.groups.get(group) else {
        return out;
    };
    let serve = match from {
        ReadFrom::After(_) => true,
        _ if woken => s.last_id > g.last_id,
        _ => maxid.is_some_and(|m| m > g.last_id),
    };
    let entries_added = s.entries_added;
    // History entries found (their NACKs count a delivery); deleted ones
    // are replied as `[id, nil]` and left as they are.
    let mut delivered: Vec<StreamId> = Vec::new();
    {
        // The consumer is made (or its seen time refreshed) only when the
        // stream serves it, as Redis 7.0.15.
        if !serve {
            return out;
        }
        let g = s.groups.get_mut(group).expect("INVARIANT: looked up above");
        let (_, created) = consumer_mut(g, consumer, now);
        out.changed |= created;
        out.created = created;
        if created && noack {
            out.records.push(vec![
                b"XGROUP".to_vec(),
                b"CREATECONSUMER".to_vec(),
                key.to_vec(),
                group.to_vec(),
                consumer.to_vec(),
            ]);
        }
    }
    out.served = true;
    if !body.resp3() {
        body.array(2);
    }
    body.bulk(key);
    match from {
        ReadFrom::After(gt) => {
            // History: the consumer's own pending entries after `gt`.
            let Some(start) = gt.incr() else {
                body.array(0);
                return out;
            };
            let g = s.groups.get(group).expect("INVARIANT: looked up above");
            let c = g.consumers.get(consumer).expect("INVARIANT: created above");
            let ids: Vec<StreamId> = c
                .pel
                .range(start..)
                .take(if count == 0 { usize::MAX } else { count })
                .copied()
                .collect();
            body.array(ids.len());
            for id in ids {
                let mut found = false;
                s.range(id, id, false, |i, f| {
                    reply_entry(body, i, f);
                    found = true;
                    false
                });
                if found {
                    delivered.push(id);
                } else {
                    body.array(2);
                    id_bulk(body, id);
                    body.null_array();
                }
            }
            let g = s.groups.get_mut(group).expect("INVARIANT: looked up above");
            for id in &delivered {
                if let Some(n) = g.pel.get_mut(id) {
                    n.delivery_time = now;
                    n.delivery_count += 1;
                }
            }
            out.changed |= !delivered.is_empty();
        }
        _ => {
            let last = s.groups.get(group).map_or(StreamId::MIN, |g| g.last_id);
            let Some(start) = last.incr() else {
                body.array(0);
                return out;
            };
            let mut ids = Vec::new();
            let mut rb = Reply::new(body.resp3());
            s.range(start, StreamId::MAX, false, |id, f| {
                reply_entry(&mut rb, id, f);
                ids.push(id);
                count == 0 || ids.len() < count
            });
            body.array(ids.len());
            body.raw(rb.as_bytes());
            for id in ids {
                let tomb = s.range_has_tombstones(id, StreamId::MAX);
                let est = s.estimate_distance(id);
                let g = s.groups.get_mut(group).expect("INVARIANT: looked up above");
                if id > g.last_id {
                    if g.entries_read != ENTRIES_READ_INVALID && !tomb {
                        g.entries_read = g.entries_read.wrapping_add(1);
                    } else if entries_added > 0 {
                        g.entries_read = est;
                    }
                    g.last_id = id;
                }
                out.changed = true;
                if noack {
                    continue;
                }
                let nack = Nack {
                    consumer: consumer.to_vec(),
                    delivery_time: now,
                    delivery_count: 1,
                };
                if let Some(old) = g.pel.insert(id, nack) {
                    if let Some(oc) = g.consumers.get_mut(&old.consumer) {
                        oc.pel.remove(&id);
                    }
                }
                if let Some(c) = g.consumers.get_mut(consumer) {
                    c.pel.insert(id);
                }
                // A record per entry only when something logs it (14
                // allocations each).
                if log {
                    let n = &g.pel[&id];
                    out.records
                        .push(xclaim_record(key, group, id, n, g.last_id));
                }
            }
            if noack && out.changed {
                let g = s.groups.get(group).expect("INVARIANT: looked up above");
                out.records.push(vec![
                    b"XGROUP".to_vec(),
                    b"SETID".to_vec(),
                    key.to_vec(),
                    group.to_vec(),
                    g.last_id.to_string().into_bytes(),
                    b"ENTRIESREAD".to_vec(),
                    g.entries_read.to_string().into_bytes(),
                ]);
            } else if noack {
                out.records.clear();
            }
        }
    }
    out
}

// ------------------------------------------------------------------ XACK

/// XACK key group id [id ...]: entries acknowledged (0 without the key or
/// the group). Every ID is parsed first.
pub(super) fn xack(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (db, key, group) = (ctx.db, args.get(1), args.get(2));
    let has = match ctx.shard.lookup_write(db, key) {
        Some(e) => as_stream(e)?.groups.contains_key(group),
        None => false,
    };
    if !has {
        ctx.out.int(0);
        return Ok(());
    }
    let ids = (3..args.len())
        .map(|i| parse_strict_id(args.get(i)))
        .collect::<Result<Vec<_>, _>>()?;
    let s = stream_mut(ctx, key);
    let Some(g) = s.groups.get_mut(group) else {
        ctx.out.int(0);
        return Ok(());
    };
    let n = ids.into_iter().filter(|id| g.ack(*id)).count();
    if n > 0 {
        ctx.shard.dbs[db].dirty += n as u64;
        ctx.shard.dbs[db].signal(key);
        ctx.propagate_as_is(args);
    }
    ctx.out.int(n as i64);
    Ok(())
}

// -------------------------------------------------------------- XPENDING

/// XPENDING key group [[IDLE min-idle-time] start end count [consumer]]
pub(super) fn xpending(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let argc = args.len();
    let justinfo = argc == 3;
    if argc != 3 && !(6..=9).contains(&argc) {
        return Err(CmdError::Syntax);
    }
    let (mut start, mut end, mut count, mut minidle) = (StreamId::MIN, StreamId::MAX, 0i64, 0i64);
    let mut consumer: Option<&[u8]> = None;
    if argc >= 6 {
        let mut at = 3;
        if eq_ic(args.get(3), "idle") {
            minidle = parse_i64(args.get(4))?;
            if argc < 8 {
                return Err(CmdError::Syntax);
            }
            at += 2;
        }
        count = parse_i64(args.get(at + 2))?.max(0);
        start = parse_range_bound(args.get(at), true)?;
        end = parse_range_bound(args.get(at + 1), false)?;
        if at + 3 < argc {
            consumer = Some(args.get(at + 3));
        }
    }
    let (key, group) = (args.get(1), args.get(2));
    let touch = ctx.touch();
    let now = ctx.shard.now_ms;
    let s = match ctx.shard.lookup_read(ctx.db, key, touch) {
        Some(e) => Some(as_stream(e)?),
        None => None,
    };
    let Some(g) = s.and_then(|s| s.groups.get(group)) else {
        return Err(no_such_group(key, group));
    };
    let out = &mut *ctx.out;
    if justinfo {
        out.array(4);
        out.int(g.pel.len() as i64);
        match (g.pel.keys().next(), g.pel.keys().next_back()) {
            (Some(a), Some(b)) => {
                id_bulk(out, *a);
                id_bulk(out, *b);
                let with: Vec<_> = g
                    .consumers
                    .iter()
                    .filter(|(_, c)| !c.pel.is_empty())
                    .collect();
                out.array(with.len());
                for (name, c) in with {
                    out.array(2);
                    out.bulk(name);
                    out.bulk_int(c.pel.len() as i64);
                }
            }
            _ => {
                out.null();
                out.null();
                out.null_array();
            }
        }
        return Ok(());
    }
    let ids: Box<dyn Iterator<Item = StreamId>> = match consumer {
        Some(name) => match g.consumers.get(name) {
            Some(c) => Box::new(c.pel.range(start..).copied()),
            None => {
                out.array(0);
                return Ok(());
            }
        },
        None => Box::new(g.pel.range(start..).map(|(k, _)| *k)),
    };
    let mut body = Reply::new(out.resp3());
    let mut n = 0usize;
    for id in ids {
        if count == 0 || id > end {
            break;
        }
        let Some(nack) = g.pel.get(&id) else { continue };
        let idle = elapsed_ms(now, nack.delivery_time);
        if minidle != 0 && idle < minidle {
            continue;
        }
        n += 1;
        count -= 1;
        body.array(4);
        id_bulk(&mut body, id);
        body.bulk(&nack.consumer);
        body.int(idle.max(0));
        body.int(nack.delivery_count as i64);
    }
    out.array(n);
    out.raw(body.as_bytes());
    Ok(())
}

// ---------------------------------------------------- XCLAIM / XAUTOCLAIM

fn int_opt(arg: &[u8], msg: &str) -> Result<i64, CmdError> {
    ds::string2ll(arg).ok_or_else(|| CmdError::err(msg))
}

/// Claims `id` (in the PEL) for `name`: moves it, sets its time and
/// count. Returns the updated NACK.
fn claim(
    g: &mut Group,
    id: StreamId,
    name: &[u8],
    now: u64,
    time: u64,
    retry: Option<u64>,
    justid: bool,
) {
    let (_, _) = consumer_mut(g, name, now);
    let Some(n) = g.pel.get_mut(&id) else { return };
    let old = std::mem::replace(&mut n.consumer, name.to_vec());
    n.delivery_time = time;
    match retry {
        Some(r) => n.delivery_count = r,
        None if !justid => n.delivery_count += 1,
        None => {}
    }
    if old != name {
        if let Some(oc) = g.consumers.get_mut(&old) {
            oc.pel.remove(&id);
        }
    }
    if let Some(c) = g.consumers.get_mut(name) {
        c.pel.insert(id);
    }
}

/// Whether `group` of the stream at `key` has consumer `name`.
fn has_consumer(ctx: &mut ShardCtx<'_>, key: &[u8], group: &[u8], name: &[u8]) -> bool {
    let db = ctx.db;
    ctx.shard.dbs[db]
        .get(key)
        .and_then(|e| as_stream(e).ok())
        .and_then(|s| s.groups.get(group))
        .is_some_and(|g| g.consumers.contains_key(name))
}

/// Emits `xgroup-createconsumer` if the command made consumer `name`.
fn notify_created(ctx: &mut ShardCtx<'_>, key: &[u8], group: &[u8], name: &[u8], had: bool) {
    if !had && has_consumer(ctx, key, group, name) {
        ctx.notify(STREAM_EV, "xgroup-createconsumer", key);
    }
}

/// XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms]
/// [TIME ms] [RETRYCOUNT n] [FORCE] [JUSTID] [LASTID id]
pub(super) fn xclaim(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (db, key, group, name) = (ctx.db, args.get(1), args.get(2), args.get(3));
    let has = match ctx.shard.lookup_write(db, key) {
        Some(e) => as_stream(e)?.groups.contains_key(group),
        None => false,
    };
    if !has {
        return Err(no_such_group(key, group));
    }
    let had_consumer = has_consumer(ctx, key, group, name);
    let minidle = int_opt(args.get(4), "Invalid min-idle-time argument for XCLAIM")?.max(0);
    let mut j = 5;
    let mut ids = Vec::new();
    while j < args.len() {
        match parse_strict_id(args.get(j)) {
            Ok(id) => ids.push(id),
            Err(_) => break,
        }
        j += 1;
    }
    let now = ctx.shard.now_ms;
    let (mut force, mut justid) = (false, false);
    let mut time: i64 = -1;
    let mut retry: Option<u64> = None;
    let mut last_id = StreamId::MIN;
    while j < args.len() {
        let more = args.len() - 1 - j;
        let opt = args.get(j);
        if eq_ic(opt, "force") {
            force = true;
        } else if eq_ic(opt, "justid") {
            justid = true;
        } else if eq_ic(opt, "idle") && more > 0 {
            j += 1;
            time = now as i64 - int_opt(args.get(j), "Invalid IDLE option argument for XCLAIM")?;
        } else if eq_ic(opt, "time") && more > 0 {
            j += 1;
            time = int_opt(args.get(j), "Invalid TIME option argument for XCLAIM")?;
        } else if eq_ic(opt, "retrycount") && more > 0 {
            j += 1;
            let r = int_opt(args.get(j), "Invalid RETRYCOUNT option argument for XCLAIM")?;
            retry = (r >= 0).then_some(r as u64);
        } else if eq_ic(opt, "lastid") && more > 0 {
            j += 1;
            last_id = parse_strict_id(args.get(j))?;
        } else {
            return Err(CmdError::err_echo("Unrecognized XCLAIM option '", opt, "'"));
        }
        j += 1;
    }
    let time = if time < 0 || time > now as i64 {
        now
    } else {
        time as u64
    };
    let mut body = Reply::new(ctx.out.resp3());
    let s = stream_mut(ctx, key);
    let mut records = Vec::new();
    let mut changed = false;
    let mut propagate_last = false;
    {
        let g = s.groups.get_mut(group).expect("INVARIANT: checked above");
        if last_id > g.last_id {
            g.last_id = last_id;
            propagate_last = true;
            changed = true;
        }
    }
    let mut n = 0usize;
    for id in ids {
        let exists = s.contains(id);
        let g = s.groups.get_mut(group).expect("INVARIANT: checked above");
        if !exists {
            if let Some(old) = g.pel.get(&id) {
                records.push(xclaim_record(key, group, id, old, g.last_id));
                propagate_last = false;
                g.ack(id);
                changed = true;
            }
            continue;
        }
        let forced = force && !g.pel.contains_key(&id);
        if forced {
            g.pel.insert(
                id,
                Nack {
                    consumer: Vec::new(),
                    delivery_time: now,
                    delivery_count: 0,
                },
            );
        }
        let Some(nack) = g.pel.get(&id) else { continue };
        if !forced && minidle != 0 && (elapsed_ms(now, nack.delivery_time)) < minidle {
            continue;
        }
        if forced {
            // A NACK created by FORCE has no consumer yet.
            if let Some(nk) = g.pel.get_mut(&id) {
                nk.consumer = name.to_vec();
            }
            let (c, _) = consumer_mut(g, name, now);
            c.pel.insert(id);
            let nk = g.pel.get_mut(&id).expect("INVARIANT: inserted above");
            nk.delivery_time = time;
            match retry {
                Some(r) => nk.delivery_count = r,
                None if !justid => nk.delivery_count += 1,
                None => {}
            }
        } else {
            claim(g, id, name, now, time, retry, justid);
        }
        changed = true;
        let g_last = g.last_id;
        let nack = g.pel[&id].clone();
        if justid {
            id_bulk(&mut body, id);
        } else {
            let mut found = false;
            s.range(id, id, false, |i, f| {
                reply_entry(&mut body, i, f);
                found = true;
                false
            });
            if !found {
                body.null();
            }
        }
        n += 1;
        records.push(xclaim_record(key, group, id, &nack, g_last));
        propagate_last = false;
    }
    if propagate_last {
        let g = &s.groups[group];
        records.push(vec![
            b"XGROUP".to_vec(),
            b"SETID".to_vec(),
            key.to_vec(),
            group.to_vec(),
            g.last_id.to_string().into_bytes(),
            b"ENTRIESREAD".to_vec(),
            g.entries_read.to_string().into_bytes(),
        ]);
    }
    if changed {
        ctx.shard.dbs[db].dirty += 1;
        ctx.shard.dbs[db].signal(key);
    }
    notify_created(ctx, key, group, name, had_consumer);
    for r in &records {
        let v: Vec<&[u8]> = r.iter().map(Vec::as_slice).collect();
        ctx.propagate(&v);
    }
    ctx.out.array(n);
    ctx.out.raw(body.as_bytes());
    Ok(())
}

/// XAUTOCLAIM key group consumer min-idle-time start [COUNT count]
/// [JUSTID]: `[next start, claimed, deleted IDs]`.
pub(super) fn xautoclaim(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let minidle = int_opt(args.get(4), "Invalid min-idle-time argument for XAUTOCLAIM")?.max(0);
    let start = parse_range_bound(args.get(5), true)?;
    let mut count: i64 = 100;
    let mut justid = false;
    let mut j = 6;
    while j < args.len() {
        let more = args.len() - 1 - j;
        let opt = args.get(j);
        if eq_ic(opt, "count") && more > 0 {
            let max = i64::MAX / 16;
            count = match ds::string2ll(args.get(j + 1)) {
                Some(c) if (1..=max).contains(&c) => c,
                _ => return Err(CmdError::err("COUNT must be > 0")),
            };
            j += 1;
        } else if eq_ic(opt, "justid") {
            justid = true;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let (db, key, group, name) = (ctx.db, args.get(1), args.get(2), args.get(3));
    let has = match ctx.shard.lookup_write(db, key) {
        Some(e) => as_stream(e)?.groups.contains_key(group),
        None => false,
    };
    if !has {
        return Err(no_such_group(key, group));
    }
    let had_consumer = has_consumer(ctx, key, group, name);
    let now = ctx.shard.now_ms;
    let mut body = Reply::new(ctx.out.resp3());
    let s = stream_mut(ctx, key);
    let mut attempts = count.saturating_mul(10);
    let pending: Vec<StreamId> = s.groups[group]
        .pel
        .range(start..)
        .map(|(k, _)| *k)
        .take(
            usize::try_from(attempts)
                .unwrap_or(usize::MAX)
                .saturating_add(1),
        )
        .collect();
    let (mut n, mut deleted, mut records) = (0usize, Vec::new(), Vec::new());
    let mut next = StreamId::MIN;
    let mut it = pending.into_iter().peekable();
    while attempts > 0 && count > 0 {
        let Some(id) = it.next() else { break };
        attempts -= 1;
        let exists = s.contains(id);
        let g = s.groups.get_mut(group).expect("INVARIANT: checked above");
        if !exists {
            if let Some(old) = g.pel.get(&id) {
                records.push(xclaim_record(key, group, id, old, g.last_id));
            }
            g.ack(id);
            deleted.push(id);
            count -= 1;
            continue;
        }
        let Some(nack) = g.pel.get(&id) else { continue };
        if minidle != 0 && (elapsed_ms(now, nack.delivery_time)) < minidle {
            continue;
        }
        claim(g, id, name, now, now, None, justid);
        let (nack, g_last) = (g.pel[&id].clone(), g.last_id);
        if justid {
            id_bulk(&mut body, id);
        } else {
            s.range(id, id, false, |i, f| {
                reply_entry(&mut body, i, f);
                false
            });
        }
        n += 1;
        count -= 1;
        records.push(xclaim_record(key, group, id, &nack, g_last));
    }
    if let Some(id) = it.next() {
        next = id;
    }
    if !records.is_empty() {
        ctx.shard.dbs[db].dirty += 1;
        ctx.shard.dbs[db].signal(key);
    }
    notify_created(ctx, key, group, name, had_consumer);
    for r in &records {
        let v: Vec<&[u8]> = r.iter().map(Vec::as_slice).collect();
        ctx.propagate(&v);
    }
    let out = &mut *ctx.out;
    out.array(3);
    id_bulk(out, next);
    out.array(n);
    out.raw(body.as_bytes());
    out.array(deleted.len());
    for id in deleted {
        id_bulk(out, id);
    }
    Ok(())
}
