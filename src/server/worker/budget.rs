//! A turn's budget: a hub's turn of a loop reads no more sockets once it
//! has run [`TURN_BUDGET`](super::clock::TURN_BUDGET); the connections it
//! would have read are read first thing at the loop's next turn.
//!
//! Why: a hub runs its loops' turns one after another, and the watchdog
//! (`server::host`) takes a hub whose turn lasts `STUCK` (5 ms) for one
//! stuck in a long command (a script past `busy-reply-threshold`, a KEYS
//! over a large keyspace, DEBUG SLEEP) and gives its other loops back to
//! their threads, so that their clients are served meanwhile. A turn can
//! also be long because it serves many short commands: with 50 clients
//! pipelining 16 MSETs of 10 keys on 2 shards, each loop's 25 clients
//! sent 400 MSETs at once, and one turn took 5-9 ms. The watchdog found
//! such rounds stuck and spread the hub's loops on every one of them (one
//! hub: 9.3 µs of server CPU per MSET and 108k MSETs/s; spread: 15.7 µs
//! and 62k/s over the run, even with each spread called back when it did
//! not pay). Bounded, such a turn ends within about a millisecond and
//! the next round goes on where it stopped: the hub is never "stuck" by
//! ordinary work, and its other loops are served between its turns, as
//! Redis's event loop serves its clients between reads. A long command
//! still runs to its end in one turn (nothing can cut it short), and is
//! found stuck as before.
//!
//! How: the turn counts its commands (`ThreadStats::total_commands`, which
//! it updates anyway) and reads the clock only every [`LOOK_EVERY`] of
//! them, so a turn of one or two requests (pipeline 1) never reads it.
//! A drain of the mailbox looks every [`LOOK_EVERY`] messages, and stops
//! once the budget is spent (the messages left keep the loop due, as
//! those past `DRAIN_BUDGET` do): a loop adopted by a hub found, in its
//! first turn there, the hops its clients' MSETs had sent while it ran
//! alone, and that turn was found stuck (7-11 ms under load).
//! Once the budget is spent, a connection about to read its socket does
//! not (`Worker::read_lent`): it is marked `unread` and `deferred`, and
//! listed. At the end of the turn the listed connections go on the resume
//! list (which makes the loop due at once: `Worker::wakes_at`), and the
//! next turn runs the resume list before its socket events, so a deferred
//! connection is read before newer ones, and none waits for more than the
//! turns its predecessors take. A loop on its own thread (`step_solo`) has
//! no budget: nothing judges its turns.
//!
//! Per thread: two words, a flag and a list of at most the loop's
//! connections; per request, one comparison.

use std::time::Instant;

use super::Worker;

/// Commands a budgeted turn runs between two looks at the clock: at about
/// 1-25 µs each (SET to MSET of 10 keys over 32 shards, release build), a
/// look every 0.02-0.4 ms, for a clock read (~100 ns on this VM) per 16
/// commands.
const LOOK_EVERY: u64 = 16;

/// A turn's budget and the connections it left unread.
#[derive(Default)]
pub(super) struct Turn {
    /// Past this the turn reads no more sockets (`None`: no budget).
    until: Option<Instant>,
    /// The command count at which the clock is next read.
    look_at: u64,
    /// The budget ran out: every read of this turn is deferred.
    spent: bool,
    /// Connections whose read was deferred, in order.
    deferred: Vec<usize>,
    /// The last turn deferred reads: this one runs the resume list first.
    carried: bool,
}

impl Worker {
    /// A turn begins: its budget, if it has one (`until`).
    #[inline]
    pub(super) fn begin_turn(&mut self, until: Option<Instant>) {
        let t = &mut self.turn;
        t.until = until;
        t.spent = false;
        t.look_at = self.core.stats.total_commands.saturating_add(LOOK_EVERY);
    }

    /// Whether this turn's budget is spent (read on a command count, then
    /// the clock; CONFIG RESETSTAT within the turn only delays the look).
    #[inline]
    pub(super) fn turn_spent(&mut self) -> bool {
        let t = &mut self.turn;
        if t.spent {
            return true;
        }
        let Some(until) = t.until else {
            return false;
        };
        let done = self.core.stats.total_commands;
        if done < t.look_at {
            return false;
        }
        t.look_at = done.saturating_add(LOOK_EVERY);
        t.spent = Instant::now() >= until;
        t.spent
    }

    /// Whether this turn's budget is spent, for a drain that has handled
    /// `handled` messages (the clock read every [`LOOK_EVERY`] of them):
    /// a message is a command's part on this shard (a hop's batch, a
    /// transaction's job), which the command counter does not count.
    #[inline]
    pub(super) fn drain_spent(&mut self, handled: usize) -> bool {
        let t = &mut self.turn;
        if t.spent {
            return true;
        }
        let Some(until) = t.until else {
            return false;
        };
        if !(handled as u64).is_multiple_of(LOOK_EVERY) {
            return false;
        }
        t.spent = Instant::now() >= until;
        t.spent
    }

    /// Connection `slot` (`c`, out of its slot) reads at the next turn.
    pub(super) fn defer_read(&mut self, c: &mut crate::server::conn::Conn, slot: usize) {
        c.unread = true;
        if !c.deferred {
            c.deferred = true;
            self.turn.deferred.push(slot);
        }
    }

    /// The turn ends: the reads it deferred go on the resume list, for the
    /// next turn to run first; no budget until the next one begins.
    #[inline]
    pub(super) fn end_turn(&mut self) {
        self.turn.until = None;
        self.turn.spent = false;
        if self.turn.deferred.is_empty() {
            return;
        }
        let Worker { conns, turn, .. } = self;
        for slot in turn.deferred.drain(..) {
            // A connection closed meanwhile (its slot maybe reused) is
            // not deferred any more.
            let Some(c) = conns.slots.get_mut(slot).and_then(|c| c.as_mut()) else {
                continue;
            };
            if c.deferred {
                c.deferred = false;
                conns.resume.push(slot);
            }
        }
        turn.carried = true;
    }

    /// The last turn deferred reads: true once, for this turn to run the
    /// resume list before its socket events.
    #[inline]
    pub(super) fn take_carried(&mut self) -> bool {
        std::mem::take(&mut self.turn.carried)
    }
}
