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
//! So a thread whose load and thread 0's (the hub's) together fit well in
//! one core hands its worker to the hub, and sleeps until it gets it back.
//! The hub runs all the workers it holds in turn, as one event loop:
//! - it sleeps on an epoll set of their epoll sets (level-triggered), so a
//!   socket event or doorbell of any of them wakes it;
//! - before sleeping it raises every worker's parked flag (see
//!   `mailbox`), and lowers them all when it wakes: while it runs none is
//!   parked, so hops between the workers it holds are ring pushes and pops
//!   with no doorbell;
//! - each worker's turn polls its own epoll set without waiting, and
//!   serves its events and messages as it would on its own thread.
//!
//! A worker is a closed world (its connections, shard, blocked clients,
//! coordinators), and `Send`, so it can move to another thread between
//! iterations; the hand-off goes through a mutex, which orders everything
//! the old thread did before everything the new one does. Nothing in the
//! worker depends on which thread runs it, except: allocation accounting
//! (each turn enters the worker's shard), naps (only a worker alone on its
//! own thread naps), and transaction ids (counted per home shard, see
//! `commands::tx`).
//!
//! The hub gives a worker back when it is saturated (busy nearly all of a
//! window, in CPU time, and hardly ever sleeping), when
//! `shard-consolidation` is turned off, and at shutdown (each worker goes
//! to the shutdown gate from its own thread). After giving a worker back
//! it is not taken again for a while, doubling each time it comes back
//! soon after, so a load at the edge does not make workers shuttle.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use mio::Events;

use super::shutdown::Gate;
use super::worker::Worker;
use crate::log;

/// A worker on its way between threads (a worker is `Send`: everything
/// it holds is its own or thread-safe shared state).
pub struct Hosted(Box<Worker>);

/// CPU share of a thread in per mille of one core.
type Permille = u32;

/// Length of a load window.
const WINDOW: Duration = Duration::from_millis(100);

/// A thread hands its worker to the hub when its own load and the hub's
/// added stay below this for [`STREAK`] windows: two threads at 0.35–0.45
/// of a core each (pipeline 1, 50 clients) merge. Below [`SPLIT_AT`], so a
/// load between the two stays as it is.
const MERGE_BELOW: Permille = 900;

/// The hub gives a worker back when its load stays at or above this, and
/// it slept at most [`SPLIT_MAX_SLEEPS`] times per window, for
/// [`SPLIT_STREAK`] windows: it cannot keep up alone.
const SPLIT_AT: Permille = 950;
const SPLIT_MAX_SLEEPS: u32 = 20;

/// ... and only while the machine has most of a core idle for the thread
/// to be given back to. Without it, a second thread competes for the same
/// cores: with redis-benchmark on one of two vCPUs, a saturated hub at
/// pipeline 16 ran MGET of 10 keys at 263k/s, the two threads apart at
/// 215k/s; the machine was about half a core idle meanwhile (the load
/// generator waits for replies too).
const SPLIT_MIN_IDLE: Permille = 900;

/// Consecutive windows a merge condition must hold...
const STREAK: u32 = 2;
/// ... and a split condition: the machine's idle time comes in clock
/// ticks (10 ms), coarse over one window.
const SPLIT_STREAK: u32 = 5;

/// Rounds an AOF lead waits for work left pending (see `Host::run`).
const MAX_DEFER: u32 = 2;
/// After a worker is given back, no merge for this long; doubled (up to
/// `HOLD_MAX`) each time it is given back within `HOLD_RESET` of merging.
const HOLD_MIN: Duration = Duration::from_secs(1);
const HOLD_MAX: Duration = Duration::from_secs(60);
const HOLD_RESET: Duration = Duration::from_secs(30);

#[derive(Default)]
struct Inbox {
    workers: Vec<Hosted>,
    /// Shutdown: the hub takes no workers until it reopens.
    closed: bool,
}

