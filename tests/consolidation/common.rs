//! `mod common;` of `tests/consolidation.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
