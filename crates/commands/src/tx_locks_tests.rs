//! Tests of the lock table and the lock set: conflicts, queueing, what
//! granting costs, and deferred keys.

use super::*;
use crate::table::shard_of;

thread_local! {
    /// Requests compared with a lock request (pairwise or against the
    /// queue's summary) on this thread: what granting costs, counted.
    static CHECKS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

pub(super) fn count_check() {
    CHECKS.set(CHECKS.get() + 1);
}

fn checks() -> u64 {
    CHECKS.get()
}

thread_local! {
    /// Keys hashed for lock entries on this thread.
    static HASHES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

pub(super) fn count_hash() {
    HASHES.set(HASHES.get() + 1);
}

/// Keys hashed for lock entries on this thread so far.
pub(in crate::tx) fn hashes() -> u64 {
    HASHES.get()
}

/// A deferred set (an MSET's: each key's shard known, the keys not read)
/// covers the same shards, and once its keys are read from the command's
/// arguments makes the same requests as the set built at once; with
/// more keys than it holds inline (20 pairs) too.
#[test]
fn deferred_keys_make_the_requests_of_the_keys_read_at_once() {
    for pairs in [10, 20] {
        let n = 8;
        let mut argv: Vec<Vec<u8>> = vec![b"MSET".to_vec()];
        for i in 0..pairs {
            argv.push(format!("key:{i}").into_bytes());
            argv.push(b"v".to_vec());
        }
        // A key given twice: one entry.
        argv.push(b"key:3".to_vec());
        argv.push(b"w".to_vec());
        let slices: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        let owned = resp::OwnedArgs::from_slices(&slices);
        let args = owned.args();
        let r = crate::table::registry().resolve(args).expect("MSET");
        let mut positions = Vec::new();
        r.spec.key_positions(args, &mut positions);
        let shards: Vec<u16> = positions
            .iter()
            .map(|&p| shard_of(args.get(p), n) as u16)
            .collect();
        let mut eager = LockSet::default();
        eager.command_on(r.spec, args, 2, &positions, &shards);
        let hashes = HASHES.get();
        let mut deferred = LockSet::deferred(r.spec, 2, shards.iter().copied()).expect("keys");
        assert_eq!(HASHES.get(), hashes, "no key hashed");
        assert!(deferred.is_deferred() && !deferred.is_empty());
        let (mut a, mut b) = (Vec::new(), Vec::new());
        eager.shards_into(&mut a);
        deferred.shards_into(&mut b);
        assert_eq!(a, b, "the same shards");
        assert_eq!(eager.one_shard(), deferred.one_shard());
        deferred.undefer_args(args);
        assert!(!deferred.is_deferred());
        assert_eq!(HASHES.get(), hashes + pairs + 1, "each key once");
        assert_eq!(
            format!("{:?}", deferred.requests(7)),
            format!("{:?}", eager.requests(7)),
            "{pairs} pairs"
        );
    }
    let r = crate::table::registry()
        .resolve(resp::OwnedArgs::from_slices(&["MSET", "k", "v"]).args())
        .expect("MSET");
    assert!(
        LockSet::deferred(r.spec, 0, std::iter::empty()).is_none(),
        "no key"
    );
}

/// A deferred set of keys split by shard (an MGET's, kept by its
/// coordinator: `coord::KeyedStep`) covers the groups' shards, and once
/// its keys are read from the groups makes the same requests as the set
/// built at once from the command's arguments, with and without more
/// groups than it holds inline.
#[test]
fn deferred_groups_make_the_requests_of_the_keys_read_at_once() {
    for (nkeys, n) in [(10, 8), (200, 64)] {
        let mut argv: Vec<String> = vec!["MGET".into()];
        argv.extend((0..nkeys).map(|i| format!("key:{i}")));
        // A key given twice: one entry.
        argv.push("key:3".into());
        let owned = resp::OwnedArgs::from_slices(&argv);
        let args = owned.args();
        let r = crate::table::registry().resolve(args).expect("MGET");
        let mut positions = Vec::new();
        r.spec.key_positions(args, &mut positions);
        let shards: Vec<u16> = positions
            .iter()
            .map(|&p| shard_of(args.get(p), n) as u16)
            .collect();
        let mut eager = LockSet::default();
        eager.command_on(r.spec, args, 1, &positions, &shards);
        let (groups, _) = crate::multikey::split_by_shard(args, 1, n, &shards);
        let hashes = HASHES.get();
        let mut deferred = LockSet::deferred_groups(r.spec, 1, &groups).expect("keys");
        assert_eq!(HASHES.get(), hashes, "no key hashed");
        assert!(deferred.is_deferred() && !deferred.is_empty());
        let (mut a, mut b) = (Vec::new(), Vec::new());
        eager.shards_into(&mut a);
        deferred.shards_into(&mut b);
        assert_eq!(a, b, "the same shards");
        assert_eq!(a.len() > 16, nkeys == 200, "groups past those held inline");
        deferred.undefer_groups(&groups);
        assert!(!deferred.is_deferred());
        assert_eq!(HASHES.get(), hashes + nkeys + 1, "each key once");
        assert_eq!(
            format!("{:?}", deferred.requests(7)),
            format!("{:?}", eager.requests(7)),
            "{nkeys} keys over {n} shards"
        );
    }
    let r = crate::table::registry()
        .resolve(resp::OwnedArgs::from_slices(&["MGET", "k"]).args())
        .expect("MGET");
    assert!(LockSet::deferred_groups(r.spec, 0, &[]).is_none(), "no key");
}

fn req(tx: TxId, keys: &[(&str, Mode)]) -> LockReq {
    let mut r = LockReq {
        tx,
        ..Default::default()
    };
    for (k, m) in keys {
        r.add(0, k.as_bytes(), *m);
    }
    r
}

#[test]
fn readers_share_writers_exclude() {
    let mut t: LockTable<u32> = LockTable::default();
    assert_eq!(t.acquire(req(1, &[("a", Mode::Read)]), 1), Some(1));
    assert_eq!(t.acquire(req(2, &[("a", Mode::Read)]), 2), Some(2));
    assert_eq!(t.acquire(req(3, &[("a", Mode::Write)]), 3), None);
    assert!(t.blocks(0, [&b"a"[..]].into_iter(), true));
    assert!(!t.blocks(0, [&b"a"[..]].into_iter(), false));
    assert!(!t.blocks(0, [&b"b"[..]].into_iter(), true));
    assert_eq!(t.release(1), Vec::<u32>::new());
    assert_eq!(t.release(2), vec![3]);
    assert!(t.blocks(0, [&b"a"[..]].into_iter(), false));
    assert_eq!(t.release(3), Vec::<u32>::new());
    assert!(!t.any_held());
}

#[test]
fn fifo_no_starvation_and_non_conflicting_pass() {
    let mut t: LockTable<u32> = LockTable::default();
    assert!(t.acquire(req(1, &[("a", Mode::Read)]), 1).is_some());
    // A writer waits; a later reader of the same key queues behind it.
    assert!(t.acquire(req(2, &[("a", Mode::Write)]), 2).is_none());
    assert!(t.acquire(req(3, &[("a", Mode::Read)]), 3).is_none());
    // Unrelated keys pass.
    assert!(t.acquire(req(4, &[("b", Mode::Write)]), 4).is_some());
    assert_eq!(t.release(1), vec![2]);
    assert_eq!(t.release(2), vec![3]);
}

#[test]
fn whole_shard_locks() {
    let mut t: LockTable<u32> = LockTable::default();
    let mut w = LockReq {
        tx: 1,
        ..Default::default()
    };
    w.add_whole(Mode::Write);
    assert!(t.acquire(w, 1).is_some());
    assert!(t.blocks(0, std::iter::empty(), false));
    assert!(t.acquire(req(2, &[("x", Mode::Read)]), 2).is_none());
    assert_eq!(t.release(1), vec![2]);
    assert!(!t.blocks(0, std::iter::empty(), true));
}

#[test]
fn nowait_requests_never_queue() {
    let mut t: LockTable<u32> = LockTable::default();
    assert!(t.acquire(req(1, &[("a", Mode::Read)]), 1).is_some());
    // Readers share: granted.
    assert!(t.try_acquire(req(2, &[("a", Mode::Read)])).is_ok());
    assert!(t.acquire(req(3, &[("b", Mode::Write)]), 3).is_some());
    // Refused, handed back whole, nothing queued.
    let back = t.try_acquire(req(4, &[("b", Mode::Read)])).unwrap_err();
    assert_eq!((back.tx, back.keys.len()), (4, 1));
    assert_eq!(t.waiting_len(), 0);
    // A queued writer refuses a later reader too (FIFO), without
    // queueing it.
    assert!(t.acquire(req(5, &[("a", Mode::Write)]), 5).is_none());
    assert!(t.try_acquire(req(6, &[("a", Mode::Read)])).is_err());
    assert_eq!(t.waiting_len(), 1);
    assert!(t.release(1).is_empty());
    assert_eq!(t.release(2), vec![5]);
}

/// Duplicates merge when the table takes a request (Write wins, in
/// any order of adding), so a request holds one lock per key and
/// releases it once.
#[test]
fn a_request_locks_each_key_once() {
    let mut t: LockTable<u32> = LockTable::default();
    let keys: Vec<(String, Mode)> = (0..200)
        .flat_map(|i| {
            let k = format!("k{}", i % 50);
            let m = if i == 120 { Mode::Write } else { Mode::Read };
            [(k.clone(), m), (k, Mode::Read)]
        })
        .collect();
    let refs: Vec<(&str, Mode)> = keys.iter().map(|(k, m)| (k.as_str(), *m)).collect();
    let mut r = req(1, &refs);
    r.settle();
    assert_eq!(r.keys.len(), 50);
    assert_eq!(r.keys.iter().filter(|k| k.2 == Mode::Write).count(), 1);
    assert!(r
        .keys
        .windows(2)
        .all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1)));
    assert!(t.acquire(req(1, &refs), 1).is_some());
    // k20 (i = 120) is written: a reader of it waits, a reader of the
    // others passes.
    assert!(t.try_acquire(req(2, &[("k20", Mode::Read)])).is_err());
    assert!(t.try_acquire(req(3, &[("k21", Mode::Read)])).is_ok());
    assert!(t.release(1).is_empty());
    assert!(t.release(3).is_empty());
    assert!(!t.any_held(), "every lock released once");
}

