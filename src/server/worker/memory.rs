//! Memory an event loop gives back, from its cron: the buffers of its
//! idle connections (Redis's `clientsCronResizeQueryBuffer` and
//! `clientsCronResizeOutputBuffer`), and freed memory the allocator holds
//! (handed to the reclaiming thread, see `commands::memory::reclaim`).
//!
//! Query buffer (`Conn::rbuf`), Redis 7.0's policy: once more than
//! [`QBUF_MIN_WASTE`] of it is unused, a connection idle for more than
//! [`IDLE_S`] seconds keeps only its unconsumed bytes (none: the buffer is
//! freed; the next read allocates [`READ_CHUNK`](super::super::conn::READ_CHUNK)
//! again); a busy one above [`QBUF_RESIZE_THRESHOLD`] bytes whose recent
//! peak used less than half of it shrinks to that peak (never below the
//! unconsumed bytes or the request being received). The peak restarts at
//! each tick. `client-query-buffer-limit` is checked where bytes arrive
//! (the read loop) and is untouched by this.
//!
//! Argument vector (`Conn::args`): Redis frees `argv` after every command;
//! here the ranges are reused between requests, and the cron frees them
//! when the connection idles or when they outgrew [`ARGV_KEEP`] entries.
//!
//! Reply buffer (`Conn::out`), Redis 7.0's policy: when its recent peak
//! (`Conn::out_peak`, reset every [`REPLY_PEAK_RESET_MS`]) is below half
//! its capacity, it shrinks to the peak (at least [`REPLY_MIN_BYTES`]).
//! Redis's buffer also grows back up to 16 KB from the cron; `out` grows as
//! replies need, so only the shrinking half applies. The queue of replies
//! completed out of order is freed while empty and idle.
//!
//! All of it runs once per connection per tick (`hz`), never on the
//! request path; each step is O(1) unless it moves the unconsumed bytes.

use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::OnceLock;

use commands::memory::reclaim;

use super::super::conn::Conn;
use crate::log;

/// Redis's `PROTO_RESIZE_THRESHOLD`.
const QBUF_RESIZE_THRESHOLD: usize = 32 << 10;
/// Unused bytes below which a query buffer is left alone (Redis: 4 KB).
const QBUF_MIN_WASTE: usize = 4 << 10;
/// Seconds without a request after which a connection is idle (Redis's
/// `idletime > 2`).
const IDLE_S: u64 = 2;
/// Argument ranges a busy connection keeps (16 bytes each).
const ARGV_KEEP: usize = 256;
/// Redis's `PROTO_REPLY_MIN_BYTES`.
const REPLY_MIN_BYTES: usize = 1024;
/// Redis's `reply_buffer_peak_reset_time` default.
const REPLY_PEAK_RESET_MS: u64 = 5000;

/// Shrinks what connection `c` holds beyond its needs (see the module
/// doc). Call between requests only (the cron).
pub(super) fn resize_buffers(c: &mut Conn, now_ms: u64) {
    let idle = (now_ms / 1000).saturating_sub(c.client.last_interaction_ms / 1000) > IDLE_S;
    // Query buffer.
    let size = c.rbuf.len();
    let len = c.qbuf_len();
    if size - len > QBUF_MIN_WASTE {
        if idle {
            c.resize_rbuf(len);
        } else if size > QBUF_RESIZE_THRESHOLD && size / 2 > c.qbuf_peak {
            c.resize_rbuf(len.max(c.qbuf_peak).max(c.need));
        }
    }
    c.qbuf_peak = len.max(c.need);
    // Argument ranges.
    if c.args.capacity() > ARGV_KEEP || (idle && c.args.capacity() > 0) {
        c.args = Vec::new();
    }
    // Reply buffer.
    let cap = c.out.capacity();
    let target = if cap / 2 >= REPLY_MIN_BYTES && c.out_peak < cap / 2 {
        Some(REPLY_MIN_BYTES.max(c.out_peak + 1))
    } else {
        None
    };
    if now_ms.saturating_sub(c.out_peak_since_ms) >= REPLY_PEAK_RESET_MS {
        c.out_peak = c.out.len();
        c.out_peak_since_ms = now_ms;
    }
    if let Some(t) = target {
        c.resize_out(t);
    }
    if idle {
        c.free_idle_queues();
    }
}

