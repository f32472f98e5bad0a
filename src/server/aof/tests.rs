//! The writer's batching, leading, stream feed and write-error retries,
//! driven on real files in a temporary directory.

use super::*;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

/// A disk status of a test's own (a server leaks its own too).
fn unread_disk() -> &'static DiskStatus {
    Box::leak(Box::default())
}

fn chunk(records: u64) -> Chunk {
    let mut p = engine::outbox::Outbox::default();
    p.records_on = true;
    for i in 0..records {
        p.record(0, &[b"SET", format!("k{i}").as_bytes(), b"v"]);
    }
    p.take().expect("at least one record")
}

/// A writer under `always` on a fresh file in a directory of its own
/// (`tag` and the process id).
fn always_aof(tag: &str) -> (PathBuf, PathBuf, Arc<Aof>) {
    let dir = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.aof");
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    let env = (unread_disk(), &Wakers::new(0));
    (dir, path, start(file, AppendFsync::Always, env))
}

/// SET records in the file at `path`.
fn sets_in(path: &Path) -> u64 {
    let text = std::fs::read(path).unwrap();
    text.windows(5).filter(|w| w == b"\r\nSET").count() as u64
}

#[test]
fn a_gathering_writer_is_woken_only_by_a_full_batch() {
    let mut q = Queue::default();
    assert!(q.batch_ready(), "not gathering: every record wakes it");
    q.gather_for = 5;
    q.records = 4;
    assert!(!q.batch_ready());
    q.records = 5;
    assert!(q.batch_ready());
}

