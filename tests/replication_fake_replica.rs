//! A hand-driven replica (issue 25): the test speaks the replica's side
//! of the protocol itself, so it decides when ACKs are sent and sees
//! every byte of the stream, GETACKs included.
//!
//! WAIT:
//! * A WAIT whose writes the replica already acknowledged answers at once:
//!   no `REPLCONF GETACK *` and no ACK round trip (Redis compares the
//!   replicas' acknowledged offsets with the client's last write offset
//!   before it blocks). The replica here never answers a GETACK on its
//!   own, so a WAIT that asked for one would hang until its deadline.
//! * The stream's own PING and GETACK bytes after the last write do not
//!   count against the next WAIT (a replica's ACK to a GETACK reports the
//!   offset before it).
//! * WAIT 0 0 answers at once.
//!
//! The pending stream of a full sync (`repl::spill`):
//! * while the replica has not taken the stream (it loads the snapshot:
//!   no ACK yet after a diskless transfer), the master's writes wait in
//!   an unlinked file, not in memory, and reach the replica in order
//!   once it ACKs;
//! * they count against `client-output-buffer-limit replica`: over the
//!   hard limit before the replica takes the stream, it is dropped.
//!
//! Every wait is bounded by a deadline.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{encode_command, info_field, RawConn, Server};

const DEADLINE: Duration = Duration::from_secs(30);
const GETACK: &[u8] = b"*3\r\n$8\r\nREPLCONF\r\n$6\r\nGETACK\r\n$1\r\n*\r\n";

/// The replica's side of one link: everything read, and where the stream
/// (after the RDB payload) begins in it.
struct FakeReplica {
    s: TcpStream,
    got: Vec<u8>,
    /// Index in `got` of the stream's first byte, and its offset.
    stream_at: usize,
    start_offset: u64,
}

impl FakeReplica {
    /// PSYNC ? -1 to a master with disk syncs: `+FULLRESYNC`, newlines,
    /// `$<len>` and the RDB, then the stream.
    fn attach(master: &Server) -> FakeReplica {
        let mut r = FakeReplica::psync(master, false);
        // Keep-alive newlines, then `$<len>\r\n` and the payload.
        r.read_until("the RDB", |b| {
            let skip = b.iter().position(|&c| c != b'\n').unwrap_or(b.len());
            let b = &b[skip..];
            let Some(nl) = b.windows(2).position(|w| w == b"\r\n") else {
                return false;
            };
            let len: usize = std::str::from_utf8(&b[1..nl]).unwrap().parse().unwrap();
            b.len() >= nl + 2 + len
        });
        let skip = r.got.iter().position(|&c| c != b'\n').unwrap();
        let nl = skip + r.got[skip..].windows(2).position(|w| w == b"\r\n").unwrap();
        let len: usize = std::str::from_utf8(&r.got[skip + 1..nl])
            .unwrap()
            .parse()
            .unwrap();
        r.stream_at = nl + 2 + len;
        r
    }

    /// PSYNC ? -1 with `capa eof` to a master with diskless syncs:
    /// `+FULLRESYNC`, `$EOF:<mark>`, the RDB, the mark. The stream starts
    /// after this replica's first ACK (not sent here).
    fn attach_diskless(master: &Server) -> FakeReplica {
        let mut r = FakeReplica::psync(master, true);
        r.read_until("the EOF mark", |b| b.len() >= 47);
        assert_eq!(&r.got[..5], b"$EOF:", "{}", common::escape(&r.got, 100));
        let mark = r.got[5..45].to_vec();
        // Nothing follows the mark before this replica's first ACK.
        r.read_until("the RDB's end", |b| b.len() > 47 + 40 && b.ends_with(&mark));
        r.stream_at = r.got.len();
        r
    }

