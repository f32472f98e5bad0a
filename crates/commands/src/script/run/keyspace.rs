//! The keyspace-wide commands a script may call (DBSIZE, KEYS, SCAN,
//! RANDOMKEY, FLUSHDB, FLUSHALL: see `keys::script`): over every shard,
//! which the run must hold (in place, pinned from then on), or run again
//! holding them all if it still can.

use mlua::{Lua, Value};
use resp::{Args, Reply};

use super::super::in_place::on_shard;
use super::super::vm::ReplyError;
use super::{repl_target, Run, EVERY_SHARD};
use crate::table::{flags, registry};

impl Run<'_, '_> {
    /// A keyspace-wide call, written to `out`; `Some` for a call refused
    /// (its error table).
    pub(super) fn keyspace_call(
        &mut self,
        lua: &Lua,
        r: crate::Resolved,
        args: Args<'_>,
        out: &mut Reply,
    ) -> mlua::Result<Option<(Value, bool)>> {
        // EXEC locks every shard for it from now on (`HopMark`).
        self.hop.set_needs_every();
        if !self.hold_every_shard() {
            if self.every_again() {
                return Err(mlua::Error::external(ReplyError(
                    super::super::wide::RESTART_TEXT.into(),
                )));
            }
            return self.reject(lua, r, EVERY_SHARD).map(Some);
        }
        // Neither taken back nor moved to copies from now on.
        self.pinned = true;
        let started = std::time::Instant::now();
        let full = registry().full_name(r.id);
        let (db, nshards) = (self.db, self.ctx.nshards);
        let server = self.ctx.ops.server.get().and_then(std::sync::Weak::upgrade);
        let ctx = &mut *self.ctx;
        let mut each = |s: usize, f: &mut dyn FnMut(&mut engine::Shard)| {
            on_shard(ctx.shard, ctx.in_place.as_deref_mut(), s, |sh| f(sh))
        };
        let res =
            crate::keys::script::call(full, args, db, nshards, &mut each, server.as_deref(), out);
        // (`after_call` skips the home shard.)
        for s in 0..nshards {
            self.after_call(s);
        }
        let failed = match res {
            Ok(()) => false,
            Err(e) => {
                self.error_reply(out, &e);
                true
            }
        };
        if !failed && r.spec.has(flags::WRITE) {
            self.dirty = true;
            if let Some(t) = repl_target(self.repl) {
                let argv: Vec<&[u8]> = args.iter().collect();
                let outbox = &mut self.ctx.shard.outbox;
                outbox.target = t;
                outbox.record(db, &argv);
                outbox.target = engine::outbox::Target::All;
            }
        }
        self.record(r, args, started, failed);
        Ok(None)
    }
}
