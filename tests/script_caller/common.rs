//! `mod common;` of `tests/script_caller.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
