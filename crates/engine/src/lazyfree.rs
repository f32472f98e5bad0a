//! Freeing large values off the request path (Redis's lazyfree).
//!
//! Dropping a collection of millions of elements takes tens of
//! milliseconds: done on a shard's thread it would stall every client of
//! that shard. Values with more than [`LAZYFREE_THRESHOLD`] elements that
//! the engine deletes go instead to one process-wide background thread,
//! which drops them. Smaller values are dropped inline: sending costs more
//! than freeing them.
//!
//! Which deletions may go to the background is the operator's choice, as
//! in Redis: [`Lazy`] holds the `lazyfree-lazy-*` and `replica-lazy-flush`
//! directives (a shard keeps a copy, set by its loop from the
//! configuration), and every deletion names its kind ([`Del`]) where it
//! calls [`free`]; UNLINK and FLUSHALL/FLUSHDB ASYNC are always lazy.
//! Redis 7.0 defaults the directives to `no`; Tessera defaults them to
//! `yes` (its promise is low tail latency; Valkey 8 made the same choice).
//! With `no`, a big value is freed inline on the shard's thread, as Redis
//! does (which is what makes Redis's expire cycle slow enough to be a
//! latency event).
//!
//! Bounded: the channel holds at most [`QUEUE_MAX`] values; when it is
//! full the value is freed inline (slower, never lost or leaked).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::OnceLock;

use crate::value::Value;

/// Redis's `LAZYFREE_THRESHOLD`: above this many elements, free in the
/// background.
pub const LAZYFREE_THRESHOLD: usize = 64;
/// Values waiting for the background thread.
const QUEUE_MAX: usize = 1024;

/// Which deletions free big values in the background: Redis's
/// `lazyfree-lazy-eviction`, `-expire`, `-server-del`, `-user-del`,
/// `-user-flush` and `replica-lazy-flush`. [`Default`] is Tessera's
/// default, all `yes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lazy {
    pub eviction: bool,
    pub expire: bool,
    pub server_del: bool,
    pub user_del: bool,
    /// FLUSHALL / FLUSHDB without ASYNC or SYNC are ASYNC.
    pub user_flush: bool,
    /// A replica's full sync frees the old data in the background.
    pub replica_flush: bool,
}

impl Default for Lazy {
    fn default() -> Self {
        Lazy {
            eviction: true,
            expire: true,
            server_del: true,
            user_del: true,
            user_flush: true,
            replica_flush: true,
        }
    }
}

/// Why a key's value is being freed: which directive decides whether a
/// big one goes to the background thread (Redis's `dbGenericDelete`
/// callers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Del {
    /// UNLINK: always in the background.
    Unlink,
    /// DEL (`lazyfree-lazy-user-del`).
    User,
    /// A deletion the server does on its own: an overwrite (SET over a
    /// set), RENAME's target, RESTORE REPLACE, a STORE command's empty
    /// result ... (`lazyfree-lazy-server-del`, Redis's `dbDelete`).
    Server,
    /// A key past its deadline, on access or in the active cycle
    /// (`lazyfree-lazy-expire`).
    Expire,
    /// A key evicted under `maxmemory` (`lazyfree-lazy-eviction`).
    Evict,
}

impl Lazy {
    /// Whether a deletion of kind `d` may free in the background: one
    /// flag read.
    #[inline]
    pub fn allows(self, d: Del) -> bool {
        match d {
            Del::Unlink => true,
            Del::User => self.user_del,
            Del::Server => self.server_del,
            Del::Expire => self.expire,
            Del::Evict => self.eviction,
        }
    }

    /// Whether FLUSHALL / FLUSHDB frees in the background: `mode` is the
    /// command's `Some(true)` ASYNC or `Some(false)` SYNC, `None` without
    /// either (Redis's `getFlushCommandFlags`).
    #[inline]
    pub fn flush_async(self, mode: Option<bool>) -> bool {
        mode.unwrap_or(self.user_flush)
    }
}

/// Values the background thread has freed (INFO `lazyfreed_objects`).
static FREED: AtomicU64 = AtomicU64::new(0);

/// Values sent to the background thread and not freed yet (INFO
/// `lazyfree_pending_objects`).
static PENDING: AtomicU64 = AtomicU64::new(0);

/// Values ever handed to the background (tests read it: unlike freed +
/// pending, one load).
static SENT: AtomicU64 = AtomicU64::new(0);

#[cfg(test)]
thread_local! {
    /// Values this thread handed to the background: tests run in
    /// parallel, and another test's frees must not move this count.
    static SENT_HERE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many values this thread ever sent to the background.
#[cfg(test)]
pub(crate) fn sent() -> u64 {
    SENT_HERE.with(|c| c.get())
}

/// Counts `n` values sent (the process's figure, and in tests the thread's).
#[inline]
fn count_sent(n: u64) {
    SENT.fetch_add(n, Ordering::Relaxed);
    #[cfg(test)]
    SENT_HERE.with(|c| c.set(c.get() + n));
}

/// How many values were freed in the background so far (since the last
/// [`reset_stats`]).
pub fn freed_in_background() -> u64 {
    FREED.load(Ordering::Relaxed)
}

/// How many values wait for the background thread.
pub fn pending() -> u64 {
    PENDING.load(Ordering::Relaxed)
}

/// CONFIG RESETSTAT: `lazyfreed_objects` starts again from 0 (Redis's
/// `lazyfreeResetStats`).
pub fn reset_stats() {
    FREED.store(0, Ordering::Relaxed);
}

/// A value to free and the allocator slot of the thread that let it go:
/// the background thread charges the free to that slot (see `alloc`).
type Job = (Value, usize);

fn sender() -> Option<&'static SyncSender<Job>> {
    static TX: OnceLock<Option<SyncSender<Job>>> = OnceLock::new();
    TX.get_or_init(|| {
        let (tx, rx) = sync_channel::<Job>(QUEUE_MAX);
        std::thread::Builder::new()
            .name("lazyfree".into())
            .spawn(move || {
                for (v, slot) in rx {
                    crate::alloc::set_slot(slot);
                    drop(v);
                    crate::alloc::set_slot(0);
                    FREED.fetch_add(1, Ordering::Relaxed);
                    PENDING.fetch_sub(1, Ordering::Relaxed);
                }
            })
            .ok()
            .map(|_| tx)
    })
    .as_ref()
}

