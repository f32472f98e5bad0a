//! Replication, the runtime's side (issue 25). The master side lives in
//! [`master`] (syncs, the stream's consumers, WAIT's acknowledgements,
//! the replication cron), [`link`] (one attached replica's socket) and
//! [`spill`] (a syncing replica's pending stream, on disk).
//! The shared state (role, IDs, offsets, backlog, the replicas as INFO
//! shows them) is `commands::repl`.

pub mod link;
pub mod master;

pub use master::{adopt, cron_due, init, wait_ticket};
pub mod replica;
pub mod spill;
