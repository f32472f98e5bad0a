//! A hub's round: one wait for every loop it holds, then a turn for each
//! loop with work, the loops lent to each other's coordinators meanwhile
//! (`worker::cohost`).
//!
//! The wait is on the hub's *outer* epoll set, which holds
//! - each loop's own epoll set (level-triggered, tagged with the loop's
//!   id): its doorbell and listeners;
//! - every connection of every loop, directly (edge-triggered, tagged with
//!   the loop and the slot: `worker::hub_tag`, see `worker::hub_set`).
//!
//! So one `epoll_wait` per round tells each loop its socket events, and a
//! loop polls its own set only in a round where that is ready (a doorbell
//! rang or a client connected). With the connections' sets nested instead,
//! every loop with a socket event paid its own `epoll_wait` each round:
//! with 32 loops, 0.73 `epoll_wait`s per SET at pipeline 1 (50 clients,
//! `bench/hub_syscalls.sh`) and 0.65 per MSET of 10 keys, against 0.05
//! and 0.025 now; with 2 loops, 0.33 (up to 1.4 in another run) against
//! 0.18.
//!
//! The events of one wait are sorted by tag, so each loop's are one
//! contiguous run, recorded per loop id in one walk (`Wakeups::index`):
//! O(e log e) per round for `e` events, one load per loop.
//!
//! The ready set: the loops with work this round, found without locking
//! the others. Each adopted loop's entry (`Adopted`) keeps when it next
//! has work of its own (`due`: its timers, or at once if work waits),
//! asked right after its turn under the lock the turn holds. What other
//! threads change of a loop between its turns is only its mail (messages
//! marked in its doorbell's ready words, pub/sub deliveries flagged),
//! read through its `LoopProbe` with no lock, and the jobs lent to it
//! by coordinators of this round (`HubLender` records them: the loop is
//! asked its `due` again, under its seat's lock, before the next wait).
//! So before the wait ([`look_ahead`]) a loop is due if its `due` has
//! come, mail waits or it was lent a job; and a loop with a socket event
//! or a ready own set after the wait is served too.
//!
//! The invariant (no lost wake-up): a loop with work is served in the
//! round that finds it, or before the hub next sleeps its entry says so
//! (its `due` has come, its probe shows mail, or it is `stale`), or an
//! event in the outer set ends that sleep. Each way a loop gets work:
//! - *Socket events* of its connections (edge-triggered in the outer
//!   set): the wait that takes them serves the loop in that round; a
//!   round that skips its wait takes none, they stay queued.
//! - *Its own set* (level-triggered in the outer set): a doorbell rung
//!   whether or not it is parked (`Doorbell::wake`: a call posted by a
//!   script holding every shard, `worker::reach`; CLIENT PAUSE and
//!   UNPAUSE and a busy script's publication, `wake_all`; the AOF writer
//!   waking a thread that waits for durability; a hub asking its lent
//!   worker back) or a listener: polled in the round whose wait reports
//!   it.
//! - *Mail* (ring messages, marked in the destination's ready words at
//!   the sender's flush; pub/sub deliveries, flagged): seen by the probe
//!   at the look ahead; marked after it, by the parked flags' fenced look
//!   before a wait that may sleep (the sender also rings a parked
//!   destination), or by the next round's look ahead when this one does
//!   not sleep.
//! - *Its own turn* (what it queued for itself: resumed connections,
//!   local jobs, kept batches, spilled messages, held replies, timers):
//!   `settle` asks `due_in` under the turn's lock.
//! - *Jobs lent to it, and pins* (`HubLender::lend` and `pin`, also
//!   through a busy script's `with_worker_open`): marked in the lent
//!   bits, `stale`, asked again under its seat's lock at the next look
//!   ahead.
//! - *What other threads change that `due_in` reads*: the AOF's durable
//!   target under `appendfsync always` (the writer rings the threads
//!   waiting for it; a lead by this hub itself rings none of its loops,
//!   so `Host::lead_aof` asks each one again after it); a pause's end (a
//!   timer while unchanged, a change rings every thread); replicas'
//!   offsets for WAIT (polled by a timer).
//! - *Loops given back* (the watchdog, `give_back_free`, a spread) *or
//!   adopted by another hub since* (given back while this hub was stuck,
//!   then handed on by their thread): dropped at the next pass ([`held`]
//!   checks the host under the seat's lock); one adopted here again gets
//!   a new entry, `stale`.
//! - *The own worker away* ([`serve_while_away`]): every loop is asked
//!   each round, waits last at most [`AWAY_WAIT`], no flag goes up.
//!
//! (perf27b's unit test that once got no reply under load was the
//! watchdog thread of the tests' `Hosts` giving loops back from a test
//! hub whose round outlasted `STUCK`, to threads that do not exist in a
//! unit test: `Hosts::unwatched`.)
//!
//! Cost per round for `k` loops: a few loads per loop with no lock (its
//! `due`, its ready words and pub/sub flag, its host); before a wait that
//! may sleep, its parked flag raised and lowered through its probe; a
//! seat's lock, a turn and a `due_in` only for the loops with work, and a
//! lock and a `due_in` for those lent a job. Measured with 50 clients at
//! pipeline 1 over 32 loops: see `bench/README.md` (issue 27, branch
//! perf27b).

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use super::super::worker::{self, hub_tag, hub_untag, EpochWall, Pinned, Worker};
use super::{locked, Adopted, Host, Hosts, Seat};

