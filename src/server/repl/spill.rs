//! A replica's pending stream on disk while its full sync runs.
//!
//! From a full sync's snapshot instant until the replica has loaded the
//! snapshot (its first ACK after a diskless transfer; the file's last byte
//! for a disk sync), everything the master writes waits for it. Under
//! writes that is the sync's biggest memory cost: a few hundred MB while
//! a replica loads a large dataset (bench/replication.sh measured the
//! master doubling its memory), where Redis keeps it in the replica's
//! output buffer. Here those bytes go to an unlinked file in `dir`
//! instead, written by the stream writer (page cache, no fsync) and read
//! back by the link's writer thread once the replica takes the stream;
//! the link's queue in memory takes over when the file is drained (see
//! `link::Link::push_stream`). The bytes still count against the
//! `replica` class of `client-output-buffer-limit`, as Redis counts its
//! output buffer: a replica that falls that far behind is dropped and
//! resyncs, and the file's size stays bounded.
//!
//! If the file cannot be made or written (no room in `dir`), the bytes
//! stay in memory as before: the queue then holds everything after the
//! file's last byte, so the order is kept.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Bytes read back per write to the replica's socket.
pub const CHUNK: usize = 256 << 10;

pub struct Spill {
    file: File,
    written: u64,
    read: u64,
}

impl Spill {
    /// A new file in `dir`, unlinked at once (it goes with its handle,
    /// whatever happens to the process).
    pub fn create(dir: &Path, id: u64) -> io::Result<Spill> {
        let path = dir.join(format!("temp-repl-{}-{id}.stream", std::process::id()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        std::fs::remove_file(&path)?;
        Ok(Spill {
            file,
            written: 0,
            read: 0,
        })
    }

    pub fn append(&mut self, b: &[u8]) -> io::Result<()> {
        self.file.write_all_at(b, self.written)?;
        self.written += b.len() as u64;
        Ok(())
    }

    /// Bytes written and not read back yet.
    pub fn pending(&self) -> u64 {
        self.written - self.read
    }

    /// The next bytes to send, at most [`CHUNK`].
    pub fn next_chunk(&mut self) -> io::Result<Vec<u8>> {
        let n = self.pending().min(CHUNK as u64) as usize;
        let mut buf = vec![0u8; n];
        self.file.read_exact_at(&mut buf, self.read)?;
        self.read += n as u64;
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_come_back_in_order_and_the_file_is_unlinked() {
        let dir = std::env::temp_dir().join(format!("spill-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = Spill::create(&dir, 7).unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "unlinked");
        let a: Vec<u8> = (0..CHUNK + 10).map(|i| i as u8).collect();
        s.append(&a).unwrap();
        s.append(b"tail").unwrap();
        assert_eq!(s.pending(), a.len() as u64 + 4);
        let mut back = Vec::new();
        while s.pending() > 0 {
            let c = s.next_chunk().unwrap();
            assert!(c.len() <= CHUNK);
            back.extend_from_slice(&c);
        }
        assert_eq!(&back[..a.len()], &a[..]);
        assert_eq!(&back[a.len()..], b"tail");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