    /// The handshake up to the `+FULLRESYNC` line (consumed).
    fn psync(master: &Server, eof: bool) -> FakeReplica {
        let mut s = TcpStream::connect(master.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let capa: &[&[u8]] = if eof {
            &[b"REPLCONF", b"capa", b"eof", b"capa", b"psync2"]
        } else {
            &[b"REPLCONF", b"capa", b"psync2"]
        };
        s.write_all(&encode_command(capa)).unwrap();
        s.write_all(&encode_command(&[b"PSYNC", b"?", b"-1"]))
            .unwrap();
        let mut r = FakeReplica {
            s,
            got: Vec::new(),
            stream_at: 0,
            start_offset: 0,
        };
        r.read_until("+OK", |b| b.len() >= 5);
        assert_eq!(&r.got[..5], b"+OK\r\n");
        r.got.drain(..5);
        r.read_until("+FULLRESYNC", |b| b.windows(2).any(|w| w == b"\r\n"));
        let nl = r.got.windows(2).position(|w| w == b"\r\n").unwrap();
        let line = String::from_utf8_lossy(&r.got[..nl]).into_owned();
        let words: Vec<&str> = line.split(' ').collect();
        assert_eq!(words[0], "+FULLRESYNC", "{line}");
        r.start_offset = words[2].parse().unwrap();
        r.got.drain(..nl + 2);
        r
    }

    /// Reads until the master closes the link (bounded).
    fn wait_closed(&mut self) {
        let t0 = Instant::now();
        let mut chunk = [0u8; 65536];
        loop {
            assert!(t0.elapsed() < DEADLINE, "the link was never closed");
            match self.s.read(&mut chunk) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => return,
            }
        }
    }

    /// Reads until `done` holds on everything read (bounded).
    fn read_until(&mut self, what: &str, mut done: impl FnMut(&[u8]) -> bool) -> usize {
        let t0 = Instant::now();
        let mut chunk = [0u8; 65536];
        while !done(&self.got) {
            assert!(
                t0.elapsed() < DEADLINE,
                "timed out reading {what}; read {}",
                common::escape(&self.got, 400)
            );
            match self.s.read(&mut chunk) {
                Ok(0) => panic!("the master closed the link"),
                Ok(n) => self.got.extend_from_slice(&chunk[..n]),
                Err(_) => {}
            }
        }
        self.got.len()
    }

    /// The stream read so far.
    fn stream(&self) -> &[u8] {
        &self.got[self.stream_at..]
    }

    /// The offset after everything read.
    fn offset(&self) -> u64 {
        self.start_offset + self.stream().len() as u64
    }

    /// Reads the stream until it holds `needle` at or after stream index
    /// `from`; returns the index just past it.
    fn read_stream_past(&mut self, from: usize, needle: &[u8]) -> usize {
        let at = self.stream_at + from;
        // Each read looks only at what it added (and the needle's length
        // before it): a rescan of megabytes per 64 KiB read made this
        // quadratic, 15-26 s of a debug build's CPU for an 8 MB stream.
        let mut scanned = at;
        let mut found = None;
        self.read_until(&String::from_utf8_lossy(needle), |b| {
            if b.len() < scanned + needle.len() {
                return false;
            }
            found = find(&b[scanned..], needle).map(|i| scanned + i);
            scanned = b.len() + 1 - needle.len();
            found.is_some()
        });
        found.unwrap() - self.stream_at + needle.len()
    }

    fn ack(&mut self, off: u64) {
        let off = off.to_string();
        self.s
            .write_all(&encode_command(&[b"REPLCONF", b"ACK", off.as_bytes()]))
            .unwrap();
    }
}