/// Under `always`, batches of every size (one record, a few, more
/// than the last batch, fewer) all become durable, and the queue's
/// record count returns to zero: the gathering writer never waits for
/// records that do not come (it stops at GATHER_MAX).
#[test]
fn always_makes_every_batch_durable() {
    let (dir, path, aof) = always_aof("tessera-aof");
    let mut sent = 0;
    for round in 0..40u64 {
        let mut target = 0;
        for _ in 0..(round * 7) % 5 + 1 {
            let n = (round * 3) % 4 + 1;
            target = aof.append(chunk(n), false);
            sent += n;
        }
        aof.wait_durable(target, &format!("batch {round}"));
    }
    assert_eq!(aof.lock().records, 0);
    aof.stop();
    assert_eq!(sets_in(&path), sent);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A leading thread's records are on disk when `lead` returns, with
/// no help from the writer thread (which is not told of them).
#[test]
fn a_lead_writes_and_syncs_in_the_calling_thread() {
    let (dir, path, aof) = always_aof("tessera-aof-lead");
    let mut sent = 0;
    for n in 1..=5 {
        let target = aof.append(chunk(n), true);
        sent += n;
        assert!(
            aof.lead(&[0]),
            "batch {n}: the sink was free, the lead must write"
        );
        assert!(aof.durable() >= target, "batch {n} not durable after lead");
        assert_eq!(sets_in(&path), sent, "batch {n} not in the file after lead");
    }
    assert_eq!(aof.lock().records, 0);
    aof.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// While the writer thread holds the file (mid-fsync), a lead does not
/// wait for it: it hands the records to the writer, which makes them
/// durable once it is free.
#[test]
fn a_lead_hands_off_while_the_writer_writes() {
    let (dir, path, aof) = always_aof("tessera-aof-lead-busy");
    let target = aof.append(chunk(3), true);
    {
        let _writing = aof.sink.lock().unwrap();
        assert!(!aof.lead(&[0]), "the lead must not wait for a busy writer");
        assert!(aof.durable() < target);
    }
    aof.wait_durable(target, "a batch handed to the writer");
    assert_eq!(sets_in(&path), 3);
    aof.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}

struct Collect(Mutex<Vec<u8>>);
impl StreamFeed for Collect {
    fn feed(&self, b: Vec<u8>) {
        self.0.lock().unwrap().extend_from_slice(&b);
    }
}

/// With no file, the writer feeds the stream: the same bytes a file
/// would get (SELECT between databases, MULTI/EXEC around a
/// transaction's parts), and marks that run in order, after
/// everything before them was fed (one feeds a PING itself, as the
/// replication master does), and make the next record SELECT again.
#[test]
fn a_fileless_writer_feeds_the_stream_in_order() {
    let aof = start(None, AppendFsync::Always, (unread_disk(), &Wakers::new(0)));
    assert_eq!(aof.policy(), AppendFsync::No, "no file: nothing to sync");
    let got = Arc::new(Collect(Mutex::new(Vec::new())));
    aof.set_feed(Some(got.clone()));
    aof.append(engine::outbox::chunk_of(0, &[b"SET", b"a", b"1"]), false);
    aof.append(engine::outbox::chunk_of(1, &[b"SET", b"b", b"2"]), false);
    aof.tx_parts(7, vec![(2, engine::outbox::chunk_of(1, &[b"DEL", b"c"]))]);
    aof.tx_parts(
        7,
        vec![(1, engine::outbox::chunk_of(1, &[b"SET", b"c", b"3"]))],
    );
    aof.tx_finish(7, false);
    let g = got.clone();
    aof.stream_mark(
        false,
        Box::new(move || g.feed(b"*1\r\n$4\r\nPING\r\n".to_vec())),
    );
    let at = Arc::new(Mutex::new(0usize));
    let (g, a) = (got.clone(), at.clone());
    aof.stream_mark(
        true,
        Box::new(move || *a.lock().unwrap() = g.0.lock().unwrap().len()),
    );
    let t = aof.append(engine::outbox::chunk_of(1, &[b"SET", b"d", b"4"]), false);
    aof.wait_durable(t, "the stream");
    let text = String::from_utf8(got.0.lock().unwrap().clone()).unwrap();
    let expect = "*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n1\r\n\
        *2\r\n$6\r\nSELECT\r\n$1\r\n1\r\n*3\r\n$3\r\nSET\r\n$1\r\nb\r\n$1\r\n2\r\n\
        *1\r\n$5\r\nMULTI\r\n*3\r\n$3\r\nSET\r\n$1\r\nc\r\n$1\r\n3\r\n\
        *2\r\n$3\r\nDEL\r\n$1\r\nc\r\n*1\r\n$4\r\nEXEC\r\n\
        *1\r\n$4\r\nPING\r\n\
        *2\r\n$6\r\nSELECT\r\n$1\r\n1\r\n*3\r\n$3\r\nSET\r\n$1\r\nd\r\n$1\r\n4\r\n";
    assert_eq!(text, expect);
    let mark = *at.lock().unwrap();
    assert_eq!(
        &text[mark..mark + 4],
        "*2\r\n",
        "the mark ran after the PING"
    );
    assert!(text[..mark].ends_with("PING\r\n"));
    aof.stop();
}

/// Polls `cond` every millisecond; panics naming `what` after 30 s.
fn until(what: &str, cond: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(30), "never: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A file every write to which fails with ENOSPC.
fn full() -> File {
    OpenOptions::new().write(true).open("/dev/full").unwrap()
}

fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

/// Under `everysec`, a write that fails keeps its records: they are
/// not published as written, writes are refused with the errno
/// (MISCONF), the stream gets them once; once the file can be written
/// the retry writes them, then what came since, each once, and the
/// status is ok again.
#[test]
fn a_failed_write_keeps_its_records_and_retries_them() {
    let dir = std::env::temp_dir().join(format!("tessera-aof-retry-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.aof");
    let disk = unread_disk();
    let aof = start(full(), AppendFsync::Everysec, (disk, &Wakers::new(0)));
    let got = Arc::new(Collect(Mutex::new(Vec::new())));
    aof.set_feed(Some(got.clone()));
    let a = aof.append(engine::outbox::chunk_of(0, &[b"SET", b"a", b"1"]), false);
    until("the write fails", || disk.refusal().is_some());
    assert_eq!(
        disk.refusal(),
        Some(commands::ops::disk::DiskError::Aof(libc::ENOSPC))
    );
    assert!(!aof.last_write_ok());
    assert!(aof.durable() < a, "published as written");
    let b = aof.append(engine::outbox::chunk_of(0, &[b"SET", b"b", b"2"]), false);
    until("the stream gets both", || {
        count(&got.0.lock().unwrap(), b"SET") == 2
    });
    // Retried in vain a few times, then the disk is back.
    std::thread::sleep(RETRY * 3);
    assert!(aof.durable() < a);
    aof.sink.lock().unwrap().file = Some(
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap(),
    );
    aof.wait_durable(b, "the retry");
    assert_eq!(disk.refusal(), None);
    assert!(aof.last_write_ok());
    let c = aof.append(engine::outbox::chunk_of(0, &[b"SET", b"c", b"3"]), false);
    aof.wait_durable(c, "a write after the recovery");
    aof.stop();
    let file = std::fs::read(&path).unwrap();
    let expect = b"*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n1\r\n\
        *3\r\n$3\r\nSET\r\n$1\r\nb\r\n$1\r\n2\r\n*3\r\n$3\r\nSET\r\n$1\r\nc\r\n$1\r\n3\r\n";
    assert_eq!(
        String::from_utf8_lossy(&file),
        String::from_utf8_lossy(expect)
    );
    assert_eq!(got.0.lock().unwrap().as_slice(), &expect[..]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A short write that cannot be undone (a pipe has no ftruncate): the
/// written part leaves the buffer, the rest is retried; the reader
/// gets every byte once, in order.
#[test]
fn a_short_write_not_undone_drops_only_the_written_part() {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    assert_eq!(
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK) },
        0
    );
    // SAFETY: both descriptors were just made and are owned here only.
    let (rx, tx) = unsafe {
        use std::os::fd::FromRawFd;
        (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1]))
    };
    let disk = unread_disk();
    let aof = start(tx, AppendFsync::No, (disk, &Wakers::new(0)));
    // Records of 1 KiB, more than the pipe holds.
    let value = vec![b'x'; 1024];
    let mut target = 0;
    for i in 0..200 {
        let k = format!("k{i}");
        target = aof.append(
            engine::outbox::chunk_of(0, &[b"SET", k.as_bytes(), &value]),
            false,
        );
    }
    until("the pipe is full", || disk.refusal().is_some());
    // A write the pipe takes part of is short (ENOSPC, as Redis's); one
    // that finds its sixteen page slots taken, even with room left in the
    // last page (a write merges into it only if its length modulo a page
    // fits), gets EAGAIN with nothing written. Which comes first depends
    // on how the writer's batches fell, so either is Redis's answer.
    let refused = disk.refusal();
    assert!(
        [libc::ENOSPC, libc::EAGAIN]
            .iter()
            .any(|&e| refused == Some(commands::ops::disk::DiskError::Aof(e))),
        "{refused:?}"
    );
    let mut rx = rx;
    let mut read = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    let t0 = Instant::now();
    while aof.durable() < target || !aof.sink.lock().unwrap().buf.is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(30), "never drained");
        match std::io::Read::read(&mut rx, &mut chunk) {
            Ok(n) => read.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(disk.refusal(), None, "recovered");
    aof.stop();
    loop {
        match std::io::Read::read(&mut rx, &mut chunk) {
            Ok(0) => break,
            Ok(n) => read.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
    }
    let mut expect = Vec::new();
    let mut db = None;
    for i in 0..200 {
        let k = format!("k{i}");
        emit(
            &mut expect,
            &mut db,
            &engine::outbox::chunk_of(0, &[b"SET", k.as_bytes(), &value]),
            Target::Replicas,
        );
    }
    assert!(
        read == expect,
        "{} bytes read, {} expected",
        read.len(),
        expect.len()
    );
}

/// A switch to a new incr file while the old one cannot be written:
/// the old file keeps its bytes and gets them first; what comes after
/// the switch waits for the new file (not written before the old one
/// has everything), but not for the stream.
#[test]
fn a_switch_leaves_the_old_files_bytes_first() {
    let dir = std::env::temp_dir().join(format!("tessera-aof-switch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (old, new) = (dir.join("old.aof"), dir.join("new.aof"));
    let open = |p: &Path| {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .unwrap()
    };
    let disk = unread_disk();
    let aof = start(full(), AppendFsync::Everysec, (disk, &Wakers::new(0)));
    let got = Arc::new(Collect(Mutex::new(Vec::new())));
    aof.set_feed(Some(got.clone()));
    aof.append(engine::outbox::chunk_of(0, &[b"SET", b"a", b"1"]), false);
    until("the write fails", || disk.refusal().is_some());
    aof.switch_incr(open(&new));
    let b = aof.append(engine::outbox::chunk_of(0, &[b"SET", b"b", b"2"]), false);
    until("the stream gets the record after the switch", || {
        count(&got.0.lock().unwrap(), b"SET") == 2
    });
    until("the old file's bytes set apart", || {
        aof.sink.lock().unwrap().retiring.is_some()
    });
    std::thread::sleep(RETRY * 3);
    assert_eq!(std::fs::read(&new).unwrap(), b"", "the new file waits");
    assert!(aof.durable() < b);
    aof.sink.lock().unwrap().retiring.as_mut().unwrap().file = open(&old);
    aof.wait_durable(b, "the switch");
    aof.stop();
    assert_eq!(sets_in(&old), 1);
    assert!(std::fs::read(&old).unwrap().ends_with(b"a\r\n$1\r\n1\r\n"));
    assert_eq!(sets_in(&new), 1);
    assert!(std::fs::read(&new)
        .unwrap()
        .starts_with(b"*2\r\n$6\r\nSELECT"));
    assert_eq!(count(&got.0.lock().unwrap(), b"SET"), 2, "fed once");
    assert_eq!(disk.refusal(), None);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Turning the file off (`appendonly no` with the stream on) or
/// stopping drops what could not be written after one last try, as
/// Redis's stopAppendOnly and shutdown: no hang, and writes are no
/// longer refused.
#[test]
fn turning_off_or_stopping_gives_up_a_failed_write() {
    let disk = unread_disk();
    let aof = start(full(), AppendFsync::Everysec, (disk, &Wakers::new(0)));
    let got = Arc::new(Collect(Mutex::new(Vec::new())));
    aof.set_feed(Some(got.clone()));
    aof.append(engine::outbox::chunk_of(0, &[b"SET", b"a", b"1"]), false);
    until("the write fails", || disk.refusal().is_some());
    aof.switch_file(None);
    let b = aof.append(engine::outbox::chunk_of(0, &[b"SET", b"b", b"2"]), false);
    aof.wait_durable(b, "the stream after the file went");
    assert_eq!(disk.refusal(), None);
    assert!(aof.last_write_ok());
    assert_eq!(count(&got.0.lock().unwrap(), b"SET"), 2);
    aof.stop();

    let aof = start(full(), AppendFsync::Everysec, (disk, &Wakers::new(0)));
    aof.append(engine::outbox::chunk_of(0, &[b"SET", b"a", b"1"]), false);
    until("the write fails", || disk.refusal().is_some());
    aof.stop();
    assert_eq!(disk.refusal(), None, "the writer is gone");

    // Stopping with the old file's bytes set apart at a switch.
    let dir = std::env::temp_dir().join(format!("tessera-aof-stop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let aof = start(full(), AppendFsync::Everysec, (disk, &Wakers::new(0)));
    aof.append(engine::outbox::chunk_of(0, &[b"SET", b"a", b"1"]), false);
    until("the write fails", || disk.refusal().is_some());
    aof.switch_incr(File::create(dir.join("new.aof")).unwrap());
    until("the old file's bytes set apart", || {
        aof.sink.lock().unwrap().retiring.is_some()
    });
    aof.stop();
    assert_eq!(disk.refusal(), None);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The wake-ups are the server's (`Wakers`, handed to the writers it
/// starts), not the process's: of two servers in one process (tests
/// build several), a thread waiting for one's record is woken by that
/// server's writer, and the other's threads are not.
#[test]
fn each_server_wakes_its_own_threads() {
    let woken = || {
        let (w, hits) = (Wakers::new(2), Arc::new(Mutex::new(Vec::new())));
        let h = hits.clone();
        w.set(move |i| h.lock().unwrap().push(i));
        (w, hits)
    };
    let ((wa, hits_a), (wb, hits_b)) = (woken(), woken());
    let a = start(None, AppendFsync::No, (unread_disk(), &wa));
    let b = start(None, AppendFsync::No, (unread_disk(), &wb));
    // B's thread 1 asks before the record is queued: the wake-up cannot
    // be missed.
    let next = b.durable() + 1;
    assert!(b.want(1, next) < next);
    let t = b.append(chunk(1), false);
    assert_eq!(t, next);
    b.wait_durable(t, "B's record");
    until("B's thread 1 woken", || *hits_b.lock().unwrap() == [1]);
    let t = a.append(chunk(1), false);
    a.wait_durable(t, "A's record");
    assert_eq!(*hits_b.lock().unwrap(), [1], "woken by the other server");
    assert!(hits_a.lock().unwrap().is_empty(), "nobody asked A's writer");
    a.stop();
    b.stop();
}
