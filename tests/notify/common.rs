//! `mod common;` of `tests/notify.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
