//! Keyspace nodes: one allocation per key, holding the table's chain link,
//! the key's metadata, the key's bytes and its value.
//!
//! Owns: the memory layout of a stored key. [`KeyNode`] is the owning
//! handle the key table chains (it implements [`ds::dict::ChainNode`]); a
//! stored key is seen as an [`Entry`], a dynamically sized view of the
//! node past its link, so it can be borrowed and changed in place but
//! never moved out of its node (a `&mut Entry` cannot be swapped or
//! replaced: `Entry` is not `Sized`). [`OwnedEntry`] is a key's value and
//! metadata outside any table (to insert, or once removed).
//!
//! # Layout
//!
//! ```text
//!  0  next link             8   (the table's; never touched here)
//!  8  Meta                  8   access time, LFU data, flags
//! 16  tag                   1   kind (2 bits) | key length (6 bits)
//! 17  key                       [u64 length first if 63 bytes or more]
//!     payload, by kind:
//!       VALUE      a `Value` (24 bytes) at the next multiple of 8
//!       BYTES      the string's length (u32) and its bytes
//!       CONVERTED  the length (u32), then a `Value` at the next multiple
//!                  of 8: a BYTES string changed in place
//! ```
//!
//! # Why
//!
//! A string longer than [`INLINE_MAX`] bytes (Redis's `embstr`/`raw`) cost
//! two allocations before: a 56-byte node (link, 16-byte key handle, 24-byte
//! `Value`, 8 bytes of metadata: a 64-byte glibc chunk) and the bytes
//! (100 bytes: a 112-byte chunk). Stored here it is one node of
//! 17 + key + 4 + 100 bytes, a 144-byte chunk for a key of up to 11 bytes:
//! 32 bytes less per key. `bench/memory.sh`, 100-byte values, RSS per key
//! against Redis 7: 1M keys 185.1 -> 153.0 (0.97x -> 0.80x), 10M keys
//! 184.1 -> 152.1 (0.93x -> 0.76x). Every other value keeps its 24-byte
//! `Value`; with the key inline, the node of a key of up to 15 bytes stays
//! within 56 bytes (the 64-byte chunk) as before, and a longer key no
//! longer costs an allocation of its own.
//!
//! Only strings of up to [`BYTES_MAX`] bytes are stored this way: beyond
//! that the 32 bytes are noise, and a `Value` moves in O(1) where bytes
//! in a node are copied (RENAME, MOVE, and taking a key out of a table).
//!
//! Changing such a string in place (APPEND, SETRANGE, INCR...) goes through
//! [`Entry::value_mut`], which converts it to a `Value` in the same node
//! (CONVERTED: nodes of BYTES kind are sized so the `Value` fits), as
//! Redis turns an `embstr` into a `raw` string before changing it.
//!
//! # Safety
//!
//! All `unsafe` code of the layout is in this file. Invariants:
//! * the allocation is `size(tag, key length, string length)` bytes,
//!   aligned to 8, and starts with an `Option<KeyNode>`;
//! * a VALUE or CONVERTED node holds an initialised `Value` at its payload
//!   offset, a BYTES node none;
//! * the tag and the lengths never change, except the kind from BYTES to
//!   CONVERTED (which keeps the size).

use std::alloc::{self, Layout};
use std::mem::{self, ManuallyDrop};
use std::ops::{Deref, DerefMut};
use std::ptr::{self, NonNull};

use crate::lfu::{self, LfuParams, LFU_INIT_VAL};
use crate::value::{Str, StrRef, Value, ValueRef, EMBSTR_MAX, INLINE_MAX};

/// Offset of the metadata (after the link).
const META_AT: usize = 8;
/// Offset of the tag byte.
const TAG_AT: usize = 16;
/// Offset of the key (or of its long length).
const KEY_AT: usize = 17;
/// The node's fixed part: link, metadata and tag (what Redis's
/// `dictEntry` is to its table), for MEMORY STATS.
pub const HEAD_SIZE: usize = KEY_AT;
/// Key lengths from this on are stored as a `u64` before the key.
const KLEN_LONG: usize = 63;
/// Bytes of a long key's length.
const KLEN_BYTES: usize = 8;
/// Longest string stored as bytes in its node (see the module docs).
pub const BYTES_MAX: usize = 4096;
const KIND_SHIFT: u32 = 6;
const KIND_VALUE: u8 = 0;
const KIND_BYTES: u8 = 1;
const KIND_CONVERTED: u8 = 2;
const VALUE_SIZE: usize = mem::size_of::<Value>();

