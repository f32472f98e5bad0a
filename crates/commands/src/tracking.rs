//! Client-side caching (Redis's `tracking.c`): CLIENT TRACKING, CACHING,
//! GETREDIR, TRACKINGINFO, and the registry every thread shares.
//!
//! Where things live:
//! * A client's tracking mode ([`TrackState`]: REDIRECT, BCAST and its
//!   prefixes, OPTIN/OPTOUT, NOLOOP, a pending CLIENT CACHING) is in its
//!   `ClientState`, on its home thread.
//! * The keys a client read (default mode) are remembered on the shard that
//!   owns each key, in that shard's thread (`server::worker::tracking`): a
//!   table key -> clients. A change to the key there (every change goes
//!   through `engine::Db::signal`) removes the key from the table and sends
//!   each client an invalidation. The table is per key name, across
//!   databases, as Redis's.
//! * The [`Tracking`] registry (in `ServerShared`) knows every client's
//!   address (REDIRECT targets, invalidations), the clients with tracking on
//!   (FLUSHALL's null invalidation reaches them all) and the BCAST prefixes
//!   (prefix -> clients): shards match changed keys against them and send
//!   each loop iteration's keys per prefix.
//!
//! An invalidation travels through the pub/sub inboxes (`pubsub::Delivery`)
//! to the tracking client's home thread, which formats it for the client
//! (a RESP3 push) or forwards it to the REDIRECT client (a RESP3 push, or
//! a `__redis__:invalidate` message to a RESP2 client in pub/sub mode).
//!
//! Keys are remembered before the reading command runs (by the home thread,
//! ahead of the command on the same FIFO mailbox to the key's shard): a
//! write landing between the remembering and the read sends an extra
//! invalidation, never too few.
//!
//! Cost: a key remembered for one client costs its bytes plus ~40 bytes of
//! table entry on its shard; a shard with no tracking client pays one
//! boolean test per change (`Db::track`).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::RwLock;

use resp::Args;

use crate::ctx::{ConnCtx, Home};
use crate::error::CmdError;
use crate::util::{eq_ic, parse_i64};

/// A client's tracking mode (present while tracking is on).
#[derive(Clone, Debug, Default)]
pub struct TrackState {
    /// REDIRECT target's client id; 0: none.
    pub redirect: u64,
    pub bcast: bool,
    pub optin: bool,
    pub optout: bool,
    pub noloop: bool,
    /// CLIENT CACHING YES (OPTIN) or NO (OPTOUT) was given for the next
    /// command.
    pub caching: bool,
    /// The REDIRECT client went away (TRACKINGINFO `broken_redirect`,
    /// CLIENT LIST flag `R`).
    pub broken_redirect: bool,
    /// BCAST prefixes, sorted (as Redis's radix tree lists them).
    pub prefixes: Vec<Box<[u8]>>,
}

impl TrackState {
    /// Whether the next read-only command's keys are remembered.
    pub fn remembers(&self) -> bool {
        let skipped = (self.optin && !self.caching) || (self.optout && self.caching);
        !(self.bcast || skipped)
    }
}

/// Clients by id, with their address.
type Clients = HashMap<u64, Home>;
/// A BCAST prefix with its clients.
pub type PrefixClients = (Box<[u8]>, Vec<(u64, Home)>);

/// The registry shared by every thread (see the module documentation).
#[derive(Default)]
pub struct Tracking {
    /// Every connected client's address.
    clients: RwLock<HashMap<u64, Home>>,
    /// Clients with tracking on.
    on: RwLock<HashMap<u64, Home>>,
    /// BCAST prefix -> clients registered on it.
    prefixes: RwLock<BTreeMap<Box<[u8]>, Clients>>,
    /// Sizes of `on` and `prefixes`, read without a lock on every change.
    on_count: AtomicUsize,
    prefix_count: AtomicUsize,
    /// Keys in every shard's tracking table together
    /// (`engine::Tracked::total`).
    pub table_keys: std::sync::Arc<AtomicUsize>,
}

fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}
fn write<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Tracking {
    /// A client connected.
    pub fn connected(&self, id: u64, home: Home) {
        write(&self.clients).insert(id, home);
    }

    /// A client went away: it is forgotten, and its tracking is off.
    pub fn disconnected(&self, c: &mut crate::ClientState) {
        write(&self.clients).remove(&c.id);
        self.disable(c);
    }

    /// Where client `id` lives, if connected.
    pub fn home_of(&self, id: u64) -> Option<Home> {
        read(&self.clients).get(&id).copied()
    }

    /// Whether any client tracks (shards then record their changes).
    #[inline]
    pub fn active(&self) -> bool {
        self.on_count.load(Ordering::Acquire) > 0
    }

    /// Whether any BCAST prefix exists.
    #[inline]
    pub fn bcast_active(&self) -> bool {
        self.prefix_count.load(Ordering::Acquire) > 0
    }

    /// Every client with tracking on.
    pub fn tracking_clients(&self) -> Vec<(u64, Home)> {
        read(&self.on).iter().map(|(&id, &h)| (id, h)).collect()
    }

    /// The BCAST prefixes matching `key` with their clients.
    pub fn prefixes_of(&self, key: &[u8], out: &mut Vec<PrefixClients>) {
        let p = read(&self.prefixes);
        for (prefix, clients) in p.iter() {
            if key.starts_with(prefix) {
                out.push((
                    prefix.clone(),
                    clients.iter().map(|(&i, &h)| (i, h)).collect(),
                ));
            }
        }
    }

    /// INFO's `tracking_clients` and `tracking_total_prefixes`.
    pub fn counts(&self) -> (usize, usize) {
        (
            self.on_count.load(Ordering::Relaxed),
            self.prefix_count.load(Ordering::Relaxed),
        )
    }

    /// Tracking off for `c` (CLIENT TRACKING OFF, RESET), its prefixes
    /// forgotten.
    pub(crate) fn disable(&self, c: &mut crate::ClientState) {
        let Some(t) = c.tracking.take() else { return };
        let mut on = write(&self.on);
        on.remove(&c.id);
        self.on_count.store(on.len(), Ordering::Release);
        drop(on);
        if !t.prefixes.is_empty() {
            let mut p = write(&self.prefixes);
            for prefix in &t.prefixes {
                if let Some(m) = p.get_mut(prefix) {
                    m.remove(&c.id);
                    if m.is_empty() {
                        p.remove(prefix);
                    }
                }
            }
            self.prefix_count.store(p.len(), Ordering::Release);
        }
    }
}

