//! Propagation: the commands a shard's changes are logged as (the
//! append-only file), in the order they took effect on this shard.
//!
//! A shard appends RESP arrays here while [`PropBuf::on`] is set; the
//! owning loop takes the bytes ([`PropBuf::take`]) and hands them to the
//! AOF writer. `SELECT` is written inside the buffer when the database
//! changes between two records; a taken [`Chunk`] says which database its
//! first record is for, so the writer emits a `SELECT` only when the file's
//! current database differs (as Redis does).
//!
//! When `on` is false nothing is recorded: callers test it first (one
//! predictable branch).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static ENABLED: AtomicBool = AtomicBool::new(false);
static SEQ: AtomicU64 = AtomicU64::new(1);

/// Whether the append-only file is on (set by the runtime; scratch shards
/// built on the fly read it).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// A process-wide order stamp for the parts of a transaction recorded on
/// different threads: parts are written in stamp order. Each step of a
/// transaction starts after the previous step's parts were stamped (the
/// coordinator waits for them), so stamp order follows execution order.
pub fn next_seq() -> u64 {
    SEQ.fetch_add(1, Ordering::Relaxed)
}

/// Records of one shard, ready for the writer.
#[derive(Debug, Default)]
pub struct Chunk {
    /// Database of the first record.
    pub first_db: usize,
    /// Database of the last record.
    pub last_db: usize,
    /// RESP arrays (with `SELECT` between records of different databases).
    pub bytes: Vec<u8>,
    /// Records in `bytes` (the `SELECT`s between them not counted).
    pub records: u64,
}

/// A shard's not yet handed-off records.
#[derive(Debug, Default)]
pub struct PropBuf {
    /// Record changes (set by the owning loop from `appendonly`).
    pub on: bool,
    bytes: Vec<u8>,
    /// Records in `bytes`.
    records: u64,
    first_db: usize,
    cur_db: usize,
    /// Keys deleted by expiry or eviction so far (their `DEL` records move
    /// the dirty counter without being the command's own change).
    pub implicit: u64,
    /// Set by a handler that wrote its own records (a stream command's
    /// rewritten forms): `propagate::after` then logs nothing more. Reset
    /// before each command.
    pub own_records: bool,
}

impl PropBuf {
    fn select(&mut self, db: usize) {
        if self.bytes.is_empty() {
            self.first_db = db;
            self.cur_db = db;
        } else if db != self.cur_db {
            let d = db.to_string();
            write_array(&mut self.bytes, &[b"SELECT", d.as_bytes()]);
            self.cur_db = db;
        }
    }

    /// Appends one command for database `db`.
    pub fn cmd(&mut self, db: usize, args: &[&[u8]]) {
        self.select(db);
        write_array(&mut self.bytes, args);
        self.records += 1;
    }

    /// Appends one command given by its header count and a writer of its
    /// arguments (see [`write_bulk`]).
    pub fn cmd_with(&mut self, db: usize, argc: usize, f: impl FnOnce(&mut Vec<u8>)) {
        self.select(db);
        write_header(&mut self.bytes, b'*', argc);
        f(&mut self.bytes);
        self.records += 1;
    }

    /// A key deleted by expiry or eviction: `DEL key` (Redis's
    /// `deleteExpiredKeyAndPropagate`).
    pub fn implicit_del(&mut self, db: usize, key: &[u8]) {
        self.implicit += 1;
        self.cmd(db, &[b"DEL", key]);
    }

    /// Appends records taken from another buffer (a scratch shard's).
    pub fn append(&mut self, c: Chunk) {
        if c.bytes.is_empty() {
            return;
        }
        self.select(c.first_db);
        self.bytes.extend_from_slice(&c.bytes);
        self.records += c.records;
        self.cur_db = c.last_db;
    }

    /// Byte length so far (a mark for [`PropBuf::truncate`]).
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Where the buffer stands now, for [`PropBuf::wrap_multi`].
    pub fn mark(&self) -> PropMark {
        PropMark {
            len: self.bytes.len(),
            records: self.records,
            cur_db: self.cur_db,
        }
    }

