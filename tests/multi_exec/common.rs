//! `mod common;` of `tests/multi_exec.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
