//! A script's take-back copies: what its writes on a real shard replaced,
//! kept so that a run can be abandoned (restarted over more keys, see
//! `wide`, or undone on every shard it wrote in place, see `in_place`)
//! as if it never ran. Split from `run`, which decides when to keep them.

use std::cell::RefCell;

use resp::Args;

/// What a script's writes on a real shard replaced, to take them back if
/// the run is abandoned (see `wide`): each written key's entry before
/// its first write, and the outbox where the first write began.
pub(super) struct Undo {
    /// (Keys inline up to 22 bytes: no allocation per key written.)
    keys: Vec<(usize, engine::SmallBytes, Saved)>,
    records: engine::outbox::PropMark,
    events: usize,
}

/// A key's entry and deadline before a write, or `None` if it was missing.
type Saved = Option<(engine::OwnedEntry, u64)>;

/// Entries larger than this are not copied for [`Undo`] (the run then
/// cannot be abandoned after writing one).
const UNDO_ELEMENTS_MAX: usize = 128;
const UNDO_BYTES_MAX: usize = 64 << 10;

impl Undo {
    /// Nothing saved yet; the outbox's marks now. (Room for 8 keys made
    /// at once: growing by one from empty was ~1 k instructions of an
    /// 8-key script.)
    pub(super) fn new(shard: &engine::Shard) -> Undo {
        // The thread's spare list (see `Drop`), else a new one: one
        // allocation and free less per run that writes (~150
        // instructions: every script that writes keeps an undo where
        // there are several shards).
        let spare = UNDO_SPARE.with(|s| s.take());
        Undo {
            keys: if spare.capacity() == 0 {
                Vec::with_capacity(8)
            } else {
                spare
            },
            records: shard.outbox.mark(),
            events: shard.outbox.events_len(),
        }
    }

    /// Keeps what the keys of `args` at `positions` (database `db`) hold
    /// on `shard` before a write, in the undo of that shard (`home`'s or
    /// one of `others`, made now on the first write there); true if one
    /// is too large to copy (the run then cannot be taken back).
    pub(super) fn save(
        home: &mut Option<Undo>,
        others: &mut Vec<(usize, Undo)>,
        home_id: usize,
        shard: &engine::Shard,
        db: usize,
        args: Args<'_>,
        positions: &[usize],
    ) -> bool {
        let target = shard.id;
        let undo = if target == home_id {
            home.get_or_insert_with(|| Undo::new(shard))
        } else {
            let i = match others.iter().position(|(s, _)| *s == target) {
                Some(i) => i,
                None => {
                    others.push((target, Undo::new(shard)));
                    others.len() - 1
                }
            };
            &mut others[i].1
        };
        for &p in positions {
            let k = args.get(p);
            if undo
                .keys
                .iter()
                .any(|(d, x, _)| *d == db && x.as_slice() == k)
            {
                continue;
            }
            let old = match shard.dbs[db].get_with_ttl(k) {
                None => None,
                Some((e, at)) if small(e) => Some((e.to_owned_entry(), at)),
                Some(_) => return true,
            };
            undo.keys.push((db, engine::SmallBytes::from_slice(k), old));
        }
        false
    }

    /// Puts every key back as it was, drops the records and events since.
    pub(super) fn apply(mut self, shard: &mut engine::Shard) {
        for (db, k, e) in self.keys.drain(..).rev() {
            let d = &mut shard.dbs[db];
            let track_new = std::mem::replace(&mut d.track_new, false);
            let k = k.as_slice();
            d.remove(k);
            if let Some((e, at)) = e {
                d.insert(k, e, at);
            }
            d.track_new = track_new;
            d.forget_created(k);
        }
        shard.outbox.rollback(self.records);
        shard.outbox.truncate_events(self.events);
    }
}

/// Undo lists a thread keeps for reuse: one, of at most this many keys'
/// room.
const UNDO_SPARE_MAX: usize = 64;

thread_local! {
    /// An empty undo list with room (see `Undo::new`).
    static UNDO_SPARE: RefCell<Vec<(usize, engine::SmallBytes, Saved)>> =
        const { RefCell::new(Vec::new()) };
}

impl Drop for Undo {
    fn drop(&mut self) {
        if self.keys.capacity() > UNDO_SPARE_MAX {
            return;
        }
        let mut keys = std::mem::take(&mut self.keys);
        keys.clear();
        UNDO_SPARE.with(|s| {
            if let Ok(mut s) = s.try_borrow_mut() {
                if s.capacity() == 0 {
                    *s = keys;
                }
            }
        });
    }
}

/// Whether an entry is small enough to copy for [`Undo`].
fn small(e: &engine::Entry) -> bool {
    use engine::ValueRef;
    match e.value() {
        ValueRef::Str(s) => s.len() <= UNDO_BYTES_MAX,
        ValueRef::Hash(h) => h.len() <= UNDO_ELEMENTS_MAX,
        ValueRef::List(l) => l.len() <= UNDO_ELEMENTS_MAX,
        ValueRef::Set(s) => s.len() <= UNDO_ELEMENTS_MAX,
        ValueRef::ZSet(z) => z.len() <= UNDO_ELEMENTS_MAX,
        ValueRef::Stream(_) => false,
    }
}