/// Queued requests conflict exactly when they share a key and one of
/// them writes it, whatever the order their keys were added in.
#[test]
fn queued_requests_conflict_on_shared_written_keys() {
    let mut t: LockTable<u32> = LockTable::default();
    assert!(t.acquire(req(1, &[("z", Mode::Write)]), 1).is_some());
    // Waits behind 1; then everything after it is checked against it.
    let many: Vec<String> = (0..100).rev().map(|i| format!("m{i}")).collect();
    let mut w: Vec<(&str, Mode)> = many.iter().map(|k| (k.as_str(), Mode::Read)).collect();
    w.push(("z", Mode::Read));
    assert!(t.acquire(req(2, &w), 2).is_none());
    // Reads of keys that 2 also reads pass the queue (granted at once).
    assert!(t
        .try_acquire(req(3, &[("m7", Mode::Read), ("m93", Mode::Read)]))
        .is_ok());
    // A write of one of them: refused, FIFO behind 2.
    assert!(t
        .try_acquire(req(4, &[("q", Mode::Read), ("m42", Mode::Write)]))
        .is_err());
    // Keys 2 does not have: granted.
    assert!(t
        .try_acquire(req(5, &[("m100", Mode::Write), ("a", Mode::Write)]))
        .is_ok());
    assert_eq!(t.release(1), vec![2]);
}