/// Events one wait takes at most; the rest come with the next wait
/// (epoll keeps undelivered events queued).
pub(super) const EVENTS_MAX: usize = 1024;

/// What the hub's last wait found.
pub(super) struct Wakeups {
    /// Loops whose own set is ready.
    pub ready: Vec<usize>,
    /// Connection events, sorted by tag.
    conns: Vec<libc::epoll_event>,
    /// Per loop id, its run of `conns` (`start..end`; empty for a loop
    /// with none): a turn's check and its events are one load, where two
    /// binary searches over `conns` per loop per round cost about 0.1k
    /// instructions per SET at pipeline 1 with 32 loops. Grown to the
    /// highest id seen; only the ids in `indexed` are non-empty.
    runs: Vec<(u32, u32)>,
    indexed: Vec<usize>,
    /// Taken outside a round (`Host::peek_ready`): the next round uses
    /// them instead of waiting.
    carried: bool,
}

impl Default for Wakeups {
    fn default() -> Self {
        Wakeups {
            ready: Vec::new(),
            conns: Vec::with_capacity(EVENTS_MAX),
            runs: Vec::new(),
            indexed: Vec::new(),
            carried: false,
        }
    }
}

impl Wakeups {
    fn clear(&mut self) {
        self.ready.clear();
        self.conns.clear();
        for &id in &self.indexed {
            self.runs[id] = (0, 0);
        }
        self.indexed.clear();
    }

    /// Records each loop's run of the sorted `conns`: O(events).
    fn index(&mut self) {
        let mut i = 0;
        while i < self.conns.len() {
            // INVARIANT: `wait` kept only connection tags in `conns`.
            let Some((id, _)) = hub_untag(self.conns[i].u64) else {
                unreachable!("a loop's own set among the connections' events");
            };
            let start = i;
            while i < self.conns.len() && self.conns[i].u64 < hub_tag(id + 1, 0) {
                i += 1;
            }
            if self.runs.len() <= id {
                self.runs.resize(id + 1, (0, 0));
            }
            self.runs[id] = (start as u32, i as u32);
            self.indexed.push(id);
        }
    }

    fn is_empty(&self) -> bool {
        self.ready.is_empty() && self.conns.is_empty()
    }

    /// Loop `id`'s connection events.
    fn of(&self, id: usize) -> &[libc::epoll_event] {
        match self.runs.get(id) {
            Some(&(lo, hi)) => &self.conns[lo as usize..hi as usize],
            None => &[],
        }
    }
}

/// The workers a hub holds, lent to the one running during a round (see
/// `worker::cohost`): an adopted one under its seat's lock (the running
/// one's is held by its turn, so it is never lent), the hub's own once
/// its turn is over.
struct HubLender<'a> {
    hosts: &'a Hosts,
    hub: usize,
    /// The hub's own worker, once its turn in the round is over.
    own: std::cell::Cell<*mut Worker>,
    /// Seats held across calls for an unlocked transaction (`pin`).
    pinned: std::cell::RefCell<Vec<(usize, MutexGuard<'a, Seat>)>>,
    /// The own worker is pinned (`pin`): not lent away (`loan_own`).
    own_pinned: std::cell::Cell<bool>,
    /// The adopted loop whose turn runs now (`usize::MAX`: none).
    turn: std::cell::Cell<usize>,
    /// The own worker lent to that loop's thread (see `super::loan`).
    loaned: std::cell::Cell<Option<(usize, *mut Worker)>>,
    /// The hub's set, which the own worker's connections rejoin.
    outer: &'a Option<Arc<OwnedFd>>,
    /// Adopted workers lent a job or pinned this round, a bit per worker
    /// id: their `due` is asked again before the next wait
    /// (`Adopted::stale`). A bit, not a list: a round of pipelined MSETs
    /// lends thousands of jobs to the same few dozen loops.
    lent: std::cell::RefCell<Vec<u64>>,
}

impl HubLender<'_> {
    fn note_lent(&self, id: usize) {
        mark_lent(&mut self.lent.borrow_mut(), id);
    }
}

/// Sets worker `id`'s bit in `HubLender::lent`.
#[inline(always)]
fn mark_lent(bits: &mut [u64], id: usize) {
    if let Some(w) = bits.get_mut(id / 64) {
        *w |= 1 << (id % 64);
    }
}

