//! Shard consolidation: which thread runs which shard's event loop.
//!
//! Every shard has its own thread, and normally that thread runs the
//! shard's event loop (its [`Worker`]) alone. While the load is light, a
//! second thread costs more than it brings: each thread sleeps in epoll
//! between requests, and on a VM every sleep and wake-up of an idle vCPU
//! costs a VM exit, besides the eventfd doorbell a cross-shard hop needs.
//! With two shards at pipeline 1, Tessera made 0.2–0.3 context switches per
//! MGET of 10 keys against Redis's 0.004, and lost 10–20 % of throughput to
//! them; `--shards 1` beat Redis by a quarter.
//!
//! # Hubs
//!
//! So a thread whose load fits, with another thread's, well in one core
//! hands its worker to that thread (a *hub*), and sleeps until it gets it
//! back. A hub runs all the workers it holds in turn, as one event loop
//! (its round: `round`):
//! - it sleeps on one epoll set holding their epoll sets (level-triggered:
//!   doorbells, listeners) and their connections themselves (see
//!   `worker::hub_set`), so one wait tells it every worker's socket
//!   events, and any doorbell of theirs wakes it;
//! - before a wait that may sleep it raises every worker's parked flag
//!   (see `mailbox`), and lowers them all when it wakes: while it runs
//!   none is parked, so hops between the workers it holds are ring pushes
//!   and pops with no doorbell (a round that starts with work waiting does
//!   not sleep, and touches no flag);
//! - each worker with work takes a turn: the socket events the wait found
//!   for it, its own set polled without waiting if that was ready, its
//!   messages, served as on its own thread.
//!
//! Any thread running its own worker may be a hub. The policy that picks
//! one (`Hosts::target`), run by each thread alone with its worker at the
//! end of each load window:
//! - only a thread with a lower id: hand-offs never form a cycle, and a
//!   thread that hosts others never hands its own worker away (it would
//!   first have to give theirs back);
//! - the first (lowest id) whose load (its last window's, plus the loads
//!   handed to it since: its "pledged" load) leaves the sum below
//!   [`policy::MERGE_BELOW`]: first fit, so an idle server gathers on thread 0,
//!   and a load that fits in `L` cores on about `ceil(L)` hubs (a little
//!   more: bin packing), not on thread 0 alone. Best fit (the fullest hub
//!   with room) was tried and rejected: near-zero loads differ by noise,
//!   and an idle server with 4 shards ended up on two hubs when thread 1
//!   looked "fuller" than thread 0 for one window and was picked while it
//!   was handing itself to thread 0;
//! - a hub whose load and a lower thread's fit together folds into it
//!   (`fold`): two hubs made under load do not stay apart once idle;
//! - a hub runs at most [`MAX_LOOPS`] loops (its own included), so a round
//!   over its loops stays bounded however many shards there are: with
//!   `N` shards there are at least `ceil(N / MAX_LOOPS)` hubs.
//!
//! A worker is a closed world (its connections, shard, blocked clients,
//! coordinators), and `Send`, so it can move to another thread between
//! iterations; the hand-off goes through mutexes, which order everything
//! the old thread did before everything the new one does. Nothing in the
//! worker depends on which thread runs it, except: allocation accounting
//! (each turn enters the worker's shard), naps (only a worker alone on its
//! own thread naps), and transaction ids (counted per home shard, see
//! `commands::tx`).
//!
//! # Spreading out
//!
//! A worker a hub adopted sits in its *seat* (a mutex per shard), and the
//! hub locks the seat for each of that worker's turns only; its own worker
//! needs no lock. A worker goes back to its own thread:
//! - on a burst, as many workers as the last reading found idle cores (at
//!   least one; the next burst waits for a new reading): the hub was busy
//!   at least [`SPREAD_BUSY`] of the last
//!   [`SPREAD_WINDOW`] (the time it spent in its outer wait is its idle
//!   time: one clock read per round, no syscall), and the machine had an
//!   idle core in the last load window (see [`policy::SPLIT_MIN_IDLE`]: on two
//!   vCPUs with the load generator on one, two threads did worse than one
//!   hub). The check is made between rounds, so it adds nothing to a
//!   request's path; a worker given back is served by its own thread from
//!   its next iteration;
//! - when the hub is stuck in one round for [`STUCK`] (a Lua script past
//!   `busy-reply-threshold`, a KEYS over a large keyspace, DEBUG SLEEP:
//!   one long command), that is, in one loop's *turn* for that long (a
//!   round of many loops each with a heavy pipeline at 32 shards took 5-29
//!   ms and holds no loop hostage: judged by the round, the watchdog gave
//!   shards back 149 times in a 9 s MSET run on two vCPUs, each spread to
//!   be called back). A turn of many short commands is never that long:
//!   it reads no more sockets once it has run `worker::TURN_BUDGET` (1
//!   ms), and the next round goes on where it stopped (`worker::budget`;
//!   before, 50 clients pipelining 16 MSETs of 10 keys on 2 shards made
//!   turns of 5-9 ms, and the watchdog spread the hub on each). Stuck,
//!   the hub cannot act, so a *watchdog* thread
//!   takes back every seat whose lock it gets (all but the worker running).
//!   Their clients are then served by their own threads, get `-BUSY` for the
//!   stuck shard's keys, and can send SCRIPT KILL. When the round ends the
//!   hub gives back the rest (the worker that ran). A turn is stuck only
//!   if the hub ran: the watchdog reads the hub's CPU clock (by thread id,
//!   only for turns older than a tick) and needs it to have run [`STUCK`]
//!   of CPU since it first saw the turn, or the round to have lasted
//!   [`STUCK_ANYWAY`]. On two vCPUs at load 5-10, hub rounds of ordinary
//!   SETBITs lasted 5-83 ms every few seconds while the hub ran 0.1-3.8
//!   ms of them: giving its loops back then only added threads to the run
//!   queue, for the rest of the run. (Half the wall time since, the rule
//!   before, took turns of a few MSETs that ran 2-3 ms of CPU for stuck:
//!   `policy::turn_running`.) The watchdog wakes every
//!   [`WATCH_MIN`] while some hub is in a round, backing off to
//!   [`WATCH_MAX`] while the hubs sleep, and sleeps for good while no
//!   worker is adopted (then nothing is consolidated and it costs nothing);
//! - when `shard-consolidation` is turned off, and at shutdown (each
//!   worker goes to the shutdown gate from its own thread).
//!
//! What a stuck hub cannot free: the loop running the long command, and
//! its own loop (a thread's own worker lives on its stack, not in a seat).
//! For a long script on an adopted loop, the own loop is idle (its turn
//! is over), and so is the thread of the loop running the script (it
//! waits for its worker, whose seat the hub holds): at the script's first
//! busy pass the hub lends its own worker to that thread until the
//! round's adopted turns end (`loan`), where it is served as any loop
//! whose shard the script does not hold (issue 23 point 5). When it
//! cannot be lent (a run in place pinned it) it is served from the
//! script's hook instead, in Redis's busy mode, as the script's own loop
//! is (`worker::lending_own`): `-BUSY`, SCRIPT KILL, SHUTDOWN NOSAVE.
//! For any other long command its clients wait for the command as they
//! would without consolidation. Workers handed to it and not adopted yet
//! go back too.
//!
//! After a burst or a stuck round a worker is not taken again for a while,
//! doubling each time it comes back soon after merging, so a load at the
//! edge does not make workers shuttle.
//!
//! # Does a spread pay?
//!
//! An idle core is no proof that a second thread helps: on two vCPUs with
//! redis-benchmark on one, SETBIT at pipeline 1 cost 6.3 µs of server CPU
//! per request on one hub and 7.4–7.9 µs on two threads (27k context
//! switches per 100k requests against 9k), for no more throughput. So a
//! spread on a burst is a trial:
//! - *before*: what the hub achieved over its run of busy
//!   [`SPREAD_WINDOW`]s that ended in the spread, the first left out (the
//!   burst's ramp: a load generator's connections being accepted), at
//!   least `policy::BEFORE_WINDOWS` of them (requests per second, CPU per
//!   request: its CPU clock and its loops' command counts, read once per
//!   span). So a burst spreads 25 ms after it began; with nothing to
//!   compare with, it does not spread;
//! - *after*: what the group (the hub's thread and the threads given their
//!   workers back; every worker the hub held) achieved over the next
//!   [`TRIAL`]: the threads' CPU clocks (read by thread id, see
//!   `policy::thread_cpu_ns_of`) and the workers' command counts (each
//!   published by the thread running it once per turn, a relaxed store);
//! - if the throughput rose less than 10 % while the CPU per request rose
//!   (`policy::pays`), the hub calls the workers back (their threads hand
//!   them over at their next iteration, whatever the loads) and spreads no
//!   more for a backoff that doubles with each spread that did not pay (1
//!   to 64 s), and ends when the hub's request rate over a load window is
//!   half or twice the one of that spread (the load changed).
//!
//! The spread itself does not wait for the trial; only the judgment comes
//! later. On many cores a real burst's throughput rises with the threads,
//! and they stay, but not for good: a verdict holds for the load it was
//! made under, so a spread that paid (or that had no verdict: its hub was
//! away past `TRIAL_STALE`) is *reviewed* after `policy::REVIEW_MIN`,
//! doubling up to 64 s while it keeps paying: the hub calls its workers
//! back, and if the load is still a burst it spreads again, on a trial
//! judged against the hub's steady rate. Two saturated threads never meet
//! the merge condition on their own.
//!
//! The workers a stuck round gave back are on trial too (reviewed if the
//! hub had no window to compare with), from the end of
//! the round, compared with the hub's last load window: one long command
//! (or a hub kept off its core for [`STUCK_ANYWAY`] by a busy machine)
//! does not leave the workers spread for the rest of a load that does not
//! need it.
//! A stuck give-back that did not pay also doubles how long the hub's next
//! turn must last to be stuck (5, 10, 20 ... up to [`STUCK_ANYWAY`]), and
//! one that paid, or a load that changed, puts it back to [`STUCK`]: turns
//! of 5-37 ms of ordinary work on a host with steal time (32 shards, MSET
//! of 10 keys at pipeline 1) otherwise spread all the hub's loops every
//! second or so, each spread called back 50 ms later.
//!
//! # Cost as N grows
//!
//! For `N` shards and a hub holding `k <= MAX_LOOPS` loops:
//! - a hub's round reads each of its loops a few words with no lock (the
//!   ready set, see `round`: its `due`, kept from its last turn, its
//!   doorbell's ready words and pub/sub flag, its host; before a wait
//!   that may sleep, its parked flag raised and lowered): O(k) loads and
//!   stores per round, bounded by `MAX_LOOPS`, not by `N`. Only the loops
//!   with work (a socket event or ready own set in the outer wait, mail,
//!   a timer due) are locked (an uncontended lock and unlock of the seat:
//!   two atomic read-modify-writes) and take their turn, each with one
//!   clock read, a relaxed store (its start, for the watchdog) and its
//!   `due` asked after it; a loop lent a job is locked once more, before
//!   the next wait, to ask its `due` again. Before, every round locked
//!   and asked every loop, twice: with 32 loops on a hub, about 0.35k
//!   instructions per SET at pipeline 1. Under `appendfsync always` with
//!   every shard on one hub, two more locked passes per round for the
//!   AOF lead, only while some loop's last iteration led;
//! - system calls: one `epoll_wait` per round whatever `k` (plus one per
//!   loop whose doorbell rang or listener fired); moving a worker in or
//!   out of a hub costs two `epoll_ctl` per connection. Measured
//!   (`bench/hub_syscalls.sh`, 50 clients): 2.1-2.2 system calls per SET
//!   or MSET at pipeline 1 and 0.14-0.17 at pipeline 16 with 2 and 32
//!   loops on one hub alike;
//! - each thread alone with its worker looks for a hub at the end of each
//!   load window ([`WINDOW`]): O(N) relaxed loads per thread per window,
//!   so O(N²) loads per window over the process (64 threads: 4096 loads
//!   per 100 ms);
//! - the watchdog: O(N) relaxed loads per tick while some worker is
//!   adopted;
//! - spreading on trial: per [`SPREAD_WINDOW`] a hub reads its CPU clock
//!   and one counter per loop (O(k)); a trial reads one CPU clock per
//!   thread of its group and one counter per worker, once; each turn
//!   stores its worker's command count (one relaxed store, no sharing on
//!   the request path);
//! - memory: per thread one padded slot, one inbox and one seat: O(N).

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use mio::Events;

