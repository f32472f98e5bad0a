//! `mod common;` of `tests/replication_demote.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
