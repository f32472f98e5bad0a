//! `mod common;` of `tests/busy_in_place.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