    /// Wraps the records appended since `m` in `MULTI ... EXEC` when there
    /// are two or more of them (a script's effects, as Redis 7.0's
    /// `propagatePendingCommands`: one command is atomic by itself and goes
    /// bare). A `SELECT` that opens them stays before the `MULTI`. The
    /// buffer must not have been taken since `m`.
    pub fn wrap_multi(&mut self, m: PropMark) {
        if self.records < m.records + 2 || self.bytes.len() < m.len {
            return;
        }
        let tail = self.bytes.split_off(m.len);
        // A SELECT opening the records (the first one changed database)
        // stays before the MULTI.
        let skip = leading_select_len(&tail);
        self.bytes.extend_from_slice(&tail[..skip]);
        write_array(&mut self.bytes, &[b"MULTI"]);
        self.bytes.extend_from_slice(&tail[skip..]);
        write_array(&mut self.bytes, &[b"EXEC"]);
        self.records += 2;
    }

    /// Drops the records appended since `m` (a script stopped by SHUTDOWN
    /// NOSAVE: Redis never propagates an unfinished script's effects). The
    /// buffer must not have been taken since `m`.
    pub fn rollback(&mut self, m: PropMark) {
        if self.bytes.len() < m.len {
            return;
        }
        self.bytes.truncate(m.len);
        self.records = m.records;
        self.cur_db = m.cur_db;
    }

    /// Takes the records, leaving the buffer empty (its capacity kept).
    pub fn take(&mut self) -> Option<Chunk> {
        if self.bytes.is_empty() {
            return None;
        }
        let cap = self.bytes.capacity().min(64 << 10);
        let bytes = std::mem::replace(&mut self.bytes, Vec::with_capacity(cap));
        Some(Chunk {
            first_db: self.first_db,
            last_db: self.cur_db,
            bytes,
            records: std::mem::take(&mut self.records),
        })
    }
}

/// A position in a [`PropBuf`] (see [`PropBuf::mark`]).
#[derive(Clone, Copy, Debug)]
pub struct PropMark {
    len: usize,
    records: u64,
    cur_db: usize,
}

/// The length of the `SELECT` record `b` opens with (0 if none), read
/// back from the bytes this module wrote.
fn leading_select_len(b: &[u8]) -> usize {
    const SEL: &[u8] = b"*2\r\n$6\r\nSELECT\r\n$";
    if !b.starts_with(SEL) {
        return 0;
    }
    let rest = &b[SEL.len()..];
    let Some(nl) = rest.iter().position(|&c| c == b'\r') else {
        return 0;
    };
    let n: usize = match std::str::from_utf8(&rest[..nl])
        .ok()
        .and_then(|d| d.parse().ok())
    {
        Some(n) => n,
        None => return 0,
    };
    (SEL.len() + nl + 2 + n + 2).min(b.len())
}

/// `*n\r\n`-style header.
pub fn write_header(out: &mut Vec<u8>, kind: u8, n: usize) {
    out.push(kind);
    let mut b = itoa_buf(n as u64);
    out.append(&mut b);
    out.extend_from_slice(b"\r\n");
}

fn itoa_buf(mut n: u64) -> Vec<u8> {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    tmp[i..].to_vec()
}

/// One bulk string.
pub fn write_bulk(out: &mut Vec<u8>, a: &[u8]) {
    write_header(out, b'$', a.len());
    out.extend_from_slice(a);
    out.extend_from_slice(b"\r\n");
}