const _: () = assert!(mem::size_of::<Value>() == 24);
const _: () = assert!(mem::align_of::<Value>() <= 8);
const _: () = assert!(mem::size_of::<Option<KeyNode>>() == 8);
const _: () = assert!(mem::size_of::<Meta>() == 8);

#[inline]
const fn align8(n: usize) -> usize {
    (n + 7) & !7
}

/// Bit 7 of [`Meta::flags`]: the key has a deadline in `volatile`.
pub(crate) const TTL_BIT: u8 = 0x80;
/// [`Meta::flags`]: the snapshot stamp; epochs count modulo 128.
pub(crate) const STAMP_MASK: u8 = 0x7f;

/// A stored key's metadata (8 bytes).
///
/// Access tracking: Redis keeps either LRU data (the access clock) or LFU
/// data (counter + last decrement minute) in one 24-bit field, by policy.
/// We keep both, in separate fields, and a touch updates only the one the
/// policy uses; switching policies at runtime then reads stale data for the
/// other (Redis shows meaningless values until keys are touched again).
///
/// The expiry deadline is not here: it lives in the database's `volatile`
/// dict, and a flag bit here says whether there is one (so a key without a
/// TTL costs one lookup, a key with one two, as in Redis).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Meta {
    /// Last access, in seconds since the Unix epoch (truncated), for
    /// OBJECT IDLETIME and LRU eviction. Not updated under an LFU policy.
    pub access_s: u32,
    /// LFU "last decrement time": Unix minutes modulo 2^16 (see
    /// [`crate::lfu`]). Updated only under an LFU policy.
    pub lfu_ldt_min: u16,
    /// LFU logarithmic access counter; starts at [`LFU_INIT_VAL`].
    pub lfu_counter: u8,
    /// Bit 7 ([`TTL_BIT`]): the key has a deadline in `volatile`. Bits
    /// 0-6: the snapshot stamp, equal to the database's epoch once this
    /// entry is accounted for by the running snapshot (written, or created
    /// after it began); see [`crate::snapshot`]. Set by `Db::insert`.
    flags: u8,
}

impl Meta {
    pub fn new(now_ms: u64) -> Self {
        Meta {
            access_s: (now_ms / 1000) as u32,
            lfu_ldt_min: lfu::minutes(now_ms),
            lfu_counter: LFU_INIT_VAL,
            flags: 0,
        }
    }
    /// Whether the key has a deadline (in its database's `volatile` dict;
    /// `Db::expire_at` reads it).
    #[inline]
    pub fn has_ttl(&self) -> bool {
        self.flags & TTL_BIT != 0
    }
    #[inline]
    pub(crate) fn set_ttl_flag(&mut self, on: bool) {
        self.flags = (self.flags & !TTL_BIT) | if on { TTL_BIT } else { 0 };
    }
    /// The snapshot stamp (see [`crate::snapshot`]).
    #[inline]
    pub(crate) fn stamp(&self) -> u8 {
        self.flags & STAMP_MASK
    }
    #[inline]
    pub(crate) fn set_stamp(&mut self, epoch: u8) {
        self.flags = (self.flags & TTL_BIT) | (epoch & STAMP_MASK);
    }
    #[inline]
    pub fn touch(&mut self, now_ms: u64) {
        self.access_s = (now_ms / 1000) as u32;
    }
    /// Seconds since the last access.
    pub fn idle_s(&self, now_ms: u64) -> u64 {
        ((now_ms / 1000) as u32).wrapping_sub(self.access_s) as u64
    }
    /// Records an access under an LFU policy (Redis's `updateLFU`): decay
    /// the counter for the minutes since its last decrement, increment it
    /// logarithmically, and stamp the current minute.
    #[inline]
    pub fn touch_lfu(&mut self, now_ms: u64, p: LfuParams, rng: &mut impl rand::Rng) {
        let c = lfu::decayed(self.lfu_counter, self.lfu_ldt_min, now_ms, p.decay_time_min);
        self.lfu_counter = lfu::log_incr(c, p.log_factor, rng);
        self.lfu_ldt_min = lfu::minutes(now_ms);
    }
    /// The LFU counter as OBJECT FREQ reports it (Redis's
    /// `LFUDecrAndReturn`): decayed to `now_ms`, nothing stored.
    pub fn lfu_freq(&self, now_ms: u64, p: LfuParams) -> u8 {
        lfu::decayed(self.lfu_counter, self.lfu_ldt_min, now_ms, p.decay_time_min)
    }
}

