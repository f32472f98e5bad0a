//! `mod common;` of `tests/geo.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
