//! One stream node: a listpack in Redis's byte layout (`listpack.c`, the
//! stream encoding of `t_stream.c`), so a node is written to an RDB file
//! or a DUMP payload as it is and read back without conversion.
//!
//! ```text
//! master entry: count | deleted | num-fields | field_1 .. field_N | 0
//! each entry:   flags | ms-diff | seq-diff | [num-fields | field_1] value_1 .. | lp-count
//! ```
//!
//! `count` and `deleted` are the node's live and deleted (flagged, still
//! present) entries; IDs are differences from the node's master ID (its
//! key in the stream's map), wrapping as Redis's unsigned arithmetic does;
//! an entry whose fields are the master's carries the SAMEFIELDS flag and
//! only its values. `lp-count` is the number of elements of the entry
//! before it (Redis walks backwards with it).
//!
//! Invariant: every node held by a [`super::Stream`] was built here or
//! checked by [`validate`], so the walkers below index a well-formed
//! listpack (a failure there is a bug, not input).

use crate::rdb::pack::{lp_append, lp_append_int, lp_backlen_size, lp_elem, Elem};

use super::StreamId;

pub const F_DELETED: i64 = 1;
pub const F_SAMEFIELDS: i64 = 2;

const HDR: usize = 6;
const EOF: u8 = 0xFF;
const COUNT_UNKNOWN: u16 = 65535;

/// The element at `p` and the offset of the next one.
#[inline]
pub fn elem(lp: &[u8], p: usize) -> (Elem<'_>, usize) {
    // INVARIANT: nodes are well formed (module docs).
    let (e, n) = lp_elem(lp, p).expect("stream node listpack is well formed");
    (e, p + n + lp_backlen_size(n))
}

/// An element known to be an integer (Redis's `lpGetInteger`).
#[inline]
pub fn int(lp: &[u8], p: usize) -> (i64, usize) {
    match elem(lp, p) {
        (Elem::Int(v), n) => (v, n),
        (Elem::Str(s), n) => (ds::string2ll(s).unwrap_or(0), n),
    }
}

fn set_total(lp: &mut [u8]) {
    let total = lp.len() as u32;
    lp[0..4].copy_from_slice(&total.to_le_bytes());
}

fn add_count(lp: &mut [u8], n: usize) {
    let cur = u16::from_le_bytes([lp[4], lp[5]]);
    if cur != COUNT_UNKNOWN {
        let next = usize::from(cur) + n;
        let v = if next < usize::from(COUNT_UNKNOWN) {
            next as u16
        } else {
            COUNT_UNKNOWN
        };
        lp[4..6].copy_from_slice(&v.to_le_bytes());
    }
}

/// Replaces the integer element at `p` (Redis's `lpReplaceInteger`).
pub fn replace_int(lp: &mut Vec<u8>, p: usize, v: i64) {
    let (_, next) = elem(lp, p);
    // A 7-bit integer over another (a node's counts, up to 127): in place.
    if next == p + 2 && lp[p] < 0x80 && (0..0x80).contains(&v) {
        lp[p] = v as u8;
        return;
    }
    let mut enc = Vec::with_capacity(11);
    lp_append_int(&mut enc, v);
    lp.splice(p..next, enc);
    set_total(lp);
}

/// Appends elements before the terminator.
struct Appender<'a> {
    lp: &'a mut Vec<u8>,
    n: usize,
}

impl Appender<'_> {
    fn new(lp: &mut Vec<u8>) -> Appender<'_> {
        lp.pop();
        Appender { lp, n: 0 }
    }
    fn int(&mut self, v: i64) {
        lp_append_int(self.lp, v);
        self.n += 1;
    }
    fn str(&mut self, s: &[u8]) {
        lp_append(self.lp, s);
        self.n += 1;
    }
}

impl Drop for Appender<'_> {
    fn drop(&mut self) {
        self.lp.push(EOF);
        set_total(self.lp);
        add_count(self.lp, self.n);
    }
}

/// A node holding only the master entry for `fields`, no entry yet (the
/// first [`append`] makes the count 1, the bytes Redis writes at once).
pub fn new_node(fields: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut lp = vec![0, 0, 0, 0, 0, 0, EOF];
    {
        let mut a = Appender::new(&mut lp);
        a.int(0);
        a.int(0);
        a.int(fields.len() as i64);
        for (f, _) in fields {
            a.str(f);
        }
        a.int(0);
    }
    lp
}

/// The master entry: live count, deleted count, the fields, and where the
/// first entry starts.
pub struct Master<'a> {
    pub count: i64,
    pub deleted: i64,
    pub fields: Vec<Elem<'a>>,
    pub first_entry: usize,
}

