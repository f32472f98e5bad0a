//! What a lent inbox answers while its loop's script is busy, and what it
//! keeps: remote batches answered `-BUSY`, lock requests withdrawn
//! (`tx::BusyWithdrawn`), release-only works answered at once, under the
//! conditions that keep each connection's replies and effects in order
//! (see the module documentation of `busy`).

use resp::Reply;

use super::super::super::mailbox::{Batch, ConnRef, Msg};
use super::super::Deferred;
use super::inbox::Inbox;

/// Whether a work that only releases its transaction's locks here (a
/// release-only work: no lock, [`commands::coord::JobFn::noop`]) may be
/// answered now on this busy shard, its release done after the script
/// ([`released_now`]): typically a transaction withdrawn (`-BUSY`) at
/// another shard the script's transaction locks, which held a lock here
/// since before the script ran. Kept as it came, its coordinator's reply
/// would wait for the script's end. Under [`lock_refusable`]'s other
/// conditions (its home is another loop, no earlier work of its
/// connection held here), and only if its transaction wrote nothing here
/// (no records of it to hand the append-only file at the release).
pub(super) fn release_now(ib: &Inbox<'_>, conn: ConnRef, work: &commands::coord::Work) -> bool {
    let Some(tx) = work.release else {
        return false;
    };
    work.lock.is_none()
        && work.job.is_noop()
        && conn.thread as usize != ib.id
        && !ib.deferred.iter().any(|d| d.conn == conn)
        && !ib.kept.iter().any(|m| kept_conn(m) == Some(conn))
        && !ib
            .aof_tx
            .iter()
            .any(|(c, t, parts)| *c == conn && *t == tx.get() && !parts.is_empty())
        && ib.busy.refuse_if_busy(Some(&[ib.id])).is_some()
}

/// Answers a release-only work's coordinator now ([`release_now`]), as
/// its job would (`()`), and keeps the work for after the script (before
/// anything newer, as every kept message): nothing runs on this shard
/// meanwhile, and the release then grants what it lets pass. Kept for a
/// connection of no one (`worker::DESK_SLOT` of this loop: its output is
/// dropped), so that its connection's next commands are not held behind
/// it; its transaction's empty records entry goes now.
pub(super) fn released_now(
    ib: &mut Inbox<'_>,
    conn: ConnRef,
    idx: u32,
    gather: Option<std::sync::Arc<super::super::super::mailbox::Gather>>,
    work: commands::coord::Work,
) {
    if let Some(tx) = work.release.map(|t| t.get()) {
        ib.aof_tx.retain(|(c, t, _)| !(*c == conn && *t == tx));
    }
    job_out_home(ib, conn, idx, gather, Box::new(()));
    let nobody = ConnRef {
        thread: ib.id as u16,
        slot: super::super::DESK_SLOT,
        gen: 0,
    };
    ib.kept.push_back(Msg::Job {
        conn: nobody,
        idx: 0,
        work,
        gather: None,
    });
}

/// Whether a transaction's lock request for this busy shard (a work
/// carrying `lock`) may be answered `-BUSY` instead of waiting for the
/// script's end: its transaction did not say to keep it
/// (`LockReq::keep_when_busy`), its home is another loop (this one's
/// coordinators wait for the script anyway), and no earlier work of its
/// connection is held here.
pub(super) fn lock_refusable(
    ib: &Inbox<'_>,
    conn: ConnRef,
    lock: Option<&commands::tx::LockReq>,
) -> bool {
    lock.is_some_and(|r| !r.keep_when_busy)
        && conn.thread as usize != ib.id
        && !ib.deferred.iter().any(|d| d.conn == conn)
        && !ib.kept.iter().any(|m| kept_conn(m) == Some(conn))
}

/// Answers a withdrawn lock request's coordinator (`tx::BusyWithdrawn`):
/// it releases what it holds elsewhere and replies `e`.
pub(super) fn withdrawn(
    ib: &mut Inbox<'_>,
    conn: ConnRef,
    idx: u32,
    gather: Option<std::sync::Arc<super::super::super::mailbox::Gather>>,
    e: &commands::CmdError,
) {
    let line = String::from_utf8_lossy(&e.line()).into_owned();
    let out: commands::coord::JobOut = Box::new(commands::tx::BusyWithdrawn { line });
    job_out_home(ib, conn, idx, gather, out);
}

/// Sends a job's output to its coordinator's loop: into its gather when
/// its round went to several threads (the last output in sends them
/// home), as the shard side's `job_out` does.
fn job_out_home(
    ib: &mut Inbox<'_>,
    conn: ConnRef,
    idx: u32,
    gather: Option<std::sync::Arc<super::super::super::mailbox::Gather>>,
    out: commands::coord::JobOut,
) {
    let home = conn.thread as usize;
    match gather {
        None => ib.mailbox.send(
            home,
            Msg::JobDone {
                conn,
                idx,
                out,
                aof: 0,
            },
        ),
        Some(g) => {
            if g.add(idx, out, 0) {
                ib.mailbox.send(home, Msg::JobsDone { conn, gather: g });
            }
        }
    }
}

