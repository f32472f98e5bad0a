//! A WATCH read by a busy script's desk (see `super`): answered there
//! when it needs no shard, or, when its jobs are all for free loops,
//! started as the connection's coordinator and finished by a later pass
//! once their outputs are in ([`Desk::watch_outputs`]), so the WATCH is
//! answered while the script runs, once its keys are registered.
//!
//! Why not wait for the outputs inside the pass (as before): a free loop
//! may be slow to answer, and a deadline is a guess. A loop a hub holds
//! answers once the watchdog gives it back to its thread, which may take
//! well over 100 ms on a loaded machine; a loop busy in a long command
//! (DEBUG SLEEP, a KEYS over a large keyspace) answers when that ends.
//! With a deadline the WATCH then fell back to waiting for the script's
//! end, which for an endless script is forever (session 17 saw it fail
//! tests under load). Started as a coordinator instead, the connection
//! simply waits for its jobs, as any coordinator's connection does: its
//! later requests stay unread (`request::paused`), the desk's other
//! connections are served meanwhile, and whichever finishes it (a later
//! pass, or the loop once the script ended: the outputs are then handled
//! as any coordinator's, `Worker::job_done`) replies in order.
//!
//! Its jobs never go to a loop the script stops (its own, one it pinned
//! or stalls: those would run them only after the script): the keys of a
//! shard the script holds are the script's to register
//! (`script::busy::Registry::watch_while_busy`), and a WATCH of keys of a shard it
//! stops without holding it is parked with the script (its home, when
//! it runs on gathered copies) or refused `-BUSY` (a loop it stalls) by
//! its builder (`multi::watch`, `script::busy::Registry::watch_stopped`).

use std::cell::RefCell;

use resp::{Args, Reply};

use commands::coord::{JobOut, Plan};
use commands::{ServerShared, ThreadStats};

use super::super::super::conn::ActiveCoord;
use super::super::super::mailbox::{ConnRef, Msg};
use super::inbox::INBOX;
use super::Desk;

/// What became of a WATCH a desk read.
pub(super) enum Watched {
    /// Replied (and counted).
    Done,
    /// Its first step's jobs, all for free loops: the caller starts them
    /// on the connection ([`start`]).
    Jobs(Box<dyn commands::coord::Coordinator>, Plan),
    /// It needs a loop the script stops, or no inbox is lent for this
    /// loop: nothing ran, nothing was written; it waits for the script's
    /// end.
    Later,
}

/// Steps a WATCH read by the desk of busy loop `id` once: finished here
/// when it needs no shard (its keys are on a shard its script holds,
/// which took them, `script::busy::Registry::watch_while_busy`; or they are
/// watched already), its jobs handed back when they are all for free
/// loops.
#[allow(clippy::too_many_arguments)]
pub(super) fn watch_now(
    server: &std::sync::Arc<ServerShared>,
    id: usize,
    resolved: commands::Resolved,
    mut coord: Box<dyn commands::coord::Coordinator>,
    args: Args<'_>,
    out: &mut Reply,
    client: &mut commands::ClientState,
    stats: &mut ThreadStats,
    started: std::time::Instant,
) -> Watched {
    let mut plan = Plan::default();
    let res = coord.step(Vec::new(), &mut plan, out, client);
    if res.is_ok() && !plan.is_empty() {
        if !sendable(&server.ops.busy, id, &plan) {
            return Watched::Later;
        }
        return Watched::Jobs(coord, plan);
    }
    if let Err(e) = &res {
        commands::exec::reply_error(out, stats, e);
    }
    let ops = server.ops;
    if let Some(us) = commands::exec::record(stats, ops, resolved.id, started, res.is_err()) {
        let label = commands::ops::slowlog::label_of(client);
        commands::exec::slowlog(ops, resolved, args, us, client.id, Some(label));
    }
    Watched::Done
}

/// Whether the desk of loop `id` can send `plan`'s jobs now: every one is
/// for a loop the busy script does not stop (those run nothing before it
/// ends), and this loop's inbox is lent (its mailbox sends them).
fn sendable(busy: &commands::script::busy::Registry, id: usize, plan: &Plan) -> bool {
    if plan
        .jobs
        .iter()
        .any(|(s, _)| *s == id || busy.stops_loop(*s))
    {
        return false;
    }
    INBOX.with(|i| {
        i.get().is_some_and(|p| {
            // SAFETY: as in `super::serve_inbox` (a shared look at the id
            // only; nothing else uses the inbox meanwhile).
            unsafe { p.as_ref() }.id == id
        })
    })
}

