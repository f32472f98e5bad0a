//! `mod common;` of `tests/replication_chain.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
