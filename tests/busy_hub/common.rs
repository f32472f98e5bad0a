//! `mod common;` of `tests/busy_hub.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
