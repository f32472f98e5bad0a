//! `mod common;` of `tests/stream.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
