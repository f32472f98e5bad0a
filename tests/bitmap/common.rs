//! `mod common;` of `tests/bitmap.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
