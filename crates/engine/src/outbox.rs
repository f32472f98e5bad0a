//! The effects outbox: what one shard's commands changed that someone
//! else must hear about, in execution order (DESIGN.md §3a).
//!
//! Handlers emit their effects explicitly, at the point where they changed
//! the data, as Redis's `alsoPropagate` / `rewriteClientCommandVector`
//! do: nothing here decides what a command is logged as from its name or
//! its reply. An effect is
//!
//! * a *record*: a command in the form whose replay reproduces the change
//!   (Redis 7.0's propagated form: `SET k v PXAT ms` for `SET k v EX s`,
//!   `SREM` for `SPOP` ...), appended as a RESP array to [`Outbox`]'s
//!   byte buffer. `SELECT` is written between two records of different
//!   databases, and `MULTI` / `EXEC` around a script's effects
//!   ([`Outbox::wrap_multi`]); a transaction's parts on several shards are
//!   put between `MULTI` and `EXEC` by the AOF writer, which sees them all;
//! * a keyspace event ([`KeyEvent`], Redis's `notifyKeyspaceEvent`),
//!   emitted through `Shard::notify` and published by the owning loop;
//! * a tracking invalidation ([`Invalidation`], Redis's
//!   `trackingInvalidateKey`): every change goes through `Db::signal`,
//!   which marks the key in its database's `touched` list while some
//!   client tracks; [`crate::Shard::collect_touched`] moves those keys
//!   here, numbered, after each command (and before the runtime reads
//!   them after a batch, a job or a cron step).
//!
//! Sequence numbers. Every record and every event gets the shard's next
//! sequence number (from 1, never reset, never reused), in execution
//! order, so a taken [`Chunk`] names the range of effects it spans
//! (`first_seq..=last_seq`; the events between its records have the
//! numbers in between) and each event carries its own. A consumer that
//! must resume or keep a window (the replication stream's backlog, issue
//! 25) keeps "the last sequence number I have of shard s"; the order of
//! records across shards is the order the AOF queue receives their chunks
//! (each shard hands its chunk over before anything lets another thread
//! see its writes), and that queue's byte offsets are what a replication
//! offset will count.
//!
//! Consumers and the cost when there are none. [`Outbox::records_on`] is
//! set by the owning loop when a consumer reads records (the AOF writer
//! today, the replication stream next); it is a field of the shard, not a
//! process-wide switch, and a scratch shard (a multi-shard command run on
//! copies) gets it from the shards it copies. With it off, emitting a
//! record costs one predictable branch and nothing is written.
//!
//! Lanes. Records, events and invalidations are kept apart (a byte
//! buffer for the records, a list for each of the others) because their
//! consumers differ: the AOF writer (and the replication stream) want the
//! RESP bytes in one piece, pub/sub wants each event, tracking each key;
//! one shared counter keeps their relative order, so a consumer of
//! several (a replica that must see an event after the write that caused
//! it) can merge them.
//!
//! Order. Records and events are numbered where the handler emits them.
//! Invalidations are numbered when collected from the databases, after
//! the command that made them: their order is exact between commands,
//! and within one command they follow its records and events (the `Db`
//! calls that mark keys cannot reach the outbox; giving them its counter
//! would make every `Db` change pay for it).

use ds::SmallBytes;

/// Records of one shard, ready for a consumer.
#[derive(Debug, Default)]
pub struct Chunk {
    /// Database of the first record.
    pub first_db: usize,
    /// Database of the last record.
    pub last_db: usize,
    /// RESP arrays (with `SELECT` between records of different databases,
    /// `MULTI`/`EXEC` around a script's records).
    pub bytes: Vec<u8>,
    /// Records in `bytes` (the `SELECT`s between them not counted).
    pub records: u64,
    /// Sequence numbers of the first and last effect in `bytes` (0, 0 for
    /// a chunk that did not come from a shard's outbox).
    pub first_seq: u64,
    pub last_seq: u64,
    /// Records in `bytes` meant for one consumer only (a script's
    /// `redis.set_repl`), in order; empty (no allocation) otherwise. See
    /// [`Chunk::write_to`].
    pub only: Vec<Only>,
}

