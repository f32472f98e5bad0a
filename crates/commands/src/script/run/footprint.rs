//! Where a script's call may run and what it may touch: the keys and
//! shards a run holds (`holds`, `place`, every shard), and what happens
//! before and after a call's effects (the take-back copies, the pin that
//! makes a run final, a hop instead, the events and records of a call on
//! another shard joining the home shard's).

use resp::Args;

use super::super::in_place::on_shard;
use super::super::undo::Undo;
use super::Run;
use crate::ctx::ThreadStats;
use crate::table::{flags, registry, shard_of};

/// Declared keys a call's key is compared with before its CRC16 (see
/// `Run::holds`): a longer scan would cost more than the hash.
const DECLARED_SCAN_MAX: usize = 8;

impl Run<'_, '_> {
    /// Before a command that may change something, on a run that may still
    /// be abandoned: on copies only effects outside the data pin it; on a
    /// real shard, whether the entries it may write must be kept to be put
    /// back ([`Undo::save`], on the call's shard).
    pub(super) fn before_effects(
        &mut self,
        r: crate::table::Resolved,
        positions: &[usize],
    ) -> bool {
        let writes = r.spec.has(flags::WRITE);
        if !writes && !r.spec.has(flags::MAY_REPLICATE) {
            return false;
        }
        // PUBLISH (may-replicate, no key), MOVE and COPY (a key of another
        // database): effects no restart can take back.
        let name = r.spec.name;
        // FLUSHALL, FLUSHDB, SWAPDB: pinned where they run, once they hold
        // every shard (a run that does not yet runs again first).
        if positions.is_empty() && crate::keys::script::handles(registry().full_name(r.id)) {
            return false;
        }
        // PUBLISH and SPUBLISH of a run that may still be taken back (not
        // by a call: that one hops, see `hop_instead`): held until the run
        // completes, dropped with it (see `traces::hold_publish`).
        let publish = matches!(name, "publish" | "spublish");
        if publish && !self.by_call && !self.pinned && !self.wrote {
            if self.journal.is_some() && super::super::traces::may_hold_publish() {
                self.published = true;
                return false;
            }
            // No room to hold it: final from here, what it held goes out
            // first (in order).
            super::super::traces::release(self.ctx.ops);
        }
        if positions.is_empty() || name == "move" || name == "copy" || !writes {
            if !self.hop_instead() {
                self.pinned = true;
            }
            return false;
        }
        !self.scratch
    }

    /// Before something no take-back undoes ([`Run::before_effects`],
    /// [`Undo::save`]): a run by a call from another loop is taken back
    /// (true: `restart` set, the caller raises) to run again as a hop, its
    /// script marked (`HopMark`). Past the threshold it would stall the
    /// caller's loop, in whose turn it runs (issue 23 point 5).
    #[cold]
    pub(super) fn hop_instead(&mut self) -> bool {
        if !self.by_call || !self.widen_ok || self.wrote || self.pinned || self.restart {
            return false;
        }
        self.restart = true;
        self.hop.set();
        super::super::busy::note_marked();
        true
    }

    /// [`Undo::save`] in a call of its own on shard `target` (a command
    /// that is not a shard command: SORT ... STORE).
    pub(super) fn save_undo(&mut self, args: Args<'_>, positions: &[usize], target: usize) {
        let ctx = &mut *self.ctx;
        let home = ctx.shard.id;
        let (undo, others, db) = (&mut self.undo, &mut self.undo_others, self.db);
        let too_large = on_shard(ctx.shard, ctx.in_place.as_deref_mut(), target, |shard| {
            Undo::save(undo, others, home, shard, db, args, positions)
        });
        if too_large && !self.hop_instead() {
            self.wrote = true;
        }
    }

    /// Whether this run may touch `key` (of its first database): on a
    /// shard, its keys; on copies, the declared and gathered ones; in
    /// place, those of a shard it holds (or can hold now).
    pub(super) fn holds(&mut self, key: &[u8]) -> bool {
        if self.scratch {
            return self.declared.contains(&key) || super::super::wide::held(key) == Some(true);
        }
        // A declared key is held (on one shard: its keys' shard): no
        // CRC16 (~150 instructions a call) for the keys most calls name.
        if self.declared.len() <= DECLARED_SCAN_MAX && self.declared.contains(&key) {
            return true;
        }
        let s = shard_of(key, self.ctx.nshards);
        if let Some(shards) = self.ctx.in_place.as_deref_mut() {
            return s == self.ctx.shard.id || shards.hold(s);
        }
        s == self.shard || (self.declared.len() > DECLARED_SCAN_MAX && self.declared.contains(&key))
    }

