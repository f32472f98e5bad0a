//! `mod common;` of `tests/tracking.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