/// A key's value and metadata outside any table: what goes into a
/// database and what comes out of one.
#[derive(Debug, Clone)]
pub struct OwnedEntry {
    pub value: Value,
    pub meta: Meta,
}

impl OwnedEntry {
    pub fn new(value: Value, now_ms: u64) -> Self {
        OwnedEntry {
            value,
            meta: Meta::new(now_ms),
        }
    }
}

impl Deref for OwnedEntry {
    type Target = Meta;
    fn deref(&self) -> &Meta {
        &self.meta
    }
}

impl DerefMut for OwnedEntry {
    fn deref_mut(&mut self) -> &mut Meta {
        &mut self.meta
    }
}

/// A stored key, in its node: metadata, then the key and the value in the
/// node's layout (see the module docs). Borrowed only (`&Entry`,
/// `&mut Entry`): it is unsized, so it cannot leave its node.
#[repr(C)]
pub struct Entry {
    meta: Meta,
    tag: u8,
    data: [u8],
}

/// Where a node's parts are (offsets from the node's start).
#[derive(Clone, Copy)]
struct Parts {
    kind: u8,
    key_at: usize,
    key_len: usize,
    /// VALUE: the `Value`; BYTES and CONVERTED: the string's length field.
    payload_at: usize,
}

impl Parts {
    /// The string's bytes (BYTES) follow its length field.
    #[inline]
    fn bytes_at(self) -> usize {
        self.payload_at + 4
    }
    /// Where the `Value` is (VALUE, CONVERTED).
    #[inline]
    fn value_at(self) -> usize {
        if self.kind == KIND_VALUE {
            self.payload_at
        } else {
            align8(self.payload_at + 4)
        }
    }
}

/// The node size of a VALUE node whose key ends at `key_end`.
#[inline]
fn value_node_size(key_end: usize) -> usize {
    align8(key_end) + VALUE_SIZE
}

/// The node size of a BYTES (or CONVERTED) node whose key ends at
/// `key_end`, for a string of `n` bytes: room for the bytes, and for a
/// `Value` in their place. A multiple of 8, as every node size: the
/// `Entry` view's size is rounded up to its alignment, and must not pass
/// the node's end (glibc's chunks are multiples of 16 anyway, so this
/// costs nothing).
#[inline]
fn bytes_node_size(key_end: usize, n: usize) -> usize {
    align8((key_end + 4 + n).max(align8(key_end + 4) + VALUE_SIZE))
}

/// The owning handle of one key's node (see the module docs): a thin
/// pointer, freed with its value when dropped. Transparent over
/// `NonNull`, so an all-zero `Option<KeyNode>` is `None` (the table's
/// buckets start zeroed).
#[repr(transparent)]
pub struct KeyNode(NonNull<u8>);

// SAFETY: a `KeyNode` owns its allocation and what it holds (a `Value`,
// which is `Send` and `Sync`, or plain bytes) exclusively, like a `Box`;
// it has no interior mutability.
unsafe impl Send for KeyNode {}
// SAFETY: as above: shared access only reads.
unsafe impl Sync for KeyNode {}

impl KeyNode {
    /// A node for `key` holding `e`. A string of more than [`INLINE_MAX`]
    /// and at most [`BYTES_MAX`] bytes that is not an integer
    /// (`embstr`/`raw` as created) is stored as bytes in the node; any
    /// other value as a `Value`.
    pub fn new(key: &[u8], e: OwnedEntry) -> KeyNode {
        match &e.value {
            Value::Str(Str::Emb(b) | Str::Raw(b)) if b.len() <= BYTES_MAX => {
                Self::with_bytes(key, e.meta, b)
            }
            _ => Self::with_value(key, e.meta, e.value),
        }
    }

    /// A node for `key` holding `e` as a `Value` whatever it is; a string
    /// becomes growable (`raw`), for a change in place.
    pub fn new_value(key: &[u8], mut e: OwnedEntry) -> KeyNode {
        if let Value::Str(s) = &mut e.value {
            s.make_raw();
        }
        Self::with_value(key, e.meta, e.value)
    }

