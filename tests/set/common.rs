//! `mod common;` of `tests/set.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