/// Starts WATCH `coord`, whose first step planned `plan` ([`Watched::Jobs`]),
/// on connection `c` (slot `slot` of loop `id`) as the loop starts a
/// coordinator: a reply slot opened in the connection's order, the
/// coordinator its `coord` (which pauses the connection), the jobs sent
/// through the lent inbox. Its outputs come back to this desk
/// ([`Desk::watch_outputs`]) or, once the script ended, to the loop.
#[allow(clippy::too_many_arguments)]
pub(super) fn start(
    id: usize,
    slot: usize,
    c: &mut super::super::Conn,
    resolved: commands::Resolved,
    coord: Box<dyn commands::coord::Coordinator>,
    plan: Plan,
    started: std::time::Instant,
    suppress: bool,
    slow_args: Option<resp::OwnedArgs>,
) {
    let seq = c.open_slot(suppress);
    let conn = ConnRef {
        thread: id as u16,
        slot: slot as u32,
        gen: c.gen,
    };
    let n = plan.jobs.len();
    c.coord = Some(ActiveCoord {
        resolved,
        coord,
        results: (0..n).map(|_| None).collect(),
        remaining: n,
        seq,
        started,
        suppress,
        out: Reply::new(c.client.resp3),
        aof_hold: 0,
        slow_args,
    });
    STARTED.with(|s| s.borrow_mut().push(conn));
    send(conn, plan);
}

/// Sends `plan`'s jobs for connection `conn` through the inbox lent for
/// its loop ([`sendable`] said there is one), one message each.
fn send(conn: ConnRef, plan: Plan) {
    // Taken out while it is used, as in `serve_inbox`.
    let Some(mut ptr) = INBOX.with(|i| i.take()) else {
        debug_assert!(false, "a desk's WATCH without an inbox");
        return;
    };
    // SAFETY: as in `serve_inbox`.
    let ib = unsafe { ptr.as_mut() };
    debug_assert_eq!(ib.id, conn.thread as usize);
    for (idx, (shard, work)) in plan.jobs.into_iter().enumerate() {
        let msg = Msg::Job {
            conn,
            idx: idx as u32,
            work,
            gather: None,
        };
        ib.mailbox.send(shard, msg);
    }
    ib.mailbox.flush();
    INBOX.with(|i| i.set(Some(ptr)));
}

/// Puts an output the desk cannot use back among the loop's kept
/// messages, for the loop to handle after the script as it came.
fn keep_again(conn: ConnRef, idx: u32, out: JobOut) {
    let Some(mut ptr) = INBOX.with(|i| i.take()) else {
        return;
    };
    // SAFETY: as in `serve_inbox`.
    let ib = unsafe { ptr.as_mut() };
    let msg = Msg::JobDone {
        conn,
        idx,
        out,
        aof: 0,
    };
    if ib.id == conn.thread as usize {
        ib.kept.push_back(msg);
    }
    INBOX.with(|i| i.set(Some(ptr)));
}

thread_local! {
    /// Connections whose WATCH a desk on this thread started ([`start`])
    /// and has not finished: their jobs' outputs are taken from the lent
    /// inbox for the desk ([`arrived`]), only by that desk's own passes
    /// (`super::serve_inbox`), each followed at once by
    /// [`Desk::watch_outputs`]. An entry whose WATCH the loop finished
    /// after the script (or whose connection closed) is dropped at the
    /// first pass of that loop's next lend, before its inbox is looked
    /// at: within a lend every entry of its loop is exact (the loop
    /// neither finishes a coordinator nor closes a connection inside a
    /// script). Bounded by the connections of this thread's loops.
    static STARTED: RefCell<Vec<ConnRef>> = const { RefCell::new(Vec::new()) };
    /// Their outputs, taken from the inbox, not yet applied.
    static ARRIVED: RefCell<Vec<(ConnRef, u32, JobOut)>> = const { RefCell::new(Vec::new()) };
}

/// Whether a job output for `conn` is for a WATCH a desk started (one
/// borrow of an empty vector when none is).
pub(super) fn started(conn: ConnRef) -> bool {
    STARTED.with(|s| s.borrow().contains(&conn))
}

/// An output for a desk's WATCH ([`started`]), kept for its desk.
pub(super) fn arrived(conn: ConnRef, idx: u32, out: JobOut) {
    ARRIVED.with(|a| a.borrow_mut().push((conn, idx, out)));
}

