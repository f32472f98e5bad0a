//! The stream type (Redis 7.0's `t_stream.c` data model): entries with
//! 128-bit IDs in listpack nodes, and consumer groups.
//!
//! * Entries live in nodes keyed by their master ID (the ID of the first
//!   entry added to the node), in an ordered map where Redis uses a radix
//!   tree of big-endian IDs: the order, the node boundaries and each
//!   node's bytes are Redis's (see [`node`]), so an RDB or DUMP writes the
//!   nodes as they are and reads them back without conversion, and a node
//!   is cut where Redis cuts it (`stream-node-max-bytes`,
//!   `stream-node-max-entries`, [`NodeLimits`]).
//! * Deleting an entry flags it in its node; a node goes when its last
//!   live entry does. Trimming removes whole nodes, then (exact trims)
//!   flags entries of the first node left, as Redis's `streamTrim`.
//! * The metadata Redis keeps: length, last ID, first ID, the largest
//!   deleted ID, entries ever added; consumer groups with their pending
//!   entries lists (PEL) and consumers (Redis 7.0 keeps one time per
//!   consumer, `seen-time`; 7.2's `active-time` does not exist here).
//!
//! Nothing here builds a reply: readers get IDs and [`Elem`] fields.
//!
//! Cost: a read walks a node from its start (nodes are forward-only to
//! the walker here; Redis walks backwards with `lp-count`): a node is at
//! most `stream-node-max-entries` entries (100 by default), so a reverse
//! range or a seek costs one node's decoding on top of what it returns.

pub mod node;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

pub use crate::rdb::pack::Elem;

/// A stream entry ID: milliseconds and sequence, ordered as a 128-bit
/// number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

impl StreamId {
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    pub const MAX: StreamId = StreamId {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    pub const fn new(ms: u64, seq: u64) -> Self {
        StreamId { ms, seq }
    }

    pub fn is_zero(self) -> bool {
        self == StreamId::MIN
    }

    /// The next ID, `None` past the largest (Redis's `streamIncrID`).
    pub fn incr(self) -> Option<StreamId> {
        if self.seq == u64::MAX {
            if self.ms == u64::MAX {
                None
            } else {
                Some(StreamId::new(self.ms + 1, 0))
            }
        } else {
            Some(StreamId::new(self.ms, self.seq + 1))
        }
    }

    /// The previous ID, `None` before 0-0 (Redis's `streamDecrID`).
    pub fn decr(self) -> Option<StreamId> {
        if self.seq == 0 {
            if self.ms == 0 {
                None
            } else {
                Some(StreamId::new(self.ms - 1, u64::MAX))
            }
        } else {
            Some(StreamId::new(self.ms, self.seq - 1))
        }
    }

    /// Big-endian 128-bit form (the radix tree key in RDB files).
    pub fn to_be_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.ms.to_be_bytes());
        b[8..].copy_from_slice(&self.seq.to_be_bytes());
        b
    }

    pub fn from_be_bytes(b: &[u8; 16]) -> Self {
        let mut ms = [0u8; 8];
        let mut seq = [0u8; 8];
        ms.copy_from_slice(&b[..8]);
        seq.copy_from_slice(&b[8..]);
        StreamId::new(u64::from_be_bytes(ms), u64::from_be_bytes(seq))
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// Where a new node starts (Redis's `stream-node-max-bytes` and
/// `stream-node-max-entries`; 0 = no limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeLimits {
    pub max_bytes: usize,
    pub max_entries: i64,
}

impl Default for NodeLimits {
    fn default() -> Self {
        NodeLimits {
            max_bytes: 4096,
            max_entries: 100,
        }
    }
}

/// The largest listpack a node may be (Redis's `STREAM_LISTPACK_MAX_SIZE`).
pub const LISTPACK_MAX_SIZE: usize = 1 << 30;

/// `entries-read` unknown (Redis's `SCG_INVALID_ENTRIES_READ`).
pub const ENTRIES_READ_INVALID: i64 = -1;

/// A pending entry: delivered to `consumer`, not acknowledged yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nack {
    pub consumer: Vec<u8>,
    /// Unix ms of the last delivery.
    pub delivery_time: u64,
    pub delivery_count: u64,
}