    /// A node for `key` whose value is the string `bytes`, stored as bytes
    /// if it is longer than [`INLINE_MAX`] (the caller has ruled out the
    /// integer form: this is `Str::from_bytes_no_int`'s encoding).
    pub fn new_str(key: &[u8], meta: Meta, bytes: &[u8]) -> KeyNode {
        if bytes.len() > INLINE_MAX && bytes.len() <= BYTES_MAX {
            Self::with_bytes(key, meta, bytes)
        } else {
            Self::with_value(key, meta, Value::Str(Str::from_bytes_no_int(bytes)))
        }
    }

    /// Allocates a node of `size` bytes and writes its link, metadata, tag
    /// and key; the payload is left to the caller. Returns the node and
    /// where its key ends.
    fn alloc_head(
        key: &[u8],
        meta: Meta,
        kind: u8,
        size_of: impl Fn(usize) -> usize,
    ) -> (Self, usize) {
        let long = key.len() >= KLEN_LONG;
        let key_at = if long { KEY_AT + KLEN_BYTES } else { KEY_AT };
        let key_end = key_at + key.len();
        let size = size_of(key_end);
        let layout = Layout::from_size_align(size, 8).expect("key node size");
        // SAFETY: `size` is at least KEY_AT + 24 > 0.
        let p = unsafe { alloc::alloc(layout) };
        let Some(p) = NonNull::new(p) else {
            alloc::handle_alloc_error(layout)
        };
        let klen6 = if long { KLEN_LONG } else { key.len() } as u8;
        // SAFETY: every write is within the `size` bytes just allocated
        // (key_end <= size), at offsets aligned for its type (the
        // allocation is 8-aligned; a long key's length is written
        // unaligned).
        unsafe {
            ptr::write(p.as_ptr() as *mut Option<KeyNode>, None);
            ptr::write(p.as_ptr().add(META_AT) as *mut Meta, meta);
            ptr::write(p.as_ptr().add(TAG_AT), (kind << KIND_SHIFT) | klen6);
            if long {
                ptr::write_unaligned(p.as_ptr().add(KEY_AT) as *mut u64, key.len() as u64);
            }
            ptr::copy_nonoverlapping(key.as_ptr(), p.as_ptr().add(key_at), key.len());
        }
        (KeyNode(p), key_end)
    }

    fn with_value(key: &[u8], meta: Meta, value: Value) -> KeyNode {
        let (node, key_end) = Self::alloc_head(key, meta, KIND_VALUE, value_node_size);
        // SAFETY: a VALUE node has room for a `Value` at align8(key_end),
        // which is 8-aligned in an 8-aligned allocation.
        unsafe { ptr::write(node.0.as_ptr().add(align8(key_end)) as *mut Value, value) };
        node
    }

    fn with_bytes(key: &[u8], meta: Meta, bytes: &[u8]) -> KeyNode {
        let n = bytes.len();
        debug_assert!(n <= BYTES_MAX);
        let len = n as u32;
        let (node, key_end) = Self::alloc_head(key, meta, KIND_BYTES, |e| bytes_node_size(e, n));
        // SAFETY: a BYTES node has room for the length and `n` bytes after
        // the key (bytes_node_size).
        unsafe {
            let p = node.0.as_ptr().add(key_end);
            ptr::write_unaligned(p as *mut u32, len);
            ptr::copy_nonoverlapping(bytes.as_ptr(), p.add(4), n);
        }
        node
    }

    #[inline]
    fn parts(&self) -> Parts {
        // SAFETY: the tag and, for a long key, its length were written at
        // allocation and never change (the kind only from BYTES to
        // CONVERTED, through `&mut self` or `&mut Entry`).
        unsafe { parts_at(self.0.as_ptr()) }
    }

    /// The node's size (its allocation's).
    pub fn size(&self) -> usize {
        let p = self.parts();
        let key_end = p.key_at + p.key_len;
        if p.kind == KIND_VALUE {
            value_node_size(key_end)
        } else {
            bytes_node_size(key_end, self.str_len(p))
        }
    }

    /// The length field of a BYTES or CONVERTED node.
    #[inline]
    fn str_len(&self, p: Parts) -> usize {
        // SAFETY: such a node has its u32 length at `payload_at`.
        unsafe { ptr::read_unaligned(self.0.as_ptr().add(p.payload_at) as *const u32) as usize }
    }

