//! The replication backlog: the last `repl-backlog-size` bytes of the
//! replication stream, kept so that a replica whose link dropped can
//! continue (`PSYNC replid offset` → `+CONTINUE`) instead of loading a
//! whole new snapshot.
//!
//! Offsets are Redis's: the stream's bytes are numbered from 1, the
//! backlog holds bytes `first ..= first + histlen - 1`, and the stream's
//! offset (`master_repl_offset`) is the number of the last byte written
//! (`first + histlen - 1`). A replica that processed up to offset `o`
//! asks for `o + 1`; every request in `first ..= master_repl_offset + 1`
//! can be served (the upper end: nothing to send yet).
//!
//! A ring of a fixed capacity, allocated when created (Redis allocates
//! its backlog when the first replica attaches); `resize` keeps the newest
//! bytes. Memory: exactly the capacity, whatever the write pattern.

/// A byte ring over the replication stream (see the module docs).
#[derive(Debug)]
pub struct Backlog {
    buf: Vec<u8>,
    /// Where the next byte goes in `buf`.
    head: usize,
    /// Bytes held (`<= buf.len()`).
    histlen: usize,
    /// Stream offset of the next byte to be written (`master_repl_offset
    /// + 1`).
    next: u64,
}

impl Backlog {
    /// An empty backlog of `size` bytes (at least 1) whose first byte
    /// will be stream byte `next` (`master_repl_offset + 1`).
    pub fn new(size: usize, next: u64) -> Backlog {
        Backlog {
            buf: vec![0; size.max(1)],
            head: 0,
            histlen: 0,
            next,
        }
    }

    /// Capacity in bytes (`repl_backlog_size`).
    pub fn size(&self) -> usize {
        self.buf.len()
    }

    /// Bytes held (`repl_backlog_histlen`).
    pub fn histlen(&self) -> usize {
        self.histlen
    }

    /// Offset of the oldest byte held (`repl_backlog_first_byte_offset`);
    /// the next offset when empty.
    pub fn first(&self) -> u64 {
        self.next - self.histlen as u64
    }

    /// Offset the next byte written gets.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Appends stream bytes; the oldest fall off past the capacity.
    pub fn append(&mut self, mut b: &[u8]) {
        let cap = self.buf.len();
        self.next += b.len() as u64;
        if b.len() >= cap {
            b = &b[b.len() - cap..];
            self.buf.copy_from_slice(b);
            self.head = 0;
            self.histlen = cap;
            return;
        }
        let first = (cap - self.head).min(b.len());
        self.buf[self.head..self.head + first].copy_from_slice(&b[..first]);
        self.buf[..b.len() - first].copy_from_slice(&b[first..]);
        self.head = (self.head + b.len()) % cap;
        self.histlen = (self.histlen + b.len()).min(cap);
    }

    /// Whether a replica may continue from stream offset `from` (the
    /// offset it asks for: its processed offset + 1).
    pub fn covers(&self, from: u64) -> bool {
        from >= self.first() && from <= self.next
    }

    /// The bytes from stream offset `from` to the end; `None` when not
    /// covered.
    pub fn read_from(&self, from: u64) -> Option<Vec<u8>> {
        if !self.covers(from) {
            return None;
        }
        let n = (self.next - from) as usize;
        let cap = self.buf.len();
        // Index of byte `from`: the ring's start plus its distance from
        // the first byte held.
        let start = (self.head + cap - self.histlen + (self.histlen - n)) % cap;
        let mut out = Vec::with_capacity(n);
        let first = (cap - start).min(n);
        out.extend_from_slice(&self.buf[start..start + first]);
        out.extend_from_slice(&self.buf[..n - first]);
        Some(out)
    }

    /// Changes the capacity (`CONFIG SET repl-backlog-size`), keeping the
    /// newest bytes that fit.
    pub fn resize(&mut self, size: usize) {
        let size = size.max(1);
        if size == self.buf.len() {
            return;
        }
        let keep = self.histlen.min(size);
        let tail = self.read_from(self.next - keep as u64).unwrap_or_default();
        self.buf = vec![0; size];
        self.buf[..keep].copy_from_slice(&tail);
        self.head = keep % size;
        self.histlen = keep;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model: every byte ever written, with its offset.
    fn model_check(b: &Backlog, all: &[u8], start: u64) {
        let next = start + all.len() as u64;
        assert_eq!(b.next(), next);
        let held = b.histlen();
        assert_eq!(held, all.len().min(b.size()));
        assert_eq!(b.first(), next - held as u64);
        for from in b.first()..=next {
            let got = b.read_from(from).unwrap();
            let i = (from - start) as usize;
            assert_eq!(got, &all[i..], "from {from}");
        }
        assert!(b.read_from(next + 1).is_none());
        if b.first() > 1 {
            assert!(b.read_from(b.first() - 1).is_none());
        }
    }

    #[test]
    fn wraps_around_and_serves_every_covered_offset() {
        let mut b = Backlog::new(10, 1);
        let mut all = Vec::new();
        model_check(&b, &all, 1);
        for (i, n) in [3usize, 4, 5, 1, 9, 2, 10, 11, 7, 0, 25].iter().enumerate() {
            let chunk: Vec<u8> = (0..*n).map(|j| (i * 31 + j) as u8).collect();
            b.append(&chunk);
            all.extend_from_slice(&chunk);
            model_check(&b, &all, 1);
        }
    }

    #[test]
    fn starts_at_the_stream_offset_it_was_created_at() {
        // Created when the stream had 1000 bytes: the next byte is 1001.
        let mut b = Backlog::new(4, 1001);
        assert!(b.covers(1001));
        assert!(!b.covers(1000));
        assert_eq!(b.read_from(1001).unwrap(), b"");
        b.append(b"abcdef");
        assert_eq!(b.first(), 1003);
        assert_eq!(b.read_from(1003).unwrap(), b"cdef");
        assert_eq!(b.read_from(1007).unwrap(), b"");
        assert!(b.read_from(1002).is_none());
        assert!(b.read_from(1008).is_none());
    }

    #[test]
    fn resizing_keeps_the_newest_bytes() {
        let mut b = Backlog::new(8, 1);
        b.append(b"0123456789");
        b.resize(4);
        assert_eq!(b.first(), 7);
        assert_eq!(b.read_from(7).unwrap(), b"6789");
        b.append(b"ab");
        assert_eq!(b.read_from(9).unwrap(), b"89ab");
        b.resize(16);
        assert_eq!(b.read_from(9).unwrap(), b"89ab");
        b.append(b"cdefghijklmn");
        assert_eq!(b.read_from(9).unwrap(), b"89abcdefghijklmn");
        b.append(b"o");
        assert_eq!(b.first(), 10);
    }
}
