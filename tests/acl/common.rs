//! `mod common;` of `tests/acl.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