impl HubLender<'_> {
    /// Asks the thread the own worker was lent to (`loan_own`) for it,
    /// and takes it back if that thread has let it go: true if the hub
    /// has it (it was not lent, or is back, its connections back in the
    /// hub's set). Never waits: see [`Host::step_shared`].
    fn take_back_own(&self) -> bool {
        let Some((to, _)) = self.loaned.get() else {
            return true;
        };
        self.hosts.ask_back(to, self.hub) && self.took_back_own()
    }

    /// Takes the own worker back if it was asked back and its borrower
    /// has let it go ([`Hosts::let_go`]); true if it did.
    fn took_back_own(&self) -> bool {
        let Some((to, w)) = self.loaned.get() else {
            return false;
        };
        if !self.hosts.let_go(to) {
            return false;
        }
        self.loaned.set(None);
        self.hosts.slots[self.hub]
            .own_away
            .store(false, Ordering::Relaxed);
        // SAFETY: the borrowing thread let it go (`let_go` saw it); it is
        // the hub's own worker, alive for the round.
        let w_ref = unsafe { &mut *w };
        w_ref.unpark_flag();
        if let Some(o) = self.outer {
            // Its own set back in the hub's (see `loan_own`).
            if let Err(e) = epoll_add(o, w_ref.epoll_fd(), self.hub) {
                crate::log::warning(format_args!("A hub taking its loop back: {e}"));
            }
            w_ref.join_set(o.clone());
        }
        self.own.set(w);
        true
    }
}

impl<'a> HubLender<'a> {
    /// [`Lender::pin`] with the pinned seats and the lent bits borrowed by
    /// the caller; `search`: whether `id` may be pinned already.
    #[inline(always)]
    fn pin_in(
        &self,
        pinned: &mut Vec<(usize, MutexGuard<'a, Seat>)>,
        lent: &mut [u64],
        id: usize,
        search: bool,
    ) -> Option<NonNull<Worker>> {
        if id == self.hub {
            let w = NonNull::new(self.own.get());
            if let Some(mut p) = w {
                // SAFETY: as in `lend` (not lent now: `cohost` takes the
                // lender out while it lends a worker).
                unsafe { p.as_mut() }.register_parked();
            }
            self.own_pinned.set(self.own_pinned.get() || w.is_some());
            return w;
        }
        if search {
            if let Some((_, seat)) = pinned.iter_mut().find(|(p, _)| *p == id) {
                return seat.worker.as_deref_mut().map(NonNull::from);
            }
        }
        if !self.adopted(id) {
            return None;
        }
        let Ok(mut seat) = self.hosts.seats[id].try_lock() else {
            return None;
        };
        // The worker is boxed: its address holds while the guard, kept
        // in `pinned` until `unpin_all`, holds the seat.
        let w = held(self.hosts, self.hub, id, &mut seat)?;
        w.register_parked();
        let w = NonNull::from(w);
        pinned.push((id, seat));
        mark_lent(lent, id);
        Some(w)
    }
}

impl HubLender<'_> {
    /// Whether this hub runs worker `id` (not its own).
    fn adopted(&self, id: usize) -> bool {
        self.hosts
            .slots
            .get(id)
            .map(|s| s.host.load(Ordering::Relaxed))
            == Some(self.hub)
    }
}

