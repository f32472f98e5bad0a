//! `mod common;` of `tests/shutdown.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