/// A busy script's shard withdraws the waiting requests but those kept
/// while busy (allow-busy, or an EXEC that ran a command), in order;
/// the table is as if they never came: the holder's release grants the
/// kept one, nothing is left behind.
#[test]
fn withdrawn_for_busy_leaves_the_kept_requests() {
    let mut t: LockTable<u32> = LockTable::default();
    let mut w = LockReq {
        tx: 1,
        ..Default::default()
    };
    w.add_whole(Mode::Write);
    assert!(t.acquire(w, 1).is_some());
    assert!(t.withdraw_for_busy(|_| true).is_empty(), "nothing waits");
    assert!(t.acquire(req(2, &[("a", Mode::Write)]), 2).is_none());
    let mut kept = req(3, &[("b", Mode::Read)]);
    kept.keep_when_busy = true;
    assert!(t.acquire(kept, 3).is_none());
    assert!(t.acquire(req(4, &[("a", Mode::Read)]), 4).is_none());
    let gone: Vec<(TxId, u32)> = t
        .withdraw_for_busy(|_| true)
        .into_iter()
        .map(|(r, w)| (r.tx, w))
        .collect();
    assert_eq!(gone, vec![(2, 2), (4, 4)]);
    assert_eq!(t.waiting_len(), 1);
    assert!(
        t.withdraw_for_busy(|_| true).is_empty(),
        "the kept one stays"
    );
    assert_eq!(t.release(1), vec![3]);
    assert_eq!(t.release(3), Vec::<u32>::new());
    assert!(!t.any_held());
    assert_eq!(t.waiting_len(), 0);
}

