//! `mod common;` of `tests/output_buffer.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
