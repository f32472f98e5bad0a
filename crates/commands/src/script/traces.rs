//! What a script run leaves besides data, held back while the run may
//! still be taken back: its calls' statistics (INFO commandstats,
//! errorstats, latencystats, total_commands_processed,
//! total_error_replies, and each shard's keyspace_hits and
//! keyspace_misses), their MONITOR lines, their SLOWLOG entries and
//! its `redis.log` lines.
//!
//! A run that may be abandoned and run again (`wide`, `in_place`,
//! `every`, `busy::by_call`: `Run::widen_ok` or `Run::restartable`) runs
//! its calls for real, so each records as any call. Redis runs the script
//! once: an abandoned run's records must vanish, or each call of it counts
//! twice. Statistics are recorded as usual and taken back on abandonment
//! ([`Journal`]): counters are cheap to restore and a completed run, the
//! common case, pays a few instructions a call. MONITOR lines, slowlog
//! entries and log lines cannot be taken back once another client has
//! seen them, so they are held ([`hold_monitor`], [`hold_slow`],
//! [`hold_log`]) and sent when the run completes. So are its PUBLISH and
//! SPUBLISH messages ([`hold_publish`]): prepared at the call (its reply
//! is the receiver count then), delivered when the run completes, dropped
//! if it is taken back. In Redis a script's messages reach subscribers
//! after the script anyway (one thread runs both), so holding them changes
//! nothing a subscriber can see, and a run that published can still be
//! taken back and run again (holding every shard, or over more keys). Both cost nothing to a
//! run that cannot be abandoned (one branch a call); the held traces,
//! nothing unless someone monitors, a call is slow, or the script logs.
//!
//! Rejected: recording an abandonable run's statistics into a separate
//! `ThreadStats` and merging it on completion: a merge passes over every
//! command's slot (~15 k instructions, see `vm::lend_stats`), and every
//! path that records (`exec::run_shard`'s included) would need the other
//! sink.
//!
//! Bounds: [`CALLS_MAX`] calls journaled one by one (beyond, only each
//! command's first call: its counters are still restored exactly, its
//! latency histogram loses the later calls' samples at their mean), and
//! [`HELD_MAX`] held traces per run (beyond, they are sent at once; a
//! PUBLISH beyond makes the run final: what it held goes out then, in
//! order, [`release`]).

use std::cell::{Cell, RefCell};

use crate::ctx::{CmdStat, ThreadStats};

/// Calls journaled one by one in a run (40 bytes each).
const CALLS_MAX: usize = 1024;

/// Traces held per run before they go out at once.
const HELD_MAX: usize = 4096;

/// What an abandonable run's statistics were, to restore them.
pub(crate) struct Journal {
    /// Each call's command and its counters before the call.
    calls: Vec<(usize, CmdStat)>,
    /// Commands with a call in `calls` (a bit per command id).
    seen: Vec<u64>,
    total_commands: u64,
    total_error_replies: u64,
    unexpected_error_replies: u64,
    /// Each error code's count, in `ThreadStats::errors`' order.
    errors: Vec<u64>,
    /// Each shard its calls ran on, with its keyspace hits and misses
    /// before the first (keys it expired stay expired: their count too).
    shards: Vec<(usize, u64, u64)>,
}

/// A trace held until the run completes.
enum Held {
    Monitor(Vec<u8>),
    Slow {
        name: &'static str,
        argv: resp::OwnedArgs,
        us: u64,
        client: u64,
    },
    Log(bool, String),
    /// A PUBLISH or SPUBLISH: its deliveries, prepared at the call (the
    /// receivers and their count then), sent when the run completes.
    Publish(Vec<crate::pubsub::Batch>),
}

thread_local! {
    /// Whether the running script may be taken back: its traces are held.
    static HOLDING: Cell<bool> = const { Cell::new(false) };
    static HELD: RefCell<Vec<Held>> = const { RefCell::new(Vec::new()) };
}

