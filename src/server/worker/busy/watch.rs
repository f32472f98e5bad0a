//! A WATCH read by a busy script's desk (see `super`): answered there
//! when it needs no shard, or when its jobs are for free loops, which run
//! them while the desk waits ([`watch_remote`]).

use std::cell::Cell;

use resp::{Args, Reply};

use commands::{ServerShared, ThreadStats};

use super::super::super::mailbox::{ConnRef, Msg};
use super::{Inbox, INBOX};

/// Finishes a WATCH here: when it needs no shard (its keys are on the
/// busy shard and its script took them, `script::busy::watch_while_busy`,
/// which registers them before the script's next command; or they are
/// watched already), or when its jobs are for free loops, which run them
/// while this desk waits ([`watch_remote`]). True once it replied (and
/// was counted); false if it has jobs it cannot wait for here: nothing
/// ran, nothing was written.
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
) -> bool {
    let mut plan = commands::coord::Plan::default();
    let mut res = coord.step(Vec::new(), &mut plan, out, client);
    if !plan.is_empty() {
        let Some(outs) = watch_remote(id, std::mem::take(&mut plan)) else {
            return false;
        };
        res = coord.step(outs, &mut plan, out, client);
        if !plan.is_empty() {
            // INVARIANT: WATCH has one step of jobs (`multi::watch`).
            debug_assert!(false, "a WATCH with a second step");
            res = Err(commands::CmdError::err(
                "internal error: WATCH did not finish",
            ));
        }
    }
    if let Err(e) = &res {
        commands::exec::reply_error(out, stats, e);
    }
    let ops = server.ops;
    if let Some(us) = commands::exec::record(stats, ops, resolved.id, started, res.is_err()) {
        let label = commands::ops::slowlog::label_of(client);
        commands::exec::slowlog(ops, resolved, args, us, client.id, Some(label));
    }
    true
}

/// How long a desk waits for a WATCH's jobs on free loops
/// ([`watch_remote`]) before it leaves the WATCH for the script's end.
const WATCH_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// The outputs a desk waits for ([`watch_remote`]), by job index.
struct Awaited {
    gen: u32,
    outs: Vec<Option<commands::coord::JobOut>>,
    remaining: usize,
}

thread_local! {
    /// The WATCH jobs this thread's desk waits for now.
    static AWAITED: std::cell::RefCell<Option<Awaited>> = const { std::cell::RefCell::new(None) };
    /// The generation of the last [`Awaited`] (late outputs of an earlier
    /// one are dropped).
    static AWAITED_GEN: Cell<u32> = const { Cell::new(0) };
}

/// The jobs of a WATCH read by the desk of busy loop `id` whose keys are
/// on other shards, whose loops are free (shards the busy script's
/// transaction only locks: its WATCH takes no lock then,
/// `multi::watch_locks`; or shards nothing holds): sent from here through
/// the lent inbox and waited for (at most [`WATCH_WAIT`]; the inbox is
/// served meanwhile, as at a pass), so that WATCH is answered while the
/// script runs, as Redis answers it, and only once its keys are
/// registered (no write after the reply is missed). Their outputs, or
/// `None` without anything left running: a job for a loop the script
/// stops (its own, one it pinned or stalls), no inbox lent for this
/// loop, or no answer in time (the jobs run anyway, registering the keys
/// once more; their late outputs are dropped, see
/// `worker::DESK_SLOT`): the WATCH then waits for the script's end.
fn watch_remote(id: usize, plan: commands::coord::Plan) -> Option<Vec<commands::coord::JobOut>> {
    if plan
        .jobs
        .iter()
        .any(|(s, _)| *s == id || commands::script::busy::stops_loop(*s))
    {
        return None;
    }
    // Taken out while it is used, as in `serve_inbox`.
    let mut ptr = INBOX.with(|i| i.take())?;
    // SAFETY: as in `serve_inbox`.
    let inbox = unsafe { ptr.as_mut() };
    let outs = if inbox.id == id {
        send_and_wait(inbox, plan)
    } else {
        None
    };
    INBOX.with(|i| i.set(Some(ptr)));
    outs
}

fn send_and_wait(
    ib: &mut Inbox<'_>,
    plan: commands::coord::Plan,
) -> Option<Vec<commands::coord::JobOut>> {
    let n = plan.jobs.len();
    // Never 0: the generation of the releases kept for nobody
    // (`released_now`).
    let gen = AWAITED_GEN.with(|g| {
        g.set(g.get().checked_add(1).unwrap_or(1));
        g.get()
    });
    AWAITED.with(|a| {
        *a.borrow_mut() = Some(Awaited {
            gen,
            outs: (0..n).map(|_| None).collect(),
            remaining: n,
        })
    });
    let conn = ConnRef {
        thread: ib.id as u16,
        slot: super::super::DESK_SLOT,
        gen,
    };
    for (idx, (shard, work)) in plan.jobs.into_iter().enumerate() {
        let idx = idx as u32;
        let gather = None;
        ib.mailbox.send(
            shard,
            Msg::Job {
                conn,
                idx,
                work,
                gather,
            },
        );
    }
    ib.mailbox.flush();
    let deadline = std::time::Instant::now() + WATCH_WAIT;
    loop {
        ib.serve();
        let done = AWAITED.with(|a| a.borrow().as_ref().is_some_and(|a| a.remaining == 0));
        if done || std::time::Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
    let a = AWAITED.with(|a| a.borrow_mut().take())?;
    if a.remaining > 0 {
        return None;
    }
    Some(a.outs.into_iter().flatten().collect())
}

/// An output of a desk's WATCH job ([`send_and_wait`]): kept if its desk
/// still waits for it, dropped otherwise.
pub(super) fn awaited_out(conn: ConnRef, idx: u32, out: commands::coord::JobOut) {
    AWAITED.with(|a| {
        let mut a = a.borrow_mut();
        let Some(a) = a.as_mut().filter(|a| a.gen == conn.gen) else {
            return;
        };
        if let Some(slot) = a.outs.get_mut(idx as usize).filter(|o| o.is_none()) {
            *slot = Some(out);
            a.remaining -= 1;
        }
    });
}
