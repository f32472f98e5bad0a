//! `mod common;` of `tests/clients.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