use super::shutdown::Gate;
use super::worker::Worker;
use crate::log;

mod fold;
mod loan;
mod policy;
mod round;
mod trial;
mod watchdog;
use policy::{
    busy_of, cpu_ticks, gettid, idle_between, merge_wanted, next_hold, spread_count, spread_wanted,
    thread_cpu_ns, thread_cpu_ns_of, Backoff, Figures, Permille, HOLD_MAX, HOLD_MIN, REVIEW_MIN,
    SPREAD_BUSY, SPREAD_WINDOW, TRIAL, TRIAL_STALE,
};
use round::{each_adopted, epoll_add, Wakeups};
use trial::{Burst, Review, Trial};

/// A worker on its way between threads (a worker is `Send`: everything
/// it holds is its own or thread-safe shared state).
pub struct Hosted(Box<Worker>);

/// Length of a load window.
const WINDOW: Duration = Duration::from_millis(100);

/// Loops one hub runs at most, its own included. A round visits every
/// loop the hub holds (see "Cost as N grows"), so this bounds a round's
/// overhead and the latency a request can wait behind other loops' idle
/// turns; 32 keeps 2 to 32 shards on one hub when idle.
pub const MAX_LOOPS: usize = 32;

/// A hub round running this long is stuck: the watchdog takes its other
/// loops back...
const STUCK: Duration = Duration::from_millis(5);
/// ... if the hub ran most of that time, or [`STUCK`] of CPU time: a hub
/// that sat on a run queue (on a machine busier than its cores) is not
/// stuck, and giving its loops back would only add threads to the queue;
/// unless the round has lasted this long (a command that sleeps: DEBUG
/// SLEEP). On two vCPUs at load 9-10, hub rounds of ordinary work lasted
/// up to 83 ms.
const STUCK_ANYWAY: Duration = Duration::from_millis(100);

