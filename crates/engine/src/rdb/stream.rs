//! Streams in RDB files and DUMP payloads: written as Redis 7.0 writes them
//! (`RDB_TYPE_STREAM_LISTPACKS_2`, 19), read in the three forms Redis 7.x
//! writes (15 from 5.0/6.x, 19 from 7.0, 21 from 7.2, whose consumers also
//! carry an active time, dropped here as 7.0 has none).
//!
//! Layout (`rdbSaveObject`): the node count, each node as its 16-byte
//! big-endian master ID and its listpack (strings); the length; the last
//! ID; (19+) the first ID, the largest deleted ID and the entries added;
//! the groups, each with its name, last delivered ID, (19+) entries read,
//! its PEL (raw 16-byte IDs, delivery time in ms little-endian, delivery
//! count) and its consumers (name, seen time, (21) active time, and their
//! PEL as raw IDs that must be in the group's).
//!
//! Loading is strict where Redis's deep sanitization is: every node is
//! checked (`node::validate`), the nodes may not overlap, the length must
//! match the live entries, and every pending entry must belong to exactly
//! one existing consumer. Anything else is an [`RdbError`], never a panic.

use std::io::Read;

use super::read::Src;
use super::{write_len, write_string, RdbError, T_STREAM_LISTPACKS, T_STREAM_LISTPACKS_3};
use crate::types::stream::{node, Consumer, Group, Nack, Stream, StreamId, ENTRIES_READ_INVALID};
use crate::value::Value;

fn write_id(out: &mut Vec<u8>, id: StreamId) {
    write_len(out, id.ms);
    write_len(out, id.seq);
}

/// The body of type 19.
pub(crate) fn write_stream(out: &mut Vec<u8>, s: &Stream, compress: bool) {
    write_len(out, s.node_count() as u64);
    for (m, lp) in s.nodes() {
        write_string(out, &m.to_be_bytes(), compress);
        write_string(out, lp, compress);
    }
    write_len(out, s.length);
    write_id(out, s.last_id);
    write_id(out, s.first_id);
    write_id(out, s.max_deleted_id);
    write_len(out, s.entries_added);
    write_len(out, s.groups.len() as u64);
    for (name, g) in &s.groups {
        write_string(out, name, compress);
        write_id(out, g.last_id);
        write_len(out, g.entries_read as u64);
        write_len(out, g.pel.len() as u64);
        for (id, n) in &g.pel {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&n.delivery_time.to_le_bytes());
            write_len(out, n.delivery_count);
        }
        write_len(out, g.consumers.len() as u64);
        for (cname, c) in &g.consumers {
            write_string(out, cname, compress);
            out.extend_from_slice(&c.seen_time.to_le_bytes());
            write_len(out, c.pel.len() as u64);
            for id in &c.pel {
                out.extend_from_slice(&id.to_be_bytes());
            }
        }
    }
}

fn read_id<R: Read>(s: &mut Src<R>) -> Result<StreamId, RdbError> {
    Ok(StreamId::new(s.len()?, s.len()?))
}

fn raw_id<R: Read>(s: &mut Src<R>) -> Result<StreamId, RdbError> {
    Ok(StreamId::from_be_bytes(&s.array::<16>()?))
}

fn ms_time<R: Read>(s: &mut Src<R>) -> Result<u64, RdbError> {
    Ok(u64::from_le_bytes(s.array::<8>()?))
}

/// Reads the body of a stream of type `t` (15, 19 or 21).
pub(crate) fn read_stream<R: Read>(s: &mut Src<R>, t: u8) -> Result<Value, RdbError> {
    let at = s.offset();
    let bad = |r: &'static str| RdbError::new(r, at);
    let mut st = Stream::new();
    let nodes = s.count()?;
    for _ in 0..nodes {
        let key = s.string()?;
        let key: [u8; 16] = key
            .as_slice()
            .try_into()
            .map_err(|_| bad("stream node key is not 128 bits"))?;
        let master = StreamId::from_be_bytes(&key);
        let lp = s.string()?;
        node::validate(&lp, master).map_err(bad)?;
        if !st.push_node(master, lp) {
            return Err(bad("duplicate stream node"));
        }
    }
    st.length = s.len()?;
    st.last_id = read_id(s)?;
    if t == T_STREAM_LISTPACKS {
        st.entries_added = st.length;
        st.first_id = st.edge_id(true).unwrap_or(StreamId::MAX);
    } else {
        st.first_id = read_id(s)?;
        st.max_deleted_id = read_id(s)?;
        st.entries_added = s.len()?;
    }
    let groups = s.count()?;
    for _ in 0..groups {
        let name = s.string()?;
        let last_id = read_id(s)?;
        let entries_read = if t == T_STREAM_LISTPACKS {
            st.estimate_distance(last_id)
        } else {
            s.len()? as i64
        };
        let mut g = Group::new(last_id, entries_read.max(ENTRIES_READ_INVALID));
        let pel = s.count()?;
        for _ in 0..pel {
            let id = raw_id(s)?;
            let delivery_time = ms_time(s)?;
            let delivery_count = s.len()?;
            let n = Nack {
                consumer: Vec::new(),
                delivery_time,
                delivery_count,
            };
            if g.pel.insert(id, n).is_some() {
                return Err(bad("duplicate stream PEL entry"));
            }
        }
        let consumers = s.count()?;
        let mut owned = std::collections::BTreeSet::new();
        for _ in 0..consumers {
            let cname = s.string()?;
            let seen_time = ms_time(s)?;
            if t == T_STREAM_LISTPACKS_3 {
                ms_time(s)?;
            }
            let mut c = Consumer {
                seen_time,
                ..Consumer::default()
            };
            let n = s.count()?;
            for _ in 0..n {
                let id = raw_id(s)?;
                let nack = g
                    .pel
                    .get_mut(&id)
                    .ok_or_else(|| bad("consumer PEL entry not in the group's PEL"))?;
                if !owned.insert(id) || !c.pel.insert(id) {
                    return Err(bad("stream PEL entry owned twice"));
                }
                nack.consumer = cname.clone();
            }
            if g.consumers.insert(cname, c).is_some() {
                return Err(bad("duplicate stream consumer"));
            }
        }
        if st.groups.insert(name, g).is_some() {
            return Err(bad("duplicate stream consumer group"));
        }
    }
    st.check_consistency().map_err(bad)?;
    Ok(Value::Stream(Box::new(st)))
}
