//! Client-side caching on the runtime side (see `commands::tracking` for
//! the design): remembering the keys a tracking client reads, on the
//! shards that own them; turning each loop iteration's changed keys into
//! invalidations (per key for the clients that read it, per BCAST prefix
//! for the clients registered on it); and formatting invalidations on the
//! tracking client's home thread, or forwarding them to its REDIRECT
//! client.
//!
//! Changed keys come from the shard's effects outbox (its invalidations,
//! collected from `engine::Db::touched`: every change goes through
//! `Db::signal`), tagged with the connection that ran the command (NOLOOP)
//! right after each command, batch or job; untagged ones (expiry,
//! eviction) carry no writer.

use std::collections::BTreeMap;

use commands::ctx::Home;
use commands::pubsub::{ChangedKeys, Delivery};
use commands::ServerShared;
use engine::{SmallBytes, Tracker};
use resp::{Args, Reply};

use super::super::conn::Conn;
use super::super::mailbox::{ConnRef, Msg};
use super::{Core, Worker};

/// A BCAST prefix's clients and the keys changed under it.
type PrefixState = (Vec<(u64, Home)>, ChangedKeys);

fn tracker(home: Home, id: u64) -> Tracker {
    Tracker {
        id,
        thread: home.thread,
        slot: home.slot,
        gen: home.gen,
    }
}

/// The connection a mailbox reference names, as a pub/sub address.
pub(super) fn home_of(r: ConnRef) -> Home {
    Home {
        thread: r.thread,
        slot: r.slot,
        gen: r.gen,
    }
}

/// Before a command of connection `c` runs: if it is a tracking client in
/// the default mode and the command reads keys, remember them on their
/// shards (this one at once, the others by a message that reaches them
/// ahead of the command's own).
pub(super) fn remember(core: &mut Core, c: &Conn, args: Args<'_>) {
    let Some(t) = c.client.tracking.as_deref() else {
        return;
    };
    if !t.remembers() {
        return;
    }
    let keys = commands::tracking::keys_read(&c.client, args, core.server.nshards);
    if keys.is_empty() {
        return;
    }
    let who = tracker(c.client.home, c.client.id);
    let n = core.server.nshards;
    // Changes already made here come before this read (see
    // `engine::Tracked::take_changed`).
    core.shard.collect_touched();
    let since = core.shard.outbox.next_seq();
    let mut remote: BTreeMap<usize, Vec<SmallBytes>> = BTreeMap::new();
    for k in keys {
        let s = commands::table::shard_of(&k, n);
        if s == core.id {
            core.shard.tracked.remember(&k, who, since);
        } else {
            remote.entry(s).or_default().push(SmallBytes::from(&k[..]));
        }
    }
    for (s, keys) in remote {
        core.mailbox.send(s, Msg::Track { who, keys });
    }
}

/// Turns the databases' change lists on while some client tracks (one
/// atomic load): called before commands run on this shard, so a write
/// that follows a CLIENT TRACKING ON reply is always seen.
#[inline]
pub(super) fn track_check(core: &mut Core) {
    let on = core.server.tracking.active();
    if on != core.track_on {
        track_switch(core, on);
    }
}

#[cold]
fn track_switch(core: &mut Core, on: bool) {
    core.track_on = on;
    core.shard.set_tracking(on);
    if !on {
        core.shard.tracked.clear();
        core.touched.clear();
    }
}

/// Sends tracker `t` the invalidation of `key`, changed by `writer` (its
/// NOLOOP filter; `None`: expiry, eviction, the table's limit).
fn invalidate_key(server: &ServerShared, t: Tracker, key: &[u8], writer: Option<Home>) {
    server.pubsub.send_one(Delivery::Invalidate {
        to: Home {
            thread: t.thread,
            slot: t.slot,
            gen: t.gen,
        },
        id: t.id,
        keys: Some(vec![(Box::from(key), writer)]),
        bcast: false,
    });
}

/// Tags the changes made since the last call with the connection that
/// made them.
pub(super) fn tag_touched(core: &mut Core, writer: Option<Home>) {
    if !core.track_on {
        return;
    }
    core.shard.collect_touched();
    for inv in core.shard.outbox.drain_invalidations() {
        core.touched.push((inv.key, writer, inv.seq));
    }
}

/// `tracking-table-max-keys` (Redis's `trackingLimitUsedSlots`): while the
/// tables of every shard together hold more keys than the limit, this
/// shard takes its part of the excess out of its table and invalidates
/// those keys (as if changed, by no client); shards claim their part from
/// the shared count, so together they take exactly the excess. Once per
/// loop iteration: a tracking client that keeps reading is held to the
/// limit within one iteration's reads.
fn limit_tracked(core: &mut Core) {
    let max = core.cfg.tracking_max_keys;
    if max == 0 || core.shard.tracked.keys.is_empty() {
        return;
    }
    let total = core
        .server
        .tracking
        .table_keys
        .load(std::sync::atomic::Ordering::Relaxed);
    if total <= max {
        return;
    }
    for (key, trackers) in core.shard.tracked.evict_over(max) {
        for t in trackers {
            invalidate_key(&core.server, t, &key, None);
        }
    }
}

