//! `mod common;` of `tests/script_clock.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