    /// The key's bytes.
    #[inline]
    pub fn key(&self) -> &[u8] {
        let p = self.parts();
        // SAFETY: the key's bytes are at key_at, written at allocation and
        // never changed; the borrow of `self` keeps the node alive.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().add(p.key_at), p.key_len) }
    }

    /// The stored key, borrowed.
    #[inline]
    pub fn entry(&self) -> &Entry {
        // SAFETY: the entry view covers the node from its metadata to its
        // end (`entry_ptr`); shared, as `self` is.
        unsafe { &*self.entry_ptr() }
    }

    /// The stored key, to change in place.
    #[inline]
    pub fn entry_mut(&mut self) -> &mut Entry {
        // SAFETY: as `entry`, and `&mut self` makes the access exclusive
        // (the table reaches the link, outside this range, only through
        // `&mut` access to the node too).
        unsafe { &mut *self.entry_ptr() }
    }

    /// The `Entry` fat pointer: from META_AT to the end of the node, the
    /// slice tail starting at KEY_AT.
    #[inline]
    fn entry_ptr(&self) -> *mut Entry {
        let tail = self.size() - KEY_AT;
        // SAFETY (of the cast): `Entry` is `repr(C)` with a `[u8]` tail at
        // offset KEY_AT - META_AT (Meta is 8 bytes, the tag 1), so a slice
        // pointer of the tail's length is its pointer metadata.
        let p = ptr::slice_from_raw_parts_mut(
            // SAFETY: META_AT is within the allocation.
            unsafe { self.0.as_ptr().add(META_AT) },
            tail,
        );
        p as *mut Entry
    }

    /// The value and metadata, taking the value out of the node (a string
    /// stored as bytes becomes a `Str` again, as `Str::from_bytes_no_int`
    /// would encode it); the node is freed.
    pub fn into_owned(self) -> OwnedEntry {
        let this = ManuallyDrop::new(self);
        let p = this.parts();
        let meta = this.entry().meta;
        let value = if p.kind == KIND_BYTES {
            Value::Str(this.entry().value_str_bytes(p).to_owned_str())
        } else {
            // SAFETY: a VALUE/CONVERTED node holds an initialised `Value`;
            // it is read out once and the node freed without dropping it.
            unsafe { ptr::read(this.0.as_ptr().add(p.value_at()) as *const Value) }
        };
        // SAFETY: the node is not used again (ManuallyDrop), and its value
        // was moved out above.
        unsafe { this.free() };
        OwnedEntry { value, meta }
    }

    /// Frees the allocation without dropping the value.
    ///
    /// # Safety
    /// The node must not be used afterwards, and its value must have been
    /// moved out or dropped.
    unsafe fn free(&self) {
        let layout = Layout::from_size_align(self.size(), 8).expect("key node size");
        // SAFETY: the allocation was made with this layout (`size` is a
        // function of what never changes, see `alloc_head`).
        unsafe { alloc::dealloc(self.0.as_ptr(), layout) };
    }
}

impl Drop for KeyNode {
    fn drop(&mut self) {
        let p = self.parts();
        if p.kind != KIND_BYTES {
            // SAFETY: a VALUE/CONVERTED node holds an initialised `Value`,
            // dropped once here.
            unsafe { ptr::drop_in_place(self.0.as_ptr().add(p.value_at()) as *mut Value) };
        }
        // The table unlinks a node before dropping it; a chain is dropped
        // link by link by the table (iteratively), so `next` is None here
        // or dropped normally (short chains only).
        // SAFETY: the node is being dropped; its value was dropped above.
        unsafe {
            ptr::drop_in_place(self.0.as_ptr() as *mut Option<KeyNode>);
            self.free();
        }
    }
}

