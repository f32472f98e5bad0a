//! The command layer: the command table, one module per command family,
//! and the coordinator side of multi-shard commands.
//!
//! Layering: this crate knows the engine's data (through shard handlers and
//! jobs) and the protocol's reply encoder, but no sockets and no threads.
//! One exception, as in Redis: MIGRATE (`migrate`) talks to its target
//! over a blocking client socket of its own, bounded by its timeout.
//! The runtime (the `tessera` binary) resolves each request here
//! ([`table::registry`]), decides where it runs with [`table::target`], and
//! calls [`exec::run_shard`] / [`exec::run_conn`] or drives a
//! [`coord::Coordinator`].

pub mod acl;
pub mod admit;
pub mod bitmap;
pub mod clock;
pub mod cluster;
pub mod connection;
pub mod coord;
pub mod ctx;
pub mod digest;
pub mod dispatch;
pub mod docs;
pub mod dump;
pub mod error;
pub mod exec;
#[doc(hidden)]
pub mod fuzzing;
pub mod geo;
pub mod hash;
pub mod hll;
pub mod keys;
pub mod keyspecs;
pub mod list;
pub mod lolwut;
pub mod memory;
pub mod migrate;
pub mod module;
pub mod multi;
pub mod multikey;
pub mod ops;
pub mod persist;
pub mod propagate;
pub mod pubsub;
pub mod repl;
pub mod replica;
pub mod scratch;
pub mod script;
pub mod server;
pub mod set;
pub mod sort;
pub mod stream;
pub mod strings;
pub mod table;
#[doc(hidden)]
pub mod testutil;
pub mod tracking;
pub mod tx;
pub mod util;
pub mod zset;

pub use ctx::{
    BlockOn, ClientState, ConnCtx, ReplyMode, Sender, ServerShared, ShardCtx, ThreadStats,
};
pub use error::CmdError;
pub use table::{registry, Exec, Resolved, Target};