/// A RESP array of bulk strings (how commands are logged).
pub fn write_array(out: &mut Vec<u8>, args: &[&[u8]]) {
    write_header(out, b'*', args.len());
    for a in args {
        write_bulk(out, a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_only_between_databases() {
        let mut p = PropBuf {
            on: true,
            ..Default::default()
        };
        p.cmd(3, &[b"SET", b"a", b"1"]);
        p.cmd(3, &[b"DEL", b"a"]);
        p.cmd(0, &[b"DEL", b"b"]);
        let c = p.take().unwrap();
        assert_eq!((c.first_db, c.last_db), (3, 0));
        assert_eq!(
            c.bytes,
            b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n1\r\n*2\r\n$3\r\nDEL\r\n$1\r\na\r\n\
              *2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n*2\r\n$3\r\nDEL\r\n$1\r\nb\r\n"
        );
        assert!(p.take().is_none());
        p.implicit_del(5, b"k");
        assert_eq!(p.implicit, 1);
        assert_eq!(p.take().unwrap().first_db, 5);
    }

    #[test]
    fn wrap_multi_wraps_two_or_more_records_after_their_select() {
        let mut p = PropBuf::default();
        p.cmd(0, &[b"DEL", b"z"]);
        let m = p.mark();
        p.cmd(2, &[b"SET", b"a", b"1"]);
        p.wrap_multi(m);
        let one = p.take().unwrap();
        assert_eq!(one.records, 2, "one record: left bare");
        let m = p.mark();
        p.cmd(3, &[b"SET", b"a", b"1"]);
        p.cmd(4, &[b"DEL", b"b"]);
        p.wrap_multi(m);
        let c = p.take().unwrap();
        assert_eq!(c.records, 4);
        assert_eq!((c.first_db, c.last_db), (3, 4));
        assert_eq!(
            c.bytes,
            b"*1\r\n$5\r\nMULTI\r\n*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n1\r\n\
              *2\r\n$6\r\nSELECT\r\n$1\r\n4\r\n*2\r\n$3\r\nDEL\r\n$1\r\nb\r\n\
              *1\r\n$4\r\nEXEC\r\n"
        );
        p.cmd(4, &[b"DEL", b"x"]);
        let m = p.mark();
        p.cmd(7, &[b"DEL", b"y"]);
        p.cmd(7, &[b"DEL", b"w"]);
        p.wrap_multi(m);
        let c = p.take().unwrap();
        let s = String::from_utf8(c.bytes).unwrap().replace("\r\n", " ");
        assert_eq!(
            s,
            "*2 $3 DEL $1 x *2 $6 SELECT $1 7 *1 $5 MULTI *2 $3 DEL $1 y *2 $3 DEL $1 w *1 $4 EXEC "
        );
    }

    #[test]
    fn rollback_drops_what_followed_the_mark() {
        let mut p = PropBuf::default();
        p.cmd(2, &[b"DEL", b"x"]);
        let m = p.mark();
        p.cmd(5, &[b"SET", b"a", b"1"]);
        p.cmd(5, &[b"DEL", b"b"]);
        p.rollback(m);
        // Back in database 2: the next record needs no SELECT.
        p.cmd(2, &[b"DEL", b"y"]);
        let c = p.take().unwrap();
        assert_eq!(c.records, 2);
        let s = String::from_utf8(c.bytes).unwrap().replace("\r\n", " ");
        assert_eq!(s, "*2 $3 DEL $1 x *2 $3 DEL $1 y ");
    }

    #[test]
    fn records_are_counted_without_selects() {
        let mut p = PropBuf::default();
        p.cmd(0, &[b"SET", b"a", b"1"]);
        p.cmd(1, &[b"SET", b"b", b"1"]);
        p.cmd_with(1, 2, |out| {
            write_bulk(out, b"DEL");
            write_bulk(out, b"b");
        });
        p.implicit_del(2, b"c");
        let c = p.take().unwrap();
        assert_eq!(c.records, 4);
        let mut q = PropBuf::default();
        q.cmd(0, &[b"DEL", b"x"]);
        q.append(c);
        assert_eq!(q.take().unwrap().records, 5);
        q.cmd(0, &[b"DEL", b"x"]);
        assert_eq!(q.take().unwrap().records, 1, "take starts the count over");
    }
}
