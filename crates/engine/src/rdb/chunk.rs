//! One big value written a slice at a time, so a snapshot step stays short
//! however large the value (see `crate::snapshot`).
//!
//! A value is written as a header (RDB: the metadata opcodes, the type,
//! the key and the element count) and then ranges of elements, each call
//! resuming where the last stopped; the caller guarantees the value does
//! not change in between (every mutation of the key first finishes it).
//! Positions: a rank for a skiplist zset (written highest first, as Redis
//! walks it from the tail), an element index for a list, a
//! [`ds::WalkPos`] in the dict of a hashtable hash or set.
//!
//! Which values: the non-compact encodings, whose size is not bounded by
//! the `*-max-listpack-*` limits (a compact value is written whole: it is
//! small by definition). A skiplist zset, a hashtable hash or set are
//! written exactly as a whole write writes them (same type, count, order),
//! so the bytes do not depend on where the slices fall. A long list is
//! written as RDB type 1 (a count, then each element as a string) instead
//! of quicklist 2, whose header needs the number of listpack nodes before
//! any is cut; Redis 7 loads type 1 (pushing each element into a
//! quicklist of its own `list-max-listpack-size`), and so does Tessera.
//!
//! The command form (an AOF base without the RDB preamble) resumes the
//! same way, in whole commands of `ITEMS_PER_CMD` elements, so its output
//! is byte for byte what the whole-value writer gives.

use ds::WalkPos;

use super::cmds::{write_expire_cmd, ITEMS_PER_CMD};
use super::{write_entry_prefix, write_len, write_string, T_HASH, T_LIST, T_SET, T_ZSET_2};
use crate::db::Entry;
use crate::outbox::{write_bulk, write_header};
use crate::types::zset::ZSet;
use crate::value::ValueRef;

/// Lists of more nodes than this (~128 KiB at the default fill) are
/// written in slices; shorter ones whole, in Redis's quicklist form.
const LIST_CHUNK_NODES: usize = 16;

/// Whether `v` is written in slices (see the module docs).
pub(crate) fn is_chunked(v: ValueRef<'_>) -> bool {
    match v {
        ValueRef::Str(_) => false,
        ValueRef::List(l) => l.node_count() > LIST_CHUNK_NODES,
        ValueRef::Set(s) => s.table_dict().is_some(),
        ValueRef::ZSet(z) => matches!(*z, ZSet::Skip(_)),
        ValueRef::Hash(h) => h.table_dict().is_some(),
        // Written whole: its nodes are bounded by `stream-node-max-*`, but
        // not their number (a gap in the fork-less snapshot's slicing).
        ValueRef::Stream(_) => false,
    }
}

/// How far a chunked value has been written.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Progress {
    /// Elements written.
    done: usize,
    /// Where the dict walk resumes (hash, set).
    pos: WalkPos,
    /// The element count when writing began (the header's): checked in
    /// debug builds, as a change to the value in between breaks the file.
    len: Option<usize>,
}

impl Progress {
    fn check_len(&mut self, len: usize) {
        debug_assert_eq!(
            *self.len.get_or_insert(len),
            len,
            "a value changed while a snapshot was writing it in slices"
        );
    }
}

fn len_of(v: ValueRef<'_>) -> usize {
    match v {
        ValueRef::Str(_) => 1,
        ValueRef::List(l) => l.len(),
        ValueRef::Set(s) => s.len(),
        ValueRef::ZSet(z) => z.len(),
        ValueRef::Hash(h) => h.len(),
        ValueRef::Stream(_) => 1,
    }
}

/// The RDB header of a chunked entry: metadata opcodes, type, key, count.
pub(crate) fn write_head(
    out: &mut Vec<u8>,
    key: &[u8],
    e: &Entry,
    expire_at_ms: u64,
    compress: bool,
    idle_s: Option<u64>,
    freq: Option<u8>,
) {
    write_entry_prefix(out, expire_at_ms, idle_s, freq);
    out.push(match e.value() {
        ValueRef::List(_) => T_LIST,
        ValueRef::Set(_) => T_SET,
        ValueRef::ZSet(_) => T_ZSET_2,
        ValueRef::Hash(_) => T_HASH,
        // INVARIANT: strings and streams are never chunked (`is_chunked`).
        ValueRef::Str(_) | ValueRef::Stream(_) => unreachable!("written whole"),
    });
    write_string(out, key, compress);
    write_len(out, len_of(e.value()) as u64);
}

