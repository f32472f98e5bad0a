//! XINFO STREAM [FULL [COUNT n]], GROUPS, CONSUMERS and HELP, with Redis
//! 7.0's fields (consumers have `seen-time`/`idle` only; 7.2's
//! `active-time`/`inactive` do not exist in 7.0). Request path.
//!
//! `radix-tree-nodes` is an estimate: Redis reports its radix tree's
//! internal node count, which depends on the tree's history; here it is
//! computed from the node keys (`Stream::radix_tree_nodes`).

use engine::types::stream::{Group, Stream, StreamId, ENTRIES_READ_INVALID};
use resp::{Args, Reply};

use super::{as_stream, elapsed_ms, id_bulk, nogroup_err, reply_entry, reply_range};
use crate::ctx::{ConnCtx, ShardCtx};
use crate::error::CmdError;
use crate::table::{flags::*, keys, CommandSpec, Exec, NO_KEYS};
use crate::util::{eq_ic, parse_i64};

const R_SLOW: &[&str] = &["read", "stream", "slow"];

#[rustfmt::skip]
pub(super) const XINFO: &[CommandSpec] = &[
    CommandSpec::new("consumers", 4, READONLY, keys(2, 2, 1), Exec::Shard(xinfo_consumers, None), R_SLOW),
    CommandSpec::new("groups",    3, READONLY, keys(2, 2, 1), Exec::Shard(xinfo_groups, None), R_SLOW),
    CommandSpec::new("stream",   -3, READONLY, keys(2, 2, 1), Exec::Shard(xinfo_stream, None), R_SLOW),
    CommandSpec::new("help",      2, LOADING | STALE, NO_KEYS, Exec::Conn(xinfo_help), &["stream", "slow"]),
];

const XINFO_HELP: &[&str] = &[
    "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
    "HELP",
    "    Prints this help.",
];

fn xinfo_help(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    c.out.array(XINFO_HELP.len());
    for line in XINFO_HELP {
        c.out.simple(line);
    }
    Ok(())
}

fn syntax(args: Args<'_>) -> CmdError {
    CmdError::err_echo(
        "unknown subcommand or wrong number of arguments for '",
        args.get(1),
        "'. Try XINFO HELP.",
    )
}

fn stream_of<'a>(ctx: &'a mut ShardCtx<'_>, key: &[u8]) -> Result<&'a Stream, CmdError> {
    let touch = ctx.touch();
    match ctx.shard.lookup_read(ctx.db, key, touch) {
        Some(e) => as_stream(e),
        None => Err(CmdError::NoSuchKey),
    }
}

fn entries_read(out: &mut Reply, g: &Group) {
    if g.entries_read != ENTRIES_READ_INVALID {
        out.int(g.entries_read);
    } else {
        out.null();
    }
}

fn lag(out: &mut Reply, s: &Stream, g: &Group) {
    match s.lag(g) {
        Some(l) => out.int(l),
        None => out.null(),
    }
}

/// XINFO CONSUMERS key group
fn xinfo_consumers(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (key, group) = (args.get(2), args.get(3));
    let now = ctx.shard.now_ms;
    let mut body = Reply::new(ctx.out.resp3());
    let s = stream_of(ctx, key)?;
    let Some(g) = s.groups.get(group) else {
        return Err(nogroup_err(
            &[b"No such consumer group '", group, b"' for key name '", key],
            b"'",
        ));
    };
    body.array(g.consumers.len());
    for (name, c) in &g.consumers {
        body.map(3);
        body.bulk(b"name");
        body.bulk(name);
        body.bulk(b"pending");
        body.int(c.pel.len() as i64);
        body.bulk(b"idle");
        body.int(elapsed_ms(now, c.seen_time).max(0));
    }
    ctx.out.raw(body.as_bytes());
    Ok(())
}

/// XINFO GROUPS key
fn xinfo_groups(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let mut body = Reply::new(ctx.out.resp3());
    let s = stream_of(ctx, args.get(2))?;
    body.array(s.groups.len());
    for (name, g) in &s.groups {
        body.map(6);
        body.bulk(b"name");
        body.bulk(name);
        body.bulk(b"consumers");
        body.int(g.consumers.len() as i64);
        body.bulk(b"pending");
        body.int(g.pel.len() as i64);
        body.bulk(b"last-delivered-id");
        id_bulk(&mut body, g.last_id);
        body.bulk(b"entries-read");
        entries_read(&mut body, g);
        body.bulk(b"lag");
        lag(&mut body, s, g);
    }
    ctx.out.raw(body.as_bytes());
    Ok(())
}

