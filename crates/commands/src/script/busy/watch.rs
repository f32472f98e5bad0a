//! WATCH while a script is busy (Redis 7.0 answers it `+OK`: WATCH is
//! allow-busy), for keys of the shards a published script stops.
//!
//! * **A shard the script holds** (the one it runs on; run in place, its
//!   home and the loops it pinned; on every shard, any): the keys are
//!   handed to the script ([`Registry::watch_while_busy`]), whose thread registers
//!   them on their shard before the script's next command and when it
//!   ends (`HookState::take_watches`, [`register_watches`]). Exactly
//!   Redis's semantics: a write the script makes after `+OK` dooms the
//!   watcher's EXEC, one made before does not.
//! * **The home shard of a script that holds none** (it runs on gathered
//!   copies of several shards' keys, `crate::scratch`, its writes written
//!   back by its transaction after it ends): nothing runs there until the
//!   script ends, so the keys are *parked* with the script
//!   ([`Registry::watch_stopped`], `Running::parked`) and `+OK` answered at once.
//!   The keys are also handed to the script as a held shard's are
//!   (`Running::watches`), and its thread watches them *on its copies*
//!   before its next command: a write it makes there after `+OK` dooms
//!   the watcher, as in Redis; one made before the WATCH does not.
//!   When the script ends, its run leaves the parked keys on its thread
//!   ([`leave_parked`]). Those its transaction writes back go with the
//!   write-back's job and are registered on their shard right after its
//!   writes ([`take_written_back`], [`register_now`]: the keys are locked
//!   by the transaction until then, so no other write comes between);
//!   the others are registered by the loop whose step ran the script,
//!   right after that step, before anything else runs there
//!   ([`register_parked`]: the runtime calls it after every coordinator
//!   step and every script it lends its desk to). So:
//!   - a write of a watched key after `+OK` dooms the EXEC, as in Redis;
//!   - a write of it only *before* the WATCH does not (session 20 left
//!     this a spurious abort: the write-back signalled every registered
//!     key);
//!   - a script that never writes the key (or writes other keys) leaves
//!     the watch clean.
//!
//!   UNWATCH, EXEC, DISCARD, RESET or a close of the watcher before the
//!   script ends need nothing: a parked key carries the connection's
//!   flag, which the connection dropped (a shard keeps only weak
//!   references to flags), so registering it later watches nothing.
//! * **A loop the script stalls without holding it** (`Running::stalled`:
//!   a hub's own loop while the script runs in an adopted loop's turn,
//!   the caller's loop of a script run by a call): parked too, `+OK` at
//!   once. A script that holds shards never touches that one, so a write
//!   there comes after the registration, and the watch is exact; one on
//!   copies may have gathered keys of that shard, whose parked WATCHes
//!   are watched on its copies and registered after the write-back, as
//!   its home's are (above). Such a loop runs again either
//!   - before the script ends, when a busy pass lends a hub's own loop
//!     to another thread (`host::loan`): the hub first takes it out of
//!     the stalled loops and registers the keys parked for it
//!     ([`release_stalled`], under the list's lock, as WATCH parks: none
//!     is parked for it after that, a WATCH of its keys then takes the
//!     ordinary way, a job in its mailbox; the one imprecision left: a
//!     key registered so that a script on copies writes back later is
//!     signalled by that write-back, made before the WATCH or not); or
//!   - after the script: its keys are left on the script's thread
//!     ([`leave_parked`]), which is the only one that runs that loop next
//!     (a hub's own loop lives on its stack; a caller's loop is in its
//!     turn), and registered before anything runs there: before a job or
//!     pin a hub lends it, before it is lent away, at the end of the
//!     hub's round and the start of its next turn; a caller's right after
//!     the call that ran the script (a script by a call, a transaction's
//!     job lent from its turn).
//!
//! Bounds: a script takes [`PENDING_WATCHES_MAX`] held keys and as many
//! parked ones (its home's and its stalled loops' together) at most. Past them a held key's WATCH takes the ordinary
//! way (its job waits for the script's end), a parked one is refused
//! `-BUSY` (the behaviour before parking), nothing of it taken.

use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering;

use super::{Registry, Running, BUSY_EVAL, BUSY_FUNCTION, CURRENT};
use crate::error::CmdError;

