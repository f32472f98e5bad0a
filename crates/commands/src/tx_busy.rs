//! A lock table beside a busy script: its waiters withdrawn and answered.

use std::collections::VecDeque;

use super::{LockReq, LockTable};

impl<W> LockTable<W> {
    /// Withdraws every waiting request but those kept while busy
    /// ([`LockReq::keep_when_busy`]): called on a shard that a published
    /// script's transaction holds (`script::busy::locked_busy`), whose
    /// waiters would otherwise wait for the script's end. The caller
    /// answers each with a [`BusyWithdrawn`], then grants what the
    /// withdrawals let pass ([`LockTable::grant_waiting`]). A waiting
    /// request holds nothing here, so the table stays as if it had never
    /// come; its transaction releases the shards it holds elsewhere.
    /// `can` says which waiters the caller can answer now.
    pub fn withdraw_for_busy(&mut self, can: impl Fn(&W) -> bool) -> Vec<(LockReq, W)> {
        let stays = |(q, w): &(LockReq, W)| q.keep_when_busy || !can(w);
        if self.waiting.iter().all(stays) {
            return Vec::new();
        }
        let (kept, gone): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(stays);
        self.waiting = kept;
        for (q, _) in &gone {
            self.sums.queued.remove(q);
        }
        gone.into_iter().collect()
    }
}