impl Worker {
    /// Turns the keys changed this iteration into invalidations. Keeps
    /// the databases' change lists on only while some client tracks.
    #[inline]
    pub(super) fn invalidate_touched(&mut self) {
        invalidate_touched(&mut self.core);
    }

    /// `Msg::Track`: another thread's tracking client read these keys.
    pub(super) fn track_keys(&mut self, who: Tracker, keys: Vec<SmallBytes>) {
        track_check(&mut self.core);
        self.core.shard.collect_touched();
        let since = self.core.shard.outbox.next_seq();
        for k in keys {
            self.core.shard.tracked.remember(&k, who, since);
        }
    }
}

fn write_keys(out: &mut Reply, keys: Option<&[Box<[u8]>]>, null_resp3: bool) {
    match keys {
        None => out.raw(if null_resp3 { b"_\r\n" } else { b"$-1\r\n" }),
        Some(ks) => {
            out.array(ks.len());
            for k in ks {
                out.bulk(k);
            }
        }
    }
}

/// An invalidation for tracking client `id`, on its connection `c`:
/// writes it to `out` (true), or forwards it to the REDIRECT client, or
/// drops it (NOLOOP, tracking turned off or changed mode since, RESP2
/// without a redirect).
pub(super) fn invalidation(
    server: &ServerShared,
    c: &mut Conn,
    id: u64,
    keys: Option<ChangedKeys>,
    bcast: bool,
    out: &mut Reply,
) -> bool {
    let (home, resp3) = (c.client.home, c.client.resp3);
    if c.client.id != id {
        return false;
    }
    let Some(t) = c.client.tracking.as_mut() else {
        return false;
    };
    let keys: Option<Vec<Box<[u8]>>> = match keys {
        None => None,
        Some(ks) => {
            if t.bcast != bcast {
                return false;
            }
            let v: Vec<Box<[u8]>> = ks
                .into_iter()
                .filter(|(_, w)| !(t.noloop && *w == Some(home)))
                .map(|(k, _)| k)
                .collect();
            if v.is_empty() {
                return false;
            }
            Some(v)
        }
    };
    if t.redirect != 0 {
        return match server.tracking.home_of(t.redirect) {
            None => {
                t.broken_redirect = true;
                if resp3 {
                    out.push(2);
                    out.bulk(b"tracking-redir-broken");
                    out.int(t.redirect as i64);
                }
                resp3
            }
            Some(to) => {
                server.pubsub.send_one(Delivery::Redirected {
                    to,
                    id: t.redirect,
                    keys,
                    null_resp3: resp3,
                });
                false
            }
        };
    }
    if !resp3 {
        return false;
    }
    out.push(2);
    out.bulk(b"invalidate");
    write_keys(out, keys.as_deref(), true);
    true
}

/// An invalidation forwarded to this REDIRECT client: a RESP3 push, or in
/// RESP2 a `__redis__:invalidate` message if the client is in pub/sub mode
/// (else nothing can carry it).
pub(super) fn redirected(
    c: &mut Conn,
    keys: Option<&[Box<[u8]>]>,
    null_resp3: bool,
    out: &mut Reply,
) -> bool {
    if c.client.resp3 {
        out.push(2);
        out.bulk(b"invalidate");
    } else if c.client.subs.is_some() {
        out.push(3);
        out.bulk(b"message");
        out.bulk(b"__redis__:invalidate");
    } else {
        return false;
    }
    write_keys(out, keys, null_resp3);
    true
}

/// Turns the keys changed on `core`'s shard into invalidations
/// ([`Worker::invalidate_touched`], also run by a shard that evicted for
/// another thread's command before it answers, see `evict`).
#[inline]
pub(super) fn invalidate_touched(core: &mut Core) {
    if core.track_on || core.server.tracking.active() {
        invalidate_tracked(core);
    }
}

fn invalidate_tracked(core: &mut Core) {
    tag_touched(core, None);
    track_check(core);
    limit_tracked(core);
    if core.touched.is_empty() {
        return;
    }
    let server = core.server.clone();
    let bcast = server.tracking.bcast_active();
    // Prefix -> its clients and this iteration's keys under it.
    let mut prefixes: BTreeMap<Box<[u8]>, PrefixState> = BTreeMap::new();
    let mut matched = Vec::new();
    for (key, writer, seq) in std::mem::take(&mut core.touched) {
        for t in core.shard.tracked.take_changed(&key, seq) {
            invalidate_key(&server, t, &key, writer);
        }
        if bcast {
            matched.clear();
            server.tracking.prefixes_of(&key, &mut matched);
            for (prefix, clients) in matched.drain(..) {
                let e = prefixes
                    .entry(prefix)
                    .or_insert_with(|| (clients, Vec::new()));
                if !e.1.iter().any(|(k, _)| k[..] == key[..]) {
                    e.1.push((Box::from(&key[..]), writer));
                }
            }
        }
    }
    // One message per prefix and client, keys in Redis's radix order.
    for (_, (clients, mut keys)) in prefixes {
        keys.sort_by(|a, b| a.0.cmp(&b.0));
        for (id, to) in clients {
            server.pubsub.send_one(Delivery::Invalidate {
                to,
                id,
                keys: Some(keys.clone()),
                bcast: true,
            });
        }
    }
}