/// The reclaiming thread's doorbell (`None`: it could not be started); a
/// message is (shards, milliseconds the trim waited for quiet).
static RECLAIMER: OnceLock<Option<SyncSender<(usize, u64)>>> = OnceLock::new();

/// Starts a trim of the allocator's free memory when one is due (see
/// `commands::memory::reclaim`), on a thread of its own so this loop does
/// not wait for it. `commands` is the running total of commands executed
/// by all shards (`ServerShared::sampled_commands`): trims wait for a
/// quiet server; the cron runs every `tick_ms`. Cheap when none is due.
pub(super) fn reclaim_cron(now_ms: u64, nshards: usize, commands: u64, tick_ms: u64) {
    let Some(waited_ms) = reclaim::due(now_ms, nshards, commands, tick_ms) else {
        return;
    };
    let bell = RECLAIMER.get_or_init(|| {
        let (tx, rx) = sync_channel::<(usize, u64)>(1);
        std::thread::Builder::new()
            .name("reclaim".into())
            .spawn(move || {
                let nice = raise_priority();
                log::verbose(format_args!("Memory-return thread at nice {nice}"));
                while let Ok((n, waited_ms)) = rx.recv() {
                    report(reclaim::trim(n), waited_ms);
                }
            })
            .ok()
            .map(|_| tx)
    });
    // `due` grants one trim at a time, so the one-slot channel has room;
    // without the thread, trim here rather than never.
    if bell
        .as_ref()
        .is_none_or(|tx| tx.try_send((nshards, waited_ms)).is_err())
    {
        report(reclaim::trim(nshards), waited_ms);
    }
}

/// Nice value asked for the reclaiming thread.
const RECLAIM_NICE: i32 = -10;

/// Gives the calling thread (the reclaiming one) nice [`RECLAIM_NICE`] if
/// the process may (root, `CAP_SYS_NICE`, or `RLIMIT_NICE`), and returns
/// the nice it runs at. A trim holds each arena's lock while it walks it:
/// the sooner it gets a core back when the machine is loaded, the shorter
/// a shard thread waiting on that lock waits. It runs for milliseconds at
/// most once a second, so it takes little from the shards.
fn raise_priority() -> i32 {
    // SAFETY: gettid and setpriority have no memory preconditions; they
    // act on this thread only (Linux: PRIO_PROCESS with a thread id).
    unsafe {
        let tid = libc::gettid() as libc::id_t;
        if libc::setpriority(libc::PRIO_PROCESS, tid, RECLAIM_NICE) == 0 {
            RECLAIM_NICE
        } else {
            libc::getpriority(libc::PRIO_PROCESS, tid)
        }
    }
}

