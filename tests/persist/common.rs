//! `mod common;` of `tests/persist.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
