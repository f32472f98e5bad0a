//! `commands::fuzzing::restore_hll`: see that function and fuzz/README.md.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    commands::fuzzing::restore_hll(data);
});
