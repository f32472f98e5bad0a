//! Freeing large values off the request path (Redis's lazyfree).
//!
//! Dropping a collection of millions of elements takes tens of
//! milliseconds: done on a shard's thread it would stall every client of
//! that shard. Values with more than [`LAZYFREE_THRESHOLD`] elements that
//! the engine deletes (DEL, UNLINK, expiry, overwrite) go instead to one
//! process-wide background thread, which drops them. Smaller values are
//! dropped inline: sending costs more than freeing them.
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

/// Values the background thread has freed (INFO `lazyfreed_objects`).
static FREED: AtomicU64 = AtomicU64::new(0);

/// How many values were freed in the background so far.
pub fn freed_in_background() -> u64 {
    FREED.load(Ordering::Relaxed)
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
                }
            })
            .ok()
            .map(|_| tx)
    })
    .as_ref()
}

/// Frees `v`: in the background if it is large, inline otherwise.
pub fn free(v: Value) {
    if v.elements() <= LAZYFREE_THRESHOLD {
        return;
    }
    send(v);
}

#[cold]
fn send(v: Value) {
    if let Some(tx) = sender() {
        match tx.try_send((v, crate::alloc::current_slot())) {
            Ok(()) => {}
            Err(TrySendError::Full(v) | TrySendError::Disconnected(v)) => drop(v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{EncLimits, Set};
    use crate::value::Str;

    #[test]
    fn large_values_are_freed_in_the_background_small_ones_inline() {
        let lim = EncLimits::default();
        let before = freed_in_background();
        free(Value::Str(Str::from_bytes(b"x")));
        let mut s = Set::create(b"m0", 1000, &lim);
        for i in 0..1000 {
            s.add(format!("m{i}").as_bytes(), &lim);
        }
        free(Value::Set(Box::new(s)));
        // Bounded wait for the background thread (no timing threshold:
        // only a thread that never runs fails this).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while freed_in_background() == before {
            assert!(std::time::Instant::now() < deadline, "never freed");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Exactly the large one went there (tests in this binary free no
        // other large values).
        assert_eq!(freed_in_background(), before + 1);
    }
}