/// Waits until INFO shows the replica's acknowledged offset at `off`.
fn wait_acked(c: &mut redis::Connection, off: u64) {
    let want = format!("offset={off},");
    let t0 = Instant::now();
    loop {
        let info: String = redis::cmd("INFO").arg("replication").query(c).unwrap();
        if info.contains(&want) && info.contains("state=online") {
            return;
        }
        assert!(t0.elapsed() < DEADLINE, "the ACK never counted: {info}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

#[test]
fn wait_answers_at_once_when_the_replicas_already_acknowledged() {
    let master = Server::tessera(&["--shards", "2", "--save", "", "--repl-diskless-sync", "no"]);
    let mut c = master.conn();
    let mut r = FakeReplica::attach(&master);
    // The client that WAITs: a bounded read, so a WAIT that waits for a
    // GETACK the replica never answers fails the test instead of hanging.
    let mut w = RawConn::connect(&master.addr());
    w.set_reply_timeout(DEADLINE);

    assert_eq!(w.cmd_str(&["SET", "k1", "v"]), b"+OK\r\n");
    let past = r.read_stream_past(0, b"k1\r\n");
    r.ack(r.offset());
    wait_acked(&mut c, r.offset());
    // The write is acknowledged: WAIT answers with no GETACK.
    assert_eq!(w.cmd_str(&["WAIT", "1", "0"]), b":1\r\n");
    assert_eq!(w.cmd_str(&["WAIT", "0", "0"]), b":1\r\n");
    // The next write shows what the stream held in between: no GETACK.
    assert_eq!(w.cmd_str(&["SET", "k2", "v"]), b"+OK\r\n");
    let past2 = r.read_stream_past(past, b"k2\r\n");
    assert_eq!(
        count(&r.stream()[past..past2], GETACK),
        0,
        "a WAIT answered at once asked for an ACK: {}",
        common::escape(&r.stream()[past..past2], 400)
    );

    // Not acknowledged yet: the WAIT asks, the replica answers the GETACK
    // with the offset before it (as Redis's replicas), WAIT gets 1.
    w.send(&encode_command(&[b"WAIT", b"1", b"0"]));
    let after = r.read_stream_past(past2, GETACK);
    let before_getack = r.start_offset + (after - GETACK.len()) as u64;
    r.ack(before_getack);
    assert_eq!(w.read_reply(), b":1\r\n");
    // Again, with no write in between: the GETACK's own bytes are not
    // this client's writes, so no round trip (the replica does not answer
    // a second GETACK).
    assert_eq!(w.cmd_str(&["WAIT", "1", "0"]), b":1\r\n");
    assert_eq!(w.cmd_str(&["SET", "k3", "v"]), b"+OK\r\n");
    let past3 = r.read_stream_past(after, b"k3\r\n");
    assert_eq!(
        count(&r.stream()[after..past3], GETACK),
        0,
        "{}",
        common::escape(&r.stream()[after..past3], 400)
    );
    // One GETACK for many WAITs of the same write.
    let mut w2 = RawConn::connect(&master.addr());
    w2.set_reply_timeout(DEADLINE);
    w.send(&encode_command(&[b"WAIT", b"1", b"0"]));
    w2.send(&encode_command(&[b"WAIT", b"1", b"0"]));
    let after3 = r.read_stream_past(past3, GETACK);
    r.ack(r.start_offset + (after3 - GETACK.len()) as u64);
    assert_eq!(w.read_reply(), b":1\r\n");
    assert_eq!(w2.read_reply(), b":1\r\n");
    assert_eq!(info_field(&mut c, "replication", "connected_slaves"), "1");
}

/// Bytes of files named `temp-repl-*` (deleted) that `pid` holds open.
/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let first = needle[0];
    let mut from = 0;
    while let Some(i) = hay[from..].iter().position(|&c| c == first) {
        let i = from + i;
        if hay[i..].starts_with(needle) {
            return Some(i);
        }
        from = i + 1;
    }
    None
}

fn spilled_bytes(pid: u32) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        let Ok(target) = std::fs::read_link(e.path()) else {
            continue;
        };
        if target.to_string_lossy().contains("temp-repl-") {
            total += std::fs::metadata(e.path()).map_or(0, |m| m.len());
        }
    }
    total
}

fn diskless_master(extra: &[&str]) -> Server {
    let mut args = vec![
        "--shards",
        "2",
        "--save",
        "",
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
    ];
    args.extend_from_slice(extra);
    Server::tessera(&args)
}

