//! Reading RDB files and DUMP payloads.
//!
//! [`Src`] is a buffered byte source that knows its offset and keeps the
//! running CRC64 of what was consumed (verified at EOF). Values are decoded
//! by [`read_object`], which handles every value type Redis 7.0 and 7.2
//! write and the legacy ones they load (see the list in `mod.rs`), then
//! builds a Tessera value in the encoding Redis would choose on load.
//!
//! Hardening: every length read from the input is only trusted as far as
//! the input backs it. Strings are read in bounded chunks (a corrupt length
//! of 2^60 fails at end of input after allocating what was there);
//! collection preallocations are capped; LZF output is capped by the
//! format's maximum expansion ratio; packed blobs are fully validated
//! (`pack.rs`); duplicate members or fields are an error (as Redis's deep
//! sanitisation); NaN scores are an error.

use std::io::Read;

use super::pack::{self, Elem};
use super::*;
use crate::types::set::Member;
use crate::types::{Hash, List, ZSet};

/// Largest collection preallocation made from a count read from the input.
const PREALLOC_MAX: usize = 1 << 16;
/// Bytes read from the source at a time.
const CHUNK: usize = 64 * 1024;
/// LZF expands at most ~132x (a 2-byte back-reference yields up to 9
/// bytes, a 3-byte one 264); anything claiming more is corrupt.
const LZF_MAX_RATIO: u64 = 132;

/// One key read from a file.
#[derive(Debug)]
pub struct Loaded {
    /// The database (SELECTDB) the key belongs to; the caller checks it
    /// against its number of databases.
    pub db: usize,
    pub key: Vec<u8>,
    pub value: Value,
    /// Absolute Unix milliseconds, 0 = no expiry. Keys already expired are
    /// returned too: dropping them is the caller's decision (Redis drops
    /// them when loading as a master).
    pub expire_at_ms: u64,
    /// LRU idle time (IDLE opcode), seconds.
    pub idle_s: Option<u64>,
    /// LFU counter (FREQ opcode).
    pub freq: Option<u8>,
}

/// A buffered source with offset tracking and a running CRC64.
pub(crate) struct Src<R> {
    r: R,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    /// Bytes consumed before `buf[0]`.
    base: u64,
    crc: u64,
    /// `buf[..crc_pos]` is already folded into `crc`.
    crc_pos: usize,
}

impl<R: Read> Src<R> {
    pub(crate) fn new(r: R) -> Self {
        Self::with_buffer(r, CHUNK)
    }

    /// A source with a `cap`-byte buffer (clamped to 16..=CHUNK): a small
    /// DUMP payload does not need 64 KiB.
    pub(crate) fn with_buffer(r: R, cap: usize) -> Self {
        Src {
            r,
            buf: vec![0; cap.clamp(16, CHUNK)],
            pos: 0,
            end: 0,
            base: 0,
            crc: 0,
            crc_pos: 0,
        }
    }

    pub(crate) fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    fn err<T>(&self, reason: impl Into<String>) -> Result<T, RdbError> {
        Err(RdbError::new(reason, self.offset()))
    }

    /// The CRC64 of every byte consumed so far.
    fn crc(&mut self) -> u64 {
        self.crc = crc64(self.crc, &self.buf[self.crc_pos..self.pos]);
        self.crc_pos = self.pos;
        self.crc
    }

    /// Makes at least `need` (<= 16, the smallest buffer) unread bytes
    /// available.
    fn fill(&mut self, need: usize) -> Result<(), RdbError> {
        debug_assert!(need <= 16);
        if self.end - self.pos >= need {
            return Ok(());
        }
        self.crc();
        self.buf.copy_within(self.pos..self.end, 0);
        self.base += self.pos as u64;
        self.end -= self.pos;
        self.pos = 0;
        self.crc_pos = 0;
        while self.end < need {
            match self.r.read(&mut self.buf[self.end..]) {
                Ok(0) => return self.err("unexpected end of file"),
                Ok(n) => self.end += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return self.err(format!("read error: {e}")),
            }
        }
        Ok(())
    }

