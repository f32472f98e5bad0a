//! `mod common;` of `tests/scripting_state.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
