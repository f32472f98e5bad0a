//! `mod common;` of `tests/replication_tessera.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