/// Frees `v`: in the background if `lazy` (the caller's directive, see
/// [`Lazy::allows`]) and it is large, inline otherwise.
#[inline]
pub fn free(v: Value, lazy: bool) {
    if !lazy || v.elements() <= LAZYFREE_THRESHOLD {
        return;
    }
    send(v);
}

#[cold]
fn send(v: Value) {
    if let Some(tx) = sender() {
        // Counted before it is sent, so the thread never takes 1 from 0.
        PENDING.fetch_add(1, Ordering::Relaxed);
        match tx.try_send((v, crate::alloc::current_slot())) {
            Ok(()) => count_sent(1),
            Err(TrySendError::Full(v) | TrySendError::Disconnected(v)) => {
                PENDING.fetch_sub(1, Ordering::Relaxed);
                drop(v)
            }
        }
    }
}

/// Drops `what` (whole databases: FLUSHALL / FLUSHDB ASYNC, a replica's
/// old data) on a thread of its own, counting its `objects` (keys) as
/// pending, then freed, as Redis's `lazyfreeFreeDatabase` does. If the
/// thread cannot be spawned `what` is dropped here: slower, never lost.
pub fn free_in_thread<T: Send + 'static>(what: T, objects: u64) {
    PENDING.fetch_add(objects, Ordering::Relaxed);
    let slot = crate::alloc::current_slot();
    let spawned = std::thread::Builder::new()
        .name("lazyfree".into())
        .spawn(move || {
            crate::alloc::set_slot(slot);
            drop(what);
            crate::alloc::set_slot(0);
            FREED.fetch_add(objects, Ordering::Relaxed);
            PENDING.fetch_sub(objects, Ordering::Relaxed);
        });
    if spawned.is_err() {
        // The closure (and `what` with it) was dropped by the failed spawn.
        PENDING.fetch_sub(objects, Ordering::Relaxed);
    } else {
        count_sent(objects);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::types::{EncLimits, Set};
    use crate::value::Str;

    /// Tests that count background frees run one at a time.
    pub(crate) static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn big_set() -> Value {
        let lim = EncLimits::default();
        let mut s = Set::create(b"m0", 1000, &lim);
        for i in 0..1000 {
            s.add(format!("m{i}").as_bytes(), &lim);
        }
        Value::Set(Box::new(s))
    }

    #[test]
    fn unlink_is_always_lazy_the_rest_follow_their_directive() {
        let all_no = Lazy {
            eviction: false,
            expire: false,
            server_del: false,
            user_del: false,
            user_flush: false,
            replica_flush: false,
        };
        let kinds = [Del::Unlink, Del::User, Del::Server, Del::Expire, Del::Evict];
        for d in kinds {
            assert!(Lazy::default().allows(d), "{d:?}");
            assert_eq!(all_no.allows(d), d == Del::Unlink, "{d:?}");
        }
        // Each directive governs its own kind only.
        let only = |l: Lazy| {
            kinds
                .iter()
                .filter(|&&d| d != Del::Unlink && l.allows(d))
                .count()
        };
        for l in [
            Lazy {
                user_del: true,
                ..all_no
            },
            Lazy {
                server_del: true,
                ..all_no
            },
            Lazy {
                expire: true,
                ..all_no
            },
            Lazy {
                eviction: true,
                ..all_no
            },
        ] {
            assert_eq!(only(l), 1, "{l:?}");
        }
        assert!(Lazy {
            user_del: true,
            ..all_no
        }
        .allows(Del::User));
        assert!(Lazy {
            server_del: true,
            ..all_no
        }
        .allows(Del::Server));
        assert!(Lazy {
            expire: true,
            ..all_no
        }
        .allows(Del::Expire));
        assert!(Lazy {
            eviction: true,
            ..all_no
        }
        .allows(Del::Evict));
        // FLUSHALL / FLUSHDB: ASYNC and SYNC win, no option follows
        // lazyfree-lazy-user-flush.
        for l in [Lazy::default(), all_no] {
            assert!(l.flush_async(Some(true)));
            assert!(!l.flush_async(Some(false)));
        }
        assert!(Lazy::default().flush_async(None));
        assert!(!all_no.flush_async(None));
    }

    #[test]
    fn a_large_value_not_allowed_to_be_lazy_is_freed_inline() {
        let _serial = SERIAL.lock();
        let before = sent();
        free(big_set(), false);
        assert_eq!(sent(), before);
    }

    #[test]
    fn large_values_are_freed_in_the_background_small_ones_inline() {
        let _serial = SERIAL.lock();
        let (before, freed) = (sent(), freed_in_background());
        free(Value::Str(Str::from_bytes(b"x")), true);
        free(big_set(), true);
        // Exactly the large one went there.
        assert_eq!(sent(), before + 1);
        // Bounded wait for the background thread (no timing threshold:
        // only a thread that never runs fails this).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while freed_in_background() == freed || pending() != 0 {
            assert!(std::time::Instant::now() < deadline, "never freed");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}
