//! A script under a transaction's locks (one on every shard, one inside
//! MULTI/EXEC: `commands::script::busy::under_locks`): the job lends its
//! loop as the request path does ([`JobDesk`]), and the loops of the
//! shards the locks hold, free meanwhile, answer `-BUSY` to what waits
//! there behind them ([`Worker::refuse_behind_busy`]).

use super::super::Worker;
use super::inbox::{lend_inbox, serve_caller_inbox, Inbox};
use super::Desk;

/// What a transaction's job sees of its loop's connections
/// (`ShardEnv::clients`): the connection table, with the rest of the loop
/// beside it, lent to a script the job runs under the transaction's locks
/// (`commands::script::busy::under_locks`: a script on every shard, one
/// inside MULTI/EXEC) exactly as the request path lends it
/// ([`Worker::with_desk`], [`Core::lending_inbox`]): past the threshold
/// its hook serves this loop's other connections (`-BUSY`, SCRIPT KILL,
/// SHUTDOWN NOSAVE) and its mailbox. Cost per job: a few words copied.
pub(in crate::server::worker) struct JobDesk<'a> {
    desk: Desk<'a>,
    inbox: Inbox<'a>,
    /// A script was lent the loop: the worker settles its desk after the
    /// job ([`Worker::settle_desk`], `after_desk`).
    lent: bool,
}

impl<'a> JobDesk<'a> {
    pub(in crate::server::worker) fn new(desk: Desk<'a>, inbox: Inbox<'a>) -> Self {
        JobDesk {
            desk,
            inbox,
            lent: false,
        }
    }

    pub(in crate::server::worker) fn lent(&self) -> bool {
        self.lent
    }
}

impl commands::coord::ClientRegistry for JobDesk<'_> {
    fn for_each(&self, f: &mut dyn FnMut(&commands::ClientState, &commands::coord::ClientIo)) {
        self.desk.conns.for_each(f)
    }
    fn kill(&mut self, id: u64) -> bool {
        self.desk.conns.kill(id)
    }
    fn unblock(&mut self, id: u64, error: bool) -> Option<usize> {
        self.desk.conns.unblock(id, error)
    }
    fn recent_max_buffers(&self) -> (usize, usize) {
        self.desk.conns.recent_max_buffers()
    }
    fn lend_desk(&mut self, f: &mut dyn FnMut()) {
        self.lent = true;
        self.desk.first = true;
        let JobDesk { desk, inbox, .. } = self;
        let id = desk.id;
        let run = || lend_inbox(inbox, || commands::script::busy::lend_desk(desk, id, f));
        match commands::script::busy::desk_home() {
            // A job lent by a call from another loop's turn, whose desk is
            // lent (`cohost`: an EXEC's script on a co-hosted shard): that
            // loop cannot run until the script ends. It is lent as the
            // caller's loop of a script by a call is (`in_place::by_call`):
            // stalled by the script if it is published (its shard's
            // commands `-BUSY`, a WATCH of its keys parked, registered by
            // its coordinator right after the call, `home::advance`), its
            // mailbox (lent by the caller's step, [`lend_caller_inbox`])
            // and connections served at each pass.
            Some(caller) if caller != id => {
                commands::script::busy::lend_caller(caller, &mut || serve_caller_inbox(caller), run)
            }
            _ => run(),
        }
    }
}

impl Worker {
    /// While a published script's transaction holds this shard under locks
    /// (`commands::script::busy::Registry::locked_busy`), once per turn: what waits
    /// here behind them is tried again as at a release, so that the
    /// remote batches get `-BUSY` (`run_batch`) and this loop's
    /// connections' requests too (dispatch refuses them), as Redis answers
    /// every command while busy, rather than wait for the script's end.
    /// Jobs of other transactions keep waiting for their locks.
    ///
    /// Other transactions' lock requests waiting here are withdrawn
    /// (`LockTable::withdraw_for_busy`) and answered `-BUSY`
    /// (`tx::BusyWithdrawn`: their coordinators release what they hold on
    /// other shards and reply), except an allow-busy command's (WATCH)
    /// and one whose EXEC already ran a command; what the withdrawals let
    /// pass is granted. A request waiting on the script's own shard is
    /// not (that loop is inside the script): it waits for the end.
    #[cold]
    pub(in crate::server::worker) fn refuse_behind_busy(&mut self) {
        if !self.core.deferred.is_empty() || !self.core.lock_blocked.is_empty() {
            self.retry_deferred();
        }
        if self.core.locks.waiting_len() > 0 {
            self.withdraw_for_busy();
        }
    }

    #[cold]
    fn withdraw_for_busy(&mut self) {
        let busy = &self.core.server.ops.busy;
        let Some(e) = busy.refuse_if_busy(Some(&[self.core.id])) else {
            return;
        };
        let gone = self.core.locks.withdraw_for_busy(|_| true);
        if gone.is_empty() {
            return;
        }
        let line = String::from_utf8_lossy(&e.line()).into_owned();
        for (req, w) in gone {
            // It holds nothing here: no records to collect (as `refuse`).
            self.core
                .aof_tx
                .retain(|(c, tx, parts)| !(*c == w.conn && *tx == req.tx && parts.is_empty()));
            let out: commands::coord::JobOut =
                Box::new(commands::tx::BusyWithdrawn { line: line.clone() });
            self.job_out_of(w.conn, w.idx, w.gather, out);
        }
        for w in self.core.locks.grant_waiting() {
            self.run_work(w);
        }
    }
}
