//! `mod common;` of `tests/script_stale.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