impl worker::Lender for HubLender<'_> {
    fn lend(&self, id: usize, f: &mut dyn FnMut(&mut Worker)) -> bool {
        if id == self.hub {
            let w = self.own.get();
            if w.is_null() {
                return false;
            }
            // SAFETY: set from the hub's own worker after its turn; the
            // hub touches it again only after the round (the lender's
            // scope), and `cohost::with_worker` never lends it twice at
            // once.
            let w = unsafe { &mut *w };
            // A script that stalled it may have parked WATCHes for it.
            w.register_parked();
            f(w);
            return true;
        }
        if let Some((_, seat)) = self.pinned.borrow_mut().iter_mut().find(|(p, _)| *p == id) {
            let seat = &mut **seat;
            return match seat.worker.as_mut() {
                Some(w) if !seat.back => {
                    f(w);
                    true
                }
                _ => false,
            };
        }
        if !self.adopted(id) {
            return false;
        }
        let Ok(mut seat) = self.hosts.seats[id].try_lock() else {
            return false;
        };
        // Read again under the lock ([`held`]).
        match held(self.hosts, self.hub, id, &mut seat) {
            Some(w) => {
                w.register_parked();
                f(w);
                self.note_lent(id);
                true
            }
            None => false,
        }
    }

    fn pin(&self, id: usize) -> Option<NonNull<Worker>> {
        let mut pinned = self.pinned.borrow_mut();
        let mut lent = self.lent.borrow_mut();
        self.pin_in(&mut pinned, &mut lent, id, true)
    }

    fn pin_each(&self, ids: &[usize], skip: usize, out: &mut Vec<(usize, Pinned)>) -> bool {
        let mut pinned = self.pinned.borrow_mut();
        let mut lent = self.lent.borrow_mut();
        // Nothing pinned yet (always, for a transaction: its pins are let
        // go when it ends): none of `ids`, distinct, can be found there.
        let search = !pinned.is_empty() || self.own_pinned.get();
        debug_assert!(ids.windows(2).all(|p| p[0] != p[1]), "a shard twice");
        for &id in ids {
            if id == skip {
                continue;
            }
            let Some(w) = self.pin_in(&mut pinned, &mut lent, id, search) else {
                return false;
            };
            out.push((id, Pinned::new(w)));
        }
        true
    }

    fn unpin_all(&self) {
        self.pinned.borrow_mut().clear();
        self.own_pinned.set(false);
    }

    fn loan_own(&self) -> bool {
        // Lent, unless asked back and let go meanwhile (while the hub
        // served its other loops for the borrower's long command, see
        // `Host::step_shared`): then taken back and lent to this turn's
        // thread, not left idle and unserved behind this turn's script.
        // Lent to another thread than this turn's (an earlier script of
        // the round lent it; this one is another adopted loop's): asked
        // back now, and lent here once let go (a later pass). Left with
        // that thread, it would keep it from its own loop, which the
        // watchdog leaves with the hub (`Hosts::borrowing`): that loop's
        // clients would wait for this script, which does not hold their
        // shard (issue 23 point 5). Once let go, the watchdog gives that
        // loop back to its thread as any other of this stuck round's.
        if let Some((to, _)) = self.loaned.get() {
            let back = if to == self.turn.get() {
                self.took_back_own()
            } else {
                self.take_back_own()
            };
            if !back {
                return true;
            }
        }
        let (w, to) = (self.own.get(), self.turn.get());
        if w.is_null() || self.own_pinned.get() || to >= self.hosts.slots.len() || to == self.hub {
            return false;
        }
        // Not lendable here from now on: the other thread runs it.
        self.own.set(std::ptr::null_mut());
        // SAFETY: set from the hub's own worker after its turn, not lent
        // now (`cohost` takes the lender out while it lends a worker).
        let w_ref = unsafe { &mut *w };
        // It runs on that thread from now on, maybe before the script
        // ends: the WATCHes parked for it while the script stalled it are
        // registered first, and no more are parked.
        w_ref.release_stalled();
        w_ref.leave_set();
        // Its own set (doorbell, listeners) leaves the hub's too: its
        // borrower drains it, and while that runs a long command, it would
        // stay ready (level-triggered) and the hub's waits meanwhile would
        // not sleep (`serve_while_away`).
        if let Some(o) = self.outer {
            epoll_del(o, w_ref.epoll_fd());
        }
        self.hosts.slots[self.hub]
            .own_away
            .store(true, Ordering::Relaxed);
        self.hosts.lend_own(to, self.hub, w);
        self.loaned.set(Some((to, w)));
        true
    }
}

/// Longest wait of a round while the own worker is away
/// ([`serve_while_away`]): how late the hub sees it let go, and how late
/// a message for an adopted loop is seen (their parked flags are down:
/// no doorbell rings).
const AWAY_WAIT: Duration = Duration::from_millis(1);

