//! CLIENT PAUSE timeout [WRITE|ALL] and CLIENT UNPAUSE (Redis 7.0's
//! `pauseClients`).
//!
//! The pause is process-wide state ([`Pause`]); dispatch asks it about
//! each command (one atomic load while nothing is paused) and answers
//! `Step::Paused` for a command it holds: the runtime leaves the request
//! unparsed in the connection's buffer, stops reading that connection's
//! pipeline (its later commands wait behind it, as in Redis), counts it as
//! blocked (INFO `blocked_clients`, CLIENT LIST flag `b`), and dispatches
//! it again once the pause changes or ends: an UNPAUSE or a new PAUSE
//! (each bumps a generation and wakes every thread) or the end time,
//! which every thread holding a client wakes up for. No thread spins.
//!
//! What a pause holds, as Redis 7.0's `processCommand`: with ALL, every
//! command; with WRITE, commands that may write or replicate (`write` or
//! `may_replicate`: PUBLISH, PFCOUNT, EVAL of a script not declared
//! `no-writes`, ...), such commands queued inside MULTI, and EXEC of a
//! transaction holding one. A command refused before (unknown, arity,
//! NOAUTH) gets its error at once. A pause taken inside a transaction
//! starts when the transaction ends (dispatch checks before EXEC, not the
//! commands EXEC runs).
//!
//! While clients are paused (either kind), keys past their deadline are
//! not deleted, as in Redis (a replica must see no write): commands read
//! them as missing (`exec::run_shard`) and the active expire cycle waits.
//! Not done: Redis also stops evicting keys meanwhile; Tessera's shards
//! keep evicting.
//!
//! FAILOVER pauses writes too (`Pause::set_failover`), with no end time:
//! the failover lifts it when it completes or aborts; CLIENT UNPAUSE does
//! not (see `repl::failover`).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use resp::Args;

use crate::ctx::ConnCtx;
use crate::error::CmdError;
use crate::script::shebang::{self, ScriptFlags};
use crate::script::{cache, sha1};
use crate::table::{flags::*, registry, Resolved};
use crate::util::eq_ic;

const NONE: u8 = 0;
const WRITE_ONLY: u8 = 1;
const ALL: u8 = 2;
/// The bits of `Pause::kind` that CLIENT PAUSE sets (NONE, WRITE_ONLY or
/// ALL); the FAILOVER bit is the failover's own pause.
const CLIENT_BITS: u8 = 3;
const FAILOVER: u8 = 4;

/// The pause every thread reads. Two purposes share it, as Redis 7.0's
/// `pause_purpose`: CLIENT PAUSE (a kind and an end time; CLIENT UNPAUSE
/// ends it) and FAILOVER (writes, until the failover ends; only the
/// failover lifts it). One byte holds both, so that dispatch's check while
/// nothing is paused stays one atomic load.
#[derive(Default)]
pub struct Pause {
    /// CLIENT PAUSE's kind in `CLIENT_BITS`, and `FAILOVER`.
    kind: AtomicU8,
    /// Unix ms at which CLIENT PAUSE's part ends.
    end_ms: AtomicU64,
    /// Bumped by every PAUSE and UNPAUSE (and the failover's start and
    /// end): held clients try again.
    gen: AtomicU64,
}

impl Pause {
    /// Whether clients may be paused (one atomic load).
    #[inline]
    pub fn active(&self) -> bool {
        self.kind.load(Ordering::Acquire) != NONE
    }

    pub fn gen(&self) -> u64 {
        self.gen.load(Ordering::Acquire)
    }

    /// When the pause may change (Unix ms), if clients are paused: CLIENT
    /// PAUSE's end while it holds (even past: the holders must look
    /// again), else `u64::MAX` under a failover's pause alone (its end
    /// bumps the generation).
    pub fn end_ms(&self) -> Option<u64> {
        let k = self.kind.load(Ordering::Acquire);
        if k & CLIENT_BITS != NONE {
            Some(self.end_ms.load(Ordering::Acquire))
        } else if k & FAILOVER != 0 {
            Some(u64::MAX)
        } else {
            None
        }
    }

