//! `mod common;` of `tests/busy_own_loop.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
