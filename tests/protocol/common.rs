//! `mod common;` of `tests/protocol.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
