//! Collection types. Each module owns one type's representation: its
//! compact and scalable encodings, the conversion between them at the
//! thresholds in [`EncLimits`], and the operations the commands need.
//! Nothing here builds a reply.
//!
//! Every type keeps `size_of::<Value>()` unchanged (checked in `value`):
//! the large representations live behind a `Box`.

pub mod hash;
pub mod list;
pub mod set;
pub mod stream;
pub mod zset;

pub use hash::Hash;
pub use list::List;
pub use set::Set;
pub use stream::Stream;
pub use zset::ZSet;

/// Encoding thresholds, Redis's directives of the same names. The owning
/// loop copies them from the configuration at start and after CONFIG SET.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncLimits {
    pub hash_max_listpack_entries: usize,
    pub hash_max_listpack_value: usize,
    pub set_max_intset_entries: usize,
    pub set_max_listpack_entries: usize,
    pub set_max_listpack_value: usize,
    pub zset_max_listpack_entries: usize,
    pub zset_max_listpack_value: usize,
    /// Positive: entries per list node; negative: node byte-size class
    /// (-1 = 4 KiB, -2 = 8 KiB, -3 = 16 KiB, -4 = 32 KiB, -5 = 64 KiB).
    pub list_max_listpack_size: i32,
    pub list_compress_depth: u32,
    /// A sparse HyperLogLog whose string would grow past this many bytes
    /// is promoted to dense (`hll-sparse-max-bytes`; see `ds::hll`).
    pub hll_sparse_max_bytes: usize,
    /// Where a stream starts a new node (`stream-node-max-bytes`,
    /// `stream-node-max-entries`).
    pub stream_node: stream::NodeLimits,
}

impl Default for EncLimits {
    /// Redis's defaults.
    fn default() -> Self {
        EncLimits {
            hash_max_listpack_entries: 512,
            hash_max_listpack_value: 64,
            set_max_intset_entries: 512,
            set_max_listpack_entries: 128,
            set_max_listpack_value: 64,
            zset_max_listpack_entries: 128,
            zset_max_listpack_value: 64,
            list_max_listpack_size: -2,
            list_compress_depth: 0,
            hll_sparse_max_bytes: ds::hll::SPARSE_MAX_BYTES_DEFAULT,
            stream_node: stream::NodeLimits::default(),
        }
    }
}
