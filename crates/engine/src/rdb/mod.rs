//! The Redis RDB file format (version 10, what Redis 7.0 writes), shared by
//! snapshots (SAVE/BGSAVE, start-up loading) and DUMP/RESTORE payloads.
//!
//! # Writing
//!
//! Values are written in the forms Redis 7.0 itself writes, so a DUMP of a
//! small value is byte-for-byte Redis's:
//!
//! | value                     | RDB type                      |
//! |---------------------------|-------------------------------|
//! | string                    | 0, int-encoded or LZF as `rdbSaveRawString` |
//! | list                      | 18 quicklist 2: listpack nodes cut as Redis 7.0's quicklist cuts a pushed list |
//! | set, intset               | 11 intset                     |
//! | set, listpack / hashtable | 2 plain set (7.0 cannot load type 20) |
//! | zset, listpack            | 17 listpack (scores as `d2string`) |
//! | zset, skiplist            | 5 zset2 (binary doubles, highest first) |
//! | hash, listpack            | 16 listpack                   |
//! | hash, hashtable           | 4 plain hash                  |
//! | stream                    | 19 listpacks 2 (see `stream.rs`) |
//!
//! # Reading
//!
//! [`Reader`] streams a whole file; [`restore_payload`] decodes a DUMP
//! payload. Every type and encoding Redis 7.0 and 7.2 write, and the older
//! ones they still load, are read (see `read.rs`, `stream.rs`); module
//! values are refused with an [`RdbError`]. Loaded values get the encoding
//! Redis would choose on load under the given [`EncLimits`].
//!
//! Input is untrusted: corrupt or truncated data of any kind gives an
//! [`RdbError`] (never a panic), and no allocation is sized by a length
//! read from the input beyond what the input can back (see `read.rs`).

mod chunk;
mod cmds;
pub mod pack;
mod read;
mod stream;

use std::fmt;

use ds::lzf;

use crate::types::{EncLimits, Set};
use crate::value::{Str, StrView, Value, ValueRef};
use pack::LpWriter;

pub(crate) use chunk::{is_chunked, write_elems, write_elems_cmds, write_head, Progress};
pub use cmds::{write_entry_cmds, write_select_cmd};
pub use read::{Loaded, Reader};

/// What Redis 7.0 writes; files of versions 1..=[`RDB_VERSION_MAX_LOAD`]
/// are read.
pub const RDB_VERSION: u16 = 10;
/// The newest file version [`Reader`] accepts (Redis 7.2 writes 11; its
/// additions are the set listpack, which is read).
pub const RDB_VERSION_MAX_LOAD: u16 = 11;

// Opcodes.
pub(crate) const OP_FUNCTION2: u8 = 245;
pub(crate) const OP_FUNCTION_PRE_GA: u8 = 246;
pub(crate) const OP_MODULE_AUX: u8 = 247;
pub(crate) const OP_IDLE: u8 = 248;
pub(crate) const OP_FREQ: u8 = 249;
pub(crate) const OP_AUX: u8 = 250;
pub(crate) const OP_RESIZEDB: u8 = 251;
pub(crate) const OP_EXPIRETIME_MS: u8 = 252;
pub(crate) const OP_EXPIRETIME: u8 = 253;
pub(crate) const OP_SELECTDB: u8 = 254;
pub(crate) const OP_EOF: u8 = 255;

// Value types.
pub(crate) const T_STRING: u8 = 0;
pub(crate) const T_LIST: u8 = 1;
pub(crate) const T_SET: u8 = 2;
pub(crate) const T_ZSET: u8 = 3;
pub(crate) const T_HASH: u8 = 4;
pub(crate) const T_ZSET_2: u8 = 5;
pub(crate) const T_MODULE_PRE_GA: u8 = 6;
pub(crate) const T_MODULE_2: u8 = 7;
pub(crate) const T_HASH_ZIPMAP: u8 = 9;
pub(crate) const T_LIST_ZIPLIST: u8 = 10;
pub(crate) const T_SET_INTSET: u8 = 11;
pub(crate) const T_ZSET_ZIPLIST: u8 = 12;
pub(crate) const T_HASH_ZIPLIST: u8 = 13;
pub(crate) const T_LIST_QUICKLIST: u8 = 14;
pub(crate) const T_STREAM_LISTPACKS: u8 = 15;
pub(crate) const T_HASH_LISTPACK: u8 = 16;
pub(crate) const T_ZSET_LISTPACK: u8 = 17;
pub(crate) const T_LIST_QUICKLIST_2: u8 = 18;
pub(crate) const T_STREAM_LISTPACKS_2: u8 = 19;
pub(crate) const T_SET_LISTPACK: u8 = 20;
pub(crate) const T_STREAM_LISTPACKS_3: u8 = 21;