/// Who reads a record (Redis's `PROPAGATE_AOF` / `PROPAGATE_REPL`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Target {
    /// The AOF and the replicas.
    #[default]
    All,
    /// The AOF only (`redis.set_repl(redis.REPL_AOF)`).
    Aof,
    /// The replicas only (`redis.set_repl(redis.REPL_REPLICA)`).
    Replicas,
}

/// A record of a [`Chunk`] for one consumer: its bytes `start..end` (the
/// record alone: a `SELECT` before it stays for both, so that the records
/// after it keep their database).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Only {
    pub start: usize,
    pub end: usize,
    pub target: Target,
}

impl Chunk {
    /// Appends the bytes `to` reads (`Target::Aof`: the file,
    /// `Target::Replicas`: the stream) to `buf`: all of them but the
    /// records meant for the other one.
    pub fn write_to(&self, buf: &mut Vec<u8>, to: Target) {
        let mut at = 0;
        for o in &self.only {
            if o.target != to {
                buf.extend_from_slice(&self.bytes[at..o.start]);
                at = o.end;
            }
        }
        buf.extend_from_slice(&self.bytes[at..]);
    }
}

/// A keyspace event (Redis's `notifyKeyspaceEvent`): published to
/// `__keyspace@<db>__:<key>` (message: the event) and
/// `__keyevent@<db>__:<event>` (message: the key), as the flags allow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyEvent {
    pub db: usize,
    /// Its class (one bit of `ds::events`).
    pub class: u32,
    pub event: &'static str,
    pub key: SmallBytes,
    /// Its sequence number on the shard that emitted it (see the module
    /// documentation); 0 until emitted.
    pub seq: u64,
}

/// A key changed while some client tracks (Redis's
/// `trackingInvalidateKey`): the clients that may cache it get an
/// invalidation. Key names only, as Redis's tracking table (any database).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalidation {
    pub key: SmallBytes,
    /// Its sequence number on this shard (see the module documentation).
    pub seq: u64,
}

/// A shard's effects not yet taken by their consumers.
///
/// Laid out in declaration order (`repr(C)`): the switch and the event
/// lists, which every command's epilogue looks at, first (see `Shard`).
#[derive(Debug)]
#[repr(C)]
pub struct Outbox {
    /// A consumer reads records (set by the owning loop from `appendonly`;
    /// see the module documentation). Off: nothing is recorded.
    pub records_on: bool,
    /// Who reads the records made now (set around a script's call by
    /// `redis.set_repl`; `All` otherwise).
    pub target: Target,
    /// The records of `bytes` for one consumer only ([`Chunk::only`]).
    only: Vec<Only>,
    /// Keyspace events not yet published, oldest first.
    events: Vec<KeyEvent>,
    /// Changed keys not yet turned into invalidations, oldest first.
    invalidations: Vec<Invalidation>,
    /// The sequence number the next effect gets.
    next_seq: u64,
    bytes: Vec<u8>,
    /// Records in `bytes`.
    records: u64,
    first_db: usize,
    cur_db: usize,
    /// Sequence numbers of the first and last record in `bytes`.
    first_seq: u64,
    last_seq: u64,
    /// Records emitted by commands (not by expiry or eviction), counted
    /// whether recorded or not, for the debug check that a handler which
    /// changed data said so (`commands::exec`).
    #[cfg(debug_assertions)]
    pub emitted: u64,
    /// Keys deleted by expiry or eviction, counted as `emitted`.
    #[cfg(debug_assertions)]
    pub implicit: u64,
}