    pub(crate) fn u8(&mut self) -> Result<u8, RdbError> {
        self.fill(1)?;
        self.pos += 1;
        Ok(self.buf[self.pos - 1])
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], RdbError> {
        self.fill(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(&self.buf[self.pos..self.pos + N]);
        self.pos += N;
        Ok(a)
    }

    /// Exactly `n` bytes, read in chunks: memory grows only as the input
    /// delivers.
    fn bytes(&mut self, n: u64) -> Result<Vec<u8>, RdbError> {
        let n = usize::try_from(n).or_else(|_| self.err("string too long"))?;
        let mut out = Vec::with_capacity(n.min(CHUNK));
        while out.len() < n {
            self.fill(1)?;
            let k = (n - out.len()).min(self.end - self.pos);
            out.extend_from_slice(&self.buf[self.pos..self.pos + k]);
            self.pos += k;
        }
        Ok(out)
    }

    /// Redis's `rdbLoadLenByRef`: the length and whether it is a special
    /// string encoding instead.
    fn len_enc(&mut self) -> Result<(u64, bool), RdbError> {
        let b = self.u8()?;
        Ok(match b >> 6 {
            0 => (u64::from(b & 0x3F), false),
            1 => (u64::from(b & 0x3F) << 8 | u64::from(self.u8()?), false),
            3 => (u64::from(b & 0x3F), true),
            _ => match b {
                0x80 => (u64::from(u32::from_be_bytes(self.array()?)), false),
                0x81 => (u64::from_be_bytes(self.array()?), false),
                _ => return self.err(format!("unknown length encoding {b:#04x}")),
            },
        })
    }

    pub(crate) fn len(&mut self) -> Result<u64, RdbError> {
        match self.len_enc()? {
            (n, false) => Ok(n),
            _ => self.err("encoded string where a length was expected"),
        }
    }

    /// A length used to size a loop; preallocations derived from it are
    /// capped separately.
    pub(crate) fn count(&mut self) -> Result<usize, RdbError> {
        let n = self.len()?;
        usize::try_from(n).or_else(|_| self.err("count too large"))
    }

    /// A string (Redis's `rdbGenericLoadStringObject`).
    pub(crate) fn string(&mut self) -> Result<Vec<u8>, RdbError> {
        let (n, enc) = self.len_enc()?;
        if !enc {
            return self.bytes(n);
        }
        let v: i64 = match n as u8 {
            ENC_INT8 => i64::from(self.u8()? as i8),
            ENC_INT16 => i64::from(i16::from_le_bytes(self.array()?)),
            ENC_INT32 => i64::from(i32::from_le_bytes(self.array()?)),
            ENC_LZF => {
                let clen = self.len()?;
                let len = self.len()?;
                if len == 0 || len > clen.saturating_mul(LZF_MAX_RATIO) {
                    return self.err("invalid LZF lengths");
                }
                let at = self.offset();
                let c = self.bytes(clen)?;
                return lzf::decompress(&c, len as usize)
                    .ok_or_else(|| RdbError::new("invalid LZF compressed string", at));
            }
            other => return self.err(format!("unknown string encoding {other}")),
        };
        Ok(itoa::Buffer::new().format(v).as_bytes().to_vec())
    }

    /// Redis's `rdbLoadDoubleValue` (RDB type 3 scores): a length byte and
    /// ASCII, or 253/254/255 for nan/+inf/-inf.
    fn ascii_double(&mut self) -> Result<f64, RdbError> {
        match self.u8()? {
            253 => self.err("NaN score"),
            254 => Ok(f64::INFINITY),
            255 => Ok(f64::NEG_INFINITY),
            n => {
                let b = self.bytes(u64::from(n))?;
                pack::parse_score(&b).map_or_else(|| self.err("invalid score"), Ok)
            }
        }
    }

    fn binary_double(&mut self) -> Result<f64, RdbError> {
        let d = f64::from_le_bytes(self.array()?);
        if d.is_nan() {
            return self.err("NaN score");
        }
        Ok(d)
    }
}

/// Reads the body of a value of RDB type `t`. `Ok(None)`: the value is
/// empty (Redis skips such keys when loading a file).
pub(crate) fn read_object<R: Read>(
    s: &mut Src<R>,
    t: u8,
    lim: &EncLimits,
) -> Result<Option<Value>, RdbError> {
    let at = s.offset();
    let blob_err = |r: &'static str| RdbError::new(r, at);
    let dup = || RdbError::new("duplicate member or field", at);
    Ok(Some(match t {
        T_STRING => Value::Str(Str::from_bytes(&s.string()?)),
        T_LIST => {
            let n = s.count()?;
            let mut l = List::new(lim);
            for _ in 0..n {
                l.push_back(&s.string()?);
            }
            Value::List(l)
        }
        T_LIST_ZIPLIST => {
            let blob = s.string()?;
            let mut l = List::new(lim);
            for e in pack::zl_decode(&blob).map_err(blob_err)? {
                l.push_back(&e.to_vec());
            }
            Value::List(l)
        }
        T_LIST_QUICKLIST | T_LIST_QUICKLIST_2 => {
            let nodes = s.count()?;
            let mut l = List::new(lim);
            for _ in 0..nodes {
                let container = if t == T_LIST_QUICKLIST_2 {
                    s.len()?
                } else {
                    QL_PACKED
                };
                let blob = s.string()?;
                match container {
                    QL_PLAIN => l.push_back(&blob),
                    QL_PACKED => {
                        let elems = if t == T_LIST_QUICKLIST {
                            pack::zl_decode(&blob)
                        } else {
                            pack::lp_decode(&blob)
                        }
                        .map_err(blob_err)?;
                        // Redis skips empty nodes.
                        for e in elems {
                            l.push_back(&e.to_vec());
                        }
                    }
                    c => return s.err(format!("unknown quicklist container {c}")),
                }
            }
            Value::List(l)
        }
        T_SET => {
            let n = s.count()?;
            let mut set = Set::new_intset();
            // The hint sizes a table: bound it (a corrupt count must not
            // allocate), but keep it above the limits so the choice of
            // encoding is the same.
            let bound =
                PREALLOC_MAX.max(lim.set_max_intset_entries.max(lim.set_max_listpack_entries) + 1);
            set.maybe_convert(n.min(bound), lim);
            for _ in 0..n {
                let m = s.string()?;
                if !set.add(&m, lim) {
                    return Err(dup());
                }
            }
            Value::Set(Box::new(set))
        }
        T_SET_INTSET => {
            let blob = s.string()?;
            let vals = pack::intset_decode(&blob).map_err(blob_err)?;
            let mut set = Set::new_intset();
            set.maybe_convert(vals.len(), lim);
            for v in vals {
                set.add_member(Member::Int(v), lim);
            }
            Value::Set(Box::new(set))
        }
        T_SET_LISTPACK => {
            let blob = s.string()?;
            let elems = pack::lp_decode(&blob).map_err(blob_err)?;
            let mut set = Set::new_packed();
            set.maybe_convert(elems.len(), lim);
            for e in elems {
                let m = match e {
                    Elem::Int(n) => Member::Int(n),
                    Elem::Str(b) => Member::Str(b),
                };
                if !set.add_member(m, lim) {
                    return Err(dup());
                }
            }
            Value::Set(Box::new(set))
        }
        T_ZSET | T_ZSET_2 => {
            // As Redis: a skiplist first, made a listpack at the end if
            // it fits the limits.
            let n = s.count()?;
            let mut z = ZSet::Skip(Box::default());
            for _ in 0..n {
                let m = s.string()?;
                let sc = if t == T_ZSET_2 {
                    s.binary_double()?
                } else {
                    s.ascii_double()?
                };
                if z.insert(&m, sc, lim).is_some() {
                    return Err(dup());
                }
            }
            z.compact_if_fits(lim);
            Value::ZSet(Box::new(z))
        }
        T_ZSET_ZIPLIST | T_ZSET_LISTPACK => {
            let blob = s.string()?;
            let elems = if t == T_ZSET_ZIPLIST {
                pack::zl_decode(&blob)
            } else {
                pack::lp_decode(&blob)
            }
            .map_err(blob_err)?;
            if elems.len() % 2 != 0 {
                return Err(blob_err("zset blob with an odd number of elements"));
            }
            let mut z = ZSet::with_hint(elems.len() / 2, 0, lim);
            for p in elems.chunks_exact(2) {
                let sc = match p[1] {
                    Elem::Int(n) => n as f64,
                    Elem::Str(b) => {
                        pack::parse_score(b).ok_or_else(|| blob_err("invalid score"))?
                    }
                };
                if z.insert(&p[0].to_vec(), sc, lim).is_some() {
                    return Err(dup());
                }
            }
            Value::ZSet(Box::new(z))
        }
        T_HASH => {
            let n = s.count()?;
            let mut h = Hash::new();
            for _ in 0..n {
                let f = s.string()?;
                let v = s.string()?;
                h.prepare_for([&f[..], &v[..]], lim);
                if !h.set(&f, &v, lim) {
                    return Err(dup());
                }
            }
            Value::Hash(h)
        }
        T_HASH_ZIPMAP => {
            let blob = s.string()?;
            let items = pack::zipmap_decode(&blob).map_err(blob_err)?;
            Value::Hash(
                hash_from(
                    items
                        .chunks_exact(2)
                        .map(|p| (Elem::Str(p[0]), Elem::Str(p[1]))),
                    lim,
                )
                .ok_or_else(dup)?,
            )
        }
        T_HASH_ZIPLIST | T_HASH_LISTPACK => {
            let blob = s.string()?;
            let elems = if t == T_HASH_ZIPLIST {
                pack::zl_decode(&blob)
            } else {
                pack::lp_decode(&blob)
            }
            .map_err(blob_err)?;
            if elems.len() % 2 != 0 {
                return Err(blob_err("hash blob with an odd number of elements"));
            }
            Value::Hash(
                hash_from(elems.chunks_exact(2).map(|p| (p[0], p[1])), lim).ok_or_else(dup)?,
            )
        }
        T_STREAM_LISTPACKS | T_STREAM_LISTPACKS_2 | T_STREAM_LISTPACKS_3 => {
            // A stream may be empty: it is kept (Redis loads it).
            return super::stream::read_stream(s, t).map(Some);
        }
        T_MODULE_PRE_GA | T_MODULE_2 => return s.err("module type not supported"),
        other => return s.err(format!("unknown value type {other}")),
    }))
    .map(|v| v.filter(|v| v.elements() > 0 || matches!(v, Value::Str(_))))
}

/// A hash from pairs; `None` on a duplicate field.
fn hash_from<'a>(
    pairs: impl Iterator<Item = (Elem<'a>, Elem<'a>)>,
    lim: &EncLimits,
) -> Option<Hash> {
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = pairs.map(|(f, v)| (f.to_vec(), v.to_vec())).collect();
    let mut h = Hash::new();
    h.prepare_for(pairs.iter().flat_map(|(f, v)| [&f[..], &v[..]]), lim);
    for (f, v) in &pairs {
        if !h.set(f, v, lim) {
            return None;
        }
    }
    Some(h)
}