#[test]
fn release_drops_a_waiting_request() {
    let mut t: LockTable<u32> = LockTable::default();
    assert!(t.acquire(req(1, &[("a", Mode::Write)]), 1).is_some());
    assert!(t.acquire(req(2, &[("a", Mode::Write)]), 2).is_none());
    assert!(t.release(2).is_empty());
    assert_eq!(t.waiting_len(), 0);
    assert!(t.release(1).is_empty());
}

/// A queue where each request conflicts only with the one just ahead of
/// it (a chain of MSETs over overlapping keys; the first waits for a held
/// key): comparing each with every one ahead cost O(waiting²) per
/// release, 80k comparisons for 400 waiters. Each release now looks at
/// each waiter once, and still grants in queue order.
#[test]
fn granting_costs_one_look_per_waiter() {
    const WAITERS: u64 = 400;
    let key = |i: u64| format!("chain{i}");
    let mut t: LockTable<u64> = LockTable::default();
    assert_eq!(t.acquire(req(0, &[(&key(0), Mode::Write)]), 0), Some(0));
    for tx in 1..=WAITERS {
        let (a, b) = (key(tx - 1), key(tx));
        assert_eq!(
            t.acquire(req(tx, &[(&a, Mode::Write), (&b, Mode::Write)]), tx),
            None
        );
    }
    let mut order = Vec::new();
    let mut holder = Some(0);
    while let Some(tx) = holder {
        let before = checks();
        let waiting = t.waiting_len() as u64;
        let granted = t.release(tx);
        let spent = checks() - before;
        assert!(
            spent <= 2 * waiting + 2,
            "release of {tx} made {spent} comparisons for {waiting} waiters"
        );
        assert!(granted.len() <= 1, "a chain goes one at a time");
        holder = granted.first().copied();
        order.extend(granted);
    }
    assert_eq!(order, (1..=WAITERS).collect::<Vec<_>>(), "queue order");
    assert!(!t.any_held() && t.waiting_len() == 0);
}