/// A key watched while a published script holds (or stops) its shard.
pub struct PendingWatch {
    pub db: usize,
    pub key: Vec<u8>,
    pub flag: engine::WatchFlag,
}

/// Keys waiting in one script's `Running::watches` at most, and in its
/// `Running::parked` at most: past it a WATCH takes the ordinary way
/// (held: its job waits for the script's end) or is refused `-BUSY`
/// (parked).
pub(crate) const PENDING_WATCHES_MAX: usize = 1 << 16;

impl Registry {
    /// WATCH of `keys` (database `db`) on `shard`, while a script may be
    /// busy there: true if a published script holds that shard and took the
    /// keys, which its thread registers on the shard before the script's next
    /// command, and when it ends ([`super::HookState::take_watches`],
    /// [`register_watches`]). The caller then answers `+OK` at once, as Redis
    /// 7.0 does (WATCH is allow-busy there): every write the script makes
    /// after this returns signals the keys, so the transaction fails exactly
    /// as in Redis. False (nothing taken) when no published script holds the
    /// shard itself (one on gathered copies of several shards' keys holds
    /// none: see [`Registry::watch_stopped`]), or too many keys wait already: the
    /// caller watches the ordinary way.
    pub fn watch_while_busy(
        &self,
        shard: usize,
        db: usize,
        keys: &[Vec<u8>],
        flag: &engine::WatchFlag,
    ) -> bool {
        if !self.any() {
            return false;
        }
        // Under the list's lock: a script unpublished (`HookState::end`) after
        // this takes what was pushed here.
        let list = self.list();
        let Some(r) = list.iter().find(|r| r.holds(shard)) else {
            return false;
        };
        let mut w = r.watches.lock().unwrap_or_else(|e| e.into_inner());
        if w.len() + keys.len() > PENDING_WATCHES_MAX {
            return false;
        }
        w.extend(keys.iter().map(|k| PendingWatch {
            db,
            key: k.clone(),
            flag: flag.clone(),
        }));
        r.watching.store(true, Ordering::Release);
        true
    }

    /// Whether a published script holds `shard` itself (not one on gathered
    /// copies): a WATCH of its keys is taken by [`Registry::watch_while_busy`].
    pub fn holds_shard(&self, shard: usize) -> bool {
        self.any() && self.list().iter().any(|r| r.holds(shard))
    }

    /// WATCH of keys of the shards a busy script stops without holding them
    /// (`per_shard[s]`: the new keys of shard `s`, database `db`, flag
    /// `flag`): the keys of the home shard of a script that holds none, and
    /// of a loop it stalls, are parked with it (see the module
    /// documentation) and their groups emptied; the caller answers `+OK` at
    /// once. `Err(-BUSY)` (a rejected call, Redis's text), with nothing
    /// parked, when parking them would pass [`PENDING_WATCHES_MAX`]. Groups
    /// of other shards are left as they are.
    /// One relaxed load when no script is busy.
    pub fn watch_stopped(
        &self,
        per_shard: &mut [Vec<Vec<u8>>],
        db: usize,
        flag: &engine::WatchFlag,
    ) -> Result<(), CmdError> {
        if !self.any() {
            return Ok(());
        }
        self.watch_stopped_slow(per_shard, db, flag)
    }

    #[cold]
    fn watch_stopped_slow(
        &self,
        per_shard: &mut [Vec<Vec<u8>>],
        db: usize,
        flag: &engine::WatchFlag,
    ) -> Result<(), CmdError> {
        // Under the list's lock throughout: a script unpublished after this
        // takes what was parked here (`HookState::end`).
        park(&self.list(), per_shard, db, flag)
    }
}

