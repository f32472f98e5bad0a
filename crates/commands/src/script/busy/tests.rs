//! Unit tests of the busy-script machinery (`super`): the desks, pinned,
//! idle and caller loops lent for a call only, and WATCH parking.

use std::sync::atomic::{AtomicBool, AtomicU8};
use std::sync::Mutex;
use std::time::Instant;

use mlua::Lua;

use super::lent::{serve_idle, serve_pinned, serve_while_busy, stall_idle, DESK_HOME};
use super::*;

struct Count(u32);
impl BusyServe for Count {
    fn serve_busy(&mut self) {
        self.0 += 1;
        // Re-entry finds nothing lent.
        serve_while_busy();
    }
}

#[test]
fn a_desk_is_lent_for_the_call_only_and_never_reentered() {
    serve_while_busy();
    let mut outer = Count(0);
    let mut inner = Count(0);
    lend_desk(&mut outer, 0, || {
        serve_while_busy();
        lend_desk(&mut inner, 0, serve_while_busy);
        // The outer desk is back once the inner lend ends.
        serve_while_busy();
    });
    serve_while_busy();
    assert_eq!((outer.0, inner.0), (2, 1));
}

/// A run in place's pinned loops, as a test sees them.
struct Loops(Vec<usize>, u32, Arc<Running>);
impl PinnedLoops for Loops {
    fn pinned(&self, into: &mut Vec<usize>) {
        into.clone_from(&self.0);
    }
    fn serve_pinned(&mut self) {
        self.1 += 1;
        // Re-entry finds nothing lent.
        serve_pinned(&self.2.clone(), false);
    }
}

#[test]
fn pinned_loops_are_lent_for_the_call_only_and_published_before_served() {
    let r = Arc::new(Running {
        registry: &REGISTRY,
        eval: true,
        name: String::new(),
        command: Vec::new(),
        started: Instant::now(),
        shard: None,
        home: Some(0),
        pinned: Mutex::new(Vec::new()),
        stalled: Mutex::new(Vec::new()),
        locked: Vec::new(),
        in_place: true,
        every: false,
        state: AtomicU8::new(CLEAN),
        watches: Mutex::new(Vec::new()),
        watching: AtomicBool::new(false),
        parked: Mutex::new(Vec::new()),
    });
    serve_pinned(&r, false);
    let mut loops = Loops(vec![3, 5], 0, r.clone());
    lend_pinned(&mut loops, || {
        serve_pinned(&r, true);
        assert_eq!(*r.pinned.lock().unwrap(), vec![3, 5]);
        serve_pinned(&r, false);
    });
    serve_pinned(&r, false);
    assert_eq!(loops.1, 1);
}

/// A hub's idle own loop, as a test sees it.
struct Own(usize, Vec<bool>);
impl IdleLoops for Own {
    fn idle(&self, into: &mut Vec<usize>) {
        into.push(self.0);
    }
    fn serve_idle(&mut self, first: bool) {
        self.1.push(first);
        // Re-entry finds nothing lent.
        serve_idle(false);
    }
}

/// The registry of the scripts these tests make by hand.
static REGISTRY: Registry = Registry::new();

fn running(home: usize, pinned: Vec<usize>) -> Running {
    Running {
        registry: &REGISTRY,
        eval: true,
        name: String::new(),
        command: Vec::new(),
        started: Instant::now(),
        shard: Some(home),
        home: Some(home),
        pinned: Mutex::new(pinned),
        stalled: Mutex::new(Vec::new()),
        locked: Vec::new(),
        in_place: false,
        every: false,
        state: AtomicU8::new(CLEAN),
        watches: Mutex::new(Vec::new()),
        watching: AtomicBool::new(false),
        parked: Mutex::new(Vec::new()),
    }
}

/// The idle loop is lent for the call only, published as stalled
/// unless the script holds it (its home, or pinned: served as such),
/// and never held (a WATCH of its keys is not taken).
#[test]
fn an_idle_loop_is_stalled_unless_held_and_lent_for_the_call_only() {
    let r = running(1, Vec::new());
    assert!(!stall_idle(&r));
    let mut own = Own(0, Vec::new());
    lend_idle(&mut own, || {
        assert!(stall_idle(&r));
        assert_eq!(*r.stalled.lock().unwrap(), vec![0]);
        assert!(!r.holds(0));
        serve_idle(true);
        serve_idle(false);
        assert!(!stall_idle(&running(0, Vec::new())));
        assert!(!stall_idle(&running(1, vec![0])));
    });
    serve_idle(true);
    assert_eq!(own.1, vec![true, false]);
}