    /// In place: the shard a call's keys live on (the home shard for a
    /// call without keys), if it is one shard and the run holds it.
    pub(super) fn place(&mut self, args: Args<'_>, positions: &[usize]) -> Option<usize> {
        let n = self.ctx.nshards;
        let Some((&first, rest)) = positions.split_first() else {
            return Some(self.ctx.shard.id);
        };
        let s = shard_of(args.get(first), n);
        if rest.iter().any(|&p| shard_of(args.get(p), n) != s) {
            return None;
        }
        if s == self.ctx.shard.id {
            return Some(s);
        }
        self.ctx.in_place.as_deref_mut()?.hold(s).then_some(s)
    }

    /// Whether the script holds every shard of the process (pinning the
    /// co-hosted ones it did not hold yet): with one shard, or in place.
    pub(super) fn hold_every_shard(&mut self) -> bool {
        let (n, home) = (self.ctx.nshards, self.ctx.shard.id);
        if self.scratch {
            return false;
        }
        if n == 1 {
            return true;
        }
        let Some(shards) = self.ctx.in_place.as_deref_mut() else {
            return false;
        };
        (0..n).filter(|&s| s != home).all(|s| shards.hold(s))
    }

    /// Whether this run can be abandoned to run again from the start
    /// holding every shard (it wrote nothing it cannot take back, and the
    /// runtime can reach every shard from here); if so, asks for it (any
    /// database: the pins and the locks are whole shards).
    pub(super) fn every_again(&mut self) -> bool {
        let again = self.widen_ok && !self.wrote && !self.pinned;
        if !again || (self.scratch && !super::super::every::available(self.ctx.ops)) {
            return false;
        }
        // In place if they are co-hosted and free, else under locks on
        // every shard (`every`).
        self.found = super::super::every::marker_keys(self.ctx.nshards, self.ctx.shard.id);
        true
    }

    /// After a call on shard `target`, in place: its keyspace events (and,
    /// under locks, its records: `every`) join the home shard's, so that
    /// one shard publishes the script's effects in order (see `in_place`).
    pub(super) fn after_call(&mut self, target: usize) {
        let ctx = &mut *self.ctx;
        if target == ctx.shard.id {
            return;
        }
        if let Some(shards) = ctx.in_place.as_deref_mut() {
            shards.settle(ctx.shard);
        }
        if ctx.shard.notify_flags == 0 {
            return;
        }
        let ev = on_shard(ctx.shard, ctx.in_place.as_deref_mut(), target, |sh| {
            sh.take_events()
        });
        if !ev.is_empty() {
            ctx.shard.emit_events(ev);
        }
    }

    /// The shards a server-wide call from the script (INFO, MEMORY STATS)
    /// reports, each with its loop's statistics when they are known and
    /// not the script's: every shard when the run holds them all (in
    /// place, pinned now: such calls are rare in scripts; or under locks),
    /// else its own shard, or none on gathered copies; and the script's own
    /// statistics.
    pub(super) fn visit_shards(&mut self) -> (Box<crate::server::Visit<'_>>, &ThreadStats) {
        let every = self.ctx.in_place.is_some() && self.hold_every_shard();
        let (n, scratch) = (self.ctx.nshards, self.scratch);
        let ctx = &mut *self.ctx;
        let visit = move |f: &mut dyn FnMut(&engine::Shard, Option<&ThreadStats>)| {
            if scratch {
                return;
            }
            if !every {
                return f(ctx.shard, None);
            }
            for s in 0..n {
                if s == ctx.shard.id {
                    let home = ctx.in_place.as_deref().and_then(|p| p.home_stats());
                    f(ctx.shard, home);
                    continue;
                }
                // Each other loop's statistics (INFO commandstats and the
                // like are whole), then its shard's.
                let mut th: Option<ThreadStats> = None;
                if let Some(p) = ctx.in_place.as_deref_mut() {
                    p.with_stats(s, &mut |st| th = Some(st.clone()));
                }
                on_shard(ctx.shard, ctx.in_place.as_deref_mut(), s, |sh| {
                    f(sh, th.as_ref())
                });
            }
        };
        (Box::new(visit), &self.stats)
    }