impl Journal {
    /// Starts the journal of a run that may be abandoned, `stats` being
    /// what its calls record into, in `spare` (an earlier run's, emptied)
    /// if given; its traces are held from now on.
    pub(crate) fn begin(stats: &ThreadStats, spare: Option<Box<Journal>>) -> Box<Journal> {
        let mut j = spare.unwrap_or_else(|| {
            Box::new(Journal {
                calls: Vec::with_capacity(16),
                seen: Vec::new(),
                total_commands: 0,
                total_error_replies: 0,
                unexpected_error_replies: 0,
                errors: Vec::new(),
                shards: Vec::new(),
            })
        });
        j.total_commands = stats.total_commands;
        j.total_error_replies = stats.total_error_replies;
        j.unexpected_error_replies = stats.unexpected_error_replies;
        j.errors.clear();
        j.errors.extend(stats.errors.iter().map(|e| e.1));
        HOLDING.with(|h| h.set(true));
        j
    }

    /// Before a call of command `id` records anything (a refusal
    /// included).
    #[inline]
    pub(crate) fn note(&mut self, stats: &ThreadStats, id: usize) {
        let Some(&before) = stats.cmd.get(id) else {
            return;
        };
        let (word, bit) = (id / 64, 1u64 << (id % 64));
        if self.seen.len() <= word {
            self.seen.resize(word + 1, 0);
        }
        if self.calls.len() < CALLS_MAX || self.seen[word] & bit == 0 {
            self.seen[word] |= bit;
            self.calls.push((id, before));
        }
    }

    /// Before a call on `shard` (a shard command's).
    #[inline]
    pub(crate) fn note_shard(&mut self, shard: &engine::Shard) {
        if !self.shards.iter().any(|&(id, ..)| id == shard.id) {
            let st = &shard.stats;
            self.shards
                .push((shard.id, st.keyspace_hits, st.keyspace_misses));
        }
    }

    /// The run completed: its records stand, its held traces go out.
    /// Returns the journal emptied, for the next run.
    pub(crate) fn keep(self: Box<Self>, ops: &crate::ops::Ops) -> Box<Journal> {
        HOLDING.with(|h| h.set(false));
        send_held(ops);
        self.reset()
    }

    /// The run was abandoned: `stats`, and each shard's keyspace hits and
    /// misses (`on` runs its argument on a shard, by id), as before it;
    /// its held traces dropped.
    pub(crate) fn take_back(
        self: Box<Self>,
        stats: &mut ThreadStats,
        mut on: impl FnMut(usize, &mut dyn FnMut(&mut engine::Shard)),
    ) -> Box<Journal> {
        for &(id, hits, misses) in &self.shards {
            on(id, &mut |sh| {
                sh.stats.keyspace_hits = hits;
                sh.stats.keyspace_misses = misses;
            });
        }
        HOLDING.with(|h| h.set(false));
        HELD.with(|h| h.borrow_mut().clear());
        // Latest first: each entry's counters are those before its call,
        // so what a call added is the difference to what follows it.
        for &(id, before) in self.calls.iter().rev() {
            let now = stats.cmd[id];
            let n = now.calls.saturating_sub(before.calls);
            // One call, or (past CALLS_MAX) several at their mean.
            let mean = now.usec.saturating_sub(before.usec).checked_div(n);
            if let (Some(us), Some(Some(h))) = (mean, stats.hist.get_mut(id)) {
                for _ in 0..n {
                    h.unrecord(us.saturating_mul(1000));
                }
                // Made by this run: INFO latencystats lists no command
                // without a call.
                if h.total == 0 {
                    stats.hist[id] = None;
                }
            }
            stats.cmd[id] = before;
        }
        stats.total_commands = self.total_commands;
        stats.total_error_replies = self.total_error_replies;
        stats.unexpected_error_replies = self.unexpected_error_replies;
        stats.errors.truncate(self.errors.len());
        for (e, &n) in stats.errors.iter_mut().zip(&self.errors) {
            e.1 = n;
        }
        self.reset()
    }

    /// Emptied for the next run.
    fn reset(mut self: Box<Self>) -> Box<Journal> {
        for &(id, _) in &self.calls {
            if let Some(w) = self.seen.get_mut(id / 64) {
                *w = 0;
            }
        }
        self.calls.clear();
        self.shards.clear();
        if self.calls.capacity() > CALLS_MAX * 2 {
            self.calls.shrink_to(CALLS_MAX);
        }
        self
    }
}