/// Redis's `checkPrefixCollisionsOrReply`: two prefixes collide when one
/// starts the other.
fn collides(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

/// CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p ...] [BCAST] [OPTIN]
/// [OPTOUT] [NOLOOP]
pub(crate) fn client_tracking(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (mut redirect, mut bcast, mut optin, mut optout, mut noloop) =
        (0u64, false, false, false, false);
    let mut prefixes: Vec<&[u8]> = Vec::new();
    let mut j = 3;
    while j < args.len() {
        let more = j + 1 < args.len();
        let a = args.get(j);
        if eq_ic(a, "redirect") && more {
            j += 1;
            if redirect != 0 {
                return Err(CmdError::err(
                    "A client can only redirect to a single other client",
                ));
            }
            let id = parse_i64(args.get(j))?;
            if id <= 0 || c.server.tracking.home_of(id as u64).is_none() {
                return Err(CmdError::err(
                    "The client ID you want redirect to does not exist",
                ));
            }
            redirect = id as u64;
        } else if eq_ic(a, "bcast") {
            bcast = true;
        } else if eq_ic(a, "optin") {
            optin = true;
        } else if eq_ic(a, "optout") {
            optout = true;
        } else if eq_ic(a, "noloop") {
            noloop = true;
        } else if eq_ic(a, "prefix") && more {
            j += 1;
            prefixes.push(args.get(j));
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let mode = args.get(2);
    if eq_ic(mode, "off") {
        c.server.tracking.disable(c.client);
        c.out.ok();
        return Ok(());
    }
    if !eq_ic(mode, "on") {
        return Err(CmdError::Syntax);
    }
    if !bcast && !prefixes.is_empty() {
        return Err(CmdError::err(
            "PREFIX option requires BCAST mode to be enabled",
        ));
    }
    if let Some(t) = &c.client.tracking {
        if t.bcast != bcast {
            return Err(CmdError::err(
                "You can't switch BCAST mode on/off before disabling tracking for this client, \
                 and then re-enabling it with a different mode.",
            ));
        }
    }
    if bcast && (optin || optout) {
        return Err(CmdError::err(
            "OPTIN and OPTOUT are not compatible with BCAST",
        ));
    }
    if optin && optout {
        return Err(CmdError::err(
            "You can't specify both OPTIN mode and OPTOUT mode",
        ));
    }
    if let Some(t) = &c.client.tracking {
        if (optin && t.optout) || (optout && t.optin) {
            return Err(CmdError::err(
                "You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, \
                 and then re-enabling it with a different mode.",
            ));
        }
    }
    if bcast {
        let existing: &[Box<[u8]>] = c.client.tracking.as_ref().map_or(&[], |t| &t.prefixes);
        for (i, p) in prefixes.iter().enumerate() {
            if let Some(old) = existing.iter().find(|o| collides(o, p)) {
                return Err(CmdError::Bytes(overlap(p, old, "an existing prefix")));
            }
            if let Some(other) = prefixes[i + 1..].iter().find(|o| collides(p, o)) {
                return Err(CmdError::Bytes(overlap(
                    p,
                    other,
                    "another provided prefix",
                )));
            }
        }
    }
    let id = c.client.id;
    let home = c.client.home;
    let t = c.client.tracking.get_or_insert_with(Default::default);
    t.redirect = redirect;
    t.bcast = bcast;
    t.optin = optin;
    t.optout = optout;
    t.noloop = noloop;
    t.broken_redirect = false;
    let reg = &c.server.tracking;
    {
        let mut on = write(&reg.on);
        on.insert(id, home);
        reg.on_count.store(on.len(), Ordering::Release);
    }
    if bcast {
        if prefixes.is_empty() {
            prefixes.push(b"");
        }
        let mut p = write(&reg.prefixes);
        for prefix in prefixes {
            let prefix: Box<[u8]> = prefix.into();
            p.entry(prefix.clone()).or_default().insert(id, home);
            if let Err(i) = t.prefixes.binary_search(&prefix) {
                t.prefixes.insert(i, prefix);
            }
        }
        reg.prefix_count.store(p.len(), Ordering::Release);
    }
    c.out.ok();
    Ok(())
}

fn overlap(p: &[u8], other: &[u8], what: &str) -> Vec<u8> {
    let mut m = b"ERR Prefix '".to_vec();
    m.extend_from_slice(p);
    m.extend_from_slice(b"' overlaps with ");
    m.extend_from_slice(what.as_bytes());
    m.extend_from_slice(b" '");
    m.extend_from_slice(other);
    m.extend_from_slice(b"'. Prefixes for a single client must not overlap.");
    m
}

/// CLIENT CACHING YES|NO
pub(crate) fn client_caching(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let Some(t) = c.client.tracking.as_mut() else {
        return Err(CmdError::err(
            "CLIENT CACHING can be called only when the client is in tracking mode with OPTIN \
             or OPTOUT mode enabled",
        ));
    };
    let opt = args.get(2);
    if eq_ic(opt, "yes") {
        if !t.optin {
            return Err(CmdError::err(
                "CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.",
            ));
        }
    } else if eq_ic(opt, "no") {
        if !t.optout {
            return Err(CmdError::err(
                "CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
            ));
        }
    } else {
        return Err(CmdError::Syntax);
    }
    t.caching = true;
    c.out.ok();
    Ok(())
}

/// CLIENT GETREDIR: the REDIRECT id, 0 without one, -1 when not tracking.
pub(crate) fn client_getredir(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    c.out
        .int(c.client.tracking.as_ref().map_or(-1, |t| t.redirect as i64));
    Ok(())
}

/// CLIENT TRACKINGINFO: a map of flags, redirect and prefixes.
pub(crate) fn client_trackinginfo(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    let t = c.client.tracking.clone();
    let mut flags: Vec<&str> = Vec::new();
    match &t {
        None => flags.push("off"),
        Some(t) => {
            flags.push("on");
            if t.bcast {
                flags.push("bcast");
            }
            if t.optin {
                flags.push("optin");
                if t.caching {
                    flags.push("caching-yes");
                }
            }
            if t.optout {
                flags.push("optout");
                if t.caching {
                    flags.push("caching-no");
                }
            }
            if t.noloop {
                flags.push("noloop");
            }
            if t.broken_redirect {
                flags.push("broken_redirect");
            }
        }
    }
    let out = &mut *c.out;
    out.map(3);
    out.bulk(b"flags");
    out.set(flags.len());
    for f in flags {
        out.bulk(f.as_bytes());
    }
    out.bulk(b"redirect");
    out.int(t.as_ref().map_or(-1, |t| t.redirect as i64));
    out.bulk(b"prefixes");
    let prefixes = t.map(|t| t.prefixes).unwrap_or_default();
    out.array(prefixes.len());
    for p in &prefixes {
        out.bulk(p);
    }
    Ok(())
}

/// The keys a command of `client` reads, for a tracking client to
/// remember before it runs (Redis's `trackingRememberKeys`): those of a
/// read-only command (not a pub/sub one, not a script); for EXEC, those of
/// its queued read-only commands.
///
/// Scripts: Redis remembers a script's *declared* keys if the script ran
/// a read-only command, which is known only once it ran. A script whose
/// keys share one shard remembers them itself, on that shard, when it
/// ends (`ShardCall::tracker`, exact). A script across shards, or queued
/// in MULTI, runs on copies or inside EXEC: its declared keys are
/// remembered here, before it runs, whatever it calls (an extra
/// invalidation is possible, a missing one is not).
pub fn keys_read(client: &crate::ClientState, args: Args<'_>, nshards: usize) -> Vec<Vec<u8>> {
    let reg = crate::table::registry();
    let mut out = Vec::new();
    let mut pos = Vec::new();
    let mut add = |a: Args<'_>, out: &mut Vec<Vec<u8>>, queued: bool| {
        if let Ok(r) = reg.resolve(a) {
            let s = r.spec;
            if s.has(crate::table::flags::SCRIPT) {
                s.key_positions(a, &mut pos);
                let first = pos
                    .first()
                    .map(|&p| crate::table::shard_of(a.get(p), nshards));
                let spread = pos
                    .iter()
                    .any(|&p| Some(crate::table::shard_of(a.get(p), nshards)) != first);
                if queued || spread {
                    out.extend(pos.iter().map(|&p| a.get(p).to_vec()));
                }
            } else if s.has(crate::table::flags::READONLY) && !s.has(crate::table::flags::PUBSUB) {
                s.key_positions(a, &mut pos);
                out.extend(pos.iter().map(|&p| a.get(p).to_vec()));
            }
        }
    };
    if eq_ic(args.get(0), "exec") {
        if let Some(m) = &client.multi {
            for q in &m.queued {
                let owned = resp::OwnedArgs::from_slices(q);
                add(owned.args(), &mut out, true);
            }
        }
        return out;
    }
    add(args, &mut out, false);
    out
}

/// For a script command of a client that remembers the keys it reads:
/// who it is, for the script to remember its declared keys if it runs a
/// read-only command (see [`keys_read`]). `None` for anything else.
pub fn script_tracker(client: &crate::ClientState, r: crate::Resolved) -> Option<engine::Tracker> {
    if !r.spec.has(crate::table::flags::SCRIPT) {
        return None;
    }
    let t = client.tracking.as_deref()?;
    t.remembers().then_some(engine::Tracker {
        id: client.id,
        thread: client.home.thread,
        slot: client.home.slot,
        gen: client.home.gen,
    })
}

/// A client whose invalidations are RESP3 pushes on its own connection
/// (tracking on in the default mode, no REDIRECT): keys evicted before
/// its command runs are invalidated ahead of the reply (see
/// [`invalidate_evicted`]).
pub fn evicting_for(client: &crate::ClientState) -> Option<engine::Tracker> {
    let t = client.tracking.as_deref()?;
    (client.resp3 && !t.bcast && t.redirect == 0).then_some(engine::Tracker {
        id: client.id,
        thread: client.home.thread,
        slot: client.home.slot,
        gen: client.home.gen,
    })
}

/// Keys evicted (or otherwise changed) on `shard` since invalidation
/// `mark` that client `me` tracks: their invalidations go to `out` now,
/// before the reply of the command about to run, as Redis sends
/// invalidations made outside a command's execution at once (eviction
/// runs in `processCommand`, before `call`). The key's other trackers are
/// left to the loop's usual pass.
pub fn invalidate_evicted(
    shard: &mut engine::Shard,
    me: &engine::Tracker,
    mark: usize,
    out: &mut resp::Reply,
) {
    shard.collect_touched();
    let keys: Vec<(engine::SmallBytes, u64)> = shard
        .outbox
        .invalidations_since(mark)
        .iter()
        .map(|i| (i.key.clone(), i.seq))
        .collect();
    for (key, seq) in keys {
        if shard.tracked.take_changed_for(&key, me, seq) {
            out.push(2);
            out.bulk(b"invalidate");
            out.array(1);
            out.bulk(&key);
        }
    }
}

/// After a command: a CLIENT CACHING given for it is used up (unless the
/// command was a CLIENT subcommand, or the client is queueing a MULTI).
pub fn after_command(client: &mut crate::ClientState) {
    if let Some(t) = client.tracking.as_mut() {
        if t.caching && client.multi.is_none() && !client.last_cmd.starts_with("client|") {
            t.caching = false;
        }
    }
}
