//! `mod common;` of `tests/ops.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
