//! Unit tests of `host`: hand-offs, the watchdog, rounds and figures.

use super::trial::Sample;
use super::*;

fn hosts(n: usize) -> Arc<Hosts> {
    Hosts::unwatched(n, Box::new(|_| {}), Arc::new(AtomicUsize::new(0)))
}

#[test]
fn a_give_back_never_counts_a_hub_below_zero_loops() {
    let h = hosts(4);
    let now = Instant::now();
    h.slots[1].runs.store(2, Ordering::Relaxed);
    h.returned(1, 2, now, false);
    assert_eq!(h.slots[1].runs.load(Ordering::Relaxed), 1);
    // Thread 1 away at a hub (0 loops): a stale give-back for it once
    // wrapped the count, and `fold_target`'s sum overflowed.
    h.slots[1].runs.store(0, Ordering::Relaxed);
    h.returned(1, 2, now, false);
    assert_eq!(h.slots[1].runs.load(Ordering::Relaxed), 0);
    assert_eq!(
        h.fold_target(3, 0, 1, now),
        Some(0),
        "thread 1 runs nothing"
    );
}

#[test]
fn a_thread_goes_to_the_first_lower_thread_with_room() {
    let h = hosts(6);
    let now = Instant::now();
    let set = |i: usize, busy: Permille, runs: usize| {
        h.slots[i].busy.store(busy, Ordering::Relaxed);
        h.slots[i].runs.store(runs, Ordering::Relaxed);
    };
    assert_eq!(h.target(0, 0, now), None, "thread 0 hands to nobody");
    assert_eq!(h.target(5, 0, now), Some(0), "idle: everything on thread 0");
    set(0, 800, 3);
    assert_eq!(h.target(5, 50, now), Some(0), "still room");
    assert_eq!(
        h.target(5, 200, now),
        Some(1),
        "thread 0 full: a second hub"
    );
    set(1, 0, 0);
    assert_eq!(h.target(5, 200, now), Some(2), "thread 1 is away at a hub");
    set(2, 10, MAX_LOOPS);
    assert_eq!(h.target(5, 200, now), Some(3), "thread 2 runs all it may");
    h.slots[3].pledged.store(800, Ordering::Relaxed);
    assert_eq!(h.target(5, 200, now), Some(4), "loads handed to 3 fill it");
    assert_eq!(h.target(4, 200, now), None, "only lower ids");
    h.slots[4].round_us.store(1, Ordering::Relaxed);
    let later = h.epoch + STUCK * 2;
    assert_eq!(
        h.target(5, 200, later),
        None,
        "thread 4 is stuck in a round"
    );
}

/// A hub alone with its own worker in a long command (a script past
/// `busy-reply-threshold`) runs no shared round, so it is never seen
/// stuck: a worker handed to it then must still come back, or its
/// clients wait for the whole command.
#[test]
fn a_worker_a_hub_leaves_in_its_inbox_goes_back() {
    let h = hosts(2);
    let mut c = crate::server::worker::testing::Cluster::new(2);
    let w = c.workers.pop().expect("worker 1");
    let at = Instant::now();
    assert!(h.give(0, Hosted(Box::new(w)), 0, at, false).is_ok());
    assert_eq!(h.handed.load(Ordering::Relaxed), 1);
    h.recall_unadopted(at + STUCK / 2);
    assert!(locked(&h.seats[1]).worker.is_none(), "not yet");
    h.slots[0].round_us.store(1, Ordering::Relaxed);
    h.recall_unadopted(at + STUCK * 2);
    assert!(
        locked(&h.seats[1]).worker.is_none(),
        "in a shared round: the turn watchdog's case"
    );
    h.slots[0].round_us.store(0, Ordering::Relaxed);
    h.recall_unadopted(at + STUCK * 2);
    let seat = locked(&h.seats[1]);
    assert!(seat.back && seat.worker.is_some(), "given back");
    assert_eq!(h.handed.load(Ordering::Relaxed), 0);
    assert!(locked(&h.inbox[0]).workers.is_empty());
}

/// A thread hands its worker over with the time its iteration began,
/// which may be a window old: the wait is timed from the hand-over.
#[test]
fn a_hand_over_is_timed_when_it_happens() {
    let h = hosts(2);
    let mut c = crate::server::worker::testing::Cluster::new(2);
    let w = c.workers.pop().expect("worker 1");
    std::thread::sleep(STUCK_ANYWAY + STUCK);
    // The watchdog looks at the moment just before the hand-over: timed
    // from the hand-over, the wait is not yet begun (no time passed by
    // then, however long this thread is kept off its core between the two
    // calls: with `Instant::now()` after `give`, 5 ms of that under load
    // made the test fail).
    let now = Instant::now();
    assert!(h.give(0, Hosted(Box::new(w)), 0, h.epoch, false).is_ok());
    h.recall_unadopted(now);
    assert!(
        locked(&h.seats[1]).worker.is_none(),
        "handed over just now, however stale the giver's clock"
    );
}

