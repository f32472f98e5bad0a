//! Long scripts: `busy-reply-threshold` (alias `lua-time-limit`), SCRIPT
//! KILL and FUNCTION KILL, the FUNCTION LOAD time limit, and `-BUSY` for
//! commands that need a shard a long script holds.
//!
//! # How a running script is watched
//!
//! Every thread's VM carries one instruction-count hook ([`HookState`],
//! installed once with the VM, fired every [`HOOK_INSTRUCTIONS`] Lua
//! instructions; Redis's `luaMaskCountHook` fires every 100,000 too). A run
//! tells the hook what it is ([`HookState::begin`]): nothing else is done
//! per run, no lock, no allocation for EVAL. When the hook sees a script
//! running past the threshold, it *publishes* it: an `Arc<Running>` in its
//! server's busy list ([`Registry`]), and a mark on its shard. From then on:
//!
//! * SCRIPT KILL / FUNCTION KILL, on whatever thread the killer's
//!   connection lives, find it in the list and flip its state from clean
//!   to killed (one compare-and-swap: the script's own thread flips clean
//!   to wrote before its first write command, so a kill and a write cannot
//!   both win). The hook raises Redis's error at its next call, and from
//!   then on at every line (Redis switches its hook to `LUA_MASKLINE` for
//!   the same reason: a `pcall` must not be able to swallow the kill).
//! * Dispatch, on every thread, answers `-BUSY` to a command that needs the
//!   marked shard (`refuse_if_busy`), and to a command that needs no shard
//!   at all (PING, INFO, a keyless EVAL: Redis answers every command so
//!   while busy, and health checks probe with PING), except commands
//!   flagged `allow-busy`. Keyed commands of other shards keep running.
//!
//! A script below the threshold is invisible: SCRIPT KILL answers NOTBUSY,
//! as Redis does (there a client cannot even be heard before it).
//!
//! # One registry per server
//!
//! Everything other threads see of the long scripts (the published list
//! and its count, `busy-reply-threshold`, the SHUTDOWN NOSAVE stop, the
//! count of scripts under locks) is the server's [`Registry`], held by its
//! `Ops` (`ops.busy`, `'static` as `Ops` is). A command reaches it through
//! its server (dispatch: `server.ops.busy`, one more pointer load than the
//! process-wide static it was); a run through its `ShardCtx::ops`, which
//! the hook finds at its first call (`run::running_ops`); a published run
//! keeps it (`Running::registry`). Process-wide, the tests' servers in one
//! process saw each other's scripts: a long script of one test answered
//! another test's SCAN `-BUSY`. What stays per thread (the lent desks and
//! loops, the current run) is per server too: a thread serves one server.
//!
//! # The script's own event loop (Redis's `processEventsWhileBlocked`)
//!
//! Clients whose connection lives on the script's own event loop would not
//! be read at all until the script ends, so a SCRIPT KILL or SHUTDOWN
//! NOSAVE from them could not be heard. So the runtime lends the hook a
//! [`BusyServe`] ([`lend_desk`], around the code that may run a script):
//! once the script is published, every hook call (every
//! [`HOOK_INSTRUCTIONS`], about a millisecond of Lua) lets it serve the
//! loop's *other* connections once, in Redis's restricted mode: requests
//! are read and parsed, commands flagged `allow-busy` that need no shard
//! run (SCRIPT KILL, FUNCTION KILL, FUNCTION STATS, SHUTDOWN, MULTI,
//! DISCARD, AUTH, HELLO, QUIT, RESET ...), and everything else gets
//! Redis's `-BUSY` (dispatch refuses any other command of a connection
//! whose home is the busy shard: `refuse_if_busy` with its home). Nothing
//! runs on a shard from there: an allow-busy command that would (a WATCH
//! with keys of another shard) stays unread, with everything behind it on
//! its connection, until the script ends. Keys of the shard a published
//! script holds (run in place: its home shard and those it pinned; on
//! every shard, `super::every`: any shard) need no job: the script takes
//! them ([`Registry::watch_while_busy`]) and its thread registers them, each on its
//! shard, before its next command, so WATCH is answered at once there and
//! on every thread; keys of the home shard of a script on gathered copies,
//! and of a loop it stalls, are parked with it and registered before that
//! shard runs again ([`Registry::watch_stopped`]; see `watch` for both). The connection that runs
//! the script is not in the table the runtime lends (it is taken out
//! while it executes).
//!
//! The lend is a thread-local pointer with its lifetime erased, set and
//! cleared around the call by a guard: the hook is a `'static` closure
//! (mlua's), so it cannot borrow the runtime's table otherwise. The
//! pointer is taken out of the slot while the desk serves, so it cannot
//! be re-entered.
//!
//! The lending loop is published with the script (`Running::home`): its
//! shard's commands get `-BUSY` on every thread, also while the script
//! runs on gathered copies of several shards' keys (`crate::scratch`,
//! which holds no one shard, but stops its caller's loop). Commands that
//! need those keys' other shards wait on the transaction's locks instead
//! of getting `-BUSY`.
//!
//! A script run in place across co-hosted shards (`super::in_place`)
//! pins their loops to its own: none of them runs until it ends. One that
//! can still be taken back is, past the threshold, and runs again on
//! copies (its loops freed); one that cannot (it published, or wrote what
//! no undo keeps) is published with every loop it pinned (`Running::
//! pinned`, kept up to date at each pass as it pins more), and the
//! runtime lends their desks too ([`lend_pinned`]): each pass serves every
//! pinned loop as the own one, so their clients get `-BUSY`, and their
//! SCRIPT KILL, FUNCTION KILL and SHUTDOWN NOSAVE reach the script, as
//! those of the own loop do.
//!
//! A hub's own loop, idle while a script runs in the turn of a loop the
//! hub adopted (see [`IdleLoops`]), is lent the same way ([`lend_idle`])
//! and served at each pass after the script's own, its shard published as
//! stalled (`Running::stalled`): `-BUSY` everywhere, but not held (a
//! WATCH of its keys is parked, [`Registry::watch_stopped`]).
//!
//! A script run on a co-hosted shard by a call from another loop (the
//! runtime's `in_place::by_call`) lends that shard's desk as any script
//! on its shard does, and stops the caller's loop, whose turn it runs in:
//! that loop is lent as an idle one ([`lend_caller`], its desk moved out
//! of the desk's slot meanwhile), stalled and served as a hub's own loop
//! is. Past the threshold such a run is taken back if it can be, as one in
//! place is ([`by_call`]), and runs again as a hop, which leaves the
//! caller's loop free; and it always can be: it is taken back before
//! anything no take-back undoes too (`run::Run::hop_instead`). Idle loops
//! lent by nested calls are all served ([`lend_idle`] chains them).
//!
//! # Scripts under a transaction's locks
//!
//! A script that runs as a transaction's job rather than in place (one
//! on every shard, `super::every`, which write-locks them all; one inside
//! MULTI/EXEC, whose block locks its keys) runs through [`under_locks`]:
//! the job's registry lends the loop it runs on to the hook
//! (`ClientRegistry::lend_desk`: the connection table is the desk's
//! meanwhile, which a script never reaches), so its own thread's clients
//! are served as above, and the script is published with the shards its
//! transaction locks (`Running::locked`). Their commands get `-BUSY` on
//! every thread, as the home shard's do (keys of shards the transaction
//! does not lock keep being served: Redis answers those `-BUSY` too);
//! each of their loops, free meanwhile, answers `-BUSY` to the requests
//! that already waited behind the locks ([`Registry::locked_busy`]: the runtime
//! tries them again as at a release, and refuses what is still held
//! back), and its own loop's connections blocked on a lock are
//! dispatched again, refused; other transactions' lock requests waiting
//! there are withdrawn from the lock table and answered `-BUSY`
//! (`tx::BusyWithdrawn`; not an allow-busy command's, nor an EXEC's that
//! already ran a command). The first busy pass wakes every loop for
//! that. A WATCH of keys of a locked shard (not the home one) takes no
//! lock (`multi::watch_locks`): the script takes them if it holds every
//! shard (`Running::every`), else its job runs at once on that free loop,
//! also from the script's own loop, whose desk sends it and answers the
//! WATCH once it is back (the runtime's `busy::watch`; a script inside MULTI/EXEC whose block does not lock every shard;
//! the block's later commands of other shards run after the script,
//! `multi`, so after such a WATCH, as in Redis). A transaction withdrawn
//! at one of those loops, which holds a lock on the script's own shard,
//! is answered at once there (the lock goes after the script), so its
//! `-BUSY` does not wait for the script. While the script's thread waits for a
//! call posted to another shard's loop (`every::Reach`), the desk is
//! served at each tick ([`serve_while_waiting`]).
//!
//! Other threads' requests already in the script's shard's mailbox when
//! it became busy are answered `-BUSY` by the desk (the runtime lends it
//! the loop's mailbox too); new ones are refused by the sender's dispatch
//! (`refuse_if_busy`). What the script's own loop held back behind its
//! shard's lock, taken before the script ran (its own connections'
//! requests, other threads' batches not started), is answered by the desk
//! too.
//!
//! SHUTDOWN while a script is busy answers `-BUSY`; SHUTDOWN NOSAVE stops
//! every busy script (as SCRIPT KILL would, written or not) and drops its
//! records from the append-only file, as Redis never propagates an
//! unfinished script (except for one on gathered copies of several
//! shards, whose transaction logs what it wrote back). Once set, the stop
//! stays set: a refused shutdown leaves later busy scripts stopped too.
//!
//! # Files
//!
//! * `registry`: the server's [`Registry`] and a published run
//!   ([`Running`]): what other threads see of long scripts.
//! * `hook`: a VM's hook ([`HookState`]): a run timed, published past
//!   the threshold, killed, and its busy passes.
//! * `lent`: what the runtime lends a published run's busy passes (its
//!   desk, pinned, idle and caller loops; a script under locks).
//! * `watch`: WATCH while a script is busy.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

