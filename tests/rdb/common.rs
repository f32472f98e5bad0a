//! `mod common;` of `tests/rdb.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
