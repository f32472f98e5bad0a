//! `mod common;` of `tests/eviction.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