fn report(t: reclaim::Trimmed, waited_ms: u64) {
    log::verbose(format_args!(
        "Returned {} KB of free memory to the system in {} us (resident heap {} KB -> {} KB; \
         waited {} ms for a quiet moment)",
        t.returned() >> 10,
        t.took_us,
        t.before >> 10,
        t.after >> 10,
        waited_ms
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::conn::Stream;
    use commands::ClientState;

    const NOW_MS: u64 = 1_000_000_000;

    fn conn() -> Conn {
        let (a, _b) = mio::net::UnixStream::pair().expect("socketpair");
        let mut c = Conn::new(Stream::Unix(a), 0, ClientState::default());
        c.client.last_interaction_ms = NOW_MS;
        c
    }

    /// A read buffer of `size` bytes holding `pending` unconsumed bytes
    /// after `consumed` ones, as the read loop leaves it.
    fn filled(c: &mut Conn, size: usize, consumed: usize, pending: &[u8]) {
        c.rbuf = vec![0; size];
        c.rbuf[consumed..consumed + pending.len()].copy_from_slice(pending);
        c.rpos = 0;
        c.set_rbuf_end(consumed + pending.len());
        c.rpos = consumed;
    }

    #[test]
    fn a_busy_connection_shrinks_to_its_recent_peak_a_tick_later() {
        let mut c = conn();
        filled(&mut c, 1 << 20, 1 << 20, b"");
        // The tick right after the big request: its peak says keep.
        resize_buffers(&mut c, NOW_MS);
        assert_eq!(c.rbuf.len(), 1 << 20);
        // Nothing that big since: freed.
        resize_buffers(&mut c, NOW_MS + 100);
        assert_eq!(c.rbuf.capacity(), 0);
        assert_eq!(c.io().qbuf + c.io().qbuf_free, 0);
    }

    #[test]
    fn shrinking_keeps_unconsumed_bytes_and_the_request_being_received() {
        let mut c = conn();
        filled(&mut c, 1 << 20, 5000, b"*3\r\n$3\r\nSET\r\n");
        c.need = 300_000;
        c.qbuf_peak = 0;
        resize_buffers(&mut c, NOW_MS);
        assert_eq!(c.rbuf.len(), 300_000);
        assert_eq!(&c.rbuf[..c.qbuf_len()], b"*3\r\n$3\r\nSET\r\n");
        assert_eq!((c.rpos, c.rbuf_end()), (0, 13));
        // Idle: only the unconsumed bytes stay.
        resize_buffers(&mut c, NOW_MS + 3000);
        assert_eq!(c.rbuf.len(), 13);
        assert_eq!(&c.rbuf[..], b"*3\r\n$3\r\nSET\r\n");
    }

    #[test]
    fn small_buffers_stay_until_idle_then_go() {
        let mut c = conn();
        filled(&mut c, 16 << 10, 100, b"");
        c.args = vec![0..1; 10];
        resize_buffers(&mut c, NOW_MS + 2000);
        assert_eq!(c.rbuf.len(), 16 << 10);
        assert!(c.args.capacity() > 0);
        resize_buffers(&mut c, NOW_MS + 3000);
        assert_eq!(c.rbuf.capacity(), 0);
        assert_eq!(c.args.capacity(), 0);
        // A huge argument vector goes even while busy.
        c.args = vec![0..1; 100_000];
        c.client.last_interaction_ms = NOW_MS + 3000;
        resize_buffers(&mut c, NOW_MS + 3000);
        assert_eq!(c.args.capacity(), 0);
    }

    #[test]
    fn the_reclaiming_thread_runs_at_the_nice_it_reports() {
        std::thread::spawn(|| {
            let nice = raise_priority();
            // SAFETY: as in raise_priority.
            let (now, root) = unsafe {
                let tid = libc::gettid() as libc::id_t;
                (
                    libc::getpriority(libc::PRIO_PROCESS, tid),
                    libc::geteuid() == 0,
                )
            };
            assert_eq!(nice, now);
            if root {
                assert_eq!(nice, RECLAIM_NICE);
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_reply_buffer_shrinks_to_its_peak_as_redis_does() {
        let mut c = conn();
        c.out.raw(&[b'x'; 64 << 10]);
        c.out.clear();
        c.out_peak = 100;
        c.out_peak_since_ms = NOW_MS;
        resize_buffers(&mut c, NOW_MS);
        let io = c.io();
        assert!(io.rbs >= 1024 && io.rbs < 2048, "{}", io.rbs);
        assert_eq!(io.rbp, 100);
        // The peak restarts after 5 s: from what is held then.
        resize_buffers(&mut c, NOW_MS + REPLY_PEAK_RESET_MS);
        assert_eq!(c.io().rbp, 0);
        // Unsent bytes are kept whatever the peak says.
        c.out.raw(&[b'y'; 8000]);
        c.out_peak = 0;
        resize_buffers(&mut c, NOW_MS + REPLY_PEAK_RESET_MS);
        assert_eq!(c.out.as_bytes(), &[b'y'; 8000][..]);
    }
}