/// Lock requests of other transactions that waited in this busy shard's
/// table since before its script ran (it took the shard first) are
/// withdrawn and answered `-BUSY`, under [`lock_refusable`]'s conditions.
/// Nothing is granted here (the shard
/// is the script's): what the withdrawals let pass is granted at the
/// script's release.
pub(super) fn withdraw_waiting(ib: &mut Inbox<'_>) {
    if ib.locks.waiting_len() == 0 {
        return;
    }
    let Some(e) = ib.busy.refuse_if_busy(Some(&[ib.id])) else {
        return;
    };
    let id = ib.id;
    let gone = ib.locks.withdraw_for_busy(|w| w.conn.thread as usize != id);
    for (req, w) in gone {
        ib.aof_tx
            .retain(|(c, tx, parts)| !(*c == w.conn && *tx == req.tx && parts.is_empty()));
        withdrawn(ib, w.conn, w.idx, w.gather, &e);
    }
}

/// Remote batches this shard held back behind a lock before its script
/// was published (a script under its transaction's locks, which took the
/// shard before it ran: `commands::script::busy::under_locks`) are
/// answered `-BUSY` as those arriving now are, under the same conditions
/// ([`refusable`]: none of their connection's work held before them),
/// if none of their commands ran yet.
pub(super) fn refuse_deferred(ib: &mut Inbox<'_>) {
    if ib.deferred.is_empty() {
        return;
    }
    let Some(e) = ib.busy.refuse_if_busy(Some(&[ib.id])) else {
        return;
    };
    let line = e.line();
    let mut i = 0;
    while i < ib.deferred.len() {
        let d = &ib.deferred[i];
        let conn = d.conn;
        let whole = match &d.what {
            super::super::Held::Batch { batch, next: 0, .. } => batch.ends.is_empty(),
            _ => false,
        };
        let first = !ib.deferred.iter().take(i).any(|e| e.conn == conn);
        if !(whole && first) {
            i += 1;
            continue;
        }
        // Taken out first: `refusable` looks at what is held besides it.
        let Some(d) = ib.deferred.remove(i) else {
            return;
        };
        match d.what {
            super::super::Held::Batch { batch, .. } if refusable(ib, conn, &batch) => {
                refuse_batch(ib, conn, batch, &line);
            }
            what => {
                ib.deferred.insert(i, Deferred { conn, what });
                i += 1;
            }
        }
    }
}

/// Whether a remote batch may be answered `-BUSY` now: no earlier work of
/// its connection is held on this shard (its replies and effects keep
/// their order) and none of its commands may run while busy.
pub(super) fn refusable(ib: &Inbox<'_>, conn: ConnRef, batch: &Batch) -> bool {
    conn.thread as usize != ib.id
        && !batch
            .cmds
            .iter()
            .any(|c| c.resolved.spec.has(commands::table::flags::ALLOW_BUSY))
        && !ib.deferred.iter().any(|d| d.conn == conn)
        && !ib.kept.iter().any(|m| kept_conn(m) == Some(conn))
}

/// The connection a kept message is work of, on this shard.
fn kept_conn(m: &Msg) -> Option<ConnRef> {
    match m {
        Msg::Exec { conn, .. } | Msg::Job { conn, .. } | Msg::Park { conn, .. } => Some(*conn),
        _ => None,
    }
}

/// Answers every command of `batch` with `line` and sends it home as the
/// shard side would (a direct reply written to the client first).
/// Each is counted as Redis's `rejectCommand` counts it (the command's
/// `rejected_calls`, the error's code, `total_error_replies`).
pub(super) fn refuse_batch(ib: &mut Inbox<'_>, conn: ConnRef, mut batch: Box<Batch>, line: &[u8]) {
    let b = &mut *batch;
    let mut out = Reply::from_vec(std::mem::take(&mut b.reply), false);
    let stats = ib.tally.get();
    for cmd in &b.cmds[b.ends.len()..] {
        out.set_resp3(cmd.resp3);
        out.error_bytes(line);
        b.ends.push(out.len());
        commands::exec::count_rejected(stats, Some(cmd.resolved.id));
        stats.count_error(line);
    }
    b.reply = out.into_bytes();
    let home = conn.thread as usize;
    if let Some(direct) = b.direct {
        let n = direct.write(&b.reply);
        b.direct_written = n;
        ib.tally.get().net_output_bytes += n as u64;
        if n == b.reply.len() {
            ib.mailbox.send_lazy(home, Msg::ExecDone { conn, batch });
            return;
        }
    }
    ib.mailbox.send(home, Msg::ExecDone { conn, batch });
}