/// [`Registry::watch_stopped`] with the published scripts `list`.
fn park(
    list: &[std::sync::Arc<Running>],
    per_shard: &mut [Vec<Vec<u8>>],
    db: usize,
    flag: &engine::WatchFlag,
) -> Result<(), CmdError> {
    let refuse =
        |r: &Running| CmdError::Rejected(if r.eval { BUSY_EVAL } else { BUSY_FUNCTION }.into());
    // First every group is checked (all or nothing), then parked.
    let mut parks: Vec<(usize, usize)> = Vec::new();
    for (s, keys) in per_shard.iter().enumerate() {
        if keys.is_empty() || list.iter().any(|r| r.holds(s)) {
            continue;
        }
        let Some(i) = list.iter().position(|r| r.stops_loop(s)) else {
            continue;
        };
        if !list[i].parks(s) {
            return Err(refuse(&list[i]));
        }
        parks.push((s, i));
    }
    for (i, r) in list.iter().enumerate() {
        let n: usize = parks
            .iter()
            .filter(|p| p.1 == i)
            .map(|p| per_shard[p.0].len())
            .sum();
        if n > 0 && r.parked_len() + n > PENDING_WATCHES_MAX {
            return Err(refuse(r));
        }
    }
    for (s, i) in parks {
        let r = &list[i];
        let keys = std::mem::take(&mut per_shard[s]);
        if r.on_copies() {
            // Also watched on its copies, by its thread before its next
            // command (as a held shard's keys, `watch_while_busy`): a
            // write it makes there after this dooms the watcher; one made
            // before does not (see `take_written_back`).
            let mut w = r.watches.lock().unwrap_or_else(|e| e.into_inner());
            w.extend(keys.iter().map(|key| PendingWatch {
                db,
                key: key.clone(),
                flag: flag.clone(),
            }));
            r.watching.store(true, Ordering::Release);
        }
        let mut parked = r.parked.lock().unwrap_or_else(|e| e.into_inner());
        parked.extend(keys.into_iter().map(|key| {
            let w = PendingWatch {
                db,
                key,
                flag: flag.clone(),
            };
            (s, w)
        }));
    }
    Ok(())
}

impl Running {
    /// Whether a WATCH of keys of shard `s`, which this script stops, is
    /// parked with it: `s` is the home of a script that does not hold it,
    /// or a loop it stalls (see the module documentation). Read under the
    /// list's lock (the stalled loops change under it).
    pub(super) fn parks(&self, s: usize) -> bool {
        let stalled = || {
            self.stalled
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&s)
        };
        !self.holds(s) && (self.home == Some(s) || stalled())
    }

    fn parked_len(&self) -> usize {
        self.parked.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether it runs on gathered copies of its keys (`crate::scratch`):
    /// it holds no real shard, and its writes reach the shards only when
    /// its transaction writes them back, after it ends.
    pub(super) fn on_copies(&self) -> bool {
        self.shard.is_none() && !self.in_place && !self.every
    }
}

thread_local! {
    /// Keys parked with scripts of this thread that ended, by shard, not
    /// yet registered ([`register_parked`]). Bounded by
    /// [`PENDING_WATCHES_MAX`] per script; emptied by the step that ran
    /// the script.
    static LEFT: RefCell<Vec<(usize, PendingWatch)>> = const { RefCell::new(Vec::new()) };
    /// `LEFT` is not empty (one load per step when nothing was parked).
    static ANY_LEFT: Cell<bool> = const { Cell::new(false) };
}

/// Published run `p` ended (unpublished: nothing is parked with it any
/// more): its parked keys wait on this thread for [`register_parked`].
pub(super) fn leave_parked(p: &Running) {
    let mut parked = p.parked.lock().unwrap_or_else(|e| e.into_inner());
    if parked.is_empty() {
        return;
    }
    LEFT.with(|l| l.borrow_mut().append(&mut parked));
    ANY_LEFT.with(|a| a.set(true));
}

/// Registers on `shard` the keys parked for it with a script of this
/// thread that ended ([`leave_parked`]): called by its loop right after
/// the step or call that ran the script, and before anything else runs
/// on a shard the script stalled (see the module documentation), so
/// every later write signals them (the script's own writes-back
/// included). Keys left for other shards stay for theirs. One
/// thread-local load when nothing waits.
#[inline]
pub fn register_parked(shard: &mut engine::Shard) {
    if ANY_LEFT.with(|a| a.get()) {
        register_parked_slow(shard);
    }
}

/// Whether keys wait on this thread for a [`register_parked`] (one
/// thread-local load).
#[inline]
pub fn any_parked() -> bool {
    ANY_LEFT.with(|a| a.get())
}