/// Holds `f()`'s trace if the running script may be taken back and
/// there is room; else returns it to be sent now.
fn hold(f: impl FnOnce() -> Held) -> Option<Held> {
    if !HOLDING.with(Cell::get) {
        return Some(f());
    }
    HELD.with(|h| {
        let mut h = h.borrow_mut();
        if h.len() >= HELD_MAX {
            return Some(f());
        }
        h.push(f());
        None
    })
}

/// MONITOR: a script call's `line`, held if the run may be taken back.
/// Returns the line to send now otherwise.
pub(crate) fn hold_monitor(line: Vec<u8>) -> Option<Vec<u8>> {
    match hold(|| Held::Monitor(line))? {
        Held::Monitor(l) => Some(l),
        _ => None,
    }
}

/// SLOWLOG: whether a slow call of a script was held (then it is logged
/// when the run completes, nothing if it is taken back). Not held outside
/// an abandonable run: the caller logs it.
pub(crate) fn hold_slow(name: &'static str, args: resp::Args<'_>, us: u64, client: u64) -> bool {
    if !HOLDING.with(Cell::get) {
        return false;
    }
    let held = hold(|| {
        let mut argv = resp::OwnedArgs::default();
        argv.extend(args);
        Held::Slow {
            name,
            argv,
            us,
            client,
        }
    });
    held.is_none()
}

/// `redis.log`: whether the line was held (see [`hold_slow`]).
pub(crate) fn hold_log(warning: bool, line: &str) -> bool {
    HOLDING.with(Cell::get) && hold(|| Held::Log(warning, line.to_string())).is_none()
}

/// Whether a PUBLISH of the running script can be held ([`hold_publish`])
/// with room left for the call's MONITOR line: the run then stays one
/// that can be taken back.
pub(crate) fn may_hold_publish() -> bool {
    HOLDING.with(Cell::get) && HELD.with(|h| h.borrow().len() + 2 <= HELD_MAX)
}

/// PUBLISH / SPUBLISH: holds the deliveries if the running script may be
/// taken back (one past [`HELD_MAX`] at most: [`may_hold_publish`] said
/// there was room); else returns them to be sent now.
pub(crate) fn hold_publish(
    per_thread: Vec<crate::pubsub::Batch>,
) -> Option<Vec<crate::pubsub::Batch>> {
    if !HOLDING.with(Cell::get) {
        return Some(per_thread);
    }
    HELD.with(|h| {
        let mut h = h.borrow_mut();
        if h.len() > HELD_MAX {
            return Some(per_thread);
        }
        h.push(Held::Publish(per_thread));
        None
    })
}

/// The running script became one that cannot be taken back (it is about
/// to publish with no room to hold it): what it held goes out now and
/// nothing more is held, so its traces and messages keep their order.
pub(crate) fn release(ops: &crate::ops::Ops) {
    if HOLDING.with(|h| h.replace(false)) {
        send_held(ops);
    }
}

