//! Scripts that touch keys they did not declare, on other shards.
//!
//! A standalone Redis lets a script touch any key, declared in `KEYS` or
//! not, and real applications rely on it. Tessera runs a script where its
//! declared keys live (see the parent module), so an undeclared key may
//! live on a shard the script holds nothing of. Stopping every shard for
//! such scripts (Dragonfly's "global" script mode) would be the simple
//! answer; it costs every other client its throughput while they run.
//! Instead a script learns its footprint by running:
//!
//! 1. **First run, where its declared keys are** (inline, no lock), as
//!    usual. If `redis.call` names an undeclared key of another shard, the
//!    run is abandoned: that call and every later one raise an error the
//!    script cannot get past (a `pcall` that catches it only sees the next
//!    call fail too), its reply is dropped, and what it wrote is taken
//!    back: before a write command's first write of a key, the key's entry
//!    is copied (`run::Undo`), and an abandoned run puts the copies back
//!    and drops the records and keyspace events made since its first
//!    write. Nothing else ran on the shard meanwhile (the script is one
//!    handler call), so no client saw those writes. The handler reports
//!    the keys it found (`BlockOn::widen`) and the runtime runs the script
//!    again from the start on the home thread: in place when the shards it
//!    needs are co-hosted and free and it ran on the home shard
//!    (`in_place`, where a key it cannot reach there abandons the run the
//!    same way, on every shard it wrote), else through [`coordinator`]
//!    (a script sent to another shard's thread is the last command of its
//!    connection's batch, so no later command of that connection runs
//!    before it: the runtime reads none of its requests until that batch
//!    is back, `Conn::script_wait`).
//! 2. **Wider runs** ([`Wide`]): the transaction layer write-locks the
//!    declared keys *and every key found so far*, gathers copies of them
//!    to the home thread, and runs the script on the copies
//!    (`crate::scratch`), then writes back what changed before the locks
//!    go: strict two-phase locking, so the run is atomic and isolated as
//!    a single-shard script is. Only those keys are locked: other clients'
//!    commands on other keys, on every shard, go on meanwhile. If this run
//!    also names a key it does not hold, at any point (before or after a
//!    write: the writes went to copies), the copies are dropped, the locks
//!    released, and the script runs again over the larger key set, under
//!    the same transaction id (so an append-only file sees one
//!    transaction). Every round adds at least one key, so a script
//!    terminates after at most as many rounds as keys it touches; the
//!    rounds are bounded ([`ROUNDS_MAX`]) with an error after.
//! 3. **Rounds on lent shards** (`lend`): with `shard-consolidation no`
//!    a round instead write-locks its keys' shards *whole*, and runs the
//!    script on the real shards, the other threads' shards lent to the
//!    home thread for the call (no copies, no write-back); a run there
//!    that strays is taken back (`run::Undo`) and asks for the next
//!    round as above. Where that path declines (see `lend`), or a run
//!    there is taken back past the threshold or names keys of two shards
//!    in one call, the rounds go on as in 2.
//!
//! Rejected: locking every shard once a script touches an undeclared key
//! (simple, but stops every other client; kept out on purpose, see the
//! issue's throughput target), and suspending the script at the
//! `redis.call` while the key's shard is locked (Lua 5.1 cannot yield
//! across `pcall`, and a thread waiting inside a script for another
//! shard's thread deadlocks once two scripts do it in opposite orders, or
//! when shard consolidation runs both shards on one thread).
//!
//! What stays refused, with the error of before: an undeclared key of
//! another shard named in a first run after a write that cannot be taken
//! back (an entry over 128 elements or 64 KiB, a stream, MOVE or COPY into
//! another database: copying large values before every script write would
//! cost every script; Redis's cluster mode refuses these keys outright),
//! and scripts inside MULTI/EXEC (the transaction's other commands already
//! ran under its locks). Keys of a database other than the script's own
//! on another shard (which key locks on copies do not cover) make the run
//! start again holding every shard instead (`every`), as the keyspace
//! commands do. Taking writes back leaves three traces: WATCH on a
//! key the abandoned run wrote fails the watcher's EXEC (the key was
//! touched), a client tracking it gets an extra invalidation, and a key
//! that expired lazily after the first write is not deleted on replicas
//! until they see it deleted again. What the abandoned run's calls
//! recorded elsewhere does not stay: their statistics are taken back, and
//! their MONITOR lines, slowlog entries and `redis.log` lines were held
//! and are dropped (`traces`), so each call shows once, as in Redis.
//!
//! Cost: a script that keeps to its declared keys pays one check per
//! `redis.call` key, and a copy of each key it writes before its first
//! write (a small entry: an INCR's counter; bench/scripting.sh measures
//! it). One that strays runs once inline until the stray key, then once
//! per round through the transaction layer (two round trips and a copy of
//! each key's value each way, as any cross-shard script). A script sent to
//! another shard's thread ends its connection's pipeline pass there (one
//! hop per pipelined script instead of one per batch).

