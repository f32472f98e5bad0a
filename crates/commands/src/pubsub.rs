//! Pub/Sub (Redis's `pubsub.c`): SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE and
//! their UNSUBSCRIBEs, PUBLISH, SPUBLISH, PUBSUB; and the registry that
//! every thread shares.
//!
//! Where things live:
//! * A connection's own subscriptions ([`Subscriptions`], in its
//!   `ClientState`) live on its home thread, in subscription order (the
//!   order UNSUBSCRIBE without arguments replies in).
//! * The [`PubSub`] registry (in `ServerShared`) maps each channel, pattern
//!   and shard channel to its subscribers' addresses ([`Home`]: thread,
//!   slot, generation). It is behind one `RwLock`: SUBSCRIBE and
//!   UNSUBSCRIBE take it for writing, PUBLISH and PUBSUB for reading.
//!
//! PUBLISH reads the registry once, counts the receivers (exact: the
//! subscribers it found, as Redis's return value), and hands each
//! destination thread one [`Batch`] of deliveries through that thread's
//! inbox, sharing the message (`Arc`) between every subscriber; the
//! thread's event loop drains its inbox and writes each message into its
//! subscribers' replies (`server::pubsub`). One batch and at most one
//! wake-up per destination thread per PUBLISH, whatever the number of
//! subscribers there. A message to the publishing connection itself is
//! written at once, before the PUBLISH reply, as in Redis.
//!
//! Ordering and visibility:
//! * SUBSCRIBE updates the registry before it replies, so every PUBLISH
//!   that starts after a client read its SUBSCRIBE reply finds it
//!   (Dragonfly acknowledged subscriptions before publishers could see
//!   them, and Celery lost results that way).
//! * One publisher's messages reach a subscriber in publish order: one
//!   thread pushes them into each inbox in order, and inboxes are FIFO.
//! * A message counted by PUBLISH is delivered even if its subscriber
//!   unsubscribes before it arrives (the PUBLISH came first).
//!
//! Keyspace events cost nothing while nobody could hear them: the registry
//! counts the channels and patterns that could receive one
//! ([`may_hear_keyspace`]), and shards build events only while that count
//! is non-zero (`engine::Shard::event_listeners`). With
//! `notify-keyspace-events KEA` and no listener, SET at pipeline 16 cost
//! 45 % more instructions than with notifications off before this; see
//! bench/README.md.
//!
//! Cost: PUBLISH is O(subscribers of the channel + number of patterns)
//! under a read lock, as in Redis (patterns are matched one by one).
//! Subscribing is O(1) per channel; a subscriber costs ~100 bytes per
//! subscription in the registry plus its entry here.
//!
//! Rejected: a copy of the registry per thread (every SUBSCRIBE would
//! broadcast to N threads and PUBLISH could not count its receivers
//! without another round), and sending through the shard mailboxes (a
//! PUBLISH is a connection command with no mailbox in reach; keyspace
//! events and scripts publish from other contexts too).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use indexmap::IndexSet;
use resp::{Args, Reply};

use crate::ctx::{ConnCtx, Home};
use crate::error::CmdError;
use crate::table::{flags::*, keys, CommandSpec, Exec, NO_KEYS};
use crate::util::eq_ic;

const PS_FLAGS: u32 = PUBSUB | NOSCRIPT | LOADING | STALE;
const PUB_FLAGS: u32 = PUBSUB | LOADING | STALE | FAST | MAY_REPLICATE;
const INFO_FLAGS: u32 = PUBSUB | LOADING | STALE;
const PS_SLOW: &[&str] = &["pubsub", "slow"];
const PS_FAST: &[&str] = &["pubsub", "fast"];

const fn conn(
    name: &'static str,
    arity: i32,
    flags: u32,
    keys: crate::table::Keys,
    h: crate::table::ConnHandler,
    acl: &'static [&'static str],
) -> CommandSpec {
    CommandSpec::new(name, arity, flags, keys, Exec::Conn(h), acl)
}

