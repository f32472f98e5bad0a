//! `mod common;` of `tests/scripting_lend.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
