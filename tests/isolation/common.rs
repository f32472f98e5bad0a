//! `mod common;` of `tests/isolation.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