/// A hub that sat on a run queue (it did not run since the hand-over)
/// is not in a long command: the worker waits for it, unless the wait
/// passes [`STUCK_ANYWAY`].
#[test]
fn a_worker_waits_for_a_hub_kept_off_its_core() {
    let h = hosts(2);
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let sleeper = std::thread::spawn(move || {
        tx.send(gettid()).expect("send");
        let _ = done_rx.recv();
    });
    h.slots[0]
        .tid
        .store(rx.recv().expect("tid"), Ordering::Relaxed);
    let mut c = crate::server::worker::testing::Cluster::new(2);
    let w = c.workers.pop().expect("worker 1");
    let at = Instant::now();
    assert!(h.give(0, Hosted(Box::new(w)), 0, at, false).is_ok());
    h.recall_unadopted(at + STUCK * 4);
    assert!(locked(&h.seats[1]).worker.is_none(), "the hub did not run");
    h.recall_unadopted(at + STUCK_ANYWAY + STUCK);
    assert!(locked(&h.seats[1]).back, "waited too long anyway");
    done_tx.send(()).expect("wake");
    sleeper.join().expect("join");
}

/// A hub whose spread did not pay calls its workers back: they go
/// though the loads say the two threads would not merge.
#[test]
fn a_worker_called_back_goes_whatever_the_loads() {
    let h = hosts(2);
    let mut c = crate::server::worker::testing::Cluster::new(2);
    let w = c.workers.pop().expect("worker 1");
    h.slots[0].busy.store(900, Ordering::Relaxed);
    let at = h.epoch;
    assert!(!merge_wanted(500, 900));
    let w = h
        .give(0, Hosted(Box::new(w)), 500, at, false)
        .expect_err("no room by the loads");
    h.slots[0].runs.store(MAX_LOOPS, Ordering::Relaxed);
    let w = h
        .give(0, w, 500, at, true)
        .expect_err("a full hub takes none, called back or not");
    h.slots[0].runs.store(1, Ordering::Relaxed);
    assert!(h.give(0, w, 500, at, true).is_ok(), "called back");
    assert_eq!(locked(&h.inbox[0]).workers.len(), 1);
    assert!(h.slots[0].pending.load(Ordering::Relaxed));
}

#[test]
fn a_hubs_figures_are_its_requests_and_cpu_between_two_samples() {
    let t0 = Instant::now();
    let at = |ms: u64, cpu_ms: u64, reqs: u64| Sample {
        at: t0 + Duration::from_millis(ms),
        cpu_ns: cpu_ms * 1_000_000,
        reqs,
        loops: 2,
    };
    let f = at(0, 0, 1_000).to(at(10, 10, 2_600)).expect("figures");
    assert_eq!(f.per_sec, 160_000);
    assert_eq!(f.cpu_ns_per_req, 6_250);
    assert!(at(0, 0, 5).to(at(10, 10, 5)).is_none(), "no requests");
    assert!(
        at(0, 0, 5).to(at(10, 10, 0)).is_none(),
        "CONFIG RESETSTAT meanwhile: no figures, not a huge rate"
    );
}

/// A hub on thread 0 holding the `n` workers of a cluster, each with
/// one client (connected before the hand-over); the cluster keeps the
/// clients' ends.
fn hub_of(n: usize) -> (Arc<Hosts>, Host, crate::server::worker::testing::Cluster) {
    hub_with(crate::server::worker::testing::Cluster::new(n))
}

/// [`hub_of`] for the workers of cluster `c`.
fn hub_with(
    c: crate::server::worker::testing::Cluster,
) -> (Arc<Hosts>, Host, crate::server::worker::testing::Cluster) {
    let homes: Vec<usize> = (0..c.workers.len()).collect();
    hub_with_clients(c, &homes)
}

/// [`hub_with`], client `i` connected to loop `homes[i]`.
fn hub_with_clients(
    mut c: crate::server::worker::testing::Cluster,
    homes: &[usize],
) -> (Arc<Hosts>, Host, crate::server::worker::testing::Cluster) {
    let n = c.workers.len();
    let h = hosts(n);
    for (i, &home) in homes.iter().enumerate() {
        assert_eq!(c.connect(home), i);
    }
    let mut workers = std::mem::take(&mut c.workers).into_iter();
    let mut host = Host::new(workers.next().expect("worker 0"), h.clone());
    let at = Instant::now();
    for w in workers {
        assert!(h.give(0, Hosted(Box::new(w)), 0, at, true).is_ok());
    }
    host.adopt();
    assert_eq!(host.adopted.len(), n - 1);
    (h, host, c)
}