/// What the threads share about who hosts whom.
pub struct Hosts {
    epoch: Instant,
    /// Each thread's load over its last window.
    busy: Vec<AtomicU32>,
    /// Workers handed to the hub (thread 0), to adopt.
    inbox: Mutex<Inbox>,
    pending: AtomicBool,
    /// Each thread's worker, handed back by the hub.
    back: Vec<Mutex<Option<Hosted>>>,
    threads: Vec<OnceLock<std::thread::Thread>>,
    /// Each thread: no hand-off before this many ms since `epoch`.
    hold_until: Vec<AtomicU64>,
    /// When the hub last adopted a worker (ms since `epoch`; 0: never):
    /// its published load does not show that worker's yet.
    last_adopt: AtomicU64,
    /// Wakes the hub's own worker (its doorbell).
    wake_hub: Box<dyn Fn() + Send + Sync>,
    /// Threads running at least one worker (INFO `shard_threads_active`).
    active: Arc<std::sync::atomic::AtomicUsize>,
}

impl Hosts {
    pub fn new(
        n: usize,
        wake_hub: Box<dyn Fn() + Send + Sync>,
        active: Arc<std::sync::atomic::AtomicUsize>,
    ) -> Self {
        active.store(n, Ordering::Relaxed);
        Hosts {
            epoch: Instant::now(),
            busy: (0..n).map(|_| AtomicU32::new(0)).collect(),
            inbox: Mutex::new(Inbox::default()),
            pending: AtomicBool::new(false),
            back: (0..n).map(|_| Mutex::new(None)).collect(),
            threads: (0..n).map(|_| OnceLock::new()).collect(),
            hold_until: (0..n).map(|_| AtomicU64::new(0)).collect(),
            last_adopt: AtomicU64::new(0),
            wake_hub,
            active,
        }
    }

    fn ms(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_millis() as u64
    }

    fn inbox(&self) -> std::sync::MutexGuard<'_, Inbox> {
        self.inbox.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands `w` to the hub; gives it back if the hub takes none now: at
    /// shutdown, or while another worker's load is not yet in the hub's
    /// (two threads deciding on the same hub load would overload it).
    fn give(&self, w: Hosted) -> Result<(), Hosted> {
        let mut inbox = self.inbox();
        let last = self.last_adopt.load(Ordering::Relaxed);
        let settling = last != 0 && self.ms(Instant::now()) < last + 2 * WINDOW.as_millis() as u64;
        if inbox.closed || !inbox.workers.is_empty() || settling {
            return Err(w);
        }
        inbox.workers.push(w);
        self.pending.store(true, Ordering::Release);
        drop(inbox);
        (self.wake_hub)();
        Ok(())
    }

    /// Thread `id` sleeps until the hub gives its worker back.
    fn wait_back(&self, id: usize) -> Hosted {
        loop {
            if let Some(w) = self.back[id]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
            {
                return w;
            }
            std::thread::park();
        }
    }

    fn send_back(&self, id: usize, w: Hosted) {
        *self.back[id].lock().unwrap_or_else(|e| e.into_inner()) = Some(w);
        if let Some(t) = self.threads[id].get() {
            t.unpark();
        }
    }
}

/// A thread's load over the current window.
struct Window {
    start: Instant,
    cpu_ns: u64,
    /// Times the thread slept in this window.
    sleeps: u32,
    /// Consecutive windows the merge (or, on the hub, split) condition held.
    streak: u32,
    /// The hub: the machine's CPU ticks at the start of the window.
    ticks: Option<(u64, u64, u64)>,
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Window {
    fn new(now: Instant) -> Self {
        Window {
            start: now,
            cpu_ns: thread_cpu_ns(),
            sleeps: 0,
            streak: 0,
            ticks: None,
        }
    }

    /// Closes the window: this thread's load in it, and starts the next.
    fn roll(&mut self, now: Instant) -> Permille {
        let cpu = thread_cpu_ns();
        let wall = now.saturating_duration_since(self.start).as_nanos().max(1) as u64;
        let busy = (cpu.saturating_sub(self.cpu_ns) * 1000 / wall).min(1000) as Permille;
        self.start = now;
        self.cpu_ns = cpu;
        self.sleeps = 0;
        busy
    }
}

/// Whether a thread alone with its worker should hand it to the hub.
fn merge_wanted(mine: Permille, hub: Permille) -> bool {
    mine + hub < MERGE_BELOW
}

/// Whether the hub, holding other workers, cannot keep up alone, and a
/// core is idle for another thread (`idle`: idle CPU of the machine, per
/// mille of a core).
fn split_wanted(busy: Permille, sleeps: u32, idle: Permille) -> bool {
    busy >= SPLIT_AT && sleeps <= SPLIT_MAX_SLEEPS && idle >= SPLIT_MIN_IDLE
}

/// The machine's idle and total CPU time so far (`/proc/stat`, in clock
/// ticks), and its number of CPUs.
fn cpu_ticks() -> Option<(u64, u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let mut lines = stat.lines();
    let first = lines.next()?.strip_prefix("cpu ")?;
    let f: Vec<u64> = first
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal (guest is in user).
    let total: u64 = f.iter().take(8).sum();
    let idle = f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0);
    let cpus = lines.filter(|l| l.starts_with("cpu")).count() as u64;
    Some((idle, total, cpus.max(1)))
}