fn edge_entry(out: &mut Reply, s: &Stream, rev: bool) {
    let mut found = false;
    s.range(StreamId::MIN, StreamId::MAX, rev, |id, f| {
        reply_entry(out, id, f);
        found = true;
        false
    });
    if !found {
        out.null();
    }
}

/// XINFO STREAM key [FULL [COUNT count]]
fn xinfo_stream(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let mut body = Reply::new(ctx.out.resp3());
    let s = stream_of(ctx, args.get(2))?;
    let optc = args.len() - 3;
    let mut count: i64 = 10;
    let full = optc > 0;
    if full {
        if (optc != 1 && optc != 3) || !eq_ic(args.get(3), "full") {
            return Err(syntax(args));
        }
        if optc == 3 {
            if !eq_ic(args.get(4), "count") {
                return Err(syntax(args));
            }
            count = parse_i64(args.get(5))?;
            if count < 0 {
                count = 10;
            }
        }
    }
    let out = &mut body;
    out.map(if full { 9 } else { 10 });
    out.bulk(b"length");
    out.int(s.length as i64);
    out.bulk(b"radix-tree-keys");
    out.int(s.node_count() as i64);
    out.bulk(b"radix-tree-nodes");
    out.int(s.radix_tree_nodes() as i64);
    out.bulk(b"last-generated-id");
    id_bulk(out, s.last_id);
    out.bulk(b"max-deleted-entry-id");
    id_bulk(out, s.max_deleted_id);
    out.bulk(b"entries-added");
    out.int(s.entries_added as i64);
    out.bulk(b"recorded-first-entry-id");
    id_bulk(out, s.first_id);
    if !full {
        out.bulk(b"groups");
        out.int(s.groups.len() as i64);
        out.bulk(b"first-entry");
        edge_entry(out, s, false);
        out.bulk(b"last-entry");
        edge_entry(out, s, true);
    } else {
        let limit = count as usize;
        let take = |n: usize| limit == 0 || n < limit;
        out.bulk(b"entries");
        reply_range(out, s, StreamId::MIN, StreamId::MAX, limit, false);
        out.bulk(b"groups");
        out.array(s.groups.len());
        for (name, g) in &s.groups {
            out.map(7);
            out.bulk(b"name");
            out.bulk(name);
            out.bulk(b"last-delivered-id");
            id_bulk(out, g.last_id);
            out.bulk(b"entries-read");
            entries_read(out, g);
            out.bulk(b"lag");
            lag(out, s, g);
            out.bulk(b"pel-count");
            out.int(g.pel.len() as i64);
            out.bulk(b"pending");
            let pel: Vec<_> = g
                .pel
                .iter()
                .enumerate()
                .take_while(|(i, _)| take(*i))
                .collect();
            out.array(pel.len());
            for (_, (id, n)) in pel {
                out.array(4);
                id_bulk(out, *id);
                out.bulk(&n.consumer);
                out.int(n.delivery_time as i64);
                out.int(n.delivery_count as i64);
            }
            out.bulk(b"consumers");
            out.array(g.consumers.len());
            for (cname, c) in &g.consumers {
                out.map(4);
                out.bulk(b"name");
                out.bulk(cname);
                out.bulk(b"seen-time");
                out.int(c.seen_time as i64);
                out.bulk(b"pel-count");
                out.int(c.pel.len() as i64);
                out.bulk(b"pending");
                let ids: Vec<_> = c
                    .pel
                    .iter()
                    .enumerate()
                    .take_while(|(i, _)| take(*i))
                    .collect();
                out.array(ids.len());
                for (_, id) in ids {
                    let n = &g.pel[id];
                    out.array(3);
                    id_bulk(out, *id);
                    out.int(n.delivery_time as i64);
                    out.int(n.delivery_count as i64);
                }
            }
        }
    }
    ctx.out.raw(body.as_bytes());
    Ok(())
}
