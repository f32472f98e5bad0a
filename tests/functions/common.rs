//! `mod common;` of `tests/functions.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