/// One round of hub `hub`'s adopted loops while its own worker, asked
/// back, is still lent (its borrower runs one long command: a script of
/// one of its clients): the hub would otherwise wait for that command's
/// end, and so would every client of its adopted loops, whose shards the
/// script does not hold (issue 23 point 5). As a round of
/// [`Host::step_shared`] without the own loop's turn and without parked
/// flags (so at most [`AWAY_WAIT`] between waits), each one a new round
/// for the watchdog: the hub is not stuck, it serves. A script of theirs
/// that runs long lends the own worker again once let go
/// (`HubLender::loan_own`). True if a busy pass served the own loop.
fn serve_while_away(
    (hosts, hub, lender): (&Hosts, usize, &HubLender<'_>),
    adopted: &mut Vec<Adopted>,
    outer: &Option<Arc<OwnedFd>>,
    events: &mut mio::Events,
    wakeups: &mut Wakeups,
    led: bool,
) -> bool {
    let now = Instant::now();
    hosts.slots[hub]
        .round_us
        .store(hosts.us(now).max(1), Ordering::Relaxed);
    let mut timeout = AWAY_WAIT;
    each_adopted(hosts, hub, adopted, outer, |a, w| {
        ask(a, w, now);
        timeout = timeout.min(a.due.saturating_duration_since(now));
    });
    let known = match outer {
        Some(fd) => wait(fd, timeout, wakeups),
        None => false,
    };
    // The wall clock before the instant (see `worker::clock`).
    let wall_us = worker::wall_us();
    let woke = Instant::now();
    let wall = EpochWall::new(wall_us, hosts.us(woke));
    let ((), served) = worker::lending_own(hub, || {
        each_adopted(hosts, hub, adopted, outer, |a, w| {
            let poll = !known || wakeups.ready.contains(&a.id);
            let conns = wakeups.of(a.id);
            if poll || !conns.is_empty() || a.due <= woke {
                let at = Instant::now();
                let us = hosts.us(at);
                hosts.slots[hub]
                    .round_us
                    .store(us.max(1), Ordering::Relaxed);
                lender.turn.set(a.id);
                w.step_shared(events, poll, conns, led, wall.turn(at, us));
                hosts.slots[a.id]
                    .reqs
                    .store(w.commands(), Ordering::Relaxed);
                settle(a, w, woke);
            }
        })
    });
    lender.turn.set(usize::MAX);
    served
}

/// Gives back to their threads the loops hub `hub` adopted whose
/// threads are free (not running its lent own worker), as the watchdog
/// gives back a stuck hub's: at the start of [`serve_while_away`], whose
/// rounds last until the borrower's long command ends. Only the
/// borrower's loop stays (its thread cannot take it before): a script of
/// another loop that ran long in those rounds would hold the hub, and the
/// borrower's loop, whose thread is busy and which the watchdog leaves
/// with the hub ([`Hosts::borrowing`]), would wait for a script that does
/// not hold its shard (issue 23 point 5); on its own thread that script
/// stalls only its loop. Most often none is left: a loan follows a
/// script past `busy-reply-threshold`, and the watchdog gave back the
/// loops of that stuck turn it could take (not those the script pinned),
/// as the hub gives back the rest after a round found stuck
/// (`Host::check_burst`); those given back here come back as those do
/// (after their hold). A seat held (a pin) is left, as the watchdog
/// leaves it; entries leave `adopted` at the next pass over it.
fn give_back_free(hosts: &Hosts, hub: usize, adopted: &[Adopted]) {
    let now = Instant::now();
    for a in adopted {
        if hosts.borrowing(a.id) {
            continue;
        }
        {
            let Ok(mut seat) = hosts.seats[a.id].try_lock() else {
                continue;
            };
            if seat.back || seat.worker.is_none() {
                continue;
            }
            seat.back = true;
        }
        crate::log::verbose(format_args!(
            "Shard {} back on its own thread: thread {hub} waits for its own loop, lent to a long command",
            a.id
        ));
        hosts.returned(hub, a.id, now, true);
    }
}

/// Worker `id`, under its seat's lock, if hub `hub` still holds it: not
/// given back (`back`), and not adopted by another hub since (the
/// watchdog gave it back while this hub was stuck in a turn, its thread
/// took it and handed it to another hub, all before this hub's next
/// look at it). Such a worker left on this hub's list would be run by
/// both hubs in turn, and the other hub's ready set would not see what
/// this one's turns left it (mail taken, work queued): `host` is named
/// under the seat's lock when a hub adopts a worker.
pub(super) fn held<'s>(
    hosts: &Hosts,
    hub: usize,
    id: usize,
    seat: &'s mut Seat,
) -> Option<&'s mut Worker> {
    match seat.worker.as_deref_mut() {
        Some(w) if !seat.back && hosts.slots[id].host.load(Ordering::Relaxed) == hub => Some(w),
        _ => None,
    }
}

/// Runs `f` on each worker in `adopted`, each under its seat's lock, and
/// drops from `adopted` (and from `outer`) those no longer held
/// ([`held`]).
pub(super) fn each_adopted(
    hosts: &Hosts,
    hub: usize,
    adopted: &mut Vec<Adopted>,
    outer: &Option<Arc<OwnedFd>>,
    f: impl FnMut(&mut Adopted, &mut Worker),
) {
    each_ready(hosts, hub, adopted, outer, |_| true, f);
}

/// Asks worker `w` (adopted as `a`) when it next has work of its own,
/// from `now` (no later than the present: a timer comes due early, never
/// late; an early turn asks again).
pub(super) fn ask(a: &mut Adopted, w: &mut Worker, now: Instant) {
    a.due = w.due_at(now);
    a.eager = w.park_eager();
    a.stale = false;
}

/// After worker `w`'s turn (served at `at` or later): when it next has
/// work of its own, and whether it led the AOF.
fn settle(a: &mut Adopted, w: &mut Worker, at: Instant) {
    ask(a, w, at);
    a.aof_led = w.aof_led();
}