use std::cell::RefCell;

use resp::{Args, Reply};

use super::real::{Call, Run, Strategy};
use crate::coord::{Coordinator, JobOut, Parked, Plan};
use crate::ctx::{ClientState, ConnCtx};
use crate::error::CmdError;
use crate::scratch::WidenSlot;
use crate::table::{CommandSpec, ShardHandler};
use crate::tx::{LockSet, Mode, TxCoord, TxId};

/// Rounds after which a script that keeps finding new keys is refused.
pub const ROUNDS_MAX: u32 = 1024;

thread_local! {
    /// While a [`Wide`] steps: the keys its copies hold (a script run on
    /// them may touch these, and asks for a new round for any other).
    static HELD: RefCell<Option<Vec<Vec<u8>>>> = const { RefCell::new(None) };
}

/// Whether a script run on copies may ask for another round, and if so,
/// whether `key` is among the copies.
pub(crate) fn held(key: &[u8]) -> Option<bool> {
    HELD.with(|h| h.borrow().as_ref().map(|ks| ks.iter().any(|k| k == key)))
}

/// The error a run that asked for more keys raises at every `redis.call`.
pub(crate) const RESTART_TEXT: &str = "ERR Script touched undeclared keys: running it again";

/// Runs a script again from the start over its declared keys and
/// `found` (keys it touched that were not on its shard), under locks on
/// all of them; `spec` and `handler` are the script command's.
pub fn coordinator(
    spec: &'static CommandSpec,
    handler: ShardHandler,
    ctx: &mut ConnCtx<'_>,
    args: Args<'_>,
    found: Vec<Vec<u8>>,
) -> Box<dyn Coordinator> {
    let home = ctx.home;
    let tx = crate::tx::new_tx_id(home);
    let template = Call::of(spec, handler, ctx, args);
    let every = super::every::available(ctx.server.ops);
    if every && super::every::asks_every(&found) {
        // It needs every shard: whole-shard locks, not copies.
        return Run::new(home, template, Strategy::Post).wrap(tx);
    }
    let lend = every && super::lend::allowed(ctx);
    let slot = WidenSlot::default();
    let (keys, inner) = if lend {
        // The declared keys are not copied for a round on the real shards
        // (only their shards are locked): only if it asks for another.
        let declared = declared(args);
        let shards = super::lend::shards_of(
            home,
            declared.chain(found.iter().map(|k| &k[..])),
            template.nshards,
        );
        let widen = slot.clone();
        let run = Run::new(home, template.clone(), Strategy::Lend { shards, widen });
        (found, run.wrap(tx))
    } else {
        let mut keys: Vec<Vec<u8>> = declared(args).map(<[u8]>::to_vec).collect();
        add(&mut keys, found);
        let inner = wrap(home, &keys, &template, &slot, tx);
        (keys, inner)
    };
    Box::new(Wide {
        home,
        tx,
        keys,
        declared: !lend,
        template,
        inner,
        slot,
        rounds: 1,
        every,
        lend,
    })
}

/// The keys a script command declares (EVAL's and FCALL's `numkeys`
/// keys).
fn declared<'a>(args: Args<'a>) -> impl Iterator<Item = &'a [u8]> + 'a {
    let n = super::run::numkeys(args).unwrap_or(0);
    (3..3 + n).map(move |p| args.get(p))
}

/// One round on the real shards: the home shard and those of `keys`
/// locked whole and lent to the home thread (see `lend`).
fn lend_round(
    home: usize,
    keys: &[Vec<u8>],
    template: &Call,
    slot: &WidenSlot,
    tx: TxId,
) -> Box<dyn Coordinator> {
    let keys = keys.iter().map(|k| &k[..]);
    let shards = super::lend::shards_of(home, keys, template.nshards);
    let widen = slot.clone();
    Run::new(home, template.clone(), Strategy::Lend { shards, widen }).wrap(tx)
}