/// A job's registry that counts the lends of its loop.
struct Lends(u32);
impl crate::coord::ClientRegistry for Lends {
    fn for_each(&self, _f: &mut dyn FnMut(&crate::ClientState, &crate::coord::ClientIo)) {}
    fn kill(&mut self, _id: u64) -> bool {
        false
    }
    fn lend_desk(&mut self, f: &mut dyn FnMut()) {
        self.0 += 1;
        f()
    }
}

/// A script under a transaction's locks runs with its job's loop lent
/// (once) and its locked shards named, for the call only; published
/// with them, it stops commands of those shards and of its home, and
/// of no other.
#[test]
fn under_locks_lends_the_loop_and_names_its_shards_for_the_call_only() {
    let mut reg = Lends(0);
    let busy = Registry::new();
    let seen = under_locks(&busy, &mut reg, &[1, 3], || {
        assert!(busy.scripts_under_locks());
        let inner = under_locks(&busy, &mut Lends(0), &[2], || {
            LOCKED.with(|l| l.borrow().clone())
        });
        assert_eq!(inner, vec![2]);
        LOCKED.with(|l| l.borrow().clone())
    });
    assert_eq!((seen, reg.0), (vec![1, 3], 1));
    assert!(LOCKED.with(|l| l.borrow().is_empty()));
    assert!(!busy.scripts_under_locks());

    let mut r = running(0, Vec::new());
    r.locked = vec![1, 3];
    assert!(r.stops_any(&[3]) && r.stops_any(&[0, 2]) && !r.stops_any(&[2, 4]));
    // A WATCH of a locked shard's keys is not the script's to take.
    assert!(!r.holds(3));
}

/// The loops whose keys a WATCH cannot hand the script: those it
/// stops without holding their shard (its home while it runs on
/// copies, a loop it stalls), not those it holds (its shard, in place
/// its home and pinned loops) nor free ones. Those park them
/// (`watch::watch_stopped`).
#[test]
fn a_watch_is_parked_for_a_copies_home_and_a_stalled_loop() {
    let stopped = |r: &Running, s: usize| r.stops_loop(s) && !r.holds(s);
    let mut copies = running(0, Vec::new());
    copies.shard = None;
    *copies.stalled.lock().unwrap() = vec![3];
    assert!(stopped(&copies, 0) && stopped(&copies, 3));
    assert!(!stopped(&copies, 1));
    assert!(copies.parks(0) && copies.parks(3) && !copies.parks(1));
    let held = running(1, Vec::new());
    *held.stalled.lock().unwrap() = vec![0];
    assert!(held.parks(0) && !held.parks(1));
    let mut in_place = running(0, vec![2]);
    in_place.in_place = true;
    assert!(!stopped(&in_place, 0) && !stopped(&in_place, 2) && !stopped(&in_place, 1));
    assert!(!in_place.parks(0));
    let mut locked = running(0, Vec::new());
    locked.locked = vec![1];
    assert!(!stopped(&locked, 0) && !stopped(&locked, 1));
    assert!(!locked.parks(0) && !locked.parks(1));
}

/// A desk that counts its passes.
struct Passes(u32);
impl BusyServe for Passes {
    fn serve_busy(&mut self) {
        self.0 += 1;
    }
}