/// Idle CPU between two [`cpu_ticks`] readings, per mille of one core;
/// a full core's worth when `/proc/stat` cannot be read (then only the
/// hub's load decides); `None` for a first reading.
fn idle_between(a: Option<(u64, u64, u64)>, b: Option<(u64, u64, u64)>) -> Option<Permille> {
    match (a, b) {
        (Some((i0, t0, _)), Some((i1, t1, cpus))) if t1 > t0 => {
            Some(((i1.saturating_sub(i0)) * 1000 * cpus / (t1 - t0)) as Permille)
        }
        (Some(_), Some(_)) => Some(0),
        (None, Some(_)) => None,
        (_, None) => Some(1000),
    }
}

/// How long to refuse a merge after giving a worker back that merged
/// `held` ago, given the previous hold.
fn next_hold(prev: Duration, held: Duration) -> Duration {
    if held >= HOLD_RESET || prev.is_zero() {
        HOLD_MIN
    } else {
        (prev * 2).min(HOLD_MAX)
    }
}

/// One thread: the workers it runs (its own first) and its load.
pub struct Host {
    id: usize,
    /// Boxed: workers move between threads, a box moves as one pointer.
    #[allow(clippy::vec_box)]
    workers: Vec<Box<Worker>>,
    /// The hub: when each adopted worker (by id) arrived, and its last hold.
    merged_at: Vec<Option<Instant>>,
    hold: Vec<Duration>,
    /// Epoll set of the workers' epoll sets (level-triggered), while this
    /// thread holds more than one.
    outer: Option<std::os::fd::OwnedFd>,
    events: Events,
    /// Workers whose epoll sets the last outer wait found ready.
    ready: Vec<usize>,
    /// Whether the last shared round polled the workers' sets.
    polled: bool,
    /// Scratch: the ids of the workers held here.
    ids: Vec<usize>,
    /// Rounds since the last AOF lead that left work for the next.
    deferred: u32,
    window: Window,
    hosts: Arc<Hosts>,
}

impl Host {
    pub fn new(worker: Worker, hosts: Arc<Hosts>) -> Self {
        let id = worker.id();
        let _ = hosts.threads[id].set(std::thread::current());
        let n = hosts.busy.len();
        Host {
            id,
            workers: vec![Box::new(worker)],
            merged_at: vec![None; n],
            hold: vec![Duration::ZERO; n],
            outer: None,
            events: Events::with_capacity(1024),
            ready: Vec::new(),
            polled: false,
            ids: Vec::new(),
            deferred: 0,
            window: Window::new(Instant::now()),
            hosts,
        }
    }