    /// Redis's `pauseClients(PAUSE_BY_CLIENT_COMMAND)`: the stricter kind
    /// and the later end win.
    fn pause(&self, end_ms: u64, kind: u8) {
        self.end_ms.fetch_max(end_ms, Ordering::AcqRel);
        let _ = self
            .kind
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |k| {
                Some((k & !CLIENT_BITS) | (k & CLIENT_BITS).max(kind))
            });
        self.gen.fetch_add(1, Ordering::AcqRel);
    }

    /// CLIENT UNPAUSE: ends CLIENT PAUSE's part only (a failover keeps
    /// writes paused, as Redis's `unpauseClients(PAUSE_BY_CLIENT_COMMAND)`).
    fn unpause(&self) {
        self.kind.fetch_and(!CLIENT_BITS, Ordering::AcqRel);
        self.end_ms.store(0, Ordering::Release);
        self.gen.fetch_add(1, Ordering::AcqRel);
    }

    /// FAILOVER's pause of writes (`on`) or its end (Redis's
    /// `PAUSE_DURING_FAILOVER`). The caller wakes every thread
    /// (`ServerShared::wake_all`) so that held clients look again.
    pub fn set_failover(&self, on: bool) {
        if on {
            self.kind.fetch_or(FAILOVER, Ordering::AcqRel);
        } else {
            self.kind.fetch_and(!FAILOVER, Ordering::AcqRel);
        }
        self.gen.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether clients are paused at this moment (Redis's
    /// `checkClientPauseTimeoutAndReturnIfPaused`): while they are, keys
    /// past their deadline read as missing but are not deleted, actively
    /// or on access, so that a replica sees no write (one atomic load while
    /// nothing is paused). Ends a CLIENT PAUSE whose time is up.
    #[inline]
    pub fn paused(&self) -> bool {
        self.active() && self.not_over()
    }

    #[cold]
    fn not_over(&self) -> bool {
        self.client_kind() != NONE || self.kind.load(Ordering::Acquire) & FAILOVER != 0
    }

    /// CLIENT PAUSE's kind now, ending it if its time is up.
    fn client_kind(&self) -> u8 {
        let kind = self.kind.load(Ordering::Acquire) & CLIENT_BITS;
        if kind != NONE && self.end_ms.load(Ordering::Acquire) <= engine::now_ms() {
            self.kind.fetch_and(!CLIENT_BITS, Ordering::AcqRel);
            return NONE;
        }
        kind
    }

    /// Whether dispatch must hold command `r` (see the module docs). Ends
    /// a CLIENT PAUSE whose time is up.
    #[cold]
    pub fn holds(&self, r: Resolved, args: Args<'_>, ctx: &ConnCtx<'_>) -> bool {
        let failover = self.kind.load(Ordering::Acquire) & FAILOVER != 0;
        let kind = self.client_kind();
        if kind == ALL {
            return true;
        }
        (kind == WRITE_ONLY || failover) && may_replicate(r, args, ctx)
    }
}

/// Redis's `is_may_replicate_command`, with a script's own declaration.
fn may_replicate(r: Resolved, args: Args<'_>, ctx: &ConnCtx<'_>) -> bool {
    let reg = registry();
    if reg.full_name(r.id) == "exec" {
        return ctx.client.multi.as_ref().is_some_and(|m| {
            m.queued.iter().any(|q| {
                let owned = resp::OwnedArgs::from_slices(q);
                let args = owned.args();
                reg.resolve(args)
                    .is_ok_and(|q| writes(q, args, ctx.server.ops))
            })
        });
    }
    writes(r, args, ctx.server.ops)
}

/// Whether command `r` may write or replicate: its flags, or for a script
/// that declares its flags, unless it says `no-writes` (Redis's
/// evalGetCommandFlags, fcallGetCommandFlags and scriptFlagsToCmdFlags).
fn writes(r: Resolved, args: Args<'_>, ops: &super::Ops) -> bool {
    if let Some(declared) = declared_script_flags(registry().full_name(r.id), args, ops) {
        return !declared.no_writes;
    }
    r.spec.has(WRITE) || r.spec.has(MAY_REPLICATE)
}

/// The flags a script run by EVAL*, EVALSHA* or FCALL* declares: those of
/// the cached script or loaded function, else (EVAL) those of the body's
/// shebang. None for a script without a shebang (it keeps the command's
/// flags), an unknown SHA or function (of the server of `ops`), or
/// another command.
fn declared_script_flags(name: &str, args: Args<'_>, ops: &super::Ops) -> Option<ScriptFlags> {
    if args.len() < 2 {
        return None;
    }
    let body_or_name = args.get(1);
    let flags = match name {
        "eval" | "eval_ro" | "evalsha" | "evalsha_ro" => {
            let evalsha = name.starts_with("evalsha");
            let sha = if evalsha {
                cache::key(body_or_name)?
            } else {
                sha1::hex(body_or_name)
            };
            match ops.scripts.get(&sha) {
                Some(script) => script.flags,
                None if evalsha => return None,
                None => shebang::parse(body_or_name).ok()?.0,
            }
        }
        "fcall" | "fcall_ro" => {
            let libs = ops.functions.read();
            let (lib, idx) = libs.function(body_or_name)?;
            // Functions always declare their flags.
            return Some(lib.functions[idx].flags);
        }
        _ => return None,
    };
    flags.shebang.then_some(flags)
}

/// CLIENT PAUSE timeout [WRITE|ALL]: holds clients' commands for
/// `timeout` milliseconds.
pub(crate) fn client_pause(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    if args.len() > 4 {
        return Err(CmdError::err_echo(
            "unknown subcommand or wrong number of arguments for '",
            args.get(1),
            "'. Try CLIENT HELP.",
        ));
    }
    let mut kind = ALL;
    if args.len() == 4 {
        let m = args.get(3);
        kind = if eq_ic(m, "write") {
            WRITE_ONLY
        } else if eq_ic(m, "all") {
            ALL
        } else {
            return Err(CmdError::err("CLIENT PAUSE mode must be WRITE or ALL"));
        };
    }
    // Redis's getTimeoutFromObjectOrReply in milliseconds.
    let t = resp::string2ll(args.get(2))
        .ok_or(CmdError::err("timeout is not an integer or out of range"))?;
    if t < 0 {
        return Err(CmdError::err("timeout is negative"));
    }
    let end = if t > 0 {
        engine::now_ms().saturating_add(t as u64)
    } else {
        0
    };
    c.server.ops.pause.pause(end, kind);
    wake(c);
    c.out.ok();
    Ok(())
}

/// CLIENT UNPAUSE: ends the pause; held commands run.
pub(crate) fn client_unpause(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    c.server.ops.pause.unpause();
    wake(c);
    c.out.ok();
    Ok(())
}

fn wake(c: &ConnCtx<'_>) {
    if let Some(w) = c.server.wake_all.get() {
        w();
    }
}

#[cfg(test)]
mod tests {
    use crate::testutil::TestServer;

    #[test]
    fn pause_arguments() {
        let mut t = TestServer::new(1);
        let cases: &[(&[&str], &str)] = &[
            (
                &["CLIENT", "PAUSE", "abc"],
                "-ERR timeout is not an integer or out of range\r\n",
            ),
            (&["CLIENT", "PAUSE", "-1"], "-ERR timeout is negative\r\n"),
            (
                &["CLIENT", "PAUSE", "10", "foo"],
                "-ERR CLIENT PAUSE mode must be WRITE or ALL\r\n",
            ),
            (&["CLIENT", "PAUSE", "0"], "+OK\r\n"),
            (
                &["CLIENT", "UNPAUSE", "x"],
                "-ERR wrong number of arguments for 'client|unpause' command\r\n",
            ),
            (&["CLIENT", "UNPAUSE"], "+OK\r\n"),
        ];
        for (cmd, want) in cases {
            assert_eq!(t.run(cmd), *want, "{cmd:?}");
        }
        // A pause whose time is up holds nothing.
        assert_eq!(t.run(&["SET", "k", "v"]), "+OK\r\n");
    }
}