/// Rounds of `host` until client `i` of `c` has a reply.
fn reply_via(host: &mut Host, c: &mut crate::server::worker::testing::Cluster, i: usize) -> String {
    for _ in 0..1_000 {
        if let Some(r) = c.try_reply(i) {
            return r;
        }
        host.step_shared(Instant::now(), false);
    }
    let held: Vec<_> = host.adopted.iter().map(|a| a.id).collect();
    panic!("client {i}: no reply; the hub holds loops {held:?}");
}

/// How many times the hub polled each loop's own epoll set.
fn own_polls(h: &Hosts, host: &Host) -> Vec<u64> {
    let mut polls = vec![host.own[0].own_polls()];
    for a in &host.adopted {
        polls.push(
            locked(&h.seats[a.id])
                .worker
                .as_ref()
                .expect("seated")
                .own_polls(),
        );
    }
    polls
}

/// The connections of every loop a hub holds are in its outer set:
/// one wait tells each loop its socket events, and no loop polls its
/// own set for them (with nested sets, each loop with a request
/// polled its own, one `epoll_wait` per loop per round).
#[test]
fn one_wait_per_round_serves_the_sockets_of_every_loop() {
    let n = 4;
    let (h, mut host, mut c) = hub_of(n);
    // Settle what the hand-over left (a doorbell rung by `give`).
    for _ in 0..4 {
        host.step_shared(Instant::now(), false);
    }
    let before = own_polls(&h, &host);
    for i in 0..n {
        c.send(i, &["SET", &format!("k{i}"), "v"]);
    }
    for i in 0..n {
        assert_eq!(reply_via(&mut host, &mut c, i), "+OK\r\n");
    }
    for i in 0..n {
        c.send(i, &["GET", &format!("k{}", (i + 1) % n)]);
    }
    for i in 0..n {
        assert_eq!(reply_via(&mut host, &mut c, i), "$1\r\nv\r\n");
    }
    assert_eq!(own_polls(&h, &host), before, "no loop polled its own set");
}

/// Given back, a worker's connections leave the hub's set for its own
/// (and the hub's own worker's, once it is alone): each is served by
/// its thread's own wait.
#[test]
fn a_worker_given_back_takes_its_connections_home() {
    let (h, mut host, mut c) = hub_of(2);
    c.send(1, &["SET", "a", "1"]);
    assert_eq!(reply_via(&mut host, &mut c, 1), "+OK\r\n");
    host.give_back_all(Instant::now(), false);
    let mut w = locked(&h.seats[1]).worker.take().expect("given back");
    w.leave_set();
    let mut events = Events::with_capacity(64);
    // Each alone on "its thread" (both stepped here: a key may hop).
    for (i, want) in [(0, ":1\r\n"), (1, ":2\r\n")] {
        c.send(i, &["INCR", "n"]);
        let mut reply = None;
        for _ in 0..50 {
            host.own[0].step_solo(Instant::now(), &mut events, false);
            w.step_solo(Instant::now(), &mut events, false);
            reply = c.try_reply(i);
            if reply.is_some() {
                break;
            }
        }
        assert_eq!(reply.as_deref(), Some(want), "worker {i} alone");
    }
}