/// The stuck bar after a stuck give-back that did not pay, from `us` (0:
/// [`STUCK`]): twice as long, up to [`STUCK_ANYWAY`]. A give-back on a
/// turn of a few ms that was no long command (32 shards, MSET of 10 keys
/// at pipeline 1 on a host with steal time: turns of 5-37 ms) called all
/// 31 adopted shards back 14 times in two 100k-op runs, each judged not to
/// pay (19 to 168 µs of CPU per request), at 1.5-5.9x the CPU per op of a
/// hub that stayed together. A real long command (a script past
/// `busy-reply-threshold`, seconds) still frees the hub's other loops
/// within [`STUCK_ANYWAY`].
fn next_stuck_after(us: u64) -> u64 {
    let stuck = STUCK.as_micros() as u64;
    (us.max(stuck) * 2).min(STUCK_ANYWAY.as_micros() as u64)
}

/// The watchdog's tick while a hub is in a round...
const WATCH_MIN: Duration = Duration::from_millis(2);
/// ... and the longest it backs off to while every hub sleeps (a round
/// that starts then is found stuck within `STUCK + WATCH_MAX`).
const WATCH_MAX: Duration = Duration::from_millis(16);

/// Consecutive windows a merge condition must hold.
const STREAK: u32 = 2;

/// Rounds an AOF lead waits for work left pending (see `Host::run`).
const MAX_DEFER: u32 = 2;

/// `Slot::host` of a worker on its own thread.
const NO_HOST: usize = usize::MAX;

#[derive(Default)]
struct Inbox {
    workers: Vec<Hosted>,
    /// The thread takes no workers: it is handing its own away, or
    /// shutting down.
    closed: bool,
    /// When the oldest of `workers` was handed over (µs since `epoch`; 0
    /// while empty): the watchdog gives back workers a hub leaves
    /// waiting for [`STUCK`] (it is in a long command, alone).
    since_us: u64,
    /// The hub's CPU time then (ns; 0: unknown): it is stuck only if it
    /// ran meanwhile, as a round is (see `Hosts::watch`).
    since_cpu: u64,
}

/// Where an adopted worker lives while a hub runs it.
#[derive(Default)]
struct Seat {
    worker: Option<Box<Worker>>,
    /// Given back (by the hub or the watchdog): its own thread takes it,
    /// and the hub no longer touches it.
    back: bool,
}

/// What the other threads need to know about one thread. Padded to a
/// cache line: a hub writes `round_us` once per turn and once per round.
#[repr(align(64))]
#[derive(Default)]
struct Slot {
    /// Its load over its last window.
    busy: AtomicU32,
    /// Loads handed to it since its last window began (not yet in `busy`).
    pledged: AtomicU32,
    /// Loops it runs: 0 while its own is away.
    runs: AtomicUsize,
    /// A hub in a round: when the current turn (one loop's part of the
    /// round) began (µs since `epoch`); 0 while it waits or holds no other
    /// loop. A stuck turn, not a long round, is what the watchdog looks
    /// for: a round of many loops each serving a heavy pipeline is long
    /// and holds no loop hostage.
    round_us: AtomicU64,
    /// The last turn (its `round_us`) the watchdog found stuck: the hub
    /// gives the rest of its loops back when that round ends.
    stuck_round: AtomicU64,
    /// The workers the watchdog took from this hub in a stuck round (and
    /// `stuck_gave` raised): the hub puts them on trial with the rest when
    /// the round ends. It may hold none by then (the watchdog took every
    /// one): without them that give-back was judged by nobody, and two
    /// threads each kept saturated by the spread's own cost never merge
    /// (MSET of 10 keys at pipeline 16, 2 shards: 21-23 µs of CPU per op
    /// spread against 9.3 on one hub, for half the throughput).
    stuck_taken: Mutex<Vec<usize>>,
    stuck_gave: AtomicBool,
    /// How long one of its turns must last to be stuck (µs; 0: [`STUCK`]):
    /// doubled after each stuck give-back that did not pay, up to
    /// [`STUCK_ANYWAY`], back to [`STUCK`] when one pays or the load
    /// changes (see [`next_stuck_after`]).
    stuck_after_us: AtomicU64,
    /// Who runs its worker ([`NO_HOST`]: itself).
    host: AtomicUsize,
    /// Its worker is not handed to a hub before this (ms since `epoch`).
    hold_until_ms: AtomicU64,
    /// Its worker's last hold, and when it last merged (ms since `epoch`).
    hold_ms: AtomicU64,
    merged_ms: AtomicU64,
    /// Its inbox holds workers.
    pending: AtomicBool,
    /// Its kernel thread id (its CPU clock, for a hub judging a spread).
    tid: AtomicI32,
    /// Commands its worker has run so far, as of its last turn (written by
    /// whichever thread runs it, once per turn).
    reqs: AtomicU64,
    /// A hub whose spread did not pay wants its worker back: the thread
    /// hands it over at once ([`NO_HOST`]: none).
    rejoin: AtomicUsize,
    /// Its hub folded into another (`fold`): it merges whatever the loads.
    refold: AtomicBool,
    /// A hub whose own worker is lent to another thread (`loan`): it
    /// takes no worker handed to it meanwhile, and the watchdog gives
    /// back those it had not taken (it adopts them only after the loan,
    /// which may end with a long command, see `round::serve_while_away`).
    own_away: AtomicBool,
}

