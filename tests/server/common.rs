//! `mod common;` of `tests/server.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
