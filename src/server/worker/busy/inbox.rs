//! The shard side of a loop whose script runs, lent to its busy passes
//! ([`Inbox`], [`lend_inbox`]; the caller's loop of a script by a call:
//! [`lend_caller_inbox`]): each pass takes what other threads sent the
//! loop ([`serve_inbox`]), answers `-BUSY` what it may (`refuse`) and
//! keeps the rest, in arrival order, for the loop after the script.

use std::cell::Cell;
use std::collections::VecDeque;
use std::ptr::NonNull;

use commands::ThreadStats;

use super::super::super::mailbox::{ConnRef, Mailbox, Msg};
use super::super::{Core, Deferred};
use super::refuse::{
    lock_refusable, refusable, refuse_batch, refuse_deferred, release_now, released_now,
    withdraw_waiting, withdrawn,
};
use super::watch;
use super::Tally;

/// Messages one pass takes from the mailbox at most (the rest wait for
/// the next pass, about a millisecond of Lua later).
const INBOX_MAX: usize = 4096;

/// The shard side of a loop whose script runs: its mailbox, the messages
/// the desk keeps for after the script (`Core::kept`, handled by the loop
/// before anything newer), and the work its shard holds back
/// (`Core::deferred`). Lent by [`Inbox::lend`] where a script may run with
/// those fields free (the shard itself is the script's).
pub(in crate::server::worker) struct Inbox<'a> {
    pub id: usize,
    pub mailbox: &'a mut Mailbox,
    pub kept: &'a mut VecDeque<Msg>,
    pub deferred: &'a mut VecDeque<Deferred>,
    /// This loop's connections whose request waits for a lock of its
    /// shard (`Core::lock_blocked`): answered by the desk once the shard
    /// is busy ([`take_lock_blocked`]).
    pub lock_blocked: &'a mut Vec<(usize, u32)>,
    /// The requests it refused (`Core::refused`).
    pub tally: &'a mut Tally,
    /// The shard's lock table: other transactions' requests waiting there
    /// are withdrawn once the script is busy ([`withdraw_waiting`]).
    pub locks: &'a mut commands::tx::LockTable<super::super::Waiter>,
    /// The open transactions' records (`Core::aof_tx`): a withdrawn
    /// request's empty entry goes with it.
    pub aof_tx: &'a mut Vec<(ConnRef, commands::tx::TxId, super::super::TxParts)>,
    /// The server's long scripts (whether they hold this shard).
    pub busy: &'a commands::script::busy::Registry,
}

/// The [`Inbox`] of a `Core` (a macro, not a method: it borrows only the
/// fields an inbox needs, so the script's shard, statistics and output
/// stay free for the code the inbox is lent to).
macro_rules! inbox_of {
    ($core:expr) => {
        $crate::server::worker::busy::Inbox {
            id: $core.id,
            mailbox: &mut $core.mailbox,
            kept: &mut $core.kept,
            deferred: &mut $core.deferred,
            lock_blocked: &mut $core.lock_blocked,
            tally: &mut $core.refused,
            locks: &mut $core.locks,
            aof_tx: &mut $core.aof_tx,
            busy: &$core.server.ops.busy,
        }
    };
}
pub(in crate::server::worker) use inbox_of;

impl Inbox<'_> {
    /// Lends this inbox to the busy passes of the script `f` may run
    /// ([`lend_inbox`]), then adds what they refused to `stats`, the
    /// loop's counters (lent to `f` meanwhile).
    pub(in crate::server::worker) fn lend<R>(
        mut self,
        stats: &mut ThreadStats,
        f: impl FnOnce(&mut ThreadStats) -> R,
    ) -> R {
        let r = lend_inbox(&mut self, || f(stats));
        self.tally.settle(stats);
        r
    }

    /// One busy pass over this inbox, now (see [`serve_inbox`]), where it
    /// is not lent (its desk's WATCHes send nothing through it, so none
    /// of their outputs comes here).
    pub(in crate::server::worker) fn serve(&mut self) {
        take_messages(self, false);
        self.mailbox.flush();
    }
}