/// Writes elements of `v` from `p` on until `out` grew by `budget` bytes
/// (at least one element); true when every element is written.
pub(crate) fn write_elems(
    out: &mut Vec<u8>,
    v: ValueRef<'_>,
    p: &mut Progress,
    compress: bool,
    budget: usize,
) -> bool {
    let (start, len) = (out.len(), len_of(v));
    p.check_len(len);
    let room = |out: &Vec<u8>| out.len() - start < budget;
    match v {
        ValueRef::Str(_) | ValueRef::Stream(_) => {}
        ValueRef::List(l) => {
            let mut it = l.iter_from(p.done);
            while p.done < len {
                let Some(x) = it.next() else { break };
                write_string(out, x, compress);
                p.done += 1;
                if !room(out) {
                    break;
                }
            }
        }
        ValueRef::ZSet(z) => {
            if p.done < len {
                for (m, sc) in z.iter_from(len - 1 - p.done, true) {
                    write_string(out, m, compress);
                    out.extend_from_slice(&sc.to_le_bytes());
                    p.done += 1;
                    if !room(out) {
                        break;
                    }
                }
            }
        }
        ValueRef::Set(s) => {
            if let Some(d) = s.table_dict() {
                d.walk(&mut p.pos, |m, _| {
                    write_string(out, m, compress);
                    p.done += 1;
                    room(out)
                });
            }
        }
        ValueRef::Hash(h) => {
            if let Some(d) = h.table_dict() {
                d.walk(&mut p.pos, |f, v| {
                    write_string(out, f, compress);
                    write_string(out, v, compress);
                    p.done += 1;
                    room(out)
                });
            }
        }
    }
    p.done >= len
}

/// The command form of [`write_elems`]: whole commands of up to
/// `ITEMS_PER_CMD` elements until `out` grew by `budget` bytes; after the
/// last, the PEXPIREAT of a key with a TTL. True when done.
pub(crate) fn write_elems_cmds(
    out: &mut Vec<u8>,
    key: &[u8],
    e: &Entry,
    expire_at_ms: u64,
    p: &mut Progress,
    budget: usize,
) -> bool {
    let (start, len) = (out.len(), len_of(e.value()));
    p.check_len(len);
    let (name, per): (&[u8], usize) = match e.value() {
        ValueRef::Str(_) | ValueRef::Stream(_) => (b"SET", 1),
        ValueRef::List(_) => (b"RPUSH", 1),
        ValueRef::Set(_) => (b"SADD", 1),
        ValueRef::ZSet(_) => (b"ZADD", 2),
        ValueRef::Hash(_) => (b"HMSET", 2),
    };
    // One command's header; `n` items follow.
    let head = |out: &mut Vec<u8>, n: usize| {
        write_header(out, b'*', 2 + n * per);
        write_bulk(out, name);
        write_bulk(out, key);
    };
    match e.value() {
        ValueRef::Str(_) | ValueRef::Stream(_) => {}
        ValueRef::List(l) => {
            let mut it = l.iter_from(p.done);
            while p.done < len && out.len() - start < budget {
                let n = (len - p.done).min(ITEMS_PER_CMD);
                head(out, n);
                for _ in 0..n {
                    // INVARIANT: `len` elements follow `done`.
                    let x = it.next().expect("list shorter than its length");
                    write_bulk(out, x);
                }
                p.done += n;
            }
        }
        ValueRef::ZSet(z) => {
            let mut it = z.iter_from(p.done, false);
            while p.done < len && out.len() - start < budget {
                let n = (len - p.done).min(ITEMS_PER_CMD);
                head(out, n);
                for (m, sc) in it.by_ref().take(n) {
                    write_bulk(out, super::pack::d2string(sc).as_bytes());
                    write_bulk(out, m);
                }
                p.done += n;
            }
        }
        ValueRef::Set(s) => {
            if let Some(d) = s.table_dict() {
                while p.done < len && out.len() - start < budget {
                    let n = (len - p.done).min(ITEMS_PER_CMD);
                    head(out, n);
                    let mut k = 0;
                    d.walk(&mut p.pos, |m, _| {
                        write_bulk(out, m);
                        k += 1;
                        k < n
                    });
                    p.done += n;
                }
            }
        }
        ValueRef::Hash(h) => {
            if let Some(d) = h.table_dict() {
                while p.done < len && out.len() - start < budget {
                    let n = (len - p.done).min(ITEMS_PER_CMD);
                    head(out, n);
                    let mut k = 0;
                    d.walk(&mut p.pos, |f, v| {
                        write_bulk(out, f);
                        write_bulk(out, v);
                        k += 1;
                        k < n
                    });
                    p.done += n;
                }
            }
        }
    }
    if p.done >= len {
        write_expire_cmd(out, key, expire_at_ms);
        return true;
    }
    false
}