/// What the threads share about who hosts whom.
pub struct Hosts {
    epoch: Instant,
    slots: Vec<Slot>,
    inbox: Vec<Mutex<Inbox>>,
    seats: Vec<Mutex<Seat>>,
    /// Per thread: a hub's own worker lent to it (see `loan`).
    loans: Vec<loan::Loan>,
    threads: Vec<OnceLock<std::thread::Thread>>,
    watchdog: OnceLock<std::thread::Thread>,
    /// Workers adopted by hubs.
    hosted: AtomicUsize,
    /// Workers handed to hubs and not adopted yet.
    handed: AtomicUsize,
    /// Wakes thread `i`'s own worker (its doorbell).
    wake: Box<dyn Fn(usize) + Send + Sync>,
    /// Threads running at least one worker (INFO `shard_threads_active`).
    active: Arc<AtomicUsize>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Hosts {
    pub fn new(
        n: usize,
        wake: Box<dyn Fn(usize) + Send + Sync>,
        active: Arc<AtomicUsize>,
    ) -> Arc<Self> {
        let hosts = Self::unwatched(n, wake, active);
        if n > 1 {
            let h = hosts.clone();
            let spawned = std::thread::Builder::new()
                .name("consolidation".into())
                .spawn(move || h.watch());
            if let Err(e) = spawned {
                log::warning(format_args!("consolidation watchdog: {e}"));
            }
        }
        hosts
    }

    /// [`Hosts::new`] without the watchdog thread. For the unit tests,
    /// which run hub rounds in the test's thread: under load (a debug
    /// build, many tests on two vCPUs) a watchdog found those rounds
    /// stuck and gave their loops back to threads that do not exist
    /// there, and their clients got no reply. Tests of the watchdog call
    /// its checks themselves.
    fn unwatched(
        n: usize,
        wake: Box<dyn Fn(usize) + Send + Sync>,
        active: Arc<AtomicUsize>,
    ) -> Arc<Self> {
        active.store(n, Ordering::Relaxed);
        Arc::new(Hosts {
            epoch: Instant::now(),
            slots: (0..n)
                .map(|_| Slot {
                    runs: AtomicUsize::new(1),
                    host: AtomicUsize::new(NO_HOST),
                    rejoin: AtomicUsize::new(NO_HOST),
                    ..Slot::default()
                })
                .collect(),
            inbox: (0..n).map(|_| Mutex::default()).collect(),
            seats: (0..n).map(|_| Mutex::default()).collect(),
            loans: (0..n).map(|_| loan::Loan::default()).collect(),
            threads: (0..n).map(|_| OnceLock::new()).collect(),
            watchdog: OnceLock::new(),
            hosted: AtomicUsize::new(0),
            handed: AtomicUsize::new(0),
            wake,
            active,
        })
    }

    fn ms(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_millis() as u64
    }

    fn us(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_micros() as u64
    }

    /// Whether hub `h` has been in one turn for [`STUCK`] or more (or
    /// longer, while its stuck give-backs did not pay: `stuck_after_us`).
    fn stuck(&self, h: usize, now_us: u64) -> bool {
        let start = self.slots[h].round_us.load(Ordering::Relaxed);
        let after = self.slots[h].stuck_after_us.load(Ordering::Relaxed);
        let after = after.max(STUCK.as_micros() as u64);
        start != 0 && now_us.saturating_sub(start) >= after
    }

    /// Hub `h`'s stuck give-back was judged: one that did not pay makes
    /// the watchdog wait twice as long before the next (see
    /// [`next_stuck_after`]); one that paid, or a load that changed, puts
    /// it back to [`STUCK`].
    fn stuck_verdict(&self, h: usize, paid: bool) -> u64 {
        let slot = &self.slots[h].stuck_after_us;
        let after = if paid {
            0
        } else {
            next_stuck_after(slot.load(Ordering::Relaxed))
        };
        slot.store(after, Ordering::Relaxed);
        after
    }

    /// The hub thread `id`, alone with its worker at load `mine`, should
    /// hand it to (see the module doc: the first with room).
    fn target(&self, id: usize, mine: Permille, now: Instant) -> Option<usize> {
        let now_us = self.us(now);
        self.slots[..id].iter().enumerate().position(|(j, s)| {
            let runs = s.runs.load(Ordering::Relaxed);
            let load = s.busy.load(Ordering::Relaxed) + s.pledged.load(Ordering::Relaxed);
            runs != 0
                && runs < MAX_LOOPS
                && !self.stuck(j, now_us)
                && !s.own_away.load(Ordering::Relaxed)
                && merge_wanted(mine, load)
        })
    }

    /// The hub thread `id` should hand its worker to while its spread is
    /// untried, whatever the loads: the first lower thread with room.
    /// Threads that start under load never meet the merge condition (two
    /// saturated threads are each above `MERGE_BELOW`), and nothing else
    /// ever judges a spread that no trial made: redis-benchmark started
    /// within milliseconds of the server ran an 8-key EVALSHA at 34-36 µs
    /// of server CPU per call on two threads for the whole run, against
    /// 11-13 µs merged (the run in place; Redis 12-14 µs). Merged, a
    /// busy hub spreads again on a trial (`check_burst`) if that pays.
    fn first_hub(&self, id: usize, now: Instant) -> Option<usize> {
        let now_us = self.us(now);
        self.slots[..id].iter().enumerate().position(|(j, s)| {
            let runs = s.runs.load(Ordering::Relaxed);
            runs != 0
                && runs < MAX_LOOPS
                && !self.stuck(j, now_us)
                && !s.own_away.load(Ordering::Relaxed)
        })
    }

    /// Thread `id` stops taking workers, to hand its own away; false if
    /// one was just handed to it (it adopts that instead).
    fn close(&self, id: usize) -> bool {
        let mut inbox = locked(&self.inbox[id]);
        if inbox.closed || !inbox.workers.is_empty() {
            return false;
        }
        inbox.closed = true;
        true
    }

    fn reopen(&self, id: usize) {
        locked(&self.inbox[id]).closed = false;
    }

    /// Hands `w` (load `mine`) to hub `h`; gives it back if `h` takes none
    /// now: it is closed, full, stuck, or loads handed to it meanwhile
    /// leave no room (unless `force`d: the hub called it back).
    fn give(
        &self,
        h: usize,
        w: Hosted,
        mine: Permille,
        now: Instant,
        force: bool,
    ) -> Result<(), Hosted> {
        let mut inbox = locked(&self.inbox[h]);
        let s = &self.slots[h];
        let runs = s.runs.load(Ordering::Relaxed) + inbox.workers.len();
        let load = s.busy.load(Ordering::Relaxed) + s.pledged.load(Ordering::Relaxed);
        if inbox.closed
            || s.own_away.load(Ordering::Relaxed)
            || runs == 0
            || runs >= MAX_LOOPS
            || self.stuck(h, self.us(now))
            || (!force && !merge_wanted(mine, load))
        {
            return Err(w);
        }
        // At least 1: a hand-off of idle loads still counts.
        s.pledged.fetch_add(mine.max(1), Ordering::Relaxed);
        if inbox.workers.is_empty() {
            // Now, not `now`: a thread hands its worker over at the end
            // of a window it may have slept through, with the time it
            // woke (up to a window stale), and the watchdog would find
            // the hub 100 ms late at once: at start-up 27 of 31 workers
            // went back that way, to gather later on a second hub.
            inbox.since_us = self.us(Instant::now()).max(1);
            inbox.since_cpu = thread_cpu_ns_of(s.tid.load(Ordering::Relaxed)).unwrap_or(0);
        }
        inbox.workers.push(w);
        if self.handed.fetch_add(1, Ordering::Release) == 0 {
            if let Some(t) = self.watchdog.get() {
                t.unpark();
            }
        }
        s.pending.store(true, Ordering::Release);
        drop(inbox);
        (self.wake)(h);
        Ok(())
    }

    /// Books worker `id` (whose seat is now marked back) as given back by
    /// hub `h`, and wakes its thread. `for_load`: it left for the hub's
    /// load, and is not taken again for a while.
    /// The watchdog took worker `id` from hub `h`, stuck in a round (its
    /// seat marked `back`): counted off, and left for the hub to judge.
    fn taken_from_stuck(&self, h: usize, id: usize, now: Instant) {
        self.returned(h, id, now, true);
        let slot = &self.slots[h];
        locked(&slot.stuck_taken).push(id);
        slot.stuck_gave.store(true, Ordering::Relaxed);
    }

    fn returned(&self, h: usize, id: usize, now: Instant, for_load: bool) {
        let s = &self.slots[id];
        s.host.store(NO_HOST, Ordering::Relaxed);
        if for_load {
            let merged = s.merged_ms.load(Ordering::Relaxed);
            let held = Duration::from_millis(self.ms(now).saturating_sub(merged));
            let hold = next_hold(
                Duration::from_millis(s.hold_ms.load(Ordering::Relaxed)),
                held,
            );
            s.hold_ms.store(hold.as_millis() as u64, Ordering::Relaxed);
            s.hold_until_ms
                .store(self.ms(now + hold), Ordering::Relaxed);
        }
        // Never below zero: a miscount would make every later merge
        // decision wrong (and wrap), so it is logged and held at zero.
        let runs = &self.slots[h].runs;
        if runs
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| r.checked_sub(1))
            .is_err()
        {
            log::warning(format_args!(
                "shard {id} given back by thread {h}, which ran no loop: loop count kept at 0"
            ));
        }
        self.hosted.fetch_sub(1, Ordering::Relaxed);
        self.active.fetch_add(1, Ordering::Relaxed);
        if let Some(t) = self.threads[id].get() {
            t.unpark();
        }
    }
}