thread_local! {
    /// The inbox lent by [`lend_inbox`], for [`serve_inbox`].
    pub(super) static INBOX: Cell<Option<NonNull<Inbox<'static>>>> = const { Cell::new(None) };
}

/// Lends `inbox` to the busy passes of the script `f` may run (see the
/// module documentation). The caller runs scripts only: any other command
/// never calls the hook.
pub(super) fn lend_inbox<R>(inbox: &mut Inbox<'_>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<NonNull<Inbox<'static>>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            INBOX.with(|i| i.set(self.0));
        }
    }
    // Only the lifetime changes: the pointer is dereferenced by
    // `serve_inbox` alone, on this thread, while `f` runs (`Restore` puts
    // the previous value back before this returns or unwinds).
    // What the loop sent before the script (a lone hop's completion sent
    // lazily earlier in this very drain, which its connection's next
    // replies queue behind) goes now, not at the end of the iteration
    // after the script: cheap when nothing was sent.
    inbox.mailbox.flush();
    let ptr = NonNull::from(inbox).cast::<Inbox<'static>>();
    let _restore = Restore(INBOX.with(|i| i.replace(Some(ptr))));
    f()
}

thread_local! {
    /// The inbox lent by [`lend_caller_inbox`], for [`serve_caller_inbox`].
    static CALLER_INBOX: Cell<Option<NonNull<Inbox<'static>>>> = const { Cell::new(None) };
}

/// Lends `inbox`, the mailbox side of the loop whose turn runs `f` (a
/// coordinator's step delivering a job that may run a script to another
/// co-hosted worker by a call, `home::send_plan_lent`), to the busy
/// passes of that script: the loop cannot run until the call returns, so
/// what other threads sent it is answered there as the script's own
/// loop's inbox is ([`Inbox::serve`]), where it waited for the script's
/// end before. The job's worker lends its own inbox as usual
/// ([`JobDesk`]); this one is served with the caller's loop
/// (`commands::script::busy::lend_caller`).
pub(in crate::server::worker) fn lend_caller_inbox<R>(
    inbox: &mut Inbox<'_>,
    f: impl FnOnce() -> R,
) -> R {
    struct Restore(Option<NonNull<Inbox<'static>>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            CALLER_INBOX.with(|i| i.set(self.0));
        }
    }
    // Only the lifetime changes: the pointer is dereferenced by
    // `serve_caller_inbox` alone, on this thread, while `f` runs
    // (`Restore` puts the previous value back before this returns or
    // unwinds).
    let ptr = NonNull::from(inbox).cast::<Inbox<'static>>();
    let _restore = Restore(CALLER_INBOX.with(|i| i.replace(Some(ptr))));
    f()
}

/// One busy pass over the inbox of loop `id` lent by
/// [`lend_caller_inbox`], if that is the one lent.
pub(super) fn serve_caller_inbox(id: usize) {
    // Taken out while it serves: a nested call finds nothing.
    let Some(mut ptr) = CALLER_INBOX.with(|i| i.take()) else {
        return;
    };
    // SAFETY: set by `lend_caller_inbox`, whose borrow is alive (the hook
    // runs inside its `f`); the only reference made from it meanwhile, as
    // the slot is empty.
    let inbox = unsafe { ptr.as_mut() };
    if inbox.id == id {
        inbox.serve();
    }
    CALLER_INBOX.with(|i| i.set(Some(ptr)));
}

impl Core {
    /// Runs `f` (a script command, on this loop's shard and statistics)
    /// with this loop's inbox lent to its busy passes ([`Inbox::lend`]).
    pub(in crate::server::worker) fn lending_inbox<R>(
        &mut self,
        f: impl FnOnce(&mut engine::Shard, &mut ThreadStats) -> R,
    ) -> R {
        let r = inbox_of!(self).lend(&mut self.stats, |stats| f(&mut self.shard, stats));
        // WATCHes parked while it ran, if it stopped this loop without
        // holding the shard (`commands::script::busy::Registry::watch_stopped`).
        commands::script::busy::register_parked(&mut self.shard);
        r
    }
}