/// The queue's summary answers exactly as comparing with each request it
/// sums up, for random requests (keys read or written, whole shards read
/// or written), as requests join and leave.
#[test]
fn the_queue_summary_agrees_with_each_request() {
    struct Rnd(u64);
    impl Rnd {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
        fn mode(&mut self) -> Mode {
            if self.below(2) == 0 {
                Mode::Write
            } else {
                Mode::Read
            }
        }
        fn req(&mut self, tx: TxId) -> LockReq {
            let mut r = LockReq {
                tx,
                ..Default::default()
            };
            for _ in 0..self.below(4) {
                let (db, k, m) = (self.below(2) as usize, self.below(6), self.mode());
                r.add(db, format!("k{k}").as_bytes(), m);
            }
            if self.below(5) == 0 {
                let m = self.mode();
                r.add_whole(m);
            }
            r.settle();
            r
        }
    }
    let mut rnd = Rnd(0x9e37_79b9_7f4a_7c15);
    for _ in 0..200 {
        let n = rnd.below(6);
        let mut set: Vec<LockReq> = (0..n).map(|tx| rnd.req(tx)).collect();
        let mut sum = queue::Summary::default();
        set.iter().for_each(|r| sum.add(r));
        while !set.is_empty() {
            for tx in 100..120 {
                let probe = rnd.req(tx);
                let each = set.iter().any(|q| q.conflicts(&probe));
                assert_eq!(sum.conflicts(&probe), each, "{probe:?} against {set:?}");
            }
            let gone = set.swap_remove(rnd.below(set.len() as u64) as usize);
            sum.remove(&gone);
        }
        let probe = rnd.req(200);
        assert!(!sum.conflicts(&probe), "empty again: {sum:?}");
    }
}

/// A request withdrawn for a busy script leaves the queue's summary too:
/// a request for a key only the withdrawn one wanted is granted at once,
/// where a stale summary made it wait behind a request no longer queued.
#[test]
fn a_withdrawn_request_leaves_the_queue_summary() {
    let mut t: LockTable<u32> = LockTable::default();
    assert_eq!(t.acquire(req(1, &[("a", Mode::Write)]), 1), Some(1));
    assert!(t
        .acquire(req(2, &[("a", Mode::Write), ("b", Mode::Write)]), 2)
        .is_none());
    let gone = t.withdraw_for_busy(|_| true);
    assert_eq!(gone.len(), 1);
    assert_eq!(t.waiting_len(), 0);
    assert_eq!(
        t.acquire(req(3, &[("b", Mode::Write)]), 3),
        Some(3),
        "nothing queued on b"
    );
}

/// The shards a set covers come out ascending, each once, after what
/// `out` held, by the bits below `MASK_SHARDS` and by the sort when a
/// shard is past it (the same answer both ways).
#[test]
fn shards_into_gives_each_shard_once_ascending_below_and_past_the_mask() {
    let r = crate::table::registry()
        .resolve(resp::OwnedArgs::from_slices(&["MSET", "k", "v"]).args())
        .expect("MSET");
    for (given, want) in [
        (vec![5u16, 3, 5, 0, 127, 3], vec![0usize, 3, 5, 127]),
        (
            vec![5, 3, 5, 200, 0, 127, 128, 200],
            vec![0, 3, 5, 127, 128, 200],
        ),
        (vec![9], vec![9]),
        (vec![1000], vec![1000]),
    ] {
        let set = LockSet::deferred(r.spec, 0, given.iter().copied()).expect("keys");
        let mut out = vec![7777];
        set.shards_into(&mut out);
        assert_eq!(out[0], 7777, "what out held stays first");
        assert_eq!(&out[1..], &want[..], "{given:?}");
    }
    // Keys of an eager set, with whole-shard entries and past the mask.
    let owned = resp::OwnedArgs::from_slices(&["MSET", "a", "1", "b", "2", "c", "3"]);
    let args = owned.args();
    let mut positions = Vec::new();
    r.spec.key_positions(args, &mut positions);
    for n in [4, 300] {
        let shards: Vec<u16> = positions
            .iter()
            .map(|&p| shard_of(args.get(p), n) as u16)
            .collect();
        let mut set = LockSet::default();
        set.command_on(r.spec, args, 0, &positions, &shards);
        let mut want: Vec<usize> = shards.iter().map(|&s| usize::from(s)).collect();
        if n == 4 {
            // Whole-shard entries: every shard.
            set.touch_all(n);
            want.extend(0..n);
        }
        want.sort_unstable();
        want.dedup();
        let mut out = Vec::new();
        set.shards_into(&mut out);
        assert_eq!(out, want, "{n} shards");
    }
}