/// The AOF lead's look at the outer set between rounds (`peek_ready`)
/// takes edge-triggered socket events: the next round serves them
/// instead of waiting for edges that will not come again.
#[test]
fn socket_events_seen_between_rounds_are_served_by_the_next() {
    let (_h, mut host, mut c) = hub_of(2);
    for _ in 0..4 {
        host.step_shared(Instant::now(), false);
    }
    c.send(1, &["SET", "k", "v"]);
    let mut seen = false;
    for _ in 0..100 {
        seen = host.peek_ready();
        if seen {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(seen, "the request is seen");
    let mut reply = None;
    for _ in 0..20 {
        host.step_shared(Instant::now(), false);
        reply = c.try_reply(1);
        if reply.is_some() {
            break;
        }
    }
    assert_eq!(reply.as_deref(), Some("+OK\r\n"));
}

/// A round that skips the outer wait (work was waiting right after a
/// round that polled) gives a turn only to the loops with work due:
/// it has no socket event to hand out. (It gave every loop a turn: with
/// 32 loops on a hub, every other busy round served all 32.)
#[test]
fn a_round_without_a_wait_serves_only_the_loops_with_work() {
    let (h, mut host, mut c) = hub_of(4);
    for _ in 0..4 {
        host.step_shared(Instant::now(), false);
    }
    // A cron coming due would give a loop a turn of its own (under load
    // two rounds can outlast a cron period).
    far_timers(&mut host);
    let turns = |host: &Host| -> Vec<u64> {
        let mut t = vec![host.own[0].turns()];
        for a in &host.adopted {
            t.push(
                locked(&h.seats[a.id])
                    .worker
                    .as_ref()
                    .expect("seated")
                    .turns(),
            );
        }
        t
    };
    let key = (0..)
        .map(|i| format!("k{i}"))
        .find(|k| commands::table::shard_of(k.as_bytes(), 4) == 2)
        .expect("a key of shard 2");
    // XREAD may block (without BLOCK it never does): it hops, where a
    // plain command for a co-hosted shard runs by a call.
    c.send(0, &["XREAD", "STREAMS", &key, "0"]);
    // Loop 0 reads the request and sends it to loop 2 (in the first
    // round that waits: one after work came due skips its wait) ...
    rounds_until_mail(&mut host, 2);
    let before = turns(&host);
    // ... which has work in the next round, which does not wait.
    host.step_shared(Instant::now(), false);
    let after = turns(&host);
    assert_eq!(after[2], before[2] + 1, "loop 2 ran the request");
    assert_eq!(after[1], before[1], "loop 1 had nothing to do");
    assert_eq!(after[3], before[3], "loop 3 had nothing to do");
    assert_eq!(reply_via(&mut host, &mut c, 0), "*-1\r\n");
}

/// The parked flags of a hub's loops go up only before a wait that
/// may sleep: a round that starts with a message waiting (a hop from
/// one loop to another held here) does not sleep, and raises none
/// (before, every round raised and lowered every loop's flag: two
/// passes over the loops, under their seats' locks).
#[test]
fn a_round_with_work_waiting_parks_no_loop() {
    let (_h, mut host, mut c) = hub_of(3);
    for _ in 0..4 {
        host.step_shared(Instant::now(), false);
    }
    // An adopted loop's flag is raised through its probe (counted in its
    // entry); the own loop's by the worker.
    let parks = |host: &Host| -> u64 {
        host.own[0].parks() + host.adopted.iter().map(|a| a.parks).sum::<u64>()
    };
    // A key of shard 2, sent by loop 0's client: the hop leaves loop 2
    // a message for the next round.
    let key = (0..)
        .map(|i| format!("k{i}"))
        .find(|k| commands::table::shard_of(k.as_bytes(), 3) == 2)
        .expect("a key of shard 2");
    // (XREAD may block, so it hops: see the test above.)
    c.send(0, &["XREAD", "STREAMS", &key, "0"]);
    rounds_until_mail(&mut host, 2);
    let before = parks(&host);
    host.step_shared(Instant::now(), false);
    assert_eq!(parks(&host), before, "work waited: no flag raised");
    assert_eq!(reply_via(&mut host, &mut c, 0), "*-1\r\n");
}

#[test]
fn an_untried_spread_merges_whatever_the_loads() {
    let h = hosts(2);
    let mut c = crate::server::worker::testing::Cluster::new(2);
    let w = c.workers.pop().expect("worker 1");
    let mut host = Host::new(w, h.clone());
    let now = Instant::now();
    // Thread 0 saturated, thread 1 too: no merge by the loads.
    h.slots[0].busy.store(950, Ordering::Relaxed);
    assert_eq!(h.target(1, 950, now), None);
    assert_eq!(
        host.merge_target(950, now),
        Some(0),
        "a spread no trial made is not kept"
    );
    host.untried = false;
    assert_eq!(
        host.merge_target(950, now),
        None,
        "once merged, the loads decide"
    );
    assert_eq!(
        host.merge_target(0, now),
        None,
        "950 + 0 is above MERGE_BELOW"
    );
    h.slots[0].busy.store(100, Ordering::Relaxed);
    assert_eq!(host.merge_target(100, now), Some(0));
    host.untried = true;
    h.slots[1]
        .hold_until_ms
        .store(h.ms(now) + 1000, Ordering::Relaxed);
    assert_eq!(host.merge_target(950, now), None, "held after a spread");
    h.slots[0].runs.store(MAX_LOOPS, Ordering::Relaxed);
    h.slots[1].hold_until_ms.store(0, Ordering::Relaxed);
    assert_eq!(host.merge_target(950, now), None, "no hub with room");
}

#[test]
fn a_thread_hands_itself_away_only_while_open() {
    let h = hosts(3);
    assert!(h.close(2), "thread 2 hands its worker away");
    assert!(!h.close(2), "already closed");
    h.reopen(2);
    locked(&h.inbox[1]).closed = true;
    assert!(!h.close(1), "closed for shutdown");
}

/// Worker `id`'s figures, seated on `host` or its own.
fn figures(h: &Hosts, host: &Host, id: usize) -> (u64, u64) {
    if id == host.id {
        return (host.own[0].asks(), host.own[0].turns());
    }
    let seat = locked(&h.seats[id]);
    let w = seat.worker.as_ref().expect("seated");
    (w.asks(), w.turns())
}

/// Rounds of `host` until adopted loop `id` has mail waiting (a request
/// sent to it by another loop's turn).
fn rounds_until_mail(host: &mut Host, id: usize) {
    for _ in 0..100 {
        host.step_shared(Instant::now(), false);
        let a = host.adopted.iter().find(|a| a.id == id).expect("adopted");
        if a.probe.has_mail() {
            return;
        }
    }
    panic!("loop {id}: no mail");
}

/// Every adopted loop's timers pushed an hour away: from here on it has
/// work only from a socket event, a message or a job lent to it.
fn far_timers(host: &mut Host) {
    let far = Instant::now() + Duration::from_secs(3600);
    for a in &mut host.adopted {
        a.due = far;
    }
}

/// The key of shard `s` of `n` named `{prefix}{i}` for the first `i`.
fn key_of(prefix: &str, s: usize, n: usize) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| commands::table::shard_of(k.as_bytes(), n) == s)
        .expect("a key of the shard")
}