fn forget(conn: ConnRef) {
    STARTED.with(|s| s.borrow_mut().retain(|c| *c != conn));
}

impl Desk<'_> {
    /// At a lend's first pass, before its inbox is looked at: drops the
    /// entries of this loop whose WATCH the loop finished after an earlier
    /// script, or whose connection closed (see [`STARTED`]).
    pub(super) fn watch_prune(&mut self) {
        let conns = &*self.conns;
        let id = self.id;
        STARTED.with(|s| {
            s.borrow_mut().retain(|r| {
                r.thread as usize != id
                    || conns
                        .slots
                        .get(r.slot as usize)
                        .and_then(|c| c.as_ref())
                        .is_some_and(|c| c.gen == r.gen && is_watch(c))
            })
        });
    }

    /// The WATCHes this desk started: their outputs that came in are
    /// applied, and each whose step is complete steps, as the loop's
    /// `advance` would: finished (its reply written in the connection's
    /// order, counted in the desk's tally, and the connection's next
    /// requests answered) or its next step's jobs sent (a WATCH over
    /// several shards locks them in turn).
    pub(super) fn watch_outputs(&mut self) {
        let id = self.id;
        let mine: Vec<(ConnRef, u32, JobOut)> = ARRIVED.with(|a| {
            let mut a = a.borrow_mut();
            if a.is_empty() {
                return Vec::new();
            }
            let (mine, rest) = std::mem::take(&mut *a)
                .into_iter()
                .partition(|(c, _, _)| c.thread as usize == id);
            *a = rest;
            mine
        });
        for (conn, idx, out) in mine {
            let slot = conn.slot as usize;
            let c = self.conns.slots.get_mut(slot).and_then(|c| c.as_mut());
            let Some(c) = c.filter(|c| c.gen == conn.gen && is_watch(c)) else {
                // Not a WATCH of this desk's any more: the loop's.
                forget(conn);
                keep_again(conn, idx, out);
                continue;
            };
            let Some(ac) = c.coord.as_mut() else { continue };
            if let Some(r) = ac.results.get_mut(idx as usize).filter(|r| r.is_none()) {
                *r = Some(out);
                ac.remaining -= 1;
            }
            if ac.remaining == 0 {
                self.watch_step(conn);
            }
        }
    }

    /// Steps the WATCH of `conn`, every output of its step in. (A WATCH's
    /// transaction records nothing: no append-only-file part waits for its
    /// end, `home::log_coord_step`, so none is handed over here.)
    fn watch_step(&mut self, conn: ConnRef) {
        let slot = conn.slot as usize;
        let Some(c) = self.conns.slots.get_mut(slot).and_then(|c| c.as_mut()) else {
            return;
        };
        let Some(ac) = c.coord.as_mut() else { return };
        let results: Vec<JobOut> = ac.results.drain(..).flatten().collect();
        let mut plan = Plan::default();
        let res = ac
            .coord
            .step(results, &mut plan, &mut ac.out, &mut c.client);
        if res.is_ok() && !plan.is_empty() {
            let n = plan.jobs.len();
            ac.remaining = n;
            ac.results.resize_with(n, || None);
            // A loop the script came to stop since runs them after it
            // (their outputs then reach the loop): nothing is lost.
            send(conn, plan);
            return;
        }
        forget(conn);
        let stats = self.state.tally.get();
        if let Err(e) = &res {
            commands::exec::reply_error(&mut ac.out, stats, e);
        }
        let ops = self.server.ops;
        let (resolved, started) = (ac.resolved, ac.started);
        if let Some(us) = commands::exec::record(stats, ops, resolved.id, started, res.is_err()) {
            if let Some(a) = &ac.slow_args {
                let label = commands::ops::slowlog::label_of(&c.client);
                commands::exec::slowlog(ops, resolved, a.args(), us, c.client.id, Some(label));
            }
        }
        let Some(ac) = c.coord.take() else { return };
        c.complete(ac.seq, if ac.suppress { &[] } else { ac.out.as_bytes() });
        if c.out.resp3() != c.client.resp3 {
            c.out.set_resp3(c.client.resp3);
        }
        // Its connection goes on: the requests after it, as a read would.
        self.answer_buffered(slot);
    }
}

/// Whether connection `c` waits for a WATCH's jobs.
fn is_watch(c: &super::super::Conn) -> bool {
    c.coord
        .as_ref()
        .is_some_and(|ac| ac.resolved.spec.name == "watch")
}
