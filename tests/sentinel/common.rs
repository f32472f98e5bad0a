//! `mod common;` of `tests/sentinel.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