/// The ready set: a round neither takes a turn from nor locks (asks
/// `due_in` of) an adopted loop with no socket event, no message and no
/// timer due; it asked every loop every round before (a seat lock and a
/// `due_in` each, per round: with 32 loops, 0.35k instructions per SET
/// at pipeline 1).
#[test]
fn a_round_asks_nothing_of_a_loop_without_work() {
    let (h, mut host, mut c) = hub_of(4);
    for _ in 0..4 {
        host.step_shared(Instant::now(), false);
    }
    far_timers(&mut host);
    let before: Vec<_> = (0..4).map(|i| figures(&h, &host, i)).collect();
    // Client 1's SET of a key of shard 1: loop 1's work alone.
    let key = key_of("k", 1, 4);
    for _ in 0..3 {
        c.send(1, &["SET", &key, "v"]);
        assert_eq!(reply_via(&mut host, &mut c, 1), "+OK\r\n");
    }
    for i in [2, 3] {
        assert_eq!(
            figures(&h, &host, i),
            before[i],
            "loop {i}: neither asked nor given a turn"
        );
    }
    assert!(figures(&h, &host, 1).1 > before[1].1, "loop 1 served");
}

/// Looks ahead as the next round would, and asserts that loop `id`, with
/// mail (a message or a pub/sub delivery) waiting, is due now and the
/// round will not sleep, seen without its seat's lock.
fn assert_due_by_mail(h: &Hosts, host: &mut Host, id: usize) {
    let asks = figures(h, host, id).0;
    let now = Instant::now();
    let (hosts, hub) = (host.hosts.clone(), host.id);
    let t = round::look_ahead(&hosts, hub, &mut host.adopted, &host.outer, now);
    let a = host.adopted.iter().find(|a| a.id == id).expect("adopted");
    assert_eq!(t, Duration::ZERO, "loop {id} has mail: no sleep");
    assert!(a.due <= now, "loop {id} is due");
    assert_eq!(figures(h, host, id).0, asks, "seen without a lock");
}

/// No lost wake-up: a message for a loop sitting out (its timers far
/// away, so only the mail can make it due) makes it due at the next
/// round's look ahead, and that round serves it. (Without the look at
/// its doorbell's words, it sat out until its timer.)
#[test]
fn a_message_for_a_loop_sitting_out_makes_it_due() {
    let (h, mut host, mut c) = hub_of(4);
    for _ in 0..4 {
        host.step_shared(Instant::now(), false);
    }
    far_timers(&mut host);
    // XREAD hops (it may block): loop 0's turn sends it to loop 2, which
    // sits out the rest of that round.
    c.send(0, &["XREAD", "STREAMS", &key_of("k", 2, 4), "0"]);
    rounds_until_mail(&mut host, 2);
    assert!(c.try_reply(0).is_none(), "not served yet");
    assert_due_by_mail(&h, &mut host, 2);
    let turns = figures(&h, &host, 2).1;
    host.step_shared(Instant::now(), false);
    assert_eq!(figures(&h, &host, 2).1, turns + 1, "served the next round");
    // Its reply goes home to loop 0 (served first in a round): one more.
    host.step_shared(Instant::now(), false);
    assert_eq!(c.try_reply(0).as_deref(), Some("*-1\r\n"));
}