/// A consumer of a group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Consumer {
    /// Unix ms of its last interaction (Redis 7.0's `seen-time`).
    pub seen_time: u64,
    /// Its pending entries (each also in the group's PEL, naming it).
    pub pel: BTreeSet<StreamId>,
}

/// A consumer group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Group {
    pub last_id: StreamId,
    /// Entries read by the group (its logical offset), or
    /// [`ENTRIES_READ_INVALID`].
    pub entries_read: i64,
    pub pel: BTreeMap<StreamId, Nack>,
    pub consumers: BTreeMap<Vec<u8>, Consumer>,
}

impl Group {
    pub fn new(last_id: StreamId, entries_read: i64) -> Self {
        Group {
            last_id,
            entries_read,
            ..Group::default()
        }
    }

    /// Removes `id` from the PEL and its consumer's; true if it was there.
    pub fn ack(&mut self, id: StreamId) -> bool {
        match self.pel.remove(&id) {
            Some(n) => {
                if let Some(c) = self.consumers.get_mut(&n.consumer) {
                    c.pel.remove(&id);
                }
                true
            }
            None => false,
        }
    }

    fn heap_bytes(&self) -> usize {
        let nacks: usize = self.pel.values().map(|n| 48 + n.consumer.len()).sum();
        let cons: usize = self
            .consumers
            .iter()
            .map(|(k, c)| 64 + k.len() + c.pel.len() * 24)
            .sum();
        64 + nacks + cons
    }
}

/// How to trim (XADD/XTRIM's MAXLEN or MINID).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrimTo {
    MaxLen(u64),
    MinId(StreamId),
}

/// A stream value; see the module docs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stream {
    /// Master ID -> node (a listpack in Redis's layout).
    nodes: BTreeMap<StreamId, Vec<u8>>,
    /// Live entries.
    pub length: u64,
    pub last_id: StreamId,
    /// The first live entry's ID when the stream last changed (what
    /// Redis records; 0-0 when empty).
    pub first_id: StreamId,
    pub max_deleted_id: StreamId,
    pub entries_added: u64,
    pub groups: BTreeMap<Vec<u8>, Group>,
}

impl Stream {
    pub fn new() -> Self {
        Stream::default()
    }

    pub fn len(&self) -> u64 {
        self.length
    }

    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    /// Nodes (Redis's radix tree keys).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The nodes in order: master ID and listpack bytes.
    pub fn nodes(&self) -> impl Iterator<Item = (StreamId, &[u8])> {
        self.nodes.iter().map(|(k, v)| (*k, v.as_slice()))
    }

    /// Adds a node read from a file; `validate` it first. False if a node
    /// with that master ID exists already.
    pub fn push_node(&mut self, master: StreamId, lp: Vec<u8>) -> bool {
        if self.nodes.contains_key(&master) {
            return false;
        }
        self.nodes.insert(master, lp);
        true
    }

    /// Approximate heap bytes, for MEMORY USAGE and accounting.
    pub fn heap_bytes(&self) -> usize {
        let nodes: usize = self.nodes.values().map(|n| n.capacity() + 48).sum();
        let groups: usize = self
            .groups
            .iter()
            .map(|(k, g)| k.len() + g.heap_bytes())
            .sum();
        nodes + groups
    }

    /// The number of radix tree nodes Redis would have for these keys
    /// (XINFO STREAM's `radix-tree-nodes`): estimated as a compressed trie
    /// over the 16-byte keys, one node per branching point, compressed
    /// run and leaf.
    pub fn radix_tree_nodes(&self) -> usize {
        let keys: Vec<[u8; 16]> = self.nodes.keys().map(|k| k.to_be_bytes()).collect();
        if keys.is_empty() {
            return 1;
        }
        fn count(keys: &[[u8; 16]], depth: usize) -> usize {
            if depth == 16 {
                return 1;
            }
            if keys.len() == 1 {
                // A compressed node for the rest, then the key's node.
                return 2;
            }
            // Common prefix from `depth`.
            let mut d = depth;
            while d < 16 && keys.iter().all(|k| k[d] == keys[0][d]) {
                d += 1;
            }
            let mut n = if d > depth { 2 } else { 1 };
            if d == 16 {
                return n;
            }
            let mut i = 0;
            while i < keys.len() {
                let mut j = i;
                while j < keys.len() && keys[j][d] == keys[i][d] {
                    j += 1;
                }
                n += count_child(&keys[i..j], d + 1);
                i = j;
            }
            n
        }
        fn count_child(keys: &[[u8; 16]], depth: usize) -> usize {
            if depth == 16 {
                1
            } else if keys.len() == 1 {
                2
            } else {
                count(keys, depth)
            }
        }
        count(&keys, 0)
    }