pub(crate) const COMMANDS: &[CommandSpec] = &[
    conn("subscribe", -2, PS_FLAGS, NO_KEYS, subscribe, PS_SLOW),
    conn("unsubscribe", -1, PS_FLAGS, NO_KEYS, unsubscribe, PS_SLOW),
    conn("psubscribe", -2, PS_FLAGS, NO_KEYS, psubscribe, PS_SLOW),
    conn("punsubscribe", -1, PS_FLAGS, NO_KEYS, punsubscribe, PS_SLOW),
    conn("publish", 3, PUB_FLAGS, NO_KEYS, publish, PS_FAST),
    // Shard channels: Redis declares the channels as keys (for cluster
    // slots); here they only name the namespace.
    conn(
        "ssubscribe",
        -2,
        PS_FLAGS,
        keys(1, -1, 1),
        ssubscribe,
        PS_SLOW,
    ),
    conn(
        "sunsubscribe",
        -1,
        PS_FLAGS,
        keys(1, -1, 1),
        sunsubscribe,
        PS_SLOW,
    ),
    conn("spublish", 3, PUB_FLAGS, keys(1, 1, 1), spublish, PS_FAST),
    CommandSpec::parent("pubsub", -2, 0, &["slow"], PUBSUB_SUBS),
];

const PUBSUB_SUBS: &[CommandSpec] = &[
    conn(
        "channels",
        -2,
        INFO_FLAGS,
        NO_KEYS,
        pubsub_channels,
        PS_SLOW,
    ),
    conn("numsub", -2, INFO_FLAGS, NO_KEYS, pubsub_numsub, PS_SLOW),
    conn("numpat", 2, INFO_FLAGS, NO_KEYS, pubsub_numpat, PS_SLOW),
    conn(
        "shardchannels",
        -2,
        INFO_FLAGS,
        NO_KEYS,
        pubsub_shardchannels,
        PS_SLOW,
    ),
    conn(
        "shardnumsub",
        -2,
        INFO_FLAGS,
        NO_KEYS,
        pubsub_shardnumsub,
        PS_SLOW,
    ),
    conn("help", 2, LOADING | STALE, NO_KEYS, pubsub_help, &["slow"]),
];

// ---------------------------------------------------------------- registry

/// What a subscription is to: the three namespaces of Redis 7.0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Channel,
    Pattern,
    Shard,
}

/// One message as its subscribers receive it: `message` (`pattern`
/// None), `pmessage` (with the pattern that matched) or `smessage`.
#[derive(Debug)]
pub struct Message {
    pub kind: Kind,
    pub pattern: Option<Arc<[u8]>>,
    pub channel: Arc<[u8]>,
    pub payload: Arc<[u8]>,
}

impl Message {
    /// Writes the message as Redis sends it (a push in RESP3).
    pub fn encode(&self, out: &mut Reply) {
        match self.kind {
            Kind::Channel => {
                out.push(3);
                out.bulk(b"message");
            }
            Kind::Pattern => {
                out.push(4);
                out.bulk(b"pmessage");
                out.bulk(self.pattern.as_deref().unwrap_or_default());
            }
            Kind::Shard => {
                out.push(3);
                out.bulk(b"smessage");
            }
        }
        out.bulk(&self.channel);
        out.bulk(&self.payload);
    }
}

/// Changed keys, each with the connection that changed it (NOLOOP).
pub type ChangedKeys = Vec<(Box<[u8]>, Option<Home>)>;

/// What a thread's inbox carries for one of its connections.
pub enum Delivery {
    /// A subscriber's copy of a message (the message itself is shared).
    Message { to: Home, msg: Arc<Message> },
    /// For tracking client `id`: `keys` changed, each with the connection
    /// that changed it (NOLOOP), or every key (`None`: a flush). `bcast`:
    /// sent for a BCAST prefix (a client not in BCAST mode ignores it, and
    /// a BCAST client ignores the others, as Redis).
    Invalidate {
        to: Home,
        id: u64,
        keys: Option<ChangedKeys>,
        bcast: bool,
    },
    /// An invalidation forwarded to REDIRECT client `id`; a null (flush)
    /// is written in the tracking client's protocol (`null_resp3`), as
    /// Redis does.
    Redirected {
        to: Home,
        id: u64,
        keys: Option<Vec<Box<[u8]>>>,
        null_resp3: bool,
    },
    /// A MONITOR line (a simple string, the same in RESP2 and RESP3) for
    /// monitoring client `id` (see `ops::monitor`).
    Monitor { to: Home, id: u64, line: Arc<[u8]> },
}