impl Default for Outbox {
    fn default() -> Self {
        Outbox {
            records_on: false,
            target: Target::All,
            only: Vec::new(),
            next_seq: 1,
            bytes: Vec::new(),
            records: 0,
            first_db: 0,
            cur_db: 0,
            first_seq: 0,
            last_seq: 0,
            events: Vec::new(),
            invalidations: Vec::new(),
            #[cfg(debug_assertions)]
            emitted: 0,
            #[cfg(debug_assertions)]
            implicit: 0,
        }
    }
}

impl Outbox {
    /// Starts a record for `db`: a `SELECT` when the database changes, the
    /// record's sequence number.
    fn begin(&mut self, db: usize) {
        if self.bytes.is_empty() {
            self.first_db = db;
            self.cur_db = db;
            self.first_seq = self.next_seq;
        } else if db != self.cur_db {
            let mut d = itoa::Buffer::new();
            write_array(&mut self.bytes, &[b"SELECT", d.format(db).as_bytes()]);
            self.cur_db = db;
        }
        self.last_seq = self.next_seq;
        self.next_seq += 1;
        self.records += 1;
    }

    /// After a record that began at `start`: notes it when it is for one
    /// consumer only.
    #[inline]
    fn end(&mut self, start: usize) {
        if self.target != Target::All {
            self.only.push(Only {
                start,
                end: self.bytes.len(),
                target: self.target,
            });
        }
    }

    /// The sequence number the next effect will get.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Appends keyspace event `e` with the next sequence number. The
    /// caller checked that its class is published (`Shard::notify`).
    pub fn event(&mut self, mut e: KeyEvent) {
        e.seq = self.next_seq;
        self.next_seq += 1;
        self.events.push(e);
    }

    /// Whether events wait to be published.
    #[inline]
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Events waiting (a mark for [`Outbox::truncate_events`]).
    pub fn events_len(&self) -> usize {
        self.events.len()
    }

    /// Drops the events after the first `n` (a script's writes taken
    /// back: `commands::script::wide`). Nothing may have taken them since.
    pub fn truncate_events(&mut self, n: usize) {
        self.events.truncate(n);
    }

    /// Takes the events, oldest first.
    pub fn take_events(&mut self) -> Vec<KeyEvent> {
        std::mem::take(&mut self.events)
    }

    /// Appends the invalidation of `key` with the next sequence number.
    pub fn invalidate(&mut self, key: SmallBytes) {
        self.invalidations.push(Invalidation {
            key,
            seq: self.next_seq,
        });
        self.next_seq += 1;
    }