/// A caller's desk is lent as an idle loop for the call only: out of
/// the desk's slot (the script's own loop lends its desk there), served
/// with its inbox at each idle pass, beside the idle loops lent before
/// (chained, both stalled), and back in its slot afterwards.
#[test]
fn a_callers_desk_is_lent_as_an_idle_loop_beside_those_lent_before() {
    let r = running(2, Vec::new());
    let (mut caller, mut script) = (Passes(0), Passes(0));
    let mut own = Own(0, Vec::new());
    let mut inbox = 0;
    lend_idle(&mut own, || {
        lend_desk(&mut caller, 1, || {
            lend_caller(1, &mut || inbox += 1, || {
                assert_eq!(DESK_HOME.with(|d| d.get()), None);
                lend_desk(&mut script, 2, || {
                    assert!(stall_idle(&r));
                    assert_eq!(*r.stalled.lock().unwrap(), vec![1, 0]);
                    // A WATCH of their keys is parked with the script.
                    assert!(r.parks(1) && r.parks(0) && !r.parks(2));
                    serve_while_busy();
                    serve_idle(true);
                });
                serve_while_busy();
            });
            assert_eq!(DESK_HOME.with(|d| d.get()), Some(1));
            serve_while_busy();
        });
    });
    serve_idle(false);
    assert_eq!((caller.0, script.0, inbox), (2, 1, 1));
    assert_eq!(own.1, vec![true]);
}

/// A run killed at a hook call its slow calls hurried (`after_call`)
/// leaves the VM's next run free to hurry its hook again: before, `end`
/// reset the abort and skipped `hurried`, which stayed set, so every
/// later run of that VM waited the hook's plain interval (a loop of quick
/// `redis.call`s was published as busy up to seconds late).
#[test]
fn a_run_killed_at_a_hurried_hook_call_leaves_the_next_run_hurried_again() {
    let lua = Lua::new();
    let st = HookState::install(&lua).unwrap();
    st.begin(Kind::Eval([b'0'; 40]), None);
    st.hurried.set(true);
    st.abort.set(Some(KILLED));
    assert!(!st.end(&lua));
    assert!(!st.hurried.get(), "the next run may hurry its hook");
    assert!(st.abort.get().is_none());
    // And once more through `end` with only `hurried` set.
    st.begin(Kind::Eval([b'0'; 40]), None);
    st.hurried.set(true);
    st.end(&lua);
    assert!(!st.hurried.get());
}

/// A desk lent to a long script of one server that, at its first busy
/// pass, talks to another server of the same process, then kills the
/// script through its own server's registry.
struct Other<'a> {
    other: &'a mut crate::testutil::TestServer,
    own: &'a Registry,
    seen: Vec<String>,
}

impl BusyServe for Other<'_> {
    fn serve_busy(&mut self) {
        if self.seen.is_empty() {
            for cmd in [&["SET", "k", "v"][..], &["PING"], &["SCRIPT", "KILL"]] {
                self.seen.push(self.other.run(cmd));
            }
            self.seen.push(format!("{:?}", self.own.kill(true)));
        }
    }
}

/// Two servers in one process (the unit tests start several) share no
/// busy state: a script of one, published past its small threshold,
/// leaves the other's commands running and its SCRIPT KILL nothing to
/// kill, and its threshold is not the other's. (It was process-wide: a
/// long script of one test answered another test's SCAN `-BUSY`.)
#[test]
fn a_long_script_of_one_server_is_no_business_of_another() {
    use crate::testutil::TestServer;
    let (mut a, mut b) = (TestServer::new(1), TestServer::new(1));
    let ok = a.run(&["CONFIG", "SET", "busy-reply-threshold", "10"]);
    assert_eq!(ok, "+OK\r\n");
    let a_ops = a.server.ops;
    let mut desk = Other {
        other: &mut b,
        own: &a_ops.busy,
        seen: Vec::new(),
    };
    let reply = lend_desk(&mut desk, 0, || a.run(&["EVAL", "while true do end", "0"]));
    assert!(reply.contains("Script killed by user"), "{reply}");
    let notbusy = "-NOTBUSY No scripts in execution right now.\r\n";
    assert_eq!(desk.seen, ["+OK\r\n", "+PONG\r\n", notbusy, "Ok(())"]);
    assert!(!a_ops.busy.any());

    // The other's threshold is still the default (5 s): its script that
    // runs past 10 ms is not published (no busy pass serves its desk).
    let spin = "local t = redis.call('TIME') local s = t[1] * 1e6 + t[2] \
                repeat local n = redis.call('TIME') until n[1] * 1e6 + n[2] - s > 100000 \
                return 1";
    let mut passes = Passes(0);
    let reply = lend_desk(&mut passes, 0, || b.run(&["EVAL", spin, "0"]));
    assert_eq!(reply, ":1\r\n");
    assert_eq!(passes.0, 0, "published past the other server's threshold");
}
