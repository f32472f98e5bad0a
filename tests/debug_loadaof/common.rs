//! `mod common;` of `tests/debug_loadaof.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