// SAFETY: `Option<KeyNode>` is pointer-sized with `None` all zeroes (a
// `NonNull` niche); the link is the node's first 8 bytes, written at
// allocation; the key never changes while the node exists.
unsafe impl ds::dict::ChainNode for KeyNode {
    type Key = [u8];
    #[inline]
    fn next(&self) -> &Option<KeyNode> {
        // SAFETY: the link is at offset 0, initialised at allocation; the
        // borrow follows `self`'s.
        unsafe { &*(self.0.as_ptr() as *const Option<KeyNode>) }
    }
    #[inline]
    fn next_mut(&mut self) -> &mut Option<KeyNode> {
        // SAFETY: as `next`, exclusive through `&mut self`; it does not
        // overlap the `Entry` view.
        unsafe { &mut *(self.0.as_ptr() as *mut Option<KeyNode>) }
    }
    #[inline]
    fn key(&self) -> &[u8] {
        KeyNode::key(self)
    }
    #[inline]
    fn prefetch_addr(&self) -> *const u8 {
        self.0.as_ptr()
    }
}

impl ds::dict::ChainNodeMut for KeyNode {
    type PayloadMut<'a> = &'a mut Entry;
    #[inline]
    fn link_and_payload_mut(&mut self) -> (&mut Option<KeyNode>, &mut Entry) {
        let e = self.entry_ptr();
        // SAFETY: the link ([0, 8)) and the entry ([8, end)) do not
        // overlap; both are exclusive through `&mut self`.
        unsafe { (&mut *(self.0.as_ptr() as *mut Option<KeyNode>), &mut *e) }
    }
}

impl std::fmt::Debug for KeyNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyNode")
            .field("key", &String::from_utf8_lossy(self.key()))
            .field("entry", &self.entry())
            .finish()
    }
}

/// The parts of the node at `base`.
///
/// # Safety
/// `base` must be a live node.
#[inline]
unsafe fn parts_at(base: *const u8) -> Parts {
    // SAFETY: the caller's contract; the tag and a long key's length are
    // within the node.
    unsafe {
        let tag = *base.add(TAG_AT);
        let kind = tag >> KIND_SHIFT;
        let k6 = (tag & ((1 << KIND_SHIFT) - 1)) as usize;
        let (key_at, key_len) = if k6 == KLEN_LONG {
            let n = ptr::read_unaligned(base.add(KEY_AT) as *const u64) as usize;
            (KEY_AT + KLEN_BYTES, n)
        } else {
            (KEY_AT, k6)
        };
        let key_end = key_at + key_len;
        let payload_at = if kind == KIND_VALUE {
            align8(key_end)
        } else {
            key_end
        };
        Parts {
            kind,
            key_at,
            key_len,
            payload_at,
        }
    }
}

impl Entry {
    /// The node's start (the entry is at META_AT in it).
    #[inline]
    fn base(&self) -> *const u8 {
        // SAFETY: an `Entry` exists only inside a node, at META_AT.
        unsafe { (self as *const Entry as *const u8).sub(META_AT) }
    }

    /// A pointer to node offset `at`, derived from this entry's own
    /// reference (whose range is [META_AT, end of node)).
    #[inline]
    fn at(&self, at: usize) -> *const u8 {
        debug_assert!(at >= KEY_AT);
        // SAFETY: `at` is within the node past the tag (callers pass offsets
        // from `parts`), so within `data`.
        unsafe { self.data.as_ptr().add(at - KEY_AT) }
    }

    /// [`Entry::at`] for writing, derived from `&mut self`.
    #[inline]
    fn at_mut(&mut self, at: usize) -> *mut u8 {
        debug_assert!(at >= KEY_AT);
        // SAFETY: as `at`.
        unsafe { self.data.as_mut_ptr().add(at - KEY_AT) }
    }

    #[inline]
    fn parts(&self) -> Parts {
        // SAFETY: an `Entry` is inside a live node (`base`). Reading the
        // tag and long length goes through `self`'s range.
        unsafe { parts_at(self.base()) }
    }

    /// The key's bytes.
    #[inline]
    pub fn key(&self) -> &[u8] {
        let p = self.parts();
        // SAFETY: the key is within `data`, borrowed with `self`.
        unsafe { std::slice::from_raw_parts(self.at(p.key_at), p.key_len) }
    }

