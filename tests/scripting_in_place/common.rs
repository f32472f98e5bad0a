//! `mod common;` of `tests/scripting_in_place.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
