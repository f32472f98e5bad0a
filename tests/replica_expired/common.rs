//! `mod common;` of `tests/replica_expired.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
