//! `mod common;` of `tests/differential.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