/// One busy pass over the lent inbox of loop `id`, if any: remote
/// batches for the busy shard are answered `-BUSY` (unless they must wait
/// behind work of their connection held here, or hold an allow-busy
/// command); every other message is kept, in arrival order. Then the
/// mailbox is flushed: the replies, and whatever the loop sent before the
/// script began (a direct hop's completion sent lazily, a job), reach
/// their threads now rather than after the script.
pub(super) fn serve_inbox(id: usize) {
    // Taken out while it serves: a nested call finds nothing.
    let Some(mut ptr) = INBOX.with(|i| i.take()) else {
        return;
    };
    // SAFETY: set by `lend_inbox`, whose borrow is alive (the hook runs
    // inside its `f`); the only reference made from it meanwhile, as the
    // slot is empty.
    let inbox = unsafe { ptr.as_mut() };
    // A nested loop's lend (another worker of a hub) is not this desk's.
    if inbox.id == id {
        // The outputs of its desk's WATCHes go to that desk, which
        // looks at them right after this (`watch`).
        take_messages(inbox, true);
        inbox.mailbox.flush();
    }
    INBOX.with(|i| i.set(Some(ptr)));
}

/// The lent inbox's connections waiting for a lock of loop `id`'s shard
/// (taken: the desk answers them, [`Desk::serve_held`]), once a busy
/// script holds that shard, so that dispatch refuses their requests; none
/// otherwise, or when loop `id` lent no inbox.
pub(super) fn take_lock_blocked(id: usize) -> Vec<(usize, u32)> {
    // Taken out while it is looked at, as in `serve_inbox`.
    let Some(mut ptr) = INBOX.with(|i| i.take()) else {
        return Vec::new();
    };
    // SAFETY: as in `serve_inbox`.
    let inbox = unsafe { ptr.as_mut() };
    let taken = if inbox.id == id
        && !inbox.lock_blocked.is_empty()
        && inbox.busy.refuse_if_busy(Some(&[id])).is_some()
    {
        std::mem::take(inbox.lock_blocked)
    } else {
        Vec::new()
    };
    INBOX.with(|i| i.set(Some(ptr)));
    taken
}

/// `watches`: the outputs of the WATCHes the desk of this lent inbox
/// started (`watch::started`) are kept for it.
fn take_messages(ib: &mut Inbox<'_>, watches: bool) {
    refuse_deferred(ib);
    withdraw_waiting(ib);
    ib.mailbox.collect();
    for _ in 0..INBOX_MAX {
        let Some(m) = ib.mailbox.recv() else { return };
        match m {
            Msg::Exec { conn, batch } if refusable(ib, conn, &batch) => {
                match ib.busy.refuse_if_busy(Some(&[ib.id])) {
                    Some(e) => refuse_batch(ib, conn, batch, &e.line()),
                    None => ib.kept.push_back(Msg::Exec { conn, batch }),
                }
            }
            Msg::Job {
                conn,
                idx,
                work,
                gather,
            } if lock_refusable(ib, conn, work.lock.as_ref()) => {
                match ib.busy.refuse_if_busy(Some(&[ib.id])) {
                    Some(e) => withdrawn(ib, conn, idx, gather, &e),
                    None => ib.kept.push_back(Msg::Job {
                        conn,
                        idx,
                        work,
                        gather,
                    }),
                }
            }
            Msg::Job {
                conn,
                idx,
                work,
                gather,
            } if release_now(ib, conn, &work) => released_now(ib, conn, idx, gather, work),
            Msg::JobDone { conn, idx, out, .. } if watches && watch::started(conn) => {
                watch::arrived(conn, idx, out)
            }
            m => ib.kept.push_back(m),
        }
    }
}