    /// Appends an entry with `id`, which must be greater than `last_id`
    /// (checked by the caller), choosing or starting the tail node as
    /// Redis's `streamAppendItem` does.
    pub fn append(&mut self, id: StreamId, fields: &[(&[u8], &[u8])], lim: NodeLimits) {
        let tot: usize = fields.iter().map(|(f, v)| f.len() + v.len()).sum();
        let mut max_bytes = lim.max_bytes;
        if max_bytes == 0 || max_bytes > LISTPACK_MAX_SIZE {
            max_bytes = LISTPACK_MAX_SIZE;
        }
        let tail = self.nodes.iter_mut().next_back().and_then(|(k, lp)| {
            let full = lp.len() + tot >= max_bytes || {
                let (count, deleted) = node::master_counts(lp);
                lim.max_entries > 0 && count + deleted >= lim.max_entries
            };
            (!full).then_some((*k, lp))
        });
        match tail {
            Some((master, lp)) => node::append(lp, master, id, fields),
            None => {
                // The tail node is closed: give back its growth slack
                // (Redis's listpacks are allocated to size).
                if let Some(closed) = self.nodes.values_mut().next_back() {
                    closed.shrink_to_fit();
                }
                let mut lp = node::new_node(fields);
                node::append(&mut lp, id, id, fields);
                self.nodes.insert(id, lp);
            }
        }
        self.length += 1;
        // XSETID may have set it anywhere (and a payload too).
        self.entries_added = self.entries_added.wrapping_add(1);
        self.last_id = id;
        if self.length == 1 {
            self.first_id = id;
        }
    }

    /// Calls `f` with each live entry from `start` to `end` (inclusive),
    /// in order or reversed, until it returns false.
    pub fn range(
        &self,
        start: StreamId,
        end: StreamId,
        rev: bool,
        mut f: impl FnMut(StreamId, &[(Elem<'_>, Elem<'_>)]) -> bool,
    ) {
        if start > end {
            return;
        }
        if !rev {
            let from = self
                .nodes
                .range(..=start)
                .next_back()
                .map(|(k, _)| *k)
                .unwrap_or(start);
            for (m, lp) in self.nodes.range(from..) {
                if *m > end || !node::scan(lp, *m, start, end, false, &mut f) {
                    return;
                }
            }
        } else {
            for (m, lp) in self.nodes.range(..=end).rev() {
                if !node::scan(lp, *m, start, end, true, &mut f) || *m < start {
                    return;
                }
            }
        }
    }

    /// Whether a live entry with `id` exists.
    pub fn contains(&self, id: StreamId) -> bool {
        let mut found = false;
        self.range(id, id, false, |_, _| {
            found = true;
            false
        });
        found
    }

    /// The first or last live entry's ID (Redis's `streamGetEdgeID` with
    /// tombstones skipped).
    pub fn edge_id(&self, first: bool) -> Option<StreamId> {
        let mut out = None;
        self.range(StreamId::MIN, StreamId::MAX, !first, |id, _| {
            out = Some(id);
            false
        });
        out
    }

    /// Deletes the live entry `id` (Redis's `streamDeleteItem`); true if
    /// it existed. The caller updates `first_id`/`max_deleted_id` as XDEL
    /// does.
    pub fn delete(&mut self, id: StreamId) -> bool {
        let Some((&m, lp)) = self.nodes.range_mut(..=id).next_back() else {
            return false;
        };
        let hit = node::entries(lp, m)
            .into_iter()
            .find(|e| e.id == id && !e.deleted())
            .map(|e| (e.at, e.flags));
        let Some((at, flags)) = hit else {
            return false;
        };
        if node::mark_deleted(lp, at, flags) == 0 {
            self.nodes.remove(&m);
        }
        self.length -= 1;
        true
    }