pub fn master(lp: &[u8]) -> Master<'_> {
    let (count, p) = int(lp, HDR);
    let (deleted, p) = int(lp, p);
    let (nf, mut p) = int(lp, p);
    let mut fields = Vec::with_capacity(nf.clamp(0, 64) as usize);
    for _ in 0..nf {
        let (f, n) = elem(lp, p);
        fields.push(f);
        p = n;
    }
    let (_, p) = elem(lp, p);
    Master {
        count,
        deleted,
        fields,
        first_entry: p,
    }
}

/// Appends an entry to the node whose master ID is `master_id`, updating
/// the master count (Redis's `streamAppendItem` after the node choice).
pub fn append(lp: &mut Vec<u8>, master_id: StreamId, id: StreamId, fields: &[(&[u8], &[u8])]) {
    let (count, _) = master_counts(lp);
    let same = same_fields(lp, fields);
    replace_int(lp, HDR, count + 1);
    let mut a = Appender::new(lp);
    let flags = if same { F_SAMEFIELDS } else { 0 };
    a.int(flags);
    a.int(id.ms.wrapping_sub(master_id.ms) as i64);
    a.int(id.seq.wrapping_sub(master_id.seq) as i64);
    if !same {
        a.int(fields.len() as i64);
    }
    for (f, v) in fields {
        if !same {
            a.str(f);
        }
        a.str(v);
    }
    let mut lp_count = fields.len() as i64 + 3;
    if !same {
        lp_count += fields.len() as i64 + 1;
    }
    a.int(lp_count);
}

/// The master entry's live and deleted counts (without [`master`]'s
/// field list: XADD asks on every call).
pub fn master_counts(lp: &[u8]) -> (i64, i64) {
    let (count, p) = int(lp, HDR);
    let (deleted, _) = int(lp, p);
    (count, deleted)
}

/// Whether `fields` are the master entry's fields, in order (the entry is
/// then stored SAMEFIELDS).
fn same_fields(lp: &[u8], fields: &[(&[u8], &[u8])]) -> bool {
    let (_, p) = int(lp, HDR);
    let (_, p) = int(lp, p);
    let (nf, mut p) = int(lp, p);
    if nf != fields.len() as i64 {
        return false;
    }
    for (f, _) in fields {
        let (e, next) = elem(lp, p);
        if !elem_eq(e, f) {
            return false;
        }
        p = next;
    }
    true
}

/// Whether a listpack element holds exactly these bytes.
pub fn elem_eq(e: Elem<'_>, b: &[u8]) -> bool {
    match e {
        Elem::Str(s) => s == b,
        Elem::Int(n) => itoa::Buffer::new().format(n).as_bytes() == b,
    }
}

/// One entry of a node.
pub struct Entry<'a> {
    /// Offset of the flags element.
    pub at: usize,
    pub flags: i64,
    pub id: StreamId,
    pub fields: Vec<(Elem<'a>, Elem<'a>)>,
    /// Offset of the next entry (or of the terminator).
    pub next: usize,
}

impl Entry<'_> {
    pub fn deleted(&self) -> bool {
        self.flags & F_DELETED != 0
    }
}

/// The entry at `p` (a flags element).
pub fn entry_at<'a>(lp: &'a [u8], p: usize, master_id: StreamId, m: &Master<'a>) -> Entry<'a> {
    let (flags, q) = int(lp, p);
    let (ms, q) = int(lp, q);
    let (seq, mut q) = int(lp, q);
    let id = StreamId {
        ms: master_id.ms.wrapping_add(ms as u64),
        seq: master_id.seq.wrapping_add(seq as u64),
    };
    let mut fields = Vec::new();
    if flags & F_SAMEFIELDS != 0 {
        fields.reserve(m.fields.len());
        for f in &m.fields {
            let (v, n) = elem(lp, q);
            fields.push((*f, v));
            q = n;
        }
    } else {
        let (nf, n) = int(lp, q);
        q = n;
        fields.reserve(nf.clamp(0, 64) as usize);
        for _ in 0..nf {
            let (f, n) = elem(lp, q);
            let (v, n) = elem(lp, n);
            fields.push((f, v));
            q = n;
        }
    }
    let (_, next) = elem(lp, q);
    Entry {
        at: p,
        flags,
        id,
        fields,
        next,
    }
}

/// The flags and ID of the entry at `p`, and where its fields start.
#[inline]
fn entry_head(lp: &[u8], p: usize, master_id: StreamId) -> (i64, StreamId, usize) {
    let (flags, q) = int(lp, p);
    let (ms, q) = int(lp, q);
    let (seq, q) = int(lp, q);
    let id = StreamId {
        ms: master_id.ms.wrapping_add(ms as u64),
        seq: master_id.seq.wrapping_add(seq as u64),
    };
    (flags, id, q)
}