    /// Takes the invalidations, oldest first (the buffer keeps its
    /// capacity: tracking clients invalidate on every write).
    pub fn drain_invalidations(&mut self) -> std::vec::Drain<'_, Invalidation> {
        self.invalidations.drain(..)
    }

    /// How many invalidations wait: a mark for [`Outbox::invalidations_since`].
    pub fn invalidations_len(&self) -> usize {
        self.invalidations.len()
    }

    /// The invalidations appended since `mark` (from
    /// [`Outbox::invalidations_len`]), oldest first.
    pub fn invalidations_since(&self, mark: usize) -> &[Invalidation] {
        self.invalidations.get(mark..).unwrap_or(&[])
    }

    /// Drops the invalidations (tracking turned off).
    pub fn clear_invalidations(&mut self) {
        self.invalidations.clear();
    }

    /// A command emits record `args` for database `db` (Redis's
    /// `alsoPropagate`). One branch when no consumer reads records.
    #[inline]
    pub fn record(&mut self, db: usize, args: &[&[u8]]) {
        #[cfg(debug_assertions)]
        {
            self.emitted += 1;
        }
        if self.records_on {
            self.begin(db);
            let start = self.bytes.len();
            write_array(&mut self.bytes, args);
            self.end(start);
        }
    }

    /// [`Outbox::record`] of the arguments `args` as received.
    #[inline]
    pub fn record_args<'a>(
        &mut self,
        db: usize,
        args: impl ExactSizeIterator<Item = &'a [u8]> + Clone,
    ) {
        #[cfg(debug_assertions)]
        {
            self.emitted += 1;
        }
        if self.records_on {
            self.begin(db);
            // One growth for the whole record (see `write_array`).
            let room = 16 + args.clone().map(|a| a.len() + 16).sum::<usize>();
            self.bytes.reserve(room);
            let start = self.bytes.len();
            write_header(&mut self.bytes, b'*', args.len());
            for a in args {
                write_bulk(&mut self.bytes, a);
            }
            self.end(start);
        }
    }

    /// [`Outbox::record`] given by its argument count and a writer of its
    /// arguments (see [`write_bulk`]), called only when records are on.
    #[inline]
    pub fn record_with(&mut self, db: usize, argc: usize, f: impl FnOnce(&mut Vec<u8>)) {
        #[cfg(debug_assertions)]
        {
            self.emitted += 1;
        }
        if self.records_on {
            self.begin(db);
            let start = self.bytes.len();
            write_header(&mut self.bytes, b'*', argc);
            f(&mut self.bytes);
            self.end(start);
        }
    }

    /// A key deleted by expiry or eviction: `DEL key` (Redis's
    /// `deleteExpiredKeyAndPropagate`, and the eviction's propagation).
    #[inline]
    pub fn implicit_del(&mut self, db: usize, key: &[u8]) {
        #[cfg(debug_assertions)]
        {
            self.implicit += 1;
        }
        if self.records_on {
            self.begin(db);
            write_array(&mut self.bytes, &[b"DEL", key]);
        }
    }

    /// Byte length so far (to tell whether a command recorded anything).
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Where the buffer stands now, for [`Outbox::wrap_multi`].
    pub fn mark(&self) -> PropMark {
        PropMark {
            len: self.bytes.len(),
            records: self.records,
            cur_db: self.cur_db,
        }
    }

    /// Drops the records appended since `m` (a script stopped by SHUTDOWN
    /// NOSAVE: Redis never propagates an unfinished script's effects). The
    /// buffer must not have been taken since `m`.
    pub fn rollback(&mut self, m: PropMark) {
        if self.bytes.len() < m.len {
            return;
        }
        self.bytes.truncate(m.len);
        self.only.retain(|o| o.start < m.len);
        self.records = m.records;
        self.cur_db = m.cur_db;
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
        let before = self.bytes.len();
        write_array(&mut self.bytes, &[b"MULTI"]);
        // The records after the MULTI moved by its length.
        let shift = self.bytes.len() - before;
        for o in self.only.iter_mut().filter(|o| o.start >= m.len) {
            o.start += shift;
            o.end += shift;
        }
        self.bytes.extend_from_slice(&tail[skip..]);
        write_array(&mut self.bytes, &[b"EXEC"]);
        self.records += 2;
    }

    /// Takes the records appended since `m` (none taken since), leaving
    /// the buffer as it was at `m`: to move them to another shard's
    /// outbox ([`Outbox::append`]), in order with that shard's own (a
    /// script reaching every shard, whose effects are one block). No
    /// sequence numbers (the receiving shard numbers them).
    pub fn take_since(&mut self, m: PropMark) -> Option<Chunk> {
        if self.records <= m.records || self.bytes.len() <= m.len {
            return None;
        }
        let mut tail = self.bytes.split_off(m.len);
        let mut cut = m.len;
        let first_db = if m.len == 0 {
            self.first_db
        } else {
            match leading_select(&tail) {
                Some((len, db)) => {
                    tail.drain(..len);
                    cut += len;
                    db
                }
                None => m.cur_db,
            }
        };
        let at = self.only.partition_point(|o| o.start < m.len);
        let only = self
            .only
            .drain(at..)
            .map(|o| Only {
                start: o.start - cut,
                end: o.end - cut,
                target: o.target,
            })
            .collect();
        let c = Chunk {
            first_db,
            last_db: self.cur_db,
            bytes: tail,
            records: self.records - m.records,
            first_seq: 0,
            last_seq: 0,
            only,
        };
        self.records = m.records;
        self.cur_db = m.cur_db;
        Some(c)
    }

    /// Appends records another shard's outbox made ([`Outbox::take_since`]),
    /// each numbered here as if recorded here.
    pub fn append(&mut self, c: Chunk) {
        if !self.records_on || c.records == 0 {
            return;
        }
        if self.bytes.is_empty() {
            self.first_db = c.first_db;
            self.first_seq = self.next_seq;
        } else if c.first_db != self.cur_db {
            let mut d = itoa::Buffer::new();
            write_array(
                &mut self.bytes,
                &[b"SELECT", d.format(c.first_db).as_bytes()],
            );
        }
        let base = self.bytes.len();
        self.only.extend(c.only.iter().map(|o| Only {
            start: o.start + base,
            end: o.end + base,
            target: o.target,
        }));
        self.bytes.extend_from_slice(&c.bytes);
        self.cur_db = c.last_db;
        self.records += c.records;
        self.next_seq += c.records;
        self.last_seq = self.next_seq - 1;
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
            first_seq: self.first_seq,
            last_seq: self.last_seq,
            only: std::mem::take(&mut self.only),
        })
    }
}

