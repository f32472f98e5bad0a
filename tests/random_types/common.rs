//! `mod common;` of `tests/random_types.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
