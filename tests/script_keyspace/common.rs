//! `mod common;` of `tests/script_keyspace.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