/// A thread's load over the current window.
struct Window {
    start: Instant,
    cpu_ns: u64,
    /// Consecutive windows the merge condition held.
    streak: u32,
    /// A hub: the requests its loops had served when the window began,
    /// and how many loops it held (another count makes the sums
    /// incomparable).
    reqs: Option<(u64, usize)>,
    /// A hub: what it achieved over its last window, and with how many
    /// loops.
    last: Option<(Figures, usize)>,
}

impl Window {
    fn new(now: Instant) -> Self {
        Window {
            start: now,
            cpu_ns: thread_cpu_ns(),
            streak: 0,
            reqs: None,
            last: None,
        }
    }

    /// Closes the window: this thread's load in it, and starts the next.
    fn roll(&mut self, now: Instant) -> Permille {
        let cpu = thread_cpu_ns();
        let wall = now.saturating_duration_since(self.start).as_nanos().max(1) as u64;
        let busy = (cpu.saturating_sub(self.cpu_ns) * 1000 / wall).min(1000) as Permille;
        self.start = now;
        self.cpu_ns = cpu;
        busy
    }
}

/// One thread: its own worker, the workers it adopted, and its load.
pub struct Host {
    id: usize,
    /// This thread's own worker: exactly one, except while it is away at
    /// a hub (a `Vec` so that it can leave and come back). Boxed: workers
    /// move between threads, a box moves as one pointer.
    #[allow(clippy::vec_box)]
    own: Vec<Box<Worker>>,
    /// Workers adopted here; each lives in its seat in `Hosts`.
    adopted: Vec<Adopted>,
    /// The epoll set this thread waits on while it holds more than one
    /// worker: their own sets and their connections (see `round`); shared
    /// with the workers, which leave it from their own threads.
    outer: Option<Arc<OwnedFd>>,
    events: Events,
    /// What the last outer wait found.
    wakeups: Wakeups,
    /// The adopted loops lent jobs in a round, a bit per worker id (kept
    /// between rounds for its allocation: see `round`).
    lent: Vec<u64>,
    /// Whether the last shared round polled the workers' sets.
    polled: bool,
    /// Scratch: the ids of the workers held here.
    ids: Vec<usize>,
    /// Rounds since the last AOF lead that left work for the next.
    deferred: u32,
    /// When the last shared round's work began (its `Slot::round_us`).
    round_us: u64,
    /// How long each turn of a shared round reads sockets
    /// (`worker::TURN_BUDGET`; a test spends it at once).
    turn_budget: Duration,
    window: Window,
    burst: Burst,
    /// A hub: the machine's CPU ticks at the start of the window, and its
    /// idle CPU over the last window (per mille of a core; `None` until a
    /// window has passed since this thread became a hub).
    ticks: Option<(u64, u64, u64)>,
    machine_idle: Option<Permille>,
    /// A spread being tried, a spread that paid and is to be reviewed,
    /// and the backoff of spreads that did not pay.
    trial: Option<Trial>,
    review: Option<Review>,
    backoff: Backoff,
    /// Alone with its worker and never merged since consolidation was
    /// last turned on (at start-up, most often): its spread has no
    /// verdict behind it, so it merges whatever the loads (see
    /// [`Hosts::first_hub`]).
    untried: bool,
    hosts: Arc<Hosts>,
}