impl Delivery {
    pub fn to(&self) -> Home {
        match self {
            Delivery::Message { to, .. }
            | Delivery::Invalidate { to, .. }
            | Delivery::Redirected { to, .. }
            | Delivery::Monitor { to, .. } => *to,
        }
    }
}

/// What one PUBLISH hands one thread.
pub type Batch = Vec<Delivery>;

/// A publication prepared and not sent yet ([`PubSub::prepare`]).
pub struct Held {
    /// Each thread's deliveries, by thread index.
    pub per_thread: Vec<Batch>,
    /// The messages of the publishing connection itself.
    pub mine: Vec<Arc<Message>>,
}

type Subscribers = HashMap<u64, Home>;

#[derive(Default)]
struct Table {
    channels: HashMap<Box<[u8]>, Subscribers>,
    patterns: HashMap<Box<[u8]>, Subscribers>,
    shard: HashMap<Box<[u8]>, Subscribers>,
}

impl Table {
    fn map(&mut self, kind: Kind) -> &mut HashMap<Box<[u8]>, Subscribers> {
        match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
            Kind::Shard => &mut self.shard,
        }
    }
    fn get(&self, kind: Kind) -> &HashMap<Box<[u8]>, Subscribers> {
        match kind {
            Kind::Channel => &self.channels,
            Kind::Pattern => &self.patterns,
            Kind::Shard => &self.shard,
        }
    }
}

/// A thread's inbox: batches of deliveries from publishers on any thread.
#[derive(Default)]
struct Inbox {
    batches: Mutex<Vec<Batch>>,
    /// Whether `batches` may be non-empty (read without the lock by the
    /// event loop before it sleeps).
    pending: std::sync::atomic::AtomicBool,
}

/// The registry shared by every thread (see the module documentation).
pub struct PubSub {
    table: RwLock<Table>,
    inboxes: Box<[Inbox]>,
    /// Wakes thread `i` if it sleeps; set once by the runtime.
    ring: OnceLock<Box<dyn Fn(usize) + Send + Sync>>,
    /// Channels and patterns in the table that could receive a keyspace
    /// event (see [`may_hear_keyspace`]); shards read it before building
    /// events (`engine::Shard::event_listeners`). Changed under the
    /// table's write lock, before SUBSCRIBE replies.
    keyspace: Arc<AtomicUsize>,
}

/// Whether subscription `name` of `kind` could receive keyspace events
/// (published on `__keyspace@<db>__:<key>` and `__keyevent@<db>__:<event>`):
/// a channel with one of those prefixes; a pattern whose literal start
/// agrees with `__key` up to its first wildcard, class or escape
/// (conservative: `*` alone counts). Shard channels never do.
pub fn may_hear_keyspace(kind: Kind, name: &[u8]) -> bool {
    match kind {
        Kind::Shard => false,
        Kind::Channel => name.starts_with(b"__keyspace@") || name.starts_with(b"__keyevent@"),
        Kind::Pattern => {
            for (i, &c) in name.iter().enumerate() {
                match c {
                    b'*' | b'?' | b'[' | b'\\' => return true,
                    _ if i >= b"__key".len() => return true,
                    _ if c != b"__key"[i] => return false,
                    _ => {}
                }
            }
            true
        }
    }
}