// Length / string encodings.
pub(crate) const ENC_INT8: u8 = 0;
pub(crate) const ENC_INT16: u8 = 1;
pub(crate) const ENC_INT32: u8 = 2;
pub(crate) const ENC_LZF: u8 = 3;

/// Quicklist node containers (RDB type 18).
pub(crate) const QL_PLAIN: u64 = 1;
pub(crate) const QL_PACKED: u64 = 2;

/// Why a file or payload could not be read: one line, with the byte offset
/// (from the start of the file or payload) where reading stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdbError {
    pub reason: String,
    pub offset: u64,
}

impl RdbError {
    pub fn new(reason: impl Into<String>, offset: u64) -> Self {
        RdbError {
            reason: reason.into(),
            offset,
        }
    }
}

impl fmt::Display for RdbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at byte {})", self.reason, self.offset)
    }
}

impl std::error::Error for RdbError {}

// ------------------------------------------------------------------- CRC64

const CRC64: crc::Crc<u64, crc::Table<16>> =
    crc::Crc::<u64, crc::Table<16>>::new(&crc::CRC_64_REDIS);

/// Redis's CRC64 (Jones polynomial, reflected, no final xor),
/// incremental: `crc64(crc64(0, a), b) == crc64(0, a ++ b)`.
pub fn crc64(crc: u64, data: &[u8]) -> u64 {
    // The crate reflects a custom initial value for reflected algorithms;
    // our running value is already in output form, so undo that.
    let mut d = CRC64.digest_with_initial(crc.reverse_bits());
    d.update(data);
    d.finalize()
}

// ----------------------------------------------------------------- writing

/// Redis's `rdbSaveLen`.
pub fn write_len(out: &mut Vec<u8>, len: u64) {
    if len < 64 {
        out.push(len as u8);
    } else if len < 16384 {
        out.push(0x40 | (len >> 8) as u8);
        out.push(len as u8);
    } else if len <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&len.to_be_bytes());
    }
}

/// Redis's `rdbEncodeInteger`: INT8/16/32, or false when out of range.
fn write_int_enc(out: &mut Vec<u8>, v: i64) -> bool {
    if let Ok(b) = i8::try_from(v) {
        out.push(0xC0 | ENC_INT8);
        out.push(b as u8);
    } else if let Ok(h) = i16::try_from(v) {
        out.push(0xC0 | ENC_INT16);
        out.extend_from_slice(&h.to_le_bytes());
    } else if let Ok(w) = i32::try_from(v) {
        out.push(0xC0 | ENC_INT32);
        out.extend_from_slice(&w.to_le_bytes());
    } else {
        return false;
    }
    true
}

