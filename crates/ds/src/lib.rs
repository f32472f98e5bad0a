//! `ds`: Tessera's data structures.
//!
//! Owns: containers and algorithms that the engine builds values and the
//! keyspace from. This crate knows nothing of RESP, replies, sockets, shards
//! or commands, and must never depend on another Tessera crate: it is the
//! bottom layer, tested on its own with unit and proptest model tests.
//!
//! * [`dict`]: chained hash table with incremental rehashing and Redis's
//!   `SCAN` guarantee: [`Dict`], a map, over [`RawDict`], the table
//!   machinery for any owning node handle ([`ChainNode`]).
//! * [`bytes`]: [`SmallBytes`], a 24-byte byte string with inline storage.
//! * [`listpack`]: [`Listpack`], small sequences of strings in one compact
//!   buffer (the compact encoding of small hashes).
//! * [`glob`]: Redis's glob matcher (`KEYS`, `SCAN MATCH`, `PSUBSCRIBE`).
//! * [`quicklist`]: [`QuickList`], a deque of byte strings in compact
//!   nodes (the list type).
//! * [`crc16`]: CRC16-XMODEM and the Redis Cluster key slot.
//! * [`intset`]: sorted packed integers (Redis's intset).
//! * [`lzf`]: LZF compression as Redis builds it (RDB strings, quicklist
//!   nodes under `list-compress-depth`).
//! * [`tiny`]: [`TinyBytes`], a 16-byte byte string for hash table keys.
//! * [`packed`]: a compact packed sequence of small strings and integers.
//! * [`hll`]: HyperLogLog sketches in Redis's byte layout (the bytes of a
//!   string value).
//! * [`geohash`]: Redis's geohash arithmetic (GEO scores, cells,
//!   distances).
//! * [`csort`]: glibc's `qsort` and Redis's `pqsort`, step for step (the
//!   order of ties in sorted replies).

pub mod bytes;
pub mod crc16;
pub mod csort;
pub mod dict;
pub mod events;
pub mod geohash;
pub mod glob;
pub mod hll;
pub mod intset;
pub mod listpack;
pub mod lzf;
pub mod num;
pub mod packed;
pub mod quicklist;
pub mod ranked;
pub mod tiny;
pub mod zpack;

pub use bytes::SmallBytes;
pub use crc16::{crc16, key_hash_slot};
pub use dict::{prefetch_ptr, ChainNode, ChainNodeMut, Dict, RawDict, WalkPos};
pub use glob::glob_match;
pub use listpack::{Listpack, LpEntry};
pub use num::string2ll;
pub use quicklist::QuickList;
pub use tiny::TinyBytes;