/// No lost wake-up from pub/sub: a message published on one loop for a
/// subscriber of a loop sitting out makes it due at the next round's look
/// ahead (the subscriber's pending flag), and that round delivers it.
#[test]
fn a_publish_for_a_loop_sitting_out_makes_it_due() {
    let (h, mut host, mut c) = hub_of(4);
    c.send(3, &["SUBSCRIBE", "ch"]);
    let sub = reply_via(&mut host, &mut c, 3);
    assert!(sub.contains("subscribe"), "{sub}");
    for _ in 0..4 {
        host.step_shared(Instant::now(), false);
    }
    far_timers(&mut host);
    c.send(1, &["PUBLISH", "ch", "hello"]);
    // The round that published: loop 3 was not due when it began.
    assert_eq!(reply_via(&mut host, &mut c, 1), ":1\r\n");
    assert!(c.try_reply(3).is_none(), "not delivered yet");
    assert_due_by_mail(&h, &mut host, 3);
    host.step_shared(Instant::now(), false);
    assert_eq!(
        c.try_reply(3).as_deref(),
        Some("*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n"),
        "the next round"
    );
}

/// A loop lent a job (an MSET's part for its shard, run by a call from
/// another loop's turn) is asked `due_in` again before the next wait
/// (the job may have left it work); a loop lent nothing is not.
#[test]
fn a_loop_lent_a_job_is_asked_again() {
    let (h, mut host, mut c) = hub_of(4);
    for _ in 0..4 {
        host.step_shared(Instant::now(), false);
    }
    far_timers(&mut host);
    let before: Vec<_> = (0..4).map(|i| figures(&h, &host, i)).collect();
    let (k0, k2) = (key_of("a", 0, 4), key_of("b", 2, 4));
    c.send(0, &["MSET", &k0, "1", &k2, "2"]);
    assert_eq!(reply_via(&mut host, &mut c, 0), "+OK\r\n");
    assert!(
        host.adopted.iter().any(|a| a.id == 2 && a.stale) || {
            // Asked already by a round after the one that lent it.
            figures(&h, &host, 2).0 > before[2].0
        }
    );
    let now = Instant::now();
    let (hosts, id) = (host.hosts.clone(), host.id);
    round::look_ahead(&hosts, id, &mut host.adopted, &host.outer, now);
    assert!(figures(&h, &host, 2).0 > before[2].0, "loop 2 asked again");
    assert!(host.adopted.iter().all(|a| !a.stale));
    assert_eq!(figures(&h, &host, 3), before[3], "loop 3 lent nothing");
    c.send(1, &["MGET", &k0, &k2]);
    assert_eq!(
        reply_via(&mut host, &mut c, 1),
        "*2\r\n$1\r\n1\r\n$1\r\n2\r\n"
    );
}

/// A loop given back (its host changed) leaves the hub's list at the next
/// round's look ahead, though it has no work: the hub no longer counts
/// it (`led`, the loops it holds).
#[test]
fn a_loop_given_back_leaves_the_round_without_work() {
    let (_h, mut host, _c) = hub_of(4);
    for _ in 0..4 {
        host.step_shared(Instant::now(), false);
    }
    far_timers(&mut host);
    let given = host.give_back_some(Instant::now(), 1);
    assert_eq!(given.len(), 1);
    host.step_shared(Instant::now(), false);
    assert_eq!(host.adopted.len(), 2);
    assert!(host.adopted.iter().all(|a| a.id != given[0]));
}

/// A loop given back while its hub was stuck in a turn, and adopted by
/// another hub before the first one's next round, leaves the first one's
/// list, though its seat holds it again (not given back): before, the
/// first hub kept it and ran it too, and the other hub's ready set did
/// not see what those turns left it.
#[test]
fn a_loop_another_hub_adopted_leaves_the_round() {
    let h = hosts(3);
    let mut c = crate::server::worker::testing::Cluster::new(3);
    let w2 = c.workers.pop().expect("worker 2");
    let w1 = c.workers.pop().expect("worker 1");
    let w0 = c.workers.pop().expect("worker 0");
    let mut a = Host::new(w0, h.clone());
    let mut b = Host::new(w1, h.clone());
    let now = Instant::now();
    assert!(h.give(0, Hosted(Box::new(w2)), 0, now, true).is_ok());
    a.adopt();
    for _ in 0..2 {
        a.step_shared(Instant::now(), false);
    }
    // The watchdog gives it back (hub 0 stuck in a turn), its thread
    // takes it and hands it to hub 1.
    {
        let mut seat = locked(&h.seats[2]);
        seat.back = true;
    }
    h.returned(0, 2, now, false);
    let w2 = {
        let mut seat = locked(&h.seats[2]);
        seat.back = false;
        seat.worker.take().expect("given back")
    };
    assert!(h.give(1, Hosted(w2), 0, now, true).is_ok());
    b.adopt();
    assert_eq!(b.adopted.len(), 1);
    assert!(!locked(&h.seats[2]).back, "seated at hub 1");
    let turns = |h: &Hosts| locked(&h.seats[2]).worker.as_ref().expect("seated").turns();
    let before = turns(&h);
    a.adopted[0].due = Instant::now();
    a.step_shared(Instant::now(), false);
    assert!(a.adopted.is_empty(), "hub 0 dropped it");
    assert_eq!(turns(&h), before, "and did not run it");
    b.step_shared(Instant::now(), false);
    assert_eq!(b.adopted.len(), 1, "hub 1 runs it");
}