/// A standalone builder of records outside any shard (a coordinator's own
/// record, the AOF rewrite's and loader's tests): the same encoding, no
/// sequence numbers.
pub fn chunk_of(db: usize, args: &[&[u8]]) -> Chunk {
    let mut bytes = Vec::new();
    write_array(&mut bytes, args);
    Chunk {
        first_db: db,
        last_db: db,
        bytes,
        records: 1,
        first_seq: 0,
        last_seq: 0,
        only: Vec::new(),
    }
}

/// A position in an [`Outbox`] (see [`Outbox::mark`]).
#[derive(Clone, Copy, Debug)]
pub struct PropMark {
    len: usize,
    records: u64,
    cur_db: usize,
}

/// The length of the `SELECT` record `b` opens with (0 if none), read
/// back from the bytes this module wrote.
fn leading_select_len(b: &[u8]) -> usize {
    leading_select(b).map_or(0, |(len, _)| len)
}

/// The length of the `SELECT` record `b` opens with, and its database.
fn leading_select(b: &[u8]) -> Option<(usize, usize)> {
    const SEL: &[u8] = b"*2\r\n$6\r\nSELECT\r\n$";
    let rest = b.strip_prefix(SEL)?;
    let nl = rest.iter().position(|&c| c == b'\r')?;
    let n: usize = std::str::from_utf8(&rest[..nl]).ok()?.parse().ok()?;
    let start = SEL.len() + nl + 2;
    let db = std::str::from_utf8(b.get(start..start + n)?)
        .ok()?
        .parse()
        .ok()?;
    Some(((start + n + 2).min(b.len()), db))
}

/// `*n\r\n`-style header.
#[inline]
pub fn write_header(out: &mut Vec<u8>, kind: u8, n: usize) {
    // Most headers are an argument count or a short length: one copy of
    // a few bytes, with no digit loop (a replica's stream writes one per
    // argument of every write).
    if n < 10 {
        out.extend_from_slice(&[kind, b'0' + n as u8, b'\r', b'\n']);
    } else if n < 100 {
        out.extend_from_slice(&[
            kind,
            b'0' + (n / 10) as u8,
            b'0' + (n % 10) as u8,
            b'\r',
            b'\n',
        ]);
    } else {
        write_header_long(out, kind, n);
    }
}

