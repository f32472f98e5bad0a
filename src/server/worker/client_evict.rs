//! Client eviction (`maxmemory-clients`, Redis 7.0's `evictClients`): while
//! the memory of all normal and pub/sub clients together (CLIENT LIST
//! `tot-mem` summed over every thread) is at or above the limit, the
//! clients using the most are disconnected, except those with CLIENT
//! NO-EVICT on (they still count) and the link from a master.
//!
//! Each thread publishes its own clients' total and its biggest evictable
//! client (`ClientMem`, relaxed per-thread atomics); when the sum is over,
//! the thread holding the biggest evictable client of all disconnects it,
//! publishes again, and goes on while it still holds the biggest — Redis's
//! order, biggest first, across threads, without messages. Run after each
//! loop iteration's reads (a client whose query buffer grew is judged
//! before its next read) and from the cron (a quiet thread still gives its
//! clients). Cost: nothing while the limit is unset; set, one pass over
//! this thread's connections per iteration, and O(threads) loads.

use std::sync::atomic::Ordering;

use super::Worker;
use crate::log;

impl Worker {
    /// Publishes this thread's clients' memory and, while the sum is at or
    /// over `maxmemory-clients` and this thread holds the biggest
    /// evictable client, disconnects it (see the module documentation).
    #[inline]
    pub(super) fn evict_clients(&mut self) {
        let limit = self.core.cfg.client_evict_limit;
        if limit != 0 {
            self.evict_clients_over(limit);
        }
    }

    fn evict_clients_over(&mut self, limit: u64) {
        let mut mine = 0u64;
        let mut evictable: Vec<(u64, usize)> = Vec::new();
        for (slot, c) in self.conns.slots.iter().enumerate() {
            let Some(c) = c.as_ref() else { continue };
            if c.client.master || c.closing {
                continue;
            }
            let m = c.mem_total() as u64;
            mine += m;
            if !c.client.no_evict {
                evictable.push((m, slot));
            }
        }
        evictable.sort_unstable_by_key(|&(m, _)| std::cmp::Reverse(m));
        let now_ms = self.core.shard.now_ms;
        let mut next = evictable.into_iter();
        let mut candidate = next.next();
        loop {
            let biggest = candidate.map_or(0, |(m, _)| m);
            let (total, first) = self
                .core
                .server
                .client_mem
                .publish(self.core.id, mine, biggest);
            if total < limit {
                return;
            }
            // Over, but the biggest evictable client is another thread's
            // (it evicts it), or there is none (NO-EVICT clients only).
            let Some((m, slot)) = candidate.filter(|_| first) else {
                return;
            };
            if let Some(c) = self.conns.slots[slot].as_ref() {
                log::notice(format_args!("Evicting client: {}", c.describe(now_ms)));
            }
            // Counted before the socket closes: whoever sees the close
            // and asks INFO sees the count.
            (self.core.server.client_mem.evicted).fetch_add(1, Ordering::Relaxed);
            self.close_conn(slot);
            mine -= m;
            candidate = next.next();
        }
    }
}