    /// Serves until a shutdown is carried out: at a shutdown request every
    /// worker goes back to its own thread, and each goes to the gate from
    /// there (see `shutdown`); if the shutdown is refused they carry on.
    pub fn run(mut self, gate: &Gate) {
        loop {
            if self.workers[0].shutdown_requested() {
                if self.id == 0 {
                    self.hosts.inbox().closed = true;
                    self.adopt();
                    while self.workers.len() > 1 {
                        self.give_back(Instant::now(), false);
                    }
                }
                if self.workers[0].park(gate) {
                    break;
                }
                if self.id == 0 {
                    self.hosts.inbox().closed = false;
                }
                continue;
            }
            let now = Instant::now();
            // A thread that runs every shard commits the AOF itself.
            let led = self.workers.len() == self.hosts.busy.len();
            if self.workers.len() == 1 {
                self.workers[0].step_solo(now, &mut self.events, &mut self.window.sleeps, led);
            } else {
                self.step_shared(now, led);
            }
            if led {
                // Work left for the next round (most often hops between
                // the shards held here, whose records that round appends)
                // joins this round's fsync, up to two rounds.
                if self.deferred < MAX_DEFER && self.workers.iter().any(|w| w.has_pending_work()) {
                    self.deferred += 1;
                } else {
                    self.deferred = 0;
                    self.lead_aof();
                }
            }
            if self.id == 0 && self.hosts.pending.load(Ordering::Acquire) {
                self.adopt();
            }
            if now.saturating_duration_since(self.window.start) >= WINDOW {
                self.end_window(now);
            }
        }
        self.workers[0].shutdown();
    }

    /// One iteration of every worker this thread holds.
    fn step_shared(&mut self, now: Instant, led: bool) {
        let mut timeout = Duration::MAX;
        for w in &mut self.workers {
            timeout = timeout.min(w.timeout(now));
        }
        for w in &mut self.workers {
            if w.park_flag() {
                timeout = Duration::ZERO;
            }
        }
        // Work waiting right after a round that polled (most often a hop
        // from one worker to another held here) is served without
        // polling: the sockets were just read, and the round after this
        // polls again. That halves the busy rounds' syscalls.
        let skip = timeout.is_zero() && self.polled;
        self.polled = !skip;
        // Otherwise one wait on the outer set tells which workers' sets
        // hold events, and only those poll theirs.
        let mut known = false;
        if !skip {
            if let Some(fd) = &self.outer {
                self.window.sleeps += u32::from(!timeout.is_zero());
                known = wait(fd, timeout, &mut self.ready);
            }
        }
        // All awake before any runs: a message from one to another is then
        // a ring push with no doorbell.
        for w in &mut self.workers {
            w.unpark_flag();
        }
        for w in &mut self.workers {
            let poll = !skip && (!known || self.ready.contains(&w.id()));
            w.step_shared(&mut self.events, poll, led);
        }
        engine::alloc::enter_shard(self.id);
    }

    /// Under `appendfsync always`: one write and fsync of the records this
    /// round appended, for every worker held here. In this thread while
    /// nothing else waits (every client waits for these replies); by the
    /// writer thread when the batch is big or requests wait on a socket,
    /// so that this thread serves them during the fsync.
    fn lead_aof(&mut self) {
        let records: u64 = self.workers.iter().map(|w| w.aof_due()).sum();
        if records == 0 {
            return;
        }
        // The outer set is asked only for a batch small enough to lead.
        let inline = records <= super::aof::LEAD_MAX_RECORDS
            && !self.outer.as_ref().is_some_and(|fd| {
                wait(fd, Duration::ZERO, &mut self.ready) && !self.ready.is_empty()
            });
        self.ids.clear();
        self.ids.extend(self.workers.iter().map(|w| w.id()));
        for w in &mut self.workers {
            w.lead_aof(&self.ids, inline);
        }
        engine::alloc::enter_shard(self.id);
    }