    /// Trims as Redis's `streamTrim`: whole nodes first; then, unless
    /// `approx`, entries of the first node left. `limit` (0 = none) bounds
    /// the entries removed, in whole nodes. Returns the entries removed
    /// and updates `first_id`.
    pub fn trim(&mut self, to: TrimTo, approx: bool, limit: i64) -> u64 {
        let mut deleted: i64 = 0;
        while let Some((&m, lp)) = self.nodes.iter_mut().next() {
            if let TrimTo::MaxLen(max) = to {
                if self.length <= max {
                    break;
                }
            }
            let mh = node::master(lp);
            let entries = mh.count;
            let marked = mh.deleted;
            drop(mh);
            if limit != 0 && deleted + entries > limit {
                break;
            }
            let remove = match to {
                TrimTo::MaxLen(max) => self.length - entries as u64 >= max,
                TrimTo::MinId(min) => node::last_id(lp, m) < min,
            };
            if remove {
                self.nodes.remove(&m);
                self.length -= entries as u64;
                deleted += entries;
                continue;
            }
            if approx {
                break;
            }
            let mut flagged = Vec::new();
            let mut len = self.length;
            for e in node::entries(lp, m) {
                let stop = match to {
                    TrimTo::MaxLen(max) => len <= max,
                    TrimTo::MinId(min) => e.id >= min,
                };
                if stop {
                    break;
                }
                if !e.deleted() {
                    flagged.push((e.at, e.flags));
                    len -= 1;
                }
            }
            let n = flagged.len() as i64;
            for (at, flags) in flagged {
                // One-byte flags: in place, offsets unchanged.
                lp[at] = (flags | node::F_DELETED) as u8;
            }
            node::set_counts(lp, entries - n, marked + n);
            self.length -= n as u64;
            deleted += n;
            break;
        }
        if deleted > 0 {
            self.first_id = self.edge_id(true).unwrap_or_default();
        }
        deleted as u64
    }

    /// Whether a tombstone may lie in `start..=end` (Redis's
    /// `streamRangeHasTombstones`).
    pub fn range_has_tombstones(&self, start: StreamId, end: StreamId) -> bool {
        if self.length == 0 || self.max_deleted_id.is_zero() {
            return false;
        }
        if self.first_id > self.max_deleted_id {
            return false;
        }
        start <= self.max_deleted_id && self.max_deleted_id <= end
    }

    /// The logical read counter of `id` (Redis's
    /// `streamEstimateDistanceFromFirstEverEntry`), or
    /// [`ENTRIES_READ_INVALID`].
    pub fn estimate_distance(&self, id: StreamId) -> i64 {
        if self.entries_added == 0 {
            return 0;
        }
        if self.length == 0 && id <= self.last_id {
            return self.entries_added as i64;
        }
        if id == self.last_id {
            return self.entries_added as i64;
        } else if id > self.last_id {
            return ENTRIES_READ_INVALID;
        }
        // Unsigned arithmetic as Redis's: a payload may hold fewer entries
        // added than live ones, and XADD wraps the counter past 2^64 - 1.
        if self.max_deleted_id.is_zero() || self.max_deleted_id < self.first_id {
            if id < self.first_id {
                return self.entries_added.wrapping_sub(self.length) as i64;
            } else if id == self.first_id {
                return self.entries_added.wrapping_sub(self.length).wrapping_add(1) as i64;
            }
        }
        ENTRIES_READ_INVALID
    }

