//! `mod common;` of `tests/hash.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