/// Appends the keys of `more` not in `keys`.
fn add(keys: &mut Vec<Vec<u8>>, more: Vec<Vec<u8>>) {
    for k in more {
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
}

/// One round: a run on copies of `keys` under write locks on them.
fn wrap(
    home: usize,
    keys: &[Vec<u8>],
    template: &Call,
    slot: &WidenSlot,
    tx: TxId,
) -> Box<dyn Coordinator> {
    let run = crate::scratch::for_script(template, keys, slot.clone());
    let mut set = LockSet::default();
    // Each key's shard as the run groups them (not hashed again).
    for (s, k) in run.key_groups() {
        // Write: a script may write any key it touches.
        set.key_on(s, template.db, k, Mode::Write);
    }
    TxCoord::wrap_as(home, Box::new(run), set, tx)
}

/// A script's run over its declared keys and those found so far; see the
/// module documentation.
pub struct Wide {
    home: usize,
    tx: TxId,
    /// The keys its rounds lock (or whose shards they lock whole): the
    /// declared ones once `declared`, and those its runs found.
    keys: Vec<Vec<u8>>,
    /// `keys` holds the declared keys too (a first round on the real
    /// shards copies none: its locks are by shard).
    declared: bool,
    /// What each round is made from: a run on the real shards (`real`), or
    /// on copies (`scratch`), made only for a round that runs there.
    template: Call,
    inner: Box<dyn Coordinator>,
    /// Where a round's script leaves the keys it did not hold.
    slot: WidenSlot,
    rounds: u32,
    /// Whether a round may still ask for the run over every shard (see
    /// `every`): the runtime can reach each shard, and no round ran it
    /// yet.
    every: bool,
    /// Rounds run on the real shards, lent to the home thread (see
    /// `lend`), until one hands the script to copies.
    lend: bool,
}

impl Coordinator for Wide {
    fn step(
        &mut self,
        results: Vec<JobOut>,
        plan: &mut Plan,
        out: &mut Reply,
        client: &mut ClientState,
    ) -> Result<(), CmdError> {
        let mut results = results;
        loop {
            // Lent, not cloned (a clone was an allocation per key and step).
            let keys = std::mem::take(&mut self.keys);
            HELD.with(|h| *h.borrow_mut() = Some(keys));
            let res = self.inner.step(results, plan, out, client);
            self.keys = HELD.with(|h| h.borrow_mut().take()).unwrap_or_default();
            res?;
            if !plan.is_empty() {
                return Ok(());
            }
            // The round ended (its locks are released).
            let found = self.slot.lock().unwrap_or_else(|e| e.into_inner()).take();
            let Some(found) = found else {
                return Ok(());
            };
            if self.rounds >= ROUNDS_MAX {
                return Err(CmdError::err(
                    "Script touched too many undeclared keys on other shards",
                ));
            }
            self.rounds += 1;
            if self.every && super::every::asks_every(&found) {
                self.every = false;
                // Same transaction id: the AOF sees one transaction.
                let run = Run::new(self.home, self.template.clone(), Strategy::Post);
                self.inner = run.wrap(self.tx);
                results = Vec::new();
                continue;
            }
            if !self.declared {
                self.declared = true;
                let found_before = std::mem::take(&mut self.keys);
                self.keys = declared(self.template.args.args())
                    .map(<[u8]>::to_vec)
                    .collect();
                add(&mut self.keys, found_before);
            }
            let before = self.keys.len();
            add(&mut self.keys, found);
            if self.lend && self.keys.len() == before {
                // Declined, taken back past the threshold, or a call the
                // real shards cannot run (keys of two shards): on copies
                // from now on (see `lend`), as before it existed.
                self.lend = false;
                self.inner = wrap(self.home, &self.keys, &self.template, &self.slot, self.tx);
                results = Vec::new();
                continue;
            }
            if self.keys.len() == before {
                // INVARIANT: a run asks only for keys it does not hold;
                // a round that adds none would repeat forever.
                return Err(CmdError::err("Script keys could not be locked"));
            }
            self.inner = if self.lend {
                lend_round(self.home, &self.keys, &self.template, &self.slot, self.tx)
            } else {
                wrap(self.home, &self.keys, &self.template, &self.slot, self.tx)
            };
            results = Vec::new();
        }
    }

    fn abort(&mut self, plan: &mut Plan) {
        self.inner.abort(plan);
    }

    fn kept_args(&self) -> Option<Args<'_>> {
        // The template never runs, so never parks: its copy stays whole.
        Some(self.template.args.args())
    }

    fn parked(&mut self) -> Option<Parked> {
        self.inner.parked()
    }

    fn tx_id(&self) -> Option<TxId> {
        Some(self.tx)
    }

    fn take_records(&mut self) -> Vec<engine::outbox::Chunk> {
        self.inner.take_records()
    }

    fn first_step_needs_locks(&self) -> bool {
        self.inner.first_step_needs_locks()
    }

    fn must_finish(&self) -> bool {
        self.inner.must_finish()
    }
}