    /// The hub takes the workers handed to it.
    fn adopt(&mut self) {
        let mut inbox = self.hosts.inbox();
        self.hosts.pending.store(false, Ordering::Relaxed);
        let arrived = std::mem::take(&mut inbox.workers);
        drop(inbox);
        let now = Instant::now();
        for Hosted(w) in arrived {
            let id = w.id();
            if let Err(e) = self.watch(&w) {
                log::warning(format_args!("shard {id}: cannot run on thread 0: {e}"));
                let until = self.hosts.ms(now + HOLD_MAX);
                self.hosts.hold_until[id].store(until, Ordering::Relaxed);
                self.hosts.send_back(id, Hosted(w));
                continue;
            }
            log::verbose(format_args!(
                "Shard {id} runs on thread 0 (loads {} and {} per mille)",
                self.hosts.busy[id].load(Ordering::Relaxed),
                self.hosts.busy[0].load(Ordering::Relaxed)
            ));
            self.merged_at[id] = Some(now);
            self.workers.push(w);
            self.hosts.active.fetch_sub(1, Ordering::Relaxed);
            self.hosts
                .last_adopt
                .store(self.hosts.ms(now).max(1), Ordering::Relaxed);
            // Split decisions start afresh with the new load.
            self.window.streak = 0;
            self.window.ticks = None;
        }
    }

    /// Adds `w`'s epoll set to this thread's outer set, creating that
    /// with this thread's own worker's set in it first.
    fn watch(&mut self, w: &Worker) -> std::io::Result<()> {
        use std::os::fd::FromRawFd;
        let outer = match &self.outer {
            Some(fd) => fd,
            None => {
                // SAFETY: epoll_create1 returns a new descriptor or -1.
                let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // SAFETY: `fd` is a new descriptor nothing else owns.
                let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
                epoll_add(&owned, &self.workers[0])?;
                self.outer.insert(owned)
            }
        };
        epoll_add(outer, w)
    }

    /// The hub gives its most recently adopted worker back; `split`: for
    /// its load (then the worker is not taken again for a while).
    fn give_back(&mut self, now: Instant, split: bool) {
        use std::os::fd::AsRawFd;
        let Some(w) = self.workers.pop_if(|w| w.id() != self.id) else {
            return;
        };
        let id = w.id();
        if let Some(fd) = &self.outer {
            // SAFETY: both descriptors are open; DEL ignores the event.
            unsafe {
                libc::epoll_ctl(
                    fd.as_raw_fd(),
                    libc::EPOLL_CTL_DEL,
                    w.epoll_fd(),
                    std::ptr::null_mut(),
                );
            }
        }
        let held = self.merged_at[id]
            .take()
            .map_or(Duration::MAX, |t| now.saturating_duration_since(t));
        if split {
            self.hold[id] = next_hold(self.hold[id], held);
            log::verbose(format_args!(
                "Shard {id} back on its own thread (thread 0 load {} per mille); no merge for {} ms",
                self.hosts.busy[0].load(Ordering::Relaxed),
                self.hold[id].as_millis()
            ));
            let until = self.hosts.ms(now + self.hold[id]);
            self.hosts.hold_until[id].store(until, Ordering::Relaxed);
        } else {
            log::verbose(format_args!("Shard {id} back on its own thread"));
        }
        self.hosts.active.fetch_add(1, Ordering::Relaxed);
        self.hosts.send_back(id, Hosted(w));
        if self.workers.len() == 1 {
            self.outer = None;
            self.window.streak = 0;
            self.window.ticks = None;
            engine::alloc::enter_shard(self.id);
        }
    }

    /// End of a load window: publish this thread's load and decide.
    fn end_window(&mut self, now: Instant) {
        let sleeps = self.window.sleeps;
        let busy = self.window.roll(now);
        self.hosts.busy[self.id].store(busy, Ordering::Relaxed);
        let on = self.workers[0].consolidation();
        if self.id == 0 {
            if self.workers.len() == 1 {
                return;
            }
            if !on {
                while self.workers.len() > 1 {
                    self.give_back(now, false);
                }
                return;
            }
            let ticks = cpu_ticks();
            let idle = idle_between(self.window.ticks, ticks);
            self.window.ticks = ticks;
            self.window.streak = if idle.is_some_and(|i| split_wanted(busy, sleeps, i)) {
                self.window.streak + 1
            } else {
                0
            };
            if self.window.streak >= SPLIT_STREAK {
                self.window.streak = 0;
                self.give_back(now, true);
            }
            return;
        }
        let hub = self.hosts.busy[0].load(Ordering::Relaxed);
        let held = self.hosts.ms(now) < self.hosts.hold_until[self.id].load(Ordering::Relaxed);
        self.window.streak = if on && !held && merge_wanted(busy, hub) {
            self.window.streak + 1
        } else {
            0
        };
        if self.window.streak < STREAK || self.workers[0].shutdown_requested() {
            return;
        }
        let Some(w) = self.workers.pop() else { return };
        match self.hosts.give(Hosted(w)) {
            Ok(()) => {
                let Hosted(w) = self.hosts.wait_back(self.id);
                self.workers.push(w);
            }
            Err(Hosted(w)) => self.workers.push(w),
        }
        self.window = Window::new(Instant::now());
    }
}