/// Sends what the completed run held, in its order.
fn send_held(ops: &crate::ops::Ops) {
    if HELD.with(|h| h.borrow().is_empty()) {
        return;
    }
    let mut held = HELD.with(|h| std::mem::take(&mut *h.borrow_mut()));
    for t in held.drain(..) {
        match t {
            Held::Monitor(line) => crate::ops::monitor::send_line(ops, line),
            Held::Slow {
                name,
                argv,
                us,
                client,
            } => ops.slowlog.push(name, argv.args(), us, client, None),
            Held::Log(warning, line) => crate::persist::log(warning, &line),
            Held::Publish(per_thread) => {
                if let Some(ps) = ops.pubsub.get() {
                    ps.deliver(per_thread);
                }
            }
        }
    }
    // The buffer back for the next run.
    HELD.with(|h| {
        let mut h = h.borrow_mut();
        if h.is_empty() && held.capacity() <= HELD_MAX {
            *h = held;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_back_restores_counters_errors_and_histogram() {
        let mut stats = ThreadStats::default();
        stats.count_error(b"ERR old");
        stats.cmd[3].calls = 5;
        stats.cmd[3].usec = 50;
        stats.histogram(3).record(10_000);
        let before = stats.clone();
        let j = Journal::begin(&stats, None);
        let mut j = j;
        for us in [7u64, 9] {
            j.note(&stats, 3);
            stats.cmd[3].calls += 1;
            stats.cmd[3].usec += us;
            stats.cmd[3].failed_calls += 1;
            stats.total_commands += 1;
            stats.histogram(3).record(us * 1000);
        }
        j.note(&stats, 4);
        stats.cmd[4].rejected_calls += 1;
        j.note(&stats, 5);
        stats.cmd[5].calls += 1;
        stats.cmd[5].usec += 2;
        stats.histogram(5).record(2000);
        stats.count_error(b"ERR again");
        stats.count_error(b"WRONGTYPE new");
        let spare = j.take_back(&mut stats, |_, _| {});
        assert_eq!(stats.cmd[3].calls, before.cmd[3].calls);
        assert_eq!(stats.cmd[3].usec, before.cmd[3].usec);
        assert_eq!(stats.cmd[3].failed_calls, 0);
        assert_eq!(stats.cmd[4].rejected_calls, 0);
        assert_eq!(stats.total_commands, before.total_commands);
        assert_eq!(stats.total_error_replies, 1);
        assert_eq!(stats.errors, vec![("ERR".to_string(), 1)]);
        let h = stats.hist[3].as_deref().unwrap();
        assert_eq!(h.total, 1);
        assert_eq!(h.percentile(100.0) / 1000, 10);
        assert!(stats.hist[5].is_none(), "no histogram without a call");
        // The spare journal starts clean.
        let j = Journal::begin(&stats, Some(spare));
        assert!(j.calls.is_empty() && j.seen.iter().all(|&w| w == 0));
        let _ = j.keep(crate::ops::Ops::leak(&config::Config::default()));
    }

    #[test]
    fn past_calls_max_counters_stay_exact() {
        let mut stats = ThreadStats::default();
        let mut j = Journal::begin(&stats, None);
        for _ in 0..CALLS_MAX + 10 {
            j.note(&stats, 1);
            stats.cmd[1].calls += 1;
            stats.cmd[1].usec += 3;
        }
        j.note(&stats, 2);
        stats.cmd[2].calls += 1;
        assert_eq!(j.calls.len(), CALLS_MAX + 1);
        let _ = j.take_back(&mut stats, |_, _| {});
        assert_eq!((stats.cmd[1].calls, stats.cmd[1].usec), (0, 0));
        assert_eq!(stats.cmd[2].calls, 0);
    }

    #[test]
    fn traces_held_only_while_a_run_may_be_taken_back() {
        assert_eq!(hold_monitor(b"x".to_vec()), Some(b"x".to_vec()));
        let stats = ThreadStats::default();
        let j = Journal::begin(&stats, None);
        assert_eq!(hold_monitor(b"y".to_vec()), None);
        assert!(hold_log(false, "line"));
        let mut stats = stats;
        let _ = j.take_back(&mut stats, |_, _| {});
        assert!(HELD.with(|h| h.borrow().is_empty()));
        assert!(!hold_log(false, "line"));
    }

    #[test]
    fn publications_held_then_sent_or_dropped() {
        let one = || vec![Vec::new()];
        assert!(!may_hold_publish());
        assert!(hold_publish(one()).is_some(), "sent now outside a run");
        let mut stats = ThreadStats::default();
        let j = Journal::begin(&stats, None);
        assert!(may_hold_publish());
        assert!(hold_publish(one()).is_none());
        let _ = j.take_back(&mut stats, |_, _| {});
        assert!(HELD.with(|h| h.borrow().is_empty()), "dropped with the run");
        let ops = crate::ops::Ops::leak(&config::Config::default());
        let j = Journal::begin(&stats, None);
        assert!(hold_publish(one()).is_none());
        release(ops);
        assert!(HELD.with(|h| h.borrow().is_empty()), "sent at the release");
        assert!(!may_hold_publish() && hold_publish(one()).is_some());
        let _ = j.keep(ops);
    }
}
