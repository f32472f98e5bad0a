//! `mod common;` of `tests/locks_one_round.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
