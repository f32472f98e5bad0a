//! `mod common;` of `tests/hll.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