/// A worker a hub adopted, as the hub sees it.
struct Adopted {
    id: usize,
    /// Its epoll set.
    fd: RawFd,
    /// When it next has work without a socket event or a message (its
    /// timeout runs out; at once if work waits): asked of the worker after
    /// each of its turns and each job lent to it, the only times it
    /// changes (see `round`'s ready set).
    due: Instant,
    /// Lent a job (or pinned) since `due` was asked: asked again before
    /// the next round's wait.
    stale: bool,
    /// Its last iteration led the AOF (`Worker::aof_led`): it may count
    /// records for this hub's lead.
    aof_led: bool,
    /// What the round reads of it without its seat's lock.
    probe: super::worker::LoopProbe,
    /// Its `Worker::park_eager`, asked with `due`.
    eager: bool,
    /// Times a round raised its parked flag (read by the tests).
    parks: u64,
}

impl Host {
    pub fn new(worker: Worker, hosts: Arc<Hosts>) -> Self {
        let id = worker.id();
        let _ = hosts.threads[id].set(std::thread::current());
        hosts.slots[id].tid.store(gettid(), Ordering::Relaxed);
        let now = Instant::now();
        Host {
            id,
            own: vec![Box::new(worker)],
            adopted: Vec::new(),
            outer: None,
            events: Events::with_capacity(1024),
            wakeups: Wakeups::default(),
            lent: vec![0; hosts.slots.len().div_ceil(64)],
            polled: false,
            ids: Vec::new(),
            deferred: 0,
            round_us: 0,
            turn_budget: super::worker::TURN_BUDGET,
            window: Window::new(now),
            burst: Burst::new(now),
            ticks: None,
            machine_idle: None,
            trial: None,
            review: None,
            backoff: Backoff::default(),
            untried: true,
            hosts,
        }
    }

    fn slot(&self) -> &Slot {
        &self.hosts.slots[self.id]
    }

    /// Serves until a shutdown is carried out: at a shutdown request every
    /// worker goes back to its own thread, and each goes to the gate from
    /// there (see `shutdown`); if the shutdown is refused they carry on.
    pub fn run(mut self, gate: &Gate) {
        loop {
            if self.own[0].shutdown_requested() {
                locked(&self.hosts.inbox[self.id]).closed = true;
                self.trial = None;
                self.adopt();
                self.give_back_all(Instant::now(), false);
                if self.own[0].park(gate) {
                    break;
                }
                self.hosts.reopen(self.id);
                continue;
            }
            let now = Instant::now();
            self.between_rounds(now);
            // A thread that runs every shard commits the AOF itself.
            let led = self.adopted.len() + 1 == self.hosts.slots.len();
            if self.adopted.is_empty() {
                self.own[0].step_solo(now, &mut self.events, led);
                let reqs = self.own[0].commands();
                self.slot().reqs.store(reqs, Ordering::Relaxed);
            } else {
                self.step_shared(now, led);
            }
            // Only a worker whose last iteration led (under `appendfsync
            // always`) can have counted records: otherwise no pass over
            // the loops for a lead (two per round with every shard here).
            if led && (self.own[0].aof_led() || self.adopted.iter().any(|a| a.aof_led)) {
                // Work left for the next round (most often hops between
                // the shards held here, whose records that round appends)
                // joins this round's fsync, up to two rounds.
                if self.deferred < MAX_DEFER && self.has_pending_work() {
                    self.deferred += 1;
                } else {
                    self.deferred = 0;
                    self.lead_aof();
                }
            }
            if self.slot().pending.load(Ordering::Acquire) {
                self.adopt();
            }
            if self.slot().rejoin.load(Ordering::Relaxed) != NO_HOST {
                self.rejoin();
            }
            if self
                .trial
                .as_ref()
                .is_some_and(|t| now.saturating_duration_since(t.at) >= TRIAL)
            {
                self.judge(now);
            }
            if self.review.as_ref().is_some_and(|r| now >= r.at) {
                self.review();
            }
            if now.saturating_duration_since(self.window.start) >= WINDOW {
                self.end_window(now);
            }
            if self.adopted.is_empty() && self.outer.is_some() {
                // The watchdog took every adopted worker back.
                self.alone();
            }
        }
        self.own[0].shutdown();
    }

    fn has_pending_work(&mut self) -> bool {
        let mut any = self.own[0].has_pending_work();
        each_adopted(
            &self.hosts,
            self.id,
            &mut self.adopted,
            &self.outer,
            |_, w| {
                any = any || w.has_pending_work();
            },
        );
        any
    }

    /// A hub (or a thread that was one until the watchdog took every
    /// worker it held) between rounds: see `check_burst`.
    fn between_rounds(&mut self, now: Instant) {
        if !self.adopted.is_empty() || self.slot().stuck_gave.load(Ordering::Relaxed) {
            self.check_burst(now);
        }
    }