impl PubSub {
    pub fn new(threads: usize) -> Self {
        PubSub {
            table: RwLock::new(Table::default()),
            inboxes: (0..threads.max(1)).map(|_| Inbox::default()).collect(),
            ring: OnceLock::new(),
            keyspace: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// How the registry wakes a thread whose inbox got a batch.
    pub fn set_ring(&self, ring: Box<dyn Fn(usize) + Send + Sync>) {
        let _ = self.ring.set(ring);
    }

    /// Whether thread `t`'s inbox may hold batches (one atomic load).
    #[inline]
    pub fn has_pending(&self, t: usize) -> bool {
        self.inboxes
            .get(t)
            .is_some_and(|i| i.pending.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// Takes thread `t`'s batches, oldest first.
    pub fn take(&self, t: usize) -> Vec<Batch> {
        let Some(inbox) = self.inboxes.get(t) else {
            return Vec::new();
        };
        inbox
            .pending
            .store(false, std::sync::atomic::Ordering::SeqCst);
        std::mem::take(&mut *lock(&inbox.batches))
    }

    fn send(&self, t: usize, batch: Batch) {
        let Some(inbox) = self.inboxes.get(t) else {
            return;
        };
        lock(&inbox.batches).push(batch);
        inbox
            .pending
            .store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(ring) = self.ring.get() {
            ring(t);
        }
    }

    /// Hands one delivery to its connection's thread.
    pub fn send_one(&self, d: Delivery) {
        let t = usize::from(d.to().thread);
        self.send(t, vec![d]);
    }

    /// The count shards read before building keyspace events.
    pub fn keyspace_gate(&self) -> Arc<AtomicUsize> {
        self.keyspace.clone()
    }

    fn add(&self, kind: Kind, name: &[u8], id: u64, home: Home) {
        let mut t = write(&self.table);
        let subs = t.map(kind).entry(name.into()).or_default();
        if subs.is_empty() && may_hear_keyspace(kind, name) {
            self.keyspace.fetch_add(1, Ordering::Release);
        }
        subs.insert(id, home);
    }

    fn remove(&self, kind: Kind, name: &[u8], id: u64) {
        let mut t = write(&self.table);
        let map = t.map(kind);
        if let Some(subs) = map.get_mut(name) {
            subs.remove(&id);
            if subs.is_empty() {
                map.remove(name);
                if may_hear_keyspace(kind, name) {
                    self.keyspace.fetch_sub(1, Ordering::Release);
                }
            }
        }
    }

    /// Publishes `payload` on `channel` (`shard`: SPUBLISH's namespace):
    /// queues a delivery for every subscriber but `me` (whose messages are
    /// returned, for the caller to write before its reply), and returns
    /// the number of receivers, `me` included.
    pub fn publish(
        &self,
        channel: &[u8],
        payload: &[u8],
        shard: bool,
        me: u64,
    ) -> (usize, Vec<Arc<Message>>) {
        let (receivers, held) = self.prepare(channel, payload, shard, me);
        self.deliver(held.per_thread);
        (receivers, held.mine)
    }

    /// [`PubSub::publish`] up to the deliveries, which wait in the
    /// returned [`Held`] for [`PubSub::deliver`] (or are dropped): the
    /// receivers are those subscribed now, and the count is theirs (a
    /// script's publication held until its run completes, see
    /// `script::traces`).
    pub fn prepare(&self, channel: &[u8], payload: &[u8], shard: bool, me: u64) -> (usize, Held) {
        let channel: Arc<[u8]> = channel.into();
        let payload: Arc<[u8]> = payload.into();
        let mut per_thread: Vec<Batch> = Vec::new();
        let mut mine = Vec::new();
        let mut receivers = 0;
        {
            let t = read(&self.table);
            let mut deliver = |subs: &Subscribers, msg: Arc<Message>| {
                for (&id, &home) in subs {
                    receivers += 1;
                    if id == me {
                        mine.push(msg.clone());
                        continue;
                    }
                    let th = usize::from(home.thread);
                    if per_thread.len() <= th {
                        per_thread.resize_with(th + 1, Vec::new);
                    }
                    per_thread[th].push(Delivery::Message {
                        to: home,
                        msg: msg.clone(),
                    });
                }
            };
            let (kind, map) = if shard {
                (Kind::Shard, &t.shard)
            } else {
                (Kind::Channel, &t.channels)
            };
            if let Some(subs) = map.get(&channel[..]) {
                let msg = Arc::new(Message {
                    kind,
                    pattern: None,
                    channel: channel.clone(),
                    payload: payload.clone(),
                });
                deliver(subs, msg);
            }
            if !shard {
                for (pat, subs) in &t.patterns {
                    if ds::glob::glob_match(pat, &channel, false) {
                        let msg = Arc::new(Message {
                            kind: Kind::Pattern,
                            pattern: Some(Arc::from(&pat[..])),
                            channel: channel.clone(),
                            payload: payload.clone(),
                        });
                        deliver(subs, msg);
                    }
                }
            }
        }
        (receivers, Held { per_thread, mine })
    }

    /// Sends deliveries [`PubSub::prepare`] held, one batch per thread.
    pub fn deliver(&self, per_thread: Vec<Batch>) {
        for (th, batch) in per_thread.into_iter().enumerate() {
            if !batch.is_empty() {
                self.send(th, batch);
            }
        }
    }

    /// Channels (of `kind`) with at least one subscriber matching
    /// `pattern` (all without one).
    fn names(&self, kind: Kind, pattern: Option<&[u8]>) -> Vec<Box<[u8]>> {
        let t = read(&self.table);
        t.get(kind)
            .keys()
            .filter(|c| pattern.is_none_or(|p| ds::glob::glob_match(p, c, false)))
            .cloned()
            .collect()
    }

    fn count(&self, kind: Kind, name: &[u8]) -> usize {
        let t = read(&self.table);
        t.get(kind).get(name).map_or(0, HashMap::len)
    }

    /// INFO's `pubsub_channels`, `pubsub_patterns`, `pubsubshard_channels`.
    pub fn sizes(&self) -> (usize, usize, usize) {
        let t = read(&self.table);
        (t.channels.len(), t.patterns.len(), t.shard.len())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding it left plain data: keep serving.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}
fn write<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

// ---------------------------------------------------------------- per client

/// A connection's subscriptions, in the order they were made.
#[derive(Clone, Debug, Default)]
pub struct Subscriptions {
    pub channels: IndexSet<Box<[u8]>>,
    pub patterns: IndexSet<Box<[u8]>>,
    pub shard: IndexSet<Box<[u8]>>,
}

impl Subscriptions {
    fn set(&mut self, kind: Kind) -> &mut IndexSet<Box<[u8]>> {
        match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
            Kind::Shard => &mut self.shard,
        }
    }
}

/// Whether a client is in Redis's subscribed mode (any subscription).
pub fn subscribed(c: &crate::ClientState) -> bool {
    c.sub_count + c.psub_count + c.ssub_count > 0
}

/// Commands a RESP2 client may send while subscribed.
pub fn allowed_when_subscribed(name: &str) -> bool {
    matches!(
        name,
        "subscribe"
            | "ssubscribe"
            | "sunsubscribe"
            | "unsubscribe"
            | "psubscribe"
            | "punsubscribe"
            | "ping"
            | "quit"
            | "reset"
    )
}

/// The error for any other command (`name`: its full name).
pub fn refused_when_subscribed(name: &str) -> CmdError {
    CmdError::err(format!(
        "Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET \
         are allowed in this context"
    ))
}

/// Redis's `clientSubscriptionsCount` (channels and patterns) or, for
/// shard channels, `clientShardSubscriptionsCount`.
fn count_for(c: &crate::ClientState, kind: Kind) -> usize {
    match kind {
        Kind::Shard => c.ssub_count,
        _ => c.sub_count + c.psub_count,
    }
}

fn sync_counts(c: &mut crate::ClientState) {
    let (s, p, ss) = c.subs.as_ref().map_or((0, 0, 0), |s| {
        (s.channels.len(), s.patterns.len(), s.shard.len())
    });
    c.sub_count = s;
    c.psub_count = p;
    c.ssub_count = ss;
    if s + p + ss == 0 {
        c.subs = None;
    }
}

fn verb(kind: Kind, sub: bool) -> &'static [u8] {
    match (kind, sub) {
        (Kind::Channel, true) => b"subscribe",
        (Kind::Channel, false) => b"unsubscribe",
        (Kind::Pattern, true) => b"psubscribe",
        (Kind::Pattern, false) => b"punsubscribe",
        (Kind::Shard, true) => b"ssubscribe",
        (Kind::Shard, false) => b"sunsubscribe",
    }
}

fn reply_sub(out: &mut Reply, kind: Kind, sub: bool, name: Option<&[u8]>, count: usize) {
    // (The callers mark the client's reply as pushed: `push_reply`.)
    out.push(3);
    out.bulk(verb(kind, sub));
    match name {
        Some(n) => out.bulk(n),
        None => out.null(),
    }
    out.int(count as i64);
}

/// Subscribes the client to `names` of `kind`, one reply each.
pub fn subscribe_to(c: &mut ConnCtx<'_>, kind: Kind, names: &mut dyn Iterator<Item = &[u8]>) {
    let (id, home) = (c.client.id, c.client.home);
    for name in names {
        let subs = c.client.subs.get_or_insert_with(Default::default);
        if subs.set(kind).insert(name.into()) {
            c.server.pubsub.add(kind, name, id, home);
        }
        sync_counts(c.client);
        let n = count_for(c.client, kind);
        reply_sub(c.out, kind, true, Some(name), n);
        c.client.push_reply = true;
    }
}

/// Unsubscribes the client from `names` of `kind` (from all of them when
/// `names` is empty), one reply each; with none at all, one reply with a
/// null name.
pub fn unsubscribe_from(c: &mut ConnCtx<'_>, kind: Kind, names: Vec<&[u8]>, reply: bool) {
    let id = c.client.id;
    let names: Vec<Box<[u8]>> = if names.is_empty() {
        c.client
            .subs
            .as_mut()
            .map(|s| s.set(kind).iter().cloned().collect())
            .unwrap_or_default()
    } else {
        names.into_iter().map(Into::into).collect()
    };
    if names.is_empty() && reply {
        let n = count_for(c.client, kind);
        reply_sub(c.out, kind, false, None, n);
        c.client.push_reply = true;
        return;
    }
    for name in names {
        let had = c
            .client
            .subs
            .as_mut()
            .is_some_and(|s| s.set(kind).shift_remove(&name));
        if had {
            c.server.pubsub.remove(kind, &name, id);
        }
        sync_counts(c.client);
        if reply {
            let n = count_for(c.client, kind);
            reply_sub(c.out, kind, false, Some(&name), n);
            c.client.push_reply = true;
        }
    }
}

/// Drops every subscription of a client (RESET, disconnect), silently.
pub fn unsubscribe_all(server: &crate::ServerShared, client: &mut crate::ClientState) {
    if let Some(subs) = client.subs.take() {
        for (kind, set) in [
            (Kind::Channel, &subs.channels),
            (Kind::Pattern, &subs.patterns),
            (Kind::Shard, &subs.shard),
        ] {
            for name in set {
                server.pubsub.remove(kind, name, client.id);
            }
        }
    }
    sync_counts(client);
}

// ---------------------------------------------------------------- commands

fn subscribe(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    subscribe_to(c, Kind::Channel, &mut args.iter().skip(1));
    Ok(())
}

fn psubscribe(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    subscribe_to(c, Kind::Pattern, &mut args.iter().skip(1));
    Ok(())
}

fn unsubscribe(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    unsubscribe_from(c, Kind::Channel, args.iter().skip(1).collect(), true);
    Ok(())
}

fn punsubscribe(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    unsubscribe_from(c, Kind::Pattern, args.iter().skip(1).collect(), true);
    Ok(())
}

/// PUBLISH channel message: the number of receivers; a message to this
/// very client comes first.
fn publish(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (n, mine) = c
        .server
        .pubsub
        .publish(args.get(1), args.get(2), false, c.client.id);
    for m in mine {
        m.encode(c.out);
    }
    c.out.int(n as i64);
    Ok(())
}

fn ssubscribe(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    subscribe_to(c, Kind::Shard, &mut args.iter().skip(1));
    Ok(())
}

fn sunsubscribe(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    unsubscribe_from(c, Kind::Shard, args.iter().skip(1).collect(), true);
    Ok(())
}

/// SPUBLISH shardchannel message: as PUBLISH, to SSUBSCRIBE's namespace.
fn spublish(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (n, mine) = c
        .server
        .pubsub
        .publish(args.get(1), args.get(2), true, c.client.id);
    for m in mine {
        m.encode(c.out);
    }
    c.out.int(n as i64);
    Ok(())
}

/// PUBSUB CHANNELS [pattern]
fn pubsub_channels(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    channels(c, args, Kind::Channel)
}

/// PUBSUB SHARDCHANNELS [pattern]
fn pubsub_shardchannels(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    channels(c, args, Kind::Shard)
}

fn channels(c: &mut ConnCtx<'_>, args: Args<'_>, kind: Kind) -> Result<(), CmdError> {
    if args.len() > 3 {
        return Err(CmdError::err_echo(
            "unknown subcommand or wrong number of arguments for '",
            args.get(1),
            "'. Try PUBSUB HELP.",
        ));
    }
    let pattern = (args.len() > 2).then(|| args.get(2));
    let names = c.server.pubsub.names(kind, pattern);
    c.out.array(names.len());
    for n in &names {
        c.out.bulk(n);
    }
    Ok(())
}

/// PUBSUB SHARDNUMSUB [shardchannel ...]
fn pubsub_shardnumsub(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    numsub(c, args, Kind::Shard);
    Ok(())
}

/// PUBSUB NUMSUB [channel ...]: a flat map of channel, count.
fn pubsub_numsub(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    numsub(c, args, Kind::Channel);
    Ok(())
}

fn numsub(c: &mut ConnCtx<'_>, args: Args<'_>, kind: Kind) {
    let names: Vec<&[u8]> = args.iter().skip(2).collect();
    // A flat array in RESP3 too, as Redis sends it.
    c.out.array(names.len() * 2);
    for n in names {
        c.out.bulk(n);
        c.out.int(c.server.pubsub.count(kind, n) as i64);
    }
}

/// PUBSUB NUMPAT: patterns with at least one subscriber.
fn pubsub_numpat(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    c.out.int(c.server.pubsub.sizes().1 as i64);
    Ok(())
}

fn pubsub_help(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    const LINES: &[&str] = &[
        "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CHANNELS [<pattern>]",
        "    Return the currently active channels matching a <pattern> (default: '*').",
        "NUMPAT",
        "    Return number of subscriptions to patterns.",
        "NUMSUB [<channel> ...]",
        "    Return the number of subscribers for the specified channels, excluding",
        "    pattern subscriptions(default: no channels).",
        "SHARDCHANNELS [<pattern>]",
        "    Return the currently active shard level channels matching a <pattern> (default: '*').",
        "SHARDNUMSUB [<shardchannel> ...]",
        "    Return the number of subscribers for the specified shard level channel(s)",
        "HELP",
        "    Prints this help.",
    ];
    c.out.array(LINES.len());
    for l in LINES {
        c.out.simple(l);
    }
    Ok(())
}

/// Whether `args` is a PING (for the subscribed-mode reply shape).
pub fn is_ping(args: Args<'_>) -> bool {
    eq_ic(args.get(0), "ping")
}

#[cfg(test)]
mod keyspace_gate_tests {
    use super::{may_hear_keyspace, Kind};

    #[test]
    fn which_subscriptions_could_hear_keyspace_events() {
        let yes = |k, n: &str| assert!(may_hear_keyspace(k, n.as_bytes()), "{n}");
        let no = |k, n: &str| assert!(!may_hear_keyspace(k, n.as_bytes()), "{n}");
        yes(Kind::Channel, "__keyspace@0__:k");
        yes(Kind::Channel, "__keyevent@12__:set");
        no(Kind::Channel, "__keyspace");
        no(Kind::Channel, "news");
        no(Kind::Shard, "__keyspace@0__:k");
        for p in [
            "*",
            "?",
            "[_]*",
            "\\__key*",
            "_*",
            "__k*",
            "__key",
            "__keyspace@0__:*",
            "__keyx",
        ] {
            yes(Kind::Pattern, p);
        }
        for p in ["news.*", "a*", "_a*", "__a", "__kez*"] {
            no(Kind::Pattern, p);
        }
    }
}
