//! `resp::parse_request` on arbitrary bytes, whole and split in two: the
//! harness and its properties are `commands::fuzzing::parse_request` (a
//! stable unit test runs it too, see `commands::fuzzing::bounded`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    commands::fuzzing::parse_request(data);
});