#[test]
fn a_syncing_replicas_stream_waits_on_disk_and_arrives_in_order() {
    let master = diskless_master(&[]);
    let pid = master.pid().expect("the master's pid");
    let mut c = master.conn();
    let _: () = redis::cmd("SET")
        .arg("before")
        .arg("1")
        .query(&mut c)
        .unwrap();
    let mut r = FakeReplica::attach_diskless(&master);
    // Loaded, not acknowledged: the master's writes wait for the replica.
    let big = "x".repeat(1 << 20);
    for i in 0..8 {
        let _: () = redis::cmd("SET")
            .arg(format!("big{i}"))
            .arg(format!("{i}{big}"))
            .query(&mut c)
            .unwrap();
    }
    let t0 = Instant::now();
    while spilled_bytes(pid) < 8 << 20 {
        assert!(
            t0.elapsed() < DEADLINE,
            "the pending stream is not on disk: {} bytes",
            spilled_bytes(pid)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(r.stream().is_empty(), "stream bytes before the first ACK");
    // The replica takes the stream: every write, in order, then what
    // comes after (from memory).
    r.ack(r.start_offset);
    let _: () = redis::cmd("SET")
        .arg("after")
        .arg("2")
        .query(&mut c)
        .unwrap();
    let end = r.read_stream_past(0, b"after\r\n");
    let mut at = 0;
    for i in 0..8 {
        let key = format!("big{i}\r\n");
        at = r.read_stream_past(at, key.as_bytes());
        let want = format!("$1048577\r\n{i}x");
        assert!(r.stream()[at..].starts_with(want.as_bytes()), "big{i}");
    }
    assert!(
        at < end,
        "the write after the ACK came before the waiting ones"
    );
    let t0 = Instant::now();
    while spilled_bytes(pid) != 0 {
        assert!(t0.elapsed() < DEADLINE, "the file outlived its use");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(info_field(&mut c, "replication", "connected_slaves"), "1");
}

#[test]
fn a_syncing_replica_over_the_hard_limit_is_dropped() {
    let master = diskless_master(&["--client-output-buffer-limit", "replica 4mb 0 0"]);
    let mut c = master.conn();
    let mut r = FakeReplica::attach_diskless(&master);
    let big = "x".repeat(1 << 20);
    let t0 = Instant::now();
    let mut i = 0;
    while info_field(&mut c, "replication", "connected_slaves") != "0" {
        assert!(t0.elapsed() < DEADLINE, "the replica was never dropped");
        let _: () = redis::cmd("SET")
            .arg(format!("big{i}"))
            .arg(&big)
            .query(&mut c)
            .unwrap();
        i += 1;
    }
    assert!(i >= 4, "dropped under its limit, after {i} MB");
    let log = master.log();
    assert!(log.contains("overcoming of output buffer limits"), "{log}");
    r.wait_closed();
}

/// Incompressible bytes (the RDB's LZF would shrink repeated ones).
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as u8
        })
        .collect()
}

/// The limit holds during the transfer too: a replica that reads nothing
/// of its snapshot (the transfer stalls on its socket) while the master
/// takes writes is dropped at the hard limit, and its snapshot ends.
#[test]
fn a_replica_stalled_mid_transfer_is_dropped_at_the_hard_limit() {
    let master = diskless_master(&["--client-output-buffer-limit", "replica 4mb 0 0"]);
    let mut c = master.conn();
    for i in 0..24 {
        let _: () = redis::cmd("SET")
            .arg(format!("data{i}"))
            .arg(noise(i, 1 << 20))
            .query(&mut c)
            .unwrap();
    }
    // The handshake only: not one byte of the 24 MB snapshot is read.
    let mut r = FakeReplica::psync(&master, true);
    let t0 = Instant::now();
    let mut i = 0;
    while info_field(&mut c, "replication", "connected_slaves") != "0" {
        assert!(
            t0.elapsed() < DEADLINE,
            "the stalled replica was never dropped"
        );
        let _: () = redis::cmd("SET")
            .arg(format!("big{}", i % 16))
            .arg(noise(100 + i, 1 << 20))
            .query(&mut c)
            .unwrap();
        i += 1;
    }
    assert!(i >= 4, "dropped under its limit, after {i} MB");
    let log = master.log();
    assert!(log.contains("overcoming of output buffer limits"), "{log}");
    r.wait_closed();
    // The master goes on: a new replica gets a whole snapshot.
    let mut r2 = FakeReplica::attach_diskless(&master);
    r2.ack(r2.start_offset);
    let _: () = redis::cmd("SET")
        .arg("after")
        .arg("1")
        .query(&mut c)
        .unwrap();
    r2.read_stream_past(0, b"after\r\n");
}