/// Walks the fields of an entry starting at `q` (after its head), pushing
/// them to `out` when given; returns the offset of the next entry.
#[inline]
fn entry_fields<'a>(
    lp: &'a [u8],
    mut q: usize,
    flags: i64,
    m: &Master<'a>,
    mut out: Option<&mut Vec<(Elem<'a>, Elem<'a>)>>,
) -> usize {
    if flags & F_SAMEFIELDS != 0 {
        for f in &m.fields {
            let (v, n) = elem(lp, q);
            if let Some(o) = out.as_deref_mut() {
                o.push((*f, v));
            }
            q = n;
        }
    } else {
        let (nf, n) = int(lp, q);
        q = n;
        for _ in 0..nf {
            let (f, n) = elem(lp, q);
            let (v, n) = elem(lp, n);
            if let Some(o) = out.as_deref_mut() {
                o.push((f, v));
            }
            q = n;
        }
    }
    elem(lp, q).1
}

/// Calls `f` with each live entry of the node from `start` to `end`, in
/// order (or reversed), until it returns false; false if it stopped (`f`
/// did, or an entry passed the far bound). Unlike [`entries`], no
/// allocation per entry: fields are decoded into one reused buffer, and
/// only for the entries `f` sees.
pub fn scan<'a>(
    lp: &'a [u8],
    master_id: StreamId,
    start: StreamId,
    end: StreamId,
    rev: bool,
    f: &mut impl FnMut(StreamId, &[(Elem<'a>, Elem<'a>)]) -> bool,
) -> bool {
    let m = master(lp);
    let mut fields = Vec::with_capacity(m.fields.len());
    if !rev {
        let mut p = m.first_entry;
        while lp[p] != EOF {
            let (flags, id, q) = entry_head(lp, p, master_id);
            if id > end {
                return false;
            }
            let want = id >= start && flags & F_DELETED == 0;
            fields.clear();
            p = entry_fields(lp, q, flags, &m, want.then_some(&mut fields));
            if want && !f(id, &fields) {
                return false;
            }
        }
        return true;
    }
    // Backwards: the heads first (one small buffer), then the fields of
    // the entries `f` sees.
    let mut heads = Vec::new();
    let mut p = m.first_entry;
    while lp[p] != EOF {
        let (flags, id, q) = entry_head(lp, p, master_id);
        heads.push((flags, id, q));
        p = entry_fields(lp, q, flags, &m, None);
    }
    for &(flags, id, q) in heads.iter().rev() {
        if id < start {
            return false;
        }
        if id <= end && flags & F_DELETED == 0 {
            fields.clear();
            entry_fields(lp, q, flags, &m, Some(&mut fields));
            if !f(id, &fields) {
                return false;
            }
        }
    }
    true
}

/// Every entry of the node (deleted ones included), in order.
pub fn entries(lp: &[u8], master_id: StreamId) -> Vec<Entry<'_>> {
    let m = master(lp);
    let mut out = Vec::new();
    let mut p = m.first_entry;
    while lp[p] != EOF {
        let e = entry_at(lp, p, master_id, &m);
        p = e.next;
        out.push(e);
    }
    out
}

/// The ID of the node's last entry, deleted or not (Redis's
/// `lpGetEdgeStreamID` from the end).
pub fn last_id(lp: &[u8], master_id: StreamId) -> StreamId {
    entries(lp, master_id)
        .last()
        .map(|e| e.id)
        .unwrap_or(master_id)
}

/// Marks the entry whose flags are at `at` deleted and moves it from the
/// live count to the deleted one; returns the live count left.
pub fn mark_deleted(lp: &mut Vec<u8>, at: usize, flags: i64) -> i64 {
    // Flags are 0..=3: a one-byte integer, rewritten in place.
    lp[at] = (flags | F_DELETED) as u8;
    let m = master(lp);
    let (count, deleted) = (m.count, m.deleted);
    drop(m);
    replace_int(lp, HDR, count - 1);
    let (_, p) = elem(lp, HDR);
    replace_int(lp, p, deleted + 1);
    count - 1
}

/// Sets the live and deleted counts (after a trim inside the node).
pub fn set_counts(lp: &mut Vec<u8>, count: i64, deleted: i64) {
    replace_int(lp, HDR, count);
    let (_, p) = elem(lp, HDR);
    replace_int(lp, p, deleted);
}