/// Under `appendfsync always` with every shard on one hub (it leads the
/// AOF: the round's records are written and fsynced by the hub itself,
/// and the writer wakes none of its loops), a loop holding a reply for
/// records another loop appended is due once the hub's lead made them
/// durable. Here loop 3's SET of a key of shard 2 hops to loop 2, whose
/// reply loop 3 takes in the same round (a timer of its own due then),
/// before the lead; loop 3 appended nothing, so its lead sends no held
/// reply. Before, its `due`, asked before the fsync, stood until its
/// next timer, where every round used to ask it again.
#[test]
fn a_reply_held_for_the_aof_is_due_after_the_hubs_lead() {
    let dir = std::env::temp_dir().join(format!("tessera-hub-lead-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("t.aof"))
        .expect("aof file");
    let disk: &'static _ = Box::leak(Box::default());
    let wakers = crate::server::aof::Wakers::new(0);
    let aof = crate::server::aof::start(file, config::AppendFsync::Always, (disk, &wakers));
    let c = crate::server::worker::testing::Cluster::with_aof(4, Some(aof.clone()));
    let (h, mut host, mut c) = hub_with(c);
    for _ in 0..4 {
        host.step_shared(Instant::now(), true);
        host.lead_aof();
    }
    far_timers(&mut host);
    assert_eq!(
        host.adopted.iter().map(|a| a.id).collect::<Vec<_>>(),
        [1, 2, 3],
        "loop 2 takes its turn before loop 3"
    );
    c.send(3, &["SET", &key_of("a", 2, 4), "1"]);
    let turns = |host: &Host| [2, 3].map(|i| figures(&h, host, i).1);
    let before = turns(&host);
    // Loop 3 reads the request and sends it to loop 2 ...
    for _ in 0..100 {
        host.step_shared(Instant::now(), true);
        host.lead_aof();
        if turns(&host)[1] > before[1] {
            break;
        }
    }
    assert_eq!(turns(&host), [before[0], before[1] + 1], "loop 3 read it");
    // ... which runs it in the next round, and loop 3, with a timer due,
    // takes the reply after it: held, the record not durable yet.
    let three = host.adopted.iter_mut().find(|a| a.id == 3).expect("loop 3");
    three.due = Instant::now();
    host.step_shared(Instant::now(), true);
    assert_eq!(turns(&host), [before[0] + 1, before[1] + 2]);
    assert!(c.try_reply(3).is_none(), "held for the AOF");
    host.lead_aof();
    let now = Instant::now();
    let (hosts, hub) = (host.hosts.clone(), host.id);
    let t = round::look_ahead(&hosts, hub, &mut host.adopted, &host.outer, now);
    assert_eq!(t, Duration::ZERO, "loop 3 is due: its reply may go");
    host.step_shared(Instant::now(), true);
    aof.stop();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(c.try_reply(3).as_deref(), Some("+OK\r\n"));
}

/// A stuck round in the hub's own turn: the watchdog takes every worker
/// the hub holds (here its only one), so the hub holds none when the
/// round ends. The give-back is still on trial (or reviewed): before,
/// only a hub still holding a worker judged it, and two threads each kept
/// busy by the spread's own cost stayed apart for good (MSET of 10 keys
/// at pipeline 16 on 2 shards: 21-23 µs of CPU per op against 9.3).
#[test]
fn a_stuck_round_that_left_the_hub_nothing_is_still_judged() {
    let (h, mut host, _c) = hub_of(2);
    host.step_shared(Instant::now(), false);
    {
        let mut seat = locked(&h.seats[1]);
        seat.back = true;
    }
    h.taken_from_stuck(0, 1, Instant::now());
    host.step_shared(Instant::now(), false);
    assert!(
        host.adopted.is_empty(),
        "the hub dropped the loop taken back"
    );
    // The watchdog found that round's turn stuck.
    h.slots[0]
        .stuck_round
        .store(host.round_us, Ordering::Relaxed);
    let now = host.burst.round + STUCK;
    host.between_rounds(now);
    let judged: Vec<usize> = match (&host.trial, &host.review) {
        (Some(t), _) => t.threads[1..].to_vec(),
        (None, Some(r)) => r.threads.clone(),
        (None, None) => Vec::new(),
    };
    assert_eq!(judged, vec![1], "the spread is on trial or reviewed");
    assert!(!h.slots[0].stuck_gave.load(Ordering::Relaxed));
}

/// Replies client `i` of `c` has received so far.
fn replies_of(c: &mut crate::server::worker::testing::Cluster, i: usize) -> Vec<String> {
    std::iter::from_fn(|| c.try_reply(i)).collect()
}

/// A hub's turn that serves many short commands stops reading sockets
/// once its budget is spent, and the next rounds go on where it stopped,
/// the connections it left first: a turn is long only for one long
/// command, which is what the watchdog looks for. Before, one turn read
/// every connection with a socket event: with 50 clients pipelining 16
/// MSETs of 10 keys on 2 shards, turns of 5-9 ms, each found stuck by the
/// watchdog (`STUCK`), which spread the hub's loops every time.
///
/// The budget is spent as soon as it is looked at (a clock that has run
/// out): each turn reads one pipeline of `LOOK_EVERY` commands or more,
/// then leaves the rest.
#[test]
fn a_turn_of_many_short_commands_stops_at_its_budget() {
    let n = 2;
    // Three clients on the hub's own loop, three on the adopted one.
    let homes = [0, 1, 0, 0, 1, 1];
    let (_h, mut host, mut c) =
        hub_with_clients(crate::server::worker::testing::Cluster::new(n), &homes);
    host.turn_budget = Duration::ZERO;
    for _ in 0..4 {
        host.step_shared(Instant::now(), false);
    }
    let depth = 40;
    for (i, &home) in homes.iter().enumerate() {
        // A key of the client's own loop: each command runs in its turn.
        let key = key_of(&format!("n{i}:"), home, n);
        for _ in 0..depth {
            c.send(i, &["INCR", &key]);
        }
    }
    let want: Vec<String> = (1..=depth).map(|v| format!(":{v}\r\n")).collect();
    let mut served = vec![false; homes.len()];
    for round in 1..=3 {
        host.step_shared(Instant::now(), false);
        for (i, done) in served.iter_mut().enumerate() {
            let got = replies_of(&mut c, i);
            if *done {
                assert!(got.is_empty(), "client {i}: replies twice");
            } else if !got.is_empty() {
                assert_eq!(got, want, "client {i}: its whole pipeline, in order");
                *done = true;
            }
        }
        for home in 0..n {
            let done = (0..homes.len())
                .filter(|&i| homes[i] == home && served[i])
                .count();
            assert_eq!(
                done, round,
                "loop {home}: one pipeline per turn, the left ones in later rounds"
            );
        }
    }
}

/// A stuck give-back that did not pay makes the next turn wait twice as
/// long to be stuck, up to `STUCK_ANYWAY`; one that paid puts the bar
/// back. Before, every turn past `STUCK` was stuck, whatever the last
/// give-backs had shown: 32 shards under MSET of 10 keys at pipeline 1
/// on a host with steal time gave all 31 adopted shards back 14 times in
/// two 100k-op runs, each called back 50 ms later.
#[test]
fn stuck_give_backs_that_do_not_pay_raise_the_stuck_bar() {
    let h = hosts(2);
    let ms = |n: u64| n * 1000;
    let at = |n: u64| 1 + ms(n);
    h.slots[0].round_us.store(1, Ordering::Relaxed);
    assert!(!h.stuck(0, at(4)), "within STUCK");
    assert!(h.stuck(0, at(5)), "STUCK at first");
    let mut bars = Vec::new();
    for _ in 0..6 {
        bars.push(h.stuck_verdict(0, false) / 1000);
    }
    assert_eq!(bars, vec![10, 20, 40, 80, 100, 100]);
    assert!(!h.stuck(0, at(99)), "the bar is STUCK_ANYWAY now");
    assert!(h.stuck(0, at(100)), "a long command is still found");
    assert!(!h.stuck(1, at(1)), "per hub");
    h.stuck_verdict(0, true);
    assert!(h.stuck(0, at(5)), "a give-back that paid: STUCK again");
}