/// Decodes a value (type byte + body) from the start of `body`; trailing
/// bytes are ignored.
pub(crate) fn decode_value(body: &[u8], lim: EncLimits) -> Result<Value, RdbError> {
    let mut s = Src::with_buffer(body, body.len());
    let t = s.u8()?;
    match read_object(&mut s, t, &lim)? {
        Some(v) => Ok(v),
        None => s.err("empty value"),
    }
}

/// Streaming reader over a whole RDB file.
pub struct Reader<R: Read> {
    src: Src<R>,
    limits: EncLimits,
    version: u16,
    db: usize,
    done: bool,
    /// Function libraries met so far (their whole code), for the caller to
    /// load: compiling Lua is not the engine's business.
    functions: Vec<Vec<u8>>,
    /// The `repl-stream-db` AUX field: the database its writer's stream
    /// was in at the snapshot (a replica's replica starts there).
    repl_stream_db: Option<usize>,
}

impl<R: Read> Reader<R> {
    /// Reads and checks the header (`REDIS` + 4-digit version, 1..=11).
    pub fn new(r: R, limits: EncLimits) -> Result<Self, RdbError> {
        let mut src = Src::new(r);
        let magic: [u8; 9] = src
            .array()
            .map_err(|_| RdbError::new("not an RDB file (too short)", 0))?;
        if &magic[..5] != b"REDIS" {
            return Err(RdbError::new("not an RDB file (wrong signature)", 0));
        }
        let version = std::str::from_utf8(&magic[5..])
            .ok()
            .filter(|d| d.bytes().all(|c| c.is_ascii_digit()))
            .and_then(|d| d.parse::<u16>().ok())
            .ok_or_else(|| RdbError::new("not an RDB file (bad version)", 5))?;
        if !(1..=RDB_VERSION_MAX_LOAD).contains(&version) {
            return Err(RdbError::new(
                format!("can't handle RDB format version {version}"),
                5,
            ));
        }
        Ok(Reader {
            src,
            limits,
            version,
            db: 0,
            done: false,
            functions: Vec::new(),
            repl_stream_db: None,
        })
    }