/// Before a round's wait: the time until the first of `adopted` has work
/// without a socket event, and each one's `due` brought up to date. A
/// loop's `due` stands from its last turn unless mail came for it (its
/// probe: then due now), a job was lent to it (`stale`: asked again under
/// its seat's lock) or it was given back or adopted by another hub (its
/// host changed: dropped). No seat is locked for the others: O(k) loads
/// for `k` loops, where asking each one (as every round did) cost a lock,
/// an unlock and a `due_in`.
pub(super) fn look_ahead(
    hosts: &Hosts,
    hub: usize,
    adopted: &mut Vec<Adopted>,
    outer: &Option<Arc<OwnedFd>>,
    now: Instant,
) -> Duration {
    let mut first: Option<Instant> = None;
    adopted.retain_mut(|a| {
        let gone = hosts.slots[a.id].host.load(Ordering::Relaxed) != hub;
        if gone || a.stale {
            let mut seat = locked(&hosts.seats[a.id]);
            match held(hosts, hub, a.id, &mut seat).filter(|_| !gone) {
                Some(w) => ask(a, w, now),
                None => {
                    if let Some(o) = outer {
                        epoll_del(o, a.fd);
                    }
                    return false;
                }
            }
        } else if a.probe.has_mail() {
            a.due = now;
        }
        // The earliest instant, then one subtraction: an `Instant`'s
        // comparison is two loads, its difference a checked borrow.
        first = Some(first.map_or(a.due, |f| f.min(a.due)));
        true
    });
    first.map_or(Duration::MAX, |f| f.saturating_duration_since(now))
}

/// Runs `f` on each worker in `adopted` that `ready` picks, each under its
/// seat's lock, and drops from `adopted` (and from `outer`) those of them
/// no longer held ([`held`]; the others are dropped by the next
/// [`look_ahead`], which sees their host change).
fn each_ready(
    hosts: &Hosts,
    hub: usize,
    adopted: &mut Vec<Adopted>,
    outer: &Option<Arc<OwnedFd>>,
    ready: impl Fn(&Adopted) -> bool,
    mut f: impl FnMut(&mut Adopted, &mut Worker),
) {
    adopted.retain_mut(|a| {
        if !ready(a) {
            return true;
        }
        let mut seat = locked(&hosts.seats[a.id]);
        match held(hosts, hub, a.id, &mut seat) {
            Some(w) => {
                f(a, w);
                true
            }
            None => {
                if let Some(o) = outer {
                    epoll_del(o, a.fd);
                }
                false
            }
        }
    });
}