/// Checks a node read from an RDB file or a DUMP payload (Redis's
/// `streamValidateListpackIntegrity` with deep checks): a valid listpack,
/// a master entry, and entries whose structure and counts add up, with
/// IDs in increasing order from `master_id`. Returns the live count.
pub fn validate(lp: &[u8], master_id: StreamId) -> Result<i64, &'static str> {
    let elems = crate::rdb::pack::lp_decode(lp)?;
    let gi = |i: usize| -> Result<i64, &'static str> {
        match elems.get(i) {
            Some(Elem::Int(v)) => Ok(*v),
            Some(Elem::Str(s)) => ds::string2ll(s).ok_or("stream node integer expected"),
            None => Err("stream node truncated"),
        }
    };
    let count = gi(0)?;
    let deleted = gi(1)?;
    let nf = gi(2)?;
    if count < 0 || deleted < 0 || nf < 0 {
        return Err("stream node negative count");
    }
    let nf = nf as usize;
    let mut i = 3usize.checked_add(nf).ok_or("stream node overflow")?;
    if gi(i)? != 0 {
        return Err("stream master entry terminator missing");
    }
    i += 1;
    let (mut live, mut dead) = (0i64, 0i64);
    let mut prev: Option<StreamId> = None;
    while i < elems.len() {
        let start = i;
        let flags = gi(i)?;
        if !(0..=3).contains(&flags) {
            return Err("stream entry bad flags");
        }
        let ms = gi(i + 1)?;
        let seq = gi(i + 2)?;
        let id = StreamId {
            ms: master_id.ms.wrapping_add(ms as u64),
            seq: master_id.seq.wrapping_add(seq as u64),
        };
        if prev.is_some_and(|p| p >= id) || id < master_id {
            return Err("stream entry IDs out of order");
        }
        prev = Some(id);
        i += 3;
        let fields = if flags & F_SAMEFIELDS != 0 {
            i = i.checked_add(nf).ok_or("stream node overflow")?;
            nf
        } else {
            let n = gi(i)?;
            if n < 0 {
                return Err("stream entry negative field count");
            }
            let n = n as usize;
            i = i
                .checked_add(1 + n.checked_mul(2).ok_or("stream node overflow")?)
                .ok_or("stream node overflow")?;
            n
        };
        if i >= elems.len() {
            return Err("stream entry truncated");
        }
        let lp_count = gi(i)?;
        let want = (i - start) as i64;
        if lp_count != want {
            return Err("stream entry lp-count mismatch");
        }
        let _ = fields;
        i += 1;
        if flags & F_DELETED != 0 {
            dead += 1;
        } else {
            live += 1;
        }
    }
    if live != count || dead != deleted {
        return Err("stream node counts mismatch");
    }
    if live + dead == 0 {
        return Err("stream node without entries");
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    #[test]
    fn bytes_match_redis() {
        // XADD s 1-1 a 1 b 2; XADD s 1-2 a 3 b 4; XADD s 2-0 c 3 on Redis
        // 7.0.15 (the node of its DUMP).
        let m = id(1, 1);
        let mut lp = new_node(&[(b"a", b"1"), (b"b", b"2")]);
        append(&mut lp, m, m, &[(b"a", b"1"), (b"b", b"2")]);
        append(&mut lp, m, id(1, 2), &[(b"a", b"3"), (b"b", b"4")]);
        append(&mut lp, m, id(2, 0), &[(b"c", b"3")]);
        let want: &[u8] = b"=\x00\x00\x00\x19\x00\x03\x01\x00\x01\x02\x01\x81a\x02\x81b\x02\x00\x01\x02\x01\x00\x01\x00\x01\x01\x01\x02\x01\x05\x01\x02\x01\x00\x01\x01\x01\x03\x01\x04\x01\x05\x01\x00\x01\x01\x01\xdf\xff\x02\x01\x01\x81c\x02\x03\x01\x06\x01\xff";
        assert_eq!(lp, want);
        assert_eq!(validate(&lp, m), Ok(3));
        let es = entries(&lp, m);
        let ids: Vec<_> = es.iter().map(|e| e.id).collect();
        assert_eq!(ids, [id(1, 1), id(1, 2), id(2, 0)]);
        assert_eq!(es[2].fields, [(Elem::Str(b"c"), Elem::Int(3))]);
        assert_eq!(last_id(&lp, m), id(2, 0));
        let at = es[1].at;
        let flags = es[1].flags;
        assert_eq!(mark_deleted(&mut lp, at, flags), 2);
        assert_eq!(validate(&lp, m), Ok(2));
        assert!(entries(&lp, m)[1].deleted());
    }

    #[test]
    fn validate_refuses_garbage() {
        let m = id(5, 0);
        let mut lp = new_node(&[(b"f", b"v")]);
        append(&mut lp, m, m, &[(b"f", b"v")]);
        assert!(validate(&lp, m).is_ok());
        for cut in 0..lp.len() {
            assert!(validate(&lp[..cut], m).is_err());
        }
        // Only a master entry.
        assert!(validate(&new_node(&[(b"f", b"v")]), m).is_err());
    }
}