    /// The file's RDB version.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// Bytes consumed so far.
    pub fn offset(&self) -> u64 {
        self.src.offset()
    }

    /// The function libraries read so far (the `FUNCTION2` opcode, before
    /// the databases), each its whole code; taken once the file is read.
    pub fn take_functions(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.functions)
    }

    /// The `repl-stream-db` AUX field, once read (a sync's payload).
    pub fn repl_stream_db(&self) -> Option<usize> {
        self.repl_stream_db
    }

    /// The next key; `Ok(None)` once EOF (and the checksum) was read.
    /// Keys with empty collections are skipped, as Redis does.
    #[allow(clippy::should_implement_trait)] // the brief's API; fallible, so not an Iterator
    pub fn next(&mut self) -> Result<Option<Loaded>, RdbError> {
        if self.done {
            return Ok(None);
        }
        let r = self.next_inner();
        if r.is_err() {
            self.done = true;
        }
        r
    }

    fn next_inner(&mut self) -> Result<Option<Loaded>, RdbError> {
        let s = &mut self.src;
        let (mut expire_at_ms, mut idle_s, mut freq) = (0u64, None, None);
        loop {
            let op = s.u8()?;
            match op {
                OP_EXPIRETIME => {
                    let secs = i32::from_le_bytes(s.array()?);
                    expire_at_ms = (i64::from(secs) * 1000).max(1) as u64;
                }
                OP_EXPIRETIME_MS => {
                    expire_at_ms = (i64::from_le_bytes(s.array()?)).max(1) as u64;
                }
                OP_FREQ => freq = Some(s.u8()?),
                OP_IDLE => idle_s = Some(s.len()?),
                OP_EOF => {
                    if self.version >= 5 {
                        let want = s.crc();
                        let at = s.offset();
                        let got = u64::from_le_bytes(s.array()?);
                        if got != 0 && got != want {
                            return Err(RdbError::new(
                                format!("wrong RDB checksum expected {got:016x} got {want:016x}"),
                                at,
                            ));
                        }
                    }
                    self.done = true;
                    return Ok(None);
                }
                OP_SELECTDB => {
                    let db = s.len()?;
                    self.db = usize::try_from(db).or_else(|_| s.err("database index too large"))?;
                }
                OP_RESIZEDB => {
                    s.len()?;
                    s.len()?;
                }
                OP_AUX => {
                    let k = s.string()?;
                    let v = s.string()?;
                    if k == b"repl-stream-db" {
                        self.repl_stream_db = std::str::from_utf8(&v)
                            .ok()
                            .and_then(|v| v.parse::<i64>().ok())
                            .and_then(|d| usize::try_from(d).ok());
                    }
                }
                OP_MODULE_AUX => return s.err("module auxiliary data not supported"),
                OP_FUNCTION2 => {
                    let code = s.string()?;
                    self.functions.push(code);
                }
                OP_FUNCTION_PRE_GA => return s.err("Pre-GA function format not supported"),
                t => {
                    let key = s.string()?;
                    match read_object(s, t, &self.limits)? {
                        Some(value) => {
                            return Ok(Some(Loaded {
                                db: self.db,
                                key,
                                value,
                                expire_at_ms,
                                idle_s,
                                freq,
                            }))
                        }
                        None => {
                            (expire_at_ms, idle_s, freq) = (0, None, None);
                        }
                    }
                }
            }
        }
    }
}
