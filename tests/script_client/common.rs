//! `mod common;` of `tests/script_client.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
