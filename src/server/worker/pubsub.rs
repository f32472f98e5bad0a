//! Pub/Sub on a connection's home thread: the messages other threads
//! published for this thread's subscribers (see `commands::pubsub`).
//!
//! Each loop iteration drains the thread's inbox once: every delivery is
//! encoded for its connection's protocol (a push in RESP3) and appended
//! after the replies the connection already owes, so a message never
//! overtakes a reply to a command that ran before it. A subscriber past
//! its output buffer limit (`client-output-buffer-limit pubsub`) is marked
//! for closing at once and gets nothing more: a subscriber that stops
//! reading costs at most its limit, and the publisher never waits for it.

use commands::pubsub::{Delivery, Message};
use commands::ReplyMode;
use resp::Reply;

use super::{Core, Worker};

impl Worker {
    /// Publishes the keyspace events this thread's shard emitted (see
    /// `engine::Shard::notify`; they wait in its effects outbox), in order: for each, the `__keyspace@`
    /// channel (message: the event) then the `__keyevent@` one (message:
    /// the key), as `notify-keyspace-events` asks. One branch when none.
    #[inline]
    pub(super) fn publish_events(&mut self) {
        publish_events(&mut self.core);
    }

    /// Writes the messages and invalidations waiting in this thread's
    /// inbox to their connections. One atomic load when there are none
    /// (inlined: a call cost more than the look, once per turn).
    #[inline]
    pub(super) fn deliver_pubsub(&mut self) {
        if self.core.server.pubsub.has_pending(self.core.id) {
            self.deliver_pending();
        }
    }

    fn deliver_pending(&mut self) {
        let ps = &self.core.server.pubsub;
        let batches = ps.take(self.core.id);
        let now_ms = self.core.shard.now_ms;
        // A batch is one message for many subscribers: encode it once per
        // protocol, copy the bytes to each.
        let mut enc = Reply::new(false);
        let mut encoded: Option<(*const Message, bool)> = None;
        for d in batches.into_iter().flatten() {
            let to = d.to();
            let slot = to.slot as usize;
            let Some(c) = self.conns.slots.get_mut(slot).and_then(|c| c.as_mut()) else {
                continue;
            };
            if c.gen != to.gen || c.closing {
                continue;
            }
            // Messages and invalidations go out even under CLIENT REPLY
            // OFF, as Redis's pushes do; MONITOR lines do not.
            let off = c.client.reply_mode == ReplyMode::Off;
            match d {
                Delivery::Message { msg, .. } => {
                    let key = (std::sync::Arc::as_ptr(&msg), c.client.resp3);
                    if encoded != Some(key) {
                        enc.clear();
                        enc.set_resp3(c.client.resp3);
                        msg.encode(&mut enc);
                        encoded = Some(key);
                    }
                }
                Delivery::Invalidate {
                    id, keys, bcast, ..
                } => {
                    encoded = None;
                    enc.clear();
                    enc.set_resp3(c.client.resp3);
                    if !super::tracking::invalidation(
                        &self.core.server,
                        c,
                        id,
                        keys,
                        bcast,
                        &mut enc,
                    ) {
                        continue;
                    }
                }
                Delivery::Monitor { id, line, .. } => {
                    // RESET or a slot reused since: no longer its monitor.
                    if off || c.client.id != id || !c.client.monitor {
                        continue;
                    }
                    encoded = None;
                    enc.clear();
                    enc.raw(&line);
                }
                Delivery::Redirected {
                    id,
                    keys,
                    null_resp3,
                    ..
                } => {
                    encoded = None;
                    enc.clear();
                    enc.set_resp3(c.client.resp3);
                    if c.client.id != id
                        || !super::tracking::redirected(c, keys.as_deref(), null_resp3, &mut enc)
                    {
                        continue;
                    }
                }
            }
            c.push_unsolicited(enc.as_bytes());
            c.check_obuf(&self.core.cfg.obuf, now_ms);
            self.conns.mark_dirty(slot);
        }
    }
}

/// Publishes the keyspace events `core`'s shard emitted
/// ([`Worker::publish_events`]).
#[inline]
pub(super) fn publish_events(core: &mut Core) {
    if core.shard.outbox.has_events() || core.shard.notify_flags & ds::events::NEW != 0 {
        publish_taken(core);
    }
}

fn publish_taken(core: &mut Core) {
    let events = core.shard.take_events();
    let flags = core.shard.notify_flags;
    let ps = &core.server.pubsub;
    let mut ch = Vec::new();
    for e in events {
        if flags & ds::events::KEYSPACE != 0 {
            ch.clear();
            ch.extend_from_slice(b"__keyspace@");
            ch.extend_from_slice(itoa::Buffer::new().format(e.db).as_bytes());
            ch.extend_from_slice(b"__:");
            ch.extend_from_slice(&e.key);
            ps.publish(&ch, e.event.as_bytes(), false, 0);
        }
        if flags & ds::events::KEYEVENT != 0 {
            ch.clear();
            ch.extend_from_slice(b"__keyevent@");
            ch.extend_from_slice(itoa::Buffer::new().format(e.db).as_bytes());
            ch.extend_from_slice(b"__:");
            ch.extend_from_slice(e.event.as_bytes());
            ps.publish(&ch, &e.key, false, 0);
        }
    }
}