    /// Visits the connections a server-wide call from the script reports
    /// (SLOWLOG GET, for entries written without their client's label;
    /// MEMORY STATS when the run holds every shard, else see
    /// [`Run::client_buffers`]): its own loop's (lent to the script:
    /// every one but its sender's, out of its slot meanwhile), its sender
    /// when it is lent to the run (`ctx::Sender`: its figures but its
    /// buffers' total are zero), and every other loop's when the run holds
    /// every shard (as [`Run::visit_shards`]); none on gathered copies.
    pub(super) fn for_each_client(
        &mut self,
        f: &mut dyn FnMut(&crate::ClientState, &crate::coord::ClientIo),
    ) {
        if self.scratch {
            return;
        }
        super::super::busy::for_each_home_client(f);
        if let Some(s) = self.ctx.sender {
            let io = crate::coord::ClientIo {
                tot_mem: s.mem_bytes,
                ..Default::default()
            };
            f(s.client, &io);
        }
        let every = self.ctx.in_place.is_some() && self.hold_every_shard();
        if !every {
            return;
        }
        let home = self.ctx.shard.id;
        if let Some(p) = self.ctx.in_place.as_deref_mut() {
            for s in (0..self.ctx.nshards).filter(|&s| s != home) {
                p.with_clients(s, &mut |c| c.for_each(f));
            }
        }
    }

    /// The bytes and number of the connections MEMORY STATS counts in
    /// `clients.normal` from the script: every loop's, as Redis counts
    /// every client. Read live where the run reaches them (every loop's
    /// when it holds every shard; else the loop whose desk it was lent,
    /// and its sender when that is its loop's, out of its slot: see
    /// [`Run::for_each_client`]); for every other loop, what that loop
    /// published at its last cron (`ClientMem::conns_of`: a sender of
    /// another loop is in its figure), since the run may not wait for
    /// another thread (one may wait for the script's shard). Redis's own
    /// figure is its clients cron's too.
    pub(super) fn client_buffers(&mut self) -> (u64, u64) {
        let mut sum = (0u64, 0u64);
        let mut add = |_: &crate::ClientState, io: &crate::coord::ClientIo| {
            sum.0 += io.tot_mem as u64;
            sum.1 += 1;
        };
        let every = !self.scratch && self.ctx.in_place.is_some() && self.hold_every_shard();
        if every {
            self.for_each_client(&mut add);
            return sum;
        }
        let home = super::super::busy::for_each_home_client(&mut add);
        if let Some(s) = self.ctx.sender {
            if home == Some(usize::from(s.client.home.thread)) {
                sum.0 += s.mem_bytes as u64;
                sum.1 += 1;
            }
        }
        let server = self.ctx.ops.server.get().and_then(std::sync::Weak::upgrade);
        if let Some(server) = server {
            for l in (0..self.ctx.nshards).filter(|&l| Some(l) != home) {
                let (bytes, n) = server.client_mem.conns_of(l);
                sum.0 += bytes;
                sum.1 += n;
            }
        }
        sum
    }

    /// SLOWLOG GET from the script, its entries' clients looked up on the
    /// loops it reaches ([`Run::for_each_client`]); recorded as the
    /// command's call.
    pub(super) fn slowlog_get(
        &mut self,
        r: crate::table::Resolved,
        args: resp::Args<'_>,
        out: &mut resp::Reply,
    ) {
        let started = std::time::Instant::now();
        let ops = self.ctx.ops;
        let res =
            crate::ops::slowlog::get_from_script(ops, args, &mut |f| self.for_each_client(f), out);
        let failed = match res {
            Ok(()) => false,
            Err(e) => {
                self.error_reply(out, &e);
                true
            }
        };
        self.record(r, args, started, failed);
    }
}
