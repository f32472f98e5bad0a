//! `mod common;` of `tests/busy_script.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