    /// The value, borrowed.
    #[inline]
    pub fn value(&self) -> ValueRef<'_> {
        let p = self.parts();
        if p.kind == KIND_BYTES {
            ValueRef::Str(self.value_str_bytes(p))
        } else {
            // SAFETY: a VALUE/CONVERTED node holds an initialised, aligned
            // `Value` at value_at, within `data`.
            ValueRef::from(unsafe { &*(self.at(p.value_at()) as *const Value) })
        }
    }

    /// A BYTES node's string.
    #[inline]
    fn value_str_bytes(&self, p: Parts) -> StrRef<'_> {
        // SAFETY: a BYTES node has its u32 length at payload_at and that
        // many bytes after it, within `data`.
        unsafe {
            let n = ptr::read_unaligned(self.at(p.payload_at) as *const u32) as usize;
            StrRef::Bytes(std::slice::from_raw_parts(self.at(p.bytes_at()), n))
        }
    }

    /// The value, to change in place. Readers use [`Entry::value`]: a
    /// string stored as bytes becomes a `Str` here (in the same node), as
    /// Redis makes an `embstr` a `raw` string before changing it; what it
    /// holds is unchanged.
    #[inline]
    pub fn value_mut(&mut self) -> &mut Value {
        let p = self.parts();
        if p.kind == KIND_BYTES {
            self.convert(p);
        }
        let p = self.parts();
        // SAFETY: now a VALUE/CONVERTED node, holding an initialised,
        // aligned `Value` at value_at within `data`, borrowed exclusively.
        unsafe { &mut *(self.at_mut(p.value_at()) as *mut Value) }
    }

    /// The string, to change in place where it is, if that needs no new
    /// node: `None` for a string stored as bytes in its node (change it
    /// through `Db::str_mut`, which moves it to a node holding a `Str`)
    /// and for another type. Saves the second lookup of `Db::str_mut`
    /// after a `Shard::lookup_write` (which already readied the entry for
    /// a change).
    #[inline]
    pub fn str_in_place(&mut self) -> Option<&mut Str> {
        if self.parts().kind == KIND_BYTES {
            return None;
        }
        match self.value_mut() {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The string's bytes, to change in place without changing their
    /// length, if that keeps its encoding without moving the node: the
    /// bytes of a BYTES node longer than [`EMBSTR_MAX`] (it reads `raw`
    /// by its length, as Redis's string changed in place), those of a
    /// `Str` (made `raw` first). `None` for a BYTES string of up to
    /// [`EMBSTR_MAX`] bytes (`embstr`: `Db::str_mut` must move it) and
    /// for another type.
    pub fn raw_bytes_mut(&mut self) -> Option<&mut [u8]> {
        let p = self.parts();
        if p.kind == KIND_BYTES {
            // SAFETY: a BYTES node has its u32 length at payload_at and
            // that many bytes after it, within `data`, borrowed
            // exclusively with `self`; the length is not changed.
            unsafe {
                let n = ptr::read_unaligned(self.at(p.payload_at) as *const u32) as usize;
                if n <= EMBSTR_MAX {
                    return None;
                }
                return Some(std::slice::from_raw_parts_mut(self.at_mut(p.bytes_at()), n));
            }
        }
        match self.value_mut() {
            Value::Str(s) => Some(s.make_raw().as_mut_slice()),
            _ => None,
        }
    }

    /// BYTES -> CONVERTED: writes a `Str` holding the bytes at the
    /// CONVERTED value offset (the node was sized for it) and sets the
    /// kind. The length field stays (it sizes the node).
    #[cold]
    fn convert(&mut self, p: Parts) {
        let s = self.value_str_bytes(p).to_owned_str();
        let conv = Parts {
            kind: KIND_CONVERTED,
            ..p
        };
        // SAFETY: bytes_node_size leaves room for a `Value` at
        // align8(payload_at + 4) (8-aligned); the bytes it overwrites were
        // copied into `s` above. The tag is in `self`'s range.
        unsafe {
            ptr::write(self.at_mut(conv.value_at()) as *mut Value, Value::Str(s));
        }
        self.tag = (KIND_CONVERTED << KIND_SHIFT) | (self.tag & ((1 << KIND_SHIFT) - 1));
    }

    /// A copy of the value and metadata, owned.
    pub fn to_owned_entry(&self) -> OwnedEntry {
        OwnedEntry {
            value: self.value().to_owned_value(),
            meta: self.meta,
        }
    }
}

impl Deref for Entry {
    type Target = Meta;
    #[inline]
    fn deref(&self) -> &Meta {
        &self.meta
    }
}

impl DerefMut for Entry {
    #[inline]
    fn deref_mut(&mut self) -> &mut Meta {
        &mut self.meta
    }
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("meta", &self.meta)
            .field("value", &self.value())
            .finish()
    }
}

#[cfg(test)]
mod tests;
