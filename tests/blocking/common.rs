//! `mod common;` of `tests/blocking.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
