//! `mod common;` of `tests/zset.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
