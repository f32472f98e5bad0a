//! A key as the commands that rebuild it: the body of an AOF base written
//! with `aof-use-rdb-preamble no` (Redis's `rewriteAppendOnlyFileRio`):
//! SET for strings; RPUSH, SADD, ZADD and HMSET in batches of 64 elements
//! (`AOF_REWRITE_ITEMS_PER_CMD`); for a stream, Redis 7.0's
//! `rewriteStreamObject` (an XADD per entry, or `XADD key MAXLEN 0 0-1 x y`
//! for an empty one, XSETID with the counters, XGROUP CREATE per group,
//! XCLAIM ... JUSTID FORCE per pending entry, XGROUP CREATECONSUMER per
//! consumer without any); then PEXPIREAT for a key with a TTL.

use crate::db::Entry;
use crate::outbox::{write_bulk, write_header};
use crate::types::set::with_bytes as member_bytes;
use crate::value::{StrView, ValueRef};

/// Redis's `AOF_REWRITE_ITEMS_PER_CMD`.
pub(super) const ITEMS_PER_CMD: usize = 64;

/// Writes `SELECT db` as a command.
pub fn write_select_cmd(out: &mut Vec<u8>, db: usize) {
    write_header(out, b'*', 2);
    write_bulk(out, b"SELECT");
    write_bulk(out, itoa::Buffer::new().format(db).as_bytes());
}

/// Emits `name key` followed by the arguments `each` produces (`per` per
/// item, `len` items), in commands of at most [`ITEMS_PER_CMD`] items.
fn batched(
    out: &mut Vec<u8>,
    name: &[u8],
    key: &[u8],
    len: usize,
    per: usize,
    each: impl FnOnce(&mut dyn FnMut(&[u8])),
) {
    let (mut left, mut in_cmd, mut arg) = (len, 0usize, 0usize);
    each(&mut |a: &[u8]| {
        if in_cmd == 0 && arg == 0 {
            let n = left.min(ITEMS_PER_CMD);
            write_header(out, b'*', 2 + n * per);
            write_bulk(out, name);
            write_bulk(out, key);
            in_cmd = n;
        }
        write_bulk(out, a);
        arg += 1;
        if arg == per {
            arg = 0;
            in_cmd -= 1;
            left -= 1;
        }
    });
}

/// The commands that rebuild `key` with `e`'s value and deadline
/// `expire_at_ms` (0 = none).
pub fn write_entry_cmds(out: &mut Vec<u8>, key: &[u8], e: &Entry, expire_at_ms: u64) {
    match e.value() {
        ValueRef::Str(s) => {
            write_header(out, b'*', 3);
            write_bulk(out, b"SET");
            write_bulk(out, key);
            match s.view() {
                StrView::Int(n) => write_bulk(out, itoa::Buffer::new().format(n).as_bytes()),
                StrView::Bytes(b) => write_bulk(out, b),
            }
        }
        ValueRef::List(l) => batched(out, b"RPUSH", key, l.len(), 1, |f| {
            let mut it = l.iter();
            while let Some(item) = it.next() {
                f(item);
            }
        }),
        ValueRef::Set(s) => batched(out, b"SADD", key, s.len(), 1, |f| {
            for m in s.iter() {
                member_bytes(m, |b| f(b));
            }
        }),
        ValueRef::ZSet(z) => batched(out, b"ZADD", key, z.len(), 2, |f| {
            for (m, sc) in z.iter() {
                f(super::pack::d2string(sc).as_bytes());
                f(m);
            }
        }),
        ValueRef::Hash(h) => batched(out, b"HMSET", key, h.len(), 2, |f| {
            for (k, v) in h.iter() {
                k.with_bytes(|b| f(b));
                v.with_bytes(|b| f(b));
            }
        }),
        ValueRef::Stream(s) => write_stream_cmds(out, key, s),
    }
    write_expire_cmd(out, key, expire_at_ms);
}

/// PEXPIREAT for a key with a TTL (what ends its commands).
pub(super) fn write_expire_cmd(out: &mut Vec<u8>, key: &[u8], at: u64) {
    if at != 0 {
        write_header(out, b'*', 3);
        write_bulk(out, b"PEXPIREAT");
        write_bulk(out, key);
        write_bulk(out, itoa::Buffer::new().format(at).as_bytes());
    }
}

fn cmd(out: &mut Vec<u8>, args: &[&[u8]]) {
    write_header(out, b'*', args.len());
    for a in args {
        write_bulk(out, a);
    }
}

fn write_stream_cmds(out: &mut Vec<u8>, key: &[u8], s: &crate::types::Stream) {
    use crate::types::stream::StreamId;
    if s.length > 0 {
        s.range(StreamId::MIN, StreamId::MAX, false, |id, fields| {
            write_header(out, b'*', 3 + fields.len() * 2);
            write_bulk(out, b"XADD");
            write_bulk(out, key);
            write_bulk(out, id.to_string().as_bytes());
            for (f, v) in fields {
                write_bulk(out, &f.to_vec());
                write_bulk(out, &v.to_vec());
            }
            true
        });
    } else {
        cmd(out, &[b"XADD", key, b"MAXLEN", b"0", b"0-1", b"x", b"y"]);
    }
    let last = s.last_id.to_string();
    let added = s.entries_added.to_string();
    let maxdel = s.max_deleted_id.to_string();
    cmd(
        out,
        &[
            b"XSETID",
            key,
            last.as_bytes(),
            b"ENTRIESADDED",
            added.as_bytes(),
            b"MAXDELETEDID",
            maxdel.as_bytes(),
        ],
    );
    for (name, g) in &s.groups {
        let last = g.last_id.to_string();
        let read = g.entries_read.to_string();
        cmd(
            out,
            &[
                b"XGROUP",
                b"CREATE",
                key,
                name,
                last.as_bytes(),
                b"ENTRIESREAD",
                read.as_bytes(),
            ],
        );
        for (cname, c) in &g.consumers {
            if c.pel.is_empty() {
                cmd(out, &[b"XGROUP", b"CREATECONSUMER", key, name, cname]);
                continue;
            }
            for id in &c.pel {
                let Some(n) = g.pel.get(id) else { continue };
                let (id, t, count) = (
                    id.to_string(),
                    n.delivery_time.to_string(),
                    n.delivery_count.to_string(),
                );
                cmd(
                    out,
                    &[
                        b"XCLAIM",
                        key,
                        name,
                        cname,
                        b"0",
                        id.as_bytes(),
                        b"TIME",
                        t.as_bytes(),
                        b"RETRYCOUNT",
                        count.as_bytes(),
                        b"JUSTID",
                        b"FORCE",
                    ],
                );
            }
        }
    }
}
