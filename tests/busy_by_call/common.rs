//! `mod common;` of `tests/busy_by_call.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
