//! `mod common;` of `tests/sort.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