/// Adds `w`'s epoll set to `outer`, level-triggered, tagged with its id.
fn epoll_add(outer: &std::os::fd::OwnedFd, w: &Worker) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: w.id() as u64,
    };
    // SAFETY: both descriptors are open epoll sets; `ev` is ours.
    if unsafe {
        libc::epoll_ctl(
            outer.as_raw_fd(),
            libc::EPOLL_CTL_ADD,
            w.epoll_fd(),
            &mut ev,
        )
    } < 0
    {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Sleeps on the outer epoll set until one of its sets is ready or
/// `timeout` passes; fills `ready` with the ids of the workers whose sets
/// are, or returns false if it cannot tell (every set must be polled).
fn wait(fd: &std::os::fd::OwnedFd, timeout: Duration, ready: &mut Vec<usize>) -> bool {
    use std::os::fd::AsRawFd;
    let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 16];
    // SAFETY: `evs` has room for the events asked for.
    let n = unsafe { libc::epoll_wait(fd.as_raw_fd(), evs.as_mut_ptr(), evs.len() as i32, ms) };
    if n < 0 || n as usize == evs.len() {
        return false;
    }
    ready.clear();
    ready.extend(evs[..n as usize].iter().map(|e| e.u64 as usize));
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_light_threads_merge_and_a_core_of_work_does_not() {
        assert!(merge_wanted(400, 400));
        assert!(merge_wanted(0, 0));
        assert!(!merge_wanted(450, 450));
        assert!(!merge_wanted(5, 990), "the hub is nearly full");
        const { assert!(MERGE_BELOW < SPLIT_AT) };
        assert!(!merge_wanted(1000, 0));
    }

    #[test]
    fn the_hub_splits_only_when_it_cannot_keep_up() {
        assert!(split_wanted(1000, 0, 1000));
        assert!(split_wanted(980, SPLIT_MAX_SLEEPS, 950));
        assert!(
            !split_wanted(1000, 0, 500),
            "half a core idle: the load generator waits"
        );
        assert!(!split_wanted(980, 1000, 1000), "it still sleeps often");
        assert!(!split_wanted(800, 0, 1000));
        assert!(!split_wanted(1000, 0, 100), "no idle core to split onto");
    }

    #[test]
    fn idle_cpu_is_counted_in_cores() {
        // Two CPUs, 20 ticks, 10 of them idle: one core idle.
        assert_eq!(idle_between(Some((0, 0, 2)), Some((10, 20, 2))), Some(1000));
        assert_eq!(idle_between(Some((0, 0, 2)), Some((1, 20, 2))), Some(100));
        assert_eq!(idle_between(None, Some((1, 20, 2))), None, "first reading");
        assert_eq!(idle_between(Some((0, 0, 2)), None), Some(1000), "unknown");
        assert_eq!(idle_between(Some((5, 20, 2)), Some((5, 20, 2))), Some(0));
        let now = cpu_ticks().expect("/proc/stat");
        assert!(now.1 >= now.0 && now.2 >= 1);
    }

    #[test]
    fn the_hold_doubles_when_a_worker_comes_back_soon_after_merging() {
        let s = Duration::from_secs;
        assert_eq!(next_hold(Duration::ZERO, s(1)), HOLD_MIN);
        assert_eq!(next_hold(s(1), s(2)), s(2));
        assert_eq!(next_hold(s(2), s(2)), s(4));
        assert_eq!(next_hold(s(40), s(2)), HOLD_MAX);
        assert_eq!(next_hold(s(40), HOLD_RESET), HOLD_MIN);
    }
}
