//! The shard side of a running save: [`tick`], one step of a shard's part
//! per loop iteration, and the [`Gate`] that keeps a fragment ending
//! inside a big value followed in the file by the same shard's next one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Condvar, Mutex};

use engine::Shard;

use super::{Persist, SaveLink, SaveMsg, STEP_BYTES, STEP_BYTES_BUSY};

/// The fragments of every shard share one channel into the file. A
/// fragment that ends inside a big value (open, see
/// `Shard::snapshot_take`) must be followed in the file by the same
/// shard's next one: the shard that sends an open fragment holds the gate
/// until it sends a closed one, and meanwhile the others keep their
/// fragments (throttled, as when the channel is full).
#[derive(Default)]
pub(super) struct Gate {
    /// The shard holding the gate.
    owner: Mutex<Option<usize>>,
    freed: Condvar,
}

enum GateErr {
    /// Another shard holds the gate, or the channel is full: try later.
    Wait(Vec<u8>),
    /// The writer is gone.
    Gone,
}

impl Gate {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<usize>> {
        self.owner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends a fragment of shard `me` if the gate lets it, without waiting.
    fn try_send(
        &self,
        tx: &SyncSender<SaveMsg>,
        me: usize,
        b: Vec<u8>,
        open: bool,
    ) -> Result<(), GateErr> {
        let mut owner = self.lock();
        if owner.is_some_and(|o| o != me) {
            return Err(GateErr::Wait(b));
        }
        match tx.try_send(SaveMsg::Fragment(b)) {
            Ok(()) => {
                *owner = open.then_some(me);
                Ok(())
            }
            Err(TrySendError::Full(SaveMsg::Fragment(b))) => Err(GateErr::Wait(b)),
            Err(_) => {
                *owner = None;
                self.freed.notify_all();
                Err(GateErr::Gone)
            }
        }
    }

    /// Sends a fragment of shard `me`, waiting for the gate and for room;
    /// false if the writer is gone or the save was aborted.
    pub(super) fn send(
        &self,
        tx: &SyncSender<SaveMsg>,
        me: usize,
        b: Vec<u8>,
        open: bool,
        abort: &AtomicBool,
    ) -> bool {
        let mut owner = self.lock();
        while owner.is_some_and(|o| o != me) {
            if abort.load(Ordering::Acquire) {
                return false;
            }
            owner = self
                .freed
                .wait_timeout(owner, std::time::Duration::from_millis(50))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let ok = tx.send(SaveMsg::Fragment(b)).is_ok();
        *owner = (ok && open).then_some(me);
        if owner.is_none() {
            self.freed.notify_all();
        }
        ok
    }
}

/// What [`tick`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Tick {
    /// No save runs on this shard.
    Idle,
    /// Work remains: poll without waiting.
    Busy,
    /// The writer is behind: wait a little before the next step.
    Throttled,
}

/// One step of this shard's part of a running background save; the
/// worker calls it once per loop iteration, and a script's hook about
/// every millisecond of Lua while the script holds the shard's thread
/// (the shard is between commands there too: no call runs). Also hands
/// over what the commands since the last step copied before changing.
/// Inlined: without a save (nearly always) one look, where a call cost
/// more, once per turn of every loop.
#[inline]
pub fn tick(p: &Persist, shard: &mut Shard, busy: bool) -> Tick {
    if !shard.snapshot_running() {
        return Tick::Idle;
    }
    tick_running(p, shard, busy)
}

fn tick_running(p: &Persist, shard: &mut Shard, busy: bool) -> Tick {
    let Some(slot) = p.links.get(shard.id) else {
        return Tick::Idle;
    };
    let mut link = slot.lock().unwrap_or_else(|e| e.into_inner());
    let link: &mut Option<SaveLink> = &mut link;
    if link
        .as_ref()
        .is_some_and(|l| l.gen != p.save_gen.load(Ordering::Acquire))
    {
        // Left from an earlier save that ended without this shard's
        // step seeing it.
        *link = None;
    }
    if link.is_none() {
        *link = p.link();
    }
    let Some(l) = link.as_mut() else {
        // The save ended (failed) before this shard saw it.
        shard.snapshot_abort();
        return Tick::Idle;
    };
    if l.abort.load(Ordering::Acquire) {
        shard.snapshot_abort();
        *link = None;
        return Tick::Idle;
    }
    if let Some((b, open)) = l.pending.take() {
        match l.gate.try_send(&l.tx, shard.id, b, open) {
            Ok(()) => {}
            Err(GateErr::Wait(b)) => {
                l.pending = Some((b, open));
                return Tick::Throttled;
            }
            Err(GateErr::Gone) => {
                shard.snapshot_abort();
                *link = None;
                return Tick::Idle;
            }
        }
    }
    let done = shard.snapshot_step(if busy { STEP_BYTES_BUSY } else { STEP_BYTES });
    let (out, open) = shard.snapshot_take();
    if !out.is_empty() {
        match l.gate.try_send(&l.tx, shard.id, out, open) {
            Ok(()) => {}
            Err(GateErr::Wait(b)) => {
                l.pending = Some((b, open));
                return Tick::Throttled;
            }
            Err(GateErr::Gone) => {
                shard.snapshot_abort();
                *link = None;
                return Tick::Idle;
            }
        }
    }
    if !done {
        return Tick::Busy;
    }
    let keys = shard.snapshot_end();
    // The last message: waiting for room here is brief and bounded.
    let _ = l.tx.send(SaveMsg::Done { keys });
    *link = None;
    Tick::Idle
}