impl Host {
    /// One iteration of every worker this thread holds.
    pub(super) fn step_shared(&mut self, now: Instant, led: bool) {
        self.slot().round_us.store(0, Ordering::Relaxed);
        let mut timeout = self.own[0].due_in(now);
        // The ready set, before the wait: each adopted loop's `due`, kept
        // from its last turn, unless mail came for it since (a look at its
        // doorbell's words, no lock), it was lent a job (asked again under
        // its seat's lock) or given back (dropped).
        timeout = timeout.min(look_ahead(
            &self.hosts,
            self.id,
            &mut self.adopted,
            &self.outer,
            now,
        ));
        let carried = std::mem::take(&mut self.wakeups.carried);
        // Parked flags only for a wait that may sleep (then a message from
        // another thread must ring); a loop found with messages after its
        // flag's fence is due, and the wait does not sleep. While any loop
        // has work (a busy hub's rounds), no flag goes up or down: two
        // passes over the loops less per round.
        let parked = !timeout.is_zero() && !carried;
        if parked {
            if self.own[0].park_flag() {
                timeout = Duration::ZERO;
            }
            // Through the probes, no seat locked: the look ahead found
            // every loop with nothing waiting (else the timeout is zero),
            // and asked each one's `eager` with its `due`.
            for a in &mut self.adopted {
                a.parks += 1;
                if a.probe.park(a.eager) {
                    a.due = now;
                    timeout = Duration::ZERO;
                }
            }
        }
        // Work waiting right after a round that polled (most often a hop
        // from one worker to another held here) is served without
        // polling: the sockets were just read, and the round after this
        // polls again. That halves the busy rounds' syscalls.
        let skip = timeout.is_zero() && self.polled && !carried;
        self.polled = !skip;
        // Otherwise one wait on the outer set tells which loops have
        // socket events (and which, whose own set is ready, must poll it).
        // A round that skips the wait knows it has no socket event to
        // serve (they wait, queued, for the next round's): only the loops
        // with work due take a turn, not every loop.
        let mut known = true;
        if skip {
            self.wakeups.clear();
        } else if !carried {
            self.wakeups.clear();
            known = match &self.outer {
                Some(fd) => wait(fd, timeout, &mut self.wakeups),
                None => false,
            };
        }
        // The round's one wall-clock read, before its instant: each turn
        // derives its wall time from the microseconds it computes for the
        // watchdog (see `worker::clock`).
        let wall_us = worker::wall_us();
        let woke = Instant::now();
        if !timeout.is_zero() {
            self.burst.idle += woke.saturating_duration_since(now);
        }
        self.burst.round = woke;
        let woke_us = self.hosts.us(woke);
        let wall = EpochWall::new(wall_us, woke_us).with_budget(self.turn_budget);
        self.round_us = woke_us.max(1);
        self.slot().round_us.store(self.round_us, Ordering::Relaxed);
        // All awake before any runs: a message from one to another is then
        // a ring push with no doorbell. (A flag is a word of the loop's
        // doorbell: lowered without its seat.)
        if parked {
            self.own[0].unpark_flag();
            for a in &self.adopted {
                a.probe.unpark();
            }
        }
        let wakeups = &self.wakeups;
        let polls = |id: usize| !skip && (!known || wakeups.ready.contains(&id));
        // Coordinators' jobs for the other workers held here run at once
        // (see `worker::cohost`).
        let lender = HubLender {
            hosts: &self.hosts,
            hub: self.id,
            own: std::cell::Cell::new(std::ptr::null_mut()),
            pinned: std::cell::RefCell::new(Vec::new()),
            own_pinned: std::cell::Cell::new(false),
            turn: std::cell::Cell::new(usize::MAX),
            loaned: std::cell::Cell::new(None),
            outer: &self.outer,
            lent: std::cell::RefCell::new(std::mem::take(&mut self.lent)),
        };
        // Each turn records its start for the watchdog (see
        // `Slot::round_us`), and runs at that time: the turn's one clock
        // read.
        let hosts = &self.hosts;
        let turn = |id: usize| {
            let at = Instant::now();
            let us = hosts.us(at);
            hosts.slots[id].round_us.store(us.max(1), Ordering::Relaxed);
            wall.turn(at, us)
        };
        let own_served = worker::lending(&lender, || {
            let mine = wakeups.of(self.id);
            let at = wall.turn(woke, woke_us);
            self.own[0].step_shared(&mut self.events, polls(self.id), mine, led, at);
            let slots = &self.hosts.slots;
            slots[self.id]
                .reqs
                .store(self.own[0].commands(), Ordering::Relaxed);
            // From here on the own worker is idle: it may be lent, and a
            // script past `busy-reply-threshold` in an adopted loop's turn
            // serves its clients (see `worker::lending_own`).
            lender.own.set(&mut *self.own[0]);
            let events = &mut self.events;
            let hosts = &self.hosts;
            let (adopted, outer) = (&mut self.adopted, &self.outer);
            let ((), mut own_served) = worker::lending_own(self.id, || {
                // An adopted worker with no socket event, no message and
                // no timer due sits this round out, its seat not even
                // locked: a round serves the loops that have work, not
                // all of the hub's (messages between the loops held here
                // ring no doorbell, but mark the destination's ready
                // words, which the next round's look ahead reads; a
                // worker lent a job has its `due` asked again then).
                let ready = |a: &Adopted| {
                    polls(a.id) || !known || !wakeups.of(a.id).is_empty() || a.due <= woke
                };
                each_ready(hosts, self.id, adopted, outer, ready, |a, w| {
                    let poll = polls(a.id);
                    let at = turn(self.id);
                    lender.turn.set(a.id);
                    w.step_shared(events, poll, wakeups.of(a.id), led, at);
                    slots[a.id].reqs.store(w.commands(), Ordering::Relaxed);
                    settle(a, w, woke);
                })
            });
            lender.turn.set(usize::MAX);
            // The own worker, lent away, comes back after its borrower's
            // current iteration; while that runs long (a script of one of
            // its clients), the hub serves its adopted loops meanwhile:
            // the borrower's, and none other (`give_back_free`).
            let mut away: Option<Wakeups> = None;
            while !lender.take_back_own() {
                let w = away.get_or_insert_with(|| {
                    give_back_free(hosts, self.id, adopted);
                    Wakeups::default()
                });
                let turns = (&**hosts, self.id, &lender);
                own_served |= serve_while_away(turns, adopted, outer, events, w, led);
            }
            own_served
        });
        // Lent a job after its turn (or before it, in this round): its
        // `due` is asked again before the next wait.
        let mut lent = lender.lent.into_inner();
        for a in &mut self.adopted {
            if lent[a.id / 64] & (1 << (a.id % 64)) != 0 {
                a.stale = true;
            }
        }
        lent.iter_mut().for_each(|w| *w = 0);
        self.lent = lent;
        if own_served {
            self.own[0].settle_idle();
        }
        // WATCHes a script of the round parked for the own loop, which it
        // stalled: registered before the round ends (the worker may be
        // handed to another thread between rounds, a fold).
        self.own[0].register_parked();
        engine::alloc::enter_shard(self.id);
        self.slot().round_us.store(0, Ordering::Relaxed);
    }

    /// Whether socket events or a ready loop wait, without sleeping (for
    /// the AOF lead, between rounds). What it takes is carried to the
    /// next round: an edge-triggered event taken here would not come
    /// again.
    pub(super) fn peek_ready(&mut self) -> bool {
        if self.wakeups.carried {
            return true;
        }
        let Some(fd) = &self.outer else {
            return false;
        };
        self.wakeups.clear();
        if !wait(fd, Duration::ZERO, &mut self.wakeups) {
            return true;
        }
        let any = !self.wakeups.is_empty();
        self.wakeups.carried = any;
        any
    }
}