#[cold]
fn register_parked_slow(shard: &mut engine::Shard) {
    let mine = LEFT.with(|l| {
        let mut l = l.borrow_mut();
        let mine = take_for(&mut l, shard.id);
        ANY_LEFT.with(|a| a.set(!l.is_empty()));
        mine
    });
    for w in mine {
        watch_one(shard, w);
    }
}

/// The keys parked with a script on gathered copies that ended on this
/// thread ([`leave_parked`]) which its transaction is about to write back
/// on shard `s` (`written`: those keys, database `db`), taken out of what
/// [`register_parked`] registers after the step that ran it: the
/// write-back job registers them on `s` right after its writes
/// ([`register_now`]). Those writes are the script's, made before the
/// watch or after it; one made after it has already doomed the watcher
/// on the copies, where the script's thread watched the key before its
/// next command (see `park`), so the write-back must not signal them
/// again (a spurious abort where Redis's EXEC runs). The keys are the
/// transaction's, locked until the write-back: nothing else writes them
/// in between. Nothing (one thread-local load) when nothing was parked.
pub fn take_written_back(
    s: usize,
    db: usize,
    written: &mut dyn Iterator<Item = &[u8]>,
) -> Vec<PendingWatch> {
    if !any_parked() {
        return Vec::new();
    }
    let written: Vec<&[u8]> = written.collect();
    LEFT.with(|l| {
        let mut l = l.borrow_mut();
        let is_written = |p: &(usize, PendingWatch)| {
            p.0 == s && p.1.db == db && written.iter().any(|k| *k == &p.1.key[..])
        };
        if !l.iter().any(is_written) {
            return Vec::new();
        }
        let (mine, rest): (Vec<_>, Vec<_>) =
            std::mem::take(&mut *l).into_iter().partition(is_written);
        *l = rest;
        ANY_LEFT.with(|a| a.set(!l.is_empty()));
        mine.into_iter().map(|p| p.1).collect()
    })
}

/// Registers `watches` (from [`take_written_back`]) on `shard`, theirs.
pub fn register_now(shard: &mut engine::Shard, watches: Vec<PendingWatch>) {
    for w in watches {
        watch_one(shard, w);
    }
}

/// The entries of `parked` for shard `s`, taken out (the others kept in
/// order).
fn take_for(parked: &mut Vec<(usize, PendingWatch)>, s: usize) -> Vec<PendingWatch> {
    if !parked.iter().any(|p| p.0 == s) {
        return Vec::new();
    }
    let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(parked).into_iter().partition(|p| p.0 == s);
    *parked = rest;
    mine.into_iter().map(|p| p.1).collect()
}

/// Loop `shard.id`, which this thread's published script stalls (a
/// hub's own loop, idle while the script runs in an adopted loop's
/// turn), is about to run again before the script ends (`host::loan`
/// lends it to another thread): from now on it is not stalled (a WATCH
/// of its keys takes the ordinary way, a job in its mailbox), and the
/// keys parked for it are registered on its shard now, before anything
/// runs there, so every later write signals them. Then what ended
/// scripts left for it ([`register_parked`]). Nothing else when no
/// script is published on this thread.
pub fn release_stalled(shard: &mut engine::Shard) {
    if let Some(p) = CURRENT.with(|c| c.borrow().clone()) {
        // Under the list's lock, as WATCH parks (`park`): once the loop is
        // out of `stalled`, nothing more is parked for it.
        let mine = {
            let _list = p.registry.list();
            unstall(&p, shard.id)
        };
        for w in mine {
            watch_one(shard, w);
        }
    }
    register_parked(shard);
}

/// Loop `s` out of `p`'s stalled loops, and the keys parked for it taken
/// (the caller holds the list's lock).
fn unstall(p: &Running, s: usize) -> Vec<PendingWatch> {
    p.stalled
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|&x| x != s);
    take_for(&mut p.parked.lock().unwrap_or_else(|e| e.into_inner()), s)
}