    /// A group's lag (Redis's `streamReplyWithCGLag`): `None` when unknown.
    pub fn lag(&self, g: &Group) -> Option<i64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if g.entries_read != ENTRIES_READ_INVALID
            && !self.range_has_tombstones(g.last_id, StreamId::MAX)
        {
            // Redis's unsigned arithmetic: `entries_read` from a payload
            // may be anything.
            return Some((self.entries_added as i64).wrapping_sub(g.entries_read));
        }
        let r = self.estimate_distance(g.last_id);
        (r != ENTRIES_READ_INVALID).then(|| (self.entries_added as i64).wrapping_sub(r))
    }

    /// Checks a stream read from a file beyond its nodes: the live count
    /// matches `length`, IDs do not pass `last_id`, every PEL entry's
    /// consumer exists and holds it.
    pub fn check_consistency(&self) -> Result<(), &'static str> {
        let mut live = 0u64;
        let mut last = None;
        for (m, lp) in &self.nodes {
            for e in node::entries(lp, *m) {
                if last.is_some_and(|l| l >= e.id) {
                    return Err("stream nodes overlap");
                }
                last = Some(e.id);
                if !e.deleted() {
                    live += 1;
                }
            }
        }
        if live != self.length {
            return Err("stream length mismatch");
        }
        if last.is_some_and(|l| l > self.last_id) {
            return Err("stream entry after last ID");
        }
        for g in self.groups.values() {
            for (id, n) in &g.pel {
                let ok = g
                    .consumers
                    .get(&n.consumer)
                    .is_some_and(|c| c.pel.contains(id));
                if !ok {
                    return Err("stream PEL entry without consumer");
                }
            }
            let held: usize = g.consumers.values().map(|c| c.pel.len()).sum();
            if held != g.pel.len() {
                return Err("stream consumer PEL mismatch");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(ms: u64, seq: u64) -> StreamId {
        StreamId::new(ms, seq)
    }

    fn ids(s: &Stream, rev: bool) -> Vec<StreamId> {
        let mut v = Vec::new();
        s.range(StreamId::MIN, StreamId::MAX, rev, |i, _| {
            v.push(i);
            true
        });
        v
    }

    #[test]
    fn id_arithmetic() {
        assert_eq!(id(1, u64::MAX).incr(), Some(id(2, 0)));
        assert_eq!(StreamId::MAX.incr(), None);
        assert_eq!(id(2, 0).decr(), Some(id(1, u64::MAX)));
        assert_eq!(StreamId::MIN.decr(), None);
        assert_eq!(id(3, 4).to_string(), "3-4");
        assert_eq!(StreamId::from_be_bytes(&id(7, 9).to_be_bytes()), id(7, 9));
        assert!(id(1, 5) < id(2, 0));
    }

    #[test]
    fn nodes_cut_at_max_entries() {
        let mut s = Stream::new();
        let lim = NodeLimits {
            max_bytes: 4096,
            max_entries: 3,
        };
        for i in 1..=7 {
            s.append(id(i, 0), &[(b"f", b"v")], lim);
        }
        assert_eq!(s.node_count(), 3);
        assert_eq!(ids(&s, false).len(), 7);
        let mut r = ids(&s, true);
        r.reverse();
        assert_eq!(r, ids(&s, false));
        assert!(s.delete(id(4, 0)));
        assert!(!s.delete(id(4, 0)));
        assert_eq!(s.len(), 6);
        let mut got = Vec::new();
        s.range(id(3, 0), id(5, 0), false, |i, _| {
            got.push(i);
            true
        });
        assert_eq!(got, [id(3, 0), id(5, 0)]);
        // Deleting a node's last live entries removes it.
        assert!(s.delete(id(5, 0)));
        assert!(s.delete(id(6, 0)));
        assert_eq!(s.node_count(), 2);
    }

    #[test]
    fn trim_exact_and_approx() {
        let lim = NodeLimits {
            max_bytes: 4096,
            max_entries: 2,
        };
        let mut s = Stream::new();
        for i in 1..=5 {
            s.append(id(i, 0), &[(b"f", b"v")], lim);
        }
        let mut a = s.clone();
        assert_eq!(a.trim(TrimTo::MaxLen(2), true, 0), 2);
        assert_eq!(a.len(), 3);
        assert_eq!(a.first_id, id(3, 0));
        assert_eq!(s.trim(TrimTo::MaxLen(2), false, 0), 3);
        assert_eq!(ids(&s, false), [id(4, 0), id(5, 0)]);
        assert_eq!(s.first_id, id(4, 0));
        let mut m = Stream::new();
        for i in 1..=5 {
            m.append(id(i, 0), &[(b"f", b"v")], lim);
        }
        assert_eq!(m.trim(TrimTo::MinId(id(4, 0)), false, 0), 3);
        assert_eq!(ids(&m, false), [id(4, 0), id(5, 0)]);
    }

    #[test]
    fn lag_and_distance() {
        let mut s = Stream::new();
        for i in 1..=3 {
            s.append(id(i, 0), &[(b"f", b"v")], NodeLimits::default());
        }
        let g = Group::new(StreamId::MIN, 0);
        assert_eq!(s.lag(&g), Some(3));
        assert_eq!(s.estimate_distance(id(3, 0)), 3);
        assert_eq!(s.estimate_distance(id(1, 0)), 1);
        assert_eq!(s.estimate_distance(id(2, 0)), ENTRIES_READ_INVALID);
        assert!(s.check_consistency().is_ok());
    }
}