    /// A hub between rounds: gives every adopted worker back after a
    /// stuck round (the watchdog took the others meanwhile, not the one
    /// that ran), or on a burst (see the module doc).
    fn check_burst(&mut self, now: Instant) {
        let round = now.saturating_duration_since(self.burst.round);
        // Stuck: the watchdog found this round stuck (and took the loops
        // it could).
        // (A turn of this round: none began before it.)
        let judged = self.slot().stuck_round.load(Ordering::Relaxed) >= self.round_us;
        let taken = self.take_stuck_taken();
        if round >= STUCK && judged && self.own[0].consolidation() {
            log::verbose(format_args!(
                "Thread {} was in one round for {} ms: its shards go back to their threads",
                self.id,
                round.as_millis()
            ));
            // A trial's group just changed under it: it says nothing. The
            // give-back is a trial of its own, compared with the hub's
            // last window (a hub that was not saturated cannot serve more
            // apart): once a long command is over, or the 20 ms a busy
            // machine kept the hub waiting, the workers come back if the
            // spread does not pay. Every adopted worker is on its own
            // thread now (the watchdog gave back those it could).
            self.trial = None;
            let mut workers = vec![self.id];
            workers.extend(self.adopted.iter().map(|a| a.id));
            for id in taken {
                if !workers.contains(&id) {
                    workers.push(id);
                }
            }
            let before = self
                .window
                .last
                .filter(|&(_, loops)| loops == workers.len())
                .map(|(f, _)| f);
            self.give_back_all(now, true);
            self.review = None;
            match before {
                Some(before) => self.start_trial(now, before, workers[1..].to_vec(), workers, true),
                // Nothing to judge it by: it is reviewed instead.
                None => self.review = Some(Review::after(now, REVIEW_MIN, workers[1..].to_vec())),
            }
            return;
        }
        if self.adopted.is_empty() {
            return;
        }
        let span = now.saturating_duration_since(self.burst.start);
        if span < SPREAD_WINDOW {
            return;
        }
        let busy = busy_of(span, self.burst.idle);
        self.burst.start = now;
        self.burst.idle = Duration::ZERO;
        // The run of busy spans this one ends (or none): what the hub
        // achieved in it, its ramp left out, is what a spread now is
        // compared with; a spread with nothing to compare with (a run too
        // short, or one without requests: a long command, the watchdog's
        // case) does not happen. One CPU clock read and a load per loop,
        // per span.
        let sample = self.sample(now);
        let before = self.burst.end_window(busy >= SPREAD_BUSY, sample);
        let spread = spread_wanted(busy, self.machine_idle)
            && self.trial.is_none()
            && self.backoff.allows(now)
            && self.own[0].consolidation();
        if let Some(before) = before.filter(|_| spread) {
            // As many threads as there are idle cores, not one per shard:
            // 32 shards spread over 2 cores paid 1.8-4.9x the CPU per op of
            // 2 shards (bench/many_cores.sh). The next spread waits for the
            // next window's reading of the machine.
            let k = spread_count(self.machine_idle);
            log::verbose(format_args!(
                "Thread {} busy {busy} per mille of the last {} us: {k} of its shards go back to their threads",
                self.id,
                span.as_micros()
            ));
            self.machine_idle = None;
            let mut workers = vec![self.id];
            workers.extend(self.adopted.iter().map(|a| a.id));
            let given = self.give_back_some(now, k);
            self.burst.run = None;
            self.burst.busy_windows = 0;
            self.review = None;
            self.start_trial(now, before, given, workers, false);
        }
    }

    /// Under `appendfsync always`: one write and fsync of the records this
    /// round appended, for every worker held here. In this thread while
    /// nothing else waits (every client waits for these replies); by the
    /// writer thread when the batch is big or requests wait on a socket,
    /// so that this thread serves them during the fsync.
    fn lead_aof(&mut self) {
        let mut records = self.own[0].aof_due();
        each_adopted(
            &self.hosts,
            self.id,
            &mut self.adopted,
            &self.outer,
            |_, w| records += w.aof_due(),
        );
        if records == 0 {
            return;
        }
        // The outer set is asked only for a batch small enough to lead.
        let inline = records <= super::aof::LEAD_MAX_RECORDS && !self.peek_ready();
        self.ids.clear();
        self.ids.push(self.id);
        self.ids.extend(self.adopted.iter().map(|a| a.id));
        self.own[0].lead_aof(&self.ids, inline);
        let ids = &self.ids;
        let now = Instant::now();
        each_adopted(
            &self.hosts,
            self.id,
            &mut self.adopted,
            &self.outer,
            |a, w| {
                w.lead_aof(ids, inline);
                // A lead in this thread wakes none of its loops (the writer
                // wakes the others): a loop holding replies for records that
                // other loops appended (it appended none, so its own lead
                // above sent nothing) learns here that they may go. Its
                // `due` was asked before the fsync (see `round`'s ready set).
                if inline {
                    round::ask(a, w, now);
                }
            },
        );
        engine::alloc::enter_shard(self.id);
    }

    /// Takes the workers handed to this thread.
    fn adopt(&mut self) {
        let arrived = {
            let mut inbox = locked(&self.hosts.inbox[self.id]);
            self.slot().pending.store(false, Ordering::Relaxed);
            inbox.since_us = 0;
            let arrived = std::mem::take(&mut inbox.workers);
            self.hosts
                .handed
                .fetch_sub(arrived.len(), Ordering::Release);
            arrived
        };
        let now = Instant::now();
        for Hosted(mut w) in arrived {
            let id = w.id();
            let fd = w.epoll_fd();
            let probe = w.probe();
            // An entry left from an earlier stay here that no round has
            // dropped yet (given back and handed over again in between):
            // one entry per worker.
            if let Some(i) = self.adopted.iter().position(|a| a.id == id) {
                self.adopted.swap_remove(i);
                if let Some(o) = &self.outer {
                    round::epoll_del(o, fd);
                }
            }
            let hosts = self.hosts.clone();
            let s = &hosts.slots[id];
            let set = self.watch(id, fd);
            if let Ok(set) = &set {
                w.join_set(set.clone());
            }
            if let Err(e) = set {
                log::warning(format_args!(
                    "shard {id}: cannot run on thread {}: {e}",
                    self.id
                ));
                s.hold_until_ms
                    .store(self.hosts.ms(now + HOLD_MAX), Ordering::Relaxed);
                *locked(&self.hosts.seats[id]) = Seat {
                    worker: Some(w),
                    back: true,
                };
                if let Some(t) = self.hosts.threads[id].get() {
                    t.unpark();
                }
                continue;
            }
            log::verbose(format_args!(
                "Shard {id} runs on thread {} (loads {} and {} per mille)",
                self.id,
                s.busy.load(Ordering::Relaxed),
                self.slot().busy.load(Ordering::Relaxed)
            ));
            {
                // The host is named under the seat's lock: the watchdog
                // checks both under it before giving a worker back for
                // a hub (`Hosts::recall`).
                let mut seat = locked(&self.hosts.seats[id]);
                *seat = Seat {
                    worker: Some(w),
                    back: false,
                };
                s.host.store(self.id, Ordering::Relaxed);
            }
            s.merged_ms.store(self.hosts.ms(now), Ordering::Relaxed);
            self.adopted.push(Adopted {
                id,
                fd,
                due: now,
                stale: true,
                aof_led: true,
                probe,
                eager: true,
                parks: 0,
            });
            self.slot().runs.fetch_add(1, Ordering::Relaxed);
            self.hosts.active.fetch_sub(1, Ordering::Relaxed);
            if self.hosts.hosted.fetch_add(1, Ordering::Release) == 0 {
                if let Some(t) = self.hosts.watchdog.get() {
                    t.unpark();
                }
            }
        }
    }