/// Registers `watches` on the shards of their keys, which the script that
/// took them holds: `home`, the one it runs on, or (run in place,
/// `in_place`) one it pinned. As WATCH's own job would (a key already
/// logically expired is not watched).
pub fn register_watches(
    home: &mut engine::Shard,
    mut in_place: Option<&mut (dyn crate::script::in_place::Shards + '_)>,
    nshards: usize,
    watches: Vec<PendingWatch>,
) {
    for w in watches {
        let s = crate::table::shard_of(&w.key, nshards);
        match in_place.as_deref_mut() {
            // (Held already: `hold` only looks.)
            Some(shards) if s != home.id => {
                if shards.hold(s) {
                    crate::script::in_place::on_shard(home, Some(shards), s, |sh| watch_one(sh, w));
                }
            }
            _ => watch_one(home, w),
        }
    }
}

fn watch_one(shard: &mut engine::Shard, w: PendingWatch) {
    let now = shard.now_ms;
    let Some(d) = shard.dbs.get_mut(w.db) else {
        return;
    };
    d.watch_key(&w.key, &w.flag, now);
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU8};
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A published script on gathered copies whose home is loop 0, which
    /// stalls loop 3.
    fn copies() -> Arc<Running> {
        static REGISTRY: Registry = Registry::new();
        Arc::new(Running {
            registry: &REGISTRY,
            eval: true,
            name: String::new(),
            command: Vec::new(),
            started: std::time::Instant::now(),
            shard: None,
            home: Some(0),
            pinned: Mutex::new(Vec::new()),
            stalled: Mutex::new(vec![3]),
            locked: Vec::new(),
            in_place: false,
            every: false,
            state: AtomicU8::new(0),
            watches: Mutex::new(Vec::new()),
            watching: AtomicBool::new(false),
            parked: Mutex::new(Vec::new()),
        })
    }

    fn groups(n: usize, of: &[(usize, usize)]) -> Vec<Vec<Vec<u8>>> {
        let mut g = vec![Vec::new(); n];
        for &(s, keys) in of {
            g[s] = (0..keys).map(|i| format!("k{i}").into_bytes()).collect();
        }
        g
    }

    /// The home's keys and a stalled loop's are parked (their groups
    /// emptied), a free shard's left alone; past the bound (the home's and
    /// the stalled loop's together) the WATCH is refused `-BUSY`, nothing
    /// parked, and up to it every key is taken.
    #[test]
    fn a_copies_home_and_a_stalled_loop_park_up_to_the_bound() {
        let list = vec![copies()];
        let flag = engine::WatchFlag::default();
        let mut g = groups(4, &[(0, 2), (1, 1)]);
        assert!(park(&list, &mut g, 0, &flag).is_ok());
        assert!(g[0].is_empty() && g[1].len() == 1);
        assert_eq!(list[0].parked_len(), 2);

        let mut g = groups(4, &[(0, 1), (3, 1)]);
        assert!(park(&list, &mut g, 0, &flag).is_ok());
        assert!(g[0].is_empty() && g[3].is_empty());
        assert_eq!(list[0].parked_len(), 4);

        let mut g = groups(4, &[(0, 1), (3, PENDING_WATCHES_MAX - 4)]);
        let e = park(&list, &mut g, 0, &flag).unwrap_err();
        assert!(e.line().starts_with(b"BUSY "));
        assert_eq!((list[0].parked_len(), g[0].len()), (4, 1));
        let mut g = groups(4, &[(3, PENDING_WATCHES_MAX - 4)]);
        assert!(park(&list, &mut g, 0, &flag).is_ok());
        assert_eq!(list[0].parked_len(), PENDING_WATCHES_MAX);
    }

    /// A stalled loop lent away before the script ends: out of the
    /// stalled loops (a WATCH of its keys parks no more: it takes the
    /// ordinary way), its parked keys taken for registration, the home's
    /// left with the script.
    #[test]
    fn a_released_stalled_loop_takes_its_keys_and_parks_no_more() {
        let list = vec![copies()];
        let flag = engine::WatchFlag::default();
        let mut g = groups(4, &[(0, 1), (3, 2)]);
        assert!(park(&list, &mut g, 0, &flag).is_ok());
        let mine = unstall(&list[0], 3);
        assert_eq!(mine.len(), 2);
        assert_eq!(list[0].parked_len(), 1);
        assert!(!list[0].parks(3) && !list[0].stops_loop(3));
        let mut g = groups(4, &[(3, 1)]);
        assert!(park(&list, &mut g, 0, &flag).is_ok());
        assert_eq!((g[3].len(), list[0].parked_len()), (1, 1));
    }

    /// What an ended script parked is registered on its shard by the
    /// next [`register_parked`] there, flag and all (a later write dooms
    /// the watcher), once; a key left for another shard (a loop the
    /// script stalled) waits for that shard's, its watcher not doomed.
    #[test]
    fn parked_keys_are_registered_on_their_shard_once() {
        let r = copies();
        let (mine, other) = (engine::WatchFlag::default(), engine::WatchFlag::default());
        let mut g = groups(4, &[(0, 1)]);
        assert!(park(std::slice::from_ref(&r), &mut g, 0, &mine).is_ok());
        r.parked.lock().unwrap().push((
            1,
            PendingWatch {
                db: 0,
                key: b"x".to_vec(),
                flag: other.clone(),
            },
        ));
        leave_parked(&r);
        assert_eq!(r.parked_len(), 0);
        let mut shard = engine::Shard::new(0, 1);
        register_parked(&mut shard);
        assert!(!other.load(Ordering::Acquire), "another shard's key waits");
        assert!(!mine.load(Ordering::Acquire));
        shard.dbs[0].signal(b"k0");
        assert!(mine.load(Ordering::Acquire), "registered on the shard");
        assert!(any_parked());
        let mut one = engine::Shard::new(1, 1);
        register_parked(&mut one);
        assert!(!any_parked());
        one.dbs[0].signal(b"x");
        assert!(other.load(Ordering::Acquire), "registered on its shard");
    }

    /// A run on copies is handed its parked keys too (its thread watches
    /// them on its copies before its next command); once it ended, the
    /// keys its transaction writes back on a shard are taken for the
    /// write-back's job, which registers them after its writes (so those
    /// writes, the script's own, do not doom the watcher a second time),
    /// and the others wait for the step's [`register_parked`].
    #[test]
    fn a_copies_runs_parked_keys_are_watched_on_its_copies_and_after_its_write_back() {
        let r = copies();
        let flag = engine::WatchFlag::default();
        let mut g = groups(4, &[(0, 2)]);
        assert!(park(std::slice::from_ref(&r), &mut g, 0, &flag).is_ok());
        assert!(r.watching.load(Ordering::Acquire));
        assert_eq!(r.watches.lock().unwrap().len(), 2);
        leave_parked(&r);
        let none = take_written_back(1, 0, &mut [&b"k0"[..]].into_iter());
        assert!(none.is_empty(), "another shard's write-back");
        let none = take_written_back(0, 1, &mut [&b"k0"[..]].into_iter());
        assert!(none.is_empty(), "another database's write-back");
        let mine = take_written_back(0, 0, &mut [&b"k0"[..], &b"zz"[..]].into_iter());
        assert_eq!(mine.len(), 1);
        assert_eq!(mine[0].key, b"k0");
        assert!(any_parked(), "k1 waits for the step's registration");
        let mut shard = engine::Shard::new(0, 1);
        // The write-back, then the registration after it.
        shard.dbs[0].signal(b"k0");
        register_now(&mut shard, mine);
        assert!(!flag.load(Ordering::Acquire));
        register_parked(&mut shard);
        assert!(!any_parked());
        shard.dbs[0].signal(b"k1");
        assert!(flag.load(Ordering::Acquire), "k1 registered");
        let again = engine::WatchFlag::default();
        let mut g = groups(4, &[(0, 1)]);
        assert!(park(std::slice::from_ref(&r), &mut g, 0, &again).is_ok());
        leave_parked(&r);
        register_parked(&mut shard);
        shard.dbs[0].signal(b"k0");
        assert!(
            again.load(Ordering::Acquire),
            "not written back: registered by the step"
        );
    }

    /// A run that holds its shard is not handed its stalled loops' keys
    /// (it never writes that shard: they are registered on it as parked).
    #[test]
    fn a_held_runs_stalled_keys_are_not_handed_to_it() {
        let mut r = Arc::into_inner(copies()).unwrap();
        r.shard = Some(0);
        let list = vec![Arc::new(r)];
        let flag = engine::WatchFlag::default();
        let mut g = groups(4, &[(3, 1)]);
        assert!(park(&list, &mut g, 0, &flag).is_ok());
        assert_eq!(list[0].parked_len(), 1);
        assert!(list[0].watches.lock().unwrap().is_empty());
        assert!(!list[0].watching.load(Ordering::Acquire));
    }
}