/// Redis's `rdbSaveRawString`: a canonical integer of up to 11 characters
/// fitting 32 bits as INT8/16/32; else LZF when `compress`, longer than 20
/// bytes, and the result is at least 4 bytes smaller; else verbatim.
pub fn write_string(out: &mut Vec<u8>, s: &[u8], compress: bool) {
    if s.len() <= 11 {
        if let Some(v) = ds::string2ll(s) {
            if write_int_enc(out, v) {
                return;
            }
        }
    }
    if compress && s.len() > 20 {
        if let Some(c) = lzf::compress(s, s.len() - 4) {
            out.push(0xC0 | ENC_LZF);
            write_len(out, c.len() as u64);
            write_len(out, s.len() as u64);
            out.extend_from_slice(&c);
            return;
        }
    }
    write_len(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// An integer as a string (Redis's `rdbSaveLongLongAsStringObject`).
pub(crate) fn write_int_string(out: &mut Vec<u8>, v: i64) {
    if !write_int_enc(out, v) {
        let mut b = itoa::Buffer::new();
        let s = b.format(v);
        write_len(out, s.len() as u64);
        out.extend_from_slice(s.as_bytes());
    }
}

fn write_aux(out: &mut Vec<u8>, k: &str, v: &[u8]) {
    out.push(OP_AUX);
    write_string(out, k.as_bytes(), false);
    write_string(out, v, false);
}

/// `REDIS0010` then the AUX fields Redis 7.0 writes: redis-ver, redis-bits,
/// ctime, used-mem, aof-base.
pub fn write_header(out: &mut Vec<u8>, ctime_s: u64, used_mem: u64, aof_base: bool) {
    out.extend_from_slice(format!("REDIS{RDB_VERSION:04}").as_bytes());
    write_aux(out, "redis-ver", b"7.0.15");
    let mut b = itoa::Buffer::new();
    write_aux(out, "redis-bits", b.format(usize::BITS).as_bytes());
    write_aux(out, "ctime", b.format(ctime_s).as_bytes());
    write_aux(out, "used-mem", b.format(used_mem).as_bytes());
    write_aux(out, "aof-base", if aof_base { b"1" } else { b"0" });
}

/// The AUX field of a replication sync's payload: the database the
/// stream that follows it is in (Redis's `repl-stream-db`).
pub fn write_repl_stream_db(out: &mut Vec<u8>, db: usize) {
    let mut b = itoa::Buffer::new();
    write_aux(out, "repl-stream-db", b.format(db).as_bytes());
}

pub fn write_select_db(out: &mut Vec<u8>, db: usize) {
    out.push(OP_SELECTDB);
    write_len(out, db as u64);
}

pub fn write_resize_db(out: &mut Vec<u8>, keys: u64, expires: u64) {
    out.push(OP_RESIZEDB);
    write_len(out, keys);
    write_len(out, expires);
}

/// One key: EXPIRETIME_MS if it has a TTL (`expire_at_ms` != 0), then
/// type, key and value.
pub fn write_entry(
    out: &mut Vec<u8>,
    key: &[u8],
    v: ValueRef<'_>,
    expire_at_ms: u64,
    compress: bool,
) {
    write_entry_ext(out, key, v, expire_at_ms, compress, None, None);
}

/// [`write_entry`] with the eviction metadata Redis saves under an LRU
/// policy (`idle_s`, the IDLE opcode) or an LFU one (`freq`, FREQ).
pub fn write_entry_ext(
    out: &mut Vec<u8>,
    key: &[u8],
    v: ValueRef<'_>,
    expire_at_ms: u64,
    compress: bool,
    idle_s: Option<u64>,
    freq: Option<u8>,
) {
    write_entry_prefix(out, expire_at_ms, idle_s, freq);
    let t = value_type(v);
    out.push(t);
    write_string(out, key, compress);
    write_body(out, v, t, compress);
}

/// What comes before an entry's type byte: EXPIRETIME_MS, IDLE, FREQ.
fn write_entry_prefix(out: &mut Vec<u8>, exp: u64, idle_s: Option<u64>, freq: Option<u8>) {
    if exp != 0 {
        out.push(OP_EXPIRETIME_MS);
        out.extend_from_slice(&exp.to_le_bytes());
    }
    if let Some(idle) = idle_s {
        out.push(OP_IDLE);
        write_len(out, idle);
    }
    if let Some(f) = freq {
        out.push(OP_FREQ);
        out.push(f);
    }
}

/// Type byte + value body (what DUMP payloads and [`write_entry`] share).
pub fn write_value<'a>(out: &mut Vec<u8>, v: impl Into<ValueRef<'a>>, compress: bool) {
    let v = v.into();
    let t = value_type(v);
    out.push(t);
    write_body(out, v, t, compress);
}

/// The RDB type `v` is written as (see the module docs).
fn value_type(v: ValueRef<'_>) -> u8 {
    use crate::types::set::SetEncoding;
    match v {
        ValueRef::Str(_) => T_STRING,
        ValueRef::List(_) => T_LIST_QUICKLIST_2,
        ValueRef::Set(s) if s.kind() == SetEncoding::IntSet => T_SET_INTSET,
        ValueRef::Set(_) => T_SET,
        ValueRef::ZSet(z) if z.encoding() == "listpack" => T_ZSET_LISTPACK,
        ValueRef::ZSet(_) => T_ZSET_2,
        ValueRef::Hash(h) if h.is_listpack() => T_HASH_LISTPACK,
        ValueRef::Hash(_) => T_HASH,
        ValueRef::Stream(_) => T_STREAM_LISTPACKS_2,
    }
}

fn write_body(out: &mut Vec<u8>, v: ValueRef<'_>, t: u8, compress: bool) {
    match v {
        ValueRef::Stream(s) => stream::write_stream(out, s, compress),
        ValueRef::Str(s) => match s.view() {
            StrView::Int(n) => write_int_string(out, n),
            StrView::Bytes(b) => write_string(out, b, compress),
        },
        ValueRef::List(l) => write_list_nodes(out, l, compress),
        ValueRef::Set(s) => write_set(out, s, t, compress),
        ValueRef::ZSet(z) => {
            if t == T_ZSET_LISTPACK {
                let mut w = LpWriter::new();
                for (m, sc) in z.iter() {
                    w.push(m);
                    w.push(pack::d2string(sc).as_bytes());
                }
                write_string(out, &w.finish(), compress);
            } else {
                // Highest score first, as Redis walks its skiplist from
                // the tail (so loading inserts at the head each time).
                write_len(out, z.len() as u64);
                let last = z.len().saturating_sub(1);
                for (m, sc) in z.iter_from(last, true) {
                    write_string(out, m, compress);
                    out.extend_from_slice(&sc.to_le_bytes());
                }
            }
        }
        ValueRef::Hash(h) => {
            if t == T_HASH_LISTPACK {
                let mut w = LpWriter::new();
                for (f, v) in h.iter() {
                    f.with_bytes(|b| w.push(b));
                    v.with_bytes(|b| w.push(b));
                }
                write_string(out, &w.finish(), compress);
            } else {
                write_len(out, h.len() as u64);
                for (f, v) in h.iter() {
                    f.with_bytes(|b| write_string(out, b, compress));
                    v.with_bytes(|b| write_string(out, b, compress));
                }
            }
        }
    }
}

fn write_set(out: &mut Vec<u8>, s: &Set, t: u8, compress: bool) {
    use crate::types::set::{with_bytes, Member};
    if t == T_SET_INTSET {
        let vals: Vec<i64> = s
            .iter()
            .map(|m| match m {
                Member::Int(n) => n,
                // INVARIANT: an intset holds integers only.
                Member::Str(b) => ds::string2ll(b).unwrap_or_default(),
            })
            .collect();
        let blob = pack::intset_encode(vals.iter().copied(), 2);
        write_string(out, &blob, compress);
    } else {
        write_len(out, s.len() as u64);
        for m in s.iter() {
            match m {
                Member::Int(n) => write_int_string(out, n),
                Member::Str(_) => with_bytes(m, |b| write_string(out, b, compress)),
            }
        }
    }
}

/// Redis 7.0's `_quicklistNodeAllowInsert`: may a node of `node_bytes`
/// (listpack size) and `count` entries take an element of `len` bytes?
fn node_allows(node_bytes: usize, count: usize, len: usize, fill: i32) -> bool {
    const SIZE_ESTIMATE_OVERHEAD: usize = 8;
    const SIZE_SAFETY_LIMIT: usize = 8192;
    const OPTIMIZATION_LEVEL: [usize; 5] = [4096, 8192, 16384, 32768, 65536];
    let new_sz = node_bytes + len + SIZE_ESTIMATE_OVERHEAD;
    if fill < 0 {
        let off = (-fill - 1) as usize;
        if off < OPTIMIZATION_LEVEL.len() && new_sz <= OPTIMIZATION_LEVEL[off] {
            return true;
        }
    }
    if new_sz > SIZE_SAFETY_LIMIT {
        return false;
    }
    (count as i64) < i64::from(fill)
}

/// Entries per node, head to tail, for a list grown at its head (LPUSH):
/// Redis 7.0 fills the head node until it is full and then starts a new
/// head, so its nodes are full from the tail and the head one is partial.
/// Cut from the tail with the same rule as [`node_allows`].
fn head_grown_cuts(l: &ds::QuickList, fill: i32) -> Vec<usize> {
    // Sizes only: a listpack is its header, its entries and an end byte.
    let empty = LpWriter::new().bytes();
    let mut cuts = Vec::new();
    let (mut bytes, mut count) = (empty, 0);
    let mut items = l.iter_rev();
    while let Some(it) = items.next() {
        if count > 0 && !node_allows(bytes, count, it.len(), fill) {
            cuts.push(count);
            (bytes, count) = (empty, 0);
        }
        bytes += pack::lp_entry_size(it);
        count += 1;
    }
    if count > 0 {
        cuts.push(count);
    }
    cuts.reverse();
    cuts
}

/// A list as quicklist 2 nodes: listpacks filled as Redis 7.0 fills them
/// when the list is built by pushes, so such a list gets Redis's nodes
/// (and DUMP its bytes): at the tail (RPUSH) by default, or from the tail
/// backwards when our own head node is the less full end (a list built by
/// LPUSH). Lists edited in the middle may be cut differently from Redis
/// (same contents).
fn write_list_nodes(out: &mut Vec<u8>, l: &ds::QuickList, compress: bool) {
    let fill = l.fill();
    let mut nodes: Vec<Vec<u8>> = Vec::new();
    let mut cur = LpWriter::new();
    // Our nodes are not listpacks: compressed ones are read decompressed
    // and every node is re-packed.
    let (head, tail) = l.end_node_counts();
    let mut cuts = if l.node_count() > 1 && head < tail {
        head_grown_cuts(l, fill)
    } else {
        Vec::new()
    }
    .into_iter();
    let mut left = cuts.next();
    let mut items = l.iter();
    while let Some(it) = items.next() {
        let full = match left {
            Some(n) => cur.count() == n,
            None => cur.count() > 0 && !node_allows(cur.bytes(), cur.count(), it.len(), fill),
        };
        if full {
            nodes.push(std::mem::take(&mut cur).finish());
            left = cuts.next();
        }
        cur.push(it);
    }
    if cur.count() > 0 {
        nodes.push(cur.finish());
    }
    write_len(out, nodes.len() as u64);
    let depth = l.compress_depth() as usize;
    let count = nodes.len();
    for (k, n) in nodes.iter().enumerate() {
        write_len(out, QL_PACKED);
        // Redis saves a node its list holds compressed as that LZF blob
        // whatever `rdbcompression` says. With compression on, the blob
        // is the bytes `write_string` produces anyway (same compressor,
        // and a node compressed saves more than write_string requires).
        let inner = depth != 0 && k >= depth && k + depth < count;
        if inner && !compress && n.len() >= 48 {
            if let Some(c) = lzf::compress(n, n.len()).filter(|c| c.len() + 8 < n.len()) {
                out.push(0xC0 | ENC_LZF);
                write_len(out, c.len() as u64);
                write_len(out, n.len() as u64);
                out.extend_from_slice(&c);
                continue;
            }
        }
        write_string(out, n, compress);
    }
}

/// 0xFF; the caller appends the 8-byte little-endian CRC64 of everything
/// before it (0 when `rdbchecksum no`).
/// One function library (Redis 7.0's `rdbSaveFunctions`: the
/// `FUNCTION2` opcode, then the library's whole code, shebang included,
/// as a string). Written after the AUX fields, before the databases.
pub fn write_function(out: &mut Vec<u8>, code: &[u8], compress: bool) {
    out.push(OP_FUNCTION2);
    write_string(out, code, compress);
}

/// FUNCTION DUMP's payload: each library as [`write_function`] writes it,
/// then the 2-byte RDB version and the CRC64, as a key's DUMP payload.
pub fn function_dump_payload<'a>(codes: impl Iterator<Item = &'a [u8]>, compress: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for c in codes {
        write_function(&mut out, c, compress);
    }
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(0, &out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The libraries' codes in a FUNCTION RESTORE payload whose footer
/// [`verify_dump_payload`] accepted. Errors are Redis's texts (without the
/// `ERR ` code): a byte other than the function opcode, the pre-GA form,
/// or a string that cannot be read.
pub fn function_payload_codes(p: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let body = &p[..p.len().saturating_sub(10)];
    let mut s = read::Src::with_buffer(body, body.len());
    let mut codes = Vec::new();
    while (s.offset() as usize) < body.len() {
        match s.u8() {
            Ok(OP_FUNCTION2) => {}
            Ok(OP_FUNCTION_PRE_GA) => return Err("Pre-GA function format not supported".into()),
            Ok(_) => return Err("given type is not a function".into()),
            Err(_) => return Err("can not read data type".into()),
        }
        match s.string() {
            Ok(c) => codes.push(c),
            Err(_) => return Err("failed loading the given functions payload".into()),
        }
    }
    Ok(codes)
}

pub fn write_eof(out: &mut Vec<u8>) {
    out.push(OP_EOF);
}

// ------------------------------------------------------------ DUMP/RESTORE

/// DUMP payload: type byte + value + 2-byte LE RDB version + 8-byte LE
/// CRC64 of all that (Redis's `createDumpPayload`, with compression on, as
/// `rdbcompression yes`).
pub fn dump_payload<'a>(v: impl Into<ValueRef<'a>>) -> Vec<u8> {
    dump_payload_with(v, true)
}

/// [`dump_payload`], compressing long strings only when `compress`
/// (`rdbcompression`, which Redis's DUMP honours too).
pub fn dump_payload_with<'a>(v: impl Into<ValueRef<'a>>, compress: bool) -> Vec<u8> {
    let mut out = Vec::new();
    write_value(&mut out, v, compress);
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(0, &out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Redis's `verifyDumpPayload`: a footer is present, its RDB version is
/// at most [`RDB_VERSION`], and the CRC64 matches (RESTORE answers "DUMP
/// payload version or checksum are wrong" when this fails).
pub fn verify_dump_payload(p: &[u8]) -> Result<(), RdbError> {
    if p.len() < 10 {
        return Err(RdbError::new("payload too short", p.len() as u64));
    }
    let body = p.len() - 10;
    let ver = u16::from_le_bytes([p[body], p[body + 1]]);
    if ver > RDB_VERSION {
        return Err(RdbError::new(
            format!("payload RDB version {ver} is newer than {RDB_VERSION}"),
            body as u64,
        ));
    }
    let mut want = [0u8; 8];
    want.copy_from_slice(&p[body + 2..]);
    if crc64(0, &p[..body + 2]) != u64::from_le_bytes(want) {
        return Err(RdbError::new(
            "payload checksum mismatch",
            (body + 2) as u64,
        ));
    }
    Ok(())
}

/// Decodes a DUMP payload's value without checking its footer (call
/// [`verify_dump_payload`] first; RESTORE answers "Bad data format" when
/// this fails). As Redis, the value is read from the whole payload, so a
/// truncated body runs into the footer's bytes, and bytes after the value
/// are ignored.
pub fn decode_dump_payload(p: &[u8], limits: EncLimits) -> Result<Value, RdbError> {
    read::decode_value(p, limits)
}

/// Checks version (<= [`RDB_VERSION`], as Redis's `verifyDumpPayload`) and
/// CRC, then decodes.
pub fn restore_payload(p: &[u8], limits: EncLimits) -> Result<Value, RdbError> {
    verify_dump_payload(p)?;
    decode_dump_payload(p, limits)
}

#[cfg(test)]
mod tests;