#[inline(never)]
fn write_header_long(out: &mut Vec<u8>, kind: u8, n: usize) {
    // Digits on the stack: a record of 21 arguments wrote 22 headers, and
    // a heap buffer for each was most of the cost of encoding it.
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    let mut n = n as u64;
    loop {
        i -= 1;
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.push(kind);
    out.extend_from_slice(&tmp[i..]);
    out.extend_from_slice(b"\r\n");
}

/// One bulk string.
#[inline]
pub fn write_bulk(out: &mut Vec<u8>, a: &[u8]) {
    write_header(out, b'$', a.len());
    out.extend_from_slice(a);
    out.extend_from_slice(b"\r\n");
}

/// A RESP array of bulk strings (how commands are logged).
pub fn write_array(out: &mut Vec<u8>, args: &[&[u8]]) {
    // One growth for the whole record: a bulk's header and CRLFs take
    // 5 bytes plus its length's digits (at most 16 below 10^11 bytes).
    out.reserve(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
    write_header(out, b'*', args.len());
    for a in args {
        write_bulk(out, a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on() -> Outbox {
        Outbox {
            records_on: true,
            ..Default::default()
        }
    }

    #[test]
    fn headers_at_every_digit_count() {
        for n in [
            0usize,
            1,
            9,
            10,
            11,
            42,
            99,
            100,
            101,
            999,
            1000,
            123_456_789,
        ] {
            let mut out = Vec::new();
            write_header(&mut out, b'$', n);
            assert_eq!(out, format!("${n}\r\n").into_bytes(), "{n}");
        }
    }

    #[test]
    fn select_only_between_databases() {
        let mut p = on();
        p.record(3, &[b"SET", b"a", b"1"]);
        p.record(3, &[b"DEL", b"a"]);
        p.record(0, &[b"DEL", b"b"]);
        let c = p.take().unwrap();
        assert_eq!((c.first_db, c.last_db), (3, 0));
        assert_eq!(
            c.bytes,
            b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n1\r\n*2\r\n$3\r\nDEL\r\n$1\r\na\r\n\
              *2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n*2\r\n$3\r\nDEL\r\n$1\r\nb\r\n"
        );
        assert!(p.take().is_none());
        p.implicit_del(5, b"k");
        assert_eq!(p.take().unwrap().first_db, 5);
    }

    #[test]
    fn records_move_to_another_outbox_in_order_with_their_databases() {
        // Another shard's records made since a mark, moved after the home
        // shard's own: one block, SELECTs where the database changes.
        let (mut home, mut other) = (on(), on());
        other.record(0, &[b"SET", b"before", b"1"]);
        home.record(0, &[b"SET", b"h", b"1"]);
        let m = other.mark();
        other.record(2, &[b"DEL", b"a"]);
        other.record(0, &[b"DEL", b"b"]);
        let moved = other.take_since(m).unwrap();
        assert_eq!((moved.first_db, moved.last_db, moved.records), (2, 0, 2));
        home.append(moved);
        home.record(0, &[b"DEL", b"c"]);
        let c = home.take().unwrap();
        assert_eq!((c.records, c.first_seq, c.last_seq), (4, 1, 4));
        assert_eq!(
            c.bytes,
            b"*3\r\n$3\r\nSET\r\n$1\r\nh\r\n$1\r\n1\r\n\
              *2\r\n$6\r\nSELECT\r\n$1\r\n2\r\n*2\r\n$3\r\nDEL\r\n$1\r\na\r\n\
              *2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n*2\r\n$3\r\nDEL\r\n$1\r\nb\r\n\
              *2\r\n$3\r\nDEL\r\n$1\r\nc\r\n"
        );
        // What the other shard had before the mark stays, as it was.
        let rest = other.take().unwrap();
        assert_eq!((rest.records, rest.first_db, rest.last_db), (1, 0, 0));
        assert_eq!(
            rest.bytes,
            b"*3\r\n$3\r\nSET\r\n$6\r\nbefore\r\n$1\r\n1\r\n"
        );
        // From an empty buffer: the first record's database.
        let m = other.mark();
        other.record(7, &[b"DEL", b"z"]);
        let moved = other.take_since(m).unwrap();
        assert_eq!((moved.first_db, moved.records), (7, 1));
        assert!(other.take_since(other.mark()).is_none());
    }

    #[test]
    fn nothing_is_recorded_without_a_consumer() {
        let mut p = Outbox::default();
        p.record(0, &[b"SET", b"a", b"1"]);
        p.record_args(0, [&b"DEL"[..], b"a"].into_iter());
        p.implicit_del(0, b"k");
        assert!(p.is_empty());
        assert!(p.take().is_none());
        p.records_on = true;
        p.record(0, &[b"DEL", b"x"]);
        let c = p.take().unwrap();
        assert_eq!(
            (c.first_seq, c.last_seq),
            (1, 1),
            "no sequence number was spent"
        );
    }

    #[test]
    fn sequence_numbers_follow_the_records_across_takes() {
        let mut p = on();
        p.record(0, &[b"SET", b"a", b"1"]);
        p.record(1, &[b"SET", b"b", b"1"]);
        p.implicit_del(1, b"c");
        let c = p.take().unwrap();
        assert_eq!((c.records, c.first_seq, c.last_seq), (3, 1, 3));
        p.record_with(0, 2, |out| {
            write_bulk(out, b"DEL");
            write_bulk(out, b"b");
        });
        let c = p.take().unwrap();
        assert_eq!((c.records, c.first_seq, c.last_seq), (1, 4, 4));
        assert_eq!(c.bytes, b"*2\r\n$3\r\nDEL\r\n$1\r\nb\r\n");
    }

    #[test]
    fn records_and_events_share_one_sequence() {
        let mut p = on();
        let ev = |key: &[u8]| KeyEvent {
            db: 0,
            class: 1,
            event: "set",
            key: SmallBytes::from(key),
            seq: 0,
        };
        p.record(0, &[b"SET", b"a", b"1"]);
        p.event(ev(b"a"));
        p.record(0, &[b"SET", b"b", b"1"]);
        p.event(ev(b"b"));
        let c = p.take().unwrap();
        assert_eq!((c.first_seq, c.last_seq), (1, 3));
        let seqs: Vec<u64> = p.take_events().iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [2, 4]);
        assert!(!p.has_events());
        p.invalidate(SmallBytes::from(&b"a"[..]));
        p.record(0, &[b"DEL", b"a"]);
        let inv: Vec<u64> = p.drain_invalidations().map(|i| i.seq).collect();
        assert_eq!(inv, [5]);
        assert_eq!(p.take().unwrap().first_seq, 6);
    }

    #[test]
    fn wrap_multi_wraps_two_or_more_records_after_their_select() {
        let mut p = on();
        p.record(0, &[b"DEL", b"z"]);
        let m = p.mark();
        p.record(2, &[b"SET", b"a", b"1"]);
        p.wrap_multi(m);
        let one = p.take().unwrap();
        assert_eq!(one.records, 2, "one record: left bare");
        let m = p.mark();
        p.record(3, &[b"SET", b"a", b"1"]);
        p.record(4, &[b"DEL", b"b"]);
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
        p.record(4, &[b"DEL", b"x"]);
        let m = p.mark();
        p.record(7, &[b"DEL", b"y"]);
        p.record(7, &[b"DEL", b"w"]);
        p.wrap_multi(m);
        let c = p.take().unwrap();
        let s = String::from_utf8(c.bytes).unwrap().replace("\r\n", " ");
        assert_eq!(
            s,
            "*2 $3 DEL $1 x *2 $6 SELECT $1 7 *1 $5 MULTI *2 $3 DEL $1 y *2 $3 DEL $1 w *1 $4 EXEC "
        );
    }

    /// The chunk as `to` reads it, RESP words joined by spaces.
    fn seen(c: &Chunk, to: Target) -> String {
        let mut b = Vec::new();
        c.write_to(&mut b, to);
        String::from_utf8(b).unwrap().replace("\r\n", " ")
    }

    fn set_as(p: &mut Outbox, db: usize, key: &[u8], to: Target) {
        p.target = to;
        p.record(db, &[b"SET", key, b"1"]);
        p.target = Target::All;
    }

    #[test]
    fn records_for_one_consumer_reach_only_it_inside_their_multi() {
        // redis.set_repl in a script: a (all), c (AOF only), d (all), e
        // (replicas only), wrapped as one block; Redis wraps what it
        // propagates the same way whoever reads each record.
        let mut p = on();
        p.record(0, &[b"DEL", b"x"]);
        let m = p.mark();
        set_as(&mut p, 0, b"a", Target::All);
        set_as(&mut p, 3, b"c", Target::Aof);
        set_as(&mut p, 3, b"d", Target::All);
        set_as(&mut p, 0, b"e", Target::Replicas);
        p.wrap_multi(m);
        let c = p.take().unwrap();
        assert_eq!(
            seen(&c, Target::Aof),
            "*2 $3 DEL $1 x *1 $5 MULTI *3 $3 SET $1 a $1 1 *2 $6 SELECT $1 3 \
             *3 $3 SET $1 c $1 1 *3 $3 SET $1 d $1 1 *2 $6 SELECT $1 0 *1 $4 EXEC "
        );
        assert_eq!(
            seen(&c, Target::Replicas),
            "*2 $3 DEL $1 x *1 $5 MULTI *3 $3 SET $1 a $1 1 *2 $6 SELECT $1 3 \
             *3 $3 SET $1 d $1 1 *2 $6 SELECT $1 0 *3 $3 SET $1 e $1 1 *1 $4 EXEC "
        );
        // Both see every byte when no record is for one only.
        let mut p = on();
        set_as(&mut p, 0, b"a", Target::All);
        let c = p.take().unwrap();
        assert!(c.only.is_empty());
        assert_eq!(seen(&c, Target::Aof), seen(&c, Target::Replicas));
        // The outbox forgets them with its bytes.
        set_as(&mut p, 0, b"b", Target::Aof);
        assert_eq!(p.take().unwrap().only.len(), 1);
        set_as(&mut p, 0, b"c", Target::All);
        assert!(p.take().unwrap().only.is_empty());
    }

    #[test]
    fn records_for_one_consumer_keep_it_when_moved_or_taken_back() {
        let (mut home, mut other) = (on(), on());
        home.record(0, &[b"SET", b"h", b"1"]);
        other.record(0, &[b"SET", b"o", b"1"]);
        let m = other.mark();
        set_as(&mut other, 2, b"r", Target::Replicas);
        set_as(&mut other, 2, b"all", Target::All);
        let moved = other.take_since(m).unwrap();
        home.append(moved);
        set_as(&mut home, 0, b"f", Target::Aof);
        let c = home.take().unwrap();
        assert_eq!(
            seen(&c, Target::Aof),
            "*3 $3 SET $1 h $1 1 *2 $6 SELECT $1 2 *3 $3 SET $3 all $1 1 \
             *2 $6 SELECT $1 0 *3 $3 SET $1 f $1 1 "
        );
        assert_eq!(
            seen(&c, Target::Replicas),
            "*3 $3 SET $1 h $1 1 *2 $6 SELECT $1 2 *3 $3 SET $1 r $1 1 \
             *3 $3 SET $3 all $1 1 *2 $6 SELECT $1 0 "
        );
        // What stayed on the other shard is whole for both.
        let rest = other.take().unwrap();
        assert!(rest.only.is_empty());
        // A rollback drops the marks of the records it drops.
        let m = home.mark();
        set_as(&mut home, 0, b"gone", Target::Aof);
        home.rollback(m);
        home.record(0, &[b"SET", b"kept", b"1"]);
        let c = home.take().unwrap();
        assert!(c.only.is_empty());
        assert_eq!(seen(&c, Target::Replicas), "*3 $3 SET $4 kept $1 1 ");
    }
}