/// Adds epoll set `fd` to `outer`, level-triggered, tagged with `tag`.
pub(super) fn epoll_add(outer: &OwnedFd, fd: RawFd, tag: usize) -> std::io::Result<()> {
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: tag as u64,
    };
    // SAFETY: both descriptors are open epoll sets; `ev` is ours.
    if unsafe { libc::epoll_ctl(outer.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Removes epoll set `fd` from `outer` (a closed `fd` is gone already).
pub(super) fn epoll_del(outer: &OwnedFd, fd: RawFd) {
    // SAFETY: `outer` is open; DEL of a descriptor not in it fails
    // harmlessly, and ignores the event.
    unsafe {
        libc::epoll_ctl(
            outer.as_raw_fd(),
            libc::EPOLL_CTL_DEL,
            fd,
            std::ptr::null_mut(),
        );
    }
}

/// Sleeps on the outer epoll set until an event or `timeout`: fills
/// `w` with the loops whose own set is ready and the connections' events
/// (sorted by tag), or returns false if it cannot tell (the wait failed:
/// every loop must poll its own set).
fn wait(fd: &OwnedFd, timeout: Duration, w: &mut Wakeups) -> bool {
    let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
    w.clear();
    let buf = &mut w.conns;
    // SAFETY: `buf` has room for `EVENTS_MAX` events (its capacity); the
    // kernel initialises the first `n` it returns, which `set_len` keeps.
    let n = unsafe {
        buf.reserve(EVENTS_MAX);
        let n = libc::epoll_wait(fd.as_raw_fd(), buf.as_mut_ptr(), EVENTS_MAX as i32, ms);
        if n > 0 {
            buf.set_len(n as usize);
        }
        n
    };
    if n < 0 {
        return false;
    }
    let ready = &mut w.ready;
    buf.retain(|e| {
        let tag = e.u64;
        if hub_untag(tag).is_none() {
            ready.push(tag as usize);
            return false;
        }
        true
    });
    buf.sort_unstable_by_key(|e| e.u64);
    w.index();
    true
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::server::worker::Lender;

    /// A hub's own worker lent to the thread of the first adopted loop
    /// whose script ran long moves to the thread of the next one's (the
    /// stuck turn) once let go: left with the first, that thread could not
    /// take its own loop back (the watchdog leaves a borrower's loop with
    /// the hub), and that loop's clients waited for the second script,
    /// which does not hold their shard. Before, the second script's busy
    /// passes found the worker lent and never asked it back.
    #[test]
    fn a_loan_moves_to_the_thread_of_the_stuck_turn() {
        let hosts = Hosts::unwatched(3, Box::new(|_| {}), Arc::new(AtomicUsize::new(0)));
        let mut c = crate::server::worker::testing::Cluster::new(3);
        let mut own = Box::new(c.workers.remove(0));
        let outer = None;
        let lender = HubLender {
            hosts: &hosts,
            hub: 0,
            own: std::cell::Cell::new(&mut *own),
            pinned: std::cell::RefCell::new(Vec::new()),
            own_pinned: std::cell::Cell::new(false),
            turn: std::cell::Cell::new(1),
            loaned: std::cell::Cell::new(None),
            outer: &outer,
            lent: std::cell::RefCell::new(vec![0; 1]),
        };
        // Loop 1's script is busy: lent to thread 1.
        assert!(lender.loan_own());
        assert!(hosts.borrowing(1));
        assert!(hosts.slots[0].own_away.load(Ordering::Relaxed));
        // Later passes of the same script leave it there.
        assert!(lender.loan_own());
        assert!(!hosts.loans[1].recall.load(Ordering::Relaxed));
        // Loop 2's script is busy while thread 1 still has it: asked back.
        lender.turn.set(2);
        assert!(lender.loan_own());
        assert!(
            hosts.loans[1].recall.load(Ordering::Relaxed),
            "the worker lent to thread 1 is asked back"
        );
        assert!(hosts.borrowing(1), "not let go yet");
        assert!(lender.loan_own());
        assert!(!hosts.borrowing(2));
        // Thread 1 lets it go (as `Hosts::serve_loan` does after its
        // iteration): the next pass lends it to thread 2.
        hosts.loans[1]
            .worker
            .store(std::ptr::null_mut(), Ordering::Release);
        assert!(lender.loan_own());
        assert!(!hosts.borrowing(1), "thread 1 may take its own loop back");
        assert!(hosts.borrowing(2));
        assert_eq!(lender.loaned.get().map(|(to, _)| to), Some(2));
        assert!(hosts.slots[0].own_away.load(Ordering::Relaxed));
        // The round's end takes it back from thread 2.
        lender.turn.set(usize::MAX);
        assert!(!lender.take_back_own());
        hosts.loans[2]
            .worker
            .store(std::ptr::null_mut(), Ordering::Release);
        assert!(lender.take_back_own());
        assert!(!hosts.slots[0].own_away.load(Ordering::Relaxed));
        assert_eq!(lender.own.get(), &mut *own as *mut Worker);
    }
}