mod hook;
mod lent;
mod registry;
mod watch;

pub use hook::{HookState, Kind};
pub use lent::{
    by_call, desk_home, lend_caller, lend_desk, lend_idle, lend_pinned, published_under_locks,
    serve_while_waiting, take_marked, under_locks, BusyServe, IdleLoops, PinnedLoops,
};
pub(crate) use lent::{for_each_home_client, is_by_call, note_marked};
pub use registry::{Registry, Running, RunningFunction};
pub use watch::{
    any_parked, register_now, register_parked, register_watches, release_stalled,
    take_written_back, PendingWatch,
};

/// Lua instructions between two hook calls.
const HOOK_INSTRUCTIONS: u32 = 100_000;
/// FUNCTION LOAD's limit on a library's loading code (Redis's
/// `LOAD_TIMEOUT_MS`).
const LOAD_TIMEOUT: Duration = Duration::from_millis(500);

pub const BUSY_EVAL: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
pub const BUSY_FUNCTION: &str =
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.";
const UNKILLABLE: &str = "UNKILLABLE Sorry the script already executed write commands against the \
     dataset. You can either wait the script termination or kill the server in a hard way using \
     the SHUTDOWN NOSAVE command.";
const KILLED: &str = "Script killed by user with SCRIPT KILL...";
const LOAD_TIMEOUT_TEXT: &str = "FUNCTION LOAD timeout";

/// `Running::state` values.
const CLEAN: u8 = 0;
const WROTE: u8 = 1;
const KILLED_STATE: u8 = 2;

thread_local! {
    /// The shards the transaction of the job running on this thread holds
    /// under locks, for a script it runs ([`under_locks`]).
    static LOCKED: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    /// This thread's published run, for [`serve_while_waiting`].
    static CURRENT: RefCell<Option<Arc<Running>>> = const { RefCell::new(None) };
}

#[cfg(test)]
mod tests;