    /// Adds worker `id`'s epoll set `fd` to this thread's outer set, and
    /// returns that set (for the worker's connections, see `round`);
    /// creates it first with this thread's own worker in it, set and
    /// connections (and starts reading the machine's idle CPU).
    fn watch(&mut self, id: usize, fd: RawFd) -> std::io::Result<Arc<OwnedFd>> {
        let outer = match &self.outer {
            Some(o) => o,
            None => {
                // SAFETY: epoll_create1 returns a new descriptor or -1.
                let raw = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
                if raw < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // SAFETY: `raw` is a new descriptor nothing else owns.
                let owned = Arc::new(unsafe { OwnedFd::from_raw_fd(raw) });
                epoll_add(&owned, self.own[0].epoll_fd(), self.id)?;
                self.own[0].join_set(owned.clone());
                self.burst = Burst::new(Instant::now());
                // A reading from an earlier time as a hub says nothing of
                // now: no spreading until the next window's reading.
                self.ticks = cpu_ticks();
                self.machine_idle = None;
                self.outer.insert(owned)
            }
        };
        epoll_add(outer, fd, id)?;
        Ok(outer.clone())
    }

    /// Gives every adopted worker back; `for_load`: for this thread's load
    /// (then they are not taken again for a while).
    fn give_back_all(&mut self, now: Instant, for_load: bool) -> Vec<usize> {
        let mut given = Vec::new();
        for Adopted { id, .. } in std::mem::take(&mut self.adopted) {
            {
                let mut seat = locked(&self.hosts.seats[id]);
                if seat.back || seat.worker.is_none() {
                    continue;
                }
                seat.back = true;
            }
            log::verbose(format_args!("Shard {id} back on its own thread"));
            self.hosts.returned(self.id, id, now, for_load);
            given.push(id);
        }
        self.alone();
        given
    }

    /// Gives `k` adopted workers back for this thread's load (all of them
    /// if it holds no more); the others stay. Their entries leave
    /// `adopted` (and the outer set) at the next pass over it. Returns the
    /// ids given back.
    fn give_back_some(&mut self, now: Instant, k: usize) -> Vec<usize> {
        let live = self
            .adopted
            .iter()
            .filter(|a| {
                let seat = locked(&self.hosts.seats[a.id]);
                !seat.back && seat.worker.is_some()
            })
            .count();
        if k >= live {
            return self.give_back_all(now, true);
        }
        let mut given = Vec::with_capacity(k);
        for a in self.adopted.iter().rev() {
            if given.len() == k {
                break;
            }
            {
                let mut seat = locked(&self.hosts.seats[a.id]);
                if seat.back || seat.worker.is_none() {
                    continue;
                }
                seat.back = true;
            }
            log::verbose(format_args!("Shard {} back on its own thread", a.id));
            self.hosts.returned(self.id, a.id, now, true);
            given.push(a.id);
        }
        given
    }

    /// The workers the watchdog took from this hub since it last asked
    /// (see `Slot::stuck_taken`).
    fn take_stuck_taken(&self) -> Vec<usize> {
        if !self.slot().stuck_gave.swap(false, Ordering::Relaxed) {
            return Vec::new();
        }
        std::mem::take(&mut *locked(&self.slot().stuck_taken))
    }

    /// This thread holds its own worker only.
    fn alone(&mut self) {
        self.own[0].leave_set();
        self.outer = None;
        // The last window's figures stay: a stuck round that gave every
        // worker back is judged against them (`check_burst`, next).
        let last = self.window.last;
        self.window = Window::new(Instant::now());
        self.window.last = last;
        engine::alloc::enter_shard(self.id);
    }

    /// End of a load window: publish this thread's load and decide.
    fn end_window(&mut self, now: Instant) {
        let wall = now.saturating_duration_since(self.window.start);
        let cpu0 = self.window.cpu_ns;
        let busy = self.window.roll(now);
        let cpu_ns = self.window.cpu_ns.saturating_sub(cpu0);
        let slot = &self.hosts.slots[self.id];
        slot.busy.store(busy, Ordering::Relaxed);
        let on = self.own[0].consolidation();
        {
            // The loads handed here before this window began are in `busy`
            // now (approximately: a worker handed over during the window
            // counts for part of it).
            let inbox = locked(&self.hosts.inbox[self.id]);
            if inbox.workers.is_empty() {
                slot.pledged.store(0, Ordering::Relaxed);
            }
        }
        if !self.adopted.is_empty() {
            if !on {
                self.give_back_all(now, false);
                return;
            }
            let ticks = cpu_ticks();
            self.machine_idle = idle_between(self.ticks, ticks);
            self.ticks = ticks;
            self.observe_load(now, wall, cpu_ns);
            self.fold(busy, now);
            return;
        }
        self.take_refold();
        if !on {
            self.untried = true;
        }
        let untried = self.untried;
        let target = on.then(|| self.merge_target(busy, now)).flatten();
        self.window.streak = if target.is_some() {
            self.window.streak + 1
        } else {
            0
        };
        if self.window.streak < STREAK || self.own[0].shutdown_requested() {
            return;
        }
        let Some(h) = target else { return };
        self.hand_off(h, busy, now, untried);
    }

    /// The hub this thread, alone with its worker at load `busy`, should
    /// hand it to now: none while held after a spread; the first with
    /// room whatever the loads while its spread is untried.
    fn merge_target(&self, busy: Permille, now: Instant) -> Option<usize> {
        let slot = self.slot();
        if self.hosts.ms(now) < slot.hold_until_ms.load(Ordering::Relaxed) {
            return None;
        }
        match self.untried {
            true => self.hosts.first_hub(self.id, now),
            false => self.hosts.target(self.id, busy, now),
        }
    }

    /// Hands this thread's worker to hub `h` and sleeps until it is given
    /// back (or keeps it, if `h` takes none now).
    fn hand_off(&mut self, h: usize, busy: Permille, now: Instant, force: bool) {
        if !self.hosts.close(self.id) {
            return;
        }
        let Some(w) = self.own.pop() else { return };
        let slot = &self.hosts.slots[self.id];
        slot.runs.store(0, Ordering::Relaxed);
        match self.hosts.give(h, Hosted(w), busy, now, force) {
            Ok(()) => {
                self.untried = false;
                let mut w = self.hosts.wait_back(self.id);
                // Its connections come back from the hub's set.
                w.leave_set();
                // A call back from a trial while away is stale.
                slot.rejoin.store(NO_HOST, Ordering::Relaxed);
                self.own.push(w);
            }
            Err(Hosted(w)) => self.own.push(w),
        }
        slot.runs.store(1, Ordering::Relaxed);
        self.hosts.reopen(self.id);
        self.window = Window::new(Instant::now());
    }
}

/// Pins the calling thread to `cpu` (`server-cpulist`).
pub fn pin_to_cpu(cpu: usize) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: `cpu` is within the set (checked above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; `set` is ours and its size is
    // passed.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
